"""The `vaswani` command: one subcommand per stage of a model's life, each in a module of its own here.

    vaswani train     --config configs/demo.yaml [--OPTION VALUE ...]    (python train.py: the same)
    vaswani prepare   --train_file data/train --validation_file data/valid --output_dir data/prepared
    vaswani tokenizer --files train.en train.de --vocab_size 37000 --output tokenizer/

    vaswani translate --model DIR [--input FILE] [--output FILE] [--num_beams 4] [--length_penalty 0.6]
                      [--max_new_tokens N] [--paper_decoding] [--device auto] [--threads N] [--batch_tokens 4096]
                      [--backend auto|torch|ctranslate2] [--dtype float32|bfloat16|float16] [--parallel_batches N]
                      [--nbest N] [--scores] [--alignment] [--format text|jsonl]
    vaswani export    --model DIR --output OUT --format ctranslate2 [--quantization int8|int8_float32|int16|...]
    vaswani push      --model DIR --repo_id OWNER/NAME [--private] [--commit_message TEXT]
    vaswani average   --run_dir DIR --last 5 --output_dir OUT        (or --checkpoints CKPT ... --model DIR)
    vaswani prune     --model DIR --output_dir OUT --every_other 0.5  (or --encoder_layers_to_keep 0,2,4 ...)
    vaswani card      --model DIR [--repo_id OWNER/NAME] [--license apache-2.0] [--output FILE]
    vaswani convert   --from marian --model DIR --output OUT
    vaswani convert   --from fairseq --checkpoint model.pt --data_dir DICT_DIR --output OUT

Models are read from local folders only and checked before use (`vaswani.model_folder`); a folder's own Python code
runs only with `--trust_remote_code` (translate, push, prune, card; export and average never run it). `average` and
`prune` write into a non-empty folder only with `--overwrite` (its model files are replaced, other files kept); every
model folder and `--output` file is written under a temporary name and renamed when complete.

Each command is a module: `HELP` (and `DESCRIPTION`), `add_arguments(parser)`, `run(args)`; see its docstring.
A user mistake prints `error: <message>` on stderr and exits with status 2, without a traceback.
"""

from __future__ import annotations

import argparse
import sys

from vaswani.cli import average, card, convert, export, prepare, prune, push, tokenizer, train, translate
from vaswani.errors import run_command

PROG = "vaswani"
# The commands in the order `vaswani --help` lists them; `train` parses its own command line (see cli/train.py).
COMMANDS = {
    "translate": translate, "export": export, "push": push, "train": train, "prepare": prepare, "tokenizer": tokenizer,
    "average": average, "prune": prune, "card": card, "convert": convert,
}  # fmt: skip


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser of every command; the options of `command` (the first argument) are filled in even where they
    need heavy imports (`LAZY` modules), so that `vaswani --help` and the light commands start fast."""
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0], allow_abbrev=False)
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, module in COMMANDS.items():
        if module is train:  # listed for `vaswani --help`; `main` sends `vaswani train ...` to it before parsing
            commands.add_parser(name, help=train.HELP + " (see vaswani train --help)")
            continue
        description = getattr(module, "DESCRIPTION", module.HELP)
        subparser = commands.add_parser(name, allow_abbrev=False, help=module.HELP, description=description)
        if getattr(module, "LAZY", False) and command != name:
            continue
        subparser.set_defaults(run=module.run)
        module.add_arguments(subparser)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the command line; returns the exit status (2 with an `error: ...` line for a user mistake)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["train"]:
        return train.run(argv[1:], prog=f"{PROG} train")
    try:
        args = build_parser(argv[0] if argv else None).parse_args(argv)
    except SystemExit as exit_:  # argparse printed the usage and "error: ..." (status 2), or the help (status 0)
        return int(exit_.code or 0)
    return run_command(lambda: args.run(args))
