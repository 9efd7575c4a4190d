"""train.py end to end on a tiny config: one process, two processes, exact resume, and every bad input it must
reject before training time is spent (with `error: ...`, exit code 2 and no traceback)."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from conftest import (
    REPO_ROOT,
    command_server,
    reports_of_two_ranks,
    run_command,
    run_cpu_ranks,
    train_command_in_process,
    train_in_process,
)
from safetensors.torch import load_file

from vaswani.data.demo import write_demo_files

TINY_RUN = [
    "--vocab_size", "400", "--d_model", "32", "--encoder_layers", "2", "--decoder_layers", "2",
    "--encoder_attention_heads", "2", "--decoder_attention_heads", "2", "--encoder_ffn_dim", "64",
    "--decoder_ffn_dim", "64", "--max_tokens", "600", "--max_source_length", "48", "--max_target_length", "48",
    "--warmup_steps", "4", "--eval_steps", "0", "--logging_steps", "1", "--max_eval_samples", "12",
    "--num_beams", "2", "--num_examples", "2", "--report_to", "none", "--checkpoint_minutes", "60",
]  # fmt: skip


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("data")
    write_demo_files(folder, num_train=240, num_validation=16, num_test=16)
    return folder


def data_args(data_dir: Path) -> list[str]:
    return [
        "--train_file", str(data_dir / "train.jsonl"), "--validation_file", str(data_dir / "validation.jsonl"),
        "--test_file", str(data_dir / "test.jsonl"),
    ]  # fmt: skip


def train_env(cwd: Path) -> dict[str, str]:
    """The environment of a training subprocess: offline, one thread, its datasets cache in `cwd`, this checkout."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", "OMP_NUM_THREADS": "1"}
    env["HF_DATASETS_CACHE"] = str(cwd / "datasets_cache")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    return env


def run_train(
    args: list[str], cwd: Path, processes: int = 1, timeout: int = 400, script: Path = REPO_ROOT / "train.py"
) -> subprocess.CompletedProcess:
    """`python train.py ARGS` (or another `script`) in `cwd`, to its end: one process, forked from the worker's
    command server (conftest.command_server) when it is train.py (its datasets cache is then the server's, not
    `train_env`'s), or `processes` gloo ranks under `accelerate launch`."""
    env = train_env(cwd)
    if processes > 1:
        return run_cpu_ranks(script, args, processes=processes, env=env, cwd=cwd, timeout=timeout)
    if script == REPO_ROOT / "train.py":
        return command_server().run("train", args, cwd=cwd, env=env, timeout=timeout)
    return run_command([sys.executable, str(script), *args], env=env, cwd=cwd, timeout=timeout)


def read_metrics(output_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (output_dir / "metrics.jsonl").read_text().splitlines()]


def read_pairs(path: Path) -> list[tuple[str, str]]:
    rows = [json.loads(line)["translation"] for line in path.read_text(encoding="utf-8").splitlines()]
    return [(row["en"], row["de"]) for row in rows]


def assert_scores_are_sacrebleu_of_every_pair(scores: dict, split_file: Path, size: int) -> None:
    """With --num_examples at least the split size, the examples are every hypothesis scored: each of the first
    `size` pairs of the split once, in order, and BLEU and chrF are sacrebleu's on exactly them."""
    import sacrebleu

    examples = scores["examples"]
    assert [(e["source"], e["reference"]) for e in examples] == read_pairs(split_file)[:size]
    hypotheses, references = [e["translation"] for e in examples], [e["reference"] for e in examples]
    assert scores["bleu"] == pytest.approx(sacrebleu.corpus_bleu(hypotheses, [references]).score)
    assert scores["chrf"] == pytest.approx(sacrebleu.corpus_chrf(hypotheses, [references]).score)


