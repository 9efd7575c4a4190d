"""Benchmark: `vaswani distill` against issue 43's targets, and the sweep that chooses configs/student.yaml.

    python benchmarks/bench_distill.py             # the comparison: seeds 0 and 1, 20 minutes per run (~1.5 h, 2 cores)
    python benchmarks/bench_distill.py --sweep     # the student sweep: <= 6 points at 10 minutes, seed 0, then the
                                                   # best two at seed 1 too (~1 h after the comparison, which it reuses)
    python benchmarks/bench_distill.py --minutes 0.2 --sweep_minutes 0.1 --train_pairs 2000 --max_validation_pairs 40 \\
        --max_test_samples 40 --seeds 0            # a smoke run of the comparison (add --sweep for the sweep's)
    python benchmarks/bench_distill.py --costs --max_test_samples 300   # the shapes' decoding costs, untrained (~2 min)
    python benchmarks/bench_distill.py --student cut   # the comparison with a student cut from the teacher (~1 h after
                                                       # the comparison, whose teachers it reuses)
    python benchmarks/gettext_monolingual.py --output runs/gettext-monolingual.en    # in-domain text, no references
    python benchmarks/bench_distill.py --student cut --monolingual_file runs/gettext-monolingual.en   # ~30 min after
                                                       # the cut comparison: the distilled students again, with it

The comparison, at each seed S (gettext-en-es by default, `--parallel` runs at a time, one thread each):

- the teacher: `train.py --config configs/small-data.yaml --max_train_minutes M --seed S`;
- the distilled student: `vaswani distill --teacher TEACHER --config configs/student.yaml --max_train_minutes M
  --seed S` (the teacher translates every training source through its CTranslate2 int8 export, beam 4, length penalty
  0.6; the student trains M minutes on the translations; int8 export and distill_report.json);
- the same student recipe on the original pairs: `train.py --config configs/student.yaml --max_train_minutes M
  --seed S`, exported to int8 as well.

With `--student cut` the student is the teacher itself cut to a student's shape ("shrink and fine-tune", Shleifer &
Rush 2020): `vaswani prune --model TEACHER CUT_OPTIONS` (its first decoder layer and the first 4000 tokens of its
BPE), trained by the same two runs with configs/student-cut.yaml and `--model CUT --tokenizer CUT` (distill-cut-sS,
baseline-cut-sS): the distilled pairs against the original ones from the same start.

With `--monolingual_file PATH` the distilled student's `vaswani distill` also gets `--monolingual_file PATH` (the
teacher translates that text too, after the training sources) and its runs are named distill[-cut]-mono-sS; the
teachers and the original-pairs students are the same runs as without it (reused).

Then, one model at a time on a quiet machine, the three int8 exports decode the test file with the same settings
(beam 4, length penalty 0.6, `--max_tokens`, one thread, one CTranslate2 worker), `--rounds` times alternating
(`common.interleave`, after a warm-up), and sacrebleu scores them. Printed per seed, with MET/MISSED: the student's
time / the teacher's (per round; target <= 0.5), student BLEU - teacher BLEU (target >= -1), and distilled BLEU -
original-pairs BLEU (target >= +1); both students are chosen on validation against the original references.

The sweep (`--sweep`): the student points of `SWEEP_POINTS` (or `--sweep_points`), each `train.py --config
configs/student.yaml POINT` on the distilled training file of the seed-0 teacher (the one `vaswani distill` trains
on, made with `--stage translate` unless the comparison left it), `--sweep_minutes` each, seed 0; each exported to
int8 and timed against the teacher's export on the test file. The best two on validation BLEU among the points at
most half the teacher's time (the others are printed, never chosen) are trained again at seed 1, and the point with
the best mean validation BLEU of the two seeds is the recipe to write into configs/student.yaml. The test set never
chooses.

A finished run is reused when its command and the recipes it names are the same (`NAME.command.json` beside it: an
edited configs/student.yaml makes its runs new): the sweep reuses the comparison's seed-0 teacher and distilled data,
the comparison the sweep's seed-0 teacher; `--fresh` runs everything again. Every run's log is `NAME.log` in
`--output_dir`; `--json FILE` writes the figures.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
TEACHER_RECIPE = REPO / "configs" / "small-data.yaml"
STUDENT_RECIPE = REPO / "configs" / "student.yaml"
CUT_RECIPE = REPO / "configs" / "student-cut.yaml"  # --student cut: training options only, the shape is the cut's
CUT_OPTIONS = ["--decoder_layers_to_keep", "0", "--vocab_size", "4000"]  # `vaswani prune`'s, for --student cut
# The student points the sweep tries (options over configs/student.yaml); see the file for the decoding costs.
SWEEP_POINTS = {
    "recipe": [],
    "enc4": ["--encoder_layers", "4"],
    "bpe4k": ["--vocab_size", "4000"],
    "d256-bpe4k": ["--d_model", "256", "--encoder_ffn_dim", "1024", "--decoder_ffn_dim", "1024", "--vocab_size", "4000"],
    "lr2e-3": ["--learning_rate", "2e-3"],
    "d128": ["--d_model", "128", "--encoder_ffn_dim", "512", "--decoder_ffn_dim", "512"],
}  # fmt: skip
# Shapes `--costs` times besides the sweep's, to show why the recipe is narrower and has one decoder layer.
COST_ONLY_POINTS = {
    "d256": ["--d_model", "256", "--encoder_ffn_dim", "1024", "--decoder_ffn_dim", "1024"],
    "dec2": ["--decoder_layers", "2"],
}  # fmt: skip
TIME_TARGET, TEACHER_GAP_TARGET, BASELINE_GAP_TARGET = 0.5, -1.0, 1.0


def _seeds(text: str) -> list[int]:
    try:
        seeds = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: use comma-separated integers, e.g. 0,1") from None
    if not seeds or len(set(seeds)) != len(seeds):
        raise argparse.ArgumentTypeError(f"{text!r}: give one or more seeds, each once")
    return seeds


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], allow_abbrev=False)
    common.add_corpus_arguments(parser)
    parser.add_argument("--minutes", type=float, default=20.0, help="training budget of each comparison run")
    parser.add_argument("--seeds", type=_seeds, default=[0, 1], help="the comparison's seeds, comma-separated")
    parser.add_argument("--sweep", action="store_true", help="run the student sweep instead of the comparison")
    parser.add_argument("--student", choices=["recipe", "cut"], default="recipe",
                        help="the comparison's student: configs/student.yaml from scratch (recipe), or the teacher "
                        "pruned to CUT_OPTIONS and trained with configs/student-cut.yaml (cut)")  # fmt: skip
    parser.add_argument("--monolingual_file", type=Path,
                        help="source text without references for the distilled students (vaswani distill "
                             "--monolingual_file; e.g. benchmarks/gettext_monolingual.py's): runs distill[-cut]-mono-sS")  # fmt: skip
    parser.add_argument("--costs", action="store_true",
                        help="only the decoding cost of the teacher's and the sweep points' shapes, untrained (minutes)")  # fmt: skip
    parser.add_argument("--cost_tokens", type=int, default=24, help="--costs: output tokens of every sentence")
    parser.add_argument("--sweep_minutes", type=float, default=10.0, help="training budget of each sweep run")
    parser.add_argument("--sweep_points", type=common.choice_list(list(SWEEP_POINTS), "sweep points"),
                        default=list(SWEEP_POINTS), help=f"comma-separated, from {', '.join(SWEEP_POINTS)}")  # fmt: skip
    parser.add_argument("--num_beams", type=int, default=4, help="beam size of every decoding (issue 43: 4)")
    parser.add_argument("--length_penalty", type=float, default=0.6, help="of every decoding (issue 43: 0.6)")
    parser.add_argument("--max_tokens", type=int, default=4096, help="source tokens per batch of every decoding")
    parser.add_argument("--rounds", type=int, default=3, help="timed decodings of the test file per model")
    parser.add_argument("--train_pairs", type=int, default=None, help="the first N training pairs only (smoke runs)")
    parser.add_argument("--max_validation_pairs", type=int, default=None, help="the first N validation pairs only")
    parser.add_argument("--max_test_samples", type=int, default=None, help="the first N test pairs only")
    parser.add_argument("--parallel", type=int, default=len(os.sched_getaffinity(0)),
                        help="runs at a time, one thread each (default: one per core)")  # fmt: skip
    parser.add_argument("--fresh", action="store_true", help="run everything again, reusing no finished run")
    parser.add_argument("--output_dir", type=Path, default=REPO / "runs" / "bench_distill")
    parser.add_argument("--json", type=Path, help="write the figures here")
    args = parser.parse_args(argv)
    for name in ("minutes", "sweep_minutes"):
        if getattr(args, name) <= 0:
            parser.error(f"--{name} must be positive")
    for name in ("parallel", "rounds", "num_beams", "max_tokens"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} {getattr(args, name)} is not allowed: use 1 or more")
    if args.monolingual_file is not None and not args.monolingual_file.is_file():
        parser.error(f"--monolingual_file {args.monolingual_file} is not a file (benchmarks/gettext_monolingual.py "
                     "writes one)")  # fmt: skip
    common.check_data_dir(parser, args.data_dir)
    return args


# ---------------------------------------------------------------------------------------------------------------------
# Runs
# ---------------------------------------------------------------------------------------------------------------------
@dataclass
class Job:
    """One subprocess: its `command`, its output `folder`, the file there whose presence says it finished (`done`),
    the jobs it waits for; its log and the record of its command are beside the folder."""

    name: str
    command: list[str]
    folder: Path
    done: str
    after: list[str] = field(default_factory=list)

    @property
    def record(self) -> Path:
        return self.folder.with_name(f"{self.folder.name}.command.json")

    @property
    def log(self) -> Path:
        return self.folder.with_name(f"{self.folder.name}.log")

    def fingerprint(self) -> dict:
        """The command, and the content of the recipes it names (an edited configs/student.yaml is another run)."""
        recipes = {word: hashlib.sha256(Path(word).read_bytes()).hexdigest() for word in self.command
                   if word.endswith(".yaml") and Path(word).is_file()}  # fmt: skip
        return {"command": self.command, "recipes": recipes}

    def finished(self, fresh: bool = False) -> bool:
        """Whether it already ran to the end with the same command and recipes."""
        return (not fresh and (self.folder / self.done).is_file() and self.record.is_file()
                and json.loads(self.record.read_text()) == self.fingerprint())  # fmt: skip


def data_files(args) -> dict[str, Path]:
    """The train/validation/test files, cut to --train_pairs / --max_validation_pairs / --max_test_samples (copies in
    --output_dir)."""
    limits = {"train": args.train_pairs, "validation": args.max_validation_pairs, "test": args.max_test_samples}
    files = {}
    for split, limit in limits.items():
        files[split] = args.data_dir / f"{split}.jsonl"
        if limit:
            lines = files[split].read_text(encoding="utf-8").splitlines()[:limit]
            files[split] = args.output_dir / f"{split}-{limit}.jsonl"
            if not files[split].is_file() or files[split].read_text(encoding="utf-8").splitlines() != lines:
                files[split].write_text("\n".join(lines) + "\n", encoding="utf-8")
    return files


def train_job(args, name: str, recipe: Path, options: list[str], train_file: Path, minutes: float, seed: int,
              after: list[str] = ()) -> Job:  # fmt: skip
    files = data_files(args)
    out = args.output_dir / name
    command = [
        sys.executable, str(REPO / "train.py"), "--config", str(recipe), *options, "--train_file", str(train_file),
        "--validation_file", str(files["validation"]), "--test_file", str(files["test"]),
        "--source_lang", args.source_lang, "--target_lang", args.target_lang, "--max_train_minutes", str(minutes),
        "--seed", str(seed), "--output_dir", str(out), "--overwrite_output_dir",
    ]  # fmt: skip
    return Job(name, command, out, "results.json", list(after))


def export_job(args, model: Path, after: str) -> Job:
    out = Path(f"{model}-ct2")
    command = [sys.executable, "-m", "vaswani.cli", "export", "--model", str(model), "--output_dir", str(out),
               "--format", "ctranslate2", "--quantization", "int8"]  # fmt: skip
    return Job(out.name, command, out, "vaswani_ctranslate2.json", [after])


def prune_job(args, seed: int) -> Job:
    """--student cut: the seed's teacher cut to `CUT_OPTIONS` (teacher-sS-cut)."""
    out = args.output_dir / f"teacher-s{seed}-cut"
    command = [sys.executable, "-m", "vaswani.cli", "prune", "--model", str(args.output_dir / f"teacher-s{seed}"),
               "--output_dir", str(out), *CUT_OPTIONS, "--overwrite_output_dir"]  # fmt: skip
    return Job(out.name, command, out, "model.safetensors", [f"teacher-s{seed}"])


