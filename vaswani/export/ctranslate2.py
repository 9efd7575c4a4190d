"""Export a trained model to CTranslate2: the engine of `vaswani export --format ctranslate2`.

    from vaswani.export.ctranslate2 import export_ctranslate2

    export_ctranslate2("runs/base-avg5", "runs/base-ct2", quantization="int8")

The model is described with CTranslate2's own specification API and written by a
`ctranslate2.converters.Converter` subclass, `VaswaniConverter`. What the folder holds decides the specification
(its config's `model_type`, resolved once in `VaswaniSpecBuilder._load`):

- "vaswani" (`VaswaniForConditionalGeneration`): `TransformerSpec` with a `TransformerEncoderSpec` and a
  `TransformerDecoderSpec`, run by `ctranslate2.Translator` (what `vaswani translate` runs);
- "vaswani-decoder" (`VaswaniForCausalLM`): `TransformerDecoderModelSpec`, a `TransformerDecoderSpec` without
  encoder attention, run by `ctranslate2.Generator` (`score_batch`: our log-probabilities; `generate_batch` with
  `sampling_topk=1`: our greedy tokens);
- "vaswani-encoder" (`VaswaniEncoderModel`, `VaswaniForMaskedLM`): `TransformerEncoderModelSpec` without a pooling
  layer, run by `ctranslate2.Encoder` (`forward_batch`: our last hidden states). The masked-LM head is not
  exported, and the export says so (`MASKED_LM_HEAD`, printed by `vaswani export`): CTranslate2's encoder returns
  hidden states only; the head is the projection onto the token embedding, which the export holds.

Every stack is filled by the same steps, so the options below hold for the three families alike. How each part of
the model maps (Sections refer to the paper):

- Layers (Section 3.1): each sublayer of CTranslate2 holds its residual connection and its norm, placed before
  (`pre_norm=True`) or after (`pre_norm=False`) the sublayer, which are our PreNorm and PostNorm. PreNorm's final
  norm of each stack is the stack's `layer_norm`; PostNorm has none (`no_final_norm`).
- Attention (Section 3.2): our fused `qkv_proj` (W^Q; W^K; W^V stacked) is CTranslate2's fused self-attention
  projection as it is; encoder-decoder attention is `q_proj` then the fused `kv_proj` (W^K; W^V), as CTranslate2
  stores it.
- LayerNorm maps one to one. ScaleNorm `g * x / max(||x||, eps)` maps onto CTranslate2's RMSNorm
  `gamma * x / sqrt(mean(x^2) + eps')`: mean(x^2) = ||x||^2 / d, so with gamma = g / sqrt(d) (one value repeated d
  times) and eps' = eps^2 / d, RMSNorm computes g * x / sqrt(||x||^2 + eps^2). That equals ScaleNorm up to a
  relative difference of (eps / ||x||)^2 / 2: below float32 resolution (6e-8) once ||x|| > 3000 * eps (0.03 with the
  default eps = 1e-5), i.e. for every activation a trained model produces; the two differ only for vectors of norm
  near eps (by 1 / sqrt(2) at ||x|| = eps), where ScaleNorm clamps. `tests/export/test_ctranslate2.py` checks this
  numerically, and that the exported models compute the same log-probabilities. CTranslate2 has one epsilon per
  model, which is enough since a model has one norm type.
- FixNorm: the unit-length embedding rows are exported already normalised, for the embeddings and the output
  projection alike.
- Embeddings (Sections 3.4): multiplied by sqrt(d_model) (`scale_embeddings`), shared or separate as in the model
  (identical arrays are stored once by CTranslate2); the output projection's bias (`final_logits_bias`) is
  exported when the model has one.
- Positions (Section 3.5): the model's table of `max_position_embeddings` rows is exported explicitly (the paper's
  interleaved or concatenated sinusoids of `sinusoidal_layout`, or the learned table), so CTranslate2 never
  computes its own.
  Inputs and outputs must fit in it: `vaswani translate` refuses longer inputs with a clear error.
- Pruned models (`layers_to_keep`) are ordinary smaller models once loaded and convert as such.
- Special tokens: the vocabulary is the tokenizer's, in id order (ids the tokenizer does not use get placeholder
  names), so both layouts (default and fairseq) keep their ids; EOS, BOS, UNK and (encoder-decoder) the decoder
  start token are named in CTranslate2's config. Sources carry their EOS from the tokenizer
  (`add_source_eos=False`); the Generator adds nothing to the tokens it is given.

What CTranslate2 cannot represent is refused with `ExportError` naming it: a feed-forward activation other than
ReLU, GELU (exact or tanh), SiLU/Swish, tanh or sigmoid; `VaswaniForSequenceClassification`, whose head (the last
EOS's hidden state through dense + tanh + a projection to the labels) CTranslate2's encoder cannot compute (its
pooler takes the first token, without a projection), rather than an export that silently drops the classifier; and
`VaswaniDecoderModel`, which has no next-token head for the Generator (`REFUSED_CLASSES`); and a model that generates
(`NEEDS_EOS`) with `eos_token_id=None` (a language model may have none and generate until a length limit; the
Translator and the Generator end at the EOS the export names).

The exported folder holds CTranslate2's files (model.bin, config.json, shared_vocabulary.json or the two
vocabularies, or vocabulary.json for a one-stack model), the tokenizer files and `vaswani_ctranslate2.json`: what
the export is (`model_type`, `architecture`, `runs_with`: the CTranslate2 class that runs it, `not_exported`) and
what decoding needs to decode as our `generate()` does (the position table length, the special tokens, the decoding
defaults, the source model's configuration). `vaswani translate` runs only exports whose `runs_with` is
`ctranslate2.Translator` and refuses the others by name. The folder is written to a temporary folder next to the
output and renamed when complete.
"""

