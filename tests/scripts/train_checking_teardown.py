"""train.py that reports, at `Accelerator.end_training()`, how many DDP-wrapped models are still alive (one line
per rank on stderr: `teardown: rank R: DDP models alive at end_training: N`).

None may be: a DDP reducer that outlives the Python references to the gloo process group destroys the group itself,
joining gloo's worker threads while holding the GIL, and a process can hang at exit (`vaswani.training.loop.close`)."""

import gc
import sys

import accelerate
import torch

from vaswani.training import loop

end_training = accelerate.Accelerator.end_training


def checked_end_training(self):
    gc.collect()
    alive = sum(isinstance(o, torch.nn.parallel.DistributedDataParallel) for o in gc.get_objects())
    print(f"teardown: rank {self.process_index}: DDP models alive at end_training: {alive}", file=sys.stderr)
    return end_training(self)


accelerate.Accelerator.end_training = checked_end_training
sys.exit(loop.run(sys.argv[1:]))
