"""Benchmark: our BPE (`tokenization`, on Hugging Face `tokenizers`) against SentencePiece's BPE, in one run.

Both train on the same generated corpus (half English-like, half German-like sentences; deterministic, no network)
with the same vocabulary size, byte fallback and thread count, then encode the same sentences in batches.

    python benchmarks/bench_tokenizer.py                              # full size: 1M sentences, vocab 37000
    python benchmarks/bench_tokenizer.py --sentences 20000 --vocab_size 4000   # smoke run, seconds

Ratios are ours/SentencePiece in speed (higher = ours faster). Requires `sentencepiece` (the `bench` extra).
"""

from __future__ import annotations

import argparse
import os
import random
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sentences", type=int, default=1_000_000, help="corpus size, both languages together")
    parser.add_argument("--vocab_size", type=int, default=37000, help="shared vocabulary size (paper: 37000)")
    parser.add_argument("--threads", type=int, default=os.cpu_count(), help="threads for both libraries")
    parser.add_argument("--encode_sentences", type=int, default=200_000, help="sentences to encode (spread evenly)")
    parser.add_argument("--batch_size", type=int, default=1000, help="sentences per encode call")
    parser.add_argument("--single_sentences", type=int, default=20_000, help="sentences for the one-per-call test")
    parser.add_argument("--repeats", type=int, default=3, help="encoding rounds; the best is reported")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workdir", default=None, help="keep corpus and models here (default: a temporary folder)")
    return parser.parse_args()


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


def best_of(encoders: dict[str, Callable[[], list]], repeats: int) -> dict[str, tuple[float, list]]:
    """Shortest wall time of each encoder over `repeats` rounds, interleaved so that load from other processes
    falls on all of them alike; also returns the last output."""
    results: dict[str, tuple[float, list]] = {}
    for _ in range(repeats):
        for name, encode in encoders.items():
            seconds, output = timed(encode)
            results[name] = (min(seconds, results.get(name, (float("inf"),))[0]), output)
    return results


def report_encoding(title: str, count: int, results: dict[str, tuple[float, list]], reference: str) -> None:
    print(f"\n{title} (sentences/s, best of the rounds):")
    for name, (seconds, encoded) in results.items():
        tokens = sum(len(ids) for ids in encoded) / count
        ratio = results[reference][0] / seconds
        print(f"  {name:40s} {count / seconds:10,.0f}   ratio {ratio:5.2f}   ({tokens:.1f} tokens/sentence)")


def main() -> None:
    args = parse_args()
    # Both libraries get the same thread count; tokenizers (rayon) reads it when its thread pool starts.
    os.environ["RAYON_NUM_THREADS"] = str(args.threads)
    os.environ["TOKENIZERS_PARALLELISM"] = "true"
    import sentencepiece
    import tokenizers

    from tokenization import train_bpe_tokenizer  # imported before timing (it loads transformers)

    with tempfile.TemporaryDirectory() as temporary:
        workdir = Path(args.workdir or temporary)
        workdir.mkdir(parents=True, exist_ok=True)
        seconds, files = timed(lambda: write_corpus(workdir, args.sentences, args.seed))
        sentences = [line for path in files for line in path.read_text(encoding="utf-8").splitlines()]
        megabytes = sum(path.stat().st_size for path in files) / 1e6
        words = sum(len(sentence.split()) for sentence in sentences)
        print(f"corpus: {len(sentences):,} sentences, {words:,} words, {megabytes:.1f} MB, made in {seconds:.1f} s")
        print(
            f"tokenizers {tokenizers.__version__}, sentencepiece {sentencepiece.__version__}, "
            f"vocab_size {args.vocab_size}, {args.threads} threads for both (machine: {os.cpu_count()} cores, "
            f"load average {os.getloadavg()[0]:.1f})"
        )

        # --- training: one run each, on the same two files ---
        ours_seconds, ours = timed(
            lambda: train_bpe_tokenizer(files=files, vocab_size=args.vocab_size, show_progress=False)
        )
        spm_seconds, spm = timed(lambda: train_sentencepiece(files, args.vocab_size, args.threads, workdir / "spm"))
        print("\ntraining (s; ratio = sentencepiece time / ours, higher = ours faster):")
        print(
            f"  ours (train_bpe_tokenizer)               {ours_seconds:10.1f}   ratio {spm_seconds / ours_seconds:5.2f}"
            f"   vocabulary {len(ours)}"
        )
        print(
            f"  sentencepiece (SentencePieceTrainer)     {spm_seconds:10.1f}   ratio  1.00   vocabulary "
            f"{spm.get_piece_size()}"
        )

        # --- encoding: the same sentences, in the same batches; ids include </s> for both ---
        sample = evenly_spaced(sentences, args.encode_sentences)
        chunks = [sample[i : i + args.batch_size] for i in range(0, len(sample), args.batch_size)]
        backend = ours.backend_tokenizer
        batched = {
            "ours, tokenizer(batch) (transformers)": lambda: [ids for c in chunks for ids in ours(c)["input_ids"]],
            "ours, encode_batch_fast (tokenizers)": lambda: [
                encoding.ids for c in chunks for encoding in backend.encode_batch_fast(c)
            ],
            "sentencepiece, encode(batch)": lambda: [
                ids for c in chunks for ids in spm.encode(c, out_type=int, num_threads=args.threads)
            ],
        }
        title = f"encoding {len(sample):,} sentences in batches of {args.batch_size}"
        report_encoding(title, len(sample), best_of(batched, args.repeats), "sentencepiece, encode(batch)")

        single = evenly_spaced(sentences, args.single_sentences)
        one_by_one = {
            "ours, tokenizer(text) (transformers)": lambda: [ours(text)["input_ids"] for text in single],
            "ours, encode (tokenizers)": lambda: [backend.encode(text).ids for text in single],
            "sentencepiece, encode(text)": lambda: [spm.encode(text, out_type=int) for text in single],
        }
        title = f"encoding {len(single):,} sentences one per call"
        report_encoding(title, len(single), best_of(one_by_one, args.repeats), "sentencepiece, encode(text)")
        print(f"\nload average at the end: {os.getloadavg()[0]:.1f} (other processes on the machine skew timings)")


if __name__ == "__main__":
    main()
