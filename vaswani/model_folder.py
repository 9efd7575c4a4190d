"""Model folders (what `save_pretrained` writes, plus the tokenizer): one place to check, load and write them safely.

- `check_model_folder(folder)`: a local folder with config.json, weights and (optionally) a tokenizer (tokenizer.json,
  or the files of a MarianTokenizer: `has_tokenizer`); a path that does not exist is an error naming it, never a Hub
  download.
- `load_model_folder(folder)`: the model and tokenizer, loaded without running the folder's code (unless
  `trust_remote_code=True`) and checked before use: config.json must be a Vaswani configuration, every weight must
  be present with the shape the config gives it (and nothing else), the files must be readable (a truncated or
  garbage model.safetensors, a tokenizer.json of `{}`), and the tokenizer must fit the model (vocabulary within
  vocab_size, the same PAD/EOS/BOS/decoder-start ids). Each problem is a `ModelFolderError` naming the file and the
  fix; the command line prints it as `error: ...` (exit status 2).
- `write_model_folder(output_dir, write)`: writes a complete model folder so that a kill at any moment leaves either
  the previous content or the complete new one. The new files are written into a hidden sibling folder
  (`.tmp-<name>-new`), made durable, then swapped in with renames; files of `output_dir` that a model save does not
  write (checkpoints/, metrics.jsonl, run_args.json, the user's own files) are moved into the new folder, never
  deleted, except the replaced model's own files that would contradict the new one (an earlier save's weight shards,
  another tokenizer's files, a made folder's training record: `_superseded`). An interrupted swap is finished by the
  next `write_model_folder` or `recover_model_folder` on that path. A folder that cannot be renamed (a mount point,
  or the current folder) gets its files replaced one by one instead, each replacement atomic; a kill halfway is
  rolled forward the same way.
"""

from __future__ import annotations

import functools
import importlib
import json
import os
import pickle
import shutil
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from vaswani.constants import (
    BEST_DIR,
    CHECKPOINTS_SUBDIR,
    CODE_MODULES,
    CONFIG_FILE,
    CT2_MODEL_FILE,
    EXPORT_INFO_FILE,
    JOURNAL_FILE,
    MARIAN_TOKENIZER_CLASS,
    MARIAN_TOKENIZER_FILES,
    PICKLED_WEIGHT_SUFFIXES,
    RUN_ARGS_FILE,
    SAFE_WEIGHT_SHARD,
    SAFE_WEIGHTS_INDEX_NAME,
    SAFE_WEIGHTS_NAME,
    SAVED_FILES,
    SEQ2SEQ,
    SEQ2SEQ_MODEL_TYPE,
    TMP_PREFIX,
    TOKENIZER_FILE,
    TOKENIZER_FILE_NAMES,
    TOKENIZER_FILE_PATTERNS,
    TRAINING_STATE_FILE,
    VASWANI_MODEL_TYPES,
    WEIGHT_FILES,
    WEIGHT_SHARD,
)
from vaswani.errors import CheckpointError, EnvironmentFailure, ModelFolderError, is_environment_failure
from vaswani.fileio import fsync_dir, fsync_tree, read_json_object
from vaswani.light_tokenizers import light_marian_tokenizer, light_tokenizer, mend_subword_nmt_decoder
from vaswani.weights import tied_groups, weight_files

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

    from vaswani.light_tokenizers import LightMarianTokenizer, LightTokenizer


# ----------------------------------------------------------------------------------------------------------------
# What a model folder holds
# ----------------------------------------------------------------------------------------------------------------
def is_weight_file(name: str) -> bool:
    """Whether `name` is a weight file of a save_pretrained folder (not e.g. a user's model-best.safetensors)."""
    return name in WEIGHT_FILES or WEIGHT_SHARD.fullmatch(name) is not None


@functools.cache
def installed_code(model_type: str | None = SEQ2SEQ_MODEL_TYPE) -> dict[str, Path]:
    """The modeling files `save_pretrained` copies next to the weights of a `model_type` folder (None: of any of our
    families) for trust_remote_code, by name, with their paths in the installed package; derived the way
    transformers finds them: the modules of `CODE_MODULES` and every module they import relatively."""
    from transformers.dynamic_module_utils import get_relative_import_files

    families = CODE_MODULES if model_type is None else {model_type: CODE_MODULES[model_type]}
    files = set()
    for name in {module for modules in families.values() for module in modules}:
        module = importlib.import_module(f"modeling_vaswani.{name}")
        files |= {module.__file__, *get_relative_import_files(module.__file__)}
    return {Path(file).name: Path(file) for file in sorted(files, key=lambda file: Path(file).name)}


