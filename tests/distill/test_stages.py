"""vaswani/distill/stages.py: `vaswani distill` end to end on tiny data, checked against independent references (the
distilled targets and scores are what `vaswani translate` gives for those sources with the same settings; the
report's BLEU is sacrebleu's on what `vaswani translate` gives for the test file), resuming after SIGKILLs in the
translate and train stages and after a crash in the export stage, and every bad input an `error:` (status 2)."""

import itertools
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import sacrebleu
import torch
from conftest import REPO_ROOT, reset_accelerate_state
from safetensors.torch import load_file
from test_pipeline_vaswani import save_model_folder

from vaswani.cli import main
from vaswani.devices import ctranslate2_int8_compute_type, default_batch_tokens
from vaswani.inference.outputs import one_line

SUBJECTS = ["the cat", "a dog", "the weather", "we", "the dog", "a cat"]
PREDICATES = ["sat on the mat", "runs in the park", "is nice today", "read a book at home", "sat in the park"]
SENTENCES = [f"{subject} {predicate}" for subject, predicate in itertools.product(SUBJECTS, PREDICATES)]
REFERENCES = {"the cat": "die Katze", "a dog": "ein Hund", "the weather": "das Wetter", "we": "wir",
              "the dog": "der Hund", "a cat": "eine Katze"}  # fmt: skip
STUDENT = [
    "--vocab_size", "300", "--d_model", "16", "--encoder_layers", "2", "--decoder_layers", "1",
    "--encoder_attention_heads", "2", "--decoder_attention_heads", "2", "--encoder_ffn_dim", "32",
    "--decoder_ffn_dim", "32", "--max_tokens", "400", "--warmup_steps", "2", "--eval_steps", "0",
    "--num_beams", "2", "--num_examples", "0", "--report_to", "none", "--checkpoint_minutes", "60",
    "--max_train_steps", "4", "--checkpoint_steps", "1", "--mixed_precision", "no",
]  # fmt: skip
TEACHER_DECODING = ["--teacher_num_beams", "2", "--teacher_length_penalty", "0.6", "--teacher_max_tokens", "512"]


def write_split(path: Path, sentences: list[str]) -> Path:
    lines = [json.dumps({"translation": {"en": s, "de": REFERENCES[next(k for k in REFERENCES if s.startswith(k))]
                                         + " " + s.split()[-1]}}) for s in sentences]  # fmt: skip
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def workspace(tmp_path_factory) -> Path:
    """The tiny trained translator as the teacher (no run_args.json: its pair is given as en-de=), and data."""
    root = tmp_path_factory.mktemp("distill")
    save_model_folder(root / "teacher")
    write_split(root / "train.jsonl", SENTENCES * 4)  # 120 pairs: 3 chunks of 40
    write_split(root / "validation.jsonl", SENTENCES[::5])
    write_split(root / "test.jsonl", SENTENCES[1::3])
    return root


def common(workspace: Path, output_dir: Path) -> list[str]:
    return [
        "--teacher", f"en-de={workspace / 'teacher'}", *TEACHER_DECODING, "--buffer_lines", "40", "--threads", "1",
        "--train_file", str(workspace / "train.jsonl"), "--validation_file", str(workspace / "validation.jsonl"),
        "--test_file", str(workspace / "test.jsonl"), "--output_dir", str(output_dir), "--no_progress",
        "--cache_dir", str(workspace / "cache"), *STUDENT,
    ]  # fmt: skip


def run_distill(argv: list[str]) -> int:
    """`vaswani distill ARGV` in this process: its exit status (Accelerate's state reset around it)."""
    reset_accelerate_state()
    try:
        return main(["distill", *argv])
    finally:
        reset_accelerate_state()
        torch.set_num_threads(1)


def distill(argv: list[str], capsys) -> tuple[int, str]:
    """`run_distill`, and what it wrote to stderr."""
    capsys.readouterr()
    status = run_distill(argv)
    return status, capsys.readouterr().err


