"""Corpus BLEU computed by SacreBLEU, as an `evaluate` metric that loads offline from this folder.

Same inputs and outputs as the Hugging Face Hub's "sacrebleu" metric, plus SacreBLEU's signature string. Load it with
``evaluate.load("/absolute/path/to/vaswani/metrics/sacrebleu")`` or ``vaswani.metrics.load_metric("sacrebleu")``.
"""

from __future__ import annotations

from sacrebleu.metrics import BLEU

from vaswani.metrics import corpus_metric

_CITATION = """\
@inproceedings{post-2018-call, title = "A Call for Clarity in Reporting {BLEU} Scores", author = "Post, Matt", booktitle = "Proceedings of the Third Conference on Machine Translation: Research Papers", year = "2018", url = "https://aclanthology.org/W18-6319"}
"""

_DESCRIPTION = """\
Corpus-level BLEU (Papineni et al., 2002) as computed by SacreBLEU (Post, 2018) on detokenized text: SacreBLEU
tokenizes internally, so scores are comparable across papers when reported with the signature string.
"""

_KWARGS_DESCRIPTION = """
Args:
    predictions (`list` of `str`): the translations to score, detokenized.
    references (`list` of `list` of `str`, or `list` of `str`): the references of each prediction; every prediction
        needs the same number of references. A plain list of strings means one reference per prediction.
    smooth_method (`str`): "exp" (default), "none", "floor" or "add-k".
    smooth_value (`float`, *optional*): the value for "floor" (default 0.1) and "add-k" (default 1).
    tokenize (`str`, *optional*): SacreBLEU tokenizer: "13a" (default), "none", "zh", "intl", "char", "ja-mecab",
        "ko-mecab", "flores101", "flores200".
    lowercase (`bool`): compare lowercased text. Defaults to False.
    force (`bool`): score even if the text looks tokenized already. Defaults to False.
    use_effective_order (`bool`): leave out n-gram orders without any match (for sentence-level BLEU). Defaults to
        False.

Returns:
    score (`float`): BLEU, 0 to 100.
    counts (`list` of `int`): matching n-grams for n = 1..4.
    totals (`list` of `int`): n-grams in the predictions for n = 1..4.
    precisions (`list` of `float`): n-gram precisions in percent.
    bp (`float`): brevity penalty.
    sys_len (`int`): length of the predictions in tokens.
    ref_len (`int`): effective length of the references in tokens.
    signature (`str`): SacreBLEU's signature, e.g. "nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2.6.0".

Example:
    >>> bleu = evaluate.load("path/to/vaswani/metrics/sacrebleu")
    >>> result = bleu.compute(predictions=["the cat sat on the mat"], references=[["the cat sat on the mat"]])
    >>> result["score"], result["signature"]
    (100.00000000000004, 'nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2.6.0')
"""


class Sacrebleu(corpus_metric.SacrebleuCorpusMetric):
    """SacreBLEU corpus BLEU."""

    metric_name = "sacrebleu"
    citation, description, kwargs_description = _CITATION, _DESCRIPTION, _KWARGS_DESCRIPTION
    reference_urls = ["https://aclanthology.org/W18-6319", "https://aclanthology.org/P02-1040"]

    def scorer(self, use_effective_order: bool = False, **options) -> BLEU:
        """SacreBLEU's BLEU; the Hub metric's `use_effective_order` is BLEU's `effective_order`."""
        return BLEU(effective_order=use_effective_order, **options)

    result_fields = (
        "score",
        "counts",
        "totals",
        "precisions",
        "bp",
        "sys_len",
        "ref_len",
    )  # attributes of SacreBLEU's result, returned by `compute`
