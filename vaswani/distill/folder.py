"""The output folder of `vaswani distill` (`--output_dir`): the names of what it holds, which folders a run may write
into, and the CTranslate2 exports it replaces without ever leaving half of one.

    OUT/distill_args.json              the options of the latest invocation (it marks the folder as a distillation's)
    OUT/teacher-ct2/                   the teacher's CTranslate2 export (a single PyTorch teacher; --quantization)
    OUT/distilled/distilled.json       what the chunks were translated from and with (the resume checks it)
    OUT/distilled/chunk-NNNNN.jsonl    the teacher's translations of --buffer_lines training pairs each
    OUT/distilled/train.jsonl          the student's training file (filtered, the original pairs mixed in)
    OUT/distilled/stats.json           the distilled data's statistics and the options the training file was built with
    OUT/student/                       the student's training run: `vaswani train`'s folder (final model, checkpoints)
    OUT/student-ct2/                   the student's CTranslate2 export
    OUT/distill_report.json            teacher and student on the test file

The names are defined here, once, as `vaswani prepare` defines its folder's (they are the names of this command's
folder, not of a model or run folder: `vaswani.constants`).
"""

from __future__ import annotations

import json
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

from vaswani.constants import TMP_PREFIX
from vaswani.errors import UsageError
from vaswani.export.ctranslate2 import export_ctranslate2, is_ctranslate2_folder
from vaswani.fileio import write_file_atomically
from vaswani.model_folder import recover_model_folder

ARGS_FILE = "distill_args.json"
REPORT_FILE = "distill_report.json"
TEACHER_EXPORT_DIR = "teacher-ct2"
DISTILLED_DIR = "distilled"
MANIFEST_FILE = "distilled.json"
CHUNK_FILE = "chunk-{:05d}.jsonl"
CHUNK_NAME = re.compile(r"chunk-(\d{5})\.jsonl")
TRAIN_FILE = "train.jsonl"
STATS_FILE = "stats.json"
STUDENT_DIR = "student"
STUDENT_EXPORT_DIR = "student-ct2"
EXPORT_STAGING_PREFIX = f"{TMP_PREFIX}export-"  # what a killed export of an earlier version left (removed on opening)


@dataclass(frozen=True)
class DistillFolder:
    """The paths of a distillation's output folder `root`."""

    root: Path

    @property
    def args_file(self) -> Path:
        return self.root / ARGS_FILE

    @property
    def report(self) -> Path:
        return self.root / REPORT_FILE

    @property
    def teacher_export(self) -> Path:
        return self.root / TEACHER_EXPORT_DIR

    @property
    def distilled(self) -> Path:
        return self.root / DISTILLED_DIR

    @property
    def manifest(self) -> Path:
        return self.distilled / MANIFEST_FILE

    def chunk(self, index: int) -> Path:
        return self.distilled / CHUNK_FILE.format(index)

    @property
    def train_file(self) -> Path:
        return self.distilled / TRAIN_FILE

    @property
    def stats(self) -> Path:
        return self.distilled / STATS_FILE

    @property
    def student(self) -> Path:
        return self.root / STUDENT_DIR

    @property
    def student_export(self) -> Path:
        return self.root / STUDENT_EXPORT_DIR


def open_distill_folder(output_dir: Path, options: dict) -> DistillFolder:
    """The folder of a distillation at `output_dir`: a new or empty folder, or one a distillation wrote (its
    `ARGS_FILE`), which this run continues stage by stage. A folder holding other files is refused and nothing in it
    is touched. Records `options` (the invocation's, as JSON) in `ARGS_FILE` and removes what a killed export left."""
    if output_dir.exists() and not output_dir.is_dir():
        raise UsageError(f"--output_dir {output_dir} is a file; give a folder.")
    folder = DistillFolder(output_dir)
    if output_dir.is_dir() and any(output_dir.iterdir()) and not folder.args_file.is_file():
        raise UsageError(
            f"--output_dir {output_dir} holds files and no distillation ({ARGS_FILE} is missing); nothing was changed. "
            "Choose a new or empty --output_dir, or the folder of an earlier `vaswani distill` to continue it."
        )
    output_dir.mkdir(parents=True, exist_ok=True)
    write_file_atomically(folder.args_file, json.dumps(options, indent=2, sort_keys=True, default=os.fspath) + "\n")
    for leftover in output_dir.glob(f"{EXPORT_STAGING_PREFIX}*"):
        shutil.rmtree(leftover)
    return folder


def export_replacing(model: Path, target: Path, quantization: str) -> Path:
    """Export `model` to CTranslate2 (`quantization`) at `target`, replacing the export there as `vaswani export
    --overwrite_output_dir` does (`export_ctranslate2`: written beside it and swapped in, so that a kill leaves the
    old export or the new one, and the next run finishes or redoes it). Anything at `target` other than an export
    is refused, untouched."""
    recover_model_folder(target)  # a swap a kill interrupted: the old export or the new one is back in place
    if target.exists() and not is_ctranslate2_folder(target):
        raise UsageError(f"{target} exists and is not a CTranslate2 export: nothing was replaced; move it away, or "
                         "choose another --output_dir")  # fmt: skip
    export_ctranslate2(model, target, quantization=quantization, overwrite=target.exists())
    return target
