"""Small helpers shared by test modules (fixtures live in conftest.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from core.records import Hit

REPO = Path(__file__).resolve().parents[1]


def lectern_env(home: Path, **extra: str) -> dict[str, str]:
    """This process's environment for a ``lectern`` child on the library in ``home``:
    no model server address or debug switch leaks in from the machine, only ``extra``'s."""
    env = {k: v for k, v in os.environ.items() if k not in ("OLLAMA_HOST", "LECTERN_DEBUG")}
    return {
        **env,
        "LECTERN_HOME": str(home),
        "HF_HUB_OFFLINE": "1",
        "PYTHONPATH": str(REPO),
        **extra,
    }


def cli(home: Path, *args: str, cwd: Path = REPO, **extra: str) -> subprocess.CompletedProcess[str]:
    """``lectern ARGS`` in a child process, its output in pipes (not a terminal)."""
    return subprocess.run(
        [sys.executable, "-m", "core", *args],
        cwd=cwd,
        env=lectern_env(home, **extra),
        capture_output=True,
        text=True,
        timeout=300,
    )


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


def text_hit(text: str, n: int = 1, *, path: str | None = None, score: float = 1.0) -> Hit:
    """A retrieved plain-text passage ``n`` (its whole document), for tests of what is
    built from hits (prompts, citations, scores) without a library."""
    return Hit(
        chunk_id=n,
        document_id=n,
        path=path or f"/docs/source-{n}.txt",
        title=f"Source {n}",
        type="txt",
        text=text,
        start=0,
        end=len(text),
        page=None,
        page_end=None,
        heading_path=(),
        score=score,
    )
