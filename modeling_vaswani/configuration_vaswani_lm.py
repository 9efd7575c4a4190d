"""Configurations of the Transformer's two one-stack relatives: a decoder-only language model and an encoder-only model.

The paper's encoder-decoder has two single-stack descendants: the decoder alone, trained to predict the next token
("simply remove the cross-attention layer: there are no encoder states to process"), and the encoder alone, trained
bidirectionally (masked language modelling, BERT) or as a classifier. They are built from the same blocks as
`VaswaniModel` (see `modeling_vaswani_lm.py`).

Why two configuration classes (`model_type` "vaswani-decoder" and "vaswani-encoder") and not flags on `VaswaniConfig`:

- the generic names `num_hidden_layers`, `num_attention_heads` and `hidden_size` must mean the one stack the model
  has. `VaswaniConfig` maps them to the encoder (transformers' encoder-decoder convention), which would give a
  decoder-only model the wrong depth: `DynamicCache(config=...)` and `StaticCache` would be built for the encoder's
  layer count (the defect of `MarianForCausalLM` / `BartForCausalLM` when the two depths differ);
- `AutoModel` resolves a folder through its `model_type`: one config class maps to one base model, so a saved
  causal LM would come back from `AutoModel` as the encoder-decoder `VaswaniModel`;
- options of the other stack (`encoder_layers` on a causal LM, `cross_drophead`, `share_embeddings`,
  `decoder_start_token_id`, label smoothing) do not exist here, and passing one is a `ValueError` that names it,
  instead of a value that is saved and silently ignored;
- the seq2seq `VaswaniConfig` and the config.json files saved with it stay exactly as they were.

The argument names are those of the matching half of `VaswaniConfig` (`decoder_layers`, `decoder_ffn_dim`,
`decoder_layerdrop`, ... for the decoder; `encoder_*` for the encoder), so that the blocks read them unchanged and a
seq2seq config's half carries over by name (`from_seq2seq`).

This file imports only transformers and its sibling `configuration_vaswani.py` (it is copied next to the weights for
`trust_remote_code` loading).
"""

from dataclasses import fields
from typing import ClassVar

from transformers import PretrainedConfig
from transformers.activations import ACT2FN

from .configuration_vaswani import (
    NORM_POSITIONS,
    NORM_TYPES,
    POSITION_EMBEDDING_TYPES,
    SINUSOIDAL_LAYOUTS,
    VaswaniConfig,
    check_choice,
    check_dimensions,
    check_fixnorm,
    check_flags,
    check_numbers,
    check_pruning,
    check_rate,
    check_rates,
    check_token_ids,
)


