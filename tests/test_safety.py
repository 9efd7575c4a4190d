"""Nothing lost, nothing executed (issue 11): checkpoint state files that cannot run code, resume that restores
everything or stops, and the file-safety rules of train.py's set-up. The `vaswani` commands' side is in test_cli.py."""

import io
import json
import os
import random
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest
import torch
from conftest import REPO_ROOT, tiny_model

from vaswani import errors as training_errors  # noqa: E402  (the code of `vaswani train` and train.py)
from vaswani import model_folder as training_model_folder
from vaswani.errors import CheckpointError
from vaswani.fileio import load_state_file, save_state_file
from vaswani.training import checkpoints as training_checkpoints
from vaswani.training import loop
from vaswani.training import options as training_options
from vaswani.training import run_dir as training_run_dir
from vaswani.training.checkpoints import CheckpointManager


class Payload:
    """A pickle that, when loaded, writes a marker file: proof that loading it ran code."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


def plant_pickle(path, marker):
    """Replace `path` with a pickle (torch.save format too: a zip holding the pickle) that would run code."""
    torch.save({"state": Payload(marker)}, path)
    assert path.stat().st_size > 0


# ---------------------------------------------------------------------------------------------------------------
# State files
# ---------------------------------------------------------------------------------------------------------------
def test_state_files_round_trip_nested_states(tmp_path):
    state = {
        "ints": {0: {"step": torch.tensor(3.0), "exp_avg": torch.randn(2, 3)}, 7: None},
        "groups": [{"lr": 1e-3, "betas": (0.9, 0.98), "params": [0, 1], "fused": True, "name": "x"}],
        "python": random.getstate(),
        "numpy": np.random.get_state(),
        "bytes": torch.get_rng_state(),
        "inf": float("inf"),
    }
    save_state_file(tmp_path / "s.safetensors", state)
    loaded = load_state_file(tmp_path / "s.safetensors")
    assert loaded["ints"].keys() == {0, 7}
    torch.testing.assert_close(loaded["ints"][0]["exp_avg"], state["ints"][0]["exp_avg"])
    assert loaded["groups"][0]["betas"] == (0.9, 0.98) and loaded["inf"] == float("inf")
    assert loaded["python"] == state["python"]  # tuples stay tuples: random.setstate accepts it
    random.setstate(loaded["python"])
    assert loaded["numpy"][0] == "MT19937" and np.array_equal(loaded["numpy"][1], state["numpy"][1])
    assert loaded["numpy"][1].dtype == np.uint32
    np.random.set_state(loaded["numpy"])
    assert torch.equal(loaded["bytes"], state["bytes"])


@pytest.mark.parametrize(
    "content",
    [b"", b"garbage" * 10, b"\x08\x00\x00\x00\x00\x00\x00\x00{}", None],
    ids=["empty", "garbage", "no-skeleton", "pickle"],
)
def test_unreadable_state_files_are_errors_naming_the_file(tmp_path, content):
    path, marker = tmp_path / "rng_state_0.safetensors", tmp_path / "executed"
    if content is None:
        plant_pickle(path, marker)
    else:
        path.write_bytes(content)
    with pytest.raises(CheckpointError, match="rng_state_0.safetensors"):
        load_state_file(path)
    assert not marker.exists()


# ---------------------------------------------------------------------------------------------------------------
# Checkpoints of train.py: save, resume, tampering
# ---------------------------------------------------------------------------------------------------------------
def training_state(accelerator, max_steps=10):
    from modeling_vaswani import DropHeadScheduler
    from vaswani.training.schedules import build_lr_scheduler

    model = tiny_model(seed=0, encoder_layerdrop=0.3, decoder_layerdrop=0.3)
    optimizer = torch.optim.Adam(model.parameters(), lr=1.0)
    scheduler = build_lr_scheduler("noam", optimizer, warmup_steps=4, total_steps=max_steps, d_model=16)
    drophead = DropHeadScheduler(model, 0.1, 0.3, 4, max_steps)
    model, optimizer = accelerator.prepare(model, optimizer)
    progress = training_checkpoints.TrainingProgress()
    state = training_checkpoints.TrainingState(accelerator, accelerator.unwrap_model(model), optimizer, scheduler, drophead,
                                progress, max_steps)  # fmt: skip
    return model, state


def train_step(model, state):
    from conftest import random_batch

    input_ids, attention_mask, labels = random_batch()
    model.train()
    loss = model(input_ids=input_ids, attention_mask=attention_mask, labels=labels).loss
    loss.backward()
    state.optimizer.step()
    state.optimizer.zero_grad()
    state.lr_scheduler.step()
    state.drophead.step()
    state.progress.step += 1
    return loss.item()


def snapshot(model, state):
    return {
        "weights": {k: v.clone() for k, v in model.state_dict().items()},
        "optimizer": json.dumps(state.optimizer.state_dict()["param_groups"]),
        "exp_avg": [s["exp_avg"].clone() for s in state.optimizer.state_dict()["state"].values()],
        "lr": state.lr_scheduler.state_dict()["last_epoch"],
        "drophead": state.drophead.state_dict(),
        "layerdrop": model.layerdrop_state_dict()["encoder"]["generator"].clone(),
        "progress": state.progress.state_dict(),
        "torch_rng": torch.get_rng_state(),
        "python_rng": random.getstate(),
    }


def assert_same(a, b):
    for key in a:
        if key == "weights":
            for name in a[key]:
                assert torch.equal(a[key][name], b[key][name]), name
        elif key == "exp_avg":
            assert all(torch.equal(x, y) for x, y in zip(a[key], b[key], strict=True))
        elif isinstance(a[key], torch.Tensor):
            assert torch.equal(a[key], b[key]), key
        else:
            assert a[key] == b[key], key


def saved_checkpoint(tmp_path, accelerator):
    model, state = training_state(accelerator)
    train_step(model, state)
    train_step(model, state)
    manager = CheckpointManager(tmp_path / "checkpoints")
    path = training_checkpoints.save_checkpoint(accelerator, manager, model, state)
    return model, state, path


def test_resume_restores_every_state_and_the_next_steps_bit_for_bit(tmp_path, accelerator):
    model, state, path = saved_checkpoint(tmp_path, accelerator)
    assert sorted(p.name for p in path.iterdir()) == [
        "checkpoint.json", "model.safetensors", "rng_state_0.safetensors", "trainer_state.json",
        "training_state.safetensors",
    ]  # fmt: skip
    assert not list(path.glob("*.pkl")) and not list(path.glob("*.bin"))  # nothing that is read with pickle
    saved = snapshot(model, state)
    continued = [train_step(model, state) for _ in range(2)]
    after = snapshot(model, state)
    assert after["progress"] != saved["progress"]

    training_checkpoints.load_checkpoint(accelerator, path, state)
    assert_same(saved, snapshot(model, state))
    assert [train_step(model, state) for _ in range(2)] == continued  # same dropout, LayerDrop, DropHead, LR
    assert_same(after, snapshot(model, state))


@pytest.mark.parametrize(
    "name", ["model.safetensors", "training_state.safetensors", "rng_state_0.safetensors", "trainer_state.json"]
)
def test_a_planted_pickle_in_any_checkpoint_file_never_runs(tmp_path, accelerator, name):
    model, state, path = saved_checkpoint(tmp_path, accelerator)
    marker = tmp_path / "executed"
    plant_pickle(path / name, marker)
    if name == "trainer_state.json":  # for people only: never read back, so resuming still works
        training_checkpoints.load_checkpoint(accelerator, path, state)
    else:
        with pytest.raises(CheckpointError, match=name):
            training_checkpoints.load_checkpoint(accelerator, path, state)
    assert not marker.exists()


def test_a_planted_completion_marker_makes_the_checkpoint_incomplete(tmp_path, accelerator):
    _, _, path = saved_checkpoint(tmp_path, accelerator)
    plant_pickle(path / "checkpoint.json", tmp_path / "executed")
    with pytest.raises(CheckpointError, match="incomplete"):
        CheckpointManager(path.parent).resolve(str(path))
    assert not (tmp_path / "executed").exists()


def test_an_old_pickle_checkpoint_is_refused_not_unpickled(tmp_path, accelerator):
    model, state, path = saved_checkpoint(tmp_path, accelerator)
    (path / "training_state.safetensors").unlink()
    plant_pickle(path / "custom_checkpoint_0.pkl", tmp_path / "executed")
    with pytest.raises(CheckpointError, match=r"custom_checkpoint_0\.pkl.*older train\.py"):
        training_checkpoints.load_checkpoint(accelerator, path, state)
    assert not (tmp_path / "executed").exists()


def test_a_damaged_rng_file_stops_the_resume(tmp_path, accelerator):
    model, state, path = saved_checkpoint(tmp_path, accelerator)
    rng = path / "rng_state_0.safetensors"
    rng.write_bytes(rng.read_bytes()[:-50])  # truncated
    with pytest.raises(CheckpointError, match="rng_state_0.safetensors"):
        training_checkpoints.load_checkpoint(accelerator, path, state)
    rng.unlink()
    with pytest.raises(CheckpointError, match=r"rng_state_0.safetensors is missing"):
        training_checkpoints.load_checkpoint(accelerator, path, state)


def test_a_checkpoint_of_another_schedule_length_is_refused(tmp_path, accelerator):
    _, _, path = saved_checkpoint(tmp_path, accelerator)
    _, other = training_state(accelerator, max_steps=20)
    with pytest.raises(CheckpointError, match=r"10 updates but this run would make 20"):
        training_checkpoints.load_checkpoint(accelerator, path, other)


def test_mismatched_weights_in_a_checkpoint_are_an_error(tmp_path, accelerator):
    _, state, path = saved_checkpoint(tmp_path, accelerator)
    from safetensors.torch import load_file, save_file

    weights = load_file(path / "model.safetensors")
    weights.pop(next(k for k in weights if "fc1" in k))
    save_file(weights, path / "model.safetensors")
    with pytest.raises(CheckpointError, match="missing"):
        training_checkpoints.load_checkpoint(accelerator, path, state)


def test_metrics_are_cut_back_to_the_checkpoint_step(tmp_path):
    path = tmp_path / "metrics.jsonl"
    rows = [{"split": "train", "step": s, "loss": 1.0} for s in (1, 2, 3, 4)]
    rows.insert(2, {"split": "validation", "step": 2, "bleu": 3.0})
    rows.append({"split": "final_validation", "step": 2, "bleu": 4.0})
    path.write_text("".join(json.dumps(r) + "\n" for r in rows) + '{"split": "tra')  # a kill mid-line
    assert training_run_dir.truncate_metrics(path, 2) == 4
    kept = [json.loads(line) for line in path.read_text().splitlines()]
    assert kept == rows[:3]
    assert training_run_dir.truncate_metrics(path, 2) == 0
    assert not list(tmp_path.glob(".tmp-*"))


def test_atomic_output_keeps_the_old_file_on_error(tmp_path):
    from vaswani.fileio import atomic_output

    path = tmp_path / "out.txt"
    path.write_text("old")
    with pytest.raises(RuntimeError), atomic_output(path) as stream:
        stream.write("half")
        raise RuntimeError("boom")
    assert path.read_text() == "old" and sorted(p.name for p in tmp_path.iterdir()) == ["out.txt"]
    with atomic_output(path) as stream:
        stream.write("new")
    assert path.read_text() == "new"


# ---------------------------------------------------------------------------------------------------------------
# Model folders: written atomically, nothing of the user's lost, damaged models are clear errors in every command
# ---------------------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def good_folder(tmp_path_factory):
    from test_pipeline_vaswani import save_model_folder

    folder = tmp_path_factory.mktemp("safety") / "model"
    save_model_folder(folder)
    return folder


def tree(folder):
    """{relative path: bytes} of every file under `folder`."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("in_place", [False, True], ids=["swapped", "file-by-file"])
