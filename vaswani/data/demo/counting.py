"""Sentence frames with counted nouns: "There are twelve apples in the box.", "I have one dog."."""

from __future__ import annotations

import random

from vaswani.data.demo.grammar import (
    HAVE_DE,
    HAVE_EN,
    Noun,
    Pair,
    conjugate,
    counted,
    en_count,
    sample_count,
    sentence,
    use_digits,
)
from vaswani.data.demo.lexicon import ANIMAL_PLACES, ANIMALS, OBJECT_PLACES, OBJECTS, PAST_TIMES, SUBJECTS
from vaswani.data.demo.templates import Templates, template_decorator

TEMPLATES: Templates = {}
template = template_decorator(TEMPLATES)


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
