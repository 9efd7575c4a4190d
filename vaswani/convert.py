"""Start from a pretrained model: the engine of `vaswani convert --from marian --model DIR --output OUT` and
`vaswani convert --from fairseq --checkpoint model.pt --data_dir DICT_DIR --output OUT`.

    from vaswani.convert import convert_fairseq, convert_marian

    convert_marian("opus-mt-en-es", "opus-mt-en-es-vaswani")   # a local MarianMTModel folder -> a vaswani folder
    convert_fairseq("wmt16.en-de/model.pt", "wmt16.en-de", "en-de")   # a fairseq checkpoint + dict.LANG.txt

The fairseq half (after the Marian one below) maps fairseq's TransformerModel the same way; its differences from
the paper are `sinusoidal_layout="fairseq"` (fairseq's frequencies, positions from padding_idx + 1), learned tables
without their first padding_idx + 1 rows, and fairseq's dictionary ids; docs/pretrained.md has its table.

A `MarianMTModel` (the ~1,400 OPUS-MT models, transformers' `models/marian`) is the paper's PostNorm Transformer with
a few differences. Each is a `VaswaniConfig` option, so the converted model computes the same logits and `generate()`
returns the same tokens (the weights are copied, never changed):

| Marian (`MarianConfig`, weights)               | vaswani (`VaswaniConfig`, weights)                              |
|------------------------------------------------|-----------------------------------------------------------------|
| sinusoidal positions, sines then cosines       | `position_embedding_type="sinusoidal"`, `sinusoidal_layout="concatenated"` |
| `final_logits_bias` (added to the logits)      | `final_logits_bias=True`, `lm_head.bias` (when it is not all zeros) |
| `share_encoder_decoder_embeddings`             | `share_embeddings` (with `tie_word_embeddings`, as transformers ties them) |
| `tie_word_embeddings`, `scale_embedding`       | the same names                                                  |
| `activation_function` (OPUS-MT: `"swish"`)     | `activation_function`                                           |
| `decoder_start_token_id` (PAD), PAD, EOS, BOS  | the same ids                                                    |
| dropouts, LayerDrop, `init_std`, `max_position_embeddings` | the same names                                      |
| `self_attn.{q,k,v}_proj`                       | `self_attn.qkv_proj` (W^Q; W^K; W^V stacked)                    |
| `encoder_attn.q_proj`, `encoder_attn.{k,v}_proj` | `encoder_attn.q_proj`, `encoder_attn.kv_proj` (W^K; W^V)      |
| `self_attn_layer_norm`, `encoder_attn_layer_norm`, `final_layer_norm` | `self_attn_residual.norm`, `encoder_attn_residual.norm`, `ffn_residual.norm` |
| `fc1`, `fc2`                                   | `ffn.fc1`, `ffn.fc2`                                            |

What comes along: the generation config (OPUS-MT's `bad_words_ids=[[PAD]]`, `max_length`, `num_beams`, ...), the
`MarianTokenizer` (its two sentencepiece models and the joint vocabulary, which `AutoTokenizer`, `vaswani translate`
and `vaswani train --tokenizer` load), and a model card that says where the weights came from (`converted_from` in
config.json: the folder's name, the Hub id recorded in its config.json, the license of its README.md).

Read safely: weights from model.safetensors (or shards), or a pickled pytorch_model.bin loaded with
`torch.load(weights_only=True)`, which refuses anything but tensors and plain containers. What the converted model
cannot represent is refused with a `ConvertError` naming the field: a separate target vocabulary
(`decoder_vocab_size`, `separate_vocabs`), a model that is not a Marian encoder-decoder (`model_type`,
`is_encoder_decoder`), tensors that do not fit, a position table that is not Marian's sinusoids.

The output folder is new or empty and written atomically (`vaswani.model_folder.write_model_folder`).
"""

from __future__ import annotations

import argparse
import json
import pickle
import re
import warnings
from pathlib import Path

import torch

from modeling_vaswani import VaswaniConfig, VaswaniForConditionalGeneration
from modeling_vaswani.modeling_vaswani import VaswaniConcatenatedSinusoidalPositionalEmbedding
from vaswani.checkpoints import CheckpointError, weight_files
from vaswani.constants import (
    CONFIG_FILE,
    GENERATION_CONFIG_FILE,
    MARIAN_TOKENIZER_FILES,
    MODEL_CARD_FILE,
    PICKLED_WEIGHTS_NAME,
    SAFE_WEIGHTS_INDEX_NAME,
    SAFE_WEIGHTS_NAME,
)
from vaswani.errors import UserError
from vaswani.model_card import write_model_card
from vaswani.model_folder import check_output_folder, check_tokenizer_fits, read_json_object, write_model_folder

# A Hub model id as Marian's config.json records it in `_name_or_path` ("Helsinki-NLP/opus-mt-en-de").
HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+")
# A stored position table further than this from Marian's sinusoids is not Marian's (ours are its exact numbers within
# the table, `VaswaniConcatenatedSinusoidalPositionalEmbedding`; an older save may hold a table rounded differently).
POSITION_TABLE_TOLERANCE = 1e-4


class ConvertError(UserError):
    """A model folder that cannot be converted; the message names the file or field and why."""


