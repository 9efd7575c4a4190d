"""Training checkpoints that survive a kill, and checkpoint averaging (Vaswani et al. 2017, Section 6.1).

The paper wrote a checkpoint every 10 minutes and averaged the last 5 (base) or 20 (big) into the final model.
This module does both halves for `train.py`:

- `CheckpointManager` writes each checkpoint (the files train.py's `save_checkpoint` writes) into a
  hidden `root/.tmp-step-00000123/` folder, makes it durable (fsync), marks it complete with `checkpoint.json`
  and only then renames it to `root/step-00000123/` in one atomic step. A crash or SIGKILL at any moment
  therefore leaves every previously completed checkpoint intact; the only leftovers are `.tmp-*` folders, which
  `remove_incomplete()` cleans at the next start. It keeps the last K checkpoints and resolves
  `--resume_from_checkpoint` ("latest" or a path).
- `save_state_file` / `load_state_file`: what a checkpoint holds besides the weights (optimizer, schedules, random
  generators) as safetensors tensors plus a JSON skeleton, so that resuming reads nothing that can execute code
  (no pickle); `rng_states` / `set_rng_states` for the random generators. `atomic_output` writes any file through
  a temporary name and a rename.
- `average_checkpoints` follows fairseq's `scripts/average_checkpoints.py`: the arithmetic mean of every tensor
  (accumulated in float64, cast back to the tensor's dtype), key sets and shapes must match.
  `average_into_model` loads the average into a model (tied weights are saved once), `average_run` writes the
  averaged model of a finished run as a complete `save_pretrained` folder.

Command line (the standalone step; its options are defined here, `vaswani.cli` runs it):

    vaswani average --run_dir runs/base --last 5 --output_dir runs/base-avg5
    vaswani average --checkpoints CKPT [CKPT ...] --model runs/base --output_dir OUT

`CheckpointManager` needs only the standard library; torch and transformers are imported by the averaging
functions that use them, so that `train.py` helpers and the command line's error messages start fast.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import os
import shutil
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING

from vaswani.constants import (
    ABANDONED_PREFIX,
    CHECKPOINTS_SUBDIR,
    DELETED_PREFIX,
    FILES_TO_COPY,
    GENERATION_CONFIG_FILE,
    MARKER_NAME,
    REPLACED_PREFIX,
    STEP_DIR,
    TMP_PREFIX,
)
from vaswani.errors import CheckpointError
from vaswani.fileio import fsync_dir, fsync_tree
from vaswani.weights import average_into_model

if TYPE_CHECKING:
    from transformers import PreTrainedModel

__all__ = [
    "CheckpointError",
    "CheckpointManager",
    "average_into_model",
    "average_run",
    "average_to_folder",
    "run_average",
]


# ----------------------------------------------------------------------------------------------------------------
# Writing, listing and resolving checkpoints
# ----------------------------------------------------------------------------------------------------------------
class CheckpointManager:
    """The checkpoints of one run: `root/step-00000123/` folders, each complete with a `checkpoint.json` marker.

    Args:
        root: the folder holding the checkpoints (created on the first save).
        keep_last: how many checkpoints to keep; after each save the oldest beyond this many are deleted
            (never the one just written). `None` keeps all. Keep at least as many as you average at the end.
    """

    def __init__(self, root: str | Path, keep_last: int | None = None):
        if keep_last is not None and keep_last < 1:
            raise ValueError(f"keep_last is {keep_last!r}; keep at least 1 checkpoint, or pass None to keep all.")
        self.root = Path(root)
        self.keep_last = keep_last

    # -- names ------------------------------------------------------------------------------------------------------
    @staticmethod
    def dirname(step: int) -> str:
        """`step-00000123`: zero-padded, so that names sort like steps."""
        return f"step-{step:08d}"

    @staticmethod
    def step_of(path: str | Path) -> int:
        """The step of a checkpoint folder named `step-N`."""
        match = STEP_DIR.fullmatch(Path(path).name)
        if match is None:
            raise CheckpointError(
                f"{path} is not a checkpoint folder name: expected step-<number>, e.g. step-00000100."
            )
        return int(match.group(1))

    # -- saving -----------------------------------------------------------------------------------------------------
    def save(
        self,
        step: int,
        write: Callable[[Path], None],
        *,
        is_main_process: bool = True,
        together: Callable[[], AbstractContextManager] = nullcontext,
    ) -> Path:
        """Write the checkpoint of `step` and return its folder. Every process calls this, as with `save_state`.

        1. The main process creates an empty `root/.tmp-step-N/`; then all processes wait.
        2. Every process calls `write(tmp_dir)`, e.g. `lambda d: accelerator.save_state(d)` plus extra files.
        3. After all have written, the main process fsyncs the files, writes the `checkpoint.json` marker and
           renames the folder to `root/step-N/` (atomic). An existing checkpoint of the same step is renamed aside
           first and deleted once the new one is in place. Then checkpoints beyond `keep_last` are deleted.

        When several processes save together, `together()` is a context manager that ends with a barrier, at which a
        failure in any process's part stops every process (train.py's `together`).
        """
        if step < 0:
            raise ValueError(f"step is {step}; checkpoint steps are >= 0.")
        final = self.root / self.dirname(step)
        tmp = self.root / f"{TMP_PREFIX}{final.name}"
        with together():
            if is_main_process:
                self.root.mkdir(parents=True, exist_ok=True)
                if tmp.exists():  # left by an earlier interrupted save of this step
                    shutil.rmtree(tmp)
                tmp.mkdir()
        with together():
            write(tmp)
        with together():
            if is_main_process:
                self._publish(tmp, final, step)
                self._delete_beyond_keep_last(just_written=final)
        return final

    def _publish(self, tmp: Path, final: Path, step: int) -> None:
        """Make the written folder durable, mark it complete and move it into place."""
        fsync_tree(tmp)
        marker = {"step": step, "complete": True, "time": datetime.now(timezone.utc).isoformat(timespec="seconds")}
        with open(tmp / MARKER_NAME, "w", encoding="utf-8") as stream:
            json.dump(marker, stream)
            stream.flush()
            os.fsync(stream.fileno())
        fsync_dir(tmp)
        if final.exists():
            # A directory cannot be renamed over a non-empty one: move the old one aside, then put the new one in.
            # A kill between the two renames leaves the old one as `.tmp-replaced-...`: remove_incomplete() puts
            # it back.
            aside = self.root / f"{REPLACED_PREFIX}{final.name}"
            if aside.exists():
                shutil.rmtree(aside)
            os.replace(final, aside)
            os.replace(tmp, final)
            fsync_dir(self.root)
            shutil.rmtree(aside)
        else:
            os.replace(tmp, final)
            fsync_dir(self.root)

    def _delete_beyond_keep_last(self, just_written: Path) -> None:
        """Delete the oldest checkpoints until `keep_last` remain, never the one just written."""
        if self.keep_last is None:
            return
        others = [path for path in self.checkpoints() if path != just_written]
        excess = len(others) + 1 - self.keep_last
        for path in others[: max(excess, 0)]:
            self._delete(path)

    def _delete(self, checkpoint: Path) -> None:
        """Delete a checkpoint so that a kill halfway never leaves a complete-looking but partial folder: rename it
        to a `.tmp-deleted-*` leftover first (atomic), then remove the files."""
        doomed = self.root / f"{DELETED_PREFIX}{checkpoint.name}"
        if doomed.exists():
            shutil.rmtree(doomed)
        os.replace(checkpoint, doomed)
        shutil.rmtree(doomed)

    # -- listing ----------------------------------------------------------------------------------------------------
    def checkpoints(self) -> list[Path]:
        """The complete checkpoints (`step-N` folders whose marker says complete), oldest step first."""
        if not self.root.is_dir():
            return []
        found = [path for path in self.root.iterdir() if STEP_DIR.fullmatch(path.name) and _is_complete(path)]
        return sorted(found, key=self.step_of)

    def latest(self) -> Path | None:
        """The complete checkpoint with the highest step, or None."""
        found = self.checkpoints()
        return found[-1] if found else None

    def leftovers(self) -> list[Path]:
        """The `.tmp-*` leftovers of interrupted saves and deletions."""
        if not self.root.is_dir():
            return []
        return sorted(path for path in self.root.iterdir() if path.name.startswith(TMP_PREFIX))

    def remove_incomplete(self) -> list[Path]:
        """Delete the `.tmp-*` leftovers of interrupted saves; call it on the main process only, before training
        starts. A complete checkpoint that a kill left renamed aside while it was being replaced by a new save of
        the same step is put back instead. Returns the paths removed."""
        removed = []
        for leftover in self.leftovers():
            if self._restore_replaced(leftover):
                continue
            if leftover.is_dir() and not leftover.is_symlink():
                shutil.rmtree(leftover)
            else:
                leftover.unlink()
            removed.append(leftover)
        if self.root.is_dir():
            fsync_dir(self.root)
        return removed

    def _restore_replaced(self, leftover: Path) -> bool:
        """Put back a complete checkpoint that a kill left renamed aside (see `_publish`); whether it did."""
        if not leftover.name.startswith(REPLACED_PREFIX):
            return False
        original = self.root / leftover.name.removeprefix(REPLACED_PREFIX)
        if original.exists() or not _is_complete(leftover):
            return False
        os.replace(leftover, original)
        return True

    # -- resuming ---------------------------------------------------------------------------------------------------
    def set_aside_newer(self, checkpoint: str | Path) -> list[Path]:
        """Move the complete checkpoints newer than `checkpoint` into `root/abandoned-<time>/` (main process only).

        Resuming from an older checkpoint starts a new branch of the run: its later checkpoints must not be averaged
        with, or pruned against, the new ones. Nothing is deleted. Returns the new locations."""
        step = self.step_of(checkpoint)
        newer = [path for path in self.checkpoints() if self.step_of(path) > step]
        if not newer:
            return []
        folder = self.root / f"{ABANDONED_PREFIX}{datetime.now(timezone.utc).strftime('%Y%m%dT%H%M%S%f')}"
        folder.mkdir()
        moved = []
        for path in newer:
            os.replace(path, folder / path.name)
            moved.append(folder / path.name)
        fsync_dir(self.root)
        return moved

    def resolve(self, spec: str) -> Path:
        """The checkpoint folder that `--resume_from_checkpoint SPEC` means: "latest" (the complete checkpoint with
        the highest step), or a path to a checkpoint folder (also a folder name under `root`, e.g. step-00000100).
        Raises CheckpointError when there is none, or the folder is missing or incomplete."""
        if spec == "latest":
            latest = self.latest()
            if latest is None:
                leftovers = self.leftovers()
                hint = (
                    f" (only {len(leftovers)} incomplete .tmp-* leftover(s) of interrupted saves)" if leftovers else ""
                )
                raise CheckpointError(f"no complete checkpoint under {self.root} to resume from{hint}.")
            return latest
        path = Path(spec)
        if not path.exists() and (self.root / spec).exists():
            path = self.root / spec
        if not path.exists():
            raise CheckpointError(f"no such checkpoint directory: {spec}")
        if not path.is_dir():
            raise CheckpointError(
                f"{spec} is not a directory: give a checkpoint folder (e.g. step-00000100) or 'latest'."
            )
        if not (path / MARKER_NAME).is_file():
            raise CheckpointError(
                f"{path} is an incomplete checkpoint: its completion marker {MARKER_NAME} is missing (the save was "
                "interrupted, or the folder was not written by CheckpointManager)."
            )
        if not _is_complete(path):
            raise CheckpointError(f"{path} is an incomplete checkpoint: {path / MARKER_NAME} does not say complete.")
        return path


def _is_complete(folder: Path) -> bool:
    """Whether `folder` holds a readable marker saying the save completed."""
    try:
        with open(folder / MARKER_NAME, encoding="utf-8") as stream:
            marker = json.load(stream)
    except (OSError, ValueError):
        return False
    return isinstance(marker, dict) and marker.get("complete") is True


def rng_states() -> dict:
    """This process's random number generator states (Python, NumPy, torch CPU and CUDA), for `save_state_file`."""
    import random

    import numpy as np
    import torch

    return {
        "python": random.getstate(),
        "numpy": np.random.get_state(),
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
    }


