"""The one user-error type of every command, and the one place that reports it.

A `UserError` is a mistake in a command line or in the files it names (a missing folder, a damaged checkpoint, data
that does not parse, a model that does not fit its tokenizer). Its message names the problem and the fix. Every
command (`vaswani ...`, `train.py`, `python -m tokenization train`) runs through `run_command`, which prints it as
`error: <message>` on stderr and exits with status 2, without a traceback. The modules raise subclasses that say
where the mistake was found (`DataError`, `CheckpointError`, `ModelFolderError`, ...), so that Python callers can
catch one kind; commands only ever catch `UserError`.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable


class UserError(ValueError):
    """A mistake in a command line or in the files it names; reported as `error: <message>`, exit status 2."""


class UsageError(UserError):
    """A mistake in the options of a command (a wrong value, a missing or contradictory option)."""


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


class ExportError(ValueError):
    """The model cannot be exported as asked; the message names what and why."""


class PushError(UserError):
    """A model folder cannot be pushed (bad repo id, incomplete folder) or the Hub refused the upload."""


class ConvertError(UserError):
    """A model folder that cannot be converted; the message names the file or field and why."""


# Besides our own errors, a file that cannot be read or written (OSError) or decoded (UnicodeError) is the user's to
# fix, and its message names the file.
USER_ERRORS = (UserError, UnicodeError, OSError)


def run_command(run: Callable[[], int | None]) -> int:
    """Call `run` (a command's body) and return its exit status: 0 (or what it returns), 2 with `error: ...` on
    stderr for a user mistake, 1 when the reader of stdout went away, 130 on Ctrl-C."""
    try:
        return run() or 0
    except BrokenPipeError:  # the reader of stdout went away (`vaswani translate ... | head`)
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # so that the exit's flush does not fail
        return 1
    except USER_ERRORS as error:
        if not isinstance(error, ReportedElsewhere):
            print(f"error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
