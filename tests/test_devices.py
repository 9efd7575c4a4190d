"""vaswani/devices.py: TF32 decided once for training (issue 30 item 5). (The mixed-precision default:
tests/training/test_stopping.py; inference dtypes: tests/inference/.) No GPU is needed: the GPU's compute capability is
injected, and the flags PyTorch reads are checked and restored."""

import pytest
import torch

from vaswani.devices import disable_cudnn_attention, resolve_tf32, training_attention


@pytest.fixture
def tf32_flags():
    """PyTorch's TF32 flags, restored after the test."""
    saved = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    yield lambda: (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved


@pytest.mark.parametrize(
    ("capability", "requested", "flags", "said"),
    [
        ((8, 0), None, (True, True), "on (default; compute capability 8.0)"),  # Ampere: on by default
        ((9, 0), None, (True, True), "on (default; compute capability 9.0)"),
        ((9, 0), False, (False, False), "off (--tf32; compute capability 9.0)"),
        ((7, 5), None, (False, False), "off (default; compute capability 7.5)"),  # Turing has no TF32
        ((7, 5), False, (False, False), "off (--tf32; compute capability 7.5)"),
    ],
)
def test_tf32_is_on_by_default_from_ampere_on(monkeypatch, tf32_flags, capability, requested, flags, said):
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *args: capability)
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = not flags[0]
    assert resolve_tf32(requested, "cuda") == said
    assert tf32_flags() == flags


def test_tf32_asked_for_on_an_older_gpu_is_refused_and_the_cpu_is_left_alone(monkeypatch, tf32_flags):
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *args: (7, 0))
    with pytest.raises(ValueError, match=r"--tf32 true needs a GPU of compute capability 8.0 \(Ampere\) or later; "
                                         r"this one is 7.0"):  # fmt: skip
        resolve_tf32(True, "cuda")
    before = tf32_flags()
    assert resolve_tf32(True, "cpu") is None and resolve_tf32(None, "cpu") is None
    assert tf32_flags() == before


@pytest.fixture
def cudnn_sdp_flag():
    """PyTorch's switch for cuDNN attention, restored after the test."""
    saved = torch.backends.cuda.cudnn_sdp_enabled()
    yield torch.backends.cuda.cudnn_sdp_enabled
    torch.backends.cuda.enable_cudnn_sdp(saved)


def test_cudnn_attention_is_switched_off_for_a_gpu_and_the_cpu_is_left_alone(cudnn_sdp_flag):
    """cuDNN attention plans every new shape (725 against 34 ms per step on an H100 with a shape per batch)."""
    torch.backends.cuda.enable_cudnn_sdp(True)
    assert disable_cudnn_attention("cpu") is None and cudnn_sdp_flag()
    assert disable_cudnn_attention("cuda").startswith("cuDNN attention off")
    assert not cudnn_sdp_flag()


def test_translating_switches_cudnn_attention_off_for_its_device(monkeypatch):
    """The PyTorch engine asks for it with its device's type (a no-op on the CPU; training: tests/training/test_loop.py)."""
    from conftest import tiny_model

    import vaswani.inference.engines as engines

    asked = []
    monkeypatch.setattr(engines, "disable_cudnn_attention", asked.append)
    engines.TorchEngine(tiny_model(), None, "cpu")
    assert asked == ["cpu"]


@pytest.mark.parametrize(
    ("requested", "device", "precision", "kernel"),
    [(None, "cpu", "bf16", "eager"), (None, "cpu", "no", None), (None, "cuda", "bf16", None),
     ("sdpa", "cpu", "bf16", "sdpa"), ("eager", "cuda", "no", "eager")],
)  # fmt: skip
def test_bf16_training_on_a_cpu_gets_eager_attention_unless_a_kernel_is_asked_for(
    requested, device, precision, kernel
):
    chosen, why = training_attention(requested, device, precision)
    assert chosen == kernel
    if requested:
        assert why == "--attn_implementation"
    elif kernel is None:
        assert why == "the model's default"
    else:
        assert "bf16 training on a CPU" in why
