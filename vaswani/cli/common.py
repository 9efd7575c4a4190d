"""What several commands share beyond their options (those are in `vaswani.options`, the registry): the check of an
--output file, the output stream, the Translator of the decoding commands (translate, score, evaluate, serve), the
list of line numbers their truncation warnings show and the languages of a file of pairs (evaluate, score)."""

from __future__ import annotations

import argparse
import io
import os
import re
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from vaswani.devices import MIXED_PRECISION_TO_DTYPE
from vaswani.errors import UsageError
from vaswani.export.ctranslate2 import is_ctranslate2_folder
from vaswani.fileio import atomic_output
from vaswani.inference.translator import Translator, find_language_code, unknown_target_language
from vaswani.model_folder import hide_transformers_progress_bars
from vaswani.serve.models import LANGUAGE_CODE, pair_from_training_arguments, trained_pair


def check_input_file(path: Path, option: str) -> None:
    """An input file named by `option` ("input", "--target", ...) must exist and be a file, not a folder."""
    if path.is_dir():
        raise UsageError(f"{option} file {path} is a folder: give a file")
    if not path.is_file():
        raise UsageError(f"no such {option} file: {path}")


def check_output_file(path: Path | None, inputs: list[Path | None], model: Path | None = None, *,
                      option: str = "--output") -> None:  # fmt: skip
    """An output file must go into an existing folder and must not be one of the inputs (it would be emptied) nor a
    file of the `model` folder (when given: translate; a card is meant to go into its folder). `option`: the
    command-line option that named it, for the messages."""
    if path is None:
        return
    if not path.parent.is_dir():
        raise UsageError(f"cannot write {path}: no such folder {path.parent}")
    if path.is_dir():
        raise UsageError(f"cannot write {path}: it is a folder; give a file name")
    for source in inputs:
        if source is not None and source.exists() and path.exists() and os.path.samefile(source, path):
            raise UsageError(
                f"{option} {path} is the input file {source}: writing it would destroy the input; give another file"
            )
    if model is not None and path.exists() and model.is_dir() and path.resolve().is_relative_to(model.resolve()):
        raise UsageError(f"{option} {path} is a file of the model folder {model}: writing it would destroy the model; "
                         "give another file")  # fmt: skip


@contextmanager
def open_output(path: Path | None) -> Iterator[io.TextIOBase]:
    """A UTF-8 text stream with "\\n" line breaks: to a temporary file renamed to `path` when the block completes
    (`atomic_output`), or to stdout when `path` is None."""
    if path is not None:
        with atomic_output(path, "w", encoding="utf-8", newline="\n") as stream:
            yield stream
        return
    sys.stdout.flush()  # whatever was printed before comes first
    stream = io.TextIOWrapper(sys.stdout.buffer, encoding="utf-8", newline="\n")
    try:
        yield stream
    finally:
        stream.flush()
        stream.detach()  # leave sys.stdout open


SHOWN_LINES = 20  # line numbers a warning lists before "..."


def shown_line_numbers(numbers: Sequence[int]) -> str:
    """The line numbers a warning names: the first `SHOWN_LINES`, comma-separated, then " ..." if there are more."""
    return ", ".join(map(str, numbers[:SHOWN_LINES])) + (" ..." if len(numbers) > SHOWN_LINES else "")


def load_translator(models: Sequence[str | Path], args: argparse.Namespace, **options) -> Translator:
    """The Translator of `models` (one folder, or several: an ensemble) with the options every decoding command
    shares (--device, --max_source_length, --trust_remote_code, --backend, --mixed_precision); `options` adds a
    command's own (--parallel_batches, serve's split_batches). Loading a PyTorch folder shows none of transformers'
    progress bars; a CTranslate2 export does not import transformers for them (`LightTokenizer`)."""
    if not all(is_ctranslate2_folder(model) for model in models):
        hide_transformers_progress_bars()
    return Translator(list(models), device=args.device, max_source_length=args.max_source_length,
                      trust_remote_code=args.trust_remote_code, backend=args.backend,
                      dtype=MIXED_PRECISION_TO_DTYPE[args.mixed_precision], **options)  # fmt: skip


def check_language_code(code: str | None, flag: str) -> None:
    """A `UsageError` unless `code` (the value of `flag`) is None or a language code (`LANGUAGE_CODE`)."""
    if code is not None and not re.fullmatch(LANGUAGE_CODE, code):
        raise UsageError(f"{flag} {code!r} is not a language code: give one such as en, de or pt_BR")


def target_language(translator: Translator, language: str | None, model: Path, *, check_trained: bool = True,
                    given_by: str = "--target_lang") -> str | None:  # fmt: skip
    """What every sentence is translated into, as `Translator.translate(target_languages=...)` takes it: `language` (the
    value of --target_lang, or what `given_by` names), as the model spells it (`find_language_code`), for a
    multilingual model, which has a token for each language it translates into (`Translator.target_languages`); None
    for a model of one target language, which needs none. A language the model has no token for is a `UsageError`,
    as is (`check_trained`) another language than the one `model` was trained to translate into (its run_args.json).
    A multilingual model without a language gets a warning: each line then needs its token first."""
    known = translator.target_languages
    if language is None:
        if known:
            print(f"warning: the model translates into {', '.join(sorted(known))} (its >>xx<< tokens): without "
                  "--target_lang each line needs its language's token first (>>es<< ...), or the model picks the "
                  "language itself", file=sys.stderr)  # fmt: skip
        return None
    if known:
        code = find_language_code(language, known)
        if code is None:
            raise UsageError(unknown_target_language(f"{given_by} {language}", known))
        return code
    trained = trained_pair(model) if check_trained else None
    if trained is not None and trained[1] != language:
        raise UsageError(f"{given_by} {language}: the model {model} translates into {trained[1]} (its run_args.json) "
                         "and has no target-language tokens (>>xx<<) to choose another; leave it out")  # fmt: skip
    return None


def languages_of_pair_file(args: argparse.Namespace, flag: str) -> tuple[str, str]:
    """The languages of the pairs file that `flag` names (evaluate's --test_file, score's --pairs_file): --source_lang
    and --target_lang, by default the first model's pair (its run_args.json)."""
    if (args.source_lang is None) != (args.target_lang is None):
        given, missing = ("--source_lang", "--target_lang") if args.target_lang is None else ("--target_lang",
                                                                                              "--source_lang")  # fmt: skip
        raise UsageError(f"{given} needs {missing} beside it: give both languages of {flag}, or neither to "
                         "take the model's")  # fmt: skip
    folder = Path(args.model[0])
    if args.source_lang is not None:
        if args.source_lang == args.target_lang:
            raise UsageError(f"--source_lang and --target_lang are both {args.source_lang!r}: give the two languages "
                             f"of {flag}")  # fmt: skip
        # a model trained on another pair may still translate this one (a multilingual model): said, not refused;
        # a converted model has no run_args.json: nothing to compare
        trained = trained_pair(folder) if folder.is_dir() else None
        if trained is not None and trained != (args.source_lang, args.target_lang):
            print(f"warning: --source_lang {args.source_lang} --target_lang {args.target_lang}: the model {folder} "
                  f"was trained on {trained[0]}-{trained[1]} (its run_args.json)", file=sys.stderr)  # fmt: skip
        return args.source_lang, args.target_lang
    if not folder.is_dir():
        raise UsageError(f"--model {folder}: no such folder")
    return pair_from_training_arguments(
        folder, fix=f"give the languages of {flag}: --source_lang LANG --target_lang LANG"
    )
