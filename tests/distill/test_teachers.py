"""vaswani/distill/teachers.py: the teacher's language pair (SRC-TGT= or run_args.json, checked against the data),
how it decodes (through its CTranslate2 export, as a given export, or an ensemble on PyTorch), the tokenizer check,
and the parameter count (against the loaded model's own)."""

import json
import shutil

import pytest
from test_pipeline_vaswani import tiny_tokenizer

from vaswani.distill.folder import DistillFolder
from vaswani.distill.teachers import (
    UNFAMILIAR_TOKEN_LIMIT,
    check_data_languages,
    check_tokenizer_fits,
    ensure_teacher_export,
    parameter_count,
    plan_teacher,
    teacher_pair,
    teacher_specs,
    unfamiliar_share,
)
from vaswani.errors import UsageError
from vaswani.export.ctranslate2 import export_ctranslate2
from vaswani.model_folder import load_model_folder

ENGLISH = ["the cat sat on the mat", "a dog runs in the park", "we read a book at home", "the weather is nice"]
GREEK = ["η γάτα κάθεται στο χαλί", "ένας σκύλος τρέχει στο πάρκο", "διαβάζουμε ένα βιβλίο"]


def with_run_args(folder, tmp_path, name: str, source: str, target: str):
    copy = tmp_path / name
    shutil.copytree(folder, copy)
    (copy / "run_args.json").write_text(json.dumps({"source_lang": source, "target_lang": target}))
    return copy


def test_the_pair_comes_from_the_prefix_or_run_args_and_an_ensemble_must_agree(model_folder, tmp_path):
    en_de = with_run_args(model_folder, tmp_path, "en-de", "en", "de")
    assert teacher_pair(teacher_specs([str(en_de)])) == ("en", "de")
    assert teacher_pair(teacher_specs([f"en-fr={en_de}"])) == ("en", "fr")  # the prefix wins
    with pytest.raises(UsageError, match=r"no run_args.json; name the pair on the command line: --teacher SRC-TGT="):
        teacher_pair(teacher_specs([str(model_folder)]))
    de_en = with_run_args(model_folder, tmp_path, "de-en", "de", "en")
    with pytest.raises(UsageError, match="must translate one language pair, but they translate .*en-de, .*de-en"):
        teacher_pair(teacher_specs([str(en_de), str(de_en)]))
    with pytest.raises(UsageError, match="--teacher .*missing: no such folder"):
        teacher_specs([str(tmp_path / "missing")])
    with pytest.raises(UsageError, match="--teacher en-en=x: the source and target language are both 'en'"):
        teacher_specs(["en-en=x"])


def test_the_data_languages_are_the_teachers_unless_given_and_then_checked():
    assert check_data_languages(("en", "es"), None, None) == ("en", "es")
    assert check_data_languages(("en", "es"), "en", None) == ("en", "es")
    with pytest.raises(UsageError, match="the teacher translates en-es, but the data's languages are --source_lang en "
                                         "--target_lang de: give a teacher of en-de"):  # fmt: skip
        check_data_languages(("en", "es"), None, "de")


def test_how_the_teacher_decodes(model_folder, tmp_path):
    (single,) = teacher_specs([f"en-de={model_folder}"])
    plan = plan_teacher([single], "int8")
    assert (plan.backend, plan.exported, plan.quantization) == ("ctranslate2", True, "int8")
    folder = DistillFolder(tmp_path / "out")
    folder.root.mkdir()
    assert plan.decoded_folders(folder) == [folder.teacher_export]
    export = export_ctranslate2(model_folder, tmp_path / "given-ct2", quantization="int16")
    given = plan_teacher(teacher_specs([f"en-de={export}"]), "int8")
    assert (given.backend, given.exported, given.quantization) == ("ctranslate2", False, "int16")
    assert given.decoded_folders(folder) == [export]
    ensemble = plan_teacher(teacher_specs([str(model_folder), str(model_folder)]), "int8")
    assert (ensemble.backend, ensemble.exported, ensemble.quantization) == ("torch", False, None)
    assert type(plan).from_dict(json.loads(json.dumps(plan.to_dict()))).to_dict() == plan.to_dict()


def test_the_teachers_export_is_written_once_and_again_when_it_cannot_be_reused(model_folder, tmp_path):
    plan = plan_teacher(teacher_specs([f"en-de={model_folder}"]), "int8")
    folder = DistillFolder(tmp_path / "out")
    folder.root.mkdir()
    ensure_teacher_export(plan, folder, reuse=True)
    info = folder.teacher_export / "vaswani_ctranslate2.json"
    written = info.stat().st_mtime_ns
    assert json.loads(info.read_text())["quantization"] == "int8"
    ensure_teacher_export(plan, folder, reuse=True)
    assert info.stat().st_mtime_ns == written  # reused
    ensure_teacher_export(plan, folder, reuse=False)  # another teacher's, perhaps: exported again
    assert info.stat().st_mtime_ns != written
    ensure_teacher_export(type(plan)(plan.folders, "ctranslate2", True, "int16"), folder, reuse=True)
    assert json.loads(info.read_text())["quantization"] == "int16"
    assert [p.name for p in folder.root.iterdir()] == ["teacher-ct2"]  # no staging folder left


def test_parameters_are_counted_as_the_loaded_model_has_them(model_folder, tmp_path):
    model, _ = load_model_folder(model_folder)
    expected = sum(parameter.numel() for parameter in model.parameters())
    assert parameter_count([model_folder]) == expected
    export = export_ctranslate2(model_folder, tmp_path / "ct2", quantization="int8")
    assert parameter_count([export]) == expected
    assert parameter_count([model_folder, export]) == 2 * expected


def test_sources_longer_than_the_model_are_counted_without_transformers_warning(monkeypatch):
    """The check only counts tokens: a source longer than the teacher's positions gives no "indexing errors" warning."""
    from transformers import tokenization_utils_base

    warned = []
    monkeypatch.setattr(tokenization_utils_base.logger, "warning", lambda message, *args: warned.append(message))
    tokenizer = tiny_tokenizer()
    long_source = " ".join(ENGLISH * 20)
    assert len(tokenizer(long_source, verbose=False)["input_ids"]) > tokenizer.model_max_length
    assert unfamiliar_share(tokenizer, [long_source]) < UNFAMILIAR_TOKEN_LIMIT
    assert warned == []


def test_a_tokenizer_made_for_other_text_is_refused():
    tokenizer = tiny_tokenizer()  # a BPE with byte fallback, trained on English and German sentences
    assert unfamiliar_share(tokenizer, ENGLISH) < UNFAMILIAR_TOKEN_LIMIT
    assert check_tokenizer_fits(tokenizer, ENGLISH, "teacher") < UNFAMILIAR_TOKEN_LIMIT
    assert unfamiliar_share(tokenizer, GREEK) > 0.9  # every Greek letter is two single bytes
    with pytest.raises(UsageError, match=r"the teacher's tokenizer does not fit the training data: \d+% of the tokens "
                                         r"of its first 3 sources are unknown to it or single bytes"):  # fmt: skip
        check_tokenizer_fits(tokenizer, GREEK, "teacher")
