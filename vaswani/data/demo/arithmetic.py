"""Sentence frames with bare numbers: cardinals on their own (0-9999) and arithmetic in words."""

from __future__ import annotations

import random

from vaswani.data.demo.grammar import Pair, de_cardinal, en_cardinal, sample_number, sentence
from vaswani.data.demo.templates import Templates, template_decorator

TEMPLATES: Templates = {}
template = template_decorator(TEMPLATES)


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
