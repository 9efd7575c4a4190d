"""Several processes (`accelerate launch`, `torchrun`): the Accelerator, created once with the run's precision, and
the helpers that keep the processes in step: `together` (every rank learns when one of them fails, so none waits
forever), `main_process_first` (the main process prepares, the others wait and read), and the main process's
decisions shared with the others.
"""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import Callable
from pathlib import Path

import torch

from vaswani.constants import (
    LOGS_DIR,
)
from vaswani.devices import resolve_mixed_precision, training_device_type
from vaswani.errors import (
    ReportedElsewhere,
    UsageError,
)


def create_accelerator(args: argparse.Namespace):
    from accelerate import Accelerator
    from accelerate.utils import DistributedDataParallelKwargs, ProjectConfiguration

    trackers = args.report_to
    if trackers == "auto":
        try:
            import tensorboard  # noqa: F401

            trackers = "tensorboard"
        except ImportError:
            trackers = None
    elif trackers == "none":
        trackers = None
    # find_unused_parameters is set once the model is known (LayerDrop needs it); DDP reads it in prepare().
    ddp_kwargs = DistributedDataParallelKwargs(find_unused_parameters=False)
    try:
        mixed_precision, why = resolve_mixed_precision(args.mixed_precision, training_device_type())
    except ValueError as exc:
        raise UsageError(str(exc)) from exc
    accelerator = Accelerator(
        gradient_accumulation_steps=args.gradient_accumulation_steps,
        mixed_precision=mixed_precision,
        log_with=trackers,
        project_config=ProjectConfiguration(
            project_dir=args.output_dir, logging_dir=str(Path(args.output_dir) / LOGS_DIR)
        ),
        kwargs_handlers=[ddp_kwargs],
    )
    return accelerator, ddp_kwargs, why


@contextlib.contextmanager
def together(accelerator):
    """A block every process runs at the same time, each its own part of it (`if accelerator.is_main_process: ...`
    is a block the others wait for), where a failure on one process stops them all together: the process that
    failed raises its error (`error: ...`, exit 2, for a user error) and the others raise `ReportedElsewhere` (exit 2,
    nothing printed), instead of waiting at a barrier until gloo reports a lost peer with a traceback. Where the block
    ends, every process learns the others' outcome (an all_gather of one flag, which is also a barrier)."""
    if accelerator.num_processes == 1:
        yield
        return
    try:
        yield
    except Exception:
        _stop_together(accelerator, failed=True)  # tell the others, then raise this process's own error
        raise
    _stop_together(accelerator, failed=False)


@contextlib.contextmanager
def main_process_first(accelerator):
    """`accelerator.main_process_first()` (the main process runs the block first, then the others, which may reuse
    what it made), where a failure on one process stops them all together, as in `together`."""
    if not accelerator.is_main_process:
        with together(accelerator):  # wait for the main process's block
            pass
    with together(accelerator):
        yield
    if accelerator.is_main_process:
        with together(accelerator):  # wait for the others' blocks
            pass


def _stop_together(accelerator, failed: bool) -> None:
    """One collective point: raise `ReportedElsewhere` if another process failed (each process's own failure is
    raised by its caller)."""
    from accelerate.utils import gather_object

    others = gather_object([failed])
    if not failed and any(others):
        raise ReportedElsewhere(f"process {others.index(True)} of the run failed")


def from_main_process(accelerator, compute: Callable[[], object]) -> object:
    """`compute()` on the main process, its value sent to every process."""
    if accelerator.num_processes == 1:
        return compute()
    from accelerate.utils import broadcast_object_list

    return broadcast_object_list([compute() if accelerator.is_main_process else None])[0]


def main_process_decides(accelerator, *flags: bool) -> tuple[bool, ...]:
    """The main process's time-based decisions, for every process: all must save (or stop) at the same step."""
    if accelerator.num_processes == 1:
        return flags
    from accelerate.utils import broadcast

    decided = broadcast(torch.tensor([int(f) for f in flags], device=accelerator.device))
    return tuple(bool(v) for v in decided.tolist())


def main_process_value(accelerator, value: float) -> float:
    """The main process's `value` (a float64), for every process: e.g. the fraction of the time budget spent, which
    each process's own clock would measure a little differently."""
    if accelerator.num_processes == 1:
        return value
    from accelerate.utils import broadcast

    return broadcast(torch.tensor([value], dtype=torch.float64, device=accelerator.device)).item()