def student_start(args, seed: int) -> tuple[str, Path, list[str], list[str]]:
    """The comparison's student (--student): its runs' name part, recipe, options and the jobs they wait for."""
    if args.student == "recipe":
        return "", STUDENT_RECIPE, [], []
    cut = args.output_dir / f"teacher-s{seed}-cut"
    return "-cut", CUT_RECIPE, ["--model", str(cut), "--tokenizer", str(cut)], [cut.name]


def distill_name(args, seed: int) -> str:
    """The comparison's distilled run at `seed`: distill[-cut][-mono]-sS (--student, --monolingual_file)."""
    return f"distill{student_start(args, seed)[0]}{'-mono' if args.monolingual_file else ''}-s{seed}"


def distill_job(args, seed: int, minutes: float, stage: str = "all") -> Job:
    files = data_files(args)
    part, recipe, options, after = student_start(args, seed) if stage == "all" else ("", STUDENT_RECIPE, [], [])
    name = distill_name(args, seed) if stage == "all" else f"distilled-s{seed}"
    if stage == "all" and args.monolingual_file:
        options = [*options, "--monolingual_file", str(args.monolingual_file.resolve())]
    out = args.output_dir / name
    command = [
        sys.executable, "-m", "vaswani.cli", "distill", "--teacher", str(args.output_dir / f"teacher-s{seed}"),
        "--config", str(recipe), *options, "--train_file", str(files["train"]), "--validation_file",
        str(files["validation"]), "--test_file", str(files["test"]), "--source_lang", args.source_lang,
        "--target_lang", args.target_lang, "--max_train_minutes", str(minutes), "--seed", str(seed),
        "--teacher_num_beams", str(args.num_beams), "--teacher_length_penalty", str(args.length_penalty),
        "--teacher_max_tokens", str(args.max_tokens), "--quantization", "int8", "--threads", "1", "--no_progress",
        "--stage", stage, "--output_dir", str(out), "--overwrite_output_dir",
    ]  # fmt: skip
    done = "distill_report.json" if stage == "all" else "distilled/stats.json"
    return Job(name, command, out, done, [f"teacher-s{seed}", *after])


