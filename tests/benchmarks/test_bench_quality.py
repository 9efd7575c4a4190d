"""benchmarks/bench_quality.py: the peer's grid, the choice of its best on validation (never on test), our margin per
seed, and the options checked up front."""

import json
import sys
from pathlib import Path

import pytest
from conftest import REPO_ROOT

sys.path.insert(0, str(REPO_ROOT / "benchmarks"))
from bench_quality import (  # noqa: E402
    OUR_RECIPES,
    PEER_DEFAULT,
    PEER_GRID,
    PEER_WARMUP_STEPS,
    WSD_DECAY_FRACTION,
    WSD_DECAY_TYPE,
    WSD_MIN_LR_RATIO,
    Run,
    fit_wsd_to_budget,
    parse_args,
    run_all,
    summarise,
)


@pytest.fixture
def data_dir(tmp_path):
    for split in ("train", "validation", "test"):
        (tmp_path / f"{split}.jsonl").write_text("")
    return tmp_path


def test_the_grid_is_three_learning_rates_by_two_batch_sizes_by_two_schedules_and_holds_the_default():
    assert len(PEER_GRID) == 12 and PEER_DEFAULT in PEER_GRID
    assert len({point["learning_rate"] for point in PEER_GRID}) == 3
    assert len({point["batch_size"] for point in PEER_GRID}) == 2
    assert {point["lr_scheduler"] for point in PEER_GRID} == {"inverse_sqrt", "warmup_stable_decay"}


def test_the_peers_warmup_stable_decay_is_train_pys_default_one(tmp_path):
    from vaswani.training.options import parse_args as train_args

    args = train_args(["--config", str(REPO_ROOT / "configs" / "small-data.yaml"), "--train_file", "x.jsonl",
                       "--output_dir", str(tmp_path / "out"), "--max_train_minutes", "1",
                       "--lr_scheduler", "warmup_stable_decay"])  # fmt: skip
    assert (args.decay_fraction, args.decay_type, args.min_lr_ratio) == (
        WSD_DECAY_FRACTION, WSD_DECAY_TYPE, WSD_MIN_LR_RATIO)  # fmt: skip
    assert args.warmup_steps == PEER_WARMUP_STEPS


def test_fitting_wsd_to_the_budget_gives_transformers_schedule_for_the_estimated_update_count():
    """A run that made 600 updates in half its budget is fitted to 1,200: from there on, its learning rates are those
    of transformers' warmup_stable_decay built for 1,200 updates (the independent reference), and so are those before
    (the constant phase is the same)."""
    import torch
    from transformers import get_wsd_schedule

    def optimizer():
        return torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1e-3)

    def rates(scheduler, steps):
        out = []
        for _ in range(steps):
            out.append(scheduler.optimizer.param_groups[0]["lr"])
            scheduler.optimizer.step()
            scheduler.step()
        return out

    provisional = get_wsd_schedule(optimizer(), PEER_WARMUP_STEPS, 1, num_training_steps=10**6, decay_type="1-sqrt")
    reference = get_wsd_schedule(optimizer(), PEER_WARMUP_STEPS, round(WSD_DECAY_FRACTION * 1200),
                                 num_training_steps=1200, decay_type=WSD_DECAY_TYPE)  # fmt: skip
    before = rates(provisional, 600)
    assert before == pytest.approx(rates(reference, 600))
    assert fit_wsd_to_budget(provisional, step=600, spent=0.5) == 1200
    after, expected = rates(provisional, 700), rates(reference, 700)
    assert after == pytest.approx(expected)
    assert after[359] == pytest.approx(1e-3) and after[361] < 1e-3 and after[600] == 0.0  # decays from 960 to 1200


def test_postnorm_is_marians_normalization():
    assert OUR_RECIPES["small-data"] == []
    options = dict(zip(OUR_RECIPES["postnorm"][::2], OUR_RECIPES["postnorm"][1::2], strict=True))
    assert options == {"--norm_position": "post", "--norm_type": "layernorm", "--fixnorm": "false"}


