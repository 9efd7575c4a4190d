"""The paper's beam search (Section 6.1): beam size 4, GNMT length penalty, output capped at source length + 50.

transformers' `generate()` ranks finished beams by `sum_logprobs / length ** length_penalty`. The paper (following
GNMT, Wu et al. 2016, and tensor2tensor) divides by

    lp(Y) = ((5 + |Y|) / 6) ** alpha,      alpha = 0.6

and no value of `length_penalty` turns one formula into the other. `paper_beam_search` is a complete beam search
with the paper's scoring, plugged into `generate()` through its `custom_generate` hook, so everything else of
`generate()` (inputs, encoder, cache, logits processors, `num_return_sequences`) stays as usual:

    model.generate(**batch, num_beams=4, length_penalty=0.6, custom_generate=paper_beam_search)
    model.generate(**batch, paper_decoding=True)        # the same, through VaswaniForConditionalGeneration

|Y| counts the generated tokens including EOS (as tensor2tensor does). A sentence stops when no live beam can still
beat its worst kept finished hypothesis: for alpha >= 0 the best a live beam can reach is its log-probability divided
by lp(max length), tensor2tensor's exact early-stopping bound ("stop early when possible"). Each sentence is capped at
its own source length (non-PAD tokens) + `max_new_tokens_over_source` (50 in the paper), and at
`generation_config.max_length`; at the cap only EOS is allowed.

This file imports only torch and transformers: it travels with a saved model for `trust_remote_code` loading.
"""

import math

import torch
from transformers import GenerationMixin
from transformers.cache_utils import EncoderDecoderCache
from transformers.generation.logits_process import MinLengthLogitsProcessor, MinNewTokensLengthLogitsProcessor
from transformers.generation.utils import GenerateBeamEncoderDecoderOutput
from transformers.modeling_outputs import Seq2SeqLMOutput


class VaswaniGenerationMixin(GenerationMixin):
    """`GenerationMixin` whose minimum-length rules do not copy the scores at every step.

    The model's generation config asks for at least one new token (`min_new_tokens=1`: a translation is never empty),
    which `generate()` enforces twice, with `MinLengthLogitsProcessor` and `MinNewTokensLengthLogitsProcessor`, each
    copying the whole (rows x vocabulary) score matrix at every step although it changes it only at the first: about
    5% of the CPU time of a beam search on one thread (benchmarks/README.md). Here each is the same rule without the
    copies (`_MinLength`, `_MinNewTokens`); every other processor, and any processor the caller passes, stays as it
    is."""

    def _get_logits_processor(self, *args, **kwargs):
        processors = super()._get_logits_processor(*args, **kwargs)
        for index, processor in enumerate(processors):
            lighter = _WITHOUT_COPIES.get(type(processor))
            if lighter is not None:  # the same settings (its attributes), the lighter `__call__`
                processors[index] = lighter.__new__(lighter)
                processors[index].__dict__.update(processor.__dict__)
        return processors


def _without_eos(scores: torch.Tensor, eos_token_id: torch.Tensor) -> torch.Tensor:
    """`scores` (N, V) with every EOS id at -inf: a new tensor, as transformers' processors make it."""
    vocab = torch.arange(scores.shape[-1], device=scores.device)
    return torch.where(torch.isin(vocab, eos_token_id), -math.inf, scores)


class _MinLength(MinLengthLogitsProcessor):
    """EOS forbidden while the sequence (prompt included) is shorter than `min_length`; afterwards the scores pass
    through as they are (transformers' copies them)."""

    def __call__(self, input_ids: torch.LongTensor, scores: torch.Tensor) -> torch.Tensor:
        if input_ids.shape[-1] >= self.min_length:
            return scores
        return _without_eos(scores, self.eos_token_id)


