"""Tests of the offline evaluate metrics in vaswani/metrics: they load by path without network and agree with
sacrebleu's own corpus_bleu / corpus_chrf."""

from __future__ import annotations

import importlib.util
import json
import os
import socket
import subprocess
import sys

import evaluate
import pytest
import sacrebleu

import vaswani.metrics
from vaswani.metrics import AVAILABLE_METRICS, METRICS_DIR, bleu_tokenizer, corpus_scores, load_metric, metric_path

PREDICTIONS = [
    "The train leaves at a quarter past seven.",
    "She was born on the third of March nineteen eighty-seven.",
    "I bought twelve kilogram of apples yesterday.",
    "The museum is open from nine to five o'clock.",
    "We are meeting on Friday at half past seven.",
]
REFERENCES = [
    "The train leaves at a quarter past seven.",
    "She was born on the 3rd of March 1987.",
    "I bought twelve kilograms of apples yesterday.",
    "The museum is open from nine o'clock to five o'clock.",
    "We meet on Friday at half past seven in the evening.",
]
SECOND_REFERENCES = [
    "The train departs at 7:15.",
    "She was born on 3 March 1987.",
    "Yesterday I bought twelve kilos of apples.",
    "The museum opens at nine and closes at five.",
    "We will meet on Friday at seven thirty.",
]


@pytest.fixture(scope="module")
def offline():
    """HF_HUB_OFFLINE=1 (and evaluate's own switch) in this process, and any network connection is an error."""

    def no_network(*args, **kwargs):
        raise OSError("network access attempted in an offline test")

    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("HF_HUB_OFFLINE", "1")
        patch.setenv("HF_EVALUATE_OFFLINE", "1")
        patch.setattr(evaluate.config, "HF_EVALUATE_OFFLINE", True)
        patch.setattr(socket.socket, "connect", no_network)
        yield


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory):
    return str(tmp_path_factory.mktemp("metrics_cache"))


@pytest.fixture(scope="module")
def bleu(offline, cache_dir) -> evaluate.EvaluationModule:
    return evaluate.load(str(METRICS_DIR / "sacrebleu"), cache_dir=cache_dir, keep_in_memory=True)


@pytest.fixture(scope="module")
def chrf(offline, cache_dir) -> evaluate.EvaluationModule:
    return load_metric("chrf", cache_dir=cache_dir)


def test_metric_folders_hold_a_script_of_their_name():
    for name in AVAILABLE_METRICS:
        assert metric_path(name).is_absolute()
        assert (metric_path(name) / f"{name}.py").is_file()


def test_unknown_metric_name_raises():
    with pytest.raises(ValueError, match="Unknown metric 'bleu'"):
        load_metric("bleu")


def test_load_metric_loads_both(offline, cache_dir):
    assert load_metric("sacrebleu", cache_dir=cache_dir).name == "sacrebleu"
    assert load_metric("chrf", cache_dir=cache_dir).name == "chrf"


def test_bleu_equals_sacrebleu_corpus_bleu(bleu):
    result = bleu.compute(predictions=PREDICTIONS, references=[[ref] for ref in REFERENCES])
    expected = sacrebleu.corpus_bleu(PREDICTIONS, [REFERENCES])
    assert 0 < result["score"] < 100
    assert result["score"] == pytest.approx(expected.score)
    assert result["counts"] == expected.counts
    assert result["totals"] == expected.totals
    assert result["precisions"] == pytest.approx(expected.precisions)
    assert result["bp"] == pytest.approx(expected.bp)
    assert (result["sys_len"], result["ref_len"]) == (expected.sys_len, expected.ref_len)
    assert result["signature"] == f"nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:{sacrebleu.__version__}"


