"""Benchmark: our Transformer (`VaswaniForConditionalGeneration`) against transformers' `MarianMTModel`, on CPU.

Both models are built from configs with random weights and identical dimensions: vocabulary, d_model, layers,
heads, FFN width, ReLU, dropout 0.1, one embedding matrix shared by source, target and output projection,
sqrt(d_model) embedding scaling, sinusoidal positions, the same special ids and the same attention kernel. In one
run the script measures, for each size:

* training throughput: target tokens/s of forward + backward + Adam step on the same batches;
* beam-search throughput: sentences/s of `generate()` with 4 beams and the output length forced (min = max new
  tokens), so both decode exactly the same number of steps;
* peak memory of training steps and of `generate()` calls: the rise of the resident set size above its level just
  before the workload, each measured in a fresh process. "fixed": glibc's mmap threshold fixed at 128 KiB, so the
  resident size follows the memory in use (repeatable to a fraction of a MiB); "glibc default": the dynamic
  threshold, where freed blocks stay resident and the peak varies by about +-10% from run to run (see
  `common.fix_mmap_threshold`). "tensor": the peak of live tensor bytes from torch.profiler's allocation events,
  exact and independent of malloc.

Every figure is printed for both models with the ratio ours / Marian (speed: higher is better for us; memory:
lower is better). Each model keeps its own training loss: ours is label-smoothed cross-entropy (eps 0.1, the
paper's), Marian's is plain cross-entropy, so ours pays for the smoothing.

    python benchmarks/bench_model.py                                   # full run: small and base (~8.5 min, 2 cores)
    python benchmarks/bench_model.py --sizes small --steps 2 --repeats 1   # smoke run (~35 s)
    python benchmarks/bench_model.py --json results.json               # also write machine-readable results
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import sys
import warnings
from collections.abc import Callable
from pathlib import Path

import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # models are built from configs; nothing to download
REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))  # `common` when run as a script
sys.path.insert(1, str(REPO_ROOT))  # `modeling_vaswani` without installing

import common  # noqa: E402

MODELS = ("ours", "marian")
WORKLOADS = ("train", "generate")
MALLOC_MODES = {"fixed": "mmap threshold fixed at 128 KiB", "default": "glibc default"}
PRELOAD = ("torch", "transformers", "transformers.models.marian.modeling_marian", "modeling_vaswani")
# Model sizes: "base" is the paper's base model (Table 3) apart from the vocabulary (--vocab_size).
SIZES = {
    "small": {"d_model": 256, "layers": 3, "heads": 4, "ffn_dim": 1024},
    "base": {"d_model": 512, "layers": 6, "heads": 8, "ffn_dim": 2048},
}
# Special ids shared by both models (our defaults): PAD 0, BOS 1, EOS 2, decoder start 1.
PAD, BOS, EOS, DECODER_START = 0, 1, 2, 1
FIRST_ORDINARY_ID = 3
NUM_BEAMS, LENGTH_PENALTY = 4, 0.6
ADAM = {"lr": 1e-4, "betas": (0.9, 0.98), "eps": 1e-9}  # Section 5.3 (constant lr: no schedule needed here)
NUM_TRAIN_BATCHES = 4  # distinct batches, cycled; every model sees the same sequence


_size_list = common.choice_list(SIZES, "sizes")


def add_workload_arguments(parser: argparse.ArgumentParser, part: str = "") -> None:
    """The options of the random-weight workload (model sizes, generation batch, source length, vocabulary), shared
    with bench_translate's part 2; `part` starts their help."""
    parser.add_argument("--sizes", type=_size_list, default="small,base",
                        help=f"{part}comma-separated, from {', '.join(SIZES)}")  # fmt: skip
    parser.add_argument("--gen_batch_size", type=int, default=16, help=f"{part}source sentences per generate() call")
    parser.add_argument("--src_len", type=int, default=30,
                        help=f"{part}source length (tokens incl. EOS, before padding)")  # fmt: skip
    parser.add_argument("--vocab_size", type=int, default=8000, help=f"{part}shared vocabulary (paper: 37000)")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_workload_arguments(parser)
    parser.add_argument("--steps", type=int, default=1, help="timed training steps per repeat")
    parser.add_argument("--warmup", type=int, default=2, help="untimed training steps / generate calls per model")
    parser.add_argument("--repeats", type=int, default=16, help="interleaved timing rounds (median reported)")
    parser.add_argument("--batch_size", type=int, default=32, help="sentence pairs per training batch")
    parser.add_argument("--tgt_len", type=int, default=30, help="target length (tokens incl. EOS, before padding)")
    parser.add_argument(
        "--new_tokens", type=int, default=None, help="tokens generated per sentence (default: tgt_len)"
    )
    parser.add_argument("--mem_steps", type=int, default=2, help="training steps / generate calls per memory worker")
    parser.add_argument(
        "--mem_repeats", type=int, default=None, help="fresh processes per memory figure (default: min(3, repeats))"
    )
    parser.add_argument(
        "--malloc", choices=("fixed", "default", "both"), default="both", help="glibc settings of the memory runs"
    )
    parser.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)), help="torch intra-op threads")
    parser.add_argument("--attn", choices=("sdpa", "eager"), default="sdpa", help="attention implementation")
    parser.add_argument("--seed", type=int, default=0)
    common.add_aa_argument(parser, "our model")
    parser.add_argument("--json", metavar="OUT", default=None, help="write all results to this JSON file")
    args = parser.parse_args(argv)
    if args.new_tokens is None:
        args.new_tokens = args.tgt_len
    if args.mem_repeats is None:
        args.mem_repeats = min(3, args.repeats)
    args.malloc = list(MALLOC_MODES) if args.malloc == "both" else [args.malloc]
    for name in ("steps", "repeats", "batch_size", "src_len", "tgt_len", "gen_batch_size", "new_tokens", "threads"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be at least 1")
    if args.warmup < 0 or args.mem_steps < 1 or args.mem_repeats < 1:
        parser.error("--warmup must be >= 0, --mem_steps and --mem_repeats >= 1")
    if args.vocab_size <= FIRST_ORDINARY_ID:
        parser.error(f"--vocab_size must exceed {FIRST_ORDINARY_ID} (ids 0-2 are PAD, BOS, EOS)")
    return args


def main() -> None:
    args = parse_args()
    quiet_libraries()
    torch.set_num_threads(args.threads)
    machine = common.machine_description(torch.get_num_threads())
    machine["model_version"] = common.source_version(REPO_ROOT / "modeling_vaswani")
    print(f"Model vs MarianMTModel on {common.describe_machine(machine)}; modeling_vaswani at "
          f"{machine['model_version']}")  # fmt: skip
    print(
        f"attention {args.attn}; training: batch {args.batch_size} pairs, source {args.src_len} / target "
        f"{args.tgt_len} tokens (~5% padding), vocab {args.vocab_size}, Adam(betas=(0.9, 0.98), eps=1e-9), "
        f"{args.warmup} warmup + {args.repeats} x {args.steps} timed steps per model, interleaved; loss: ours "
        f"label-smoothed CE (eps 0.1), Marian plain CE"
    )
    print(
        f"beam search: {args.gen_batch_size} sentences per call, {NUM_BEAMS} beams, length penalty {LENGTH_PENALTY}, "
        f"exactly {args.new_tokens} new tokens, {args.warmup} warmup + {args.repeats} timed calls per model"
    )
    print(
        f"peak memory: peak RSS - RSS before, {args.mem_steps} steps or calls in a fresh process, median of "
        f"{args.mem_repeats} processes; malloc: {', '.join(MALLOC_MODES[mode] for mode in args.malloc)}"
    )
    results = {"machine": machine, "settings": settings_of(args), "sizes": {}}
    for size in args.sizes:
        print(f"\n=== {size}: {describe_size(size, args)} ===", flush=True)
        results["sizes"][size] = benchmark_size(size, args)
        print_size_report(results["sizes"][size], args.malloc)
    print_verdicts(results["sizes"], args.malloc)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2) + "\n")
        print(f"\nresults written to {args.json}")


