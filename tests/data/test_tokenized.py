"""The tokenized-data cache of `vaswani train` (vaswani/data/tokenized.py, issue 30 item 2): keyed only by what
changes the tokens, so a run with another learning rate or output folder reuses the first run's tokens (and says so),
while another text file, tokenizer or length limit tokenizes again."""

import json
import logging
import os

import datasets
import numpy as np
import pyarrow as pa
import pytest
from conftest import train_in_process
from test_options import TINY_MODEL

from vaswani.data import tokenized as cache
from vaswani.data.demo import write_demo_files
from vaswani.training import tasks

QUIET = ["--eval_steps", "0", "--logging_steps", "1", "--num_beams", "1", "--num_examples", "0", "--report_to",
         "none", "--max_tokens", "400", "--max_source_length", "48", "--max_target_length", "48", "--vocab_size",
         "400", "--warmup_steps", "2", "--max_eval_samples", "4", "--max_train_steps", "1", "--checkpoint_minutes",
         "60", "--average_checkpoints", "1"]  # fmt: skip
REUSED = "Tokenized data: reused the cache"
BPE_REUSED = "Tokenizer: reused the BPE trained on the same text"
CACHED = "Tokenized data: cached in"


@pytest.fixture
def files(tmp_path):
    return write_demo_files(tmp_path / "data", num_train=48, num_validation=6, num_test=4)


@pytest.fixture
def tokenizing(monkeypatch):
    """The splits `datasets.Dataset.map` tokenized in this process (its "Tokenizing <split>" calls)."""
    calls = []
    original = datasets.Dataset.map

    def counting_map(self, *args, **kwargs):
        if str(kwargs.get("desc", "")).startswith("Tokenizing"):
            calls.append(kwargs["desc"].split()[-1])
        return original(self, *args, **kwargs)

    monkeypatch.setattr(datasets.Dataset, "map", counting_map)
    return calls


def train(files, tmp_path, caplog, out: str, *extra: str) -> list[str]:
    """One tiny run into tmp_path/out; the log lines about the cache."""
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="train"):
        train_in_process(["--train_file", str(files["train"]), "--validation_file", str(files["validation"]),
                          "--cache_dir", str(tmp_path / "cache"), *TINY_MODEL, *QUIET, *extra,
                          "--output_dir", str(tmp_path / out)])  # fmt: skip
    return [r.getMessage() for r in caplog.records if r.getMessage().startswith("Tokenized data")]


@pytest.fixture
def bpe_training(monkeypatch):
    """How many times a run trained a BPE tokenizer in this process."""
    calls = []
    original = tasks.train_bpe_tokenizer

    def counting(**kwargs):
        calls.append(kwargs["vocab_size"])
        return original(**kwargs)

    monkeypatch.setattr(tasks, "train_bpe_tokenizer", counting)
    return calls


@pytest.mark.slow
def test_another_learning_rate_or_output_dir_reuses_the_tokens(files, tmp_path, caplog, tokenizing, bpe_training):
    first = train(files, tmp_path, caplog, "first", "--learning_rate", "1e-3", "--lr_scheduler", "constant")
    assert len(first) == 1 and first[0].startswith(CACHED) and tokenizing == ["train", "validation"]
    assert bpe_training == [400] and not any(BPE_REUSED in r.getMessage() for r in caplog.records)
    folder = first[0].split(CACHED, 1)[1].split(";")[0].strip()
    # another learning rate on the same text: the BPE the first run trained is reused, and so are the tokens
    again = train(files, tmp_path, caplog, "again", "--learning_rate", "2e-3", "--lr_scheduler", "constant")
    assert again[0].startswith(REUSED) and folder in again[0] and tokenizing == ["train", "validation"]
    assert bpe_training == [400] and any(r.getMessage().startswith(BPE_REUSED) for r in caplog.records)
    assert (tmp_path / "again" / "tokenizer.json").read_bytes() == (tmp_path / "first" / "tokenizer.json").read_bytes()
    # another BPE option trains a new one (and so tokenizes again)
    other = train(files, tmp_path, caplog, "other", "--vocab_size", "380")
    assert other[0].startswith(CACHED) and bpe_training == [400, 380] and tokenizing[2:] == ["train", "validation"]
    del tokenizing[2:]
    # the same text, the first run's tokenizer, another learning rate, schedule and output folder: no tokenizing
    second = train(files, tmp_path, caplog, "second", "--tokenizer", str(tmp_path / "first"), "--learning_rate",
                   "5e-4", "--lr_scheduler", "inverse_sqrt")  # fmt: skip
    assert len(second) == 1 and second[0].startswith(REUSED) and folder in second[0], second
    assert tokenizing == ["train", "validation"]  # still only the first run's two splits
    # what changes the tokens tokenizes again: a length limit, then an edited text file
    limit = train(
        files, tmp_path, caplog, "third", "--tokenizer", str(tmp_path / "first"), "--max_target_length", "40"
    )
    assert limit[0].startswith(CACHED) and folder not in limit[0] and tokenizing[2:] == ["train", "validation"]
    with open(files["train"], "a", encoding="utf-8") as stream:  # one more pair: another size and mtime
        stream.write(json.dumps({"translation": {"en": "One more.", "de": "Noch einer."}}) + "\n")
    edited = train(files, tmp_path, caplog, "fourth", "--tokenizer", str(tmp_path / "first"))
    assert edited[0].startswith(CACHED) and tokenizing[4:] == ["train", "validation"]


