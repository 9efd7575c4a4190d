"""`vaswani score`: the model's log-probability of given translations, for filtering parallel data and reranking
(fairseq's `--score-reference`, marian-scorer, CTranslate2's `score_batch`).

    vaswani score --model DIR --source FILE --target FILE [--output FILE] [--output_format text|jsonl]
    vaswani score --model DIR --pairs_file PATH [--source_lang LANG --target_lang LANG] [...]

Line i of `--target` is scored as the translation of line i of `--source` (the files must have as many lines),
teacher-forced (`Translator.score`). Or the pairs come from one `--pairs_file` in a format of train's data files (a
.json/.jsonl file of {"translation": {SRC: ..., TGT: ...}}, a .tsv file, or a prefix of two aligned files), checked
as training checks them; its languages are `--source_lang` and `--target_lang`, by default the model's (its
run_args.json), as `vaswani evaluate` reads its --test_file. Every pair is scored, empty ones included, so that output
line i belongs to line i of the input. One output line per pair, in order:

- text: `SCORE ||| LOG_PROB ||| TOKEN_LOG_PROBS`: SCORE is LOG_PROB / |Y| ** length_penalty (the GNMT penalty with
  `--paper_decoding`), the score `vaswani translate --scores` prints for the same translation with the same options;
  LOG_PROB the sum of the per-token log-probabilities, listed space-separated (the target's subwords, then EOS), 6
  decimals;
- jsonl: {"line": INDEX, "score": ..., "log_prob": ..., "tokens": [...], "token_log_probs": [...]}.

Sources longer than `--max_source_length` are truncated with a warning (as `translate` does); a target longer than
the decoder's position table is an error. Both backends: a CTranslate2 export scores with `score_batch` (float32
exports give the PyTorch numbers within float tolerance). Repeat `--model` to score with an ensemble (PyTorch).
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from vaswani.cli.common import (
    check_input_file,
    check_language_code,
    check_output_file,
    languages_of_pair_file,
    load_translator,
    open_output,
    shown_line_numbers,
    target_language,
)
from vaswani.errors import UsageError
from vaswani.fileio import count_lines
from vaswani.inference.engines import BACKENDS
from vaswani.inference.translator import Score, Translator, read_lines
from vaswani.options import add_option

HELP = "score given translations with a model (log-probabilities)"
DESCRIPTION = "Score each line of --target as the translation of the same line of --source: its log-probability."
OUTPUT_FORMATS = ("text", "jsonl")


def add_arguments(score: argparse.ArgumentParser) -> None:
    add_option(
        score, "model", "score", required=True, action="append",
        help="a saved model folder with its tokenizer, or a CTranslate2 export; repeat it to score with an ensemble",
    )  # fmt: skip
    add_option(score, "trust_remote_code", "score")
    score.add_argument("--source", type=Path, metavar="FILE", help="source sentences, one per line")
    score.add_argument("--target", type=Path, metavar="FILE", help="their translations, one per line")
    add_option(score, "pairs_file", "score",
               help='the pairs in one file instead of --source and --target, in a format of train\'s --train_file: '
                    '.json/.jsonl ({"translation": {SRC: ..., TGT: ...}}), .tsv (source TAB target) or a prefix PATH '
                    "of two aligned files PATH.SRC and PATH.TGT")  # fmt: skip
    add_option(score, "source_lang", "score",
               help="the source language of --pairs_file (default: the model's, from its run_args.json)")  # fmt: skip
    add_option(score, "output", "score", help="write the scores to FILE (default: stdout)")
    add_option(score, "output_format", "score", default="text", choices=OUTPUT_FORMATS,
               help="text (`SCORE ||| LOG_PROB ||| TOKEN_LOG_PROBS`) or jsonl (one JSON object per pair)")  # fmt: skip
    add_option(score, "length_penalty", "score", default=0.6,
               help="SCORE = LOG_PROB / length ** ALPHA, as translate --scores (paper: 0.6)")  # fmt: skip
    add_option(score, "paper_decoding", "score",
               help="normalise by the GNMT penalty ((5 + length) / 6) ** ALPHA, as translate --paper_decoding")  # fmt: skip
    add_option(score, "target_lang", "score",
               help="the language of the targets: of --target, for a multilingual model (one with a token per target "
                    "language, '>>es<<'; its token goes before every source, as translate --target_lang puts it), or "
                    "of --pairs_file (default: the model's, from its run_args.json)")  # fmt: skip
    add_option(score, "device", "score", default="auto")
    add_option(score, "max_tokens", "score",
               help="source tokens per batch, padding included (default: as translate's, 512 per thread on a CPU, at "
                    "most 4096; 4096 on a GPU)")  # fmt: skip
    add_option(score, "max_source_length", "score",
               help="truncate longer sources to N tokens, with a warning (default: the model's positions)")  # fmt: skip
    add_option(score, "buffer_lines", "score", default=10000, help="pairs read, sorted by length and scored at a time")
    add_option(score, "backend", "score", choices=BACKENDS, default="auto")
    add_option(score, "mixed_precision", "score", default="no", help="compute type (as translate --mixed_precision)")
    add_option(score, "progress", "score", help="a progress bar on stderr (default: on; --no_progress: never)")


def format_score(index: int, score: Score, output_format: str) -> str:
    """One output line for pair `index` (0-based): see the module docstring."""
    if output_format == "jsonl":
        record = {"line": index, "score": score.score, "log_prob": score.log_prob, "tokens": score.tokens,
                  "token_log_probs": score.token_log_probs}  # fmt: skip
        return json.dumps(record, ensure_ascii=False)
    per_token = " ".join(f"{value:.6f}" for value in score.token_log_probs)
    return f"{score.score:.6f} ||| {score.log_prob:.6f} ||| {per_token}"


def run(args: argparse.Namespace) -> int:
    from tqdm.auto import tqdm

    if args.pairs_file is not None:
        count, open_pairs, language = _pairs_file(args)
    else:
        count, open_pairs, language = _source_and_target_files(args)
    translator = load_translator(args.model, args)
    language = target_language(translator, language, Path(args.model[0]), check_trained=args.pairs_file is None)
    bar = tqdm(total=count, unit="pair", file=sys.stderr, disable=args.progress is False)
    try:
        with open_pairs() as pairs, open_output(args.output) as sink:
            _score_pairs(args, translator, pairs, sink, bar, language)
    finally:
        bar.close()
    return 0


def _source_and_target_files(args: argparse.Namespace) -> tuple[int, Callable, str | None]:
    """--source and --target, checked before the model loads: the number of pairs, a context manager that opens the
    (source, target) pairs and the target language (--target_lang)."""
    for flag, path in (("--source", args.source), ("--target", args.target)):
        if path is None:
            raise UsageError(f"{flag} FILE is missing: give --source FILE and --target FILE, or the pairs in one "
                             "--pairs_file PATH")  # fmt: skip
    if args.source_lang is not None:
        raise UsageError(f"--source_lang {args.source_lang} names a side of --pairs_file: leave it out with --source "
                         "and --target")  # fmt: skip
    for path, flag in ((args.source, "--source"), (args.target, "--target")):
        check_input_file(path, flag)
        with open(path, "rb") as stream:  # line 1 read before the line counts, which a UTF-16 file would make wrong
            next(read_lines(stream, name=str(path)), None)
    for model in args.model:
        check_output_file(args.output, inputs=[args.source, args.target], model=model)
    pairs, targets = count_lines(args.source), count_lines(args.target)
    if targets != pairs:
        raise UsageError(f"--source {args.source} has {pairs} lines but --target {args.target} has {targets}: give "
                         "one translation per source line")  # fmt: skip
    check_language_code(args.target_lang, "--target_lang")

    @contextmanager
    def open_pairs() -> Iterator[Iterator[tuple[str, str]]]:
        with open(args.source, "rb") as source, open(args.target, "rb") as target:
            yield zip(read_lines(source, name=str(args.source)), read_lines(target, name=str(args.target)),
                      strict=True)  # fmt: skip

    return pairs, open_pairs, args.target_lang


def _pairs_file(args: argparse.Namespace) -> tuple[int, Callable, str]:
    """--pairs_file, checked as training checks a data file (a `DataError` names the file and line) before the model
    loads: as `_source_and_target_files` gives its files."""
    from vaswani.data.loading import pair_file, read_pairs  # start-up: loads datasets

    given = [flag for flag, path in (("--source", args.source), ("--target", args.target)) if path is not None]
    if given:
        raise UsageError(f"{' and '.join(given)} and --pairs_file both give pairs: give --pairs_file alone, or "
                         "--source and --target")  # fmt: skip
    for flag, code in (("--source_lang", args.source_lang), ("--target_lang", args.target_lang)):
        check_language_code(code, flag)
    source_lang, target_lang = languages_of_pair_file(args, "--pairs_file")
    # every pair is scored, one output line each, as with --source and --target: a file of empty pairs too
    data = pair_file("pairs", args.pairs_file, source_lang, target_lang, require_pair=False)
    for model in args.model:
        check_output_file(args.output, inputs=[Path(path) for path in data.source.paths], model=model)

    @contextmanager
    def open_pairs() -> Iterator[Iterator[tuple[str, str]]]:
        yield ((source, target) for _, source, target in read_pairs(data.source, source_lang, target_lang))

    return data.pairs + data.skipped, open_pairs, target_lang


def _score_pairs(args: argparse.Namespace, translator: Translator, pairs: Iterator[tuple[str, str]], sink, bar,
                 language: str | None = None) -> None:  # fmt: skip
    """Score `buffer_lines` pairs at a time into `sink` (the output: a temporary file renamed when complete, or
    stdout); `language`: the target language of a multilingual model (`vaswani.cli.common.target_language`)."""
    first = 0
    while chunk := list(itertools.islice(pairs, args.buffer_lines)):

        def warn_truncated(indices: list[int], first: int = first) -> None:
            lines = shown_line_numbers([first + i + 1 for i in indices])
            tqdm_write(f"warning: source line(s) {lines} are longer than {translator.max_source_length} tokens "
                       "and were truncated (see --max_source_length)")  # fmt: skip

        scores = translator.score([s for s, _ in chunk], [t for _, t in chunk], args.length_penalty,
                                  args.paper_decoding, args.max_tokens, progress=bar.update,
                                  on_truncated=warn_truncated, first_number=first + 1,
                                  target_languages=language)  # fmt: skip
        for index, score in enumerate(scores, first):
            sink.write(format_score(index, score, args.output_format) + "\n")
        first += len(chunk)


def tqdm_write(message: str) -> None:
    from tqdm.auto import tqdm

    tqdm.write(message, file=sys.stderr)
