"""Benchmark: causal-LM training of our decoder-only Transformer (`VaswaniForCausalLM`) against transformers'
`MarianForCausalLM` and `GPT2LMHeadModel` of equal dimensions, on CPU, on real English sentences.

The data are the English side of a real corpus (default: shared/data/gettext-en-es/train.jsonl in a folder above
the checkout: software messages). A BPE tokenizer is trained on that text once (`tokenization.train_bpe_tokenizer`,
`--vocab_size`), the corpus is tokenized once (<s> + text + </s>, cut at `--max_len`), and `--steps` batches of
`--batch_size` sentences of about equal length are taken at evenly spaced quantiles of its length distribution
(seeded), each right-padded to its longest sentence. Every model trains on exactly these tensors, in the same order:
one round is one pass over the `--steps` batches (forward with labels, backward, `AdamW` step, `zero_grad` for each),
so every round of every model does the same work. The figure is training tokens/s: non-PAD input tokens per second.

Equal dimensions: vocabulary, d_model, layers, heads, FFN width, dropout 0.1 (no attention dropout), one tied
embedding / output matrix, float32, the same attention kernel (`--attn`), the same torch threads. The models:

* ours: `VaswaniForCausalLM` (post-norm, ReLU, sinusoidal positions, sqrt(d_model) embedding scaling);
* marian: `MarianForCausalLM` with ReLU and the same scaling and sinusoidal positions: the same architecture, but
  each decoder layer keeps its encoder-decoder attention weights (never used without encoder states, so they get
  no gradient and AdamW skips them), hence its larger parameter count;
* gpt2: `GPT2LMHeadModel` with n_embd / n_layer / n_head / n_inner equal, otherwise GPT-2 itself: learned positions,
  pre-norm with a final LayerNorm, GELU (tanh approximation), no embedding scaling;
* ours (A/A): a second, identical instance of our model timed as one more candidate, so that the noise of this
  machine is a measured number (ours / ours (A/A) should be 1).

All use plain cross-entropy over the next tokens, PAD never a target (ours and GPT-2 shift the labels inside the
model; Marian's labels are shifted here, it does not shift them). Before timing, the script checks that every model
returns logits of the same shape for every batch and counts the matrix FLOPs of a round's forward + backward
passes (torch.utils.flop_counter: linear layers and output projection; on CPU it does not see inside sdpa, whose
shapes are the same for all); Marian's must equal ours. After timing, every loss must be finite; the report shows the
mean loss of the first and of the last pass over the batches.

Timing follows `common`: warm-up, interleaved rounds (A B C D, D C B A, ...), medians and min-max, the per-round
ratio ours / peer with a sign test, and the share of each round during which some task waited for a CPU (PSI).

    python benchmarks/bench_lm.py --repeats 7                      # small and base
    python benchmarks/bench_lm.py --sizes small --repeats 1 --steps 2 --batch_size 8   # smoke run
    python benchmarks/bench_lm.py --json results.json              # also write machine-readable results
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import random
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))  # `common`, `bench_model` when run as a script
sys.path.insert(1, str(REPO_ROOT))  # `modeling_vaswani`, `tokenization` without installing

import bench_model  # noqa: E402
import common  # noqa: E402

CORPUS = Path("shared", "data", "gettext-en-es", "train.jsonl")
# The shared data folder sits next to the checkout (or next to the folder of worktrees that holds it).
DEFAULT_DATA = next((folder / CORPUS for folder in REPO_ROOT.parents if (folder / CORPUS).is_file()), CORPUS)
OURS = "ours"
AA = OURS + common.AA_SUFFIX  # the A/A candidate, named as common's
PEERS = ("marian", "gpt2")
LABELS = {
    OURS: "VaswaniForCausalLM",
    "marian": "MarianForCausalLM",
    "gpt2": "GPT2LMHeadModel",
    AA: "VaswaniForCausalLM, 2nd instance",
}
SIZES = bench_model.SIZES  # small: d 256, 3 layers, 4 heads, FFN 1024; base: the paper's 512, 6, 8, 2048
PAD, BOS, EOS = 0, 1, 2  # the tokenizer's "paper" layout and both configs' defaults
ADAMW = {"lr": 5e-4, "betas": (0.9, 0.98), "eps": 1e-9, "weight_decay": 0.01}
MIN_VOCAB_SIZE = 262  # train_bpe_tokenizer: 4 special tokens + 256 byte tokens + at least one more


_peer_list = common.choice_list(PEERS, "peers")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0], allow_abbrev=False)
    parser.add_argument("--sizes", type=bench_model._size_list, default="small,base",
                        help=f"comma-separated, from {', '.join(SIZES)}")  # fmt: skip
    parser.add_argument("--peers", type=_peer_list, default=",".join(PEERS),
                        help=f"models timed against ours, comma-separated, from {', '.join(PEERS)}")  # fmt: skip
    common.add_aa_argument(parser, "our model (a second, identical instance)")
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="JSON lines, {'translation': {lang: text}}")
    parser.add_argument("--lang", default="en", help="which side of the translation pairs to read")
    parser.add_argument("--vocab_size", type=int, default=8000, help="BPE vocabulary trained on --data")
    parser.add_argument("--batch_size", type=int, default=32, help="sentences per batch")
    parser.add_argument("--max_len", type=int, default=64, help="tokens per sentence at most (incl. <s>, </s>)")
    parser.add_argument("--steps", type=int, default=4, help="distinct batches = training steps per round")
    parser.add_argument("--warmup", type=int, default=4, help="untimed training steps per model")
    parser.add_argument("--repeats", type=int, default=7, help="interleaved timing rounds (median reported)")
    parser.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)), help="torch intra-op threads")
    parser.add_argument("--attn", choices=("sdpa", "eager"), default="sdpa", help="attention implementation")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", metavar="OUT", default=None, help="write all results to this JSON file")
    args = parser.parse_args(argv)
    for name in ("batch_size", "steps", "repeats", "threads"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} {getattr(args, name)} is not allowed: use a positive integer")
    if args.warmup < 0:
        parser.error(f"--warmup {args.warmup} is not allowed: use 0 or more")
    if args.max_len < 3:
        parser.error(f"--max_len {args.max_len} is not allowed: <s>, one token and </s> need 3")
    if args.vocab_size < MIN_VOCAB_SIZE:
        parser.error(f"--vocab_size {args.vocab_size} is not allowed: the special and byte tokens alone take "
                     f"{MIN_VOCAB_SIZE - 1}")  # fmt: skip
    if not args.data.is_file():
        parser.error(f"--data {args.data} is not a file")
    return args


# ----------------------------------------------------------------------------------------------------------------
# Data: real sentences, one tokenizer, the same padded batches for every model
# ----------------------------------------------------------------------------------------------------------------
def read_sentences(path: Path, lang: str) -> list[str]:
    """The non-empty `lang` side of every {"translation": {...}} line of `path`."""
    sentences = []
    with path.open(encoding="utf-8") as lines:
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            translation = json.loads(line).get("translation", {})
            if lang not in translation:
                raise SystemExit(f"{path}:{number} has no {lang!r} text (its keys: {sorted(translation)})")
            if translation[lang].strip():
                sentences.append(translation[lang])
    return sentences


def make_batches(sentences: list[str], args: argparse.Namespace) -> tuple[list[dict[str, torch.Tensor]], dict]:
    """Train the BPE tokenizer on `sentences` and tokenize them all once; then `steps` batches of `batch_size`
    sentences of about equal length (little padding), spread over the corpus's length distribution: the corpus is
    shuffled (seeded), sorted by length, and batch i is the run of `batch_size` sentences around the quantile
    (i + 0.5) / steps. Returns the batches (input_ids, attention_mask; right-padded) and their description."""
    from tokenization import train_bpe_tokenizer

    needed = args.steps * args.batch_size
    if len(sentences) < needed:
        raise SystemExit(f"{args.data} has {len(sentences)} sentences; --steps x --batch_size needs {needed}")
    started = time.perf_counter()
    tokenizer = train_bpe_tokenizer(iterator=sentences, vocab_size=args.vocab_size, show_progress=False)
    trained_in = time.perf_counter() - started
    encoded = [[BOS, *ids][: args.max_len] for ids in tokenizer(sentences)["input_ids"]]  # <s> text </s>, cut
    random.Random(args.seed).shuffle(encoded)
    encoded.sort(key=len)  # stable: sentences of equal length stay in shuffled order
    batches = []
    for index in range(args.steps):
        centre = int((index + 0.5) / args.steps * len(encoded))
        start = min(max(centre - args.batch_size // 2, index * args.batch_size),
                    len(encoded) - (args.steps - index) * args.batch_size)  # fmt: skip
        rows = encoded[start : start + args.batch_size]
        width = max(map(len, rows))
        input_ids = torch.full((len(rows), width), PAD, dtype=torch.long)
        for row, ids in enumerate(rows):
            input_ids[row, : len(ids)] = torch.tensor(ids)
        batches.append({"input_ids": input_ids, "attention_mask": (input_ids != PAD).long()})
    tokens = sum(int(batch["attention_mask"].sum()) for batch in batches)
    positions = sum(batch["input_ids"].numel() for batch in batches)
    description = {
        "sentences_in_corpus": len(sentences),
        "vocab_size": len(tokenizer),
        "tokenizer_training_seconds": trained_in,
        "corpus_length_median": len(encoded[len(encoded) // 2]),
        "corpus_cut_at_max_len": sum(len(ids) == args.max_len for ids in encoded),
        "shapes": [list(batch["input_ids"].shape) for batch in batches],
        "tokens_per_round": tokens,
        "targets_per_round": tokens - needed,  # every token but the first (<s>) of each sentence is predicted
        "padding": 1 - tokens / positions,
    }
    return batches, description


def marian_labels(input_ids: torch.Tensor) -> torch.Tensor:
    """MarianForCausalLM scores logits[:, t] against labels[:, t] (no shift inside): the next token, -100 at PAD and
    after the last position, which is what ours and GPT-2 compute from labels = input_ids."""
    labels = torch.full_like(input_ids, -100)
    labels[:, :-1] = input_ids[:, 1:].masked_fill(input_ids[:, 1:] == PAD, -100)
    return labels


def model_inputs(name: str, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The batch with the labels each model expects (the same targets for all)."""
    if name == "marian":
        return {**batch, "labels": marian_labels(batch["input_ids"])}
    return {**batch, "labels": batch["input_ids"].masked_fill(batch["attention_mask"] == 0, -100)}


