"""vaswani/options.py: one spelling per idea across every command (issue 28).

Every command's parser is walked: an option that means a registered idea must come from the registry, one idea has
one spelling everywhere, a flag two commands share is registered, and no flag is hyphenated. The old spellings work
as hidden aliases with a one-line deprecation note: on the command line, as YAML keys and in an old run's
run_args.json.
"""

from __future__ import annotations

import argparse
import json
import re

import pytest

from vaswani.cli import COMMANDS, build_parser
from vaswani.errors import UsageError
from vaswani.options import REGISTRY, ConfigArgumentParser, add_option, rename_legacy_keys


def command_parsers() -> dict[str, argparse.ArgumentParser]:
    """Every parser a user meets: each `vaswani COMMAND`, `train.py` and `python -m tokenization train`."""
    from tokenization.__main__ import build_parser as tokenization_parser
    from vaswani.training.options import build_parser as train_py_parser

    parsers = {}
    for name in COMMANDS:
        subparsers = build_parser(name)._subparsers._group_actions[0]
        parsers[name] = subparsers.choices[name]
    parsers["train.py"] = train_py_parser("train.py")
    parsers["python -m tokenization train"] = tokenization_parser()._subparsers._group_actions[0].choices["train"]
    return parsers


# The other entry points of two commands: the registry knows them by the command's name.
COMMAND_OF = {"train.py": "train", "python -m tokenization train": "tokenizer"}


def registered_spellings(command: str) -> dict[str, str]:
    """Every spelling the registry knows for `command` (flags, "off" flags, the old aliases that command had) -> the
    idea's name. An old alias of one command may be another command's flag (export's old --output is translate's
    --output): aliases are per command."""
    spellings = {}
    for name, option in REGISTRY.items():
        aliases = [old for old, commands in option.aliases.items() if command in commands]
        for flag in (option.flag, option.negative, *aliases):
            if flag is not None:
                spellings[flag] = name
    return spellings


def problems_of(parsers: dict[str, argparse.ArgumentParser]) -> list[str]:
    """What breaks the one-vocabulary rule in `parsers` (command -> parser); empty when nothing does."""
    problems, commands_of_flag = [], {}
    for command, parser in parsers.items():
        spellings = registered_spellings(COMMAND_OF.get(command, command))
        for action in parser._actions:
            if not action.option_strings or isinstance(action, argparse._HelpAction):
                continue
            name = getattr(action, "registry_name", None)
            hidden = action.help == argparse.SUPPRESS
            for flag in action.option_strings:
                if flag in spellings and name is None:
                    problems.append(f"{command}: {flag} means the registered idea {spellings[flag]!r} but is not "
                                    f"the registry's: add it with add_option(parser, {spellings[flag]!r}, ...)")  # fmt: skip
                if not hidden and not re.fullmatch(r"--[a-z0-9]+(_[a-z0-9]+)*", flag):
                    problems.append(f"{command}: {flag} is not spelt --lower_case_with_underscores")
                if not hidden:  # an option one command takes from another's parser groups is that one's
                    owner = getattr(action, "shared_from", None) or COMMAND_OF.get(command, command)
                    commands_of_flag.setdefault(flag, set()).add(owner)
            if name is not None and not hidden:
                option = REGISTRY[name]
                expected = [option.flag] + ([option.negative] if option.negative else [])
                if action.option_strings != expected:
                    problems.append(f"{command}: {action.option_strings} should be the registry's {expected}")
            if name is not None and hidden and not getattr(action, "deprecated", False):
                problems.append(f"{command}: hidden {action.option_strings} of {name!r} is not a deprecated alias")
            owner = getattr(action, "shared_from", None)
            if owner is not None and not any(other.option_strings == action.option_strings and
                                             other.type == action.type and other.choices == action.choices
                                             for other in parsers.get(owner, parser)._actions):  # fmt: skip
                problems.append(
                    f"{command}: {action.option_strings} says it is {owner}'s, but {owner} has no such option"
                )
    for flag, commands in sorted(commands_of_flag.items()):
        if len(commands) > 1 and flag not in registered_spellings(""):
            problems.append(f"{flag} is an option of {sorted(commands)}: an idea several commands share belongs in "
                            "the registry (vaswani.options.REGISTRY)")  # fmt: skip
    return problems


