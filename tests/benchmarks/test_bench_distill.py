"""benchmarks/bench_distill.py: its commands are valid command lines of vaswani (every sweep point a model that can
be built), the verdicts follow issue 43's targets, the sweep chooses on validation among the fast points, and runs
wait for what they need and are reused only with the same command."""

import json
import sys
from pathlib import Path

import pytest
from conftest import REPO_ROOT

sys.path.insert(0, str(REPO_ROOT / "benchmarks"))
from bench_distill import (  # noqa: E402
    CUT_RECIPE,
    STUDENT_RECIPE,
    SWEEP_POINTS,
    Job,
    best_two,
    comparison_jobs,
    data_files,
    parse_args,
    run_jobs,
    seed_summary,
    sweep_jobs,
)


@pytest.fixture
def args(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    for split in ("train", "validation", "test"):
        rows = [json.dumps({"translation": {"en": f"{split} {i}", "es": f"{split} {i}"}}) for i in range(5)]
        (data / f"{split}.jsonl").write_text("\n".join(rows) + "\n")
    return parse_args(["--data_dir", str(data), "--output_dir", str(tmp_path / "out"), "--train_pairs", "3"])


def test_the_comparison_is_the_issues_three_runs_per_seed_each_a_valid_command(args):
    from vaswani.cli import build_parser
    from vaswani.training.options import parse_args as train_args

    args.output_dir.mkdir()
    jobs = {job.name: job for job in comparison_jobs(args)}
    assert set(jobs) == {f"{kind}-s{seed}" for kind in ("teacher", "distill", "baseline") for seed in (0, 1)} | {
        "baseline-s0-ct2", "baseline-s1-ct2"}  # fmt: skip
    assert jobs["distill-s1"].after == ["teacher-s1"] and jobs["baseline-s0-ct2"].after == ["baseline-s0"]
    teacher = train_args(jobs["teacher-s0"].command[2:])
    assert (teacher.d_model, teacher.max_train_minutes, teacher.seed) == (256, 20.0, 0)
    baseline = train_args(jobs["baseline-s1"].command[2:])
    assert (baseline.d_model, baseline.decoder_layers, baseline.train_file) == (192, 1, str(data_files(args)["train"]))
    distill_argv = jobs["distill-s0"].command[3:]
    distill = build_parser("distill").parse_args(distill_argv)
    assert distill.teacher == [str(args.output_dir / "teacher-s0")] and distill.config == str(STUDENT_RECIPE)
    assert (distill.teacher_num_beams, distill.teacher_length_penalty, distill.quantization) == (4, 0.6, "int8")
    assert (distill.threads, distill.max_train_minutes, distill.seed) == (1, 20.0, 0)
    assert len(data_files(args)["train"].read_text().splitlines()) == 3  # --train_pairs


def test_the_cut_comparison_prunes_each_teacher_and_trains_both_students_from_the_cut(args):
    """--student cut: the seed's teacher pruned to CUT_OPTIONS, then the distilled and the original-pairs students
    trained from that same start with configs/student-cut.yaml; the teachers are the comparison's."""
    from vaswani.cli import build_parser
    from vaswani.training.options import parse_args as train_args

    args.student = "cut"
    args.output_dir.mkdir()
    jobs = {job.name: job for job in comparison_jobs(args)}
    assert set(jobs) == {f"{kind}-s{seed}" for kind in ("teacher", "teacher", "distill-cut", "baseline-cut")
                         for seed in (0, 1)} | {"teacher-s0-cut", "teacher-s1-cut", "baseline-cut-s0-ct2",
                                                "baseline-cut-s1-ct2"}  # fmt: skip
    cut = args.output_dir / "teacher-s1-cut"
    prune = build_parser("prune").parse_args(jobs["teacher-s1-cut"].command[3:])
    assert (str(prune.model), str(prune.output_dir), prune.decoder_layers_to_keep, prune.vocab_size) == (
        str(args.output_dir / "teacher-s1"), str(cut), [0], 4000)  # fmt: skip
    assert jobs["teacher-s1-cut"].after == ["teacher-s1"]
    assert jobs["distill-cut-s1"].after == ["teacher-s1", "teacher-s1-cut"]
    assert jobs["baseline-cut-s1"].after == ["teacher-s1-cut"]
    distill = build_parser("distill").parse_args(jobs["distill-cut-s1"].command[3:])
    baseline = train_args(jobs["baseline-cut-s1"].command[2:])
    for student in (distill, baseline):
        assert [str(student.config), str(student.model), str(student.tokenizer)] == [
            str(CUT_RECIPE),
            str(cut),
            str(cut),
        ]
        assert (student.max_train_minutes, student.seed) == (20.0, 1)
    assert baseline.train_file == str(data_files(args)["train"]) and distill.teacher == [
        str(args.output_dir / "teacher-s1")
    ]


def test_monolingual_text_goes_to_the_distilled_students_only_and_names_their_runs(args, tmp_path, capsys):
    """--monolingual_file: distill[-cut]-mono-sS get `vaswani distill --monolingual_file`; the teachers, the cuts and
    the original-pairs students are the runs without it (the same commands: reused)."""
    from vaswani.cli import build_parser

    args.output_dir.mkdir()
    args.student = "cut"
    without = {job.name: job.command for job in comparison_jobs(args)}
    mono = tmp_path / "mono.en"
    mono.write_text("more text\n")
    args.monolingual_file = mono
    jobs = {job.name: job for job in comparison_jobs(args)}
    assert set(jobs) == {name.replace("distill-cut-", "distill-cut-mono-") for name in without}
    assert all(jobs[name].command == command for name, command in without.items() if not name.startswith("distill"))
    distill = build_parser("distill").parse_args(jobs["distill-cut-mono-s0"].command[3:])
    assert distill.monolingual_file == str(mono.resolve()) and Path(distill.output_dir).name == "distill-cut-mono-s0"
    with pytest.raises(SystemExit) as stop:
        parse_args(["--data_dir", str(tmp_path / "data"), "--monolingual_file", str(tmp_path / "no.en")])
    assert stop.value.code == 2 and f"--monolingual_file {tmp_path / 'no.en'} is not a file" in capsys.readouterr().err


def test_every_sweep_point_is_a_student_that_can_be_built(args):
    from vaswani.training.loop import resolve_model_config
    from vaswani.training.options import parse_args as train_args

    assert len(SWEEP_POINTS) <= 6  # issue 43: at most six points
    args.output_dir.mkdir()
    jobs = [job for job in sweep_jobs(args, list(SWEEP_POINTS), 0) if job.name.startswith("sweep-")]
    for job in jobs[::2]:  # the runs (each followed by its export)
        student = train_args(job.command[2:])
        config = resolve_model_config(student)
        assert config.encoder_layers > config.decoder_layers and student.max_train_minutes == 10.0, job.name
        assert student.train_file == str(args.output_dir / "distilled-s0" / "distilled" / "train.jsonl")
    assert [(job.name, job.after) for job in sweep_jobs(args, ["recipe"], 1)] == [("sweep-recipe-s1", [])]


def test_the_verdicts_are_the_issues_targets():
    def decoded(bleu, seconds):
        return {"bleu": bleu, "chrf": 0.0, "seconds": seconds, "sentences": 10}

    met = seed_summary({"teacher": decoded(40.0, [2.0, 2.0, 2.2]), "student": decoded(39.2, [0.9, 1.0, 1.0]),
                        "baseline": decoded(38.0, [1.0, 1.0, 1.0])}, {"teacher": 1, "student": 1, "baseline": 1})  # fmt: skip
    assert list(met["verdicts"].values()) == ["MET", "MET", "MET"]
    assert met["time_ratio"]["median"] == pytest.approx(1.0 / 2.2)  # the median of the per-round ratios
    missed = seed_summary({"teacher": decoded(40.0, [2.0] * 3), "student": decoded(38.9, [1.2] * 3),
                           "baseline": decoded(38.0, [1.0] * 3)}, {})  # fmt: skip
    assert list(missed["verdicts"].values()) == ["MISSED", "MISSED", "MISSED"]


def test_the_sweep_keeps_the_best_two_on_validation_among_the_fast_points():
    results = {"a": {"validation_bleu": [50.0], "time_ratio": 0.6}, "b": {"validation_bleu": [45.0], "time_ratio": 0.4},
               "c": {"validation_bleu": [47.0], "time_ratio": 0.45}, "d": {"validation_bleu": [40.0],
                                                                        "time_ratio": 0.3}}  # fmt: skip
    assert best_two(results) == ["c", "b"]  # "a" is better but too slow
    del results["b"], results["d"]
    assert best_two(results) == ["a", "c"]  # fewer than two fast points: the best of all


def test_runs_wait_for_what_they_need_and_are_reused_only_with_the_same_command(tmp_path, capsys):
    def job(name, after=(), text="x"):
        folder = tmp_path / name
        command = [sys.executable, "-c", f"import pathlib; p = pathlib.Path({str(folder)!r}); p.mkdir(exist_ok=True); "
                   f"(p / 'done').write_text({text!r}); print(sorted(x.name for x in p.parent.iterdir()))"]  # fmt: skip
        return Job(name, command, folder, "done", list(after))

    run_jobs([job("second", after=["first"]), job("first")], parallel=2, fresh=False)
    second_log = (tmp_path / "second.log").read_text()
    assert "'first'" in second_log  # it started after the first had finished
    out = capsys.readouterr().out
    assert out.index("finished first") < out.index("started second")
    run_jobs([job("first"), job("second", after=["first"], text="y")], parallel=2, fresh=False)
    out = capsys.readouterr().out
    assert "reusing first" in out and "started second" in out and (tmp_path / "second" / "done").read_text() == "y"
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text("d_model: 192\n")
    with_recipe = job("third", text="z")
    with_recipe.command.append(str(recipe))
    run_jobs([with_recipe], parallel=1, fresh=False)
    assert with_recipe.finished()
    recipe.write_text("d_model: 256\n")  # an edited recipe: another run
    assert not with_recipe.finished()
    failing = Job("bad", [sys.executable, "-c", "raise SystemExit(3)"], tmp_path / "bad", "done")
    with pytest.raises(SystemExit, match=r"bad failed \(exit 3\); see .*bad.log"):
        run_jobs([failing], parallel=1, fresh=False)


def test_the_cost_shapes_are_the_models_training_would_build_with_an_output_bias():
    from bench_distill import COST_ONLY_POINTS, TEACHER_RECIPE, model_config, recipe_args
    from test_pipeline_vaswani import tiny_tokenizer

    tokenizer = tiny_tokenizer()
    teacher = model_config(recipe_args(TEACHER_RECIPE, []), tokenizer)
    assert (teacher.d_model, teacher.decoder_layers, teacher.vocab_size) == (256, 3, len(tokenizer))
    for name, options in {**SWEEP_POINTS, **COST_ONLY_POINTS}.items():
        config = model_config(recipe_args(STUDENT_RECIPE, options), tokenizer)
        assert config.final_logits_bias and config.eos_token_id == tokenizer.eos_token_id, name
    assert model_config(recipe_args(STUDENT_RECIPE, COST_ONLY_POINTS["dec2"]), tokenizer).decoder_layers == 2
