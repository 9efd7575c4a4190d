"""The built-in English-German demo dataset: numbers, dates, times and quantities written out in words.

`make demo` trains a small Transformer on a laptop CPU in minutes, so it needs a parallel corpus that ships with the
package, needs no network, is real language and is learnable by a small model. This package generates one.

What it is
    Sentence pairs in which numbers, dates, clock times, prices and quantities are written out in English and German,
    inside short natural sentence frames ("She was born on the third of March nineteen eighty-seven." ->
    "Sie wurde am dritten März neunzehnhundertsiebenundachtzig geboren."). Number words come from `num2words`
    (cardinals, ordinals and years, ``lang="en"``/``"de"``), month and weekday names from Babel's CLDR data. The rest
    of the vocabulary (a few hundred words: nouns with their German gender and plural, units, verbs with their
    conjugated forms) is written out in `lexicon` and next to the sentence frames.

Templates
    53 frames in these families: bare cardinals (0-9999) and arithmetic; counted nouns ("zwei Äpfel",
    "ein Buch", "einen Hund"); quantities and units ("zwölf Kilogramm Äpfel", "eine Flasche Wasser"); prices
    ("zwölf Euro fünfzig"); distances, sizes, weights, ages, temperatures, percentages and durations ("seit zwei
    Jahren", "seit einem Monat"); clock times ("um Viertel nach sieben", "um halb acht", "um fünf vor halb neun",
    "um sieben Uhr fünfundvierzig"); dates ("am dritten März", "Heute ist der dritte März", "vom dritten bis zum
    siebzehnten März"), weekdays, months, years (1900-2099) and centuries; ordinals ("im dritten Stock", "zum dritten
    Mal", "Annas dritter Geburtstag"). The German side follows case, gender and number: the number one becomes the
    inflected indefinite article, ordinals take their adjective endings, measure nouns stay singular after numbers,
    dative plurals take -n. Numbers above 100 ending in 01 are not used before nouns ("hundertein Buch" is a matter of
    taste in German). English follows British usage ("kilometres", "per cent", "the third of March").

    Most numbers are words on both sides (the translation task the demo is about); about 15% of the sentences that
    contain numbers write them as digits on both sides, formatted the way each language writes them ("on 3 March
    1987" -> "am 3. März 1987", "12.50 euros" -> "12,50 Euro", "at 7:45" -> "um 7:45 Uhr"), as real text does.
    Each English sentence has exactly one German translation and the other way round, so the task is learnable in
    both directions.

Sizes
    By default 20,000 training, 500 validation and 1,000 test pairs. Every source and every target sentence occurs
    once in the whole dataset: held-out sentences are unseen in training (in either direction), and no split has
    duplicates. The pairs are drawn for the test split first, then validation, then train, so the held-out splits do
    not depend on `num_train`. Generation is deterministic for a seed (Python's `random.Random`, no dependence on
    hash order) and takes about a second for the default sizes.

License
    Generated text, no third-party corpus: the sentences come from this package's own templates and word lists, with
    number words from num2words (LGPL-2.1) and month/weekday names from Babel's CLDR data (Unicode license), both
    used as libraries at generation time.

Modules
    `grammar` (number words, articles, nouns, conjugation, the number draws), `lexicon` (word lists), `templates`
    (the registry of sentence frames) and one module of frames per family: `arithmetic`, `counting`, `quantities`,
    `measures`, `durations`, `clock`, `dates` and `ordinals`. This module joins the families and holds the public API
    and the command line.

Use it with ``build_demo_dataset()`` (a `datasets.DatasetDict`), ``write_demo_files(output_dir)`` (JSON lines in the
Hugging Face translation layout) or ``python -m vaswani.data.demo --output_dir DIR``.

"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

import datasets

from vaswani.data.demo import arithmetic, clock, counting, dates, durations, measures, ordinals, quantities
from vaswani.data.demo.grammar import Pair
from vaswani.data.demo.templates import Templates

LANGUAGES = ("en", "de")
SPLITS = ("train", "validation", "test")

# The sentence frames of all families, in the order that decides the random draws (each family's frames in the
# order of its module): reordering the families or the frames changes every pair drawn after the first change.
TEMPLATES: Templates = {
    **arithmetic.TEMPLATES,
    **counting.TEMPLATES,
    **quantities.TEMPLATES,
    **measures.TEMPLATES,
    **durations.TEMPLATES,
    **clock.TEMPLATES,
    **dates.TEMPLATES,
    **ordinals.TEMPLATES,
}


# ---------------------------------------------------------------------------------------------------------------------
# Public API
# ---------------------------------------------------------------------------------------------------------------------


def build_demo_dataset(
    seed: int = 0,
    num_train: int = 20000,
    num_validation: int = 500,
    num_test: int = 1000,
    source_lang: str = "en",
    target_lang: str = "de",
) -> datasets.DatasetDict:
    """Build the demo dataset as a `DatasetDict` with splits "train", "validation" and "test".

    Each split has one column, "translation", holding ``{"en": ..., "de": ...}`` dicts (the standard Hugging Face
    translation layout). The pairs are the same for both directions; `source_lang`/`target_lang` ("en"/"de" or
    "de"/"en") are checked and recorded in the splits' descriptions.
    """
    source_lang, target_lang = _check_languages(source_lang, target_lang)
    splits = _generate_splits(seed, {"train": num_train, "validation": num_validation, "test": num_test})
    features = datasets.Features({"translation": datasets.Translation(languages=[source_lang, target_lang])})
    description = (
        f"vaswani demo dataset ({source_lang}->{target_lang}, seed {seed}): "
        "numbers, dates, times and quantities in English and German words, generated by vaswani.data.demo."
    )
    return datasets.DatasetDict(
        {
            name: datasets.Dataset.from_dict(
                {"translation": pairs},
                info=datasets.DatasetInfo(description=description, features=features),
                split=datasets.NamedSplit(name),
            )
            for name, pairs in splits.items()
        }
    )


def write_demo_files(output_dir: str | Path, **build_kwargs) -> dict[str, Path]:
    """Write train.jsonl, validation.jsonl and test.jsonl to `output_dir` and return split -> path.

    One JSON object per line in the ``{"translation": {"en": ..., "de": ...}}`` layout (source language first),
    UTF-8 without ASCII escapes; `datasets.load_dataset("json", data_files=...)` reads them back. `build_kwargs` are
    those of `build_demo_dataset`.
    """
    dataset = build_demo_dataset(**build_kwargs)
    source_lang, target_lang = build_kwargs.get("source_lang", "en"), build_kwargs.get("target_lang", "de")
    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    paths = {}
    for name, split in dataset.items():
        path = output_dir / f"{name}.jsonl"
        with path.open("w", encoding="utf-8") as f:
            for pair in split["translation"]:
                row = {"translation": {source_lang: pair[source_lang], target_lang: pair[target_lang]}}
                f.write(json.dumps(row, ensure_ascii=False) + "\n")
        paths[name] = path
    return paths


def generate_pairs(seed: int, count: int) -> list[Pair]:
    """Generate `count` distinct (English, German) pairs: no English and no German sentence occurs twice."""
    rng = random.Random(seed)
    names, weights = zip(*((name, weight) for name, (weight, _) in TEMPLATES.items()), strict=True)
    seen_en: set[str] = set()
    seen_de: set[str] = set()
    pairs: list[Pair] = []
    max_attempts = 50 * count + 1000
    for _ in range(max_attempts):
        if len(pairs) == count:
            break
        (name,) = rng.choices(names, weights=weights)
        en, de = TEMPLATES[name][1](rng)
        if en in seen_en or de in seen_de:
            continue
        seen_en.add(en)
        seen_de.add(de)
        pairs.append((en, de))
    if len(pairs) < count:
        raise ValueError(f"Could only generate {len(pairs)} distinct pairs out of the {count} requested.")
    return pairs


def _generate_splits(seed: int, sizes: dict[str, int]) -> dict[str, list[dict[str, str]]]:
    """Generate distinct pairs for all splits at once (held-out splits first) and cut them into splits."""
    for name, size in sizes.items():
        if not isinstance(size, int) or size < 0:
            raise ValueError(f"The size of the {name} split must be a non-negative integer, got {size!r}.")
    if not isinstance(seed, int):
        raise ValueError(f"seed must be an integer, got {seed!r}.")
    pairs = generate_pairs(seed, sum(sizes.values()))
    splits, start = {}, 0
    for name in ("test", "validation", "train"):
        chunk = pairs[start : start + sizes[name]]
        start += sizes[name]
        splits[name] = [{"en": en, "de": de} for en, de in chunk]
    return {name: splits[name] for name in SPLITS}


def _check_languages(source_lang: str, target_lang: str) -> tuple[str, str]:
    """Return the language pair if it is en->de or de->en, else raise ValueError."""
    if {source_lang, target_lang} != set(LANGUAGES) or source_lang == target_lang:
        raise ValueError(
            f"The demo dataset is English-German: use source_lang='en', target_lang='de' or the reverse, "
            f"got source_lang={source_lang!r}, target_lang={target_lang!r}."
        )
    return source_lang, target_lang


# ---------------------------------------------------------------------------------------------------------------------
# Command line
# ---------------------------------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> None:
    """``python -m vaswani.data.demo --output_dir DIR``: write the jsonl files and print a few samples."""
    parser = argparse.ArgumentParser(
        prog="python -m vaswani.data.demo",
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--output_dir", required=True, help="folder for train.jsonl, validation.jsonl and test.jsonl")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--num_train", type=int, default=20000)
    parser.add_argument("--num_validation", type=int, default=500)
    parser.add_argument("--num_test", type=int, default=1000)
    parser.add_argument("--source_lang", default="en", choices=LANGUAGES)
    parser.add_argument("--target_lang", default="de", choices=LANGUAGES)
    parser.add_argument("--num_samples", type=int, default=10, help="how many training pairs to print")
    args = parser.parse_args(argv)

    build_kwargs = {k: v for k, v in vars(args).items() if k not in ("output_dir", "num_samples")}
    paths = write_demo_files(args.output_dir, **build_kwargs)
    for name, path in paths.items():
        with path.open(encoding="utf-8") as f:
            print(f"{name}: {sum(1 for _ in f)} pairs -> {path}")
    with paths["train"].open(encoding="utf-8") as f:
        for line, _ in zip(f, range(args.num_samples), strict=False):
            pair = json.loads(line)["translation"]
            print(f"  {pair[args.source_lang]}\n    -> {pair[args.target_lang]}")
