"""Upload a model folder to the Hugging Face Hub in one commit, with our model card.

    from vaswani.hub.push import push_model_folder
    url = push_model_folder("runs/base-avg5", "your-name/transformer-en-de")

Command line: `vaswani push --model runs/base-avg5 --hub_model_id your-name/transformer-en-de`; train.py calls the same
function at the end of a run with `--push_to_hub --hub_model_id ID`.

What is checked before any network call: the repo id (NAME or OWNER/NAME), and that the folder is complete:
config.json with the `auto_map` (and, for translation, `custom_pipelines`) that `trust_remote_code=True` needs, the
weights (one model.safetensors, or every shard its index lists), tokenizer.json and the modeling code that
`save_pretrained` copies there (`vaswani.model_folder.code_files`: configuration_vaswani.py, modeling_vaswani.py,
generation_vaswani.py, pipeline_vaswani.py for a translation model, and the `*_lm.py` files too for the decoder-only
and encoder-only language models). A CTranslate2 export (`vaswani export --format ctranslate2`) is pushed too: its
model.bin, vocabularies, tokenizer and record, with a card of its own (`vaswani.hub.model_card.render_export_card`);
what it needs is checked by `check_export_folder`.

What is uploaded: every file of the folder, including the training record (run_args.json with local paths reduced to
file names, results.json, metrics.jsonl), except the training checkpoints (checkpoints/), the tracker logs (logs/) and hidden or cache files
(.tmp-* leftovers, __pycache__). The modeling code comes from the installed package (`installed_code`), where the
folder's copies were written by another version of it (a warning names them): what `trust_remote_code=True` loads
from the Hub is then the code vaswani itself runs the model with (transformers 5.24, for one, needs code newer than
that of folders saved before it: docs/layout.md#tests). The folder's README.md is the model card, uploaded as it is;
a folder without one gets a card rendered for `repo_id` (`vaswani.hub.model_card.render_model_card`). Everything goes
in a single `HfApi.create_commit`, after `HfApi.create_repo(exist_ok=True)`; transformers' `push_to_hub` is not used
because it replaces the card with an auto-generated one.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from modeling_vaswani.pipeline_vaswani import TASK  # the pipeline task name, defined once
from vaswani.constants import (
    AUTO_CLASS,
    CHECKPOINTS_SUBDIR,
    CONFIG_FILE,
    CT2_MODEL_FILE,
    EXPORT_INFO_FILE,
    LOGS_DIR,
    MODEL_CARD_FILE,
    RUN_ARGS_FILE,
    SEQ2SEQ_MODEL_TYPE,
    VASWANI_MODEL_TYPES,
)
from vaswani.errors import EnvironmentFailure, ModelFolderError, PushError, is_environment_failure
from vaswani.fileio import read_json_object
from vaswani.hub.model_card import public_run_args, render_model_card
from vaswani.model_folder import check_model_files, code_files, has_tokenizer, installed_code

logger = logging.getLogger(__name__)

EXCLUDED_DIRECTORIES = {CHECKPOINTS_SUBDIR, LOGS_DIR, "__pycache__"}


def check_repo_id(repo_id: str) -> str:
    """`repo_id` if the Hub would accept it as a model repo name, else a `PushError` saying what a valid one is."""
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    try:
        validate_repo_id(repo_id)
    except HFValidationError:
        raise PushError(
            f"{repo_id!r} is not a valid repo id: use NAME or OWNER/NAME with letters, digits, '-', '_', '.' "
            "(not starting or ending with '-' or '.', at most 96 characters)"
        ) from None
    return repo_id


def check_push_folder(folder: str | Path, *, trust_remote_code: bool = False) -> Path:
    """`folder` as a Path if it can be pushed (see the module docstring), else a `PushError` naming what is missing
    and how to fix it. The model files are checked as for loading (`vaswani.model_folder.check_model_files`); any of
    our three families (translation, decoder-only, encoder-only) can be pushed."""
    folder = Path(folder)
    if (folder / EXPORT_INFO_FILE).is_file():
        return check_export_folder(folder)
    try:
        config, _ = check_model_files(
            folder, trust_remote_code=trust_remote_code, model_types=tuple(VASWANI_MODEL_TYPES)
        )
    except ModelFolderError as error:
        raise PushError(str(error)) from error
    model_type = config.model_type if config.model_type in AUTO_CLASS else SEQ2SEQ_MODEL_TYPE
    missing = [name for name in code_files(model_type) if not (folder / name).is_file()]
    saved = json.loads((folder / CONFIG_FILE).read_text(encoding="utf-8"))
    auto_map = saved.get("auto_map") or {}
    pipelines = saved.get("custom_pipelines") or {}
    # the LMs use transformers' own text-generation / fill-mask pipelines
    needs_pipeline = model_type == SEQ2SEQ_MODEL_TYPE
    if missing or AUTO_CLASS[model_type] not in auto_map or (needs_pipeline and TASK not in pipelines):
        lacks = ", ".join(missing) if missing else "the auto_map / custom_pipelines entries in config.json"
        raise PushError(
            f"{folder} lacks {lacks}, which loading with trust_remote_code=True needs: save it again with this "
            f"package (`import modeling_vaswani`, then {AUTO_CLASS[model_type]}.from_pretrained(folder)"
            ".save_pretrained(folder))"
        )
    return folder


def check_export_folder(folder: Path) -> Path:
    """A CTranslate2 export (`vaswani export --format ctranslate2`) to push: its record (vaswani_ctranslate2.json),
    CTranslate2's model.bin and config.json, and the tokenizer `vaswani translate` encodes with; else a `PushError`."""
    try:
        read_json_object(folder / EXPORT_INFO_FILE, fix="export the model again")
    except ModelFolderError as error:
        raise PushError(str(error)) from error
    missing = [name for name in (CT2_MODEL_FILE, CONFIG_FILE) if not (folder / name).is_file()]
    if not has_tokenizer(folder):
        missing.append("a tokenizer (tokenizer.json)")
    if missing:
        raise PushError(f"{folder} is an incomplete CTranslate2 export (it lacks {', '.join(missing)}): export the "
                        "model again (vaswani export --format ctranslate2 --overwrite_output_dir)")  # fmt: skip
    return folder


