"""A multilingual model: one that translates into several languages, told which by a token before the source
(`>>fr<<`: multilingual OPUS-MT models, Johnson et al. 2017). The model here is test_marian.py's tiny OPUS-MT-like
MarianMTModel with three such tokens in its vocabulary, converted; the reference is transformers' MarianMTModel and
MarianTokenizer given the source with the token written before it, as OPUS-MT's users write it. `--target_lang` of
translate, score and evaluate, and a served pair's target, must give exactly that, sentence by sentence; a language
the model has no token for is an `error:` naming those it has."""

import json
import shutil
import sys
from pathlib import Path

import pytest
import torch
from test_marian import (
    DATA,
    MAX_SOURCE_TOKENS,
    marian_model,
    marian_tokenizer,
    read_pairs,
    save_marian,
    sentences,
    short_pairs,
    write_marian_tokenizer_files,
)

from vaswani.cli import main
from vaswani.errors import TranslateError, UsageError

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "serve"))  # the server test's helpers
from test_app import post_json, running  # noqa: E402

pytestmark = [
    pytest.mark.skipif(not DATA.is_dir(), reason=f"needs the shared data set {DATA}"),
    pytest.mark.filterwarnings("ignore:Recommended. pip install sacremoses"),
]
LANGUAGES = ("es", "fr", "it")


@pytest.fixture(scope="module")
def multilingual(tmp_path_factory):
    """(MarianMTModel, its tokenizer, the original folder, the converted folder): vocab.json has >>es<<, >>fr<< and
    >>it<< after </s> and <unk>, where multilingual OPUS-MT models have their language tokens."""
    root = tmp_path_factory.mktemp("multilingual")
    (root / "tokenizer").mkdir()
    tokenizer_dir = write_marian_tokenizer_files(root / "tokenizer")
    vocab = json.loads((tokenizer_dir / "vocab.json").read_text(encoding="utf-8"))
    tokens = ["</s>", "<unk>", *(f">>{code}<<" for code in LANGUAGES), *list(vocab)[2:]]
    (tokenizer_dir / "vocab.json").write_text(json.dumps({t: i for i, t in enumerate(tokens)}), encoding="utf-8")
    tokenizer = marian_tokenizer(tokenizer_dir)
    assert sorted(tokenizer.supported_language_codes) == [f">>{code}<<" for code in LANGUAGES]
    marian = marian_model(len(tokenizer), seed=11)
    source = save_marian(root / "opus-mt-en-roa", marian, tokenizer_dir)
    assert main(["convert", "--from", "marian", "--model", str(source), "--output_dir", str(root / "converted")]) == 0
    return marian, tokenizer, source, root / "converted"


def marian_translation(marian, tokenizer, text: str, language: str) -> str:
    """What OPUS-MT's users get: the language's token written before the sentence, one sentence at a time."""
    with torch.no_grad():
        ids = marian.generate(**tokenizer([f">>{language}<< {text}"], return_tensors="pt"), num_beams=4,
                              length_penalty=0.6)  # fmt: skip
    return tokenizer.decode(ids[0], skip_special_tokens=True)


def two_sentences(tokenizer) -> tuple[str, str]:
    """Two short sentences of the test split that `split_text` cuts apart when they are one line."""
    from vaswani.inference.text import split_text

    ends = [en for en, _ in read_pairs("test", 3000) if en.endswith(".") and en[0].isupper() and len(en.split()) < 10
            and len(tokenizer(en)["input_ids"]) <= MAX_SOURCE_TOKENS]  # fmt: skip
    first, second = ends[1:3]
    assert split_text(f"{first} {second}", "en").sentences == [first, second]
    return first, second


def translate(model: Path, lines: list[str], tmp_path: Path, *options: str) -> list[str]:
    (tmp_path / "input.txt").write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    output = tmp_path / f"output{len(list(tmp_path.iterdir()))}.txt"
    argv = ["translate", "--model", str(model), "--input", str(tmp_path / "input.txt"), "--output", str(output)]
    assert main([*argv, "--no_progress", *options]) == 0
    return output.read_text(encoding="utf-8").splitlines()


