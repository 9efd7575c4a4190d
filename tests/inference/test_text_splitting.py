"""vaswani/inference/text.py: paragraphs cut into sentences and glued back, HTML text nodes translated and the markup
kept as it came."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st
from sacremoses.corpus import NonbreakingPrefixes

from vaswani.inference.text import HtmlText, nonbreaking_prefixes, split_text


def test_texts_are_cut_after_sentence_ends_followed_by_space_and_no_lower_case_letter():
    split = split_text("  One. Two!  Three? «Four.» Five… six. e.g. this\r\n\nSeven.")
    assert split.sentences == [
        "One.",
        "Two!",
        "Three?",
        "«Four.»",
        "Five… six. e.g. this",
        "Seven.",
    ]  # "six. e": lower case
    assert split.join(split.sentences) == "  One. Two!  Three? «Four.» Five… six. e.g. this\r\n\nSeven."
    assert split.join([s.upper() for s in split.sentences]).startswith("  ONE. TWO!  THREE?")
    assert split_text(" \n ").sentences == [] and split_text(" \n ").join([]) == " \n "


def test_chinese_and_japanese_sentences_are_cut_without_a_space_between_them():
    """They put no space after 。！？: the rule with a space alone left a Chinese paragraph one sentence. A closing
    quote after the full stop keeps the quotation in its sentence (Japanese 「...。」と言った)."""
    split = split_text("今天天气很好。我们去公园吧！你来吗？")
    assert split.sentences == ["今天天气很好。", "我们去公园吧！", "你来吗？"]
    assert split.join(["A.", "B!", "C?"]) == "A.B!C?"  # no separator where the text had none
    assert split_text("「こんにちは。」と言った。次の文。").sentences == ["「こんにちは。」と言った。", "次の文。"]
    assert split_text("今天很好。 我们走吧。").sentences == ["今天很好。", "我们走吧。"]  # a space is kept as it was


def test_splitting_and_joining_gives_back_any_text():
    @given(
        st.text(alphabet=st.sampled_from("ab .!?\n\r\t»A。」我5-"), max_size=40), st.sampled_from([None, "en", "de"])
    )
    def check(text, language):
        split = split_text(text, language)
        assert split.join(split.sentences) == text
        assert all(s and s == s.strip() for s in split.sentences)

    check()


@pytest.mark.parametrize(
    ("language", "text", "sentences"),
    [
        ("en", "Dr. Smith met Mr. Brown. They talked.", ["Dr. Smith met Mr. Brown.", "They talked."]),
        ("en", "The U.S. Army grew. It is 3.5 m. Then.", ["The U.S. Army grew.", "It is 3.5 m.", "Then."]),
        ("en", "See No. 5 here. I said No. Then I left.", ["See No. 5 here.", "I said No.", "Then I left."]),
        ("en", 'He said "Dr." Then he left.', ['He said "Dr."', "Then he left."]),  # a closing quote: an end
        ("de", "Am 3. Oktober ist z. B. Feiertag. Wir gehen.", ["Am 3. Oktober ist z. B. Feiertag.", "Wir gehen."]),
        ("en", "Am 3. Oktober. Wir gehen.", ["Am 3.", "Oktober.", "Wir gehen."]),  # English has no ordinals
        ("pt_BR", "O Sr. Silva chegou. Ele saiu.", ["O Sr. Silva chegou.", "Ele saiu."]),  # "pt" for "pt_BR"
        ("xx", "Mr. Smith came. He left.", ["Mr. Smith came.", "He left."]),  # no list: English's, as Moses does
        (None, "Dr. Who. Yes.", ["Dr. Who.", "Yes."]),
    ],
)
def test_a_full_stop_after_an_abbreviation_of_the_language_does_not_end_a_sentence(language, text, sentences):
    """Moses' split-sentences exceptions: a non-breaking prefix of the language, an upper-case acronym, a numeric-only
    prefix before a number; a closing quote after the full stop ends the sentence anyway."""
    assert split_text(text, language).sentences == sentences


@pytest.mark.parametrize("language", ["en", "de", "fr", "es"])
def test_every_prefix_of_moses_lists_keeps_its_sentence_whole(language):
    """Each non-breaking prefix of sacremoses' copy of the Moses lists (an independent statement of the data): before
    a capitalised word the sentence goes on; a numeric-only one only before a number. (The lists hold a few entries
    in mojibake, "pÃ¡g" beside "pág": no word of a text is made of those characters, for Moses neither.)"""
    numeric_only = 0
    for line in NonbreakingPrefixes().words(language):
        prefix, _, mark = line.partition(" ")
        if not re.fullmatch(r"[\w.\-]+", prefix):
            continue
        if "#NUMERIC_ONLY#" in mark:
            numeric_only += 1
            assert split_text(f"See {prefix}. 12 now.", language).sentences == [f"See {prefix}. 12 now."]
            if not prefix.isupper() and "." not in prefix:  # (an acronym stays whole anyway)
                assert split_text(f"See {prefix}. Then.", language).sentences == [f"See {prefix}.", "Then."]
        else:
            assert split_text(f"See {prefix}. Smith now.", language).sentences == [f"See {prefix}. Smith now."]
    words, numeric = nonbreaking_prefixes(language)
    assert len(numeric) >= numeric_only and len(words) > 50


def test_html_is_written_back_as_it_came_when_nothing_changes():
    page = (
        "<!DOCTYPE html><html><head><style>p > a {}</style></head><body><p id=\"a\" data-x='1'>Hi &amp; bye. "
        'Next one.</p><!-- note --><img src=x.png alt="a b"/><pre>keep  &lt;this&gt;</pre></body></html>'
    )
    document = HtmlText(page)
    assert [t.sentences for t in document.texts()] == [["Hi & bye.", "Next one."]]
    assert document.render([t.sentences for t in document.texts()]) == page
    assert document.render([["<b>x</b>", "y"]]).count("&lt;b&gt;x&lt;/b&gt; y") == 1  # translations are escaped
