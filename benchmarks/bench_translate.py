"""Benchmark: translation speed and quality of our model with PyTorch (float32, bfloat16) and CTranslate2 (float32,
int8), against transformers' `MarianMTModel.generate()` and CTranslate2 running a converted `MarianMTModel`.

Part 1, a model trained by train.py on a real held-out set (default: ../shared/data/gettext-en-es/test.jsonl):
sentences/s of `vaswani.inference.translator.Translator` (beam 4, length penalty 0.6, source + 50 cap, length-sorted batches
of `--batch_tokens`) and BLEU / chrF (sacrebleu) for torch fp32, torch bf16 (autocast), CTranslate2 fp32 and
CTranslate2 int8 (exported with `vaswani.export.ctranslate2`). Targets: BLEU loss of int8 and bf16 <= 0.5. Each
engine runs as `vaswani translate` runs it, so PyTorch's `generate()` and CTranslate2 end their beam searches by their
own rules and may decode different lengths: part 1 measures what a user gets, not equal work; part 2 is the
comparison at equal work.

Part 2, random weights of identical dimensions (small: d 256, 3+3; base: d 512, 6+6; vocabulary 8000; ReLU,
shared embeddings, sinusoidal positions, sqrt(d) scaling): sentences/s of beam-4 search over `--gen_batch_size`
sentences with the output length forced (min = max new tokens), so every engine decodes exactly as many steps:
HF Marian fp32 (`MarianMTModel.generate()`), ours torch fp32 and bf16 (`generate()`), ours CTranslate2 fp32 / int8,
Marian CTranslate2 fp32 / int8 (ctranslate2.converters.TransformersConverter on a saved random MarianMTModel).
Ratios to HF Marian fp32, per interleaved round (median and range). Targets: CTranslate2 int8 of ours >= the same
for Marian (within noise) and >= 2.3x HF Marian; torch bf16 >= 1.5x HF Marian fp32. With `--ours converted`, "ours"
is not a model of our own with random weights but the very MarianMTModel that HF Marian runs, converted by
`vaswani convert --from marian`'s mapping (`vaswani.convert`): a converted model against the model it came from,
the same weights and the same sentences.

Every engine uses the same number of CPU threads (`--threads`, default: all cores). PyTorch uses them inside each
matrix product; CTranslate2 (ours and Marian's alike) as `vaswani translate` runs it: each batch cut into
`--parallel_batches` parts decoded at once, each part on threads / parts cores (default: one part per thread, see
`vaswani.inference.engines.ct2_threads`; `--parallel_batches 1` gives all threads to one batch). Rounds are interleaved
(A B C, C B A, ...), medians and ranges printed; the CPU pressure (share of time some task waited for a core, Linux
PSI) is printed with each part, and so is the A/A noise (the reference engine timed a second time in every round,
`--no-aa` to skip). bfloat16 on a CPU without AVX512-BF16/AMX
is refused by `vaswani translate`; here it still runs (emulated by oneDNN) so that its quality and speed can be
reported, and the report says so.

    python benchmarks/bench_translate.py --model runs/gettext-small               # both parts
    python benchmarks/bench_translate.py --model runs/gettext-small --parts trained --limit 300 --repeats 2
    python benchmarks/bench_translate.py --parts random --sizes small --repeats 3  # smoke run
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path
from types import SimpleNamespace

import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))  # `common`, `bench_model` when run as a script
sys.path.insert(1, str(REPO_ROOT))

import bench_model  # noqa: E402
import common  # noqa: E402

from vaswani.errors import TranslateError  # noqa: E402
from vaswani.inference.engines import ct2_max_batch_size, ct2_threads, new_ct2_translator  # noqa: E402

DEFAULT_TEST_FILE = REPO_ROOT.parent / "shared" / "data" / "gettext-en-es" / "test.jsonl"
PARTS = ("trained", "random")  # --parts: a model trained by train.py on real data; random weights of fixed sizes
TRAINED_ENGINES = ("torch fp32", "torch bf16", "ct2 fp32", "ct2 int8")
RANDOM_ENGINES = ("HF Marian fp32", "torch fp32", "torch bf16", "ct2 fp32", "ct2 int8", "Marian ct2 fp32",
                  "Marian ct2 int8")  # fmt: skip


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--parts", type=common.choice_list(PARTS, "parts"), default=list(PARTS),
                        help="comma-separated: trained, random (default: both)")  # fmt: skip
    parser.add_argument("--model", type=Path, help="a model folder written by train.py (part 1)")
    parser.add_argument("--test_file", type=Path, default=DEFAULT_TEST_FILE, help="held-out .jsonl (part 1)")
    parser.add_argument("--source_lang", default="en")
    parser.add_argument("--target_lang", default="es")
    parser.add_argument("--limit", type=int, default=None, help="first N test sentences (default: all)")
    parser.add_argument("--batch_tokens", type=int, default=4096, help="source tokens per batch (part 1)")
    bench_model.add_workload_arguments(parser, part="part 2: ")
    parser.add_argument("--new_tokens", type=int, default=30, help="part 2: forced output length")
    parser.add_argument(
        "--engines", type=_engine_list, default=",".join(RANDOM_ENGINES),
        help="part 2: comma-separated engines to time (HF Marian fp32, the base of the ratios, always is); e.g. only "
        "'ct2 fp32,ct2 int8,Marian ct2 fp32,Marian ct2 int8' for more rounds of the CTranslate2 comparison",
    )  # fmt: skip
    parser.add_argument(
        "--ours", choices=["native", "converted"], default="native",
        help="part 2: our model with its own random weights (native) or the MarianMTModel converted (converted)",
    )  # fmt: skip
    parser.add_argument("--repeats", type=int, default=5, help="interleaved timing rounds")
    parser.add_argument("--warmup", type=int, default=1, help="untimed calls per engine")
    parser.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)), help="CPU threads, all")
    parser.add_argument("--parallel_batches", type=int, default=None,
                        help="CTranslate2 engines (ours and Marian's alike): batch parts decoded at once, each on "
                             "threads / N cores (default: vaswani translate's, one per thread; 1: the threads inside "
                             "one batch)")  # fmt: skip
    parser.add_argument("--seed", type=int, default=0)
    common.add_aa_argument(parser, "the engine every ratio is taken against (torch fp32 / HF Marian fp32)")
    parser.add_argument("--json", metavar="OUT", help="also write the results to this JSON file")
    args = parser.parse_args(argv)
    if "trained" in args.parts:  # checked before anything is timed
        if args.model is None:
            parser.error("the trained part needs --model DIR (a folder written by train.py); or use --parts random")
        if not args.test_file.is_file():
            parser.error(f"--test_file {args.test_file} is not a file: give the held-out .jsonl of the trained part")
    try:  # vaswani translate's own check of the two
        ct2_threads("cpu", args.threads, args.parallel_batches)
    except TranslateError as error:
        parser.error(f"--threads {args.threads} / --parallel_batches {args.parallel_batches}: {error}")
    return args


def _engine_list(value: str) -> list[str]:
    """The engines asked for, in RANDOM_ENGINES' order, always with HF Marian fp32 (the base of every ratio)."""
    engines = common.choice_list(RANDOM_ENGINES, "engines")(value)
    return [name for name in RANDOM_ENGINES if name in engines or name == "HF Marian fp32"]


