"""The app's index work: the jobs it queues, the folder watcher, and what pause, cancel,
resume and a full disk do to both.

Which job runs and what those requests mean is decided by the coordinator the app
shares with ``lectern watch`` (core/app/coordinator.py); this host runs its jobs as ops
on the engine's thread (``ops.index_job``), follows the watcher (desktop/watching.py),
and turns both into the signals the library card, the file list and the status bar
read.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from core.app import ops
from core.app.coordinator import (
    DISK_RECHECK_S,
    FOLDERS_ADDED,
    IndexingCoordinator,
    IndexJob,
    ModelSwitchPause,
)
from core.app.ops import Changes, Op
from core.records import IndexProgress, IndexReport
from desktop.qt import QObject, QTimer, Signal
from desktop.rich import count_of
from desktop.watching import WatchBridge
from desktop.workers import describe_error

if TYPE_CHECKING:
    from core.app.watch import AppliedBatch, FolderWatcher
    from desktop.library_view import LibraryView
    from desktop.workers import Notices, OpRunner

log = logging.getLogger(__name__)

LIBRARY_REFRESH_MS = 700  # folder counts while indexing (one cheap query)
PROGRESS_INTERVAL_S = 0.1


class IndexingHost(QObject):
    started = Signal(object)  # IndexJob
    progress = Signal(object)  # IndexProgress
    pause_changed = Signal(bool)
    finished = Signal(object)  # IndexReport
    failed = Signal(str, str)
    # True: the person cancelled indexing and nothing runs until they resume (see
    # ``cancelled`` and ``not_indexed``); False: resumed.
    cancel_changed = Signal(bool)
    watch_changed = Signal(object)  # {folder: (state, reason)}
    watch_idle = Signal()  # a watcher batch finished

    def __init__(
        self,
        runner: OpRunner,
        view: LibraryView,
        notices: Notices,
        library: Callable[[], ModelSwitchPause | None],
        *,
        watch: bool = True,
        parent: QObject | None = None,
    ) -> None:
        super().__init__(parent)
        self._runner = runner
        self._view = view
        self._notices = notices
        self.work = IndexingCoordinator(
            self._start_job,
            can_start=lambda: runner.is_ready and not self._closing,
            on_paused=self.pause_changed.emit,
            on_cancelled=self.cancel_changed.emit,
            library=library,
        )
        self._pending_paths: list[str] = []
        self._watch_enabled = watch
        self.watcher: FolderWatcher | None = None
        self.watch_status: dict[str, tuple[str, str]] = {}
        self._closing = False
        # Whether the current job has reported progress: until it does it is waiting for
        # the indexer (the watcher's pass over the same folder may hold it), and the pass
        # that is indexing is the one the card shows.
        self._job_reporting = False
        self._disk_timer = QTimer(self)
        self._disk_timer.setInterval(int(DISK_RECHECK_S * 1000))
        self._disk_timer.timeout.connect(self._check_disk_space)
        self._refresh_timer = QTimer(self)
        self._refresh_timer.setInterval(LIBRARY_REFRESH_MS)
        self._refresh_timer.timeout.connect(view.refresh)

    # What the window shows of the index work (read by the library panel and the tests).

    @property
    def current_job(self) -> IndexJob | None:
        return self.work.current_job

    @property
    def paused(self) -> bool:
        return self.work.paused

    @property
    def cancelled(self) -> bool:
        return self.work.cancelled

    @property
    def not_indexed(self) -> int | None:
        return self.work.not_indexed

    @property
    def active(self) -> bool:
        """A job or a watcher batch is running."""
        return self.work.indexing

    # --- requests -------------------------------------------------------------------

    @property
    def watches(self) -> bool:
        """Folders are watched while the window is open (the app's default)."""
        return self._watch_enabled

    def library_ready(self, watcher: FolderWatcher | None) -> None:
        """The library and its model are in: watch with ``watcher`` (made by
        ``folder_watcher``), and index what waited for them."""
        if watcher is not None:
            self.watcher = self.work.watcher = watcher
            # Setting the first watches walks every folder: never on the UI thread.
            self._runner.run_local(
                lambda ctx: watcher.start(reconcile=True),
                name="start watcher",
                on_error=self._watch_error,
            )
        pending, self._pending_paths = self._pending_paths, []
        if pending:
            self.add_folders(pending)
        elif watcher is None:
            # Catch up with changes made while Lectern was closed (the watcher does this
            # itself when it starts).
            snapshot = self._view.snapshot
            if snapshot is not None and snapshot.folders:
                self.work.enqueue(IndexJob(paths=None))

    def add_folders(self, paths: Sequence[str]) -> list[str]:
        """Add and index folders; returns the ones accepted (others get a notice)."""
        accepted: list[str] = []
        for raw in paths:
            path = os.path.normpath(os.path.abspath(os.path.expanduser(raw)))
            if os.path.isdir(path):
                accepted.append(path)
            elif os.path.isfile(path):
                self._notices.say(
                    "warning",
                    f"“{os.path.basename(path)}” is a file. Lectern indexes whole folders: "
                    "drop the folder that holds it.",
                )
            else:
                self._notices.say("error", f"“{path}” does not exist or cannot be opened.")
        if not accepted:
            return []
        if not self._runner.is_ready:
            # Dropped while the model loads: index as soon as the library is open.
            self._pending_paths.extend(p for p in accepted if p not in self._pending_paths)
            self._notices.say("info", "Your folders will be indexed as soon as Lectern is ready.")
            return accepted
        self.work.resume_cancelled()  # adding a folder is a request to index now
        self.work.enqueue(IndexJob(paths=accepted))
        return accepted

    def rescan(self) -> None:
        if not self._runner.is_ready:
            return
        if self.cancelled:
            self.work.resume_cancelled()  # the full pass it starts is the rescan
        elif self.watcher is not None:
            self.watcher.request_reconcile()
        else:
            self.work.enqueue(IndexJob(paths=None))

    def retry(self, paths: Sequence[str]) -> None:
        if self._runner.is_ready and paths:
            self.work.resume_cancelled()
            self.work.enqueue(IndexJob(paths=None, files=list(paths), retry=True))

    def remove_folder(self, path: str) -> None:
        if not self._runner.is_ready:
            return
        # A running job may be writing this folder's files: stop it, then remove.
        self.work.stop_current_job()
        job = self.current_job
        running = job.task if job is not None else None
        removal = ops.remove_folder(path)

        def remove(run: ops.RunOp) -> int:
            if running is not None:
                running.done.wait(60)
            # The library blanks the removed documents' text in saved conversations too.
            return run(removal)

        def done(removed: int) -> None:
            name = os.path.basename(path) or path
            self._notices.say(
                "info", f"Removed “{name}” from the library ({count_of(removed, 'file')})."
            )

        self._runner.run(ops.compose(removal.name, remove, removal.changes), on_result=done)

    def pause(self) -> None:
        """Pause the running job and the watcher (files finished so far stay searchable)."""
        self.work.pause()

    def resume(self) -> None:
        """Resume after a pause, or after a cancel (then with a full pass)."""
        self.work.resume()

    def cancel(self) -> None:
        """Stop indexing, and stay stopped until the person resumes (see
        ``IndexingCoordinator.cancel``)."""
        self.work.cancel()
        if self.work.current_job is None:
            self._refresh_timer.stop()

    def switch_model(self, model_id: str) -> None:
        """Change the library's embedding model: saved in the settings and re-embedded in
        the background while the current model answers."""
        self._runner.apply_settings(self._runner.settings.with_changes(embedding_model=model_id))
        self._runner.run(ops.change_embedding_model(model_id))

    # --- jobs -----------------------------------------------------------------------

    def _start_job(self, job: IndexJob) -> None:
        def progress(value: object) -> None:
            if value == FOLDERS_ADDED:
                self._view.refresh()
            elif isinstance(value, IndexProgress):
                self._job_reporting = True
                self.work.last_progress = value
                self.progress.emit(value)

        self._job_reporting = False
        job.task = self._runner.run(
            ops.index_job(job, PROGRESS_INTERVAL_S),
            on_progress=progress,
            on_result=self._job_done,
            on_error=self._job_failed,
            engine=True,
        )
        self._refresh_timer.start()
        self.started.emit(job)

    def _job_done(self, report: IndexReport) -> None:
        # The folder counts follow from the op's changes (LibraryView.follow).
        self.work.job_done(report)
        self._refresh_timer.stop()
        self.finished.emit(report)
        self._take_model_notice()
        self.work.next_job()

    def _job_failed(self, exc: BaseException) -> None:
        waiting = self.work.job_failed(exc)
        self._refresh_timer.stop()
        message, hint = describe_error(exc)
        self.failed.emit(message, hint)
        self._view.refresh()
        if waiting:
            # Indexing waits for room rather than failing file after file; once the
            # person frees space it carries on by itself.
            self._disk_timer.start()
            return
        self.work.next_job()

    def _take_model_notice(self) -> None:
        """A new library that started with the multilingual model (its first documents
        were mostly not English) says so once; the app's settings then name that model."""

        def said(notice: str | None) -> None:
            if notice:
                self._runner.announce(Changes(settings=True))
                self._notices.say("info", notice)

        self._runner.run(ops.take_model_notice(), on_result=said)

    def _check_disk_space(self) -> None:
        if self.work.disk_full is None or self._closing:
            self._disk_timer.stop()
            return
        if not self.work.room_again():
            return
        self._disk_timer.stop()
        self._notices.say("info", "There is room on the disk again; indexing carries on.")
        self.work.enqueue(IndexJob(paths=None))

    # --- the watcher ----------------------------------------------------------------

    def folder_watcher(self) -> Op[FolderWatcher]:
        """The op that makes the folder watcher, its reports brought to this host on the
        UI thread (desktop/watching.py)."""
        bridge = WatchBridge(self)
        bridge.progress.connect(self._watch_progress)
        bridge.batch.connect(self._watch_batch)
        bridge.status.connect(self._watch_status)
        bridge.error.connect(self._watch_error)
        return ops.folder_watcher(
            bridge.batch.emit, bridge.status.emit, bridge.error.emit, bridge.report_progress
        )

    def _watch_progress(self, progress: IndexProgress) -> None:
        work = self.work
        if (
            (work.current_job is not None and self._job_reporting)
            or work.cancelled
            or self._closing
        ):
            return  # the job reports its own progress; a cancelled batch is winding down
        work.last_progress = progress
        if not work.watch_running and progress.files_total:
            work.watch_running = True
            self._refresh_timer.start()
        if work.watch_running:
            self.progress.emit(progress)

    def _watch_batch(self, batch: AppliedBatch) -> None:
        report = batch.report
        work = self.work
        if report.cancelled:
            work.note_cancelled_run(report, "watch")
        if work.watch_running:
            work.watch_running = False
            if work.current_job is None:
                self._refresh_timer.stop()
        self._take_model_notice()
        if report.added or report.updated or report.removed or report.failed:
            self._view.refresh()
        self.watch_idle.emit()

    def _watch_status(self, folder: str, state: str, reason: str) -> None:
        if state == "stopped":
            self.watch_status.pop(folder, None)
        else:
            self.watch_status[folder] = (state, reason)
        self.watch_changed.emit(dict(self.watch_status))
        if state == "offline":
            self._view.refresh()

    def _watch_error(self, exc: BaseException) -> None:
        message, hint = describe_error(exc)
        self._notices.say("error", f"Keeping folders up to date failed: {message} {hint}".strip())
        if self.work.failed(exc):  # a full disk: the watcher waits for room, as jobs do
            self._disk_timer.start()

    # --- closing --------------------------------------------------------------------

    def stop(self) -> None:
        """Closing: nothing queued runs, and the running job stops after its file."""
        self._closing = True
        self._refresh_timer.stop()
        self.work.drop_queued()
        self.work.stop_current_job()

    def stop_watcher(self, deadline: float) -> None:
        watcher = self.watcher
        if watcher is None:
            return
        try:
            watcher.cancel_running()
            watcher.stop(timeout=max(0.1, deadline - time.monotonic()))
        except Exception:
            log.exception("stopping the watcher failed")

    def wait_for_job(self, deadline: float) -> bool:
        """Whether the running job (if any) ended before ``deadline``."""
        job = self.current_job
        task: Any = job.task if job is not None else None
        return task is None or bool(task.done.wait(max(0.0, deadline - time.monotonic())))

    @property
    def watcher_alive(self) -> bool:
        return self.watcher is not None and self.watcher.worker_alive
