"""Train the original Transformer (Vaswani et al., 2017) with Hugging Face Accelerate and the paper's recipe.

    vaswani train --config configs/demo.yaml                         # one process
    python train.py --config configs/demo.yaml                       # the same: train.py is the script form
    accelerate launch train.py --train_file data/train --validation_file data/valid \\
        --source_lang en --target_lang de --model_preset base --max_tokens 25000 --max_train_steps 100000

The module reads straight down:
  1. options: command line and YAML (`--config`), the model's options under VaswaniConfig's names
  2. set-up and input checks: everything a user can get wrong is checked before training time is spent
  3. data: files, a `datasets` source or the built-in demo set; BPE tokenizer; `datasets.map` tokenization
  4. model, token-budget batching, Adam + the Noam schedule, LayerDrop/DropHead settings
  5. checkpoints and exact resume: weights, optimizer, schedules and RNGs as safetensors + JSON (nothing unpickled)
  6. the training loop (gradient accumulation through `accelerator.accumulate`, loss normalised per target token)
  7. evaluation: validation loss, BLEU and chrF with beam search through `evaluate`, gathered across processes
  8. tasks (`--task`): translation, or a causal / masked language model on text (vaswani/data/text.py); each is one
     object chosen at set-up (data, tokenizer, model class, collators, evaluation), so the loop never asks which
  9. the run in three steps: `set_up` (options to a ready model), `train_loop`, `finish` (the final model chosen
     among the last, the best and the averaged checkpoints, test scores, the `save_pretrained` folder with tokenizer and model card, the upload)
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import functools
import json
import logging
import math
import os
import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch
import yaml

from modeling_vaswani import (
    PRESETS,
    DropHeadScheduler,
    VaswaniConfig,
    VaswaniDecoderConfig,
    VaswaniEncoderConfig,
    VaswaniForCausalLM,
    VaswaniForConditionalGeneration,
    VaswaniForMaskedLM,
)
from modeling_vaswani.configuration_vaswani import ARCHITECTURE_OPTIONS, IMPLEMENTATION_OPTIONS
from modeling_vaswani.scheduling_vaswani import DROPHEAD_KINDS
from tokenization import SPECIAL_TOKEN_LAYOUTS, train_bpe_tokenizer
from vaswani.checkpoints import CheckpointManager, rng_states, set_rng_states
from vaswani.constants import (
    ABANDONED_PREFIX,
    BEST_DIR,
    CHECKPOINTS_SUBDIR,
    LOGS_DIR,
    METRICS_FILE,
    PROGRESS_FILE,
    RESULTS_FILE,
    RNG_FILE,
    RUN_ARGS_FILE,
    STEP_DIR,
    TMP_PREFIX,
    TOKENIZER_STAGING,
    TRAINING_STATE_FILE,
)
from vaswani.data.batching import TokenBatchSampler, padding_efficiency
from vaswani.data.loading import load_translation_splits
from vaswani.data.text import (
    PACKING_CHOICES,
    evaluate_language_model,
    load_text_splits,
    mask_held_out,
    masked_token_targets,
    next_token_targets,
    tokenize_texts,
    training_texts,
)
from vaswani.devices import MIXED_PRECISION_CHOICES, resolve_mixed_precision, training_device_type
from vaswani.errors import (
    CheckpointError,
    DataError,
    ModelFolderError,
    PushError,
    ReportedElsewhere,
    UsageError,
    run_command,
)
from vaswani.fileio import load_state_file, save_state_file, write_file_atomically
from vaswani.hub.model_card import write_model_card
from vaswani.hub.push import check_repo_id
from vaswani.model_folder import (
    check_model_folder,
    check_tokenizer_fits,
    is_model_file,
    load_config,
    load_model_folder,
    load_tokenizer,
    recover_model_folder,
    write_model_folder,
)
from vaswani.schedules import LR_SCHEDULERS, SCHEDULES_NEEDING_TOTAL, build_lr_scheduler
from vaswani.stopping import FINAL_MODELS, TIME_BUDGET_SPENT, AveragingWindow, Candidate, StoppingRules, choose
from vaswani.stopping import METRICS as STOPPING_METRICS
from vaswani.weights import average_into_model, load_weights, load_weights_into_model

logger = logging.getLogger("train")


# ======================================================================================================================
# 1. Options
# ======================================================================================================================
# VaswaniConfig arguments exposed as --name value. Vocabulary size and special-token ids come from the tokenizer.
MODEL_OPTIONS = [*ARCHITECTURE_OPTIONS, *IMPLEMENTATION_OPTIONS]

# --task: the model and objective; each is a `Task` below (section 8), chosen once at set-up.
TASK_NAMES = ("translation", "causal_lm", "masked_lm")

# Options that define what a run computes: resuming with different values would not continue the same run.
RUN_DEFINING_OPTIONS = [
    *MODEL_OPTIONS, "model_preset", "model_name_or_path", "train_file", "dataset_name", "dataset_config_name",
    "source_lang", "target_lang", "tokenizer", "vocab_size", "min_frequency", "special_tokens_layout",
    "max_source_length", "max_target_length", "overlong", "max_tokens", "max_sentences", "gradient_accumulation_steps",
    "seed", "lr_scheduler", "learning_rate", "lr_factor", "warmup_steps", "adam_beta1", "adam_beta2", "adam_epsilon",
    "weight_decay", "drophead_p_start", "drophead_p_end", "drophead_kinds",
    # the schedules (linear/cosine LR, DropHead) and the data order depend on these too
    "max_train_steps", "num_train_epochs", "max_grad_norm", "validation_file", "validation_size", "mixed_precision",
    # the language-model tasks (vaswani/data/text.py)
    "task", "text_column", "block_size", "packing", "mlm_probability",
]  # fmt: skip


def str2bool(value: str) -> bool:
    if isinstance(value, bool):
        return value
    if value.lower() in {"true", "1", "yes", "on"}:
        return True
    if value.lower() in {"false", "0", "no", "off"}:
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {value!r}")


def int_list(value: str | list) -> list[int]:
    if isinstance(value, list):
        return [int(v) for v in value]
    return [int(v) for v in value.split(",") if v.strip()]


def str_list(value: str | list) -> list[str]:
    return list(value) if isinstance(value, list) else [v.strip() for v in value.split(",") if v.strip()]


def optional_float(value: str) -> float | None:
    return None if str(value).lower() == "none" else float(value)


def build_parser(prog: str | None = None) -> argparse.ArgumentParser:
    """The options of `vaswani train` / `train.py` (`prog`: the command named in the usage line)."""
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Train the Transformer of 'Attention Is All You Need' with the paper's recipe.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
        allow_abbrev=False,  # a misspelt option must fail, not silently match a longer one
    )
    parser.add_argument(
        "--config", help="YAML file of options (same names as the command line); the command line wins"
    )
    parser.add_argument(
        "--task", choices=list(TASK_NAMES), default="translation",
        help="translation: the paper's encoder-decoder on sentence pairs; causal_lm: a decoder-only next-token model "
        "(VaswaniForCausalLM); masked_lm: an encoder-only masked LM (VaswaniForMaskedLM, BERT's objective). The LM "
        "tasks read text (--text_column, --block_size, --packing) and build the one stack from the same model options",
    )  # fmt: skip

    group = parser.add_argument_group("model (VaswaniConfig names; unset options keep the preset's value)")
    group.add_argument("--model_preset", choices=sorted(PRESETS), default="base", help="the paper's Table 3 model")
    group.add_argument("--model_name_or_path", help="start from a saved Vaswani model folder instead of a preset")
    field_types = {f.name: f.type for f in dataclasses.fields(VaswaniConfig)}
    for name in MODEL_OPTIONS:
        annotation = str(field_types[name])
        kind = (
            str2bool if "bool" in annotation
            else optional_float if "None" in annotation and "float" in annotation
            else int if "int" in annotation
            else float if "float" in annotation
            else str
        )  # fmt: skip
        group.add_argument(f"--{name}", type=kind, default=None, help=f"VaswaniConfig.{name}")
    group.add_argument("--gradient_checkpointing", type=str2bool, default=False, help="trade compute for memory")

    group = parser.add_argument_group("data")
    group.add_argument(
        "--train_file",
        help="a .json/.jsonl translation file, a .tsv, or a prefix PATH (PATH.src/.tgt); LM tasks: plain text, one "
        "text per line, or .json/.jsonl with a --text_column field",
    )
    group.add_argument("--validation_file", help="same formats as --train_file")
    group.add_argument("--test_file", help="same formats as --train_file")
    group.add_argument(
        "--dataset_name",
        help="a `datasets` name (Hub when online), or 'demo' for the built-in set (the default without --train_file)",
    )
    group.add_argument("--dataset_config_name", help="the `datasets` configuration, e.g. 'de-en'")
    group.add_argument("--source_lang", default="en", help="language code of the source side (default: en)")
    group.add_argument("--target_lang", default="de", help="language code of the target side (default: de)")
    group.add_argument("--validation_size", type=int, default=500, help="pairs carved from train without validation")
    group.add_argument("--max_source_length", type=int, default=256, help="in tokens, EOS included")
    group.add_argument("--max_target_length", type=int, default=256, help="in tokens, EOS included")
    group.add_argument("--overlong", choices=["drop", "truncate"], default="drop", help="pairs over the limits")
    group.add_argument(
        "--preprocessing_num_workers", type=int, default=None,
        help="processes that tokenize the data (`datasets.map` num_proc; default: one)",
    )  # fmt: skip
    group.add_argument("--cache_dir", help="where `datasets` caches downloads")

    group = parser.add_argument_group("tokenizer")
    group.add_argument("--tokenizer", help="an existing tokenizer folder; without it a shared BPE is trained")
    group.add_argument("--vocab_size", type=int, default=37000, help="BPE vocabulary size (paper: ~37k for EN-DE)")
    group.add_argument("--min_frequency", type=int, default=2, help="BPE merge minimum frequency")
    group.add_argument(
        "--special_tokens_layout", choices=sorted(SPECIAL_TOKEN_LAYOUTS), default="paper",
        help="ids of the trained BPE's special tokens; paper: <pad>=0 <s>=1 </s>=2 <unk>=3, fairseq: <s>=0 <pad>=1",
    )  # fmt: skip

    group = parser.add_argument_group("batching and optimization")
    group.add_argument("--max_tokens", type=int, default=4096, help="per device and batch: sentences x longest side")
    group.add_argument("--max_sentences", type=int, default=None, help="optional cap on pairs per batch")
    group.add_argument(
        "--gradient_accumulation_steps", type=int, default=1,
        help="batches per optimizer update (paper: ~25k source + 25k target tokens per update)",
    )  # fmt: skip
    group.add_argument(
        "--max_train_steps", type=int, default=None,
        help="optimizer updates (default: from --num_train_epochs; neither is needed with --max_train_minutes or "
        "--early_stopping_patience, which end the run on their own)",
    )  # fmt: skip
    group.add_argument("--num_train_epochs", type=float, default=None, help="used when --max_train_steps is unset")
    group.add_argument(
        "--stop_after_steps",
        type=int,
        default=None,
        help="end this invocation after N updates (checkpoint saved; continue with --resume_from_checkpoint)",
    )
    group.add_argument(
        "--stop_after_minutes",
        type=float,
        default=None,
        help="end this invocation after N minutes of training (for time-limited jobs)",
    )
    group.add_argument(
        "--max_train_minutes",
        type=float,
        default=None,
        help="train until N minutes (training loop wall clock, evaluations included, summed over resumes) are spent, "
        "then finish as a normal run does: final model, evaluation, model folder and card. Enough on its own: "
        "without --max_train_steps the run trains until the budget ends",
    )
    group.add_argument("--lr_scheduler", choices=LR_SCHEDULERS, default="noam", help="noam = the paper's Eq. 3")
    group.add_argument("--learning_rate", type=float, default=None, help="peak LR (noam: default from d_model)")
    group.add_argument("--lr_factor", type=float, default=1.0, help="scales the noam curve")
    group.add_argument("--warmup_steps", type=int, default=4000, help="LR warmup in updates (paper: 4000)")
    group.add_argument("--adam_beta1", type=float, default=0.9, help="Adam beta1 (paper: 0.9)")
    group.add_argument("--adam_beta2", type=float, default=0.98, help="Adam beta2 (paper: 0.98)")
    group.add_argument("--adam_epsilon", type=float, default=1e-9, help="Adam epsilon (paper: 1e-9)")
    group.add_argument("--weight_decay", type=float, default=0.0, help="AdamW decay of matrices (paper: 0)")
    group.add_argument("--max_grad_norm", type=float, default=0.0, help="clip gradients to this norm (0: off)")
    group.add_argument(
        "--mixed_precision",
        choices=list(MIXED_PRECISION_CHOICES),
        default=None,
        help="bf16: autocast, float32 weights/optimizer/loss; fp16: GPU only. Default: the accelerate configuration's, "
        "else bf16 where the hardware computes it natively (GPU, CPU with AVX512-BF16/AMX), else no",
    )
    group.add_argument(
        "--seed", type=int, default=0, help="seeds the initial weights, the validation split, batch order and dropout"
    )
    group.add_argument("--drophead_p_start", type=float, default=None, help="scheduled DropHead: rate at step 0")
    group.add_argument("--drophead_p_end", type=float, default=None, help="scheduled DropHead: rate at the end")
    group.add_argument("--drophead_kinds", type=str_list, default=list(DROPHEAD_KINDS), help="encoder,decoder,cross")

    group = parser.add_argument_group("evaluation")
    group.add_argument("--eval_steps", type=int, default=1000, help="evaluate every N updates (0: only at the end)")
    group.add_argument("--max_eval_samples", type=int, default=None, help="BLEU on at most N validation pairs")
    group.add_argument("--eval_max_tokens", type=int, default=None, help="token budget of evaluation batches")
    group.add_argument("--num_beams", type=int, default=4, help="beam size of evaluation's translations (paper: 4)")
    group.add_argument(
        "--length_penalty", type=float, default=0.6,
        help="alpha of evaluation's beam search, generate()'s score/length**alpha (paper: 0.6, GNMT's formula)",
    )  # fmt: skip
    group.add_argument("--num_examples", type=int, default=5, help="translations to print after evaluation")
    group.add_argument(
        "--early_stopping_patience",
        type=int,
        default=None,
        help="stop after N evaluations (every --eval_steps) without a better --metric_for_best; the averaging "
        "window then ends at the best checkpoint (vaswani/stopping.py)",
    )
    group.add_argument(
        "--metric_for_best",
        choices=sorted(STOPPING_METRICS),
        default=None,
        help="validation metric of early stopping and of the final model's choice (--final_model auto); translation: "
        "bleu (default), chrf or loss; causal_lm and masked_lm: loss (default) or perplexity",
    )

    group = parser.add_argument_group("checkpoints, output and logging")
    group.add_argument("--output_dir", help="where the run and the final model go (required)")
    group.add_argument("--overwrite_output_dir", action="store_true", help="replace a previous run in output_dir")
    group.add_argument("--resume_from_checkpoint", help="'latest' or a checkpoint folder of this run")
    group.add_argument("--checkpoint_steps", type=int, default=None, help="save every N updates")
    group.add_argument("--checkpoint_minutes", type=float, default=10.0, help="save every N minutes (paper: 10)")
    group.add_argument(
        "--keep_checkpoints", type=int, default=5, help="keep the last K (at least --average_checkpoints)"
    )
    group.add_argument(
        "--average_checkpoints", type=int, default=5,
        help="average up to N checkpoints of the averaging window, saved evenly over it when the run's end is known "
        "(paper: 5 base, 20 big; 0 or 1: no averaging)",
    )  # fmt: skip
    group.add_argument(
        "--average_window", type=float, default=0.1,
        help="the averaging window: the last fraction of the run's updates, or of its time budget when the budget "
        "ends it (the paper's 5 checkpoints 10 minutes apart were the last ~7%% of its base run)",
    )  # fmt: skip
    group.add_argument(
        "--final_model", choices=FINAL_MODELS, default="auto",
        help="the model the run hands over: auto = the best on the validation set (--metric_for_best) of the last "
        "checkpoint, the best evaluated checkpoint and the window's average (a tie goes to the simpler, in that "
        "order); last, best or average force one",
    )  # fmt: skip
    group.add_argument(
        "--logging_steps", type=int, default=100, help="log loss, LR and tokens/s every N updates (0: never)"
    )
    group.add_argument(
        "--report_to", default="auto", help="accelerate trackers: auto (tensorboard if installed), none"
    )
    group.add_argument("--push_to_hub", action="store_true", help="upload the final model with its model card")
    group.add_argument("--hub_model_id", help="the Hub repository, e.g. user/transformer-en-de")
    add_language_model_options(parser)
    return parser


def add_language_model_options(parser: argparse.ArgumentParser) -> None:
    """The options of --task causal_lm / masked_lm (vaswani/data/text.py); an error with --task translation."""
    group = parser.add_argument_group("language-model tasks (--task causal_lm / masked_lm)")
    group.add_argument(
        "--text_column", default="text",
        help="LM tasks: the field of a .json/.jsonl line or the `datasets` column that holds the text (a dotted path "
        "such as translation.en reaches into nested objects); other files are plain text, one text per line",
    )  # fmt: skip
    group.add_argument(
        "--block_size", type=int, default=256,
        help="LM tasks: tokens per example: packed blocks (--packing yes) or the limit of a line (--packing no)",
    )  # fmt: skip
    group.add_argument(
        "--packing", choices=PACKING_CHOICES, default="yes",
        help="LM tasks: yes: concatenate the texts and cut blocks of --block_size tokens (run_clm's group_texts); "
        "no: one example per line, cut to --block_size tokens",
    )  # fmt: skip
    group.add_argument(
        "--mlm_probability", type=float, default=0.15,
        help="masked_lm: share of tokens to predict (of them 80%% <mask>, 10%% a random token, 10%% unchanged)",
    )  # fmt: skip


def parse_args(argv: list[str] | None = None, prog: str | None = None) -> argparse.Namespace:
    """Defaults < YAML (`--config`) < command line. Unknown options, on either side, are errors."""
    argv = sys.argv[1:] if argv is None else argv
    parser = build_parser(prog)
    config_path = _find_config_path(argv)
    from_yaml = _read_yaml_options(parser, config_path) if config_path is not None else {}
    parser.set_defaults(**from_yaml)
    args = parser.parse_args(argv)
    # Options the user set (YAML or command line), as opposed to defaults; not saved with the run.
    args.explicit = set(from_yaml) | {a[2:].split("=", 1)[0] for a in argv if a.startswith("--")}
    TASKS[args.task].check_args(args)
    if args.metric_for_best is None:  # resolved here, once: run_args.json and a resume see the task's default
        args.metric_for_best = TASKS[args.task].metrics[0]
    _check_args(args)
    if not (args.train_file or args.dataset_name):  # resolved here, once: run_args.json and a resume see "demo"
        args.dataset_name = "demo"
    return args


def _find_config_path(argv: list[str]) -> str | None:
    probe = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    probe.add_argument("--config")
    known, _ = probe.parse_known_args(argv)
    return known.config


def _read_yaml_options(parser: argparse.ArgumentParser, path: str) -> dict:
    if not os.path.isfile(path):
        raise UsageError(f"--config {path}: no such file.")
    try:
        text = Path(path).read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise UsageError(
            f"--config {path} is not UTF-8 text ({exc.reason} at byte {exc.start}): save it as UTF-8 (e.g. "
            f"`iconv -f latin1 -t utf-8`)"
        ) from None
    try:
        values = yaml.safe_load(text) or {}
    except yaml.YAMLError as exc:
        raise UsageError(f"--config {path} is not valid YAML: {exc}") from None
    if not isinstance(values, dict):
        raise UsageError(f"--config {path} must hold a mapping of option: value.")
    actions = {action.dest: action for action in parser._actions}
    options = {}
    for key, value in values.items():
        if key not in actions or key in ("help", "config"):
            close = [name for name in actions if name.startswith(str(key)[:4])][:3]
            hint = f" (did you mean {', '.join(close)}?)" if close else ""
            raise UsageError(f"--config {path}: unknown option {key!r}{hint}.")
        action = actions[key]
        if value is not None and action.type is not None:
            try:  # the command line's conversion; lists and booleans pass through as YAML typed them
                value = action.type(value if isinstance(value, (list, bool)) else str(value))
            except (argparse.ArgumentTypeError, ValueError, TypeError) as exc:
                raise UsageError(f"--config {path}: option {key!r}: {exc}") from None
        if action.choices is not None and value is not None and value not in action.choices:
            raise UsageError(f"--config {path}: {key}={value!r} is not one of {list(action.choices)}.")
        options[key] = value
    return options


def _check_args(args: argparse.Namespace) -> None:
    if not args.output_dir:
        raise UsageError("--output_dir is required (on the command line or in the --config file).")
    positive = ["max_tokens", "gradient_accumulation_steps", "max_source_length", "max_target_length", "num_beams"]
    for name in positive:
        if getattr(args, name) is None or getattr(args, name) < 1:
            raise UsageError(f"--{name} {getattr(args, name)} is not allowed; use a positive integer.")
    for name in (
        "max_train_steps",
        "max_sentences",
        "eval_max_tokens",
        "checkpoint_steps",
        "max_eval_samples",
        "stop_after_steps",
    ):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            raise UsageError(
                f"--{name} {getattr(args, name)} is not allowed; use a positive integer or leave it unset."
            )
    if _unknown_length(args) and args.max_train_minutes is None and args.early_stopping_patience is None:
        raise UsageError(
            "set when training ends: --max_train_steps (optimizer updates), --num_train_epochs, --max_train_minutes "
            "or --early_stopping_patience."
        )
    if _unknown_length(args) and args.lr_scheduler in SCHEDULES_NEEDING_TOTAL:
        raise UsageError(
            f"--lr_scheduler {args.lr_scheduler} decays over the run's number of updates, which is unknown without "
            "--max_train_steps or --num_train_epochs: set one, or use noam, inverse_sqrt, constant_with_warmup or "
            "constant with a time budget or early stopping."
        )
    if _unknown_length(args) and args.drophead_p_start is not None:
        raise UsageError(
            "scheduled DropHead (--drophead_p_start/--drophead_p_end) runs over the run's number of updates, which is "
            "unknown without --max_train_steps or --num_train_epochs: set one."
        )
    if args.num_train_epochs is not None and args.num_train_epochs <= 0:
        raise UsageError(f"--num_train_epochs {args.num_train_epochs} is not allowed; use a positive number.")
    TASKS[args.task].check_lengths(args)
    for name in ("warmup_steps", "eval_steps", "logging_steps", "average_checkpoints", "keep_checkpoints"):
        if getattr(args, name) < 0:
            raise UsageError(f"--{name} {getattr(args, name)} is not allowed; use an integer >= 0.")
    for name in ("checkpoint_minutes", "stop_after_minutes", "max_train_minutes"):
        if getattr(args, name) is not None and getattr(args, name) <= 0:
            raise UsageError(f"--{name} must be positive.")
    if not 0 < args.average_window <= 1:
        raise UsageError(
            f"--average_window {args.average_window} is not allowed; use a fraction of the run in (0, 1]."
        )
    if args.final_model == "best" and not args.eval_steps:
        raise UsageError("--final_model best needs evaluations during training: set --eval_steps N > 0.")
    if args.early_stopping_patience is not None:
        if args.early_stopping_patience < 1:
            raise UsageError(
                f"--early_stopping_patience {args.early_stopping_patience} is not allowed; use a positive number of "
                "evaluations or leave it unset."
            )
        if not args.eval_steps:
            raise UsageError("--early_stopping_patience needs evaluations during training: set --eval_steps N > 0.")
    if args.source_lang == args.target_lang:
        raise UsageError(f"--source_lang and --target_lang are both {args.source_lang!r}; they must differ.")
    if args.push_to_hub and not args.hub_model_id:
        raise UsageError("--push_to_hub needs --hub_model_id (e.g. your-name/transformer-en-de).")
    if args.hub_model_id:
        try:
            check_repo_id(args.hub_model_id)  # before training, not after hours of it
        except PushError as exc:
            raise UsageError(f"--hub_model_id: {exc}") from None
    unknown = [k for k in args.drophead_kinds if k not in DROPHEAD_KINDS]
    if unknown:
        raise UsageError(f"--drophead_kinds {unknown} are not allowed; choose from {list(DROPHEAD_KINDS)}.")
    if (args.drophead_p_start is None) != (args.drophead_p_end is None):
        raise UsageError("scheduled DropHead needs both --drophead_p_start and --drophead_p_end.")
    if args.report_to not in ("auto", "none", "all", "tensorboard", "wandb", "mlflow", "comet_ml", "aim", "clearml"):
        raise UsageError(f"--report_to {args.report_to!r} is not a known tracker; use auto, none or a tracker name.")


def _unknown_length(args: argparse.Namespace) -> bool:
    """Whether the run's number of updates is unknown in advance (a time budget or early stopping ends it)."""
    return args.max_train_steps is None and args.num_train_epochs is None


