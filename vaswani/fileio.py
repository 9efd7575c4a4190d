"""Files written so that a kill at any moment leaves the old content or the complete new one, and state files that
load without running code.

- `atomic_output` / `write_file_atomically`: write through a temporary name in the same folder, fsync, rename.
  `fsync_tree` / `fsync_dir` make a folder's files and names durable before it is published by a rename.
- `save_state_file` / `load_state_file`: what a checkpoint holds besides the weights (optimizer, schedules, random
  generators) as safetensors tensors plus a JSON skeleton, so that resuming reads nothing that can execute code
  (no pickle).
- `count_lines`: one fast binary pass (progress bars of `vaswani translate`, `vaswani tokenizer`, data checks), no
  heavy imports, so that a command can size its progress bar before loading torch.
- `decode_line` / `conversion_hint`: a line of a user's text file as every reader takes it (UTF-8, the line ending and
  a leading byte-order mark removed), and what to do with a file that is not UTF-8; `lone_surrogate`: where a text
  that came through JSON (a `\ud800` escape) is not Unicode text.
"""

from __future__ import annotations

import codecs
import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

from vaswani.constants import (
    TMP_PREFIX,
)
from vaswani.errors import CheckpointError, EnvironmentFailure, ModelFolderError, is_environment_failure


def count_lines(path: str | os.PathLike) -> int:
    """Number of lines in the file at `path`, in one fast binary pass; a last line without "\\n" counts (as
    Python's line iteration and `vaswani.data.loading.read_lines` see it)."""
    lines, last = 0, b"\n"
    with open(path, "rb") as stream:
        while chunk := stream.read(1 << 24):
            lines += chunk.count(b"\n")
            last = chunk[-1:]
    return lines + (last != b"\n")


def decode_line(raw: bytes | str, line_number: int) -> str:
    """Line `line_number` (1-based) of a UTF-8 text file, read in binary (or already text), as text without its
    ending ("\\n" or "\\r\\n"); on the first line without the UTF-8 byte-order mark that Windows editors and
    PowerShell put at the start of a file (it would otherwise reach the tokenizer as a character of the first
    sentence). Raises UnicodeDecodeError for bytes that are not UTF-8 (`conversion_hint` says what to do)."""
    text = raw.decode("utf-8") if isinstance(raw, bytes) else raw
    if line_number == 1:
        text = text.removeprefix("\ufeff")
    return text.removesuffix("\n").removesuffix("\r")


LONE_SURROGATE_FIX = "write the text as UTF-8, or escape a character beyond U+FFFF as a valid pair"
"""What every reader of JSON text tells a user whose text holds a `lone_surrogate`."""


