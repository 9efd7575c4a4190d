"""Benchmark: `vaswani serve` under load against `vaswani translate` over the same sentences in one process (issue 31).

For each backend (`--backends`: ct2-int8, the model exported with `vaswani export --quantization int8`, and torch, the
PyTorch folder), the server runs as a user starts it (`python -m vaswani.cli serve`, its own process, `--threads`
threads) and the reference runs `Translator.translate` over all the sentences in this process, as `vaswani
translate` does (length-sorted batches of its default size, the same threads: 512 source tokens per thread on a
CPU since 5f769d3, 4096 before, so the reference of earlier records was slower). Then, in rounds that alternate the
order (reference then server, server then reference, ...):

- the reference: sentences/s of one `translate` call over the test sentences;
- the server under load: `--clients` (16) client threads on loopback, each sending one sentence per
  `POST /translate` (LibreTranslate API, JSON, a kept-alive connection), for `--duration` seconds: sentences/s,
  p50 and p99 latency, and the mean batch size from /metrics (`vaswani_batch_sentences`).

Before the rounds, the unloaded latency: one client, one sentence at a time (its p50, and its p99, which the report
marks when it alone is over the p99 limit: long sentences), and beneath it the floor of any server, each sentence
decoded alone by the reference in this process, without HTTP or a queue, over the sentences that unloaded round sent
("decoding alone": where its p99 is over the limit, the long sentences' decoding alone exceeds it and no scheduling
can meet it). Targets: server throughput at least 0.5x the reference
(though requests arrive one sentence at a time), mean batch size above 4, p99 under load at most 2x the unloaded p50
plus the batching wait (`--max_wait_ms`). The load generator (16 Python threads) shares the CPU with the server, which
the reference does not have to: the report says how many cores there were.

With `--open_load F`, each round also runs an open load at F x the server's throughput of that round: requests
arrive at random (Poisson) times whatever the answers, one sentence each, sent by the `--clients` threads, and each
latency counts from the request's scheduled time (a request that waits for a free thread waits as a user would):
its p50 and p99 against the same limit, for a target restated below saturation (issue 31's note).

With `--document N`, each round also sends the first N sentences as one request (a document, `q` as a list) to each
server, after its load, and times `Translator.translate` of them in the reference's turn: the document's latency
against `vaswani translate`'s time (a server shares a document among its idle CTranslate2 workers).

With `--baseline REV`, each backend is also served by the code of another commit (`git archive REV`, run from its own
folder: e.g. the commit before issue 42's scheduler) beside this checkout's, both servers up at once and measured in
turn within each round, so that the rows "BACKEND @ REV" and "BACKEND" compare on the same machine at the same time.
Both servers get the same wait, `--max_wait_ms` (default 0, the server's default), so that the rows compare code, not
settings; `--baseline_max_wait_ms` gives the baseline another (10 for a commit before issue 42, whose server refuses
0 and had 10 as its default); each row's p99 limit counts its own wait.

What the p99 target asks, by Little's law: each client sends its next sentence when the last is answered, so the
server always holds `--clients` requests and their mean latency is clients / throughput. A p99 limit L therefore
needs a throughput of at least clients / L even for the mean (`throughput_needed`); the report prints it beside
the reference's throughput, so a target that no scheduling can meet on this machine (it would need the server to
translate faster than `vaswani translate` does) is told apart from a server that is slower than it could be.

    python benchmarks/bench_serve.py --model runs/gettext-small                          # both backends, 5 rounds
    python benchmarks/bench_serve.py --model runs/gettext-small --backends torch --rounds 1 --duration 5 --limit 50
    python benchmarks/bench_serve.py --model runs/gettext-small --backends torch --device cuda     # both sides on a GPU
    python benchmarks/bench_serve.py --model runs/gettext-small --open_load 0.5 --rounds 3 --baseline 5b45490^^
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import os
import random
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))  # `common` when run as a script
sys.path.insert(1, str(REPO_ROOT))

import common  # noqa: E402

DEFAULT_TEST_FILE = REPO_ROOT.parent / "shared" / "data" / "gettext-en-es" / "test.jsonl"
BACKENDS = ("ct2-int8", "torch")


def positive(kind):
    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
        if not value > 0:
            raise argparse.ArgumentTypeError(f"must be above 0, got {text}")
        return value

    return parse


def non_negative(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not 0 <= value < float("inf"):
        raise argparse.ArgumentTypeError(f"must be a finite number of at least 0, got {text}")
    return value


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", type=Path, required=True, help="a PyTorch model folder (written by train.py)")
    parser.add_argument("--test_file", type=Path, default=DEFAULT_TEST_FILE,
                        help="the sentences: a .jsonl of {translation: {LANG: text}} or a text file, one per line")  # fmt: skip
    parser.add_argument("--source_lang", default="en")
    parser.add_argument("--target_lang", default="es")
    parser.add_argument("--limit", type=positive(int), default=500, help="first N test sentences (default: 500)")
    parser.add_argument("--backends", type=common.choice_list(BACKENDS, "backends"), default=list(BACKENDS),
                        help="comma-separated: ct2-int8, torch (default: both)")  # fmt: skip
    parser.add_argument("--clients", type=positive(int), default=16, help="concurrent clients (default: 16)")
    parser.add_argument("--duration", type=positive(float), default=20.0, help="seconds of load per round")
    parser.add_argument("--rounds", type=positive(int), default=5, help="alternating rounds (default: 5)")
    parser.add_argument("--threads", type=positive(int), default=os.cpu_count(), help="decoding threads (both sides)")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                        help="where both sides decode (default: cpu; cuda: the PyTorch backend on a GPU)")  # fmt: skip
    parser.add_argument("--max_wait_ms", type=non_negative, default=0.0,
                        help="the server's batching wait (default: 0, the server's)")  # fmt: skip
    parser.add_argument("--max_tokens", type=positive(int),
                        help="the servers' token budget (default: each server's own)")  # fmt: skip
    parser.add_argument("--open_load", type=positive(float), metavar="F",
                        help="also an open (Poisson) load at F x each round's throughput, e.g. 0.5 (default: none)")  # fmt: skip
    parser.add_argument("--document", type=positive(int), metavar="N",
                        help="also time, in each round, one request of the first N sentences (a document: "
                             "LibreTranslate's q as a list) on each server against Translator.translate of them")  # fmt: skip
    parser.add_argument("--baseline", metavar="REV",
                        help="also serve with the code of this commit (e.g. the one before a change), side by side")  # fmt: skip
    parser.add_argument("--baseline_max_wait_ms", type=non_negative,
                        help="the --baseline server's batching wait (default: --max_wait_ms; give 10 for a commit "
                             "before issue 42, whose server refuses 0)")  # fmt: skip
    parser.add_argument("--json", type=Path, help="also write the settings and results to this file")
    args = parser.parse_args(argv)
    if args.baseline is not None and common.commit_of(args.baseline) is None:
        parser.error(f"--baseline {args.baseline}: no such commit in {REPO_ROOT}")
    if args.baseline_max_wait_ms is None:  # the same setting as this checkout's server: an A/B of the code
        args.baseline_max_wait_ms = args.max_wait_ms
    if not args.model.is_dir():
        parser.error(f"--model {args.model} is not a folder")
    args.model = args.model.resolve()  # the --baseline server runs in another folder
    if not args.test_file.is_file():
        parser.error(f"--test_file {args.test_file} is not a file")
    if args.device == "cuda" and "ct2-int8" in args.backends:
        parser.error("--device cuda runs the PyTorch backend only: add --backends torch (the ct2-int8 export is the "
                     "CPU's int8 setting)")  # fmt: skip
    return args


def read_sentences(path: Path, source_lang: str, limit: int) -> list[str]:
    """The first `limit` non-blank source sentences of a .jsonl (translation pairs) or a text file."""
    sentences = []
    with open(path, encoding="utf-8") as lines:
        for line in lines:
            text = json.loads(line)["translation"][source_lang] if path.suffix == ".jsonl" else line.strip()
            if text.strip():
                sentences.append(text.replace("\n", " "))
            if len(sentences) == limit:
                break
    return sentences


# ---------------------------------------------------------------------------------------------------------------------
# The server and its clients
# ---------------------------------------------------------------------------------------------------------------------
def server_process(folder: Path, args, log: Path, source: Path = REPO_ROOT, max_wait_ms: float | None = None):
    """`vaswani serve` for `folder` with the code of `source` (this checkout, or a `--baseline` commit's files), as
    `common.vaswani_serve` runs it: a context that yields its port."""
    wait = args.max_wait_ms if max_wait_ms is None else max_wait_ms
    arguments = ["--model", f"{args.source_lang}-{args.target_lang}={folder}", "--threads", str(args.threads),
                 "--device", args.device, "--max_wait_ms", f"{wait:g}",
                 "--max_request_seconds", "600"]  # fmt: skip
    if args.max_tokens:
        arguments += ["--max_tokens", str(args.max_tokens)]
    if args.document:  # the document in one request, whatever the server's default limits
        arguments += ["--max_request_sentences", str(args.document), "--max_request_characters", "100000000"]
    # started as a user starts it: its threads come from --threads, not from OMP_/MKL_NUM_THREADS (MKL_NUM_THREADS
    # would override CTranslate2's one thread per worker: vaswani.inference.engines.warn_mkl_threads)
    env = common.worker_env()
    env["PYTHONPATH"] = os.pathsep.join([str(source), env["PYTHONPATH"]])  # its code first
    return common.vaswani_serve(arguments, log, cwd=source, env=env)


def translate_one(connection: http.client.HTTPConnection, text: str | list[str], args) -> None:
    """One `POST /translate` of one sentence, or of a list of them as one request (LibreTranslate API, JSON), on a
    kept-alive connection; anything but a 200 stops the benchmark."""
    body = json.dumps({"q": text, "source": args.source_lang, "target": args.target_lang})
    connection.request("POST", "/translate", body=body, headers={"Content-Type": "application/json"})
    response = connection.getresponse()
    response.read()
    if response.status != 200:
        raise SystemExit(f"the server answered {response.status}")


def translate_document(port: int, sentences: list[str], args) -> float:
    """Seconds of one `POST /translate` of all `sentences` as one request (LibreTranslate's `q` as a list)."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    try:
        return common.time_call(lambda: translate_one(connection, sentences, args))
    finally:
        connection.close()


def percentile_99(done: list[float]) -> float:
    """The 99th percentile of sorted latencies (the value 99% of them do not exceed)."""
    return done[min(len(done) - 1, int(0.99 * len(done)))]


def latency_percentiles(latencies) -> dict:
    """{"p50", "p99"} of `latencies` (any order)."""
    done = sorted(latencies)
    return {"p50": statistics.median(done), "p99": percentile_99(done)}


def client_loop(port: int, sentences: list[str], args, start: int, stop_at: float, latencies: list[float]) -> None:
    """One client: sentence after sentence (from `start`), one per request, until `stop_at`."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    index = start
    while time.monotonic() < stop_at:
        sent = time.monotonic()
        translate_one(connection, sentences[index % len(sentences)], args)
        latencies.append(time.monotonic() - sent)
        index += 1
    connection.close()


def batch_totals(port: int) -> tuple[float, float]:
    """(sentences, batches) decoded so far, from /metrics."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    connection.request("GET", "/metrics")
    values = {}
    for line in connection.getresponse().read().decode().splitlines():
        if line.startswith("vaswani_batch_sentences_"):
            name, value = line.split(" ")
            values[name] = float(value)
    return values["vaswani_batch_sentences_sum"], values["vaswani_batch_sentences_count"]


def load_round(port: int, sentences: list[str], args, clients: int, duration: float) -> dict:
    """`clients` clients for `duration` seconds: sentences/s, latencies and the mean batch size."""
    latencies: list[list[float]] = [[] for _ in range(clients)]
    before = batch_totals(port)
    stop_at = time.monotonic() + duration
    started = time.monotonic()
    threads = [threading.Thread(target=client_loop, args=(port, sentences, args, i * len(sentences) // clients,
                                                          stop_at, latencies[i])) for i in range(clients)]  # fmt: skip
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.monotonic() - started
    after = batch_totals(port)
    done = [latency for per_client in latencies for latency in per_client]
    batches = after[1] - before[1]
    return {
        "sentences_per_second": len(done) / elapsed,
        **latency_percentiles(done),
        "mean_batch_size": (after[0] - before[0]) / batches if batches else float("nan"),
        "requests": len(done),
    }


def arrival_times(rate: float, duration: float, seed: int) -> list[float]:
    """Poisson arrivals: the send times (seconds from the start, below `duration`) of requests at `rate` per second."""
    rng, times, now = random.Random(seed), [], 0.0
    while True:
        now += rng.expovariate(rate)
        if now >= duration:
            return times
        times.append(now)


def open_round(port: int, sentences: list[str], args, rate: float, duration: float, seed: int) -> dict:
    """An open load: requests at `rate` per second at Poisson times, sent by `args.clients` threads (each takes the
    next scheduled request when it is free); each latency counts from the scheduled time."""
    schedule = iter(enumerate(arrival_times(rate, duration, seed)))
    lock, latencies = threading.Lock(), []
    start = time.monotonic() + 0.05

    def sender() -> None:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
        while True:
            with lock:
                index, at = next(schedule, (None, None))
            if index is None:
                break
            time.sleep(max(0.0, start + at - time.monotonic()))
            translate_one(connection, sentences[index % len(sentences)], args)
            with lock:
                latencies.append(time.monotonic() - (start + at))
        connection.close()

    threads = [threading.Thread(target=sender) for _ in range(args.clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return {"rate": rate, "requests": len(latencies), **latency_percentiles(latencies)}


# ---------------------------------------------------------------------------------------------------------------------
# One backend
# ---------------------------------------------------------------------------------------------------------------------
def decoding_alone(
    translate: Callable[[list[str]], object], sentences: list[str], clock: Callable[[], float] = time.perf_counter
) -> dict:
    """The floor under any server's latency: each sentence decoded alone by `translate` (the reference's, in this
    process: no HTTP, no queue, no other request), p50 and p99 over the sentences. A server's unloaded p99 cannot be
    below this p99; where it is over the p99 limit, no scheduling meets the limit (the long sentences' decoding
    alone exceeds it)."""
    seconds = []
    for sentence in sentences:
        started = clock()
        translate([sentence])
        seconds.append(clock() - started)
    return latency_percentiles(seconds)


def backend_folder(backend: str, args, scratch: Path) -> Path:
    if backend == "torch":
        return args.model
    from vaswani.export.ctranslate2 import export_ctranslate2

    return export_ctranslate2(args.model, scratch / "ct2-int8", quantization="int8")


def run_backend(backend: str, sentences: list[str], args, scratch: Path, servers: dict[str, tuple[Path, float]],
                ) -> dict[str, dict]:  # fmt: skip
    """Each of `servers` (a label: its code's folder and its batching wait; all up at once) and the reference, in
    rounds that rotate their order; the results of each server by its label."""
    import torch
    from transformers.utils import logging as hf_logging

    from vaswani.inference.translator import Translator

    torch.set_num_threads(args.threads)
    hf_logging.disable_progress_bar()
    folder = backend_folder(backend, args, scratch)
    reference = Translator(folder, device=args.device)
    reference.translate(sentences[:16])  # warm-up
    results = {label: {"max_wait_ms": wait, "rounds": []} for label, (_, wait) in servers.items()}
    with contextlib.ExitStack() as stack:
        ports = {label: stack.enter_context(server_process(folder, args, scratch / f"server-{backend}-{index}.log",
                                                           source, wait))
                 for index, (label, (source, wait)) in enumerate(servers.items())}  # fmt: skip
        for label, port in ports.items():
            load_round(port, sentences, args, args.clients, min(2.0, args.duration))  # warm-up
            unloaded = load_round(port, sentences, args, clients=1, duration=min(10.0, args.duration))
            # the floor over the same sentences: the first ones, as many as that round sent (a slow model's round
            # ends before it has sent them all)
            alone = decoding_alone(reference.translate, sentences[: min(len(sentences), unloaded["requests"])])
            results[label].update(unloaded_p50=unloaded["p50"], unloaded_p99=unloaded["p99"],
                                  decoding_alone_p50=alone["p50"], decoding_alone_p99=alone["p99"])  # fmt: skip
        sides = ["reference", *ports]
        for index in range(args.rounds):
            measured = {label: {} for label in ports}
            for side in sides[index % len(sides) :] + sides[: index % len(sides)]:
                if side == "reference":
                    seconds = common.time_call(lambda: reference.translate(sentences))
                    if args.document:
                        document = common.time_call(lambda: reference.translate(sentences[: args.document]))
                    for result in measured.values():
                        result["reference_sentences_per_second"] = len(sentences) / seconds
                        if args.document:
                            result["document_reference_seconds"] = document
                else:
                    measured[side].update(load_round(ports[side], sentences, args, args.clients, args.duration))
                    if args.document:
                        measured[side]["document_seconds"] = translate_document(
                            ports[side], sentences[: args.document], args)  # fmt: skip
            if args.open_load:
                for label, result in measured.items():
                    rate = args.open_load * result["sentences_per_second"]
                    result["open"] = open_round(ports[label], sentences, args, rate, args.duration, seed=index)
            for label, result in measured.items():
                results[label]["rounds"].append(result)
    return results


def throughput_needed(clients: int, latency_limit: float) -> float:
    """Sentences/s a server must sustain for `clients` closed-loop clients (each waiting for its answer before it
    sends again) to see a mean latency of at most `latency_limit` seconds: Little's law, latency = clients /
    throughput. A p99 limit needs at least this much (the mean is below the p99)."""
    return clients / latency_limit


def report(backend: str, result: dict, args) -> list[str]:
    rounds = result["rounds"]
    ratios = [r["sentences_per_second"] / r["reference_sentences_per_second"] for r in rounds]
    batch_sizes = [r["mean_batch_size"] for r in rounds]
    p99_limit = 2 * result["unloaded_p50"] + result.get("max_wait_ms", args.max_wait_ms) / 1000
    p99s = [r["p99"] for r in rounds]
    median = statistics.median
    return [
        backend,
        f"{median(r['reference_sentences_per_second'] for r in rounds):.1f}",
        f"{median(r['sentences_per_second'] for r in rounds):.1f}",
        f"{median(ratios):.2f} ({min(ratios):.2f}-{max(ratios):.2f}) {common.verdict(ratios, 0.5)}",
        f"{median(batch_sizes):.1f} {common.verdict(batch_sizes, 4.0 + 1e-9)}",
        f"{median(r['p50'] for r in rounds) * 1000:.0f}",
        f"{median(p99s) * 1000:.0f} (limit {p99_limit * 1000:.0f}) {common.verdict(p99s, p99_limit, False)}",
        f"{result['unloaded_p50'] * 1000:.0f}",
        f"{result['unloaded_p99'] * 1000:.0f}"
        + (" (over the p99 limit)" if result["unloaded_p99"] > p99_limit else ""),
        decoding_alone_cell(result, p99_limit),
        *([open_load_cell(rounds, p99_limit)] if args.open_load else []),
        *([document_cell(rounds)] if args.document else []),
        f"{throughput_needed(args.clients, p99_limit):.0f} "
        f"({throughput_needed(args.clients, p99_limit) / median(r['reference_sentences_per_second'] for r in rounds):.1f}x "
        "translate)",
    ]


def decoding_alone_cell(result: dict, p99_limit: float) -> str:
    """p50 / p99 of each sentence decoded alone in this process, marked where that p99 alone is over the limit ("-"
    for a result without them, so that the row keeps the header's columns)."""
    if "decoding_alone_p99" not in result:
        return "-"
    return (f"{result['decoding_alone_p50'] * 1000:.1f} / {result['decoding_alone_p99'] * 1000:.1f}"
            + (" (over the p99 limit)" if result["decoding_alone_p99"] > p99_limit else ""))  # fmt: skip


def open_load_cell(rounds: list[dict], p99_limit: float) -> str:
    """p50 / p99 of the open-load rounds (medians), the p99 against the limit, and the rate they ran at (each server's
    own: F x its closed-loop throughput, so that rows of two servers of different throughputs ran at different
    rates)."""
    p99s = [r["open"]["p99"] for r in rounds]
    return (f"{statistics.median(r['open']['p50'] for r in rounds) * 1000:.0f} / "
            f"{statistics.median(p99s) * 1000:.0f} {common.verdict(p99s, p99_limit, False)} at "
            f"{statistics.median(r['open']['rate'] for r in rounds):.0f} req/s")  # fmt: skip


def document_cell(rounds: list[dict]) -> str:
    """The document's seconds on the server and in `Translator.translate` (medians), and the ratio per round."""
    ratios = [r["document_seconds"] / r["document_reference_seconds"] for r in rounds]
    return (f"{statistics.median(r['document_seconds'] for r in rounds):.2f} / "
            f"{statistics.median(r['document_reference_seconds'] for r in rounds):.2f} = "
            f"{statistics.median(ratios):.2f}x ({min(ratios):.2f}-{max(ratios):.2f})")  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    sentences = read_sentences(args.test_file, args.source_lang, args.limit)
    if not sentences:
        print(f"error: --test_file {args.test_file} has no sentence to send (every line is blank): give a file with "
              "text", file=sys.stderr)  # fmt: skip
        raise SystemExit(2)
    machine = common.machine_description(args.threads)
    print(common.describe_machine(machine))
    print(f"{len(sentences)} sentences, {args.clients} clients x {args.duration:g} s, {args.rounds} rounds; the "
          f"clients share the {machine['cores_available']} cores with the server (the reference does not)")  # fmt: skip
    results, rows = {}, []
    with tempfile.TemporaryDirectory(prefix="bench-serve-") as scratch:
        servers = {"": (REPO_ROOT, args.max_wait_ms)}
        if args.baseline is not None:
            baseline = common.source_tree(args.baseline, Path(scratch) / "baseline")
            servers = {f" @ {common.commit_of(args.baseline)}": (baseline, args.baseline_max_wait_ms), **servers}
        print(
            f"this checkout: {common.commit_of('HEAD')}"
            + (" (with changes not committed)" if common.uncommitted_changes() else "")
        )
        for backend in args.backends:
            for label, result in run_backend(backend, sentences, args, Path(scratch), servers).items():
                results[backend + label] = result
                rows.append(report(backend + label, result, args))
    headers = ["backend", "translate sent/s", "serve sent/s", "ratio (>= 0.5)", "mean batch (> 4)", "p50 ms",
               "p99 ms", "unloaded p50 ms", "unloaded p99 ms", "decoding alone p50 / p99 ms"]  # fmt: skip
    if args.open_load:
        headers.append(f"open load {args.open_load:g}x: p50 / p99 ms at its rate")
    if args.document:
        headers.append(f"document of {args.document}: serve / translate s")
    headers.append("sent/s the p99 limit needs")
    print(common.format_table(headers, rows))
    print(
        "sent/s the p99 limit needs: clients / limit (Little's law: closed-loop clients see a mean latency of "
        "clients / throughput); above 1x translate, no server on this machine can meet the p99 target"
    )
    print(
        "decoding alone: each sentence decoded by itself in this process (no HTTP, no queue): a server's latency "
        "cannot be below it; a p99 over the limit there means no scheduling meets the limit"
    )
    common.write_json_report(args.json, args, machine=machine, results=results)


if __name__ == "__main__":
    main()