def test_bleu_with_two_references_and_options(bleu):
    references = [[first, second] for first, second in zip(REFERENCES, SECOND_REFERENCES, strict=True)]
    result = bleu.compute(predictions=PREDICTIONS, references=references, lowercase=True, tokenize="intl")
    expected = sacrebleu.corpus_bleu(PREDICTIONS, [REFERENCES, SECOND_REFERENCES], lowercase=True, tokenize="intl")
    assert result["score"] == pytest.approx(expected.score)
    assert result["signature"].startswith("nrefs:2|case:lc|eff:no|tok:intl|smooth:exp|")

    result = bleu.compute(predictions=PREDICTIONS, references=references, smooth_method="floor", smooth_value=0.2)
    expected = sacrebleu.corpus_bleu(
        PREDICTIONS, [REFERENCES, SECOND_REFERENCES], smooth_method="floor", smooth_value=0.2
    )
    assert result["score"] == pytest.approx(expected.score)


def test_chrf_equals_sacrebleu_corpus_chrf(chrf):
    result = chrf.compute(predictions=PREDICTIONS, references=[[ref] for ref in REFERENCES])
    expected = sacrebleu.corpus_chrf(PREDICTIONS, [REFERENCES])
    assert 0 < result["score"] < 100
    assert result["score"] == pytest.approx(expected.score)
    assert (result["char_order"], result["word_order"], result["beta"]) == (6, 0, 2)
    assert result["signature"] == f"nrefs:1|case:mixed|eff:yes|nc:6|nw:0|space:no|version:{sacrebleu.__version__}"


def test_chrf_plus_plus_and_options(chrf):
    shouted = [p.upper() for p in PREDICTIONS]
    result = chrf.compute(predictions=shouted, references=REFERENCES, word_order=2, beta=1, lowercase=True)
    lowered = [p.lower() for p in PREDICTIONS], [[r.lower() for r in REFERENCES]]
    assert result["score"] == pytest.approx(sacrebleu.corpus_chrf(*lowered, word_order=2, beta=1).score)
    assert result["score"] > chrf.compute(predictions=shouted, references=REFERENCES, word_order=2, beta=1)["score"]
    assert (result["word_order"], result["beta"]) == (2, 1)
    assert "nw:2" in result["signature"] and "case:lc" in result["signature"]


def test_perfect_match_scores_100(bleu, chrf):
    assert bleu.compute(predictions=REFERENCES, references=REFERENCES)["score"] == pytest.approx(100)
    assert chrf.compute(predictions=REFERENCES, references=REFERENCES)["score"] == pytest.approx(100)


def test_references_as_plain_strings(bleu, chrf):
    nested = [[ref] for ref in REFERENCES]
    for metric in (bleu, chrf):
        flat_score = metric.compute(predictions=PREDICTIONS, references=REFERENCES)["score"]
        assert flat_score == pytest.approx(metric.compute(predictions=PREDICTIONS, references=nested)["score"])


@pytest.mark.parametrize("name", AVAILABLE_METRICS)
def test_mismatched_lengths_raise(name, offline, cache_dir):
    with pytest.raises(ValueError, match="Mismatch in the number of predictions"):
        load_metric(name, cache_dir=cache_dir).compute(predictions=PREDICTIONS, references=REFERENCES[:-1])
    ragged = [[REFERENCES[0], SECOND_REFERENCES[0]], [REFERENCES[1]]]
    with pytest.raises(ValueError, match="same number"):
        load_metric(name, cache_dir=cache_dir).compute(predictions=PREDICTIONS[:2], references=ragged)


@pytest.mark.slow
def test_loads_offline_in_a_fresh_process_with_an_empty_cache(tmp_path):
    code = (
        "import json, evaluate; from vaswani.metrics import load_metric, METRICS_DIR; "
        "p, r = ['the cat sat on the mat .'], [['the cat sat on the mat .']]; "
        "b = evaluate.load(str(METRICS_DIR / 'sacrebleu')).compute(predictions=p, references=r); "
        "c = load_metric('chrf').compute(predictions=p, references=r); "
        "print(json.dumps([b['score'], c['score']]))"
    )
    env = {**os.environ, "HF_HOME": str(tmp_path / "hf_home"), "HF_HUB_OFFLINE": "1", "HF_EVALUATE_OFFLINE": "1"}
    env.pop("HF_MODULES_CACHE", None)
    process = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert process.returncode == 0, process.stderr
    assert json.loads(process.stdout.strip().splitlines()[-1]) == pytest.approx([100, 100])
    assert list((tmp_path / "hf_home" / "modules").rglob("sacrebleu.py"))  # evaluate loaded our script


