"""The command-line vocabulary: one spelling per idea across every command, defined once here (sockeye's
`arguments.py` + `constants.py`).

An idea several commands share (a model folder, an output folder, a token budget, a precision, ...) is an `Option`
in `REGISTRY`: its flag, its type and validation, its help. A command adds it with `add_option(parser, NAME,
command=...)`, giving only what differs between commands (the default, whether it is required, a longer help).
The spellings used before the registry keep working as hidden aliases that print a one-line deprecation note, on
the command line, as keys of a YAML `--config` file and in the `run_args.json` of an old run that is resumed
(`rename_legacy_keys`). tests/test_options_registry.py walks every command's parser and fails when an option that
means a registered idea is not the registry's, when one idea is spelt two ways, or when a flag is hyphenated.

`ConfigArgumentParser` is the parser of every command: a command with a `--config` option also reads its options
from that YAML file (the command line wins), and every parse records the options the user set (`args.explicit`).

Spellings follow transformers and accelerate where they have one: `--output_dir`, `--overwrite_output_dir`,
`--hub_model_id`, `--mixed_precision`; the others follow the commands' majority (`--model`, `--max_tokens`).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vaswani.devices import DTYPE_TO_MIXED_PRECISION, MIXED_PRECISION_CHOICES
from vaswani.errors import UsageError

# --- argparse types -------------------------------------------------------------------------------------------------


def whole_number(text: str, at_least: int) -> int:
    """`text` as an int of at least `at_least`, or argparse's error naming what was wrong."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < at_least:
        raise argparse.ArgumentTypeError(f"must be at least {at_least}, got {value}")
    return value


def number(text: str) -> float:
    """`text` as a float (nan and inf included: each type says which numbers it takes), or argparse's error."""
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None


def positive_int(text: str) -> int:
    """argparse type for counts: a whole number, at least 1."""
    return whole_number(text, 1)


def non_negative_int(text: str) -> int:
    """argparse type for a count where 0 means "no limit": a whole number, at least 0."""
    return whole_number(text, 0)


def positive_float(text: str) -> float:
    """argparse type for times and rates: a finite number above 0."""
    value = number(text)
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a number above 0, got {text}")
    return value


def non_negative_float(text: str) -> float:
    """argparse type for a weight such as the length penalty, or a wait: a finite number >= 0."""
    value = number(text)
    if not value >= 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a finite number of at least 0, got {text}")
    return value


def length_ratio(text: str) -> float:
    """argparse type for a ratio of two lengths, the longer over the shorter: a finite number of at least 1."""
    value = number(text)
    if not 1 <= value < float("inf"):
        raise argparse.ArgumentTypeError(
            f"must be a finite number of at least 1 (the longer side's length over the shorter's), got {text}"
        )
    return value


def probability(text: str) -> float:
    """argparse type for a probability mass to keep: a number above 0 and at most 1."""
    value = number(text)
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"must be a number above 0 and at most 1, got {text}")
    return value


# --- the registry ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Option:
    """One idea of the command line: its `flag`, the argparse `settings` every command shares (type, metavar,
    choices, action), the `help` commands may extend, and `aliases`: each old spelling with the commands that had it
    (and, where the old spelling took other values, how they map onto the new ones)."""

    flag: str
    help: str
    settings: dict = field(default_factory=dict)
    aliases: dict[str, tuple[str, ...]] = field(default_factory=dict)
    alias_values: dict[str, dict[str, str]] = field(default_factory=dict)
    negative: str | None = None  # a switch's "off" flag (`--no_progress`), for options that are on, off or automatic

    @property
    def dest(self) -> str:
        return self.flag[2:]


