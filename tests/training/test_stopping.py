"""The time budget (--max_train_minutes), early stopping (--early_stopping_patience, --metric_for_best), mixed
precision choices (--mixed_precision) and the small-data recipe (configs/small-data.yaml)."""

import json
import logging
import subprocess
import sys
import textwrap

import pytest
import torch
from conftest import REPO_ROOT, train_command_in_process
from safetensors.torch import load_file
from test_loop import TINY_RUN, data_args, data_dir, expect_error, read_metrics, run_train  # noqa: F401

from vaswani import devices as precision
from vaswani.training.stopping import EarlyStopping, StoppingRules, best_checkpoint


# ---------------------------------------------------------------------------------------------------------------------
# The early-stopping state machine
# ---------------------------------------------------------------------------------------------------------------------
def test_early_stopping_on_bleu_stops_after_patience_evaluations_without_improvement():
    stopper = EarlyStopping(patience=3, metric="bleu")
    scores = [(100, 5.0), (200, 9.0), (300, 8.0), (400, 9.0), (500, 10.0), (600, 7.0), (700, 9.9), (800, 10.0)]
    decisions = [stopper.update(step, score) for step, score in scores]
    # 9.0 at 400 equals the best and does not count as better; 10.0 at 500 resets the count; 800 is the third miss.
    assert decisions == [False, False, False, False, False, False, False, True]
    assert (stopper.best_step, stopper.best_value, stopper.evaluations_without_improvement) == (500, 10.0, 3)


def test_early_stopping_on_loss_wants_lower_and_min_delta_ignores_tiny_gains():
    stopper = EarlyStopping(patience=2, metric="loss", min_delta=0.05)
    assert [stopper.update(s, v) for s, v in [(1, 3.0), (2, 2.5), (3, 2.48), (4, 2.6)]] == [False, False, False, True]
    assert stopper.best_step == 2
    chrf = EarlyStopping(patience=1, metric="chrf")
    assert [chrf.update(s, v) for s, v in [(1, 30.0), (2, 31.0), (3, 29.0)]] == [False, False, True]


def test_early_stopping_state_survives_json_and_checks_the_metric():
    stopper = EarlyStopping(patience=2, metric="chrf")
    for step, value in [(1, 20.0), (2, 25.0), (3, 24.0)]:
        stopper.update(step, value)
    restored = EarlyStopping(patience=2, metric="chrf")
    restored.load_state_dict(json.loads(json.dumps(stopper.state_dict())))
    assert restored == stopper
    assert restored.update(4, 24.5) is True  # the second miss in a row, counted across the "resume"
    with pytest.raises(ValueError, match="--metric_for_best chrf"):
        EarlyStopping(patience=2, metric="bleu").load_state_dict(stopper.state_dict())
    with pytest.raises(ValueError, match="metric_for_best 'ppl'"):
        EarlyStopping(patience=1, metric="ppl")
    with pytest.raises(ValueError, match="positive"):
        EarlyStopping(patience=0)


def test_time_budget_counts_earlier_invocations(tmp_path):
    rules = StoppingRules(tmp_path, max_train_minutes=1.0, patience=None, metric="bleu")
    assert not rules.budget_spent(59.0)
    assert rules.budget_spent(60.0)
    (tmp_path / "step-00000010").mkdir()
    rules.write_state(tmp_path / "step-00000010", loop_seconds=45.0)  # written with the checkpoint
    rules.saved(tmp_path / "step-00000010", 10)
    resumed = StoppingRules(tmp_path, max_train_minutes=1.0, patience=None, metric="bleu")
    resumed.restore(tmp_path / "step-00000010")
    assert not resumed.budget_spent(14.0) and resumed.budget_spent(15.0)
    assert StoppingRules(tmp_path, None, None, "bleu").budget_spent(1e9) is False