class _MinNewTokens(MinNewTokensLengthLogitsProcessor):
    """EOS forbidden until `min_new_tokens` tokens follow the prompt; afterwards the scores pass through as they
    are."""

    def __call__(self, input_ids: torch.LongTensor, scores: torch.Tensor) -> torch.Tensor:
        if input_ids.shape[-1] - self.prompt_length_to_skip >= self.min_new_tokens:
            return scores
        return _without_eos(scores, self.eos_token_id)


_WITHOUT_COPIES = {MinLengthLogitsProcessor: _MinLength, MinNewTokensLengthLogitsProcessor: _MinNewTokens}


def beam_options(num_beams: int, length_penalty: float) -> dict:
    """`generate()`'s search options: `length_penalty` only goes with a beam search. Greedy decoding (one beam) has
    no use for it, and `generate()` warns about a `length_penalty` given with one beam ("generation flags are not
    valid and may be ignored"), which a caller passing its default along would show to every greedy user."""
    return {"num_beams": num_beams, **({"length_penalty": length_penalty} if num_beams > 1 else {})}


def gnmt_length_penalty(length: torch.Tensor | float, alpha: float) -> torch.Tensor | float:
    """lp(Y) = ((5 + |Y|) / 6) ** alpha (Wu et al. 2016, Eq. 14)."""
    return ((5.0 + length) / 6.0) ** alpha


def cache_argument(past_key_values, kwargs: dict):
    """The key/value cache a forward pass was given: transformers 5.24 renamed it from `past_key_values` to `cache`
    (`generate()` passes `cache=`; 5.23 and earlier `past_key_values=`), so the model's forward passes accept both;
    `cache` is taken out of `kwargs` (it must not reach the attention functions). Given twice: a ValueError."""
    cache = kwargs.pop("cache", None)
    if cache is not None and past_key_values is not None:
        raise ValueError("The cache was given twice, as `cache` and as `past_key_values`: pass one of them.")
    return cache if cache is not None else past_key_values


# The name of the cache in transformers' model outputs: `cache` since 5.24, which still takes and reads
# `past_key_values` but warns that it is deprecated; the model writes and reads the installed version's name.
CACHE_FIELD = "cache" if "cache" in Seq2SeqLMOutput.__dataclass_fields__ else "past_key_values"


def output_cache(outputs):
    """The key/value cache a model output holds (None without one), under the installed transformers' name."""
    return getattr(outputs, CACHE_FIELD)


def generation_cache(model_kwargs: dict):
    """The cache in `generate()`'s model keyword arguments, under either of its names (see `cache_argument`)."""
    cache = model_kwargs.get("cache")
    return cache if cache is not None else model_kwargs.get("past_key_values")


def reorder_beam_cache(cache, beam_idx: torch.Tensor) -> None:
    """Beam search's reordering of a decoder's key/value cache: row i becomes row beam_idx[i], (N',).

    Every beam of a sentence attends over the same source, so a sentence's rows of the cross-attention keys and
    values are equal, and a reordering that keeps the number of rows only moves rows within their sentence: then the
    cross-attention cache is left as it is (`EncoderDecoderCache.reorder_cache` copies those equal rows onto each
    other at every step: about a ninth of a batched beam search's time at d_model 256, one CPU thread). It is
    reordered when rows are left out (N' smaller: the rows of finished sentences dropped)."""
    if not isinstance(cache, EncoderDecoderCache):
        cache.reorder_cache(beam_idx)
        return
    cache.self_attention_cache.reorder_cache(beam_idx)
    layers = [layer for layer in cache.cross_attention_cache.layers if layer.is_initialized]
    if layers and layers[0].keys.shape[0] != beam_idx.shape[0]:
        cache.cross_attention_cache.reorder_cache(beam_idx)