def files_to_push(folder: str | Path) -> list[tuple[str, Path]]:
    """(path in the repo, local path) of every file to upload, sorted; see the module docstring for what is left
    out, and for the modeling code, which comes from the installed package."""
    folder = Path(folder)
    installed = installed_code(None)
    files = []
    for path in sorted(folder.rglob("*")):
        parts = path.relative_to(folder).parts
        if not path.is_file() or parts[0] in EXCLUDED_DIRECTORIES or any(part.startswith(".") for part in parts):
            continue
        if "__pycache__" in parts or path.suffix == ".pyc":
            continue
        files.append(("/".join(parts), installed.get(path.name, path) if len(parts) == 1 else path))
    return files


def _public_bytes(run_args_file: Path) -> bytes:
    """run_args.json as published: local paths reduced to file names (`vaswani.hub.model_card.public_run_args`)."""
    try:
        run_args = json.loads(run_args_file.read_text(encoding="utf-8"))
        if not isinstance(run_args, dict):
            raise ValueError("not a JSON object")
    except (OSError, UnicodeDecodeError, ValueError) as error:
        raise PushError(f"{run_args_file} is damaged ({error}): fix or remove it before pushing") from error
    return (json.dumps(public_run_args(run_args), indent=2, sort_keys=True) + "\n").encode("utf-8")


def push_model_folder(
    folder: str | Path,
    repo_id: str,
    *,
    private: bool = False,
    token: str | None = None,
    commit_message: str | None = None,
    trust_remote_code: bool = False,
) -> str:
    """Create `repo_id` if needed and upload the model folder to it in one commit; returns the repo's URL.

    Raises `PushError` for a bad repo id or an incomplete folder (before any network call) and when the Hub refuses
    (no token, no permission, offline)."""
    from huggingface_hub import CommitOperationAdd, HfApi
    from huggingface_hub.errors import HfHubHTTPError, OfflineModeIsEnabled

    check_repo_id(repo_id)
    folder = check_push_folder(folder, trust_remote_code=trust_remote_code)
    files = files_to_push(folder)
    stale = [
        name for name, path in files if path != folder / name and path.read_bytes() != (folder / name).read_bytes()
    ]
    if stale:
        logger.warning("uploading the installed vaswani's %s, not the folder's (written by another version of it): the "
                       "code vaswani runs the model with is what trust_remote_code=True loads", ", ".join(stale))  # fmt: skip
    operations = [
        CommitOperationAdd(
            path_in_repo=name, path_or_fileobj=_public_bytes(path) if name == RUN_ARGS_FILE else str(path)
        )
        for name, path in files
    ]
    if not (folder / MODEL_CARD_FILE).is_file():
        card = render_model_card(folder, repo_id=repo_id)
        operations.append(
            CommitOperationAdd(path_in_repo=MODEL_CARD_FILE, path_or_fileobj=card.content.encode("utf-8"))
        )

    api = HfApi(token=token)
    try:
        repo_url = api.create_repo(repo_id, private=private, exist_ok=True, repo_type="model")
        api.create_commit(
            repo_id=repo_url.repo_id,
            repo_type="model",
            operations=operations,
            commit_message=commit_message or f"Upload {folder.name} (vaswani)",
        )
    except OfflineModeIsEnabled as error:  # the user's own setting (HF_HUB_OFFLINE=1): theirs to change
        raise PushError(f"uploading {folder} to {repo_id} failed: {error}") from error
    except HfHubHTTPError as error:  # the Hub answered: no token, no permission, a name taken (a 5xx is the Hub's)
        status = getattr(getattr(error, "response", None), "status_code", None)
        if status is not None and status >= 500:
            raise EnvironmentFailure("uploading to the Hub at", api.endpoint, error) from error
        raise PushError(f"uploading {folder} to {repo_id} failed: {error}") from error
    except Exception as error:  # the network refused or timed out: an OSError, or a transport error of the HTTP
        # client huggingface_hub uses (httpx or its fork httpx2: told by the class name, which both keep)
        transport = any(cls.__name__ == "TransportError" for cls in type(error).__mro__)
        if transport or is_environment_failure(error):
            raise EnvironmentFailure("uploading to the Hub at", api.endpoint, error) from error
        raise
    return str(repo_url)


__all__ = [
    "PushError",
    "check_export_folder",
    "check_push_folder",
    "check_repo_id",
    "files_to_push",
    "push_model_folder",
]
