"""The paper's beam search: GNMT length penalty (a hand-computed case where it and transformers' penalty disagree),
exactness against brute-force enumeration, and the per-sentence cap of source length + N."""

import itertools
import math

import pytest
import torch
from conftest import random_batch, tiny_model
from transformers import LogitsProcessor, LogitsProcessorList
from transformers.modeling_outputs import Seq2SeqLMOutput

from modeling_vaswani.generation_vaswani import gnmt_length_penalty, paper_beam_search

PAD, START, EOS, A, B = 0, 1, 2, 3, 4


def scripted_model(next_token_probs: dict[tuple[int, ...], dict[int, float]], vocab_size: int = 99, seed: int = 0):
    """A tiny Vaswani model whose forward returns scripted next-token distributions for given decoder prefixes
    (anything unscripted ends: EOS with probability ~1). Runs without a cache, so beam reordering is not involved."""
    model = tiny_model(seed=seed).eval()

    def forward(decoder_input_ids=None, past_key_values=None, **kwargs):
        rows = []
        for prefix in decoder_input_ids.tolist():
            probs = torch.full((vocab_size,), 1e-9)
            scripted = next_token_probs.get(tuple(prefix[1:]), {EOS: 1.0})
            for token, p in scripted.items():
                probs[token] = p
            rows.append(probs / probs.sum())
        logits = torch.stack(rows).log()[:, None, :].expand(-1, decoder_input_ids.shape[1], -1)
        return Seq2SeqLMOutput(logits=logits, past_key_values=None)

    model.forward = forward
    return model


# Two hypotheses: S = [a, EOS] with log P = -1.0, L = [b, b, b, EOS] with log P = -1.3.
SCRIPT = {
    (): {A: 0.55, B: 0.40, EOS: 0.05},
    (A,): {EOS: math.exp(-1.0) / 0.55, A: 1 - math.exp(-1.0) / 0.55},
    (A, A): {EOS: 1.0},
    (B,): {B: 0.9, EOS: 0.1},
    (B, B): {B: 0.9, EOS: 0.1},
    (B, B, B): {EOS: math.exp(-1.3) / (0.4 * 0.9 * 0.9), A: 1 - math.exp(-1.3) / (0.4 * 0.9 * 0.9)},
}
assert all(sum(p.values()) == pytest.approx(1.0) for p in SCRIPT.values())  # every scripted row is a distribution


def test_hand_computed_example_where_gnmt_and_transformers_disagree():
    # By hand, alpha = 0.6:
    #   GNMT:          S: -1.0 / (7/6)^0.6 = -0.9117     L: -1.3 / (9/6)^0.6 = -1.0193   -> S wins
    #   transformers:  S: -1.0 / 2^0.6     = -0.6598     L: -1.3 / 4^0.6     = -0.5659   -> L wins
    assert pytest.approx(-0.9117, abs=1e-4) == -1.0 / (7 / 6) ** 0.6
    assert pytest.approx(-1.0193, abs=1e-4) == -1.3 / (9 / 6) ** 0.6
    assert pytest.approx(-0.6598, abs=1e-4) == -1.0 / 2**0.6 and pytest.approx(-0.5659, abs=1e-4) == -1.3 / 4**0.6
    model = scripted_model(SCRIPT)
    input_ids = torch.tensor([[5, 6, 7, 2]])
    common = dict(num_beams=2, length_penalty=0.6, use_cache=False, max_new_tokens=6)

    paper = model.generate(input_ids, paper_decoding=True, return_dict_in_generate=True, **common)
    assert paper.sequences[0].tolist() == [START, A, EOS]
    assert paper.sequences_scores[0].item() == pytest.approx(-1.0 / gnmt_length_penalty(2, 0.6), abs=1e-4)

    hf = model.generate(input_ids, early_stopping="never", **common)  # search as long as HF can improve
    assert hf[0].tolist()[:5] == [START, B, B, B, EOS]


def test_gnmt_length_penalty_formula():
    assert gnmt_length_penalty(1, 0.6) == 1.0  # ((5 + 1) / 6) ** alpha
    assert gnmt_length_penalty(10, 0.6) == pytest.approx((15 / 6) ** 0.6)
    assert gnmt_length_penalty(7, 0.0) == 1.0
    assert pytest.approx(1.733, abs=1e-3) == (15 / 6) ** 0.6  # the paper-recipe note: 1.73 vs 10**0.6 = 3.98


def log_prob_of(model, input_ids, target: list[int]) -> float:
    """log P(target | source) by teacher forcing (target excludes the start token)."""
    decoder_input_ids = torch.tensor([[START, *target[:-1]]])
    with torch.no_grad():
        log_probs = model(input_ids=input_ids, decoder_input_ids=decoder_input_ids).logits.log_softmax(-1)[0]
    return sum(log_probs[i, token].item() for i, token in enumerate(target))


