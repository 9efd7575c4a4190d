"""Configuration of the original Transformer (Vaswani et al., 2017, "Attention Is All You Need").

The defaults are the paper's *base* model (Table 3); `VaswaniConfig.from_preset("big")` gives the *big* one.
Argument names follow BART/Marian so that Hugging Face users find what they expect. On top of the paper, the
config switches the normalization (Nguyen & Salazar 2019, "Transformers without Tears"), LayerDrop
(Fan et al. 2019) and DropHead (Zhou et al. 2020); each option defaults to the paper's behaviour.

This file only imports transformers (it is copied next to the weights for `trust_remote_code` loading).
"""

from transformers import PretrainedConfig
from transformers.activations import ACT2FN

POSITION_EMBEDDING_TYPES = ("sinusoidal", "learned")
SINUSOIDAL_LAYOUTS = ("interleaved", "concatenated", "fairseq")
NORM_POSITIONS = ("post", "pre")
NORM_TYPES = ("layernorm", "scalenorm")

# The options a user chooses about the model (everything but the vocabulary, the special-token ids, which come from
# the tokenizer, and the layer lists), defined once: train.py takes each as `--name value`, and the model card
# compares the first group with the paper.
ARCHITECTURE_OPTIONS = (  # the paper's choices (Table 3, Sections 3-5) and our options beyond them, in reading order
    "encoder_layers", "decoder_layers", "d_model", "encoder_ffn_dim", "decoder_ffn_dim", "encoder_attention_heads",
    "decoder_attention_heads", "activation_function", "dropout", "attention_dropout", "activation_dropout",
    "label_smoothing", "position_embedding_type", "sinusoidal_layout", "scale_embedding", "share_embeddings",
    "tie_word_embeddings", "final_logits_bias", "norm_position", "norm_type", "fixnorm", "encoder_layerdrop",
    "decoder_layerdrop", "encoder_drophead", "decoder_drophead", "cross_drophead",
)  # fmt: skip
IMPLEMENTATION_OPTIONS = ("max_position_embeddings", "init_std", "layer_norm_eps", "layerdrop_seed")  # no paper value
# Every VaswaniConfig argument a command line exposes as --name value (vocabulary size and special-token ids come
# from the tokenizer).
MODEL_OPTIONS = (*ARCHITECTURE_OPTIONS, *IMPLEMENTATION_OPTIONS)
# The options that act only while training (regularization, and the initialization): a trained model may take other
# values when it trains further; every other option is part of what its weights were trained to compute.
TRAINING_ONLY_OPTIONS = (
    "dropout", "attention_dropout", "activation_dropout", "label_smoothing", "encoder_layerdrop", "decoder_layerdrop",
    "layerdrop_seed", "encoder_drophead", "decoder_drophead", "cross_drophead", "init_std",
)  # fmt: skip

# Table 3 of the paper. "base" is the default of every argument; presets only list what differs.
PRESETS = {
    "base": {},
    "big": {
        "d_model": 1024,
        "encoder_ffn_dim": 4096,
        "decoder_ffn_dim": 4096,
        "encoder_attention_heads": 16,
        "decoder_attention_heads": 16,
        "dropout": 0.3,  # the paper's EN-DE big model; EN-FR used 0.1
    },
}


