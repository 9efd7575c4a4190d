"""Benchmark: how long a training run takes to stop when SIGTERM comes during an evaluation.

A pre-empted machine (a spot instance, a batch system's time limit, Kubernetes) sends SIGTERM and kills the process
about 30 seconds later; what the run has not saved by then is lost. train.py runs the small-data recipe
(configs/small-data.yaml) on a real corpus (default: gettext-en-es) with an evaluation every --eval_steps updates on
--max_eval_samples validation pairs (beam 4); SIGTERM is sent --delay seconds after the training row of update
--eval_steps appears in metrics.jsonl, that is inside the first evaluation. Measured per run: seconds from the signal
to the process's exit, its exit status (143 = 128 + SIGTERM: stopped with a checkpoint), the checkpoints it left,
and whether its log says the evaluation was stopped.

With --baseline REV the code of that commit (`git archive`, nothing of this checkout touched) runs the same, in
alternating order with this checkout, round after round; the ratio of the medians is printed.

    python benchmarks/bench_stop.py --baseline 20c3477 --rounds 2
    python benchmarks/bench_stop.py --json stop.json -- --d_model 128   # more train.py options after --

One thread per run (OMP_NUM_THREADS, as the quality benchmarks), one run at a time.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402

from vaswani.options import non_negative_float, positive_float, positive_int  # noqa: E402

STOPPED_EVALUATION = "Stopped the evaluation at update"  # the log line of a run that stops inside an evaluation


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    argv = list(sys.argv[1:] if argv is None else argv)
    extra = argv[argv.index("--") + 1 :] if "--" in argv else []
    argv = argv[: argv.index("--")] if "--" in argv else argv
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    common.add_corpus_arguments(parser)
    parser.add_argument("--eval_steps", type=positive_int, default=100,
                        help="the signal comes during the evaluation at this update (default: 100)")  # fmt: skip
    parser.add_argument("--max_eval_samples", type=positive_int, default=852,
                        help="validation pairs per evaluation (default: 852, all of gettext-en-es)")  # fmt: skip
    parser.add_argument("--delay", type=non_negative_float, default=1.0,
                        help="seconds into the evaluation at which SIGTERM is sent (default: 1)")  # fmt: skip
    parser.add_argument("--rounds", type=positive_int, default=2, help="runs per side (default: 2)")
    parser.add_argument("--baseline", metavar="REV", help="also run the code of this commit, alternating")
    parser.add_argument(
        "--timeout", type=positive_float, default=1800.0, help="seconds a run may take (default: 1800)"
    )
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    args = parser.parse_args(argv)
    common.check_data_dir(parser, args.data_dir)
    if args.baseline is not None and common.commit_of(args.baseline) is None:
        parser.error(f"--baseline {args.baseline}: no such commit in {common.REPO}")
    args.train_args = extra
    return args


def train_command(args: argparse.Namespace, source: Path, output_dir: Path, cache_dir: Path) -> list[str]:
    """train.py of `source` (this checkout or the baseline's files) with the recipe, the corpus and the evaluation."""
    data = [f"--{split}_file={args.data_dir / f'{split}.jsonl'}" for split in ("train", "validation", "test")]
    return [sys.executable, str(source / "train.py"), "--config", str(source / "configs" / "small-data.yaml"), *data,
            "--source_lang", args.source_lang, "--target_lang", args.target_lang, "--eval_steps", str(args.eval_steps),
            "--max_eval_samples", str(args.max_eval_samples), "--max_train_steps", str(10 * args.eval_steps),
            "--output_dir", str(output_dir), "--cache_dir", str(cache_dir), *args.train_args]  # fmt: skip


def reached_update(metrics: Path, step: int) -> bool:
    """Whether metrics.jsonl holds the training row of update `step` (the evaluation of that update comes next)."""
    if not metrics.exists():
        return False
    for line in metrics.read_text(encoding="utf-8").splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:  # a row being written
            continue
        if row.get("split") == "train" and row.get("step") == step:
            return True
    return False


def stop_once(args: argparse.Namespace, source: Path, workdir: Path, label: str) -> dict:
    """One run of `source`'s train.py, stopped by SIGTERM inside the evaluation at --eval_steps."""
    output_dir, log = workdir / label, workdir / f"{label}.log"
    env = common.worker_env(threads=1)
    env["PYTHONPATH"] = os.pathsep.join([str(source), env["PYTHONPATH"]])  # its code first (bench_serve.py does so)
    command = train_command(args, source, output_dir, workdir / f"cache-{source.name}")
    with open(log, "w", encoding="utf-8") as stream:
        process = subprocess.Popen(command, cwd=workdir, env=env, stdout=stream, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + args.timeout
        try:
            while not reached_update(output_dir / "metrics.jsonl", args.eval_steps):
                if process.poll() is not None:
                    raise RuntimeError(f"{label}: train.py ended (status {process.returncode}) before update "
                                       f"{args.eval_steps}; see {log}")  # fmt: skip
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{label}: no update {args.eval_steps} within --timeout; see {log}")
                time.sleep(0.05)
            time.sleep(args.delay)
            signalled = time.monotonic()
            process.send_signal(signal.SIGTERM)
            status = process.wait(timeout=args.timeout)
            elapsed = time.monotonic() - signalled
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
    checkpoints = output_dir / "checkpoints"
    return {
        "seconds_to_exit": elapsed,
        "status": status,
        "checkpoints": sorted(p.name for p in checkpoints.iterdir() if p.name.startswith("step-"))
        if checkpoints.is_dir() else [],
        "evaluation_stopped": STOPPED_EVALUATION in log.read_text(encoding="utf-8", errors="replace"),
    }  # fmt: skip


def report_rows(runs: dict[str, list[dict]]) -> list[list[str]]:
    """One row per side: seconds from SIGTERM to exit (median, min-max), exit statuses, checkpoints, evaluation
    stopped."""
    rows = []
    for side, results in runs.items():
        times = [r["seconds_to_exit"] for r in results]
        rows.append([
            side, f"{statistics.median(times):.1f} ({min(times):.1f}-{max(times):.1f})",
            " ".join(str(r["status"]) for r in results),
            " ".join(r["checkpoints"][-1] if r["checkpoints"] else "none" for r in results),
            " ".join("yes" if r["evaluation_stopped"] else "no" for r in results),
        ])  # fmt: skip
    return rows


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    print(common.describe_machine(common.machine_description(1)))
    this = f"this checkout ({common.commit_of('HEAD')}{' + changes' if common.uncommitted_changes() else ''})"
    with tempfile.TemporaryDirectory(prefix="bench_stop-") as scratch:
        workdir = Path(scratch)
        sources = {this: common.REPO}
        if args.baseline is not None:
            baseline = common.source_tree(args.baseline, workdir / "baseline")
            sources[f"@ {common.commit_of(args.baseline)}"] = baseline
        runs: dict[str, list[dict]] = {side: [] for side in sources}
        for round_index in range(args.rounds):
            order = list(sources.items())
            if round_index % 2:
                order.reverse()
            for number, (side, source) in enumerate(order):
                label = f"round{round_index}-{number}-{'this' if source == common.REPO else 'baseline'}"
                runs[side].append(stop_once(args, source, workdir, label))
                print(f"{side}, round {round_index + 1}: {runs[side][-1]}", flush=True)
    headers = ["code", "SIGTERM to exit, s", "exit status", "last checkpoint", "evaluation stopped"]
    print(f"SIGTERM {args.delay:g} s into the evaluation at update {args.eval_steps} ({args.max_eval_samples} "
          f"validation pairs), {args.rounds} round(s)")  # fmt: skip
    print(common.format_table(headers, report_rows(runs)))
    medians = {side: statistics.median(r["seconds_to_exit"] for r in results) for side, results in runs.items()}
    if args.baseline is not None:
        base = medians[next(side for side in runs if side != this)]
        print(f"ratio of the medians, this checkout / baseline: {medians[this] / base:.3f}")
    common.write_json_report(args.json, args, runs=runs, medians=medians)
    return 0


if __name__ == "__main__":
    sys.exit(main())
