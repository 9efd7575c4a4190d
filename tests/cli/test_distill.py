"""vaswani/cli/distill.py: the options of `vaswani distill`: its own (the teacher, the distilled data, the stages)
with their defaults and checks, and every option of `vaswani train` for the student, from train's own parser groups,
also from a YAML --config."""

import argparse

import pytest

from vaswani.cli import build_parser, main
from vaswani.training.options import build_parser as build_train_parser


def distill_parser() -> argparse.ArgumentParser:
    (action,) = [a for a in build_parser("distill")._actions if isinstance(a, argparse._SubParsersAction)]
    return action.choices["distill"]


def test_the_defaults_are_the_papers_decoding_an_int8_export_and_every_stage():
    args = distill_parser().parse_args(["--teacher", "en-es=teacher", "--output_dir", "out"])
    assert args.teacher == ["en-es=teacher"]
    assert (args.teacher_num_beams, args.teacher_length_penalty) == (4, 0.6)
    assert args.teacher_max_tokens is None  # vaswani translate's default, or what continued data was made with
    assert (args.quantization, args.stage, args.filter, args.mix_original) == ("int8", "all", "none", False)
    assert (args.buffer_lines, args.device, args.threads, args.progress) == (2000, "auto", None, None)
    assert (args.source_lang, args.target_lang) == (None, None)  # the teacher's pair unless given
    both = distill_parser().parse_args(["--teacher", "a", "--teacher", "b"])
    assert both.teacher == ["a", "b"]  # an ensemble


def test_every_train_option_is_the_students_with_trains_definition():
    distill = {a.dest: a for a in distill_parser()._actions}
    train = {a.dest: a for a in build_train_parser()._actions}
    assert set(train) <= set(distill)
    for dest, action in train.items():
        if dest == "help":
            continue
        assert distill[dest].option_strings == action.option_strings and distill[dest].type == action.type, dest
        assert distill[dest].shared_from == "train"
    assert distill["output_dir"].help.startswith("the distillation's folder")
    assert distill["train_file"].help.startswith("the training pairs") and "teacher translates" in distill[
        "train_file"].help  # fmt: skip


def test_a_yaml_config_holds_the_students_and_distills_options(tmp_path):
    config = tmp_path / "student.yaml"
    config.write_text("d_model: 192\ndecoder_layers: 1\nteacher_num_beams: 5\nquantization: int16\n")
    args = distill_parser().parse_args(["--config", str(config), "--teacher_num_beams", "6"])
    assert (args.d_model, args.decoder_layers, args.quantization) == (192, 1, "int16")
    assert args.teacher_num_beams == 6  # the command line wins
    assert {"d_model", "decoder_layers", "teacher_num_beams", "quantization"} <= args.explicit


@pytest.mark.parametrize(
    "option, value, message",
    [
        ("--filter_keep", "1.5", "must be a share of the pairs in (0, 1], got 1.5"),
        ("--filter_keep", "x", "expected a number"),
        ("--filter", "bleu", "invalid choice: 'bleu'"),
        ("--quantization", "int3", "invalid choice: 'int3'"),
        ("--stage", "evaluate", "invalid choice: 'evaluate'"),
        ("--teacher_num_beams", "0", "must be at least 1"),
        ("--teacher_length_penalty", "-1", "must be a finite number of at least 0"),
        ("--teacher_max_tokens", "0", "must be at least 1"),
        ("--buffer_lines", "0", "must be at least 1"),
    ],
)
def test_a_wrong_value_says_which_and_what_is_allowed(option, value, message, capsys):
    assert main(["distill", "--teacher", "t", "--output_dir", "out", option, value]) == 2
    error = capsys.readouterr().err
    assert f"argument {option}" in error and message in error


