"""Fault injection: nothing lost, nothing executed (issue 11). Two parts, each a report of figures against targets.

Kills. A real `train.py` run (a tiny model on the built-in demo sentences, a few hundred updates, a checkpoint every
few updates, the last checkpoints averaged into the final model) is killed with SIGKILL at `--kills` moments drawn
with a seeded RNG, and after every kill started again with `--resume_from_checkpoint latest` (or, if no checkpoint
was complete yet, started anew with `--overwrite_output_dir`). The moments cover the whole run:

- `startup`: a random time after the start of an invocation, before training goes on (imports, data, `load_state`);
- `training`: a random time after a checkpoint of at least step S is complete (S spreads over the run);
- `checkpoint-save`: a random time after a temporary checkpoint folder (`.tmp-step-N`) appears, within about one
  save's duration, so inside the save, its publication or the deletion of old checkpoints;
- `final-save`: a random time after the final model starts to be written (a new or rewritten file of the final
  folder, or a new entry next to it), within about the final save's duration.

A kill meant for a save must land inside it: it must leave the save's temporary entries behind (`.tmp-step-N`, the
final save's staged folder, ...). One that came before the save or after its last rename is still a kill survived,
but its moment is tried again in the next invocation, earlier in the window, up to 3 times; a moment that never
lands is reported (target: every save kill inside its save).

After each kill every complete checkpoint is checked (each file readable: safetensors loads, JSON parses, zip
archives pass their CRC check) and so is the final folder (its weights and results are there together and readable,
or neither). When all kills are done the run is resumed to the end and its final weights are compared tensor by
tensor, bit for bit, with an uninterrupted run of the same options (single thread, CPU); so are its training losses.

Bad inputs. A corpus of named cases (`CASES`), each building a folder with one malformed input for one command (train.py,
`python -m tokenization train`, every `vaswani` subcommand) and running that command in a subprocess. Outcomes:
`clear` (exit status 2, a line `error: ...` or argparse's `PROG: error: ...` on stderr, no traceback), `traceback`
(a Python traceback on stderr) or `other` (any other exit, e.g. a malformed input accepted with status 0). Every file
of the case's folder is hashed before and after: a file whose content is found nowhere in the folder afterwards (it
vanished or changed) is lost. Pickle payloads are planted wherever a pickle could be loaded (every file of a
checkpoint, `.bin`/`.pkl` files next to model weights, a model folder's remote code); a payload that runs creates a
marker file. `vaswani push` runs with `HfApi.create_repo`/`create_commit` replaced by recorders, so nothing leaves
the machine; the recorded files are checked for the case folder's absolute path (a local path published).

Targets (printed with MET/MISSED): 100% of kills survived with bit-identical final weights; 0 tracebacks; 0 payloads
executed; 0 files lost; every bad input a clear error.

    python benchmarks/bench_faults.py                       # 20 kills + all bad inputs (~15 minutes on 2 cores)
    python benchmarks/bench_faults.py --only inputs --keep  # keep the case folders to look at them

tests/test_faults.py imports `CASES`, `run_case` and `run_kills` and runs a fast subset of both parts.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import hashlib
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
import zipfile
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TRAIN_PY = REPO / "train.py"

# The tiny model and data options of tests/training/test_loop.py: a run of a few hundred updates takes well under a minute.
TINY_ARCHITECTURE = [
    "--vocab_size", "400", "--d_model", "32", "--encoder_layers", "2", "--decoder_layers", "2",
    "--encoder_attention_heads", "2", "--decoder_attention_heads", "2", "--encoder_ffn_dim", "64",
    "--decoder_ffn_dim", "64",
]  # fmt: skip
TINY_OPTIONS = [
    "--max_tokens", "600", "--max_source_length", "48", "--max_target_length", "48", "--warmup_steps", "4",
    "--eval_steps", "0", "--logging_steps", "1", "--max_eval_samples", "12", "--num_beams", "2",
    "--num_examples", "0", "--report_to", "none", "--checkpoint_minutes", "60",
]  # fmt: skip
TINY_TRAIN = TINY_ARCHITECTURE + TINY_OPTIONS
# Every state a resume restores: dropout RNG, LayerDrop generators, scheduled DropHead, the budget's learning-rate
# schedule (warmup_stable_decay, its decay over the second half) and the weights' moving average, which is the final
# model (so the comparison of final weights covers it). No test set and 4 validation sentences: the final evaluation
# (beam search with an untrained model) would otherwise take most of the final phase.
KILL_RUN_EXTRA = ["--encoder_layerdrop", "0.2", "--drophead_p_start", "0.2", "--drophead_p_end", "0.1",
                  "--max_eval_samples", "4", "--lr_scheduler", "warmup_stable_decay", "--learning_rate", "1e-3",
                  "--decay_fraction", "0.5", "--ema_decay", "0.8", "--final_model", "ema"]  # fmt: skip
# Files train.py writes at the top of its output folder (a successful resume may rewrite them).
RUN_OUTPUT_FILES = (
    "metrics.jsonl", "results.json", "run_args.json", "README.md", "config.json", "generation_config.json",
    "model.safetensors", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
    "configuration_vaswani.py", "modeling_vaswani.py", "generation_vaswani.py", "pipeline_vaswani.py",
)  # fmt: skip
PAYLOAD_MARKER = "PAYLOAD_RAN"
POLL_SECONDS = 0.002


# ----------------------------------------------------------------------------------------------------------------
# Subprocesses
# ----------------------------------------------------------------------------------------------------------------
def child_env(workdir: Path) -> dict[str, str]:
    """Offline, one thread, this checkout's packages first, caches (datasets, remote code) inside `workdir`."""
    env = {key: value for key, value in os.environ.items() if key not in {"HF_MODULES_CACHE"}}
    env.update(
        HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1",
        HF_DATASETS_CACHE=str(workdir / "cache" / "datasets"), HF_HOME=str(workdir / "cache" / "hf_home"),
        PYTHONPATH=os.pathsep.join([str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])]),
        PYTHONDONTWRITEBYTECODE="1",
    )  # fmt: skip
    return env


# `vaswani push` with the Hub replaced by recorders: the files it would upload are written under $PUSH_RECORD.
PUSH_STUB = textwrap.dedent(
    """
    import os, sys
    from pathlib import Path
    from huggingface_hub import HfApi, RepoUrl

    record = Path(os.environ["PUSH_RECORD"])

    def create_repo(api, repo_id, **kwargs):
        return RepoUrl(f"https://huggingface.co/{repo_id if '/' in repo_id else 'me/' + repo_id}")

    def create_commit(api, repo_id, operations, **kwargs):
        for operation in operations:
            target = record / operation.path_in_repo
            target.parent.mkdir(parents=True, exist_ok=True)
            with operation.as_file() as stream:
                target.write_bytes(stream.read())
        return f"https://huggingface.co/{repo_id}/commit/0"

    HfApi.create_repo, HfApi.create_commit = create_repo, create_commit
    from vaswani.cli import main
    sys.exit(main(["push", *sys.argv[1:]]))
    """
)

# How each command is started: `python ARGV...` in a fresh interpreter (--exec), or as __main__ in a process forked
# from a server that has imported the third-party libraries (the default; see `Launcher`).
COMMANDS = {
    "train": [sys.executable, str(TRAIN_PY)],
    "tokenization": [sys.executable, "-m", "tokenization", "train"],
    "translate": [sys.executable, "-m", "vaswani.cli", "translate"],
    "average": [sys.executable, "-m", "vaswani.cli", "average"],
    "prune": [sys.executable, "-m", "vaswani.cli", "prune"],
    "card": [sys.executable, "-m", "vaswani.cli", "card"],
    "export": [sys.executable, "-m", "vaswani.cli", "export"],
    "push": [sys.executable, "-c", PUSH_STUB],
}


# ----------------------------------------------------------------------------------------------------------------
# Shared inputs: demo data, a tokenizer, a tiny model folder, a finished tiny run
# ----------------------------------------------------------------------------------------------------------------
class Fixtures:
    """The good inputs the cases damage, built once per work folder (lazily: a case builds what it uses)."""

    def __init__(self, root: Path, launcher: Launcher | None = None):
        self.root = root
        self.root.mkdir(parents=True, exist_ok=True)
        self.launcher = launcher or Launcher(root)
        self._run: Path | None = None
        self.run_options = [*self.data_args(), *TINY_TRAIN, "--max_train_steps", "2", "--checkpoint_steps", "1",
                            "--average_checkpoints", "2"]  # fmt: skip

    @property
    def data(self) -> Path:
        folder = self.root / "data"
        if not (folder / "train.jsonl").is_file():
            from vaswani.data.demo import write_demo_files

            write_demo_files(folder, num_train=240, num_validation=16, num_test=16)
            # The same sentences as two aligned text files (for the tokenizer and the PATH.en / PATH.de format).
            rows = [json.loads(line) for line in (folder / "train.jsonl").read_text(encoding="utf-8").splitlines()]
            for lang in ("en", "de"):
                text = "".join(row["translation"][lang] + "\n" for row in rows)
                (folder / f"train.{lang}").write_text(text, encoding="utf-8")
        return folder

    def data_args(self) -> list[str]:
        return [f"--{split}_file={self.data / f'{split}.jsonl'}" for split in ("train", "validation", "test")]

    @property
    def tokenizer(self) -> Path:
        folder = self.root / "tokenizer"
        if not (folder / "tokenizer.json").is_file():
            from tokenization import train_bpe_tokenizer

            files = [self.data / "train.en", self.data / "train.de"]
            tokenizer = train_bpe_tokenizer(files=files, vocab_size=400, min_frequency=2, model_max_length=64)
            tokenizer.save_pretrained(folder)
        return folder

    def _save_model(self, folder: Path, vocab_delta: int = 0, with_tokenizer: bool = True) -> Path:
        if (folder / "config.json").is_file():
            return folder
        import torch

        import modeling_vaswani
        from tokenization import load_tokenizer

        tokenizer = load_tokenizer(self.tokenizer)
        torch.manual_seed(0)
        config = modeling_vaswani.VaswaniConfig(
            vocab_size=len(tokenizer) + vocab_delta, d_model=16, encoder_layers=2, decoder_layers=2,
            encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=32, decoder_ffn_dim=32,
            max_position_embeddings=64, pad_token_id=tokenizer.pad_token_id, bos_token_id=tokenizer.bos_token_id,
            eos_token_id=tokenizer.eos_token_id, decoder_start_token_id=tokenizer.bos_token_id,
        )  # fmt: skip
        modeling_vaswani.VaswaniForConditionalGeneration(config).save_pretrained(folder)
        if with_tokenizer:
            tokenizer.save_pretrained(folder)
        return folder

    @property
    def model(self) -> Path:
        """A complete model folder: a tiny untrained model (2 + 2 layers, d_model 16) and its tokenizer."""
        return self._save_model(self.root / "model")

    @property
    def small_vocab_model(self) -> Path:
        """The same model with 20 fewer embeddings than the tokenizer has tokens (saved without a tokenizer)."""
        return self._save_model(self.root / "model-small-vocab", vocab_delta=-20, with_tokenizer=False)

    @property
    def run(self) -> Path:
        """A finished train.py run: 2 updates, checkpoints at 1 and 2, the final model (their average)."""
        if self._run is None:
            folder = self.root / "run"
            if not (folder / "results.json").is_file():
                shutil.rmtree(folder, ignore_errors=True)
                result = self.launcher.run("train", [*self.run_options, "--output_dir", str(folder)], cwd=self.root)
                if result.returncode != 0:
                    raise RuntimeError(f"the fixture run failed:\n{result.stderr[-3000:]}")
            self._run = folder
        return self._run

    def use_run(self, folder: Path, options: list[str]) -> None:
        """Take a finished run with at least two checkpoints (e.g. a kill part's reference), made with `options`
        (all but --output_dir), as the run fixture."""
        self._run, self.run_options = folder, list(options)

    def latest_checkpoint(self) -> Path:
        return sorted((self.run / "checkpoints").glob("step-*"))[-1]


