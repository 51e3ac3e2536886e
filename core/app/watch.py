"""Live folders: file-system events become small, settled change sets for the indexer.

Events are hints, never the truth. The watcher only collects the paths they name; the
indexer then compares each path with the disk (``Library.sync_files``), so a lost,
duplicated or out-of-order event costs at most a delay, never a wrong index:

- a path is applied once no event has touched it for ``debounce_s`` and its size and
  mtime are the same as at its last event (a copy still being written is left alone);
- paths settle together: while events keep arriving (a bulk copy) they wait for a quiet
  moment, at most ``max_delay_s``, so a thousand files become a few batches, not a
  thousand runs;
- a folder named by an event stands for everything below it (moved in, moved away,
  deleted), and a moved or renamed file keeps its embeddings (the indexer matches the
  removed and the added path by content hash);
- at start and every ``reconcile_interval_s`` a stat-only pass over every folder
  catches what events missed (changes while Lectern was closed, an inotify queue
  overflow, a network drive);
- where no watch can be set (the inotify limit, a network file system) the folder is
  polled instead, and ``on_status`` says so;
- a library folder that disappears (an unplugged drive, renamed or deleted outside
  Lectern) goes offline: its documents stay searchable until it comes back.

Indexing runs on the watcher's own thread, at a lower CPU priority where the OS allows
it, one batch at a time. Callbacks run on that thread (or, for ``on_status`` at start,
on the caller's); a GUI must hand them over to its own thread. Stop the watcher before
closing the library.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import stat
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from watchdog.events import FileSystemEvent, FileSystemEventHandler
from watchdog.observers import Observer
from watchdog.observers.api import BaseObserver, ObservedWatch
from watchdog.observers.polling import PollingObserverVFS

from core.errors import LecternError
from core.indexing.indexer import Controls, ProgressCallback
from core.indexing.scan import is_ignored_in
from core.indexing.threads import lower_thread_priority
from core.records import IndexReport
from core.store.paths import normalize_folder

if TYPE_CHECKING:
    from core.library import Library

log = logging.getLogger(__name__)

WATCHING = "watching"
POLLING = "polling"
OFFLINE = "offline"
STOPPED = "stopped"

# Changes made on another computer send no inotify event for these: poll them.
NETWORK_FILESYSTEMS = frozenset(
    {
        "nfs",
        "nfs4",
        "cifs",
        "smb",
        "smb2",
        "smb3",
        "smbfs",
        "afs",
        "9p",
        "ncpfs",
        "ceph",
        "glusterfs",
        "davfs",
        "fuse.davfs2",
        "fuse.sshfs",
        "sshfs",
        "fuse.rclone",
        "fuse.s3fs",
        "fuse.gcsfuse",
        "fuse.glusterfs",
        "fuse.cephfs",
        "webdav",
    }
)
_LIMIT_ERRNOS = frozenset({errno.ENOSPC, errno.EMFILE, errno.ENFILE, errno.ENOMEM})
LIMIT_REASON = (
    "the system's limit on watched folders was reached, so changes are found by checking "
    "every {interval:g} s (on Linux, raise fs.inotify.max_user_watches for instant updates)"
)
NETWORK_REASON = (
    "the folder is on a network file system ({fs}), which does not report changes made on "
    "other computers, so it is checked every {interval:g} s"
)
# Events that say nothing about a file's content.
_IGNORED_EVENTS = frozenset({"opened", "closed_no_write"})
_DIR_NOISE = frozenset({"modified", "attrib", "closed", "opened", "closed_no_write"})


@dataclass(frozen=True)
class FolderWatch:
    """How one library folder is being followed: ``watching``, ``polling`` or ``offline``."""

    folder: str
    state: str
    reason: str = ""


@dataclass(frozen=True)
class AppliedBatch:
    """One change set the watcher handed to the indexer, and what came of it."""

    paths: tuple[str, ...]  # the paths checked; for a reconcile, the folders
    report: IndexReport
    reconcile: bool = False
    finished_at: float = 0.0  # time.time()


@dataclass
class _Pending:
    first_event: float
    last_event: float
    signature: tuple[int, int] | None  # (size, mtime_ns) of a regular file at its last event
    gone: bool = False  # its last event said it was deleted or moved away


@dataclass
class _Watch:
    status: FolderWatch
    observer: BaseObserver | None = None
    watch: ObservedWatch | None = None


def _signature(path: str) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    if not stat.S_ISREG(st.st_mode):
        return None
    return (st.st_size, st.st_mtime_ns)


def filesystem_type(path: str) -> str:
    """The file-system type holding ``path`` (``""`` when it cannot be told)."""
    try:
        import psutil

        real = os.path.realpath(path)
        best, kind = "", ""
        for part in psutil.disk_partitions(all=True):
            mount = part.mountpoint
            inside = real == mount or real.startswith(mount.rstrip(os.sep) + os.sep)
            if inside and len(mount) > len(best):
                best, kind = mount, part.fstype
        return kind.lower()
    except Exception:  # no psutil, no /proc: assume local
        return ""


class _EventHandler(FileSystemEventHandler):
    def __init__(self, watcher: FolderWatcher, root: str, single_file: bool) -> None:
        self.watcher = watcher
        self.root = root
        self.single_file = single_file

    def on_any_event(self, event: FileSystemEvent) -> None:
        kind = event.event_type
        if kind in _IGNORED_EVENTS or (event.is_directory and kind in _DIR_NOISE):
            return
        try:
            for raw in (event.src_path, getattr(event, "dest_path", "")):
                if not raw:
                    continue
                path = os.fsdecode(raw)
                if self.single_file and path != self.root:
                    continue
                gone = kind == "deleted" or (kind == "moved" and raw == event.src_path)
                self.watcher._hint(self.root, path, event.is_directory, gone)
        except Exception:  # the observer thread must survive anything
            log.exception("watch event %r could not be handled", event)


class _OverflowHook(logging.Handler):
    """watchdog only logs an inotify queue overflow; events were lost, so reconcile."""

    def __init__(self, watcher: FolderWatcher) -> None:
        super().__init__(logging.WARNING)
        self.watcher = watcher

    def emit(self, record: logging.LogRecord) -> None:
        if "overflow" in record.getMessage().lower():
            self.watcher.request_reconcile()


class FolderWatcher:
    """Keeps a ``Library`` equal to its folders on disk while it runs."""

    def __init__(
        self,
        library: Library,
        *,
        debounce_s: float = 0.3,
        max_delay_s: float = 2.0,
        reconcile_interval_s: float | None = 60.0,
        poll_interval_s: float = 5.0,
        folder_check_s: float = 1.0,
        max_pending: int = 20_000,
        vector_save_interval_s: float = 30.0,
        force_polling: bool = False,
        low_priority: bool = True,
        on_applied: Callable[[IndexReport], None] | None = None,
        on_batch: Callable[[AppliedBatch], None] | None = None,
        on_status: Callable[[str, str, str], None] | None = None,
        on_error: Callable[[LecternError], None] | None = None,
        progress: ProgressCallback | None = None,
    ) -> None:
        self.library = library
        self.debounce_s = debounce_s
        self.max_delay_s = max_delay_s
        self.reconcile_interval_s = reconcile_interval_s
        # The observers and the worker wait on these with threading's timers, which
        # overflow past TIMEOUT_MAX: an infinite poll interval killed the polling thread.
        for name, seconds in (
            ("poll_interval_s", poll_interval_s),
            ("debounce_s", debounce_s),
            ("max_delay_s", max_delay_s),
            ("folder_check_s", folder_check_s),
            ("reconcile_interval_s", reconcile_interval_s or 1.0),
        ):
            if not 0 < seconds <= threading.TIMEOUT_MAX:  # also refuses NaN
                raise ValueError(f"{name} must be a number of seconds above 0, not {seconds}")
        self.poll_interval_s = poll_interval_s
        self.folder_check_s = folder_check_s
        self.max_pending = max_pending
        self.vector_save_interval_s = vector_save_interval_s
        self._saved_interval = 0.0
        self.force_polling = force_polling
        self.low_priority = low_priority
        self.on_applied = on_applied
        self.on_batch = on_batch
        self.on_status = on_status
        self.on_error = on_error
        self.progress = progress
        self.ignore_patterns = tuple(library.settings.ignore_patterns)
        self._home = normalize_folder(library.settings.home)

        self._cond = threading.Condition()
        self._pending: dict[str, _Pending] = {}
        self._last_event = 0.0
        self._busy = False
        self._paused = False
        self._stopping = False
        self._started = False
        self._reconcile_all = False
        self._reconcile_folders: set[str] = set()
        self._next_reconcile = float("inf")
        self._next_folder_check = 0.0
        self._controls: Controls | None = None
        self._history: deque[AppliedBatch] = deque(maxlen=50)
        self.overflows = 0  # times the pending set was dropped for a full reconcile

        self._watch_lock = threading.RLock()
        self._watches: dict[str, _Watch] = {}
        self._native: BaseObserver | None = None
        self._native_error = ""
        self._polling: BaseObserver | None = None
        self._overflow_hook = _OverflowHook(self)
        self._worker: threading.Thread | None = None
        self._remover: threading.Thread | None = None

    # --- life cycle ------------------------------------------------------------------

    def start(self, *, reconcile: bool = True) -> FolderWatcher:
        """Watch every library folder. With ``reconcile`` (the default) the first thing
        the worker does is a full pass over the folders: changes made while Lectern was
        closed are picked up, and a new folder is indexed."""
        if self._started:
            return self
        self._started = True
        indexer = self.library.indexer
        self._saved_interval = indexer.vector_save_interval_s
        indexer.vector_save_interval_s = max(self._saved_interval, self.vector_save_interval_s)
        try:
            self._native = Observer()
            self._native.start()
        except OSError as exc:  # no inotify instance left, or no native API at all
            self._native = None
            self._native_error = (
                LIMIT_REASON
                if exc.errno in _LIMIT_ERRNOS
                else f"watching failed ({exc}), so "
                "changes are found by checking every {interval:g} s"
            )
        # lstat: a symlink loop must not send the poller round in circles.
        self._polling = PollingObserverVFS(
            os.lstat, os.scandir, polling_interval=self.poll_interval_s
        )
        self._polling.start()
        logging.getLogger("watchdog.observers.inotify_c").addHandler(self._overflow_hook)
        with self._watch_lock:
            for folder in self.library.files.folders():
                self._attach(folder)
        now = time.monotonic()
        with self._cond:
            self._reconcile_all = reconcile
            self._next_reconcile = (
                now + self.reconcile_interval_s if self.reconcile_interval_s else float("inf")
            )
            self._next_folder_check = now + self.folder_check_s
        self._worker = threading.Thread(target=self._loop, name="lectern-watch", daemon=True)
        self._worker.start()
        self._remover = threading.Thread(
            target=self._remove_loop, name="lectern-watch-gone", daemon=True
        )
        self._remover.start()
        return self

    def stop(self, timeout: float = 30.0) -> None:
        """Stop watching; a batch being indexed is cancelled after its current file."""
        with self._cond:
            self._stopping = True
            controls = self._controls
            self._cond.notify_all()
        if controls is not None:
            controls.stop()
        if self._worker is not None:
            self._worker.join(timeout)
        if self._remover is not None:
            self._remover.join(timeout)
        logging.getLogger("watchdog.observers.inotify_c").removeHandler(self._overflow_hook)
        for observer in (self._native, self._polling):
            if observer is not None:
                observer.stop()
        for observer in (self._native, self._polling):
            if observer is not None:
                with contextlib.suppress(RuntimeError):
                    observer.join(timeout)
        with self._watch_lock:
            for folder, entry in self._watches.items():
                entry.status = FolderWatch(folder, STOPPED)
        indexer = self.library.indexer
        indexer.vector_save_interval_s = self._saved_interval
        if self._worker is None or not self._worker.is_alive():
            with contextlib.suppress(Exception):  # closing the library saves it too
                indexer.save_vectors()

    def __enter__(self) -> FolderWatcher:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def pause(self) -> None:
        """Hold indexing (events are still collected); a running batch pauses between
        embedding batches."""
        with self._cond:
            self._paused = True
            if self._controls is not None:
                self._controls.pause()

    def resume(self) -> None:
        with self._cond:
            self._paused = False
            if self._controls is not None:
                self._controls.resume()
            self._cond.notify_all()

    @property
    def paused(self) -> bool:
        return self._paused

    @property
    def worker_alive(self) -> bool:
        """Whether the worker thread still runs (after ``stop``: a batch finishing)."""
        return self._worker is not None and self._worker.is_alive()

    def cancel_running(self) -> None:
        """Stop the batch being indexed after its current file, leaving the watcher on.

        What the batch left undone is found again by a full reconcile the next time the
        worker runs (pause first to hold it until :meth:`resume`)."""
        with self._cond:
            if self._controls is not None:
                self._controls.stop()
                self._reconcile_all = True
            self._cond.notify_all()

    def request_reconcile(self, folders: Sequence[str] | None = None) -> None:
        """Ask for a stat-only pass over these folders (all when None) as soon as possible."""
        with self._cond:
            if folders is None:
                self._reconcile_all = True
            else:
                self._reconcile_folders.update(normalize_folder(f) for f in folders)
            self._cond.notify_all()

    def wait_idle(self, timeout: float | None = None) -> bool:
        """Block until nothing is pending, due or running; False on timeout."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while self._pending or self._busy or self._reconcile_due():
                if self._stopping:
                    return False
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return False
                self._cond.wait(0.1 if remaining is None else min(0.1, remaining))
            return True

    # --- what the GUI shows -------------------------------------------------------------

    def statuses(self) -> list[FolderWatch]:
        with self._watch_lock:
            return [w.status for _, w in sorted(self._watches.items())]

    def recent(self) -> list[AppliedBatch]:
        with self._cond:
            return list(self._history)

    def pending_count(self) -> int:
        with self._cond:
            return len(self._pending)

    # --- events (observer threads) ------------------------------------------------------

    def _hint(self, root: str, path: str, is_dir: bool, gone: bool) -> None:
        if path == self._home or path.startswith(self._home + os.sep):
            return  # our own database and vector file: indexing them would feed itself
        if path == root and gone:
            # The library folder itself went away: the folder check takes it offline
            # (its documents stay) rather than the indexer removing what was in it.
            with self._cond:
                self._next_folder_check = 0.0
                self._cond.notify_all()
            return
        if path != root and is_ignored_in(path, root, self.ignore_patterns):
            return
        signature = None if is_dir else _signature(path)
        with self._cond:
            now = time.monotonic()
            self._last_event = now
            entry = self._pending.get(path)
            if entry is not None:
                entry.last_event = now
                entry.signature = signature
                entry.gone = gone
            elif len(self._pending) >= self.max_pending:
                # Memory stays bounded: forget the hints and re-read every folder instead,
                # which finds the same changes.
                self._pending.clear()
                self._reconcile_all = True
                self.overflows += 1
            else:
                self._pending[path] = _Pending(now, now, signature, gone)
            self._cond.notify_all()

    # --- worker ---------------------------------------------------------------------

    def _reconcile_due(self) -> bool:
        return self._reconcile_all or bool(self._reconcile_folders)

    def _loop(self) -> None:
        if self.low_priority:
            lower_thread_priority()
        try:
            # Load the model now rather than on the first saved file (seconds).
            self.library.embedder  # noqa: B018
        except LecternError as exc:
            self._report_error(exc)
        while True:
            with self._cond:
                if self._stopping:
                    return
                wait = self._wait_time(time.monotonic())
                if wait > 0:
                    self._cond.wait(wait)
                if self._stopping:
                    return
                if self._paused:
                    continue
            try:
                self._tick()
            except LecternError as exc:
                self._report_error(exc)
            except Exception as exc:
                log.exception("watcher step failed")
                self._report_error(
                    LecternError(
                        f"Updating the index failed: {exc}",
                        "Lectern will retry; if this keeps happening, restart Lectern.",
                    )
                )
                with self._cond:  # whatever was lost in the failure is found by a reconcile
                    self._next_reconcile = min(self._next_reconcile, time.monotonic() + 5.0)

    def _wait_time(self, now: float) -> float:
        if self._paused:
            return 1.0
        if self._reconcile_due():
            return 0.0
        deadlines = [self._next_folder_check, self._next_reconcile]
        if self._pending:
            soonest = min(e.last_event for e in self._pending.values())
            deadlines.append(max(soonest, self._last_event) + self.debounce_s)
            deadlines.append(now + self.debounce_s / 3)
        return max(0.0, min(deadlines) - now)

    def _tick(self) -> None:
        try:
            self._step()
        finally:
            with self._cond:  # idle only once the results are recorded and reported
                self._busy = False
                self._cond.notify_all()

    def _step(self) -> None:
        now = time.monotonic()
        if now >= self._next_folder_check:
            self._check_folders()
            self._next_folder_check = time.monotonic() + self.folder_check_s
        lock = self.library.indexer.lock
        if not lock.acquire(blocking=False):
            # Another run holds the indexer (the app's index job). The changes wait here,
            # not taken, so the deletions among them are applied beside that run
            # (_remove_loop) instead of after it.
            with self._cond:
                self._cond.wait(min(0.2, self.debounce_s))
            return
        try:
            self._step_holding(now)
        finally:
            lock.release()

    def _step_holding(self, now: float) -> None:
        with self._cond:
            if now >= self._next_reconcile:
                self._reconcile_all = True
            everything = self._reconcile_all
            folders = sorted(self._reconcile_folders)
            self._reconcile_all = False
            self._reconcile_folders.clear()
            if everything or folders:
                self._busy = True  # taken off the queue but not done: not idle
        if everything or folders:
            self._reconcile(None if everything else folders)
            with self._cond:
                if everything and self.reconcile_interval_s:
                    self._next_reconcile = time.monotonic() + self.reconcile_interval_s
        batch = self._take_ready(time.monotonic())
        if batch:
            self._apply(batch)
        elif not self._pending and self.vector_save_interval_s:
            # Quiet now: persist the vector file if the last batches left it unsaved.
            self.library.indexer.save_vectors(older_than_s=self.vector_save_interval_s)

    def _take_ready(self, now: float) -> list[str]:
        with self._cond:
            quiet = now - self._last_event >= self.debounce_s
            candidates = [
                (path, entry.last_event, entry.signature)
                for path, entry in self._pending.items()
                if now - entry.last_event >= self.debounce_s
                and (quiet or now - entry.first_event >= self.max_delay_s)
            ]
        if not candidates:
            return []
        # Second look at each file: unchanged since its last event means it is complete.
        looks = [(path, last, seen, _signature(path)) for path, last, seen in candidates]
        ready: list[str] = []
        with self._cond:
            for path, last, seen, current in looks:
                entry = self._pending.get(path)
                if entry is None or entry.last_event != last:
                    continue  # touched again meanwhile: wait for it to settle
                if current == seen:
                    del self._pending[path]
                    ready.append(path)
                else:  # still being written without events reaching us: look again later
                    entry.signature = current
                    entry.last_event = now
            if ready:
                self._busy = True
        return ready

    def _remove_loop(self) -> None:
        """Deletions seen while a run holds the indexer (a long first pass, an index job
        of the app): applied beside it (``Indexer.remove_gone``), so a file deleted or
        renamed meanwhile leaves search and the file list within seconds, not when the
        run ends. Between runs the worker applies them with the rest, which lets a moved
        file keep its embeddings; so does a short run, since a hint waits ``max_delay_s``
        first."""
        wait = max(self.debounce_s, self.max_delay_s)
        lock = self.library.indexer.lock
        while True:
            with self._cond:
                if self._stopping:
                    return
                now = time.monotonic()
                due = {
                    path: entry.last_event
                    for path, entry in self._pending.items()
                    if entry.gone and now - entry.last_event >= wait
                }
                if self._paused or not due:
                    # A hint arriving, resume and stop all notify; a hint waiting is
                    # looked at again as it comes due.
                    waiting = any(e.gone for e in self._pending.values()) and not self._paused
                    self._cond.wait(self.debounce_s if waiting else None)
                    continue
            if lock.acquire(blocking=False):
                lock.release()  # no run: the worker takes them
                with self._cond:
                    self._cond.wait(self.debounce_s)
                continue
            try:
                folders = [f for f in self.library.files.folders() if self.library.folder_online(f)]
                removed = self.library.indexer.remove_gone(folders, sorted(due))
            except LecternError as exc:
                self._report_error(exc)
                with self._cond:
                    self._cond.wait(wait)
                continue
            except Exception:
                log.exception("applying deletions during a run failed")
                with self._cond:
                    self._cond.wait(wait)
                continue
            with self._cond:
                for path, last in due.items():
                    entry = self._pending.get(path)
                    if entry is not None and entry.gone and entry.last_event == last:
                        del self._pending[path]  # applied; nothing left for the worker
                self._cond.notify_all()
            if removed:
                log.info("removed %d deleted file(s) during a run", removed)

    def _run_indexer(self, call: Callable[[Controls], IndexReport]) -> IndexReport:
        controls = Controls()
        with self._cond:
            if self._stopping:
                controls.stop()
            if self._paused:
                controls.pause()
            self._controls = controls
        try:
            return call(controls)
        finally:
            with self._cond:
                self._controls = None

    def _apply(self, paths: list[str]) -> None:
        try:
            report = self._run_indexer(
                lambda c: self.library.sync_files(paths, progress=self.progress, controls=c)
            )
        except BaseException:
            # The hints are gone; a reconcile soon finds the same changes.
            with self._cond:
                self._next_reconcile = min(self._next_reconcile, time.monotonic() + 5.0)
            raise
        self._record(tuple(sorted(paths)), report, reconcile=False)

    def _reconcile(self, folders: list[str] | None) -> None:
        report = self._run_indexer(
            lambda c: self.library.sync(folders, progress=self.progress, controls=c)
        )
        self._record(tuple(folders or self.library.files.folders()), report, reconcile=True)

    def _record(self, paths: tuple[str, ...], report: IndexReport, *, reconcile: bool) -> None:
        batch = AppliedBatch(paths, report, reconcile, time.time())
        with self._cond:
            self._history.append(batch)
        changed = (
            report.added
            or report.updated
            or report.removed
            or report.failed
            or report.chunks_embedded  # passages an earlier run left for the model
        )
        if self.on_batch is not None:
            self._call(self.on_batch, batch)
        if changed and self.on_applied is not None:
            self._call(self.on_applied, report)

    def _call(self, callback: Callable[..., object], *args: object) -> None:
        try:
            callback(*args)
        except Exception:  # a GUI bug must not stop the index from following the disk
            log.exception("watcher callback %r failed", callback)

    def _report_error(self, exc: LecternError) -> None:
        log.warning("watcher: %s", exc)
        if self.on_error is not None:
            self._call(self.on_error, exc)

    # --- folders ----------------------------------------------------------------------

    def _set_status(
        self,
        folder: str,
        state: str,
        reason: str = "",
        observer: BaseObserver | None = None,
        watch: ObservedWatch | None = None,
    ) -> None:
        status = FolderWatch(folder, state, reason)
        with self._watch_lock:
            previous = self._watches.get(folder)
            self._watches[folder] = _Watch(status, observer, watch)
        if (previous is None or previous.status != status) and self.on_status is not None:
            self._call(self.on_status, folder, state, reason)

    def _attach(self, folder: str) -> None:
        """Set a watch on ``folder`` (native when possible, else polling)."""
        self._detach(folder)
        if not self.library.folder_online(folder):
            self._set_status(folder, OFFLINE, "the folder cannot be found or read")
            return
        single_file = not os.path.isdir(folder)
        target = os.path.dirname(folder) if single_file else folder
        recursive = not single_file
        handler = _EventHandler(self, folder, single_file)
        reason = ""
        if self.force_polling:
            reason = "checking for changes every {interval:g} s, as configured"
        elif (fs := filesystem_type(folder)) in NETWORK_FILESYSTEMS:
            reason = NETWORK_REASON.replace("{fs}", fs)
        elif self._native is None:
            reason = self._native_error
        if not reason:
            assert self._native is not None
            try:
                watch = self._native.schedule(handler, target, recursive=recursive)
            except OSError as exc:
                if exc.errno in _LIMIT_ERRNOS:
                    reason = LIMIT_REASON
                elif not self.library.folder_online(folder):
                    self._set_status(folder, OFFLINE, "the folder cannot be found or read")
                    return
                else:
                    reason = (
                        f"watching failed ({exc.strerror or exc}), so changes are found by "
                        "checking every {interval:g} s"
                    )
            else:
                if recursive and not _all_subfolders_watched(self._native, watch, target):
                    # inotify refuses watches on subfolders silently (only the top one
                    # raises), so count them: a half-watched folder would miss changes.
                    with contextlib.suppress(KeyError, RuntimeError):
                        self._native.unschedule(watch)
                    reason = LIMIT_REASON
                else:
                    self._set_status(folder, WATCHING, "", self._native, watch)
                    return
        assert self._polling is not None
        # Not str.format: an error message may hold braces of its own.
        text = reason.replace("{interval:g}", f"{self.poll_interval_s:g}")
        try:
            watch = self._polling.schedule(handler, target, recursive=recursive)
        except OSError as exc:
            self._set_status(folder, OFFLINE, f"the folder cannot be read ({exc.strerror or exc})")
            return
        self._set_status(folder, POLLING, text, self._polling, watch)

    def _detach(self, folder: str) -> None:
        with self._watch_lock:
            entry = self._watches.get(folder)
            if entry is None or entry.observer is None or entry.watch is None:
                return
            observer, watch = entry.observer, entry.watch
            entry.observer = entry.watch = None
        with contextlib.suppress(KeyError, RuntimeError, OSError):
            observer.unschedule(watch)

    def _emitter_alive(self, entry: _Watch) -> bool:
        observer, watch = entry.observer, entry.watch
        if observer is None or watch is None:
            return False
        emitters = getattr(observer, "_emitter_for_watch", None)
        if not isinstance(emitters, dict):
            return True  # cannot tell: trust it
        emitter = emitters.get(watch)
        return emitter is not None and emitter.is_alive()

    def _check_folders(self) -> None:
        """Follow folders added or removed in the library, and folders going offline or
        coming back."""
        current = self.library.files.folders()
        with self._watch_lock:
            gone = [f for f in self._watches if f not in current]
        for folder in gone:
            self._detach(folder)
            with self._watch_lock:
                self._watches.pop(folder, None)
            if self.on_status is not None:
                self._call(self.on_status, folder, STOPPED, "no longer a library folder")
        for folder in current:
            online = self.library.folder_online(folder)
            with self._watch_lock:
                entry = self._watches.get(folder)
            if entry is None or entry.status.state == OFFLINE:
                if online or entry is None:
                    self._attach(folder)
                if online:
                    self.request_reconcile([folder])
            elif not online:
                self._detach(folder)
                self._set_status(
                    folder,
                    OFFLINE,
                    "the folder is not available (removed drive, renamed or deleted); "
                    "its documents stay searchable",
                )
                self.library.sync([folder])  # records it offline; indexes nothing
            elif not self._emitter_alive(entry):
                # The watch died (the folder was deleted and made again): set it anew.
                self._attach(folder)
                self.request_reconcile([folder])


def _all_subfolders_watched(observer: BaseObserver, watch: ObservedWatch, target: str) -> bool:
    emitters = getattr(observer, "_emitter_for_watch", None)
    emitter = emitters.get(watch) if isinstance(emitters, dict) else None
    group = getattr(emitter, "_inotify", None)
    watched = getattr(group, "_active_callbacks_by_path", None)
    if not isinstance(watched, dict):
        return True  # not inotify, or a watchdog that hides this: nothing to check
    for attempt in range(3):
        folders = {os.fsencode(target)}
        for root, dirnames, _ in os.walk(target):
            dirnames[:] = [d for d in dirnames if not os.path.islink(os.path.join(root, d))]
            folders.update(os.fsencode(os.path.join(root, d)) for d in dirnames)
        try:
            present = set(watched)
        except RuntimeError:  # changed by the emitter thread while we read it
            present = set()
        if folders <= present:
            return True
        if attempt < 2:  # folders made just now get their watch when their event is read
            time.sleep(0.3)
    return False