def prepare_output_dir(args: argparse.Namespace) -> tuple[Path, Path | None]:
    """Refuse to mix runs: an output folder holding another run needs --resume_from_checkpoint or
    --overwrite_output_dir. A resumed run must keep the options that define it. Returns the output folder and the
    checkpoint to resume from (None for a new run)."""
    output_dir = Path(args.output_dir)
    previous = output_dir / RUN_ARGS_FILE
    if args.resume_from_checkpoint:
        if not previous.exists():
            raise UsageError(
                f"cannot resume: {output_dir} holds no run of train.py ({RUN_ARGS_FILE} is missing). "
                "--resume_from_checkpoint continues a run in its own --output_dir; start a new run without it."
            )
        try:
            checkpoint = CheckpointManager(output_dir / CHECKPOINTS_SUBDIR).resolve(args.resume_from_checkpoint)
        except CheckpointError as exc:
            raise UsageError(f"cannot resume: {exc}") from None
        try:
            saved = json.loads(previous.read_text(encoding="utf-8"))
            if not isinstance(saved, dict):
                raise ValueError("not a JSON object")
        except (ValueError, UnicodeDecodeError) as exc:
            raise UsageError(f"cannot resume: {previous} is damaged ({exc}); start a new run.") from None
        changed = [k for k in RUN_DEFINING_OPTIONS if k in saved and saved[k] != _jsonable(getattr(args, k))]
        if changed:
            details = ", ".join(f"--{k} {saved[k]!r} -> {getattr(args, k)!r}" for k in changed)
            raise UsageError(
                f"cannot resume: options that define the run changed ({details}). Resume with the original "
                "options, or start a new run in another --output_dir."
            )
        return output_dir, checkpoint
    if output_dir.exists() and not output_dir.is_dir():
        raise UsageError(f"--output_dir {output_dir} is a file; give a folder.")
    entries = [e for e in output_dir.iterdir() if e.name != TOKENIZER_STAGING] if output_dir.is_dir() else []
    if entries and not args.overwrite_output_dir:
        what = "another run" if previous.exists() else "files"
        raise UsageError(
            f"--output_dir {output_dir} already holds {what}. Pass --resume_from_checkpoint latest to continue "
            "that run, --overwrite_output_dir to replace it, or choose a new --output_dir."
        )
    if entries and not previous.is_file():
        raise UsageError(
            f"--overwrite_output_dir replaces a previous run of train.py, but {output_dir} holds files and no run "
            f"({RUN_ARGS_FILE} is missing); nothing was deleted. Choose a new or empty --output_dir."
        )
    checkpoints = output_dir / CHECKPOINTS_SUBDIR
    if entries and checkpoints.is_symlink():
        raise UsageError(
            f"{checkpoints} is a symbolic link (to {os.readlink(checkpoints)}): --overwrite_output_dir never deletes "
            "through links and a new run must not mix with old checkpoints; nothing was deleted. Remove the link "
            "yourself, or choose a new --output_dir."
        )
    return output_dir, None


