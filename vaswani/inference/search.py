"""Beam search over a step function, for the decoding `generate()` cannot do: forced target prefixes and ensembles.

    step = EnsembleStep([model_a, model_b], input_ids, attention_mask, num_beams)    # one model is an ensemble of 1
    output_ids = beam_search(step, caps, num_beams=4, length_penalty=0.6, ..., prefix=PrefixForcing(...))

The search is the paper's beam search of `modeling_vaswani.generation_vaswani` (its helpers pick the 2K best
extensions, keep the K best finished hypotheses and continue the K best live ones), with two things plugged in:

- the **step** gives log P(next token | source, beam) for every live beam, (B * K, V): one model's decoder through
  its key/value cache, or for an ensemble the mean of the members' log-probabilities (Marian's and OpenNMT's
  ensembles: an average of log-probabilities; fairseq averages probabilities);
- **prefix forcing** (`PrefixForcing`) masks each step's log-probabilities so that a sentence's output starts with its
  prefix: the prefix's complete subwords are forced one per step, then its last word (the subwords from the last
  word start "▁" on) is "healed": the next tokens may be any subwords whose text continues that word's text (or
  completes it and goes on), so that a prefix ending inside a word ("die Kat") continues as the model would
  tokenize the whole word ("▁Katze") rather than with the prefix's split ("▁", "Kat"). The forced tokens keep their
  real log-probabilities, so a hypothesis' score is that of its whole output, prefix included.

Finished hypotheses are ranked by sum of log-probabilities / lp(|Y|), with lp(|Y|) = |Y| ** alpha (transformers) or
the GNMT ((5 + |Y|) / 6) ** alpha (`paper_decoding`); |Y| counts EOS. At its cap only EOS may follow. Which EOS
extensions become finished hypotheses is again the rule of the search stood in for: with `paper_decoding` every one
of the 2K best extensions (tensor2tensor's `grow_finished`, as `paper_beam_search`), else only those ranked among the
K best (transformers' `_beam_search`: its `top_num_beam_mask`), so that one beam is exactly greedy decoding, as
`generate(num_beams=1)` is: an EOS that is not the best token is never kept as a shorter output. A sentence with
K finished hypotheses stops as the search it stands in for would (`early_stopping`, `could_still_win`): "never"
(the default here, and what `paper_decoding`'s search does) when no live beam can beat the worst of them even at
the cap (exact for alpha >= 0); False (`generate()`'s default, the model's generation_config) when the best live
beam cannot beat it at its current length (transformers' heuristic: far fewer steps); True at once.
Unconstrained single-model decoding does not come here: it stays on `generate()`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from transformers.modeling_outputs import BaseModelOutput

from modeling_vaswani.generation_vaswani import (
    best_extensions,
    best_finished,
    continue_live,
    gnmt_length_penalty,
    keep_finished,
    output_cache,
    reorder_beam_cache,
)

WORD_START = "\u2581"  # "▁": the tokenizer's word-boundary mark


class EnsembleStep:
    """The next-token log-probabilities of one or more models (their mean), each model running its encoder once and
    its decoder incrementally through its own key/value cache.

    input_ids, attention_mask (B, S): the sources; every sentence gets `num_beams` rows, sentence-major (B * K)."""

    def __init__(self, models: Sequence, input_ids: torch.Tensor, attention_mask: torch.Tensor, num_beams: int):
        expand = torch.arange(input_ids.shape[0], device=input_ids.device).repeat_interleave(num_beams)
        self.models = list(models)
        self.attention_mask = attention_mask[expand]  # (B * K, S)
        self.encoder_outputs = []
        for model in self.models:
            hidden = model.get_encoder()(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
            self.encoder_outputs.append(BaseModelOutput(last_hidden_state=hidden[expand]))  # (B * K, S, d)
        self.caches: list = [None] * len(self.models)

    def __call__(self, last_tokens: torch.Tensor) -> torch.Tensor:
        """last_tokens (B * K, 1): each beam's newest token -> log-probabilities of the next one, (B * K, V)."""
        total = None
        for i, model in enumerate(self.models):
            outputs = model(
                encoder_outputs=self.encoder_outputs[i], attention_mask=self.attention_mask,
                decoder_input_ids=last_tokens, past_key_values=self.caches[i], use_cache=True,
            )  # fmt: skip
            self.caches[i] = output_cache(outputs)
            log_probs = torch.log_softmax(outputs.logits[:, -1].float(), dim=-1)  # (B * K, V)
            total = log_probs if total is None else total + log_probs
        return total / len(self.models)

    def reorder(self, beams: torch.Tensor) -> None:
        """Row i of every cache becomes row beams[i], (B' * K,): the beams that survived the step. With fewer rows
        than now (B' < B: the rows of finished sentences left out), the sources' rows shrink with them, and every
        later step computes only the sentences still searched."""
        for cache in self.caches:
            reorder_beam_cache(cache, beams)  # the cross-attention rows only where rows are left out
        if beams.shape[0] != self.attention_mask.shape[0]:  # a row keeps its sentence: its source row goes with it
            self.attention_mask = self.attention_mask[beams]
            self.encoder_outputs = [BaseModelOutput(last_hidden_state=output.last_hidden_state[beams])
                                    for output in self.encoder_outputs]  # fmt: skip


