"""Measurement helpers shared by the benchmarks: timing (warmup, interleaved repeats, medians, spread) and peak memory
on CPU (resident set size of a fresh worker process), plus small output helpers.

Timing. A shared machine slows down whichever candidate runs while another process is busy. `interleave` therefore
times the candidates in alternating rounds (A B, then B A, ...) after warming each up, and the results are summarised
by the median over rounds; per-round ratios (`ratio_summary`) show how stable a comparison is. Each round also
records how much of its time some task waited for a CPU (Linux PSI), which tells a quiet measurement from a
contended one.

The discipline every timing benchmark follows: both sides timed by the same clock with the same boundaries (set-up
excluded on both), a warm-up per side, at least 5 interleaved rounds by default, median and min-max printed, the
CPU and its flags (`describe_machine`) in the header, an A/A copy of one side (`with_aa_copy`, `aa_summary`) so that
"within noise" is a measured number, and a target called met only when the median and most rounds agree
(`verdict`).

Memory. torch keeps no allocator statistics on CPU, so memory is read from the kernel: `VmRSS` (resident now) and
`VmHWM` (resident high-water mark) of /proc/self/status. `measure_peak_rss` returns memory to the kernel first
(`malloc_trim`), resets the high-water mark (`/proc/self/clear_refs`) and reports how far the peak rose above the
resident size just before the workload. Run each measured workload in its own fresh process
(`run_in_fresh_process`): what an earlier workload left in glibc's free lists would otherwise hide part of the next
peak. `fix_mmap_threshold` explains why glibc's default makes such peaks vary by +-10% from run to run.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import ctypes.util
import datetime
import gc
import http.client
import json
import math
import multiprocessing
import os
import platform
import signal
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

# ----------------------------------------------------------------------------------------------------------------
# Timing
# ----------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Summary:
    """Median and range of repeated measurements (seconds, or any rate derived from them)."""

    median: float
    low: float
    high: float
    values: tuple[float, ...]

    @classmethod
    def of(cls, values: Sequence[float]) -> Summary:
        if not values:
            raise ValueError("Summary.of needs at least one value.")
        return cls(statistics.median(values), min(values), max(values), tuple(values))

    @property
    def spread(self) -> float:
        """(high - low) / median: 0 for perfectly repeatable measurements."""
        return (self.high - self.low) / self.median if self.median else float("nan")

    def to_dict(self) -> dict:
        return {**asdict(self), "values": list(self.values), "spread": self.spread}


def time_call(function: Callable[[], object], calls: int = 1) -> float:
    """Wall-clock seconds of `calls` consecutive calls of `function` (perf_counter)."""
    start = time.perf_counter()
    for _ in range(calls):
        function()
    return time.perf_counter() - start


def cpu_stall_seconds() -> float | None:
    """Seconds (since boot) during which some runnable task waited for a CPU: the "some" line of Linux's pressure
    stall information, /proc/pressure/cpu. None where PSI is not available."""
    try:
        with open("/proc/pressure/cpu") as pressure:
            some = pressure.readline().split()
        return int(some[-1].split("=")[1]) / 1e6  # total=<microseconds>
    except (OSError, IndexError, ValueError):
        return None


@dataclass
class Interleaved:
    """Result of `interleave`: per candidate, the seconds of each round and the fraction of that round during which
    some task waited for a CPU (0 on an idle machine; None without PSI). A high stall fraction means other
    processes competed for the cores during that round."""

    seconds: dict[str, list[float]]
    stalled: dict[str, list[float | None]]

    def busiest(self) -> float | None:
        values = [v for per_name in self.stalled.values() for v in per_name if v is not None]
        return max(values) if values else None

    def median_stalled(self) -> float | None:
        values = [v for per_name in self.stalled.values() for v in per_name if v is not None]
        return statistics.median(values) if values else None


def interleave(
    candidates: Mapping[str, Callable[[], object]], warmup: int, repeats: int, calls: int = 1
) -> Interleaved:
    """Time every candidate `repeats` times, interleaved.

    Each candidate first runs `warmup` untimed calls. Then every round times `calls` consecutive calls of each
    candidate, in an order that alternates between rounds (A B, B A, A B, ...), so that a slow or fast spell of the
    machine falls on both sides rather than on one; short rounds keep the two halves of a round close in time.
    """
    if repeats < 1 or calls < 1 or warmup < 0:
        raise ValueError(f"need repeats >= 1, calls >= 1, warmup >= 0 (got {repeats}, {calls}, {warmup})")
    names = list(candidates)
    for name in names:
        for _ in range(warmup):
            candidates[name]()
    result = Interleaved({name: [] for name in names}, {name: [] for name in names})
    for round_index in range(repeats):
        for name in names if round_index % 2 == 0 else reversed(names):
            stall_before = cpu_stall_seconds()
            seconds = time_call(candidates[name], calls)
            stall_after = cpu_stall_seconds()
            result.seconds[name].append(seconds)
            stalled = None if stall_before is None else min(1.0, (stall_after - stall_before) / seconds)
            result.stalled[name].append(stalled)
    return result


AA_SUFFIX = " (A/A)"


def with_aa_copy(candidates: Mapping[str, Callable[[], object]], name: str) -> dict[str, Callable[[], object]]:
    """`candidates` plus a second entry for `name` (the same callable, named `name + AA_SUFFIX`), placed right after
    it: `interleave` then times that side against itself in every round, so the noise of the comparison is a measured
    number (`aa_summary`) rather than an assumption."""
    result = {}
    for key, call in candidates.items():
        result[key] = call
        if key == name:
            result[name + AA_SUFFIX] = call
    if name not in candidates:
        raise KeyError(f"no candidate {name!r} to copy for the A/A measurement")
    return result


def add_aa_argument(parser, side: str) -> None:
    """`--aa` / `--no-aa`: time `side` a second time in every round (on by default; costs one more candidate)."""
    parser.add_argument("--aa", action=argparse.BooleanOptionalAction, default=True,
                        help=f"also time {side} against itself in every round: the A/A noise printed next to the "
                             "figures (default: on; --no-aa saves that time)")  # fmt: skip


def aa_summary(per_round: Mapping[str, Sequence[float]], name: str) -> Summary | None:
    """The per-round ratios of `name` against its A/A copy (seconds or rates: the ratio is the same up to inversion,
    and noise is symmetric); None when no copy was timed."""
    copy = per_round.get(name + AA_SUFFIX)
    return None if copy is None else ratio_summary(per_round[name], copy)


def describe_aa(summary: Summary | None, name: str) -> str:
    """One line: how far the side `name` is from itself (median and range of the per-round ratios)."""
    if summary is None:
        return f"A/A: not measured ({name} was not timed against itself; run without --no-aa)"
    worst = max(abs(summary.low - 1), abs(summary.high - 1))
    return (
        f"A/A noise ({name} against itself): median {summary.median:.3f}, rounds {summary.low:.3f}-"
        f"{summary.high:.3f}: a single round can be {worst:.0%} off, a median {abs(summary.median - 1):.1%}"
    )


def verdict(ratios: Sequence[float], target: float, higher_is_better: bool = True) -> str:
    """ "MET" only when the median ratio and most rounds (more than half) both reach the target, "MISSED" when
    neither does, "UNCLEAR" when they disagree (a median carried by a minority of rounds)."""
    if not ratios:
        raise ValueError("verdict needs at least one ratio")

    def reaches(value: float) -> bool:
        return value >= target if higher_is_better else value <= target

    median_ok = reaches(statistics.median(ratios))
    most_ok = sum(map(reaches, ratios)) * 2 > len(ratios)
    return "MET" if median_ok and most_ok else "MISSED" if not (median_ok or most_ok) else "UNCLEAR"


def rates(seconds: Sequence[float], work: float) -> list[float]:
    """Throughputs (work units per second) of rounds that each did `work` units."""
    return [work / s for s in seconds]


def ratio_summary(numerator: Sequence[float], denominator: Sequence[float]) -> Summary:
    """Summary of the per-round ratios numerator[i] / denominator[i] (rounds measured back to back by `interleave`)."""
    if len(numerator) != len(denominator):
        raise ValueError("ratio_summary needs two sequences of the same length")
    return Summary.of([a / b for a, b in zip(numerator, denominator, strict=True)])


def sign_test(ratios: Sequence[float], threshold: float = 1.0) -> tuple[int, int, float]:
    """How many per-round ratios exceed `threshold`, out of how many (ties dropped), and the two-sided p-value of
    the sign test: the probability of a split at least this uneven if both sides were equally fast."""
    above = sum(ratio > threshold for ratio in ratios)
    count = above + sum(ratio < threshold for ratio in ratios)
    if count == 0:
        return 0, 0, 1.0
    tail = min(above, count - above)
    p_value = min(1.0, 2 * sum(math.comb(count, k) for k in range(tail + 1)) / 2**count)
    return above, count, p_value


def comparison_row(
    name: str, shown: Sequence[float], speed: Sequence[float], reference_speed: Sequence[float], number_format: str
) -> tuple[list[str], Summary]:
    """One row of a "candidate against the reference" table: the median and range of `shown` (seconds or a rate,
    formatted with `number_format`), the per-round speed ratio to the reference (median, range) and how many rounds
    the candidate was faster (sign test). Returns the row's cells and the ratio's summary."""
    summary, ratio = Summary.of(shown), ratio_summary(speed, reference_speed)
    above, count, p_value = sign_test(ratio.values)
    cells = [name, format(summary.median, number_format),
             f"{summary.low:{number_format}}-{summary.high:{number_format}}", f"{ratio.median:.2f}",
             f"{ratio.low:.2f}-{ratio.high:.2f}", f"{above}/{count} (p={p_value:.2f})"]  # fmt: skip
    return cells, ratio


# ----------------------------------------------------------------------------------------------------------------
# Memory (Linux)
# ----------------------------------------------------------------------------------------------------------------
_LIBC = None


def _libc():
    global _LIBC
    if _LIBC is None:
        _LIBC = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    return _LIBC


def proc_status_mb(field: str) -> float:
    """A memory field of /proc/self/status (e.g. "VmRSS", "VmHWM", "RssAnon") in MiB."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024  # the kernel reports kB
    raise RuntimeError(f"/proc/self/status has no {field} (not Linux?)")


