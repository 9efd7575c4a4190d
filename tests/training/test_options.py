"""train.py's data, tokenizer, optimization, checkpoint and logging options, each shown to change what a run computes.

One run with many options (`options_run`) is watched from the inside: `train.main` runs in this process with its own
functions wrapped by recorders (the batches it collates, the tokenized splits, the model it builds) and hooks on the
optimizer (gradients after the backward pass and at the update, parameters before and after the update). Each option
is then checked against an independent reference: torch's `clip_grad_norm_`, the AdamW update written out, the
learning-rate formulas, sacrebleu on the run's own hypotheses, a tokenizer trained with the same settings, the
event files read back with tensorboard. Further runs continue from the saved model (`--model`,
`--tokenizer`), resume from an older named checkpoint, and resume with two processes. Held-out pairs longer than the evaluation
batch budget are still evaluated (each in a batch of its own), not a traceback after training.
"""

import argparse
import json
import math
import shutil
from pathlib import Path

import pytest
import torch
from conftest import REPO_ROOT, generation_warnings, train_in_process
from safetensors.torch import load_file

from vaswani import errors
from vaswani.data.demo import write_demo_files
from vaswani.training import evaluation, loop, tasks
from vaswani.training import options as training_options

TINY_MODEL = [
    "--d_model", "32", "--encoder_layers", "1", "--decoder_layers", "1", "--encoder_attention_heads", "2",
    "--decoder_attention_heads", "2", "--encoder_ffn_dim", "64", "--decoder_ffn_dim", "64",
]  # fmt: skip
QUIET = ["--eval_steps", "0", "--logging_steps", "1", "--num_beams", "1", "--checkpoint_minutes", "60"]

# The options run: a local `datasets` folder, fairseq token ids, BPE min_frequency, truncation, batch caps, clipping,
# AdamW, a linear schedule, epochs, checkpoint retention and tensorboard, all at once; each leaves its own trace.
MAX_SOURCE_LENGTH, MAX_TOKENS, MAX_SENTENCES, EVAL_MAX_TOKENS = 12, 400, 8, 64
MAX_GRAD_NORM, WEIGHT_DECAY, PEAK_LR, WARMUP, EPOCHS = 0.5, 0.5, 1e-2, 2, 1.3
MIN_FREQUENCY, VOCAB_SIZE, KEEP = 3, 2000, 3
OPTIONS = [
    "--special_tokens_layout", "fairseq", "--vocab_size", str(VOCAB_SIZE), "--min_frequency", str(MIN_FREQUENCY),
    "--max_source_length", str(MAX_SOURCE_LENGTH), "--max_target_length", "48", "--overlong", "truncate",
    "--max_tokens", str(MAX_TOKENS), "--max_sentences", str(MAX_SENTENCES), "--eval_max_tokens", str(EVAL_MAX_TOKENS),
    "--max_grad_norm", str(MAX_GRAD_NORM), "--weight_decay", str(WEIGHT_DECAY), "--lr_scheduler", "linear",
    "--learning_rate", str(PEAK_LR), "--warmup_steps", str(WARMUP), "--num_train_epochs", str(EPOCHS),
    "--checkpoint_steps", "2", "--keep_checkpoints", str(KEEP), "--average_checkpoints", "1",
    "--report_to", "tensorboard", "--num_examples", "100",
]  # fmt: skip


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def pairs(path: Path) -> list[tuple[str, str]]:
    return [(row["translation"]["en"], row["translation"]["de"]) for row in read_jsonl(path)]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    """A local dataset folder (train/validation/test .jsonl) that `datasets.load_dataset(folder)` reads offline."""
    folder = tmp_path_factory.mktemp("corpus")
    write_demo_files(folder, num_train=64, num_validation=8, num_test=6)
    return folder