def main() -> None:
    args = parse_args()
    bench_model.quiet_libraries()
    torch.set_num_threads(args.threads)
    native_bf16 = allow_bf16()
    parallel, per_part = ct2_threads("cpu", args.threads, args.parallel_batches)
    print(f"on {common.describe_machine(common.machine_description(args.threads))}", flush=True)
    print(f"threads: {args.threads} for every engine (torch intra-op; CTranslate2 as vaswani translate runs it: each "
          f"batch in {parallel} part(s) at once, {per_part} thread(s) each); torch "
          f"{torch.__version__}, CPU capability {torch.backends.cpu.get_cpu_capability()}, native bf16: "
          f"{native_bf16}; load average {os.getloadavg()[0]:.2f}", flush=True)  # fmt: skip
    results = {"threads": args.threads, "ct2_parallel_batches": parallel, "native_bf16": native_bf16}
    with tempfile.TemporaryDirectory() as scratch:
        if "trained" in args.parts:
            results["trained"] = trained_part(args, Path(scratch))
        if "random" in args.parts:
            results["random"] = {size: random_part(size, args, Path(scratch)) for size in args.sizes}
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))


def allow_bf16() -> bool:
    """Whether this CPU runs bf16 natively; if not, let the benchmark run it anyway (emulated) and say so."""
    import vaswani.inference.engines as backends

    native = backends.torch_dtype_supported("bfloat16", "cpu")
    if not native:
        backends.torch_dtype_supported = lambda dtype, device: True
    return native


