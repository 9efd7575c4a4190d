"""benchmarks/bench_gpu.py without a GPU: its FLOP count against torch's FLOP counter, and a CPU smoke run."""

import subprocess
import sys

import pytest
import torch
from conftest import REPO_ROOT, random_batch, tiny_model

sys.path.insert(0, str(REPO_ROOT / "benchmarks"))
from bench_gpu import training_flops  # noqa: E402


@pytest.mark.parametrize(("batch", "source_length", "target_length"), [(3, 7, 5), (2, 4, 9)])
def test_training_flops_match_torch_flop_counter_on_a_tiny_model(batch, source_length, target_length):
    """Forward + backward of a tiny model (eager attention, so every product is a counted matmul), no padding: the
    hand formula per sentence pair times the batch equals what torch.utils.flop_counter counts."""
    from torch.utils.flop_counter import FlopCounterMode

    model = tiny_model(dropout=0.0, attn_implementation="eager", encoder_ffn_dim=24, decoder_ffn_dim=40)
    model.train()
    input_ids, _, labels = random_batch(batch, source_length, target_length, vocab_size=model.config.vocab_size)
    with FlopCounterMode(display=False) as counter:
        model(input_ids=input_ids, attention_mask=torch.ones_like(input_ids), labels=labels).loss.backward()
    assert counter.get_total_flops() == batch * training_flops(model.config, source_length, target_length)


def test_run_to_run_noise_is_each_run_against_the_median():
    from bench_gpu import run_to_run_noise

    assert run_to_run_noise("big", [90.0, 100.0, 110.0]) == (
        "big: run-to-run noise (A/A, each run / the median of 3): 0.900-1.100, a single run can be 10% off"
    )
    assert "not measured" in run_to_run_noise("big", [100.0])


def test_repeats_below_one_are_refused(capsys):
    from bench_gpu import parse_args

    assert parse_args([]).repeats == 5
    with pytest.raises(SystemExit) as exit_info:
        parse_args(["--repeats", "0"])
    assert exit_info.value.code == 2 and "--repeats 0 is not allowed: use 1 or more" in capsys.readouterr().err


def test_variants_are_label_and_train_py_arguments_and_bad_ones_are_refused(capsys):
    from bench_gpu import parse_args

    assert parse_args([]).variants == {"default": []}
    args = parse_args(["--variant", "after=", "--variant", "before=--prefetch_updates 0 --attn_implementation eager"])
    assert args.variants == {"after": [], "before": ["--prefetch_updates", "0", "--attn_implementation", "eager"]}
    for bad, said in [("noequals", "is not LABEL=ARGS"), ("=--tf32 false", "is not LABEL=ARGS")]:
        with pytest.raises(SystemExit) as exit_info:
            parse_args(["--variant", bad])
        assert exit_info.value.code == 2 and said in capsys.readouterr().err
    with pytest.raises(SystemExit):
        parse_args(["--variant", "a=", "--variant", "a=--tf32 false"])
    assert "--variant 'a' is given twice" in capsys.readouterr().err


def test_each_variant_is_compared_with_the_first_for_the_same_preset():
    from bench_gpu import variant_ratios

    def row(variant, preset, median, low, high):
        return {"variant": variant, "preset": preset, "target_tokens_per_second": median,
                "runs": {"low": low, "high": high}}  # fmt: skip

    rows = [row("after", "base", 100.0, 90.0, 110.0), row("after", "big", 50.0, 50.0, 50.0),
            row("before", "base", 200.0, 180.0, 220.0), row("before", "big", 25.0, 20.0, 30.0)]  # fmt: skip
    assert variant_ratios(rows) == [
        "base: before / after = 2.000x tokens/s (run ranges allow 1.636-2.444)",
        "big: before / after = 0.500x tokens/s (run ranges allow 0.400-0.600)",
    ]
    assert variant_ratios(rows[:2]) == []  # one variant: nothing to compare