def test_the_model_lists_the_languages_of_its_tokens_and_a_model_of_one_language_none(multilingual, model_folder):
    from vaswani.inference.translator import Translator

    _, tokenizer, _, converted = multilingual
    translator = Translator(converted, device="cpu")
    assert translator.target_languages == {code: tokenizer.convert_tokens_to_ids(f">>{code}<<") for code in LANGUAGES}
    assert Translator(model_folder, device="cpu").target_languages == {}
    with pytest.raises(TranslateError, match=r"target language 'de': the model translates into es, fr, it"):
        translator.translate(["Open the file."], target_languages=["de"])
    with pytest.raises(TranslateError, match="2 target languages for 1 sentences"):
        translator.translate(["Open the file."], target_languages=["es", "fr"])


def test_translate_target_lang_gives_marians_translation_of_the_source_after_the_token(multilingual, tmp_path):
    marian, tokenizer, _, converted = multilingual
    lines = sentences(10, tokenizer)
    printed = {code: translate(converted, lines, tmp_path, "--target_lang", code) for code in ("es", "fr")}
    for code, translations in printed.items():
        assert translations == [marian_translation(marian, tokenizer, line, code) for line in lines]
    assert sum(es != fr for es, fr in zip(printed["es"], printed["fr"], strict=True)) > 5  # the token matters
    # the token by id equals the token written in the text, the way the model was used before --target_lang
    assert translate(converted, [f">>fr<< {line}" for line in lines], tmp_path) == printed["fr"]


def test_every_sentence_of_a_split_line_gets_the_token(multilingual, tmp_path):
    marian, tokenizer, _, converted = multilingual
    first, second = two_sentences(tokenizer)
    (line,) = translate(converted, [f"{first} {second}"], tmp_path, "--target_lang", "it", "--split_sentences")
    expected = [marian_translation(marian, tokenizer, sentence, "it") for sentence in (first, second)]
    assert line == " ".join(expected)


def test_alignments_count_the_words_of_the_sentence_not_the_token(multilingual, tmp_path):
    _, tokenizer, _, converted = multilingual
    lines = sentences(12, tokenizer)
    records = [json.loads(line) for line in translate(converted, lines, tmp_path, "--target_lang", "es",
                                                      "--alignment", "--output_format", "jsonl")]  # fmt: skip
    last_word_aligned = 0
    for line, record in zip(lines, records, strict=True):
        sources = [int(pair.split("-")[0]) for pair in record["hypotheses"][0]["alignment"].split()]
        assert sources and min(sources) >= 0 and max(sources) < len(line.split()), line
        last_word_aligned += max(sources) == len(line.split()) - 1
    assert last_word_aligned > 0


def test_the_ctranslate2_export_takes_the_token_as_pytorch_does(multilingual, tmp_path):
    pytest.importorskip("ctranslate2")
    _, tokenizer, _, converted = multilingual
    export = tmp_path / "ct2"
    assert main(["export", "--model", str(converted), "--output_dir", str(export), "--format", "ctranslate2"]) == 0
    lines = sentences(8, tokenizer)
    by_flag = translate(export, lines, tmp_path, "--target_lang", "fr", "--num_beams", "1")
    assert by_flag == translate(export, [f">>fr<< {line}" for line in lines], tmp_path, "--num_beams", "1")
    assert by_flag != translate(export, lines, tmp_path, "--target_lang", "es", "--num_beams", "1")