def translate(model: Path, sources: list[str], tmp_path: Path, *options: str) -> list[dict]:
    """`vaswani translate` of `sources` with the teacher's decoding settings: JSON lines with scores."""
    source_file, output = tmp_path / "sources.txt", tmp_path / "translations.jsonl"
    source_file.write_text("".join(s + "\n" for s in sources), encoding="utf-8")
    assert main(["translate", "--model", str(model), "--input", str(source_file), "--output", str(output),
                 "--num_beams", "2", "--length_penalty", "0.6", "--max_tokens", "512", "--output_format", "jsonl",
                 "--scores", "--no_progress", *options]) == 0  # fmt: skip
    return [json.loads(line)["hypotheses"][0] for line in output.read_text(encoding="utf-8").splitlines()]


def chunks(folder: Path) -> list[dict]:
    return [json.loads(line) for path in sorted((folder / "distilled").glob("chunk-*.jsonl"))
            for line in path.read_text(encoding="utf-8").splitlines()]  # fmt: skip


def stamps(paths) -> dict:
    return {path.name: (path.stat().st_ino, path.stat().st_mtime_ns) for path in paths}


@pytest.fixture(scope="module")
def straight_run(workspace):
    """One uninterrupted `vaswani distill` (--stage all)."""
    out = workspace / "straight"
    assert run_distill(common(workspace, out)) == 0
    return out


# ---------------------------------------------------------------------------------------------------------------------
# End to end
# ---------------------------------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_the_distilled_targets_are_the_teachers_translations(workspace, straight_run, tmp_path):
    records = chunks(straight_run)
    sources = SENTENCES * 4
    assert [r["source"] for r in records] == sources and [r["line"] for r in records] == list(range(1, 121))
    # the same sources through `vaswani translate` of the teacher's export, with the same settings and buffer
    expected = translate(straight_run / "teacher-ct2", sources, tmp_path, "--buffer_lines", "40")
    assert [one_line(r["translation"]) for r in records] == [e["text"] for e in expected]
    assert [r["score"] for r in records] == pytest.approx([e["score"] for e in expected], abs=1e-6)
    assert len({r["translation"] for r in records}) >= 4  # the teacher says different things
    info = json.loads((straight_run / "teacher-ct2" / "vaswani_ctranslate2.json").read_text())
    assert info["quantization"] == "int8"
    # the student's training file: every distilled pair, in order
    rows = [json.loads(line)["translation"] for line in (straight_run / "distilled" / "train.jsonl").open()]
    assert [(row["en"], row["de"]) for row in rows] == [(r["source"], r["translation"]) for r in records]


def test_monolingual_sentences_are_translated_after_the_training_sources_leaving_out_held_out_ones(workspace,
                                                                                                   tmp_path, capsys):  # fmt: skip
    """--monolingual_file: its sentences (not the blank line, not a validation or test source) are translated by the
    teacher as the training sources are, after them, without a reference, and join the student's training file."""
    mono = tmp_path / "mono.txt"
    held_out = [SENTENCES[0], SENTENCES[1]]  # a validation source (SENTENCES[::5]), a test one (SENTENCES[1::3])
    mono.write_text(f"the cat sat\n\n{held_out[0]}\nwe read a book in the park today\n{held_out[1]}\n", "utf-8")
    out = tmp_path / "out"
    status, stderr = distill([*common(workspace, out), "--stage", "translate", "--monolingual_file", str(mono)],
                             capsys)  # fmt: skip
    assert status == 0, stderr[-3000:]
    records = chunks(out)
    assert [r["source"] for r in records[:120]] == SENTENCES * 4 and all(r["reference"] for r in records[:120])
    kept = ["the cat sat", "we read a book in the park today"]
    assert [(r["line"], r["source"], r["reference"]) for r in records[120:]] == [
        (1, kept[0], None),
        (4, kept[1], None),
    ]
    expected = translate(out / "teacher-ct2", kept, tmp_path, "--buffer_lines", "40")
    assert [one_line(r["translation"]) for r in records[120:]] == [e["text"] for e in expected]
    rows = [json.loads(line)["translation"] for line in (out / "distilled" / "train.jsonl").open()]
    assert [(row["en"], row["de"]) for row in rows] == [(r["source"], r["translation"]) for r in records]
    stats = json.loads((out / "distilled" / "stats.json").read_text())
    assert (stats["pairs_translated"], stats["monolingual_translated"], stats["training_pairs"]) == (120, 2, 122)
    # the same folder without the file is other data: refused, not mixed
    status, stderr = distill([*common(workspace, out), "--stage", "translate"], capsys)
    assert status == 2 and "made otherwise: the training data (--train_file, --monolingual_file" in stderr


