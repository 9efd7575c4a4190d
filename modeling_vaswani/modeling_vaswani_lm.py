"""The Transformer's one-stack relatives, built from the blocks of `modeling_vaswani.py` (no layer code of their own).

- Decoder-only (`VaswaniDecoderConfig`, model_type "vaswani-decoder"): `VaswaniDecoderModel`, the paper's decoder
  stack whose layers have no encoder-decoder attention (`VaswaniDecoderLayer` builds it only for an encoder-decoder
  config), and `VaswaniForCausalLM`, a next-token language model with the tied pre-softmax projection of
  Section 3.4, a `DynamicCache` for `generate()` and labels shifted inside the model.
- Encoder-only (`VaswaniEncoderConfig`, model_type "vaswani-encoder"): `VaswaniEncoderModel`, the paper's
  bidirectional encoder stack, `VaswaniForMaskedLM` (BERT's objective, tied projection) and
  `VaswaniForSequenceClassification`.

Reading order: the two families' `PreTrainedModel` classes, the base models, the heads. Every option of the
encoder-decoder model that applies to one stack works here (norm position and type, FixNorm, learned positions,
activations, LayerDrop with `*_layers_to_keep` pruning at load, DropHead with its schedule, gradient checkpointing,
the attention backends): the blocks resolve them in `__init__` as they do for `VaswaniModel`.

This file imports only torch, transformers and its siblings, so a saved folder loads with `trust_remote_code=True`.
"""

import torch
from torch import nn
from transformers import PreTrainedModel
from transformers.cache_utils import Cache, DynamicCache
from transformers.modeling_outputs import (
    BaseModelOutputWithPast,
    CausalLMOutputWithPast,
    MaskedLMOutput,
    SequenceClassifierOutput,
)
from transformers.utils.generic import can_return_tuple
from transformers.utils.output_capturing import capture_outputs

from .configuration_vaswani_lm import VaswaniDecoderConfig, VaswaniEncoderConfig
from .generation_vaswani import CACHE_FIELD, VaswaniGenerationMixin, cache_argument, output_cache
from .modeling_vaswani import (
    FixNormLinear,
    VaswaniAttention,
    VaswaniDecoder,
    VaswaniDecoderLayer,
    VaswaniEncoder,
    VaswaniPreTrainedModel,
    causal_mask,
)


def output_projection(config: VaswaniDecoderConfig | VaswaniEncoderConfig) -> nn.Linear:
    """The pre-softmax projection d_model -> vocabulary (Section 3.4), without bias; with FixNorm its logits use the
    unit-length rows of the (tied) embedding."""
    return (FixNormLinear if config.fixnorm else nn.Linear)(config.d_model, config.vocab_size, bias=False)


def pad_labels_ignored(labels: torch.Tensor, pad_token_id: int) -> torch.Tensor:
    """Labels with PAD turned into -100, transformers' ignored index: a PAD is never a prediction target (a batch
    padded by hand with `labels=input_ids` trains like one from `DataCollatorForLanguageModeling`)."""
    return labels.masked_fill(labels == pad_token_id, -100)


class VaswaniLMHeadMixin:
    """What the two language models share, [`VaswaniForCausalLM`] and [`VaswaniForMaskedLM`]: their one-stack base
    model under `model` (the class named by `base_model_class`) and the pre-softmax projection `lm_head` of
    `output_projection`, tied to the token embedding with `tie_word_embeddings` (Section 3.4). Listed first among
    the bases, so that its `__init__` and output-embedding accessors are the ones used; each model keeps an
    `__init__` typed with its own config class (its public signature), which calls this one."""

    base_model_class: type[PreTrainedModel]

    def __init__(self, config: VaswaniDecoderConfig | VaswaniEncoderConfig):
        config.validate()
        super().__init__(config)
        self.model = self.base_model_class(config)
        self.lm_head = output_projection(config)
        self._tied_weights_keys = {"lm_head.weight": "model.embed_tokens.weight"} if config.tie_word_embeddings else {}
        self.post_init()

    def get_output_embeddings(self) -> nn.Linear:
        return self.lm_head

    def set_output_embeddings(self, new_embeddings: nn.Linear) -> None:
        self.lm_head = new_embeddings


