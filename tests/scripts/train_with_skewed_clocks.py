"""train.py on which each rank's training-loop clock runs at its own speed (rank R's at 1 + 4 R times the real one),
and each rank reports, when the run finishes, its learning rate and checksums of its weights and of their moving
average (one line per rank on stderr: `ranks: rank R: lr ... weights ... ema ... step N end`).

A time budget's fraction measured by each rank on its own clock would give the ranks different learning rates and,
after a few updates, different weights; decided on the main process and sent to the others, it gives them the same."""

import os
import sys
import time
import types

from vaswani.training import loop

speed = 1 + 4 * int(os.environ.get("RANK", "0"))
start = time.monotonic()
clock = types.SimpleNamespace(**{name: getattr(time, name) for name in dir(time) if not name.startswith("_")})
clock.monotonic = lambda: start + speed * (time.monotonic() - start)
loop.time = clock
finish = loop.finish


def reporting_finish(run, finished_early):
    training = run.training
    weights = sum(p.detach().double().sum().item() for p in training.model.parameters())
    ema = sum(a.double().sum().item() for a in training.ema.averaged) if training.ema is not None else None
    print(f"\nranks: rank {run.accelerator.process_index}: lr {training.lr_scheduler.get_last_lr()[0]!r} weights "
          f"{weights!r} ema {ema!r} step {training.progress.step} end", file=sys.stderr, flush=True)  # fmt: skip
    return finish(run, finished_early)


loop.finish = reporting_finish
sys.exit(loop.run(sys.argv[1:]))
