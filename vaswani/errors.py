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
    printing anything (`vaswani.train.together` and `main_process_first`)."""


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