def test_the_key_holds_what_changes_the_tokens_and_nothing_else(files, tmp_path):
    from tokenization import train_bpe_tokenizer
    from vaswani.data.loading import load_translation_splits
    from vaswani.model_folder import load_tokenizer

    def splits():
        raw, _ = load_translation_splits(train_file=files["train"], validation_file=files["validation"],
                                         cache_dir=tmp_path / "c")  # fmt: skip
        return raw

    raw = splits()
    tokenizer = train_bpe_tokenizer(dataset=raw["train"], source_lang="en", target_lang="de", vocab_size=400)
    tokenizer.save_pretrained(tmp_path / "tok")
    options = {"limits": [48, 48], "overlong": "drop"}
    key = cache.tokens_key(raw, tokenizer, options)
    assert cache.tokens_key(splits(), load_tokenizer(tmp_path / "tok"), dict(options)) == key  # read again, loaded
    assert cache.tokens_key(raw, tokenizer, {**options, "overlong": "truncate"}) != key
    other = train_bpe_tokenizer(dataset=raw["train"], source_lang="en", target_lang="de", vocab_size=380)
    assert cache.tokens_key(raw, other, options) != key
    stat = os.stat(files["validation"])
    os.utime(files["validation"], ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))  # touched: read again
    changed = cache.tokens_key(splits(), tokenizer, options)
    assert changed["splits"]["train"] == key["splits"]["train"]
    assert changed["splits"]["validation"] != key["splits"]["validation"]
    assert cache.cache_folder(changed, tmp_path) != cache.cache_folder(key, tmp_path)
    in_memory = datasets.Dataset.from_dict({"text": ["a", "b"]})
    assert cache.text_identity(in_memory) == cache.text_identity(datasets.Dataset.from_dict({"text": ["a", "b"]}))
    assert cache.text_identity(in_memory) != cache.text_identity(datasets.Dataset.from_dict({"text": ["a", "c"]}))


def test_load_or_tokenize_builds_once_and_other_processes_only_load(tmp_path):
    raw = {"train": datasets.Dataset.from_dict({"text": ["a b", "c"]})}
    key = {"version": 1, "splits": {"train": cache.text_identity(raw["train"])}}
    built = []

    def tokenize_split(split, dataset, work):
        built.append(split)
        return dataset.map(lambda b: {"input_ids": [[ord(c) for c in t] for t in b["text"]],
                                      "attention_mask": [[1] * len(t) for t in b["text"]],
                                      "length": [len(t) for t in b["text"]]}, batched=True), {"overlong": 0}  # fmt: skip

    with pytest.raises(RuntimeError, match="no tokenized cache"):  # a non-main process never tokenizes
        cache.load_or_tokenize(raw, key, tmp_path, tokenize_split, may_build=False, vocab_size=400)
    assert built == []
    tokenized, counts, folder, reused = cache.load_or_tokenize(raw, key, tmp_path, tokenize_split, vocab_size=400)
    assert (built, reused, counts) == (["train"], False, {"train": {"overlong": 0}})
    assert tokenized["train"]["length"] == [3, 1] and folder.parent == tmp_path / cache.CACHE_SUBDIR
    assert [p.name for p in folder.parent.iterdir()] == [folder.name]  # no staging folder left behind
    # stored compact: uint16 ids, int32 lengths, no attention masks (the collators make them)
    assert tokenized["train"].column_names == ["text", "input_ids", "length"]
    assert tokenized["train"].features["input_ids"] == datasets.List(datasets.Value("uint16"))
    assert tokenized["train"].features["length"] == datasets.Value("int32")
    assert tokenized["train"]["input_ids"] == [[97, 32, 98], [99]]
    again, counts, _, reused = cache.load_or_tokenize(raw, key, tmp_path, tokenize_split, may_build=False,
                                                      vocab_size=400)  # fmt: skip
    assert reused and built == ["train"] and again["train"]["length"] == [3, 1] and counts["train"] == {"overlong": 0}