def start_new_run(args: argparse.Namespace, output_dir: Path) -> None:
    """Main process, once every check has passed: with --overwrite_output_dir remove what the previous run created
    (`remove_previous_run`), move the newly trained tokenizer in and write run_args.json (atomically, last: until
    then the folder still reads as the previous run)."""
    output_dir.mkdir(parents=True, exist_ok=True)
    if args.overwrite_output_dir and (output_dir / RUN_ARGS_FILE).is_file():
        removed = remove_previous_run(output_dir)
        logger.info("--overwrite_output_dir: removed the previous run's %s", ", ".join(removed) or "nothing")
    staged = output_dir / TOKENIZER_STAGING
    if staged.is_dir():
        for file in sorted(staged.iterdir()):
            os.replace(file, output_dir / file.name)
        staged.rmdir()
    saved = {k: _jsonable(v) for k, v in vars(args).items() if k != "explicit"}
    write_file_atomically(output_dir / RUN_ARGS_FILE, json.dumps(saved, indent=2, sort_keys=True))


def remove_previous_run(output_dir: Path) -> list[str]:
    """Delete what a train.py run creates in `output_dir`, and nothing else: its checkpoints (step-N folders and the
    leftovers of interrupted saves under checkpoints/ and best_checkpoint/), metrics.jsonl, results.json and the files of its final model
    (`is_model_file`). Links are removed, never followed. Returns the names removed."""
    removed = []
    for subdir in (CHECKPOINTS_SUBDIR, BEST_DIR):  # the checkpoints, and the copy of the best one (early stopping)
        checkpoints = output_dir / subdir
        if not checkpoints.is_dir() or checkpoints.is_symlink():
            continue
        for entry in sorted(checkpoints.iterdir()):
            if STEP_DIR.fullmatch(entry.name) or entry.name.startswith((TMP_PREFIX, ABANDONED_PREFIX)):
                if entry.is_dir() and not entry.is_symlink():
                    shutil.rmtree(entry)
                else:
                    entry.unlink()
                removed.append(f"{subdir}/{entry.name}")
        if not any(checkpoints.iterdir()):
            checkpoints.rmdir()
    for entry in sorted(output_dir.iterdir()):
        ours = entry.name in (METRICS_FILE, RESULTS_FILE) or is_model_file(entry.name)
        if ours and (entry.is_symlink() or entry.is_file()):
            entry.unlink()
            removed.append(entry.name)
    return removed


def _jsonable(value):
    return json.loads(json.dumps(value))


def create_accelerator(args: argparse.Namespace):
    from accelerate import Accelerator
    from accelerate.utils import DistributedDataParallelKwargs, ProjectConfiguration

    trackers = args.report_to
    if trackers == "auto":
        try:
            import tensorboard  # noqa: F401

            trackers = "tensorboard"
        except ImportError:
            trackers = None
    elif trackers == "none":
        trackers = None
    # find_unused_parameters is set once the model is known (LayerDrop needs it); DDP reads it in prepare().
    ddp_kwargs = DistributedDataParallelKwargs(find_unused_parameters=False)
    try:
        mixed_precision, why = resolve_mixed_precision(args.mixed_precision, training_device_type())
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    accelerator = Accelerator(
        gradient_accumulation_steps=args.gradient_accumulation_steps,
        mixed_precision=mixed_precision,
        log_with=trackers,
        project_config=ProjectConfiguration(
            project_dir=args.output_dir, logging_dir=str(Path(args.output_dir) / LOGS_DIR)
        ),
        kwargs_handlers=[ddp_kwargs],
    )
    return accelerator, ddp_kwargs, why


@contextlib.contextmanager
def together(accelerator):
    """A block every process runs at the same time, each its own part of it (`if accelerator.is_main_process: ...`
    is a block the others wait for), where a failure on one process stops them all together: the process that
    failed raises its error (`error: ...`, exit 2, for a user error) and the others raise `ReportedElsewhere` (exit 2,
    nothing printed), instead of waiting at a barrier until gloo reports a lost peer with a traceback. Where the block
    ends, every process learns the others' outcome (an all_gather of one flag, which is also a barrier)."""
    if accelerator.num_processes == 1:
        yield
        return
    try:
        yield
    except Exception:
        _stop_together(accelerator, failed=True)  # tell the others, then raise this process's own error
        raise
    _stop_together(accelerator, failed=False)


@contextlib.contextmanager
def main_process_first(accelerator):
    """`accelerator.main_process_first()` (the main process runs the block first, then the others, which may reuse
    what it made), where a failure on one process stops them all together, as in `together`."""
    if not accelerator.is_main_process:
        with together(accelerator):  # wait for the main process's block
            pass
    with together(accelerator):
        yield
    if accelerator.is_main_process:
        with together(accelerator):  # wait for the others' blocks
            pass


def _stop_together(accelerator, failed: bool) -> None:
    """One collective point: raise `ReportedElsewhere` if another process failed (each process's own failure is
    raised by its caller)."""
    from accelerate.utils import gather_object

    others = gather_object([failed])
    if not failed and any(others):
        raise ReportedElsewhere(f"process {others.index(True)} of the run failed")


