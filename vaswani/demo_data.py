"""The built-in English-German demo dataset: numbers, dates, times and quantities written out in words.

`make demo` trains a small Transformer on a laptop CPU in minutes, so it needs a parallel corpus that ships with the
package, needs no network, is real language and is learnable by a small model. This module generates one.

What it is
    Sentence pairs in which numbers, dates, clock times, prices and quantities are written out in English and German,
    inside short natural sentence frames ("She was born on the third of March nineteen eighty-seven." ->
    "Sie wurde am dritten März neunzehnhundertsiebenundachtzig geboren."). Number words come from `num2words`
    (cardinals, ordinals and years, ``lang="en"``/``"de"``), month and weekday names from Babel's CLDR data. The rest
    of the vocabulary (a few hundred words: nouns with their German gender and plural, units, verbs with their
    conjugated forms) is written out in the tables below.

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
    Generated text, no third-party corpus: the sentences come from this module's own templates and word lists, with
    number words from num2words (LGPL-2.1) and month/weekday names from Babel's CLDR data (Unicode license), both
    used as libraries at generation time.

Use it with ``build_demo_dataset()`` (a `datasets.DatasetDict`), ``write_demo_files(output_dir)`` (JSON lines in the
Hugging Face translation layout) or ``python -m vaswani.demo_data --output_dir DIR``.
"""

from __future__ import annotations

import argparse
import json
import random
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import datasets
from babel.dates import get_day_names, get_month_names
from num2words import num2words

LANGUAGES = ("en", "de")
SPLITS = ("train", "validation", "test")
DIGIT_RATE = 0.15
"""Share of the sentences with numbers (bare numbers and arithmetic excepted) that write them as digits."""

# A pair of sentences: (English, German).
Pair = tuple[str, str]


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
        "numbers, dates, times and quantities in English and German words, generated by vaswani.demo_data."
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
# Numbers in words
# ---------------------------------------------------------------------------------------------------------------------


@cache
def en_cardinal(n: int) -> str:
    """English cardinal in words, British style: "three hundred and forty-two" (num2words without its commas)."""
    return num2words(n, lang="en").replace(",", "")


@cache
def de_cardinal(n: int) -> str:
    """German cardinal in words as said on its own: "dreihundertzweiundvierzig", "eins"."""
    return num2words(n, lang="de")


@cache
def en_ordinal(n: int) -> str:
    """English ordinal in words: "third", "twenty-first"."""
    return num2words(n, lang="en", to="ordinal").replace(",", "")


@cache
def de_ordinal(n: int) -> str:
    """German ordinal stem with the weak ending -e: "dritte", "einundzwanzigste" (add "n" or "r" for other forms)."""
    return num2words(n, lang="de", to="ordinal")


@cache
def en_year(year: int) -> str:
    """English year as spoken: "nineteen eighty-seven", "two thousand and five", "twenty twenty-two"."""
    return num2words(year, lang="en", to="year")


@cache
def de_year(year: int) -> str:
    """German year as spoken: "neunzehnhundertsiebenundachtzig", "zweitausendfünf"."""
    return num2words(year, lang="de", to="year")


def en_ordinal_digits(n: int) -> str:
    """English ordinal in digits: 1st, 2nd, 3rd, 4th, 11th, 21st."""
    suffix = "th" if n % 100 in (11, 12, 13) else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


# Indefinite article = the German "one" before a noun, by (gender, case).
INDEFINITE_ARTICLE = {
    ("m", "nom"): "ein",
    ("f", "nom"): "eine",
    ("n", "nom"): "ein",
    ("m", "acc"): "einen",
    ("f", "acc"): "eine",
    ("n", "acc"): "ein",
    ("m", "dat"): "einem",
    ("f", "dat"): "einer",
    ("n", "dat"): "einem",
}
DEFINITE_ARTICLE = {
    ("m", "nom"): "der",
    ("f", "nom"): "die",
    ("n", "nom"): "das",
    ("m", "acc"): "den",
    ("f", "acc"): "die",
    ("n", "acc"): "das",
}


@dataclass(frozen=True)
class Noun:
    """A countable noun: English singular/plural, German singular/plural and gender ("m", "f" or "n")."""

    en_sg: str
    en_pl: str
    de_sg: str
    de_pl: str
    gender: str

    def en(self, n: int) -> str:
        return self.en_sg if n == 1 else self.en_pl

    def de(self, n: int, case: str = "nom") -> str:
        if n == 1:
            return self.de_sg
        if case == "dat" and not self.de_pl.endswith(("n", "s")):
            return self.de_pl + "n"  # dative plural: Jahre -> Jahren
        return self.de_pl

    def de_the(self, case: str = "nom") -> str:
        """German singular with its definite article: "der Bus", "den Bus"."""
        return f"{DEFINITE_ARTICLE[(self.gender, case)]} {self.de_sg}"


def en_count(n: int, digits: bool) -> str:
    """English number before a noun."""
    return str(n) if digits else en_cardinal(n)


def de_count(n: int, gender: str, case: str, digits: bool) -> str:
    """German number before a noun: the number one is the indefinite article ("einen Apfel", "eine Flasche")."""
    if digits:
        return str(n)
    if n == 1:
        return INDEFINITE_ARTICLE[(gender, case)]
    return de_cardinal(n)


def counted(noun: Noun, n: int, case: str, digits: bool) -> Pair:
    """A counted noun phrase: ("twelve apples", "zwölf Äpfel"), ("one dog", "einen Hund")."""
    return f"{en_count(n, digits)} {noun.en(n)}", f"{de_count(n, noun.gender, case, digits)} {noun.de(n, case)}"


def sample_number(rng: random.Random, low: int, high: int) -> int:
    """A number in [low, high], about as likely to have few digits as many (so both small and large numbers occur)."""
    num_digits = rng.randint(len(str(low)), len(str(high)))
    return rng.randint(max(low, 10 ** (num_digits - 1) if num_digits > 1 else 0), min(high, 10**num_digits - 1))


def sample_count(rng: random.Random, low: int, high: int) -> int:
    """A number to put before a noun: like `sample_number`, but never 101, 201, 1001... (German "hundertein(s)")."""
    while True:
        n = sample_number(rng, low, high)
        if n < 100 or n % 100 != 1:
            return n


def use_digits(rng: random.Random) -> bool:
    """Whether this sentence writes its numbers as digits."""
    return rng.random() < DIGIT_RATE


# ---------------------------------------------------------------------------------------------------------------------
# Vocabulary
# ---------------------------------------------------------------------------------------------------------------------

MONTHS_EN = [get_month_names("wide", locale="en")[i] for i in range(1, 13)]
MONTHS_DE = [get_month_names("wide", locale="de")[i] for i in range(1, 13)]
WEEKDAYS_EN = [get_day_names("wide", locale="en")[i] for i in range(7)]  # Monday first
WEEKDAYS_DE = [get_day_names("wide", locale="de")[i] for i in range(7)]
DAYS_IN_MONTH = [31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31]  # 29 February left out


@dataclass(frozen=True)
class Subject:
    """A sentence subject and its grammatical person: 0 = I, 1 = he/she/it, 2 = we, 3 = they."""

    en: str
    de: str
    person: int


SUBJECTS = [
    Subject("I", "ich", 0),
    Subject("he", "er", 1),
    Subject("she", "sie", 1),
    Subject("we", "wir", 2),
    Subject("they", "sie", 3),
    Subject("Anna", "Anna", 1),
    Subject("Peter", "Peter", 1),
    Subject("Maria", "Maria", 1),
    Subject("David", "David", 1),
    Subject("my brother", "mein Bruder", 1),
    Subject("my sister", "meine Schwester", 1),
    Subject("my parents", "meine Eltern", 3),
    Subject("the children", "die Kinder", 3),
    Subject("my grandmother", "meine Großmutter", 1),
]
SINGULAR_SUBJECTS = [s for s in SUBJECTS if s.person in (0, 1)]
NAMES = ["Anna", "Peter", "Maria", "David", "Emma", "Paul", "Lena", "Martin", "Julia", "Sophie"]


