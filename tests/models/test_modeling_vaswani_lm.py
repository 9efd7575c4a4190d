"""The decoder-only and encoder-only Transformers (modeling_vaswani_lm.py): independent torch.nn references, the
seq2seq encoder, causality, the cache, left padding, the shifted loss, configuration, options, saving and the Auto
classes (installed and through trust_remote_code)."""

import copy
import json
import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from conftest import assert_static_cache_generate_compiles, tiny_model
from safetensors.torch import load_file
from test_modeling_vaswani import _copy_module
from test_pipeline_vaswani import PAIRS
from torch import nn
from transformers import (
    AutoConfig,
    AutoModel,
    AutoModelForCausalLM,
    AutoModelForMaskedLM,
    AutoModelForSeq2SeqLM,
    AutoModelForSequenceClassification,
    DataCollatorForLanguageModeling,
    Trainer,
    TrainingArguments,
    pipeline,
)
from transformers.cache_utils import DynamicCache

from modeling_vaswani import (
    DropHeadScheduler,
    VaswaniConfig,
    VaswaniDecoderConfig,
    VaswaniDecoderModel,
    VaswaniEncoderConfig,
    VaswaniEncoderModel,
    VaswaniForCausalLM,
    VaswaniForMaskedLM,
    VaswaniForSequenceClassification,
    sinusoidal_position_table,
)
from tokenization import train_bpe_tokenizer

ATTENTION_BACKENDS = ["eager", "sdpa"]
TINY_DECODER = {"vocab_size": 99, "d_model": 16, "decoder_layers": 2, "decoder_attention_heads": 4,
                "decoder_ffn_dim": 32, "max_position_embeddings": 64}  # fmt: skip
TINY_ENCODER = {"vocab_size": 99, "d_model": 16, "encoder_layers": 2, "encoder_attention_heads": 4,
                "encoder_ffn_dim": 32, "max_position_embeddings": 64}  # fmt: skip


def causal_lm(seed: int = 0, backend: str | None = None, **overrides) -> VaswaniForCausalLM:
    torch.manual_seed(seed)
    config = VaswaniDecoderConfig(**{**TINY_DECODER, **overrides})
    if backend is not None:
        config._attn_implementation = backend
    return VaswaniForCausalLM(config).eval()


def masked_lm(seed: int = 0, **overrides) -> VaswaniForMaskedLM:
    torch.manual_seed(seed)
    return VaswaniForMaskedLM(VaswaniEncoderConfig(**{**TINY_ENCODER, **overrides})).eval()


def random_ids(batch_size=3, length=9, seed=0) -> torch.Tensor:
    """Token ids in [4, 99): no PAD (0), BOS (1), EOS (2) or UNK (3)."""
    return torch.randint(4, 99, (batch_size, length), generator=torch.Generator().manual_seed(seed))


# ---------------------------------------------------------------------------------------------------------------
# Configuration
# ---------------------------------------------------------------------------------------------------------------
def test_generic_names_are_the_one_stack_of_each_variant():
    decoder = VaswaniDecoderConfig(**{**TINY_DECODER, "decoder_layers": 3, "decoder_attention_heads": 2})
    assert (decoder.num_hidden_layers, decoder.num_attention_heads, decoder.hidden_size) == (3, 2, 16)
    assert decoder.model_type == "vaswani-decoder" and decoder.is_encoder_decoder is False
    assert len(DynamicCache(config=decoder).layers) == 3  # the cache is built for the decoder's depth
    encoder = VaswaniEncoderConfig(**{**TINY_ENCODER, "encoder_layers": 5})
    assert (encoder.num_hidden_layers, encoder.num_attention_heads, encoder.hidden_size) == (5, 4, 16)
    assert encoder.model_type == "vaswani-encoder"
    # The seq2seq config is unchanged: its generic names still mean the encoder.
    seq2seq = VaswaniConfig(encoder_layers=2, decoder_layers=4)
    assert seq2seq.model_type == "vaswani" and seq2seq.num_hidden_layers == 2


@pytest.mark.parametrize(
    ("config_class", "option", "value"),
    [
        (VaswaniDecoderConfig, "cross_drophead", 0.1),
        (VaswaniDecoderConfig, "encoder_layers", 3),
        (VaswaniDecoderConfig, "label_smoothing", 0.1),
        (VaswaniDecoderConfig, "decoder_start_token_id", 1),
        (VaswaniEncoderConfig, "decoder_layers", 3),
        (VaswaniEncoderConfig, "share_embeddings", False),
    ],
)
def test_an_option_of_the_other_stack_is_refused_by_name(config_class, option, value):
    with pytest.raises(ValueError, match=rf"^{option}={value!r} is not an option of {config_class.__name__}"):
        config_class(**{option: value})


