"""vaswani/serve/batching.py: requests share a batch only with the same model, decoding options and length bucket; a
batch costs at most the budget (sentences x longest); a free worker starts at once and batches form while the
workers are busy; the oldest request goes first; a failing request fails alone. The decoding function is a stand-in
that records its batches, and the order of events is fixed by the test (no timing decides a result)."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from vaswani.serve.batching import Batcher, DecodingOptions, length_bucket


def test_requests_with_other_decoding_options_are_decoded_in_other_batches():
    batches = []

    def decode(key, sentences, options):
        batches.append((key, options.num_beams, list(sentences)))
        return [[f"{sentence}/{options.num_beams}"] for sentence in sentences]

    async def scenario():
        batcher = Batcher(decode, max_tokens=100, max_wait=0.05)
        batcher.start()
        jobs = [batcher.translate("en-de", [f"s{i}"], [1], DecodingOptions(num_beams=1 + i % 2)) for i in range(6)]
        results = await asyncio.gather(*jobs, batcher.translate("de-en", ["t"], [1], DecodingOptions()))
        await batcher.stop()
        return results

    results = asyncio.run(scenario())
    assert results == [[[f"s{i}/{1 + i % 2}"]] for i in range(6)] + [[["t/4"]]]  # per request, per sentence
    assert sorted(batches) == [("de-en", 4, ["t"]), ("en-de", 1, ["s0", "s2", "s4"]), ("en-de", 2, ["s1", "s3", "s5"])]


def test_a_batch_holds_at_most_the_token_budget():
    sizes = []

    def decode(key, sentences, options):
        sizes.append(len(sentences))
        return [[s] for s in sentences]

    async def scenario():
        batcher = Batcher(decode, max_tokens=30, max_wait=0.05)
        batcher.start()
        await asyncio.gather(*(batcher.translate("k", [str(i)], [10], DecodingOptions()) for i in range(7)))
        await batcher.stop()

    asyncio.run(scenario())
    assert sizes == [3, 3, 1]


MEET_SECONDS = 10  # a `Recorder(meet=N)` batch waits at most this long for the others: a failure's cost, not a pass's


class Recorder:
    """A stand-in `decode` that records each batch and how many batches were decoding at once at most; each batch
    takes `seconds` (in its worker thread). With `meet=N` a batch also waits, until N batches have been decoding at
    once (or `MEET_SECONDS` passed): whether two batches overlap then does not depend on how soon a busy machine
    starts the second worker's thread (CI saw `most == 1` with 0.2 s batches), and a batcher that never decodes N at
    once still shows `most` below N."""

    def __init__(self, seconds: float = 0.05, meet: int | None = None):
        self.seconds, self.meet, self.batches, self.now, self.most = seconds, meet, [], 0, 0
        self.lock = threading.Lock()
        self.changed = threading.Condition(self.lock)

    def __call__(self, key, sentences, options):
        with self.lock:
            self.batches.append((key, list(sentences)))
            self.now += 1
            self.most = max(self.most, self.now)
            self.changed.notify_all()
            if self.meet is not None:
                self.changed.wait_for(lambda: self.most >= self.meet, timeout=MEET_SECONDS)
        time.sleep(self.seconds)
        with self.lock:
            self.now -= 1
        return [[f"{key}:{sentence}"] for sentence in sentences]


def run_requests(batcher: Batcher, requests: list[tuple[str, str]]) -> list:
    """Every (model, sentence) request at once, one sentence of 10 tokens each; their results in order."""

    async def scenario():
        batcher.start()
        results = await asyncio.gather(*(batcher.translate(key, [s], [10], DecodingOptions()) for key, s in requests))
        await batcher.stop()
        return results

    return asyncio.run(scenario())


def test_by_default_one_batch_decodes_at_a_time_whatever_the_model():
    decode = Recorder()
    requests = [("en-de" if i % 2 else "de-en", f"s{i}") for i in range(8)]
    results = run_requests(Batcher(decode, max_tokens=20, max_wait=0.01), requests)
    assert results == [[[f"{key}:{sentence}"]] for key, sentence in requests]
    assert decode.most == 1 and len(decode.batches) == 4


def test_a_model_with_two_slots_decodes_two_batches_at_once_and_shares_a_burst_between_them():
    decode = Recorder(seconds=0.2, meet=2)
    requests = [("en-de", f"s{i}") for i in range(8)]
    results = run_requests(Batcher(decode, max_tokens=1000, max_wait=0.05, slots={"en-de": 2}), requests)
    assert results == [[[f"en-de:{sentence}"]] for _, sentence in requests]  # each request its own answer, once
    assert decode.most == 2  # both workers decoded at once
    assert [batch for _, batch in decode.batches] == [[f"s{i}" for i in range(4)], [f"s{i}" for i in range(4, 8)]]


def test_a_busy_model_does_not_hold_up_another_models_batches():
    decode = Recorder(seconds=0.2, meet=2)
    requests = [("en-de", "a"), ("en-de", "b"), ("de-en", "c")]
    batcher = Batcher(decode, max_tokens=10, max_wait=0.01, slots={"en-de": 1, "de-en": 1, "fr-en": 2})
    run_requests(batcher, requests)
    assert [key for key, _ in decode.batches] == ["en-de", "de-en", "en-de"]  # de-en went while en-de was busy
    assert decode.most == 2


@pytest.mark.parametrize("slots", [{"en-de": 0}, {"en-de": 1.5}])
def test_slots_are_whole_numbers_of_at_least_one(slots):
    with pytest.raises(ValueError, match="at least 1"):
        Batcher(Recorder(), max_tokens=10, max_wait=0.01, slots=slots)


# ---------------------------------------------------------------------------------------------------------------------
# The scheduling rules (issue 42): length buckets, the budget by expected decoding time, no wait while a worker is
# free, the oldest request first, and a failing request failing alone
# ---------------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("tokens", "bucket"), [(0, 0), (1, 0), (8, 0), (9, 1), (16, 1), (17, 2), (32, 2), (33, 3),
                                                (200, 5)])  # fmt: skip
def test_length_buckets_hold_sentences_within_twice_each_others_length(tokens, bucket):
    assert length_bucket(tokens) == bucket


class Gate:
    """A stand-in `decode` whose first batch waits until the test opens the gate (so that the test, not the clock,
    decides what arrives while a worker is busy); it records every batch as the list of its sentences."""

    def __init__(self, fail_on: str | None = None):
        self.batches, self.fail_on = [], fail_on
        self.started, self.gate = threading.Event(), threading.Event()

    def __call__(self, key, sentences, options):
        self.batches.append(list(sentences))
        if len(self.batches) == 1:
            self.started.set()
            assert self.gate.wait(30)
        if self.fail_on in sentences:
            raise ValueError(f"cannot decode {self.fail_on}")
        return [[f"<{sentence}>"] for sentence in sentences]

    async def busy(self) -> None:
        """Until the first batch is decoding (the worker is busy)."""
        while not self.started.is_set():
            await asyncio.sleep(0.001)


def run_scenario(batcher: Batcher, scenario) -> list:
    async def run():
        batcher.start()
        try:
            return await scenario()
        finally:
            await batcher.stop()

    return asyncio.run(run())


def ask(batcher: Batcher, sentence: str, tokens: int) -> asyncio.Task:
    return asyncio.get_running_loop().create_task(batcher.translate("en-de", [sentence], [tokens], DecodingOptions()))


def test_short_and_long_sentences_go_to_batches_of_their_own():
    decode = Gate()
    decode.gate.set()
    batcher = Batcher(decode, max_tokens=10_000)

    async def scenario():
        return await asyncio.gather(*(ask(batcher, s, n) for s, n in (("a", 3), ("B", 40), ("c", 4), ("D", 50))))

    assert run_scenario(batcher, scenario) == [[["<a>"]], [["<B>"]], [["<c>"]], [["<D>"]]]
    assert decode.batches == [["a", "c"], ["B", "D"]]  # all four arrived before the first batch was cut


def test_a_batch_costs_its_sentences_times_its_longest_sentence_at_most_the_budget():
    decode = Gate()
    decode.gate.set()
    batcher = Batcher(decode, max_tokens=60)

    async def scenario():
        await asyncio.gather(*(ask(batcher, s, n) for s, n in (("a", 17), ("b", 32), ("c", 20), ("d", 20))))

    run_scenario(batcher, scenario)
    # a+b: 49 tokens, but padded to 32 they cost 64 > 60; b+c+d cost 3 x 32 = 96; c+d cost 2 x 20 = 40
    assert decode.batches == [["a"], ["b"], ["c", "d"]]


def test_a_free_worker_starts_at_once_and_the_next_batch_forms_while_it_is_busy():
    decode = Gate()
    batcher = Batcher(decode, max_tokens=10_000)  # max_wait 0: the default

    async def scenario():
        first = ask(batcher, "a", 5)
        for _ in range(5):  # a few turns of the event loop, no time: "a" leaves its queue without waiting
            await asyncio.sleep(0)
        assert batcher.queued_sentences() == 0
        await decode.busy()
        others = [ask(batcher, "b", 5), ask(batcher, "c", 5)]
        await asyncio.sleep(0)  # both queued while the worker is busy
        decode.gate.set()
        return await asyncio.gather(first, *others)

    assert run_scenario(batcher, scenario) == [[["<a>"]], [["<b>"]], [["<c>"]]]
    assert decode.batches == [["a"], ["b", "c"]]


def test_with_a_wait_a_lone_request_waits_for_company_until_the_budget_is_full():
    decode = Gate()
    decode.gate.set()
    batcher = Batcher(decode, max_tokens=10, max_wait=60.0)  # a minute: only the full budget ends the wait

    async def scenario():
        first = ask(batcher, "a", 5)
        for _ in range(10):
            await asyncio.sleep(0)  # the dispatcher runs, and waits
        return await asyncio.gather(first, ask(batcher, "b", 5))

    run_scenario(batcher, scenario)
    assert decode.batches == [["a", "b"]]


@pytest.mark.parametrize("order", [("L2", "s"), ("s", "L2")])
def test_the_request_that_waited_longest_goes_first_whatever_its_length(order):
    decode = Gate()
    batcher = Batcher(decode, max_tokens=10_000)
    lengths = {"L1": 40, "L2": 40, "s": 3}

    async def scenario():
        first = ask(batcher, "L1", 40)
        await decode.busy()
        others = [ask(batcher, name, lengths[name]) for name in order]
        await asyncio.sleep(0)
        decode.gate.set()
        await asyncio.gather(first, *others)

    run_scenario(batcher, scenario)
    assert decode.batches == [["L1"], [order[0]], [order[1]]]


def test_a_request_that_fails_its_batch_fails_alone():
    decode = Gate(fail_on="poison")
    decode.gate.set()
    batcher = Batcher(decode, max_tokens=10_000)

    async def scenario():
        return await asyncio.gather(*(ask(batcher, s, 5) for s in ("a", "poison", "b")), return_exceptions=True)

    first, poisoned, last = run_scenario(batcher, scenario)
    assert (first, last) == ([["<a>"]], [["<b>"]])
    assert isinstance(poisoned, ValueError) and "cannot decode poison" in str(poisoned)
    assert decode.batches == [["a", "poison", "b"], ["a"], ["poison"], ["b"]]


# ---------------------------------------------------------------------------------------------------------------------
# A document: a request that costs more than a slot's share of the budget is decoded in pieces
# ---------------------------------------------------------------------------------------------------------------------
def document(batcher: Batcher, sentences: list[str], lengths: list[int], key: str = "en-de") -> list:
    """One request of `sentences` (each `lengths` tokens) alone on `batcher`: its results."""
    return run_scenario(batcher, lambda: batcher.translate(key, sentences, lengths, DecodingOptions()))


def test_a_document_is_decoded_by_both_workers_of_a_two_slot_model_and_answered_whole_in_order():
    decode = Recorder(seconds=0.2, meet=2)
    sentences = [f"s{i}" for i in range(8)]
    results = document(Batcher(decode, max_tokens=80, slots={"en-de": 2}), sentences, [10] * 8)
    assert results == [[f"en-de:{sentence}"] for sentence in sentences]
    assert decode.most == 2  # the two halves at once: each slot's share is 80 / 2 = 40 tokens, 4 sentences
    assert sorted(batch for _, batch in decode.batches) == [sentences[:4], sentences[4:]]


def test_a_document_within_a_slots_share_stays_one_batch_and_a_longer_one_is_cut_by_length():
    decode = Gate()
    decode.gate.set()
    batcher = Batcher(decode, max_tokens=40)
    assert batcher.pieces("en-de", [10, 10, 10, 10]) == [[0, 1, 2, 3]]  # 4 x 10 = 40: one piece
    # sorted by length, each piece at most 40 (sentences x its longest): (5, 5, 12) = 36, then 30 alone
    assert batcher.pieces("en-de", [30, 5, 12, 5]) == [[1, 3, 2], [0]]
    assert batcher.pieces("en-de", [50, 60]) == [[0], [1]]  # a sentence alone may cost more
    sentences = ["long", "a", "mid", "b"]
    assert document(batcher, sentences, [30, 5, 12, 5]) == [[f"<{s}>"] for s in sentences]  # in the request's order
    assert sorted(decode.batches) == [["a", "b", "mid"], ["long"]]


def test_a_document_whose_piece_fails_fails_alone():
    decode = Gate(fail_on="poison")
    decode.gate.set()
    batcher = Batcher(decode, max_tokens=20)

    async def scenario():
        whole = batcher.translate("en-de", ["a", "poison", "b", "c"], [10, 10, 10, 10], DecodingOptions())
        return await asyncio.gather(whole, ask(batcher, "other", 10), return_exceptions=True)

    failed, other = run_scenario(batcher, scenario)
    assert isinstance(failed, ValueError) and "cannot decode poison" in str(failed)
    assert other == [["<other>"]]
