"""Dynamic batching: the sentences of concurrent requests decoded together, off the event loop.

Requests that want the same thing (the same language pair and the same `DecodingOptions`) wait in one queue. One
dispatcher task takes the oldest queue whose model has a free decoding slot, waits until its sentences fill the token
budget (`max_tokens` source tokens) or the oldest request has waited `max_wait` seconds, and hands that batch to a
decoding thread (the event loop keeps reading and answering other requests meanwhile, and a slow client only ever
holds its own connection). While batches decode, new requests queue up, so under load batches grow by themselves; an
idle server answers a lone request after `max_wait`.

A model may decode several batches at once (`slots`: a CTranslate2 translator with `parallel_batches` workers, each on
its own cores; PyTorch decodes one at a time). When a model has k free slots, a batch takes at most 1/k of its
queue's tokens, so that a burst of requests is shared out among the idle workers instead of waiting for one; after
that the batches fall out of step by themselves, and one worker decodes while the answers of another's batch are
written and the next requests arrive (on 2 cores, CTranslate2 int8, 16 clients: 1.3-1.4x the sentences/s of one
batch at a time cut into 2 parts, benchmarks/README.md).

A request whose client gave up, or whose time ran out (`asyncio.wait_for` cancels its future), is dropped from its
queue before decoding; one cancelled during decoding has its results thrown away. Every other request gets exactly
its own results, in order (tests/serve/test_app.py's load test checks that none is lost or answered twice).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter, deque
from collections.abc import Callable, Hashable, Mapping
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


@dataclass
class _Job:
    sentences: list[str]
    tokens: int
    future: asyncio.Future
    arrived: float


# decode(model key, sentences, options) -> one list of hypotheses per sentence; runs in the decoding thread
Decode = Callable[[Hashable, list[str], DecodingOptions], list[Any]]
# on_batch(sentences, tokens, seconds): after each batch, for the metrics
OnBatch = Callable[[int, int, float], None]


class Batcher:
    """Collects sentences into batches per (model key, options) and decodes them in worker threads: at most
    `slots[model]` batches of a model at once (1 for a model not named), in as many threads as the largest of those
    (one thread by default: the models then decode one batch at a time, as PyTorch needs)."""

    def __init__(self, decode: Decode, *, max_tokens: int, max_wait: float, on_batch: OnBatch | None = None,
                 slots: Mapping[Hashable, int] | None = None):  # fmt: skip
        self.decode, self.max_tokens, self.max_wait, self.on_batch = decode, max_tokens, max_wait, on_batch
        self.slots = dict(slots or {})
        if any(not isinstance(n, int) or n < 1 for n in self.slots.values()):
            raise ValueError(f"slots={self.slots}: each model needs at least 1")
        self._queues: dict[tuple[Hashable, DecodingOptions], deque[_Job]] = {}
        self._busy: Counter[Hashable] = Counter()  # batches decoding now, per model
        self._running: set[asyncio.Task] = set()
        self._changed = asyncio.Event()  # a request arrived or a batch finished
        self._executor = ThreadPoolExecutor(max_workers=max(self.slots.values(), default=1),
                                            thread_name_prefix="vaswani-decode")  # fmt: skip
        self._task: asyncio.Task | None = None

    # -- the requests' side -------------------------------------------------------------------------------------
    async def translate(self, key: Hashable, sentences: list, tokens: int, options: DecodingOptions) -> list:
        """The hypotheses of each of `sentences` (`tokens`: their source tokens), decoded in a batch with others. A
        sentence is whatever `decode` takes (the server's: a `Segment`, its text with its prefix and constraints)."""
        if not sentences:
            return []
        future = asyncio.get_running_loop().create_future()
        self._queues.setdefault((key, options), deque()).append(_Job(sentences, tokens, future, time.monotonic()))
        self._changed.set()
        return await future

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
            await self._fill(key)
            jobs = self._take(key, self._share(key))
            if jobs:
                self._start(key, jobs)

    def _free(self, model: Hashable) -> int:
        return self.slots.get(model, 1) - self._busy[model]

    def _next_queue(self):
        """The queue that waited longest among those whose model has a free slot (a drained queue is re-added at the
        end), or None."""
        return next((key for key in self._queues if self._free(key[0]) > 0), None)

    def _share(self, key) -> int:
        """The token budget of the next batch of `key`: `max_tokens`, or the queue's tokens shared out among the
        model's free slots when it has several."""
        free = self._free(key[0])
        if free == 1:
            return self.max_tokens
        queued = sum(job.tokens for job in self._queues[key] if not job.future.done())
        return min(self.max_tokens, -(-queued // free))

    async def _fill(self, key) -> None:
        """Wait until the queue of `key` holds `max_tokens` tokens or its oldest request has waited `max_wait`."""
        queue = self._queues[key]
        deadline = queue[0].arrived + self.max_wait
        while sum(job.tokens for job in queue) < self.max_tokens:
            left = deadline - time.monotonic()
            if left <= 0:
                return
            self._changed.clear()
            try:
                await asyncio.wait_for(self._changed.wait(), left)
            except asyncio.TimeoutError:  # noqa: UP041 (Python 3.10's wait_for raises asyncio's own)
                return

    def _take(self, key, budget: int) -> list[_Job]:
        """The jobs of the next batch: the oldest first, up to `budget` tokens (always at least one); cancelled jobs
        are dropped. The queue is removed when empty, so that a new request of `key` queues behind the others."""
        queue, jobs, tokens = self._queues[key], [], 0
        while queue and (not jobs or tokens + queue[0].tokens <= budget):
            job = queue.popleft()
            if not job.future.done():
                jobs.append(job)
                tokens += job.tokens
        if not queue:
            del self._queues[key]
        return jobs

    def _start(self, key, jobs: list[_Job]) -> None:
        """Decode `jobs` as one batch in a worker thread, holding one of the model's slots until it is done."""
        self._busy[key[0]] += 1
        task = asyncio.get_running_loop().create_task(self._decode(key, jobs))
        self._running.add(task)

        def done(task: asyncio.Task) -> None:
            self._running.discard(task)
            self._busy[key[0]] -= 1
            self._changed.set()

        task.add_done_callback(done)

    async def _decode(self, key, jobs: list[_Job]) -> None:
        model, options = key
        sentences = [sentence for job in jobs for sentence in job.sentences]
        started = time.monotonic()
        try:
            loop = asyncio.get_running_loop()
            results = await loop.run_in_executor(self._executor, self.decode, model, sentences, options)
        except Exception as error:  # a bug: every request of the batch fails with it (a 500 with its traceback)
            for job in jobs:
                if not job.future.done():
                    job.future.set_exception(error)
            return
        if self.on_batch is not None:
            self.on_batch(len(sentences), sum(job.tokens for job in jobs), time.monotonic() - started)
        start = 0
        for job in jobs:
            if not job.future.done():  # not cancelled meanwhile
                job.future.set_result(results[start : start + len(job.sentences)])
            start += len(job.sentences)