# ----------------------------------------------------------------------------------------------------------------
# Part 1: the trained model on the held-out set
# ----------------------------------------------------------------------------------------------------------------
def trained_part(args: argparse.Namespace, scratch: Path) -> dict:
    import sacrebleu

    from vaswani.export.ctranslate2 import export_ctranslate2
    from vaswani.inference.translator import Translator

    pairs = [json.loads(line)["translation"] for line in args.test_file.read_text().splitlines() if line.strip()]
    pairs = pairs[: args.limit] if args.limit else pairs
    sources = [pair[args.source_lang] for pair in pairs]
    references = [pair[args.target_lang] for pair in pairs]
    folders = {q: export_ctranslate2(args.model, scratch / f"ct2-{q}", quantization=q) for q in ("float32", "int8")}
    translators = {
        "torch fp32": Translator(args.model, device="cpu"),
        "torch bf16": Translator(args.model, device="cpu", dtype="bfloat16"),
        "ct2 fp32": Translator(folders["float32"], device="cpu", parallel_batches=args.parallel_batches),
        "ct2 int8": Translator(folders["int8"], device="cpu", parallel_batches=args.parallel_batches),
    }
    outputs = {}

    def call(name):
        def run():
            outputs[name] = translators[name].translate(sources, batch_tokens=args.batch_tokens)

        return run

    print(f"\n== trained model {args.model} on {args.test_file} ({len(sources)} sentences), beam 4, lp 0.6 ==",
          flush=True)  # fmt: skip
    calls = {name: call(name) for name in TRAINED_ENGINES}
    calls = common.with_aa_copy(calls, "torch fp32") if args.aa else calls
    timings = common.interleave(calls, warmup=args.warmup, repeats=args.repeats)
    speed = {name: common.rates(seconds, len(sources)) for name, seconds in timings.seconds.items()}
    aa = common.aa_summary(speed, "torch fp32")
    scores = {
        name: {"bleu": sacrebleu.corpus_bleu(outputs[name], [references]).score,
               "chrf": sacrebleu.corpus_chrf(outputs[name], [references]).score}
        for name in TRAINED_ENGINES
    }  # fmt: skip
    base = speed["torch fp32"]
    print(f"{'engine':<12} {'sent/s':>8} {'range':>15} {'x torch fp32':>13} {'BLEU':>6} {'dBLEU':>6} {'chrF':>6}")
    for name in TRAINED_ENGINES:
        summary, ratio = common.Summary.of(speed[name]), common.ratio_summary(speed[name], base)
        print(f"{name:<12} {summary.median:8.2f} {summary.low:7.2f}-{summary.high:<7.2f} {ratio.median:13.2f} "
              f"{scores[name]['bleu']:6.2f} {scores[name]['bleu'] - scores['torch fp32']['bleu']:+6.2f} "
              f"{scores[name]['chrf']:6.2f}")  # fmt: skip
    same = {name: sum(a == b for a, b in zip(outputs[name], outputs["torch fp32"], strict=True)) / len(sources)
            for name in TRAINED_ENGINES}  # fmt: skip
    print("identical to torch fp32: " + ", ".join(f"{name} {share:.1%}" for name, share in same.items()))
    print(f"targets: BLEU loss <= 0.5 -> int8 {scores['torch fp32']['bleu'] - scores['ct2 int8']['bleu']:.2f}, "
          f"bf16 {scores['torch fp32']['bleu'] - scores['torch bf16']['bleu']:.2f}; CPU stalled (median) "
          f"{_pct(timings.median_stalled())}", flush=True)  # fmt: skip
    print(common.describe_aa(aa, "torch fp32"), flush=True)
    return {"sentences": len(sources), "speed": speed, "scores": scores, "identical": same,
            "stalled": timings.median_stalled(), "aa": aa and aa.to_dict()}  # fmt: skip


