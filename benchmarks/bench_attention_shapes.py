"""Benchmark: training-step time of the attention kernels when every batch has a new shape, as batches cut by
`--max_tokens` do (issue 30; benchmarks/README.md "GPU throughput and MFU").

    python benchmarks/bench_attention_shapes.py                     # GPU: base model, bf16 autocast
    python benchmarks/bench_attention_shapes.py --device cpu --preset tiny --steps 2 --tokens 600   # CPU smoke run

One forward + backward of a freshly built model per step, about `--tokens` source tokens per batch (half the rows
padded to half their length), a new (batch, source length, target length) shape at every step; the device is
synchronized around the timed steps (one untimed step first). Rows, in this order: eager attention; `sdpa` with
PyTorch's cuDNN attention backend allowed; `sdpa` with it off (what train.py and the translator use on a GPU,
`vaswani.devices.disable_cudnn_attention`); `sdpa` with it allowed again over the same shapes (its plans cached).
The README's H100 figures came from a one-off script with these same batches, rows and timing; this file was
written from it afterwards and has run on a CPU only (the session's device time was spent).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from modeling_vaswani import VaswaniConfig, VaswaniForConditionalGeneration  # noqa: E402

TINY = {"d_model": 32, "encoder_layers": 2, "decoder_layers": 2, "encoder_attention_heads": 2,
        "decoder_attention_heads": 2, "encoder_ffn_dim": 64, "decoder_ffn_dim": 64}  # fmt: skip
VOCAB = 12112  # bench_gpu's synthetic corpus: 12,111 trained tokens and a filler (a multiple of 8)


def batch(step: int, tokens: int, device: str) -> dict:
    """A batch of about `tokens` source tokens whose shape differs at every step."""
    source_length, target_length = 20 + 7 * step, 22 + 5 * step
    rows = max(8, tokens // source_length)
    input_ids = torch.randint(4, VOCAB, (rows, source_length), device=device)  # (B, S)
    labels = torch.randint(4, VOCAB, (rows, target_length), device=device)  # (B, T)
    attention_mask = torch.ones(rows, source_length, dtype=torch.long, device=device)
    attention_mask[::2, source_length // 2 :] = 0
    return {"input_ids": input_ids, "attention_mask": attention_mask, "labels": labels}


def time_steps(implementation: str, args) -> float:
    """Milliseconds per training step (mean over --steps, after one untimed step)."""
    config = (VaswaniConfig(vocab_size=VOCAB, **TINY) if args.preset == "tiny"
              else VaswaniConfig.from_preset(args.preset, vocab_size=VOCAB))  # fmt: skip
    config._attn_implementation = implementation
    model = VaswaniForConditionalGeneration(config).to(args.device).train()
    autocast = torch.autocast(args.device, dtype=torch.bfloat16, enabled=args.device == "cuda")

    def step(index: int) -> None:
        with autocast:
            loss = model(**batch(index, args.tokens, args.device)).loss
        loss.backward()

    def synchronize() -> None:
        if args.device == "cuda":
            torch.cuda.synchronize()

    step(0)
    synchronize()
    start = time.perf_counter()
    for index in range(1, args.steps + 1):
        step(index)
    synchronize()
    return (time.perf_counter() - start) / args.steps * 1000


def main(argv=None) -> list[tuple[str, float]]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], allow_abbrev=False)
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    parser.add_argument("--preset", choices=["tiny", "base", "big"], default="base")
    parser.add_argument("--steps", type=int, default=8, help="timed steps, each with a new shape")
    parser.add_argument("--tokens", type=int, default=12000, help="source tokens per batch, about")
    args = parser.parse_args(argv)
    torch.manual_seed(0)
    cudnn = torch.backends.cuda.cudnn_sdp_enabled()
    rows = []
    try:
        for label, implementation, allow_cudnn in [
            ("eager", "eager", True), ("sdpa, cuDNN attention allowed", "sdpa", True),
            ("sdpa, cuDNN attention off", "sdpa", False), ("sdpa, cuDNN allowed, same shapes again", "sdpa", True),
        ]:  # fmt: skip
            torch.backends.cuda.enable_cudnn_sdp(allow_cudnn)
            rows.append((label, time_steps(implementation, args)))
            print(f"{label}: {rows[-1][1]:.1f} ms per step (a new shape every step)", flush=True)
    finally:
        torch.backends.cuda.enable_cudnn_sdp(cudnn)
    return rows


if __name__ == "__main__":
    main()