def test_without_keep_going_the_first_failed_run_stops_the_benchmark(monkeypatch, capsys):
    import bench_gpu

    calls = []

    def failing(args, preset, paths, folder, vocab_size, round_index=0, variant="default", source=None, label=None):
        calls.append(variant)
        raise bench_gpu.RunFailed(f"train.py ({variant}, {preset}) failed (exit status 2):\nerror: ...")

    monkeypatch.setattr(bench_gpu, "run_preset", failing)
    argv = ["--device", "cpu", "--presets", "tiny", "--pairs", "50", "--vocab_size", "300", "--peak_tflops", "1",
            "--repeats", "1", "--steps", "2", "--warmup_steps", "1", "--variant", "a=", "--variant", "b="]  # fmt: skip
    with pytest.raises(bench_gpu.RunFailed, match=r"train.py \(a, tiny\) failed"):
        bench_gpu.main(argv)
    assert calls == ["a"]  # b never ran


@pytest.mark.slow
def test_bench_gpu_runs_on_cpu_with_a_tiny_config_and_keeps_going_past_a_failed_run(tmp_path):
    """A CPU run of two rounds: the variant that trains is timed by each run's own windows, with its median, range
    and run-to-run noise; with --keep_going the variant train.py refuses (a variant's arguments reach train.py) is
    reported and left out of the later rounds too (it would fail again), every run's log is kept under --logs, and the
    exit status says that something failed."""
    logs = tmp_path / "logs"
    result = subprocess.run(
        [sys.executable, str(REPO_ROOT / "benchmarks" / "bench_gpu.py"), "--device", "cpu", "--presets", "tiny",
         "--mixed_precision", "no", "--max_tokens", "600", "--steps", "4", "--warmup_steps", "1", "--pairs", "200",
         "--vocab_size", "400", "--peak_tflops", "1", "--repeats", "2", "--keep_going", "--logs", str(logs),
         "--variant", "plain=", "--variant", "odd=--attn_implementation nonsense",
         "--json", str(tmp_path / "out.json")],
        capture_output=True, text=True, timeout=400, env={**__import__("os").environ, "OMP_NUM_THREADS": "1"},
    )  # fmt: skip
    assert result.returncode == 1, result.stderr[-3000:]
    import json

    report = json.loads((tmp_path / "out.json").read_text())
    [row] = report["rows"]
    assert (row["variant"], row["preset"]) == ("plain", "tiny") and row["target_tokens_per_second"] > 0
    assert row["mfu"] == pytest.approx(row["model_tflops"] / 1.0)  # peak 1 TFLOP/s
    assert len(row["runs"]["values"]) == 2 and len(row["windows"]) == 2  # two runs, each timed by its own windows
    assert row["runs"]["low"] <= row["target_tokens_per_second"] <= row["runs"]["high"]
    assert row["step_options"].startswith("torch_compile off")  # train.py's own line
    assert row["compiled_graphs"] == [None, None]  # not compiled
    assert report["failures"] == ["train.py (odd, tiny) failed (exit status 2):"]  # run once: not again in round 1
    assert "plain tiny: run-to-run noise (A/A, each run / the median of 2)" in result.stdout and "MFU" in result.stdout
    assert "cores available" in result.stdout.splitlines()[0]  # the CPU and its flags
    assert "FAILED, left out of this and the later rounds (--keep_going)" in result.stdout
    assert "invalid choice: 'nonsense'" in result.stdout
    assert sorted(path.name for path in logs.iterdir()) == [
        "run-odd-tiny-0.log", "run-plain-tiny-0.log", "run-plain-tiny-1.log"
    ]  # fmt: skip
    assert "invalid choice: 'nonsense'" in (logs / "run-odd-tiny-0.log").read_text()
    assert "Training step: " in (logs / "run-plain-tiny-1.log").read_text()


def test_a_run_past_its_timeout_is_a_failure_with_its_output_kept(tmp_path, monkeypatch):
    import bench_gpu

    def slow_run(cmd, **kwargs):
        assert kwargs["timeout"] == 5.0
        raise subprocess.TimeoutExpired(cmd, kwargs["timeout"], output=b"compiling...", stderr=b"Training step: on")

    monkeypatch.setattr(bench_gpu.subprocess, "run", slow_run)
    args = bench_gpu.parse_args(["--device", "cpu", "--run_timeout", "5", "--logs", str(tmp_path / "logs")])
    with pytest.raises(bench_gpu.RunFailed, match=r"train.py \(default, tiny\) failed \(stopped after --run_timeout "
                       r"5 s\)"):  # fmt: skip
        bench_gpu.run_preset(args, "tiny", {"train": "t", "validation": "v"}, tmp_path, 100)
    assert (tmp_path / "logs" / "run-default-tiny-0.log").read_text() == "compiling...Training step: on"