class Recorder:
    """Wraps train.py's functions to keep what they produced; hooks the optimizer. Changes nothing they compute."""

    def __init__(self, monkeypatch):
        self.batches = []  # (dataset, indices, batch) for every collated batch, training and evaluation
        self.updates = []  # per optimizer update: lr per group, params/grads before, gradients before clipping
        self.after = []  # per optimizer update: params after
        self.tokenized = self.model = self.initial_weights = self.optimizer = None
        # each function where train.py's code looks it up (its module's namespace)
        patched = {"collate": (loop, tasks, evaluation), "tokenize_splits": (tasks,), "build_model": (loop,),
                   "build_optimizer": (loop,)}  # fmt: skip
        for name, modules in patched.items():
            wrapper = getattr(self, name).__get__(self)(getattr(modules[0], name))
            for module in modules:
                monkeypatch.setattr(module, name, wrapper)

    def collate(self, original):
        def wrapper(dataset, indices, collator, device=None, shape=None):
            batch = original(dataset, indices, collator, device, shape)
            self.batches.append((dataset, list(indices), {k: v.clone() for k, v in batch.items()}))
            return batch

        return wrapper

    def tokenize_splits(self, original):
        def wrapper(*args, **kwargs):
            self.tokenized = original(*args, **kwargs)
            return self.tokenized

        return wrapper

    def build_model(self, original):
        def wrapper(*args, **kwargs):
            self.model = original(*args, **kwargs)
            self.initial_weights = {k: v.detach().clone() for k, v in self.model.state_dict().items()}
            return self.model

        return wrapper

    def build_optimizer(self, original):
        def wrapper(args, model, device_type):
            optimizer = self.optimizer = original(args, model, device_type)
            params = [p for group in optimizer.param_groups for p in group["params"]]
            backward = {}  # gradients as the backward pass left them, before any clipping
            for index, param in enumerate(params):
                param.register_post_accumulate_grad_hook(
                    lambda p, index=index: backward.__setitem__(index, p.grad.detach().clone())
                )

            def before(opt, *_):
                self.updates.append(
                    {
                        "lr": [group["lr"] for group in opt.param_groups],
                        "params": [p.detach().clone() for p in params],
                        "grads": [p.grad.detach().clone() for p in params],
                        "backward_grads": [backward[i] for i in range(len(params))],
                    }
                )

            optimizer.register_step_pre_hook(before)
            optimizer.register_step_post_hook(lambda opt, *_: self.after.append([p.detach().clone() for p in params]))
            return optimizer

        return wrapper

    def training_batches(self):
        return [(indices, batch) for dataset, indices, batch in self.batches if dataset is self.tokenized["train"]]

    def evaluation_batches(self):
        return [(indices, batch) for dataset, indices, batch in self.batches if dataset is not self.tokenized["train"]]


@pytest.fixture(scope="module")
def options_run(corpus, tmp_path_factory):
    out = tmp_path_factory.mktemp("options") / "run"
    argv = [
        "--dataset_name", str(corpus), "--cache_dir", str(out.parent / "cache"), *TINY_MODEL, *QUIET, *OPTIONS,
        "--output_dir", str(out),
    ]  # fmt: skip
    with pytest.MonkeyPatch.context() as monkeypatch:
        recorder = Recorder(monkeypatch)
        results = train_in_process(argv)
    return {"out": out, "argv": argv, "results": results, "recorder": recorder}


def saved_tokenizer(folder: Path):
    from tokenization import load_tokenizer

    return load_tokenizer(folder)


# ---------------------------------------------------------------------------------------------------------------------
# Data
# ---------------------------------------------------------------------------------------------------------------------
def test_dataset_name_loads_a_local_datasets_folder(options_run, corpus):
    recorder, results = options_run["recorder"], options_run["results"]
    tokenized = recorder.tokenized
    # Every split comes from the folder, whole: no validation carved out of train, no pair dropped (truncation).
    assert {split: len(data) for split, data in tokenized.items()} == {"train": 64, "validation": 8, "test": 6}
    for split in ("validation", "test"):
        examples = results[split]["examples"]  # --num_examples 100: every pair, in the split's order
        assert [(e["source"], e["reference"]) for e in examples] == pairs(corpus / f"{split}.jsonl")
    tokenizer = saved_tokenizer(options_run["out"])
    train_pairs = pairs(corpus / "train.jsonl")
    assert tokenized["train"]["labels"] == tokenizer(text_target=[de for _, de in train_pairs])["input_ids"]