@pytest.mark.parametrize(
    ("config_class", "overrides", "message"),
    [
        (VaswaniDecoderConfig, {"decoder_attention_heads": 5}, "d_model=512 is not divisible by decoder_attention_heads=5"),
        (VaswaniDecoderConfig, {"decoder_drophead": 1.0}, "decoder_drophead=1.0"),
        (VaswaniDecoderConfig, {"fixnorm": True, "tie_word_embeddings": False}, "fixnorm=True needs tie_word"),
        (VaswaniDecoderConfig, {"is_encoder_decoder": True}, "is_encoder_decoder=True is not allowed"),
        (VaswaniDecoderConfig, {"decoder_layers_to_keep": [0, 7]}, "decoder_layers_to_keep"),
        (VaswaniEncoderConfig, {"norm_type": "rmsnorm"}, "norm_type='rmsnorm'"),
        (VaswaniDecoderConfig, {"sinusoidal_layout": "halves"}, "sinusoidal_layout='halves'"),
        (VaswaniDecoderConfig, {"sinusoidal_layout": "concatenated", "position_embedding_type": "learned"},
         "sinusoidal_layout='concatenated' needs position_embedding_type='sinusoidal'"),
        (VaswaniEncoderConfig, {"encoder_layerdrop": -0.1}, "encoder_layerdrop=-0.1"),
        (VaswaniEncoderConfig, {"classifier_dropout": 2}, "classifier_dropout=2"),
        (VaswaniEncoderConfig, {"pruned_layers": {"decoder": [0]}}, "pruned_layers="),
    ],
)  # fmt: skip
def test_invalid_values_and_combinations_name_the_option(config_class, overrides, message):
    with pytest.raises(ValueError, match=message):
        config_class(**overrides)


def test_eos_none_is_accepted_by_the_language_models_and_refused_by_the_classifier(tmp_path):
    """A pure language model may have no EOS (it generates until a length limit); the classifier pools at EOS."""
    lm = causal_lm(eos_token_id=None)
    lm.save_pretrained(tmp_path / "lm")
    reloaded = VaswaniForCausalLM.from_pretrained(tmp_path / "lm")
    assert reloaded.config.eos_token_id is None and reloaded.generation_config.eos_token_id is None
    with torch.no_grad():
        assert masked_lm(eos_token_id=None)(random_ids()).logits.shape == (3, 9, 99)
    message = r"VaswaniForSequenceClassification pools at each row's EOS token and needs eos_token_id \(it is None\)"
    with pytest.raises(ValueError, match=message):
        VaswaniForSequenceClassification(VaswaniEncoderConfig(**TINY_ENCODER, num_labels=2, eos_token_id=None))
    classifier = VaswaniForSequenceClassification(VaswaniEncoderConfig(**TINY_ENCODER, num_labels=2))
    classifier.config.eos_token_id = None  # changed after the model was built
    with pytest.raises(ValueError, match=message):
        classifier(random_ids())
    # None is allowed, a wrong id is not, and PAD is still required
    with pytest.raises(ValueError, match=r"eos_token_id=99 is not allowed; use an id in \[0, vocab_size=99\)"):
        VaswaniDecoderConfig(**TINY_DECODER, eos_token_id=99)
    with pytest.raises(ValueError, match="pad_token_id=None is not allowed"):
        VaswaniEncoderConfig(**TINY_ENCODER, pad_token_id=None)


def test_from_seq2seq_takes_the_matching_half():
    seq2seq = VaswaniConfig(d_model=32, encoder_layers=3, decoder_layers=5, decoder_ffn_dim=48, norm_position="pre",
                            decoder_drophead=0.2, cross_drophead=0.3, label_smoothing=0.2)  # fmt: skip
    decoder = VaswaniDecoderConfig.from_seq2seq(seq2seq)
    assert (decoder.decoder_layers, decoder.decoder_ffn_dim, decoder.decoder_drophead) == (5, 48, 0.2)
    assert decoder.norm_position == "pre" and decoder.d_model == 32 and not hasattr(decoder, "cross_drophead")
    assert VaswaniEncoderConfig.from_seq2seq(seq2seq, encoder_layers=2).encoder_layers == 2


# ---------------------------------------------------------------------------------------------------------------
# Independent references
# ---------------------------------------------------------------------------------------------------------------
DECODER_ONLY_TO_TORCH_NN = {  # our decoder-only layer -> nn.TransformerEncoderLayer
    "self_attn": "self_attn",
    "self_attn_residual.norm": "norm1",
    "ffn.fc1": "linear1",
    "ffn.fc2": "linear2",
    "ffn_residual.norm": "norm2",
}


