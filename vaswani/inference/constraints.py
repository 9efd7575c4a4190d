"""Lexically constrained decoding: every given target phrase appears in the output (terminology, glossaries).

    output_ids = constrained_beam_search(step, caps, constraints, num_beams=4, ...)   # constraints: token ids

The algorithm is Post & Vilar 2018, "Fast Lexically Constrained Decoding with Dynamic Beam Allocation" (DBA, as in
Sockeye 1-2 and, with Hu et al. 2019's vectorised bookkeeping, fairseq's `--constraints`):

- a hypothesis carries a `ConstraintState`: which phrases it has produced, and the phrase it is in the middle of
  (a phrase must appear as a contiguous run of its tokens; a hypothesis that leaves a phrase half-way "unwinds":
  that phrase's tokens no longer count);
- each step's candidates are the K best one-token extensions of the beam, every live beam's own best extension, and
  for every beam each token that advances a constraint (the next token of the phrase it is in, or the first token of
  any phrase it has not produced);
- the K live beams are chosen by **dynamic beam allocation**: candidates are grouped into banks by how many
  constraint tokens they have produced, and banks take turns (most constraint tokens first), each giving its next
  best candidate, until K are chosen: hypotheses that meet constraints early compete with each other, not with
  unconstrained ones that score higher for now;
- EOS ends a hypothesis only once all its constraints are met (and, as in beam search, when it is among the
  candidates); at a sentence's cap only EOS may follow, so a
  sentence whose constraints do not fit still gets a translation (ranked after those that meet all constraints; the
  caller warns).

Phrases are tokenized on their own, as a word of running text ("Katze" -> "▁Katze", the tokenizer's word start),
so a phrase is produced as it would be inside a sentence; a phrase that the model spells with another split of the
same text is not recognised (the caller checks the detokenized text and warns). Finished hypotheses are ranked as in
`vaswani.inference.search` (sum of log-probabilities / lp(|Y|)).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from vaswani.inference.search import EnsembleStep, PrefixForcing, judged_length, length_penalty_function


@dataclass(frozen=True)
class ConstraintState:
    """Where a hypothesis stands with its sentence's phrases (tuples of token ids): `met[j]` when phrase j was
    produced, and `(j, p)` = `progress` while it is p tokens into phrase j (None between phrases)."""

    phrases: tuple[tuple[int, ...], ...]
    met: tuple[bool, ...]
    progress: tuple[int, int] | None = None

    @classmethod
    def start(cls, phrases: list[list[int]]) -> ConstraintState:
        return cls(tuple(map(tuple, phrases)), (False,) * len(phrases))

    @property
    def met_tokens(self) -> int:
        """Constraint tokens produced so far (the bank of dynamic beam allocation)."""
        done = sum(len(phrase) for phrase, met in zip(self.phrases, self.met, strict=True) if met)
        return done + (self.progress[1] if self.progress else 0)

    @property
    def all_met(self) -> bool:
        return all(self.met)

    def wanted(self) -> set[int]:
        """The tokens that advance a constraint: the next one of the current phrase, else every unmet first one."""
        if self.progress is not None:
            j, p = self.progress
            return {self.phrases[j][p]}
        return {phrase[0] for phrase, met in zip(self.phrases, self.met, strict=True) if not met}

    def advance(self, token: int) -> ConstraintState:
        """The state after `token`: one token further into the current phrase, or the phrase left ("unwound") and
        maybe another (or the same) one started."""
        if self.progress is not None:
            j, p = self.progress
            if self.phrases[j][p] == token:
                return self._moved(j, p + 1)
        for j, (phrase, met) in enumerate(zip(self.phrases, self.met, strict=True)):
            if not met and phrase[0] == token:
                return self._moved(j, 1)
        return ConstraintState(self.phrases, self.met) if self.progress is not None else self

    def _moved(self, j: int, p: int) -> ConstraintState:
        if p == len(self.phrases[j]):  # phrase j is complete
            met = tuple(m or i == j for i, m in enumerate(self.met))
            return ConstraintState(self.phrases, met)
        return ConstraintState(self.phrases, self.met, (j, p))


def allocate(candidates: list[tuple[float, int, int, ConstraintState]], num_beams: int) -> list:
    """Dynamic beam allocation: `num_beams` of the (score, beam, token, state) candidates, banks (by constraint tokens
    produced) taking turns from the fullest bank down, each giving its best remaining candidate."""
    banks: dict[int, list] = {}
    for candidate in sorted(candidates, key=lambda c: -c[0]):
        banks.setdefault(candidate[3].met_tokens, []).append(candidate)
    order = [banks[key] for key in sorted(banks, reverse=True)]
    chosen: list = []
    turn = 0
    while len(chosen) < num_beams and any(turn < len(bank) for bank in order):
        chosen += [bank[turn] for bank in order if turn < len(bank)][: num_beams - len(chosen)]
        turn += 1
    return chosen


@torch.no_grad()
def constrained_beam_search(
    step: EnsembleStep,
    caps: torch.Tensor,
    constraints: list[list[list[int]]],
    *,
    num_beams: int,
    length_penalty: float,
    paper_decoding: bool,
    num_return: int,
    start_id: int,
    eos_id: int,
    pad_id: int,
    min_new_tokens: int = 1,
    suppress_ids: list[int] | tuple = (),
    prefix: PrefixForcing | None = None,
    early_stopping: bool | str = "never",
) -> torch.Tensor:
    """Beam search with each sentence's `constraints` (phrases as token ids; [] for none), capped at caps[b] output
    tokens (EOS included), starting with the `prefix` of `vaswani.inference.search` where given (a phrase the
    prefix holds counts as met), stopping as `early_stopping` says (`vaswani.inference.search`; the K finished
    hypotheses must meet every constraint). Returns (B * num_return, 1 + T) token ids, best first per sentence, like
    `beam_search`."""
    batch_size, device = caps.shape[0], caps.device
    penalty = length_penalty_function(length_penalty, paper_decoding)
    caps_list = caps.tolist()
    beams = [[([start_id], 0.0, ConstraintState.start(phrases))] for phrases in constraints]  # live, per sentence
    finished: list[list[tuple]] = [[] for _ in range(batch_size)]  # (rank key, tokens) per sentence
    done = [False] * batch_size
    active = list(range(batch_size))  # the sentences still searched: the step computes K rows for each, no more
    for index in range(max(caps_list)):
        length = index + 1
        count = len(active)
        # every sentence keeps K rows (padding rows repeat its first beam and are never chosen)
        rows = [[beams[b][min(k, len(beams[b]) - 1)] for k in range(num_beams)] for b in active]
        last = torch.tensor([[row[0][-1]] for sentence in rows for row in sentence], device=device)
        log_probs = step(last).view(count, num_beams, -1)
        if len(suppress_ids):
            log_probs[..., list(suppress_ids)] = float("-inf")
        if length <= min_new_tokens:
            log_probs[..., eos_id] = float("-inf")
        if prefix is not None:
            log_probs = prefix.mask(index, log_probs)
        # (A, K, V); the padding rows of a sentence with fewer than K live beams get -inf
        live = torch.tensor([[row[1] if k < len(beams[b]) else float("-inf") for k, row in enumerate(sentence)]
                             for b, sentence in zip(active, rows, strict=True)], device=device)  # fmt: skip
        totals = log_probs + live[:, :, None]
        top_scores, top_index = totals.view(count, -1).topk(num_beams, dim=-1)  # (A, K)
        best_scores, best_token = totals.max(dim=-1)  # (A, K)
        wanted = [
            (i, k, w) for i, b in enumerate(active) for k in range(len(beams[b])) for w in rows[i][k][2].wanted()
        ]
        wanted_scores = (
            totals[[w[0] for w in wanted], [w[1] for w in wanted], [w[2] for w in wanted]].tolist() if wanted else []
        )
        eos_scores = totals[:, :, eos_id].tolist()
        vocab = totals.shape[-1]
        candidates: list[dict] = [{} for _ in range(count)]
        for i in range(count):
            for score, flat in zip(top_scores[i].tolist(), top_index[i].tolist(), strict=True):
                candidates[i][(flat // vocab, flat % vocab)] = score
            for k, (score, token) in enumerate(zip(best_scores[i].tolist(), best_token[i].tolist(), strict=True)):
                candidates[i][(k, token)] = score
        for (i, k, w), score in zip(wanted, wanted_scores, strict=True):
            candidates[i][(k, w)] = score
        origin, chosen_tokens = [], []
        judged_penalty = penalty(judged_length(length, caps, early_stopping)).tolist()  # (B,)
        for i, b in enumerate(active):
            at_cap = length >= caps_list[b]
            choice = _step_sentence(
                beams[b], candidates[i], eos_scores[i], finished[b], at_cap, eos_id, penalty(length), num_beams
            )  # fmt: skip
            beams[b] = [(beams[b][k][0] + [w], score, state) for score, k, w, state in choice] or beams[b][:1]
            origin.append([k for _, k, _, _ in choice] + [0] * (num_beams - len(choice)))
            chosen_tokens.append([w for _, _, w, _ in choice] + [pad_id] * (num_beams - len(choice)))
            best_live = max((c[0] for c in choice), default=float("-inf"))
            done[b] = not choice or at_cap or _cannot_improve(finished[b], best_live, judged_penalty[b], num_beams,
                                                              length_penalty, early_stopping)  # fmt: skip
        if prefix is not None:
            prefix.advance(index, torch.tensor(origin), torch.tensor(chosen_tokens))
        kept = [i for i, b in enumerate(active) if not done[b]]  # positions of the sentences searched on
        if not kept:
            break
        step.reorder(torch.tensor([i * num_beams + k for i in kept for k in origin[i]], device=device))
        if len(kept) < count:
            active = [active[i] for i in kept]
            if prefix is not None:
                prefix.keep(kept)
    return _output(finished, num_return, start_id, pad_id, device)


def _step_sentence(beams, candidates, eos_scores, finished, at_cap, eos_id, penalty, num_beams) -> list:
    """One sentence's step: the EOS candidates of live beams that have met all their constraints join `finished`
    (as in beam search, EOS must be among the candidates: the K best extensions or its beam's best); at the cap every
    live beam ends there. The next live beams are chosen from the other candidates by `allocate`. Returns (score,
    beam, token, state) tuples."""
    ending = range(len(beams)) if at_cap else [k for (k, w) in candidates if w == eos_id and k < len(beams)]
    for k in ending:
        tokens, _, state = beams[k]
        score = eos_scores[k]
        if score != float("-inf") and (state.all_met or at_cap):
            finished.append(((state.all_met, score / penalty), [*tokens, eos_id]))
    finished.sort(key=lambda entry: entry[0], reverse=True)
    del finished[num_beams:]
    if at_cap:
        return []
    scored = [(score, k, w, beams[k][2].advance(w)) for (k, w), score in candidates.items()
              if k < len(beams) and w != eos_id and score != float("-inf")]  # fmt: skip
    return allocate(scored, num_beams)


def _cannot_improve(finished, best_live: float, judged_penalty: float, num_beams: int, alpha: float,
                    early_stopping: bool | str) -> bool:  # fmt: skip
    """No live beam can beat the worst of `num_beams` finished hypotheses that meet their constraints, judged with
    the length penalty at the length `judged_length` gives (alpha >= 0; early_stopping=True: K such are enough)."""
    if best_live == float("-inf"):
        return True
    if len(finished) < num_beams or not finished[-1][0][0]:
        return False
    if early_stopping is True:
        return True
    return alpha >= 0 and best_live / judged_penalty <= finished[-1][0][1]


def _output(finished, num_return, start_id, pad_id, device) -> torch.Tensor:
    """The best `num_return` finished hypotheses of each sentence as (B * num_return, 1 + T), padded with PAD."""
    rows = []
    for hypotheses in finished:
        kept = [tokens for _, tokens in hypotheses[:num_return]]
        rows += kept + [[start_id, pad_id]] * (num_return - len(kept))
    width = max(len(row) for row in rows)
    return torch.tensor([row + [pad_id] * (width - len(row)) for row in rows], device=device)


__all__ = ["ConstraintState", "allocate", "constrained_beam_search"]
