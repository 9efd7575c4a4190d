"""Devices and data types: the one place that decides where and in which precision training and inference run.

Training (`resolve_mixed_precision`, decided once before the Accelerator is created): bf16 autocast (weights,
gradients, optimizer state and checkpoints stay float32; matrix products run in bfloat16; the label-smoothed loss is
computed from float32 logits) pays only where the hardware multiplies bfloat16 natively: CUDA GPUs from Ampere on,
and CPUs with AVX512-BF16 or AMX (oneDNN's bf16 path). On other CPUs torch emulates bfloat16 and a training step gets
much slower, so there the default stays float32 and an explicit `bf16` gets a warning. fp16 needs a loss scaler and a
GPU; on CPU Accelerate would silently train in float32, so it is refused.

Inference (`resolve_device`, `check_dtype`, `torch_dtype_supported`): "auto" picks a visible GPU, else the CPU;
`--mixed_precision bf16/fp16` (dtype bfloat16/float16) runs only where the device computes it natively (the same `native_bf16` check), else it is
refused with the fix.

torch is imported by the functions that need it, so that the command line's parser and its errors start fast.
"""

from __future__ import annotations

import functools
import os
import platform
import sys

from vaswani.errors import TranslateError

MIXED_PRECISION_CHOICES = ("no", "fp16", "bf16")
ATTN_IMPLEMENTATIONS = ("eager", "sdpa", "flash_attention_2")  # transformers' names (`attn_implementation`)
TF32_CAPABILITY = (8, 0)  # Ampere: the first GPUs with TF32 tensor cores


VNNI_FLAGS = frozenset(
    {"avx512_vnni", "avx_vnni", "amx_int8"}
)  # Linux's flags of the CPUs whose int8 products have VNNI

# The settings of ONEDNN_MAX_CPU_ISA (docs/layout.md, "Other CPUs") below the features named.
ONEDNN_ISAS_WITHOUT_VNNI = frozenset({"SSE41", "AVX", "AVX2", "AVX512_CORE"})
ONEDNN_ISAS_WITHOUT_BF16 = ONEDNN_ISAS_WITHOUT_VNNI | {"AVX2_VNNI", "AVX512_CORE_VNNI"}
ONEDNN_ISAS_WITHOUT_AMX = ONEDNN_ISAS_WITHOUT_BF16 | {"AVX2_VNNI_2", "AVX512_CORE_BF16", "AVX512_CORE_FP16",
                                                     "AVX10_1_512"}  # fmt: skip
X86_MACHINES = frozenset({"x86_64", "amd64", "i386", "i686"})  # `platform.machine()`, lowercased


@functools.cache
def cpu_flags() -> frozenset[str]:
    """The CPU's feature flags as Linux lists them (the first `flags` line of /proc/cpuinfo, read once); empty
    elsewhere."""
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            return frozenset(next(line.split(":", 1)[1].split() for line in cpuinfo if line.startswith("flags")))
    except (OSError, StopIteration):
        return frozenset()


@functools.cache
def cpu_vendor() -> str:
    """The CPU's vendor as Linux names it ("GenuineIntel", "AuthenticAMD"; the first `vendor_id` line of
    /proc/cpuinfo, read once); "" elsewhere."""
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            return next(line.split(":", 1)[1].strip() for line in cpuinfo if line.startswith("vendor_id"))
    except (OSError, StopIteration):
        return ""


def onednn_allows(isas_without: frozenset[str]) -> bool:
    """Whether `ONEDNN_MAX_CPU_ISA` (unset: no limit) leaves oneDNN a feature that the ISAs `isas_without` lack."""
    return os.environ.get("ONEDNN_MAX_CPU_ISA", "ALL").upper() not in isas_without