def code_files(model_type: str | None = SEQ2SEQ_MODEL_TYPE) -> tuple[str, ...]:
    """The names of `installed_code(model_type)`, sorted."""
    return tuple(installed_code(model_type))


def is_model_file(name: str) -> bool:
    """Whether our model saves write files named `name`: config, generation config, weights (strict names: not e.g.
    a user's model-best.safetensors), the fast tokenizer's files, the card and the modeling code. Everything else in
    a model folder belongs to the user or the run (generic names such as vocab.txt or *.model are the user's)."""
    return name in SAVED_FILES or is_weight_file(name) or name in code_files(None)


def is_tokenizer_file(path: Path) -> bool:
    """Whether `path` is a file a tokenizer save writes (`TOKENIZER_FILE_PATTERNS`: tokenizer.json, vocab.txt, ...)."""
    return path.is_file() and any(path.match(pattern) for pattern in TOKENIZER_FILE_PATTERNS)


def is_source_record(name: str) -> bool:
    """Whether `name` is the training record that a folder made from a model (pruned, averaged, exported) copies from
    its source (`copy_tokenizer_and_run_args`): the record of a model it replaces goes even where the new source has
    none (a converted model), so that no card, `vaswani serve` or `distill --teacher` reads another model's pair."""
    return name == RUN_ARGS_FILE


def copy_tokenizer_and_run_args(source: Path, folder: Path) -> None:
    """Copy `source`'s tokenizer files and run_args.json into `folder`: what a folder made from a model (pruned,
    averaged, exported) keeps of it beside its own weights: the tokenizer it encodes with, and the training record
    (language pair, recipe) that the model card, `vaswani serve` and `vaswani distill --teacher` read."""
    for file in sorted(Path(source).iterdir()):
        if is_tokenizer_file(file) or file.name == RUN_ARGS_FILE:
            shutil.copy2(file, folder / file.name)


def has_tokenizer(folder: Path) -> bool:
    """Whether `folder` holds a tokenizer: tokenizer.json, or the files of a MarianTokenizer."""
    return (folder / TOKENIZER_FILE).is_file() or has_marian_tokenizer(folder)


def hide_transformers_progress_bars() -> None:
    """transformers' own progress bars ("Loading weights", "Writing model shards") say nothing a user acts on and
    fill logs with carriage returns: every command that loads or saves a model, and training, turn them off first.
    huggingface_hub's bars (an upload's, `--push_to_hub`) stay as they were. transformers is imported here, when
    that runs."""
    from huggingface_hub import utils as hub_utils
    from transformers.utils import logging as hf_logging

    hub_bars_were_off = hub_utils.are_progress_bars_disabled()
    hf_logging.disable_progress_bar()  # transformers' own, and huggingface_hub's
    if not hub_bars_were_off:
        hub_utils.enable_progress_bars()


def has_marian_tokenizer(folder: Path) -> bool:
    """Whether `folder` holds the files of a MarianTokenizer (`MARIAN_TOKENIZER_FILES`) and no tokenizer.json."""
    return not (folder / TOKENIZER_FILE).exists() and all((folder / name).is_file() for name in MARIAN_TOKENIZER_FILES)


def check_model_folder(folder: str | Path, *, need_tokenizer: bool = True, need_weights: bool = True) -> Path:
    """`folder` as a Path if it is a local folder holding config.json, weights (if `need_weights`) and a tokenizer
    (if `need_tokenizer`: `has_tokenizer`); otherwise a `ModelFolderError` that says what is missing. Never looks on
    the Hub."""
    folder = Path(folder)
    if not folder.exists():
        raise ModelFolderError(
            f"no such model folder: {folder} (models are read from local folders only; download a Hub model first, "
            "e.g. `hf download OWNER/NAME --local-dir DIR`)"
        )
    if not folder.is_dir():
        raise ModelFolderError(f"{folder} is a file, not a model folder")
    if not (folder / CONFIG_FILE).is_file():
        raise ModelFolderError(
            f"{folder} is not a model folder (no config.json): "
            + (
                _checkpoint_hint(folder)
                or "give a folder that vaswani train, convert or average wrote (or save_pretrained)"
            )
        )
    if need_weights:
        check_safetensors_weights(folder)
    if need_tokenizer and not has_tokenizer(folder):
        raise ModelFolderError(
            f"{folder} has no tokenizer ({TOKENIZER_FILE}): save the tokenizer the model was trained with into the "
            "same folder (tokenizer.save_pretrained)"
        )
    return folder