class VaswaniSingleStackConfig(PretrainedConfig):
    r"""
    What the decoder-only and the encoder-only configurations share; not used on its own. `side` ("decoder" or
    "encoder") names the stack and the prefix of its arguments. The shared arguments mean what they mean in
    [`VaswaniConfig`]:

    Args:
        vocab_size (`int`, *optional*, defaults to 37000):
            Size of the vocabulary (the embedding and the tied output projection).
        d_model (`int`, *optional*, defaults to 512):
            Width of the model, d_model in Section 3.
        activation_function (`str`, *optional*, defaults to `"relu"`):
            Non-linearity of the feed-forward networks, any key of `transformers.activations.ACT2FN`.
        dropout (`float`, *optional*, defaults to 0.1):
            P_drop of Section 5.4, on every sublayer output and on the embedding sum. In [0, 1).
        attention_dropout (`float`, *optional*, defaults to 0.0):
            Dropout on the attention probabilities. In [0, 1).
        activation_dropout (`float`, *optional*, defaults to 0.0):
            Dropout after the FFN non-linearity. In [0, 1).
        max_position_embeddings (`int`, *optional*, defaults to 1024):
            Number of learned positions (`position_embedding_type="learned"`); sinusoids have no limit.
        position_embedding_type (`str`, *optional*, defaults to `"sinusoidal"`):
            `"sinusoidal"` (Section 3.5) or `"learned"` (Table 3, row E).
        sinusoidal_layout (`str`, *optional*, defaults to `"interleaved"`):
            Where the sines and cosines go: `"interleaved"` (the paper), `"concatenated"` (Marian's: sines in the
            first half, cosines in the second) or `"fairseq"` (fairseq's frequencies and position offset, see
            `VaswaniConfig`). Sinusoidal positions only.
        init_std (`float`, *optional*):
            Standard deviation of the embedding initialization; defaults to `d_model ** -0.5`.
        scale_embedding (`bool`, *optional*, defaults to `True`):
            Multiply the token embeddings by sqrt(d_model) (Section 3.4).
        tie_word_embeddings (`bool`, *optional*, defaults to `True`):
            Tie the output projection (next-token or masked-token logits) to the token embedding (Section 3.4).
        norm_position (`str`, *optional*, defaults to `"post"`):
            `"post"` (the paper) or `"pre"` (plus one final norm after the stack).
        norm_type (`str`, *optional*, defaults to `"layernorm"`):
            `"layernorm"` or `"scalenorm"` (Nguyen & Salazar 2019).
        layer_norm_eps (`float`, *optional*, defaults to 1e-5):
            Epsilon of LayerNorm, and the clamp of ScaleNorm's denominator.
        fixnorm (`bool`, *optional*, defaults to `False`):
            FixNorm: unit-length embedding rows at the input and in the tied output projection. Requires
            `scale_embedding=True` and `tie_word_embeddings=True`.
        layerdrop_seed (`int`, *optional*, defaults to 0):
            Seed of the generator that draws the LayerDrop decisions (the same on every data-parallel rank).
        pruned_layers (`dict[str, list[int]]`, *optional*):
            Set by pruning, for the record: `{side: [kept indices of the original model]}`.
        use_cache (`bool`, *optional*, defaults to `True`):
            Whether the model returns its key/value cache (decoder only; `generate()` uses it).
        pad_token_id (`int`, *optional*, defaults to 0):
            Padding id: masked in attention, its embedding row is zero, never a loss target.
        bos_token_id (`int`, *optional*, defaults to 1):
            Beginning-of-sequence id.
        eos_token_id (`int`, *optional*, defaults to 2):
            End-of-sequence id: ends generation, and the sequence classifier pools at it. `None` is allowed for the
            language models, which then generate until a length limit (what transformers' generation tests set);
            [`VaswaniForSequenceClassification`] refuses it.

    The loss is plain cross-entropy (so `exp(loss)` is the perplexity); the seq2seq model's `label_smoothing` is a
    translation regulariser and not an option here.
    """

    side: ClassVar[str] = ""
    keys_to_ignore_at_inference = ["past_key_values", "cache"]  # "cache": its name since transformers 5.24

    # The defaults of the encoder-decoder model (Table 3, base), read from `VaswaniConfig`.
    vocab_size: int = VaswaniConfig.vocab_size
    d_model: int = VaswaniConfig.d_model
    activation_function: str = VaswaniConfig.activation_function
    dropout: float = VaswaniConfig.dropout
    attention_dropout: float = VaswaniConfig.attention_dropout
    activation_dropout: float = VaswaniConfig.activation_dropout
    max_position_embeddings: int = VaswaniConfig.max_position_embeddings
    position_embedding_type: str = VaswaniConfig.position_embedding_type
    sinusoidal_layout: str = VaswaniConfig.sinusoidal_layout
    init_std: float | None = VaswaniConfig.init_std
    scale_embedding: bool = VaswaniConfig.scale_embedding
    tie_word_embeddings: bool = VaswaniConfig.tie_word_embeddings
    norm_position: str = VaswaniConfig.norm_position
    norm_type: str = VaswaniConfig.norm_type
    layer_norm_eps: float = VaswaniConfig.layer_norm_eps
    fixnorm: bool = VaswaniConfig.fixnorm
    layerdrop_seed: int = VaswaniConfig.layerdrop_seed
    pruned_layers: dict | None = VaswaniConfig.pruned_layers
    use_cache: bool = VaswaniConfig.use_cache
    is_encoder_decoder: bool = False
    pad_token_id: int | None = VaswaniConfig.pad_token_id
    bos_token_id: int | None = VaswaniConfig.bos_token_id
    eos_token_id: int | None = VaswaniConfig.eos_token_id

    def __post_init__(self, **kwargs):
        # An option of the encoder-decoder model that this one lacks (the other stack's, cross-attention's,
        # label smoothing, ...) would be stored and silently ignored: refuse it by name.
        own = {field.name for field in fields(self)}
        foreign = sorted(({field.name for field in fields(VaswaniConfig)} - own) & set(kwargs))
        if foreign:
            raise ValueError(
                f"{foreign[0]}={kwargs[foreign[0]]!r} is not an option of {type(self).__name__} (a {self.side}-only "
                f"model); it belongs to the encoder-decoder VaswaniConfig. This model's layer options are "
                f"{[name for name in sorted(own) if name.startswith(self.side + '_')]}."
            )
        super().__post_init__(**kwargs)
        self.validate()

    @classmethod
    def from_seq2seq(cls, config: VaswaniConfig, **overrides) -> "VaswaniSingleStackConfig":
        """This model's half of an encoder-decoder `VaswaniConfig` (same argument names), e.g. to initialise a
        masked LM from a translation model's encoder. `overrides` replace any argument."""
        generic = {field.name for field in fields(PretrainedConfig)}  # output_hidden_states, dtype, ...
        names = {field.name for field in fields(cls)} & {field.name for field in fields(VaswaniConfig)}
        names -= generic | {"is_encoder_decoder", "pruned_layers", f"{cls.side}_layers_to_keep"}
        settings = {name: getattr(config, name) for name in sorted(names)}
        return cls(**{**settings, **overrides})

    def validate(self) -> None:
        """Raise `ValueError` naming the first invalid argument, its value and what is allowed: the checks of
        `VaswaniConfig.validate`, for this model's one stack."""
        side = self.side
        stack_sizes = (f"{side}_layers", f"{side}_attention_heads", f"{side}_ffn_dim")
        check_dimensions(self, ("vocab_size", "d_model", *stack_sizes, "max_position_embeddings"), sides=(side,))
        check_rates(
            self, ("dropout", "attention_dropout", "activation_dropout", f"{side}_layerdrop", f"{side}_drophead")
        )
        check_choice("activation_function", self.activation_function, sorted(ACT2FN))
        check_choice("position_embedding_type", self.position_embedding_type, POSITION_EMBEDDING_TYPES)
        check_choice("sinusoidal_layout", self.sinusoidal_layout, SINUSOIDAL_LAYOUTS)
        if self.sinusoidal_layout == "fairseq" and self.d_model < 4:
            raise ValueError(f"sinusoidal_layout='fairseq' needs d_model >= 4 (it is {self.d_model}).")
        if self.sinusoidal_layout != "interleaved" and self.position_embedding_type != "sinusoidal":
            raise ValueError(
                f"sinusoidal_layout={self.sinusoidal_layout!r} needs position_embedding_type='sinusoidal'; leave it at "
                "'interleaved' with learned positions."
            )
        check_choice("norm_position", self.norm_position, NORM_POSITIONS)
        check_choice("norm_type", self.norm_type, NORM_TYPES)
        check_flags(self, ("scale_embedding", "tie_word_embeddings", "fixnorm", "use_cache"))
        if self.is_encoder_decoder:
            raise ValueError(
                f"is_encoder_decoder=True is not allowed for {type(self).__name__}, a {side}-only model; use "
                "VaswaniConfig for the encoder-decoder Transformer."
            )
        check_numbers(self)
        # EOS may be None: a language model without one generates until a length limit (the classifier checks it).
        check_token_ids(self, ("pad_token_id", "bos_token_id", "eos_token_id"), required=("pad_token_id",))
        check_pruning(self, sides=(side,))
        check_fixnorm(self, rows="embedding rows")


