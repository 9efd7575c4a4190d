"""A prepared corpus: the tokenized splits of a corpus in a self-describing folder, written once by `vaswani prepare`
and read by `vaswani train --prepared_data DIR` without the text being read or tokenized again (issue 30).

    DIR/manifest.json      what the folder holds (`MANIFEST_FORMAT`): the task, the source files with their size and
                           modification time, the options that shaped the tokens, the tokenizer's hash, the integer
                           type of the token columns, per split the counts (examples read, kept, over-long, dropped)
    DIR/tokenizer.json ... the tokenizer (`save_pretrained`), which `vaswani train --prepared_data` loads
    DIR/train/, validation/, test/
                           `datasets.save_to_disk` folders of the tokenized splits, memory-mapped when read:
                           in the tokenized cache's compact form (`vaswani.data.tokenized.compact`): input_ids
                           (and the translation's labels) as uint16 where the vocabulary has at most 65,536 ids, else
                           int32; the lengths as int32 (source_length and target_length; LM: length); no attention
                           masks (the collators make them)
    DIR/text/validation/, text/test/
                           the held-out text (the references of BLEU and chrF; small)

The folder is written under a temporary name beside it and renamed when complete.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import datasets

from vaswani.constants import TMP_PREFIX
from vaswani.data.cleaning import CLEANING_OPTIONS
from vaswani.data.tokenized import compact, token_dtype
from vaswani.errors import DataError, UsageError

MANIFEST = "manifest.json"
MANIFEST_FORMAT = "vaswani-prepared-data"
MANIFEST_VERSION = 1
TEXT_SUBDIR = "text"

# The options that shape the tokens, per task: recorded in the manifest, and refused beside --prepared_data when
# they disagree with it.
DATA_OPTIONS = ("train_file", "validation_file", "test_file", "dataset_name", "dataset_config_name", "validation_size")
TOKENIZER_OPTIONS = ("tokenizer", "vocab_size", "min_frequency", "special_tokens_layout", "tokenizer_sample")
TASK_OPTIONS = {
    "translation": (
        "source_lang",
        "target_lang",
        "max_source_length",
        "max_target_length",
        "overlong",
        *CLEANING_OPTIONS,
    ),
    "language_model": ("text_column", "block_size", "packing"),
}
PATH_OPTIONS = ("train_file", "validation_file", "test_file", "tokenizer")


def task_family(task: str) -> str:
    """ "translation", or "language_model" for causal_lm and masked_lm (the same tokens: the masked LM's masks are
    drawn in training)."""
    return "translation" if task == "translation" else "language_model"


def recorded_options(args) -> dict:
    """The options of `args` that shape the tokens of its task, as the manifest records them (paths absolute)."""
    names = (*DATA_OPTIONS, *TOKENIZER_OPTIONS, *TASK_OPTIONS[task_family(args.task)])
    return {name: _normalized(name, getattr(args, name, None)) for name in names}


def _normalized(name: str, value):
    if name in PATH_OPTIONS and value is not None:
        return os.path.abspath(os.fspath(value))
    return value


def _as_given(name: str, value) -> str:
    """How a command line gives `value` to --name: "no --name" (unset, or a switch that is off), "--name" (a switch
    that is on), else "--name VALUE". Two values are the same option when they read the same."""
    if value is None or value is False:
        return f"no --{name}"
    return f"--{name}" if value is True else f"--{name} {value}"


def source_files(paths: list[str]) -> list[dict]:
    """Each source file's identity: its absolute path, size in bytes and modification time (ns)."""
    files = []
    for path in paths:
        stat = os.stat(path)
        files.append({"path": os.path.abspath(path), "size": stat.st_size, "mtime_ns": stat.st_mtime_ns})
    return files