def setup_logging(accelerator) -> None:
    import datasets
    import transformers

    logging.basicConfig(
        format="%(asctime)s %(levelname)s %(name)s: %(message)s", datefmt="%H:%M:%S", level=logging.INFO
    )
    if not accelerator.is_main_process:
        logger.setLevel(logging.WARNING)
    logging.getLogger("accelerate").setLevel(logging.WARNING)
    # save_model stores tied embeddings once and says so at every checkpoint; load_checkpoint re-ties them (tested).
    logging.getLogger("accelerate.utils.other").addFilter(
        lambda record: "Removed shared tensor" not in record.getMessage()
    )
    datasets.utils.logging.set_verbosity_warning()
    transformers.utils.logging.set_verbosity_warning()
    if not accelerator.is_local_main_process:
        datasets.utils.logging.disable_progress_bar()


class MetricsLog:
    """Appends one JSON object per line to output_dir/metrics.jsonl (main process) and logs to the trackers."""

    def __init__(self, accelerator, path: Path):
        self.accelerator, self.path = accelerator, path

    def __call__(self, split: str, step: int, values: dict) -> None:
        if self.accelerator.is_main_process:
            with self.path.open("a", encoding="utf-8") as f:
                f.write(json.dumps({"split": split, "step": step, **values}) + "\n")
        self.accelerator.log({f"{split}/{k}": v for k, v in values.items() if isinstance(v, (int, float))}, step=step)


# ======================================================================================================================
# 3. Data and tokenizer
# ======================================================================================================================
def load_data(args, accelerator):
    if args.dataset_name == "demo":
        logger.info("Using the built-in demo dataset (numbers, dates, quantities): no --train_file or --dataset_name.")
    with main_process_first(accelerator):  # the main process builds the Arrow cache, the others reuse it
        return load_translation_splits(
            train_file=args.train_file, validation_file=args.validation_file, test_file=args.test_file,
            dataset_name=args.dataset_name, dataset_config_name=args.dataset_config_name,
            source_lang=args.source_lang, target_lang=args.target_lang, validation_size=args.validation_size,
            seed=args.seed, cache_dir=args.cache_dir,
        )  # fmt: skip


def get_tokenizer(args, raw, output_dir: Path, accelerator, config: VaswaniConfig):
    """An existing tokenizer (--tokenizer, or the one this run saved before a resume), or a new shared BPE trained on
    the training data (`Task.train_tokenizer`: both sides of the pairs, or the text of an LM task). A new tokenizer
    is staged in output_dir/.tmp-tokenizer/ and moved into output_dir (part of the final model folder) by
    `start_new_run`, once every check has passed."""
    source = args.tokenizer or (output_dir if args.resume_from_checkpoint else None)
    if source is not None:
        tokenizer = load_tokenizer(source)  # tokenizer.json checked (a `{}` or garbage file is a clear error)
        if args.tokenizer and "vocab_size" in args.explicit and len(tokenizer) != args.vocab_size:
            raise UsageError(
                f"--tokenizer {args.tokenizer} has {len(tokenizer)} tokens but --vocab_size is {args.vocab_size}: the "
                "model's vocabulary must match the tokenizer. Drop --vocab_size or use a matching tokenizer."
            )
        if args.model_name_or_path:
            check_tokenizer_fits(tokenizer, config, where=f"--tokenizer {source}", exact=True)
        TASKS[args.task].check_tokenizer(tokenizer, source)
        return tokenizer
    if args.model_name_or_path:
        raise UsageError(
            "--model_name_or_path needs the tokenizer the model was trained with: pass --tokenizer (a saved model "
            "folder holds its tokenizer, e.g. --tokenizer " + str(args.model_name_or_path) + ")."
        )
    with main_process_first(accelerator):
        if accelerator.is_main_process:
            logger.info("Training a shared BPE tokenizer (vocab_size=%d) on the training data", args.vocab_size)
            tokenizer = TASKS[args.task].train_tokenizer(args, raw)
            staged = output_dir / TOKENIZER_STAGING  # moved into output_dir once every check has passed
            if staged.exists():
                shutil.rmtree(staged)
            staged.mkdir(parents=True)
            tokenizer.save_pretrained(staged)
        else:
            tokenizer = load_tokenizer(output_dir / TOKENIZER_STAGING)
    return tokenizer


def tokenize_splits(args, raw, tokenizer, accelerator):
    """input_ids and labels (EOS appended) per pair, over-long pairs dropped or truncated, lengths for batching."""
    src, tgt = args.source_lang, args.target_lang
    limits = {"input_ids": args.max_source_length, "labels": args.max_target_length}

    def preprocess(batch):
        pairs = batch["translation"]
        encoded = tokenizer([p[src] for p in pairs], text_target=[p[tgt] for p in pairs])
        overlong = [
            len(s) > limits["input_ids"] or len(t) > limits["labels"]
            for s, t in zip(encoded["input_ids"], encoded["labels"], strict=True)
        ]
        if args.overlong == "truncate":
            eos = tokenizer.eos_token_id
            for key, limit in limits.items():
                encoded[key] = [ids if len(ids) <= limit else ids[: limit - 1] + [eos] for ids in encoded[key]]
            encoded["attention_mask"] = [[1] * len(ids) for ids in encoded["input_ids"]]
        encoded["overlong"] = overlong
        encoded["source_length"] = [len(ids) for ids in encoded["input_ids"]]
        encoded["target_length"] = [len(ids) for ids in encoded["labels"]]
        return encoded

    tokenized = {}
    with main_process_first(accelerator):
        for split, dataset in raw.items():
            mapped = dataset.map(
                preprocess, batched=True, remove_columns=dataset.column_names,
                num_proc=args.preprocessing_num_workers, desc=f"Tokenizing {split}",
            )  # fmt: skip
            count = sum(mapped["overlong"])
            if count:
                if args.overlong == "drop" and split == "train":
                    mapped = mapped.filter(
                        lambda flags: [not f for f in flags], input_columns="overlong", batched=True
                    )
                    logger.info("%s: dropped %d over-long pairs (limits %s)", split, count, limits)
                else:  # held-out pairs are never dropped: scores must cover the whole split
                    logger.info(
                        "%s: %d pairs exceed the limits %s and were %s",
                        split,
                        count,
                        limits,
                        "truncated" if args.overlong == "truncate" else "kept for evaluation",
                    )
            if split == "train" and len(mapped) == 0:
                raise DataError(
                    "every training pair is over the length limits; raise --max_source_length/--max_target_length."
                )
            tokenized[split] = mapped.remove_columns("overlong")
    return tokenized


# ======================================================================================================================
# 4. Model
# ======================================================================================================================
def resolve_model_config(args) -> VaswaniConfig:
    """The model's configuration, validated before any data is read or any file written: a saved model's config with
    the command line's overrides, or a preset with them. (The vocabulary size and special-token ids of a new model
    come from the tokenizer later; until then `--vocab_size` stands in.)"""
    overrides = {name: getattr(args, name) for name in MODEL_OPTIONS if getattr(args, name) is not None}
    try:
        if args.model_name_or_path:  # a local folder; config.json checked (ModelFolderError names the problem)
            check_model_folder(args.model_name_or_path, need_tokenizer=False)
            config = load_config(args.model_name_or_path, **overrides)
        else:
            config = VaswaniConfig.from_preset(args.model_preset, vocab_size=args.vocab_size, **overrides)
        config.validate()
    except ModelFolderError as exc:
        raise UsageError(f"--model_name_or_path: {exc}") from None
    except ValueError as exc:  # config validation: a wrong option value
        raise UsageError(str(exc)) from None
    return config


def build_model(args, config, tokenizer) -> torch.nn.Module:
    """The task's model (`Task.model_class`): loaded from --model_name_or_path, or new with the tokenizer's
    vocabulary size and special-token ids."""
    if args.model_name_or_path:  # weights checked against the config (with the command line's overrides)
        model, _ = load_model_folder(args.model_name_or_path, need_tokenizer=False, config=config)
    else:
        config.vocab_size = len(tokenizer)
        config.pad_token_id, config.bos_token_id = tokenizer.pad_token_id, tokenizer.bos_token_id
        config.eos_token_id = tokenizer.eos_token_id
        if config.is_encoder_decoder:  # the decoder starts from BOS; a one-stack config has no such id
            config.decoder_start_token_id = tokenizer.bos_token_id
        try:
            config.validate()
        except ValueError as exc:
            raise UsageError(f"the tokenizer does not fit the model configuration: {exc}") from None
        model = TASKS[args.task].model_class(config)
    check_tokenizer_fits(tokenizer, model.config, where=f"--tokenizer {args.tokenizer or 'of this run'}", exact=True)
    if args.gradient_checkpointing:
        # transformers renamed it; the old name warns that it goes away in v6 (the new one is not in every 5.x)
        getattr(model, "activation_checkpointing_enable", model.gradient_checkpointing_enable)()
    return model


def build_optimizer(args, model, device_type: str) -> torch.optim.Optimizer:
    """Adam(0.9, 0.98, 1e-9) as in Section 5.3; with --weight_decay, AdamW decaying matrices only (p.dim() >= 2)."""
    betas = (args.adam_beta1, args.adam_beta2)
    params = [p for p in model.parameters() if p.requires_grad]
    # The fused kernel updates all tensors in one pass (CPU and CUDA); the per-tensor loop dominates small models.
    fused = {"fused": True} if device_type in ("cpu", "cuda") else {}
    if args.weight_decay == 0:
        return torch.optim.Adam(params, lr=1.0, betas=betas, eps=args.adam_epsilon, **fused)
    groups = [
        {"params": [p for p in params if p.dim() >= 2], "weight_decay": args.weight_decay},
        {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0},
    ]
    return torch.optim.AdamW(groups, lr=1.0, betas=betas, eps=args.adam_epsilon, **fused)


# ======================================================================================================================
# 5. Checkpoints and exact resume
# ======================================================================================================================
@dataclasses.dataclass
class TrainingProgress:
    """Where the run is; saved in every checkpoint (`TrainingState`) so a resume continues exactly."""

    step: int = 0  # optimizer updates done
    epoch: int = 0  # epoch of the next batch
    batch_in_epoch: int = 0  # index (for this rank) of the next batch within its epoch
    target_tokens: int = 0  # real target tokens trained on, all processes
    train_seconds: float = 0.0

    def state_dict(self) -> dict:
        return dataclasses.asdict(self)

    def load_state_dict(self, state: dict) -> None:
        for key, value in state.items():
            setattr(self, key, value)


