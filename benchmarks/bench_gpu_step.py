"""Benchmark: the model's own training step on one GPU, outside train.py, at fixed shapes without padding: the MFU
ceiling train.py works under, and where the GPU time of a step goes (issue 30 item 5; benchmarks/README.md "GPU
throughput and MFU").

    python benchmarks/bench_gpu_step.py                                   # base and big, bf16, two batch shapes
    python benchmarks/bench_gpu_step.py --presets big --profile            # and the top operators of three steps
    python benchmarks/bench_gpu_step.py --device cpu --presets tiny --shapes 8x12x14 --steps 2 --peak_tflops 1 \\
        --profile   # CPU smoke run (the test)

Per preset and shape (ROWSxSOURCExTARGET, every row that long: no padding), one step is a forward pass under bf16
autocast (`sdpa` attention, cuDNN attention off as train.py has it, TF32 matmuls), the model's label-smoothed loss
and its backward pass, then (second row) the same with the fused Adam step. Each row: the mean of --steps steps
after 3 untimed ones, the device synchronized around them; target tokens/s and MFU with bench_gpu.py's FLOP count
(`training_flops`) and peak. The gap between this MFU and bench_gpu.py's (train.py on real-length batches) is the
loop's share (padding, batch making, logging); the gap between this MFU and 100% is the model's own.
The README's H100 figures came from a one-off script with this same model, shapes, steps and timing; this file was
written from it afterwards.

`--fused_loss`, `--compiled_loss`, `--bf16_weights` and `--torch_compile` (each `true` or `false`, as train.py spells
them; default false) apply issue 41's step options the way train.py does (`vaswani.training.speed`: the fused loss's
chunk, the loss compiled, the bfloat16 compute weights held for the passes and released before the optimizer step,
the layers compiled), so that
`--profile` shows where the time of the faster step goes; at fixed shapes a compiled layer compiles once:

    python benchmarks/bench_gpu_step.py --presets big --shapes 200x120x125 --fused_loss true --bf16_weights true \
        --torch_compile true --profile

`--loss_chunk_tokens N` sizes the fused loss's chunks as train.py's option does, and `--vocab_size V` (default 12,112,
bench_gpu.py's synthetic corpus: 12,111 trained tokens, padded to a multiple of 8 as every trained tokenizer is)
probes the alignment of the logits: at 12,111 their rows are not a multiple of 8 elements (16 bytes in bf16) long,
as GPU matrix kernels want them.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench_attention_shapes import VOCAB  # noqa: E402  (bench_gpu's synthetic corpus)
from bench_gpu import model_config, peak_tflops, training_flops  # noqa: E402

from modeling_vaswani import VaswaniForConditionalGeneration  # noqa: E402
from vaswani.devices import disable_cudnn_attention  # noqa: E402
from vaswani.errors import UsageError  # noqa: E402
from vaswani.training.options import str2bool  # noqa: E402
from vaswani.training.speed import ComputeWeights, apply_step_speed, resolve_step_speed  # noqa: E402


def shape(text: str) -> tuple[int, int, int]:
    try:
        rows, source, target = (int(part) for part in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: write ROWSxSOURCExTARGET, e.g. 800x30x32") from None
    if min(rows, source, target) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: every size must be at least 1")
    return rows, source, target


def train_step(model, optimizer, batch: dict, device: str, with_optimizer: bool,
               compute_weights: ComputeWeights) -> None:  # fmt: skip
    """Forward under bf16 autocast, the model's label-smoothed loss, backward (on bfloat16 weights when
    `compute_weights` holds them, as train.py's step does); then the optimizer step if asked."""
    compute_weights.hold()
    with torch.autocast(device, dtype=torch.bfloat16):
        loss = model(**batch).loss
    loss.backward()
    compute_weights.release()  # the float32 weights and gradients back before the optimizer sees them
    if with_optimizer:
        optimizer.step()
    optimizer.zero_grad(set_to_none=True)


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], allow_abbrev=False)
    parser.add_argument("--presets", nargs="+", choices=["tiny", "base", "big"], default=["base", "big"])
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    parser.add_argument(
        "--shapes",
        nargs="+",
        type=shape,
        default=[(800, 30, 32), (200, 120, 125)],
        help="batches as ROWSxSOURCExTARGET (default: 25k target tokens, short and long rows)",
    )
    parser.add_argument("--steps", type=int, default=10, help="timed steps per row")
    parser.add_argument("--peak_tflops", type=float, default=None, help="the device's peak, for MFU")
    parser.add_argument("--profile", action="store_true", help="print the top operators of 3 steps per preset")
    for option, what in (("fused_loss", "the output layer and loss computed together, in chunks"),
                         ("compiled_loss", "the label-smoothed loss compiled, over the logits in their dtype"),
                         ("bf16_weights", "bfloat16 weights for the passes, float32 for the optimizer"),
                         ("torch_compile", "each encoder and decoder layer compiled")):  # fmt: skip
        parser.add_argument(f"--{option}", type=str2bool, default=False, metavar="{true,false}",
                            help=f"train.py's --{option}: {what} (default: false)")  # fmt: skip
    parser.add_argument("--loss_chunk_tokens", type=int, default=None, metavar="N",
                        help="train.py's --loss_chunk_tokens: the fused loss's chunk (default: train.py's)")  # fmt: skip
    parser.add_argument("--vocab_size", type=int, default=VOCAB,
                        help=f"the model's vocabulary (default: {VOCAB}, bench_gpu.py's synthetic corpus; an odd size "
                             "leaves the logits' rows unaligned for a GPU's matrix kernels)")  # fmt: skip
    args = parser.parse_args(argv)
    if args.loss_chunk_tokens is not None and args.loss_chunk_tokens < 1:
        parser.error(f"--loss_chunk_tokens {args.loss_chunk_tokens} is not allowed: use 1 or more")
    if args.vocab_size < 5:
        parser.error(f"--vocab_size {args.vocab_size} is not allowed: use 5 or more (4 special tokens and a word)")
    if args.steps < 1:
        parser.error(f"--steps {args.steps} is not allowed: use 1 or more")
    try:  # train.py's own refusals (e.g. --loss_chunk_tokens without --fused_loss true)
        args.speed = step_speed(args)
    except UsageError as error:
        parser.error(str(error))
    return args


