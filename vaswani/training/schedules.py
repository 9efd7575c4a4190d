"""Learning-rate schedules for train.py.

The paper's schedule (Section 5.3, Eq. 3), "noam" after the annotated Transformer:

    lrate = d_model^-0.5 * min(step^-0.5, step * warmup_steps^-1.5),   step = 1, 2, ...

It rises linearly for `warmup_steps` steps, then decays with the inverse square root of the step; the peak is
d_model^-0.5 * warmup_steps^-0.5 (6.99e-4 for d_model 512 and 4000 warmup steps). `factor` scales the whole curve
(the annotated Transformer's `factor`). The other schedules come from transformers' `get_scheduler`
("linear", "cosine", "inverse_sqrt", "constant_with_warmup", "constant") and take an explicit peak learning rate.

Schedules that know the budget (`BudgetSchedule`). "warmup_stable_decay" (Hägele et al. 2024, "Scaling Laws and
Compute-Optimal Training beyond Fixed Training Durations"; transformers' `get_wsd_schedule`), and "linear" and
"cosine" when a time budget (--max_train_minutes) bounds the run, follow the fraction of the budget spent instead of
an update count: the updates of --max_train_steps or the minutes of --max_train_minutes, whichever is further along
(train.py's `run_fraction`: the limit that ends the run first). The training loop hands the fraction to the schedule
after every update (`BudgetSchedule.reach`; decided on the main process and sent to the others, so every process
uses the same rate), and it is saved in every checkpoint, so a resumed run continues the same curve. With only a
step count the fraction is updates / max_steps, and the curves are transformers' own (tests/training/test_schedules.py):

    warmup_stable_decay: warmup   step < W:   m + (1 - m) * step / W                        (m: --min_lr_ratio)
                         stable   p < 1 - f:  1                                             (f: --decay_fraction)
                         decay    otherwise:  m + (1 - m) * g((p - (1 - f)) / f), then m once p reaches 1,
                         g(q) = 1 - sqrt(q) ("1-sqrt"), 1 - q ("linear"), (1 + cos(pi q)) / 2 ("cosine")
    linear:              step / W during the warmup, then (1 - p) / (1 - p_W)
    cosine:              step / W during the warmup, then (1 + cos(pi (p - p_W) / (1 - p_W))) / 2

where p is the fraction of the budget spent and p_W the fraction at the end of the warmup (W / max_steps with a step
count; measured, and saved with the schedule, under a time budget).
"""

from __future__ import annotations

import math

import torch
from torch.optim.lr_scheduler import LambdaLR, LRScheduler
from transformers import get_scheduler

LR_SCHEDULERS = ("noam", "inverse_sqrt", "linear", "cosine", "warmup_stable_decay", "constant_with_warmup", "constant")
SCHEDULES_NEEDING_TOTAL = ("linear", "cosine", "warmup_stable_decay")  # they end with the run: they need its length
DECAY_TYPES = ("1-sqrt", "linear", "cosine")  # --decay_type of warmup_stable_decay, as transformers spells them


def noam_learning_rate(step: int, d_model: int, warmup_steps: int, factor: float = 1.0) -> float:
    """Eq. (3) of the paper at optimizer step `step` (counted from 1)."""
    step = max(step, 1)
    return factor * d_model**-0.5 * min(step**-0.5, step * warmup_steps**-1.5)


def noam_peak_learning_rate(d_model: int, warmup_steps: int, factor: float = 1.0) -> float:
    """The largest learning rate of the paper's schedule, reached at step `warmup_steps`."""
    return noam_learning_rate(warmup_steps, d_model, warmup_steps, factor)