# Third-party modules a forked command finds already imported; our own packages (modeling_vaswani, tokenization,
# vaswani, train.py) are imported afresh by every command, as in a new interpreter.
PRELOAD = ("torch", "transformers", "transformers.modeling_utils", "transformers.generation", "datasets", "accelerate",
           "safetensors.torch", "tokenizers", "huggingface_hub", "yaml", "sacrebleu", "tqdm")  # fmt: skip
OWN_PACKAGES = {"modeling_vaswani", "tokenization", "vaswani", "train", "bench_faults", "common"}


class Launcher:
    """Starts commands, as `subprocess.Popen` of a fresh interpreter (`fork=False`) or, by default, as processes
    forked from a `multiprocessing` fork server that imported `PRELOAD` (seconds of imports saved per command on a
    busy machine; each command still runs in its own process with its own exit status, stdin, stdout and stderr,
    and can be killed). The server is started with the environment of `child_env(workdir)`: libraries read some of
    it (caches, offline mode, threads) at import."""

    def __init__(self, workdir: Path, fork: bool = True):
        self.workdir, self.fork, self.context = workdir, fork, None
        if fork:
            import multiprocessing

            self.context = multiprocessing.get_context("forkserver")
            self.context.set_forkserver_preload(list(PRELOAD))
            saved, path = dict(os.environ), list(sys.path)
            os.environ.clear()
            os.environ.update(child_env(workdir))
            sys.path.insert(0, str(REPO))
            try:  # the server starts with the first process, taking this environment and sys.path
                process = self.context.Process(target=_noop)
                process.start()
                process.join()
            finally:
                os.environ.clear()
                os.environ.update(saved)
                sys.path[:] = path

    def start(self, command: str, args: list[str], cwd: Path, stdin: bytes | None, stdout: Path, stderr: Path,
              env: dict | None = None) -> Started:  # fmt: skip
        environment = {**child_env(self.workdir), **(env or {})}
        if not self.fork:
            with open(stdout, "wb") as out, open(stderr, "wb") as err:
                process = subprocess.Popen([*COMMANDS[command], *args], cwd=cwd, env=environment, stdout=out,
                                           stderr=err, stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL)  # fmt: skip
            if stdin is not None:
                process.stdin.write(stdin)
                process.stdin.close()
            return Started(process, stdout, stderr)
        stdin_path = stdout.with_name(stdout.name + ".stdin")
        stdin_path.write_bytes(stdin or b"")
        process = self.context.Process(
            target=_run_forked, args=(command, args, str(cwd), environment, str(stdin_path), str(stdout), str(stderr))
        )
        process.start()
        return Started(process, stdout, stderr)

    def run(self, command: str, args: list[str], *, cwd: Path, stdin: str | bytes | None = None,
            env: dict | None = None, timeout: float = 600) -> subprocess.CompletedProcess:  # fmt: skip
        """Run a command to its end; stdout and stderr come back as text (stdin text goes in as UTF-8)."""
        logs = Path(tempfile.mkdtemp(prefix="command-", dir=self.workdir))
        started = self.start(command, args, cwd, stdin.encode() if isinstance(stdin, str) else stdin,
                             logs / "stdout", logs / "stderr", env)  # fmt: skip
        try:
            status = started.wait(timeout)
        except subprocess.TimeoutExpired:
            started.kill()
            raise
        finally:
            out, err = started.output()
            shutil.rmtree(logs, ignore_errors=True)
        return subprocess.CompletedProcess([command, *args], status, out, err)


def _noop() -> None:
    pass


def _run_forked(command, args, cwd, env, stdin_path, stdout_path, stderr_path) -> None:
    """The body of a forked command: its files as fds 0-2, its environment and folder, then it runs as __main__;
    an uncaught exception prints its traceback (as the interpreter would) and exits with status 1."""
    import runpy
    import traceback

    for module in [m for m in sys.modules if m.split(".")[0] in OWN_PACKAGES]:
        del sys.modules[module]
    for fd, path, flags in ((0, stdin_path, os.O_RDONLY), (1, stdout_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC),
                            (2, stderr_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)):  # fmt: skip
        opened = os.open(path, flags, 0o644)
        os.dup2(opened, fd)
        os.close(opened)
    sys.stdin = open(0, closefd=False)  # noqa: SIM115  (multiprocessing gave the child /dev/null)
    os.chdir(cwd)
    os.environ.clear()
    os.environ.update(env)
    sys.path.insert(0, str(REPO))
    status = 0
    try:
        if command == "train":
            sys.argv = [str(TRAIN_PY), *args]
            runpy.run_path(str(TRAIN_PY), run_name="__main__")
        elif command == "push":
            sys.argv = ["-c", *args]
            exec(compile(PUSH_STUB, "<push stub>", "exec"), {"__name__": "__main__"})
        else:
            module, *leading = COMMANDS[command][2:]
            sys.argv = [module, *leading, *args]
            runpy.run_module(module, run_name="__main__", alter_sys=True)
    except SystemExit as exit_:
        if isinstance(exit_.code, int) or exit_.code is None:
            status = exit_.code or 0
        else:
            print(exit_.code, file=sys.stderr)
            status = 1
    except BaseException:
        traceback.print_exc()
        status = 1
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(OSError, ValueError):
                stream.flush()
    os._exit(status)


class Started:
    """A started command (a Popen or a multiprocessing Process): poll, wait, kill, and its output files."""

    def __init__(self, process, stdout: Path, stderr: Path):
        self.process, self.stdout, self.stderr = process, stdout, stderr
        self.start = time.monotonic()

    def poll(self) -> int | None:
        if isinstance(self.process, subprocess.Popen):
            return self.process.poll()
        return self.process.exitcode

    def alive(self) -> bool:
        return self.poll() is None

    def wait(self, timeout: float) -> int:
        if isinstance(self.process, subprocess.Popen):
            return self.process.wait(timeout)
        self.process.join(timeout)
        if self.process.exitcode is None:
            raise subprocess.TimeoutExpired(str(self.process), timeout)
        return self.process.exitcode

    def kill(self) -> bool:
        """SIGKILL; whether the process was still running."""
        if not self.alive():
            return False
        os.kill(self.process.pid, signal.SIGKILL)
        self.wait(60)
        return True

    def output(self) -> tuple[str, str]:
        return tuple(p.read_bytes().decode(errors="replace") if p.exists() else "" for p in (self.stdout, self.stderr))

    def tail(self, lines: int = 12) -> str:
        text = "\n".join(self.output())
        return "\n".join(text.strip().splitlines()[-lines:])


# ----------------------------------------------------------------------------------------------------------------
# Planting payloads and damage
# ----------------------------------------------------------------------------------------------------------------
class _Payload:
    """Unpickling this calls `open(marker, "w")`: the marker file shows that a pickle was executed."""

    def __init__(self, marker: Path):
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


def plant_pickle(path: Path, marker: Path) -> None:
    """Replace `path` with a pickle payload: torch's zip format for .bin/.pt/.pkl/.pth (what torch.load reads),
    a raw pickle for any other name."""
    import pickle

    path.unlink(missing_ok=True)
    if path.suffix in {".bin", ".pt", ".pkl", ".pth"}:
        import torch

        torch.save({"state": _Payload(marker)}, path)
    else:
        path.write_bytes(pickle.dumps(_Payload(marker), protocol=2))


def plant_remote_code(folder: Path, marker: Path) -> None:
    """Make `folder` a model of a foreign type whose remote code (run on import) creates `marker`."""
    code = f"open({str(marker)!r}, 'w').close()\nfrom transformers import PretrainedConfig\n"
    (folder / "configuration_evil.py").write_text(
        code + "class EvilConfig(PretrainedConfig):\n    model_type = 'evil'\n"
    )
    (folder / "modeling_evil.py").write_text(code + "from transformers import PreTrainedModel\nclass EvilModel(PreTrainedModel):\n    config_class = None\n")  # fmt: skip
    config = json.loads((folder / "config.json").read_text())
    config.update(model_type="evil", architectures=["EvilModel"], auto_map={
        "AutoConfig": "configuration_evil.EvilConfig", "AutoModelForSeq2SeqLM": "modeling_evil.EvilModel"})  # fmt: skip
    (folder / "config.json").write_text(json.dumps(config))


def edit_json(path: Path, **changes) -> None:
    data = json.loads(path.read_text(encoding="utf-8"))
    data.update(changes)
    path.write_text(json.dumps(data, indent=2), encoding="utf-8")


def truncate(path: Path, keep: float = 0.5) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * keep)])


def garbage(path: Path, size: int = 4096) -> None:
    path.write_bytes(random.Random(path.name).randbytes(size))


def copy_fixture(source: Path, target: Path) -> Path:
    shutil.copytree(source, target, symlinks=True)
    return target


# ----------------------------------------------------------------------------------------------------------------
# The corpus of bad inputs
# ----------------------------------------------------------------------------------------------------------------
@dataclasses.dataclass
class Probe:
    """One command to run in the case folder. `may_change`: files (relative paths, glob patterns) the command may
    legitimately rewrite when it succeeds; `check` looks at the folder afterwards and returns a problem or None."""

    command: str
    args: list[str]
    stdin: str | None = None
    may_change: tuple[str, ...] = ()
    check: Callable[[Path], str | None] | None = None


@dataclasses.dataclass
class Case:
    """A named malformed input: `build(folder, fixtures)` writes it into `folder` and returns the Probe to run.
    `expect`: "error" (a clear error), "ok" (valid input: must succeed) or "any" (success or a clear error: what
    matters is that nothing runs and nothing is lost). `extended` cases repeat a kind of fault already covered for
    the same command (another path to the same check); the benchmark runs them with --all_cases."""

    name: str
    command: str
    fault: str
    build: Callable[[Path, Fixtures], Probe]
    expect: str = "error"
    extended: bool = False


CASES: list[Case] = []


def case(name: str, command: str, fault: str, expect: str = "error", extended: bool = False):
    def register(build):
        CASES.append(Case(name, command, fault, build, expect, extended))
        return build

    return register


# -- Damaged copies of the fixture model: the same damage for every command that reads a model folder ------------
def damaged_model(folder: Path, fx: Fixtures, damage: Callable[[Path], None], source: Path | None = None) -> Path:
    model = copy_fixture(source or fx.model, folder / "model")
    damage(model)
    return model


def _pickle_weights_only(folder: Path, model: Path) -> None:
    (model / "model.safetensors").unlink()
    plant_pickle(model / "pytorch_model.bin", folder / PAYLOAD_MARKER)