def test_help_lists_the_teacher_the_distilled_data_and_the_stages(capsys):
    assert main(["distill", "--help"]) == 0
    text = capsys.readouterr().out
    for part in ("the teacher:", "--teacher [SRC-TGT=]DIR", "the distilled data", "--filter_keep SHARE",
                 "the stages:", "--stage {translate,train,export,all}", "--quantization", "docs/distillation.md"):  # fmt: skip
        assert part in text, part


def test_the_student_recipe_loads_and_is_deeper_in_the_encoder_and_narrower_than_the_small_data_recipe(tmp_path):
    import yaml
    from conftest import REPO_ROOT

    from vaswani.distill.folder import DistillFolder
    from vaswani.distill.stages import student_args

    path = REPO_ROOT / "configs" / "student.yaml"
    recipe, teacher = yaml.safe_load(path.read_text()), yaml.safe_load((path.parent / "small-data.yaml").read_text())
    args = distill_parser().parse_args(["--config", str(path), "--teacher", "t", "--train_file", "train.jsonl",
                                        "--validation_file", "validation.jsonl", "--output_dir", str(tmp_path),
                                        "--max_train_minutes", "20", "--source_lang", "en", "--target_lang", "es"])  # fmt: skip
    for key, value in recipe.items():
        assert getattr(args, key) == value, key
    student = student_args(args, DistillFolder(tmp_path))  # checked and built as training would
    assert (
        student.train_file == str(tmp_path / "distilled" / "train.jsonl")
        and student.output_dir == tmp_path / "student"
    )
    assert recipe["encoder_layers"] > recipe["decoder_layers"] and recipe["decoder_layers"] < teacher["decoder_layers"]
    assert recipe["d_model"] < teacher["d_model"] and recipe["decoder_ffn_dim"] < teacher["decoder_ffn_dim"]


def test_the_cut_student_recipe_trains_a_teacher_pruned_to_a_students_shape(model_folder, tmp_path):
    """configs/student-cut.yaml ("shrink and fine-tune"): training options only, so that a model folder made by
    `vaswani prune` from a teacher keeps its own shape as `vaswani distill`'s student (`--model`, `--tokenizer`);
    configs/small-data.yaml's training recipe otherwise, with a shorter warm-up."""
    import yaml
    from conftest import REPO_ROOT

    from modeling_vaswani import VaswaniConfig
    from vaswani.distill.folder import DistillFolder
    from vaswani.distill.stages import student_args
    from vaswani.export.prune import prune_model_folder
    from vaswani.training.loop import resolve_model_config

    path = REPO_ROOT / "configs" / "student-cut.yaml"
    recipe, teacher = yaml.safe_load(path.read_text()), yaml.safe_load((path.parent / "small-data.yaml").read_text())
    assert not set(recipe) & set(VaswaniConfig().to_dict()) - {"dropout", "label_smoothing"}  # no shape
    assert {key: value for key, value in teacher.items() if key in recipe and key != "warmup_steps"} == {
        key: value for key, value in recipe.items() if key != "warmup_steps"}  # fmt: skip
    assert recipe["warmup_steps"] < teacher["warmup_steps"]
    cut, _ = prune_model_folder(model_folder, tmp_path / "cut", decoder_layers_to_keep=[0], vocab_size=300)
    args = distill_parser().parse_args(["--config", str(path), "--teacher", str(model_folder), "--model", str(cut),
                                        "--tokenizer", str(cut), "--train_file", "train.jsonl", "--validation_file",
                                        "validation.jsonl", "--output_dir", str(tmp_path / "out"),
                                        "--source_lang", "en", "--target_lang", "de", "--max_train_minutes", "20"])  # fmt: skip
    for key, value in recipe.items():
        assert getattr(args, key) == value, key
    student = student_args(args, DistillFolder(tmp_path / "out"))
    config = resolve_model_config(student)
    assert (config.decoder_layers, config.vocab_size, str(student.model), str(student.tokenizer)) == (
        1,
        300,
        str(cut),
        str(cut),
    )
