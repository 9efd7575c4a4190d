"""Every example of README.md and docs/*.md runs, so that the documentation cannot rot.

How a page is run (one test per page, its blocks in the order they appear):

- ```python blocks run in one namespace per page (a later block sees an earlier one's names), in this process.
- ```bash blocks run with `bash -e -o pipefail`: a failing command fails the test.
- Both run in the page's own copy of a workspace that looks like the repository root after `make demo`: configs/,
  train.py and .venv (this Python's environment) are links to the real ones, and tiny data and models wait under the
  names the examples use (see `workspace_template`): translation pairs as data/{train,valid,test}.{en,de},
  train.{en,de} and {train,validation,test}.jsonl, text as train.txt / valid.txt, input files, a trained
  `demo-output`, OPUS-MT-like Marian folders `opus-mt-en-es` and (multilingual) `opus-mt-en-roa`, a fairseq
  checkpoint in `wmt16.en-de/`.
- ```text (output, file contents) and ```yaml blocks are not run. A fence without a language is an error, so that no
  example escapes the test unnoticed.
- `<!-- not run: REASON -->` on the line right before a fence keeps that block from running (it needs the Hub, a
  GPU, hours, software outside the environment); the reason is required, and the few such blocks are listed by
  `test_the_blocks_that_are_not_run_say_why`.

The one rewrite (tiny runs): every training command (`vaswani train`, `python train.py`, `accelerate launch ...`, and
`vaswani distill`, whose student takes the same options) gets `tiny_options()` appended: a few updates of a tiny
model, checkpoints every update, the final test scores on 8 examples. argparse keeps the last value of an option, so
these win over the example's own values (which are still parsed and checked); everything else runs as written, and a
misspelled option or file name fails the test.

Speed: a command of the examples costs a Python start with torch and transformers imports (~5 s of CPU) when run
as a new process. Here `vaswani`, `python train.py` and `accelerate launch` are shell functions that hand the command
to a server that imported all that once and forks for each command, with the shell's stdin, stdout, stderr,
working directory and environment: the same `vaswani.cli.main` a user's command runs. (`tests/cli/test_init.py`
checks the installed script itself.) Every other command (`python -m ...`, `echo`, `printf`) runs as it would for
a user. `VASWANI_DOCS_REAL_COMMANDS=1` runs the installed commands instead, `accelerate launch` included (several
processes where the example asks for them): about four times the CPU time, the same results.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import REPO_ROOT

pytestmark = pytest.mark.filterwarnings("ignore:Recommended. pip install sacremoses")  # MarianTokenizer's advice
PAGES = [REPO_ROOT / "README.md", *sorted((REPO_ROOT / "docs").glob("*.md"))]
RUN_LANGUAGES = {"python", "bash"}
QUIET_LANGUAGES = {"text", "yaml"}
REAL_COMMANDS = os.environ.get("VASWANI_DOCS_REAL_COMMANDS") == "1"
FENCE = re.compile(r"^```(\S*)\n(.*?)^```\s*$", flags=re.DOTALL | re.MULTILINE)
NOT_RUN = re.compile(r"<!--\s*not run:(.*?)-->\s*$")


# ---------------------------------------------------------------------------------------------------------------------
# Reading the blocks
# ---------------------------------------------------------------------------------------------------------------------
class Block:
    def __init__(self, page: Path, language: str, code: str, line: int, not_run: str | None):
        self.page, self.language, self.code, self.line, self.not_run = page, language, code, line, not_run

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(REPO_ROOT)}:{self.line}"


def blocks(page: Path) -> list[Block]:
    text = page.read_text(encoding="utf-8")
    found = []
    for match in FENCE.finditer(text):
        line = text.count("\n", 0, match.start()) + 1
        before = text[: match.start()].rstrip("\n").rsplit("\n", 1)[-1]
        mark = NOT_RUN.search(before)
        found.append(Block(page, match.group(1), match.group(2), line, mark.group(1).strip() if mark else None))
    return found


def page_id(page: Path) -> str:
    return str(page.relative_to(REPO_ROOT))


# ---------------------------------------------------------------------------------------------------------------------
# The rewrite rule: tiny training runs
# ---------------------------------------------------------------------------------------------------------------------
TRAINING_COMMAND = re.compile(
    r"^\s*(?:\w+=\S*\s+)*(?:vaswani train|vaswani distill|python train\.py|accelerate launch)\b"
)
# --max_test_samples: a test split of 1,000 pairs (the demo's) costs half a minute of beam search
COMMON = ["--max_train_steps", "5", "--checkpoint_steps", "1", "--keep_checkpoints", "5", "--report_to", "none",
          "--max_test_samples", "8"]  # fmt: skip
TRANSLATION = [
    "--vocab_size", "400", "--d_model", "16", "--encoder_layers", "2", "--decoder_layers", "2",
    "--encoder_attention_heads", "2", "--decoder_attention_heads", "2", "--encoder_ffn_dim", "32",
    "--decoder_ffn_dim", "32", "--max_eval_samples", "8", "--final_eval_samples", "8", "--num_beams", "2",
]  # fmt: skip
CAUSAL_LM = ["--vocab_size", "400", "--d_model", "16", "--decoder_layers", "1", "--decoder_attention_heads", "2",
             "--decoder_ffn_dim", "32", "--block_size", "32", "--max_eval_samples", "8", "--final_eval_samples", "8"]  # fmt: skip
MASKED_LM = ["--vocab_size", "400", "--d_model", "16", "--encoder_layers", "1", "--encoder_attention_heads", "2",
             "--encoder_ffn_dim", "32", "--block_size", "32", "--max_eval_samples", "8", "--final_eval_samples", "8"]  # fmt: skip


def tiny_options(words: list[str]) -> list[str]:
    """What a training command gets appended: a few updates of a tiny model of its task (a pretrained model keeps
    its dimensions: --model refuses architecture options)."""
    task = words[words.index("--task") + 1] if "--task" in words else "translation"
    if "--model" in words:
        return [*COMMON, *(["--num_beams", "2", "--max_eval_samples", "8", "--final_eval_samples", "8"]
                           if task == "translation" else [])]  # fmt: skip
    options = [*COMMON, *{"translation": TRANSLATION, "causal_lm": CAUSAL_LM, "masked_lm": MASKED_LM}[task]]
    if "--prepared_data" in words:  # the prepared folder fixes the vocabulary and the blocks (another is refused)
        fixed = {i for i, word in enumerate(options) if word in ("--vocab_size", "--block_size")}
        options = [word for i, word in enumerate(options) if i not in fixed and i - 1 not in fixed]
    return options


def rewrite(code: str) -> str:
    """The bash block with every training command made tiny (continuation lines joined first)."""
    lines = []
    for line in code.replace("\\\n", " ").splitlines():
        if TRAINING_COMMAND.match(line):
            words = shlex.split(line, comments=True)
            operators = {"|", "||", "&&", ";", "<", ">", "&"} & set(words)
            assert not operators, f"a training command with {operators}: the rewrite appends options at its end"
            line = shlex.join([*words, *tiny_options(words)])
        lines.append(line)
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------------------------------------------------
# The command server: imports once, forks per command
# ---------------------------------------------------------------------------------------------------------------------
PRELOAD = ["torch", "transformers", "accelerate", "datasets", "evaluate", "tokenizers", "safetensors", "sacrebleu",
           "ctranslate2", "sentencepiece", "modeling_vaswani", "tokenization", "vaswani.cli"]  # fmt: skip

CLIENT = """\
import json, os, socket, sys
connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
connection.connect(os.environ["VASWANI_DOCS_SERVER"])
socket.send_fds(connection, [b"!"], [0, 1, 2])
connection.sendall(json.dumps({"argv": sys.argv[1:], "cwd": os.getcwd(), "env": dict(os.environ)}).encode())
connection.shutdown(socket.SHUT_WR)
answer = b""
while chunk := connection.recv(64):
    answer += chunk