def int8_products_use_vnni() -> bool:
    """Whether oneDNN's int8 matrix products have VNNI (AVX512-VNNI, AVX-VNNI or AMX) on this CPU. Without it (an AMD
    Zen 2/3, an Intel Skylake, or `ONEDNN_MAX_CPU_ISA=AVX2` / `AVX512_CORE`) oneDNN multiplies u8 x s8 through
    16-bit intermediates that saturate (oneDNN's guide, "Int8 Computation Aspects"); see `ctranslate2_environment`."""
    return bool(cpu_flags() & VNNI_FLAGS) and onednn_allows(ONEDNN_ISAS_WITHOUT_VNNI)


def onednn_int8_saturates() -> bool:
    """Whether oneDNN's int8 matrix products saturate here: on an x86 CPU known to lack VNNI (Linux's flags,
    `int8_products_use_vnni`) or with `ONEDNN_MAX_CPU_ISA` below VNNI. Not on Arm, whose int8 dot products add into
    32 bits, nor where the CPU's flags are not known (outside Linux), where CTranslate2's own choice stands."""
    known = bool(cpu_flags()) or not onednn_allows(ONEDNN_ISAS_WITHOUT_VNNI)
    return platform.machine().lower() in X86_MACHINES and known and not int8_products_use_vnni()


def ctranslate2_environment() -> None:
    """Before CTranslate2 is imported (it reads its settings once, when loaded): where its int8 products would go
    through oneDNN and saturate (`onednn_int8_saturates`), CTranslate2's int8 models use Intel MKL's instead
    (`CT2_USE_MKL=1`; CTranslate2 picks MKL on Intel CPUs and oneDNN on AMD ones). oneDNN's saturating products put a
    tiny model's int8 encoder outputs 0.70 from float32 against 0.02 with VNNI or MKL, and a token's log-probability
    1.25 nats off (tests/export/test_ctranslate2_lm.py). A `CT2_USE_MKL` the user set is kept (the translator then
    warns, `vaswani.inference.engines.CTranslate2Engine`)."""
    if "CT2_USE_MKL" not in os.environ and onednn_int8_saturates():
        os.environ["CT2_USE_MKL"] = "1"


# The settings of MKL_ENABLE_INSTRUCTIONS (Intel MKL's instruction limit) below VNNI (AVX2_E1: AVX-VNNI; AVX512_E1:
# AVX512-VNNI)
MKL_INSTRUCTIONS_WITHOUT_VNNI = frozenset({"SSE4_2", "AVX", "AVX2", "AVX512"})


def ctranslate2_uses_mkl() -> bool:
    """Whether CTranslate2 multiplies on Intel MKL rather than oneDNN in this process: `CT2_USE_MKL` where set (see
    `ctranslate2_environment`), else CTranslate2's own choice, MKL on Intel CPUs only."""
    value = os.environ.get("CT2_USE_MKL")
    if value is None:
        return cpu_vendor() == "GenuineIntel"
    return value.strip().lower() in ("1", "true", "yes", "on")


def ctranslate2_int8_saturates() -> bool:
    """Whether CTranslate2's int8 matrix products saturate on this CPU: without VNNI, the u8 x s8 products are
    added in pairs into 16 bits (vpmaddubsw), which overflow. So do oneDNN's (`onednn_int8_saturates`) and, on an
    Intel CPU, MKL's (an Intel Haswell to Skylake, or `MKL_ENABLE_INSTRUCTIONS=AVX2` / `AVX512`): there an int8
    export's outputs change (342 of 500 translations of a small model differ from float32's, against 72 with VNNI;
    benchmarks/README.md). MKL on an AMD CPU (`ctranslate2_environment`'s choice there) does not saturate."""
    if not ctranslate2_uses_mkl():
        return onednn_int8_saturates()
    mkl_limit = os.environ.get("MKL_ENABLE_INSTRUCTIONS", "").strip().upper()
    has_vnni = bool(cpu_flags() & VNNI_FLAGS) and mkl_limit not in MKL_INSTRUCTIONS_WITHOUT_VNNI
    return cpu_vendor() == "GenuineIntel" and not has_vnni


