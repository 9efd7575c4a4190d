"""Parallel data for training and evaluation: local files or a `datasets` source, checked before training starts.

Sources
    Files, one per split (``--train_file``, ``--validation_file``, ``--test_file``), in one of three formats chosen by
    the file name:

    - ``.json`` / ``.jsonl``: one JSON object per line, ``{"translation": {"en": "...", "de": "..."}}`` (the Hugging
      Face translation layout; other keys and other languages are ignored);
    - ``.tsv``: one pair per line, ``source<TAB>target`` (exactly one TAB); a first line that names the two columns
      by the languages (``en<TAB>de``, as pandas writes a header) is skipped;
    - anything else is a prefix PATH naming two aligned plain-text files, PATH.<source_lang> and PATH.<target_lang>
      (fairseq's convention: line i of one is the translation of line i of the other).

    Or ``--dataset_name`` (with ``--dataset_config_name``): ``"demo"`` for the built-in English-German dataset of
    `vaswani.data.demo`, any other name goes to `datasets.load_dataset` (the Hub when online, the local cache when
    offline). Files given for a split replace that split of the dataset. Without a validation split, `validation_size`
    random pairs (seeded) are carved out of the training data.

What comes out
    A `datasets.DatasetDict` with "train" and, when available, "validation" and "test"; each split has exactly one
    column, "translation", holding ``{source_lang: str, target_lang: str}``. Files are read as strict UTF-8, line by
    line (lines end at "\\n"; a trailing "\\r" and a UTF-8 byte-order mark are removed, all other whitespace is kept),
    and written to an Arrow cache with `datasets.Dataset.from_generator` (memory-mapped, so corpora of millions of
    lines fit; the cache key includes each file's size and modification time, so an edited file is read again).

Bad input
    User mistakes raise `DataError` (a `ValueError`) whose message names the file, the line where it helps, the
    problem and the fix; train.py prints it without a traceback. Everything is checked before any data goes into a
    dataset: first that every file of every split exists, then the encoding and structure of each file (one full
    pass). A pair with an empty or whitespace-only side is not an error: it is skipped and counted in the
    `DataReport`, with up to five example locations (unless a split has no pair left, which is an error).
"""

from __future__ import annotations

import hashlib
import json
import os
import random
from collections.abc import Iterator
from dataclasses import dataclass, field
from itertools import zip_longest
from pathlib import Path

import datasets
import numpy as np
import pyarrow.compute as pc

from vaswani.errors import DataError
from vaswani.fileio import LONE_SURROGATE_FIX, conversion_hint, count_lines, decode_line, lone_surrogate

SPLITS = ("train", "validation", "test")
JSON_SUFFIXES = (".json", ".jsonl")
TSV_SUFFIXES = (".tsv",)
MAX_EXAMPLES = 5
"""How many example locations of skipped pairs the report keeps per split."""
READER_VERSION = 2
"""Part of the cache key of datasets built from files: bump it when the reading rules change."""
JSON_LAYOUT = 'one JSON object per line, {"translation": {"%s": "...", "%s": "..."}}'
NO_TRAINING_DATA = (
    "no training data: pass --train_file or --dataset_name (or --dataset_name demo for the built-in dataset)"
)


# ---------------------------------------------------------------------------------------------------------------------
# Report
# ---------------------------------------------------------------------------------------------------------------------


