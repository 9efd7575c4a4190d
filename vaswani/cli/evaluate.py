"""`vaswani evaluate`: a model's BLEU and chrF on a test file, scored as training scores its test split.

    vaswani evaluate --model DIR --test_file FILE [--source_lang LANG --target_lang LANG] [--output FILE]
                     [--translations FILE] [--num_beams 4] [--length_penalty 0.6] [--paper_decoding] [...]

The test file takes the formats of train's `--test_file`: a .json/.jsonl file of {"translation": {SRC: ..., TGT:
...}} objects, a .tsv of `source TAB reference` lines, or a prefix PATH naming PATH.SRC and PATH.TGT. It is read with
training's checks (a bad line is an `error:` naming the file and line), and pairs with an empty side are skipped and
counted, as training skips them (`vaswani.data.loading.pair_file`); `--max_test_samples N` scores the first N
(the split `test[:N]`, as training names it). The languages are `--source_lang` and
`--target_lang`, by default the model's own, from the run_args.json that `vaswani train` writes and that exports,
averages and prunes copy (a pair other than the model's is evaluated with a warning: a multilingual model
translates several).

The model is any folder `vaswani translate` takes: a trained, averaged, pruned or converted model, a CTranslate2
export, an ensemble (`--model` repeated). Its sources are translated exactly as `vaswani translate` translates them
with the same options (the same code, `translate_lines`: `--translations FILE` is line for line what `vaswani
translate` prints for the sources), and the translations are scored against the references with sacrebleu's corpus
BLEU and chrF (`vaswani.metrics.corpus_scores`, the scores and signatures of training's results.json):
`sacrebleu REFERENCES -i TRANSLATIONS -m bleu chrf -l SRC-TGT` gives the same numbers (BLEU tokenized for
the target language: `vaswani.metrics.bleu_tokenizer`).

The scores and their signatures are printed; `--output FILE` writes them as JSON with the model, the test file, the
decoding settings and the time taken. Every file is written under a temporary name and renamed when complete; an
output may not be an input (the test file) nor a file of a model folder.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from vaswani.cli.common import (
    check_output_file,
    languages_of_pair_file,
    load_translator,
    open_output,
    shown_line_numbers,
    target_language,
)
from vaswani.cli.translate import BUFFER_LINES
from vaswani.constants import EVALUATION_FORMAT
from vaswani.errors import UsageError
from vaswani.fileio import write_file_atomically
from vaswani.inference.engines import BACKENDS
from vaswani.inference.outputs import one_line
from vaswani.inference.translator import translate_lines
from vaswani.metrics import corpus_scores
from vaswani.options import add_option

if TYPE_CHECKING:
    from vaswani.data.loading import PairFile

HELP = "BLEU and chrF of a model on a test file"
DESCRIPTION = (
    "Translate the sources of --test_file as `vaswani translate` does and score the translations against its "
    "references: corpus BLEU and chrF (sacrebleu), as training reports its test split."
)
RESULTS_VERSION = 1


def add_arguments(evaluate: argparse.ArgumentParser) -> None:
    add_option(
        evaluate, "model", "evaluate", required=True, action="append",
        help="a saved model folder with its tokenizer, or a CTranslate2 export; repeat it to evaluate the ensemble "
             "of the models (PyTorch folders sharing one tokenizer)",
    )  # fmt: skip
    add_option(evaluate, "trust_remote_code", "evaluate")
    add_option(
        evaluate, "test_file", "evaluate", required=True,
        help='the test pairs, in a format of train\'s --test_file: .json/.jsonl ({"translation": {SRC: ..., TGT: '
             "...}}), .tsv (source TAB reference) or a prefix PATH of two aligned files PATH.SRC and PATH.TGT",
    )  # fmt: skip
    add_option(evaluate, "source_lang", "evaluate",
               help="the source language of --test_file (default: the model's, from its run_args.json)")  # fmt: skip
    add_option(evaluate, "target_lang", "evaluate",
               help="the target language of --test_file (default: the model's, from its run_args.json)")  # fmt: skip
    add_option(evaluate, "output", "evaluate",
               help="also write the scores as JSON to FILE, with the model, the test file and the decoding settings")  # fmt: skip
    add_option(evaluate, "max_test_samples", "evaluate",
               help="score the first N pairs of --test_file (default: all; a quick look, as train's "
                    "--max_test_samples): the output and --output name the split test[:N]")  # fmt: skip
    evaluate.add_argument(
        "--translations", type=Path, metavar="FILE",
        help="write the translations to FILE, one line per test pair (what `vaswani translate` prints for the "
             "sources)",
    )  # fmt: skip
    add_option(evaluate, "num_beams", "evaluate", default=4)
    add_option(evaluate, "length_penalty", "evaluate", default=0.6)
    add_option(evaluate, "paper_decoding", "evaluate")
    add_option(evaluate, "max_new_tokens", "evaluate", help="at most N output tokens (default: source + 50)")
    add_option(evaluate, "device", "evaluate", default="auto")
    add_option(evaluate, "threads", "evaluate")
    add_option(evaluate, "parallel_batches", "evaluate")
    add_option(evaluate, "max_tokens", "evaluate",
               help="source tokens per batch, padding included (default: as translate's, 512 per decoding thread on "
                    "a CPU, at most 4096; 4096 on a GPU)")  # fmt: skip
    add_option(evaluate, "max_source_length", "evaluate",
               help="truncate longer sources to N tokens, with a warning (default: the model's positions)")  # fmt: skip
    add_option(evaluate, "mixed_precision", "evaluate", default="no",
               help="compute type, as translate's: bf16/fp16 run PyTorch under autocast and CTranslate2 in that type; "
                    "no: float32")  # fmt: skip
    add_option(evaluate, "backend", "evaluate", choices=BACKENDS, default="auto")
    add_option(evaluate, "progress", "evaluate", help="a progress bar on stderr (default: on; --no_progress: off)")


def run(args: argparse.Namespace) -> int:
    from vaswani.data.loading import pair_file  # start-up: loads datasets

    if args.max_test_samples is not None and args.max_test_samples < 1:
        raise UsageError(f"--max_test_samples {args.max_test_samples} is not allowed; use a positive integer or leave "
                         "it unset")  # fmt: skip
    source_lang, target_lang = languages_of_pair_file(args, "--test_file")
    test = pair_file("test", args.test_file, source_lang, target_lang)
    check_outputs(args, test)
    translator = load_translator(args.model, args, parallel_batches=args.parallel_batches, threads=args.threads)
    # a multilingual model translates into the test file's target language: its token goes before every source
    args.target_lang = target_language(translator, target_lang, Path(args.model[0]), check_trained=False)
    pairs = list(itertools.islice(test, args.max_test_samples))  # islice(..., None): every pair
    translations, seconds = translate_test(args, translator, pairs)
    results = {
        "format": EVALUATION_FORMAT, "version": RESULTS_VERSION,
        **corpus_scores(translations, [reference for _, _, reference in pairs], target_lang),
        "models": [os.path.abspath(model) for model in args.model],
        "backend": translator.backend, "computes_in": translator.computes_in,
        "test_file": [os.path.abspath(path) for path in test.source.paths],
        "source_lang": source_lang, "target_lang": target_lang, "pairs": len(pairs), "skipped_pairs": test.skipped,
        "split": f"test[:{len(pairs)}]" if len(pairs) < test.pairs else "test",  # datasets' slice notation
        "decoding": {"num_beams": args.num_beams, "length_penalty": args.length_penalty,
                     "paper_decoding": args.paper_decoding, "max_new_tokens": args.max_new_tokens,
                     "max_tokens": args.max_tokens or translator.batch_tokens,
                     "max_source_length": translator.max_source_length},
        "seconds": seconds, "sentences_per_second": len(pairs) / seconds if seconds > 0 else None,
    }  # fmt: skip
    if args.translations is not None:
        with open_output(args.translations) as sink:
            sink.writelines(translation + "\n" for translation in translations)
    if args.output is not None:
        write_file_atomically(args.output, json.dumps(results, indent=1, ensure_ascii=False) + "\n")
    print(summary(results, args.test_file))
    return 0


def check_outputs(args: argparse.Namespace, test: PairFile) -> None:
    """--output and --translations: writable, not an input (the test file), not a file of a model, not each other."""
    inputs = [Path(path) for path in test.source.paths]
    for option, path in (("--output", args.output), ("--translations", args.translations)):
        for model in args.model:
            check_output_file(path, inputs=inputs, model=Path(model), option=option)
    if (
        args.output is not None
        and args.translations is not None
        and args.output.resolve() == args.translations.resolve()
    ):
        raise UsageError(f"--output and --translations are both {args.output}: give two files")


def translate_test(args: argparse.Namespace, translator, pairs: list[tuple[int, str, str]]) -> tuple[list[str], float]:
    """The translation of each pair's source (on one line each, as `vaswani translate` prints it) and the seconds
    the translating took; sources over --max_source_length are truncated with a warning naming their lines."""
    from tqdm.auto import tqdm  # start-up: the command line's parser does not load tqdm

    truncated: list[int] = []
    bar = tqdm(total=len(pairs), unit="pair", file=sys.stderr, disable=args.progress is False)
    start = time.perf_counter()
    try:
        translations = [one_line(text) for text in translate_lines(
            translator, (source for _, source, _ in pairs), buffer_lines=BUFFER_LINES, progress=bar.update,
            on_truncated_lines=truncated.extend, num_beams=args.num_beams, length_penalty=args.length_penalty,
            max_new_tokens=args.max_new_tokens, paper_decoding=args.paper_decoding, batch_tokens=args.max_tokens,
            target_languages=args.target_lang,
        )]  # fmt: skip
    finally:
        bar.close()  # first, so that a warning or an `error: ...` starts a line of its own
    seconds = time.perf_counter() - start
    if truncated:
        lines = [pairs[index - 1][0] for index in truncated]  # translate_lines counts from 1, in `pairs`' order
        print(f"warning: the sources of --test_file on line(s) {shown_line_numbers(lines)} are longer than "
              f"{translator.max_source_length} tokens and were truncated (see --max_source_length)", file=sys.stderr)  # fmt: skip
    return translations, seconds


def summary(results: dict, test_file: str) -> str:
    """What the command prints: the scores, then what was scored and how, then the signatures."""
    decoding = results["decoding"]
    skipped = f", {results['skipped_pairs']:,} with an empty side skipped" if results["skipped_pairs"] else ""
    return (
        f"BLEU {results['bleu']:.2f}  chrF {results['chrf']:.2f}\n"
        f"  {test_file}{'' if results['split'] == 'test' else ' ' + results['split']}: {results['pairs']:,} pairs "
        f"{results['source_lang']}-{results['target_lang']}{skipped}\n"
        f"  {results['backend']} ({results['computes_in']}), beam {decoding['num_beams']}, length penalty "
        f"{decoding['length_penalty']:g}{', paper decoding' if decoding['paper_decoding'] else ''}; "
        f"{results['seconds']:.1f} s\n"
        f"  BLEU signature: {results['bleu_signature']}\n"
        f"  chrF signature: {results['chrf_signature']}"
    )
