"""`vaswani translate`: sentences from stdin or --input, one per line (UTF-8), translated in the same order to stdout
or --output, one per line: an empty line gives an empty line, and a line break inside a translation becomes a space.
Sentences are batched by length (`--buffer_lines` at a time; typed at a terminal, each line is translated as it
comes), stdout is flushed after every translation, and a progress bar on stderr follows `--input` files. Inputs
longer than `--max_source_length` tokens (default: the model's max_position_embeddings) are truncated, with a warning
naming the line numbers. The engine is `vaswani.inference` (translator.py, engines.py); `--nbest N`, `--scores`, `--alignment`
and `--output_format jsonl` print n-best lists, model scores and word alignments in the formats of
`vaswani.inference.outputs`. `--backend` picks PyTorch or CTranslate2 (by default: CTranslate2 for an exported folder),
`--mixed_precision` the compute type.

Decoding for production (docs/translation.md): `--prefix FILE` (one target prefix per input line), `--constraints
FILE` (target phrases that must appear, ` ||| `-separated, one line per input line), `--input_format jsonl` (objects
with "text" and optional "prefix" / "constraints" fields), and `--model A --model B ...` (an ensemble). A prefix or
constraint file with fewer or more lines than the input, an empty phrase, a prefix that does not fit
`--max_new_tokens`, constraints or an ensemble on a CTranslate2 folder, or models with different tokenizers are an
`error:`; a line whose constraints do not fit its output length is translated with a warning naming them.
"""

from __future__ import annotations

import argparse
import io
import itertools
import sys
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
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
from vaswani.inference.engines import BACKENDS, Sampling
from vaswani.inference.outputs import OUTPUT_FORMATS, one_line, output_handler
from vaswani.inference.text import SplitText, split_text
from vaswani.inference.translator import read_jsonl_requests, read_lines, translate_lines
from vaswani.options import add_option, non_negative_int, positive_float, positive_int, probability
from vaswani.serve.models import trained_pair

HELP = "translate sentences, one per line"
INPUT_FORMATS = ("text", "jsonl")
BUFFER_LINES = 10000  # lines sorted by length and translated at a time (--buffer_lines), from a file or a pipe
DESCRIPTION = "Translate sentences from stdin or --input (one per line, UTF-8) into the same number of lines."

# The options of `vaswani translate` of its own (the shared ones come from the registry, `vaswani.options`), in the
# order --help lists them after those.
TRANSLATE_OPTIONS = {
    "--nbest": dict(
        type=positive_int, default=1, metavar="N",
        help="print the N best translations of each line (needs --num_beams >= N; with --do_sample, N samples), as "
             "`LINE ||| TRANSLATION` lines",
    ),
    "--scores": dict(
        action="store_true",
        help="add each translation's score: sum of token log-probabilities / length ** length_penalty "
             "(`LINE ||| TRANSLATION ||| SCORE`)",
    ),
    "--alignment": dict(
        action="store_true",
        help="add word alignments `i-j` (source word i, target word j, from 0) from the last decoder layer's "
             "encoder-decoder attention averaged over heads (each target subword -> its most attended source subword)",
    ),
    "--prefix": dict(
        type=Path, metavar="FILE",
        help="target prefixes, one line per input line (an empty line for none): each translation starts with its "
             "line's prefix and continues it, also inside a word",
    ),
    "--constraints": dict(
        type=Path, metavar="FILE",
        help="target phrases that must appear in the translation (terminology), one line per input line, phrases "
             "separated by ' ||| ' (an empty line for none); PyTorch only",
    ),
    "--do_sample": dict(
        action="store_true",
        help="draw each translation at random from the model's distribution instead of beam search (sampled "
             "back-translation: Edunov et al., 2018); with --nbest N, N independent samples per line; one beam, one "
             "model, no --prefix or --constraints",
    ),
    "--top_k": dict(
        type=non_negative_int, metavar="K",
        help="--do_sample: draw each token among the K most probable ones only (default: 0, every token)",
    ),
    "--top_p": dict(
        type=probability, metavar="P",
        help="--do_sample: draw each token among the fewest most probable ones whose probabilities add up to P "
             "(nucleus sampling; default: 1, every token)",
    ),
    "--temperature": dict(
        type=positive_float, metavar="T",
        help="--do_sample: divide the logits by T before drawing (below 1: closer to the best token; default: 1, the "
             "model's own distribution)",
    ),
    "--split_sentences": dict(
        action="store_true",
        help="cut each line into sentences (after . ! ? and the like, as `vaswani serve` cuts a text), translate them "
             "one by one and put the translations back in the line with its spacing: a line that holds a paragraph "
             "(the model was trained on sentences); plain text output only",
    ),
    "--input_format": dict(
        choices=INPUT_FORMATS, default="text",
        help='text (one sentence per line) or jsonl (one JSON object per line: {"text": ..., "prefix": ..., '
             '"constraints": [...], "target_lang": ...}, where "target_lang" chooses the language of a multilingual '
             'model for that line, as --target_lang does for every line without one)',
    ),
}  # fmt: skip


