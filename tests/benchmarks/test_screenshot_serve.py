"""benchmarks/screenshot_serve.py's options (the browser it starts is driven by tests/serve/test_page.py)."""

import sys

import pytest
from conftest import REPO_ROOT

sys.path.insert(0, str(REPO_ROOT / "benchmarks"))
from screenshot_serve import parse_args  # noqa: E402


def test_the_screenshot_goes_to_the_docs_png_unless_told_otherwise(tmp_path, capsys):
    args = parse_args(["--model", "en-de=demo-output"])
    assert args.output == REPO_ROOT / "docs" / "images" / "serve-page.png" and args.model == "en-de=demo-output"
    with pytest.raises(SystemExit) as refused:
        parse_args(["--model", "m", "--output", str(tmp_path / "page.jpg")])
    assert refused.value.code == 2 and "give a .png file" in capsys.readouterr().err
