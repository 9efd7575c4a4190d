"""Benchmark: where one training run's time and memory go, phase by phase (issue 27, item 4).

Runs train.py in this process with the options given after `--`, and times the phases of its loop by wrapping, in
this process only, the functions the loop calls: the next update's batches (`data`: the wait for the prefetching
thread), the model's forward pass with the loss (`forward`), `backward`, gradient clipping (`clip`), the optimizer's
step and zero_grad (`optimizer`), the weights' moving average (`moving average`), evaluations during the run
(`evaluation`: beam search and BLEU on the validation subset) and checkpoints (`checkpoints`); what the loop spends
outside them is `rest` (schedule, loss bookkeeping, progress bar, the budget's clock). A phase is timed only at its
outermost call: the forward passes of an evaluation count as evaluation. After the loop, the final model's choice
(evaluating the candidates) and the final validation/test scoring are timed too, outside the budget.

Memory: the process's anonymous resident memory (`RssAnon`, what the kernel cannot drop: tensors, Python objects,
the allocator's free lists), sampled every 0.2 s with the phase running at that moment; the peak per phase says
where it goes.

`--profile_updates N` (after `--profile_after K` updates, default 60: past a compiled run's compiling) runs
torch.profiler over N updates of the loop and prints where they went: the wall time per update, on a GPU the time the
device was busy (the union of its kernels, copies and fills) and idle, the host's waits for the device
(`cudaStreamSynchronize` and the like: a `.item()`, a Python `if` on a GPU tensor), the kernel launches per update,
and the operators that took the most device time and the most host time. On a GPU the phases above are the host's
time (nothing waits for the device), which is what the profile's idle share is read against.

    python benchmarks/bench_train_profile.py -- --config configs/small-data.yaml \\
        --train_file ../shared/data/gettext-en-es/train.jsonl \\
        --validation_file ../shared/data/gettext-en-es/validation.jsonl --source_lang en --target_lang es \\
        --output_dir /tmp/profile --max_train_minutes 5
    python benchmarks/bench_train_profile.py --json out.json -- --config configs/demo.yaml --max_train_steps 20 ...

Prints the seconds, the share of the training loop and the milliseconds per update of each phase, updates per
minute, and the peak anonymous memory per phase. One thread unless OMP_NUM_THREADS says otherwise (the quality
benchmark's setting). The timers add a few microseconds per call, far below the phases they time.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import os
import sys
import threading
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402  (puts this checkout's `vaswani` first on sys.path)

LOOP = "training loop"
PHASES_IN_LOOP = ("data", "forward", "backward", "clip", "optimizer", "moving average", "evaluation", "checkpoints")
AFTER_LOOP = ("final model choice", "final scoring")


class PhaseClock:
    """Seconds and calls per phase, counted only at the outermost timed call; the phase running now (for the memory
    sampler) and the peak anonymous memory seen in each phase."""

    def __init__(self):
        self.seconds = defaultdict(float)
        self.calls = defaultdict(int)
        self.peak_anon_mb = defaultdict(float)
        self.stack: list[str] = []
        self.replaced: list[tuple[object, str, object | None]] = []  # (owner, attribute, its own value or None)

    @property
    def current(self) -> str:
        return self.stack[-1] if self.stack else "set-up and other"

    @contextlib.contextmanager
    def phase(self, name: str, nested: bool = False):
        """Time `name` unless another phase (other than the loop itself, or any with `nested`) is running."""
        outer = [p for p in self.stack if p != LOOP]
        if outer and not nested:
            yield
            return
        self.stack.append(name)
        start = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[name] += time.perf_counter() - start
            self.calls[name] += 1
            self.stack.pop()

    def wrap(self, owner, attribute: str, name, nested: bool = False) -> None:
        """Replace `owner.attribute` (a function or method) by a timed copy; `name` is the phase's name, or a function
        that names it at each call."""

        def timing(original):
            @functools.wraps(original)
            def timed(*args, **kwargs):
                with self.phase(name() if callable(name) else name, nested):
                    return original(*args, **kwargs)

            return timed

        self.replace(owner, attribute, timing)

    def replace(self, owner, attribute: str, wrapper) -> None:
        """Replace `owner.attribute` by `wrapper(owner.attribute)` until `unwrap`."""
        original = getattr(owner, attribute)
        self.replaced.append((owner, attribute, vars(owner).get(attribute)))
        setattr(owner, attribute, wrapper(original))

    def unwrap(self) -> None:
        """Put back what `wrap` replaced (a run in a test's process leaves the library as it found it: a timed
        `forward` would otherwise reach a later `torch.compile`, which cannot trace the clock)."""
        for owner, attribute, own in reversed(self.replaced):
            if own is None:  # inherited: the class's own entry goes, the parent's shows again
                delattr(owner, attribute)
            else:
                setattr(owner, attribute, own)
        self.replaced.clear()


class UpdateProfiler:
    """torch.profiler over updates `after` + 1 ... `after` + `count` of the training loop (`loop.train_step`'s calls,
    with whatever the loop does between them), the device synchronised at both ends so that the window holds their
    device work. `summary` is filled when the window closes."""

    SYNCS = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize")
    LAUNCHES = ("cudaLaunchKernel", "cuLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernelEx", "cudaGraphLaunch")

    def __init__(self, after: int, count: int):
        self.after, self.count, self.calls = after, count, 0
        self.profiler, self.start_time, self.summary = None, 0.0, None

    def around(self, train_step):
        @functools.wraps(train_step)
        def profiled(*args, **kwargs):
            self.calls += 1
            if self.calls == self.after + 1:
                self.start()
            result = train_step(*args, **kwargs)
            if self.calls == self.after + self.count:
                self.stop()
            return result

        return profiled

    @staticmethod
    def on_gpu() -> bool:
        """Whether the run uses a CUDA device (it has initialised CUDA by its first update)."""
        import torch

        return torch.cuda.is_available() and torch.cuda.is_initialized()

    def synchronize(self) -> None:
        if self.on_gpu():
            import torch

            torch.cuda.synchronize()

    def start(self) -> None:
        from torch.profiler import ProfilerActivity, profile

        activities = [ProfilerActivity.CPU, *([ProfilerActivity.CUDA] if self.on_gpu() else [])]
        self.synchronize()
        self.profiler = profile(activities=activities)
        self.profiler.__enter__()
        self.start_time = time.perf_counter()

    def stop(self) -> None:
        self.synchronize()
        wall = time.perf_counter() - self.start_time
        self.profiler.__exit__(None, None, None)
        self.summary = self.summarize(self.profiler, wall)
        self.profiler = None

    def summarize(self, profiler, wall_seconds: float) -> dict:
        """Per update: wall, device busy (union of device intervals) and idle, host syncs, launches; top operators."""
        from torch.autograd import DeviceType

        intervals, syncs, launches = [], 0.0, 0
        for event in profiler.profiler.kineto_results.events():
            name = event.name()
            if event.device_type() == DeviceType.CUDA:
                intervals.append((event.start_ns(), event.start_ns() + event.duration_ns()))
            elif name in self.SYNCS:
                syncs += event.duration_ns()
            elif name in self.LAUNCHES:
                launches += 1
        busy_ns, end = 0, None
        for start, stop in sorted(intervals):  # the union of the device's intervals
            if end is None or start > end:
                busy_ns += stop - start
                end = stop
            elif stop > end:
                busy_ns += stop - end
                end = stop
        per_update = 1000 / self.count
        averages = profiler.key_averages()
        device = bool(intervals)

        def top(key: str) -> list[dict]:
            rows = sorted(averages, key=lambda e: getattr(e, key), reverse=True)[:15]
            return [{"name": e.key, "calls_per_update": e.count / self.count,
                     "ms_per_update": getattr(e, key) / 1000 / self.count} for e in rows]  # fmt: skip

        return {
            "updates": self.count, "wall_ms_per_update": wall_seconds * per_update,
            "device_busy_ms_per_update": busy_ns / 1e6 / self.count if device else None,
            "device_idle_share": 1 - busy_ns / 1e9 / wall_seconds if device else None,
            "host_sync_ms_per_update": syncs / 1e6 / self.count, "launches_per_update": launches / self.count,
            "top_device": top("self_device_time_total") if device else [],
            "top_host": top("self_cpu_time_total"),
        }  # fmt: skip

    def report(self) -> None:
        if self.summary is None:
            print(f"profile: the run made {self.calls} updates, fewer than --profile_after {self.after} + "
                  f"--profile_updates {self.count}: nothing was profiled")  # fmt: skip
            return
        s = self.summary
        line = f"profile of updates {self.after + 1}-{self.after + self.count}: {s['wall_ms_per_update']:.1f} ms per update"
        if s["device_busy_ms_per_update"] is not None:
            line += (f", the device busy {s['device_busy_ms_per_update']:.1f} ms (idle "
                     f"{100 * s['device_idle_share']:.1f}% of the time)")  # fmt: skip
        print(f"{line}; the host waited {s['host_sync_ms_per_update']:.1f} ms per update on the device, "
              f"{s['launches_per_update']:.0f} kernel launches per update")  # fmt: skip
        for key, title in (("top_device", "device time"), ("top_host", "host time (self)")):
            if s[key]:
                print(common.format_table(
                    [f"operator (most {title})", "ms per update", "calls per update"],
                    [(r["name"][:90], f"{r['ms_per_update']:.2f}", f"{r['calls_per_update']:.1f}") for r in s[key]],
                ))  # fmt: skip


def anon_mb() -> float:
    """The process's anonymous resident memory now, MiB (RssAnon of /proc/self/status)."""
    return common.proc_status_mb("RssAnon")