def add_arguments(translate: argparse.ArgumentParser) -> None:
    add_option(
        translate, "model", "translate", required=True, action="append",
        help="a saved model folder with its tokenizer (local); repeat it (--model A --model B) to decode with the "
             "ensemble of the models (the mean of their log-probabilities; PyTorch folders sharing one tokenizer)",
    )  # fmt: skip
    add_option(translate, "trust_remote_code", "translate")
    add_option(translate, "input", "translate", help="read sentences from FILE (default: stdin)")
    add_option(translate, "output", "translate", help="write translations to FILE (default: stdout)")
    add_option(translate, "num_beams", "translate", help="beam size (default: 4, the paper's; 1 with --do_sample)")
    add_option(translate, "length_penalty", "translate", default=0.6)
    add_option(translate, "max_new_tokens", "translate", help="at most N output tokens (default: source + 50)")
    add_option(translate, "device", "translate", default="auto")
    add_option(
        translate,
        "threads",
        "translate",
        help="CPU threads for decoding (default: PyTorch's, one per core unless OMP_NUM_THREADS says otherwise)",
    )
    add_option(translate, "parallel_batches", "translate",
               help="ctranslate2 backend: decode each batch as N parts at once, each on threads / N cores (default: "
                    "one part per core on CPU, CTranslate2's throughput setting; 1 on GPU)")  # fmt: skip
    add_option(translate, "max_tokens", "translate",
               help="source tokens per batch, padding included (default: 512 per decoding thread on a CPU, where "
                    "beam search runs faster in small batches, at most 4096; 4096 on a GPU)")  # fmt: skip
    add_option(
        translate,
        "max_source_length",
        "translate",
        help="truncate longer inputs to N tokens, with a warning (default: the model's max_position_embeddings)",
    )
    add_option(
        translate,
        "progress",
        "translate",
        help="a progress bar on stderr (default: for --input files; --no_progress: never)",
    )
    add_option(
        translate,
        "mixed_precision",
        "translate",
        default="no",
        help="compute type: bf16/fp16 run PyTorch under autocast and CTranslate2 in that type; refused where the "
        "device has no native support (on CPU: bf16 needs AVX512-BF16 or AMX); no: float32",
    )
    add_option(
        translate,
        "output_format",
        "translate",
        default="text",
        choices=OUTPUT_FORMATS,
        help="text (one line per translation, or ` ||| `-separated fields with --nbest/--scores/--alignment) or "
        "jsonl (one JSON object per input line: {line, hypotheses: [{text, score, alignment}]})",
    )
    add_option(translate, "paper_decoding", "translate")
    add_option(translate, "buffer_lines", "translate", default=None,
               help=f"lines read, sorted by length and translated at a time (default: {BUFFER_LINES}; 1 when the "
               "input is a terminal, so that each line typed is translated at once)")  # fmt: skip
    add_option(translate, "backend", "translate", choices=BACKENDS, default="auto")
    for flag, settings in TRANSLATE_OPTIONS.items():
        translate.add_argument(flag, **settings)
    add_option(translate, "source_lang", "translate",
               help="--split_sentences: the language whose abbreviations do not end a sentence (Moses' non-breaking "
                    "prefixes: 'Dr.', 'z. B.'; default: the model's source language from its run_args.json, "
                    "English's where it has none)")  # fmt: skip
    add_option(translate, "target_lang", "translate",
               help="the language to translate into, for a multilingual model (one with a token per target language, "
                    "'>>es<<': multilingual OPUS-MT models): its token goes before every line (every sentence with "
                    "--split_sentences); a model of one target language needs none (one it was not trained for, by "
                    "its run_args.json, is refused)")  # fmt: skip
    add_option(translate, "seed", "translate",
               help="--do_sample: seed the random draws, so that the same input, model and options give the same "
                    "samples again (decoding then runs one batch at a time: --parallel_batches 1)")  # fmt: skip


