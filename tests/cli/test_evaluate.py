"""`vaswani evaluate`: its translations are `vaswani translate`'s, its scores are sacrebleu's on them (computed here
directly), the test file is read in every format training reads, the languages come from the options or the model's
run_args.json, and every bad input is an `error:` that writes nothing."""

import json
import re
import shutil

import pytest
import sacrebleu
from test_pipeline_vaswani import PAIRS, one_torch_thread  # noqa: F401  (one_torch_thread is an autouse fixture)
from transformers import AutoTokenizer

from vaswani.cli import main

# The tiny model of test_pipeline_vaswani translates PAIRS both ways; a pair with an empty side is skipped.
TEST_ROWS = [("a dog runs in the park", "")] + PAIRS + [("the cat sat", "die Katze sitzt")]


def write_jsonl(path, rows, source_lang="en", target_lang="de"):
    path.write_text("".join(json.dumps({"translation": {source_lang: s, target_lang: t}}, ensure_ascii=False) + "\n"
                            for s, t in rows), encoding="utf-8")  # fmt: skip
    return path


def lines(path) -> list[str]:
    text = path.read_text(encoding="utf-8")
    assert text.endswith("\n")
    return text.split("\n")[:-1]


def evaluate(model, test_file, tmp_path, *extra, name="results"):
    """Run `vaswani evaluate` writing `name`.json and `name`.txt; returns (status, results, translations)."""
    output, translations = tmp_path / f"{name}.json", tmp_path / f"{name}.txt"
    status = main(["evaluate", "--model", str(model), "--test_file", str(test_file), "--output", str(output),
                   "--translations", str(translations), "--no_progress", *extra])  # fmt: skip
    if status != 0:
        return status, None, None
    return status, json.loads(output.read_text(encoding="utf-8")), lines(translations)


def test_scores_are_sacrebleus_on_what_translate_prints(model_folder, tmp_path, capsys):
    test_file = write_jsonl(tmp_path / "test.jsonl", TEST_ROWS)
    status, results, translations = evaluate(model_folder, test_file, tmp_path, "--source_lang", "en",
                                             "--target_lang", "de", "--num_beams", "3")  # fmt: skip
    assert status == 0
    printed = capsys.readouterr().out
    sources, references = [s for s, t in TEST_ROWS if t], [t for _, t in TEST_ROWS if t]
    (tmp_path / "sources.txt").write_text("".join(s + "\n" for s in sources), encoding="utf-8")
    assert main(["translate", "--model", str(model_folder), "--input", str(tmp_path / "sources.txt"), "--output",
                 str(tmp_path / "translate.txt"), "--num_beams", "3", "--no_progress"]) == 0  # fmt: skip
    assert translations == lines(tmp_path / "translate.txt")
    bleu_metric, chrf_metric = sacrebleu.BLEU(), sacrebleu.CHRF()
    bleu = bleu_metric.corpus_score(translations, [references])
    chrf = chrf_metric.corpus_score(translations, [references])
    assert results["bleu"] == pytest.approx(bleu.score) and results["chrf"] == pytest.approx(chrf.score)
    assert results["bleu"] > 50  # the tiny model learned PAIRS: the scores are of real translations
    assert results["bleu_signature"] == str(bleu_metric.get_signature())
    assert results["chrf_signature"] == str(chrf_metric.get_signature())
    assert results["pairs"] == 5 and results["skipped_pairs"] == 1
    assert results["source_lang"] == "en" and results["target_lang"] == "de"
    assert results["models"] == [str(model_folder.resolve())] and results["test_file"] == [str(test_file.resolve())]
    assert results["backend"] == "torch" and results["decoding"]["num_beams"] == 3
    assert f"BLEU {bleu.score:.2f}  chrF {chrf.score:.2f}" in printed
    assert "5 pairs en-de, 1 with an empty side skipped" in printed and results["bleu_signature"] in printed