class VaswaniConfig(PretrainedConfig):
    r"""
    Configuration of [`VaswaniModel`] and [`VaswaniForConditionalGeneration`]. The defaults give the paper's base
    model (6+6 layers, d_model 512, FFN 2048, 8 heads, dropout 0.1, label smoothing 0.1) with one embedding matrix
    shared by source, target and the pre-softmax projection.

    Args:
        vocab_size (`int`, *optional*, defaults to 37000):
            Size of the joint source-target vocabulary (Section 5.1: a shared BPE vocabulary of about 37k tokens).
        d_model (`int`, *optional*, defaults to 512):
            Width of the model, d_model in Section 3.
        encoder_layers (`int`, *optional*, defaults to 6):
            Number of encoder layers, N in Section 3.1.
        decoder_layers (`int`, *optional*, defaults to 6):
            Number of decoder layers, N in Section 3.1.
        encoder_attention_heads (`int`, *optional*, defaults to 8):
            Attention heads per encoder layer, h in Section 3.2.2. Must divide `d_model`.
        decoder_attention_heads (`int`, *optional*, defaults to 8):
            Attention heads per decoder layer (self- and cross-attention). Must divide `d_model`.
        encoder_ffn_dim (`int`, *optional*, defaults to 2048):
            Inner width of the encoder's position-wise feed-forward networks, d_ff in Section 3.3.
        decoder_ffn_dim (`int`, *optional*, defaults to 2048):
            Inner width of the decoder's position-wise feed-forward networks.
        activation_function (`str`, *optional*, defaults to `"relu"`):
            Non-linearity of the feed-forward networks, any key of `transformers.activations.ACT2FN`. The paper
            uses ReLU: `max(0, x W1 + b1) W2 + b2`; OPUS-MT's Marian models use `"swish"` (x * sigmoid(x)).
        dropout (`float`, *optional*, defaults to 0.1):
            P_drop of Section 5.4: applied to every sublayer output before the residual add and to the sum of
            embeddings and positional encodings, in both stacks. In [0, 1).
        attention_dropout (`float`, *optional*, defaults to 0.0):
            Dropout on the attention probabilities (tensor2tensor's `attention_dropout`; not in the paper's text).
        activation_dropout (`float`, *optional*, defaults to 0.0):
            Dropout after the FFN non-linearity (tensor2tensor's `relu_dropout`; not in the paper's text).
        max_position_embeddings (`int`, *optional*, defaults to 1024):
            Number of learned positions (`position_embedding_type="learned"`): longer inputs raise an error.
            Sinusoidal encodings are computed for any position and have no limit.
        position_embedding_type (`str`, *optional*, defaults to `"sinusoidal"`):
            `"sinusoidal"`: the paper's interleaved table `PE[pos, 2i] = sin(pos / 10000^(2i/d))`,
            `PE[pos, 2i+1] = cos(pos / 10000^(2i/d))` (Section 3.5). `"learned"`: learned position embeddings,
            the paper's ablation (E) of Table 3.
        sinusoidal_layout (`str`, *optional*, defaults to `"interleaved"`):
            Where the sines and cosines of `position_embedding_type="sinusoidal"` go, with the same frequencies
            `1 / 10000^(2i/d)`: `"interleaved"` is the paper's formula above; `"concatenated"` puts the sines in the
            first ceil(d/2) dimensions and the cosines in the last floor(d/2), `PE[pos, i] = sin(pos / 10000^(2i/d))`,
            `PE[pos, ceil(d/2) + i] = cos(pos / 10000^(2i/d))`, as Marian (OPUS-MT, transformers' `MarianMTModel`)
            does. `"fairseq"` is fairseq's table (`vaswani convert --from fairseq`), with other frequencies and
            positions: `PE[pos, i] = sin(p * w_i)`, `PE[pos, d//2 + i] = cos(p * w_i)` (a zero column last for odd
            d), `w_i = exp(-i * ln(10000) / (d//2 - 1))`, `p = pos + pad_token_id + 1` (fairseq's position offset);
            it needs d_model >= 4. Only with sinusoidal positions.
        init_std (`float`, *optional*):
            Standard deviation of the normal initialization of the token (and learned position) embeddings.
            Defaults to `d_model ** -0.5` as in fairseq; linear layers use Xavier-uniform.
        scale_embedding (`bool`, *optional*, defaults to `True`):
            Multiply the token embeddings by sqrt(d_model) (Section 3.4).
        share_embeddings (`bool`, *optional*, defaults to `True`):
            Use one matrix for the source and the target embedding (Section 3.4; needs a joint vocabulary). With
            `tie_word_embeddings=True` (the paper) it is also the pre-softmax projection.
        tie_word_embeddings (`bool`, *optional*, defaults to `True`):
            Tie the pre-softmax projection to the target embedding (transformers' standard switch). `False` gives
            the output projection its own matrix, whatever `share_embeddings` says. With `share_embeddings=False`
            and this `True`, the source embedding is a separate matrix ("two-way" tying).
        final_logits_bias (`bool`, *optional*, defaults to `False`):
            Give the pre-softmax projection a learned bias, one value per vocabulary entry added to the logits
            (`lm_head.bias`). The paper has none; Marian's output layer has one (`final_logits_bias` of
            transformers' `MarianMTModel`, where it is a fixed buffer; here it is trained like every other bias).
        label_smoothing (`float`, *optional*, defaults to 0.1):
            eps_ls of Section 5.4, used by the training loss. The loss is `torch.nn.functional.cross_entropy` with
            `label_smoothing`, which puts `eps/V` on every token (fairseq's `eps/(V-1)` on non-targets is the same
            distribution for `eps_fairseq = eps * (V-1) / V`). In [0, 1).
        norm_position (`str`, *optional*, defaults to `"post"`):
            `"post"`: the paper's `LayerNorm(x + Dropout(Sublayer(x)))`, no norm after the stacks. `"pre"`:
            `x + Dropout(Sublayer(Norm(x)))` plus one final norm after each stack (tensor2tensor / fairseq
            `normalize_before`; Nguyen & Salazar 2019). Checkpoints of both modes have the same parameter names,
            PreNorm adds `encoder.layer_norm` and `decoder.layer_norm`.
        norm_type (`str`, *optional*, defaults to `"layernorm"`):
            `"layernorm"` (the paper) or `"scalenorm"`: `g * x / max(||x||_2, eps)` with one learned scalar `g` per
            norm, initialised to sqrt(d_model) (Nguyen & Salazar 2019).
        layer_norm_eps (`float`, *optional*, defaults to 1e-5):
            Epsilon of LayerNorm, and the clamp of ScaleNorm's denominator.
        fixnorm (`bool`, *optional*, defaults to `False`):
            FixNorm (Nguyen & Salazar 2019): every embedding row is normalised to unit length before use, the input
            is `unit row * sqrt(d_model) + PE` and the output logits use the unit rows; the embeddings are
            initialised U(-0.01, 0.01). Meant for `norm_type="scalenorm"`; requires `scale_embedding=True` and
            `tie_word_embeddings=True`.
        encoder_layerdrop (`float`, *optional*, defaults to 0.0):
            LayerDrop (Fan et al. 2019): probability of skipping each encoder layer per training forward pass (one
            draw per layer shared by the batch, no rescaling); evaluation runs every layer. In [0, 1).
        decoder_layerdrop (`float`, *optional*, defaults to 0.0):
            LayerDrop probability for the decoder layers. In [0, 1).
        layerdrop_seed (`int`, *optional*, defaults to 0):
            Seed of the generator that draws the LayerDrop decisions. Every process of a data-parallel run builds
            the same generator, so all ranks skip the same layers at the same step.
        encoder_layers_to_keep (`list[int]`, *optional*):
            Prune the encoder to these layers (0-based, increasing) when the model is built or loaded, e.g.
            `from_pretrained(path, encoder_layers_to_keep=[0, 2, 4])`. The kept layers are renumbered 0..k-1 and
            the resulting model saves as an ordinary smaller model (fairseq's `encoder_layers_to_keep`).
        decoder_layers_to_keep (`list[int]`, *optional*):
            The same for the decoder.
        pruned_layers (`dict[str, list[int]]`, *optional*):
            Set by pruning, for the record (model cards): for "encoder" / "decoder", the layer indices of the
            original model that were kept. It does not change the model.
        converted_from (`dict`, *optional*):
            Set by `vaswani convert`, for the record (model cards): where the weights came from, as
            `{"format": "marian", "source": folder name, "model_id": Hub id or None, "license": license or None}`.
            It does not change the model.
        encoder_drophead (`float`, *optional*, defaults to 0.0):
            DropHead (Zhou et al. 2020): probability of dropping each encoder self-attention head, per example,
            during training; kept heads are rescaled by `h / kept`. Identity in evaluation. In [0, 1).
        decoder_drophead (`float`, *optional*, defaults to 0.0):
            DropHead probability for the decoder self-attention heads. In [0, 1).
        cross_drophead (`float`, *optional*, defaults to 0.0):
            DropHead probability for the decoder's encoder-decoder attention heads. In [0, 1).
        use_cache (`bool`, *optional*, defaults to `True`):
            Whether the decoder returns its key/value cache (used by `generate()`).
        pad_token_id (`int`, *optional*, defaults to 0):
            Padding id. 0 is the paper-style vocabulary; fairseq's layout is `<s>`=0, `<pad>`=1, `</s>`=2.
            Padding is masked in attention and never contributes to the loss.
        bos_token_id (`int`, *optional*, defaults to 1):
            Beginning-of-sequence id.
        eos_token_id (`int`, *optional*, defaults to 2):
            End-of-sequence id, appended to sources and targets by the tokenizer.
        decoder_start_token_id (`int`, *optional*, defaults to 1):
            First decoder input; labels are shifted right behind it. Marian models start with PAD (their
            `decoder_start_token_id` is `pad_token_id`, which `vaswani convert --from marian` keeps).
    """

    model_type = "vaswani"
    keys_to_ignore_at_inference = ["past_key_values", "cache"]  # "cache": its name since transformers 5.24
    attribute_map = {
        "hidden_size": "d_model",
        "num_attention_heads": "encoder_attention_heads",
        "num_hidden_layers": "encoder_layers",
    }

    # Architecture (Table 3, base)
    vocab_size: int = 37000
    d_model: int = 512
    encoder_layers: int = 6
    decoder_layers: int = 6
    encoder_attention_heads: int = 8
    decoder_attention_heads: int = 8
    encoder_ffn_dim: int = 2048
    decoder_ffn_dim: int = 2048
    activation_function: str = "relu"
    # Regularization (Section 5.4)
    dropout: float = 0.1
    attention_dropout: float = 0.0
    activation_dropout: float = 0.0
    label_smoothing: float = 0.1
    # Embeddings and positions (Sections 3.4, 3.5)
    max_position_embeddings: int = 1024
    position_embedding_type: str = "sinusoidal"
    sinusoidal_layout: str = "interleaved"
    init_std: float | None = None
    scale_embedding: bool = True
    share_embeddings: bool = True
    tie_word_embeddings: bool = True
    final_logits_bias: bool = False
    # Normalization (Transformers without Tears)
    norm_position: str = "post"
    norm_type: str = "layernorm"
    layer_norm_eps: float = 1e-5
    fixnorm: bool = False
    # LayerDrop (Fan et al. 2019)
    encoder_layerdrop: float = 0.0
    decoder_layerdrop: float = 0.0
    layerdrop_seed: int = 0
    encoder_layers_to_keep: list[int] | None = None
    decoder_layers_to_keep: list[int] | None = None
    pruned_layers: dict | None = None
    converted_from: dict | None = None
    # DropHead (Zhou et al. 2020)
    encoder_drophead: float = 0.0
    decoder_drophead: float = 0.0
    cross_drophead: float = 0.0
    # Generation and special tokens
    use_cache: bool = True
    is_encoder_decoder: bool = True
    pad_token_id: int | None = 0
    bos_token_id: int | None = 1
    eos_token_id: int | None = 2
    decoder_start_token_id: int | None = 1

    def __post_init__(self, **kwargs):
        super().__post_init__(**kwargs)
        self.validate()

    @classmethod
    def from_preset(cls, preset: str, **overrides) -> "VaswaniConfig":
        """The paper's configurations of Table 3: `"base"` (65M parameters in the paper) or `"big"` (213M).

        `overrides` replace any argument, e.g. `VaswaniConfig.from_preset("big", dropout=0.1)` for EN-FR.
        """
        if preset not in PRESETS:
            raise ValueError(f"Unknown preset {preset!r}; choose one of {sorted(PRESETS)}.")
        return cls(**{**PRESETS[preset], **overrides})

    @staticmethod
    def check_layers_to_keep(name: str, keep, num_layers: int) -> None:
        """Raise `ValueError` unless `keep` is None or increasing, unique layer indices in [0, num_layers)."""
        _check_layers_to_keep(name, keep, num_layers)

    # ----------------------------------------------------------------------------------------------------------
    # Validation: every argument is checked here, once at construction and again when a model is built (so that
    # values overridden through `from_pretrained(path, dropout=...)` are checked too).
    # ----------------------------------------------------------------------------------------------------------
    def validate(self) -> None:
        """Raise `ValueError` naming the first invalid argument, its value and what is allowed.

        The groups, in this order: dimensions, dropout rates (with LayerDrop and DropHead), the options chosen from a
        list, switches, the other numbers, special-token ids, pruning and the records, and last the combinations
        that contradict each other."""
        check_dimensions(self, _SIZES, sides=("encoder", "decoder"))
        check_rates(self, _RATES)
        check_choice("activation_function", self.activation_function, sorted(ACT2FN))
        check_choice("position_embedding_type", self.position_embedding_type, POSITION_EMBEDDING_TYPES)
        check_choice("sinusoidal_layout", self.sinusoidal_layout, SINUSOIDAL_LAYOUTS)
        check_choice("norm_position", self.norm_position, NORM_POSITIONS)
        check_choice("norm_type", self.norm_type, NORM_TYPES)
        check_flags(self, _FLAGS)
        if not self.is_encoder_decoder:
            raise ValueError("is_encoder_decoder=False is not allowed: the Transformer is an encoder-decoder model.")
        check_numbers(self)
        check_token_ids(self, _TOKEN_IDS, required=("pad_token_id", "eos_token_id", "decoder_start_token_id"))
        check_pruning(self, sides=("encoder", "decoder"))
        _check_converted_from(self.converted_from)
        self._validate_combinations()

    def _validate_combinations(self) -> None:
        """Raise `ValueError` for valid arguments that contradict each other (positions, FixNorm)."""
        if self.sinusoidal_layout == "fairseq" and self.d_model < 4:
            raise ValueError(
                f"sinusoidal_layout='fairseq' needs d_model >= 4 (it is {self.d_model}): fairseq's frequencies divide "
                "by d_model // 2 - 1."
            )
        if self.sinusoidal_layout != "interleaved" and self.position_embedding_type != "sinusoidal":
            raise ValueError(
                f"sinusoidal_layout={self.sinusoidal_layout!r} needs position_embedding_type='sinusoidal' (it is "
                f"{self.position_embedding_type!r}): the layout places the sines and cosines of sinusoidal positions. "
                "Leave sinusoidal_layout at 'interleaved' with learned positions."
            )
        check_fixnorm(self, rows="target embedding rows")


