"""Small helpers shared by test modules (fixtures live in conftest.py)."""

from __future__ import annotations

import os
from pathlib import Path


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


def write_files(folder: Path, files: dict[str, str]) -> Path:
    """``folder`` made and filled with ``files`` (name -> UTF-8 text)."""
    folder.mkdir(parents=True)
    for name, text in files.items():
        (folder / name).write_text(text, encoding="utf-8")
    return folder
