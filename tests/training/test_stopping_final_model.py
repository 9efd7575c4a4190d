"""The model a run hands over (issue 18): the averaging window (--average_window, --average_checkpoints), the choice
among the last, the best and the averaged checkpoints (--final_model), a time budget without an update count, and
the progress bar's limit."""

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from conftest import random_batch, tiny_model, train_command_in_process, train_in_process
from safetensors.torch import load_file, save_file
from test_loop import TINY_RUN, data_args, data_dir, run_train  # noqa: F401

from vaswani.training.checkpoints import CheckpointManager
from vaswani.training.loop import choose_final_model, run_fraction
from vaswani.training.stopping import AveragingWindow, Candidate, StoppingRules, TimeBudget, choose, save_state
from vaswani.weights import average_checkpoints


# ---------------------------------------------------------------------------------------------------------------------
# The averaging window
# ---------------------------------------------------------------------------------------------------------------------
def test_window_spaces_its_saves_evenly_over_the_end_of_the_run():
    window = AveragingWindow(count=5, fraction=0.1, max_steps=1000, budget_seconds=1200.0)
    assert sorted(window.steps_due) == [920, 940, 960, 980, 1000]
    assert window.seconds_due == pytest.approx([1176.0, 1152.0, 1128.0, 1104.0])  # the budget's end saves anyway
    assert window.save_due(940, 0.0, 1.0) and not window.save_due(941, 0.0, 1.0)
    assert window.save_due(500, 1150.0, 1153.0) and not window.save_due(500, 1153.0, 1170.0)
    # nothing planned without averaging, or without a known end
    assert AveragingWindow(count=1, fraction=0.1, max_steps=1000, budget_seconds=60.0).steps_due == set()
    assert AveragingWindow(count=1, fraction=0.1, max_steps=1000, budget_seconds=60.0).seconds_due == []
    empty = AveragingWindow(count=5, fraction=0.1, max_steps=None, budget_seconds=None)
    assert not any(empty.save_due(step, 0.0, 1e9) for step in range(1, 2000))
    # a short run: the planned steps collapse onto each other instead of going to 0 or below
    assert AveragingWindow(count=5, fraction=0.1, max_steps=30, budget_seconds=None).steps_due == {30, 29, 28}
    with pytest.raises(ValueError, match="average_window 0 is not allowed"):
        AveragingWindow(count=5, fraction=0, max_steps=10, budget_seconds=None)


def write_checkpoint(folder: Path, seconds: float, weights: dict | None = None) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    save_state(folder, seconds, None)
    if weights is not None:
        save_file({k: v.contiguous() for k, v in weights.items()}, folder / "model.safetensors")
    return folder


def test_window_selects_by_updates_or_by_the_time_budget(tmp_path):
    # checkpoints every 100 updates, written at 1 s per update; an evaluation at 500 took 300 s
    steps = [100, 200, 300, 400, 500, 900, 950, 1000]
    seconds = {s: s + (300 if s > 500 else 0) for s in steps}
    kept = [write_checkpoint(tmp_path / f"step-{s:08d}", seconds[s]) for s in steps]
    window = AveragingWindow(count=5, fraction=0.1, max_steps=None, budget_seconds=None)
    assert [p.name for p in window.select(kept, 1000, None)] == ["step-00000900", "step-00000950", "step-00001000"]
    # by time: the last 10% of a 1300 s budget starts at 1170 s, i.e. at step 870
    assert [p.name for p in window.select(kept, 1000, 1300.0)] == ["step-00000900", "step-00000950", "step-00001000"]
    wide = AveragingWindow(count=3, fraction=0.8, max_steps=None, budget_seconds=None)
    assert [p.name for p in wide.select(kept, 1000, None)] == ["step-00000900", "step-00000950", "step-00001000"]
    assert [p.name for p in wide.select(kept, 1000, 1300.0)] == ["step-00000900", "step-00000950", "step-00001000"]
    assert [p.name for p in AveragingWindow(8, 0.8, None, None).select(kept, 1000, 1300.0)][0] == "step-00000300"
    assert [p.name for p in AveragingWindow(8, 0.8, None, None).select(kept, 1000, None)][0] == "step-00000200"
    assert AveragingWindow(count=1, fraction=0.5, max_steps=None, budget_seconds=None).select(kept, 1000, None) == [
        kept[-1]
    ]