def run_jobs(jobs: list[Job], parallel: int, fresh: bool) -> None:
    """Run `jobs` `parallel` at a time (in list order, each once the jobs it waits for are done), one thread each;
    a finished one is reused. Stops at the first failure, naming its log."""
    done = {job.name for job in jobs if job.finished(fresh)}
    for name in sorted(done):
        print(f"reusing {name} (finished with the same command)", flush=True)
    known = {job.name for job in jobs}
    done |= {name for job in jobs for name in job.after if name not in known}  # ran before, in an earlier call
    waiting, running = [job for job in jobs if job.name not in done], []
    while waiting or running:
        for job in [j for j in waiting if all(a in done for a in j.after)][: parallel - len(running)]:
            waiting.remove(job)
            job.record.unlink(missing_ok=True)
            with job.log.open("w") as stream:
                process = subprocess.Popen(job.command, stdout=stream, stderr=subprocess.STDOUT,
                                           env=common.worker_env(threads=1), cwd=REPO)  # fmt: skip
            running.append((job, process, time.monotonic()))
            print(f"started {job.name} (log: {job.log})", flush=True)
        time.sleep(1)
        for entry in list(running):
            job, process, started = entry
            if process.poll() is None:
                continue
            running.remove(entry)
            if process.returncode != 0:
                for _, other, _ in running:
                    other.kill()
                raise SystemExit(f"{job.name} failed (exit {process.returncode}); see {job.log}")
            job.record.write_text(json.dumps(job.fingerprint()))
            done.add(job.name)
            print(f"finished {job.name} in {(time.monotonic() - started) / 60:.1f} min", flush=True)
        if waiting and not running and not any(all(a in done for a in j.after) for j in waiting):
            raise SystemExit(f"{[j.name for j in waiting]} wait for jobs that are not there")