def quiet_libraries() -> None:
    """Silence transformers' advisory warnings (e.g. about generation flags) so that the report stays readable."""
    import transformers

    transformers.logging.set_verbosity_error()
    warnings.filterwarnings("ignore", category=UserWarning)


# ----------------------------------------------------------------------------------------------------------------
# One size: speed in this process (both models, interleaved), memory in fresh workers
# ----------------------------------------------------------------------------------------------------------------
def benchmark_size(size: str, args: argparse.Namespace) -> dict:
    """Build both models, check they match, time training and beam search interleaved, then measure memory."""
    models = {name: build_model(name, size, args) for name in MODELS}
    parameters = check_same_architecture(models)
    print(
        f"trainable parameters: ours {parameters['ours']:,}, Marian {parameters['marian']:,} (Marian also holds a "
        f"final_logits_bias buffer and frozen sinusoidal tables; ours keeps its tables as buffers)",
        flush=True,
    )
    result = {"dims": model_dims(size, args), "parameters": parameters}
    result["train"] = measure_training_speed(models, args)
    result["generate"] = measure_generation_speed(models, args)
    del models
    common.release_free_memory()
    result["memory"] = measure_memory(size, args)
    return result


def measure_training_speed(models: dict, args: argparse.Namespace) -> dict:
    """Target tokens/s of full training steps, both models on the same batch sequence, interleaved rounds."""
    batches = make_training_batches(args)
    tokens_per_step = int((batches[0]["labels"] != -100).sum())  # every batch has the same padding pattern
    steps = {name: make_training_step(model, batches)[0] for name, model in models.items()}
    steps = common.with_aa_copy(steps, "ours") if args.aa else steps
    timings = common.interleave(steps, warmup=args.warmup, repeats=args.repeats, calls=args.steps)
    for model in models.values():
        model.zero_grad(set_to_none=True)
    result = summarise_speed(timings, work=tokens_per_step * args.steps, unit="target tokens/s")
    print(f"training: {tokens_per_step} target tokens per step; {describe_rounds(result)}", flush=True)
    return result | {"tokens_per_step": tokens_per_step}


