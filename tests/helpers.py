"""Small helpers shared by test modules (fixtures live in conftest.py)."""

from __future__ import annotations

import os


def drain(fd: int) -> str:
    """Whatever a non-blocking pipe holds right now."""
    try:
        return os.read(fd, 1 << 16).decode("utf-8", "replace")
    except BlockingIOError:
        return ""


def files_done(progress_output: str, total: int) -> int | None:
    """The latest "N/total files" count from the CLI's progress bar output."""
    counts = [
        int(part.split("/")[0].split()[-1])
        for part in progress_output.split("\r")
        if f"/{total} files" in part
    ]
    return counts[-1] if counts else None