# ---------------------------------------------------------------------------------------------------------------------
# Decoding the test file
# ---------------------------------------------------------------------------------------------------------------------
def decode_exports(exports: dict[str, Path], test_file: Path, args) -> dict[str, dict]:
    """Each int8 export's test BLEU/chrF and the seconds of each of its `--rounds` decodings of the test file, one
    thread and one CTranslate2 worker, the exports alternating (`common.interleave`)."""
    import sacrebleu
    import torch

    from vaswani.inference.translator import Translator

    torch.set_num_threads(1)
    rows = [json.loads(line)["translation"] for line in test_file.read_text(encoding="utf-8").splitlines()]
    sources, references = [r[args.source_lang] for r in rows], [r[args.target_lang] for r in rows]
    translators = {name: Translator(folder, parallel_batches=1) for name, folder in exports.items()}
    outputs = {}

    def decode(name: str):
        def call() -> None:
            outputs[name] = translators[name].translate(sources, num_beams=args.num_beams,
                                                        length_penalty=args.length_penalty,
                                                        batch_tokens=args.max_tokens)  # fmt: skip

        return call

    timed = common.interleave({name: decode(name) for name in exports}, warmup=1, repeats=args.rounds)
    return {
        name: {"bleu": sacrebleu.corpus_bleu(outputs[name], [references]).score,
               "chrf": sacrebleu.corpus_chrf(outputs[name], [references]).score,
               "seconds": timed.seconds[name], "stalled": timed.stalled[name], "sentences": len(sources)}
        for name in exports
    }  # fmt: skip


