"""Checkpoints and checkpoint averaging: averaging equals the mean of the tensors, the averaged model keeps its tied
weights and loads without missing keys, keep_last and resume resolution, the command line, and kills (SIGKILL of a
real process) during a save that leave the previous checkpoint loadable."""

import contextlib
import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest
import torch
from conftest import REPO_ROOT, tiny_model
from safetensors.numpy import load_file as load_numpy
from safetensors.torch import load_file, save_file, save_model

from modeling_vaswani import VaswaniForConditionalGeneration
from vaswani.cli import main
from vaswani.errors import CheckpointError, ModelFolderError
from vaswani.export.average import average_run
from vaswani.training.checkpoints import CheckpointManager
from vaswani.weights import average_checkpoints, average_into_model


def mean_of(states, name):
    """The mean computed independently of the code under test, cast back to the tensor's dtype."""
    stacked = torch.stack([state[name] for state in states])
    return stacked.double().mean(0).to(stacked.dtype)


def perturbed_states(model, count, scale=0.1):
    """Perturb all parameters `count` times; the state dict after each perturbation (cloned)."""
    states = []
    for _ in range(count):
        with torch.no_grad():
            for parameter in model.parameters():
                parameter.add_(torch.randn_like(parameter) * scale)
        states.append({name: tensor.clone() for name, tensor in model.state_dict().items()})
    return states


def assert_tied(model):
    pointer = model.model.shared.weight.data_ptr()
    assert model.lm_head.weight.data_ptr() == pointer
    assert model.model.encoder.embed_tokens.weight.data_ptr() == pointer
    assert model.model.decoder.embed_tokens.weight.data_ptr() == pointer


# ---------------------------------------------------------------------------------------------------------------
# average_checkpoints
# ---------------------------------------------------------------------------------------------------------------
def random_state(seed):
    generator = torch.Generator().manual_seed(seed)
    return {
        "encoder.weight": torch.randn(3, 4, generator=generator),
        "encoder.half": torch.randn(5, generator=generator).half(),
        "decoder.bf16": torch.randn(2, 3, generator=generator).bfloat16(),
        "num_updates": torch.tensor([7], dtype=torch.int64),
    }


def test_average_equals_mean_of_tensors_and_keeps_dtypes(tmp_path):
    states = [random_state(seed) for seed in range(3)]
    paths = []
    for index, state in enumerate(states):
        if index == 0:  # a bare .safetensors file
            path = tmp_path / "first.safetensors"
            save_file(state, path)
        else:  # a checkpoint folder
            path = tmp_path / f"step-{index}"
            path.mkdir()
            save_file(state, path / "model.safetensors")
        paths.append(path)

    averaged = average_checkpoints(paths)

    assert set(averaged) == set(states[0])
    for name, original in states[0].items():
        assert averaged[name].dtype == original.dtype
        torch.testing.assert_close(averaged[name], mean_of(states, name), rtol=0, atol=0)
        if original.is_floating_point():
            assert not torch.equal(averaged[name], original)  # the average is not just one of the inputs
    assert torch.equal(averaged["num_updates"], torch.tensor([7]))


def test_average_sums_in_float64(tmp_path):
    # 2049 + 1 + 1 = 2051 is not a float16 number, but the mean 683.67 rounds to 683.5 in float16. Summing in
    # float16 would give 2048 + 1 + 1 = 2048 (every step rounds back), mean 682.67 -> 682.5.
    values = [2049.0, 1.0, 1.0]
    for index, value in enumerate(values):
        save_file({"x": torch.tensor([value], dtype=torch.float16)}, tmp_path / f"{index}.safetensors")
    averaged = average_checkpoints([tmp_path / f"{index}.safetensors" for index in range(3)])
    expected = torch.tensor([sum(values) / 3], dtype=torch.float64).half()
    assert torch.equal(averaged["x"], expected)


def test_single_checkpoint_averages_to_itself(tmp_path):
    state = random_state(0)
    save_file(state, tmp_path / "only.safetensors")
    averaged = average_checkpoints([tmp_path / "only.safetensors"])
    for name, tensor in state.items():
        assert averaged[name].dtype == tensor.dtype
        assert torch.equal(averaged[name], tensor)


