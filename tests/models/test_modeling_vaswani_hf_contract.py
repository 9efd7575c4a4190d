"""transformers' model contract (what its common model and generation tests exercise), checked on a tiny model:
loading the stacks on their own, thread-safe pruning at load time, `get_encoder(modality=...)`, compiled and
exported decoding with a static cache, the cache returned by beam search, untied output projections,
`logits_to_keep`, the attention-backend switch and clear errors."""

import copy
import functools
import threading

import pytest
import torch
from conftest import assert_static_cache_generate_compiles, random_batch, tiny_config, tiny_model
from transformers import PreTrainedModel

from modeling_vaswani import VaswaniForConditionalGeneration
from modeling_vaswani.modeling_vaswani import VaswaniDecoder, VaswaniEncoder

ORIGINAL_TIE_WEIGHTS, ORIGINAL_INIT_WEIGHTS = PreTrainedModel.tie_weights, PreTrainedModel.init_weights


# ----------------------------------------------------------------------------------------------------------------
# Loading: the stacks on their own, pruning while other threads load
# ----------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("stack_class", [VaswaniEncoder, VaswaniDecoder])
def test_a_stack_saves_and_loads_on_its_own(tmp_path, stack_class):
    torch.manual_seed(0)
    stack = stack_class(tiny_config(encoder_layers=3, decoder_layers=3)).eval()
    input_ids, attention_mask, labels = random_batch()
    inputs = (
        dict(input_ids=input_ids, attention_mask=attention_mask)
        if stack_class is VaswaniEncoder
        else dict(input_ids=labels, encoder_hidden_states=torch.randn(3, 7, 16), encoder_attention_mask=attention_mask)
    )
    stack.save_pretrained(tmp_path)
    loaded = stack_class.from_pretrained(tmp_path).eval()
    torch.testing.assert_close(loaded(**inputs).last_hidden_state, stack(**inputs).last_hidden_state)

    side = stack.side
    pruned = stack_class.from_pretrained(tmp_path, **{f"{side}_layers_to_keep": [0, 2]})
    assert len(pruned.layers) == 2 and pruned.config.pruned_layers == {side: [0, 2]}
    for kept, original in zip(pruned.layers, (stack.layers[0], stack.layers[2]), strict=True):
        for (name, a), (_, b) in zip(kept.state_dict().items(), original.state_dict().items(), strict=True):
            torch.testing.assert_close(a, b, msg=name)
    other = "decoder" if side == "encoder" else "encoder"
    with pytest.raises(ValueError, match=f"{other}_layers_to_keep=.* has no {other} stack"):
        stack_class.from_pretrained(tmp_path, **{f"{other}_layers_to_keep": [0]})


def test_concurrent_loads_with_different_layers_to_keep_do_not_interfere(tmp_path):
    full = tiny_model(encoder_layers=4, decoder_layers=4)
    full.save_pretrained(tmp_path)
    requests = {0: [0, 1, 2, 3], 1: [1, 3], 2: [0], 3: [0, 2, 3], 4: None, 5: [2]}
    results, errors = {}, []
    start = threading.Barrier(len(requests))

    def load(i, keep):
        try:
            start.wait()
            results[i] = VaswaniForConditionalGeneration.from_pretrained(tmp_path, encoder_layers_to_keep=keep)
        except Exception as error:  # reported below
            errors.append(error)

    threads = [threading.Thread(target=load, args=item) for item in requests.items()]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    full_state = full.state_dict()
    for i, keep in requests.items():
        kept = keep if keep is not None else [0, 1, 2, 3]
        model = results[i]
        assert model.config.encoder_layers == len(kept) and model.config.decoder_layers == 4
        assert model.lm_head.weight is model.model.shared.weight  # tied, with the saved values
        torch.testing.assert_close(model.lm_head.weight, full_state["model.shared.weight"])
        for new, old in enumerate(kept):
            torch.testing.assert_close(
                model.model.encoder.layers[new].self_attn.qkv_proj.weight,
                full_state[f"model.encoder.layers.{old}.self_attn.qkv_proj.weight"],
            )

    # transformers' loading patches class attributes while it runs; overlapping loads must not leave them patched.
    assert (
        PreTrainedModel.tie_weights is ORIGINAL_TIE_WEIGHTS and PreTrainedModel.init_weights is ORIGINAL_INIT_WEIGHTS
    )
    fresh = tiny_model()
    assert fresh.lm_head.weight is fresh.model.shared.weight


