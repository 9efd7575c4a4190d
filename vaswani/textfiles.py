"""The one line counter of the package (progress bars of `vaswani translate`, `vaswani tokenizer`, data checks).

Kept in a module of its own with no heavy imports, so that commands can size a progress bar before loading torch,
transformers or datasets.
"""

from __future__ import annotations

import os


def count_lines(path: str | os.PathLike) -> int:
    """Number of lines in the file at `path`, in one fast binary pass; a last line without "\\n" counts (as
    Python's line iteration and `vaswani.data.loading.read_lines` see it)."""
    lines, last = 0, b"\n"
    with open(path, "rb") as stream:
        while chunk := stream.read(1 << 24):
            lines += chunk.count(b"\n")
            last = chunk[-1:]
    return lines + (last != b"\n")
