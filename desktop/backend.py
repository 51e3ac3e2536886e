"""The desktop app's link to the engine: one ``Backend`` per window.

The backend owns the ``Library`` and turns every engine call into background work (see
``workers.py``) whose outcome arrives as a Qt signal. Which index job runs, and what
pause, cancel, resume and a full disk mean, is decided by the indexing coordinator it
shares with ``lectern watch`` (core/indexing/coordinator.py); how to answer and what went
wrong come from ``core`` too. What stays here is the app's own: starting up (the library
and the model loaded side by side), the snapshot the window shows, and the model
server's badge.
Heavy engine modules are imported inside the background functions, so the window is on
screen before torch or DuckDB are even loaded.
"""

from __future__ import annotations

import contextlib
import gc
import json
import logging
import os
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from core.config import Settings, load_settings
from core.errors import LecternError
from core.indexing.coordinator import (
    DISK_RECHECK_S,
    FOLDERS_ADDED,
    IndexingCoordinator,
    IndexJob,
    run_job,
)
from core.private import write_private
from core.records import (
    Collection,
    Document,
    FolderStatus,
    IndexProgress,
    IndexReport,
    Scope,
)
from desktop.model_probe import LLMStatus, address_problem, llm_address, model_matches, probe_llm
from desktop.qt import QObject, QTimer, Signal
from desktop.rich import count_of
from desktop.workers import Background, Task, TaskContext, describe_error

if TYPE_CHECKING:
    from core.embedding.languages import ModelAdvice
    from core.embedding.models import Embedder
    from core.library import Library

log = logging.getLogger(__name__)

LIBRARY_REFRESH_MS = 700  # folder counts while indexing (one cheap query)
SWITCH_REFRESH_MS = 3000  # while a change of embedding model re-embeds in the background
PROGRESS_INTERVAL_S = 0.1
# How often the model server is asked again while the window is open, so the badge
# follows a server that stopped or started meanwhile (requests also re-check at once).
LLM_RECHECK_MS = 20_000
# Closing the window waits this long for a running index job to reach its next file;
# past it the job's thread is left to finish on its own (see Backend.shutdown).
SHUTDOWN_WAIT_MS = 1500
# Closing waits for the library to finish opening (it may be repairing the record), so
# that it is closed cleanly; normally a fraction of a second.
OPEN_WAIT_S = 30.0
# How long an open waits for this process's earlier close of the same library (one that
# a quit left finishing on its own thread) before it opens it anyway.
REOPEN_WAIT_S = 60.0
# The library as the last session showed it (in the data folder), shown at the next
# start until the open library answers.
SAVED_SNAPSHOT = "last-library-view.json"
SAVED_PROBLEMS = 200  # failed and skipped files kept per folder in it


@dataclass(frozen=True)
class ScopeChoices:
    """What a conversation's scope can be made of, for the question box's menu."""

    collections: tuple[Collection, ...] = ()
    folders: tuple[str, ...] = ()
    types: tuple[str, ...] = ()


@dataclass(frozen=True)
class LibrarySnapshot:
    folders: tuple[FolderStatus, ...]
    problems: dict[str, tuple[Document, ...]]  # folder -> failed and skipped files
    chunks: int = 0
    documents: int = 0
    embedded: int = 0  # passages searchable by meaning (the rest by keyword only, for now)
    # A change of embedding model in progress, in words (core/indexing/reembed.py); "" when none.
    switching: str = ""
    # The model the library's languages call for, and why (core/embedding/languages.py); "" when
    # there is nothing to offer, or the person said not now.
    advice: str = ""
    advice_model: str = ""
    # Read from the last session's file (show_saved_library), not from the open library.
    saved: bool = False


# Libraries this process is still closing, by data folder: a quit that ran out of time
# leaves the close to finish on its own thread (the process exits meanwhile); a window
# opened again on the same library in this process waits for it first.
_closing: dict[str, threading.Thread] = {}
_closing_lock = threading.Lock()


def close_in_background(library: Library) -> threading.Thread:
    """Close ``library`` on a thread of its own, which an open of its folder waits for."""
    key = str(library.settings.home)

    def close() -> None:
        try:
            library.close()
        except Exception:
            log.exception("closing the library failed")
        finally:
            with _closing_lock:
                if _closing.get(key) is thread:
                    del _closing[key]

    # A daemon: a process exiting does not wait for it. Every document is written in one
    # transaction and the vector file is written whole and renamed over, so an exit in
    # the middle of the close is a crash the next open repairs (nothing committed is lost).
    thread = threading.Thread(target=close, name="close library", daemon=True)
    with _closing_lock:
        _closing[key] = thread
    thread.start()
    return thread


def wait_for_close(home: Path, timeout: float = REOPEN_WAIT_S) -> None:
    """Wait for this process's close of the library in ``home``, if one is running."""
    with _closing_lock:
        thread = _closing.get(str(home))
    if thread is not None:
        thread.join(timeout)


def write_saved_snapshot(path: Path, snapshot: LibrarySnapshot) -> None:
    """Keep ``snapshot`` for the next start (written whole, then renamed over)."""
    data = {
        "folders": [asdict(f) for f in snapshot.folders],
        "problems": {
            folder: [asdict(d) for d in docs[:SAVED_PROBLEMS]]
            for folder, docs in snapshot.problems.items()
        },
        "chunks": snapshot.chunks,
        "documents": snapshot.documents,
        "embedded": snapshot.embedded,
    }
    # Private: it names the person's folders and files.
    write_private(path, json.dumps(data), durable=False)


