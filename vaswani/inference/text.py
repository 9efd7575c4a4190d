"""What is done to a text before and after translation: paragraphs split into sentences, HTML into text nodes.

The model translates sentences (it was trained on sentence pairs), so a LibreTranslate `q` (`vaswani serve`) or a
line of `vaswani translate --split_sentences` is cut into pieces and glued back together with the original white
space between them:

- `split_text`: a text is split at line breaks (paragraphs; the line breaks are kept as they were), and each
  paragraph after sentence-final punctuation (`.`, `!`, `?`, `…` and the CJK `。！？`, with any closing quotes or
  brackets after them) followed by white space and a character that is not a lower-case letter. Chinese and Japanese
  put no space between sentences: after `。！？` directly followed by a character that is not a closing quote or
  bracket the text is cut too (`今天很好。我们走吧` in two; `「はい。」と言った` stays whole, the quotation being part of
  its sentence). A full stop after an abbreviation does not end a sentence, by the exceptions of Moses'
  split-sentences.perl, with its lists of non-breaking prefixes for the source language (sacremoses' copy: English
  where it has none): not after a listed prefix ("Dr. Smith", "z. B. Äpfel", German ordinals "am 3. Oktober"), not
  after an upper-case acronym ("the U.S. Army"), and not after a numeric-only prefix followed by a number ("No. 5",
  "pp. 12"). No language model: a client that knows better sends one sentence per `q` item, or uses the native API,
  which never splits.
- `HtmlText`: an HTML fragment or page is parsed with the standard library's `html.parser`; the text nodes are
  translated (each one as a text, so it is split into sentences too) and everything else is written back as it came:
  tags with their attributes exactly as written, comments, doctypes, and the content of `<script>`, `<style>`,
  `<code>`, `<pre>` and `<textarea>`, which are not translated. Text that inline markup cuts into several nodes
  (`Hello <b>world</b>!`) is translated node by node.
"""

from __future__ import annotations

import functools
import html
import re
from dataclasses import dataclass, field
from html.parser import HTMLParser

# Sentence-final punctuation, then closing quotes or brackets, then the white space where the text is cut; or the CJK
# full stops directly followed by the next sentence (cut without a separator).
CLOSERS = r"\"'”’»)\]」』）】〕"  # inside a [...] class: the ] escaped
SENTENCE_END = re.compile(
    rf"(?P<stop>[.!?…。！？]+)(?P<closers>[{CLOSERS}]*)(?P<space>\s+)|[。！？]+(?![{CLOSERS}。！？])(?P<none>)"
)
PARAGRAPH_BREAK = re.compile(r"((?:\r\n|\r|\n)+)")
PREFIX = re.compile(r"[\w.\-]*\Z")  # the word before a full stop: Moses' [\p{IsAlnum}.-]*
PREFIX_WINDOW = 64  # characters looked back for it (no abbreviation is longer)


@functools.cache
def nonbreaking_prefixes(language: str | None) -> tuple[frozenset[str], frozenset[str]]:
    """(prefixes, numeric-only prefixes) of Moses' split-sentences for `language` (a code: "en", "pt-BR" reads "pt"),
    from sacremoses' copy of its lists; English's where it has none, as Moses does. A numeric-only prefix ("No",
    "Art", "pp" in English) is an abbreviation only before a number."""
    from sacremoses.corpus import NonbreakingPrefixes  # (the lists are read when a language is first asked for)

    lists = NonbreakingPrefixes()
    code = next((c for c in (language, re.split(r"[-_]", language or "")[0]) if c in lists.available_langs), "en")
    words, numeric = set(), set()
    for line in lists.words(lists.available_langs[code]):
        word, _, mark = line.partition(" ")
        (numeric if "#NUMERIC_ONLY#" in mark else words).add(word)
    return frozenset(words), frozenset(numeric)


def ends_abbreviation(paragraph: str, match: re.Match, following: str, language: str | None) -> bool:
    """Whether the full stop(s) of `match` (a `SENTENCE_END` followed by white space, then `following`) end an
    abbreviation rather than a sentence: Moses' exceptions, for full stops with no closing quote or bracket after
    them: a listed prefix before them, an upper-case acronym ("U.S."), a numeric-only prefix before a digit."""
    if match.group("closers") or match.group("stop").strip("."):
        return False
    prefix = PREFIX.search(paragraph, max(0, match.start() - PREFIX_WINDOW), match.start()).group()
    words, numeric = nonbreaking_prefixes(language)
    _, dot, last = prefix.rpartition(".")
    acronym = bool(dot and last) and all(c.isupper() or c == "-" for c in last) and any(c.isupper() for c in last)
    return prefix in words or acronym or (prefix in numeric and following.isdigit())


