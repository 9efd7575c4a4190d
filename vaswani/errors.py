"""The three ways a command can fail, and the one place that reports them (`run_command`).

1. A `UserError` is a mistake in a command line or in the files it names (a missing folder, a damaged checkpoint,
   data that does not parse, a model that does not fit its tokenizer). Its message names the problem and the fix;
   it is printed as `error: <message>` on stderr, exit status 2, without a traceback. The modules raise subclasses
   that say where the mistake was found (`DataError`, `CheckpointError`, `ModelFolderError`, ...), so that Python
   callers can catch one kind.
2. An `EnvironmentFailure` is the machine refusing: a full disk, a permission denied, a read-only file system, a
   network that refuses the connection. One line names the operation, the path or host and the OS error; exit
   status 1, no traceback and no request to report it (nothing is wrong with the program or the input). An
   `OSError` whose errno says the same (`ENVIRONMENT_ERRNOS`) is reported the same way where no module wrapped it.
3. Anything else is a bug: its traceback, then a line asking to report it; exit status 1. A bug never hides behind
   a user error: only the package's own `UserError`s are printed as mistakes, never a stray `OSError`,
   `UnicodeError` or `ValueError`.

`VASWANI_DEBUG=1` in the environment prints the traceback in every case. Every command (`vaswani ...`, `train.py`,
`python -m tokenization train`) runs through `run_command`.
"""

from __future__ import annotations

import errno
import os
import sys
import traceback
from collections.abc import Callable

# OS errors that say the machine refused, not that the program or its input is wrong.
ENVIRONMENT_ERRNOS = frozenset(
    getattr(errno, name) for name in (
        "ENOSPC", "EDQUOT", "EACCES", "EPERM", "EROFS", "EIO", "EMFILE", "ENFILE", "ENOMEM", "EFBIG", "ETXTBSY",
        "ECONNREFUSED", "ECONNRESET", "ECONNABORTED", "ETIMEDOUT", "EHOSTUNREACH", "ENETUNREACH", "ENETDOWN",
        "EHOSTDOWN", "EADDRINUSE", "EADDRNOTAVAIL",
    ) if hasattr(errno, name)
)  # fmt: skip


class UserError(ValueError):
    """A mistake in a command line or in the files it names; reported as `error: <message>`, exit status 2."""


class UsageError(UserError):
    """A mistake in the options of a command (a wrong value, a missing or contradictory option)."""


class Interrupted(Exception):
    """A run stopped by SIGINT (Ctrl-C) or SIGTERM after saving what a resume needs (`vaswani train`: a checkpoint);
    its log said so. The exit status is 128 + the signal's number, as a shell reports a process the signal ended."""

    def __init__(self, signum: int):
        super().__init__(f"stopped by signal {signum}")
        self.signum = signum


class ReportedElsewhere(UserError):
    """Another process of the same multi-process run failed and reports why; this one stops with status 2 without
    printing anything (`vaswani.training.distributed.together` and `main_process_first`)."""


# The errors of each stage: where the mistake was found.
class DataError(UserError):
    """A mistake in the data or in the data arguments; the message names the file (and line), the problem and the fix.

    train.py prints ``error: <message>`` and exits with status 2, without a traceback.
    """


class CheckpointError(UserError):
    """A checkpoint that is missing, incomplete or does not fit (a user mistake, reported without a traceback)."""


class ModelFolderError(UserError):
    """A model folder that cannot be used or written as asked; the message names the file and the fix."""


class TranslateError(UserError):
    """A translation cannot run as asked (a bad device or length). The message names the problem and the fix; the
    command line prints it without a traceback."""


class ExportError(UserError):
    """The model cannot be exported as asked (a model CTranslate2 cannot run, a quantization it lacks); the message
    names what and why."""


class PushError(UserError):
    """A model folder cannot be pushed (bad repo id, incomplete folder) or the Hub refused the upload."""


class ConvertError(UserError):
    """A model folder that cannot be converted; the message names the file or field and why."""


class EnvironmentFailure(Exception):
    """The machine refused an operation (disk full, permission denied, network refused): `operation` ("writing",
    "uploading to the Hub"), `target` (a path or a host) and the OS error, in one line."""

    def __init__(self, operation: str, target: object, error: BaseException):
        reason = (
            error.strerror if isinstance(error, OSError) and error.strerror else str(error) or type(error).__name__
        )
        super().__init__(f"{operation} {target} failed: {reason}")
        self.operation, self.target, self.error = operation, target, error


def is_environment_failure(error: BaseException) -> bool:
    """Whether `error` says the machine refused (a full disk, a denied permission, a refused connection)."""
    return isinstance(error, (ConnectionError, TimeoutError)) or (
        isinstance(error, OSError) and error.errno in ENVIRONMENT_ERRNOS
    )


def _environment_line(error: OSError) -> str:
    """`error`'s one line: the operation (the innermost function of the package that was running), the path or host
    and the OS error."""
    frames = [frame for frame in traceback.extract_tb(error.__traceback__) if "vaswani" in frame.filename]
    where = f" in {frames[-1].name}()" if frames else ""
    target = f" {error.filename!r}" if error.filename is not None else ""
    if error.filename2 is not None:
        target += f" -> {error.filename2!r}"
    return f"the system refused an operation{where} on{target or ' the machine'}: {error.strerror or error}"


def run_command(run: Callable[[], int | None]) -> int:
    """Call `run` (a command's body) and return its exit status: 0 (or what it returns); 2 with `error: ...` for a
    user mistake; 1 with `error: ...` when the machine refused an operation; 1 with the traceback for a bug; 1 when
    the reader of stdout went away; 130 on Ctrl-C; 128 + the signal's number for a run that stopped in good order on
    one (`Interrupted`)."""
    debug = os.environ.get("VASWANI_DEBUG", "") not in ("", "0")
    try:
        return run() or 0
    except BrokenPipeError:  # the reader of stdout went away (`vaswani translate ... | head`)
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # so that the exit's flush does not fail
        return 1
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except Interrupted as stop:  # stopped in good order: the log said where, and how to continue
        return 128 + stop.signum
    except ReportedElsewhere:
        return 2
    except UserError as error:
        _report(f"error: {error}", error if debug else None)
        return 2
    except EnvironmentFailure as error:
        _report(f"error: {error}", error if debug else None)
        return 1
    except Exception as error:
        if is_environment_failure(error):
            _report(f"error: {_environment_line(error)}", error if debug else None)
            return 1
        _report(
            f"error: this is a bug in vaswani ({type(error).__name__}: {error}), not a mistake of yours; please "
            "report it with the traceback above on the project's issue tracker",
            error,
        )
        return 1


def _report(line: str, error: BaseException | None) -> None:
    """`line` on stderr, after `error`'s traceback when one is given."""
    if error is not None:
        traceback.print_exception(error, file=sys.stderr)
    print(line, file=sys.stderr)
