"""vaswani/training/speed.py: the training step's speed options (issue 41): their automatic values and refusals, the
bf16 compute weights against autocast's float32 weights, compiled layers against eager ones (LayerDrop and DropHead
compiling nothing new), and train.py with every option on resuming exactly."""

from __future__ import annotations

import copy
import json
import logging

import pytest
import torch
from conftest import random_batch, tiny_model, train_command_in_process
from safetensors.torch import load_file
from test_loop import data_args, data_dir, read_metrics, run_train  # noqa: F401  (data_dir is a fixture)

from vaswani.training.options import parse_args
from vaswani.training.speed import (
    AUTOMATIC,
    ComputeWeights,
    Recompilations,
    compile_layers,
    resolve_step_speed,
)

TINY = ["--vocab_size", "400", "--d_model", "32", "--encoder_layers", "2", "--decoder_layers", "2",
        "--encoder_attention_heads", "2", "--decoder_attention_heads", "2", "--encoder_ffn_dim", "64",
        "--decoder_ffn_dim", "64", "--max_tokens", "600", "--max_source_length", "48", "--max_target_length", "48",
        "--warmup_steps", "4", "--eval_steps", "0", "--logging_steps", "1", "--report_to", "none",
        "--checkpoint_minutes", "60", "--average_checkpoints", "0", "--max_eval_samples", "4",
        "--num_beams", "1"]  # fmt: skip


def speed_of(*argv, device="cpu", precision="bf16", processes=1, task=()):
    args = parse_args(["--output_dir", "out", "--max_train_steps", "5", *task, *argv])
    return resolve_step_speed(args, device, precision, processes, vocab_size=8000)


# ---------------------------------------------------------------------------------------------------------------
# Options
# ---------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_unset_options_take_the_automatic_values_of_the_device(device):
    speed = speed_of(device=device)
    automatic = AUTOMATIC[device]
    assert speed.torch_compile == automatic["torch_compile"] and speed.bf16_weights == automatic["bf16_weights"]
    assert (speed.loss_chunk_tokens is not None) == automatic["fused_loss"]
    assert speed.compiled_loss == automatic["compiled_loss"]
    assert (speed.shape_buckets is not None) == automatic["torch_compile"]  # buckets follow compiling
    assert "automatic" in speed.describe()


def test_given_options_win_and_buckets_follow_compiling():
    speed = speed_of(
        "--torch_compile", "true", "--fused_loss", "yes", "--bf16_weights", "1", "--num_shape_buckets", "7"
    )
    assert (speed.torch_compile, speed.torch_compile_mode, speed.shape_buckets) == (True, "default", 7)
    assert speed.loss_chunk_tokens == 2**22 // 8000 and speed.bf16_weights
    assert speed_of("--torch_compile", "true", "--shape_buckets", "false").shape_buckets is None
    assert speed_of("--shape_buckets", "true").shape_buckets == 32
    assert "--fused_loss true" in speed.describe()
    chunked = speed_of("--fused_loss", "true", "--loss_chunk_tokens", "4096")
    assert chunked.loss_chunk_tokens == 4096 and "4096 target tokens a chunk" in chunked.describe()
    compiled = speed_of("--compiled_loss", "true", device="cuda")
    assert compiled.compiled_loss and not compiled.torch_compile and compiled.shape_buckets is None
    assert "compiled_loss on (--compiled_loss true)" in compiled.describe()
    assert not speed_of("--compiled_loss", "false").compiled_loss


@pytest.mark.parametrize(
    "argv, kwargs, message",
    [
        (["--torch_compile_mode", "max-autotune"], {}, "--torch_compile_mode max-autotune needs --torch_compile true"),
        (["--torch_compile", "true", "--torch_compile_mode", "reduce-overhead"], {}, "records CUDA graphs"),
        (["--bf16_weights", "true"], {"precision": "no"}, "needs --mixed_precision bf16"),
        (["--bf16_weights", "true"], {"processes": 2}, "runs in one process"),
        (["--shape_buckets", "true"], {"task": ("--task", "causal_lm")}, "--task causal_lm has its own shapes"),
        (["--fused_loss", "true"], {"task": ("--task", "masked_lm")}, "computes a translation model's loss"),
        (["--loss_chunk_tokens", "512"], {}, "--loss_chunk_tokens 512 sizes the fused loss.s chunks"),
        (["--loss_chunk_tokens", "512", "--fused_loss", "false"], {}, "it needs --fused_loss true"),
        (["--compiled_loss", "true"], {"task": ("--task", "causal_lm")}, "computes a translation model's loss"),
        (["--compiled_loss", "true", "--fused_loss", "true"], {}, "which --fused_loss true never makes: choose one"),
    ],
)
def test_a_combination_that_cannot_work_is_refused(argv, kwargs, message):
    from vaswani.errors import UsageError

    with pytest.raises(UsageError, match=message):
        speed_of(*argv, **kwargs)


