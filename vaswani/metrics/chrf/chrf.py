"""chrF and chrF++ computed by SacreBLEU, as an `evaluate` metric that loads offline from this folder.

Same inputs and outputs as the Hugging Face Hub's "chrf" metric, plus SacreBLEU's signature string. Load it with
``evaluate.load("/absolute/path/to/vaswani/metrics/chrf")`` or ``vaswani.metrics.load_metric("chrf")``.
"""

from __future__ import annotations

from sacrebleu.metrics import CHRF

from vaswani.metrics import corpus_metric

_CITATION = """\
@inproceedings{popovic-2015-chrf, title = "chr{F}: character n-gram {F}-score for automatic {MT} evaluation", author = "Popovi{\\'c}, Maja", booktitle = "Proceedings of the Tenth Workshop on Statistical Machine Translation", year = "2015", url = "https://aclanthology.org/W15-3049"}
@inproceedings{popovic-2017-chrf, title = "chr{F}++: words helping character n-grams", author = "Popovi{\\'c}, Maja", booktitle = "Proceedings of the Second Conference on Machine Translation", year = "2017", url = "https://aclanthology.org/W17-4770"}
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


class Chrf(corpus_metric.SacrebleuCorpusMetric):
    """SacreBLEU chrF / chrF++."""

    metric_name = "chrf"
    citation, description, kwargs_description = _CITATION, _DESCRIPTION, _KWARGS_DESCRIPTION
    reference_urls = ["https://aclanthology.org/W15-3049", "https://aclanthology.org/W17-4770"]

    scorer = CHRF  # the Hub metric's options are CHRF's own

    result_fields = (
        "score",
        "char_order",
        "word_order",
        "beta",
    )  # attributes of SacreBLEU's result, returned by `compute`
