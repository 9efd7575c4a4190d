"""The Python examples of docs/language-models.md run as written (each in a fresh namespace, in a temporary folder)
and print what the text says they print."""

import re

import pytest
from conftest import REPO_ROOT

DOC = REPO_ROOT / "docs" / "language-models.md"


def python_blocks() -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", DOC.read_text(encoding="utf-8"), flags=re.DOTALL | re.MULTILINE)


def test_the_doc_has_a_causal_and_a_masked_lm_example():
    blocks = python_blocks()
    assert len(blocks) == 2
    assert "VaswaniForCausalLM" in blocks[0] and "VaswaniForMaskedLM" in blocks[1]


@pytest.mark.parametrize("index", [0, 1], ids=["causal_lm", "masked_lm"])
def test_the_examples_run(index, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    exec(compile(python_blocks()[index], f"{DOC.name}:block{index}", "exec"), {"__name__": "__doc_example__"})
    printed = capsys.readouterr().out.splitlines()
    if index == 0:
        perplexity = float(re.fullmatch(r"training perplexity (\S+)", printed[0]).group(1))
        assert perplexity < 2.0  # the four sentences are learnt
        assert printed[1].startswith("sat on the") and printed[2].startswith("a cat ")
        assert (tmp_path / "tiny-causal-lm" / "config.json").exists()
    else:
        guesses = [re.fullmatch(r"'(.*)': (\S+)", line) for line in printed]
        assert len(guesses) == 3 and all(guesses)
        assert sum(float(guess.group(2)) for guess in guesses) <= 1.0