# The arguments of each group of `VaswaniConfig.validate`, in the order they are checked.
_SIZES = (
    "vocab_size", "d_model", "encoder_layers", "decoder_layers", "encoder_attention_heads", "decoder_attention_heads",
    "encoder_ffn_dim", "decoder_ffn_dim", "max_position_embeddings",
)  # fmt: skip
_RATES = (
    "dropout", "attention_dropout", "activation_dropout", "label_smoothing", "encoder_layerdrop", "decoder_layerdrop",
    "encoder_drophead", "decoder_drophead", "cross_drophead",
)  # fmt: skip
_FLAGS = ("scale_embedding", "share_embeddings", "tie_word_embeddings", "final_logits_bias", "fixnorm", "use_cache")
_TOKEN_IDS = ("pad_token_id", "bos_token_id", "eos_token_id", "decoder_start_token_id")


# ----------------------------------------------------------------------------------------------------------------
# The checks, shared with the one-stack configurations (configuration_vaswani_lm.py): each raises `ValueError` naming
# the argument, its value and what is allowed.
# ----------------------------------------------------------------------------------------------------------------
def check_dimensions(config: PretrainedConfig, names: tuple[str, ...], sides: tuple[str, ...]) -> None:
    """Sizes and counts (`names`) are positive integers, and each stack's number of heads divides d_model."""
    for name in names:
        _check_positive_int(name, getattr(config, name))
    for side in sides:
        heads = getattr(config, f"{side}_attention_heads")
        if config.d_model % heads:
            raise ValueError(
                f"d_model={config.d_model} is not divisible by {side}_attention_heads={heads}; choose a number "
                f"of heads that divides d_model (e.g. {_divisors_hint(config.d_model)})."
            )


