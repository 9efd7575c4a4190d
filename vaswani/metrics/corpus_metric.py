"""What the two local metric scripts (`sacrebleu/sacrebleu.py`, `chrf/chrf.py`) share.

`evaluate.load(<folder>)` copies a metric script into its module cache and imports it there, so a script cannot import
a sibling file of this package by a relative import. It can import an installed library, and `vaswani` is one: each
script imports this module as `from vaswani.metrics import corpus_metric` (a module, not the class, because `evaluate`
takes the first `EvaluationModule` subclass it finds in the script's namespace as the metric).
"""

from __future__ import annotations

import datasets
import evaluate

SACREBLEU_HOMEPAGE = "https://github.com/mjpost/sacrebleu"


class SacrebleuCorpusMetric(evaluate.Metric):
    """An `evaluate` metric scored at corpus level by one of SacreBLEU's metric objects (BLEU, CHRF).

    Subclasses set `metric_name`, the three texts `evaluate.MetricInfo` shows (`_CITATION`, `_DESCRIPTION`,
    `_KWARGS_DESCRIPTION` of their script) and `reference_urls`, and define `scorer(**options)` (the SacreBLEU
    object for the options `compute` was given, under the Hub metric's option names) and `result_fields` (the
    attributes of SacreBLEU's result that `compute` returns, beside the signature).
    """

    metric_name: str
    citation: str
    description: str
    kwargs_description: str
    reference_urls: list[str]
    result_fields: tuple[str, ...]

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        # The metric's docstring shows its description and arguments, as `evaluate`'s own metrics do.
        evaluate.utils.file_utils.add_start_docstrings(cls.description, cls.kwargs_description)(cls)

    def _info(self) -> evaluate.MetricInfo:
        return evaluate.MetricInfo(
            description=self.description,
            citation=self.citation,
            inputs_description=self.kwargs_description,
            homepage=SACREBLEU_HOMEPAGE,
            features=[  # several references per prediction, or a plain string: one reference per prediction
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
            codebase_urls=[SACREBLEU_HOMEPAGE],
            reference_urls=self.reference_urls,
        )

    def _compute(self, predictions: list[str], references: list[list[str]] | list[str], **options) -> dict:
        scorer = self.scorer(**options)
        result = scorer.corpus_score(list(predictions), self.reference_streams(predictions, references))
        return {
            **{name: getattr(result, name) for name in self.result_fields},
            "signature": str(scorer.get_signature()),
        }

    def reference_streams(self, predictions: list[str], references: list[list[str]] | list[str]) -> list[list[str]]:
        """Turn references per prediction into SacreBLEU's reference streams (the i-th reference of every prediction).

        Raises ValueError for no predictions, a different number of references than predictions, or predictions with
        different numbers of references.
        """
        if len(predictions) == 0:
            raise ValueError(f"{self.metric_name} needs at least one prediction.")
        if len(references) != len(predictions):
            raise ValueError(
                f"Got {len(predictions)} predictions but {len(references)} references: give one per prediction."
            )
        references = [[refs] if isinstance(refs, str) else list(refs) for refs in references]
        num_refs = len(references[0])
        if num_refs == 0 or any(len(refs) != num_refs for refs in references):
            raise ValueError(
                f"{self.metric_name} needs the same number (at least one) of references for every prediction."
            )
        return [[refs[i] for refs in references] for i in range(num_refs)]
