"""A few LayerDrop training steps under `accelerate launch --cpu --num_processes 2` (DDP over gloo).

Each rank gets batches of a different shape (as token-based batching gives), so the global RNG streams of the
ranks diverge; LayerDrop must still skip the same layers on every rank. Writes a JSON report from the main
process: the skip decisions and a parameter checksum of every rank.

    accelerate launch --cpu --num_processes 2 tests/scripts/layerdrop_ddp.py OUT.json [--find_unused_parameters 0]
"""

import argparse
import json

import torch
from accelerate import Accelerator
from accelerate.utils import DistributedDataParallelKwargs, gather_object

from modeling_vaswani import VaswaniConfig, VaswaniForConditionalGeneration


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("output")
    parser.add_argument("--find_unused_parameters", type=int, default=None, help="default: model.uses_layerdrop")
    parser.add_argument("--steps", type=int, default=6)
    args = parser.parse_args()

    torch.manual_seed(0)  # identical initial weights on every rank
    # Both stacks alike: 4 layers, half of them skipped on average (LayerDrop 0.5), DropHead 0.2.
    stack = dict(layers=4, attention_heads=2, ffn_dim=32, layerdrop=0.5, drophead=0.2)
    config = VaswaniConfig(
        vocab_size=50,
        d_model=16,
        cross_drophead=0.2,
        **{f"{side}_{name}": value for side in ("encoder", "decoder") for name, value in stack.items()},
    )
    model = VaswaniForConditionalGeneration(config)
    find_unused = model.uses_layerdrop if args.find_unused_parameters is None else bool(args.find_unused_parameters)
    accelerator = Accelerator(kwargs_handlers=[DistributedDataParallelKwargs(find_unused_parameters=find_unused)])

    decisions = []
    for side in ("encoder", "decoder"):
        stack = getattr(model.model, side)
        original = stack.layerdrop.sample

        def record(num_layers, training, original=original, side=side):
            skip = original(num_layers, training)
            decisions.append([side, skip])
            return skip

        stack.layerdrop.sample = record

    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    model, optimizer = accelerator.prepare(model, optimizer)
    rank = accelerator.process_index
    generator = torch.Generator().manual_seed(100 + rank)  # different data (and shapes) on each rank
    torch.manual_seed(1000 + rank)  # and different global RNG streams (dropout, DropHead)
    model.train()
    error = None
    try:
        for step in range(args.steps):
            batch_size, src_len, tgt_len = 2 + rank + step % 2, 5 + 3 * rank, 4 + rank
            input_ids = torch.randint(4, 50, (batch_size, src_len), generator=generator)
            labels = torch.randint(4, 50, (batch_size, tgt_len), generator=generator)
            loss = model(input_ids=input_ids, labels=labels).loss
            accelerator.backward(loss)
            optimizer.step()
            optimizer.zero_grad()
    except RuntimeError as exc:  # reported to the test instead of a traceback from two processes
        error = str(exc)
    checksum = None if error else sum(p.detach().double().sum().item() for p in model.parameters())
    reports = gather_object([{"rank": rank, "decisions": decisions, "checksum": checksum, "error": error}])
    if accelerator.is_main_process:
        with open(args.output, "w") as f:
            json.dump({"find_unused_parameters": find_unused, "reports": reports}, f)
    # The process group ends from Python's side, as vaswani.training.loop.close ends a run: the DDP model released
    # first, then the group. Left to the interpreter's exit, gloo's threads can abort the process (SIGABRT,
    # "terminate called without an active exception"; seen in CI).
    model = optimizer = None
    accelerator.free_memory()
    accelerator.end_training()


if __name__ == "__main__":
    main()