@pytest.mark.parametrize("kill_at", range(8))
def test_a_model_folder_write_killed_at_any_rename_leaves_old_or_new(tmp_path, monkeypatch, kill_at, in_place):
    """A kill at any rename, then the recovery every later write or train.py start does: the folder holds the
    previous model or the new one, and the other files. `file-by-file`: the folder is the current folder (it
    cannot be renamed; the same holds for a mount point)."""
    from vaswani import model_folder

    folder = tmp_path / "out"
    folder.mkdir()
    if in_place:
        monkeypatch.chdir(folder)
    for name, text in {"config.json": "old", "model.safetensors": "old", "model-00001-of-00002.safetensors": "old",
                       "source.spm": "old", "run_args.json": "old", "notes.txt": "mine",
                       "model-best.safetensors": "mine"}.items():  # fmt: skip
        (folder / name).write_text(text)
    (folder / "checkpoints").mkdir()
    (folder / "checkpoints" / "step-1").write_text("ckpt")
    before = tree(folder)

    def write(staging):
        (staging / "config.json").write_text("new")
        (staging / "model.safetensors").write_text("new")
        (staging / "tokenizer.json").write_text("new")

    real_replace, calls = os.replace, []

    def dying_replace(src, dst):
        calls.append(src)
        if len(calls) == kill_at + 1:
            raise KeyboardInterrupt("killed")  # stands for SIGKILL: nothing after this point runs
        real_replace(src, dst)

    monkeypatch.setattr(model_folder.os, "replace", dying_replace)
    try:
        model_folder.write_model_folder(folder, write, replace=True, replaces=model_folder.is_source_record)
        killed = False
    except KeyboardInterrupt:
        killed = True
    monkeypatch.setattr(model_folder.os, "replace", real_replace)
    if killed:
        model_folder.recover_model_folder(folder)  # what the next write (or command) does first
    after = tree(folder)
    kept = {k: v for k, v in before.items() if k in ("notes.txt", "model-best.safetensors", "checkpoints/step-1")}
    # the old shard, the other tokenizer's file and the replaced model's record go with the old model
    new = {**kept, "config.json": b"new", "model.safetensors": b"new", "tokenizer.json": b"new"}
    assert after in (before, new), (kill_at, calls, after)
    assert not list(tmp_path.glob(".tmp-*"))
    if not killed:
        assert after == new


