"""Cleaning a parallel training corpus: the pairs that teach a translation model the wrong thing, dropped before
training (`--max_length_ratio`, `--drop_duplicates`, `--drop_copies`, `--drop_held_out_sources` of `vaswani train`
and `vaswani prepare`).

Web-crawled corpora (ParaCrawl, CCMatrix, most of OPUS) hold misaligned pairs, untranslated text and the same pair
many times over. Khayrallah & Koehn (2018, "On the Impact of Various Types of Noise on Neural Machine Translation")
found untranslated copies of the source the most harmful of these noises: a few percent teach the model to copy its
input. The filters are the usual ones of the toolkits' recipes, each off unless asked for:

- length ratio: a pair whose longer side has more than R times the tokens of its shorter side is misaligned or a
  fragment; Moses' clean-corpus-n.perl drops it (-ratio, default 9, on words), fairseq's WMT'14 EN-DE recipe with
  R = 1.5 on its BPE tokens. Here: the training tokens, EOS not counted (over-long pairs: their tokens as
  `--overlong truncate` keeps them);
- copies: the target is the source again (after removing surrounding white space; OpenNMT-py's `clean` transform,
  src_eq_tgt). Some copies are right (names, numbers, code): drop them where the corpus is crawled, not curated;
- duplicates: a pair (both sides, exactly) that an earlier pair of the split already is; the first is kept. A
  repeated pair weighs more in training than it deserves and makes the epoch longer;
- held-out sources: a training pair whose source sentence (surrounding white space aside) is the source of a
  validation or test pair. Corpora split at random hold the same sentence on both sides of the split (software
  strings, boilerplate, subtitles): the model is then chosen and scored on sentences it learned by heart, and the
  scores promise more than it does on new text.

Only the training split is cleaned: validation and test pairs are scored whole, as with over-long pairs.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, fields

import datasets
import numpy as np

READ_BATCH = 65_536
"""Pairs read from the Arrow table at a time (copies and duplicates look at the text)."""


@dataclass(frozen=True)
class PairFilter:
    """What a run drops from its training pairs (`from_args`), and `drops`, which finds those pairs."""

    max_length_ratio: float | None = None  # --max_length_ratio R: longer side's tokens / shorter side's, at most R
    drop_duplicates: bool = False  # --drop_duplicates: every repeat of an earlier pair
    drop_copies: bool = False  # --drop_copies: pairs whose target is the source
    drop_held_out_sources: bool = False  # --drop_held_out_sources: pairs whose source a validation or test pair has

    @classmethod
    def from_args(cls, args) -> PairFilter:
        return cls(args.max_length_ratio, args.drop_duplicates, args.drop_copies, args.drop_held_out_sources)

    def options(self) -> dict:
        """The filters that are on, as option name -> value (for the tokens' cache key; {} when none is)."""
        return {name: value for name, value in asdict(self).items() if value not in (None, False)}

    def described(self) -> list[tuple[str, str, str]]:
        """The filters that are on, each as (its count's name in `drops`, the pairs it drops in words, the option
        that turns it on), in `drops`' order: the one wording of the log, the errors and the model card."""
        rules = []
        if self.max_length_ratio is not None:
            ratio = f"{self.max_length_ratio:g}"
            rules.append(("length_ratio", f"with a length ratio over {ratio}", f"--max_length_ratio {ratio}"))
        for name, on, words in (
            ("copies", self.drop_copies, "untranslated copies of their source"),
            ("duplicates", self.drop_duplicates, "repeats of an earlier pair"),
            ("held_out_sources", self.drop_held_out_sources, "with the source of a validation or test pair"),
        ):
            if on:
                rules.append((name, words, f"--drop_{name}"))
        return rules

    def drops(self, pairs: datasets.Dataset, source_lang: str, target_lang: str, source_length: np.ndarray,
              target_length: np.ndarray, held_out: Sequence[datasets.Dataset] = ()
              ) -> tuple[np.ndarray, dict[str, int]]:  # fmt: skip
        """The pairs to drop and how many each filter found (a pair may be counted by several).

        Args:
            pairs: the split's text, a "translation" column of {source_lang: str, target_lang: str}.
            source_length, target_length: (num_pairs,) each pair's tokens, EOS included (the tokenized split's
                length columns, in the same order).
            held_out: the validation and test splits' text, as `pairs` (read for `drop_held_out_sources`).

        Returns:
            ``(drop, counts)``: a (num_pairs,) bool mask, and filter name -> pairs it flags ("length_ratio",
            "copies", "duplicates", "held_out_sources"; only the filters that are on).
        """
        drop = np.zeros(len(pairs), dtype=bool)
        counts = {}
        if self.max_length_ratio is not None:
            shorter = np.maximum(np.minimum(source_length, target_length) - 1, 1)  # EOS not counted
            longer = np.maximum(source_length, target_length) - 1
            over = longer > self.max_length_ratio * shorter  # (num_pairs,)
            drop |= over
            counts["length_ratio"] = int(over.sum())
        reading = [name for name, on in (("copies", self.drop_copies), ("duplicates", self.drop_duplicates),
                                          ("held_out_sources", self.drop_held_out_sources)) if on]  # fmt: skip
        if reading:  # the filters that read the text: one pass for all of them
            flagged = self._read_text(pairs, source_lang, target_lang, held_out)
            for name in reading:
                drop |= flagged[name]
                counts[name] = int(flagged[name].sum())
        return drop, counts

    def _read_text(self, pairs: datasets.Dataset, source_lang: str, target_lang: str,
                   held_out: Sequence[datasets.Dataset]) -> dict[str, np.ndarray]:  # fmt: skip
        """The flags of the filters that read the text, from one pass over it: "copies", "held_out_sources" and,
        with `drop_duplicates`, "duplicates" (each (num_pairs,) bool). A pair is identified by a 128-bit digest of
        its sides (a false repeat is as likely as a BLAKE2b-128 collision: never)."""
        scored = ({source.strip() for split in held_out for source, _ in _texts(split, source_lang, target_lang)}
                  if self.drop_held_out_sources else set())  # fmt: skip
        copies, known, digests = [], [], bytearray()
        for source, target in _texts(pairs, source_lang, target_lang):
            stripped = source.strip()
            copies.append(stripped == target.strip())
            known.append(stripped in scored)
            if self.drop_duplicates:
                source_bytes = source.encode("utf-8")  # (Arrow holds valid UTF-8 only)
                # the source's length first: ("ab", "c") and ("a", "bc") are different pairs
                digests += hashlib.blake2b(len(source_bytes).to_bytes(8, "little") + source_bytes
                                           + target.encode("utf-8"), digest_size=16).digest()  # fmt: skip
        flags = {"copies": np.array(copies, dtype=bool), "held_out_sources": np.array(known, dtype=bool)}
        if self.drop_duplicates:
            keys = np.frombuffer(bytes(digests), dtype=np.uint64).reshape(-1, 2)  # (num_pairs, 2)
            flags["duplicates"] = np.ones(len(keys), dtype=bool)
            flags["duplicates"][np.unique(keys, axis=0, return_index=True)[1]] = False  # each pair's first occurrence
        return flags


CLEANING_OPTIONS = tuple(option.name for option in fields(PairFilter))
"""The options of `vaswani train` and `vaswani prepare` that clean the training pairs (`PairFilter`'s fields)."""


def _texts(pairs: datasets.Dataset, source_lang: str, target_lang: str) -> Iterator[tuple[str, str]]:
    """(source, target) of every pair in order, read from the Arrow table `READ_BATCH` pairs at a time."""
    for batch in pairs.with_format("arrow").iter(batch_size=READ_BATCH):
        translation = batch.column("translation").combine_chunks()
        yield from zip(
            translation.field(source_lang).to_pylist(), translation.field(target_lang).to_pylist(), strict=True
        )
