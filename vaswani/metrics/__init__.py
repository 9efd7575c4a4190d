"""Offline `evaluate` metrics: SacreBLEU and chrF(++) as local metric scripts.

`evaluate.load("sacrebleu")` downloads its script from the Hugging Face Hub and fails offline. The folders next to
this file hold our own metric scripts with the same inputs and outputs as the Hub's "sacrebleu" and "chrf" metrics
(plus sacrebleu's signature string), which `evaluate.load(<absolute folder path>)` loads without any network:

    >>> from vaswani.metrics import load_metric
    >>> bleu = load_metric("sacrebleu")
    >>> result = bleu.compute(predictions=["the cat sat on the mat"], references=[["the cat sat on the mat"]])
    >>> round(result["score"], 1), result["signature"]
    (100.0, 'nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2.6.0')

`corpus_scores` is what every command records (training's evaluation, `vaswani evaluate`, distill's report): BLEU
and chrF with their signatures, BLEU tokenized for the target language as sacrebleu's command line does with `-l
SRC-TGT` (`bleu_tokenizer`).
"""

from __future__ import annotations

import functools
import logging
import re
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import evaluate

METRICS_DIR = Path(__file__).resolve().parent
"""Folder holding one folder per metric, each with a script of the same name (what `evaluate.load` expects)."""

AVAILABLE_METRICS = ("sacrebleu", "chrf")

# BLEU's tokenizer by the target language's primary subtag, as sacrebleu's command line picks it for `-l SRC-TGT`
# (`BLEU(trg_lang=...)`): 13a splits at spaces and punctuation, which leaves a sentence of Chinese, Japanese or
# Korean (written without spaces between words) nearly whole, so these are split into characters (zh) or by MeCab.
BLEU_TOKENIZERS = {"zh": "zh", "ja": "ja-mecab", "ko": "ko-mecab"}
DEFAULT_BLEU_TOKENIZER = "13a"
# The sacrebleu extra that installs each tokenizer's dependencies (MeCab and its dictionary).
TOKENIZER_EXTRAS = {"ja-mecab": "ja", "ko-mecab": "ko"}

logger = logging.getLogger("vaswani.metrics")


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


def bleu_tokenizer(target_lang: str | None) -> str:
    """sacrebleu's BLEU tokenizer for text in `target_lang` (a code such as "de", "zh", "zh-CN", "ja"; None: 13a):
    `BLEU_TOKENIZERS`, else 13a. Where a tokenizer's dependencies are not installed (Japanese, Korean: sacrebleu's
    extras), 13a, with one warning per process naming the fix; the signature says which tokenizer scored."""
    primary = re.split(r"[-_]", target_lang or "")[0].lower()
    name = BLEU_TOKENIZERS.get(primary, DEFAULT_BLEU_TOKENIZER)
    return name if name == DEFAULT_BLEU_TOKENIZER or _tokenizer_available(name) else DEFAULT_BLEU_TOKENIZER


@functools.cache
def _tokenizer_available(name: str) -> bool:
    """Whether sacrebleu can make the tokenizer `name` here (a warning when it cannot)."""
    from sacrebleu.metrics import BLEU

    try:
        BLEU(tokenize=name)
    except (RuntimeError, ImportError) as error:  # sacrebleu: "... requires extra dependencies ..."
        logger.warning(
            "BLEU would tokenize this target language with sacrebleu's %s tokenizer, which is not installed (%s); "
            "scoring with %s instead (the BLEU signature says tok:%s). Install it with: pip install -c "
            "constraints.txt 'sacrebleu[%s]'", name, str(error).strip().splitlines()[0], DEFAULT_BLEU_TOKENIZER,
            DEFAULT_BLEU_TOKENIZER, TOKENIZER_EXTRAS.get(name, name),
        )  # fmt: skip
        return False
    return True


def corpus_scores(hypotheses: Sequence[str], references: Sequence[str], target_lang: str | None = None) -> dict:
    """Corpus BLEU and chrF of `hypotheses` (in `target_lang`) against one reference each, with their sacrebleu
    signatures: what training's evaluation, `vaswani evaluate` and distill's report record (keys bleu, chrf,
    bleu_signature, chrf_signature). BLEU is tokenized for `target_lang` (`bleu_tokenizer`); chrF counts characters
    and needs no tokenizer."""
    hypotheses, references = list(hypotheses), [[reference] for reference in references]
    tokenize = bleu_tokenizer(target_lang)
    bleu = load_metric("sacrebleu").compute(predictions=hypotheses, references=references, tokenize=tokenize)
    chrf = load_metric("chrf").compute(predictions=hypotheses, references=references)
    return {"bleu": bleu["score"], "chrf": chrf["score"], "bleu_signature": bleu["signature"],
            "chrf_signature": chrf["signature"]}  # fmt: skip


__all__ = [
    "AVAILABLE_METRICS",
    "BLEU_TOKENIZERS",
    "METRICS_DIR",
    "bleu_tokenizer",
    "corpus_scores",
    "load_metric",
    "metric_path",
]