# ----------------------------------------------------------------------------------------------------------------
# Reading the source folder
# ----------------------------------------------------------------------------------------------------------------
def read_weights(folder: Path) -> dict[str, torch.Tensor]:
    """The tensors of a save_pretrained folder: model.safetensors (or its shards), else pytorch_model.bin loaded with
    `torch.load(weights_only=True)`: a pickle holding anything but tensors is refused without running it."""
    from safetensors.torch import load_file

    if (folder / SAFE_WEIGHTS_NAME).is_file() or (folder / SAFE_WEIGHTS_INDEX_NAME).is_file():
        try:
            files = weight_files(folder)
        except CheckpointError as error:
            raise ConvertError(str(error)) from None
        state: dict[str, torch.Tensor] = {}
        for file in files:
            try:
                state.update(load_file(file))
            except Exception as error:  # safetensors raises its own error type for damaged files
                raise ConvertError(f"{file} is damaged or not a safetensors file ({error})") from None
        return state
    path = folder / PICKLED_WEIGHTS_NAME
    if not path.is_file():
        raise ConvertError(f"{folder} has no weights: expected {SAFE_WEIGHTS_NAME} or {PICKLED_WEIGHTS_NAME}")
    return load_pickled_tensors(path)


def load_pickled_tensors(path: Path) -> dict[str, torch.Tensor]:
    """A `torch.save`d dict of tensors, unpickled with `weights_only=True`: only tensors and plain containers are
    built, and a pickle naming any other object (code) is a `ConvertError` before that object is created."""
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except (pickle.UnpicklingError, RuntimeError, EOFError, AttributeError, ValueError) as error:
        reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise ConvertError(
            f"{path} was not loaded: it is not a pickle of tensors only ({reason}). Unpickling other objects can run "
            "code; where you trust the file, load the model with transformers and save it again with "
            "save_pretrained (model.safetensors)"
        ) from None
    if not isinstance(state, dict) or not all(
        isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in state.items()
    ):
        raise ConvertError(f"{path} does not hold a state dict (a dict of named tensors)")
    return state


def read_marian_config(folder: Path):
    """The `MarianConfig` of `folder`'s config.json (Marian's defaults for what it leaves out), checked to be an
    encoder-decoder Marian model."""
    from transformers import MarianConfig

    path = folder / CONFIG_FILE
    values = read_json_object(path, fix="give the folder of a MarianMTModel (config.json written by save_pretrained)")
    if values.get("model_type") != "marian":
        raise ConvertError(
            f"{path}: model_type={values.get('model_type')!r}, but --from marian converts MarianMTModel folders "
            "(model_type 'marian')"
        )
    try:
        return MarianConfig.from_pretrained(folder, local_files_only=True)
    except (OSError, ValueError, TypeError) as error:
        raise ConvertError(f"{path} is not a valid Marian configuration: {error}") from None


def read_license(folder: Path) -> str | None:
    """The `license` of the model card's metadata (README.md front matter), if the folder has one."""
    from huggingface_hub import metadata_load

    path = folder / MODEL_CARD_FILE
    if not path.is_file():
        return None
    try:
        value = (metadata_load(path) or {}).get("license")
    except (OSError, ValueError, UnicodeDecodeError):
        return None
    return value if isinstance(value, str) else None


# ----------------------------------------------------------------------------------------------------------------
# The mapping
# ----------------------------------------------------------------------------------------------------------------
def marian_vaswani_config(marian, *, final_logits_bias: bool, converted_from: dict | None = None) -> VaswaniConfig:
    """The `VaswaniConfig` computing what `MarianMTModel(marian)` computes (see the module docstring's table).
    `final_logits_bias`: whether the weights have a non-zero logits bias. A field that cannot be represented is a
    `ConvertError` naming it."""
    if not marian.is_encoder_decoder:
        raise ConvertError("is_encoder_decoder=False cannot be converted: vaswani models are encoder-decoders")
    if marian.decoder_vocab_size != marian.vocab_size:
        raise ConvertError(
            f"decoder_vocab_size={marian.decoder_vocab_size} differs from vocab_size={marian.vocab_size}: a separate "
            "target vocabulary cannot be represented (vaswani models have one vocabulary for both languages)"
        )
    values = {
        name: getattr(marian, name)
        for name in (
            "vocab_size", "d_model", "encoder_layers", "decoder_layers", "encoder_attention_heads",
            "decoder_attention_heads", "encoder_ffn_dim", "decoder_ffn_dim", "activation_function", "dropout",
            "attention_dropout", "activation_dropout", "encoder_layerdrop", "decoder_layerdrop", "init_std",
            "max_position_embeddings", "scale_embedding", "tie_word_embeddings", "pad_token_id", "eos_token_id",
            "bos_token_id", "decoder_start_token_id",
        )
    }  # fmt: skip
    try:
        return VaswaniConfig(
            **values,
            position_embedding_type="sinusoidal",
            sinusoidal_layout="concatenated",
            # transformers ties the stacks' embeddings to `shared` only together with the output projection: with
            # tie_word_embeddings=False, MarianMTModel's encoder, decoder and output matrices are three
            share_embeddings=bool(marian.share_encoder_decoder_embeddings and marian.tie_word_embeddings),
            final_logits_bias=final_logits_bias,
            norm_position="post",  # Marian: LayerNorm(x + Sublayer(x)), no norm after the stacks
            norm_type="layernorm",
            layer_norm_eps=1e-5,  # torch.nn.LayerNorm's default, which Marian uses
            converted_from=converted_from,
        )
    except ValueError as error:  # names the field and what is allowed
        raise ConvertError(f"the Marian configuration cannot be represented: {error}") from None