def measure_generation_speed(models: dict, args: argparse.Namespace) -> dict:
    """Sentences/s of 4-beam search forced to `new_tokens` steps, interleaved rounds; checks equal output shapes."""
    batch = make_generation_batch(args)
    calls = {name: make_generate_call(model, batch, args) for name, model in models.items()}
    calls = common.with_aa_copy(calls, "ours") if args.aa else calls
    shapes = {name: tuple(call().shape) for name, call in calls.items()}  # also the first warmup call
    expected = (args.gen_batch_size, args.new_tokens + 1)  # decoder start token + new tokens
    if any(shape != expected for shape in shapes.values()):
        raise RuntimeError(f"generate() output shapes differ from {expected}: {shapes}; the workloads are not equal")
    warmup = max(args.warmup - 1, 0)
    timings = common.interleave(calls, warmup=warmup, repeats=args.repeats)
    result = summarise_speed(timings, work=args.gen_batch_size, unit="sentences/s")
    print(f"beam search: output shape {expected} for both models; {describe_rounds(result)}", flush=True)
    return result


def summarise_speed(timings: common.Interleaved, work: float, unit: str) -> dict:
    """Median (and range) throughput per model, the per-round ratio ours / Marian and the CPU contention."""
    throughput = {name: common.rates(seconds, work) for name, seconds in timings.seconds.items()}
    return {
        "unit": unit,
        **{name: common.Summary.of(values).to_dict() for name, values in throughput.items()},
        "ratio": common.ratio_summary(throughput["ours"], throughput["marian"]).to_dict(),
        "aa": (aa.to_dict() if (aa := common.aa_summary(throughput, "ours")) else None),
        "cpu_stalled": {"median": timings.median_stalled(), "max": timings.busiest(), **timings.stalled},
    }


