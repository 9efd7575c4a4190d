"""Benchmark: our BPE (`tokenization`, on Hugging Face `tokenizers`) against SentencePiece's BPE, in one run.

Both train on the same generated corpus (half English-like, half German-like sentences; deterministic, no network)
with the same vocabulary size, byte fallback and thread count, then encode the same sentences in batches.

    python benchmarks/bench_tokenizer.py                              # full size: 1M sentences, vocab 37000
    python benchmarks/bench_tokenizer.py --threads 1                  # one thread for both
    python benchmarks/bench_tokenizer.py --sentences 20000 --vocab_size 4000 --repeats 1 --no-aa   # smoke run

Timing follows benchmarks/common.py's discipline: the first run of every candidate is an untimed warm-up (for
training, the run that gives the tokenizers the encoding rounds use), then `--repeats` (5) rounds interleaved
between the sides; medians and min-max printed; the CPU, its flags and the thread count in the header; SentencePiece
timed a second time in every round (A/A, `--no-aa` to skip), so that the noise of a ratio is a measured number; a
target ("ours at least as fast as SentencePiece") called met only when the median and most rounds reach it.

Ratios are ours/SentencePiece in speed, per round (higher = ours faster). Requires `sentencepiece` (the `bench`
extra).
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import common  # benchmarks/, the folder of this script

# The reference side of every ratio (and of the A/A measurement), one per measurement.
SPM_TRAIN = "sentencepiece, SentencePieceTrainer"
SPM_BATCH = "sentencepiece, encode(batch)"
SPM_SINGLE = "sentencepiece, encode(text)"


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0], allow_abbrev=False)
    parser.add_argument("--sentences", type=int, default=1_000_000, help="corpus size, both languages together")
    parser.add_argument("--vocab_size", type=int, default=37000, help="shared vocabulary size (paper: 37000)")
    parser.add_argument("--threads", type=int, default=os.cpu_count(), help="threads for both libraries")
    parser.add_argument("--encode_sentences", type=int, default=200_000, help="sentences to encode (spread evenly)")
    parser.add_argument("--batch_size", type=int, default=1000, help="sentences per encode call")
    parser.add_argument("--single_sentences", type=int, default=20_000, help="sentences for the one-per-call test")
    parser.add_argument("--repeats", type=int, default=5,
                        help="interleaved timing rounds of training and of encoding, after one warm-up per side; "
                             "the median is reported")  # fmt: skip
    common.add_aa_argument(parser, "SentencePiece")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workdir", default=None, help="keep corpus and models here (default: a temporary folder)")
    parser.add_argument("--json", help="also write the results to this JSON file")
    args = parser.parse_args(argv)
    for name in ("sentences", "vocab_size", "threads", "encode_sentences", "batch_size", "single_sentences",
                 "repeats"):  # fmt: skip
        if getattr(args, name) < 1:
            parser.error(f"--{name} {getattr(args, name)} is not allowed: use a positive integer")
    return args


# --- corpus ------------------------------------------------------------------------------------------------------

LANGUAGES = {
    # function words (the most frequent words), onsets, vowels, codas, inflection suffixes
    "en": (
        "the of and to a in is that it was for on are as with his they at be this from I have or by one had not but",
        "b c d f g h k l m n p r s t v w y bl br ch cl cr dr fl fr gr pl pr sh sl sp st str th tr wh",
        "a e i o u a e i o u ea ee oo ou ai ay",
        "- - - - - n r s t l d m ng nd nt st ck ll",
        "- s ed ing er ly tion ment",
    ),
    "de": (
        "der die und in den von zu das mit sich des auf für ist im dem nicht ein Die eine als auch es an werden aus",
        "b d f g h k l m n p r s t w z br ch dr fl fr gr kl kr pf schw sch schl spr st str tr zw",
        "a e i o u a e i o u ä ö ü ei au eu ie",
        "- - - - - n r s t l m ch ck ng nd nt st tz ß",
        "- en er e es ung heit lich isch",
    ),
}
RARE_INSERTS = ["😀", "日本", "Ελλάδα", "Moskva", "São Paulo", "naïve", "Zürich", "Øresund", "€", "–", "«", "»"]


def make_lexicon(rng: random.Random, language: str, stems: int) -> tuple[list[str], list[float]]:
    """Words of a made-up language and their Zipf frequencies: function words, then inflected forms of `stems`
    stems of one to three syllables (German nouns capitalized, some German stems compounded)."""
    function_words, *parts = LANGUAGES[language]
    onsets, vowels, codas, suffixes = ([piece.strip("-") for piece in part.split()] for part in parts)
    onsets.append("")  # a word may start with a vowel
    unique: set[str] = set()
    while len(unique) < stems:
        syllables = rng.choices((1, 2, 3), weights=(55, 35, 10))[0]
        unique.add("".join(rng.choice(onsets) + rng.choice(vowels) + rng.choice(codas) for _ in range(syllables)))
    ordered = sorted(unique)
    rng.shuffle(ordered)  # frequency rank independent of spelling
    words = function_words.split()
    weights = [1.0 / (rank + 1) for rank in range(len(words))]
    for rank, stem in enumerate(ordered, start=len(words)):
        if language == "de" and rng.random() < 0.15:
            stem += rng.choice(ordered[:2000])  # compound
        if language == "de" and rng.random() < 0.35:
            stem = stem.capitalize()  # noun
        forms = rng.sample(suffixes, rng.randint(1, 3))
        words += [stem + suffix for suffix in forms]
        weights += [1.0 / (rank + 1) / len(forms)] * len(forms)
    return words, weights


def make_sentences(rng: random.Random, lexicon: tuple[list[str], list[float]], count: int) -> list[str]:
    """`count` sentences of 3-40 words (mean about 17) drawn from the lexicon, with punctuation and numbers."""
    words, weights = lexicon
    lengths = [min(40, max(3, round(rng.gauss(17, 8)))) for _ in range(count)]
    drawn = rng.choices(words, weights=weights, k=sum(lengths))
    sentences, start = [], 0
    for length in lengths:
        chosen = drawn[start : start + length]
        start += length
        chosen[0] = chosen[0].capitalize()
        if rng.random() < 0.4:
            chosen[rng.randrange(length)] += ","
        if rng.random() < 0.1:
            chosen.insert(rng.randrange(length), str(rng.randrange(1, 2030)))
        if rng.random() < 0.02:
            chosen.insert(rng.randrange(length), rng.choice(RARE_INSERTS))
        sentences.append(" ".join(chosen) + rng.choice(".....?!:"))
    return sentences


def write_corpus(directory: Path, sentences: int, seed: int) -> list[Path]:
    """Write train.en and train.de (half of `sentences` each), one sentence per line."""
    rng = random.Random(seed)
    paths = []
    for language in ("en", "de"):
        lexicon = make_lexicon(rng, language, 50_000)
        path = directory / f"train.{language}"
        path.write_text("\n".join(make_sentences(rng, lexicon, sentences // 2)) + "\n", encoding="utf-8")
        paths.append(path)
    return paths


# --- the two tokenizers ------------------------------------------------------------------------------------------


def train_sentencepiece(files: Sequence[Path], vocab_size: int, threads: int, prefix: Path):
    """SentencePiece BPE with the same special-token ids, byte fallback, NFKC and whitespace handling as ours."""
    import sentencepiece as spm

    spm.SentencePieceTrainer.train(
        input=",".join(map(str, files)),
        model_prefix=str(prefix),
        model_type="bpe",
        vocab_size=vocab_size,
        byte_fallback=True,
        character_coverage=1.0,  # every character of the corpus in the vocabulary, like the tokenizers trainer
        pad_id=0,
        bos_id=1,
        eos_id=2,
        unk_id=3,
        normalization_rule_name="nfkc",
        remove_extra_whitespaces=False,  # ours keeps runs of spaces
        input_sentence_size=0,  # train on every sentence, as ours does
        max_sentence_length=1 << 16,
        num_threads=threads,
        minloglevel=2,
    )
    return spm.SentencePieceProcessor(model_file=f"{prefix}.model", add_eos=True)  # ours appends </s> too


def timed(function: Callable[[], object]) -> tuple[float, object]:
    start = time.perf_counter()
    result = function()
    return time.perf_counter() - start, result


def evenly_spaced(items: Sequence[str], count: int) -> Sequence[str]:
    """`count` items spread over the whole list (both languages), or all of them."""
    return items[:: max(1, len(items) // count)][:count]


# --- timing and report (benchmarks/common.py's discipline) --------------------------------------------------------


def measure(candidates: dict[str, Callable[[], object]], reference: str, args: argparse.Namespace, warmup: int):
    """`common.interleave` over the candidates (plus the reference's A/A copy with --aa): seconds per round."""
    candidates = common.with_aa_copy(candidates, reference) if args.aa else candidates
    return common.interleave(candidates, warmup=warmup, repeats=args.repeats)


def report(title: str, timings: common.Interleaved, work: float | None, reference: str, unit: str) -> dict:
    """Print one table: per candidate the median rate (`work` per round / seconds; with `work` None, the seconds
    themselves) and its range, the per-round ratio of its speed to the reference's (median, range, how many rounds
    faster, sign test), the A/A noise and a verdict (at least SentencePiece's speed) for each of ours. Returns the
    figures for --json."""
    speed = {name: common.rates(seconds, work or 1.0) for name, seconds in timings.seconds.items()}
    shown = timings.seconds if work is None else speed
    print(f"\n{title} ({unit}; ratio = our speed / SentencePiece's in the same round, higher = ours faster; "
          f"CPU stalled (median) {timings.median_stalled() or 0:.0%}):")  # fmt: skip
    rows, figures = [], {}
    for name, rates in speed.items():
        cells, ratio = common.comparison_row(name, shown[name], rates, speed[reference], ",.1f")
        rows.append(cells)
        figures[name] = {unit: common.Summary.of(shown[name]).to_dict(), "ratio": ratio.to_dict()}
    print(common.format_table([f"candidate ({len(timings.seconds[reference])} rounds)", unit, "range", "x SentencePiece",
                               "ratio range", "rounds faster"], rows))  # fmt: skip
    aa = common.aa_summary(speed, reference)
    print(common.describe_aa(aa, reference))
    for name in (name for name in speed if name.startswith("ours")):
        ratios = figures[name]["ratio"]["values"]
        print(f"{common.verdict(ratios, 1.0)} target {name} >= SentencePiece's speed: {statistics.median(ratios):.2f}")
    return {"figures": figures, "aa": aa and aa.to_dict(), "stalled": timings.median_stalled()}


def main() -> None:
    args = parse_args()
    # Both libraries get the same thread count; tokenizers (rayon) reads it when its thread pool starts.
    os.environ["RAYON_NUM_THREADS"] = str(args.threads)
    os.environ["TOKENIZERS_PARALLELISM"] = "true"
    import sentencepiece
    import tokenizers

    from tokenization import train_bpe_tokenizer  # imported before timing (it loads transformers)

    print(common.describe_machine(common.machine_description(args.threads)))
    with tempfile.TemporaryDirectory() as temporary:
        workdir = Path(args.workdir or temporary)
        workdir.mkdir(parents=True, exist_ok=True)
        seconds, files = timed(lambda: write_corpus(workdir, args.sentences, args.seed))
        sentences = [line for path in files for line in path.read_text(encoding="utf-8").splitlines()]
        megabytes = sum(path.stat().st_size for path in files) / 1e6
        words = sum(len(sentence.split()) for sentence in sentences)
        print(f"corpus: {len(sentences):,} sentences, {words:,} words, {megabytes:.1f} MB, made in {seconds:.1f} s")
        print(f"tokenizers {tokenizers.__version__}, sentencepiece {sentencepiece.__version__}, vocab_size "
              f"{args.vocab_size}, {args.threads} threads for both, {args.repeats} interleaved rounds after a warm-up "
              f"per side, A/A {'on' if args.aa else 'off'}")  # fmt: skip
        results = {}

        # --- training on the same two files: the untimed first run of each is the warm-up and gives the tokenizers
        # that encode below; the timed rounds train again from scratch ---
        def train_ours():
            return train_bpe_tokenizer(files=files, vocab_size=args.vocab_size, show_progress=False)

        def train_spm(prefix: str = "spm-timed"):
            return train_sentencepiece(files, args.vocab_size, args.threads, workdir / prefix)

        ours, spm = train_ours(), train_spm("spm")
        print(f"vocabulary: ours {len(ours)}, sentencepiece {spm.get_piece_size()}")
        training = {"ours, train_bpe_tokenizer": train_ours, SPM_TRAIN: train_spm}
        timings = measure(training, SPM_TRAIN, args, warmup=0)
        results["training"] = report("training", timings, None, SPM_TRAIN, "seconds")

        # --- encoding: the same sentences, in the same batches; ids include </s> for both ---
        sample = evenly_spaced(sentences, args.encode_sentences)
        chunks = [sample[i : i + args.batch_size] for i in range(0, len(sample), args.batch_size)]
        backend = ours.backend_tokenizer
        batched = {
            "ours, tokenizer(batch) (transformers)": lambda: [ids for c in chunks for ids in ours(c)["input_ids"]],
            "ours, encode_batch_fast (tokenizers)": lambda: [
                encoding.ids for c in chunks for encoding in backend.encode_batch_fast(c)
            ],
            SPM_BATCH: lambda: [ids for c in chunks for ids in spm.encode(c, out_type=int, num_threads=args.threads)],
        }
        single = evenly_spaced(sentences, args.single_sentences)
        one_by_one = {
            "ours, tokenizer(text) (transformers)": lambda: [ours(text)["input_ids"] for text in single],
            "ours, encode (tokenizers)": lambda: [backend.encode(text).ids for text in single],
            SPM_SINGLE: lambda: [spm.encode(text, out_type=int) for text in single],
        }
        for key, encoders, reference, texts, how in (
            ("batches", batched, SPM_BATCH, sample, f"in batches of {args.batch_size}"),
            ("one_per_call", one_by_one, SPM_SINGLE, single, "one per call"),
        ):
            tokens = {name: sum(map(len, encode())) / len(texts) for name, encode in encoders.items()}  # warm-up
            print("\ntokens per sentence, </s> included: "
                  + ", ".join(f"{name} {count:.1f}" for name, count in tokens.items()))  # fmt: skip
            timings = measure(encoders, reference, args, warmup=0)
            title = f"encoding {len(texts):,} sentences {how}"
            results[key] = {**report(title, timings, len(texts), reference, "sentences/s"), "tokens": tokens}
        print(f"\nload average at the end: {os.getloadavg()[0]:.1f}")
        common.write_json_report(args.json, args, **results)


if __name__ == "__main__":
    main()
