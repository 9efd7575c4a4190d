"""The Makefile: `make test` is what CI runs (.ci/run); it runs the suite, then the numerically sensitive folders
again on an older instruction set (issue 40), those with the tests of the model and of decoding on the transformers
release after the pinned one (`make test-transformers`)."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from types import SimpleNamespace

from conftest import REPO_ROOT, pytest_collection_modifyitems
from test_packaging import declared_dependencies


def make_dry_run(target: str, *variables: str) -> list[list[str]]:
    """The command lines `make TARGET [VARIABLE=VALUE ...]` would run (make -n), each split as the shell would."""
    result = subprocess.run(["make", "-n", "-s", target, *variables], cwd=REPO_ROOT, capture_output=True, text=True,
                            check=True, timeout=60)  # fmt: skip
    lines = result.stdout.replace("\\\n", " ").splitlines()  # a recipe line continued with a backslash is one
    return [shlex.split(line) for line in lines if line.strip()]


AVX2 = {"ATEN_CPU_CAPABILITY=avx2", "MKL_ENABLE_INSTRUCTIONS=AVX2", "ONEDNN_MAX_CPU_ISA=AVX2"}


def test_make_test_runs_the_suite_then_the_sensitive_folders_on_avx2():
    """The whole suite, then each numerically sensitive folder once more on AVX2: tests/export and tests/convert on
    the pinned transformers, tests/models and tests/inference in the last pass, on the next release."""
    pytest_runs = [line for line in make_dry_run("test") if "pytest" in line]
    assert len(pytest_runs) == 3, pytest_runs
    whole, again, last = pytest_runs
    assert not [word for word in whole if word.startswith("tests/")]  # the whole suite first
    assert not AVX2 & set(whole) and not [word for word in whole if word.startswith("PYTHONPATH=")]
    for run in (again, last):
        assert AVX2 | {"HF_HUB_OFFLINE=1"} <= set(run), run
    assert not [word for word in again if word.startswith("PYTHONPATH=")]  # the pinned release
    on_pinned, on_next = ([word for word in run if word.startswith("tests/")] for run in (again, last))
    assert on_pinned == ["tests/export", "tests/convert"] and on_next == ["tests/models", "tests/inference"]
    assert all(any((REPO_ROOT / folder).glob("test_*.py")) for folder in on_pinned + on_next)


def test_the_second_pass_really_runs_pytorchs_avx2_kernels():
    """ATEN_CPU_CAPABILITY=avx2 takes PyTorch off its AVX512 kernels (to its plain ones on a CPU without AVX2)."""
    env = {**os.environ, "ATEN_CPU_CAPABILITY": "avx2", "MKL_ENABLE_INSTRUCTIONS": "AVX2"}
    probe = "import torch; print(torch.backends.cpu.get_cpu_capability())"
    result = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True,
                            timeout=120)  # fmt: skip
    assert result.stdout.strip() in {"AVX2", "DEFAULT"}


def test_make_test_first_installs_the_browser_where_it_is_missing():
    """The translation page's browser test needs Debian's chromium and chromedriver: `make test` (and so CI on a fresh
    machine) installs them with apt-get when `command -v` does not find them."""
    makefile = (REPO_ROOT / "Makefile").read_text(encoding="utf-8")
    test_line = next(line for line in makefile.splitlines() if line.startswith("test:"))
    assert "browser" in test_line.split(":", 1)[1].split()
    recipe = subprocess.run(["make", "-n", "-s", "browser"], cwd=REPO_ROOT, capture_output=True, text=True,
                            check=True, timeout=60).stdout  # fmt: skip
    assert "command -v chromium" in recipe and "command -v chromedriver" in recipe
    assert "apt-get install -y -qq \\\n    chromium chromium-driver" in recipe


def test_make_test_transformers_runs_the_suite_on_the_release_named_installed_beside_the_pinned_one():
    lines = make_dry_run("test-transformers", "TRANSFORMERS=5.24.0")
    install = next(line for line in lines if "--target" in line)
    assert install[install.index("--target") + 1] == ".transformers/5.24.0.partial" and "--no-deps" in install
    assert "transformers==5.24.0" in install  # under a temporary name, renamed when complete:
    assert "mv .transformers/5.24.0.partial .transformers/5.24.0;" in " ".join(install)
    (suite,) = [line for line in lines if "pytest" in line]
    assert f"PYTHONPATH={REPO_ROOT}/.transformers/5.24.0" in suite  # absolute: tests that change folders keep it
    assert not [word for word in suite if word.startswith("tests/")]  # the whole suite
    assert not AVX2 & set(suite)  # on this CPU's instruction sets, unless TEST_ENV says otherwise
    (suite,) = [
        line
        for line in make_dry_run("test-transformers", "TRANSFORMERS=5.24.0", "TEST_ENV=A=1 B=2")
        if "pytest" in line
    ]
    assert suite[:2] == ["A=1", "B=2"]


def test_make_test_transformers_without_a_release_says_how_to_name_one():
    result = subprocess.run(["make", "-s", "test-transformers", "TRANSFORMERS="], cwd=REPO_ROOT, capture_output=True,
                            text=True, timeout=600)  # fmt: skip
    assert result.returncode == 2
    assert "error: name the release, e.g. make test-transformers TRANSFORMERS=5.24.0" in result.stderr


def test_make_test_last_runs_the_transformers_api_tests_on_the_release_after_the_pinned_one():
    """pyproject.toml's range lets `pip install vaswani` pick a newer transformers than constraints.txt pins (5.24
    renamed the cache, which the model missed): the tests of the model and of decoding run on it too."""
    from packaging.version import Version

    *_, last = [line for line in make_dry_run("test") if "pytest" in line]
    (path,) = [word.split("=", 1)[1] for word in last if word.startswith("PYTHONPATH=")]
    release = Version(path.rsplit("/", 1)[1])
    assert path == f"{REPO_ROOT}/.transformers/{release}"
    assert [word for word in last if word.startswith("tests/")] == ["tests/models", "tests/inference"]
    pinned = next(line.split("==")[1] for line in (REPO_ROOT / "constraints.txt").read_text().splitlines()
                  if line.startswith("transformers=="))  # fmt: skip
    assert release > Version(pinned)
    allowed = declared_dependencies()["transformers"]
    assert release in allowed.specifier and Version(pinned) in allowed.specifier


def test_the_files_with_the_most_slow_tests_are_handed_out_first(pytestconfig):
    """tests/conftest.py orders the collected tests so that `--dist loadfile` hands the long files out first (and
    pyproject.toml keeps pytest-xdist from putting the files with the most tests first instead); a file's tests stay
    together, in their order."""

    def item(path: str, name: str, slow: bool):
        return SimpleNamespace(
            path=path, name=name, get_closest_marker=lambda marker: marker == "slow" and slow or None
        )

    items = [item("a.py", "a1", False), item("a.py", "a2", False), item("b.py", "b1", True), item("b.py", "b2", False),
             item("c.py", "c1", True), item("c.py", "c2", True), item("d.py", "d1", False)]  # fmt: skip
    pytest_collection_modifyitems(items)
    assert [i.name for i in items] == ["c1", "c2", "b1", "b2", "a1", "a2", "d1"]
    assert "--no-loadscope-reorder" in pytestconfig.getini("addopts")