def lone_surrogate(text: str) -> str | None:
    """Where `text` is not Unicode text, or None: JSON's `\\ud800` escapes can carry half of a surrogate pair, which
    no UTF-8 text holds and no tokenizer takes. Says the escape and its (1-based) character position."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as error:
        return (f"a lone surrogate {ascii(text[error.start])[1:-1]} at character {error.start + 1} (not Unicode text: "
                "an escape from \\ud800 to \\udfff must come in a high-low pair)")  # fmt: skip
    return None


def conversion_hint(first_bytes: bytes) -> str:
    """How to convert a file that is not UTF-8, given its first bytes: a UTF-16 byte-order mark (what Windows
    PowerShell 5's `>` writes) names UTF-16, else the usual suspect, Latin-1."""
    if first_bytes.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        return "it starts with a UTF-16 byte-order mark: convert it to UTF-8, e.g. with `iconv -f utf-16 -t utf-8`"
    return "convert it to UTF-8, e.g. with `iconv -f latin1 -t utf-8` if it is Latin-1 (`file` may tell)"


@contextmanager
def atomic_output(path: str | Path, mode: str = "w", **open_kwargs) -> Iterator[IO]:
    """Open a temporary file next to `path` for writing; when the block ends without an error it is flushed to disk
    and renamed to `path` (atomic), otherwise removed. A kill or an error never leaves `path` half-written: it holds
    the previous content or the complete new one. (A kill can leave a `.tmp-*` file next to it.)"""
    path = Path(path)
    tmp = path.parent / f"{TMP_PREFIX}{path.name}-{os.getpid()}"
    try:
        with open(tmp, mode, **open_kwargs) as stream:
            yield stream
            stream.flush()
            os.fsync(stream.fileno())
        os.replace(tmp, path)
    except BaseException as error:
        tmp.unlink(missing_ok=True)
        if is_environment_failure(error):  # a full disk, a denied permission: the machine's, not a bug
            raise EnvironmentFailure("writing", path, error) from error
        raise
    fsync_dir(path.parent)


def write_file_atomically(path: str | Path, content: str | bytes) -> None:
    """Write `content` to `path` through `atomic_output` (text as UTF-8)."""
    if isinstance(content, bytes):
        with atomic_output(path, "wb") as stream:
            stream.write(content)
    else:
        with atomic_output(path, "w", encoding="utf-8") as stream:
            stream.write(content)


def fsync_tree(folder: Path) -> None:
    """Flush every file and folder under `folder` to disk (so the rename after it never publishes lost data)."""
    for dirpath, _dirnames, filenames in os.walk(folder):
        for name in filenames:
            descriptor = os.open(os.path.join(dirpath, name), os.O_RDONLY)
            try:
                os.fsync(descriptor)
            finally:
                os.close(descriptor)
        fsync_dir(dirpath)


def fsync_dir(folder: str | Path) -> None:
    """Flush a folder's entries (renames, new files) to disk. Windows cannot open folders and needs no such call."""
    if os.name == "nt":
        return
    descriptor = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


# ----------------------------------------------------------------------------------------------------------------
# Training-state files that cannot run code (no pickle): safetensors tensors plus a JSON skeleton
# ----------------------------------------------------------------------------------------------------------------
STATE_METADATA_KEY = "vaswani_state"  # the safetensors metadata entry holding the JSON skeleton


def save_state_file(path: str | Path, state) -> None:
    """Write a nested state (dicts, lists, tuples, numbers, strings, None, torch tensors, numpy arrays) to a
    `.safetensors` file: the tensors as safetensors tensors, everything else as a JSON skeleton in the file's
    metadata. Unlike `torch.save`, reading it back (`load_state_file`) cannot execute code.

    Used for what a training checkpoint holds besides the weights: optimizer, LR schedule, LayerDrop generators,
    DropHead step, progress, and each process's random number generator states."""
    from safetensors.torch import save_file

    tensors: dict = {}
    skeleton = _encode_state(state, tensors)
    save_file(tensors, str(path), metadata={STATE_METADATA_KEY: json.dumps(skeleton)})


def load_state_file(path: str | Path):
    """The state written by `save_state_file`; a `CheckpointError` naming the file if it is missing, not a
    safetensors file (e.g. a planted pickle), damaged or not written by `save_state_file`."""
    from safetensors import SafetensorError, safe_open

    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"{path} is missing: the checkpoint is incomplete; resume from another checkpoint.")
    try:
        with safe_open(str(path), framework="pt", device="cpu") as stream:
            metadata = stream.metadata() or {}
            tensors = {key: stream.get_tensor(key) for key in stream.keys()}  # noqa: SIM118 (not a mapping)
        skeleton = json.loads(metadata[STATE_METADATA_KEY])
        return _decode_state(skeleton, tensors)
    except (SafetensorError, OSError, ValueError, KeyError, TypeError) as error:
        raise CheckpointError(
            f"{path} is damaged or was not written by train.py ({type(error).__name__}: {error}); it is never "
            "unpickled. Resume from another checkpoint."
        ) from error


def _encode_state(value, tensors: dict):
    """A JSON-able skeleton of `value`; tensors go into `tensors` under the key the skeleton names."""
    import numpy as np
    import torch

    if isinstance(value, torch.Tensor):
        key = str(len(tensors))
        tensors[key] = value.detach().cpu().contiguous()
        return {"__tensor__": key}
    if isinstance(value, np.ndarray):
        key = str(len(tensors))
        tensors[key] = torch.from_numpy(value.astype(np.int64) if value.dtype == np.uint32 else value.copy())
        return {"__ndarray__": key, "dtype": str(value.dtype)}
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, (list, tuple)):
        items = [_encode_state(item, tensors) for item in value]
        return {"__tuple__": items} if isinstance(value, tuple) else items
    if isinstance(value, dict):
        return {"__dict__": [[_encode_state(k, tensors), _encode_state(v, tensors)] for k, v in value.items()]}
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    raise TypeError(f"cannot store a {type(value).__name__} in a state file: {value!r}")


def _decode_state(value, tensors: dict):
    if isinstance(value, list):
        return [_decode_state(item, tensors) for item in value]
    if isinstance(value, dict):
        if "__tensor__" in value:
            return tensors[value["__tensor__"]]
        if "__ndarray__" in value:
            import numpy as np

            return tensors[value["__ndarray__"]].numpy().astype(np.dtype(value["dtype"]))
        if "__tuple__" in value:
            return tuple(_decode_state(item, tensors) for item in value["__tuple__"])
        return {_decode_state(k, tensors): _decode_state(v, tensors) for k, v in value["__dict__"]}
    return value


def read_json_object(path: Path, *, fix: str = "restore it or save the model again") -> dict:
    """A JSON file that must hold an object: a `ModelFolderError` naming it, what is wrong and `fix` otherwise."""
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as error:
        raise ModelFolderError(f"{path} is damaged (not readable JSON: {error}): {fix}") from error
    if not isinstance(value, dict):
        raise ModelFolderError(f"{path} is damaged (it holds a JSON {type(value).__name__}, not an object): {fix}")
    return value