def rss_mb() -> float:
    """Resident set size now, MiB."""
    return proc_status_mb("VmRSS")


def peak_rss_mb() -> float:
    """Resident set size high-water mark since the process started or since `reset_peak_rss`, MiB."""
    return proc_status_mb("VmHWM")


def reset_peak_rss() -> None:
    """Reset the kernel's high-water mark (VmHWM) to the current RSS (Linux >= 4.0: write 5 to clear_refs)."""
    with open("/proc/self/clear_refs", "w") as clear_refs:
        clear_refs.write("5")


def release_free_memory() -> None:
    """Collect garbage and ask glibc to return its free memory to the kernel (`malloc_trim(0)`, all arenas)."""
    gc.collect()
    with contextlib.suppress(OSError, AttributeError):  # not glibc: nothing to trim
        _libc().malloc_trim(0)


@dataclass(frozen=True)
class PeakMemory:
    """Resident memory around one workload, MiB: `before` it, its `peak`, and `increase` = peak - before."""

    before_mb: float
    peak_mb: float

    @property
    def increase_mb(self) -> float:
        return self.peak_mb - self.before_mb

    def to_dict(self) -> dict:
        return {**asdict(self), "increase_mb": self.increase_mb}


def measure_peak_rss(workload: Callable[[], object]) -> PeakMemory:
    """Run `workload` once and report how far the resident set rose above its size just before.

    Before the workload, free memory is returned to the kernel and the high-water mark is reset, so `before_mb` is
    what the process really holds (model, optimizer state, inputs) and `peak_mb` the highest resident size reached
    during the workload. The increase is the workload's transient memory (activations, gradients, caches) as the
    kernel sees it: freed blocks that glibc keeps for reuse still count, and they are why this should run in a fresh
    process (see `run_in_fresh_process`).
    """
    release_free_memory()
    reset_peak_rss()
    before = rss_mb()
    workload()
    return PeakMemory(before_mb=before, peak_mb=max(peak_rss_mb(), before))