def test_a_trained_tokenizer_is_cached_by_its_text_and_options(tmp_path):
    from tokenization import train_bpe_tokenizer
    from vaswani.model_folder import load_tokenizer

    texts = datasets.Dataset.from_dict({"translation": [{"en": f"a {i} b", "de": f"c {i} d"} for i in range(30)]})
    options = {"source_lang": "en", "target_lang": "de", "vocab_size": 300}
    trained = []

    def train(data=texts, opts=options):
        trained.append(opts["vocab_size"])
        return train_bpe_tokenizer(dataset=data, **opts)

    first, folder, reused = cache.load_or_train_tokenizer(texts, options, tmp_path, train, load_tokenizer)
    assert (trained, reused, folder.parent) == ([300], False, tmp_path / cache.TOKENIZER_SUBDIR)
    assert sorted(p.name for p in folder.parent.iterdir()) == [folder.name]  # no staging folder left behind
    again, again_folder, reused = cache.load_or_train_tokenizer(texts, dict(options), tmp_path, train, load_tokenizer)
    assert (trained, reused, again_folder) == ([300], True, folder)
    assert again.backend_tokenizer.to_str() == first.backend_tokenizer.to_str()
    other = {**options, "vocab_size": 290}  # another option: trained again, into another folder
    _, other_folder, reused = cache.load_or_train_tokenizer(texts, other, tmp_path, lambda: train(opts=other),
                                                            load_tokenizer)  # fmt: skip
    assert (trained, reused) == ([300, 290], False) and other_folder != folder
    edited = texts.select(range(29))  # another text: trained again
    _, edited_folder, reused = cache.load_or_train_tokenizer(edited, options, tmp_path, lambda: train(data=edited),
                                                             load_tokenizer)  # fmt: skip
    assert (trained, reused) == ([300, 290, 300], False) and edited_folder not in (folder, other_folder)


def test_a_failed_training_caches_nothing(tmp_path):
    texts = datasets.Dataset.from_dict({"text": ["a"]})

    def fail():
        raise RuntimeError("killed")

    with pytest.raises(RuntimeError, match="killed"):
        cache.load_or_train_tokenizer(texts, {}, tmp_path, fail, lambda folder: None)
    assert not (tmp_path / cache.TOKENIZER_SUBDIR).exists() or not any((tmp_path / cache.TOKENIZER_SUBDIR).iterdir())


def test_column_array_reads_a_column_in_one_slice(monkeypatch):
    """A lazy `datasets` column converted row by row took 16 s for 200k pairs (the over-long count of issue 30)."""
    dataset = datasets.Dataset.from_dict({"length": [3, 1, 2], "flag": [True, False, True]})

    def refuse(self):
        raise AssertionError("iterated row by row")

    monkeypatch.setattr(datasets.arrow_dataset.Column, "__iter__", refuse)
    lengths = cache.column_array(dataset, "length")
    assert isinstance(lengths, np.ndarray) and lengths.tolist() == [3, 1, 2]
    assert int(np.count_nonzero(cache.column_array(dataset, "flag"))) == 2