def split_paragraph(paragraph: str, language: str | None = None) -> list[str]:
    """The sentences of one paragraph, and between them the white space they were separated by: [sentence, space,
    sentence, ...] (odd positions are separators, kept to glue the translations back). `language`: the code whose
    abbreviations do not end a sentence (`nonbreaking_prefixes`)."""
    parts, start = [], 0
    for match in SENTENCE_END.finditer(paragraph):
        following = paragraph[match.end() : match.end() + 1]
        if not following or following.islower():
            continue
        if match.group("space") is not None and ends_abbreviation(paragraph, match, following, language):
            continue
        separator = "space" if match.group("space") is not None else "none"
        parts += [paragraph[start : match.start(separator)], match.group(separator)]
        start = match.end()
    parts.append(paragraph[start:])
    return parts


@dataclass
class SplitText:
    """A text cut into `sentences` (what is translated) and the `layout` that puts translations back: a list whose
    items are a str (white space or a line break, kept) or an int (the index of a sentence)."""

    sentences: list[str] = field(default_factory=list)
    layout: list[str | int] = field(default_factory=list)

    def join(self, translations: list[str]) -> str:
        """The text with each sentence replaced by its translation (in the order of `sentences`)."""
        return "".join(translations[item] if isinstance(item, int) else item for item in self.layout)


def split_text(text: str, language: str | None = None) -> SplitText:
    """`text` cut into paragraphs and sentences (see the module docstring), with the abbreviations of `language` (a
    code; None: English's); blank pieces and the white space around a sentence stay in the layout, so `join` gives
    back the text's shape."""
    split = SplitText()
    for index, chunk in enumerate(PARAGRAPH_BREAK.split(text)):
        if index % 2:  # a run of line breaks, kept
            split.layout.append(chunk)
            continue
        for position, part in enumerate(split_paragraph(chunk, language)):
            stripped = part.strip()
            if position % 2 or not stripped:
                split.layout.append(part)
                continue
            lead, trail = part[: len(part) - len(part.lstrip())], part[len(part.rstrip()) :]
            split.layout += [lead, len(split.sentences), trail]
            split.sentences.append(stripped)
    return split


# ---------------------------------------------------------------------------------------------------------------------
# HTML
# ---------------------------------------------------------------------------------------------------------------------
UNTRANSLATED_ELEMENTS = {"script", "style", "code", "pre", "textarea"}


class HtmlText(HTMLParser):
    """An HTML document read into `parts`: markup kept as written (str) and text nodes to translate (`SplitText`).

    `texts()` are the text nodes' `SplitText`s in order; `render(translated)` gives the document back with each
    text node's sentences replaced by `translated` (one list of strings per text node), escaped for HTML."""

    def __init__(self, document: str, language: str | None = None):
        super().__init__(convert_charrefs=True)
        self.language = language  # of the text nodes' abbreviations (`split_text`)
        self.parts: list[str | SplitText] = []
        self._untranslated: list[str] = []  # the open elements whose content is kept as it is
        self.feed(document)
        self.close()

    def handle_starttag(self, tag, attrs):
        self.parts.append(self.get_starttag_text())
        if tag in UNTRANSLATED_ELEMENTS:
            self._untranslated.append(tag)

    def handle_startendtag(self, tag, attrs):
        self.parts.append(self.get_starttag_text())

    def handle_endtag(self, tag):
        self.parts.append(f"</{tag}>")
        if tag in self._untranslated:
            del self._untranslated[self._untranslated.index(tag) :]

    def handle_data(self, data):
        if self._untranslated or self.cdata_elem is not None or not data.strip():
            # <script>/<style> content arrives raw (cdata_elem), other kept text was unescaped: escape it back
            self.parts.append(data if self.cdata_elem is not None else html.escape(data, quote=False))
            return
        self.parts.append(split_text(data, self.language))

    def handle_comment(self, data):
        self.parts.append(f"<!--{data}-->")

    def handle_decl(self, decl):
        self.parts.append(f"<!{decl}>")

    def handle_pi(self, data):
        self.parts.append(f"<?{data}>")

    def unknown_decl(self, data):
        self.parts.append(f"<![{data}]>")

    def texts(self) -> list[SplitText]:
        return [part for part in self.parts if isinstance(part, SplitText)]

    def render(self, translated: list[list[str]]) -> str:
        translations = iter(translated)
        return "".join(
            html.escape(part.join(next(translations)), quote=False) if isinstance(part, SplitText) else part
            for part in self.parts
        )
