"""Training corpora for the BPE trainer: text files, a Python iterator or a `datasets` translation dataset.

Every source becomes a `Corpus`: an iterator over batches (lists) of sentences, which `tokenizers` ingests in
parallel, plus what is known up front about its size (for the progress bar and for the error messages).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from vaswani.fileio import conversion_hint, count_lines

from .errors import TokenizerTrainingError

if TYPE_CHECKING:
    from datasets import Dataset

BATCH_SIZE = 1000
# Above either size a corpus counts as large and training shows a progress bar when `show_progress=None`.
LARGE_CORPUS_BYTES = 10_000_000
LARGE_CORPUS_SENTENCES = 100_000

PathLike = str | os.PathLike


@dataclass
class Corpus:
    """Sentences to train on.

    Attributes:
        batches: iterator over lists of sentences (one pass only).
        description: what the corpus is, for error messages ("2 files (train.en, train.de)").
        num_sentences: number of sentences if known before reading, else None.
        paths: the input files, if the corpus is read from files.
    """

    batches: Iterator[list[str]]
    description: str
    num_sentences: int | None = None
    paths: list[PathLike] | None = None

    @property
    def num_bytes(self) -> int:
        """Total size of the input files (0 for other corpora)."""
        return sum(os.path.getsize(path) for path in self.paths or [])

    def progress_length(self) -> int | None:
        """Number of sentences for the progress bar; for files this counts lines (one fast extra pass)."""
        if self.num_sentences is None and self.paths:
            self.num_sentences = sum(count_lines(path) for path in self.paths)
        return self.num_sentences

    @property
    def is_large(self) -> bool:
        """Whether reading and training will take long enough to deserve a progress bar."""
        return self.num_bytes >= LARGE_CORPUS_BYTES or (self.num_sentences or 0) >= LARGE_CORPUS_SENTENCES


def corpus_from_files(files: PathLike | Sequence[PathLike]) -> Corpus:
    """Plain-text UTF-8 files with one sentence per line (give both sides of a parallel corpus).

    Line terminators are removed (the `tokenizers` file reader would keep them inside the last word); blank lines
    are skipped. Files are checked before training starts so that a typo fails at once.
    """
    paths = [files] if isinstance(files, str | os.PathLike) else list(files)
    if not paths:
        raise TokenizerTrainingError("no training files given: pass at least one text file (--files FILE [FILE ...]).")
    for path in paths:
        if not os.path.exists(path):
            raise TokenizerTrainingError(f"training file not found: {os.fspath(path)!r}. Check the path.")
        if not os.path.isfile(path):
            raise TokenizerTrainingError(f"{os.fspath(path)!r} is not a file: pass text files, one sentence per line.")
    names = ", ".join(os.path.basename(path) for path in paths)
    return Corpus(
        batches=_read_files(paths),
        description=f"{len(paths)} file{'s' if len(paths) > 1 else ''} ({names})",
        paths=paths,
    )


def _read_files(paths: Sequence[PathLike]) -> Iterator[list[str]]:
    for path in paths:
        with open(path, encoding="utf-8-sig") as stream:  # "-sig": without a byte-order mark at the start
            try:
                yield from _batched(line.rstrip("\n") for line in stream)
            except UnicodeDecodeError as error:
                with open(path, "rb") as raw:
                    hint = conversion_hint(raw.read(4))
                raise TokenizerTrainingError(
                    f"{os.fspath(path)!r} is not valid UTF-8 ({error.reason}): {hint}."
                ) from error


def corpus_from_iterator(iterator: Iterable[str | Sequence[str]]) -> Corpus:
    """Any iterable of sentences, or of batches (lists or tuples) of sentences; both sides of the corpus."""
    if isinstance(iterator, str | bytes):
        raise TokenizerTrainingError("iterator must yield sentences, not be a single string: pass [text] or a list.")
    num_sentences = len(iterator) if isinstance(iterator, Sequence) else None
    return Corpus(batches=_batched_items(iterator), description="the iterator", num_sentences=num_sentences)


def _batched_items(iterator: Iterable[str | Sequence[str]]) -> Iterator[list[str]]:
    batch: list[str] = []
    for item in iterator:
        if isinstance(item, str):
            batch.append(item)
        elif isinstance(item, Sequence) and all(isinstance(text, str) for text in item):
            batch.extend(item)
        else:
            raise TokenizerTrainingError(
                f"iterator yielded a {type(item).__name__}; it must yield strings or lists of strings."
            )
        if len(batch) >= BATCH_SIZE:
            yield batch
            batch = []
    if batch:
        yield batch


def corpus_from_dataset(dataset: Dataset, source_lang: str | None = None, target_lang: str | None = None) -> Corpus:
    """A `datasets.Dataset` whose "translation" column holds {source_lang: text, target_lang: text}; both sides.

    When the languages are not given they are read from the first row, which must then have exactly two.
    """
    from datasets import Dataset, DatasetDict, IterableDataset

    if isinstance(dataset, DatasetDict):
        raise TokenizerTrainingError(
            f"dataset is a DatasetDict with splits {list(dataset)}: pass one split, e.g. dataset['train']."
        )
    if not isinstance(dataset, Dataset | IterableDataset):
        raise TokenizerTrainingError(f"dataset must be a datasets.Dataset, got {type(dataset).__name__}.")
    if "translation" not in (dataset.column_names or []):
        raise TokenizerTrainingError(
            f"dataset has no 'translation' column (columns: {dataset.column_names}); "
            "it must hold dicts {source_lang: text, target_lang: text}."
        )
    languages = _dataset_languages(dataset, source_lang, target_lang)
    num_rows = len(dataset) if isinstance(dataset, Dataset) else None
    return Corpus(
        batches=_read_dataset(dataset, languages),
        description=f"the dataset's translation column ({'/'.join(languages)})",
        num_sentences=None if num_rows is None else 2 * num_rows,
    )


def _dataset_languages(dataset: Dataset, source_lang: str | None, target_lang: str | None) -> tuple[str, str]:
    first = next(iter(dataset), None)
    if first is None:
        raise TokenizerTrainingError("the corpus is empty: the dataset has no rows.")
    available = sorted(first["translation"])
    if source_lang is None and target_lang is None:
        if len(available) != 2:
            raise TokenizerTrainingError(
                f"the translation column has languages {available}: pass source_lang and target_lang."
            )
        return available[0], available[1]
    for name, language in (("source_lang", source_lang), ("target_lang", target_lang)):
        if language not in available:
            raise TokenizerTrainingError(
                f"{name}={language!r} is not in the translation column (languages: {available})."
            )
    return source_lang, target_lang


def _read_dataset(dataset: Dataset, languages: tuple[str, str]) -> Iterator[list[str]]:
    for batch in dataset.iter(batch_size=BATCH_SIZE):
        pairs = batch["translation"]
        for language in languages:
            yield [pair[language] for pair in pairs if pair[language]]


def _batched(texts: Iterable[str]) -> Iterator[list[str]]:
    batch: list[str] = []
    for text in texts:
        if text:
            batch.append(text)
            if len(batch) == BATCH_SIZE:
                yield batch
                batch = []
    if batch:
        yield batch
