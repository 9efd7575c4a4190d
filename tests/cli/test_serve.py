"""vaswani/cli/serve.py: `vaswani serve` as a user starts it (SIGTERM answers the requests in flight), its start-up
errors, its options, and what it says without the serve extra. (The HTTP side: tests/serve/test_app.py.)"""

from __future__ import annotations

import contextlib
import json
import signal
import socket
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from conftest import REPO_ROOT

pytest.importorskip("fastapi", reason="the serve extra is not installed: pip install -e '.[serve]'")

from test_app import LEARNED, post_json, request  # noqa: E402

from vaswani.cli import build_parser, main  # noqa: E402
from vaswani.errors import UserError  # noqa: E402


@pytest.fixture(scope="module")
def translator(model_folder):
    from vaswani.inference.translator import Translator

    return Translator(model_folder, device="cpu")


@pytest.mark.slow
def test_the_command_serves_and_sigterm_finishes_the_requests_in_flight(model_folder, tmp_path, translator):
    port = free_loopback_port()
    log = tmp_path / "server.log"
    command = [sys.executable, "-m", "vaswani.cli", "serve", "--model", f"en-de={model_folder}", "--port", str(port),
               "--max_wait_ms", "1500", "--threads", "1"]  # fmt: skip
    with open(log, "w") as output:
        process = subprocess.Popen(command, cwd=REPO_ROOT, stdout=output, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 120
        while True:
            assert process.poll() is None and time.monotonic() < deadline, log.read_text()
            with contextlib.suppress(OSError):
                if request(("127.0.0.1", port), "GET", "/health")[0] == 200:
                    break
            time.sleep(0.2)
        with ThreadPoolExecutor(2) as pool:  # both wait 1.5 s in the batcher when SIGTERM comes
            pending = [pool.submit(post_json, ("127.0.0.1", port), "/translate",
                                   {"q": text, "source": "en", "target": "de"}) for text in LEARNED[:2]]  # fmt: skip
            time.sleep(0.5)
            process.send_signal(signal.SIGTERM)
            answers = [future.result(timeout=60) for future in pending]
        assert process.wait(timeout=60) in (0, -signal.SIGTERM), log.read_text()  # uvicorn exits by the signal
    finally:
        if process.poll() is None:
            process.kill()
    assert [(status, answer["translatedText"]) for status, answer, _ in answers] == [
        (200, text) for text in translator.translate(LEARNED[:2])
    ]
    logged = log.read_text()
    assert logged.index("Shutting down") < logged.index("POST /translate 200") < logged.index("shutdown complete")
    assert LEARNED[0] not in logged  # sizes and timings only
    if sys.platform != "win32":  # the serve extra's HTTP stack (uvloop is not built for Windows)
        assert "HTTP: uvicorn with the httptools parser and the uvloop event loop" in logged


def free_loopback_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def write_run_args(folder: Path, **run_args) -> Path:
    """A folder with a config.json (what serve checks before the loader, replaced in these tests, reads the model)
    and a run_args.json of `run_args`."""
    folder.mkdir()
    (folder / "config.json").write_text("{}", encoding="utf-8")
    (folder / "run_args.json").write_text(json.dumps(run_args), encoding="utf-8")
    return folder


@pytest.mark.parametrize(
    ("arguments", "problem"),
    [
        (
            ["--model", "{plain}"],
            "the language pair of {plain} cannot be told: it has no run_args.json; name the pair",
        ),
        (["--model", "{odd}"], "names no usable language pair (source_lang='en', target_lang=None)"),
        (["--model", "{missing}"], "--model {missing}: no such folder"),
        (["--model", "{empty}"], "--model {empty} is not a model folder (no config.json): give a folder that"),
        (["--model", "de-fr={empty}"], "--model {empty} is not a model folder (no config.json)"),
        (["--model", "en-en={plain}"], "the source and target language are both 'en'"),
        (["--model", "{trained}", "--api_keys", "{bad_keys}"], "line 2: expected `KEY` or `KEY REQUESTS_PER_MINUTE`"),
        (["--model", "{trained}", "--api_keys", "{empty_keys}"], "holds no key"),
    ],
)
def test_start_up_errors_name_the_problem_and_the_fix(arguments, problem, tmp_path, capsys):
    paths = {"plain": tmp_path / "plain", "missing": tmp_path / "missing",
             "odd": write_run_args(tmp_path / "odd", source_lang="en"),
             "trained": write_run_args(tmp_path / "trained", source_lang="en", target_lang="de"),
             "bad_keys": tmp_path / "bad_keys", "empty_keys": tmp_path / "empty_keys", "empty": tmp_path / "empty"}  # fmt: skip
    paths["plain"].mkdir()
    (paths["plain"] / "config.json").write_text("{}", encoding="utf-8")  # a model folder without run_args.json
    paths["empty"].mkdir()
    paths["bad_keys"].write_text("one\ntwo three\n")
    paths["empty_keys"].write_text("# nothing\n\n")
    assert main(["serve", *(argument.format(**paths) for argument in arguments)]) == 2
    error = capsys.readouterr().err
    assert error.startswith("error: ") and problem.format(**paths) in error, error


@pytest.mark.parametrize(
    ("option", "value", "problem"),
    [
        ("--port", "70000", "must be from 0 to 65535"),
        ("--port", "http", "expected a port number"),
        ("--max_wait_ms", "-1", "must be a finite number of at least 0"),
        ("--max_wait_ms", "inf", "must be a finite number of at least 0"),
        ("--max_request_seconds", "inf", "must be a number above 0"),
        ("--rate_limit", "-1", "must be a number above 0"),
        ("--max_request_characters", "0", "must be at least 1"),
        ("--mixed_precision", "fp8", "invalid choice"),
    ],
)
def test_bad_option_values_are_refused_by_the_parser(option, value, problem, capsys):
    assert main(["serve", "--model", "x", option, value]) == 2
    assert problem in capsys.readouterr().err


def test_an_address_in_use_or_not_on_this_machine_is_refused_before_the_models_load(monkeypatch, tmp_path, capsys):
    """uvicorn binds after start-up: it logged the OS error and exited with status 3 once every model had loaded."""
    from vaswani.cli import serve

    loaded = []
    monkeypatch.setattr(serve, "_load_translator", lambda folders, args: loaded.append(folders))
    trained = write_run_args(tmp_path / "trained", source_lang="de", target_lang="fr")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert main(["serve", "--model", str(trained), "--port", str(port)]) == 2
    error = capsys.readouterr().err
    assert error.startswith(f"error: --port {port}: 127.0.0.1:{port} is already in use") and error.count("\n") == 1
    assert "choose another --port" in error
    # 192.0.2.1: an address for documentation (RFC 5737), on no machine
    assert main(["serve", "--model", str(trained), "--host", "192.0.2.1"]) == 2
    error = capsys.readouterr().err
    assert error.startswith("error: --host 192.0.2.1: cannot listen on 192.0.2.1:5000") and error.count("\n") == 1
    assert not loaded


def test_the_options_reach_the_server_settings(monkeypatch, tmp_path):
    from vaswani.cli import serve

    seen = {}

    def bound_here(host, port):  # the address asked for, and a socket on this machine's loopback (::1 may not be)
        seen.update(host=host, port=port)
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        return sock

    monkeypatch.setattr("vaswani.serve.app.listening_socket", bound_here)
    monkeypatch.setattr("vaswani.serve.app.run_server", lambda app, sock, **kw: seen.update(
        settings=app.state.server.settings, slots=app.state.server.batcher.slots, sock=sock,
        budget=app.state.server.batcher.max_tokens, **kw))  # fmt: skip
    monkeypatch.setattr(
        serve, "_load_translator", lambda folders, args: seen.setdefault("folders", folders) and _Fake()
    )
    trained = write_run_args(tmp_path / "trained", source_lang="de", target_lang="fr")
    assert main(["serve", "--model", str(trained), "--host", "::1", "--port", "0", "--max_tokens", "512",
                 "--max_wait_ms", "25", "--max_request_characters", "99", "--max_request_seconds", "7", "--rate_limit", "6",
                 "--cors_origins", "https://a.org", "https://b.org", "--num_beams", "2", "--log_texts", "--no_web_ui"]) == 0  # fmt: skip
    settings = seen["settings"]
    assert (seen["host"], seen["port"], seen["graceful_seconds"], seen["folders"]) == ("::1", 0, 12.0, [trained])
    assert seen["sock"].fileno() == -1  # closed when the server ends
    assert (settings.max_tokens, settings.max_wait, settings.rate_limit, settings.num_beams) == (512, 0.025, 6.0, 2)
    assert seen["budget"] == 512
    assert (settings.limits.max_request_characters, settings.limits.max_request_seconds) == (99, 7.0)
    assert settings.cors_origins == ["https://a.org", "https://b.org"] and settings.log_texts
    assert seen["slots"] == {(trained.resolve(),): 3}  # the translator's parallel batches decode at once
    assert settings.web_ui is False and settings.max_wait == 0.025
    assert main(["serve", "--model", str(trained)]) == 0  # the defaults: the page on, no wait for company
    assert seen["settings"].web_ui is True and seen["settings"].max_wait == 0.0
    assert seen["settings"].max_tokens is None and seen["budget"] == 1536  # the translator's default batch


def test_parallel_batches_sets_the_ctranslate2_workers_and_each_batch_stays_whole(model_folder, tmp_path, capsys):
    pytest.importorskip("ctranslate2")
    import torch

    from vaswani.cli.serve import _load_translator

    export = tmp_path / "ct2"
    assert main(["export", "--model", str(model_folder), "--output_dir", str(export)]) == 0
    threads = torch.get_num_threads()
    try:
        for given, expected in ((None, 2), ("1", 1), ("2", 2)):
            argv = ["serve", "--model", str(export), "--threads", "2"] + (
                ["--parallel_batches", given] if given else []
            )
            args = build_parser("serve").parse_args(argv)
            torch.set_num_threads(args.threads)  # as the command does before loading
            translator = _load_translator([export], args)
            assert translator.parallel_batches == expected and not translator.engine.split_batches
    finally:
        torch.set_num_threads(threads)
    assert main(["serve", "--model", f"en-de={model_folder}", "--parallel_batches", "2"]) == 2
    assert "parallel_batches=2 needs the ctranslate2 backend" in capsys.readouterr().err
    assert main(["serve", "--model", "x", "--parallel_batches", "0"]) == 2
    assert "--parallel_batches: must be at least 1" in capsys.readouterr().err


class _Fake:
    """A translator stand-in for the option test (nothing is translated)."""

    tokenizer = None
    parallel_batches = 3
    batch_tokens = 1536  # its default batch (512 per thread of 3 workers)
    target_languages = {}  # a model of one target language


def test_without_the_serve_extra_the_command_says_how_to_install_it(monkeypatch, capsys):
    monkeypatch.delitem(sys.modules, "vaswani.serve.app")
    monkeypatch.setitem(sys.modules, "fastapi", None)  # as if FastAPI were not installed
    assert main(["serve", "--model", "somewhere"]) == 2
    assert "vaswani serve needs the serve extra (fastapi is missing): pip install" in capsys.readouterr().err


def test_two_folders_for_one_pair_are_an_ensemble(model_folder, tmp_path):
    """As repeated --model in vaswani translate: an ensemble of a model with itself translates as that model does,
    and a folder that cannot join an ensemble (a CTranslate2 export) is refused at start-up."""
    from vaswani.cli.serve import _load_translator
    from vaswani.serve.models import ModelSpec, load_models

    args = build_parser("serve").parse_args(["serve", "--model", str(model_folder)])
    loaded = []
    table = load_models([ModelSpec(model_folder, ("en", "de")), ModelSpec(model_folder, ("en", "de"))],
                        lambda folders: loaded.append(folders) or _load_translator(folders, args))  # fmt: skip
    assert loaded == [[model_folder, model_folder]] and list(table) == [("en", "de")]
    single = _load_translator([model_folder], args)
    sentences = ["the cat sleeps", "a dog"]
    assert table[("en", "de")].translator.translate(sentences) == single.translate(sentences)
    pytest.importorskip("ctranslate2")
    export = tmp_path / "ct2"
    assert main(["export", "--model", str(model_folder), "--output_dir", str(export)]) == 0
    with pytest.raises(UserError):
        _load_translator([model_folder, export], args)
