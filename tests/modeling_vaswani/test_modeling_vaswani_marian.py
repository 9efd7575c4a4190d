"""Equivalence with transformers' `MarianMTModel` (the same architecture: PostNorm Transformer with scaled, shared
embeddings and sinusoidal positions), both built the same way with the same weights: same logits on a padded batch,
same greedy and beam-search tokens.

Marian's sinusoidal table concatenates [sin | cos] where the paper (and ours) interleaves, so our model uses learned
positions here and receives Marian's table; Marian keeps W^Q, W^K, W^V apart where ours fuses them (`qkv_proj`,
`kv_proj`), so those are concatenated in the same order."""

import pytest
import torch
from conftest import TINY, random_batch, tiny_config
from transformers import GenerationConfig, MarianConfig, MarianMTModel

from modeling_vaswani import VaswaniForConditionalGeneration

PAD, START, EOS = 0, 1, 2


def marian_model(seed: int = 0) -> MarianMTModel:
    config = MarianConfig(
        **{key: TINY[key] for key in TINY},
        activation_function="relu",
        dropout=0.0,
        attention_dropout=0.0,
        activation_dropout=0.0,
        scale_embedding=True,
        share_encoder_decoder_embeddings=True,
        tie_word_embeddings=True,
        pad_token_id=PAD,
        eos_token_id=EOS,
        decoder_start_token_id=START,
        forced_eos_token_id=None,
        init_std=0.5,  # outputs that differ between sentences (Marian's default 0.02 gives one repeated token)
    )
    torch.manual_seed(seed)
    model = MarianMTModel(config).eval()
    with torch.no_grad():  # random, not all-zero, biases and norm parameters, so that every mapping matters
        for name, parameter in model.named_parameters():
            if name.endswith("bias") or "layer_norm" in name:
                parameter.add_(torch.randn_like(parameter) * 0.1)
    return model


def marian_to_vaswani_state_dict(marian: MarianMTModel) -> dict[str, torch.Tensor]:
    """Our parameter names and layouts from Marian's: fused projections, residual-sublayer norms, stack inputs."""
    source = marian.state_dict()
    state = {"model.shared.weight": source["model.shared.weight"], "lm_head.weight": source["lm_head.weight"]}
    for side in ("encoder", "decoder"):
        state[f"model.{side}.embed_tokens.weight"] = source["model.shared.weight"]
        state[f"model.{side}.embeddings.embed_positions.weight"] = source[f"model.{side}.embed_positions.weight"]
        for i in range(TINY[f"{side}_layers"]):
            theirs, ours = f"model.{side}.layers.{i}", f"model.{side}.layers.{i}"
            for kind in ("weight", "bias"):
                state[f"{ours}.self_attn.qkv_proj.{kind}"] = torch.cat(
                    [source[f"{theirs}.self_attn.{p}_proj.{kind}"] for p in ("q", "k", "v")]
                )
                state[f"{ours}.self_attn.out_proj.{kind}"] = source[f"{theirs}.self_attn.out_proj.{kind}"]
                state[f"{ours}.self_attn_residual.norm.{kind}"] = source[f"{theirs}.self_attn_layer_norm.{kind}"]
                state[f"{ours}.ffn.fc1.{kind}"] = source[f"{theirs}.fc1.{kind}"]
                state[f"{ours}.ffn.fc2.{kind}"] = source[f"{theirs}.fc2.{kind}"]
                state[f"{ours}.ffn_residual.norm.{kind}"] = source[f"{theirs}.final_layer_norm.{kind}"]
                if side == "decoder":
                    state[f"{ours}.encoder_attn.q_proj.{kind}"] = source[f"{theirs}.encoder_attn.q_proj.{kind}"]
                    state[f"{ours}.encoder_attn.kv_proj.{kind}"] = torch.cat(
                        [source[f"{theirs}.encoder_attn.{p}_proj.{kind}"] for p in ("k", "v")]
                    )
                    state[f"{ours}.encoder_attn.out_proj.{kind}"] = source[f"{theirs}.encoder_attn.out_proj.{kind}"]
                    state[f"{ours}.encoder_attn_residual.norm.{kind}"] = source[
                        f"{theirs}.encoder_attn_layer_norm.{kind}"
                    ]
    return state


@pytest.fixture(scope="module")
def models():
    marian = marian_model(seed=21)
    assert not marian.final_logits_bias.any()  # Marian adds it to the logits; zero, as in every model it builds
    ours = VaswaniForConditionalGeneration(
        tiny_config(position_embedding_type="learned", dropout=0.0, pad_token_id=PAD, eos_token_id=EOS)
    ).eval()
    ours.load_state_dict(marian_to_vaswani_state_dict(marian), strict=True)
    return ours, marian


@pytest.mark.parametrize("backend", ["eager", "sdpa"])
def test_same_logits_as_marian_on_a_padded_batch(models, backend):
    ours, marian = models
    for model in models:
        model.set_attn_implementation(backend)
    input_ids, attention_mask, labels = random_batch(batch_size=4, src_len=9, tgt_len=7, seed=21)
    decoder_input_ids = ours.prepare_decoder_input_ids_from_labels(labels)
    decoder_input_ids[3, 4:] = PAD  # a padded target row too
    decoder_attention_mask = (decoder_input_ids != PAD).long()
    decoder_attention_mask[:, 0] = 1
    batch = dict(
        input_ids=input_ids,
        attention_mask=attention_mask,
        decoder_input_ids=decoder_input_ids,
        decoder_attention_mask=decoder_attention_mask,
    )
    with torch.no_grad():
        ours_out, marian_out = ours(**batch), marian(**batch)
    torch.testing.assert_close(ours_out.encoder_last_hidden_state, marian_out.encoder_last_hidden_state)
    torch.testing.assert_close(ours_out.logits, marian_out.logits, atol=1e-5, rtol=1e-5)
    assert ours_out.logits.std() > 0.1  # not a degenerate comparison


@pytest.mark.parametrize(
    "search",
    [dict(num_beams=1, do_sample=False), dict(num_beams=4, length_penalty=0.6, num_return_sequences=2)],
    ids=["greedy", "beam"],
)
def test_same_generated_tokens_as_marian(models, search):
    ours, marian = models
    input_ids, attention_mask, _ = random_batch(batch_size=4, src_len=9, seed=22)
    generation_config = GenerationConfig(
        decoder_start_token_id=START,
        eos_token_id=EOS,
        pad_token_id=PAD,
        max_new_tokens=12,
        min_new_tokens=1,
        early_stopping=False,
        **search,
    )
    outputs = [
        model.generate(input_ids, attention_mask=attention_mask, generation_config=generation_config)
        for model in models
    ]
    assert torch.equal(outputs[0], outputs[1])
    assert len({tuple(row) for row in outputs[0].tolist()}) > 1  # not one output for every sentence