def test_compiling_on_a_cpu_without_a_cxx_compiler_is_refused_before_the_first_step():
    """torch.compile builds a CPU's kernels with a C++ compiler; without one the first compiled call would fail with
    inductor's traceback. Asked for on a CPU, either compiling option is refused at once, naming what was tried; not
    asked for, nothing is refused; a GPU's kernels need no host compiler."""
    from torch._inductor import config

    from vaswani.devices import cpu_compiler_problem
    from vaswani.errors import UsageError

    assert cpu_compiler_problem() is None  # this machine compiles (the compiled tests here need it)
    with config.patch({"cpp.cxx": (None, "/nonexistent/g++")}):  # inductor's own way; restored on leaving
        assert cpu_compiler_problem() == "no working C++ compiler (/nonexistent/g++ tried)"
        for option in ("--torch_compile", "--compiled_loss"):
            with pytest.raises(UsageError, match=rf"^{option} true builds C\+\+ kernels on a CPU .* found no working "
                                                 r"C\+\+ compiler \(/nonexistent/g\+\+ tried\): install one"):  # fmt: skip
                speed_of(option, "true")
        assert not speed_of().torch_compile and not speed_of("--compiled_loss", "false").compiled_loss
        assert speed_of("--compiled_loss", "true", "--torch_compile", "true", device="cuda").compiled_loss
    assert cpu_compiler_problem() is None


def test_the_step_options_are_checked_before_any_data_is_read(tmp_path, monkeypatch):
    """`vaswani train --torch_compile true` on a CPU without a C++ compiler stops with its `error:` before the data
    is read or a tokenizer trained (minutes on a large corpus), and leaves no output folder."""
    from torch._inductor import config

    from vaswani.training import tasks

    read = []
    monkeypatch.setattr(tasks, "load_translation_splits", lambda **kwargs: read.append(kwargs))
    with config.patch({"cpp.cxx": (None, "/nonexistent/g++")}):
        status, stderr = train_command_in_process(["--output_dir", str(tmp_path / "out"), "--max_train_steps", "5",
                                                   "--torch_compile", "true"])  # fmt: skip
    assert status == 2 and "error: --torch_compile true builds C++ kernels on a CPU" in stderr, stderr[-2000:]
    assert read == [] and not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--num_shape_buckets", "0"], "--num_shape_buckets 0 is not allowed; use a positive integer"),
        (["--loss_chunk_tokens", "0"], "--loss_chunk_tokens 0 is not allowed; use a positive integer"),
        (["--torch_compile", "maybe"], "expected true or false, got 'maybe'"),
        (["--compiled_loss", "2"], "--compiled_loss: expected true or false, got '2'"),
        (["--torch_compile_mode", "fast"], "invalid choice: 'fast'"),
    ],
)
def test_bad_values_are_one_line_errors(argv, message):
    status, stderr = train_command_in_process(["--output_dir", "out", "--max_train_steps", "5", *argv])
    assert status == 2 and message in stderr and "Traceback" not in stderr


