"""Translate many sentences with a saved model: the engine of `vaswani translate`.

    from vaswani.inference.translator import Translator

    translator = Translator("runs/base-avg5")              # a local save_pretrained folder with its tokenizer
    translator.translate(["A sentence.", "", "Another one."])  # -> ["Ein Satz.", "", "Noch einer."]

`Translator.translate` tokenizes every sentence, sorts them by length, decodes them in batches of about
`batch_tokens` source tokens (padding included, so similar lengths share a batch and little is wasted on padding) and
returns the translations in the input order. Without `batch_tokens`, a batch holds `Translator.batch_tokens`: 512
tokens per decoding thread on a CPU (at most 4,096), where small batches decode faster, and 4,096 on a GPU. A
whitespace-only sentence translates to "" without running the model.

Decoding is the model's beam search: `num_beams=4`, `length_penalty=0.6` as in the paper. Without
`max_new_tokens`, each batch is capped at its longest source + 50 tokens (the model's `generate()`); with
`paper_decoding=True` beams are ranked by the paper's GNMT length penalty and every sentence is capped at its own
source length + 50 (`modeling_vaswani.generation_vaswani.paper_beam_search`).

Over-long inputs: a sentence of more than `max_source_length` tokens (EOS included; default: the model's
`max_position_embeddings`) is truncated to that length, keeping its EOS, and a warning names it (the command line
names the line numbers). The output of a model with learned positions is also kept within its position table.

Decoding for production: `prefixes` (each translation starts with its sentence's prefix), `constraints` (target
phrases that must appear), `target_languages` (the language each sentence is translated into, for a multilingual
model: `Translator.target_languages`), an ensemble (`Translator([folder_a, folder_b])`: the mean of the models'
log-probabilities) and `Translator.score` (the log-probability of given translations); see `translate_hypotheses`,
`vaswani.inference.search` and `vaswani.inference.constraints`.

`translate_lines` is the streaming loop of the command line: it reads `buffer_lines` lines at a time, translates
them as above and yields one translation per line.
"""

from __future__ import annotations

import functools
import itertools
import json
import logging
import re
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from vaswani.constants import EXPORT_INFO_FILE, SEQ2SEQ_MODEL_TYPE
from vaswani.devices import resolve_device, set_torch_threads
from vaswani.errors import TranslateError
from vaswani.export.ctranslate2 import RUNS_WITH, is_ctranslate2_folder
from vaswani.fileio import LONE_SURROGATE_FIX, conversion_hint, decode_line, lone_surrogate
from vaswani.inference.engines import (
    BACKENDS,
    CT2_NO_CONSTRAINTS,
    CTranslate2Engine,
    Sampling,  # what `translate_hypotheses(sampling=...)` takes, importable from here with the Translator
    TorchEngine,
    hard_alignment,
)
from vaswani.model_folder import check_model_folder, load_model_folder, load_tokenizer

if TYPE_CHECKING:
    from vaswani.inference.engines import Hypothesis

logger = logging.getLogger(__name__)

# A target-language token of a multilingual model: Marian's `>>es<<` (MarianTokenizer's `language_code_re`), the
# first token of a source, which tells the model what to translate into (Johnson et al., 2017).
TARGET_LANGUAGE_TOKEN = re.compile(r">>(.+)<<")


@dataclass
class Translation:
    """One translation of a sentence: its text, its model score (None unless asked for) and its word alignments,
    (source word, target word) pairs counted from 0 (None unless asked for). See `vaswani.inference.engines`."""

    text: str
    score: float | None = None
    alignment: list[tuple[int, int]] | None = None


@dataclass
class Score:
    """The model's log-probability of a target given its source (`Translator.score`): `score` is `log_prob` / lp(|Y|),
    normalised as `translate --scores` normalises (|Y| ** length_penalty, or GNMT's penalty with `paper_decoding`;
    |Y| counts EOS); `log_prob` is the sum over the target's `tokens` (its subwords and EOS) of `token_log_probs`."""

    score: float
    log_prob: float
    tokens: list[str]
    token_log_probs: list[float]


def _choose_backend(model: str | Path, backend: str) -> str:
    """ "torch" or "ctranslate2": "auto" picks CTranslate2 for a folder written by `vaswani export --format
    ctranslate2` and PyTorch otherwise; a forced backend must fit the folder."""

    if backend not in BACKENDS:
        raise TranslateError(f"unknown backend {backend!r}: use one of {', '.join(BACKENDS)}")
    exported = is_ctranslate2_folder(model)
    if exported:
        check_translation_export(Path(model))
    if backend == "torch" and exported:
        raise TranslateError(
            f"{model} is a CTranslate2 export: translate it with --backend ctranslate2 (or auto), or give the "
            "PyTorch model folder it was exported from"
        )
    if backend == "ctranslate2" and not exported:
        raise TranslateError(
            f"{model} is not a CTranslate2 export: make one with vaswani export --model {model} --output_dir OUT "
            "--format ctranslate2, or use --backend torch"
        )
    return "ctranslate2" if exported else "torch"


