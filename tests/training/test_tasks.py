"""`vaswani train --task causal_lm|masked_lm`: the one-stack models trained by the project's trainer on text.

Each run is a tiny model trained in this process (`train_in_process`). The language models must learn: the causal LM's
validation perplexity ends far below a unigram model's (token frequencies of the training text), the masked LM's
masked-token accuracy far above always guessing the most frequent token. A stopped and resumed masked-LM run equals
an uninterrupted one (the masks come from the checkpointed generator). Every LM option changes what a run computes,
and every option that does not belong to a task is an `error:` line before any training.
"""

import json
import math
from collections import Counter
from pathlib import Path

import pytest
import torch
from conftest import train_command_in_process, train_in_process
from safetensors.torch import load_file

from vaswani.data.demo import write_demo_files

TINY_LM = [
    "--vocab_size", "400", "--d_model", "32", "--warmup_steps", "10", "--learning_rate", "3e-3",
    "--lr_scheduler", "constant_with_warmup", "--dropout", "0.1", "--block_size", "32", "--max_tokens", "512",
    "--logging_steps", "1", "--report_to", "none", "--checkpoint_minutes", "60", "--min_frequency", "2",
]  # fmt: skip
DECODER = ["--decoder_layers", "1", "--decoder_attention_heads", "2", "--decoder_ffn_dim", "64"]
ENCODER = ["--encoder_layers", "1", "--encoder_attention_heads", "2", "--encoder_ffn_dim", "64"]
# What the learning tests add: word-sized tokens and a model that learns in a few hundred updates.
LEARNER = ["--vocab_size", "1000", "--d_model", "64", "--learning_rate", "3e-3", "--dropout", "0"]


def english_lines(path: Path) -> list[str]:
    return [json.loads(line)["translation"]["en"] for line in path.read_text(encoding="utf-8").splitlines()]