def test_every_format_of_the_test_file_gives_the_same_scores(model_folder, tmp_path):
    rows = [pair for pair in TEST_ROWS if pair[1]]
    _, expected, expected_translations = evaluate(model_folder, write_jsonl(tmp_path / "t.jsonl", rows), tmp_path,
                                                  "--source_lang", "en", "--target_lang", "de", name="jsonl")  # fmt: skip
    (tmp_path / "t.tsv").write_text("en\tde\n" + "".join(f"{s}\t{t}\n" for s, t in rows), encoding="utf-8")
    (tmp_path / "t.en").write_text("".join(s + "\n" for s, _ in rows), encoding="utf-8")
    (tmp_path / "t.de").write_text("".join(t + "\n" for _, t in rows), encoding="utf-8")
    for name, test_file in (("tsv", tmp_path / "t.tsv"), ("prefix", tmp_path / "t")):
        status, results, translations = evaluate(model_folder, test_file, tmp_path, "--source_lang", "en",
                                                 "--target_lang", "de", name=name)  # fmt: skip
        assert status == 0 and translations == expected_translations, name
        assert (results["bleu"], results["chrf"], results["pairs"]) == (
            expected["bleu"], expected["chrf"], expected["pairs"],
        ), name  # fmt: skip


def test_max_test_samples_scores_the_first_pairs_and_names_the_split(model_folder, tmp_path, capsys):
    test_file = write_jsonl(tmp_path / "test.jsonl", TEST_ROWS)
    languages = ["--source_lang", "en", "--target_lang", "de"]
    _, whole, all_translations = evaluate(model_folder, test_file, tmp_path, *languages, name="whole")
    status, first, translations = evaluate(model_folder, test_file, tmp_path, *languages, "--max_test_samples", "2",
                                           name="first")  # fmt: skip
    assert status == 0 and translations == all_translations[:2]  # the first pairs with text on both sides
    assert (first["pairs"], first["split"], whole["split"]) == (2, "test[:2]", "test")
    references = [target for _, target in TEST_ROWS if target][:2]
    assert first["bleu"] == pytest.approx(sacrebleu.corpus_bleu(translations, [references]).score)
    assert "test.jsonl test[:2]: 2 pairs en-de" in capsys.readouterr().out
    status, every, _ = evaluate(model_folder, test_file, tmp_path, *languages, "--max_test_samples", "99", name="99")
    assert status == 0 and every["split"] == "test" and every["bleu"] == whole["bleu"]
    # the card names the slice, as training's cards do for its --max_test_samples
    card = tmp_path / "card.md"
    assert main(["card", "--model", str(model_folder), "--evaluation", str(tmp_path / "first.json"), "--output",
                 str(card)]) == 0  # fmt: skip
    assert "split: test[:2]" in card.read_text(encoding="utf-8") and "| test[:2] |" in card.read_text(encoding="utf-8")


def test_the_languages_come_from_the_models_run_args(model_folder, tmp_path, capsys):
    folder = tmp_path / "model"
    shutil.copytree(model_folder, folder)
    (folder / "run_args.json").write_text(json.dumps({"source_lang": "de", "target_lang": "en"}), encoding="utf-8")
    test_file = write_jsonl(tmp_path / "test.jsonl", TEST_ROWS)
    status, results, translations = evaluate(folder, test_file, tmp_path, name="from-run-args")
    assert status == 0 and (results["source_lang"], results["target_lang"]) == ("de", "en")
    # German to English: the model translates the references back into the sources
    assert results["pairs"] == 5 and results["bleu"] > 50
    status, given, _ = evaluate(folder, test_file, tmp_path, "--source_lang", "en", "--target_lang", "de",
                                name="given")  # fmt: skip
    assert status == 0 and (given["source_lang"], given["target_lang"]) == ("en", "de")
    # another pair than the model's is evaluated (a multilingual model translates several), with a warning
    assert (
        f"warning: --source_lang en --target_lang de: the model {folder} was trained on de-en"
        in capsys.readouterr().err
    )
    status, _, _ = evaluate(folder, test_file, tmp_path, "--source_lang", "de", "--target_lang", "en", name="same")
    assert status == 0 and "warning" not in capsys.readouterr().err


