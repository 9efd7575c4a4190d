"""Export a trained model to CTranslate2: the engine of `vaswani export --format ctranslate2`.

    from vaswani.ctranslate2_export import export_ctranslate2

    export_ctranslate2("runs/base-avg5", "runs/base-ct2", quantization="int8")

The model is described with CTranslate2's own specification API (`ctranslate2.specs.TransformerSpec` with a
`TransformerEncoderSpec` and a `TransformerDecoderSpec`) and written by a `ctranslate2.converters.Converter`
subclass, `VaswaniConverter`. How each part of the model maps (Sections refer to the paper):

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
  near eps (by 1 / sqrt(2) at ||x|| = eps), where ScaleNorm clamps. `tests/test_ctranslate2.py` checks this
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
  names), so both layouts (default and fairseq) keep their ids; EOS, UNK and the decoder start token are named in
  CTranslate2's config. Sources carry their EOS from the tokenizer (`add_source_eos=False`).

What CTranslate2 cannot represent is refused with `ExportError` naming it: a feed-forward activation other than
ReLU, GELU (exact or tanh), SiLU/Swish, tanh or sigmoid.

The exported folder holds CTranslate2's files (model.bin, config.json, shared_vocabulary.json or the two
vocabularies), the tokenizer files and `vaswani_ctranslate2.json` (what the translator needs to decode as our
`generate()` does: the position table length, the decoding defaults, the source model's configuration). It is written
to a temporary folder next to the output and renamed when complete.
"""

from __future__ import annotations

import json
import math
import shutil
import tempfile
from pathlib import Path

# The file that marks a folder as our CTranslate2 export (and holds what decoding needs).
EXPORT_INFO_FILE = "vaswani_ctranslate2.json"
CT2_MODEL_FILE = "model.bin"
QUANTIZATIONS = ("float32", "int8", "int8_float32", "int16", "float16", "bfloat16")

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


class ExportError(ValueError):
    """The model cannot be exported as asked; the message names what and why."""


def is_ctranslate2_folder(folder: str | Path) -> bool:
    """Whether `folder` is a CTranslate2 export written by `export_ctranslate2`."""
    folder = Path(folder)
    return (folder / EXPORT_INFO_FILE).is_file() and (folder / CT2_MODEL_FILE).is_file()


def import_ctranslate2():
    """The `ctranslate2` module, or an `ExportError` saying how to install it."""
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
    """Builds the CTranslate2 specification of a loaded `VaswaniForConditionalGeneration` and its tokenizer.

    A `ctranslate2.converters.Converter` (its `convert(output_dir, quantization=...)` validates, quantizes and
    saves); the class is created on first use so that importing this module does not need CTranslate2."""

    def __new__(cls, model, tokenizer):
        ctranslate2 = import_ctranslate2()
        converter_class = _converter_class(ctranslate2)
        return converter_class(model, tokenizer)


def _converter_class(ctranslate2):
    from ctranslate2.converters import Converter
    from ctranslate2.specs import common_spec, transformer_spec

    class _VaswaniConverter(Converter):
        def __init__(self, model, tokenizer):
            self.model = model.eval()
            self.tokenizer = tokenizer
            self.config = model.config
            check_exportable(self.config)
            self.scalenorm = self.config.norm_type == "scalenorm"

        # -- the specification ------------------------------------------------------------------------------
        def _load(self):
            config = self.config
            pre_norm = config.norm_position == "pre"
            activation = getattr(common_spec.Activation, ACTIVATIONS[config.activation_function])
            encoder_spec = transformer_spec.TransformerEncoderSpec(
                config.encoder_layers, config.encoder_attention_heads, pre_norm=pre_norm,
                no_final_norm=not pre_norm, activation=activation, rms_norm=self.scalenorm,
            )  # fmt: skip
            decoder_spec = transformer_spec.TransformerDecoderSpec(
                config.decoder_layers, config.decoder_attention_heads, pre_norm=pre_norm,
                no_final_norm=not pre_norm, activation=activation, rms_norm=self.scalenorm,
                # return_attention gives the average of the last layer's heads (used for --alignment)
                alignment_layer=-1, alignment_heads=config.decoder_attention_heads,
            )  # fmt: skip
            spec = transformer_spec.TransformerSpec(encoder_spec, decoder_spec)

            base = self.model.model
            self._set_stack(encoder_spec, base.encoder, encoder_spec.embeddings[0])
            self._set_stack(decoder_spec, base.decoder, decoder_spec.embeddings)
            for layer_spec, layer in zip(encoder_spec.layer, base.encoder.layers, strict=True):
                self._set_self_attention(layer_spec.self_attention, layer.self_attn, layer.self_attn_residual)
                self._set_ffn(layer_spec.ffn, layer)
            for layer_spec, layer in zip(decoder_spec.layer, base.decoder.layers, strict=True):
                self._set_self_attention(layer_spec.self_attention, layer.self_attn, layer.self_attn_residual)
                self._set_cross_attention(layer_spec.attention, layer.encoder_attn, layer.encoder_attn_residual)
                self._set_ffn(layer_spec.ffn, layer)
            decoder_spec.projection.weight = self._token_matrix(self.model.lm_head.weight)
            if self.model.lm_head.bias is not None:  # final_logits_bias
                decoder_spec.projection.bias = self.model.lm_head.bias.detach().float().numpy()

            spec.config.add_source_eos = False  # our tokenizer already ends every source with EOS
            spec.config.add_source_bos = False
            tokens = self.vocabulary()
            spec.config.unk_token = tokens[self.tokenizer.unk_token_id]
            spec.config.bos_token = tokens[config.bos_token_id]
            spec.config.eos_token = tokens[config.eos_token_id]
            spec.config.decoder_start_token = tokens[config.decoder_start_token_id]
            epsilon = scalenorm_as_rmsnorm(1.0, config.d_model, config.layer_norm_eps)[1]
            spec.config.layer_norm_epsilon = epsilon if self.scalenorm else config.layer_norm_eps
            spec.register_source_vocabulary(tokens)
            spec.register_target_vocabulary(tokens)
            return spec

        def vocabulary(self) -> list[str]:
            """The token of every id 0..vocab_size-1 (placeholders for ids the tokenizer does not use)."""
            size = self.config.vocab_size
            tokens = self.tokenizer.convert_ids_to_tokens(list(range(size)))
            tokens = [token if token is not None else f"<vaswani_unused_{i}>" for i, token in enumerate(tokens)]
            if len(set(tokens)) != len(tokens):
                raise ExportError("the tokenizer maps two ids to the same token; CTranslate2 needs unique tokens")
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

    return _VaswaniConverter