# ---------------------------------------------------------------------------------------------------------------------
# Runs
# ---------------------------------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_few_step_run_in_one_process_leaves_a_loadable_model(data_dir, tmp_path):
    out = tmp_path / "run"
    result = run_train(
        [*data_args(data_dir), *TINY_RUN, "--output_dir", str(out), "--max_train_steps", "6",
         "--checkpoint_steps", "2", "--average_checkpoints", "3", "--eval_steps", "3", "--num_examples", "16",
         "--average_window", "1", "--final_model", "average"],
        tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-4000:]
    # The folder: weights, config, generation config, tokenizer, model card, records.
    for name in ("model.safetensors", "config.json", "generation_config.json", "tokenizer.json", "README.md",
                 "metrics.jsonl", "results.json", "run_args.json", "modeling_vaswani.py"):  # fmt: skip
        assert (out / name).exists(), name
    generation = json.loads((out / "generation_config.json").read_text())
    assert generation["num_beams"] == 4 and generation["length_penalty"] == 0.6
    results = json.loads((out / "results.json").read_text())
    # the window (the whole run) holds the checkpoints of steps 2, 4, 6, planned by the window and --checkpoint_steps
    # (--final_model average keeps no validation record, so the evaluation at step 3 saves none)
    assert results["step"] == 6 and results["averaged_checkpoints"] == ["step-00000002", "step-00000004",
                                                                        "step-00000006"]  # fmt: skip
    for split, size in (("validation", 16), ("test", 16)):  # the final scores: every pair (--final_eval_samples unset)
        assert "signature" not in results[split] and results[split]["bleu_signature"].startswith("nrefs:1|")
        assert_scores_are_sacrebleu_of_every_pair(results[split], data_dir / f"{split}.jsonl", size)
    metrics = read_metrics(out)
    train_steps = [m["step"] for m in metrics if m["split"] == "train"]
    assert train_steps == [1, 2, 3, 4, 5, 6]
    assert [m["step"] for m in metrics if m["split"] == "validation"] == [3]
    assert all(m["loss"] > 0 and m["target_tokens_per_second"] > 0 for m in metrics if m["split"] == "train")
    # The final model is the average of the three checkpoints.
    average = {k: sum(load_file(out / "checkpoints" / c / "model.safetensors")[k].double()
                      for c in results["averaged_checkpoints"]) / 3
               for k in load_file(out / "checkpoints" / "step-00000006" / "model.safetensors")}  # fmt: skip
    final = load_file(out / "model.safetensors")
    for key, tensor in average.items():
        torch.testing.assert_close(final[key].double(), tensor, atol=1e-6, rtol=1e-6, msg=key)
    # It loads with the Auto classes and translates.
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    import modeling_vaswani  # noqa: F401

    model = AutoModelForSeq2SeqLM.from_pretrained(out).eval()
    tokenizer = AutoTokenizer.from_pretrained(out)
    batch = tokenizer(["She was born on the third of March."], return_tensors="pt")
    assert model.generate(**batch, max_new_tokens=5).shape[0] == 1
    assert "---" in (out / "README.md").read_text()[:5]  # YAML metadata of the model card


def test_max_test_samples_scores_the_first_test_pairs_and_every_record_names_the_slice(data_dir, tmp_path, caplog):
    """--max_test_samples 5 of the 16 test pairs: the final test scores are sacrebleu's on exactly the first 5, and
    results.json, the log and the model card (its table and the Hub's model-index) call the split test[:5]; the same
    for --final_eval_samples (validation[:8]). A limit at or above the split's size is the whole split, plain name."""
    import yaml

    out = tmp_path / "run"
    with caplog.at_level("INFO", logger="train"):
        results = train_in_process([*data_args(data_dir), *TINY_RUN, "--output_dir", str(out), "--max_train_steps",
                                    "2", "--num_examples", "16", "--max_test_samples", "5",
                                    "--final_eval_samples", "8"])  # fmt: skip
    assert results["test"]["split"] == "test[:5]" and results["validation"]["split"] == "validation[:8]"
    assert_scores_are_sacrebleu_of_every_pair(results["test"], data_dir / "test.jsonl", 5)
    assert_scores_are_sacrebleu_of_every_pair(results["validation"], data_dir / "validation.jsonl", 8)
    assert json.loads((out / "results.json").read_text())["test"]["split"] == "test[:5]"
    assert "final test[:5] @ step 2: bleu" in caplog.text and "final validation[:8] @ step 2: bleu" in caplog.text
    card = (out / "README.md").read_text()
    [index] = yaml.safe_load(card.split("---")[1])["model-index"]
    splits = {result["dataset"]["split"] for result in index["results"]}
    assert splits == {"validation[:8]", "test[:5]"}
    # the card is named after the output folder (not the staging folder the final model is written in) and names
    # the files the splits came from
    assert index["name"] == "run" and "\n# run\n" in card and ".tmp" not in card
    assert {result["dataset"]["name"] for result in index["results"]} == {"validation.jsonl", "test.jsonl"}
    assert "| Data | train.jsonl (en → de) |" in card
    assert "| test[:5] |" in card
    [final_test] = [row for row in read_metrics(out) if row["split"] == "final_test"]
    assert final_test["bleu"] == results["test"]["bleu"] and final_test["dataset_split"] == "test[:5]"
    whole = train_in_process([*data_args(data_dir), *TINY_RUN, "--output_dir", str(tmp_path / "whole"),
                              "--max_train_steps", "1", "--num_examples", "16", "--max_test_samples", "16",
                              "--final_eval_samples", "20"])  # fmt: skip
    assert "split" not in whole["test"] and "split" not in whole["validation"]
    finals = {row["split"]: row["dataset_split"] for row in read_metrics(tmp_path / "whole") if "dataset_split" in row}
    assert finals == {"final_validation": "validation", "final_test": "test"}
    assert_scores_are_sacrebleu_of_every_pair(whole["test"], data_dir / "test.jsonl", 16)