# ----------------------------------------------------------------------------------------------------------------
# Decoder-only: the language model
# ----------------------------------------------------------------------------------------------------------------
class VaswaniDecoderPreTrainedModel(VaswaniPreTrainedModel):
    """Initialization, pruning (`decoder_layers_to_keep`), DropHead ("decoder" only) and saving of the decoder-only
    models, inherited from `VaswaniPreTrainedModel` with this family's config, stack and Auto classes."""

    config: VaswaniDecoderConfig
    config_class = VaswaniDecoderConfig
    _no_split_modules = ["VaswaniDecoderLayer"]
    stack_sides = ("decoder",)
    auto_classes = {"AutoModel": "VaswaniDecoderModel", "AutoModelForCausalLM": "VaswaniForCausalLM"}
    carries_translation_pipeline = False
    resize_token_embeddings = PreTrainedModel.resize_token_embeddings  # one embedding matrix: nothing to add


class VaswaniDecoderModel(VaswaniDecoderPreTrainedModel, VaswaniDecoder):
    """The decoder-only Transformer: token embeddings, `VaswaniStackEmbedding`'s input recipe, `decoder_layers`
    [`VaswaniDecoderLayer`]s with masked (causal) self-attention and no encoder-decoder attention, and (PreNorm) a
    final norm. Returns the last hidden states and the key/value cache (a `DynamicCache`)."""

    _can_record_outputs = {"hidden_states": VaswaniDecoderLayer, "attentions": VaswaniAttention}

    def __init__(self, config: VaswaniDecoderConfig):
        config.validate()
        super().__init__(config)
        self.prune_layers(decoder_layers_to_keep=config.decoder_layers_to_keep)

    @capture_outputs
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.LongTensor | None = None,
        past_key_values: Cache | None = None,
        inputs_embeds: torch.Tensor | None = None,
        use_cache: bool | None = None,
        **kwargs,
    ) -> BaseModelOutputWithPast:
        r"""
        input_ids (`torch.LongTensor` of shape `(batch_size, length)`): the tokens (only the new ones when a cache is
            given).
        attention_mask (`torch.Tensor` of shape `(batch_size, past + length)`, *optional*): 1 for tokens, 0 for PAD
            (left padding for generation), combined with the causal mask.
        position_ids (`torch.LongTensor` of shape `(batch_size, length)`, *optional*): the position of each token,
            by default past + 0, 1, ... `generate()` derives them from the attention mask (`cumsum - 1`), so a
            left-padded row gets the positions it would have without its padding.
        past_key_values (`DynamicCache`, *optional*): the key/value cache of the earlier tokens (also taken as
            `cache`, transformers >= 5.24's name).
        """
        past_key_values = cache_argument(past_key_values, kwargs)
        if (input_ids is None) == (inputs_embeds is None):
            raise ValueError("Pass exactly one of input_ids or inputs_embeds to the decoder-only model.")
        use_cache = use_cache if use_cache is not None else self.config.use_cache
        if use_cache and past_key_values is None:
            past_key_values = DynamicCache(config=self.config)
        past_length = past_key_values.get_seq_length() if past_key_values is not None else 0

        if inputs_embeds is None:
            inputs_embeds = self.embed_tokens(input_ids)  # (B, T, d)
        hidden_states = self.embeddings(inputs_embeds, past_length=past_length, position_ids=position_ids)
        self_attention_mask = causal_mask(
            past_key_values,
            config=self.config,
            inputs_embeds=hidden_states,
            attention_mask=attention_mask,
            position_ids=position_ids,
        )
        skip = self.layerdrop.sample(len(self.layers), self.training)
        for layer, skipped in zip(self.layers, skip, strict=True):
            if not skipped:
                hidden_states = layer(hidden_states, self_attention_mask, past_key_values=past_key_values, **kwargs)
        if self.layer_norm is not None:
            hidden_states = self.layer_norm(hidden_states)
        return BaseModelOutputWithPast(
            last_hidden_state=hidden_states, **{CACHE_FIELD: past_key_values if use_cache else None}
        )