def run(args: argparse.Namespace) -> int:
    from tqdm.auto import tqdm

    for path, flag in ((args.input, "input"), (args.prefix, "--prefix"), (args.constraints, "--constraints")):
        if path is not None:
            check_input_file(path, flag)
        if path is not None and flag != "input" and args.input_format == "jsonl":
            raise UsageError(f"{flag} FILE and --input_format jsonl do not go together: put a "
                             f'"{flag[2:]}" field in the JSON objects, or give text input')  # fmt: skip
    for model in args.model:
        check_output_file(args.output, inputs=[args.input, args.prefix, args.constraints], model=model)
    check_split_sentences(args)
    check_language_code(args.target_lang, "--target_lang")
    sampling = resolve_sampling(args)  # None: beam search
    if sampling is None and args.nbest > args.num_beams:
        raise UsageError(f"--nbest {args.nbest} needs at least as many beams: add --num_beams {args.nbest}")
    typed = args.input is None and sys.stdin.isatty()  # a person at a terminal: each line translated as it comes
    if args.buffer_lines is None:
        args.buffer_lines = 1 if typed else BUFFER_LINES  # else length batching over many lines
    translator = load_translator(args.model, args, parallel_batches=args.parallel_batches, threads=args.threads,
                                 seed=args.seed)  # fmt: skip
    language = target_language(translator, args.target_lang, Path(args.model[0]))
    if typed:
        print("Type a sentence and press Enter to translate it; Ctrl-D ends.", file=sys.stderr)
    # n-best lists, scores, alignments or JSON lines: the lines of an output handler (vaswani.inference.outputs)
    detailed = args.nbest > 1 or args.scores or args.alignment or args.output_format == "jsonl"
    output = output_handler(args.output_format, scores=args.scores, alignment=args.alignment) if detailed else None

    show_progress = args.progress or (args.input is not None and args.progress is None)
    bar = tqdm(total=count_lines(args.input) if show_progress and args.input is not None else None, unit="line", file=sys.stderr,
               disable=not show_progress)  # fmt: skip

    def warn_truncated(line_numbers: list[int]) -> None:
        message = (f"warning: line(s) {shown_line_numbers(line_numbers)} are longer than {translator.max_source_length} tokens and were "
                   "truncated (see --max_source_length)")  # fmt: skip
        tqdm.write(message, file=sys.stderr)

    def warn_unmet(line: int, phrases: list[str]) -> None:
        tqdm.write(f"warning: the translation of line {line} lacks the constraint(s) {', '.join(map(repr, phrases))}"
                   " (the output length did not allow them; see --max_new_tokens)", file=sys.stderr)  # fmt: skip

    # The input is decoded line by line (an error names the line); the output goes to a temporary file renamed
    # when complete, so an error or a kill never leaves a half-written --output.
    try:
        _translate_stream(args, translator, bar, warn_truncated, warn_unmet, output, sampling, language)
    finally:
        bar.close()  # first, so that an `error: ...` starts a line of its own
    return 0


def check_split_sentences(args: argparse.Namespace) -> None:
    """--split_sentences gives one plain line per input line, made of its sentences' best translations: what needs a
    line's own translation (its n-best list, score, alignment, JSON record) or a line's prefix or constraints (a
    sentence's are not known) is refused with it."""
    check_language_code(args.source_lang, "--source_lang")
    if not args.split_sentences:
        if args.source_lang is not None:
            raise UsageError("--source_lang says whose abbreviations --split_sentences keeps inside a sentence: add "
                             "--split_sentences, or leave --source_lang out")  # fmt: skip
        return
    refused = [flag for flag, given in (
        ("--nbest", args.nbest > 1), ("--scores", args.scores), ("--alignment", args.alignment),
        ("--output_format jsonl", args.output_format == "jsonl"), ("--prefix", args.prefix is not None),
        ("--constraints", args.constraints is not None), ("--input_format jsonl", args.input_format == "jsonl"),
    ) if given]  # fmt: skip
    if refused:
        raise not_with("--split_sentences", refused,
                       "a line's sentences are translated one by one and put back as one plain line")  # fmt: skip


def not_with(option: str, refused: list[str], why: str) -> UsageError:
    """The error of `option` given with the `refused` options, which it cannot work with (`why`)."""
    return UsageError(f"{option} does not go with {' or '.join(refused)} ({why}): leave "
                      f"{'it' if len(refused) == 1 else 'them'} out, or {option}")  # fmt: skip


