"""`vaswani card`: render the model card (README.md) of a model folder (`vaswani.hub.model_card`).

    vaswani card --model DIR [--hub_model_id OWNER/NAME] [--license ID] [--output FILE] [--evaluation FILE]

`--evaluation FILE` puts the scores that `vaswani evaluate --model DIR --output FILE` recorded into the card (its
results table and model-index) as the test scores: the way to publish the scores of a folder that training did not
score (an average, a pruned or converted model) or of another test set. The file must be an evaluation of this folder
alone (not of its export, nor of an ensemble with it). A CTranslate2 export gets a card of its own
(`vaswani.hub.model_card.render_export_card`), with the scores of an evaluation of the export."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from vaswani.cli.common import check_output_file
from vaswani.constants import (
    CONFIG_FILE,
    EVALUATION_FORMAT,
    EXPORT_INFO_FILE,
    MODEL_CARD_FILE,
    RESULTS_FILE,
    RUN_ARGS_FILE,
)
from vaswani.errors import UsageError
from vaswani.fileio import read_json_object, write_file_atomically
from vaswani.model_folder import check_model_files
from vaswani.options import add_option

HELP = "render the model card (README.md) of a model folder"
DESCRIPTION = "Render the model card from the folder's config.json, run_args.json and results.json."


def add_arguments(card: argparse.ArgumentParser) -> None:
    add_option(card, "model", "card", required=True)
    add_option(card, "hub_model_id", "card", help="the Hub name used in the card's examples (default: folder name)")
    card.add_argument(
        "--license",
        help="license identifier (default: that of the model a converted folder came from, else apache-2.0)",
    )
    add_option(card, "output", "card", help="where to write the card (default: DIR/README.md)")
    add_option(card, "trust_remote_code", "card")
    card.add_argument(
        "--evaluation", type=Path, metavar="FILE",
        help="the JSON that `vaswani evaluate --model DIR --output FILE` wrote: its scores become the card's test "
             "scores (for a folder training did not score, or another test set)",
    )  # fmt: skip


def run(args: argparse.Namespace) -> int:
    # start-up: huggingface_hub and transformers load only when it runs
    from vaswani.hub.model_card import render_model_card

    folder = args.model
    if not (folder / EXPORT_INFO_FILE).is_file():  # a CTranslate2 export has a card of its own (no PyTorch files)
        check_model_files(folder, need_tokenizer=False, trust_remote_code=args.trust_remote_code)
    output = args.output or folder / MODEL_CARD_FILE
    check_output_file(output, inputs=[folder / name for name in (CONFIG_FILE, RUN_ARGS_FILE, RESULTS_FILE)])
    evaluation = read_evaluation(args.evaluation, folder) if args.evaluation is not None else None
    card = render_model_card(folder, repo_id=args.hub_model_id, license=args.license, evaluation=evaluation)
    write_file_atomically(output, str(card))
    print(f"wrote the model card to {output}")
    return 0


EVALUATION_KEYS = {"bleu": (int, float), "chrf": (int, float), "bleu_signature": str, "chrf_signature": str,
                   "models": list, "test_file": list, "source_lang": str, "target_lang": str, "pairs": int,
                   "backend": str, "computes_in": str, "decoding": dict}  # fmt: skip


def read_evaluation(path: Path, folder: Path) -> dict:
    """The evaluation in `path` (`vaswani evaluate --output`), checked: of that format, complete, and of `folder`
    alone."""
    if path.is_dir():
        raise UsageError(f"--evaluation {path} is a folder: give the file that vaswani evaluate --model {folder} "
                         "--test_file FILE --output FILE wrote")  # fmt: skip
    if not path.is_file():
        raise UsageError(f"--evaluation {path}: no such file; write one with vaswani evaluate --model {folder} "
                         f"--test_file FILE --output {path}")  # fmt: skip
    # the file may be another one given by mistake (the test file itself): the fix writes elsewhere
    fix = f"give the file that vaswani evaluate --model {folder} --test_file FILE --output FILE wrote"
    evaluation = read_json_object(path, fix=fix)
    if evaluation.get("format") != EVALUATION_FORMAT:
        raise UsageError(f"--evaluation {path} is not the output of vaswani evaluate (its format is "
                         f"{evaluation.get('format')!r}, not {EVALUATION_FORMAT!r}); {fix}")  # fmt: skip
    wrong = [key for key, kind in EVALUATION_KEYS.items() if not isinstance(evaluation.get(key), kind)]
    if wrong or not all(
        isinstance(evaluation["decoding"].get(k), (int, float)) for k in ("num_beams", "length_penalty")
    ):
        raise UsageError(f"--evaluation {path} lacks or has damaged fields ({', '.join(wrong) or 'decoding'}); {fix}")
    if [os.path.realpath(model) for model in evaluation["models"]] != [os.path.realpath(folder)]:
        scored = " + ".join(map(str, evaluation["models"]))
        raise UsageError(f"--evaluation {path} scored {scored}, not {folder}: the card may show only this model's "
                         f"scores; {fix}")  # fmt: skip
    return evaluation
