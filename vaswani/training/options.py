"""The options of `vaswani train` / `train.py`: the command line and its YAML twin (`--config`), parsed and checked
once, so that everything a user can get wrong is an `error: ...` before any training time is spent.

The model's options carry VaswaniConfig's names (`modeling_vaswani.configuration_vaswani.MODEL_OPTIONS`); values
given on the command line win over the YAML file's. Each task checks its own options (`vaswani.training.tasks`).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from pathlib import Path

import yaml

from modeling_vaswani import (
    PRESETS,
    VaswaniConfig,
)
from modeling_vaswani.configuration_vaswani import MODEL_OPTIONS
from modeling_vaswani.scheduling_vaswani import DROPHEAD_KINDS
from tokenization import SPECIAL_TOKEN_LAYOUTS
from vaswani.data.text import (
    PACKING_CHOICES,
)
from vaswani.devices import MIXED_PRECISION_CHOICES
from vaswani.errors import (
    PushError,
    UsageError,
)
from vaswani.hub.push import check_repo_id
from vaswani.training.schedules import LR_SCHEDULERS, SCHEDULES_NEEDING_TOTAL
from vaswani.training.stopping import (
    FINAL_MODELS,
)
from vaswani.training.stopping import METRICS as STOPPING_METRICS
from vaswani.training.tasks import TASKS

# --task: the model and objective; each is a `Task` below (section 8), chosen once at set-up.
TASK_NAMES = ("translation", "causal_lm", "masked_lm")


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
    """The options of `vaswani train` / `train.py` (`prog`: the command named in the usage line), composed of the
    argument groups below (sockeye's `arguments.py`), in the order `--help` lists them."""
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
    add_model_options(parser)
    add_data_options(parser)
    add_tokenizer_options(parser)
    add_optimization_options(parser)
    add_evaluation_options(parser)
    add_checkpoint_options(parser)
    add_language_model_options(parser)
    return parser


def add_model_options(parser: argparse.ArgumentParser) -> None:
    """The model: a preset, a saved model or each VaswaniConfig option."""
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


def add_data_options(parser: argparse.ArgumentParser) -> None:
    """The data: files or a `datasets` source, languages, lengths."""
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
        help="processes that tokenize the data (`datasets.map` num_proc; default: every core, one for a split under "
        "10,000 examples)",
    )  # fmt: skip
    group.add_argument(
        "--prepared_data", metavar="DIR",
        help="train from a folder written by `vaswani prepare` (its tokens and tokenizer; the text is not read "
        "again); data and tokenizer options given beside it must agree with its manifest.json",
    )  # fmt: skip
    group.add_argument(
        "--cache_dir",
        help="where `datasets` caches downloads, the Arrow copy of the text files and the tokenized splits "
        "(vaswani-tokenized/; default: HF_DATASETS_CACHE, ~/.cache/huggingface/datasets)",
    )


def add_tokenizer_options(parser: argparse.ArgumentParser) -> None:
    """The tokenizer: an existing one, or the BPE to train."""
    group = parser.add_argument_group("tokenizer")
    group.add_argument("--tokenizer", help="an existing tokenizer folder; without it a shared BPE is trained")
    group.add_argument("--vocab_size", type=int, default=37000, help="BPE vocabulary size (paper: ~37k for EN-DE)")
    group.add_argument("--min_frequency", type=int, default=2, help="BPE merge minimum frequency")
    group.add_argument(
        "--special_tokens_layout", choices=sorted(SPECIAL_TOKEN_LAYOUTS), default="paper",
        help="ids of the trained BPE's special tokens; paper: <pad>=0 <s>=1 </s>=2 <unk>=3, fairseq: <s>=0 <pad>=1",
    )  # fmt: skip


def add_optimization_options(parser: argparse.ArgumentParser) -> None:
    """The batching, the length of the run, Adam and the learning rate, precision, DropHead."""
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


def add_evaluation_options(parser: argparse.ArgumentParser) -> None:
    """The evaluation: how often, on what, with which beam search; early stopping."""
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
        "window then ends at the best checkpoint (vaswani/training/stopping.py)",
    )
    group.add_argument(
        "--metric_for_best",
        choices=sorted(STOPPING_METRICS),
        default=None,
        help="validation metric of early stopping and of the final model's choice (--final_model auto); translation: "
        "bleu (default), chrf or loss; causal_lm and masked_lm: loss (default) or perplexity",
    )


def add_checkpoint_options(parser: argparse.ArgumentParser) -> None:
    """The checkpoints, averaging, the final model, output, logging and the Hub."""
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
        "preprocessing_num_workers",
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
