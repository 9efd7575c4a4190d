"""Offline `evaluate` metrics: SacreBLEU and chrF(++) as local metric scripts.

`evaluate.load("sacrebleu")` downloads its script from the Hugging Face Hub and fails offline. The folders next to
this file hold our own metric scripts with the same inputs and outputs as the Hub's "sacrebleu" and "chrf" metrics
(plus sacrebleu's signature string), which `evaluate.load(<absolute folder path>)` loads without any network:

    >>> from vaswani.metrics import load_metric
    >>> bleu = load_metric("sacrebleu")
    >>> result = bleu.compute(predictions=["the cat sat on the mat"], references=[["the cat sat on the mat"]])
    >>> round(result["score"], 1), result["signature"]
    (100.0, 'nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2.6.0')
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import evaluate

METRICS_DIR = Path(__file__).resolve().parent
"""Folder holding one folder per metric, each with a script of the same name (what `evaluate.load` expects)."""

AVAILABLE_METRICS = ("sacrebleu", "chrf")


def metric_path(name: str) -> Path:
    """Absolute path of the folder of metric `name` ("sacrebleu" or "chrf")."""
    if name not in AVAILABLE_METRICS:
        raise ValueError(f"Unknown metric {name!r}: the local metrics are {', '.join(AVAILABLE_METRICS)}.")
    return METRICS_DIR / name


def load_metric(name: str, **load_kwargs) -> evaluate.EvaluationModule:
    """Load the local metric `name` ("sacrebleu" or "chrf") through `evaluate.load`, offline.

    `load_kwargs` go to `evaluate.load`. `keep_in_memory` defaults to True: predictions are kept in memory instead of
    Arrow cache files (the training script gathers predictions across processes itself).
    """
    import evaluate  # imported here: importing vaswani.metrics stays cheap

    path = metric_path(name)
    load_kwargs.setdefault("keep_in_memory", True)
    return evaluate.load(str(path), **load_kwargs)


def corpus_scores(hypotheses: Sequence[str], references: Sequence[str]) -> dict:
    """Corpus BLEU and chrF of `hypotheses` against one reference each, with their sacrebleu signatures: what
    training's evaluation, `vaswani evaluate` and distill's report record (keys bleu, chrf, bleu_signature,
    chrf_signature)."""
    hypotheses, references = list(hypotheses), [[reference] for reference in references]
    bleu = load_metric("sacrebleu").compute(predictions=hypotheses, references=references)
    chrf = load_metric("chrf").compute(predictions=hypotheses, references=references)
    return {"bleu": bleu["score"], "chrf": chrf["score"], "bleu_signature": bleu["signature"],
            "chrf_signature": chrf["signature"]}  # fmt: skip


__all__ = ["AVAILABLE_METRICS", "METRICS_DIR", "corpus_scores", "load_metric", "metric_path"]