class PrefixForcing:
    """Each sentence's output starts with its prefix: `forced` token ids (one list per sentence, forced one per step)
    then the subword text `partial` (a word start, e.g. "▁Kat", healed as the module docstring says; "" for none).
    `pieces` are the tokenizer's subword strings by id; `special_ids` never continue a partial word."""

    def __init__(self, forced: list[list[int]], partial: list[str], pieces: list[str], special_ids: set[int],
                 num_beams: int, device):  # fmt: skip
        self.lengths = [len(ids) for ids in forced]
        width = max(self.lengths, default=0)
        self.forced = torch.full((len(forced), max(width, 1)), -1, dtype=torch.long, device=device)  # (B, L)
        for row, ids in enumerate(forced):
            self.forced[row, : len(ids)] = torch.tensor(ids, dtype=torch.long)
        self.remaining = [[text] * num_beams for text in partial]  # the partial word still to produce, per beam
        self.pieces, self.special_ids, self.device = pieces, special_ids, device
        self._allowed: dict[str, torch.Tensor] = {}

    def allowed(self, text: str) -> torch.Tensor:
        """The ids of the subwords that continue `text` (a prefix of it, or `text` followed by more), (N,)."""
        if text not in self._allowed:
            ids = [i for i, piece in enumerate(self.pieces) if piece and i not in self.special_ids
                   and (text.startswith(piece) or piece.startswith(text))]  # fmt: skip
            self._allowed[text] = torch.tensor(ids, dtype=torch.long, device=self.device)
        return self._allowed[text]

    def mask(self, step: int, log_probs: torch.Tensor) -> torch.Tensor:
        """log_probs (B, K, V) of step `step` (0-based) with -inf for every token the prefixes rule out."""
        if step < self.forced.shape[1]:
            token = self.forced[:, step]  # (B,), -1 where the sentence's forced tokens are over
            keep = torch.nn.functional.one_hot(token.clamp(min=0), log_probs.shape[-1]).bool()  # (B, V)
            ruled_out = (token >= 0)[:, None] & ~keep  # (B, V)
            log_probs = log_probs.masked_fill(ruled_out[:, None, :], float("-inf"))
        for row, beams in enumerate(self.remaining):
            if step < self.lengths[row]:
                continue
            for beam, text in enumerate(beams):
                if text:
                    allowed = torch.full_like(log_probs[row, beam], float("-inf"))
                    ids = self.allowed(text)
                    allowed[ids] = 0.0
                    log_probs[row, beam] += allowed
        return log_probs

    def advance(self, step: int, origin: torch.Tensor, chosen: torch.Tensor) -> None:
        """After step `step`: beam k of sentence b continues beam origin[b, k] with token chosen[b, k], (B, K)."""
        origin, chosen = origin.tolist(), chosen.tolist()
        for row, beams in enumerate(self.remaining):
            if not any(beams):
                continue
            updated = []
            for source, token in zip(origin[row], chosen[row], strict=True):
                text = beams[source]
                if text and step >= self.lengths[row]:
                    piece = self.pieces[token]
                    text = text[len(piece) :] if text.startswith(piece) else ""
                updated.append(text)
            self.remaining[row] = updated

    def keep(self, sentences: list[int]) -> None:
        """Only these sentences (their positions, ascending) are searched from now on."""
        self.forced = self.forced[sentences]
        self.lengths = [self.lengths[row] for row in sentences]
        self.remaining = [self.remaining[row] for row in sentences]

    def min_lengths(self) -> list[int]:
        """The fewest output tokens each prefix needs before EOS (its forced tokens + 1 for a partial word)."""
        return [length + (1 if beams[0] else 0) for length, beams in zip(self.lengths, self.remaining, strict=True)]


def judged_length(length: int, caps: torch.Tensor, early_stopping: bool | str) -> torch.Tensor:
    """The length at which a sentence's best live beam is judged against its worst finished hypothesis, (B,) floats:
    its cap with early_stopping "never" (the best it could reach, exact for alpha >= 0), else its current length
    (transformers' heuristic for early_stopping=False; with True nothing is judged: K finished stop a sentence)."""
    return caps.float() if early_stopping == "never" else torch.full_like(caps, length, dtype=torch.float)


def length_penalty_function(alpha: float, paper_decoding: bool) -> Callable:
    """lp(|Y|): GNMT's ((5 + |Y|) / 6) ** alpha with `paper_decoding`, else transformers' |Y| ** alpha."""
    if paper_decoding:
        return lambda length: gnmt_length_penalty(length, alpha)
    return lambda length: length**alpha


