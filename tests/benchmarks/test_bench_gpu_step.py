"""benchmarks/bench_gpu_step.py without a GPU: a CPU smoke run times both rows per shape and profiles."""

import sys

import pytest
from conftest import REPO_ROOT

sys.path.insert(0, str(REPO_ROOT / "benchmarks"))
from bench_gpu import TINY, model_config, training_flops  # noqa: E402
from bench_gpu_step import VOCAB, main, parse_args  # noqa: E402

from modeling_vaswani.modeling_vaswani import label_smoothed_cross_entropy_sum  # noqa: E402


def test_a_cpu_smoke_run_times_every_shape_with_and_without_the_optimizer(capsys):
    rows = main(["--device", "cpu", "--presets", "tiny", "--shapes", "4x6x7", "2x9x5", "--steps", "1",
                 "--peak_tflops", "1", "--profile"])  # fmt: skip
    assert [(r["shape"], r["step"]) for r in rows] == [
        ("4x6x7", "forward+backward"), ("4x6x7", "+ fused Adam"), ("2x9x5", "forward+backward"), ("2x9x5", "+ fused Adam")
    ]  # fmt: skip
    config = model_config("tiny", VOCAB)  # the default --vocab_size
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


def test_the_step_options_apply_as_train_py_applies_them(capsys, monkeypatch):
    """--fused_loss, --bf16_weights and --torch_compile resolved by train.py's rule and applied to the profiled step:
    the chunked loss appears among its operators, and the model's layers are handed to train.py's compile_layers (a
    recorder here: compiling itself is tested in tests/training/test_speed.py)."""
    import bench_gpu_step

    import vaswani.training.speed

    compiled = []
    monkeypatch.setattr(
        vaswani.training.speed, "compile_layers", lambda model, mode: compiled.append((type(model), mode))
    )
    rows = main(["--device", "cpu", "--presets", "tiny", "--shapes", "4x6x7", "--steps", "1", "--peak_tflops", "1",
                 "--profile", "--fused_loss", "true", "--bf16_weights", "true", "--torch_compile", "true"])  # fmt: skip
    out = capsys.readouterr().out
    assert len(rows) == 2 and compiled == [(bench_gpu_step.VaswaniForConditionalGeneration, "default")]
    assert "fused_loss on (--fused_loss true)" in out and "bf16_weights on (--bf16_weights true)" in out
    assert "torch_compile on (--torch_compile true)" in out and "ChunkedOutputLoss" in out


def test_the_compiled_loss_applies_as_train_py_applies_it(capsys, monkeypatch):
    """--compiled_loss true: the model gets train.py's compiled loss (a recorder here: compiling is tested in
    tests/training/test_speed.py) and the step computes its loss with it; train.py's refusal beside the fused loss."""
    import vaswani.training.speed

    calls = []

    def compile_loss(model):
        model.compiled_loss = lambda *args: calls.append(args[0].shape) or label_smoothed_cross_entropy_sum(*args)

    monkeypatch.setattr(vaswani.training.speed, "compile_loss", compile_loss)
    main(["--device", "cpu", "--presets", "tiny", "--shapes", "3x5x6", "--steps", "1", "--peak_tflops", "1",
          "--vocab_size", "40", "--compiled_loss", "true"])  # fmt: skip
    assert "compiled_loss on (--compiled_loss true)" in capsys.readouterr().out
    assert calls and set(calls) == {(3 * 6, 40)}  # every step's loss, over the (B*T, V) logits
    with pytest.raises(SystemExit) as stop:
        parse_args(["--compiled_loss", "true", "--fused_loss", "true"])
    assert stop.value.code == 2 and "--fused_loss true never makes: choose one" in capsys.readouterr().err


def test_the_step_options_default_to_off_and_take_train_py_spelling(capsys):
    args = parse_args([])
    assert (args.fused_loss, args.bf16_weights, args.torch_compile) == (False, False, False)
    assert parse_args(["--bf16_weights", "true"]).bf16_weights is True
    with pytest.raises(SystemExit) as stop:
        parse_args(["--fused_loss", "maybe"])
    assert stop.value.code == 2 and "maybe" in capsys.readouterr().err


def test_the_vocabulary_and_the_loss_chunk_reach_the_step(capsys):
    rows = main(["--device", "cpu", "--presets", "tiny", "--shapes", "3x5x6", "--steps", "1", "--peak_tflops", "1",
                 "--vocab_size", "40", "--fused_loss", "true", "--loss_chunk_tokens", "4"])  # fmt: skip
    config = model_config("tiny", 40)
    assert rows[0]["mfu"] == pytest.approx(3 * training_flops(config, 5, 6) / (rows[0]["ms"] / 1000) / 1e12)
    assert "fused_loss on (--fused_loss true), 4 target tokens a chunk" in capsys.readouterr().out


@pytest.mark.parametrize(("argv", "said"), [
    (["--loss_chunk_tokens", "0", "--fused_loss", "true"], "--loss_chunk_tokens 0 is not allowed"),
    (["--loss_chunk_tokens", "64"], "--loss_chunk_tokens 64 sizes the fused loss's chunks: it needs --fused_loss true"),
    (["--vocab_size", "4"], "--vocab_size 4 is not allowed: use 5 or more"),
])  # fmt: skip
def test_bad_vocabulary_and_chunk_are_refused(argv, said, capsys):
    with pytest.raises(SystemExit) as stop:
        parse_args(argv)
    assert stop.value.code == 2 and said in capsys.readouterr().err
