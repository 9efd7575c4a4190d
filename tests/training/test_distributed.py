"""train.py's options that depend on the clock or on the launcher, each shown to change what a run does (issue 22):
`--stop_after_minutes` and time-based `--checkpoint_minutes` under a fake clock on which every update takes one
minute (no real waiting), `--gradient_checkpointing` (each layer's forward runs again in the backward pass, the
same losses), its refusal together with LayerDrop under DDP, and the `torchrun` launch path (two gloo processes)."""

import json
import logging
import os
import re
import sys
import time
import types

import pytest
import torch
from conftest import REPO_ROOT, run_command, train_command_in_process, train_in_process
from safetensors.torch import load_file
from test_loop import read_metrics
from test_options import TINY_MODEL, corpus  # noqa: F401  (corpus is a fixture)

from vaswani.training import distributed, loop, tasks

QUIET = ["--eval_steps", "0", "--logging_steps", "1", "--num_beams", "1", "--num_examples", "0",
         "--report_to", "none", "--max_tokens", "400", "--max_source_length", "48", "--max_target_length", "48",
         "--vocab_size", "400", "--warmup_steps", "2", "--max_eval_samples", "4"]  # fmt: skip


def run_args(corpus, out, *extra: str) -> list[str]:  # noqa: F811
    return ["--dataset_name", str(corpus), "--cache_dir", str(out.parent / "cache"), *TINY_MODEL, *QUIET, *extra,
            "--output_dir", str(out)]  # fmt: skip


def checkpoint_steps(out) -> list[int]:
    return sorted(int(p.name[5:]) for p in (out / "checkpoints").iterdir() if p.name.startswith("step-"))


# ---------------------------------------------------------------------------------------------------------------------
# The clock: every update takes one minute
# ---------------------------------------------------------------------------------------------------------------------
def one_minute_per_update(monkeypatch, real_time: bool) -> list[int]:
    """`time` as vaswani.training.loop sees it, with a `monotonic()` that runs one minute ahead more after every update
    (train_step wrapped), on top of the real clock (`real_time`) or alone; everything else about time is real.
    Returns the minutes counter."""
    minutes = [0]
    clock = types.SimpleNamespace(**{name: getattr(time, name) for name in dir(time) if not name.startswith("_")})
    clock.monotonic = lambda: (time.monotonic() if real_time else 0.0) + 60.0 * minutes[0]
    monkeypatch.setattr(loop, "time", clock)
    original = loop.train_step

    def one_minute_step(run, stream):
        result = original(run, stream)
        minutes[0] += 1
        return result

    monkeypatch.setattr(loop, "train_step", one_minute_step)
    return minutes


@pytest.fixture
def minute_per_update(monkeypatch):
    """Every update takes one more minute of the training loop's clock, which otherwise runs in real time."""
    return one_minute_per_update(monkeypatch, real_time=True)


@pytest.mark.slow
def test_stop_after_minutes_ends_each_invocation_after_its_minutes(corpus, tmp_path, minute_per_update):  # noqa: F811
    """2.5 minutes of a one-minute update: each invocation stops after its third update, saves a checkpoint and
    leaves the run unfinished; a resume counts its own minutes again."""
    out = tmp_path / "run"
    argv = run_args(corpus, out, "--max_train_steps", "8", "--stop_after_minutes", "2.5", "--checkpoint_minutes", "60")
    assert train_in_process(argv) == {"step": 3, "stopped_early": True}
    assert checkpoint_steps(out) == [3] and not (out / "results.json").exists()
    assert train_in_process([*argv, "--resume_from_checkpoint", "latest"]) == {"step": 6, "stopped_early": True}
    assert checkpoint_steps(out) == [3, 6] and not (out / "results.json").exists()
    assert minute_per_update[0] == 6


@pytest.mark.slow
def test_checkpoint_minutes_saves_every_n_minutes_of_the_clock(corpus, tmp_path, minute_per_update):  # noqa: F811
    """A checkpoint every 2 minutes of one-minute updates: steps 2, 4, 6, and the last step 7 (no --checkpoint_steps)."""
    out = tmp_path / "run"
    argv = run_args(corpus, out, "--max_train_steps", "7", "--checkpoint_minutes", "2", "--keep_checkpoints", "10",
                    "--average_checkpoints", "1")  # fmt: skip
    assert train_in_process(argv)["step"] == 7
    assert checkpoint_steps(out) == [2, 4, 6, 7]


@pytest.fixture
def exact_minute_per_update(monkeypatch):
    """As `minute_per_update`, but the training loop's `monotonic()` is the fake clock alone (every update exactly one
    minute, nothing else takes time): the fraction of a time budget spent after update k is exactly k minutes over
    the budget, in a run and in its resumed twin alike."""
    return one_minute_per_update(monkeypatch, real_time=False)


