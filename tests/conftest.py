"""Shared fixtures: tiny configs (vocab 99, d_model 16, 2+2 layers, as transformers' own ModelTesters use)."""

import collections
import contextlib
import functools
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from hypothesis import settings

from vaswani.devices import ctranslate2_environment, separate_kernel_cache_per_instruction_set

# Property tests draw the same examples on every run unless asked otherwise: CI must not fail on an input nobody has
# seen before. `HYPOTHESIS_PROFILE=explore make test` searches with fresh random examples.
settings.register_profile("ci", derandomize=True, print_blob=True)
settings.register_profile("explore", print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# Tiny models gain nothing from threads, and on a busy 2-core machine OpenMP threads spinning against other processes
# (the test subprocesses included) make them up to 100x slower.
torch.set_num_threads(1)
# The suite runs under other instruction sets too (docs/layout.md, "Other CPUs"): kernels compiled under one must not
# be loaded under another (this process's compiled tests, transformers' among them, and train.py subprocesses).
separate_kernel_cache_per_instruction_set()
# Before any test imports CTranslate2, as the package does before it imports it (int8 products without VNNI).
ctranslate2_environment()

REPO_ROOT = Path(__file__).resolve().parent.parent


def pytest_collection_modifyitems(items):
    """The files with the most slow tests first (otherwise in collection order): under `--dist loadfile` (how `make
    test` runs the suite) each worker takes the next whole file when it is free, so a long file left to the end
    would run alone while the other workers have nothing to do. pyproject.toml's `--no-loadscope-reorder` keeps
    pytest-xdist to this order (its own puts the files with the most tests first)."""
    slow = collections.Counter(item.path for item in items if item.get_closest_marker("slow"))
    items.sort(key=lambda item: -slow[item.path])  # stable: a file's tests stay together and in order


@pytest.fixture(autouse=True)
def one_torch_thread_after_each_test():
    """A test that changes PyTorch's thread count (`Translator(threads=N)` and `--threads N` set it for the process,
    as documented) would leave the worker at that count, and the next test's in-process training would sum in another
    order than a one-thread train.py subprocess (losses 1e-5 apart). Each test starts at one thread."""
    yield
    if torch.get_num_threads() != 1:
        torch.set_num_threads(1)


TINY = {
    "vocab_size": 99,
    "d_model": 16,
    "encoder_layers": 2,
    "decoder_layers": 2,
    "encoder_attention_heads": 4,
    "decoder_attention_heads": 4,
    "encoder_ffn_dim": 32,
    "decoder_ffn_dim": 32,
    "max_position_embeddings": 64,
}


def tiny_config(**overrides):
    from modeling_vaswani import VaswaniConfig

    return VaswaniConfig(**{**TINY, **overrides})


def tiny_model(seed: int = 0, **overrides):
    from modeling_vaswani import VaswaniForConditionalGeneration

    torch.manual_seed(seed)
    return VaswaniForConditionalGeneration(tiny_config(**overrides))


def random_batch(batch_size=3, src_len=7, tgt_len=6, vocab_size=99, seed=0, pad_token_id=0):
    """Source ids with right padding (rows get shorter), an attention mask, and target labels ending in EOS (2)."""
    generator = torch.Generator().manual_seed(seed)
    input_ids = torch.randint(4, vocab_size, (batch_size, src_len), generator=generator)
    attention_mask = torch.ones_like(input_ids)
    for row in range(1, batch_size):
        attention_mask[row, src_len - row :] = 0
    input_ids = input_ids.masked_fill(attention_mask == 0, pad_token_id)
    labels = torch.randint(4, vocab_size, (batch_size, tgt_len), generator=generator)
    labels[:, -1] = 2
    return input_ids, attention_mask, labels


def decode_step_by_step(model, input_ids, attention_mask, decoder_input_ids, cache_name: str = "past_key_values"):
    """The logits of `decoder_input_ids` (B, T) computed one token at a time through the key/value cache, the
    encoder run once: (logits (B, T, V), the final cache). Compared with one full forward by the caching tests.
    `cache_name`: the argument the cache is passed as ("cache": transformers >= 5.24's `generate()`)."""
    encoder_outputs = model.get_encoder()(input_ids=input_ids, attention_mask=attention_mask)
    cache, steps = None, []
    for t in range(decoder_input_ids.shape[1]):
        out = model(
            encoder_outputs=encoder_outputs,
            attention_mask=attention_mask,
            decoder_input_ids=decoder_input_ids[:, t : t + 1],
            use_cache=True,
            **{cache_name: cache},
        )
        cache = out.past_key_values
        steps.append(out.logits)
    return torch.cat(steps, dim=1), cache


def assert_static_cache_generate_compiles(model, input_ids, **greedy) -> None:
    """`generate(**greedy)` with a static cache gives the dynamic cache's tokens, also with `forward` compiled with
    `fullgraph=True`: with a static cache the past length is a tensor, so no Python branch may depend on it, and a
    graph break fails; the "eager" backend checks the capture without paying for code generation."""
    reference = model.generate(input_ids, **greedy)
    assert torch.equal(model.generate(input_ids, cache_implementation="static", **greedy), reference)
    torch._dynamo.reset()
    model.forward = torch.compile(model.forward, fullgraph=True, backend="eager")
    try:
        assert torch.equal(model.generate(input_ids, cache_implementation="static", **greedy), reference)
    finally:
        del model.forward
        torch._dynamo.reset()


def overfit(model, batch: dict, steps: int, lr: float, stop_below: float | None = None, **adam_options) -> float:
    """Train `model` on the one `batch` (model inputs with labels) with Adam for `steps` updates, or until the loss
    is below `stop_below`; returns the last loss. The tiny models of the tests memorise their data this way."""
    optimizer = torch.optim.Adam(model.parameters(), lr=lr, **adam_options)
    model.train()
    for _ in range(steps):
        loss = model(**batch).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if stop_below is not None and loss.item() < stop_below:
            break
    return loss.item()


@pytest.fixture(scope="module")
def model_folder(tmp_path_factory):
    """A complete model folder (weights, config, tokenizer) of the tiny trained translator of test_pipeline.py,
    written once per test module that uses it."""
    from test_pipeline_vaswani import save_model_folder

    folder = tmp_path_factory.mktemp("tiny") / "model"
    save_model_folder(folder)
    return folder


# Blocks our own packages inside a subprocess, so it sees a folder exactly as a user without the package would.
BLOCK_OWN_PACKAGES = textwrap.dedent(
    """
    import importlib.abc, sys
    class _Block(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in {"modeling_vaswani", "tokenization", "vaswani"}:
                raise ModuleNotFoundError(f"No module named {name!r} (blocked by the test)")
            return None
    sys.meta_path.insert(0, _Block())
    """
)


def run_isolated_python(code: str, tmp_path: Path, timeout: int = 240) -> subprocess.CompletedProcess:
    """Run `code` in a fresh interpreter that cannot import this repository's packages, with HF_HOME (and so the
    remote-code module cache) in a temporary folder, offline."""
    hf_home = tmp_path / "hf_home"
    env = {key: value for key, value in os.environ.items() if key not in {"PYTHONPATH", "HF_MODULES_CACHE", "HF_HOME"}}
    env.update(
        HF_HOME=str(hf_home),
        HF_MODULES_CACHE=str(hf_home / "modules"),
        HF_HUB_OFFLINE="1",
        TOKENIZERS_PARALLELISM="false",
    )
    script = BLOCK_OWN_PACKAGES + textwrap.dedent(code)
    return subprocess.run(
        [sys.executable, "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=timeout
    )


@pytest.fixture
def isolated_python(tmp_path):
    def run(code: str, timeout: int = 240):
        return run_isolated_python(code, tmp_path, timeout=timeout)

    return run


def free_port() -> int:
    """A TCP port nobody listens on now, for one launch's rendezvous (not accelerate's fixed default 29500, which a
    leftover or concurrent launch may hold)."""
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@functools.cache
def command_server():
    """benchmarks/bench_faults.py's `Launcher`, for this worker: each command a process forked from a server that
    imported torch, transformers, datasets and accelerate once (bench_faults.PRELOAD), with its own arguments, folder,
    environment, output and exit status; our own packages and train.py are imported afresh by each, as in a new
    interpreter. A tiny train.py run costs ~1 s of CPU instead of ~5 (the imports). Its caches (datasets, remote
    code) are in a temporary folder of the server's, removed when the worker exits."""
    import atexit
    import shutil
    import tempfile

    sys.path.insert(0, str(REPO_ROOT / "benchmarks"))
    import bench_faults

    workdir = Path(tempfile.mkdtemp(prefix="vaswani-tests-commands-"))
    atexit.register(shutil.rmtree, workdir, ignore_errors=True)
    return bench_faults.Launcher(workdir)


def run_command(cmd: list[str], *, env: dict, cwd: Path, timeout: int) -> subprocess.CompletedProcess:
    """`subprocess.run`, except that on a timeout every process it started is killed (a launcher's ranks included,
    which torch's launcher puts in sessions of their own) and the returned result (returncode None) carries the
    output so far, whose tail says where it stopped."""
    import signal

    with subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as process:
        try:
            stdout, stderr = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            for pid in [process.pid, *descendants(process.pid)]:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            stdout, stderr = process.communicate()
            return subprocess.CompletedProcess(cmd, None, stdout, f"{stderr}\n[killed after {timeout} s]")
    return subprocess.CompletedProcess(cmd, process.returncode, stdout, stderr)


def descendants(pid: int) -> list[int]:
    """The processes below `pid` (Linux: read from /proc), children first."""
    children = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            fields = stat.read_text().rsplit(")", 1)[1].split()
            children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found, queue = [], list(children.get(pid, []))
    while queue:
        child = queue.pop(0)
        found.append(child)
        queue.extend(children.get(child, []))
    return found


def cpu_ranks_command(script: Path, args: list[str], processes: int) -> list[str]:
    """The `accelerate launch` command line of `script` as `processes` gloo ranks on CPU, to run with
    ACCELERATE_USE_CPU=1 in its environment. (accelerate 1.15's `--cpu` launcher starts one process;
    ACCELERATE_USE_CPU=1 with `--multi_gpu` starts real CPU ranks.)"""
    return [
        sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", str(processes),
        "--num_machines", "1", "--main_process_port", str(free_port()), "--mixed_precision", "no",
        "--dynamo_backend", "no", str(script), *args,
    ]  # fmt: skip


def run_cpu_ranks(
    script: Path, args: list[str], *, processes: int, env: dict, cwd: Path, timeout: int
) -> subprocess.CompletedProcess:
    """`accelerate launch` of `script` as `processes` gloo ranks on CPU (`cpu_ranks_command`)."""
    cmd = cpu_ranks_command(script, args, processes)
    return run_command(cmd, env={**env, "ACCELERATE_USE_CPU": "1"}, cwd=cwd, timeout=timeout)


def reports_of_two_ranks(script: str, tmp_path: Path) -> tuple[dict, dict]:
    """tests/scripts/SCRIPT run as two gloo ranks (it must end with status 0): what each rank wrote, rank 0's first."""
    out = tmp_path / "report"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    result = run_cpu_ranks(REPO_ROOT / "tests" / "scripts" / script, [str(out)], processes=2, env=env, cwd=tmp_path,
                           timeout=300)  # fmt: skip
    assert result.returncode == 0, result.stderr[-4000:]
    main, other = (json.loads(Path(f"{out}.rank{rank}.json").read_text()) for rank in (0, 1))
    return main, other


def reset_accelerate_state() -> None:
    """Forget Accelerate's process-wide state, as a new process would start: after an in-process run or Accelerator."""
    from accelerate.state import AcceleratorState, GradientState

    AcceleratorState._reset_state(reset_partial_state=True)
    GradientState._reset_state()


@pytest.fixture
def accelerator():
    """A CPU Accelerator for one test; its process-wide state is reset afterwards."""
    from accelerate import Accelerator

    yield Accelerator(cpu=True)
    reset_accelerate_state()


def train_in_process(argv: list[str]) -> dict:
    """`vaswani.training.loop.main(argv)` in this process (fast: no interpreter start), returning its results; Accelerate's
    process-wide state is reset before it (a Trainer test in this worker leaves it set, with its own precision, which
    a run that picks bf16 on a CPU with native bf16 could not change) and after it."""
    from vaswani.training import loop

    reset_accelerate_state()
    try:
        return loop.main(argv)
    finally:
        reset_accelerate_state()


def generation_warnings(monkeypatch) -> list[str]:
    """The warnings transformers' `GenerationConfig.validate` gives from now on ("The following generation flags are
    not valid and may be ignored: ..."), recorded: its `warning_once` would show each message only once per process."""
    from transformers.generation import configuration_utils

    warned: list[str] = []
    monkeypatch.setattr(
        configuration_utils.logger, "warning_once", lambda message, *args, **kwargs: warned.append(message)
    )
    return warned


def train_command_in_process(argv: list[str]) -> tuple[int, str]:
    """`vaswani train ARGV` as the command runs it (`vaswani.training.loop.run`: `error: ...` and status 2 for a user
    mistake), in this process: its exit status and what it wrote to stderr."""
    import io

    from vaswani.training import loop

    stderr = io.StringIO()
    reset_accelerate_state()  # as in train_in_process
    with contextlib.redirect_stderr(stderr):
        try:
            status = loop.run(argv)
        except SystemExit as exit:  # argparse's own errors
            status = exit.code
        finally:
            reset_accelerate_state()
    return status, stderr.getvalue()