@dataclass
class SplitReport:
    """What happened to one split.

    Attributes:
        source: where the pairs came from ("data/train.en + data/train.de", "dataset wmt14 (de-en), split train").
        pairs_read: pairs (lines, rows) in the source.
        pairs_kept: pairs in the returned split (after skipping empty pairs and carving out validation pairs).
        pairs_skipped: pairs skipped because a side was empty or whitespace-only.
        skipped_examples: up to `MAX_EXAMPLES` locations of skipped pairs ("train.de:17", "row 3").
        moved_to_validation: pairs carved out of this (training) split to make the validation split.
        header_skipped: line 1 of a .tsv file named the two languages (a header), not a pair.
    """

    source: str
    pairs_read: int = 0
    pairs_kept: int = 0
    pairs_skipped: int = 0
    skipped_examples: list[str] = field(default_factory=list)
    moved_to_validation: int = 0
    header_skipped: bool = False

    def add_skipped(self, location: str) -> None:
        self.pairs_skipped += 1
        if len(self.skipped_examples) < MAX_EXAMPLES:
            self.skipped_examples.append(location)

    def summary(self, name: str) -> str:
        """One line: "train: 19,998 pairs from train.jsonl (20,000 read, 2 skipped with an empty side: ...)"."""
        line = f"{name}: {_pair_count(self.pairs_kept)} from {self.source}"
        details = []
        if self.pairs_skipped:
            more = ", ..." if self.pairs_skipped > len(self.skipped_examples) else ""
            details.append(
                f"{self.pairs_read:,} read, {self.pairs_skipped:,} skipped because a side is empty: "
                f"{', '.join(self.skipped_examples)}{more}"
            )
        if self.header_skipped:
            details.append("its header line skipped")
        if self.moved_to_validation:
            details.append(f"{self.moved_to_validation:,} moved to validation")
        return f"{line} ({'; '.join(details)})" if details else line


@dataclass
class DataReport:
    """Per-split counts and sources of `load_translation_splits`, plus notes on decisions taken (for the log).

    Attributes:
        source_lang, target_lang: the language pair.
        splits: split name -> `SplitReport`, in the order train, validation, test.
        notes: other things the user should know ("validation carved out of train", "dataset_name not used").
    """

    source_lang: str
    target_lang: str
    splits: dict[str, SplitReport] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def summary(self) -> str:
        """One line per split, then one per note."""
        lines = [self.splits[name].summary(name) for name in SPLITS if name in self.splits]
        return "\n".join(lines + [f"note: {note}" for note in self.notes])


def _pair_count(count: int) -> str:
    return f"{count:,} pair{'' if count == 1 else 's'}"


# ---------------------------------------------------------------------------------------------------------------------
# Public API
# ---------------------------------------------------------------------------------------------------------------------


def load_translation_splits(
    *,
    train_file: str | os.PathLike | None = None,
    validation_file: str | os.PathLike | None = None,
    test_file: str | os.PathLike | None = None,
    dataset_name: str | None = None,
    dataset_config_name: str | None = None,
    source_lang: str = "en",
    target_lang: str = "de",
    validation_size: int = 500,
    seed: int = 0,
    cache_dir: str | os.PathLike | None = None,
) -> tuple[datasets.DatasetDict, DataReport]:
    """Load the parallel data of a training run, checking it before any of it goes into a dataset.

    Args:
        train_file, validation_file, test_file: a .json/.jsonl file, a .tsv file or a prefix PATH of aligned files
            PATH.<source_lang> and PATH.<target_lang> (see the module docstring). A file replaces the same split of
            `dataset_name`.
        dataset_name: "demo" for the built-in English-German dataset, else a name or path for `datasets.load_dataset`.
        dataset_config_name: its configuration ("de-en" for wmt14), if it has several.
        source_lang, target_lang: language codes, the keys of the "translation" dicts and the file suffixes.
        validation_size: pairs carved out of the training data (seed `seed`) when no validation split is available;
            0 to go without a validation split.
        seed: seed of that carving.
        cache_dir: cache folder for `datasets` (default: ``HF_DATASETS_CACHE``).

    Returns:
        ``(splits, report)``: "train" and, when available, "validation" and "test", each a `datasets.Dataset` with one
        column "translation" of ``{source_lang: text, target_lang: text}``; and the `DataReport` to log.

    Raises:
        DataError: for missing or malformed input, with the file, line, problem and fix in the message.
    """
    if source_lang == target_lang:
        raise DataError(
            f"source_lang and target_lang are both {source_lang!r}: pass two different languages "
            "(--source_lang en --target_lang de)."
        )
    if validation_size < 0:
        raise DataError(f"validation_size must be 0 or more, got {validation_size}.")
    files = {
        split: os.fspath(path)
        for split, path in zip(SPLITS, (train_file, validation_file, test_file), strict=True)
        if path is not None and os.fspath(path) != ""
    }
    if "train" not in files and dataset_name is None:
        raise DataError(NO_TRAINING_DATA)
    cache_dir = None if cache_dir is None else os.fspath(cache_dir)
    report = DataReport(source_lang, target_lang)

    # 1. Files: every file of every split must exist, then each is read once to check its encoding and structure.
    file_sources = resolve_files(files, source_lang, target_lang)
    for split, source in file_sources.items():
        report.splits[split] = check_file(source, source_lang, target_lang)

    # 2. The named dataset, for the splits that no file replaces.
    splits: dict[str, datasets.Dataset] = {}
    if dataset_name is not None:
        wanted = [split for split in SPLITS if split not in file_sources]
        if not wanted:
            report.notes.append(f"dataset {dataset_name!r} not used: files were given for every split")
        else:
            named = load_named_dataset(dataset_name, dataset_config_name, source_lang, target_lang, cache_dir)
            if "train" in wanted and "train" not in named:
                raise DataError(
                    f"dataset {dataset_name!r} has no 'train' split (splits: {sorted(named)}): "
                    "pass --train_file for the training data."
                )
            for split in wanted:
                if split in named:
                    description = _describe_dataset(dataset_name, dataset_config_name, split)
                    splits[split], report.splits[split] = drop_empty_pairs(
                        named[split], source_lang, target_lang, description
                    )

    carve = "validation" not in file_sources and "validation" not in splits and validation_size > 0
    if carve:
        train = report.splits["train"]
        _check_validation_size(validation_size, train.pairs_read - train.pairs_skipped)

    # 3. Only now, with everything checked, the files go into (cached, memory-mapped) datasets.
    for split, source in file_sources.items():
        splits[split] = dataset_from_file(source, source_lang, target_lang, cache_dir)

    # 4. A validation split carved out of the training data if there is none.
    if carve:
        splits["train"], splits["validation"] = carve_validation(splits["train"], validation_size, seed)
        report.splits["train"].moved_to_validation = validation_size
        report.splits["validation"] = SplitReport(
            source=f"the training data (random pairs, seed {seed})",
            pairs_read=validation_size,
        )
        report.notes.append(
            f"no validation data given: set aside {_pair_count(validation_size)} of the training data for validation "
            "(--validation_file to use your own, --validation_size to change the number)"
        )
    for split, dataset in splits.items():
        report.splits[split].pairs_kept = len(dataset)
    report.splits = {split: report.splits[split] for split in SPLITS if split in report.splits}
    return datasets.DatasetDict({split: splits[split] for split in SPLITS if split in splits}), report