def ctranslate2_int8_compute_type(supported: set[str] | None = None) -> str:
    """The `compute_type` for running an int8 CTranslate2 export on this CPU: "int16" where int8 products saturate
    (`ctranslate2_int8_saturates`) and CTranslate2 has int16 (MKL), as precise as int8 with VNNI and faster than
    int8 there (6.4 s against 7.2 s, float32 8.4 s, for 500 sentences of a small model on an emulated AVX2 Intel
    CPU); "default" (the stored int8) elsewhere. `supported`: `ctranslate2.get_supported_compute_types("cpu")`
    (read here when not given). Also for `ctranslate2.Encoder` / `ctranslate2.Generator` on an exported language
    model (docs/language-models.md)."""
    if not ctranslate2_int8_saturates():
        return "default"
    if supported is None:
        ctranslate2_environment()  # before CTranslate2 first loads
        import ctranslate2  # start-up: loads only when asked

        supported = set(ctranslate2.get_supported_compute_types("cpu"))
    return "int16" if "int16" in supported else "default"


# The settings that change which CPU instructions compiled kernels use (docs/layout.md, "Other CPUs").
INSTRUCTION_SET_SETTINGS = ("ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA", "MKL_ENABLE_INSTRUCTIONS")


def separate_kernel_cache_per_instruction_set() -> str | None:
    """Point inductor's kernel cache at a folder of its own for each instruction-set setting, unless the user chose
    one (`TORCHINDUCTOR_CACHE_DIR` other than torch's default, which torch itself writes there once it has used the
    cache). torch 2.13 picks the CPU kernels' vector instructions by `ATEN_CPU_CAPABILITY` but does not key its
    on-disk cache (kernels, precompiled headers) by it: a layer compiled under one setting and loaded under another
    fails ("SystemError: <built-in function kernel> returned a result with an exception set", "'at::vec' has not
    been declared") or aborts the process. Returns the folder set, or None where nothing was changed."""
    from torch._inductor.runtime.cache_dir_utils import default_cache_dir

    chosen = {name: os.environ[name] for name in INSTRUCTION_SET_SETTINGS if os.environ.get(name)}
    folder = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    if not chosen or (folder is not None and os.path.abspath(folder) != default_cache_dir()):
        return None

    suffix = "-".join(f"{name}={value}" for name, value in sorted(chosen.items()))
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = folder = f"{default_cache_dir()}-{suffix}"
    return folder


def cpu_compiler_problem() -> str | None:
    """What keeps `torch.compile` from building CPU kernels here, or None: inductor compiles them as C++ with the
    first compiler of `torch._inductor.config.cpp.cxx` that answers `--version` (`CXX`, else g++), and without one
    the first compiled call fails."""
    from torch._inductor import config  # start-up: loads inductor, only where something is to be compiled
    from torch._inductor.cpp_builder import get_cpp_compiler
    from torch._inductor.exc import InvalidCxxCompiler

    try:
        get_cpp_compiler()
    except InvalidCxxCompiler:
        tried = config.cpp.cxx if isinstance(config.cpp.cxx, (list, tuple)) else (config.cpp.cxx,)
        return f"no working C++ compiler ({', '.join(str(c) for c in tried if c) or 'none named'} tried)"
    return None


def native_bf16(device_type: str) -> bool:
    """Whether `device_type` ("cpu", "cuda", ...) multiplies bfloat16 in hardware.

    On a CPU, oneDNN's own check says whether it may compute in bfloat16 at all (`ONEDNN_MAX_CPU_ISA` included). On
    x86 it says yes from AVX512 on, where a CPU without AVX512-BF16 (an Intel Skylake-SP, Cascade Lake or Ice Lake
    Xeon) has oneDNN emulate bfloat16; so there the CPU must also have AVX512-BF16 (every CPU with AMX has it too) and
    oneDNN must be allowed to use it. torch has no public CPU-feature API: `torch.cpu._is_avx512_bf16_supported` is
    cpuinfo's answer, on every operating system."""
    import torch

    if device_type == "cuda":
        return torch.cuda.is_available() and torch.cuda.is_bf16_supported(including_emulation=False)
    if device_type != "cpu":
        return False
    onednn = bool(torch.backends.mkldnn.is_available() and torch.ops.mkldnn._is_mkldnn_bf16_supported())
    if platform.machine().lower() not in X86_MACHINES:  # an Arm CPU: oneDNN answers for its BF16 extension
        return onednn
    return onednn and bool(torch.cpu._is_avx512_bf16_supported()) and onednn_allows(ONEDNN_ISAS_WITHOUT_BF16)


