"""Every file and folder name of a model folder, a run folder and a checkpoint, and the model types of our families,
defined once (sockeye's constants.py).

Modules import the names from here; a literal "config.json", "README.md" or "vaswani-decoder" elsewhere in `vaswani/`
is a bug (tests/test_layout.py finds one).
"""

from __future__ import annotations

import re

# ---------------------------------------------------------------------------------------------------------------------
# A model folder (what `save_pretrained` writes, plus the tokenizer and the card)
# ---------------------------------------------------------------------------------------------------------------------
CONFIG_FILE = "config.json"
GENERATION_CONFIG_FILE = "generation_config.json"
TOKENIZER_FILE = "tokenizer.json"
MODEL_CARD_FILE = "README.md"
SAFE_WEIGHTS_NAME = "model.safetensors"
SAFE_WEIGHTS_INDEX_NAME = "model.safetensors.index.json"
PICKLED_WEIGHTS_NAME = "pytorch_model.bin"
# The weights of a save_pretrained folder: one safetensors file, or shards with an index (or the legacy .bin).
WEIGHT_FILES = (
    SAFE_WEIGHTS_NAME,
    SAFE_WEIGHTS_INDEX_NAME,
    PICKLED_WEIGHTS_NAME,
    f"{PICKLED_WEIGHTS_NAME}.index.json",
)
WEIGHT_SHARD = re.compile(r"(model|pytorch_model)-\d{5}-of-\d{5}\.(safetensors|bin)")
SAFE_WEIGHT_SHARD = re.compile(r"model-\d{5}-of-\d{5}\.safetensors")
# Weights stored as pickles (torch.save): never loaded, because unpickling a file can run the code it names.
PICKLED_WEIGHT_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt")
# What our saves write besides weights and code: save_pretrained of the model and of a fast tokenizer, and the card.
SAVED_FILES = {
    CONFIG_FILE, GENERATION_CONFIG_FILE, MODEL_CARD_FILE, TOKENIZER_FILE, "tokenizer_config.json",
    "special_tokens_map.json", "added_tokens.json", "chat_template.jinja",
}  # fmt: skip
# The tokenizer of a model folder is a fast tokenizer (tokenizer.json: what vaswani trains), or transformers'
# MarianTokenizer, which `vaswani convert --from marian` brings along with an OPUS-MT model: two sentencepiece models
# (source and target language) and one vocabulary, read as data (protobuf and JSON).
MARIAN_TOKENIZER_FILES = ("tokenizer_config.json", "source.spm", "target.spm", "vocab.json")
MARIAN_TOKENIZER_CLASS = "MarianTokenizer"
# The files a tokenizer save may write (`vaswani.model_folder.is_tokenizer_file`): a model's `save_pretrained` does not
# write them, so that averaging and pruning copy them over.
TOKENIZER_FILE_PATTERNS = (
    TOKENIZER_FILE,
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "chat_template.jinja",
    "vocab.json",
    "vocab.txt",
    "merges.txt",
    "*.model",  # sentencepiece
    "*.spm",
)
# The files of the tokenizers a model folder carries (a fast tokenizer's save, a MarianTokenizer's), by exact name: a save
# that writes some of them replaces the others of an earlier tokenizer (`vaswani.model_folder.write_model_folder`),
# while a file that only looks like a tokenizer's (a user's `lid.model`) is kept.
TOKENIZER_FILE_NAMES = frozenset(
    {*(pattern for pattern in TOKENIZER_FILE_PATTERNS if "*" not in pattern), *MARIAN_TOKENIZER_FILES}
)

