"""vaswani/devices.py: TF32 decided once for training (issue 30 item 5); the attention kernel and oneDNN's primitive
cache of CPU training (issue 27 item 4). (The mixed-precision default:
tests/training/test_stopping.py; inference dtypes: tests/inference/.) No GPU is needed: the GPU's compute capability is
injected, and the flags PyTorch reads are checked and restored."""

import os
import subprocess
import sys

import pytest
import torch

from vaswani import devices
from vaswani.devices import (
    ONEDNN_CACHE_CAPACITY,
    ONEDNN_CACHE_VARIABLES,
    disable_cudnn_attention,
    limit_onednn_primitive_cache,
    native_bf16,
    resolve_tf32,
    separate_kernel_cache_per_instruction_set,
    training_attention,
)


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


@pytest.fixture
def onednn_environment(monkeypatch):
    """Both spellings of oneDNN's cache variable unset for the test, and restored after it (the function sets one)."""
    for name in ONEDNN_CACHE_VARIABLES:
        monkeypatch.setenv(name, "")
    return monkeypatch


def test_onednn_cache_is_limited_on_the_cpu_unless_the_environment_sets_it(onednn_environment):
    assert limit_onednn_primitive_cache("cuda") is None  # a GPU: nothing to do
    assert os.environ["ONEDNN_PRIMITIVE_CACHE_CAPACITY"] == ""
    said = limit_onednn_primitive_cache("cpu")
    assert os.environ["ONEDNN_PRIMITIVE_CACHE_CAPACITY"] == str(ONEDNN_CACHE_CAPACITY)
    assert said.startswith(f"{ONEDNN_CACHE_CAPACITY} (default 1024")
    for name in ONEDNN_CACHE_VARIABLES:  # the user's value, under either name, is kept and named
        for other in ONEDNN_CACHE_VARIABLES:
            onednn_environment.setenv(other, "")
        onednn_environment.setenv(name, "512")
        assert limit_onednn_primitive_cache("cpu") == f"512 ({name}, set in the environment)"
        assert [os.environ[n] for n in ONEDNN_CACHE_VARIABLES] == [
            "512" if n == name else "" for n in ONEDNN_CACHE_VARIABLES
        ]


SHAPES_PROBE = """
import os, sys
import torch
if sys.argv[1] != "default":  # after torch is imported, as limit_onednn_primitive_cache does in train.py
    os.environ["ONEDNN_PRIMITIVE_CACHE_CAPACITY"] = sys.argv[1]
def anonymous_kb():
    return next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("RssAnon"))
layer = torch.nn.Linear(256, 1024)
before = anonymous_kb()
for rows in range(40, 40 + 3 * 100, 3):  # a new shape each time, as token-budget batches are
    x = torch.randn(rows, 256, requires_grad=True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        layer(x).float().sum().backward()
print(anonymous_kb() - before)
"""


@pytest.mark.skipif(not native_bf16("cpu") or not os.path.exists("/proc/self/status"), reason="oneDNN bf16 on Linux")
def test_a_capacity_set_after_torch_is_imported_bounds_onednn_memory():
    """oneDNN reads its cache capacity when it first caches a primitive, so train.py can set it after importing
    torch (limit_onednn_primitive_cache): the same bf16 products over 100 new shapes add less memory with 8 entries
    than with oneDNN's default (1,024)."""

    def growth_kb(capacity: str) -> int:
        env = {k: v for k, v in os.environ.items() if k not in ONEDNN_CACHE_VARIABLES}
        result = subprocess.run([sys.executable, "-c", SHAPES_PROBE, capacity], env=env, capture_output=True,
                                text=True, timeout=300)  # fmt: skip
        assert result.returncode == 0, result.stderr[-2000:]
        return int(result.stdout.split()[-1])

    default, limited = growth_kb("default"), growth_kb("8")
    assert limited < 0.75 * default, (limited, default)  # measured 0.58 (Sapphire Rapids, torch 2.13)


