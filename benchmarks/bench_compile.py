"""Does `torch.compile` pay for train.py's model on this machine? (issue 14, "measure what else pays")

One training step (forward, label-smoothed loss, backward, fused Adam) of the small-data recipe's model
(configs/small-data.yaml: d_model 256, 3+3 layers, PreNorm, vocab 8000) on token-budget batches shaped like
gettext-en-es under `--max_tokens 1024` (about 86 pairs of 8-16 tokens: every batch has its own shape, as
train.py's bucketed batches do), timed for three candidates in interleaved rounds:

    eager                 the model as train.py runs it
    compiled              torch.compile(model, dynamic=True): one graph for all batch shapes
    compiled, pad to 8    the same, with batch lengths padded to a multiple of 8 (fewer distinct shapes)
    eager (A/A)           a second eager model on the same batches (`--no-aa` to skip): the noise of a ratio

Compilation time (the first steps of each compiled candidate) is reported apart and those steps are the warm-up.
Prints the CPU and its flags, seconds per step and the per-round ratio to eager (median and range), and the A/A
noise (eager against its copy).

    python benchmarks/bench_compile.py                  # 12 rounds of 4 steps, one thread
    python benchmarks/bench_compile.py --threads 2 --rounds 20
"""

from __future__ import annotations

import argparse
import time

import common  # noqa: E402  (benchmarks/, the folder of this script)
import torch

EAGER_AA = "eager" + common.AA_SUFFIX

# The options, all positive integers: name -> (default, help).
OPTIONS = {
    "rounds": (12, "interleaved timing rounds"),
    "steps": (4, "training steps per candidate and round"),
    "max_tokens": (1024, "batch budget: sentences x longest side"),
    "threads": (1, "torch intra-op threads"),
    "d_model": (256, "model width (recipe: 256); FFN 4 x d_model, 3+3 layers, 4 heads"),
}


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], allow_abbrev=False)
    for name, (default, help_text) in OPTIONS.items():
        parser.add_argument(f"--{name}", type=int, default=default, help=help_text)
    common.add_aa_argument(parser, "eager (a second, identical model on the same batches)")
    parser.add_argument("--json", help="also write the results to this JSON file")
    args = parser.parse_args(argv)
    for name in OPTIONS:
        if getattr(args, name) < 1:
            parser.error(f"--{name} {getattr(args, name)} is not allowed: use a positive integer")
    return args


def recipe_model(d_model: int):
    from modeling_vaswani import VaswaniConfig, VaswaniForConditionalGeneration

    torch.manual_seed(0)
    config = VaswaniConfig(
        vocab_size=8000, d_model=d_model, encoder_layers=3, decoder_layers=3, encoder_attention_heads=4,
        decoder_attention_heads=4, encoder_ffn_dim=4 * d_model, decoder_ffn_dim=4 * d_model, norm_position="pre",
    )  # fmt: skip
    return VaswaniForConditionalGeneration(config).train()


def batches(count: int, max_tokens: int, pad_to: int, seed: int) -> list[dict]:
    """Random token batches shaped like gettext-en-es under a token budget: lengths 8-16, as many pairs as fit."""
    generator = torch.Generator().manual_seed(seed)
    result = []
    for _ in range(count):
        source_len, target_len = (int(torch.randint(8, 17, (1,), generator=generator)) for _ in range(2))
        if pad_to > 1:
            source_len, target_len = (-(-n // pad_to) * pad_to for n in (source_len, target_len))
        rows = max_tokens // max(source_len, target_len)
        input_ids = torch.randint(4, 8000, (rows, source_len), generator=generator)
        labels = torch.randint(4, 8000, (rows, target_len), generator=generator)
        result.append({"input_ids": input_ids, "attention_mask": torch.ones_like(input_ids), "labels": labels})
    return result


class Candidate:
    """A model, its fused Adam and an endless supply of batches; `step()` is one training update."""

    def __init__(self, compiled: bool, pad_to: int, args: argparse.Namespace):
        self.model = recipe_model(args.d_model)
        self.forward = torch.compile(self.model, dynamic=True) if compiled else self.model
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9, fused=True)
        self.batches, self.next = batches(64, args.max_tokens, pad_to, seed=1), 0

    def step(self) -> None:
        batch = self.batches[self.next % len(self.batches)]
        self.next += 1
        loss = self.forward(**batch).loss
        loss.backward()
        self.optimizer.step()
        self.optimizer.zero_grad()

    def steps(self, count: int) -> None:
        for _ in range(count):
            self.step()


def main() -> None:
    args = parse_args()
    torch.set_num_threads(args.threads)
    candidates = {
        "eager": Candidate(False, 1, args),
        **({EAGER_AA: Candidate(False, 1, args)} if args.aa else {}),  # a second instance: the same batches
        "compiled": Candidate(True, 1, args),
        "compiled, pad to 8": Candidate(True, 8, args),
    }
    warmup = {}
    for name, candidate in candidates.items():  # compilation (and recompilation for new shapes) happens here
        start = time.perf_counter()
        candidate.steps(2 * args.steps)
        warmup[name] = time.perf_counter() - start
    calls = {name: (lambda c=candidate: c.steps(args.steps)) for name, candidate in candidates.items()}
    timings = common.interleave(calls, warmup=0, repeats=args.rounds)
    per_step = {name: [s / args.steps for s in seconds] for name, seconds in timings.seconds.items()}
    print(common.describe_machine(common.machine_description(args.threads)))
    print(f"torch {torch.__version__}, {args.threads} thread(s), d_model {args.d_model}, --max_tokens "
          f"{args.max_tokens}, {args.rounds} rounds x {args.steps} steps; CPU stalled (median) "
          f"{timings.median_stalled() or 0:.0%}")  # fmt: skip
    rows = []
    speed = {name: [1 / s for s in seconds] for name, seconds in per_step.items()}
    for name, seconds in per_step.items():
        cells, _ = common.comparison_row(name, seconds, speed[name], speed["eager"], ".3f")
        rows.append([*cells, f"{warmup[name]:.0f}"])
    print(common.format_table(
        ["candidate", "s/step", "range", "speed x eager", "ratio range", "rounds faster", f"first {2 * args.steps} "
         "steps (s)"], rows))  # fmt: skip
    print(common.describe_aa(common.aa_summary(speed, "eager"), "eager"))
    common.write_json_report(args.json, args, seconds_per_step=per_step, warmup_seconds=warmup)


if __name__ == "__main__":
    main()