class VaswaniDecoderConfig(VaswaniSingleStackConfig):
    r"""
    Configuration of the decoder-only Transformer, [`VaswaniDecoderModel`] and [`VaswaniForCausalLM`]: the paper's
    decoder without encoder-decoder attention, a next-token language model. `num_hidden_layers`,
    `num_attention_heads` and `hidden_size` are `decoder_layers`, `decoder_attention_heads` and `d_model`. The
    shared arguments are listed in [`VaswaniSingleStackConfig`]; the decoder's own:

    Args:
        decoder_layers (`int`, *optional*, defaults to 6):
            Number of decoder layers, N in Section 3.1.
        decoder_attention_heads (`int`, *optional*, defaults to 8):
            Heads of each layer's masked self-attention, h in Section 3.2.2. Must divide `d_model`.
        decoder_ffn_dim (`int`, *optional*, defaults to 2048):
            Inner width of the position-wise feed-forward networks, d_ff in Section 3.3.
        decoder_layerdrop (`float`, *optional*, defaults to 0.0):
            LayerDrop probability of each layer in training (Fan et al. 2019). In [0, 1).
        decoder_layers_to_keep (`list[int]`, *optional*):
            Prune to these layers when the model is built or loaded (0-based, increasing).
        decoder_drophead (`float`, *optional*, defaults to 0.0):
            DropHead probability of the self-attention heads in training (Zhou et al. 2020). In [0, 1).
    """

    model_type = "vaswani-decoder"
    side: ClassVar[str] = "decoder"
    attribute_map = {
        "hidden_size": "d_model",
        "num_attention_heads": "decoder_attention_heads",
        "num_hidden_layers": "decoder_layers",
        "intermediate_size": "decoder_ffn_dim",
    }

    decoder_layers: int = VaswaniConfig.decoder_layers
    decoder_attention_heads: int = VaswaniConfig.decoder_attention_heads
    decoder_ffn_dim: int = VaswaniConfig.decoder_ffn_dim
    decoder_layerdrop: float = VaswaniConfig.decoder_layerdrop
    decoder_layers_to_keep: list[int] | None = VaswaniConfig.decoder_layers_to_keep
    decoder_drophead: float = VaswaniConfig.decoder_drophead