def set_environment(monkeypatch, **values: str | None) -> None:
    """Each variable set to its value, or unset (None); restored after the test, also where the code under test
    sets it (`ctranslate2_environment`)."""
    for name, value in values.items():
        monkeypatch.setenv(name, "restored after the test")
        if value is None:
            monkeypatch.delenv(name)
        else:
            monkeypatch.setenv(name, value)


@pytest.mark.parametrize(
    ("flags", "onednn_limit", "user", "expected_vnni", "expected_mkl"),
    [
        ({"avx2", "avx512f", "avx512_vnni"}, None, None, True, None),  # a Zen 4 / Ice Lake: oneDNN's own int8
        ({"avx2", "avx_vnni"}, None, None, True, None),  # an Alder Lake
        ({"avx2", "amx_int8"}, None, None, True, None),  # a Sapphire Rapids
        ({"avx2", "fma"}, None, None, False, "1"),  # a Zen 3: MKL's int8 products
        ({"avx2", "avx512f"}, None, None, False, "1"),  # a Skylake-SP
        ({"avx2", "avx512_vnni"}, "AVX2", None, False, "1"),  # a Zen 4 emulating a Zen 3
        ({"avx2", "avx512_vnni"}, "avx512_core", None, False, "1"),
        ({"avx2", "avx512_vnni"}, "AVX512_CORE_BF16", None, True, None),
        ({"avx2", "fma"}, None, "0", False, "0"),  # the user's choice is kept
    ],
)
def test_ctranslate2_int8_goes_to_mkl_where_onednn_has_no_vnni(monkeypatch, flags, onednn_limit, user, expected_vnni,
                                                                expected_mkl):  # fmt: skip
    monkeypatch.setattr(devices, "cpu_flags", lambda: frozenset(flags))
    set_environment(monkeypatch, ONEDNN_MAX_CPU_ISA=onednn_limit, CT2_USE_MKL=user)
    assert devices.int8_products_use_vnni() is expected_vnni
    devices.ctranslate2_environment()
    assert os.environ.get("CT2_USE_MKL") == expected_mkl


@pytest.mark.parametrize(
    ("machine", "flags", "onednn_limit", "saturates"),
    [
        ("x86_64", {"avx2", "fma"}, None, True),  # a Zen 3 on Linux
        ("x86_64", {"avx2", "avx512_vnni"}, None, False),  # a Zen 4
        ("AMD64", set(), None, False),  # Windows: the flags are not known, CTranslate2's own choice stands
        ("x86_64", set(), "AVX2", True),  # not known, but oneDNN is held below VNNI
        ("aarch64", set(), None, False),  # a Graviton (Linux lists its features as "Features", not "flags")
        ("arm64", set(), "AVX2", False),  # an Apple M-series: 32-bit int8 dot products, no x86 limit applies
        ("aarch64", {"fp", "asimd", "asimddp"}, None, False),
    ],
)
def test_only_an_x86_cpu_known_to_lack_vnni_moves_ctranslate2_to_mkl(monkeypatch, machine, flags, onednn_limit,
                                                                      saturates):  # fmt: skip
    """Saturating int8 products are x86's (vpmaddubsw): on Arm, or where the flags are not known, CT2_USE_MKL is not
    set (an Arm build of CTranslate2 has no MKL) and no int8 export is said to saturate."""
    monkeypatch.setattr(devices.platform, "machine", lambda: machine)
    monkeypatch.setattr(devices, "cpu_flags", lambda: frozenset(flags))
    monkeypatch.setattr(devices, "cpu_vendor", lambda: "")
    set_environment(monkeypatch, ONEDNN_MAX_CPU_ISA=onednn_limit, CT2_USE_MKL=None, MKL_ENABLE_INSTRUCTIONS=None)
    assert devices.onednn_int8_saturates() is saturates
    assert devices.ctranslate2_int8_saturates() is saturates  # CTranslate2 on oneDNN (no vendor known: not MKL)
    devices.ctranslate2_environment()
    assert os.environ.get("CT2_USE_MKL") == ("1" if saturates else None)