# ----------------------------------------------------------------------------------------------------------------
# Models
# ----------------------------------------------------------------------------------------------------------------
def build_model(name: str, size: str, args: argparse.Namespace, vocab_size: int) -> torch.nn.Module:
    """One of the candidates at `size`, random weights (the same seed for each)."""
    torch.manual_seed(args.seed)
    dims = SIZES[size]
    positions = 2 ** math.ceil(math.log2(args.max_len))
    common_ids = {"pad_token_id": PAD, "bos_token_id": BOS, "eos_token_id": EOS, "tie_word_embeddings": True}
    if name in (OURS, AA):
        from modeling_vaswani import VaswaniDecoderConfig, VaswaniForCausalLM

        config = VaswaniDecoderConfig(
            vocab_size=vocab_size, d_model=dims["d_model"], decoder_layers=dims["layers"],
            decoder_attention_heads=dims["heads"], decoder_ffn_dim=dims["ffn_dim"], activation_function="relu",
            dropout=0.1, attention_dropout=0.0, activation_dropout=0.0, max_position_embeddings=positions,
            position_embedding_type="sinusoidal", scale_embedding=True, attn_implementation=args.attn, **common_ids,
        )  # fmt: skip
        model = VaswaniForCausalLM(config)
    elif name == "marian":
        from transformers import MarianConfig, MarianForCausalLM

        config = MarianConfig(
            vocab_size=vocab_size, d_model=dims["d_model"], decoder_layers=dims["layers"],
            decoder_attention_heads=dims["heads"], decoder_ffn_dim=dims["ffn_dim"], activation_function="relu",
            dropout=0.1, attention_dropout=0.0, activation_dropout=0.0, max_position_embeddings=positions,
            scale_embedding=True, decoder_start_token_id=BOS, forced_eos_token_id=None,
            attn_implementation=args.attn, **common_ids,
        )  # fmt: skip
        model = MarianForCausalLM(config)
    elif name == "gpt2":
        from transformers import GPT2Config, GPT2LMHeadModel

        config = GPT2Config(
            vocab_size=vocab_size, n_embd=dims["d_model"], n_layer=dims["layers"], n_head=dims["heads"],
            n_inner=dims["ffn_dim"], n_positions=positions, resid_pdrop=0.1, embd_pdrop=0.1, attn_pdrop=0.0,
            attn_implementation=args.attn, **common_ids,
        )  # fmt: skip
        model = GPT2LMHeadModel(config)
    else:
        raise ValueError(f"unknown model {name!r}")
    if model.config._attn_implementation != args.attn:
        raise RuntimeError(f"{name} uses {model.config._attn_implementation} attention, not {args.attn}")
    if model.get_output_embeddings().weight is not model.get_input_embeddings().weight:
        raise RuntimeError(f"{name}: the output projection is not tied to the token embedding")
    return model.float().train()