def _checkpoint_hint(folder: Path) -> str | None:
    """What to give instead of a training checkpoint (RUN/checkpoints/step-N, RUN/best_checkpoint/step-N) or a run's
    folder of checkpoints; None for any other folder."""
    if (folder / TRAINING_STATE_FILE).is_file() and folder.parent.name in (CHECKPOINTS_SUBDIR, BEST_DIR):
        run = folder.parent.parent
        return (f"it is a training checkpoint of the run {run}: make a model folder of it with vaswani average "
                f"--checkpoints {folder} --model {run} --output_dir OUT, or give the run folder {run} once it has "
                "finished")  # fmt: skip
    if folder.name in (CHECKPOINTS_SUBDIR, BEST_DIR) and (folder.parent / RUN_ARGS_FILE).is_file():
        return f"it holds the checkpoints of the run {folder.parent}: give the run folder {folder.parent}"
    if (folder / CHECKPOINTS_SUBDIR).is_dir() and (folder / RUN_ARGS_FILE).is_file():  # a run of an older version
        return (f"it is a training run without its final model, started before runs wrote their config.json at the "
                f"start: resume it (vaswani train ... --resume_from_checkpoint latest), which writes it; then vaswani "
                f"average --run_dir {folder} --last 1 --output_dir OUT makes a model folder of its latest checkpoint")  # fmt: skip
    return None


def refuse_ctranslate2_export(folder: Path) -> None:
    """A CTranslate2 export (`vaswani export --format ctranslate2`; its model.bin and config.json are CTranslate2's)
    given where a PyTorch model folder is needed: a `ModelFolderError` naming the commands that run an export."""
    if (folder / EXPORT_INFO_FILE).is_file():
        raise ModelFolderError(
            f"{folder} is a CTranslate2 export (vaswani export --format ctranslate2), which only decoding runs "
            "(vaswani translate, evaluate, score, serve): give the PyTorch model folder it was exported from"
        )
    if _holds_ctranslate2_model(folder):  # another converter's, or an export that lost its record
        raise ModelFolderError(
            f"{folder} holds a CTranslate2 model (model.bin and CTranslate2's config.json) without vaswani's record "
            f"of it ({EXPORT_INFO_FILE}): vaswani runs the CTranslate2 exports it writes; export the PyTorch model "
            "folder with vaswani export --format ctranslate2"
        )


