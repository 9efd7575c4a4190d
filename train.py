#!/usr/bin/env python
"""Train the Transformer with the paper's recipe: the script form of `vaswani train` (the same options and code,
in `vaswani/training/`), for `accelerate launch`:

    python train.py --config configs/demo.yaml
    accelerate launch --num_processes 2 train.py --config configs/small-data.yaml ...

`python train.py --help` lists every option.
"""

import sys

from vaswani.training.loop import run

if __name__ == "__main__":
    sys.exit(run())
