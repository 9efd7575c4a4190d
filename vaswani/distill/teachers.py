"""The teacher of a distillation: the folders of `--teacher [SRC-TGT=]DIR` (one, or several: an ensemble), its
language pair, how it decodes, and the checks that it fits the data.

- The pair: `SRC-TGT=` or the folder's run_args.json, as `vaswani serve` reads it (`vaswani.serve.models`); the
  members of an ensemble must agree, and the data's languages (--source_lang, --target_lang) must be the pair's.
- How it decodes (`TeacherPlan`): a CTranslate2 folder as it is; a single PyTorch folder through its CTranslate2
  export (`--quantization`, written once into OUT/teacher-ct2); an ensemble on PyTorch (the mean of its members'
  log-probabilities, `vaswani.inference.translator.Translator`), as is a single model CTranslate2 cannot represent or
  a machine without CTranslate2 (the log says why).
- The tokenizer: on a sample of the training sources, the share of tokens that are unknown to it (`<unk>`) or single
  bytes (its byte fallback, `<0xNN>`): a tokenizer made for other text splits most of it that way, and the teacher's
  translations would be worthless (`UNFAMILIAR_TOKEN_LIMIT`).
"""

from __future__ import annotations

import logging
import os
import re
from dataclasses import dataclass
from pathlib import Path

import torch

from modeling_vaswani import VaswaniConfig, VaswaniForConditionalGeneration
from vaswani.constants import CONFIG_FILE, CT2_MODEL_FILE, EXPORT_INFO_FILE, TOKENIZER_FILE
from vaswani.distill.folder import DistillFolder, export_replacing
from vaswani.errors import ExportError, UsageError
from vaswani.export.ctranslate2 import check_exportable, import_ctranslate2, is_ctranslate2_folder
from vaswani.fileio import read_json_object
from vaswani.inference.translator import Translator
from vaswani.model_folder import check_model_folder, is_weight_file, load_config
from vaswani.serve.models import ModelSpec, pair_from_training_arguments, parse_model_spec

logger = logging.getLogger("vaswani.distill")

# More unknown or single-byte tokens than this share of a sample of the training sources: the teacher's tokenizer
# was made for other text. (A BPE tokenizer trained on the same kind of text has well under 1%.)
UNFAMILIAR_TOKEN_LIMIT = 0.05
TOKENIZER_SAMPLE = 1000  # training sources the check tokenizes
BYTE_TOKEN = re.compile(r"<0x[0-9A-Fa-f]{2}>")


def teacher_specs(values: list[str]) -> list[ModelSpec]:
    """The `--teacher [SRC-TGT=]DIR` values, each folder checked to exist."""
    specs = [parse_model_spec(value, flag="--teacher") for value in values]
    for spec in specs:
        if not spec.folder.is_dir():
            raise UsageError(f"--teacher {spec.folder}: no such folder")
    return specs


def teacher_pair(specs: list[ModelSpec]) -> tuple[str, str]:
    """The language pair the teacher translates: every member's `SRC-TGT=` or run_args.json, which must agree."""
    pairs = {spec.folder: spec.pair or pair_from_training_arguments(spec.folder, flag="--teacher") for spec in specs}
    if len(set(pairs.values())) > 1:
        described = ", ".join(f"{folder} {source}-{target}" for folder, (source, target) in pairs.items())
        raise UsageError(f"the teachers of an ensemble must translate one language pair, but they translate "
                         f"{described}: give the models of one pair")  # fmt: skip
    return next(iter(pairs.values()))


def check_data_languages(pair: tuple[str, str], source_lang: str | None, target_lang: str | None) -> tuple[str, str]:
    """The data's languages: the teacher's `pair`, where --source_lang / --target_lang were given (not None) checked
    against it."""
    source, target = source_lang or pair[0], target_lang or pair[1]
    if (source, target) != pair:
        raise UsageError(
            f"the teacher translates {pair[0]}-{pair[1]}, but the data's languages are --source_lang {source} "
            f"--target_lang {target}: give a teacher of {source}-{target}, or the languages of its data (--teacher "
            "SRC-TGT=DIR names the pair of a folder without run_args.json)"
        )
    return pair


@dataclass(frozen=True)
class TeacherPlan:
    """How the teacher decodes: its `folders` as given and the `backend` ("ctranslate2" or "torch"); `exported` when a
    single PyTorch folder decodes through its export (`quantization`) in OUT/teacher-ct2."""

    folders: tuple[Path, ...]
    backend: str
    exported: bool
    quantization: str | None

    def decoded_folders(self, folder: DistillFolder) -> list[Path]:
        """The folders the teacher's Translator loads."""
        return [folder.teacher_export] if self.exported else list(self.folders)

    def to_dict(self) -> dict:
        return {"folders": [os.path.abspath(f) for f in self.folders], "backend": self.backend,
                "exported": self.exported, "quantization": self.quantization}  # fmt: skip

    @classmethod
    def from_dict(cls, values: dict) -> TeacherPlan:
        return cls(tuple(Path(f) for f in values["folders"]), values["backend"], values["exported"],
                   values["quantization"])  # fmt: skip


