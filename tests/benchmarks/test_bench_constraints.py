"""benchmarks/bench_constraints.py: its options checked before anything runs, the two quality setups' term choices,
and a tiny end-to-end run on the tests' model."""

import json
import sys

import pytest
from conftest import REPO_ROOT
from test_pipeline_vaswani import PAIRS, one_torch_thread  # noqa: F401  (an autouse fixture)

sys.path.insert(0, str(REPO_ROOT / "benchmarks"))
from bench_constraints import (  # noqa: E402
    DEFAULT_GLOSSARY,
    appearance,
    doubled_terms,
    glossary_constraints,
    main,
    missed_reference_words,
    parse_args,
)


@pytest.fixture
def test_file(tmp_path):
    """The tiny model's pairs with each reference moved one sentence on: the outputs miss reference words."""
    targets = [t for _, t in PAIRS[1:] + PAIRS[:1]]
    path = tmp_path / "test.jsonl"
    path.write_text(
        "".join(
            json.dumps({"translation": {"en": s, "es": t}}) + "\n" for (s, _), t in zip(PAIRS, targets, strict=True)
        )
    )
    return path


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--test_file", "TEST"], "the following arguments are required: --model"),
        (["--model", "missing", "--test_file", "TEST"], "--model missing is not a folder"),
        (["--model", ".", "--test_file", "missing.jsonl"], "is not a file: give a held-out .jsonl"),
        (["--model", ".", "--test_file", "TEST", "--beams", "4,0"], "give comma-separated beam sizes of 1 or more"),
        (["--model", ".", "--test_file", "TEST", "--beams", "4,4"], "each once"),
        (["--model", ".", "--test_file", "TEST", "--sentences", "0"], "0: use 1 or more"),
        (["--model", ".", "--test_file", "TEST", "--parts", "cost,speed"], "(unknown: speed)"),
        (["--model", ".", "--test_file", "TEST", "--glossary", "glossary.txt"],
         "line 1 is not `source word ||| target term`"),
        (["--model", ".", "--test_file", "TEST", "--warmup", "-1"], "--warmup -1: use 0 or more"),
    ],
)  # fmt: skip
def test_bad_options_are_refused_before_anything_runs(argv, message, capsys, tmp_path, monkeypatch, test_file):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "glossary.txt").write_text("file archivo\n")
    with pytest.raises(SystemExit) as exit_info:
        parse_args([str(test_file) if arg == "TEST" else arg for arg in argv])
    assert exit_info.value.code == 2 and message in capsys.readouterr().err


def test_defaults_and_a_glossary_file(tmp_path, test_file):
    args = parse_args(["--model", str(tmp_path), "--test_file", str(test_file)])
    assert (args.parts, args.beams, args.quality_beams, args.terms) == (["cost", "quality"], [4, 10], 4, 2)
    assert args.glossary_terms == DEFAULT_GLOSSARY
    glossary = tmp_path / "glossary.txt"
    glossary.write_text("File ||| fichero\n\nwindow ||| ventana\n")
    args = parse_args(["--model", str(tmp_path), "--test_file", str(test_file), "--glossary", str(glossary),
                       "--beams", "2,6", "--parts", "quality"])  # fmt: skip
    assert args.glossary_terms == {"file": "fichero", "window": "ventana"}
    assert (args.beams, args.parts) == ([2, 6], ["quality"])


def test_the_terms_of_the_two_setups():
    # (a): words of the reference the output lacks, long enough, in order, at most `terms`
    assert missed_reference_words("El archivo no existe en el directorio", "El fichero no existe", 2, 4) == [
        "archivo", "directorio"
    ]  # fmt: skip
    assert missed_reference_words("no se pudo abrir", "no se pudo abrir", 2, 4) == []
    # (b): glossary words of the source, whole words in any case
    glossary = {"file": "archivo", "user": "usuario"}
    assert glossary_constraints("Cannot open File for user", glossary) == ["archivo", "usuario"]
    assert glossary_constraints("profile users", glossary) == []
    assert appearance(["un archivo", "nada", "x"], [["archivo"], ["usuario"], []]) == (1, 2)
    assert doubled_terms(["open file"], ["abrir archivo archivo"], glossary) == 1
    assert doubled_terms(["file to file"], ["archivo a archivo"], glossary) == 0


def test_a_tiny_run_of_both_parts(model_folder, test_file, tmp_path, capsys):
    report = tmp_path / "report.json"
    results = main(["--model", str(model_folder), "--test_file", str(test_file), "--source_lang", "en",
                    "--target_lang", "es", "--sentences", "2", "--beams", "1,2", "--repeats", "1", "--warmup", "0",
                    "--no-aa", "--threads", "1", "--json", str(report)])  # fmt: skip
    out = capsys.readouterr().out
    assert "(a) reference words" in out and "(b) glossary" in out and "slowdown" in out
    assert set(results["cost"]) == {"beam1", "beam2"}
    assert results["quality"]["a"]["met"] == results["quality"]["a"]["total"]  # every missed word forced in
    assert json.loads(report.read_text())["quality"]["a"]["total"] == results["quality"]["a"]["total"]