from __future__ import annotations

import functools
import json
import math
import re
from pathlib import Path

from vaswani.constants import (
    CONFIG_FILE,
    CT2_MODEL_FILE,
    DECODER_MODEL_TYPE,
    ENCODER_MODEL_TYPE,
    EXPORT_INFO_FILE,
    SEQ2SEQ_MODEL_TYPE,
    VASWANI_MODEL_TYPES,
)
from vaswani.devices import ctranslate2_environment
from vaswani.errors import ExportError
from vaswani.model_folder import (
    check_model_folder,
    copy_tokenizer_and_run_args,
    is_source_record,
    load_model_folder,
    write_model_folder,
)

QUANTIZATIONS = ("float32", "int8", "int8_float32", "int16", "float16", "bfloat16")

# What each model family exports as, and which CTranslate2 class runs it.
RUNS_WITH = {
    SEQ2SEQ_MODEL_TYPE: "ctranslate2.Translator",
    DECODER_MODEL_TYPE: "ctranslate2.Generator",
    ENCODER_MODEL_TYPE: "ctranslate2.Encoder",
}
EXPORTED_CLASSES = {
    SEQ2SEQ_MODEL_TYPE: ("VaswaniForConditionalGeneration",),
    DECODER_MODEL_TYPE: ("VaswaniForCausalLM",),
    ENCODER_MODEL_TYPE: ("VaswaniEncoderModel", "VaswaniForMaskedLM"),
}
# What an exported VaswaniForMaskedLM leaves out (CTranslate2's Encoder returns the last hidden states only), with a
# tied head (the token embedding, which the export holds) or an untied one (weights of its own, not exported).
MASKED_LM_HEAD = {
    True: (
        "the masked-LM head is not exported: ctranslate2.Encoder returns the encoder's last hidden states; the "
        "logits are last_hidden_state @ E^T with E the token embedding (its unit-length rows with FixNorm)"
    ),
    False: (
        "the masked-LM head is not exported: ctranslate2.Encoder returns the encoder's last hidden states, and this "
        "head (tie_word_embeddings=False) has weights of its own that the export does not hold; compute the logits "
        "with the PyTorch model"
    ),
}
# The families whose CTranslate2 class generates, and so needs the EOS token that ends generation (a language model
# may have eos_token_id=None; the encoder's export runs without one).
NEEDS_EOS = (SEQ2SEQ_MODEL_TYPE, DECODER_MODEL_TYPE)
# One-stack classes CTranslate2 cannot run, and why.
REFUSED_CLASSES = {
    "VaswaniForSequenceClassification": (
        "its classification head (the hidden state of each row's last EOS through dense + tanh + out_proj) has no "
        "CTranslate2 equivalent (ctranslate2.Encoder's pooler takes the first token through dense + activation, "
        "without the projection to the labels); to export the encoder alone, save the model's `.model` (a "
        "VaswaniEncoderModel) with save_pretrained, with the tokenizer, and export that folder"
    ),
    "VaswaniDecoderModel": (
        "it has no next-token head, which ctranslate2.Generator needs; save and export a VaswaniForCausalLM"
    ),
}

