"""The fused output layer and loss of training (`ChunkedOutputLoss`, `loss_chunk_tokens`; issue 41, item 3): the same
loss and gradients as the logits + `label_smoothed_loss` path within float32 rounding, chunk by chunk; and the
logits for everything but a training forward with labels."""

import copy

import pytest
import torch
from conftest import random_batch, tiny_model

from modeling_vaswani.modeling_vaswani import ChunkedOutputLoss, LabelSmoothedCrossEntropy


def loss_and_gradients(model, batch, chunk_tokens, num_items_in_batch=None):
    model = copy.deepcopy(model).train()
    model.loss_chunk_tokens = chunk_tokens
    input_ids, attention_mask, labels = batch
    outputs = model(input_ids=input_ids, attention_mask=attention_mask, labels=labels,
                    num_items_in_batch=num_items_in_batch)  # fmt: skip
    outputs.loss.backward()
    return outputs, {name: p.grad for name, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize(
    "options",
    [
        {},  # the paper's model: tied, shared embeddings, no bias
        {"final_logits_bias": True, "tie_word_embeddings": False, "share_embeddings": False},
        {"fixnorm": True, "label_smoothing": 0.0},
    ],
)
@pytest.mark.parametrize("chunk_tokens", [1, 5, 4096])
def test_the_fused_loss_has_the_logits_paths_loss_and_gradients(options, chunk_tokens):
    model = tiny_model(seed=1, dropout=0.0, **options)
    batch = random_batch(batch_size=3, src_len=7, tgt_len=6, vocab_size=model.config.vocab_size)
    batch[2][2, 3:] = model.config.pad_token_id  # padding in the labels: not scored
    reference, reference_grads = loss_and_gradients(model, batch, None, num_items_in_batch=11.0)
    fused, fused_grads = loss_and_gradients(model, batch, chunk_tokens, num_items_in_batch=11.0)
    assert fused.logits is None and reference.logits is not None
    assert fused.loss.item() == pytest.approx(reference.loss.item(), rel=1e-6)
    assert fused_grads.keys() == reference_grads.keys()
    for name, grad in reference_grads.items():  # (FixNorm's PAD row, zero and normalised, has huge gradients)
        scale = max(1.0, grad.abs().max().item())
        torch.testing.assert_close(fused_grads[name], grad, rtol=1e-5, atol=1e-6 * scale, msg=name)


def test_the_fused_function_matches_the_loss_of_logits_under_bf16_autocast():
    """bf16: the products in bf16 as autocast runs nn.Linear, the softmax in float32; within bf16 rounding. Each side
    has an autocast region of its own: up to torch 2.9 at least, autocast kept the bfloat16 copy of `weight` that the
    fused function's forward made (gradients off there) and handed it to the next product of the same region, which
    then had no gradient to give `weight` (torch 2.13 and 2.15 do not)."""
    torch.manual_seed(0)
    hidden = torch.randn(37, 16, requires_grad=True)
    weight = torch.randn(50, 16, requires_grad=True)
    labels = torch.randint(0, 50, (37,))
    labels[::7] = -100
    with torch.autocast("cpu", dtype=torch.bfloat16):
        fused = ChunkedOutputLoss.apply(hidden, weight, None, labels, 0.1, -100, 8)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        logits = torch.nn.functional.linear(hidden, weight)
        reference = LabelSmoothedCrossEntropy.apply(logits.float(), labels, 0.1, -100)
    fused_grads = torch.autograd.grad(fused, (hidden, weight))
    reference_grads = torch.autograd.grad(reference, (hidden, weight))
    assert fused.item() == pytest.approx(reference.item(), rel=1e-3)
    for ours, theirs in zip(fused_grads, reference_grads, strict=True):
        assert ours.dtype == theirs.dtype == torch.float32
        torch.testing.assert_close(ours, theirs, rtol=2e-2, atol=2e-2)


def test_evaluation_and_no_grad_keep_the_logits():
    model = tiny_model(seed=1)
    model.loss_chunk_tokens = 4
    input_ids, attention_mask, labels = random_batch(vocab_size=model.config.vocab_size)
    model.eval()
    evaluated = model(input_ids=input_ids, attention_mask=attention_mask, labels=labels)
    model.train()
    with torch.no_grad():
        no_grad = model(input_ids=input_ids, attention_mask=attention_mask, labels=labels)
    for outputs in (evaluated, no_grad):
        assert outputs.logits.shape == (*labels.shape, model.config.vocab_size) and outputs.loss is not None
    model.eval()
    assert model.generate(input_ids=input_ids, attention_mask=attention_mask, max_new_tokens=3).shape[0] == 3
