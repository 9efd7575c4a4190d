"""`python -m tokenization train ...`: the same command as `vaswani tokenizer ...` (`vaswani.cli.tokenizer`)."""

from __future__ import annotations

import argparse
import sys

from vaswani.cli import tokenizer
from vaswani.errors import run_command
from vaswani.options import ConfigArgumentParser


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m tokenization",
        description="Command line: train the shared BPE vocabulary and save it as a `transformers` tokenizer folder.",
    )
    commands = parser.add_subparsers(dest="command", required=True, parser_class=ConfigArgumentParser)
    train = commands.add_parser("train", help=tokenizer.HELP, description=tokenizer.HELP, command="tokenizer")
    tokenizer.add_arguments(train)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return run_command(lambda: tokenizer.run(args))


if __name__ == "__main__":
    sys.exit(main())