def logged_rates(out) -> list[float]:
    return [row["lr"] for row in read_metrics(out) if row["split"] == "train"]


@pytest.mark.slow
def test_warmup_stable_decay_follows_the_time_budget_and_resumes_on_the_same_curve(
    corpus,  # noqa: F811
    tmp_path,
    exact_minute_per_update,
    caplog,
    capsys,
):
    """A 30-minute budget of one-minute updates, the last 30% decaying linearly to 0: the rate after update k (the
    next update's) follows k / 30 of the budget; a run paused after 12 updates and resumed continues the same curve
    and the same moving average (--ema_decay auto: D = 1 - 1 / (0.1 * 30), handed over with --final_model ema): the
    same model, bit for bit."""
    caplog.set_level(logging.INFO, logger="train")
    options = ["--max_train_minutes", "30", "--lr_scheduler", "warmup_stable_decay", "--learning_rate", "1e-3",
               "--decay_fraction", "0.3", "--decay_type", "linear", "--ema_decay", "--final_model", "ema",
               "--checkpoint_minutes", "60"]  # fmt: skip
    whole = train_in_process(run_args(corpus, tmp_path / "whole", *options))
    assert whole["step"] == 30 and whole["finished_early"] == "time budget spent"
    peak, warmup = 1e-3, 2  # QUIET's --warmup_steps
    expected = [peak * (k / warmup if k < warmup else 1.0 if k / 30 < 0.7 else max(0.0, 1 - (k / 30 - 0.7) / 0.3))
                for k in range(1, 31)]  # fmt: skip
    assert logged_rates(tmp_path / "whole") == pytest.approx(expected, rel=1e-9, abs=1e-15)
    # the log says when the decay starts and the rate at the end; the progress bar shows the rate
    assert "Learning rate decay (linear, the last 30% of the budget) starts at update 2" in caplog.text
    assert "Finishing at update 30: time budget spent (learning rate 0)" in caplog.text
    assert "lr=0.00e+00]" in capsys.readouterr().err
    assert whole["final_model"]["chosen"] == "ema" and whole["final_model"]["selection"] == "ema"
    final = load_file(tmp_path / "whole" / "model.safetensors")
    averaged = load_file(tmp_path / "whole" / "checkpoints" / "step-00000030" / "ema.safetensors")
    assert all(torch.equal(final[name], tensor) for name, tensor in averaged.items())
    last = load_file(tmp_path / "whole" / "checkpoints" / "step-00000030" / "model.safetensors")
    assert any(not torch.equal(last[name], tensor) for name, tensor in averaged.items())  # the average, not the last

    paused = run_args(corpus, tmp_path / "paused", *options)
    assert train_in_process([*paused, "--stop_after_steps", "12"]) == {"step": 12, "stopped_early": True}
    resumed = train_in_process([*paused, "--resume_from_checkpoint", "latest"])
    assert resumed["step"] == 30 and logged_rates(tmp_path / "paused") == logged_rates(tmp_path / "whole")
    again = load_file(tmp_path / "paused" / "model.safetensors")
    assert final.keys() == again.keys() and all(torch.equal(final[name], again[name]) for name in final)
    longer = [*paused, "--resume_from_checkpoint", "step-00000012", "--max_train_minutes", "40"]
    status, stderr = train_command_in_process(longer)  # the curve depends on the budget: another one is refused
    assert status == 2 and "resume with the original options" in stderr, stderr[-2000:]


@pytest.mark.slow
def test_linear_decays_to_zero_at_the_end_of_a_time_budget(corpus, tmp_path, exact_minute_per_update):  # noqa: F811
    """--lr_scheduler linear with a time budget and no update count: after the warmup (2 updates, 2 minutes of 5) the
    rate falls linearly with the minutes spent, to 0 when the budget ends."""
    out = tmp_path / "run"
    results = train_in_process(run_args(corpus, out, "--max_train_minutes", "5", "--lr_scheduler", "linear",
                                        "--learning_rate", "1e-3", "--checkpoint_minutes", "60"))  # fmt: skip
    assert results["step"] == 5
    assert logged_rates(out) == pytest.approx([5e-4, 1e-3, 1e-3 * 2 / 3, 1e-3 / 3, 0.0], rel=1e-9, abs=1e-15)


