"""Grammar of the demo sentences: number words, articles, nouns, subjects and verbs, and the number draws.

Number words come from num2words; the German side follows case, gender and number (the number one is the inflected
indefinite article, dative plurals take -n). Every helper returns English and German side by side.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from functools import cache

from num2words import num2words

DIGIT_RATE = 0.15
"""Share of the sentences with numbers (bare numbers and arithmetic excepted) that write them as digits."""

# A pair of sentences: (English, German).
Pair = tuple[str, str]


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


def ordinal_phrase(n: int, de_ending: str, digits: bool) -> Pair:
    """("third", "dritten") for de_ending "n"; ("3rd", "3.") in digits."""
    if digits:
        return en_ordinal_digits(n), f"{n}."
    return en_ordinal(n), de_ordinal(n) + de_ending


# ---------------------------------------------------------------------------------------------------------------------
# Articles, nouns, subjects and verbs
# ---------------------------------------------------------------------------------------------------------------------


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


@dataclass(frozen=True)
class Subject:
    """A sentence subject and its grammatical person: 0 = I, 1 = he/she/it, 2 = we, 3 = they."""

    en: str
    de: str
    person: int


def conjugate(forms: str, person: int) -> str:
    """Pick the form for `person` from "1sg|3sg|1pl|3pl", e.g. conjugate("habe|hat|haben|haben", 1) == "hat"."""
    return forms.split("|")[person]


HAVE_EN, HAVE_DE = "have|has|have|have", "habe|hat|haben|haben"
BE_EN, BE_DE = "am|is|are|are", "bin|ist|sind|sind"


def sentence(text: str) -> str:
    """Capitalise the first letter (German "ich" and English subjects start sentences in the frames)."""
    return text[0].upper() + text[1:]


# ---------------------------------------------------------------------------------------------------------------------
# Numbers to draw
# ---------------------------------------------------------------------------------------------------------------------


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
