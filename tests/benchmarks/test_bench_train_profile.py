"""benchmarks/bench_train_profile.py: a tiny run's phases add up, each is counted once per call of what it times,
and evaluations during the loop are told from those after it."""

import json
import sys

import pytest
from accelerate import Accelerator
from accelerate.optimizer import AcceleratedOptimizer
from conftest import REPO_ROOT, reset_accelerate_state

from modeling_vaswani import VaswaniForCausalLM, VaswaniForConditionalGeneration
from vaswani.data.demo import write_demo_files
from vaswani.training import loop as training_loop

sys.path.insert(0, str(REPO_ROOT / "benchmarks"))
from bench_train_profile import PHASES_IN_LOOP, PhaseClock, main, parse_args  # noqa: E402

TINY = [
    "--vocab_size", "400", "--d_model", "32", "--encoder_layers", "1", "--decoder_layers", "1",
    "--encoder_attention_heads", "2", "--decoder_attention_heads", "2", "--encoder_ffn_dim", "64",
    "--decoder_ffn_dim", "64", "--max_tokens", "400", "--warmup_steps", "4", "--max_train_steps", "6",
    "--eval_steps", "3", "--checkpoint_steps", "3", "--max_eval_samples", "8", "--num_beams", "2",
    "--logging_steps", "2", "--report_to", "none", "--ema_decay", "0.9", "--gradient_accumulation_steps", "2", "--max_grad_norm", "1.0",
]  # fmt: skip


@pytest.fixture(autouse=True)
def fresh_accelerate_state():
    """The benchmark runs the training loop in this process, which a script's run would start from a new process's
    Accelerate state: another test in this worker (a Trainer's) may have left it set with another precision."""
    reset_accelerate_state()
    yield
    reset_accelerate_state()


# some of what `instrument` times: a function of the loop, methods of our classes and of accelerate's
WRAPPED = [(training_loop, "_train_loop"), (VaswaniForConditionalGeneration, "forward"), (VaswaniForCausalLM, "forward"),
           (Accelerator, "backward"), (AcceleratedOptimizer, "zero_grad")]  # fmt: skip


def test_a_tiny_run_is_split_into_phases_that_add_up(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "cache"))
    write_demo_files(tmp_path, num_train=120, num_validation=8, num_test=8)
    data = [f"--{split}_file={tmp_path / f'{split}.jsonl'}" for split in ("train", "validation", "test")]
    report = tmp_path / "profile.json"
    untouched = [vars(owner).get(name) for owner, name in WRAPPED]
    assert main(["--json", str(report), "--", *TINY, *data, "--output_dir", str(tmp_path / "run")]) == 0
    out = capsys.readouterr().out
    results = json.loads(report.read_text())
    assert results["updates"] == 6
    phases = results["phases"]
    # every micro-batch has its forward and backward pass; the optimizer steps and zeroes once per update
    assert phases["forward"]["calls"] == phases["backward"]["calls"] == 12
    assert phases["optimizer"]["calls"] == 2 * 12  # accelerate's wrapper is called per micro-batch (it skips)
    assert phases["moving average"]["calls"] == phases["data"]["calls"] == phases["clip"]["calls"] == 6
    # evaluated at update 3 (not at the last one, which the final scoring covers); checkpoints at 3 and 6
    assert phases["evaluation"]["calls"] == 1 and phases["checkpoints"]["calls"] == 2
    assert all(phases[name]["seconds"] > 0 for name in PHASES_IN_LOOP)
    assert phases["rest"]["seconds"] >= 0  # the phases inside the loop add up to no more than the loop
    assert sum(p["seconds"] for p in phases.values() if "calls" in p) == pytest.approx(results["loop_seconds"])
    assert phases["final model choice"]["seconds"] > 0 and phases["final scoring"]["seconds"] > 0
    assert results["updates_per_minute"] == pytest.approx(60 * 6 / results["loop_seconds"])
    assert results["peak_anon_mb"] > 0 and "updates per minute" in out
    # the timed copies are gone again (a later test's torch.compile would trace the clock)
    assert untouched == [vars(owner).get(name) for owner, name in WRAPPED]