def test_cpu_flags_are_linuxs_list():
    if sys.platform != "linux":
        pytest.skip("reads /proc/cpuinfo")
    flags = devices.cpu_flags()
    assert "fpu" in flags and all(" " not in flag for flag in flags)


def test_each_instruction_set_setting_compiles_into_a_kernel_cache_of_its_own(monkeypatch):
    """torch keeps inductor's CPU kernels in one folder whatever ATEN_CPU_CAPABILITY says, and a kernel compiled
    under one setting crashes under another (the suite under `ATEN_CPU_CAPABILITY=avx2` after a native run did):
    each setting gets a folder of its own; no setting, or a folder the user chose, is left as it is."""
    from torch._inductor.runtime.cache_dir_utils import default_cache_dir

    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", "unset below; restored after the test")
    for name in ("TORCHINDUCTOR_CACHE_DIR", "ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA", "MKL_ENABLE_INSTRUCTIONS"):
        monkeypatch.delenv(name, raising=False)
    assert separate_kernel_cache_per_instruction_set() is None
    assert "TORCHINDUCTOR_CACHE_DIR" not in os.environ  # native: torch's own folder

    folders = set()
    for setting in ("avx2", "default"):
        monkeypatch.setenv("ATEN_CPU_CAPABILITY", setting)
        monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)
        folder = separate_kernel_cache_per_instruction_set()
        assert (
            os.environ["TORCHINDUCTOR_CACHE_DIR"] == folder == f"{default_cache_dir()}-ATEN_CPU_CAPABILITY={setting}"
        )
        folders.add(folder)
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX2")
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)
    folders.add(separate_kernel_cache_per_instruction_set())
    assert len(folders | {default_cache_dir()}) == 4

    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", default_cache_dir())  # what torch writes there once it compiled
    assert (
        separate_kernel_cache_per_instruction_set()
        == f"{default_cache_dir()}-ATEN_CPU_CAPABILITY=default-ONEDNN_MAX_CPU_ISA=AVX2"
    )
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", "/chosen/by/the/user")
    assert separate_kernel_cache_per_instruction_set() is None
    assert os.environ["TORCHINDUCTOR_CACHE_DIR"] == "/chosen/by/the/user"


THREADS_PROBE = """
import sys
from vaswani.devices import cpu_threads
ours = cpu_threads()
assert "torch" not in sys.modules  # found without importing PyTorch
import torch
print(ours, torch.get_num_threads())
"""