def validation_bleu(run_dir: Path) -> float:
    return json.loads((run_dir / "results.json").read_text())["validation"]["bleu"]


# ---------------------------------------------------------------------------------------------------------------------
# The comparison
# ---------------------------------------------------------------------------------------------------------------------
def comparison_jobs(args) -> list[Job]:
    files, jobs = data_files(args), []
    for seed in args.seeds:
        jobs.append(train_job(args, f"teacher-s{seed}", TEACHER_RECIPE, [], files["train"], args.minutes, seed))
    if args.student == "cut":
        jobs += [prune_job(args, seed) for seed in args.seeds]
    for seed in args.seeds:
        jobs.append(distill_job(args, seed, args.minutes))
    for seed in args.seeds:
        part, recipe, options, after = student_start(args, seed)
        baseline = train_job(args, f"baseline{part}-s{seed}", recipe, options, files["train"], args.minutes, seed,
                             after)  # fmt: skip
        jobs += [baseline, export_job(args, args.output_dir / baseline.name, baseline.name)]
    return jobs


def seed_summary(decoded: dict[str, dict], validation: dict[str, float]) -> dict:
    """One seed's figures and verdicts: time ratio per round (student / teacher), BLEU gaps."""
    ratios = common.ratio_summary(decoded["student"]["seconds"], decoded["teacher"]["seconds"])
    teacher_gap = decoded["student"]["bleu"] - decoded["teacher"]["bleu"]
    baseline_gap = decoded["student"]["bleu"] - decoded["baseline"]["bleu"]
    return {
        "decoded": decoded, "validation_bleu": validation, "time_ratio": ratios.to_dict(),
        "bleu_student_minus_teacher": teacher_gap, "bleu_distilled_minus_original": baseline_gap,
        "verdicts": {
            f"time ratio <= {TIME_TARGET}": common.verdict(ratios.values, TIME_TARGET, higher_is_better=False),
            f"student - teacher >= {TEACHER_GAP_TARGET:+g} BLEU": "MET" if teacher_gap >= TEACHER_GAP_TARGET else "MISSED",
            f"distilled - original >= {BASELINE_GAP_TARGET:+g} BLEU": "MET" if baseline_gap >= BASELINE_GAP_TARGET
            else "MISSED",
        },
    }  # fmt: skip