def conjugate(forms: str, person: int) -> str:
    """Pick the form for `person` from "1sg|3sg|1pl|3pl", e.g. conjugate("habe|hat|haben|haben", 1) == "hat"."""
    return forms.split("|")[person]


HAVE_EN, HAVE_DE = "have|has|have|have", "habe|hat|haben|haben"
BE_EN, BE_DE = "am|is|are|are", "bin|ist|sind|sind"


def sentence(text: str) -> str:
    """Capitalise the first letter (German "ich" and English subjects start sentences in the frames)."""
    return text[0].upper() + text[1:]


OBJECTS = [
    Noun("book", "books", "Buch", "Bücher", "n"),
    Noun("apple", "apples", "Apfel", "Äpfel", "m"),
    Noun("bottle", "bottles", "Flasche", "Flaschen", "f"),
    Noun("key", "keys", "Schlüssel", "Schlüssel", "m"),
    Noun("pencil", "pencils", "Bleistift", "Bleistifte", "m"),
    Noun("egg", "eggs", "Ei", "Eier", "n"),
    Noun("cup", "cups", "Tasse", "Tassen", "f"),
    Noun("photo", "photos", "Foto", "Fotos", "n"),
    Noun("letter", "letters", "Brief", "Briefe", "m"),
    Noun("ticket", "tickets", "Fahrkarte", "Fahrkarten", "f"),
    Noun("plate", "plates", "Teller", "Teller", "m"),
    Noun("glass", "glasses", "Glas", "Gläser", "n"),
    Noun("lamp", "lamps", "Lampe", "Lampen", "f"),
    Noun("chair", "chairs", "Stuhl", "Stühle", "m"),
    Noun("candle", "candles", "Kerze", "Kerzen", "f"),
]
ANIMALS = [
    Noun("dog", "dogs", "Hund", "Hunde", "m"),
    Noun("cat", "cats", "Katze", "Katzen", "f"),
    Noun("bird", "birds", "Vogel", "Vögel", "m"),
    Noun("sheep", "sheep", "Schaf", "Schafe", "n"),
    Noun("cow", "cows", "Kuh", "Kühe", "f"),
    Noun("horse", "horses", "Pferd", "Pferde", "n"),
    Noun("mouse", "mice", "Maus", "Mäuse", "f"),
    Noun("duck", "ducks", "Ente", "Enten", "f"),
    Noun("goat", "goats", "Ziege", "Ziegen", "f"),
    Noun("chicken", "chickens", "Huhn", "Hühner", "n"),
]
# (English prepositional phrase, German prepositional phrase)
OBJECT_PLACES = [
    ("in the box", "in der Kiste"),
    ("in the kitchen", "in der Küche"),
    ("in the drawer", "in der Schublade"),
    ("in the cupboard", "im Schrank"),
    ("in the office", "im Büro"),
    ("on the table", "auf dem Tisch"),
]
ANIMAL_PLACES = [
    ("in the garden", "im Garten"),
    ("on the farm", "auf dem Bauernhof"),
    ("in the field", "auf dem Feld"),
    ("in the park", "im Park"),
    ("at the zoo", "im Zoo"),
]
PAST_TIMES = [
    ("yesterday", "gestern"),
    ("last week", "letzte Woche"),
    ("last year", "letztes Jahr"),
    ("this morning", "heute Morgen"),
    *[(f"on {en}", f"am {de}") for en, de in zip(WEEKDAYS_EN, WEEKDAYS_DE, strict=True)],
]
CITIES = [
    ("Berlin", "Berlin"),
    ("Hamburg", "Hamburg"),
    ("Munich", "München"),
    ("Vienna", "Wien"),
    ("Cologne", "Köln"),
    ("Zurich", "Zürich"),
    ("Frankfurt", "Frankfurt"),
    ("Dresden", "Dresden"),
    ("London", "London"),
    ("Paris", "Paris"),
    ("Rome", "Rom"),
    ("Prague", "Prag"),
    ("Warsaw", "Warschau"),
    ("Lisbon", "Lissabon"),
    ("Copenhagen", "Kopenhagen"),
]
EVENTS = [  # (English, German with article, German gender)
    ("meeting", "Besprechung", "f"),
    ("exam", "Prüfung", "f"),
    ("concert", "Konzert", "n"),
    ("wedding", "Hochzeit", "f"),
    ("party", "Feier", "f"),
    ("match", "Spiel", "n"),
    ("trip", "Ausflug", "m"),
]

# Measure nouns: masculine and neuter units stay singular after numbers ("zwölf Kilogramm"), feminine ones do not.
KILOGRAM = Noun("kilogram", "kilograms", "Kilogramm", "Kilogramm", "n")
GRAM = Noun("gram", "grams", "Gramm", "Gramm", "n")
LITRE = Noun("litre", "litres", "Liter", "Liter", "m")
KILOMETRE = Noun("kilometre", "kilometres", "Kilometer", "Kilometer", "m")
METRE = Noun("metre", "metres", "Meter", "Meter", "m")
CENTIMETRE = Noun("centimetre", "centimetres", "Zentimeter", "Zentimeter", "m")
BOTTLE = Noun("bottle", "bottles", "Flasche", "Flaschen", "f")
GLASS = Noun("glass", "glasses", "Glas", "Gläser", "n")
CUP = Noun("cup", "cups", "Tasse", "Tassen", "f")
BAG = Noun("bag", "bags", "Tüte", "Tüten", "f")
SLICE = Noun("slice", "slices", "Scheibe", "Scheiben", "f")

SOLIDS = [
    ("apples", "Äpfel"),
    ("potatoes", "Kartoffeln"),
    ("tomatoes", "Tomaten"),
    ("cherries", "Kirschen"),
    ("flour", "Mehl"),
    ("sugar", "Zucker"),
    ("rice", "Reis"),
]
DRINKS = [("milk", "Milch"), ("water", "Wasser"), ("juice", "Saft"), ("lemonade", "Limonade")]
LIQUIDS = [*DRINKS, ("wine", "Wein"), ("oil", "Öl")]
HOT_DRINKS = [("coffee", "Kaffee"), ("tea", "Tee")]
SLICEABLE = [("bread", "Brot"), ("cheese", "Käse"), ("ham", "Schinken")]
# (unit, goods it measures, smallest and largest number)
GOODS_UNITS = [
    (KILOGRAM, SOLIDS, 1, 50),
    (GRAM, SOLIDS, 50, 999),
    (BAG, SOLIDS, 1, 12),
    (LITRE, LIQUIDS, 1, 20),
    (BOTTLE, LIQUIDS, 1, 24),
    (GLASS, LIQUIDS, 1, 10),
    (CUP, HOT_DRINKS, 1, 10),
    (SLICE, SLICEABLE, 1, 12),
]
DRINK_UNITS = [(LITRE, DRINKS, 1, 4), (BOTTLE, DRINKS, 1, 6), (GLASS, DRINKS, 1, 10), (CUP, HOT_DRINKS, 1, 10)]
RECIPE_UNITS = [(GRAM, SOLIDS, 50, 999), (KILOGRAM, SOLIDS, 1, 5), (LITRE, DRINKS[:2], 1, 3)]
ITEMS = [  # things with a price
    Noun("book", "books", "Buch", "Bücher", "n"),
    Noun("ticket", "tickets", "Fahrkarte", "Fahrkarten", "f"),
    Noun("bicycle", "bicycles", "Fahrrad", "Fahrräder", "n"),
    Noun("coat", "coats", "Mantel", "Mäntel", "m"),
    Noun("lamp", "lamps", "Lampe", "Lampen", "f"),
    Noun("jacket", "jackets", "Jacke", "Jacken", "f"),
    Noun("umbrella", "umbrellas", "Regenschirm", "Regenschirme", "m"),
    Noun("sofa", "sofas", "Sofa", "Sofas", "n"),
    Noun("table", "tables", "Tisch", "Tische", "m"),
    Noun("watch", "watches", "Armbanduhr", "Armbanduhren", "f"),
]
MINUTE = Noun("minute", "minutes", "Minute", "Minuten", "f")
HOUR = Noun("hour", "hours", "Stunde", "Stunden", "f")
DAY = Noun("day", "days", "Tag", "Tage", "m")
WEEK = Noun("week", "weeks", "Woche", "Wochen", "f")
MONTH = Noun("month", "months", "Monat", "Monate", "m")
YEAR = Noun("year", "years", "Jahr", "Jahre", "n")


