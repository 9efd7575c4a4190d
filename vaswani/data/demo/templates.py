"""The template registry: how a family module registers its sentence frames, each with its sampling weight.

A sentence frame takes the random generator and returns one (English, German) pair. Each family module keeps its
frames in a `TEMPLATES` dict, in the order they are defined there, through its own ``@template(weight)`` decorator;
the package joins the families' dicts in a fixed order. That order decides the random draws: moving one frame
changes every pair drawn after it.
"""

from __future__ import annotations

import random
from collections.abc import Callable

from vaswani.data.demo.grammar import Pair

Frame = Callable[[random.Random], Pair]
Templates = dict[str, tuple[float, Frame]]
"""Sentence frames by name, with their sampling weights, in registration order."""


def template_decorator(templates: Templates) -> Callable[[float], Callable[[Frame], Frame]]:
    """Return the ``@template(weight)`` decorator that registers a sentence frame in `templates` under its name."""

    def template(weight: float) -> Callable[[Frame], Frame]:
        """Register a sentence frame with a sampling weight."""

        def register(fn: Frame) -> Frame:
            templates[fn.__name__] = (weight, fn)
            return fn

        return register

    return template