# ---------------------------------------------------------------------------------------------------------------
# bf16 weights for compute, float32 for the optimizer
# ---------------------------------------------------------------------------------------------------------------
def test_bf16_compute_weights_give_autocasts_gradients_and_leave_the_float32_weights():
    """Two micro-batches: the float32 gradients summed over them are autocast's (which casts the same float32 weights
    to the same bfloat16 values; embeddings and norms stay float32 in both) within float32 rounding; the weights come
    back bit for bit."""
    model = tiny_model(seed=2, dropout=0.0).train()
    batches = [random_batch(vocab_size=model.config.vocab_size, seed=seed) for seed in (0, 1)]
    reference = copy.deepcopy(model)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        for input_ids, attention_mask, labels in batches:
            reference(input_ids=input_ids, attention_mask=attention_mask, labels=labels).loss.backward()
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    weights = ComputeWeights(model, enabled=True)
    weights.hold()
    dtypes = {name: p.dtype for name, p in model.named_parameters()}
    assert dtypes["model.encoder.layers.0.ffn.fc1.weight"] == dtypes["model.encoder.layers.0.ffn.fc1.bias"]
    assert dtypes["model.encoder.layers.0.ffn.fc1.weight"] == torch.bfloat16
    assert dtypes["model.shared.weight"] == dtypes["model.encoder.layers.0.self_attn_residual.norm.weight"]
    assert dtypes["model.shared.weight"] == torch.float32  # the tied embedding and the norms
    with torch.autocast("cpu", dtype=torch.bfloat16):
        for input_ids, attention_mask, labels in batches:
            model(input_ids=input_ids, attention_mask=attention_mask, labels=labels).loss.backward()
            weights.collect()
    weights.release()
    grads = dict(reference.named_parameters())
    for name, param in model.named_parameters():
        assert param.dtype == param.grad.dtype == torch.float32 and torch.equal(param.detach(), before[name]), name
        torch.testing.assert_close(param.grad, grads[name].grad, rtol=1e-5, atol=1e-6, msg=name)
    disabled = ComputeWeights(model, enabled=False)
    disabled.hold()
    assert {p.dtype for p in model.parameters()} == {torch.float32}


def test_bf16_compute_weights_are_the_same_tensors_every_update_with_the_new_values():
    """Over three updates with an optimizer step between them, the passes see bfloat16 tensors at the same addresses
    (what CUDA graphs need), each holding that update's float32 weights rounded to bfloat16."""
    model = tiny_model(seed=3, dropout=0.0).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    weights = ComputeWeights(model, enabled=True)
    fc1 = model.model.encoder.layers[0].ffn.fc1.weight
    index = next(i for i, param in enumerate(weights.params) if param is fc1)
    addresses = []
    for seed in range(3):
        weights.hold()
        addresses.append(fc1.data_ptr())
        assert torch.equal(fc1.detach(), weights.master[index].to(torch.bfloat16))
        input_ids, attention_mask, labels = random_batch(vocab_size=model.config.vocab_size, seed=seed)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            model(input_ids=input_ids, attention_mask=attention_mask, labels=labels).loss.backward()
        weights.release()
        assert fc1.dtype == torch.float32 and fc1.data_ptr() != addresses[-1]
        optimizer.step()
        optimizer.zero_grad()
    assert len(set(addresses)) == 1


def test_bf16_compute_weights_sum_only_the_gradients_a_micro_batch_has_in_buffers_reused_every_update():
    """A weight without a gradient in a micro-batch (its layer skipped by LayerDrop) gets the sum of the others, one
    without any in the whole update gets none; the float32 sums are float32 additions of the bfloat16 gradients, in
    the same tensors update after update."""
    model = tiny_model(seed=4, dropout=0.0).train()
    weights = ComputeWeights(model, enabled=True)
    skipped, absent = weights.params[0], weights.params[1]  # skipped in micro-batch 1, absent in both
    addresses = []
    for update in range(2):
        weights.hold()
        expected: dict[int, torch.Tensor] = {}
        for micro_batch in range(2):
            input_ids, attention_mask, labels = random_batch(
                vocab_size=model.config.vocab_size, seed=2 * update + micro_batch
            )
            with torch.autocast("cpu", dtype=torch.bfloat16):
                model(input_ids=input_ids, attention_mask=attention_mask, labels=labels).loss.backward()
            absent.grad = None
            if micro_batch == 0:
                skipped.grad = None
            for param in weights.params:
                if param.grad is not None:
                    assert param.grad.dtype == torch.bfloat16
                    total = expected.get(id(param))
                    expected[id(param)] = param.grad.float() if total is None else total + param.grad.float()
            weights.collect()
        weights.release()
        assert absent.grad is None and id(absent) not in expected
        for param in weights.params:
            if param is not absent:
                assert torch.equal(param.grad, expected[id(param)])
        addresses.append([param.grad.data_ptr() for param in weights.params if param is not absent])
        model.zero_grad()
    assert addresses[0] == addresses[1]


