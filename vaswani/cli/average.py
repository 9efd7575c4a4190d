"""`vaswani average`: average the last checkpoints of a run (or given checkpoints) into a complete model folder
(Section 6.1 of the paper; `vaswani.export.average`)."""

from __future__ import annotations

import argparse
from pathlib import Path

from vaswani.errors import UsageError
from vaswani.model_folder import hide_transformers_progress_bars
from vaswani.options import add_option, positive_int

HELP = "average the last checkpoints of a run into a model folder (paper: 5 for base, 20 for big)"
DESCRIPTION = (
    "Average checkpoints into a complete save_pretrained model folder (fairseq semantics; Section 6.1 of the paper)."
)


def add_arguments(average: argparse.ArgumentParser) -> None:
    """The options of `vaswani average` (checkpoint averaging)."""
    source = average.add_mutually_exclusive_group(required=True)
    source.add_argument("--run_dir", type=Path, metavar="DIR", help="a run's final model folder, with checkpoints/")
    source.add_argument(
        "--checkpoints", type=Path, nargs="+", metavar="CKPT", help="checkpoint folders or .safetensors files"
    )
    average.add_argument(
        "--last", type=positive_int, metavar="N", help="with --run_dir: average the last N checkpoints (paper: 5, 20)"
    )
    add_option(average, "model", "average", help="with --checkpoints: the model folder (config, tokenizer files)")
    add_option(average, "output_dir", "average", required=True, help="where to write the model")
    add_option(average, "overwrite_output_dir", "average", help="write into a non-empty --output_dir (other than "
               "--run_dir): its model files are replaced, other files are kept")  # fmt: skip
    add_option(average, "trust_remote_code", "average")


def run(args: argparse.Namespace) -> int:
    """Write the averaged model folder and say where."""
    from vaswani.export.average import average_run, average_to_folder  # start-up: torch loads only when it runs

    if args.run_dir is not None and (args.last is None or args.model is not None):
        raise UsageError("--run_dir needs --last N (and takes no --model: the run folder is the model)")
    if args.checkpoints is not None and (args.model is None or args.last is not None):
        raise UsageError("--checkpoints needs --model DIR (and takes no --last)")
    options = {"overwrite": args.overwrite_output_dir, "trust_remote_code": args.trust_remote_code}
    hide_transformers_progress_bars()
    if args.run_dir is not None:
        output = average_run(args.run_dir, args.last, args.output_dir, **options)
    else:
        output = average_to_folder(args.checkpoints, args.model, args.output_dir, **options)
    print(f"wrote the averaged model to {output}")
    return 0
