"""vaswani/serve/batching.py: requests share a batch only with the same model and decoding options, and a batch
holds at most the token budget (the decoding function is a stand-in that records its batches)."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from vaswani.serve.batching import Batcher, DecodingOptions


def test_requests_with_other_decoding_options_are_decoded_in_other_batches():
    batches = []

    def decode(key, sentences, options):
        batches.append((key, options.num_beams, list(sentences)))
        return [[f"{sentence}/{options.num_beams}"] for sentence in sentences]

    async def scenario():
        batcher = Batcher(decode, max_tokens=100, max_wait=0.05)
        batcher.start()
        jobs = [batcher.translate("en-de", [f"s{i}"], 1, DecodingOptions(num_beams=1 + i % 2)) for i in range(6)]
        results = await asyncio.gather(*jobs, batcher.translate("de-en", ["t"], 1, DecodingOptions()))
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
        await asyncio.gather(*(batcher.translate("k", [str(i)], 10, DecodingOptions()) for i in range(7)))
        await batcher.stop()

    asyncio.run(scenario())
    assert sizes == [3, 3, 1]


class Recorder:
    """A stand-in `decode` that records each batch and how many batches were decoding at once at most; each batch
    takes `seconds` (in its worker thread)."""

    def __init__(self, seconds: float = 0.05):
        self.seconds, self.batches, self.now, self.most = seconds, [], 0, 0
        self.lock = threading.Lock()

    def __call__(self, key, sentences, options):
        with self.lock:
            self.batches.append((key, list(sentences)))
            self.now += 1
            self.most = max(self.most, self.now)
        time.sleep(self.seconds)
        with self.lock:
            self.now -= 1
        return [[f"{key}:{sentence}"] for sentence in sentences]


def run_requests(batcher: Batcher, requests: list[tuple[str, str]]) -> list:
    """Every (model, sentence) request at once, one sentence of 10 tokens each; their results in order."""

    async def scenario():
        batcher.start()
        results = await asyncio.gather(*(batcher.translate(key, [s], 10, DecodingOptions()) for key, s in requests))
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
    decode = Recorder(seconds=0.2)
    requests = [("en-de", f"s{i}") for i in range(8)]
    results = run_requests(Batcher(decode, max_tokens=1000, max_wait=0.05, slots={"en-de": 2}), requests)
    assert results == [[[f"en-de:{sentence}"]] for _, sentence in requests]  # each request its own answer, once
    assert decode.most == 2  # both workers decoded at once
    assert [batch for _, batch in decode.batches] == [[f"s{i}" for i in range(4)], [f"s{i}" for i in range(4, 8)]]


def test_a_busy_model_does_not_hold_up_another_models_batches():
    decode = Recorder(seconds=0.2)
    requests = [("en-de", "a"), ("en-de", "b"), ("de-en", "c")]
    batcher = Batcher(decode, max_tokens=10, max_wait=0.01, slots={"en-de": 1, "de-en": 1, "fr-en": 2})
    run_requests(batcher, requests)
    assert [key for key, _ in decode.batches] == ["en-de", "de-en", "en-de"]  # de-en went while en-de was busy
    assert decode.most == 2


@pytest.mark.parametrize("slots", [{"en-de": 0}, {"en-de": 1.5}])
def test_slots_are_whole_numbers_of_at_least_one(slots):
    with pytest.raises(ValueError, match="at least 1"):
        Batcher(Recorder(), max_tokens=10, max_wait=0.01, slots=slots)
