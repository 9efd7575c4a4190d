"""The two decoding engines behind `vaswani translate`: PyTorch (`generate()`) and CTranslate2, with one interface.

    engine.generate(sources, num_beams=4, length_penalty=0.6, max_new_tokens=None, paper_decoding=False,
                    num_hypotheses=1, return_scores=False, return_attention=False, prefixes=None,
                    constraints=None, sampling=None) -> list[list[Hypothesis]]
    engine.score(sources, targets) -> list[list[float]]      # teacher-forced log-probability of each target token

PyTorch decodes with `generate()`, except for target prefixes, constraints and ensembles (several models, their
log-probabilities averaged), which run our own beam search (`vaswani.inference.search`, `.constraints`).
CTranslate2 forces prefixes with its `target_prefix` and scores with `score_batch`; it refuses constraints.

`sampling` (a `Sampling`) draws each token at random from the model's distribution instead of searching: transformers'
`generate(do_sample=True)` on PyTorch, CTranslate2's random sampler (`sampling_topk`, `sampling_topp`,
`sampling_temperature`); one model, one beam, no prefix or constraint (the `Translator` checks). Its
`num_hypotheses` are independent samples.

`sources` are token-id lists that end with EOS (as the tokenizer makes them); each sentence gets `num_hypotheses`
hypotheses, best first. What a hypothesis holds:

- `ids`: the output tokens, without the decoder start token, EOS and padding.
- `score`: the score beam search ranks by: the sum of the token log-probabilities (EOS included) divided by
  `length ** length_penalty`, length counting EOS (what transformers' `sequences_scores` and CTranslate2's
  `return_scores` give, also for greedy search here); with `paper_decoding` on PyTorch, divided by GNMT's
  `((5 + length) / 6) ** length_penalty` instead.
- `attention`: one row per output token (EOS excluded) over the source tokens (EOS included): the encoder-decoder
  attention of the LAST decoder layer, averaged over its heads, at the step that produced the token (fairseq's
  `--print-alignment` and CTranslate2's `return_attention` with `alignment_heads` = all heads). PyTorch gets it from
  one teacher-forced pass over the chosen hypotheses (eager attention), which gives the same probabilities as the
  incremental decoding that produced them; CTranslate2 from its greedy search, or after a beam search from one
  greedy pass forced along the hypotheses (`target_prefix`).

Data types (`dtype`): "float32"; "bfloat16" and "float16" run PyTorch under `torch.autocast` (matrix products in the
low precision, norms and softmax in float32) and CTranslate2 with that compute type. A dtype the device cannot run
natively is refused with `TranslateError` (on CPU, bfloat16 needs AVX512-BF16 or AMX, float16 needs AMX-FP16;
CTranslate2 reports its own list). Paper decoding on CTranslate2: CTranslate2 ranks by `length ** alpha` (it has no
GNMT penalty) and caps a batch at its longest source + 50 rather than each sentence at its own; we log that once.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

from vaswani.constants import EXPORT_INFO_FILE
from vaswani.devices import (
    check_dtype,
    cpu_threads,
    ctranslate2_int8_compute_type,
    ctranslate2_int8_saturates,
    default_batch_tokens,
    disable_cudnn_attention,
    refuse_dtype,
    torch_dtype_supported,
)
from vaswani.errors import ExportError, TranslateError
from vaswani.export.ctranslate2 import import_ctranslate2

logger = logging.getLogger(__name__)

BACKENDS = ("auto", "torch", "ctranslate2")
CT2_NO_CONSTRAINTS = (
    "CTranslate2 has no lexically constrained decoding, and a constraint is never ignored: translate with the PyTorch "
    "model folder the export was made from (--model DIR --backend torch)"
)
WORD_START = "\u2581"  # "▁": the tokenizer's word-boundary mark (SentencePiece style)


@dataclass(frozen=True)
class Sampling:
    """Random sampling (e.g. back-translation: Edunov et al., 2018, "Understanding Back-Translation at Scale"): each
    token drawn from the model's next-token distribution with its logits divided by `temperature`, among the `top_k`
    most probable tokens (0: all of them) and the fewest whose probabilities add up to `top_p` (1: all of them)."""

    top_k: int = 0
    top_p: float = 1.0
    temperature: float = 1.0

    @staticmethod
    def never_drawn(pad_id: int | None, start_id: int | None, eos_id: int | None) -> list[int]:
        """The ids no sample may hold: PAD and the decoder's start token are no output tokens (beam search never
        ranks them high; a random draw could, and PAD would end the translation where it fell), unless EOS."""
        return sorted({pad_id, start_id} - {None, eos_id})

    def __post_init__(self):
        if isinstance(self.top_k, bool) or not isinstance(self.top_k, int) or self.top_k < 0:
            raise TranslateError(f"top_k={self.top_k!r}: use 0 (every token) or a positive number of tokens")
        if not isinstance(self.top_p, int | float) or not 0 < self.top_p <= 1:
            raise TranslateError(f"top_p={self.top_p!r}: use a probability above 0 and at most 1 (1: every token)")
        if not isinstance(self.temperature, int | float) or not 0 < self.temperature < float("inf"):
            raise TranslateError(f"temperature={self.temperature!r}: use a finite number above 0 (1: the model's own "
                                 "distribution)")  # fmt: skip


@dataclass
class Hypothesis:
    ids: list[int]
    score: float | None = None
    attention: list[list[float]] | None = field(default=None, repr=False)


# ----------------------------------------------------------------------------------------------------------------
# PyTorch
# ----------------------------------------------------------------------------------------------------------------
class TorchEngine:
    """`model.generate()` on batches of token ids, under `torch.autocast` for bfloat16/float16."""

    parallel_batches = 1  # one batch at a time, on all of PyTorch's threads

    def __init__(self, model, tokenizer, device: str, dtype: str = "float32", seed: int | None = None):
        import torch

        if seed is not None:  # sampling draws from torch's generator: the same seed, the same samples
            torch.manual_seed(seed)

        # an ensemble: several models (sharing the tokenizer) whose log-probabilities are averaged
        self.models = list(model) if isinstance(model, list | tuple) else [model]
        self.model, self.tokenizer, self.device = self.models[0], tokenizer, device
        self.dtype = check_dtype(dtype)
        if not torch_dtype_supported(dtype, device):
            raise refuse_dtype(dtype, device, "PyTorch")
        self.autocast_dtype = None if dtype == "float32" else getattr(torch, dtype)
        disable_cudnn_attention(torch.device(device).type)  # beam search meets a new key length every step
        config = self.model.config
        # Learned positions end at the table; the decoder's start token takes position 0.
        self.decoder_room = config.max_position_embeddings - 1 if config.position_embedding_type == "learned" else None
        self.max_new_tokens_over_source = self.model.MAX_NEW_TOKENS_OVER_SOURCE
        self._pieces: list[str] | None = None
        self._special_ids: set[int] = set()  # made with `_pieces`
        # what sampling never draws: PAD and the start token, and the generation config's bad words
        never = Sampling.never_drawn(config.pad_token_id, config.decoder_start_token_id, config.eos_token_id)
        self.sampling_bad_words = [[i] for i in never] + list(self.model.generation_config.bad_words_ids or [])

    @property
    def batch_tokens(self) -> int:
        """The decoding batch when the caller gives none: `default_batch_tokens` of this device and PyTorch's threads."""
        import torch

        return default_batch_tokens(torch.device(self.device).type, torch.get_num_threads())

    def _autocast(self):
        import torch

        if self.autocast_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(torch.device(self.device).type, dtype=self.autocast_dtype)

    def generate(self, sources: list[list[int]], *, num_beams: int = 4, length_penalty: float = 0.6,
                 max_new_tokens: int | None = None, paper_decoding: bool = False, num_hypotheses: int = 1,
                 return_scores: bool = False, return_attention: bool = False,
                 prefixes: list[list[int]] | None = None, constraints: list[list[list[int]]] | None = None,
                 sampling: Sampling | None = None) -> list[list[Hypothesis]]:  # fmt: skip
        import torch

        from modeling_vaswani.generation_vaswani import beam_options  # start-up: as torch

        input_ids, attention_mask = self._pad(sources)
        with torch.inference_mode(), self._autocast():
            if sampling is not None:  # one model, one beam, no prefix or constraint: the Translator checked
                output_ids = self.model.generate(
                    input_ids=input_ids, attention_mask=attention_mask, do_sample=True, num_beams=1,
                    top_k=sampling.top_k, top_p=sampling.top_p, temperature=sampling.temperature,
                    num_return_sequences=num_hypotheses, bad_words_ids=self.sampling_bad_words,
                    **self._length_limit(input_ids.shape[1], max_new_tokens, paper_decoding),
                )  # fmt: skip  # (B * n, T)
            elif prefixes is None and constraints is None and len(self.models) == 1:  # today's path: `generate()`
                output_ids = self.model.generate(
                    input_ids=input_ids, attention_mask=attention_mask, paper_decoding=paper_decoding,
                    num_return_sequences=num_hypotheses, **beam_options(num_beams, length_penalty),
                    **self._length_limit(input_ids.shape[1], max_new_tokens, paper_decoding),
                )  # fmt: skip  # (B * n, T)
            else:  # prefixes, constraints or an ensemble: our own beam search
                output_ids = self._search(input_ids, attention_mask, num_beams, length_penalty, max_new_tokens,
                                          paper_decoding, num_hypotheses, prefixes, constraints)  # fmt: skip
            scores = attention = None
            if return_scores or return_attention:
                scores, attention = self._rescore(input_ids, attention_mask, output_ids, num_hypotheses,
                                                  length_penalty, paper_decoding, return_attention)  # fmt: skip
        eos, pad = self.model.config.eos_token_id, self.model.config.pad_token_id
        hypotheses = []
        for row, ids in enumerate(output_ids[:, 1:].tolist()):
            ids = _until(ids, {eos, pad})
            hypothesis = Hypothesis(ids)
            if scores is not None:
                hypothesis.score = scores[row]
            if return_attention:
                source_length = int(attention_mask[row // num_hypotheses].sum())
                hypothesis.attention = attention[row, : len(ids), :source_length].tolist()
            hypotheses.append(hypothesis)
        return [hypotheses[i : i + num_hypotheses] for i in range(0, len(hypotheses), num_hypotheses)]

    def _search(self, input_ids, attention_mask, num_beams, length_penalty, max_new_tokens, paper_decoding,
                num_hypotheses, prefixes, constraints=None):  # fmt: skip
        """Our own beam search over the models' averaged log-probabilities (`vaswani.inference.search`), each sentence
        starting with its prefix (token ids, or None) and, with `constraints` (phrases as token ids per sentence),
        lexically constrained (`vaswani.inference.constraints`): (B * n, 1 + T) like `generate()`."""
        # start-up: the command line's parser imports this module; the search (torch) loads only to translate
        from vaswani.inference.constraints import constrained_beam_search
        from vaswani.inference.search import EnsembleStep, PrefixForcing, beam_search, split_prefix  # start-up: ditto

        config, generation = self.model.config, self.model.generation_config
        caps = self._caps(attention_mask.sum(-1), max_new_tokens, paper_decoding)  # (B,)
        prefix = None
        if prefixes is not None:
            if self._pieces is None:  # the subword strings by id and the special ids, for healing a prefix's last word
                self._pieces = self.tokenizer.convert_ids_to_tokens(list(range(len(self.tokenizer))))
                # every special token: the named ones and any other marked special (a trained vocabulary's fillers)
                self._special_ids = set(self.tokenizer.all_special_ids) | {
                    index for index, token in self.tokenizer.added_tokens_decoder.items() if token.special
                }
            pieces = self._pieces
            split = [split_prefix(ids or [], pieces) for ids in prefixes]
            prefix = PrefixForcing([ids for ids, _ in split], [partial for _, partial in split], pieces,
                                   self._special_ids, num_beams, self.device)  # fmt: skip
            caps = self._prefix_caps(caps, prefix.min_lengths(), [len(ids or []) for ids in prefixes], max_new_tokens)
        bad_words = generation.bad_words_ids or []
        if any(len(words) != 1 for words in bad_words):
            raise TranslateError("bad_words_ids of more than one token are not supported with prefixes, constraints "
                                 "or ensembles")  # fmt: skip
        step = EnsembleStep(self.models, input_ids, attention_mask, num_beams)
        options = dict(
            num_beams=num_beams, length_penalty=length_penalty, paper_decoding=paper_decoding,
            num_return=num_hypotheses, start_id=config.decoder_start_token_id, eos_id=config.eos_token_id,
            pad_id=config.pad_token_id, min_new_tokens=generation.min_new_tokens or 0,
            suppress_ids=[words[0] for words in bad_words], prefix=prefix,
            # stop as the search it stands in for: the paper's (exact at the cap) or generate()'s (the model's setting)
            early_stopping="never" if paper_decoding else generation.early_stopping,
        )  # fmt: skip
        with contextlib.ExitStack() as fixed:  # the weights do not change while the search runs
            for model in self.models:
                fixed.enter_context(model.output_rows_normalized_once())
            if constraints is not None:
                phrases = [sentence or [] for sentence in constraints]
                return constrained_beam_search(step, caps.to(self.device), phrases, **options)
            return beam_search(step, caps.to(self.device), **options)

    def _caps(self, source_lengths, max_new_tokens: int | None, paper_decoding: bool):
        """Each sentence's cap on output tokens (EOS included), (B,): `max_new_tokens`, else its source length
        (`paper_decoding`) or the batch's longest + 50, always inside a learned position table (as `_length_limit`)."""
        import torch

        if max_new_tokens is not None:
            caps = torch.full_like(source_lengths, max_new_tokens)
        elif paper_decoding:
            caps = source_lengths + self.max_new_tokens_over_source
        else:
            caps = torch.full_like(source_lengths, int(source_lengths.max()) + self.max_new_tokens_over_source)
        return caps if self.decoder_room is None else caps.clamp(max=self.decoder_room)

    def _prefix_caps(self, caps, needed: list[int], prefix_lengths: list[int], max_new_tokens: int | None):
        """Caps that leave room for each prefix and EOS: a prefix that does not fit `max_new_tokens` (or the
        position table) is a `TranslateError`; without `max_new_tokens` a prefix gets up to 50 more tokens."""
        import torch

        needed_t = torch.tensor(needed, device=caps.device) + 1  # the prefix, then EOS
        limit = max_new_tokens if max_new_tokens is not None else self.decoder_room
        if limit is not None and int(needed_t.max()) > limit:
            what = f"--max_new_tokens {max_new_tokens}" if max_new_tokens is not None else "the position table"
            raise TranslateError(
                f"a prefix of {max(prefix_lengths)} tokens does not fit {what} (the prefix and EOS need "
                f"{int(needed_t.max())}): shorten the prefix or allow more tokens"
            )
        if max_new_tokens is None:
            lengths = torch.tensor(prefix_lengths, device=caps.device) + self.max_new_tokens_over_source
            caps = torch.maximum(caps, lengths)
            caps = caps if self.decoder_room is None else caps.clamp(max=self.decoder_room)
        return torch.maximum(caps, needed_t)

    def _pad(self, sources: list[list[int]]):
        import torch

        longest = max(len(ids) for ids in sources)
        input_ids = torch.full((len(sources), longest), self.tokenizer.pad_token_id, dtype=torch.long)
        attention_mask = torch.zeros_like(input_ids)
        for row, ids in enumerate(sources):
            input_ids[row, : len(ids)] = torch.tensor(ids)
            attention_mask[row, : len(ids)] = 1
        return input_ids.to(self.device), attention_mask.to(self.device)

    def _length_limit(self, longest_source: int, max_new_tokens: int | None, paper_decoding: bool) -> dict:
        """`generate()` length arguments: the user's `max_new_tokens`, else the model's own cap (source + 50), in
        both cases kept inside a learned position table."""
        room = self.decoder_room
        if max_new_tokens is not None:
            return {"max_new_tokens": max_new_tokens if room is None else min(max_new_tokens, room)}
        if room is None:
            return {}
        if paper_decoding:  # per-sentence caps of source + 50, and never past the table
            return {"max_length": room + 1}
        return {"max_new_tokens": min(longest_source + self.max_new_tokens_over_source, room)}

    def _rescore(self, input_ids, attention_mask, output_ids, num_hypotheses, length_penalty, paper_decoding,
                 return_attention):  # fmt: skip
        """One teacher-forced pass over the chosen hypotheses: their scores (see the module docstring) and the
        last decoder layer's encoder-decoder attention averaged over heads, (B * n, T, S)."""
        import torch

        # start-up: the command line's parser imports this module; torch loads only to translate
        from modeling_vaswani.generation_vaswani import gnmt_length_penalty

        config = self.model.config
        for model in self.models if return_attention else []:
            if model.config._attn_implementation != "eager":
                model.set_attn_implementation("eager")  # attention probabilities need the eager kernel
        repeat = torch.arange(input_ids.shape[0], device=input_ids.device).repeat_interleave(num_hypotheses)
        decoder_input_ids = output_ids[:, :-1]  # (B * n, T): start token + all but the last output
        labels = output_ids[:, 1:]  # (B * n, T)
        valid = torch.ones_like(labels, dtype=torch.bool)
        finished = torch.zeros(labels.shape[0], dtype=torch.bool, device=labels.device)
        for t in range(labels.shape[1]):  # a token counts up to and including the first EOS
            valid[:, t] = ~finished
            finished |= labels[:, t] == config.eos_token_id
        log_probs, attention = self.teacher_forced(input_ids[repeat], attention_mask[repeat], decoder_input_ids,
                                                   labels, valid, return_attention)  # fmt: skip
        total = (log_probs * valid).sum(-1)  # (B * n,)
        lengths = valid.sum(-1).float()
        penalty = gnmt_length_penalty(lengths, length_penalty) if paper_decoding else lengths**length_penalty
        return (total / penalty).tolist(), attention

    def teacher_forced(self, input_ids, attention_mask, decoder_input_ids, labels, valid, return_attention=False):
        """One teacher-forced pass of every model: the log-probability of each label, (N, T), averaged over the
        models (an ensemble's step log-probabilities), and with `return_attention` the last decoder layer's
        encoder-decoder attention averaged over heads (and models), (N, T, S)."""
        import torch

        log_probs = attention = None
        for model in self.models:
            outputs = model(
                input_ids=input_ids, attention_mask=attention_mask, decoder_input_ids=decoder_input_ids,
                decoder_attention_mask=valid.long(), output_attentions=return_attention, use_cache=False,
            )  # fmt: skip
            member = torch.log_softmax(outputs.logits.float(), dim=-1).gather(-1, labels[..., None]).squeeze(-1)
            log_probs = member if log_probs is None else log_probs + member
            if return_attention:
                heads = outputs.cross_attentions[-1].float().mean(dim=1)  # (N, T, S)
                attention = heads if attention is None else attention + heads
        count = len(self.models)
        return log_probs / count, None if attention is None else attention / count

    def score(self, sources: list[list[int]], targets: list[list[int]]) -> list[list[float]]:
        """The log-probability of each target token (its ids, ending with EOS) given its source, teacher-forced
        (averaged over the models of an ensemble): one list per pair, as long as its target."""
        import torch

        input_ids, attention_mask = self._pad(sources)
        longest = max(len(ids) for ids in targets)
        pad = self.model.config.pad_token_id
        labels = torch.full((len(targets), longest), pad, dtype=torch.long)
        for row, ids in enumerate(targets):
            labels[row, : len(ids)] = torch.tensor(ids)
        labels = labels.to(self.device)
        start = torch.full_like(labels[:, :1], self.model.config.decoder_start_token_id)
        valid = (
            torch.arange(longest, device=self.device)[None, :]
            < torch.tensor([len(ids) for ids in targets], device=self.device)[:, None]
        )  # (N, T)
        with torch.inference_mode(), self._autocast():
            log_probs, _ = self.teacher_forced(input_ids, attention_mask, torch.cat([start, labels[:, :-1]], 1),
                                               labels, valid)  # fmt: skip
        return [row[: len(ids)] for row, ids in zip(log_probs.tolist(), targets, strict=True)]


# ----------------------------------------------------------------------------------------------------------------
# CTranslate2
# ----------------------------------------------------------------------------------------------------------------
# what the translator says of an int8 export where int8 products saturate and CTranslate2 has no int16 to compute in
SATURATING_INT8 = (
    "int8 products saturate on this CPU (no VNNI) and this CTranslate2 has no int16 (its oneDNN backend: "
    "CT2_USE_MKL=0, or a build without MKL): the int8 export's translations will stray from float32's. Unset "
    "CT2_USE_MKL (its MKL backend computes int8 exports in int16 here, as precisely), or export with --quantization "
    "float32"
)


class CTranslate2Engine:
    """A folder written by `vaswani export --format ctranslate2`, run by `ctranslate2.Translator`."""

    def __init__(self, folder: Path, tokenizer, device: str = "auto", dtype: str = "float32",
                 threads: int | None = None, parallel_batches: int | None = None, split_batches: bool = True,
                 seed: int | None = None):  # fmt: skip
        try:
            ctranslate2 = import_ctranslate2()
        except ExportError as error:
            raise TranslateError(str(error)) from error
        if seed is not None:  # before the workers exist: each seeds its own generator from it when it starts
            ctranslate2.set_random_seed(seed)
        self.tokenizer = tokenizer
        self.info = json.loads((Path(folder) / EXPORT_INFO_FILE).read_text())
        device_type, index = _ct2_device(device, ctranslate2)
        self.device = device_type
        check_dtype(dtype)
        self.compute_type = self._compute_type(dtype, ctranslate2.get_supported_compute_types(device_type))
        if threads is None:
            threads = cpu_threads()
        self.parallel_batches, intra_threads = ct2_threads(device_type, threads, parallel_batches)
        self.split_batches = split_batches  # False: each batch whole, on one worker (callers send several at once)
        # the decoding batch when the caller gives none, for all the workers' threads (a batch is cut among them)
        self.batch_tokens = default_batch_tokens(device_type, self.parallel_batches * intra_threads)
        if device_type == "cpu":
            warn_mkl_threads(intra_threads, self.parallel_batches)
        self.translator = new_ct2_translator(
            ctranslate2, folder, device=device_type, device_index=index, compute_type=self.compute_type,
            inter_threads=self.parallel_batches, intra_threads=intra_threads,
        )  # fmt: skip
        self.positions = int(self.info["max_position_embeddings"])
        self.min_new_tokens = int(self.info.get("generation", {}).get("min_new_tokens") or 1)
        # the generation config's bad_words_ids (a converted Marian model never generates PAD), as token sequences
        self.suppress_sequences = [
            tokenizer.convert_ids_to_tokens(ids) for ids in self.info.get("generation", {}).get("bad_words_ids") or []
        ]
        # what sampling never draws (PAD, the start token) besides those; the vocabulary that bounds its top k
        info = self.info  # read with .get: an export of an earlier version decodes as before, whatever it lacks
        start = info.get("decoder_start_token_id", info.get("bos_token_id"))
        never = Sampling.never_drawn(info.get("pad_token_id"), start, info.get("eos_token_id"))
        self.sampling_suppressed = [[token] for token in tokenizer.convert_ids_to_tokens(never)]
        self.sampling_suppressed += self.suppress_sequences
        self.vocab_size = (info.get("source_config") or {}).get("vocab_size") or len(tokenizer)
        self._warned_paper = False

    def _compute_type(self, dtype: str, supported: set[str]) -> str:
        quantization = self.info.get("quantization", "float32")
        if dtype == "float32" and self.device == "cpu" and quantization.startswith("int8"):
            wanted = ctranslate2_int8_compute_type(supported)  # int16 where int8 products would saturate
            if wanted != "default":
                logger.info("int8 products saturate on this CPU (no VNNI): the int8 export computes in %s", wanted)
            elif ctranslate2_int8_saturates():  # and no int16 to turn to: oneDNN (CT2_USE_MKL=0), or no MKL
                logger.warning(SATURATING_INT8)
        elif dtype == "float32":
            wanted = "default"  # the stored type: float32, or int8 weights with float32 elsewhere, ...
        elif quantization.startswith("int8"):
            wanted = f"int8_{dtype}"
        else:
            wanted = dtype
        if wanted != "default" and wanted not in supported:
            raise refuse_dtype(dtype, self.device, "CTranslate2", set(supported))
        return wanted

    def generate(self, sources: list[list[int]], *, num_beams: int = 4, length_penalty: float = 0.6,
                 max_new_tokens: int | None = None, paper_decoding: bool = False, num_hypotheses: int = 1,
                 return_scores: bool = False, return_attention: bool = False,
                 prefixes: list[list[int]] | None = None, constraints: list[list[list[int]]] | None = None,
                 sampling: Sampling | None = None) -> list[list[Hypothesis]]:  # fmt: skip
        if constraints is not None:
            raise TranslateError(CT2_NO_CONSTRAINTS)
        longest = max(len(ids) for ids in sources)
        if longest > self.positions:
            raise TranslateError(
                f"an input of {longest} tokens does not fit the exported position table of {self.positions} "
                f"positions: use --max_source_length {self.positions} or less (CTranslate2 has no positions past it)"
            )
        if paper_decoding and not self._warned_paper:
            logger.warning(
                "CTranslate2 has no GNMT length penalty: beams are ranked by score / length ** %s, and each batch is "
                "capped at its longest source + %d tokens",
                length_penalty,
                self.info["max_new_tokens_over_source"],
            )
            self._warned_paper = True
        room = self.positions - 1  # the decoder start token takes position 0
        limit = max_new_tokens if max_new_tokens is not None else longest + self.info["max_new_tokens_over_source"]
        target_prefix = None
        if prefixes is not None:  # CTranslate2 forces the prefix's own subwords (no healing of a partial last word)
            target_prefix = [self.tokenizer.convert_ids_to_tokens(ids) if ids else None for ids in prefixes]
            needed = max(len(ids or []) for ids in prefixes) + 1  # the prefix and EOS
            if max_new_tokens is not None and needed > max_new_tokens:
                raise TranslateError(f"a prefix of {needed - 1} tokens does not fit --max_new_tokens {max_new_tokens}"
                                     f" (the prefix and EOS need {needed}): shorten the prefix or allow more tokens")  # fmt: skip
            if needed > room:
                raise TranslateError(f"a prefix of {needed - 1} tokens does not fit the position table of {room + 1}"
                                     " positions: shorten the prefix")  # fmt: skip
            if max_new_tokens is None:
                limit = max(limit, needed - 1 + self.info["max_new_tokens_over_source"])
        # sampling: CTranslate2's random sampler (top_k 0: every token), one beam; otherwise its beam or greedy search
        search = dict(beam_size=num_beams, suppress_sequences=self.suppress_sequences or None)
        if sampling is not None:
            # CTranslate2 refuses a top k over its vocabulary (PyTorch takes it as every token, as 0 is here) and reads
            # top_p in float32, where a tiny p is 0 (refused): any p at most 1e-6 keeps the top token alone
            search = dict(
                beam_size=1, sampling_topk=0 if sampling.top_k >= self.vocab_size else sampling.top_k,
                sampling_topp=max(sampling.top_p, 1e-6), sampling_temperature=sampling.temperature,
                suppress_sequences=self.sampling_suppressed,
            )  # fmt: skip
        results = self.translator.translate_batch(
            [self.tokenizer.convert_ids_to_tokens(ids) for ids in sources],
            **search, num_hypotheses=num_hypotheses, length_penalty=length_penalty,
            max_decoding_length=min(limit, room), min_decoding_length=self.min_new_tokens, max_input_length=0,
            return_scores=return_scores, return_attention=return_attention and num_beams == 1,
            max_batch_size=self._split(sources), target_prefix=target_prefix,
        )  # fmt: skip
        batches = []
        for result in results:
            hypotheses = []
            for k, tokens in enumerate(result.hypotheses):
                hypothesis = Hypothesis(self.tokenizer.convert_tokens_to_ids(tokens))
                if return_scores:
                    hypothesis.score = result.scores[k]
                if return_attention and num_beams == 1:
                    hypothesis.attention = [list(row) for row in result.attention[k]]
                hypotheses.append(hypothesis)
            batches.append(hypotheses)
        if return_attention and num_beams > 1:
            self._forced_attention(sources, batches)
        if return_scores and prefixes is not None:
            self._whole_output_scores(sources, batches, length_penalty)
        return batches

    def _whole_output_scores(self, sources: list[list[int]], batches: list[list[Hypothesis]], alpha: float) -> None:
        """With `target_prefix`, CTranslate2's scores leave the prefix's tokens out; the score of the whole output
        (prefix included, as the PyTorch engine and `vaswani score` give it) comes from `score_batch`."""
        eos = self.tokenizer.eos_token_id
        pairs = [(i, hypothesis) for i, hypotheses in enumerate(batches) for hypothesis in hypotheses]
        log_probs = self.score([sources[i] for i, _ in pairs], [[*h.ids, eos] for _, h in pairs])
        for (_, hypothesis), values in zip(pairs, log_probs, strict=True):
            hypothesis.score = sum(values) / len(values) ** alpha

    def score(self, sources: list[list[int]], targets: list[list[int]]) -> list[list[float]]:
        """The log-probability of each target token (its ids, ending with EOS) given its source, from CTranslate2's
        `score_batch` (which adds the start token and EOS itself): one list per pair, as long as its target."""
        longest = max(len(ids) for ids in [*sources, *targets])
        if longest > self.positions:
            raise TranslateError(f"a sentence of {longest} tokens does not fit the exported position table of "
                                 f"{self.positions} positions: use shorter sentences")  # fmt: skip
        eos = self.tokenizer.eos_token_id
        results = self.translator.score_batch(
            [self.tokenizer.convert_ids_to_tokens(ids) for ids in sources],
            [self.tokenizer.convert_ids_to_tokens(ids[:-1] if ids and ids[-1] == eos else ids) for ids in targets],
            max_batch_size=self._split(sources), max_input_length=0,
        )  # fmt: skip
        return [list(result.log_probs) for result in results]

    def _split(self, batch: list) -> int:
        return ct2_max_batch_size(len(batch), self.parallel_batches if self.split_batches else 1)

    def _forced_attention(self, sources: list[list[int]], batches: list[list[Hypothesis]]) -> None:
        """The attention rows of beam-search hypotheses, from one greedy pass forced along each hypothesis
        (`target_prefix`). CTranslate2 4.8's beam search returns a wrong first row for all but one sentence of a
        batch; the forced pass gives the rows of the decoding steps that produced the tokens."""
        pairs = [(i, hypothesis) for i, hypotheses in enumerate(batches) for hypothesis in hypotheses]
        results = self.translator.translate_batch(
            [self.tokenizer.convert_ids_to_tokens(sources[i]) for i, _ in pairs],
            target_prefix=[self.tokenizer.convert_ids_to_tokens(h.ids) for _, h in pairs],
            beam_size=1, max_decoding_length=max(len(h.ids) for _, h in pairs) + 1, max_input_length=0,
            return_attention=True, max_batch_size=self._split(pairs),
        )  # fmt: skip
        for (_, hypothesis), result in zip(pairs, results, strict=True):
            hypothesis.attention = [list(row) for row in result.attention[0][: len(hypothesis.ids)]]


def new_ct2_translator(ctranslate2, folder: str | Path, **options):
    """`ctranslate2.Translator(folder, **options)`, leaving PyTorch's thread count as it was where PyTorch is loaded:
    creating a translator sets the calling thread's OpenMP thread count (which PyTorch shares) to its
    `intra_threads`. (PyTorch loaded later starts with its own count.)"""
    torch = sys.modules.get("torch")
    threads = torch.get_num_threads() if torch is not None else None
    translator = ctranslate2.Translator(str(folder), **options)
    if torch is not None:
        torch.set_num_threads(threads)
    return translator


def ct2_threads(device: str, threads: int, parallel_batches: int | None = None) -> tuple[int, int]:
    """CTranslate2's (inter_threads, intra_threads) for a CPU budget of `threads` cores: `parallel_batches` parts of
    each batch are decoded at once, each on threads // parallel_batches cores. The default on CPU is one part per
    core (CTranslate2's throughput setting: parts of a batch scale across cores far better than one batch's matrix
    products do; on 2 cores, base dims, beam 4, int8: 2.8-3.0x HF Marian's `generate()` against 1.9x with both cores
    inside one batch, benchmarks/README.md); on a GPU it is 1 (one batch at a time fills it)."""
    if threads < 1:
        raise TranslateError(f"threads={threads}: use 1 or more")
    if parallel_batches is None:
        parallel_batches = threads if device == "cpu" else 1
    if parallel_batches < 1 or (device == "cpu" and parallel_batches > threads):
        allowed = f"1 to {threads} (the CPU threads in use; --threads sets them)" if device == "cpu" else "1 or more"
        raise TranslateError(f"parallel_batches={parallel_batches}: use {allowed}")
    return parallel_batches, max(1, threads // parallel_batches) if device == "cpu" else threads


def warn_mkl_threads(intra_threads: int, parallel_batches: int, environ=os.environ) -> None:
    """Warn when MKL_NUM_THREADS asks for more threads than CTranslate2 gives each worker: Intel MKL (CTranslate2's
    matrix products on Intel CPUs) takes it over CTranslate2's own count, so each of the `parallel_batches` workers
    runs that many threads and they compete for the cores (vaswani serve on 2 cores, int8: 0.8x the sentences/s with
    MKL_NUM_THREADS=2, benchmarks/README.md)."""
    value = environ.get("MKL_NUM_THREADS", "")
    if value.isdigit() and int(value) > intra_threads:
        logger.warning(
            "MKL_NUM_THREADS=%s is more than the %d thread(s) CTranslate2 gives each of its %d workers: Intel MKL may "
            "take it instead, and the workers then compete for the cores (slower); unset it (--threads and "
            "--parallel_batches set the threads)", value, intra_threads, parallel_batches,
        )  # fmt: skip


def ct2_max_batch_size(size: int, parallel_batches: int) -> int:
    """CTranslate2's `max_batch_size` that cuts a batch of `size` into `parallel_batches` parts (0: keep it whole)."""
    return 0 if parallel_batches == 1 else -(-size // parallel_batches)


def _ct2_device(device: str, ctranslate2) -> tuple[str, int]:
    """CTranslate2's (device, index) for "auto", "cpu", "cuda" or "cuda:N"."""
    kind, _, index = device.partition(":")
    if kind == "auto":
        kind = "cuda" if ctranslate2.get_cuda_device_count() > 0 else "cpu"
    if kind not in ("cpu", "cuda") or (index and not index.isdigit()):
        raise TranslateError(f"unknown device {device!r}: use auto, cpu, cuda or cuda:N")
    if kind == "cuda" and ctranslate2.get_cuda_device_count() == 0:
        raise TranslateError(f"device {device!r} was requested but CTranslate2 sees no CUDA GPU: use --device cpu")
    return kind, int(index or 0)


# ----------------------------------------------------------------------------------------------------------------
# Alignments
# ----------------------------------------------------------------------------------------------------------------
def word_indices(tokens: list[str]) -> list[int]:
    """The word (0-based) each subword token belongs to: a token that starts with "▁" starts a new word (the
    tokenizer's SentencePiece-style boundaries, which `decode` turns into spaces); other tokens continue the
    current one."""
    words, current = [], -1
    for token in tokens:
        if token.startswith(WORD_START) or current < 0:
            current += 1
        words.append(current)
    return words


def hard_alignment(source_tokens: list[str], target_tokens: list[str], attention: list[list[float]]) -> list[tuple[int, int]]:  # fmt: skip
    """Word alignments (source word, target word), sorted, from subword attention: each target subword is aligned
    to the source subword it attends most (EOS of the source excluded), and a pair of words is aligned when any of
    their subwords are (fairseq's and Marian's hard alignment, lifted to words)."""
    source_words, target_words = word_indices(source_tokens), word_indices(target_tokens)
    pairs = set()
    for t, row in enumerate(attention[: len(target_tokens)]):
        candidates = row[: len(source_tokens)]
        if not candidates:
            continue
        j = max(range(len(candidates)), key=candidates.__getitem__)
        pairs.add((source_words[j], target_words[t]))
    return sorted(pairs)


def _until(ids: list[int], stop: set[int]) -> list[int]:
    for position, token in enumerate(ids):
        if token in stop:
            return ids[:position]
    return ids


__all__ = [
    "BACKENDS",
    "CTranslate2Engine",
    "Hypothesis",
    "Sampling",
    "TorchEngine",
    "hard_alignment",
    "torch_dtype_supported",
    "word_indices",
]
