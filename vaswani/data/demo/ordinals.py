"""Sentence frames with ordinals and numbers as names: "im dritten Stock", "zum dritten Mal", "Bus Nummer 12"."""

from __future__ import annotations

import random

from vaswani.data.demo.grammar import (
    HAVE_DE,
    Pair,
    conjugate,
    de_cardinal,
    en_cardinal,
    ordinal_phrase,
    sentence,
    use_digits,
)
from vaswani.data.demo.lexicon import CITIES, NAMES, SUBJECTS
from vaswani.data.demo.templates import Templates, template_decorator

TEMPLATES: Templates = {}
template = template_decorator(TEMPLATES)


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