def test_mismatched_key_sets_raise_with_the_names_and_paths(tmp_path):
    first, second = random_state(0), random_state(1)
    second["extra.weight"] = second.pop("encoder.weight")
    save_file(first, tmp_path / "a.safetensors")
    save_file(second, tmp_path / "b.safetensors")
    with pytest.raises(CheckpointError) as error:
        average_checkpoints([tmp_path / "a.safetensors", tmp_path / "b.safetensors"])
    message = str(error.value)
    for expected in ("encoder.weight", "extra.weight", "a.safetensors", "b.safetensors"):
        assert expected in message


def test_mismatched_shapes_raise_with_the_tensor_name(tmp_path):
    first, second = random_state(0), random_state(1)
    second["encoder.weight"] = torch.randn(4, 3)
    save_file(first, tmp_path / "a.safetensors")
    save_file(second, tmp_path / "b.safetensors")
    with pytest.raises(CheckpointError, match=r"'encoder.weight' has shape \(3, 4\).*\(4, 3\)"):
        average_checkpoints([tmp_path / "a.safetensors", tmp_path / "b.safetensors"])


def test_differing_integer_tensors_raise(tmp_path):
    first, second = random_state(0), random_state(1)
    second["num_updates"] = torch.tensor([8])
    save_file(first, tmp_path / "a.safetensors")
    save_file(second, tmp_path / "b.safetensors")
    with pytest.raises(CheckpointError, match="num_updates"):
        average_checkpoints([tmp_path / "a.safetensors", tmp_path / "b.safetensors"])