def test_wide_beam_finds_the_gnmt_optimum_found_by_enumeration():
    """With a beam as wide as the search space, beam search must return the best hypothesis under the GNMT score,
    which brute-force enumeration over every output up to the cap finds independently."""
    torch.manual_seed(0)
    model = tiny_model(seed=7, vocab_size=6, max_position_embeddings=16).eval()
    with torch.no_grad():  # make EOS a plausible continuation so lengths really compete
        model.lm_head.weight[EOS] *= 0.0
    input_ids = torch.tensor([[3, 4]])  # source length 2: with 2 extra tokens the cap is 4 generated tokens
    cap, alpha = 4, 0.6
    best_score, best = -math.inf, None
    for length in range(2, cap + 1):  # min_new_tokens=1 (the model's default): no empty translation
        for prefix in itertools.product([t for t in range(6) if t != EOS], repeat=length - 1):
            target = [*prefix, EOS]
            score = log_prob_of(model, input_ids, target) / gnmt_length_penalty(length, alpha)
            if score > best_score:
                best_score, best = score, target
    out = model.generate(
        input_ids, num_beams=5**3, length_penalty=alpha, custom_generate=paper_beam_search,
        max_new_tokens_over_source=2, return_dict_in_generate=True,
    )  # fmt: skip
    assert out.sequences[0].tolist() == [START, *best]
    assert out.sequences_scores[0].item() == pytest.approx(best_score, abs=1e-4)


def test_each_sentence_is_capped_at_its_own_source_length_plus_n():
    model = tiny_model(seed=8).eval()
    original_forward = model.forward

    def never_eos(*args, **kwargs):  # EOS is never chosen unless forced, so every sentence runs to its cap
        out = original_forward(*args, **kwargs)
        out.logits[..., EOS] = -1e4
        return out

    model.forward = never_eos
    input_ids, attention_mask, _ = random_batch(batch_size=3, src_len=7, seed=8)  # source lengths 7, 6, 5
    out = model.generate(
        input_ids, attention_mask=attention_mask, num_beams=3, length_penalty=0.6, paper_decoding=True,
        max_new_tokens_over_source=3,
    )  # fmt: skip
    generated = out[:, 1:]
    lengths = [(row != 0).sum().item() for row in generated]
    assert lengths == [7 + 3, 6 + 3, 5 + 3]
    for row, length in zip(generated.tolist(), lengths, strict=True):
        assert row[length - 1] == EOS and EOS not in row[: length - 1]


def test_paper_decoding_with_cache_equals_without_and_returns_several_sequences():
    model = tiny_model(seed=9).eval()
    input_ids, attention_mask, _ = random_batch(seed=9)
    kwargs = dict(attention_mask=attention_mask, num_beams=4, paper_decoding=True, max_new_tokens=10)
    cached = model.generate(input_ids, use_cache=True, **kwargs)
    uncached = model.generate(input_ids, use_cache=False, **kwargs)
    assert torch.equal(cached, uncached)
    several = model.generate(input_ids, num_return_sequences=3, return_dict_in_generate=True, **kwargs)
    assert several.sequences.shape[0] == 9
    scores = several.sequences_scores.view(3, 3)
    assert (scores[:, :-1] >= scores[:, 1:]).all()  # best first
    assert torch.equal(several.sequences[::3, : cached.shape[1]], cached[:, : several.sequences.shape[1]])