def test_every_command_speaks_the_registry_vocabulary():
    assert problems_of(command_parsers()) == []


def test_an_option_taken_from_another_command_must_be_that_commands():
    """`vaswani distill` takes every option of `vaswani train` from train's own parser groups (one definition, marked
    `shared_from`); a flag that claims so without being train's is reported, as is one defined twice."""
    train, distill = ConfigArgumentParser(prog="train"), ConfigArgumentParser(prog="distill")
    train.add_argument("--warmup_steps", type=int)
    distill.add_argument("--warmup_steps", type=int).shared_from = "train"
    assert problems_of({"train": train, "distill": distill}) == []
    distill.add_argument("--beam_width", type=int).shared_from = "train"  # claims to be train's
    distill.add_argument("--eval_steps", type=int)  # train's flag, defined again
    train.add_argument("--eval_steps", type=int)
    problems = problems_of({"train": train, "distill": distill})
    assert any("['--beam_width'] says it is train's" in p for p in problems), problems
    assert any("--eval_steps is an option of ['distill', 'train']" in p for p in problems), problems
    assert len(problems) == 2, problems


def test_every_registered_idea_is_used_by_a_command():
    used = {
        getattr(action, "registry_name", None) for parser in command_parsers().values() for action in parser._actions
    }
    assert set(REGISTRY) - used == set()


def test_the_walk_fails_on_a_private_spelling_of_a_registered_idea_a_hyphen_and_an_unregistered_shared_flag():
    first, second = ConfigArgumentParser(prog="translate"), ConfigArgumentParser(prog="b")
    first.add_argument("--batch_tokens", type=int)  # translate's old spelling of --max_tokens, added by hand
    first.add_argument("--no-colour", action="store_true")
    first.add_argument("--beam_width", type=int)
    second.add_argument("--beam_width", type=int)  # two commands, one unregistered flag
    add_option(second, "output_dir", "b")
    problems = problems_of({"translate": first, "b": second})
    assert any("--batch_tokens means the registered idea 'max_tokens'" in p for p in problems), problems
    assert any("--no-colour is not spelt" in p for p in problems), problems
    assert any("--beam_width is an option of ['b', 'translate']" in p for p in problems), problems
    assert not any("--output_dir" in p for p in problems), problems


def parse(command: str, *argv: str) -> argparse.Namespace:
    return command_parsers()[command].parse_args(list(argv))


REQUIRED = {  # what each command needs besides the option under test
    "translate": ["--model", "m"],
    "export": ["--model", "m"],
    "convert": ["--from", "marian"],
    "tokenizer": ["--files", "a.txt", "--output_dir", "o"],
    "average": ["--run_dir", "r", "--output_dir", "o"],
    "prune": ["--model", "m", "--output_dir", "o"],
    "push": ["--model", "m"],
    "card": ["--model", "m"],
    "train": [],
}


@pytest.mark.parametrize(
    "command, old, new, expected",
    [
        ("translate", ["--batch_tokens", "100"], "max_tokens", 100),
        ("translate", ["--dtype", "bfloat16"], "mixed_precision", "bf16"),
        ("translate", ["--dtype", "float32"], "mixed_precision", "no"),
        ("translate", ["--format", "jsonl"], "output_format", "jsonl"),
        ("export", ["--output", "out"], "output_dir", "out"),
        ("convert", ["--output", "out"], "output_dir", "out"),
        ("tokenizer", ["--output", "out"], "output_dir", "out"),
        ("tokenizer", ["--no-progress"], "progress", False),
        ("tokenizer", ["--no-ignore_merges"], "ignore_merges", False),
        ("average", ["--overwrite"], "overwrite_output_dir", True),
        ("prune", ["--overwrite"], "overwrite_output_dir", True),
        ("push", ["--repo_id", "me/model"], "hub_model_id", "me/model"),
        ("card", ["--repo_id", "me/model"], "hub_model_id", "me/model"),
        ("train", ["--model_name_or_path", "saved"], "model", "saved"),
    ],
)
def test_old_spellings_still_work_with_a_deprecation_note(command, old, new, expected, capsys):
    args = parse(command, *REQUIRED[command], *old)
    value = getattr(args, new)
    assert (str(value) if isinstance(expected, str) else value) == expected
    note = capsys.readouterr().err.strip()
    assert note.startswith(f"warning: {old[0]} is deprecated; use --") and len(note.splitlines()) == 1


