"""benchmarks/bench_serve.py's options (checked before anything is loaded or timed) and its reading of the sentences."""

import json
import sys

import pytest
from conftest import REPO_ROOT

sys.path.insert(0, str(REPO_ROOT / "benchmarks"))
from bench_serve import (  # noqa: E402
    arrival_times,
    decoding_alone,
    main,
    parse_args,
    read_sentences,
    report,
    throughput_needed,
)
from common import commit_of, source_tree  # noqa: E402


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
        (["--max_wait_ms", "-1"], "--max_wait_ms: must be a finite number of at least 0"),
        (["--baseline_max_wait_ms", "inf"], "--baseline_max_wait_ms: must be a finite number of at least 0"),
        (["--baseline", "no-such-commit"], "--baseline no-such-commit: no such commit in"),
        (["--device", "tpu"], "--device: invalid choice: 'tpu'"),
        (["--open_load", "0"], "--open_load: must be above 0, got 0"),
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
        16, ["ct2-int8", "torch"], 5, 0.0, "cpu")  # fmt: skip
    assert (args.baseline, args.baseline_max_wait_ms) == (None, 0.0)  # the baseline's server: this one's settings
    args = parse_args(["--model", str(files / "model"), "--test_file", str(files / "test.txt"), "--max_wait_ms", "5"])
    assert args.baseline_max_wait_ms == 5.0
    args = parse_args(["--model", str(files / "model"), "--test_file", str(files / "test.txt"), "--max_wait_ms", "5",
                       "--baseline_max_wait_ms", "10"])  # fmt: skip
    assert (args.max_wait_ms, args.baseline_max_wait_ms) == (5.0, 10.0)
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
    args = parse_args(["--model", str(files / "model"), "--test_file", str(files / "test.txt"), "--max_wait_ms", "10"])
    round_ = {"sentences_per_second": 172.2, "reference_sentences_per_second": 362.6, "mean_batch_size": 16.1,
              "p50": 0.089, "p99": 0.173}  # fmt: skip
    row = report("ct2-int8", {"unloaded_p50": 0.026, "unloaded_p99": 0.040, "rounds": [round_]}, args)
    assert row[6] == "173 (limit 62) MISSED" and row[-1] == "258 (0.7x translate)" and row[8] == "40"
    # a p99 limit that even one client alone misses (its long sentences) is told apart
    row = report("ct2-int8", {"unloaded_p50": 0.026, "unloaded_p99": 0.070, "rounds": [round_]}, args)
    assert row[8] == "70 (over the p99 limit)"


def test_open_load_arrivals_are_poisson_at_the_rate_asked():
    """5,000 expected arrivals: the count within 4 standard deviations (sqrt(5000) = 71), the gaps' mean 1 / rate and
    their spread that of an exponential distribution (standard deviation = mean); the same seed, the same times."""
    times = arrival_times(100.0, 50.0, seed=3)
    assert abs(len(times) - 5000) < 4 * 71 and times == sorted(times) and times[0] > 0 and times[-1] < 50.0
    gaps = [b - a for a, b in zip([0.0, *times], times, strict=False)]
    mean = sum(gaps) / len(gaps)
    spread = (sum((g - mean) ** 2 for g in gaps) / len(gaps)) ** 0.5
    assert mean == pytest.approx(0.01, rel=0.06) and spread == pytest.approx(mean, rel=0.1)
    assert arrival_times(100.0, 50.0, seed=3) == times and arrival_times(100.0, 50.0, seed=4) != times


def test_the_report_adds_the_open_load_p99_against_the_same_limit(files):
    args = parse_args(["--model", str(files / "model"), "--test_file", str(files / "test.txt"), "--open_load", "0.5",
                       "--max_wait_ms", "10"])  # fmt: skip
    round_ = {"sentences_per_second": 300.0, "reference_sentences_per_second": 350.0, "mean_batch_size": 7.5,
              "p50": 0.047, "p99": 0.097, "open": {"p50": 0.030, "p99": 0.055, "rate": 150.0, "requests": 3000}}  # fmt: skip
    row = report("ct2-int8", {"unloaded_p50": 0.020, "unloaded_p99": 0.033, "rounds": [round_]}, args)
    assert row[6] == "97 (limit 50) MISSED" and row[-2] == "30 / 55 MISSED at 150 req/s"
    round_["open"]["p99"] = 0.045
    assert report("ct2-int8", {"unloaded_p50": 0.020, "unloaded_p99": 0.033, "rounds": [round_]}, args)[-2] == (
        "30 / 45 MET at 150 req/s"
    )


