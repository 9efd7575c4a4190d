"""benchmarks/bench_stop.py: its options are checked before any run, and a tiny run stopped by SIGTERM inside its
evaluation is measured and reported."""

import json
import signal
import sys

import pytest
from conftest import REPO_ROOT

from vaswani.data.demo import write_demo_files

sys.path.insert(0, str(REPO_ROOT / "benchmarks"))
from bench_stop import main, parse_args, reached_update, report_rows  # noqa: E402

TINY = [
    "--vocab_size", "400", "--d_model", "32", "--encoder_layers", "1", "--decoder_layers", "1",
    "--encoder_attention_heads", "2", "--decoder_attention_heads", "2", "--encoder_ffn_dim", "64",
    "--decoder_ffn_dim", "64", "--max_tokens", "400", "--eval_max_tokens", "40", "--warmup_steps", "2",
    "--num_beams", "2", "--logging_steps", "1", "--report_to", "none",
]  # fmt: skip


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    folder = tmp_path_factory.mktemp("corpus")
    write_demo_files(folder, num_train=80, num_validation=24, num_test=4)
    return folder


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--baseline", "no-such-commit"], "--baseline no-such-commit: no such commit"),
        (["--delay", "-1"], "must be a finite number of at least 0"),
        (["--rounds", "0"], "must be at least 1"),
        (["--eval_steps", "two"], "expected a whole number"),
        (["--timeout", "0"], "must be a number above 0"),
    ],
)
def test_bad_options_are_refused_before_any_run(corpus, argv, message, capsys):
    with pytest.raises(SystemExit) as exit:
        parse_args(["--data_dir", str(corpus), *argv])
    assert exit.value.code == 2 and message in capsys.readouterr().err


def test_a_data_dir_without_the_three_splits_is_refused(tmp_path, capsys):
    with pytest.raises(SystemExit):
        parse_args(["--data_dir", str(tmp_path)])
    assert "has no train.jsonl" in capsys.readouterr().err


def test_the_options_after_the_separator_go_to_train_py(corpus):
    args = parse_args(["--data_dir", str(corpus), "--rounds", "3", "--", "--d_model", "64"])
    assert args.rounds == 3 and args.train_args == ["--d_model", "64"]


def test_an_update_counts_once_its_training_row_is_complete(tmp_path):
    metrics = tmp_path / "metrics.jsonl"
    assert not reached_update(metrics, 2)
    metrics.write_text('{"split": "train", "step": 1}\n{"split": "validation", "step": 2}\n{"split": "tra')
    assert not reached_update(metrics, 2)  # a validation row and a half-written line are not update 2's training row
    metrics.write_text('{"split": "train", "step": 1}\n{"split": "train", "step": 2}\n')
    assert reached_update(metrics, 2)


def test_the_report_gives_each_side_its_median_and_range():
    runs = {
        "this": [{"seconds_to_exit": 2.0, "status": 143, "checkpoints": ["step-00000002"], "evaluation_stopped": True},
                 {"seconds_to_exit": 4.0, "status": 143, "checkpoints": ["step-00000002"], "evaluation_stopped": True},
                 {"seconds_to_exit": 3.0, "status": 1, "checkpoints": [], "evaluation_stopped": False}],
    }  # fmt: skip
    assert report_rows(runs) == [["this", "3.0 (2.0-4.0)", "143 143 1", "step-00000002 step-00000002 none",
                                  "yes yes no"]]  # fmt: skip


@pytest.mark.slow
def test_a_tiny_run_is_stopped_inside_its_evaluation_and_measured(corpus, tmp_path, capsys):
    """24 validation pairs in batches of 40 tokens at most (several batches), SIGTERM as soon as update 2 is logged:
    the run stops with the checkpoint of update 2 (status 143) and says it stopped the evaluation."""
    report = tmp_path / "stop.json"
    status = main(["--data_dir", str(corpus), "--eval_steps", "2", "--max_eval_samples", "24", "--delay", "0",
                   "--rounds", "1", "--target_lang", "de", "--json", str(report), "--",
                   *TINY])  # fmt: skip
    assert status == 0
    (run,) = json.loads(report.read_text())["runs"].values()
    assert run[0]["status"] == 128 + signal.SIGTERM and run[0]["checkpoints"] == ["step-00000002"]
    assert run[0]["evaluation_stopped"] and run[0]["seconds_to_exit"] > 0
    out = capsys.readouterr().out
    assert "SIGTERM 0 s into the evaluation at update 2 (24 validation pairs)" in out and "step-00000002" in out
