"""Sentence frames with durations: "The film takes two hours.", "seit einem Monat", "vor zwei Jahren"."""

from __future__ import annotations

import random

from vaswani.data.demo.grammar import (
    BE_DE,
    HAVE_DE,
    HAVE_EN,
    Noun,
    Pair,
    conjugate,
    counted,
    sample_count,
    sentence,
    use_digits,
)
from vaswani.data.demo.lexicon import CITIES, DAY, HOUR, MINUTE, MONTH, SUBJECTS, WEEK, YEAR
from vaswani.data.demo.templates import Templates, template_decorator

TEMPLATES: Templates = {}
template = template_decorator(TEMPLATES)


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
