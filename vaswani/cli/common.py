"""What several commands share beyond their options (those are in `vaswani.options`, the registry): the check of an
--output file."""

from __future__ import annotations

import os
from pathlib import Path

from vaswani.errors import UsageError


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
