"""benchmarks/bench_scale.py (issue 30 item 6), at a size that runs in seconds: the synthetic corpus is made of the
real pairs, every phase and run is measured, and the report holds the targets. (The figures at 0.5M-4.5M pairs are in
benchmarks/README.md.)"""

import json
import sys

import pytest
from conftest import REPO_ROOT

from vaswani.data.demo import write_demo_files

sys.path.insert(0, str(REPO_ROOT / "benchmarks"))
import bench_scale  # noqa: E402


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    folder = tmp_path_factory.mktemp("real")
    write_demo_files(folder, num_train=120, num_validation=8, num_test=8)
    return folder


def test_the_corpus_joins_two_or_three_real_pairs_per_line(data_dir, tmp_path):
    sizes = bench_scale.make_corpus(data_dir, tmp_path, 200, "en", "de")
    real = [json.loads(line)["translation"] for line in (data_dir / "train.jsonl").read_text().splitlines()]
    sources = {" ".join(r["en"].split()) for r in real}
    lines = (tmp_path / "train.tsv").read_text().splitlines()
    assert len(lines) == 200 and sizes["pairs"] == 200 and all(line.count("\t") == 1 for line in lines)
    for line in lines[:20]:
        source = line.split("\t")[0]
        # made of 2-3 real source sentences (each ends with its punctuation), nothing else
        assert sum(source.count(s) for s in sources) >= 2 and any(source.startswith(s) for s in sources)
    assert sizes["text_mb"] == pytest.approx((tmp_path / "train.tsv").stat().st_size / 1e6)


@pytest.mark.slow
def test_a_small_run_measures_every_phase_and_prints_the_targets(data_dir, tmp_path, capsys):
    results = bench_scale.main(["--pairs", "300", "--data_dir", str(data_dir), "--source_lang", "en",
                                "--target_lang", "de", "--vocab_size", "500", "--tokenizer_sample", "300",
                                "--output_dir", str(tmp_path / "out"), "--no_two_processes",
                                "--json", str(tmp_path / "scale.json")])  # fmt: skip
    r = results[300]
    assert set(r["prepare"]["phases"]) == set(bench_scale.PHASES)
    assert all(seconds >= 0 for seconds in r["prepare"]["phases"].values()), r["prepare"]["phases"]
    assert r["prepare"]["peak_anon_mb"] > 50 and 0 < r["prepare"]["prepared_bytes_per_pair"] < 10_000
    for key in ("train_prepared", "train_cold", "train_rerun"):
        assert 0 < r[key]["first_update_seconds"] <= r[key]["seconds"], key
    assert r["train_rerun"]["reused_cache"] and not r["train_cold"]["reused_cache"]
    assert r["tokenized_cache_bytes_per_pair"] > 0
    printed = capsys.readouterr().out
    assert "reaches update 1 in <= 30 s" in printed and "bytes/pair (prepared folder)" in printed
    assert json.loads((tmp_path / "scale.json").read_text())["results"]["300"]["prepare"]["seconds"] > 0
    # --memory_only: the run from the prepared folder again, --repeats times (once here: each is a training process)
    again = bench_scale.main(["--pairs", "300", "--data_dir", str(data_dir), "--output_dir", str(tmp_path / "out"),
                              "--memory_only", "--repeats", "1"])  # fmt: skip
    assert len(again["peaks_mb"]["300"]) == 1 and again["median_mb"]["300"] > 50


def test_memory_only_needs_the_prepared_folders_of_an_earlier_run(data_dir, tmp_path, capsys):
    with pytest.raises(SystemExit) as stop:
        bench_scale.main(["--pairs", "300", "--data_dir", str(data_dir), "--output_dir", str(tmp_path),
                          "--memory_only"])  # fmt: skip
    assert stop.value.code == 2 and "no prepared folder for 300 pairs" in capsys.readouterr().err


def test_repeats_below_one_is_refused(data_dir, tmp_path, capsys):
    with pytest.raises(SystemExit) as stop:
        bench_scale.parse_args(["--data_dir", str(data_dir), "--output_dir", str(tmp_path), "--repeats", "0"])
    assert stop.value.code == 2 and "--repeats 0 is not allowed" in capsys.readouterr().err