def test_the_new_spellings_give_no_note_and_the_old_are_hidden_from_help(capsys):
    args = parse("translate", "--model", "m", "--max_tokens", "100", "--mixed_precision", "bf16", "--no_progress")
    assert (args.max_tokens, args.mixed_precision, args.progress) == (100, "bf16", False)
    assert capsys.readouterr().err == ""
    help_text = command_parsers()["translate"].format_help()
    assert "--max_tokens" in help_text and "--batch_tokens" not in help_text and "--dtype" not in help_text


def test_an_old_value_outside_the_old_choices_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as exit_:
        parse("translate", "--model", "m", "--dtype", "int8")
    assert exit_.value.code == 2
    assert "invalid choice: 'int8'" in capsys.readouterr().err


def test_an_old_yaml_key_is_renamed_with_a_note_and_an_unknown_one_is_refused(tmp_path, capsys):
    config = tmp_path / "old.yaml"
    config.write_text("model_name_or_path: saved\nmax_tokens: 512\n")
    args = parse("train", "--config", str(config))
    assert (str(args.model), args.max_tokens) == ("saved", 512)
    assert {"model", "max_tokens", "config"} <= args.explicit
    assert "warning: 'model_name_or_path' in --config" in capsys.readouterr().err
    config.write_text("batch_tokens: 512\n")  # translate's old name, never train's
    with pytest.raises(UsageError, match="unknown option 'batch_tokens'"):
        parse("train", "--config", str(config))


def test_the_command_line_wins_over_the_yaml_file(tmp_path):
    config = tmp_path / "c.yaml"
    config.write_text("max_tokens: 512\n")
    assert parse("train", "--max_tokens", "4096", "--config", str(config)).max_tokens == 4096
    assert parse("train", "--config", str(config)).max_tokens == 512


def test_an_old_runs_saved_options_are_renamed_for_its_command_only(capsys):
    saved = {"model_name_or_path": "init", "output": "kept", "learning_rate": 1e-3}
    assert rename_legacy_keys(saved, where="run_args.json", command="train") == {
        "model": "init", "output": "kept", "learning_rate": 1e-3,
    }  # fmt: skip
    assert capsys.readouterr().err.count("warning:") == 1
    both = rename_legacy_keys({"model_name_or_path": "old", "model": "new"}, where="f", command="train")
    assert both == {"model": "new"}


def test_resuming_an_old_run_compares_its_renamed_options(tmp_path, capsys):
    """run_args.json of a version before the registry says `model_name_or_path`: a resume with another --model is
    refused as a changed run-defining option, under today's name."""
    from vaswani.training import run_dir

    output = tmp_path / "run"
    from vaswani.constants import MARKER_NAME

    (output / "checkpoints" / "step-00000002").mkdir(parents=True)
    (output / "checkpoints" / "step-00000002" / MARKER_NAME).write_text(json.dumps({"complete": True}))
    (output / "run_args.json").write_text(json.dumps({"model_name_or_path": "first", "train_file": None}))
    args = parse("train", "--output_dir", str(output), "--resume_from_checkpoint", "latest", "--model", "second")
    with pytest.raises(UsageError, match="--model 'first' -> 'second'"):
        run_dir.prepare_output_dir(args)
    assert "warning: 'model_name_or_path' in" in capsys.readouterr().err