# ---------------------------------------------------------------------------------------------------------------------
# Files
# ---------------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class FileSource:
    """A split stored in files.

    Attributes:
        split: "train", "validation" or "test".
        kind: "json" (one JSON object per line), "tsv" (source TAB target) or "prefix" (two aligned text files).
        paths: the .json/.jsonl/.tsv file, or the source and target files of a prefix.
    """

    split: str
    kind: str
    paths: tuple[str, ...]

    def describe(self) -> str:
        return " + ".join(self.paths)

    def location(self, line_number: int, source_empty: bool) -> str:
        """Where an empty pair is, as ``file:line`` (for a prefix, the file whose side is empty)."""
        path = self.paths[0 if source_empty or self.kind != "prefix" else 1]
        return f"{os.path.basename(path)}:{line_number}"


def resolve_files(files: dict[str, str], source_lang: str, target_lang: str) -> dict[str, FileSource]:
    """Find the files of every split; raise one `DataError` listing every missing file of every split."""
    sources, problems = {}, []
    for split, path in files.items():
        try:
            sources[split] = resolve_file(split, path, source_lang, target_lang)
        except DataError as error:
            problems.append(str(error))
    if problems:
        raise DataError("\n".join(problems))
    return sources


def resolve_file(split: str, path: str, source_lang: str, target_lang: str) -> FileSource:
    """The `FileSource` that `path` names: its format from the extension, else a prefix of two aligned files."""
    flag = f"--{split}_file"
    suffix = Path(path).suffix.lower()
    if suffix in JSON_SUFFIXES + TSV_SUFFIXES:
        if not os.path.exists(path):
            raise DataError(f"{flag}: file not found: {path}. Check the path.")
        if not os.path.isfile(path):
            raise DataError(f"{flag}: {path} is not a file.")
        return FileSource(split, "json" if suffix in JSON_SUFFIXES else "tsv", (path,))

    side_paths = (f"{path}.{source_lang}", f"{path}.{target_lang}")
    missing = [side for side in side_paths if not os.path.isfile(side)]
    if not missing:
        return FileSource(split, "prefix", side_paths)
    message = f"{flag} {path}: {' and '.join(missing)} not found"
    if len(missing) == 1:
        message += f" ({next(side for side in side_paths if side not in missing)} exists)"
    message += (
        f". A path without a .json, .jsonl or .tsv extension is a prefix PATH naming two aligned text files, "
        f"PATH.{source_lang} and PATH.{target_lang}."
    )
    for lang in (source_lang, target_lang):
        if path.endswith(f".{lang}"):
            message += f" Pass the prefix without the language suffix: {flag} {path[: -len(lang) - 1]}"
            break
    else:
        if os.path.isfile(path):
            message += (
                f" {path} exists, but {suffix or 'a file without an extension'} is not a known format: use .json "
                f"or .jsonl ({JSON_LAYOUT % (source_lang, target_lang)}), .tsv (source TAB target) or the two "
                "aligned files."
            )
    raise DataError(message)


