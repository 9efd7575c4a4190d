"""benchmarks/bench_translate.py's options: the thread options checked up front with `vaswani translate`'s own rule,
the trained part's model and test file before anything is timed."""

import sys

import pytest
from conftest import REPO_ROOT

sys.path.insert(0, str(REPO_ROOT / "benchmarks"))
from bench_translate import parse_args  # noqa: E402


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--threads", "0"], "threads=0: use 1 or more"),
        (["--threads", "2", "--parallel_batches", "3"], "parallel_batches=3: use 1 to 2"),
        (["--threads", "2", "--parallel_batches", "0"], "parallel_batches=0: use 1 to 2"),
    ],
)
def test_thread_options_that_vaswani_translate_refuses_are_refused(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        parse_args(["--parts", "random", *argv])
    assert exit_info.value.code == 2 and message in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        ([], "the trained part needs --model DIR (a folder written by train.py); or use --parts random"),
        (["--parts", "trained,random"], "the trained part needs --model DIR"),
        (["--parts", "random,other"], "give one or more parts from trained, random, each once (unknown: other)"),
        (["--model", "m", "--test_file", "missing.jsonl"], "--test_file missing.jsonl is not a file"),
    ],
)
def test_the_trained_part_needs_a_model_and_a_test_file(argv, message, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exit_info:
        parse_args(argv)
    assert exit_info.value.code == 2 and message in capsys.readouterr().err


def test_the_parts_are_both_by_default_and_a_present_test_file_is_accepted(tmp_path):
    test_file = tmp_path / "test.jsonl"
    test_file.write_text("")
    args = parse_args(["--model", "m", "--test_file", str(test_file)])
    assert args.parts == ["trained", "random"] and args.test_file == test_file
    assert parse_args(["--parts", "random"]).parts == ["random"]


def test_parallel_batches_up_to_the_threads_are_accepted():
    args = parse_args(["--parts", "random", "--threads", "4", "--parallel_batches", "4"])
    assert (args.threads, args.parallel_batches) == (4, 4)


def test_ours_converted_is_the_marian_model_it_is_timed_against(capsys):
    """`--ours converted`: the engine called "ours" computes what HF Marian computes (the same weights), so the row
    compares a converted model with the model it came from."""
    import torch
    from bench_translate import converted
    from transformers import MarianConfig, MarianMTModel

    random_part = ["--parts", "random"]
    assert parse_args([*random_part, "--ours", "converted"]).ours == "converted"
    assert parse_args(random_part).ours == "native"
    with pytest.raises(SystemExit):
        parse_args([*random_part, "--ours", "marian"])
    assert "invalid choice: 'marian'" in capsys.readouterr().err
    torch.manual_seed(0)
    marian = MarianMTModel(MarianConfig(vocab_size=99, d_model=16, encoder_layers=2, decoder_layers=2,
                                        encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=32,
                                        decoder_ffn_dim=32, max_position_embeddings=64, pad_token_id=98,
                                        decoder_start_token_id=98, eos_token_id=0)).eval()  # fmt: skip
    ours = converted(marian).eval()
    input_ids = torch.randint(1, 98, (2, 7))
    decoder_input_ids = torch.randint(1, 98, (2, 5))
    with torch.no_grad():
        expected = marian(input_ids=input_ids, decoder_input_ids=decoder_input_ids).logits
        got = ours(input_ids=input_ids, decoder_input_ids=decoder_input_ids).logits
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)