@pytest.fixture(scope="module")
def text_dir(tmp_path_factory) -> Path:
    """The English side of the demo set as plain text (train.txt, valid.txt) and as .jsonl with a "body" field."""
    folder = tmp_path_factory.mktemp("text")
    write_demo_files(folder, num_train=400, num_validation=100, num_test=20)
    for split, name in (("train", "train"), ("validation", "valid"), ("test", "test")):
        lines = english_lines(folder / f"{split}.jsonl")
        (folder / f"{name}.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
        (folder / f"{name}.body.jsonl").write_text("".join(json.dumps({"body": t}) + "\n" for t in lines))
    return folder


def text_args(folder: Path) -> list[str]:
    return ["--train_file", str(folder / "train.txt"), "--validation_file", str(folder / "valid.txt")]


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def token_counts(tokenizer, lines: list[str]) -> Counter:
    return Counter(t for ids in tokenizer(lines)["input_ids"] for t in ids)


def unigram_perplexity(tokenizer, lines: list[str]) -> float:
    """The perplexity on `lines` of the best unigram model there is for them: their own token frequencies (no
    context). A language model must beat it by using context; no unigram model estimated elsewhere can."""
    counts = token_counts(tokenizer, lines)
    total = sum(counts.values())
    return math.exp(-sum(c * math.log(c / total) for c in counts.values()) / total)


def most_frequent_token_accuracy(tokenizer, lines: list[str]) -> float:
    """How often the most frequent word token of `lines` (the best constant guess, chosen on them) is right at a
    masked position of `lines` (masks fall uniformly on the tokens that are not special)."""
    special = set(tokenizer.all_special_ids)
    counts = Counter({t: c for t, c in token_counts(tokenizer, lines).items() if t not in special})
    return counts.most_common(1)[0][1] / sum(counts.values())


def load_tokenizer(folder: Path):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(folder)


# ---------------------------------------------------------------------------------------------------------------------
# The language models learn
# ---------------------------------------------------------------------------------------------------------------------
def test_causal_lm_reaches_a_perplexity_far_below_the_unigram_models(text_dir, tmp_path):
    out = tmp_path / "clm"
    results = train_in_process([
        "--task", "causal_lm", *text_args(text_dir), *TINY_LM, *DECODER, *LEARNER, "--decoder_ffn_dim", "256",
        "--decoder_attention_heads", "4", "--max_train_steps", "100", "--eval_steps", "50", "--output_dir", str(out),
    ])  # fmt: skip
    unigram = unigram_perplexity(load_tokenizer(out), (text_dir / "valid.txt").read_text().splitlines())
    perplexity = results["validation"]["perplexity"]
    assert perplexity == pytest.approx(math.exp(results["validation"]["loss"]))
    assert perplexity < 0.5 * unigram, (perplexity, unigram)
    assert (out / "config.json").exists() and json.loads((out / "config.json").read_text())["model_type"] == (
        "vaswani-decoder"
    )
    card = (out / "README.md").read_text()
    assert "pipeline_tag: text-generation" in card and "causal_lm" in card and "perplexity" in card
    rows = [r for r in read_jsonl(out / "metrics.jsonl") if r["split"] == "validation"]
    assert rows and all({"loss", "perplexity"} <= set(r) for r in rows)  # the evaluations during training


def test_masked_lm_accuracy_is_far_above_the_most_frequent_token(text_dir, tmp_path):
    out = tmp_path / "mlm"
    results = train_in_process([
        "--task", "masked_lm", *text_args(text_dir), *TINY_LM, *ENCODER, *LEARNER, "--encoder_ffn_dim", "256",
        "--encoder_attention_heads", "4", "--norm_position", "pre", "--mlm_probability", "0.3",
        "--max_train_steps", "250", "--eval_steps", "0", "--output_dir", str(out),
    ])  # fmt: skip
    tokenizer = load_tokenizer(out)
    assert tokenizer.mask_token == "<mask>"  # trained with one
    baseline = most_frequent_token_accuracy(tokenizer, (text_dir / "valid.txt").read_text().splitlines())
    accuracy = results["validation"]["accuracy"]
    assert accuracy > 2 * baseline, (accuracy, baseline)
    assert results["validation"]["perplexity"] == pytest.approx(math.exp(results["validation"]["loss"]))
    assert json.loads((out / "config.json").read_text())["model_type"] == "vaswani-encoder"
    assert "pipeline_tag: fill-mask" in (out / "README.md").read_text()


# ---------------------------------------------------------------------------------------------------------------------
# Exact resume
# ---------------------------------------------------------------------------------------------------------------------
def test_a_stopped_and_resumed_masked_lm_run_equals_an_uninterrupted_one(text_dir, tmp_path):
    """Same masks, dropout, LayerDrop, scheduled DropHead and data order after the resume: the same losses and final
    weights."""
    common = ["--task", "masked_lm", *text_args(text_dir), *TINY_LM, *ENCODER, "--max_train_steps", "6",
              "--eval_steps", "0", "--average_checkpoints", "0", "--encoder_layers", "2", "--encoder_layerdrop", "0.3",
              "--drophead_p_start", "0.2", "--drophead_p_end", "0.2", "--gradient_accumulation_steps", "2",
              "--warmup_steps", "4"]  # fmt: skip
    train_in_process([*common, "--output_dir", str(tmp_path / "straight")])
    resumed = tmp_path / "resumed"
    assert train_in_process([*common, "--output_dir", str(resumed), "--stop_after_steps", "3"])["stopped_early"]
    train_in_process([*common, "--output_dir", str(resumed), "--resume_from_checkpoint", "latest"])

    def losses(folder):
        return {r["step"]: r["loss"] for r in read_jsonl(folder / "metrics.jsonl") if r["split"] == "train"}

    assert losses(resumed) == losses(tmp_path / "straight") and len(losses(resumed)) == 6
    a, b = load_file(tmp_path / "straight" / "model.safetensors"), load_file(resumed / "model.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


# ---------------------------------------------------------------------------------------------------------------------
# Options
# ---------------------------------------------------------------------------------------------------------------------
def test_lm_options_change_what_the_run_computes(text_dir, tmp_path, monkeypatch):
    """--text_column (a .jsonl field), --packing no, --block_size, --mlm_probability, --metric_for_best perplexity
    with early stopping and a time budget, seen from inside the run."""
    from vaswani.training import tasks as training_tasks
    from vaswani.training.evaluation import EvaluationStopped

    seen = {}
    original = training_tasks.Run.evaluate

    def evaluate(run, *args, **kwargs):
        if "run" not in seen:  # the first evaluation during training, stopped by a signal at its second batch first
            seen["run"], answers = run, iter([False, True])
            with pytest.raises(EvaluationStopped):
                original(run, "validation", stop=lambda: next(answers))
            seen["stopped"] = next(answers, "asked twice"), run.model.training  # training mode back after the stop
        return original(run, *args, **kwargs)

    monkeypatch.setattr(training_tasks.Run, "evaluate", evaluate)
    data = ["--train_file", str(text_dir / "train.body.jsonl"), "--validation_file", str(text_dir / "valid.body.jsonl"),
            "--text_column", "body"]  # fmt: skip
    out = tmp_path / "opts"
    results = train_in_process([
        "--task", "masked_lm", *data, *TINY_LM, *ENCODER, "--packing", "no", "--block_size", "12",
        "--mlm_probability", "0.5", "--metric_for_best", "perplexity", "--early_stopping_patience", "50",
        "--eval_steps", "2", "--max_train_minutes", "0.02", "--output_dir", str(out),
    ])  # fmt: skip
    run = seen["run"]
    lines = (text_dir / "valid.txt").read_text().splitlines()
    validation = run.tokenized["validation"]
    assert len(validation) == len(lines)  # --packing no: one example per line ...
    assert max(validation["length"]) == 12 < max(len(ids) for ids in run.tokenizer(lines)["input_ids"])  # cut
    masked = sum(label != -100 for row in validation["labels"] for label in row)
    words = sum(length - 1 for length in validation["length"])  # all but </s> can be masked
    assert 0.4 < masked / words < 0.6  # --mlm_probability 0.5 (the default 0.15 would fail)
    assert results["final_model"]["metric"] == "perplexity"
    assert results["finished_early"] == "time budget spent"
    assert results["early_stopping"]["metric"] == "perplexity" and results["early_stopping"]["history"]
    assert seen["stopped"] == ("asked twice", True)  # the loop's side of a stopped evaluation: test_loop.py


def test_packing_yes_cuts_the_token_stream_into_blocks(text_dir, tmp_path, monkeypatch):
    from tokenization import train_bpe_tokenizer
    from vaswani.data.text import load_text_splits, tokenize_texts

    raw, _ = load_text_splits(train_file=str(text_dir / "train.txt"), validation_file=str(text_dir / "valid.txt"),
                              cache_dir=str(tmp_path))  # fmt: skip
    tokenizer = train_bpe_tokenizer(iterator=list(raw["train"]["text"]), vocab_size=400)
    blocks = tokenize_texts(raw, tokenizer, block_size=16, packing="yes")["validation"]
    stream = [t for ids in tokenizer(list(raw["validation"]["text"]))["input_ids"] for t in ids]
    assert [t for row in blocks["input_ids"] for t in row] == stream  # every token once, in order
    assert set(blocks["length"][:-1]) == {16} and 0 < blocks["length"][-1] <= 16


# ---------------------------------------------------------------------------------------------------------------------
# Bad input
# ---------------------------------------------------------------------------------------------------------------------
def test_every_task_provides_the_task_interface_and_the_task_choices_are_the_registry():
    from transformers import PreTrainedModel

    from vaswani.training.options import TASK_NAMES
    from vaswani.training.tasks import TASKS, Task

    assert TASK_NAMES == tuple(TASKS) == ("translation", "causal_lm", "masked_lm")
    for name, task in TASKS.items():
        assert isinstance(task, Task) and task.name == name and task.examples and task.metrics
        assert issubclass(task.model_class, PreTrainedModel)
    # The interface is enforced: a task that leaves out one of its methods cannot be built, and the error names it.
    expected = {"check_args", "load_data", "tokenize", "collators", "scored_tokens", "evaluate", "usage"}
    assert expected <= Task.__abstractmethods__
    for missing in sorted(Task.__abstractmethods__):
        methods = {name: lambda self, *args: None for name in Task.__abstractmethods__ - {missing}}
        with pytest.raises(TypeError, match=missing):
            type("Incomplete", (Task,), methods)()


@pytest.mark.parametrize(
    ("task", "extra", "message"),
    [
        ("causal_lm", ["--source_lang", "en"], "--source_lang is not an option of --task causal_lm"),
        ("causal_lm", ["--num_beams", "2"], "--num_beams is not an option of --task causal_lm"),
        ("causal_lm", ["--encoder_layers", "2"], "--encoder_layers is not an option of --task causal_lm"),
        ("masked_lm", ["--decoder_ffn_dim", "8"], "--decoder_ffn_dim is not an option of --task masked_lm"),
        ("causal_lm", ["--mlm_probability", "0.2"], "--mlm_probability is not an option of --task causal_lm"),
        ("causal_lm", ["--drop_copies"], "--drop_copies is not an option of --task causal_lm"),
        ("masked_lm", ["--max_length_ratio", "2"], "--max_length_ratio is not an option of --task masked_lm"),
        ("translation", ["--block_size", "64"], "--block_size is not an option of --task translation"),
        ("translation", ["--packing", "no"], "--packing is not an option of --task translation"),
        ("causal_lm", ["--metric_for_best", "bleu"], "--metric_for_best bleu is not a metric of --task causal_lm"),
        ("translation", ["--metric_for_best", "perplexity"], "not a metric of --task translation; use one of bleu"),
        ("masked_lm", ["--mlm_probability", "1.5"], "--mlm_probability 1.5 is not allowed"),
        ("causal_lm", ["--block_size", "1"], "--block_size 1 is not allowed"),
        ("causal_lm", ["--block_size", "64", "--max_tokens", "32"], "--max_tokens 32 is smaller than --block_size"),
        ("causal_lm", ["--packing", "maybe"], "invalid choice: 'maybe'"),
        ("masked_lm", ["--push_to_hub"], "--push_to_hub needs --hub_model_id"),
        ("causal_lm", ["--task", "lm"], "invalid choice: 'lm'"),
    ],
)
def test_wrong_options_for_a_task_are_one_error_line(task, extra, message, text_dir, tmp_path):
    status, stderr = train_command_in_process([
        "--task", task, *text_args(text_dir), "--max_train_steps", "1", "--output_dir", str(tmp_path / "o"), *extra,
    ])  # fmt: skip
    assert status == 2 and message in stderr and "Traceback" not in stderr, stderr[-2000:]
    assert not (tmp_path / "o").exists()


def test_bad_text_input_is_one_error_line(text_dir, tmp_path):
    from tokenization import train_bpe_tokenizer

    no_mask = tmp_path / "tok"
    train_bpe_tokenizer(iterator=["a b c", "b c d"], vocab_size=300, min_frequency=1).save_pretrained(no_mask)
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "fine"}\n{"body": "no text field"}\n')
    surrogate = tmp_path / "surrogate.jsonl"
    surrogate.write_text('{"text": "fine"}\n{"text": "half a pair: \\udc00"}\n')
    cases = [
        (["--task", "masked_lm", *text_args(text_dir), "--tokenizer", str(no_mask)], "has no mask token"),
        (["--task", "causal_lm", "--train_file", str(bad)], "bad.jsonl line 2: no 'text' field"),
        (["--task", "causal_lm", "--train_file", str(tmp_path / "missing.txt")], "file not found"),
        (
            ["--task", "causal_lm", "--train_file", str(surrogate)],
            "surrogate.jsonl line 2: the 'text' field holds a lone surrogate \\udc00 at character 14",
        ),  # fmt: skip
    ]
    for args, message in cases:
        status, stderr = train_command_in_process([*args, "--max_train_steps", "1", "--output_dir",
                                                   str(tmp_path / "o")])  # fmt: skip
        assert status == 2 and message in stderr and "Traceback" not in stderr, stderr[-2000:]
        assert not (tmp_path / "o" / "run_args.json").exists()


def test_a_datasets_folder_with_a_nested_text_column(text_dir, tmp_path, monkeypatch):
    """--dataset_name (a local `datasets` folder of translation .jsonl files) with --text_column translation.en: the
    English side, every split the folder has."""
    from vaswani.training import tasks as training_tasks

    folder = tmp_path / "corpus"
    folder.mkdir()
    for split in ("train", "validation", "test"):
        (folder / f"{split}.jsonl").write_text((text_dir / f"{split}.jsonl").read_text())
    seen = {}
    original = training_tasks.Run.evaluate
    monkeypatch.setattr(training_tasks.Run, "evaluate", lambda run, *a, **k: seen.setdefault("run", run) and original(
        run, *a, **k))  # fmt: skip
    results = train_in_process([
        "--task", "causal_lm", "--dataset_name", str(folder), "--text_column", "translation.en",
        "--cache_dir", str(tmp_path / "cache"), *TINY_LM, *DECODER, "--max_train_steps", "1", "--eval_steps", "0",
        "--output_dir", str(tmp_path / "o"),
    ])  # fmt: skip
    raw = seen["run"].raw
    assert list(raw["test"]["text"]) == english_lines(text_dir / "test.jsonl") and "test" in results
    assert len(raw["train"]) == 400 and len(raw["validation"]) == 100


# ---------------------------------------------------------------------------------------------------------------------
# Publishing
# ---------------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("task", "stack", "auto_class"), [("causal_lm", DECODER, "AutoModelForCausalLM"),
                                                            ("masked_lm", ENCODER, "AutoModelForMaskedLM")])  # fmt: skip