# ----------------------------------------------------------------------------------------------------------------
# Part 2: random weights, forced output length
# ----------------------------------------------------------------------------------------------------------------
def random_part(size: str, args: argparse.Namespace, scratch: Path) -> dict:
    import ctranslate2

    from vaswani.export.ctranslate2 import VaswaniConverter

    model_args = SimpleNamespace(vocab_size=args.vocab_size, src_len=args.src_len, tgt_len=args.new_tokens,
                                 new_tokens=args.new_tokens, attn="sdpa", seed=args.seed,
                                 gen_batch_size=args.gen_batch_size)  # fmt: skip
    marian = bench_model.build_model("marian", size, model_args).eval()
    ours = (
        converted(marian) if args.ours == "converted" else bench_model.build_model("ours", size, model_args)
    ).eval()
    batch = bench_model.make_generation_batch(model_args)
    vocabulary = ["<pad>", "<s>", "</s>", "<unk>", *[f"w{i}" for i in range(4, args.vocab_size)]]
    tokenizer = VocabularyTokenizer(vocabulary)
    ours_ct2 = {q: _ct2(ctranslate2, VaswaniConverter(ours, tokenizer), scratch / f"ours-{size}-{q}", q, args)
                for q in ("float32", "int8")}  # fmt: skip
    marian_ct2 = {q: _ct2(ctranslate2, marian_converter(ctranslate2, size, model_args, scratch),
                          scratch / f"marian-{size}-{q}", q, args) for q in ("float32", "int8")}  # fmt: skip
    sources = [[vocabulary[i] for i in row[mask.bool()].tolist()]
               for row, mask in zip(batch["input_ids"], batch["attention_mask"], strict=True)]  # fmt: skip
    hf_call = bench_model.make_generate_call(marian, batch, model_args)
    ours_call = bench_model.make_generate_call(ours, batch, model_args)

    def bf16_call():
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return ours_call()

    def ct2_call(translator):
        return lambda: translator.translate_batch(
            sources, beam_size=bench_model.NUM_BEAMS, length_penalty=bench_model.LENGTH_PENALTY,
            min_decoding_length=args.new_tokens, max_decoding_length=args.new_tokens, max_input_length=0,
            max_batch_size=ct2_max_batch_size(len(sources), translator.num_translators),
        )  # fmt: skip

    calls = {
        "HF Marian fp32": hf_call, "torch fp32": ours_call, "torch bf16": bf16_call,
        "ct2 fp32": ct2_call(ours_ct2["float32"]), "ct2 int8": ct2_call(ours_ct2["int8"]),
        "Marian ct2 fp32": ct2_call(marian_ct2["float32"]), "Marian ct2 int8": ct2_call(marian_ct2["int8"]),
    }  # fmt: skip
    calls = {name: call for name, call in calls.items() if name in args.engines}
    check_forced_lengths(calls, args)
    calls = common.with_aa_copy(calls, "HF Marian fp32") if args.aa else calls
    if torch.get_num_threads() != args.threads:  # PyTorch's engines must get the threads CTranslate2 gets
        raise RuntimeError(f"PyTorch runs {torch.get_num_threads()} threads, not {args.threads}")
    with torch.inference_mode():
        timings = common.interleave(calls, warmup=args.warmup, repeats=args.repeats)
    speed = {name: common.rates(seconds, args.gen_batch_size) for name, seconds in timings.seconds.items()}
    base = speed["HF Marian fp32"]
    what = "random weights" if args.ours == "native" else "ours = the random MarianMTModel converted"
    print(f"\n== {what}, {bench_model.describe_size(size, model_args)}: beam 4, batch {args.gen_batch_size}, "
          f"exactly {args.new_tokens} new tokens, {args.repeats} rounds ==")  # fmt: skip
    print(f"{'engine':<16} {'sent/s':>8} {'range':>15} {'x HF Marian fp32':>17} {'ratio range':>12}")
    ratios = {}
    for name in args.engines:
        summary, ratio = common.Summary.of(speed[name]), common.ratio_summary(speed[name], base)
        ratios[name] = ratio
        print(f"{name:<16} {summary.median:8.2f} {summary.low:7.2f}-{summary.high:<7.2f} {ratio.median:17.2f} "
              f"{ratio.low:5.2f}-{ratio.high:<5.2f}")  # fmt: skip
    targets, ours_vs_marian = [], None
    if {"ct2 int8", "Marian ct2 int8"} <= set(speed):
        ours_vs_marian = common.ratio_summary(speed["ct2 int8"], speed["Marian ct2 int8"])
        above, count, p_value = common.sign_test(ours_vs_marian.values)
        targets.append(f"ct2 int8 ours / Marian ct2 int8 = {ours_vs_marian.median:.2f} ({ours_vs_marian.low:.2f}-"
                       f"{ours_vs_marian.high:.2f}; above 1 in {above}/{count} rounds, p={p_value:.2f}) (>= 1 within "
                       "noise)")  # fmt: skip
    if "ct2 int8" in ratios:
        verdict = common.verdict(ratios["ct2 int8"].values, 2.3)
        targets.append(f"ct2 int8 {ratios['ct2 int8'].median:.2f}x HF Marian (>= 2.3: {verdict})")
    if "torch bf16" in ratios:
        verdict = common.verdict(ratios["torch bf16"].values, 1.5)
        targets.append(f"torch bf16 {ratios['torch bf16'].median:.2f}x (>= 1.5: {verdict})")
    print(f"targets: {'; '.join(targets)}; CPU stalled (median) {_pct(timings.median_stalled())}", flush=True)
    aa = common.aa_summary(speed, "HF Marian fp32")
    print(common.describe_aa(aa, "HF Marian fp32"), flush=True)
    return {"speed": speed, "ratios": {name: r.median for name, r in ratios.items()},
            "ours_vs_marian_ct2_int8": ours_vs_marian.median if ours_vs_marian else None,
            "stalled": timings.median_stalled(), "aa": aa and aa.to_dict()}  # fmt: skip


