"""Batches by tokens, as in the paper: pairs bucketed by length and packed up to a token budget per device.

The paper trains on batches of about 25,000 source and 25,000 target tokens; fairseq's ``--max-tokens`` makes such
batches by counting, per device, ``batch size * longest sequence`` (padding included). `TokenBatchSampler` does the
same:

1. Cost. A pair of source length s and target length t (in tokens, after rounding up to `pad_to_multiple_of`)
   is as long as ``max(s, t)``, and at least 1. A batch of B pairs costs ``B * (its longest pair)``: the size of the
   larger of its two padded tensors. Every batch costs at most `max_tokens` and holds at most `max_sentences` pairs.
2. Buckets. The pairs are sorted by source length, then target length (like fairseq's ``ordered_indices``), ties in
   a random order drawn for each epoch, and packed greedily: a batch is closed as soon as the next pair would break
   the budget. Pairs of similar lengths share batches, so little of a batch is padding.
3. Shuffling. The order of the batches is shuffled each epoch (seed ``seed + epoch``), and so is the membership of
   batches among pairs of equal lengths. The batch boundaries depend on the lengths only, so every epoch has the same
   number of batches. With ``shuffle=False`` the batches come sorted by length, always the same (for evaluation).
4. Distribution. Every rank computes the same global list of batches and takes every `num_replicas`-th one, starting
   at its `rank`. So that no rank runs out of batches while the others still wait for it in an all-reduce, each rank
   gets the same number: by default the list is first padded to a multiple of `num_replicas` by repeating batches from
   its start (those pairs are seen twice in that epoch; at most ``num_replicas - 1`` batches); ``drop_uneven=True``
   drops the last batches instead (at most ``num_replicas - 1``, different ones each epoch). For evaluation,
   ``even_batches=False`` neither repeats nor drops anything: ranks may then get one batch more than others.

5. Shape buckets (``shape_buckets=K``, for compiled steps and CUDA graphs: few distinct tensor shapes). Every batch
   of an epoch then has one of at most K shapes (rows, source length, target length), chosen once from the data's
   lengths by `choose_shapes` (each pair goes to the cheapest shape it fits, in padded tokens). The pairs of a shape
   are cut into batches of balanced sizes within the budget (rows * max(S, T) <= max_tokens); each batch is padded
   to the shape's lengths and filled up to its rows with rows that score nothing (`pad_to_shape`); which pairs share
   a batch is drawn anew each epoch among the pairs of a shape. `padding_efficiency` counts the filler rows and the
   padding to the shape.

Randomness comes only from ``numpy.random.default_rng(seed + epoch)``, never from global state: the same arguments
give the same batches on every rank and every run, and `batches(epoch)` lets a resumed run skip exactly the batches
of an epoch it has already trained on.

Memory does not hold a Python object per pair (issue 30): the lengths and costs are int32 arrays, the batch bounds
an array, and an epoch's batches (`EpochBatches`) are the epoch's order of pair indices, the bounds and the batch
numbers this rank takes, all numpy; a batch becomes a list of indices only when it is read. At 4.5M pairs that is
about 16 bytes per pair for the sampler (two lengths, the costs, one epoch's order), where int64 arrays and the
lists of Python ints (an int object and two list slots per pair) took about four times as much.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator, Sequence

import numpy as np
import torch
from torch.utils.data import Sampler


class TokenBatchSampler(Sampler[list[int]]):
    """Yields lists of dataset indices, each a batch whose padded size stays within a token budget.

    Use it as the ``batch_sampler`` of a `torch.utils.data.DataLoader`, with a collator that pads each batch (such as
    transformers' `DataCollatorForSeq2Seq`), and call `set_epoch` at the start of every epoch.

    Args:
        source_lengths: tokens in each source sequence, for dataset indices 0..N-1.
        target_lengths: tokens in each target sequence (labels), same order.
        max_tokens: budget of a batch on one device: ``len(batch) * max over the batch of max(source, target)
            length`` stays at or below it (fairseq's ``--max-tokens``). A pair that alone costs more raises
            `ValueError` (filter over-long pairs before), unless ``oversized_alone``.
        shuffle: shuffle batch order and tie-breaks every epoch (training); False gives the same length-sorted
            batches every epoch (evaluation).
        seed: base seed; epoch e draws from ``numpy.random.default_rng(seed + e)``.
        num_replicas: number of ranks (processes) sharing the batches.
        rank: this process's rank, in ``range(num_replicas)``.
        max_sentences: most pairs in a batch (fairseq's ``--batch-size``), None for no limit.
        pad_to_multiple_of: lengths are rounded up to a multiple of it before costing (as the collator pads them).
        drop_uneven: with several ranks, drop the last batches of an epoch so that the count divides evenly, instead
            of repeating batches from the start.
        even_batches: with False, ranks may get different numbers of batches and no batch is repeated or dropped
            (for evaluation, with results gathered by index). Cannot be combined with ``drop_uneven=True``.
        oversized_alone: a pair that alone costs more than ``max_tokens`` gets a batch of its own instead of raising
            (for evaluation, where every held-out pair must be scored, however long).
        shape_buckets: with K, every batch has one of at most K shapes (module docstring, 5); `batch_shape` gives a
            batch's shape, which the collator pads it to (`collate(..., shape=...)`). None: batches as long as their
            longest pair.
    """

    def __init__(
        self,
        source_lengths: Sequence[int],
        target_lengths: Sequence[int],
        max_tokens: int,
        *,
        shuffle: bool = True,
        seed: int = 0,
        num_replicas: int = 1,
        rank: int = 0,
        max_sentences: int | None = None,
        pad_to_multiple_of: int = 1,
        drop_uneven: bool = False,
        even_batches: bool = True,
        oversized_alone: bool = False,
        shape_buckets: int | None = None,
    ) -> None:
        self.source_lengths = _as_lengths(source_lengths, "source_lengths")
        self.target_lengths = _as_lengths(target_lengths, "target_lengths")
        if len(self.source_lengths) != len(self.target_lengths):
            raise ValueError(
                f"source_lengths has {len(self.source_lengths)} entries but target_lengths has "
                f"{len(self.target_lengths)}: give one length per pair on each side."
            )
        _check_positive(max_tokens=max_tokens, num_replicas=num_replicas, pad_to_multiple_of=pad_to_multiple_of)
        if max_sentences is not None:
            _check_positive(max_sentences=max_sentences)
        if shape_buckets is not None:
            _check_positive(shape_buckets=shape_buckets)
        if not (isinstance(seed, int | np.integer) and seed >= 0):
            raise ValueError(f"seed must be a non-negative integer, got {seed!r}.")
        if not (isinstance(rank, int | np.integer) and 0 <= rank < num_replicas):
            raise ValueError(f"rank must be in range(num_replicas) = range({num_replicas}), got {rank!r}.")
        if drop_uneven and not even_batches:
            raise ValueError(
                "drop_uneven=True drops batches so that all ranks get the same number, even_batches=False lets the "
                "numbers differ: choose one."
            )
        self.max_tokens = max_tokens
        self.shuffle = shuffle
        self.seed = int(seed)
        self.num_replicas = num_replicas
        self.rank = int(rank)
        self.max_sentences = max_sentences
        self.pad_to_multiple_of = pad_to_multiple_of
        self.drop_uneven = drop_uneven
        self.even_batches = even_batches
        self.epoch = 0

        # (N,) cost of each pair alone: its longer side, padded, at least 1 token.
        padded = np.maximum(
            _round_up(self.source_lengths, pad_to_multiple_of), _round_up(self.target_lengths, pad_to_multiple_of)
        )
        self.costs = np.maximum(padded, 1)
        too_long = np.flatnonzero(self.costs > max_tokens)
        if too_long.size and not oversized_alone:
            index = int(too_long[0])
            raise ValueError(
                f"pair {index} (source length {self.source_lengths[index]}, target length "
                f"{self.target_lengths[index]}, cost {self.costs[index]} tokens after padding) does not fit in "
                f"max_tokens={max_tokens}; {too_long.size} pair(s) in all. Filter pairs longer than the budget "
                "before batching, or raise max_tokens."
            )
        self.shapes = self.pair_shapes = None
        if shape_buckets is not None:
            padded_source = _round_up(self.source_lengths, pad_to_multiple_of)
            padded_target = _round_up(self.target_lengths, pad_to_multiple_of)
            lengths = choose_shapes(padded_source, padded_target, shape_buckets)  # (K, 2)
            self.pair_shapes = _cheapest_fit(padded_source, padded_target, lengths)  # (N,)
            self.shapes, sizes = _shape_batches(lengths, self.pair_shapes, max_tokens, max_sentences)  # (K, 3), list
            self.bounds = np.concatenate([[0], np.cumsum(sizes)])
            return
        # Batch k is positions bounds[k]:bounds[k + 1] of the length-sorted order. Ties are exactly equal
        # (source, target) lengths, so the sequence of costs in that order, and so the bounds, is the same whatever
        # the tie-break: computed once for all epochs.
        self.bounds = np.asarray(_pack(self.costs[self._length_order(None)].tolist(), max_tokens, max_sentences))

    # -- the batches -------------------------------------------------------------------------------------------------

    def set_epoch(self, epoch: int) -> None:
        """Select the epoch that `__iter__` yields (call it before each epoch; it seeds the shuffling)."""
        if epoch < 0:
            raise ValueError(f"epoch must be non-negative, got {epoch}.")
        self.epoch = epoch

    def __iter__(self) -> Iterator[list[int]]:
        yield from self.batches(self.epoch)

    def __len__(self) -> int:
        """Batches this rank yields per epoch (the same every epoch)."""
        total, replicas = self.num_global_batches, self.num_replicas
        if replicas == 1:
            return total
        if not self.even_batches:
            return total // replicas + (self.rank < total % replicas)
        return total // replicas if self.drop_uneven else math.ceil(total / replicas)

    @property
    def num_global_batches(self) -> int:
        """Batches per epoch over all ranks, before padding or dropping for an even split."""
        return len(self.bounds) - 1

    def global_batches(self, epoch: int) -> EpochBatches:
        """All ranks' batches of `epoch`, in the order they are dealt out, before padding/dropping and sharding."""
        rng = np.random.default_rng(self.seed + epoch) if self.shuffle else None
        order = self._length_order(rng)
        picks = np.arange(self.num_global_batches) if rng is None else rng.permutation(self.num_global_batches)
        return EpochBatches(order, self.bounds, picks)

    def batches(self, epoch: int) -> EpochBatches:
        """This rank's batches of `epoch`, in order (skip the first k to resume an epoch exactly)."""
        batches = self.global_batches(epoch)
        picks, replicas = batches.picks, self.num_replicas
        remainder = len(picks) % replicas
        if replicas > 1 and remainder and self.even_batches:
            if self.drop_uneven:
                picks = picks[: len(picks) - remainder]
            else:  # repeat batches from the start (cyclically, if there are fewer batches than ranks)
                picks = np.resize(picks, len(picks) + replicas - remainder)
        return EpochBatches(batches.order, batches.bounds, picks[self.rank :: replicas])

    def batch_shape(self, batch: Sequence[int]) -> tuple[int, int, int] | None:
        """The (rows, source length, target length) a batch of this sampler is padded to with shape buckets; None
        without them (a batch is as long as its longest pair)."""
        if self.shapes is None:
            return None
        return tuple(int(size) for size in self.shapes[self.pair_shapes[batch[0]]])

    # -- helpers -----------------------------------------------------------------------------------------------------

    def _length_order(self, rng: np.random.Generator | None) -> np.ndarray:
        """(N,) indices sorted by source length, then target length; ties in a random order drawn from `rng`, or by
        index without one. With shape buckets: grouped by shape (in the order of `shapes`), in a random order within
        a shape (by index without `rng`)."""
        if self.pair_shapes is not None:
            keys = [self.pair_shapes] if rng is None else [rng.permutation(len(self.pair_shapes)), self.pair_shapes]
            order = np.lexsort(keys)
            return order.astype(np.int32) if len(order) < 2**31 else order
        keys = [self.target_lengths, self.source_lengths]  # np.lexsort sorts by the last key first
        if rng is not None:
            keys.insert(0, rng.permutation(len(self.source_lengths)))
        order = np.lexsort(keys)
        return order.astype(np.int32) if len(order) < 2**31 else order


class EpochBatches(Sequence):
    """One epoch's batches for one rank, read like a list of lists of pair indices, held as three arrays: the
    epoch's order of pair indices (N,), the bounds of the batches in that order (num_global_batches + 1,), and the
    numbers of the batches this rank takes, in its order (its len,). Reading batch k makes its list of indices;
    slicing gives the batches from a position on without copying the order (a resumed epoch)."""

    def __init__(self, order: np.ndarray, bounds: np.ndarray, picks: np.ndarray):
        self.order, self.bounds, self.picks = order, bounds, picks

    def __len__(self) -> int:
        return len(self.picks)

    def __getitem__(self, index):
        if isinstance(index, slice):
            return EpochBatches(self.order, self.bounds, self.picks[index])
        return self._batch(self.picks[index])  # IndexError past the end

    def __iter__(self) -> Iterator[list[int]]:
        for batch in self.picks.tolist():
            yield self._batch(batch)

    def _batch(self, batch: int) -> list[int]:
        """Global batch `batch` as the list of its pair indices."""
        return self.order[self.bounds[batch] : self.bounds[batch + 1]].tolist()

    def __eq__(self, other) -> bool:
        if not isinstance(other, EpochBatches | list | tuple):
            return NotImplemented
        return len(self) == len(other) and all(mine == theirs for mine, theirs in zip(self, other, strict=True))

    def __add__(self, other) -> list[list[int]]:  # concatenation makes lists, as with a list
        return [*self, *other]

    def __radd__(self, other) -> list[list[int]]:
        return [*other, *self]

    __hash__ = None  # mutable arrays inside, like a list

    def __repr__(self) -> str:
        return f"EpochBatches({len(self)} batches)"


def padding_efficiency(
    batches: Sequence[Sequence[int]],
    source_lengths: Sequence[int],
    target_lengths: Sequence[int],
    shape: Callable[[Sequence[int]], tuple[int, int, int] | None] | None = None,
) -> float:
    """Real tokens / padded tokens of `batches` once each side is padded to its longest sequence in the batch, or to
    the (rows, source length, target length) that `shape` gives for a batch (a sampler's `batch_shape`), filler
    rows included.

    ``sum(s_i + t_i) / sum over batches of len(batch) * (max s + max t)``, in (0, 1]; 1.0 for no tokens at all.
    """
    source = _as_lengths(source_lengths, "source_lengths")
    target = _as_lengths(target_lengths, "target_lengths")
    real = padded = 0
    for batch in batches:
        if len(batch) == 0:
            continue
        index = np.asarray(batch, dtype=np.int64)
        real += int(source[index].sum() + target[index].sum())
        fixed = shape(batch) if shape is not None else None
        if fixed is None:
            padded += len(index) * int(source[index].max() + target[index].max())
        else:
            padded += fixed[0] * (fixed[1] + fixed[2])
    return real / padded if padded else 1.0


def choose_shapes(source_lengths: np.ndarray, target_lengths: np.ndarray, count: int) -> np.ndarray:
    """At most `count` (source length, target length) shapes that cover every pair with little padding: (K, 2).

    A pair fits a shape at least as long on both sides and costs its S + T padded tokens. Greedy: start from the
    shape that fits everything, add the corner (s, t) that saves the most padded tokens over the pairs it fits
    better, `count` - 1 times; then shrink each shape to the longest pair that chose it and add corners again while
    shapes are left (a few rounds). Deterministic: it depends on the lengths only. Candidate corners are every
    (source length, target length) combination present when there are few, else the most frequent pairs' own."""
    cells, counts = np.unique(np.stack([source_lengths, target_lengths], 1), axis=0, return_counts=True)  # (C, 2)
    sources, targets = np.unique(cells[:, 0]), np.unique(cells[:, 1])
    if len(sources) * len(targets) * len(cells) <= 2e7:
        corners = np.stack(np.meshgrid(sources, targets, indexing="ij"), -1).reshape(-1, 2)  # (J, 2)
    else:
        corners = cells[np.argsort(-counts, kind="stable")[: max(1, int(2e7 // len(cells)))]]
    shapes = cells.max(0, keepdims=True)  # (1, 2): fits everything
    for _ in range(3):
        cost = (shapes[_cheapest_fit(cells[:, 0], cells[:, 1], shapes)]).sum(1)  # (C,)
        while len(shapes) < count:
            fits = (cells[None, :, 0] <= corners[:, :1]) & (cells[None, :, 1] <= corners[:, 1:])  # (J, C)
            saved = np.maximum(cost[None, :] - corners.sum(1)[:, None], 0) * fits  # (J, C)
            gains = saved @ counts  # (J,)
            best = int(gains.argmax())
            if gains[best] <= 0:
                break
            shapes = np.concatenate([shapes, corners[best : best + 1]])
            cost = np.minimum(cost, np.where(fits[best], corners[best].sum(), cost))
        chosen = _cheapest_fit(cells[:, 0], cells[:, 1], shapes)  # (C,)
        shrunk = np.unique([cells[chosen == k].max(0) for k in np.unique(chosen)], axis=0)  # to their longest pairs
        if np.array_equal(shrunk, np.unique(shapes, axis=0)):
            break
        shapes = shrunk
    return shapes[np.lexsort((shapes[:, 1], shapes[:, 0]))].astype(np.int64)


def _cheapest_fit(source_lengths: np.ndarray, target_lengths: np.ndarray, shapes: np.ndarray) -> np.ndarray:
    """For each pair, the index of the cheapest shape (fewest S + T) that it fits: (N,). Looked up in a table over the
    lengths present, so that millions of pairs cost one indexing."""
    cost = shapes.sum(1)
    table = np.full((int(source_lengths.max(initial=0)) + 1, int(target_lengths.max(initial=0)) + 1), -1, np.int64)
    for index in np.argsort(-cost, kind="stable"):  # cheaper shapes written last: they win
        table[: shapes[index, 0] + 1, : shapes[index, 1] + 1] = index
    return table[source_lengths, target_lengths]


def _shape_batches(lengths: np.ndarray, pair_shapes: np.ndarray, max_tokens: int, max_sentences: int | None):
    """The shapes (rows, S, T) of the batches, (K, 3), and the sizes of the batches in shape order (real rows each):
    the pairs of shape k go into ceil(n / cap) batches of balanced sizes (differing by at most one), the cap being
    max_tokens // max(S, T) rows (and max_sentences); the shape's rows are the largest of them."""
    shapes, sizes = [], []
    counts = np.bincount(pair_shapes, minlength=len(lengths))
    for (source, target), count in zip(lengths.tolist(), counts.tolist(), strict=True):
        cap = max(1, min(max_tokens // max(source, target, 1), max_sentences or max_tokens))
        batches = max(1, -(-count // cap))
        base, extra = divmod(count, batches)
        sizes += [base + 1] * extra + [base] * (batches - extra) if count else []
        shapes.append((base + (extra > 0), max(source, 1), max(target, 1)))
    return np.asarray(shapes, dtype=np.int64), sizes


def _pack(costs: list[int], max_tokens: int, max_sentences: int | None) -> list[int]:
    """Greedy packing of pairs in the given order: the bounds [0, ..., N] of consecutive batches.

    A batch grows while ``(size + 1) * max(longest cost so far, next cost) <= max_tokens`` and size < max_sentences,
    so a pair that alone costs more than max_tokens ends up in a batch of its own.
    """
    bounds = [0]
    size = longest = 0
    limit = max_sentences or len(costs) + 1
    for position, cost in enumerate(costs):
        longer = max(longest, cost)
        if size and ((size + 1) * longer > max_tokens or size == limit):
            bounds.append(position)
            size, longer = 0, cost
        size += 1
        longest = longer
    if size:
        bounds.append(len(costs))
    return bounds


def _round_up(lengths: np.ndarray, multiple: int) -> np.ndarray:
    return -(-lengths // multiple) * multiple


def _as_lengths(lengths: Sequence[int], name: str) -> np.ndarray:
    """(N,) int32 array of non-negative lengths, or ValueError.

    Anything but a list, tuple or array is first read with one slice, ``lengths[:]``: a `datasets` column
    (``dataset["source_length"]``) then comes out as a list at once, where iterating it would convert row by row
    (seconds per million rows).
    """
    if not isinstance(lengths, np.ndarray | list | tuple):
        with contextlib.suppress(TypeError):  # not sliceable: converted as it is
            lengths = lengths[:]
    array = np.asarray(lengths)
    if array.size == 0:
        return np.zeros(0, dtype=np.int32)
    if array.ndim != 1 or not np.issubdtype(array.dtype, np.integer):
        raise ValueError(f"{name} must be a 1-D sequence of integers, got {array.dtype} with shape {array.shape}.")
    if array.min() < 0:
        raise ValueError(f"{name} must be non-negative; index {int(np.argmin(array))} is {int(array.min())}.")
    if array.max() >= 2**31:
        raise ValueError(f"{name} must be below 2**31; index {int(np.argmax(array))} is {int(array.max())}.")
    return array.astype(np.int32, copy=False)


def _check_positive(**values: int) -> None:
    for name, value in values.items():
        if not (isinstance(value, int | np.integer) and not isinstance(value, bool) and value >= 1):
            raise ValueError(f"{name} must be a positive integer, got {value!r}.")


BATCH_COLUMNS = ("input_ids", "attention_mask", "labels")  # an LM's training examples have no labels: its collator
# makes them (causal: the input ids; masked: the masked tokens)


class TokenCollator:
    """Batches of a tokenized split: input_ids padded with PAD, attention_mask with 0 (made from the input's lengths
    where the split does not store it and the tokenizer's model takes it), labels with -100, on the tokenizer's padding
    side: the same tensors as transformers' `DataCollatorForSeq2Seq(tokenizer, label_pad_token_id=-100)`, made with
    a few numpy operations per column instead of Python loops over the rows and tokens. Subclasses add what their
    task's batch needs (`complete`): `PairCollator` the decoder input, `LanguageModelCollator` the labels.

    Why it matters: the training loop pads the next batches in a background thread while it launches the current
    update's GPU kernels (`vaswani.data.prefetch`), and Python code holds the interpreter lock that launching needs.
    transformers' collator, with `datasets`' conversion of the rows to Python lists, took 14-88 ms a batch of 25,000
    tokens (the more rows, the longer; benchmarks/README.md "The GPU step's host"); from the split's Arrow columns
    (`collate`) these collators take about a millisecond. Rows given as dicts (`collator(features)`) work too.
    tests/data/test_batching_collate.py compares each with transformers' collator."""

    def __init__(self, tokenizer):
        if tokenizer.padding_side not in ("right", "left"):
            raise ValueError(f"padding side {tokenizer.padding_side!r}: use 'right' or 'left'")
        self.tokenizer = tokenizer  # pad_to_shape reads its pad_token_id
        self.fill = {"input_ids": tokenizer.pad_token_id, "attention_mask": 0, "labels": -100}
        self.makes_attention_mask = "attention_mask" in tokenizer.model_input_names  # tokenized splits may lack it

    def __call__(self, features: list[dict]) -> dict:
        """Rows as dicts of token lists -> the padded batch."""
        columns = {}
        for name in features[0]:
            sequences = [feature[name] for feature in features]
            lengths = np.fromiter((len(sequence) for sequence in sequences), dtype=np.int64, count=len(sequences))
            values = np.fromiter((token for sequence in sequences for token in sequence), dtype=np.int64,
                                 count=int(lengths.sum()))  # fmt: skip
            columns[name] = (values, lengths)
        return self.pad(columns)

    def from_table(self, table) -> dict:
        """A `pyarrow.Table` of list columns (the rows of a tokenized split) -> the padded batch."""
        import pyarrow.compute as pc

        columns = {}
        for name in table.column_names:
            column = table.column(name).combine_chunks()  # a list array, one list per row
            columns[name] = (pc.list_flatten(column).to_numpy(), pc.list_value_length(column).to_numpy())
        return self.pad(columns)

    def pad(self, columns: dict) -> dict:
        """{name: (the rows' tokens end to end (N,), each row's length (B,))} -> {name: (B, longest) int64 tensor}, in
        the reference's order (input_ids, attention_mask, labels), then what `complete` adds."""
        unknown = [name for name in columns if name not in self.fill]
        if unknown:
            raise ValueError(f"a batch has input_ids, attention_mask and labels; this one has {unknown[0]!r}")
        if "attention_mask" not in columns and "input_ids" in columns and self.makes_attention_mask:
            values, lengths = columns["input_ids"]  # as the tokenizer's padding does: 1 for a token, 0 for PAD
            columns = {**columns, "attention_mask": (np.ones_like(values), lengths)}
        batch = {}
        for name in (name for name in self.fill if name in columns):
            values, lengths = columns[name]
            width = int(lengths.max(initial=0))
            padded = np.full((len(lengths), width), self.fill[name], dtype=np.int64)  # (B, width)
            positions = np.arange(width)
            if self.tokenizer.padding_side == "right":
                tokens = positions < lengths[:, None]  # (B, width): True where a row has a token
            else:
                tokens = positions >= width - lengths[:, None]
            padded[tokens] = values  # row by row, in order: the rows' tokens fill their places
            batch[name] = torch.from_numpy(padded)
        return self.complete(batch)

    def complete(self, batch: dict) -> dict:
        """The padded columns -> the task's batch (here: as they are)."""
        return batch


class PairCollator(TokenCollator):
    """Translation batches: `TokenCollator`'s, with the decoder input made from the labels by the model
    (`prepare_decoder_input_ids_from_labels`: the start token, then the labels shifted right, PAD for -100), as
    transformers' `DataCollatorForSeq2Seq(tokenizer, model=model, label_pad_token_id=-100)` makes them."""

    def __init__(self, tokenizer, model=None):
        super().__init__(tokenizer)
        self.model = model
        # the model's rule for its decoder input, looked up once (None: no model, or one without such a rule)
        self.decoder_input_ids = getattr(model, "prepare_decoder_input_ids_from_labels", None)

    def complete(self, batch: dict) -> dict:
        if "labels" in batch and self.decoder_input_ids is not None:
            batch["decoder_input_ids"] = self.decoder_input_ids(labels=batch["labels"])
        return batch


class LanguageModelCollator(TokenCollator):
    """A decoder-only model's batches: `TokenCollator`'s, with the labels the input ids, PAD made -100 (the model shifts
    them), as transformers' `DataCollatorForLanguageModeling(tokenizer, mlm=False)` makes them."""

    def complete(self, batch: dict) -> dict:
        labels = batch["input_ids"].clone()
        labels[labels == self.tokenizer.pad_token_id] = -100
        batch["labels"] = labels
        return batch


def collate(dataset, indices, collator, device=None, shape: tuple[int, int, int] | None = None) -> dict:
    """The examples `indices` of a tokenized split as one padded batch of tensors (`collator`), padded further to
    `shape` (`pad_to_shape`; a shape bucket's), on `device` (`to_device`; None: left on the host). A `TokenCollator`
    reads the rows' Arrow columns; any other collator gets them as a list of dicts."""
    columns = [c for c in BATCH_COLUMNS if c in dataset.column_names]
    if isinstance(collator, TokenCollator):
        batch = collator.from_table(arrow_rows(dataset, indices, columns))
    else:
        features = dataset.select_columns(columns)[indices]
        batch = collator([dict(zip(features, values, strict=True)) for values in zip(*features.values(), strict=True)])
    if shape is not None:
        batch = pad_to_shape(batch, shape, collator.tokenizer.pad_token_id)
    return batch if device is None else to_device(batch, device)


def arrow_rows(dataset, indices, columns: list[str]):
    """The rows `indices` of a `datasets.Dataset` as a `pyarrow.Table` of `columns`, taken in one step from the table
    behind it (`datasets`' own `dataset[indices]` makes a one-row slice per index in Python: 20 ms for 2,600 rows)."""
    if not hasattr(dataset, "_indices"):  # a `datasets` that keeps a split's row mapping elsewhere: its own indexing
        # of whole batches (~18 ms for 2,600 rows of a shuffled split), slower but never rows out of the mapping
        return dataset.select_columns(columns).with_format("arrow")[[int(index) for index in indices]]
    positions = np.asarray(indices, dtype=np.int64)
    mapping = dataset._indices  # a split selected or shuffled without copying: rows -> table rows (None: none)
    if mapping is not None:  # taken from the mapping itself: no copy of a whole split's mapping per batch
        positions = mapping.column(0).take(positions).to_numpy()
    return dataset.data.table.select(columns).take(positions)


def pad_to_shape(batch: dict, shape: tuple[int, int, int], pad_token_id: int) -> dict:
    """A translation batch padded to (rows, source length, target length): the source with PAD (attention mask 0),
    the labels with -100 and the decoder input with PAD on the right, then filler rows up to `rows`: copies of the
    first row whose labels are all -100, so they score nothing and give no gradient (and no row is all padding).
    (B, S') -> (rows, S), (B, T') -> (rows, T)."""
    rows, source, target = shape
    padding = {"input_ids": (source, pad_token_id), "attention_mask": (source, 0), "labels": (target, -100),
               "decoder_input_ids": (target, pad_token_id)}  # fmt: skip
    padded = {}
    for key, value in batch.items():
        if key not in padding:
            raise ValueError(f"shape buckets pad translation batches only; this batch has {key!r}")
        width, fill = padding[key]
        if value.shape[0] > rows or value.shape[1] > width:
            raise ValueError(f"{key} of shape {tuple(value.shape)} does not fit the bucket {shape}")
        value = torch.nn.functional.pad(value, (0, width - value.shape[1]), value=fill)
        filler = value[:1].expand(rows - value.shape[0], -1)
        padded[key] = torch.cat([value, torch.full_like(filler, -100) if key == "labels" else filler])
    return padded


def pinned(batch: dict) -> dict:
    """`batch` in pinned (page-locked) host memory, which a CUDA device copies from without blocking the host."""
    return {key: value.pin_memory() for key, value in batch.items()}


def to_device(batch: dict, device) -> dict:
    """`batch` on `device`; to a CUDA device from pinned host memory without blocking (the copy overlaps the work
    queued before it, and the host goes on). A batch pinned already (`pinned`) is not pinned again."""
    device = torch.device(device)
    if device.type != "cuda":
        return {key: value.to(device) for key, value in batch.items()}
    return {key: (value if value.is_pinned() else value.pin_memory()).to(device, non_blocking=True)
            for key, value in batch.items()}  # fmt: skip
