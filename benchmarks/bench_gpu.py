"""Benchmark: train.py's training loop on one GPU, bf16, the paper's 25k-token batches: tokens/s and model FLOPs
utilization (MFU) for the base and big presets.

    python benchmarks/bench_gpu.py                                   # base and big, bf16, --max_tokens 25000
    python benchmarks/bench_gpu.py --presets big --steps 60 --peak_tflops 989 --repeats 3
    python benchmarks/bench_gpu.py --device cpu --presets tiny --max_tokens 600 --steps 4 --warmup_steps 1 \\
        --mixed_precision no --peak_tflops 1 --repeats 1   # CPU smoke run (the test runs 2)
    python benchmarks/bench_gpu.py --variant after= \
        --variant "before=--prefetch_updates 0 --attn_implementation eager --tf32 false"   # input pipeline A/B

Each preset runs train.py itself (a subprocess, `--max_tokens` per batch, `--mixed_precision bf16`, no evaluation or
checkpoints inside the timed window) on a synthetic corpus with the length spread of real data (the corpus of
benchmarks/bench_train.py). Throughput is train.py's own `target_tokens_per_second` after the first --warmup_steps
updates (median of its logging windows).

Each preset runs `--repeats` times (5), the presets interleaved (base, big, big, base, ...), each run a fresh
train.py process; the median of the runs is reported with its range, the CPU and its flags in the header, and the
run-to-run noise (every run of a preset against the median of its runs, the A/A of a benchmark without a peer) is
printed next to it, so that a difference between two GPU runs can be told from noise.

MFU = model FLOP/s / peak FLOP/s. Model FLOPs are counted from the architecture, not measured, for the real (not
padded) tokens, training = 3 x forward (the backward pass costs twice the forward), 2 FLOPs per multiply-add
(`training_flops`): per encoder layer and source token 4 d^2 (Q, K, V, O) + 2 d d_ff (FFN) + 2 S d (scores and
weighted sum over the S source positions); per decoder layer and target token 4 d^2 + 2 T d (self-attention,
counted over all T positions as the kernels compute them) + 2 d^2 + 2 S d (cross-attention queries, output, scores)
+ 2 d d_ff, plus 2 d^2 per source token (cross-attention keys and values); and d V per target token for the output
projection. tests/benchmarks/test_bench_gpu.py checks this count against torch's FLOP counter on a tiny model. The peak is
looked up from the GPU's name (dense bf16 tensor-core peak) or given with --peak_tflops.

On a CPU (issue 41's CPU side): `--presets small-data` is configs/small-data.yaml's model and recipe, `--corpus DIR`
trains on a real corpus (DIR/train.jsonl and validation.jsonl, languages `--source_lang` / `--target_lang`) instead
of the synthetic one, `--threads N` gives train.py N threads, and without --peak_tflops the peak is measured: a
2048 x 2048 matrix product on those threads in the run's precision (bf16 or float32), so the MFU column is the
step's share of the thread's matmul peak:

    python benchmarks/bench_gpu.py --device cpu --presets small-data --corpus ../shared/data/gettext-en-es \
        --source_lang en --target_lang es --vocab_size 8000 --max_tokens 1024 --threads 1 --steps 120 \
        --warmup_steps 20 --repeats 5 --variant base= --variant A2= --variant fused="--fused_loss true"

`--variant LABEL=ARGS` (repeatable) runs every preset once per variant with ARGS added to train.py's command line,
all runs interleaved (variant and preset alternate within each round), and prints each variant's median against the
first variant's for each preset: e.g. the input pipeline of issue 30 (the default: batches prepared in a background
thread, SDPA attention, TF32) against `--prefetch_updates 0 --attn_implementation eager --tf32 false`.

`--baseline REV` runs every variant once more with the code of commit REV (`git archive`, train.py from that tree),
interleaved with this checkout's runs and listed first, so that each variant's ratio reads "this code / the code of
REV"; REV may also be a folder holding a source tree (`git archive REV | tar -x -C DIR`, made beforehand where the
machine that measures has no history, as the device tool's copy of the working tree has none):

    python benchmarks/bench_gpu.py --presets base big --steps 60 --warmup_steps 20 --repeats 1 --baseline 396140d

For a GPU's scarce minutes (benchmarks/gpu_step_ab.sh): `--keep_going` reports a run that fails and goes on with the
others (exit status 1 at the end), leaving that variant and preset out of the later rounds (a refused option, an
out-of-memory or a compilation past the time left would fail again), `--run_timeout SECONDS` stops a run that takes too long (a failure), `--logs DIR`
keeps every run's train.py log. Each row records the graphs a compiled run made (`compiled_graphs`) and train.py's own
line on its step options.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_train  # noqa: E402  (the synthetic corpus)
import common  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
TINY = {"d_model": 32, "encoder_layers": 2, "decoder_layers": 2, "encoder_attention_heads": 2,
        "decoder_attention_heads": 2, "encoder_ffn_dim": 64, "decoder_ffn_dim": 64}  # fmt: skip
# Dense bf16 tensor-core peaks (TFLOP/s, no sparsity), from the vendors' data sheets; matched on the device name.
PEAK_BF16_TFLOPS = {"H200": 989.0, "H100 SXM": 989.0, "H100 PCIe": 756.0, "H100": 989.0, "A100": 312.0,
                    "L40S": 362.0, "A10G": 70.0, "L4": 121.0}  # fmt: skip


def training_flops(config, source_length: int, target_length: int) -> int:
    """FLOPs of one training step (forward + backward) on ONE sentence pair of these lengths (see module docstring).
    `config` needs d_model, the layer counts, FFN widths and vocab_size (a VaswaniConfig)."""
    d, S, T, V = config.d_model, source_length, target_length, config.vocab_size
    encoder = config.encoder_layers * S * (4 * d * d + 2 * d * config.encoder_ffn_dim + 2 * S * d)
    decoder = config.decoder_layers * (
        T * (4 * d * d + 2 * T * d + 2 * d * d + 2 * S * d + 2 * d * config.decoder_ffn_dim) + S * 2 * d * d
    )
    output = T * d * V
    return 3 * 2 * (encoder + decoder + output)


RECIPES = {"small-data": REPO / "configs" / "small-data.yaml"}  # presets that are a recipe file of configs/


def model_config(preset: str, vocab_size: int):
    from modeling_vaswani import VaswaniConfig
    from modeling_vaswani.configuration_vaswani import MODEL_OPTIONS

    if preset == "tiny":
        return VaswaniConfig(vocab_size=vocab_size, **TINY)
    if preset in RECIPES:
        import yaml

        recipe = yaml.safe_load(RECIPES[preset].read_text())
        return VaswaniConfig(vocab_size=vocab_size, **{k: v for k, v in recipe.items() if k in MODEL_OPTIONS})
    return VaswaniConfig.from_preset(preset, vocab_size=vocab_size)


def measured_cpu_peak(threads: int | None, precision: str) -> float:
    """TFLOP/s of a 2048 x 2048 matrix product on `threads` CPU threads in bf16 (or float32 for precision "no"):
    the best of 10 timed products after 3 untimed ones, in a subprocess so that the thread count applies."""
    code = (
        "import time, torch\n"
        f"dtype = torch.{'bfloat16' if precision == 'bf16' else 'float32'}\n"
        "a, b = torch.randn(2048, 2048, dtype=dtype), torch.randn(2048, 2048, dtype=dtype)\n"
        "[a @ b for _ in range(3)]\n"
        "best = min((lambda t: (a @ b, time.perf_counter() - t)[1])(time.perf_counter()) for _ in range(10))\n"
        "print(2 * 2048**3 / best / 1e12)\n"
    )  # fmt: skip
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                            env=common.worker_env(threads))  # fmt: skip
    return float(result.stdout.strip())


def peak_tflops(device: str, given: float | None, threads: int | None = None,
                precision: str = "bf16") -> tuple[float | None, str]:  # fmt: skip
    if given is not None:
        return given, "--peak_tflops"
    if device != "cuda":
        peak = measured_cpu_peak(threads, precision)
        dtype = "bf16" if precision == "bf16" else "float32"
        return peak, f"CPU: measured {dtype} 2048x2048 matmul peak on {threads or 'all'} thread(s)"
    import torch

    name = torch.cuda.get_device_name()
    for key, value in PEAK_BF16_TFLOPS.items():
        if key in name:
            return value, f"{name}: dense bf16 peak"
    return None, f"{name}: unknown peak (pass --peak_tflops)"


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], allow_abbrev=False)
    parser.add_argument("--presets", nargs="+", choices=["tiny", "base", "big", *RECIPES], default=["base", "big"])
    parser.add_argument("--corpus", type=Path, help="a folder with train.jsonl and validation.jsonl (default: the "
                        "synthetic corpus)")  # fmt: skip
    parser.add_argument("--source_lang", default="en", help="with --corpus: the source language (default: en)")
    parser.add_argument("--target_lang", default="de", help="with --corpus: the target language (default: de)")
    parser.add_argument("--threads", type=int, default=None, help="CPU threads of train.py (default: its own)")
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    parser.add_argument("--mixed_precision", choices=["no", "bf16"], default="bf16")
    parser.add_argument("--max_tokens", type=int, default=25000, help="tokens per batch (paper: ~25k)")
    parser.add_argument("--steps", type=int, default=50, help="optimizer updates per preset")
    parser.add_argument("--warmup_steps", type=int, default=10, help="first updates left out of the timing")
    parser.add_argument("--pairs", type=int, default=60000, help="synthetic training pairs")
    parser.add_argument("--vocab_size", type=int, default=37000, help="BPE vocabulary (paper: ~37k shared)")
    parser.add_argument("--peak_tflops", type=float, default=None, help="the device's peak, for MFU")
    parser.add_argument("--repeats", type=int, default=5,
                        help="train.py runs per preset, the presets interleaved; the median is reported")  # fmt: skip
    parser.add_argument("--variant", action="append", default=None, metavar="LABEL=ARGS",
                        help="train.py arguments added for one variant, e.g. 'eager=--attn_implementation eager'; "
                             "repeat for several (the first is the baseline of the ratios); default: one variant, "
                             "train.py's defaults")  # fmt: skip
    parser.add_argument("--json", type=Path, help="write the results here")
    parser.add_argument("--keep_going", action="store_true",
                        help="a train.py run that fails or times out is reported and left out, and the other runs go "
                             "on (exit status 1 at the end); default: the first failure stops the benchmark")  # fmt: skip
    parser.add_argument("--run_timeout", type=float, default=None, metavar="SECONDS",
                        help="stop a train.py run after this many seconds (a failure; default: no limit)")  # fmt: skip
    parser.add_argument("--baseline", metavar="REV", default=None,
                        help="also run every variant with the code of commit REV (or of the source tree in folder "
                             "REV), interleaved, listed first (default: this checkout's code only)")  # fmt: skip
    parser.add_argument("--logs", type=Path, default=None, metavar="DIR",
                        help="save each train.py run's output (its log) as DIR/run-VARIANT-PRESET-ROUND.log (DIR: a "
                             "new or empty folder)")  # fmt: skip
    args = parser.parse_args(argv)
    if args.steps <= args.warmup_steps:
        parser.error("--steps must exceed --warmup_steps")
    args.variants = {}
    for spec in args.variant or ["default="]:
        label, sep, extra = spec.partition("=")
        if not sep or not label:
            parser.error(f"--variant {spec!r} is not LABEL=ARGS: give a name, '=' and train.py's arguments")
        if label in args.variants:
            parser.error(f"--variant {label!r} is given twice: give each variant its own name")
        args.variants[label] = shlex.split(extra)
    if args.repeats < 1:
        parser.error(f"--repeats {args.repeats} is not allowed: use 1 or more")
    if args.corpus is not None:  # train.py runs in a temporary folder: an absolute path
        if not all((args.corpus / f"{split}.jsonl").is_file() for split in ("train", "validation")):
            parser.error(f"--corpus {args.corpus} needs train.jsonl and validation.jsonl in it")
        args.corpus = args.corpus.resolve()
    if args.threads is not None and args.threads < 1:
        parser.error(f"--threads {args.threads} is not allowed: use 1 or more")
    if args.run_timeout is not None and args.run_timeout <= 0:
        parser.error(f"--run_timeout {args.run_timeout:g} is not allowed: give seconds above 0")
    if args.baseline is not None:
        if (Path(args.baseline) / "train.py").is_file():
            args.baseline_tree, args.baseline_label = Path(args.baseline).resolve(), Path(args.baseline).name
        elif (commit := common.commit_of(args.baseline)) is not None:
            args.baseline_tree, args.baseline_label = None, commit
        else:
            parser.error(f"--baseline {args.baseline}: neither a commit of {REPO} nor a folder with train.py in it")
    if args.logs is not None and args.logs.exists() and (not args.logs.is_dir() or any(args.logs.iterdir())):
        parser.error(f"--logs {args.logs} is a file or a folder with files in it: give a new or empty folder (the "
                     "logs would replace files of the same names)")  # fmt: skip
    return args


def corpus_flops_per_target_token(tokenizer, dataset, config, source_lang: str = "en",
                                  target_lang: str = "de") -> float:  # fmt: skip
    """Model training FLOPs per real target token, averaged over the corpus (the pairs' own lengths)."""
    encoded = tokenizer(
        [t[source_lang] for t in dataset["translation"]],
        text_target=[t[target_lang] for t in dataset["translation"]],
    )
    lengths = [(len(s), len(t)) for s, t in zip(encoded["input_ids"], encoded["labels"], strict=True)]
    return sum(training_flops(config, s, t) for s, t in lengths) / sum(t for _, t in lengths)


class RunFailed(RuntimeError):
    """A train.py run that exited with an error or ran past --run_timeout."""


def run_preset(
    args,
    preset: str,
    paths: dict,
    folder: Path,
    vocab_size: int,
    round_index: int = 0,
    variant: str = "default",
    source: Path = REPO,
    label: str | None = None,
) -> dict:
    """One train.py run of `variant` on `preset` with the code in `source` (this checkout, or a --baseline tree);
    `label` names it in the logs and the report (default: the variant)."""
    config = model_config(preset, vocab_size)
    label = label or variant
    name = f"run-{label.replace(' @ ', '@')}-{preset}-{round_index}"
    out = folder / name
    model = [f"--{k}={v}" for k, v in TINY.items()] if preset == "tiny" else ["--model_preset", preset]
    if preset in RECIPES:  # the recipe's model and optimizer settings; the rest as every preset runs
        model = ["--config", str(RECIPES[preset]), "--ema_decay", "none", "--eval_steps", "0"]
    logging_steps = max(1, (args.steps - args.warmup_steps) // 5)
    cmd = [
        sys.executable, str(source / "train.py"), "--train_file", str(paths["train"]),
        "--validation_file", str(paths["validation"]), "--tokenizer", str(folder / "tokenizer"),
        *model, "--max_tokens", str(args.max_tokens),
        "--max_source_length", "256", "--max_target_length", "256", "--max_train_steps", str(args.steps),
        "--warmup_steps", "4000", "--logging_steps", str(logging_steps), "--eval_steps", "0",
        "--average_checkpoints", "0", "--checkpoint_minutes", "100000", "--max_eval_samples", "2",
        "--final_eval_samples", "2", "--num_beams", "1",
        "--mixed_precision", args.mixed_precision, "--report_to", "none", "--output_dir", str(out),
        "--source_lang", args.source_lang, "--target_lang", args.target_lang, *args.variants[variant],
    ]  # fmt: skip
    env = common.worker_env(args.threads)
    if source != REPO:  # the baseline's packages before this checkout's
        env["PYTHONPATH"] = os.pathsep.join([str(source), env["PYTHONPATH"]])
    if args.device == "cpu":
        env["ACCELERATE_USE_CPU"] = "1"
    try:
        result = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=folder, timeout=args.run_timeout)
        output, failure = result.stdout + result.stderr, result.returncode != 0 and f"exit status {result.returncode}"
    except subprocess.TimeoutExpired as timeout:
        output = "".join(part.decode(errors="replace") if isinstance(part, bytes) else (part or "")
                         for part in (timeout.stdout, timeout.stderr))  # fmt: skip
        failure = f"stopped after --run_timeout {args.run_timeout:g} s"
    if args.logs is not None:
        args.logs.mkdir(parents=True, exist_ok=True)
        (args.logs / f"{name}.log").write_text(output)
    if failure:
        raise RunFailed(f"train.py ({label}, {preset}) failed ({failure}):\n{output[-3000:]}")
    windows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    train = [w for w in windows if w["split"] == "train"]
    rates = [w["target_tokens_per_second"] for w in train if w["step"] > args.warmup_steps]
    return {"config": config, "target_tokens_per_second": statistics.median(rates), "windows": rates,
            "compiled_graphs": train[-1].get("compiled_graphs") if train else None,
            "step_options": step_options(output), "train_py": str(source / "train.py")}  # fmt: skip


def step_options(log: str) -> str | None:
    """What train.py's log says of the step's speed options ("Training step: ..."), or None."""
    lines = [line.split("Training step: ", 1)[1] for line in log.splitlines() if "Training step: " in line]
    return lines[0].strip() if lines else None


def run_to_run_noise(preset: str, rates: list[float]) -> str:
    """The A/A line of a benchmark without a peer: how far single runs of one preset are from their median."""
    if len(rates) < 2:
        return f"{preset}: run-to-run noise not measured (one run; use --repeats 2 or more)"
    ratios = common.Summary.of([rate / statistics.median(rates) for rate in rates])
    worst = max(abs(ratios.low - 1), abs(ratios.high - 1))
    return (f"{preset}: run-to-run noise (A/A, each run / the median of {len(rates)}): {ratios.low:.3f}-"
            f"{ratios.high:.3f}, a single run can be {worst:.0%} off")  # fmt: skip


def main(argv=None) -> list[dict]:
    args = parse_args(argv)
    peak, peak_source = peak_tflops(args.device, args.peak_tflops, args.threads, args.mixed_precision)
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench_gpu_") as tmp:
        folder = Path(tmp)
        if args.corpus is None:
            paths = bench_train.make_corpus(folder, args.pairs, seed=0)
        else:
            paths = {split: args.corpus / f"{split}.jsonl" for split in ("train", "validation")}
        tokenizer, dataset = bench_train.prepare_tokenizer(paths, folder, args.vocab_size, args.source_lang,
                                                           args.target_lang)  # fmt: skip
        print(common.describe_machine(common.machine_description(threads=args.threads or 1)))
        print(f"train.py on {args.device} ({peak_source}), {args.mixed_precision}, --max_tokens {args.max_tokens}, "
              f"{args.steps} updates per run (first {args.warmup_steps} not timed), {args.repeats} runs per preset, "
              f"interleaved, vocab {len(tokenizer)}")  # fmt: skip
        for variant, extra in args.variants.items():
            print(f"variant {variant}: train.py {shlex.join(extra) or '(its defaults)'}")
        sources = [("", REPO)]
        if args.baseline is not None:  # listed first: the ratios read "this code / the baseline's"
            tree = args.baseline_tree or common.source_tree(args.baseline, folder / "baseline")
            sources.insert(0, (f" @ {args.baseline_label}", tree))
            print(f"baseline: every variant also with the code of {args.baseline} ({tree})")
        # (label, variant, preset, code): the label names a run of the baseline's code "VARIANT @ REV"
        cells = [(variant + suffix, variant, preset, source) for suffix, source in sources
                 for variant in args.variants for preset in args.presets]  # fmt: skip
        runs = {(label, preset): [] for label, _, preset, _ in cells}
        variant_of = {label: variant for label, variant, _, _ in cells}
        failures, failed = [], set()  # failed: the (label, preset) cells not run again
        for round_index in range(args.repeats):  # alternate the order, as common.interleave does
            for label, variant, preset, source in cells if round_index % 2 == 0 else reversed(cells):
                if (label, preset) in failed:
                    continue
                try:
                    run = run_preset(args, preset, paths, folder, len(tokenizer), round_index, variant, source, label)
                except RunFailed as error:
                    if not args.keep_going:
                        raise
                    failures.append(str(error).splitlines()[0])
                    failed.add((label, preset))
                    print(f"round {round_index}: {label} {preset}: FAILED, left out of this and the later rounds "
                          f"(--keep_going)\n{error}", flush=True)  # fmt: skip
                    continue
                runs[(label, preset)].append(run)
                compiled = "" if run["compiled_graphs"] is None else f", {run['compiled_graphs']} graphs compiled"
                print(f"round {round_index}: {label} {preset}: {run['target_tokens_per_second']:,.0f} target "
                      f"tokens/s{compiled}", flush=True)  # fmt: skip
        flops_per_token = {}
        for (variant, preset), preset_runs in runs.items():
            if not preset_runs:
                continue
            rates = common.Summary.of([run["target_tokens_per_second"] for run in preset_runs])
            if preset not in flops_per_token:
                flops_per_token[preset] = corpus_flops_per_target_token(
                    tokenizer, dataset, preset_runs[0]["config"], args.source_lang, args.target_lang
                )
            per_token = flops_per_token[preset]
            flops = rates.median * per_token
            rows.append({
                "variant": variant, "train_args": args.variants[variant_of[variant]],
                "train_py": preset_runs[0]["train_py"],
                "preset": preset, "target_tokens_per_second": rates.median, "runs": rates.to_dict(),
                "windows": [run["windows"] for run in preset_runs], "flops_per_target_token": per_token,
                "compiled_graphs": [run["compiled_graphs"] for run in preset_runs],
                "step_options": preset_runs[0]["step_options"],
                "model_tflops": flops / 1e12, "mfu": flops / (peak * 1e12) if peak else None,
            })  # fmt: skip
    several = len(args.variants) > 1 or args.baseline is not None
    table = common.format_table(
        ["variant"] * several + ["preset", "target tokens/s (median)", "runs", "GFLOPs / target token",
                                 "model TFLOP/s", "MFU"],
        [[r["variant"]] * several + [
            r["preset"], f"{r['target_tokens_per_second']:,.0f}", f"{r['runs']['low']:,.0f}-{r['runs']['high']:,.0f}",
            f"{r['flops_per_target_token'] / 1e9:.2f}", f"{r['model_tflops']:.3g}",
            f"{100 * r['mfu']:.1f}%" if r["mfu"] is not None else "n/a"] for r in rows],
    )  # fmt: skip
    print(table)
    for row in rows:
        print(run_to_run_noise(f"{row['variant']} {row['preset']}" if several else row["preset"],
                               row["runs"]["values"]))  # fmt: skip
    for row in rows:
        if row["step_options"]:
            print(f"{row['variant']} {row['preset']}: train.py's step: {row['step_options']}")
    for line in variant_ratios(rows):
        print(line)
    for row in rows:
        if row["preset"] == "big" and row["mfu"] is not None:
            name = f" ({row['variant']})" if several else ""
            print(
                f"{'MET' if row['mfu'] >= 0.4 else 'MISSED'} target MFU >= 40% for big{name}: {100 * row['mfu']:.1f}%"
            )
    for failure in failures:
        print(f"FAILED: {failure}")
    common.write_json_report(args.json, args, rows=rows, failures=failures)
    if failures:
        raise SystemExit(1)
    return rows


def variant_ratios(rows: list[dict]) -> list[str]:
    """Each variant's median tokens/s over the first variant's, per preset (with the range of run-by-run ratios)."""
    lines = []
    baseline = {}
    for row in rows:
        baseline.setdefault(row["preset"], row)
    for row in rows:
        base = baseline[row["preset"]]
        if row is base:
            continue
        ratio = row["target_tokens_per_second"] / base["target_tokens_per_second"]
        low = row["runs"]["low"] / base["runs"]["high"]
        high = row["runs"]["high"] / base["runs"]["low"]
        lines.append(f"{row['preset']}: {row['variant']} / {base['variant']} = {ratio:.3f}x tokens/s "
                     f"(run ranges allow {low:.3f}-{high:.3f})")  # fmt: skip
    return lines


if __name__ == "__main__":
    main()
