"""`vaswani score`: the model's log-probability of given translations, for filtering parallel data and reranking
(fairseq's `--score-reference`, marian-scorer, CTranslate2's `score_batch`).

    vaswani score --model DIR --source FILE --target FILE [--output FILE] [--output_format text|jsonl]

Line i of `--target` is scored as the translation of line i of `--source` (the files must have as many lines),
teacher-forced (`Translator.score`). One output line per pair, in order:

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
from pathlib import Path

from vaswani.cli.common import (
    check_input_file,
    check_language_code,
    check_output_file,
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
    score.add_argument("--source", required=True, type=Path, metavar="FILE", help="source sentences, one per line")
    score.add_argument("--target", required=True, type=Path, metavar="FILE", help="their translations, one per line")
    add_option(score, "output", "score", help="write the scores to FILE (default: stdout)")
    add_option(score, "output_format", "score", default="text", choices=OUTPUT_FORMATS,
               help="text (`SCORE ||| LOG_PROB ||| TOKEN_LOG_PROBS`) or jsonl (one JSON object per pair)")  # fmt: skip
    add_option(score, "length_penalty", "score", default=0.6,
               help="SCORE = LOG_PROB / length ** ALPHA, as translate --scores (paper: 0.6)")  # fmt: skip
    add_option(score, "paper_decoding", "score",
               help="normalise by the GNMT penalty ((5 + length) / 6) ** ALPHA, as translate --paper_decoding")  # fmt: skip
    add_option(score, "target_lang", "score",
               help="the language of --target, for a multilingual model (one with a token per target language, "
                    "'>>es<<'): its token goes before every source, as translate --target_lang puts it")  # fmt: skip
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
    translator = load_translator(args.model, args)
    language = target_language(translator, args.target_lang, Path(args.model[0]))
    bar = tqdm(total=pairs, unit="pair", file=sys.stderr, disable=args.progress is False)
    try:
        _score_files(args, translator, bar, language)
    finally:
        bar.close()
    return 0


def _score_files(args: argparse.Namespace, translator: Translator, bar, language: str | None = None) -> None:
    """Score `buffer_lines` pairs at a time into the output (a temporary file renamed when complete, or stdout);
    `language`: the target language of a multilingual model (`vaswani.cli.common.target_language`)."""
    with open(args.source, "rb") as source, open(args.target, "rb") as target, open_output(args.output) as sink:
        pairs = zip(read_lines(source, name=str(args.source)), read_lines(target, name=str(args.target)), strict=True)
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
