"""benchmarks/bench_gpu_step.py without a GPU: a CPU smoke run times both rows per shape and profiles."""

import sys

import pytest
from conftest import REPO_ROOT

sys.path.insert(0, str(REPO_ROOT / "benchmarks"))
from bench_gpu import TINY, model_config, training_flops  # noqa: E402
from bench_gpu_step import main, parse_args  # noqa: E402


def test_a_cpu_smoke_run_times_every_shape_with_and_without_the_optimizer(capsys):
    rows = main(["--device", "cpu", "--presets", "tiny", "--shapes", "4x6x7", "2x9x5", "--steps", "1",
                 "--peak_tflops", "1", "--profile"])  # fmt: skip
    assert [(r["shape"], r["step"]) for r in rows] == [
        ("4x6x7", "forward+backward"), ("4x6x7", "+ fused Adam"), ("2x9x5", "forward+backward"), ("2x9x5", "+ fused Adam")
    ]  # fmt: skip
    config = model_config("tiny", 12111)
    for row in rows:  # MFU from the measured time and bench_gpu's FLOP count, against the given 1 TFLOP/s peak
        batch_rows, source, target = (int(x) for x in row["shape"].split("x"))
        flops = batch_rows * training_flops(config, source, target)
        assert row["mfu"] == pytest.approx(flops / (row["ms"] / 1000) / 1e12)
        assert row["target_tokens_per_second"] == pytest.approx(batch_rows * target / (row["ms"] / 1000))
    assert config.d_model == TINY["d_model"]
    assert "Self CPU time total" in capsys.readouterr().out  # the profile's table


@pytest.mark.parametrize("bad", ["800x30", "axbxc", "0x3x3"])
def test_a_malformed_shape_is_refused(bad, capsys):
    with pytest.raises(SystemExit) as stop:
        parse_args(["--shapes", bad])
    assert stop.value.code == 2 and bad in capsys.readouterr().err


def test_steps_below_one_is_refused(capsys):
    with pytest.raises(SystemExit) as stop:
        parse_args(["--steps", "0"])
    assert stop.value.code == 2 and "--steps 0 is not allowed" in capsys.readouterr().err