def test_average_and_prune_refuse_a_non_empty_folder_and_keep_other_files(good_folder, tmp_path, capsys):
    from vaswani.cli import main

    run = tmp_path / "run"
    shutil.copytree(good_folder, run)
    from safetensors.torch import save_model as save_weights

    from modeling_vaswani import VaswaniForConditionalGeneration

    model = VaswaniForConditionalGeneration.from_pretrained(run)
    manager = CheckpointManager(run / "checkpoints")
    manager.save(1, lambda checkpoint: save_weights(model, str(checkpoint / "model.safetensors")))
    (run / "run_args.json").unlink(missing_ok=True)  # a model without a training record (a converted one)
    out = tmp_path / "out"
    out.mkdir()
    (out / "model-best.safetensors").write_bytes(b"mine")
    (out / "notes.txt").write_text("mine")
    commands = {
        "average": ["average", "--run_dir", str(run), "--last", "1", "--output_dir", str(out)],
        "prune": ["prune", "--model", str(run), "--output_dir", str(out), "--encoder_layers_to_keep", "0"],
    }
    for argv in commands.values():
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert f"--output_dir {out} already holds" in err and "--overwrite_output_dir" in err
        kept_before = tree(out)
        assert tree(out) == kept_before
        # the earlier model's record and its other tokenizer's files would describe another model
        (out / "run_args.json").write_text('{"source_lang": "de", "target_lang": "fr"}')
        (out / "source.spm").write_bytes(b"another tokenizer")
        assert main([*argv, "--overwrite_output_dir"]) == 0, capsys.readouterr().err
        assert (out / "model-best.safetensors").read_bytes() == b"mine" and (out / "notes.txt").read_text() == "mine"
        assert (out / "model.safetensors").is_file() and (out / "tokenizer.json").is_file()
        assert not (out / "run_args.json").exists() and not (out / "source.spm").exists()
    # averaging a run in place keeps its checkpoints and needs no --overwrite_output_dir
    assert main(["average", "--run_dir", str(run), "--last", "1", "--output_dir", str(run)]) == 0
    assert (run / "checkpoints" / "step-00000001" / "model.safetensors").is_file()