def sample_memory(clock: PhaseClock, stop: threading.Event, interval: float = 0.2) -> None:
    while not stop.wait(interval):
        phase = clock.current
        clock.peak_anon_mb[phase] = max(clock.peak_anon_mb[phase], anon_mb())


def instrument(clock: PhaseClock) -> None:
    """Wrap the functions the training loop calls (before the model is built: accelerate wraps the forward pass it
    finds then)."""
    from accelerate import Accelerator
    from accelerate.optimizer import AcceleratedOptimizer

    from modeling_vaswani import VaswaniForCausalLM, VaswaniForConditionalGeneration, VaswaniForMaskedLM
    from vaswani.data.prefetch import Inline, Prefetcher
    from vaswani.training import loop, tasks
    from vaswani.training.ema import WeightEMA

    clock.wrap(loop, "_train_loop", LOOP, nested=True)
    clock.wrap(Prefetcher, "next", "data")
    clock.wrap(Inline, "next", "data")
    for model_class in (VaswaniForConditionalGeneration, VaswaniForCausalLM, VaswaniForMaskedLM):
        clock.wrap(model_class, "forward", "forward")
    clock.wrap(Accelerator, "backward", "backward")
    clock.wrap(Accelerator, "clip_grad_norm_", "clip")
    clock.wrap(AcceleratedOptimizer, "step", "optimizer")
    clock.wrap(AcceleratedOptimizer, "zero_grad", "optimizer")
    clock.wrap(WeightEMA, "update", "moving average")
    clock.wrap(tasks.Run, "evaluate", lambda: "evaluation" if LOOP in clock.stack else "final scoring")
    clock.wrap(loop, "save_checkpoint", "checkpoints")
    clock.wrap(loop, "choose_final_model", "final model choice")


