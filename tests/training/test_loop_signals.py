"""Ctrl-C and SIGTERM during training: the update under way ends with a checkpoint (a second Ctrl-C stops at once),
and an evaluation under way stops after its batch, to run first when the run resumes; on one process and on two
(SIGTERM between updates, resumed to identical weights, is in test_loop.py with the other resumes)."""

import contextlib
import json
import os
import subprocess
import time

import pytest
import torch
from conftest import REPO_ROOT, cpu_ranks_command, descendants, reports_of_two_ranks, train_command_in_process
from safetensors.torch import load_file
from test_loop import TINY_RUN, data_args, data_dir, read_metrics, run_train, train_env, train_losses  # noqa: F401


@pytest.mark.parametrize("signals", ["SIGINT", "SIGINT SIGINT", "SIGINT SIGTERM"])
def test_ctrl_c_stops_at_the_end_of_the_update_and_a_second_one_at_once(data_dir, tmp_path, monkeypatch, caplog,  # noqa: F811
                                                                        signals):  # fmt: skip
    """Ctrl-C during update 2: one stops the run after it with the checkpoint of update 2 (exit status 130); a second
    one stops it at once, without that checkpoint; a SIGTERM after it (torchrun's agent sends one to its workers on
    Ctrl-C) changes nothing. The handlers before the loop come back in every case."""
    import signal

    from vaswani.training import loop

    def train_step(run, feeder):
        result = real_train_step(run, feeder)
        if run.training.progress.step == 2:
            for name in signals.split():
                os.kill(os.getpid(), getattr(signal, name))  # Python runs the handler before the next bytecode
        return result

    real_train_step, before = loop.train_step, signal.getsignal(signal.SIGINT)
    monkeypatch.setattr(loop, "train_step", train_step)
    output = tmp_path / "run"
    with caplog.at_level("WARNING", logger="train"):
        status, stderr = train_command_in_process([*data_args(data_dir), *TINY_RUN, "--max_train_steps", "5",
                                                   "--checkpoint_steps", "4", "--output_dir", str(output),
                                                   "--cache_dir", str(tmp_path / "cache")])  # fmt: skip
    assert status == 130 and signal.getsignal(signal.SIGINT) is before
    saved = [c.name for c in (output / "checkpoints").iterdir()] if (output / "checkpoints").exists() else []
    logged = caplog.text
    assert "Ctrl-C: stopping at the end of this update with a checkpoint" in logged
    interrupted = "interrupted\n" in stderr  # run_command's words (after a progress bar's unfinished line)
    if signals != "SIGINT SIGINT":
        assert saved == ["step-00000002"] and not interrupted and "error" not in stderr
        assert "Stopped by Ctrl-C at update 2 of 5, saved in" in logged
    else:
        assert saved == [] and interrupted and "Stopped by" not in logged