def check_rates(config: PretrainedConfig, names: tuple[str, ...]) -> None:
    """Dropout, label smoothing, LayerDrop and DropHead probabilities are in [0, 1)."""
    for name in names:
        check_rate(name, getattr(config, name))


def check_flags(config: PretrainedConfig, names: tuple[str, ...]) -> None:
    """Switches are True or False (not 0, 1 or a string)."""
    for name in names:
        if not isinstance(getattr(config, name), bool):
            raise ValueError(f"{name}={getattr(config, name)!r} is not allowed; use True or False.")


def check_numbers(config: PretrainedConfig) -> None:
    """`init_std` is positive or None, `layer_norm_eps` positive, `layerdrop_seed` an integer."""
    if config.init_std is not None and not (_is_number(config.init_std) and config.init_std > 0):
        raise ValueError(f"init_std={config.init_std!r} is not allowed; use a positive float or None (d_model**-0.5).")
    if not (_is_number(config.layer_norm_eps) and config.layer_norm_eps > 0):
        raise ValueError(f"layer_norm_eps={config.layer_norm_eps!r} is not allowed; use a positive float.")
    if not isinstance(config.layerdrop_seed, int) or isinstance(config.layerdrop_seed, bool):
        raise ValueError(f"layerdrop_seed={config.layerdrop_seed!r} is not allowed; use an integer.")


