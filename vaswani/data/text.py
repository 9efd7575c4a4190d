"""Text for the language-model tasks of `vaswani train` (``--task causal_lm`` and ``--task masked_lm``).

Sources
    Files, one per split (``--train_file``, ``--validation_file``, ``--test_file``): a ``.json`` / ``.jsonl`` file
    holds one JSON object per line whose ``--text_column`` field (``text`` by default; a dotted path such as
    ``translation.en`` reaches into nested objects) is the text; any other file is plain UTF-8 text, one sentence or
    document per line. Or ``--dataset_name`` (with ``--dataset_config_name``): a `datasets` name whose
    ``--text_column`` column is the text; ``demo`` is the English side of the built-in demo set. Empty and
    whitespace-only lines are skipped. Without a validation split, ``--validation_size`` random lines (seeded) are
    carved out of the training text.

Examples
    Every text is tokenized with the run's tokenizer (``</s>`` after each text). With ``--packing yes`` the token
    streams are concatenated and cut into blocks of ``--block_size`` tokens (run_clm's ``group_texts``; the last,
    shorter block is kept, so held-out scores cover every token); with ``--packing no`` each line is one example,
    cut to ``--block_size`` tokens (keeping ``</s>`` last). Each example carries its ``length`` for token-budget
    batching (`vaswani.data.batching.TokenBatchSampler`).

Masking
    Training batches of the masked LM are masked when they are collated (`DataCollatorForLanguageModeling`,
    ``--mlm_probability`` of the tokens, 80% ``<mask>``, 10% a random token, 10% unchanged) with torch's global
    random generator, which every checkpoint saves and a resume restores: a resumed run masks exactly as an
    uninterrupted one. Held-out splits are masked once, at set-up, with a generator seeded by ``--seed``
    (`mask_held_out`), so that every evaluation scores the same masked tokens.

Bad input raises `vaswani.data.loading.DataError` (``error: ...`` and exit status 2 from train.py).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterator
from itertools import chain
from pathlib import Path

import datasets
import torch

from vaswani.data.loading import (
    JSON_SUFFIXES,
    NO_TRAINING_DATA,
    SPLITS,
    carve_validation,
    is_empty,
    load_named_dataset,
    read_lines,
)
from vaswani.errors import DataError
from vaswani.fileio import LONE_SURROGATE_FIX, lone_surrogate

TEXT_READER_VERSION = 1
"""Part of the cache key of text datasets built from files: bump it when the reading rules change."""
PACKING_CHOICES = ("yes", "no")


# ---------------------------------------------------------------------------------------------------------------------
# Loading
# ---------------------------------------------------------------------------------------------------------------------
def load_text_splits(
    *,
    train_file: str | None = None,
    validation_file: str | None = None,
    test_file: str | None = None,
    dataset_name: str | None = None,
    dataset_config_name: str | None = None,
    text_column: str = "text",
    validation_size: int = 500,
    seed: int = 0,
    cache_dir: str | None = None,
) -> tuple[datasets.DatasetDict, list[str]]:
    """The text of a language-model run: "train" and, when available, "validation" and "test", each a `Dataset` with
    one column "text" (non-empty lines only). Returns it with one summary line per split (and notes) for the log.

    Every file is checked (exists, UTF-8, JSON with the text field) before any dataset is built; `DataError` names
    the file, the line and the fix."""
    files = {split: os.fspath(path) for split, path in zip(SPLITS, (train_file, validation_file, test_file),
                                                            strict=True) if path}  # fmt: skip
    if "train" not in files and dataset_name is None:
        raise DataError(NO_TRAINING_DATA)
    missing = [f"--{split}_file: file not found: {path}" for split, path in files.items() if not os.path.isfile(path)]
    if missing:
        raise DataError("; ".join(missing) + ". Check the path.")
    counts = {split: sum(1 for _ in read_texts(path, text_column)) for split, path in files.items()}  # full check
    splits = {split: dataset_from_text_file(split, path, text_column, cache_dir) for split, path in files.items()}
    summary = [f"{split}: {len(splits[split]):,} texts from {path} ({counts[split]:,} lines read)"
               for split, path in files.items()]  # fmt: skip
    wanted = [split for split in SPLITS if split not in splits]
    if dataset_name is not None and wanted:
        named = load_named_text(dataset_name, dataset_config_name, text_column, cache_dir)
        if "train" in wanted and "train" not in named:
            raise DataError(f"dataset {dataset_name!r} has no 'train' split (splits: {sorted(named)}): pass "
                            "--train_file for the training text.")  # fmt: skip
        for split in wanted:
            if split in named:
                splits[split] = named[split]
                summary.append(f"{split}: {len(named[split]):,} texts from dataset {dataset_name!r}, split {split}")
    for split, dataset in splits.items():
        if len(dataset) == 0:
            raise DataError(f"the {split} text is empty (no non-empty line): give a file with text.")
    if "validation" not in splits and validation_size > 0:
        splits["train"], splits["validation"] = carve_validation(splits["train"], validation_size, seed)
        summary.append(f"note: no validation text given: set aside {validation_size:,} random lines of the training "
                       "text (--validation_file to use your own, --validation_size to change the number)")  # fmt: skip
    return datasets.DatasetDict({split: splits[split] for split in SPLITS if split in splits}), summary


def read_texts(path: str, text_column: str) -> Iterator[str]:
    """The non-empty texts of a file: the `text_column` field of each JSON line of a .json/.jsonl file, else each
    line of a plain-text file. `DataError` names the line of a JSON line without the field."""
    is_json = Path(path).suffix.lower() in JSON_SUFFIXES
    for line_number, line in enumerate(read_lines(path), start=1):
        if is_empty(line):
            continue
        text = _json_text(path, line_number, line, text_column) if is_json else line
        if not is_empty(text):
            yield text


def _json_text(path: str, line_number: int, line: str, text_column: str) -> str:
    try:
        value = _field(json.loads(line), text_column)
    except (json.JSONDecodeError, KeyError, TypeError) as error:
        problem = "not valid JSON" if isinstance(error, json.JSONDecodeError) else f"no {text_column!r} field"
        raise DataError(
            f"{path} line {line_number}: {problem}. A .json/.jsonl file holds one JSON object per line with the text "
            f'in its {text_column!r} field, e.g. {{"{text_column}": "..."}}; pass --text_column to name another field '
            "(a dotted path such as translation.en reaches into nested objects), or give a plain-text file."
        ) from error
    if not isinstance(value, str):
        raise DataError(f"{path} line {line_number}: the {text_column!r} field is {type(value).__name__}, not text.")
    if problem := lone_surrogate(value):  # what no UTF-8 file holds, but a JSON escape can
        raise DataError(f"{path} line {line_number}: the {text_column!r} field holds {problem}; {LONE_SURROGATE_FIX}.")
    return value


def _field(row: dict, path: str):
    """`row["a"]["b"]` for the dotted `path` "a.b"."""
    for key in path.split("."):
        row = row[key]
    return row


def dataset_from_text_file(split: str, path: str, text_column: str, cache_dir: str | None) -> datasets.Dataset:
    """The texts of a checked file as a memory-mapped `Dataset` (one column "text"), cached under a key of the file's
    absolute path, size and modification time, the text column and `TEXT_READER_VERSION`."""
    stat = os.stat(path)
    key = json.dumps([TEXT_READER_VERSION, split, os.path.abspath(path), stat.st_size, stat.st_mtime_ns, text_column])
    return datasets.Dataset.from_generator(
        _generate_texts,
        features=datasets.Features({"text": datasets.Value("string")}),
        cache_dir=cache_dir,
        gen_kwargs={"path": path, "text_column": text_column},
        split=datasets.NamedSplit(split),
        fingerprint=hashlib.sha256(key.encode()).hexdigest()[:32],
    )


def _generate_texts(path: str, text_column: str) -> Iterator[dict]:
    for text in read_texts(path, text_column):
        yield {"text": text}


def load_named_text(
    name: str, config_name: str | None, text_column: str, cache_dir: str | None
) -> datasets.DatasetDict:
    """A `datasets` source reduced to one column "text" (its `text_column`; "demo": the built-in set's English)."""
    if name == "demo":
        demo = load_named_dataset("demo", None, "en", "de", cache_dir)
        return datasets.DatasetDict({s: _texts_of(d, "translation.en") for s, d in demo.items()})
    loaded = _load_dataset(name, config_name, cache_dir)
    top = text_column.split(".")[0]
    for split, dataset in loaded.items():
        if top not in dataset.column_names:
            raise DataError(f"dataset {name!r}, split {split} has no {top!r} column (columns: {dataset.column_names}): "
                            "pass --text_column with the column that holds the text.")  # fmt: skip
    return datasets.DatasetDict({split: _texts_of(dataset, text_column) for split, dataset in loaded.items()})


def _load_dataset(name: str, config_name: str | None, cache_dir: str | None) -> datasets.DatasetDict:
    try:
        loaded = datasets.load_dataset(name, config_name, cache_dir=cache_dir)
    except Exception as error:  # offline, not found, no such config: all end the run the same way
        raise DataError(
            f"could not load dataset {name!r}: {type(error).__name__}: {error}. Check the name and "
            "--dataset_config_name, or pass local files (--train_file, --validation_file, --test_file)."
        ) from error
    if not isinstance(loaded, datasets.DatasetDict):
        raise DataError(f"dataset {name!r} loaded as {type(loaded).__name__}, expected a DatasetDict of splits.")
    return loaded


def _texts_of(dataset: datasets.Dataset, text_column: str) -> datasets.Dataset:
    """`dataset` as one column "text" of the non-empty values at `text_column` (a column, or a dotted path)."""
    top = text_column.split(".")[0]
    rest = text_column[len(top) + 1 :]

    def texts(batch):
        values = [_field(v, rest) if rest else v for v in batch[top]]
        return {"text": [v for v in values if isinstance(v, str) and not is_empty(v)]}

    return dataset.map(texts, batched=True, remove_columns=dataset.column_names, desc="Reading text")


def training_texts(dataset: datasets.Dataset, batch_size: int = 1000) -> Iterator[list[str]]:
    """The training text in batches of lines, for `train_bpe_tokenizer(iterator=...)`."""
    for batch in dataset.iter(batch_size=batch_size):
        yield batch["text"]


# ---------------------------------------------------------------------------------------------------------------------
# Tokenization and packing
# ---------------------------------------------------------------------------------------------------------------------
def tokenize_texts(
    raw: dict, tokenizer, *, block_size: int, packing: str, num_proc: int | None = None, work_dir: Path | None = None
) -> dict[str, datasets.Dataset]:
    """Each split as examples of at most `block_size` tokens: columns input_ids, attention_mask and length (see the
    module docstring for packing). `work_dir`: where the `datasets` cache files go (default: beside the text's)."""

    def cache_file(split: str, step: str) -> dict:
        return {} if work_dir is None else {"cache_file_name": str(Path(work_dir) / f"{split}-{step}.arrow")}

    eos = tokenizer.eos_token_id

    def per_line(batch):
        ids = [row if len(row) <= block_size else row[: block_size - 1] + [eos] for row in
               tokenizer(batch["text"])["input_ids"]]  # fmt: skip
        return {"input_ids": ids}

    def packed(batch):
        stream = list(chain.from_iterable(tokenizer(batch["text"])["input_ids"]))
        return {"input_ids": [stream[i : i + block_size] for i in range(0, len(stream), block_size)]}

    tokenized = {}
    for split, dataset in raw.items():
        mapped = dataset.map(
            packed if packing == "yes" else per_line, batched=True, batch_size=1000, num_proc=num_proc,
            remove_columns=dataset.column_names, desc=f"Tokenizing {split}", **cache_file(split, "tokens"),
        )  # fmt: skip
        tokenized[split] = mapped.map(
            lambda batch: {"attention_mask": [[1] * len(r) for r in batch["input_ids"]],
                           "length": [len(r) for r in batch["input_ids"]]},
            batched=True, desc=f"Lengths of {split}", **cache_file(split, "lengths"),
        )  # fmt: skip
    return tokenized


def mask_held_out(dataset: datasets.Dataset, collator) -> datasets.Dataset:
    """`dataset` with fixed masks: input_ids masked by `collator` (a seeded `DataCollatorForLanguageModeling`), the
    original tokens as labels (-100 where nothing is predicted). One example at a time, so a mask does not depend on
    batching."""
    rows = {"input_ids": [], "attention_mask": [], "labels": [], "length": []}
    for example in dataset:
        batch = collator([{"input_ids": example["input_ids"]}])
        rows["input_ids"].append(batch["input_ids"][0].tolist())
        rows["labels"].append(batch["labels"][0].tolist())
        rows["attention_mask"].append([1] * len(example["input_ids"]))  # prepared data stores no masks
        rows["length"].append(example["length"])
    return datasets.Dataset.from_dict(rows)


# ---------------------------------------------------------------------------------------------------------------------
# Evaluation
# ---------------------------------------------------------------------------------------------------------------------
def next_token_targets(logits: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Causal LM: the logits at position t (B, T-1, V) are scored against the label at t + 1 (B, T-1), as the model's
    loss shifts them."""
    return logits[:, :-1], labels[:, 1:]


def masked_token_targets(logits: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Masked LM: each position's logits (B, T, V) against its own label (B, T), -100 where nothing is masked."""
    return logits, labels
