"""`vaswani export --format ctranslate2`: a model folder as a CTranslate2 folder with the tokenizer, optionally with
quantized weights (`--quantization int8`): a translation model for `vaswani translate`, a causal LM for
`ctranslate2.Generator`, an encoder-only model for `ctranslate2.Encoder` (`vaswani.export.ctranslate2`)."""

from __future__ import annotations

import argparse
import sys

from vaswani.constants import MODEL_CARD_FILE
from vaswani.errors import UsageError
from vaswani.export.ctranslate2 import QUANTIZATIONS, export_ctranslate2, usage_hint
from vaswani.model_folder import hide_transformers_progress_bars
from vaswani.options import add_option

EXPORT_FORMATS = ("ctranslate2",)

HELP = "export a model folder for a fast inference engine (CTranslate2)"
DESCRIPTION = (
    "Convert a model folder into a CTranslate2 model folder (with the tokenizer). A translation model "
    "(VaswaniForConditionalGeneration) runs with `vaswani translate --model OUT`; a causal LM (VaswaniForCausalLM) "
    "becomes a decoder-only model for ctranslate2.Generator, an encoder-only model (VaswaniEncoderModel, "
    "VaswaniForMaskedLM: the encoder, without the masked-LM head) an encoder model for ctranslate2.Encoder; "
    "VaswaniForSequenceClassification is refused (CTranslate2 cannot run its head). Needs pip install "
    '"vaswani[ct2]".'
)


def add_arguments(export: argparse.ArgumentParser) -> None:
    add_option(export, "model", "export", required=True)
    add_option(export, "output_dir", "export", required=True, help="the new folder to write")
    add_option(export, "overwrite_output_dir", "export",
               help="replace the export in an existing --output_dir (one `vaswani export` wrote; its other files are "
               "kept)")  # fmt: skip
    export.add_argument("--format", choices=EXPORT_FORMATS, default="ctranslate2", help="ctranslate2 (the only one)")
    add_option(
        export, "quantization", "export", choices=QUANTIZATIONS, default="float32",
        help="weight type of the export: int8 (8-bit weights, float32 elsewhere: the fastest on CPU), int8_float32, "
             "int16, float16, bfloat16, float32",
    )  # fmt: skip


def run(args: argparse.Namespace) -> int:
    """Export the model folder and say how to run the export."""
    if args.output_dir.exists() and args.output_dir.resolve() == args.model.resolve():
        raise UsageError("--output_dir must be a new folder, not the model folder itself")
    hide_transformers_progress_bars()
    earlier_card = args.overwrite_output_dir and (args.output_dir / MODEL_CARD_FILE).is_file()
    output = export_ctranslate2(
        args.model, args.output_dir, quantization=args.quantization, overwrite=args.overwrite_output_dir
    )  # ExportError: a UserError
    print(f"wrote the CTranslate2 model ({args.quantization}) to {output}; {usage_hint(output)}")
    if earlier_card:  # the user's file, perhaps edited: kept, but it describes the export it replaced
        print(f"warning: {output / MODEL_CARD_FILE} is the card of the export this one replaced (kept); render this "
              f"export's with: vaswani card --model {output}", file=sys.stderr)  # fmt: skip
    return 0