REGISTRY: dict[str, Option] = {
    # files and folders
    "model": Option(
        "--model", "a model folder (local)", dict(type=Path, metavar="DIR"),
        aliases={"--model_name_or_path": ("train",)},
    ),
    "output_dir": Option(
        "--output_dir", "the folder to write", dict(type=Path, metavar="OUT"),
        aliases={"--output": ("export", "convert", "tokenizer")},
    ),
    "overwrite_output_dir": Option(
        "--overwrite_output_dir", "write into a non-empty --output_dir", dict(action="store_true"),
        aliases={"--overwrite": ("average", "prune")},
    ),
    "output": Option("--output", "the file to write", dict(type=Path, metavar="FILE")),
    "input": Option("--input", "the file to read (default: stdin)", dict(type=Path, metavar="FILE")),
    "tokenizer": Option("--tokenizer", "an existing tokenizer folder (a model folder holds one)", dict(metavar="DIR")),
    "trust_remote_code": Option(
        "--trust_remote_code",
        "run the Python code of a model folder that is not a Vaswani model (only for folders you trust)",
        dict(action="store_true"),
    ),
    "hub_model_id": Option(
        "--hub_model_id", "the Hub repository, NAME or OWNER/NAME", dict(metavar="ID"),
        aliases={"--repo_id": ("push", "card")},
    ),
    # data and vocabulary
    "source_lang": Option("--source_lang", "language code of the source side", dict(metavar="LANG")),
    "target_lang": Option("--target_lang", "language code of the target side", dict(metavar="LANG")),
    "max_source_length": Option("--max_source_length", "source length limit in tokens, EOS included",
                                dict(type=positive_int, metavar="N")),
    "vocab_size": Option("--vocab_size", "BPE vocabulary size (paper: ~37k for EN-DE), rounded up to a multiple of 8 "
                         "with unused filler tokens", dict(type=positive_int)),
    "min_frequency": Option("--min_frequency", "minimum count of a merged pair", dict(type=positive_int)),
    "special_tokens_layout": Option(
        "--special_tokens_layout", "ids of the special tokens: paper: <pad>=0 <s>=1 </s>=2 <unk>=3; fairseq: <s>=0 "
        "<pad>=1 </s>=2 <unk>=3",
    ),
    "preprocessing_num_workers": Option(
        "--preprocessing_num_workers", "processes that tokenize the data", dict(type=positive_int, metavar="N")
    ),
    # the corpus (vaswani train and vaswani prepare)
    "task": Option("--task", "the model and objective: translation, causal_lm or masked_lm"),
    "train_file": Option("--train_file", "the training data (a file, or a prefix of two aligned files)",
                         dict(metavar="PATH")),
    "validation_file": Option("--validation_file", "the validation data (same formats as --train_file)",
                              dict(metavar="PATH")),
    "test_file": Option("--test_file", "the test data (same formats as --train_file)", dict(metavar="PATH")),
    "pairs_file": Option("--pairs_file", "sentence pairs (same formats as --train_file)", dict(metavar="PATH")),
    "max_test_samples": Option(
        "--max_test_samples", "score the first N test pairs (default: all), the split named test[:N]",
        dict(type=int, metavar="N"),  # checked by the command: a positive integer or unset
    ),
    "dataset_name": Option("--dataset_name", "a `datasets` name, or 'demo' for the built-in set", dict(metavar="NAME")),
    "dataset_config_name": Option("--dataset_config_name", "the `datasets` configuration, e.g. 'de-en'",
                                  dict(metavar="NAME")),
    "validation_size": Option("--validation_size", "examples carved out of train when no validation data is given",
                              dict(type=int, metavar="N")),
    "max_target_length": Option("--max_target_length", "target length limit in tokens, EOS included",
                                dict(type=positive_int, metavar="N")),
    "overlong": Option("--overlong", "pairs over the length limits", dict(choices=["drop", "truncate"])),
    # cleaning the training pairs (vaswani/data/cleaning.py)
    "max_length_ratio": Option(
        "--max_length_ratio", "drop training pairs whose longer side has more than R times the tokens of the shorter "
        "(EOS not counted; fairseq's WMT'14 recipe: 1.5; Moses' clean-corpus-n: 9, on words); default: no limit",
        dict(type=length_ratio, metavar="R"),
    ),
    "drop_duplicates": Option(
        "--drop_duplicates", "drop training pairs that repeat an earlier pair exactly (both sides); the first stays",
        dict(action="store_true"),
    ),
    "drop_copies": Option(
        "--drop_copies", "drop training pairs whose target is the source again (untranslated text, the most harmful "
        "noise of crawled corpora: Khayrallah & Koehn, 2018; names and numbers go too)", dict(action="store_true"),
    ),
    "drop_held_out_sources": Option(
        "--drop_held_out_sources", "drop training pairs whose source sentence is the source of a validation or test "
        "pair, so that the model is chosen and scored on sentences it did not learn", dict(action="store_true"),
    ),
    "text_column": Option("--text_column", "the field or column that holds an LM's text", dict(metavar="NAME")),
    "block_size": Option("--block_size", "tokens per language-model example", dict(type=int, metavar="N")),
    "packing": Option("--packing", "concatenate an LM's texts into blocks (yes) or one example per line (no)",
                      dict(choices=["yes", "no"])),
    "cache_dir": Option("--cache_dir", "where `datasets` caches downloads and the data caches", dict(metavar="DIR")),
    "seed": Option("--seed", "the random seed", dict(type=int)),
    # batching, precision, devices
    "max_tokens": Option(
        "--max_tokens", "token budget of a batch (sentences x longest sequence, padding included)",
        dict(type=positive_int, metavar="N"), aliases={"--batch_tokens": ("translate",)},
    ),
    "mixed_precision": Option(
        "--mixed_precision", "compute precision: no (float32), bf16 or fp16",
        dict(choices=MIXED_PRECISION_CHOICES), aliases={"--dtype": ("translate",)},
        alias_values={"--dtype": DTYPE_TO_MIXED_PRECISION},  # the old --dtype took torch's names
    ),
    "device": Option("--device", "auto (a GPU if there is one), cpu, cuda or cuda:N", dict(metavar="DEVICE")),
    "threads": Option(
        "--threads", "CPU threads (default: PyTorch's, one per core unless OMP_NUM_THREADS says otherwise)",
        dict(type=positive_int, metavar="N"),
    ),
    "parallel_batches": Option(
        "--parallel_batches", "ctranslate2 backend: batches decoded at once, each on threads / N cores (default: one "
        "per core on CPU, CTranslate2's throughput setting; 1 on GPU)", dict(type=positive_int, metavar="N"),
    ),
    # decoding
    "num_beams": Option("--num_beams", "beam size (paper: 4)", dict(type=positive_int, metavar="K")),
    "length_penalty": Option(
        "--length_penalty", "alpha of beam search's length normalisation (paper: 0.6)",
        dict(type=non_negative_float, metavar="ALPHA"),
    ),
    "max_new_tokens": Option("--max_new_tokens", "at most N output tokens", dict(type=positive_int, metavar="N")),
    "paper_decoding": Option(
        "--paper_decoding",
        "the paper's beam search: the GNMT length penalty ((5 + |Y|) / 6) ** alpha (generate()'s length_penalty "
        "divides by |Y| ** alpha) and a cap of source length + 50 per sentence",
        dict(action="store_true"),
    ),
    "backend": Option(
        "--backend", "auto: CTranslate2 for a folder written by `vaswani export --format ctranslate2`, PyTorch "
        "otherwise (choices: vaswani.inference.engines.BACKENDS)",
    ),
    "buffer_lines": Option(
        "--buffer_lines", "lines read, sorted by length and processed at a time", dict(type=positive_int, metavar="N")
    ),
    "quantization": Option(
        "--quantization", "weight type of a CTranslate2 export: int8 (8-bit weights, float32 elsewhere: the fastest on "
        "CPU), int8_float32, int16, float16, bfloat16, float32 (choices: vaswani.export.ctranslate2.QUANTIZATIONS)",
    ),
    "output_format": Option(
        "--output_format", "the format of the output (choices: vaswani.inference.outputs)",
        aliases={"--format": ("translate",)},
    ),
    # the console
    "progress": Option(
        "--progress", "progress bars on stderr (--progress: always, --no_progress: never)",
        dict(default=None), aliases={"--no-progress": ("tokenizer",)}, negative="--no_progress",
    ),
}  # fmt: skip