@dataclasses.dataclass
class TrainingState:
    """Everything a checkpoint holds besides the weights, written with `save_state_file` (safetensors + JSON): a
    resume reads nothing that can execute code, and restores all of it or stops with an error."""

    accelerator: object
    model: torch.nn.Module  # the unwrapped model (its LayerDrop generators)
    optimizer: torch.optim.Optimizer
    lr_scheduler: object
    drophead: DropHeadScheduler | None
    progress: TrainingProgress
    max_steps: int

    def state_dict(self) -> dict:
        scaler = self.accelerator.scaler
        return {
            "progress": self.progress.state_dict(),
            "max_steps": self.max_steps,
            "num_processes": self.accelerator.num_processes,
            "accelerator_step": self.accelerator.step,
            "optimizer": self.optimizer.state_dict(),
            "lr_scheduler": self.lr_scheduler.state_dict(),
            "layerdrop": self.model.layerdrop_state_dict(),
            "drophead": self.drophead.state_dict() if self.drophead is not None else None,
            "grad_scaler": scaler.state_dict() if scaler is not None else None,
        }

    def load_state_dict(self, state: dict, source: Path) -> None:
        """Restore `state` (read from `source`); a `CheckpointError` naming `source` when it does not fit this run."""
        if state["num_processes"] != self.accelerator.num_processes:
            raise CheckpointError(
                f"{source} was written by {state['num_processes']} process(es) but this run has "
                f"{self.accelerator.num_processes}: resume with the same number of processes."
            )
        if state["max_steps"] != self.max_steps:
            raise CheckpointError(
                f"{source} belongs to a run of {state['max_steps']} updates but this run would make "
                f"{self.max_steps}: the LR and DropHead schedules depend on it. Resume with the original "
                "--max_train_steps / --num_train_epochs."
            )
        if (state["drophead"] is None) != (self.drophead is None):
            raise CheckpointError(f"{source} and the options disagree on scheduled DropHead.")
        if (state["grad_scaler"] is None) != (self.accelerator.scaler is None):
            raise CheckpointError(f"{source} and --mixed_precision disagree on fp16 loss scaling.")
        self.progress.load_state_dict(state["progress"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.lr_scheduler.load_state_dict(state["lr_scheduler"])
        self.model.load_layerdrop_state_dict(state["layerdrop"])
        if self.drophead is not None:
            self.drophead.load_state_dict(state["drophead"])
        if self.accelerator.scaler is not None:
            self.accelerator.scaler.load_state_dict(state["grad_scaler"])
        self.accelerator.step = state["accelerator_step"]


def save_checkpoint(
    accelerator,
    manager: CheckpointManager,
    model,
    training: TrainingState,
    write_more: Callable[[Path], None] | None = None,
) -> Path:
    """The weights (`model.safetensors`, through `accelerator.save_model`), the training state, every process's
    random number generators and what `write_more(folder)` writes (main process: the time budget and early-stopping
    state), published atomically by the CheckpointManager."""

    def write(directory: Path) -> None:
        accelerator.save_model(model, directory)
        save_state_file(directory / RNG_FILE.format(rank=accelerator.process_index), rng_states())
        if accelerator.is_main_process:
            save_state_file(directory / TRAINING_STATE_FILE, training.state_dict())
            (directory / PROGRESS_FILE).write_text(json.dumps(training.progress.state_dict(), indent=2))
            if write_more is not None:
                write_more(directory)

    path = manager.save(
        training.progress.step,
        write,
        is_main_process=accelerator.is_main_process,
        together=functools.partial(together, accelerator),
    )
    logger.info("Saved checkpoint %s", path)
    return path


def load_checkpoint(accelerator, path: Path, training: TrainingState) -> None:
    """Restore a checkpoint written by `save_checkpoint`. Every file is read as safetensors (never unpickled); a
    missing, damaged or tampered file, or one that does not fit this run, raises `CheckpointError` naming it."""
    legacy = sorted(p.name for p in path.glob("*.pkl")) + sorted(p.name for p in path.glob("*.bin"))
    if not (path / TRAINING_STATE_FILE).is_file() and legacy:
        raise CheckpointError(
            f"{path} holds pickle files ({', '.join(legacy)}) and no {TRAINING_STATE_FILE}: it was written by an older train.py "
            "and is not loaded, because unpickling can run code. Start a new run, or average its weights with "
            "`vaswani average`."
        )
    load_weights_into_model(training.model, load_weights(path), source=str(path))
    state = load_state_file(path / TRAINING_STATE_FILE)
    try:
        training.load_state_dict(state, path / TRAINING_STATE_FILE)
    except (KeyError, TypeError, ValueError, RuntimeError, IndexError) as error:
        if isinstance(error, CheckpointError):
            raise
        raise CheckpointError(
            f"{path / TRAINING_STATE_FILE} does not fit this run ({type(error).__name__}: {error}); resume with the "
            "original options, or from another checkpoint."
        ) from None
    rng_file = path / RNG_FILE.format(rank=accelerator.process_index)
    set_rng_states(load_state_file(rng_file), rng_file)


def truncate_metrics(path: Path, step: int) -> int:
    """Cut `metrics.jsonl` back to what was logged up to the checkpoint of `step` (rows of later steps, final
    evaluations at that step, and a line cut short by a kill are dropped), atomically. Returns the rows dropped."""
    if not path.is_file():
        return 0
    kept, dropped = [], 0
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            row = json.loads(line)
            keep = row["step"] < step or (row["step"] == step and not str(row["split"]).startswith("final_"))
        except (ValueError, KeyError, TypeError):
            keep = False
        if keep:
            kept.append(line + "\n")
        else:
            dropped += 1
    if dropped:
        write_file_atomically(path, "".join(kept))
    return dropped


# ======================================================================================================================
# 6. Batches
# ======================================================================================================================
def batch_stream(sampler: TokenBatchSampler, progress: TrainingProgress):
    """This rank's batches, epoch after epoch, starting at the position stored in `progress`. Yields
    (epoch, index_in_epoch, batch_indices)."""
    epoch, start = progress.epoch, progress.batch_in_epoch
    while True:
        batches = sampler.batches(epoch)
        for index in range(start, len(batches)):
            yield epoch, index, batches[index]
        epoch, start = epoch + 1, 0


BATCH_COLUMNS = ("input_ids", "attention_mask", "labels")  # an LM's training examples have no labels: its collator
# makes them (causal: the input ids; masked: the masked tokens)


def collate(dataset, indices, collator, device) -> dict:
    features = dataset.select_columns([c for c in BATCH_COLUMNS if c in dataset.column_names])[indices]
    rows = [dict(zip(features, values, strict=True)) for values in zip(*features.values(), strict=True)]
    batch = collator(rows)
    return {key: value.to(device) for key, value in batch.items()}


# ======================================================================================================================
# 7. Evaluation
# ======================================================================================================================
@torch.no_grad()
def run_evaluation(args, accelerator, model, dataset, raw_split, tokenizer, collator, *, max_samples=None):
    """Validation loss (label-smoothed, per target token) and perplexity; BLEU and chrF of beam-search translations
    against the raw references. Work is split across processes and gathered by example index."""
    from accelerate.utils import gather_object

    from vaswani.metrics import load_metric

    unwrapped = accelerator.unwrap_model(model)
    was_training = unwrapped.training
    unwrapped.eval()
    indices = list(range(len(dataset) if max_samples is None else min(max_samples, len(dataset))))
    subset = dataset.select(indices)
    budget = args.eval_max_tokens or args.max_tokens
    sampler = TokenBatchSampler(
        subset["source_length"], subset["target_length"], budget, shuffle=False,
        num_replicas=accelerator.num_processes, rank=accelerator.process_index, even_batches=False,
        oversized_alone=True,  # held-out pairs are never filtered: one longer than the budget is scored on its own
    )  # fmt: skip
    loss_sum = torch.zeros((), dtype=torch.float64, device=accelerator.device)
    nll_sum = torch.zeros((), dtype=torch.float64, device=accelerator.device)
    tokens = torch.zeros((), dtype=torch.float64, device=accelerator.device)
    predictions = []
    for batch_indices in sampler.batches(0):
        batch = collate(subset, batch_indices, collator, accelerator.device)
        with accelerator.autocast():
            out = unwrapped(**batch)
        mask = batch["labels"] != -100
        count = mask.sum()
        loss_sum += out.loss.double() * count
        nll_sum += torch.nn.functional.cross_entropy(
            out.logits.float()[mask], batch["labels"][mask], reduction="sum"
        ).double()
        tokens += count
        with accelerator.autocast():
            generated = unwrapped.generate(
                input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                num_beams=args.num_beams, length_penalty=args.length_penalty,
            )  # fmt: skip
        texts = tokenizer.batch_decode(generated, skip_special_tokens=True)
        predictions.extend(zip((indices[i] for i in batch_indices), texts, strict=True))
    totals = accelerator.reduce(torch.stack([loss_sum, nll_sum, tokens]), reduction="sum")
    results = {"loss": (totals[0] / totals[2]).item(), "nll": (totals[1] / totals[2]).item()}
    results["ppl"] = math.exp(min(results["nll"], 50.0))
    gathered = sorted(gather_object(predictions))
    hypotheses = [text for _, text in gathered]
    references = [raw_split[i]["translation"][args.target_lang] for i, _ in gathered]
    if accelerator.is_main_process:
        bleu = load_metric("sacrebleu").compute(predictions=hypotheses, references=[[r] for r in references])
        chrf = load_metric("chrf").compute(predictions=hypotheses, references=[[r] for r in references])
        results.update(bleu=bleu["score"], chrf=chrf["score"], bleu_signature=bleu["signature"],
                       chrf_signature=chrf["signature"])  # fmt: skip
    results["examples"] = [
        {"source": raw_split[i]["translation"][args.source_lang], "reference": ref, "translation": hyp}
        for (i, hyp), ref in zip(gathered[: args.num_examples], references, strict=False)
    ]
    unwrapped.train(was_training)
    return results


def log_evaluation(split: str, results: dict, step: int) -> None:
    scores = ", ".join(
        f"{k} {results[k]:.2f}"
        for k in ("bleu", "chrf", "loss", "ppl", "perplexity", "accuracy")
        if isinstance(results.get(k), float)
    )
    logger.info("%s @ step %d: %s", split, step, scores)
    for example in results.get("examples", []):
        logger.info("  source:      %s", example["source"])
        logger.info("  reference:   %s", example["reference"])
        logger.info("  translation: %s", example["translation"])


# ======================================================================================================================
# 8. Tasks: what differs between translation and the language models, chosen once (`TASKS[args.task]`)
# ======================================================================================================================
LM_OPTIONS = ("text_column", "block_size", "packing", "mlm_probability")  # the LM tasks' own options
TRANSLATION_OPTIONS = ("source_lang", "target_lang", "max_source_length", "max_target_length", "overlong",
                       "num_beams", "length_penalty", "num_examples")  # fmt: skip


def refuse_options(args, names, task: str, fix: str) -> None:
    """`error:` for the first of `names` the user set (command line or YAML) that `--task task` does not take."""
    given = [name for name in names if name in args.explicit]
    if given:
        raise UsageError(f"--{given[0]} is not an option of --task {task}: {fix}.")


def vaswani_command() -> str:
    """The `vaswani` command as a user can type it: `vaswani` where the shell finds this installation's script, its
    path otherwise (`.venv/bin/vaswani` after `make demo`, whose environment is not activated in the user's shell),
    and `python -m vaswani.cli` where no script was installed."""
    script = Path(sys.executable).parent / "vaswani"
    found = shutil.which("vaswani")
    if found and script.exists() and Path(found).resolve() == script.resolve():
        return "vaswani"
    if not script.exists():
        return f"{sys.executable} -m vaswani.cli"
    relative = os.path.relpath(script)
    return str(script) if relative.startswith("..") else relative


class TranslationTask:
    """The paper's task: sentence pairs, `VaswaniForConditionalGeneration`, BLEU and chrF of beam-search output."""

    name = "translation"
    examples = "pairs"  # what a training example is, for the log
    metrics = ("bleu", "chrf", "loss")  # --metric_for_best, the default first
    model_class = VaswaniForConditionalGeneration

    def check_args(self, args) -> None:
        refuse_options(args, LM_OPTIONS, self.name, "it belongs to --task causal_lm / masked_lm")
        _check_metric(args, self)

    def check_lengths(self, args) -> None:
        if args.max_tokens < max(args.max_source_length, args.max_target_length):
            raise UsageError(
                f"--max_tokens {args.max_tokens} is smaller than the longest allowed pair "
                f"(--max_source_length {args.max_source_length}, --max_target_length {args.max_target_length}); "
                "raise --max_tokens or lower the length limits."
            )

    def load_data(self, args, accelerator) -> tuple[dict, str]:
        raw, report = load_data(args, accelerator)
        return raw, report.summary()

    def train_tokenizer(self, args, raw):
        return train_bpe_tokenizer(
            dataset=raw["train"], source_lang=args.source_lang, target_lang=args.target_lang,
            vocab_size=args.vocab_size, min_frequency=args.min_frequency,
            special_tokens_layout=args.special_tokens_layout, model_max_length=args.max_position_embeddings or 1024,
        )  # fmt: skip

    def check_tokenizer(self, tokenizer, source) -> None:
        pass

    def model_config(self, config: VaswaniConfig) -> VaswaniConfig:
        return config

    def tokenize(self, args, raw, tokenizer, accelerator) -> dict:
        return tokenize_splits(args, raw, tokenizer, accelerator)

    def lengths(self, dataset) -> tuple:
        return dataset["source_length"], dataset["target_length"]

    def collators(self, args, tokenizer, model) -> tuple[object, object]:
        from transformers import DataCollatorForSeq2Seq

        collator = DataCollatorForSeq2Seq(tokenizer, model=model, label_pad_token_id=-100)
        return collator, collator

    def scored_tokens(self, batch: dict) -> int:
        return int((batch["labels"] != -100).sum())

    def evaluate(self, run: Run, split: str, max_samples: int | None) -> dict:
        return run_evaluation(
            run.args, run.accelerator, run.model, run.tokenized[split], run.raw[split], run.tokenizer, run.collator,
            max_samples=max_samples,
        )  # fmt: skip

    def usage(self, output_dir: Path) -> str:
        return f"Translate with it: echo 'Your sentence.' | {vaswani_command()} translate --model {output_dir}"


class CausalLMTask:
    """A decoder-only next-token model (`VaswaniForCausalLM`) on text (vaswani/data/text.py): loss and perplexity
    over every next token of the held-out text."""

    name = "causal_lm"
    examples = "examples (blocks or lines)"
    metrics = ("loss", "perplexity")
    model_class = VaswaniForCausalLM
    config_class = VaswaniDecoderConfig
    mask_token = False  # whether its tokenizer needs <mask>
    targets = staticmethod(next_token_targets)

    def check_args(self, args) -> None:
        refuse_options(args, TRANSLATION_OPTIONS, self.name, "it belongs to --task translation; an LM reads text "
                       "(--text_column) in blocks of --block_size tokens")  # fmt: skip
        other_stack = [name for name in MODEL_OPTIONS if name not in {f.name for f in dataclasses.fields(
            self.config_class)}]  # fmt: skip
        refuse_options(args, other_stack, self.name, f"a {self.config_class.side}-only model takes the "
                       f"{self.config_class.side}_* and shared model options")  # fmt: skip
        if not self.mask_token:
            refuse_options(args, ["mlm_probability"], self.name, "it belongs to --task masked_lm")
        refuse_options(args, ["model_name_or_path"], self.name, "continuing a saved language model is not supported "
                       "yet; train from a preset and the model options")  # fmt: skip
        _check_metric(args, self)

    def check_lengths(self, args) -> None:
        if args.block_size < 2:
            raise UsageError(f"--block_size {args.block_size} is not allowed; use an integer of 2 or more.")
        if args.max_tokens < args.block_size:
            raise UsageError(f"--max_tokens {args.max_tokens} is smaller than --block_size {args.block_size}: a block "
                             "must fit in a batch. Raise --max_tokens or lower --block_size.")  # fmt: skip
        if not 0 < args.mlm_probability < 1:
            raise UsageError(f"--mlm_probability {args.mlm_probability} is not allowed; use a fraction in (0, 1).")

    def load_data(self, args, accelerator) -> tuple[dict, str]:
        with main_process_first(accelerator):  # the main process builds the Arrow cache, the others reuse it
            raw, summary = load_text_splits(
                train_file=args.train_file, validation_file=args.validation_file, test_file=args.test_file,
                dataset_name=args.dataset_name, dataset_config_name=args.dataset_config_name,
                text_column=args.text_column, validation_size=args.validation_size, seed=args.seed,
                cache_dir=args.cache_dir,
            )  # fmt: skip
        return raw, "\n".join(summary)

    def train_tokenizer(self, args, raw):
        return train_bpe_tokenizer(
            iterator=training_texts(raw["train"]), vocab_size=args.vocab_size, min_frequency=args.min_frequency,
            special_tokens_layout=args.special_tokens_layout, model_max_length=args.max_position_embeddings or 1024,
            mask_token=self.mask_token,
        )  # fmt: skip

    def check_tokenizer(self, tokenizer, source) -> None:
        if self.mask_token and tokenizer.mask_token is None:
            raise UsageError(f"--tokenizer {source} has no mask token, which --task {self.name} needs: train "
                             "one with `vaswani tokenizer --mask_token`, or leave --tokenizer out.")  # fmt: skip

    def model_config(self, config: VaswaniConfig):
        try:
            return self.config_class.from_seq2seq(config)
        except ValueError as exc:
            raise UsageError(str(exc)) from None

    def tokenize(self, args, raw, tokenizer, accelerator) -> dict:
        with main_process_first(accelerator):
            return tokenize_texts(raw, tokenizer, block_size=args.block_size, packing=args.packing,
                                  num_proc=args.preprocessing_num_workers)  # fmt: skip

    def lengths(self, dataset) -> tuple:
        lengths = dataset["length"]
        return lengths, lengths  # one sequence: a batch costs examples x its longest

    def collators(self, args, tokenizer, model) -> tuple[object, object]:
        from transformers import DataCollatorForLanguageModeling

        collator = DataCollatorForLanguageModeling(tokenizer, mlm=False)  # labels = input ids, PAD ignored
        return collator, collator

    def scored_tokens(self, batch: dict) -> int:
        return int((batch["labels"][:, 1:] != -100).sum())  # the first token of a row is never predicted

    def evaluate(self, run: Run, split: str, max_samples: int | None) -> dict:
        args, accelerator, dataset = run.args, run.accelerator, run.tokenized[split]
        return evaluate_language_model(
            accelerator.unwrap_model(run.model), dataset,
            lambda indices: collate(dataset, indices, run.eval_collator, accelerator.device), accelerator,
            targets=self.targets, max_tokens=args.eval_max_tokens or args.max_tokens, max_samples=max_samples,
        )  # fmt: skip

    def usage(self, output_dir: Path) -> str:
        return f"Generate with it: pipeline('text-generation', model='{output_dir}') (docs/language-models.md)"


class MaskedLMTask(CausalLMTask):
    """An encoder-only masked LM (`VaswaniForMaskedLM`, BERT's objective): --mlm_probability of the tokens masked
    80/10/10 by `DataCollatorForLanguageModeling`; loss, perplexity and accuracy over the masked tokens."""

    name = "masked_lm"
    model_class = VaswaniForMaskedLM
    config_class = VaswaniEncoderConfig
    mask_token = True
    targets = staticmethod(masked_token_targets)

    def tokenize(self, args, raw, tokenizer, accelerator) -> dict:
        from transformers import DataCollatorForLanguageModeling

        tokenized = super().tokenize(args, raw, tokenizer, accelerator)
        for split in ("validation", "test"):  # fixed masks: every evaluation scores the same tokens
            if split in tokenized:
                seeded = DataCollatorForLanguageModeling(tokenizer, mlm_probability=args.mlm_probability,
                                                         seed=args.seed)  # fmt: skip
                tokenized[split] = mask_held_out(tokenized[split], seeded)
        return tokenized

    def collators(self, args, tokenizer, model) -> tuple[object, object]:
        from transformers import DataCollatorForLanguageModeling, DataCollatorForSeq2Seq

        # training masks come from torch's global generator, which checkpoints save: a resume masks the same
        masking = DataCollatorForLanguageModeling(tokenizer, mlm_probability=args.mlm_probability)
        return masking, DataCollatorForSeq2Seq(tokenizer, label_pad_token_id=-100)  # held out: masked, padded

    def scored_tokens(self, batch: dict) -> int:
        return int((batch["labels"] != -100).sum())

    def usage(self, output_dir: Path) -> str:
        return f"Fill masks with it: pipeline('fill-mask', model='{output_dir}') (docs/language-models.md)"


def _check_metric(args, task) -> None:
    if args.metric_for_best is not None and args.metric_for_best not in task.metrics:
        raise UsageError(f"--metric_for_best {args.metric_for_best} is not a metric of --task {task.name}; use one "
                         f"of {', '.join(task.metrics)}.")  # fmt: skip


TASKS = {task.name: task for task in (TranslationTask(), CausalLMTask(), MaskedLMTask())}


# ======================================================================================================================
# 9. The run: set up, train, finish
# ======================================================================================================================
@dataclasses.dataclass
class Run:
    """Everything `set_up` builds for `train_loop` and `finish`."""

    args: argparse.Namespace  # parsed once by `parse_args`; nothing below changes it
    accelerator: object
    output_dir: Path
    task: TranslationTask | CausalLMTask  # --task: data, model class, collators, evaluation
    raw: dict  # split name -> `datasets.Dataset` of {"translation": {src: ..., tgt: ...}} (LM tasks: {"text": ...})
    tokenized: dict  # split name -> input_ids, attention_mask, labels, source_length, target_length (LM: length)
    tokenizer: object
    collator: object  # training batches
    eval_collator: object  # held-out batches (the masked LM's are masked once, at set-up)
    model: torch.nn.Module  # as prepared by accelerate (DDP-wrapped with several processes)
    training: TrainingState  # the unwrapped model, optimizer, schedules and progress: what a checkpoint holds
    sampler: TokenBatchSampler  # this process's training batches
    manager: CheckpointManager
    rules: StoppingRules  # time budget and early stopping
    metrics: MetricsLog

    def evaluate(self, split: str, max_samples: int | None = None) -> dict:
        return self.task.evaluate(self, split, max_samples)


def main(argv: list[str] | None = None, prog: str | None = None) -> dict:
    """One training run, from options to the saved model; returns its results (what results.json holds), or
    `{"step": N, "stopped_early": True}` when --stop_after_steps/--stop_after_minutes ended this invocation."""
    run = set_up(parse_args(argv, prog))
    try:
        ended = train_loop(run)
        if ended == STOPPED:
            return {"step": run.training.progress.step, "stopped_early": True}
        return finish(run, finished_early=ended)
    finally:
        close(run)  # also after an error, so that the process group is torn down as `close` explains


def set_up(args: argparse.Namespace) -> Run:
    """Options -> Accelerator, output folder, data, tokenizer, model, optimizer and schedules, restored from a
    checkpoint when resuming. Every check a user can fail happens here, before anything is replaced."""
    from accelerate.utils import set_seed

    task = TASKS[args.task]
    accelerator, ddp_kwargs, precision_reason = create_accelerator(args)
    setup_logging(accelerator)
    logger.info("Mixed precision: %s (%s)", accelerator.mixed_precision, precision_reason)
    with together(accelerator):
        if accelerator.is_main_process:
            recover_model_folder(args.output_dir)  # finish (or undo) a final save that a kill interrupted
    output_dir, resume_checkpoint = prepare_output_dir(args)
    set_seed(args.seed)  # identical initial weights on every process

    config = task.model_config(resolve_model_config(args))
    raw, summary = task.load_data(args, accelerator)
    logger.info("Data:\n%s", summary)
    tokenizer = get_tokenizer(args, raw, output_dir, accelerator, config)
    model = build_model(args, config, tokenizer)
    if model.uses_layerdrop and accelerator.num_processes > 1:
        if args.gradient_checkpointing:
            raise UsageError("LayerDrop with gradient checkpointing fails under DDP; turn one of them off.")
        ddp_kwargs.find_unused_parameters = True  # skipped layers get no gradient (every rank skips the same ones)
    # main_process_first in tokenize_splits ended once every process had its tokenizer: the staged one may move now
    tokenized = task.tokenize(args, raw, tokenizer, accelerator)
    with together(accelerator):
        if accelerator.is_main_process and resume_checkpoint is None:
            start_new_run(args, output_dir)  # every check has passed: only now is anything replaced

    train = tokenized["train"]
    source_lengths, target_lengths = task.lengths(train)
    sampler = TokenBatchSampler(
        source_lengths, target_lengths, args.max_tokens, shuffle=True, seed=args.seed,
        num_replicas=accelerator.num_processes, rank=accelerator.process_index, max_sentences=args.max_sentences,
    )  # fmt: skip
    updates_per_epoch = max(len(sampler) // args.gradient_accumulation_steps, 1)
    max_steps = None if _unknown_length(args) else (
        args.max_train_steps or math.ceil(args.num_train_epochs * updates_per_epoch))  # fmt: skip
    logger.info(
        "Training %d %s in %d batches/epoch/process (padding efficiency %.1f%%), %s, %d processes",
        len(train), task.examples, len(sampler),
        100 * padding_efficiency(sampler.batches(0), source_lengths, target_lengths),
        f"{max_steps} updates" if max_steps else "until " + ending_rule(args), accelerator.num_processes,
    )  # fmt: skip

    optimizer = build_optimizer(args, model, accelerator.device.type)
    lr_scheduler, drophead = build_schedules(args, model, optimizer, max_steps)
    prepared, optimizer = accelerator.prepare(model, optimizer)
    training = TrainingState(
        accelerator, accelerator.unwrap_model(prepared), optimizer, lr_scheduler, drophead, TrainingProgress(),
        max_steps,
    )  # fmt: skip
    manager = CheckpointManager(
        output_dir / CHECKPOINTS_SUBDIR, keep_last=max(args.keep_checkpoints, args.average_checkpoints, 1)
    )
    with together(accelerator):
        if accelerator.is_main_process:
            manager.remove_incomplete()  # leftovers of a save that was killed
    window = AveragingWindow(
        count=args.average_checkpoints, fraction=args.average_window, max_steps=max_steps,
        budget_seconds=None if args.max_train_minutes is None else 60 * args.max_train_minutes,
    )  # fmt: skip
    rules = StoppingRules(
        output_dir, args.max_train_minutes, args.early_stopping_patience, args.metric_for_best,
        record=bool(args.eval_steps) and args.final_model in ("auto", "best"), window=window,
    )  # fmt: skip
    if resume_checkpoint is not None:
        resume(accelerator, manager, resume_checkpoint, training, rules, output_dir)
    accelerator.init_trackers(
        "vaswani", config={k: v for k, v in vars(args).items() if isinstance(v, (int, float, str, bool))}
    )
    collator, eval_collator = task.collators(args, tokenizer, model)
    return Run(
        args=args, accelerator=accelerator, output_dir=output_dir, task=task, raw=raw, tokenized=tokenized,
        tokenizer=tokenizer, collator=collator, eval_collator=eval_collator, model=prepared,
        training=training, sampler=sampler, manager=manager, rules=rules,
        metrics=MetricsLog(accelerator, output_dir / METRICS_FILE),
    )  # fmt: skip


def ending_rule(args: argparse.Namespace) -> str:
    """What ends a run of unknown length, in words."""
    rules = [f"{args.max_train_minutes:g} minutes are spent"] if args.max_train_minutes is not None else []
    if args.early_stopping_patience is not None:
        rules.append(f"{args.early_stopping_patience} evaluations bring no better {args.metric_for_best}")
    return " or ".join(rules)


def build_schedules(args, model, optimizer, max_steps: int | None) -> tuple[object, DropHeadScheduler | None]:
    """The learning-rate schedule (Section 5.3's Eq. 3 by default) and the scheduled DropHead rate, if any."""
    try:
        lr_scheduler = build_lr_scheduler(
            args.lr_scheduler, optimizer, warmup_steps=args.warmup_steps, total_steps=max_steps,
            d_model=model.config.d_model, learning_rate=args.learning_rate, factor=args.lr_factor,
        )  # fmt: skip
        if args.drophead_p_start is None:
            return lr_scheduler, None
        kinds = args.drophead_kinds
        if "drophead_kinds" not in getattr(args, "explicit", ()):  # the default: every kind of attention the model has
            kinds = [kind for kind in kinds if kind in model.drophead_kinds]  # (a one-stack model has one)
        drophead = DropHeadScheduler(
            model, args.drophead_p_start, args.drophead_p_end, args.warmup_steps, max_steps, kinds=kinds
        )
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    return lr_scheduler, drophead


def resume(accelerator, manager, checkpoint: Path, training: TrainingState, rules: StoppingRules, output_dir) -> None:
    """Continue the run from `checkpoint`: later checkpoints set aside (a resume from an older one starts a new
    branch), weights and training state loaded, metrics.jsonl cut back to the checkpoint's step, the time budget and
    early-stopping counts restored."""
    with together(accelerator):
        if accelerator.is_main_process:
            for moved in manager.set_aside_newer(checkpoint):
                logger.warning("Resuming from an older checkpoint: moved the later %s aside to %s", moved.name, moved)
    with together(accelerator):
        load_checkpoint(accelerator, checkpoint, training)
    progress = training.progress
    with together(accelerator):
        if accelerator.is_main_process:
            dropped = truncate_metrics(output_dir / METRICS_FILE, progress.step)
            if dropped:
                logger.info("Dropped %d metrics.jsonl rows logged after step %d (the checkpoint)", dropped,
                            progress.step)  # fmt: skip
            logger.info("Time budget and early stopping: %s", rules.restore(checkpoint))
    logger.info(
        "Resumed from %s at step %d (epoch %d, batch %d)", checkpoint, progress.step, progress.epoch,
        progress.batch_in_epoch,
    )  # fmt: skip


STOPPED = "stopped"  # train_loop's answer when --stop_after_steps/--stop_after_minutes ended this invocation


def train_loop(run: Run) -> str | None:
    """Updates until max_steps (Section 5), with logging, evaluations and checkpoints on the way. Returns None when
    max_steps was reached, why the run finishes early (time budget spent, early stopping), or STOPPED when this
    invocation ends and a later one resumes."""
    args, accelerator, training = run.args, run.accelerator, run.training
    progress, max_steps = training.progress, training.max_steps
    bar = ProgressBar(max_steps, run.rules.budget, progress.step, disable=not accelerator.is_local_main_process)
    stream = batch_stream(run.sampler, progress)
    window = LossWindow(accelerator)
    last_save, invocation_start, start_step = time.monotonic(), time.monotonic(), progress.step
    loop_seconds = 0.0
    (budget_spent,) = _main_process_decides(accelerator, run.rules.budget_spent(loop_seconds))
    if budget_spent:  # resumed from the checkpoint the budget ended at (a kill came during the final steps)
        bar.close()
        return TIME_BUDGET_SPENT
    run.model.train()
    while max_steps is None or progress.step < max_steps:
        window.add(*train_step(run, stream))
        if args.logging_steps and progress.step % args.logging_steps == 0:
            values = {**window.flush(), "lr": training.lr_scheduler.get_last_lr()[0], "epoch": progress.epoch}
            bar.show(loss=f"{values['loss']:.3f}", lr=f"{values['lr']:.2e}")
            run.metrics("train", progress.step, values)
        evaluated = bool(args.eval_steps) and progress.step % args.eval_steps == 0 and progress.step != max_steps
        early_stop = False
        if evaluated:
            results = run.evaluate("validation", max_samples=args.max_eval_samples)
            run.metrics("validation", progress.step, {k: v for k, v in results.items() if k != "examples"})
            log_evaluation("validation", results, progress.step)
            bar.show(**{args.metric_for_best: f"{results[args.metric_for_best]:.2f}"} if accelerator.is_main_process
                     else {})  # fmt: skip
            early_stop = accelerator.is_main_process and run.rules.evaluated(progress.step, results)

        loop_seconds_before, loop_seconds = loop_seconds, time.monotonic() - invocation_start
        bar.advance(progress.step, loop_seconds)
        stop = (args.stop_after_steps and progress.step - start_step >= args.stop_after_steps) or (
            args.stop_after_minutes and loop_seconds >= 60 * args.stop_after_minutes
        )
        stop, due_by_time, budget_spent, early_stop, due_in_window = _main_process_decides(
            accelerator, bool(stop), time.monotonic() - last_save >= 60 * args.checkpoint_minutes,
            run.rules.budget_spent(loop_seconds), early_stop,
            run.rules.save_due(progress.step, loop_seconds_before, loop_seconds),
        )  # fmt: skip
        due_by_steps = args.checkpoint_steps and progress.step % args.checkpoint_steps == 0
        due_by_rules = budget_spent or early_stop or due_in_window or (evaluated and run.rules.stopper is not None)
        if progress.step == max_steps or due_by_steps or due_by_time or stop or due_by_rules:
            path = save_checkpoint(accelerator, run.manager, run.model, training,
                                   functools.partial(run.rules.write_state, loop_seconds=loop_seconds))  # fmt: skip
            last_save = time.monotonic()
            with together(accelerator):
                if accelerator.is_main_process:
                    run.rules.saved(path, progress.step)
        if progress.step == max_steps:
            break
        if budget_spent or early_stop:
            why = TIME_BUDGET_SPENT if budget_spent else f"early stopping ({run.rules.stopper.metric})"
            logger.info("Finishing at update %d%s: %s", progress.step, f" of {max_steps}" if max_steps else "", why)
            bar.close()
            return why
        if stop:
            bar.close()
            logger.info("Stopped at update %d%s; continue with --resume_from_checkpoint latest", progress.step,
                        f" of {max_steps}" if max_steps else "")  # fmt: skip
            return STOPPED
    bar.close()
    return None


class ProgressBar:
    """The training bar, filled towards the limit that will end the run: the updates of --max_train_steps or the
    minutes of --max_train_minutes, whichever is further along (at steady rates, the one that ends the run first).
    The update count, the latest loss and learning rate and the latest validation score ride along."""

    def __init__(self, max_steps: int | None, budget, step: int, disable: bool):
        from tqdm.auto import tqdm

        self.max_steps, self.budget = max_steps, budget
        self.bar = tqdm(
            total=100, disable=disable, desc="Training", bar_format="{desc}{percentage:3.0f}%|{bar}| "
            "[{elapsed}<{remaining}{postfix}]",
            mininterval=0.1 if sys.stderr.isatty() else 30,  # a log file gets a line every 30 s, a terminal a live bar
        )  # fmt: skip
        self.values = {}
        self.advance(step, 0.0)

    def advance(self, step: int, loop_seconds: float) -> None:
        fraction, limit = run_fraction(step, self.max_steps, self.budget, loop_seconds)
        self.bar.set_description(f"Training ({limit})", refresh=False)
        self.bar.update(100 * fraction - self.bar.n)

    def show(self, **values: str) -> None:
        self.values.update(values)
        self.bar.set_postfix(self.values, refresh=False)

    def close(self) -> None:
        self.bar.close()


def run_fraction(step: int, max_steps: int | None, budget, loop_seconds: float) -> tuple[float, str]:
    """How far the run is towards the limit that will end it (0 to 1; 0 when only early stopping can end it), and
    the progress in that limit's unit, e.g. "530/1000 updates" or "12.1/20 min, update 530"."""
    by_steps = step / max_steps if max_steps else 0.0
    spent = budget.seconds_before + loop_seconds
    by_time = spent / budget.seconds if budget.seconds else 0.0
    if by_time > by_steps:
        return min(by_time, 1.0), f"{spent / 60:.1f}/{budget.minutes:g} min, update {step}"
    return by_steps, f"{step}/{max_steps} updates" if max_steps else f"update {step}"


def train_step(run: Run, stream) -> tuple[torch.Tensor, int]:
    """One optimizer update over --gradient_accumulation_steps micro-batches; returns the update's summed token loss
    (this process) and its target tokens (this process)."""
    args, accelerator, training, model = run.args, run.accelerator, run.training, run.model
    progress, optimizer = training.progress, training.optimizer
    step_start = time.perf_counter()
    group = [next(stream) for _ in range(args.gradient_accumulation_steps)]
    micro_batches = [
        collate(run.tokenized["train"], indices, run.collator, accelerator.device) for *_, indices in group
    ]
    # Normalise by the real target tokens of the whole update (all micro-batches, all processes): each micro-batch
    # contributes its token sum / N. DDP averages over processes and `accelerator.backward` divides by the
    # accumulation steps, so the divisor handed to the model is N / (processes * accumulation steps).
    local_tokens = sum(run.task.scored_tokens(b) for b in micro_batches)
    global_tokens = accelerator.reduce(torch.tensor(local_tokens, device=accelerator.device), "sum").item()
    divisor = global_tokens / (accelerator.num_processes * args.gradient_accumulation_steps)
    loss_sum = torch.zeros((), dtype=torch.float64, device=accelerator.device)
    for batch in micro_batches:
        with accelerator.accumulate(model):
            loss = model(**batch, num_items_in_batch=divisor).loss
            accelerator.backward(loss)
            loss_sum += loss.detach().double() * divisor  # this micro-batch's token-loss sum
            if accelerator.sync_gradients and args.max_grad_norm > 0:
                accelerator.clip_grad_norm_(model.parameters(), args.max_grad_norm)
            optimizer.step()
            optimizer.zero_grad()
    if not accelerator.optimizer_step_was_skipped:
        training.lr_scheduler.step()
    if training.drophead is not None:
        training.drophead.step()
    progress.step += 1
    progress.epoch, progress.batch_in_epoch = group[-1][0], group[-1][1] + 1
    progress.target_tokens += global_tokens
    progress.train_seconds += time.perf_counter() - step_start
    return loss_sum, local_tokens


class LossWindow:
    """Training loss per target token and tokens/s since the last log line, summed over processes."""

    def __init__(self, accelerator):
        self.accelerator = accelerator
        self.loss = torch.zeros((), dtype=torch.float64, device=accelerator.device)
        self.tokens = torch.zeros((), dtype=torch.float64, device=accelerator.device)
        self.start = time.perf_counter()

    def add(self, loss_sum: torch.Tensor, tokens: int) -> None:
        self.loss += loss_sum
        self.tokens += tokens

    def flush(self) -> dict:
        """Every process calls this (a reduction); the window starts again."""
        totals = self.accelerator.reduce(torch.stack([self.loss, self.tokens]), "sum")
        values = {
            "loss": (totals[0] / totals[1]).item(),
            "target_tokens_per_second": totals[1].item() / (time.perf_counter() - self.start),
        }
        self.loss.zero_()
        self.tokens.zero_()
        self.start = time.perf_counter()
        return values


def finish(run: Run, finished_early: str | None) -> dict:
    """The final model (`choose_final_model`), validation and test scores, the model folder written atomically with
    its tokenizer, results and card, and the optional upload to the Hub. Returns the results."""
    args, accelerator, progress = run.args, run.accelerator, run.training.progress
    unwrapped = run.training.model
    accelerator.wait_for_everyone()
    chosen, choice, scored = choose_final_model(run, finished_early)
    final = {"step": progress.step, "averaged_checkpoints": [p.name for p in chosen.checkpoints],
             "final_model": choice, "target_tokens": progress.target_tokens,
             "train_seconds": progress.train_seconds}  # fmt: skip
    if finished_early:
        final["finished_early"] = finished_early
    if args.early_stopping_patience is not None:
        final["early_stopping"] = run.rules.stopper.state_dict()
    for split in ("validation", "test"):
        if split in run.tokenized:
            results = scored.get(split) or run.evaluate(
                split, max_samples=args.max_eval_samples if split == "validation" else None
            )
            run.metrics(f"final_{split}", progress.step, {k: v for k, v in results.items() if k != "examples"})
            log_evaluation(f"final {split}", results, progress.step)
            final[split] = results
    with together(accelerator):
        if accelerator.is_main_process:

            def write(folder: Path) -> None:
                unwrapped.save_pretrained(folder)
                run.tokenizer.save_pretrained(folder)
                (folder / RESULTS_FILE).write_text(json.dumps(final, indent=2, ensure_ascii=False))
                write_model_card(folder, args=vars(args), results=final, config=unwrapped.config)

            # a kill leaves the previous content or the complete new model; checkpoints/, metrics.jsonl etc. are kept
            write_model_folder(run.output_dir, write, replace=True)
            logger.info("Saved the final model to %s", run.output_dir)
            logger.info(run.task.usage(run.output_dir))
    if args.push_to_hub and accelerator.is_main_process:
        final.update(push(run.output_dir, args.hub_model_id))
    return final


def close(run: Run) -> None:
    """End the trackers and the process group. The DDP-wrapped model is released first: destroying the gloo process
    group from the DDP reducer's destructor joins gloo's worker threads while holding the GIL, and a worker that is
    still releasing a just-finished collective needs the GIL: the process hangs at exit, now and then (seen in CI).
    Destroyed from Python's side last, the group is torn down with the GIL released (pytorch/pytorch#56297)."""
    run.model = None
    run.accelerator.free_memory()  # the accelerator's own references to the prepared model and optimizer
    run.accelerator.end_training()


def choose_final_model(run: Run, finished_early: str | None) -> tuple[Candidate, dict, dict]:
    """The model the run hands over (vaswani/stopping.py): with --final_model auto, the best on the validation set of
    the last checkpoint, the best evaluated checkpoint and the average of the window (Section 6.1's averaging,
    scaled to the run); scores recorded during training are reused, the others are computed here. Loads the winner's
    weights into the model; returns it, what results.json says of the choice, and the winner's validation results
    when they were computed here ({"validation": results}, else {}: the caller need not compute them again)."""
    args, accelerator, unwrapped = run.args, run.accelerator, run.training.model
    # The main process alone holds the validation record (and BLEU/chrF): it lists the candidates for every process.
    candidates = _from_main_process(
        accelerator, lambda: run.rules.candidates(run.manager.checkpoints(), finished_early)
    )
    selection = args.final_model
    if selection == "auto" and "validation" not in run.tokenized:
        selection = "average"
        logger.warning("No validation set to choose the final model with: it is the window's average (the paper's)")
    validation = {}
    if selection == "auto":
        for candidate in candidates:
            if candidate.score is None:
                average_into_model(unwrapped, candidate.checkpoints)
                validation[candidate.name] = run.evaluate("validation", max_samples=args.max_eval_samples)
                candidate.score = validation[candidate.name].get(args.metric_for_best)
        chosen = candidates.index(choose(candidates, args.metric_for_best)) if accelerator.is_main_process else 0
        chosen = candidates[_from_main_process(accelerator, lambda: chosen)]
    else:  # forced; a candidate the run does not have (no evaluation, a window of one) falls back to the last
        chosen = next((c for c in candidates if c.name == selection), candidates[0])
    average_into_model(unwrapped, chosen.checkpoints)
    if accelerator.is_main_process:
        among = "; ".join(f"{c.name} {c.score:.2f}" for c in candidates) if selection == "auto" else ""
        logger.info("Final model: %s (%s), %s", chosen.name, ", ".join(p.name for p in chosen.checkpoints),
                    f"chosen by validation {args.metric_for_best} among {among}" if among
                    else f"--final_model {selection}")  # fmt: skip
    choice = {"chosen": chosen.name, "selection": selection, "metric": args.metric_for_best,
              "candidates": [c.describe() for c in candidates]}  # fmt: skip
    return chosen, choice, {"validation": validation[chosen.name]} if chosen.name in validation else {}


def _from_main_process(accelerator, compute: Callable[[], object]) -> object:
    """`compute()` on the main process, its value sent to every process."""
    if accelerator.num_processes == 1:
        return compute()
    from accelerate.utils import broadcast_object_list

    return broadcast_object_list([compute() if accelerator.is_main_process else None])[0]


def push(output_dir: Path, repo_id: str) -> dict:
    """Upload the saved model; on failure the model is safe on disk and the log says how to retry. Returns what
    results.json gains: nothing, or the push error."""
    from vaswani.hub.push import push_model_folder

    try:
        logger.info("Pushed to %s", push_model_folder(output_dir, repo_id))
        return {}
    except PushError as exc:
        logger.error("Could not push to the Hub: %s. The model is saved in %s; retry with: vaswani push --model %s "
                     "--repo_id %s", exc, output_dir, output_dir, repo_id)  # fmt: skip
        return {"push_error": str(exc)}


def _main_process_decides(accelerator, *flags: bool) -> tuple[bool, ...]:
    """The main process's time-based decisions, for every process: all must save (or stop) at the same step."""
    if accelerator.num_processes == 1:
        return flags
    from accelerate.utils import broadcast

    decided = broadcast(torch.tensor([int(f) for f in flags], device=accelerator.device))
    return tuple(bool(v) for v in decided.tolist())


def run(argv: list[str] | None = None, prog: str | None = None) -> int:
    """A training run from the command line: exit status 0, 1 when only the final upload to the Hub failed (the model
    is saved), 2 with `error: ...` for a user mistake (`vaswani.errors.run_command`)."""
    return run_command(lambda: 1 if main(argv, prog).get("push_error") else 0)