def test_translate_never_destroys_its_input_and_writes_whole_files(good_folder, tmp_path, capsys):
    from vaswani.cli import main

    source = tmp_path / "in.txt"
    source.write_text("das Wetter ist heute schön\n")
    link = tmp_path / "link.txt"
    link.symlink_to(source)
    for output in (source, link):
        assert main(["translate", "--model", str(good_folder), "--input", str(source), "--output", str(output)]) == 2
        assert "is the input file" in capsys.readouterr().err
        assert source.read_text() == "das Wetter ist heute schön\n"
    # a decoding error on line 3: named, and the previous output is left as it was (no half-written file)
    source.write_bytes(b"eins\nzwei\n" + "drei Grüße\n".encode("latin-1"))
    output = tmp_path / "out.txt"
    output.write_text("previous")
    argv = ["translate", "--model", str(good_folder), "--input", str(source), "--output", str(output),
            "--buffer_lines", "1"]  # fmt: skip
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "is not UTF-8 text: line 3 has the byte 0xfc at position 8" in err and "Traceback" not in err
    assert output.read_text() == "previous"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.txt", "link.txt", "out.txt"]


def test_foreign_remote_code_is_never_run_nor_asked_about(good_folder, tmp_path):
    folder = tmp_path / "foreign"
    shutil.copytree(good_folder, folder)
    marker = tmp_path / "executed"
    (folder / "configuration_foreign.py").write_text(
        f"open({str(marker)!r}, 'w').close()\nfrom transformers import PretrainedConfig\n"
        "class ForeignConfig(PretrainedConfig):\n    model_type = 'foreign'\n"
    )
    config = json.loads((folder / "config.json").read_text())
    config.update(model_type="foreign", auto_map={"AutoConfig": "configuration_foreign.ForeignConfig"})
    (folder / "config.json").write_text(json.dumps(config))
    result = subprocess.run(
        [sys.executable, "-m", "vaswani.cli", "translate", "--model", str(folder)], input="y\ny\nhello\n",
        capture_output=True, text=True, timeout=240, cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 2, result.stderr
    assert "describes a 'foreign' model" in result.stderr and "--trust_remote_code" in result.stderr
    assert result.stdout == "" and "[y/N]" not in result.stderr and not marker.exists()


def damage(folder, what):
    """Damage a copy of a good model folder in one of the ways a user's files get damaged."""
    from safetensors.torch import load_file, save_file

    config_path = folder / "config.json"
    config = json.loads(config_path.read_text())
    weights = folder / "model.safetensors"
    if what == "more-layers-in-config":
        config["encoder_layers"] = 5
    elif what == "vocab-size":
        config["vocab_size"] += 7
    elif what == "pad-id":
        config["pad_token_id"] = 3
    elif what == "eos-id":
        config["eos_token_id"] = 5
    elif what == "decoder-start-id":
        config["decoder_start_token_id"] = 2
    elif what == "config-list":
        config = [config]
    elif what == "truncated-weights":
        weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    elif what == "garbage-weights":
        weights.write_bytes(b"\x00garbage" * 100)
    elif what == "pickle-weights":
        plant_pickle(weights, folder.parent / "executed")
    elif what == "pickled-bin-only":  # a legacy (or malicious) folder: a pickled pytorch_model.bin, no safetensors
        weights.unlink()
        plant_pickle(folder / "pytorch_model.bin", folder.parent / "executed")
    elif what == "extra-tensor":
        tensors = load_file(weights)
        tensors["model.extra.weight"] = torch.zeros(2)
        save_file(tensors, weights, metadata={"format": "pt"})
    elif what == "tokenizer-empty":
        (folder / "tokenizer.json").write_text("{}")
    elif what == "tokenizer-garbage":
        (folder / "tokenizer.json").write_text('{"model": 5}')
    elif what == "tokenizer-larger":
        config["vocab_size"] -= 30
        tensors = load_file(weights)
        tensors = {k: (v[: config["vocab_size"]] if v.shape[:1] == (config["vocab_size"] + 30,) else v)
                   for k, v in tensors.items()}  # fmt: skip
        save_file(tensors, weights, metadata={"format": "pt"})
    config_path.write_text(json.dumps(config))


DAMAGES = {
    "more-layers-in-config": "do not fit .*config.json.*missing tensors model.encoder.layers.2",
    "vocab-size": "do not fit .*config.json.*shapes",
    "pad-id": "tokenizer pad_token_id=0 but config pad_token_id=3",
    "eos-id": "tokenizer eos_token_id=2 but config eos_token_id=5",
    "decoder-start-id": "tokenizer bos_token_id=1 but config decoder_start_token_id=2",
    "config-list": r"config.json is damaged \(it holds a JSON list, not an object\)",
    "truncated-weights": "model.safetensors is damaged or not a safetensors file",
    "garbage-weights": "model.safetensors is damaged or not a safetensors file",
    "pickle-weights": "model.safetensors is damaged or not a safetensors file",
    "pickled-bin-only": r"holds only pickled weights \(pytorch_model.bin\), which are never loaded because unpickling",
    "extra-tensor": "unexpected tensors model.extra.weight",
    "tokenizer-empty": r"tokenizer.json is not a tokenizer \(no 'model' entry\)",
    "tokenizer-garbage": "tokenizer.json cannot be loaded",
    "tokenizer-larger": "the tokenizer has .* tokens but the model's vocab_size is",
}
COMMANDS = {
    "translate": ["translate", "--model", "{m}"],
    "average": ["average", "--checkpoints", "{good}", "--model", "{m}", "--output_dir", "{out}"],
    "prune": ["prune", "--model", "{m}", "--output_dir", "{out}", "--encoder_layers_to_keep", "0"],
    "push": ["push", "--model", "{m}", "--hub_model_id", "someone/model"],
    "card": ["card", "--model", "{m}", "--output", "{out}.md"],
    "serve": ["serve", "--model", "en-de={m}", "--port", "0"],  # refused at start-up, before it listens
}
# average reads the config and tokenizer of --model, not its weights: the checkpoints must fit the config
AVERAGE_MESSAGES = {
    "more-layers-in-config": "the checkpoints: tensors of the model are missing: model.encoder.layers.2",
    "vocab-size": r"'model.shared.weight' has shape \({vocab}, 32\) in the checkpoints but \({damaged}, 32\) in the model",
}
NOT_READ = {
    ("average", d)
    for d in ("truncated-weights", "garbage-weights", "pickle-weights", "pickled-bin-only", "extra-tensor")
}


@pytest.mark.parametrize(
    ("what", "command"),
    [(what, command) for what in DAMAGES for command in COMMANDS if (command, what) not in NOT_READ],
)
def test_a_damaged_model_is_a_clear_error_in_every_command(good_folder, tmp_path, capsys, monkeypatch, what, command):
    from vaswani.cli import main

    if command == "serve":
        pytest.importorskip("fastapi", reason="the serve extra is not installed")
    message = AVERAGE_MESSAGES.get(what) if command == "average" else None
    if message:  # the sizes of the good folder's vocabulary and of the damaged config's (`damage`: 7 more)
        vocab = json.loads((good_folder / "config.json").read_text())["vocab_size"]
        message = message.format(vocab=vocab, damaged=vocab + 7)
    folder = tmp_path / "model"
    shutil.copytree(good_folder, folder)
    damage(folder, what)
    before = tree(tmp_path)
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(b"hallo\n")))
    argv = [a.format(m=folder, good=good_folder, out=tmp_path / "out") for a in COMMANDS[command]]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "Traceback" not in err
    assert re.search(message or DAMAGES[what], err), err
    assert tree(tmp_path) == before  # nothing written, nothing lost
    assert not (tmp_path / "executed").exists()