def test_corpus_scores_are_sacrebleus_with_their_signatures():
    scores = corpus_scores(PREDICTIONS, REFERENCES)
    assert 0 < scores["bleu"] < 100 and 0 < scores["chrf"] < 100
    assert scores["bleu"] == pytest.approx(sacrebleu.corpus_bleu(PREDICTIONS, [REFERENCES]).score)
    assert scores["chrf"] == pytest.approx(sacrebleu.corpus_chrf(PREDICTIONS, [REFERENCES]).score)
    assert scores["bleu_signature"].startswith("nrefs:1|") and scores["chrf_signature"].startswith("nrefs:1|")


CHINESE = (["我们在家读书。", "今天天气很好"], ["我们在家里读书。", "今天的天气很好"])


@pytest.mark.parametrize("code", ["zh", "zh-CN", "zh_Hant", "ZH"])
def test_a_chinese_target_is_scored_as_sacrebleu_scores_minus_l_xx_zh(code):
    hypotheses, references = CHINESE
    scores = corpus_scores(hypotheses, references, code)
    expected = sacrebleu.BLEU(trg_lang="zh").corpus_score(hypotheses, [references])
    assert scores["bleu"] == pytest.approx(expected.score) and scores["bleu"] > 20
    assert "|tok:zh|" in scores["bleu_signature"]
    assert corpus_scores(hypotheses, references, "de")["bleu"] == 0.0  # 13a leaves each sentence one word


@pytest.mark.parametrize("code", [None, "", "de", "en-US", "zhx", "th"])
def test_other_targets_are_scored_with_13a(code):
    assert bleu_tokenizer(code) == "13a"
    scores = corpus_scores(PREDICTIONS, REFERENCES, code)
    assert scores == corpus_scores(PREDICTIONS, REFERENCES) and "|tok:13a|" in scores["bleu_signature"]


@pytest.mark.parametrize(("code", "tokenizer", "extra"), [("ja", "ja-mecab", "ja"), ("ko-KR", "ko-mecab", "ko")])
def test_japanese_and_korean_use_mecab_or_13a_with_one_warning_naming_the_extra(code, tokenizer, extra, monkeypatch,
                                                                                caplog):  # fmt: skip
    import sacrebleu.metrics

    vaswani.metrics._tokenizer_available.cache_clear()
    monkeypatch.setattr(vaswani.metrics, "_tokenizer_available", vaswani.metrics._tokenizer_available)
    try:
        available = importlib.util.find_spec("MeCab" if extra == "ja" else "mecab") is not None
        if available:  # the real tokenizer, as sacrebleu picks it for the language
            assert bleu_tokenizer(code) == tokenizer
        real = sacrebleu.metrics.BLEU

        class WithoutMeCab(real):
            def __init__(self, *args, tokenize=None, **kwargs):
                if tokenize == tokenizer:
                    raise RuntimeError("Japanese tokenization requires extra dependencies, but you do not have them")
                super().__init__(*args, tokenize=tokenize, **kwargs)

        vaswani.metrics._tokenizer_available.cache_clear()
        monkeypatch.setattr(sacrebleu.metrics, "BLEU", WithoutMeCab)
        with caplog.at_level("WARNING", logger="vaswani.metrics"):
            assert bleu_tokenizer(code) == "13a" and bleu_tokenizer(code) == "13a"
            scores = corpus_scores(PREDICTIONS, REFERENCES, code)
        assert "|tok:13a|" in scores["bleu_signature"]
        warnings = [r.getMessage() for r in caplog.records if r.name == "vaswani.metrics"]
        assert len(warnings) == 1 and f"pip install -c constraints.txt 'sacrebleu[{extra}]'" in warnings[0]
        assert f"sacrebleu's {tokenizer} tokenizer, which is not installed" in warnings[0]
    finally:
        vaswani.metrics._tokenizer_available.cache_clear()
