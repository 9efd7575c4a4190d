"""How a run ends and which model it hands over: a time budget (`--max_train_minutes`), early stopping on the
validation metric (`--early_stopping_patience`, `--metric_for_best`), the averaging window (`--average_checkpoints`,
`--average_window`) and the choice of the final model (`--final_model`).

Ending. A time budget, early stopping or `--max_train_steps` (whichever comes first) ends the run the normal way
(final model, evaluation, model folder and card), unlike `--stop_after_minutes`, which pauses a run to be resumed, and
unlike Ctrl-C or SIGTERM (a preempted machine, `kill`), which stop it after the update under way with a checkpoint to
resume from (`StopSignals`; a second Ctrl-C stops at once). A
time budget or early stopping is a complete stopping rule on its own: no update count is needed. Their state (time
spent, every validation score, evaluations without improvement) is saved as JSON next to every checkpoint
(`stopping_state.json`) so that a resumed run continues the same count and makes the same final choice; nothing is
pickled.

The averaging window. The paper (Section 6.1) averages the last 5 (base) or 20 (big) checkpoints of a converged run,
written 10 minutes apart: the last ~7% (base, 12 hours) or ~4% (big, 3.5 days) of training, where the model moves
little. A short run's checkpoints every few hundred updates are different models, and averaging them can cost several
BLEU (issue 18: 5.6 BLEU on a 20-minute run). So only checkpoints from the last `--average_window` of the run (a
fraction of its updates, or of its time budget when the budget ended it) are averaged, and when the end is known in
advance (`--max_train_steps`, `--max_train_minutes`) `--average_checkpoints` saves are spaced evenly over that window,
the paper's setting scaled down. With early stopping the window ends at the best checkpoint instead (checkpoints
after it got worse).

The best checkpoint. When it improves on the best validation score, the weights of that evaluation's checkpoint
(and its JSON records, not the optimizer state) are copied to `output_dir/best_checkpoint/step-N/`, outside the
rotation of `--keep_checkpoints`, so they are never deleted by it.

The final model (`--final_model auto`): the candidates are the last checkpoint (the model as trained), the best
evaluated checkpoint, the average of the window and, with `--ema_decay`, the moving average of the weights at the end
of the run (`vaswani/training/ema.py`, saved with the last checkpoint); each is scored on the validation set
(`--final_eval_samples` examples, all by default; scores computed during training are reused when they were on as
many) and the best `--metric_for_best` wins; on a tie the simpler candidate
(in that order) wins. `last`, `best`, `average` and `ema` force one candidate. results.json, the log and the model
card name the winner and every candidate's score.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import threading
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from vaswani.constants import BEST_DIR, STOPPING_STATE_FILE, TMP_PREFIX
from vaswani.errors import CheckpointError
from vaswani.training.checkpoints import CheckpointManager, step_of
from vaswani.training.ema import EMA_WEIGHTS_FILE
from vaswani.weights import weight_files

METRICS = {"bleu": "max", "chrf": "max", "loss": "min", "perplexity": "min"}  # perplexity: the LM tasks
FINAL_MODELS = (
    "auto",
    "last",
    "best",
    "average",
    "ema",
)  # --final_model; the candidates in order of simplicity after auto
TIME_BUDGET_SPENT = "time budget spent"  # train_loop's answers (results.json "finished_early")


@dataclass
class EarlyStopping:
    """The validation record of a run and its early-stopping rule: feed it one validation score per evaluation
    (`update`); it keeps the best and says when `patience` evaluations in a row have not improved on it (by more than
    `min_delta`). With `patience` None it only keeps the record (for the final model's choice) and never stops.

    >>> stopper = EarlyStopping(patience=2, metric="bleu")
    >>> [stopper.update(step, score) for step, score in [(1, 10.0), (2, 12.0), (3, 11.0), (4, 12.0)]]
    [False, False, False, True]
    >>> stopper.best_step, stopper.best_value
    (2, 12.0)
    """

    patience: int | None
    metric: str = "bleu"
    min_delta: float = 0.0
    best_value: float | None = None
    best_step: int | None = None
    evaluations_without_improvement: int = 0
    history: list[list[float]] = field(default_factory=list)  # [step, value] of every evaluation

    def __post_init__(self):
        if self.metric not in METRICS:
            raise ValueError(f"metric_for_best {self.metric!r} is not one of {sorted(METRICS)}.")
        if self.patience is not None and self.patience < 1:
            raise ValueError(f"early_stopping_patience {self.patience} must be a positive number of evaluations.")

    def better(self, value: float, than: float | None, min_delta: float = 0.0) -> bool:
        """Whether `value` beats `than` (None: nothing to beat) on this metric by more than `min_delta`."""
        if than is None:
            return True
        if METRICS[self.metric] == "max":
            return value > than + min_delta
        return value < than - min_delta

    def improves(self, value: float) -> bool:
        return self.better(value, self.best_value, self.min_delta)

    def update(self, step: int, value: float) -> bool:
        """Record the score of the evaluation at `step`; True when training should stop."""
        self.history.append([step, value])
        if self.improves(value):
            self.best_value, self.best_step = value, step
            self.evaluations_without_improvement = 0
        else:
            self.evaluations_without_improvement += 1
        return self.should_stop

    @property
    def should_stop(self) -> bool:
        return self.patience is not None and self.evaluations_without_improvement >= self.patience

    def score_at(self, step: int) -> float | None:
        """The validation score recorded at `step`, if that step was evaluated."""
        return next((value for at, value in self.history if at == step), None)

    def state_dict(self) -> dict:
        return asdict(self)

    def load_state_dict(self, state: dict) -> None:
        if state.get("metric") != self.metric:
            raise ValueError(
                f"the run's validation record follows {state.get('metric')!r}, not {self.metric!r}: resume with "
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

    @property
    def seconds(self) -> float | None:
        return None if self.minutes is None else 60 * self.minutes

    def spent(self, seconds_now: float) -> bool:
        return self.minutes is not None and self.seconds_before + seconds_now >= 60 * self.minutes


@dataclass
class AveragingWindow:
    """The last `fraction` of a run, whose checkpoints are averaged (module docstring), and the saves planned in it.

    >>> window = AveragingWindow(count=5, fraction=0.1, max_steps=1000, budget_seconds=None)
    >>> sorted(window.steps_due)  # 5 saves spread over the last 100 updates, the last one at the end
    [920, 940, 960, 980, 1000]
    >>> AveragingWindow(count=3, fraction=0.1, max_steps=None, budget_seconds=600.0).seconds_due  # + the end itself
    [580.0, 560.0]
    """

    count: int  # --average_checkpoints: at most this many are averaged; below 2, nothing is
    fraction: float  # --average_window
    max_steps: int | None  # --max_train_steps (or from epochs), None when only a time budget or early stopping ends it
    budget_seconds: float | None  # --max_train_minutes in seconds
    steps_due: set[int] = field(init=False)
    seconds_due: list[float] = field(init=False)

    def __post_init__(self):
        if not 0 < self.fraction <= 1:
            raise ValueError(f"average_window {self.fraction} is not allowed; use a fraction of the run in (0, 1].")
        plan = self.count >= 2
        span = self.fraction * (self.max_steps or 0)
        self.steps_due = {self.max_steps - round(i * span / self.count) for i in range(self.count)} if (
            plan and self.max_steps) else set()  # fmt: skip
        self.steps_due.discard(0)
        span = self.fraction * (self.budget_seconds or 0)
        self.seconds_due = [self.budget_seconds - i * span / self.count for i in range(1, self.count)] if (
            plan and self.budget_seconds) else []  # fmt: skip

    def save_due(self, step: int, seconds_before: float, seconds_now: float) -> bool:
        """Whether the update that just ended (at `step`, the run's training clock going from `seconds_before` to
        `seconds_now`, earlier invocations included) reaches one of the planned saves."""
        return step in self.steps_due or any(seconds_before < due <= seconds_now for due in self.seconds_due)

    def select(self, checkpoints: list[Path], end_step: int, end_seconds: float | None) -> list[Path]:
        """The checkpoints (oldest first, the run's end last) written in the window that ends at `end_step`: the last
        `fraction` of the updates, or, given `end_seconds` (the time budget, when it ended the run), the last
        `fraction` of that time by the training clock saved with each checkpoint; at most `count` of them, the
        newest."""
        if self.count < 2:
            return checkpoints[-1:]
        if end_seconds is None:
            inside = [p for p in checkpoints if step_of(p) >= end_step * (1 - self.fraction)]
        else:
            inside = [p for p in checkpoints if training_seconds(p) >= end_seconds * (1 - self.fraction)]
        return inside[-self.count :]


@dataclass
class Candidate:
    """A candidate for the final model: one checkpoint, or the checkpoints averaged into it."""

    name: str  # "last", "best", "average" or "ema"
    checkpoints: list[Path]
    score: float | None = None  # validation --metric_for_best; None until it is evaluated

    @property
    def step(self) -> int:
        return step_of(self.checkpoints[-1])

    @property
    def weights(self) -> list[Path]:
        """What to load (averaged, if several): the checkpoints, or the moving average saved with the last one."""
        return [self.checkpoints[-1] / EMA_WEIGHTS_FILE] if self.name == "ema" else self.checkpoints

    def describe(self) -> dict:
        return {"name": self.name, "step": self.step, "checkpoints": [p.name for p in self.checkpoints],
                "score": self.score}  # fmt: skip


def choose(candidates: list[Candidate], metric: str) -> Candidate:
    """The candidate with the best validation `metric`; on a tie the earlier (simpler) one."""
    judge = EarlyStopping(patience=None, metric=metric)
    winner = candidates[0]
    for candidate in candidates[1:]:
        if judge.better(candidate.score, than=winner.score):
            winner = candidate
    return winner


def save_state(
    checkpoint: Path, budget_seconds: float, stopper: EarlyStopping | None, evaluation_due: bool = False
) -> None:
    """Write `stopping_state.json` into a checkpoint folder being written: temporary name, then rename.
    `evaluation_due`: the evaluation of the checkpoint's step was stopped by a signal; a resume runs it first."""
    state = {"train_loop_seconds": budget_seconds, "early_stopping": stopper.state_dict() if stopper else None,
             "evaluation_due": evaluation_due}  # fmt: skip
    tmp = checkpoint / f".{STOPPING_STATE_FILE}.tmp"
    tmp.write_text(json.dumps(state, indent=2))
    os.replace(tmp, checkpoint / STOPPING_STATE_FILE)


def load_state(checkpoint: Path) -> dict:
    """The state saved with `checkpoint`; `CheckpointError` naming the file if it is missing or damaged (a resume
    restores everything or stops)."""
    path = Path(checkpoint) / STOPPING_STATE_FILE
    try:
        state = json.loads(path.read_text(encoding="utf-8"))
        float(state["train_loop_seconds"])
        if not isinstance(state["early_stopping"], dict | None):
            raise TypeError("early_stopping is not an object")
        state.setdefault("evaluation_due", False)  # absent: written before it existed
        if not isinstance(state["evaluation_due"], bool):
            raise TypeError("evaluation_due is not true or false")
    except FileNotFoundError:
        raise CheckpointError(f"{path} is missing: the checkpoint is incomplete; resume from another one") from None
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise CheckpointError(f"{path} is damaged ({error}); resume from another checkpoint") from error
    return state


def training_seconds(checkpoint: Path) -> float:
    """The run's training clock (earlier invocations included) when `checkpoint` was written."""
    return float(load_state(checkpoint)["train_loop_seconds"])


def keep_best(checkpoint: Path, output_dir: Path) -> Path:
    """Copy the new best checkpoint's weights and JSON records (the stopping state, a sharded index) to
    output_dir/best_checkpoint/step-N: what the final model's choice reads, not the optimizer state, which can be
    twice the weights. A complete copy first, then the previous best is replaced. Returns the copy."""
    best_root = output_dir / BEST_DIR
    target = best_root / checkpoint.name
    staging = best_root / f"{TMP_PREFIX}{checkpoint.name}"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    for file in [*weight_files(checkpoint), *sorted(checkpoint.glob("*.json"))]:
        shutil.copy2(file, staging / file.name)
    os.replace(staging, target)  # the new best is complete before the previous one goes (the newest step wins)
    for old in best_root.iterdir():
        if old != target and not old.name.startswith(TMP_PREFIX):
            shutil.rmtree(old)
    return target


def best_checkpoint(output_dir: Path) -> Path | None:
    best_root = output_dir / BEST_DIR
    if not best_root.is_dir():
        return None
    found = sorted(p for p in best_root.iterdir() if p.is_dir() and not p.name.startswith("."))
    return found[-1] if found else None


class StoppingRules:
    """The time budget, early stopping, validation record and averaging window of one run, as train.py's loop uses
    them (main process decides; the decisions are broadcast by the caller)."""

    def __init__(
        self,
        output_dir: Path,
        max_train_minutes: float | None,
        patience: int | None,
        metric: str,
        *,
        record: bool = False,
        window: AveragingWindow | None = None,
    ):
        """`record`: keep every validation score and a copy of the best checkpoint even without early stopping
        (the final model's choice needs them); `window`: the averaging window (None: the last checkpoint alone)."""
        self.output_dir = Path(output_dir)
        self.budget = TimeBudget(max_train_minutes)
        self.stopper = EarlyStopping(patience, metric) if (patience or record) else None
        self.window = window or AveragingWindow(count=1, fraction=1.0, max_steps=None, budget_seconds=None)
        self.evaluation_due = False  # a signal stopped the evaluation of the current step: run it before training on

    def restore(self, checkpoint: Path) -> str:
        """Continue the counts saved with `checkpoint`; returns what was restored, for the log."""
        state = load_state(checkpoint)
        self.budget.seconds_before = float(state["train_loop_seconds"])
        self.evaluation_due = state["evaluation_due"]
        if self.stopper is not None and state["early_stopping"] is not None:
            self.stopper.load_state_dict(state["early_stopping"])
        best = best_checkpoint(self.output_dir)
        if best is not None and (self.stopper is None or self.stopper.best_step != step_of(best)):
            shutil.rmtree(best)  # a best kept after the checkpoint resumed from: not part of this run's history
            best = None
        if best is None and self.stopper is not None and self.stopper.best_step is not None:
            # a kill between publishing the best checkpoint and copying it: copy it now, if it is still kept
            kept = Path(checkpoint).parent / CheckpointManager.dirname(self.stopper.best_step)
            if kept.is_dir():
                keep_best(kept, self.output_dir)
        return (
            f"{self.budget.seconds_before / 60:.1f} training minutes spent before"
            + ("; its evaluation, stopped by a signal, runs first" if self.evaluation_due else "")
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

    def save_due(self, step: int, loop_seconds_before: float, loop_seconds: float) -> bool:
        """Whether the averaging window plans a save at the end of this update (this invocation's loop clock went
        from `loop_seconds_before` to `loop_seconds`)."""
        before = self.budget.seconds_before
        return self.window.save_due(step, before + loop_seconds_before, before + loop_seconds)

    def write_state(self, checkpoint: Path, loop_seconds: float) -> None:
        """While a checkpoint is written (main process, before it is published): its stopping state."""
        save_state(checkpoint, self.budget.seconds_before + loop_seconds, self.stopper, self.evaluation_due)

    def saved(self, checkpoint: Path, step: int) -> None:
        """After the checkpoint of `step` is published (main process): the copy of a new best."""
        if self.stopper is not None and self.stopper.best_step == step:
            keep_best(checkpoint, self.output_dir)

    def candidates(self, kept: list[Path], finished_early: str | None) -> list[Candidate]:
        """The final model's candidates, simplest first: the last checkpoint, the best evaluated one (when it is not
        the last), the average of the window (when it holds two checkpoints or more) and the weights' moving average
        (when the last checkpoint holds one), each with the validation score recorded during training, if any.
        `kept`: the run's checkpoints, oldest first; `finished_early`: why the run ended before its last update
        (train_loop's answer)."""
        last = kept[-1]
        recorded = self.stopper.score_at if self.stopper is not None else lambda step: None
        found = [Candidate("last", [last], recorded(step_of(last)))]
        best = best_checkpoint(self.output_dir) if self.stopper is not None else None
        if best is not None and step_of(best) != step_of(last):
            found.append(Candidate("best", [best], self.stopper.best_value))
        if best is not None and self.stopper.should_stop:  # early stopping: the window ends at the best
            before = [p for p in kept if step_of(p) < step_of(best)]
            window = self.window.select([*before, best], step_of(best), None)
        else:
            # a run the budget ended: the window is the last part of the budget (an evaluation can overrun it)
            end_seconds = self.budget.seconds if finished_early == TIME_BUDGET_SPENT else None
            window = self.window.select(kept, step_of(last), end_seconds)
        if len(window) >= 2:
            found.append(Candidate("average", window))
        if (last / EMA_WEIGHTS_FILE).is_file():
            found.append(Candidate("ema", [last]))
        return found


class StopSignals:
    """Within its `with` block (the training loop), the first SIGINT (Ctrl-C) or SIGTERM is noted in `received`
    instead of ending the process, so that the loop can save a checkpoint at the end of the update under way and
    stop (`vaswani.errors.Interrupted`); a second Ctrl-C raises KeyboardInterrupt at once. The handlers before it
    come back when the block ends. Signals reach Python's main thread only: elsewhere nothing is installed."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self, on_first: Callable[[int], None]):
        self.on_first, self.received, self.previous = on_first, None, {}

    def __enter__(self) -> StopSignals:
        if threading.current_thread() is threading.main_thread():
            self.previous = {signum: signal.signal(signum, self._handle) for signum in self.SIGNALS}
        return self

    def __exit__(self, *exc) -> None:
        for signum, handler in self.previous.items():
            signal.signal(signum, handler)

    def _handle(self, signum: int, frame) -> None:
        if self.received is None:
            self.received = signum
            self.on_first(signum)
        elif signum == signal.SIGINT:  # Ctrl-C again: a person who will not wait
            raise KeyboardInterrupt
        # a SIGTERM after the first signal changes nothing: torchrun's agent sends one to its workers on Ctrl-C,
        # and a preempting system may repeat it before its grace period ends (then it kills)
