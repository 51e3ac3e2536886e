"""The desktop app's link to the engine: one ``Backend`` per window.

The backend owns the ``Library`` and turns every engine call into background work (see
``workers.py``) whose outcome arrives as a Qt signal. It holds no logic of its own beyond
scheduling: what to index, how to answer and what went wrong all come from ``core``.
Heavy engine modules are imported inside the background functions, so the window is on
screen before torch or DuckDB are even loaded.
"""

from __future__ import annotations

import gc
import logging
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from PySide6.QtCore import QObject, QTimer, Signal

from core.config import Settings, load_settings
from core.errors import LecternError
from core.records import Document, IndexProgress, IndexReport
from desktop.workers import Background, Task, TaskContext, describe_error

if TYPE_CHECKING:
    from core.embedding import Embedder
    from core.library import FolderStatus, Library

log = logging.getLogger(__name__)

LIBRARY_REFRESH_MS = 700  # folder counts while indexing (one cheap query)
PROGRESS_INTERVAL_S = 0.1


@dataclass(frozen=True)
class LibrarySnapshot:
    folders: tuple[FolderStatus, ...]
    problems: dict[str, tuple[Document, ...]]  # folder -> failed and skipped files
    chunks: int = 0
    documents: int = 0


@dataclass(frozen=True)
class LLMStatus:
    """What the configured model server said when last asked."""

    state: str  # checking | ready | unreachable | no_models | model_missing | error
    kind: str = "ollama"
    url: str = ""
    model: str = ""
    models: tuple[str, ...] = ()
    message: str = ""
    hint: str = ""

    @property
    def ready(self) -> bool:
        return self.state == "ready"

    @property
    def server_name(self) -> str:
        return "Ollama" if self.kind == "ollama" else "the model server"


@dataclass
class IndexJob:
    paths: list[str] | None  # None: every library folder
    files: list[str] | None = None  # only these files (a retry or a watcher batch)
    retry: bool = False
    controls: Any = None
    task: Task | None = None
    paused: bool = False
    started: float = field(default_factory=time.monotonic)


def model_matches(wanted: str, installed: str) -> bool:
    """``llama3.2`` and ``llama3.2:latest`` name the same Ollama model."""

    def full(name: str) -> str:
        return name if ":" in name else f"{name}:latest"

    return full(wanted.strip()) == full(installed.strip())


