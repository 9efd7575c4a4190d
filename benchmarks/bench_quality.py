"""Benchmark: translation quality at the same wall-clock budget, train.py (the configs/small-data.yaml recipe) against
transformers' `Seq2SeqTrainer` on `MarianMTModel`, on a real small corpus (default ../shared/data/gettext-en-es).

    python benchmarks/bench_quality.py                       # 20 minutes each, side by side, one thread each
    python benchmarks/bench_quality.py --minutes 5 --max_test_samples 300   # a shorter run (label it so)
    python benchmarks/bench_quality.py --minutes 0.2 --max_test_samples 10 --max_eval_samples 10   # smoke run

Both sides train at the same time, each in its own process with one thread (so they do not compete for cores),
for the same number of minutes of their training loop (evaluations during training included; set-up and the
final test evaluation not). Same model dimensions (those of the recipe: d_model 256, 3+3 layers, 4 heads, FFN 1024,
shared embeddings, sinusoidal positions, and its dropout: 0 since the sweep of issue 27) and the same tokenizer (one BPE of the recipe's vocabulary size, trained
once). Each side has its own recipe:

- train.py: `--config configs/small-data.yaml --max_train_minutes M` exactly as a user runs it (token-budget batches,
  Noam warmup, PreNorm with ScaleNorm and FixNorm, the weights' moving average and checkpoint averaging, the final
  model chosen on validation), test scores from its results.json.
- Trainer: the usual Hugging Face fine-tuning recipe adapted to training from scratch: batch size 64,
  `group_by_length`, AdamW (0.9, 0.98) at 5e-4 with 400 warmup steps and inverse square root decay, label smoothing
  0.1, the recipe's dropout, fused AdamW; stopped by a callback when the budget is spent; test translations with
  `generate(num_beams=4)` (length penalty 0.6, as train.py). Mixed precision: train.py's default on this CPU (bf16
  where it trains faster than float32, AMX or an AMD CPU's AVX512-BF16; else none) on both sides, and train.py's attention
  kernel at that precision (eager in bf16 on a CPU, vaswani.devices.training_attention) on both sides too.

Both are scored with sacrebleu (BLEU and chrF, default settings; the signatures are printed). Target: train.py
>= 5 BLEU ahead.

Giving the peer its best shot, and separating what the margin comes from:

    python benchmarks/bench_quality.py --tune_peer --seeds 0,1 --our_recipes small-data,postnorm   # ~3 h on 2 cores
    python benchmarks/bench_quality.py --tune_peer --seeds 0,1 --tune_seeds 1 --our_recipes small-data,postnorm --minutes 10

`--tune_peer` trains the Trainer side at every point of a grid (`PEER_GRID`: learning rate 3e-4, 5e-4, 1e-3 x batch
size 32, 64 x schedule inverse_sqrt, warmup_stable_decay; `--peer_learning_rates`, `--peer_batch_sizes` and
`--peer_lr_schedulers` set others), each at the same budget, and takes the point with the best mean validation BLEU
(the first `--max_eval_samples` validation pairs, the recipe's 400 by default; never the test set) as the tuned peer.
A schedule that train.py may use, the peer may use too: transformers' `warmup_stable_decay` (the same 400 warmup
steps, then a 1-sqrt decay to zero over the last 20% of the run: train.py's defaults for that schedule) needs the
run's number of updates, which a time budget does not give; the peer's is fitted to the budget from its own pace
(`fit_wsd_to_budget`: at 50% and again at 75% of the budget, in the constant phase, the end is moved to the update
count the pace so far reaches at 100%), so its decay ends with the budget as train.py's does.
`--seeds` runs every configuration once per seed; mean and range over seeds are printed. `--tune_seeds N` sweeps
the grid at the first N seeds only and then runs the peer's best (on those seeds' validation BLEU) at the other
seeds: 6 + 1 Trainer runs instead of 12 for two seeds, every side still at every seed. `--our_recipes` picks
train.py's side: `small-data` (the recipe as it is) and `postnorm` (the same recipe with the paper's PostNorm +
LayerNorm and no FixNorm: Marian's architecture, so the margin it keeps is the training recipe's). Runs go
`--parallel` at a time (default: one per core), one thread each. The margin of each recipe over the tuned peer is
given per seed and called met only when the median and most seeds reach +5 BLEU (`common.verdict`).

train.py's final model is chosen among candidates (the last checkpoint, the best evaluated one, the average of the
window, and the moving average with --ema_decay; vaswani/training/stopping.py) by validation score. Each candidate is also
scored on the test set here, with the same beam search, to check the choice: the final model's test BLEU should be
at least the best candidate's - 0.3.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402
from bench_train import marian_and_training_set  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
RECIPE = REPO / "configs" / "small-data.yaml"


# train.py's side: the recipe as it is, and the recipe with Marian's (the paper's) normalization
OUR_RECIPES = {
    "small-data": [],
    "postnorm": ["--norm_position", "post", "--norm_type", "layernorm", "--fixnorm", "false"],
}
# the hand-chosen recipe (without --tune_peer)
PEER_DEFAULT = {"learning_rate": 5e-4, "batch_size": 64, "lr_scheduler": "inverse_sqrt"}
# --tune_peer's default grid
PEER_LEARNING_RATES, PEER_BATCH_SIZES = (3e-4, 5e-4, 1e-3), (32, 64)
PEER_LR_SCHEDULERS = ("inverse_sqrt", "warmup_stable_decay")
PEER_WARMUP_STEPS = 400
# warmup_stable_decay as train.py runs it by default (--decay_fraction, --decay_type, --min_lr_ratio)
WSD_DECAY_FRACTION, WSD_DECAY_TYPE, WSD_MIN_LR_RATIO = 0.2, "1-sqrt", 0.0
WSD_FITS = (0.5, 0.75)  # fractions of the budget at which the peer's warmup_stable_decay is fitted to its pace


def peer_grid(learning_rates=PEER_LEARNING_RATES, batch_sizes=PEER_BATCH_SIZES, lr_schedulers=PEER_LR_SCHEDULERS,
              ) -> list[dict]:  # fmt: skip
    """The Trainer settings --tune_peer sweeps: every learning rate with every batch size and schedule."""
    return [{"learning_rate": lr, "batch_size": bs, "lr_scheduler": schedule}
            for lr in learning_rates for bs in batch_sizes for schedule in lr_schedulers]  # fmt: skip


def fit_wsd_to_budget(scheduler, step: int, spent: float) -> int:
    """Move the end of transformers' `warmup_stable_decay` schedule to the update count that the pace so far
    (`step` updates in the fraction `spent` of the time budget) reaches when the budget ends, keeping the learning
    rate of the next update: called in the constant phase, the curve so far is unchanged and the decay (the last
    WSD_DECAY_FRACTION of the updates) now ends with the budget. Returns the estimated number of updates."""
    from transformers import get_wsd_schedule

    scheduler = getattr(scheduler, "scheduler", scheduler)  # accelerate's wrapper, where the Trainer made one
    total = max(step + 1, round(step / spent))
    optimizer = scheduler.optimizer
    next_rates = [group["lr"] for group in optimizer.param_groups]
    fitted = get_wsd_schedule(optimizer, PEER_WARMUP_STEPS, max(1, round(WSD_DECAY_FRACTION * total)),
                              num_training_steps=total, decay_type=WSD_DECAY_TYPE, min_lr_ratio=WSD_MIN_LR_RATIO)  # fmt: skip
    scheduler.lr_lambdas = fitted.lr_lambdas
    for group, rate in zip(optimizer.param_groups, next_rates, strict=True):  # building `fitted` reset them
        group["lr"] = rate
    return total


PEER_GRID = peer_grid()


def _int_list(text: str) -> list[int]:
    try:
        values = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: use comma-separated integers, e.g. 0,1") from None
    if not values:
        raise argparse.ArgumentTypeError("give at least one seed")
    return values


def _positive_list(kind: type) -> Callable[[str], list]:
    """A comma-separated list of positive numbers of `kind` (int or float), each once."""

    def parse(text: str) -> list:
        try:
            values = [kind(part) for part in text.split(",") if part.strip()]
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r}: use comma-separated {kind.__name__}s, e.g. "
                                             f"{'1e-3,2e-3' if kind is float else '32,64'}") from None  # fmt: skip
        if not values or min(values) <= 0 or len(set(values)) < len(values):
            raise argparse.ArgumentTypeError(f"{text!r}: give positive values, each once")
        return values

    return parse


_recipe_list = common.choice_list(OUR_RECIPES, "recipes")
_scheduler_list = common.choice_list(PEER_LR_SCHEDULERS, "schedules")


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], allow_abbrev=False)
    common.add_corpus_arguments(parser)
    parser.add_argument("--minutes", type=float, default=20.0, help="training budget of each side")
    parser.add_argument("--max_test_samples", type=int, default=None, help="score the first N test pairs only")
    parser.add_argument(
        "--max_eval_samples", type=int, default=None, help="train.py's validation subset (default: the recipe's)"
    )
    parser.add_argument("--seeds", type=_int_list, default=[0], help="comma-separated seeds: one run each per side")
    parser.add_argument("--tune_peer", action="store_true",
                        help="train the Trainer side at every point of a grid (learning rate x batch size) and "
                             "compare against the best on validation")  # fmt: skip
    parser.add_argument("--peer_learning_rates", type=_positive_list(float), default=None,
                        help="with --tune_peer: the grid's learning rates, comma-separated (default: "
                             f"{','.join(map(str, PEER_LEARNING_RATES))})")  # fmt: skip
    parser.add_argument("--peer_batch_sizes", type=_positive_list(int), default=None,
                        help="with --tune_peer: the grid's batch sizes, comma-separated (default: "
                             f"{','.join(map(str, PEER_BATCH_SIZES))})")  # fmt: skip
    parser.add_argument("--peer_lr_schedulers", type=_scheduler_list, default=None,
                        help="with --tune_peer: the grid's schedules, comma-separated, from "
                             f"{', '.join(PEER_LR_SCHEDULERS)} (default: both)")  # fmt: skip
    parser.add_argument("--tune_seeds", type=int, default=None,
                        help="with --tune_peer: sweep the grid at the first N seeds, then run the peer's best at the "
                             "others (default: the grid at every seed)")  # fmt: skip
    parser.add_argument("--our_recipes", type=_recipe_list, default=["small-data"],
                        help=f"comma-separated train.py recipes, from {', '.join(OUR_RECIPES)}")  # fmt: skip
    parser.add_argument("--parallel", type=int, default=len(os.sched_getaffinity(0)),
                        help="runs at a time, one thread each (default: one per core)")  # fmt: skip
    parser.add_argument("--output_dir", type=Path, default=REPO / "runs" / "bench_quality")
    parser.add_argument("--json", type=Path, help="write the results here")
    parser.add_argument("--worker", help=argparse.SUPPRESS)  # internal: the Trainer side, from a spec file
    args = parser.parse_args(argv)
    if args.worker is None:
        if args.minutes <= 0:
            parser.error("--minutes must be positive")
        if args.parallel < 1:
            parser.error(f"--parallel {args.parallel} is not allowed: use 1 or more")
        if args.tune_seeds is not None and not (args.tune_peer and 1 <= args.tune_seeds <= len(args.seeds)):
            parser.error(f"--tune_seeds {args.tune_seeds} is not allowed: it needs --tune_peer and a number from 1 "
                         f"to the number of --seeds ({len(args.seeds)})")  # fmt: skip
        for name in ("peer_learning_rates", "peer_batch_sizes", "peer_lr_schedulers"):
            if getattr(args, name) is not None and not args.tune_peer:
                parser.error(f"--{name} is not allowed without --tune_peer: it sets the grid that --tune_peer sweeps")
        common.check_data_dir(parser, args.data_dir)
    args.peers = (peer_grid(args.peer_learning_rates or PEER_LEARNING_RATES, args.peer_batch_sizes or PEER_BATCH_SIZES,
                            args.peer_lr_schedulers or PEER_LR_SCHEDULERS)
                  if args.tune_peer else [PEER_DEFAULT])  # fmt: skip
    return args


def prepare(args) -> tuple[Path, Path, dict]:
    """The shared tokenizer and the test file (shortened with --max_test_samples)."""
    from datasets import load_dataset

    from tokenization import train_bpe_tokenizer

    recipe = yaml.safe_load(RECIPE.read_text())
    args.output_dir.mkdir(parents=True, exist_ok=True)
    tokenizer_dir = args.output_dir / "tokenizer"
    train = load_dataset("json", data_files=str(args.data_dir / "train.jsonl"), split="train")
    tokenizer = train_bpe_tokenizer(dataset=train, source_lang=args.source_lang, target_lang=args.target_lang,
                                    vocab_size=recipe["vocab_size"], min_frequency=recipe["min_frequency"])  # fmt: skip
    tokenizer.save_pretrained(tokenizer_dir)
    test_file = args.data_dir / "test.jsonl"
    if args.max_test_samples:
        lines = test_file.read_text(encoding="utf-8").splitlines()[: args.max_test_samples]
        test_file = args.output_dir / "test.jsonl"
        test_file.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return tokenizer_dir, test_file, recipe


@dataclass
class Run:
    """One training run of either side: its command, output and log; `result` is filled when it has finished."""

    side: str  # "train.py" or "Trainer"
    config: str  # our recipe name, or the peer's grid point ("lr 5e-04, batch 64")
    seed: int
    command: list[str]
    output: Path  # train.py's output folder, or the Trainer worker's result file
    log: Path
    result: dict | None = None


def train_py_run(args, tokenizer_dir: Path, test_file: Path, recipe: str, seed: int) -> Run:
    out = args.output_dir / f"train_py-{recipe}-seed{seed}"
    command = [
        sys.executable, str(REPO / "train.py"), "--config", str(RECIPE), *OUR_RECIPES[recipe],
        "--train_file", str(args.data_dir / "train.jsonl"), "--validation_file", str(args.data_dir / "validation.jsonl"),
        "--test_file", str(test_file), "--source_lang", args.source_lang, "--target_lang", args.target_lang,
        "--tokenizer", str(tokenizer_dir), "--max_train_minutes", str(args.minutes), "--seed", str(seed),
        "--output_dir", str(out), "--overwrite_output_dir",
        *(["--max_eval_samples", str(args.max_eval_samples)] if args.max_eval_samples else []),
    ]  # fmt: skip
    return Run("train.py", recipe, seed, command, out, out.with_suffix(".log"))


def both_sides_precision() -> str:
    """train.py's default precision on this CPU (bf16 where it trains faster than float32, else fp32), given to the
    Trainer side too, so that a difference in precision is no part of the margin."""
    from vaswani.devices import resolve_mixed_precision

    return resolve_mixed_precision(None, "cpu")[0]


def both_sides_attention() -> str:
    """train.py's attention kernel at that precision on this CPU (eager for bf16: `vaswani.devices.training_attention`,
    PyTorch's CPU flash-attention backward is slow in bfloat16), given to the Trainer side too: MarianMTModel's
    default is the same sdpa kernel, so the peer gets the same fix."""
    from vaswani.devices import training_attention

    return training_attention(None, "cpu", both_sides_precision())[0] or "sdpa"


def trainer_config(peer: dict) -> str:
    return f"lr {peer['learning_rate']:g}, batch {peer['batch_size']}, {peer['lr_scheduler']}"


def trainer_run(args, tokenizer_dir: Path, test_file: Path, recipe: dict, peer: dict, seed: int) -> Run:
    name = f"trainer-lr{peer['learning_rate']:g}-bs{peer['batch_size']}-{peer['lr_scheduler']}-seed{seed}"
    spec, result = args.output_dir / f"{name}.spec.json", args.output_dir / f"{name}.result.json"
    result.unlink(missing_ok=True)
    spec.write_text(json.dumps({
        "train": str(args.data_dir / "train.jsonl"), "validation": str(args.data_dir / "validation.jsonl"),
        "max_eval_samples": args.max_eval_samples or recipe["max_eval_samples"], "test": str(test_file),
        "tokenizer": str(tokenizer_dir), "source_lang": args.source_lang, "target_lang": args.target_lang,
        "minutes": args.minutes, "seed": seed, "bf16": both_sides_precision() == "bf16",
        "attn_implementation": both_sides_attention(), "output_dir": str(args.output_dir / name), "result": str(result),
        **peer,
        "dims": {k: recipe[k] for k in ("d_model", "encoder_layers", "decoder_layers", "encoder_attention_heads",
                                        "decoder_attention_heads", "encoder_ffn_dim", "decoder_ffn_dim", "dropout")},
    }))  # fmt: skip
    return Run("Trainer", trainer_config(peer), seed, [sys.executable, __file__, "--worker", str(spec)], result,
               args.output_dir / f"{name}.log")  # fmt: skip


def run_all(runs: list[Run], parallel: int, gate: list[Run] = (), then=None) -> list[Run]:
    """Run every run, `parallel` at a time, each with one thread; fill in `result`; stop at the first failure.
    When every run of `gate` has finished, the runs `then()` returns are queued too. Returns every run started."""
    waiting, running, started = list(runs), [], list(runs)
    while waiting or running or then is not None:  # `gate` is part of `runs`: `then` is called in the end
        if then is not None and all(run.result is not None for run in gate):
            follow_up, then = then(), None
            waiting, started = follow_up + waiting, started + follow_up
        while waiting and len(running) < parallel:
            run = waiting.pop(0)
            with run.log.open("w") as log:
                process = subprocess.Popen(run.command, stdout=log, stderr=subprocess.STDOUT,
                                           env=common.worker_env(threads=1), cwd=REPO)  # fmt: skip
            running.append((run, process))
            print(f"started {run.side} {run.config}, seed {run.seed} (log: {run.log})", flush=True)
        time.sleep(1)
        for run, process in list(running):
            if process.poll() is None:
                continue
            running.remove((run, process))
            if process.returncode != 0:
                for _, other in running:
                    other.kill()
                raise SystemExit(f"{run.side} {run.config} seed {run.seed} failed (exit {process.returncode}); "
                                 f"see {run.log}")  # fmt: skip
            run.result = read_result(run)
            print(f"finished {run.side} {run.config}, seed {run.seed}: {run.result['updates']} updates, validation "
                  f"BLEU {run.result['validation_bleu']:.2f}, test BLEU {run.result['bleu']:.2f}", flush=True)  # fmt: skip
    return started


def read_result(run: Run) -> dict:
    """updates, validation_bleu, bleu, chrf and bleu_signature of a finished run, from either side's files."""
    if run.side == "Trainer":
        return json.loads(run.output.read_text())
    final = json.loads((run.output / "results.json").read_text())
    return {"updates": final["step"], "validation_bleu": final["validation"]["bleu"], "bleu": final["test"]["bleu"],
            "chrf": final["test"]["chrf"], "bleu_signature": final["test"]["bleu_signature"]}  # fmt: skip


