"""`vaswani tokenizer` (and `python -m tokenization train`): train the shared BPE vocabulary on text files and save it
as a tokenizer folder that `AutoTokenizer` loads (`tokenization`).

    vaswani tokenizer --files train.en train.de --vocab_size 37000 --output_dir tokenizer/
    python -m tokenization train --files train.en train.de --vocab_size 37000 --output_dir tokenizer/   (the same)

Mistakes in the arguments or the corpus print `error: <what is wrong and how to fix it>` and exit with status 2.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from vaswani.model_folder import check_tokenizer_output_folder, write_model_folder
from vaswani.options import add_option, add_switch, positive_int

HELP = "train a shared BPE tokenizer on text files (both sides of the corpus)"
DESCRIPTION = HELP + ", saved as a tokenizer folder that AutoTokenizer loads"
LAZY = True  # its options need the tokenizers/transformers imports: `vaswani` adds them only when it runs


def add_arguments(train: argparse.ArgumentParser) -> None:
    """The options of `vaswani tokenizer` (and `python -m tokenization train`)."""
    from tokenization.bpe import SPECIAL_TOKEN_LAYOUTS, UNICODE_NORMALIZERS  # start-up: loads tokenizers, transformers

    train.add_argument("--files", nargs="+", required=True,
                       help="UTF-8 files: plain text, one sentence per line, or sentence pairs as --train_file takes "
                       "them (.json/.jsonl, .tsv: both sides are read)")  # fmt: skip
    add_option(train, "source_lang", "tokenizer", help="with .json/.jsonl --files: the two languages of "
               '"translation" to read (default: the two keys of the first line\'s)')  # fmt: skip
    add_option(train, "target_lang", "tokenizer", help="see --source_lang")
    add_option(train, "output_dir", "tokenizer", required=True,
               help="folder to write tokenizer.json and tokenizer_config.json")  # fmt: skip
    add_option(train, "vocab_size", "tokenizer", default=37000,
               help="vocabulary size to train (default: 37000), rounded up to a multiple of 8 with unused filler "
               "tokens")  # fmt: skip
    add_option(train, "min_frequency", "tokenizer", default=2, help="minimum count of a merged pair (default: 2)")
    add_option(train, "special_tokens_layout", "tokenizer", choices=sorted(SPECIAL_TOKEN_LAYOUTS), default="paper")
    train.add_argument(
        "--normalization",
        choices=list(UNICODE_NORMALIZERS),
        default="NFKC",
        help="Unicode normalization (default: NFKC)",
    )
    train.add_argument(
        "--model_max_length", type=positive_int, default=1024, help="maximum sequence length (default: 1024)"
    )
    train.add_argument(
        "--limit_alphabet", type=positive_int, default=None,
        help="keep this many most frequent characters; the rest as bytes",
    )  # fmt: skip
    add_switch(
        train, "--ignore_merges", default=True, old_negative="--no-ignore_merges",
        help="look words of the vocabulary up whole instead of replaying the merges: same ids, faster encoding "
        "(default: on; --no_ignore_merges replays the merges for every word)",
    )  # fmt: skip
    train.add_argument(
        "--mask_token",
        action="store_true",
        help="add the special token <mask> (masked language modelling, fill-mask) with the id after all others, so "
        "every other id is the one a tokenizer without it gets; such a tokenizer recognises its special tokens in "
        "text (default: no mask token)",
    )
    add_option(train, "progress", "tokenizer", help="show progress bars (--progress: always, --no_progress: never; "
               "default: only for corpora over 10 MB)")  # fmt: skip


def run(args: argparse.Namespace) -> int:
    """Train the tokenizer the options describe and write its folder (never over files it did not create)."""
    from tokenization.bpe import train_bpe_tokenizer  # start-up: loads tokenizers, transformers
    from tokenization.errors import TokenizerError  # start-up: the tokenization package loads tokenizers
    from vaswani.data.loading import corpus_texts, is_pair_file  # start-up: loads datasets

    # Only a new or empty folder, or one holding nothing but an earlier tokenizer, is written (the latter replaced);
    # a model folder or the user's files are refused before anything is touched.
    output = check_tokenizer_output_folder(args.output_dir)
    if any(output.resolve() == Path(file).resolve() for file in args.files):
        raise TokenizerError(f"--output_dir {output} is one of the --files: give a new folder")
    if bool(args.source_lang) != bool(args.target_lang):
        raise TokenizerError("--source_lang and --target_lang go together: give both, or neither")
    # pairs (the files --train_file takes) are read as both sides' texts; plain text files by tokenizers itself
    corpus = {"files": args.files}
    if any(is_pair_file(file) for file in args.files):
        missing = [file for file in args.files if not Path(file).is_file()]
        if missing:
            raise TokenizerError(f"--files: {', '.join(missing)} not found")
        corpus = {"iterator": corpus_texts(args.files, args.source_lang, args.target_lang)}
    tokenizer = train_bpe_tokenizer(
        **corpus,
        vocab_size=args.vocab_size,
        min_frequency=args.min_frequency,
        special_tokens_layout=args.special_tokens_layout,
        normalization=args.normalization,
        model_max_length=args.model_max_length,
        limit_alphabet=args.limit_alphabet,
        ignore_merges=args.ignore_merges,
        show_progress=args.progress,
        mask_token=args.mask_token,
    )
    # written to a temporary sibling folder and swapped in: a kill never leaves a half-written tokenizer
    write_model_folder(output, tokenizer.save_pretrained, replace=True)
    ids = ", ".join(f"{token}={tokenizer.convert_tokens_to_ids(token)}" for token in tokenizer.all_special_tokens)
    print(f"saved a BPE tokenizer with {len(tokenizer)} tokens ({ids}) to {args.output_dir}")
    return 0
