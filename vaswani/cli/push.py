"""`vaswani push`: upload a model folder (weights, config, generation config, tokenizer, modeling code for
`trust_remote_code`, training record and our model card) to the Hub in one commit (`vaswani.hub.push`)."""

from __future__ import annotations

import argparse

from vaswani.options import add_option

HELP = "upload a model folder to the Hugging Face Hub with its model card"
DESCRIPTION = (
    "Upload weights, config, generation config, tokenizer, modeling code and the folder's README.md (render it for "
    "the repo first with `vaswani card --hub_model_id`; a folder without one gets a card rendered for the repo) in one "
    "commit. Checkpoints and logs stay local."
)


def add_arguments(push: argparse.ArgumentParser) -> None:
    add_option(push, "model", "push", required=True)
    add_option(push, "hub_model_id", "push", required=True)
    push.add_argument("--private", action="store_true", help="create the repository as private")
    push.add_argument("--commit_message", metavar="TEXT", help="the commit message")
    add_option(push, "trust_remote_code", "push")


def run(args: argparse.Namespace) -> int:
    from vaswani.hub.push import push_model_folder  # start-up: huggingface_hub and transformers load only when it runs

    url = push_model_folder(args.model, args.hub_model_id, private=args.private, commit_message=args.commit_message,
                            trust_remote_code=args.trust_remote_code)  # fmt: skip
    print(f"pushed {args.model} to {url}")
    return 0
