"""Benchmark: train.py's training loop against transformers' `Seq2SeqTrainer` on `MarianMTModel`, on CPU.

Both train a model of the same dimensions on the same data with the same tokenizer, optimizer settings (Adam 0.9 /
0.98 / 1e-9, fused kernel), label smoothing 0.1, dropout 0.1 and the same average number of sentence pairs per batch,
in the same run. What differs is how batches are made: train.py packs length-sorted pairs under a token budget
(`--max_tokens`, like the paper and fairseq), the Trainer draws a fixed number of random pairs and pads them to the
longest one (`DataCollatorForSeq2Seq`). The figure is real (non-PAD) target tokens per second of training, measured
inside each loop after warmup, the same way on both sides: the wall clock between the ends of every 4 updates
(train.py's logging windows; the Trainer's `on_step_end`), so each window covers fetching and collating batches,
forward, backward and the optimizer step, and set-up is excluded on both; each side's rate is the median of its
windows. The ratio train.py / Trainer is reported per interleaved round (target: >= 1.2, met only when the median
and most rounds reach it). With `--aa` (the default) train.py runs a second time in every round: the A/A noise.

    python benchmarks/bench_train.py                         # ~40 minutes on 2 cores
    python benchmarks/bench_train.py --steps 12 --repeats 1  # smoke run, ~3 minutes

The corpus is synthetic but has the length spread of real parallel data: sentence lengths are log-normal (median
about 20 words, a long tail to 100), the target about as long as the source. Made-up words from syllables give the
BPE something to learn. Options: --pairs, --max_tokens, --steps, --warmup_steps (excluded from the timing),
--repeats, --size small|base, --vocab_size, --trainer_group_by_length (the Trainer's length-grouped sampler,
`train_sampling_strategy="group_by_length"`).

Mixed precision: `--precisions no bf16` measures both sides at each precision (train.py `--mixed_precision`, the
Trainer's `bf16=True`), interleaved in every round, and prints train.py bf16 / fp32 and train.py bf16 / the
Trainer at its best precision. By default bf16 is measured only where the CPU computes it natively (AVX512-BF16 /
AMX); elsewhere torch emulates bfloat16 and a run takes many times longer than in float32.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402

from vaswani.devices import native_bf16  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
SIZES = {
    "small": {"d_model": 256, "layers": 3, "heads": 4, "ffn_dim": 1024},
    "base": {"d_model": 512, "layers": 6, "heads": 8, "ffn_dim": 2048},
}
SYLLABLES = [
    "ka",
    "ri",
    "to",
    "ne",
    "sa",
    "mo",
    "lu",
    "pe",
    "di",
    "ga",
    "ber",
    "stein",
    "haus",
    "land",
    "ung",
    "keit",
    "lich",
    "ent",
    "ver",
    "ge",
    "zu",
    "an",
    "schaft",
]


MAX_LENGTH = 256  # tokens per side: train.py's default --max_source_length / --max_target_length
TRAIN_PY_LOGGING_STEPS = 4  # train.py's speed is read from its metrics.jsonl windows of this many updates


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], allow_abbrev=False)
    parser.add_argument("--pairs", type=int, default=12000, help="training sentence pairs")
    parser.add_argument("--size", choices=sorted(SIZES), default="small")
    parser.add_argument("--vocab_size", type=int, default=8000)
    parser.add_argument("--max_tokens", type=int, default=4096, help="train.py's token budget per batch")
    parser.add_argument("--steps", type=int, default=40, help="optimizer updates per run")
    parser.add_argument("--warmup_steps", type=int, default=8, help="first updates left out of the timing")
    parser.add_argument("--repeats", type=int, default=5, help="interleaved rounds (train.py, Trainer)")
    parser.add_argument(
        "--trainer_group_by_length", action="store_true", help="Trainer with train_sampling_strategy='group_by_length'"
    )
    parser.add_argument(
        "--precisions",
        nargs="+",
        choices=["no", "bf16"],
        default=None,
        help="mixed precision of both sides, one row each (default: no and bf16 where the CPU has native bf16, "
        "else no; bf16 without AVX512-BF16/AMX is emulated and very slow)",
    )
    parser.add_argument("--seed", type=int, default=0)
    common.add_aa_argument(parser, "train.py")
    parser.add_argument("--json", help="write the results here")
    parser.add_argument("--worker", help=argparse.SUPPRESS)  # internal: run the Trainer side from a spec file
    args = parser.parse_args(argv)
    for name in ("pairs", "vocab_size", "max_tokens", "steps", "repeats"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} {getattr(args, name)} is not allowed: use a positive integer")
    if args.warmup_steps < 0 or args.steps < first_timed_window(args.warmup_steps) + TRAIN_PY_LOGGING_STEPS:
        parser.error(f"--steps {args.steps} with --warmup_steps {args.warmup_steps}: timing needs warmup_steps >= 0 "
                     f"and one whole window of {TRAIN_PY_LOGGING_STEPS} updates after the warm-up (windows start "
                     f"at multiples of {TRAIN_PY_LOGGING_STEPS}, never at the first update): --steps at least "
                     f"{first_timed_window(max(args.warmup_steps, 0)) + TRAIN_PY_LOGGING_STEPS}")  # fmt: skip
    return args


def first_timed_window(warmup_steps: int) -> int:
    """Updates done before the first timed window starts: the first multiple of TRAIN_PY_LOGGING_STEPS (train.py's
    window boundaries) at or after the warm-up, and never 0 (the first window's clock would include set-up)."""
    return max(1, math.ceil(warmup_steps / TRAIN_PY_LOGGING_STEPS)) * TRAIN_PY_LOGGING_STEPS


# -- data ---------------------------------------------------------------------------------------------------------------
def make_corpus(folder: Path, pairs: int, seed: int) -> dict[str, Path]:
    """Parallel jsonl files in the {"translation": {"en": ..., "de": ...}} layout with real-data length spread."""
    rng = random.Random(seed)
    words = sorted({"".join(rng.choices(SYLLABLES, k=rng.randint(1, 4))) for _ in range(6000)})

    def sentence(n: int) -> str:
        return " ".join(rng.choice(words) for _ in range(n)).capitalize() + "."

    def pair() -> dict:
        n = min(100, max(2, round(rng.lognormvariate(math.log(20), 0.6))))
        m = min(110, max(2, round(n * rng.uniform(0.8, 1.25))))
        return {"translation": {"en": sentence(n), "de": sentence(m)}}

    paths = {}
    for split, count in (("train", pairs), ("validation", 8)):
        paths[split] = folder / f"{split}.jsonl"
        with paths[split].open("w", encoding="utf-8") as f:
            for _ in range(count):
                f.write(json.dumps(pair(), ensure_ascii=False) + "\n")
    return paths


def prepare_tokenizer(paths: dict[str, Path], folder: Path, vocab_size: int, source_lang: str = "en",
                      target_lang: str = "de"):  # fmt: skip
    from datasets import load_dataset

    from tokenization import train_bpe_tokenizer

    dataset = load_dataset("json", data_files=str(paths["train"]), split="train")
    tokenizer = train_bpe_tokenizer(dataset=dataset, source_lang=source_lang, target_lang=target_lang,
                                    vocab_size=vocab_size)  # fmt: skip
    tokenizer.save_pretrained(folder / "tokenizer")
    return tokenizer, dataset


def pairs_per_batch(tokenizer, dataset, max_tokens: int) -> tuple[float, float]:
    """train.py's average pairs per batch and its padding efficiency on this data (what the Trainer gets too)."""
    from vaswani.data.batching import TokenBatchSampler, padding_efficiency

    sources = [t["en"] for t in dataset["translation"]]
    targets = [t["de"] for t in dataset["translation"]]
    encoded = tokenizer(sources, text_target=targets)
    src_len = [len(ids) for ids in encoded["input_ids"]]
    tgt_len = [len(ids) for ids in encoded["labels"]]
    sampler = TokenBatchSampler(src_len, tgt_len, max_tokens, shuffle=True, seed=0)
    return len(dataset) / len(sampler), padding_efficiency(sampler.batches(0), src_len, tgt_len)


# -- train.py -------------------------------------------------------------------------------------------------------
def run_train_py(args, paths, folder: Path, round_index: int, precision: str = "no", tag: str = "") -> dict:
    dims = SIZES[args.size]
    out = folder / f"train_py_{round_index}_{precision}{tag}"
    logging_steps = TRAIN_PY_LOGGING_STEPS
    cmd = [
        sys.executable, str(REPO / "train.py"), "--train_file", str(paths["train"]),
        "--validation_file", str(paths["validation"]), "--tokenizer", str(folder / "tokenizer"),
        "--d_model", str(dims["d_model"]), "--encoder_layers", str(dims["layers"]),
        "--decoder_layers", str(dims["layers"]), "--encoder_attention_heads", str(dims["heads"]),
        "--decoder_attention_heads", str(dims["heads"]), "--encoder_ffn_dim", str(dims["ffn_dim"]),
        "--decoder_ffn_dim", str(dims["ffn_dim"]), "--max_tokens", str(args.max_tokens),
        "--max_train_steps", str(args.steps), "--warmup_steps", "4000", "--logging_steps", str(logging_steps),
        "--eval_steps", "0", "--average_checkpoints", "0", "--checkpoint_minutes", "100000",
        "--max_eval_samples", "2", "--num_beams", "1", "--report_to", "none", "--seed", str(args.seed),
        "--mixed_precision", precision,
        "--output_dir", str(out),
    ]  # fmt: skip
    result = subprocess.run(cmd, capture_output=True, text=True, env=common.worker_env(), cwd=folder)
    if result.returncode != 0:
        raise RuntimeError(f"train.py failed:\n{result.stderr[-3000:]}")
    windows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    start = first_timed_window(args.warmup_steps)
    windows = [w for w in windows if w["split"] == "train" and w["step"] - logging_steps >= start]
    rates = [w["target_tokens_per_second"] for w in windows]
    return {"target_tokens_per_second": statistics.median(rates), "windows": rates}


# -- Seq2SeqTrainer on MarianMTModel (in a worker process, like train.py) --------------------------------------------
def run_trainer(args, paths, folder: Path, batch_size: int, precision: str = "no") -> dict:
    spec = folder / "trainer_spec.json"
    spec.write_text(json.dumps({
        "train": str(paths["train"]), "tokenizer": str(folder / "tokenizer"), "size": args.size,
        "batch_size": batch_size, "steps": args.steps, "warmup_steps": args.warmup_steps, "seed": args.seed,
        "group_by_length": args.trainer_group_by_length, "output_dir": str(folder / "trainer_out"),
        "bf16": precision == "bf16",
    }))  # fmt: skip
    result = subprocess.run([sys.executable, __file__, "--worker", str(spec)], capture_output=True, text=True,
                            env=common.worker_env())  # fmt: skip
    if result.returncode != 0:
        raise RuntimeError(f"Trainer worker failed:\n{result.stderr[-3000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def marian_model(tokenizer, d_model: int, layers: int, heads: int, ffn_dim: int, dropout: float = 0.1):
    """A new `MarianMTModel` configured like our model: ReLU, dropout only after sublayers, scaled embeddings shared by
    source, target and output, sinusoidal positions, our tokenizer's special ids, no forced EOS."""
    from transformers import MarianConfig, MarianMTModel

    return MarianMTModel(MarianConfig(
        vocab_size=len(tokenizer), d_model=d_model, encoder_layers=layers, decoder_layers=layers,
        encoder_attention_heads=heads, decoder_attention_heads=heads, encoder_ffn_dim=ffn_dim,
        decoder_ffn_dim=ffn_dim, activation_function="relu", dropout=dropout, attention_dropout=0.0,
        activation_dropout=0.0, max_position_embeddings=MAX_LENGTH, scale_embedding=True,
        share_encoder_decoder_embeddings=True, tie_word_embeddings=True, pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id, decoder_start_token_id=tokenizer.bos_token_id, forced_eos_token_id=None,
    ))  # fmt: skip


def marian_and_training_set(spec: dict, dims: dict, source_lang: str = "en", target_lang: str = "de", **tokenize):
    """The Trainer side's set-up from its worker spec ("tokenizer" folder, "seed", "train" .jsonl): the tokenizer, a
    new `marian_model(tokenizer, **dims)` and the tokenized training pairs (`tokenize`: extra tokenizer arguments).
    Shared with bench_quality."""
    import torch
    from datasets import load_dataset
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(spec["tokenizer"])
    torch.manual_seed(spec["seed"])
    model = marian_model(tokenizer, **dims)
    raw = load_dataset("json", data_files=spec["train"], split="train")

    def encode(batch):
        pairs = batch["translation"]
        return tokenizer([p[source_lang] for p in pairs], text_target=[p[target_lang] for p in pairs], **tokenize)

    return tokenizer, model, raw.map(encode, batched=True, remove_columns=raw.column_names)


def trainer_worker(spec_path: str) -> None:
    from transformers import DataCollatorForSeq2Seq, Seq2SeqTrainer, Seq2SeqTrainingArguments, TrainerCallback

    spec = json.loads(Path(spec_path).read_text())
    tokenizer, model, train = marian_and_training_set(spec, SIZES[spec["size"]])
    # train.py's default for pairs longer than its --max_source_length / --max_target_length (256 tokens, also
    # Marian's position table here): dropped. Only a small --vocab_size makes such pairs.
    train = train.filter(lambda row: max(len(row["input_ids"]), len(row["labels"])) <= MAX_LENGTH)
    collator = DataCollatorForSeq2Seq(tokenizer, model=model, label_pad_token_id=-100)
    tokens_per_batch, real, padded = [], 0, 0
    step_ends = []  # perf_counter at the end of every update: the window clock, as train.py's

    def counting_collator(features):
        nonlocal real, padded
        batch = collator(features)
        tokens_per_batch.append(int((batch["labels"] != -100).sum()))
        real += tokens_per_batch[-1] + int(batch["attention_mask"].sum())
        padded += batch["labels"].numel() + batch["attention_mask"].numel()
        return batch

    class StepTimer(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            step_ends.append(time.perf_counter())

    arguments = Seq2SeqTrainingArguments(
        output_dir=spec["output_dir"], per_device_train_batch_size=spec["batch_size"], max_steps=spec["steps"],
        optim="adamw_torch_fused", learning_rate=7e-4, adam_beta1=0.9, adam_beta2=0.98, adam_epsilon=1e-9,
        weight_decay=0.0, warmup_steps=4000, lr_scheduler_type="inverse_sqrt", label_smoothing_factor=0.1,
        logging_strategy="no", save_strategy="no", report_to=[], use_cpu=True, disable_tqdm=True,
        dataloader_num_workers=0, seed=spec["seed"], bf16=spec.get("bf16", False),
        train_sampling_strategy="group_by_length" if spec["group_by_length"] else "random",
    )  # fmt: skip
    trainer = Seq2SeqTrainer(model=model, args=arguments, train_dataset=train, data_collator=counting_collator,
                             processing_class=tokenizer, callbacks=[StepTimer()])  # fmt: skip
    trainer.train()
    windows = window_rates(step_ends, tokens_per_batch[: spec["steps"]], spec["warmup_steps"])
    print(json.dumps({
        "target_tokens_per_second": statistics.median(windows), "windows": windows,
        "padding_efficiency": real / padded,
        "mean_target_tokens_per_batch": statistics.mean(tokens_per_batch[: spec["steps"]]),
    }))  # fmt: skip


def window_rates(step_ends: list[float], tokens: list[int], warmup_steps: int) -> list[float]:
    """Target tokens/s of the windows train.py logs and `run_train_py` keeps: TRAIN_PY_LOGGING_STEPS updates each,
    from `first_timed_window(warmup_steps)` on; the tokens of the window's updates over the wall time from the end of
    the update before the window to the end of its last one (`step_ends[i]`: when update i + 1 ended)."""
    rates = []
    start = first_timed_window(warmup_steps)
    for first in range(start, len(step_ends) - TRAIN_PY_LOGGING_STEPS + 1, TRAIN_PY_LOGGING_STEPS):
        last = first + TRAIN_PY_LOGGING_STEPS - 1
        rates.append(sum(tokens[first : last + 1]) / (step_ends[last] - step_ends[first - 1]))
    return rates


# -- main -------------------------------------------------------------------------------------------------------------
def main() -> None:
    args = parse_args()
    if args.worker:
        trainer_worker(args.worker)
        return
    with tempfile.TemporaryDirectory(prefix="bench_train_") as tmp:
        folder = Path(tmp)
        paths = make_corpus(folder, args.pairs, args.seed)
        tokenizer, dataset = prepare_tokenizer(paths, folder, args.vocab_size)
        per_batch, efficiency = pairs_per_batch(tokenizer, dataset, args.max_tokens)
        batch_size = max(1, round(per_batch))
        dims = SIZES[args.size]
        print(
            f"train.py vs Seq2SeqTrainer(MarianMTModel) on {common.describe_machine(common.machine_description(len(os.sched_getaffinity(0))))}; "
            f"{args.pairs} pairs (log-normal lengths), vocab {len(tokenizer)}, {args.size}: d_model "
            f"{dims['d_model']}, {dims['layers']}+{dims['layers']} layers; {args.steps} updates per run, first "
            f"{args.warmup_steps} not timed"
        )
        print(
            f"train.py: --max_tokens {args.max_tokens} -> {per_batch:.1f} pairs per batch on average, padding "
            f"efficiency {100 * efficiency:.1f}%; Trainer: per_device_train_batch_size {batch_size}"
            f"{', group_by_length' if args.trainer_group_by_length else ', random batches'}"
        )
        precisions = args.precisions or (["no", "bf16"] if native_bf16("cpu") else ["no"])
        rounds = []
        for r in range(args.repeats):
            entry = {"train_py": {}, "trainer": {}, **({"train_py_aa": {}} if args.aa else {})}
            for precision in precisions:  # interleaved at each precision, every round, in alternating order
                runs = {
                    "train_py": partial(run_train_py, args, paths, folder, r, precision),
                    "trainer": partial(run_trainer, args, paths, folder, batch_size, precision),
                }
                if args.aa:
                    runs["train_py_aa"] = partial(run_train_py, args, paths, folder, r, precision, "_aa")
                for side in list(runs) if r % 2 == 0 else reversed(runs):
                    entry[side][precision] = runs[side]()
                ours, theirs = entry["train_py"][precision], entry["trainer"][precision]
                aa = (f", A/A {ours['target_tokens_per_second'] / entry['train_py_aa'][precision]['target_tokens_per_second']:.2f}"
                      if args.aa else "")  # fmt: skip
                print(
                    f"round {r + 1}, {precision}: train.py {ours['target_tokens_per_second']:,.0f} target tokens/s, "
                    f"Trainer {theirs['target_tokens_per_second']:,.0f} target tokens/s (padding efficiency "
                    f"{100 * theirs['padding_efficiency']:.1f}%), ratio "
                    f"{ours['target_tokens_per_second'] / theirs['target_tokens_per_second']:.2f}{aa}",
                    flush=True,
                )
            rounds.append(entry)
    summarise(rounds, precisions)
    if args.json:
        Path(args.json).write_text(json.dumps({"settings": vars(args), "rounds": rounds}, indent=2))


def summarise(rounds: list[dict], precisions: list[str]) -> None:
    """One row per precision, the ratios per round (median and range), and the targets' verdicts."""

    def rate(r, side, precision):
        return r[side][precision]["target_tokens_per_second"]

    def ratio_cell(values):
        return f"{statistics.median(values):.2f} ({min(values):.2f}-{max(values):.2f})"

    rows = []
    for precision in precisions:
        ratios = [rate(r, "train_py", precision) / rate(r, "trainer", precision) for r in rounds]
        rows.append([
            f"target tokens/s, {precision} (median)",
            f"{statistics.median(rate(r, 'train_py', precision) for r in rounds):,.0f}",
            f"{statistics.median(rate(r, 'trainer', precision) for r in rounds):,.0f}", ratio_cell(ratios),
        ])  # fmt: skip
    print(common.format_table(["", "train.py", "Seq2SeqTrainer", "train.py / Trainer"], rows))
    for precision in precisions:
        if "train_py_aa" in rounds[0]:
            aa = common.Summary.of(
                [rate(r, "train_py", precision) / rate(r, "train_py_aa", precision) for r in rounds]
            )
            print(f"{precision}: {common.describe_aa(aa, 'train.py')}")
    if "no" in precisions:
        ratios = [rate(r, "train_py", "no") / rate(r, "trainer", "no") for r in rounds]
        print(f"{common.verdict(ratios, 1.2)} target train.py / Trainer >= 1.2 (fp32): {ratio_cell(ratios)}, "
              f"{sum(ratio >= 1.2 for ratio in ratios)} of {len(ratios)} rounds")  # fmt: skip
    if {"no", "bf16"} <= set(precisions):
        speedup = [rate(r, "train_py", "bf16") / rate(r, "train_py", "no") for r in rounds]
        print(f"{common.verdict(speedup, 2.0)} target train.py bf16 / train.py fp32 >= 2: {ratio_cell(speedup)}")
        best_peer = max(precisions, key=lambda p: statistics.median(rate(r, "trainer", p) for r in rounds))
        versus = [rate(r, "train_py", "bf16") / rate(r, "trainer", best_peer) for r in rounds]
        print(f"{common.verdict(versus, 1.3)} target train.py bf16 / Trainer at its best ({best_peer}) >= 1.3: "
              f"{ratio_cell(versus)}")  # fmt: skip


if __name__ == "__main__":
    main()