def converted(marian):
    """`marian` (a MarianMTModel) as the vaswani model `vaswani convert --from marian` makes of it."""
    from modeling_vaswani import VaswaniForConditionalGeneration
    from vaswani.convert.marian import final_logits_bias_of, marian_vaswani_config, marian_vaswani_state_dict

    source = marian.state_dict()
    config = marian_vaswani_config(marian.config, final_logits_bias=final_logits_bias_of(source))
    model = VaswaniForConditionalGeneration(config)
    model.load_state_dict(marian_vaswani_state_dict(source, config), strict=True)
    return model


class VocabularyTokenizer:
    """The few tokenizer methods the converters use, for random-weight models that have no tokenizer: token i is
    `vocabulary[i]`."""

    def __init__(self, vocabulary: list[str]):
        self.vocabulary = vocabulary
        self.pad_token, self.bos_token, self.eos_token, self.unk_token = vocabulary[:4]
        self.unk_token_id = 3

    def get_vocab(self) -> dict[str, int]:
        return {token: i for i, token in enumerate(self.vocabulary)}

    def convert_ids_to_tokens(self, ids):
        if isinstance(ids, int):
            return self.vocabulary[ids]
        return [self.vocabulary[i] if i < len(self.vocabulary) else None for i in ids]


def marian_converter(ctranslate2, size: str, model_args, scratch: Path):
    """TransformersConverter on a saved random MarianMTModel laid out as real Marian models are (PAD = decoder start
    = the last id; CTranslate2 drops that row and starts the decoder from a zero embedding)."""
    from transformers import MarianConfig, MarianMTModel

    folder = scratch / f"marian-hf-{size}"
    if not folder.exists():
        dims = bench_model.model_dims(size, model_args)
        pad = model_args.vocab_size
        dims.update(vocab_size=pad + 1, pad_token_id=pad, decoder_start_token_id=pad)
        torch.manual_seed(model_args.seed)
        MarianMTModel(MarianConfig(**dims, share_encoder_decoder_embeddings=True, forced_eos_token_id=None)
                      ).save_pretrained(folder)  # fmt: skip
    vocabulary = ["<unused>", "<s>", "</s>", "<unk>", *[f"w{i}" for i in range(4, model_args.vocab_size)], "<pad>"]

    class Converter(ctranslate2.converters.TransformersConverter):
        def load_tokenizer(self, tokenizer_class, model_name_or_path, **kwargs):
            return VocabularyTokenizer(vocabulary)

    return Converter(str(folder))


def _ct2(ctranslate2, converter, folder: Path, quantization: str, args: argparse.Namespace):
    """A converted model, run with the threads `vaswani translate` gives CTranslate2 (`ct2_threads`)."""
    converter.convert(str(folder), quantization=quantization, force=True)
    inter_threads, intra_threads = ct2_threads("cpu", args.threads, args.parallel_batches)
    return new_ct2_translator(ctranslate2, folder, device="cpu", intra_threads=intra_threads,
                              inter_threads=inter_threads)  # fmt: skip


def check_forced_lengths(calls: dict, args: argparse.Namespace) -> None:
    """Every engine must decode exactly `new_tokens` tokens per sentence (a fair comparison)."""
    for name, call in calls.items():
        output = call()
        if isinstance(output, torch.Tensor):
            lengths = {output.shape[1] - 1}
        else:
            lengths = {len(result.hypotheses[0]) for result in output}
        if lengths != {args.new_tokens}:
            raise RuntimeError(f"{name} decoded {sorted(lengths)} tokens, not {args.new_tokens}")


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.0%}"


if __name__ == "__main__":
    main()
