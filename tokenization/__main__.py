"""`python -m tokenization train ...`: the same command as `vaswani tokenizer ...` (`vaswani.cli.tokenizer`)."""

from __future__ import annotations

import argparse
import sys

from vaswani.cli import tokenizer
from vaswani.errors import run_command


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tokenization",
        description="Command line: train the shared BPE vocabulary and save it as a `transformers` tokenizer folder.",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    tokenizer.add_arguments(commands.add_parser("train", help=tokenizer.HELP, description=tokenizer.HELP))
    args = parser.parse_args(argv)
    return run_command(lambda: tokenizer.run(args))


if __name__ == "__main__":
    sys.exit(main())