def test_bleu_is_tokenized_for_the_target_language(data_dir, tmp_path):
    """A Chinese target is scored with sacrebleu's zh tokenizer (13a would leave its sentences whole), as sacrebleu's
    command line scores `-l en-zh`. The demo's German side stands in for Chinese: the tokenizer follows the code."""
    import sacrebleu

    for split in ("train", "validation", "test"):
        rows = [json.loads(line)["translation"] for line in (data_dir / f"{split}.jsonl").read_text().splitlines()]
        (tmp_path / f"{split}.jsonl").write_text(
            "".join(json.dumps({"translation": {"en": row["en"], "zh": row["de"]}}) + "\n" for row in rows),
            encoding="utf-8",
        )
    results = train_in_process([*data_args(tmp_path), "--source_lang", "en", "--target_lang", "zh", *TINY_RUN,
                                "--output_dir", str(tmp_path / "run"), "--max_train_steps", "1",
                                "--num_examples", "16"])  # fmt: skip
    scores = results["test"]
    assert "|tok:zh|" in scores["bleu_signature"]
    hypotheses, references = (
        [e["translation"] for e in scores["examples"]],
        [e["reference"] for e in scores["examples"]],
    )
    assert len(hypotheses) == 16
    assert scores["bleu"] == pytest.approx(sacrebleu.BLEU(trg_lang="zh").corpus_score(hypotheses, [references]).score)


@pytest.mark.slow
def test_a_user_error_on_one_process_stops_every_process_with_one_message(data_dir, tmp_path):
    """Only the main process trains the tokenizer, so only it finds --vocab_size too small: it prints the error and
    the other process stops with it (status 2, nothing printed), instead of a gloo traceback about a lost peer."""
    out = tmp_path / "run"
    result = run_train([*data_args(data_dir), *TINY_RUN, "--output_dir", str(out), "--max_train_steps", "2",
                        "--vocab_size", "20"], tmp_path, processes=2, timeout=300)  # fmt: skip
    assert result.returncode != 0
    assert result.stderr.count("error: vocab_size=20 is too small") == 1, result.stderr[-4000:]
    for symptom in ("[rank1]", "[rank0]", "Connection closed", "gloo"):  # torch's prefix of a rank's traceback
        assert symptom not in result.stderr, result.stderr[-4000:]
    launcher_says_two = result.stderr.count("exitcode  : 2") + result.stderr.count("exitcode: 2")  # its report
    assert launcher_says_two >= 1, result.stderr[-6000:]
    assert not out.exists() or not any(out.iterdir())  # nothing made or left behind


@pytest.mark.slow
def test_main_process_first_and_together_stop_every_process_together(tmp_path):
    """The two helpers with a failure planted on one rank (tests/scripts/stop_together.py): the rank that failed
    raises its own error, the other raises ReportedElsewhere (printed by nobody), and nobody waits for a peer that
    is gone; without a failure, the main process's block ends before the other's starts (main first)."""
    main, other = reports_of_two_ranks("stop_together.py", tmp_path)
    planted = [["UsageError", f"planted on rank {rank}"] for rank in (0, 1)]
    elsewhere = [["ReportedElsewhere", f"process {rank} of the run failed"] for rank in (0, 1)]
    expected = {  # case: (what rank 0 raised, what rank 1 raised)
        "main first, nobody fails": (None, None),
        "main first, the main process fails": (planted[0], elsewhere[0]),
        "main first, the other process fails": (elsewhere[1], planted[1]),
        "together, the other process fails": (elsewhere[1], planted[1]),
        "together, nobody fails": (None, None),
    }
    assert {case: (main[case]["error"], other[case]["error"]) for case in expected} == expected
    checkpoint = (
        main["checkpoint, the other process's write fails"],
        other["checkpoint, the other process's write fails"],
    )
    assert checkpoint[0]["error"] == elsewhere[1] and checkpoint[1]["error"][0] == "OSError"
    assert checkpoint[0]["published"] == checkpoint[1]["published"] == []  # nothing half-written was published
    assert other["main first, the main process fails"]["ran_at"] is None  # it never ran its block
    case = main["main first, nobody fails"], other["main first, nobody fails"]
    assert case[1]["ran_at"] >= case[0]["ran_at"] + 0.5  # the main process slept 0.5 s in its block first


@pytest.mark.slow
def test_two_process_run_with_layerdrop(data_dir, tmp_path):
    out = tmp_path / "run"
    result = run_train(
        [*data_args(data_dir), *TINY_RUN, "--output_dir", str(out), "--max_train_steps", "4",
         "--checkpoint_steps", "2", "--average_checkpoints", "2", "--average_window", "1", "--encoder_layerdrop", "0.3",
         "--decoder_layerdrop", "0.3", "--drophead_p_start", "0.2", "--drophead_p_end", "0.1", "--num_examples", "16"],
        tmp_path, processes=2,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-4000:]
    assert "Expected to have finished reduction" not in result.stderr
    assert "2 processes" in result.stderr
    results = json.loads((out / "results.json").read_text())
    assert results["step"] == 4
    assert [m["step"] for m in read_metrics(out) if m["split"] == "train"] == [1, 2, 3, 4]
    # The final model was chosen by the main process's validation BLEU and loaded by both processes alike.
    choice = results["final_model"]
    assert [c["name"] for c in choice["candidates"]] == ["last", "average"]
    assert choice["chosen"] == max(choice["candidates"], key=lambda c: (c["score"], c["name"] == "last"))["name"]
    # Every test pair was translated once, the two processes' halves gathered in order, and scored as a whole.
    assert_scores_are_sacrebleu_of_every_pair(results["test"], data_dir / "test.jsonl", 16)
    # The test loss is reduced over both processes: it equals the loss of the saved model over the whole test set,
    # computed here in one process, pair by pair.
    from transformers import AutoTokenizer

    from modeling_vaswani import VaswaniForConditionalGeneration

    model = VaswaniForConditionalGeneration.from_pretrained(out).eval()
    tokenizer = AutoTokenizer.from_pretrained(out)
    loss_sum, tokens = 0.0, 0
    with torch.no_grad():
        for source, target in read_pairs(data_dir / "test.jsonl"):
            batch = tokenizer([source], text_target=[target], return_tensors="pt")
            loss_sum += model(**batch).loss.item() * batch["labels"].numel()
            tokens += batch["labels"].numel()
    assert results["test"]["loss"] == pytest.approx(loss_sum / tokens, rel=1e-5)