def trainable_parameters(model: torch.nn.Module) -> int:
    """Trainable parameters, the tied embedding / output matrix counted once."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def cross_attention_parameters(model: torch.nn.Module) -> int:
    """Parameters of Marian's unused encoder-decoder attention (and its LayerNorm); 0 for the others."""
    return sum(p.numel() for name, p in model.named_parameters() if "encoder_attn" in name)


def check_same_work(models: dict[str, torch.nn.Module], batches: list[dict[str, torch.Tensor]]) -> dict[str, dict]:
    """Forward + backward of every batch once per model (weights unchanged): each batch's logits shapes must agree,
    and so must the matrix FLOPs per round of ours and Marian (the same architecture); GPT-2's are reported. The
    counter sees the linear layers and the output projection; with sdpa the attention products themselves (the same
    shapes for every model) are not counted on CPU."""
    from torch.utils.flop_counter import FlopCounterMode

    work = {name: {"logits_shapes": [], "gflop_per_round": 0.0} for name in models}
    for batch in batches:
        expected = [*batch["input_ids"].shape, next(iter(models.values())).config.vocab_size]
        for name, model in models.items():
            with FlopCounterMode(display=False) as counter:
                output = model(**model_inputs(name, batch))
                output.loss.backward()
            model.zero_grad(set_to_none=True)
            work[name]["logits_shapes"].append(list(output.logits.shape))
            work[name]["gflop_per_round"] += counter.get_total_flops() / 1e9
            if list(output.logits.shape) != expected:
                raise RuntimeError(f"{name}: logits of shape {list(output.logits.shape)}, not {expected}; the "
                                   "workloads are not equal")  # fmt: skip
    if "marian" in work and not math.isclose(work["marian"]["gflop_per_round"], work[OURS]["gflop_per_round"],
                                             rel_tol=1e-3):  # fmt: skip
        raise RuntimeError(f"Marian and ours compute different FLOPs: {work}")
    return work