@pytest.mark.parametrize(("argv", "said"), [
    (["--run_timeout", "0"], "--run_timeout 0 is not allowed: give seconds above 0"),
    (["--logs", "FILE"], "is a file or a folder with files in it: give a new or empty folder"),
    (["--logs", "FULL"], "is a file or a folder with files in it: give a new or empty folder"),
])  # fmt: skip
def test_bad_run_timeout_and_logs_are_refused(argv, said, tmp_path, capsys):
    from bench_gpu import parse_args

    (tmp_path / "FILE").write_text("")
    (tmp_path / "FULL").mkdir()
    (tmp_path / "FULL" / "run-a-big-0.log").write_text("a user's earlier log")
    argv = [str(tmp_path / arg) if arg in ("FILE", "FULL") else arg for arg in argv]
    with pytest.raises(SystemExit) as exit_info:
        parse_args(argv)
    assert exit_info.value.code == 2 and said in capsys.readouterr().err
    assert (tmp_path / "FULL" / "run-a-big-0.log").read_text() == "a user's earlier log"


def test_step_options_is_train_py_s_own_line():
    from bench_gpu import step_options

    log = "06:22:42 INFO train: Training step: torch_compile on (--torch_compile true); fused_loss off\nother\n"
    assert step_options(log) == "torch_compile on (--torch_compile true); fused_loss off"
    assert step_options("no such line") is None


def test_a_baseline_is_a_commit_or_a_folder_with_train_py(tmp_path, capsys):
    from bench_gpu import parse_args

    args = parse_args(["--baseline", "HEAD"])
    assert args.baseline_tree is None and args.baseline_label == common_commit("HEAD")
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "train.py").write_text("")
    args = parse_args(["--baseline", str(tmp_path / "old")])
    assert (args.baseline_tree, args.baseline_label) == ((tmp_path / "old").resolve(), "old")
    with pytest.raises(SystemExit) as exit_info:
        parse_args(["--baseline", str(tmp_path / "nothing-here")])
    assert exit_info.value.code == 2 and "neither a commit of" in capsys.readouterr().err


def common_commit(revision: str) -> str:
    import common

    return common.commit_of(revision)


@pytest.mark.slow
def test_every_variant_runs_with_the_baselines_code_too_listed_first(tmp_path):
    """--baseline REV: each variant once more with train.py of REV's files (here: HEAD, archived into the benchmark's
    temporary folder), interleaved; the ratios read "this checkout / the baseline"."""
    result = subprocess.run(
        [sys.executable, str(REPO_ROOT / "benchmarks" / "bench_gpu.py"), "--device", "cpu", "--presets", "tiny",
         "--mixed_precision", "no", "--max_tokens", "600", "--steps", "3", "--warmup_steps", "1", "--pairs", "200",
         "--vocab_size", "400", "--peak_tflops", "1", "--repeats", "1", "--variant", "plain=", "--baseline", "HEAD",
         "--json", str(tmp_path / "out.json")],
        capture_output=True, text=True, timeout=400, env={**__import__("os").environ, "OMP_NUM_THREADS": "1"},
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    import json

    head = common_commit("HEAD")
    baseline, ours = json.loads((tmp_path / "out.json").read_text())["rows"]
    assert (baseline["variant"], ours["variant"]) == (f"plain @ {head}", "plain")
    assert ours["train_py"] == str(REPO_ROOT / "train.py")
    assert baseline["train_py"].endswith("/baseline/train.py") and not baseline["train_py"].startswith(str(REPO_ROOT))
    assert baseline["target_tokens_per_second"] > 0 and ours["target_tokens_per_second"] > 0
    assert f"tiny: plain / plain @ {head} = " in result.stdout