def test_score_target_lang_gives_marians_log_probabilities_with_the_token(multilingual, tmp_path):
    marian, tokenizer, _, converted = multilingual
    pairs = short_pairs(tokenizer, 6)
    (tmp_path / "source.txt").write_text("".join(en + "\n" for en, _ in pairs), encoding="utf-8")
    (tmp_path / "target.txt").write_text("".join(es + "\n" for _, es in pairs), encoding="utf-8")
    assert main(["score", "--model", str(converted), "--source", str(tmp_path / "source.txt"), "--target",
                 str(tmp_path / "target.txt"), "--output", str(tmp_path / "scores.jsonl"), "--output_format", "jsonl",
                 "--target_lang", "es", "--no_progress"]) == 0  # fmt: skip
    records = [json.loads(line) for line in (tmp_path / "scores.jsonl").read_text(encoding="utf-8").splitlines()]
    for (en, es), record in zip(pairs, records, strict=True):
        batch = tokenizer([f">>es<< {en}"], text_target=[es], return_tensors="pt")
        with torch.no_grad():
            expected = torch.log_softmax(marian(**batch).logits[0], -1).gather(1, batch["labels"][0][:, None])
        torch.testing.assert_close(torch.tensor(record["token_log_probs"]), expected.squeeze(1), atol=1e-4, rtol=1e-4)
    # the same pairs in one --pairs_file: its target side's language chooses the token, as --target_lang does above
    pairs_file = tmp_path / "pairs.jsonl"
    pairs_file.write_text(
        "".join(json.dumps({"translation": {"en": en, "es": es}}) + "\n" for en, es in pairs), "utf-8"
    )
    assert main(["score", "--model", str(converted), "--pairs_file", str(pairs_file), "--source_lang", "en",
                 "--target_lang", "es", "--output", str(tmp_path / "pairs-scores.jsonl"), "--output_format", "jsonl",
                 "--no_progress"]) == 0  # fmt: skip
    by_flag, by_file = (
        (tmp_path / name).read_text(encoding="utf-8") for name in ("scores.jsonl", "pairs-scores.jsonl")
    )
    assert by_file == by_flag


def test_evaluate_translates_into_the_test_files_target_language(multilingual, tmp_path):
    _, tokenizer, _, converted = multilingual
    pairs = short_pairs(tokenizer, 6)
    test = tmp_path / "test.jsonl"
    test.write_text("".join(json.dumps({"translation": {"en": en, "fr": es}}) + "\n" for en, es in pairs), "utf-8")
    assert main(["evaluate", "--model", str(converted), "--test_file", str(test), "--source_lang", "en",
                 "--target_lang", "fr", "--translations", str(tmp_path / "fr.txt"), "--no_progress"]) == 0  # fmt: skip
    expected = translate(converted, [en for en, _ in pairs], tmp_path, "--target_lang", "fr")
    assert (tmp_path / "fr.txt").read_text(encoding="utf-8").splitlines() == expected


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (["--target_lang", "de"], "error: --target_lang de: the model translates into es, fr, it (its >>xx<< tokens)"),
        (["--target_lang", "f r"], "error: --target_lang 'f r' is not a language code"),
    ],
)
def test_a_language_the_model_has_no_token_for_is_an_error(multilingual, tmp_path, capsys, options, message):
    _, _, _, converted = multilingual
    (tmp_path / "input.txt").write_text("Open the file.\n", encoding="utf-8")
    for command in (["translate", "--input", str(tmp_path / "input.txt")],
                    ["score", "--source", str(tmp_path / "input.txt"), "--target", str(tmp_path / "input.txt")]):  # fmt: skip
        capsys.readouterr()
        assert main([*command, "--model", str(converted), *options]) == 2
        assert message in capsys.readouterr().err


