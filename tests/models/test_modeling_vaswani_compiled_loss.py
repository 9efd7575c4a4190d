"""The training loss written for `torch.compile` (`label_smoothed_cross_entropy_sum`, `compiled_loss`; the trainer's
`--compiled_loss`): the same sum and gradients as torch's own label-smoothed cross-entropy and as the eager
`LabelSmoothedCrossEntropy`, in float32 and over bfloat16 logits (whose gradient it returns in bfloat16); compiled
by inductor, a model in training computes its loss with it, and an evaluation or a no-grad pass does not."""

import copy

import pytest
import torch
import torch.nn.functional as F
from conftest import random_batch, tiny_model

from modeling_vaswani.modeling_vaswani import LabelSmoothedCrossEntropy, label_smoothed_cross_entropy_sum

EPS = 0.1


def logits_and_labels(dtype, rows=29, vocab=53, seed=0):
    generator = torch.Generator().manual_seed(seed)
    logits = (3 * torch.randn(rows, vocab, generator=generator)).to(dtype).requires_grad_()
    labels = torch.randint(0, vocab, (rows,), generator=generator)
    labels[::5] = -100  # not scored
    return logits, labels


@pytest.mark.parametrize("eps", [0.0, EPS, 0.3])
def test_the_sum_is_torchs_label_smoothed_cross_entropy_and_the_eager_functions(eps):
    logits, labels = logits_and_labels(torch.float32)
    ours = label_smoothed_cross_entropy_sum(logits, labels, eps, -100)
    torchs = F.cross_entropy(logits, labels, ignore_index=-100, label_smoothing=eps, reduction="sum")
    eager = LabelSmoothedCrossEntropy.apply(logits, labels, eps, -100)
    assert ours.dtype == torch.float32
    torch.testing.assert_close(ours, torchs, rtol=1e-6, atol=1e-5)
    torch.testing.assert_close(ours, eager, rtol=1e-6, atol=1e-5)
    [ours_grad] = torch.autograd.grad(ours, logits)
    [torchs_grad] = torch.autograd.grad(torchs, logits)
    torch.testing.assert_close(ours_grad, torchs_grad, rtol=1e-5, atol=1e-6)
    assert ours_grad[::5].abs().max() == 0  # the rows not scored get no gradient


def test_bfloat16_logits_are_scored_in_float32_and_get_a_bfloat16_gradient():
    """What autocast hands the loss: bfloat16 logits. The sum is computed in float32 (the value of the float32 loss of
    the same, already rounded logits) and the gradient comes back in the logits' dtype: the float32 one, rounded."""
    logits, labels = logits_and_labels(torch.bfloat16)
    widened = logits.detach().float().requires_grad_()
    ours = label_smoothed_cross_entropy_sum(logits, labels, EPS, -100)
    reference = F.cross_entropy(widened, labels, ignore_index=-100, label_smoothing=EPS, reduction="sum")
    assert ours.dtype == torch.float32
    torch.testing.assert_close(ours, reference, rtol=1e-6, atol=1e-5)
    [ours_grad] = torch.autograd.grad(ours, logits)
    [reference_grad] = torch.autograd.grad(reference, widened)
    assert ours_grad.dtype == torch.bfloat16
    torch.testing.assert_close(ours_grad, reference_grad.to(torch.bfloat16), rtol=8e-3, atol=1e-6)  # 1 bf16 ulp


def loss_and_gradients(model, batch, autocast: bool):
    input_ids, attention_mask, labels = batch
    model.zero_grad()
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        loss = model(input_ids=input_ids, attention_mask=attention_mask, labels=labels).loss
    loss.backward()
    return loss.detach(), {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}


@pytest.mark.slow
@pytest.mark.parametrize("autocast", [False, True], ids=["float32", "bf16-autocast"])
def test_a_model_in_training_computes_its_loss_compiled_with_the_eager_loss_and_gradients(autocast):
    """Compiled by inductor (as `vaswani train --compiled_loss true` does), the loss of a training step is the eager
    model's, and so are the gradients of every weight; evaluation and no-grad passes never call the compiled loss
    (an evaluation would compile graphs of its own for nothing)."""
    torch._dynamo.reset()
    eager = tiny_model(seed=2, dropout=0.0, attention_dropout=0.0, activation_dropout=0.0).train()
    model = copy.deepcopy(eager)
    compiled, calls = torch.compile(label_smoothed_cross_entropy_sum), []
    model.compiled_loss = lambda *args: calls.append(args[0].dtype) or compiled(*args)
    batch = random_batch(batch_size=3, src_len=7, tgt_len=6, vocab_size=eager.config.vocab_size)
    batch[2][1, 4:] = eager.config.pad_token_id  # padding in the labels: not scored
    eager_loss, eager_grads = loss_and_gradients(eager, batch, autocast)
    loss, grads = loss_and_gradients(model, batch, autocast)
    assert calls == [torch.bfloat16 if autocast else torch.float32]  # the logits as the output layer made them
    torch.testing.assert_close(loss, eager_loss, rtol=1e-6, atol=1e-6)
    assert grads.keys() == eager_grads.keys()
    # float32: the same arithmetic up to float32 rounding; bf16: the logits' gradient is rounded to bfloat16 from
    # float32 values whose last bits may differ (the two paths' exp and summation orders, per CPU), so a value near a
    # rounding boundary may land one bfloat16 step apart: within bf16 rounding
    tolerance = {"rtol": 1e-2, "atol": 1e-4} if autocast else {"rtol": 1e-5, "atol": 1e-6}
    for name, grad in eager_grads.items():
        torch.testing.assert_close(grads[name], grad, **tolerance, msg=name)
    input_ids, attention_mask, labels = batch
    with torch.no_grad():
        model(input_ids=input_ids, attention_mask=attention_mask, labels=labels)
    model.eval()
    evaluated = model(input_ids=input_ids, attention_mask=attention_mask, labels=labels)
    assert len(calls) == 1 and evaluated.loss is not None
