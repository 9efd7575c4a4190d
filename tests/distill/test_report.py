"""vaswani/distill/report.py: the two models decode alternately with a warm-up, the ratios and the log's table say
what the report holds (its scores: vaswani.metrics.corpus_scores, tests/metrics). The translators are stand-ins that
record their calls."""

import pytest

from vaswani.distill.report import (
    ROUNDS,
    WARMUP_SENTENCES,
    comparison,
    decode_alternately,
    model_entry,
    report_table,
)

HYPOTHESES = ["the cat sat on the mat", "a dog", "it rains today"]
REFERENCES = ["the cat sat on a mat", "a dog runs", "it is raining today"]


class Recorder:
    """A translator that uppercases its sentences and records (name, how many) per call."""

    def __init__(self, name: str, calls: list):
        self.name, self.calls = name, calls

    def translate(self, sentences, **options):
        self.calls.append((self.name, len(sentences), options))
        return [sentence.upper() for sentence in sentences]


def test_the_models_warm_up_then_decode_alternately():
    calls = []
    sources = [f"sentence {i}" for i in range(WARMUP_SENTENCES + 8)]
    decoding = {"num_beams": 4, "length_penalty": 0.6, "batch_tokens": 64}
    decoded = decode_alternately({"teacher": Recorder("teacher", calls), "student": Recorder("student", calls)},
                                 sources, decoding)  # fmt: skip
    assert [(name, count) for name, count, _ in calls] == [
        ("teacher", WARMUP_SENTENCES), ("student", WARMUP_SENTENCES),
        ("teacher", len(sources)), ("student", len(sources)), ("student", len(sources)), ("teacher", len(sources)),
    ][: 2 + 2 * ROUNDS]  # fmt: skip
    assert all(options == decoding for _, _, options in calls)
    for name in ("teacher", "student"):
        assert decoded[name]["translations"] == [s.upper() for s in sources]
        assert len(decoded[name]["seconds"]) == ROUNDS and all(s > 0 for s in decoded[name]["seconds"])


def test_entries_comparison_and_table():
    teacher = {
        "parameters": 4000,
        **model_entry({"translations": HYPOTHESES, "seconds": [2.0, 4.0]}, REFERENCES, "en"),
    }
    student = {"parameters": 1000, **model_entry({"translations": REFERENCES, "seconds": [1.0, 1.0]}, REFERENCES, "en"),
               "computes_in": "int16"}  # fmt: skip
    assert teacher["seconds"] == 3.0 and teacher["sentences_per_second"] == pytest.approx(1.0)
    assert student["test"]["bleu"] == pytest.approx(100.0)
    compared = comparison(teacher, student)
    assert compared["time_ratio"] == pytest.approx(1 / 3) and compared["parameter_ratio"] == 0.25
    assert compared["bleu_difference"] == pytest.approx(100.0 - teacher["test"]["bleu"])
    report = {
        "teacher": teacher, "student": student, "comparison": compared,
        "test": {"file": "test.jsonl", "sentences": 3, "setting": {"backend": "ctranslate2", "quantization": "int8",
                 "num_beams": 4, "length_penalty": 0.6, "max_tokens": 4096, "threads": 1}},
        "distilled_data": {"pairs_translated": 40216, "kept": 40000, "original_pairs_added": 0, "training_pairs": 40000,
                           "against_references": {"bleu": 61.5, "chrf": 75.25}},
    }  # fmt: skip
    table = report_table(report)
    assert "test.jsonl (3 sentences), ctranslate2 int8, beam 4, length penalty 0.6, max_tokens 4096, 1 thread" in table
    assert "teacher" in table and "      4,000" in table and "student / teacher: time 0.33, parameters 0.25" in table
    header, teacher_row, student_row = table.splitlines()[1:4]
    assert header.endswith("seconds  computes in") and student_row.endswith("1.00  int16")
    assert teacher_row.endswith("3.00")  # an entry without computes_in (a report written before it)
    assert "40,216 training sources translated (BLEU 61.50, chrF 75.25" in table
    del report["test"], report["comparison"], teacher["test"]  # no --test_file: parameters only
    assert "student / teacher" not in report_table(report)