def print_seed(seed: int, summary: dict) -> None:
    rows = [[name, f"{d['bleu']:.2f}", f"{d['chrf']:.2f}", f"{summary['validation_bleu'][name]:.2f}",
             f"{statistics.median(d['seconds']):.2f}", f"{d['sentences'] / statistics.median(d['seconds']):.1f}"]
            for name, d in summary["decoded"].items()]  # fmt: skip
    print(f"\nseed {seed}:")
    print(common.format_table(["model", "test BLEU", "chrF", "valid BLEU", "seconds", "sentences/s"], rows))
    ratio = summary["time_ratio"]
    print(f"student / teacher time: {ratio['median']:.3f} (rounds {ratio['low']:.3f}-{ratio['high']:.3f}); "
          f"BLEU student - teacher {summary['bleu_student_minus_teacher']:+.2f}; distilled - original pairs "
          f"{summary['bleu_distilled_minus_original']:+.2f}")  # fmt: skip
    for target, verdict in summary["verdicts"].items():
        print(f"  {verdict:7} {target}")


def run_comparison(args) -> dict:
    run_jobs(comparison_jobs(args), args.parallel, args.fresh)
    test_file, out, figures = data_files(args)["test"], args.output_dir, {}
    for seed in args.seeds:
        part = student_start(args, seed)[0]
        distilled = out / distill_name(args, seed)
        exports = {"teacher": distilled / "teacher-ct2", "student": distilled / "student-ct2",
                   "baseline": out / f"baseline{part}-s{seed}-ct2"}  # fmt: skip
        validation = {"teacher": validation_bleu(out / f"teacher-s{seed}"), "student": validation_bleu(
            distilled / "student"), "baseline": validation_bleu(out / f"baseline{part}-s{seed}")}  # fmt: skip
        figures[seed] = seed_summary(decode_exports(exports, test_file, args), validation)
        print_seed(seed, figures[seed])
    return {"comparison": figures}


# ---------------------------------------------------------------------------------------------------------------------
# The sweep
# ---------------------------------------------------------------------------------------------------------------------
def sweep_jobs(args, points: list[str], seed: int) -> list[Job]:
    """The sweep's runs of `points` at `seed` (after the seed-0 teacher and its distilled data); at seed 0 each is
    exported too, to be timed against the teacher."""
    files, jobs = data_files(args), []
    distilled = distilled_training_file(args)
    if seed == 0:
        jobs += [train_job(args, "teacher-s0", TEACHER_RECIPE, [], files["train"], args.minutes, 0)]
        if distilled.parent.parent.name != "distill-s0":
            jobs.append(distill_job(args, 0, args.minutes, stage="translate"))
    for point in points:
        after = ["teacher-s0", distilled.parent.parent.name] if seed == 0 else []  # seed 1: they ran with seed 0
        run = train_job(args, f"sweep-{point}-s{seed}", STUDENT_RECIPE, SWEEP_POINTS[point], distilled,
                        args.sweep_minutes, seed, after=after)  # fmt: skip
        jobs += [run, export_job(args, args.output_dir / run.name, run.name)] if seed == 0 else [run]  # timed once
    return jobs


def distilled_training_file(args) -> Path:
    """The seed-0 teacher's distilled training file: the comparison's when it finished, else a translate stage's."""
    full = args.output_dir / "distill-s0"
    return (full if (full / "distilled" / "stats.json").is_file() else args.output_dir / "distilled-s0") / (
        "distilled/train.jsonl")  # fmt: skip


