"""`vaswani average`: the averaged model of a finished run (or of given checkpoints) written as a complete
`save_pretrained` folder (Vaswani et al. 2017, Section 6.1; fairseq's `scripts/average_checkpoints.py`). The
averaging itself is `vaswani.weights.average_checkpoints`.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from vaswani.constants import (
    CHECKPOINTS_SUBDIR,
    GENERATION_CONFIG_FILE,
    RESULTS_FILE,
    STEP_DIR,
)
from vaswani.errors import (
    CheckpointError,
    ModelFolderError,
)
from vaswani.fileio import read_json_object
from vaswani.hub.model_card import write_model_card
from vaswani.model_folder import (
    check_model_files,
    check_model_folder,
    check_output_folder,
    copy_tokenizer_and_run_args,
    is_source_record,
    write_model_folder,
)
from vaswani.training.checkpoints import CheckpointManager, step_of
from vaswani.weights import average_into_model

if TYPE_CHECKING:
    from transformers import PreTrainedModel


# ----------------------------------------------------------------------------------------------------------------
# The averaged model as a save_pretrained folder (the standalone step)
# ----------------------------------------------------------------------------------------------------------------
def average_run(
    run_dir: str | Path, last: int, output_dir: str | Path, *, overwrite: bool = False, trust_remote_code: bool = False
) -> Path:
    """Average the last `last` complete checkpoints of a run into a complete model folder.

    `run_dir` is the final model folder train.py writes (config, generation config, tokenizer files), with the
    checkpoints under `run_dir/checkpoints/`. The output gets the model's `save_pretrained` files with the averaged
    weights, the tokenizer files and run_args.json of `run_dir`, and a model card of its own (the run's scores
    belong to the run's final model, not to the average). `output_dir` may be `run_dir` itself: its model
    files are then replaced (`vaswani.model_folder.write_model_folder`) and everything else in it is kept. Any
    other non-empty `output_dir` needs `overwrite`.
    """
    run_dir = check_model_folder(run_dir, need_tokenizer=False, need_weights=False)
    if last < 1:
        raise CheckpointError(f"the number of checkpoints to average is {last}; it must be at least 1.")
    checkpoint_root = run_dir / CHECKPOINTS_SUBDIR
    available = CheckpointManager(checkpoint_root).checkpoints()
    if len(available) < last:
        raise CheckpointError(
            f"cannot average the last {last} checkpoint(s): {checkpoint_root} has {len(available)} complete "
            f"checkpoint(s)."
        )
    in_place = Path(output_dir).exists() and Path(output_dir).resolve() == run_dir.resolve()
    return average_to_folder(
        available[-last:], run_dir, output_dir, overwrite=overwrite or in_place, trust_remote_code=trust_remote_code
    )


def average_to_folder(
    paths: Sequence[str | Path],
    model_dir: str | Path,
    output_dir: str | Path,
    *,
    overwrite: bool = False,
    trust_remote_code: bool = False,
) -> Path:
    """Average the checkpoints into the model described by `model_dir` (its config, generation config, tokenizer
    files and run_args.json; its weights are not read) and write a complete `save_pretrained` folder with a model
    card of its own to `output_dir` (a new or empty folder, or any folder with `overwrite`: its model files are
    replaced, other files kept).

    The folder's results.json is the average's record (`averaged_checkpoints`, the `step` of the last), which the
    card shows when `vaswani card` renders it again; the scores of a model it replaces (averaging into a finished
    run's folder) are kept in it as `replaced_model_results`, apart from the average's, so that no card or Hub
    model-index shows them as the average's."""
    model_dir = Path(model_dir)
    check_output_folder(output_dir, replace=overwrite)
    config, _ = check_model_files(
        model_dir, need_tokenizer=False, need_weights=False, trust_remote_code=trust_remote_code
    )
    model = _model_from_config(model_dir, config, trust_remote_code)
    average_into_model(model, paths)

    record = {"averaged_checkpoints": [Path(path).name for path in paths]}
    if STEP_DIR.fullmatch(record["averaged_checkpoints"][-1]):  # a run's checkpoint: the updates made
        record["step"] = step_of(paths[-1])
    replaced = _replaced_results(Path(output_dir))
    if replaced is not None:
        record["replaced_model_results"] = replaced

    def write(folder: Path) -> None:
        model.save_pretrained(folder)
        copy_tokenizer_and_run_args(model_dir, folder)
        (folder / RESULTS_FILE).write_text(json.dumps(record, indent=2, ensure_ascii=False), encoding="utf-8")
        # a card of its own, named after the output folder: the model folder's card scores another model
        write_model_card(folder, repo_id=Path(output_dir).resolve().name, results=record)

    return write_model_folder(output_dir, write, replace=overwrite, replaces=is_source_record)


def _replaced_results(output_dir: Path) -> dict | None:
    """The results.json of the model an average replaces in `output_dir` (None where there is none); a damaged one
    is kept as its text."""
    path = output_dir / RESULTS_FILE
    if not path.is_file():
        return None
    try:
        return read_json_object(path)
    except ModelFolderError:
        return {"unreadable": path.read_text(encoding="utf-8", errors="replace")}


def _model_from_config(model_dir: Path, config, trust_remote_code: bool) -> PreTrainedModel:
    """A freshly initialized model of `config`, with the folder's generation config."""
    from transformers import AutoModelForSeq2SeqLM, GenerationConfig

    model = AutoModelForSeq2SeqLM.from_config(config, trust_remote_code=trust_remote_code)
    if (model_dir / GENERATION_CONFIG_FILE).is_file():
        try:
            model.generation_config = GenerationConfig.from_pretrained(model_dir, local_files_only=True)
        except (OSError, ValueError, TypeError) as error:
            raise CheckpointError(f"{model_dir / GENERATION_CONFIG_FILE} cannot be read: {error}") from error
    return model


# ----------------------------------------------------------------------------------------------------------------
# Command line
# ----------------------------------------------------------------------------------------------------------------