def write_prepared(
    output_dir: Path,
    *,
    tokenized: dict[str, datasets.Dataset],
    held_out_text: dict[str, datasets.Dataset],
    tokenizer,
    manifest: dict,
    overwrite: bool = False,
) -> Path:
    """Write the prepared folder (see the module docstring) under a temporary name, then rename it to `output_dir`.

    A non-empty `output_dir` is replaced only with `overwrite`, and only when it is a prepared folder itself."""
    check_prepared_output(output_dir, overwrite)
    staging = output_dir.parent / f"{TMP_PREFIX}{output_dir.name}-{os.getpid()}"
    if staging.exists():
        shutil.rmtree(staging)
    staging.mkdir(parents=True)
    try:
        vocab_size = len(tokenizer)
        for split, dataset in tokenized.items():
            compact(dataset, vocab_size, staging / "work").save_to_disk(str(staging / split))
        for split, dataset in held_out_text.items():
            dataset.flatten_indices().save_to_disk(str(staging / TEXT_SUBDIR / split))
        shutil.rmtree(staging / "work", ignore_errors=True)
        tokenizer.save_pretrained(staging)
        manifest = {**manifest, "token_dtype": token_dtype(vocab_size), "vocab_size": vocab_size}
        (staging / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n", encoding="utf-8")
        if output_dir.exists():
            aside = output_dir.parent / f"{TMP_PREFIX}replaced-{output_dir.name}-{os.getpid()}"
            os.rename(output_dir, aside)
            os.rename(staging, output_dir)
            shutil.rmtree(aside)
        else:
            os.rename(staging, output_dir)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return output_dir


def check_prepared_output(output_dir: Path, overwrite: bool) -> None:
    """Refuse an output folder whose files would be lost: a non-empty folder without `overwrite`, or one that is
    not a prepared folder (a model, someone's data) even with it."""
    if output_dir.exists() and not output_dir.is_dir():
        raise UsageError(f"--output_dir {output_dir} is a file; give a folder")
    if not output_dir.is_dir() or not any(output_dir.iterdir()):
        return
    if not overwrite:
        raise UsageError(
            f"--output_dir {output_dir} is not empty: pass --overwrite_output_dir to replace the prepared data in it, "
            "or give another folder"
        )
    if not (output_dir / MANIFEST).is_file():
        raise UsageError(
            f"--output_dir {output_dir} holds files but no {MANIFEST}: it is not a prepared-data folder, so "
            "--overwrite_output_dir does not replace it; give another folder"
        )


# ---------------------------------------------------------------------------------------------------------------------
# Reading
# ---------------------------------------------------------------------------------------------------------------------


def read_manifest(folder: str | os.PathLike) -> dict:
    """The manifest of a prepared folder; `DataError` if `folder` is not one."""
    path = Path(folder) / MANIFEST
    if not Path(folder).is_dir():
        raise DataError(f"--prepared_data {folder}: no such folder. Write one with `vaswani prepare --output_dir`.")
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise DataError(
            f"--prepared_data {folder} has no {MANIFEST}: not a folder written by `vaswani prepare`."
        ) from None
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise DataError(
            f"--prepared_data {folder}: {MANIFEST} is damaged ({error}); prepare the data again."
        ) from None
    if not isinstance(manifest, dict) or manifest.get("format") != MANIFEST_FORMAT:
        raise DataError(f"--prepared_data {folder}: {MANIFEST} is not a vaswani prepared-data manifest.")
    if manifest.get("version") != MANIFEST_VERSION:
        raise DataError(
            f"--prepared_data {folder} was written in format version {manifest.get('version')}; this vaswani reads "
            f"version {MANIFEST_VERSION}: prepare the data again with this version."
        )
    return manifest


def apply_manifest(args, manifest: dict) -> None:
    """Take the prepared folder's options into `args` (`args.prepared_data`): an option the user set (command line or
    YAML, `args.explicit`) that disagrees with the manifest is a `UsageError` naming both values; the task's limits
    and the data's sources (files, dataset) take the manifest's values. The folder's tokenizer becomes
    `args.tokenizer`."""
    folder = args.prepared_data
    if task_family(args.task) != task_family(manifest["task"]):
        raise UsageError(
            f"--prepared_data {folder} holds data of --task {manifest['task']}, but this run is --task {args.task}: "
            f"pass --task {manifest['task']}, or prepare the data for --task {args.task}."
        )
    # an option the manifest lacks did not exist when the folder was prepared: the folder was prepared without it
    recorded_options = {name: None for name in TASK_OPTIONS[task_family(args.task)]} | manifest["options"]
    for name, recorded in recorded_options.items():
        given = _normalized(name, getattr(args, name, None))
        if name in args.explicit and _as_given(name, given) != _as_given(name, recorded):
            again = (
                f"without --{name}"
                if given in (None, False)
                else f"with it (`vaswani prepare ... {_as_given(name, given)}`)"
            )
            raise UsageError(
                f"{_as_given(name, given)} disagrees with --prepared_data {folder}, which was prepared with "
                f"{_as_given(name, recorded)} (manifest.json): drop --{name}, or prepare the data again {again}."
            )
        if name not in manifest["options"]:
            continue  # (the option's default: what the folder was prepared with)
        if name in TASK_OPTIONS[task_family(args.task)]:
            setattr(args, name, recorded)  # the limits the tokens were made with (checks, evaluation)
        elif name in DATA_OPTIONS:
            setattr(args, name, recorded)  # where the tokens came from: run_args.json and the model card say it
    args.tokenizer = os.fspath(folder)


def load_prepared(folder: str | os.PathLike, manifest: dict) -> tuple[dict, dict, str]:
    """(tokenized splits, held-out text, the summary for the log) of a prepared folder, memory-mapped."""
    folder = Path(folder)
    splits = list(manifest["counts"])
    missing = [split for split in splits if not (folder / split).is_dir()]
    if missing:
        raise DataError(f"--prepared_data {folder}: the split folder(s) {missing} are missing; prepare it again.")
    tokenized = {split: datasets.load_from_disk(str(folder / split)) for split in splits}
    text = {
        split: datasets.load_from_disk(str(folder / TEXT_SUBDIR / split))
        for split in splits
        if (folder / TEXT_SUBDIR / split).is_dir()
    }
    lines = [f"prepared data {folder} ({manifest['token_dtype']} tokens, vocabulary {manifest['vocab_size']:,}):"]
    for split, counts in manifest["counts"].items():
        details = ", ".join(f"{value:,} {name}" for name, value in counts.items() if name != "kept" and value)
        lines.append(f"{split}: {counts['kept']:,} examples" + (f" ({details})" if details else ""))
    lines += [f"from {source['path']} ({source['size']:,} bytes)" for source in manifest["sources"]]
    return tokenized, text, "\n".join(lines)


def check_sources_unchanged(manifest: dict) -> list[str]:
    """Notes for the log about source files that changed since the data was prepared (the prepared data stays what
    it was: training does not read them)."""
    notes = []
    for source in manifest["sources"]:
        path = source["path"]
        if not os.path.exists(path):
            continue  # moved away after preparing: nothing to compare
        stat = os.stat(path)
        if (stat.st_size, stat.st_mtime_ns) != (source["size"], source["mtime_ns"]):
            notes.append(f"note: {path} changed since the data was prepared; the prepared tokens are of the old file")
    return notes
