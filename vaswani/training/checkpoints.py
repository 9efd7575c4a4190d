"""Training checkpoints that survive a kill, and exact resume (Vaswani et al. 2017, Section 6.1: a checkpoint every
10 minutes; averaging them is `vaswani.weights`).

- `CheckpointManager` writes each checkpoint (the files `save_checkpoint` writes) into a hidden
  `root/.tmp-step-00000123/` folder, makes it durable (fsync), marks it complete with `checkpoint.json` and only then
  renames it to `root/step-00000123/` in one atomic step. A crash or SIGKILL at any moment therefore leaves every
  previously completed checkpoint intact; the only leftovers are `.tmp-*` folders, which `remove_incomplete()`
  cleans at the next start. It keeps the last K checkpoints and resolves `--resume_from_checkpoint` ("latest" or a
  path).
- `TrainingState`: what a checkpoint holds besides the weights (optimizer, LR schedule, LayerDrop, DropHead,
  progress), saved with `vaswani.fileio.save_state_file` (safetensors + JSON, no pickle); `rng_states` /
  `set_rng_states` for each process's random generators; `save_checkpoint` / `load_checkpoint` for the whole.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
import os
import shutil
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from datetime import datetime, timezone
from pathlib import Path

import torch

from modeling_vaswani import (
    DropHeadScheduler,
)
from vaswani.constants import (
    ABANDONED_PREFIX,
    DELETED_PREFIX,
    MARKER_NAME,
    PROGRESS_FILE,
    REPLACED_PREFIX,
    RNG_FILE,
    STEP_DIR,
    TMP_PREFIX,
    TRAINING_STATE_FILE,
)
from vaswani.errors import (
    CheckpointError,
)
from vaswani.fileio import fsync_dir, fsync_tree, load_state_file, save_state_file
from vaswani.training.distributed import together
from vaswani.weights import average_into_model, load_weights, load_weights_into_model

logger = logging.getLogger("train")  # one logger for the whole training run


__all__ = [
    "CheckpointError",
    "CheckpointManager",
    "average_into_model",
]


def step_of(path: str | Path) -> int:
    """The step of a checkpoint folder named `step-N` (`STEP_DIR`)."""
    match = STEP_DIR.fullmatch(Path(path).name)
    if match is None:
        raise CheckpointError(f"{path} is not a checkpoint folder name: expected step-<number>, e.g. step-00000100.")
    return int(match.group(1))


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

    step_of = staticmethod(step_of)

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
        ) from error


@dataclasses.dataclass
class TrainingProgress:
    """Where the run is; saved in every checkpoint (`TrainingState`) so a resume continues exactly."""

    step: int = 0  # optimizer updates done
    epoch: int = 0  # epoch of the next batch
    batch_in_epoch: int = 0  # index (for this rank) of the next batch within its epoch
    target_tokens: int = 0  # real target tokens trained on, all processes
    train_seconds: float = 0.0

    def state_dict(self) -> dict:
        return dataclasses.asdict(self)

    def load_state_dict(self, state: dict) -> None:
        for key, value in state.items():
            setattr(self, key, value)


@dataclasses.dataclass
class TrainingState:
    """Everything a checkpoint holds besides the weights, written with `save_state_file` (safetensors + JSON): a
    resume reads nothing that can execute code, and restores all of it or stops with an error."""

    accelerator: object
    model: torch.nn.Module  # the unwrapped model (its LayerDrop generators)
    optimizer: torch.optim.Optimizer
    lr_scheduler: object
    drophead: DropHeadScheduler | None
    progress: TrainingProgress
    max_steps: int

    def state_dict(self) -> dict:
        scaler = self.accelerator.scaler
        return {
            "progress": self.progress.state_dict(),
            "max_steps": self.max_steps,
            "num_processes": self.accelerator.num_processes,
            "accelerator_step": self.accelerator.step,
            "optimizer": self.optimizer.state_dict(),
            "lr_scheduler": self.lr_scheduler.state_dict(),
            "layerdrop": self.model.layerdrop_state_dict(),
            "drophead": self.drophead.state_dict() if self.drophead is not None else None,
            "grad_scaler": scaler.state_dict() if scaler is not None else None,
        }

    def load_state_dict(self, state: dict, source: Path) -> None:
        """Restore `state` (read from `source`); a `CheckpointError` naming `source` when it does not fit this run."""
        if state["num_processes"] != self.accelerator.num_processes:
            raise CheckpointError(
                f"{source} was written by {state['num_processes']} process(es) but this run has "
                f"{self.accelerator.num_processes}: resume with the same number of processes."
            )
        if state["max_steps"] != self.max_steps:
            raise CheckpointError(
                f"{source} belongs to a run of {state['max_steps']} updates but this run would make "
                f"{self.max_steps}: the LR and DropHead schedules depend on it. Resume with the original "
                "--max_train_steps / --num_train_epochs."
            )
        if (state["drophead"] is None) != (self.drophead is None):
            raise CheckpointError(f"{source} and the options disagree on scheduled DropHead.")
        if (state["grad_scaler"] is None) != (self.accelerator.scaler is None):
            raise CheckpointError(f"{source} and --mixed_precision disagree on fp16 loss scaling.")
        self.progress.load_state_dict(state["progress"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.lr_scheduler.load_state_dict(state["lr_scheduler"])
        self.model.load_layerdrop_state_dict(state["layerdrop"])
        if self.drophead is not None:
            self.drophead.load_state_dict(state["drophead"])
        if self.accelerator.scaler is not None:
            self.accelerator.scaler.load_state_dict(state["grad_scaler"])
        self.accelerator.step = state["accelerator_step"]


def save_checkpoint(
    accelerator,
    manager: CheckpointManager,
    model,
    training: TrainingState,
    write_more: Callable[[Path], None] | None = None,
) -> Path:
    """The weights (`model.safetensors`, through `accelerator.save_model`), the training state, every process's
    random number generators and what `write_more(folder)` writes (main process: the time budget and early-stopping
    state), published atomically by the CheckpointManager."""

    def write(directory: Path) -> None:
        accelerator.save_model(model, directory)
        save_state_file(directory / RNG_FILE.format(rank=accelerator.process_index), rng_states())
        if accelerator.is_main_process:
            save_state_file(directory / TRAINING_STATE_FILE, training.state_dict())
            (directory / PROGRESS_FILE).write_text(json.dumps(training.progress.state_dict(), indent=2))
            if write_more is not None:
                write_more(directory)

    path = manager.save(
        training.progress.step,
        write,
        is_main_process=accelerator.is_main_process,
        together=functools.partial(together, accelerator),
    )
    logger.info("Saved checkpoint %s", path)
    return path


def load_checkpoint(accelerator, path: Path, training: TrainingState) -> None:
    """Restore a checkpoint written by `save_checkpoint`. Every file is read as safetensors (never unpickled); a
    missing, damaged or tampered file, or one that does not fit this run, raises `CheckpointError` naming it."""
    legacy = sorted(p.name for p in path.glob("*.pkl")) + sorted(p.name for p in path.glob("*.bin"))
    if not (path / TRAINING_STATE_FILE).is_file() and legacy:
        raise CheckpointError(
            f"{path} holds pickle files ({', '.join(legacy)}) and no {TRAINING_STATE_FILE}: it was written by an older train.py "
            "and is not loaded, because unpickling can run code. Start a new run, or average its weights with "
            "`vaswani average`."
        )
    load_weights_into_model(training.model, load_weights(path), source=str(path))
    state = load_state_file(path / TRAINING_STATE_FILE)
    try:
        training.load_state_dict(state, path / TRAINING_STATE_FILE)
    except (KeyError, TypeError, ValueError, RuntimeError, IndexError) as error:
        if isinstance(error, CheckpointError):
            raise
        raise CheckpointError(
            f"{path / TRAINING_STATE_FILE} does not fit this run ({type(error).__name__}: {error}); resume with the "
            "original options, or from another checkpoint."
        ) from error
    rng_file = path / RNG_FILE.format(rank=accelerator.process_index)
    set_rng_states(load_state_file(rng_file), rng_file)
