"""benchmarks/bench_translate.py's thread options: checked up front with `vaswani translate`'s own rule."""

import sys

import pytest
from conftest import REPO_ROOT

sys.path.insert(0, str(REPO_ROOT / "benchmarks"))
from bench_translate import parse_args  # noqa: E402


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--threads", "0"], "threads=0: use 1 or more"),
        (["--threads", "2", "--parallel_batches", "3"], "parallel_batches=3: use 1 to 2"),
        (["--threads", "2", "--parallel_batches", "0"], "parallel_batches=0: use 1 to 2"),
    ],
)
def test_thread_options_that_vaswani_translate_refuses_are_refused(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        parse_args(argv)
    assert exit_info.value.code == 2 and message in capsys.readouterr().err


def test_parallel_batches_up_to_the_threads_are_accepted():
    args = parse_args(["--threads", "4", "--parallel_batches", "4"])
    assert (args.threads, args.parallel_batches) == (4, 4)