# name: (fault, damage(case folder, the copied model folder))
MODEL_DAMAGES: dict[str, tuple[str, Callable[[Path, Path], None]]] = {
    "truncated-weights": ("weights", lambda folder, m: truncate(m / "model.safetensors")),
    "garbage-weights": ("weights", lambda folder, m: garbage(m / "model.safetensors")),
    "pickle-weights-only": ("pickle", _pickle_weights_only),
    "config-is-a-list": ("config", lambda folder, m: (m / "config.json").write_text("[]")),
    "config-more-layers": ("config", lambda folder, m: edit_json(m / "config.json", encoder_layers=5)),
    "tokenizer-empty-json": ("tokenizer", lambda folder, m: (m / "tokenizer.json").write_text("{}")),
    "tokenizer-special-ids-disagree": (
        "tokenizer", lambda folder, m: edit_json(m / "config.json", pad_token_id=2, eos_token_id=0)
    ),
}  # fmt: skip


def damaged_model_cases(
    command: str,
    probe: Callable[[Path, Fixtures, Path], Probe],
    damages: list[str],
    extended: tuple[str, ...] = (),
    prefix: str = "",
) -> None:
    """Register the case `{command}-{prefix}{damage}` for each of `damages` (names of `MODEL_DAMAGES`):
    `probe(folder, fixtures, model)` runs the command on a copy of the fixture model damaged so."""
    for name in damages:
        fault, damage = MODEL_DAMAGES[name]

        def build(folder: Path, fx: Fixtures, damage=damage) -> Probe:
            return probe(folder, fx, damaged_model(folder, fx, lambda model: damage(folder, model)))

        case(f"{command}-{prefix}{name}", command, fault, extended=name in extended)(build)


# -- train.py: data files, YAML, options ---------------------------------------------------------------------------
def train_probe(folder: Path, fx: Fixtures, *extra: str, data: list[str] | None = None, **kwargs) -> Probe:
    """train.py for 2 updates of the tiny model; a start from `--model` takes that model's architecture."""
    architecture = [] if "--model" in extra else TINY_ARCHITECTURE
    args = [*(fx.data_args() if data is None else data), *architecture, *TINY_OPTIONS, "--max_train_steps", "2",
            "--output_dir", str(folder / "out"), *extra]  # fmt: skip
    return Probe("train", args, **kwargs)


def train_file_probe(folder: Path, fx: Fixtures, train_file: Path, *extra: str) -> Probe:
    return train_probe(folder, fx, *extra, data=[f"--train_file={train_file}"])


