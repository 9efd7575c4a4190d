"""What the moving average of the weights (--ema_decay, issue 27) costs per update at the small-data dimensions.

One training update of the small-data recipe's model (configs/small-data.yaml: d_model 256, 3+3 layers, 4 heads, FFN
1024, vocab 8000; ~15M parameters) on token-budget batches shaped like gettext-en-es under `--max_tokens 1024`
(bench_compile.py's batches), with and without `WeightEMA.update` after the optimizer step (train.py's order),
timed in interleaved rounds, under bf16 autocast where the CPU computes bf16 natively (train.py's default) or
float32 (`--mixed_precision no`). Also the EMA update timed alone. Prints the CPU, seconds per update, the ratio with
/ without and the A/A noise (the plain update against itself). The issue's target: at most 3% per update.

    python benchmarks/bench_ema.py                       # one thread, ~1 minute
    python benchmarks/bench_ema.py --mixed_precision no --rounds 20
"""

from __future__ import annotations

import argparse
import contextlib
import time

import common  # noqa: E402  (benchmarks/, the folder of this script)
import torch
from bench_compile import batches, recipe_model

from vaswani.devices import resolve_mixed_precision
from vaswani.training.ema import WeightEMA

OPTIONS = {  # name -> (default, help); all positive integers
    "rounds": (10, "interleaved timing rounds"),
    "steps": (5, "updates per candidate and round"),
    "max_tokens": (1024, "batch budget: sentences x longest side"),
    "threads": (1, "torch intra-op threads"),
}


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], allow_abbrev=False)
    for name, (default, help_text) in OPTIONS.items():
        parser.add_argument(f"--{name}", type=int, default=default, help=help_text)
    parser.add_argument("--mixed_precision", choices=["bf16", "no"], default=None,
                        help="autocast precision (default: train.py's on this CPU)")  # fmt: skip
    common.add_aa_argument(parser, "the update without EMA")
    parser.add_argument("--json", help="also write the results to this JSON file")
    args = parser.parse_args(argv)
    for name in OPTIONS:
        if getattr(args, name) < 1:
            parser.error(f"--{name} {getattr(args, name)} is not allowed: use a positive integer")
    return args


class Trainer:
    """The recipe's model, fused Adam, batches, and optionally the weights' moving average (budget decay)."""

    def __init__(self, ema: bool, args: argparse.Namespace, precision: str):
        self.model = recipe_model(256)
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9, fused=True)
        self.ema = WeightEMA(self.model, "auto") if ema else None
        self.batches, self.next, self.precision = batches(64, args.max_tokens, 1, seed=1), 0, precision

    def steps(self, count: int) -> None:
        for _ in range(count):
            batch = self.batches[self.next % len(self.batches)]
            self.next += 1
            autocast = (torch.autocast("cpu", dtype=torch.bfloat16) if self.precision == "bf16"
                        else contextlib.nullcontext())  # fmt: skip
            with autocast:
                loss = self.model(**batch).loss
            loss.backward()
            self.optimizer.step()
            self.optimizer.zero_grad()
            if self.ema is not None:
                self.ema.update(self.next / 2000)  # as in a run of 2,000 updates


def main() -> None:
    args = parse_args()
    torch.set_num_threads(args.threads)
    precision = args.mixed_precision or resolve_mixed_precision(None, "cpu")[0]
    trainers = {"no EMA": Trainer(False, args, precision), "EMA": Trainer(True, args, precision)}
    calls = {name: (lambda t=trainer: t.steps(args.steps)) for name, trainer in trainers.items()}
    if args.aa:
        calls = common.with_aa_copy(calls, "no EMA")
    timings = common.interleave(calls, warmup=1, repeats=args.rounds)
    per_step = {name: [s / args.steps for s in seconds] for name, seconds in timings.seconds.items()}
    ema = trainers["EMA"].ema
    start, repeats = time.perf_counter(), 200
    for _ in range(repeats):
        ema.update(0.5)
    alone = (time.perf_counter() - start) / repeats
    parameters = sum(p.numel() for p in trainers["EMA"].model.parameters())
    print(common.describe_machine(common.machine_description(args.threads)))
    print(f"torch {torch.__version__}, {args.threads} thread(s), {precision}, {parameters / 1e6:.1f}M parameters, "
          f"--max_tokens {args.max_tokens}, {args.rounds} rounds x {args.steps} updates; CPU stalled (median) "
          f"{timings.median_stalled() or 0:.0%}")  # fmt: skip
    speed = {name: [1 / s for s in seconds] for name, seconds in per_step.items()}
    rows = [common.comparison_row(name, seconds, speed[name], speed["no EMA"], ".4f")[0]
            for name, seconds in per_step.items()]  # fmt: skip
    print(common.format_table(["update", "s/update", "range", "speed x no EMA", "ratio range", "rounds faster"], rows))
    median_update = sorted(per_step["no EMA"])[len(per_step["no EMA"]) // 2]
    print(f"EMA update alone: {1000 * alone:.2f} ms = {alone / median_update:.1%} of the median update without EMA")
    print(common.describe_aa(common.aa_summary(speed, "no EMA"), "no EMA"))
    common.write_json_report(args.json, args, seconds_per_update=per_step, ema_update_seconds=alone)


if __name__ == "__main__":
    main()