def test_a_phase_inside_another_counts_as_the_outer_one():
    clock = PhaseClock()
    with clock.phase("training loop", nested=True), clock.phase("evaluation"), clock.phase("forward"):
        pass
    assert clock.calls == {"training loop": 1, "evaluation": 1}


def test_unwrap_puts_back_what_wrap_replaced_own_or_inherited():
    class Base:
        def inherited(self):
            return 1

    class Child(Base):
        def own(self):
            return 2

    own = vars(Child)["own"]
    clock = PhaseClock()
    clock.wrap(Child, "inherited", "forward")
    clock.wrap(Child, "own", "backward")
    assert (Child().inherited(), Child().own()) == (1, 2) and clock.calls == {"forward": 1, "backward": 1}
    clock.unwrap()
    assert "inherited" not in vars(Child) and vars(Child)["own"] is own and vars(Base)["inherited"] is Base.inherited
    assert (Child().inherited(), Child().own()) == (1, 2) and clock.calls == {"forward": 1, "backward": 1}


def test_train_options_are_required(capsys):
    with pytest.raises(SystemExit) as stop:
        parse_args(["--json", "x.json"])
    assert stop.value.code == 2 and "give train.py's options after --" in capsys.readouterr().err


def profiled_tiny_run(tmp_path, monkeypatch, capsys, after: int, updates: int) -> tuple[dict, str]:
    """A tiny 6-update run with `--profile_after after --profile_updates updates`: its report and its output."""
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "cache"))
    write_demo_files(tmp_path, num_train=120, num_validation=8, num_test=8)
    data = [f"--{split}_file={tmp_path / f'{split}.jsonl'}" for split in ("train", "validation", "test")]
    report = tmp_path / "profile.json"
    options = ["--json", str(report), "--profile_updates", str(updates), "--profile_after", str(after), "--"]
    assert main([*options, *TINY, *data, "--output_dir", str(tmp_path / "run")]) == 0
    return json.loads(report.read_text()), capsys.readouterr().out


def test_a_profile_of_the_loop_covers_the_updates_asked_for(tmp_path, monkeypatch, capsys):
    train_step = training_loop.train_step
    results, out = profiled_tiny_run(tmp_path, monkeypatch, capsys, after=2, updates=3)
    profile = results["update_profile"]
    assert profile["updates"] == 3 and "profile of updates 3-5:" in out
    assert 0 < profile["wall_ms_per_update"] < 1000 * results["loop_seconds"] / 3
    # a CPU has no device to be idle and launches no kernels; the host's operators are listed, its products among them
    assert profile["device_busy_ms_per_update"] is None and profile["launches_per_update"] == 0
    names = [row["name"] for row in profile["top_host"]]
    assert any(name in ("aten::mm", "aten::addmm", "aten::bmm") for name in names)
    assert all(row["calls_per_update"] > 0 and row["ms_per_update"] >= 0 for row in profile["top_host"])
    assert training_loop.train_step is train_step  # the profiling copy is gone again


def test_a_profile_past_the_last_update_says_nothing_was_profiled(tmp_path, monkeypatch, capsys):
    results, out = profiled_tiny_run(tmp_path, monkeypatch, capsys, after=5, updates=2)
    assert "the run made 6 updates, fewer than --profile_after 5 + --profile_updates 2" in out
    assert results["update_profile"] is None


@pytest.mark.parametrize(("option", "value", "message"), [
    ("--profile_updates", "-1", "--profile_updates -1 is not allowed: give 0 (no profile) or more"),
    ("--profile_after", "-2", "--profile_after -2 is not allowed: give 0 or more updates"),
])  # fmt: skip
def test_profile_options_are_checked(option, value, message, capsys):
    with pytest.raises(SystemExit) as stop:
        parse_args([option, value, "--", "--output_dir", "x"])
    assert stop.value.code == 2 and message in capsys.readouterr().err