def describe_rounds(result: dict) -> str:
    """Per-round ratios and how contended the CPU was (share of the time some task waited for a core)."""
    ratios = ", ".join(f"{ratio:.2f}" for ratio in result["ratio"]["values"])
    stalled = result["cpu_stalled"]
    contention = (
        "CPU contention not measurable (no /proc/pressure/cpu)"
        if stalled["median"] is None
        else f"CPU stalled {stalled['median']:.0%} of the time (median round; max {stalled['max']:.0%})"
    )
    aa = result["aa"] and common.Summary(**{key: result["aa"][key] for key in ("median", "low", "high", "values")})
    return f"per-round ratios ours/Marian {ratios}; {contention}\n  {common.describe_aa(aa, 'ours')}"


def measure_memory(size: str, args: argparse.Namespace) -> dict:
    """Peak RSS increase of each (malloc mode, workload, model) in fresh processes, `mem_repeats` each, interleaved."""
    memory = {}
    for malloc in args.malloc:
        for workload in WORKLOADS:
            runs: dict[str, list[dict]] = {name: [] for name in MODELS}
            for repeat in range(args.mem_repeats):
                for name in MODELS if repeat % 2 == 0 else reversed(MODELS):
                    run = common.run_in_fresh_process(
                        memory_worker, name, size, workload, malloc, args, preload=PRELOAD
                    )
                    runs[name].append(run)
            increases = {name: [run["increase_mb"] for run in runs[name]] for name in MODELS}
            memory[f"{workload}_{malloc}"] = summarise_memory(
                increases, f"MiB, peak RSS - RSS before ({MALLOC_MODES[malloc]})", runs
            )
            print_memory(f"{workload}, RSS, {MALLOC_MODES[malloc]}", increases)
            if malloc == "fixed":  # the same workers also measured the tensor peak
                tensors = {name: [run["tensor_peak_mb"] for run in runs[name]] for name in MODELS}
                if all(value is not None for values in tensors.values() for value in values):
                    memory[f"{workload}_tensor"] = summarise_memory(tensors, "MiB, peak of live tensors (profiler)")
                    print_memory(f"{workload}, live tensors", tensors)
    return memory


def summarise_memory(increases: dict[str, list[float]], unit: str, runs: dict | None = None) -> dict:
    """Median (and range) per model, and the per-process ratio ours / Marian."""
    return {
        "unit": unit,
        **{
            name: common.Summary.of(increases[name]).to_dict()
            | ({"before_mb": runs[name][0]["before_mb"]} if runs else {})
            for name in MODELS
        },
        "ratio": common.ratio_summary(increases["ours"], increases["marian"]).to_dict(),
    }


def print_memory(label: str, figures: dict[str, list[float]]) -> None:
    values = "; ".join(f"{name} " + ", ".join(f"{mb:.1f}" for mb in figures[name]) for name in MODELS)
    print(f"peak memory, {label} (MiB): {values}", flush=True)


def memory_worker(name: str, size: str, workload: str, malloc: str, args: argparse.Namespace) -> dict:
    """Runs in a fresh process: build one model, prepare the workload, measure its peak RSS increase.

    Training: the baseline already holds the model, its inputs and Adam's state (created by one step with zero
    gradients, which leaves the weights unchanged); the peak covers `mem_steps` full steps: activations, gradients
    (freed by `zero_grad`) and the update. Generation: the baseline holds the model in eval mode and the sources;
    the peak covers `mem_steps` generate() calls: encoder output, beam caches and logits. With `malloc="fixed"`,
    the worker also reports the peak of live tensor bytes of one more step or call (`common.peak_tensor_mb`).
    """
    if malloc == "fixed" and not common.fix_mmap_threshold():
        raise RuntimeError("cannot fix glibc's mmap threshold here (not glibc?); use --malloc default")
    quiet_libraries()
    torch.set_num_threads(args.threads)
    model = build_model(name, size, args)
    if workload == "train":
        step, optimizer = make_training_step(model, make_training_batches(args))
        create_adam_state(optimizer)
    else:
        step = make_generate_call(model, make_generation_batch(args), args)
    memory = common.measure_peak_rss(lambda: [step() for _ in range(args.mem_steps)]).to_dict()
    # Then, outside the RSS measurement, the exact tensor peak of one more step or call (under the profiler).
    memory["tensor_peak_mb"] = common.peak_tensor_mb(step) if malloc == "fixed" else None
    return memory