def check_file(source: FileSource, source_lang: str, target_lang: str, require_pair: bool = True) -> SplitReport:
    """Read `source` once, checking encoding and structure; count its pairs and its empty pairs.

    Raises `DataError` for the first bad line, and (`require_pair`) when no pair is left after skipping the empty ones.
    """
    report = SplitReport(source=source.describe())
    for line_number, source_text, target_text in read_pairs(source, source_lang, target_lang):
        report.header_skipped |= report.pairs_read == 0 and line_number == 2  # line 1 yields a pair, or is a header
        report.pairs_read += 1
        source_empty = is_empty(source_text)
        if source_empty or is_empty(target_text):
            report.add_skipped(source.location(line_number, source_empty))
    if require_pair and report.pairs_read == report.pairs_skipped:
        raise no_pair_error(f"--{source.split}_file: {source.describe()}", report.pairs_read, "line")
    return report


def no_pair_error(description: str, count: int, unit: str) -> DataError:
    """The one wording for pairs of which none has text on both sides (`count` `unit`s read: the lines of a file
    that `check_file` reads, the rows of a named dataset that `drop_empty_pairs` reads): training's splits and
    evaluate's --test_file (score's --pairs_file scores empty pairs too)."""
    problem = "is empty" if count == 0 else f"has only empty pairs ({count:,} {unit}{'' if count == 1 else 's'})"
    return DataError(f"{description} {problem}: give at least one pair in which both sides have text.")


def read_pairs(source: FileSource, source_lang: str, target_lang: str) -> Iterator[tuple[int, str, str]]:
    """Yield ``(line_number, source_text, target_text)`` for every line of `source` (empty pairs included).

    Line numbers count from 1. Raises `DataError` for a line that does not fit the format.
    """
    if source.kind == "json":
        yield from _read_json_lines(source.paths[0], source_lang, target_lang)
    elif source.kind == "tsv":
        yield from _read_tsv(source.paths[0], source_lang, target_lang)
    else:
        yield from _read_aligned(*source.paths)


def is_empty(text: str) -> bool:
    """Whether a side of a pair is empty or whitespace-only (then the pair is skipped)."""
    return not text or text.isspace()


def read_lines(path: str) -> Iterator[str]:
    """Yield the lines of a UTF-8 text file without their terminator ("\\n" or "\\r\\n"), one at a time.

    Lines end at "\\n" only (as for ``wc -l`` and fairseq), so aligned files count lines the same way whatever else
    they contain. A UTF-8 byte-order mark at the start is removed. Raises `DataError` with the line number and the
    byte offset of the first byte that is not UTF-8.
    """
    offset = 0  # byte offset of the current line in the file
    with open(path, "rb") as stream:
        for line_number, raw in enumerate(stream, start=1):
            try:
                text = decode_line(raw, line_number)
            except UnicodeDecodeError as error:
                bad = raw[error.start : error.end].hex(" ")
                hint = conversion_hint(raw if line_number == 1 else b"")
                raise DataError(
                    f"{path} line {line_number}: not UTF-8 (byte offset {offset + error.start} in the file, "
                    f"bytes {bad}: {error.reason}). The data must be UTF-8: {hint}."
                ) from error
            offset += len(raw)
            yield text


