"""The built distribution: which import names it adds, and that its data files (model card template, metric scripts,
the translation page) ship inside the `vaswani` package."""

from __future__ import annotations

import subprocess
import sys
import zipfile

import pytest
from conftest import REPO_ROOT


@pytest.mark.slow
def test_wheel_adds_only_our_import_names_and_ships_its_data_files(tmp_path):
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation", "-w", str(tmp_path),
         str(REPO_ROOT)],
        check=True, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    (wheel,) = tmp_path.glob("vaswani-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    top_level = {name.split("/")[0] for name in names if not name.split("/")[0].endswith(".dist-info")}
    # modeling_vaswani (import registers the Auto classes) and tokenization are public names; no template package
    assert top_level == {"modeling_vaswani", "tokenization", "vaswani"}
    assert "vaswani/hub/templates/translation.md" in names
    assert not any(name.startswith("vaswani/hub/templates/") and name.endswith(".py") for name in names)
    assert {"vaswani/metrics/sacrebleu/sacrebleu.py", "vaswani/metrics/chrf/chrf.py"} <= set(names)
    # the translation page of `vaswani serve` (vaswani.serve.page reads them from the package)
    assert {f"vaswani/serve/static/{name}" for name in ("index.html", "page.js", "page.css")} <= set(names)
