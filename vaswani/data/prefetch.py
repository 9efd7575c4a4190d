"""The next updates' batches, made while the current update runs (issue 30 item 5).

    batches = Prefetcher(make_group, depth=2)   # make_group() -> the next update's batches (on the host)
    group = batches.next()                      # waits only if the worker has not finished it yet
    batches.wait_seconds                        # the time `next` waited: the share of a step spent waiting for data
    batches.close()

One background thread calls `make_group` (read the next batch indices, slice the memory-mapped columns, pad: the
work of `vaswani.data.batching.collate`) up to `depth` updates ahead of the training loop, which takes the groups in
the order they were made: the batches, their order and so the trained weights are the same as without prefetching,
and a resumed run, which starts its batch stream at the position stored in the checkpoint, meets the same batches
(groups made ahead of a checkpoint and never used are simply dropped). The thread overlaps the model's work because
PyTorch releases the GIL inside its operations, and so must the work here: a Python loop over a batch's rows holds the
GIL that the training thread needs to launch a GPU's kernels (translation and decoder-only batches are padded with
numpy: `vaswani.data.batching.TokenCollator`). For a GPU the training loop's `make_group` also pins the batches here; the
copies stay in the training loop (without blocking: `vaswani.data.batching.to_device`).

A collator that draws random numbers (the masked LM's masking) must not run here: it would take them from the
global generator in another order than the training loop's dropout, and runs would no longer repeat. The caller
decides (`Task.random_collator`).

An exception in `make_group` (a bug, or the end of a finite stream: StopIteration) is raised by the `next` call that
would have returned that group.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from typing import Any

import torch


class _Failed:
    def __init__(self, error: BaseException):
        self.error = error


class Prefetcher:
    """Groups from `make_group()`, made `depth` ahead in a daemon thread."""

    def __init__(self, make_group: Callable[[], Any], depth: int = 2):
        if depth < 1:
            raise ValueError(f"depth must be at least 1, got {depth}")
        self._make_group = make_group
        self._queue: queue.Queue = queue.Queue(maxsize=depth)
        self._stop = threading.Event()
        self.wait_seconds = 0.0
        self._thread = threading.Thread(target=self._work, name="vaswani-prefetch", daemon=True)
        self._thread.start()

    def _work(self) -> None:
        # One intra-op thread here (the setting is per thread; the training loop keeps its own), as the DataLoader's
        # pin-memory thread does: padding a batch must not start a second team of OpenMP threads that competes for
        # every core with the training loop's team and with the thread that launches a GPU's kernels.
        torch.set_num_threads(1)
        while not self._stop.is_set():
            try:
                item = self._make_group()
            except BaseException as error:  # handed to the training loop, which raises it
                item = _Failed(error)
            while not self._stop.is_set():
                try:
                    self._queue.put(item, timeout=0.1)
                    break
                except queue.Full:
                    continue
            if isinstance(item, _Failed):
                return

    def next(self) -> Any:
        """The next group, in order; the time spent waiting for it is added to `wait_seconds`."""
        start = time.perf_counter()
        item = self._queue.get()
        self.wait_seconds += time.perf_counter() - start
        if isinstance(item, _Failed):
            raise item.error
        return item

    def close(self) -> None:
        """Stop the thread (the groups made ahead are dropped)."""
        self._stop.set()
        self._thread.join()


class Inline:
    """`Prefetcher`'s interface without a thread: each group is made when asked for (`--prefetch_updates 0`, and
    collators that draw random numbers); the time it takes counts as waiting for data."""

    def __init__(self, make_group: Callable[[], Any]):
        self._make_group = make_group
        self.wait_seconds = 0.0

    def next(self) -> Any:
        start = time.perf_counter()
        try:
            return self._make_group()
        finally:
            self.wait_seconds += time.perf_counter() - start

    def close(self) -> None:
        pass