def best_two(results: dict[str, dict]) -> list[str]:
    """The two points with the best validation BLEU among those at most half the teacher's time (all points if fewer
    than two are)."""
    fast = [p for p, r in results.items() if r["time_ratio"] <= TIME_TARGET]
    candidates = fast if len(fast) >= 2 else list(results)
    return sorted(candidates, key=lambda p: -statistics.mean(results[p]["validation_bleu"]))[:2]


def run_sweep(args) -> dict:
    test_file = data_files(args)["test"]
    teacher_export = args.output_dir / "teacher-s0-ct2"
    jobs = sweep_jobs(args, args.sweep_points, 0) + [export_job(args, args.output_dir / "teacher-s0", "teacher-s0")]
    run_jobs(jobs, args.parallel, args.fresh)
    results = {}
    for point in args.sweep_points:
        run = args.output_dir / f"sweep-{point}-s0"
        decoded = decode_exports({"teacher": teacher_export, point: Path(f"{run}-ct2")}, test_file, args)
        results[point] = {"validation_bleu": [validation_bleu(run)], "test_bleu": decoded[point]["bleu"],
                          "time_ratio": common.ratio_summary(decoded[point]["seconds"],
                                                             decoded["teacher"]["seconds"]).median}  # fmt: skip
    chosen = best_two(results)
    print(f"\nseed 0 done; the best two at most {TIME_TARGET} of the teacher's time: {', '.join(chosen)}; now seed 1")
    run_jobs(sweep_jobs(args, chosen, 1), args.parallel, args.fresh)
    for point in chosen:
        results[point]["validation_bleu"].append(validation_bleu(args.output_dir / f"sweep-{point}-s1"))
    rows = [[point, " / ".join(f"{b:.2f}" for b in r["validation_bleu"]), f"{statistics.mean(r['validation_bleu']):.2f}",
             f"{r['test_bleu']:.2f}", f"{r['time_ratio']:.3f}", " ".join(SWEEP_POINTS[point]) or "(configs/student.yaml)"]
            for point, r in results.items()]  # fmt: skip
    print(common.format_table(["point", "valid BLEU (seeds)", "mean", "test BLEU s0", "time / teacher", "options"],
                              rows))  # fmt: skip
    best = max(chosen, key=lambda p: statistics.mean(results[p]["validation_bleu"]))
    print(f"best on validation over two seeds: {best} ({' '.join(SWEEP_POINTS[best]) or 'configs/student.yaml'})")
    return {"sweep": results, "best": best}


# ---------------------------------------------------------------------------------------------------------------------
# Decoding costs of the shapes, untrained
# ---------------------------------------------------------------------------------------------------------------------
def recipe_args(recipe: Path, options: list[str]) -> argparse.Namespace:
    """`vaswani train`'s options of `recipe` with `options`, checked as training checks them."""
    from vaswani.training.options import parse_args as train_args

    return train_args(["--config", str(recipe), *options, "--output_dir", "unused", "--max_train_minutes", "1"])


def model_config(train_options: argparse.Namespace, tokenizer):
    """The VaswaniConfig training builds from `train_options`, for `tokenizer`'s vocabulary, with an output bias."""
    from vaswani.training.loop import resolve_model_config

    config = resolve_model_config(train_options)
    config.vocab_size = len(tokenizer)
    config.pad_token_id, config.eos_token_id = tokenizer.pad_token_id, tokenizer.eos_token_id
    config.bos_token_id = config.decoder_start_token_id = tokenizer.bos_token_id
    config.final_logits_bias = True
    return config