# ----------------------------------------------------------------------------------------------------------------
# Embedding tying: tie_word_embeddings (output projection) and share_embeddings (source/target) are independent
# ----------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("share", "tie"),
    [(True, True), (True, False), (False, True), (False, False)],
    ids=["both", "share", "tie", "none"],
)
def test_share_and_tie_switches_are_independent_and_survive_save_load_and_resize(tmp_path, share, tie):
    model = tiny_model(share_embeddings=share, tie_word_embeddings=tie)
    base = model.model
    encoder_embed, decoder_embed = base.encoder.embed_tokens.weight, base.decoder.embed_tokens.weight
    assert (encoder_embed is decoder_embed) == share
    assert (model.lm_head.weight is decoder_embed) == tie

    # Distinct matrices get distinct gradients; one matrix gets the sum of its uses.
    input_ids, attention_mask, labels = random_batch()
    model(input_ids=input_ids, attention_mask=attention_mask, labels=labels).loss.backward()
    if not share:
        assert not torch.equal(encoder_embed.grad, decoder_embed.grad)
    if not tie:
        assert not torch.equal(model.lm_head.weight.grad, decoder_embed.grad)

    model.save_pretrained(tmp_path)
    loaded, info = VaswaniForConditionalGeneration.from_pretrained(tmp_path, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"]
    loaded_base = loaded.model
    assert (loaded_base.encoder.embed_tokens.weight is loaded_base.decoder.embed_tokens.weight) == share
    assert (loaded.lm_head.weight is loaded_base.decoder.embed_tokens.weight) == tie
    for name, tensor in model.state_dict().items():
        torch.testing.assert_close(loaded.state_dict()[name], tensor, msg=name)

    loaded.resize_token_embeddings(120)
    assert loaded.lm_head.weight.shape == (120, 16) and loaded.config.vocab_size == 120
    assert loaded_base.encoder.embed_tokens.weight.shape == (120, 16)
    assert (loaded_base.encoder.embed_tokens.weight is loaded_base.decoder.embed_tokens.weight) == share
    assert (loaded.lm_head.weight is loaded_base.decoder.embed_tokens.weight) == tie
    # The resized model still runs and keeps the old rows.
    torch.testing.assert_close(loaded.lm_head.weight[:99], model.lm_head.weight)
    assert loaded(input_ids=input_ids, attention_mask=attention_mask, labels=labels).logits.shape[-1] == 120


# ----------------------------------------------------------------------------------------------------------------
# transformers' accessors and switches
# ----------------------------------------------------------------------------------------------------------------
def test_get_encoder_and_get_decoder_keep_transformers_signature():
    model = tiny_model()
    assert model.get_encoder() is model.model.encoder
    assert model.get_encoder(modality=None) is model.model.encoder
    assert model.model.get_encoder(modality=None) is model.model.encoder
    assert model.get_decoder() is model.model.decoder
    with pytest.raises(ValueError, match="modality"):
        model.get_encoder(modality="smell")


def test_decoder_without_encoder_states_raises_a_clear_error():
    model = tiny_model()
    with pytest.raises(ValueError, match="needs the encoder's output"):
        model.get_decoder()(input_ids=torch.tensor([[1, 5]]))


def test_logits_to_keep_returns_the_last_positions_and_generate_uses_it(monkeypatch):
    model = tiny_model().eval()
    input_ids, attention_mask, labels = random_batch()
    batch = dict(input_ids=input_ids, attention_mask=attention_mask, decoder_input_ids=labels)
    with torch.no_grad():
        full = model(**batch).logits  # (3, 6, 99)
        torch.testing.assert_close(model(**batch, logits_to_keep=1).logits, full[:, -1:])
        torch.testing.assert_close(model(**batch, logits_to_keep=4).logits, full[:, -4:])
        torch.testing.assert_close(model(**batch, logits_to_keep=torch.tensor([0, 3])).logits, full[:, [0, 3]])
    with pytest.raises(ValueError, match="logits_to_keep=1 cannot be combined with labels"):
        model(input_ids=input_ids, attention_mask=attention_mask, labels=labels, logits_to_keep=1)

    seen = []
    forward = type(model).forward

    @functools.wraps(forward)  # keeps the signature, which generate() reads to decide on logits_to_keep
    def recording_forward(self, *args, **kwargs):
        seen.append(kwargs.get("logits_to_keep"))
        return forward(self, *args, **kwargs)

    monkeypatch.setattr(type(model), "forward", recording_forward)
    model.generate(input_ids=input_ids, attention_mask=attention_mask, num_beams=1, do_sample=False, max_new_tokens=3)
    assert seen and set(seen) == {1}


def test_attention_backend_switch_reaches_every_attention_module():
    """`_supports_attention_backend`: the kernel comes from `config._attn_implementation` at call time, so
    `set_attn_implementation` switches all attention modules, and a kernel registered with transformers'
    `AttentionInterface` is used."""
    from transformers import AttentionInterface, AttentionMaskInterface
    from transformers.integrations.sdpa_attention import sdpa_attention_forward
    from transformers.masking_utils import sdpa_mask

    calls = []

    def counting_sdpa(*args, **kwargs):
        calls.append(1)
        return sdpa_attention_forward(*args, **kwargs)

    AttentionInterface.register("counting_sdpa", counting_sdpa)
    AttentionMaskInterface.register("counting_sdpa", sdpa_mask)  # the kernel takes sdpa's masks
    model = tiny_model().eval()
    assert type(model)._supports_attention_backend
    input_ids, attention_mask, labels = random_batch()
    batch = dict(input_ids=input_ids, attention_mask=attention_mask, labels=labels)
    with torch.no_grad():
        reference = model(**batch).logits
        model.set_attn_implementation("counting_sdpa")
        torch.testing.assert_close(model(**batch).logits, reference)
    assert len(calls) == 2 + 2 * 2  # encoder self-attention, decoder self- and cross-attention, 2 layers each


# ----------------------------------------------------------------------------------------------------------------
# The cache generate() returns follows one batch layout, so generic cache code can use it
# ----------------------------------------------------------------------------------------------------------------
def test_beam_search_cache_has_one_batch_layout_for_reorder_and_select():
    model = tiny_model(seed=4).eval()
    input_ids, attention_mask, _ = random_batch(seed=4)  # 3 sentences
    beams = 4
    out = model.generate(
        input_ids, attention_mask=attention_mask, num_beams=beams, max_new_tokens=4, return_dict_in_generate=True
    )
    cache = out.past_key_values
    rows = input_ids.shape[0] * beams
    for part in (cache.self_attention_cache, cache.cross_attention_cache):
        assert all(layer.keys.shape[0] == layer.values.shape[0] == rows for layer in part.layers)

    # One decoding step on the returned cache, with the encoder output laid out as generate() lays it out.
    encoder_states = model.get_encoder()(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state

    def step(past, select):
        with torch.no_grad():
            return model(
                encoder_outputs=(encoder_states.repeat_interleave(beams, dim=0)[select],),
                attention_mask=attention_mask.repeat_interleave(beams, dim=0)[select],
                decoder_input_ids=torch.full((len(select), 1), 7),
                past_key_values=past,
            ).logits

    everything = step(copy.deepcopy(cache), torch.arange(rows))
    # batch_select_indices keeps the same rows of both caches: the first beam of every sentence.
    first_beams = torch.arange(0, rows, beams)
    selected = copy.deepcopy(cache)
    selected.batch_select_indices(first_beams)
    torch.testing.assert_close(step(selected, first_beams), everything[first_beams])
    # reorder_cache moves both caches with the beams (here: beams reversed within each sentence).
    reorder = torch.arange(rows).view(-1, beams).flip(-1).flatten()
    reordered = copy.deepcopy(cache)
    reordered.reorder_cache(reorder)
    torch.testing.assert_close(step(reordered, torch.arange(rows)), everything[reorder])


def test_generation_continues_from_a_returned_cache():
    model = tiny_model(seed=5).eval()
    input_ids, attention_mask, _ = random_batch(seed=5)
    greedy = dict(attention_mask=attention_mask, num_beams=1, do_sample=False)
    straight = model.generate(input_ids, max_new_tokens=6, min_new_tokens=6, **greedy)
    first = model.generate(input_ids, max_new_tokens=3, min_new_tokens=3, return_dict_in_generate=True, **greedy)
    continued = model.generate(
        input_ids,
        decoder_input_ids=first.sequences,
        past_key_values=first.past_key_values,
        max_new_tokens=3,
        min_new_tokens=3,
        **greedy,
    )
    assert torch.equal(continued, straight)


# ----------------------------------------------------------------------------------------------------------------
# _can_compile_fullgraph: static-cache decoding compiles as one graph and exports
# ----------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("options", [{}, {"fixnorm": True, "norm_type": "scalenorm"}])
def test_static_cache_decoding_compiles_as_one_graph(options):
    """See `assert_static_cache_generate_compiles`; with FixNorm, inside generate()'s `output_rows_normalized_once`."""
    input_ids, attention_mask, _ = random_batch(seed=3)
    assert_static_cache_generate_compiles(tiny_model(seed=3, **options).eval(), input_ids,
                                          attention_mask=attention_mask, num_beams=1, do_sample=False,
                                          max_new_tokens=4, min_new_tokens=4)  # fmt: skip


def test_torch_export_of_encoder_and_static_cache_decoder():
    """transformers' own exporter (`Seq2SeqLMExportableModule`: `get_encoder()`, `torch.export` of the encoder and
    of one decoder step on a static cache) gives the greedy tokens of `generate()`."""
    from transformers.integrations.executorch import Seq2SeqLMExportableModule

    model = tiny_model(seed=3).eval()
    input_ids, _, _ = random_batch(batch_size=1, seed=3)
    exported = Seq2SeqLMExportableModule(model, batch_size=1, max_hidden_seq_length=16, max_cache_length=8).export()
    tokens = exported.generate(input_ids, max_new_tokens=5)  # starts from token 0, as T5 does
    expected = model.generate(input_ids, decoder_start_token_id=0, num_beams=1, do_sample=False, max_new_tokens=4)
    assert tokens == expected[0].tolist()[: len(tokens)] and len(tokens) > 1


# ----------------------------------------------------------------------------------------------------------------
# Inputs and training switches of the common model tests
# ----------------------------------------------------------------------------------------------------------------
def test_inputs_embeds_match_input_ids_in_forward_and_generate():
    model = tiny_model(seed=6).eval()
    input_ids, attention_mask, labels = random_batch(seed=6)
    decoder_input_ids = model.prepare_decoder_input_ids_from_labels(labels)
    embed = model.get_input_embeddings()
    with torch.no_grad():
        from_ids = model(input_ids, attention_mask, decoder_input_ids=decoder_input_ids).logits
        from_embeds = model(
            inputs_embeds=embed(input_ids),
            attention_mask=attention_mask,
            decoder_inputs_embeds=embed(decoder_input_ids),
        ).logits
    torch.testing.assert_close(from_embeds, from_ids)
    search = dict(attention_mask=attention_mask, num_beams=2, max_new_tokens=5)
    assert torch.equal(model.generate(inputs_embeds=embed(input_ids), **search), model.generate(input_ids, **search))


def test_gradient_checkpointing_gives_the_same_gradients():
    input_ids, attention_mask, labels = random_batch(seed=8)
    gradients = []
    for checkpointing in (False, True):
        model = tiny_model(seed=8, dropout=0.0)
        if checkpointing:
            # the name of transformers >= 5.23; train.py falls back to the old one the same way
            getattr(model, "activation_checkpointing_enable", model.gradient_checkpointing_enable)()
        model.train()
        model(input_ids=input_ids, attention_mask=attention_mask, labels=labels).loss.backward()
        gradients.append({name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None})
    assert gradients[0].keys() == gradients[1].keys() and len(gradients[0]) > 20
    for name, grad in gradients[0].items():
        torch.testing.assert_close(gradients[1][name], grad, msg=name)