def check_translation_export(folder: Path) -> None:
    """A CTranslate2 export of a decoder-only or encoder-only model (`vaswani export` of a VaswaniForCausalLM, ...)
    is not a translator: a `TranslateError` that names what it is and what runs it."""

    path = folder / EXPORT_INFO_FILE
    try:
        info = json.loads(path.read_text())
    except (OSError, ValueError) as error:
        raise TranslateError(f"{path} cannot be read ({error}): export the model again") from error
    if not isinstance(info, dict):
        raise TranslateError(f"{path} is not a JSON object: export the model again")
    # exports made before the one-stack models have no runs_with: a Translator
    runs_with = info.get("runs_with", RUNS_WITH[SEQ2SEQ_MODEL_TYPE])
    if runs_with != RUNS_WITH[SEQ2SEQ_MODEL_TYPE]:
        raise TranslateError(
            f"{folder} is a CTranslate2 export of a {info.get('architecture', 'one-stack model')} "
            f"({info.get('model_type')!r}), not of a translation model: run it with {runs_with} in Python, or "
            "translate with the export of a VaswaniForConditionalGeneration"
        )


def check_same_tokenizer(first, other, first_config, other_config, first_folder, other_folder) -> None:
    """The members of an ensemble must share one vocabulary: the same tokens with the same ids, and the same special
    tokens (start, EOS, PAD); otherwise a `TranslateError` naming the two folders."""
    ids = ("decoder_start_token_id", "eos_token_id", "pad_token_id", "vocab_size")
    differences = [name for name in ids if getattr(first_config, name) != getattr(other_config, name)]
    if first.get_vocab() != other.get_vocab():
        differences.insert(0, "vocabulary")
    if differences:
        raise TranslateError(
            f"the models of an ensemble must share one tokenizer, but {other_folder} differs from {first_folder} "
            f"in its {', '.join(differences)}: ensemble models trained with the same tokenizer"
        )


def target_languages_of(vocab: dict[str, int]) -> dict[str, int]:
    """The code of each target-language token of a vocabulary (`>>es<<`: "es") and the token's id, by code."""
    return {match[1]: vocab[token] for token in sorted(vocab) if (match := TARGET_LANGUAGE_TOKEN.fullmatch(token))}


def find_language_code(language: str, known: Iterable[str]) -> str | None:
    """The code among `known` (a model's target-language tokens, `target_languages_of`; a server's languages) that
    `language` asks for: `language` itself, else the one code that names the same language in another spelling: ISO
    639-1 for ISO 639-3 and back (`es` for the `>>spa<<` of Tatoeba-MT models, `spa` for `>>es<<`), an older code
    (`iw`: `he`) or another letter case (`pt_BR` for `>>pt_br<<`), by CLDR's language aliases (`canonical_language`).
    None when no code or several (`zh` where a model has both `>>zho<<` and `>>cmn<<`) do."""
    if language in known:
        return language
    wanted = canonical_language(language)
    matches = [code for code in known if canonical_language(code) == wanted]
    return matches[0] if len(matches) == 1 else None


def canonical_language(code: str) -> str:
    """`code` ("spa", "pt_BR", "cmn_Hans") in one spelling per language, for comparing codes: its language part
    replaced by CLDR's preferred code (Babel's `language_aliases`: "spa" -> "es", "iw" -> "he"), `-` as `_`, lower
    case."""
    from babel.core import get_global  # start-up: only a multilingual model's codes need it

    language, separator, rest = code.replace("-", "_").partition("_")
    language = get_global("language_aliases").get(language.lower(), language)
    return f"{language}{separator}{rest}".lower()


def unknown_target_language(what: str, known: Iterable[str]) -> str:
    """Why a model whose target-language codes are `known` cannot translate into what `what` asks for (a flag and its
    value, "target language 'xx'", a request's field)."""
    known = sorted(known)
    if not known:
        return (f"{what}: the model has no target-language tokens (>>xx<<, which a multilingual OPUS-MT model has), so "
                "it translates into the one language it was trained for; leave the language out")  # fmt: skip
    return f"{what}: the model translates into {', '.join(known)} (its >>xx<< tokens); give one of them"


# ----------------------------------------------------------------------------------------------------------------
# The pipeline's rules
# ----------------------------------------------------------------------------------------------------------------
# `modeling_vaswani.pipeline_vaswani` (the `pipeline()` of a model folder) has the same two functions, so that it and
# the Translator give the same outputs; they are written again here because importing `modeling_vaswani` imports
# PyTorch (1-2 s), which a CTranslate2 export never needs, and the model folder's code cannot import this package.
# tests/models/test_pipeline_vaswani.py checks that both agree.
def is_blank(text: str) -> bool:
    """Whether `text` holds nothing to translate (empty or whitespace only): its translation is ""."""
    return not text.strip()


def truncate_source(input_ids: list[int], max_length: int, eos_token_id: int | None) -> list[int]:
    """The first `max_length` tokens of a tokenized source, keeping its final EOS when it had one."""
    if len(input_ids) <= max_length:
        return input_ids
    if eos_token_id is not None and input_ids[-1] == eos_token_id:
        return [*input_ids[: max_length - 1], eos_token_id]
    return input_ids[:max_length]