# ---------------------------------------------------------------------------------------------------------------
# Compiled layers
# ---------------------------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_compiled_layers_equal_eager_ones_and_layerdrop_and_drophead_compile_nothing_new():
    """One encoder and one decoder layer kind, one shape: after the first steps (training and evaluation modes) a
    new LayerDrop draw, a new DropHead rate and DropHead turned off and on again add no graph."""
    torch._dynamo.reset()
    options = dict(seed=3, dropout=0.0, encoder_layers=2, decoder_layers=1, encoder_layerdrop=0.5)
    eager, compiled = tiny_model(**options).train(), tiny_model(**options).train()
    input_ids, attention_mask, labels = random_batch(vocab_size=eager.config.vocab_size)
    batch = dict(input_ids=input_ids, attention_mask=attention_mask, labels=labels)
    assert compile_layers(compiled, "default") == 3
    for model in (eager, compiled):  # the same LayerDrop draws: the generators start alike
        model.eval()
        model(**batch).loss.backward()
    torch.testing.assert_close(compiled(**batch).logits, eager(**batch).logits, rtol=1e-5, atol=1e-5)
    for model in (eager, compiled):  # training: the same LayerDrop draws again (DropHead off: the compiled
        model.train()  # layers draw their own random numbers)
        model.zero_grad()
        model(**batch).loss.backward()
    for (name, a), (_, b) in zip(eager.named_parameters(), compiled.named_parameters(), strict=True):
        if a.grad is not None:
            torch.testing.assert_close(b.grad, a.grad, rtol=1e-4, atol=1e-5, msg=name)
    compiled.set_drophead(0.3)  # DropHead on: its graphs once (every layer kind runs in 3 steps here)
    for _ in range(3):
        compiled(**batch).loss.backward()
    graphs, patterns = Recompilations(), set()
    draw = compiled.model.encoder.layerdrop.sample
    compiled.model.encoder.layerdrop.sample = lambda *a: patterns.add(tuple(skip := draw(*a))) or skip
    for rate in (0.1, 0.0, 0.25, 0.05, 0.2, 0.15):  # every step: a new LayerDrop draw; the rate changes, off and on
        compiled.set_drophead(rate)
        compiled(**batch).loss.backward()
    assert graphs.count() == 0 and len(patterns) >= 3, patterns


def test_evaluations_run_the_compiled_layers_uncompiled():
    """--torch_compile is for the training step: inside `evaluation_mode` (every evaluation of a run: beam search,
    eval-mode and KV-cache graphs) the compiled layers run eagerly, outside it they compile. Counted with a backend
    that records each graph it is given (no inductor: fast); the run-level figures are in benchmarks/README.md."""
    from transformers.modeling_layers import GradientCheckpointingLayer

    from vaswani.training.evaluation import evaluation_mode

    graphs = []

    def backend(graph_module, example_inputs):
        graphs.append(graph_module)
        return graph_module.forward

    torch._dynamo.reset()
    model = tiny_model(seed=0, dropout=0.0).train()
    for layer in (module for module in model.modules() if isinstance(module, GradientCheckpointingLayer)):
        layer.compile(backend=backend)  # as compile_layers does, with the recording backend
    input_ids, attention_mask, labels = random_batch(vocab_size=model.config.vocab_size)
    with evaluation_mode(model):
        assert not model.training
        model(input_ids=input_ids, attention_mask=attention_mask, labels=labels)
        model.generate(input_ids=input_ids, attention_mask=attention_mask, num_beams=2, max_new_tokens=3)
    assert graphs == [] and model.training
    model(input_ids=input_ids, attention_mask=attention_mask, labels=labels).loss.backward()
    assert graphs  # the same layers outside an evaluation: compiled
    torch._dynamo.reset()