def set_rng_states(states: dict, source: Path) -> None:
    """Restore what `rng_states` returned (read from `source`); a `CheckpointError` naming `source` if it does not
    fit, never a silent skip (a resume must restore everything or stop)."""
    import random

    import numpy as np
    import torch

    try:
        random.setstate(states["python"])
        np.random.set_state(states["numpy"])
        torch.set_rng_state(states["torch"])
        if states["cuda"]:
            if len(states["cuda"]) != torch.cuda.device_count():
                raise ValueError(
                    f"it holds {len(states['cuda'])} CUDA generator(s), this machine has {torch.cuda.device_count()}"
                )
            torch.cuda.set_rng_state_all(states["cuda"])
    except (KeyError, TypeError, ValueError, RuntimeError) as error:
        raise CheckpointError(
            f"{source} holds random number generator states that cannot be restored: {error}."
        ) from None


# ----------------------------------------------------------------------------------------------------------------
# The averaged model as a save_pretrained folder (the standalone step)
# ----------------------------------------------------------------------------------------------------------------
def average_run(
    run_dir: str | Path, last: int, output_dir: str | Path, *, overwrite: bool = False, trust_remote_code: bool = False
) -> Path:
    """Average the last `last` complete checkpoints of a run into a complete model folder.

    `run_dir` is the final model folder train.py writes (config, generation config, tokenizer files), with the
    checkpoints under `run_dir/checkpoints/`. The output gets the model's `save_pretrained` files with the averaged
    weights, plus the tokenizer files and README.md of `run_dir`. `output_dir` may be `run_dir` itself: its model
    files are then replaced (`vaswani.model_folder.write_model_folder`) and everything else in it is kept. Any
    other non-empty `output_dir` needs `overwrite`.
    """
    from vaswani.model_folder import check_model_folder

    run_dir = check_model_folder(run_dir, need_tokenizer=False, need_weights=False)
    if last < 1:
        raise CheckpointError(f"the number of checkpoints to average is {last}; it must be at least 1.")
    checkpoint_root = run_dir / CHECKPOINTS_SUBDIR
    available = CheckpointManager(checkpoint_root).checkpoints()
    if len(available) < last:
        raise CheckpointError(
            f"cannot average the last {last} checkpoint(s): {checkpoint_root} has {len(available)} complete "
            f"checkpoint(s)."
        )
    in_place = Path(output_dir).exists() and Path(output_dir).resolve() == run_dir.resolve()
    return average_to_folder(
        available[-last:], run_dir, output_dir, overwrite=overwrite or in_place, trust_remote_code=trust_remote_code
    )