def test_push_to_hub_uploads_the_language_model_with_its_card(task, stack, auto_class, text_dir, tmp_path,
                                                              monkeypatch):  # fmt: skip
    """--push_to_hub works for the LM tasks as for translation: one commit with the weights, the tokenizer, the
    one-stack modeling code (so the repo loads with trust_remote_code) and the LM card; `vaswani push` of the same
    folder uploads the same files."""
    from test_push import HubRecorder

    from vaswani.cli import main as vaswani_main

    hub = HubRecorder(monkeypatch)
    out = tmp_path / "lm"
    train_in_process(["--task", task, *text_args(text_dir), *TINY_LM, *stack, "--max_train_steps", "2",
                      "--push_to_hub", "--hub_model_id", "me/tiny-lm", "--output_dir", str(out)])  # fmt: skip
    assert len(hub.commits) == 1
    files = hub.commits[0]["files"]
    assert {"model.safetensors", "tokenizer.json", "README.md", "configuration_vaswani_lm.py",
            "modeling_vaswani_lm.py"} <= set(files)  # fmt: skip
    assert auto_class in json.loads(files["config.json"])["auto_map"]
    assert f"vaswani train --task {task}" in files["README.md"].decode()  # the LM card, not the translation one
    assert vaswani_main(["push", "--model", str(out), "--hub_model_id", "me/tiny-lm"]) == 0
    assert set(hub.commits[1]["files"]) == set(files)
    (out / "modeling_vaswani_lm.py").unlink()  # a folder that could not load with trust_remote_code is refused
    assert vaswani_main(["push", "--model", str(out), "--hub_model_id", "me/tiny-lm"]) == 2 and len(hub.commits) == 2