# ---------------------------------------------------------------------------------------------------------------------
# Clock times and dates
# ---------------------------------------------------------------------------------------------------------------------


def clock_time(hour: int, minute: int, style: str) -> Pair:
    """A clock time after "at"/"um" (hour 1-12), said the way people say it.

    Styles: "spoken" uses o'clock, quarter, half and "five past"/"twenty to" (minute a multiple of 5, with German
    "fünf vor halb acht" for 7:25); "digital" reads the digits ("seven forty-five" -> "sieben Uhr fünfundvierzig").
    German says "ein Uhr" but "Viertel nach eins", "halb eins".
    """
    next_hour = hour % 12 + 1
    en_h, en_next = en_cardinal(hour), en_cardinal(next_hour)
    de_h, de_next = de_cardinal(hour), de_cardinal(next_hour)
    de_h_uhr = "ein" if hour == 1 else de_h
    if style == "digital":
        en_m = f"oh {en_cardinal(minute)}" if minute < 10 else en_cardinal(minute)
        return f"{en_h} {en_m}", f"{de_h_uhr} Uhr {de_cardinal(minute)}"
    if minute == 0:
        return f"{en_h} o'clock", f"{de_h_uhr} Uhr"
    if minute == 15:
        return f"a quarter past {en_h}", f"Viertel nach {de_h}"
    if minute == 30:
        return f"half past {en_h}", f"halb {de_next}"
    if minute == 45:
        return f"a quarter to {en_next}", f"Viertel vor {de_next}"
    if minute == 25:
        return f"twenty-five past {en_h}", f"fünf vor halb {de_next}"
    if minute == 35:
        return f"twenty-five to {en_next}", f"fünf nach halb {de_next}"
    if minute < 30:
        return f"{en_cardinal(minute)} past {en_h}", f"{de_cardinal(minute)} nach {de_h}"
    return f"{en_cardinal(60 - minute)} to {en_next}", f"{de_cardinal(60 - minute)} vor {de_next}"


def sample_time(rng: random.Random, hours: tuple[int, ...] = tuple(range(1, 13)), digits: bool | None = None) -> Pair:
    """A random clock time after "at"/"um" with the hour from `hours`: spoken, digital or in digits ("7:45").

    `digits` None draws whether to use digits.
    """
    hour = rng.choice(hours)
    if use_digits(rng) if digits is None else digits:
        minute = rng.choice([0, 5, 10, 15, 20, 30, 40, 45, 50, rng.randint(0, 59)])
        return f"{hour}:{minute:02d}", f"{hour}:{minute:02d} Uhr"
    if rng.random() < 0.3:
        return clock_time(hour, rng.randint(1, 59), "digital")
    return clock_time(hour, rng.choice([0, 0, 15, 30, 30, 45, 5, 10, 20, 25, 35, 40, 50, 55]), "spoken")


def sample_day(rng: random.Random) -> tuple[int, int]:
    """A (day, month) pair that exists (29 February excluded)."""
    month = rng.randint(1, 12)
    return rng.randint(1, DAYS_IN_MONTH[month - 1]), month


def date_phrase(day: int, month: int, ending: str, digits: bool) -> Pair:
    """("the third of March", "dritten März") with German ending "n" (dative/accusative) or "" (nominative).

    In digits: ("3 March", "3. März"). The article ("am", "der", "auf den") is left to the frame.
    """
    if digits:
        return f"{day} {MONTHS_EN[month - 1]}", f"{day}. {MONTHS_DE[month - 1]}"
    return f"the {en_ordinal(day)} of {MONTHS_EN[month - 1]}", f"{de_ordinal(day)}{ending} {MONTHS_DE[month - 1]}"


def year_phrase(year: int, digits: bool) -> Pair:
    return (str(year), str(year)) if digits else (en_year(year), de_year(year))


def ordinal_phrase(n: int, de_ending: str, digits: bool) -> Pair:
    """("third", "dritten") for de_ending "n"; ("3rd", "3.") in digits."""
    if digits:
        return en_ordinal_digits(n), f"{n}."
    return en_ordinal(n), de_ordinal(n) + de_ending


def price_phrase(rng: random.Random, digits: bool, high: int = 999) -> Pair:
    """A price in the accusative: ("twelve euros fifty", "zwölf Euro fünfzig"), ("one euro", "einen Euro")."""
    euros = sample_count(rng, 1, high)
    cents = rng.choice(range(10, 100, 5)) if rng.random() < 0.35 else 0
    if digits:
        if cents:
            return f"{euros}.{cents} euros", f"{euros},{cents} Euro"
        return f"{euros} {'euro' if euros == 1 else 'euros'}", f"{euros} Euro"
    en = f"{en_cardinal(euros)} {'euro' if euros == 1 else 'euros'}"
    de = f"{'einen' if euros == 1 else de_cardinal(euros)} Euro"
    if cents:
        en, de = f"{en} {en_cardinal(cents)}", f"{de} {de_cardinal(cents)}"
    return en, de


# ---------------------------------------------------------------------------------------------------------------------
# Sentence frames. Each takes the random generator and returns one (English, German) pair.
# ---------------------------------------------------------------------------------------------------------------------

TEMPLATES: dict[str, tuple[float, Callable[[random.Random], Pair]]] = {}


def template(weight: float) -> Callable[[Callable[[random.Random], Pair]], Callable[[random.Random], Pair]]:
    """Register a sentence frame with a sampling weight."""

    def register(fn: Callable[[random.Random], Pair]) -> Callable[[random.Random], Pair]:
        TEMPLATES[fn.__name__] = (weight, fn)
        return fn

    return register


# --- bare numbers and arithmetic -------------------------------------------------------------------------------------


@template(6.0)
def bare_cardinal(rng: random.Random) -> Pair:
    n = sample_number(rng, 0, 9999)
    return en_cardinal(n), de_cardinal(n)


@template(3.0)
def arithmetic(rng: random.Random) -> Pair:
    op = rng.choice(["plus", "minus", "times", "divided by"])
    if op == "times":
        a, b = rng.randint(0, 20), rng.randint(0, 20)
        c = a * b
    elif op == "divided by":
        b, c = rng.randint(1, 20), rng.randint(0, 20)
        a = b * c
    else:
        a, b = sample_number(rng, 0, 999), sample_number(rng, 0, 999)
        if op == "minus" and a < b:
            a, b = b, a
        c = a + b if op == "plus" else a - b
    de_op = {"plus": "plus", "minus": "minus", "times": "mal", "divided by": "geteilt durch"}[op]
    return (
        sentence(f"{en_cardinal(a)} {op} {en_cardinal(b)} is {en_cardinal(c)}."),
        sentence(f"{de_cardinal(a)} {de_op} {de_cardinal(b)} ist {de_cardinal(c)}."),
    )