def make_training_step(name: str, model: torch.nn.Module, batches: list[dict]) -> tuple[Callable[[], None], list]:
    """A closure doing one AdamW step on the next batch (cycled) and the list it appends each loss to."""
    inputs = [model_inputs(name, batch) for batch in batches]
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], **ADAMW)
    batch_cycle = itertools.cycle(inputs)
    losses: list[float] = []

    def step() -> None:
        loss = model(**next(batch_cycle)).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        losses.append(loss.item())

    return step, losses


# ----------------------------------------------------------------------------------------------------------------
# One size
# ----------------------------------------------------------------------------------------------------------------
def candidate_names(args: argparse.Namespace) -> list[str]:
    return [OURS, *args.peers] + ([AA] if args.aa else [])


def benchmark_size(size: str, args: argparse.Namespace, batches: list[dict], vocab_size: int, tokens: int) -> dict:
    names = candidate_names(args)
    models = {name: build_model(name, size, args, vocab_size) for name in names}
    parameters = {
        name: {"trainable": trainable_parameters(model), "unused_cross_attention": cross_attention_parameters(model)}
        for name, model in models.items()
    }
    work = check_same_work(models, batches)
    steps, losses = {}, {}
    for name, model in models.items():
        steps[name], losses[name] = make_training_step(name, model, batches)
    timings = common.interleave(steps, warmup=args.warmup, repeats=args.repeats, calls=args.steps)
    throughput = {name: common.rates(seconds, tokens) for name, seconds in timings.seconds.items()}
    result = {
        "dims": SIZES[size],
        "models": {},
        "cpu_stalled": {"median": timings.median_stalled(), "max": timings.busiest(), **timings.stalled},
    }
    for name in names:
        first, last = losses[name][: args.steps], losses[name][-args.steps :]
        if not all(math.isfinite(loss) for loss in losses[name]):
            raise RuntimeError(f"{name}: a training loss is not finite: {losses[name]}")
        entry = {
            "class": LABELS[name],
            **parameters[name],
            **work[name],
            "tokens_per_s": common.Summary.of(throughput[name]).to_dict(),
            "loss_first_pass": sum(first) / len(first),
            "loss_last_pass": sum(last) / len(last),
            "steps_trained": len(losses[name]),
        }
        if name != OURS:
            ratio = common.ratio_summary(throughput[OURS], throughput[name])
            ahead, rounds, p_value = common.sign_test(ratio.values)
            entry["ratio_ours_to_this"] = ratio.to_dict() | {"ours_ahead": ahead, "rounds": rounds, "p": p_value}
        result["models"][name] = entry
    return result