def step_speed(args):
    """train.py's resolution of the step options (`resolve_step_speed`) for this benchmark's flags: one process,
    bf16, fixed shapes (no shape buckets)."""
    options = argparse.Namespace(task="translation", torch_compile=args.torch_compile, torch_compile_mode=None,
                                 shape_buckets=False, num_shape_buckets=None, fused_loss=args.fused_loss,
                                 loss_chunk_tokens=args.loss_chunk_tokens, compiled_loss=args.compiled_loss,
                                 bf16_weights=args.bf16_weights)  # fmt: skip
    return resolve_step_speed(options, args.device, "bf16", 1, args.vocab_size)


def main(argv=None) -> list[dict]:
    args = parse_args(argv)
    torch.manual_seed(0)
    disable_cudnn_attention(args.device)
    if args.device == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
    peak, peak_source = peak_tflops(args.device, args.peak_tflops)
    print(f"torch {torch.__version__}, {args.device}, peak {peak} TFLOP/s ({peak_source})")

    def synchronize() -> None:
        if args.device == "cuda":
            torch.cuda.synchronize()

    rows = []
    for preset in args.presets:
        config = model_config(preset, args.vocab_size)
        config._attn_implementation = "sdpa"
        model = VaswaniForConditionalGeneration(config).to(args.device).train()
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
        speed = args.speed
        apply_step_speed(model, speed)
        compute_weights = ComputeWeights(model, speed.bf16_weights)
        print(f"{preset}: {speed.describe()}", flush=True)
        for batch_rows, source, target in args.shapes:
            input_ids = torch.randint(4, args.vocab_size, (batch_rows, source), device=args.device)  # (B, S)
            labels = torch.randint(4, args.vocab_size, (batch_rows, target), device=args.device)  # (B, T)
            batch = {"input_ids": input_ids, "attention_mask": torch.ones_like(input_ids), "labels": labels}

            for label, with_optimizer in (("forward+backward", False), ("+ fused Adam", True)):
                for _ in range(3):
                    train_step(model, optimizer, batch, args.device, with_optimizer, compute_weights)
                synchronize()
                start = time.perf_counter()
                for _ in range(args.steps):
                    train_step(model, optimizer, batch, args.device, with_optimizer, compute_weights)
                synchronize()
                seconds = (time.perf_counter() - start) / args.steps
                flops = batch_rows * training_flops(config, source, target)
                row = {"preset": preset, "shape": f"{batch_rows}x{source}x{target}", "step": label,
                       "ms": seconds * 1000, "target_tokens_per_second": batch_rows * target / seconds,
                       "mfu": flops / seconds / (peak * 1e12) if peak else None}  # fmt: skip
                rows.append(row)
                mfu = f"{row['mfu']:.1%}" if row["mfu"] is not None else "n/a"
                print(f"{preset} {row['shape']} {label}: {row['ms']:.1f} ms/step, "
                      f"{row['target_tokens_per_second']:,.0f} target tokens/s, MFU {mfu}", flush=True)  # fmt: skip
        if args.profile:
            from torch.profiler import ProfilerActivity, profile

            activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if args.device == "cuda" else [])
            with profile(activities=activities) as prof:
                for _ in range(3):
                    train_step(model, optimizer, batch, args.device, True, compute_weights)
                synchronize()
            sort = "cuda_time_total" if args.device == "cuda" else "cpu_time_total"
            print(prof.key_averages().table(sort_by=sort, row_limit=18, max_name_column_width=60), flush=True)
    return rows


if __name__ == "__main__":
    main()