@pytest.mark.parametrize(
    ("files", "said"),
    [
        ({}, "Using the built-in demo dataset"),
        ({"train_file": "train.jsonl", "validation_file": "validation.jsonl"},
         "dataset_name demo (as configs/demo.yaml sets it) gives the test data: the built-in numbers and dates, not "
         "yours; pass --test_file, or leave dataset_name out"),
        ({"train_file": "train.jsonl"}, "gives the validation and test data: the built-in numbers and dates, not yours; "
         "pass --validation_file and --test_file"),
        ({"train_file": "train.jsonl", "validation_file": "validation.jsonl", "test_file": "test.jsonl"}, None),
    ],
)  # fmt: skip
def test_the_demo_dataset_beside_the_users_files_is_a_warning_naming_the_splits(files, said, tmp_path, caplog):
    """configs/demo.yaml names the demo dataset: with a user's --train_file, the splits without a file came from it
    silently (a run on other data then reported a test BLEU on numbers and dates)."""
    from types import SimpleNamespace

    from vaswani.training.tasks import load_data

    write_demo_files(tmp_path, num_train=600, num_validation=20, num_test=20)
    paths = {name: str(tmp_path / value) for name, value in files.items()}
    args = SimpleNamespace(**{"train_file": None, "validation_file": None, "test_file": None, **paths},
                           dataset_name="demo", dataset_config_name=None, source_lang="en", target_lang="de",
                           validation_size=500, seed=0, cache_dir=str(tmp_path / "cache"))  # fmt: skip
    with caplog.at_level("INFO", logger="train"):
        raw, report = load_data(args, SimpleNamespace(num_processes=1, is_local_main_process=True,
                                                      is_main_process=True))  # fmt: skip
    assert set(raw) == {"train", "validation", "test"}
    assert len(raw["test"]) == (20 if "test_file" in files else 1000)  # the file, or the demo's own test split
    messages = [(r.levelname, r.getMessage()) for r in caplog.records if "demo" in r.getMessage()]
    if said is None:
        assert not messages
    else:
        assert len(messages) == 1 and said in messages[0][1], messages
        assert messages[0][0] == ("INFO" if not files else "WARNING")
