"""The desktop app's link to the engine: one ``Backend`` per window, a Qt adapter over
core's application layer (core/app/ops.py).

A panel asks for anything the library does with ``run(op)``: the op's work runs on a
worker thread with the open library, its result comes back to the panel on the UI
thread, and what it changed (its ``Changes``) is said once, on ``changed``, to every part
of the window that shows it. Work that needs no library (asking the model server, a model
downloaded, the licence notices read) goes through ``run_local``; no panel holds the
library or a thread pool (tests/desktop/test_backend_seam.py).

The backend's other parts are objects of their own, each with its signals: ``startup``
opens the library and loads the model (desktop/startup.py), ``view`` keeps the library
as the window shows it (desktop/library_view.py), ``indexing`` runs index jobs and the
folder watcher (desktop/indexing_host.py), ``llm`` follows the model server
(desktop/llm_monitor.py), and ``notices`` carries what the status bar says in passing.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from core.app.ops import Changes, Op
from core.config import Settings, load_settings
from core.errors import ConfigError, LecternError
from core.settings_store import SettingsStore
from desktop.indexing_host import IndexingHost
from desktop.library_view import LibraryView
from desktop.llm_monitor import LLMMonitor
from desktop.qt import QObject, Signal
from desktop.startup import Startup
from desktop.workers import Background, Notices, Task, TaskContext

if TYPE_CHECKING:
    from core.embedding.models import Embedder

T = TypeVar("T")

# Closing the window waits this long for a running index job to reach its next file;
# past it the job's thread is left to finish on its own (see Backend.shutdown).
SHUTDOWN_WAIT_MS = 1500
# The library just opened: everything a panel shows of it is new.
OPENED = Changes(folders=True, documents=True, conversations=True, collections=True)


class Backend(QObject):
    changed = Signal(object)  # Changes: what an op (or the library on its own) changed

    def __init__(
        self,
        settings: Settings | None = None,
        *,
        embedder: Embedder | None = None,
        watch: bool = True,
        parent: QObject | None = None,
    ) -> None:
        super().__init__(parent)
        # The one copy of the settings: handed to the library when it opens, which reads
        # and follows them there (core/settings_store.py); changed only through it.
        self.settings_store = SettingsStore(settings or load_settings())
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
        # Its one thread is kept for good: the model runs fastest on the thread that
        # warmed it, and Qt would otherwise end an idle thread after 30 s.
        self.engine.pool.setExpiryTimeout(-1)
        self.notices = Notices(self)
        self.startup = Startup(
            self.settings_store,
            self.background,
            self.engine,
            self.notices,
            embedder=embedder,
            parent=self,
        )
        self.view = LibraryView(self, lambda: self.indexing.active, parent=self)
        self.indexing = IndexingHost(
            self, self.view, self.notices, lambda: self.startup.library, watch=watch, parent=self
        )
        self.llm = LLMMonitor(lambda: self.settings, parent=self)
        # Closed with work left running that cannot be interrupted and is not waited for
        # (the model's load, an index run's last batch): the process should exit at once.
        self.abandoned = False
        self.changed.connect(self.view.follow)
        # Connected before any panel: the library's own hooks are set, and what waited
        # for the library is queued, before the window hears of it.
        self.startup.opened.connect(lambda: self.announce(OPENED))
        self.startup.ready.connect(self._ready)

    @property
    def settings(self) -> Settings:
        return self.settings_store.current

    @property
    def is_open(self) -> bool:
        return self.startup.is_open

    @property
    def is_ready(self) -> bool:
        return self.startup.is_ready

    def start(self) -> None:
        if self.startup.start():
            self.llm.start()

    def retry_start(self) -> None:
        if self.startup.phase == "failed":
            self.start()

    def _ready(self) -> None:
        library, host = self.startup.library, self.indexing
        if library is None:
            return
        # Called on the indexing thread; the signal carries the paths to the UI thread.
        library.indexer.on_removed.append(self.view.documents_removed.emit)
        # Made here and now (it only wires its callbacks), so that a pause or a close that
        # comes next reaches it; its start, which walks every folder, runs on a worker.
        host.library_ready(host.folder_watcher().run(library).value if host.watches else None)

    # --- running ops --------------------------------------------------------------------

    def run(
        self,
        op: Op[T],
        *,
        on_result: Callable[[T], None] | None = None,
        on_error: Callable[[BaseException], None] | None = None,
        on_progress: Callable[[Any], None] | None = None,
        on_finished: Callable[[], None] | None = None,
        min_interval_s: float = 0.0,
        engine: bool = False,
    ) -> Task[T] | None:
        """Run ``op`` on a worker thread with the open library (None, and ``on_error``
        told, while there is none); ``changed`` says what it changed once it succeeds.
        Its errors go to ``on_error``, else to the status bar; ``on_finished`` runs after
        either. ``engine``: on the thread that indexes with the model (index jobs), not
        beside searches and answers.

        Every slot is connected before the task starts: one connected to the returned
        task's signals afterwards misses a task that ends first (a worker can finish a
        short read before this thread runs its next line)."""
        library = self.startup.library
        if library is None:
            if on_error is not None:
                on_error(
                    LecternError(
                        "Lectern is still starting.", "Wait until the status bar says Ready."
                    )
                )
            return None
        changes = op.changes
        if changes:

            def result(value: T) -> None:
                # After ``on_result``: the panel that asked has its answer before the rest
                # redraw (and they redraw even if that panel's slot failed).
                try:
                    if on_result is not None:
                        on_result(value)
                finally:
                    self.changed.emit(changes)

            handle_result: Callable[[T], None] | None = result
        else:
            handle_result = on_result
        return (self.engine if engine else self.background).submit(
            lambda ctx: op.work(library, ctx),
            name=op.name,
            on_result=handle_result,
            on_error=on_error or self.notices.error,
            on_progress=on_progress,
            on_finished=on_finished,
            min_interval_s=min_interval_s,
        )

    def run_local(
        self,
        fn: Callable[[TaskContext], T],
        *,
        name: str,
        on_result: Callable[[T], None] | None = None,
        on_error: Callable[[BaseException], None] | None = None,
        on_progress: Callable[[Any], None] | None = None,
        min_interval_s: float = 0.0,
    ) -> Task[T]:
        """Run ``fn(ctx)``, work that needs no library (asking or downloading from the
        model server, reading files of the app's own), on a worker thread."""
        return self.background.submit(
            fn,
            name=name,
            on_result=on_result,
            on_error=on_error,
            on_progress=on_progress,
            min_interval_s=min_interval_s,
        )

    def announce(self, changes: Changes) -> None:
        """Say on ``changed`` what changed outside an op: the library opened, an answer
        being written made a new conversation, the library chose its own model."""
        if changes:
            self.changed.emit(changes)

    def apply_settings(self, settings: Settings) -> None:
        """Make ``settings`` the app's and the open library's (it follows them at once: a
        running index or watcher batch at its next file or batch), saved."""
        old = self.settings
        try:
            self.settings_store.replace(settings)
        except ConfigError as exc:
            self.notices.say("error", exc.message)
            return
        except OSError as exc:  # in force all the same, for this run
            self.notices.say("error", f"The settings could not be saved: {exc}.")
        self.announce(Changes(settings=True))
        if (old.llm_kind, old.llm_url, old.llm_model, old.llm_api_key) != (
            settings.llm_kind,
            settings.llm_url,
            settings.llm_model,
            settings.llm_api_key,
        ):
            self.llm.check()

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
        thread until the process exits (``startup.close_in_background``). In each of these
        cases ``abandoned`` is set and ``python -m desktop`` then exits at once: a model
        load left running kept the process for seconds after its window had gone.
        """
        open_waited = self.startup.begin_close()
        if open_waited is None:
            return
        wait_ms = SHUTDOWN_WAIT_MS if wait_ms is None else wait_ms
        deadline = time.monotonic() + wait_ms / 1000
        self.view.close()
        self.llm.close()
        self.indexing.stop()
        for pool in (self.engine, self.background):
            pool.cancel_all()
        self.startup.close_server(deadline)
        self.indexing.stop_watcher(deadline)
        opened = self.startup.wait_opened(open_waited)
        indexing_done = self.indexing.wait_for_job(deadline)
        self.abandoned = self.startup.close_library(
            deadline,
            opened=opened,
            idle=indexing_done and not self.indexing.watcher_alive,
            others_running=self.llm.busy,
        )