def test_a_ctranslate2_export_is_evaluated_as_translate_decodes_it(model_folder, tmp_path):
    pytest.importorskip("ctranslate2")
    export = tmp_path / "ct2"
    assert main(["export", "--model", str(model_folder), "--output_dir", str(export), "--quantization",
                 "float32"]) == 0  # fmt: skip
    test_file = write_jsonl(tmp_path / "test.jsonl", TEST_ROWS)
    status, results, translations = evaluate(export, test_file, tmp_path, "--source_lang", "en", "--target_lang",
                                             "de")  # fmt: skip
    assert status == 0 and results["backend"] == "ctranslate2"
    (tmp_path / "sources.txt").write_text("".join(s + "\n" for s, t in TEST_ROWS if t), encoding="utf-8")
    assert main(["translate", "--model", str(export), "--input", str(tmp_path / "sources.txt"), "--output",
                 str(tmp_path / "translate.txt"), "--no_progress"]) == 0  # fmt: skip
    assert translations == lines(tmp_path / "translate.txt")
    references = [t for _, t in TEST_ROWS if t]
    assert results["bleu"] == pytest.approx(sacrebleu.corpus_bleu(translations, [references]).score)


def test_an_ensemble_is_evaluated_as_translate_decodes_it(model_folder, tmp_path):
    test_file = write_jsonl(tmp_path / "test.jsonl", TEST_ROWS)
    status, results, translations = evaluate(model_folder, test_file, tmp_path, "--model", str(model_folder),
                                             "--source_lang", "en", "--target_lang", "de", "--num_beams", "2")  # fmt: skip
    assert status == 0 and results["models"] == [str(model_folder.resolve())] * 2
    (tmp_path / "sources.txt").write_text("".join(s + "\n" for s, t in TEST_ROWS if t), encoding="utf-8")
    assert main(["translate", "--model", str(model_folder), "--model", str(model_folder), "--input",
                 str(tmp_path / "sources.txt"), "--output", str(tmp_path / "translate.txt"), "--num_beams", "2",
                 "--no_progress"]) == 0  # fmt: skip
    assert translations == lines(tmp_path / "translate.txt")


def test_a_chinese_target_is_scored_with_sacrebleus_zh_tokenizer(model_folder, tmp_path):
    rows = [(source, "我们在家读书。") for source, _ in PAIRS]
    test_file = write_jsonl(tmp_path / "test.jsonl", rows, "en", "zh")
    status, results, translations = evaluate(model_folder, test_file, tmp_path, "--source_lang", "en",
                                             "--target_lang", "zh")  # fmt: skip
    assert status == 0 and "|tok:zh|" in results["bleu_signature"]
    references = [target for _, target in rows]
    assert results["bleu"] == pytest.approx(
        sacrebleu.BLEU(trg_lang="zh").corpus_score(translations, [references]).score
    )


def test_truncated_sources_are_named_by_their_line_in_the_test_file(model_folder, tmp_path, capsys):
    test_file = write_jsonl(tmp_path / "test.jsonl", TEST_ROWS)  # line 1 is skipped: line 5 is the fourth source
    status, results, _ = evaluate(model_folder, test_file, tmp_path, "--source_lang", "en", "--target_lang", "de",
                                  "--max_source_length", "14")  # fmt: skip
    assert status == 0 and results["decoding"]["max_source_length"] == 14
    err = capsys.readouterr().err
    tokenizer = AutoTokenizer.from_pretrained(model_folder)
    long_lines = [line for line, (source, target) in enumerate(TEST_ROWS, start=1)
                  if target and len(tokenizer(source)["input_ids"]) > 14]  # fmt: skip
    assert long_lines == [5]  # "we read a book at home": 16 tokens, the others 6 to 14
    assert f"warning: the sources of --test_file on line(s) {', '.join(map(str, long_lines))} are longer" in err