@pytest.mark.slow
def test_the_student_trains_on_them_and_is_chosen_on_the_original_references(workspace, straight_run):
    student = straight_run / "student"
    run_args = json.loads((student / "run_args.json").read_text())
    assert run_args["train_file"] == str(straight_run / "distilled" / "train.jsonl")
    assert run_args["validation_file"] == str(workspace / "validation.jsonl")
    assert (run_args["decoder_layers"], run_args["source_lang"], run_args["target_lang"]) == (1, "en", "de")
    # what the training file is, recorded and on the student's card (names only): the teacher's translations
    stats = json.loads((straight_run / "distilled" / "stats.json").read_text())
    assert run_args["distilled_from"] == {"teachers": ["teacher"], "train_file": "train.jsonl",
                                          "monolingual_sentences": 0, "training_pairs": stats["training_pairs"],
                                          "original_pairs_added": 0}  # fmt: skip
    card = (student / "README.md").read_text()
    assert (
        "| Data | train.jsonl: the sources of train.jsonl translated by the teacher teacher (sequence-level "
        "knowledge distillation, `vaswani distill`) (en → de) |"
    ) in card and "\n# student\n" in card
    results = json.loads((student / "results.json").read_text())
    assert results["step"] == 4 and results["final_model"]["selection"] == "auto"
    export = json.loads((straight_run / "student-ct2" / "vaswani_ctranslate2.json").read_text())
    assert export["quantization"] == "int8" and export["source_config"]["decoder_layers"] == 1


@pytest.mark.slow
def test_the_report_scores_both_exports_on_the_test_file(workspace, straight_run, tmp_path):
    report = json.loads((straight_run / "distill_report.json").read_text())
    test_rows = [json.loads(line)["translation"] for line in (workspace / "test.jsonl").open()]
    sources, references = [r["en"] for r in test_rows], [r["de"] for r in test_rows]
    for role, export in (("teacher", "teacher-ct2"), ("student", "student-ct2")):
        translations = [e["text"] for e in translate(straight_run / export, sources, tmp_path)]
        assert report[role]["test"]["bleu"] == pytest.approx(sacrebleu.corpus_bleu(translations, [references]).score)
        assert report[role]["test"]["chrf"] == pytest.approx(sacrebleu.corpus_chrf(translations, [references]).score)
        assert report[role]["decoded_by"] == [str(straight_run / export)]
        assert report[role]["sentences_per_second"] == pytest.approx(len(sources) / report[role]["seconds"])
        # both int8 exports: computed in int16 where int8 products saturate (an Intel CPU without VNNI)
        assert report[role]["computes_in"] == (
            "int16" if ctranslate2_int8_compute_type() == "int16" else "int8_float32"
        )
    assert report["teacher"]["test"]["bleu"] > 0
    assert report["teacher"]["parameters"] == load_teacher_parameters(workspace)  # tied weights once, as in the file
    assert report["comparison"]["time_ratio"] == pytest.approx(report["student"]["seconds"] /
                                                               report["teacher"]["seconds"])  # fmt: skip
    assert report["test"]["setting"] == {"backend": "ctranslate2", "quantization": "int8", "num_beams": 2,
                                         "length_penalty": 0.6, "max_tokens": 512, "threads": 1, "device": "auto"}  # fmt: skip
    assert report["distilled_data"] == json.loads((straight_run / "distilled" / "stats.json").read_text())
    assert report["student_training"]["step"] == 4