@pytest.mark.slow
def test_bf16_mixed_precision_trains_on_cpu_and_saves_float32_weights(data_dir, tmp_path):
    """`--mixed_precision bf16` goes through Accelerate's autocast (CPU here, CUDA on a GPU): the same seed then
    gives slightly different losses than full precision, all finite, and the saved weights stay float32."""
    losses = {}
    for precision in ("no", "bf16"):  # in this process: Accelerate's state is reset between the runs
        out = tmp_path / precision
        train_in_process([*data_args(data_dir), *TINY_RUN, "--output_dir", str(out), "--max_train_steps", "3",
                          "--checkpoint_steps", "3", "--average_checkpoints", "1", "--mixed_precision", precision,
                          "--cache_dir", str(tmp_path / "cache")])  # fmt: skip
        losses[precision] = [m["loss"] for m in read_metrics(out) if m["split"] == "train"]
    assert len(losses["bf16"]) == 3 and all(torch.isfinite(torch.tensor(losses["bf16"])))
    assert losses["bf16"] != losses["no"]  # autocast really ran in bfloat16
    torch.testing.assert_close(torch.tensor(losses["bf16"]), torch.tensor(losses["no"]), rtol=0.05, atol=0.0)
    weights = load_file(tmp_path / "bf16" / "model.safetensors")
    assert {tensor.dtype for tensor in weights.values()} == {torch.float32}


def test_a_stopped_run_makes_a_model_folder_of_its_checkpoints(data_dir, tmp_path, capsys):
    """The run folder holds config.json from the start, so `vaswani average --run_dir` makes a model folder of a
    checkpoint of a run that is still training or stopped; giving the run or a checkpoint to translate says so."""
    from modeling_vaswani import VaswaniForConditionalGeneration
    from vaswani.cli import main

    out = tmp_path / "run"
    results = train_in_process([*data_args(data_dir), *TINY_RUN, "--output_dir", str(out), "--max_train_steps", "6",
                                "--checkpoint_steps", "2", "--stop_after_steps", "2"])  # fmt: skip
    assert results["stopped_early"] and not (out / "model.safetensors").exists()
    assert json.loads((out / "config.json").read_text())["architectures"] == ["VaswaniForConditionalGeneration"]
    assert json.loads((out / "generation_config.json").read_text())["num_beams"] == 4  # as the final save writes it
    sentences = tmp_path / "in.en"
    sentences.write_text("one two three\n", encoding="utf-8")
    checkpoint = out / "checkpoints" / "step-00000002"
    for model, message in ((out, f"{out} is a training run without its final model yet"),
                           (checkpoint, f"it is a training checkpoint of the run {out}: make a model folder of it"),
                           (out / "checkpoints", f"it holds the checkpoints of the run {out}")):  # fmt: skip
        capsys.readouterr()
        assert main(["translate", "--model", str(model), "--input", str(sentences)]) == 2
        assert message in capsys.readouterr().err
    assert main(["average", "--run_dir", str(out), "--last", "1", "--output_dir", str(tmp_path / "peek")]) == 0
    averaged = VaswaniForConditionalGeneration.from_pretrained(tmp_path / "peek").state_dict()
    saved = load_file(checkpoint / "model.safetensors")
    assert saved.keys() <= averaged.keys() and len(saved) > 10
    for name, tensor in saved.items():  # the average of one checkpoint is that checkpoint
        torch.testing.assert_close(averaged[name], tensor, rtol=0, atol=0)
    assert main(["translate", "--model", str(tmp_path / "peek"), "--input", str(sentences), "--output",
                 str(tmp_path / "out.txt")]) == 0  # fmt: skip


RESUME_RUN = [*TINY_RUN, "--max_train_steps", "6", "--average_checkpoints", "0", "--encoder_layerdrop", "0.2",
              "--drophead_p_start", "0.2", "--drophead_p_end", "0.2", "--gradient_accumulation_steps", "2"]  # fmt: skip


@pytest.fixture(scope="module")
def straight_run(data_dir, tmp_path_factory):
    """An uninterrupted run of RESUME_RUN (dropout, LayerDrop and scheduled DropHead on)."""
    cwd = tmp_path_factory.mktemp("straight")
    result = run_train([*data_args(data_dir), *RESUME_RUN, "--output_dir", str(cwd / "run")], cwd)
    assert result.returncode == 0, result.stderr[-4000:]
    return cwd / "run"