def cpu_bf16_trains_faster() -> bool:
    """Whether bf16 autocast trains faster than float32 on this CPU, one that computes bfloat16 (`native_bf16`):
    with AMX (where oneDNN may use it), and with an AMD CPU's AVX512-BF16 (a Zen 4: train.py's step at d_model 256
    1.24x float32's, bench_train.py). Not on an Intel CPU with AVX512-BF16 alone (a Cooper Lake, or a Sapphire or
    Emerald Rapids whose VM hides AMX): there oneDNN's bfloat16 matrix products ran at 0.56x MKL's float32 ones at
    every size tried and a step of configs/small-data.yaml at 0.64x float32's (benchmarks/README.md, "bf16 on an
    Intel CPU without AMX"). A CPU whose vendor is not known (outside Linux) keeps bf16."""
    import torch

    amx = bool(torch.cpu._is_amx_tile_supported()) and onednn_allows(ONEDNN_ISAS_WITHOUT_AMX)
    return amx or cpu_vendor() != "GenuineIntel"


def training_device_type(use_cpu: bool = False) -> str:
    """The device type Accelerate will train on in this process: CUDA when visible (and not forced off), else CPU."""
    import torch

    forced_cpu = use_cpu or os.environ.get("ACCELERATE_USE_CPU", "").lower() in {"1", "true", "yes"}
    return "cuda" if torch.cuda.is_available() and not forced_cpu else "cpu"


# what the log says of a CPU where `cpu_bf16_trains_faster` says no (the default, and an explicit bf16)
SLOWER_CPU_BF16 = "bfloat16 (AVX512-BF16 without AMX) trains slower than float32"


def resolve_mixed_precision(requested: str | None, device_type: str) -> tuple[str, str]:
    """(mixed precision to use, why) for `--mixed_precision requested` on `device_type`.

    None means: the value `accelerate launch` / `accelerate config` passes (ACCELERATE_MIXED_PRECISION) if any,
    else bf16 where the device runs it natively and, on a CPU, faster than float32 (`cpu_bf16_trains_faster`), else
    "no". Raises ValueError for fp16 on CPU.
    """
    device = device_type.upper()
    if requested is None and os.environ.get("ACCELERATE_MIXED_PRECISION"):
        requested, source = os.environ["ACCELERATE_MIXED_PRECISION"], "from the accelerate configuration"
    elif requested is None:
        if not native_bf16(device_type):
            return "no", f"default: this {device} has no native bfloat16 (it would be slower than float32)"
        if device_type == "cpu" and not cpu_bf16_trains_faster():
            return "no", f"default: this {device}'s {SLOWER_CPU_BF16}"
        return "bf16", f"default: this {device} computes bfloat16 natively"
    else:
        source = "--mixed_precision"
    if requested not in MIXED_PRECISION_CHOICES:
        raise ValueError(f"mixed precision {requested!r} ({source}) is not one of {list(MIXED_PRECISION_CHOICES)}.")
    if requested == "fp16" and device_type == "cpu":
        raise ValueError(
            "--mixed_precision fp16 is not supported on CPU (it would silently train in float32); use "
            "--mixed_precision bf16 (faster than float32 on CPUs with AMX or an AMD CPU's AVX512-BF16) or no."
        )
    if requested == "bf16" and not native_bf16(device_type):
        return "bf16", f"{source}; WARNING: this {device} has no native bfloat16, expect slower training"
    if requested == "bf16" and device_type == "cpu" and not cpu_bf16_trains_faster():
        return "bf16", f"{source}; note: this {device}'s {SLOWER_CPU_BF16}"
    return requested, source