@pytest.mark.slow
def test_running_it_again_redoes_nothing_but_the_export_and_report(workspace, straight_run, tmp_path, capsys, caplog):
    again = tmp_path / "again"
    shutil.copytree(straight_run, again)
    before = stamps([*(again / "distilled").iterdir(), again / "student" / "model.safetensors"])
    caplog.set_level("INFO")
    status, stderr = distill(common(workspace, again), capsys)
    assert status == 0, stderr[-3000:]
    assert stamps([*(again / "distilled").iterdir(), again / "student" / "model.safetensors"]) == before
    assert "3 of 3 chunks were translated by an earlier run" in caplog.text
    assert "has finished training with these options: not trained again" in caplog.text
    assert "student / teacher: time" in caplog.text
    # another student recipe on the same distilled data: refused, then trained again with --overwrite_output_dir
    status, stderr = distill([*common(workspace, again), "--stage", "train", "--max_train_steps", "3"], capsys)
    assert status == 2 and "finished training with other options (--max_train_steps 4 -> 3)" in stderr
    status, stderr = distill([*common(workspace, again), "--stage", "train", "--max_train_steps", "3",
                              "--overwrite_output_dir"], capsys)  # fmt: skip
    assert status == 0, stderr[-3000:]
    assert json.loads((again / "student" / "results.json").read_text())["step"] == 3
    assert stamps((again / "distilled").iterdir()) == {k: v for k, v in before.items() if k != "model.safetensors"}


@pytest.mark.slow
def test_an_ensemble_teacher_decodes_on_pytorch_and_so_does_the_student_in_the_report(workspace, tmp_path, capsys):
    out = tmp_path / "ensemble"
    write_split(tmp_path / "train.jsonl", SENTENCES)
    status, stderr = distill([*common(workspace, out), "--teacher", f"en-de={workspace / 'teacher'}", "--train_file",
                              str(tmp_path / "train.jsonl"), "--filter", "chrf", "--filter_keep", "0.5"], capsys)  # fmt: skip
    assert status == 0, stderr[-3000:]
    assert not (out / "teacher-ct2").exists()
    report = json.loads((out / "distill_report.json").read_text())
    assert report["test"]["setting"]["backend"] == "torch" and report["test"]["setting"]["quantization"] is None
    assert report["teacher"]["decoded_by"] == [str(workspace / "teacher")] * 2
    assert report["teacher"]["computes_in"] == report["student"]["computes_in"] == "float32"
    assert report["student"]["decoded_by"] == [str(out / "student")] and (out / "student-ct2" / "model.bin").is_file()
    assert report["teacher"]["parameters"] == 2 * load_teacher_parameters(workspace)
    assert report["distilled_data"]["kept"] == 15 and report["distilled_data"]["build"]["filter"] == "chrf"


def load_teacher_parameters(workspace: Path) -> int:
    return sum(t.numel() for t in load_file(workspace / "teacher" / "model.safetensors").values())


# ---------------------------------------------------------------------------------------------------------------------
# Kills
# ---------------------------------------------------------------------------------------------------------------------
def start(argv: list[str], cwd: Path) -> subprocess.Popen:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", "OMP_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")]))}  # fmt: skip
    return subprocess.Popen([sys.executable, "-m", "vaswani.cli", "distill", *argv], cwd=cwd, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)  # fmt: skip


def kill_when(process: subprocess.Popen, ready, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while not ready():
        if process.poll() is not None:
            raise AssertionError(f"the run ended before the kill: {process.stderr.read().decode()[-3000:]}")
        assert time.monotonic() < deadline, "the moment of the kill never came"
        time.sleep(0.005)
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=60)
    assert process.returncode == -signal.SIGKILL


