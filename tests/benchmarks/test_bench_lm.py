"""benchmarks/bench_lm.py: a tiny run reports every model and writes its JSON; options that could not give a timing
are refused before any work starts; Marian's labels are the next tokens, as ours and GPT-2 compute them."""

import json
import random
import sys

import pytest
import torch
from conftest import REPO_ROOT

sys.path.insert(0, str(REPO_ROOT / "benchmarks"))
from bench_lm import AA, OURS, main, marian_labels, parse_args  # noqa: E402

WORDS = ("file", "cannot", "open", "the", "option", "invalid", "error", "while", "reading", "directory", "not",
         "found", "write", "missing", "argument", "unknown", "%s", "%d", "user", "permission", "denied")  # fmt: skip


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """300 short English messages in the translation layout of the gettext corpus."""
    rng = random.Random(0)
    path = tmp_path_factory.mktemp("lm") / "train.jsonl"
    with path.open("w") as lines:
        for _ in range(300):
            english = " ".join(rng.choices(WORDS, k=rng.randint(1, 12))).capitalize()
            lines.write(json.dumps({"translation": {"en": english, "es": "x"}}) + "\n")
    return path


@pytest.fixture
def transformers_verbosity_kept():
    """main() quiets transformers' logging for its report; the tests after this one get their verbosity back."""
    import transformers

    verbosity = transformers.logging.get_verbosity()
    yield
    transformers.logging.set_verbosity(verbosity)


def test_a_tiny_run_reports_every_model_and_writes_its_json(corpus, tmp_path, capsys, transformers_verbosity_kept):
    out = tmp_path / "lm.json"
    main(["--data", str(corpus), "--sizes", "small", "--vocab_size", "300", "--batch_size", "4", "--steps", "2",
          "--warmup", "1", "--repeats", "2", "--threads", "1", "--max_len", "12", "--json", str(out)])  # fmt: skip
    printed = capsys.readouterr().out
    assert "Causal LM training, ours vs marian, gpt2 on" in printed and "1 torch threads" in printed
    for row in ("ours (VaswaniForCausalLM)", "marian (MarianForCausalLM)", "gpt2 (GPT2LMHeadModel)", AA):
        assert row in printed
    assert "ours/this" in printed and "ratio range" in printed and "CPU" in printed

    report = json.loads(out.read_text())
    assert report["settings"]["repeats"] == "2" and report["machine"]["threads"] == 1
    assert isinstance(report["machine"]["cpu_flags"], list)
    data = report["data"]
    assert len(data["shapes"]) == 2 and all(shape[0] == 4 and shape[1] <= 12 for shape in data["shapes"])
    assert data["targets_per_round"] == data["tokens_per_round"] - 2 * 4  # <s> of each sentence is no target
    models = report["sizes"]["small"]["models"]
    assert list(models) == [OURS, "marian", "gpt2", AA]
    ours = models[OURS]
    for name, entry in models.items():
        assert len(entry["tokens_per_s"]["values"]) == 2 and entry["tokens_per_s"]["median"] > 0
        assert entry["logits_shapes"] == ours["logits_shapes"]  # the same work, checked before timing
        assert entry["steps_trained"] == 1 + 2 * 2
        assert all(map(torch.isfinite, torch.tensor([entry["loss_first_pass"], entry["loss_last_pass"]])))
        if name == OURS:
            assert "ratio_ours_to_this" not in entry
        else:
            ratio = entry["ratio_ours_to_this"]
            assert len(ratio["values"]) == 2 and ratio["rounds"] <= 2 and 0 <= ratio["p"] <= 1
    # Marian is our architecture plus unused cross-attention weights: the same FLOPs, the same used parameters.
    assert models["marian"]["gflop_per_round"] == pytest.approx(ours["gflop_per_round"], rel=1e-3)
    assert models["marian"]["unused_cross_attention"] > 0 == ours["unused_cross_attention"]
    assert models["marian"]["trainable"] - models["marian"]["unused_cross_attention"] == ours["trainable"]
    assert models[AA]["trainable"] == ours["trainable"]


def test_peers_and_the_aa_candidate_are_options(corpus):
    args = parse_args(["--data", str(corpus), "--peers", "marian", "--no-aa"])
    assert (args.peers, args.aa) == (["marian"], False)
    assert parse_args(["--data", str(corpus)]).peers == ["marian", "gpt2"]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--repeats", "0"], "--repeats 0 is not allowed: use a positive integer"),
        (["--steps", "0"], "--steps 0 is not allowed"),
        (["--batch_size", "-1"], "--batch_size -1 is not allowed"),
        (["--threads", "0"], "--threads 0 is not allowed"),
        (["--warmup", "-1"], "--warmup -1 is not allowed: use 0 or more"),
        (["--max_len", "2"], "--max_len 2 is not allowed"),
        (["--vocab_size", "100"], "--vocab_size 100 is not allowed"),
        (["--peers", "bert"], "give one or more peers from marian, gpt2"),
        (["--peers", "marian,marian"], "each once"),
        (["--sizes", "huge"], "(unknown: huge)"),
        (["--data", "/nonexistent/train.jsonl"], "is not a file"),
    ],
)
def test_options_that_cannot_give_a_timing_are_refused(argv, message, corpus, capsys):
    with pytest.raises(SystemExit) as exit_info:
        parse_args(["--data", str(corpus), *argv])
    assert exit_info.value.code == 2 and message in capsys.readouterr().err


def test_marian_labels_are_the_next_tokens_with_pad_ignored():
    input_ids = torch.tensor([[1, 5, 6, 2, 0, 0], [1, 7, 8, 9, 4, 2]])
    expected = torch.tensor([[5, 6, 2, -100, -100, -100], [7, 8, 9, 4, 2, -100]])
    assert torch.equal(marian_labels(input_ids), expected)