# --- counted things --------------------------------------------------------------------------------------------------


@template(2.0)
def there_are(rng: random.Random) -> Pair:
    nouns, places = rng.choice([(OBJECTS, OBJECT_PLACES), (ANIMALS, ANIMAL_PLACES)])
    noun, (en_place, de_place) = rng.choice(nouns), rng.choice(places)
    n = sample_count(rng, 1, 999) if rng.random() < 0.5 else rng.randint(1, 12)
    en_np, de_np = counted(noun, n, "nom", use_digits(rng))
    return (
        f"There {'is' if n == 1 else 'are'} {en_np} {en_place}.",
        sentence(f"{de_place} {'ist' if n == 1 else 'sind'} {de_np}."),
    )


@template(2.0)
def have(rng: random.Random) -> Pair:
    subject, noun = rng.choice(SUBJECTS), rng.choice(OBJECTS + ANIMALS)
    n = rng.randint(1, 12) if rng.random() < 0.6 else sample_count(rng, 13, 999)
    en_np, de_np = counted(noun, n, "acc", use_digits(rng))
    return (
        sentence(f"{subject.en} {conjugate(HAVE_EN, subject.person)} {en_np}."),
        sentence(f"{subject.de} {conjugate(HAVE_DE, subject.person)} {de_np}."),
    )


@template(2.0)
def bought(rng: random.Random) -> Pair:
    subject, noun, (en_when, de_when) = rng.choice(SUBJECTS), rng.choice(OBJECTS), rng.choice(PAST_TIMES)
    n = rng.randint(1, 20) if rng.random() < 0.7 else sample_count(rng, 21, 500)
    en_np, de_np = counted(noun, n, "acc", use_digits(rng))
    return (
        sentence(f"{subject.en} bought {en_np} {en_when}."),
        sentence(f"{subject.de} {conjugate(HAVE_DE, subject.person)} {de_when} {de_np} gekauft."),
    )


@template(1.5)
def saw_animals(rng: random.Random) -> Pair:
    subject, noun, (en_place, de_place) = rng.choice(SUBJECTS), rng.choice(ANIMALS), rng.choice(ANIMAL_PLACES)
    en_np, de_np = counted(noun, sample_count(rng, 1, 300), "acc", use_digits(rng))
    return (
        sentence(f"{subject.en} saw {en_np} {en_place}."),
        sentence(f"{subject.de} {conjugate(HAVE_DE, subject.person)} {de_place} {de_np} gesehen."),
    )


@template(1.5)
def need_more(rng: random.Random) -> Pair:
    subject, noun = rng.choice(SUBJECTS), rng.choice(OBJECTS)
    n = rng.randint(1, 20) if rng.random() < 0.7 else sample_count(rng, 21, 999)
    digits = use_digits(rng)
    en_np, de_np = f"{en_count(n, digits)} more {noun.en(n)}", counted(noun, n, "acc", digits)[1]
    return (
        sentence(f"{subject.en} {conjugate('need|needs|need|need', subject.person)} {en_np}."),
        sentence(f"{subject.de} {conjugate('brauche|braucht|brauchen|brauchen', subject.person)} noch {de_np}."),
    )


HOLDERS = [  # (English owner, German owner, what it has, largest number)
    ("the village", "das Dorf", Noun("inhabitant", "inhabitants", "Einwohner", "Einwohner", "m"), 9999),
    ("the island", "die Insel", Noun("inhabitant", "inhabitants", "Einwohner", "Einwohner", "m"), 9999),
    ("the book", "das Buch", Noun("page", "pages", "Seite", "Seiten", "f"), 1500),
    ("the library", "die Bibliothek", Noun("book", "books", "Buch", "Bücher", "n"), 9999),
    ("the school", "die Schule", Noun("pupil", "pupils", "Schüler", "Schüler", "m"), 2000),
    ("the hotel", "das Hotel", Noun("room", "rooms", "Zimmer", "Zimmer", "n"), 800),
    ("the train", "der Zug", Noun("seat", "seats", "Sitzplatz", "Sitzplätze", "m"), 900),
    ("the stadium", "das Stadion", Noun("seat", "seats", "Sitzplatz", "Sitzplätze", "m"), 9999),
    ("the company", "die Firma", Noun("employee", "employees", "Mitarbeiter", "Mitarbeiter", "m"), 9999),
]


@template(2.0)
def holder_has(rng: random.Random) -> Pair:
    en_owner, de_owner, noun, high = rng.choice(HOLDERS)
    en_np, de_np = counted(noun, sample_count(rng, 2, high), "acc", use_digits(rng))
    return sentence(f"{en_owner} has {en_np}."), sentence(f"{de_owner} hat {de_np}.")


@template(1.5)
def crowd(rng: random.Random) -> Pair:
    en_how, de_how = rng.choice(
        [("more than", "mehr als"), ("about", "ungefähr"), ("almost", "fast"), ("exactly", "genau")]
    )
    en_event, de_event = rng.choice(
        [
            ("the concert", "zum Konzert"),
            ("the party", "zur Feier"),
            ("the wedding", "zur Hochzeit"),
            ("the match", "zum Spiel"),
        ]
    )
    en_np, de_np = counted(
        Noun("person", "people", "Mensch", "Menschen", "m"), sample_count(rng, 10, 9999), "nom", use_digits(rng)
    )
    return sentence(f"{en_how} {en_np} came to {en_event}."), sentence(f"{de_how} {de_np} sind {de_event} gekommen.")


# --- quantities and prices -------------------------------------------------------------------------------------------


def sample_goods(rng: random.Random, units: list, case: str, digits: bool) -> tuple[Pair, int]:
    """("twelve kilograms of apples", "zwölf Kilogramm Äpfel") and the number."""
    unit, goods, low, high = rng.choice(units)
    (en_goods, de_goods), n = rng.choice(goods), sample_count(rng, low, high)
    en_np, de_np = counted(unit, n, case, digits)
    return (f"{en_np} of {en_goods}", f"{de_np} {de_goods}"), n


@template(2.0)
def bought_goods(rng: random.Random) -> Pair:
    subject, (en_when, de_when) = rng.choice(SUBJECTS), rng.choice(PAST_TIMES)
    (en_np, de_np), _ = sample_goods(rng, GOODS_UNITS, "acc", use_digits(rng))
    en_when, de_when = (f" {en_when}", f" {de_when}") if rng.random() < 0.5 else ("", "")
    return (
        sentence(f"{subject.en} bought {en_np}{en_when}."),
        sentence(f"{subject.de} {conjugate(HAVE_DE, subject.person)}{de_when} {de_np} gekauft."),
    )


@template(2.0)
def recipe(rng: random.Random) -> Pair:
    en_dish, de_dish = rng.choice(
        [("cake", "den Kuchen"), ("soup", "die Suppe"), ("sauce", "die Soße"), ("stew", "den Eintopf")]
    )
    (en_np, de_np), _ = sample_goods(rng, RECIPE_UNITS, "acc", use_digits(rng))
    return f"For the {en_dish} you need {en_np}.", f"Für {de_dish} braucht man {de_np}."


@template(1.5)
def drinks_every_day(rng: random.Random) -> Pair:
    subject = rng.choice(SUBJECTS)
    (en_np, de_np), _ = sample_goods(rng, DRINK_UNITS, "acc", use_digits(rng))
    return (
        sentence(f"{subject.en} {conjugate('drink|drinks|drink|drink', subject.person)} {en_np} every day."),
        sentence(f"{subject.de} {conjugate('trinke|trinkt|trinken|trinken', subject.person)} jeden Tag {de_np}."),
    )


