"""`vaswani convert --from marian --model DIR --output_dir OUT`: a local `MarianMTModel` folder as a Vaswani folder.

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

import json
import pickle
import re
import warnings
from pathlib import Path

import torch

from modeling_vaswani import VaswaniConfig, VaswaniForConditionalGeneration
from modeling_vaswani.modeling_vaswani import VaswaniConcatenatedSinusoidalPositionalEmbedding
from vaswani.constants import (
    CONFIG_FILE,
    GENERATION_CONFIG_FILE,
    MARIAN_TOKENIZER_CLASS,
    MARIAN_TOKENIZER_FILES,
    MODEL_CARD_FILE,
    PICKLED_WEIGHTS_NAME,
    SAFE_WEIGHTS_INDEX_NAME,
    SAFE_WEIGHTS_NAME,
)
from vaswani.errors import CheckpointError, ConvertError
from vaswani.fileio import read_json_object
from vaswani.hub.model_card import write_model_card
from vaswani.model_folder import check_output_folder, check_tokenizer_fits, write_model_folder
from vaswani.weights import weight_files

# A Hub model id as Marian's config.json records it in `_name_or_path` ("Helsinki-NLP/opus-mt-en-de").
HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+")
# A stored position table further than this from Marian's sinusoids is not Marian's (ours are its exact numbers within
# the table, `VaswaniConcatenatedSinusoidalPositionalEmbedding`; an older save may hold a table rounded differently).
POSITION_TABLE_TOLERANCE = 1e-4


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
            raise ConvertError(str(error)) from error
        state: dict[str, torch.Tensor] = {}
        for file in files:
            try:
                state.update(load_file(file))
            except Exception as error:  # safetensors raises its own error type for damaged files
                raise ConvertError(f"{file} is damaged or not a safetensors file ({error})") from error
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
        ) from error
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
    fix = "give the folder of a MarianMTModel (config.json written by save_pretrained)"
    if not path.is_file():
        raise ConvertError(f"{folder} is not a model folder (no {CONFIG_FILE}): {fix}")
    values = read_json_object(path, fix=fix)
    if values.get("model_type") != "marian":
        raise ConvertError(
            f"{path}: model_type={values.get('model_type')!r}, but --from marian converts MarianMTModel folders "
            "(model_type 'marian')"
        )
    try:
        return MarianConfig.from_pretrained(folder, local_files_only=True)
    except (OSError, ValueError, TypeError) as error:
        raise ConvertError(f"{path} is not a valid Marian configuration: {error}") from error


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
        raise ConvertError(f"the Marian configuration cannot be represented: {error}") from error


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
        ) from error
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
    output = check_output_folder(output_dir, replace=False, option="--output_dir", overwrite_option=None)
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
        raise ConvertError(f"the weights in {folder} do not fit its config.json: {error}") from error
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
    if values.get("tokenizer_class") != MARIAN_TOKENIZER_CLASS:
        values["tokenizer_class"] = MARIAN_TOKENIZER_CLASS
        path.write_text(json.dumps(values, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


__all__ = [
    "ConvertError",
    "convert_marian",
    "load_pickled_tensors",
    "marian_vaswani_config",
    "marian_vaswani_state_dict",
    "read_weights",
]