# ---------------------------------------------------------------------------------------------------------------
# train.py's output folder: resume checks, --overwrite_output_dir
# ---------------------------------------------------------------------------------------------------------------
def new_run_folder(tmp_path, *extra):
    """A folder as a stopped train.py run leaves it (run_args.json and one complete checkpoint), without data
    options (the built-in demo set)."""
    out = tmp_path / "out"
    args = training_options.parse_args(["--output_dir", str(out), "--max_train_steps", "10", *extra])
    training_run_dir.start_new_run(args, out)
    CheckpointManager(out / "checkpoints").save(5, lambda folder: (folder / "model.safetensors").write_text("w"))
    return out


def test_a_demo_run_can_be_resumed(tmp_path):
    out = new_run_folder(tmp_path)
    assert json.loads((out / "run_args.json").read_text())["dataset_name"] == "demo"
    args = training_options.parse_args(
        ["--output_dir", str(out), "--max_train_steps", "10", "--resume_from_checkpoint", "latest"]
    )
    assert training_run_dir.prepare_output_dir(args) == (out, out / "checkpoints" / "step-00000005")


@pytest.mark.parametrize(
    ("change", "shown"),
    [
        (["--max_train_steps", "20"], "--max_train_steps 10 -> 20"),
        (["--max_train_steps", "10", "--max_grad_norm", "1.0"], "--max_grad_norm 0.0 -> 1.0"),
        (["--num_train_epochs", "2"], "--max_train_steps 10 -> None"),
    ],
)
def test_options_the_schedules_depend_on_cannot_change_on_resume(tmp_path, change, shown):
    out = new_run_folder(tmp_path)
    args = training_options.parse_args(["--output_dir", str(out), *change, "--resume_from_checkpoint", "latest"])
    with pytest.raises(training_errors.UsageError, match=re.escape(shown)):
        training_run_dir.prepare_output_dir(args)