def _read_json_lines(path: str, source_lang: str, target_lang: str) -> Iterator[tuple[int, str, str]]:
    layout = JSON_LAYOUT % (source_lang, target_lang)
    for line_number, line in enumerate(read_lines(path), start=1):
        if is_empty(line):
            yield line_number, "", ""
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as error:
            problem = f"not valid JSON ({error.msg}, column {error.colno})"
            raise _json_error(path, line_number, line, layout, problem) from error
        if not isinstance(row, dict):
            raise _json_error(path, line_number, line, layout, f"expected a JSON object, found {_json_type(row)}")
        if "translation" not in row:
            problem = f'no "translation" key (keys found: {sorted(row)})'
            if source_lang in row and target_lang in row:
                problem += ', the languages are at the top level: nest them under "translation"'
            raise _json_error(path, line_number, line, layout, problem)
        pair = row["translation"]
        if not isinstance(pair, dict):
            raise _json_error(path, line_number, line, layout, f'"translation" is {_json_type(pair)}')
        texts = []
        for lang in (source_lang, target_lang):
            if lang not in pair:
                problem = (
                    f'"translation" has no "{lang}" key (keys found: {sorted(pair)}); check --source_lang and '
                    f"--target_lang ({source_lang!r}, {target_lang!r}) against the file"
                )
                raise _json_error(path, line_number, line, layout, problem)
            text = pair[lang]
            if text is not None and not isinstance(text, str):
                problem = f'the "{lang}" text is {_json_type(text)}, expected a string'
                raise _json_error(path, line_number, line, layout, problem)
            if text and (problem := lone_surrogate(text)):  # what no UTF-8 file holds, but a JSON escape can
                raise DataError(f'{path} line {line_number}: the "{lang}" text holds {problem}; {LONE_SURROGATE_FIX}.')
            texts.append(text or "")  # null counts as an empty side
        yield line_number, texts[0], texts[1]


def _json_error(path: str, line_number: int, line: str, layout: str, problem: str) -> DataError:
    """The error for a bad line of a .json/.jsonl file: where, what, and the layout it must have."""
    hint = f"A .json/.jsonl file holds {layout}."
    if line_number == 1 and (line.lstrip().startswith("[") or line.strip() == "{"):
        hint = (
            "The file looks like one JSON document (an array, or an object over several lines); it must hold "
            f"{layout}. `jq -c '.[]' FILE` turns an array into JSON lines."
        )
    return DataError(f"{path} line {line_number}: {problem}. {hint}")


def _json_type(value: object) -> str:
    names = {
        dict: "an object",
        list: "an array",
        str: "a string",
        bool: "a boolean",
        int: "a number",
        float: "a number",
    }
    return "null" if value is None else names.get(type(value), type(value).__name__)


def _read_tsv(path: str, source_lang: str, target_lang: str) -> Iterator[tuple[int, str, str]]:
    for line_number, line in enumerate(read_lines(path), start=1):
        tabs = line.count("\t")
        if line_number == 1 and _is_tsv_header(path, line, source_lang, target_lang):
            continue  # the column names (pandas' to_csv writes them): pairs start at line 2
        if tabs == 1:
            source_text, target_text = line.split("\t")
            yield line_number, source_text, target_text
        elif is_empty(line):  # a blank line: an empty pair, skipped like the others
            yield line_number, "", ""
        else:
            raise DataError(
                f"{path} line {line_number}: expected exactly one TAB (source TAB target), found "
                f"{tabs or 'none'}. A .tsv file holds one pair per line; a TAB inside a sentence is not allowed "
                "(keep only the two text columns, e.g. with `cut -f1,2`, or use .jsonl)."
            )


