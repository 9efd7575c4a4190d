"""Benchmark: translation quality at the same wall-clock budget, train.py (the configs/small-data.yaml recipe) against
transformers' `Seq2SeqTrainer` on `MarianMTModel`, on a real small corpus (default ../shared/data/gettext-en-es).

    python benchmarks/bench_quality.py                       # 20 minutes each, side by side, one thread each
    python benchmarks/bench_quality.py --minutes 5 --max_test_samples 300   # a shorter run (label it so)
    python benchmarks/bench_quality.py --minutes 0.2 --max_test_samples 10 --max_eval_samples 10   # smoke run

Both sides train at the same time, each in its own process with one thread (so they do not compete for cores),
for the same number of minutes of their training loop (evaluations during training included; set-up and the
final test evaluation not). Same model dimensions (those of the recipe: d_model 256, 3+3 layers, 4 heads, FFN 1024,
shared embeddings, sinusoidal positions) and the same tokenizer (one BPE of the recipe's vocabulary size, trained
once). Each side has its own recipe:

- train.py: `--config configs/small-data.yaml --max_train_minutes M` exactly as a user runs it (token-budget batches,
  Noam warmup, PreNorm with ScaleNorm and FixNorm, checkpoint averaging), test scores from its results.json.
- Trainer: the usual Hugging Face fine-tuning recipe adapted to training from scratch: batch size 64,
  `group_by_length`, AdamW (0.9, 0.98) at 5e-4 with 400 warmup steps and inverse square root decay, label smoothing
  0.1, dropout 0.1, fused AdamW; stopped by a callback when the budget is spent; test translations with
  `generate(num_beams=4)` (length penalty 0.6, as train.py).

Both are scored with sacrebleu (BLEU and chrF, default settings; the signatures are printed). Target: train.py
>= 5 BLEU ahead.

train.py's final model is chosen among candidates (the last checkpoint, the best evaluated one, the average of the
window; vaswani/stopping.py) by validation score. Each candidate is also scored on the test set here, with the same
beam search, to check the choice: the final model's test BLEU should be at least the best of (last, best) - 0.3.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402
from bench_train import marian_and_training_set  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
DEFAULT_DATA = REPO.parent / "shared" / "data" / "gettext-en-es"
RECIPE = REPO / "configs" / "small-data.yaml"


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], allow_abbrev=False)
    parser.add_argument("--data_dir", type=Path, default=DEFAULT_DATA, help="train/validation/test .jsonl files")
    parser.add_argument("--source_lang", default="en")
    parser.add_argument("--target_lang", default="es")
    parser.add_argument("--minutes", type=float, default=20.0, help="training budget of each side")
    parser.add_argument("--max_test_samples", type=int, default=None, help="score the first N test pairs only")
    parser.add_argument(
        "--max_eval_samples", type=int, default=None, help="train.py's validation subset (default: the recipe's)"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--output_dir", type=Path, default=REPO / "runs" / "bench_quality")
    parser.add_argument("--json", type=Path, help="write the results here")
    parser.add_argument("--worker", help=argparse.SUPPRESS)  # internal: the Trainer side, from a spec file
    args = parser.parse_args(argv)
    if args.worker is None:
        if args.minutes <= 0:
            parser.error("--minutes must be positive")
        common.check_data_dir(parser, args.data_dir)
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


def start_train_py(args, tokenizer_dir: Path, test_file: Path) -> tuple[subprocess.Popen, Path]:
    out = args.output_dir / "train_py"
    cmd = [
        sys.executable, str(REPO / "train.py"), "--config", str(RECIPE),
        "--train_file", str(args.data_dir / "train.jsonl"), "--validation_file", str(args.data_dir / "validation.jsonl"),
        "--test_file", str(test_file), "--source_lang", args.source_lang, "--target_lang", args.target_lang,
        "--tokenizer", str(tokenizer_dir), "--max_train_minutes", str(args.minutes), "--seed", str(args.seed),
        "--output_dir", str(out), "--overwrite_output_dir",
        *(["--max_eval_samples", str(args.max_eval_samples)] if args.max_eval_samples else []),
    ]  # fmt: skip
    log = (args.output_dir / "train_py.log").open("w")
    return subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=common.worker_env(threads=1), cwd=REPO), out


def start_trainer(args, tokenizer_dir: Path, test_file: Path, recipe: dict) -> tuple[subprocess.Popen, Path]:
    spec = args.output_dir / "trainer_spec.json"
    result = args.output_dir / "trainer_result.json"
    result.unlink(missing_ok=True)
    spec.write_text(json.dumps({
        "train": str(args.data_dir / "train.jsonl"), "test": str(test_file), "tokenizer": str(tokenizer_dir),
        "source_lang": args.source_lang, "target_lang": args.target_lang, "minutes": args.minutes, "seed": args.seed,
        "output_dir": str(args.output_dir / "trainer"), "result": str(result),
        "dims": {k: recipe[k] for k in ("d_model", "encoder_layers", "decoder_layers", "encoder_attention_heads",
                                        "decoder_attention_heads", "encoder_ffn_dim", "decoder_ffn_dim", "dropout")},
    }))  # fmt: skip
    log = (args.output_dir / "trainer.log").open("w")
    cmd = [sys.executable, __file__, "--worker", str(spec)]
    return subprocess.Popen(
        cmd, stdout=log, stderr=subprocess.STDOUT, env=common.worker_env(threads=1), cwd=REPO
    ), result


def trainer_worker(spec_path: str) -> None:
    import sacrebleu
    import torch
    from transformers import DataCollatorForSeq2Seq, Seq2SeqTrainer, Seq2SeqTrainingArguments, TrainerCallback

    spec = json.loads(Path(spec_path).read_text())
    src, tgt, dims = spec["source_lang"], spec["target_lang"], spec["dims"]
    # Same dimensions as the recipe (it has as many encoder as decoder layers and heads).
    marian_dims = dict(d_model=dims["d_model"], layers=dims["encoder_layers"], heads=dims["encoder_attention_heads"],
                       ffn_dim=dims["encoder_ffn_dim"], dropout=dims["dropout"])  # fmt: skip
    tokenizer, model, train = marian_and_training_set(spec, marian_dims, src, tgt, truncation=True, max_length=256)
    steps = {"done": 0}

    class TimeBudget(TrainerCallback):
        def on_train_begin(self, args, state, control, **kwargs):
            self.start = time.monotonic()

        def on_step_end(self, args, state, control, **kwargs):
            steps["done"] = state.global_step
            if time.monotonic() - self.start >= 60 * spec["minutes"]:
                control.should_training_stop = True

    arguments = Seq2SeqTrainingArguments(
        output_dir=spec["output_dir"], per_device_train_batch_size=64, max_steps=10**6, optim="adamw_torch_fused",
        learning_rate=5e-4, adam_beta1=0.9, adam_beta2=0.98, adam_epsilon=1e-9, weight_decay=0.0, warmup_steps=400,
        lr_scheduler_type="inverse_sqrt", label_smoothing_factor=0.1, logging_steps=100, save_strategy="no",
        report_to=[], use_cpu=True, disable_tqdm=True, dataloader_num_workers=0, seed=spec["seed"],
        train_sampling_strategy="group_by_length",
    )  # fmt: skip
    trainer = Seq2SeqTrainer(model=model, args=arguments, train_dataset=train,
                             data_collator=DataCollatorForSeq2Seq(tokenizer, model=model, label_pad_token_id=-100),
                             processing_class=tokenizer, callbacks=[TimeBudget()])  # fmt: skip
    trainer.train()
    model.eval()
    test = [json.loads(line)["translation"] for line in Path(spec["test"]).read_text(encoding="utf-8").splitlines()]
    order = sorted(range(len(test)), key=lambda i: len(test[i][src]))  # similar lengths per batch: less padding
    hypotheses = [""] * len(test)
    with torch.no_grad():
        for start in range(0, len(order), 32):
            chunk = order[start : start + 32]
            batch = tokenizer([test[i][src] for i in chunk], return_tensors="pt", padding=True)
            generated = model.generate(**batch, num_beams=4, length_penalty=0.6, max_new_tokens=256)
            for i, text in zip(chunk, tokenizer.batch_decode(generated, skip_special_tokens=True), strict=True):
                hypotheses[i] = text
    references = [[pair[tgt] for pair in test]]
    bleu_metric, chrf_metric = sacrebleu.BLEU(), sacrebleu.CHRF()  # default settings, as train.py's `evaluate`
    bleu, chrf = bleu_metric.corpus_score(hypotheses, references), chrf_metric.corpus_score(hypotheses, references)
    Path(spec["result"]).write_text(json.dumps({
        "updates": steps["done"], "bleu": bleu.score, "chrf": chrf.score,
        "bleu_signature": str(bleu_metric.get_signature()), "chrf_signature": str(chrf_metric.get_signature()),
    }))  # fmt: skip


def main(argv=None) -> dict:
    args = parse_args(argv)
    if args.worker:
        trainer_worker(args.worker)
        return {}
    tokenizer_dir, test_file, recipe = prepare(args)
    print(f"train.py ({RECIPE.name}) vs Seq2SeqTrainer(MarianMTModel) on {args.data_dir.name}, {args.minutes:g} "
          f"training minutes each, side by side, one thread each; test pairs: "
          f"{args.max_test_samples or 'all'}", flush=True)  # fmt: skip
    ours, ours_dir = start_train_py(args, tokenizer_dir, test_file)
    theirs, theirs_result = start_trainer(args, tokenizer_dir, test_file, recipe)
    for name, process in (("train.py", ours), ("Trainer", theirs)):
        if process.wait() != 0:
            raise SystemExit(f"{name} failed (exit {process.returncode}); see the logs in {args.output_dir}")
    final = json.loads((ours_dir / "results.json").read_text())
    print_candidates(ours_dir, test_file, args, final)
    rows = {
        "train.py": {"updates": final["step"], "bleu": final["test"]["bleu"], "chrf": final["test"]["chrf"],
                     "bleu_signature": final["test"]["bleu_signature"]},
        "Seq2SeqTrainer": json.loads(theirs_result.read_text()),
    }  # fmt: skip
    print("| | updates | test BLEU | test chrF |\n|---|---|---|---|")
    for name, row in rows.items():
        print(f"| {name} | {row['updates']} | {row['bleu']:.1f} | {row['chrf']:.1f} |")
    print(
        f"BLEU signatures: train.py {rows['train.py']['bleu_signature']}; Trainer {rows['Seq2SeqTrainer']['bleu_signature']}"
    )
    gap = rows["train.py"]["bleu"] - rows["Seq2SeqTrainer"]["bleu"]
    print(f"{'MET' if gap >= 5 else 'MISSED'} target train.py >= Trainer + 5 BLEU: {gap:+.1f}")
    common.write_json_report(args.json, args, rows=rows)
    return rows


def print_candidates(run_dir: Path, test_file: Path, args, final: dict) -> None:
    """Score each final-model candidate of a train.py run on the test set (beam 4, length penalty 0.6, as train.py's
    evaluation) and print them with their validation scores and the check of the choice."""
    import torch

    from vaswani.checkpoints import average_into_model
    from vaswani.metrics import load_metric
    from vaswani.translate import Translator

    torch.set_num_threads(2)
    rows = [json.loads(line)["translation"] for line in test_file.read_text(encoding="utf-8").splitlines()]
    sources, references = [r[args.source_lang] for r in rows], [[r[args.target_lang]] for r in rows]
    translator = Translator(run_dir, device="cpu")
    choice, test = final["final_model"], {}
    print(
        f"| candidate | step | checkpoints | validation {choice['metric']} | test BLEU | test chrF |\n|---|---|---|---|---|---|"
    )
    for candidate in choice["candidates"]:
        folders = [run_dir / "checkpoints" / name for name in candidate["checkpoints"]]
        folders = [f if f.is_dir() else run_dir / "best_checkpoint" / f.name for f in folders]
        average_into_model(translator.model, folders)
        hypotheses = translator.translate(sources, num_beams=4, length_penalty=0.6)
        bleu = load_metric("sacrebleu").compute(predictions=hypotheses, references=references)["score"]
        chrf = load_metric("chrf").compute(predictions=hypotheses, references=references)["score"]
        test[candidate["name"]] = bleu
        chosen = " (chosen)" if candidate["name"] == choice["chosen"] else ""
        print(f"| {candidate['name']}{chosen} | {candidate['step']} | {len(folders)} | {candidate['score']:.2f} | "
              f"{bleu:.2f} | {chrf:.2f} |")  # fmt: skip
    floor = max(test["last"], test.get("best", test["last"])) - 0.3
    verdict = "MET" if test[choice["chosen"]] >= floor else "MISSED"
    print(
        f"{verdict} final model's test BLEU {test[choice['chosen']]:.2f} >= best of (last, best) - 0.3 = {floor:.2f}"
    )


if __name__ == "__main__":
    main()