# ---------------------------------------------------------------------------------------------------------------------
# Gradient checkpointing
# ---------------------------------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_gradient_checkpointing_recomputes_the_layers_and_keeps_the_losses(corpus, tmp_path, monkeypatch):  # noqa: F811
    """With --gradient_checkpointing true every encoder and decoder layer runs its forward twice per training
    micro-batch (again in the backward pass: its feed-forward sublayer is called twice), and the run computes the
    same losses as without it."""
    calls, losses = {}, {}
    original = loop.build_model

    def counting_build_model(*args, **kwargs):
        model = original(*args, **kwargs)
        counter = calls.setdefault(flag, [])
        for layer in [*model.model.encoder.layers, *model.model.decoder.layers]:  # inside the checkpointed forward
            layer.ffn.register_forward_hook(lambda module, inputs, output: counter.append(module.training))
        return model

    monkeypatch.setattr(loop, "build_model", counting_build_model)
    for flag in ("false", "true"):
        out = tmp_path / flag
        argv = run_args(corpus, out, "--max_train_steps", "3", "--checkpoint_minutes", "60", "--average_checkpoints",
                        "1", "--gradient_checkpointing", flag, "--encoder_layers", "2")  # fmt: skip
        train_in_process(argv)
        losses[flag] = [m["loss"] for m in read_metrics(out) if m["split"] == "train"]
    layers = 2 + 1  # TINY_MODEL's one decoder layer, two encoder layers
    assert sum(calls["false"]) == 3 * layers  # training-mode calls: one forward per update (3 micro-batches)
    assert sum(calls["true"]) == 2 * 3 * layers  # and once more in each backward pass
    assert losses["true"] == pytest.approx(losses["false"], rel=1e-6) and len(losses["true"]) == 3


# ---------------------------------------------------------------------------------------------------------------------
# torchrun: two gloo processes on CPU
# ---------------------------------------------------------------------------------------------------------------------
def torchrun(args: list[str], cwd, timeout: int = 300, script=REPO_ROOT / "train.py", use_cpu: bool = True):
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", "OMP_NUM_THREADS": "1",
           "ACCELERATE_USE_CPU": "1", "HF_DATASETS_CACHE": str(cwd / "datasets_cache")}  # fmt: skip
    if not use_cpu:
        del env["ACCELERATE_USE_CPU"]
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
           str(script), *args]  # fmt: skip
    return run_command(cmd, env=env, cwd=cwd, timeout=timeout)


@pytest.mark.slow
def test_torchrun_trains_with_two_processes(corpus, tmp_path):  # noqa: F811
    out = tmp_path / "run"
    result = torchrun(run_args(corpus, out, "--max_train_steps", "2", "--checkpoint_steps", "2",
                               "--average_checkpoints", "1"), tmp_path)  # fmt: skip
    assert result.returncode == 0, result.stderr[-4000:]
    assert "2 processes" in result.stderr
    assert json.loads((out / "results.json").read_text())["step"] == 2
    assert [m["step"] for m in read_metrics(out) if m["split"] == "train"] == [1, 2]  # logged once, not per process


@pytest.mark.slow
def test_every_process_follows_the_main_processs_share_of_the_time_budget(corpus, tmp_path):  # noqa: F811
    """Two processes whose clocks run at different speeds (tests/scripts/train_with_skewed_clocks.py), a time budget,
    warmup_stable_decay and the budget-fitted moving average: both use the main process's fraction of the budget,
    so they end with the same learning rate, the same weights and the same average, bit for bit."""
    out = tmp_path / "run"
    script = REPO_ROOT / "tests" / "scripts" / "train_with_skewed_clocks.py"
    result = torchrun(run_args(corpus, out, "--max_train_minutes", "0.1", "--lr_scheduler", "warmup_stable_decay",
                               "--learning_rate", "1e-3", "--decay_fraction", "0.5", "--ema_decay", "auto",
                               "--checkpoint_minutes", "60", "--average_checkpoints", "1"), tmp_path,
                      script=script)  # fmt: skip
    assert result.returncode == 0, result.stderr[-4000:]
    reports = dict(re.findall(r"ranks: rank (\d): (lr .*? step \d+) end", result.stderr))  # the ranks' lines may mix
    assert sorted(reports) == ["0", "1"] and reports["0"] == reports["1"], reports
    assert json.loads((out / "results.json").read_text())["finished_early"] == "time budget spent"


@pytest.mark.slow
@pytest.mark.skipif(torch.cuda.is_available() or torch.accelerator.is_available(), reason="a CPU-only machine")
def test_torchrun_on_cpu_without_accelerate_use_cpu_forms_one_gloo_group(corpus, tmp_path):  # noqa: F811
    """Issue 30: torchrun on a machine without GPUs and without ACCELERATE_USE_CPU=1 trains as one two-process gloo
    group (Accelerate alone would start two independent one-process runs into the same --output_dir)."""
    out = tmp_path / "run"
    result = torchrun(run_args(corpus, out, "--max_train_steps", "2", "--checkpoint_steps", "2",
                               "--average_checkpoints", "1"), tmp_path, use_cpu=False)  # fmt: skip
    assert result.returncode == 0, result.stderr[-4000:]
    assert "2 processes" in result.stderr and "1 processes" not in result.stderr
    assert json.loads((out / "results.json").read_text())["step"] == 2
    assert [m["step"] for m in read_metrics(out) if m["split"] == "train"] == [1, 2]  # one run, logged once