@pytest.mark.parametrize("final_model", ["auto", "last"])  # with and without a validation record (early_stopping)
def test_a_signal_during_an_evaluation_stops_it_after_its_batch_and_the_resume_runs_it_first(data_dir, tmp_path,  # noqa: F811
                                                                                              monkeypatch, caplog,
                                                                                              final_model):  # fmt: skip
    """SIGTERM during the first batch of the evaluation at update 2 (of several: --eval_max_tokens 60): the run stops
    after that batch, not after the whole evaluation, with the checkpoint of update 2 saying its evaluation is due;
    --resume_from_checkpoint latest runs it first, before update 3, and saves that checkpoint again without the mark
    (a validation record saves it anyway; without one, only the mark does). The metrics, the validation record and
    the checkpoint of update 3 then equal an uninterrupted run's (both stop there: --stop_after_steps, no final
    model)."""
    import signal

    from vaswani.training import evaluation, loop

    calls = []  # "batch" for each held-out batch made, the split for each evaluation logged

    def collate(*args, **kwargs):
        calls.append("batch")
        if send_signal and calls.count("batch") == 1:
            os.kill(os.getpid(), signal.SIGTERM)  # Python runs the handler before the next bytecode
        return real_collate(*args, **kwargs)

    def log_evaluation(split, results, step):
        calls.append(split)
        real_log_evaluation(split, results, step)

    real_collate, real_log_evaluation = evaluation.collate, loop.log_evaluation
    monkeypatch.setattr(evaluation, "collate", collate)
    monkeypatch.setattr(loop, "log_evaluation", log_evaluation)
    common = [*data_args(data_dir), *TINY_RUN, "--max_train_steps", "6", "--eval_steps", "2", "--eval_max_tokens",
              "60", "--checkpoint_steps", "100", "--final_model", final_model,
              "--cache_dir", str(tmp_path / "cache")]  # fmt: skip
    recorded = final_model == "auto"

    send_signal, straight = False, tmp_path / "straight"
    status, stderr = train_command_in_process([*common, "--output_dir", str(straight), "--stop_after_steps", "3"])
    assert status == 0, stderr[-4000:]
    assert calls.count("batch") >= 2 and calls[-1] == "validation", calls  # one evaluation of several batches

    calls.clear()
    send_signal, output = True, tmp_path / "run"
    with caplog.at_level("WARNING", logger="train"):
        status, stderr = train_command_in_process([*common, "--output_dir", str(output)])
    assert status == 128 + signal.SIGTERM, stderr[-4000:]
    assert calls == ["batch"]  # the batch under way, then no other
    assert "an evaluation under way stops after its batch and runs again on resume" in caplog.text
    assert "Stopped the evaluation at update 2; it runs again when the run resumes" in caplog.text
    assert "Stopped by SIGTERM at update 2 of 6, saved in" in caplog.text
    assert [c.name for c in (output / "checkpoints").iterdir()] == ["step-00000002"]
    state = json.loads((output / "checkpoints" / "step-00000002" / "stopping_state.json").read_text())
    assert state["evaluation_due"] is True
    assert state["early_stopping"] is None if not recorded else state["early_stopping"]["history"] == []
    assert [row for row in read_metrics(output) if row["split"] == "validation"] == []

    calls.clear()
    send_signal = False
    caplog.clear()
    with caplog.at_level("INFO", logger="train"):
        status, stderr = train_command_in_process([*common, "--output_dir", str(output), "--resume_from_checkpoint",
                                                   "latest", "--stop_after_steps", "1"])  # fmt: skip
    assert status == 0, stderr[-4000:]
    assert "its evaluation, stopped by a signal, runs first" in caplog.text
    assert calls.count("batch") >= 2 and calls[-1] == "validation", calls  # evaluated again, whole
    state = json.loads((output / "checkpoints" / "step-00000002" / "stopping_state.json").read_text())
    assert state["evaluation_due"] is False  # saved again: a later resume from it does not evaluate it a third time

    ours, theirs = read_metrics(output), read_metrics(straight)
    assert [(row["split"], row["step"]) for row in ours] == [(row["split"], row["step"]) for row in theirs]
    validation = [row for row in ours if row["split"] == "validation"]
    assert validation and validation == [row for row in theirs if row["split"] == "validation"]
    assert train_losses(output) == train_losses(straight)
    ours, theirs = (json.loads((run / "checkpoints" / "step-00000003" / "stopping_state.json").read_text())
                    for run in (output, straight))  # fmt: skip
    assert ours["early_stopping"] == theirs["early_stopping"]
    if recorded:
        assert [step for step, _ in ours["early_stopping"]["history"]] == [2]
    else:
        assert ours["early_stopping"] is None
    a, b = (load_file(run / "checkpoints" / "step-00000003" / "model.safetensors") for run in (straight, output))
    assert a.keys() == b.keys() and all(torch.equal(a[key], b[key]) for key in a)