def test_no_checkpoints_and_unreadable_checkpoints_raise(tmp_path):
    with pytest.raises(CheckpointError, match="at least one"):
        average_checkpoints([])
    with pytest.raises(CheckpointError, match="no such checkpoint"):
        average_checkpoints([tmp_path / "missing"])
    (tmp_path / "empty").mkdir()
    with pytest.raises(CheckpointError, match="holds no model weights"):
        average_checkpoints([tmp_path / "empty"])
    (tmp_path / "truncated.safetensors").write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{")
    with pytest.raises(CheckpointError, match="cannot read"):
        average_checkpoints([tmp_path / "truncated.safetensors"])


def test_a_checkpoint_removed_while_it_is_read_says_the_training_rotated_it_out(tmp_path, monkeypatch):
    """`vaswani average --run_dir RUN` beside a running training: the run may delete its oldest checkpoint between
    the listing and the reading (safetensors then fails with "No such file")."""
    import safetensors.torch

    checkpoint = tmp_path / "step-00000001"
    checkpoint.mkdir()
    save_file({"w": torch.ones(2)}, checkpoint / "model.safetensors")
    real_load = safetensors.torch.load_file

    def rotated_out(file, device="cpu"):
        os.remove(file)  # the training's rotation, at the wrong moment
        return real_load(file, device=device)

    monkeypatch.setattr(safetensors.torch, "load_file", rotated_out)
    with pytest.raises(CheckpointError, match="went away while it was read: a running training removes its oldest"):
        average_checkpoints([checkpoint])


def test_sharded_checkpoint_folders_are_read_whole(tmp_path):
    model = tiny_model()
    model.save_pretrained(tmp_path / "sharded", max_shard_size="20KB")
    model.save_pretrained(tmp_path / "single")
    assert len(list((tmp_path / "sharded").glob("model-*.safetensors"))) > 1
    assert not (tmp_path / "sharded" / "model.safetensors").exists()
    averaged = average_checkpoints([tmp_path / "sharded"])
    single = load_file(tmp_path / "single" / "model.safetensors")
    assert averaged.keys() == single.keys()
    for name, tensor in averaged.items():
        assert torch.equal(tensor, single[name])


# ---------------------------------------------------------------------------------------------------------------
# average_into_model, average_run, the command line
# ---------------------------------------------------------------------------------------------------------------
def test_average_into_model_from_accelerate_save_state(tmp_path, accelerator):
    model = tiny_model(seed=0)
    optimizer = torch.optim.Adam(model.parameters())
    model, optimizer = accelerator.prepare(model, optimizer)
    manager = CheckpointManager(tmp_path / "checkpoints")
    states = []
    for step in (100, 200, 300):
        states += perturbed_states(accelerator.unwrap_model(model), 1)
        manager.save(step, lambda folder: accelerator.save_state(folder))
    checkpoint = manager.latest()
    assert (checkpoint / "model.safetensors").is_file()  # the layout accelerate writes is the one we read
    assert "lm_head.weight" not in load_file(checkpoint / "model.safetensors")  # tied duplicates are dropped

    averaged_model = tiny_model(seed=1)
    average_into_model(averaged_model, manager.checkpoints())

    for name, tensor in averaged_model.state_dict().items():
        torch.testing.assert_close(tensor, mean_of(states, name))
    assert_tied(averaged_model)


def test_average_into_model_rejects_tensors_that_do_not_fit(tmp_path):
    model = tiny_model()
    state = {name: tensor.clone() for name, tensor in model.state_dict().items() if name != "lm_head.weight"}
    untied = "model.encoder.layers.0.ffn.fc1.weight"
    assert untied in state

    save_file({**state, "model.unknown.weight": torch.zeros(2)}, tmp_path / "unexpected.safetensors")
    with pytest.raises(CheckpointError, match="model.unknown.weight"):
        average_into_model(model, [tmp_path / "unexpected.safetensors"])

    untied_missing = {name: tensor for name, tensor in state.items() if name != untied}
    save_file(untied_missing, tmp_path / "missing.safetensors")
    with pytest.raises(CheckpointError, match=untied):
        average_into_model(model, [tmp_path / "missing.safetensors"])

    # every name of the tied embedding matrix missing: nothing to copy it from
    tied = {"model.shared.weight", "model.encoder.embed_tokens.weight", "model.decoder.embed_tokens.weight"}
    assert tied < state.keys()
    all_embeddings_missing = {name: tensor for name, tensor in state.items() if name not in tied}
    save_file(all_embeddings_missing, tmp_path / "no_embeddings.safetensors")
    with pytest.raises(CheckpointError, match="model.shared.weight"):
        average_into_model(model, [tmp_path / "no_embeddings.safetensors"])


@pytest.fixture
def finished_run(tmp_path):
    """A finished run: the final model folder with tokenizer files and a model card, and three checkpoints under
    checkpoints/ written with safetensors' `save_model` (it keeps the tied matrix as lm_head.weight)."""
    from test_pipeline_vaswani import tiny_tokenizer

    folder = tmp_path / "run"
    tokenizer = tiny_tokenizer()
    model = tiny_model(seed=0, vocab_size=len(tokenizer))
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)  # average checks that it fits the model
    (folder / "README.md").write_text("# A tiny model\n\n| test | 99.0 |\n", encoding="utf-8")  # the run's scores
    (folder / "run_args.json").write_text(
        json.dumps({"source_lang": "en", "target_lang": "de", "max_train_steps": 3000})
    )
    manager = CheckpointManager(folder / "checkpoints")
    states = []
    for step in (1000, 2000, 3000):
        states += perturbed_states(model, 1)
        manager.save(step, lambda checkpoint: save_model(model, str(checkpoint / "model.safetensors")))
    return folder, states