def resolve_tf32(requested: bool | None, device_type: str) -> str | None:
    """Turn TF32 matrix products (and cuDNN convolutions) on or off for `--tf32 requested` on `device_type`, once
    before training; returns what was decided, for the log (None on a device where TF32 does not exist: the CPU).

    None means: on where the GPU has TF32 (compute capability 8.0, Ampere, and later). PyTorch's own default is off
    for matrix products; with autocast (bf16/fp16) only the float32 operations outside it are affected. An explicit
    true on an older GPU raises ValueError."""
    import torch

    if device_type != "cuda":
        return None
    capability = torch.cuda.get_device_capability()
    has_tf32 = tuple(capability) >= TF32_CAPABILITY
    if requested and not has_tf32:
        raise ValueError(f"--tf32 true needs a GPU of compute capability {TF32_CAPABILITY[0]}.{TF32_CAPABILITY[1]} "
                         f"(Ampere) or later; this one is {capability[0]}.{capability[1]}: leave --tf32 unset")  # fmt: skip
    use = has_tf32 if requested is None else requested
    torch.backends.cuda.matmul.allow_tf32 = use
    torch.backends.cudnn.allow_tf32 = use
    return (
        f"{'on' if use else 'off'} ({'default' if requested is None else '--tf32'}; compute capability "
        f"{capability[0]}.{capability[1]})"
    )


def training_attention(requested: str | None, device_type: str, mixed_precision: str) -> tuple[str | None, str]:
    """(attention kernel to train with, why) for `--attn_implementation requested`; None is the model's own default
    (transformers': sdpa). Decided once, before the model is built.

    Unset, bf16 training on a CPU gets the eager kernel: there PyTorch's scaled_dot_product_attention runs its CPU
    flash-attention kernel, whose backward pass is slow in bfloat16 at the short lengths of sentence batches.
    Measured (torch 2.13, Intel Sapphire Rapids, one thread, configs/small-data.yaml's model, benchmarks/README.md
    "Where a training run's time goes"): 41% of a bf16 training step in that backward, 30 ms per call against 2 ms
    for its forward; with eager attention the step takes 1.2-1.9x less time at every batch shape measured (86x13 to
    8x128 tokens), and a 5-minute training run makes more updates. In float32 the two kernels are within about 20% of
    each other either way, so sdpa stays; on a GPU sdpa's fused kernels win."""
    if requested is not None:
        return requested, "--attn_implementation"
    if device_type == "cpu" and mixed_precision == "bf16":
        return "eager", "default for bf16 training on a CPU: sdpa's CPU flash-attention backward is slow in bfloat16"
    return None, "the model's default"