def previous_run(tmp_path):
    out = new_run_folder(tmp_path)
    for name in ("metrics.jsonl", "results.json", "config.json", "model.safetensors", "tokenizer.json", "README.md"):
        (out / name).write_text("old run")
    (out / "notes.txt").write_text("mine")
    (out / "model-best.safetensors").write_text("mine")
    (out / "checkpoints" / "my-notes.txt").write_text("mine")
    (out / "checkpoints" / ".tmp-step-00000006").mkdir()
    return out


def test_overwrite_output_dir_removes_only_what_a_run_created(tmp_path):
    out = previous_run(tmp_path)
    args = training_options.parse_args(["--output_dir", str(out), "--max_train_steps", "3", "--overwrite_output_dir"])
    assert training_run_dir.prepare_output_dir(args) == (out, None)
    assert (out / "checkpoints" / "step-00000005").is_dir()  # the checks delete nothing
    training_run_dir.start_new_run(args, out)
    assert sorted(str(p.relative_to(out)) for p in out.rglob("*")) == [
        "checkpoints", "checkpoints/my-notes.txt", "model-best.safetensors", "notes.txt", "run_args.json",
    ]  # fmt: skip
    assert json.loads((out / "run_args.json").read_text())["max_train_steps"] == 3


def test_overwrite_output_dir_refuses_links_and_folders_of_other_things(tmp_path):
    out = previous_run(tmp_path)
    elsewhere = tmp_path / "old-checkpoints"
    shutil.move(out / "checkpoints", elsewhere)
    (out / "checkpoints").symlink_to(elsewhere)
    args = training_options.parse_args(["--output_dir", str(out), "--max_train_steps", "3", "--overwrite_output_dir"])
    with pytest.raises(training_errors.UsageError, match="is a symbolic link .*nothing was deleted"):
        training_run_dir.prepare_output_dir(args)
    assert (elsewhere / "step-00000005").is_dir()
    user = tmp_path / "user"
    user.mkdir()
    (user / "thesis.tex").write_text("mine")
    args = training_options.parse_args(["--output_dir", str(user), "--max_train_steps", "3", "--overwrite_output_dir"])
    with pytest.raises(training_errors.UsageError, match=r"holds files and no run \(run_args.json is missing\)"):
        training_run_dir.prepare_output_dir(args)


