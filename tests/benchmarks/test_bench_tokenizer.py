"""benchmarks/bench_tokenizer.py follows benchmarks/common.py's discipline: every candidate is timed in every round
(SentencePiece twice: the A/A noise), ratios are per round, the header names the CPU; bad options end with exit 2."""

import json
import os
import re
import subprocess
import sys

import pytest
from conftest import REPO_ROOT

SCRIPT = REPO_ROOT / "benchmarks" / "bench_tokenizer.py"
TINY = ["--sentences", "1200", "--vocab_size", "400", "--encode_sentences", "200", "--single_sentences", "50",
        "--batch_size", "50", "--threads", "1"]  # fmt: skip


def run(*options: str, cwd=None) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    return subprocess.run([sys.executable, str(SCRIPT), *options], capture_output=True, text=True, env=env, cwd=cwd)


def test_every_candidate_and_the_aa_copy_are_timed_in_every_round(tmp_path):
    report = tmp_path / "report.json"
    result = run(*TINY, "--repeats", "2", "--json", str(report))
    assert result.returncode == 0, result.stderr
    assert re.search(r"\[.*\], \d+ cores available, 1 threads;", result.stdout.splitlines()[0])  # CPU and flags
    results = json.loads(report.read_text())
    expected = {
        "training": ["ours, train_bpe_tokenizer", "sentencepiece, SentencePieceTrainer"],
        "batches": [
            "ours, tokenizer(batch) (transformers)",
            "ours, encode_batch_fast (tokenizers)",
            "sentencepiece, encode(batch)",
        ],
        "one_per_call": [
            "ours, tokenizer(text) (transformers)",
            "ours, encode (tokenizers)",
            "sentencepiece, encode(text)",
        ],
    }
    for part, names in expected.items():
        reference = names[-1]
        figures = results[part]["figures"]
        assert list(figures) == [*names, reference + " (A/A)"]
        assert all(len(figure["ratio"]["values"]) == 2 for figure in figures.values())  # one ratio per round
        assert figures[reference]["ratio"]["values"] == [1.0, 1.0]
        assert results[part]["aa"]["values"] == pytest.approx(
            [1 / value for value in figures[reference + " (A/A)"]["ratio"]["values"]]
        )
    tokens = results["batches"]["tokens"]  # the two ways through our tokenizer give the same ids
    assert tokens["ours, tokenizer(batch) (transformers)"] == tokens["ours, encode_batch_fast (tokenizers)"]
    assert result.stdout.count("A/A noise (sentencepiece") == 3
    assert result.stdout.count("target ours") == 5


def test_without_aa_no_copy_is_timed(tmp_path):
    report = tmp_path / "report.json"
    result = run(*TINY, "--repeats", "1", "--no-aa", "--json", str(report))
    assert result.returncode == 0, result.stderr
    figures = json.loads(report.read_text())["batches"]["figures"]
    assert not any(name.endswith("(A/A)") for name in figures)
    assert "A/A: not measured" in result.stdout


@pytest.mark.parametrize("option", ["--repeats", "--vocab_size", "--threads"])
def test_a_non_positive_option_is_refused(option):
    result = run(*TINY, option, "0")
    assert result.returncode == 2
    assert f"{option} 0 is not allowed: use a positive integer" in result.stderr
