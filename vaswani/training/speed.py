"""The training step's speed options (issue 41): what the fastest GPU implementations of the paper's model do
(`../shared/reference/gpu-anchors.md`), each an option of `vaswani train`, automatic by default.

- `--shape_buckets` (`--num_shape_buckets K`): every batch has one of at most K shapes (rows, source length, target
  length), so a compiled step is compiled once per shape (`vaswani.data.batching`, module docstring 5).
- `--torch_compile` (`--torch_compile_mode`): each encoder and decoder layer compiled (`torch.compile`), one compiled
  graph for all layers of a kind (regional compilation), with torch's automatic dynamic shapes: compiled for the
  first batch's shape, then once more with the sizes that changed left symbolic, so a run compiles a handful of
  graphs whatever its shapes (CUDA graphs, `reduce-overhead`, still record one graph per shape: the buckets bound
  them). LayerDrop's per-step draws stay outside the compiled layers and DropHead's rate is a tensor
  (`modeling_vaswani.DropHead`): neither compiles again. Evaluations run the layers eagerly
  (`vaswani.training.evaluation.evaluation_mode`). New graphs are counted (`Recompilations`) and logged.
- `--fused_loss` (`--loss_chunk_tokens N`): the output layer and the label-smoothed loss computed together, a chunk of
  target tokens at a time (`modeling_vaswani.ChunkedOutputLoss`): the (tokens x vocabulary) logits are never held in
  float32 at once.
- `--compiled_loss`: the label-smoothed loss compiled (`torch.compile` of
  `modeling_vaswani.label_smoothed_cross_entropy_sum`): one pass over the logits in their own dtype forward and one
  backward, where the eager loss makes several over a float32 copy of them.
- `--bf16_weights`: the forward and backward passes run on bfloat16 copies of the linear layers' weights, the
  optimizer on the float32 weights (`ComputeWeights`): autocast's casts of those weights in every pass are gone; checkpoints, the
  moving average, averaging and the saved model keep float32 weights, because between updates the model holds them.

`AUTOMATIC` says where each is on when not given: only where an interleaved A/B of train.py measured it at least
1.05x as fast with no loss of BLEU (benchmarks/README.md, "The training step's speed options"); elsewhere off.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from vaswani.devices import cpu_compiler_problem, separate_kernel_cache_per_instruction_set
from vaswani.errors import UsageError

# torch is imported by the functions that need it: the command line's parser reads COMPILE_MODES from here

logger = logging.getLogger("train")

COMPILE_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")  # torch.compile's
# device type -> option -> on when not given. CPU: measured, none reaches 1.05x (benchmarks/README.md). CUDA: four H200
# sessions (benchmarks/README.md, "Issue 41's step options on a GPU" to "The step on a GPU, fourth session"): the fused
# loss 0.80x (0.98x with 4,096-token chunks; off), bf16 weights alone 1.04x (inside the noise), the compiled layers
# with buckets and bf16 weights 1.07-1.32x on big and 0.97-1.105x on base, but BLEU not measured on a GPU: all off.
# The compiled loss: 1.037x on one CPU thread (small-data), not yet measured on a GPU (gpu_step_ab.sh's group 3).
AUTOMATIC = {
    "cpu": {"torch_compile": False, "fused_loss": False, "compiled_loss": False, "bf16_weights": False},
    "cuda": {"torch_compile": False, "fused_loss": False, "compiled_loss": False, "bf16_weights": False},
}
LOSS_CHUNK_ELEMENTS = 2**22  # a chunk of the fused loss holds about this many logits (16 MiB in float32)


@dataclass
class StepSpeed:
    """The resolved speed options of a run, and why each is what it is (for the log)."""

    shape_buckets: int | None = None  # the number of shapes, or None: batches as long as their longest pair
    torch_compile: bool = False
    torch_compile_mode: str | None = None
    loss_chunk_tokens: int | None = None  # the fused loss's chunk, or None: logits, then the loss
    compiled_loss: bool = False  # the loss of the logits compiled
    bf16_weights: bool = False
    reasons: dict[str, str] = field(default_factory=dict)

    def describe(self) -> str:
        return "; ".join(f"{name} {reason}" for name, reason in self.reasons.items())


def resolve_step_speed(args, device_type: str, mixed_precision: str, num_processes: int,
                       vocab_size: int) -> StepSpeed:  # fmt: skip
    """The run's `StepSpeed` from its options (None: automatic, `AUTOMATIC`), checked against the task, the device,
    the precision and the number of processes. A combination that cannot work is a `UsageError`."""
    automatic = AUTOMATIC.get(device_type, AUTOMATIC["cpu"])
    speed = StepSpeed()
    translation = args.task == "translation"

    def choose(name: str, allowed: bool, why_not: str) -> bool:
        given = getattr(args, name)
        if given and not allowed:
            raise UsageError(f"--{name} true {why_not}")
        if given is not None:
            speed.reasons[name] = f"{'on' if given else 'off'} (--{name} {str(given).lower()})"
            return bool(given)
        on = automatic.get(name, False) and allowed
        speed.reasons[name] = f"{'on' if on else 'off'} (automatic on {device_type.upper()})"
        return on

    compiling = any(getattr(args, name) or automatic.get(name) for name in ("torch_compile", "compiled_loss"))
    problem = cpu_compiler_problem() if compiling and device_type == "cpu" else None
    no_compiler = (f"builds C++ kernels on a CPU (torch.compile's inductor) and found {problem}: install one "
                   "(e.g. apt-get install g++, or point CXX at one) or leave it off")  # fmt: skip
    speed.torch_compile = choose("torch_compile", problem is None, no_compiler)
    if args.torch_compile_mode is not None:
        if not speed.torch_compile:
            raise UsageError(f"--torch_compile_mode {args.torch_compile_mode} needs --torch_compile true")
        if args.torch_compile_mode == "reduce-overhead" and device_type != "cuda":
            raise UsageError("--torch_compile_mode reduce-overhead records CUDA graphs: it needs a CUDA GPU; use "
                             "default or max-autotune-no-cudagraphs on this device")  # fmt: skip
    speed.torch_compile_mode = args.torch_compile_mode or ("default" if speed.torch_compile else None)
    buckets = args.shape_buckets
    if buckets and not translation:
        raise UsageError(f"--shape_buckets true pads translation batches; --task {args.task} has its own shapes")
    if buckets is None:  # automatic: where the step is compiled (a compiled step pays once per shape)
        buckets = speed.torch_compile and translation
        speed.reasons["shape_buckets"] = f"{'on' if buckets else 'off'} (automatic: with --torch_compile)"
    else:
        speed.reasons["shape_buckets"] = f"{'on' if buckets else 'off'} (--shape_buckets {str(buckets).lower()})"
    speed.shape_buckets = args.num_shape_buckets if buckets else None
    if speed.shape_buckets:
        speed.reasons["shape_buckets"] += f", at most {speed.shape_buckets} shapes"
    fused = choose("fused_loss", translation, f"computes a translation model's loss; --task {args.task} has its own")
    if args.loss_chunk_tokens is not None and not fused:
        raise UsageError(f"--loss_chunk_tokens {args.loss_chunk_tokens} sizes the fused loss's chunks: it needs "
                         "--fused_loss true")  # fmt: skip
    speed.loss_chunk_tokens = (args.loss_chunk_tokens or max(1, LOSS_CHUNK_ELEMENTS // vocab_size)) if fused else None
    if fused:
        speed.reasons["fused_loss"] += f", {speed.loss_chunk_tokens} target tokens a chunk"
    why = (f"computes a translation model's loss; --task {args.task} has its own" if not translation
           else "compiles the loss of the logits, which --fused_loss true never makes: choose one" if fused
           else no_compiler)  # fmt: skip
    speed.compiled_loss = choose("compiled_loss", translation and not fused and problem is None, why)
    why = ("needs --mixed_precision bf16 (the weights are cast for bf16 compute)" if mixed_precision != "bf16"
           else "runs in one process (data-parallel training reduces float32 gradients)")  # fmt: skip
    speed.bf16_weights = choose("bf16_weights", mixed_precision == "bf16" and num_processes == 1, why)
    return speed


def check_step_speed(args, device_type: str, mixed_precision: str, num_processes: int) -> None:
    """`resolve_step_speed`'s checks alone, before the vocabulary is known (it only sizes the fused loss's chunks):
    train.py makes them before it reads any data or trains a tokenizer, so that a mistake costs no time."""
    resolve_step_speed(args, device_type, mixed_precision, num_processes, vocab_size=1)


def apply_step_speed(model, speed: StepSpeed) -> list[str]:
    """Apply the resolved options to a translation `model` as train.py's step uses them: the fused loss's chunk, the
    layers compiled (--torch_compile) and the loss compiled (--compiled_loss). Returns what was compiled, for the
    log (nothing compiles before its first call)."""
    model.loss_chunk_tokens = speed.loss_chunk_tokens
    compiled = []
    if speed.torch_compile:
        layers = compile_layers(model, speed.torch_compile_mode)
        compiled.append(f"{layers} layers (torch.compile, mode {speed.torch_compile_mode}, automatic dynamic shapes)")
    if speed.compiled_loss:
        compile_loss(model)
        compiled.append("the training loss (torch.compile, mode default, automatic dynamic shapes)")
    return compiled


def compile_layers(model, mode: str) -> int:
    """Compile every encoder and decoder layer of `model` (`torch.compile` with `mode` and automatic dynamic shapes):
    the layers of a kind share their compiled graphs. Returns how many layers were compiled. The cache limits are
    raised so that the training and DropHead variants of each kind never make dynamo give up and run a layer eagerly
    (evaluations run them eagerly on purpose: `vaswani.training.evaluation.evaluation_mode`)."""
    import torch
    from transformers.modeling_layers import GradientCheckpointingLayer

    separate_kernel_cache_per_instruction_set()
    torch._dynamo.config.cache_size_limit = max(torch._dynamo.config.cache_size_limit, 256)
    torch._dynamo.config.accumulated_cache_size_limit = max(torch._dynamo.config.accumulated_cache_size_limit, 4096)
    layers = [module for module in model.modules() if isinstance(module, GradientCheckpointingLayer)]
    for layer in layers:
        layer.compile(mode=None if mode == "default" else mode)
    return len(layers)


def compile_loss(model) -> None:
    """Give `model` (a translation model) its training loss compiled: `torch.compile` of
    `label_smoothed_cross_entropy_sum` in the default mode (no CUDA graphs: the loss a micro-batch returns must
    outlive the next one's) with automatic dynamic shapes (compiled for the first batch's number of target tokens,
    then once more with it symbolic), which the model calls in training instead of its eager loss
    (`VaswaniForConditionalGeneration.label_smoothed_loss`)."""
    import torch

    from modeling_vaswani.modeling_vaswani import label_smoothed_cross_entropy_sum  # start-up: loads torch

    separate_kernel_cache_per_instruction_set()
    model.compiled_loss = torch.compile(label_smoothed_cross_entropy_sum)


class Recompilations:
    """The graphs dynamo compiled since this object was made (its `unique_graphs` counter), for the log."""

    def __init__(self):
        self.start = self.total()

    @staticmethod
    def total() -> int:
        from torch._dynamo.utils import counters

        return int(counters["stats"]["unique_graphs"])

    def count(self) -> int:
        return self.total() - self.start


class ComputeWeights:
    """bfloat16 weights for the forward and backward passes of an update, float32 weights for everything else.

    `hold()` (before an update's first micro-batch) swaps the data of the linear layers' weights
    (`matrix_product_weights`) for bfloat16 copies;
    `collect()` (after each micro-batch's backward pass) adds its bfloat16 gradients into float32 ones; `release()`
    (before clipping and the optimizer step) puts the float32 weights back, with the float32 gradients. The optimizer
    therefore updates the float32 weights (the master copy) and every reader between updates (checkpoints, the moving
    average, evaluation) sees them. The bfloat16 copies are made once and refreshed in place at every `hold()`, so the
    passes see the same tensors at the same addresses update after update: CUDA graphs (`--torch_compile_mode
    reduce-overhead`) take the weights' addresses as fixed, and a new copy each update would make them record again.
    The copies and the gradients' conversions are multi-tensor operations (`torch._foreach_copy_`, as torch.optim's
    foreach optimizers use): on a GPU a few kernels for all weights instead of one per weight and direction (base has
    132 such weights and biases: 264 kernels an update, benchmarks/README.md "The step on a GPU, fourth session").
    A no-op when `enabled` is False."""

    def __init__(self, model, enabled: bool):
        import torch

        self.params = self.matrix_product_weights(model) if enabled else []
        self.dtype = torch.bfloat16
        # the bfloat16 copies, made once (on the weights' device) and refreshed in place at every hold()
        self.copies = [torch.empty_like(p, dtype=self.dtype) for p in self.params]
        self.master: list = []  # the float32 weights while the bfloat16 copies are held
        # the float32 gradient sums, made once and reused every update (`collect`); `grads` says which hold this update's
        self.sums = [torch.empty_like(p, dtype=torch.float32) for p in self.params]
        self.grads: list = []  # per weight, its tensor of `sums` once a micro-batch of the update gave it a gradient

    @staticmethod
    def matrix_product_weights(model) -> list:
        """The trainable weights and biases of the linear layers, those autocast casts to bfloat16 for every product;
        not a matrix shared with an embedding (tied output projection): embeddings and norms stay float32, so the
        residual stream stays float32 as under autocast, and the passes compute exactly what autocast computes."""
        import torch

        embedded = {id(p) for m in model.modules() if isinstance(m, torch.nn.Embedding) for p in m.parameters()}
        linear = {id(p): p for m in model.modules() if isinstance(m, torch.nn.Linear) for p in m.parameters()}
        return [p for key, p in linear.items() if p.requires_grad and key not in embedded]

    def hold(self) -> None:
        import torch

        if not self.params:
            return
        self.master = [p.data for p in self.params]
        self.grads = [None] * len(self.params)
        torch._foreach_copy_(self.copies, self.master)  # the optimizer's new float32 values, rounded as .to() rounds
        for param, copy in zip(self.params, self.copies, strict=True):
            param.data = copy

    def collect(self) -> None:
        """The bfloat16 gradients of the micro-batch just done, into the float32 sums (a weight without a gradient,
        e.g. in a layer LayerDrop skipped, is left out). The float32 tensors (`sums`) are made once and reused every update
        (so they stay allocated between updates: 4 bytes a weight, which every update needs anyway). New ones each update
        (fresh memory) made hold + collect + release of base take 119 ms on one Zen 4 thread, 28 ms now; in train.py's
        loop on a CPU the gain is inside the noise (benchmarks/README.md, "bf16 weights' bookkeeping")."""
        import torch

        first, grads, sums, added = [], [], [], []
        for index, param in enumerate(self.params):
            if param.grad is None:
                continue
            if self.grads[index] is None:  # its first gradient of the update: copied into its float32 tensor
                self.grads[index] = self.sums[index]
                first.append(self.sums[index])
                grads.append(param.grad)
            else:  # a later micro-batch of the update (--gradient_accumulation_steps)
                sums.append(self.grads[index])
                added.append(param.grad)
            param.grad = None
        if first:
            torch._foreach_copy_(first, grads)
        if sums:
            torch._foreach_add_(sums, added)  # float32 += bfloat16, computed in float32

    def release(self) -> None:
        if not self.master:
            return
        self.collect()
        for param, master, grad in zip(self.params, self.master, self.grads, strict=True):
            param.data = master
            param.grad = grad
        self.master, self.grads = [], []


__all__ = ["AUTOMATIC", "COMPILE_MODES", "ComputeWeights", "Recompilations", "StepSpeed", "compile_layers",
           "resolve_step_speed"]  # fmt: skip