# ---------------------------------------------------------------------------------------------------------------------
# Our model families: their model types, the modeling files they carry, the Auto class they load with
# ---------------------------------------------------------------------------------------------------------------------
# The model types (config.json's "model_type") of our three families: the `model_type` of VaswaniConfig,
# VaswaniDecoderConfig and VaswaniEncoderConfig (modeling_vaswani imports nothing of this package, so it spells them
# itself; tests/test_layout.py checks they agree).
SEQ2SEQ_MODEL_TYPE = "vaswani"
DECODER_MODEL_TYPE = "vaswani-decoder"
ENCODER_MODEL_TYPE = "vaswani-encoder"
# What each family is; most commands take the encoder-decoder only (`SEQ2SEQ`).
VASWANI_MODEL_TYPES = {
    SEQ2SEQ_MODEL_TYPE: "encoder-decoder (translation) model",
    DECODER_MODEL_TYPE: "decoder-only language model",
    ENCODER_MODEL_TYPE: "encoder-only model",
}
SEQ2SEQ = (SEQ2SEQ_MODEL_TYPE,)
# The modules whose files `save_pretrained` copies for trust_remote_code, per family: the config, the model and (for
# translation) the pipeline of config.json's auto_map and custom_pipelines.
CODE_MODULES = {
    SEQ2SEQ_MODEL_TYPE: ("configuration_vaswani", "modeling_vaswani", "pipeline_vaswani"),
    DECODER_MODEL_TYPE: ("configuration_vaswani_lm", "modeling_vaswani_lm"),
    ENCODER_MODEL_TYPE: ("configuration_vaswani_lm", "modeling_vaswani_lm"),
}
# The Auto class whose auto_map entry a folder of each family needs to load with trust_remote_code=True
AUTO_CLASS = {
    SEQ2SEQ_MODEL_TYPE: "AutoModelForSeq2SeqLM",
    DECODER_MODEL_TYPE: "AutoModelForCausalLM",
    ENCODER_MODEL_TYPE: "AutoModel",
}

# ---------------------------------------------------------------------------------------------------------------------
# Crash-safe writes and checkpoints
# ---------------------------------------------------------------------------------------------------------------------
TMP_PREFIX = ".tmp-"  # everything a save or a deletion leaves behind when it is interrupted starts with this
JOURNAL_FILE = f"{TMP_PREFIX}model-folder.json"  # inside a staged model folder: the names the new save wrote
MARKER_NAME = "checkpoint.json"  # written last, inside the folder, before the rename that publishes it
REPLACED_PREFIX = f"{TMP_PREFIX}replaced-"  # a checkpoint moved aside while a new save of its step replaces it
DELETED_PREFIX = f"{TMP_PREFIX}deleted-"  # a checkpoint beyond keep_last, moved aside before its files are deleted
STEP_DIR = re.compile(r"step-(\d+)")
ABANDONED_PREFIX = "abandoned-"  # later checkpoints set aside when a run resumes from an older one
TRAINING_STATE_FILE = "training_state.safetensors"  # optimizer, LR schedule, LayerDrop, DropHead, progress
RNG_FILE = "rng_state_{rank}.safetensors"  # each process's random number generators
PROGRESS_FILE = "trainer_state.json"  # the progress again, for people (not read back)
STOPPING_STATE_FILE = "stopping_state.json"  # early stopping, time budget and averaging window of a checkpoint

# ---------------------------------------------------------------------------------------------------------------------
# A run folder of `vaswani train` (a model folder once the run has finished)
# ---------------------------------------------------------------------------------------------------------------------
RUN_ARGS_FILE = "run_args.json"  # the run's options (pushed to the Hub with local paths reduced to file names)
RESULTS_FILE = "results.json"  # the final model's scores and how it was chosen
EVALUATION_FORMAT = "vaswani-evaluation"  # the "format" of `vaswani evaluate --output` (read by `vaswani card`)
METRICS_FILE = "metrics.jsonl"  # one JSON object per logged row: MetricsLog writes it, a resume cuts it back
CHECKPOINTS_SUBDIR = "checkpoints"  # RUN_DIR/checkpoints/step-N
BEST_DIR = "best_checkpoint"  # the best evaluated checkpoint, kept apart from the last K
LOGS_DIR = "logs"  # Accelerate's logging folder
TOKENIZER_STAGING = f"{TMP_PREFIX}tokenizer"  # a new run's tokenizer, until every check has passed

# ---------------------------------------------------------------------------------------------------------------------
# A CTranslate2 export
# ---------------------------------------------------------------------------------------------------------------------
EXPORT_INFO_FILE = "vaswani_ctranslate2.json"  # marks a folder as our export (and holds what decoding needs)
CT2_MODEL_FILE = "model.bin"