def report(clock: PhaseClock, final: dict, wall_seconds: float) -> dict:
    """The table of phases, printed, and the same as a dict."""
    loop_seconds = clock.seconds[LOOP]
    updates = final.get("step", 0)
    rows, phases = [], {}
    inside = sum(clock.seconds[p] for p in PHASES_IN_LOOP)
    for name in (*PHASES_IN_LOOP, "rest"):
        seconds = loop_seconds - inside if name == "rest" else clock.seconds[name]
        phases[name] = {"seconds": seconds, "calls": clock.calls[name], "peak_anon_mb": clock.peak_anon_mb[name]}
        rows.append((name, f"{seconds:.1f}", f"{100 * seconds / loop_seconds:.1f}%" if loop_seconds else "-",
                     f"{1000 * seconds / updates:.1f}" if updates else "-", clock.calls[name] or "",
                     f"{clock.peak_anon_mb[name]:.0f}" if clock.peak_anon_mb[name] else ""))  # fmt: skip
    rows.append((LOOP, f"{loop_seconds:.1f}", "100%", f"{1000 * loop_seconds / updates:.1f}" if updates else "-",
                 updates, f"{clock.peak_anon_mb[LOOP]:.0f}"))  # fmt: skip
    for name in AFTER_LOOP:
        seconds = clock.seconds[name]
        phases[name] = {"seconds": seconds, "peak_anon_mb": clock.peak_anon_mb[name]}
        rows.append((f"{name} (after)", f"{seconds:.1f}", "", "", "", f"{clock.peak_anon_mb[name]:.0f}"))
    setup = wall_seconds - loop_seconds - sum(clock.seconds[p] for p in AFTER_LOOP)
    rows.append(("set-up and other", f"{setup:.1f}", "", "", "", f"{clock.peak_anon_mb['set-up and other']:.0f}"))
    print(common.format_table(["phase", "seconds", "share of the loop", "ms per update", "calls", "peak anon MiB"],
                              rows))  # fmt: skip
    per_minute = 60 * updates / loop_seconds if loop_seconds else 0.0
    peak = max(clock.peak_anon_mb.values(), default=0.0)
    print(f"{updates} updates in {loop_seconds:.1f} s of training loop: {per_minute:.1f} updates per minute "
          f"({60 * updates / (loop_seconds - clock.seconds['evaluation'] - clock.seconds['checkpoints']):.1f} "
          f"without evaluations and checkpoints); peak anonymous memory {peak:.0f} MiB; "
          f"VmHWM {common.peak_rss_mb():.0f} MiB")  # fmt: skip
    return {"updates": updates, "loop_seconds": loop_seconds, "updates_per_minute": per_minute,
            "peak_anon_mb": peak, "phases": phases}  # fmt: skip