def trainer_worker(spec_path: str) -> None:
    from transformers import DataCollatorForSeq2Seq, Seq2SeqTrainer, Seq2SeqTrainingArguments, TrainerCallback

    spec = json.loads(Path(spec_path).read_text())
    src, tgt, dims = spec["source_lang"], spec["target_lang"], spec["dims"]
    # Same dimensions as the recipe (it has as many encoder as decoder layers and heads).
    marian_dims = dict(d_model=dims["d_model"], layers=dims["encoder_layers"], heads=dims["encoder_attention_heads"],
                       ffn_dim=dims["encoder_ffn_dim"], dropout=dims["dropout"])  # fmt: skip
    tokenizer, model, train = marian_and_training_set(spec, marian_dims, src, tgt, truncation=True, max_length=256)
    model.set_attn_implementation(spec["attn_implementation"])
    print(f"attention kernel: {model.config._attn_implementation}", flush=True)
    steps = {"done": 0}
    wsd = spec["lr_scheduler"] == "warmup_stable_decay"

    class TimeBudget(TrainerCallback):
        """Stops when the budget is spent; with warmup_stable_decay, fits the schedule's end to the budget."""

        def on_train_begin(self, args, state, control, **kwargs):
            self.start, self.fits, self.total = time.monotonic(), list(WSD_FITS if wsd else ()), None

        def on_step_end(self, args, state, control, **kwargs):
            steps["done"] = state.global_step
            spent = (time.monotonic() - self.start) / (60 * spec["minutes"])
            if self.fits and spent >= self.fits[0]:
                self.fits = [f for f in self.fits if f > spent]
                self.total = fit_wsd_to_budget(trainer.lr_scheduler, state.global_step, spent)  # (not in kwargs)
                print(f"warmup_stable_decay fitted at {spent:.0%} of the budget, update {state.global_step}: "
                      f"{self.total} updates expected", flush=True)  # fmt: skip
            # past the fitted end the rate is zero: updates would change nothing
            if spent >= 1 or (self.total is not None and state.global_step >= self.total):
                control.should_training_stop = True

    arguments = Seq2SeqTrainingArguments(
        output_dir=spec["output_dir"], per_device_train_batch_size=spec["batch_size"], max_steps=10**6,
        optim="adamw_torch_fused", learning_rate=spec["learning_rate"], adam_beta1=0.9, adam_beta2=0.98,
        adam_epsilon=1e-9, weight_decay=0.0, warmup_steps=PEER_WARMUP_STEPS, lr_scheduler_type=spec["lr_scheduler"],
        # warmup_stable_decay until fitted (fit_wsd_to_budget): constant after the warmup
        lr_scheduler_kwargs={"num_decay_steps": 1, "decay_type": WSD_DECAY_TYPE} if wsd else {},
        label_smoothing_factor=0.1, logging_steps=100, save_strategy="no", report_to=[], use_cpu=True,
        disable_tqdm=True, dataloader_num_workers=0, seed=spec["seed"], train_sampling_strategy="group_by_length",
        bf16=spec["bf16"],
    )  # fmt: skip
    trainer = Seq2SeqTrainer(model=model, args=arguments, train_dataset=train,
                             data_collator=DataCollatorForSeq2Seq(tokenizer, model=model, label_pad_token_id=-100),
                             processing_class=tokenizer, callbacks=[TimeBudget()])  # fmt: skip
    trainer.train()
    model.eval()
    validation = read_pairs(Path(spec["validation"]))[: spec["max_eval_samples"]]
    test = score(model, tokenizer, read_pairs(Path(spec["test"])), src, tgt)
    Path(spec["result"]).write_text(json.dumps({
        "updates": steps["done"], "validation_bleu": score(model, tokenizer, validation, src, tgt)["bleu"], **test,
    }))  # fmt: skip