def test_a_missing_or_damaged_stopping_state_stops_the_resume(tmp_path):
    """A resume restores everything or stops: a checkpoint without its stopping state (or with a damaged one) is an
    error naming the file, not a silent restart of the time budget."""
    from vaswani.errors import CheckpointError

    checkpoint = tmp_path / "checkpoints" / "step-00000004"
    checkpoint.mkdir(parents=True)
    rules = StoppingRules(tmp_path, max_train_minutes=1.0, patience=2, metric="bleu")
    with pytest.raises(CheckpointError, match="stopping_state.json is missing"):
        rules.restore(checkpoint)
    (checkpoint / "stopping_state.json").write_text("{not json")
    with pytest.raises(CheckpointError, match="stopping_state.json is damaged"):
        rules.restore(checkpoint)
    state = {"train_loop_seconds": 3.0, "early_stopping": None}  # as written before "evaluation_due" existed
    (checkpoint / "stopping_state.json").write_text(json.dumps(state))
    rules.restore(checkpoint)
    assert rules.evaluation_due is False and rules.budget.seconds_before == 3.0
    (checkpoint / "stopping_state.json").write_text(json.dumps({**state, "evaluation_due": "yes"}))
    with pytest.raises(CheckpointError, match="stopping_state.json is damaged .evaluation_due is not true or false"):
        rules.restore(checkpoint)
    rules.evaluation_due = True  # a signal stopped the evaluation of the step being saved
    rules.write_state(checkpoint, loop_seconds=1.0)
    assert "; its evaluation, stopped by a signal, runs first;" in StoppingRules(tmp_path, 1.0, 2, "bleu").restore(
        checkpoint
    )


def test_the_best_copy_is_remade_when_a_kill_came_before_it(tmp_path):
    """A kill after the best checkpoint was published but before its copy: the resume copies it again."""
    checkpoint = tmp_path / "checkpoints" / "step-00000004"
    checkpoint.mkdir(parents=True)
    (checkpoint / "model.safetensors").write_bytes(b"weights")
    rules = StoppingRules(tmp_path, max_train_minutes=None, patience=2, metric="bleu")
    assert rules.evaluated(4, {"bleu": 12.0}) is False
    rules.write_state(checkpoint, loop_seconds=1.0)  # the state says: best at step 4; no copy was made
    resumed = StoppingRules(tmp_path, max_train_minutes=None, patience=2, metric="bleu")
    resumed.restore(checkpoint)
    copy = tmp_path / "best_checkpoint" / "step-00000004"
    assert (copy / "model.safetensors").read_bytes() == b"weights"
    assert best_checkpoint(tmp_path) == copy


# ---------------------------------------------------------------------------------------------------------------------
# Mixed precision choices
# ---------------------------------------------------------------------------------------------------------------------
def test_mixed_precision_default_follows_the_hardware_and_fp16_on_cpu_is_refused(monkeypatch):
    monkeypatch.delenv("ACCELERATE_MIXED_PRECISION", raising=False)
    monkeypatch.setattr(precision, "native_bf16", lambda device_type: True)
    monkeypatch.setattr(precision, "cpu_bf16_trains_faster", lambda: True)
    assert precision.resolve_mixed_precision(None, "cpu")[0] == "bf16"
    assert precision.resolve_mixed_precision("bf16", "cpu") == ("bf16", "--mixed_precision")
    # native but slower than float32 (AVX512-BF16 on an Intel CPU without AMX): float32, and a note when asked for
    monkeypatch.setattr(precision, "cpu_bf16_trains_faster", lambda: False)
    assert precision.resolve_mixed_precision(None, "cpu") == (
        "no", "default: this CPU's bfloat16 (AVX512-BF16 without AMX) trains slower than float32"
    )  # fmt: skip
    value, why = precision.resolve_mixed_precision("bf16", "cpu")
    assert value == "bf16" and "note: " in why and "slower than float32" in why and "WARNING" not in why
    assert precision.resolve_mixed_precision(None, "cuda")[0] == "bf16"  # a GPU's bfloat16 is not the CPU's
    monkeypatch.setattr(precision, "native_bf16", lambda device_type: False)
    assert precision.resolve_mixed_precision(None, "cpu")[0] == "no"
    value, why = precision.resolve_mixed_precision("bf16", "cpu")
    assert value == "bf16" and "WARNING" in why and "slower" in why
    assert precision.resolve_mixed_precision("no", "cpu") == ("no", "--mixed_precision")
    assert precision.resolve_mixed_precision("fp16", "cuda")[0] == "fp16"
    with pytest.raises(ValueError, match="fp16 is not supported on CPU"):
        precision.resolve_mixed_precision("fp16", "cpu")
    monkeypatch.setenv("ACCELERATE_MIXED_PRECISION", "fp16")  # what `accelerate launch --mixed_precision` sets
    with pytest.raises(ValueError, match="fp16 is not supported on CPU"):
        precision.resolve_mixed_precision(None, "cpu")
    monkeypatch.setenv("ACCELERATE_MIXED_PRECISION", "no")
    assert precision.resolve_mixed_precision(None, "cpu") == ("no", "from the accelerate configuration")


