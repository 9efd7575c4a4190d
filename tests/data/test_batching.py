"""Tests of token-budget batching: budgets, coverage, distributed sharding, shuffling, determinism and efficiency.

Costs, coverage and padding are recomputed here from the lengths with plain Python, not with the sampler's helpers.
"""

from __future__ import annotations

import random
from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.utils.data import DataLoader

from vaswani.data.batching import TokenBatchSampler, padding_efficiency


def varied_lengths(count: int, seed: int = 0, longest: int = 120) -> tuple[list[int], list[int]]:
    """Source lengths from 1 to `longest` (mostly short, like real text), targets about 10% longer."""
    rng = random.Random(seed)
    source = [min(longest, max(1, int(rng.lognormvariate(2.8, 0.7)))) for _ in range(count)]
    target = [min(longest, max(1, round(length * rng.uniform(0.8, 1.4)))) for length in source]
    return source, target


def padded(length: int, multiple: int) -> int:
    return -(-length // multiple) * multiple


def batch_cost(batch: list[int], source: list[int], target: list[int], multiple: int = 1) -> int:
    """len(batch) * longest padded side in the batch, every pair counting at least 1 token."""
    longest = max(max(padded(source[i], multiple), padded(target[i], multiple), 1) for i in batch)
    return len(batch) * longest


def assert_within_budget(batches, source, target, max_tokens, max_sentences=None, multiple=1):
    for batch in batches:
        assert batch, "empty batch"
        assert batch_cost(batch, source, target, multiple) <= max_tokens, batch
        if max_sentences is not None:
            assert len(batch) <= max_sentences


def rank_batches(source, target, max_tokens, replicas, epoch=0, **kwargs) -> list[list[list[int]]]:
    samplers = [
        TokenBatchSampler(source, target, max_tokens, num_replicas=replicas, rank=rank, **kwargs)
        for rank in range(replicas)
    ]
    for sampler in samplers:
        sampler.set_epoch(epoch)
    per_rank = [list(sampler) for sampler in samplers]
    for sampler, batches in zip(samplers, per_rank, strict=True):
        assert len(sampler) == len(batches)
    return per_rank


# ---------------------------------------------------------------------------------------------------------------------
# One replica
# ---------------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("max_sentences", [None, 7])
@pytest.mark.parametrize("shuffle", [True, False])
def test_budget_and_exact_cover(shuffle, max_sentences):
    source, target = varied_lengths(3000)
    sampler = TokenBatchSampler(source, target, 600, shuffle=shuffle, max_sentences=max_sentences, seed=3)
    for epoch in range(3):
        sampler.set_epoch(epoch)
        batches = list(sampler)
        assert len(batches) == len(sampler)
        assert_within_budget(batches, source, target, 600, max_sentences)
        assert sorted(i for batch in batches for i in batch) == list(range(len(source)))
        assert all(isinstance(i, int) for batch in batches for i in batch)


def test_batches_are_full_not_a_fixed_sentence_count():
    # 100 pairs of length 10 and 100 of length 50, budget 500: 50 short pairs or 10 long ones per batch.
    source = [10] * 100 + [50] * 100
    target = list(source)
    batches = TokenBatchSampler(source, target, 500, shuffle=False).batches(0)
    assert sorted(len(batch) for batch in batches) == [10] * 10 + [50] * 2


def test_cost_counts_the_longer_side_and_padding_multiple():
    # Source 3, target 5 -> cost 5; with pad_to_multiple_of=8 -> 8.
    source, target = [3] * 16, [5] * 16
    assert {len(b) for b in TokenBatchSampler(source, target, 40, shuffle=False).batches(0)} == {8}
    sampler = TokenBatchSampler(source, target, 40, shuffle=False, pad_to_multiple_of=8)
    assert {len(b) for b in sampler.batches(0)} == {5, 1}
    assert_within_budget(sampler.batches(0), source, target, 40, multiple=8)


def test_zero_length_pairs_still_take_a_row():
    sampler = TokenBatchSampler([0] * 10, [0] * 10, 4, shuffle=False)
    assert [len(b) for b in sampler.batches(0)] == [4, 4, 2]


def test_shuffle_false_gives_length_sorted_batches_every_epoch():
    source, target = varied_lengths(500, seed=1)
    sampler = TokenBatchSampler(source, target, 400, shuffle=False)
    flat = [i for batch in sampler.batches(0) for i in batch]
    assert flat == sorted(range(len(source)), key=lambda i: (source[i], target[i], i))
    assert sampler.batches(0) == sampler.batches(5)


def test_shuffle_changes_order_and_is_reproducible():
    source, target = varied_lengths(2000, seed=2)
    sampler = TokenBatchSampler(source, target, 500, seed=7)
    epoch0, epoch1 = sampler.batches(0), sampler.batches(1)
    assert epoch0 != epoch1
    assert epoch0 == TokenBatchSampler(source, target, 500, seed=7).batches(0)
    assert epoch0 != TokenBatchSampler(source, target, 500, seed=8).batches(0)
    sampler.set_epoch(1)
    assert list(sampler) == epoch1
    # Not merely a reversed or rotated order of the same sequence.
    assert [b for b in epoch0 if b in epoch1] != epoch0


def test_shuffle_changes_batch_order():
    # All lengths distinct: no ties, so the batches are the same every epoch and only their order can change.
    source = list(range(1, 201))
    target = [length + 1 for length in source]
    sampler = TokenBatchSampler(source, target, 1000, seed=0)
    epochs = [sampler.batches(epoch) for epoch in range(3)]
    assert all(sorted(batches) == sorted(epochs[0]) for batches in epochs)
    assert epochs[0] != epochs[1] != epochs[2]
    first_lengths = [source[batch[0]] for batch in epochs[0]]
    assert first_lengths != sorted(first_lengths)


def test_shuffle_changes_batch_composition_among_equal_lengths():
    source, target = [5] * 60 + [9] * 60, [6] * 60 + [9] * 60
    sampler = TokenBatchSampler(source, target, 60)
    compositions = [{frozenset(batch) for batch in sampler.batches(epoch)} for epoch in range(2)]
    assert compositions[0] != compositions[1]
    for epoch in range(2):  # still bucketed: no batch mixes the two lengths
        assert all(len({source[i] for i in batch}) == 1 for batch in sampler.batches(epoch))


def test_same_number_of_batches_every_epoch():
    source, target = varied_lengths(1500, seed=4)
    sampler = TokenBatchSampler(source, target, 300, seed=1)
    assert len({len(sampler.batches(epoch)) for epoch in range(4)}) == 1


def test_resume_skips_exact_batches():
    source, target = varied_lengths(800, seed=5)
    sampler = TokenBatchSampler(source, target, 300)
    sampler.set_epoch(2)
    seen = list(sampler)[:4]
    resumed = TokenBatchSampler(source, target, 300).batches(2)[4:]
    assert seen + resumed == list(sampler)


def test_over_long_pair_raises_with_index_and_lengths():
    with pytest.raises(ValueError, match=r"pair 2 \(source length 3, target length 30.*max_tokens=20"):
        TokenBatchSampler([5, 6, 3, 4], [5, 6, 30, 4], 20)
    with pytest.raises(ValueError, match="pair 0"):  # fits raw, not once padded to a multiple of 8
        TokenBatchSampler([9], [9], 10, pad_to_multiple_of=8)


def test_oversized_alone_gives_each_over_long_pair_a_batch_of_its_own():
    source, target = [5, 6, 3, 4, 40, 2], [5, 6, 30, 4, 3, 2]
    sampler = TokenBatchSampler(source, target, 20, shuffle=False, oversized_alone=True)
    batches = list(sampler)
    assert sorted(i for batch in batches for i in batch) == list(range(6))  # every pair once
    assert [2] in batches and [4] in batches  # the two pairs over the budget, alone
    for batch in batches:  # every other batch keeps the budget
        if batch not in ([2], [4]):
            assert len(batch) * max(max(source[i], target[i]) for i in batch) <= 20


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (dict(source_lengths=[1, 2], target_lengths=[1]), "2 entries"),
        (dict(max_tokens=0), "max_tokens"),
        (dict(source_lengths=[-1, 2]), "non-negative"),
        (dict(source_lengths=[1.5, 2.0]), "integers"),
        (dict(num_replicas=2, rank=2), "rank"),
        (dict(max_sentences=0), "max_sentences"),
        (dict(pad_to_multiple_of=0), "pad_to_multiple_of"),
        (dict(drop_uneven=True, even_batches=False), "choose one"),
        (dict(seed=-1), "seed"),
    ],
)
def test_bad_arguments(kwargs, message):
    arguments = dict(source_lengths=[1, 2], target_lengths=[1, 2], max_tokens=10) | kwargs
    with pytest.raises(ValueError, match=message):
        TokenBatchSampler(**arguments)