class BudgetSchedule(LRScheduler):
    """A schedule over the fraction of the run's budget spent (module docstring): `step()` after every update counts
    it (as any scheduler), `reach(fraction)` then says how much of the budget is spent; each sets the rate of the next
    update. The fraction, the warmup's end and the schedule's shape are part of `state_dict`; a checkpoint of another
    shape or budget is refused by `load_state_dict` (ValueError)."""

    def __init__(
        self,
        optimizer: torch.optim.Optimizer,
        name: str,
        *,
        warmup_steps: int,
        decay_fraction: float = 0.2,
        decay_type: str = "1-sqrt",
        min_lr_ratio: float = 0.0,
        budget: dict | None = None,
    ):
        if name not in ("linear", "cosine", "warmup_stable_decay"):
            raise ValueError(f"BudgetSchedule has no schedule {name!r}; use linear, cosine or warmup_stable_decay.")
        if decay_type not in DECAY_TYPES:
            raise ValueError(f"decay_type={decay_type!r} is not allowed; choose one of {list(DECAY_TYPES)}.")
        if not 0 < decay_fraction <= 1:
            raise ValueError(f"decay_fraction={decay_fraction} is not allowed; use a fraction of the run in (0, 1].")
        if not 0 <= min_lr_ratio < 1:
            raise ValueError(f"min_lr_ratio={min_lr_ratio} is not allowed; use a ratio of the peak in [0, 1).")
        self.name, self.warmup_steps, self.decay_type = name, warmup_steps, decay_type
        self.decay_fraction, self.min_lr_ratio = decay_fraction, min_lr_ratio
        self.budget = dict(budget or {})  # {"max_steps": N, "minutes": M}: what the fraction is a fraction of
        self.fraction = 0.0  # of the budget spent, as last reached
        self.warmup_end = 0.0 if warmup_steps == 0 else None  # the fraction when the warmup ended
        super().__init__(optimizer)

    def factor(self, step: int, fraction: float) -> float:
        """The rate of the update after `step` updates, `fraction` of the budget spent, as a multiple of the peak."""
        if step < self.warmup_steps:
            warmup = step / max(1, self.warmup_steps)
            floor = self.min_lr_ratio if self.name == "warmup_stable_decay" else 0.0
            return warmup * (1.0 - floor) + floor
        if self.name == "warmup_stable_decay":
            start = 1.0 - self.decay_fraction
            if fraction < start:
                return 1.0
            if fraction >= 1.0:
                return self.min_lr_ratio
            q = (fraction - start) / self.decay_fraction
            decayed = {"1-sqrt": 1.0 - math.sqrt(q), "linear": 1.0 - q, "cosine": 0.5 * (1.0 + math.cos(math.pi * q))}
            return max(0.0, decayed[self.decay_type] * (1.0 - self.min_lr_ratio) + self.min_lr_ratio)
        warmup_end = fraction if self.warmup_end is None else self.warmup_end
        if warmup_end >= 1.0:
            return 0.0
        q = min(max((fraction - warmup_end) / (1.0 - warmup_end), 0.0), 1.0)
        return max(0.0, 1.0 - q) if self.name == "linear" else max(0.0, 0.5 * (1.0 + math.cos(math.pi * q)))

    def get_lr(self) -> list[float]:
        return [base * self.factor(self.last_epoch, self.fraction) for base in self.base_lrs]

    def reach(self, fraction: float) -> None:
        """`fraction` of the budget is spent (never less than before, at most 1): the next update's rate follows."""
        self.fraction = max(self.fraction, min(float(fraction), 1.0))
        if self.warmup_end is None and self.last_epoch >= self.warmup_steps:
            self.warmup_end = self.fraction
        rates = [base * self.factor(self.last_epoch, self.fraction) for base in self.base_lrs]
        for group, rate in zip(self.optimizer.param_groups, rates, strict=True):
            group["lr"] = rate
        self._last_lr = rates

    def in_decay(self) -> bool:
        """Whether warmup_stable_decay has entered its decay (the fraction passed 1 - decay_fraction)."""
        return self.name == "warmup_stable_decay" and self.fraction >= 1.0 - self.decay_fraction

    SHAPE = ("name", "warmup_steps", "decay_fraction", "decay_type", "min_lr_ratio", "budget")

    def load_state_dict(self, state_dict: dict) -> None:
        for key in self.SHAPE:
            if state_dict.get(key) != getattr(self, key):
                raise ValueError(
                    f"the checkpoint's learning-rate schedule has {key}={state_dict.get(key)!r} but this run "
                    f"{getattr(self, key)!r}: the curve depends on it; resume with the original options"
                )
        super().load_state_dict(state_dict)
        for group, rate in zip(self.optimizer.param_groups, self._last_lr, strict=True):
            group["lr"] = rate  # the next update's rate, also where the optimizer's state was not restored with it


