"""Benchmark: what cleaning a noisy corpus (`--drop_copies`, `--drop_duplicates`, `--max_length_ratio`) gives back.

Khayrallah & Koehn (2018, "On the Impact of Various Types of Noise on Neural Machine Translation") add noise of the
kinds a crawled corpus holds to a clean one and measure the loss; untranslated copies of the source hurt most. Here,
on a real small corpus (default: ../shared/data/gettext-en-es, 40k EN->ES pairs of software messages):

    clean      the training pairs as they are
    noisy      the same pairs plus noise, each kind a fraction of the corpus's size (seeded):
               --copies (a random pair whose target is its source: untranslated text), --misaligned (a random
               source with another random pair's target) and --repeats (a random pair once more)
    cleaned    the noisy file trained with `--drop_copies --drop_duplicates --max_length_ratio R`

Each arm is configs/small-data.yaml trained for the same number of UPDATES (fair on a shared machine whatever its
load) at every seed, one thread each, at most --jobs at a time, with one tokenizer trained once on the clean pairs
(so that the arms differ by their training pairs alone), the final model chosen on the clean validation pairs and
scored on the clean test pairs (sacrebleu BLEU and chrF, beam 4). Printed: each arm's test BLEU and chrF (mean; per
seed), what the cleaning dropped, and the cleaned arm against the noisy one per seed (the target: a gain at every
seed) and against the clean one. Finished runs are kept under --output_dir and reused.

    python benchmarks/bench_cleaning.py                                   # 3 arms x 2 seeds x 600 updates (~25 min)
    python benchmarks/bench_cleaning.py --updates 5 --seeds 0 --max_test_samples 20 --max_train_pairs 2000  # smoke
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import common  # noqa: E402  (benchmarks/, the folder of this script)

REPO = Path(__file__).resolve().parent.parent
ARMS = ("clean", "noisy", "cleaned")


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], allow_abbrev=False)
    common.add_corpus_arguments(parser)
    parser.add_argument("--config", type=Path, default=REPO / "configs" / "small-data.yaml", help="the base recipe")
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1])
    parser.add_argument("--updates", type=int, default=600, help="optimizer updates per run (the same for all)")
    parser.add_argument("--jobs", type=int, default=2, help="runs at a time (one thread each)")
    for kind, default in (("copies", 0.2), ("misaligned", 0.1), ("repeats", 0.2)):
        parser.add_argument(f"--{kind}", type=float, default=default,
                            help="noise pairs of this kind, as a fraction of the training pairs")  # fmt: skip
    parser.add_argument("--max_length_ratio", type=float, default=2.0, help="the cleaned arm's --max_length_ratio")
    parser.add_argument("--max_train_pairs", type=int, default=None, help="the first N training pairs (smoke runs)")
    parser.add_argument("--max_test_samples", type=int, default=None, help="score only the first N test pairs")
    parser.add_argument("--output_dir", type=Path, default=REPO / "runs" / "cleaning")
    parser.add_argument("--json", type=Path, help="write the per-run results here")
    args = parser.parse_args(argv)
    if args.updates < 1 or args.jobs < 1:
        parser.error("--updates and --jobs must be positive")
    for kind in ("copies", "misaligned", "repeats"):
        if not 0 <= getattr(args, kind) <= 10:
            parser.error(f"--{kind} {getattr(args, kind)} is not allowed: give a fraction from 0 to 10")
    if args.max_length_ratio < 1:
        parser.error(f"--max_length_ratio {args.max_length_ratio} is not allowed: use 1 or more")
    common.check_data_dir(parser, args.data_dir)
    return args


def noisy_pairs(pairs: list[dict], source: str, target: str, fractions: dict[str, float], seed: int) -> list[dict]:
    """`pairs` followed by the noise (`fractions`: kind -> noise pairs per training pair), shuffled in with a seeded
    generator; each noise pair is a `{"translation": ...}` record like the real ones."""
    rng = random.Random(seed)
    noise = []
    for kind, fraction in fractions.items():
        for _ in range(round(fraction * len(pairs))):
            pair = rng.choice(pairs)["translation"]
            if kind == "copies":
                noise.append({"translation": {source: pair[source], target: pair[source]}})
            elif kind == "misaligned":
                noise.append({"translation": {source: pair[source], target: rng.choice(pairs)["translation"][target]}})
            else:  # repeats
                noise.append({"translation": dict(pair)})
    mixed = pairs + noise
    rng.shuffle(mixed)
    return mixed


def prepare_data(args) -> dict[str, Path]:
    """The clean and noisy training files, the shared tokenizer (trained once on the clean pairs) and the test file
    (shortened with --max_test_samples)."""
    from datasets import load_dataset

    from tokenization import train_bpe_tokenizer

    args.output_dir.mkdir(parents=True, exist_ok=True)
    lines = (args.data_dir / "train.jsonl").read_text(encoding="utf-8").splitlines()[: args.max_train_pairs]
    pairs = [json.loads(line) for line in lines]
    fractions = {"copies": args.copies, "misaligned": args.misaligned, "repeats": args.repeats}
    files = {"clean": args.output_dir / f"train-clean-{len(pairs)}.jsonl",
             "noisy": args.output_dir / f"train-noisy-{len(pairs)}-{args.copies}-{args.misaligned}-{args.repeats}.jsonl"}  # fmt: skip
    for arm, records in (("clean", pairs), ("noisy", noisy_pairs(pairs, args.source_lang, args.target_lang,
                                                                    fractions, seed=0))):  # fmt: skip
        if not files[arm].exists():
            write_lines(files[arm], [json.dumps(record, ensure_ascii=False) for record in records])
    import yaml

    recipe = yaml.safe_load(args.config.read_text())
    files["tokenizer"] = args.output_dir / f"tokenizer-{recipe.get('vocab_size', 37000)}-{len(pairs)}"
    if not (files["tokenizer"] / "tokenizer.json").exists():
        train = load_dataset("json", data_files=str(files["clean"]), split="train")
        tokenizer = train_bpe_tokenizer(dataset=train, source_lang=args.source_lang, target_lang=args.target_lang,
                                        vocab_size=recipe.get("vocab_size", 37000),
                                        min_frequency=recipe.get("min_frequency", 2))  # fmt: skip
        tokenizer.save_pretrained(files["tokenizer"])
    files["test"] = args.data_dir / "test.jsonl"
    if args.max_test_samples:
        files["test"] = args.output_dir / f"test-{args.max_test_samples}.jsonl"
        write_lines(files["test"], (args.data_dir / "test.jsonl").read_text(encoding="utf-8").splitlines()[
            : args.max_test_samples])  # fmt: skip
    return files


def write_lines(path: Path, lines: list[str]) -> None:
    """`lines` into `path`, written under a temporary name and renamed when complete."""
    partial = path.with_name(f".tmp-{path.name}")
    partial.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    partial.replace(path)


def train_command(args, arm: str, seed: int, files: dict[str, Path], out: Path) -> list[str]:
    """train.py for one arm and seed: the recipe, the arm's training file (and, for "cleaned", the cleaning)."""
    cleaning = (["--drop_copies", "--drop_duplicates", "--max_length_ratio", str(args.max_length_ratio)]
                if arm == "cleaned" else [])  # fmt: skip
    return [
        sys.executable, str(REPO / "train.py"), "--config", str(args.config),
        "--train_file", str(files["clean" if arm == "clean" else "noisy"]),
        "--validation_file", str(args.data_dir / "validation.jsonl"), "--test_file", str(files["test"]),
        "--source_lang", args.source_lang, "--target_lang", args.target_lang, "--tokenizer", str(files["tokenizer"]),
        "--vocab_size", str(vocabulary_size(files["tokenizer"])),  # (a smoke run's few pairs give fewer than the recipe's)
        "--max_train_steps", str(args.updates), "--seed", str(seed), "--eval_steps", "0",
        "--checkpoint_steps", str(max(1, args.updates // 10)), "--logging_steps", str(max(1, args.updates // 10)),
        "--final_eval_samples", "400", "--output_dir", str(out), "--overwrite_output_dir", *cleaning,
    ]  # fmt: skip


def vocabulary_size(tokenizer_dir: Path) -> int:
    from tokenizers import Tokenizer

    return Tokenizer.from_file(str(tokenizer_dir / "tokenizer.json")).get_vocab_size()


def run_one(args, arm: str, seed: int, files: dict[str, Path]) -> dict:
    out = args.output_dir / f"{arm}-seed{seed}-{args.updates}"
    if (out / "results.json").exists():
        return read_result(out, arm, seed)
    common.run_logged(train_command(args, arm, seed, files, out), args.output_dir / f"{out.name}.log",
                      f"{arm} seed {seed}")  # fmt: skip
    return read_result(out, arm, seed)


def read_result(out: Path, arm: str, seed: int) -> dict:
    final = json.loads((out / "results.json").read_text())
    test = final["test"]
    dropped = next((line.split("dropped ", 1)[1] for line in (out.parent / f"{out.name}.log").read_text().splitlines()
                    if "train: dropped " in line), None)  # fmt: skip
    return {"arm": arm, "seed": seed, "updates": final["step"], "bleu": test["bleu"], "chrf": test["chrf"],
            "valid_bleu": final["validation"]["bleu"], "bleu_signature": test["bleu_signature"], "dropped": dropped,
            "train_seconds": final["train_seconds"]}  # fmt: skip


def summarise(rows: list[dict]) -> str:
    """Per arm the test BLEU and chrF (mean; per seed), then the cleaned arm against the noisy and the clean ones."""
    lines = ["| arm | test BLEU (mean; per seed) | test chrF (mean; per seed) |", "|---|---|---|"]
    by_arm = {arm: sorted((r for r in rows if r["arm"] == arm), key=lambda r: r["seed"]) for arm in ARMS}
    for arm, mine in by_arm.items():
        if mine:
            cells = [f"{statistics.mean(r[key] for r in mine):.1f}; " + " / ".join(f"{r[key]:.1f}" for r in mine)
                     for key in ("bleu", "chrf")]  # fmt: skip
            lines.append(f"| {arm} | " + " | ".join(cells) + " |")
    cleaned = {r["seed"]: r for r in by_arm["cleaned"]}
    for other, target in (("noisy", "> 0 at every seed"), ("clean", None)):
        pairs = [(cleaned[r["seed"]], r) for r in by_arm[other] if r["seed"] in cleaned]
        if not pairs:
            continue
        deltas = [mine["bleu"] - theirs["bleu"] for mine, theirs in pairs]
        verdict = "" if target is None else f" (target {target}: {'MET' if all(d > 0 for d in deltas) else 'MISSED'})"
        lines.append(f"cleaned - {other}: BLEU {statistics.mean(deltas):+.1f} (per seed "
                     f"{' / '.join(f'{d:+.1f}' for d in deltas)}){verdict}")  # fmt: skip
    if by_arm["cleaned"]:
        lines.append(f"the cleaning dropped: {by_arm['cleaned'][0]['dropped']}")
    return "\n".join(lines)


def main(argv=None) -> list[dict]:
    args = parse_args(argv)
    files = prepare_data(args)
    jobs = [(arm, seed) for seed in args.seeds for arm in ARMS]
    print(f"{len(jobs)} runs of {args.updates} updates ({args.jobs} at a time, 1 thread each); recipe {args.config}; "
          f"noise per training pair: copies {args.copies}, misaligned {args.misaligned}, repeats {args.repeats}")  # fmt: skip
    print(common.describe_machine(common.machine_description(1)))
    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        rows = list(pool.map(lambda job: run_one(args, *job, files), jobs))
    print(summarise(rows))
    print(f"BLEU signature: {rows[0]['bleu_signature']}")
    common.write_json_report(args.json, args, runs=rows)
    return rows


if __name__ == "__main__":
    main()
