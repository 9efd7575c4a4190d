"""vaswani/data/prefetch.py (issue 30 item 5): groups made ahead in a thread come in order, errors reach the caller,
and the time spent waiting for data falls to about nothing when making a group takes less than using one. Sleeps
stand in for the work (they release the GIL, as PyTorch's operations do), so the timings hold on a busy machine.
(The training loop with it, bit-identical to the loop without: tests/training/test_loop.py.)"""

import itertools
import threading
import time

import pytest

from vaswani.data.prefetch import Inline, Prefetcher


def counter(delay: float = 0.0):
    numbers = itertools.count()

    def make():
        time.sleep(delay)
        return next(numbers)

    return make


@pytest.mark.parametrize("feeder", [lambda make: Prefetcher(make, depth=3), Inline])
def test_groups_come_in_the_order_they_were_made(feeder):
    batches = feeder(counter())
    try:
        assert [batches.next() for _ in range(50)] == list(range(50))
    finally:
        batches.close()


def test_an_error_in_the_worker_is_raised_by_the_next_that_would_have_returned_its_group():
    numbers = iter([0, 1])

    def make():
        return next(numbers)  # the third call raises StopIteration

    batches = Prefetcher(make, depth=2)
    assert [batches.next(), batches.next()] == [0, 1]
    with pytest.raises(StopIteration):
        batches.next()
    batches.close()


def test_close_stops_the_thread_even_when_the_queue_is_full():
    batches = Prefetcher(counter(), depth=1)
    time.sleep(0.05)  # the worker has filled the queue and waits
    workers = [t for t in threading.enumerate() if t.name == "vaswani-prefetch"]
    assert len(workers) == 1 and workers[0].is_alive()
    batches.close()
    assert not workers[0].is_alive()


def test_with_prefetching_the_consumer_hardly_waits_and_without_it_waits_for_every_group():
    """Making a group takes 20 ms, using one 40 ms: made ahead, only the first is waited for."""

    def consume(batches) -> float:
        try:
            for _ in range(15):
                batches.next()
                time.sleep(0.04)
            return batches.wait_seconds
        finally:
            batches.close()

    inline = consume(Inline(counter(0.02)))
    ahead = consume(Prefetcher(counter(0.02), depth=2))
    assert inline >= 15 * 0.02
    assert ahead < 0.25 * inline, (ahead, inline)


def test_depth_must_be_positive():
    with pytest.raises(ValueError, match="depth must be at least 1, got 0"):
        Prefetcher(counter(), depth=0)


def test_the_worker_pads_with_one_intra_op_thread_and_leaves_the_training_loops_count_alone():
    """A second team of OpenMP threads in the worker would compete for every core with the training loop's team (as
    the DataLoader's pin-memory thread, the worker keeps to one); the setting is per thread."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        feeder = Prefetcher(torch.get_num_threads, depth=1)
        try:
            assert feeder.next() == 1
        finally:
            feeder.close()
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)