# ---------------------------------------------------------------------------------------------------------------------
# The candidates and the choice
# ---------------------------------------------------------------------------------------------------------------------
def test_choose_takes_the_best_score_and_the_simpler_candidate_on_a_tie():
    last, best, average = (Candidate(n, [Path(f"step-{i:08d}")]) for i, n in enumerate(["last", "best", "average"]))
    for metric, scores, winner in [
        ("bleu", (30.0, 32.0, 31.0), "best"),
        ("bleu", (30.0, 29.0, 31.0), "average"),
        ("bleu", (31.0, 31.0, 31.0), "last"),
        ("bleu", (30.0, 31.0, 31.0), "best"),  # a tie between best and average: the single checkpoint
        ("loss", (3.0, 2.0, 2.5), "best"),  # lower is better
        ("loss", (2.0, 2.0, 1.0), "average"),
    ]:
        for candidate, score in zip((last, best, average), scores, strict=True):
            candidate.score = score
        assert choose([last, best, average], metric).name == winner, (metric, scores)


def test_candidates_of_a_run_reuse_recorded_scores(tmp_path):
    rules = StoppingRules(tmp_path, max_train_minutes=None, patience=None, metric="bleu", record=True,
                          window=AveragingWindow(count=3, fraction=0.5, max_steps=100, budget_seconds=None))  # fmt: skip
    kept = []
    for step, bleu in [(40, 10.0), (60, 30.0), (80, None), (100, None)]:
        if bleu is not None:
            rules.evaluated(step, {"bleu": bleu})
        folder = tmp_path / "checkpoints" / f"step-{step:08d}"
        kept.append(write_checkpoint(folder, float(step), {"w": torch.full((2,), float(step))}))
        save_file({"exp_avg": torch.zeros(2)}, folder / "training_state.safetensors")
        rules.saved(kept[-1], step)
    found = {c.name: c for c in rules.candidates(kept, None)}
    assert found["last"].checkpoints == [kept[-1]] and found["last"].score is None  # not evaluated: to be scored
    assert found["best"].checkpoints == [tmp_path / "best_checkpoint" / "step-00000060"]
    assert found["best"].score == 30.0
    copy = sorted(p.name for p in found["best"].checkpoints[0].iterdir())
    assert copy == ["model.safetensors", "stopping_state.json"]  # the weights and records, not the optimizer state
    assert load_file(found["best"].checkpoints[0] / "model.safetensors")["w"].tolist() == [60.0, 60.0]
    assert [p.name for p in found["average"].checkpoints] == ["step-00000060", "step-00000080", "step-00000100"]
    # with early stopping the window ends at the best checkpoint
    stopping = StoppingRules(
        tmp_path,
        None,
        patience=1,
        metric="bleu",
        window=AveragingWindow(count=3, fraction=0.5, max_steps=None, budget_seconds=None),
    )
    stopping.evaluated(60, {"bleu": 30.0})
    stopping.evaluated(80, {"bleu": 20.0})  # fmt: skip
    found = {c.name: c for c in stopping.candidates(kept[:3], "early stopping (bleu)")}
    assert found["last"].score == 20.0 and found["best"].score == 30.0
    assert [p.name for p in found["average"].checkpoints] == ["step-00000040", "step-00000060"]
    # no evaluation recorded (no best) and a window of one checkpoint (no average): the last alone
    alone = StoppingRules(tmp_path / "alone", None, None, "bleu", record=True)
    assert [c.name for c in alone.candidates(kept, None)] == ["last"]