def test_dataset_name_loads_a_folder_written_by_save_to_disk(corpus, tmp_path):
    """The other local form of a `datasets` source: `DatasetDict.save_to_disk`, here with a third language that the
    run does not use."""
    import datasets

    from vaswani.data.loading import load_translation_splits

    splits = {
        split: [{"translation": {"en": en, "de": de, "fr": f"fr {i}"}} for i, (en, de) in enumerate(pairs(path))]
        for split, path in (("train", corpus / "train.jsonl"), ("test", corpus / "test.jsonl"))
    }
    datasets.DatasetDict({k: datasets.Dataset.from_list(v) for k, v in splits.items()}).save_to_disk(
        tmp_path / "saved"
    )
    loaded, _ = load_translation_splits(dataset_name=str(tmp_path / "saved"), validation_size=4,
                                             cache_dir=tmp_path / "cache")  # fmt: skip
    assert sorted(loaded) == ["test", "train", "validation"] and len(loaded["train"]) == 60
    assert list(loaded["test"]["translation"]) == [{"en": en, "de": de} for en, de in pairs(corpus / "test.jsonl")]
    everything = list(loaded["train"]["translation"]) + list(loaded["validation"]["translation"])
    assert sorted((t["en"], t["de"]) for t in everything) == sorted(pairs(corpus / "train.jsonl"))


def test_overlong_truncate_cuts_to_the_limit_and_keeps_eos(options_run, corpus):
    tokenizer = saved_tokenizer(options_run["out"])
    full = tokenizer([en for en, _ in pairs(corpus / "train.jsonl")])["input_ids"]
    limit, eos = MAX_SOURCE_LENGTH, tokenizer.eos_token_id
    expected = [ids if len(ids) <= limit else ids[: limit - 1] + [eos] for ids in full]
    assert sum(len(ids) > limit for ids in full) >= 10  # the option had pairs to act on
    tokenized = options_run["recorder"].tokenized["train"]
    assert tokenized["input_ids"] == expected
    assert tokenized["source_length"] == [len(ids) for ids in expected]
    assert "attention_mask" not in tokenized.column_names  # the compact cache: the collator makes the masks


def test_max_sentences_caps_training_batches_below_the_token_budget(options_run):
    batches = options_run["recorder"].training_batches()
    sizes = [len(indices) for indices, _ in batches]
    assert max(sizes) == MAX_SENTENCES
    longest = [max(b["input_ids"].shape[1], b["labels"].shape[1]) for _, b in batches]
    assert all(n * t <= MAX_TOKENS for n, t in zip(sizes, longest, strict=True))
    # The token budget alone would have packed more pairs: the cap is what closed these batches.
    assert all((n + 1) * t <= MAX_TOKENS for n, t in zip(sizes, longest, strict=True) if n == MAX_SENTENCES)


def test_eval_max_tokens_is_the_budget_of_evaluation_batches(options_run):
    recorder = options_run["recorder"]
    evaluation = recorder.evaluation_batches()
    costs = [len(i) * max(b["input_ids"].shape[1], b["labels"].shape[1]) for i, b in evaluation]
    assert costs and max(costs) <= EVAL_MAX_TOKENS
    train_costs = [len(i) * max(b["input_ids"].shape[1], b["labels"].shape[1]) for i, b in recorder.training_batches()]
    assert max(train_costs) > EVAL_MAX_TOKENS  # training batches use --max_tokens, not this budget
    assert sum(len(i) for i, _ in evaluation) == 8 + 6  # every validation and test pair once


def test_num_train_epochs_sets_the_number_of_updates(options_run):
    metrics = read_jsonl(options_run["out"] / "metrics.jsonl")
    epochs = [m["epoch"] for m in metrics if m["split"] == "train"]
    per_epoch = epochs.count(0)
    assert options_run["results"]["step"] == len(epochs) == math.ceil(EPOCHS * per_epoch)
    assert epochs == [0] * per_epoch + [1] * (len(epochs) - per_epoch)
    first_epoch = [i for indices, _ in options_run["recorder"].training_batches()[:per_epoch] for i in indices]
    assert sorted(first_epoch) == list(range(64))  # an epoch is every training pair once


# ---------------------------------------------------------------------------------------------------------------------
# Tokenizer
# ---------------------------------------------------------------------------------------------------------------------
def test_fairseq_layout_reaches_the_tokenizer_the_model_and_the_batches(options_run):
    out, recorder = options_run["out"], options_run["recorder"]
    tokenizer = saved_tokenizer(out)
    assert (tokenizer.bos_token_id, tokenizer.pad_token_id, tokenizer.eos_token_id) == (0, 1, 2)
    config = json.loads((out / "config.json").read_text())
    assert (config["bos_token_id"], config["pad_token_id"], config["eos_token_id"]) == (0, 1, 2)
    assert config["decoder_start_token_id"] == 0
    padded = 0
    for _, batch in recorder.training_batches():
        pad = batch["attention_mask"] == 0
        assert (batch["input_ids"][pad] == 1).all() and (batch["input_ids"][~pad] != 1).all()
        padded += int(pad.sum())
    assert padded > 0


