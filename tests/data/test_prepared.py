"""`vaswani prepare` and `vaswani train --prepared_data DIR` (vaswani/data/prepared.py, issue 30 item 1): a corpus
read and tokenized once into a self-describing folder (compact integer columns, the tokenizer, a manifest), trained
from without the text being read again; options beside it that disagree with its manifest are an `error:`."""

import argparse
import json
import logging
import os

import datasets
import pytest
from conftest import train_command_in_process, train_in_process
from test_options import TINY_MODEL

from vaswani.cli import main as vaswani
from vaswani.data import prepared
from vaswani.data.demo import write_demo_files
from vaswani.errors import UsageError
from vaswani.model_folder import load_tokenizer
from vaswani.training import tasks

TRAIN = ["--eval_steps", "0", "--num_beams", "1", "--num_examples", "0", "--report_to", "none", "--max_tokens", "400",
         "--max_eval_samples", "4", "--max_train_steps", "2", "--warmup_steps", "2", "--checkpoint_minutes", "60",
         "--average_checkpoints", "1"]  # fmt: skip


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """Demo pairs as files, prepared once (a BPE trained on a sample of 30 pairs, a tight length limit)."""
    folder = tmp_path_factory.mktemp("prepare")
    files = write_demo_files(folder / "data", num_train=60, num_validation=6, num_test=4)
    out = folder / "prepared"
    status = vaswani(["prepare", "--train_file", str(files["train"]), "--validation_file", str(files["validation"]),
                      "--test_file", str(files["test"]), "--vocab_size", "400", "--tokenizer_sample", "30",
                      "--max_source_length", "14", "--cache_dir", str(folder / "cache"), "--output_dir", str(out)])  # fmt: skip
    assert status == 0
    return files, out


def test_the_folder_describes_itself_and_holds_compact_tokens(corpus):
    files, out = corpus
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["format"] == prepared.MANIFEST_FORMAT and manifest["task"] == "translation"
    assert [s["path"] for s in manifest["sources"]] == [str(files[s].resolve()) for s in ("train", "validation",
                                                                                           "test")]  # fmt: skip
    stat = os.stat(files["train"])
    assert (manifest["sources"][0]["size"], manifest["sources"][0]["mtime_ns"]) == (stat.st_size, stat.st_mtime_ns)
    assert manifest["options"]["max_source_length"] == 14 and manifest["options"]["tokenizer_sample"] == 30
    assert manifest["token_dtype"] == "uint16" and manifest["vocab_size"] == 400
    tokenizer = load_tokenizer(out)
    raw = {s: [json.loads(line)["translation"] for line in files[s].read_text().splitlines()] for s in files}
    counts = manifest["counts"]
    assert counts["train"]["read"] == 60 and counts["train"]["dropped"] == counts["train"]["overlong"] > 0
    assert counts["train"]["kept"] == 60 - counts["train"]["dropped"]
    for split in ("train", "validation", "test"):
        tokens = datasets.load_from_disk(str(out / split))
        assert tokens.features["input_ids"] == datasets.List(datasets.Value("uint16"))
        assert tokens.features["labels"] == datasets.List(datasets.Value("uint16"))
        assert "attention_mask" not in tokens.column_names and len(tokens) == counts[split]["kept"]
        # the tokens against the tokenizer run on the text (an independent reference): over-long pairs dropped
        # from train only, every other pair as the tokenizer encodes it, with the lengths beside it
        expected = [tokenizer(p["en"], text_target=p["de"]) for p in raw[split]]
        if split == "train":
            expected = [e for e in expected if len(e["input_ids"]) <= 14 and len(e["labels"]) <= 256]
        assert tokens["input_ids"] == [e["input_ids"] for e in expected]
        assert tokens["labels"] == [e["labels"] for e in expected]
        assert tokens["source_length"] == [len(e["input_ids"]) for e in expected]
    assert len(datasets.load_from_disk(str(out / "text" / "validation"))) == 6


def test_training_from_it_reads_no_text_and_tokenizes_nothing(corpus, tmp_path, monkeypatch):
    files, out = corpus
    copy = tmp_path / "prepared"
    copy.mkdir()
    for path in out.rglob("*"):  # a copy, so that the sources can be moved away without harming the other tests
        target = copy / path.relative_to(out)
        target.mkdir(exist_ok=True) if path.is_dir() else target.write_bytes(path.read_bytes())
    read = []
    monkeypatch.setattr(tasks, "load_translation_splits", lambda **kwargs: read.append(kwargs))
    monkeypatch.setattr(tasks, "tokenize_pairs", lambda *args: read.append(args))
    result = train_in_process(["--prepared_data", str(copy), *TINY_MODEL, *TRAIN, "--output_dir", str(tmp_path / "r")])
    assert result["step"] == 2 and read == []
    assert "test" in result and "bleu" in result["test"]  # the held-out text came from the folder
    assert load_tokenizer(tmp_path / "r").backend_tokenizer.to_str() == load_tokenizer(out).backend_tokenizer.to_str()
    # run_args.json and the model card name the data the folder was prepared from (not the demo dataset)
    run_args = json.loads((tmp_path / "r" / "run_args.json").read_text())
    assert {split: run_args[f"{split}_file"] for split in files} == {s: str(files[s].resolve()) for s in files}
    assert run_args["dataset_name"] is None
    card = (tmp_path / "r" / "README.md").read_text()
    assert f"| Data | {files['train'].name} (en → de) |" in card and "demo" not in card


