"""Tokenized splits, and the BPE trained for them, cached on disk, keyed only by what changes them (issue 30).

A training run tokenizes its splits once; every later run whose tokens would be the same reuses them, whatever else
differs (learning rate, schedule, output folder, number of processes or workers). The key (`tokens_key`) holds:

- each split's text identity (`text_identity`): for a split stored in Arrow files, `datasets`' fingerprint of it,
  which for files read by `vaswani.data.loading` covers each file's absolute path, size and modification time, the
  languages and the reading rules (then the carving of a validation split: its size and seed); for a split held in
  memory (the built-in demo dataset), a hash of its content;
- the tokenizer's hash (its `tokenizer.json`, as the fast tokenizer serializes it);
- the options that shape the tokens (the caller's: length limits, the over-long policy, block size, ...) and
  `CACHE_VERSION`, bumped when the tokenization code changes what it writes.

Where: `<cache_dir>/vaswani-tokenized/<key digest>/`, `cache_dir` being `--cache_dir` or else `HF_DATASETS_CACHE`
(default `~/.cache/huggingface/datasets`). A folder holds one `save_to_disk` folder per split and `key.json` (the key
in words, plus the counts its build reported, such as over-long pairs). The splits are stored compact (`compact`):
token ids as uint16 where the vocabulary allows (else int32), lengths as int32, no attention masks (the collators make
them), as `vaswani prepare` writes them. It is built under a temporary name and
renamed when complete, so a folder that exists is whole; deleting it (or all of `vaswani-tokenized/`) is always
safe: the next run tokenizes again.

A BPE tokenizer that a run trains on its training text is cached the same way (`load_or_train_tokenizer`), in
`<cache_dir>/vaswani-bpe/<key digest>/`, keyed by the text's identity and the training options: a re-run with other
training options skips both the BPE training and the tokenization.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import datasets
import numpy as np
import pyarrow as pa

from vaswani.constants import TMP_PREFIX

CACHE_SUBDIR = "vaswani-tokenized"
CACHE_VERSION = 2  # 2: compact columns
"""Part of every key: bump it when the tokenization code changes what it writes."""
KEY_FILE = "key.json"
TOKENIZER_SUBDIR = "vaswani-bpe"
TOKENIZER_CACHE_VERSION = 1
"""Part of every trained tokenizer's key: bump it when the BPE training changes what it makes."""
SMALL_SPLIT = 10_000
"""Below this many examples a split is tokenized in one process: starting workers would cost more than it saves."""
UINT16_VOCABULARY = 2**16
"""The largest vocabulary whose ids fit in uint16 columns."""
TOKEN_COLUMNS = ("input_ids", "labels")
LENGTH_COLUMNS = ("source_length", "target_length", "length")


