"""The run folder (`--output_dir`): starting a new run or resuming one without losing anything already there, the
options that define a run (a resume with different values is refused), logging and metrics.jsonl.
"""

from __future__ import annotations

import argparse
import copy
import json
import logging
import os
import shutil
from pathlib import Path

from modeling_vaswani.configuration_vaswani import MODEL_OPTIONS
from vaswani.constants import (
    ABANDONED_PREFIX,
    BEST_DIR,
    CHECKPOINTS_SUBDIR,
    CONFIG_FILE,
    GENERATION_CONFIG_FILE,
    METRICS_FILE,
    RESULTS_FILE,
    RUN_ARGS_FILE,
    STEP_DIR,
    TMP_PREFIX,
    TOKENIZER_STAGING,
)
from vaswani.data.cleaning import CLEANING_OPTIONS
from vaswani.data.prepared import DATA_OPTIONS
from vaswani.errors import (
    CheckpointError,
    UsageError,
)
from vaswani.fileio import write_file_atomically
from vaswani.model_folder import (
    hide_transformers_progress_bars,
    is_model_file,
)
from vaswani.options import rename_legacy_keys
from vaswani.training.checkpoints import CheckpointManager

logger = logging.getLogger("train")  # one logger for the whole training run


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
            raise UsageError(f"cannot resume: {exc}") from exc
        try:
            saved = json.loads(previous.read_text(encoding="utf-8"))
            if not isinstance(saved, dict):
                raise ValueError("not a JSON object")
        except (ValueError, UnicodeDecodeError) as exc:
            raise UsageError(f"cannot resume: {previous} is damaged ({exc}); start a new run.") from exc
        saved = rename_legacy_keys(saved, where=str(previous), command="train")  # a run of an older version
        if saved.get("prepared_data") and saved.get("dataset_name") == "demo" and not saved.get("train_file"):
            # a run from --prepared_data of an older version recorded the demo default instead of the manifest's
            # sources (`apply_manifest`): its data is compared by its tokenizer, the prepared folder's
            saved = {key: value for key, value in saved.items() if key not in DATA_OPTIONS}
        changed = [k for k in RUN_DEFINING_OPTIONS if k in saved and saved[k] != _jsonable(getattr(args, k))]
        if changed:
            details = ", ".join(f"--{k} {saved[k]!r} -> {_jsonable(getattr(args, k))!r}" for k in changed)
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


def write_run_config(output_dir: Path, model) -> None:
    """Main process: the config.json and generation_config.json of the model being trained, in the run folder from
    the start (the final save replaces them). With the tokenizer and run_args.json already there, the run folder
    describes its model while it trains, so that `vaswani average --run_dir RUN --last N` makes a model folder of its
    latest checkpoints during the run or after it stopped. Written where missing only (a resumed run has them; a run
    of an older version gets them), generation config first and config.json last, each atomically."""
    if (output_dir / CONFIG_FILE).is_file():
        return
    config = copy.deepcopy(model.config)
    config.architectures = [type(model).__name__]  # as save_pretrained records it
    generation = getattr(model, "generation_config", None)  # None: an encoder-only model does not generate
    if generation is not None:
        write_file_atomically(output_dir / GENERATION_CONFIG_FILE, generation.to_json_string(use_diff=True))
    write_file_atomically(output_dir / CONFIG_FILE, config.to_json_string(use_diff=True))


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
    return json.loads(json.dumps(value, default=os.fspath))  # paths as text; anything else not JSON is a bug


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
    hide_transformers_progress_bars()  # the log's progress bar is the loop's
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


# Options that define what a run computes: resuming with different values would not continue the same run.
RUN_DEFINING_OPTIONS = [
    *MODEL_OPTIONS, "model_preset", "model", "train_file", "dataset_name", "dataset_config_name",
    "source_lang", "target_lang", "tokenizer", "vocab_size", "min_frequency", "special_tokens_layout",
    "max_source_length", "max_target_length", "overlong", *CLEANING_OPTIONS, "max_tokens", "max_sentences",
    "gradient_accumulation_steps",
    "seed", "lr_scheduler", "learning_rate", "lr_factor", "warmup_steps", "adam_beta1", "adam_beta2", "adam_epsilon",
    "weight_decay", "drophead_p_start", "drophead_p_end", "drophead_kinds",
    # the schedules (linear/cosine LR, DropHead) and the data order depend on these too
    "max_train_steps", "num_train_epochs", "max_grad_norm", "validation_file", "validation_size", "mixed_precision",
    # the language-model tasks (vaswani/data/text.py)
    "task", "text_column", "block_size", "packing", "mlm_probability",
]  # fmt: skip
