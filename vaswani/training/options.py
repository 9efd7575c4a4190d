"""The options of `vaswani train` / `train.py`: the command line and its YAML twin (`--config`), parsed and checked
once, so that everything a user can get wrong is an `error: ...` before any training time is spent.

The model's options carry VaswaniConfig's names (`modeling_vaswani.configuration_vaswani.MODEL_OPTIONS`); values
given on the command line win over the YAML file's. Each task checks its own options (`vaswani.training.tasks`).
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import re
import sys
from pathlib import Path

from modeling_vaswani import (
    PRESETS,
    VaswaniConfig,
)
from modeling_vaswani.configuration_vaswani import (
    MODEL_OPTIONS,
    NORM_POSITIONS,
    NORM_TYPES,
    POSITION_EMBEDDING_TYPES,
    SINUSOIDAL_LAYOUTS,
)
from modeling_vaswani.scheduling_vaswani import DROPHEAD_KINDS
from tokenization import SPECIAL_TOKEN_LAYOUTS
from vaswani.data.cleaning import CLEANING_OPTIONS
from vaswani.data.text import (
    PACKING_CHOICES,
)
from vaswani.devices import ATTN_IMPLEMENTATIONS
from vaswani.errors import (
    PushError,
    UsageError,
)
from vaswani.hub.push import check_repo_id
from vaswani.model_folder import has_tokenizer
from vaswani.options import ConfigArgumentParser, DefaultsHelpFormatter, add_option
from vaswani.training.ema import EMA_HORIZON, parse_ema_decay
from vaswani.training.schedules import DECAY_TYPES, LR_SCHEDULERS, SCHEDULES_NEEDING_TOTAL
from vaswani.training.speed import COMPILE_MODES
from vaswani.training.stopping import (
    FINAL_MODELS,
)
from vaswani.training.stopping import METRICS as STOPPING_METRICS
from vaswani.training.tasks import TASKS

# The model options whose values are names: the names VaswaniConfig takes (checked when the command line is read).
CONFIG_CHOICES = {
    "position_embedding_type": POSITION_EMBEDDING_TYPES, "sinusoidal_layout": SINUSOIDAL_LAYOUTS,
    "norm_position": NORM_POSITIONS, "norm_type": NORM_TYPES,
}  # fmt: skip
# --task: the model and objective; each is a `Task` of vaswani/training/tasks.py, chosen once at set-up.
TASK_NAMES = tuple(TASKS)


def str2bool(value: str) -> bool:
    if isinstance(value, bool):
        return value
    if value.lower() in {"true", "1", "yes", "on"}:
        return True
    if value.lower() in {"false", "0", "no", "off"}:
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {value!r}")


def str_list(value: str | list) -> list[str]:
    return list(value) if isinstance(value, list) else [v.strip() for v in value.split(",") if v.strip()]


def optional_float(value: str) -> float | None:
    return None if str(value).lower() == "none" else float(value)


def ema_decay(value: str) -> str | float | None:
    """--ema_decay: auto, a decay in (0, 1), or none (0)."""
    try:
        return parse_ema_decay(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc).removeprefix("--ema_decay ")) from None


DESCRIPTION = "Train the Transformer of 'Attention Is All You Need' with the paper's recipe."
COMMAND = "train"  # the command's name in the option registry (`vaswani.options`)


def build_parser(prog: str | None = None) -> argparse.ArgumentParser:
    """The parser of `train.py` (`prog`: the command named in the usage line); `vaswani train` builds the same
    options into its subparser (`add_arguments`)."""
    parser = ConfigArgumentParser(
        prog=prog, description=DESCRIPTION, command=COMMAND, formatter_class=DefaultsHelpFormatter,
        allow_abbrev=False,  # a misspelt option must fail, not silently match a longer one
    )  # fmt: skip
    add_arguments(parser)
    return parser


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of `vaswani train` / `train.py`, composed of the argument groups below (sockeye's `arguments.py`),
    in the order `--help` lists them; the ideas other commands share come from the registry (`vaswani.options`)."""
    parser.add_argument(
        "--config", help="YAML file of options (same names as the command line); the command line wins"
    )
    add_option(
        parser, "task", COMMAND, choices=list(TASK_NAMES), default="translation",
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


def add_model_options(parser: argparse.ArgumentParser) -> None:
    """The model: a preset, a saved model or each VaswaniConfig option."""
    group = parser.add_argument_group("model (VaswaniConfig names; unset options keep the preset's value)")
    group.add_argument("--model_preset", choices=sorted(PRESETS), default="base", help="the paper's Table 3 model")
    add_option(group, "model", COMMAND, help="start from a saved Vaswani model folder instead of a preset: its "
               "architecture (of the model options only dropout, label smoothing, LayerDrop and DropHead may change) "
               "and, without --tokenizer, its tokenizer")  # fmt: skip
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
        group.add_argument(f"--{name}", type=kind, default=None, choices=CONFIG_CHOICES.get(name),
                           help=config_option_help(name))  # fmt: skip
    group.add_argument("--gradient_checkpointing", type=str2bool, default=False, help="trade compute for memory")
    group.add_argument(
        "--attn_implementation", choices=ATTN_IMPLEMENTATIONS, default=None,
        help="the attention kernel, as transformers names it: eager (the formula of Section 3.2.1 in PyTorch ops), "
        "sdpa (torch's scaled_dot_product_attention: fused kernels where the device has them, on a GPU not cuDNN's, "
        "which plans every new shape; transformers' default), "
        "flash_attention_2 (CUDA GPUs with the flash-attn package). Unset: eager for bf16 training on a CPU (sdpa's "
        "CPU backward is slow there; vaswani.devices.training_attention), else the model's default (sdpa)",
    )  # fmt: skip


@functools.cache
def preset_configs() -> dict[str, VaswaniConfig]:
    """The configuration of each preset (`VaswaniConfig.from_preset`), built once."""
    return {preset: VaswaniConfig.from_preset(preset) for preset in PRESETS}


def config_option_help(name: str) -> str:
    """The help of the model option `--name`: the first sentence of its entry in `VaswaniConfig`'s docstring (where
    each argument is documented, with the paper's section) and its value in each preset, e.g. "Width of the model,
    d_model in Section 3 (VaswaniConfig.d_model; base 512, big 1024)"."""
    doc = VaswaniConfig.__doc__ or ""
    entry = re.search(rf"^\s*{name} \(`[^`]*`[^)]*\):\n((?:\s{{12}}.*\n?)+)", doc, re.MULTILINE)
    text = " ".join(entry.group(1).split()) if entry else ""
    first = re.split(r"(?<!et al\.)(?<=\.)\s", text, maxsplit=1)[0].rstrip(".")  # "Fan et al. 2019" goes on
    if name in CONFIG_CHOICES:  # the choices, which argparse lists, and what they are in VaswaniConfig's docstring
        first = ""
    elif len(first) > 150:  # a definition with its details: the definition
        first = re.split(r"[:;]\s", first, maxsplit=1)[0]
    values = {preset: getattr(config, name) for preset, config in preset_configs().items()}
    shown = "" if None in values.values() else (
        f"; {', '.join(f'{preset} {value}' for preset, value in values.items())}"
        if len(set(map(str, values.values()))) > 1 else f"; {next(iter(values.values()))} in every preset"
    )  # fmt: skip
    return f"{first} (VaswaniConfig.{name}{shown})" if first else f"see VaswaniConfig.{name}{shown}"


def add_data_options(parser: argparse.ArgumentParser, command: str = COMMAND) -> None:
    """The data: files or a `datasets` source, languages, lengths (`command`: train, or prepare, which shares them
    all but --prepared_data)."""
    group = parser.add_argument_group("data")
    add_option(
        group, "train_file", command,
        help="a .json/.jsonl translation file, a .tsv, or a prefix PATH (PATH.src/.tgt); LM tasks: plain text, one "
        "text per line, or .json/.jsonl with a --text_column field",
    )  # fmt: skip
    add_option(group, "validation_file", command, help="same formats as --train_file")
    add_option(group, "test_file", command, help="same formats as --train_file")
    add_option(
        group, "dataset_name", command,
        help="a `datasets` name (Hub when online), or 'demo' for the built-in set (the default without --train_file)",
    )  # fmt: skip
    add_option(group, "dataset_config_name", command)
    add_option(group, "source_lang", command, default="en")
    add_option(group, "target_lang", command, default="de")
    add_option(group, "validation_size", command, default=500, help="pairs carved from train without validation")
    add_option(group, "max_source_length", command, default=256, help="in tokens, EOS included")
    add_option(group, "max_target_length", command, default=256, help="in tokens, EOS included")
    add_option(group, "overlong", command, default="drop", help="pairs over the limits")
    for name in CLEANING_OPTIONS:  # vaswani/data/cleaning.py
        add_option(group, name, command)
    add_option(group, "preprocessing_num_workers", command,
               help="processes that tokenize the data (`datasets.map` num_proc; default: every core, one for a split "
               "under 10,000 examples)")  # fmt: skip
    if command == COMMAND:
        group.add_argument(
            "--prepared_data", metavar="DIR",
            help="train from a folder written by `vaswani prepare` (its tokens and tokenizer; the text is not read "
            "again); data and tokenizer options given beside it must agree with its manifest.json",
        )  # fmt: skip
    add_option(
        group, "cache_dir", command,
        help="where `datasets` caches downloads, the Arrow copy of the text files and the tokenized splits "
        "(vaswani-tokenized/; default: HF_DATASETS_CACHE, ~/.cache/huggingface/datasets)",
    )  # fmt: skip


def add_tokenizer_options(parser: argparse.ArgumentParser, command: str = COMMAND) -> None:
    """The tokenizer: an existing one, or the BPE to train."""
    group = parser.add_argument_group("tokenizer")
    own = "--model's own tokenizer, else " if command == COMMAND else ""
    add_option(
        group, "tokenizer", command, help=f"an existing tokenizer folder; without it {own}a shared BPE is trained"
    )
    add_option(group, "vocab_size", command, default=37000)
    add_option(group, "min_frequency", command, default=2)
    add_option(group, "special_tokens_layout", command, choices=sorted(SPECIAL_TOKEN_LAYOUTS), default="paper")


def add_optimization_options(parser: argparse.ArgumentParser) -> None:
    """The batching, the length of the run, Adam and the learning rate, precision, DropHead."""
    group = parser.add_argument_group("batching and optimization")
    add_option(group, "max_tokens", COMMAND, default=4096, help="per device and batch: sentences x longest side")
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
    group.add_argument(
        "--lr_scheduler", choices=LR_SCHEDULERS, default="noam",
        help="noam = the paper's Eq. 3; linear, cosine and warmup_stable_decay end with the run's budget: "
        "--max_train_steps or --max_train_minutes, whichever ends it first (vaswani/training/schedules.py)",
    )  # fmt: skip
    group.add_argument("--learning_rate", type=float, default=None, help="peak LR (noam: default from d_model)")
    group.add_argument("--lr_factor", type=float, default=1.0, help="scales the noam curve")
    group.add_argument("--warmup_steps", type=int, default=4000, help="LR warmup in updates (paper: 4000)")
    group.add_argument(
        "--decay_fraction", type=float, default=0.2,
        help="warmup_stable_decay: decay over this last fraction of the budget (Hägele et al. 2024: 0.2)",
    )  # fmt: skip
    group.add_argument(
        "--decay_type", choices=DECAY_TYPES, default="1-sqrt",
        help="warmup_stable_decay: the shape of the decay (transformers' names; 1-sqrt is Hägele et al.'s best)",
    )  # fmt: skip
    group.add_argument(
        "--min_lr_ratio", type=float, default=0.0, help="warmup_stable_decay: the rate at the end, x the peak"
    )
    group.add_argument("--adam_beta1", type=float, default=0.9, help="Adam beta1 (paper: 0.9)")
    group.add_argument("--adam_beta2", type=float, default=0.98, help="Adam beta2 (paper: 0.98)")
    group.add_argument("--adam_epsilon", type=float, default=1e-9, help="Adam epsilon (paper: 1e-9)")
    group.add_argument("--weight_decay", type=float, default=0.0, help="AdamW decay of matrices (paper: 0)")
    group.add_argument("--max_grad_norm", type=float, default=0.0, help="clip gradients to this norm (0: off)")
    add_option(
        group,
        "mixed_precision",
        COMMAND,
        help="bf16: autocast, float32 weights/optimizer/loss; fp16: GPU only. Default: the accelerate configuration's, "
        "else bf16 where the hardware trains faster in it (a GPU from Ampere on; a CPU with AMX or an AMD CPU with "
        "AVX512-BF16), else no",
    )
    group.add_argument(
        "--tf32", type=str2bool, default=None,
        help="TF32 matrix products on CUDA GPUs from Ampere on (float32 in and out, products with a 10-bit mantissa; "
        "what float32 training uses outside autocast). Default: on where the GPU has them. No effect on CPU",
    )  # fmt: skip
    group.add_argument(
        "--prefetch_updates", type=int, default=2,
        help="make the batches of the next N updates in a background thread while the current one runs (0: in the "
        "training loop; the masked LM's collator, which draws random numbers, always runs there)",
    )  # fmt: skip
    add_option(
        group, "seed", COMMAND, default=0,
        help="seeds the initial weights, the validation split, batch order and dropout",
    )  # fmt: skip
    add_step_speed_options(group)
    group.add_argument("--drophead_p_start", type=float, default=None, help="scheduled DropHead: rate at step 0")
    group.add_argument("--drophead_p_end", type=float, default=None, help="scheduled DropHead: rate at the end")
    group.add_argument("--drophead_kinds", type=str_list, default=list(DROPHEAD_KINDS), help="encoder,decoder,cross")


def add_step_speed_options(group) -> None:
    """The training step's speed options (vaswani/training/speed.py; docs/performance.md). Each boolean is automatic
    when not given: on where it was measured to pay (`speed.AUTOMATIC`)."""
    group.add_argument(
        "--shape_buckets", type=str2bool, default=None,
        help="every batch padded to one of at most --num_shape_buckets shapes (rows, source and target length) chosen "
        "from the data, so that a compiled step compiles once per shape. Translation only. Default: on with "
        "--torch_compile",
    )  # fmt: skip
    group.add_argument(
        "--num_shape_buckets", type=int, default=32, metavar="K",
        help="--shape_buckets: the most distinct batch shapes (default: 32)",
    )  # fmt: skip
    group.add_argument(
        "--torch_compile", type=str2bool, default=None,
        help="compile each encoder and decoder layer with torch.compile (automatic dynamic shapes: a few graphs per "
        "run; LayerDrop and DropHead do not recompile). Default: automatic (vaswani/training/speed.py)",
    )  # fmt: skip
    group.add_argument(
        "--torch_compile_mode", choices=COMPILE_MODES, default=None,
        help="torch.compile's mode with --torch_compile (default: default); reduce-overhead adds CUDA graphs (GPU only)",
    )  # fmt: skip
    group.add_argument(
        "--fused_loss", type=str2bool, default=None,
        help="compute the output layer and the label-smoothed loss together, a chunk of target tokens at a time, "
        "never holding the (tokens x vocabulary) logits in float32 (training only). Translation only. Default: "
        "automatic",
    )  # fmt: skip
    group.add_argument(
        "--loss_chunk_tokens", type=int, default=None, metavar="N",
        help="--fused_loss: target tokens per chunk (default: about 4M logits a chunk, 2^22 / the vocabulary size, "
        "sized for a CPU's cache; on a GPU larger chunks make fewer, larger matrix products)",
    )  # fmt: skip
    group.add_argument(
        "--compiled_loss", type=str2bool, default=None,
        help="compile the label-smoothed loss (torch.compile): one pass over the logits in their own dtype forward "
        "and one backward instead of several over a float32 copy (training only). Translation only, not with "
        "--fused_loss. Default: automatic",
    )  # fmt: skip
    group.add_argument(
        "--bf16_weights", type=str2bool, default=None,
        help="with --mixed_precision bf16: forward and backward on bfloat16 copies of the weights, the optimizer on "
        "the float32 weights (the master copy that checkpoints and the saved model keep). One process. Default: "
        "automatic",
    )  # fmt: skip


def add_evaluation_options(parser: argparse.ArgumentParser) -> None:
    """The evaluation: how often, on what, with which beam search; early stopping."""
    group = parser.add_argument_group("evaluation")
    group.add_argument("--eval_steps", type=int, default=1000, help="evaluate every N updates (0: only at the end)")
    group.add_argument(
        "--max_eval_samples",
        type=int,
        default=None,
        help="evaluations during training on at most N validation pairs (the final ones: --final_eval_samples)",
    )
    group.add_argument(
        "--final_eval_samples", type=int, default=None,
        help="the final model's choice (--final_model auto) and the final validation scores on at most N validation "
        "examples (default: all of them); scores recorded during training are reused when --max_eval_samples "
        "gives as many, else every candidate is scored again after training",
    )  # fmt: skip
    add_option(
        group, "max_test_samples", "train", default=None,
        help="the final test scores on the first N test examples (default: all of them; for a quick look at a recipe, "
        "as transformers' --max_predict_samples): results.json, the log and the model card name the split test[:N]",
    )  # fmt: skip
    group.add_argument("--eval_max_tokens", type=int, default=None,
                       help="token budget of evaluation batches (default: --max_tokens; on a CPU at most 512 per "
                            "thread, where the evaluation's beam search runs faster in small batches)")  # fmt: skip
    add_option(group, "num_beams", COMMAND, default=4, help="beam size of evaluation's translations (paper: 4)")
    add_option(
        group, "length_penalty", COMMAND, default=0.6,
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
    add_option(group, "output_dir", COMMAND, help="where the run and the final model go (required)")
    add_option(group, "overwrite_output_dir", COMMAND, help="replace a previous run in output_dir")
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
        "--ema_decay", type=ema_decay, nargs="?", const="auto", default=None,
        help="keep an exponential moving average of the weights (float32, in every checkpoint), a candidate for "
        "the final model: D in (0, 1), or auto (also --ema_decay alone) for an averaging horizon 1/(1-D) of "
        f"{100 * EMA_HORIZON:g}%% of the run's updates; the decay warms up as min(D, (1+t)/(10+t)) "
        "(vaswani/training/ema.py); none (the default): no average",
    )  # fmt: skip
    group.add_argument(
        "--final_model", choices=FINAL_MODELS, default="auto",
        help="the model the run hands over: auto = the best on the validation set (--metric_for_best) of the last "
        "checkpoint, the best evaluated checkpoint, the window's average and the weights' moving average "
        "(--ema_decay) (a tie goes to the simpler, in that order); last, best, average or ema force one",
    )  # fmt: skip
    group.add_argument(
        "--logging_steps", type=int, default=100, help="log loss, LR and tokens/s every N updates (0: never)"
    )
    group.add_argument(
        "--report_to", default="auto", help="accelerate trackers: auto (tensorboard if installed), none"
    )
    group.add_argument("--push_to_hub", action="store_true", help="upload the final model with its model card")
    add_option(group, "hub_model_id", COMMAND, help="the Hub repository, e.g. user/transformer-en-de")


def add_language_model_options(parser: argparse.ArgumentParser, command: str = COMMAND) -> None:
    """The options of --task causal_lm / masked_lm (vaswani/data/text.py); an error with --task translation.
    (`vaswani prepare` shares them all but --mlm_probability: the masks are drawn in training.)"""
    group = parser.add_argument_group("language-model tasks (--task causal_lm / masked_lm)")
    add_option(
        group, "text_column", command, default="text",
        help="LM tasks: the field of a .json/.jsonl line or the `datasets` column that holds the text (a dotted path "
        "such as translation.en reaches into nested objects); other files are plain text, one text per line",
    )  # fmt: skip
    add_option(
        group, "block_size", command, default=256,
        help="LM tasks: tokens per example: packed blocks (--packing yes) or the limit of a line (--packing no)",
    )  # fmt: skip
    add_option(
        group, "packing", command, choices=PACKING_CHOICES, default="yes",
        help="LM tasks: yes: concatenate the texts and cut blocks of --block_size tokens (run_clm's group_texts); "
        "no: one example per line, cut to --block_size tokens",
    )  # fmt: skip
    if command == COMMAND:
        group.add_argument(
            "--mlm_probability", type=float, default=0.15,
            help="masked_lm: share of tokens to predict (of them 80%% <mask>, 10%% a random token, 10%% unchanged)",
        )  # fmt: skip


def parse_args(argv: list[str] | None = None, prog: str | None = None) -> argparse.Namespace:
    """Defaults < YAML (`--config`) < command line, then checked (`finish_args`). Unknown options, on either side,
    are errors."""
    return finish_args(build_parser(prog).parse_args(sys.argv[1:] if argv is None else argv))


def finish_args(args: argparse.Namespace) -> argparse.Namespace:
    """The parsed options checked together and the defaults that depend on others resolved, once: run_args.json and a
    resume see the resolved values. Every mistake is a `UsageError`, before any training time is spent."""
    TASKS[args.task].check_args(args)
    if args.metric_for_best is None:  # resolved here, once: run_args.json and a resume see the task's default
        args.metric_for_best = TASKS[args.task].metrics[0]
    _check_args(args)
    if args.model and not args.tokenizer and has_tokenizer(Path(args.model)):  # the vocabulary the model was
        args.tokenizer = args.model  # trained with: resolved here, once (run_args.json, a resume)
    if not (args.train_file or args.dataset_name or args.prepared_data):  # resolved here, once: run_args.json and a
        args.dataset_name = "demo"  # resume see "demo" (--prepared_data: its manifest's sources, `apply_manifest`)
    return args


def _check_args(args: argparse.Namespace) -> None:
    if not args.output_dir:  # not `required`: it may come from the --config file
        raise UsageError("--output_dir is required (on the command line or in the --config file).")
    positive = ["max_tokens", "gradient_accumulation_steps", "max_source_length", "max_target_length", "num_beams"]
    for name in positive:
        if getattr(args, name) is None or getattr(args, name) < 1:
            raise UsageError(f"--{name} {getattr(args, name)} is not allowed; use a positive integer.")
    if args.prefetch_updates < 0:
        raise UsageError(f"--prefetch_updates {args.prefetch_updates} is not allowed; use 0 (off) or more.")
    if args.num_shape_buckets < 1:
        raise UsageError(f"--num_shape_buckets {args.num_shape_buckets} is not allowed; use a positive integer.")
    for name in (
        "max_train_steps",
        "max_sentences",
        "eval_max_tokens",
        "checkpoint_steps",
        "max_eval_samples",
        "final_eval_samples",
        "max_test_samples",
        "stop_after_steps",
        "loss_chunk_tokens",
    ):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            raise UsageError(
                f"--{name} {getattr(args, name)} is not allowed; use a positive integer or leave it unset."
            )
    if unknown_length(args) and args.max_train_minutes is None and args.early_stopping_patience is None:
        raise UsageError(
            "set when training ends: --max_train_steps (optimizer updates), --num_train_epochs, --max_train_minutes "
            "or --early_stopping_patience."
        )
    check_schedule_args(args)
    if unknown_length(args) and args.drophead_p_start is not None:
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
    if args.final_model == "ema" and args.ema_decay is None:
        raise UsageError("--final_model ema needs the weights' moving average: set --ema_decay (auto or a decay).")
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
            raise UsageError(f"--hub_model_id: {exc}") from exc
    unknown = [k for k in args.drophead_kinds if k not in DROPHEAD_KINDS]
    if unknown:
        raise UsageError(f"--drophead_kinds {unknown} are not allowed; choose from {list(DROPHEAD_KINDS)}.")
    if (args.drophead_p_start is None) != (args.drophead_p_end is None):
        raise UsageError("scheduled DropHead needs both --drophead_p_start and --drophead_p_end.")
    if args.report_to not in ("auto", "none", "all", "tensorboard", "wandb", "mlflow", "comet_ml", "aim", "clearml"):
        raise UsageError(f"--report_to {args.report_to!r} is not a known tracker; use auto, none or a tracker name.")


def check_schedule_args(args: argparse.Namespace) -> None:
    """The learning-rate schedule's options: a schedule that ends with the run needs the run's budget; the decay's
    options belong to warmup_stable_decay; early stopping is refused with it (docs/training.md says why)."""
    if unknown_length(args) and args.max_train_minutes is None and args.lr_scheduler in SCHEDULES_NEEDING_TOTAL:
        raise UsageError(
            f"--lr_scheduler {args.lr_scheduler} ends with the run's budget, which is unknown without "
            "--max_train_steps, --num_train_epochs or --max_train_minutes: set one, or use noam, inverse_sqrt, "
            "constant_with_warmup or constant with early stopping alone."
        )
    if args.lr_scheduler == "warmup_stable_decay" and args.early_stopping_patience is not None:
        raise UsageError(
            "--early_stopping_patience with --lr_scheduler warmup_stable_decay is refused: the stable phase's "
            "validation score stalls at the constant peak rate, so early stopping would end the run before the "
            "decay that brings its gain; bound the run with --max_train_minutes or --max_train_steps (--final_model "
            "auto still hands over the best checkpoint), or use another --lr_scheduler with early stopping."
        )
    explicit = getattr(args, "explicit", set())
    for name in ("decay_fraction", "decay_type", "min_lr_ratio"):
        if name in explicit and args.lr_scheduler != "warmup_stable_decay":
            raise UsageError(
                f"--{name} shapes --lr_scheduler warmup_stable_decay only, not {args.lr_scheduler}: drop it or use "
                "--lr_scheduler warmup_stable_decay."
            )
    if not 0 < args.decay_fraction <= 1:
        raise UsageError(
            f"--decay_fraction {args.decay_fraction} is not allowed; use a fraction of the budget in (0, 1]."
        )
    if not 0 <= args.min_lr_ratio < 1:
        raise UsageError(f"--min_lr_ratio {args.min_lr_ratio} is not allowed; use a ratio of the peak in [0, 1).")
    if args.lr_scheduler != "noam" and (args.learning_rate is None or args.learning_rate <= 0):
        raise UsageError(
            f"--lr_scheduler {args.lr_scheduler} needs a positive --learning_rate (its peak), got {args.learning_rate}."
        )


def unknown_length(args: argparse.Namespace) -> bool:
    """Whether the run's number of updates is unknown in advance (a time budget or early stopping ends it)."""
    return args.max_train_steps is None and args.num_train_epochs is None