@pytest.mark.slow
def test_a_killed_translate_stage_resumes_without_translating_a_finished_chunk_again(workspace, tmp_path, capsys,
                                                                                     caplog):  # fmt: skip
    """SIGKILL once two chunks are complete, then the same command: the finished chunks are kept as they are (same
    file, never rewritten), only the others are translated, and the chunks equal those of an uninterrupted run."""
    write_split(tmp_path / "train.jsonl", SENTENCES * 20)  # 600 pairs: 20 chunks of 30
    teacher = [f"en-de={workspace / 'teacher'}", f"en-de={workspace / 'teacher'}"]  # an ensemble: on PyTorch
    argv = [*common(workspace, tmp_path / "killed"), "--stage", "translate", "--buffer_lines", "30",
            "--train_file", str(tmp_path / "train.jsonl"), "--teacher", teacher[1]]  # fmt: skip
    process = start(argv, tmp_path)
    kill_when(process, lambda: (tmp_path / "killed" / "distilled" / "chunk-00001.jsonl").exists())
    finished = sorted((tmp_path / "killed" / "distilled").glob("chunk-*.jsonl"))
    assert 2 <= len(finished) < 20, "killed too late to test anything"
    before = stamps(finished)
    caplog.set_level("INFO")
    status, stderr = distill(argv, capsys)
    assert status == 0, stderr[-3000:]
    assert stamps(finished) == before  # not written again
    assert f"{len(finished)} of 20 chunks were translated by an earlier run" in caplog.text
    assert f"The teacher translated {30 * (20 - len(finished)):,} sentences" in caplog.text
    status, stderr = distill([*argv, "--output_dir", str(tmp_path / "straight")], capsys)
    assert status == 0, stderr[-3000:]
    assert chunks(tmp_path / "killed") == chunks(tmp_path / "straight")
    assert (tmp_path / "killed" / "distilled" / "train.jsonl").read_bytes() == (
        tmp_path / "straight" / "distilled" / "train.jsonl").read_bytes()  # fmt: skip


def manifest_batch_tokens(output_dir: Path) -> int:
    return json.loads((output_dir / "distilled" / "distilled.json").read_text(encoding="utf-8"))["decoding"][
        "max_tokens"
    ]


@pytest.mark.slow
def test_without_teacher_max_tokens_new_data_takes_translates_default_and_continued_data_keeps_its_own(
        workspace, tmp_path, capsys, caplog):  # fmt: skip
    """Without --teacher_max_tokens the teacher decodes as `vaswani translate` does on the device (512 source tokens
    per CPU thread: `default_batch_tokens`); a folder continued with other --threads keeps the batches its data was
    made with (its manifest records them: a default that followed the threads would refuse to continue it), and one
    translated again with --overwrite_output_dir takes the new threads' default."""
    argv = [*common(workspace, tmp_path / "out"), "--stage", "translate"]
    at = argv.index("--teacher_max_tokens")
    argv = argv[:at] + argv[at + 2 :]
    with_threads = lambda n: [*argv, "--threads", str(n)]  # noqa: E731 (the last --threads wins)
    status, stderr = distill(with_threads(1), capsys)
    assert status == 0, stderr[-3000:]
    assert manifest_batch_tokens(tmp_path / "out") == default_batch_tokens("cpu", 1) == 512
    first = chunks(tmp_path / "out")
    last = sorted((tmp_path / "out" / "distilled").glob("chunk-*.jsonl"))[-1]
    last.unlink()  # as if killed before its last chunk
    caplog.set_level("INFO")
    status, stderr = distill(with_threads(2), capsys)
    assert status == 0, stderr[-3000:]
    assert "2 of 3 chunks were translated by an earlier run" in caplog.text
    assert ", 512 source tokens per batch" in caplog.text  # not 1,024 (the default at 2 threads)
    assert manifest_batch_tokens(tmp_path / "out") == 512
    resumed = chunks(tmp_path / "out")  # the last chunk again, at 2 threads: its scores summed in another order
    assert [{**r, "score": None} for r in resumed] == [{**r, "score": None} for r in first]
    assert [r["score"] for r in resumed] == pytest.approx([r["score"] for r in first], abs=1e-5)
    status, stderr = distill([*with_threads(2), "--overwrite_output_dir"], capsys)
    assert status == 0, stderr[-3000:]
    assert manifest_batch_tokens(tmp_path / "out") == default_batch_tokens("cpu", 2) == 1024
    status, stderr = distill([*with_threads(2), "--teacher_max_tokens", "700"], capsys)  # given: checked as before
    assert status == 2 and "--teacher_max_tokens 1024 -> 700" in stderr


