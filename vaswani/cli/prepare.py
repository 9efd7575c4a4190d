"""`vaswani prepare`: read and tokenize a corpus once, into a folder that `vaswani train --prepared_data DIR` trains
from without reading the text again (`vaswani.data.prepared`; issue 30).

    vaswani prepare --train_file data/train --validation_file data/valid --source_lang en --target_lang de \\
        --vocab_size 37000 --tokenizer_sample 2000000 --output_dir data/prepared
    vaswani train --prepared_data data/prepared --output_dir runs/base --max_train_steps 100000

It takes `vaswani train`'s data, tokenizer and language-model options (the same names, the same readers, the same
tokenization), and `--tokenizer_sample N`: the new BPE is trained on N lines drawn at random (`--seed`) from the
training data, on all of it when it is smaller.
"""

from __future__ import annotations

import argparse
import logging
import os
import random
import shutil
from pathlib import Path

from vaswani.constants import TMP_PREFIX
from vaswani.errors import UsageError
from vaswani.options import add_option, positive_int

HELP = "read and tokenize a corpus once, into a folder that `vaswani train --prepared_data` trains from"
DESCRIPTION = (
    "Read the splits, train the shared BPE (or load --tokenizer), tokenize with every core and write a "
    "self-describing folder (Arrow datasets with compact integer columns, the tokenizer, manifest.json) that "
    "`vaswani train --prepared_data DIR` reads without reading the text again."
)
LAZY = True  # its options come from vaswani.training.options, which imports the model code
TOKENIZER_SAMPLE = 10_000_000

logger = logging.getLogger("train")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """`vaswani train`'s --task, data, tokenizer and language-model options, --tokenizer_sample, --seed and the output
    folder."""
    # start-up: the training options import the model code; `vaswani --help` must not
    from vaswani.training.options import (
        TASK_NAMES,
        add_data_options,
        add_language_model_options,
        add_tokenizer_options,
    )

    add_option(parser, "task", "prepare", choices=list(TASK_NAMES), default="translation",
               help="translation: sentence pairs; causal_lm / masked_lm: text (as `vaswani train --task`)")  # fmt: skip
    add_data_options(parser, "prepare")
    add_tokenizer_options(parser, "prepare")
    parser.add_argument(
        "--tokenizer_sample", type=positive_int, default=TOKENIZER_SAMPLE, metavar="N",
        help="train the new BPE on N training examples drawn at random (--seed); all of them when there are fewer",
    )  # fmt: skip
    add_language_model_options(parser, "prepare")
    add_option(parser, "seed", "prepare", default=0, help="seeds the validation split carved out and the BPE sample")
    add_option(parser, "output_dir", "prepare", required=True, type=Path, help="where to write the folder")
    add_option(parser, "overwrite_output_dir", "prepare",
               help="replace the prepared data in a non-empty --output_dir (never a folder of anything else)")  # fmt: skip


def run(args: argparse.Namespace) -> int:
    """Prepare the corpus and say where it went. Without --cache_dir, the Arrow copy of the text files and the
    tokenized cache go to a temporary folder beside --output_dir, removed at the end (the prepared folder is what
    stays); with it (or with a `datasets` source, whose download stays in the cache) they stay there."""
    from vaswani.data.prepared import check_prepared_output, read_manifest  # start-up: datasets loads when it runs

    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s", datefmt="%H:%M:%S",
                        level=logging.INFO)  # fmt: skip
    check_args(args)
    check_prepared_output(args.output_dir, args.overwrite_output_dir)
    if not (args.train_file or args.dataset_name):
        args.dataset_name = "demo"
    scratch = None
    if args.cache_dir is None and args.dataset_name in (None, "demo"):
        scratch = args.output_dir.absolute().parent / f"{TMP_PREFIX}cache-{args.output_dir.name}-{os.getpid()}"
        args.cache_dir = str(scratch)
    try:
        folder = prepare(args)
    finally:
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)
            logger.info("Removed the temporary caches in %s (the Arrow copy of the text and the tokenized data "
                        "above); --cache_dir DIR keeps them for a later run", scratch)  # fmt: skip
    print(f"wrote the prepared data to {folder} ({kept_summary(read_manifest(folder))}): train with `vaswani train "
          f"--prepared_data {folder} ...`")  # fmt: skip
    return 0


