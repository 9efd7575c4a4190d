"""The stages of `vaswani distill`, each resuming what a killed run left in the output folder (`folder.py`):

1. translate: the teacher translates every training source (and every sentence of --monolingual_file) into chunks
   (`distilled.py`), then the student's training file is built from them (filter, original pairs);
2. train: the student trains on it with the ordinary training run (`vaswani.training.loop.train`, the options of
   `vaswani train`), its final model chosen on the validation set against the original references;
3. export: the student's CTranslate2 export, then the report (`report.py`).

`--stage all` runs the three; `--stage NAME` one of them on the same folder. Every option is checked, the student's
included (its configuration built, as training would), before the first stage spends any time.

Resuming: the translate stage continues from the chunks that are complete. The train stage skips a student that
finished training with the same options; a student stopped before the end continues with --resume_from_checkpoint
(from its latest checkpoint, or from the start when it had saved none). The export stage writes the export and the
report again. With --overwrite_output_dir, each stage run replaces what it made before instead of continuing it
(`--stage train --overwrite_output_dir` trains the student again on the same distilled data).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
from pathlib import Path

import torch

from vaswani.constants import CHECKPOINTS_SUBDIR, RESULTS_FILE, RUN_ARGS_FILE
from vaswani.data.loading import PairFile, pair_file
from vaswani.devices import default_batch_tokens, resolve_device
from vaswani.distill.distilled import (
    MonolingualFile,
    build_options,
    build_training_file,
    data_identity,
    first_sources,
    make_manifest,
    monolingual_file,
    monolingual_sentences,
    open_distilled,
    provenance,
    read_manifest,
    same_training_pairs,
    translate_chunks,
)
from vaswani.distill.folder import DistillFolder, export_replacing, open_distill_folder
from vaswani.distill.report import (
    REPORT_FORMAT,
    REPORT_VERSION,
    comparison,
    decode_alternately,
    model_entry,
    report_table,
)
from vaswani.distill.teachers import (
    TOKENIZER_SAMPLE,
    TeacherPlan,
    check_data_languages,
    check_tokenizer_fits,
    ensure_teacher_export,
    load_teacher,
    parameter_count,
    plan_teacher,
    teacher_identity,
    teacher_pair,
    teacher_specs,
)
from vaswani.errors import UsageError
from vaswani.export.ctranslate2 import import_ctranslate2
from vaswani.fileio import write_file_atomically
from vaswani.inference.translator import Translator, target_languages_of
from vaswani.model_folder import load_tokenizer, recover_model_folder
from vaswani.serve.models import pair_target_language
from vaswani.training.checkpoints import CheckpointManager
from vaswani.training.loop import resolve_model_config, train
from vaswani.training.options import build_parser as build_train_parser
from vaswani.training.options import finish_args
from vaswani.training.run_dir import RUN_DEFINING_OPTIONS

logger = logging.getLogger("vaswani.distill")

STAGES = ("translate", "train", "export")
# What makes a finished student the one this run would train: the options that define a run and how it ends (its
# --train_file is always the folder's own training file, wherever the folder was moved: its content is checked apart).
STUDENT_DEFINING_OPTIONS = [
    *(name for name in RUN_DEFINING_OPTIONS if name != "train_file"), "max_train_minutes", "early_stopping_patience",
    "final_model", "metric_for_best", "test_file",
]  # fmt: skip


def distill(args: argparse.Namespace) -> dict:
    """Run the stages `args.stage` names (see the module docstring); returns what each did."""
    stages = STAGES if args.stage == "all" else (args.stage,)
    check_args(args, stages)
    specs = teacher_specs(args.teacher) if args.teacher else None
    folder = DistillFolder(Path(args.output_dir))
    manifest = None if "translate" in stages else read_manifest(folder)  # a later stage needs the distilled data
    # the data's languages: the teacher's, or (a later stage without --teacher) those of the distilled data
    set_data_languages(args, teacher_pair(specs) if specs else data_pair(manifest))
    monolingual = bool(args.monolingual_file) if manifest is None else monolingual_sentences(manifest) > 0
    build = build_options(args, monolingual=monolingual)
    if "train" in stages:
        student_args(args, folder)  # the student's options and configuration, checked before any work
    data = mono = None
    # the training data (and the monolingual text), and the teacher's tokenizer on it, checked before anything is
    # written
    if "translate" in stages:
        data = pair_file("train", args.train_file, args.source_lang, args.target_lang)
        if args.monolingual_file:
            mono = monolingual_file(args.monolingual_file, held_out_sources(args))
        teacher_tokenizer = load_tokenizer(specs[0].folder)
        check_tokenizer_fits(teacher_tokenizer, first_sources(data, TOKENIZER_SAMPLE), " ".join(args.teacher))
        # a multilingual teacher needs a token for the pair's target (said before its export is written)
        pair_target_language(target_languages_of(teacher_tokenizer.get_vocab()), args.target_lang, specs[0].folder,
                             "--teacher")  # fmt: skip
    if "export" in stages:
        import_ctranslate2()  # needed at the end: said now, before hours of work
    if args.threads is not None:
        torch.set_num_threads(args.threads)  # everything this process runs: CTranslate2 gets the same budget
    args.teacher_max_tokens = teacher_batch_tokens(args, folder, stages)
    folder = open_distill_folder(folder.root, {k: v for k, v in vars(args).items() if k not in ("run", "explicit")})
    done = {}
    if "translate" in stages:
        done["translate"] = translate_stage(args, folder, specs, data, build, mono)
    if "train" in stages:
        done["train"] = train_stage(args, folder, build)
        if done["train"].get("stopped_early"):  # --stop_after_steps / --stop_after_minutes: a pause, not the end
            logger.info("Student: paused after %d updates; continue with --resume_from_checkpoint latest",
                        done["train"]["step"])  # fmt: skip
            return done
    if "export" in stages:
        done["export"] = export_stage(args, folder, specs)
    return done


def check_args(args: argparse.Namespace, stages: tuple[str, ...]) -> None:
    """What distill needs of `vaswani train`'s options: the folder, files (not a `datasets` name or prepared data: the
    student's references are the original ones), translation; and a teacher to translate with. The export stage alone
    needs the folder only (and --test_file for the report's scores)."""
    if not args.output_dir:
        raise UsageError("--output_dir is required (on the command line or in the --config file).")
    if args.task != "translation":
        raise UsageError(f"--task {args.task}: vaswani distill trains translation students only (--task translation)")
    for option in ("dataset_name", "prepared_data"):
        if getattr(args, option):
            raise UsageError(f"--{option}: vaswani distill reads the training pairs from --train_file (the teacher "
                             "translates that file's sources): give the data as files")  # fmt: skip
    if stages == ("export",):
        return
    if not args.train_file:
        raise UsageError("--train_file is required: the training pairs whose sources the teacher translates")
    if not args.validation_file:
        raise UsageError("--validation_file is required: the student's final model is chosen on the validation set "
                         "against its original references (without it, training would carve one out of the "
                         "distilled data)")  # fmt: skip
    if "translate" in stages and not args.teacher:
        raise UsageError(f"--stage {args.stage} translates with the teacher: give --teacher [SRC-TGT=]DIR")


def teacher_batch_tokens(args: argparse.Namespace, folder: DistillFolder, stages: tuple[str, ...]) -> int:
    """--teacher_max_tokens, or its default: the value the folder's distilled data was made with where that data is
    kept (continued by the translate stage, or read by a later one), so that a run resumed with other --threads goes
    on as it began (the manifest records the batch size); for new data, `vaswani translate`'s default for the device
    and the threads (`vaswani.devices.default_batch_tokens`: 512 per thread on a CPU)."""
    if args.teacher_max_tokens is not None:
        return args.teacher_max_tokens
    replaced = "translate" in stages and args.overwrite_output_dir
    if folder.manifest.is_file() and not replaced:
        saved = read_manifest(folder)["decoding"].get("max_tokens")
        if isinstance(saved, int) and saved > 0:
            return saved
    return default_batch_tokens(torch.device(resolve_device(args.device)).type, torch.get_num_threads())


def held_out_sources(args: argparse.Namespace) -> set[str]:
    """The sources of the validation and test files: the sentences of --monolingual_file the teacher must not
    translate for the student (its final model is chosen on the first, and it is compared on the second)."""
    sources = set()
    for split in ("validation", "test"):
        path = getattr(args, f"{split}_file")
        if path:
            sources.update(source for _, source, _ in pair_file(split, path, args.source_lang, args.target_lang))
    return sources


def data_pair(manifest: dict) -> tuple[str, str]:
    """The languages the distilled data was made for."""
    return manifest["data"]["source_lang"], manifest["data"]["target_lang"]


def set_data_languages(args: argparse.Namespace, pair: tuple[str, str]) -> None:
    """--source_lang and --target_lang: the teacher's `pair` (or the distilled data's) unless given, and checked
    against it when given."""
    args.source_lang, args.target_lang = check_data_languages(pair, args.source_lang, args.target_lang)
    args.explicit |= {"source_lang", "target_lang"}


# ---------------------------------------------------------------------------------------------------------------------
# 1. translate
# ---------------------------------------------------------------------------------------------------------------------
def translate_stage(args: argparse.Namespace, folder: DistillFolder, specs, data: PairFile, build: dict,
                    monolingual: MonolingualFile | None = None) -> dict:  # fmt: skip
    """The teacher's translations of every training source and `monolingual` sentence (the missing chunks), then the
    training file."""
    plan = plan_teacher(specs, args.quantization)
    decoding = {"num_beams": args.teacher_num_beams, "length_penalty": args.teacher_length_penalty,
                "max_tokens": args.teacher_max_tokens}  # fmt: skip
    manifest = make_manifest(data, teacher_identity(plan), decoding, args.buffer_lines, monolingual)
    continued = open_distilled(folder, manifest, overwrite=args.overwrite_output_dir)
    ensure_teacher_export(plan, folder, reuse=continued and not args.overwrite_output_dir)
    translator = load_teacher(plan, folder, args.device)
    logger.info("Teacher: %s on %s (%s), beam %d, length penalty %g, %d source tokens per batch",
                ", ".join(map(str, plan.folders)), translator.backend, plan.quantization or "float32",
                args.teacher_num_beams, args.teacher_length_penalty, args.teacher_max_tokens)  # fmt: skip
    language = pair_target_language(translator.target_languages, args.target_lang, plan.folders[0], "--teacher")
    done = translate_chunks(folder, manifest, data, translator, progress=args.progress is not False,
                            monolingual=monolingual, target_language=language)  # fmt: skip
    del translator  # its memory, before the student trains
    stats = build_training_file(folder, manifest, build)
    return {**done, "training_pairs": stats["training_pairs"]}


# ---------------------------------------------------------------------------------------------------------------------
# 2. train
# ---------------------------------------------------------------------------------------------------------------------
def train_option_names() -> list[str]:
    """The options of `vaswani train` (their argparse dests)."""
    return [action.dest for action in build_train_parser()._actions if action.dest != "help"]


def student_args(args: argparse.Namespace, folder: DistillFolder) -> argparse.Namespace:
    """The student's `vaswani train` options: distill's, with the distilled training file and OUT/student, checked
    and resolved as training checks them (`finish_args`), its model configuration built (`resolve_model_config`):
    a student that cannot be trained is an `error:` before any stage runs."""
    names = train_option_names()
    student = argparse.Namespace(**{name: getattr(args, name) for name in names})
    student.explicit = args.explicit & set(names)
    student.train_file, student.output_dir = str(folder.train_file), folder.student
    student.overwrite_output_dir, student.resume_from_checkpoint = False, None
    student = finish_args(student)
    resolve_model_config(student)
    return student


def train_stage(args: argparse.Namespace, folder: DistillFolder, build: dict) -> dict:
    """Train the student on the (re)built training file, unless it has finished with the same options."""
    manifest = read_manifest(folder)
    data = pair_file("train", args.train_file, args.source_lang, args.target_lang)
    if not same_training_pairs(manifest["data"], data_identity(data)):
        raise UsageError(f"the distilled data in {folder.distilled} was made from another training file (or "
                         f"{args.train_file} changed since): run --stage translate with it, or pass the file it was "
                         "made from")  # fmt: skip
    stats = build_training_file(folder, manifest, build)
    student = student_args(args, folder)
    student.distilled_from = provenance(manifest, stats)  # run_args.json and the card say what the file is
    if not plan_student_run(args, folder, student):
        return json.loads((folder.student / RESULTS_FILE).read_text(encoding="utf-8"))
    logger.info("Student: training in %s on %s", folder.student, folder.train_file)
    return train(student)


def plan_student_run(args: argparse.Namespace, folder: DistillFolder, student: argparse.Namespace) -> bool:
    """Whether the student trains (False: it finished with the same options), and how: `student`'s
    overwrite_output_dir and resume_from_checkpoint are set from distill's options and the student's folder."""
    recover_model_folder(folder.student)  # finish (or undo) a final save that a kill interrupted
    started = (folder.student / RUN_ARGS_FILE).is_file()
    if args.overwrite_output_dir or not started:
        student.overwrite_output_dir = started
        return True
    if (folder.student / RESULTS_FILE).is_file():
        changed = changed_options(folder.student, student)
        if folder.train_file.stat().st_mtime_ns > (folder.student / RUN_ARGS_FILE).stat().st_mtime_ns:
            changed.append("the training file, built again since (--filter, --mix_original or new translations)")
        if changed:
            raise UsageError(
                f"the student in {folder.student} finished training with other options ({', '.join(changed)}): "
                "pass --overwrite_output_dir with --stage train to train it again on the same distilled data, or "
                "give the options it was trained with"
            )
        logger.info("Student: %s has finished training with these options: not trained again", folder.student)
        return False
    if not args.resume_from_checkpoint:
        raise UsageError(
            f"the student's training in {folder.student} stopped before the end: pass --resume_from_checkpoint latest "
            "to continue it, or --overwrite_output_dir to start that stage again"
        )
    if CheckpointManager(folder.student / CHECKPOINTS_SUBDIR).latest() is None:
        logger.info("Student: %s has no checkpoint to resume from yet: its training starts again", folder.student)
        student.overwrite_output_dir = True
    else:
        student.resume_from_checkpoint = args.resume_from_checkpoint
    return True


def changed_options(run_dir: Path, student: argparse.Namespace) -> list[str]:
    """The options of `STUDENT_DEFINING_OPTIONS` whose values differ from those the run in `run_dir` was trained with."""
    saved = json.loads((run_dir / RUN_ARGS_FILE).read_text(encoding="utf-8"))

    def jsonable(value):
        return json.loads(json.dumps(value, default=os.fspath))

    return [f"--{name} {saved.get(name)!r} -> {jsonable(getattr(student, name))!r}"
            for name in STUDENT_DEFINING_OPTIONS if saved.get(name) != jsonable(getattr(student, name))]  # fmt: skip


# ---------------------------------------------------------------------------------------------------------------------
# 3. export
# ---------------------------------------------------------------------------------------------------------------------
def export_stage(args: argparse.Namespace, folder: DistillFolder, specs) -> dict:
    """The student's CTranslate2 export, then the report (distill_report.json and the log's table)."""
    recover_model_folder(folder.student)  # finish (or undo) a final save that a kill interrupted
    if not (folder.student / RESULTS_FILE).is_file():
        raise UsageError(f"{folder.student} holds no trained student: run --stage train (or --stage all) first")
    logger.info("Student: exporting %s to CTranslate2 (%s) in %s", folder.student, args.quantization,
                folder.student_export)  # fmt: skip
    export_replacing(folder.student, folder.student_export, args.quantization)
    manifest = read_manifest(folder)
    plan = TeacherPlan.from_dict(manifest["teacher"])
    if specs is not None and [os.path.abspath(spec.folder) for spec in specs] != manifest["teacher"]["folders"]:
        raise UsageError(f"--teacher {' '.join(args.teacher)} is not the teacher the distilled data in "
                         f"{folder.distilled} was made with ({', '.join(manifest['teacher']['folders'])}): give that "
                         "one, or none (the report then compares with it)")  # fmt: skip
    ensure_teacher_export(plan, folder, reuse=True)
    report = make_report(args, folder, plan)
    write_file_atomically(folder.report, json.dumps(report, indent=1, ensure_ascii=False) + "\n")
    logger.info("Distillation report (%s):\n%s", folder.report, report_table(report))
    return report


def make_report(args: argparse.Namespace, folder: DistillFolder, plan: TeacherPlan) -> dict:
    """What distill_report.json holds: each model's folders and parameters and, with a --test_file, its test scores
    and speed through the teacher's backend (the student's export when that is CTranslate2, its PyTorch folder
    beside an ensemble), the comparison, the distilled data's statistics and the student's training."""
    teacher_folders = plan.decoded_folders(folder)
    student_folders = [folder.student_export] if plan.backend == "ctranslate2" else [folder.student]
    training = json.loads((folder.student / RESULTS_FILE).read_text(encoding="utf-8"))
    report = {
        "format": REPORT_FORMAT, "version": REPORT_VERSION,
        "teacher": {"folders": [os.path.abspath(f) for f in plan.folders],
                    "decoded_by": [os.path.abspath(f) for f in teacher_folders],
                    "backend": plan.backend, "quantization": plan.quantization,
                    "parameters": parameter_count(list(plan.folders))},
        "student": {"folders": [os.path.abspath(folder.student)],
                    "decoded_by": [os.path.abspath(f) for f in student_folders],
                    "backend": plan.backend, "quantization": args.quantization if plan.backend == "ctranslate2" else None,
                    "parameters": parameter_count([folder.student])},
        "distilled_data": json.loads(folder.stats.read_text(encoding="utf-8")),
        "student_training": {**{key: training.get(key) for key in ("step", "train_seconds", "final_model")},
                             **{split: {k: v for k, v in training[split].items() if k != "examples"}
                                for split in ("validation", "test") if split in training}},
    }  # fmt: skip
    if not args.test_file:
        logger.warning("No --test_file: the report compares the teacher and the student without test scores or speed")
        return report
    if plan.backend == "ctranslate2" and plan.quantization != args.quantization:
        logger.warning("The teacher's export is %s and the student's %s: their speeds are not compared at the same "
                       "quantization", plan.quantization, args.quantization)  # fmt: skip
    test = pair_file("test", args.test_file, args.source_lang, args.target_lang)
    pairs = list(test)
    sources, references = [source for _, source, _ in pairs], [reference for _, _, reference in pairs]
    translators = {
        "teacher": load_teacher(plan, folder, args.device),
        "student": Translator(student_folders[0], device=args.device),
    }  # fmt: skip
    decoding = {"num_beams": args.teacher_num_beams, "length_penalty": args.teacher_length_penalty,
                "batch_tokens": args.teacher_max_tokens}  # fmt: skip
    # a multilingual teacher is told the target language (its >>xx<< token); the student translates into it alone
    languages = {
        "teacher": pair_target_language(
            translators["teacher"].target_languages, args.target_lang, plan.folders[0], "--teacher"
        )
    }
    decoded = decode_alternately(translators, sources, decoding, languages)
    for role in ("teacher", "student"):
        report[role].update(
            model_entry(decoded[role], references, args.target_lang), computes_in=translators[role].computes_in
        )
    report["comparison"] = comparison(report["teacher"], report["student"])
    report["test"] = {
        "file": os.path.abspath(args.test_file), "sentences": len(sources),
        "setting": {"backend": plan.backend, "quantization": report["student"]["quantization"],
                    "num_beams": args.teacher_num_beams, "length_penalty": args.teacher_length_penalty,
                    "max_tokens": args.teacher_max_tokens, "threads": torch.get_num_threads(), "device": args.device},
    }  # fmt: skip
    return report