# ----------------------------------------------------------------------------------------------------------------
# The translator
# ----------------------------------------------------------------------------------------------------------------
class Translator:
    """A model and its tokenizer loaded once from a folder, in eval mode on `device` ("auto", "cpu", "cuda").

    `max_source_length`: longer inputs are truncated to this many tokens (default: the model's
    `max_position_embeddings`). `backend`, `dtype`, `parallel_batches`: see `vaswani.inference.engines` (`parallel_batches`:
    CTranslate2 decodes each batch as that many parts at once; default one per CPU thread, `ct2_threads`).

    `threads`: the CPU threads decoding uses (PyTorch's intra-op threads, set for the whole process; CTranslate2's
    budget, shared by its `parallel_batches` workers); default `vaswani.devices.cpu_threads`, PyTorch's count.

    `parallel_batches` (the attribute) is how many calls of `translate_hypotheses` may decode at once, from as many
    threads: CTranslate2's workers decode them side by side (a call keeps no state; texts are encoded one call at a
    time, since a MarianTokenizer switches between its sentencepiece models to encode a target, and decoded at once);
    PyTorch's is 1. `split_batches=False` keeps each batch whole, on one worker, for a caller that sends
    `parallel_batches` batches at once itself (`vaswani serve`); the default cuts each batch into `parallel_batches`
    parts, so that one caller uses every worker (`vaswani translate`). PyTorch never cuts a batch.

    `seed`: the random seed of sampling (`translate_hypotheses(sampling=...)`), set when the engine starts: PyTorch's
    generator (the process's), CTranslate2's workers'. The same seed gives the same samples again with one worker
    (`parallel_batches=1`); several take batches in no fixed order."""

    def __init__(
        self,
        model: str | Path | Sequence[str | Path],
        device: str = "auto",
        max_source_length: int | None = None,
        *,
        trust_remote_code: bool = False,
        backend: str = "auto",
        dtype: str = "float32",
        parallel_batches: int | None = None,
        split_batches: bool = True,
        threads: int | None = None,
        seed: int | None = None,
    ):
        if not isinstance(split_batches, bool):
            raise TranslateError(f"split_batches={split_batches!r}: use True or False")
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
            raise TranslateError(f"seed={seed!r}: use a whole number")
        self._encoding = threading.Lock()  # `_encode`, `_encode_targets`: one thread at a time uses the tokenizer
        if threads is not None and (isinstance(threads, bool) or not isinstance(threads, int) or threads < 1):
            raise TranslateError(f"threads={threads!r}: use 1 or more")
        if isinstance(model, list | tuple):  # an ensemble (or a list of one)
            if len(model) > 1:
                set_torch_threads(threads)
                self._init_ensemble(model, device, max_source_length, trust_remote_code, backend, dtype,
                                    parallel_batches)  # fmt: skip
                return
            (model,) = model
        if _choose_backend(check_model_folder(model, need_weights=False), backend) == "ctranslate2":
            self._init_ctranslate2(Path(model), device, max_source_length, dtype, parallel_batches, split_batches,
                                   threads, seed)  # fmt: skip
            return
        set_torch_threads(threads)
        if parallel_batches not in (None, 1):
            raise TranslateError(
                f"parallel_batches={parallel_batches} needs the ctranslate2 backend (PyTorch decodes one batch at a "
                "time, on all threads): export the model with `vaswani export --format ctranslate2`, or leave it out"
            )
        self.folder = Path(model)
        self.device = resolve_device(device)
        # checked: a local folder, weights that fit config.json, a tokenizer that fits the model; the folder's own
        # code runs only with trust_remote_code=True
        self.model, self.tokenizer = load_model_folder(self.folder, trust_remote_code=trust_remote_code)
        self.model.to(self.device).eval()
        config = self.model.config
        self._set_max_source_length(max_source_length, config.max_position_embeddings)
        self.engine = TorchEngine(self.model, self.tokenizer, self.device, dtype, seed=seed)
        self.backend = "torch"

    def _init_ensemble(self, folders, device, max_source_length, trust_remote_code, backend, dtype, parallel_batches):
        """An ensemble of PyTorch model folders that share one tokenizer: decoding averages their next-token
        log-probabilities (`vaswani.inference.search`)."""
        for folder in folders:
            if backend == "ctranslate2" or is_ctranslate2_folder(folder):
                raise TranslateError(
                    f"ensembles run on PyTorch only, and {folder} is a CTranslate2 export (or --backend ctranslate2 "
                    "was given): give the PyTorch model folders the exports were made from"
                )
        if parallel_batches not in (None, 1):
            raise TranslateError(f"parallel_batches={parallel_batches} needs the ctranslate2 backend: leave it out")
        self.folder, self.device, self.backend = Path(folders[0]), resolve_device(device), "torch"
        models = []
        for folder in folders:
            check_model_folder(folder, need_weights=False)
            model, tokenizer = load_model_folder(Path(folder), trust_remote_code=trust_remote_code)
            if models:
                check_same_tokenizer(self.tokenizer, tokenizer, models[0].config, model.config, folders[0], folder)
            else:
                self.tokenizer = tokenizer
            models.append(model.to(self.device).eval())
        self.model, self.models = models[0], models
        self._set_max_source_length(max_source_length, min(m.config.max_position_embeddings for m in models))
        self.engine = TorchEngine(models, self.tokenizer, self.device, dtype)

    def _init_ctranslate2(
        self, folder: Path, device: str, max_source_length: int | None, dtype: str, parallel_batches: int | None,
        split_batches: bool, threads: int | None, seed: int | None = None,
    ) -> None:  # fmt: skip
        """A folder written by `vaswani export --format ctranslate2`: CTranslate2 decodes, our tokenizer (saved in
        the folder) encodes and decodes; each batch in `parallel_batches` parts at once (default: one per CPU
        thread; see `vaswani.inference.engines.ct2_threads`)."""

        self.folder, self.model, self.backend = folder, None, "ctranslate2"
        self.tokenizer = load_tokenizer(folder, light=True)  # checked: present, loadable, a real tokenizer
        self.engine = CTranslate2Engine(folder, self.tokenizer, device, dtype, threads=threads, seed=seed,
                                        parallel_batches=parallel_batches, split_batches=split_batches)  # fmt: skip
        self.device = self.engine.device
        self._set_max_source_length(max_source_length, self.engine.positions)

    @property
    def computes_in(self) -> str:
        """What the matrix products are computed in: CTranslate2's compute type (an int8 export: "int8_float32", or
        "int16" where int8 products saturate, `vaswani.devices.ctranslate2_int8_compute_type`), PyTorch's dtype."""
        if self.backend == "ctranslate2":
            return self.engine.translator.compute_type
        return self.engine.dtype

    @property
    def batch_tokens(self) -> int:
        """The source tokens per batch (padding included) when `translate` is given no `batch_tokens`: on a CPU 512
        per decoding thread, at most 4,096; 4,096 on a GPU (`vaswani.devices.default_batch_tokens`)."""
        return self.engine.batch_tokens

    @property
    def parallel_batches(self) -> int:
        """How many calls of `translate_hypotheses` may decode at once (the engine's workers; PyTorch: 1)."""
        return self.engine.parallel_batches

    @functools.cached_property
    def target_languages(self) -> dict[str, int]:
        """The languages a multilingual model translates into: the code of each target-language token of its
        vocabulary (`>>es<<`: "es"; multilingual OPUS-MT models have them) and the token's id; empty for a model of
        one target language. `translate_hypotheses(target_languages=...)` puts the token before a source."""
        return target_languages_of(self.tokenizer.get_vocab())

    def check_target_languages(
        self, target_languages: str | Sequence[str | None] | None, count: int
    ) -> list[int | None] | None:
        """The target-language token id of each of `count` sentences (None where none is asked for), or None when no
        sentence asks for one; `target_languages` is one code per sentence, or one code (a string) for all of them,
        each a token's code or another spelling of it (`find_language_code`: `es` for `>>spa<<`). A `TranslateError`
        for a list of the wrong length or a language the model has no token for."""
        if target_languages is None:
            return None
        if isinstance(target_languages, str):
            target_languages = [target_languages] * count
        if len(target_languages) != count:
            raise TranslateError(f"{len(target_languages)} target languages for {count} sentences: give one per "
                                 "sentence (None for none)")  # fmt: skip
        known, ids, codes = self.target_languages, [], {}
        for language in target_languages:
            if language is not None and language not in codes:
                codes[language] = find_language_code(language, known)
                if codes[language] is None:
                    raise TranslateError(unknown_target_language(f"target language {language!r}", known))
            ids.append(None if language is None else known[codes[language]])
        return ids if any(i is not None for i in ids) else None

    def _set_max_source_length(self, max_source_length: int | None, positions: int) -> None:
        """Inputs are truncated to `max_source_length` tokens, by default the model's number of `positions`."""
        self.max_source_length = max_source_length or positions
        if self.max_source_length < 2:
            raise TranslateError(f"max_source_length={self.max_source_length}: use at least 2 (a token and EOS)")

    def translate(self, sentences: Sequence[str], *args, **options) -> list[str]:
        """The translations of `sentences`, in their order ("" for a blank one): the best hypothesis of
        `translate_hypotheses(sentences, ...)`, which takes the same arguments (`num_beams`, `length_penalty`,
        `max_new_tokens`, `paper_decoding`, `batch_tokens`, `progress`, `on_truncated`, `prefixes`, `constraints`,
        `on_unmet`)."""
        results = self.translate_hypotheses(sentences, *args, **options)
        return [hypotheses[0].text if hypotheses else "" for hypotheses in results]

    def translate_hypotheses(
        self,
        sentences: Sequence[str],
        num_beams: int = 4,
        length_penalty: float = 0.6,
        max_new_tokens: int | None = None,
        paper_decoding: bool = False,
        batch_tokens: int | None = None,
        *,
        nbest: int = 1,
        scores: bool = False,
        alignment: bool = False,
        progress: Callable[[int], None] | None = None,
        on_truncated: Callable[[list[int]], None] | None = None,
        prefixes: Sequence[str | None] | None = None,
        constraints: Sequence[Sequence[str] | None] | None = None,
        on_unmet: Callable[[int, list[str]], None] | None = None,
        sampling: Sampling | None = None,
        target_languages: str | Sequence[str | None] | None = None,
    ) -> list[list[Translation]]:
        """The `nbest` best translations of each sentence (best first; an empty list for a blank sentence), with
        their scores (`scores`) and word alignments (`alignment`): see `vaswani.inference.engines` for what they are.

        `prefixes`: one per sentence (None or "" for none): each translation of that sentence starts with it and
        continues from it, also inside a word ("Die Kat" may go on as "Die Katze"); its score counts the prefix's
        tokens too. A blank sentence still translates to nothing.

        `constraints`: one list of target phrases per sentence (None or [] for none): each phrase appears in the
        translation (lexically constrained decoding, `vaswani.inference.constraints`; PyTorch only). Where the output
        length does not allow it, the sentence still gets a translation and `on_unmet(index, phrases)` gets the
        phrases its best translation lacks (default: a logged warning).

        `sampling` (a `vaswani.inference.engines.Sampling`): each translation drawn at random from the model's
        distribution instead of beam search (`num_beams` 1), `nbest` of them independent samples, in the order drawn;
        one model, without prefixes or constraints. Seed the Translator (`seed`) for the same samples again.

        `target_languages`: one code per sentence (None for none), or one code for every sentence, of a language a
        multilingual model translates into (`Translator.target_languages`): its token (`>>es<<`) goes before the
        sentence's tokens, as MarianTokenizer reads a source that starts with it. A code the model has no token for
        is a `TranslateError`.

        `progress(n)` is called as n more sentences are done; `on_truncated(indices)` gets the (0-based) indices of
        the sentences that were truncated to `max_source_length` (default: a logged warning)."""
        if sampling is not None:
            self.check_sampling(num_beams, prefixes, constraints)
        elif nbest > num_beams:
            raise TranslateError(f"nbest={nbest} needs at least as many beams: use --num_beams {nbest} or more")
        if batch_tokens is None:
            batch_tokens = self.batch_tokens
        results: list[list[Translation]] = [[] for _ in sentences]
        todo = [index for index, sentence in enumerate(sentences) if not is_blank(sentence)]
        if progress is not None and len(todo) < len(sentences):
            progress(len(sentences) - len(todo))
        if not todo:
            return results
        language_ids = self.check_target_languages(target_languages, len(sentences))
        sources = self._encode([sentences[index] for index in todo], todo, on_truncated, language_ids)
        prefix_ids = self._encode_prefixes(prefixes, len(sentences), max_new_tokens)
        constraint_ids = self._encode_constraints(constraints, len(sentences))
        for batch in self._batches_apart(sources, batch_tokens, constraint_ids):
            extra = {}
            if prefix_ids is not None and any(prefix_ids[index] for index in batch):
                extra["prefixes"] = [prefix_ids[index] for index in batch]
            if constraint_ids is not None and any(constraint_ids[index] for index in batch):
                extra["constraints"] = [constraint_ids[index] for index in batch]
            if sampling is not None:
                extra["sampling"] = sampling
            outputs = self._generate([sources[index] for index in batch], num_beams, length_penalty, max_new_tokens,
                                     paper_decoding, nbest, scores, alignment, **extra)  # fmt: skip
            for index, hypotheses in zip(batch, outputs, strict=True):
                # the sentence's own tokens: without EOS, and without its target-language token, which is no word of it
                skip = int(language_ids is not None and language_ids[index] is not None)
                source_tokens = self.tokenizer.convert_ids_to_tokens(sources[index][skip:-1])
                for hypothesis in hypotheses:
                    text = self.tokenizer.decode(hypothesis.ids, skip_special_tokens=True)
                    words = None
                    if alignment:
                        target_tokens = self.tokenizer.convert_ids_to_tokens(hypothesis.ids)
                        attention = [row[skip:] for row in hypothesis.attention]
                        words = hard_alignment(source_tokens, target_tokens, attention)
                    results[index].append(Translation(text, hypothesis.score, words))
                if constraint_ids is not None and constraints[index]:
                    _check_constraints(index, constraints[index], results[index][0].text, on_unmet)
            if progress is not None:
                progress(len(batch))
        return results

    def check_sampling(self, num_beams: int, prefixes=None, constraints=None) -> None:
        """Sampling draws one translation token by token from one model: a `TranslateError` for beams, prefixes,
        constraints or an ensemble (whose searches are beam searches). `translate_hypotheses` checks it; the server
        before a request joins a batch."""
        if num_beams != 1:
            raise TranslateError(f"sampling draws each token at random instead of searching: num_beams must be 1, not "
                                 f"{num_beams} (--num_beams 1, the default with --do_sample)")  # fmt: skip
        if any(prefixes or []) or any(constraints or []):
            raise TranslateError("sampling does not take prefixes or constraints (they need the beam search): leave "
                                 "them out, or --do_sample")  # fmt: skip
        if len(getattr(self, "models", ())) > 1:
            raise TranslateError("an ensemble decodes with beam search only: sample with one model")

    def check_requests(
        self,
        count: int,
        prefixes: Sequence[str | None] | None = None,
        constraints: Sequence[Sequence[str] | None] | None = None,
        max_new_tokens: int | None = None,
        target_languages: str | Sequence[str | None] | None = None,
    ) -> None:
        """Check the `prefixes`, `constraints` and `target_languages` of `count` sentences as `translate_hypotheses`
        does, without decoding: a `TranslateError` says what is wrong (the server refuses a request with it before
        the request joins a batch with others)."""
        self._encode_prefixes(prefixes, count, max_new_tokens)
        self._encode_constraints(constraints, count)
        self.check_target_languages(target_languages, count)

    def _encode(
        self,
        texts: list[str],
        indices: list[int],
        on_truncated: Callable[[list[int]], None] | None,
        language_ids: Sequence[int | None] | None = None,
    ) -> dict[int, list[int]]:
        """Token ids (with EOS) of each sentence by its index, after its target-language token where `language_ids`
        (by sentence index) has one, truncated to `max_source_length`."""
        # verbose=False: transformers' own warning (a sequence over model_max_length "will result in indexing errors")
        # would be wrong here, as the sentences are truncated below and reported by the warning that names them
        with self._encoding:
            encoded = self.tokenizer(texts, verbose=False)["input_ids"]
        if language_ids is not None:
            encoded = [ids if language_ids[index] is None else [language_ids[index], *ids]
                       for index, ids in zip(indices, encoded, strict=True)]  # fmt: skip
        truncated = [index for index, ids in zip(indices, encoded, strict=True) if len(ids) > self.max_source_length]
        if truncated:
            if on_truncated is not None:
                on_truncated(truncated)
            else:
                logger.warning(
                    "Inputs %s are longer than %d tokens and were truncated (max_source_length).",
                    ", ".join(map(str, truncated)),
                    self.max_source_length,
                )
        eos = self.tokenizer.eos_token_id
        return {
            index: truncate_source(ids, self.max_source_length, eos)
            for index, ids in zip(indices, encoded, strict=True)
        }

    def _encode_targets(self, texts: list[str], add_special_tokens: bool = True) -> list[list[int]]:
        """Token ids of target-language texts (references to score, prefixes, constraint phrases), by the tokenizer's
        target side (`text_target`), as training tokenizes the targets: a converted OPUS-MT model's MarianTokenizer
        has a sentencepiece model per language, and the source one would cut a target into pieces the model never
        learnt to produce (other scores, other prefixes); our shared BPE has one side for both."""
        if not texts:
            return []
        with self._encoding:  # a MarianTokenizer switches to its target model and back: no other call meanwhile
            encoded = self.tokenizer(text_target=texts, add_special_tokens=add_special_tokens, verbose=False)
        return encoded["input_ids"]

    def _encode_prefixes(
        self, prefixes: Sequence[str | None] | None, count: int, max_new_tokens: int | None
    ) -> list[list[int] | None] | None:
        """The token ids of each prefix (no special tokens; None for none), or None when no sentence has one. A
        prefix list of the wrong length, or a prefix that does not fit `max_new_tokens` with EOS, is a
        `TranslateError` naming the (1-based) sentence."""
        if prefixes is None:
            return None
        if len(prefixes) != count:
            raise TranslateError(f"{len(prefixes)} prefixes for {count} sentences: give one prefix per sentence "
                                 "(an empty one for none)")  # fmt: skip
        encoded: list[list[int] | None] = []
        for number, prefix in enumerate(prefixes, 1):
            ids = self._encode_targets([prefix], add_special_tokens=False)[0] if prefix else None
            if ids and max_new_tokens is not None and len(ids) + 1 > max_new_tokens:
                raise TranslateError(
                    f"the prefix of sentence {number} has {len(ids)} tokens and does not fit max_new_tokens="
                    f"{max_new_tokens} (the prefix and EOS need {len(ids) + 1}): shorten it or allow more tokens"
                )
            encoded.append(ids or None)
        return encoded if any(encoded) else None

    def _generate(
        self, sources: list[list[int]], num_beams: int, length_penalty: float, max_new_tokens: int | None,
        paper_decoding: bool, nbest: int = 1, scores: bool = False, alignment: bool = False,
        **requests,
    ) -> list[list[Hypothesis]]:  # fmt: skip
        """Decode one batch of token-id lists with the engine (PyTorch or CTranslate2); `requests`: `prefixes` and
        `constraints` of the batch's sentences, as token ids, and `sampling`."""
        return self.engine.generate(
            sources, num_beams=num_beams, length_penalty=length_penalty, max_new_tokens=max_new_tokens,
            paper_decoding=paper_decoding, num_hypotheses=nbest, return_scores=scores, return_attention=alignment,
            **requests,
        )  # fmt: skip

    def _encode_constraints(
        self, constraints: Sequence[Sequence[str] | None] | None, count: int
    ) -> list[list[list[int]]] | None:
        """The token ids of each sentence's phrases (each tokenized as a word of running text), or None when no
        sentence has any. A list of the wrong length or an empty phrase is a `TranslateError`; so are constraints
        on a CTranslate2 folder (CTranslate2 cannot decode with them, and a constraint is never ignored)."""
        if constraints is None:
            return None
        if len(constraints) != count:
            raise TranslateError(f"{len(constraints)} constraint lists for {count} sentences: give one per sentence "
                                 "(an empty one for none)")  # fmt: skip
        encoded = []
        for number, phrases in enumerate(constraints, 1):
            if isinstance(phrases, str):
                raise TranslateError(f"the constraints of sentence {number} are a string: give a list of phrases")
            for phrase in phrases or []:
                if not phrase.strip():
                    raise TranslateError(f"sentence {number} has an empty constraint: every phrase needs text "
                                         "(separate phrases with ' ||| ' and leave an empty line for none)")  # fmt: skip
            encoded.append(self._encode_targets([p.strip() for p in phrases or []], add_special_tokens=False))
        if not any(encoded):
            return None
        if self.backend == "ctranslate2":
            raise TranslateError(CT2_NO_CONSTRAINTS)
        return encoded

    def score(
        self,
        sources: Sequence[str],
        targets: Sequence[str],
        length_penalty: float = 0.6,
        paper_decoding: bool = False,
        batch_tokens: int | None = None,
        *,
        progress: Callable[[int], None] | None = None,
        on_truncated: Callable[[list[int]], None] | None = None,
        first_number: int = 1,
        target_languages: str | Sequence[str | None] | None = None,
    ) -> list[Score]:
        """The model's log-probability of each target given its source (teacher-forced; an ensemble's averaged
        log-probabilities): see `Score`. `score` is normalised as `translate(..., scores=True)` normalises, so a
        translation scores the same both ways. Sources are truncated as for translating; a target must fit the
        decoder (a `TranslateError` naming it, counting from `first_number`). Batches hold `batch_tokens` source
        tokens, by default `Translator.batch_tokens` (on a CPU, small batches score faster too). `target_languages`:
        as for `translate_hypotheses`."""
        if paper_decoding:  # start-up: modeling_vaswani (and PyTorch) load only for the paper's penalty
            from modeling_vaswani.generation_vaswani import gnmt_length_penalty

        if len(sources) != len(targets):
            raise TranslateError(f"{len(sources)} sources and {len(targets)} targets: give one target per source")
        indices = list(range(len(sources)))
        encoded = self._encode(list(sources), indices, on_truncated,
                               self.check_target_languages(target_languages, len(sources)))  # fmt: skip
        target_ids = dict(zip(indices, self._encode_targets(list(targets)), strict=True))
        room = self._decoder_room()
        for index, ids in target_ids.items():
            if room is not None and len(ids) > room:
                raise TranslateError(f"target {index + first_number} has {len(ids)} tokens (EOS included) and does not fit the "
                                     f"model's {room} decoder positions: shorten it")  # fmt: skip
        if batch_tokens is None:
            batch_tokens = self.batch_tokens
        results: list[Score | None] = [None] * len(sources)
        for batch in self._batches(encoded, batch_tokens):
            log_probs = self.engine.score([encoded[i] for i in batch], [target_ids[i] for i in batch])
            for index, values in zip(batch, log_probs, strict=True):
                total, length = float(sum(values)), len(values)
                penalty = gnmt_length_penalty(length, length_penalty) if paper_decoding else length**length_penalty
                tokens = self.tokenizer.convert_ids_to_tokens(target_ids[index])
                results[index] = Score(total / penalty, total, tokens, [float(v) for v in values])
            if progress is not None:
                progress(len(batch))
        return results

    def _decoder_room(self) -> int | None:
        """How many output tokens the decoder can hold (learned positions: the table less the start token)."""
        if self.backend == "ctranslate2":
            return self.engine.positions - 1
        return self.engine.decoder_room

    @staticmethod
    def _batches_apart(
        sources: dict[int, list[int]], batch_tokens: int, constraint_ids: list | None
    ) -> Iterator[list[int]]:
        """`_batches`, with the sentences that have constraints batched apart from the others: a batch without
        prefixes or constraints takes the engine's fast path (`generate()`), and constrained beam search, which is
        slower, runs on the sentences that need it only."""
        if constraint_ids is None:
            yield from Translator._batches(sources, batch_tokens)
            return
        for constrained in (False, True):
            yield from Translator._batches(
                {index: ids for index, ids in sources.items() if bool(constraint_ids[index]) == constrained},
                batch_tokens,
            )

    @staticmethod
    def _batches(sources: dict[int, list[int]], batch_tokens: int) -> Iterator[list[int]]:
        """Indices grouped longest first into batches of at most `batch_tokens` padded source tokens (a longer
        sentence gets a batch of its own)."""
        order = sorted(sources, key=lambda index: (-len(sources[index]), index))
        batch: list[int] = []
        for index in order:
            width = len(sources[batch[0]]) if batch else len(sources[index])  # longest first: the first sets it
            if batch and (len(batch) + 1) * width > batch_tokens:
                yield batch
                batch = []
            batch.append(index)
        if batch:
            yield batch