@pytest.mark.parametrize(
    ("environment", "cpus"),
    [
        ({}, None),
        ({"OMP_NUM_THREADS": str(os.cpu_count() + 1)}, None),  # more than the cores: as many as the cores
        ({"OMP_NUM_THREADS": "2", "MKL_NUM_THREADS": "1"}, None),  # PyTorch takes MKL_NUM_THREADS
        ({}, 1),  # a process allowed one CPU (taskset -c 0)
    ],
)
def test_the_default_thread_count_is_pytorchs_without_importing_it(environment, cpus):
    """`cpu_threads` (CTranslate2's thread budget) is the count PyTorch starts with, though PyTorch is not imported:
    the reference is PyTorch itself, in the same process right after. (Where the two differ, a thread count from the
    environment above the cores this process may use, ours is that many cores.)"""
    if cpus is not None and not hasattr(os, "sched_setaffinity"):
        pytest.skip("needs os.sched_setaffinity")
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")} | environment
    allowed = sorted(os.sched_getaffinity(0))[:cpus] if cpus is not None else None
    result = subprocess.run(
        [sys.executable, "-c", THREADS_PROBE], env=env, capture_output=True, text=True, timeout=120,
        preexec_fn=(lambda: os.sched_setaffinity(0, allowed)) if allowed else None,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    ours, pytorchs = result.stdout.split()
    assert ours == pytorchs


def test_where_pytorch_is_loaded_its_thread_count_is_the_default():
    previous = torch.get_num_threads()
    try:
        torch.set_num_threads(3)
        assert devices.cpu_threads() == 3
    finally:
        torch.set_num_threads(previous)


@pytest.mark.parametrize(
    ("vendor", "flags", "environment", "mkl", "saturates"),
    [
        ("GenuineIntel", {"avx2", "avx512_vnni"}, {}, True, False),  # a Cascade Lake or later: MKL with VNNI
        ("GenuineIntel", {"avx2", "amx_int8"}, {}, True, False),  # a Sapphire Rapids
        ("GenuineIntel", {"avx2", "avx_vnni"}, {}, True, False),  # an Alder Lake
        ("GenuineIntel", {"avx2", "fma"}, {}, True, True),  # a Haswell to Skylake client
        ("GenuineIntel", {"avx2", "avx512f"}, {}, True, True),  # a Skylake-SP
        ("GenuineIntel", {"avx2", "avx512_vnni"}, {"MKL_ENABLE_INSTRUCTIONS": "AVX2"}, True, True),  # emulating one
        ("GenuineIntel", {"avx2", "avx512_vnni"}, {"MKL_ENABLE_INSTRUCTIONS": "avx512"}, True, True),
        ("GenuineIntel", {"avx2", "avx512_vnni"}, {"MKL_ENABLE_INSTRUCTIONS": "AVX512_E1"}, True, False),
        ("GenuineIntel", {"avx2", "avx512_vnni"}, {"CT2_USE_MKL": "0"}, False, False),  # oneDNN with VNNI
        ("GenuineIntel", {"avx2", "avx512_vnni"}, {"CT2_USE_MKL": "0", "ONEDNN_MAX_CPU_ISA": "AVX2"}, False, True),
        ("AuthenticAMD", {"avx2", "avx512_vnni"}, {}, False, False),  # a Zen 4: oneDNN with VNNI
        ("AuthenticAMD", {"avx2", "fma"}, {}, False, True),  # a Zen 3 on oneDNN (ctranslate2_environment moves it)
        ("AuthenticAMD", {"avx2", "fma"}, {"CT2_USE_MKL": "1"}, True, False),  # ... to MKL, which does not saturate
        (
            "AuthenticAMD",
            {"avx2", "avx512_vnni"},
            {"CT2_USE_MKL": "1", "MKL_ENABLE_INSTRUCTIONS": "AVX2"},
            True,
            False,
        ),
    ],
)
def test_where_ctranslate2s_int8_products_saturate(monkeypatch, vendor, flags, environment, mkl, saturates):
    monkeypatch.setattr(devices, "cpu_vendor", lambda: vendor)
    monkeypatch.setattr(devices, "cpu_flags", lambda: frozenset(flags))
    set_environment(monkeypatch, **{"CT2_USE_MKL": None, "MKL_ENABLE_INSTRUCTIONS": None, "ONEDNN_MAX_CPU_ISA": None,
                                    **environment})  # fmt: skip
    assert devices.ctranslate2_uses_mkl() is mkl
    assert devices.ctranslate2_int8_saturates() is saturates
    everything = {"float32", "int8", "int8_float32", "int16"}
    assert devices.ctranslate2_int8_compute_type(everything) == ("int16" if saturates else "default")
    assert devices.ctranslate2_int8_compute_type(everything - {"int16"}) == "default"  # oneDNN has no int16


def test_cpu_vendor_is_linuxs():
    if sys.platform != "linux" or not devices.cpu_flags() & {"sse2"}:
        pytest.skip("reads /proc/cpuinfo on an x86 CPU")
    assert devices.cpu_vendor() in {"GenuineIntel", "AuthenticAMD", "HygonGenuine", "CentaurHauls"}
