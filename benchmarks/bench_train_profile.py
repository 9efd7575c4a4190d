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
        original = getattr(owner, attribute)

        @functools.wraps(original)
        def timed(*args, **kwargs):
            with self.phase(name() if callable(name) else name, nested):
                return original(*args, **kwargs)

        self.replaced.append((owner, attribute, vars(owner).get(attribute)))
        setattr(owner, attribute, timed)

    def unwrap(self) -> None:
        """Put back what `wrap` replaced (a run in a test's process leaves the library as it found it: a timed
        `forward` would otherwise reach a later `torch.compile`, which cannot trace the clock)."""
        for owner, attribute, own in reversed(self.replaced):
            if own is None:  # inherited: the class's own entry goes, the parent's shows again
                delattr(owner, attribute)
            else:
                setattr(owner, attribute, own)
        self.replaced.clear()


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
    args = parser.parse_args(ours)
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
    common.write_json_report(args.json, args, train_args=train_args, **results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