def test_native_bf16_matches_the_cpu_flags():
    if sys.platform != "linux":
        pytest.skip("reads /proc/cpuinfo")
    # oneDNN answers for the CPU it may use: under ONEDNN_MAX_CPU_ISA=AVX2 (a Zen 3 emulated) it has no bf16.
    has_bf16 = bool(precision.cpu_flags() & {"avx512_bf16", "amx_bf16"}) and precision.onednn_allows(
        precision.ONEDNN_ISAS_WITHOUT_BF16
    )
    assert precision.native_bf16("cpu") == has_bf16


def limit_onednn(monkeypatch, isa: str | None) -> None:
    """`ONEDNN_MAX_CPU_ISA=isa` for the test (None: unset, no limit)."""
    if isa is None:
        monkeypatch.delenv("ONEDNN_MAX_CPU_ISA", raising=False)
    else:
        monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", isa)


@pytest.mark.parametrize(
    ("vendor", "amx", "onednn_limit", "faster"),
    [
        ("AuthenticAMD", False, None, True),  # a Zen 4: AVX512-BF16 at twice float32's rate
        ("GenuineIntel", True, None, True),  # a Sapphire Rapids with AMX
        ("GenuineIntel", False, None, False),  # a Cooper Lake, or a Sapphire Rapids whose VM hides AMX
        ("GenuineIntel", True, "AVX512_CORE_BF16", False),  # oneDNN held below AMX
        ("GenuineIntel", True, "avx512_core_amx", True),
        ("", False, None, True),  # outside Linux the vendor is not known: bf16 as before
    ],
)
def test_bf16_trains_faster_than_float32_with_amx_or_amds_avx512_bf16_only(monkeypatch, vendor, amx, onednn_limit,
                                                                          faster):  # fmt: skip
    import torch

    monkeypatch.setattr(precision, "cpu_vendor", lambda: vendor)
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: amx)
    limit_onednn(monkeypatch, onednn_limit)
    assert precision.cpu_bf16_trains_faster() is faster


@pytest.mark.parametrize(
    ("machine", "onednn", "avx512_bf16", "onednn_limit", "native"),
    [
        ("x86_64", True, True, None, True),  # a Sapphire Rapids, a Zen 4
        ("x86_64", True, False, None, False),  # a Cascade Lake or Ice Lake Xeon: oneDNN says yes and emulates
        ("AMD64", True, False, None, False),  # the same CPU as Windows names it
        ("x86_64", True, True, "AVX512_CORE_VNNI", False),  # oneDNN held to a Cascade Lake's instructions
        ("x86_64", True, True, "avx512_core_bf16", True),
        ("x86_64", False, True, None, False),  # a torch without oneDNN's bf16
        ("aarch64", True, False, None, True),  # an Arm CPU with the BF16 extension: oneDNN's answer
        ("aarch64", False, False, None, False),
    ],
)
def test_native_bf16_on_a_cpu_needs_its_instructions_not_only_onednns_yes(
    monkeypatch, machine, onednn, avx512_bf16, onednn_limit, native
):
    """oneDNN says it can compute in bfloat16 on every x86 CPU from AVX512 on (it emulates it without AVX512-BF16,
    slower than float32): the training default and `--mixed_precision bf16` of inference need the instructions."""
    import torch

    monkeypatch.setattr(precision.platform, "machine", lambda: machine)
    monkeypatch.setattr(torch.backends.mkldnn, "is_available", lambda: True)
    monkeypatch.setattr(torch.ops.mkldnn, "_is_mkldnn_bf16_supported", lambda: onednn)
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: avx512_bf16)
    limit_onednn(monkeypatch, onednn_limit)
    assert precision.native_bf16("cpu") is native