@torch.no_grad()
def paper_beam_search(
    model,
    input_ids: torch.LongTensor,
    logits_processor=None,
    stopping_criteria=None,
    generation_config=None,
    synced_gpus: bool = False,
    inputs_tensor: torch.Tensor | None = None,
    max_new_tokens_over_source: int = 50,
    **model_kwargs,
):
    """Beam search with the GNMT length penalty; the signature of a `generate(custom_generate=...)` callable.

    input_ids: (B * K, P) decoder prompts (the start token), expanded for K = num_beams by `generate()`;
    model_kwargs hold `encoder_outputs` and `attention_mask` (B * K, S), expanded the same way, and
    the cache (`cache`, or `past_key_values` before transformers 5.24).
    Returns (B * num_return_sequences, P + T) token ids, best first per sentence, padded with PAD.

    Each step: score the live beams' next tokens (`_next_token_log_probs`), take the 2K best extensions
    (`best_extensions`), add those that end to the finished hypotheses (`keep_finished`), continue the K best
    others (`continue_live`), and stop a sentence once nothing can improve it (`_sentences_done`); at the end,
    `best_finished` picks the output.
    """
    config = generation_config
    num_beams, alpha = config.num_beams, float(config.length_penalty)
    num_return = config.num_return_sequences or 1
    if num_return > num_beams:
        raise ValueError(f"num_return_sequences={num_return} must be at most num_beams={num_beams}.")
    device = input_ids.device
    if config.eos_token_id is None:
        raise ValueError("paper_beam_search needs generation_config.eos_token_id (an id or a list of ids).")
    eos_ids = torch.tensor(config.eos_token_id, device=device).view(-1)
    pad_id = config.pad_token_id if config.pad_token_id is not None else int(eos_ids[0])
    flat_size, prompt_len = input_ids.shape
    batch_size = flat_size // num_beams
    max_new = _output_caps(
        config, model_kwargs, inputs_tensor, batch_size, prompt_len, pad_id, max_new_tokens_over_source, device
    )  # (B,)
    max_steps = int(max_new.max())

    # Live beams: tokens (B, K, P + t), cumulative log-probabilities (B, K); only beam 0 is live at first.
    tokens = input_ids.view(batch_size, num_beams, prompt_len)
    beam_scores = torch.full((batch_size, num_beams), float("-inf"), device=device)
    beam_scores[:, 0] = 0.0
    # Finished hypotheses: the K best so far per sentence, by length-normalised score.
    finished_scores = torch.full((batch_size, num_beams), float("-inf"), device=device)
    finished_tokens = torch.full((batch_size, num_beams, prompt_len + max_steps), pad_id, dtype=torch.long,
                                 device=device)  # fmt: skip
    done = torch.zeros(batch_size, dtype=torch.bool, device=device)
    cache = generation_cache(model_kwargs)
    use_cache = model_kwargs.get("use_cache", True) and cache is not None
    batch_offsets = torch.arange(batch_size, device=device)[:, None] * num_beams  # (B, 1)

    for step in range(max_steps):
        length = step + 1  # generated tokens after this step, EOS included
        at_cap = length >= max_new  # (B,): only EOS may follow
        log_probs = _next_token_log_probs(
            model, tokens, model_kwargs, cache if use_cache else None, logits_processor, at_cap, eos_ids
        )  # (B, K, V)
        top_scores, top_beam, top_token, ends = best_extensions(beam_scores, log_probs, eos_ids)
        penalty = gnmt_length_penalty(length, alpha)  # lp(Y) of the hypotheses that end here
        ending = ends & ~done[:, None]  # (B, 2K): a sentence that is done takes no more hypotheses
        finished_scores, finished_tokens = keep_finished(
            finished_scores, finished_tokens, tokens, top_scores, top_beam, top_token, ending, penalty, pad_id
        )
        tokens, beam_scores, origin = continue_live(tokens, top_scores, top_beam, top_token, ends)
        if use_cache:
            reorder_beam_cache(cache, (origin + batch_offsets).view(-1))
        done = _sentences_done(done, at_cap, beam_scores, finished_scores, max_new, alpha)
        if bool(done.all()):
            break

    sequences, scores = best_finished(finished_tokens, finished_scores, num_return, prompt_len, pad_id)
    if config.return_dict_in_generate:
        return GenerateBeamEncoderDecoderOutput(sequences=sequences, sequences_scores=scores)
    return sequences