@contextlib.contextmanager
def _stderr_silenced():
    """Send file descriptor 2 to /dev/null meanwhile (the profiler's C++ side logs its start and stop there)."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as devnull:
            os.dup2(devnull.fileno(), 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def peak_tensor_mb(workload: Callable[[], object]) -> float | None:
    """Peak of the CPU tensor memory allocated during `workload` above what was live before it, MiB.

    Read from torch.profiler's allocation events (`profile_memory=True`): exact tensor bytes, independent of
    malloc, but blind to everything that is not a tensor (Python objects, allocator overhead). The workload runs
    under the profiler, so do not time it. None if this torch build does not expose the events.
    """
    from torch.profiler import ProfilerActivity, profile

    with _stderr_silenced(), profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        workload()
    try:
        events = prof.profiler.kineto_results.events()
    except AttributeError:
        return None
    allocations = sorted((event for event in events if event.name() == "[memory]"), key=lambda e: e.start_ns())
    live = peak = 0
    for event in allocations:
        live += event.nbytes()  # negative for a free
        peak = max(peak, live)
    return peak / 2**20


# ----------------------------------------------------------------------------------------------------------------
# Fresh worker processes and glibc malloc settings
# ----------------------------------------------------------------------------------------------------------------
M_MMAP_THRESHOLD = -3  # mallopt parameter number (malloc.h)
GLIBC_DEFAULT_MMAP_THRESHOLD = 128 * 1024


def fix_mmap_threshold(nbytes: int = GLIBC_DEFAULT_MMAP_THRESHOLD) -> bool:
    """Make glibc serve every allocation of `nbytes` or more with its own mmap, returned to the kernel on free.

    By default glibc starts at 128 KiB but raises the threshold (up to 32 MiB) each time a large mmapped block is
    freed; later blocks of that size then come from the heap and stay resident after `free`, so the RSS peak also
    counts freed memory, by an amount that depends on allocation order and thread scheduling. A fixed threshold
    (`mallopt(M_MMAP_THRESHOLD)`, the same as the environment variable `MALLOC_MMAP_THRESHOLD_`) switches that
    adjustment off: the resident size then follows the memory really in use, and repeated runs agree to a fraction
    of a MiB. Returns False where there is no glibc.
    """
    try:
        return bool(_libc().mallopt(M_MMAP_THRESHOLD, nbytes))
    except (OSError, AttributeError):
        return False


def run_in_fresh_process(function: Callable, *args, preload: Sequence[str] = ()):
    """Return `function(*args)` computed in a new process, forked from a fork server that imported `preload`.

    Forking from the server costs milliseconds instead of seconds of imports, and the child starts with no memory
    history of the caller (the server imports modules and does nothing else). `function` and its arguments and
    result must be picklable; `function` must be defined at module level.
    """
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(list(preload))  # takes effect when the server starts (the first call)
    with context.Pool(1, maxtasksperchild=1) as pool:
        return pool.apply(function, args)


# ----------------------------------------------------------------------------------------------------------------
# Worker processes and data
# ----------------------------------------------------------------------------------------------------------------
REPO = Path(__file__).resolve().parent.parent
# This checkout's packages before any installed copy, in the benchmark's own process as in its workers (`worker_env`):
# a benchmark run from a git worktree must not import `vaswani` from the checkout an editable install points to.
if str(REPO) not in sys.path[:2]:
    with contextlib.suppress(ValueError):  # further down the path: moved up
        sys.path.remove(str(REPO))
    sys.path.insert(1, str(REPO))


@contextlib.contextmanager
def vaswani_serve(arguments: Sequence[str], log: Path, cwd: Path = REPO, env: dict[str, str] | None = None):
    """`vaswani serve ARGUMENTS` on a free loopback port, in its own process started as a user starts it (`python -m
    vaswani.cli`, from `cwd`, its output in `log`); yields the port once /health answers, stops it with SIGTERM."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    command = [sys.executable, "-m", "vaswani.cli", "serve", *arguments, "--port", str(port)]
    with open(log, "w") as output:
        process = subprocess.Popen(command, cwd=cwd, env=env or worker_env(), stdout=output, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 300
        while not _healthy(port):
            if process.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"the server did not start:\n{log.read_text()[-3000:]}")
            time.sleep(0.2)
        yield port
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()


