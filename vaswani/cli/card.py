"""`vaswani card`: render the model card (README.md) of a model folder (`vaswani.hub.model_card`)."""

from __future__ import annotations

import argparse

from vaswani.cli.common import check_output_file
from vaswani.constants import CONFIG_FILE, MODEL_CARD_FILE, RESULTS_FILE, RUN_ARGS_FILE
from vaswani.fileio import write_file_atomically
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


def run(args: argparse.Namespace) -> int:
    # start-up: huggingface_hub and transformers load only when it runs
    from vaswani.hub.model_card import render_model_card

    folder = args.model
    check_model_files(folder, need_tokenizer=False, trust_remote_code=args.trust_remote_code)
    output = args.output or folder / MODEL_CARD_FILE
    check_output_file(output, inputs=[folder / name for name in (CONFIG_FILE, RUN_ARGS_FILE, RESULTS_FILE)])
    card = render_model_card(folder, repo_id=args.hub_model_id, license=args.license)
    write_file_atomically(output, str(card))
    print(f"wrote the model card to {output}")
    return 0