# ----------------------------------------------------------------------------------------------------------------
# Models
# ----------------------------------------------------------------------------------------------------------------
def model_dims(size: str, args: argparse.Namespace) -> dict:
    """The architecture arguments both configs share (argument names of both VaswaniConfig and MarianConfig)."""
    dims = SIZES[size]
    return {
        "vocab_size": args.vocab_size,
        "d_model": dims["d_model"],
        "encoder_layers": dims["layers"],
        "decoder_layers": dims["layers"],
        "encoder_attention_heads": dims["heads"],
        "decoder_attention_heads": dims["heads"],
        "encoder_ffn_dim": dims["ffn_dim"],
        "decoder_ffn_dim": dims["ffn_dim"],
        "activation_function": "relu",
        "dropout": 0.1,
        "attention_dropout": 0.0,
        "activation_dropout": 0.0,
        # Position tables just long enough (Marian builds its table in a slow Python loop; speed is unaffected).
        "max_position_embeddings": 2 ** math.ceil(math.log2(max(args.src_len, args.tgt_len, args.new_tokens + 1))),
        "scale_embedding": True,
        "tie_word_embeddings": True,
        "pad_token_id": PAD,
        "bos_token_id": BOS,
        "eos_token_id": EOS,
        "decoder_start_token_id": DECODER_START,
        "attn_implementation": args.attn,
    }


def describe_size(size: str, args: argparse.Namespace) -> str:
    dims = SIZES[size]
    return (
        f"d_model {dims['d_model']}, {dims['layers']}+{dims['layers']} layers, {dims['heads']} heads, "
        f"FFN {dims['ffn_dim']}, vocab {args.vocab_size}"
    )


def build_model(name: str, size: str, args: argparse.Namespace) -> torch.nn.Module:
    """Our model or Marian with `model_dims(size)`, random weights (same seed)."""
    torch.manual_seed(args.seed)
    dims = model_dims(size, args)
    if name == "ours":
        from modeling_vaswani import VaswaniConfig, VaswaniForConditionalGeneration

        config = VaswaniConfig(**dims, share_embeddings=True, position_embedding_type="sinusoidal")
        model = VaswaniForConditionalGeneration(config)
    elif name == "marian":
        from transformers import MarianConfig, MarianMTModel

        # Marian's defaults differ: GELU, no embedding scaling, pad/decoder start 58100, EOS 0 forced at max length.
        config = MarianConfig(**dims, share_encoder_decoder_embeddings=True, forced_eos_token_id=None)
        model = MarianMTModel(config)  # sinusoidal positions are Marian's only kind
    else:
        raise ValueError(f"unknown model {name!r}; choose from {MODELS}")
    if model.config._attn_implementation != args.attn:
        raise RuntimeError(f"{name} uses {model.config._attn_implementation} attention, not {args.attn}")
    return model


def check_same_architecture(models: dict) -> dict[str, int]:
    """Trainable parameter counts (tied matrices counted once); raises if they differ or the embeddings are untied."""
    counts = {}
    for name, model in models.items():
        shared = model.model.shared.weight
        tied = (model.lm_head.weight, model.model.encoder.embed_tokens.weight, model.model.decoder.embed_tokens.weight)
        if not all(weight is shared for weight in tied):
            raise RuntimeError(f"{name}: source/target embeddings and output projection are not one tied matrix")
        counts[name] = sum(p.numel() for p in model.parameters() if p.requires_grad)
    if len(set(counts.values())) != 1:
        raise RuntimeError(f"the models differ in trainable parameters: {counts}")
    return counts


