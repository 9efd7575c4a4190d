"""Several processes (`accelerate launch`, `torchrun`): the Accelerator, created once with the run's precision, and
the helpers that keep the processes in step: `together` (every rank learns when one of them fails, so none waits
forever), `main_process_first` (the main process prepares, the others wait and read), and the main process's
decisions shared with the others.

Every launch path forms one process group or stops before any work: a launcher that starts N processes (torchrun,
`accelerate launch --multi_gpu`, mpirun: WORLD_SIZE or MPI's size > 1) on a machine without an accelerator device
gets a gloo group on CPU, as `ACCELERATE_USE_CPU=1` would give (Accelerate alone would start N independent
one-process runs there, all writing into one --output_dir); if the group still does not form, rank 0 stops with one
`error:` naming the fix and the other ranks stop silently.
"""

from __future__ import annotations

import argparse
import contextlib
import os
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

# The variables a launcher sets for each process it starts, as Accelerate reads them: torchrun / accelerate launch,
# then the MPI flavours (Intel MPI / MPICH, Open MPI, MVAPICH).
LAUNCHER_WORLD_SIZE = ("WORLD_SIZE", "PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "MV2_COMM_WORLD_SIZE")
LAUNCHER_RANK = ("RANK", "PMI_RANK", "OMPI_COMM_WORLD_RANK", "MV2_COMM_WORLD_RANK")


def launched_processes() -> tuple[int, int]:
    """(how many processes the launcher started, this one's rank among them): (1, 0) without a launcher."""
    world = next((int(os.environ[name]) for name in LAUNCHER_WORLD_SIZE if os.environ.get(name)), 1)
    rank = next((int(os.environ[name]) for name in LAUNCHER_RANK if os.environ.get(name)), 0)
    return world, rank


def needs_cpu_group() -> bool:
    """Whether several processes were launched on a machine with no accelerator device (GPU, XPU, ...): then the
    group is a gloo group on CPU, which Accelerate forms only when told to (`cpu=True`, ACCELERATE_USE_CPU=1)."""
    world, _ = launched_processes()
    return world > 1 and not torch.cuda.is_available() and not torch.accelerator.is_available()


def check_process_group(accelerator) -> None:
    """Stop before any work when the processes a launcher started did not form one group (each would train alone,
    all into one output folder): `error:` on rank 0 (exit 2), silently on the others."""
    world, rank = launched_processes()
    if world == 1 or world == accelerator.num_processes:
        return
    if rank != 0:
        raise ReportedElsewhere(f"process {rank} of {world} is not in a process group; rank 0 says why")
    raise UsageError(
        f"the launcher started {world} processes but they did not form one process group "
        f"(Accelerate sees {accelerator.num_processes} on {accelerator.device.type}): each would train alone into "
        "the same --output_dir. To train on CPU, set ACCELERATE_USE_CPU=1 (e.g. `ACCELERATE_USE_CPU=1 torchrun "
        "--nproc_per_node N train.py ...`); on GPUs, check that every process sees a device (CUDA_VISIBLE_DEVICES) "
        "and that its distributed backend is installed; or run one process (`vaswani train ...`)."
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
        cpu=needs_cpu_group(),  # several processes, no accelerator device: a gloo group on CPU
        gradient_accumulation_steps=args.gradient_accumulation_steps,
        mixed_precision=mixed_precision,
        log_with=trackers,
        project_config=ProjectConfiguration(
            project_dir=args.output_dir, logging_dir=str(Path(args.output_dir) / LOGS_DIR)
        ),
        kwargs_handlers=[ddp_kwargs],
    )
    check_process_group(accelerator)
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
def main_process_first(accelerator, local: bool = False):
    """`accelerator.main_process_first()` (the main process runs the block first, then the others, which may reuse
    what it made), where a failure on one process stops them all together, as in `together`. With `local`, the main
    process of each node goes first (`local_main_process_first`): for what each node keeps on its own disk, such as
    the data caches, built once per node (a cache on a filesystem that the nodes share is built by each node's main
    process at the same time, each writing under a temporary name, so the result is the same)."""
    first = accelerator.is_local_main_process if local else accelerator.is_main_process
    if not first:
        with together(accelerator):  # wait for the main process's block
            pass
    with together(accelerator):
        yield
    if first:
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