@pytest.mark.slow
def test_a_killed_train_stage_resumes_to_the_uninterrupted_students_weights(workspace, straight_run, tmp_path, capsys):
    killed = tmp_path / "killed"
    killed.mkdir()
    shutil.copy(straight_run / "distill_args.json", killed)
    shutil.copytree(straight_run / "distilled", killed / "distilled")
    argv = [*common(workspace, killed), "--stage", "train"]
    process = start(argv, tmp_path)
    kill_when(process, lambda: (killed / "student" / "checkpoints" / "step-00000001" / "checkpoint.json").exists())
    assert not (killed / "student" / "results.json").exists(), "killed too late to test anything"
    status, stderr = distill(argv, capsys)
    assert status == 2 and "stopped before the end: pass --resume_from_checkpoint latest" in stderr
    status, stderr = distill([*argv, "--resume_from_checkpoint", "latest"], capsys)
    assert status == 0, stderr[-3000:]
    a, b = (
        load_file(straight_run / "student" / "model.safetensors"),
        load_file(killed / "student" / "model.safetensors"),
    )
    assert a.keys() == b.keys() and all(torch.equal(a[key], b[key]) for key in a)


@pytest.mark.slow
def test_a_paused_student_is_not_exported_and_continues_to_the_same_weights(workspace, straight_run, tmp_path, capsys,
                                                                           caplog):  # fmt: skip
    paused = tmp_path / "paused"
    paused.mkdir()
    shutil.copy(straight_run / "distill_args.json", paused)
    shutil.copytree(straight_run / "distilled", paused / "distilled")
    caplog.set_level("INFO")
    status, stderr = distill([*common(workspace, paused), "--stop_after_steps", "2"], capsys)
    assert status == 0, stderr[-3000:]
    assert "paused after 2 updates; continue with --resume_from_checkpoint latest" in caplog.text
    assert not (paused / "student-ct2").exists() and not (paused / "distill_report.json").exists()
    status, stderr = distill([*common(workspace, paused), "--resume_from_checkpoint", "latest"], capsys)
    assert status == 0, stderr[-3000:]
    a, b = (
        load_file(straight_run / "student" / "model.safetensors"),
        load_file(paused / "student" / "model.safetensors"),
    )
    assert all(torch.equal(a[key], b[key]) for key in a) and (paused / "distill_report.json").is_file()


@pytest.mark.slow
def test_an_export_stage_that_dies_halfway_is_redone(workspace, straight_run, tmp_path, capsys, monkeypatch):
    again = tmp_path / "again"
    shutil.copytree(straight_run, again)
    (again / "distill_report.json").unlink()
    from vaswani import model_folder

    replace = os.replace

    def die_at_the_swap(source, target):  # the old export set aside, the new one not yet in place
        replace(source, target)
        if str(target).endswith("student-ct2-old"):
            raise KeyboardInterrupt

    monkeypatch.setattr(model_folder.os, "replace", die_at_the_swap)
    status, _ = distill([*common(workspace, again), "--stage", "export"], capsys)
    assert status == 130 and not (again / "student-ct2").exists() and not (again / "distill_report.json").exists()
    monkeypatch.setattr(model_folder.os, "replace", replace)
    status, stderr = distill([*common(workspace, again), "--stage", "export"], capsys)
    assert status == 0, stderr[-3000:]
    assert (again / "student-ct2" / "model.bin").is_file() and (again / "distill_report.json").is_file()
    assert not [p.name for p in again.iterdir() if p.name.startswith(".tmp")]
    assert (again / "student-ct2" / "model.bin").read_bytes() == (
        straight_run / "student-ct2" / "model.bin"
    ).read_bytes()


# ---------------------------------------------------------------------------------------------------------------------
# Bad input
# ---------------------------------------------------------------------------------------------------------------------
def expect_error(argv: list[str], capsys, *fragments: str) -> None:
    status, stderr = distill(argv, capsys)
    assert status == 2, (status, stderr[-3000:])
    assert "Traceback" not in stderr and "error:" in stderr, stderr[-3000:]
    for fragment in fragments:
        assert fragment in stderr, (fragment, stderr[-2000:])


