"""`vaswani train --task causal_lm|masked_lm` on the English side of gettext-en-es, against the baselines a language
model must beat (issue 20, item 3; numbers in benchmarks/README.md, "Language models from the front door"):

- causal LM: validation perplexity against a unigram model (the training text's token frequencies, add-one
  smoothed; and, as a lower bound no unigram model can pass, the validation text's own frequencies);
- masked LM: masked-token accuracy against always guessing the training text's most frequent token.

    python benchmarks/bench_train_lm.py --minutes 6 --output runs/bench-lm

Each task is one `train.py` run (a small model for a shared CPU: d_model 128, 2 layers, PreNorm + ScaleNorm +
FixNorm, 4k BPE, blocks of 64 tokens, 16 per batch) with a time budget; the baselines are computed with the
tokenizer that run trained. Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
DATA = REPO_ROOT.parent / "shared" / "data" / "gettext-en-es"
MODEL = ["--vocab_size", "4000", "--d_model", "128", "--norm_position", "pre", "--norm_type", "scalenorm",
         "--fixnorm", "true", "--dropout", "0.1", "--learning_rate", "2e-3", "--warmup_steps", "100"]  # fmt: skip
STACKS = {
    "causal_lm": ["--decoder_layers", "2", "--decoder_attention_heads", "4", "--decoder_ffn_dim", "512"],
    "masked_lm": ["--encoder_layers", "2", "--encoder_attention_heads", "4", "--encoder_ffn_dim", "512"],
}


def english(path: Path) -> list[str]:
    return [json.loads(line)["translation"]["en"] for line in path.read_text(encoding="utf-8").splitlines()]


def baselines(tokenizer, train: list[str], validation: list[str]) -> dict:
    """Unigram perplexities of the validation text and the most-frequent-token accuracy at its (uniformly placed)
    masked positions."""
    special = set(tokenizer.all_special_ids)
    train_counts = Counter(t for ids in tokenizer(train)["input_ids"] for t in ids)
    held_out = [t for ids in tokenizer(validation)["input_ids"] for t in ids]
    total = sum(train_counts.values()) + len(tokenizer)
    unigram = math.exp(-sum(math.log((train_counts[t] + 1) / total) for t in held_out) / len(held_out))
    own = Counter(held_out)
    oracle = math.exp(-sum(c * math.log(c / len(held_out)) for c in own.values()) / len(held_out))
    words = Counter({t: c for t, c in train_counts.items() if t not in special})
    best = words.most_common(1)[0][0]
    maskable = [t for t in held_out if t not in special]
    return {"unigram_perplexity": unigram, "unigram_perplexity_of_validation_itself": oracle,
            "most_frequent_token_accuracy": maskable.count(best) / len(maskable)}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=DATA, help="the gettext-en-es folder")
    parser.add_argument("--minutes", type=float, default=6.0, help="--max_train_minutes of each task")
    parser.add_argument("--output", type=Path, default=Path("runs/bench-lm"), help="where the two runs go")
    args = parser.parse_args()
    sys.path.insert(0, str(REPO_ROOT))
    from vaswani.model_folder import load_tokenizer  # registers the Vaswani model types: no remote-code prompt

    data = ["--train_file", str(args.data / "train.jsonl"), "--validation_file", str(args.data / "validation.jsonl"),
            "--text_column", "translation.en", "--block_size", "64", "--max_tokens", "1024"]  # fmt: skip
    train, validation = english(args.data / "train.jsonl"), english(args.data / "validation.jsonl")
    report = {}
    for task, stack in STACKS.items():
        out = args.output / task
        command = [sys.executable, str(REPO_ROOT / "train.py"), "--task", task, *data, *MODEL, *stack,
                   "--max_train_minutes", str(args.minutes), "--eval_steps", "300", "--logging_steps", "50",
                   "--report_to", "none", "--output_dir", str(out), "--overwrite_output_dir"]  # fmt: skip
        subprocess.run(command, check=True, env={**os.environ, "HF_HUB_OFFLINE": "1"})
        results = json.loads((out / "results.json").read_text())
        report[task] = {"command": " ".join(command[1:]), "updates": results["step"], "validation":
                        results["validation"], **baselines(load_tokenizer(out), train, validation)}  # fmt: skip
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
