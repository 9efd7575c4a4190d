"""The learning-rate schedules of train.py against the paper's Eq. (3) and its published peak value."""

import math

import pytest
import torch
from transformers import get_scheduler

from vaswani.training.schedules import (
    BudgetSchedule,
    build_lr_scheduler,
    noam_learning_rate,
    noam_peak_learning_rate,
)


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


# ---------------------------------------------------------------------------------------------------------------------
# Schedules that know the budget (issue 27): warmup_stable_decay, and linear/cosine under a time budget
# ---------------------------------------------------------------------------------------------------------------------
def one_parameter_optimizer() -> torch.optim.Optimizer:
    return torch.optim.SGD([torch.nn.Parameter(torch.zeros(2))], lr=1.0)


def rates_of(scheduler, optimizer, fractions) -> list[float]:
    """The rate each update used, the schedule told after update k (1, 2, ...) that `fractions[k - 1]` is spent."""
    rates = []
    for fraction in fractions:
        rates.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
        scheduler.reach(fraction)
    return rates


@pytest.mark.parametrize("decay_type", ["1-sqrt", "linear", "cosine"])
@pytest.mark.parametrize(("warmup", "min_lr_ratio"), [(10, 0.0), (10, 0.1), (0, 0.25)])
def test_warmup_stable_decay_is_transformers_get_wsd_schedule_for_a_step_count(decay_type, warmup, min_lr_ratio):
    """A run of 100 updates, the last 20% decaying: transformers' own schedule is the reference, update by update."""
    from transformers.optimization import get_wsd_schedule

    total, reference_optimizer = 100, one_parameter_optimizer()
    reference = get_wsd_schedule(reference_optimizer, num_warmup_steps=warmup, num_decay_steps=20,
                                 num_training_steps=total, decay_type=decay_type,
                                 min_lr_ratio=min_lr_ratio)  # fmt: skip
    expected = []
    for _ in range(total):
        expected.append(reference_optimizer.param_groups[0]["lr"] * 3e-3)
        reference_optimizer.step()
        reference.step()
    optimizer = one_parameter_optimizer()
    ours = build_lr_scheduler("warmup_stable_decay", optimizer, warmup_steps=warmup, total_steps=total, d_model=8,
                              learning_rate=3e-3, decay_fraction=0.2, decay_type=decay_type,
                              min_lr_ratio=min_lr_ratio)  # fmt: skip
    rates = rates_of(ours, optimizer, [k / total for k in range(1, total + 1)])
    assert rates == pytest.approx(expected, rel=1e-12, abs=1e-15)
    assert (
        rates[50] == pytest.approx(3e-3) and rates[-1] < rates[81] < rates[80] == rates[79]
    )  # stable, then the decay


@pytest.mark.parametrize("name", ["linear", "cosine"])
def test_linear_and_cosine_with_a_time_budget_follow_transformers_over_the_budget(name):
    """Under a time budget they follow the fraction spent; at a steady pace (the fraction is k / 50 after update k) the
    curve is transformers' own for 50 updates, the warmup's end measured as 6 / 50 of the budget."""
    reference_optimizer = one_parameter_optimizer()
    for group in reference_optimizer.param_groups:
        group["lr"] = 2e-3
    reference = get_scheduler(name, reference_optimizer, num_warmup_steps=6, num_training_steps=50)
    expected = []
    for _ in range(50):
        expected.append(reference_optimizer.param_groups[0]["lr"])
        reference_optimizer.step()
        reference.step()
    optimizer = one_parameter_optimizer()
    ours = build_lr_scheduler(name, optimizer, warmup_steps=6, total_steps=None, d_model=8, learning_rate=2e-3,
                              budget_minutes=10.0)  # fmt: skip
    assert isinstance(ours, BudgetSchedule)
    assert rates_of(ours, optimizer, [k / 50 for k in range(1, 51)]) == pytest.approx(expected, rel=1e-12, abs=1e-15)
    assert ours.warmup_end == pytest.approx(6 / 50)


