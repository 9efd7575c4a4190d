"""What several commands share: --model, --trust_remote_code, --output_dir/--overwrite, the check of an --output file,
argparse types."""

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


def add_trust_remote_code(parser: argparse.ArgumentParser) -> None:
    """--trust_remote_code: off by default, so a model folder's own Python code never runs (and transformers never
    asks "[y/N]" on stdin, which `translate` reads sentences from)."""
    parser.add_argument(
        "--trust_remote_code", action="store_true",
        help="run the Python code of a model folder that is not a Vaswani model (only for folders you trust)",
    )  # fmt: skip


def add_output_folder_arguments(parser: argparse.ArgumentParser, what: str, exempt: str = "") -> None:
    """`--output_dir OUT` (required) and `--overwrite`, for the commands that write a model folder: the pair that
    `check_output_folder(args.output_dir, replace=args.overwrite)` checks. `exempt` names a folder that may be
    written without --overwrite."""
    parser.add_argument("--output_dir", required=True, type=Path, metavar="OUT", help=f"where to write {what}")
    parser.add_argument(
        "--overwrite", action="store_true",
        help=f"write into a non-empty --output_dir{exempt}: its model files are replaced, other files are kept",
    )  # fmt: skip