# Our activation names (transformers' ACT2FN keys) -> CTranslate2's `Activation` member names.
ACTIVATIONS = {
    "relu": "RELU",
    "gelu": "GELU",
    "gelu_new": "GELUTanh",
    "gelu_pytorch_tanh": "GELUTanh",
    "silu": "SWISH",
    "swish": "SWISH",
    "tanh": "Tanh",
    "sigmoid": "Sigmoid",
}


def is_ctranslate2_folder(folder: str | Path) -> bool:
    """Whether `folder` is a CTranslate2 export written by `export_ctranslate2`."""
    folder = Path(folder)
    return (folder / EXPORT_INFO_FILE).is_file() and (folder / CT2_MODEL_FILE).is_file()


# CTranslate2's vocabulary files: one of a decoder-only or encoder-only model, the shared one or the two of a translation
# model (JSON since CTranslate2 3.0, text before); which ones an export writes depends on the model it exports.
CT2_VOCABULARY_FILE = re.compile(r"(shared_|source_|target_)?vocabulary\.(json|txt)")


def is_export_file(name: str) -> bool:
    """Whether `name` is a file an export writes besides the tokenizer: CTranslate2's model, config and vocabularies,
    our record, the source's training record. An export replacing an earlier one (`--overwrite_output_dir`) removes
    those it does not write again (a causal LM's vocabulary.json under a translation model's shared_vocabulary.json,
    the run_args.json of a model trained with another pair where a converted model has none); the tokenizer's files
    are replaced by kind (`write_model_folder`), the user's own files and the card are kept."""
    return (
        name in (CT2_MODEL_FILE, CONFIG_FILE, EXPORT_INFO_FILE)
        or is_source_record(name)
        or CT2_VOCABULARY_FILE.fullmatch(name) is not None
    )


def import_ctranslate2():
    """The `ctranslate2` module, or an `ExportError` saying how to install it."""
    ctranslate2_environment()
    try:
        import ctranslate2
    except ImportError:
        raise ExportError(
            'CTranslate2 is not installed: pip install "vaswani[ct2]" (or pip install ctranslate2)'
        ) from None
    return ctranslate2


def scalenorm_as_rmsnorm(scale: float, dim: int, eps: float) -> tuple[list[float], float]:
    """RMSNorm parameters (gamma, epsilon) that compute ScaleNorm `g * x / max(||x||, eps)`: gamma = g / sqrt(d)
    for every dimension and epsilon = eps^2 / d (see the module docstring for the derivation and where it differs)."""
    return [scale / math.sqrt(dim)] * dim, eps * eps / dim


class VaswaniConverter:
    """Builds the CTranslate2 specification of a loaded model and its tokenizer: a `VaswaniForConditionalGeneration`
    (a `TransformerSpec`, run by `ctranslate2.Translator`), a `VaswaniForCausalLM` (a `TransformerDecoderModelSpec`,
    run by `ctranslate2.Generator`) or a `VaswaniEncoderModel` / `VaswaniForMaskedLM` (the encoder as a
    `TransformerEncoderModelSpec`, run by `ctranslate2.Encoder`).

    A `ctranslate2.converters.Converter` (its `convert(output_dir, quantization=...)` validates, quantizes and
    saves); the class is created on first use so that importing this module does not need CTranslate2."""

    def __new__(cls, model, tokenizer):
        return _converter_class()(model, tokenizer)


