"""What the CLI's commands share: opening the library and the progress bar."""

from __future__ import annotations

import os
import sys
import time
from typing import TYPE_CHECKING, TextIO

from core.records import IndexProgress
from core.throttle import BUSY_WAITING

if TYPE_CHECKING:
    from pathlib import Path

    from core.errors import IndexBusyError
    from core.ipc import RemoteLibrary
    from core.library import Library


def _fmt_duration(seconds: float | None) -> str:
    if seconds is None:
        return "--:--"
    seconds = int(seconds)
    return (
        f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"
        if seconds >= 3600
        else f"{seconds // 60:02d}:{seconds % 60:02d}"
    )


class ProgressBar:
    """A one-line progress bar on stderr: files and chunks done, rate, time left."""

    def __init__(self, stream: TextIO | None = None, min_interval: float = 0.2) -> None:
        # Looked up per bar, not bound at import: sys.stderr may have been replaced since.
        self.stream = stream or sys.stderr
        self.enabled = self.stream.isatty() or os.environ.get("LECTERN_PROGRESS") == "1"
        self.min_interval = min_interval
        self._last = 0.0
        self._shown = False
        self._waiting = ""

    def __call__(self, p: IndexProgress) -> None:
        now = time.monotonic()
        final = p.finished
        changed = p.waiting_reason != self._waiting
        if not self.enabled or (now - self._last < self.min_interval and not final and not changed):
            return
        self._last = now
        self._waiting = p.waiting_reason
        if p.waiting_reason:
            line = f"\r{p.files_done}/{p.files_total} files  {BUSY_WAITING}"
            self.stream.write(line[:160].ljust(100))
            self.stream.flush()
            self._shown = True
            return
        width = 28
        frac = p.fraction
        bar = "█" * int(width * frac) + "░" * (width - int(width * frac))
        chunk_rate = p.passages_embedded / p.elapsed_s if p.elapsed_s > 0 else 0.0
        line = (
            f"\r{bar} {p.files_done}/{p.files_total} files  "
            f"embedded {p.passages_embedded}/{p.passages_total}  "
            f"{chunk_rate:.1f} passages/s  ETA {_fmt_duration(p.eta_s)}"
        )
        if p.failed:
            line += f"  {p.failed} failed"
        self.stream.write(line[:160].ljust(100))
        self.stream.flush()
        self._shown = True

    def close(self) -> None:
        if self._shown:
            self.stream.write("\n")
            self.stream.flush()


def open_library(*, migrate: bool = False) -> Library:
    """The library in the configured data folder; repairs made at open are told once.
    ``migrate``: whether a change of model re-embeds in the background meanwhile (for
    the commands that index; a short command would only load a model for nothing)."""
    from core.library import Library

    library = Library(migrate=migrate)
    # What was repaired at open is said once, where the person is looking.
    for notice in library.recovery_notices:
        print(f"{notice.message} {notice.hint}".strip(), file=sys.stderr)
        if notice.kept_at:
            print(f"  (kept at {notice.kept_at})", file=sys.stderr)
    return library


# Said on standard error, where the other notes about how a command ran go, so that
# standard output (and its --json line) is the same as when the command runs alone.
ANSWERED_REMOTELY = "(answered by the running Lectern)"


def running_library(busy: IndexBusyError, home: Path) -> RemoteLibrary:
    """The Lectern process that holds the library, for a command that only reads;
    ``busy`` again when none answers (it stopped, or predates answering: core/ipc.py)."""
    from core.ipc import connect

    remote = connect(home)
    if remote is None:
        raise busy
    print(ANSWERED_REMOTELY, file=sys.stderr)
    return remote


def open_reader() -> Library | RemoteLibrary:
    """The library for ``search`` and ``status``: opened here, or, while ``lectern watch``,
    ``lectern index`` or the app holds it, asked through that process."""
    from core.config import data_dir
    from core.errors import IndexBusyError

    try:
        return open_library()
    except IndexBusyError as busy:
        return running_library(busy, data_dir())