def test_launched_processes_reads_torchrun_and_mpi_variables(monkeypatch):
    for name in (*distributed.LAUNCHER_WORLD_SIZE, *distributed.LAUNCHER_RANK):
        monkeypatch.delenv(name, raising=False)
    assert distributed.launched_processes() == (1, 0)
    monkeypatch.setenv("OMPI_COMM_WORLD_SIZE", "4")
    monkeypatch.setenv("OMPI_COMM_WORLD_RANK", "3")
    assert distributed.launched_processes() == (4, 3)
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "1")
    assert distributed.launched_processes() == (2, 1)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.accelerator, "is_available", lambda: False)
    assert distributed.needs_cpu_group()  # two processes, no device: gloo on CPU
    monkeypatch.setattr(torch.accelerator, "is_available", lambda: True)
    assert not distributed.needs_cpu_group()  # a device: Accelerate's own backend
    monkeypatch.setenv("WORLD_SIZE", "1")
    monkeypatch.setattr(torch.accelerator, "is_available", lambda: False)
    assert not distributed.needs_cpu_group()  # one process: no group at all


@pytest.mark.parametrize("rank", [0, 1])
def test_processes_that_form_no_group_stop_before_any_work(corpus, tmp_path, monkeypatch, rank):  # noqa: F811
    """Two launched processes that Accelerate does not join into one group (here mpirun's, with a device claimed, so
    that no gloo group is forced, and none forms): rank 0 stops with one `error:` naming ACCELERATE_USE_CPU=1, the other rank
    with status 2 and nothing printed; neither reads data or writes into --output_dir."""
    out = tmp_path / "run"
    for name, value in {"OMPI_COMM_WORLD_SIZE": "2", "OMPI_COMM_WORLD_RANK": str(rank)}.items():  # mpirun's
        monkeypatch.setenv(name, value)
    for name in ("ACCELERATE_USE_CPU", "WORLD_SIZE", "RANK", "LOCAL_RANK"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(distributed, "needs_cpu_group", lambda: False)
    read = []
    monkeypatch.setattr(tasks, "load_translation_splits", lambda **kwargs: read.append(kwargs))
    status, stderr = train_command_in_process(run_args(corpus, out, "--max_train_steps", "1"))
    assert status == 2, stderr[-3000:]
    errors = [line for line in stderr.splitlines() if line.startswith("error:")]
    if rank == 0:
        assert len(errors) == 1 and "the launcher started 2 processes" in errors[0], stderr[-3000:]
        assert "ACCELERATE_USE_CPU=1" in errors[0]
    else:
        assert errors == [], stderr[-3000:]
    assert "Traceback" not in stderr and not read and not out.exists()


def test_gradient_checkpointing_with_layerdrop_is_refused_under_ddp(corpus, tmp_path, monkeypatch):  # noqa: F811
    """The refusal, in this process with Accelerate made to report two processes (a real two-process launch costs
    ~15 s more; the launch itself is tested above): `error: ...`, status 2, before any checkpoint; one process
    alone may combine the two."""
    from accelerate import Accelerator

    out = tmp_path / "run"
    argv = run_args(corpus, out, "--max_train_steps", "1", "--encoder_layerdrop", "0.2", "--gradient_checkpointing",
                    "true", "--checkpoint_minutes", "60", "--average_checkpoints", "1")  # fmt: skip
    with monkeypatch.context() as two:
        two.setattr(Accelerator, "num_processes", property(lambda self: 2))
        status, stderr = train_command_in_process(argv)
    assert status == 2, stderr[-3000:]
    assert "error: LayerDrop with gradient checkpointing fails under DDP; turn one of them off." in stderr
    assert "Traceback" not in stderr and not (out / "checkpoints").exists()
    assert train_in_process(argv)["step"] == 1  # one process: allowed


@pytest.mark.parametrize(("main", "local_main", "local", "first"), [
    (True, True, False, True), (False, True, False, False),  # the run's main process goes first
    (False, True, True, True), (False, False, True, False),  # local=True: each node's main process goes first
])  # fmt: skip
def test_main_process_first_lets_the_main_process_of_the_run_or_of_each_node_go_first(
    monkeypatch, main, local_main, local, first
):
    events = []
    monkeypatch.setattr(distributed, "_stop_together", lambda accelerator, failed: events.append("barrier"))
    accelerator = types.SimpleNamespace(num_processes=4, is_main_process=main, is_local_main_process=local_main)
    with distributed.main_process_first(accelerator, local=local):
        events.append("block")
    expected = ["block", "barrier", "barrier"] if first else ["barrier", "block", "barrier"]
    assert events == expected