def missing_constraints(phrases: Sequence[str], text: str) -> list[str]:
    """The phrases (stripped) that do not appear in the detokenized translation `text`: the rule of a met constraint
    (an exact string match)."""
    return [phrase.strip() for phrase in phrases if phrase.strip() not in text]


def _check_constraints(index: int, phrases: Sequence[str], text: str, on_unmet) -> None:
    """Each phrase must appear in the detokenized translation; the missing ones go to `on_unmet(index, phrases)`
    (default: a logged warning)."""
    missing = missing_constraints(phrases, text)
    if not missing:
        return
    if on_unmet is not None:
        on_unmet(index, missing)
    else:
        logger.warning("The translation of sentence %d lacks the constraint(s) %s (the output length did not allow "
                       "them).", index + 1, ", ".join(map(repr, missing)))  # fmt: skip


# ----------------------------------------------------------------------------------------------------------------
# Streaming lines (the command line)
# ----------------------------------------------------------------------------------------------------------------
def read_lines(stream: Iterable[str | bytes], name: str = "the input") -> Iterator[str]:
    """The lines of a text stream opened with newline="\\n" (or of a binary stream, decoded as UTF-8 line by line),
    without their line ending ("\\n" or "\\r\\n") and without a byte-order mark at the start (`decode_line`). A
    line that is not UTF-8 is a `TranslateError` naming `name`, the line number and how to convert the file."""
    for number, line in enumerate(stream, 1):
        try:
            text = decode_line(line, number)
        except UnicodeDecodeError as error:
            hint = conversion_hint(line if number == 1 else b"")
            raise TranslateError(f"{name} is not UTF-8 text: line {number} has the byte {line[error.start]:#04x} at "
                                 f"position {error.start + 1}; {hint}") from error  # fmt: skip
        yield text