class EndAfter(LogitsProcessor):
    """EOS is impossible before sentence i has `lengths[i]` tokens (the start token included) and near-certain from
    then on (+20 on its logit): every sentence ends by itself, well before the cap, at a known length."""

    def __init__(self, lengths: list[int]):
        self.lengths = torch.tensor(lengths)

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        scores = scores.clone()
        ready = input_ids.shape[1] >= self.lengths.repeat_interleave(input_ids.shape[0] // len(self.lengths))
        scores[:, EOS] = torch.where(ready, scores[:, EOS] + 20.0, float("-inf"))
        return scores


def test_greedy_paper_decoding_equals_transformers_greedy_when_eos_comes_before_the_cap():
    """With one beam and EOS never a close second, the paper's search is greedy search: the same tokens, the same
    end. (Where EOS is a close second, the two differ by design: the paper's search keeps the EOS hypothesis and
    ranks it by the GNMT penalty.)"""
    model = tiny_model(seed=10).eval()
    input_ids, attention_mask, _ = random_batch(seed=10)
    lengths = [3, 5, 4]
    common = dict(
        attention_mask=attention_mask, num_beams=1, logits_processor=LogitsProcessorList([EndAfter(lengths)])
    )
    hf = model.generate(input_ids, **common)
    paper = model.generate(input_ids, paper_decoding=True, **common)
    for a, b, length in zip(hf.tolist(), paper.tolist(), lengths, strict=True):
        assert EOS in a and a.index(EOS) == length  # each sentence ended by itself, where the processor allows it
        end = length + 1
        assert b[:end] == a[:end]
        assert all(token == PAD for token in a[end:] + b[end:])


def test_bad_paper_decoding_arguments():
    model = tiny_model().eval()
    input_ids, attention_mask, _ = random_batch()
    with pytest.raises(ValueError, match="num_return_sequences"):
        model.generate(input_ids, num_beams=2, num_return_sequences=5, paper_decoding=True, max_new_tokens=4)


# ---------------------------------------------------------------------------------------------------------------------
# The minimum-length rules without the copies (`VaswaniGenerationMixin`)
# ---------------------------------------------------------------------------------------------------------------------
def test_the_lighter_minimum_length_rules_score_as_transformers_and_pass_the_scores_through_afterwards():
    from transformers.generation.logits_process import MinLengthLogitsProcessor, MinNewTokensLengthLogitsProcessor

    from modeling_vaswani.generation_vaswani import _MinLength, _MinNewTokens

    scores = torch.randn(6, 11, generator=torch.Generator().manual_seed(0))
    # (transformers' rule, ours, the first length where EOS is allowed): 3 tokens; 2 new tokens after 2 of prompt
    rules = [(MinLengthLogitsProcessor(3, [2, 7]), _MinLength(3, [2, 7]), 3),
             (MinNewTokensLengthLogitsProcessor(2, 2, [2, 7]), _MinNewTokens(2, 2, [2, 7]), 4)]  # fmt: skip
    for theirs, ours, allowed_from in rules:
        for length in range(1, 6):
            input_ids = torch.ones(6, length, dtype=torch.long)
            expected = theirs(input_ids, scores.clone())
            got = ours(input_ids, scores)
            assert torch.equal(got, expected), (type(theirs).__name__, length)
            assert (got is scores) == (length >= allowed_from)  # no copy once EOS is allowed; a new tensor before
    assert torch.isinf(_MinLength(3, [2, 7])(torch.ones(6, 2, dtype=torch.long), scores)[:, [2, 7]]).all()


def generate_with(model, processors_of, **options):
    """`model.generate(**options)` with the logits processors made by `processors_of` (the model's own method, or
    transformers' `GenerationMixin._get_logits_processor`), and the processors it used."""
    used = []

    def make(self, *args, **kwargs):
        processors = processors_of(self, *args, **kwargs)
        used.extend(processors)
        return processors

    original = type(model)._get_logits_processor
    type(model)._get_logits_processor = make
    try:
        output = model.generate(**options, return_dict_in_generate=True, output_scores=True)
    finally:
        type(model)._get_logits_processor = original
    return output, used


@pytest.mark.parametrize("search", ["beam", "greedy", "sample", "paper", "causal-lm-beam"])
def test_generate_uses_the_lighter_rules_and_decodes_and_scores_as_transformers_own(search):
    from test_modeling_vaswani_lm import causal_lm
    from transformers import GenerationMixin
    from transformers.generation.logits_process import MinLengthLogitsProcessor, MinNewTokensLengthLogitsProcessor

    from modeling_vaswani.generation_vaswani import _MinLength, _MinNewTokens

    input_ids, attention_mask, _ = random_batch()
    if search.startswith("causal-lm"):  # VaswaniForCausalLM: a prompt of ones, new tokens after it
        model, prompt_length = causal_lm(seed=3), input_ids.shape[1]
        attention_mask = torch.ones_like(input_ids)
    else:  # VaswaniForConditionalGeneration: new tokens after the decoder's start token
        model, prompt_length = tiny_model(seed=3).eval(), 1
    options = {"beam": dict(num_beams=3), "greedy": dict(num_beams=1), "sample": dict(do_sample=True, num_beams=1),
               "paper": dict(num_beams=3, paper_decoding=True), "causal-lm-beam": dict(num_beams=3)}[search]  # fmt: skip
    options.update(input_ids=input_ids, attention_mask=attention_mask, max_new_tokens=5, min_new_tokens=2)
    outputs = {}
    for name, processors_of in (("ours", type(model)._get_logits_processor),
                                ("transformers", GenerationMixin._get_logits_processor)):  # fmt: skip
        torch.manual_seed(0)
        outputs[name] = generate_with(model, processors_of, **options)
    (ours, used), (theirs, their_used) = outputs["ours"], outputs["transformers"]
    assert {type(p) for p in used} >= {_MinLength, _MinNewTokens}
    assert not {type(p) for p in used} & {MinLengthLogitsProcessor, MinNewTokensLengthLogitsProcessor}
    assert {type(p) for p in their_used} >= {MinLengthLogitsProcessor, MinNewTokensLengthLogitsProcessor}
    assert torch.equal(ours.sequences, theirs.sequences)
    if search != "paper":  # (the paper's search returns no per-step scores)
        assert all(torch.equal(a, b) for a, b in zip(ours.scores, theirs.scores, strict=True))
    assert (ours.sequences[:, prompt_length : prompt_length + 2] != EOS).all()  # at least two new tokens