def default_workers() -> int:
    """Every core this process may use (`--preprocessing_num_workers` unset)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def workers_for(num_examples: int, requested: int | None) -> int | None:
    """The `num_proc` of `datasets.map` for a split: `requested`, else every core, one (None) for a small split."""
    workers = requested if requested is not None else default_workers()
    return workers if workers > 1 and num_examples >= SMALL_SPLIT else None


def text_identity(dataset: datasets.Dataset) -> str:
    """What identifies a split's text for the key: its `datasets` fingerprint when it lives in Arrow files (a
    deterministic function of its sources and of the transforms that made it), else a hash of its content."""
    if dataset.cache_files:
        return f"fingerprint:{dataset._fingerprint}"
    digest = hashlib.sha256()
    for batch in dataset.with_format("arrow").iter(batch_size=10_000):
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, batch.schema) as writer:
            writer.write_table(batch)
        digest.update(sink.getvalue())
    return f"content:{digest.hexdigest()}"


def tokenizer_hash(tokenizer) -> str:
    """The hash of what the tokenizer computes: a fast tokenizer's serialization (what its tokenizer.json holds:
    normalizer, pre-tokenizer, BPE model, post-processor, special tokens); another tokenizer (a converted model's
    MarianTokenizer: sentencepiece files) by the bytes of every file its `save_pretrained` writes."""
    digest = hashlib.sha256()
    if getattr(tokenizer, "is_fast", False):
        digest.update(tokenizer.backend_tokenizer.to_str().encode("utf-8"))
        return digest.hexdigest()
    with tempfile.TemporaryDirectory() as folder:
        tokenizer.save_pretrained(folder)  # (the names it returns include files it did not write)
        for path in sorted(Path(folder).iterdir()):
            digest.update(path.name.encode("utf-8") + b"\0" + path.read_bytes())
    return digest.hexdigest()


def tokens_key(raw: dict, tokenizer, options: dict) -> dict:
    """The cache key of tokenizing `raw` (split name -> Dataset) with `tokenizer` under `options` (JSON values)."""
    return {
        "version": CACHE_VERSION,
        "splits": {split: text_identity(dataset) for split, dataset in raw.items()},
        "tokenizer_sha256": tokenizer_hash(tokenizer),
        "options": options,
    }


def cache_folder(key: dict, cache_dir: str | os.PathLike | None, subdir: str = CACHE_SUBDIR) -> Path:
    """`<cache_dir or HF_DATASETS_CACHE>/<subdir: vaswani-tokenized>/<digest of key>`."""
    root = Path(cache_dir) if cache_dir is not None else Path(datasets.config.HF_DATASETS_CACHE)
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode("utf-8")).hexdigest()[:32]
    return root / subdir / digest


def load_or_train_tokenizer(
    train_text: datasets.Dataset,
    options: dict,
    cache_dir: str | os.PathLike | None,
    train: Callable[[], object],
    load: Callable[[Path], object],
) -> tuple[object, Path, bool]:
    """The BPE tokenizer trained on `train_text` with `options`, from the cache when an earlier run trained it, else
    trained by `train()` and cached: a run on the same text with other training options (learning rate, output
    folder, ...) neither trains the BPE nor tokenizes again.

    The key is the text's identity (`text_identity`), `options` (JSON values: everything the training takes besides
    the text) and `TOKENIZER_CACHE_VERSION`; the folder is `<cache_dir>/vaswani-bpe/<digest>/`, the tokenizer's
    `save_pretrained` files and `key.json`, written under a temporary name and renamed when complete.

    Returns:
        ``(tokenizer, folder, reused)``.
    """
    key = {"version": TOKENIZER_CACHE_VERSION, "text": text_identity(train_text), "options": options}
    folder = cache_folder(key, cache_dir, TOKENIZER_SUBDIR)
    if (folder / KEY_FILE).is_file():
        return load(folder), folder, True
    tokenizer = train()
    with _staged(folder) as staging:
        tokenizer.save_pretrained(staging)
        (staging / KEY_FILE).write_text(json.dumps({"key": key}, indent=1), encoding="utf-8")
    return tokenizer, folder, False


def load_or_tokenize(
    raw: dict,
    key: dict,
    cache_dir: str | os.PathLike | None,
    tokenize_split: Callable[[str, datasets.Dataset, Path], tuple[datasets.Dataset, dict]],
    may_build: bool = True,
    *,
    vocab_size: int,
) -> tuple[dict[str, datasets.Dataset], dict[str, dict], Path, bool]:
    """The tokenized splits for `key`, from the cache when it holds them, else made by `tokenize_split` and cached.

    Args:
        raw: split name -> the text Dataset.
        key: `tokens_key(raw, ...)`, computed by the caller (with several processes: by the main process, for all).
        cache_dir: the cache's root (None: HF_DATASETS_CACHE).
        tokenize_split: ``(split, dataset, work_dir) -> (tokenized, counts)``: tokenizes one split, writing any
            `datasets` cache file under `work_dir` (removed afterwards); `counts` (JSON values) are stored with the
            cache and returned again when it is reused.
        may_build: False on a process that must never tokenize (not the main process of its node): a missing cache
            is then a bug, raised as RuntimeError.
        vocab_size: the tokenizer's, for the integer type of the token columns (`compact`).

    Returns:
        ``(tokenized, counts, folder, reused)``: split -> memory-mapped Dataset, split -> counts, the cache folder,
        and whether it was reused (False: this call tokenized and wrote it).
    """
    folder = cache_folder(key, cache_dir)
    if (folder / KEY_FILE).is_file():
        return _load(folder, raw) + (folder, True)
    if not may_build:
        raise RuntimeError(f"no tokenized cache at {folder}: the main process of this node should have written it")
    counts = {}
    with _staged(folder) as staging:
        work = staging / "work"
        for split, dataset in raw.items():
            tokenized, counts[split] = tokenize_split(split, dataset, work)
            compact(tokenized, vocab_size, work).save_to_disk(str(staging / split))
        shutil.rmtree(work, ignore_errors=True)
        (staging / KEY_FILE).write_text(json.dumps({"key": key, "counts": counts}, indent=1), encoding="utf-8")
    return _load(folder, raw) + (folder, False)


@contextlib.contextmanager
def _staged(folder: Path) -> Iterator[Path]:
    """A staging folder for `folder`, under a temporary name of this process beside it: renamed to `folder` when the
    block ends without an error, removed in any case, so that a cache folder that exists is whole. If another
    node's main process published the same folder first (the same key, so the same content), that one stays."""
    staging = folder.parent / f"{TMP_PREFIX}{folder.name}-{os.getpid()}"
    folder.parent.mkdir(parents=True, exist_ok=True)
    if staging.exists():
        shutil.rmtree(staging)
    try:
        yield staging
        try:
            os.rename(staging, folder)
        except OSError:
            if not (folder / KEY_FILE).is_file():
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def token_dtype(vocab_size: int) -> str:
    """The integer type of the token columns: uint16 when every id fits, else int32."""
    return "uint16" if vocab_size <= UINT16_VOCABULARY else "int32"