def check_averaged_folder(output, run, states, steps=None):
    """`output` holds the average of `states`, the checkpoints of `steps` (default: the last ones of the run)."""
    steps = steps or (1000, 2000, 3000)[-len(states) :]
    model, info = VaswaniForConditionalGeneration.from_pretrained(output, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"]
    for name, tensor in model.state_dict().items():
        torch.testing.assert_close(tensor, mean_of(states, name))
    assert_tied(model)
    for name in ("tokenizer.json", "tokenizer_config.json", "run_args.json"):
        assert (output / name).read_bytes() == (run / name).read_bytes()
    assert model.generation_config.num_beams == 4
    # a card of its own, named after the output folder, without the run's scores (another model's)
    card = (output / "README.md").read_text()
    first, last = f"step-{steps[0]:08d}", f"step-{steps[-1]:08d}"
    assert f"\n# {output.name}\n" in card and "99.0" not in card and "No evaluation results" in card
    assert f"| Checkpoint averaging | {len(states)} checkpoint(s): {first} to {last} |" in card
    assert f"| Updates | {steps[-1]} |" in card
    # results.json is the average's record: `vaswani card` renders the same card again, without another's scores
    record = json.loads((output / "results.json").read_text())
    assert record["averaged_checkpoints"] == [f"step-{step:08d}" for step in steps] and record["step"] == steps[-1]
    assert "test" not in record and "validation" not in record
    (output / "README.md").unlink()
    assert main(["card", "--model", str(output)]) == 0
    assert (output / "README.md").read_text() == card


def test_average_run_writes_a_complete_model_folder(tmp_path, finished_run):
    run, states = finished_run
    output = average_run(run, last=2, output_dir=tmp_path / "averaged")
    assert output == tmp_path / "averaged"
    check_averaged_folder(output, run, states[-2:])  # the last two of three
    assert not [path for path in tmp_path.iterdir() if path.name.startswith(".tmp-")]


def test_average_run_in_place_keeps_the_checkpoints(tmp_path, finished_run):
    run, states = finished_run
    scores = {"step": 3000, "test": {"bleu": 99.0, "chrf": 99.5}, "final_model": {"chosen": "last"}}
    (run / "results.json").write_text(json.dumps(scores))  # the run's final model's, which the average replaces
    average_run(run, last=3, output_dir=run)
    check_averaged_folder(run, run, states)  # the card, rendered then and again, shows no score
    assert json.loads((run / "results.json").read_text())["replaced_model_results"] == scores  # kept, set apart
    assert len(CheckpointManager(run / "checkpoints").checkpoints()) == 3
    assert not [path for path in tmp_path.iterdir() if path.name.startswith(".tmp-")]


def test_average_run_errors(tmp_path, finished_run):
    run, _states = finished_run
    with pytest.raises(CheckpointError, match=r"last 5 checkpoint\(s\).*has 3 complete"):
        average_run(run, last=5, output_dir=tmp_path / "out")
    (tmp_path / "not_a_model").mkdir()
    with pytest.raises(ModelFolderError, match="not a model folder"):
        average_run(tmp_path / "not_a_model", last=1, output_dir=tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_command_line_averages_a_run(tmp_path, finished_run, capsys):
    run, states = finished_run
    output = tmp_path / "cli-averaged"
    status = main(["average", "--run_dir", str(run), "--last", "3", "--output_dir", str(output)])
    assert status == 0, capsys.readouterr().err
    check_averaged_folder(output, run, states)

    checkpoints = [str(path) for path in CheckpointManager(run / "checkpoints").checkpoints()[:2]]
    output = tmp_path / "cli-explicit"
    status = main(["average", "--checkpoints", *checkpoints, "--model", str(run), "--output_dir", str(output)])
    assert status == 0, capsys.readouterr().err
    check_averaged_folder(output, run, states[:2], steps=(1000, 2000))


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--run_dir", "{run}", "--last", "9", "--output_dir", "{tmp}/out"], "has 3 complete"),
        (["--run_dir", "{tmp}/nowhere", "--last", "1", "--output_dir", "{tmp}/out"], "no such model folder"),
        (["--checkpoints", "{tmp}/nowhere", "--model", "{run}", "--output_dir", "{tmp}/out"], "no such checkpoint"),
        (["--run_dir", "{run}", "--output_dir", "{tmp}/out"], "needs --last"),
        (["--run_dir", "{run}", "--last", "0", "--output_dir", "{tmp}/out"], "at least 1"),
        (["--run_dir", "{run}", "--last", "five", "--output_dir", "{tmp}/out"], "whole number"),
        (["--checkpoints", "{run}", "--output_dir", "{tmp}/out"], "needs --model"),
    ],
)
def test_command_line_errors_exit_2_without_traceback(tmp_path, finished_run, capsys, arguments, message):
    run, _states = finished_run
    argv = ["average", *(argument.format(run=run, tmp=tmp_path) for argument in arguments)]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "error:" in err and message in err
    assert "Traceback" not in err