def test_min_frequency_reaches_the_bpe_trainer(options_run, corpus):
    from datasets import Dataset

    from tokenization import train_bpe_tokenizer

    rows = [{"translation": {"en": en, "de": de}} for en, de in pairs(corpus / "train.jsonl")]

    def trained(min_frequency):
        return train_bpe_tokenizer(dataset=Dataset.from_list(rows), source_lang="en", target_lang="de",
                                   vocab_size=VOCAB_SIZE, min_frequency=min_frequency,
                                   special_tokens_layout="fairseq").get_vocab()  # fmt: skip

    used = saved_tokenizer(options_run["out"]).get_vocab()
    assert used == trained(MIN_FREQUENCY)
    assert len(used) < VOCAB_SIZE  # training stopped for lack of pairs seen MIN_FREQUENCY times
    assert used != trained(2)


# ---------------------------------------------------------------------------------------------------------------------
# Optimization
# ---------------------------------------------------------------------------------------------------------------------
def test_max_grad_norm_clips_the_update_like_torch(options_run):
    updates = options_run["recorder"].updates
    clipped = 0
    for update in updates:
        reference = [torch.nn.Parameter(p.clone()) for p in update["params"]]
        for param, grad in zip(reference, update["backward_grads"], strict=True):
            param.grad = grad.clone()
        norm = torch.nn.utils.clip_grad_norm_(reference, MAX_GRAD_NORM)
        clipped += bool(norm > MAX_GRAD_NORM)
        for param, grad in zip(reference, update["grads"], strict=True):
            torch.testing.assert_close(grad, param.grad, rtol=1e-5, atol=1e-8)
    assert clipped >= len(updates) // 2  # the option acted, and the clipped gradients are what the optimizer used


def adamw_reference(updates, decay: float, betas=(0.9, 0.98), eps=1e-9):
    """Parameters after each update by Loshchilov & Hutter's AdamW, written out (float64): decoupled decay of
    matrices only, bias-corrected moments."""
    first = [torch.zeros_like(p, dtype=torch.float64) for p in updates[0]["params"]]
    second = [torch.zeros_like(p, dtype=torch.float64) for p in updates[0]["params"]]
    results = []
    for t, update in enumerate(updates, start=1):
        lr = update["lr"][0]
        after = []
        for i, (param, grad) in enumerate(zip(update["params"], update["grads"], strict=True)):
            p, g = param.double(), grad.double()
            first[i] = betas[0] * first[i] + (1 - betas[0]) * g
            second[i] = betas[1] * second[i] + (1 - betas[1]) * g * g
            step = (first[i] / (1 - betas[0] ** t)) / ((second[i] / (1 - betas[1] ** t)).sqrt() + eps)
            weight_decay = decay if p.dim() >= 2 else 0.0
            after.append(p * (1 - lr * weight_decay) - lr * step)
        results.append(after)
    return results


def test_weight_decay_is_adamw_on_matrices_only(options_run):
    recorder = options_run["recorder"]
    updates, after = recorder.updates, recorder.after
    assert len(updates) == len(after) == options_run["results"]["step"]
    for expected, actual in zip(adamw_reference(updates, WEIGHT_DECAY), after, strict=True):
        for e, a in zip(expected, actual, strict=True):
            torch.testing.assert_close(a.double(), e, rtol=1e-5, atol=1e-6)
    # Without the decay the same reference misses every matrix: the check sees the option.
    without = adamw_reference(updates, 0.0)[-1]
    misses = [(a.double() - e).abs().max().item() for e, a in zip(without, after[-1], strict=True) if a.dim() >= 2]
    assert min(misses) > 1e-5


def linear_schedule(step: int, total: int) -> float:
    """transformers' linear schedule: warm up from 0 to the peak in WARMUP steps, then down to 0 at `total`."""
    return step / WARMUP if step < WARMUP else max(0.0, (total - step) / (total - WARMUP))