# ----------------------------------------------------------------------------------------------------------------
# Report
# ----------------------------------------------------------------------------------------------------------------
def print_size_report(result: dict) -> None:
    rows = []
    for name, entry in result["models"].items():
        speed, ratio = entry["tokens_per_s"], entry.get("ratio_ours_to_this")
        unused = entry["unused_cross_attention"]
        rows.append([
            f"{name} ({entry['class']})",
            f"{entry['trainable']:,}" + (f" ({unused:,} unused)" if unused else ""),
            f"{entry['gflop_per_round']:.2f}",
            f"{speed['median']:,.0f}",
            f"{speed['low']:,.0f}-{speed['high']:,.0f}",
            "" if ratio is None else f"{ratio['median']:.3f}",
            "" if ratio is None else f"{ratio['low']:.3f}-{ratio['high']:.3f}",
            "" if ratio is None else f"{ratio['ours_ahead']}/{ratio['rounds']}, p={ratio['p']:.2g}",
            f"{entry['loss_first_pass']:.2f} -> {entry['loss_last_pass']:.2f}",
        ])  # fmt: skip
    headers = ["", "parameters", "GFLOP/round", "tokens/s", "min-max", "ours/this", "ratio range",
               "ours ahead", "loss"]  # fmt: skip
    print(common.format_table(headers, rows))
    stalled = result["cpu_stalled"]
    if stalled["median"] is None:
        print("CPU contention not measurable (no /proc/pressure/cpu)")
    else:
        print(f"CPU stalled {stalled['median']:.0%} of the time (median round; max {stalled['max']:.0%})")


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    bench_model.quiet_libraries()
    torch.set_num_threads(args.threads)
    machine = common.machine_description(torch.get_num_threads())
    machine["model_version"] = common.source_version(REPO_ROOT / "modeling_vaswani")
    print(
        f"Causal LM training, ours vs {', '.join(args.peers)} on {machine['cpu']} ({', '.join(machine['cpu_flags'])}; "
        f"{machine['cores_available']} cores available, {machine['threads']} torch threads), torch {machine['torch']}, "
        f"transformers {machine['transformers']}, {machine['date']}; modeling_vaswani at {machine['model_version']}"
    )
    sentences = read_sentences(args.data, args.lang)
    batches, data = make_batches(sentences, args)
    print(
        f"data: {args.data} ({args.lang}, {data['sentences_in_corpus']:,} sentences), BPE vocab {data['vocab_size']} "
        f"trained on them in {data['tokenizer_training_seconds']:.1f} s; {args.steps} batches of {args.batch_size} "
        f"sentences at length quantiles (<s> text </s>: median {data['corpus_length_median']} tokens, "
        f"{data['corpus_cut_at_max_len']} cut at {args.max_len}), shapes "
        f"{', '.join('x'.join(map(str, shape)) for shape in data['shapes'])}; {data['tokens_per_round']:,} tokens "
        f"({data['targets_per_round']:,} targets) per round, {data['padding']:.0%} padding"
    )
    print(
        f"float32, attention {args.attn}, dropout 0.1, AdamW(lr={ADAMW['lr']}, betas={ADAMW['betas']}, "
        f"eps={ADAMW['eps']}, weight_decay={ADAMW['weight_decay']}); {args.warmup} warmup steps + {args.repeats} "
        f"rounds x {args.steps} steps per model, interleaved; tokens/s = non-PAD input tokens per second"
    )
    results = {}
    for size in args.sizes:
        dims = SIZES[size]
        print(
            f"\n=== {size}: d_model {dims['d_model']}, {dims['layers']} layers, {dims['heads']} heads, "
            f"FFN {dims['ffn_dim']}, vocab {data['vocab_size']} ===",
            flush=True,
        )
        results[size] = benchmark_size(size, args, batches, data["vocab_size"], data["tokens_per_round"])
        print_size_report(results[size])
    common.write_json_report(args.json, args, machine=machine, data=data, sizes=results)
    if args.json:
        print(f"\nresults written to {args.json}")


if __name__ == "__main__":
    main()