BF16_LOSS_SCRIPT = textwrap.dedent(
    """
    import sys, torch
    sys.path.insert(0, sys.argv[1])
    from accelerate import Accelerator
    from conftest import tiny_model, random_batch
    accelerator = Accelerator(mixed_precision="bf16", cpu=True)
    model = tiny_model(dropout=0.0)
    model.config.label_smoothing = 0.1
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    model, optimizer = accelerator.prepare(model, optimizer)
    input_ids, attention_mask, labels = random_batch()
    out = model(input_ids=input_ids, attention_mask=attention_mask, labels=labels)
    accelerator.backward(out.loss)
    optimizer.step()
    logits = out.logits.detach()
    # Autocast really ran: the logits are bfloat16 values (returned as float32 by Accelerate).
    assert torch.equal(logits, logits.bfloat16().float()), "the forward did not run in bfloat16"
    # The loss is float32 and equals float32 label-smoothed cross-entropy of those logits to float32 accuracy
    # (a bfloat16 loss would be off by ~1e-2 relative).
    reference = torch.nn.functional.cross_entropy(logits.view(-1, logits.shape[-1]).double(), labels.view(-1),
                                                  label_smoothing=0.1)
    assert out.loss.dtype == torch.float32, out.loss.dtype
    torch.testing.assert_close(out.loss.double(), reference, rtol=1e-6, atol=0.0)
    unwrapped = accelerator.unwrap_model(model)
    assert {p.dtype for p in unwrapped.parameters()} == {torch.float32}
    assert {s.dtype for state in optimizer.state_dict()["state"].values() for s in state.values()
            if s.is_floating_point()} == {torch.float32}
    print("ok")
    """
)


@pytest.mark.slow
def test_bf16_autocast_keeps_float32_weights_optimizer_state_and_loss(tmp_path):
    script = tmp_path / "bf16_loss.py"
    script.write_text(BF16_LOSS_SCRIPT)
    result = subprocess.run([sys.executable, str(script), str(REPO_ROOT / "tests")], capture_output=True, text=True,
                            timeout=300)  # fmt: skip
    assert result.returncode == 0 and result.stdout.strip().endswith("ok"), result.stderr[-3000:]


# ---------------------------------------------------------------------------------------------------------------------
# train.py end to end
# ---------------------------------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_train_py_refuses_fp16_on_cpu_and_bad_stopping_options(data_dir, tmp_path):  # noqa: F811
    base = [*data_args(data_dir), *TINY_RUN, "--max_train_steps", "2", "--output_dir", str(tmp_path / "out")]
    expect_error(
        [*base, "--mixed_precision", "fp16"], tmp_path, "error: --mixed_precision fp16 is not supported on CPU"
    )
    expect_error([*base, "--max_train_minutes", "0"], tmp_path, "--max_train_minutes must be positive")
    expect_error([*base, "--early_stopping_patience", "0"], tmp_path, "--early_stopping_patience 0 is not allowed")
    expect_error([*base, "--early_stopping_patience", "2"], tmp_path, "needs evaluations during training")
    expect_error([*base, "--early_stopping_patience", "2", "--eval_steps", "1", "--metric_for_best", "ppl"], tmp_path,
                 "invalid choice: 'ppl'")  # fmt: skip
    assert not (tmp_path / "out" / "checkpoints").exists()


@pytest.mark.slow
def test_max_train_minutes_stops_after_the_budget_and_still_writes_the_final_model(data_dir, tmp_path):  # noqa: F811
    out = tmp_path / "run"
    # 0.0001 minutes (6 ms) are spent by the first update: the run stops there and finishes as a normal run does.
    result = run_train(
        [*data_args(data_dir), *TINY_RUN, "--output_dir", str(out), "--max_train_steps", "50",
         "--max_train_minutes", "0.0001", "--checkpoint_steps", "100"],
        tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-4000:]
    assert "Finishing at update 1 of 50: time budget spent" in result.stderr
    results = json.loads((out / "results.json").read_text())
    assert results["step"] == 1 and results["finished_early"] == "time budget spent"
    assert results["averaged_checkpoints"] == ["step-00000001"]
    assert "bleu" in results["test"] and "bleu" in results["validation"]
    for name in ("model.safetensors", "config.json", "tokenizer.json", "README.md"):
        assert (out / name).exists(), name
    assert "time budget spent" in (out / "README.md").read_text()
    state = json.loads((out / "checkpoints" / "step-00000001" / "stopping_state.json").read_text())
    assert state["train_loop_seconds"] >= 0.006 and state["early_stopping"] is None
    assert {split for split in (m["split"] for m in read_metrics(out))} >= {"train", "final_test"}


