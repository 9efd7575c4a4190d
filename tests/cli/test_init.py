"""One `vaswani` command for the whole life cycle: every subcommand is there, its --help is complete (every option
has a help text) and names the real command, and the commands that also have an older entry point run the same code.
"""

from __future__ import annotations

import argparse

import pytest

from vaswani.cli import build_parser, main

LIFE_CYCLE = ["train", "tokenizer", "translate", "export", "average", "prune", "push", "card", "convert", "serve",
              "distill"]  # fmt: skip


def subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    (action,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(action.choices)


def test_the_vaswani_command_has_every_life_cycle_command(capsys):
    assert set(LIFE_CYCLE) <= set(subparsers(build_parser()))
    assert main(["--help"]) == 0
    listing = capsys.readouterr().out
    for command in LIFE_CYCLE:
        assert f"    {command}" in listing


@pytest.mark.parametrize("command", LIFE_CYCLE)
def test_every_option_of_every_command_is_documented(command, capsys):
    if command == "train":
        from vaswani.training.options import build_parser as build_train_parser

        parser = build_train_parser(prog="vaswani train")
    else:
        parser = subparsers(build_parser(command))[command]
    undocumented = [a.option_strings for a in parser._actions if a.option_strings and not (a.help or "").strip()]
    assert not undocumented
    assert main([command, "--help"]) == 0
    usage = capsys.readouterr().out
    assert usage.startswith(f"usage: vaswani {command} ")


def test_vaswani_tokenizer_is_python_dash_m_tokenization_train(tmp_path):
    from tokenization.__main__ import main as tokenization_main

    corpus = tmp_path / "corpus.txt"
    corpus.write_text("".join(f"the house number {i} is small\ndas Haus Nummer {i} ist klein\n" for i in range(50)))
    options = ["--files", str(corpus), "--vocab_size", "300", "--min_frequency", "2"]
    assert main(["tokenizer", *options, "--output_dir", str(tmp_path / "a")]) == 0
    assert tokenization_main(["train", *options, "--output_dir", str(tmp_path / "b")]) == 0
    assert (tmp_path / "a" / "tokenizer.json").read_bytes() == (tmp_path / "b" / "tokenizer.json").read_bytes()
    # and the same user errors: exit 2 with `error: ...`
    assert main(["tokenizer", *options, "--output_dir", str(corpus)]) == 2


@pytest.mark.parametrize("activated", [True, False], ids=["venv activated", "venv not activated"])
def test_the_command_the_log_tells_a_user_to_type_works_as_typed(activated, monkeypatch, tmp_path):
    """After `make demo` the user's shell has not activated .venv: the last log line must then name the script by
    its path (`vaswani: command not found` otherwise); with the environment activated, plain `vaswani`."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    from vaswani.training.tasks import vaswani_command

    bin_dir = Path(sys.executable).parent
    if not (bin_dir / "vaswani").exists():
        pytest.skip("no vaswani script installed beside this Python (not an installed environment)")
    path = [part for part in os.environ["PATH"].split(os.pathsep) if Path(part).resolve() != bin_dir.resolve()]
    monkeypatch.setenv("PATH", os.pathsep.join([str(bin_dir), *path] if activated else path))
    command = vaswani_command()
    assert (command == "vaswani") == activated
    typed = subprocess.run(f"{command} translate --help", shell=True, capture_output=True, text=True,
                           env={**os.environ, "HF_HUB_OFFLINE": "1"})  # fmt: skip
    assert typed.returncode == 0 and "--model" in typed.stdout, typed.stderr[-2000:]
