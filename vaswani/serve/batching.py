"""Dynamic batching: the sentences of concurrent requests decoded together, off the event loop.

Requests that want the same thing (the same language pair and the same `DecodingOptions`) and whose longest sentences
are of about the same length (`length_bucket`: up to 8 source tokens, 9 to 16, 17 to 32, ...) wait in one queue. One
dispatcher task takes, among the queues whose model has a free decoding slot, the one whose first request has waited
longest, and hands a batch of it to a decoding thread (the event loop keeps reading and answering other requests
meanwhile, and a slow client only ever holds its own connection):

- **A free worker starts at once** (`max_wait` 0, the default): a lone request on an idle server is decoded as it
  arrives, and batches form by themselves while the workers are busy, from the requests that arrived meanwhile; so
  batches grow with the load, and no request waits for company that may not come. With `max_wait` > 0 a batch
  waits until it fills the budget or its oldest request has waited that long: larger batches where a batch costs
  little more than one sentence (PyTorch, a GPU) and clients send in bursts, for up to `max_wait` more latency.
- **Short sentences do not wait behind long ones**: a batch takes as long as its longest sentence, so the length
  buckets keep a short sentence out of a long one's batch (and, with several workers, the two decode side by side).
- **A batch is cut by its expected decoding time**: `max_tokens` bounds its sentences x its longest sentence (what
  a padded batch computes), not only the sum of its tokens.

A model may decode several batches at once (`slots`: a CTranslate2 translator with `parallel_batches` workers, each on
its own cores; PyTorch decodes one at a time). When a model has k free slots, a batch takes at most 1/k of its
queue's budget, so that a burst of requests is shared out among the idle workers instead of waiting for one; after
that the batches fall out of step by themselves, and one worker decodes while the answers of another's batch are
written and the next requests arrive (benchmarks/README.md). **A document is shared out too**: a request that costs
more than a slot's share of the budget (`max_tokens` / slots) is cut into pieces of at most that share, by length,
which queue as requests of their own, so that every free worker decodes part of it (one worker alone would leave
the others idle); its answer is put together in order.

A request whose client gave up, or whose time ran out (`asyncio.wait_for` cancels its future), is dropped from its
queue before decoding; one cancelled during decoding has its results thrown away. Every other request gets exactly
its own results, in order (tests/serve/test_app.py's load test checks that none is lost or answered twice), and no
request can fail another's: a batch that fails is decoded again one request at a time, so that only the request that
fails gets the error.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter, deque
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class DecodingOptions:
    """What a batch is decoded with (`Translator.translate_hypotheses`' arguments); requests share a batch only when
    these are equal."""

    num_beams: int = 4
    length_penalty: float = 0.6
    max_new_tokens: int | None = None
    paper_decoding: bool = False
    nbest: int = 1
    scores: bool = False
    alignment: bool = False
    constrained: bool = False  # sentences with constraints decode apart (constrained beam search is slower)
    sampling: Any = None  # a `vaswani.inference.engines.Sampling`: random sampling instead of beam search


def length_bucket(tokens: int) -> int:
    """The length bucket of a request by the source tokens of its longest sentence: 0 for up to 8 tokens, 1 for 9 to
    16, 2 for 17 to 32, ... (each bucket's sentences within twice each other's length)."""
    return max(0, (tokens - 1).bit_length() - 3)


@dataclass
class _Job:
    sentences: list
    tokens: int  # source tokens of all its sentences
    longest: int  # source tokens of its longest sentence
    future: asyncio.Future
    arrived: float


def batch_cost(jobs: Iterable[_Job]) -> int:
    """What a batch of `jobs` costs to decode, in the unit of `max_tokens`: its sentences x its longest sentence (a
    batch is padded to its longest sentence, and its decoding lasts as long as the longest output)."""
    sentences, longest = 0, 0
    for job in jobs:
        sentences, longest = sentences + len(job.sentences), max(longest, job.longest)
    return sentences * longest


# decode(model key, sentences, options) -> one list of hypotheses per sentence; runs in the decoding thread
Decode = Callable[[Hashable, list[Any], DecodingOptions], list[Any]]
# on_batch(sentences, tokens, seconds): after each batch, for the metrics
OnBatch = Callable[[int, int, float], None]
QueueKey = tuple[Hashable, DecodingOptions, int]  # (model, options, length bucket)


class Batcher:
    """Collects sentences into batches per (model key, options, length bucket) and decodes them in worker threads: at
    most `slots[model]` batches of a model at once (1 for a model not named), in as many threads as the largest of
    those (one thread by default: the models then decode one batch at a time, as PyTorch needs). `max_wait`: how long
    a batch may wait for company while a worker is free (0: none)."""

    def __init__(self, decode: Decode, *, max_tokens: int, max_wait: float = 0.0, on_batch: OnBatch | None = None,
                 slots: Mapping[Hashable, int] | None = None):  # fmt: skip
        self.decode, self.max_tokens, self.max_wait, self.on_batch = decode, max_tokens, max_wait, on_batch
        self.slots = dict(slots or {})
        if any(not isinstance(n, int) or n < 1 for n in self.slots.values()):
            raise ValueError(f"slots={self.slots}: each model needs at least 1")
        self._queues: dict[QueueKey, deque[_Job]] = {}
        self._busy: Counter[Hashable] = Counter()  # batches decoding now, per model
        self._running: set[asyncio.Task] = set()
        self._changed = asyncio.Event()  # a request arrived or a batch finished
        self._executor = ThreadPoolExecutor(max_workers=max(self.slots.values(), default=1),
                                            thread_name_prefix="vaswani-decode")  # fmt: skip
        self._task: asyncio.Task | None = None

    # -- the requests' side -------------------------------------------------------------------------------------
    async def translate(self, key: Hashable, sentences: list, lengths: Sequence[int], options: DecodingOptions,
                        ) -> list:  # fmt: skip
        """The hypotheses of each of `sentences` (`lengths`: the source tokens of each), decoded in a batch with
        others. A sentence is whatever `decode` takes (the server's: a `Segment`, its text with its prefix and
        constraints). A request that costs more than a slot's share of the budget (a document) is cut into pieces
        (`pieces`) that join their queues as requests of their own, so that every free worker decodes part of it;
        its results come back whole, in order."""
        if not sentences:
            return []
        loop, arrived = asyncio.get_running_loop(), time.monotonic()
        pieces = self.pieces(key, lengths)
        futures = []
        for indices in pieces:
            piece_lengths = [lengths[i] for i in indices]
            longest = max(piece_lengths)
            job = _Job([sentences[i] for i in indices], sum(piece_lengths), longest, loop.create_future(), arrived)
            self._queues.setdefault((key, options, length_bucket(longest)), deque()).append(job)
            futures.append(job.future)
        self._changed.set()
        if len(futures) == 1:
            return await futures[0]
        parts = await asyncio.gather(*futures, return_exceptions=True)  # cancelled with the request: so are they
        failed = next((part for part in parts if isinstance(part, BaseException)), None)
        if failed is not None:
            raise failed
        results: list = [None] * len(sentences)
        for indices, part in zip(pieces, parts, strict=True):
            for index, hypotheses in zip(indices, part, strict=True):
                results[index] = hypotheses
        return results

    def pieces(self, model: Hashable, lengths: Sequence[int]) -> list[list[int]]:
        """A request's sentences (by index) as the pieces it is decoded in: all of them as one while they cost at most
        a slot's share of the budget (`max_tokens` / the model's slots); beyond, by length, each piece at most that
        share (sentences x its longest; a sentence alone may cost more)."""
        share = max(1, self.max_tokens // self.slots.get(model, 1))
        if len(lengths) * max(lengths) <= share:
            return [list(range(len(lengths)))]
        pieces: list[list[int]] = [[]]
        for index in sorted(range(len(lengths)), key=lengths.__getitem__):  # each piece's longest is its last
            if pieces[-1] and (len(pieces[-1]) + 1) * lengths[index] > share:
                pieces.append([])
            pieces[-1].append(index)
        return pieces

    def queued_sentences(self) -> int:
        return sum(len(job.sentences) for queue in self._queues.values() for job in queue if not job.future.done())

    # -- the dispatcher -------------------------------------------------------------------------------------------
    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="vaswani-batcher")

    async def stop(self) -> None:
        """Stop the dispatcher (after the server has answered its requests) and the decoding threads."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        for task in list(self._running):
            task.cancel()
        self._executor.shutdown(wait=True)

    async def _run(self) -> None:
        while True:
            key = self._next_queue()
            if key is None:  # nothing queued, or every queued model busy: wait for a request or a finished batch
                self._changed.clear()
                await self._changed.wait()
                continue
            if self.max_wait > 0:
                await self._fill(key)
            jobs = self._take(key, self._share(key))
            if jobs:
                self._start(key, jobs)

    def _free(self, model: Hashable) -> int:
        return self.slots.get(model, 1) - self._busy[model]

    def _next_queue(self) -> QueueKey | None:
        """Among the queues whose model has a free slot, the one whose first request has waited longest (requests
        cancelled meanwhile are dropped first; an emptied queue is removed), or None."""
        oldest = None
        for key in list(self._queues):
            queue = self._queues[key]
            while queue and queue[0].future.done():
                queue.popleft()
            if not queue:
                del self._queues[key]
            elif self._free(key[0]) > 0 and (oldest is None or queue[0].arrived < self._queues[oldest][0].arrived):
                oldest = key
        return oldest

    def _share(self, key: QueueKey) -> int:
        """The budget of the next batch of `key`: `max_tokens`, or the queue's cost shared out among the model's free
        slots when it has several."""
        free = self._free(key[0])
        if free == 1:
            return self.max_tokens
        queued = batch_cost(job for job in self._queues[key] if not job.future.done())
        return min(self.max_tokens, -(-queued // free))

    async def _fill(self, key: QueueKey) -> None:
        """Wait until the queue of `key` costs `max_tokens` or its oldest request has waited `max_wait`."""
        queue = self._queues[key]
        deadline = queue[0].arrived + self.max_wait
        while batch_cost(queue) < self.max_tokens:
            left = deadline - time.monotonic()
            if left <= 0:
                return
            self._changed.clear()
            try:
                await asyncio.wait_for(self._changed.wait(), left)
            except asyncio.TimeoutError:  # noqa: UP041 (Python 3.10's wait_for raises asyncio's own)
                return

    def _take(self, key: QueueKey, budget: int) -> list[_Job]:
        """The jobs of the next batch: the oldest first, while the batch costs at most `budget` (always at least
        one); cancelled jobs are dropped. The queue is removed when empty."""
        queue, jobs = self._queues[key], []
        while queue and (not jobs or batch_cost([*jobs, queue[0]]) <= budget):
            job = queue.popleft()
            if not job.future.done():
                jobs.append(job)
        if not queue:
            del self._queues[key]
        return jobs

    def _start(self, key: QueueKey, jobs: list[_Job]) -> None:
        """Decode `jobs` as one batch in a worker thread, holding one of the model's slots until it is done."""
        self._busy[key[0]] += 1
        task = asyncio.get_running_loop().create_task(self._decode(key, jobs))
        self._running.add(task)

        def done(task: asyncio.Task) -> None:
            self._running.discard(task)
            self._busy[key[0]] -= 1
            self._changed.set()

        task.add_done_callback(done)

    async def _decode(self, key: QueueKey, jobs: list[_Job]) -> None:
        """Decode the batch; if it fails, each of its requests alone, so that only a request that fails by itself
        gets the error (a bug: a 500 with its traceback), never the others of its batch."""
        model, options, _ = key
        loop = asyncio.get_running_loop()
        sentences = [sentence for job in jobs for sentence in job.sentences]
        started = time.monotonic()
        try:
            results = await loop.run_in_executor(self._executor, self.decode, model, sentences, options)
        except Exception as error:
            if len(jobs) == 1:
                if not jobs[0].future.done():
                    jobs[0].future.set_exception(error)
                return
            for job in jobs:
                if not job.future.done():
                    await self._decode(key, [job])
            return
        if self.on_batch is not None:
            self.on_batch(len(sentences), sum(job.tokens for job in jobs), time.monotonic() - started)
        start = 0
        for job in jobs:
            if not job.future.done():  # not cancelled meanwhile
                job.future.set_result(results[start : start + len(job.sentences)])
            start += len(job.sentences)