def prepare(args: argparse.Namespace) -> Path:
    """Read, tokenize and write the folder (`vaswani.data.prepared`); returns it."""
    from accelerate import PartialState  # start-up: accelerate, datasets, torch load only when the command runs

    from vaswani.data import loading, prepared  # start-up: as above
    from vaswani.data.tokenized import tokenizer_hash  # start-up: as above
    from vaswani.model_folder import load_tokenizer  # start-up: as above
    from vaswani.training.tasks import TASKS, tokenize_pairs  # start-up: as above

    args.max_position_embeddings = None  # the new tokenizer's model_max_length: the default, as in training
    args.prepared_data = None  # what the task functions ask: this is not a run from prepared data
    state = PartialState(cpu=True)  # one process: what the task functions expect of an accelerator
    task = TASKS[args.task]
    raw, summary = task.load_data(args, state)
    logger.info("Data:\n%s", summary)
    if args.tokenizer:
        tokenizer = load_tokenizer(args.tokenizer)
        task.check_tokenizer(tokenizer, args.tokenizer)
    else:
        train = raw["train"]
        if len(train) > args.tokenizer_sample:
            rows = sorted(random.Random(args.seed).sample(range(len(train)), args.tokenizer_sample))
            train = train.select(rows)
        logger.info("Training a shared BPE tokenizer (vocab_size=%d) on %d training examples", args.vocab_size,
                    len(train))  # fmt: skip
        tokenizer = task.train_tokenizer(args, {"train": train})
    if args.task == "translation":
        tokens, counts = tokenize_pairs(args, raw, tokenizer, state)
        files = [path for split in ("train", "validation", "test") if getattr(args, f"{split}_file")
                 for path in loading.resolve_file(split, getattr(args, f"{split}_file"), args.source_lang,
                                          args.target_lang).paths]  # fmt: skip
    else:  # both language models: the same blocks (the masked LM's masks are drawn in training)
        tokens, counts = TASKS["causal_lm"].tokenize(args, raw, tokenizer, state), {}
        files = [getattr(args, f"{split}_file") for split in ("train", "validation", "test")
                 if getattr(args, f"{split}_file")]  # fmt: skip
    manifest = {
        "format": prepared.MANIFEST_FORMAT,
        "version": prepared.MANIFEST_VERSION,
        "task": args.task,
        "seed": args.seed,  # of the validation pairs carved out of train and of the BPE's sample
        "sources": prepared.source_files(files),
        "options": prepared.recorded_options(args),
        "tokenizer_sha256": tokenizer_hash(tokenizer),
        "counts": {
            split: {"read": len(raw[split]), "kept": len(tokens[split]), **counts.get(split, {})} for split in tokens
        },
    }
    held_out = {split: raw[split] for split in ("validation", "test") if split in raw}
    return prepared.write_prepared(args.output_dir, tokenized=tokens, held_out_text=held_out, tokenizer=tokenizer,
                                   manifest=manifest, overwrite=args.overwrite_output_dir)  # fmt: skip


def kept_summary(manifest: dict) -> str:
    """What each split of a prepared folder holds, from its manifest: "train: 38,012 of 56,366 pairs, validation: 400
    of 400 pairs" (language models: examples, the blocks cut from the texts)."""
    counts = manifest["counts"]
    if manifest["task"] != "translation":
        return ", ".join(f"{split}: {count['kept']:,} examples" for split, count in counts.items())
    return ", ".join(f"{split}: {count['kept']:,} of {count['read']:,} pairs" for split, count in counts.items())


def check_args(args: argparse.Namespace) -> None:
    """The values `vaswani train` would refuse, refused here before any data is read (argparse refuses the counts
    below 1)."""
    from vaswani.training.tasks import TASKS  # start-up: loads torch and the model code, as `prepare` does next

    TASKS[args.task].check_data_args(args)  # the other tasks' options: refused, as `vaswani train` does
    if args.block_size < 2:
        raise UsageError(f"--block_size {args.block_size} is not allowed; use an integer of 2 or more.")
    if args.validation_size < 0:
        raise UsageError(f"--validation_size {args.validation_size} is not allowed; use 0 or more.")
    if args.source_lang == args.target_lang:
        raise UsageError(f"--source_lang and --target_lang are both {args.source_lang!r}; they must differ.")