def average_to_folder(
    paths: Sequence[str | Path],
    model_dir: str | Path,
    output_dir: str | Path,
    *,
    overwrite: bool = False,
    trust_remote_code: bool = False,
) -> Path:
    """Average the checkpoints into the model described by `model_dir` (its config, generation config, tokenizer
    files and README.md; its weights are not read) and write a complete `save_pretrained` folder to `output_dir`
    (a new or empty folder, or any folder with `overwrite`: its model files are replaced, other files kept)."""
    from vaswani.model_folder import check_model_files, check_output_folder, write_model_folder

    model_dir = Path(model_dir)
    check_output_folder(output_dir, replace=overwrite)
    config, _ = check_model_files(
        model_dir, need_tokenizer=False, need_weights=False, trust_remote_code=trust_remote_code
    )
    model = _model_from_config(model_dir, config, trust_remote_code)
    average_into_model(model, paths)

    def write(folder: Path) -> None:
        model.save_pretrained(folder)
        for file in sorted(model_dir.iterdir()):
            if file.is_file() and any(fnmatch.fnmatch(file.name, pattern) for pattern in FILES_TO_COPY):
                shutil.copy2(file, folder / file.name)

    return write_model_folder(output_dir, write, replace=overwrite)


def _model_from_config(model_dir: Path, config, trust_remote_code: bool) -> PreTrainedModel:
    """A freshly initialized model of `config`, with the folder's generation config."""
    from transformers import AutoModelForSeq2SeqLM, GenerationConfig

    model = AutoModelForSeq2SeqLM.from_config(config, trust_remote_code=trust_remote_code)
    if (model_dir / GENERATION_CONFIG_FILE).is_file():
        try:
            model.generation_config = GenerationConfig.from_pretrained(model_dir, local_files_only=True)
        except (OSError, ValueError, TypeError) as error:
            raise CheckpointError(f"{model_dir / 'generation_config.json'} cannot be read: {error}") from None
    return model


