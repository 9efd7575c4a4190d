"""The `vaswani` command: one subcommand per stage of a model's life, each in a module of its own here.

    vaswani train     --config configs/demo.yaml [--OPTION VALUE ...]    (python train.py: the same)
    vaswani prepare   --train_file data/train --validation_file data/valid --output_dir data/prepared
    vaswani distill   --teacher [SRC-TGT=]DIR --config configs/student.yaml --train_file data/train \\
                      --validation_file data/valid --test_file data/test --output_dir OUT [--stage all]
    vaswani tokenizer --files train.en train.de --vocab_size 37000 --output_dir tokenizer/

    vaswani translate --model DIR [--input FILE] [--output FILE] [--num_beams 4] [--length_penalty 0.6]
                      [--max_new_tokens N] [--paper_decoding] [--device auto] [--threads N] [--max_tokens N]
                      [--backend auto|torch|ctranslate2] [--mixed_precision no|bf16|fp16] [--parallel_batches N]
                      [--nbest N] [--scores] [--alignment] [--output_format text|jsonl]
                      [--prefix FILE] [--constraints FILE] [--input_format text|jsonl] [--model B ...]
    vaswani score     --model DIR --source FILE --target FILE [--output FILE] [--output_format text|jsonl]
    vaswani evaluate  --model DIR --test_file FILE [--source_lang L --target_lang L] [--output FILE] [--translations FILE]
    vaswani export    --model DIR --output_dir OUT --format ctranslate2 [--quantization int8|int8_float32|int16|...]
    vaswani push      --model DIR --hub_model_id OWNER/NAME [--private] [--commit_message TEXT]
    vaswani average   --run_dir DIR --last 5 --output_dir OUT        (or --checkpoints CKPT ... --model DIR)
    vaswani prune     --model DIR --output_dir OUT --every_other 0.5  (or --encoder_layers_to_keep 0,2,4 ...)
    vaswani card      --model DIR [--hub_model_id OWNER/NAME] [--license apache-2.0] [--output FILE] [--evaluation FILE]
    vaswani convert   --from marian --model DIR --output_dir OUT
    vaswani convert   --from fairseq --checkpoint model.pt --data_dir DICT_DIR --output_dir OUT
    vaswani serve     --model [SRC-TGT=]DIR ... [--host 127.0.0.1] [--port 5000] [--api_keys FILE]

One spelling per idea: an option several commands share is defined once, in `vaswani.options` (a model folder is
`--model`, an output folder `--output_dir`, an output file `--output`, a token budget `--max_tokens`, ...); the
spellings of older versions still work, hidden, with a deprecation note.

Models are read from local folders only and checked before use (`vaswani.model_folder`); a folder's own Python code
runs only with `--trust_remote_code` (translate, push, prune, card; export and average never run it). `average` and
`prune` write into a non-empty folder only with `--overwrite_output_dir` (its model files are replaced, other files
kept); every model folder and `--output` file is written under a temporary name and renamed when complete.

Each command is a module: `HELP` (and optionally `DESCRIPTION`, `LAZY`, `FORMATTER_CLASS`), `add_arguments(parser)`,
`run(args)`; see its docstring. A user mistake prints `error: <message>` on stderr and exits with status 2, without a
traceback (`vaswani.errors`).
"""

from __future__ import annotations

import argparse
import sys

from vaswani.cli import (
    average,
    card,
    convert,
    distill,
    evaluate,
    export,
    prepare,
    prune,
    push,
    score,
    serve,
    tokenizer,
    train,
    translate,
)  # fmt: skip
from vaswani.errors import run_command
from vaswani.options import ConfigArgumentParser

PROG = "vaswani"
# The commands in the order `vaswani --help` lists them.
COMMANDS = {
    "translate": translate, "score": score, "evaluate": evaluate, "serve": serve, "export": export, "push": push, "train": train,
    "prepare": prepare, "distill": distill, "tokenizer": tokenizer, "average": average, "prune": prune, "card": card,
    "convert": convert,
}  # fmt: skip


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser of every command; the options of `command` (the first argument) are filled in even where they
    need heavy imports (`LAZY` modules), so that `vaswani --help` and the light commands start fast. Each command's
    parser is a `ConfigArgumentParser` (`vaswani.options`): it records the options given and reads `--config`."""
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0], allow_abbrev=False)
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND",
                                     parser_class=ConfigArgumentParser)  # fmt: skip
    for name, module in COMMANDS.items():
        subparser = commands.add_parser(
            name, allow_abbrev=False, help=module.HELP, description=getattr(module, "DESCRIPTION", module.HELP),
            command=name, formatter_class=getattr(module, "FORMATTER_CLASS", argparse.HelpFormatter),
        )  # fmt: skip
        if getattr(module, "LAZY", False) and command != name:
            continue
        subparser.set_defaults(run=module.run)
        module.add_arguments(subparser)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the command line; returns the exit status (`vaswani.errors.run_command`: 2 with an `error: ...` line for
    a user mistake, 1 for a failure of the environment or a bug)."""
    argv = sys.argv[1:] if argv is None else list(argv)

    def parse_and_run() -> int | None:
        try:
            args = build_parser(argv[0] if argv else None).parse_args(argv)
        except SystemExit as exit_:  # argparse printed the usage and "error: ..." (status 2), or the help (status 0)
            return int(exit_.code or 0)
        return args.run(args)

    return run_command(parse_and_run)  # a YAML --config is read while parsing: its mistakes are user errors too