INPUT_FIELDS = {"text": str, "prefix": str, "constraints": list, "target_lang": str}


def read_jsonl_requests(lines: Iterable[str], name: str = "the input") -> Iterator[dict]:
    """The JSON-lines input of `vaswani translate --input_format jsonl`: one object per line, {"text": SENTENCE} with
    an optional "prefix" (a string), "constraints" (a list of strings) and "target_lang" (the language of a
    multilingual model to translate this line into); yields dicts with every key of `INPUT_FIELDS` (None where
    absent). A line that is not such an object is a `TranslateError` naming `name` and the line number."""
    for number, line in enumerate(lines, 1):
        try:
            record = json.loads(line)
        except ValueError as error:
            raise TranslateError(f"{name} line {number} is not JSON ({error}): give one JSON object per line, "
                                 'e.g. {"text": "A sentence.", "prefix": "Ein"}') from None  # fmt: skip
        if isinstance(record, dict) and "translation" in record and "text" not in record:  # a --test_file's line
            raise TranslateError(f'{name} line {number} is a sentence pair ({{"translation": ...}}, as --train_file '
                                 'and --test_file hold them): give {"text": "A sentence."} per line, e.g. the sources '
                                 "with `jq -c '{text: .translation.en}' FILE`")  # fmt: skip
        if not isinstance(record, dict) or not isinstance(record.get("text"), str):
            raise TranslateError(f'{name} line {number} has no "text" string: give one JSON object per line, '
                                 'e.g. {"text": "A sentence."}')  # fmt: skip
        unknown = sorted(set(record) - set(INPUT_FIELDS))
        if unknown:
            raise TranslateError(f"{name} line {number} has unknown field(s) {', '.join(map(repr, unknown))}: the "
                                 f"fields are {', '.join(INPUT_FIELDS)}")  # fmt: skip
        for field_name, kind in INPUT_FIELDS.items():
            value = record.get(field_name)
            if value is not None and (not isinstance(value, kind) or (kind is list and not all(
                    isinstance(item, str) for item in value))):  # fmt: skip
                wanted = "a list of strings" if kind is list else "a string"
                raise TranslateError(f'{name} line {number}: "{field_name}" must be {wanted}')
            for text in [value] if isinstance(value, str) else value or []:
                if problem := lone_surrogate(text):
                    raise TranslateError(f'{name} line {number}: "{field_name}" holds {problem}; {LONE_SURROGATE_FIX}')
        yield {field_name: record.get(field_name) for field_name in INPUT_FIELDS}