# ---------------------------------------------------------------------------------------------------------------
# train.py with every option on
# ---------------------------------------------------------------------------------------------------------------
SPEED_RUN = [*TINY, "--max_train_steps", "6", "--shape_buckets", "true", "--num_shape_buckets", "6", "--fused_loss",
             "true", "--loss_chunk_tokens", "7", "--bf16_weights", "true", "--mixed_precision", "bf16", "--gradient_accumulation_steps", "2",
             "--encoder_layerdrop", "0.2", "--drophead_p_start", "0.2", "--drophead_p_end", "0.1",
             "--ema_decay", "0.9"]  # fmt: skip


@pytest.mark.slow
def test_a_run_with_buckets_fused_loss_and_bf16_weights_resumes_exactly_and_saves_float32(data_dir, tmp_path, caplog):  # noqa: F811
    # in this process (the command's own entry point): three interpreter starts fewer than train.py subprocesses
    common = [*data_args(data_dir), *SPEED_RUN, "--cache_dir", str(tmp_path / "cache")]
    straight, resumed = tmp_path / "straight", tmp_path / "resumed"
    assert train_command_in_process([*common, "--output_dir", str(straight)])[0] == 0
    status, stderr = train_command_in_process([*common, "--output_dir", str(resumed), "--stop_after_steps", "3"])
    assert status == 0, stderr[-3000:]
    caplog.clear()
    caplog.set_level(logging.INFO)  # the run's log: its logging.basicConfig does nothing under pytest's handlers
    status, stderr = train_command_in_process([*common, "--output_dir", str(resumed), "--resume_from_checkpoint",
                                               "latest"])  # fmt: skip
    assert status == 0, stderr[-3000:]
    assert "shape_buckets on (--shape_buckets true), at most 6 shapes" in caplog.text
    assert "Shape buckets: 6 batch shapes" in caplog.text
    assert "fused_loss on (--fused_loss true), 7 target tokens a chunk" in caplog.text  # many chunks a batch
    losses = [[m["loss"] for m in read_metrics(run) if m["split"] == "train"] for run in (straight, resumed)]
    assert len(losses[0]) == 6 and losses[0] == losses[1]
    assert max(m["batch_shapes"] for m in read_metrics(straight) if m["split"] == "train") <= 6
    a, b = load_file(straight / "model.safetensors"), load_file(resumed / "model.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[key], b[key]) for key in a)
    checkpoint = load_file(resumed / "checkpoints" / "step-00000003" / "model.safetensors")
    assert {t.dtype for t in [*a.values(), *checkpoint.values()]} == {torch.float32}


@pytest.mark.slow
def test_a_run_with_the_compiled_loss_trains_as_the_eager_loss_does(data_dir, tmp_path, caplog):  # noqa: F811
    """train.py --compiled_loss true (float32, so that only the loss's arithmetic differs): the log says the loss is
    compiled, and the run's losses, update after update, and its final test loss are the eager run's within float32
    rounding. (Not its weights one by one: Adam turns the rounding noise of a gradient that is zero in exact arithmetic,
    as the key projection's bias has, into a step of the learning rate's size.)"""
    common = [*data_args(data_dir), *TINY, "--max_train_steps", "4", "--mixed_precision", "no", "--dropout", "0",
              "--cache_dir", str(tmp_path / "cache")]  # fmt: skip
    eager, compiled = tmp_path / "eager", tmp_path / "compiled"
    assert train_command_in_process([*common, "--output_dir", str(eager)])[0] == 0
    caplog.set_level(logging.INFO)
    status, stderr = train_command_in_process([*common, "--output_dir", str(compiled), "--compiled_loss", "true"])
    assert status == 0, stderr[-3000:]
    assert "compiled_loss on (--compiled_loss true)" in caplog.text and "Compiling the training loss" in caplog.text
    losses = [[m["loss"] for m in read_metrics(run) if m["split"] == "train"] for run in (eager, compiled)]
    assert len(losses[1]) == 4 and losses[1] == pytest.approx(losses[0], rel=1e-5)
    # the loss, the only thing compiled: its graph for the first batch's size, then one with the size symbolic
    assert [m["compiled_graphs"] for m in read_metrics(compiled) if m["split"] == "train"][-1] == 2
    [eager_test, compiled_test] = [json.loads((run / "results.json").read_text())["test"] for run in (eager, compiled)]
    assert compiled_test["loss"] == pytest.approx(eager_test["loss"], rel=1e-5)
