"""The moving average of the weights (--ema_decay, issue 27) against the formula written out step by step in float64,
its budget-fitted decay, and its checkpoint file: the model's state dict, tied weights once, loaded back exactly."""

import pytest
import torch
from conftest import random_batch, tiny_model

from vaswani.errors import CheckpointError
from vaswani.training.ema import EMA_WEIGHTS_FILE, WeightEMA, budget_decay, parse_ema_decay
from vaswani.weights import load_weights, load_weights_into_model


def train_a_little(model, ema, steps: int, fractions=None) -> list[dict[str, torch.Tensor]]:
    """`steps` Adam updates of `model`, `ema.update` after each; returns the parameters after each update (float64)."""
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    input_ids, attention_mask, labels = random_batch()
    seen = []
    for step in range(steps):
        model(input_ids=input_ids, attention_mask=attention_mask, labels=labels).loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        ema.update(fractions[step] if fractions else 0.0)
        seen.append({name: p.detach().double().clone() for name, p in model.named_parameters()})
    return seen


@pytest.mark.parametrize(("decay", "fractions"), [(0.9, None), ("auto", [k / 40 for k in range(1, 13)])])
def test_the_average_is_the_formula_with_its_warm_up(decay, fractions):
    """EMA_0 = W_0, then EMA_t = d_t EMA_{t-1} + (1 - d_t) W_t with d_t = min(D, (1 + t) / (10 + t)); `auto` with a
    run of 40 updates (the fraction after update t is (t + 1) / 40): D = 1 - 1 / (0.1 * 40) = 0.75."""
    model = tiny_model()
    ema = WeightEMA(model, decay)
    history = train_a_little(model, ema, 12, fractions)
    peak = 0.75 if decay == "auto" else decay
    expected = dict(history[0])
    for t in range(1, 12):
        d = min(peak, (1 + t) / (10 + t))
        expected = {name: d * expected[name] + (1 - d) * history[t][name] for name in expected}
    averaged = dict(zip(ema.names, ema.averaged, strict=True))
    assert ema.updates == 12 and set(averaged) == set(expected)
    for name, tensor in averaged.items():
        assert tensor.dtype == torch.float32
        torch.testing.assert_close(tensor.double(), expected[name], rtol=1e-5, atol=1e-6, msg=name)
    moved = max((averaged[n].double() - history[-1][n]).abs().max().item() for n in expected)
    assert moved > 1e-4  # the average lags the weights: not a copy of the last ones


def test_the_budget_decay_has_a_horizon_of_a_tenth_of_the_run():
    assert budget_decay(100, 100 / 2000) == pytest.approx(1 - 1 / 200)  # 2000 updates: a horizon of 200
    assert budget_decay(500, 0.25) == pytest.approx(1 - 1 / 200)  # 500 updates in a quarter of the budget: ~2000
    assert budget_decay(50, 0.0) == pytest.approx(1 - 1 / 5)  # no budget known: 10% of the updates so far
    assert 1 / (1 - budget_decay(1000, 1000 / 20_000)) == pytest.approx(2000)
    ema = WeightEMA(torch.nn.Linear(2, 2), "auto")
    ema.updates = 1999  # the warm-up (1 + t) / (10 + t) = 0.9955 lies above D = 0.995 by then
    assert ema.current_decay(2000 / 2000) == pytest.approx(0.995)
    ema.updates = 10
    assert ema.current_decay(11 / 2000) == pytest.approx(11 / 20)


def test_float32_average_of_bfloat16_weights():
    model = torch.nn.Linear(3, 2).to(torch.bfloat16)
    ema = WeightEMA(model, 0.5)
    ema.update()
    before = model.weight.detach().float().clone()
    with torch.no_grad():
        model.weight.add_(1.0)
    ema.update()
    after, d = model.weight.detach().float(), 2 / 11  # d_1 = min(0.5, (1 + 1) / (10 + 1))
    assert ema.averaged[0].dtype == torch.float32
    torch.testing.assert_close(ema.averaged[0], d * before + (1 - d) * after, rtol=1e-6, atol=1e-7)
    assert not torch.equal(ema.averaged[0], ema.averaged[0].bfloat16().float())  # more precise than bfloat16


def test_saved_average_is_a_state_dict_of_the_model_and_loads_back_exactly(tmp_path):
    model = tiny_model()
    ema = WeightEMA(model, 0.95)
    train_a_little(model, ema, 3)
    ema.save(tmp_path)
    saved = load_weights(tmp_path / EMA_WEIGHTS_FILE)
    assert len(saved) < len(model.state_dict())  # tied weights (the shared embeddings) once
    final = tiny_model(seed=1)
    load_weights_into_model(final, saved, source="ema")  # strict: every tensor of the model, the ties restored
    for name, parameter in final.named_parameters():
        torch.testing.assert_close(parameter, dict(zip(ema.names, ema.averaged, strict=True))[name], rtol=0, atol=0)
    resumed = WeightEMA(tiny_model(seed=2), 0.95)
    resumed.load(tmp_path, ema.updates)
    assert resumed.updates == 3
    for a, b in zip(resumed.averaged, ema.averaged, strict=True):
        assert torch.equal(a, b)
    with pytest.raises(CheckpointError, match="does not fit the model"):
        WeightEMA(tiny_model(vocab_size=120), 0.95).load(tmp_path, 3)  # other embedding shapes
    with pytest.raises(CheckpointError, match="cannot read"):
        WeightEMA(model, 0.95).load(tmp_path / "missing", 3)


@pytest.mark.parametrize("value", ["1", "1.5", "-0.1", "nan", "often"])
def test_ema_decay_values_outside_0_1_are_refused(value):
    with pytest.raises(ValueError, match=f"--ema_decay '{value}' is not allowed; use auto, a decay in"):
        parse_ema_decay(value)
    assert parse_ema_decay("auto") == "auto" and parse_ema_decay("0.999") == 0.999
    assert parse_ema_decay("none") is None and parse_ema_decay("0") is None