class Backend(QObject):
    phase_changed = Signal(str, str)  # opening | loading_model | ready | failed, and a sentence
    ready = Signal()
    failed = Signal(str, str)  # message, hint
    library_changed = Signal(object)  # LibrarySnapshot
    index_started = Signal(object)  # IndexJob
    index_progress = Signal(object)  # IndexProgress
    index_paused = Signal(bool)
    index_finished = Signal(object)  # IndexReport
    index_failed = Signal(str, str)
    notice = Signal(str, str)  # level (info | warning | error), sentence
    llm_status_changed = Signal(object)  # LLMStatus
    conversations_changed = Signal(object)  # list[Conversation]
    settings_changed = Signal(object)  # Settings
    watch_changed = Signal(object)  # {folder: (state, reason)}
    watch_idle = Signal()  # a watcher batch finished

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
        # Opening the library (which starts the parser process and DuckDB's threads),
        # loading and warming the model (torch's threads) and indexing run here, at a
        # lower OS priority, so the window keeps the CPU it needs on a busy machine.
        self.engine = Background(max_threads=1, parent=self, lower_by=10 if lowered else 0)
        self.library: Library | None = None
        self.phase = "starting"
        self.llm_status = LLMStatus("checking", self.settings.llm_kind)
        self.snapshot: LibrarySnapshot | None = None
        self._jobs: list[IndexJob] = []
        self.current_job: IndexJob | None = None
        self._pending_paths: list[str] = []
        self._refreshing = False
        self._refresh_again = False
        self._llm_check: Task | None = None
        self._watch_enabled = watch
        self.watcher: Any = None
        self.watch_bridge: Any = None
        self.watch_status: dict[str, tuple[str, str]] = {}
        self.paused = False
        self.watch_running = False
        self._closing = False
        self._refresh_timer = QTimer(self)
        self._refresh_timer.setInterval(LIBRARY_REFRESH_MS)
        self._refresh_timer.timeout.connect(self.refresh_library)

    # --- start-up -----------------------------------------------------------------------

    def start(self) -> None:
        """Open the library and load the model in the background."""
        # Up to five engine threads (indexing, parsing, answering, the stream reader, the
        # watcher) share the GIL with the UI thread. Python hands it over every 5 ms by
        # default, so the UI could wait several turns; 1 ms keeps it responsive for a
        # throughput cost too small to measure next to embedding.
        sys.setswitchinterval(min(sys.getswitchinterval(), 0.001))
        self._set_phase("opening", "Opening your library…")
        settings, embedder = self.settings, self._embedder

        def open_library(ctx: TaskContext) -> Library:
            # Importing torch and transformers makes millions of objects, and every full
            # garbage collection meanwhile walked all of them with every thread stopped:
            # pauses growing to 250 ms froze the window while the model loaded. Nothing
            # they make is garbage worth collecting, so the collector waits until they are
            # loaded, and then they are moved out of its sight for good (gc.freeze); newer
            # garbage is still collected.
            gc.disable()
            try:
                return load(ctx)
            finally:
                gc.freeze()
                gc.enable()

        def load(ctx: TaskContext) -> Library:
            from core.library import Library

            library = Library(settings, embedder=embedder)
            ctx.report(("opened", library))
            # Import the answering code here rather than on the UI thread at the first
            # answer, where pulling in numpy and httpx would freeze the window a moment.
            import core.qa  # noqa: F401

            try:
                # One embedding warms the model and starts torch's worker threads here,
                # where they inherit this thread's lower priority.
                library.embedder.embed(["warm up"])
            except BaseException:
                library.close()
                raise
            return library

        def progress(value: Any) -> None:
            if value[0] == "opened":
                self.library = value[1]
                self._set_phase("loading_model", "Loading the search model…")
                self.refresh_library()
                self.refresh_conversations()

        self.engine.submit(
            open_library,
            name="open library",
            on_progress=progress,
            on_result=self._opened,
            on_error=self._open_failed,
        )
        self.check_llm()

    def _opened(self, library: Library) -> None:
        self.library = library
        if self._closing:
            return
        self._set_phase("ready", "Ready")
        self.ready.emit()
        self._start_watcher()
        pending, self._pending_paths = self._pending_paths, []
        if pending:
            self.add_folders(pending)
        elif self.watcher is None:
            # Catch up with changes made while Lectern was closed (the watcher does this
            # itself when it starts).
            known = self.snapshot.folders if self.snapshot else ()
            if known:
                self._enqueue(IndexJob(paths=None))

    def _open_failed(self, exc: BaseException) -> None:
        message, hint = describe_error(exc)
        self.library = None
        self._set_phase("failed", message)
        self.failed.emit(message, hint)

    def retry_start(self) -> None:
        if self.phase == "failed":
            self.start()

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
        self._enqueue(IndexJob(paths=accepted))
        return accepted

    def rescan(self) -> None:
        if not self.is_ready:
            return
        if self.watcher is not None:
            self.watcher.request_reconcile()
        else:
            self._enqueue(IndexJob(paths=None))

    def retry(self, paths: Sequence[str]) -> None:
        if self.is_ready and paths:
            self._enqueue(IndexJob(paths=None, files=list(paths), retry=True))

    def sync_files(self, paths: Sequence[str]) -> None:
        """Re-check changed files (used by the folder watcher)."""
        if self.is_ready and paths:
            self._enqueue(IndexJob(paths=None, files=list(paths)))

    def remove_folder(self, path: str) -> None:
        if not self.is_ready:
            return
        library = self.library
        assert library is not None
        # A running job may be writing this folder's files: stop it, then remove.
        if self.current_job is not None:
            self.cancel_indexing(clear_queue=False)

        running = self.current_job.task if self.current_job is not None else None

        def remove(ctx: TaskContext) -> int:
            if running is not None:
                running.done.wait(60)
            gone = [d.path for d in library.documents(folder=path)]
            removed = library.remove_folder(path)
            try:
                from core.qa import conversation_store

                store = conversation_store(library)
                if store is not None and gone:
                    store.forget_documents(gone)
            except Exception:  # history cleanup must not block removing the folder
                log.exception("could not blank removed documents in conversations")
            return removed

        def done(removed: int) -> None:
            name = os.path.basename(path) or path
            self.notice.emit("info", f"Removed “{name}” from the library ({removed} files).")
            self.refresh_library()

        self.background.submit(
            remove, name="remove folder", on_result=done, on_error=self._report_error
        )

    def _enqueue(self, job: IndexJob) -> None:
        # A full rescan already covers any queued rescan.
        if (
            job.paths is None
            and job.files is None
            and any(j.paths is None and j.files is None for j in self._jobs)
        ):
            return
        self._jobs.append(job)
        self._next_job()

    def _next_job(self) -> None:
        if self.current_job is not None or not self._jobs or not self.is_ready or self._closing:
            return
        from core.indexer import Controls

        job = self._jobs.pop(0)
        job.controls = Controls()
        if self.paused:
            # Adding a folder is a request to index it now: lift an earlier pause.
            self.resume_indexing()
        job.started = time.monotonic()
        self.current_job = job
        library = self.library
        assert library is not None

        def run(ctx: TaskContext) -> IndexReport:
            def progress(p: IndexProgress) -> None:
                ctx.report(p, force=p.files_done >= p.files_total)

            if job.files is not None:
                if job.retry:
                    for path in job.files[:-1]:
                        library.retry(path)
                    return library.retry(job.files[-1])
                return library.sync_files(job.files, progress=progress, controls=job.controls)
            if job.paths:
                for path in job.paths:
                    library.add_folder(path)
                ctx.report("folders_added", force=True)
            return library.index(job.paths, progress=progress, controls=job.controls)

        def progress(value: Any) -> None:
            if value == "folders_added":
                self.refresh_library()
            elif isinstance(value, IndexProgress):
                self.index_progress.emit(value)

        job.task = self.engine.submit(
            run,
            name="index",
            on_progress=progress,
            on_result=lambda report: self._job_done(job, report),
            on_error=lambda exc: self._job_failed(job, exc),
            min_interval_s=PROGRESS_INTERVAL_S,
        )
        self._refresh_timer.start()
        self.index_started.emit(job)

    def _job_done(self, job: IndexJob, report: IndexReport) -> None:
        self.current_job = None
        self._refresh_timer.stop()
        self.index_finished.emit(report)
        self.refresh_library()
        self._next_job()

    def _job_failed(self, job: IndexJob, exc: BaseException) -> None:
        self.current_job = None
        self._refresh_timer.stop()
        message, hint = describe_error(exc)
        self.index_failed.emit(message, hint)
        self.refresh_library()
        self._next_job()

    def pause_indexing(self) -> None:
        """Pause the running job and the watcher (files finished so far stay searchable)."""
        job = self.current_job
        if job is not None and job.controls is not None:
            job.controls.pause()
            job.paused = True
        if self.watcher is not None:
            self.watcher.pause()
        self.paused = True
        self.index_paused.emit(True)

    def resume_indexing(self) -> None:
        job = self.current_job
        if job is not None and job.controls is not None:
            job.controls.resume()
            job.paused = False
        if self.watcher is not None:
            self.watcher.resume()
        self.paused = False
        self.index_paused.emit(False)

    def cancel_indexing(self, clear_queue: bool = True) -> None:
        if clear_queue:
            self._jobs.clear()
        job = self.current_job
        if job is not None and job.controls is not None:
            job.controls.stop()
            job.paused = False
        if self.paused and job is None:
            self.resume_indexing()

    @property
    def indexing(self) -> bool:
        return self.current_job is not None or self.watch_running

    # --- reading the library ------------------------------------------------------------

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
            return LibrarySnapshot(
                folders=folders,
                problems={k: tuple(v) for k, v in problems.items()},
                chunks=sum(f.chunks for f in folders),
                documents=sum(f.indexed for f in folders),
            )

        def loaded(snapshot: LibrarySnapshot) -> None:
            self.snapshot = snapshot
            self.library_changed.emit(snapshot)

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
    ) -> Task | None:
        settings = self.settings

        def answer(library: Library, ctx: TaskContext) -> None:
            from core.qa import ask

            for event in ask(
                library,
                question,
                conversation_id,
                model=settings.llm_model,
                cancel=ctx.cancel,
                k=settings.top_k,
            ):
                ctx.report(event)

        task = self.run(answer, name="ask", on_progress=on_event, on_error=on_error)
        if task is not None:
            task.signals.finished.connect(self.refresh_conversations)
            if on_finished is not None:
                task.signals.finished.connect(on_finished)
        return task

    def search(
        self,
        query: str,
        *,
        on_result: Callable[[Any], None],
        on_error: Callable[[BaseException], None],
    ) -> Task | None:
        k = max(10, self.settings.top_k)
        return self.run(
            lambda library, ctx: library.search(query, k=k),
            name="search",
            on_result=on_result,
            on_error=on_error,
        )

    # --- conversations ---------------------------------------------------------------

    def refresh_conversations(self) -> None:
        def load(library: Library, ctx: TaskContext) -> list[Any]:
            from core.qa import conversation_store

            store = conversation_store(library)
            return store.list() if store is not None else []

        self.run(load, name="conversations", on_result=self.conversations_changed.emit)

    def load_turns(
        self, conversation_id: int, on_result: Callable[[list[Any]], None]
    ) -> Task | None:
        def load(library: Library, ctx: TaskContext) -> list[Any]:
            from core.qa import conversation_store

            store = conversation_store(library)
            return store.turns(conversation_id) if store is not None else []

        return self.run(load, name="load conversation", on_result=on_result)

    def delete_conversation(self, conversation_id: int) -> None:
        def delete(library: Library, ctx: TaskContext) -> None:
            from core.qa import conversation_store

            store = conversation_store(library)
            if store is not None:
                store.delete(conversation_id)

        task = self.run(delete, name="delete conversation")
        if task is not None:
            task.signals.finished.connect(self.refresh_conversations)

    # --- the model server ---------------------------------------------------------------

    def check_llm(self, settings: Settings | None = None) -> None:
        settings = settings or self.settings
        self.llm_status = LLMStatus("checking", settings.llm_kind)
        self.llm_status_changed.emit(self.llm_status)
        if self._llm_check is not None:
            self._llm_check.cancel()

        def check(ctx: TaskContext) -> LLMStatus:
            return probe_llm(settings)

        def done(status: LLMStatus) -> None:
            if task is not self._llm_check:
                return  # a newer check superseded this one
            self.llm_status = status
            self.llm_status_changed.emit(status)

        task = self.background.submit(check, name="check llm", on_result=done)
        self._llm_check = task

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
        from desktop.watching import start_watcher

        self.watcher = start_watcher(self)

    def _watch_progress(self, progress: IndexProgress) -> None:
        if self.current_job is not None:
            return  # the job reports its own progress
        if not self.watch_running and progress.files_total:
            self.watch_running = True
            self._refresh_timer.start()
        if self.watch_running:
            self.index_progress.emit(progress)

    def _watch_batch(self, batch: Any) -> None:
        report = batch.report
        if self.watch_running:
            self.watch_running = False
            if self.current_job is None:
                self._refresh_timer.stop()
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

    # --- shutting down ------------------------------------------------------------------

    def shutdown(self, timeout_ms: int = 15000) -> None:
        self._closing = True
        self._refresh_timer.stop()
        self._jobs.clear()
        if self.current_job is not None and self.current_job.controls is not None:
            self.current_job.controls.stop()
        if self.watcher is not None:
            try:
                self.watcher.stop(timeout=10)
            except Exception:
                log.exception("stopping the watcher failed")
        for pool in (self.engine, self.background):
            pool.cancel_all()
        self.engine.wait(timeout_ms)
        self.background.wait(timeout_ms)
        if self.library is not None:
            try:
                self.library.close()
            except Exception:
                log.exception("closing the library failed")
            self.library = None