def build_lr_scheduler(
    name: str,
    optimizer: torch.optim.Optimizer,
    *,
    warmup_steps: int,
    total_steps: int | None,
    d_model: int,
    learning_rate: float | None = None,
    factor: float = 1.0,
    budget_minutes: float | None = None,
    decay_fraction: float = 0.2,
    decay_type: str = "1-sqrt",
    min_lr_ratio: float = 0.0,
) -> LRScheduler:
    """A scheduler to step once after every optimizer update.

    "noam": the paper's Eq. (3) (`factor` scales it; `learning_rate`, if given, sets its peak instead). Every other
    name needs `learning_rate`, the peak reached after the warmup; `SCHEDULES_NEEDING_TOTAL` need `total_steps` or
    `budget_minutes` (the time budget). "warmup_stable_decay", and "linear"/"cosine" with a time budget, are a
    `BudgetSchedule`, which the loop also tells the fraction of the budget spent. The optimizer's learning rates are
    overwritten.
    """
    if name not in LR_SCHEDULERS:
        raise ValueError(f"lr_scheduler={name!r} is not allowed; choose one of {list(LR_SCHEDULERS)}.")
    if warmup_steps < 0 or (name == "noam" and warmup_steps == 0):
        raise ValueError(
            f"warmup_steps={warmup_steps} is not allowed for lr_scheduler={name!r}; use a positive value."
        )
    if name == "noam":
        if learning_rate is not None:  # rescale the curve so that its peak is `learning_rate`
            factor = learning_rate / noam_peak_learning_rate(d_model, warmup_steps)
        for group in optimizer.param_groups:
            group["lr"] = group["initial_lr"] = 1.0
        # LambdaLR counts from 0 before the first update; the paper counts from 1.
        return LambdaLR(optimizer, lambda step: noam_learning_rate(step + 1, d_model, warmup_steps, factor))
    if learning_rate is None or learning_rate <= 0:
        raise ValueError(f"lr_scheduler={name!r} needs a positive --learning_rate (its peak), got {learning_rate}.")
    if total_steps is None and budget_minutes is None and name in SCHEDULES_NEEDING_TOTAL:
        raise ValueError(f"lr_scheduler={name!r} needs the run's length: a number of updates or a time budget.")
    for group in optimizer.param_groups:
        group["lr"] = group["initial_lr"] = learning_rate
    if name == "warmup_stable_decay" or (name in SCHEDULES_NEEDING_TOTAL and budget_minutes is not None):
        return BudgetSchedule(
            optimizer, name, warmup_steps=warmup_steps, decay_fraction=decay_fraction, decay_type=decay_type,
            min_lr_ratio=min_lr_ratio, budget={"max_steps": total_steps, "minutes": budget_minutes},
        )  # fmt: skip
    return get_scheduler(name, optimizer, num_warmup_steps=warmup_steps, num_training_steps=total_steps)


__all__ = [
    "DECAY_TYPES",
    "LR_SCHEDULERS",
    "SCHEDULES_NEEDING_TOTAL",
    "BudgetSchedule",
    "build_lr_scheduler",
    "noam_learning_rate",
    "noam_peak_learning_rate",
]