@pytest.mark.slow
def test_early_stopping_keeps_the_best_checkpoint_and_survives_a_resume(data_dir, tmp_path, caplog):  # noqa: F811
    """With a learning rate of 1e-5 the weights move (every checkpoint differs from the others) but the translations of
    the untrained model do not, so every evaluation scores the same BLEU: the first is the best and the run must stop
    after `patience` more evaluations, counting across a stop and resume, with the best checkpoint kept although
    --keep_checkpoints 1 rotates every other one away, and the final model is the best checkpoint (--final_model
    best; with auto, the tie of the scores goes to the last one), not the last."""
    common = [*data_args(data_dir), *TINY_RUN, "--max_train_steps", "20", "--eval_steps", "2",
              "--early_stopping_patience", "2", "--metric_for_best", "bleu", "--lr_scheduler", "constant",
              "--learning_rate", "1e-5", "--keep_checkpoints", "1", "--average_checkpoints", "1",
              "--final_model", "best", "--cache_dir", str(tmp_path / "cache")]  # fmt: skip
    out = tmp_path / "run"
    # both runs are the command's own entry point in this process (train.py's start is tested in test_loop.py)
    status, stderr = train_command_in_process([*common, "--output_dir", str(out), "--stop_after_steps", "5"])
    assert status == 0, stderr[-4000:]
    assert [p.name for p in (out / "checkpoints").iterdir()] == ["step-00000005"]  # rotation kept the last only
    assert [p.name for p in (out / "best_checkpoint").iterdir()] == ["step-00000002"]
    state = json.loads((out / "checkpoints" / "step-00000005" / "stopping_state.json").read_text())
    assert state["early_stopping"]["best_step"] == 2
    assert state["early_stopping"]["evaluations_without_improvement"] == 1

    caplog.set_level(logging.INFO)  # the run's log: its logging.basicConfig does nothing under pytest's handlers
    status, stderr = train_command_in_process(
        [*common, "--output_dir", str(out), "--resume_from_checkpoint", "latest"]
    )
    assert status == 0, stderr[-4000:]
    assert "best bleu so far" in caplog.text
    results = json.loads((out / "results.json").read_text())
    # Evaluations at 2 (best), 4 and 6 (no better): stop at 6, not at 10 as a count restarted by the resume would.
    assert results["step"] == 6 and results["finished_early"] == "early stopping (bleu)"
    assert results["early_stopping"]["best_step"] == 2
    assert [step for step, _ in results["early_stopping"]["history"]] == [2, 4, 6]
    assert results["averaged_checkpoints"] == ["step-00000002"] and results["final_model"]["chosen"] == "best"
    assert [c["name"] for c in results["final_model"]["candidates"]] == ["last", "best"]
    card = (out / "README.md").read_text()
    assert "the best evaluated checkpoint (step 2) (--final_model best)" in card and "early stopping (bleu)" in card
    best = load_file(out / "best_checkpoint" / "step-00000002" / "model.safetensors")
    last = load_file(out / "checkpoints" / "step-00000006" / "model.safetensors")
    final = load_file(out / "model.safetensors")
    assert any(not torch.equal(last[name], tensor) for name, tensor in best.items())  # the check below can fail
    for name, tensor in best.items():
        torch.testing.assert_close(final[name], tensor, rtol=0, atol=0)


# ---------------------------------------------------------------------------------------------------------------------
# The small-data recipe
# ---------------------------------------------------------------------------------------------------------------------
def test_small_data_recipe_loads_and_sets_what_it_says(tmp_path):
    import yaml

    from vaswani.training.loop import resolve_model_config
    from vaswani.training.options import parse_args

    path = REPO_ROOT / "configs" / "small-data.yaml"
    recipe = yaml.safe_load(path.read_text())
    args = parse_args(["--config", str(path), "--output_dir", str(tmp_path / "out"), "--max_train_minutes", "20"])
    for key, value in recipe.items():
        assert getattr(args, key) == value, key
    assert args.max_train_steps is None  # the time budget (or early stopping) ends the run on its own
    config = resolve_model_config(args)
    assert (config.d_model, config.encoder_layers, config.norm_position) == (256, 3, "pre")
    assert (config.norm_type, config.fixnorm) == ("scalenorm", True)  # the ablation's winner (README)
    # The command line still wins over the recipe.
    assert parse_args(["--config", str(path), "--output_dir", "x", "--max_tokens", "2048",
                       "--max_train_minutes", "1"]).max_tokens == 2048  # fmt: skip