@template(2.0)
def goods_cost(rng: random.Random) -> Pair:
    digits = use_digits(rng)
    (en_np, de_np), n = sample_goods(rng, GOODS_UNITS, "nom", digits)
    en_price, de_price = price_phrase(rng, digits, high=99)
    return (
        sentence(f"{en_np} {'costs' if n == 1 else 'cost'} {en_price}."),
        sentence(f"{de_np} {'kostet' if n == 1 else 'kosten'} {de_price}."),
    )


@template(2.0)
def item_costs(rng: random.Random) -> Pair:
    item = rng.choice(ITEMS)
    en_price, de_price = price_phrase(rng, use_digits(rng))
    return f"The {item.en_sg} costs {en_price}.", sentence(f"{item.de_the('nom')} kostet {de_price}.")


@template(2.0)
def paid_for(rng: random.Random) -> Pair:
    subject, item = rng.choice(SUBJECTS), rng.choice(ITEMS)
    en_price, de_price = price_phrase(rng, use_digits(rng))
    return (
        sentence(f"{subject.en} paid {en_price} for the {item.en_sg}."),
        sentence(f"{subject.de} {conjugate(HAVE_DE, subject.person)} {de_price} für {item.de_the('acc')} bezahlt."),
    )


# --- measures: distance, size, weight, age, temperature, percentages ------------------------------------------------

DESTINATIONS = [  # (place, how far away it may be: in metres up to, in kilometres up to)
    (Noun("station", "stations", "Bahnhof", "Bahnhöfe", "m"), 999, 20),
    (Noun("airport", "airports", "Flughafen", "Flughäfen", "m"), 0, 200),
    (Noun("beach", "beaches", "Strand", "Strände", "m"), 999, 100),
    (Noun("school", "schools", "Schule", "Schulen", "f"), 999, 10),
    (Noun("hospital", "hospitals", "Krankenhaus", "Krankenhäuser", "n"), 999, 50),
    (Noun("museum", "museums", "Museum", "Museen", "n"), 999, 20),
    (Noun("village", "villages", "Dorf", "Dörfer", "n"), 0, 99),
    (Noun("lake", "lakes", "See", "Seen", "m"), 999, 99),
    (Noun("bakery", "bakeries", "Bäckerei", "Bäckereien", "f"), 999, 0),
    (Noun("border", "borders", "Grenze", "Grenzen", "f"), 0, 500),
]


@template(1.5)
def distance_away(rng: random.Random) -> Pair:
    place, max_metres, max_kilometres = rng.choice(DESTINATIONS)
    units = [(u, low, high) for u, low, high in [(METRE, 10, max_metres), (KILOMETRE, 1, max_kilometres)] if high]
    unit, low, high = rng.choice(units)
    en_np, de_np = counted(unit, sample_count(rng, low, high), "acc", use_digits(rng))
    return f"The {place.en_sg} is {en_np} away.", sentence(f"{place.de_the('nom')} ist {de_np} entfernt.")


@template(1.5)
def travelled(rng: random.Random) -> Pair:
    subject, (en_when, de_when) = rng.choice(SUBJECTS), rng.choice(PAST_TIMES)
    en_verb, de_verb, unit, high = rng.choice(
        [
            ("hiked", "gewandert", KILOMETRE, 60),
            ("cycled", "Rad gefahren", KILOMETRE, 300),
            ("drove", "gefahren", KILOMETRE, 2000),
            ("ran", "gelaufen", KILOMETRE, 50),
            ("swam", "geschwommen", METRE, 5000),
        ]
    )
    en_np, de_np = counted(unit, sample_count(rng, 1, high), "acc", use_digits(rng))
    return (
        sentence(f"{subject.en} {en_verb} {en_np} {en_when}."),
        sentence(f"{subject.de} {conjugate(BE_DE, subject.person)} {de_when} {de_np} {de_verb}."),
    )


DIMENSIONS = [  # (thing, unit, English adjective, German adjective, largest number)
    (Noun("tower", "towers", "Turm", "Türme", "m"), METRE, "high", "hoch", 500),
    (Noun("wall", "walls", "Mauer", "Mauern", "f"), METRE, "high", "hoch", 20),
    (Noun("bridge", "bridges", "Brücke", "Brücken", "f"), METRE, "long", "lang", 3000),
    (Noun("river", "rivers", "Fluss", "Flüsse", "m"), KILOMETRE, "long", "lang", 3000),
    (Noun("road", "roads", "Straße", "Straßen", "f"), KILOMETRE, "long", "lang", 500),
    (Noun("lake", "lakes", "See", "Seen", "m"), METRE, "deep", "tief", 300),
    (Noun("table", "tables", "Tisch", "Tische", "m"), CENTIMETRE, "wide", "breit", 200),
    (Noun("door", "doors", "Tür", "Türen", "f"), CENTIMETRE, "wide", "breit", 150),
]


@template(1.5)
def dimension(rng: random.Random) -> Pair:
    thing, unit, en_adj, de_adj, high = rng.choice(DIMENSIONS)
    en_np, de_np = counted(unit, sample_count(rng, 1, high), "acc", use_digits(rng))
    return f"The {thing.en_sg} is {en_np} {en_adj}.", sentence(f"{thing.de_the('nom')} ist {de_np} {de_adj}.")


@template(1.0)
def weighs(rng: random.Random) -> Pair:
    thing, unit, high = rng.choice(
        [
            (Noun("dog", "dogs", "Hund", "Hunde", "m"), KILOGRAM, 80),
            (Noun("suitcase", "suitcases", "Koffer", "Koffer", "m"), KILOGRAM, 40),
            (Noun("parcel", "parcels", "Paket", "Pakete", "n"), KILOGRAM, 30),
            (Noun("letter", "letters", "Brief", "Briefe", "m"), GRAM, 500),
            (Noun("cake", "cakes", "Kuchen", "Kuchen", "m"), GRAM, 3000),
        ]
    )
    en_np, de_np = counted(unit, sample_count(rng, 1, high), "acc", use_digits(rng))
    return f"The {thing.en_sg} weighs {en_np}.", sentence(f"{thing.de_the('nom')} wiegt {de_np}.")


AGED = [  # (subject, youngest and oldest age)
    *[(s, 5, 99) for s in SUBJECTS if s.en not in ("my parents", "the children", "my grandmother")],
    (Subject("my parents", "meine Eltern", 3), 30, 95),
    (Subject("the children", "die Kinder", 3), 1, 17),
    (Subject("my son", "mein Sohn", 1), 1, 70),
    (Subject("my daughter", "meine Tochter", 1), 1, 70),
    (Subject("my grandmother", "meine Großmutter", 1), 50, 105),
    (Subject("my grandfather", "mein Großvater", 1), 50, 105),
    (Subject("our dog", "unser Hund", 1), 1, 18),
    (Subject("our cat", "unsere Katze", 1), 1, 20),
    (Subject("the house", "das Haus", 1), 1, 900),
    (Subject("the church", "die Kirche", 1), 50, 1200),
    (Subject("the tree", "der Baum", 1), 1, 999),
]


@template(2.0)
def age(rng: random.Random) -> Pair:
    subject, low, high = rng.choice(AGED)
    en_np, de_np = counted(YEAR, sample_count(rng, low, high), "nom", use_digits(rng))
    return (
        sentence(f"{subject.en} {conjugate(BE_EN, subject.person)} {en_np} old."),
        sentence(f"{subject.de} {conjugate(BE_DE, subject.person)} {de_np} alt."),
    )