def weights_of(model) -> dict:
    return {k: v.detach().clone() for k, v in model.state_dict().items() if k != "lm_head.weight"}


def fake_run(tmp_path: Path, checkpoints: dict[str, dict], window_count: int, final_model: str = "auto",
             max_eval_samples: int | None = None, final_eval_samples: int | None = None):  # fmt: skip
    """A Run for `choose_final_model`: checkpoints written with the given weights (oldest first), a real tiny model
    and a real validation score (the model's loss on a fixed batch, --metric_for_best loss) of a validation split of
    10 examples; `run.evaluated` lists the `max_samples` of each evaluation."""
    manager = CheckpointManager(tmp_path / "checkpoints")
    for step, weights in enumerate(checkpoints.values(), start=1):
        manager.save(step, lambda folder, w=weights, s=step: write_checkpoint(folder, float(s), w))
    model = tiny_model(seed=1)
    input_ids, attention_mask, labels = random_batch()
    batch = {"input_ids": input_ids, "attention_mask": attention_mask, "labels": labels}

    evaluated = []

    @torch.no_grad()
    def evaluate(split, max_samples=None):
        assert split == "validation"
        evaluated.append(max_samples)
        model.eval()
        return {"loss": model(**batch).loss.item()}

    window = AveragingWindow(count=window_count, fraction=1.0, max_steps=None, budget_seconds=None)
    args = SimpleNamespace(final_model=final_model, metric_for_best="loss", max_eval_samples=max_eval_samples,
                           final_eval_samples=final_eval_samples)  # fmt: skip
    return SimpleNamespace(
        args=args, accelerator=SimpleNamespace(num_processes=1, is_main_process=True), manager=manager,
        rules=StoppingRules(tmp_path, None, None, "loss", record=True, window=window),
        tokenized={"validation": range(10)}, training=SimpleNamespace(model=model), evaluate=evaluate,
        evaluated=evaluated,
    ), batch  # fmt: skip


@pytest.fixture(scope="module")
def trained_and_random():
    """A tiny model trained on a batch (low loss) and an untrained one."""
    trained = tiny_model(seed=0)
    input_ids, attention_mask, labels = random_batch()
    from conftest import overfit

    overfit(trained, {"input_ids": input_ids, "attention_mask": attention_mask, "labels": labels}, 150, 1e-2)
    return weights_of(trained), weights_of(tiny_model(seed=5))


def assert_model_has(model, weights: dict) -> None:
    for name, tensor in weights.items():
        torch.testing.assert_close(model.state_dict()[name], tensor, rtol=0, atol=1e-7, msg=name)


def test_selection_keeps_the_last_checkpoint_when_averaging_is_worse(tmp_path, trained_and_random):
    trained, untrained = trained_and_random
    run, _ = fake_run(tmp_path, {"early": untrained, "last": trained}, window_count=2)
    chosen, choice, _ = choose_final_model(run, None)
    scores = {c["name"]: c["score"] for c in choice["candidates"]}
    assert set(scores) == {"last", "average"} and scores["average"] > scores["last"]  # the average is worse
    assert chosen.name == choice["chosen"] == "last"
    assert_model_has(run.training.model, trained)
    # forced: the user gets the average although it is worse
    forced, _ = fake_run(tmp_path / "forced", {"early": untrained, "last": trained}, window_count=2,
                         final_model="average")  # fmt: skip
    chosen, choice, _ = choose_final_model(forced, None)
    assert chosen.name == "average" and choice["selection"] == "average"
    assert_model_has(forced.training.model, average_checkpoints(chosen.checkpoints))