def test_linear_lr_scheduler_values_per_update(options_run):
    updates, total = options_run["recorder"].updates, options_run["results"]["step"]
    used = [update["lr"] for update in updates]  # the rate each update ran with, for both parameter groups
    assert used == [[pytest.approx(PEAK_LR * linear_schedule(s, total))] * 2 for s in range(total)]
    logged = [m["lr"] for m in read_jsonl(options_run["out"] / "metrics.jsonl") if m["split"] == "train"]
    assert logged == pytest.approx([PEAK_LR * linear_schedule(s, total) for s in range(1, total + 1)])


@pytest.mark.parametrize("name", ["inverse_sqrt", "linear", "cosine", "constant_with_warmup", "constant"])
def test_other_lr_schedulers_follow_their_formulas(name):
    from vaswani.training.schedules import build_lr_scheduler

    warmup, total, peak = 4, 20, 0.5
    formulas = {  # transformers' get_scheduler definitions, written out
        "inverse_sqrt": lambda s: s / warmup if s < warmup else 1 / math.sqrt(s / warmup),
        "linear": lambda s: s / warmup if s < warmup else max(0.0, (total - s) / (total - warmup)),
        "cosine": lambda s: s / warmup if s < warmup else 0.5 * (1 + math.cos(math.pi * (s - warmup) / (total - warmup))),
        "constant_with_warmup": lambda s: min(1.0, s / warmup),
        "constant": lambda s: 1.0,
    }  # fmt: skip
    optimizer = torch.optim.Adam([torch.nn.Parameter(torch.zeros(2))], lr=123.0)
    scheduler = build_lr_scheduler(name, optimizer, warmup_steps=warmup, total_steps=total, d_model=64,
                                   learning_rate=peak)  # fmt: skip
    seen = []
    for _ in range(total + 1):
        seen.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    assert seen == pytest.approx([peak * formulas[name](s) for s in range(total + 1)], abs=1e-12)


# ---------------------------------------------------------------------------------------------------------------------
# Evaluation, checkpoints, logging
# ---------------------------------------------------------------------------------------------------------------------
def test_scores_are_sacrebleu_on_the_runs_own_hypotheses(options_run):
    import sacrebleu

    for split in ("validation", "test"):
        scores = options_run["results"][split]
        hypotheses = [e["translation"] for e in scores["examples"]]
        references = [e["reference"] for e in scores["examples"]]
        assert scores["bleu"] == pytest.approx(sacrebleu.corpus_bleu(hypotheses, [references]).score)
        assert scores["chrf"] == pytest.approx(sacrebleu.corpus_chrf(hypotheses, [references]).score)


def test_keep_checkpoints_keeps_the_last_k(options_run):
    steps = options_run["results"]["step"]
    saved = sorted({*range(2, steps + 1, 2), steps})  # --checkpoint_steps 2, and the last step
    names = sorted(p.name for p in (options_run["out"] / "checkpoints").iterdir())
    assert names == [f"step-{s:08d}" for s in saved[-KEEP:]] and len(saved) > KEEP


def test_report_to_tensorboard_writes_the_logged_metrics(options_run):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(options_run["out"] / "logs" / "vaswani")).Reload()
    metrics = read_jsonl(options_run["out"] / "metrics.jsonl")
    for tag, split, key in (("train/loss", "train", "loss"), ("train/lr", "train", "lr"),
                            ("final_test/loss", "final_test", "loss")):  # fmt: skip
        expected = [(m["step"], m[key]) for m in metrics if m["split"] == split]
        assert [(e.step, e.value) for e in events.Scalars(tag)] == [(s, pytest.approx(v)) for s, v in expected]