def _healthy(port: int) -> bool:
    with contextlib.suppress(OSError):
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
        connection.request("GET", "/health")
        return connection.getresponse().status == 200
    return False


def worker_env(threads: int | None = None) -> dict[str, str]:
    """The environment of a benchmark's subprocess (train.py, a Trainer worker): offline, this checkout's packages
    first on the path, no tokenizer threads competing with training; with `threads`, that many OpenMP/MKL threads."""
    path = os.pathsep.join([str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])])  # a path given is kept
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", "PYTHONPATH": path}
    if threads is not None:
        env.update(OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
    return env


def run_logged(command: Sequence[str], log: Path, name: str) -> None:
    """Run a one-thread training `command` (train.py ...) from the repository with its output in `log`; print how long
    it took under `name`, or raise RuntimeError naming the log when it fails."""
    start = time.monotonic()
    with log.open("w") as output:
        result = subprocess.run(command, stdout=output, stderr=subprocess.STDOUT, env=worker_env(threads=1), cwd=REPO)
    if result.returncode != 0:
        raise RuntimeError(f"{name} failed (exit {result.returncode}); see {log}")
    print(f"{name}: done in {(time.monotonic() - start) / 60:.1f} min", flush=True)


def choice_list(choices: Sequence[str], what: str) -> Callable[[str], list[str]]:
    """An argparse `type`: a comma-separated list of `what` taken from `choices`, at least one and each once, in the
    order given; anything else is an argparse error that names the unknown items and the choices."""

    def parse(text: str) -> list[str]:
        items = [item.strip() for item in text.split(",") if item.strip()]
        unknown = [item for item in items if item not in choices]
        if unknown or not items or len(set(items)) != len(items):
            raise argparse.ArgumentTypeError(
                f"{text!r}: give one or more {what} from {', '.join(choices)}, each once"
                + (f" (unknown: {', '.join(unknown)})" if unknown else "")
            )
        return items

    return parse


GETTEXT_EN_ES = Path(__file__).resolve().parent.parent.parent / "shared" / "data" / "gettext-en-es"


def add_corpus_arguments(parser) -> None:
    """--data_dir (train/validation/test .jsonl files; default: gettext-en-es beside the repository), --source_lang
    (en) and --target_lang (es): the corpus options of the quality benchmarks."""
    parser.add_argument("--data_dir", type=Path, default=GETTEXT_EN_ES, help="train/validation/test .jsonl files")
    parser.add_argument("--source_lang", default="en")
    parser.add_argument("--target_lang", default="es")


def check_data_dir(parser, data_dir: Path) -> None:
    """A --data_dir must hold train.jsonl, validation.jsonl and test.jsonl (train.py's JSON lines); otherwise
    `parser.error` names the missing file."""
    for split in ("train", "validation", "test"):
        if not (data_dir / f"{split}.jsonl").is_file():
            parser.error(f"--data_dir {data_dir} has no {split}.jsonl")


# ----------------------------------------------------------------------------------------------------------------
# Output
# ----------------------------------------------------------------------------------------------------------------
CPU_FLAGS = ("avx2", "avx512f", "avx512_vnni", "avx512_bf16", "amx_bf16")  # what decides int8 and bf16 speed


def cpu_flags() -> list[str]:
    """Which of `CPU_FLAGS` this CPU has (from /proc/cpuinfo; empty where it cannot be read): AVX2 only means
    emulated bf16 and slower int8, AVX512-BF16 / AMX native bf16."""
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            flags = next(line.split(":", 1)[1].split() for line in cpuinfo if line.startswith("flags"))
    except (OSError, StopIteration):
        return []
    return [flag for flag in CPU_FLAGS if flag in flags]


def describe_machine(machine: dict) -> str:
    """The header line every timing benchmark prints: CPU, its flags, cores and threads, library versions, date."""
    return (
        f"{machine['cpu']} [{' '.join(machine['cpu_flags']) or 'flags unknown'}], {machine['cores_available']} cores "
        f"available, {machine['threads']} threads; torch {machine['torch']}, transformers {machine['transformers']}; "
        f"{machine['date']}"
    )


def machine_description(threads: int) -> dict:
    """What the figures depend on: CPU and its flags, core count, threads used, library versions, date."""
    import torch  # imported here so that the helpers above stay usable without torch

    try:
        import transformers

        transformers_version = transformers.__version__
    except ImportError:
        transformers_version = None
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            cpu = next(line.split(":", 1)[1].strip() for line in cpuinfo if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return {
        "cpu": cpu,
        "cpu_flags": cpu_flags(),
        "cores_available": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "threads": threads,
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers_version,
        "glibc": "-".join(platform.libc_ver()),
        "date": datetime.date.today().isoformat(),
    }


def commit_of(revision: str) -> str | None:
    """The commit `revision` names in this repository (its short hash), or None."""
    found = subprocess.run(["git", "rev-parse", "--verify", "--quiet", "--short", f"{revision}^{{commit}}"],
                           cwd=REPO, capture_output=True, text=True)  # fmt: skip
    if found.returncode != 0:
        return None
    return found.stdout.strip() or None


def uncommitted_changes() -> bool:
    """Whether a tracked file of this checkout differs from its last commit."""
    status = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=REPO, capture_output=True,
                            text=True)  # fmt: skip
    return bool(status.stdout.strip())


def source_tree(revision: str, folder: Path) -> Path:
    """The files of commit `revision` in `folder` (`git archive`: no work tree of the repository is touched), for a
    benchmark's `--baseline REV`: the code before a change, run beside this checkout's."""
    import io
    import tarfile

    archive = subprocess.run(["git", "archive", "--format=tar", revision], cwd=REPO, capture_output=True,
                             check=True).stdout  # fmt: skip
    folder.mkdir(parents=True)
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(folder, filter="data")
    return folder


def source_version(path: os.PathLike) -> str:
    """The last commit that touched `path` (short hash), plus "+ uncommitted changes" if the work tree differs;
    "unknown" outside a git checkout. Read-only git commands."""
    path = os.fspath(path)

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", *args], cwd=os.path.dirname(path) or ".", capture_output=True, text=True, check=True
        ).stdout.strip()

    try:
        commit = git("log", "-1", "--format=%h", "--", path)
        dirty = git("status", "--porcelain", "--", path)
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return (commit or "uncommitted") + (" + uncommitted changes" if dirty else "")


def format_table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A plain-text table: first column left-aligned, the others right-aligned."""
    cells = [list(map(str, headers))] + [[str(cell) for cell in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]

    def line(row: Sequence[str]) -> str:
        return "  ".join(
            cell.ljust(width) if i == 0 else cell.rjust(width)
            for i, (cell, width) in enumerate(zip(row, widths, strict=True))
        )

    return "\n".join([line(cells[0]), "  ".join("-" * width for width in widths)] + [line(row) for row in cells[1:]])


def write_json_report(path: os.PathLike | None, args, **results) -> None:
    """The --json FILE of a benchmark: its settings (every option, as text) and its results (`results` by name).
    Nothing when `path` is None (no --json given)."""
    if path is None:
        return
    settings = {key: str(value) for key, value in vars(args).items()}
    Path(path).write_text(json.dumps({"settings": settings, **results}, indent=2))