def test_empty_dataset():
    sampler = TokenBatchSampler([], [], 10, num_replicas=2, rank=1)
    assert len(sampler) == 0
    assert list(sampler) == []


def test_lengths_from_a_datasets_column():
    import datasets

    source, target = varied_lengths(300, seed=10)
    table = datasets.Dataset.from_dict({"source_length": source, "target_length": target})
    subset = table.select(list(range(299, -1, -2)))  # an indices mapping, as after select/shuffle
    expected = TokenBatchSampler(source[::-1][::2], target[::-1][::2], 200).batches(1)
    sampler = TokenBatchSampler(subset["source_length"], subset["target_length"], 200)
    assert sampler.batches(1) == expected
    assert padding_efficiency(expected, subset["source_length"], subset["target_length"]) == pytest.approx(
        padding_efficiency(expected, source[::-1][::2], target[::-1][::2])
    )


def test_works_as_dataloader_batch_sampler():
    source, target = varied_lengths(100, seed=6)
    sampler = TokenBatchSampler(source, target, 200, seed=2)
    loader = DataLoader(list(range(100)), batch_sampler=sampler, collate_fn=list)
    sampler.set_epoch(3)
    assert list(loader) == sampler.batches(3)
    assert len(loader) == len(sampler)


# ---------------------------------------------------------------------------------------------------------------------
# Several replicas
# ---------------------------------------------------------------------------------------------------------------------


