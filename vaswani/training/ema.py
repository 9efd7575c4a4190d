"""An exponential moving average of the weights along the run (`--ema_decay`; Marian's `--exponential-smoothing`,
used by OPUS-MT), a candidate `ema` for the final model.

After every update t (counted from 0), with the model's weights W_t:

    EMA_t = W_t                                   for t = 0
    EMA_t = d_t * EMA_{t-1} + (1 - d_t) * W_t,    d_t = min(D, (1 + t) / (10 + t))

The warm-up of the decay, (1 + t) / (10 + t) (TensorFlow's ExponentialMovingAverage with num_updates), keeps the
first updates, far from any good model, from weighing on the average for long. D weighs an update that is k updates
old by D^k: the average's horizon (its mean age, D / (1 - D)) is ~ 1 / (1 - D) updates.

The default that fits the budget (`--ema_decay auto`): a horizon of `EMA_HORIZON` (10%) of the run's updates,
D = 1 - 1 / (0.1 * N). The warm-up (1 + t) / (10 + t) = 1 - 9 / (10 + t) is itself a horizon of (10 + t) / 9 updates,
~11% of the updates so far: the average follows it over the first ~90% of the run (while it is below D), and D holds
the horizon at 10% of the run over the last ~10%. Marian's 0.9999 (a horizon of 10,000 updates, made for runs of
100k updates or more) never binds below ~90,000 updates, where the average is the warm-up's alone, its horizon
growing with the run. N is the run's number of updates: with
--max_train_steps N itself; under a time budget it is not known in advance, so it is estimated after every update
from the fraction of the budget spent (N ~ t / fraction: the updates so far over the part of the budget they took,
evaluations included), the same fraction the learning-rate schedule follows; with early stopping alone (no budget)
the horizon is 10% of the updates so far. The averaged weights are float32 (whatever the training's precision),
saved in every checkpoint next to the model (`ema.safetensors`, tied weights once, like the model's file) with the
update count in the training state, so that a resumed run continues the same average, bit for bit.

torch.optim.swa_utils.AveragedModel with get_ema_multi_avg_fn was considered: it deep-copies the whole model, takes
a fixed decay (the warm-up and a decay that follows the budget would need a function over the training's progress
anyway), and walks and regroups the parameters on every update; here the parameters are listed once and each update
is one `torch._foreach_lerp_` over them, the kernel get_ema_multi_avg_fn itself uses.
"""

from __future__ import annotations

import math
from pathlib import Path

import torch

from vaswani.errors import CheckpointError

EMA_HORIZON = 0.1  # --ema_decay auto: the average's horizon 1 / (1 - D), as a fraction of the run's updates
EMA_WEIGHTS_FILE = "ema.safetensors"  # in each checkpoint folder: the averaged weights (a model state dict)


def parse_ema_decay(value: str | float | None) -> str | float | None:
    """--ema_decay: `auto` (the budget's default), a decay D in (0, 1), or `none`/0 (no average)."""
    if value is None or str(value).lower() in ("none", "0", "0.0"):
        return None
    if str(value).lower() == "auto":
        return "auto"
    try:
        decay = float(value)
    except ValueError:
        raise ValueError(f"--ema_decay {value!r} is not allowed; use auto, a decay in (0, 1) or none") from None
    if not 0 < decay < 1 or math.isnan(decay):
        raise ValueError(f"--ema_decay {value!r} is not allowed; use auto, a decay in (0, 1) or none")
    return decay


def budget_decay(updates: int, fraction: float, horizon: float = EMA_HORIZON) -> float:
    """The decay of `--ema_decay auto` after `updates` updates with `fraction` of the run's budget spent (0: no
    budget known): a horizon 1 / (1 - D) of `horizon` x the run's estimated number of updates, updates / fraction."""
    run_updates = updates / fraction if fraction > 0 else updates
    return max(0.0, 1.0 - 1.0 / (horizon * run_updates)) if run_updates > 0 else 0.0


class WeightEMA:
    """The moving average of `model`'s parameters (module docstring). `update(fraction)` after every optimizer update;
    `state_dict()` holds the averaged weights, with the model's buffers, under the model's state-dict names (tied
    weights once), for `save`, `load` and for loading into the model as the final model."""

    def __init__(self, model: torch.nn.Module, decay: str | float):
        self.model, self.decay = model, decay
        named = list(model.named_parameters())  # tied parameters once
        self.names = [name for name, _ in named]
        self.params = [p for _, p in named]
        self.averaged = [p.detach().to(torch.float32, copy=True) for p in self.params]
        self.updates = 0  # the updates averaged so far (t + 1 after update t)

    def current_decay(self, fraction: float) -> float:
        """d_t for the next update: min(D, (1 + t) / (10 + t)), D from the budget with `auto`."""
        t = self.updates
        peak = budget_decay(t + 1, fraction) if self.decay == "auto" else self.decay
        return min(peak, (1 + t) / (10 + t))

    @torch.no_grad()
    def update(self, fraction: float = 0.0) -> None:
        """Average in the model's weights after an update (`fraction`: of the run's budget spent, for `auto`)."""
        weights = [p.detach() if p.dtype == torch.float32 else p.detach().float() for p in self.params]
        if self.updates == 0:
            torch._foreach_copy_(self.averaged, weights)
        else:
            torch._foreach_lerp_(self.averaged, weights, 1.0 - self.current_decay(fraction))
        self.updates += 1

    def state_dict(self) -> dict[str, torch.Tensor]:
        """The averaged weights as the model's state dict: parameters averaged, buffers as they are, tied once."""
        averaged = dict(zip(self.names, self.averaged, strict=True))
        tied = {name for name, _ in self.model.named_parameters(remove_duplicate=False)} - set(self.names)
        return {
            name: averaged.get(name, tensor).detach().contiguous().cpu()
            for name, tensor in self.model.state_dict().items()
            if name not in tied
        }

    def save(self, folder: Path) -> None:
        from safetensors.torch import save_file

        save_file(self.state_dict(), str(Path(folder) / EMA_WEIGHTS_FILE), metadata={"format": "pt"})

    def load(self, folder: Path, updates: int) -> None:
        """Restore the average saved in the checkpoint `folder` after `updates` updates; `CheckpointError` when the
        file is missing or does not fit the model."""
        from safetensors import SafetensorError
        from safetensors.torch import load_file

        path = Path(folder) / EMA_WEIGHTS_FILE
        try:
            saved = load_file(str(path), device="cpu")
        except (SafetensorError, OSError) as error:
            raise CheckpointError(f"cannot read the weights' moving average {path}: {error}") from None
        missing = [name for name in self.names if name not in saved]
        wrong = [name for name, a in zip(self.names, self.averaged, strict=True)
                 if name in saved and saved[name].shape != a.shape]  # fmt: skip
        if missing or wrong:
            raise CheckpointError(f"{path} does not fit the model (missing {missing[:3]}, other shape {wrong[:3]}).")
        for name, averaged in zip(self.names, self.averaged, strict=True):
            averaged.copy_(saved[name])
        self.updates = int(updates)


__all__ = ["EMA_HORIZON", "EMA_WEIGHTS_FILE", "WeightEMA", "budget_decay", "parse_ema_decay"]