@functools.cache
def _converter_class() -> type:
    """`VaswaniSpecBuilder` as a `ctranslate2.converters.Converter` (`_load` is the builder's)."""
    import_ctranslate2()
    from ctranslate2.converters import Converter

    return type("_VaswaniConverter", (VaswaniSpecBuilder, Converter), {"__doc__": VaswaniConverter.__doc__})


class VaswaniSpecBuilder:
    """Fills CTranslate2's specification from our modules, in the order of the model: the stack(s) with their
    embeddings and positions, each layer's sublayers, the output projection, the vocabulary and special tokens.
    `_load` (the `Converter` hook) dispatches on the model family, resolved once from `config.model_type`."""

    def __init__(self, model, tokenizer):
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.config = model.config
        check_exportable(self.config, type(model).__name__)
        self.scalenorm = self.config.norm_type == "scalenorm"

    # -- the three specifications ---------------------------------------------------------------------------
    def _load(self):
        family = {SEQ2SEQ_MODEL_TYPE: self.seq2seq_spec, DECODER_MODEL_TYPE: self.decoder_model_spec,
                  ENCODER_MODEL_TYPE: self.encoder_model_spec}  # fmt: skip
        return family[self.config.model_type]()

    def seq2seq_spec(self):
        """`TransformerSpec`: the encoder-decoder, for `ctranslate2.Translator`."""
        from ctranslate2.specs import transformer_spec

        config, base = self.config, self.model.model
        encoder_spec = transformer_spec.TransformerEncoderSpec(
            config.encoder_layers, config.encoder_attention_heads, **self._stack_options()
        )
        decoder_spec = transformer_spec.TransformerDecoderSpec(
            config.decoder_layers, config.decoder_attention_heads, **self._stack_options(),
            # return_attention gives the average of the last layer's heads (used for --alignment)
            alignment_layer=-1, alignment_heads=config.decoder_attention_heads,
        )  # fmt: skip
        spec = transformer_spec.TransformerSpec(encoder_spec, decoder_spec)
        self._set_encoder(encoder_spec, base.encoder)
        self._set_decoder(decoder_spec, base.decoder)

        spec.config.add_source_eos = False  # our tokenizer already ends every source with EOS
        spec.config.add_source_bos = False
        tokens = self._set_special_tokens(spec.config)
        spec.config.decoder_start_token = tokens[config.decoder_start_token_id]
        spec.register_source_vocabulary(tokens)
        spec.register_target_vocabulary(tokens)
        return spec

    def decoder_model_spec(self):
        """`TransformerDecoderModelSpec`: the decoder-only language model, for `ctranslate2.Generator`."""
        from ctranslate2.specs import transformer_spec

        config = self.config
        decoder_spec = transformer_spec.TransformerDecoderSpec(
            config.decoder_layers, config.decoder_attention_heads, with_encoder_attention=False,
            **self._stack_options(),
        )  # fmt: skip
        spec = transformer_spec.TransformerDecoderModelSpec(decoder_spec)
        self._set_decoder(decoder_spec, self.model.model)
        spec.register_vocabulary(self._set_special_tokens(spec.config))
        return spec

    def encoder_model_spec(self):
        """`TransformerEncoderModelSpec` without a pooling layer: the encoder-only model's stack, for
        `ctranslate2.Encoder` (which returns its last hidden states)."""
        from ctranslate2.specs import transformer_spec

        # start-up: the command line's parser imports this module; torch loads only for an export
        from modeling_vaswani import VaswaniEncoderModel

        config = self.config
        encoder_spec = transformer_spec.TransformerEncoderSpec(
            config.encoder_layers, config.encoder_attention_heads, **self._stack_options()
        )
        spec = transformer_spec.TransformerEncoderModelSpec(encoder_spec)  # no pooler: see REFUSED_CLASSES
        stack = self.model if isinstance(self.model, VaswaniEncoderModel) else self.model.model  # VaswaniForMaskedLM
        self._set_encoder(encoder_spec, stack)
        spec.register_vocabulary(self._set_special_tokens(spec.config))
        return spec

    def vocabulary(self) -> list[str]:
        """The token of every id 0..vocab_size-1 (placeholders for ids the tokenizer does not use)."""
        size = self.config.vocab_size
        tokens = self.tokenizer.convert_ids_to_tokens(list(range(size)))
        tokens = [token if token is not None else f"<vaswani_unused_{i}>" for i, token in enumerate(tokens)]
        if len(set(tokens)) != len(tokens):
            raise ExportError("the tokenizer maps two ids to the same token; CTranslate2 needs unique tokens")
        return tokens

    # -- stacks -------------------------------------------------------------------------------------------
    def _stack_options(self) -> dict:
        """The options every stack shares: norm placement (PreNorm's final norm, none for PostNorm), the
        activation, and RMSNorm for ScaleNorm."""
        from ctranslate2.specs import common_spec

        pre_norm = self.config.norm_position == "pre"
        return {"pre_norm": pre_norm, "no_final_norm": not pre_norm, "rms_norm": self.scalenorm,
                "activation": getattr(common_spec.Activation, ACTIVATIONS[self.config.activation_function])}  # fmt: skip

    def _set_encoder(self, spec, stack):
        self._set_stack(spec, stack, spec.embeddings[0])
        for layer_spec, layer in zip(spec.layer, stack.layers, strict=True):
            self._set_self_attention(layer_spec.self_attention, layer.self_attn, layer.self_attn_residual)
            self._set_ffn(layer_spec.ffn, layer)

    def _set_decoder(self, spec, stack):
        """The decoder stack and the output projection (with `final_logits_bias` when the model has one)."""
        self._set_stack(spec, stack, spec.embeddings)
        for layer_spec, layer in zip(spec.layer, stack.layers, strict=True):
            self._set_self_attention(layer_spec.self_attention, layer.self_attn, layer.self_attn_residual)
            if layer.encoder_attn is not None:
                self._set_cross_attention(layer_spec.attention, layer.encoder_attn, layer.encoder_attn_residual)
            self._set_ffn(layer_spec.ffn, layer)
        spec.projection.weight = self._token_matrix(self.model.lm_head.weight)
        if self.model.lm_head.bias is not None:  # final_logits_bias
            spec.projection.bias = _float32_copy(self.model.lm_head.bias)

    def _set_special_tokens(self, spec_config) -> list[str]:
        """UNK, BOS, EOS and the norms' epsilon in CTranslate2's config; returns the vocabulary."""
        config, tokens = self.config, self.vocabulary()
        spec_config.unk_token = tokens[self.tokenizer.unk_token_id]
        if config.bos_token_id is not None:
            spec_config.bos_token = tokens[config.bos_token_id]
        if config.eos_token_id is not None:  # None only for an encoder (NEEDS_EOS): CTranslate2's default stays
            spec_config.eos_token = tokens[config.eos_token_id]
        epsilon = scalenorm_as_rmsnorm(1.0, config.d_model, config.layer_norm_eps)[1]
        spec_config.layer_norm_epsilon = epsilon if self.scalenorm else config.layer_norm_eps
        return tokens

    # -- pieces -------------------------------------------------------------------------------------------
    def _token_matrix(self, weight):
        """(V, d) embedding rows as CTranslate2 uses them: unit length with FixNorm (Nguyen & Salazar 2019)."""
        import torch.nn.functional as F

        return _float32_copy(F.normalize(weight, dim=-1) if self.config.fixnorm else weight)

    def _set_stack(self, spec, stack, embeddings_spec):
        import torch

        embeddings_spec.weight = self._token_matrix(stack.embed_tokens.weight)
        spec.scale_embeddings = bool(self.config.scale_embedding)  # x sqrt(d_model), Section 3.4
        positions = stack.embeddings.embed_positions
        with torch.no_grad():  # (P, d): the learned rows, or the sinusoids exactly as the model computes them
            table = positions(self.config.max_position_embeddings)
        spec.position_encodings.encodings = _float32_copy(table)
        if stack.layer_norm is not None:  # PreNorm's final norm
            self._set_norm(spec.layer_norm, stack.layer_norm)

    def _set_norm(self, spec, norm):
        if self.scalenorm:
            gamma, _ = scalenorm_as_rmsnorm(float(norm.scale.detach()), self.config.d_model, norm.eps)
            spec.gamma = _array(gamma)
        else:
            spec.gamma = _float32_copy(norm.weight)
            spec.beta = _float32_copy(norm.bias)

    def _set_linear(self, spec, linear):
        spec.weight = _float32_copy(linear.weight)
        if linear.bias is not None:
            spec.bias = _float32_copy(linear.bias)

    def _set_self_attention(self, spec, attention, residual):
        self._set_linear(spec.linear[0], attention.qkv_proj)  # (3d, d): W^Q; W^K; W^V, CTranslate2's layout
        self._set_linear(spec.linear[1], attention.out_proj)
        self._set_norm(spec.layer_norm, residual.norm)

    def _set_cross_attention(self, spec, attention, residual):
        self._set_linear(spec.linear[0], attention.q_proj)
        self._set_linear(spec.linear[1], attention.kv_proj)  # (2d, d): W^K; W^V
        self._set_linear(spec.linear[2], attention.out_proj)
        self._set_norm(spec.layer_norm, residual.norm)

    def _set_ffn(self, spec, layer):
        self._set_linear(spec.linear_0, layer.ffn.fc1)
        self._set_linear(spec.linear_1, layer.ffn.fc2)
        self._set_norm(spec.layer_norm, layer.ffn_residual.norm)