def _float32_copy(tensor):
    """`tensor` as a float32 NumPy array of its own. CTranslate2 quantizes the specification's arrays in place
    (`value *= scale`): an array sharing memory with a parameter (what `.float().numpy()` of a float32 tensor gives)
    would scale the model's own weights when exporting int8 or int16."""
    import torch

    return tensor.detach().to(torch.float32, copy=True).numpy()


def _array(values):
    import numpy as np

    return np.asarray(values, dtype=np.float32)


def check_exportable(config) -> None:
    """Raise `ExportError` naming the first setting CTranslate2 cannot represent."""
    if config.activation_function not in ACTIVATIONS:
        raise ExportError(
            f"activation_function={config.activation_function!r} has no CTranslate2 equivalent; CTranslate2 "
            f"supports {', '.join(sorted(ACTIVATIONS))}"
        )


def export_ctranslate2(model_dir: str | Path, output_dir: str | Path, quantization: str = "float32") -> Path:
    """Convert the model folder `model_dir` (weights, config, tokenizer) into a CTranslate2 folder `output_dir`
    that `vaswani translate` runs with CTranslate2. `quantization`: one of `QUANTIZATIONS` (weights stored in that
    type; "int8" keeps float32 for the other computations on CPU). `output_dir` must not exist."""
    from vaswani.checkpoints import TOKENIZER_FILE_PATTERNS
    from vaswani.model_folder import check_model_folder, load_model_folder

    if quantization not in QUANTIZATIONS:
        raise ExportError(f"quantization {quantization!r} is not supported; use one of {', '.join(QUANTIZATIONS)}")
    source, output = check_model_folder(model_dir), Path(output_dir)
    if output.exists():
        raise ExportError(f"{output} already exists: give a new folder for the export (nothing was overwritten)")
    if not output.parent.is_dir():
        raise ExportError(f"cannot write {output}: no such folder {output.parent}")
    import_ctranslate2()

    # checked: weights that fit config.json, a tokenizer that fits the model; no foreign code runs
    model, tokenizer = load_model_folder(source)
    converter = VaswaniConverter(model, tokenizer)
    config = model.config
    info = {
        "format": "ctranslate2",
        "quantization": quantization,
        "max_position_embeddings": config.max_position_embeddings,
        "decoder_start_token_id": config.decoder_start_token_id,
        "eos_token_id": config.eos_token_id,
        "pad_token_id": config.pad_token_id,
        "max_new_tokens_over_source": model.MAX_NEW_TOKENS_OVER_SOURCE,
        "generation": {  # bad_words_ids: ids never generated (a converted Marian model's PAD)
            k: getattr(model.generation_config, k)
            for k in ("num_beams", "length_penalty", "min_new_tokens", "bad_words_ids")
        },
        "source_config": config.to_dict(),
    }

    staging = Path(tempfile.mkdtemp(prefix=f".{output.name}.", dir=output.parent))
    try:
        converter.convert(str(staging), quantization=quantization, force=True)
        for file in sorted(source.iterdir()):
            if file.is_file() and any(file.match(pattern) for pattern in TOKENIZER_FILE_PATTERNS):
                shutil.copy2(file, staging / file.name)
        (staging / EXPORT_INFO_FILE).write_text(json.dumps(info, indent=2, default=str) + "\n")
        staging.rename(output)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return output


__all__ = [
    "EXPORT_INFO_FILE",
    "QUANTIZATIONS",
    "ExportError",
    "VaswaniConverter",
    "check_exportable",
    "export_ctranslate2",
    "is_ctranslate2_folder",
    "scalenorm_as_rmsnorm",
]