def test_overwrite_output_dir_keeps_everything_when_a_later_check_fails(tmp_path):
    out = previous_run(tmp_path)
    before = tree(out)
    bad_tokenizer = tmp_path / "tok"
    bad_tokenizer.mkdir()
    (bad_tokenizer / "tokenizer.json").write_text("{}")
    result = subprocess.run(
        [sys.executable, str(REPO_ROOT / "train.py"), "--output_dir", str(out), "--max_train_steps", "2",
         "--overwrite_output_dir", "--tokenizer", str(bad_tokenizer), "--report_to", "none"],
        capture_output=True, text=True, timeout=300, cwd=tmp_path,
        env={**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_CACHE": str(tmp_path / "cache")},
    )  # fmt: skip
    assert result.returncode == 2, result.stderr[-2000:]
    assert "error:" in result.stderr and "tokenizer.json is not a tokenizer" in result.stderr
    assert "Traceback" not in result.stderr
    assert tree(out) == before


def test_tokenizer_command_never_writes_over_files_it_did_not_create(tmp_path, capsys):
    from tokenization.__main__ import main as tokenization_main

    corpus = tmp_path / "corpus.txt"
    corpus.write_text("hello world\nfoo bar baz\n" * 5)
    user = tmp_path / "user"
    user.mkdir()
    (user / "notes.txt").write_text("mine")
    model = tmp_path / "model"  # a model folder has a tokenizer.json too: it is not a tokenizer folder to replace
    model.mkdir()
    for name in ("tokenizer.json", "tokenizer_config.json", "config.json", "model.safetensors"):
        (model / name).write_text(name)
    common = ["train", "--files", str(corpus), "--vocab_size", "300", "--min_frequency", "1"]
    for output, message in (
        (corpus, "is a file: give a folder"),
        (user, "already holds files other than a tokenizer (notes.txt): choose a new or empty"),
        (model, "already holds files other than a tokenizer (config.json, model.safetensors): choose a new or empty"),
    ):
        before = tree(tmp_path)
        assert tokenization_main([*common, "--output_dir", str(output)]) == 2
        assert message in capsys.readouterr().err
        assert tree(tmp_path) == before
    # a tokenizer folder is replaced whole (staged, then swapped in), with nothing left behind
    for _ in range(2):
        assert tokenization_main([*common, "--output_dir", str(tmp_path / "tok")]) == 0
        assert sorted(p.name for p in (tmp_path / "tok").iterdir()) == ["tokenizer.json", "tokenizer_config.json"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["corpus.txt", "model", "tok", "user"]


@pytest.mark.parametrize("in_place", [False, True], ids=["swapped", "file-by-file"])
def test_a_save_without_weights_keeps_the_folders_weights(tmp_path, monkeypatch, in_place):
    """`write_model_folder(replace=True)` replaces the files the new save writes; old weight files go only when the
    new save writes weights (a sharded save after a single-file one), never when it writes a tokenizer alone."""
    from vaswani.model_folder import write_model_folder

    folder = tmp_path / "out"
    folder.mkdir()
    if in_place:
        monkeypatch.chdir(folder)
    for name in ("config.json", "model.safetensors", "model-00001-of-00002.safetensors", "tokenizer.json"):
        (folder / name).write_text("old")
    write_model_folder(folder, lambda staging: (staging / "tokenizer.json").write_text("new"), replace=True)
    assert tree(folder) == {"config.json": b"old", "model-00001-of-00002.safetensors": b"old",
                            "model.safetensors": b"old", "tokenizer.json": b"new"}  # fmt: skip


@pytest.mark.parametrize("in_place", [False, True], ids=["swapped", "file-by-file"])
@pytest.mark.parametrize("record", ["replaced", "kept"])
def test_a_save_replaces_another_tokenizers_files_and_keeps_files_that_only_look_like_them(tmp_path, monkeypatch,
                                                                                          in_place, record):  # fmt: skip
    """A fast tokenizer saved over a MarianTokenizer's folder: source.spm, target.spm and vocab.json would make the
    folder hold two tokenizers (and `has_marian_tokenizer` says a folder with tokenizer.json has none), so they go; a
    file only named like a tokenizer's (`lid.model`) and the user's files stay. run_args.json goes only where the
    caller says the save replaces the model's record (a folder made from another model), never in a run's save."""
    from vaswani.model_folder import is_source_record, write_model_folder

    folder = tmp_path / "out"
    folder.mkdir()
    if in_place:
        monkeypatch.chdir(folder)
    for name in ("tokenizer_config.json", "source.spm", "target.spm", "vocab.json", "run_args.json", "lid.model",
                 "notes.txt"):  # fmt: skip
        (folder / name).write_text("old")

    def write(staging):
        for name in ("tokenizer.json", "tokenizer_config.json"):
            (staging / name).write_text("new")

    replaces = is_source_record if record == "replaced" else None
    write_model_folder(folder, write, replace=True, replaces=replaces)
    kept = {"lid.model": b"old", "notes.txt": b"old", **({"run_args.json": b"old"} if record == "kept" else {})}
    assert tree(folder) == {**kept, "tokenizer.json": b"new", "tokenizer_config.json": b"new"}


@pytest.mark.parametrize(
    ("what", "overrides", "message"),
    [
        ("missing", [], "no such model folder: .*nowhere"),
        ("config-list", [], r"config.json is damaged \(it holds a JSON list"),
        ("more-layers-in-config", [], "missing tensors model.encoder.layers.2"),
        # another shape on the command line: named before the weights are read (the folder is not blamed)
        (None, ["--encoder_layers", "3"], "was trained with encoder_layers 2; --encoder_layers 3 .* would not fit"),
        ("truncated-weights", [], "model.safetensors is damaged"),
        ("pickled-bin-only", [], r"holds only pickled weights \(pytorch_model.bin\)"),
        ("pad-id", [], "tokenizer pad_token_id=0 but config pad_token_id=3"),
    ],
)
def test_train_py_checks_the_model_it_starts_from(good_folder, tmp_path, what, overrides, message):
    from vaswani.errors import ModelFolderError
    from vaswani.model_folder import load_tokenizer

    folder = tmp_path / ("nowhere" if what == "missing" else "model")
    if what != "missing":
        shutil.copytree(good_folder, folder)
        if what:
            damage(folder, what)
    args = training_options.parse_args(["--output_dir", str(tmp_path / "out"), "--max_train_steps", "2",
                             "--model", str(folder), "--tokenizer", str(good_folder), *overrides])  # fmt: skip
    with pytest.raises((training_errors.UsageError, ModelFolderError), match=message):
        config = loop.resolve_model_config(args)
        tokenizer = load_tokenizer(good_folder)
        training_model_folder.check_tokenizer_fits(tokenizer, config, where="--tokenizer", exact=True)
        loop.build_model(args, config, tokenizer)


def test_a_config_file_that_is_not_utf8_is_a_clear_error(tmp_path, capsys):
    config = tmp_path / "run.yaml"
    config.write_bytes("# r\xe9glages\nwarmup_steps: 4\n".encode("latin-1"))
    assert loop.run(["--config", str(config), "--output_dir", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert f"error: --config {config} is not UTF-8 text (invalid continuation byte at byte 3)" in err, err
    assert not (tmp_path / "out").exists()
    assert loop.run(["--config", str(tmp_path), "--output_dir", str(tmp_path / "out")]) == 2
    assert f"error: --config {tmp_path} is a folder: give a YAML file" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("name", "content", "problem"),
    [
        ("run_args.json", '{"source_lang": "en",', "not readable JSON: Expecting"),
        ("results.json", "\xff\xfe", "not readable JSON: 'utf-8' codec can't decode"),
        ("run_args.json", '["en", "de"]', "it holds a JSON list, not an object"),
        ("results.json", "12.5", "it holds a JSON float, not an object"),
    ],
)
def test_card_names_a_damaged_run_file(good_folder, tmp_path, capsys, name, content, problem):
    from vaswani.cli import main

    folder = tmp_path / "model"
    shutil.copytree(good_folder, folder)
    (folder / name).write_bytes(content.encode("latin-1"))
    before = tree(tmp_path)
    assert main(["card", "--model", str(folder), "--output", str(tmp_path / "card.md")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {folder / name} is damaged ({problem}") and "Traceback" not in err, err
    assert "remove it to write the card without it" in err
    assert tree(tmp_path) == before


def test_commands_that_load_or_save_a_model_show_none_of_transformers_progress_bars(good_folder, tmp_path, capsys):
    """transformers' "Loading weights" and "Writing model shards" bars (carriage returns in every log) are turned
    off by each such command (`hide_transformers_progress_bars`); huggingface_hub's (uploads) stay on."""
    from huggingface_hub import utils as hub_utils
    from transformers.utils import logging as hf_logging

    from modeling_vaswani import VaswaniForConditionalGeneration
    from vaswani.cli import main

    hf_logging.enable_progress_bar()  # as a new process starts (another test may have turned them off)
    VaswaniForConditionalGeneration.from_pretrained(good_folder).save_pretrained(tmp_path / "copy")
    shown = capsys.readouterr().err
    assert "Loading weights" in shown and "Writing model shards" in shown  # the bars this test looks for
    source = tmp_path / "source.txt"
    source.write_text("the cat sat\n")
    commands = [
        ["export", "--model", str(good_folder), "--output_dir", str(tmp_path / "ct2")],
        [
            "prune",
            "--model",
            str(good_folder),
            "--output_dir",
            str(tmp_path / "pruned"),
            "--encoder_layers_to_keep",
            "0",
        ],
        ["translate", "--model", str(good_folder), "--input", str(source), "--output", str(tmp_path / "out.txt")],
    ]
    for argv in commands:
        hf_logging.enable_progress_bar()
        assert main(argv) == 0
        err = capsys.readouterr().err
        assert "Loading weights" not in err and "Writing model shards" not in err, (argv[0], err)
        assert not hub_utils.are_progress_bars_disabled()