def _holds_ctranslate2_model(folder: Path) -> bool:
    """Whether `folder` holds a CTranslate2 model: its model.bin beside a config.json of CTranslate2's keys (no
    transformers `model_type`, a `layer_norm_epsilon` and an `unk_token`)."""
    if not (folder / CT2_MODEL_FILE).is_file():
        return False
    try:
        config = json.loads((folder / CONFIG_FILE).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return False
    return (
        isinstance(config, dict) and "model_type" not in config and {"layer_norm_epsilon", "unk_token"} <= set(config)
    )


def check_safetensors_weights(folder: Path) -> None:
    """The weights of `folder` must be safetensors (model.safetensors, or shards with their index): a folder whose
    only weights are pickles (pytorch_model.bin, *.pt, *.pth, *.ckpt) is a `ModelFolderError` (they are never
    loaded: unpickling can run code), as is a folder with no weights at all."""
    if (folder / SAFE_WEIGHTS_NAME).is_file() or (folder / SAFE_WEIGHTS_INDEX_NAME).is_file():
        return
    refuse_ctranslate2_export(folder)  # its model.bin is CTranslate2's, not a pickle
    names = sorted(path.name for path in folder.iterdir() if path.is_file())
    if any(SAFE_WEIGHT_SHARD.fullmatch(name) for name in names):
        return  # shards without their index: check_weights_fit names the missing index
    pickled = [name for name in names if name.endswith(PICKLED_WEIGHT_SUFFIXES)]
    if pickled:
        raise ModelFolderError(
            f"{folder} holds only pickled weights ({_some(pickled)}), which are never loaded because unpickling can "
            "run code; convert them to safetensors (where you trust the file: load the model with from_pretrained "
            "and save it again with save_pretrained, which writes model.safetensors)"
        )
    if (folder / CHECKPOINTS_SUBDIR).is_dir():  # a run folder (train.py writes config.json at the start)
        raise ModelFolderError(
            f"{folder} is a training run without its final model yet (still training, or stopped): make a model "
            f"folder of its latest checkpoint with vaswani average --run_dir {folder} --last 1 --output_dir OUT, or "
            "let the run finish (vaswani train ... --resume_from_checkpoint latest)"
        )
    raise ModelFolderError(
        f"{folder} has no model weights (model.safetensors): save the model into it with save_pretrained"
    )


# ----------------------------------------------------------------------------------------------------------------
# Loading
# ----------------------------------------------------------------------------------------------------------------
def load_config(
    folder: str | Path, *, trust_remote_code: bool = False, model_types: tuple[str, ...] = SEQ2SEQ, **overrides
):
    """The configuration in `folder`/config.json (with `overrides`), validated; never runs the folder's code unless
    `trust_remote_code`. Without it, only Vaswani configurations of `model_types` are accepted (by default the
    encoder-decoder; `VASWANI_MODEL_TYPES` adds the one-stack models, for the commands that take them); with it,
    any model type except one of our families outside `model_types` (their code is ours: it would load a model the
    command cannot run)."""
    from transformers import AutoConfig

    # start-up: torch and transformers load only when a model is loaded
    import modeling_vaswani  # noqa: F401  (registers the Vaswani classes with the Auto classes)

    folder = Path(folder)
    refuse_ctranslate2_export(folder)  # its config.json is CTranslate2's
    path = folder / CONFIG_FILE
    values = read_json_object(path)
    model_type = values.get("model_type")
    if model_type in VASWANI_MODEL_TYPES and model_type not in model_types:  # ours: refused with or without code
        raise ModelFolderError(
            f"{path} describes a {VASWANI_MODEL_TYPES[model_type]} ({model_type!r}), which this command does not "
            f"take; it takes: {', '.join(VASWANI_MODEL_TYPES[t] for t in model_types)}"
        )
    if not trust_remote_code and model_type not in model_types:
        raise ModelFolderError(
            f"{path} describes a {model_type!r} model, not a Vaswani model; to run the code of another "
            "model folder, pass --trust_remote_code (only for folders you trust)"
        )
    try:
        config = AutoConfig.from_pretrained(
            folder, local_files_only=True, trust_remote_code=trust_remote_code, **overrides
        )
        if hasattr(config, "validate"):
            config.validate()
    except (OSError, ValueError, TypeError, KeyError, AttributeError) as error:
        raise ModelFolderError(f"{path} is not a valid configuration: {error}") from error
    return config


def check_weights_fit(folder: Path, config, *, trust_remote_code: bool = False) -> None:
    """Compare the weight files' tensor names and shapes (their safetensors headers) with the model `config`
    describes: a truncated or garbage file, a missing, unexpected or mis-shaped tensor is a `ModelFolderError`."""
    import torch
    from safetensors import SafetensorError, safe_open
    from transformers import AutoModelForSeq2SeqLM

    check_safetensors_weights(folder)  # never a pickled .bin (check_model_folder refuses those)
    try:
        files = weight_files(folder)
    except CheckpointError as error:  # an index that is not readable, or lists missing shards
        raise ModelFolderError(str(error)) from error
    shapes: dict[str, tuple] = {}
    for file in files:
        try:
            with safe_open(str(file), framework="pt", device="cpu") as stream:
                for key in stream.keys():  # noqa: SIM118 (not a mapping)
                    shapes[key] = tuple(stream.get_slice(key).get_shape())
            if file.stat().st_size < 8:
                raise SafetensorError("empty file")
        except (SafetensorError, OSError, ValueError) as error:
            raise ModelFolderError(
                f"{file} is damaged or not a safetensors file ({error}): copy it again or save the model again"
            ) from error
    one_stack_class = model_class(folder, config)
    with torch.device("meta"):
        if one_stack_class is not None:
            model = one_stack_class(config)
        else:
            model = AutoModelForSeq2SeqLM.from_config(config, trust_remote_code=trust_remote_code)
    expected = {name: tuple(tensor.shape) for name, tensor in model.state_dict().items()}
    tied = {name for group in tied_groups(model, {}) if group & shapes.keys() for name in group}
    missing = sorted(expected.keys() - shapes.keys() - tied)
    unexpected = sorted(shapes.keys() - expected.keys())
    wrong = sorted(name for name in expected.keys() & shapes.keys() if expected[name] != shapes[name])
    if not (missing or unexpected or wrong):
        return
    problems = []
    if missing:
        problems.append(f"missing tensors {_some(missing)}")
    if unexpected:
        problems.append(f"unexpected tensors {_some(unexpected)}")
    if wrong:
        problems.append("shapes " + ", ".join(f"{n} {shapes[n]} (config: {expected[n]})" for n in wrong[:5]))
    raise ModelFolderError(
        f"the weights in {', '.join(str(f) for f in files)} do not fit {folder / CONFIG_FILE} "
        f"(vocab_size {getattr(config, 'vocab_size', '?')}, encoder_layers {getattr(config, 'encoder_layers', '?')}, "
        f"decoder_layers {getattr(config, 'decoder_layers', '?')}): {'; '.join(problems)}. The config and the weights "
        "come from different models: restore the config.json saved with these weights, or save the model again"
    )


def model_class(folder: Path, config) -> type[PreTrainedModel] | None:
    """The class of a one-stack model folder: the one its config.json's `architectures` names among the family's
    (`VaswaniForCausalLM`, `VaswaniForMaskedLM`, ...); None for the encoder-decoder (and for foreign code run with
    trust_remote_code), which `AutoModelForSeq2SeqLM` loads."""
    # start-up: torch and transformers load only when a model is loaded
    from modeling_vaswani import VaswaniDecoderPreTrainedModel, VaswaniEncoderPreTrainedModel, modeling_vaswani_lm

    families = {family.config_class.model_type: family for family in (VaswaniDecoderPreTrainedModel,
                                                                      VaswaniEncoderPreTrainedModel)}  # fmt: skip
    family = families.get(getattr(config, "model_type", None))
    if family is None:
        return None
    names = sorted(family.auto_classes.values())
    architecture = (getattr(config, "architectures", None) or [None])[0]
    if architecture not in names:
        raise ModelFolderError(
            f"{folder / CONFIG_FILE} names the architecture {architecture!r}; a {config.model_type!r} folder holds "
            f"one of {', '.join(names)}: save the model again with save_pretrained"
        )
    return getattr(modeling_vaswani_lm, architecture)


def _some(names: list[str], limit: int = 5) -> str:
    return ", ".join(names[:limit]) + (f" and {len(names) - limit} more" if len(names) > limit else "")


# tokenizer_config.json's names of a plain fast tokenizer (tokenizer.json and nothing else): what `tokenization/`
# saves, and transformers 5's own name for the class
FAST_TOKENIZER_CLASSES = ("PreTrainedTokenizerFast", "TokenizersBackend")


def load_tokenizer(
    folder: str | Path, *, trust_remote_code: bool = False, light: bool = False
) -> PreTrainedTokenizerBase | LightTokenizer | LightMarianTokenizer:
    """The tokenizer saved in `folder` (tokenizer.json, or a MarianTokenizer: `has_tokenizer`); a `ModelFolderError`
    naming the file when it is missing or damaged.

    A plain fast tokenizer (`FAST_TOKENIZER_CLASSES`: every tokenizer `tokenization/` saves) and a converted OPUS-MT
    model's MarianTokenizer are loaded by the class `AutoTokenizer` would pick for them, without `AutoTokenizer`, which
    imports PyTorch (1-2 s): a CTranslate2 export runs without it. `light=True`: such a tokenizer comes as a
    `LightTokenizer` (the `tokenizers` library alone) or a `LightMarianTokenizer` (`sentencepiece` alone), with
    transformers not imported either, where its files hold nothing that it would read differently (`light_tokenizer`,
    `light_marian_tokenizer`). `vaswani translate` of one sentence with an export: 0.26 s, against 1.21 s with
    transformers' tokenizer and 5.35 s with AutoTokenizer's imports (benchmarks/README.md)."""
    folder = Path(folder)
    path = folder / TOKENIZER_FILE
    if not folder.is_dir():
        raise ModelFolderError(f"no such tokenizer folder: {folder}")
    config, marian = _tokenizer_config(folder), has_marian_tokenizer(folder)
    tokenizer_class = config.get("tokenizer_class")
    if marian:
        path = folder / "tokenizer_config.json"
        if tokenizer_class != MARIAN_TOKENIZER_CLASS:
            raise ModelFolderError(
                f"{path} names the tokenizer class {tokenizer_class!r}; a folder without {TOKENIZER_FILE} must hold a "
                f"{MARIAN_TOKENIZER_CLASS} ({', '.join(MARIAN_TOKENIZER_FILES)}): save the tokenizer again"
            )
    elif not path.is_file():
        raise ModelFolderError(
            f"{folder} holds no tokenizer ({TOKENIZER_FILE}, or a {MARIAN_TOKENIZER_CLASS}'s "
            f"{', '.join(MARIAN_TOKENIZER_FILES)}): give the folder save_pretrained wrote"
        )
    elif "model" not in read_json_object(path):
        raise ModelFolderError(f"{path} is not a tokenizer (no 'model' entry): save the tokenizer again")
    plain = tokenizer_class in FAST_TOKENIZER_CLASSES and not marian
    try:
        full = functools.partial(load_tokenizer, folder)  # transformers' tokenizer, for what a light one lacks
        if plain and light and (tokenizer := light_tokenizer(folder, config, full)) is not None:
            return tokenizer
        if marian and light and (tokenizer := light_marian_tokenizer(folder, config, full)) is not None:
            return tokenizer
        if plain:
            from transformers import PreTrainedTokenizerFast as loader

            options = {}
        elif marian:  # the class tokenizer_config.json names (checked above): no AutoTokenizer, whose imports take
            from transformers import MarianTokenizer as loader  # PyTorch's 1.5 s, and no config.json to read

            options = {}
        else:
            from transformers import AutoTokenizer as loader

            options = {"trust_remote_code": trust_remote_code}
        with warnings.catch_warnings():  # MarianTokenizer's punctuation normalizer is never used to encode
            warnings.filterwarnings("ignore", message="Recommended: pip install sacremoses")
            tokenizer = loader.from_pretrained(folder, local_files_only=True, **options)
        mend_subword_nmt_decoder(getattr(tokenizer, "backend_tokenizer", None))  # a sentencepiece one has none
        return tokenizer
    except Exception as error:  # tokenizers and sentencepiece raise plain Exceptions for files they cannot parse
        raise ModelFolderError(f"{path} cannot be loaded ({type(error).__name__}: {error}): save it again") from error


def _tokenizer_config(folder: Path) -> dict:
    """`folder`'s tokenizer_config.json ({} without the file)."""
    path = folder / "tokenizer_config.json"
    return read_json_object(path, fix="save the tokenizer again") if path.is_file() else {}


def check_tokenizer_fits(tokenizer, config, *, where: str, exact: bool = False) -> None:
    """The tokenizer's vocabulary must fit in the model's (`exact`: be the same size) and its special-token ids must
    be the model's (PAD, EOS, BOS and the decoder's start token, which is BOS); a `ModelFolderError` otherwise."""
    problems = []
    size, vocab_size = len(tokenizer), config.vocab_size
    if size > vocab_size or (exact and size != vocab_size):
        problems.append(f"the tokenizer has {size} tokens but the model's vocab_size is {vocab_size}")
    pairs = [("pad_token_id", "pad_token_id"), ("eos_token_id", "eos_token_id"), ("bos_token_id", "bos_token_id"),
             ("bos_token_id", "decoder_start_token_id")]  # fmt: skip
    for token, model_id in pairs:
        a, b = getattr(tokenizer, token, None), getattr(config, model_id, None)
        if a is not None and b is not None and a != b:
            problems.append(f"tokenizer {token}={a} but config {model_id}={b}")
    if problems:
        raise ModelFolderError(
            f"the tokenizer does not fit the model ({where}): {'; '.join(problems)}. Use the tokenizer the model was "
            "trained with (train.py saves it in the model folder)"
        )


def check_model_files(
    folder: str | Path,
    *,
    trust_remote_code: bool = False,
    need_tokenizer: bool = True,
    need_weights: bool = True,
    config=None,
    model_types: tuple[str, ...] = SEQ2SEQ,
):
    """Every check of `load_model_folder` without loading the weights (their headers are read): config.json, the
    weights against it (if `need_weights`), the tokenizer against it (if `need_tokenizer`, or if the folder has
    one). Returns (config, tokenizer or None)."""
    folder = check_model_folder(folder, need_tokenizer=need_tokenizer, need_weights=need_weights)
    if config is None:
        config = load_config(folder, trust_remote_code=trust_remote_code, model_types=model_types)
    if need_weights:
        check_weights_fit(folder, config, trust_remote_code=trust_remote_code)
    tokenizer = None
    if need_tokenizer or has_tokenizer(folder):
        tokenizer = load_tokenizer(folder, trust_remote_code=trust_remote_code)
        check_tokenizer_fits(tokenizer, config, where=str(folder))
    return config, tokenizer


def load_model_folder(
    folder: str | Path,
    *,
    trust_remote_code: bool = False,
    need_tokenizer: bool = True,
    config=None,
    model_types: tuple[str, ...] = SEQ2SEQ,
    **model_kwargs,
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase | None]:
    """The model (and tokenizer) of a local folder, checked as the module docstring says. `config` replaces the
    folder's config (e.g. with train.py's overrides); `model_types`: the Vaswani families accepted (`load_config`;
    a one-stack folder loads as the class its config names, `model_class`); `model_kwargs` go to `from_pretrained`
    (e.g. `encoder_layers_to_keep`). The tokenizer is None when the folder has none and `need_tokenizer` is
    False."""
    from transformers import AutoModelForSeq2SeqLM

    config, tokenizer = check_model_files(
        folder, trust_remote_code=trust_remote_code, need_tokenizer=need_tokenizer, config=config,
        model_types=model_types,
    )  # fmt: skip
    loader = model_class(Path(folder), config)
    if loader is None:  # the encoder-decoder, or foreign code (trust_remote_code)
        loader, model_kwargs = AutoModelForSeq2SeqLM, {"trust_remote_code": trust_remote_code, **model_kwargs}
    try:  # safetensors only: transformers never falls back to a pickled pytorch_model.bin
        model, info = loader.from_pretrained(
            folder, config=config, local_files_only=True, output_loading_info=True, use_safetensors=True,
            **model_kwargs,
        )  # fmt: skip
    except (OSError, ValueError, RuntimeError, TypeError, KeyError, pickle.UnpicklingError) as error:
        raise ModelFolderError(f"cannot load the model in {folder}: {error}") from error
    bad = {key: info.get(key) for key in ("missing_keys", "mismatched_keys", "error_msgs") if info.get(key)}
    if bad:
        raise ModelFolderError(f"the weights in {folder} do not fit its config.json: {bad}; save the model again")
    return model, tokenizer


# ----------------------------------------------------------------------------------------------------------------
# Writing
# ----------------------------------------------------------------------------------------------------------------
def _staging(output_dir: Path) -> Path:
    return output_dir.parent / f"{TMP_PREFIX}{output_dir.name}-new"


def _aside(output_dir: Path) -> Path:
    return output_dir.parent / f"{TMP_PREFIX}{output_dir.name}-old"


def check_output_folder(
    output_dir: str | Path,
    *,
    replace: bool,
    option: str = "--output_dir",
    overwrite_option: str | None = "--overwrite_output_dir",
) -> Path:
    """`output_dir` as a real path (a symlink is followed) if a model may be written there: a new or empty folder,
    or any folder when `replace` (its model files are replaced, everything else kept). Otherwise a
    `ModelFolderError` naming the folder and the fix."""
    output_dir = Path(output_dir)
    if output_dir.is_symlink():
        output_dir = output_dir.resolve()
    if output_dir.exists() and not output_dir.is_dir():
        raise ModelFolderError(f"{option} {output_dir} is a file: give a folder")
    if not replace and output_dir.is_dir() and any(output_dir.iterdir()):
        kind = "another model" if (output_dir / CONFIG_FILE).exists() else "files"
        fix = (
            f", or pass {overwrite_option} to replace its model files (config, weights, tokenizer, card; other files "
            "are kept)"
            if overwrite_option
            else ""
        )
        raise ModelFolderError(f"{option} {output_dir} already holds {kind}: choose a new or empty folder{fix}")
    return output_dir


def check_tokenizer_output_folder(output: str | Path, *, option: str = "--output_dir") -> Path:
    """`output` as a real path if a tokenizer may be written there: a new or empty folder, or one holding nothing but
    tokenizer files (`is_tokenizer_file`), which the new tokenizer replaces. A model folder (weights, config) or a
    folder of the user's files is a `ModelFolderError`, raised before anything is written."""
    output = check_output_folder(output, replace=True, option=option, overwrite_option=None)
    others = (
        sorted(entry.name for entry in output.iterdir() if not is_tokenizer_file(entry)) if output.is_dir() else []
    )
    if others:
        raise ModelFolderError(
            f"{option} {output} already holds files other than a tokenizer ({_some(others)}): choose a new or empty "
            "folder (only a folder holding nothing but tokenizer files is replaced)"
        )
    return output


def write_model_folder(output_dir: str | Path, write: Callable[[Path], None], *, replace: bool = False,
                       replaces: Callable[[str], bool] | None = None) -> Path:  # fmt: skip
    """Write a model folder with `write(folder)` so that a kill leaves the previous content or the new one.

    `replace`: `output_dir` may already hold files (see `check_output_folder`). Files the new save writes replace
    their namesakes, and old files of a kind it writes but not under the same name go (`_superseded`: the weights
    of an earlier sharded save, another kind of tokenizer's files), as do the files `replaces(name)` names (e.g.
    `is_source_record`: the replaced model's training record); every other file and folder of `output_dir` is kept
    (moved into the new folder). Returns the folder written."""
    output_dir = check_output_folder(output_dir, replace=replace)
    recover_model_folder(output_dir)
    staging = _staging(output_dir)
    output_dir.parent.mkdir(parents=True, exist_ok=True)
    staging.mkdir()
    try:
        write(staging)
        written = sorted(path.name for path in staging.iterdir())
        superseded = _superseded(output_dir, set(written), replaces)
        fsync_tree(staging)
        with open(staging / JOURNAL_FILE, "w", encoding="utf-8") as stream:  # the new folder is complete
            json.dump({"written": written, "superseded": superseded}, stream)
            stream.flush()
            os.fsync(stream.fileno())
        fsync_dir(staging)
    except BaseException as error:
        shutil.rmtree(staging, ignore_errors=True)
        if is_environment_failure(error):  # a full disk, a denied permission: the machine's, not a bug
            raise EnvironmentFailure("writing the model folder", output_dir, error) from error
        raise
    _swap_in(output_dir, staging)
    return output_dir


def recover_model_folder(output_dir: str | Path) -> None:
    """Finish or undo a `write_model_folder` that a kill interrupted: a complete staged folder is swapped in, an
    incomplete one removed, an old folder left aside after the swap deleted."""
    output_dir = Path(output_dir)
    staging, aside = _staging(output_dir), _aside(output_dir)
    if staging.is_dir():
        if (staging / JOURNAL_FILE).is_file():
            _swap_in(output_dir, staging)
        else:  # killed while writing: nothing of output_dir was moved yet
            shutil.rmtree(staging)
    if aside.is_dir():
        if output_dir.exists():
            shutil.rmtree(aside)
        else:
            os.replace(aside, output_dir)


def _swap_in(output_dir: Path, staging: Path) -> None:
    """Move the kept files of `output_dir` into the complete `staging`, then swap the two folders (rename old aside,
    rename new in, delete old). Every step can be repeated after a kill (`recover_model_folder`)."""
    journal = json.loads((staging / JOURNAL_FILE).read_text(encoding="utf-8"))
    written = set(journal["written"])
    # a journal written before the superseded files were recorded in it: the files of the kinds the save wrote
    superseded = set(journal["superseded"] if "superseded" in journal else _superseded(output_dir, written, None))
    aside = _aside(output_dir)
    if output_dir.is_dir() and not _can_be_renamed(output_dir):
        _replace_file_by_file(output_dir, staging, written, superseded)
        return
    if output_dir.is_dir():
        for entry in sorted(output_dir.iterdir()):
            if entry.name in written or entry.name == JOURNAL_FILE or entry.name in superseded:
                continue  # replaced by the new save, or an old file of the model it replaces that would contradict it
            os.replace(entry, staging / entry.name)
        fsync_dir(staging)
        if aside.exists():
            shutil.rmtree(aside)
        os.replace(output_dir, aside)
    os.replace(staging, output_dir)
    fsync_dir(output_dir.parent)
    if aside.exists():
        shutil.rmtree(aside)
    (output_dir / JOURNAL_FILE).unlink()
    fsync_dir(output_dir)


def _superseded(folder: Path, written: set[str], replaces: Callable[[str], bool] | None) -> list[str]:
    """The files of `folder` that a new save writing `written` replaces without writing them again: an old file of a
    kind the new save writes (weights: the shards of an earlier sharded save; tokenizer files: e.g. a MarianTokenizer's
    source.spm beside a new tokenizer.json, which would contradict it) and the files `replaces` names. A save that
    writes no weights (a tokenizer) supersedes no weights, one that writes no tokenizer no tokenizer files."""
    if not folder.is_dir():
        return []
    kinds = [kind for kind in (is_weight_file, _is_tokenizer_file_name) if any(map(kind, written))]
    return sorted(
        entry.name
        for entry in folder.iterdir()
        if entry.name not in written
        and (entry.is_file() or entry.is_symlink())
        and (any(kind(entry.name) for kind in kinds) or (replaces is not None and replaces(entry.name)))
    )


def _is_tokenizer_file_name(name: str) -> bool:
    return name in TOKENIZER_FILE_NAMES


def _can_be_renamed(folder: Path) -> bool:
    """A mount point (e.g. a container's volume) cannot be renamed, and renaming the current folder (or one above
    it) would leave this process in a deleted folder."""
    cwd = Path.cwd().resolve()
    folder = folder.resolve()
    return not os.path.ismount(folder) and folder != cwd and folder not in cwd.parents


def _replace_file_by_file(output_dir: Path, staging: Path, written: set[str], superseded: set[str]) -> None:
    """The fallback of `_swap_in` for a folder that cannot be renamed: each new file replaces its namesake (atomic
    per file), then the previous model files that the new save did not write are deleted. A kill halfway is rolled
    forward by `recover_model_folder` (the complete staged folder and its journal stay until the end)."""
    for name in sorted(written):
        if (staging / name).exists():
            os.replace(staging / name, output_dir / name)
    for entry in output_dir.iterdir():
        if entry.name in superseded and (entry.is_file() or entry.is_symlink()):
            entry.unlink()
    fsync_dir(output_dir)
    shutil.rmtree(staging)


__all__ = [
    "check_model_files",
    "check_model_folder",
    "check_output_folder",
    "check_safetensors_weights",
    "check_tokenizer_output_folder",
    "check_tokenizer_fits",
    "check_weights_fit",
    "has_tokenizer",
    "is_model_file",
    "is_source_record",
    "is_tokenizer_file",
    "is_weight_file",
    "load_config",
    "load_model_folder",
    "load_tokenizer",
    "read_json_object",
    "recover_model_folder",
    "write_model_folder",
]
