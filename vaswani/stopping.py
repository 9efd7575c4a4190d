"""When training ends before `--max_train_steps`: a time budget (`--max_train_minutes`) and early stopping on the
validation metric (`--early_stopping_patience`, `--metric_for_best`).

Both end the run the normal way (checkpoint averaging, final evaluation, model folder and card), unlike
`--stop_after_minutes`, which pauses a run to be resumed. Their state (time spent, best score so far, evaluations
without improvement) is saved as JSON next to every checkpoint (`stopping_state.json`) so that a resumed run continues
the same count; nothing is pickled.

The best checkpoint. Early stopping needs a checkpoint at every evaluation. When an evaluation improves on the best,
that checkpoint is copied to `output_dir/best_checkpoint/step-N/`, outside the rotation of `--keep_checkpoints`, so
it is never deleted by it. The final model is then the average of the best checkpoint and the checkpoints saved
before it that are still kept, up to `--average_checkpoints` in all: the same kind of window the paper averages,
ending at the best point rather than at the last one (checkpoints after the best are the ones that got worse, so
they are left out). With `--average_checkpoints` 0 or 1 it is the best checkpoint alone.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import asdict, dataclass, field
from pathlib import Path

STATE_FILE = "stopping_state.json"
BEST_DIR = "best_checkpoint"
METRICS = {"bleu": "max", "chrf": "max", "loss": "min"}


@dataclass
class EarlyStopping:
    """The early-stopping state machine: feed it one validation score per evaluation (`update`); it says when
    `patience` evaluations in a row have not improved on the best (by more than `min_delta`).

    >>> stopper = EarlyStopping(patience=2, metric="bleu")
    >>> [stopper.update(step, score) for step, score in [(1, 10.0), (2, 12.0), (3, 11.0), (4, 12.0)]]
    [False, False, False, True]
    >>> stopper.best_step, stopper.best_value
    (2, 12.0)
    """

    patience: int
    metric: str = "bleu"
    min_delta: float = 0.0
    best_value: float | None = None
    best_step: int | None = None
    evaluations_without_improvement: int = 0
    history: list[list[float]] = field(default_factory=list)  # [step, value] of every evaluation

    def __post_init__(self):
        if self.metric not in METRICS:
            raise ValueError(f"metric_for_best {self.metric!r} is not one of {sorted(METRICS)}.")
        if self.patience < 1:
            raise ValueError(f"early_stopping_patience {self.patience} must be a positive number of evaluations.")

    def improves(self, value: float) -> bool:
        if self.best_value is None:
            return True
        if METRICS[self.metric] == "max":
            return value > self.best_value + self.min_delta
        return value < self.best_value - self.min_delta

    def update(self, step: int, value: float) -> bool:
        """Record the score of the evaluation at `step`; True when training should stop."""
        self.history.append([step, value])
        if self.improves(value):
            self.best_value, self.best_step = value, step
            self.evaluations_without_improvement = 0
        else:
            self.evaluations_without_improvement += 1
        return self.evaluations_without_improvement >= self.patience

    @property
    def should_stop(self) -> bool:
        return self.evaluations_without_improvement >= self.patience

    def state_dict(self) -> dict:
        return asdict(self)

    def load_state_dict(self, state: dict) -> None:
        if state.get("metric") != self.metric:
            raise ValueError(
                f"the run's early stopping followed {state.get('metric')!r}, not {self.metric!r}: resume with "
                f"--metric_for_best {state.get('metric')}."
            )
        for key in ("best_value", "best_step", "evaluations_without_improvement", "history"):
            setattr(self, key, state[key])


@dataclass
class TimeBudget:
    """`--max_train_minutes`: wall-clock minutes of the training loop (evaluations during training included), summed
    over the invocations of a resumed run."""

    minutes: float | None
    seconds_before: float = 0.0  # spent by earlier invocations of this run

    def spent(self, seconds_now: float) -> bool:
        return self.minutes is not None and self.seconds_before + seconds_now >= 60 * self.minutes


def save_state(checkpoint: Path, budget_seconds: float, stopper: EarlyStopping | None) -> None:
    """Write `stopping_state.json` into a checkpoint folder being written: temporary name, then rename."""
    state = {"train_loop_seconds": budget_seconds, "early_stopping": stopper.state_dict() if stopper else None}
    tmp = checkpoint / f".{STATE_FILE}.tmp"
    tmp.write_text(json.dumps(state, indent=2))
    os.replace(tmp, checkpoint / STATE_FILE)


def load_state(checkpoint: Path) -> dict:
    """The state saved with `checkpoint`; `CheckpointError` naming the file if it is missing or damaged (a resume
    restores everything or stops)."""
    from vaswani.checkpoints import CheckpointError

    path = Path(checkpoint) / STATE_FILE
    try:
        state = json.loads(path.read_text(encoding="utf-8"))
        float(state["train_loop_seconds"])
        if not isinstance(state["early_stopping"], dict | None):
            raise TypeError("early_stopping is not an object")
    except FileNotFoundError:
        raise CheckpointError(f"{path} is missing: the checkpoint is incomplete; resume from another one") from None
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise CheckpointError(f"{path} is damaged ({error}); resume from another checkpoint") from None
    return state


def keep_best(checkpoint: Path, output_dir: Path) -> Path:
    """Copy the new best checkpoint to output_dir/best_checkpoint/step-N (complete copy first, then the previous best
    is replaced). Returns the copy."""
    best_root = output_dir / BEST_DIR
    target = best_root / checkpoint.name
    staging = best_root / f".tmp-{checkpoint.name}"
    shutil.rmtree(staging, ignore_errors=True)
    shutil.copytree(checkpoint, staging)
    os.replace(staging, target)  # the new best is complete before the previous one goes (the newest step wins)
    for old in best_root.iterdir():
        if old != target and not old.name.startswith(".tmp-"):
            shutil.rmtree(old)
    return target


def best_checkpoint(output_dir: Path) -> Path | None:
    best_root = output_dir / BEST_DIR
    if not best_root.is_dir():
        return None
    found = sorted(p for p in best_root.iterdir() if p.is_dir() and not p.name.startswith("."))
    return found[-1] if found else None


def window_ending_at_best(best: Path, kept: list[Path], count: int) -> list[Path]:
    """The checkpoints to average for the final model: the best one and the kept checkpoints saved before it, at
    most `count` in all, oldest first."""
    before = [p for p in kept if step_of_name(p) < step_of_name(best)]
    return [*before[-(max(count, 1) - 1) :], best] if count > 1 else [best]


class StoppingRules:
    """The time budget and early stopping of one run, as train.py's loop uses them (main process decides; the
    decisions are broadcast by the caller)."""

    def __init__(self, output_dir: Path, max_train_minutes: float | None, patience: int | None, metric: str):
        self.output_dir = Path(output_dir)
        self.budget = TimeBudget(max_train_minutes)
        self.stopper = EarlyStopping(patience, metric) if patience else None

    def restore(self, checkpoint: Path) -> str:
        """Continue the counts saved with `checkpoint`; returns what was restored, for the log."""
        state = load_state(checkpoint)
        self.budget.seconds_before = float(state["train_loop_seconds"])
        if self.stopper is not None and state["early_stopping"] is not None:
            self.stopper.load_state_dict(state["early_stopping"])
        best = best_checkpoint(self.output_dir)
        if best is not None and (self.stopper is None or self.stopper.best_step != step_of_name(best)):
            shutil.rmtree(best)  # a best kept after the checkpoint resumed from: not part of this run's history
            best = None
        if best is None and self.stopper is not None and self.stopper.best_step is not None:
            # a kill between publishing the best checkpoint and copying it: copy it now, if it is still kept
            kept = Path(checkpoint).parent / f"step-{self.stopper.best_step:08d}"
            if kept.is_dir():
                keep_best(kept, self.output_dir)
        return (
            f"{self.budget.seconds_before / 60:.1f} training minutes spent before"
            + (f"; best {self.stopper.metric} so far {self.stopper.best_value} at step {self.stopper.best_step}, "
               f"{self.stopper.evaluations_without_improvement} evaluation(s) without improvement"
               if self.stopper is not None else "")
        )  # fmt: skip

    def evaluated(self, step: int, results: dict) -> bool:
        """Record a validation result (main process: it alone has BLEU/chrF); True when early stopping says stop."""
        if self.stopper is None:
            return False
        return self.stopper.update(step, float(results[self.stopper.metric]))

    def budget_spent(self, loop_seconds: float) -> bool:
        return self.budget.spent(loop_seconds)

    def write_state(self, checkpoint: Path, loop_seconds: float) -> None:
        """While a checkpoint is written (main process, before it is published): its stopping state."""
        save_state(checkpoint, self.budget.seconds_before + loop_seconds, self.stopper)

    def saved(self, checkpoint: Path, step: int) -> None:
        """After the checkpoint of `step` is published (main process): the copy of a new best."""
        if self.stopper is not None and self.stopper.best_step == step:
            keep_best(checkpoint, self.output_dir)

    def final_checkpoints(self, kept: list[Path], count: int) -> list[Path] | None:
        """With early stopping, the checkpoints whose average is the final model (see the module docstring);
        None without early stopping or before any evaluation (then the last checkpoints are averaged as usual)."""
        best = best_checkpoint(self.output_dir) if self.stopper is not None else None
        if best is None:
            return None
        return window_ending_at_best(best, kept, count)


def step_of_name(path: Path) -> int:
    """The step of a `step-N` checkpoint folder."""
    return int(Path(path).name.split("-", 1)[1])
