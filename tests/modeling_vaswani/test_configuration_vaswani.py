"""Model options that change the computation, each checked against its definition: scale_embedding, the two extra
dropouts (where they act, train vs eval), the FFN activation (against torch.nn.functional) and training with
learned positions. (share_embeddings / tie_word_embeddings: tests/modeling_vaswani/test_modeling_vaswani_hf_contract.py.)"""

import math

import pytest
import torch
import torch.nn.functional as F
from conftest import random_batch, tiny_model

from modeling_vaswani import sinusoidal_position_table


@pytest.mark.parametrize("scale", [True, False])
def test_scale_embedding_multiplies_the_lookup_by_sqrt_d_or_not(scale):
    model = tiny_model(scale_embedding=scale).eval()
    input_ids, _, _ = random_batch()
    with torch.no_grad():
        raw = model.model.shared(input_ids)  # (B, S, d)
        stack_input = model.model.encoder.embeddings(raw)
    factor = math.sqrt(16) if scale else 1.0
    expected = raw * factor + sinusoidal_position_table(input_ids.shape[1], 16)
    torch.testing.assert_close(stack_input, expected, atol=1e-5, rtol=1e-5)


def ffn_probe(model):
    """Records, for the first encoder layer's FFN, the fc1 output and the fc2 input of every call."""
    ffn = model.model.encoder.layers[0].ffn
    record = {}
    ffn.fc1.register_forward_hook(lambda module, args, output: record.__setitem__("fc1_out", output.detach()))
    ffn.fc2.register_forward_pre_hook(lambda module, args: record.__setitem__("fc2_in", args[0].detach()))
    return record


@pytest.mark.parametrize(
    ("name", "reference"),
    [
        ("relu", F.relu),
        ("gelu", F.gelu),
        ("gelu_new", lambda x: F.gelu(x, approximate="tanh")),
        ("silu", F.silu),
        ("swish", F.silu),
        ("tanh", torch.tanh),
    ],
)
def test_ffn_activation_is_the_named_torch_function(name, reference):
    model = tiny_model(activation_function=name).eval()
    record = ffn_probe(model)
    input_ids, attention_mask, labels = random_batch()
    with torch.no_grad():
        model(input_ids=input_ids, attention_mask=attention_mask, labels=labels)
    torch.testing.assert_close(record["fc2_in"], reference(record["fc1_out"]))


def test_activation_dropout_acts_after_the_nonlinearity_in_training_only():
    p = 0.4
    model = tiny_model(dropout=0.0, activation_dropout=p)
    record = ffn_probe(model)
    input_ids, attention_mask, labels = random_batch()
    batch = dict(input_ids=input_ids, attention_mask=attention_mask, labels=labels)

    model.train()
    torch.manual_seed(0)
    model(**batch)
    activated = F.relu(record["fc1_out"])
    kept = record["fc2_in"] != 0
    # Inverted dropout on max(0, x W1 + b1): kept units are scaled by 1 / (1 - p), dropped ones are zero.
    torch.testing.assert_close(record["fc2_in"][kept], activated[kept] / (1 - p))
    dropped_share = ((activated > 0) & ~kept).sum() / (activated > 0).sum()
    assert 0.25 < dropped_share < 0.55

    model.eval()
    with torch.no_grad():
        first = model(**batch).logits
        torch.testing.assert_close(record["fc2_in"], F.relu(record["fc1_out"]))  # no dropout in evaluation
        assert torch.equal(model(**batch).logits, first)


def test_attention_dropout_acts_on_the_attention_probabilities_in_training_only():
    p = 0.3
    model = tiny_model(dropout=0.0, attention_dropout=p)
    model.set_attn_implementation("eager")  # returns the probabilities it used
    input_ids, attention_mask, labels = random_batch()
    batch = dict(input_ids=input_ids, attention_mask=attention_mask, labels=labels, output_attentions=True)

    model.eval()
    with torch.no_grad():
        clean = model(**batch)
        assert torch.equal(model(**batch).logits, clean.logits)
    probabilities = clean.encoder_attentions[0]  # (B, h, S, S), rows sum to 1
    torch.testing.assert_close(probabilities.sum(-1), torch.ones_like(probabilities[..., 0]))

    model.train()
    torch.manual_seed(0)
    with torch.no_grad():
        noisy = model(**batch)
    # The first layer's input is the same in both modes (dropout=0), so its probabilities are the same before
    # dropout: after it, each is either dropped (0) or scaled by 1 / (1 - p).
    dropped = noisy.encoder_attentions[0]
    kept = dropped != 0
    torch.testing.assert_close(dropped[kept], probabilities[kept] / (1 - p))
    share = ((probabilities > 0) & ~kept).sum() / (probabilities > 0).sum()
    assert 0.2 < share < 0.4
    assert not torch.allclose(noisy.logits, clean.logits)


def test_training_with_learned_positions_updates_them_and_lowers_the_loss():
    model = tiny_model(seed=2, position_embedding_type="learned", dropout=0.0)
    positions = model.model.encoder.embeddings.embed_positions
    decoder_positions = model.model.decoder.embeddings.embed_positions
    before = positions.weight.detach().clone()
    input_ids, attention_mask, labels = random_batch(seed=2)
    batch = dict(input_ids=input_ids, attention_mask=attention_mask, labels=labels)
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    model.train()
    losses = []
    for _ in range(8):
        optimizer.zero_grad()
        loss = model(**batch).loss
        loss.backward()
        if not losses:
            # Rows of the positions used get gradients; rows past the longest input get none.
            assert positions.weight.grad[: input_ids.shape[1]].abs().sum(-1).gt(0).all()
            assert positions.weight.grad[input_ids.shape[1] :].abs().sum() == 0
            assert decoder_positions.weight.grad[: labels.shape[1]].abs().sum(-1).gt(0).all()
        optimizer.step()
        losses.append(loss.item())
    assert losses[-1] < 0.8 * losses[0]
    assert not torch.equal(positions.weight[: input_ids.shape[1]], before[: input_ids.shape[1]])