def _deprecated(old: str, new: str) -> None:
    print(f"warning: {old} is deprecated; use {new} (the old spelling will be removed)", file=sys.stderr)


class _DeprecatedAlias(argparse.Action):
    """A hidden old spelling: stores into the new option's dest (mapping old values onto new ones) and says so."""

    def __init__(self, option_strings, dest, new: str, values_map: dict | None = None, const=None, nargs=None,
                 **kwargs):  # fmt: skip
        self.new, self.values_map = new, values_map or {}
        super().__init__(option_strings, dest, nargs=nargs, const=const, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        _deprecated(option_string, self.new)
        if self.nargs == 0:
            values = self.const
        elif values in self.values_map:
            values = self.values_map[values]
        elif self.values_map:
            parser.error(f"argument {option_string}: invalid choice: {values!r} (choose from {list(self.values_map)})")
        setattr(namespace, self.dest, values)


def add_option(parser, name: str, command: str, help: str | None = None, **overrides: Any) -> argparse.Action:
    """Add the registered option `name` to `parser` (a parser or an argument group) of `command`, with the old
    spellings that `command` had as hidden aliases. `help` replaces the registry's; `overrides` set what differs
    between commands (`default`, `required`, `choices` where they come from a heavier module)."""
    option = REGISTRY[name]
    settings = {**option.settings, **overrides}
    aliases = {old: option.alias_values.get(old) for old, commands in option.aliases.items() if command in commands}
    # argparse counts a required option as given only when its own flag is: with old spellings beside it, the
    # parser (`ConfigArgumentParser`) checks it after parsing instead
    required = bool(aliases) and settings.pop("required", False)
    if option.negative is not None:  # on / off / automatic: --progress, --no_progress
        action = parser.add_argument(option.flag, option.negative, action=_Switch, dest=option.dest,
                                     help=help or option.help, **{k: v for k, v in settings.items() if k != "action"})  # fmt: skip
    else:
        action = parser.add_argument(option.flag, dest=option.dest, help=help or option.help, **settings)
    action.registry_name, action.required_with_aliases = name, required
    for old, values_map in aliases.items():
        if option.negative is not None:  # `--no-progress`: the old spelling of the "off" flag
            alias = parser.add_argument(old, action=_DeprecatedAlias, new=option.negative, nargs=0, const=False,
                                        dest=option.dest, help=argparse.SUPPRESS)  # fmt: skip
        elif settings.get("action") == "store_true":
            alias = parser.add_argument(old, action=_DeprecatedAlias, new=option.flag, nargs=0, const=True,
                                        dest=option.dest, help=argparse.SUPPRESS)  # fmt: skip
        else:
            alias = parser.add_argument(
                old, action=_DeprecatedAlias, new=option.flag, values_map=values_map,
                dest=option.dest, type=None if values_map else settings.get("type"),
                metavar=settings.get("metavar"), help=argparse.SUPPRESS,
            )  # fmt: skip
        alias.registry_name = name
        alias.deprecated = True
    return action


class _Switch(argparse.Action):
    """`--X` sets True, its `negative` flag (`--no_X`) sets False; unset stays at the default (automatic)."""

    def __init__(self, option_strings, dest, default=None, help=None, **kwargs):
        super().__init__(option_strings, dest, nargs=0, default=default, help=help, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        setattr(namespace, self.dest, not option_string.startswith("--no_"))


def add_switch(parser, flag: str, default: bool, help: str, old_negative: str | None = None) -> argparse.Action:
    """A command's own on/off option: `--X` and `--no_X` (underscored like every other flag); `old_negative` keeps a
    former spelling of the off flag (`--no-X`) as a hidden alias."""
    negative = "--no_" + flag[2:]
    action = parser.add_argument(flag, negative, action=_Switch, dest=flag[2:], default=default, help=help)
    if old_negative:
        alias = parser.add_argument(old_negative, action=_DeprecatedAlias, new=negative, nargs=0, const=False,
                                    dest=flag[2:], help=argparse.SUPPRESS)  # fmt: skip
        alias.deprecated = True
    return action


# --- YAML configs and old runs --------------------------------------------------------------------------------------


def rename_legacy_keys(values: dict, where: str, command: str) -> dict:
    """`values` (a YAML config's or an old run's `run_args.json`, of `command`) with the old option names that command
    had replaced by today's, and their values mapped where the old option took other values; each old name found is
    said on stderr. A mapping that has both the old and the new name keeps the new one."""
    renamed = dict(values)
    for name, option in REGISTRY.items():
        for old, commands in option.aliases.items():
            key = old[2:]
            if command not in commands or key not in renamed or option.negative is not None:
                continue
            value = renamed.pop(key)
            renamed.setdefault(name, option.alias_values.get(old, {}).get(value, value))
            _deprecated(f"{key!r} in {where}", repr(name))
    return renamed


class DefaultsHelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """--help with each option's default, except where there is none to show (None: unset, or resolved later, as
    the option's help says)."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        return action.help if action.default is None else super()._get_help_string(action)


class ConfigArgumentParser(argparse.ArgumentParser):
    """An ArgumentParser that records which options were given (`args.explicit`) and, when the command has a
    `--config` option, reads option: value pairs from that YAML file as defaults (the command line wins). Unknown
    keys, values of the wrong type and values outside the choices are `UsageError`s naming the file and key.
    `command` names the command for the old spellings of its YAML keys."""

    def __init__(self, *args, command: str = "", **kwargs):
        super().__init__(*args, **kwargs)
        self.command = command

    def parse_known_args(self, args: Sequence[str] | None = None, namespace=None):
        args = sys.argv[1:] if args is None else list(args)
        from_yaml = {}
        if "--config" in self._option_string_actions:
            probe = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
            probe.add_argument("--config")
            path = probe.parse_known_args(args)[0].config
            if path is not None:
                from_yaml = read_yaml_options(self, path, command=self.command)
                self.set_defaults(**from_yaml)
        parsed, extras = super().parse_known_args(args, namespace)
        missing = [action.option_strings[0] for action in self._actions
                   if getattr(action, "required_with_aliases", False) and getattr(parsed, action.dest) is None]  # fmt: skip
        if missing:
            self.error(f"the following arguments are required: {', '.join(missing)}")
        given = {self._option_string_actions[word.split("=", 1)[0]].dest for word in args
                 if word.split("=", 1)[0] in self._option_string_actions}  # fmt: skip
        parsed.explicit = set(from_yaml) | given
        return parsed, extras


def read_yaml_options(parser: argparse.ArgumentParser, path: str | os.PathLike, command: str) -> dict:
    """The options of the YAML file `path`, converted and checked as the command line would."""
    import yaml  # start-up: only commands given a --config file read YAML

    if os.path.isdir(path):
        raise UsageError(f"--config {path} is a folder: give a YAML file (e.g. configs/small-data.yaml)")
    if not os.path.isfile(path):
        raise UsageError(f"--config {path}: no such file.")
    try:
        text = Path(path).read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise UsageError(
            f"--config {path} is not UTF-8 text ({exc.reason} at byte {exc.start}): save it as UTF-8 (e.g. "
            f"`iconv -f latin1 -t utf-8`)"
        ) from exc
    try:
        values = yaml.safe_load(text) or {}
    except yaml.YAMLError as exc:
        raise UsageError(f"--config {path} is not valid YAML: {exc}") from exc
    if not isinstance(values, dict):
        raise UsageError(f"--config {path} must hold a mapping of option: value.")
    values = rename_legacy_keys(values, where=f"--config {path}", command=command)
    actions = {action.dest: action for action in parser._actions if not getattr(action, "deprecated", False)}
    return {key: _yaml_value(actions, path, key, value) for key, value in values.items()}


def _yaml_value(actions: dict[str, argparse.Action], path, key, value):
    if key not in actions or key in ("help", "config"):
        close = [name for name in actions if name.startswith(str(key)[:4])][:3]
        hint = f" (did you mean {', '.join(close)}?)" if close else ""
        raise UsageError(f"--config {path}: unknown option {key!r}{hint}.")
    action = actions[key]
    convert: Callable | None = action.type
    if value is not None and convert is not None:
        try:  # the command line's conversion; lists and booleans pass through as YAML typed them
            value = convert(value if isinstance(value, (list, bool)) else str(value))
        except (argparse.ArgumentTypeError, ValueError, TypeError) as exc:
            raise UsageError(f"--config {path}: option {key!r}: {exc}") from None
    if action.choices is not None and value is not None and value not in action.choices:
        raise UsageError(f"--config {path}: {key}={value!r} is not one of {list(action.choices)}.")
    return value
