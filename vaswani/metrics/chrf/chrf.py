"""chrF and chrF++ computed by SacreBLEU, as an `evaluate` metric that loads offline from this folder.

Same inputs and outputs as the Hugging Face Hub's "chrf" metric, plus SacreBLEU's signature string. Load it with
``evaluate.load("/absolute/path/to/vaswani/metrics/chrf")`` or ``vaswani.metrics.load_metric("chrf")``.
"""

from __future__ import annotations

import datasets
import evaluate
from sacrebleu.metrics import CHRF

_CITATION = """\
@inproceedings{popovic-2015-chrf,
    title = "chr{F}: character n-gram {F}-score for automatic {MT} evaluation",
    author = "Popovi{\\'c}, Maja",
    booktitle = "Proceedings of the Tenth Workshop on Statistical Machine Translation",
    year = "2015",
    address = "Lisbon, Portugal",
    publisher = "Association for Computational Linguistics",
    url = "https://aclanthology.org/W15-3049",
    pages = "392--395",
}
@inproceedings{popovic-2017-chrf,
    title = "chr{F}++: words helping character n-grams",
    author = "Popovi{\\'c}, Maja",
    booktitle = "Proceedings of the Second Conference on Machine Translation",
    year = "2017",
    address = "Copenhagen, Denmark",
    publisher = "Association for Computational Linguistics",
    url = "https://aclanthology.org/W17-4770",
    pages = "612--618",
}
"""

_DESCRIPTION = """\
chrF (Popović, 2015) is the F-score of character n-gram matches between predictions and references; chrF++
(Popović, 2017) adds word unigrams and bigrams (word_order=2). Computed at corpus level by SacreBLEU.
"""

_KWARGS_DESCRIPTION = """
Args:
    predictions (`list` of `str`): the translations to score.
    references (`list` of `list` of `str`, or `list` of `str`): the references of each prediction; every prediction
        needs the same number of references. A plain list of strings means one reference per prediction.
    char_order (`int`): character n-gram order. Defaults to 6.
    word_order (`int`): word n-gram order; 2 gives chrF++. Defaults to 0 (chrF).
    beta (`int`): weight of recall relative to precision. Defaults to 2.
    lowercase (`bool`): compare lowercased text. Defaults to False.
    whitespace (`bool`): keep whitespace in character n-grams. Defaults to False.
    eps_smoothing (`bool`): epsilon smoothing as in the reference chrF++.py, NLTK and Moses; if False, orders without
        matches are left out as in SacreBLEU. Defaults to False.

Returns:
    score (`float`): chrF or chrF++, 0 to 100.
    char_order (`int`), word_order (`int`), beta (`int`): the settings used.
    signature (`str`): SacreBLEU's signature, e.g. "nrefs:1|case:mixed|eff:yes|nc:6|nw:0|space:no|version:2.6.0".

Example:
    >>> chrf = evaluate.load("path/to/vaswani/metrics/chrf")
    >>> chrf.compute(predictions=["the cat sat on the mat"], references=[["the cat sat on the mat"]])["score"]
    100.0
"""


@evaluate.utils.file_utils.add_start_docstrings(_DESCRIPTION, _KWARGS_DESCRIPTION)
class Chrf(evaluate.Metric):
    """SacreBLEU chrF / chrF++."""

    def _info(self) -> evaluate.MetricInfo:
        return evaluate.MetricInfo(
            description=_DESCRIPTION,
            citation=_CITATION,
            inputs_description=_KWARGS_DESCRIPTION,
            homepage="https://github.com/mjpost/sacrebleu",
            features=[
                datasets.Features(
                    {
                        "predictions": datasets.Value("string", id="sequence"),
                        "references": datasets.Sequence(datasets.Value("string", id="sequence"), id="references"),
                    }
                ),
                datasets.Features(
                    {
                        "predictions": datasets.Value("string", id="sequence"),
                        "references": datasets.Value("string", id="sequence"),
                    }
                ),
            ],
            codebase_urls=["https://github.com/mjpost/sacrebleu"],
            reference_urls=["https://aclanthology.org/W15-3049", "https://aclanthology.org/W17-4770"],
        )

    def _compute(
        self,
        predictions: list[str],
        references: list[list[str]] | list[str],
        char_order: int = CHRF.CHAR_ORDER,
        word_order: int = CHRF.WORD_ORDER,
        beta: int = CHRF.BETA,
        lowercase: bool = False,
        whitespace: bool = False,
        eps_smoothing: bool = False,
    ) -> dict:
        chrf = CHRF(
            char_order=char_order,
            word_order=word_order,
            beta=beta,
            lowercase=lowercase,
            whitespace=whitespace,
            eps_smoothing=eps_smoothing,
        )
        result = chrf.corpus_score(list(predictions), reference_streams(predictions, references))
        return {
            "score": result.score,
            "char_order": result.char_order,
            "word_order": result.word_order,
            "beta": result.beta,
            "signature": str(chrf.get_signature()),
        }


def reference_streams(predictions: list[str], references: list[list[str]] | list[str]) -> list[list[str]]:
    """Turn references per prediction into SacreBLEU's reference streams (the i-th reference of every prediction).

    Raises ValueError for no predictions, a different number of references than predictions, or predictions with
    different numbers of references.
    """
    if len(predictions) == 0:
        raise ValueError("chrf needs at least one prediction.")
    if len(references) != len(predictions):
        raise ValueError(
            f"Got {len(predictions)} predictions but {len(references)} references: give one per prediction."
        )
    references = [[refs] if isinstance(refs, str) else list(refs) for refs in references]
    num_refs = len(references[0])
    if num_refs == 0 or any(len(refs) != num_refs for refs in references):
        raise ValueError("chrf needs the same number (at least one) of references for every prediction.")
    return [[refs[i] for refs in references] for i in range(num_refs)]
