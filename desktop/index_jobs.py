"""The desktop's index work: what a job is, the queue of jobs waiting, and what running
one does on the engine thread. The backend decides when a job starts and what its
outcome means for the window."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from core.records import IndexProgress, IndexReport
from desktop.workers import Task

if TYPE_CHECKING:
    from core.library import Library

FOLDERS_ADDED = "folders_added"  # progress value: the new folders are in the library


@dataclass
class IndexJob:
    paths: list[str] | None  # None: every library folder
    files: list[str] | None = None  # only these files (a retry or a watcher batch)
    retry: bool = False
    controls: Any = None
    task: Task | None = None
    paused: bool = False
    started: float = field(default_factory=time.monotonic)

    @property
    def is_full_rescan(self) -> bool:
        return self.paths is None and self.files is None


class IndexJobQueue:
    """Jobs waiting their turn, oldest first."""

    def __init__(self) -> None:
        self._jobs: list[IndexJob] = []

    def add(self, job: IndexJob) -> bool:
        """Queue ``job``; False when a queued full rescan already covers it."""
        if job.is_full_rescan and any(j.is_full_rescan for j in self._jobs):
            return False
        self._jobs.append(job)
        return True

    def take(self) -> IndexJob:
        # Imported here: the window is on screen before DuckDB and numpy are loaded.
        from core.indexing.indexer import Controls

        job = self._jobs.pop(0)
        job.controls = Controls()
        job.started = time.monotonic()
        return job

    def clear(self) -> None:
        self._jobs.clear()

    def __bool__(self) -> bool:
        return bool(self._jobs)


def run_job(library: Library, job: IndexJob, report: Callable[[object, bool], None]) -> IndexReport:
    """Do ``job`` (on the engine thread); ``report(value, force)`` passes progress on."""

    waiting = ""

    def progress(p: IndexProgress) -> None:
        nonlocal waiting
        # A wait starting or ending is always shown (core/indexing/throttle.py).
        changed, waiting = p.waiting_reason != waiting, p.waiting_reason
        report(p, p.finished or changed)

    if job.files is not None:
        if job.retry:
            # One run for every file: the report (and the status bar's count) is theirs,
            # not the last file's alone.
            return library.retry(job.files, progress=progress, controls=job.controls)
        return library.sync_files(job.files, progress=progress, controls=job.controls)
    if job.paths:
        for path in job.paths:
            library.add_folder(path)
        report(FOLDERS_ADDED, True)
    return library.index(job.paths, progress=progress, controls=job.controls)
