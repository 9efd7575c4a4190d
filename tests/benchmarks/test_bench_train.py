"""benchmarks/bench_train.py's options: a run that could not time anything is refused before any work starts."""

import sys

import pytest
from conftest import REPO_ROOT

sys.path.insert(0, str(REPO_ROOT / "benchmarks"))
from bench_train import TRAIN_PY_LOGGING_STEPS, first_timed_window, parse_args  # noqa: E402


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--steps", "3", "--warmup_steps", "1"], "--steps at least 8"),
        (["--steps", "7", "--warmup_steps", "1"], "--steps at least 8"),  # the window 1-4 holds set-up time
        (["--steps", "11", "--warmup_steps", "5"], "--steps at least 12"),
        (["--steps", "8", "--warmup_steps", "-1"], "warmup_steps >= 0"),
        (["--repeats", "0"], "--repeats 0 is not allowed: use a positive integer"),
        (["--vocab_size", "-5"], "--vocab_size -5 is not allowed"),
        (["--pairs", "0"], "--pairs 0 is not allowed"),
        (["--max_tokens", "0"], "--max_tokens 0 is not allowed"),
    ],
)
def test_options_that_cannot_be_timed_are_refused(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        parse_args(argv)
    assert exit_info.value.code == 2 and message in capsys.readouterr().err


def test_the_smallest_timed_run_is_accepted():
    args = parse_args(["--steps", str(2 * TRAIN_PY_LOGGING_STEPS), "--warmup_steps", "1"])
    assert args.steps - first_timed_window(args.warmup_steps) == TRAIN_PY_LOGGING_STEPS
