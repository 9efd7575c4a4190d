"""`vaswani convert`: `--from marian` turns a local MarianMTModel folder (OPUS-MT) into a vaswani model folder that
computes the same logits and translations, tokenizer included; `--from fairseq` does the same for a fairseq
Transformer checkpoint and its dictionaries (`vaswani.convert`)."""

from __future__ import annotations

import argparse
from pathlib import Path

from vaswani.errors import UsageError
from vaswani.model_folder import hide_transformers_progress_bars
from vaswani.options import add_option

CONVERT_FORMATS = ("marian", "fairseq")  # vaswani.convert.CONVERTERS, without importing torch for the parser
HELP = "convert a pretrained Marian (OPUS-MT) model or fairseq Transformer into a vaswani model folder"
DESCRIPTION = (
    "Convert a local MarianMTModel folder (an OPUS-MT model: config.json, model.safetensors or pytorch_model.bin, "
    "source.spm, target.spm, vocab.json) into a vaswani model folder with the same logits and translations, its "
    "tokenizer, generation config and a model card naming the source; or a fairseq Transformer checkpoint "
    "(--checkpoint) with the dict.LANG.txt files of --data_dir."
)


def add_arguments(convert: argparse.ArgumentParser) -> None:
    convert.add_argument(
        "--from", dest="source_format", required=True, choices=CONVERT_FORMATS, help="the source model's kind"
    )
    add_option(convert, "model", "convert", help="--from marian: the model folder (local; download a Hub model first)")
    convert.add_argument(
        "--checkpoint", type=Path, metavar="FILE", help="--from fairseq: the checkpoint (model.pt, checkpoint_best.pt)"
    )
    convert.add_argument(
        "--data_dir", type=Path, metavar="DIR", help="--from fairseq: the folder of its dict.LANG.txt dictionaries"
    )
    add_option(convert, "output_dir", "convert", required=True, help="the new (or empty) folder to write")


def run(args: argparse.Namespace) -> int:
    from vaswani.convert import CONVERTERS  # start-up: torch and transformers load only when it runs

    # --from marian reads a model folder; --from fairseq a checkpoint file and the folder of its dictionaries
    needed = ("model",) if args.source_format == "marian" else ("checkpoint", "data_dir")
    for name in ("model", "checkpoint", "data_dir"):
        given = getattr(args, name) is not None
        if given != (name in needed):
            raise UsageError(
                f"--from {args.source_format} {'needs' if name in needed else 'does not take'} --{name} (it takes "
                f"{' and '.join('--' + n for n in needed)})"
            )
    hide_transformers_progress_bars()
    output = CONVERTERS[args.source_format](*(getattr(args, name) for name in needed), args.output_dir)
    print(f"wrote the converted model to {output}; translate with: vaswani translate --model {output}")
    return 0