def _is_tsv_header(path: str, line: str, source_lang: str, target_lang: str) -> bool:
    """Whether line 1 of a .tsv file names its columns by the languages (`source_lang TAB target_lang`, as pandas'
    `to_csv(sep="\\t", index=False)` writes a frame with those columns; any case): True, and the line is not a pair.
    The two names in the other order, or after an index column (`to_csv`'s default), are a `DataError` that says
    how to fix the file: training on such a file would learn the wrong direction, or an index column's numbers."""
    names = [name.strip().casefold() for name in line.split("\t")]
    languages = [source_lang.casefold(), target_lang.casefold()]
    if names == languages:
        return True
    if names == languages[::-1]:
        raise DataError(
            f"{path} line 1 names the columns {target_lang} TAB {source_lang}, but --source_lang is {source_lang} "
            f"and --target_lang {target_lang}: the first column must be the source. Swap the columns "
            f"(`awk -F'\\t' -v OFS='\\t' '{{print $2, $1}}' {path}`) or the two languages."
        )
    if len(names) == 3 and names[1:] == languages and not names[0]:
        raise DataError(
            f"{path} line 1 names the columns (none) TAB {source_lang} TAB {target_lang}: an index column first, as "
            f"pandas' to_csv writes by default. Keep the two text columns (`cut -f2,3 {path}`), or write the file "
            "with to_csv(..., index=False)."
        )
    return False


def _read_aligned(source_path: str, target_path: str) -> Iterator[tuple[int, str, str]]:
    pairs = zip_longest(read_lines(source_path), read_lines(target_path))
    for line_number, (source_text, target_text) in enumerate(pairs, start=1):
        if source_text is None or target_text is None:
            source_lines, target_lines = count_lines(source_path), count_lines(target_path)
            raise DataError(
                f"{source_path} has {source_lines:,} lines but {target_path} has {target_lines:,}: the files must be "
                "aligned line by line (line i of one is the translation of line i of the other). Look for a "
                "sentence split over two lines, a missing line or a blank line at the end."
            )
        yield line_number, source_text, target_text


def is_pair_file(path: str | os.PathLike) -> bool:
    """Whether `path` holds sentence pairs by its extension (.json/.jsonl, .tsv), as --train_file reads them."""
    return Path(path).suffix.lower() in JSON_SUFFIXES + TSV_SUFFIXES


def corpus_texts(paths, source_lang: str | None = None, target_lang: str | None = None) -> Iterator[str]:
    """Every text of `paths` for a tokenizer to learn from, empty ones left out: both sides of each pair of a
    .json/.jsonl or .tsv file (as --train_file reads them; a JSON file's languages default to the two keys of its
    first "translation"), and each line of any other file (plain text, one sentence per line)."""
    for path in map(os.fspath, paths):
        if not is_pair_file(path):
            yield from (line for line in read_lines(path) if not is_empty(line))
            continue
        if Path(path).suffix.lower() in TSV_SUFFIXES:  # its header, if it has one, names the languages
            pairs = _read_tsv(path, source_lang or "", target_lang or "")
        else:
            languages = (source_lang, target_lang) if source_lang and target_lang else _json_languages(path)
            pairs = _read_json_lines(path, *languages)
        for _, source_text, target_text in pairs:
            yield from (text for text in (source_text, target_text) if not is_empty(text))


def _json_languages(path: str) -> tuple[str, str]:
    """The two keys of the first "translation" of a .json/.jsonl file (a malformed first line: placeholders, for
    `_read_json_lines` to say what is wrong with it)."""
    for line in read_lines(path):
        if is_empty(line):
            continue
        try:
            pair = json.loads(line)["translation"]
        except (json.JSONDecodeError, KeyError, TypeError):
            break
        if isinstance(pair, dict) and len(pair) != 2:
            raise DataError(
                f'{path}: the first "translation" has the keys {sorted(pair)}, not two languages: pass '
                "--source_lang and --target_lang to say which two to read."
            )
        if isinstance(pair, dict):
            return tuple(pair)
        break
    return "source", "target"


def dataset_from_file(
    source: FileSource, source_lang: str, target_lang: str, cache_dir: str | None = None
) -> datasets.Dataset:
    """The non-empty pairs of a checked `FileSource` as a memory-mapped `Dataset` (one column, "translation").

    `Dataset.from_generator` writes an Arrow file under `cache_dir` and reuses it on the next run; its key (the
    fingerprint) covers each file's absolute path, size and modification time, the languages and `READER_VERSION`.
    """
    stats = [(os.path.abspath(path), os.stat(path).st_size, os.stat(path).st_mtime_ns) for path in source.paths]
    key = json.dumps([READER_VERSION, source.split, source.kind, stats, source_lang, target_lang])
    fingerprint = hashlib.sha256(key.encode()).hexdigest()[:32]
    features = datasets.Features({"translation": datasets.Translation(languages=[source_lang, target_lang])})
    return datasets.Dataset.from_generator(
        _generate_examples,
        features=features,
        cache_dir=cache_dir,
        gen_kwargs={"source": source, "source_lang": source_lang, "target_lang": target_lang},
        split=datasets.NamedSplit(source.split),
        fingerprint=fingerprint,
    )