@pytest.mark.slow
def test_sigterm_during_an_evaluation_of_two_processes_stops_both_and_the_resume_evaluates_first(data_dir, tmp_path):  # noqa: F811
    """Two gloo ranks under `accelerate launch`; SIGTERM to the launcher, which passes it to both, as soon as update 2
    is logged: the evaluation at update 2 (48 pairs in batches of 40 tokens at most) stops on both ranks with the
    checkpoint of update 2 marked due. Resumed, both evaluate it first (only the main process reads the mark; the
    other must learn it, or the two would wait in different collective operations), then train on."""
    import signal

    out = tmp_path / "run"
    args = [*data_args(data_dir), *TINY_RUN, "--max_train_steps", "4", "--eval_steps", "2", "--eval_max_tokens", "40",
            "--max_eval_samples", "48", "--checkpoint_steps", "100", "--final_eval_samples", "4",
            "--output_dir", str(out)]  # fmt: skip
    env = {**train_env(tmp_path), "ACCELERATE_USE_CPU": "1"}
    launcher = subprocess.Popen(cpu_ranks_command(REPO_ROOT / "train.py", args, 2), cwd=tmp_path, env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)  # fmt: skip
    deadline, metrics = time.monotonic() + 300, out / "metrics.jsonl"
    try:
        while not (metrics.exists() and '"step": 2' in metrics.read_text()):
            assert launcher.poll() is None and time.monotonic() < deadline, "the run ended before update 2"
            time.sleep(0.02)
        launcher.send_signal(signal.SIGTERM)
        stderr = launcher.communicate(timeout=120)[1]
    finally:
        for pid in [launcher.pid, *descendants(launcher.pid)]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    assert "Stopped the evaluation at update 2; it runs again when the run resumes" in stderr, stderr[-4000:]
    assert "Stopped by SIGTERM at update 2 of 4, saved in" in stderr
    assert [c.name for c in (out / "checkpoints").iterdir()] == ["step-00000002"]
    assert json.loads((out / "checkpoints" / "step-00000002" / "stopping_state.json").read_text())["evaluation_due"]
    # the evaluation first, then one update and a stop (--stop_after_steps: no final evaluation, which has its tests)
    again = run_train([*args, "--resume_from_checkpoint", "latest", "--stop_after_steps", "1"], tmp_path, processes=2,
                      timeout=300)  # fmt: skip
    assert again.returncode == 0, again.stderr[-4000:]
    assert "its evaluation, stopped by a signal, runs first" in again.stderr
    rows = [(row["split"], row["step"]) for row in read_metrics(out)]
    assert rows == [("train", 1), ("train", 2), ("validation", 2), ("train", 3)]
    assert sorted(c.name for c in (out / "checkpoints").iterdir()) == ["step-00000002", "step-00000003"]


@pytest.mark.slow
def test_an_evaluation_stops_on_every_process_at_the_main_process_word(tmp_path):
    """`held_out_batches` on two gloo processes holding 3 and 2 batches (tests/scripts/held_out_batches.py): each asks
    as often as the process with the most batches, and the main process's answer stops both at the same round, also
    after the other's last batch; a yes from the other process alone stops nothing; nobody waits forever."""
    main, other = reports_of_two_ranks("held_out_batches.py", tmp_path)
    own = main["own batches"], other["own batches"]
    assert [len(batches) for batches in own] == [3, 2]
    seen = {case: (main[case]["batches"], other[case]["batches"]) for case in main if case != "own batches"}
    stopped = {case: (main[case]["stopped"], other[case]["stopped"]) for case in seen}
    assert seen == {
        "no stop function": own,
        "nobody stops": own,
        "the main process stops at its second question": (own[0][:1], own[1][:1]),
        "the main process stops after the other's last batch": (own[0][:2], own[1]),
        "only the other process stops": own,
    }
    assert stopped == {case: (True, True) if "main process stops" in case else (False, False) for case in seen}
    assert (main["nobody stops"]["questions"], other["nobody stops"]["questions"]) == (3, 3)  # as many as the most