def check_token_ids(config: PretrainedConfig, names: tuple[str, ...], required: tuple[str, ...]) -> None:
    """Special-token ids are ids of the vocabulary; those in `required` may not be None."""
    for name in names:
        value = getattr(config, name)
        if value is None and name in required:
            raise ValueError(f"{name}=None is not allowed; the model needs it (an id in [0, {config.vocab_size})).")
        if value is not None and not (
            isinstance(value, int) and not isinstance(value, bool) and 0 <= value < config.vocab_size
        ):
            raise ValueError(f"{name}={value!r} is not allowed; use an id in [0, vocab_size={config.vocab_size}).")


def check_pruning(config: PretrainedConfig, sides: tuple[str, ...]) -> None:
    """`{side}_layers_to_keep` are layers of the stack, and `pruned_layers` is pruning's record for these stacks."""
    for side in sides:
        _check_layers_to_keep(
            f"{side}_layers_to_keep", getattr(config, f"{side}_layers_to_keep"), getattr(config, f"{side}_layers")
        )
    pruned = config.pruned_layers
    if pruned is not None and not (
        isinstance(pruned, dict)
        and set(pruned) <= set(sides)
        and all(isinstance(v, list) and all(isinstance(i, int) for i in v) for v in pruned.values())
    ):
        layout = ", ".join(f'"{side}": [kept indices]' for side in sides)
        raise ValueError(
            f"pruned_layers={pruned!r} is not allowed; it is a record written by pruning: {{{layout}}} or None."
        )


