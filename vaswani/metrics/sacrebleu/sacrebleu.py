"""Corpus BLEU computed by SacreBLEU, as an `evaluate` metric that loads offline from this folder.

Same inputs and outputs as the Hugging Face Hub's "sacrebleu" metric, plus SacreBLEU's signature string. Load it with
``evaluate.load("/absolute/path/to/vaswani/metrics/sacrebleu")`` or ``vaswani.metrics.load_metric("sacrebleu")``.
"""

from __future__ import annotations

import datasets
import evaluate
from sacrebleu.metrics import BLEU

_CITATION = """\
@inproceedings{post-2018-call,
    title = "A Call for Clarity in Reporting {BLEU} Scores",
    author = "Post, Matt",
    booktitle = "Proceedings of the Third Conference on Machine Translation: Research Papers",
    year = "2018",
    address = "Brussels, Belgium",
    publisher = "Association for Computational Linguistics",
    url = "https://aclanthology.org/W18-6319",
    pages = "186--191",
}
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


@evaluate.utils.file_utils.add_start_docstrings(_DESCRIPTION, _KWARGS_DESCRIPTION)
class Sacrebleu(evaluate.Metric):
    """SacreBLEU corpus BLEU."""

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
            reference_urls=["https://aclanthology.org/W18-6319", "https://aclanthology.org/P02-1040"],
        )

    def _compute(
        self,
        predictions: list[str],
        references: list[list[str]] | list[str],
        smooth_method: str = "exp",
        smooth_value: float | None = None,
        tokenize: str | None = None,
        lowercase: bool = False,
        force: bool = False,
        use_effective_order: bool = False,
    ) -> dict:
        bleu = BLEU(
            lowercase=lowercase,
            force=force,
            tokenize=tokenize,
            smooth_method=smooth_method,
            smooth_value=smooth_value,
            effective_order=use_effective_order,
        )
        result = bleu.corpus_score(list(predictions), reference_streams(predictions, references))
        return {
            "score": result.score,
            "counts": result.counts,
            "totals": result.totals,
            "precisions": result.precisions,
            "bp": result.bp,
            "sys_len": result.sys_len,
            "ref_len": result.ref_len,
            "signature": str(bleu.get_signature()),
        }


def reference_streams(predictions: list[str], references: list[list[str]] | list[str]) -> list[list[str]]:
    """Turn references per prediction into SacreBLEU's reference streams (the i-th reference of every prediction).

    Raises ValueError for no predictions, a different number of references than predictions, or predictions with
    different numbers of references.
    """
    if len(predictions) == 0:
        raise ValueError("sacrebleu needs at least one prediction.")
    if len(references) != len(predictions):
        raise ValueError(
            f"Got {len(predictions)} predictions but {len(references)} references: give one per prediction."
        )
    references = [[refs] if isinstance(refs, str) else list(refs) for refs in references]
    num_refs = len(references[0])
    if num_refs == 0 or any(len(refs) != num_refs for refs in references):
        raise ValueError("sacrebleu needs the same number (at least one) of references for every prediction.")
    return [[refs[i] for refs in references] for i in range(num_refs)]