def read_saved_snapshot(path: Path) -> LibrarySnapshot | None:
    """The snapshot ``write_saved_snapshot`` kept; None when there is none or it is
    unreadable (it is only a preview: the open library's replaces it)."""
    from dataclasses import replace

    from core.records import record_from_json

    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        # Typed field by field: a document's state read back as text, not a DocState,
        # emptied the whole library panel on the first frame.
        return replace(record_from_json(LibrarySnapshot, data), saved=True)
    except (OSError, ValueError):
        return None


class Backend(QObject):
    phase_changed = Signal(str, str)  # opening | loading_model | ready | failed, and a sentence
    # The library is open: searchable by keyword, quoted answers work (the model loads on).
    opened = Signal()
    ready = Signal()  # the model is loaded too
    failed = Signal(str, str)  # message, hint
    library_changed = Signal(object)  # LibrarySnapshot
    # Paths of documents just removed from the library (a deleted file, not only a
    # removed folder): open answers and the evidence panel drop their text at once.
    documents_removed = Signal(object)  # list[str]
    index_started = Signal(object)  # IndexJob
    index_progress = Signal(object)  # IndexProgress
    index_paused = Signal(bool)
    index_finished = Signal(object)  # IndexReport
    index_failed = Signal(str, str)
    # True: the person cancelled indexing and nothing runs until they resume (see
    # ``cancelled`` and ``not_indexed``); False: resumed.
    index_cancelled = Signal(bool)
    notice = Signal(str, str)  # level (info | warning | error), sentence
    llm_status_changed = Signal(object)  # LLMStatus
    conversations_changed = Signal(object)  # list[Conversation]
    settings_changed = Signal(object)  # Settings
    watch_changed = Signal(object)  # {folder: (state, reason)}
    watch_idle = Signal()  # a watcher batch finished
    collections_changed = Signal()  # a collection was made, changed or deleted

    def __init__(
        self,
        settings: Settings | None = None,
        *,
        embedder: Embedder | None = None,
        watch: bool = True,
        parent: QObject | None = None,
    ) -> None:
        super().__init__(parent)
        self.settings = settings or load_settings()
        self._embedder = embedder
        lowered = os.environ.get("LECTERN_ENGINE_PRIORITY", "low") != "normal"
        # Questions, searches and previews run a little below the UI thread: answering
        # embeds the question and the cited sentences, and at the UI's own priority its
        # torch threads kept the window waiting for a CPU for 60-80 ms at a time on two
        # cores. They still come well before indexing.
        self.background = Background(max_threads=4, parent=self, lower_by=5 if lowered else 0)
        # Asking the model server touches no library data, waits on the network for up to
        # seconds, and must never hold up closing: it has a pool of its own.
        self.probes = Background(max_threads=1, parent=self)
        # Opening the library (which starts the parser process and DuckDB's threads),
        # loading and warming the model (torch's threads) and indexing run here, at a
        # lower OS priority, so the window keeps the CPU it needs on a busy machine.
        self.engine = Background(max_threads=1, parent=self, lower_by=10 if lowered else 0)
        # Its one thread is kept for good: the model runs fastest on the thread that
        # warmed it, and Qt would otherwise end an idle thread after 30 s.
        self.engine.pool.setExpiryTimeout(-1)
        self.library: Library | None = None
        self._start_lock = threading.Lock()
        self._opening: Library | None = None  # opened, its signal maybe not delivered yet
        self._open_done: threading.Event | None = None  # the library made (or failed)
        self._opening_record = False  # the open has begun on the record itself
        self._model_task: Task | None = None
        self._model: Embedder | None = None  # loaded, waiting for the library to open
        self.phase = "starting"
        self.llm_status = LLMStatus("checking", self.settings.llm_kind)
        self.snapshot: LibrarySnapshot | None = None
        # Which job runs, pause, cancel and a full disk: decided by the coordinator the
        # app shares with `lectern watch`; this object runs its jobs and says what happens.
        self.work = IndexingCoordinator(
            self._start_job,
            can_start=lambda: self.is_ready and not self._closing,
            on_paused=self.index_paused.emit,
            on_cancelled=self.index_cancelled.emit,
            library=lambda: self.library,
        )
        self._pending_paths: list[str] = []
        self._refreshing = False
        self._refresh_again = False
        self._llm_check: Task | None = None
        self._watch_enabled = watch
        self.watcher: Any = None
        self.watch_bridge: Any = None
        self._ipc: Any = None  # answers `lectern search`/`status`/`ask` run beside the app
        self.watch_status: dict[str, tuple[str, str]] = {}
        self._closing = False
        # Closed with work left running that cannot be interrupted and is not waited for
        # (the model's load, an index run's last batch): the process should exit at once.
        self.abandoned = False
        self._disk_timer = QTimer(self)
        self._disk_timer.setInterval(int(DISK_RECHECK_S * 1000))
        self._disk_timer.timeout.connect(self._check_disk_space)
        self._refresh_timer = QTimer(self)
        self._refresh_timer.setInterval(LIBRARY_REFRESH_MS)
        self._refresh_timer.timeout.connect(self.refresh_library)
        # A file deleted during a long run leaves the library at once (the watcher applies
        # it beside the run): the counts follow then, not when the run ends.
        self.documents_removed.connect(self._documents_removed)
        self._switch_timer = QTimer(self)
        self._switch_timer.setSingleShot(True)
        self._switch_timer.setInterval(SWITCH_REFRESH_MS)
        self._switch_timer.timeout.connect(self.refresh_library)
        self._llm_timer = QTimer(self)
        self._llm_timer.setInterval(LLM_RECHECK_MS)
        self._llm_timer.timeout.connect(lambda: self.check_llm(quiet=True))

    # --- start-up -----------------------------------------------------------------------

    def start(self) -> None:
        """Open the library and load the model, side by side, in the background.

        The library opens on ``background`` in a fraction of a second, and from then on
        it is searchable by keyword (``opened``; ``Library(defer_model=True)``): searches
        and quoted answers rank by keyword until the model is in. The model loads and
        warms meanwhile on ``engine``, the thread that later indexes with it (torch ran
        20-30 % slower on another thread than on the one that first used it). "Ready"
        when both are done. Loaded one after the other, on one thread, the library was
        not searchable until the model was in (seconds; half a minute on a busy machine).
        """
        # Up to five engine threads (indexing, parsing, answering, the stream reader, the
        # watcher) share the GIL with the UI thread. Python hands it over every 5 ms by
        # default, so the UI could wait several turns; 1 ms keeps it responsive for a
        # throughput cost too small to measure next to embedding.
        sys.setswitchinterval(min(sys.getswitchinterval(), 0.001))
        if self._closing:
            return  # closed before its first frame was painted (see desktop/__main__.py)
        self._set_phase("opening", "Opening your library…")
        settings, embedder = self.settings, self._embedder
        self._model = None
        self._opening_record = False

        opened = threading.Event()
        self._open_done = opened

        def open_library(ctx: TaskContext) -> None:
            try:
                from core.library import Library  # most of the time: duckdb, numpy

                with self._start_lock:
                    if self._closing:
                        return  # closed before the record was touched: nothing to close
                    self._opening_record = True
                wait_for_close(settings.home)
                library = Library(settings, embedder=embedder, defer_model=True)
                with self._start_lock:
                    closing = self._closing
                    if not closing:
                        # Held here too, for a shutdown that comes before this task's
                        # signal reaches the UI thread: the record is closed either way.
                        self._opening = library
                if closing:
                    library.close()
                    return
            finally:
                opened.set()  # what a shutdown waits for
            ctx.report(library)

        def load_model(ctx: TaskContext) -> Embedder:
            # Importing torch and transformers makes millions of objects, and every full
            # garbage collection meanwhile walked all of them with every thread stopped:
            # pauses growing to 250 ms froze the window while the model loaded. Nothing
            # they make is garbage worth collecting, so the collector waits until they are
            # loaded, and then they are moved out of its sight for good (gc.freeze); newer
            # garbage is still collected.
            gc.disable()
            try:
                # Import the answering code here rather than on the UI thread after the
                # first answer, where pulling in httpx would freeze the window a moment
                # (an answer asked before Ready imports it on its own thread).
                import core.generation.qa  # noqa: F401
                from core.embedding.models import load_embedder

                if embedder is not None:
                    return embedder  # handed over loaded (tests): the caller's to warm
                model = load_embedder(settings.embedding_model)
                # One embedding warms the model and starts torch's worker threads here,
                # where they inherit this thread's lower priority.
                model.embed(["warm up"])
                return model
            finally:
                gc.freeze()
                gc.enable()

        self.background.submit(
            open_library,
            name="open library",
            on_progress=self._library_opened,
            on_error=self._start_failed,
        )
        self._model_task = self.engine.submit(
            load_model,
            name="load model",
            on_result=self._model_loaded,
            on_error=self._start_failed,
        )
        self.check_llm()
        self._llm_timer.start()

    def _library_opened(self, library: Library) -> None:
        if self._closing or self.phase == "failed":
            # The model failed meanwhile (the window says so), or the window closed.
            with self._start_lock:
                self._opening = None
            if not self._closing:
                library.close()
            return
        self.library = library
        # Read-only `lectern` commands, which cannot open the library now, ask here
        # (core/ipc/; separate from desktop/single_instance.py's Qt socket). Started on
        # this thread: its threads keep this priority, not the engine's.
        from core.ipc import serve

        self._ipc = serve(library)
        if self._model is None:
            self._set_phase("loading_model", "Loading the search model · keyword search works")
        self.opened.emit()
        self.refresh_library()
        self.refresh_conversations()
        self._maybe_ready()

    def _model_loaded(self, model: Embedder) -> None:
        self._model = model
        self._maybe_ready()

    def _maybe_ready(self) -> None:
        """Ready once both the library and the model are in, whichever came first."""
        library = self.library
        if (
            library is not None
            and self._model is not None
            and not self._closing
            and self.phase in ("opening", "loading_model")
        ):
            self._opened(library)

    def _opened(self, library: Library) -> None:
        model = self._model
        self._model = None
        if model is not None and not library.adopt_embedder(model):
            # A change of embedding model is pending: until it switches, the index's own
            # model searches and indexes. Loaded on the indexing thread, as above.
            self._set_phase("loading_model", "Loading the search model…")

            def load(ctx: TaskContext) -> Embedder:
                loaded = library.load_model()
                loaded.embed(["warm up"])
                return loaded

            self._model_task = self.engine.submit(
                load,
                name="load model",
                on_result=lambda _model: self._opened(library),
                on_error=self._start_failed,
            )
            return
        if self._closing:
            return
        # Called on the indexing thread; the signal carries the paths to the UI thread.
        library.indexer.on_removed.append(self.documents_removed.emit)
        self._set_phase("ready", "Ready")
        self.ready.emit()
        # Repairs made at open (a log set aside, a damaged file rebuilt) are said once.
        for repaired in library.recovery_notices:
            self.notice.emit("warning", f"{repaired.message} {repaired.hint}".strip())
        self._start_watcher()
        pending, self._pending_paths = self._pending_paths, []
        if pending:
            self.add_folders(pending)
        elif self.watcher is None:
            # Catch up with changes made while Lectern was closed (the watcher does this
            # itself when it starts).
            known = self.snapshot.folders if self.snapshot else ()
            if known:
                self.work.enqueue(IndexJob(paths=None))

    def _start_failed(self, exc: BaseException) -> None:
        if self._closing or self.phase == "failed":
            return
        message, hint = describe_error(exc)
        server, self._ipc = self._ipc, None
        if server is not None:
            server.close()
        library, self.library = self.library, None
        self._model = None
        with self._start_lock:
            self._opening = None
        if library is not None:
            # The model failed after the library opened: closed now, so that "Try again"
            # opens it afresh (one owner of the data folder at a time).
            try:
                library.close()
            except Exception:
                log.exception("closing the library failed")
        self._set_phase("failed", message)
        self.failed.emit(message, hint)

    def retry_start(self) -> None:
        if self.phase == "failed":
            self.start()

    @property
    def is_open(self) -> bool:
        """The library is open: searches and quoted answers work (by keyword until the
        model is loaded, ``is_ready``)."""
        return self.library is not None and self.phase in ("loading_model", "ready")

    @property
    def model_loaded(self) -> bool:
        library = self.library
        return library is not None and library.model_loaded

    # --- the library as it was last shown ------------------------------------------------

    def show_saved_library(self) -> None:
        """Show the library as the last session left it, until the open one answers.

        Called before the window's first paint: a reopen shows its folders at once
        instead of the first-run screen for the second or so that opening takes.
        """
        snapshot = read_saved_snapshot(self.settings.home / SAVED_SNAPSHOT)
        if snapshot is not None and snapshot.folders and self.snapshot is None:
            self.snapshot = snapshot
            self.library_changed.emit(snapshot)

    def _save_snapshot(self) -> None:
        snapshot = self.snapshot
        if snapshot is None or snapshot.saved:
            return
        try:
            write_saved_snapshot(self.settings.home / SAVED_SNAPSHOT, snapshot)
        except OSError as exc:  # a nicety: the next start shows the library a moment later
            log.warning("the library's last view could not be saved: %s", exc)

    def _set_phase(self, phase: str, text: str) -> None:
        self.phase = phase
        self.phase_changed.emit(phase, text)

    @property
    def is_ready(self) -> bool:
        return self.phase == "ready" and self.library is not None

    # --- folders and indexing --------------------------------------------------------

    def add_folders(self, paths: Sequence[str]) -> list[str]:
        """Add and index folders; returns the ones accepted (others get a notice)."""
        accepted: list[str] = []
        for raw in paths:
            path = os.path.normpath(os.path.abspath(os.path.expanduser(raw)))
            if os.path.isdir(path):
                accepted.append(path)
            elif os.path.isfile(path):
                self.notice.emit(
                    "warning",
                    f"“{os.path.basename(path)}” is a file. Lectern indexes whole folders: "
                    "drop the folder that holds it.",
                )
            else:
                self.notice.emit("error", f"“{path}” does not exist or cannot be opened.")
        if not accepted:
            return []
        if not self.is_ready:
            # Dropped while the model loads: index as soon as the library is open.
            self._pending_paths.extend(p for p in accepted if p not in self._pending_paths)
            self.notice.emit("info", "Your folders will be indexed as soon as Lectern is ready.")
            return accepted
        self.work.resume_cancelled()  # adding a folder is a request to index now
        self.work.enqueue(IndexJob(paths=accepted))
        return accepted

    def rescan(self) -> None:
        if not self.is_ready:
            return
        if self.cancelled:
            self.work.resume_cancelled()  # the full pass it starts is the rescan
        elif self.watcher is not None:
            self.watcher.request_reconcile()
        else:
            self.work.enqueue(IndexJob(paths=None))

    def retry(self, paths: Sequence[str]) -> None:
        if self.is_ready and paths:
            self.work.resume_cancelled()
            self.work.enqueue(IndexJob(paths=None, files=list(paths), retry=True))

    def sync_files(self, paths: Sequence[str]) -> None:
        """Re-check changed files (used by the folder watcher)."""
        if self.cancelled:
            return  # the full pass that resuming starts finds these changes
        if self.is_ready and paths:
            self.work.enqueue(IndexJob(paths=None, files=list(paths)))

    def remove_folder(self, path: str) -> None:
        if not self.is_ready:
            return
        library = self.library
        assert library is not None
        # A running job may be writing this folder's files: stop it, then remove.
        self.work.stop_current_job()

        running = self.current_job.task if self.current_job is not None else None

        def remove(ctx: TaskContext) -> int:
            if running is not None:
                running.done.wait(60)
            # The library blanks the removed documents' text in saved conversations too.
            return library.remove_folder(path)

        def done(removed: int) -> None:
            name = os.path.basename(path) or path
            self.notice.emit(
                "info", f"Removed “{name}” from the library ({count_of(removed, 'file')})."
            )
            self.refresh_library()

        self.background.submit(
            remove, name="remove folder", on_result=done, on_error=self._report_error
        )

    def _start_job(self, job: IndexJob) -> None:
        library = self.library
        assert library is not None

        def run(ctx: TaskContext) -> IndexReport:
            return run_job(library, job, lambda value, force: ctx.report(value, force=force))

        def progress(value: Any) -> None:
            if value == FOLDERS_ADDED:
                self.refresh_library()
            elif isinstance(value, IndexProgress):
                self.work.last_progress = value
                self.index_progress.emit(value)

        job.task = self.engine.submit(
            run,
            name="index",
            on_progress=progress,
            on_result=lambda report: self._job_done(report),
            on_error=lambda exc: self._job_failed(exc),
            min_interval_s=PROGRESS_INTERVAL_S,
        )
        self._refresh_timer.start()
        self.index_started.emit(job)

    def _job_done(self, report: IndexReport) -> None:
        self.work.job_done(report)
        self._refresh_timer.stop()
        self.index_finished.emit(report)
        self._take_model_notice()
        self.refresh_library()
        self.work.next_job()

    def _take_model_notice(self) -> None:
        """A new library that started with the multilingual model (its first documents
        were mostly not English) says so once; the app's settings then name that model."""
        library = self.library
        notice = library.take_model_notice() if library is not None else None
        if library is None or notice is None:
            return
        self.settings = self.settings.with_changes(embedding_model=library.settings.embedding_model)
        self.settings_changed.emit(self.settings)
        self.notice.emit("info", notice)

    def _job_failed(self, exc: BaseException) -> None:
        waiting = self.work.job_failed(exc)
        self._refresh_timer.stop()
        message, hint = describe_error(exc)
        self.index_failed.emit(message, hint)
        self.refresh_library()
        if waiting:
            # Indexing waits for room rather than failing file after file; once the
            # person frees space it carries on by itself.
            self._disk_timer.start()
            return
        self.work.next_job()

    def _check_disk_space(self) -> None:
        if self.work.disk_full is None or self._closing:
            self._disk_timer.stop()
            return
        if not self.work.room_again():
            return
        self._disk_timer.stop()
        self.notice.emit("info", "There is room on the disk again; indexing carries on.")
        self.work.enqueue(IndexJob(paths=None))

    def pause_indexing(self) -> None:
        """Pause the running job and the watcher (files finished so far stay searchable)."""
        self.work.pause()

    def resume_indexing(self) -> None:
        """Resume after a pause, or after a cancel (then with a full pass)."""
        self.work.resume()

    def cancel_indexing(self) -> None:
        """Stop indexing, and stay stopped until the person resumes (see
        ``IndexingCoordinator.cancel``)."""
        self.work.cancel()
        if self.work.current_job is None:
            self._refresh_timer.stop()

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
    def watch_running(self) -> bool:
        return self.work.watch_running

    @property
    def indexing(self) -> bool:
        return self.work.indexing

    # --- reading the library ------------------------------------------------------------

    def _documents_removed(self, _paths: object) -> None:
        # A method of this object, not a lambda: it runs on the UI thread, not the one
        # that removed the files.
        self.refresh_library()

    def refresh_library(self) -> None:
        """Reload folder counts and problem files (coalesced: one query in flight)."""
        library = self.library
        if library is None or self._closing:
            return
        if self._refreshing:
            self._refresh_again = True
            return
        self._refreshing = True

        def load(ctx: TaskContext) -> LibrarySnapshot:
            folders = tuple(library.folder_status())
            problems: dict[str, list[Document]] = {f.path: [] for f in folders}
            for state in ("failed", "skipped"):
                for doc in library.documents(state=state):
                    problems.setdefault(doc.folder, []).append(doc)
            switching = library.reembedding_status()
            chunks = sum(f.chunks for f in folders)
            advice = self._model_advice(library, chunks) if not switching else None
            return LibrarySnapshot(
                folders=folders,
                problems={k: tuple(v) for k, v in problems.items()},
                chunks=chunks,
                documents=sum(f.indexed for f in folders),
                embedded=library.searchable()[1],
                switching=switching.sentence if switching else "",
                advice=advice.message if advice else "",
                advice_model=advice.model if advice else "",
            )

        def loaded(snapshot: LibrarySnapshot) -> None:
            previous, self.snapshot = self.snapshot, snapshot
            self.library_changed.emit(snapshot)
            if previous is None or [f.path for f in previous.folders] != [
                f.path for f in snapshot.folders
            ]:
                # Kept for the next start at once, not only at a clean close.
                self._save_snapshot()
            if snapshot.switching and not self._closing and not self._switch_timer.isActive():
                self._switch_timer.start()  # its progress is followed until it switches

        def finished() -> None:
            self._refreshing = False
            if self._refresh_again:
                self._refresh_again = False
                self.refresh_library()

        self.background.submit(
            load,
            name="library snapshot",
            on_result=loaded,
            on_error=self._report_error,
            on_finished=finished,
        )

    def _model_advice(self, library: Library, chunks: int) -> ModelAdvice | None:
        """The offer of another embedding model once indexing is done (the library
        keeps its language sample until it grows by a tenth); never after the person
        said not now."""
        if self.settings.model_offer_declined or chunks == 0 or self.indexing:
            return None  # while indexing, the first files alone would decide
        return library.model_advice()

    def switch_embedding_model(self, model_id: str) -> None:
        """Change the library's embedding model: saved in the settings and re-embedded in
        the background while the current model answers."""
        self.apply_settings(self.settings.with_changes(embedding_model=model_id))
        self.run(
            lambda library, _ctx: library.change_embedding_model(model_id),
            name="switch the embedding model",
            on_result=lambda _r: self.refresh_library(),
        )

    def decline_model_offer(self) -> None:
        self.apply_settings(self.settings.with_changes(model_offer_declined=True))
        self.refresh_library()

    def run(
        self,
        fn: Callable[[Library, TaskContext], Any],
        *,
        name: str,
        on_result: Callable[[Any], None] | None = None,
        on_error: Callable[[BaseException], None] | None = None,
        on_progress: Callable[[Any], None] | None = None,
        min_interval_s: float = 0.0,
    ) -> Task | None:
        """Run ``fn(library, ctx)`` in the background once the library is open."""
        library = self.library
        if library is None:
            if on_error is not None:
                on_error(
                    LecternError(
                        "Lectern is still starting.", "Wait until the status bar says Ready."
                    )
                )
            return None
        return self.background.submit(
            lambda ctx: fn(library, ctx),
            name=name,
            on_result=on_result,
            on_error=on_error or self._report_error,
            on_progress=on_progress,
            min_interval_s=min_interval_s,
        )

    def _report_error(self, exc: BaseException) -> None:
        message, hint = describe_error(exc)
        self.notice.emit("error", f"{message} {hint}".strip())

    # --- questions -------------------------------------------------------------------

    def ask(
        self,
        question: str,
        conversation_id: int | None,
        *,
        on_event: Callable[[Any], None],
        on_error: Callable[[BaseException], None],
        on_finished: Callable[[], None] | None = None,
        scope: Scope | None = None,
    ) -> Task | None:
        settings = self.settings

        def answer(library: Library, ctx: TaskContext) -> None:
            from core.generation.events import WarningKind
            from core.generation.qa import ask
            from core.generation.session import AnswerSession

            # A bad address: answer as with no server at all, saying how to fix it here.
            with AnswerSession(
                settings, config_kind=WarningKind.LLM_UNAVAILABLE, describe=address_problem
            ) as session:
                for event in ask(
                    library,
                    question,
                    conversation_id,
                    model=settings.llm_model,
                    cancel=ctx.cancel,
                    k=settings.top_k,
                    scope=scope,
                    session=session,
                ):
                    ctx.report(event)

        def event(value: Any) -> None:
            self._llm_evidence(value)
            on_event(value)

        task = self.run(answer, name="ask", on_progress=event, on_error=on_error)
        if task is not None:
            task.signals.finished.connect(self.refresh_conversations)
            # Every answer says something about the server: ask it again right away.
            task.signals.finished.connect(lambda: self.check_llm(quiet=True))
            if on_finished is not None:
                task.signals.finished.connect(on_finished)
        return task

    def search(
        self,
        query: str,
        *,
        on_result: Callable[[Any], None],
        on_error: Callable[[BaseException], None],
        scope: Scope | None = None,
        mode: str = "hybrid",
    ) -> Task | None:
        """``mode``: "bm25" finds only passages holding the words; "hybrid" their
        meaning too."""
        k = max(10, self.settings.top_k)
        return self.run(
            lambda library, ctx: library.search(query, k=k, mode=mode, scope=scope),
            name="search",
            on_result=on_result,
            on_error=on_error,
        )

    # --- conversations ---------------------------------------------------------------

    def refresh_conversations(self) -> None:
        def load(library: Library, ctx: TaskContext) -> list[Any]:
            return library.conversations.list()

        self.run(load, name="conversations", on_result=self.conversations_changed.emit)

    def load_turns(
        self, conversation_id: int, on_result: Callable[[list[Any]], None]
    ) -> Task | None:
        def load(library: Library, ctx: TaskContext) -> list[Any]:
            return library.conversations.turns(conversation_id)

        return self.run(load, name="load conversation", on_result=on_result)

    def delete_conversation(self, conversation_id: int) -> None:
        def delete(library: Library, ctx: TaskContext) -> None:
            library.delete_conversation(conversation_id)

        task = self.run(delete, name="delete conversation")
        if task is not None:
            task.signals.finished.connect(self.refresh_conversations)

    def rename_conversation(
        self,
        conversation_id: int,
        title: str,
        *,
        on_result: Callable[[Any], None],
        on_error: Callable[[BaseException], None],
    ) -> Task | None:
        def rename(library: Library, ctx: TaskContext) -> Any:
            return library.rename_conversation(conversation_id, title)

        task = self.run(rename, name="rename conversation", on_result=on_result, on_error=on_error)
        if task is not None:
            task.signals.finished.connect(self.refresh_conversations)
        return task

    def search_conversations(
        self, query: str, on_result: Callable[[list[Any]], None]
    ) -> Task | None:
        def search(library: Library, ctx: TaskContext) -> list[Any]:
            return library.search_conversations(query)

        return self.run(search, name="search conversations", on_result=on_result)

    def export_conversation(
        self,
        conversation_id: int,
        path: str,
        *,
        on_result: Callable[[str], None],
        on_error: Callable[[BaseException], None],
    ) -> Task | None:
        def export(library: Library, ctx: TaskContext) -> str:
            library.export_conversation(conversation_id, path)
            return path

        return self.run(export, name="export conversation", on_result=on_result, on_error=on_error)

    # --- collections and scopes ---------------------------------------------------------

    def load_scope_choices(self, on_result: Callable[[ScopeChoices], None]) -> Task | None:
        """The collections, library folders and file types a scope can be made of."""

        def load(library: Library, ctx: TaskContext) -> ScopeChoices:
            return ScopeChoices(
                tuple(library.collections()),
                tuple(library.folders()),
                tuple(library.document_types()),
            )

        return self.run(load, name="scope choices", on_result=on_result)

    def change_collections(
        self,
        change: Callable[[Library], Any],
        *,
        on_result: Callable[[Any], None] | None = None,
        on_error: Callable[[BaseException], None] | None = None,
    ) -> Task | None:
        """Run one change to the collections (``change(library)``) off the UI thread;
        ``collections_changed`` follows it."""
        task = self.run(
            lambda library, ctx: change(library),
            name="collections",
            on_result=on_result,
            on_error=on_error,
        )
        if task is not None:
            task.signals.finished.connect(self.collections_changed.emit)
        return task

    def load_conversation_scope(
        self, conversation_id: int, on_result: Callable[[Scope], None]
    ) -> Task | None:
        return self.run(
            lambda library, ctx: library.conversation_scope(conversation_id),
            name="conversation scope",
            on_result=on_result,
        )

    def set_conversation_scope(self, conversation_id: int, scope: Scope) -> Task | None:
        return self.run(
            lambda library, ctx: library.set_conversation_scope(conversation_id, scope),
            name="save scope",
        )

    # --- the model server ---------------------------------------------------------------

    def check_llm(self, settings: Settings | None = None, *, quiet: bool = False) -> None:
        """Ask the model server what it has, on a worker thread.

        ``quiet`` (the periodic check and the one after each answer) keeps showing the
        current state until the answer comes, and is skipped while a check is running.
        """
        if self._closing:
            return
        settings = settings or self.settings
        previous = self._llm_check
        if quiet and previous is not None and not previous.done.is_set():
            return
        if not quiet:
            self._set_llm_status(LLMStatus("checking", settings.llm_kind))
        if previous is not None:
            previous.cancel()

        def check(ctx: TaskContext) -> LLMStatus:
            return probe_llm(settings)

        def done(status: LLMStatus) -> None:
            if task is not self._llm_check or self._closing:
                return  # a newer check (or an answer) superseded this one
            self._set_llm_status(status)

        def failed(exc: BaseException) -> None:  # never leave "checking" up for good
            message, hint = describe_error(exc)
            done(
                LLMStatus(
                    "error", settings.llm_kind, model=settings.llm_model, message=message, hint=hint
                )
            )

        task = self.probes.submit(check, name="check llm", on_result=done, on_error=failed)
        self._llm_check = task

    def _set_llm_status(self, status: LLMStatus) -> None:
        self.llm_status = status
        self.llm_status_changed.emit(status)

    def _llm_evidence(self, event: Any) -> None:
        """What an answer just showed about the server beats what the last check said."""
        from core.errors import LLMError, ModelNotFoundError
        from core.generation.events import WarningKind
        from core.generation.qa import DoneEvent, ErrorEvent, WarningEvent

        settings, status = self.settings, self.llm_status
        url = status.url or llm_address(settings)
        down = (WarningKind.LLM_UNAVAILABLE, WarningKind.LLM_TIMEOUT)
        if isinstance(event, WarningEvent) and event.kind in down:
            if status.state in ("invalid", "unreachable"):
                return
            new = LLMStatus(
                "unreachable", settings.llm_kind, url, settings.llm_model, message=event.message
            )
        elif isinstance(event, DoneEvent) and event.model:
            if status.ready and model_matches(status.model, event.model):
                return
            models = status.models if status.models else (event.model,)
            new = LLMStatus("ready", settings.llm_kind, url, event.model, models)
        elif isinstance(event, ErrorEvent) and isinstance(event.error, ModelNotFoundError):
            if status.state == "model_missing":
                return
            new = LLMStatus(
                "model_missing",
                settings.llm_kind,
                url,
                settings.llm_model,
                message=event.error.message,
                hint=event.error.hint,
            )
        elif isinstance(event, ErrorEvent) and isinstance(event.error, LLMError):
            self.check_llm(quiet=True)
            return
        else:
            return
        if self._llm_check is not None:
            self._llm_check.cancel()
            self._llm_check = None  # a check that started before the answer is stale
        self._set_llm_status(new)

    def apply_settings(self, settings: Settings) -> None:
        old = self.settings
        self.settings = settings
        try:
            settings.save()
        except OSError as exc:
            self.notice.emit("error", f"The settings could not be saved: {exc}.")
        if self.library is not None:
            # The library reads top_k and the LLM fields from its settings per call.
            self.library.settings = settings
            # A running index or watcher batch follows at its next file or batch.
            self.library.set_index_pace(settings.index_when, settings.index_cpu_share)
        self.settings_changed.emit(settings)
        if (old.llm_kind, old.llm_url, old.llm_model, old.llm_api_key) != (
            settings.llm_kind,
            settings.llm_url,
            settings.llm_model,
            settings.llm_api_key,
        ):
            self.check_llm()

    # --- watching -----------------------------------------------------------------------

    def _start_watcher(self) -> None:
        if not self._watch_enabled or self.library is None:
            return
        from desktop.watching import WatchHandlers, start_watcher

        handlers = WatchHandlers(
            self._watch_progress, self._watch_batch, self._watch_status, self._watch_error
        )
        self.watcher, self.watch_bridge = start_watcher(
            self.library, self.background, handlers, parent=self
        )
        self.work.watcher = self.watcher

    def _watch_progress(self, progress: IndexProgress) -> None:
        work = self.work
        if work.current_job is not None or work.cancelled or self._closing:
            return  # the job reports its own progress; a cancelled batch is winding down
        work.last_progress = progress
        if not work.watch_running and progress.files_total:
            work.watch_running = True
            self._refresh_timer.start()
        if work.watch_running:
            self.index_progress.emit(progress)

    def _watch_batch(self, batch: Any) -> None:
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
            self.refresh_library()
        self.watch_idle.emit()

    def _watch_status(self, folder: str, state: str, reason: str) -> None:
        if state == "stopped":
            self.watch_status.pop(folder, None)
        else:
            self.watch_status[folder] = (state, reason)
        self.watch_changed.emit(dict(self.watch_status))
        if state == "offline":
            self.refresh_library()

    def _watch_error(self, exc: BaseException) -> None:
        message, hint = describe_error(exc)
        self.notice.emit("error", f"Keeping folders up to date failed: {message} {hint}".strip())
        if self.work.failed(exc):  # a full disk: the watcher waits for room, as jobs do
            self._disk_timer.start()

    # --- shutting down ------------------------------------------------------------------

    def shutdown(self, wait_ms: int | None = None) -> None:
        """Stop everything and close the library, without waiting out what cannot be
        interrupted.

        Loading the model (seconds) touches no data: it is never waited for. Opening the
        library is (normally a fraction of a second), so that the record is closed
        cleanly. An index run stops after its current embedding batch, which cannot be
        interrupted either; each document is written in one transaction, so nothing is
        lost by not waiting: past ``wait_ms`` the run's thread is left to finish that batch
        on its own, the parser process is stopped and the database is left open for the
        process's exit (what the batch had not committed is indexed next time). The close
        itself gets what is left of ``wait_ms`` too: past it, it finishes on its own
        thread until the process exits (``close_in_background``). In each of these cases
        ``abandoned`` is set and ``python -m desktop`` then exits at once: a model load
        left running kept the process for seconds after its window had gone.
        """
        if self._closing:
            return
        with self._start_lock:
            self._closing = True
            # Still importing, the open stops before it touches the record: not waited.
            open_waited = self._opening_record
        wait_ms = SHUTDOWN_WAIT_MS if wait_ms is None else wait_ms
        deadline = time.monotonic() + wait_ms / 1000
        self._save_snapshot()
        self._refresh_timer.stop()
        self._switch_timer.stop()
        self._llm_timer.stop()
        self.work.drop_queued()
        self.work.stop_current_job()
        for pool in (self.engine, self.background, self.probes):
            pool.cancel_all()
        server, self._ipc = self._ipc, None
        if server is not None:
            server.close(timeout=max(0.1, deadline - time.monotonic()))
        watcher = self.watcher
        if watcher is not None:
            try:
                watcher.cancel_running()
                watcher.stop(timeout=max(0.1, deadline - time.monotonic()))
            except Exception:
                log.exception("stopping the watcher failed")
        opening = self._open_done
        opened = opening is None or not open_waited or opening.wait(OPEN_WAIT_S)
        job = self.current_job
        indexing_done = (
            job is None
            or job.task is None
            or job.task.done.wait(max(0.0, deadline - time.monotonic()))
        )
        model = self._model_task
        # None of them touches the library: loading the model, asking the model server
        # (up to seconds against a server that does not answer), an open still importing.
        left_running = (
            (model is not None and not model.done.is_set())
            or self.probes.busy
            or (opening is not None and not opening.is_set())  # still importing
        )
        watcher_alive = watcher is not None and watcher.worker_alive
        with self._start_lock:
            library = self.library or self._opening
            self._opening = None
        if library is None:
            # Nothing open to close; an open still running closes its library itself.
            self.abandoned = left_running and opened
            return
        # Searches and answers in flight read the library: closed after them.
        idle = indexing_done and self.background.wait(
            max(0, int((deadline - time.monotonic()) * 1000))
        )
        if idle and not watcher_alive:
            # The close itself waits on what it cannot interrupt (a re-embedding's batch in
            # the model, up to a second; a checkpoint): on a busy computer it took seconds
            # (3.2-6.6 s at load 6-8). It has what is left of the wait, then the process
            # exits without it (see close_in_background).
            closing = close_in_background(library)
            closing.join(max(0.05, deadline - time.monotonic()))
            self.library = None
            if not closing.is_alive():
                # The record is closed: what is left running is not waited for.
                self.abandoned = left_running
                return
            log.warning("closing the library takes longer than a quit may; not waited for")
        else:
            log.warning("closing with indexing still finishing a batch; it is not waited for")
        self.abandoned = True
        # No reader may outlive the app; one holds nothing of the library, so it is
        # stopped at once rather than asked (which waited up to seconds under load).
        with contextlib.suppress(Exception):
            library.parser.kill()
