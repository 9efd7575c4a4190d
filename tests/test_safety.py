"""Nothing lost, nothing executed (issue 11): checkpoint state files that cannot run code, resume that restores
everything or stops, and the file-safety rules of train.py's set-up. The `vaswani` commands' side is in test_cli.py."""

import importlib.util
import json
import random
import sys

import numpy as np
import pytest
import torch
from conftest import REPO_ROOT, tiny_model

from vaswani.checkpoints import CheckpointError, CheckpointManager, load_state_file, save_state_file


def load_train_module():
    spec = importlib.util.spec_from_file_location("train_script", REPO_ROOT / "train.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


train = load_train_module()


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
@pytest.fixture
def accelerator():
    from accelerate import Accelerator
    from accelerate.state import AcceleratorState

    yield Accelerator(cpu=True)
    AcceleratorState._reset_state(reset_partial_state=True)


def training_state(accelerator, max_steps=10):
    from modeling_vaswani import DropHeadScheduler
    from vaswani.schedules import build_lr_scheduler

    model = tiny_model(seed=0, encoder_layerdrop=0.3, decoder_layerdrop=0.3)
    optimizer = torch.optim.Adam(model.parameters(), lr=1.0)
    scheduler = build_lr_scheduler("noam", optimizer, warmup_steps=4, total_steps=max_steps, d_model=16)
    drophead = DropHeadScheduler(model, 0.1, 0.3, 4, max_steps)
    model, optimizer = accelerator.prepare(model, optimizer)
    progress = train.TrainingProgress()
    state = train.TrainingState(accelerator, accelerator.unwrap_model(model), optimizer, scheduler, drophead,
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
    path = train.save_checkpoint(accelerator, manager, model, state)
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

    train.load_checkpoint(accelerator, path, state)
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
        train.load_checkpoint(accelerator, path, state)
    else:
        with pytest.raises(CheckpointError, match=name):
            train.load_checkpoint(accelerator, path, state)
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
        train.load_checkpoint(accelerator, path, state)
    assert not (tmp_path / "executed").exists()


def test_a_damaged_rng_file_stops_the_resume(tmp_path, accelerator):
    model, state, path = saved_checkpoint(tmp_path, accelerator)
    rng = path / "rng_state_0.safetensors"
    rng.write_bytes(rng.read_bytes()[:-50])  # truncated
    with pytest.raises(CheckpointError, match="rng_state_0.safetensors"):
        train.load_checkpoint(accelerator, path, state)
    rng.unlink()
    with pytest.raises(CheckpointError, match=r"rng_state_0.safetensors is missing"):
        train.load_checkpoint(accelerator, path, state)


def test_a_checkpoint_of_another_schedule_length_is_refused(tmp_path, accelerator):
    _, _, path = saved_checkpoint(tmp_path, accelerator)
    _, other = training_state(accelerator, max_steps=20)
    with pytest.raises(CheckpointError, match=r"10 updates but this run would make 20"):
        train.load_checkpoint(accelerator, path, other)


def test_mismatched_weights_in_a_checkpoint_are_an_error(tmp_path, accelerator):
    _, state, path = saved_checkpoint(tmp_path, accelerator)
    from safetensors.torch import load_file, save_file

    weights = load_file(path / "model.safetensors")
    weights.pop(next(k for k in weights if "fc1" in k))
    save_file(weights, path / "model.safetensors")
    with pytest.raises(CheckpointError, match="missing"):
        train.load_checkpoint(accelerator, path, state)


def test_metrics_are_cut_back_to_the_checkpoint_step(tmp_path):
    path = tmp_path / "metrics.jsonl"
    rows = [{"split": "train", "step": s, "loss": 1.0} for s in (1, 2, 3, 4)]
    rows.insert(2, {"split": "validation", "step": 2, "bleu": 3.0})
    rows.append({"split": "final_validation", "step": 2, "bleu": 4.0})
    path.write_text("".join(json.dumps(r) + "\n" for r in rows) + '{"split": "tra')  # a kill mid-line
    assert train.truncate_metrics(path, 2) == 4
    kept = [json.loads(line) for line in path.read_text().splitlines()]
    assert kept == rows[:3]
    assert train.truncate_metrics(path, 2) == 0
    assert not list(tmp_path.glob(".tmp-*"))


def test_atomic_output_keeps_the_old_file_on_error(tmp_path):
    from vaswani.checkpoints import atomic_output

    path = tmp_path / "out.txt"
    path.write_text("old")
    with pytest.raises(RuntimeError), atomic_output(path) as stream:
        stream.write("half")
        raise RuntimeError("boom")
    assert path.read_text() == "old" and sorted(p.name for p in tmp_path.iterdir()) == ["out.txt"]
    with atomic_output(path) as stream:
        stream.write("new")
    assert path.read_text() == "new"