def sentence_language(args: argparse.Namespace) -> str | None:
    """The language whose abbreviations --split_sentences keeps inside a sentence (`split_text`): --source_lang, else
    the first model's source language (its run_args.json: a model trained here, and its exports, averages and
    prunings), else None (English's, as Moses does)."""
    if args.source_lang is not None:
        return args.source_lang
    trained = trained_pair(Path(args.model[0]))  # None: no run_args.json (a converted model), or no usable pair
    return None if trained is None else trained[0]


def resolve_sampling(args: argparse.Namespace) -> Sampling | None:
    """--do_sample and its options, checked against the rest of the command line (and --num_beams resolved: 4, or 1
    when sampling): the `Sampling` to decode with, or None for beam search."""
    given = [flag for flag in ("--top_k", "--top_p", "--temperature", "--seed") if getattr(args, flag[2:]) is not None]
    if not args.do_sample:
        if given:
            one = len(given) == 1
            raise UsageError(f"{' and '.join(given)}: {'it sets' if one else 'they set'} random sampling, which "
                             f"--do_sample turns on: add --do_sample, or leave {'it' if one else 'them'} out (beam "
                             "search draws nothing at random)")  # fmt: skip
        args.num_beams = 4 if args.num_beams is None else args.num_beams
        return None
    refused = [flag for flag, value in (("--paper_decoding", args.paper_decoding), ("--prefix", args.prefix),
                                        ("--constraints", args.constraints)) if value]  # fmt: skip
    if refused:
        raise not_with("--do_sample", refused, "they need the beam search")
    if args.num_beams not in (None, 1):
        raise UsageError(f"--do_sample draws each token at random instead of searching: --num_beams {args.num_beams} "
                         "does not go with it (leave --num_beams out: 1 with --do_sample)")  # fmt: skip
    if len(args.model) > 1:
        raise UsageError("--do_sample samples from one model: an ensemble (--model given twice) decodes with beam "
                         "search only")  # fmt: skip
    if args.seed is not None:
        if args.parallel_batches not in (None, 1):
            raise UsageError(f"--seed gives the same samples again only when one batch is decoded at a time: "
                             f"--parallel_batches {args.parallel_batches} does not go with it (leave it out: 1 with "
                             "--seed)")  # fmt: skip
        args.parallel_batches = 1
    args.num_beams = 1
    return Sampling(
        top_k=0 if args.top_k is None else args.top_k,
        top_p=1.0 if args.top_p is None else args.top_p,
        temperature=1.0 if args.temperature is None else args.temperature,
    )


def _translate_stream(args: argparse.Namespace, translator, bar, warn_truncated, warn_unmet, output,
                      sampling: Sampling | None = None, language: str | None = None) -> None:  # fmt: skip
    """Translate the input line by line into the output: plain lines, or `output`'s lines (n-best, scores, ...);
    `language`: the target language of a multilingual model (`vaswani.cli.common.target_language`)."""
    with _open_input(args.input) as source, _open_input_file(args.prefix) as prefix_file, \
            _open_input_file(args.constraints) as constraints_file, open_output(args.output) as sink:  # fmt: skip
        lines, requests = _requests(args, source, prefix_file, constraints_file, translator, language)
        requests.setdefault("target_languages", language)
        split = SentenceSplit(lines, sentence_language(args)) if args.split_sentences else None
        translations = translate_lines(
            translator,
            lines if split is None else split.sentences(),
            **requests,
            on_unmet_line=warn_unmet,
            buffer_lines=args.buffer_lines,
            progress=bar.update if split is None else None,  # lines are counted as they are put back
            on_truncated_lines=warn_truncated if split is None else split.on_truncated(warn_truncated),
            num_beams=args.num_beams,
            length_penalty=args.length_penalty,
            max_new_tokens=args.max_new_tokens,
            paper_decoding=args.paper_decoding,
            batch_tokens=args.max_tokens,
            sampling=sampling,
            **({"hypotheses": True, "nbest": args.nbest, "scores": args.scores, "alignment": args.alignment}
               if output is not None else {}),
        )  # fmt: skip
        if split is not None:
            translations = split.lines(translations, bar.update)
        for index, translation in enumerate(translations):
            if output is not None:
                for line in output.lines(index, translation):
                    sink.write(line + "\n")
            else:
                sink.write(one_line(translation) + "\n")
            if args.output is None:  # a person at a terminal, or a program that sends a line and waits for its
                sink.flush()  # translation (--buffer_lines 1), sees each one as soon as it is made


