"""Sentence frames with clock times: "um Viertel nach sieben", "um halb acht", "um 7:45 Uhr"."""

from __future__ import annotations

import random

from vaswani.data.demo.grammar import Pair, conjugate, de_cardinal, en_cardinal, sentence, use_digits
from vaswani.data.demo.lexicon import SUBJECTS, WEEKDAYS_DE, WEEKDAYS_EN
from vaswani.data.demo.templates import Templates, template_decorator

TEMPLATES: Templates = {}
template = template_decorator(TEMPLATES)


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
