"""The BPE trainer's options through `python -m tokenization train`: `--limit_alphabet`, `--min_frequency` and
`--normalization`, each checked against a count or a normalization done here independently of `tokenizers`."""

from __future__ import annotations

import json
import unicodedata
from collections import Counter
from pathlib import Path

import pytest
from test_bpe import ENGLISH, GERMAN, corpus_files  # noqa: F401  (corpus_files is a fixture)

from tokenization import load_tokenizer
from tokenization.__main__ import main

BOUNDARY = "\u2581"


def train_with_cli(files, output: Path, *options: str):
    assert main(["train", "--files", *map(str, files), "--output_dir", str(output), *options]) == 0
    return load_tokenizer(output), json.loads((output / "tokenizer.json").read_text(encoding="utf-8"))


def corpus_words(form: str = "NFKC") -> Counter:
    """The words BPE trains on, counted: each line normalized, "▁" in front and for every space, split before
    each "▁" (the pipeline described in tokenization/bpe.py)."""
    words = Counter()
    for line in ENGLISH + GERMAN:
        text = BOUNDARY + unicodedata.normalize(form, line).replace(" ", BOUNDARY)
        words.update(BOUNDARY + piece for piece in text.split(BOUNDARY) if piece)
    return words


def test_limit_alphabet_keeps_the_most_frequent_characters_and_spells_the_rest_in_bytes(corpus_files, tmp_path):  # noqa: F811
    characters = Counter()
    for word, count in corpus_words().items():
        for character in word:
            characters[character] += count
    ranked = [c for c, _ in characters.most_common()]
    limit = 30
    assert characters[ranked[limit - 1]] > characters[ranked[limit]]  # no tie at the cut
    tokenizer, saved = train_with_cli(corpus_files, tmp_path / "tok", "--vocab_size", "400", "--limit_alphabet",
                                      str(limit))  # fmt: skip
    alphabet = {token for token in saved["model"]["vocab"] if len(token) == 1}
    assert alphabet == set(ranked[:limit])
    left_out = [c for c in ranked[limit:] if c.isalpha() and not c.isascii()]  # e.g. ß, ü, ö
    assert left_out
    for character in left_out:
        tokens = tokenizer.convert_ids_to_tokens(tokenizer(character)["input_ids"])
        expected = [f"<0x{byte:02X}>" for byte in character.encode("utf-8")]
        assert tokens[-len(expected) - 1 : -1] == expected, (character, tokens)
    text = "Die Straße über Köln."
    assert tokenizer.decode(tokenizer(text)["input_ids"], skip_special_tokens=True) == text
    # Without the limit every character of the corpus is a symbol.
    _, unlimited = train_with_cli(corpus_files, tmp_path / "all", "--vocab_size", "400")
    assert {token for token in unlimited["model"]["vocab"] if len(token) == 1} == set(ranked)


def pair_counts(segmented: dict[str, list[str]], words: Counter) -> Counter:
    counts = Counter()
    for word, symbols in segmented.items():
        for pair in zip(symbols, symbols[1:], strict=False):
            counts[pair] += words[word]
    return counts


def merge(symbols: list[str], a: str, b: str) -> list[str]:
    merged, i = [], 0
    while i < len(symbols):
        if i + 1 < len(symbols) and symbols[i] == a and symbols[i + 1] == b:
            merged.append(a + b)
            i += 2
        else:
            merged.append(symbols[i])
            i += 1
    return merged


@pytest.mark.parametrize("min_frequency", [5, 12])
def test_min_frequency_is_the_least_count_of_every_merge(corpus_files, tmp_path, min_frequency):  # noqa: F811
    """Replaying the learned merges over the counted words: each merged pair occurred at least `min_frequency`
    times when it was merged, and when training stopped (vocabulary not full) no pair occurred that often."""
    vocab_size = 3000
    tokenizer, saved = train_with_cli(corpus_files, tmp_path / "tok", "--vocab_size", str(vocab_size),
                                      "--min_frequency", str(min_frequency))  # fmt: skip
    assert len(tokenizer) < vocab_size  # training ran out of frequent pairs, not of room
    words = corpus_words()
    segmented = {word: list(word) for word in words}
    merges = [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in saved["model"]["merges"]]
    assert len(merges) > 50
    for a, b in merges:
        count = pair_counts(segmented, words)[(a, b)]
        assert count >= min_frequency, (a, b, count)
        segmented = {word: merge(symbols, a, b) for word, symbols in segmented.items()}
    remaining = pair_counts(segmented, words)
    assert max(remaining.values()) < min_frequency


@pytest.mark.parametrize("form", ["NFKC", "NFC", "NFKD", "NFD", "none"])
def test_normalization_option_of_the_command_line(corpus_files, tmp_path, form):  # noqa: F811
    tokenizer, saved = train_with_cli(corpus_files, tmp_path / "tok", "--vocab_size", "400", "--normalization",
                                      form)  # fmt: skip
    text = "ﬁve m² in Köln, cafe\u0301"  # a ligature, a superscript, a precomposed and a decomposed letter
    expected = text if form == "none" else unicodedata.normalize(form, text)
    assert tokenizer.decode(tokenizer(text)["input_ids"], skip_special_tokens=True) == expected
    assert len({unicodedata.normalize(f, text) for f in ("NFKC", "NFC", "NFKD", "NFD")} | {text}) == 5
    kinds = [step["type"] for step in saved["normalizer"]["normalizers"]]
    assert kinds == (["Prepend"] if form == "none" else [form, "Prepend"])


def test_mask_token_is_appended_after_every_other_id_and_loads_as_mask_token(corpus_files, tmp_path):  # noqa: F811
    plain, plain_saved = train_with_cli(corpus_files, tmp_path / "plain", "--vocab_size", "400")
    masked, masked_saved = train_with_cli(corpus_files, tmp_path / "masked", "--vocab_size", "400", "--mask_token")
    # Every token keeps its id; <mask> takes the next one.
    assert masked_saved["model"]["vocab"] == plain_saved["model"]["vocab"]
    assert plain.mask_token is None and "<mask>" not in plain.get_vocab()
    assert masked.mask_token == "<mask>" and masked.mask_token_id == len(plain) == 400
    # Then the fillers that round the vocabulary up to a multiple of 8 (they follow every other id).
    assert masked.convert_ids_to_tokens(list(range(401, len(masked)))) == [f"<madeupword{i:04d}>" for i in range(7)]
    text = "Die Katze sitzt auf der Matte."
    assert masked(text)["input_ids"] == plain(text)["input_ids"]
    # A fill-mask query: the mask stands for one whole-word token between the others.
    query = masked("the <mask> sat")["input_ids"]
    assert query.count(masked.mask_token_id) == 1
    tokens = masked.convert_ids_to_tokens(query)
    assert tokens[tokens.index("<mask>") + 1].startswith(BOUNDARY) and tokens[-1] == "</s>"
    assert plain("the <mask> sat")["input_ids"] != query  # without the option "<mask>" is characters
    assert masked.decode(query, skip_special_tokens=True) == plain.decode(plain("the sat")["input_ids"],
                                                                          skip_special_tokens=True)  # fmt: skip