BAD_INPUTS = {
    "no-languages": ([], "the language pair of .* cannot be told: it has no run_args.json; give the languages of "
                     "--test_file: --source_lang LANG --target_lang LANG"),
    "one-language": (["--source_lang", "en"], "--source_lang needs --target_lang beside it"),
    "same-language": (["--source_lang", "en", "--target_lang", "en"], "are both 'en'"),
    "missing-test-file": (["--test_file", "{tmp}/missing.jsonl", "--source_lang", "en", "--target_lang", "de"],
                          "--test_file: file not found: .*missing.jsonl"),
    "missing-side": (["--test_file", "{tmp}/test", "--source_lang", "en", "--target_lang", "fr"],
                     r"--test_file .*test: .*test.fr not found \(.*test.en exists\)"),
    "output-is-input": (["--source_lang", "en", "--target_lang", "de", "--output", "{tmp}/test.jsonl"],
                        "--output .*test.jsonl is the input file"),
    "translations-is-input": (["--source_lang", "en", "--target_lang", "de", "--translations", "{tmp}/test.jsonl"],
                              "--translations .*test.jsonl is the input file"),
    "output-in-model": (["--source_lang", "en", "--target_lang", "de", "--output", "{model}/config.json"],
                        "--output .*config.json is a file of the model folder"),
    "translations-in-model": (["--source_lang", "en", "--target_lang", "de", "--translations", "{model}/config.json"],
                              "--translations .*config.json is a file of the model folder"),
    "same-outputs": (["--source_lang", "en", "--target_lang", "de", "--output", "{tmp}/o", "--translations",
                      "{tmp}/o"], "--output and --translations are both"),
    "missing-model": (["--model", "{tmp}/nowhere"], "--model .*nowhere: no such folder"),
    "no-samples": (["--max_test_samples", "0"], "--max_test_samples 0 is not allowed; use a positive integer"),
    "samples-not-a-number": (["--max_test_samples", "two"], "argument --max_test_samples: invalid int value: 'two'"),
    "bad-line": (["--test_file", "{tmp}/bad.jsonl", "--source_lang", "en", "--target_lang", "de"], "bad.jsonl.*line 2"),
}  # fmt: skip


@pytest.mark.parametrize(("extra", "message"), BAD_INPUTS.values(), ids=BAD_INPUTS.keys())
def test_bad_input_is_a_clear_error_that_writes_nothing(model_folder, tmp_path, capsys, extra, message):
    write_jsonl(tmp_path / "test.jsonl", TEST_ROWS)
    (tmp_path / "test.en").write_text("the cat\n", encoding="utf-8")
    (tmp_path / "bad.jsonl").write_text('{"translation": {"en": "a", "de": "b"}}\n{"translation": 3}\n', "utf-8")
    (tmp_path / "o").write_text("kept\n", encoding="utf-8")
    before = {path: path.read_bytes() for path in [*tmp_path.iterdir(), *model_folder.iterdir()] if path.is_file()}
    extra = [argument.format(tmp=tmp_path, model=model_folder) for argument in extra]
    model = [] if "--model" in extra else ["--model", str(model_folder)]  # the missing model alone
    test_file = [] if "--test_file" in extra else ["--test_file", str(tmp_path / "test.jsonl")]
    assert main(["evaluate", *model, *test_file, "--no_progress", *extra]) == 2
    err = capsys.readouterr().err
    # argparse's own errors (a value of the wrong kind) come after the usage lines
    assert (err.startswith("error: ") or "vaswani evaluate: error: argument" in err) and "Traceback" not in err, err
    assert re.search(message, err), err
    after = {path: path.read_bytes() for path in [*tmp_path.iterdir(), *model_folder.iterdir()] if path.is_file()}
    assert after == before


# ---------------------------------------------------------------------------------------------------------------
# vaswani card --evaluation: the scores of vaswani evaluate in the model card
# ---------------------------------------------------------------------------------------------------------------
@pytest.fixture
def evaluated(model_folder, tmp_path):
    """A copy of the tiny model (trained en-de, says its run_args.json) and `vaswani evaluate`'s JSON of it."""
    folder = tmp_path / "averaged"
    shutil.copytree(model_folder, folder)
    (folder / "run_args.json").write_text(json.dumps({"source_lang": "en", "target_lang": "de"}), encoding="utf-8")
    test_file = write_jsonl(tmp_path / "newstest.jsonl", TEST_ROWS)
    status, results, _ = evaluate(folder, test_file, tmp_path, "--num_beams", "3", name="evaluation")
    assert status == 0
    return folder, tmp_path / "evaluation.json", results


def test_the_card_shows_the_scores_vaswani_evaluate_recorded(evaluated, capsys):
    from huggingface_hub import ModelCard

    folder, evaluation, results = evaluated
    assert main(["card", "--model", str(folder), "--evaluation", str(evaluation)]) == 0
    card = ModelCard.load(folder / "README.md")  # huggingface_hub's own reading of the card
    scores = {result.metric_type: result for result in card.data.eval_results}
    assert scores["bleu"].metric_value == round(results["bleu"], 2) and scores["chrf"].metric_value == round(
        results["chrf"], 2
    )
    assert scores["bleu"].dataset_name == "newstest.jsonl" and scores["bleu"].dataset_split == "test"
    assert scores["bleu"].task_name == "Translation en-de"
    assert scores["bleu"].metric_args == {"signature": results["bleu_signature"]}
    text = card.text
    assert f"| test | {results['bleu']:.2f} | {results['chrf']:.2f} | - | - |" in text
    assert "Beam search with 3 beams" in text  # the evaluation's decoding, not the run's
    assert "The test scores are `vaswani evaluate`'s on newstest.jsonl (5 pairs), decoded by torch (float32)." in text
    # without --evaluation the folder has no scores to show
    assert main(["card", "--model", str(folder)]) == 0
    assert ModelCard.load(folder / "README.md").data.eval_results is None