class SourceTensors:
    """The tensors of a checkpoint being converted, each to be used exactly once: `take` returns the first of the
    names present and marks it used, `skip` marks tensors that need no copy (tied duplicates, buffers), and
    `check_all_used` refuses what nobody took, so nothing of the source is silently dropped. `what` names the
    source in the errors."""

    def __init__(self, source: dict[str, torch.Tensor], what: str):
        self.source, self.what, self.used = source, what, set()

    def __contains__(self, name: str) -> bool:
        return name in self.source

    def take(self, *names: str) -> torch.Tensor:
        for name in names:
            if name in self.source:
                self.used.add(name)
                return self.source[name]
        raise ConvertError(f"the {self.what} have no tensor {' or '.join(names)}")

    def skip(self, *names: str) -> None:
        self.used.update(names)

    def attention(self, theirs: str, kind: str) -> torch.Tensor:
        """W^Q; W^K; W^V (or their biases) stacked, (3d, d) or (3d,): fairseq's and Marian's separate q/k/v
        projections, or fairseq < 0.9's `in_proj_*`, already stacked."""
        if f"{theirs}.in_proj_{kind}" in self.source:
            return self.take(f"{theirs}.in_proj_{kind}")
        return torch.cat([self.take(f"{theirs}.{p}_proj.{kind}") for p in ("q", "k", "v")])

    def check_all_used(self, why: str) -> None:
        unused = sorted(set(self.source) - self.used)
        if unused:
            shown = ", ".join(unused[:5]) + (f" and {len(unused) - 5} more" if len(unused) > 5 else "")
            raise ConvertError(f"the {self.what} hold tensors the conversion does not know: {shown} ({why})")


def map_layers(tensors: SourceTensors, state: dict, config: VaswaniConfig, prefix: str) -> None:
    """Both stacks' layers into `state`: fairseq's layer names, which Marian kept (`{prefix}{side}.layers.N`), onto
    ours (`model.{side}.layers.N`): attention projections fused (self-attention: W^Q; W^K; W^V, cross-attention:
    W^Q and W^K; W^V), the residual sublayers' norms (fairseq < 0.9's `layer_norms.N` too), the feed-forward."""
    d = config.d_model
    for side in ("encoder", "decoder"):
        for i in range(getattr(config, f"{side}_layers")):
            theirs, ours = f"{prefix}{side}.layers.{i}", f"model.{side}.layers.{i}"
            for kind in ("weight", "bias"):
                take = tensors.take
                state[f"{ours}.self_attn.qkv_proj.{kind}"] = tensors.attention(f"{theirs}.self_attn", kind)
                state[f"{ours}.self_attn.out_proj.{kind}"] = take(f"{theirs}.self_attn.out_proj.{kind}")
                state[f"{ours}.self_attn_residual.norm.{kind}"] = take(
                    f"{theirs}.self_attn_layer_norm.{kind}", f"{theirs}.layer_norms.0.{kind}"
                )
                state[f"{ours}.ffn.fc1.{kind}"] = take(f"{theirs}.fc1.{kind}")
                state[f"{ours}.ffn.fc2.{kind}"] = take(f"{theirs}.fc2.{kind}")
                state[f"{ours}.ffn_residual.norm.{kind}"] = take(
                    f"{theirs}.final_layer_norm.{kind}", f"{theirs}.layer_norms.1.{kind}"
                )
                if side == "decoder":
                    qkv = tensors.attention(f"{theirs}.encoder_attn", kind)
                    state[f"{ours}.encoder_attn.q_proj.{kind}"] = qkv[:d]
                    state[f"{ours}.encoder_attn.kv_proj.{kind}"] = qkv[d:]
                    state[f"{ours}.encoder_attn.out_proj.{kind}"] = take(f"{theirs}.encoder_attn.out_proj.{kind}")
                    state[f"{ours}.encoder_attn_residual.norm.{kind}"] = take(
                        f"{theirs}.encoder_attn_layer_norm.{kind}"
                    )


def marian_vaswani_state_dict(source: dict[str, torch.Tensor], config: VaswaniConfig) -> dict[str, torch.Tensor]:
    """Our parameter names and layouts from a `MarianMTModel` state dict: fused projections, residual-sublayer norms,
    embeddings resolved through Marian's tying (a save stores a tied matrix once). Every source tensor must be used
    (the position tables are checked, not copied); a missing one is a `ConvertError` naming it."""
    tensors = SourceTensors(dict(source), "Marian weights")
    take = tensors.take
    shared = ("model.shared.weight", "model.encoder.embed_tokens.weight", "model.decoder.embed_tokens.weight")
    state: dict[str, torch.Tensor] = {}
    if config.share_embeddings:
        state["model.shared.weight"] = embedding = take(*shared)
        encoder_embedding = decoder_embedding = embedding
        tensors.skip(*shared)  # the same matrix, stored again by an older save
    else:  # (an older save of shared embeddings may store only `shared`)
        encoder_embedding = take("model.encoder.embed_tokens.weight", "model.shared.weight")
        decoder_embedding = take("model.decoder.embed_tokens.weight", "model.shared.weight")
        tensors.skip("model.shared.weight")  # unused by MarianMTModel when the stacks have their own matrices
    state["model.encoder.embed_tokens.weight"] = encoder_embedding
    state["model.decoder.embed_tokens.weight"] = decoder_embedding
    if config.tie_word_embeddings:
        state["lm_head.weight"] = decoder_embedding
        tensors.skip("lm_head.weight")  # a tied copy, if the file has one
    else:
        state["lm_head.weight"] = take("lm_head.weight")
    if config.final_logits_bias:
        state["lm_head.bias"] = take("final_logits_bias").reshape(-1)
    tensors.skip("final_logits_bias")  # all zeros when the model has no bias: nothing to add

    for side in ("encoder", "decoder"):
        check_position_table(tensors.source, f"model.{side}.embed_positions.weight", config)
        tensors.skip(f"model.{side}.embed_positions.weight")
    map_layers(tensors, state, config, prefix="model.")
    tensors.check_all_used("more layers than config.json says, or not a MarianMTModel")
    return state