def test_the_postnorm_recipe_is_accepted_by_train_py(tmp_path):
    from vaswani.training.options import parse_args as train_args

    args = train_args(["--config", str(REPO_ROOT / "configs" / "small-data.yaml"), *OUR_RECIPES["postnorm"],
                       "--train_file", "x.jsonl", "--output_dir", str(tmp_path / "out"), "--max_train_minutes", "1"])  # fmt: skip
    assert (args.norm_position, args.norm_type, args.fixnorm) == ("post", "layernorm", False)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--seeds", "0,x"], "use comma-separated integers"),
        (["--our_recipes", "small-data,big"], "recipes from small-data, postnorm, each once (unknown: big)"),
        (["--parallel", "0"], "--parallel 0 is not allowed"),
        (["--minutes", "0"], "--minutes must be positive"),
        (["--seeds", "0,1", "--tune_seeds", "1"], "--tune_seeds 1 is not allowed: it needs --tune_peer"),
        (["--seeds", "0,1", "--tune_peer", "--tune_seeds", "3"], "a number from 1 to the number of --seeds (2)"),
        (["--tune_peer", "--tune_seeds", "0"], "--tune_seeds 0 is not allowed"),
        (["--tune_peer", "--peer_learning_rates", "1e-3,x"], "use comma-separated floats, e.g. 1e-3,2e-3"),
        (["--tune_peer", "--peer_learning_rates", "1e-3,0"], "give positive values, each once"),
        (["--tune_peer", "--peer_batch_sizes", "32,32"], "give positive values, each once"),
        (["--tune_peer", "--peer_batch_sizes", "3.5"], "use comma-separated ints, e.g. 32,64"),
        (["--peer_batch_sizes", "16"], "--peer_batch_sizes is not allowed without --tune_peer"),
        (["--peer_learning_rates", "2e-3"], "--peer_learning_rates is not allowed without --tune_peer"),
        (["--peer_lr_schedulers", "inverse_sqrt"], "--peer_lr_schedulers is not allowed without --tune_peer"),
        (["--tune_peer", "--peer_lr_schedulers", "cosine"], "(unknown: cosine)"),
    ],
)
def test_bad_options_are_refused(argv, message, data_dir, capsys):
    with pytest.raises(SystemExit) as exit_info:
        parse_args(["--data_dir", str(data_dir), *argv])
    assert exit_info.value.code == 2 and message in capsys.readouterr().err


def test_defaults_are_one_seed_one_peer_setting_and_the_recipe(data_dir):
    args = parse_args(["--data_dir", str(data_dir)])
    assert (args.seeds, args.tune_peer, args.our_recipes) == ([0], False, ["small-data"])
    assert args.peers == [PEER_DEFAULT]
    args = parse_args(["--data_dir", str(data_dir), "--seeds", "0,1", "--tune_peer", "--our_recipes", "postnorm"])
    assert (args.seeds, args.tune_peer, args.our_recipes) == ([0, 1], True, ["postnorm"])
    assert args.peers == PEER_GRID


def test_the_peer_grid_can_be_set_and_keeps_the_default_for_the_axis_not_given(data_dir):
    argv = ["--data_dir", str(data_dir), "--tune_peer", "--peer_learning_rates", "1e-3,2e-3,4e-3"]
    args = parse_args([*argv, "--peer_batch_sizes", "32", "--peer_lr_schedulers", "warmup_stable_decay"])
    assert args.peers == [{"learning_rate": lr, "batch_size": 32, "lr_scheduler": "warmup_stable_decay"}
                          for lr in (1e-3, 2e-3, 4e-3)]  # fmt: skip
    args = parse_args(argv)
    assert [point["batch_size"] for point in args.peers] == [32, 32, 64, 64] * 3
    assert [point["lr_scheduler"] for point in args.peers] == ["inverse_sqrt", "warmup_stable_decay"] * 6


def run(side, config, seed, validation, test):
    return Run(side, config, seed, [], Path("."), Path("."),
               {"updates": 10, "validation_bleu": validation, "bleu": test, "chrf": 0.0, "bleu_signature": "s"})  # fmt: skip