def _output_caps(
    config,
    model_kwargs: dict,
    inputs_tensor: torch.Tensor | None,
    batch_size: int,
    prompt_len: int,
    pad_id: int,
    max_new_tokens_over_source: int,
    device: torch.device,
) -> torch.Tensor:
    """Per-sentence caps on the generated tokens, (B,): the source length (its non-PAD tokens) +
    `max_new_tokens_over_source` (Section 6.1: input length + 50), within `generation_config.max_length`, at least 1.
    The source length comes from the attention mask, else from the source ids, else from the encoder output."""
    attention_mask = model_kwargs.get("attention_mask")
    if attention_mask is not None:
        # (B * K, S): the K copies of a sentence have the same mask
        source_lengths = attention_mask.view(batch_size, -1, attention_mask.shape[-1])[:, 0].sum(-1)  # (B,)
    elif inputs_tensor is not None:
        source_lengths = (inputs_tensor != pad_id).sum(-1)
    else:
        source_lengths = torch.full((batch_size,), model_kwargs["encoder_outputs"][0].shape[1], device=device)
    max_new = torch.clamp(source_lengths + max_new_tokens_over_source, max=config.max_length - prompt_len)
    return max_new.clamp(min=1).to(device)  # (B,)


def _next_token_log_probs(
    model,
    tokens: torch.Tensor,
    model_kwargs: dict,
    cache,
    logits_processor,
    at_cap: torch.Tensor,
    eos_ids: torch.Tensor,
) -> torch.Tensor:
    """Scoring a step: log P(next token | source, beam) for every live beam, (B, K, V), from one decoder forward
    (only the last token with a `cache`), through the logits processors; a sentence at its cap (`at_cap`, (B,))
    may only end, every token but EOS gets -inf."""
    batch_size, num_beams = tokens.shape[:2]
    flat_tokens = tokens.reshape(batch_size * num_beams, -1)  # (B*K, P + t)
    outputs = model(
        encoder_outputs=model_kwargs["encoder_outputs"],
        attention_mask=model_kwargs.get("attention_mask"),
        decoder_input_ids=flat_tokens[:, -1:] if cache is not None else flat_tokens,
        past_key_values=cache,
        use_cache=cache is not None,
        return_dict=True,
    )
    log_probs = torch.log_softmax(outputs.logits[:, -1].float(), dim=-1)  # (B*K, V)
    if logits_processor is not None:
        log_probs = logits_processor(flat_tokens, log_probs)
    log_probs = log_probs.view(batch_size, num_beams, log_probs.shape[-1])  # (B, K, V)
    if at_cap.any():
        only_eos = torch.full_like(log_probs[0, 0], float("-inf"))
        only_eos[eos_ids] = 0.0
        log_probs = torch.where(at_cap[:, None, None], log_probs + only_eos, log_probs)
    return log_probs


