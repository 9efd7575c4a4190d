"""Sentence frames with quantities of goods and prices: "zwölf Kilogramm Äpfel", "zwölf Euro fünfzig"."""

from __future__ import annotations

import random

from vaswani.data.demo.grammar import (
    HAVE_DE,
    Pair,
    conjugate,
    counted,
    de_cardinal,
    en_cardinal,
    sample_count,
    sentence,
    use_digits,
)
from vaswani.data.demo.lexicon import DRINK_UNITS, GOODS_UNITS, ITEMS, PAST_TIMES, RECIPE_UNITS, SUBJECTS
from vaswani.data.demo.templates import Templates, template_decorator

TEMPLATES: Templates = {}
template = template_decorator(TEMPLATES)


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
