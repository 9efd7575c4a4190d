"""`vaswani train` (and `python train.py`, `accelerate launch train.py`): train a model with the paper's recipe.

Its options come from the command line and from a YAML file (`--config`), so it parses its own command line
(`vaswani.training.options`) instead of the `vaswani` parser's; `vaswani --help` lists it with `HELP`.
"""

from __future__ import annotations

HELP = "train a model with the paper's recipe (the same as train.py)"


def run(argv: list[str], prog: str) -> int:
    """Train as `argv` says (without the command's name); the exit status, as `vaswani.training.loop.run` gives it."""
    from vaswani.training.loop import run as run_training  # start-up: `vaswani --help` must not load torch

    try:
        return run_training(argv, prog=prog)
    except SystemExit as exit_:  # --help (status 0) or argparse's own usage error (status 2)
        return int(exit_.code or 0)