# ---------------------------------------------------------------------------------------------------------------------
# Continuing from a saved model; resuming
# ---------------------------------------------------------------------------------------------------------------------
def test_model_continues_from_a_saved_model_with_its_own_tokenizer(options_run, corpus, tmp_path):
    first = options_run["out"]
    out = tmp_path / "continued"
    argv = [
        "--dataset_name", str(corpus), "--cache_dir", str(tmp_path / "cache"), *QUIET, "--max_train_steps", "2",
        "--model", str(first), "--max_source_length", "48",  # no --tokenizer: the model folder's own
        "--max_target_length", "48", "--max_tokens", "400", "--average_checkpoints", "0", "--report_to", "none",
        "--max_eval_samples", "5", "--num_examples", "3", "--learning_rate", "1e-3", "--warmup_steps", "1",
    ]  # fmt: skip
    with pytest.MonkeyPatch.context() as monkeypatch:
        recorder = Recorder(monkeypatch)
        results = train_in_process([*argv, "--output_dir", str(out)])
    assert results["step"] == 2
    assert len(results["validation"]["examples"]) == len(results["test"]["examples"]) == 3  # --num_examples
    saved = load_file(first / "model.safetensors")
    assert recorder.initial_weights.keys() >= saved.keys()
    for key, tensor in saved.items():  # training started from the saved weights, not from a fresh initialisation
        assert torch.equal(recorder.initial_weights[key], tensor), key
    assert json.loads((out / "config.json").read_text())["d_model"] == 32  # the saved model's size, not the preset's
    # The model folder's tokenizer was used as it is (no new BPE), recorded and saved with the new model.
    assert (out / "tokenizer.json").read_bytes() == (first / "tokenizer.json").read_bytes()
    assert json.loads((out / "run_args.json").read_text())["tokenizer"] == str(first)
    assert recorder.tokenized["train"]["labels"][:3] == options_run["recorder"].tokenized["train"]["labels"][:3]
    final = load_file(out / "model.safetensors")
    assert any(not torch.equal(final[k], saved[k]) for k in saved)  # and it trained


def losses(folder: Path) -> dict[int, list[float]]:
    """Training loss per step (a list, so that a step logged twice would show)."""
    found: dict[int, list[float]] = {}
    for m in read_jsonl(folder / "metrics.jsonl"):
        if m["split"] == "train":
            found.setdefault(m["step"], []).append(m["loss"])
    return found


def test_resume_from_an_older_named_checkpoint_repeats_the_run_exactly(options_run, tmp_path):
    """The options run, copied, resumed from its oldest kept checkpoint (later ones exist): the same losses for the
    repeated steps, the same final weights, and the later checkpoints set aside, not deleted."""
    out = tmp_path / "resumed"
    shutil.copytree(options_run["out"], out)
    straight = load_file(options_run["out"] / "model.safetensors")
    kept = sorted(p.name for p in (out / "checkpoints").iterdir())
    older, later = kept[0], kept[1:]
    argv = [a if a != str(options_run["out"]) else str(out) for a in options_run["argv"]]
    results = train_in_process([*argv, "--resume_from_checkpoint", str(out / "checkpoints" / older)])
    steps, resumed_at = results["step"], int(older.split("-")[1])
    assert steps == options_run["results"]["step"] > resumed_at
    # metrics.jsonl was cut back to the checkpoint's step on resume, so each step is logged once, as in the first run
    first, again = losses(options_run["out"]), losses(out)
    assert sorted(again) == sorted(first) and all(len(v) == 1 for v in again.values())
    for step in range(resumed_at + 1, steps + 1):
        assert again[step] == pytest.approx(first[step], rel=1e-6, abs=1e-9), step
    final = load_file(out / "model.safetensors")
    for key, tensor in straight.items():
        torch.testing.assert_close(final[key], tensor, atol=1e-6, rtol=1e-6, msg=key)
    moved = [p for p in out.rglob("step-*") if p.parent != out / "checkpoints"]
    assert sorted(p.name for p in moved) == later  # set aside, not deleted