class SentenceSplit:
    """--split_sentences: the input lines cut into sentences (`vaswani.inference.text.split_text`, the server's rule),
    fed to `translate_lines` as one stream, and the translations put back line by line. A line without a sentence (a
    blank one) stands in the stream as one blank sentence, which translates to nothing, so that every line has its
    place; each sentence remembers its line, so that a warning names the line."""

    def __init__(self, lines: Iterable[str], language: str | None = None):
        self._lines = lines
        self._language = language  # whose abbreviations do not end a sentence (`sentence_language`)
        self._pending: deque[SplitText] = deque()  # the lines whose sentences are in the stream, in order
        self._line_of: dict[int, int] = {}  # a sentence's number in the stream (from 1) -> its line's (from 1)
        self._sentences = 0

    def sentences(self) -> Iterator[str]:
        for number, line in enumerate(self._lines, 1):
            split = split_text(line, self._language)
            self._pending.append(split)
            for sentence in split.sentences or [""]:
                self._sentences += 1
                self._line_of[self._sentences] = number
                yield sentence

    def on_truncated(self, warn: Callable[[list[int]], None]) -> Callable[[list[int]], None]:
        """`warn` called with the line numbers of truncated sentences, each line once."""
        return lambda numbers: warn(sorted({self._line_of[number] for number in numbers}))

    def lines(self, translations: Iterable[str], progress: Callable[[int], None]) -> Iterator[str]:
        """Each line with its sentences' translations in their places, as soon as its last sentence is translated."""
        done, consumed = [], 0
        for translation in translations:
            done.append(translation)
            while self._pending and len(done) >= max(1, len(self._pending[0].sentences)):
                split = self._pending.popleft()
                count = max(1, len(split.sentences))
                yield split.join(done[:count])  # a blank line's layout places no sentence: the stand-in is left out
                for _ in range(count):
                    consumed += 1
                    del self._line_of[consumed]
                done = done[count:]
                progress(1)


def _requests(args: argparse.Namespace, source, prefix_file, constraints_file, translator,
              language: str | None) -> tuple[Iterator[str], dict]:  # fmt: skip
    """The sentences, and `translate_lines`' per-line streams where there are any (`prefixes`, `constraints`): from text
    lines with `--prefix FILE` and `--constraints FILE`, or from the objects of JSON-lines input, which also give
    each line's target language (`_line_languages`; `language`, from --target_lang, where a line names none)."""
    name = str(args.input or "stdin")
    if args.input_format == "jsonl":
        records = itertools.tee(read_jsonl_requests(read_lines(source, name=name), name=name), 4)
        texts, prefixes, constraints, languages = records
        return (r["text"] for r in texts), {
            "prefixes": (r["prefix"] for r in prefixes),
            "constraints": (r["constraints"] for r in constraints),
            "target_languages": _line_languages(languages, language, translator, Path(args.model[0]), name),
        }
    requests = {}
    if prefix_file is not None:
        requests["prefixes"] = read_lines(prefix_file, name=str(args.prefix))
    if constraints_file is not None:
        lines = read_lines(constraints_file, name=str(args.constraints))
        requests["constraints"] = (line.split(" ||| ") if line else [] for line in lines)
    return read_lines(source, name=name), requests


def _line_languages(records: Iterator[dict], language: str | None, translator, model: Path,
                    name: str) -> Iterator[str | None]:  # fmt: skip
    """Each JSON line's "target_lang", checked as --target_lang is (`target_language`, once per language; the error
    names the first line that gives it), or `language` where the line has none."""
    checked: dict[str, str | None] = {}
    for number, record in enumerate(records, 1):
        code = record["target_lang"]
        if code is None:
            yield language
            continue
        if code not in checked:
            given_by = f'{name} line {number}: "target_lang"'
            check_language_code(code, given_by)
            checked[code] = target_language(translator, code, model, given_by=given_by)
        yield checked[code]


@contextmanager
def _open_input_file(path: Path | None) -> Iterator[io.BufferedIOBase | None]:
    """The bytes of `path`, or None when it is None."""
    if path is None:
        yield None
        return
    with open(path, "rb") as stream:
        yield stream


@contextmanager
def _open_input(path: Path | None) -> Iterator[io.BufferedIOBase]:
    """The bytes of `path`, or of stdin when it is None (decoded line by line by `read_lines`)."""
    if path is None:
        yield sys.stdin.buffer
        return
    with open(path, "rb") as stream:
        yield stream