def _float32_copy(tensor):
    """`tensor` as a float32 NumPy array of its own. CTranslate2 quantizes the specification's arrays in place
    (`value *= scale`): an array sharing memory with a parameter (what `.float().numpy()` of a float32 tensor gives)
    would scale the model's own weights when exporting int8 or int16."""
    import torch

    return tensor.detach().to(torch.float32, copy=True).numpy()


def _array(values):
    import numpy as np

    return np.asarray(values, dtype=np.float32)


def check_exportable(config, architecture: str | None = None) -> None:
    """Raise `ExportError` naming the first setting (or the model class, `architecture`) CTranslate2 cannot
    represent."""
    if config.model_type not in EXPORTED_CLASSES:
        raise ExportError(f"model_type={config.model_type!r} is not a Vaswani model; nothing to export")
    if config.activation_function not in ACTIVATIONS:
        raise ExportError(
            f"activation_function={config.activation_function!r} has no CTranslate2 equivalent; CTranslate2 "
            f"supports {', '.join(sorted(ACTIVATIONS))}"
        )
    if architecture in REFUSED_CLASSES:
        raise ExportError(f"{architecture} cannot be exported to CTranslate2: {REFUSED_CLASSES[architecture]}")
    exported = EXPORTED_CLASSES[config.model_type]
    if architecture is not None and architecture not in exported:
        raise ExportError(
            f"{architecture} is not a class the CTranslate2 export knows; a {config.model_type!r} export takes "
            f"{' or '.join(exported)}"
        )
    if config.eos_token_id is None and config.model_type in NEEDS_EOS:
        raise ExportError(
            f"eos_token_id=None: {RUNS_WITH[config.model_type]} ends generation at the EOS token named in the export, "
            "and this model has none (it generates until a length limit, which CTranslate2 cannot reproduce); set "
            "eos_token_id in the model folder's config.json to the tokenizer's EOS id and export again"
        )


