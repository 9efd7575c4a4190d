"""Scheduled DropHead (Zhou et al. 2020, "Scheduled DropHead", Section 3.2).

The drop rate follows a V shape over training: it falls linearly from `p_start` to 0 during the learning-rate
warmup, then rises linearly to `p_end` at the last step:

    p(t) = p_start * (1 - t / N_w)                  for t < N_w   (N_w = warmup steps)
    p(t) = p_end * (t - N_w) / (T - N_w)            for t >= N_w  (T = total steps)

The paper sets p_start = p_end. `DropHeadScheduler` applies it from a plain training loop (call `step()` after each
optimizer step, like a learning-rate scheduler); `DropHeadCallback` does the same inside a transformers `Trainer`.
"""

from transformers import TrainerCallback

DROPHEAD_KINDS = ("encoder", "decoder", "cross")


def drophead_rate(step: int, p_start: float, p_end: float, warmup_steps: int, total_steps: int) -> float:
    """The V-shaped DropHead rate p(t) at optimizer step `step` (0-based); steps past the end give `p_end`."""
    if step < warmup_steps:
        return p_start * (1.0 - step / warmup_steps)
    if total_steps == warmup_steps:
        return p_end
    return p_end * min(step - warmup_steps, total_steps - warmup_steps) / (total_steps - warmup_steps)


def _validate_schedule(p_start, p_end, warmup_steps, total_steps, kinds) -> tuple[str, ...]:
    for name, value in (("p_start", p_start), ("p_end", p_end)):
        if not (isinstance(value, (int, float)) and 0.0 <= value < 1.0):
            raise ValueError(f"DropHead schedule: {name}={value!r} is not allowed; use a probability in [0, 1).")
    if not isinstance(warmup_steps, int) or warmup_steps < 0:
        raise ValueError(f"DropHead schedule: warmup_steps={warmup_steps!r} is not allowed; use an integer >= 0.")
    if not isinstance(total_steps, int) or total_steps < max(warmup_steps, 1):
        raise ValueError(
            f"DropHead schedule: total_steps={total_steps!r} is not allowed; use an integer >= warmup_steps "
            f"({warmup_steps}) and >= 1."
        )
    kinds = tuple(kinds)
    unknown = [k for k in kinds if k not in DROPHEAD_KINDS]
    if unknown or not kinds:
        raise ValueError(f"DropHead schedule: kinds={list(kinds)} is not allowed; choose from {list(DROPHEAD_KINDS)}.")
    return kinds


class DropHeadScheduler:
    """Sets the scheduled DropHead rate on a Vaswani model.

    Args:
        model: a `VaswaniPreTrainedModel` (or anything with its `set_drophead` method).
        p_start, p_end: the rates at step 0 and at `total_steps`.
        warmup_steps: N_w, normally the learning-rate warmup.
        total_steps: T, the number of optimizer steps of the run.
        kinds: which attention layers to drive, any of "encoder" (encoder self-attention), "decoder" (decoder
            self-attention) and "cross" (encoder-decoder attention). Defaults to every kind the model has
            (`model.drophead_kinds`: all three for the encoder-decoder model, one for a decoder-only or encoder-only
            model).

    Usage::

        scheduler = DropHeadScheduler(model, 0.1, 0.1, warmup_steps=4000, total_steps=100_000)
        for batch in loader:
            loss = model(**batch).loss; loss.backward(); optimizer.step(); lr_scheduler.step()
            scheduler.step()
    """

    def __init__(self, model, p_start: float, p_end: float, warmup_steps: int, total_steps: int, kinds=None):
        kinds = model.drophead_kinds if kinds is None else kinds
        self.kinds = _validate_schedule(p_start, p_end, warmup_steps, total_steps, kinds)
        self.model = model
        self.p_start, self.p_end = p_start, p_end
        self.warmup_steps, self.total_steps = warmup_steps, total_steps
        self.last_step = 0
        self._apply()

    @property
    def rate(self) -> float:
        """The rate in use now."""
        return drophead_rate(self.last_step, self.p_start, self.p_end, self.warmup_steps, self.total_steps)

    def step(self, step: int | None = None) -> float:
        """Advance to the next step (or jump to `step`) and set its rate on the model. Returns the rate."""
        self.last_step = self.last_step + 1 if step is None else step
        return self._apply()

    def _apply(self) -> float:
        rate = self.rate
        self.model.set_drophead(**dict.fromkeys(self.kinds, rate))
        return rate

    def state_dict(self) -> dict:
        return {"last_step": self.last_step}

    def load_state_dict(self, state: dict) -> None:
        self.last_step = state["last_step"]
        self._apply()


class DropHeadCallback(TrainerCallback):
    """The DropHead schedule inside a transformers `Trainer` / `Seq2SeqTrainer`.

    `total_steps` defaults to the Trainer's `max_steps`; `warmup_steps` to its warmup (`args.get_warmup_steps`).
    """

    def __init__(
        self,
        p_start: float,
        p_end: float,
        warmup_steps: int | None = None,
        total_steps: int | None = None,
        kinds=None,
    ):
        self.p_start, self.p_end = p_start, p_end
        self.warmup_steps, self.total_steps = warmup_steps, total_steps
        self.kinds = kinds
        self.scheduler: DropHeadScheduler | None = None

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        total = self.total_steps if self.total_steps is not None else state.max_steps
        warmup = self.warmup_steps if self.warmup_steps is not None else args.get_warmup_steps(total)
        self.scheduler = DropHeadScheduler(model, self.p_start, self.p_end, warmup, total, kinds=self.kinds)
        self.scheduler.step(state.global_step)

    def on_step_end(self, args, state, control, **kwargs):
        if self.scheduler is not None:
            self.scheduler.step(state.global_step)


__all__ = ["DROPHEAD_KINDS", "DropHeadCallback", "DropHeadScheduler", "drophead_rate"]
