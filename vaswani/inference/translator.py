"""Translate many sentences with a saved model: the engine of `vaswani translate`.

    from vaswani.inference.translator import Translator

    translator = Translator("runs/base-avg5")              # a local save_pretrained folder with its tokenizer
    translator.translate(["A sentence.", "", "Another one."])  # -> ["Ein Satz.", "", "Noch einer."]

`Translator.translate` tokenizes every sentence, sorts them by length, decodes them in batches of about
`batch_tokens` source tokens (padding included, so similar lengths share a batch and little is wasted on padding) and
returns the translations in the input order. A whitespace-only sentence translates to "" without running the model.

Decoding is the model's beam search: `num_beams=4`, `length_penalty=0.6` as in the paper. Without
`max_new_tokens`, each batch is capped at its longest source + 50 tokens (the model's `generate()`); with
`paper_decoding=True` beams are ranked by the paper's GNMT length penalty and every sentence is capped at its own
source length + 50 (`modeling_vaswani.generation_vaswani.paper_beam_search`).

Over-long inputs: a sentence of more than `max_source_length` tokens (EOS included; default: the model's
`max_position_embeddings`) is truncated to that length, keeping its EOS, and a warning names it (the command line
names the line numbers). The output of a model with learned positions is also kept within its position table.

`translate_lines` is the streaming loop of the command line: it reads `buffer_lines` lines at a time, translates
them as above and yields one translation per line.
"""

from __future__ import annotations

import itertools
import json
import logging
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from vaswani.constants import EXPORT_INFO_FILE, SEQ2SEQ_MODEL_TYPE
from vaswani.devices import resolve_device
from vaswani.errors import TranslateError
from vaswani.export.ctranslate2 import RUNS_WITH, is_ctranslate2_folder
from vaswani.inference.engines import BACKENDS, CTranslate2Engine, TorchEngine, hard_alignment
from vaswani.model_folder import check_model_folder, load_model_folder, load_tokenizer

if TYPE_CHECKING:
    from vaswani.inference.engines import Hypothesis

logger = logging.getLogger(__name__)


@dataclass
class Translation:
    """One translation of a sentence: its text, its model score (None unless asked for) and its word alignments,
    (source word, target word) pairs counted from 0 (None unless asked for). See `vaswani.inference.engines`."""

    text: str
    score: float | None = None
    alignment: list[tuple[int, int]] | None = None


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
            f"{model} is not a CTranslate2 export: make one with vaswani export --model {model} --output OUT "
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