def decoding_costs(args) -> dict:
    """Each shape's decoding time / the teacher's (configs/small-data.yaml), before any training: random weights with
    the EOS token's output bias at -1e4, so that every sentence decodes exactly --cost_tokens tokens whatever the
    model; int8 exports, the test file, one thread, `--rounds` alternating rounds. What configs/student.yaml's costs
    come from; a trained model's own output lengths decide in the end (the comparison times those)."""
    import torch

    from modeling_vaswani import VaswaniForConditionalGeneration
    from tokenization import train_bpe_tokenizer
    from vaswani.export.ctranslate2 import export_ctranslate2
    from vaswani.inference.translator import Translator

    torch.set_num_threads(1)
    files = data_files(args)
    pairs = [json.loads(line)["translation"] for line in files["train"].read_text(encoding="utf-8").splitlines()]
    sources = [json.loads(line)["translation"][args.source_lang] for line in files["test"].read_text().splitlines()]
    points = {**{p: SWEEP_POINTS[p] for p in args.sweep_points}, **COST_ONLY_POINTS}
    shapes = {"teacher": (TEACHER_RECIPE, []), **{p: (STUDENT_RECIPE, options) for p, options in points.items()}}
    tokenizers, translators = {}, {}
    for name, (recipe, options) in shapes.items():
        train_options = recipe_args(recipe, options)
        vocab_size = train_options.vocab_size
        if vocab_size not in tokenizers:
            texts = [text for pair in pairs[:20000] for text in (pair[args.source_lang], pair[args.target_lang])]
            tokenizers[vocab_size] = train_bpe_tokenizer(iterator=texts, vocab_size=vocab_size, min_frequency=2)
        tokenizer = tokenizers[vocab_size]
        torch.manual_seed(0)
        model = VaswaniForConditionalGeneration(model_config(train_options, tokenizer))
        with torch.no_grad():
            model.lm_head.bias.zero_()
            model.lm_head.bias[tokenizer.eos_token_id] = -1e4  # never chosen: every output has --cost_tokens tokens
        folder = args.output_dir / f"cost-{name}"
        shutil.rmtree(folder, ignore_errors=True)
        model.save_pretrained(folder)
        tokenizer.save_pretrained(folder)
        shutil.rmtree(f"{folder}-ct2", ignore_errors=True)
        translators[name] = Translator(export_ctranslate2(folder, f"{folder}-ct2", "int8"), parallel_batches=1)

    def decode(name: str):
        return lambda: translators[name].translate(sources, num_beams=args.num_beams, length_penalty=args.length_penalty,
                                                   max_new_tokens=args.cost_tokens, batch_tokens=args.max_tokens)  # fmt: skip

    timed = common.interleave({name: decode(name) for name in shapes}, warmup=1, repeats=args.rounds)
    costs = {name: common.ratio_summary(timed.seconds[name], timed.seconds["teacher"]).median for name in shapes}
    print(common.format_table(["shape", "seconds", "time / teacher", "options over configs/student.yaml"], [
        [name, f"{statistics.median(timed.seconds[name]):.2f}", f"{costs[name]:.2f}",
         " ".join(shapes[name][1]) or ("(configs/small-data.yaml)" if name == "teacher" else "(as it is)")]
        for name in shapes]))  # fmt: skip
    return {"costs": costs, "sentences": len(sources), "output_tokens": args.cost_tokens}


def main(argv=None) -> dict:
    args = parse_args(argv)
    args.output_dir = args.output_dir.resolve()
    args.output_dir.mkdir(parents=True, exist_ok=True)
    machine = common.machine_description(1)
    what = (f"the decoding costs, {args.cost_tokens} output tokens" if args.costs else
            f"the sweep, {args.sweep_minutes:g} training minutes per run" if args.sweep else
            f"the comparison, {args.minutes:g} training minutes per run, student: "
            f"{'configs/student.yaml' if args.student == 'recipe' else 'the teacher cut by ' + ' '.join(CUT_OPTIONS)}")  # fmt: skip
    print(f"bench_distill ({what}) on {args.data_dir.name}: {args.parallel} runs at a "
          f"time, one thread each; decoding: CTranslate2 int8, beam {args.num_beams}, length penalty "
          f"{args.length_penalty:g}, max_tokens {args.max_tokens}, one thread; commit "
          f"{common.source_version(REPO / 'vaswani')}; {common.describe_machine(machine)}", flush=True)  # fmt: skip
    figures = decoding_costs(args) if args.costs else run_sweep(args) if args.sweep else run_comparison(args)
    common.write_json_report(args.json, args, machine=machine, **figures)
    return figures


if __name__ == "__main__":
    main()
