"""Sentence frames with dates, weekdays, months, years and centuries: "am dritten März", "im Jahr 1987"."""

from __future__ import annotations

import random

from vaswani.data.demo.grammar import (
    BE_DE,
    BE_EN,
    DEFINITE_ARTICLE,
    Pair,
    conjugate,
    de_ordinal,
    de_year,
    en_ordinal,
    en_year,
    ordinal_phrase,
    sentence,
    use_digits,
)
from vaswani.data.demo.lexicon import (
    CITIES,
    DAYS_IN_MONTH,
    EVENTS,
    MONTHS_DE,
    MONTHS_EN,
    NAMES,
    SINGULAR_SUBJECTS,
    SUBJECTS,
    WEEKDAYS_DE,
    WEEKDAYS_EN,
)
from vaswani.data.demo.templates import Templates, template_decorator

TEMPLATES: Templates = {}
template = template_decorator(TEMPLATES)


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
