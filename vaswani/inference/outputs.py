"""The output formats of `vaswani translate` (sockeye's output_handler.py: one class per format).

- `TextOutput` ("text"): one line per hypothesis, best first, fields joined by " ||| " as in Moses' and fairseq's
  n-best lists: `INDEX ||| TRANSLATION`, then ` ||| SCORE` when scores were asked for and ` ||| ALIGNMENT` when
  alignments were (`i-j` pairs: source word i, target word j, 0-based, space-separated); a blank input gives one line
  with empty fields. Scores are printed with 6 decimals.
- `JsonlOutput` ("jsonl"): one JSON object per input line: {"line": INDEX, "hypotheses": [{"text": ..., "score": ...,
  "alignment": "0-0 1-2 ..."}, ...]} (score and alignment only when asked for).

Plain translations (no --nbest, --scores, --alignment, --format) are written as `one_line(text)`, one per input line.
"""

from __future__ import annotations

import json

from vaswani.errors import TranslateError
from vaswani.inference.translator import Translation


def one_line(text: str) -> str:
    """A translation as one output line: line breaks inside it (a model can emit them) become spaces."""
    return text.replace("\r\n", " ").replace("\n", " ").replace("\r", " ")


def format_alignment(pairs: list[tuple[int, int]]) -> str:
    """Word alignments in the common `i-j` format (Pharaoh / fast_align / Marian): "0-0 1-2 2-1"."""
    return " ".join(f"{i}-{j}" for i, j in pairs)


class TextOutput:
    """Moses / fairseq n-best lines: `INDEX ||| TRANSLATION [||| SCORE] [||| ALIGNMENT]`, one per hypothesis."""

    def __init__(self, scores: bool, alignment: bool):
        self.scores, self.alignment = scores, alignment

    def lines(self, index: int, translations: list[Translation]) -> list[str]:
        lines = []
        for translation in translations or [Translation("")]:
            fields = [str(index), one_line(translation.text)]
            if self.scores:
                fields.append("" if translation.score is None else f"{translation.score:.6f}")
            if self.alignment:
                fields.append(format_alignment(translation.alignment or []))
            lines.append(" ||| ".join(fields))
        return lines


class JsonlOutput:
    """One JSON object per input line with its hypotheses (score and alignment only when asked for)."""

    def __init__(self, scores: bool, alignment: bool):
        self.scores, self.alignment = scores, alignment

    def lines(self, index: int, translations: list[Translation]) -> list[str]:
        entries = []
        for translation in translations:
            entry = {"text": one_line(translation.text)}
            if self.scores:
                entry["score"] = translation.score
            if self.alignment:
                entry["alignment"] = format_alignment(translation.alignment or [])
            entries.append(entry)
        return [json.dumps({"line": index, "hypotheses": entries}, ensure_ascii=False)]


OUTPUTS = {"text": TextOutput, "jsonl": JsonlOutput}
OUTPUT_FORMATS = tuple(OUTPUTS)


def output_handler(output_format: str = "text", *, scores: bool = False, alignment: bool = False):
    """The handler of `output_format` (chosen once per command); a `TranslateError` for an unknown format."""
    if output_format not in OUTPUTS:
        raise TranslateError(f"unknown output format {output_format!r}: use one of {', '.join(OUTPUT_FORMATS)}")
    return OUTPUTS[output_format](scores, alignment)


def format_hypotheses(
    index: int, translations: list[Translation], output_format: str = "text", *, scores: bool = False,
    alignment: bool = False,
) -> list[str]:  # fmt: skip
    """The output lines of input line `index` (0-based) with its n-best `translations` (an empty list for a blank
    line), for `--nbest`, `--scores`, `--alignment`, in `output_format` (see the module docstring)."""
    return output_handler(output_format, scores=scores, alignment=alignment).lines(index, translations)