@pytest.mark.slow
def test_two_process_run_resumed_from_an_older_checkpoint_equals_the_uninterrupted_run(corpus, tmp_path):
    """Two CPU processes (gloo), dropout on: resuming from step 2 of a finished 4-step run gives the same losses for
    steps 3 and 4, the same final weights and the same validation loss as the uninterrupted run."""
    from test_loop import run_train

    out = tmp_path / "run"
    argv = [
        "--train_file", str(corpus / "train.jsonl"), "--validation_file", str(corpus / "validation.jsonl"),
        "--cache_dir", str(tmp_path / "cache"), *TINY_MODEL, *QUIET, "--vocab_size", "400", "--max_tokens", "300", "--max_source_length", "48", "--max_target_length", "48",
        "--max_train_steps", "4", "--checkpoint_steps", "2", "--average_checkpoints", "0", "--warmup_steps", "2",
        "--report_to", "none", "--max_eval_samples", "2", "--output_dir", str(out),
    ]  # fmt: skip
    first = run_train(argv, tmp_path, processes=2)
    assert first.returncode == 0, first.stderr[-4000:]
    straight_weights = load_file(out / "model.safetensors")
    straight_results = json.loads((out / "results.json").read_text())
    straight_losses = losses(out)
    teardown = REPO_ROOT / "tests" / "scripts" / "train_checking_teardown.py"
    again = run_train([*argv, "--resume_from_checkpoint", "step-00000002"], tmp_path, processes=2, script=teardown)
    assert again.returncode == 0, again.stderr[-4000:]
    assert "Resumed from" in again.stderr and "2 processes" in again.stderr
    # Both ranks released the DDP model before the process group was destroyed (else an exit can hang: close()).
    for rank in (0, 1):
        assert f"teardown: rank {rank}: DDP models alive at end_training: 0" in again.stderr, again.stderr[-3000:]
    again_losses = losses(out)  # metrics.jsonl was cut back to step 2 on resume: one row per step
    assert sorted(again_losses) == [1, 2, 3, 4] and all(len(v) == 1 for v in again_losses.values())
    for step in (3, 4):
        assert again_losses[step] == pytest.approx(straight_losses[step], rel=1e-6, abs=1e-9), step
    final = load_file(out / "model.safetensors")
    for key, tensor in straight_weights.items():
        torch.testing.assert_close(final[key], tensor, atol=1e-6, rtol=1e-6, msg=key)
    results = json.loads((out / "results.json").read_text())
    assert results["validation"]["loss"] == pytest.approx(straight_results["validation"]["loss"], rel=1e-6)


def test_without_eval_max_tokens_a_cpu_evaluates_in_batches_of_512_tokens_per_thread(corpus, tmp_path, monkeypatch):
    """Beam search on a CPU runs faster in small batches (benchmarks/README.md): without --eval_max_tokens the
    evaluations' batches take --max_tokens but at most 512 tokens per PyTorch thread; a GPU keeps --max_tokens, and
    --eval_max_tokens always wins. The translations do not depend on it."""
    budgets = []
    sampler = evaluation.TokenBatchSampler

    def record(*args, **kwargs):
        budgets.append(args[2])
        return sampler(*args, **kwargs)

    monkeypatch.setattr(evaluation, "TokenBatchSampler", record)
    base = [
        "--dataset_name", str(corpus), "--cache_dir", str(tmp_path / "cache"), *TINY_MODEL, *QUIET,
        "--vocab_size", "400", "--max_train_steps", "1", "--average_checkpoints", "0", "--report_to", "none",
        "--num_examples", "100", "--max_tokens", "600",
    ]  # fmt: skip
    torch.set_num_threads(1)  # each test ends at one thread again (conftest)
    small = train_in_process([*base, "--output_dir", str(tmp_path / "default")])
    assert budgets and set(budgets) == {512}  # every evaluation: the final validation and test scores
    budgets.clear()
    whole = train_in_process([*base, "--eval_max_tokens", "600", "--output_dir", str(tmp_path / "whole")])
    assert budgets and set(budgets) == {600}
    for split in ("validation", "test"):
        assert small[split]["examples"] == whole[split]["examples"] and small[split]["bleu"] == whole[split]["bleu"]
    choose = evaluation.evaluation_batch_tokens

    def args(eval_max_tokens=None, max_tokens=4096):
        return argparse.Namespace(eval_max_tokens=eval_max_tokens, max_tokens=max_tokens)

    torch.set_num_threads(2)
    assert choose(args(), torch.device("cpu")) == 1024 and choose(args(max_tokens=300), torch.device("cpu")) == 300
    gpu = torch.device("cuda")
    assert choose(args(), gpu) == 4096 and choose(args(max_tokens=25000), gpu) == 25000
    assert choose(args(eval_max_tokens=3000), torch.device("cpu")) == 3000