EVALUATION_MISTAKES = {
    "missing": (lambda folder, path, results: path.unlink(), "--evaluation .*: no such file; write one with vaswani "
                "evaluate --model"),
    "damaged": (lambda folder, path, results: path.write_text("{", "utf-8"),
                "is damaged .*give the file that vaswani evaluate --model .* --output FILE wrote"),
    "a-folder": (lambda folder, path, results: (path.unlink(), path.mkdir()), "is a folder: give the file that"),
    "other-format": (lambda folder, path, results: path.write_text(json.dumps({**results, "format": "x"}), "utf-8"),
                     "is not the output of vaswani evaluate .*'x'"),
    "lacks-a-score": (lambda folder, path, results: path.write_text(json.dumps({**results, "bleu": "high"}), "utf-8"),
                      "lacks or has damaged fields \\(bleu\\)"),
    "another-model": (lambda folder, path, results: path.write_text(
        json.dumps({**results, "models": [str(folder) + "-ct2"]}), "utf-8"), "scored .*averaged-ct2, not .*averaged"),
    "an-ensemble": (lambda folder, path, results: path.write_text(
        json.dumps({**results, "models": [str(folder)] * 2}), "utf-8"), "scored .*averaged \\+ .*averaged, not"),
}  # fmt: skip


@pytest.mark.parametrize(("spoil", "message"), EVALUATION_MISTAKES.values(), ids=EVALUATION_MISTAKES.keys())
def test_a_wrong_evaluation_is_a_clear_error_that_leaves_the_card(evaluated, capsys, spoil, message):
    folder, evaluation, results = evaluated
    (folder / "README.md").write_text("the user's card\n", encoding="utf-8")
    spoil(folder, evaluation, results)
    capsys.readouterr()
    assert main(["card", "--model", str(folder), "--evaluation", str(evaluation)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "Traceback" not in err and re.search(message, err), err
    assert (folder / "README.md").read_text(encoding="utf-8") == "the user's card\n"


def test_an_export_gets_a_card_of_its_own_with_its_scores(evaluated, tmp_path):
    pytest.importorskip("ctranslate2")
    from huggingface_hub import ModelCard

    folder, _, _ = evaluated
    export = tmp_path / "averaged-ct2"
    assert main(["export", "--model", str(folder), "--output_dir", str(export), "--quantization", "int8"]) == 0
    status, results, _ = evaluate(export, tmp_path / "newstest.jsonl", tmp_path, name="export-evaluation")
    assert status == 0 and results["backend"] == "ctranslate2"
    assert main(["card", "--model", str(export), "--evaluation", str(tmp_path / "export-evaluation.json")]) == 0
    card = ModelCard.load(export / "README.md")
    assert card.data.library_name == "ctranslate2" and "int8" in card.data.tags
    scores = {result.metric_type: result.metric_value for result in card.data.eval_results}
    assert scores == {"bleu": round(results["bleu"], 2), "chrf": round(results["chrf"], 2)}
    assert "decoded by ctranslate2 (" in card.text and "export of a translation model (English → German)" in card.text
    assert "vaswani serve --model averaged-ct2 " in card.text  # serve reads the pair from its run_args.json
    # the PyTorch folder's evaluation is not the export's
    assert main(["card", "--model", str(export), "--evaluation", str(tmp_path / "evaluation.json")]) == 2
    # without run_args.json (a converted model's export) the card names the pair on serve's command line
    (export / "run_args.json").unlink()
    assert main(["card", "--model", str(export), "--evaluation", str(tmp_path / "export-evaluation.json")]) == 0
    assert "vaswani serve --model en-de=averaged-ct2 " in (export / "README.md").read_text(encoding="utf-8")