# ----------------------------------------------------------------------------------------------------------------
# Command line
# ----------------------------------------------------------------------------------------------------------------
def positive_int(text: str) -> int:
    """argparse type for counts: a whole number, at least 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def add_average_arguments(average: argparse.ArgumentParser) -> None:
    """The options of `vaswani average` (checkpoint averaging)."""
    from vaswani.model_folder import add_output_folder_arguments, add_trust_remote_code

    source = average.add_mutually_exclusive_group(required=True)
    source.add_argument("--run_dir", type=Path, metavar="DIR", help="a run's final model folder, with checkpoints/")
    source.add_argument(
        "--checkpoints", type=Path, nargs="+", metavar="CKPT", help="checkpoint folders or .safetensors files"
    )
    average.add_argument(
        "--last", type=positive_int, metavar="N", help="with --run_dir: average the last N checkpoints (paper: 5, 20)"
    )
    average.add_argument(
        "--model", type=Path, metavar="DIR", help="with --checkpoints: the model folder (config, tokenizer files)"
    )
    add_output_folder_arguments(average, "the model", exempt=" (other than --run_dir)")
    add_trust_remote_code(average)


def run_average(args: argparse.Namespace) -> int:
    """`vaswani average`: write the averaged model folder and say where."""
    from vaswani.errors import UsageError

    if args.run_dir is not None and (args.last is None or args.model is not None):
        raise UsageError("--run_dir needs --last N (and takes no --model: the run folder is the model)")
    if args.checkpoints is not None and (args.model is None or args.last is not None):
        raise UsageError("--checkpoints needs --model DIR (and takes no --last)")
    options = {"overwrite": args.overwrite, "trust_remote_code": args.trust_remote_code}
    if args.run_dir is not None:
        output = average_run(args.run_dir, args.last, args.output_dir, **options)
    else:
        output = average_to_folder(args.checkpoints, args.model, args.output_dir, **options)
    print(f"wrote the averaged model to {output}")
    return 0