def export_ctranslate2(model_dir: str | Path, output_dir: str | Path, quantization: str = "float32", *,
                       overwrite: bool = False) -> Path:  # fmt: skip
    """Convert the model folder `model_dir` (weights, config, tokenizer) into a CTranslate2 folder `output_dir`:
    an encoder-decoder for `ctranslate2.Translator` (what `vaswani translate` runs), a causal LM for
    `ctranslate2.Generator`, an encoder-only model for `ctranslate2.Encoder` (`runs_with` in its
    `vaswani_ctranslate2.json`). `quantization`: one of `QUANTIZATIONS` (weights stored in that type; "int8" keeps
    float32 for the other computations on CPU). `output_dir` must not exist, or with `overwrite` be an earlier
    export (`is_ctranslate2_folder`), whose files the new export replaces, the earlier export's it does not write
    again included (`is_export_file`, the tokenizer's); the user's files and the card are kept. Written in a staging
    folder and swapped in (`write_model_folder`): a kill leaves the earlier export or the new one."""

    if quantization not in QUANTIZATIONS:
        raise ExportError(f"quantization {quantization!r} is not supported; use one of {', '.join(QUANTIZATIONS)}")
    source, output = check_model_folder(model_dir), Path(output_dir)
    if output.exists() and not overwrite:
        raise ExportError(f"{output} already exists: give a new folder for the export, or pass --overwrite_output_dir "
                          "to replace the export in it (nothing was overwritten)")  # fmt: skip
    if output.exists() and not is_ctranslate2_folder(output):
        raise ExportError(f"{output} is not a CTranslate2 export (no {EXPORT_INFO_FILE} and {CT2_MODEL_FILE}): "
                          "--overwrite_output_dir replaces an earlier export only; give a new folder (nothing was "
                          "overwritten)")  # fmt: skip
    if not output.parent.is_dir():
        raise ExportError(f"cannot write {output}: no such folder {output.parent}")
    import_ctranslate2()

    # checked: weights that fit config.json, a tokenizer that fits the model; no foreign code runs
    model, tokenizer = load_model_folder(source, model_types=tuple(VASWANI_MODEL_TYPES))
    converter = VaswaniConverter(model, tokenizer)
    info = export_info(model, quantization)

    def write(staging: Path) -> None:
        converter.convert(str(staging), quantization=quantization, force=True)
        copy_tokenizer_and_run_args(source, staging)  # `vaswani serve` and `distill --teacher` read the pair there
        (staging / EXPORT_INFO_FILE).write_text(json.dumps(info, indent=2, default=str) + "\n")

    return write_model_folder(output, write, replace=overwrite, replaces=is_export_file)


