"""benchmarks/bench_serve.py's options (checked before anything is loaded or timed) and its reading of the sentences."""

import json
import sys

import pytest
from conftest import REPO_ROOT

sys.path.insert(0, str(REPO_ROOT / "benchmarks"))
from bench_serve import parse_args, read_sentences, report, throughput_needed  # noqa: E402


@pytest.fixture
def files(tmp_path):
    (tmp_path / "model").mkdir()
    (tmp_path / "test.txt").write_text("one\n\ntwo\nthree\n", encoding="utf-8")
    return tmp_path


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        ([], "the following arguments are required: --model"),
        (["--model", "{d}/missing"], "--model {d}/missing is not a folder"),
        (["--model", "{d}/model", "--test_file", "{d}/missing.jsonl"], "--test_file {d}/missing.jsonl is not a file"),
        (["--backends", "onnx"], "give one or more backends from ct2-int8, torch, each once (unknown: onnx)"),
        (["--backends", "torch,torch"], "each once"),
        (["--clients", "0"], "--clients: must be above 0, got 0"),
        (["--duration", "-1"], "--duration: must be above 0"),
        (["--rounds", "two"], "--rounds: expected a number, got 'two'"),
        (["--max_wait_ms", "0"], "--max_wait_ms: must be above 0"),
        (["--device", "tpu"], "--device: invalid choice: 'tpu'"),
        (["--device", "cuda"], "--device cuda runs the PyTorch backend only: add --backends torch"),
    ],
)
def test_bad_options_are_refused_before_anything_runs(argv, message, files, capsys):
    base = [] if not argv or argv[0] in ("--model",) else ["--model", "{d}/model", "--test_file", "{d}/test.txt"]
    with pytest.raises(SystemExit) as exit_info:
        parse_args([a.format(d=files) for a in base + argv])
    assert exit_info.value.code == 2 and message.format(d=files) in capsys.readouterr().err


def test_the_defaults_are_the_issues_setting(files):
    args = parse_args(["--model", str(files / "model"), "--test_file", str(files / "test.txt")])
    assert (args.clients, args.backends, args.rounds, args.max_wait_ms, args.device) == (
        16, ["ct2-int8", "torch"], 5, 10.0, "cpu")  # fmt: skip
    args = parse_args(["--model", str(files / "model"), "--test_file", str(files / "test.txt"), "--backends", "torch"])
    assert args.backends == ["torch"]


def test_sentences_come_from_a_text_file_or_the_source_side_of_json_lines(files):
    assert read_sentences(files / "test.txt", "en", 10) == ["one", "two", "three"]
    assert read_sentences(files / "test.txt", "en", 2) == ["one", "two"]
    pairs = [{"translation": {"en": f"s{i}", "es": f"t{i}"}} for i in range(3)]
    (files / "test.jsonl").write_text("".join(json.dumps(p) + "\n" for p in pairs), encoding="utf-8")
    assert read_sentences(files / "test.jsonl", "en", 10) == ["s0", "s1", "s2"]


def test_the_report_says_what_throughput_the_p99_limit_needs_by_littles_law(files):
    """16 closed-loop clients and a p99 limit of 2 x 26 ms + 10 ms (the CTranslate2 record): a mean latency of 62 ms
    at most needs 16 / 0.062 = 258 sentences/s, 0.7x a reference that translates 362.6/s."""
    assert throughput_needed(16, 0.062) == pytest.approx(258.06, abs=0.01)
    args = parse_args(["--model", str(files / "model"), "--test_file", str(files / "test.txt")])
    round_ = {"sentences_per_second": 172.2, "reference_sentences_per_second": 362.6, "mean_batch_size": 16.1,
              "p50": 0.089, "p99": 0.173}  # fmt: skip
    row = report("ct2-int8", {"unloaded_p50": 0.026, "unloaded_p99": 0.040, "rounds": [round_]}, args)
    assert row[6] == "173 (limit 62) MISSED" and row[-1] == "258 (0.7x translate)" and row[-2] == "40"
    # a p99 limit that even one client alone misses (its long sentences) is told apart
    row = report("ct2-int8", {"unloaded_p50": 0.026, "unloaded_p99": 0.070, "rounds": [round_]}, args)
    assert row[-2] == "70 (over the p99 limit)"