@pytest.mark.slow
def test_a_teacher_of_other_languages_or_text_is_refused_before_anything_is_written(workspace, tmp_path, capsys):
    out = tmp_path / "out"
    expect_error([*common(workspace, out), "--target_lang", "es"], capsys,
                 "the teacher translates en-de, but the data's languages are --source_lang en --target_lang es")  # fmt: skip
    expect_error([*common(workspace, out), "--teacher", str(workspace / "teacher")], capsys,
                 "no run_args.json; name the pair on the command line: --teacher SRC-TGT=")  # fmt: skip
    assert not out.exists()
    greek = tmp_path / "greek.jsonl"
    greek.write_text("".join(json.dumps({"translation": {"en": s, "de": s}}) + "\n"
                             for s in ["η γάτα κάθεται στο χαλί", "ένας σκύλος τρέχει"]), encoding="utf-8")  # fmt: skip
    expect_error([*common(workspace, out), "--train_file", str(greek)], capsys,
                 "the teacher's tokenizer does not fit the training data")  # fmt: skip
    assert not list((out / "distilled").glob("chunk-*"))


@pytest.mark.slow
def test_an_empty_or_half_written_distilled_folder_is_a_clear_error(workspace, straight_run, tmp_path, capsys):
    expect_error([*common(workspace, tmp_path / "new"), "--stage", "train"], capsys,
                 "holds no distilled data (distilled.json is missing): run --stage translate")  # fmt: skip
    half = tmp_path / "half"
    shutil.copytree(straight_run, half)
    (half / "distilled" / "chunk-00001.jsonl").unlink()
    (half / "distilled" / "train.jsonl").unlink()
    expect_error([*common(workspace, half), "--stage", "train"], capsys,
                 "is incomplete: 2 of 3 chunks are translated; run --stage translate")  # fmt: skip
    (half / "distilled" / "chunk-00001.jsonl").write_text("{}\n")
    expect_error([*common(workspace, half), "--stage", "train"], capsys, "chunk-00001.jsonl is damaged")
    expect_error([*common(workspace, tmp_path / "new"), "--stage", "export"], capsys, "holds no distilled data")
    assert not (tmp_path / "new").exists()


@pytest.mark.slow
def test_a_student_config_that_cannot_load_is_refused_before_the_teacher_translates(workspace, tmp_path, capsys):
    out = tmp_path / "out"
    config = tmp_path / "student.yaml"
    for text, fragment in [
        ("d_model: [256\n", "is not valid YAML"),
        ("d_modle: 256\n", "unknown option 'd_modle'"),
        ("norm_type: nonsense\n", "norm_type"),
    ]:
        config.write_text(text)
        expect_error([*common(workspace, out), "--config", str(config)], capsys, fragment)
    expect_error([*common(workspace, out), "--config", str(tmp_path / "missing.yaml")], capsys, "no such file")
    assert not out.exists()


@pytest.mark.slow
def test_options_distill_cannot_use_and_folders_it_did_not_write_are_refused(workspace, tmp_path, capsys):
    out = tmp_path / "out"
    base = common(workspace, out)
    expect_error([*base, "--validation_file", ""], capsys, "--validation_file is required")
    expect_error([*base, "--task", "causal_lm"], capsys, "trains translation students only")
    expect_error([*base, "--dataset_name", "demo"], capsys, "give the data as files")
    expect_error([*base, "--filter", "chrf"], capsys, "--filter chrf needs one of --filter_threshold")
    mono = tmp_path / "mono.txt"
    mono.write_text("a cat\n", "utf-8")
    expect_error([*base, "--filter", "chrf", "--filter_keep", "0.9", "--monolingual_file", str(mono)], capsys,
                 "--filter chrf ranks the teacher's translations against their references")  # fmt: skip
    expect_error([*base, "--monolingual_file", str(tmp_path / "missing.txt")], capsys, "missing.txt: no such file")
    expect_error([*base, "--stage", "translate", "--teacher_num_beams", "0"], capsys, "--teacher_num_beams")
    expect_error([arg for arg in base if arg != f"en-de={workspace / 'teacher'}" and arg != "--teacher"], capsys,
                 "translates with the teacher: give --teacher")  # fmt: skip
    other = tmp_path / "mine"
    other.mkdir()
    (other / "notes.txt").write_text("mine")
    expect_error([*common(workspace, other)], capsys, "holds files and no distillation")
    assert [p.name for p in other.iterdir()] == ["notes.txt"]
