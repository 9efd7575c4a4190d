"""`vaswani train` (and `python train.py`, `accelerate launch train.py`): train a model with the paper's recipe.

Its options (`vaswani.training.options`) come from the command line and from a YAML file (`--config`, read by the
registry's `ConfigArgumentParser`, which every command's parser is); `run` checks them together and trains.
"""

from __future__ import annotations

import argparse

from vaswani.options import DefaultsHelpFormatter

HELP = "train a model with the paper's recipe (the same as train.py)"
DESCRIPTION = "Train the Transformer of 'Attention Is All You Need' with the paper's recipe."
LAZY = True  # its options need the model's and the tokenizer's imports: `vaswani` adds them only when it runs
FORMATTER_CLASS = DefaultsHelpFormatter  # --help shows every default, as train.py's does


def add_arguments(train: argparse.ArgumentParser) -> None:
    from vaswani.training.options import add_arguments as add_training_arguments  # start-up: loads torch

    add_training_arguments(train)


def run(args: argparse.Namespace) -> int:
    """Train as `args` say; 0, or 1 when only the final upload to the Hub failed (the model is saved)."""
    from vaswani.training.loop import train  # start-up: `vaswani --help` must not load torch
    from vaswani.training.options import finish_args

    options = {key: value for key, value in vars(args).items() if key not in ("command", "run")}  # the parser's own
    return 1 if train(finish_args(argparse.Namespace(**options))).get("push_error") else 0