def check_position_table(source: dict[str, torch.Tensor], name: str, config: VaswaniConfig) -> None:
    """A position table stored with the weights (older saves keep it) must be Marian's sinusoids, which the
    converted model computes; anything else (a trained table) is a `ConvertError`."""
    table = source.get(name)
    if table is None:
        return
    sinusoids = VaswaniConcatenatedSinusoidalPositionalEmbedding(table.shape[0], config.d_model)(table.shape[0])
    if table.shape != sinusoids.shape or not torch.allclose(table.float(), sinusoids, atol=POSITION_TABLE_TOLERANCE):
        raise ConvertError(
            f"{name} is not Marian's sinusoidal position table (a trained table?): it cannot be represented"
        )


def final_logits_bias_of(source: dict[str, torch.Tensor]) -> bool:
    """Whether the Marian weights have a logits bias that changes anything (OPUS-MT's is its output-layer bias)."""
    bias = source.get("final_logits_bias")
    return bias is not None and bool(bias.any())


# ----------------------------------------------------------------------------------------------------------------
# The conversion
# ----------------------------------------------------------------------------------------------------------------
def load_marian_tokenizer(folder: Path):
    """The folder's `MarianTokenizer` (source.spm, target.spm, vocab.json), with one vocabulary for both sides."""
    from transformers import MarianTokenizer

    missing = [name for name in MARIAN_TOKENIZER_FILES[1:] if not (folder / name).is_file()]
    if missing:
        raise ConvertError(
            f"{folder} has no MarianTokenizer (missing {', '.join(missing)}): give the whole OPUS-MT folder, "
            "tokenizer included"
        )
    try:
        with warnings.catch_warnings():  # the punctuation normalizer is never used to encode
            warnings.filterwarnings("ignore", message="Recommended: pip install sacremoses")
            tokenizer = MarianTokenizer.from_pretrained(folder, local_files_only=True)
    except Exception as error:  # sentencepiece raises plain errors for damaged models
        raise ConvertError(
            f"the MarianTokenizer in {folder} cannot be loaded ({type(error).__name__}: {error})"
        ) from None
    if tokenizer.separate_vocabs:
        raise ConvertError(
            f"{folder / 'tokenizer_config.json'}: separate_vocabs=True (target_vocab.json) cannot be represented: "
            "vaswani models have one vocabulary for both languages"
        )
    return tokenizer


def provenance(folder: Path) -> dict:
    """`converted_from`: the source folder's name (never the local path above it), the Hub id its config.json
    records, and the license of its model card."""
    recorded = read_json_object(folder / CONFIG_FILE).get("_name_or_path")
    model_id = recorded if isinstance(recorded, str) and HUB_ID.fullmatch(recorded) else None
    return {"format": "marian", "source": folder.resolve().name, "model_id": model_id, "license": read_license(folder)}


def convert_marian(model_dir: str | Path, output_dir: str | Path) -> Path:
    """Convert the local MarianMTModel folder `model_dir` into a vaswani model folder `output_dir` (new or empty),
    written atomically: weights, config, generation config, tokenizer and model card. Returns the folder."""
    from transformers import GenerationConfig

    folder = Path(model_dir)
    if not folder.is_dir():
        raise ConvertError(f"no such model folder: {folder} (models are read from local folders only)")
    output = check_output_folder(output_dir, replace=False, option="--output", overwrite_option=None)
    if output.exists() and output.resolve() == folder.resolve():
        raise ConvertError("--output must be a new folder, not the Marian model folder itself")

    marian = read_marian_config(folder)
    tokenizer = load_marian_tokenizer(folder)
    source = read_weights(folder)
    config = marian_vaswani_config(
        marian, final_logits_bias=final_logits_bias_of(source), converted_from=provenance(folder)
    )
    state = marian_vaswani_state_dict(source, config)
    check_tokenizer_fits(tokenizer, config, where=str(folder))

    model = VaswaniForConditionalGeneration(config).eval()
    try:
        model.load_state_dict(state, strict=True)
    except RuntimeError as error:  # shapes that contradict config.json
        raise ConvertError(f"the weights in {folder} do not fit its config.json: {error}") from None
    # Marian's decoding settings come along (OPUS-MT: never PAD, max_length 512, its beam size), from
    # generation_config.json or, in older folders, from config.json (as MarianMTModel.from_pretrained reads them).
    if (folder / GENERATION_CONFIG_FILE).is_file():
        model.generation_config = GenerationConfig.from_pretrained(folder, local_files_only=True)
    else:
        model.generation_config = GenerationConfig.from_model_config(read_json_object(folder / CONFIG_FILE))

    def write(staging: Path) -> None:
        model.save_pretrained(staging)
        tokenizer.save_pretrained(staging)
        _name_tokenizer_class(staging / "tokenizer_config.json")
        write_model_card(staging, repo_id=output.name)

    return write_model_folder(output, write)