def plan_teacher(specs: list[ModelSpec], quantization: str) -> TeacherPlan:
    """How the teacher of `specs` decodes (see the module docstring)."""
    folders = tuple(spec.folder for spec in specs)
    if len(folders) > 1:
        return TeacherPlan(folders, "torch", False, None)
    (folder,) = folders
    if is_ctranslate2_folder(folder):
        info = read_json_object(folder / EXPORT_INFO_FILE, fix="export the teacher again")
        return TeacherPlan(folders, "ctranslate2", False, info.get("quantization"))
    check_model_folder(folder)
    try:
        import_ctranslate2()
        check_exportable(load_config(folder))
    except ExportError as error:
        logger.warning("The teacher decodes on PyTorch, not through a CTranslate2 export: %s", error)
        return TeacherPlan(folders, "torch", False, None)
    return TeacherPlan(folders, "ctranslate2", True, quantization)


def folder_identity(folder: Path) -> list[list]:
    """What tells a model folder's content apart: the name, size and modification time of its weights, config and
    tokenizer (a retrained or replaced teacher differs)."""
    files = sorted(
        entry for entry in folder.iterdir()
        if entry.is_file() and (is_weight_file(entry.name) or entry.name in (CT2_MODEL_FILE, CONFIG_FILE, TOKENIZER_FILE))
    )  # fmt: skip
    return [[entry.name, entry.stat().st_size, entry.stat().st_mtime_ns] for entry in files]


def teacher_identity(plan: TeacherPlan) -> dict:
    """The plan and its folders' identities: what the distilled data's manifest records of the teacher."""
    return {**plan.to_dict(), "identity": [folder_identity(folder) for folder in plan.folders]}


def ensure_teacher_export(plan: TeacherPlan, folder: DistillFolder, reuse: bool) -> None:
    """Write the export a single PyTorch teacher decodes through, unless `reuse` allows the one OUT/teacher-ct2
    already holds (an earlier invocation's for the same teacher, as the distilled data's manifest says) and it has
    the quantization asked for."""
    if not plan.exported:
        return
    export = folder.teacher_export
    if reuse and is_ctranslate2_folder(export):
        info = read_json_object(export / EXPORT_INFO_FILE, fix="delete it: the next run exports the teacher again")
        if info.get("quantization") == plan.quantization:
            logger.info("Teacher: the CTranslate2 export (%s) in %s", plan.quantization, export)
            return
    logger.info("Teacher: exporting %s to CTranslate2 (%s) in %s", plan.folders[0], plan.quantization, export)
    export_replacing(plan.folders[0], export, plan.quantization)


def load_teacher(plan: TeacherPlan, folder: DistillFolder, device: str) -> Translator:
    """The teacher's Translator (an ensemble's members must share one tokenizer: `Translator` checks it)."""
    folders = plan.decoded_folders(folder)
    return Translator(folders if len(folders) > 1 else folders[0], device=device)


def unfamiliar_share(tokenizer, sources: list[str]) -> float:
    """The share of the tokens of `sources` (special tokens aside) that `tokenizer` does not know (its unknown token)
    or splits into single bytes (byte fallback, `<0xNN>`)."""
    unknown = tokenizer.unk_token_id
    unfamiliar = {index for token, index in tokenizer.get_vocab().items() if BYTE_TOKEN.fullmatch(token)}
    unfamiliar |= {unknown} if unknown is not None else set()
    special = set(tokenizer.all_special_ids) - {unknown}
    # verbose=False: only counted, never given to the model (transformers would warn of "indexing errors")
    encoded = tokenizer(sources, add_special_tokens=False, verbose=False)["input_ids"]
    tokens = [i for ids in encoded for i in ids if i not in special]
    return sum(i in unfamiliar for i in tokens) / len(tokens) if tokens else 0.0


def check_tokenizer_fits(tokenizer, sources: list[str], teacher: str) -> float:
    """`unfamiliar_share` of a sample of the training sources, or a `UsageError` when it is over the limit."""
    share = unfamiliar_share(tokenizer, sources[:TOKENIZER_SAMPLE])
    if share > UNFAMILIAR_TOKEN_LIMIT:
        raise UsageError(
            f"the teacher's tokenizer does not fit the training data: {share:.0%} of the tokens of its first "
            f"{min(len(sources), TOKENIZER_SAMPLE):,} sources are unknown to it or single bytes (<unk>, <0xNN>), "
            f"against well under {UNFAMILIAR_TOKEN_LIMIT:.0%} for text of the kind it was made for: is {teacher} a "
            "teacher for this data, and --train_file the right file?"
        )
    return share


def parameter_count(folders: list[Path]) -> int:
    """The parameters of the models of `folders` (PyTorch folders or CTranslate2 exports, whose source configuration
    the export keeps), summed over an ensemble; shared (tied) weights count once."""
    total = 0
    for folder in folders:
        if is_ctranslate2_folder(folder):
            info = read_json_object(folder / EXPORT_INFO_FILE, fix="export the model again")
            config = VaswaniConfig.from_dict(info["source_config"])
        else:
            config = load_config(folder)
        with torch.device("meta"):  # the shapes only: no memory, no initialisation
            model = VaswaniForConditionalGeneration(config)
        total += sum(parameter.numel() for parameter in model.parameters())
    return total