class VaswaniForCausalLM(VaswaniLMHeadMixin, VaswaniDecoderPreTrainedModel, VaswaniGenerationMixin):
    """The decoder-only Transformer as a next-token language model: the decoder stack and the pre-softmax projection
    tied to the token embedding (Section 3.4; FixNorm-aware). Labels are shifted inside the model (GPT-2's and the
    `Trainer`'s convention): `labels=input_ids` trains position t to predict token t + 1, which is what
    `DataCollatorForLanguageModeling(mlm=False)` expects. `generate()` works with a `DynamicCache` (greedy,
    sampling, beam search) and left-padded prompts.

    This project's tokenizer appends `</s>` to every text (the end the model learns to predict); a prompt to continue
    is tokenized without it: `tokenizer(prompt, add_special_tokens=False)`, or
    `pipeline("text-generation", model=folder)(prompt, add_special_tokens=False)` (transformers 5's pipeline uses
    the tokenizer's defaults)."""

    base_model_class = VaswaniDecoderModel

    def __init__(self, config: VaswaniDecoderConfig):
        super().__init__(config)  # VaswaniLMHeadMixin: the decoder under `model`, the output projection `lm_head`

    def generate(self, *args, **kwargs):
        """`GenerationMixin.generate`, FixNorm's output rows normalised once (`output_rows_normalized_once`)."""
        with self.output_rows_normalized_once():
            return super().generate(*args, **kwargs)

    @can_return_tuple
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.LongTensor | None = None,
        past_key_values: Cache | None = None,
        inputs_embeds: torch.Tensor | None = None,
        labels: torch.LongTensor | None = None,
        use_cache: bool | None = None,
        num_items_in_batch: int | torch.Tensor | None = None,
        logits_to_keep: int | torch.Tensor = 0,
        **kwargs,
    ) -> CausalLMOutputWithPast:
        r"""
        input_ids, attention_mask, position_ids, past_key_values (or `cache`): see [`VaswaniDecoderModel.forward`].
        labels (`torch.LongTensor` of shape `(batch_size, length)`, *optional*): usually the input ids themselves;
            the model shifts them, so the logits at position t are scored against labels[:, t + 1] and the last
            position has no target. -100 and PAD are ignored. The loss is the cross-entropy averaged over the
            scored tokens (`exp(loss)` is the perplexity).
        num_items_in_batch (*optional*): number of scored tokens in the whole (accumulated) batch, passed by the
            `Trainer`; the loss is then the token sum divided by it, so gradient accumulation averages correctly.
        logits_to_keep (`int` or `torch.Tensor`, *optional*, defaults to 0): compute logits only for the last
            `logits_to_keep` positions (0: all), or for the positions listed in a 1-D tensor; `generate()` passes 1.
        """
        past_key_values = cache_argument(past_key_values, kwargs)
        if labels is not None:
            if not (isinstance(logits_to_keep, int) and logits_to_keep == 0):
                raise ValueError(
                    f"logits_to_keep={logits_to_keep!r} cannot be combined with labels: the loss needs the logits of "
                    "every position. Leave logits_to_keep at 0 when passing labels."
                )
            use_cache = False  # training: no cache to build (as in VaswaniForConditionalGeneration)
        outputs = self.model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            past_key_values=past_key_values,
            inputs_embeds=inputs_embeds,
            use_cache=use_cache,
            **kwargs,
        )
        hidden_states = outputs.last_hidden_state  # (B, T, d)
        keep = slice(-logits_to_keep, None) if isinstance(logits_to_keep, int) else logits_to_keep
        logits = self.lm_head(hidden_states[:, keep])  # (B, T', V)

        loss = None
        if labels is not None:
            loss = self.loss_function(
                logits=logits,
                labels=pad_labels_ignored(labels, self.config.pad_token_id),
                vocab_size=self.config.vocab_size,
                num_items_in_batch=num_items_in_batch,
            )  # transformers' ForCausalLMLoss: shifts the labels one to the left
        return CausalLMOutputWithPast(
            loss=loss,
            logits=logits,
            **{CACHE_FIELD: output_cache(outputs)},
            hidden_states=outputs.hidden_states,
            attentions=outputs.attentions,
        )