# ----------------------------------------------------------------------------------------------------------------
# Workloads
# ----------------------------------------------------------------------------------------------------------------
def random_sentences(
    generator: torch.Generator, lengths: torch.Tensor, max_len: int, vocab_size: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Random token ids ending in EOS, right-padded to `max_len`: ids (B, max_len) and mask (B, max_len)."""
    ids = torch.randint(FIRST_ORDINARY_ID, vocab_size, (len(lengths), max_len), generator=generator)
    positions = torch.arange(max_len)
    ids[positions == (lengths - 1)[:, None]] = EOS
    mask = positions < lengths[:, None]
    return ids.masked_fill(~mask, PAD), mask.long()


def padded_lengths(generator: torch.Generator, count: int, max_len: int) -> torch.Tensor:
    """Sentence lengths in [0.9 * max_len, max_len]: a little padding (about 5% of the positions)."""
    shortest = max(1, math.ceil(0.9 * max_len))
    return torch.randint(shortest, max_len + 1, (count,), generator=generator)


def make_training_batches(args: argparse.Namespace) -> list[dict[str, torch.Tensor]]:
    """`NUM_TRAIN_BATCHES` batches of random sentence pairs with one shared padding pattern (equal token counts).

    Labels hold -100 at padding, which both losses ignore (Marian's `CrossEntropyLoss` would count PAD labels).
    """
    generator = torch.Generator().manual_seed(args.seed)
    src_lengths = padded_lengths(generator, args.batch_size, args.src_len)
    tgt_lengths = padded_lengths(generator, args.batch_size, args.tgt_len)
    batches = []
    for _ in range(NUM_TRAIN_BATCHES):
        input_ids, attention_mask = random_sentences(generator, src_lengths, args.src_len, args.vocab_size)
        labels, label_mask = random_sentences(generator, tgt_lengths, args.tgt_len, args.vocab_size)
        labels = labels.masked_fill(label_mask == 0, -100)
        batches.append({"input_ids": input_ids, "attention_mask": attention_mask, "labels": labels})
    return batches


def make_training_step(
    model: torch.nn.Module, batches: list[dict[str, torch.Tensor]]
) -> tuple[Callable[[], None], torch.optim.Optimizer]:
    """A closure doing one step (forward with labels, backward, Adam step, zero_grad) on the next batch (cycled)."""
    model.train()
    optimizer = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], **ADAM)
    batch_cycle = itertools.cycle(batches)

    def step() -> None:
        loss = model(**next(batch_cycle)).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return step, optimizer


def create_adam_state(optimizer: torch.optim.Optimizer) -> None:
    """Allocate Adam's moment buffers now, with a step on zero gradients (the update is exactly 0)."""
    for group in optimizer.param_groups:
        for parameter in group["params"]:
            parameter.grad = torch.zeros_like(parameter)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)


def make_generation_batch(args: argparse.Namespace) -> dict[str, torch.Tensor]:
    """`gen_batch_size` random source sentences (a little padding) for beam search."""
    generator = torch.Generator().manual_seed(args.seed + 1)
    lengths = padded_lengths(generator, args.gen_batch_size, args.src_len)
    input_ids, attention_mask = random_sentences(generator, lengths, args.src_len, args.vocab_size)
    return {"input_ids": input_ids, "attention_mask": attention_mask}


def make_generate_call(
    model: torch.nn.Module, batch: dict[str, torch.Tensor], args: argparse.Namespace
) -> Callable[[], torch.Tensor]:
    """A closure running 4-beam search that decodes exactly `new_tokens` steps (EOS is blocked until then)."""
    model.eval()

    def call() -> torch.Tensor:
        return model.generate(
            **batch,
            num_beams=NUM_BEAMS,
            max_new_tokens=args.new_tokens,
            min_new_tokens=args.new_tokens,
            early_stopping=True,
            length_penalty=LENGTH_PENALTY,
            do_sample=False,
        )

    return call


# ----------------------------------------------------------------------------------------------------------------
# Report
# ----------------------------------------------------------------------------------------------------------------
SPEED_ROWS = (  # (label, result key, format, higher is better)
    ("train target tokens/s", "train", "{:,.0f}", True),
    ("beam-4 sentences/s", "generate", "{:,.2f}", True),
)


def report_rows(malloc_modes: list[str]) -> list[tuple[str, tuple[str, ...], str, bool]]:
    """(label, path in a size's results, number format, higher is better) of every row of the report."""
    rows = [(label, (key,), fmt, higher) for label, key, fmt, higher in SPEED_ROWS]
    kinds = [(malloc, "" if malloc == "fixed" else f" ({MALLOC_MODES[malloc]})") for malloc in malloc_modes]
    if "fixed" in malloc_modes:
        kinds.append(("tensor", " (live tensors)"))
    for kind, suffix in kinds:
        for workload in WORKLOADS:
            rows.append((f"{workload} peak MiB{suffix}", ("memory", f"{workload}_{kind}"), "{:,.1f}", False))
    return rows


def lookup(result: dict, path: tuple[str, ...]) -> dict:
    for key in path:
        result = result[key]
    return result


def print_size_report(result: dict, malloc_modes: list[str]) -> None:
    """A table: ours, Marian, ratio ours/Marian (median over rounds) and the range of the per-round ratios."""
    rows = []
    for label, path, fmt, _ in report_rows(malloc_modes):
        entry = lookup(result, path)
        ratio = entry["ratio"]
        rows.append(
            [
                label,
                fmt.format(entry["ours"]["median"]),
                fmt.format(entry["marian"]["median"]),
                f"{ratio['median']:.3f}",
                f"{ratio['low']:.3f}-{ratio['high']:.3f}",
                f"{entry['ours']['spread']:.0%} / {entry['marian']['spread']:.0%}",
            ]
        )
    headers = ["", "ours", "Marian", "ours/Marian", "ratio range", "spread ours/Marian"]
    print(common.format_table(headers, rows))


def print_verdicts(sizes: dict, malloc_modes: list[str]) -> None:
    """One line per target: speed ratios >= 1.0, memory ratios <= 1.0, met only where the median ratio and most
    rounds reach it at every size (`common.verdict`).

    Each figure carries its evidence. Speed: in how many rounds ours was ahead and the sign test's p-value, i.e.
    whether a miss is distinguishable from measurement noise (p < 0.05: it is). Memory: the difference itself.
    """
    print("\nTargets (median ratio ours/Marian per size):")
    for label, path, _, higher_is_better in report_rows(malloc_modes):
        entries = {size: lookup(result, path) for size, result in sizes.items()}
        verdicts = {common.verdict(entry["ratio"]["values"], 1.0, higher_is_better) for entry in entries.values()}
        outcome = "MET" if verdicts == {"MET"} else "MISSED" if verdicts == {"MISSED"} else "UNCLEAR"
        figures = []
        for size, entry in entries.items():
            ratio = entry["ratio"]
            if higher_is_better:
                ahead, rounds, p_value = common.sign_test(ratio["values"])
                evidence = f"ours ahead in {ahead}/{rounds} rounds, sign test p={p_value:.2g}"
            else:
                evidence = format_difference(entry["ours"]["median"] - entry["marian"]["median"])
            figures.append(f"{size} {ratio['median']:.3f} ({evidence})")
        target = ">= 1.0" if higher_is_better else "<= 1.0"
        print(f"  {outcome:7s} {label:36s} {target}: {', '.join(figures)}")


def format_difference(mib: float) -> str:
    """ours - Marian in MiB, or in KiB when below 1 MiB."""
    return f"{mib:+.1f} MiB" if abs(mib) >= 1 else f"{mib * 1024:+.1f} KiB"


def settings_of(args: argparse.Namespace) -> dict:
    return {key: value for key, value in vars(args).items() if key != "json"}


if __name__ == "__main__":
    main()