ONEDNN_CACHE_VARIABLES = ("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "DNNL_PRIMITIVE_CACHE_CAPACITY")  # oneDNN reads both
ONEDNN_CACHE_CAPACITY = 256  # primitives kept (oneDNN's default: 1024); see limit_onednn_primitive_cache


def limit_onednn_primitive_cache(device_type: str) -> str | None:
    """Keep oneDNN's primitive cache small on a CPU (once, before the first matrix product of the process); returns
    what was decided, for the log (None on a GPU).

    oneDNN (PyTorch's CPU kernels for bfloat16 matrix products) compiles a primitive for every new matrix shape and
    keeps the last 1,024 by default. Batches made by token count (`--max_tokens`) bring new shapes nearly every
    update, so the cache fills with primitives used a few times, each holding its code and buffers. Measured (torch
    2.13, Intel Sapphire Rapids, configs/small-data.yaml's recipe in bf16, two 3-minute runs at a time in alternating
    pairs, benchmarks/README.md "Where a training run's time goes"): peak anonymous memory 2.8 GB with 1,024
    entries, 1.9-2.1 GB with 256, 1.6 GB with 128, 1.4 GB with 64; updates per minute 1.01x the default's with 256,
    0.97-0.98x 256's with 128, 0.87-0.92x the default's with 64 (a training step reuses more than 64). The capacity is
    read when the cache is first used, so setting the variable here, before any product, takes effect; a value the
    user set in the environment is kept."""
    if device_type != "cpu":
        return None
    for name in ONEDNN_CACHE_VARIABLES:
        if os.environ.get(name):
            return f"{os.environ[name]} ({name}, set in the environment)"
    os.environ[ONEDNN_CACHE_VARIABLES[0]] = str(ONEDNN_CACHE_CAPACITY)
    return (f"{ONEDNN_CACHE_CAPACITY} (default 1024: every token-budget batch is a new shape; "
            f"{ONEDNN_CACHE_VARIABLES[0]} overrides it)")  # fmt: skip


def disable_cudnn_attention(device_type: str) -> str | None:
    """Keep PyTorch's scaled_dot_product_attention off its cuDNN backend on a GPU (once, before training or
    translating); returns what was decided, for the log (None on the CPU, which has no such backend).

    cuDNN's attention builds an execution plan for every new (batch, heads, query length, key length) shape. Batches
    made by token count (`--max_tokens`) and beam search (a longer key every step) bring a new shape nearly every call:
    measured on an H100 (torch 2.11, base model, bf16, a new shape each step, benchmarks/README.md "GPU throughput"),
    725 ms per training step with cuDNN attention allowed against 34 ms without it (60 ms with eager attention); with
    one shape repeated both took 34 ms. Without it PyTorch picks its FlashAttention or memory-efficient kernels, which
    need no per-shape plan."""
    import torch

    if device_type != "cuda":
        return None
    enable = getattr(torch.backends.cuda, "enable_cudnn_sdp", None)
    if enable is None:  # a torch without the cuDNN backend
        return None
    enable(False)
    return "cuDNN attention off (a plan per shape; flash / memory-efficient kernels instead)"


# ----------------------------------------------------------------------------------------------------------------
# Devices
# ----------------------------------------------------------------------------------------------------------------
# the default batch of beam search (`default_batch_tokens`): per CPU thread, and the most on any device
BATCH_TOKENS_PER_CPU_THREAD = 512
MAX_DEFAULT_BATCH_TOKENS = 4096


def default_batch_tokens(device_type: str, threads: int) -> int:
    """Source tokens per decoding batch (padding included) when the caller gives none: on a CPU
    `BATCH_TOKENS_PER_CPU_THREAD` for each thread that decodes, at most `MAX_DEFAULT_BATCH_TOKENS`; elsewhere (a
    GPU) `MAX_DEFAULT_BATCH_TOKENS`. A batch decodes until its longest translation ends (`generate()` keeps
    computing the sentences that have ended) and every step's cache and attention span the whole batch, so on a CPU,
    where nothing is gained by filling a wide device, a large batch costs more per sentence than a small one
    (benchmarks/README.md, "Decoding batches on a CPU"). A GPU wants large batches."""
    if device_type != "cpu":
        return MAX_DEFAULT_BATCH_TOKENS
    return min(MAX_DEFAULT_BATCH_TOKENS, BATCH_TOKENS_PER_CPU_THREAD * max(1, threads))


def cpu_threads() -> int:
    """The CPU threads decoding uses unless told (`--threads`): PyTorch's count where PyTorch is loaded (a process
    that set it with `torch.set_num_threads` keeps it), else found without importing PyTorch (1-2 s, which a
    CTranslate2 export does not need) as PyTorch's MKL build finds its own: one per physical core of the CPUs this
    process may run on, or MKL_NUM_THREADS, else OMP_NUM_THREADS, where set, up to that many cores
    (tests/test_devices.py compares the two)."""
    torch = sys.modules.get("torch")
    if torch is not None:
        return torch.get_num_threads()
    cores = physical_cores()
    for name in ("MKL_NUM_THREADS", "OMP_NUM_THREADS"):  # PyTorch's order: MKL_NUM_THREADS wins
        value = os.environ.get(name, "").strip()
        if value.isdigit() and int(value) > 0:
            return min(int(value), cores)
    return cores


def set_torch_threads(threads: int | None) -> None:
    """PyTorch's intra-op threads for the whole process (`torch.set_num_threads`); None leaves them as they are."""
    if threads is not None:
        import torch

        torch.set_num_threads(threads)


def physical_cores() -> int:
    """The physical cores among the CPUs this process may run on (`os.sched_getaffinity`): the hyperthreads of one
    core count once (Linux's `thread_siblings_list`); each CPU counts as a core where that cannot be read."""
    cpus = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else range(os.cpu_count() or 1)
    cores = set()
    for cpu in cpus:
        try:
            with open(f"/sys/devices/system/cpu/cpu{cpu}/topology/thread_siblings_list") as siblings:
                cores.add(siblings.read().strip())
        except OSError:
            cores.add(f"cpu{cpu}")
    return max(1, len(cores))


def resolve_device(device: str) -> str:
    """The device to run on: "auto" gives "cuda" if a GPU is visible, else "cpu"; or a torch device ("cuda:1")."""
    import torch

    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    try:
        kind = torch.device(device).type
    except RuntimeError:
        raise TranslateError(f"unknown device {device!r}: use auto, cpu, cuda or cuda:N") from None
    if kind == "cuda" and not torch.cuda.is_available():
        raise TranslateError(f"device {device!r} was requested but no CUDA GPU is available: use --device cpu")
    return device


DTYPES = ("float32", "bfloat16", "float16")
# The command line's name of each: `--mixed_precision no|bf16|fp16` (the registry's one spelling for precision).
DTYPE_TO_MIXED_PRECISION = {"float32": "no", "bfloat16": "bf16", "float16": "fp16"}
MIXED_PRECISION_TO_DTYPE = {value: key for key, value in DTYPE_TO_MIXED_PRECISION.items()}


# ----------------------------------------------------------------------------------------------------------------
# Devices and data types
# ----------------------------------------------------------------------------------------------------------------
def check_dtype(dtype: str) -> str:
    if dtype not in DTYPES:
        raise TranslateError(f"unknown dtype {dtype!r}: use one of {', '.join(DTYPES)}")
    return dtype


def torch_dtype_supported(dtype: str, device: str) -> bool:
    """Whether PyTorch runs `dtype` natively on `device`: bfloat16 as `vaswani.devices.native_bf16` says (the
    check training uses too); float16 on every CUDA GPU, and on CPUs with AMX-FP16 (torch exposes that check only as
    `torch.cpu._is_amx_fp16_supported`)."""
    import torch

    device_type = torch.device(device).type
    if dtype == "float32":
        return True
    if dtype == "bfloat16":
        return native_bf16(device_type)
    return device_type == "cuda" or bool(getattr(torch.cpu, "_is_amx_fp16_supported", lambda: False)())


def refuse_dtype(dtype: str, device: str, backend: str, supported: set[str] | None = None) -> TranslateError:
    """The error for `--mixed_precision` asking `backend` for a `dtype` it cannot compute natively on `device`.
    PyTorch (no `supported`): the CPU lacks the instructions. CTranslate2 (`supported`: its compute types there):
    its CPU build has no bfloat16 or float16 at all, whatever the CPU, so the fix is float32 or int8, or a GPU."""
    what = (
        f"{dtype} (--mixed_precision {DTYPE_TO_MIXED_PRECISION[dtype]}) cannot run natively on {device} with {backend}"
    )
    if supported is None:
        return TranslateError(
            f"{what} (this CPU lacks the instructions for it); use float32 (--mixed_precision no), or a GPU / a CPU "
            "with AVX512-BF16 or AMX"
        )
    return TranslateError(
        f"{what}: it computes {', '.join(sorted(supported))} there; use --mixed_precision no (with an int8 export, "
        "`vaswani export --quantization int8`, the fast choice on a CPU), or a GPU"
    )