# ----------------------------------------------------------------------------------------------------------------
# Encoder-only: masked language model and sequence classifier
# ----------------------------------------------------------------------------------------------------------------
class VaswaniEncoderPreTrainedModel(VaswaniPreTrainedModel):
    """Initialization, pruning (`encoder_layers_to_keep`), DropHead ("encoder" only) and saving of the encoder-only
    models, inherited from `VaswaniPreTrainedModel` with this family's config, stack and Auto classes."""

    config: VaswaniEncoderConfig
    config_class = VaswaniEncoderConfig
    _no_split_modules = ["VaswaniEncoderLayer"]
    stack_sides = ("encoder",)
    auto_classes = {
        "AutoModel": "VaswaniEncoderModel",
        "AutoModelForMaskedLM": "VaswaniForMaskedLM",
        "AutoModelForSequenceClassification": "VaswaniForSequenceClassification",
    }
    carries_translation_pipeline = False
    resize_token_embeddings = PreTrainedModel.resize_token_embeddings  # one embedding matrix: nothing to add


class VaswaniEncoderModel(VaswaniEncoderPreTrainedModel, VaswaniEncoder):
    """The encoder-only Transformer: exactly the encoder stack of `VaswaniModel` (bidirectional self-attention,
    `encoder_layers` [`VaswaniEncoderLayer`]s, PreNorm's final norm), with a config of its own. Its `forward` is
    `VaswaniEncoder.forward`: input_ids (B, S) with attention_mask (B, S) -> last_hidden_state (B, S, d)."""

    def __init__(self, config: VaswaniEncoderConfig):
        config.validate()
        super().__init__(config)
        self.prune_layers(encoder_layers_to_keep=config.encoder_layers_to_keep)


class VaswaniForMaskedLM(VaswaniLMHeadMixin, VaswaniEncoderPreTrainedModel):
    """The encoder with a masked-language-model head (BERT's objective): the pre-softmax projection tied to the
    token embedding (Section 3.4; FixNorm-aware), applied to the encoder's last hidden states. Unlike BERT there is
    no extra dense + norm transform before it: the paper's output layer is the tied projection alone, and the
    encoder output is already normalized (PostNorm's last norm, or PreNorm's final norm)."""

    base_model_class = VaswaniEncoderModel

    def __init__(self, config: VaswaniEncoderConfig):
        super().__init__(config)  # VaswaniLMHeadMixin: the encoder under `model`, the output projection `lm_head`

    @can_return_tuple
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        labels: torch.LongTensor | None = None,
        num_items_in_batch: int | torch.Tensor | None = None,
        **kwargs,
    ) -> MaskedLMOutput:
        r"""
        input_ids (`torch.LongTensor` of shape `(batch_size, length)`): tokens, some replaced by the mask token.
        attention_mask (`torch.Tensor` of shape `(batch_size, length)`, *optional*): 1 for tokens, 0 for PAD.
        labels (`torch.LongTensor` of shape `(batch_size, length)`, *optional*): the original token at each masked
            position, -100 elsewhere (`DataCollatorForLanguageModeling`'s output); not shifted. PAD is ignored too.
        num_items_in_batch (*optional*): number of scored tokens in the whole (accumulated) batch (`Trainer`).
        """
        outputs = self.model(input_ids=input_ids, attention_mask=attention_mask, inputs_embeds=inputs_embeds, **kwargs)
        logits = self.lm_head(outputs.last_hidden_state)  # (B, S, V)
        loss = None
        if labels is not None:
            loss = self.loss_function(
                logits=logits,
                labels=pad_labels_ignored(labels, self.config.pad_token_id),
                vocab_size=self.config.vocab_size,
                num_items_in_batch=num_items_in_batch,
            )  # transformers' ForMaskedLMLoss: no shift
        return MaskedLMOutput(
            loss=loss, logits=logits, hidden_states=outputs.hidden_states, attentions=outputs.attentions
        )


class VaswaniClassificationHead(nn.Module):
    """BART's sentence-classification head: dropout, dense d -> d, tanh, dropout, projection d -> num_labels."""

    def __init__(self, config: VaswaniEncoderConfig):
        super().__init__()
        self.dense = nn.Linear(config.d_model, config.d_model)
        self.dropout = nn.Dropout(config.classifier_dropout)
        self.out_proj = nn.Linear(config.d_model, config.num_labels)

    def forward(self, pooled: torch.Tensor) -> torch.Tensor:
        """(B, d) -> (B, num_labels)"""
        hidden = torch.tanh(self.dense(self.dropout(pooled)))
        return self.out_proj(self.dropout(hidden))