class VaswaniEncoderConfig(VaswaniSingleStackConfig):
    r"""
    Configuration of the encoder-only Transformer, [`VaswaniEncoderModel`], [`VaswaniForMaskedLM`] and
    [`VaswaniForSequenceClassification`]: the paper's encoder, bidirectional. `num_hidden_layers`,
    `num_attention_heads` and `hidden_size` are `encoder_layers`, `encoder_attention_heads` and `d_model`. The
    shared arguments are listed in [`VaswaniSingleStackConfig`] (`use_cache` has no effect: nothing is cached); the
    encoder's own:

    Args:
        encoder_layers (`int`, *optional*, defaults to 6):
            Number of encoder layers, N in Section 3.1.
        encoder_attention_heads (`int`, *optional*, defaults to 8):
            Heads of each layer's self-attention. Must divide `d_model`.
        encoder_ffn_dim (`int`, *optional*, defaults to 2048):
            Inner width of the position-wise feed-forward networks.
        encoder_layerdrop (`float`, *optional*, defaults to 0.0):
            LayerDrop probability of each layer in training. In [0, 1).
        encoder_layers_to_keep (`list[int]`, *optional*):
            Prune to these layers when the model is built or loaded (0-based, increasing).
        encoder_drophead (`float`, *optional*, defaults to 0.0):
            DropHead probability of the self-attention heads in training. In [0, 1).
        classifier_dropout (`float`, *optional*, defaults to 0.0):
            Dropout before each linear map of [`VaswaniForSequenceClassification`]'s head. In [0, 1).
    """

    model_type = "vaswani-encoder"
    side: ClassVar[str] = "encoder"
    attribute_map = {
        "hidden_size": "d_model",
        "num_attention_heads": "encoder_attention_heads",
        "num_hidden_layers": "encoder_layers",
        "intermediate_size": "encoder_ffn_dim",
    }

    encoder_layers: int = VaswaniConfig.encoder_layers
    encoder_attention_heads: int = VaswaniConfig.encoder_attention_heads
    encoder_ffn_dim: int = VaswaniConfig.encoder_ffn_dim
    encoder_layerdrop: float = VaswaniConfig.encoder_layerdrop
    encoder_layers_to_keep: list[int] | None = VaswaniConfig.encoder_layers_to_keep
    encoder_drophead: float = VaswaniConfig.encoder_drophead
    classifier_dropout: float = 0.0

    def validate(self) -> None:
        super().validate()
        check_rate("classifier_dropout", self.classifier_dropout)


__all__ = ["VaswaniDecoderConfig", "VaswaniEncoderConfig", "VaswaniSingleStackConfig"]