sys.exit(int(answer) if answer.strip() else 70)
"""

SHIMS = """\
__docs_call() { "$VASWANI_DOCS_PYTHON" -I -S "$VASWANI_DOCS_CLIENT" "$@"; }
vaswani() { __docs_call vaswani "$@"; }
python() { if [ "${1:-}" = train.py ]; then shift; __docs_call train.py "$@"; else command python "$@"; fi; }
accelerate() {
  if [ "${1:-}" != launch ]; then command accelerate "$@"; return; fi
  shift
  while [ $# -gt 0 ] && [ "$1" != train.py ]; do shift; done
  shift
  __docs_call train.py "$@"
}
"""


def serve(path: str) -> None:
    """Run the commands the client sends, each in a forked child of this process."""
    import importlib
    import signal

    for name in PRELOAD:
        with contextlib.suppress(ImportError):  # what is not installed is imported by no command
            importlib.import_module(name)
    from vaswani.cli import main

    def reap(*_) -> None:  # waited for, so that their CPU time counts in this process's children's time
        try:
            while os.waitpid(-1, os.WNOHANG)[0]:
                pass
        except ChildProcessError:
            pass

    signal.signal(signal.SIGCHLD, reap)
    parent = os.getppid()
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path + ".tmp")
    server.listen(8)
    server.settimeout(2.0)  # to notice a test process that died without stopping the server
    os.rename(path + ".tmp", path)  # the client may connect from now on
    sys.stdout.flush()
    sys.stderr.flush()
    while True:
        try:
            connection, _ = server.accept()
        except TimeoutError:
            if os.getppid() != parent:
                return
            continue
        connection.settimeout(None)
        _, fds, _, _ = socket.recv_fds(connection, 1, 3)
        message = b""
        while chunk := connection.recv(65536):
            message += chunk
        request = json.loads(message)
        if os.fork() == 0:
            status = 70
            try:
                signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                server.close()
                for target, fd in enumerate(fds):
                    os.dup2(fd, target)
                    os.close(fd)
                # new stream objects: the server's own know its stdin as seekable /dev/null, not the caller's pipe
                sys.stdin = open(0, encoding="utf-8", closefd=False)  # noqa: SIM115
                sys.stdout = open(1, "w", encoding="utf-8", closefd=False)  # noqa: SIM115
                sys.stderr = open(2, "w", encoding="utf-8", buffering=1, errors="backslashreplace", closefd=False)  # noqa: SIM115
                os.chdir(request["cwd"])
                os.environ.clear()
                os.environ.update(request["env"])
                program, *argv = request["argv"]
                sys.argv = [program, *argv]
                try:
                    status = main(argv) if program == "vaswani" else main(["train", *argv])
                except SystemExit as exit_:
                    status = exit_.code if isinstance(exit_.code, int) else (0 if exit_.code is None else 1)
                except BaseException:
                    import traceback

                    traceback.print_exc()
                    status = 1
            finally:
                for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
                    stream.flush()
                connection.sendall(str(int(status or 0)).encode())
                os._exit(0)
        connection.close()
        for fd in fds:
            os.close(fd)


@pytest.fixture(scope="session")
def command_env(tmp_path_factory):
    """The environment of the bash blocks (and, unless REAL_COMMANDS, the running server it talks to)."""
    bin_dir = str(Path(sys.executable).parent)
    env = {
        **os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", "OMP_NUM_THREADS": "1",
        "PATH": os.pathsep.join([bin_dir, os.environ.get("PATH", "")]),  # as `source .venv/bin/activate` does
        "PYTHONPATH": os.pathsep.join([str(REPO_ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]),
    }  # fmt: skip
    if REAL_COMMANDS:
        yield env
        return
    folder = tmp_path_factory.mktemp("server")
    path = str(folder / "socket")
    (folder / "client.py").write_text(CLIENT, encoding="utf-8")
    log = open(folder / "server.log", "w")  # noqa: SIM115 (open for the server's lifetime)
    tests = str(Path(__file__).parent)
    process = subprocess.Popen(
        [sys.executable, "-c", f"import sys; sys.path.insert(0, {tests!r}); import test_docs; test_docs.serve({path!r})"],
        env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    deadline = time.monotonic() + 300
    while not os.path.exists(path):
        assert process.poll() is None, (folder / "server.log").read_text()
        assert time.monotonic() < deadline, "the command server did not start"
        time.sleep(0.1)
    yield {**env, "VASWANI_DOCS_SERVER": path, "VASWANI_DOCS_CLIENT": str(folder / "client.py"),
           "VASWANI_DOCS_PYTHON": sys.executable}  # fmt: skip
    time.sleep(0.5)  # the last command's child is reaped
    process.terminate()
    process.wait()
    log.close()


def run_bash(code: str, cwd: Path, env: dict, where: str) -> str:
    script = ("" if REAL_COMMANDS else SHIMS) + rewrite(code)
    result = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", script], cwd=cwd, env=env, capture_output=True,
                            text=True, timeout=600)  # fmt: skip
    assert result.returncode == 0, (
        f"{where}: the bash block failed (status {result.returncode})\n--- as run:\n{rewrite(code)}"
        f"--- stdout:\n{result.stdout[-3000:]}\n--- stderr:\n{result.stderr[-5000:]}"
    )
    return result.stdout


# ---------------------------------------------------------------------------------------------------------------------
# The workspace: tiny data and models under the names the examples use
# ---------------------------------------------------------------------------------------------------------------------
NUMBERS = [("one", "eins", "uno"), ("two", "zwei", "dos"), ("three", "drei", "tres"), ("four", "vier", "cuatro"),
           ("five", "fünf", "cinco"), ("six", "sechs", "seis"), ("seven", "sieben", "siete"), ("eight", "acht", "ocho")]  # fmt: skip
TEMPLATES = [
    ("I have {} cats.", "Ich habe {} Katzen.", "Tengo {} gatos."),
    ("The house has {} rooms.", "Das Haus hat {} Zimmer.", "La casa tiene {} habitaciones."),
    ("We need {} apples.", "Wir brauchen {} Äpfel.", "Necesitamos {} manzanas."),
    ("She bought {} books.", "Sie kaufte {} Bücher.", "Ella compró {} libros."),
    ("There are {} chairs in the room.", "Es gibt {} Stühle im Zimmer.", "Hay {} sillas en la habitación."),
]  # fmt: skip


def sentences() -> list[tuple[str, str, str]]:
    return [tuple(side.format(n) for side, n in zip(t, number, strict=True)) for t in TEMPLATES for number in NUMBERS]


def write_data(root: Path) -> None:
    triples = sentences()  # 40: train on all, validate and test on slices
    splits = {"train": triples, "valid": triples[::5], "test": triples[1::5]}
    (root / "data").mkdir()
    for split, rows in splits.items():
        for index, lang in ((0, "en"), (1, "de")):
            (root / "data" / f"{split}.{lang}").write_text("".join(row[index] + "\n" for row in rows), "utf-8")
    for name, rows in (("train", triples), ("validation", splits["valid"]), ("test", splits["test"])):
        lines = [
            json.dumps({"translation": dict(zip(("en", "de", "es"), row, strict=True))}, ensure_ascii=False)
            for row in rows
        ]
        (root / f"{name}.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    for lang in ("en", "de"):
        shutil.copy(root / "data" / f"train.{lang}", root / f"train.{lang}")
    shutil.copy(root / "data" / "train.en", root / "train.txt")
    shutil.copy(root / "data" / "valid.en", root / "valid.txt")
    for name in ("sentences.en", "input.txt", "input.en"):
        shutil.copy(root / "data" / "test.en", root / name)


def write_marian_folder(folder: Path, root: Path, languages: tuple[str, ...] = ()) -> None:
    """An OPUS-MT-like Marian folder (tests/convert/test_marian.py's tiny model, with sentencepiece models trained here);
    with `languages`, a multilingual one: a target-language token of each (`>>es<<`) after </s> and <unk>."""
    import io

    import sentencepiece as spm
    from test_marian import marian_model, marian_tokenizer

    triples = sentences()
    tokenizer_dir = root / "marian-tokenizer"
    tokenizer_dir.mkdir()
    pieces: dict[str, None] = {}
    for side, name in ((0, "source.spm"), (2, "target.spm")):
        model = io.BytesIO()
        spm.SentencePieceTrainer.train(
            sentence_iterator=iter(row[side] for row in triples), model_writer=model, vocab_size=60,
            character_coverage=1.0, model_type="unigram", minloglevel=2, num_threads=1, hard_vocab_limit=False,
        )  # fmt: skip
        (tokenizer_dir / name).write_bytes(model.getvalue())
        processor = spm.SentencePieceProcessor(model_proto=model.getvalue())
        for i in range(processor.get_piece_size()):
            if not (processor.is_control(i) or processor.is_unknown(i)):
                pieces[processor.id_to_piece(i)] = None
    vocab = ["</s>", "<unk>", *(f">>{code}<<" for code in languages), *pieces, "<pad>"]
    (tokenizer_dir / "vocab.json").write_text(json.dumps({t: i for i, t in enumerate(vocab)}), encoding="utf-8")
    marian_model(len(vocab)).save_pretrained(folder)
    marian_tokenizer(tokenizer_dir).save_pretrained(folder)
    shutil.rmtree(tokenizer_dir)


def write_fairseq_checkpoint(folder: Path) -> None:
    from test_fairseq import fairseq_args, write_checkpoint, write_dictionaries

    write_dictionaries(folder, languages=("en", "de"))
    write_checkpoint(folder / "model.pt", fairseq_args(source_lang="en", target_lang="de"))


@pytest.fixture(scope="session")
def workspace_template(tmp_path_factory, command_env) -> Path:
    root = tmp_path_factory.mktemp("workspace")
    for name in ("configs", "train.py"):
        (root / name).symlink_to(REPO_ROOT / name)
    venv = Path(sys.prefix)
    if (venv / "bin" / "activate").exists():
        (root / ".venv").symlink_to(venv)
    else:  # not a virtual environment: an activate script that does what the real one does for the examples
        (root / ".venv" / "bin").mkdir(parents=True)
        (root / ".venv" / "bin" / "activate").write_text(f'export PATH="{Path(sys.executable).parent}:$PATH"\n')
    write_data(root)
    write_marian_folder(root / "opus-mt-en-es", root)
    write_marian_folder(root / "opus-mt-en-roa", root, languages=("es", "fr", "it"))
    write_fairseq_checkpoint(root / "wmt16.en-de")
    run_bash(
        "vaswani train --train_file data/train --validation_file data/valid --test_file data/test --output_dir "
        "demo-output\n",
        root, command_env, "the workspace's demo-output",
    )  # fmt: skip
    shutil.rmtree(root / "demo-output" / "checkpoints")
    return root


# ---------------------------------------------------------------------------------------------------------------------
# The tests
# ---------------------------------------------------------------------------------------------------------------------
def check_language_models(outputs: dict[str, str]) -> None:
    """docs/language-models.md's Python examples print what its text says: the four sentences are learnt."""
    (causal,) = [out for code, out in outputs.items() if "VaswaniForCausalLM(config)" in code]
    printed = causal.splitlines()
    assert float(re.fullmatch(r"training perplexity (\S+)", printed[0]).group(1)) < 2.0
    assert printed[1].startswith("sat on the") and printed[2].startswith("a cat ")
    (masked,) = [out for code, out in outputs.items() if "VaswaniForMaskedLM(config)" in code]
    guesses = [re.fullmatch(r"'(.*)': (\S+)", line) for line in masked.splitlines()]
    assert len(guesses) == 3 and all(guesses) and sum(float(g.group(2)) for g in guesses) <= 1.0


CHECKS = {"docs/language-models.md": check_language_models}
NEEDS_EXTRA = {"serving.md": "fastapi"}  # the page's examples run `vaswani serve` (the serve extra)


@pytest.mark.slow
@pytest.mark.parametrize("page", PAGES, ids=page_id)
def test_the_examples_of_the_page_run(page, workspace_template, command_env, tmp_path, monkeypatch, capsys):
    if page.name in NEEDS_EXTRA:
        pytest.importorskip(NEEDS_EXTRA[page.name], reason=f"{page.name} needs an extra that is not installed")
    workspace = tmp_path / "workspace"
    shutil.copytree(workspace_template, workspace, symlinks=True)
    monkeypatch.chdir(workspace)
    namespace: dict = {"__name__": "__doc_example__"}
    outputs: dict[str, str] = {}
    for block in blocks(page):
        if block.not_run or block.language not in RUN_LANGUAGES:
            continue
        if block.language == "bash":
            outputs[block.code] = run_bash(block.code, workspace, command_env, block.where)
        else:
            capsys.readouterr()
            exec(compile(block.code, block.where, "exec"), namespace)
            outputs[block.code] = capsys.readouterr().out
    if page_id(page) in CHECKS:
        CHECKS[page_id(page)](outputs)


def test_every_fence_has_a_language_and_every_mark_a_reason():
    for page in PAGES:
        for block in blocks(page):
            assert block.language in RUN_LANGUAGES | QUIET_LANGUAGES, (
                f"{block.where}: fence language {block.language!r}"
            )
            if block.not_run is not None:
                assert block.not_run, f"{block.where}: `<!-- not run: REASON -->` needs its reason"
                assert block.language in RUN_LANGUAGES, f"{block.where}: a not-run mark on a block that is never run"
        text = page.read_text(encoding="utf-8")
        hidden = re.findall(r"^(?:[ \t]+```|~~~).*$", text, flags=re.MULTILINE)
        assert not hidden, f"{page_id(page)}: indented or ~~~ fences, which this test would not run: {hidden}"
        marks = len(re.findall(r"^<!--\s*not run", text, flags=re.MULTILINE))
        assert marks == sum(b.not_run is not None for b in blocks(page)), f"{page}: a not-run mark not before a fence"


def test_the_blocks_that_are_not_run_say_why():
    """The blocks that are not run, and why: few, and each for a reason the test cannot help."""
    not_run = {block.where: block.not_run for page in PAGES for block in blocks(page) if block.not_run}
    assert len(not_run) <= 10, not_run
    assert all(len(reason.split()) >= 2 for reason in not_run.values()), not_run


PUBLIC_IMPORTS = {"torch", "transformers", "modeling_vaswani", "tokenization", "omegaconf"}
# the Translator and what its methods take (`Sampling`), from the Translator's home
TRANSLATOR_NAMES = {("vaswani.inference.translator", "Translator"), ("vaswani.inference.translator", "Sampling")}


def test_the_python_examples_use_public_names_only():
    """The examples import our models and tokenizer through their packages, and of `vaswani` only the Translator (and
    the `Sampling` its methods take) from its home (not from `vaswani.translate`, its deprecated old home): the other modules inside `vaswani/` may move
    without breaking a reader's code."""
    import ast

    for page in PAGES:
        for block in blocks(page):
            if block.language != "python":
                continue
            for node in ast.walk(ast.parse(block.code)):
                if isinstance(node, ast.Import):
                    modules = [(alias.name, None) for alias in node.names]
                elif isinstance(node, ast.ImportFrom):
                    modules = [(node.module, alias.name) for alias in node.names]
                else:
                    continue
                for module, name in modules:
                    public = module.split(".")[0] in PUBLIC_IMPORTS or (module, name) in TRANSLATOR_NAMES
                    assert public, f"{block.where}: imports {module}{'.' + name if name else ''}, not a public name"


# What the docs say about the tests, and where the tests say the same: a count in the docs is checked here or removed.
TEST_CLAIMS = [
    (
        "docs/pretrained.md",
        "the tests compare beam search on 50 sentences",
        "tests/convert/test_marian.py",
        r"sentences\(50, ",
    ),
]


@pytest.mark.parametrize(("page", "claim", "test_file", "pattern"), TEST_CLAIMS, ids=[c[1] for c in TEST_CLAIMS])
def test_what_the_docs_say_of_the_tests_is_what_the_tests_do(page, claim, test_file, pattern):
    assert claim in " ".join((REPO_ROOT / page).read_text(encoding="utf-8").split())
    assert re.search(pattern, (REPO_ROOT / test_file).read_text(encoding="utf-8")), f"{test_file} no longer {claim}"


def slug(heading: str) -> str:
    """GitHub's anchor of a heading."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower().replace("`", ""))
    return text.replace(" ", "-")


def test_every_local_link_points_to_a_file_and_heading_that_exist():
    for page in PAGES:
        text = FENCE.sub("", page.read_text(encoding="utf-8"))
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+://|mailto:", target):
                continue
            path, _, anchor = target.partition("#")
            linked = (page.parent / path).resolve() if path else page
            assert linked.exists(), f"{page_id(page)}: link to {target}: no such file"
            if anchor and linked.suffix == ".md":
                headings = re.findall(r"^#+ (.*)$", FENCE.sub("", linked.read_text(encoding="utf-8")), re.MULTILINE)
                assert anchor in {slug(h) for h in headings}, f"{page_id(page)}: link to {target}: no such heading"


def test_the_readme_is_short_and_the_docs_are_pages_by_topic():
    assert len((REPO_ROOT / "README.md").read_text(encoding="utf-8").splitlines()) <= 200
    names = {page.name for page in PAGES}
    assert {"model.md", "tokenizer.md", "training.md", "translation.md", "reliability.md", "performance.md",
            "layout.md"} <= names  # fmt: skip
    readme = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    for page in PAGES[1:]:
        assert f"docs/{page.name}" in readme, f"the README links no docs/{page.name}"