def test_a_run_of_an_older_version_that_recorded_the_demo_default_resumes(corpus, tmp_path):
    """Before its data's sources were recorded, a run from --prepared_data wrote `"dataset_name": "demo"` and no
    files into run_args.json; resuming it compares its data by the prepared folder's tokenizer instead of refusing
    the changed options. Another training file in run_args.json is still a changed run."""
    _, out = corpus
    run = tmp_path / "r"
    argv = ["--prepared_data", str(out), *TINY_MODEL, *TRAIN, "--output_dir", str(run), "--checkpoint_steps", "1"]
    assert train_in_process(argv)["step"] == 2
    recorded = json.loads((run / "run_args.json").read_text())
    old = {**recorded, "dataset_name": "demo", "train_file": None, "validation_file": None, "test_file": None}
    (run / "run_args.json").write_text(json.dumps(old))
    assert train_in_process([*argv, "--resume_from_checkpoint", "latest"])["step"] == 2
    (run / "run_args.json").write_text(json.dumps({**recorded, "train_file": "/elsewhere/train.jsonl"}))
    status, stderr = train_command_in_process([*argv, "--resume_from_checkpoint", "latest"])
    assert status == 2 and "cannot resume: options that define the run changed (--train_file" in stderr, stderr


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--max_source_length", "20"], "--max_source_length 20 disagrees with --prepared_data"),
        (["--vocab_size", "500"], "--vocab_size 500 disagrees with --prepared_data"),
        (["--tokenizer", "elsewhere"], "which was prepared with no --tokenizer"),
        (["--task", "causal_lm"], "holds data of --task translation, but this run is --task causal_lm"),
    ],
)
def test_options_that_disagree_with_the_manifest_are_refused(corpus, tmp_path, extra, message):
    _, out = corpus
    common = ["--max_train_steps", "2", "--report_to", "none"]  # nothing of one task only
    status, stderr = train_command_in_process(["--prepared_data", str(out), *extra, *common, "--output_dir",
                                               str(tmp_path / "r")])  # fmt: skip
    assert status == 2 and message in stderr and "Traceback" not in stderr, stderr[-2000:]
    assert not (tmp_path / "r").exists()


def test_options_that_agree_are_taken_and_the_others_come_from_the_manifest(corpus):
    files, out = corpus
    manifest = prepared.read_manifest(out)
    args = argparse.Namespace(task="translation", prepared_data=str(out), train_file=str(files["train"]),
                              max_source_length=256, max_target_length=256, source_lang="en", target_lang="de",
                              overlong="drop", tokenizer=None, explicit={"train_file", "source_lang"})  # fmt: skip
    prepared.apply_manifest(args, manifest)
    assert (args.max_source_length, args.tokenizer) == (14, str(out))
    assert (args.validation_file, args.test_file) == (str(files["validation"].resolve()), str(files["test"].resolve()))
    with pytest.raises(UsageError, match="--max_source_length 15 disagrees"):
        prepared.apply_manifest(argparse.Namespace(**{**vars(args), "max_source_length": 15,
                                                      "explicit": {"max_source_length"}}), manifest)  # fmt: skip


def test_a_large_vocabulary_gets_int32_columns(tmp_path):
    from vaswani.data.tokenized import compact, token_dtype

    assert token_dtype(2**16) == "uint16" and token_dtype(2**16 + 1) == "int32"
    dataset = datasets.Dataset.from_dict({"input_ids": [[70_000, 1]], "attention_mask": [[1, 1]], "length": [2]})
    small = compact(dataset, 80_000, tmp_path)
    assert small.features["input_ids"] == datasets.List(datasets.Value("int32"))
    assert small.column_names == ["input_ids", "length"] and small["input_ids"] == [[70_000, 1]]
    assert compact(small, 80_000, tmp_path) is small  # already compact: no second copy


