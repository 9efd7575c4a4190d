"""Translate many sentences with a saved model: the engine of `vaswani translate`.

    from vaswani.translate import Translator

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
import logging
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from vaswani.model_folder import ModelFolderError, check_model_folder, load_model_folder

if TYPE_CHECKING:
    import torch

logger = logging.getLogger(__name__)


class TranslateError(ValueError):
    """A translation cannot run as asked (a bad device or length). The message names the problem and the fix; the
    command line prints it without a traceback."""


# ----------------------------------------------------------------------------------------------------------------
# Devices
# ----------------------------------------------------------------------------------------------------------------
def resolve_device(device: str) -> str:
    """The device to run on: "auto" gives "cuda" if a GPU is visible, else "cpu"; or a torch device ("cuda:1")."""
    import torch

    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    try:
        kind = torch.device(device).type
    except RuntimeError:
        raise TranslateError(f"unknown device {device!r}: use auto, cpu, cuda or cuda:N") from None
    if kind == "cuda" and not torch.cuda.is_available():
        raise TranslateError(f"device {device!r} was requested but no CUDA GPU is available: use --device cpu")
    return device


# ----------------------------------------------------------------------------------------------------------------
# The translator
# ----------------------------------------------------------------------------------------------------------------
class Translator:
    """A model and its tokenizer loaded once from a folder, in eval mode on `device` ("auto", "cpu", "cuda").

    `max_source_length`: longer inputs are truncated to this many tokens (default: the model's
    `max_position_embeddings`)."""

    def __init__(
        self,
        model: str | Path,
        device: str = "auto",
        max_source_length: int | None = None,
        *,
        trust_remote_code: bool = False,
    ):
        self.folder = Path(model)
        self.device = resolve_device(device)
        # checked: a local folder, weights that fit config.json, a tokenizer that fits the model; the folder's own
        # code runs only with trust_remote_code=True
        self.model, self.tokenizer = load_model_folder(self.folder, trust_remote_code=trust_remote_code)
        self.model.to(self.device).eval()
        config = self.model.config
        self.max_source_length = max_source_length or config.max_position_embeddings
        if self.max_source_length < 2:
            raise TranslateError(f"max_source_length={self.max_source_length}: use at least 2 (a token and EOS)")
        # Learned positions end at the table; the decoder's start token takes position 0.
        self._decoder_room = (
            config.max_position_embeddings - 1 if config.position_embedding_type == "learned" else None
        )

    def translate(
        self,
        sentences: Sequence[str],
        num_beams: int = 4,
        length_penalty: float = 0.6,
        max_new_tokens: int | None = None,
        paper_decoding: bool = False,
        batch_tokens: int = 4096,
        *,
        progress: Callable[[int], None] | None = None,
        on_truncated: Callable[[list[int]], None] | None = None,
    ) -> list[str]:
        """The translations of `sentences`, in their order.

        `progress(n)` is called as n more sentences are done; `on_truncated(indices)` gets the (0-based) indices of
        the sentences that were truncated to `max_source_length` (default: a logged warning)."""
        from modeling_vaswani.pipeline_vaswani import is_blank  # the pipeline's rule, so both agree

        translations = [""] * len(sentences)
        todo = [index for index, sentence in enumerate(sentences) if not is_blank(sentence)]
        if progress is not None and len(todo) < len(sentences):
            progress(len(sentences) - len(todo))
        if not todo:
            return translations
        sources = self._encode([sentences[index] for index in todo], todo, on_truncated)
        for batch in self._batches(sources, batch_tokens):
            output_ids = self._generate([sources[index] for index in batch], num_beams, length_penalty,
                                        max_new_tokens, paper_decoding)  # fmt: skip
            for index, text in zip(
                batch, self.tokenizer.batch_decode(output_ids, skip_special_tokens=True), strict=True
            ):
                translations[index] = text
            if progress is not None:
                progress(len(batch))
        return translations

    def _encode(
        self, texts: list[str], indices: list[int], on_truncated: Callable[[list[int]], None] | None
    ) -> dict[int, list[int]]:
        """Token ids (with EOS) of each sentence by its index, truncated to `max_source_length`."""
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

    def _generate(
        self, sources: list[list[int]], num_beams: int, length_penalty: float, max_new_tokens: int | None,
        paper_decoding: bool,
    ) -> torch.Tensor:  # fmt: skip
        """Beam search on one batch of token-id lists; returns the output ids (B, T)."""
        import torch

        longest = max(len(ids) for ids in sources)
        input_ids = torch.full((len(sources), longest), self.tokenizer.pad_token_id, dtype=torch.long)
        attention_mask = torch.zeros_like(input_ids)
        for row, ids in enumerate(sources):
            input_ids[row, : len(ids)] = torch.tensor(ids)
            attention_mask[row, : len(ids)] = 1
        return self.model.generate(
            input_ids=input_ids.to(self.device),
            attention_mask=attention_mask.to(self.device),
            num_beams=num_beams,
            length_penalty=length_penalty,
            paper_decoding=paper_decoding,
            **self._length_limit(longest, max_new_tokens, paper_decoding),
        )

    def _length_limit(self, longest_source: int, max_new_tokens: int | None, paper_decoding: bool) -> dict:
        """`generate()` length arguments: the user's `max_new_tokens`, else the model's own cap (source + 50), in
        both cases kept inside a learned position table."""
        room = self._decoder_room
        if max_new_tokens is not None:
            return {"max_new_tokens": max_new_tokens if room is None else min(max_new_tokens, room)}
        if room is None:
            return {}
        if paper_decoding:  # per-sentence caps of source + 50, and never past the table
            return {"max_length": room + 1}
        return {"max_new_tokens": min(longest_source + self.model.MAX_NEW_TOKENS_OVER_SOURCE, room)}


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
                ) from None
        yield line.removesuffix("\n").removesuffix("\r")


def translate_lines(
    translator: Translator,
    lines: Iterable[str],
    *,
    buffer_lines: int = 10000,
    progress: Callable[[int], None] | None = None,
    on_truncated_lines: Callable[[list[int]], None] | None = None,
    **options,
) -> Iterator[str]:
    """One translation per line, in order, reading `buffer_lines` lines at a time (length batching works within a
    buffer). `on_truncated_lines` gets 1-based line numbers; `options` go to `Translator.translate`."""
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

        yield from translator.translate(chunk, progress=progress, on_truncated=on_truncated, **options)
        first_line += len(chunk)


def one_line(text: str) -> str:
    """A translation as one output line: line breaks inside it (a model can emit them) become spaces."""
    return text.replace("\r\n", " ").replace("\n", " ").replace("\r", " ")


__all__ = [
    "ModelFolderError",
    "TranslateError",
    "Translator",
    "check_model_folder",
    "one_line",
    "read_lines",
    "resolve_device",
    "translate_lines",
]