def train_losses(folder):
    return {m["step"]: m["loss"] for m in read_metrics(folder) if m["split"] == "train"}


@pytest.mark.slow
def test_stopped_and_resumed_run_equals_an_uninterrupted_run(data_dir, tmp_path, straight_run):
    """Same data order, same next losses, same final weights (dropout, LayerDrop and scheduled DropHead on). Each run
    is a train.py process of its own, as the uninterrupted one is (in a worker process that ran other tests first,
    the losses came out 1e-5 apart)."""
    common = [*data_args(data_dir), *RESUME_RUN]
    resumed = tmp_path / "resumed"
    stopped = run_train([*common, "--output_dir", str(resumed), "--stop_after_steps", "3"], tmp_path)
    assert stopped.returncode == 0, stopped.stderr[-4000:]
    assert not (resumed / "model.safetensors").exists()  # no final model yet
    assert [c.name for c in (resumed / "checkpoints").iterdir()] == ["step-00000003"]
    again = run_train([*common, "--output_dir", str(resumed), "--resume_from_checkpoint", "latest"], tmp_path)
    assert again.returncode == 0, again.stderr[-4000:]
    assert "Resumed from" in again.stderr

    assert train_losses(resumed) == pytest.approx(train_losses(straight_run), rel=1e-6, abs=1e-9)
    a, b = load_file(straight_run / "model.safetensors"), load_file(resumed / "model.safetensors")
    assert a.keys() == b.keys()
    for key in a:
        torch.testing.assert_close(a[key], b[key], atol=1e-6, rtol=1e-6, msg=key)