def compact(dataset: datasets.Dataset, vocab_size: int, work: Path) -> datasets.Dataset:
    """`dataset` without attention masks, its token columns as `token_dtype(vocab_size)`, its lengths as int32
    (written under `work`); `dataset` itself when it is already so (the cache's splits that `vaswani prepare`
    writes out: no second copy)."""
    keep = [name for name in dataset.column_names if name != "attention_mask"]
    features = datasets.Features({name: dataset.features[name] for name in keep})
    for name in keep:
        if name in TOKEN_COLUMNS:
            features[name] = datasets.List(datasets.Value(token_dtype(vocab_size)))
        elif name in LENGTH_COLUMNS:
            features[name] = datasets.Value("int32")
    if features == dataset.features:  # no mask, and every column already of its type
        return dataset
    dataset = dataset.select_columns(keep)
    work.mkdir(parents=True, exist_ok=True)
    name = hashlib.sha256(f"{dataset.cache_files}{dataset._fingerprint}".encode()).hexdigest()[:16]
    return dataset.cast(features, cache_file_name=str(work / f"compact-{name}.arrow"))


def column_array(dataset: datasets.Dataset, name: str) -> np.ndarray:
    """A column of a memory-mapped split as one numpy array, read in one slice. (``dataset.with_format("numpy")[name]``
    alone is a lazy column: numpy functions iterate it row by row, about 80 microseconds a row: 16 s for 200k pairs.)"""
    return np.asarray(dataset.with_format("numpy", columns=[name])[name][:])


def pair_encoder(tokenizer, sources: list[str], targets: list[str]) -> Callable:
    """``encode(sources, targets) -> (input_ids, labels)``, lists of token-id lists exactly as
    ``tokenizer(sources, text_target=targets)`` gives them, by the fastest way that agrees on a sample.

    A fast tokenizer with no truncation or padding set is called through its Rust tokenizer's `encode_batch_fast`
    (no offsets, attention masks or `BatchEncoding`: about a third less time per pair) when that gives the same ids
    as the tokenizer's own call on `sources`/`targets` (the caller's first pairs); any other tokenizer (a converted
    model's sentencepiece tokenizer, one with a separate target vocabulary) is called as it is."""

    def call(sources: list[str], targets: list[str]) -> tuple[list, list]:
        encoded = tokenizer(sources, text_target=targets)
        return encoded["input_ids"], encoded["labels"]

    backend = getattr(tokenizer, "backend_tokenizer", None) if getattr(tokenizer, "is_fast", False) else None
    if backend is None or backend.truncation is not None or backend.padding is not None:
        return call

    def encode_fast(sources: list[str], targets: list[str]) -> tuple[list, list]:
        return ([e.ids for e in backend.encode_batch_fast(sources)],
                [e.ids for e in backend.encode_batch_fast(targets)])  # fmt: skip

    return encode_fast if encode_fast(sources, targets) == call(sources, targets) else call


def ids_array(ids: list[list[int]], vocab_size: int) -> pa.Array:
    """Token-id lists as one Arrow list column of `token_dtype(vocab_size)` (the cache's compact type)."""
    return pa.array(ids, type=pa.list_(pa.from_numpy_dtype(np.dtype(token_dtype(vocab_size)))))


def _load(folder: Path, raw: dict) -> tuple[dict[str, datasets.Dataset], dict[str, dict]]:
    counts = json.loads((folder / KEY_FILE).read_text(encoding="utf-8"))["counts"]
    return {split: datasets.load_from_disk(str(folder / split)) for split in raw}, counts