@pytest.mark.parametrize(
    "limits",
    [
        ["--eval_max_tokens", "20"],  # below the longest held-out pair
        ["--max_source_length", "10", "--max_target_length", "10", "--max_tokens", "10"],  # long pairs kept for eval
    ],
    ids=["eval_max_tokens", "kept-overlong-pairs"],
)
def test_held_out_pairs_over_the_evaluation_budget_are_refused_before_training_or_evaluated(corpus, tmp_path, limits):
    out = tmp_path / "run"
    argv = [
        "--dataset_name", str(corpus), "--cache_dir", str(tmp_path / "cache"), *TINY_MODEL, *QUIET,
        "--vocab_size", "400", "--max_train_steps", "1", "--average_checkpoints", "0", "--report_to", "none",
        "--num_examples", "100", *limits, "--output_dir", str(out),
    ]  # fmt: skip
    try:
        results = train_in_process(argv)
    except errors.UsageError as error:  # a clear error is fine, if it comes before any training
        assert "max_tokens" in str(error)
        assert not list(out.glob("checkpoints/step-*"))
        return
    assert len(results["validation"]["examples"]) == 8 and len(results["test"]["examples"]) == 6


def test_greedy_evaluations_give_generate_no_length_penalty_to_warn_about(corpus, tmp_path, monkeypatch):
    """--num_beams 1: the evaluations decode greedily and pass no `length_penalty` (a beam search option), so
    transformers does not tell every greedy run that "generation flags are not valid and may be ignored"."""
    warned = generation_warnings(monkeypatch)
    argv = [
        "--dataset_name", str(corpus), "--cache_dir", str(tmp_path / "cache"), *TINY_MODEL, *QUIET,
        "--vocab_size", "400", "--max_train_steps", "1", "--average_checkpoints", "0", "--report_to", "none",
        "--length_penalty", "1.5", "--output_dir", str(tmp_path / "run"),
    ]  # fmt: skip
    results = train_in_process(argv)
    assert "bleu" in results["validation"] and "bleu" in results["test"]  # both evaluations decoded
    assert warned == []


def test_every_option_of_every_command_has_a_help_text():
    """`--help` documents every option of train.py, of the tokenizer command and of checkpoint averaging."""
    import argparse

    from vaswani.cli import average, tokenizer

    parsers = {"train.py": training_options.build_parser()}
    for name, add in (("tokenizer", tokenizer.add_arguments), ("average", average.add_arguments)):
        parsers[name] = argparse.ArgumentParser()
        add(parsers[name])
    for name, parser in parsers.items():
        undocumented = [a.option_strings for a in parser._actions if a.option_strings and not (a.help or "").strip()]
        assert undocumented == [], (name, undocumented)
        assert len([a for a in parser._actions if a.option_strings]) > 5, name  # the options were really added
    assert "(paper: 0.98)" in parsers["train.py"].format_help()


def test_model_options_say_what_they_are_and_each_presets_value(capsys):
    """A model option's help is the first sentence of its entry in VaswaniConfig's docstring, with its value in each
    preset (`VaswaniConfig.from_preset`); a name option (--norm_type, ...) lists the names VaswaniConfig takes and
    refuses another when the command line is read; train.py's --help shows no "(default: None)"."""
    from modeling_vaswani import PRESETS, VaswaniConfig
    from modeling_vaswani.configuration_vaswani import MODEL_OPTIONS, NORM_TYPES

    parser = training_options.build_parser()
    actions = {action.dest: action for action in parser._actions}
    presets = {preset: VaswaniConfig.from_preset(preset) for preset in PRESETS}
    for name in MODEL_OPTIONS:
        values = {str(getattr(config, name)) for config in presets.values()}
        assert f"VaswaniConfig.{name}" in actions[name].help, name
        if "None" not in values:  # every preset's value, once where they agree
            assert all(value in actions[name].help for value in values), (name, actions[name].help)
    assert (
        actions["d_model"].help
        == "Width of the model, d_model in Section 3 (VaswaniConfig.d_model; base 512, big 1024)"
    )
    assert actions["encoder_layerdrop"].help.startswith("LayerDrop (Fan et al. 2019) (")  # not cut at "et al."
    assert actions["norm_type"].choices == NORM_TYPES
    assert "(default: None)" not in parser.format_help() and "(default: base)" in parser.format_help()
    with pytest.raises(SystemExit):
        parser.parse_args(["--output_dir", "out", "--norm_type", "rmsnorm"])
    error = capsys.readouterr().err  # argparse quotes the choices on some Python versions
    assert "argument --norm_type: invalid choice: 'rmsnorm' (choose from " in error and "scalenorm" in error