def test_selection_takes_the_average_when_it_is_better(tmp_path, trained_and_random):
    trained, _ = trained_and_random
    noise = {k: 0.5 * torch.randn(v.shape, generator=torch.Generator().manual_seed(3)) for k, v in trained.items()}
    below = {k: v - noise[k] for k, v in trained.items()}
    above = {k: v + noise[k] for k, v in trained.items()}  # the last checkpoint: the trained model plus noise
    run, _ = fake_run(tmp_path, {"below": below, "above": above}, window_count=2)
    chosen, choice, _ = choose_final_model(run, None)
    scores = {c["name"]: c["score"] for c in choice["candidates"]}
    assert scores["average"] < scores["last"]  # the noise cancels in the average: the trained model again
    assert chosen.name == "average"
    assert_model_has(run.training.model, average_checkpoints(chosen.checkpoints))
    # --average_checkpoints 0 (or 1): no average candidate, the last checkpoint is the model
    no_average, _ = fake_run(tmp_path / "off", {"below": below, "above": above}, window_count=0)
    chosen, choice, _ = choose_final_model(no_average, None)
    assert [c["name"] for c in choice["candidates"]] == ["last"] and chosen.name == "last"
    assert_model_has(no_average.training.model, above)


@pytest.mark.parametrize(
    "max_eval_samples, final_eval_samples, rescored",
    [
        (4, None, True),  # training scored 4 of 10 examples, the choice all 10: every candidate again
        (4, 4, False),  # the same 4: the recorded score is reused
        (None, None, False),  # both all 10
        (20, None, False),  # more than the split holds is all of it
        (None, 6, True),
    ],
)
def test_the_choice_scores_again_what_training_scored_on_fewer_examples(
    tmp_path, trained_and_random, max_eval_samples, final_eval_samples, rescored
):
    trained, untrained = trained_and_random
    run, _ = fake_run(tmp_path, {"early": untrained, "last": trained}, window_count=2,
                      max_eval_samples=max_eval_samples, final_eval_samples=final_eval_samples)  # fmt: skip
    run.rules.evaluated(2, {"loss": 99.0})  # the last checkpoint's score from an evaluation during training
    chosen, choice, scored = choose_final_model(run, None)
    scores = {c["name"]: c["score"] for c in choice["candidates"]}
    assert choice["validation_examples"] == (min(10, final_eval_samples or 10))
    if rescored:  # the trained model's real loss, not the recorded 99: it wins; the average scored too
        assert run.evaluated == [final_eval_samples] * 2 and scores["last"] < 99.0 and chosen.name == "last"
        assert scored["validation"]["loss"] == scores["last"]  # the final validation line reuses it
    else:  # the recorded 99 stands (only the average is scored), so the average wins
        assert run.evaluated == [final_eval_samples] and scores["last"] == 99.0 and chosen.name == "average"


def test_progress_follows_the_limit_that_ends_the_run_first():
    budget = TimeBudget(minutes=20.0, seconds_before=60.0)
    assert run_fraction(100, 1000, budget, 540.0) == (0.5, "10.0/20 min, update 100")  # time is further along
    assert run_fraction(900, 1000, budget, 540.0) == (0.9, "900/1000 updates")
    assert run_fraction(900, None, TimeBudget(None), 540.0) == (0.0, "update 900")  # only early stopping ends it
    assert run_fraction(10, None, TimeBudget(1.0), 90.0)[0] == 1.0