# ----------------------------------------------------------------------------------------------------------------
# The translator
# ----------------------------------------------------------------------------------------------------------------
class Translator:
    """A model and its tokenizer loaded once from a folder, in eval mode on `device` ("auto", "cpu", "cuda").

    `max_source_length`: longer inputs are truncated to this many tokens (default: the model's
    `max_position_embeddings`). `backend`, `dtype`, `parallel_batches`: see `vaswani.inference.engines` (`parallel_batches`:
    CTranslate2 decodes each batch as that many parts at once; default one per CPU thread, `ct2_threads`)."""

    def __init__(
        self,
        model: str | Path,
        device: str = "auto",
        max_source_length: int | None = None,
        *,
        trust_remote_code: bool = False,
        backend: str = "auto",
        dtype: str = "float32",
        parallel_batches: int | None = None,
    ):
        if _choose_backend(check_model_folder(model, need_weights=False), backend) == "ctranslate2":
            self._init_ctranslate2(Path(model), device, max_source_length, dtype, parallel_batches)
            return
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
        self.engine = TorchEngine(self.model, self.tokenizer, self.device, dtype)
        self.backend = "torch"

    def _init_ctranslate2(
        self, folder: Path, device: str, max_source_length: int | None, dtype: str, parallel_batches: int | None
    ) -> None:
        """A folder written by `vaswani export --format ctranslate2`: CTranslate2 decodes, our tokenizer (saved in
        the folder) encodes and decodes; each batch in `parallel_batches` parts at once (default: one per CPU
        thread; see `vaswani.inference.engines.ct2_threads`)."""

        self.folder, self.model, self.backend = folder, None, "ctranslate2"
        self.tokenizer = load_tokenizer(folder)  # checked: present, loadable, a real tokenizer
        self.engine = CTranslate2Engine(folder, self.tokenizer, device, dtype, parallel_batches=parallel_batches)
        self.device = self.engine.device
        self._set_max_source_length(max_source_length, self.engine.positions)

    def _set_max_source_length(self, max_source_length: int | None, positions: int) -> None:
        """Inputs are truncated to `max_source_length` tokens, by default the model's number of `positions`."""
        self.max_source_length = max_source_length or positions
        if self.max_source_length < 2:
            raise TranslateError(f"max_source_length={self.max_source_length}: use at least 2 (a token and EOS)")

    def translate(self, sentences: Sequence[str], *args, **options) -> list[str]:
        """The translations of `sentences`, in their order ("" for a blank one): the best hypothesis of
        `translate_hypotheses(sentences, ...)`, which takes the same arguments (`num_beams`, `length_penalty`,
        `max_new_tokens`, `paper_decoding`, `batch_tokens`, `progress`, `on_truncated`)."""
        results = self.translate_hypotheses(sentences, *args, **options)
        return [hypotheses[0].text if hypotheses else "" for hypotheses in results]

    def translate_hypotheses(
        self,
        sentences: Sequence[str],
        num_beams: int = 4,
        length_penalty: float = 0.6,
        max_new_tokens: int | None = None,
        paper_decoding: bool = False,
        batch_tokens: int = 4096,
        *,
        nbest: int = 1,
        scores: bool = False,
        alignment: bool = False,
        progress: Callable[[int], None] | None = None,
        on_truncated: Callable[[list[int]], None] | None = None,
    ) -> list[list[Translation]]:
        """The `nbest` best translations of each sentence (best first; an empty list for a blank sentence), with
        their scores (`scores`) and word alignments (`alignment`): see `vaswani.inference.engines` for what they are.

        `progress(n)` is called as n more sentences are done; `on_truncated(indices)` gets the (0-based) indices of
        the sentences that were truncated to `max_source_length` (default: a logged warning)."""
        # start-up: torch and transformers load only when a model is loaded
        from modeling_vaswani.pipeline_vaswani import is_blank  # the pipeline's rule, so both agree

        if nbest > num_beams:
            raise TranslateError(f"nbest={nbest} needs at least as many beams: use --num_beams {nbest} or more")
        results: list[list[Translation]] = [[] for _ in sentences]
        todo = [index for index, sentence in enumerate(sentences) if not is_blank(sentence)]
        if progress is not None and len(todo) < len(sentences):
            progress(len(sentences) - len(todo))
        if not todo:
            return results
        sources = self._encode([sentences[index] for index in todo], todo, on_truncated)
        for batch in self._batches(sources, batch_tokens):
            outputs = self._generate([sources[index] for index in batch], num_beams, length_penalty, max_new_tokens,
                                     paper_decoding, nbest, scores, alignment)  # fmt: skip
            for index, hypotheses in zip(batch, outputs, strict=True):
                source_tokens = self.tokenizer.convert_ids_to_tokens(sources[index][:-1])  # without EOS
                for hypothesis in hypotheses:
                    text = self.tokenizer.decode(hypothesis.ids, skip_special_tokens=True)
                    words = None
                    if alignment:
                        target_tokens = self.tokenizer.convert_ids_to_tokens(hypothesis.ids)
                        words = hard_alignment(source_tokens, target_tokens, hypothesis.attention)
                    results[index].append(Translation(text, hypothesis.score, words))
            if progress is not None:
                progress(len(batch))
        return results

    def _encode(
        self, texts: list[str], indices: list[int], on_truncated: Callable[[list[int]], None] | None
    ) -> dict[int, list[int]]:
        """Token ids (with EOS) of each sentence by its index, truncated to `max_source_length`."""
        # start-up: torch and transformers load only when a model is loaded
        from modeling_vaswani.pipeline_vaswani import truncate_source  # the pipeline's rule, so both agree

        encoded = self.tokenizer(texts)["input_ids"]
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

    def _generate(
        self, sources: list[list[int]], num_beams: int, length_penalty: float, max_new_tokens: int | None,
        paper_decoding: bool, nbest: int = 1, scores: bool = False, alignment: bool = False,
    ) -> list[list[Hypothesis]]:  # fmt: skip
        """Decode one batch of token-id lists with the engine (PyTorch or CTranslate2)."""
        return self.engine.generate(
            sources, num_beams=num_beams, length_penalty=length_penalty, max_new_tokens=max_new_tokens,
            paper_decoding=paper_decoding, num_hypotheses=nbest, return_scores=scores, return_attention=alignment,
        )  # fmt: skip

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


# ----------------------------------------------------------------------------------------------------------------
# Streaming lines (the command line)
# ----------------------------------------------------------------------------------------------------------------
def read_lines(stream: Iterable[str | bytes], name: str = "the input") -> Iterator[str]:
    """The lines of a text stream opened with newline="\\n" (or of a binary stream, decoded as UTF-8 line by line),
    without their line ending ("\\n" or "\\r\\n"). A line that is not UTF-8 is a `TranslateError` naming `name`
    and the line number."""
    for number, line in enumerate(stream, 1):
        if isinstance(line, bytes):
            try:
                line = line.decode("utf-8")
            except UnicodeDecodeError as error:
                raise TranslateError(
                    f"{name} is not UTF-8 text: line {number} has the byte {line[error.start]:#04x} at position "
                    f"{error.start + 1}; convert the file to UTF-8 (e.g. iconv -f latin1 -t utf-8)"
                ) from error
        yield line.removesuffix("\n").removesuffix("\r")


def translate_lines(
    translator: Translator,
    lines: Iterable[str],
    *,
    buffer_lines: int = 10000,
    progress: Callable[[int], None] | None = None,
    on_truncated_lines: Callable[[list[int]], None] | None = None,
    hypotheses: bool = False,
    **options,
) -> Iterator[str] | Iterator[list[Translation]]:
    """One translation per line, in order, reading `buffer_lines` lines at a time (length batching works within a
    buffer). `on_truncated_lines` gets 1-based line numbers; `options` go to `Translator.translate`, or, with
    `hypotheses=True`, to `Translator.translate_hypotheses` (then each line gives its list of `Translation`s)."""
    translate = translator.translate_hypotheses if hypotheses else translator.translate
    lines = iter(lines)
    first_line = 1
    while chunk := list(itertools.islice(lines, buffer_lines)):

        def on_truncated(indices: list[int], first_line: int = first_line) -> None:
            if on_truncated_lines is not None:
                on_truncated_lines([first_line + index for index in indices])
            else:
                logger.warning(
                    "Lines %s were truncated (max_source_length).", ", ".join(str(first_line + i) for i in indices)
                )

        yield from translate(chunk, progress=progress, on_truncated=on_truncated, **options)
        first_line += len(chunk)