@template(1.0)
def turned(rng: random.Random) -> Pair:
    name, (en_when, de_when) = rng.choice(NAMES), rng.choice(PAST_TIMES)
    n, digits = rng.randint(2, 99), use_digits(rng)
    return (
        f"{name} turned {en_count(n, digits)} {en_when}.",
        f"{name} ist {de_when} {de_count(n, 'n', 'nom', digits)} geworden.",
    )


@template(1.5)
def temperature(rng: random.Random) -> Pair:
    digits = use_digits(rng)
    n = rng.choice([0, rng.randint(2, 40), rng.randint(2, 40)])
    en_n, de_n = ("0", "0") if digits and n == 0 else (en_count(n, digits), de_count(n, "n", "nom", digits))
    if n and rng.random() < 0.25:
        en_n, de_n = f"minus {en_n}", f"minus {de_n}"
    if rng.random() < 0.5:
        return f"It is {en_n} degrees outside.", f"Draußen sind es {de_n} Grad."
    en_city, de_city = rng.choice(CITIES)
    return f"The temperature in {en_city} is {en_n} degrees.", f"Die Temperatur in {de_city} beträgt {de_n} Grad."


@template(1.5)
def percent_of_group(rng: random.Random) -> Pair:
    en_group, de_group = rng.choice(
        [
            ("pupils", "Schüler"),
            ("passengers", "Fahrgäste"),
            ("employees", "Mitarbeiter"),
            ("guests", "Gäste"),
            ("voters", "Wähler"),
        ]
    )
    en_vp, de_vp = rng.choice(
        [
            ("voted for the proposal", "haben für den Vorschlag gestimmt"),
            ("were satisfied", "waren zufrieden"),
            ("came by train", "sind mit dem Zug gekommen"),
            ("answered the question", "haben die Frage beantwortet"),
        ]
    )
    n, digits = rng.randint(2, 99), use_digits(rng)
    return (
        f"{sentence(en_count(n, digits))} per cent of the {en_group} {en_vp}.",
        f"{sentence(de_count(n, 'n', 'nom', digits))} Prozent der {de_group} {de_vp}.",
    )


@template(1.0)
def percent_change(rng: random.Random) -> Pair:
    en_what, de_what = rng.choice([("price", "Der Preis"), ("rent", "Die Miete"), ("population", "Die Bevölkerung")])
    en_verb, de_verb = rng.choice([("rose", "gestiegen"), ("fell", "gesunken")])
    n, digits = rng.randint(1, 99), use_digits(rng)
    return (
        f"The {en_what} {en_verb} by {en_count(n, digits)} per cent.",
        f"{de_what} ist um {de_count(n, 'n', 'acc', digits)} Prozent {de_verb}.",
    )


# --- durations -------------------------------------------------------------------------------------------------------


def sample_duration(rng: random.Random, units: list, case: str, digits: bool) -> Pair:
    unit, low, high = rng.choice(units)
    return counted(unit, sample_count(rng, low, high), case, digits)


@template(1.5)
def takes(rng: random.Random) -> Pair:
    thing, units = rng.choice(
        [
            (Noun("journey", "journeys", "Reise", "Reisen", "f"), [(HOUR, 1, 24), (DAY, 1, 30), (WEEK, 1, 12)]),
            (Noun("film", "films", "Film", "Filme", "m"), [(MINUTE, 1, 59), (HOUR, 1, 4)]),
            (Noun("course", "courses", "Kurs", "Kurse", "m"), [(DAY, 1, 30), (WEEK, 1, 12), (MONTH, 1, 11)]),
            (Noun("flight", "flights", "Flug", "Flüge", "m"), [(MINUTE, 1, 59), (HOUR, 1, 20)]),
            (
                Noun("renovation", "renovations", "Renovierung", "Renovierungen", "f"),
                [(WEEK, 1, 12), (MONTH, 1, 11), (YEAR, 1, 5)],
            ),
            (Noun("meeting", "meetings", "Besprechung", "Besprechungen", "f"), [(MINUTE, 1, 59), (HOUR, 1, 8)]),
        ]
    )
    en_np, de_np = sample_duration(rng, units, "acc", use_digits(rng))
    return f"The {thing.en_sg} takes {en_np}.", sentence(f"{thing.de_the('nom')} dauert {de_np}.")


@template(1.0)
def waited(rng: random.Random) -> Pair:
    subject = rng.choice(SUBJECTS)
    en_np, de_np = sample_duration(rng, [(MINUTE, 1, 59), (HOUR, 1, 5)], "acc", use_digits(rng))
    en_for, de_for = rng.choice(
        [("the bus", "den Bus"), ("the train", "den Zug"), ("the doctor", "den Arzt"), ("the pizza", "die Pizza")]
    )
    return (
        sentence(f"{subject.en} waited {en_np} for {en_for}."),
        sentence(f"{subject.de} {conjugate(HAVE_DE, subject.person)} {de_np} auf {de_for} gewartet."),
    )


@template(1.5)
def lived_for(rng: random.Random) -> Pair:
    subject, (en_city, de_city) = rng.choice(SUBJECTS), rng.choice(CITIES)
    en_np, de_np = sample_duration(
        rng, [(DAY, 1, 30), (WEEK, 1, 12), (MONTH, 1, 11), (YEAR, 1, 80)], "dat", use_digits(rng)
    )
    return (
        sentence(f"{subject.en} {conjugate(HAVE_EN, subject.person)} lived in {en_city} for {en_np}."),
        sentence(f"{subject.de} {conjugate('wohne|wohnt|wohnen|wohnen', subject.person)} seit {de_np} in {de_city}."),
    )


@template(1.0)
def came_ago(rng: random.Random) -> Pair:
    subject, (en_city, de_city) = rng.choice(SUBJECTS), rng.choice(CITIES)
    en_np, de_np = sample_duration(
        rng, [(DAY, 1, 30), (WEEK, 1, 12), (MONTH, 1, 11), (YEAR, 1, 80)], "dat", use_digits(rng)
    )
    return (
        sentence(f"{subject.en} came to {en_city} {en_np} ago."),
        sentence(f"{subject.de} {conjugate(BE_DE, subject.person)} vor {de_np} nach {de_city} gekommen."),
    )


# --- clock times -----------------------------------------------------------------------------------------------------

TIMED_EVENTS = [  # (English subject and verb, German subject and verb, German separable particle)
    ("The train leaves", "Der Zug fährt", " ab"),
    ("The bus leaves", "Der Bus fährt", " ab"),
    ("The ferry leaves", "Die Fähre legt", " ab"),
    ("The film starts", "Der Film beginnt", ""),
    ("The lesson begins", "Der Unterricht beginnt", ""),
    ("The shop opens", "Der Laden öffnet", ""),
    ("The shop closes", "Der Laden schließt", ""),
    ("The concert ends", "Das Konzert endet", ""),
    ("The plane lands", "Das Flugzeug landet", ""),
    ("Breakfast is served", "Das Frühstück gibt es", ""),
]
DAYPARTS = [  # (English, German, hours it goes with)
    ("in the morning", "morgens", (5, 6, 7, 8, 9, 10)),
    ("in the afternoon", "nachmittags", (1, 2, 3, 4, 5)),
    ("in the evening", "abends", (6, 7, 8, 9, 10)),
    ("at night", "nachts", (11, 12, 1, 2, 3)),
]


@template(3.0)
def timed_event(rng: random.Random) -> Pair:
    en_event, de_event, particle = rng.choice(TIMED_EVENTS)
    if rng.random() < 0.3:
        en_part, de_part, hours = rng.choice(DAYPARTS)
        en_time, de_time = sample_time(rng, hours)
        en_time, de_time = f"{en_time} {en_part}", f"{de_time} {de_part}"
    else:
        en_time, de_time = sample_time(rng)
    return f"{en_event} at {en_time}.", f"{de_event} um {de_time}{particle}."