def _check_converted_from(converted_from) -> None:
    """`converted_from` is the record of `vaswani convert`: a dict of strings (or None values), or None."""
    if converted_from is not None and not (
        isinstance(converted_from, dict)
        and all(isinstance(k, str) and isinstance(v, (str, type(None))) for k, v in converted_from.items())
    ):
        raise ValueError(
            f"converted_from={converted_from!r} is not allowed; it is a record written by `vaswani convert`: "
            '{"format": ..., "source": ..., "model_id": ..., "license": ...} (strings or None), or None.'
        )


def check_fixnorm(config: PretrainedConfig, rows: str) -> None:
    """FixNorm needs the tied output projection (its logits use the unit-length `rows`) and the scaled input."""
    if config.fixnorm and not config.tie_word_embeddings:
        raise ValueError(
            "fixnorm=True needs tie_word_embeddings=True: FixNorm computes the output logits with the unit-length "
            f"{rows}."
        )
    if config.fixnorm and not config.scale_embedding:
        raise ValueError(
            "fixnorm=True needs scale_embedding=True: FixNorm's input is the unit-length row times sqrt(d_model)."
        )


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _check_positive_int(name: str, value) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"{name}={value!r} is not allowed; use a positive integer.")


def check_rate(name: str, value) -> None:
    if not _is_number(value) or not 0.0 <= value < 1.0:
        raise ValueError(f"{name}={value!r} is not allowed; use a probability in [0, 1).")


def check_choice(name: str, value, allowed) -> None:
    if value not in allowed:
        raise ValueError(f"{name}={value!r} is not allowed; choose one of {list(allowed)}.")


def _check_layers_to_keep(name: str, keep, num_layers: int) -> None:
    if keep is None:
        return
    if (
        not isinstance(keep, (list, tuple))
        or not keep
        or not all(isinstance(i, int) and not isinstance(i, bool) for i in keep)
    ):
        raise ValueError(f"{name}={keep!r} is not allowed; use a non-empty list of layer indices, or None.")
    out_of_range = [i for i in keep if not 0 <= i < num_layers]
    if out_of_range:
        raise ValueError(
            f"{name}={list(keep)} has indices {out_of_range} outside the model's {num_layers} layers; "
            f"use indices in [0, {num_layers - 1}]."
        )
    if any(b <= a for a, b in zip(keep, keep[1:], strict=False)):
        raise ValueError(
            f"{name}={list(keep)} repeats or reorders layers; list each layer index once, in increasing order."
        )


def _divisors_hint(n: int) -> str:
    divisors = [d for d in range(2, min(n, 64) + 1) if n % d == 0]
    return ", ".join(str(d) for d in divisors[-4:]) or "1"


__all__ = ["VaswaniConfig", "PRESETS", "SINUSOIDAL_LAYOUTS"]
