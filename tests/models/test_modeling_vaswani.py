"""The encoder-decoder model: caching, padding, causality, an independent torch.nn reference, attention backends,
saving and loading (also through trust_remote_code), generation, overfitting, presets and the loss."""

import json
import math

import pytest
import torch
import torch.nn.functional as F
from conftest import decode_step_by_step, overfit, random_batch, tiny_config, tiny_model
from torch import nn
from transformers import AutoConfig, AutoModel, AutoModelForSeq2SeqLM
from transformers.cache_utils import DynamicCache, EncoderDecoderCache

from modeling_vaswani import (
    VaswaniConfig,
    VaswaniForConditionalGeneration,
    VaswaniModel,
    shift_tokens_right,
    sinusoidal_position_table,
)
from modeling_vaswani.modeling_vaswani import VaswaniSinusoidalPositionalEmbedding

ATTENTION_BACKENDS = ["eager", "sdpa"]


def with_backend(model, backend):
    model.config._attn_implementation = backend
    return model


# ---------------------------------------------------------------------------------------------------------------
# Incremental decoding, padding, causality
# ---------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("backend", ATTENTION_BACKENDS)
@pytest.mark.parametrize("cache_name", ["past_key_values", "cache"])  # transformers 5.24 renamed it: both work
def test_cached_incremental_decoding_matches_full_forward(backend, cache_name):
    model = with_backend(tiny_model(), backend).eval()
    input_ids, attention_mask, labels = random_batch()
    decoder_input_ids = shift_tokens_right(labels, 0, 1)
    with torch.no_grad():
        full = model(input_ids=input_ids, attention_mask=attention_mask, decoder_input_ids=decoder_input_ids).logits
        stepwise, cache = decode_step_by_step(model, input_ids, attention_mask, decoder_input_ids, cache_name)
    assert isinstance(cache, EncoderDecoderCache)
    assert cache.get_seq_length() == decoder_input_ids.shape[1]
    torch.testing.assert_close(stepwise, full, atol=1e-5, rtol=1e-5)


def test_a_cache_given_under_both_names_is_refused():
    model = tiny_model().eval()
    input_ids, attention_mask, labels = random_batch()
    cache = EncoderDecoderCache(DynamicCache(), DynamicCache())
    with pytest.raises(ValueError, match="The cache was given twice, as `cache` and as `past_key_values`"):
        model(input_ids=input_ids, attention_mask=attention_mask, decoder_input_ids=labels[:, :1], use_cache=True,
              past_key_values=cache, cache=cache)  # fmt: skip


@pytest.mark.parametrize("backend", ATTENTION_BACKENDS)
def test_beam_search_with_and_without_cache_agree(backend):
    model = with_backend(tiny_model(seed=1), backend).eval()
    input_ids, attention_mask, _ = random_batch(seed=1)
    kwargs = dict(attention_mask=attention_mask, num_beams=4, max_new_tokens=10, length_penalty=0.6)
    with_cache = model.generate(input_ids, use_cache=True, **kwargs)
    without_cache = model.generate(input_ids, use_cache=False, **kwargs)
    assert torch.equal(with_cache, without_cache)