def test_pair_encoder_is_the_tokenizers_own_call_made_faster(tmp_path):
    """The Rust path gives exactly `tokenizer(sources, text_target=targets)`'s ids; a tokenizer whose fast path
    would disagree (truncation set) keeps its own call."""
    from tokenization import train_bpe_tokenizer

    pairs = [("Hello world.", "Hallo Welt."), ("Ünïcödé ﬁ ① text", "Straße Ａ"), ("", "x"), ("a " * 40, "b")]
    data = datasets.Dataset.from_dict({"translation": [{"en": s, "de": t} for s, t in pairs * 5]})
    tokenizer = train_bpe_tokenizer(dataset=data, source_lang="en", target_lang="de", vocab_size=300)
    sources, targets = [s for s, _ in pairs], [t for _, t in pairs]
    encode = cache.pair_encoder(tokenizer, sources, targets)
    assert encode.__name__ == "encode_fast"
    reference = tokenizer(sources, text_target=targets)
    assert encode(sources, targets) == (reference["input_ids"], reference["labels"])
    assert all(ids[-1] == tokenizer.eos_token_id for ids in encode(sources, targets)[0])
    tokenizer.backend_tokenizer.enable_truncation(4)  # the tokenizer's call resets this; the Rust one would not
    assert cache.pair_encoder(tokenizer, sources, targets).__name__ == "call"
    tokenizer.backend_tokenizer.no_truncation()

    class Disagrees:  # a tokenizer whose backend does not give its call's ids (e.g. a target vocabulary of its own)
        is_fast, backend_tokenizer = True, tokenizer.backend_tokenizer

        def __call__(self, sources, text_target):
            encoded = tokenizer(sources, text_target=text_target)
            return {"input_ids": encoded["input_ids"], "labels": [ids[1:] for ids in encoded["labels"]]}

    assert cache.pair_encoder(Disagrees(), sources, targets).__name__ == "call"


def test_ids_array_uses_the_compact_type():
    assert cache.ids_array([[1, 2], []], 400).type == pa.list_(pa.uint16())
    assert cache.ids_array([[70000]], 70001).type == pa.list_(pa.int32())
    assert cache.ids_array([[1, 2], []], 400).to_pylist() == [[1, 2], []]


def test_workers_default_to_every_core_except_for_small_splits(monkeypatch):
    monkeypatch.setattr(cache, "default_workers", lambda: 8)
    assert cache.workers_for(cache.SMALL_SPLIT, None) == 8
    assert cache.workers_for(cache.SMALL_SPLIT - 1, None) is None
    assert cache.workers_for(10**6, 1) is None and cache.workers_for(10**6, 3) == 3
    assert tasks.workers_for is cache.workers_for  # what tokenize_splits uses


@pytest.mark.parametrize("value", ["0", "-2"])
def test_preprocessing_num_workers_below_one_is_refused(tmp_path, value):
    from conftest import train_command_in_process

    from vaswani.training.options import parse_args

    argv = ["--max_train_steps", "1", "--output_dir", str(tmp_path / "run")]
    assert parse_args([*argv, "--preprocessing_num_workers", "2"]).preprocessing_num_workers == 2
    status, stderr = train_command_in_process([*argv, "--preprocessing_num_workers", value])
    assert status == 2 and f"--preprocessing_num_workers: must be at least 1, got {value}" in stderr, stderr


@pytest.mark.slow
def test_a_language_model_run_reuses_its_blocks_too(tmp_path, caplog, tokenizing):
    """--task causal_lm: another learning rate and output folder reuse the blocks; another --block_size does not."""
    folder = tmp_path / "text"
    folder.mkdir()
    lines = [f"Line number {i} of a small text, with some words." for i in range(60)]
    (folder / "train.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    (folder / "valid.txt").write_text("\n".join(lines[:8]) + "\n", encoding="utf-8")
    logs = []
    for out, extra in (("a", ["--learning_rate", "1e-3"]), ("b", ["--learning_rate", "2e-3"]),
                       ("c", ["--learning_rate", "1e-3", "--block_size", "24"])):  # fmt: skip
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="train"):
            train_in_process(["--task", "causal_lm", "--train_file", str(folder / "train.txt"), "--validation_file",
                              str(folder / "valid.txt"), "--cache_dir", str(tmp_path / "cache"), "--vocab_size",
                              "300", "--d_model", "16", "--decoder_layers", "1", "--decoder_attention_heads", "2",
                              "--decoder_ffn_dim", "32", "--block_size", "32", "--max_tokens", "256",
                              "--max_train_steps", "1", "--eval_steps", "0", "--report_to", "none",
                              "--checkpoint_minutes", "60", "--average_checkpoints", "1", "--lr_scheduler", "constant",
                              *extra, "--output_dir", str(tmp_path / out)])  # fmt: skip
        logs.append([r.getMessage() for r in caplog.records if r.getMessage().startswith("Tokenized data")])
    assert [log[0].split(":")[1].split()[0] for log in logs] == ["cached", "reused", "cached"], logs
    assert tokenizing == ["train", "validation", "train", "validation"]
