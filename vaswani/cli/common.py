"""What several commands share: the --model argument, the check of an --output file, argparse types."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from vaswani.errors import UsageError


def positive_int(text: str) -> int:
    """argparse type for counts: a whole number, at least 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def add_model_argument(command: argparse.ArgumentParser, help: str = "the model folder") -> None:
    command.add_argument("--model", required=True, type=Path, metavar="DIR", help=help)


def check_output_file(path: Path | None, inputs: list[Path | None], model: Path | None = None) -> None:
    """An output file must go into an existing folder and must not be one of the inputs (it would be emptied) nor a
    file of the `model` folder (when given: translate; a card is meant to go into its folder)."""
    if path is None:
        return
    if not path.parent.is_dir():
        raise UsageError(f"cannot write {path}: no such folder {path.parent}")
    if path.is_dir():
        raise UsageError(f"cannot write {path}: it is a folder; give a file name")
    for source in inputs:
        if source is not None and source.exists() and path.exists() and os.path.samefile(source, path):
            raise UsageError(
                f"--output {path} is the input file {source}: writing it would destroy the input; give another file"
            )
    if model is not None and path.exists() and model.is_dir() and path.resolve().is_relative_to(model.resolve()):
        raise UsageError(f"--output {path} is a file of the model folder {model}: writing it would destroy the model; "
                         "give another file")  # fmt: skip