@pytest.mark.parametrize("backend", ATTENTION_BACKENDS)
def test_padding_columns_change_nothing(backend):
    model = with_backend(tiny_model(seed=2), backend).eval()
    input_ids, attention_mask, labels = random_batch(seed=2)
    extra = 5
    padded_ids = F.pad(input_ids, (0, extra), value=model.config.pad_token_id)
    padded_mask = F.pad(attention_mask, (0, extra), value=0)
    with torch.no_grad():
        out = model(input_ids=input_ids, attention_mask=attention_mask, labels=labels)
        out_padded = model(input_ids=padded_ids, attention_mask=padded_mask, labels=labels)
    real = attention_mask.bool()
    torch.testing.assert_close(
        out_padded.encoder_last_hidden_state[:, : input_ids.shape[1]][real], out.encoder_last_hidden_state[real]
    )
    torch.testing.assert_close(out_padded.logits, out.logits, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(out_padded.loss, out.loss)
    gen = dict(num_beams=4, max_new_tokens=8)
    assert torch.equal(
        model.generate(input_ids, attention_mask=attention_mask, **gen),
        model.generate(padded_ids, attention_mask=padded_mask, **gen),
    )


def test_pad_tokens_in_the_decoder_input_are_masked():
    """A decoder attention mask hides padded target positions from the real ones."""
    model = tiny_model(seed=3).eval()
    input_ids, attention_mask, labels = random_batch(seed=3)
    decoder_input_ids = shift_tokens_right(labels, 0, 1)
    mask = torch.ones_like(decoder_input_ids)
    padded = F.pad(decoder_input_ids, (0, 3), value=0)
    padded_mask = F.pad(mask, (0, 3), value=0)
    with torch.no_grad():
        ref = model(input_ids, attention_mask, decoder_input_ids=decoder_input_ids, decoder_attention_mask=mask)
        out = model(input_ids, attention_mask, decoder_input_ids=padded, decoder_attention_mask=padded_mask)
    torch.testing.assert_close(out.logits[:, : decoder_input_ids.shape[1]], ref.logits, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("backend", ATTENTION_BACKENDS)
def test_decoder_is_causal(backend):
    model = with_backend(tiny_model(seed=4), backend).eval()
    input_ids, attention_mask, labels = random_batch(seed=4)
    decoder_input_ids = shift_tokens_right(labels, 0, 1)
    t = 2
    changed = decoder_input_ids.clone()
    changed[:, t + 1 :] = torch.randint(4, 99, changed[:, t + 1 :].shape, generator=torch.Generator().manual_seed(9))
    assert not torch.equal(changed, decoder_input_ids)
    with torch.no_grad():
        a = model(input_ids, attention_mask, decoder_input_ids=decoder_input_ids).logits
        b = model(input_ids, attention_mask, decoder_input_ids=changed).logits
    torch.testing.assert_close(a[:, : t + 1], b[:, : t + 1])
    assert not torch.allclose(a[:, t + 1 :], b[:, t + 1 :])


# ---------------------------------------------------------------------------------------------------------------
# Independent reference: torch.nn layers with copied weights, and the paper's positional formula
# ---------------------------------------------------------------------------------------------------------------
def _copy_attention(ours, theirs: nn.MultiheadAttention):
    """Our fused projections hold W^Q, W^K, W^V in nn.MultiheadAttention's in_proj order."""
    with torch.no_grad():
        if hasattr(ours, "qkv_proj"):
            theirs.in_proj_weight.copy_(ours.qkv_proj.weight)
            theirs.in_proj_bias.copy_(ours.qkv_proj.bias)
        else:
            theirs.in_proj_weight.copy_(torch.cat([ours.q_proj.weight, ours.kv_proj.weight]))
            theirs.in_proj_bias.copy_(torch.cat([ours.q_proj.bias, ours.kv_proj.bias]))
        theirs.out_proj.weight.copy_(ours.out_proj.weight)
        theirs.out_proj.bias.copy_(ours.out_proj.bias)


# Where torch.nn's layers keep each of our layer's modules (sublayers, their norms, the FFN's two linear maps).
TORCH_NN_NAMES = {
    "encoder": {
        "self_attn": "self_attn",
        "self_attn_residual.norm": "norm1",
        "ffn.fc1": "linear1",
        "ffn.fc2": "linear2",
        "ffn_residual.norm": "norm2",
    }
}
TORCH_NN_NAMES["decoder"] = {
    **TORCH_NN_NAMES["encoder"],
    "encoder_attn": "multihead_attn",
    "encoder_attn_residual.norm": "norm2",
    "ffn_residual.norm": "norm3",
}


def _copy_module(ours, theirs):
    if isinstance(theirs, nn.MultiheadAttention):
        _copy_attention(ours, theirs)
        return
    with torch.no_grad():
        theirs.weight.copy_(ours.weight)
        theirs.bias.copy_(ours.bias)


def torch_reference_stacks(model: VaswaniForConditionalGeneration, norm_first: bool = False):
    """nn.TransformerEncoder / nn.TransformerDecoder with our weights (ReLU, no final norm for PostNorm)."""
    config = model.config
    stacks = []
    for side, layer_class in (("encoder", nn.TransformerEncoderLayer), ("decoder", nn.TransformerDecoderLayer)):
        layers = []
        for ours in getattr(model.model, side).layers:
            ref = layer_class(
                config.d_model,
                getattr(config, f"{side}_attention_heads"),
                getattr(config, f"{side}_ffn_dim"),
                dropout=0.0,
                batch_first=True,
                norm_first=norm_first,
                layer_norm_eps=config.layer_norm_eps,
            )
            for our_name, their_name in TORCH_NN_NAMES[side].items():
                _copy_module(ours.get_submodule(our_name), ref.get_submodule(their_name))
            layers.append(ref)
        stacks.append(nn.ModuleList(layers).eval())
    encoder_layers, decoder_layers = stacks
    return encoder_layers, decoder_layers


def test_layers_match_torch_nn_transformer_layers_with_copied_weights():
    """PostNorm + ReLU, no final stack norm: our stacks equal torch.nn's layers to 1e-5 in eval mode."""
    model = tiny_model(seed=5).eval()
    ref_encoder, ref_decoder = torch_reference_stacks(model)
    input_ids, attention_mask, labels = random_batch(seed=5)
    decoder_input_ids = shift_tokens_right(labels, 0, 1)
    enc, dec = model.model.encoder, model.model.decoder
    with torch.no_grad():
        ours = model(input_ids, attention_mask, decoder_input_ids=decoder_input_ids)
        # Reference: the same embedding recipe written out, then torch.nn's layers.
        d = model.config.d_model
        pe = torch.tensor(
            [
                [
                    math.sin(p / 10000 ** (i / d)) if i % 2 == 0 else math.cos(p / 10000 ** ((i - 1) / d))
                    for i in range(d)
                ]
                for p in range(16)
            ]
        )
        shared = model.model.shared.weight
        src = shared[input_ids] * math.sqrt(d) + pe[: input_ids.shape[1]]
        tgt = shared[decoder_input_ids] * math.sqrt(d) + pe[: decoder_input_ids.shape[1]]
        memory = src
        for layer in ref_encoder:
            memory = layer(memory, src_key_padding_mask=attention_mask == 0)
        causal = nn.Transformer.generate_square_subsequent_mask(tgt.shape[1])
        hidden = tgt
        for layer in ref_decoder:
            hidden = layer(hidden, memory, tgt_mask=causal, memory_key_padding_mask=attention_mask == 0)
        logits = hidden @ shared.T
    real = attention_mask.bool()
    torch.testing.assert_close(ours.encoder_last_hidden_state[real], memory[real], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(ours.logits, logits, atol=1e-5, rtol=1e-5)
    assert enc.layer_norm is None and dec.layer_norm is None


def test_positional_table_is_the_papers_interleaved_formula():
    d, n = 12, 50
    table = sinusoidal_position_table(n, d)
    for pos in range(n):
        for i in range(d // 2):
            angle = pos / 10000 ** (2 * i / d)
            assert table[pos, 2 * i].item() == pytest.approx(math.sin(angle), abs=1e-6)
            assert table[pos, 2 * i + 1].item() == pytest.approx(math.cos(angle), abs=1e-6)
    # Starting offset continues the same sequence; the model's embedding (float32, any offset, also a tensor one as a
    # static cache gives) computes the same encodings.
    torch.testing.assert_close(sinusoidal_position_table(10, d, start=40), table[40:])
    embed = VaswaniSinusoidalPositionalEmbedding(8, d)
    torch.testing.assert_close(embed(n), table, atol=1e-5, rtol=0)
    torch.testing.assert_close(embed(10, past_length=40), table[40:], atol=1e-5, rtol=0)
    torch.testing.assert_close(embed(10, past_length=torch.tensor(40)), table[40:], atol=1e-5, rtol=0)


def test_sinusoidal_inputs_longer_than_the_table_work_and_learned_ones_raise():
    model = tiny_model(max_position_embeddings=8).eval()
    long_ids = torch.randint(4, 99, (1, 20))
    with torch.no_grad():
        out = model(input_ids=long_ids, decoder_input_ids=long_ids[:, :12])
    assert torch.isfinite(out.logits).all()
    # Positions past the table are the paper's formula, not a repeat of the table.
    positions = model.model.encoder.embeddings.embed_positions(20)
    torch.testing.assert_close(positions, sinusoidal_position_table(20, 16), atol=1e-5, rtol=0)

    learned = tiny_model(max_position_embeddings=8, position_embedding_type="learned").eval()
    with pytest.raises(ValueError, match="max_position_embeddings=8.*sinusoidal"):
        learned(input_ids=long_ids, decoder_input_ids=long_ids[:, :4])
    ok = learned(input_ids=long_ids[:, :8], decoder_input_ids=long_ids[:, :8])
    assert torch.isfinite(ok.logits).all()


# ---------------------------------------------------------------------------------------------------------------
# Attention backends, save/load, Auto classes, trust_remote_code
# ---------------------------------------------------------------------------------------------------------------
def test_eager_and_sdpa_give_the_same_outputs_and_generations():
    eager = with_backend(tiny_model(seed=6), "eager").eval()
    sdpa = with_backend(tiny_model(seed=6), "sdpa").eval()
    input_ids, attention_mask, labels = random_batch(seed=6)
    with torch.no_grad():
        a = eager(input_ids, attention_mask, labels=labels)
        b = sdpa(input_ids, attention_mask, labels=labels)
    torch.testing.assert_close(a.logits, b.logits, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(a.encoder_last_hidden_state, b.encoder_last_hidden_state, atol=1e-5, rtol=1e-5)
    gen = dict(attention_mask=attention_mask, num_beams=4, max_new_tokens=8)
    assert torch.equal(eager.generate(input_ids, **gen), sdpa.generate(input_ids, **gen))


def test_attention_weights_are_returned_with_eager():
    model = tiny_model(seed=6, attn_implementation="eager").eval()
    input_ids, attention_mask, labels = random_batch(seed=6)
    out = model(input_ids, attention_mask, labels=labels, output_attentions=True, output_hidden_states=True)
    assert len(out.encoder_attentions) == 2 and len(out.decoder_attentions) == 2 and len(out.cross_attentions) == 2
    assert out.encoder_attentions[0].shape == (3, 4, 7, 7)
    assert out.cross_attentions[0].shape == (3, 4, 6, 7)
    # PAD keys get no attention; every row is a distribution.
    torch.testing.assert_close(out.encoder_attentions[0].sum(-1), torch.ones(3, 4, 7))
    assert out.encoder_attentions[0][2, :, :, -2:].abs().max() == 0
    assert len(out.encoder_hidden_states) == 3 and len(out.decoder_hidden_states) == 3  # embeddings + 2 layers


def test_save_and_load_round_trip(tmp_path):
    model = tiny_model(seed=7).eval()
    model.save_pretrained(tmp_path)
    files = {p.name for p in tmp_path.iterdir()}
    assert {"config.json", "generation_config.json", "model.safetensors"} <= files
    assert "pytorch_model.bin" not in files
    loaded, info = VaswaniForConditionalGeneration.from_pretrained(tmp_path, output_loading_info=True)
    assert info["missing_keys"] == set() and info["unexpected_keys"] == set() and info["mismatched_keys"] == set()
    loaded.eval()
    # The non-persistent sinusoid frequencies are rebuilt, not left as uninitialised memory.
    for stack in (loaded.model.encoder, loaded.model.decoder):
        positions = stack.embeddings.embed_positions(64)
        torch.testing.assert_close(positions, sinusoidal_position_table(64, 16), atol=1e-5, rtol=0)
    for name, tensor in model.state_dict().items():
        torch.testing.assert_close(loaded.state_dict()[name], tensor, msg=name)
    input_ids, attention_mask, _ = random_batch(seed=7)
    gen = dict(attention_mask=attention_mask, max_new_tokens=8)
    assert torch.equal(model.generate(input_ids, **gen), loaded.generate(input_ids, **gen))
    # Tied weights stay tied after loading.
    assert loaded.lm_head.weight.data_ptr() == loaded.model.shared.weight.data_ptr()
    assert loaded.model.encoder.embed_tokens.weight.data_ptr() == loaded.model.shared.weight.data_ptr()


def test_auto_classes_load_the_installed_package(tmp_path):
    model = tiny_model(seed=8).eval()
    model.save_pretrained(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["model_type"] == "vaswani"
    assert set(config["auto_map"]) == {"AutoConfig", "AutoModel", "AutoModelForSeq2SeqLM"}
    assert isinstance(AutoConfig.from_pretrained(tmp_path), VaswaniConfig)
    assert isinstance(AutoModelForSeq2SeqLM.from_pretrained(tmp_path), VaswaniForConditionalGeneration)
    base = AutoModel.from_pretrained(tmp_path).eval()
    assert isinstance(base, VaswaniModel)
    input_ids, attention_mask, labels = random_batch(seed=8)
    with torch.no_grad():
        torch.testing.assert_close(
            base(input_ids, attention_mask, decoder_input_ids=labels).last_hidden_state,
            model.model(input_ids, attention_mask, decoder_input_ids=labels).last_hidden_state,
        )


@pytest.mark.slow
def test_trust_remote_code_load_in_a_clean_process(tmp_path, isolated_python):
    model = tiny_model(seed=9).eval()
    folder = tmp_path / "model"
    model.save_pretrained(folder)
    assert (folder / "modeling_vaswani.py").exists() and (folder / "configuration_vaswani.py").exists()
    input_ids, attention_mask, _ = random_batch(seed=9)
    expected = model.generate(input_ids, attention_mask=attention_mask, num_beams=4, max_new_tokens=8)
    result = isolated_python(
        f"""
        import json, torch
        try:
            import modeling_vaswani
            raise SystemExit("the package is importable; the test would not show anything")
        except ModuleNotFoundError:
            pass
        from transformers import AutoConfig, AutoModel, AutoModelForSeq2SeqLM
        folder = {str(folder)!r}
        model = AutoModelForSeq2SeqLM.from_pretrained(folder, trust_remote_code=True).eval()
        assert type(model).__module__.startswith("transformers_modules"), type(model).__module__
        base = AutoModel.from_pretrained(folder, trust_remote_code=True)
        assert type(base).__name__ == "VaswaniModel", type(base)
        assert type(AutoConfig.from_pretrained(folder, trust_remote_code=True)).__name__ == "VaswaniConfig"
        ids = torch.tensor({input_ids.tolist()}); mask = torch.tensor({attention_mask.tolist()})
        out = model.generate(ids, attention_mask=mask, num_beams=4, max_new_tokens=8)
        print(json.dumps(out.tolist()))
        """
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert json.loads(result.stdout.strip().splitlines()[-1]) == expected.tolist()


# ---------------------------------------------------------------------------------------------------------------
# Generation
# ---------------------------------------------------------------------------------------------------------------
def test_generation_config_has_the_papers_decoding_defaults(tmp_path):
    model = tiny_model()
    assert model.generation_config.num_beams == 4
    assert model.generation_config.length_penalty == 0.6
    assert model.generation_config.min_new_tokens == 1 and model.generation_config.early_stopping is False
    assert model.generation_config.decoder_start_token_id == model.config.decoder_start_token_id
    model.save_pretrained(tmp_path)
    saved = json.loads((tmp_path / "generation_config.json").read_text())
    assert saved["num_beams"] == 4 and saved["length_penalty"] == 0.6


def test_default_output_cap_is_source_length_plus_50():
    model = tiny_model(seed=10, max_position_embeddings=128).eval()
    model.generation_config.num_beams = 1
    model.generation_config.eos_token_id = None  # never stop early, so the cap decides the length
    input_ids, attention_mask, _ = random_batch(seed=10)
    out = model.generate(input_ids, attention_mask=attention_mask)
    longest_source = int(attention_mask.sum(-1).max())
    assert out.shape[1] == 1 + longest_source + 50  # start token + the cap
    assert model.generate(input_ids, attention_mask=attention_mask, max_new_tokens=5).shape[1] == 6


def test_generation_modes_behave_as_their_definitions():
    """Greedy, beam search with one beam, top-k=1 sampling and seeded sampling against each other, and several beams
    returned per sentence: distinct, best first, each scored as its teacher-forced log-probability divided by
    length ** length_penalty (transformers' beam score)."""
    model = tiny_model(seed=11).eval()
    input_ids, attention_mask, _ = random_batch(seed=11)
    common = dict(attention_mask=attention_mask, max_new_tokens=6)
    greedy = model.generate(input_ids, num_beams=1, do_sample=False, **common)
    assert torch.equal(model.generate(input_ids, num_beams=1, do_sample=True, top_k=1, **common), greedy)

    samples = []
    for seed in (0, 0, 1):
        torch.manual_seed(seed)
        samples.append(model.generate(input_ids, num_beams=1, do_sample=True, top_k=0, temperature=3.0, **common))
    assert torch.equal(samples[0], samples[1]) and not torch.equal(samples[0], samples[2])

    beams, returned, alpha = 4, 3, 0.6
    out = model.generate(
        input_ids,
        num_beams=beams,
        num_return_sequences=returned,
        length_penalty=alpha,
        early_stopping=False,
        return_dict_in_generate=True,
        output_scores=True,
        **common,
    )
    assert out.sequences.shape[0] == input_ids.shape[0] * returned
    scores = out.sequences_scores.view(-1, returned)
    assert (scores[:, :-1] >= scores[:, 1:]).all()
    eos, pad = model.config.eos_token_id, model.config.pad_token_id
    for row, sequence in enumerate(out.sequences):
        sentence = row // returned
        hypotheses = {tuple(out.sequences[sentence * returned + k].tolist()) for k in range(returned)}
        assert len(hypotheses) == returned  # distinct beams
        tokens = sequence[1:].tolist()
        length = tokens.index(eos) + 1 if eos in tokens else len(tokens)
        tokens = tokens[:length]
        assert pad not in tokens
        with torch.no_grad():
            logits = model(
                input_ids[sentence : sentence + 1],
                attention_mask[sentence : sentence + 1],
                decoder_input_ids=sequence[None, :length],
            ).logits[0]
        log_prob = logits.log_softmax(-1).gather(1, torch.tensor(tokens)[:, None]).sum()
        torch.testing.assert_close(out.sequences_scores[row], log_prob / length**alpha, atol=1e-4, rtol=1e-4)


def test_greedy_generation_matches_a_manual_argmax_loop():
    model = tiny_model(seed=12).eval()
    input_ids, attention_mask, _ = random_batch(seed=12)
    out = model.generate(input_ids, attention_mask=attention_mask, num_beams=1, max_new_tokens=6, eos_token_id=None)
    tokens = torch.full((input_ids.shape[0], 1), model.config.decoder_start_token_id)
    with torch.no_grad():
        for _ in range(6):
            logits = model(input_ids, attention_mask, decoder_input_ids=tokens).logits[:, -1]
            tokens = torch.cat([tokens, logits.argmax(-1, keepdim=True)], dim=1)
    assert torch.equal(out, tokens)


def test_assisted_generation_gives_the_greedy_tokens():
    """Prompt-lookup decoding (transformers' assisted generation: several candidate tokens verified in one decoder
    pass, the cache cropped after rejections) must give exactly what greedy decoding gives."""
    model = tiny_model(seed=13).eval()
    input_ids, attention_mask, _ = random_batch(seed=13)
    for row in range(input_ids.shape[0]):  # assisted generation takes one sentence at a time
        inputs = dict(input_ids=input_ids[row : row + 1], attention_mask=attention_mask[row : row + 1])
        greedy = model.generate(**inputs, num_beams=1, max_new_tokens=10, eos_token_id=None)
        assisted = model.generate(
            **inputs, num_beams=1, max_new_tokens=10, eos_token_id=None, prompt_lookup_num_tokens=3
        )
        assert torch.equal(assisted, greedy)


# ---------------------------------------------------------------------------------------------------------------
# Learning: a tiny model memorises a few pairs and generates them back
# ---------------------------------------------------------------------------------------------------------------
def test_tiny_model_overfits_and_generates_the_targets():
    torch.manual_seed(0)
    model = VaswaniForConditionalGeneration(
        tiny_config(d_model=32, encoder_ffn_dim=64, decoder_ffn_dim=64, dropout=0.0, label_smoothing=0.0)
    )
    sources = [[5, 6, 7, 8, 2], [9, 10, 11, 2, 0], [12, 13, 2, 0, 0], [14, 15, 16, 17, 2]]
    targets = [[20, 21, 22, 2], [23, 24, 2, -100], [25, 26, 27, 2], [28, 2, -100, -100]]
    input_ids = torch.tensor(sources)
    attention_mask = (input_ids != 0).long()
    labels = torch.tensor(targets)
    batch = dict(input_ids=input_ids, attention_mask=attention_mask, labels=labels)
    assert overfit(model, batch, steps=200, lr=3e-3, betas=(0.9, 0.98), eps=1e-9) < 0.02
    model.eval()
    generated = model.generate(input_ids, attention_mask=attention_mask, num_beams=4, max_new_tokens=6)
    for row, target in zip(generated.tolist(), targets, strict=True):
        expected = [t for t in target if t != -100]
        assert row[1 : 1 + len(expected)] == expected


# ---------------------------------------------------------------------------------------------------------------
# Presets, initialization, loss
# ---------------------------------------------------------------------------------------------------------------
def expected_parameter_count(config: VaswaniConfig) -> int:
    """Parameters of the paper's model, counted from the architecture description (shared embedding matrix)."""
    d = config.d_model
    attention = 4 * (d * d + d)
    ffn = lambda d_ff: d * d_ff + d_ff + d_ff * d + d  # noqa: E731
    layer_norm = 2 * d
    encoder_layer = attention + ffn(config.encoder_ffn_dim) + 2 * layer_norm
    decoder_layer = 2 * attention + ffn(config.decoder_ffn_dim) + 3 * layer_norm
    return config.vocab_size * d + config.encoder_layers * encoder_layer + config.decoder_layers * decoder_layer


@pytest.mark.parametrize(
    ("preset", "d_model", "d_ff", "heads", "dropout"), [("base", 512, 2048, 8, 0.1), ("big", 1024, 4096, 16, 0.3)]
)
def test_paper_presets(preset, d_model, d_ff, heads, dropout):
    config = VaswaniConfig.from_preset(preset, vocab_size=37000)
    assert (config.d_model, config.encoder_ffn_dim, config.decoder_ffn_dim) == (d_model, d_ff, d_ff)
    assert (config.encoder_attention_heads, config.decoder_attention_heads) == (heads, heads)
    assert config.encoder_layers == config.decoder_layers == 6
    assert config.d_model // config.encoder_attention_heads == 64  # d_k = d_v = 64 in both
    assert config.dropout == dropout and config.label_smoothing == 0.1
    with torch.device("meta"):
        model = VaswaniForConditionalGeneration(config)
    count = sum(p.numel() for p in model.parameters())
    assert count == expected_parameter_count(config)
    if preset == "base":
        assert 62e6 < count < 64e6  # "about 63M with a 37k shared vocabulary"
    else:
        assert 200e6 < count < 215e6
    assert VaswaniConfig.from_preset("big", dropout=0.1).dropout == 0.1


def test_default_config_is_the_paper_base_model():
    """The defaults are the base model of the paper (Table 3, Sections 3-5), written out number by number."""
    config = VaswaniConfig()
    paper_base = {
        "vocab_size": 37000,  # shared source-target BPE vocabulary of WMT14 EN-DE (Section 5.1)
        "encoder_layers": 6,  # N
        "decoder_layers": 6,
        "d_model": 512,
        "encoder_ffn_dim": 2048,  # d_ff
        "decoder_ffn_dim": 2048,
        "encoder_attention_heads": 8,  # h
        "decoder_attention_heads": 8,
        "dropout": 0.1,  # P_drop
        "label_smoothing": 0.1,  # eps_ls
        "attention_dropout": 0.0,  # not in the paper's text
        "activation_dropout": 0.0,
        "activation_function": "relu",  # FFN(x) = max(0, x W1 + b1) W2 + b2
        "position_embedding_type": "sinusoidal",
        "scale_embedding": True,  # embeddings * sqrt(d_model)
        "share_embeddings": True,  # one matrix for source, target and pre-softmax projection
        "tie_word_embeddings": True,
        "norm_position": "post",  # LayerNorm(x + Sublayer(x))
        "norm_type": "layernorm",
        "fixnorm": False,
        "encoder_layerdrop": 0.0,
        "decoder_layerdrop": 0.0,
        "encoder_drophead": 0.0,
        "decoder_drophead": 0.0,
        "cross_drophead": 0.0,
    }
    assert {key: getattr(config, key) for key in paper_base} == paper_base
    assert config.d_model // config.encoder_attention_heads == 64  # d_k = d_v = 64
    model = VaswaniForConditionalGeneration(tiny_config())  # decoding defaults of Section 6.1
    assert (model.generation_config.num_beams, model.generation_config.length_penalty) == (4, 0.6)


def test_initialization_follows_fairseq():
    torch.manual_seed(0)
    config = tiny_config(d_model=64, vocab_size=2000, encoder_ffn_dim=256, decoder_ffn_dim=256)
    model = VaswaniForConditionalGeneration(config)
    embedding = model.model.shared.weight
    assert embedding[config.pad_token_id].abs().max() == 0
    assert embedding[1:].std().item() == pytest.approx(64**-0.5, rel=0.05)
    fc1 = model.model.encoder.layers[0].ffn.fc1.weight  # Xavier uniform: U(-a, a), a = sqrt(6 / (fan_in + fan_out))
    bound = math.sqrt(6 / (64 + 256))
    assert fc1.abs().max() <= bound and fc1.abs().max() > 0.95 * bound
    assert model.model.encoder.layers[0].ffn.fc1.bias.abs().max() == 0
    # Attention input projections: each d x d block Xavier-uniform with gain 1/sqrt(2) (fairseq):
    # a = sqrt(6 / (d + d)) / sqrt(2) = sqrt(3 / (2d)), what Xavier gives the fused (3d x d) matrix.
    layer0 = model.model.decoder.layers[0]
    for projection in (model.model.encoder.layers[0].self_attn.qkv_proj, layer0.encoder_attn.kv_proj):
        for block in projection.weight.chunk(projection.num_blocks):
            assert 0.95 * math.sqrt(3 / 128) < block.abs().max() <= math.sqrt(3 / 128)
    assert layer0.self_attn.qkv_proj.bias.abs().max() == 0
    norm = model.model.decoder.layers[1].ffn_residual.norm
    assert torch.equal(norm.weight, torch.ones(64)) and torch.equal(norm.bias, torch.zeros(64))


def test_shift_tokens_right_and_decoder_inputs_from_labels():
    labels = torch.tensor([[5, 6, 2, -100], [7, 2, -100, -100]])
    expected = torch.tensor([[1, 5, 6, 2], [1, 7, 2, 0]])
    assert torch.equal(shift_tokens_right(labels, 0, 1), expected)
    assert torch.equal(tiny_model().prepare_decoder_input_ids_from_labels(labels), expected)


def test_loss_is_label_smoothed_cross_entropy_over_real_target_tokens():
    eps = 0.1
    model = tiny_model(seed=13, label_smoothing=eps).eval()
    input_ids, attention_mask, labels = random_batch(seed=13)
    labels[0, -2:] = -100
    labels[1, -1] = model.config.pad_token_id  # PAD in the labels is ignored too
    with torch.no_grad():
        out = model(input_ids, attention_mask, labels=labels)
    log_probs = out.logits.log_softmax(-1)
    vocab = log_probs.shape[-1]
    total, count = 0.0, 0
    for b in range(labels.shape[0]):
        for t in range(labels.shape[1]):
            y = labels[b, t].item()
            if y in (-100, model.config.pad_token_id):
                continue
            # (1 - eps) on the target, eps spread uniformly over the vocabulary.
            total += -(1 - eps) * log_probs[b, t, y] - eps / vocab * log_probs[b, t].sum()
            count += 1
    assert count == labels.numel() - 3
    torch.testing.assert_close(out.loss, torch.as_tensor(total / count, dtype=out.loss.dtype), atol=1e-5, rtol=1e-5)


def test_loss_with_num_items_in_batch_is_sum_over_items():
    model = tiny_model(seed=14, label_smoothing=0.0).eval()
    input_ids, attention_mask, labels = random_batch(seed=14)
    with torch.no_grad():
        mean = model(input_ids, attention_mask, labels=labels).loss
        scaled = model(input_ids, attention_mask, labels=labels, num_items_in_batch=torch.tensor(100)).loss
    torch.testing.assert_close(scaled, mean * labels.numel() / 100)


# ---------------------------------------------------------------------------------------------------------------
# Config validation
# ---------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (dict(d_model=100, encoder_attention_heads=8), r"d_model=100 is not divisible by encoder_attention_heads=8"),
        (dict(decoder_attention_heads=3), r"decoder_attention_heads=3"),
        (dict(dropout=-0.1), r"dropout=-0.1 .*\[0, 1\)"),
        (dict(attention_dropout=1.0), r"attention_dropout=1.0"),
        (dict(label_smoothing=1.5), r"label_smoothing=1.5"),
        (dict(position_embedding_type="rotary"), r"position_embedding_type='rotary'.*'sinusoidal', 'learned'"),
        (dict(activation_function="relu7"), r"activation_function='relu7'"),
        (dict(encoder_layers=0), r"encoder_layers=0 .*positive integer"),
        (dict(vocab_size=10.5), r"vocab_size=10.5"),
        (dict(pad_token_id=99), r"pad_token_id=99 .*vocab_size=99"),
        (dict(eos_token_id=None), r"eos_token_id=None"),
        (dict(init_std=-1.0), r"init_std=-1.0"),
        (dict(scale_embedding="yes"), r"scale_embedding='yes'"),
        (dict(is_encoder_decoder=False), r"is_encoder_decoder=False"),
        # Normalization, LayerDrop and pruning, DropHead (the options of test_options.py)
        (dict(encoder_layerdrop=1.0), r"encoder_layerdrop=1.0 .*\[0, 1\)"),
        (dict(decoder_layerdrop=-0.2), r"decoder_layerdrop=-0.2"),
        (dict(encoder_drophead=1.2), r"encoder_drophead=1.2"),
        (dict(cross_drophead="high"), r"cross_drophead='high'"),
        (dict(norm_type="rmsnorm"), r"norm_type='rmsnorm' .*'layernorm', 'scalenorm'"),
        (dict(norm_position="sandwich"), r"norm_position='sandwich' .*'post', 'pre'"),
        (dict(encoder_layers_to_keep=[0, 2]), r"encoder_layers_to_keep=\[0, 2\] has indices \[2\] outside"),
        (dict(decoder_layers_to_keep=[1, 1]), r"decoder_layers_to_keep=\[1, 1\] repeats or reorders"),
        (dict(decoder_layers_to_keep=[1, 0]), r"repeats or reorders"),
        (dict(encoder_layers_to_keep=[]), r"non-empty list"),
        (dict(fixnorm=True, share_embeddings=False, tie_word_embeddings=False), r"fixnorm=True needs tie_word"),
        (dict(fixnorm=True, scale_embedding=False), r"fixnorm=True needs scale_embedding=True"),
        (dict(layer_norm_eps=0), r"layer_norm_eps=0"),
        (dict(fixnorm="on"), r"fixnorm='on'"),
    ],
)
def test_config_validation_errors(overrides, message):
    with pytest.raises(ValueError, match=message):
        tiny_config(**overrides)


def test_config_values_overridden_at_load_time_are_validated(tmp_path):
    tiny_model().save_pretrained(tmp_path)
    with pytest.raises(ValueError, match=r"dropout=2.0"):
        VaswaniForConditionalGeneration.from_pretrained(tmp_path, dropout=2.0)
    with pytest.raises(ValueError, match="Unknown preset 'huge'"):
        VaswaniConfig.from_preset("huge")


def test_fairseq_special_token_layout_is_supported():
    model = tiny_model(seed=15, pad_token_id=1, bos_token_id=0, eos_token_id=2, decoder_start_token_id=2).eval()
    assert model.model.shared.weight[1].abs().max() == 0  # the PAD row
    input_ids, attention_mask, labels = random_batch(seed=15, pad_token_id=1)
    decoder_input_ids = model.prepare_decoder_input_ids_from_labels(labels)
    assert (decoder_input_ids[:, 0] == 2).all()
    out = model.generate(input_ids, attention_mask=attention_mask, max_new_tokens=4)
    assert (out[:, 0] == 2).all()


def test_resizing_the_vocabulary_keeps_one_shared_matrix():
    model = tiny_model(seed=16)
    model.resize_token_embeddings(120, mean_resizing=False)
    shared = model.model.shared.weight
    assert model.config.vocab_size == 120 and shared.shape == (120, 16)
    for tied in (
        model.lm_head.weight,
        model.model.encoder.embed_tokens.weight,
        model.model.decoder.embed_tokens.weight,
    ):
        assert tied.data_ptr() == shared.data_ptr()
    ids = torch.randint(4, 120, (2, 5))
    assert model(input_ids=ids, labels=ids).logits.shape == (2, 5, 120)


@pytest.mark.parametrize("eps", [0.0, 0.1, 0.3])
def test_fused_label_smoothed_loss_matches_torch_cross_entropy_and_its_gradient(eps):
    from modeling_vaswani.modeling_vaswani import LabelSmoothedCrossEntropy

    torch.manual_seed(0)
    logits = torch.randn(11, 17, dtype=torch.float64, requires_grad=True)
    labels = torch.randint(0, 17, (11,))
    labels[[2, 7]] = -100
    ours = LabelSmoothedCrossEntropy.apply(logits, labels, eps, -100)
    reference = F.cross_entropy(logits, labels, ignore_index=-100, label_smoothing=eps, reduction="sum")
    torch.testing.assert_close(ours, reference)
    (grad_ours,) = torch.autograd.grad(ours * 1.7, logits)
    (grad_reference,) = torch.autograd.grad(reference * 1.7, logits)
    torch.testing.assert_close(grad_ours, grad_reference)
    assert grad_ours[2].abs().max() == 0  # ignored rows get no gradient
    assert torch.autograd.gradcheck(lambda z: LabelSmoothedCrossEntropy.apply(z, labels, eps, -100), (logits,))


def test_beam_search_returning_several_sequences_with_and_without_cache_agree():
    """Cached beam search reorders the self-attention cache with the beams (the cross-attention rows are equal within
    a sentence, `reorder_beam_cache`); uncached decoding recomputes everything."""
    model = tiny_model(seed=17).eval()
    input_ids, attention_mask, _ = random_batch(batch_size=4, seed=17)
    kwargs = dict(attention_mask=attention_mask, num_beams=5, max_new_tokens=9, num_return_sequences=3)
    assert torch.equal(
        model.generate(input_ids, use_cache=True, **kwargs), model.generate(input_ids, use_cache=False, **kwargs)
    )


@pytest.mark.parametrize("paper_decoding", [False, True])
def test_beam_search_leaves_the_cross_attention_cache_alone_with_the_outputs_of_reordering_it(monkeypatch,
                                                                                              paper_decoding):  # fmt: skip
    """Beam search moves rows only within a sentence, whose beams attend over the same source: only the
    self-attention layers of the cache are reordered, and the tokens and scores are those of reordering both caches as
    transformers' `EncoderDecoderCache.reorder_cache` does."""
    from transformers.cache_utils import DynamicLayer

    import modeling_vaswani.generation_vaswani as generation
    import modeling_vaswani.modeling_vaswani as modeling

    model = tiny_model(seed=17).eval()
    input_ids, attention_mask, _ = random_batch(batch_size=4, seed=17)
    kwargs = dict(attention_mask=attention_mask, num_beams=5, max_new_tokens=9, num_return_sequences=3,
                  output_scores=True, return_dict_in_generate=True, paper_decoding=paper_decoding)  # fmt: skip
    reordered_layers, reorder = set(), DynamicLayer.reorder_cache

    def recording(layer, beam_idx):
        reordered_layers.add(id(layer))
        return reorder(layer, beam_idx)

    monkeypatch.setattr(DynamicLayer, "reorder_cache", recording)
    ours = model.generate(input_ids, **kwargs)
    assert len(reordered_layers) == model.config.decoder_layers  # the self-attention layers, not the cross ones
    for module in (generation, modeling):
        monkeypatch.setattr(module, "reorder_beam_cache", lambda cache, beam_idx: cache.reorder_cache(beam_idx))
    reordered_layers.clear()
    both = model.generate(input_ids, **kwargs)
    assert len(reordered_layers) == 2 * model.config.decoder_layers
    assert torch.equal(ours.sequences, both.sequences)
    assert torch.equal(ours.sequences_scores, both.sequences_scores)


def test_reorder_beam_cache_reorders_the_cross_attention_rows_only_when_rows_are_left_out():
    from modeling_vaswani.generation_vaswani import reorder_beam_cache

    model = tiny_model(seed=5).eval()
    input_ids, attention_mask, labels = random_batch(batch_size=3, seed=5)
    with torch.no_grad():
        _, cache = decode_step_by_step(model, input_ids, attention_mask, shift_tokens_right(labels, 0, 1))
    self_keys = [layer.keys for layer in cache.self_attention_cache.layers]
    cross_keys = [layer.keys for layer in cache.cross_attention_cache.layers]
    reorder_beam_cache(cache, torch.tensor([0, 0, 2]))  # as many rows: the cross-attention cache stays as it is
    assert all(layer.keys is keys for layer, keys in zip(cache.cross_attention_cache.layers, cross_keys, strict=True))
    for layer, keys in zip(cache.self_attention_cache.layers, self_keys, strict=True):
        assert torch.equal(layer.keys, keys[[0, 0, 2]])
    reorder_beam_cache(cache, torch.tensor([2, 1]))  # a row left out: both caches follow
    for layer, keys in zip(cache.cross_attention_cache.layers, cross_keys, strict=True):
        assert torch.equal(layer.keys, keys[[2, 1]])
    for layer, keys in zip(cache.self_attention_cache.layers, self_keys, strict=True):
        assert torch.equal(layer.keys, keys[[0, 0, 2]][[2, 1]])


@pytest.mark.parametrize("padded", [True, False])
def test_training_builds_the_padding_mask_without_reading_it_back(padded, monkeypatch):
    """transformers' mask helper reads a padding mask back from the device (`mask.all()`, a wait for the GPU) to drop
    a mask that masks nothing; a training forward pass builds the encoder's and the cross-attention's masks without
    asking, an evaluation still asks, and both compute the same attention (a mask of ones masks nothing)."""
    import transformers.masking_utils as masking

    asked = []
    check = masking._ignore_bidirectional_mask_sdpa
    monkeypatch.setattr(masking, "_ignore_bidirectional_mask_sdpa", lambda *a, **k: asked.append(1) or check(*a, **k))
    model = tiny_model(dropout=0.0, attention_dropout=0.0, activation_dropout=0.0, label_smoothing=0.0)
    model.set_attn_implementation("sdpa")
    input_ids, attention_mask, labels = random_batch()
    if not padded:
        attention_mask = torch.ones_like(attention_mask)
    model.train()
    trained = model(input_ids=input_ids, attention_mask=attention_mask, labels=labels).logits
    assert asked == []
    model.eval()
    with torch.no_grad():
        evaluated = model(input_ids=input_ids, attention_mask=attention_mask, labels=labels).logits
    assert len(asked) == 2  # the encoder's mask and the decoder's cross-attention mask
    torch.testing.assert_close(trained.detach(), evaluated, rtol=1e-5, atol=1e-5)