@pytest.mark.slow
def test_vaswani_average_in_a_fresh_process_reports_errors_with_status_2(tmp_path):
    command = [sys.executable, "-m", "vaswani.cli", "average", "--run_dir", str(tmp_path / "nowhere")]
    command += ["--last", "5", "--output_dir", str(tmp_path / "out")]
    result = subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 2
    assert result.stderr.startswith("error: no such model folder")
    assert "Traceback" not in result.stderr


# ---------------------------------------------------------------------------------------------------------------
# CheckpointManager: saving, keep_last, listing, resolving
# ---------------------------------------------------------------------------------------------------------------
def write_files(**files):
    """A `write` callback that writes text files into the checkpoint folder."""

    def write(folder):
        for name, text in files.items():
            (folder / name).write_text(text, encoding="utf-8")

    return write


def test_save_publishes_a_complete_folder(tmp_path):
    manager = CheckpointManager(tmp_path / "checkpoints")
    path = manager.save(123, write_files(**{"model.txt": "weights", "extra.json": "{}"}))
    assert path == tmp_path / "checkpoints" / "step-00000123"
    assert (path / "model.txt").read_text() == "weights" and (path / "extra.json").read_text() == "{}"
    marker = json.loads((path / "checkpoint.json").read_text())
    assert marker["step"] == 123 and marker["complete"] is True and "time" in marker
    assert manager.checkpoints() == [path] and manager.latest() == path
    assert manager.leftovers() == []
    assert CheckpointManager.step_of(path) == 123


def test_saving_a_step_again_replaces_it(tmp_path):
    manager = CheckpointManager(tmp_path)
    manager.save(5, write_files(**{"old.txt": "old"}))
    path = manager.save(5, write_files(**{"new.txt": "new"}))
    assert sorted(file.name for file in path.iterdir()) == ["checkpoint.json", "new.txt"]
    assert manager.checkpoints() == [path] and manager.leftovers() == []


def test_keep_last_keeps_exactly_the_last_k(tmp_path):
    manager = CheckpointManager(tmp_path, keep_last=2)
    for step in range(1, 6):
        manager.save(step * 10, write_files(**{"w": str(step)}))
    assert [CheckpointManager.step_of(path) for path in manager.checkpoints()] == [40, 50]
    assert manager.leftovers() == []
    # Resumed from an older step: the checkpoint just written is never the one deleted.
    manager.save(15, write_files(**{"w": "again"}))
    assert [CheckpointManager.step_of(path) for path in manager.checkpoints()] == [15, 50]
    with pytest.raises(ValueError, match="keep_last"):
        CheckpointManager(tmp_path, keep_last=0)


def test_keep_last_none_keeps_everything(tmp_path):
    manager = CheckpointManager(tmp_path)
    for step in range(4):
        manager.save(step, write_files(w="x"))
    assert [CheckpointManager.step_of(path) for path in manager.checkpoints()] == [0, 1, 2, 3]


