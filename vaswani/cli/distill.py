"""`vaswani distill`: sequence-level knowledge distillation (Kim & Rush 2016) from a teacher's translations of the
training data to a small student's CTranslate2 export, in three stages on one output folder (docs/distillation.md):

    vaswani distill --teacher [SRC-TGT=]DIR [--teacher DIR2 ...] --config configs/student.yaml \\
        --train_file train.jsonl --validation_file validation.jsonl --test_file test.jsonl --output_dir OUT \\
        [--stage translate|train|export|all] [--quantization int8] [--filter teacher_score --filter_keep 0.9]

Its own options (the teacher, the distilled data, the stages) are below; every option of `vaswani train` is the
student's (the same parser groups, `vaswani.training.options`), with --output_dir the distillation's folder and
--train_file the pairs whose sources the teacher translates. The work is `vaswani.distill`.
"""

from __future__ import annotations

import argparse
import logging

from vaswani.export.ctranslate2 import QUANTIZATIONS
from vaswani.model_folder import hide_transformers_progress_bars
from vaswani.options import DefaultsHelpFormatter, add_option, non_negative_float, number, positive_int

HELP = "distil a small, fast student from a teacher's translations, from training to an int8 export"
DESCRIPTION = (
    "Sequence-level knowledge distillation: the teacher (one model or an ensemble) translates every training source, "
    "the student trains on its translations with `vaswani train`'s options and recipe (--config configs/student.yaml: "
    "a deep encoder and a shallow decoder), and is exported to CTranslate2; distill_report.json compares the two on "
    "the test file. Each stage resumes what a killed run left. See docs/distillation.md."
)
LAZY = True  # the student's options are `vaswani train`'s, which need the model's and the tokenizer's imports
FORMATTER_CLASS = DefaultsHelpFormatter

STAGE_CHOICES = ("translate", "train", "export", "all")
# What `vaswani train`'s options mean here where it differs from training.
DISTILL_MEANINGS = {
    "output_dir": "the distillation's folder: the distilled data, the student's run (OUT/student), the CTranslate2 "
                  "exports and distill_report.json (required)",
    "overwrite_output_dir": "each stage run replaces what it made before in --output_dir instead of continuing it "
                            "(the distilled data, the student, the exports; never other files)",
    "resume_from_checkpoint": "continue the student's training stopped by a kill: 'latest' or a checkpoint folder of "
                              "OUT/student (the translate stage always continues from its finished chunks)",
    "train_file": "the training pairs (.jsonl, .tsv or a prefix PATH of two aligned files): the teacher translates "
                  "their sources, and the student trains on the result (required)",
    "validation_file": "the validation pairs (required): the student's final model is chosen on them, against their "
                       "original references",
    "test_file": "the test pairs of the report: the teacher and the student decode their sources",
    "source_lang": "language code of the source side (default: the teacher's pair; checked against it)",
    "target_lang": "language code of the target side (default: the teacher's pair; checked against it)",
}  # fmt: skip


