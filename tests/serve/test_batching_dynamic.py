"""vaswani/serve/batching.py: requests share a batch only with the same model and decoding options, and a batch
holds at most the token budget (the decoding function is a stand-in that records its batches)."""

from __future__ import annotations

import asyncio

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