def test_a_language_model_corpus_is_prepared_and_a_masked_lm_trains_from_it(tmp_path, capsys):
    text = tmp_path / "train.txt"
    text.write_text("".join(f"Line {i} of a small text with some words in it.\n" for i in range(80)))
    out = tmp_path / "prepared"
    assert vaswani(["prepare", "--task", "masked_lm", "--train_file", str(text), "--validation_size", "8",
                    "--vocab_size", "300", "--block_size", "32", "--cache_dir", str(tmp_path / "cache"),
                    "--output_dir", str(out)]) == 0  # fmt: skip
    blocks = datasets.load_from_disk(str(out / "train"))
    assert blocks.column_names == ["input_ids", "length"] and max(blocks["length"]) == 32
    said = capsys.readouterr().out  # the blocks each split holds
    assert f"wrote the prepared data to {out} (train: {len(blocks):,} examples, validation: " in said
    result = train_in_process(["--task", "masked_lm", "--prepared_data", str(out), "--d_model", "16",
                               "--encoder_layers", "1", "--encoder_attention_heads", "2", "--encoder_ffn_dim", "32",
                               "--max_tokens", "256", "--max_train_steps", "1", "--eval_steps", "0", "--report_to",
                               "none", "--checkpoint_minutes", "60", "--average_checkpoints", "1", "--output_dir",
                               str(tmp_path / "r")])  # fmt: skip
    assert result["step"] == 1 and "loss" in result["validation"]


def test_an_output_folder_with_other_files_is_never_replaced(corpus, tmp_path):
    files, _ = corpus
    precious = tmp_path / "model"
    precious.mkdir()
    (precious / "config.json").write_text("{}")
    argv = ["prepare", "--train_file", str(files["train"]), "--vocab_size", "400", "--output_dir", str(precious)]
    for extra in ([], ["--overwrite_output_dir"]):
        with pytest.raises(UsageError, match="not empty|not a prepared-data folder"):
            prepared.check_prepared_output(precious, bool(extra))
        assert vaswani([*argv, *extra]) == 2
    assert [p.name for p in precious.iterdir()] == ["config.json"]


def test_prepare_refuses_prepared_data_and_bad_values_before_reading(tmp_path, capsys):
    for extra, message in ((["--prepared_data", "x"], "unrecognized arguments: --prepared_data"),
                           (["--max_source_length", "0"], "--max_source_length: must be at least 1"),
                           (["--tokenizer_sample", "0"], "--tokenizer_sample: must be at least 1"),
                           (["--task", "causal_lm", "--block_size", "1"], "--block_size 1 is not allowed"),
                           # the other task's options, refused as `vaswani train` refuses them
                           (["--block_size", "64"], "--block_size is not an option of --task translation"),
                           (["--task", "causal_lm", "--drop_copies"], "--drop_copies is not an option of --task "
                            "causal_lm"),
                           (["--task", "masked_lm", "--max_source_length", "9"], "--max_source_length is not an "
                            "option of --task masked_lm")):  # fmt: skip
        argv = [
            "prepare",
            "--train_file",
            str(tmp_path / "missing.jsonl"),
            *extra,
            "--output_dir",
            str(tmp_path / "o"),
        ]
        assert vaswani(argv) == 2
        assert message in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_a_folder_that_is_not_prepared_data_is_a_clear_error(tmp_path):
    from vaswani.errors import DataError

    with pytest.raises(DataError, match="no such folder"):
        prepared.read_manifest(tmp_path / "missing")
    with pytest.raises(DataError, match="has no manifest.json: not a folder written by `vaswani prepare`"):
        prepared.read_manifest(tmp_path)
    (tmp_path / "manifest.json").write_text('{"format": "something else"}')
    with pytest.raises(DataError, match="not a vaswani prepared-data manifest"):
        prepared.read_manifest(tmp_path)
    (tmp_path / "manifest.json").write_text(json.dumps({"format": prepared.MANIFEST_FORMAT, "version": 99}))
    with pytest.raises(DataError, match="format version 99"):
        prepared.read_manifest(tmp_path)
    status, stderr = train_command_in_process(["--prepared_data", str(tmp_path / "missing"), "--max_train_steps",
                                               "1", "--output_dir", str(tmp_path / "r")])  # fmt: skip
    assert status == 2 and "error: --prepared_data" in stderr and not (tmp_path / "r").exists()


def test_without_cache_dir_prepare_leaves_only_its_folder(tmp_path, monkeypatch, caplog):
    """The Arrow copy of the text and the tokenized cache go to a temporary folder beside --output_dir, removed at the
    end, and the log says so (its earlier line named the cache as one a later run reuses); HF_DATASETS_CACHE is not
    touched."""
    files = write_demo_files(tmp_path / "data", num_train=30, num_validation=4, num_test=4)
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "hf-cache")
    out = tmp_path / "work" / "prepared"
    with caplog.at_level(logging.INFO, logger="train"):
        assert vaswani(["prepare", "--train_file", str(files["train"]), "--vocab_size", "400", "--validation_size",
                        "4", "--output_dir", str(out)]) == 0  # fmt: skip
    assert "Removed the temporary caches in " + str(tmp_path / "work" / ".tmp-cache-prepared-") in caplog.text
    assert [p.name for p in (tmp_path / "work").iterdir()] == ["prepared"]
    assert not (tmp_path / "hf-cache").exists()
    assert prepared.read_manifest(out)["counts"]["validation"]["kept"] == 4