def test_a_time_budget_decays_over_its_last_minutes_whatever_the_pace():
    """Updates that take longer and longer: the decay starts when 70% of the budget is spent (not at 70% of the
    updates), and ends at min_lr_ratio x the peak when the budget is spent."""
    optimizer = one_parameter_optimizer()
    schedule = build_lr_scheduler("warmup_stable_decay", optimizer, warmup_steps=3, total_steps=None, d_model=8,
                                  learning_rate=1e-3, budget_minutes=1.0, decay_fraction=0.3, decay_type="linear",
                                  min_lr_ratio=0.1)  # fmt: skip
    seconds = [0.5 * k + 0.021 * k * k for k in range(1, 80)]  # the clock after update k: slower and slower
    fractions = [min(s / 60, 1.0) for s in seconds]
    rates = rates_of(schedule, optimizer, fractions)
    for k, rate in enumerate(rates[1:], start=1):  # rates[k]: after k updates, fractions[k - 1] spent
        fraction = fractions[k - 1]
        expected = (k / 3 * 0.9 + 0.1 if k < 3 else 1.0 if fraction < 0.7
                    else 0.1 + 0.9 * max(0.0, 1 - (fraction - 0.7) / 0.3))  # fmt: skip
        assert rate == pytest.approx(1e-3 * expected, rel=1e-12), k
    first_decayed = next(k for k, rate in enumerate(rates) if k > 3 and rate < 1e-3)
    assert fractions[first_decayed - 2] < 0.7 <= fractions[first_decayed - 1]
    assert first_decayed > 0.8 * len([f for f in fractions if f < 1])  # slower late updates: 70% of the time is later
    assert rates[-1] == pytest.approx(1e-4)


def test_a_budget_schedule_resumes_on_the_same_curve_and_refuses_another_budget(tmp_path):
    """The schedule's state goes through the checkpoint's own file format (`save_state_file`): a schedule restored
    after 7 of 15 updates continues with exactly the uninterrupted rates; a checkpoint of another budget or shape is
    refused."""
    from vaswani.fileio import load_state_file, save_state_file

    fractions = [0.013 * k * k for k in range(1, 16)]  # a time budget: any fractions, the same in both runs

    def build(**overrides):
        optimizer = one_parameter_optimizer()
        options = {"warmup_steps": 4, "total_steps": None, "d_model": 8, "learning_rate": 1e-3,
                   "budget_minutes": 5.0, "decay_fraction": 0.5, **overrides}  # fmt: skip
        return optimizer, build_lr_scheduler("warmup_stable_decay", optimizer, **options)

    optimizer, whole = build()
    uninterrupted = rates_of(whole, optimizer, fractions)
    optimizer, first = build()
    before = rates_of(first, optimizer, fractions[:7])
    save_state_file(tmp_path / "state.safetensors", first.state_dict())
    optimizer, resumed = build()
    resumed.load_state_dict(load_state_file(tmp_path / "state.safetensors"))
    assert before + rates_of(resumed, optimizer, fractions[7:]) == uninterrupted
    for other in ({"budget_minutes": 6.0}, {"decay_fraction": 0.2}, {"decay_type": "cosine"}):
        _, schedule = build(**other)
        with pytest.raises(ValueError, match=f"{next(iter(other)).replace('_minutes', '')}.*resume with the original"):
            schedule.load_state_dict(load_state_file(tmp_path / "state.safetensors"))


def test_budget_schedule_errors():
    with pytest.raises(ValueError, match="needs the run's length"):
        build_lr_scheduler("warmup_stable_decay", one_parameter_optimizer(), warmup_steps=1, total_steps=None,
                           d_model=8, learning_rate=1e-3)  # fmt: skip
    for bad, message in [({"decay_type": "sqrt"}, "decay_type='sqrt' is not allowed"),
                         ({"decay_fraction": 0.0}, "decay_fraction=0.0 is not allowed"),
                         ({"min_lr_ratio": 1.0}, "min_lr_ratio=1.0 is not allowed")]:  # fmt: skip
        with pytest.raises(ValueError, match=message):
            build_lr_scheduler("warmup_stable_decay", one_parameter_optimizer(), warmup_steps=1, total_steps=10,
                               d_model=8, learning_rate=1e-3, **bad)  # fmt: skip
    # a step count alone keeps linear and cosine transformers' own schedulers (and their checkpoints)
    plain = build_lr_scheduler("linear", one_parameter_optimizer(), warmup_steps=1, total_steps=10, d_model=8,
                               learning_rate=1e-3)  # fmt: skip
    assert not isinstance(plain, BudgetSchedule)
