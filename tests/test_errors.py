"""vaswani/errors.py: the three ways a command fails (issue 28, item 3), each told apart and reported truthfully.

A user's mistake is one `error:` line and status 2; the machine refusing (full disk, permission, network) is one
line naming the operation, the path or host and the OS error, status 1, no traceback; anything else is a bug: its
traceback and a request to report it, status 1. VASWANI_DEBUG=1 shows the traceback in every case.
"""

from __future__ import annotations

import errno
import os
import subprocess
import sys

import pytest
from conftest import REPO_ROOT

from vaswani.cli import main
from vaswani.errors import (
    EnvironmentFailure,
    ExportError,
    UsageError,
    UserError,
    is_environment_failure,
    run_command,
)


def fails_with(error: BaseException):
    def run():
        raise error

    return run


def test_a_user_mistake_is_one_line_and_status_2(capsys):
    assert run_command(fails_with(UsageError("--num_beams 0 is not allowed; use a positive integer."))) == 2
    assert capsys.readouterr().err == "error: --num_beams 0 is not allowed; use a positive integer.\n"


@pytest.mark.parametrize(
    "error",
    [
        OSError(errno.ENOSPC, "No space left on device", "/data/run/model.safetensors"),
        PermissionError(errno.EACCES, "Permission denied", "/data/in.txt"),
        ConnectionRefusedError(errno.ECONNREFUSED, "Connection refused"),
    ],
)
def test_the_machine_refusing_is_one_line_naming_path_and_os_error_and_status_1(error, capsys):
    assert run_command(fails_with(error)) == 1
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and err.startswith("error: the system refused an operation")
    assert error.strerror in err and "Traceback" not in err and "report" not in err
    if error.filename:
        assert error.filename in err


def test_an_environment_failure_names_the_operation(capsys):
    full = OSError(errno.ENOSPC, "No space left on device")
    assert run_command(fails_with(EnvironmentFailure("writing", "/runs/x/README.md", full))) == 1
    assert capsys.readouterr().err == "error: writing /runs/x/README.md failed: No space left on device\n"


@pytest.mark.parametrize(
    "error",
    [
        OSError("an internal OSError of the package"),
        FileNotFoundError(errno.ENOENT, "No such file or directory", "/tmp/what-the-code-expected"),
        UnicodeDecodeError("utf-8", b"\xff", 0, 1, "invalid start byte"),
        ValueError("a wrong value inside the package"),
        KeyError("missing"),
    ],
)
def test_anything_else_is_a_bug_with_its_traceback_and_status_1(error, capsys):
    assert run_command(fails_with(error)) == 1
    err = capsys.readouterr().err
    assert "Traceback (most recent call last)" in err and "in run\n" in err  # the frame that raised it
    assert err.splitlines()[-1].startswith("error: this is a bug in vaswani") and "report it" in err


def test_vaswani_debug_shows_the_traceback_of_a_user_mistake_too(monkeypatch, capsys):
    monkeypatch.setenv("VASWANI_DEBUG", "1")
    assert run_command(fails_with(UsageError("bad option"))) == 2
    err = capsys.readouterr().err
    assert "Traceback (most recent call last)" in err and err.splitlines()[-1] == "error: bad option"
    full = EnvironmentFailure("writing", "x", OSError(errno.ENOSPC, "No space left on device"))
    assert run_command(fails_with(full)) == 1
    assert "Traceback (most recent call last)" in capsys.readouterr().err


def test_export_errors_are_user_errors_and_classification_of_os_errors():
    assert issubclass(ExportError, UserError)
    assert is_environment_failure(OSError(errno.EROFS, "Read-only file system"))
    assert is_environment_failure(TimeoutError())
    assert not is_environment_failure(FileNotFoundError(errno.ENOENT, "No such file or directory"))
    assert not is_environment_failure(OSError("no errno"))


# --- through the commands -------------------------------------------------------------------------------------------


def test_a_missing_input_file_is_the_one_liner(model_folder, tmp_path, capsys):
    status = main(["translate", "--model", str(model_folder), "--input", str(tmp_path / "missing.en")])
    err = capsys.readouterr().err
    assert status == 2 and err == f"error: no such input file: {tmp_path / 'missing.en'}\n"


def test_a_full_disk_while_writing_is_the_environment_line(model_folder, tmp_path, monkeypatch, capsys):
    """`vaswani card --output` writes through vaswani.fileio.atomic_output; the disk fills up at its fsync."""
    import vaswani.fileio

    def full_disk(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(vaswani.fileio.os, "fsync", full_disk)
    output = tmp_path / "card.md"
    status = main(["card", "--model", str(model_folder), "--output", str(output)])
    err = capsys.readouterr().err
    assert status == 1 and err == f"error: writing {output} failed: No space left on device\n"
    assert not output.exists() and list(tmp_path.iterdir()) == []  # nothing half-written left behind


def test_an_internal_os_error_shows_its_traceback(model_folder, tmp_path, monkeypatch, capsys):
    import vaswani.hub.model_card

    def broken(*args, **kwargs):
        raise OSError("a bug: the code opened a file it never wrote")

    monkeypatch.setattr(vaswani.hub.model_card, "render_model_card", broken)
    status = main(["card", "--model", str(model_folder), "--output", str(tmp_path / "card.md")])
    err = capsys.readouterr().err
    assert status == 1 and "Traceback (most recent call last)" in err and "in broken" in err
    assert "this is a bug in vaswani (OSError: a bug: the code opened a file it never wrote)" in err


def test_a_refused_network_on_push_is_the_environment_line(model_folder, monkeypatch, capsys):
    from huggingface_hub import HfApi

    def refused(*args, **kwargs):
        raise ConnectionRefusedError(errno.ECONNREFUSED, "Connection refused")

    monkeypatch.setattr(HfApi, "create_repo", refused)
    status = main(["push", "--model", str(model_folder), "--hub_model_id", "someone/tiny"])
    err = capsys.readouterr().err
    assert status == 1 and len(err.splitlines()) == 1, err
    assert err.startswith("error: uploading to the Hub at http") and err.endswith("failed: Connection refused\n")


def test_a_real_command_process_prints_no_traceback_for_a_mistake_and_one_for_debug(tmp_path):
    """The same through a real `python -m vaswani.cli` process, as a user runs it."""
    command = [sys.executable, "-m", "vaswani.cli", "translate", "--model", str(tmp_path / "nowhere")]
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    quiet = subprocess.run(command, capture_output=True, text=True, cwd=REPO_ROOT, env=env, timeout=120)
    assert quiet.returncode == 2 and "Traceback" not in quiet.stderr and quiet.stderr.startswith("error: ")
    loud = subprocess.run(command, capture_output=True, text=True, cwd=REPO_ROOT, env={**env, "VASWANI_DEBUG": "1"},
                          timeout=120)  # fmt: skip
    assert loud.returncode == 2 and "Traceback (most recent call last)" in loud.stderr
