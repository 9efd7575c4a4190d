"""Ablation: normalization for low-resource translation (Nguyen & Salazar 2019, "Transformers without Tears").

Four variants of configs/small-data.yaml on a real small corpus (default: ../shared/data/gettext-en-es, 40k EN->ES
pairs of software messages), each trained for the same number of UPDATES with several seeds, scored on the held-out
test split (sacrebleu BLEU and chrF, beam 4, from the final averaged model):

    post-layernorm             the paper: PostNorm (x + sublayer -> LayerNorm)
    pre-layernorm              PreNorm (x + sublayer(LayerNorm(x))), a final LayerNorm on each stack
    pre-scalenorm              PreNorm with ScaleNorm (g * x / ||x||, one learned scalar)
    pre-scalenorm-fixnorm      ... plus FixNorm (unit-length word embeddings)

A budget in updates (not minutes) makes the comparison fair on a shared machine whatever its load. Every run uses
one thread (OMP_NUM_THREADS=1) and at most --jobs runs go at a time. The same tokenizer (trained once) serves all
runs. Finished runs are kept under --output_dir and reused, so an interrupted ablation continues where it stopped.

    python benchmarks/bench_ablation.py                                  # 4 variants x 2 seeds x 400 updates
    python benchmarks/bench_ablation.py --seeds 0 1 2 --updates 1000 --jobs 2
    python benchmarks/bench_ablation.py --updates 5 --seeds 0 --max_test_samples 20   # smoke run, ~2 minutes
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import common  # noqa: E402  (benchmarks/, the folder of this script)

REPO = Path(__file__).resolve().parent.parent
VARIANTS = {
    "post-layernorm": {"norm_position": "post", "norm_type": "layernorm", "fixnorm": "false"},
    "pre-layernorm": {"norm_position": "pre", "norm_type": "layernorm", "fixnorm": "false"},
    "pre-scalenorm": {"norm_position": "pre", "norm_type": "scalenorm", "fixnorm": "false"},
    "pre-scalenorm-fixnorm": {"norm_position": "pre", "norm_type": "scalenorm", "fixnorm": "true"},
}


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], allow_abbrev=False)
    common.add_corpus_arguments(parser)
    parser.add_argument("--config", type=Path, default=REPO / "configs" / "small-data.yaml", help="the base recipe")
    parser.add_argument("--variants", nargs="+", choices=sorted(VARIANTS), default=list(VARIANTS))
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1])
    parser.add_argument("--updates", type=int, default=400, help="optimizer updates per run (the same for all)")
    parser.add_argument("--warmup_steps", type=int, default=150, help="overrides the recipe's warmup for this budget")
    parser.add_argument("--jobs", type=int, default=2, help="runs at a time (one thread each)")
    parser.add_argument("--max_test_samples", type=int, default=None, help="score only the first N test pairs")
    parser.add_argument("--output_dir", type=Path, default=REPO / "runs" / "ablation")
    parser.add_argument("--json", type=Path, help="write the per-run results here")
    args = parser.parse_args(argv)
    if args.updates < 1 or args.jobs < 1:
        parser.error("--updates and --jobs must be positive")
    common.check_data_dir(parser, args.data_dir)
    return args


def prepare_data(args) -> tuple[Path, Path]:
    """The shared tokenizer (vocabulary size from the recipe) and, with --max_test_samples, a shortened test file."""
    import yaml
    from datasets import load_dataset

    from tokenization import train_bpe_tokenizer

    args.output_dir.mkdir(parents=True, exist_ok=True)
    recipe = yaml.safe_load(args.config.read_text())
    tokenizer_dir = args.output_dir / f"tokenizer-{recipe.get('vocab_size', 37000)}"
    if not (tokenizer_dir / "tokenizer.json").exists():
        train = load_dataset("json", data_files=str(args.data_dir / "train.jsonl"), split="train")
        tokenizer = train_bpe_tokenizer(
            dataset=train, source_lang=args.source_lang, target_lang=args.target_lang,
            vocab_size=recipe.get("vocab_size", 37000), min_frequency=recipe.get("min_frequency", 2),
        )  # fmt: skip
        tokenizer.save_pretrained(tokenizer_dir)
    test_file = args.data_dir / "test.jsonl"
    if args.max_test_samples:
        lines = test_file.read_text(encoding="utf-8").splitlines()[: args.max_test_samples]
        test_file = args.output_dir / f"test-{args.max_test_samples}.jsonl"
        test_file.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return tokenizer_dir, test_file


def run_one(args, variant: str, seed: int, tokenizer_dir: Path, test_file: Path) -> dict:
    out = args.output_dir / f"{variant}-seed{seed}-{args.updates}"
    if (out / "results.json").exists():
        return read_result(out, variant, seed)
    options = [f"--{k}={v}" for k, v in VARIANTS[variant].items()]
    cmd = [
        sys.executable, str(REPO / "train.py"), "--config", str(args.config),
        "--train_file", str(args.data_dir / "train.jsonl"), "--validation_file", str(args.data_dir / "validation.jsonl"),
        "--test_file", str(test_file), "--source_lang", args.source_lang, "--target_lang", args.target_lang,
        "--tokenizer", str(tokenizer_dir), "--max_train_steps", str(args.updates),
        "--warmup_steps", str(args.warmup_steps), "--seed", str(seed), "--eval_steps", "0",
        "--checkpoint_steps", str(max(1, args.updates // 10)), "--logging_steps", str(max(1, args.updates // 10)),
        "--max_eval_samples", "100", "--mixed_precision", "no", "--output_dir", str(out), "--overwrite_output_dir", *options,
    ]  # fmt: skip
    common.run_logged(cmd, args.output_dir / f"{out.name}.log", f"{variant} seed {seed}")
    return read_result(out, variant, seed)


def read_result(out: Path, variant: str, seed: int) -> dict:
    final = json.loads((out / "results.json").read_text())
    test = final["test"]
    return {
        "variant": variant, "seed": seed, "updates": final["step"], "bleu": test["bleu"], "chrf": test["chrf"],
        "test_loss": test["loss"], "valid_bleu": final["validation"]["bleu"], "bleu_signature": test["bleu_signature"],
        "chrf_signature": test["chrf_signature"], "train_seconds": final["train_seconds"],
    }  # fmt: skip


def summarise(rows: list[dict], variants: list[str]) -> str:
    """A Markdown table: per variant the mean over seeds and each seed's value of test BLEU, chrF and loss."""
    columns = [("bleu", "test BLEU", 1), ("chrf", "test chrF", 1), ("test_loss", "test loss", 3)]
    lines = [
        "| variant | " + " | ".join(f"{title} (mean; per seed)" for _, title, _ in columns) + " |",
        "|---|" + "---|" * len(columns),
    ]
    for variant in variants:
        mine = sorted((r for r in rows if r["variant"] == variant), key=lambda r: r["seed"])
        if not mine:
            continue
        cells = [
            f"{statistics.mean(r[key] for r in mine):.{digits}f}; " + " / ".join(f"{r[key]:.{digits}f}" for r in mine)
            for key, _, digits in columns
        ]
        lines.append(f"| {variant} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv=None) -> list[dict]:
    args = parse_args(argv)
    tokenizer_dir, test_file = prepare_data(args)
    jobs = [(v, s) for s in args.seeds for v in args.variants]
    print(f"{len(jobs)} runs of {args.updates} updates ({args.jobs} at a time, 1 thread each); recipe {args.config}")
    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        rows = list(pool.map(lambda job: run_one(args, *job, tokenizer_dir, test_file), jobs))
    print(summarise(rows, args.variants))
    print(f"BLEU signature: {rows[0]['bleu_signature']}")
    print(f"chrF signature: {rows[0]['chrf_signature']}")
    common.write_json_report(args.json, args, runs=rows)
    return rows


if __name__ == "__main__":
    main()