def export_info(model, quantization: str) -> dict:
    """The content of `vaswani_ctranslate2.json`: what the export is (`model_type`, the exported class, which
    CTranslate2 class runs it, what is left out) and what decoding needs to decode as our `generate()` does."""
    config, architecture = model.config, type(model).__name__
    info = {
        "format": "ctranslate2",
        "quantization": quantization,
        "model_type": config.model_type,
        "architecture": architecture,
        "runs_with": RUNS_WITH[config.model_type],
        "not_exported": MASKED_LM_HEAD[config.tie_word_embeddings] if architecture == "VaswaniForMaskedLM" else None,
        "max_position_embeddings": config.max_position_embeddings,
        "bos_token_id": config.bos_token_id,
        "eos_token_id": config.eos_token_id,
        "pad_token_id": config.pad_token_id,
    }
    if config.model_type == SEQ2SEQ_MODEL_TYPE:
        info["decoder_start_token_id"] = config.decoder_start_token_id
        info["max_new_tokens_over_source"] = model.MAX_NEW_TOKENS_OVER_SOURCE
    if config.model_type != ENCODER_MODEL_TYPE:
        info["generation"] = {  # bad_words_ids: ids never generated (a converted Marian model's PAD)
            k: getattr(model.generation_config, k)
            for k in ("num_beams", "length_penalty", "min_new_tokens", "bad_words_ids")
        }
    # the folder the model was loaded from is a local path: not part of what the export publishes
    info["source_config"] = {key: value for key, value in config.to_dict().items() if key != "_name_or_path"}
    return info


def usage_hint(folder: str | Path) -> str:
    """How to run the export in `folder` (printed by `vaswani export`), and what it leaves out, if anything."""
    info = json.loads((Path(folder) / EXPORT_INFO_FILE).read_text())
    runs_with = info.get("runs_with", RUNS_WITH[SEQ2SEQ_MODEL_TYPE])
    if runs_with == RUNS_WITH[SEQ2SEQ_MODEL_TYPE]:
        return f"translate with: vaswani translate --model {folder}"
    hint = f"run it in Python with {runs_with}({str(folder)!r}) (`vaswani translate` runs translation models only)"
    return hint + (f"; {info['not_exported']}" if info.get("not_exported") else "")


__all__ = [
    "EXPORT_INFO_FILE",
    "QUANTIZATIONS",
    "ExportError",
    "VaswaniConverter",
    "VaswaniSpecBuilder",
    "check_exportable",
    "export_ctranslate2",
    "export_info",
    "is_ctranslate2_folder",
    "is_export_file",
    "scalenorm_as_rmsnorm",
    "usage_hint",
]