# ---------------------------------------------------------------------------------------------------------------
# No help text, page or message teaches an old spelling (issue 40, item 4)
# ---------------------------------------------------------------------------------------------------------------
ROOT = __import__("pathlib").Path(__file__).resolve().parents[1]
# Where a user reads a command line: the README, docs/, and the package's own text (help, messages, docstrings).
# benchmarks/README.md's records may quote the command that ran; vaswani/options.py registers the old spellings.
TEXT_FILES = ["README.md", "docs/*.md", "vaswani/**/*.py", "tokenization/*.py", "modeling_vaswani/*.py", "train.py",
              "configs/*.yaml"]  # fmt: skip
# The start of a command line: `vaswani COMMAND`, `python -m tokenization train`, `train.py`.
COMMAND_START = re.compile(r"\bvaswani\s+([a-z]+)\b|python -m tokenization train\b|\btrain\.py\b")
# A command line ends at the end of its line (unless continued with a backslash), a backtick, a quote, a pipe, a
# semicolon, `&&` or a closing parenthesis.
COMMAND_END = re.compile(r"(?<!\\)\n|`|\"|'|\||;|&&|\)")


def deprecated_flags() -> dict[str, set[str]]:
    """Each command (registry name) -> its hidden old spellings, from the parsers themselves."""
    flags: dict[str, set[str]] = {}
    for command, parser in command_parsers().items():
        hidden = {flag for action in parser._actions if getattr(action, "deprecated", False)
                  for flag in action.option_strings}  # fmt: skip
        flags.setdefault(COMMAND_OF.get(command, command), set()).update(hidden)
    return flags


def old_spellings_in(text: str, deprecated: dict[str, set[str]], visible: set[str]) -> list[str]:
    """The old spellings `text` teaches: a command line (`vaswani COMMAND ...`) with one of that command's old flags,
    or anywhere, an old flag that is no command's flag today."""
    found = []
    for start in COMMAND_START.finditer(text):
        command = start.group(1) or ("tokenizer" if start.group(0).startswith("python") else "train")
        end = COMMAND_END.search(text, start.end())
        line = text[start.start() : end.start() if end else len(text)]
        found += [f"{line.strip()!r} uses {flag}" for flag in re.findall(r"--[A-Za-z0-9][\w-]*", line)
                  if flag in deprecated.get(command, ())]  # fmt: skip
    for flag in sorted(set().union(*deprecated.values()) - visible):  # (`old_negative=` registers an old spelling)
        if re.search(r"(?<!old_negative=\")" + re.escape(flag) + r"(?![\w-])", text):
            found.append(f"names {flag}")
    return found


def test_no_help_text_doc_page_or_message_names_a_deprecated_alias():
    deprecated = deprecated_flags()
    visible = {flag for parser in command_parsers().values() for action in parser._actions
               if action.help != argparse.SUPPRESS for flag in action.option_strings}  # fmt: skip
    problems = [f"vaswani {command} --help: {p}" for command, parser in command_parsers().items()
                for p in old_spellings_in(parser.format_help(), deprecated, visible)]  # fmt: skip
    files = sorted({path for pattern in TEXT_FILES for path in ROOT.glob(pattern)} - {ROOT / "vaswani/options.py"})
    assert len(files) > 50
    for path in files:
        problems += [f"{path.relative_to(ROOT)}: {p}"
                     for p in old_spellings_in(path.read_text(encoding="utf-8"), deprecated, visible)]  # fmt: skip
    assert problems == []


def test_the_old_spelling_check_finds_an_alias_in_a_command_line_and_a_retired_flag_anywhere():
    deprecated, visible = {"export": {"--output"}, "push": {"--repo_id"}}, {"--output", "--output_dir"}
    assert old_spellings_in("run `vaswani export --model m --output out` first", deprecated, visible) == [
        "'vaswani export --model m --output out' uses --output"
    ]
    continued = "vaswani export --model m \\\n    --output out\nvaswani translate --output x"
    assert [p.split(" uses ")[1] for p in old_spellings_in(continued, deprecated, visible)] == ["--output"]
    assert old_spellings_in("tag it with --repo_id first", deprecated, visible) == ["names --repo_id"]
    assert old_spellings_in('add_switch(p, "--x", old_negative="--repo_id")', deprecated, visible) == []
    assert old_spellings_in("vaswani translate --output x; vaswani export --output_dir y", deprecated, visible) == []