def test_all_processes_write_into_one_checkpoint(tmp_path):
    """Two "processes" (threads) save together, each block ending at a barrier (train.py's `together` also shares
    whether a process failed there; tests/training/test_loop.py runs it in two real processes)."""
    manager = CheckpointManager(tmp_path)
    barrier = threading.Barrier(2, timeout=30)
    results, errors = {}, []

    @contextlib.contextmanager
    def together():
        yield
        barrier.wait()

    def process(rank):
        try:
            results[rank] = manager.save(
                7,
                write_files(**{f"random_states_{rank}.pkl": str(rank)}),
                is_main_process=rank == 0,
                together=together,
            )
            results[f"listed by {rank}"] = manager.checkpoints()  # after save returns, the checkpoint is in place
        except Exception as error:  # reported by the main thread
            errors.append(error)

    threads = [threading.Thread(target=process, args=(rank,)) for rank in (0, 1)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    path = tmp_path / "step-00000007"
    assert results[0] == results[1] == path
    assert results["listed by 0"] == results["listed by 1"] == [path]
    assert sorted(file.name for file in path.iterdir()) == [
        "checkpoint.json",
        "random_states_0.pkl",
        "random_states_1.pkl",
    ]


def test_only_complete_checkpoints_are_listed(tmp_path):
    manager = CheckpointManager(tmp_path)
    complete = manager.save(3, write_files(w="x"))
    (tmp_path / "step-00000009").mkdir()  # no marker
    (tmp_path / "step-00000010").mkdir()
    (tmp_path / "step-00000010" / "checkpoint.json").write_text('{"step": 10, "complete": false}')
    (tmp_path / "step-00000011").mkdir()
    (tmp_path / "step-00000011" / "checkpoint.json").write_text('{"step": 11, "comp')  # torn write
    (tmp_path / ".tmp-step-00000012").mkdir()
    (tmp_path / "logs").mkdir()
    assert manager.checkpoints() == [complete] and manager.latest() == complete
    assert CheckpointManager(tmp_path / "nowhere").checkpoints() == []
    assert CheckpointManager(tmp_path / "nowhere").latest() is None


def test_remove_incomplete_deletes_only_leftovers(tmp_path):
    manager = CheckpointManager(tmp_path)
    complete = manager.save(1, write_files(w="x"))
    (tmp_path / ".tmp-step-00000002").mkdir()
    (tmp_path / ".tmp-step-00000002" / "model.safetensors").write_bytes(b"partial")
    (tmp_path / ".tmp-deleted-step-00000000").mkdir()
    removed = manager.remove_incomplete()
    assert sorted(path.name for path in removed) == [".tmp-deleted-step-00000000", ".tmp-step-00000002"]
    assert sorted(path.name for path in tmp_path.iterdir()) == [complete.name]


def test_resolve(tmp_path):
    manager = CheckpointManager(tmp_path / "checkpoints")
    with pytest.raises(CheckpointError, match="no complete checkpoint under"):
        manager.resolve("latest")
    first = manager.save(100, write_files(w="1"))
    second = manager.save(200, write_files(w="2"))
    assert manager.resolve("latest") == second
    assert manager.resolve(str(first)) == first
    assert manager.resolve("step-00000100") == first  # a name under root

    with pytest.raises(CheckpointError, match="no such checkpoint directory"):
        manager.resolve(str(tmp_path / "checkpoints" / "step-00000300"))
    partial = tmp_path / "checkpoints" / ".tmp-step-00000300"
    partial.mkdir()
    with pytest.raises(CheckpointError, match=r"incomplete checkpoint.*checkpoint\.json is missing"):
        manager.resolve(str(partial))
    (tmp_path / "file.txt").write_text("x")
    with pytest.raises(CheckpointError, match="not a directory"):
        manager.resolve(str(tmp_path / "file.txt"))
    with pytest.raises(CheckpointError, match="step-<number>"):
        CheckpointManager.step_of(partial)


# ---------------------------------------------------------------------------------------------------------------
# A kill (SIGKILL) during a save leaves the previous checkpoint loadable
# ---------------------------------------------------------------------------------------------------------------
# The saving process: step 1 completely, then a second save that is killed at `stage`. It writes the tiny model's
# state with safetensors (numpy, so the process starts fast) plus another file, as train.py writes save_state's
# files plus its own. `signal_file` tells the test that the chosen point is reached.
SAVING_PROCESS = textwrap.dedent(
    """
    import json, os, sys, time
    from pathlib import Path

    import numpy as np
    from safetensors.numpy import save_file

    from vaswani.training.checkpoints import CheckpointManager

    root, stage, signal_file = Path(sys.argv[1]), sys.argv[2], Path(sys.argv[3])
    manager = CheckpointManager(root)

    def write_state(folder, seed):
        rng = np.random.default_rng(seed)
        state = {"linear.weight": rng.standard_normal((4, 3)).astype(np.float32), "linear.bias": np.zeros(4, np.float32)}
        save_file(state, str(folder / "model.safetensors"))
        (folder / "trainer_state.json").write_text(json.dumps({"seed": seed}))

    manager.save(1, lambda folder: write_state(folder, seed=1))

    def second_write(folder):
        write_state(folder, seed=2)
        if stage == "during_write":  # a large file written slowly: killed in the middle of it
            with open(folder / "optimizer.bin", "wb") as stream:
                while True:
                    stream.write(b"x" * 4096)
                    stream.flush()
                    time.sleep(0.005)
        if stage == "after_write":  # everything written, the save has not gone on to the marker and the rename
            signal_file.touch()
            time.sleep(600)

    real_replace = os.replace

    def blocking_replace(source, destination):
        # The rename that publishes the new folder (its marker is written by now): blocks forever.
        if Path(source).name.startswith(".tmp-step-"):
            signal_file.touch()
            time.sleep(600)
        real_replace(source, destination)

    os.replace = blocking_replace
    step = 1 if stage == "replacing" else 2  # "replacing": a new save of step 1, the old one moved aside
    manager.save(step, second_write)
    """
)


def expected_state(seed):
    rng = np.random.default_rng(seed)
    return {"linear.weight": rng.standard_normal((4, 3)).astype(np.float32), "linear.bias": np.zeros(4, np.float32)}


def wait_until(condition, process, timeout=60.0):
    deadline = time.monotonic() + timeout
    while not condition():
        if process.poll() is not None:
            pytest.fail(f"the saving process ended early:\n{process.stderr.read()}")
        if time.monotonic() > deadline:
            process.kill()
            pytest.fail("the saving process did not reach the kill point in time")
        time.sleep(0.01)


@pytest.mark.slow
@pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs SIGKILL")
@pytest.mark.parametrize("stage", ["during_write", "after_write", "before_rename", "replacing"])
def test_kill_during_save_leaves_the_previous_checkpoint_loadable(tmp_path, stage):
    root, signal_file = tmp_path / "checkpoints", tmp_path / "reached"
    tmp_dir = root / (".tmp-step-00000001" if stage == "replacing" else ".tmp-step-00000002")
    process = subprocess.Popen(
        [sys.executable, "-c", SAVING_PROCESS, str(root), stage, str(signal_file)],
        cwd=REPO_ROOT,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        if stage == "during_write":
            partial = tmp_dir / "optimizer.bin"
            wait_until(lambda: partial.is_file() and partial.stat().st_size > 0, process)
        else:
            wait_until(signal_file.exists, process)
        assert tmp_dir.is_dir()  # killed in the middle of the second save
        os.kill(process.pid, signal.SIGKILL)
        assert process.wait(timeout=30) == -signal.SIGKILL
    finally:
        process.kill()
        process.stderr.close()

    manager = CheckpointManager(root)
    first = root / "step-00000001"
    if (
        stage == "replacing"
    ):  # killed between the two renames: the old folder waits aside, remove_incomplete restores it
        assert manager.checkpoints() == []
        assert (root / ".tmp-replaced-step-00000001").is_dir()
    else:
        assert manager.checkpoints() == [first] and manager.latest() == first
        assert manager.resolve("latest") == first
    assert manager.leftovers()  # only .tmp-* leftovers...
    assert all(path.name.startswith(".tmp-") or path == first for path in root.iterdir())

    manager.remove_incomplete()

    assert manager.leftovers() == []
    assert sorted(root.iterdir()) == [first]
    assert manager.checkpoints() == [first] and manager.resolve("latest") == first
    loaded = load_numpy(str(first / "model.safetensors"))
    for name, array in expected_state(seed=1).items():
        np.testing.assert_array_equal(loaded[name], array)
    assert json.loads((first / "trainer_state.json").read_text()) == {"seed": 1}


def test_set_aside_newer_moves_later_checkpoints_out_of_the_run(tmp_path):
    manager = CheckpointManager(tmp_path / "checkpoints")
    for step in (2, 4, 6):
        manager.save(step, lambda folder, step=step: (folder / "weights.txt").write_text(str(step)))
    moved = manager.set_aside_newer(manager.root / "step-00000002")
    assert [CheckpointManager.step_of(p) for p in manager.checkpoints()] == [2]
    assert sorted(p.name for p in moved) == ["step-00000004", "step-00000006"]
    assert all(p.parent.name.startswith("abandoned-") and (p / "weights.txt").exists() for p in moved)
    assert manager.set_aside_newer(manager.root / "step-00000002") == []
