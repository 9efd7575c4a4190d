"""The learning-rate schedules of train.py against the paper's Eq. (3) and its published peak value."""

import math

import pytest
import torch

from vaswani.training.schedules import build_lr_scheduler, noam_learning_rate, noam_peak_learning_rate


def test_noam_matches_equation_3_and_the_papers_peak():
    d, warmup = 512, 4000
    for step in (1, 10, 1000, 3999, 4000, 4001, 10_000, 100_000):
        expected = d**-0.5 * min(step**-0.5, step * warmup**-1.5)
        assert noam_learning_rate(step, d, warmup) == pytest.approx(expected)
    assert noam_peak_learning_rate(d, warmup) == pytest.approx(6.99e-4, abs=5e-7)  # d^-0.5 * warmup^-0.5
    assert noam_learning_rate(4000, d, warmup) > noam_learning_rate(3999, d, warmup)
    assert noam_learning_rate(4000, d, warmup) > noam_learning_rate(4001, d, warmup)


def test_noam_scheduler_counts_updates_from_one():
    optimizer = torch.optim.Adam([torch.nn.Parameter(torch.zeros(2))])
    scheduler = build_lr_scheduler("noam", optimizer, warmup_steps=10, total_steps=100, d_model=64, factor=2.0)
    seen = []
    for _ in range(20):
        seen.append(optimizer.param_groups[0]["lr"])  # the rate the next update uses
        optimizer.step()
        scheduler.step()
    assert seen == pytest.approx([2.0 * noam_learning_rate(step, 64, 10) for step in range(1, 21)])


def test_noam_with_an_explicit_peak_and_the_other_schedules():
    optimizer = torch.optim.Adam([torch.nn.Parameter(torch.zeros(2))])
    scheduler = build_lr_scheduler("noam", optimizer, warmup_steps=10, total_steps=100, d_model=64, learning_rate=1e-3)
    rates = []
    for _ in range(30):
        rates.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    assert max(rates) == pytest.approx(1e-3) and rates.index(max(rates)) == 9  # the 10th update is the peak
    optimizer = torch.optim.Adam([torch.nn.Parameter(torch.zeros(2))])
    linear = build_lr_scheduler("linear", optimizer, warmup_steps=5, total_steps=25, d_model=64, learning_rate=0.5)
    rates = []
    for _ in range(25):
        rates.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        linear.step()
    assert rates[5] == pytest.approx(0.5) and rates[0] == 0.0 and math.isclose(rates[-1], 0.5 / 20, rel_tol=1e-6)


def test_schedule_errors():
    optimizer = torch.optim.Adam([torch.nn.Parameter(torch.zeros(2))])
    with pytest.raises(ValueError, match="lr_scheduler='step'"):
        build_lr_scheduler("step", optimizer, warmup_steps=1, total_steps=2, d_model=8)
    with pytest.raises(ValueError, match="needs a positive --learning_rate"):
        build_lr_scheduler("cosine", optimizer, warmup_steps=1, total_steps=2, d_model=8)
    with pytest.raises(ValueError, match="warmup_steps=0"):
        build_lr_scheduler("noam", optimizer, warmup_steps=0, total_steps=2, d_model=8)