def test_a_baseline_is_the_files_of_its_commit_in_a_folder_of_their_own(tmp_path):
    import subprocess

    head = commit_of("HEAD")
    assert head and commit_of(head) == head and commit_of("no-such-commit") is None
    tree = source_tree("HEAD", tmp_path / "baseline")
    tracked = subprocess.run(["git", "show", "HEAD:vaswani/serve/batching.py"], cwd=REPO_ROOT, capture_output=True,
                             text=True, check=True).stdout  # fmt: skip
    assert (tree / "vaswani" / "serve" / "batching.py").read_text(encoding="utf-8") == tracked
    assert not (tree / ".git").exists()


def test_each_rows_p99_limit_counts_its_own_servers_wait(files):
    """The baseline's server waits 10 ms for company, this checkout's none: 2 x p50 + its own wait each."""
    args = parse_args(["--model", str(files / "model"), "--test_file", str(files / "test.txt")])
    round_ = {"sentences_per_second": 300.0, "reference_sentences_per_second": 350.0, "mean_batch_size": 7.5,
              "p50": 0.047, "p99": 0.097}  # fmt: skip
    waited = report("ct2-int8 @ abc", {"unloaded_p50": 0.020, "unloaded_p99": 0.033, "max_wait_ms": 10.0,
                                       "rounds": [round_]}, args)  # fmt: skip
    at_once = report("ct2-int8", {"unloaded_p50": 0.020, "unloaded_p99": 0.033, "max_wait_ms": 0.0,
                                  "rounds": [round_]}, args)  # fmt: skip
    assert waited[6] == "97 (limit 50) MISSED" and at_once[6] == "97 (limit 40) MISSED"
    # a result without the decoding-alone figures keeps the header's 11 columns (without --open_load)
    assert waited[9] == at_once[9] == "-" and len(waited) == len(at_once) == 11


def test_decoding_alone_times_each_sentence_by_itself_and_marks_a_p99_over_the_limit(files):
    # a fake clock: each sentence takes as many milliseconds as it has words (the long ones make the p99)
    now, calls = [0.0], []

    def translate(batch):
        calls.append(batch)
        now[0] += len(batch[0].split()) / 1000

    sentences = ["a b"] * 98 + ["a b c d e f g h i j"] * 2
    alone = decoding_alone(translate, sentences, clock=lambda: now[0])
    assert calls == [[s] for s in sentences]  # one sentence per call, each once
    assert alone == pytest.approx({"p50": 0.002, "p99": 0.010})
    args = parse_args(["--model", str(files / "model"), "--test_file", str(files / "test.txt")])
    round_ = {"reference_sentences_per_second": 400.0, "sentences_per_second": 300.0, "mean_batch_size": 6.0,
              "p50": 0.03, "p99": 0.05}  # fmt: skip
    result = {"unloaded_p50": 0.004, "unloaded_p99": 0.012, "rounds": [round_],
              "decoding_alone_p50": alone["p50"], "decoding_alone_p99": alone["p99"]}  # fmt: skip
    row = report("ct2-int8", result, args)  # limit: 2 x 4 ms + 0
    assert row[9] == "2.0 / 10.0 (over the p99 limit)" and row[8] == "12 (over the p99 limit)"
    result["unloaded_p50"] = 0.006  # limit 12 ms: the floor is under it, the unloaded p99 at it
    assert report("ct2-int8", result, args)[9] == "2.0 / 10.0"


def test_a_test_file_without_a_sentence_is_an_error_before_anything_starts(files, capsys):
    (files / "blank.txt").write_text("\n  \n", encoding="utf-8")
    with pytest.raises(SystemExit) as stop:
        main(["--model", str(files / "model"), "--test_file", str(files / "blank.txt")])
    assert stop.value.code == 2 and "has no sentence to send" in capsys.readouterr().err


def test_the_report_adds_the_documents_time_against_translate(files, capsys):
    base = ["--model", str(files / "model"), "--test_file", str(files / "test.txt")]
    assert parse_args(base).document is None
    with pytest.raises(SystemExit):
        parse_args([*base, "--document", "0"])
    assert "--document: must be above 0, got 0" in capsys.readouterr().err
    args = parse_args([*base, "--document", "150"])
    rounds = [{"sentences_per_second": 300.0, "reference_sentences_per_second": 350.0, "mean_batch_size": 7.5,
               "p50": 0.047, "p99": 0.097, "document_seconds": seconds, "document_reference_seconds": 0.40}
              for seconds in (0.44, 0.48, 0.60)]  # fmt: skip
    row = report("ct2-int8", {"unloaded_p50": 0.020, "unloaded_p99": 0.033, "rounds": rounds}, args)
    assert row[-2] == "0.48 / 0.40 = 1.20x (1.10-1.50)"
