"""Benchmark: the paper's scale on one machine (issue 30): preparing a corpus of millions of pairs once, training from
it, and what each phase costs in time, memory and disk, at several corpus sizes.

    python benchmarks/bench_scale.py                                   # 0.5M, 2M and 4.5M pairs (hours on 2 cores)
    python benchmarks/bench_scale.py --pairs 500000                    # one size
    python benchmarks/bench_scale.py --pairs 3000 --vocab_size 1000 --tokenizer_sample 3000  # smoke run (a minute)
    python benchmarks/bench_scale.py --pairs 500000,4500000 --memory_only --repeats 5    # the memory slope again

The corpus is synthetic but real text: each line joins 2-3 random pairs of a real corpus (default
../shared/data/gettext-en-es, software messages; the same pairs joined on both sides), ~200 bytes of text per pair
as in WMT14, written as a TSV file. For each size N, every command runs in its own process, with the corpus and
caches in `--output_dir`, and the memory of its process tree sampled every 0.2 s (peak anonymous and file-backed
resident memory, /proc):

1. `vaswani prepare` (shared BPE on `--tokenizer_sample` pairs, tokenization on every core): its phases from its
   log (read and check the text; train the BPE; tokenize; write the folder), MB of text per second, the prepared
   folder's bytes per pair;
2. `vaswani train --prepared_data` with a tiny model: seconds to the first update (its first line in metrics.jsonl);
3. `vaswani train` on the text itself (no prepare): a cold run (reads the text, trains the BPE, tokenizes, caches)
   and a re-run with another `--learning_rate` (reuses the cached BPE and tokens: both are said in the table),
   seconds to the first update each, the tokenized cache's bytes per pair;
4. (the smallest N only) the cold run with two processes (`torchrun --nproc_per_node 2`, without
   ACCELERATE_USE_CPU): a gloo group forms ("2 processes" in the log) and the corpus is tokenized once.

`--memory_only` re-runs only step 2 from the prepared folders an earlier run left in `--output_dir`, `--repeats`
times per size (sizes alternating), and reports the median peak anonymous memory per size and the slope: a single
run's peak moves by tens of MB, which two sizes turn into +-15 bytes per pair.

The targets of issue 30 are printed with each figure: 4.5M pairs prepared in at most 6 minutes; a re-run reaching
its first update in at most 30 s; peak anonymous memory of a tiny-model run at most 1 GB at 4.5M pairs and growing by
at most ~20 bytes per pair; caches at most 150 bytes per pair. Nothing is compared against a peer: the figures are
absolute, for the CPU named in the header. The 36M pairs of WMT14 EN-FR are not run: extrapolate from the slopes.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import common  # benchmarks/, the folder of this script

REPO = Path(__file__).resolve().parent.parent
DEFAULT_DATA = REPO.parent / "shared" / "data" / "gettext-en-es"
DEFAULT_PAIRS = (500_000, 2_000_000, 4_500_000)
TINY_MODEL = ["--d_model", "32", "--encoder_layers", "1", "--decoder_layers", "1", "--encoder_attention_heads", "2",
              "--decoder_attention_heads", "2", "--encoder_ffn_dim", "64", "--decoder_ffn_dim", "64"]  # fmt: skip
# one update, and its final evaluations on 8 held-out pairs (what a run measures ends at its first update: an
# untrained model's translations of 500 validation pairs, each to its length limit, took seconds of every run)
ONE_UPDATE = ["--max_train_steps", "1", "--eval_steps", "0", "--logging_steps", "1", "--max_eval_samples", "8",
              "--final_eval_samples", "8", "--num_beams", "1", "--num_examples", "0", "--report_to", "none",
              "--max_tokens", "4096", "--average_checkpoints", "0", "--checkpoint_minutes", "600"]  # fmt: skip
# the markers of `vaswani prepare`'s phases in its log (the datasets progress bar says "Tokenizing <split>")
PREPARE_MARKERS = {"read": "INFO train: Data:", "bpe": "Training a shared BPE", "tokenizing": "Tokenizing",
                   "tokenized": "Tokenized data:"}  # fmt: skip
PHASES = ("read and check", "train the BPE", "tokenize", "write the folder")


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], allow_abbrev=False)
    parser.add_argument("--pairs", type=_sizes, default=list(DEFAULT_PAIRS),
                        help="comma-separated corpus sizes (default: 500000,2000000,4500000)")  # fmt: skip
    parser.add_argument("--data_dir", type=Path, default=DEFAULT_DATA, help="the real pairs the corpus is made of")
    parser.add_argument("--source_lang", default="en")
    parser.add_argument("--target_lang", default="es")
    parser.add_argument("--vocab_size", type=int, default=8000, help="the shared BPE's size")
    parser.add_argument("--tokenizer_sample", type=int, default=1_000_000, help="vaswani prepare --tokenizer_sample")
    parser.add_argument("--output_dir", type=Path, default=REPO / "runs" / "bench_scale",
                        help="corpus, caches and runs (several GB at 4.5M pairs; emptied per size)")  # fmt: skip
    parser.add_argument("--no_two_processes", action="store_true", help="skip the two-process run")
    parser.add_argument("--memory_only", action="store_true",
                        help="only re-measure the tiny-model run from the prepared folders an earlier run left in "
                             "--output_dir (pairs-N/prepared), --repeats times per size: the memory slope")  # fmt: skip
    parser.add_argument("--repeats", type=int, default=3, help="--memory_only: runs per size, interleaved")
    parser.add_argument("--json", type=Path, help="write the results here")
    args = parser.parse_args(argv)
    for name in ("vocab_size", "tokenizer_sample", "repeats"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} {getattr(args, name)} is not allowed: use a positive integer")
    common.check_data_dir(parser, args.data_dir)
    missing = args.memory_only and [
        n for n in args.pairs if not (args.output_dir / f"pairs-{n}" / "prepared" / "manifest.json").is_file()
    ]
    if missing:
        parser.error(
            f"--memory_only: no prepared folder for {', '.join(f'{n:,}' for n in missing)} pairs in "
            f"{args.output_dir}: run bench_scale.py with these --pairs first (without --memory_only)"
        )
    return args


def _sizes(text: str) -> list[int]:
    try:
        sizes = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: use comma-separated integers, e.g. 500000,2000000") from None
    if not sizes or min(sizes) < 100:
        raise argparse.ArgumentTypeError(f"{text!r}: give sizes of at least 100 pairs")
    return sizes


# ----------------------------------------------------------------------------------------------------------------
# The corpus
# ----------------------------------------------------------------------------------------------------------------
def make_corpus(data_dir: Path, out: Path, pairs: int, src: str, tgt: str, seed: int = 0) -> dict:
    """out/train.tsv with `pairs` lines, each 2-3 random real pairs joined by a space on both sides (tabs and line
    breaks inside a message become spaces); out/validation.tsv and out/test.tsv: 500 real pairs each. Returns the
    sizes."""
    rows = [json.loads(line)["translation"] for line in (data_dir / "train.jsonl").read_text("utf-8").splitlines()
            if line.strip()]  # fmt: skip
    clean = [(" ".join(r[src].split()), " ".join(r[tgt].split())) for r in rows]
    clean = [(s, t) for s, t in clean if s and t]
    rng = random.Random(seed)
    out.mkdir(parents=True, exist_ok=True)
    with (out / "train.tsv").open("w", encoding="utf-8") as train:
        for _ in range(pairs):
            joined = rng.sample(clean, rng.choice((2, 3)))
            train.write(" ".join(s for s, _ in joined) + "\t" + " ".join(t for _, t in joined) + "\n")
    for split in ("validation", "test"):
        held = [json.loads(line)["translation"] for line in
                (data_dir / f"{split}.jsonl").read_text("utf-8").splitlines()[:500] if line.strip()]  # fmt: skip
        (out / f"{split}.tsv").write_text("".join(f"{' '.join(r[src].split())}\t{' '.join(r[tgt].split())}\n"
                                                  for r in held), encoding="utf-8")  # fmt: skip
    text_bytes = (out / "train.tsv").stat().st_size
    return {"pairs": pairs, "text_mb": text_bytes / 1e6, "bytes_per_pair": text_bytes / pairs}


# ----------------------------------------------------------------------------------------------------------------
# Running a command: phases, first update, memory
# ----------------------------------------------------------------------------------------------------------------
@dataclass
class Measured:
    """One command: wall seconds, when each log marker first appeared, seconds to its first update (a train run),
    the peak resident memory of its process tree (MB) and its exit status."""

    seconds: float = 0.0
    markers: dict = field(default_factory=dict)
    first_update_seconds: float | None = None
    peak_anon_mb: float = 0.0
    peak_file_mb: float = 0.0
    returncode: int = 0


def _tree(pid: int) -> list[int]:
    """`pid` and its descendants (Linux: /proc/PID/task/*/children)."""
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        found.append(current)
        for task in Path(f"/proc/{current}/task").glob("*"):
            with contextlib.suppress(OSError):  # ended meanwhile
                todo += [int(child) for child in (task / "children").read_text().split()]
    return found


def _resident_mb(pids: list[int]) -> tuple[float, float]:
    """Summed RssAnon and RssFile of `pids`, MB (processes that ended meanwhile count 0)."""
    anon = file = 0
    for pid in pids:
        try:
            status = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            continue
        anon += int(re.search(r"RssAnon:\s+(\d+)", status).group(1)) if "RssAnon" in status else 0
        file += int(re.search(r"RssFile:\s+(\d+)", status).group(1)) if "RssFile" in status else 0
    return anon / 1024, file / 1024


def run_measured(command: list[str], env: dict, log: Path, markers: dict[str, str] | None = None,
                 metrics: Path | None = None) -> Measured:  # fmt: skip
    """Run `command`, its output to `log`; record when each of `markers` (name -> text) first appears in its output,
    when `metrics` (a metrics.jsonl) first holds a training line, and its process tree's peak memory."""
    measured, markers = Measured(), markers or {}
    start = time.monotonic()
    with log.open("wb") as sink:
        process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, cwd=REPO)

        def read() -> None:
            seen = b""
            for chunk in iter(lambda: process.stdout.read1(65536), b""):
                sink.write(chunk)
                seen = (seen + chunk)[-200_000:]
                text = seen.decode("utf-8", "replace")
                for name, marker in markers.items():
                    if name not in measured.markers and marker in text:
                        measured.markers[name] = time.monotonic() - start

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        while process.poll() is None:
            anon, file = _resident_mb(_tree(process.pid))
            measured.peak_anon_mb, measured.peak_file_mb = (
                max(measured.peak_anon_mb, anon),
                max(measured.peak_file_mb, file),
            )
            if metrics is not None and measured.first_update_seconds is None and _has_trained(metrics):
                measured.first_update_seconds = time.monotonic() - start
            time.sleep(0.2)
        reader.join()
    measured.seconds = time.monotonic() - start
    measured.returncode = process.returncode
    if process.returncode != 0:
        raise SystemExit(f"{' '.join(command[:4])} ... failed (exit {process.returncode}); see {log}:\n"
                         f"{log.read_text('utf-8', 'replace')[-3000:]}")  # fmt: skip
    return measured


def _has_trained(metrics: Path) -> bool:
    """Whether a run's metrics.jsonl holds a training line yet (written at its first logging step)."""
    if not metrics.exists():
        return False
    lines = metrics.read_text().splitlines()
    return any('"split": "train"' in line for line in lines)


def folder_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


# ----------------------------------------------------------------------------------------------------------------
# One corpus size
# ----------------------------------------------------------------------------------------------------------------
def measure_size(args, pairs: int, two_processes: bool) -> dict:
    work = args.output_dir / f"pairs-{pairs}"
    if work.exists():
        shutil.rmtree(work)
    corpus = make_corpus(args.data_dir, work / "corpus", pairs, args.source_lang, args.target_lang)
    env = common.worker_env()
    data = ["--train_file", str(work / "corpus" / "train.tsv"), "--validation_file",
            str(work / "corpus" / "validation.tsv"), "--source_lang", args.source_lang, "--target_lang",
            args.target_lang]  # fmt: skip
    vaswani = [sys.executable, "-m", "vaswani.cli"]
    result = {"corpus": corpus}

    # 1. prepare
    prepare = run_measured([*vaswani, "prepare", *data, "--vocab_size", str(args.vocab_size), "--tokenizer_sample",
                            str(args.tokenizer_sample), "--output_dir", str(work / "prepared")],
                           env, work / "prepare.log", PREPARE_MARKERS)  # fmt: skip
    at = {name: prepare.markers.get(name, float("nan")) for name in PREPARE_MARKERS}  # nan: a marker never seen
    phases = dict(zip(PHASES, (at["read"], at["tokenizing"] - at["bpe"], at["tokenized"] - at["tokenizing"],
                               prepare.seconds - at["tokenized"]), strict=True))  # fmt: skip
    result["prepare"] = {**asdict(prepare), "phases": phases,
                         "text_mb_per_second": corpus["text_mb"] / prepare.seconds,
                         "prepared_bytes_per_pair": folder_bytes(work / "prepared" / "train") / pairs}  # fmt: skip

    # 2. training from the prepared folder
    result["train_prepared"] = asdict(train_from_prepared(args, pairs, work / "from-prepared",
                                                          work / "train-prepared.log"))  # fmt: skip

    # 3. training from the text: cold, then another learning rate
    cache = work / "cache"
    for name, extra in (("train_cold", []), ("train_rerun", ["--learning_rate", "5e-4"])):
        out = work / name
        measured = run_measured(
            [sys.executable, str(REPO / "train.py"), *data, "--vocab_size", str(args.vocab_size), "--cache_dir",
             str(cache), *TINY_MODEL, *ONE_UPDATE, *extra, "--output_dir", str(out)],
            env, work / f"{name}.log", {"reused": "Tokenized data: reused the cache", "bpe": "Tokenizer: reused the BPE"},
            metrics=out / "metrics.jsonl",
        )  # fmt: skip
        result[name] = {**asdict(measured), "reused_cache": "reused" in measured.markers,
                        "reused_tokenizer": "bpe" in measured.markers}  # fmt: skip
    tokenized = cache / "vaswani-tokenized"
    result["tokenized_cache_bytes_per_pair"] = folder_bytes(tokenized) / pairs if tokenized.exists() else None

    # 4. two processes, without ACCELERATE_USE_CPU
    if two_processes:
        out = work / "two-processes"
        two_env = {k: v for k, v in env.items() if k != "ACCELERATE_USE_CPU"}
        measured = run_measured(
            [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", str(REPO / "train.py"), *data,
             "--vocab_size", str(args.vocab_size), "--cache_dir", str(work / "cache-two"), *TINY_MODEL, *ONE_UPDATE,
             "--output_dir", str(out)], two_env, work / "two-processes.log",
            {"gloo": "2 processes", "cached": "Tokenized data: cached in"},
        )  # fmt: skip
        log = (work / "two-processes.log").read_text("utf-8", "replace")
        result["two_processes"] = {**asdict(measured), "group_formed": "gloo" in measured.markers,
                                   "tokenized_caches": len(list((work / "cache-two" / "vaswani-tokenized").iterdir())),
                                   "tokenizing_logs": log.count("Tokenized data: cached in")}  # fmt: skip
    shutil.rmtree(work / "corpus")  # the largest part; the logs stay
    return result


# ----------------------------------------------------------------------------------------------------------------
# Report
# ----------------------------------------------------------------------------------------------------------------
def report(results: dict[int, dict]) -> None:
    sizes = sorted(results)
    rows = []
    for n in sizes:
        r = results[n]
        rows.append([f"{n:,}", f"{r['corpus']['text_mb']:.0f}", f"{r['prepare']['seconds']:.0f}",
                     *(f"{r['prepare']['phases'][phase]:.0f}" for phase in PHASES),
                     f"{r['prepare']['text_mb_per_second']:.2f}", f"{r['prepare']['prepared_bytes_per_pair']:.0f}",
                     f"{r['prepare']['peak_anon_mb']:.0f}"])  # fmt: skip
    print("\nvaswani prepare")
    print(common.format_table(["pairs", "text MB", "seconds", *PHASES, "MB text/s", "bytes/pair", "peak anon MB"],
                              rows))  # fmt: skip
    rows = []
    for n in sizes:
        r = results[n]
        for key, what in (("train_prepared", "--prepared_data"), ("train_cold", "text, cold"),
                          ("train_rerun", "text, another lr")):  # fmt: skip
            m = r[key]
            reused = ["-", "-"] if key == "train_prepared" else [
                "yes" if m.get(flag) else "no" for flag in ("reused_tokenizer", "reused_cache")]  # fmt: skip
            rows.append([f"{n:,}", what, f"{m['first_update_seconds']:.1f}", f"{m['peak_anon_mb']:.0f}",
                         f"{m['peak_file_mb']:.0f}", *reused])  # fmt: skip
    print("\ntraining a tiny model, one update")
    print(common.format_table(["pairs", "from", "s to update 1", "peak anon MB", "peak file MB", "BPE reused",
                               "tokens reused"], rows))  # fmt: skip
    largest = results[sizes[-1]]
    print()
    if sizes[-1] >= 4_500_000:
        seconds = largest["prepare"]["seconds"]
        print(
            f"{'MET' if seconds <= 360 else 'MISSED'} target 4.5M pairs prepared in <= 6 min: {seconds / 60:.1f} min"
        )
    for key in ("train_prepared", "train_rerun"):
        seconds = largest[key]["first_update_seconds"]
        print(f"{'MET' if seconds <= 30 else 'MISSED'} target a re-run ({key}) reaches update 1 in <= 30 s: "
              f"{seconds:.1f} s at {sizes[-1]:,} pairs")  # fmt: skip
    for key in ("prepared_bytes_per_pair",):
        value = largest["prepare"][key]
        print(f"{'MET' if value <= 150 else 'MISSED'} target cache <= 150 bytes/pair (prepared folder): {value:.0f}")
    value = largest["tokenized_cache_bytes_per_pair"]
    if value is not None:
        print(f"{'MET' if value <= 150 else 'MISSED'} target cache <= 150 bytes/pair (train's tokenized cache): "
              f"{value:.0f}")  # fmt: skip
    anon = largest["train_prepared"]["peak_anon_mb"]
    if sizes[-1] >= 4_500_000:
        print(f"{'MET' if anon <= 1024 else 'MISSED'} target tiny-model run at 4.5M pairs <= 1 GB anonymous: "
              f"{anon:.0f} MB")  # fmt: skip
    if len(sizes) > 1:
        first = results[sizes[0]]["train_prepared"]["peak_anon_mb"]
        slope = (anon - first) * 2**20 / (sizes[-1] - sizes[0])
        print(f"{'MET' if slope <= 20 else 'MISSED'} target anonymous memory grows <= ~20 bytes/pair: {slope:.1f} "
              f"bytes/pair from {sizes[0]:,} to {sizes[-1]:,} pairs")  # fmt: skip
    for n in sizes:
        two = results[n].get("two_processes")
        if two:
            print(f"two processes at {n:,} pairs: gloo group formed: {two['group_formed']}; tokenized caches "
                  f"written: {two['tokenized_caches']}; 'cached in' log lines: {two['tokenizing_logs']}")  # fmt: skip


def train_from_prepared(args, pairs: int, out: Path, log: Path) -> Measured:
    """The tiny-model run from the prepared folder of `pairs` pairs, to its first update."""
    prepared = args.output_dir / f"pairs-{pairs}" / "prepared"
    return run_measured([sys.executable, str(REPO / "train.py"), "--prepared_data", str(prepared), *TINY_MODEL,
                         *ONE_UPDATE, "--output_dir", str(out)], common.worker_env(), log,
                        metrics=out / "metrics.jsonl")  # fmt: skip


def memory_slope(args) -> dict:
    """--memory_only: the tiny-model run from each size's prepared folder, `--repeats` rounds (sizes alternating),
    the median peak anonymous memory per size and the slope between the smallest and largest in bytes per pair.
    One run's peak is sampled every 0.2 s and moves by tens of MB from run to run; the median of several is what a
    slope of a few bytes per pair needs."""
    sizes = sorted(args.pairs)
    peaks: dict[int, list[float]] = {n: [] for n in sizes}
    work = args.output_dir / "memory"
    work.mkdir(parents=True, exist_ok=True)
    for round_index in range(args.repeats):
        for n in sizes if round_index % 2 == 0 else reversed(sizes):
            out = work / f"pairs-{n}-{round_index}"
            if out.exists():
                shutil.rmtree(out)
            measured = train_from_prepared(args, n, out, work / f"pairs-{n}-{round_index}.log")
            if measured.returncode != 0:
                raise RuntimeError(f"the run from {n:,} prepared pairs failed: see {work}/pairs-{n}-{round_index}.log")
            peaks[n].append(measured.peak_anon_mb)
            print(f"round {round_index}: {n:,} pairs: {measured.peak_anon_mb:.0f} MB anonymous", flush=True)
    medians = {n: statistics.median(values) for n, values in peaks.items()}
    rows = [[f"{n:,}", f"{medians[n]:.0f}", f"{min(peaks[n]):.0f}-{max(peaks[n]):.0f}"] for n in sizes]
    print("\ntraining a tiny model from the prepared folder, one update")
    print(common.format_table(["pairs", "median peak anon MB", "runs"], rows))
    result = {"peaks_mb": {str(n): v for n, v in peaks.items()}, "median_mb": {str(n): v for n, v in medians.items()}}
    if len(sizes) > 1:
        slope = (medians[sizes[-1]] - medians[sizes[0]]) * 2**20 / (sizes[-1] - sizes[0])
        result["slope_bytes_per_pair"] = slope
        print(f"{'MET' if slope <= 20 else 'MISSED'} target anonymous memory grows <= ~20 bytes/pair: {slope:.1f} "
              f"bytes/pair from {sizes[0]:,} to {sizes[-1]:,} pairs (medians of {args.repeats} runs)")  # fmt: skip
    if sizes[-1] >= 4_500_000:
        print(f"{'MET' if medians[sizes[-1]] <= 1024 else 'MISSED'} target tiny-model run at 4.5M pairs <= 1 GB "
              f"anonymous: {medians[sizes[-1]]:.0f} MB (median)")  # fmt: skip
    return result


def main(argv=None) -> dict:
    args = parse_args(argv)
    if args.memory_only:
        print(f"bench_scale --memory_only: sizes {args.pairs}, {args.repeats} runs each; "
              f"{common.describe_machine(common.machine_description(os.cpu_count() or 1))}; "
              f"commit {common.source_version(REPO / 'vaswani')}", flush=True)  # fmt: skip
        result = memory_slope(args)
        common.write_json_report(args.json, args, results=result)
        return result
    print(f"bench_scale: corpus from {args.data_dir.name}, sizes {args.pairs}, vocab {args.vocab_size}, BPE sample "
          f"{args.tokenizer_sample}; {common.describe_machine(common.machine_description(os.cpu_count() or 1))}; "
          f"commit {common.source_version(REPO / 'vaswani')}", flush=True)  # fmt: skip
    results = {}
    for index, pairs in enumerate(sorted(args.pairs)):
        print(f"{pairs:,} pairs ...", flush=True)
        results[pairs] = measure_size(args, pairs, two_processes=index == 0 and not args.no_two_processes)
    report(results)
    common.write_json_report(args.json, args, results={str(n): r for n, r in results.items()})
    return results


if __name__ == "__main__":
    main()