def parse_args(argv=None) -> tuple[argparse.Namespace, list[str]]:
    argv = sys.argv[1:] if argv is None else list(argv)
    ours, train_args = (argv[: argv.index("--")], argv[argv.index("--") + 1 :]) if "--" in argv else (argv, [])
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], allow_abbrev=False,
                                     usage="%(prog)s [--json FILE] -- TRAIN.PY OPTIONS")  # fmt: skip
    parser.add_argument("--json", type=Path, help="write the phases here")
    parser.add_argument("--profile_updates", type=int, default=0, metavar="N",
                        help="run torch.profiler over N updates of the loop and print where they went (default 0: "
                             "no profile)")  # fmt: skip
    parser.add_argument(
        "--profile_after",
        type=int,
        default=60,
        metavar="K",
        help="with --profile_updates: profile from update K + 1 on (default 60)",
    )
    args = parser.parse_args(ours)
    if args.profile_updates < 0:
        parser.error(f"--profile_updates {args.profile_updates} is not allowed: give 0 (no profile) or more")
    if args.profile_after < 0:
        parser.error(f"--profile_after {args.profile_after} is not allowed: give 0 or more updates")
    if not train_args:
        parser.error("give train.py's options after --, e.g. -- --config configs/small-data.yaml --output_dir DIR")
    return args, train_args


def main(argv=None) -> int:
    args, train_args = parse_args(argv)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import torch

    from vaswani.training import loop

    torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
    print(common.describe_machine(common.machine_description(torch.get_num_threads())))
    clock = PhaseClock()
    instrument(clock)
    profiler = None
    if args.profile_updates:
        profiler = UpdateProfiler(args.profile_after, args.profile_updates)
        clock.replace(loop, "train_step", profiler.around)
    stop = threading.Event()
    sampler = threading.Thread(target=sample_memory, args=(clock, stop), daemon=True)
    sampler.start()
    start = time.perf_counter()
    try:
        final = loop.main(train_args)
    finally:
        stop.set()
        sampler.join()
        clock.unwrap()
    results = report(clock, final, time.perf_counter() - start)
    if profiler is not None:
        profiler.report()
        results["update_profile"] = profiler.summary
    common.write_json_report(args.json, args, train_args=train_args, **results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
