"""Learning-rate schedules for train.py.

The paper's schedule (Section 5.3, Eq. 3), "noam" after the annotated Transformer:

    lrate = d_model^-0.5 * min(step^-0.5, step * warmup_steps^-1.5),   step = 1, 2, ...

It rises linearly for `warmup_steps` steps, then decays with the inverse square root of the step; the peak is
d_model^-0.5 * warmup_steps^-0.5 (6.99e-4 for d_model 512 and 4000 warmup steps). `factor` scales the whole curve
(the annotated Transformer's `factor`). The other schedules come from transformers' `get_scheduler`
("linear", "cosine", "inverse_sqrt", "constant_with_warmup", "constant") and take an explicit peak learning rate.
"""

from __future__ import annotations

import torch
from torch.optim.lr_scheduler import LambdaLR
from transformers import get_scheduler

LR_SCHEDULERS = ("noam", "inverse_sqrt", "linear", "cosine", "constant_with_warmup", "constant")
SCHEDULES_NEEDING_TOTAL = ("linear", "cosine")  # they decay to 0 at the run's last update, so they need its number


def noam_learning_rate(step: int, d_model: int, warmup_steps: int, factor: float = 1.0) -> float:
    """Eq. (3) of the paper at optimizer step `step` (counted from 1)."""
    step = max(step, 1)
    return factor * d_model**-0.5 * min(step**-0.5, step * warmup_steps**-1.5)


def noam_peak_learning_rate(d_model: int, warmup_steps: int, factor: float = 1.0) -> float:
    """The largest learning rate of the paper's schedule, reached at step `warmup_steps`."""
    return noam_learning_rate(warmup_steps, d_model, warmup_steps, factor)


def build_lr_scheduler(
    name: str,
    optimizer: torch.optim.Optimizer,
    *,
    warmup_steps: int,
    total_steps: int | None,
    d_model: int,
    learning_rate: float | None = None,
    factor: float = 1.0,
) -> LambdaLR:
    """A scheduler to step once after every optimizer update.

    "noam": the paper's Eq. (3) (`factor` scales it; `learning_rate`, if given, sets its peak instead). Every other
    name needs `learning_rate`, the peak reached after the warmup; `SCHEDULES_NEEDING_TOTAL` need `total_steps`
    (None: a run whose length is not known in advance). The optimizer's learning rates are overwritten.
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
    if total_steps is None and name in SCHEDULES_NEEDING_TOTAL:
        raise ValueError(f"lr_scheduler={name!r} needs the run's number of updates (total_steps).")
    for group in optimizer.param_groups:
        group["lr"] = group["initial_lr"] = learning_rate
    return get_scheduler(name, optimizer, num_warmup_steps=warmup_steps, num_training_steps=total_steps)


__all__ = [
    "LR_SCHEDULERS",
    "SCHEDULES_NEEDING_TOTAL",
    "build_lr_scheduler",
    "noam_learning_rate",
    "noam_peak_learning_rate",
]