def _generate_examples(source: FileSource, source_lang: str, target_lang: str) -> Iterator[dict]:
    for _, source_text, target_text in read_pairs(source, source_lang, target_lang):
        if not (is_empty(source_text) or is_empty(target_text)):
            yield {"translation": {source_lang: source_text, target_lang: target_text}}


# ---------------------------------------------------------------------------------------------------------------------
# Datasets by name
# ---------------------------------------------------------------------------------------------------------------------


def load_named_dataset(
    name: str, config_name: str | None, source_lang: str, target_lang: str, cache_dir: str | None = None
) -> datasets.DatasetDict:
    """The built-in demo dataset ("demo") or `datasets.load_dataset(name, config_name)`, reduced to one column
    "translation" with the two languages; `DataError` if it cannot be loaded or has no such column."""
    if name == "demo":
        # start-up: Babel and num2words load only for the demo dataset
        from vaswani.data.demo import build_demo_dataset

        try:
            return build_demo_dataset(source_lang=source_lang, target_lang=target_lang)
        except ValueError as error:
            raise DataError(f"--dataset_name demo: {error}") from error
    try:
        loaded = datasets.load_dataset(name, config_name, cache_dir=cache_dir)
    except Exception as error:  # offline, not found, no such config, broken download: all end the run the same way
        offline = " (offline: HF_HUB_OFFLINE is set, so only datasets already in the cache load)"
        raise DataError(
            f"could not load {_describe_dataset(name, config_name)}{offline if _is_offline() else ''}: "
            f"{type(error).__name__}: {error}. Check the name and --dataset_config_name, or pass local files "
            "(--train_file, --validation_file, --test_file), or --dataset_name demo for the built-in dataset."
        ) from error
    if not isinstance(loaded, datasets.DatasetDict):
        raise DataError(f"dataset {name!r} loaded as {type(loaded).__name__}, expected a DatasetDict of splits.")
    return datasets.DatasetDict(
        {
            split: _translation_column(dataset, _describe_dataset(name, config_name, split), source_lang, target_lang)
            for split, dataset in loaded.items()
        }
    )


def _is_offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").lower() in {"1", "true", "yes", "on"}


def _describe_dataset(name: str, config_name: str | None, split: str | None = None) -> str:
    text = f"dataset {name!r}" + (f" ({config_name})" if config_name else "")
    return text + (f", split {split}" if split else "")


def _translation_column(
    dataset: datasets.Dataset, description: str, source_lang: str, target_lang: str
) -> datasets.Dataset:
    """`dataset` with only its "translation" column, holding only the two languages; `DataError` if it has none."""
    if "translation" not in dataset.column_names:
        hint = ""
        if source_lang in dataset.column_names and target_lang in dataset.column_names:
            hint = f' (it has columns {source_lang!r} and {target_lang!r}: they must be nested in one "translation")'
        raise DataError(
            f"{description} has no 'translation' column (columns: {dataset.column_names}){hint}. The translation "
            f"layout is one column 'translation' of {{{source_lang!r}: text, {target_lang!r}: text}} dicts."
        )
    feature = dataset.features["translation"]
    if isinstance(feature, datasets.Translation):
        languages = list(feature.languages)
    elif isinstance(feature, dict):
        languages = list(feature)
    else:
        raise DataError(
            f"{description}: the 'translation' column is a {type(feature).__name__}, expected "
            f"{{{source_lang!r}: text, {target_lang!r}: text}} dicts with fixed languages."
        )
    missing = [lang for lang in (source_lang, target_lang) if lang not in languages]
    if missing:
        raise DataError(
            f"{description}: the 'translation' column has no {' or '.join(map(repr, missing))} "
            f"(languages: {sorted(languages)}). Pick --source_lang and --target_lang among them, or the right "
            "--dataset_config_name."
        )
    dataset = dataset.select_columns(["translation"])
    if sorted(languages) != sorted([source_lang, target_lang]):
        features = datasets.Features({"translation": datasets.Translation(languages=[source_lang, target_lang])})
        dataset = dataset.map(
            lambda batch: {
                "translation": [
                    {source_lang: p[source_lang], target_lang: p[target_lang]} for p in batch["translation"]
                ]
            },
            batched=True,
            features=features,
            desc="keeping the two languages",
        )
    return dataset


