"""train.py's options that depend on the clock or on the launcher, each shown to change what a run does (issue 22):
`--stop_after_minutes` and time-based `--checkpoint_minutes` under a fake clock on which every update takes one
minute (no real waiting), `--gradient_checkpointing` (each layer's forward runs again in the backward pass, the
same losses), its refusal together with LayerDrop under DDP, and the `torchrun` launch path (two gloo processes)."""

import json
import os
import sys
import time
import types

import pytest
import torch
from conftest import REPO_ROOT, run_command, train_command_in_process, train_in_process
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
@pytest.fixture
def minute_per_update(monkeypatch):
    """`time` as vaswani.training.loop sees it, with a `monotonic()` that runs one minute ahead more after every update
    (train_step wrapped); everything else about time is real."""
    minutes = [0]
    clock = types.SimpleNamespace(**{name: getattr(time, name) for name in dir(time) if not name.startswith("_")})
    clock.monotonic = lambda: time.monotonic() + 60 * minutes[0]
    monkeypatch.setattr(loop, "time", clock)
    original = loop.train_step

    def one_minute_step(run, stream):
        result = original(run, stream)
        minutes[0] += 1
        return result

    monkeypatch.setattr(loop, "train_step", one_minute_step)
    return minutes


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
def torchrun(args: list[str], cwd, timeout: int = 300, use_cpu: bool = True):
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", "OMP_NUM_THREADS": "1",
           "ACCELERATE_USE_CPU": "1", "HF_DATASETS_CACHE": str(cwd / "datasets_cache")}  # fmt: skip
    if not use_cpu:
        del env["ACCELERATE_USE_CPU"]
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
           str(REPO_ROOT / "train.py"), *args]  # fmt: skip
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