class VaswaniForSequenceClassification(VaswaniEncoderPreTrainedModel):
    """The encoder with a sentence-classification (or regression) head.

    Pooling: the hidden state of each row's **last EOS token**, as transformers' encoder-decoder classifiers
    (`BartForSequenceClassification`) pool, through BART's head (dense + tanh + projection). Why not the first
    token, as BERT does: BERT's tokenizer puts a [CLS] there for the purpose, while this project's tokenizer adds no
    BOS and appends `</s>` to every sequence, so the first position holds an ordinary word and the final EOS is the
    one token that every input has in the same role. The encoder is bidirectional, so the EOS state sees the whole
    sentence. A config with `eos_token_id=None`, a row without EOS, or input given only as `inputs_embeds` is a
    `ValueError`.

    The loss follows `config.problem_type` as in every transformers classifier: regression (MSE) for
    `num_labels=1`, single-label cross-entropy for integer labels, multi-label BCE for float label vectors.
    """

    def __init__(self, config: VaswaniEncoderConfig):
        config.validate()
        self.pooling_token_id(config)
        super().__init__(config)
        self.model = VaswaniEncoderModel(config)
        self.classification_head = VaswaniClassificationHead(config)
        self.post_init()

    @staticmethod
    def pooling_token_id(config: VaswaniEncoderConfig) -> int:
        """The EOS id the classifier pools at; a `ValueError` when the config has none (the language models accept
        `eos_token_id=None`, this head cannot)."""
        if config.eos_token_id is None:
            raise ValueError(
                "VaswaniForSequenceClassification pools at each row's EOS token and needs eos_token_id (it is None); "
                "set it to the tokenizer's EOS id (tokenizer.eos_token_id)."
            )
        return config.eos_token_id

    @can_return_tuple
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        **kwargs,
    ) -> SequenceClassifierOutput:
        r"""
        input_ids (`torch.LongTensor` of shape `(batch_size, length)`): tokens, each row with an EOS (the tokenizer
            appends one), padded on the right (the tokenizer's default: the encoder's positions count from the first
            column, as in the encoder-decoder model).
        labels (`torch.Tensor` of shape `(batch_size,)` or `(batch_size, num_labels)`, *optional*): class ids,
            regression targets or multi-label 0/1 vectors.
        """
        if input_ids is None:
            raise ValueError(
                "VaswaniForSequenceClassification pools at each row's EOS token and needs input_ids to find it."
            )
        eos_token_id = self.pooling_token_id(self.config)
        kwargs.pop("num_items_in_batch", None)  # the classification loss is a mean over rows
        outputs = self.model(input_ids=input_ids, attention_mask=attention_mask, inputs_embeds=inputs_embeds, **kwargs)
        is_eos = input_ids == eos_token_id  # (B, S)
        if not is_eos.any(dim=-1).all():
            raise ValueError(
                f"Every row of input_ids needs an EOS token (id {eos_token_id}), at whose position the "
                "classifier pools; the tokenizer appends one unless called with add_special_tokens=False."
            )
        positions = torch.arange(input_ids.shape[1], device=input_ids.device)  # (S,)
        last_eos = torch.where(is_eos, positions, -1).amax(dim=-1)  # (B,)
        pooled = outputs.last_hidden_state[
            torch.arange(input_ids.shape[0], device=input_ids.device), last_eos
        ]  # (B, d)
        logits = self.classification_head(pooled)  # (B, num_labels)
        loss = None
        if labels is not None:
            loss = self.loss_function(labels=labels, pooled_logits=logits, config=self.config)
        return SequenceClassifierOutput(
            loss=loss, logits=logits, hidden_states=outputs.hidden_states, attentions=outputs.attentions
        )


__all__ = [
    "VaswaniDecoderModel",
    "VaswaniDecoderPreTrainedModel",
    "VaswaniEncoderModel",
    "VaswaniEncoderPreTrainedModel",
    "VaswaniForCausalLM",
    "VaswaniForMaskedLM",
    "VaswaniForSequenceClassification",
]