def drop_empty_pairs(
    dataset: datasets.Dataset, source_lang: str, target_lang: str, description: str
) -> tuple[datasets.Dataset, SplitReport]:
    """Remove the rows in which a side is null, empty or whitespace-only (computed with Arrow, not row by row).

    Raises `DataError` if no row is left.
    """
    report = SplitReport(source=description, pairs_read=len(dataset))
    empty_rows = []
    offset = 0
    for table in dataset.with_format("arrow").iter(batch_size=100_000):
        column = table["translation"]
        empty = None
        for lang in (source_lang, target_lang):
            texts = pc.struct_field(column, lang)
            blank = pc.fill_null(pc.equal(pc.utf8_trim_whitespace(texts), ""), True)
            empty = blank if empty is None else pc.or_(empty, blank)
        empty_rows.extend((np.flatnonzero(empty.to_numpy(zero_copy_only=False)) + offset).tolist())
        offset += table.num_rows
    for row in empty_rows:
        report.add_skipped(f"row {row}")
    if len(empty_rows) == len(dataset):
        raise no_pair_error(description, len(dataset), "row")
    if empty_rows:
        keep = np.ones(len(dataset), dtype=bool)
        keep[empty_rows] = False
        dataset = dataset.select(np.flatnonzero(keep))
    return dataset, report


# ---------------------------------------------------------------------------------------------------------------------
# Validation split
# ---------------------------------------------------------------------------------------------------------------------


def carve_validation(
    train: datasets.Dataset, validation_size: int, seed: int
) -> tuple[datasets.Dataset, datasets.Dataset]:
    """Split `validation_size` random pairs off `train`: ``(train without them, them)``, both in their original order.

    Deterministic for a seed (`random.Random(seed).sample`); the two parts are disjoint and cover `train`.
    """
    _check_validation_size(validation_size, len(train))
    chosen = sorted(random.Random(seed).sample(range(len(train)), validation_size))
    keep = np.ones(len(train), dtype=bool)
    keep[chosen] = False
    return train.select(np.flatnonzero(keep)), train.select(chosen)


def _check_validation_size(validation_size: int, train_size: int) -> None:
    """Carving must leave at least one training pair."""
    if validation_size >= train_size:
        raise DataError(
            f"cannot set aside {validation_size:,} validation pairs: the training data has only {train_size:,}. "
            "Pass --validation_file, or a smaller --validation_size (0 for no validation)."
        )


@dataclass(frozen=True)
class PairFile:
    """The pairs of a data file (a training or a test file) that have text on both sides (`pairs` of them), in file
    order; `skipped` pairs have an empty side (training skips them too)."""

    source: FileSource
    source_lang: str
    target_lang: str
    pairs: int
    skipped: int = 0

    def __iter__(self) -> Iterator[tuple[int, str, str]]:
        """(line number, source, reference) of every pair that has text on both sides."""
        for line, source, reference in read_pairs(self.source, self.source_lang, self.target_lang):
            if not (is_empty(source) or is_empty(reference)):
                yield line, source, reference


def pair_file(split: str, path: str, source_lang: str, target_lang: str, require_pair: bool = True) -> PairFile:
    """The pairs of the `split` file `path`, checked as training checks them (a `DataError` names the file and
    line); `require_pair=False` accepts a file without a pair that has text on both sides (`vaswani score`, which
    scores every pair, empty ones too)."""
    source = resolve_file(split, str(path), source_lang, target_lang)
    report = check_file(source, source_lang, target_lang, require_pair)
    return PairFile(source, source_lang, target_lang, report.pairs_read - report.pairs_skipped, report.pairs_skipped)
