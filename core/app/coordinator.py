"""The index work of a long-running process, whatever its front end: the app and
``lectern watch`` both keep their library equal to its folders for hours, and both must
pause, cancel, resume and wait out a full disk the same way.

:class:`IndexingCoordinator` holds that state and decides; it runs nothing itself and
knows no toolkit. The process around it (the host) runs a job on a thread of its own
when told to (``start``), reports back with ``job_done`` / ``job_failed``, and turns the
coordinator's callbacks into what its person sees (the app's signals, the command's
lines). So the rules (one job at a time, a pause lifted by new work, a cancel that stays
until the person resumes and then runs one full pass, a full disk that stops the queue
until there is room) live here once.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from core.errors import DiskFullError
from core.records import IndexProgress, IndexReport

if TYPE_CHECKING:
    from core.indexing.indexer import Controls
    from core.library import Library

FOLDERS_ADDED = "folders_added"  # progress value: the new folders are in the library
DISK_RECHECK_S = 5.0  # how often the host asks ``room_again`` while the disk is full


@dataclass
class IndexJob:
    paths: list[str] | None  # None: every library folder
    files: list[str] | None = None  # only these files (a retry or a watcher batch)
    retry: bool = False
    controls: Controls | None = None
    task: Any = None  # the host's handle on the thread running it
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
        # Imported here: the app's window is on screen before DuckDB and numpy load.
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
    """Do ``job`` (on the host's worker thread); ``report(value, force)`` passes progress
    on, ``force`` for a value that must not be dropped by the host's rate limit."""

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


class Watcher(Protocol):
    """The folder watcher, as far as pausing and cancelling go (core/app/watch.py)."""

    def pause(self) -> None: ...

    def resume(self) -> None: ...

    def cancel_running(self) -> None: ...


class _Pausable(Protocol):
    def pause(self, paused: bool) -> None: ...


class ModelSwitchPause(Protocol):
    """A library, as far as holding the re-embedding of a change of model goes
    (core/indexing/model_switch.py): it pauses and resumes with indexing."""

    @property
    def models(self) -> _Pausable: ...


class IndexingCoordinator:
    """Which job runs, which wait, and whether indexing is paused, cancelled or waiting
    for room on the disk. Call it from one thread (the app's UI thread, the command's
    main thread); the host's worker threads report back through that thread.

    ``start(job)`` runs a job on the host's worker thread; a host that queues no jobs
    (``lectern watch``, whose watcher applies its own batches) leaves it out."""

    def __init__(
        self,
        start: Callable[[IndexJob], None] = lambda job: None,
        *,
        can_start: Callable[[], bool] = lambda: True,
        on_paused: Callable[[bool], None] = lambda paused: None,
        on_cancelled: Callable[[bool], None] = lambda cancelled: None,
        library: Callable[[], ModelSwitchPause | None] = lambda: None,
    ) -> None:
        self._start = start
        self._can_start = can_start
        self._on_paused = on_paused
        self._on_cancelled = on_cancelled
        self._jobs = IndexJobQueue()
        self.current_job: IndexJob | None = None
        self.watcher: Watcher | None = None
        self._library = library  # a change of model pauses and resumes with indexing
        self.paused = False
        # Cancelled by the person: no job starts and the watcher holds its events until
        # they resume (Resume, a rescan, a retry or adding a folder).
        self.cancelled = False
        self.not_indexed: int | None = None  # files the cancelled run left, when known
        self.last_progress: IndexProgress | None = None
        self._cancelled_run = ""  # "job" | "watch": the run whose progress was shown
        self.watch_running = False  # a watcher batch is being applied
        self.disk_full: DiskFullError | None = None  # waiting for room on the disk

    @property
    def indexing(self) -> bool:
        return self.current_job is not None or self.watch_running

    # --- jobs ---------------------------------------------------------------------------

    def enqueue(self, job: IndexJob) -> None:
        if self._jobs.add(job):
            self.next_job()

    def drop_queued(self) -> None:
        """Forget the jobs waiting (closing: the next start catches up anyway)."""
        self._jobs.clear()

    def next_job(self) -> None:
        """Start the oldest queued job when nothing runs and nothing holds the queue."""
        if (
            self.current_job is not None
            or not self._jobs
            or self.cancelled
            or not self._can_start()
        ):
            return
        job = self._jobs.take()
        if self.paused:
            # New work (a folder added, a retry) is a request to index it now: it lifts
            # an earlier pause.
            self.resume()
        self.current_job = job
        self._start(job)

    def job_done(self, report: IndexReport) -> None:
        """The running job ended (finished, or stopped by a cancel). The host then says
        so and calls ``next_job``."""
        self.current_job = None
        if report.cancelled:
            self.note_cancelled_run(report, "job")

    def job_failed(self, exc: BaseException) -> bool:
        """The running job raised ``exc``; True when it was a full disk, and indexing now
        waits for room (``room_again``) instead of failing file after file."""
        self.current_job = None
        return self.failed(exc)

    def failed(self, exc: BaseException) -> bool:
        """A job or a watcher batch failed with ``exc``: a full disk holds the queue and
        the watcher until there is room (True); anything else changes nothing (False)."""
        if not isinstance(exc, DiskFullError):
            return False
        self.disk_full = exc
        self._jobs.clear()
        if self.watcher is not None:
            self.watcher.pause()
        return True

    def room_again(self) -> bool:
        """Whether the disk that was full has the room the failed write needed now; if
        so the wait ends and the watcher goes on (True), and the host catches up with
        one full pass (a job in the app, a reconcile in ``lectern watch``). The host
        calls this every few seconds while ``disk_full`` is set."""
        full = self.disk_full
        if full is None:
            return False
        try:
            free = shutil.disk_usage(full.folder).free
        except OSError:
            return False
        if free < full.needed_bytes:
            return False
        self.disk_full = None
        if self.watcher is not None and not self.paused and not self.cancelled:
            self.watcher.resume()
        return True

    # --- pause, cancel, resume ------------------------------------------------------

    def pause(self) -> None:
        """Pause the running job and the watcher (files finished so far stay searchable)."""
        job = self.current_job
        if job is not None and job.controls is not None:
            job.controls.pause()
            job.paused = True
        if self.watcher is not None:
            self.watcher.pause()
        library = self._library()
        if library is not None:
            library.models.pause(True)
        self.paused = True
        self._on_paused(True)

    def resume(self) -> None:
        """Resume after a pause, or after a cancel (then with a full pass)."""
        if self.resume_cancelled():
            return
        job = self.current_job
        if job is not None and job.controls is not None:
            job.controls.resume()
            job.paused = False
        if self.watcher is not None and self.disk_full is None:
            self.watcher.resume()
        library = self._library()
        if library is not None:
            library.models.pause(False)
        self.paused = False
        self._on_paused(False)

    def cancel(self) -> None:
        """Stop indexing, and stay stopped until the person resumes.

        The running job (or watcher batch) stops after its current file; queued jobs are
        dropped; the watcher keeps collecting file events but runs none of them. Resuming
        (``resume``, a rescan, a retry or adding a folder) starts one full pass, which
        indexes what the cancelled run left and every change seen meanwhile.
        """
        self._jobs.clear()
        if not self.cancelled:
            self._cancelled_run = (
                "job" if self.current_job is not None else "watch" if self.watch_running else ""
            )
        self.stop_current_job()
        if self.watcher is not None:
            self.watcher.pause()
            self.watcher.cancel_running()
        self.watch_running = False
        self.paused = False
        if not self.cancelled:
            self.cancelled = True
            p = self.last_progress
            self.not_indexed = max(0, p.files_total - p.files_done) if p else None
        self._on_paused(False)
        self._on_cancelled(True)

    def stop_current_job(self) -> None:
        job = self.current_job
        if job is not None and job.controls is not None:
            job.controls.stop()
            job.paused = False

    def note_cancelled_run(self, report: IndexReport, run: str) -> None:
        """How many files the run that was cancelled left (exact, now that it ended)."""
        if not self.cancelled or run != self._cancelled_run:
            return
        self._cancelled_run = ""
        p = self.last_progress
        if p is not None and p.files_total:
            done = report.added + report.updated + report.failed + report.skipped
            self.not_indexed = max(0, p.files_total - done)
            self._on_cancelled(True)

    def resume_cancelled(self) -> bool:
        """Leave the cancelled state with one full pass; False when not cancelled."""
        if not self.cancelled:
            return False
        self.cancelled = False
        self.not_indexed = None
        self.last_progress = None
        if self.watcher is not None and self.disk_full is None:
            self.watcher.resume()
        self._on_cancelled(False)
        self.enqueue(IndexJob(paths=None))
        return True