def probe_llm(settings: Settings) -> LLMStatus:
    """Ask the configured server what it has (runs in the background)."""
    from core.errors import LLMUnavailableError
    from core.generation.llm import make_client

    kind = settings.llm_kind
    url = settings.llm_url or (settings.resolved_llm_url if kind == "ollama" else "")
    try:
        client = make_client(settings, connect_timeout=3.0, request_timeout=8.0)
    except LecternError as exc:
        return LLMStatus("error", kind, url, settings.llm_model, message=exc.message, hint=exc.hint)
    try:
        url = client.url
        models = tuple(m.name for m in client.list_models())
    except LLMUnavailableError as exc:
        return LLMStatus(
            "unreachable", kind, url, settings.llm_model, message=exc.message, hint=exc.hint
        )
    except LecternError as exc:
        return LLMStatus("error", kind, url, settings.llm_model, message=exc.message, hint=exc.hint)
    except Exception as exc:  # a strange reply must not break start-up
        message, hint = describe_error(exc)
        return LLMStatus("error", kind, url, settings.llm_model, message=message, hint=hint)
    finally:
        client.close()
    if not models:
        return LLMStatus(
            "no_models",
            kind,
            url,
            settings.llm_model,
            message=f"{'Ollama' if kind == 'ollama' else 'The server'} is running but has no models yet.",
        )
    if not any(model_matches(settings.llm_model, m) for m in models):
        return LLMStatus(
            "model_missing",
            kind,
            url,
            settings.llm_model,
            models,
            message=f"The model “{settings.llm_model}” is not installed on the server.",
        )
    return LLMStatus("ready", kind, url, settings.llm_model, models)
