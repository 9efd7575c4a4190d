"""vaswani/inference/text.py: paragraphs cut into sentences and glued back, HTML text nodes translated and the markup
kept as it came."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from vaswani.inference.text import HtmlText, split_text


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
    @given(st.text(alphabet=st.sampled_from("ab .!?\n\r\t»A。」我"), max_size=40))
    def check(text):
        split = split_text(text)
        assert split.join(split.sentences) == text
        assert all(s and s == s.strip() for s in split.sentences)

    check()


def test_html_is_written_back_as_it_came_when_nothing_changes():
    page = (
        "<!DOCTYPE html><html><head><style>p > a {}</style></head><body><p id=\"a\" data-x='1'>Hi &amp; bye. "
        'Next one.</p><!-- note --><img src=x.png alt="a b"/><pre>keep  &lt;this&gt;</pre></body></html>'
    )
    document = HtmlText(page)
    assert [t.sentences for t in document.texts()] == [["Hi & bye.", "Next one."]]
    assert document.render([t.sentences for t in document.texts()]) == page
    assert document.render([["<b>x</b>", "y"]]).count("&lt;b&gt;x&lt;/b&gt; y") == 1  # translations are escaped