def test_the_peers_best_is_chosen_on_validation_and_margins_are_per_seed(capsys):
    runs = [
        run("train.py", "small-data", 0, 40.0, 44.0),
        run("train.py", "small-data", 1, 41.0, 42.0),
        run("Trainer", "lr 0.0003, batch 32", 0, 30.0, 39.0),  # best on test, not on validation
        run("Trainer", "lr 0.0003, batch 32", 1, 30.0, 39.0),
        run("Trainer", "lr 0.001, batch 64", 0, 33.0, 36.0),
        run("Trainer", "lr 0.001, batch 64", 1, 35.0, 38.0),
    ]
    report = summarise(runs)
    printed = capsys.readouterr().out
    assert report["peer_best"] == "lr 0.001, batch 64"
    assert report["margins"] == {"small-data": [8.0, 4.0]}
    assert "UNCLEAR target train.py small-data >= the peer's best + 5 BLEU: +6.0 mean, per seed +8.0, +4.0" in printed
    assert "| Trainer | lr 0.001, batch 64 | 2 | 34.00 (33.00-35.00) | 37.00 (36.00-38.00) |" in printed


def test_with_tune_seeds_the_peers_best_on_the_tuning_seeds_meets_the_other_seeds(capsys):
    runs = [
        run("train.py", "small-data", 0, 40.0, 44.0),
        run("Trainer", "lr 0.0003, batch 32", 0, 30.0, 39.0),
        run("Trainer", "lr 0.001, batch 64", 0, 33.0, 36.0),  # best on validation at the tuning seed
        run("train.py", "small-data", 1, 41.0, 46.0),
        run("Trainer", "lr 0.001, batch 64", 1, 20.0, 35.0),  # the best again at seed 1, worse there: still chosen
    ]
    report = summarise(runs)
    printed = capsys.readouterr().out
    assert report["peer_best"] == "lr 0.001, batch 64"
    assert report["margins"] == {"small-data": [8.0, 11.0]}
    assert "the peer's best on validation (seeds [0]): lr 0.001, batch 64" in printed


def test_run_all_queues_the_follow_up_once_the_gate_has_finished(tmp_path, capsys):
    def trainer(config, seed, bleu):
        result = tmp_path / f"{config}-{seed}.json"
        body = {"updates": 1, "validation_bleu": bleu, "bleu": bleu, "chrf": 0.0, "bleu_signature": "s"}
        command = [
            sys.executable,
            "-c",
            f"import pathlib; pathlib.Path({str(result)!r}).write_text({json.dumps(json.dumps(body))})",
        ]
        return Run("Trainer", config, seed, command, result, tmp_path / f"{config}-{seed}.log")

    grid = [trainer("a", 0, 1.0), trainer("b", 0, 2.0)]
    seen_finished = []

    def then():
        seen_finished.append(all(run.result is not None for run in grid))
        return [trainer("b", 1, 3.0)]

    started = run_all(grid, parallel=2, gate=grid, then=then)
    assert seen_finished == [True]
    assert [(run.config, run.seed) for run in started] == [("a", 0), ("b", 0), ("b", 1)]
    assert all(run.result is not None for run in started) and started[2].result["bleu"] == 3.0


@pytest.mark.slow
def test_candidates_on_test_score_the_moving_average_for_ema(tmp_path, capsys, monkeypatch):
    """print_candidates scores each candidate of a train.py run on the test set: the `ema` candidate with the moving
    average saved beside the last checkpoint (`ema.safetensors`), not the last checkpoint's weights."""
    import bench_quality
    from conftest import train_in_process
    from test_loop import TINY_RUN

    import vaswani.weights
    from vaswani.data.demo import write_demo_files

    write_demo_files(tmp_path / "data", num_train=64, num_validation=8, num_test=6)
    out = tmp_path / "run"
    final = train_in_process([*TINY_RUN, "--train_file", str(tmp_path / "data" / "train.jsonl"), "--validation_file",
                              str(tmp_path / "data" / "validation.jsonl"), "--max_train_steps", "4", "--ema_decay",
                              "0.5", "--average_checkpoints", "1", "--output_dir", str(out)])  # fmt: skip
    assert [c["name"] for c in final["final_model"]["candidates"]] == ["last", "ema"]
    loaded, average_into_model = [], vaswani.weights.average_into_model
    monkeypatch.setattr(vaswani.weights, "average_into_model",
                        lambda model, paths: (loaded.append(list(paths)), average_into_model(model, paths)))  # fmt: skip
    args = bench_quality.argparse.Namespace(source_lang="en", target_lang="de")
    bench_quality.print_candidates(out, tmp_path / "data" / "test.jsonl", args, final)
    assert loaded == [
        [out / "checkpoints" / "step-00000004"],
        [out / "checkpoints" / "step-00000004" / "ema.safetensors"],
    ]
    assert "| ema" in capsys.readouterr().out