@torch.no_grad()
def beam_search(
    step: EnsembleStep,
    caps: torch.Tensor,
    *,
    num_beams: int,
    length_penalty: float,
    paper_decoding: bool,
    num_return: int,
    start_id: int,
    eos_id: int,
    pad_id: int,
    min_new_tokens: int = 1,
    suppress_ids: Sequence[int] = (),
    prefix: PrefixForcing | None = None,
    early_stopping: bool | str = "never",
) -> torch.Tensor:
    """Beam search of B sentences, each capped at caps[b] output tokens (EOS included), (B,), stopping as
    `early_stopping` says (module docstring). Returns (B * num_return, 1 + T) token ids (the start token, the output,
    PAD), best first per sentence."""
    device = caps.device
    batch_size = caps.shape[0]
    penalty = length_penalty_function(length_penalty, paper_decoding)
    eos_ids = torch.tensor([eos_id], device=device)
    tokens = torch.full((batch_size, num_beams, 1), start_id, dtype=torch.long, device=device)  # (B, K, 1 + t)
    beam_scores = torch.full((batch_size, num_beams), float("-inf"), device=device)  # (B, K)
    beam_scores[:, 0] = 0.0  # only beam 0 is live at first
    max_steps = int(caps.max())
    finished_scores = torch.full((batch_size, num_beams), float("-inf"), device=device)
    finished_tokens = torch.full((batch_size, num_beams, 1 + max_steps), pad_id, dtype=torch.long, device=device)
    done = torch.zeros(batch_size, dtype=torch.bool, device=device)
    offsets = torch.arange(batch_size, device=device)[:, None] * num_beams  # (B, 1)
    suppress = torch.tensor(list(suppress_ids), dtype=torch.long, device=device)
    # (2K,): the ranks among the 2K best extensions whose EOS may finish a hypothesis (module docstring)
    may_finish = torch.arange(2 * num_beams, device=device) < (2 * num_beams if paper_decoding else num_beams)
    for index in range(max_steps):
        length = index + 1  # output tokens after this step, EOS included
        log_probs = step(tokens.view(batch_size * num_beams, -1)[:, -1:]).view(batch_size, num_beams, -1)
        if suppress.numel():
            log_probs[..., suppress] = float("-inf")
        if length <= min_new_tokens:
            log_probs[..., eos_id] = float("-inf")
        if prefix is not None:
            log_probs = prefix.mask(index, log_probs)
        at_cap = length >= caps  # (B,): only EOS may follow
        if bool(at_cap.any()):
            only_eos = torch.full_like(log_probs[0, 0], float("-inf"))
            only_eos[eos_id] = 0.0
            log_probs = torch.where(at_cap[:, None, None], log_probs + only_eos, log_probs)
        top_scores, top_beam, top_token, ends = best_extensions(beam_scores, log_probs, eos_ids)  # (B, 2K)
        finished_scores, finished_tokens = keep_finished(
            finished_scores, finished_tokens, tokens, top_scores, top_beam, top_token,
            ends & may_finish & ~done[:, None], penalty(length), pad_id,
        )  # fmt: skip
        tokens, beam_scores, origin = continue_live(tokens, top_scores, top_beam, top_token, ends)
        step.reorder((origin + offsets).view(-1))
        if prefix is not None:
            prefix.advance(index, origin, tokens[:, :, -1])
        # done: K finished and no live beam can beat the worst of them (judged at the cap or now), or at the cap
        best_possible = beam_scores[:, 0] / penalty(judged_length(length, caps, early_stopping))
        worst_kept = finished_scores[:, -1]
        can_improve = ((best_possible > worst_kept) | (length_penalty < 0)) & (early_stopping is not True)
        done |= at_cap | (torch.isfinite(worst_kept) & ~can_improve) | ~torch.isfinite(beam_scores[:, 0])
        if bool(done.all()):
            break
    sequences, _ = best_finished(finished_tokens, finished_scores, num_return, 1, pad_id)
    return sequences


def split_prefix(ids: list[int], pieces: list[str]) -> tuple[list[int], str]:
    """A prefix's token ids (no special tokens) as (forced ids, partial word): its subwords up to the start of its
    last word, and the subword text of that last word ("▁Kat" for "die Kat"; "▁" for a prefix ending in a space),
    healed by `PrefixForcing`. `pieces` are the subword strings by id. A prefix without a word start is forced
    whole."""
    starts = [i for i, token in enumerate(ids) if pieces[token].startswith(WORD_START)]
    if not starts:
        return list(ids), ""
    return list(ids[: starts[-1]]), "".join(pieces[token] for token in ids[starts[-1] :])


__all__ = ["EnsembleStep", "PrefixForcing", "beam_search", "judged_length", "length_penalty_function", "split_prefix"]