def translate_jsonl(model: Path, records: list[dict], tmp_path: Path, *options: str) -> tuple[int, Path]:
    """`vaswani translate --input_format jsonl` of `records`: its exit status and its --output file."""
    (tmp_path / "input.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    output = tmp_path / f"output{len(list(tmp_path.iterdir()))}.txt"
    argv = ["translate", "--model", str(model), "--input", str(tmp_path / "input.jsonl"), "--input_format", "jsonl",
            "--output", str(output), "--no_progress"]  # fmt: skip
    return main([*argv, *options]), output


def test_each_json_line_may_name_its_own_target_language(multilingual, tmp_path, capsys):
    """--input_format jsonl: a line's "target_lang" chooses its language, --target_lang that of the lines naming
    none; a language the model has no token for, or no language code, is an error naming the line, and no output
    is left."""
    marian, tokenizer, _, converted = multilingual
    lines = sentences(6, tokenizer)
    codes = ["es", None, "fr", "it", None, "fr"]
    records = [
        {"text": line} | ({"target_lang": code} if code else {}) for line, code in zip(lines, codes, strict=True)
    ]
    status, output = translate_jsonl(converted, records, tmp_path, "--target_lang", "it")
    assert status == 0
    expected = [
        marian_translation(marian, tokenizer, line, code or "it") for line, code in zip(lines, codes, strict=True)
    ]
    assert output.read_text(encoding="utf-8").splitlines() == expected
    all_italian = [marian_translation(marian, tokenizer, line, "it") for line in lines]
    assert sum(a != b for a, b in zip(expected, all_italian, strict=True)) >= 2  # the lines' own tokens mattered
    for value, said in [("de", '"target_lang" de: the model translates into es, fr, it (its >>xx<< tokens)'),
                        ("f r", '"target_lang" \'f r\' is not a language code'), (3, '"target_lang" must be a string')]:  # fmt: skip
        capsys.readouterr()
        status, output = translate_jsonl(converted, [*records[:3], {"text": lines[3], "target_lang": value}], tmp_path)
        assert status == 2 and not output.exists()
        assert f"error: {tmp_path / 'input.jsonl'} line 4: {said}" in capsys.readouterr().err


def test_a_json_line_may_name_the_target_language_of_a_model_of_one_pair_and_no_other(model_folder, tmp_path,
                                                                                      capsys):  # fmt: skip
    trained = tmp_path / "trained"
    shutil.copytree(model_folder, trained)
    (trained / "run_args.json").write_text(json.dumps({"source_lang": "en", "target_lang": "de"}), encoding="utf-8")
    lines = ["the cat sat on the mat", "a dog"]
    plain = translate(trained, lines, tmp_path)
    status, output = translate_jsonl(trained, [{"text": lines[0], "target_lang": "de"}, {"text": lines[1]}], tmp_path)
    assert status == 0 and output.read_text(encoding="utf-8").splitlines() == plain
    capsys.readouterr()
    status, output = translate_jsonl(trained, [{"text": lines[0]}, {"text": lines[1], "target_lang": "fr"}], tmp_path)
    assert status == 2 and not output.exists()
    assert (
        f'{tmp_path / "input.jsonl"} line 2: "target_lang" fr: the model {trained} translates into de (its '
        "run_args.json) and has no target-language tokens (>>xx<<) to choose another; leave it out"
    ) in (capsys.readouterr().err)


def test_without_target_lang_a_multilingual_model_warns_that_lines_need_their_token(multilingual, tmp_path, capsys):
    _, _, _, converted = multilingual
    capsys.readouterr()
    translate(converted, ["Open the file."], tmp_path)
    assert "warning: the model translates into es, fr, it (its >>xx<< tokens): without --target_lang" in (
        capsys.readouterr().err
    )


def test_a_model_of_one_pair_refuses_another_target_and_takes_its_own(model_folder, tmp_path, capsys):
    """The tiny model trained en-de (its run_args.json, as vaswani train writes it): --target_lang de changes
    nothing, fr is refused; without run_args.json nothing tells the pair and --target_lang changes nothing."""
    trained = tmp_path / "trained"
    shutil.copytree(model_folder, trained)
    (trained / "run_args.json").write_text(json.dumps({"source_lang": "en", "target_lang": "de"}), encoding="utf-8")
    lines = ["the cat sat on the mat", "a dog"]
    plain = translate(model_folder, lines, tmp_path)
    assert translate(trained, lines, tmp_path, "--target_lang", "de") == plain
    assert translate(model_folder, lines, tmp_path, "--target_lang", "fr") == plain
    capsys.readouterr()
    assert main(["translate", "--model", str(trained), "--input", str(tmp_path / "input.txt"),
                 "--target_lang", "fr"]) == 2  # fmt: skip
    assert f"error: --target_lang fr: the model {trained} translates into de (its run_args.json)" in (
        capsys.readouterr().err
    )


# ---------------------------------------------------------------------------------------------------------------------
# Served: one model for several pairs
# ---------------------------------------------------------------------------------------------------------------------
def test_a_served_multilingual_model_is_loaded_once_and_each_pair_gets_its_token(multilingual, tmp_path):
    from vaswani.inference.translator import Translator
    from vaswani.serve.models import ModelSpec, load_models

    marian, tokenizer, _, converted = multilingual
    loads = []

    def load(folders):
        loads.append(folders)
        return Translator(folders[0], device="cpu")

    models = load_models([ModelSpec(converted, ("en", code)) for code in LANGUAGES], load)
    assert loads == [[converted]] and {served.target_language for served in models.values()} == set(LANGUAGES)
    first, second = two_sentences(tokenizer)
    with running(models) as address:
        for code in ("es", "fr"):
            status, answer, _ = post_json(address, "/translate", {"q": f"{first} {second}", "source": "en",
                                                                  "target": code})  # fmt: skip
            assert status == 200, answer
            expected = [marian_translation(marian, tokenizer, sentence, code) for sentence in (first, second)]
            assert answer["translatedText"] == " ".join(expected)
        status, answer, _ = post_json(address, "/v1/translate", {"text": [first, second], "source": "en",
                                                                 "target": "it"})  # fmt: skip
        assert status == 200, answer
        assert [item["hypotheses"][0]["text"] for item in answer["translations"]] == [
            marian_translation(marian, tokenizer, sentence, "it") for sentence in (first, second)
        ]


@pytest.mark.parametrize(
    ("language", "known", "code"),
    [
        ("es", ["es", "fr"], "es"),  # the token's own code
        ("es", ["fra", "spa"], "spa"),  # ISO 639-1 for the ISO 639-3 tokens of Tatoeba-MT models
        ("spa", ["es", "fr"], "es"),  # and back
        ("deu", ["de"], "de"),
        ("ger", ["deu"], "deu"),  # ISO 639-2/B, the bibliographic code
        ("iw", ["heb"], "heb"),  # a withdrawn code (Hebrew's before 1989)
        ("pt_BR", ["pt_br", "pt"], "pt_br"),  # letter case, a region
        ("pt-BR", ["por_BR"], "por_BR"),
        ("zh", ["zho", "cmn"], None),  # two tokens of one language: the user chooses
        ("de", ["es", "fr"], None),
        ("pt", ["pt_br"], None),  # a region is not the language
    ],
)
def test_a_language_in_another_spelling_finds_the_models_token(language, known, code):
    from vaswani.inference.translator import find_language_code

    assert find_language_code(language, known) == code


def test_another_spelling_of_a_target_language_gives_its_tokens_translations(multilingual, tmp_path):
    """`--target_lang fra`, the Translator's "spa" and `--model en-ita=DIR` choose the `>>fr<<`, `>>es<<` and `>>it<<`
    of the model as their ISO 639-1 codes do (a LibreTranslate client asks for "es" from a Tatoeba-MT model's
    `>>spa<<` the same way), and a request for "eng" into "it" finds the pair served as en-ita."""
    from vaswani.inference.translator import Translator
    from vaswani.serve.models import ModelSpec, load_models

    _, tokenizer, _, converted = multilingual
    lines = sentences(4, tokenizer)
    by_iso_639_3 = translate(converted, lines, tmp_path, "--target_lang", "fra")
    assert by_iso_639_3 == translate(converted, lines, tmp_path, "--target_lang", "fr")
    translator = Translator(converted, device="cpu")
    assert translator.translate(lines, target_languages="spa") == translator.translate(lines, target_languages="es")
    models = load_models([ModelSpec(converted, ("en", "ita")), ModelSpec(converted, ("en", "spa"))],
                         lambda folders: translator)  # fmt: skip
    assert {pair: served.target_language for pair, served in models.items()} == {("en", "ita"): "it",
                                                                                ("en", "spa"): "es"}  # fmt: skip
    with running(models) as address:
        status, answer, _ = post_json(address, "/translate", {"q": lines[0], "source": "en", "target": "ita"})
        # a request's codes in another spelling than the served pair's find it too (LibreTranslate clients: ISO 639-1)
        respelt = post_json(address, "/translate", {"q": lines[0], "source": "eng", "target": "it"})
        unknown = post_json(address, "/translate", {"q": lines[0], "source": "en", "target": "fr"})
    assert status == 200 and answer["translatedText"] == translator.translate(lines[:1], target_languages="it")[0]
    assert respelt[:2] == (200, answer)
    assert unknown[0] == 400 and "this server translates into ita, spa" in unknown[1]["error"]


def test_a_served_pair_whose_target_has_no_token_is_a_start_up_error(multilingual, model_folder):
    from vaswani.serve.models import ModelSpec, load_models

    _, _, _, converted = multilingual
    from vaswani.inference.translator import Translator

    with pytest.raises(UsageError, match=rf"--model {converted} for the target de: the model translates into es, fr"):
        load_models([ModelSpec(converted, ("en", "es")), ModelSpec(converted, ("en", "de"))],
                    lambda folders: Translator(folders[0], device="cpu"))  # fmt: skip
    tiny = Translator(model_folder, device="cpu")  # no language tokens: one source, one target
    with pytest.raises(UsageError, match=r"is given for en into de and fr, but it has no target-language tokens"):
        load_models([ModelSpec(model_folder, ("en", "de")), ModelSpec(model_folder, ("en", "fr"))],
                    lambda folders: tiny)  # fmt: skip
    assert len(load_models([ModelSpec(model_folder, ("en", "de")), ModelSpec(model_folder, ("de", "en"))],
                           lambda folders: tiny)) == 2  # fmt: skip


# ---------------------------------------------------------------------------------------------------------------------
# Distilled: a multilingual teacher, a student of one pair
# ---------------------------------------------------------------------------------------------------------------------
def test_distill_tells_a_multilingual_teacher_the_students_target_language(multilingual, tmp_path, capsys):
    """The teacher's translations of the training sources are what `vaswani translate --target_lang fr` gives with
    the teacher's export (the teacher decodes through it) and settings; a target it has no token for is an error
    before any work."""
    pytest.importorskip("ctranslate2")
    _, tokenizer, _, converted = multilingual
    pairs = short_pairs(tokenizer, 12)
    for name, rows in (("train", pairs), ("validation", pairs[:4])):
        lines = [json.dumps({"translation": {"en": en, "fr": es, "de": es}}) for en, es in rows]
        (tmp_path / f"{name}.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    out = tmp_path / "out"
    argv = ["distill", "--teacher", f"en-fr={converted}", "--stage", "translate", "--train_file",
            str(tmp_path / "train.jsonl"), "--validation_file", str(tmp_path / "validation.jsonl"), "--output_dir",
            str(out), "--teacher_num_beams", "2", "--teacher_max_tokens", "512", "--threads", "1", "--no_progress",
            "--vocab_size", "300", "--d_model", "16", "--encoder_layers", "1", "--decoder_layers", "1",
            "--encoder_attention_heads", "2", "--decoder_attention_heads", "2", "--encoder_ffn_dim", "32",
            "--decoder_ffn_dim", "32", "--report_to", "none"]  # fmt: skip
    assert main(argv) == 0, capsys.readouterr().err[-3000:]
    records = [json.loads(line) for path in sorted((out / "distilled").glob("chunk-*.jsonl"))
               for line in path.read_text(encoding="utf-8").splitlines()]  # fmt: skip
    expected = translate(out / "teacher-ct2", [en for en, _ in pairs], tmp_path, "--target_lang", "fr",
                         "--num_beams", "2", "--max_tokens", "512")  # fmt: skip
    assert [record["translation"] for record in records] == expected
    argv[argv.index(f"en-fr={converted}")] = f"en-de={converted}"
    argv[argv.index(str(out))] = str(tmp_path / "out-de")
    capsys.readouterr()
    assert main(argv) == 2
    assert f"error: --teacher {converted} for the target de: the model translates into es, fr, it" in (
        capsys.readouterr().err
    )
    assert not (tmp_path / "out-de").exists()  # said before anything is written (the teacher's export)


def test_the_distillation_report_decodes_the_teacher_into_the_target_language(multilingual):
    from vaswani.distill.report import decode_alternately
    from vaswani.inference.translator import Translator

    _, tokenizer, _, converted = multilingual
    translator = Translator(converted, device="cpu")
    lines = sentences(6, tokenizer)
    decoded = decode_alternately({"teacher": translator, "student": translator}, lines, {"num_beams": 2},
                                 {"teacher": "it"})  # fmt: skip
    assert decoded["teacher"]["translations"] == translator.translate(lines, 2, target_languages=["it"] * 6)
    assert decoded["student"]["translations"] == translator.translate(lines, 2)
    assert decoded["teacher"]["translations"] != decoded["student"]["translations"]


# ---------------------------------------------------------------------------------------------------------------------
# The model cards say which languages, and their examples choose one
# ---------------------------------------------------------------------------------------------------------------------
def test_the_cards_list_the_target_languages_and_their_examples_choose_one(multilingual, model_folder, tmp_path,
                                                                          monkeypatch):  # fmt: skip
    """The converted folder's card and its export's: the languages in the metadata and the text, `--target_lang`
    in the commands, the token before the Python example's source; the export card's Python example, run as
    written next to the export, translates into the first language (and decodes with 0.6, not a converted
    generation config's unset length penalty)."""
    pytest.importorskip("ctranslate2")
    import re

    from vaswani.hub.model_card import render_model_card
    from vaswani.inference.translator import Translator

    _, tokenizer, _, converted = multilingual
    card = str(render_model_card(converted))
    assert "language:\n- es\n- fr\n- it\n" in card
    assert "several languages, Spanish, French, Italian" in card and "`>>es<<`, `>>fr<<`, `>>it<<`" in card
    assert 'tokenizer([">>es<< ' in card and "vaswani translate --model converted --target_lang es <" in card
    export = tmp_path / "en-roa-ct2"
    assert main(["export", "--model", str(converted), "--output_dir", str(export), "--format", "ctranslate2"]) == 0
    card = str(render_model_card(export))
    assert "language:\n- es\n- fr\n- it\n" in card and "(into Spanish, French, Italian)" in card
    assert "vaswani translate --model en-roa-ct2 --target_lang es" in card
    assert "vaswani serve --model 'SRC-*=en-roa-ct2'" in card
    (example,) = [block for block in re.findall(r"```python\n(.*?)```", card, re.DOTALL) if "Translator(" in block]
    monkeypatch.chdir(tmp_path)
    printed = []
    exec(example, {"print": printed.append})  # noqa: S102 (the card's own example, run as a reader runs it)
    expected = Translator(export).translate(["Hello world."], num_beams=4, length_penalty=0.6, target_languages=["es"])
    assert printed == [expected]
    # a model of one target language: none of it
    plain = str(render_model_card(model_folder))
    assert "several languages" not in plain and "--target_lang" not in plain and ">>" not in plain


def test_every_target_of_a_multilingual_model_is_served_by_src_star(multilingual, model_folder, caplog):
    """`--model en-*=DIR`: a pair per target-language token (the source's own left out), one model; a model without
    tokens is an error that says to name the pair; the log says which pairs each model serves."""
    from vaswani.inference.translator import Translator
    from vaswani.serve.models import load_models, parse_model_spec

    _, _, _, converted = multilingual
    loads = []

    def load(folders):
        loads.append(folders)
        return Translator(folders[0], device="cpu")

    caplog.set_level("INFO", logger="vaswani.serve")
    models = load_models([parse_model_spec(f"en-*={converted}", every_target=True),
                          parse_model_spec(f"it-*={converted}", every_target=True)], load)  # fmt: skip
    assert sorted(models) == [("en", "es"), ("en", "fr"), ("en", "it"), ("it", "es"), ("it", "fr")]
    assert loads == [[converted]] and {served.target_language for served in models.values()} == set(LANGUAGES)
    assert f"{converted} serves en-es, en-fr, en-it, it-es, it-fr" in caplog.text
    spelt = load_models([parse_model_spec(f"ita-*={converted}", every_target=True)], load)
    assert sorted(spelt) == [("ita", "es"), ("ita", "fr")]  # the source's own language left out in any spelling
    with pytest.raises(UsageError, match=rf"--model en-\*={model_folder}: the model has no target-language tokens"):
        load_models([parse_model_spec(f"en-*={model_folder}", every_target=True)], load)
    assert parse_model_spec(f"en-*={converted}").folder == Path(f"en-*={converted}")  # a teacher's: no such pair