@template(2.0)
def daily_routine(rng: random.Random) -> Pair:
    subject = rng.choice(SUBJECTS)
    en_verb, de_verb, en_when, de_when, particle, hours = rng.choice(
        [
            (
                "get up|gets up|get up|get up",
                "stehe|steht|stehen|stehen",
                "every day",
                "jeden Tag",
                " auf",
                (5, 6, 7, 8, 9),
            ),
            ("go|goes|go|go", "gehe|geht|gehen|gehen", "every evening", "jeden Abend", " ins Bett", (9, 10, 11, 12)),
            ("have|has|have|have", "esse|isst|essen|essen", "every day", "jeden Tag", " zu Mittag", (11, 12, 1, 2)),
            ("start|starts|start|start", "fange|fängt|fangen|fangen", "every day", "jeden Tag", " an", (6, 7, 8, 9)),
        ]
    )
    en_obj = {"go": " to bed", "have": " lunch", "start": " work"}.get(conjugate(en_verb, 0), "")
    if en_obj == " work":
        particle = " mit der Arbeit an"
    en_time, de_time = sample_time(rng, hours)
    return (
        sentence(f"{subject.en} {conjugate(en_verb, subject.person)}{en_obj} at {en_time} {en_when}."),
        sentence(f"{subject.de} {conjugate(de_verb, subject.person)} {de_when} um {de_time}{particle}."),
    )


@template(1.5)
def it_is(rng: random.Random) -> Pair:
    en_time, de_time = sample_time(rng)
    en_already, de_already = rng.choice([("", ""), (" already", " schon"), (" almost", " fast")])
    return f"It is{en_already} {en_time}.", f"Es ist{de_already} {de_time}."


@template(1.5)
def meeting_on_weekday(rng: random.Random) -> Pair:
    day = rng.randint(0, 6)
    en_time, de_time = sample_time(rng)
    en_who, de_who = rng.choice([("We are", "Wir treffen uns"), ("They are", "Sie treffen sich")])
    return (
        f"{en_who} meeting on {WEEKDAYS_EN[day]} at {en_time}.",
        f"{de_who} am {WEEKDAYS_DE[day]} um {de_time}.",
    )


@template(1.5)
def opening_hours(rng: random.Random) -> Pair:
    place = rng.choice(
        [
            ("museum", "Das Museum"),
            ("library", "Die Bibliothek"),
            ("pharmacy", "Die Apotheke"),
            ("post office", "Die Post"),
            ("swimming pool", "Das Schwimmbad"),
        ]
    )
    digits = use_digits(rng)
    en_from, de_from = sample_time(rng, (7, 8, 9, 10, 11), digits)
    en_to, de_to = sample_time(rng, (3, 4, 5, 6, 7, 8), digits)
    return f"The {place[0]} is open from {en_from} to {en_to}.", f"{place[1]} ist von {de_from} bis {de_to} geöffnet."


# --- dates, weekdays, months, years ------------------------------------------------------------------------------


@template(3.0)
def born(rng: random.Random) -> Pair:
    subject = rng.choice(SINGULAR_SUBJECTS)
    digits = use_digits(rng)
    day, month = sample_day(rng)
    en_date, de_date = date_phrase(day, month, "n", digits)
    if rng.random() < 0.7:
        en_year_, de_year_ = year_phrase(rng.randint(1900, 2025), digits)
        en_date, de_date = f"{en_date} {en_year_}", f"{de_date} {de_year_}"
    return sentence(f"{subject.en} was born on {en_date}."), sentence(f"{subject.de} wurde am {de_date} geboren.")


@template(2.0)
def today_is(rng: random.Random) -> Pair:
    day, month = sample_day(rng)
    en_date, de_date = date_phrase(day, month, "", use_digits(rng))
    if rng.random() < 0.5:
        weekday = rng.randint(0, 6)
        return f"Today is {WEEKDAYS_EN[weekday]}, {en_date}.", f"Heute ist {WEEKDAYS_DE[weekday]}, der {de_date}."
    return f"Today is {en_date}.", f"Heute ist der {de_date}."


@template(1.5)
def postponed(rng: random.Random) -> Pair:
    en_event, de_event, gender = rng.choice(EVENTS)
    day, month = sample_day(rng)
    en_date, de_date = date_phrase(day, month, "n", use_digits(rng))
    return (
        f"The {en_event} was moved to {en_date}.",
        sentence(f"{DEFINITE_ARTICLE[(gender, 'nom')]} {de_event} wurde auf den {de_date} verschoben."),
    )


@template(1.5)
def holiday_range(rng: random.Random) -> Pair:
    subject, digits = rng.choice(SUBJECTS), use_digits(rng)
    month = rng.randint(1, 12)
    first = rng.randint(1, DAYS_IN_MONTH[month - 1] - 1)
    last = rng.randint(first + 1, DAYS_IN_MONTH[month - 1])
    en_first, de_first = ordinal_phrase(first, "n", digits)
    en_last, de_last = date_phrase(last, month, "n", digits)
    en_range = f"from {first} to {en_last}" if digits else f"from the {en_first} to {en_last}"
    return (
        sentence(f"{subject.en} {conjugate(BE_EN, subject.person)} on holiday {en_range}."),
        sentence(f"{subject.de} {conjugate(BE_DE, subject.person)} vom {de_first} bis zum {de_last} im Urlaub."),
    )


@template(1.5)
def event_on_date(rng: random.Random) -> Pair:
    en_event, de_event, gender = rng.choice(EVENTS)
    day, month = sample_day(rng)
    weekday = rng.randint(0, 6)
    en_date, de_date = date_phrase(day, month, "n", use_digits(rng))
    return (
        f"The {en_event} takes place on {WEEKDAYS_EN[weekday]}, {en_date}.",
        sentence(
            f"{DEFINITE_ARTICLE[(gender, 'nom')]} {de_event} findet am {WEEKDAYS_DE[weekday]}, dem {de_date} statt."
        ),
    )


@template(1.5)
def birthday_on(rng: random.Random) -> Pair:
    name = rng.choice(NAMES)
    en_whose, de_whose = rng.choice([("my", "mein"), ("his", "sein"), ("her", "ihr"), (f"{name}'s", f"{name}s")])
    day, month = sample_day(rng)
    en_date, de_date = date_phrase(day, month, "n", use_digits(rng))
    return sentence(f"{en_whose} birthday is on {en_date}."), sentence(f"{de_whose} Geburtstag ist am {de_date}.")


BUILT = [  # (English subject, German subject, English participle, German participle)
    ("the house", "das Haus", "built", "gebaut"),
    ("the bridge", "die Brücke", "built", "gebaut"),
    ("the company", "die Firma", "founded", "gegründet"),
    ("the school", "die Schule", "founded", "gegründet"),
    ("the club", "der Verein", "founded", "gegründet"),
    ("the museum", "das Museum", "opened", "eröffnet"),
    ("the station", "der Bahnhof", "opened", "eröffnet"),
    ("the church", "die Kirche", "renovated", "renoviert"),
]


@template(2.0)
def built_in_year(rng: random.Random) -> Pair:
    en_what, de_what, en_done, de_done = rng.choice(BUILT)
    en_year_, de_year_ = year_phrase(rng.randint(1900, 2025), use_digits(rng))
    return sentence(f"{en_what} was {en_done} in {en_year_}."), sentence(
        f"{de_what} wurde im Jahr {de_year_} {de_done}."
    )


@template(1.0)
def future_year(rng: random.Random) -> Pair:
    en_event, de_event, gender = rng.choice(
        EVENTS[:4] + [("festival", "Festival", "n"), ("congress", "Kongress", "m")]
    )
    en_year_, de_year_ = year_phrase(rng.randint(2026, 2099), use_digits(rng))
    return (
        f"The next {en_event} will take place in {en_year_}.",
        sentence(f"{DEFINITE_ARTICLE[(gender, 'nom')]} nächste {de_event} findet im Jahr {de_year_} statt."),
    )


