"""`vaswani prune`: keep some layers of a model (trained with LayerDrop, Fan et al. 2019, or a teacher cut to a
student's shape) and/or the first tokens of its BPE vocabulary, and write an ordinary smaller model folder
(`vaswani.export.prune`)."""

from __future__ import annotations

import argparse

from vaswani.model_folder import hide_transformers_progress_bars
from vaswani.options import add_option

HELP = "keep some layers (and/or the first tokens of the vocabulary) of a model (a smaller model folder)"
DESCRIPTION = (
    "Prune a model trained with LayerDrop (Fan et al. 2019), or a teacher to a student's shape (shrink and fine-tune: "
    "then train it with `vaswani train --model OUT --tokenizer OUT`, or as `vaswani distill`'s student), to the given "
    "layers and/or the first tokens of its BPE vocabulary, and save it as an ordinary smaller model, with its "
    "tokenizer and a model card that shows the pruning."
)


def _layer_list(text: str) -> list[int]:
    try:
        return [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected layer indices like 0,2,4, got {text!r}") from None


def _drop_rate(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a rate like 0.5, got {text!r}") from None
    if not 0.0 < value < 1.0:
        raise argparse.ArgumentTypeError(f"the LayerDrop rate must be in (0, 1), got {value}")
    return value


def _stacks(text: str) -> list[str]:
    stacks = [part.strip() for part in text.split(",") if part.strip()]
    if not stacks or set(stacks) - {"encoder", "decoder"}:
        raise argparse.ArgumentTypeError(f"expected encoder, decoder or encoder,decoder, got {text!r}")
    return stacks


def add_arguments(prune: argparse.ArgumentParser) -> None:
    add_option(prune, "model", "prune", required=True, help="the full model folder")
    add_option(prune, "output_dir", "prune", required=True, help="where to write the pruned model")
    add_option(
        prune,
        "overwrite_output_dir",
        "prune",
        help="write into a non-empty --output_dir: its model files are replaced, other files are kept",
    )
    add_option(prune, "trust_remote_code", "prune")
    prune.add_argument("--encoder_layers_to_keep", type=_layer_list, metavar="I,J,...", help="e.g. 0,2,4")
    prune.add_argument("--decoder_layers_to_keep", type=_layer_list, metavar="I,J,...", help="e.g. 0,2,4")
    prune.add_argument(
        "--every_other", type=_drop_rate, metavar="P",
        help="the paper's 'every other' strategy for LayerDrop rate P: drop depth d where d = 0 mod floor(1/P)",
    )  # fmt: skip
    prune.add_argument(
        "--stacks", type=_stacks, metavar="STACKS", help="with --every_other: encoder,decoder (default)"
    )
    add_option(
        prune, "vocab_size", "prune", metavar="N",
        help="keep the first N tokens of the BPE vocabulary (the special and byte tokens, the alphabet and the earliest "
        "merges, as a tokenizer trained with vocab_size N would have them) and their embeddings: a text becomes more, "
        "shorter tokens and the output layer shrinks; train the result again before use (a multiple of 8 keeps a GPU's "
        "kernels aligned; a trained tokenizer's filler tokens are dropped)",
    )  # fmt: skip


def run(args: argparse.Namespace) -> int:
    """Prune as the options say, and say which layers were kept."""
    from vaswani.export.prune import prune_model_folder  # start-up: torch and transformers load only when it runs

    hide_transformers_progress_bars()
    output, kept = prune_model_folder(
        args.model, args.output_dir, encoder_layers_to_keep=args.encoder_layers_to_keep,
        decoder_layers_to_keep=args.decoder_layers_to_keep, every_other=args.every_other, stacks=args.stacks,
        vocab_size=args.vocab_size, overwrite=args.overwrite_output_dir, trust_remote_code=args.trust_remote_code,
    )  # fmt: skip
    tokens, had_tokens = kept.pop("vocabulary")
    for stack, (layers, total) in kept.items():
        kept_layers = f"layers {layers}" if layers is not None else "all layers"
        print(f"{stack}: kept {kept_layers} of {total}")
    if tokens is not None:
        print(f"vocabulary: kept the first {tokens} tokens of {had_tokens}")
    print(f"wrote the pruned model to {output}")
    return 0