def uneven_budget(source, target, replicas, **kwargs) -> int:
    """A budget for which the global number of batches is not a multiple of `replicas` (so padding is exercised)."""
    for max_tokens in range(700, 800):
        if len(TokenBatchSampler(source, target, max_tokens, **kwargs)) % replicas:
            return max_tokens
    raise AssertionError("no budget in 700..799 gives an uneven number of batches")


@pytest.mark.parametrize("replicas", [2, 3])
@pytest.mark.parametrize("shuffle", [True, False])
def test_replicas_cover_everything_with_equal_counts(replicas, shuffle):
    source, target = varied_lengths(1000, seed=replicas)
    max_tokens = uneven_budget(source, target, replicas, shuffle=shuffle)
    global_order = TokenBatchSampler(source, target, max_tokens, shuffle=shuffle).global_batches(1)
    total = len(global_order)
    per_rank = rank_batches(source, target, max_tokens, replicas, epoch=1, shuffle=shuffle)

    counts = {len(batches) for batches in per_rank}
    assert counts == {-(-total // replicas)}
    every = [i for batches in per_rank for batch in batches for i in batch]
    assert set(every) == set(range(len(source)))
    # The only repeats are the padding batches: whole batches from the start of the epoch's global order.
    padding = global_order[: replicas * counts.pop() - total]
    assert 0 < len(padding) < replicas
    dealt = [tuple(batch) for batches in per_rank for batch in batches]
    assert sorted(dealt) == sorted(map(tuple, global_order + padding))
    duplicated = {i for i, n in Counter(every).items() if n > 1}
    assert duplicated == {i for batch in padding for i in batch}


def test_ranks_take_interleaved_batches():
    source, target = varied_lengths(600, seed=8)
    global_order = TokenBatchSampler(source, target, 300, seed=4).global_batches(2)
    per_rank = rank_batches(source, target, 300, 2, epoch=2, seed=4)
    assert per_rank[0][:3] == [global_order[0], global_order[2], global_order[4]]
    assert per_rank[1][:3] == [global_order[1], global_order[3], global_order[5]]


@pytest.mark.parametrize("replicas", [2, 3])
def test_drop_uneven(replicas):
    source, target = varied_lengths(1000, seed=replicas)
    max_tokens = uneven_budget(source, target, replicas)
    global_order = TokenBatchSampler(source, target, max_tokens).global_batches(0)
    total = len(global_order)
    per_rank = rank_batches(source, target, max_tokens, replicas, drop_uneven=True)
    assert {len(batches) for batches in per_rank} == {total // replicas}
    every = [i for batches in per_rank for batch in batches for i in batch]
    assert len(every) == len(set(every))  # nothing repeated
    kept = total - total % replicas
    assert set(every) == {i for batch in global_order[:kept] for i in batch}  # the last batches are dropped


@pytest.mark.parametrize("replicas", [2, 3])
def test_uneven_evaluation_mode_repeats_nothing(replicas):
    source, target = varied_lengths(1000, seed=replicas)
    max_tokens = uneven_budget(source, target, replicas, shuffle=False)
    total = len(TokenBatchSampler(source, target, max_tokens, shuffle=False))
    per_rank = rank_batches(source, target, max_tokens, replicas, shuffle=False, even_batches=False)
    counts = [len(batches) for batches in per_rank]
    assert sum(counts) == total and max(counts) - min(counts) == 1
    every = sorted(i for batches in per_rank for batch in batches for i in batch)
    assert every == list(range(len(source)))


def test_fewer_batches_than_replicas_still_gives_every_rank_one():
    per_rank = rank_batches([4, 4], [4, 4], 8, 3, shuffle=False)
    assert [len(batches) for batches in per_rank] == [1, 1, 1]
    assert all(batches == [[0, 1]] for batches in per_rank)


# ---------------------------------------------------------------------------------------------------------------------
# Efficiency
# ---------------------------------------------------------------------------------------------------------------------


def test_padding_efficiency_by_hand():
    # Batch [0, 1]: real 2+3 + 4+1 = 10, padded 2 * (4 + 3) = 14. Batch [2]: real 5 + 5, padded 10.
    assert padding_efficiency([[0, 1], [2]], [2, 4, 5], [3, 1, 5]) == pytest.approx(20 / 24)
    assert padding_efficiency([], [], []) == 1.0


def test_bucketing_beats_random_fixed_size_batches():
    source, target = varied_lengths(4000, seed=9)
    bucketed = TokenBatchSampler(source, target, 1000, seed=0).batches(0)
    mean_size = round(len(source) / len(bucketed))
    order = list(range(len(source)))
    random.Random(0).shuffle(order)
    fixed = [order[k : k + mean_size] for k in range(0, len(order), mean_size)]

    def efficiency(batches):  # computed here independently of padding_efficiency
        real = sum(source[i] + target[i] for batch in batches for i in batch)
        total = sum(len(b) * (max(source[i] for i in b) + max(target[i] for i in b)) for b in batches)
        return real / total

    assert padding_efficiency(bucketed, source, target) == pytest.approx(efficiency(bucketed))
    assert padding_efficiency(fixed, source, target) == pytest.approx(efficiency(fixed))
    assert efficiency(bucketed) > 0.85
    assert efficiency(bucketed) > efficiency(fixed) + 0.3


# ---------------------------------------------------------------------------------------------------------------------
# Property test
# ---------------------------------------------------------------------------------------------------------------------


@st.composite
def corpora(draw):
    count = draw(st.integers(0, 60))
    source = draw(st.lists(st.integers(0, 40), min_size=count, max_size=count))
    target = draw(st.lists(st.integers(0, 40), min_size=count, max_size=count))
    multiple = draw(st.sampled_from([1, 2, 8]))
    longest = max(
        [max(padded(s, multiple), padded(t, multiple), 1) for s, t in zip(source, target, strict=True)] + [1]
    )
    max_tokens = draw(st.integers(longest, 4 * longest + 50))
    return source, target, multiple, max_tokens


@settings(max_examples=150, deadline=None)
@given(
    corpus=corpora(),
    max_sentences=st.none() | st.integers(1, 10),
    replicas=st.integers(1, 4),
    shuffle=st.booleans(),
    mode=st.sampled_from(["repeat", "drop", "uneven"]),
    seed=st.integers(0, 1000),
    epoch=st.integers(0, 3),
)
def test_invariants(corpus, max_sentences, replicas, shuffle, mode, seed, epoch):
    source, target, multiple, max_tokens = corpus
    options = dict(
        shuffle=shuffle,
        seed=seed,
        max_sentences=max_sentences,
        pad_to_multiple_of=multiple,
        drop_uneven=mode == "drop",
        even_batches=mode != "uneven",
    )
    global_order = TokenBatchSampler(source, target, max_tokens, **options).global_batches(epoch)
    assert_within_budget(global_order, source, target, max_tokens, max_sentences, multiple)
    assert sorted(i for batch in global_order for i in batch) == list(range(len(source)))

    per_rank = rank_batches(source, target, max_tokens, replicas, epoch=epoch, **options)
    counts = [len(batches) for batches in per_rank]
    dealt = [batch for batches in per_rank for batch in batches]
    assert_within_budget(dealt, source, target, max_tokens, max_sentences, multiple)
    total = len(global_order)
    if mode == "uneven" or replicas == 1:
        assert sum(counts) == total and max(counts) - min(counts) <= 1
        assert sorted(i for batch in dealt for i in batch) == list(range(len(source)))
    elif mode == "drop":  # the last total % replicas batches are dropped
        assert counts == [total // replicas] * replicas
        assert Counter(map(tuple, dealt)) == Counter(map(tuple, global_order[: replicas * (total // replicas)]))
    else:  # padded by repeating batches from the start of the global order
        assert counts == [-(-total // replicas)] * replicas
        padding = [global_order[k % total] for k in range(replicas * counts[0] - total)]
        assert Counter(map(tuple, dealt)) == Counter(map(tuple, global_order + padding))


def test_an_epochs_batches_read_like_lists_of_indices_and_slice_without_copying_the_order():
    source, target = varied_lengths(500, seed=3)
    sampler = TokenBatchSampler(source, target, 200, seed=1)
    batches = sampler.batches(1)
    as_lists = [list(batch) for batch in batches]
    assert all(isinstance(batch, list) and all(type(i) is int for i in batch) for batch in as_lists)
    assert batches == as_lists and as_lists == batches and batches == sampler.batches(1)
    assert batches != sampler.batches(2) and batches != as_lists[:-1]
    assert [batches[k] for k in range(len(batches))] == as_lists and batches[-1] == as_lists[-1]
    tail = batches[3:]
    assert tail == as_lists[3:] and tail.order is batches.order  # a view of the same epoch order
    assert batches[:2] + tail == as_lists[:2] + as_lists[3:] == [*as_lists[:2], *tail]  # + makes a list
    with pytest.raises(IndexError):
        batches[len(batches)]
    assert sorted(i for batch in batches for i in batch) == list(range(500))


def test_the_sampler_holds_no_python_object_per_pair():
    """Issue 30 item 3: lengths, costs and an epoch's order are int32 arrays; building the sampler and an epoch's
    batches allocates a few bytes per pair (tracemalloc counts numpy's arrays), where lists of Python ints take ~40."""
    import tracemalloc

    import numpy as np

    pairs = 400_000
    rng = np.random.default_rng(0)
    source = rng.integers(1, 120, pairs).astype(np.uint16)  # as the compact tokenized cache stores them
    target = rng.integers(1, 120, pairs).astype(np.uint16)
    tracemalloc.start()
    try:
        sampler = TokenBatchSampler(source, target, 4096, seed=0)
        batches = sampler.batches(3)
        _, peak = tracemalloc.get_traced_memory()
        held, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert sampler.source_lengths.dtype == sampler.costs.dtype == batches.order.dtype == np.int32
    assert held / pairs < 24, f"{held / pairs:.1f} bytes per pair held"
    assert peak / pairs < 48, f"{peak / pairs:.1f} bytes per pair at the peak"


# ---------------------------------------------------------------------------------------------------------------
# Shape buckets (issue 41): few distinct batch shapes for a compiled step
# ---------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("count", [1, 4, 32])
@pytest.mark.parametrize("replicas", [1, 2])
def test_shape_buckets_give_at_most_k_shapes_that_every_batch_fits(count, replicas):
    source, target = varied_lengths(3000, seed=3)
    samplers = [TokenBatchSampler(source, target, 1500, seed=1, num_replicas=replicas, rank=rank, shape_buckets=count)
                for rank in range(replicas)]  # fmt: skip
    shapes = set()
    for epoch in (0, 1):
        seen = []
        for sampler in samplers:
            for batch in sampler.batches(epoch):
                rows, source_length, target_length = sampler.batch_shape(batch)
                assert len(batch) <= rows and rows * max(source_length, target_length) <= 1500
                assert (
                    max(source[i] for i in batch) <= source_length and max(target[i] for i in batch) <= target_length
                )
                shapes.add((rows, source_length, target_length))
                seen += batch
        assert Counter(seen).keys() == set(range(3000)) and max(Counter(seen).values()) <= 2  # (rank padding repeats)
    assert len(shapes) <= count
    assert {tuple(shape) for shape in samplers[0].shapes.tolist()} == shapes


def test_shape_buckets_draw_new_batch_members_each_epoch_and_are_reproducible():
    source, target = varied_lengths(2000, seed=4)
    sampler = TokenBatchSampler(source, target, 2000, seed=5, shape_buckets=8)
    again = TokenBatchSampler(source, target, 2000, seed=5, shape_buckets=8)
    assert list(sampler.batches(0)) == list(again.batches(0))
    first, second = ({frozenset(b) for b in sampler.batches(e)} for e in (0, 1))
    assert len(first & second) < len(first) // 2
    assert len(sampler.batches(0)) == len(sampler.batches(1))
    fixed = TokenBatchSampler(source, target, 2000, shuffle=False, shape_buckets=8)
    assert list(fixed.batches(0)) == list(fixed.batches(3))


def test_a_shapes_batches_have_balanced_sizes_and_the_shape_has_the_largest():
    source, target = [5] * 10, [6] * 10  # one shape; a cap of 100 // 6 = 16 rows: one batch of 10
    sampler = TokenBatchSampler(source, target, 100, shape_buckets=4, shuffle=False)
    assert [len(b) for b in sampler.batches(0)] == [10] and sampler.batch_shape(list(range(10))) == (10, 5, 6)
    sampler = TokenBatchSampler([5] * 40, [6] * 40, 100, shape_buckets=4, shuffle=False)  # 40 pairs, cap 16: 3 batches
    assert sorted(len(b) for b in sampler.batches(0)) == [13, 13, 14] and sampler.shapes.tolist() == [[14, 5, 6]]


def test_choose_shapes_finds_two_clusters_and_one_shape_fits_everything():
    from vaswani.data.batching import choose_shapes

    source = np.array([3] * 50 + [30] * 50)
    target = np.array([4] * 50 + [28] * 50)
    assert choose_shapes(source, target, 1).tolist() == [[30, 28]]
    assert choose_shapes(source, target, 2).tolist() == [[3, 4], [30, 28]]
    assert choose_shapes(source, target, 5).tolist() == [[3, 4], [30, 28]]  # no more shapes than help


def test_padding_efficiency_counts_the_shape_and_its_filler_rows():
    source, target = [2, 4], [3, 5]
    assert padding_efficiency([[0, 1]], source, target) == pytest.approx(14 / (2 * 9))
    assert padding_efficiency([[0, 1]], source, target, lambda batch: (3, 6, 6)) == pytest.approx(14 / (3 * 12))


def test_pad_to_shape_pads_each_side_and_adds_filler_rows_that_score_nothing():
    import torch

    from vaswani.data.batching import pad_to_shape

    batch = {"input_ids": torch.tensor([[5, 6, 2], [7, 2, 0]]), "attention_mask": torch.tensor([[1, 1, 1], [1, 1, 0]]),
             "labels": torch.tensor([[8, 2], [9, 2]]), "decoder_input_ids": torch.tensor([[1, 8], [1, 9]])}  # fmt: skip
    padded = pad_to_shape(batch, (4, 5, 3), pad_token_id=0)
    assert padded["input_ids"].tolist() == [[5, 6, 2, 0, 0], [7, 2, 0, 0, 0], [5, 6, 2, 0, 0], [5, 6, 2, 0, 0]]
    assert padded["attention_mask"].tolist() == [[1, 1, 1, 0, 0], [1, 1, 0, 0, 0], [1, 1, 1, 0, 0], [1, 1, 1, 0, 0]]
    assert padded["labels"].tolist() == [[8, 2, -100], [9, 2, -100], [-100] * 3, [-100] * 3]
    assert padded["decoder_input_ids"].tolist() == [[1, 8, 0], [1, 9, 0], [1, 8, 0], [1, 8, 0]]
    with pytest.raises(ValueError, match="does not fit the bucket"):
        pad_to_shape(batch, (1, 5, 3), pad_token_id=0)
