"""The built distribution: which import names it adds, that its data files (model card template, metric scripts,
the translation page) ship inside the `vaswani` package, and that its dependency floors are ones it runs on."""

from __future__ import annotations

import re
import subprocess
import sys
import zipfile

import pytest
from conftest import REPO_ROOT
from packaging.requirements import Requirement
from packaging.version import Version


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


def declared_dependencies() -> dict[str, Requirement]:
    """pyproject.toml's `dependencies`, by package name (read as text: tomllib needs Python 3.11, the project 3.10)."""
    pyproject = (REPO_ROOT / "pyproject.toml").read_text(encoding="utf-8")
    block = re.search(r"^dependencies = \[\n(.*?)^\]", pyproject, re.MULTILINE | re.DOTALL).group(1)
    return {req.name: req for req in map(Requirement, re.findall(r'^\s*"([^"]+)"', block, re.MULTILINE))}


def floor(requirement) -> Version:
    """The lowest release a requirement admits by its `>=` clause (`torch>=2.6` -> 2.6)."""
    (lowest,) = [Version(spec.version) for spec in requirement.specifier if spec.operator == ">="]
    return lowest


def test_the_floors_of_torch_and_accelerate_are_those_transformers_needs_to_use_them():
    """transformers names torch and accelerate only in its `torch` extra, which pip does not install for a package
    that depends on plain `transformers`, and below that extra's floors it turns PyTorch off (`is_torch_available()`
    is False: no model class, no `generate()`) or refuses to train (its `Trainer` needs accelerate 1.1). So
    pyproject.toml's own floors must be at least the pinned transformers' (torch 2.6, accelerate 1.1 for transformers
    5.23), or `pip install vaswani` beside an older torch or accelerate installs cleanly and fails later (it said
    `torch>=2.4` and `accelerate>=1.0` until 2026-11-30)."""
    from importlib.metadata import requires

    ours = declared_dependencies()
    extra = [req for req in map(Requirement, requires("transformers")) if req.marker is not None
             and req.marker.evaluate({"extra": "torch"})]  # fmt: skip
    assert {req.name for req in extra} >= {"torch", "accelerate"}
    for needed in extra:
        said = ours[needed.name]
        assert floor(said) >= floor(needed), f"pyproject.toml says {said}; transformers needs {needed}"


def test_the_build_floor_is_a_setuptools_that_reads_the_license_as_written():
    """pyproject.toml gives `license` as an SPDX expression (PEP 639), which setuptools reads from 77.0 on: 76.1
    refuses the file ("`project.license` must be valid exactly by one definition"; checked 2026-11-30, as 65.5, the
    setuptools a Python 3.11 venv starts with). pip's isolated builds take the newest setuptools, but a build without
    isolation (`pip install --no-build-isolation`, a distribution's packager) takes the floor at its word."""
    pyproject = (REPO_ROOT / "pyproject.toml").read_text(encoding="utf-8")
    assert re.search(r'^license = "[^"]+"$', pyproject, re.MULTILINE)  # the expression, not a table
    build = Requirement(re.search(r'^requires = \["(setuptools[^"]*)"\]', pyproject, re.MULTILINE).group(1))
    assert floor(build) >= Version("77")