def best_extensions(
    beam_scores: torch.Tensor, log_probs: torch.Tensor, eos_ids: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Expanding the beams: the 2K best one-token extensions of the K live beams of each sentence (enough to keep K
    live ones whatever ends in EOS). beam_scores (B, K), log_probs (B, K, V) -> their cumulative log-probabilities,
    the beams they extend, their tokens and whether they end (a finite EOS extension), each (B, 2K)."""
    batch_size, num_beams, vocab_size = log_probs.shape
    candidates = (beam_scores[:, :, None] + log_probs).view(batch_size, -1)  # (B, K*V)
    top_scores, top_index = candidates.topk(2 * num_beams, dim=-1)  # (B, 2K)
    top_beam, top_token = top_index // vocab_size, top_index % vocab_size
    ends = torch.isin(top_token, eos_ids) & torch.isfinite(top_scores)
    return top_scores, top_beam, top_token, ends


def keep_finished(
    finished_scores: torch.Tensor,
    finished_tokens: torch.Tensor,
    tokens: torch.Tensor,
    top_scores: torch.Tensor,
    top_beam: torch.Tensor,
    top_token: torch.Tensor,
    ends: torch.Tensor,
    length_penalty: float,
    pad_id: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The finished-hypothesis bookkeeping: the extensions that end here (`ends`, (B, 2K), false for sentences
    already done) join the finished hypotheses scored log P(Y) / lp(Y), and the K best of old and new are kept.
    finished_scores (B, K) and finished_tokens (B, K, P + max_steps) -> the same, updated; tokens (B, K, P + t)."""
    batch_size, num_beams, width = tokens.shape
    new_finished = torch.where(ends, top_scores / length_penalty, -torch.inf)  # (B, 2K)
    new_tokens = torch.full((batch_size, 2 * num_beams, finished_tokens.shape[-1]), pad_id, dtype=torch.long,
                            device=tokens.device)  # fmt: skip
    new_tokens[:, :, :width] = tokens.gather(1, top_beam[:, :, None].expand(-1, -1, width))
    new_tokens[:, :, width] = top_token
    merged_scores = torch.cat([finished_scores, new_finished], dim=1)  # (B, 3K)
    keep = merged_scores.topk(num_beams, dim=-1).indices  # (B, K)
    merged_tokens = torch.cat([finished_tokens, new_tokens], dim=1)  # (B, 3K, P + max_steps)
    finished_tokens = merged_tokens.gather(1, keep[:, :, None].expand(-1, -1, merged_tokens.shape[-1]))
    return merged_scores.gather(1, keep), finished_tokens


def continue_live(
    tokens: torch.Tensor, top_scores: torch.Tensor, top_beam: torch.Tensor, top_token: torch.Tensor, ends: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The K best extensions that do not end continue as live beams: tokens (B, K, P + t) -> (B, K, P + t + 1), their
    scores (B, K), and the beam each one extends (B, K), by which the caller reorders the key/value cache."""
    num_beams = tokens.shape[1]
    live_scores = torch.where(ends, -torch.inf, top_scores)
    live_scores, live = live_scores.topk(num_beams, dim=-1)  # (B, K)
    origin = top_beam.gather(1, live)
    tokens = torch.cat(
        [
            tokens.gather(1, origin[:, :, None].expand(-1, -1, tokens.shape[-1])),
            top_token.gather(1, live)[:, :, None],
        ],
        dim=-1,
    )
    return tokens, live_scores, origin


def _sentences_done(
    done: torch.Tensor,
    at_cap: torch.Tensor,
    beam_scores: torch.Tensor,
    finished_scores: torch.Tensor,
    max_new: torch.Tensor,
    alpha: float,
) -> torch.Tensor:
    """tensor2tensor's stopping rule, (B,): a sentence is done when K hypotheses are finished and the best live beam,
    even at the longest allowed length, cannot beat the worst of them (exact for alpha >= 0), when no live beam is
    left, or at its cap."""
    best_possible = beam_scores[:, 0] / gnmt_length_penalty(max_new.float(), alpha)
    worst_kept = finished_scores[:, -1]
    can_improve = (best_possible > worst_kept) | (alpha < 0)
    return done | at_cap | (torch.isfinite(worst_kept) & ~can_improve) | ~torch.isfinite(beam_scores[:, 0])


def best_finished(
    finished_tokens: torch.Tensor, finished_scores: torch.Tensor, num_return: int, prompt_len: int, pad_id: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """The final pick: the best `num_return` finished hypotheses per sentence, best first, trimmed to the longest one:
    sequences (B * num_return, P + T) and their scores (B * num_return,)."""
    batch_size = finished_tokens.shape[0]
    sequences = finished_tokens[:, :num_return].reshape(batch_size * num_return, -1)
    scores = finished_scores[:, :num_return].reshape(-1)
    last = int((sequences != pad_id).long().cumsum(-1).argmax(-1).max()) + 1 if sequences.numel() else 0
    return sequences[:, : max(last, prompt_len + 1)], scores


__all__ = ["gnmt_length_penalty", "paper_beam_search"]
