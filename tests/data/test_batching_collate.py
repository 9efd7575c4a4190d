"""`TokenCollator` and its subclasses (vaswani/data/batching.py): translation batches equal to transformers'
`DataCollatorForSeq2Seq`, a decoder-only model's equal to `DataCollatorForLanguageModeling(mlm=False)` (the
references, fed the same rows through `collate`'s row path), from a split's Arrow columns without `datasets`' per-row
indexing."""

from __future__ import annotations

import random

import datasets
import pytest
import torch
from conftest import tiny_model
from transformers import DataCollatorForLanguageModeling, DataCollatorForSeq2Seq

from tokenization import train_bpe_tokenizer
from vaswani.data.batching import LanguageModelCollator, PairCollator, TokenCollator, arrow_rows, collate


@pytest.fixture(scope="module")
def tokenizer():
    rng = random.Random(0)
    words = ["the", "cat", "sat", "on", "a", "mat", "die", "Katze", "sitzt", "auf", "der", "Matte", "and", "und"]
    pairs = [{"en": " ".join(rng.choices(words, k=rng.randint(1, 12))), "de": " ".join(rng.choices(words, k=rng.randint(1, 12)))}
             for _ in range(200)]  # fmt: skip
    return train_bpe_tokenizer(dataset=datasets.Dataset.from_dict({"translation": pairs}), source_lang="en",
                               target_lang="de", vocab_size=300)  # fmt: skip


def tokenized_split(rows: int, seed: int, attention_mask: bool = True, extra: bool = False) -> datasets.Dataset:
    """Rows of random token ids: sources of 1-30 tokens, targets of 1-25, as a tokenized split holds them."""
    rng = random.Random(seed)
    data = []
    for _ in range(rows):
        source = [rng.randint(4, 99) for _ in range(rng.randint(1, 30))]
        row = {"input_ids": source, "labels": [rng.randint(4, 99) for _ in range(rng.randint(1, 25))]}
        if attention_mask:
            row["attention_mask"] = [1] * len(source)
        if extra:
            row["source_length"] = len(source)
        data.append(row)
    return datasets.Dataset.from_list(data)


def assert_same_batch(ours: dict, reference: dict) -> None:
    assert list(ours) == list(reference)
    for key in reference:
        assert ours[key].dtype == reference[key].dtype == torch.int64, key
        assert torch.equal(ours[key], reference[key]), key


@pytest.mark.parametrize("side", ["right", "left"])
@pytest.mark.parametrize("attention_mask", [True, False])
@pytest.mark.parametrize("with_model", [True, False])
def test_batches_equal_transformers_seq2seq_collator(tokenizer, side, attention_mask, with_model):
    tokenizer.padding_side = side
    try:
        model = tiny_model() if with_model else None
        ours = PairCollator(tokenizer, model) if with_model else TokenCollator(tokenizer)
        reference = DataCollatorForSeq2Seq(tokenizer, model=model, label_pad_token_id=-100)
        split = tokenized_split(300, seed=1, attention_mask=attention_mask, extra=True)
        rng = random.Random(2)
        for dataset in (split, split.shuffle(seed=3).select(range(250))):  # the second maps rows to the table's
            for size in (1, 7, 64, 250):
                indices = rng.sample(range(len(dataset)), size)
                assert_same_batch(collate(dataset, indices, ours), collate(dataset, indices, reference))
        rows = [split[i] for i in range(5)]  # rows given as dicts
        columns = ["input_ids", "labels"] + ["attention_mask"] * attention_mask
        features = [{key: row[key] for key in columns} for row in rows]
        assert_same_batch(ours(features), reference(features))
    finally:
        tokenizer.padding_side = "right"


def test_a_shape_buckets_batch_is_padded_the_same(tokenizer):
    model = tiny_model()
    ours, reference = PairCollator(tokenizer, model), DataCollatorForSeq2Seq(tokenizer, model=model,
                                                                           label_pad_token_id=-100)  # fmt: skip
    split = tokenized_split(40, seed=4)
    indices = [5, 3, 17, 8]
    assert_same_batch(collate(split, indices, ours, shape=(6, 32, 27)),
                      collate(split, indices, reference, shape=(6, 32, 27)))  # fmt: skip


def test_rows_come_from_the_arrow_table_not_from_datasets_indexing(tokenizer, monkeypatch):
    split = tokenized_split(50, seed=5).shuffle(seed=6).select(range(40))
    indices = [39, 0, 12, 12, 7]
    expected = [split[i] for i in indices]

    def refuse(*args, **kwargs):
        raise AssertionError("datasets' per-row indexing was used")

    monkeypatch.setattr(datasets.Dataset, "__getitem__", refuse)
    table = arrow_rows(split, indices, ["input_ids", "labels"])
    assert table.column_names == ["input_ids", "labels"]
    assert table.to_pylist() == [{key: row[key] for key in ("input_ids", "labels")} for row in expected]
    batch = collate(split, indices, PairCollator(tokenizer))
    assert batch["input_ids"][0, : len(expected[0]["input_ids"])].tolist() == expected[0]["input_ids"]


class WithoutIndicesAttribute:
    """A split as a `datasets` release that renamed `Dataset._indices` (private) would hold it: the same public
    interface, no `_indices`."""

    def __init__(self, dataset: datasets.Dataset):
        self._dataset = dataset

    def __getattr__(self, name):
        if name == "_indices":
            raise AttributeError(name)
        return getattr(self._dataset, name)


def test_without_the_private_row_mapping_rows_come_from_datasets_own_indexing():
    split = tokenized_split(50, seed=5).shuffle(seed=6).select(range(40))
    indices = [39, 0, 12, 12, 7]
    table = arrow_rows(WithoutIndicesAttribute(split), indices, ["labels", "input_ids"])
    assert table.column_names == ["labels", "input_ids"]
    assert table.to_pylist() == [{key: split[i][key] for key in ("labels", "input_ids")} for i in indices]


def test_a_column_it_cannot_pad_is_refused(tokenizer):
    with pytest.raises(ValueError, match="this one has 'token_type_ids'"):
        PairCollator(tokenizer)([{"input_ids": [5, 6], "token_type_ids": [0, 0]}])


@pytest.mark.parametrize("side", ["right", "left"])
@pytest.mark.parametrize("attention_mask", [True, False])
def test_language_model_batches_equal_transformers_language_modeling_collator(tokenizer, side, attention_mask):
    tokenizer.padding_side = side
    try:
        ours, reference = LanguageModelCollator(tokenizer), DataCollatorForLanguageModeling(tokenizer, mlm=False)
        split = tokenized_split(120, seed=7, attention_mask=attention_mask).remove_columns("labels")
        rng = random.Random(8)
        for dataset in (split, split.shuffle(seed=9).select(range(100))):
            for size in (1, 9, 100):
                indices = rng.sample(range(len(dataset)), size)
                batch = collate(dataset, indices, ours)
                assert_same_batch(batch, collate(dataset, indices, reference))
                assert (batch["labels"] == -100).sum() == (batch["attention_mask"] == 0).sum()  # PAD scores nothing
    finally:
        tokenizer.padding_side = "right"