def read_pairs(path: Path) -> list[dict]:
    return [json.loads(line)["translation"] for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def score(model, tokenizer, pairs: list[dict], src: str, tgt: str) -> dict:
    """BLEU and chrF (sacrebleu defaults, as train.py's evaluation) of beam-4 translations (length penalty 0.6)."""
    import sacrebleu
    import torch

    order = sorted(range(len(pairs)), key=lambda i: len(pairs[i][src]))  # similar lengths per batch: less padding
    hypotheses = [""] * len(pairs)
    with torch.no_grad():
        for start in range(0, len(order), 32):
            chunk = order[start : start + 32]
            batch = tokenizer([pairs[i][src] for i in chunk], return_tensors="pt", padding=True)
            generated = model.generate(**batch, num_beams=4, length_penalty=0.6, max_new_tokens=256)
            for i, text in zip(chunk, tokenizer.batch_decode(generated, skip_special_tokens=True), strict=True):
                hypotheses[i] = text
    references = [[pair[tgt] for pair in pairs]]
    bleu_metric, chrf_metric = sacrebleu.BLEU(), sacrebleu.CHRF()
    bleu, chrf = bleu_metric.corpus_score(hypotheses, references), chrf_metric.corpus_score(hypotheses, references)
    return {"bleu": bleu.score, "chrf": chrf.score, "bleu_signature": str(bleu_metric.get_signature()),
            "chrf_signature": str(chrf_metric.get_signature())}  # fmt: skip


def main(argv=None) -> dict:
    args = parse_args(argv)
    if args.worker:
        trainer_worker(args.worker)
        return {}
    tokenizer_dir, test_file, recipe = prepare(args)
    peers = args.peers
    print(f"train.py ({RECIPE.name}: {', '.join(args.our_recipes)}) vs Seq2SeqTrainer(MarianMTModel) "
          f"({'tuned over ' + str(len(peers)) + ' settings' if args.tune_peer else 'one setting'}) on "
          f"{args.data_dir.name}, {args.minutes:g} training minutes per run, {args.parallel} runs at a time, one "
          f"thread each; seeds {args.seeds}; test pairs: {args.max_test_samples or 'all'}; mixed precision of "
          f"both sides: {both_sides_precision()}, attention kernel: {both_sides_attention()}; "
          f"{common.describe_machine(common.machine_description(1))}", flush=True)  # fmt: skip
    tune_seeds = args.seeds[: args.tune_seeds or len(args.seeds)]
    runs, grid = [], []
    for seed in args.seeds:  # the two sides alternate, so that runs started together are of both sides
        ours = [train_py_run(args, tokenizer_dir, test_file, name, seed) for name in args.our_recipes]
        theirs = [trainer_run(args, tokenizer_dir, test_file, recipe, peer, seed) for peer in peers]
        theirs = theirs if seed in tune_seeds else []
        grid += theirs
        runs += [run for pair in itertools.zip_longest(ours, theirs) for run in pair if run is not None]

    def the_best_at_the_other_seeds() -> list[Run]:
        best = best_peer(grid)
        peer = peers[[trainer_config(p) for p in peers].index(best)]
        print(f"the peer's best at seeds {tune_seeds}: {best}; now at the other seeds", flush=True)
        return [trainer_run(args, tokenizer_dir, test_file, recipe, peer, seed) for seed in args.seeds
                if seed not in tune_seeds]  # fmt: skip

    runs = run_all(runs, args.parallel, gate=grid, then=the_best_at_the_other_seeds)
    for run in runs:
        if run.side == "train.py" and run.config == "small-data":
            print(f"\nFinal-model candidates of train.py small-data, seed {run.seed}:")
            print_candidates(run.output, test_file, args, json.loads((run.output / "results.json").read_text()))
    report = summarise(runs)
    common.write_json_report(args.json, args, runs=[{**vars(run), "command": None, "output": str(run.output),
                                                     "log": str(run.log)} for run in runs], **report)  # fmt: skip
    return report


def best_peer(runs: list[Run]) -> str:
    """The Trainer configuration with the best mean validation BLEU over `runs` (never the test set)."""
    groups: dict[str, list[float]] = {}
    for run in runs:
        groups.setdefault(run.config, []).append(run.result["validation_bleu"])
    return max(groups, key=lambda config: statistics.mean(groups[config]))


def tuning_seeds(runs: list[Run]) -> set[int]:
    """The seeds at which the Trainer side ran its whole grid (every seed unless --tune_seeds)."""
    configs = {run.config for run in runs if run.side == "Trainer"}
    by_seed: dict[int, set[str]] = {}
    for run in runs:
        if run.side == "Trainer":
            by_seed.setdefault(run.seed, set()).add(run.config)
    return {seed for seed, seen in by_seed.items() if seen == configs}


def summarise(runs: list[Run]) -> dict:
    """Every run, the mean and range over seeds of each configuration, the tuned peer (best mean validation BLEU)
    and each of our recipes' margin over it, per seed; the +5 BLEU target is met when the median and most seeds are."""
    print(
        "\n| side | configuration | seed | updates | validation BLEU | test BLEU | test chrF |\n|---|---|---|---|---|---|---|"
    )
    for run in runs:
        r = run.result
        print(f"| {run.side} | {run.config} | {run.seed} | {r['updates']} | {r['validation_bleu']:.2f} | "
              f"{r['bleu']:.2f} | {r['chrf']:.2f} |")  # fmt: skip
    groups: dict[tuple[str, str], list[Run]] = {}
    for run in runs:
        groups.setdefault((run.side, run.config), []).append(run)

    def mean_and_range(values: list[float]) -> str:
        return f"{statistics.mean(values):.2f} ({min(values):.2f}-{max(values):.2f})"

    print(
        "\n| side | configuration | seeds | validation BLEU, mean (range) | test BLEU | test chrF |\n|---|---|---|---|---|---|"
    )
    for (side, config), group in groups.items():
        print(f"| {side} | {config} | {len(group)} | {mean_and_range([r.result['validation_bleu'] for r in group])} | "
              f"{mean_and_range([r.result['bleu'] for r in group])} | "
              f"{mean_and_range([r.result['chrf'] for r in group])} |")  # fmt: skip
    peer_groups = {config: group for (side, config), group in groups.items() if side == "Trainer"}
    tuning = [run for run in runs if run.side == "Trainer" and run.seed in tuning_seeds(runs)]
    best = best_peer(tuning)
    peer_by_seed = {r.seed: r.result["bleu"] for r in peer_groups[best]}
    print(f"\nthe peer's best on validation (seeds {sorted(tuning_seeds(runs))}): {best}"
          + (" (the only setting)" if len(peer_groups) == 1 else ""))  # fmt: skip
    margins = {}
    for (side, config), group in groups.items():
        if side != "train.py":
            continue
        per_seed = [r.result["bleu"] - peer_by_seed[r.seed] for r in group]
        margins[config] = per_seed
        print(f"{common.verdict(per_seed, 5.0)} target train.py {config} >= the peer's best + 5 BLEU: "
              f"{statistics.mean(per_seed):+.1f} mean, per seed "
              f"{', '.join(f'{margin:+.1f}' for margin in per_seed)}")  # fmt: skip
    signatures = {r.result["bleu_signature"] for r in runs}
    print(f"BLEU signature{'s' if len(signatures) > 1 else ''}: {'; '.join(sorted(signatures))}")
    return {"peer_best": best, "margins": margins}


def print_candidates(run_dir: Path, test_file: Path, args, final: dict) -> None:
    """Score each final-model candidate of a train.py run on the test set (beam 4, length penalty 0.6, as train.py's
    evaluation) and print them with their validation scores and the check of the choice."""
    import torch

    from vaswani.inference.translator import Translator
    from vaswani.metrics import load_metric
    from vaswani.training.ema import EMA_WEIGHTS_FILE
    from vaswani.weights import average_into_model

    torch.set_num_threads(2)
    rows = read_pairs(test_file)
    sources, references = [r[args.source_lang] for r in rows], [[r[args.target_lang]] for r in rows]
    translator = Translator(run_dir, device="cpu")
    choice, test = final["final_model"], {}
    print(
        f"| candidate | step | checkpoints | validation {choice['metric']} | test BLEU | test chrF |\n|---|---|---|---|---|---|"
    )
    for candidate in choice["candidates"]:
        folders = [run_dir / "checkpoints" / name for name in candidate["checkpoints"]]
        folders = [f if f.is_dir() else run_dir / "best_checkpoint" / f.name for f in folders]
        if candidate["name"] == "ema":  # --ema_decay: the moving average saved with the last checkpoint
            folders = [folders[-1] / EMA_WEIGHTS_FILE]
        average_into_model(translator.model, folders)
        hypotheses = translator.translate(sources, num_beams=4, length_penalty=0.6)
        bleu = load_metric("sacrebleu").compute(predictions=hypotheses, references=references)["score"]
        chrf = load_metric("chrf").compute(predictions=hypotheses, references=references)["score"]
        test[candidate["name"]] = bleu
        chosen = " (chosen)" if candidate["name"] == choice["chosen"] else ""
        print(f"| {candidate['name']}{chosen} | {candidate['step']} | {len(folders)} | {candidate['score']:.2f} | "
              f"{bleu:.2f} | {chrf:.2f} |")  # fmt: skip
    floor = max(test.values()) - 0.3
    verdict = "MET" if test[choice["chosen"]] >= floor else "MISSED"
    print(
        f"{verdict} final model's test BLEU {test[choice['chosen']]:.2f} >= the best candidate's - 0.3 = {floor:.2f}"
    )


if __name__ == "__main__":
    main()
