"""Sentence frames with measures: distances, sizes, weights, ages, temperatures and percentages."""

from __future__ import annotations

import random

from vaswani.data.demo.grammar import (
    BE_DE,
    BE_EN,
    Noun,
    Pair,
    Subject,
    conjugate,
    counted,
    de_count,
    en_count,
    sample_count,
    sentence,
    use_digits,
)
from vaswani.data.demo.lexicon import (
    CENTIMETRE,
    CITIES,
    GRAM,
    KILOGRAM,
    KILOMETRE,
    METRE,
    NAMES,
    PAST_TIMES,
    SUBJECTS,
    YEAR,
)
from vaswani.data.demo.templates import Templates, template_decorator

TEMPLATES: Templates = {}
template = template_decorator(TEMPLATES)


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