def _name_tokenizer_class(path: Path) -> None:
    """`AutoTokenizer` picks the class named in tokenizer_config.json (config.json says "vaswani", not "marian")."""
    values = json.loads(path.read_text(encoding="utf-8"))
    if values.get("tokenizer_class") != "MarianTokenizer":
        values["tokenizer_class"] = "MarianTokenizer"
        path.write_text(json.dumps(values, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


# ================================================================================================================
# fairseq: `vaswani convert --from fairseq --checkpoint model.pt --data_dir DICT_DIR --output OUT`
# ================================================================================================================
# The architectures converted: fairseq's `TransformerModel` with the defaults of these names (`base_architecture`,
# `transformer_wmt_en_de`, `transformer_vaswani_wmt_en_de_big`); the checkpoint's args/cfg override them.
FAIRSEQ_ARCHITECTURES = {
    "transformer": {},
    "transformer_wmt_en_de": {},
    "transformer_vaswani_wmt_en_de_big": {
        "encoder_embed_dim": 1024, "encoder_ffn_embed_dim": 4096, "encoder_attention_heads": 16,
        "decoder_embed_dim": 1024, "decoder_ffn_embed_dim": 4096, "decoder_attention_heads": 16, "dropout": 0.3,
    },
}  # fmt: skip
FAIRSEQ_DEFAULTS = {  # fairseq's `base_architecture`
    "encoder_embed_dim": 512, "encoder_ffn_embed_dim": 2048, "encoder_layers": 6, "encoder_attention_heads": 8,
    "decoder_embed_dim": 512, "decoder_ffn_embed_dim": 2048, "decoder_layers": 6, "decoder_attention_heads": 8,
    "encoder_normalize_before": False, "decoder_normalize_before": False, "encoder_learned_pos": False,
    "decoder_learned_pos": False, "share_all_embeddings": False, "share_decoder_input_output_embed": False,
    "no_scale_embedding": False, "activation_fn": "relu", "dropout": 0.1, "attention_dropout": 0.0,
    "activation_dropout": 0.0, "encoder_layerdrop": 0.0, "decoder_layerdrop": 0.0, "max_source_positions": 1024,
    "max_target_positions": 1024, "no_decoder_final_norm": False,
}  # fmt: skip
# fairseq options that change the computation in ways a vaswani model does not represent: refused when set
FAIRSEQ_UNSUPPORTED = (
    "layernorm_embedding", "no_token_positional_embeddings", "adaptive_softmax_cutoff", "cross_self_attention",
    "adaptive_input", "tie_adaptive_weights", "quant_noise_pq", "offload_activations",
)  # fmt: skip
FAIRSEQ_ACTIVATIONS = {"relu": "relu", "gelu": "gelu"}  # fairseq's gelu is the exact (erf) one
# fairseq's `Dictionary`: these four first, then the lines of dict.LANG.txt
FAIRSEQ_SPECIAL_TOKENS = ["<s>", "<pad>", "</s>", "<unk>"]
FAIRSEQ_BOS, FAIRSEQ_PAD, FAIRSEQ_EOS, FAIRSEQ_UNK = 0, 1, 2, 3
# what a fairseq checkpoint needs beyond tensors and plain containers: its `args` (fairseq < 0.10)
FAIRSEQ_SAFE_GLOBALS = [argparse.Namespace]
OMEGACONF_FIX = (
    "where you trust the file, turn its cfg into a plain dict with fairseq's Python: "
    "c = torch.load(path, weights_only=False); c['cfg'] = omegaconf.OmegaConf.to_container(c['cfg'], resolve=True); "
    "torch.save({'model': c['model'], 'cfg': c['cfg']}, 'plain.pt')"
)


def load_fairseq_checkpoint(path: Path) -> dict:
    """A fairseq checkpoint read with `torch.load(weights_only=True)`, allowing `argparse.Namespace` (the `args` of
    older checkpoints) and nothing else: a pickle naming any other object (omegaconf's DictConfig, a training meter,
    code) is a `ConvertError` before that object is created."""
    if not path.is_file():
        raise ConvertError(f"no such checkpoint file: {path}")
    try:
        with torch.serialization.safe_globals(FAIRSEQ_SAFE_GLOBALS):
            checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    except (pickle.UnpicklingError, RuntimeError, EOFError, AttributeError, ValueError, TypeError) as error:
        text = str(error).strip()
        reason = text.splitlines()[0] if text else type(error).__name__
        if "omegaconf" in text:
            raise ConvertError(
                f"{path} was not loaded: its cfg is an omegaconf DictConfig, which cannot be read without unpickling "
                f"omegaconf's objects (that can run code); {OMEGACONF_FIX}"
            ) from None
        raise ConvertError(
            f"{path} was not loaded: it holds objects other than tensors, plain containers and argparse.Namespace "
            f"({reason}). Unpickling other objects can run code; where you trust the file, keep only its 'model' "
            "and 'args' (or a plain-dict 'cfg') and save it again with torch.save"
        ) from None
    if not isinstance(checkpoint, dict) or not isinstance(checkpoint.get("model"), dict):
        raise ConvertError(f"{path} is not a fairseq checkpoint: expected a dict with the state dict under 'model'")
    model = checkpoint["model"]
    if not all(isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in model.items()):
        raise ConvertError(f"{path}: 'model' is not a state dict (a dict of named tensors)")
    return checkpoint


def fairseq_model_args(checkpoint: dict, path: Path) -> dict:
    """The model's hyperparameters: `args` (an argparse.Namespace, fairseq < 0.10) or `cfg["model"]` (a plain dict
    or Namespace), over the defaults of its architecture. An architecture not converted is a `ConvertError`."""
    args, task = checkpoint.get("args"), {}
    if args is None and isinstance(checkpoint.get("cfg"), dict):
        args = checkpoint["cfg"].get("model")
        task = checkpoint["cfg"].get("task")  # where fairseq >= 0.10 keeps source_lang and target_lang
        task = vars(task) if isinstance(task, argparse.Namespace) else task if isinstance(task, dict) else {}
    if isinstance(args, argparse.Namespace):
        args = vars(args)
    if not isinstance(args, dict):
        raise ConvertError(
            f"{path} records no model configuration: expected 'args' (argparse.Namespace) or 'cfg' with a 'model' "
            "entry (a dict)"
        )
    arch = args.get("arch", args.get("_name"))
    if arch not in FAIRSEQ_ARCHITECTURES:
        raise ConvertError(
            f"{path}: arch={arch!r} cannot be converted; allowed: {', '.join(FAIRSEQ_ARCHITECTURES)} (fairseq's "
            "TransformerModel)"
        )
    values = {**FAIRSEQ_DEFAULTS, **FAIRSEQ_ARCHITECTURES[arch]}
    values.update({k: v for k, v in task.items() if k in ("source_lang", "target_lang") and v is not None})
    values.update({k: v for k, v in args.items() if v is not None})
    if "relu_dropout" in args and "activation_dropout" not in args:  # fairseq < 0.7's name
        values["activation_dropout"] = args["relu_dropout"]
    values["arch"] = arch
    return values


def fairseq_vaswani_config(args: dict, vocab_size: int, converted_from: dict | None = None) -> VaswaniConfig:
    """The `VaswaniConfig` computing what fairseq's TransformerModel with `args` computes. A field that cannot be
    represented is a `ConvertError` naming it."""
    for name in FAIRSEQ_UNSUPPORTED:
        if args.get(name) not in (None, False, 0, 0.0, "", "None"):
            raise ConvertError(f"{name}={args[name]!r} cannot be represented (vaswani models have no such option)")
    d_model = args["encoder_embed_dim"]
    for name in ("decoder_embed_dim", "decoder_input_dim", "decoder_output_dim"):
        if args.get(name, d_model) != d_model:
            raise ConvertError(
                f"{name}={args[name]} differs from encoder_embed_dim={d_model}: vaswani models have one width"
            )
    for encoder_name, decoder_name in (
        ("encoder_normalize_before", "decoder_normalize_before"),
        ("encoder_learned_pos", "decoder_learned_pos"),
    ):
        if bool(args[encoder_name]) != bool(args[decoder_name]):
            raise ConvertError(
                f"{encoder_name}={args[encoder_name]} but {decoder_name}={args[decoder_name]}: vaswani models use the "
                "same setting in both stacks"
            )
    pre_norm = bool(args["encoder_normalize_before"])
    if pre_norm and args["no_decoder_final_norm"]:
        raise ConvertError("no_decoder_final_norm=True cannot be represented: PreNorm stacks end with a norm")
    learned = bool(args["encoder_learned_pos"])
    if learned and args["max_source_positions"] != args["max_target_positions"]:
        raise ConvertError(
            f"max_source_positions={args['max_source_positions']} but max_target_positions="
            f"{args['max_target_positions']}: with learned positions vaswani models have one table length"
        )
    activation = FAIRSEQ_ACTIVATIONS.get(args["activation_fn"])
    if activation is None:
        raise ConvertError(
            f"activation_fn={args['activation_fn']!r} cannot be converted; allowed: {', '.join(FAIRSEQ_ACTIVATIONS)}"
        )
    share_all = bool(args["share_all_embeddings"])
    try:
        return VaswaniConfig(
            vocab_size=vocab_size,
            d_model=d_model,
            encoder_layers=args["encoder_layers"],
            decoder_layers=args["decoder_layers"],
            encoder_attention_heads=args["encoder_attention_heads"],
            decoder_attention_heads=args["decoder_attention_heads"],
            encoder_ffn_dim=args["encoder_ffn_embed_dim"],
            decoder_ffn_dim=args["decoder_ffn_embed_dim"],
            activation_function=activation,
            dropout=float(args["dropout"]),
            attention_dropout=float(args["attention_dropout"]),
            activation_dropout=float(args["activation_dropout"]),
            encoder_layerdrop=float(args["encoder_layerdrop"]),
            decoder_layerdrop=float(args["decoder_layerdrop"]),
            max_position_embeddings=max(args["max_source_positions"], args["max_target_positions"]),
            position_embedding_type="learned" if learned else "sinusoidal",
            sinusoidal_layout="interleaved" if learned else "fairseq",
            scale_embedding=not args["no_scale_embedding"],
            share_embeddings=share_all,
            tie_word_embeddings=share_all or bool(args["share_decoder_input_output_embed"]),
            norm_position="pre" if pre_norm else "post",
            norm_type="layernorm",
            layer_norm_eps=1e-5,  # fairseq's LayerNorm
            pad_token_id=FAIRSEQ_PAD,
            bos_token_id=FAIRSEQ_BOS,
            eos_token_id=FAIRSEQ_EOS,
            decoder_start_token_id=FAIRSEQ_EOS,  # fairseq starts decoding with </s>
            converted_from=converted_from,
        )
    except ValueError as error:
        raise ConvertError(f"the fairseq configuration cannot be represented: {error}") from None


def fairseq_vaswani_state_dict(source: dict[str, torch.Tensor], config: VaswaniConfig) -> dict[str, torch.Tensor]:
    """Our parameter names and layouts from a fairseq TransformerModel state dict: q/k/v stacked into our fused
    projections (or fairseq < 0.9's `in_proj_weight`, already stacked), learned position tables without fairseq's
    first padding_idx + 1 rows (positions start there), tied matrices resolved. Every tensor must be used; a missing
    one is a `ConvertError` naming it."""
    tensors = SourceTensors(source, "fairseq checkpoint's weights")
    take = tensors.take
    # fairseq's bookkeeping: version counters and the sinusoids' dummy buffer
    tensors.skip(*(name for name in source if name.endswith((".version", "embed_positions._float_tensor"))))
    state: dict[str, torch.Tensor] = {}
    encoder_embedding = take("encoder.embed_tokens.weight")
    decoder_embedding = take("decoder.embed_tokens.weight")
    if config.share_embeddings:
        if not torch.equal(encoder_embedding, decoder_embedding):
            raise ConvertError("share_all_embeddings=True but the encoder and decoder embeddings differ")
        state["model.shared.weight"] = encoder_embedding
    state["model.encoder.embed_tokens.weight"] = encoder_embedding
    state["model.decoder.embed_tokens.weight"] = decoder_embedding
    if config.tie_word_embeddings:
        tensors.skip("decoder.output_projection.weight")  # the tied matrix, stored again by fairseq >= 0.10
        state["lm_head.weight"] = decoder_embedding
    else:
        state["lm_head.weight"] = take("decoder.output_projection.weight", "decoder.embed_out")

    offset = config.pad_token_id + 1  # fairseq's first position
    for side in ("encoder", "decoder"):
        if config.position_embedding_type == "learned":
            table = take(f"{side}.embed_positions.weight")  # (max_positions + offset, d)
            state[f"model.{side}.embeddings.embed_positions.weight"] = table[offset:]
        if config.norm_position == "pre":
            for kind in ("weight", "bias"):
                state[f"model.{side}.layer_norm.{kind}"] = take(f"{side}.layer_norm.{kind}")
    map_layers(tensors, state, config, prefix="")
    tensors.check_all_used("more layers than its args say, or an option vaswani models do not have")
    return {name: tensor.contiguous() for name, tensor in state.items()}


def read_fairseq_dictionary(path: Path) -> list[str]:
    """The tokens of a fairseq dict.LANG.txt ("token count" per line) in id order, after fairseq's four special
    tokens. A line that is not "token count", or a repeated token, is a `ConvertError` naming the line."""
    if not path.is_file():
        raise ConvertError(f"no such dictionary file: {path}")
    tokens: list[str] = []
    seen = set(FAIRSEQ_SPECIAL_TOKENS)
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        parts = line.rstrip().rsplit(" ", 1)
        if len(parts) != 2 or not parts[1].isdigit() or not parts[0]:
            raise ConvertError(f"{path}, line {number}: expected 'token count', got {line!r}")
        if parts[0] in seen:
            raise ConvertError(f"{path}, line {number}: the token {parts[0]!r} is already in the dictionary")
        seen.add(parts[0])
        tokens.append(parts[0])
    return FAIRSEQ_SPECIAL_TOKENS + tokens


def fairseq_vocabulary(data_dir: Path, args: dict, rows: int) -> list[str]:
    """The one vocabulary of the model: dict.SRC.txt (and dict.TGT.txt, which must hold the same tokens: vaswani
    models have one vocabulary), padded like fairseq pads a dictionary to a multiple of 8 with madeupwordNNNN when
    the embedding has more rows (`rows`)."""
    if not data_dir.is_dir():
        raise ConvertError(f"no such folder: {data_dir} (--data_dir: the folder of fairseq's dict.LANG.txt files)")
    languages = [args.get("source_lang"), args.get("target_lang")]
    if all(isinstance(lang, str) for lang in languages):
        files = [data_dir / f"dict.{lang}.txt" for lang in languages]
    else:  # not recorded: the folder's dictionaries
        files = sorted(data_dir.glob("dict.*.txt"))
        if not files:
            raise ConvertError(f"{data_dir} has no dictionary (dict.LANG.txt)")
    vocabularies = [read_fairseq_dictionary(file) for file in files]
    for file, vocabulary in zip(files[1:], vocabularies[1:], strict=True):
        if vocabulary != vocabularies[0]:
            raise ConvertError(
                f"{file} differs from {files[0]}: separate source and target dictionaries cannot be represented "
                "(vaswani models have one vocabulary; fairseq's --joined-dictionary gives one)"
            )
    vocabulary = vocabularies[0]
    padding = rows - len(vocabulary)
    if 0 < padding < 8 and rows % 8 == 0:  # fairseq's `Dictionary.pad_to_multiple_(8)`
        vocabulary = vocabulary + [f"madeupword{i:04d}" for i in range(padding)]
    if len(vocabulary) != rows:
        raise ConvertError(
            f"{files[0]} gives {len(vocabulary)} tokens (with fairseq's 4 special ones) but the checkpoint's embedding "
            f"has {rows} rows: not the dictionary this model was trained with"
        )
    return vocabulary


def fairseq_tokenizer(vocabulary: list[str], model_max_length: int):
    """A fast tokenizer with fairseq's ids (`vocabulary` in id order) for text already segmented as fairseq reads
    it: pieces separated by spaces, each looked up whole (an unknown piece is <unk>), </s> appended as fairseq's
    `encode_line` appends it. Decoding joins the pieces and undoes the segmentation it can tell from the vocabulary:
    subword-nmt's "@@ " continuation marks are removed, sentencepiece's "▁" becomes a space; other pieces are joined
    by spaces."""
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers

    from tokenization.bpe import PortableTokenizerFast, _append_eos

    tokenizer = Tokenizer(models.WordLevel({token: i for i, token in enumerate(vocabulary)}, unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    if any(token.endswith("@@") for token in vocabulary):  # subword-nmt: "Hel@@ lo" -> "Hello"
        tokenizer.decoder = decoders.Sequence(
            [
                decoders.Replace(Regex("$"), " "),
                decoders.Replace("@@ ", ""),
                decoders.Fuse(),
                decoders.Strip(" ", 0, 1),
            ]
        )
    elif any(token.startswith("\u2581") for token in vocabulary):  # sentencepiece: "▁Hel lo" -> "Hello"
        tokenizer.decoder = decoders.Sequence(
            [decoders.Replace("\u2581", " "), decoders.Fuse(), decoders.Strip(" ", 1, 0)]
        )
    tokenizer.add_special_tokens(
        [AddedToken(token, special=True, normalized=False) for token in FAIRSEQ_SPECIAL_TOKENS]
    )
    tokenizer.post_processor = _append_eos(tokenizer)
    return PortableTokenizerFast(
        tokenizer_object=tokenizer,
        pad_token="<pad>",
        eos_token="</s>",
        unk_token="<unk>",
        # no bos_token: fairseq's decoder starts with </s>, and sources carry no <s>
        additional_special_tokens=["<s>"],
        model_max_length=model_max_length,
        clean_up_tokenization_spaces=False,
    )


def convert_fairseq(checkpoint_path: str | Path, data_dir: str | Path, output_dir: str | Path) -> Path:
    """Convert the fairseq Transformer checkpoint `checkpoint_path` with the dictionaries of `data_dir` into a vaswani
    model folder `output_dir` (new or empty), written atomically: weights, config, generation config, tokenizer
    (fairseq's ids, for segmented input) and model card. Returns the folder."""
    path = Path(checkpoint_path)
    output = check_output_folder(output_dir, replace=False, option="--output", overwrite_option=None)
    checkpoint = load_fairseq_checkpoint(path)
    args = fairseq_model_args(checkpoint, path)
    source = checkpoint["model"]
    embedding = source.get("encoder.embed_tokens.weight")
    if embedding is None:
        raise ConvertError(f"the fairseq checkpoint has no tensor encoder.embed_tokens.weight ({path})")
    vocabulary = fairseq_vocabulary(Path(data_dir), args, rows=embedding.shape[0])
    converted_from = {"format": "fairseq", "source": path.name, "model_id": None, "license": None}
    config = fairseq_vaswani_config(args, len(vocabulary), converted_from=converted_from)
    state = fairseq_vaswani_state_dict(source, config)
    tokenizer = fairseq_tokenizer(vocabulary, model_max_length=min(args["max_source_positions"], 1024))
    check_tokenizer_fits(tokenizer, config, where=str(data_dir), exact=True)

    model = VaswaniForConditionalGeneration(config).eval()
    try:
        model.load_state_dict(state, strict=True)
    except RuntimeError as error:  # shapes that contradict the checkpoint's args
        raise ConvertError(f"the weights in {path} do not fit its args: {error}") from None
    model.generation_config.bad_words_ids = [[FAIRSEQ_PAD]]  # fairseq's beam search never picks <pad>

    def write(staging: Path) -> None:
        model.save_pretrained(staging)
        tokenizer.save_pretrained(staging)
        write_model_card(staging, repo_id=output.name)

    return write_model_folder(output, write)


CONVERTERS = {"marian": convert_marian, "fairseq": convert_fairseq}

__all__ = [
    "CONVERTERS",
    "ConvertError",
    "convert_fairseq",
    "convert_marian",
    "load_pickled_tensors",
    "marian_vaswani_config",
    "marian_vaswani_state_dict",
    "read_weights",
]