# ---------------------------------------------------------------------------------------------------------------------
# Whole runs
# ---------------------------------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_a_time_budget_alone_trains_and_hands_over_the_best_candidate(data_dir, tmp_path):  # noqa: F811
    out = tmp_path / "run"
    result = run_train(
        [*data_args(data_dir), *TINY_RUN, "--output_dir", str(out), "--max_train_minutes", "0.08",
         "--eval_steps", "20", "--average_window", "0.5", "--average_checkpoints", "3", "--keep_checkpoints", "3"],
        tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-4000:]
    assert "until 0.08 minutes are spent" in result.stderr and "min, update" in result.stderr  # the bar: minutes
    results = json.loads((out / "results.json").read_text())
    assert results["finished_early"] == "time budget spent"
    choice = results["final_model"]
    candidates = {c["name"]: c for c in choice["candidates"]}
    assert set(candidates) >= {"last", "average"} and candidates["last"]["step"] == results["step"]
    assert len(candidates["average"]["checkpoints"]) >= 2  # planned saves filled the window
    best_score = max(c["score"] for c in choice["candidates"])
    assert candidates[choice["chosen"]]["score"] == best_score == results["validation"]["bleu"]
    assert [c["name"] for c in choice["candidates"] if c["score"] == best_score][0] == choice["chosen"]  # tie: simpler
    # the folder holds the chosen candidate's weights, and says so
    chosen = candidates[choice["chosen"]]
    folders = [out / "checkpoints" / n if (out / "checkpoints" / n).is_dir() else out / "best_checkpoint" / n
               for n in chosen["checkpoints"]]  # fmt: skip
    expected, final = average_checkpoints(folders), load_file(out / "model.safetensors")
    for name, tensor in final.items():
        torch.testing.assert_close(tensor, expected[name], rtol=0, atol=0, msg=name)
    assert results["averaged_checkpoints"] == chosen["checkpoints"]
    examples = choice["validation_examples"]  # the whole validation split (--final_eval_samples unset)
    assert examples == len((data_dir / "validation.jsonl").read_text().splitlines())
    assert (
        f"the best validation bleu on {examples} examples of: last checkpoint (step {results['step']})"
        in (out / "README.md").read_text()
    )


@pytest.mark.slow
def test_resume_keeps_the_choice_exactly(data_dir, tmp_path):  # noqa: F811
    common = [*data_args(data_dir), *TINY_RUN, "--max_train_steps", "12", "--eval_steps", "3",
              "--average_window", "0.5", "--average_checkpoints", "3", "--keep_checkpoints", "2"]  # fmt: skip
    whole = train_in_process([*common, "--output_dir", str(tmp_path / "whole")])
    first = train_in_process([*common, "--output_dir", str(tmp_path / "paused"), "--stop_after_steps", "7"])
    assert first["stopped_early"]
    resumed = train_in_process([*common, "--output_dir", str(tmp_path / "paused"), "--resume_from_checkpoint",
                                "latest"])  # fmt: skip
    assert len(whole["final_model"]["candidates"]) >= 2
    assert resumed["final_model"] == whole["final_model"]  # the same scores, recorded before and after the pause
    assert resumed["validation"]["bleu"] == whole["validation"]["bleu"]


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ([], "error: set when training ends: --max_train_steps"),
        (["--early_stopping_patience", "2", "--eval_steps", "2", "--lr_scheduler", "linear", "--learning_rate",
          "1e-3"], "--lr_scheduler linear ends with the run's budget, which is unknown"),
        (["--max_train_minutes", "1", "--lr_scheduler", "warmup_stable_decay", "--learning_rate", "1e-3",
          "--early_stopping_patience", "2", "--eval_steps", "2"],
         "--early_stopping_patience with --lr_scheduler warmup_stable_decay is refused"),
        (["--max_train_steps", "5", "--lr_scheduler", "warmup_stable_decay"],
         "--lr_scheduler warmup_stable_decay needs a positive --learning_rate (its peak), got None"),
        (["--max_train_steps", "5", "--decay_type", "cosine"],
         "--decay_type shapes --lr_scheduler warmup_stable_decay only, not noam"),
        (["--max_train_steps", "5", "--lr_scheduler", "warmup_stable_decay", "--learning_rate", "1e-3",
          "--decay_type", "sqrt"], "argument --decay_type: invalid choice: 'sqrt'"),
        (["--max_train_steps", "5", "--lr_scheduler", "warmup_stable_decay", "--learning_rate", "1e-3",
          "--decay_fraction", "0"], "--decay_fraction 0.0 is not allowed; use a fraction of the budget in (0, 1]"),
        (["--max_train_steps", "5", "--lr_scheduler", "warmup_stable_decay", "--learning_rate", "1e-3",
          "--decay_fraction", "1.5"], "--decay_fraction 1.5 is not allowed"),
        (["--max_train_steps", "5", "--lr_scheduler", "warmup_stable_decay", "--learning_rate", "1e-3",
          "--min_lr_ratio", "1"], "--min_lr_ratio 1.0 is not allowed; use a ratio of the peak in [0, 1)"),
        (["--max_train_steps", "5", "--lr_scheduler", "warmup_stable_decay", "--learning_rate", "1e-3",
          "--min_lr_ratio", "-0.1"], "--min_lr_ratio -0.1 is not allowed"),
        (["--max_train_steps", "5", "--ema_decay", "1"],
         "argument --ema_decay: '1' is not allowed; use auto, a decay in (0, 1) or none"),
        (["--max_train_steps", "5", "--ema_decay", "fast"], "argument --ema_decay: 'fast' is not allowed"),
        (["--max_train_steps", "5", "--final_model", "ema"], "--final_model ema needs the weights' moving average"),
        (["--early_stopping_patience", "2", "--eval_steps", "2", "--drophead_p_start", "0", "--drophead_p_end",
          "0.1"], "scheduled DropHead (--drophead_p_start/--drophead_p_end) runs over the run's number of updates"),
        (["--max_train_steps", "5", "--average_window", "0"], "--average_window 0.0 is not allowed"),
        (["--max_train_steps", "5", "--average_window", "1.5"], "--average_window 1.5 is not allowed"),
        (["--max_train_steps", "5", "--final_model", "best"], "--final_model best needs evaluations"),
        (["--max_train_steps", "5", "--final_model", "mean"], "invalid choice: 'mean'"),
        (["--max_train_steps", "5", "--final_eval_samples", "0"],
         "--final_eval_samples 0 is not allowed; use a positive integer or leave it unset"),
        (["--max_train_steps", "5", "--final_eval_samples", "all"], "argument --final_eval_samples: invalid int value"),
        (["--max_train_steps", "5", "--max_test_samples", "0"],
         "--max_test_samples 0 is not allowed; use a positive integer or leave it unset"),
        (["--max_train_steps", "5", "--max_test_samples", "-3"],
         "--max_test_samples -3 is not allowed; use a positive integer or leave it unset"),
    ],
)  # fmt: skip
def test_bad_ending_options_are_refused_before_anything_is_written(tmp_path, extra, message):
    out = tmp_path / "out"
    status, stderr = train_command_in_process(["--output_dir", str(out), *TINY_RUN, *extra])
    assert status == 2 and message in stderr, stderr[-2000:]
    assert "Traceback" not in stderr and not out.exists()


