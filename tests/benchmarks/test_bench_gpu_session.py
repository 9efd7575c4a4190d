"""benchmarks/gpu_step_ab.sh session, bench_gpu.py's GPU session, on a CPU (tiny presets): the groups it starts
within its time budget, the first group it starts from, and what it leaves in $OUT for the device tool to bring back.
(Each group's commands are bench_gpu.py's and bench_gpu_step.py's, tested in their own files.)"""

import os
import subprocess
import sys
import tarfile

from conftest import REPO_ROOT


def session(tmp_path, *args):
    env = {**os.environ, "OUT": str(tmp_path / "out"), "DEVICE": "cpu", "PYTHON": sys.executable,
           "OMP_NUM_THREADS": "1"}  # fmt: skip
    result = subprocess.run(["bash", str(REPO_ROOT / "benchmarks" / "gpu_step_ab.sh"), "session", *args],
                            capture_output=True, text=True, timeout=300, env=env)  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout, tmp_path / "out"


def test_a_group_whose_estimate_does_not_fit_is_skipped_and_the_results_are_packed(tmp_path):
    out, folder = session(tmp_path, "5")
    skipped = [line for line in out.splitlines() if line.startswith("== ")]
    assert len(skipped) == 6 and all("skipped" in line for line in skipped), out
    assert "== 4 tiny fast / fast @ baseline: skipped (BASELINE, a folder with the older train.py, not given)" in out
    assert "session of gpu_step_ab.sh on cpu" in (folder / "session.txt").read_text()
    with tarfile.open(folder / "gpu_session.tar.gz") as packed:
        assert packed.getnames() == ["."]  # nothing ran


def test_the_session_starts_from_the_group_given(tmp_path):
    """A second device call goes on where the first stopped: groups before FIRST are not even considered."""
    out, _ = session(tmp_path, "100", "6")
    groups = [line for line in out.splitlines() if line.startswith("== ")]
    assert len(groups) == 1 and groups[0].startswith("== 6 tiny mechanisms: skipped (") and "250 s needed" in groups[0]


def test_an_earlier_sessions_results_are_not_replaced(tmp_path):
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "session.txt").write_text("the last session")
    env = {**os.environ, "OUT": str(tmp_path / "out"), "DEVICE": "cpu", "PYTHON": sys.executable}
    result = subprocess.run(["bash", str(REPO_ROOT / "benchmarks" / "gpu_step_ab.sh"), "session", "5"],
                            capture_output=True, text=True, timeout=60, env=env)  # fmt: skip
    assert result.returncode == 2 and "already holds a session's results" in result.stderr
    assert (tmp_path / "out" / "session.txt").read_text() == "the last session"
