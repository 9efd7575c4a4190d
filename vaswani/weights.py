"""Weights: loading them from a model folder or a checkpoint without pickle, and averaging checkpoints (Vaswani et al.
2017, Section 6.1: the last 5 checkpoints of the base model, the last 20 of the big one).

- `weight_files` / `load_weights`: the safetensors weights of a folder (one file or shards); pickles are refused.
- `load_weights_into_model`: loads them into a model, tied weights (saved once) included (`tied_groups`).
- `average_checkpoints` follows fairseq's `scripts/average_checkpoints.py`: the arithmetic mean of every tensor
  (accumulated in float64, cast back to the tensor's dtype); key sets and shapes must match.
  `average_into_model` loads the average into a model.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from vaswani.constants import (
    SAFE_WEIGHTS_INDEX_NAME,
    SAFE_WEIGHTS_NAME,
)
from vaswani.errors import CheckpointError

if TYPE_CHECKING:
    import torch
    from transformers import PreTrainedModel


# ----------------------------------------------------------------------------------------------------------------
# Averaging
# ----------------------------------------------------------------------------------------------------------------
def average_checkpoints(paths: Sequence[str | Path]) -> dict[str, torch.Tensor]:
    """The arithmetic mean of each tensor over the checkpoints (fairseq's `scripts/average_checkpoints.py`).

    Each path is a checkpoint folder holding `model.safetensors` (what `accelerator.save_state` and
    `save_pretrained` write for one model) or a sharded `model.safetensors.index.json`, or a `.safetensors` file.
    Floating-point tensors are summed in float64 (fp16/bf16 upcast) and the mean is cast back to the tensor's dtype
    in the first checkpoint; integer and bool tensors (counters) must be identical in all checkpoints. Key sets and
    shapes must match. Checkpoints are read one at a time.
    """
    import torch

    paths = [Path(path) for path in paths]
    if not paths:
        raise CheckpointError("no checkpoints to average: give at least one.")
    first = load_weights(paths[0])
    dtypes = {name: tensor.dtype for name, tensor in first.items()}
    sums = {
        name: tensor.to(torch.float64, copy=True) if tensor.dtype.is_floating_point else tensor
        for name, tensor in first.items()
    }
    del first
    for path in paths[1:]:
        state = load_weights(path)
        _check_same_keys(sums.keys(), paths[0], state.keys(), path)
        for name, tensor in state.items():
            if tensor.shape != sums[name].shape:
                raise CheckpointError(
                    f"tensor {name!r} has shape {tuple(sums[name].shape)} in {paths[0]} but {tuple(tensor.shape)} "
                    f"in {path}: these checkpoints are not of the same model."
                )
            if dtypes[name].is_floating_point:
                sums[name] += tensor.to(torch.float64)
            elif not torch.equal(tensor, sums[name]):
                raise CheckpointError(
                    f"integer tensor {name!r} differs between {paths[0]} and {path}: it cannot be averaged."
                )
    return {
        name: (total / len(paths)).to(dtypes[name]) if dtypes[name].is_floating_point else total
        for name, total in sums.items()
    }


def _check_same_keys(expected: Iterable[str], expected_path: Path, found: Iterable[str], found_path: Path) -> None:
    expected, found = set(expected), set(found)
    if expected == found:
        return
    differences = []
    if expected - found:
        differences.append(f"{found_path} lacks {_names(expected - found)} (present in {expected_path})")
    if found - expected:
        differences.append(f"{found_path} has {_names(found - expected)} (absent from {expected_path})")
    raise CheckpointError("checkpoints hold different tensors: " + "; ".join(differences) + ".")


def _names(names: Iterable[str], limit: int = 10) -> str:
    names = sorted(names)
    shown = ", ".join(names[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")


def load_weights(path: Path) -> dict[str, torch.Tensor]:
    """All tensors of one checkpoint (a folder or a `.safetensors` file), on the CPU."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    state: dict[str, torch.Tensor] = {}
    for file in weight_files(path):
        try:
            state.update(load_file(file, device="cpu"))
        except (SafetensorError, OSError) as error:
            if not file.exists():  # gone while it was read: a training rotating its checkpoints out
                raise CheckpointError(
                    f"{file} went away while it was read: a running training removes its oldest checkpoints as it "
                    "saves new ones (it keeps --keep_checkpoints); run again, for the checkpoints it keeps now"
                ) from error
            raise CheckpointError(f"cannot read the weights in {file}: {error}") from error
    return state


def weight_files(path: Path) -> list[Path]:
    """The safetensors file(s) holding a checkpoint's model weights."""
    if path.is_file():
        if path.suffix != ".safetensors":
            raise CheckpointError(f"{path} is not a .safetensors file or a checkpoint folder.")
        return [path]
    if not path.is_dir():
        raise CheckpointError(f"no such checkpoint: {path}")
    if (path / SAFE_WEIGHTS_NAME).is_file():
        return [path / SAFE_WEIGHTS_NAME]
    index = path / SAFE_WEIGHTS_INDEX_NAME
    if index.is_file():
        try:
            weight_map = json.loads(index.read_text(encoding="utf-8"))["weight_map"]
        except (ValueError, KeyError, TypeError) as error:
            raise CheckpointError(f"{index} is not a safetensors index (no readable weight_map): {error}") from error
        files = [path / name for name in sorted(set(weight_map.values()))]
        missing = [file.name for file in files if not file.is_file()]
        if missing:
            raise CheckpointError(f"{index} lists shard(s) that are missing: {_names(missing)}.")
        return files
    raise CheckpointError(
        f"{path} holds no model weights: expected {SAFE_WEIGHTS_NAME} (written by accelerator.save_state and "
        f"save_pretrained with safetensors) or a sharded {SAFE_WEIGHTS_INDEX_NAME}."
    )


def average_into_model(model: PreTrainedModel, paths: Sequence[str | Path]) -> None:
    """Replace the weights of `model` with the average of the checkpoints.

    Saved state dicts hold tied weights once (`accelerator.save_state` and `save_pretrained` drop the duplicates of
    `model.shared.weight`), so a key may be missing if it is tied to a key that is present; it receives that
    tensor. Any other missing or unexpected key, or a shape that does not fit, raises CheckpointError. Tied
    parameters stay tied (values are copied in place).
    """
    load_weights_into_model(model, average_checkpoints(paths), source="the checkpoints")


def load_weights_into_model(model: PreTrainedModel, weights: dict[str, torch.Tensor], *, source: str) -> None:
    """Load `weights` (a saved state dict: tied weights stored once) into `model`, strictly: any missing or
    unexpected tensor or a shape that does not fit raises `CheckpointError` naming `source`. Tied parameters stay
    tied (values are copied in place). Resuming a run loads a checkpoint's weights with it."""
    import torch

    averaged = dict(weights)
    expected = model.state_dict()
    unexpected = averaged.keys() - expected.keys()
    if unexpected:
        raise CheckpointError(f"{source}: tensors the model does not have: {_names(unexpected)}.")
    for name, tensor in averaged.items():
        if tensor.shape != expected[name].shape:
            raise CheckpointError(
                f"tensor {name!r} has shape {tuple(tensor.shape)} in {source} but "
                f"{tuple(expected[name].shape)} in the model."
            )
    for group in tied_groups(model, expected):
        present = sorted(name for name in group if name in averaged)
        for name in present[1:]:
            if not torch.equal(averaged[name], averaged[present[0]]):
                raise CheckpointError(
                    f"{present[0]} and {name} are tied in the model but differ in {source} "
                    "(saved from a model without tied weights?)."
                )
        if present:
            averaged.update({name: averaged[present[0]] for name in group if name not in averaged})
    missing = expected.keys() - averaged.keys()
    if missing:
        raise CheckpointError(f"{source}: tensors of the model are missing: {_names(missing)}.")
    model.load_state_dict(averaged, strict=True)


def tied_groups(model: torch.nn.Module, state: dict[str, torch.Tensor]) -> list[set[str]]:
    """Sets of keys of the model's state dict that are one tensor: declared ties (`all_tied_weights_keys`,
    {target: source}) and keys whose tensors share memory."""
    declared: dict[str, set[str]] = {}
    for target, source in (getattr(model, "all_tied_weights_keys", None) or {}).items():
        declared.setdefault(source, {source}).add(target)
    shared_memory: dict[tuple, set[str]] = {}
    for name, tensor in state.items():
        if tensor.numel() > 0 and tensor.device.type != "meta":
            shared_memory.setdefault((tensor.data_ptr(), tensor.dtype, tuple(tensor.shape)), set()).add(name)
    return [*declared.values(), *(group for group in shared_memory.values() if len(group) > 1)]