def share(text: str) -> float:
    """argparse type for a share of the pairs: a number in (0, 1]."""
    value = number(text)
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"must be a share of the pairs in (0, 1], got {text}")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from vaswani.distill.distilled import FILTERS  # start-up: loads datasets, as the train options below
    from vaswani.training.options import add_arguments as add_training_arguments  # start-up: loads torch

    teacher = parser.add_argument_group("the teacher")
    teacher.add_argument(
        "--teacher", action="append", metavar="[SRC-TGT=]DIR",
        help="the teacher's model folder: PyTorch (decoded through its CTranslate2 export), CTranslate2 (from vaswani "
             "export) or a converted OPUS-MT/fairseq folder; its language pair is SRC-TGT= or its run_args.json. "
             "Repeat it for an ensemble (decoded on PyTorch)",
    )  # fmt: skip
    teacher.add_argument("--teacher_num_beams", type=positive_int, default=4, metavar="K",
                         help="beam size of the teacher's translations (and of the report's decoding of the test file)")  # fmt: skip
    teacher.add_argument("--teacher_length_penalty", type=non_negative_float, default=0.6, metavar="ALPHA",
                         help="length penalty of the teacher's (and the report's) beam search")  # fmt: skip
    teacher.add_argument(
        "--teacher_max_tokens", type=positive_int, metavar="N",
        help="source tokens per batch of the teacher's (and the report's) decoding, padding included (default: "
             "distilled data that is continued keeps the value it was made with; new data takes vaswani translate's "
             "default, 512 per thread on a CPU, at most 4096, and 4096 on a GPU)",
    )  # fmt: skip
    add_option(teacher, "buffer_lines", "distill", default=2000,
               help="training pairs translated and saved at a time: one chunk of OUT/distilled (a killed run loses "
                    "at most one chunk's work)")  # fmt: skip
    add_option(teacher, "device", "distill", default="auto",
               help="where the teacher and the report decode: auto (a GPU if there is one), cpu, cuda or cuda:N")  # fmt: skip
    add_option(teacher, "threads", "distill",
               help="CPU threads of the whole command: the teacher's translation, the student's training and the "
                    "report's decoding (default: PyTorch's, one per core unless OMP_NUM_THREADS says otherwise)")  # fmt: skip
    add_option(teacher, "progress", "distill", help="the teacher's progress bar on stderr (default: on)")
    distilled = parser.add_argument_group("the distilled data (the student's training file)")
    distilled.add_argument(
        "--filter", choices=FILTERS, default="none",
        help="drop distilled pairs by the teacher's score of its translation (teacher_score: log-probability / "
             "length ** --teacher_length_penalty) or by sentence chrF against the reference (chrf); with "
             "--filter_threshold or --filter_keep",
    )  # fmt: skip
    distilled.add_argument("--filter_threshold", type=float, metavar="X",
                           help="--filter: keep the pairs scoring at least X (teacher_score: e.g. -0.5; chrf: 0-100)")  # fmt: skip
    distilled.add_argument("--filter_keep", type=share, metavar="SHARE",
                           help="--filter: keep this share of the pairs, the best (e.g. 0.9)")  # fmt: skip
    distilled.add_argument(
        "--monolingual_file", metavar="PATH",
        help="source-language text without references (UTF-8, one sentence per line) that the teacher translates "
             "too, after the training sources: more distilled pairs, from text the teacher has not learnt by heart "
             "(in-domain text helps most). Its sentences that are sources of --validation_file or --test_file are "
             "left out; --mix_original adds nothing for it, and --filter chrf (which needs references) is refused",
    )  # fmt: skip
    distilled.add_argument("--mix_original", action="store_true",
                           help="also train on the original pairs (each whose reference differs from the kept "
                                "translation)")  # fmt: skip
    stages = parser.add_argument_group("the stages")
    stages.add_argument(
        "--stage", choices=STAGE_CHOICES, default="all",
        help="translate (the teacher's translations and the training file), train (the student), export (its "
             "CTranslate2 export and the report), or all three; each continues what a killed run left",
    )  # fmt: skip
    add_option(stages, "quantization", "distill", choices=QUANTIZATIONS, default="int8",
               help="weight type of the CTranslate2 exports: the student's, and the teacher's when it is a PyTorch "
                    "folder (int8: the fastest on CPU)")  # fmt: skip
    before = set(parser._actions)
    add_training_arguments(parser)
    for action in parser._actions:
        if action not in before:
            action.shared_from = "train"  # one definition, vaswani train's (tests/test_options_registry.py)
            action.help = DISTILL_MEANINGS.get(action.dest, action.help)
    parser.set_defaults(source_lang=None, target_lang=None)


def run(args: argparse.Namespace) -> int:
    """Run the stages; 0, or 1 when only the student's upload to the Hub failed (its model is saved)."""

    from vaswani.distill.stages import distill  # start-up: `vaswani --help` must not load torch

    hide_transformers_progress_bars()  # no "Loading weights" bars: the teacher's progress bar is ours
    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s", datefmt="%H:%M:%S",
                        level=logging.INFO)  # fmt: skip
    options = {key: value for key, value in vars(args).items() if key not in ("command", "run")}  # the parser's own
    done = distill(argparse.Namespace(**options))
    return 1 if done.get("train", {}).get("push_error") else 0