@pytest.mark.parametrize("norm_position", ["post", "pre"])
def test_decoder_only_equals_torch_nn_encoder_layers_with_a_causal_mask(norm_position):
    model = causal_lm(seed=1, norm_position=norm_position)
    config = model.config
    layers = []
    for ours in model.model.layers:
        ref = nn.TransformerEncoderLayer(config.d_model, config.decoder_attention_heads, config.decoder_ffn_dim,
                                         dropout=0.0, batch_first=True, norm_first=norm_position == "pre",
                                         layer_norm_eps=config.layer_norm_eps)  # fmt: skip
        for our_name, their_name in DECODER_ONLY_TO_TORCH_NN.items():
            _copy_module(ours.get_submodule(our_name), ref.get_submodule(their_name))
        layers.append(ref.eval())
    assert not any("encoder_attn" in name for name, _ in model.named_parameters())  # no cross-attention weights
    input_ids = random_ids(seed=1)
    with torch.no_grad():
        logits = model(input_ids).logits
        embedding = model.model.embed_tokens.weight
        hidden = embedding[input_ids] * math.sqrt(config.d_model) + sinusoidal_position_table(9, config.d_model)
        causal = nn.Transformer.generate_square_subsequent_mask(input_ids.shape[1])
        for layer in layers:
            hidden = layer(hidden, src_mask=causal, is_causal=True)
        if norm_position == "pre":
            final = nn.LayerNorm(config.d_model, eps=config.layer_norm_eps)
            _copy_module(model.model.layer_norm, final)
            hidden = final(hidden)
        reference = hidden @ embedding.T  # the tied pre-softmax projection
    assert (model.model.layer_norm is None) == (norm_position == "post")
    torch.testing.assert_close(logits, reference, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize(
    "options",
    [{}, {"norm_position": "pre", "norm_type": "scalenorm", "fixnorm": True}, {"sinusoidal_layout": "concatenated"}],
)
def test_encoder_only_equals_the_seq2seq_encoder_with_the_same_weights(options):
    seq2seq = tiny_model(seed=2, **options).eval()
    encoder = VaswaniEncoderModel(VaswaniEncoderConfig.from_seq2seq(seq2seq.config)).eval()
    assert encoder.config.sinusoidal_layout == seq2seq.config.sinusoidal_layout  # carried over with the half
    encoder.load_state_dict(seq2seq.model.encoder.state_dict(), strict=True)
    input_ids = random_ids(seed=2)
    attention_mask = torch.ones_like(input_ids)
    attention_mask[1, -3:] = 0
    with torch.no_grad():
        ours = encoder(input_ids, attention_mask).last_hidden_state
        theirs = seq2seq.get_encoder()(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
    assert torch.equal(ours, theirs)


# ---------------------------------------------------------------------------------------------------------------
# Causality, cache, left padding
# ---------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("backend", ATTENTION_BACKENDS)
def test_causal_lm_is_causal_and_masked_lm_is_bidirectional(backend):
    input_ids = random_ids(seed=3)
    t, k = 3, 2
    changed = input_ids.clone()
    changed[:, t + k] = (changed[:, t + k] - 4 + 1) % 95 + 4  # another ordinary token
    causal, bidirectional = causal_lm(seed=3, backend=backend), masked_lm(seed=3)
    bidirectional.config._attn_implementation = backend
    with torch.no_grad():
        a, b = causal(input_ids).logits, causal(changed).logits
        c, d = bidirectional(input_ids).logits, bidirectional(changed).logits
    torch.testing.assert_close(a[:, : t + k], b[:, : t + k], atol=0, rtol=0)
    assert not torch.allclose(a[:, t + k], b[:, t + k])
    assert not torch.allclose(c[:, :t], d[:, :t])  # earlier positions see the later token


def test_attention_weights_and_hidden_states_are_returned_with_eager():
    causal, masked = causal_lm(seed=23, backend="eager"), masked_lm(seed=23)
    masked.config._attn_implementation = "eager"
    input_ids = random_ids(seed=23)
    with torch.no_grad():
        a = causal(input_ids, output_attentions=True, output_hidden_states=True)
        b = masked(input_ids, output_attentions=True, output_hidden_states=True)
    assert len(a.hidden_states) == len(b.hidden_states) == 3 and len(a.attentions) == len(b.attentions) == 2
    assert a.attentions[0].shape == (3, 4, 9, 9)
    later = torch.ones(9, 9, dtype=torch.bool).triu(1)  # (query, key) pairs with the key after the query
    assert (a.attentions[0][..., later] == 0).all()  # no attention to later tokens
    assert (b.attentions[0][..., later] > 0).all()  # the encoder attends everywhere
    torch.testing.assert_close(a.attentions[1].sum(-1), torch.ones(3, 4, 9))


@pytest.mark.parametrize("backend", ATTENTION_BACKENDS)
@pytest.mark.parametrize(
    "options",
    [{}, {"norm_position": "pre", "norm_type": "scalenorm", "fixnorm": True},
     {"position_embedding_type": "learned", "activation_function": "gelu"}],
)  # fmt: skip
@pytest.mark.parametrize("cache_name", ["past_key_values", "cache"])  # transformers 5.24 renamed it: both work
def test_step_by_step_cached_decoding_equals_the_full_forward(backend, options, cache_name):
    model = causal_lm(seed=4, backend=backend, **options)
    input_ids = random_ids(seed=4)
    with torch.no_grad():
        full = model(input_ids, use_cache=False).logits
        cache, steps = None, []
        for t in range(input_ids.shape[1]):
            out = model(input_ids[:, t : t + 1], use_cache=True, **{cache_name: cache})
            cache = out.past_key_values
            steps.append(out.logits)
    assert isinstance(cache, DynamicCache) and cache.get_seq_length() == input_ids.shape[1]
    torch.testing.assert_close(torch.cat(steps, dim=1), full, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("backend", ATTENTION_BACKENDS)
@pytest.mark.parametrize(
    "mode", [{"do_sample": False}, {"do_sample": True, "top_k": 20}, {"num_beams": 3, "do_sample": False}]
)
def test_generate_with_and_without_cache_gives_the_same_tokens(backend, mode):
    model = causal_lm(seed=5, backend=backend)
    prompt = random_ids(batch_size=2, length=4, seed=5)
    tokens = {}
    for use_cache in (True, False):
        torch.manual_seed(0)
        tokens[use_cache] = model.generate(prompt, max_new_tokens=8, min_new_tokens=8, use_cache=use_cache, **mode)
    assert tokens[True].shape == (2, 12) and torch.equal(tokens[True][:, :4], prompt)
    assert torch.equal(tokens[True], tokens[False])


@pytest.mark.parametrize("backend", ATTENTION_BACKENDS)
@pytest.mark.parametrize("layout", ["interleaved", "concatenated", "fairseq"])
def test_left_padding_with_mask_derived_positions_gives_the_same_last_logits(backend, layout):
    model = causal_lm(seed=6, backend=backend, sinusoidal_layout=layout)
    input_ids = random_ids(batch_size=2, length=7, seed=6)
    pads = 32
    padded = F.pad(input_ids, (pads, 0), value=model.config.pad_token_id)
    mask = F.pad(torch.ones_like(input_ids), (pads, 0), value=0)
    position_ids = (mask.cumsum(-1) - 1).clamp(min=0)  # what generate() derives from the mask
    with torch.no_grad():
        plain = model(input_ids).logits[:, -1]
        left = model(padded, attention_mask=mask, position_ids=position_ids).logits[:, -1]
    torch.testing.assert_close(left, plain, atol=1e-5, rtol=1e-5)
    # generate() builds those positions itself: a left-padded batch continues each row as it would alone.
    short = input_ids[1:, 3:]  # a shorter second prompt, left-padded to the first one's length
    batch = torch.cat([input_ids[:1], F.pad(short, (3, 0), value=0)])
    batch_mask = torch.cat([torch.ones(1, 7, dtype=torch.long), F.pad(torch.ones_like(short), (3, 0), value=0)])
    together = model.generate(batch, attention_mask=batch_mask, max_new_tokens=6, min_new_tokens=6, do_sample=False)
    alone = model.generate(short, max_new_tokens=6, min_new_tokens=6, do_sample=False)
    assert torch.equal(together[1, -6:], alone[0, -6:])


# What transformers' GenerationTesterMixin (tests/generation/test_utils.py, transformers 5) does to test generation
# by length: `prepare_config_and_inputs_for_generate` sets eos_token_id=None, and every generate() call has
# max_new_tokens=3, these logits processors and use_cache=True or False; a decoder-only model's output is then
# exactly the input plus max_new_tokens.
HF_MAX_NEW_TOKENS = 3
HF_LOGITS_PROCESSORS = {"bad_words_ids": [[1, 0]], "repetition_penalty": 1.2, "remove_invalid_values": True}
HF_SAMPLING = {"top_k": 10, "top_p": 0.7, "temperature": 0.7}
HF_BEAMS = {"early_stopping": False, "length_penalty": 2.0, "num_beams": 2}
HF_GENERATION_MODES = {
    "greedy": ({"do_sample": False, "num_beams": 1}, 1),
    "sample": ({"do_sample": True, "num_beams": 1, **HF_SAMPLING}, 1),
    "sample-2-sequences": ({"do_sample": True, "num_beams": 1, "num_return_sequences": 2, **HF_SAMPLING}, 2),
    "beam": ({"do_sample": False, **HF_BEAMS, "num_return_sequences": 1}, 1),
    "beam-sample": ({"do_sample": True, **HF_BEAMS, "num_return_sequences": 1, **HF_SAMPLING}, 1),
}


@pytest.mark.parametrize("use_cache", [True, False])
@pytest.mark.parametrize("mode", sorted(HF_GENERATION_MODES))
def test_generate_without_eos_adds_exactly_max_new_tokens(mode, use_cache):
    model = causal_lm(seed=6, eos_token_id=None)
    prompt = random_ids(batch_size=2, length=5, seed=6)
    options, sequences_per_row = HF_GENERATION_MODES[mode]
    torch.manual_seed(0)
    output = model.generate(
        input_ids=prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=HF_MAX_NEW_TOKENS,
        use_cache=use_cache, return_dict_in_generate=True, output_scores=True, **HF_LOGITS_PROCESSORS, **options,
    )  # fmt: skip
    assert output.sequences.shape == (2 * sequences_per_row, prompt.shape[1] + HF_MAX_NEW_TOKENS)
    assert torch.equal(output.sequences[:, : prompt.shape[1]], prompt.repeat_interleave(sequences_per_row, dim=0))
    assert len(output.scores) == HF_MAX_NEW_TOKENS


def test_greedy_generate_without_eos_is_the_argmax_loop_and_an_eos_would_have_ended_it():
    """Without EOS nothing ends generation early: greedy search is the brute-force argmax loop over the full forward
    for every step; the same weights with an EOS (the first token it generates) stop after that token."""
    model = causal_lm(seed=7, eos_token_id=None)
    prompt = random_ids(batch_size=1, length=4, seed=7)
    output = model.generate(prompt, max_new_tokens=12, do_sample=False, num_beams=1)
    expected = prompt
    with torch.no_grad():
        for _ in range(12):
            expected = torch.cat([expected, model(expected).logits[:, -1].argmax(-1, keepdim=True)], dim=1)
    assert torch.equal(output, expected)
    stopping = causal_lm(seed=7, eos_token_id=int(output[0, 4]))
    assert torch.equal(stopping.generate(prompt, max_new_tokens=12, do_sample=False, num_beams=1), output[:, :5])


def test_static_cache_decoding_compiles_as_one_graph():
    """As for the seq2seq model (`_can_compile_fullgraph`), checked the same way."""
    prompt = random_ids(batch_size=2, length=4, seed=20)
    assert_static_cache_generate_compiles(causal_lm(seed=20), prompt, do_sample=False, max_new_tokens=4,
                                          min_new_tokens=4)  # fmt: skip


def test_inputs_embeds_match_input_ids_in_forward_and_generate():
    model = causal_lm(seed=21)
    input_ids = random_ids(seed=21)
    embeds = model.get_input_embeddings()(input_ids)
    with torch.no_grad():
        torch.testing.assert_close(model(inputs_embeds=embeds).logits, model(input_ids).logits)
    greedy = dict(do_sample=False, max_new_tokens=4, min_new_tokens=4)
    assert torch.equal(model.generate(inputs_embeds=embeds, **greedy), model.generate(input_ids, **greedy)[:, 9:])


# ---------------------------------------------------------------------------------------------------------------
# Losses and heads
# ---------------------------------------------------------------------------------------------------------------
def test_causal_lm_shifts_the_labels_and_ignores_pad():
    model = causal_lm(seed=7)
    input_ids = random_ids(seed=7)
    out = model(input_ids, labels=input_ids)
    expected = F.cross_entropy(out.logits[:, :-1].reshape(-1, 99), input_ids[:, 1:].reshape(-1))
    torch.testing.assert_close(out.loss, expected)
    # PAD (and -100) labels are no targets; num_items_in_batch turns the mean into sum / N.
    labels = input_ids.clone()
    labels[0, -2:] = model.config.pad_token_id
    labels[1, -1] = -100
    out = model(input_ids, labels=labels, num_items_in_batch=100)
    targets = labels[:, 1:].masked_fill(labels[:, 1:] == 0, -100)
    total = F.cross_entropy(out.logits[:, :-1].reshape(-1, 99), targets.reshape(-1), reduction="sum")
    torch.testing.assert_close(out.loss, total / 100)
    assert out.past_key_values is None  # training builds no cache
    with pytest.raises(ValueError, match="logits_to_keep=1 cannot be combined with labels"):
        model(input_ids, labels=input_ids, logits_to_keep=1)


def test_logits_to_keep_computes_only_the_last_positions():
    model = causal_lm(seed=8)
    input_ids = random_ids(seed=8)
    with torch.no_grad():
        full = model(input_ids).logits
        last = model(input_ids, logits_to_keep=2).logits
    assert last.shape == (3, 2, 99)
    torch.testing.assert_close(last, full[:, -2:])


def test_masked_lm_loss_scores_the_labelled_positions_only():
    model = masked_lm(seed=9)
    input_ids = random_ids(seed=9)
    labels = torch.full_like(input_ids, -100)
    labels[:, 2] = input_ids[:, 2]
    out = model(input_ids, labels=labels)
    torch.testing.assert_close(out.loss, F.cross_entropy(out.logits[:, 2], input_ids[:, 2]))
    assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()  # tied


def test_sequence_classifier_pools_at_the_last_eos_and_ignores_right_padding():
    torch.manual_seed(10)
    model = VaswaniForSequenceClassification(VaswaniEncoderConfig(**TINY_ENCODER, num_labels=3)).eval()
    input_ids = random_ids(batch_size=2, length=6, seed=10)
    input_ids[:, -1] = model.config.eos_token_id
    with torch.no_grad():
        out = model(input_ids, labels=torch.tensor([0, 2]))
        hidden = model.model(input_ids).last_hidden_state
        torch.testing.assert_close(out.logits, model.classification_head(hidden[:, -1]))
        right = model(F.pad(input_ids, (0, 2)), attention_mask=F.pad(torch.ones_like(input_ids), (0, 2))).logits
    torch.testing.assert_close(out.loss, F.cross_entropy(out.logits, torch.tensor([0, 2])))
    torch.testing.assert_close(right, out.logits, atol=1e-5, rtol=1e-5)
    with pytest.raises(ValueError, match="needs an EOS token"):
        model(input_ids[:, :-1])


# ---------------------------------------------------------------------------------------------------------------
# Options: DropHead, LayerDrop and pruning, gradient checkpointing
# ---------------------------------------------------------------------------------------------------------------
def test_set_drophead_refuses_the_kinds_a_variant_lacks():
    causal, encoder = causal_lm(), masked_lm()
    assert causal.drophead_kinds == ("decoder",) and encoder.drophead_kinds == ("encoder",)
    assert tiny_model().drophead_kinds == ("encoder", "decoder", "cross")
    with pytest.raises(ValueError, match=r"cross=0.1: VaswaniForCausalLM has no cross attention"):
        causal.set_drophead(cross=0.1)
    with pytest.raises(ValueError, match=r"decoder=0.1: VaswaniForMaskedLM has no decoder attention"):
        encoder.set_drophead(decoder=0.1)
    causal.set_drophead(0.3)  # "every kind it has"
    assert all(layer.self_attn.drophead.p == 0.3 for layer in causal.model.layers)
    scheduler = DropHeadScheduler(encoder, 0.2, 0.2, warmup_steps=2, total_steps=4)  # defaults to its kinds
    assert scheduler.kinds == ("encoder",)
    assert all(layer.self_attn.drophead.p == 0.2 for layer in encoder.model.layers)


def test_drophead_and_layerdrop_act_in_training_only():
    model = causal_lm(seed=11, decoder_drophead=0.5, decoder_layerdrop=0.5, dropout=0.0)
    input_ids = random_ids(seed=11)
    with torch.no_grad():
        evaluation = [model(input_ids).logits for _ in range(2)]
        model.train()
        training = [model(input_ids).logits for _ in range(4)]
    torch.testing.assert_close(evaluation[0], evaluation[1])
    assert any(not torch.allclose(logits, evaluation[0]) for logits in training)
    assert model.uses_layerdrop and set(model.layerdrop_state_dict()) == {"decoder"}


def test_gradient_checkpointing_gives_the_same_gradients():
    model = causal_lm(seed=12, dropout=0.0).train()
    input_ids = random_ids(seed=12)
    model(input_ids, labels=input_ids).loss.backward()
    expected = {name: p.grad.clone() for name, p in model.named_parameters()}
    model.zero_grad()
    # the name of transformers >= 5.23; train.py falls back to the old one the same way
    getattr(model, "activation_checkpointing_enable", model.gradient_checkpointing_enable)()
    assert model.model.layers[0].gradient_checkpointing
    model(input_ids, labels=input_ids).loss.backward()
    for name, p in model.named_parameters():
        torch.testing.assert_close(p.grad, expected[name], msg=name)


def test_pruning_at_load_keeps_the_listed_layers(tmp_path):
    model = causal_lm(seed=13, decoder_layers=3)
    model.save_pretrained(tmp_path)
    pruned = VaswaniForCausalLM.from_pretrained(tmp_path, decoder_layers_to_keep=[0, 2]).eval()
    assert pruned.config.num_hidden_layers == 2 and pruned.config.pruned_layers == {"decoder": [0, 2]}
    for new, old in ((0, 0), (1, 2)):
        for name, tensor in pruned.model.layers[new].state_dict().items():
            assert torch.equal(tensor, model.model.layers[old].state_dict()[name]), name
    reference = copy.deepcopy(model)
    reference.model.layers = nn.ModuleList([reference.model.layers[0], reference.model.layers[2]])
    reference.model.layers[1].self_attn.layer_idx = 1
    input_ids = random_ids(seed=13)
    with torch.no_grad():
        torch.testing.assert_close(pruned(input_ids).logits, reference(input_ids, use_cache=False).logits)
    with pytest.raises(ValueError, match="encoder_layers_to_keep"):
        VaswaniForCausalLM.from_pretrained(tmp_path, encoder_layers_to_keep=[0])


# ---------------------------------------------------------------------------------------------------------------
# Saving, loading, Auto classes
# ---------------------------------------------------------------------------------------------------------------
def test_seq2seq_parameter_names_and_config_are_unchanged(tmp_path):
    model = tiny_model(seed=14)
    names = set(model.state_dict())
    for layer in range(2):
        for part in ("q_proj", "kv_proj", "out_proj"):
            assert f"model.decoder.layers.{layer}.encoder_attn.{part}.weight" in names
        assert f"model.decoder.layers.{layer}.encoder_attn_residual.norm.weight" in names
    model.save_pretrained(tmp_path)
    saved = json.loads((tmp_path / "config.json").read_text())
    assert saved["model_type"] == "vaswani" and saved["is_encoder_decoder"] is True
    assert set(saved["auto_map"]) == {"AutoConfig", "AutoModel", "AutoModelForSeq2SeqLM"}
    assert "vaswani-translation" in saved["custom_pipelines"]


@pytest.mark.parametrize("tied", [True, False])
def test_resizing_the_vocabulary_and_an_untied_projection_survive_save_and_load(tied, tmp_path):
    model = causal_lm(seed=22, tie_word_embeddings=tied)
    model.resize_token_embeddings(120, mean_resizing=False)
    assert model.lm_head.weight.shape == (120, 16) and model.config.vocab_size == 120
    assert (model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()) == tied
    model.save_pretrained(tmp_path)
    loaded, info = VaswaniForCausalLM.from_pretrained(tmp_path, output_loading_info=True)
    assert info["missing_keys"] == set() and info["unexpected_keys"] == set()
    input_ids = random_ids(seed=22)
    with torch.no_grad():
        torch.testing.assert_close(loaded.eval()(input_ids).logits, model(input_ids).logits)


SAVED_BEFORE = Path(__file__).parent.parent / "fixtures" / "seq2seq-folder-b633b88"


def test_a_seq2seq_folder_saved_before_the_lm_models_loads_unchanged(tmp_path):
    """A tiny PreNorm seq2seq model (3 decoder layers, cross_drophead 0.1) saved by commit b633b88, before the decoder
    layer's cross-attention became optional, with the logits that code computed (its modeling files left out: the
    installed package loads it). It loads without missing or unexpected weights, gives the same logits (to float32 rounding), and
    saves every setting of its config.json back unchanged (a later option may add keys)."""
    expected = load_file(SAVED_BEFORE / "expected_logits.safetensors")
    model, info = AutoModelForSeq2SeqLM.from_pretrained(SAVED_BEFORE, output_loading_info=True)
    assert info["missing_keys"] == set() and info["unexpected_keys"] == set()
    with torch.no_grad():
        logits = model.eval()(expected["input_ids"], expected["attention_mask"], labels=expected["labels"]).logits
    # the same computation; the last bits of float32 sums differ between CPU kernels (saved on AMD Zen 4)
    torch.testing.assert_close(logits, expected["logits"], rtol=1e-5, atol=1e-6)
    model.save_pretrained(tmp_path)
    before = json.loads((SAVED_BEFORE / "config.json").read_text())
    after = json.loads((tmp_path / "config.json").read_text())
    assert {key: after.get(key) for key in before if key != "transformers_version"} == {
        key: value for key, value in before.items() if key != "transformers_version"
    }


def saved_lm_folders(tmp_path):
    causal = causal_lm(seed=15)
    causal.save_pretrained(tmp_path / "causal")
    torch.manual_seed(15)
    classifier = VaswaniForSequenceClassification(VaswaniEncoderConfig(**TINY_ENCODER, num_labels=2)).eval()
    classifier.save_pretrained(tmp_path / "classifier")
    masked = masked_lm(seed=15)
    masked.save_pretrained(tmp_path / "masked")
    return causal, masked, classifier


def test_auto_classes_load_each_saved_folder_with_the_package_installed(tmp_path):
    causal, masked, classifier = saved_lm_folders(tmp_path)
    causal_saved = json.loads((tmp_path / "causal" / "config.json").read_text())
    assert causal_saved["model_type"] == "vaswani-decoder" and "custom_pipelines" not in causal_saved
    assert causal_saved["auto_map"] == {
        "AutoConfig": "configuration_vaswani_lm.VaswaniDecoderConfig",
        "AutoModel": "modeling_vaswani_lm.VaswaniDecoderModel",
        "AutoModelForCausalLM": "modeling_vaswani_lm.VaswaniForCausalLM",
    }
    assert set(json.loads((tmp_path / "masked" / "config.json").read_text())["auto_map"]) == {
        "AutoConfig", "AutoModel", "AutoModelForMaskedLM", "AutoModelForSequenceClassification"}  # fmt: skip
    input_ids = random_ids(seed=15)
    input_ids[:, -1] = 2
    loaded, info = AutoModelForCausalLM.from_pretrained(tmp_path / "causal", output_loading_info=True)
    assert isinstance(loaded, VaswaniForCausalLM) and info["missing_keys"] == set()
    assert isinstance(AutoConfig.from_pretrained(tmp_path / "causal"), VaswaniDecoderConfig)
    base = AutoModel.from_pretrained(tmp_path / "causal").eval()
    assert isinstance(base, VaswaniDecoderModel)
    assert loaded.lm_head.weight.data_ptr() == loaded.model.embed_tokens.weight.data_ptr()
    assert isinstance(AutoModel.from_pretrained(tmp_path / "masked"), VaswaniEncoderModel)
    loaded_masked = AutoModelForMaskedLM.from_pretrained(tmp_path / "masked").eval()
    loaded_classifier = AutoModelForSequenceClassification.from_pretrained(tmp_path / "classifier").eval()
    with torch.no_grad():
        torch.testing.assert_close(loaded(input_ids).logits, causal(input_ids).logits)
        torch.testing.assert_close(base(input_ids).last_hidden_state, causal.model(input_ids).last_hidden_state)
        torch.testing.assert_close(loaded_masked(input_ids).logits, masked(input_ids).logits)
        torch.testing.assert_close(loaded_classifier(input_ids).logits, classifier(input_ids).logits)


@pytest.mark.slow
def test_trust_remote_code_loads_each_folder_in_a_clean_process(tmp_path, isolated_python, tokenizer):
    causal, masked, classifier = saved_lm_folders(tmp_path)
    generator, filler = causal_lm(seed=16, **special_ids(tokenizer)), masked_lm(seed=16, **special_ids(tokenizer))
    for name, model in (("generator", generator), ("filler", filler)):
        model.save_pretrained(tmp_path / name)
        tokenizer.save_pretrained(tmp_path / name)
    prompt = torch.tensor([tokenizer("the cat", add_special_tokens=False)["input_ids"]])
    query = tokenizer("the <mask> sat", return_tensors="pt")
    where = query["input_ids"][0].tolist().index(tokenizer.mask_token_id)
    for name in ("modeling_vaswani_lm.py", "configuration_vaswani_lm.py", "modeling_vaswani.py"):
        assert (tmp_path / "causal" / name).exists(), name
    input_ids = random_ids(seed=16)
    input_ids[:, -1] = 2
    expected = {
        "generated": causal.generate(input_ids, max_new_tokens=5, do_sample=False).tolist(),
        "masked": masked(input_ids).logits.argmax(-1).tolist(),
        "classified": classifier(input_ids).logits.argmax(-1).tolist(),
        "text": tokenizer.decode(generator.generate(prompt, max_new_tokens=4, min_new_tokens=4, do_sample=False)[0]),
        "filled": int(filler(**query).logits[0, where].argmax()),
    }
    result = isolated_python(
        f"""
        import json, torch
        try:
            import modeling_vaswani
            raise SystemExit("the package is importable; the test would not show anything")
        except ModuleNotFoundError:
            pass
        from transformers import (AutoConfig, AutoModel, AutoModelForCausalLM, AutoModelForMaskedLM,
                                  AutoModelForSequenceClassification, pipeline)
        root = {str(tmp_path)!r}
        ids = torch.tensor({input_ids.tolist()})
        causal = AutoModelForCausalLM.from_pretrained(root + "/causal", trust_remote_code=True).eval()
        assert type(causal).__module__.startswith("transformers_modules"), type(causal).__module__
        assert type(AutoModel.from_pretrained(root + "/causal", trust_remote_code=True)).__name__ == "VaswaniDecoderModel"
        assert type(AutoConfig.from_pretrained(root + "/causal", trust_remote_code=True)).__name__ == "VaswaniDecoderConfig"
        assert type(AutoModel.from_pretrained(root + "/masked", trust_remote_code=True)).__name__ == "VaswaniEncoderModel"
        masked = AutoModelForMaskedLM.from_pretrained(root + "/masked", trust_remote_code=True).eval()
        classifier = AutoModelForSequenceClassification.from_pretrained(root + "/classifier", trust_remote_code=True)
        generate = pipeline("text-generation", model=root + "/generator", trust_remote_code=True, device="cpu")
        fill = pipeline("fill-mask", model=root + "/filler", trust_remote_code=True, device="cpu")
        with torch.no_grad():
            print(json.dumps({{
                "generated": causal.generate(ids, max_new_tokens=5, do_sample=False).tolist(),
                "masked": masked(ids).logits.argmax(-1).tolist(),
                "classified": classifier.eval()(ids).logits.argmax(-1).tolist(),
                "text": generate("the cat", max_new_tokens=4, min_new_tokens=4, do_sample=False,
                                 add_special_tokens=False)[0]["generated_text"],
                "filled": fill("the <mask> sat", top_k=1)[0]["token"],
            }}))
        """
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert json.loads(result.stdout.strip().splitlines()[-1]) == expected


# ---------------------------------------------------------------------------------------------------------------
# Pipelines and the Trainer, with a BPE tokenizer that has a mask token
# ---------------------------------------------------------------------------------------------------------------
SENTENCES = [sentence for pair in PAIRS for sentence in pair]


@pytest.fixture(scope="module")
def tokenizer():
    return train_bpe_tokenizer(iterator=SENTENCES, vocab_size=330, min_frequency=1, model_max_length=64,
                               mask_token=True)  # fmt: skip


def special_ids(tokenizer) -> dict:
    return {"vocab_size": len(tokenizer), "pad_token_id": tokenizer.pad_token_id,
            "bos_token_id": tokenizer.bos_token_id, "eos_token_id": tokenizer.eos_token_id}  # fmt: skip


def test_text_generation_and_fill_mask_pipelines_load_a_saved_folder(tokenizer, tmp_path):
    causal = causal_lm(seed=17, **special_ids(tokenizer))
    masked = masked_lm(seed=17, **special_ids(tokenizer))
    for name, model in (("causal", causal), ("masked", masked)):
        model.save_pretrained(tmp_path / name)
        tokenizer.save_pretrained(tmp_path / name)

    generate = pipeline("text-generation", model=str(tmp_path / "causal"), device="cpu")
    prompt = "the cat sat"
    # transformers 5's text-generation pipeline tokenizes with the tokenizer's defaults, and ours appends </s>: a
    # prompt to continue must not end with it, hence add_special_tokens=False.
    options = dict(max_new_tokens=5, min_new_tokens=5, do_sample=False, add_special_tokens=False)
    ids = torch.tensor([tokenizer(prompt, add_special_tokens=False)["input_ids"]])
    expected = causal.generate(ids, max_new_tokens=5, min_new_tokens=5, do_sample=False)[0]
    assert generate(prompt, return_tensors=True, **options)[0]["generated_token_ids"] == expected.tolist()
    text = generate(prompt, **options)[0]["generated_text"]
    assert text == tokenizer.decode(expected, skip_special_tokens=True) and text.startswith(prompt)

    fill = pipeline("fill-mask", model=str(tmp_path / "masked"), device="cpu")
    predictions = fill(f"the {tokenizer.mask_token} sat on the mat", top_k=3)
    batch = tokenizer(f"the {tokenizer.mask_token} sat on the mat", return_tensors="pt")
    where = int((batch["input_ids"][0] == tokenizer.mask_token_id).nonzero())
    with torch.no_grad():
        scores = masked(**batch).logits[0, where].softmax(-1)
    assert [p["token"] for p in predictions] == scores.topk(3).indices.tolist()
    torch.testing.assert_close(torch.tensor([p["score"] for p in predictions]), scores.topk(3).values)


def lm_trainer(model, tokenizer, data, output_dir, *, mlm, batch_size, accumulation, steps, optim, lr):
    args = TrainingArguments(
        output_dir=str(output_dir), per_device_train_batch_size=batch_size, gradient_accumulation_steps=accumulation,
        max_steps=steps, learning_rate=lr, optim=optim, lr_scheduler_type="constant", weight_decay=0.0,
        max_grad_norm=0.0, train_sampling_strategy="sequential", logging_steps=1, save_strategy="no",
        report_to="none", use_cpu=True, disable_tqdm=True, seed=0,
    )  # fmt: skip
    collator = DataCollatorForLanguageModeling(tokenizer, mlm=mlm, mlm_probability=0.3, seed=0)
    return Trainer(model=model, args=args, train_dataset=data, data_collator=collator, processing_class=tokenizer)


@pytest.mark.parametrize("mlm", [False, True])
def test_trainer_with_the_language_modeling_collator_trains_both(tokenizer, tmp_path, mlm):
    model = (masked_lm if mlm else causal_lm)(seed=18, dropout=0.0, **special_ids(tokenizer)).train()
    data = [dict(tokenizer(sentence)) for sentence in SENTENCES]
    before = copy.deepcopy(model.state_dict())
    trainer = lm_trainer(model, tokenizer, data, tmp_path, mlm=mlm, batch_size=4, accumulation=1, steps=20,
                         optim="adamw_torch", lr=3e-3)  # fmt: skip
    trainer.train()
    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    assert len(losses) == 20 and all(math.isfinite(loss) for loss in losses)
    assert sum(losses[-5:]) < sum(losses[:5])  # it learns
    assert not torch.equal(model.state_dict()["model.embed_tokens.weight"], before["model.embed_tokens.weight"])


def test_trainer_gradient_accumulation_equals_one_big_batch_for_the_causal_lm(tokenizer, tmp_path):
    """Sentences of very different lengths: the mean of two micro-batch means would differ from the big batch's
    per-token mean; the Trainer's num_items_in_batch (counted over the shifted labels) makes them equal."""
    data = [dict(tokenizer(sentence)) for sentence in (SENTENCES[0], SENTENCES[1], " ".join(SENTENCES[2:6]),
                                                       " ".join(SENTENCES[6:]))]  # fmt: skip
    start = causal_lm(seed=19, dropout=0.0, **special_ids(tokenizer)).train()
    whole, accumulated = copy.deepcopy(start), copy.deepcopy(start)
    lm_trainer(whole, tokenizer, data, tmp_path / "a", mlm=False, batch_size=4, accumulation=1, steps=1,
               optim="sgd", lr=1.0).train()  # fmt: skip
    lm_trainer(accumulated, tokenizer, data, tmp_path / "b", mlm=False, batch_size=2, accumulation=2, steps=1,
               optim="sgd", lr=1.0).train()  # fmt: skip
    difference = max((accumulated.state_dict()[n] - t).abs().max().item() for n, t in whole.state_dict().items())
    change = max((start.state_dict()[n] - t).abs().max().item() for n, t in whole.state_dict().items())
    assert difference < 1e-5 and change > 1e-3