def _check_phrases(constraints: list[list[str] | None], first_line: int) -> None:
    """An empty phrase is a `TranslateError` naming its (1-based) line, before anything is translated."""
    for number, phrases in enumerate(constraints, first_line):
        if phrases and not isinstance(phrases, str) and any(not phrase.strip() for phrase in phrases):
            raise TranslateError(f"line {number} has an empty constraint: every phrase needs text (separate phrases "
                                 "with ' ||| ' and leave an empty line for none)")  # fmt: skip


def translate_lines(
    translator: Translator,
    lines: Iterable[str],
    *,
    buffer_lines: int = 10000,
    progress: Callable[[int], None] | None = None,
    on_truncated_lines: Callable[[list[int]], None] | None = None,
    on_unmet_line: Callable[[int, list[str]], None] | None = None,
    hypotheses: bool = False,
    prefixes: Iterable[str | None] | None = None,
    constraints: Iterable[list[str] | None] | None = None,
    **options,
) -> Iterator[str] | Iterator[list[Translation]]:
    """One translation per line, in order, reading `buffer_lines` lines at a time (length batching works within a
    buffer). `on_truncated_lines` gets 1-based line numbers, `on_unmet_line(line, phrases)` a 1-based line number
    and the constraints its translation lacks; `options` go to `Translator.translate`, or, with `hypotheses=True`,
    to `Translator.translate_hypotheses` (then each line gives its list of `Translation`s). `prefixes` and
    `constraints` (lists of phrases): one per line, read along with the lines; fewer or more of them than lines is a
    `TranslateError`. `target_languages` in `options` is one language for every line (a string) or, like them, one
    per line (an iterable)."""
    translate = translator.translate_hypotheses if hypotheses else translator.translate
    lines = iter(lines)
    languages = options.pop("target_languages", None)
    if isinstance(languages, str):
        options["target_languages"], languages = languages, None
    requests = {name: iter(stream) for name, stream in (("prefixes", prefixes), ("constraints", constraints),
                                                        ("target_languages", languages)) if stream is not None}  # fmt: skip
    first_line = 1
    while chunk := list(itertools.islice(lines, buffer_lines)):
        for name, stream in requests.items():
            options[name] = list(itertools.islice(stream, len(chunk)))
            if len(options[name]) < len(chunk):
                raise TranslateError(f"the {name} end after line {first_line + len(options[name]) - 1} but the input "
                                     f"goes on: give one line of {name} per input line (an empty line for none)")  # fmt: skip

        def on_truncated(indices: list[int], first_line: int = first_line) -> None:
            if on_truncated_lines is not None:
                on_truncated_lines([first_line + index for index in indices])
            else:
                logger.warning(
                    "Lines %s were truncated (max_source_length).", ", ".join(str(first_line + i) for i in indices)
                )

        def on_unmet(index: int, phrases: list[str], first_line: int = first_line) -> None:
            if on_unmet_line is not None:
                on_unmet_line(first_line + index, phrases)
            else:
                logger.warning("The translation of line %d lacks the constraint(s) %s.", first_line + index,
                               ", ".join(map(repr, phrases)))  # fmt: skip

        if "constraints" in requests:
            options["on_unmet"] = on_unmet
            _check_phrases(options["constraints"], first_line)
        yield from translate(chunk, progress=progress, on_truncated=on_truncated, **options)
        first_line += len(chunk)
    for name, stream in requests.items():
        if next(stream, None) is not None:
            raise TranslateError(f"there are more lines of {name} than the {first_line - 1} input lines: give one "
                                 f"line of {name} per input line")  # fmt: skip
