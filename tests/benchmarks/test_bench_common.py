"""benchmarks/common.py's measurement discipline: the A/A copy really is timed in every round, verdicts need the
median and most rounds, the header names the CPU's flags; and bench_train times both sides by the same windows."""

import re
import sys

import pytest
from conftest import REPO_ROOT

sys.path.insert(0, str(REPO_ROOT / "benchmarks"))
import common  # noqa: E402
from bench_train import TRAIN_PY_LOGGING_STEPS, first_timed_window, window_rates  # noqa: E402


def test_the_aa_copy_is_timed_in_every_round_next_to_its_side():
    calls = []
    candidates = {"peer": lambda: calls.append("peer"), "ours": lambda: calls.append("ours")}
    timed = common.interleave(common.with_aa_copy(candidates, "ours"), warmup=1, repeats=3)
    assert list(timed.seconds) == ["peer", "ours", "ours (A/A)"]
    assert all(len(seconds) == 3 for seconds in timed.seconds.values())
    assert calls.count("ours") == 2 * (1 + 3) and calls.count("peer") == 1 + 3  # warm-up and rounds, copy included
    with pytest.raises(KeyError, match="no candidate 'theirs'"):
        common.with_aa_copy(candidates, "theirs")


def test_aa_summary_is_the_per_round_ratio_of_a_side_to_its_copy():
    per_round = {"ours": [2.0, 3.0, 4.0], "ours (A/A)": [2.0, 2.0, 5.0], "peer": [1.0, 1.0, 1.0]}
    summary = common.aa_summary(per_round, "ours")
    assert summary.values == (1.0, 1.5, 0.8) and summary.median == 1.0
    assert common.aa_summary(per_round, "peer") is None
    assert "50% off" in common.describe_aa(summary, "ours")
    assert "not measured" in common.describe_aa(None, "ours")


@pytest.mark.parametrize(
    ("ratios", "higher_is_better", "expected"),
    [
        ([1.3, 1.25, 1.4, 1.1, 1.5], True, "MET"),  # median and 4 of 5 rounds
        ([1.3, 1.25, 1.1, 1.1, 1.21], True, "MET"),  # median 1.21, 3 of 5
        ([1.3, 1.25, 1.1, 1.1, 1.0], True, "MISSED"),  # median 1.1, 2 of 5
        ([1.1, 1.1, 1.1, 1.3, 1.3, 1.3, 1.3, 1.3], True, "MET"),
        ([1.19, 1.19, 1.25, 1.25, 1.3], True, "MET"),
        ([1.1, 1.25, 1.3, 1.1, 1.1], True, "MISSED"),
        ([1.21, 1.21, 1.0, 1.0], True, "MISSED"),  # median 1.105, 2 of 4 is not most
        ([1.3, 1.3, 1.19, 1.19], True, "UNCLEAR"),  # median 1.245 reaches it, only half the rounds do
        ([0.9, 0.95, 1.01], False, "MET"),  # memory: lower is better
    ],
)
def test_a_verdict_needs_the_median_and_most_rounds(ratios, higher_is_better, expected):
    target = 1.2 if higher_is_better else 1.0
    assert common.verdict(ratios, target, higher_is_better) == expected


def test_the_machine_header_names_the_cpu_flags(monkeypatch):
    machine = common.machine_description(2)
    assert set(machine["cpu_flags"]) <= set(common.CPU_FLAGS)
    line = common.describe_machine(machine)
    assert machine["cpu"] in line and "2 threads" in line
    with open("/proc/cpuinfo") as cpuinfo:
        flags = next(line.split(":", 1)[1].split() for line in cpuinfo if line.startswith("flags"))
    assert ("avx2" in machine["cpu_flags"]) == ("avx2" in flags)


def test_trainer_windows_are_train_pys_windows():
    """Updates of 1 s each with 10 tokens: every window is 40 tokens in 4 s, and the windows kept start where
    train.py's kept windows start (after the warm-up, at a multiple of its logging interval, never at update 1)."""
    steps = 20
    step_ends = [float(i + 1) for i in range(steps)]
    tokens = [10] * steps
    assert first_timed_window(0) == first_timed_window(4) == TRAIN_PY_LOGGING_STEPS
    assert first_timed_window(5) == 2 * TRAIN_PY_LOGGING_STEPS
    rates = window_rates(step_ends, tokens, warmup_steps=5)
    assert rates == [10.0, 10.0, 10.0]  # updates 9-12, 13-16, 17-20
    step_ends[12] += 1.0  # update 13 took 2 s (and every later one ends 1 s later): only window 13-16 is slower
    step_ends[13:] = [end + 1.0 for end in step_ends[13:]]
    assert window_rates(step_ends, tokens, warmup_steps=5) == [10.0, 8.0, 10.0]


def test_bench_train_defaults_follow_the_discipline():
    from bench_train import parse_args

    args = parse_args([])
    assert args.repeats >= 5 and args.aa
    assert not parse_args(["--no-aa"]).aa


def test_choice_list_keeps_the_order_given_and_refuses_unknown_repeated_or_no_items():
    import argparse

    parse = common.choice_list(("small", "base", "big"), "sizes")
    assert parse("base, small") == ["base", "small"]
    for bad, message in (("small,huge", "(unknown: huge)"), ("small,small", "each once"), (" , ", "give one or more")):
        with pytest.raises(argparse.ArgumentTypeError, match=re.escape(message)):
            parse(bad)


def test_comparison_row_gives_median_range_per_round_speed_ratio_and_rounds_faster():
    seconds = {"ref": [2.0, 2.0, 2.0], "cand": [1.0, 4.0, 1.6]}
    speed = {name: [1 / s for s in values] for name, values in seconds.items()}
    cells, ratio = common.comparison_row("cand", seconds["cand"], speed["cand"], speed["ref"], ".3f")
    assert ratio.values == (2.0, 0.5, 1.25)  # speed ratio per round: ref seconds / candidate seconds
    assert cells == ["cand", "1.600", "1.000-4.000", "1.25", "0.50-2.00", "2/3 (p=1.00)"]


def test_a_benchmark_imports_its_own_checkouts_packages_first(tmp_path):
    """Run from a copy of the benchmarks (as from a git worktree), `vaswani` comes from beside that copy, not from the
    checkout the editable install points to."""
    import shutil
    import subprocess
    import sys

    from conftest import REPO_ROOT

    copy = tmp_path / "worktree"
    (copy / "benchmarks").mkdir(parents=True)
    shutil.copy(REPO_ROOT / "benchmarks" / "common.py", copy / "benchmarks" / "common.py")
    (copy / "vaswani").mkdir()
    (copy / "vaswani" / "__init__.py").write_text("WHERE = 'the copy'\n")
    script = "import sys; sys.path.insert(0, sys.argv[1]); import common, vaswani; print(vaswani.WHERE)"
    result = subprocess.run([sys.executable, "-c", script, str(copy / "benchmarks")], capture_output=True, text=True,
                            cwd=tmp_path, timeout=120)  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip() == "the copy"