def _jsonl_with(fx: Fixtures, folder: Path, bad_line: str, name: str = "train.jsonl") -> Path:
    lines = fx.data.joinpath("train.jsonl").read_text(encoding="utf-8").splitlines()
    lines.insert(len(lines) // 2, bad_line)
    path = folder / name
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


@case("train-data-latin1", "train", "encoding")
def _(folder, fx):
    (folder / "latin.en").write_text("one coffee\ntwo\n", encoding="utf-8")
    (folder / "latin.de").write_bytes("ein Caf\xe9\nzwei\n".encode("latin-1"))
    return train_file_probe(folder, fx, folder / "latin")


@case("train-data-utf16-jsonl", "train", "encoding", extended=True)
def _(folder, fx):
    text = fx.data.joinpath("train.jsonl").read_text(encoding="utf-8")
    (folder / "train.jsonl").write_bytes(text.encode("utf-16"))
    return train_file_probe(folder, fx, folder / "train.jsonl")


@case("train-data-binary-garbage", "train", "encoding", extended=True)
def _(folder, fx):
    garbage(folder / "train.tsv")
    return train_file_probe(folder, fx, folder / "train.tsv")


@case("train-data-empty", "train", "data")
def _(folder, fx):
    (folder / "train.jsonl").write_text("")
    return train_file_probe(folder, fx, folder / "train.jsonl")


@case("train-data-mismatched-lines", "train", "data")
def _(folder, fx):
    (folder / "train.en").write_text("one\ntwo\nthree\n", encoding="utf-8")
    (folder / "train.de").write_text("eins\nzwei\n", encoding="utf-8")
    return train_file_probe(folder, fx, folder / "train")


@case("train-data-bad-json-line", "train", "data")
def _(folder, fx):
    return train_file_probe(folder, fx, _jsonl_with(fx, folder, '{"translation": {"en": "x", "de": '))


@case("train-data-json-wrong-language", "train", "data")
def _(folder, fx):
    return train_file_probe(folder, fx, _jsonl_with(fx, folder, '{"translation": {"en": "x", "fr": "y"}}'))


@case("train-data-json-not-an-object", "train", "data", extended=True)
def _(folder, fx):
    return train_file_probe(folder, fx, _jsonl_with(fx, folder, "[1, 2, 3]"))


@case("train-data-json-side-not-text", "train", "data", extended=True)
def _(folder, fx):
    return train_file_probe(folder, fx, _jsonl_with(fx, folder, '{"translation": {"en": 3, "de": ["a"]}}'))


@case("train-data-tsv-two-tabs", "train", "data")
def _(folder, fx):
    (folder / "train.tsv").write_text("one\teins\ntwo\tzwei\textra\n", encoding="utf-8")
    return train_file_probe(folder, fx, folder / "train.tsv")


@case("train-data-missing-file", "train", "missing", extended=True)
def _(folder, fx):
    return train_file_probe(folder, fx, folder / "nowhere.jsonl")


@case("train-data-is-a-folder", "train", "data", extended=True)
def _(folder, fx):
    (folder / "corpus.jsonl").mkdir()
    return train_file_probe(folder, fx, folder / "corpus.jsonl")


@case("train-yaml-bad-syntax", "train", "yaml")
def _(folder, fx):
    (folder / "run.yaml").write_text("d_model: [32\nwarmup_steps: 4\n")
    return train_probe(folder, fx, "--config", str(folder / "run.yaml"))


@case("train-yaml-unknown-key", "train", "yaml")
def _(folder, fx):
    (folder / "run.yaml").write_text("d_modle: 32\n")
    return train_probe(folder, fx, "--config", str(folder / "run.yaml"))


@case("train-yaml-wrong-type", "train", "yaml")
def _(folder, fx):
    (folder / "run.yaml").write_text("warmup_steps: four thousand\n")
    return train_probe(folder, fx, "--config", str(folder / "run.yaml"))


@case("train-yaml-list-not-mapping", "train", "yaml", extended=True)
def _(folder, fx):
    (folder / "run.yaml").write_text("- d_model: 32\n")
    return train_probe(folder, fx, "--config", str(folder / "run.yaml"))


@case("train-yaml-latin1", "train", "encoding")
def _(folder, fx):
    (folder / "run.yaml").write_bytes("# r\xe9glages\nwarmup_steps: 4\n".encode("latin-1"))
    return train_probe(folder, fx, "--config", str(folder / "run.yaml"))


@case("train-yaml-nested-value", "train", "yaml", extended=True)
def _(folder, fx):
    (folder / "run.yaml").write_text("dropout: {p: 0.1}\n")
    return train_probe(folder, fx, "--config", str(folder / "run.yaml"))


@case("train-option-negative-steps", "train", "option", extended=True)
def _(folder, fx):
    return train_probe(folder, fx, "--max_train_steps", "-3")


@case("train-option-unknown-scheduler", "train", "option", extended=True)
def _(folder, fx):
    return train_probe(folder, fx, "--lr_scheduler", "fast")


@case("train-option-heads-do-not-divide", "train", "option")
def _(folder, fx):
    return train_probe(folder, fx, "--encoder_attention_heads", "3")


@case("train-option-dropout-above-one", "train", "option", extended=True)
def _(folder, fx):
    return train_probe(folder, fx, "--dropout", "1.5")


@case("train-output-is-a-file", "train", "collision", extended=True)
def _(folder, fx):
    (folder / "out").write_text("my notes\n")
    return train_probe(folder, fx)


@case("train-output-nonempty", "train", "non-empty")
def _(folder, fx):
    (folder / "out").mkdir()
    (folder / "out" / "notes.txt").write_text("my notes\n")
    return train_probe(folder, fx)


@case("train-output-is-the-data-file", "train", "collision")
def _(folder, fx):
    data = shutil.copy(fx.data / "train.jsonl", folder / "train.jsonl")
    return train_probe(folder, fx, "--output_dir", str(data), data=[f"--train_file={data}"])


@case("train-overwrite-then-bad-tokenizer", "train", "non-empty")
def _(folder, fx):
    run = copy_fixture(fx.run, folder / "out")
    return train_probe(folder, fx, "--overwrite_output_dir", "--tokenizer", str(folder / "no-tokenizer"),
                       "--output_dir", str(run))  # fmt: skip


@case("train-overwrite-symlinked-checkpoints", "train", "symlink", expect="any")
def _(folder, fx):
    run = copy_fixture(fx.run, folder / "out")
    shutil.move(run / "checkpoints", folder / "old-checkpoints")
    (run / "checkpoints").symlink_to(folder / "old-checkpoints", target_is_directory=True)
    return train_probe(folder, fx, "--overwrite_output_dir", "--checkpoint_steps", "1", "--output_dir", str(run),
                       may_change=tuple(f"out/{name}" for name in RUN_OUTPUT_FILES))  # fmt: skip


@case("train-resume-without-a-run", "train", "missing")
def _(folder, fx):
    return train_probe(folder, fx, "--resume_from_checkpoint", "latest")


@case("train-resume-changed-max-steps", "train", "option")
def _(folder, fx):
    options = fx.run_options
    steps = int(options[max(i for i, option in enumerate(options) if option == "--max_train_steps") + 1])
    return resume_probe(copy_fixture(fx.run, folder / "out"), fx, "--max_train_steps", str(steps + 1))


@case("train-resume-checkpoint-is-a-file", "train", "option", extended=True)
def _(folder, fx):
    run = copy_fixture(fx.run, folder / "out")
    return resume_probe(run, fx, "--resume_from_checkpoint", str(run / "results.json"))


@case("train-resume-checkpoints-symlink-loop", "train", "symlink", extended=True)
def _(folder, fx):
    run = copy_fixture(fx.run, folder / "out")
    shutil.rmtree(run / "checkpoints")
    (run / "checkpoints").symlink_to(run / "checkpoints")
    return resume_probe(run, fx)


def resume_probe(run: Path, fx: Fixtures, *extra: str, **kwargs) -> Probe:
    """Resume `run` (a copy of the fixture run) with the fixture run's own options."""
    args = [*fx.run_options, "--output_dir", str(run), "--resume_from_checkpoint", "latest", *extra]
    return Probe("train", args, **kwargs)


def _resume_with_damaged(folder: Path, fx: Fixtures, damage: Callable[[Path], None], **kwargs) -> Probe:
    """Resume a copy of the fixture run after `damage(its last checkpoint folder)`; a resume that succeeds may
    rewrite the final model and the records."""
    run = copy_fixture(fx.run, folder / "out")
    damage(sorted((run / "checkpoints").glob("step-*"))[-1])
    may_change = (*(f"out/{name}" for name in RUN_OUTPUT_FILES), *kwargs.pop("may_change", ()))
    return resume_probe(run, fx, may_change=may_change, **kwargs)


def _checkpoint_files(fx: Fixtures) -> list[str]:
    return sorted(p.name for p in fx.latest_checkpoint().iterdir() if p.is_file())


def _state_files(fx: Fixtures) -> list[str]:
    """The files of a checkpoint besides its weights and completion marker: optimizer, schedules, RNG states."""
    return [name for name in _checkpoint_files(fx) if name not in {"model.safetensors", "checkpoint.json"}]


# Files of a checkpoint that train.py writes for people and does not read back on resume.
NOT_READ_BACK = {"trainer_state.json"}


def checkpoint_file_cases(fx: Fixtures) -> list[Case]:
    """One pickle payload and one truncated copy for every file of the fixture run's last checkpoint (whatever files
    train.py writes there); resuming must refuse each, except a damaged completion marker (the checkpoint is then
    incomplete and the one before it is used)."""
    cases = []
    for name in _checkpoint_files(fx):
        # A damaged completion marker makes the checkpoint incomplete: resuming from the one before (and writing
        # that step again) is then right. A file that resume does not read back may be ignored.
        expect = "any" if name in {"checkpoint.json", *NOT_READ_BACK} else "error"
        rewritten = ("out/checkpoints/*/*",) if name == "checkpoint.json" else ()

        def pickled(folder, fx, name=name, rewritten=rewritten):
            plant = lambda c: plant_pickle(c / name, folder / PAYLOAD_MARKER)  # noqa: E731
            return _resume_with_damaged(folder, fx, plant, may_change=rewritten)

        def truncated(folder, fx, name=name, rewritten=rewritten):
            return _resume_with_damaged(folder, fx, lambda c: truncate(c / name), may_change=rewritten)

        cases.append(Case(f"train-resume-pickle-in-{name}", "train", "pickle", pickled, expect))
        # A truncated file: one state file and the weights in the benchmark, every file with --all_cases.
        core = name == "model.safetensors" or name == _state_files(fx)[0]
        cases.append(Case(f"train-resume-truncated-{name}", "train", "weights", truncated, expect, not core))
    return cases


@case("train-resume-extra-pickles-in-checkpoint", "train", "pickle", expect="any")
def _(folder, fx):
    def plant(checkpoint: Path) -> None:
        for name in ("pytorch_model.bin", "extra_state.pkl", "scheduler.pt"):
            plant_pickle(checkpoint / name, folder / PAYLOAD_MARKER)

    return _resume_with_damaged(folder, fx, plant)


@case("train-model-path-missing", "train", "missing")
def _(folder, fx):
    return train_probe(folder, fx, "--model", str(folder / "no-model"), "--tokenizer", str(fx.model))


damaged_model_cases(
    "train", lambda folder, fx, model: train_probe(folder, fx, "--model", str(model), "--tokenizer",
                                                   str(model)),
    ["truncated-weights", "config-more-layers", "pickle-weights-only"], prefix="model-",
)  # fmt: skip
damaged_model_cases(
    "train", lambda folder, fx, model: train_probe(folder, fx, "--model", str(model), "--tokenizer",
                                                   str(model)),
    ["tokenizer-special-ids-disagree"],
)  # fmt: skip


@case("train-tokenizer-empty-json", "train", "tokenizer")
def _(folder, fx):
    tokenizer = copy_fixture(fx.tokenizer, folder / "tokenizer")
    (tokenizer / "tokenizer.json").write_text("{}")
    return train_probe(folder, fx, "--tokenizer", str(tokenizer))


@case("train-tokenizer-larger-than-model", "train", "tokenizer")
def _(folder, fx):
    model = copy_fixture(fx.small_vocab_model, folder / "model")
    return train_probe(folder, fx, "--model", str(model), "--tokenizer", str(fx.tokenizer))


# -- python -m tokenization train -------------------------------------------------------------------------------
def tokenization_probe(folder: Path, *files: Path, output: Path | None = None, extra: tuple = ()) -> Probe:
    return Probe("tokenization", ["--files", *map(str, files), "--output_dir", str(output or folder / "tok"),
                                  "--vocab_size", "400", *extra])  # fmt: skip


@case("tokenization-latin1-file", "tokenization", "encoding")
def _(folder, fx):
    shutil.copy(fx.data / "train.en", folder / "train.en")
    (folder / "train.de").write_bytes("ein Caf\xe9\n".encode("latin-1") * 50)
    return tokenization_probe(folder, folder / "train.en", folder / "train.de")


@case("tokenization-empty-file", "tokenization", "data")
def _(folder, fx):
    (folder / "empty.txt").write_text("")
    return tokenization_probe(folder, folder / "empty.txt")


@case("tokenization-missing-file", "tokenization", "missing", extended=True)
def _(folder, fx):
    return tokenization_probe(folder, folder / "nowhere.txt")


@case("tokenization-binary-garbage", "tokenization", "encoding")
def _(folder, fx):
    garbage(folder / "corpus.txt", 20000)
    return tokenization_probe(folder, folder / "corpus.txt")


@case("tokenization-file-is-a-folder", "tokenization", "data", extended=True)
def _(folder, fx):
    (folder / "corpus").mkdir()
    return tokenization_probe(folder, folder / "corpus")


@case("tokenization-vocab-too-small", "tokenization", "option")
def _(folder, fx):
    return tokenization_probe(folder, fx.data / "train.en", extra=("--vocab_size", "3"))


@case("tokenization-output-is-a-file", "tokenization", "collision")
def _(folder, fx):
    (folder / "tok").write_text("my notes\n")
    return tokenization_probe(folder, fx.data / "train.en", output=folder / "tok")


@case("tokenization-output-is-the-input", "tokenization", "collision")
def _(folder, fx):
    corpus = shutil.copy(fx.data / "train.en", folder / "train.en")
    return tokenization_probe(folder, corpus, output=corpus)


@case("tokenization-output-nonempty", "tokenization", "non-empty")
def _(folder, fx):
    copy_fixture(fx.model, folder / "tok")  # someone's model folder, with its own tokenizer
    return tokenization_probe(folder, fx.data / "train.en", output=folder / "tok")


# -- vaswani translate ------------------------------------------------------------------------------------------
SENTENCES = "Hello world.\nThe children moved to Copenhagen in 1953.\n"


def translate_probe(folder: Path, model: Path | str, *extra: str, stdin: str | None = SENTENCES, **kw) -> Probe:
    return Probe("translate", ["--model", str(model), "--device", "cpu", "--num_beams", "2",
                               "--max_new_tokens", "5", *extra], stdin=stdin, **kw)  # fmt: skip


@case("translate-input-latin1", "translate", "encoding")
def _(folder, fx):
    (folder / "in.txt").write_bytes("Hello.\nOne caf\xe9.\n".encode("latin-1"))
    return translate_probe(folder, fx.model, "--input", str(folder / "in.txt"), stdin=None)


@case("translate-stdin-latin1", "translate", "encoding")
def _(folder, fx):
    return translate_probe(folder, fx.model, stdin="Hello.\nOne caf\xe9.\n".encode("latin-1"))


@case("translate-input-binary-garbage", "translate", "encoding")
def _(folder, fx):
    garbage(folder / "in.txt")
    return translate_probe(folder, fx.model, "--input", str(folder / "in.txt"), stdin=None)


@case("translate-input-missing", "translate", "missing", extended=True)
def _(folder, fx):
    return translate_probe(folder, fx.model, "--input", str(folder / "nowhere.txt"), stdin=None)


@case("translate-output-is-the-input", "translate", "collision")
def _(folder, fx):
    (folder / "in.txt").write_text(SENTENCES)
    return translate_probe(folder, fx.model, "--input", str(folder / "in.txt"), "--output", str(folder / "in.txt"),
                           stdin=None)  # fmt: skip


@case("translate-output-symlink-to-input", "translate", "symlink")
def _(folder, fx):
    (folder / "in.txt").write_text(SENTENCES)
    (folder / "out.txt").symlink_to(folder / "in.txt")
    return translate_probe(folder, fx.model, "--input", str(folder / "in.txt"), "--output", str(folder / "out.txt"),
                           stdin=None)  # fmt: skip


@case("translate-output-is-a-folder", "translate", "collision", extended=True)
def _(folder, fx):
    (folder / "out").mkdir()
    (folder / "out" / "notes.txt").write_text("mine\n")
    return translate_probe(folder, fx.model, "--output", str(folder / "out"))


@case("translate-output-is-model-weights", "translate", "collision")
def _(folder, fx):
    model = copy_fixture(fx.model, folder / "model")
    return translate_probe(folder, model, "--output", str(model / "model.safetensors"))


@case("translate-model-path-missing", "translate", "missing")
def _(folder, fx):
    return translate_probe(folder, "models/tiny-en-de")  # reads as a Hub repo id, but is meant as a local path


@case("translate-model-is-a-file", "translate", "missing", extended=True)
def _(folder, fx):
    (folder / "model").write_text("not a model\n")
    return translate_probe(folder, folder / "model")


@case("translate-model-symlink", "translate", "symlink", expect="ok")
def _(folder, fx):
    (folder / "model").symlink_to(fx.model, target_is_directory=True)
    return translate_probe(folder, folder / "model")


damaged_model_cases(
    "translate", lambda folder, fx, model: translate_probe(folder, model),
    ["truncated-weights", "garbage-weights", "pickle-weights-only", "config-is-a-list", "config-more-layers",
     "tokenizer-empty-json", "tokenizer-special-ids-disagree"],
    extended=("garbage-weights",),
)  # fmt: skip


@case("translate-foreign-weights", "translate", "weights")
def _(folder, fx):
    def foreign(model: Path) -> None:
        import torch
        from safetensors.torch import save_file

        save_file({"bert.embeddings.word_embeddings.weight": torch.zeros(10, 4)}, model / "model.safetensors")

    return translate_probe(folder, damaged_model(folder, fx, foreign))


@case("translate-pickle-as-safetensors", "translate", "pickle")
def _(folder, fx):
    model = damaged_model(folder, fx, lambda m: plant_pickle(m / "model.safetensors", folder / PAYLOAD_MARKER))
    return translate_probe(folder, model)


@case("translate-pickles-next-to-weights", "translate", "pickle", expect="any")
def _(folder, fx):
    def plant(model: Path) -> None:
        for name in ("pytorch_model.bin", "training_args.bin", "optimizer.pt", "extra.pkl"):
            plant_pickle(model / name, folder / PAYLOAD_MARKER)

    return translate_probe(folder, damaged_model(folder, fx, plant))


@case("translate-foreign-remote-code", "translate", "pickle")
def _(folder, fx):
    model = damaged_model(folder, fx, lambda m: plant_remote_code(m, folder / PAYLOAD_MARKER))
    return translate_probe(folder, model, stdin="y\ny\nHello world.\n")  # a "y" answers transformers' prompt


@case("translate-config-not-json", "translate", "config", extended=True)
def _(folder, fx):
    return translate_probe(folder, damaged_model(folder, fx, lambda m: (m / "config.json").write_text("{model")))


@case("translate-config-vocab-size-disagrees", "translate", "config")
def _(folder, fx):
    return translate_probe(folder, damaged_model(folder, fx, lambda m: edit_json(m / "config.json", vocab_size=50)))


@case("translate-config-latin1", "translate", "encoding")
def _(folder, fx):
    def latin(model: Path) -> None:
        text = (model / "config.json").read_text().replace('"model_type"', '"_note": "r\u00e9glage",\n  "model_type"')
        (model / "config.json").write_bytes(text.encode("latin-1"))

    return translate_probe(folder, damaged_model(folder, fx, latin))


@case("translate-tokenizer-larger-than-model", "translate", "tokenizer")
def _(folder, fx):
    def add_tokenizer(model: Path) -> None:
        for file in fx.tokenizer.iterdir():
            shutil.copy(file, model / file.name)

    return translate_probe(folder, damaged_model(folder, fx, add_tokenizer, source=fx.small_vocab_model))


@case("translate-option-zero-beams", "translate", "option", extended=True)
def _(folder, fx):
    return translate_probe(folder, fx.model, "--num_beams", "0")


# -- vaswani average ---------------------------------------------------------------------------------------------
@case("average-output-nonempty", "average", "non-empty")
def _(folder, fx):
    (folder / "best").mkdir()
    (folder / "best" / "model-best.safetensors").write_bytes(b"my best model")
    (folder / "best" / "notes.txt").write_text("mine\n")
    return Probe("average", ["--run_dir", str(fx.run), "--last", "2", "--output_dir", str(folder / "best")])


@case("average-output-symlink-to-checkpoint", "average", "symlink")
def _(folder, fx):
    run = copy_fixture(fx.run, folder / "run")
    (folder / "out").symlink_to(sorted((run / "checkpoints").glob("step-*"))[0], target_is_directory=True)
    return Probe("average", ["--run_dir", str(run), "--last", "2", "--output_dir", str(folder / "out")])


@case("average-output-is-a-checkpoint", "average", "collision")
def _(folder, fx):
    run = copy_fixture(fx.run, folder / "run")
    checkpoints = sorted((run / "checkpoints").glob("step-*"))
    return Probe("average", ["--checkpoints", *map(str, checkpoints), "--model", str(run),
                             "--output_dir", str(checkpoints[0])])  # fmt: skip


@case("average-run-missing", "average", "missing", extended=True)
def _(folder, fx):
    return Probe("average", ["--run_dir", str(folder / "no-run"), "--last", "2", "--output_dir", str(folder / "o")])


@case("average-last-too-many", "average", "option", extended=True)
def _(folder, fx):
    return Probe("average", ["--run_dir", str(fx.run), "--last", "9", "--output_dir", str(folder / "o")])


@case("average-truncated-checkpoint-weights", "average", "weights")
def _(folder, fx):
    run = copy_fixture(fx.run, folder / "run")
    truncate(sorted((run / "checkpoints").glob("step-*"))[-1] / "model.safetensors")
    return Probe("average", ["--run_dir", str(run), "--last", "2", "--output_dir", str(folder / "o")])


@case("average-checkpoints-of-another-model", "average", "weights")
def _(folder, fx):
    run = copy_fixture(fx.run, folder / "run")
    checkpoints = sorted((run / "checkpoints").glob("step-*"))
    shutil.copy(fx.model / "model.safetensors", checkpoints[0] / "model.safetensors")
    return Probe("average", ["--checkpoints", *map(str, checkpoints), "--model", str(run),
                             "--output_dir", str(folder / "o")])  # fmt: skip


@case("average-pickles-in-checkpoints", "average", "pickle", expect="any")
def _(folder, fx):
    run = copy_fixture(fx.run, folder / "run")
    for checkpoint in (run / "checkpoints").glob("step-*"):
        for file in checkpoint.iterdir():
            if file.suffix in {".bin", ".pkl", ".pt"}:
                plant_pickle(file, folder / PAYLOAD_MARKER)
        plant_pickle(checkpoint / "pytorch_model.bin", folder / PAYLOAD_MARKER)
    return Probe("average", ["--run_dir", str(run), "--last", "2", "--output_dir", str(folder / "o")])


@case("average-checkpoint-pickle-weights-only", "average", "pickle")
def _(folder, fx):
    run = copy_fixture(fx.run, folder / "run")
    checkpoint = sorted((run / "checkpoints").glob("step-*"))[-1]
    (checkpoint / "model.safetensors").unlink()
    plant_pickle(checkpoint / "pytorch_model.bin", folder / PAYLOAD_MARKER)
    return Probe("average", ["--checkpoints", str(checkpoint), "--model", str(run), "--output_dir", str(folder / "o")])


@case("average-model-config-is-a-list", "average", "config")
def _(folder, fx):
    run = copy_fixture(fx.run, folder / "run")
    (run / "config.json").write_text("[]")
    return Probe("average", ["--run_dir", str(run), "--last", "2", "--output_dir", str(folder / "o")])


@case("average-model-foreign-remote-code", "average", "pickle")
def _(folder, fx):
    run = copy_fixture(fx.run, folder / "run")
    plant_remote_code(run, folder / PAYLOAD_MARKER)
    return Probe("average", ["--run_dir", str(run), "--last", "2", "--output_dir", str(folder / "o")],
                 stdin="y\ny\n")  # fmt: skip


# -- vaswani prune -----------------------------------------------------------------------------------------------
def prune_probe(model: Path, output: Path, *extra: str, **kwargs) -> Probe:
    return Probe("prune", ["--model", str(model), "--output_dir", str(output), *(extra or ("--every_other", "0.5"))],
                 **kwargs)  # fmt: skip


@case("prune-output-nonempty", "prune", "non-empty")
def _(folder, fx):
    (folder / "out").mkdir()
    (folder / "out" / "notes.txt").write_text("mine\n")
    (folder / "out" / "model.safetensors").write_bytes(b"my other model")
    return prune_probe(fx.model, folder / "out")


@case("prune-output-is-the-model", "prune", "collision")
def _(folder, fx):
    model = copy_fixture(fx.model, folder / "model")
    return prune_probe(model, model)


@case("prune-output-symlink-to-model", "prune", "symlink")
def _(folder, fx):
    model = copy_fixture(fx.model, folder / "model")
    (folder / "out").symlink_to(model, target_is_directory=True)
    return prune_probe(model, folder / "out")


@case("prune-layer-out-of-range", "prune", "option", extended=True)
def _(folder, fx):
    return prune_probe(fx.model, folder / "out", "--encoder_layers_to_keep", "0,7")


@case("prune-foreign-remote-code", "prune", "pickle")
def _(folder, fx):
    model = damaged_model(folder, fx, lambda m: plant_remote_code(m, folder / PAYLOAD_MARKER))
    return prune_probe(model, folder / "out", stdin="y\ny\n")


@case("prune-model-path-missing", "prune", "missing", extended=True)
def _(folder, fx):
    return prune_probe(folder / "no-model", folder / "out")


# -- vaswani export ----------------------------------------------------------------------------------------------
def export_probe(model: Path, output: Path, *extra: str, **kwargs) -> Probe:
    return Probe("export", ["--model", str(model), "--output_dir", str(output), "--format", "ctranslate2", *extra],
                 **kwargs)  # fmt: skip


@case("export-output-nonempty", "export", "non-empty")
def _(folder, fx):
    (folder / "out").mkdir()
    (folder / "out" / "notes.txt").write_text("mine\n")
    return export_probe(fx.model, folder / "out")


@case("export-output-is-the-model", "export", "collision")
def _(folder, fx):
    model = copy_fixture(fx.model, folder / "model")
    return export_probe(model, model)


# prune and export read a model folder and write a new one (MODEL --output_dir OUT): the same damaged models.
for command, model_to_folder_probe in (("prune", prune_probe), ("export", export_probe)):
    damaged_model_cases(
        command, lambda folder, fx, model, probe=model_to_folder_probe: probe(model, folder / "out"),
        ["config-more-layers", "garbage-weights", "pickle-weights-only"],
    )  # fmt: skip


@case("export-unknown-quantization", "export", "option")
def _(folder, fx):
    return export_probe(fx.model, folder / "out", "--quantization", "int3")


@case("export-model-path-missing", "export", "missing")
def _(folder, fx):
    return export_probe(folder / "no-model", folder / "out")


# -- vaswani card ------------------------------------------------------------------------------------------------
damaged_model_cases(
    "card", lambda folder, fx, model: Probe("card", ["--model", str(model)]), ["config-is-a-list"]
)  # fmt: skip


@case("card-run-args-not-json", "card", "config")
def _(folder, fx):
    model = damaged_model(folder, fx, lambda m: (m / "run_args.json").write_text("{not json"))
    return Probe("card", ["--model", str(model)])


@case("card-results-latin1", "card", "encoding")
def _(folder, fx):
    model = damaged_model(
        folder, fx, lambda m: (m / "results.json").write_bytes('{"note": "caf\xe9"}'.encode("latin-1"))
    )
    return Probe("card", ["--model", str(model)])


@case("card-output-is-the-config", "card", "collision")
def _(folder, fx):
    model = copy_fixture(fx.model, folder / "model")
    return Probe("card", ["--model", str(model), "--output", str(model / "config.json")])


@case("card-output-is-a-folder", "card", "collision", extended=True)
def _(folder, fx):
    (folder / "out").mkdir()
    return Probe("card", ["--model", str(fx.model), "--output", str(folder / "out")])


@case("card-model-path-missing", "card", "missing", extended=True)
def _(folder, fx):
    return Probe("card", ["--model", str(folder / "no-model")])


# -- vaswani push (the Hub replaced by recorders) -------------------------------------------------------------------
def push_probe(folder: Path, model: Path, *extra: str, **kwargs) -> Probe:
    return Probe("push", ["--model", str(model), "--hub_model_id", "someone/tiny", *extra], **kwargs)


def no_local_paths(folder: Path, local: Path) -> str | None:
    """The uploaded files (recorded in folder/uploaded) hold no absolute path under `local`."""
    uploaded = folder / "uploaded"
    if not uploaded.is_dir():
        return "nothing was uploaded"
    leaks = [str(path.relative_to(uploaded)) for path in sorted(uploaded.rglob("*"))
             if path.is_file() and str(local.resolve()).encode() in path.read_bytes()]  # fmt: skip
    return f"uploaded files hold local paths: {', '.join(leaks)}" if leaks else None


@case("push-publishes-no-local-paths", "push", "leak", expect="ok")
def _(folder, fx):
    run = copy_fixture(fx.run, folder / "run")
    return push_probe(folder, run, check=lambda f: no_local_paths(f, fx.root.parent))


@case("push-bad-repo-id", "push", "option")
def _(folder, fx):
    return Probe("push", ["--model", str(fx.model), "--hub_model_id", "not a/valid/repo id"])


damaged_model_cases(
    "push", lambda folder, fx, model: push_probe(folder, model),
    ["truncated-weights", "config-is-a-list", "config-more-layers", "tokenizer-empty-json"],
)  # fmt: skip


@case("push-model-path-missing", "push", "missing", extended=True)
def _(folder, fx):
    return push_probe(folder, folder / "no-model")


# ----------------------------------------------------------------------------------------------------------------
# Running a case
# ----------------------------------------------------------------------------------------------------------------
def hash_tree(folder: Path) -> dict[str, str]:
    """{relative path: sha256} of every regular file under `folder`, not following symlinks (a symlink counts as its
    target text)."""
    hashes = {}
    for root, dirs, files in os.walk(folder):
        for name in files + [d for d in dirs if os.path.islink(os.path.join(root, d))]:
            path = Path(root) / name
            relative = str(path.relative_to(folder))
            if path.is_symlink():
                hashes[relative] = "symlink:" + os.readlink(path)
            elif path.is_file():
                hashes[relative] = hashlib.sha256(path.read_bytes()).hexdigest()
    return hashes


def lost_files(before: dict[str, str], after: dict[str, str], may_change: tuple[str, ...]) -> list[str]:
    """Files whose content is found nowhere in the folder afterwards (moved aside is not lost; changed is)."""
    remaining = set(after.values())
    return sorted(
        path for path, digest in before.items()
        if digest not in remaining and not any(Path(path).match(pattern) for pattern in may_change)
    )  # fmt: skip


ERROR_LINE = re.compile(r"^([\w.\- ]+: )?error: ")  # ours, or argparse's "vaswani translate: error: ..."


def classify(result: subprocess.CompletedProcess) -> str:
    """clear: status 2, an `error: ` line (or argparse's `PROG: error: `), no traceback; traceback; ok: status 0;
    other: anything else."""
    if "Traceback (most recent call last)" in result.stderr:
        return "traceback"
    if result.returncode == 0:
        return "ok"
    has_error_line = any(ERROR_LINE.match(line) for line in result.stderr.splitlines())
    return "clear" if result.returncode == 2 and has_error_line else "other"


@dataclasses.dataclass
class CaseResult:
    name: str
    command: str
    fault: str
    expect: str
    outcome: str  # clear, traceback, ok, other, build-failed, timeout
    payload_ran: bool
    lost: list[str]
    problem: str | None  # what the case's own check found
    seconds: float
    returncode: int | None
    stderr_tail: str

    @property
    def passed(self) -> bool:
        expected = {"error": {"clear"}, "ok": {"ok"}, "any": {"clear", "ok"}}[self.expect]
        return self.outcome in expected and not self.payload_ran and not self.lost and not self.problem


def run_case(case: Case, folder: Path, fixtures: Fixtures, timeout: float = 300) -> CaseResult:
    """Build `case` in `folder` (created empty), run its command there and judge the outcome."""
    folder.mkdir(parents=True)
    start = time.perf_counter()
    try:
        probe = case.build(folder, fixtures)
    except Exception as error:  # a broken case, not a finding about the command
        return CaseResult(case.name, case.command, case.fault, case.expect, "build-failed", False, [], repr(error),
                          0.0, None, "")  # fmt: skip
    marker = folder / PAYLOAD_MARKER
    before = hash_tree(folder)
    env = {"PUSH_RECORD": str(folder / "uploaded")}
    try:
        result = fixtures.launcher.run(probe.command, probe.args, cwd=folder, stdin=probe.stdin, env=env,
                                       timeout=timeout)  # fmt: skip
        outcome, returncode, stderr = classify(result), result.returncode, result.stderr
    except subprocess.TimeoutExpired as error:
        outcome, returncode = "timeout", None
        stderr = (
            (error.stderr or b"").decode(errors="replace") if isinstance(error.stderr, bytes) else error.stderr or ""
        )
    after = hash_tree(folder)
    problem = probe.check(folder) if probe.check is not None and outcome == "ok" else None
    return CaseResult(
        case.name, case.command, case.fault, case.expect, outcome, marker.exists(),
        lost_files(before, after, probe.may_change), problem, time.perf_counter() - start, returncode,
        "\n".join(stderr.strip().splitlines()[-6:]),
    )  # fmt: skip


def all_cases(fixtures: Fixtures, available_commands: set[str] | None = None, extended: bool = False) -> list[Case]:
    """The registered cases plus those built from the fixture run's checkpoint files (without the `extended` ones
    unless asked); `export` cases only where the checkout has the command."""
    cases = [c for c in [*CASES, *checkpoint_file_cases(fixtures)] if extended or not c.extended]
    if available_commands is not None:
        cases = [c for c in cases if c.command in available_commands]
    return cases


def vaswani_commands() -> set[str]:
    from vaswani.cli import build_parser

    parser = build_parser()
    subcommands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices
    return {"train", "tokenization", *subcommands}


def run_inputs(
    workdir: Path, fixtures: Fixtures | None = None, names: set[str] | None = None, extended: bool = False,
    commands: set[str] | None = None,
) -> list[CaseResult]:  # fmt: skip
    fixtures = fixtures or Fixtures(workdir / "fixtures")
    cases = all_cases(fixtures, vaswani_commands(), extended=extended or names is not None)
    if names is not None:
        cases = [c for c in cases if c.name in names]
    if commands is not None:
        cases = [c for c in cases if c.command in commands]
    results = []
    for index, case_ in enumerate(cases, 1):
        result = run_case(case_, workdir / "cases" / case_.name, fixtures)
        results.append(result)
        verdict = "pass" if result.passed else "FAIL"
        print(f"[{index:3d}/{len(cases)}] {verdict} {case_.name}: {result.outcome}"
              f"{' PAYLOAD RAN' if result.payload_ran else ''}{' LOST ' + ', '.join(result.lost) if result.lost else ''}"
              f"{' ' + result.problem if result.problem else ''} ({result.seconds:.1f} s)", flush=True)  # fmt: skip
    return results


# ----------------------------------------------------------------------------------------------------------------
# Kills
# ----------------------------------------------------------------------------------------------------------------
KILL_KINDS = ("startup", "training", "checkpoint-save", "final-save")


@dataclasses.dataclass
class KillMoment:
    kind: str
    after_step: int  # training / checkpoint-save: wait for a checkpoint (complete / being saved) of at least this step
    fraction: float  # where in the kind's window the kill lands, 0..1


def _written_since(baseline: dict[str, int], now: dict[str, int], after_ns: int = 0) -> dict[str, int]:
    """Entries new or modified since `baseline` (entries removed, e.g. leftovers cleaned at startup, do not count),
    last modified at `after_ns` (`time.time_ns()`) or later."""
    return {name: mtime for name, mtime in now.items() if baseline.get(name) != mtime and mtime >= after_ns}


@dataclasses.dataclass
class Timeline:
    """Durations measured in the uninterrupted reference run; they size the kill windows."""

    startup: float  # start -> first temporary checkpoint folder
    step: float  # seconds per update
    save: float  # a temporary checkpoint folder's life (median)
    final: float  # the final save: its first file written -> its last
    first_written: list[str] = dataclasses.field(default_factory=list)  # what the final save wrote first


def plan_kills(count: int, steps: int, rng: random.Random) -> list[KillMoment]:
    """`count` moments in run order: about a sixth at startup, a third in training, a third inside checkpoint saves
    and at least two (a sixth) inside the final save, which come last."""
    finals = max(2 if count >= 3 else 1, count // 6) if count > 1 else 0
    kinds = [rng.choice(("startup", "training", "training", "checkpoint-save", "checkpoint-save"))
             for _ in range(count - finals)]  # fmt: skip
    if count - finals >= 2:  # each of them at least once
        kinds[:2] = ["checkpoint-save", "training"]
        rng.shuffle(kinds)
    targets = sorted(rng.randint(1, max(steps - 1, 1)) for _ in kinds)
    moments = [KillMoment(kind, target, rng.random()) for kind, target in zip(kinds, targets, strict=True)]
    return moments + [KillMoment("final-save", steps, rng.random()) for _ in range(finals)]


def _complete_steps(checkpoints: Path) -> list[int]:
    try:
        names = os.listdir(checkpoints)
    except OSError:
        return []
    return sorted(int(n[5:]) for n in names if n.startswith("step-") and n[5:].isdigit()
                  and os.path.exists(os.path.join(checkpoints, n, "checkpoint.json")))  # fmt: skip


def _saving_steps(checkpoints: Path) -> dict[int, int]:
    """{step: inode} of the temporary folders of checkpoint saves under way (or left by a killed one)."""
    saving = {}
    try:
        with os.scandir(checkpoints) as entries:
            for entry in entries:
                step = entry.name[len(".tmp-step-") :]
                if entry.name.startswith(".tmp-step-") and step.isdigit():
                    saving[int(step)] = entry.inode()
    except OSError:
        pass
    return saving


FINAL_IGNORED = {"metrics.jsonl", "run_args.json", "checkpoints", "logs"}


def _final_snapshot(run: Path) -> dict[str, int]:
    """mtime of every entry of the run folder and of its parent, except what changes during training."""
    snapshot = {}
    for folder, prefix in ((run, ""), (run.parent, "../")):
        try:
            with os.scandir(folder) as entries:
                for entry in entries:
                    if entry.name in FINAL_IGNORED or (prefix and entry.name == run.name):
                        continue
                    snapshot[prefix + entry.name] = entry.stat(follow_symlinks=False).st_mtime_ns
        except OSError:
            pass
    return snapshot


def start_train(launcher: Launcher, args: list[str], cwd: Path, log: Path) -> Started:
    """One train.py process of a kill run; its stderr (the log) in `log`."""
    return launcher.start("train", args, cwd, None, log.with_suffix(".stdout"), log)


def _final_save_started(baseline: dict[str, int], run: Path, after_ns: int) -> bool:
    """Whether the invocation started at `after_ns` began its final save: it wrote an entry of the run folder or next
    to it. Not the files of a killed final save that its recovery (at startup) moves into place, which keep their
    modification times, nor the old folder that the recovery's swap sets aside for a moment (model_folder._aside)."""
    written = _written_since(baseline, _final_snapshot(run), after_ns)
    return bool(written.keys() - {f"../.tmp-{run.name}-old"})


def wait_for_moment(invocation: Started, moment: KillMoment, run: Path, timeline: Timeline,
                    steps: int | None = None) -> KillMoment | None:  # fmt: skip
    """Wait until the moment's trigger, then for its delay; the moment waited for if the process is still alive
    then, else None. Training and checkpoint-save moments wait for a checkpoint this invocation writes (of at least
    `after_step`). A checkpoint-save moment whose save came and went unseen (its window is ~0.05 s: a loaded machine
    polls past it) and was the run's last (`steps`) waits for the final save instead, as `_moment_for_now` would have
    aimed it, and returns that moment: otherwise the run would end before any kill."""
    checkpoints = run / "checkpoints"
    if moment.kind == "startup":
        deadline = invocation.start + moment.fraction * timeline.startup
    else:
        started_ns, baseline = time.time_ns(), _final_snapshot(run)
        threshold = max(moment.after_step, max(_complete_steps(checkpoints), default=0) + 1)
        leftovers = set(_saving_steps(checkpoints).items())  # of a killed save: not this invocation's
        while invocation.alive():
            if moment.kind == "training" and any(s >= threshold for s in _complete_steps(checkpoints)):
                window = timeline.step  # anywhere before the next save
                break
            saving = set(_saving_steps(checkpoints).items()) - leftovers
            if moment.kind == "checkpoint-save" and any(s >= threshold for s, _ in saving):
                window = timeline.save * 1.5  # the save, its publication and the deletion of old checkpoints
                break
            if moment.kind == "checkpoint-save" and steps in _complete_steps(checkpoints):
                moment = dataclasses.replace(moment, kind="final-save", after_step=steps)
                continue
            if moment.kind == "final-save" and moment.after_step not in _complete_steps(checkpoints):
                baseline = _final_snapshot(run)  # still training: what changes now (metrics) is not the final save
            elif moment.kind == "final-save" and _final_save_started(baseline, run, started_ns):
                window = timeline.final * 0.9  # the process ends right after the final save
                break
            time.sleep(POLL_SECONDS)
        else:
            return None
        deadline = time.monotonic() + moment.fraction * window
    while invocation.alive() and time.monotonic() < deadline:
        time.sleep(POLL_SECONDS)
    return moment if invocation.alive() else None


def check_file(path: Path) -> str | None:
    """Why `path` is unreadable, or None: safetensors must load, JSON parse, zip archives pass their CRC check."""
    try:
        if path.suffix == ".safetensors":
            from safetensors.torch import load_file

            load_file(path)
        elif path.suffix in {".json", ".jsonl"}:
            text = path.read_text(encoding="utf-8")
            if path.suffix == ".json":
                json.loads(text)
            else:
                [json.loads(line) for line in text.splitlines()]
        elif zipfile.is_zipfile(path):
            with zipfile.ZipFile(path) as archive:
                bad = archive.testzip()
                if bad is not None:
                    return f"bad CRC in {bad}"
        elif path.stat().st_size == 0:
            return "empty"
    except Exception as error:  # any failure to read is what is being counted
        return f"{type(error).__name__}: {error}"
    return None


def corrupt_checkpoints(run: Path, verified: dict) -> list[str]:
    """Problems in the complete checkpoints (those with their marker); `verified` caches files already read."""
    problems = []
    for step in _complete_steps(run / "checkpoints"):
        folder = run / "checkpoints" / f"step-{step:08d}"
        try:
            files = sorted(p for p in folder.iterdir() if p.is_file())
        except OSError:
            continue
        for file in files:
            try:
                stat = file.stat()
            except OSError:  # deleted meanwhile by a later invocation? Not here: the process is dead
                continue
            key = (str(file), stat.st_mtime_ns, stat.st_size)
            if key not in verified:
                verified[key] = check_file(file)
            if verified[key]:
                problems.append(f"{file.relative_to(run)}: {verified[key]}")
    return problems


FINAL_FILES = ("model.safetensors", "config.json", "results.json", "tokenizer.json", "README.md")


def mixed_final_folder(run: Path) -> str | None:
    """A final folder that is neither absent nor complete and readable (weights, config, tokenizer, results, card
    together): what a kill during an in-place final save leaves."""
    present = [name for name in FINAL_FILES if (run / name).is_file()]
    if "model.safetensors" not in present and "results.json" not in present:
        return None
    if len(present) < len(FINAL_FILES):
        return f"final folder has {', '.join(present)} but not {', '.join(sorted(set(FINAL_FILES) - set(present)))}"
    for name in ("model.safetensors", "config.json", "results.json"):
        problem = check_file(run / name)
        if problem:
            return f"{name}: {problem}"
    return None


def _temporary_entries(run: Path) -> list[str]:
    """The hidden temporary entries a kill left (where it landed: a checkpoint save, the final save)."""
    found = []
    for folder, prefix in ((run.parent, "../"), (run, ""), (run / "checkpoints", "checkpoints/")):
        with contextlib.suppress(OSError):
            found += [prefix + name for name in sorted(os.listdir(folder)) if name.startswith(".")]
    return found


# What a kill inside each kind of save leaves (`_temporary_entries` names): a checkpoint's `.tmp-step-N` (or the
# `.tmp-deleted-*` / `.tmp-replaced-*` of the old checkpoints it removes), the final save's `../.tmp-run-new` /
# `../.tmp-run-old` or the journal in the run folder. The next invocation removes them before it trains.
SAVE_LEFTOVERS = {"checkpoint-save": ("checkpoints/.tmp-",), "final-save": ("../.tmp-", ".tmp-")}


def landed_inside_save(kind: str, left_behind: list[str]) -> bool | None:
    """Whether a kill meant for a save left that save's temporary entries behind, i.e. landed inside it (not before
    it started or after its last rename); None for the kinds that are not saves."""
    prefixes = SAVE_LEFTOVERS.get(kind)
    return None if prefixes is None else any(entry.startswith(prefixes) for entry in left_behind)


def train_losses(run: Path) -> list[tuple[int, float]]:
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text(encoding="utf-8").splitlines() if line]
    return [(row["step"], row["loss"]) for row in rows if row.get("split") == "train"]


def compare_weights(a: Path, b: Path) -> tuple[bool, float | None, str]:
    """(identical bit for bit, largest absolute difference, detail)."""
    from safetensors.torch import load_file

    left, right = load_file(a), load_file(b)
    if left.keys() != right.keys():
        return False, None, f"different tensors: {sorted(left.keys() ^ right.keys())[:5]}"
    # Bit for bit: the raw bytes (torch.equal would call -0.0 and 0.0 equal).
    identical = all(left[k].dtype == right[k].dtype and left[k].shape == right[k].shape
                    and left[k].numpy().tobytes() == right[k].numpy().tobytes() for k in left)  # fmt: skip
    largest = max(float((left[k].double() - right[k].double()).abs().max()) for k in left)
    return identical, largest, f"{len(left)} tensors"


def measure_reference(launcher: Launcher, options: list[str], reference: Path, workdir: Path, steps: int) -> Timeline:
    """Run train.py uninterrupted into `reference`, watching its checkpoint saves and final save to size the kill
    windows."""
    invocation = start_train(launcher, [*options, "--output_dir", str(reference)], workdir,
                             workdir / "logs" / "reference.log")  # fmt: skip
    appeared, lasted, final_start, baseline = {}, {}, None, None  # step -> when its .tmp folder appeared, its life
    first_written = []
    while invocation.alive():
        now = time.monotonic()
        saving = set(_saving_steps(reference / "checkpoints"))
        for step in saving - appeared.keys():
            appeared[step] = now
        for step in appeared.keys() - saving - lasted.keys():
            lasted[step] = now - appeared[step]
        if final_start is None and _complete_steps(reference / "checkpoints")[-1:] == [steps]:
            baseline = baseline or _final_snapshot(reference)
            changed = _written_since(baseline, _final_snapshot(reference))
            if changed:
                final_start, first_written = now, sorted(changed)
        time.sleep(POLL_SECONDS)
    if invocation.wait(60) != 0:
        raise RuntimeError(f"the reference run failed:\n{invocation.tail(30)}")
    # The final save's duration, from the modification times of what it wrote (the process ends a while later).
    written = list(_written_since(baseline, _final_snapshot(reference)).values()) if baseline else []
    if written:  # the swap of a folder written aside renames entries of the run folder: its own mtime
        written.append(reference.stat().st_mtime_ns)
    final_save = (max(written) - min(written)) / 1e9 if written else 0.5
    saves = sorted(appeared.items())
    first, last = saves[0], saves[-1]
    return Timeline(
        startup=first[1] - invocation.start,
        step=(last[1] - first[1]) / max(last[0] - first[0], 1),
        save=sorted(lasted.values())[len(lasted) // 2] if lasted else 0.05,
        final=max(final_save, 0.05),
        first_written=first_written,
    )


def run_kills(workdir: Path, kills: int = 20, seed: int = 0, steps: int = 200, checkpoint_steps: int = 5,
              average: int = 3, fixtures: Fixtures | None = None, moments: list[KillMoment] | None = None,
              retries: int = 3, log=print) -> dict:  # fmt: skip
    """The kill part: a reference run, then a run killed at `kills` moments drawn with `seed` (or at the given
    `moments`) and resumed after each, then resumed to its end and compared with the reference. A kill meant for a
    save that left none of the save's temporary entries behind (it came before the save's first write or after its
    last rename) is still a kill survived, but its moment is tried again in the next invocation, at half its place in
    the window, up to `retries` times. Returns the summary (JSON-able).

    The steps: `measure_reference` (the uninterrupted run, which sizes the kill windows), `kill_and_resume` (the
    killed run, one invocation per moment) and `summarize_kills` (the comparison and the figures)."""
    fixtures = fixtures or Fixtures(workdir / "fixtures")
    options = [*fixtures.data_args()[:2], *TINY_TRAIN, *KILL_RUN_EXTRA, "--max_train_steps", str(steps),
               "--checkpoint_steps", str(checkpoint_steps), "--average_checkpoints", str(average),
               "--keep_checkpoints", str(average + 1)]  # fmt: skip
    for name in ("reference", "killed", "logs"):  # each run alone in its folder: the final-save watcher looks there
        (workdir / name).mkdir(parents=True, exist_ok=True)
    reference, run = workdir / "reference" / "run", workdir / "killed" / "run"

    log(f"kills: reference run of {steps} updates ...")
    started = time.monotonic()
    timeline = measure_reference(fixtures.launcher, options, reference, workdir, steps)
    log(f"kills: reference took {time.monotonic() - started:.1f} s; windows: startup {timeline.startup:.1f} s, "
        f"update {timeline.step:.3f} s, save {timeline.save:.3f} s, final save {timeline.final:.2f} s (starting with "
        f"{', '.join(timeline.first_written)})")  # fmt: skip
    timeline.step *= checkpoint_steps  # a training kill lands anywhere between two saves (see wait_for_moment)

    moments = moments if moments is not None else plan_kills(kills, steps, random.Random(seed))
    found = kill_and_resume(fixtures.launcher, options, workdir, run, steps, timeline, moments, retries, log)
    return summarize_kills(found, moments, reference, run, workdir, started, options)


@dataclasses.dataclass
class KillFindings:
    """What the invocations of a killed run found (`kill_and_resume`), in order."""

    records: list[dict] = dataclasses.field(default_factory=list)  # one per invocation
    verified: dict = dataclasses.field(default_factory=dict)  # checkpoint files already checked (corrupt_checkpoints)
    corrupt: set[str] = dataclasses.field(default_factory=set)  # corrupt checkpoint files
    mixed: list[str] = dataclasses.field(default_factory=list)  # final folders a kill left half written
    missed: list[dict] = dataclasses.field(default_factory=list)  # in-save moments that never landed inside a save
    failure: str | None = None  # an invocation that failed on its own, or ended before its kill moment


def kill_and_resume(launcher: Launcher, options: list[str], workdir: Path, run: Path, steps: int, timeline: Timeline,
                    moments: list[KillMoment], retries: int, log=print) -> KillFindings:  # fmt: skip
    """The killed run: one train.py invocation per moment, killed at it and inspected (`inspect_invocation`), each
    resuming from the last complete checkpoint (or starting anew before the first one), then a last invocation
    resumed to the end. A save kill that did not land inside its save is tried again first, half as far into its
    window, up to `retries` times. Stops at the first invocation that was not killed."""
    found = KillFindings()
    next_args = ["--output_dir", str(run)]
    queue = [(moment, 0) for moment in [*moments, None]]  # (moment, tries so far); None: resumed to the end
    number, checkpointed = 0, False
    while queue:
        (moment, tries), number = queue.pop(0), number + 1
        moment = _moment_for_now(moment, run, steps)
        log_file = workdir / "logs" / f"invocation-{number}.log"  # not next to the run: see _final_snapshot
        invocation = start_train(launcher, [*options, *next_args], workdir, log_file)
        reached = moment and wait_for_moment(invocation, moment, run, timeline, steps)
        moment = reached or moment  # a checkpoint save missed at the run's end: aimed at the final save
        killed = bool(reached) and invocation.kill()
        status = invocation.wait(900)
        record = inspect_invocation(run, number, moment, tries, invocation, killed, status, found)
        if record["landed"] is False and tries < retries:  # earlier in the next save's window
            queue.insert(0, (dataclasses.replace(moment, fraction=moment.fraction / 2), tries + 1))
        elif record["landed"] is False:
            found.missed.append(dataclasses.asdict(moment))
        log(_invocation_line(number, len(queue), moment, tries, record))
        if not killed:
            if status != 0:
                found.failure = f"invocation {number} failed on its own (exit {status}):\n{invocation.tail()}"
            elif moment is not None:
                found.failure = f"invocation {number} ended before its kill moment ({moment.kind})"
            break
        # What a user does next: resume; a run killed before its first complete checkpoint starts again. (Not judged
        # by what the folder shows now: a kill inside the final save may leave checkpoints/ inside a folder aside.)
        checkpointed = checkpointed or bool(record["latest_checkpoint"])
        next_args = ["--output_dir", str(run), *(["--resume_from_checkpoint", "latest"] if checkpointed
                                                 else ["--overwrite_output_dir"])]  # fmt: skip
    return found


def _moment_for_now(moment: KillMoment | None, run: Path, steps: int) -> KillMoment | None:
    """The moment, except that once training is over (its last checkpoint is complete) a moment meant for training
    or a checkpoint save goes to the final save instead."""
    if (
        moment is not None
        and moment.kind in {"training", "checkpoint-save"}
        and steps in _complete_steps(run / "checkpoints")
    ):
        return dataclasses.replace(moment, kind="final-save", after_step=steps)
    return moment


def inspect_invocation(run: Path, number: int, moment: KillMoment | None, tries: int, invocation: Started,
                       killed: bool, status: int | None, found: KillFindings) -> dict:  # fmt: skip
    """What invocation `number` left behind: every complete checkpoint checked (corrupt files go to `found`), the
    final folder after a kill (half written: to `found`), the temporary entries and, for a save kill, whether it
    landed inside its save. Returns the invocation's record, also appended to `found.records`."""
    complete = _complete_steps(run / "checkpoints")
    problems = corrupt_checkpoints(run, found.verified)
    found.corrupt.update(problems)
    mixed_problem = mixed_final_folder(run) if killed else None
    if mixed_problem:
        found.mixed.append(f"kill {number}: {mixed_problem}")
    left_behind = _temporary_entries(run)
    landed = landed_inside_save(moment.kind, left_behind) if killed else None
    found.records.append({
        "moment": moment and dataclasses.asdict(moment), "killed": killed, "status": status,
        "seconds": round(time.monotonic() - invocation.start, 2), "latest_checkpoint": complete[-1:] or None,
        "corrupt": problems, "final_folder": mixed_problem, "left_behind": left_behind, "landed": landed,
        "retry": tries,
    })  # fmt: skip
    return found.records[-1]


def _invocation_line(number: int, queued: int, moment: KillMoment | None, tries: int, record: dict) -> str:
    """The progress line of invocation `number`, from its record; `queued` invocations are still queued, the last
    of them the resume to the end."""
    what = (
        f"{number:2d}/{number + queued - 1} {moment.kind:15s} "
        f"step>={moment.after_step:<4d}{f' (retry {tries})' if tries else ''}"
        if moment
        else "last: resume to the end"
    )
    killed, status, left_behind = record["killed"], record["status"], record["left_behind"]
    problems, mixed_problem = record["corrupt"], record["final_folder"]
    latest = record["latest_checkpoint"][-1] if record["latest_checkpoint"] else None
    return (f"kills: {what} {'killed' if killed else f'exit {status}'} after "
            f"{record['seconds']:.1f} s; latest checkpoint {latest}"
            f"{'; left ' + ', '.join(left_behind) if killed and left_behind else ''}"
            f"{'; NOT inside the save' if record['landed'] is False else ''}"
            f"{'; CORRUPT ' + '; '.join(problems) if problems else ''}"
            f"{'; MIXED ' + mixed_problem if mixed_problem else ''}")  # fmt: skip


def summarize_kills(found: KillFindings, moments: list[KillMoment], reference: Path, run: Path, workdir: Path,
                    started: float, options: list[str]) -> dict:  # fmt: skip
    """The kill part's figures (JSON-able): kills done and survived, by kind; save kills inside their saves,
    retried, missed; corrupt checkpoints and half-written final folders; and, when the run got to its end, its final
    weights and training losses against the reference run's."""
    records, failure = found.records, found.failure
    done = sum(1 for r in records if r["killed"])
    # A kill is survived when the run went on after it; after a failure, the kill before the failing invocation was
    # not survived (and the kills not reached were not tried).
    survived = done - 1 if failure and done and records[-1]["status"] != 0 else done
    identical, largest, detail, losses_equal, loss_rows = False, None, "no final model", False, None
    if failure is None:
        identical, largest, detail = compare_weights(reference / "model.safetensors", run / "model.safetensors")
        losses_equal = train_losses(run) == train_losses(reference)
        loss_rows = f"{len(train_losses(run))} train rows in metrics.jsonl (reference: {len(train_losses(reference))})"
    return {
        "kills_planned": len(moments),
        "kills": done,
        "kills_survived": survived,
        "kinds": {kind: sum(1 for r in records if r["killed"] and r["moment"]["kind"] == kind) for kind in KILL_KINDS},
        "inside_saves": {
            kind: sum(1 for r in records if r["landed"] and r["moment"]["kind"] == kind) for kind in SAVE_LEFTOVERS
        },
        "save_kills_retried": sum(1 for r in records if r["landed"] is False),
        "save_moments_missed": found.missed,
        "invocations": len(records),
        "corrupt_checkpoints": sorted(found.corrupt),
        "mixed_final_folders": found.mixed,
        "final_weights_identical": identical,
        "final_weights_max_abs_diff": largest,
        "final_weights_detail": detail,
        "train_losses_identical": losses_equal,
        "train_loss_rows": loss_rows,
        "leftovers_at_end": sorted(str(p.relative_to(workdir)) for p in (workdir / "killed").rglob(".tmp*")),
        "failure": failure,
        "seconds": round(time.monotonic() - started, 1),
        "options": options,
        "records": records,
    }


# ----------------------------------------------------------------------------------------------------------------
# Report
# ----------------------------------------------------------------------------------------------------------------
def summarize_inputs(results: list[CaseResult]) -> dict:
    return {
        "inputs_tried": len(results),
        "clear_errors": sum(r.outcome == "clear" for r in results),
        "succeeded": sum(r.outcome == "ok" for r in results),
        "tracebacks": sum(r.outcome == "traceback" for r in results),
        "other_outcomes": sum(r.outcome not in {"clear", "ok", "traceback"} for r in results),
        "payloads_executed": sum(r.payload_ran for r in results),
        "files_lost": sum(len(r.lost) for r in results),
        "cases_passed": sum(r.passed for r in results),
        "commands": sorted({r.command for r in results}),
        "faults": sorted({r.fault for r in results}),
        "failing": [
            {
                "name": r.name,
                "expect": r.expect,
                "outcome": r.outcome,
                "returncode": r.returncode,
                "payload_ran": r.payload_ran,
                "lost": r.lost,
                "problem": r.problem,
                "stderr_tail": r.stderr_tail,
            }
            for r in results
            if not r.passed
        ],  # fmt: skip
    }


def targets(kills: dict | None, inputs: dict | None) -> list[tuple[str, str, bool]]:
    rows = []
    if kills is not None:
        ok = kills["kills"] >= kills["kills_planned"] > 0 and kills["kills_survived"] == kills["kills"]
        rows.append(("kills survived", f"{kills['kills_survived']}/{kills['kills']}", ok and not kills["failure"]))
        inside = sum(kills["inside_saves"].values())
        rows.append(("save kills that landed inside the save", f"{inside}/{inside + len(kills['save_moments_missed'])}",
                     not kills["save_moments_missed"]))  # fmt: skip
        rows.append(("final weights identical (bit for bit)", str(kills["final_weights_identical"]),
                     kills["final_weights_identical"]))  # fmt: skip
        rows.append(("training losses identical (metrics.jsonl)", str(kills["train_losses_identical"]),
                     kills["train_losses_identical"]))  # fmt: skip
        rows.append(("corrupt checkpoints", str(len(kills["corrupt_checkpoints"])), not kills["corrupt_checkpoints"]))
        rows.append(("half-written final folders", str(len(kills["mixed_final_folders"])),
                     not kills["mixed_final_folders"]))  # fmt: skip
    if inputs is not None:
        rows.append(("tracebacks", str(inputs["tracebacks"]), inputs["tracebacks"] == 0))
        rows.append(("payloads executed", str(inputs["payloads_executed"]), inputs["payloads_executed"] == 0))
        rows.append(("files lost", str(inputs["files_lost"]), inputs["files_lost"] == 0))
        rows.append(("bad inputs handled as expected", f"{inputs['cases_passed']}/{inputs['inputs_tried']}",
                     inputs["cases_passed"] == inputs["inputs_tried"]))  # fmt: skip
    return rows


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], allow_abbrev=False)
    parser.add_argument("--kills", type=int, default=20, help="SIGKILL moments in the killed run (default: 20)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the kill moments (default: 0)")
    parser.add_argument("--steps", type=int, default=200, help="updates of the killed run (default: 200)")
    parser.add_argument("--checkpoint_steps", type=int, default=5, help="a checkpoint every N updates (default: 5)")
    parser.add_argument("--only", choices=["kills", "inputs"], help="run one part only")
    parser.add_argument("--cases", nargs="+", metavar="NAME", help="only these bad-input cases")
    parser.add_argument("--commands", nargs="+", metavar="COMMAND", help="only the bad inputs of these commands")
    parser.add_argument("--all_cases", action="store_true", help="also the extended bad inputs (more of each kind)")
    parser.add_argument("--keep", action="store_true", help="keep the work folder")
    parser.add_argument("--workdir", type=Path, help="work folder (default: a new temporary folder)")
    parser.add_argument(
        "--exec", action="store_true",
        help="start every command in a fresh interpreter (default: fork it from a server that imported torch, "
             "transformers, datasets, accelerate: the same code runs, seconds faster per command)",
    )  # fmt: skip
    parser.add_argument("--json", type=Path, metavar="FILE", help="also write the summary to FILE")
    return parser.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="bench-faults-"))
    workdir.mkdir(parents=True, exist_ok=True)
    workdir = workdir.resolve()
    print(f"work folder: {workdir}", flush=True)
    started = time.monotonic()
    fixtures = Fixtures(workdir / "fixtures", Launcher(workdir, fork=not args.exec))
    kills = inputs = None
    try:
        if args.only in (None, "kills"):
            kills = run_kills(workdir / "kills", args.kills, args.seed, args.steps, args.checkpoint_steps,
                              fixtures=fixtures, log=lambda text: print(text, flush=True))  # fmt: skip
        if args.only in (None, "inputs"):
            names = set(args.cases) if args.cases else None
            commands = set(args.commands) if args.commands else None
            inputs = summarize_inputs(run_inputs(workdir, fixtures, names, args.all_cases, commands))
    finally:
        if not args.keep and args.workdir is None:
            shutil.rmtree(workdir, ignore_errors=True)
    elapsed = time.monotonic() - started

    print("\n## Failing bad-input cases" if inputs and inputs["failing"] else "")
    for failing in (inputs or {}).get("failing", []):
        print(f"- {failing['name']}: expected {failing['expect']}, got {failing['outcome']} (exit "
              f"{failing['returncode']}){' PAYLOAD RAN' if failing['payload_ran'] else ''}"
              f"{' lost: ' + ', '.join(failing['lost']) if failing['lost'] else ''}"
              f"{' ' + failing['problem'] if failing['problem'] else ''}")  # fmt: skip
        for line in failing["stderr_tail"].splitlines()[-3:]:
            print(f"    {line[:200]}")
    if kills and kills["failure"]:
        print(f"\n## Kill run failure\n{kills['failure']}")
    print("\n## Targets")
    for name, value, met in targets(kills, inputs):
        print(f"{name:42s} {value:>10s}  {'MET' if met else 'MISSED'}")
    summary = {"seconds": round(elapsed, 1),
               "kills": kills and {k: v for k, v in kills.items() if k not in {"records", "options"}},
               "inputs": inputs}  # fmt: skip
    print("\n## Summary (JSON)\n" + json.dumps(summary, indent=1))
    if args.json:
        args.json.write_text(json.dumps({**summary, "kill_records": kills and kills["records"]}, indent=1))
    print(f"\ntook {elapsed:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
