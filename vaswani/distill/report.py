"""What a distillation achieved: the teacher and the student decode the same test file through the same backend with
the same settings, and `distill_report.json` records their BLEU and chrF against the references, their parameters
and their speed, beside the distilled data's statistics; the log shows it as a short table.

Speed: each model first decodes a few sentences (warm-up), then the whole test file `ROUNDS` times, the two models
alternating (teacher, student, student, teacher: a slow spell of the machine falls on both); a model's time is the
median of its rounds, and sentences/s is the test file's sentences over it. The translations scored are those of the
first round (decoding is deterministic: every round gives the same).
"""

from __future__ import annotations

import statistics
import time

from vaswani.inference.translator import Translator
from vaswani.metrics import corpus_scores

ROUNDS = 2
WARMUP_SENTENCES = 32
REPORT_FORMAT = "vaswani-distill-report"
REPORT_VERSION = 1


def decode_alternately(translators: dict[str, Translator], sources: list[str], decoding: dict,
                       languages: dict[str, str | None] | None = None) -> dict[str, dict]:  # fmt: skip
    """Each translator's translations of `sources` and the seconds of each of its `ROUNDS` (see the module
    docstring). `decoding`: `Translator.translate`'s num_beams, length_penalty and batch_tokens; `languages`: the
    target language of a multilingual translator (its token's code), by name."""
    names, options = list(translators), {}
    for name in names:  # a multilingual translator's target language joins its decoding options
        language = (languages or {}).get(name)
        options[name] = decoding if language is None else {**decoding, "target_languages": language}
    for name in names:  # warm-up: the first batches of an engine pay for its set-up
        translators[name].translate(sources[:WARMUP_SENTENCES], **options[name])
    outputs = {name: {"translations": None, "seconds": []} for name in names}
    for round_index in range(ROUNDS):
        for name in names if round_index % 2 == 0 else reversed(names):
            start = time.perf_counter()
            translations = translators[name].translate(sources, **options[name])
            outputs[name]["seconds"].append(time.perf_counter() - start)
            if outputs[name]["translations"] is None:
                outputs[name]["translations"] = translations
    return outputs


def model_entry(decoded: dict, references: list[str], target_lang: str) -> dict:
    """One model's test scores (BLEU tokenized for `target_lang`) and speed, from what `decode_alternately` gave."""
    seconds = statistics.median(decoded["seconds"])
    return {
        "test": corpus_scores(decoded["translations"], references, target_lang), "seconds": seconds,
        "round_seconds": decoded["seconds"], "sentences_per_second": len(references) / seconds,
    }  # fmt: skip


def comparison(teacher: dict, student: dict) -> dict:
    """The student against the teacher: time and parameter ratios, BLEU and chrF differences."""
    return {
        "time_ratio": student["seconds"] / teacher["seconds"],
        "parameter_ratio": student["parameters"] / teacher["parameters"],
        "bleu_difference": student["test"]["bleu"] - teacher["test"]["bleu"],
        "chrf_difference": student["test"]["chrf"] - teacher["test"]["chrf"],
    }


def report_table(report: dict) -> str:
    """The report as the log shows it: one row per model, the ratios, the distilled data in one line."""
    lines = []
    test = report.get("test")
    if test is not None:
        setting = test["setting"]
        lines.append(
            f"Test file {test['file']} ({test['sentences']:,} sentences), {setting['backend']}"
            f"{' ' + setting['quantization'] if setting.get('quantization') else ''}, beam {setting['num_beams']}, "
            f"length penalty {setting['length_penalty']:g}, max_tokens {setting['max_tokens']}, "
            f"{setting['threads']} thread(s):"
        )
    header = f"  {'':8} {'BLEU':>6} {'chrF':>6} {'parameters':>12} {'sentences/s':>12} {'seconds':>8}  computes in"
    lines.append(header)
    for role in ("teacher", "student"):
        entry = report[role]
        if "test" in entry:  # computes_in: not in a report written before it
            lines.append(f"  {role:8} {entry['test']['bleu']:6.2f} {entry['test']['chrf']:6.2f} "
                         f"{entry['parameters']:12,} {entry['sentences_per_second']:12.1f} {entry['seconds']:8.2f}  "
                         f"{entry.get('computes_in', '')}".rstrip())  # fmt: skip
        else:
            lines.append(f"  {role:8} {'':>6} {'':>6} {entry['parameters']:12,}")
    if "comparison" in report:
        c = report["comparison"]
        lines.append(f"  student / teacher: time {c['time_ratio']:.2f}, parameters {c['parameter_ratio']:.2f}, "
                     f"BLEU {c['bleu_difference']:+.2f}, chrF {c['chrf_difference']:+.2f}")  # fmt: skip
    data = report["distilled_data"]
    against = data["against_references"]
    monolingual = data.get("monolingual_translated", 0)  # 0 also in a report written before --monolingual_file
    lines.append(
        f"  distilled data: {data['pairs_translated']:,} training sources translated (BLEU {against['bleu']:.2f}, "
        f"chrF {against['chrf']:.2f} against their references)"
        + (f" and {monolingual:,} monolingual sentences" if monolingual else "")
        + f", {data['kept']:,} kept, {data['original_pairs_added']:,} original pairs added: "
        f"{data['training_pairs']:,} training pairs"
    )
    return "\n".join(lines)