@template(1.5)
def moved_in_year(rng: random.Random) -> Pair:
    subject, (en_city, de_city) = rng.choice(SUBJECTS), rng.choice(CITIES)
    en_year_, de_year_ = year_phrase(rng.randint(1900, 2025), use_digits(rng))
    return (
        sentence(f"{subject.en} moved to {en_city} in {en_year_}."),
        sentence(f"{subject.de} {conjugate(BE_DE, subject.person)} im Jahr {de_year_} nach {de_city} gezogen."),
    )


@template(1.0)
def century(rng: random.Random) -> Pair:
    en_what, de_what = rng.choice(
        [("castle", "Die Burg"), ("church", "Die Kirche"), ("cathedral", "Der Dom"), ("town hall", "Das Rathaus")]
    )
    en_ord, de_ord = ordinal_phrase(rng.randint(10, 20), "n", use_digits(rng))
    return f"The {en_what} was built in the {en_ord} century.", f"{de_what} wurde im {de_ord} Jahrhundert gebaut."


@template(1.5)
def weekday_habit(rng: random.Random) -> Pair:
    day = rng.randint(0, 6)
    en_day, de_day = WEEKDAYS_EN[day], WEEKDAYS_DE[day]
    if rng.random() < 0.4:
        en_what, de_what = rng.choice(
            [("shop", "Der Laden"), ("museum", "Das Museum"), ("restaurant", "Das Restaurant")]
        )
        return f"The {en_what} is closed on {en_day}s.", f"{de_what} ist {de_day.lower()}s geschlossen."
    subject = rng.choice(SUBJECTS)
    en_verb, en_obj, de_verb, de_obj = rng.choice(
        [
            ("play|plays|play|play", "football", "spiele|spielt|spielen|spielen", "Fußball"),
            ("go|goes|go|go", "swimming", "gehe|geht|gehen|gehen", "schwimmen"),
            ("visit|visits|visit|visit", "my aunt", "besuche|besucht|besuchen|besuchen", "meine Tante"),
        ]
    )
    return (
        sentence(f"{subject.en} {conjugate(en_verb, subject.person)} {en_obj} on {en_day}s."),
        sentence(f"{subject.de} {conjugate(de_verb, subject.person)} {de_day.lower()}s {de_obj}."),
    )


@template(1.0)
def works_from_to(rng: random.Random) -> Pair:
    subject = rng.choice(SUBJECTS)
    first = rng.randint(0, 4)
    last = rng.randint(first + 1, 6)
    return (
        sentence(
            f"{subject.en} {conjugate('work|works|work|work', subject.person)} from {WEEKDAYS_EN[first]} to {WEEKDAYS_EN[last]}."
        ),
        sentence(
            f"{subject.de} {conjugate('arbeite|arbeitet|arbeiten|arbeiten', subject.person)} von {WEEKDAYS_DE[first]} bis {WEEKDAYS_DE[last]}."
        ),
    )


@template(1.0)
def travel_in_month(rng: random.Random) -> Pair:
    subject, (en_city, de_city), month = rng.choice(SUBJECTS), rng.choice(CITIES), rng.randint(0, 11)
    return (
        sentence(f"{subject.en} will travel to {en_city} in {MONTHS_EN[month]}."),
        sentence(
            f"{subject.de} {conjugate('fahre|fährt|fahren|fahren', subject.person)} im {MONTHS_DE[month]} nach {de_city}."
        ),
    )


# --- ordinals and numbers as names -----------------------------------------------------------------------------------


@template(1.5)
def lives_on_floor(rng: random.Random) -> Pair:
    subject = rng.choice(SUBJECTS)
    en_ord, de_ord = ordinal_phrase(rng.randint(1, 30), "n", use_digits(rng))
    return (
        sentence(f"{subject.en} {conjugate('live|lives|live|live', subject.person)} on the {en_ord} floor."),
        sentence(f"{subject.de} {conjugate('wohne|wohnt|wohnen|wohnen', subject.person)} im {de_ord} Stock."),
    )


@template(1.5)
def nth_time(rng: random.Random) -> Pair:
    subject = rng.choice(SUBJECTS)
    en_ord, de_ord = ordinal_phrase(rng.randint(2, 50), "n", use_digits(rng))
    en_city, de_city = rng.choice(CITIES)
    en_vp, de_obj, de_part = rng.choice(
        [
            ("won the race", "das Rennen", "gewonnen"),
            (f"visited {en_city}", de_city, "besucht"),
            ("read the book", "das Buch", "gelesen"),
        ]
    )
    return (
        sentence(f"{subject.en} {en_vp} for the {en_ord} time."),
        sentence(f"{subject.de} {conjugate(HAVE_DE, subject.person)} {de_obj} zum {de_ord} Mal {de_part}."),
    )


@template(1.0)
def finished_place(rng: random.Random) -> Pair:
    subject = rng.choice(SUBJECTS)
    en_ord, de_ord = ordinal_phrase(rng.randint(1, 100), "n", use_digits(rng))
    return (
        sentence(f"{subject.en} finished in {en_ord} place."),
        sentence(f"{subject.de} {conjugate(HAVE_DE, subject.person)} den {de_ord} Platz belegt."),
    )


@template(1.0)
def nth_birthday(rng: random.Random) -> Pair:
    name = rng.choice(NAMES)
    en_ord, de_ord = ordinal_phrase(rng.randint(1, 99), "r", use_digits(rng))  # strong ending: "Annas dritter"
    return f"Today is {name}'s {en_ord} birthday.", f"Heute ist {name}s {de_ord} Geburtstag."


@template(1.0)
def reading_chapter(rng: random.Random) -> Pair:
    subject = rng.choice(SUBJECTS)
    en_ord, de_ord = ordinal_phrase(rng.randint(1, 40), "", use_digits(rng))
    return (
        sentence(f"{subject.en} {conjugate('am|is|are|are', subject.person)} reading the {en_ord} chapter."),
        sentence(f"{subject.de} {conjugate('lese|liest|lesen|lesen', subject.person)} das {de_ord} Kapitel."),
    )


@template(1.0)
def bus_number(rng: random.Random) -> Pair:
    n = rng.randint(1, 199)
    en_to, de_to = rng.choice(
        [
            ("the station", "zum Bahnhof"),
            ("the airport", "zum Flughafen"),
            ("the hospital", "zum Krankenhaus"),
            ("the city centre", "ins Stadtzentrum"),
        ]
    )
    en_n, de_n = (str(n), str(n)) if use_digits(rng) else (en_cardinal(n), de_cardinal(n))
    return f"Take bus number {en_n} to {en_to}.", f"Nehmen Sie den Bus Nummer {de_n} {de_to}."


@template(1.0)
def room_number(rng: random.Random) -> Pair:
    floor, digits = rng.randint(1, 9), use_digits(rng)
    n = floor * 100 + rng.randint(1, 40)
    en_n, de_n = (str(n), str(n)) if digits else (en_cardinal(n), de_cardinal(n))
    en_ord, de_ord = ordinal_phrase(floor, "n", digits)
    return f"Your room is number {en_n} on the {en_ord} floor.", f"Ihr Zimmer ist Nummer {de_n} im {de_ord} Stock."


# ---------------------------------------------------------------------------------------------------------------------
# Command line
# ---------------------------------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> None:
    """``python -m vaswani.demo_data --output_dir DIR``: write the jsonl files and print a few samples."""
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
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


if __name__ == "__main__":
    main()
