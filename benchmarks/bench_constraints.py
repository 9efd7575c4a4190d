"""Benchmark: lexically constrained decoding (`vaswani translate --constraints`, issue 29): its cost against
unconstrained beam search on the same sentences, and its quality on a held-out set, two ways.

Cost. On the first `--sentences` test sentences that setup (a) gives constraints to (one or two target words each),
`Translator.translate` with and without those constraints, at each beam size of `--beams` (default 4 and 10), timed
in interleaved rounds (median and range of sentences/s; the per-round ratio unconstrained / constrained is the
slowdown); the unconstrained side is also timed against itself (A/A noise; `--no-aa` skips it). Target: at beam 4
with one or two constraints per sentence, at most 3x slower (the slowdown's median and most rounds).

Quality (beam 4 by default, `--quality_beams`), on the whole test set (or `--limit` sentences):

(a) reference words the unconstrained output misses: for each sentence, up to `--terms` words of its reference
    (alphabetic, at least `--min_term_chars` characters, in reference order) that the unconstrained translation lacks
    become its constraints. Reported: the term-appearance rate (every phrase of a sentence in its output, exact
    string match; target 100%), BLEU (sacrebleu) of the constrained output against the unconstrained one's, both on
    the sentences with constraints.
(b) a glossary that does not come from the references: source words mapped to one fixed target term across the test
    set (`--glossary FILE`, lines `source word ||| target term`; default: a small English-Spanish software glossary,
    `DEFAULT_GLOSSARY`). A sentence whose source has a glossary word gets that word's target term. Reported: the
    appearance rate, how many outputs hold a term more often than its source word occurs (a term produced twice),
    and BLEU of the whole test set with and without the glossary (it must not collapse).

    python benchmarks/bench_constraints.py --model runs/gettext-small                         # everything
    python benchmarks/bench_constraints.py --model runs/gettext-small --parts cost --sentences 100 --repeats 3
    python benchmarks/bench_constraints.py --model runs/gettext-small --parts quality --limit 300

Run it on a quiet machine: the cost part is a timing.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))  # `common` when run as a script
sys.path.insert(1, str(REPO_ROOT))

import common  # noqa: E402

PARTS = ("cost", "quality")
DEFAULT_TEST_FILE = REPO_ROOT.parent / "shared" / "data" / "gettext-en-es" / "test.jsonl"
# Setup (b): software terms with one fixed Spanish rendering each, chosen without looking at the references.
DEFAULT_GLOSSARY = {
    "file": "archivo", "directory": "directorio", "password": "contraseña", "user": "usuario",
    "option": "opción", "error": "error", "memory": "memoria", "server": "servidor", "window": "ventana",
    "command": "orden", "device": "dispositivo", "folder": "carpeta", "message": "mensaje", "key": "clave",
}  # fmt: skip
WORD = re.compile(r"[^\W\d_]+")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", type=Path, required=True, metavar="DIR", help="a PyTorch model folder (en->es)")
    parser.add_argument("--parts", type=common.choice_list(PARTS, "parts"), default=list(PARTS),
                        help="comma-separated: cost, quality (default: both)")  # fmt: skip
    parser.add_argument(
        "--test_file", type=Path, default=DEFAULT_TEST_FILE, help="held-out .jsonl (translation pairs)"
    )
    parser.add_argument("--source_lang", default="en")
    parser.add_argument("--target_lang", default="es")
    parser.add_argument("--limit", type=_positive, help="quality: the first N test sentences (default: all)")
    parser.add_argument("--sentences", type=_positive, default=200, help="cost: sentences timed per round")
    parser.add_argument("--beams", type=_beam_list, default=[4, 10], help="cost: comma-separated beam sizes")
    parser.add_argument("--quality_beams", type=_positive, default=4, help="quality: beam size")
    parser.add_argument("--terms", type=_positive, default=2, help="setup (a): reference words per sentence, at most")
    parser.add_argument("--min_term_chars", type=_positive, default=4, help="setup (a): shortest reference word")
    parser.add_argument("--glossary", type=Path, metavar="FILE", help="setup (b): lines `source word ||| target term`")
    parser.add_argument("--batch_tokens", type=_positive, default=4096, help="source tokens per batch")
    parser.add_argument("--repeats", type=_positive, default=5, help="cost: interleaved timing rounds")
    parser.add_argument("--warmup", type=int, default=1, help="cost: untimed calls per side")
    parser.add_argument("--threads", type=_positive, default=len(os.sched_getaffinity(0)), help="CPU threads")
    common.add_aa_argument(parser, "unconstrained decoding")
    parser.add_argument("--json", metavar="OUT", help="also write the results to this JSON file")
    args = parser.parse_args(argv)
    if not args.model.is_dir():
        parser.error(f"--model {args.model} is not a folder: give a PyTorch model folder written by train.py")
    if not args.test_file.is_file():
        parser.error(f"--test_file {args.test_file} is not a file: give a held-out .jsonl of translation pairs")
    if args.warmup < 0:
        parser.error(f"--warmup {args.warmup}: use 0 or more")
    args.glossary_terms = DEFAULT_GLOSSARY
    if args.glossary is not None:
        try:
            args.glossary_terms = read_glossary(args.glossary)
        except (OSError, ValueError) as error:
            parser.error(f"--glossary {args.glossary}: {error}")
    return args


def _positive(value: str) -> int:
    number = int(value)
    if number < 1:
        raise argparse.ArgumentTypeError(f"{value}: use 1 or more")
    return number


def _beam_list(value: str) -> list[int]:
    try:
        beams = [int(item) for item in value.split(",") if item.strip()]
    except ValueError:
        beams = []
    if not beams or any(beam < 1 for beam in beams) or len(set(beams)) != len(beams):
        raise argparse.ArgumentTypeError(f"{value!r}: give comma-separated beam sizes of 1 or more, each once")
    return beams


def read_glossary(path: Path) -> dict[str, str]:
    """`source word ||| target term` lines (blank lines skipped); a malformed line is a ValueError naming it."""
    glossary = {}
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        parts = [part.strip() for part in line.split("|||")]
        if len(parts) != 2 or not all(parts):
            raise ValueError(f"line {number} is not `source word ||| target term`")
        glossary[parts[0].lower()] = parts[1]
    if not glossary:
        raise ValueError("no entries")
    return glossary


def read_pairs(path: Path, source_lang: str, target_lang: str, limit: int | None) -> tuple[list[str], list[str]]:
    sources, references = [], []
    with open(path, encoding="utf-8") as lines:
        for line in lines:
            pair = json.loads(line)["translation"]
            sources.append(pair[source_lang])
            references.append(pair[target_lang])
            if limit is not None and len(sources) == limit:
                break
    return sources, references


def missed_reference_words(reference: str, output: str, terms: int, min_chars: int) -> list[str]:
    """Setup (a): up to `terms` distinct words of `reference` (alphabetic, >= `min_chars` characters, in order) that
    `output` does not contain."""
    words: list[str] = []
    for word in WORD.findall(reference):
        if len(word) >= min_chars and word not in output and word not in words:
            words.append(word)
        if len(words) == terms:
            break
    return words


def glossary_constraints(source: str, glossary: dict[str, str]) -> list[str]:
    """Setup (b): the target terms of the glossary words found in `source` (whole words, any case), once each."""
    words = {word.lower() for word in WORD.findall(source)}
    return sorted({term for word, term in glossary.items() if word in words})


def appearance(outputs: list[str], constraints: list[list[str]]) -> tuple[int, int]:
    """Sentences with constraints whose output holds every phrase (exact string match), out of how many."""
    pairs = [(output, phrases) for output, phrases in zip(outputs, constraints, strict=True) if phrases]
    return sum(all(phrase in output for phrase in phrases) for output, phrases in pairs), len(pairs)


def doubled_terms(sources: list[str], outputs: list[str], glossary: dict[str, str]) -> int:
    """Outputs holding a glossary term more often than its source word occurs in the source (a term produced
    twice)."""
    count = 0
    for source, output in zip(sources, outputs, strict=True):
        words = [word.lower() for word in WORD.findall(source)]
        if any(words.count(word) and output.count(term) > words.count(word) for word, term in glossary.items()):
            count += 1
    return count


def bleu(outputs: list[str], references: list[str]) -> float:
    import sacrebleu

    return sacrebleu.corpus_bleu(outputs, [references]).score


def cost(args, translator, sources: list[str], constraints: list[list[str]]) -> dict:
    """Sentences/s with and without the constraints at each beam size (interleaved rounds, A/A on unconstrained)."""
    chosen = [(s, c) for s, c in zip(sources, constraints, strict=True) if c][: args.sentences]
    texts, phrases = [s for s, _ in chosen], [c for _, c in chosen]
    results = {}
    for beams in args.beams:
        options = {"num_beams": beams, "batch_tokens": args.batch_tokens}
        candidates = {
            "unconstrained": lambda options=options: translator.translate(texts, **options),
            "constrained": lambda options=options: translator.translate(
                texts, constraints=phrases, on_unmet=lambda *_: None, **options
            ),
        }
        if args.aa:
            candidates = common.with_aa_copy(candidates, "unconstrained")
        timed = common.interleave(candidates, args.warmup, args.repeats)
        rates = {name: common.rates(seconds, len(texts)) for name, seconds in timed.seconds.items()}
        slowdown = common.ratio_summary(rates["unconstrained"], rates["constrained"])
        rows = [
            [name, f"{common.Summary.of(r).median:.2f}", f"{min(r):.2f}-{max(r):.2f}"] for name, r in rates.items()
        ]
        print(f"\nbeam {beams}, {len(texts)} sentences with 1-{args.terms} constraints; CPU pressure (median) "
              f"{timed.median_stalled()}")  # fmt: skip
        print(common.format_table(["decoding", "sentences/s", "range"], rows))
        print(f"slowdown (unconstrained / constrained speed, per round): median {slowdown.median:.2f}, "
              f"{slowdown.low:.2f}-{slowdown.high:.2f}; target <= 3x at beam 4: "
              f"{common.verdict(slowdown.values, 3.0, higher_is_better=False)}")  # fmt: skip
        print(common.describe_aa(common.aa_summary(rates, "unconstrained"), "unconstrained"))
        results[f"beam{beams}"] = {"rates": rates, "slowdown": slowdown.to_dict()}
    return results


def quality(args, translator, sources, references, plain) -> dict:
    """Setups (a) and (b): appearance rates, terms produced twice, BLEU against unconstrained."""
    options = {"num_beams": args.quality_beams, "batch_tokens": args.batch_tokens, "on_unmet": lambda *_: None}
    missed = [missed_reference_words(r, o, args.terms, args.min_term_chars) for r, o in zip(references, plain,
                                                                                          strict=True)]  # fmt: skip
    constrained = translator.translate(sources, constraints=missed, **options)
    met, total = appearance(constrained, missed)
    rows_a = [i for i, phrases in enumerate(missed) if phrases]
    bleu_a = (bleu([constrained[i] for i in rows_a], [references[i] for i in rows_a]),
              bleu([plain[i] for i in rows_a], [references[i] for i in rows_a]))  # fmt: skip
    terms = [glossary_constraints(source, args.glossary_terms) for source in sources]
    glossed = translator.translate(sources, constraints=terms, **options)
    met_b, total_b = appearance(glossed, terms)
    doubled = doubled_terms(sources, glossed, args.glossary_terms)
    bleu_b = (bleu(glossed, references), bleu(plain, references))
    print(f"\n(a) reference words the unconstrained output misses: {total} sentences; all terms appear in {met}/{total} "
          f"({met / max(total, 1):.1%}; target 100%); BLEU on them {bleu_a[0]:.2f} constrained, {bleu_a[1]:.2f} "
          "unconstrained")  # fmt: skip
    print(f"(b) glossary of {len(args.glossary_terms)} terms: {total_b} sentences; all terms appear in "
          f"{met_b}/{total_b} ({met_b / max(total_b, 1):.1%}); a term produced twice in {doubled}; BLEU of all "
          f"{len(sources)} sentences {bleu_b[0]:.2f} with the glossary, {bleu_b[1]:.2f} without")  # fmt: skip
    return {"a": {"met": met, "total": total, "bleu_constrained": bleu_a[0], "bleu_unconstrained": bleu_a[1]},
            "b": {"met": met_b, "total": total_b, "doubled": doubled, "bleu_glossary": bleu_b[0],
                  "bleu_unconstrained": bleu_b[1]}}  # fmt: skip


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    import torch

    from vaswani.inference.translator import Translator

    torch.set_num_threads(args.threads)
    print(f"on {common.describe_machine(common.machine_description(args.threads))}", flush=True)
    translator = Translator(args.model, device="cpu")
    sources, references = read_pairs(args.test_file, args.source_lang, args.target_lang, args.limit)
    plain = translator.translate(sources, num_beams=args.quality_beams, batch_tokens=args.batch_tokens)
    results = {}
    if "quality" in args.parts:
        results["quality"] = quality(args, translator, sources, references, plain)
    if "cost" in args.parts:
        missed = [missed_reference_words(r, o, args.terms, args.min_term_chars) for r, o in zip(references, plain,
                                                                                              strict=True)]  # fmt: skip
        results["cost"] = cost(args, translator, sources, missed)
    common.write_json_report(args.json, args, **results)
    return results


if __name__ == "__main__":
    main()