@pytest.mark.slow
def test_a_run_killed_mid_training_resumes_to_bit_identical_weights(data_dir, tmp_path, straight_run):
    """SIGKILL after the first checkpoint, then --resume_from_checkpoint latest: the final weights are bit for bit
    the uninterrupted run's, and metrics.jsonl holds each step once with the same losses (cut back on resume)."""
    import signal
    import time

    killed = tmp_path / "killed"
    args = [*data_args(data_dir), *RESUME_RUN, "--checkpoint_steps", "1", "--output_dir", str(killed)]
    process = subprocess.Popen([sys.executable, str(REPO_ROOT / "train.py"), *args], cwd=tmp_path,
                               env=train_env(tmp_path),
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    deadline = time.monotonic() + 400
    while not (killed / "checkpoints" / "step-00000001" / "checkpoint.json").exists():
        assert process.poll() is None and time.monotonic() < deadline, "the run ended before its first checkpoint"
        time.sleep(0.02)
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=60)
    assert process.returncode == -signal.SIGKILL
    steps_at_kill = sorted(c.name for c in (killed / "checkpoints").iterdir() if c.name.startswith("step-"))
    assert "step-00000006" not in steps_at_kill, "killed too late to test anything"
    again = run_train([*args, "--resume_from_checkpoint", "latest"], tmp_path)
    assert again.returncode == 0, again.stderr[-4000:]
    rows = [(m["split"], m["step"]) for m in read_metrics(killed)]
    assert len(rows) == len(set(rows))  # no step logged twice
    assert train_losses(killed) == train_losses(straight_run)
    a, b = load_file(straight_run / "model.safetensors"), load_file(killed / "model.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[key], b[key]) for key in a)


@pytest.mark.slow
def test_sigterm_stops_after_the_update_with_a_checkpoint_that_resumes_to_identical_weights(data_dir, tmp_path,
                                                                                               straight_run):  # fmt: skip
    """A preempted machine's SIGTERM (or `kill`): the update under way ends, a checkpoint is saved, the exit status is
    143 (128 + 15) and the log says how to continue; resumed, the run ends with the uninterrupted run's weights."""
    import signal

    stopped = tmp_path / "stopped"
    args = [*data_args(data_dir), *RESUME_RUN, "--checkpoint_steps", "3", "--output_dir", str(stopped)]
    process = subprocess.Popen([sys.executable, str(REPO_ROOT / "train.py"), *args], cwd=tmp_path,
                               env=train_env(tmp_path),
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)  # fmt: skip
    deadline = time.monotonic() + 400
    metrics = stopped / "metrics.jsonl"
    while not (metrics.exists() and '"split": "train"' in metrics.read_text()):  # an update is done: in the loop
        assert process.poll() is None and time.monotonic() < deadline, "the run ended before its first update"
        time.sleep(0.02)
    process.send_signal(signal.SIGTERM)
    stderr = process.communicate(timeout=120)[1]
    assert process.returncode == 128 + signal.SIGTERM, stderr[-4000:]
    steps = sorted(c.name for c in (stopped / "checkpoints").iterdir() if c.name.startswith("step-"))
    assert steps and steps[-1] != "step-00000006", f"stopped too late to test anything: {steps}"
    step = int(steps[-1].removeprefix("step-"))
    assert f"Stopped by SIGTERM at update {step} of 6, saved in" in stderr, stderr[-4000:]
    assert "continue with --resume_from_checkpoint latest" in stderr and "Traceback" not in stderr
    assert not (stopped / "model.safetensors").exists()
    again = run_train([*args, "--resume_from_checkpoint", "latest"], tmp_path)
    assert again.returncode == 0, again.stderr[-4000:]
    assert train_losses(stopped) == train_losses(straight_run)
    a, b = load_file(straight_run / "model.safetensors"), load_file(stopped / "model.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[key], b[key]) for key in a)


# ---------------------------------------------------------------------------------------------------------------------
# Bad input: clear errors before any training
# ---------------------------------------------------------------------------------------------------------------------
def expect_error(args: list[str], cwd: Path, *fragments: str) -> str:
    """`vaswani train ARGS` ends with status 2 and an `error: ...` holding `fragments` (in this process: a real
    process's exit without a traceback is checked by test_bad_options_and_set_up_are_rejected_before_training and
    tests/test_faults.py)."""
    status, stderr = train_command_in_process(["--cache_dir", str(cwd / "datasets_cache"), *args])
    assert status == 2, (status, stderr[-3000:])
    assert "error:" in stderr, stderr[-3000:]
    for fragment in fragments:
        assert fragment in stderr, (fragment, stderr[-2000:])
    return stderr


@pytest.mark.slow
def test_bad_data_is_rejected_before_training(tmp_path):
    out = tmp_path / "out"
    base = [*TINY_RUN, "--max_train_steps", "2", "--output_dir", str(out)]
    expect_error([*base, "--train_file", str(tmp_path / "missing.jsonl")], tmp_path, "error:", "missing.jsonl")
    (tmp_path / "train.en").write_text("one\ntwo\nthree\n", encoding="utf-8")
    (tmp_path / "train.de").write_text("eins\nzwei\n", encoding="utf-8")
    expect_error(
        [*base, "--train_file", str(tmp_path / "train")], tmp_path, "train.en has 3 lines but", "train.de has 2"
    )
    (tmp_path / "latin.en").write_text("caf\n", encoding="utf-8")
    (tmp_path / "latin.de").write_bytes("Caf\xe9\n".encode("latin-1"))
    expect_error([*base, "--train_file", str(tmp_path / "latin")], tmp_path, "UTF-8", "latin.de")
    assert not (out / "checkpoints").exists() and not (out / "model.safetensors").exists()


@pytest.mark.slow
def test_bad_options_and_set_up_are_rejected_before_training(data_dir, tmp_path):
    out = tmp_path / "out"
    base = [*data_args(data_dir), *TINY_RUN, "--max_train_steps", "2", "--output_dir", str(out)]
    unknown = run_train([*base, "--learning_rat", "0.1"], tmp_path)
    assert unknown.returncode == 2 and "unrecognized arguments: --learning_rat" in unknown.stderr
    assert "Traceback" not in unknown.stderr
    (tmp_path / "bad.yaml").write_text("d_modell: 64\n")
    expect_error([*base, "--config", str(tmp_path / "bad.yaml")], tmp_path, "unknown option 'd_modell'")
    expect_error([*base, "--dropout", "1.5"], tmp_path, "dropout=1.5", "[0, 1)")
    expect_error(
        [*base, "--push_to_hub", "--hub_model_id", "not a repo!"], tmp_path, "--hub_model_id", "not a valid repo id"
    )
    expect_error([*base, "--d_model", "30", "--encoder_attention_heads", "4"], tmp_path, "not divisible")

    # A tokenizer whose vocabulary does not match the model.
    from tokenization import train_bpe_tokenizer

    tokenizer = train_bpe_tokenizer(iterator=["ein Satz", "a sentence", "noch ein Satz"] * 20, vocab_size=320,
                                    min_frequency=1)  # fmt: skip
    tokenizer.save_pretrained(tmp_path / "tok")
    expect_error([*base, "--tokenizer", str(tmp_path / "tok"), "--vocab_size", "500"], tmp_path,
                 f"has {len(tokenizer)} tokens but --vocab_size is 500")  # fmt: skip
    model_dir = tmp_path / "model"
    from modeling_vaswani import VaswaniConfig, VaswaniForConditionalGeneration

    VaswaniForConditionalGeneration(
        VaswaniConfig(vocab_size=len(tokenizer) + 7, d_model=16, encoder_layers=1, decoder_layers=1,
                      encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=16, decoder_ffn_dim=16)
    ).save_pretrained(model_dir)  # fmt: skip
    # the run's options without the new model's shape and vocabulary: a saved model brings its own
    from modeling_vaswani.configuration_vaswani import MODEL_OPTIONS

    shape = {f"--{name}" for name in (*MODEL_OPTIONS, "vocab_size")}
    from_model = [a for i, a in enumerate(base) if not shape & set(base[max(i - 1, 0) : i + 1])]
    expect_error([*from_model, "--tokenizer", str(tmp_path / "tok"), "--model", str(model_dir)],
                 tmp_path,
                 "the tokenizer does not fit the model", f"model's vocab_size is {len(tokenizer) + 7}")  # fmt: skip
    # A model folder without a tokenizer, and none given: no new BPE can fit its embeddings.
    expect_error([*from_model, "--model", str(model_dir)], tmp_path,
                 f"--model {model_dir} has no tokenizer: pass --tokenizer")  # fmt: skip
    # Another shape for a trained model: named, before its weights are blamed; its dropout may change.
    error = expect_error([*from_model, "--model", str(model_dir), "--d_model", "32", "--dropout", "0.3",
                          "--encoder_layers", "1"], tmp_path,
                         f"--model {model_dir} was trained with d_model 16; --d_model 32 (on the command line or in "
                         "--config) would not fit its weights: drop them")  # fmt: skip
    assert "--dropout" not in error and "--encoder_layers" not in error  # a training option; the same value
    # A model folder with its tokenizer brings it; a --vocab_size that disagrees names where the tokenizer came from.
    with_tokenizer = tmp_path / "model-with-tokenizer"
    VaswaniForConditionalGeneration(
        VaswaniConfig(vocab_size=len(tokenizer), d_model=16, encoder_layers=1, decoder_layers=1,
                      encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=16, decoder_ffn_dim=16)
    ).save_pretrained(with_tokenizer)  # fmt: skip
    tokenizer.save_pretrained(with_tokenizer)
    expect_error([*from_model, "--model", str(with_tokenizer), "--vocab_size", "500"], tmp_path,
                 f"the tokenizer of --model {with_tokenizer} has {len(tokenizer)} tokens but --vocab_size is 500")  # fmt: skip

    # An output folder that holds another run.
    out.mkdir()
    (out / "run_args.json").write_text("{}")
    expect_error(base, tmp_path, "already holds another run", "--resume_from_checkpoint", "--overwrite_output_dir")
    expect_error([*base, "--resume_from_checkpoint", "latest"], tmp_path, "cannot resume: no complete checkpoint")
    assert not (out / "checkpoints").exists() or not any((out / "checkpoints").iterdir())


@pytest.mark.slow
def test_empty_lines_are_skipped_and_reported(tmp_path):
    lines_en = ["one apple", "", "two apples", "three apples"] * 10
    lines_de = ["ein Apfel", "leer", "", "drei Äpfel"] * 10
    (tmp_path / "train.en").write_text("\n".join(lines_en) + "\n", encoding="utf-8")
    (tmp_path / "train.de").write_text("\n".join(lines_de) + "\n", encoding="utf-8")
    out = tmp_path / "out"
    result = run_train(
        ["--train_file", str(tmp_path / "train"), *TINY_RUN, "--vocab_size", "300", "--max_train_steps", "1",
         "--output_dir", str(out), "--validation_size", "4", "--average_checkpoints", "0"],
        tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert "20 skipped because a side is empty" in result.stderr, result.stderr[-3000:]


@pytest.fixture
def kernels_set(monkeypatch) -> list[str]:
    """The attention kernels set on models during the test (`PreTrainedModel.set_attn_implementation`), in order."""
    from transformers import PreTrainedModel

    kernels = []
    original = PreTrainedModel.set_attn_implementation

    def recording(self, implementation, *args, **kwargs):
        original(self, implementation, *args, **kwargs)
        kernels.append(self.config._attn_implementation)

    monkeypatch.setattr(PreTrainedModel, "set_attn_implementation", recording)
    return kernels


def test_attn_implementation_sets_the_kernel_and_one_that_cannot_run_here_is_refused(data_dir, tmp_path, kernels_set):
    """--attn_implementation eager trains with the eager kernel (transformers' default is sdpa); flash_attention_2
    without the flash-attn package (this CPU machine) is an `error:` before any training."""
    base = [*data_args(data_dir), *TINY_RUN, "--max_train_steps", "1", "--cache_dir", str(tmp_path / "cache")]
    train_in_process([*base, "--attn_implementation", "eager", "--output_dir", str(tmp_path / "eager")])
    assert kernels_set[0] == "eager"  # (evaluation may set it again: alignments need the eager kernel)
    expect_error([*base, "--attn_implementation", "flash_attention_2", "--output_dir", str(tmp_path / "flash")],
                 tmp_path, "--attn_implementation flash_attention_2 cannot be used here", "FlashAttention2")  # fmt: skip
    expect_error([*base, "--attn_implementation", "flash", "--output_dir", str(tmp_path / "x")], tmp_path,
                 "invalid choice: 'flash'")  # fmt: skip


def test_bf16_training_on_the_cpu_uses_eager_attention_and_float32_keeps_sdpa(
    data_dir, tmp_path, kernels_set, caplog, monkeypatch
):
    """Unset --attn_implementation: bf16 autocast on the CPU trains with the eager kernel (sdpa's CPU backward is slow
    in bf16, vaswani.devices.training_attention), float32 with the model's default, sdpa; the log says which. The
    log also says that oneDNN's primitive cache is limited (vaswani.devices.limit_onednn_primitive_cache)."""
    from vaswani.devices import ONEDNN_CACHE_VARIABLES

    for name in ONEDNN_CACHE_VARIABLES:  # as unset (an earlier run in this process set it), restored after the test
        monkeypatch.setenv(name, "")
    base = [*data_args(data_dir), *TINY_RUN, "--max_train_steps", "1", "--cache_dir", str(tmp_path / "cache")]
    with caplog.at_level("INFO", logger="train"):
        train_in_process([*base, "--mixed_precision", "bf16", "--output_dir", str(tmp_path / "bf16")])
    assert kernels_set == ["eager"]
    assert "Attention kernel: eager (default for bf16 training on a CPU" in caplog.text
    assert "oneDNN primitive cache: 256 (default 1024" in caplog.text
    kernels_set.clear()
    caplog.clear()
    with caplog.at_level("INFO", logger="train"):
        train_in_process([*base, "--mixed_precision", "no", "--output_dir", str(tmp_path / "fp32")])
    assert "Attention kernel: sdpa (the model's default)" in caplog.text
    assert kernels_set == []  # the model's own kernel: nothing set


def test_prefetched_batches_train_the_same_weights_and_hide_a_slow_collator(data_dir, tmp_path, monkeypatch):
    """Issue 30 item 5: with a collator slowed on purpose (a 20 ms sleep per batch), the share of the steps spent
    waiting for data (`data_wait_share`, logged with the loss) falls when the next updates' batches are made in the
    background (--prefetch_updates 2, the default) against making them in the loop (0); the weights are the same.
    Prefetching can hide a batch's making only behind as much work of the loop, so each update's work in the loop is
    slowed too (a 30 ms sleep where it counts the batch's tokens): a fast CPU's tiny update (13 ms in float32 on an
    Emerald Rapids) would otherwise leave part of the 20 ms in sight whatever the prefetching."""
    from vaswani.training import tasks

    original_collators, original_tokens = tasks.TranslationTask.collators, tasks.TranslationTask.scored_tokens

    def slowed(self, *args, **kwargs):
        train_collator, eval_collator = original_collators(self, *args, **kwargs)

        def collate(rows):
            time.sleep(0.02)
            return train_collator(rows)

        return collate, eval_collator

    def slowed_update(self, batch):  # in the training loop, once per micro-batch of an update
        time.sleep(0.03)
        return original_tokens(self, batch)

    monkeypatch.setattr(tasks.TranslationTask, "collators", slowed)
    monkeypatch.setattr(tasks.TranslationTask, "scored_tokens", slowed_update)
    base = [*data_args(data_dir), *TINY_RUN, "--max_train_steps", "12", "--cache_dir", str(tmp_path / "cache")]
    waits = {}
    for prefetch in ("0", "2"):
        out = tmp_path / f"prefetch-{prefetch}"
        train_in_process([*base, "--prefetch_updates", prefetch, "--output_dir", str(out)])
        shares = [m["data_wait_share"] for m in read_metrics(out) if m["split"] == "train"]
        waits[prefetch] = sum(shares[1:]) / len(shares[1:])  # the first update waits for its batch either way
    assert (tmp_path / "prefetch-0" / "model.safetensors").read_bytes() == (
        tmp_path / "prefetch-2" / "model.safetensors").read_bytes()  # fmt: skip
    assert waits["0"] > 0.05 and waits["2"] < 0.5 * waits["0"], waits
    expect_error([*base, "--prefetch_updates", "-1", "--output_dir", str(tmp_path / "x")], tmp_path,
                 "--prefetch_updates -1 is not allowed")  # fmt: skip


def test_training_switches_cudnn_attention_off_for_its_device(data_dir, tmp_path, monkeypatch):
    """The training loop asks for it once, with the Accelerator's device type (vaswani.devices.disable_cudnn_attention:
    a no-op on the CPU, cuDNN's per-shape attention plans off on a GPU)."""
    from vaswani.training import loop

    asked = []
    monkeypatch.setattr(loop, "disable_cudnn_attention", lambda device_type: asked.append(device_type))
    train_in_process([*data_args(data_dir), *TINY_RUN, "--max_train_steps", "2", "--output_dir", str(tmp_path / "o")])
    assert asked == ["cpu"]


@pytest.mark.parametrize("device", ["cuda", "cpu"])
def test_the_feeder_pins_a_gpus_batches_in_its_own_thread(device, monkeypatch):
    """`next_group` (which the prefetching thread runs) hands a CUDA run its batches in pinned memory, so that the
    training loop's thread copies them without pinning; a CPU run gets them as collated. (Pinning itself needs CUDA:
    here `pinned` is replaced by a stand-in that marks the batches it got.)"""
    from types import SimpleNamespace

    from vaswani.training import loop

    collated = []

    def collate(dataset, indices, collator, shape=None):
        collated.append(indices)
        return {"input_ids": torch.tensor([[len(indices)]])}

    monkeypatch.setattr(loop, "collate", collate)
    monkeypatch.setattr(loop, "pinned", lambda batch: {**batch, "pinned": True})
    run = SimpleNamespace(args=SimpleNamespace(gradient_accumulation_steps=2), tokenized={"train": "the split"},
                          collator=None, sampler=SimpleNamespace(batch_shape=lambda indices: None),
                          accelerator=SimpleNamespace(device=torch.device(device)))  # fmt: skip
    stream = iter([(0, 0, [0, 1]), (0, 1, [2, 3, 4]), (0, 2, [5])])
    group, batches = loop.next_group(run, stream)
    assert [indices for *_, indices in group] == collated == [[0, 1], [2, 3, 4]]
    assert [batch.get("pinned", False) for batch in batches] == [device == "cuda"] * 2