def test_selection_takes_the_moving_average_when_it_is_better(tmp_path, trained_and_random):
    """The last checkpoint's weights' moving average (--ema_decay, `ema.safetensors` beside its weights) is the fourth
    candidate: scored on the validation set like the others, chosen when it is the best, and forced by
    --final_model ema; a run without one has no such candidate."""
    trained, untrained = trained_and_random
    run, _ = fake_run(tmp_path, {"early": untrained, "last": untrained}, window_count=2)
    save_file({k: v.contiguous() for k, v in trained.items()}, run.manager.latest() / "ema.safetensors")
    chosen, choice, _ = choose_final_model(run, None)
    scores = {c["name"]: c["score"] for c in choice["candidates"]}
    assert list(scores) == ["last", "average", "ema"] and scores["ema"] < min(scores["last"], scores["average"])
    assert chosen.name == choice["chosen"] == "ema" and chosen.step == 2
    assert_model_has(run.training.model, trained)
    forced, _ = fake_run(tmp_path / "forced", {"early": trained, "last": trained}, window_count=2, final_model="ema")
    save_file({k: v.contiguous() for k, v in untrained.items()}, forced.manager.latest() / "ema.safetensors")
    chosen, choice, _ = choose_final_model(forced, None)  # forced: the user gets the average although it is worse
    assert chosen.name == "ema" and choice["selection"] == "ema" and chosen.score is None
    assert_model_has(forced.training.model, untrained)
