"""Opening the library and loading the model, side by side, and closing them again: the
one owner of the app's ``Library`` (desktop/backend.py runs ops on it).

The phases the window shows (opening, loading_model, ready, failed) and "Try again" are
decided here. Heavy engine modules are imported inside the background functions, so the
window is on screen before torch or DuckDB are even loaded.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from desktop.qt import QObject, Signal
from desktop.workers import Background, Notices, Task, TaskContext, describe_error

if TYPE_CHECKING:
    from core.embedding.models import Embedder
    from core.ipc.server import Server
    from core.library import Library
    from core.settings_store import SettingsStore

log = logging.getLogger(__name__)

# Closing waits for the library to finish opening (it may be repairing the record), so
# that it is closed cleanly; normally a fraction of a second.
OPEN_WAIT_S = 30.0
# How long an open waits for this process's earlier close of the same library (one that
# a quit left finishing on its own thread) before it opens it anyway.
REOPEN_WAIT_S = 60.0

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


class Startup(QObject):
    phase_changed = Signal(str, str)  # opening | loading_model | ready | failed, and a sentence
    # The library is open: searchable by keyword, quoted answers work (the model loads on).
    opened = Signal()
    ready = Signal()  # the model is loaded too
    failed = Signal(str, str)  # message, hint

    def __init__(
        self,
        store: SettingsStore,
        background: Background,
        engine: Background,
        notices: Notices,
        *,
        embedder: Embedder | None = None,
        parent: QObject | None = None,
    ) -> None:
        super().__init__(parent)
        self._store = store
        self._background = background
        self._engine = engine
        self._notices = notices
        self._embedder = embedder
        self.library: Library | None = None
        self._start_lock = threading.Lock()
        self._opening: Library | None = None  # opened, its signal maybe not delivered yet
        self._open_done: threading.Event | None = None  # the library made (or failed)
        self._opening_record = False  # the open has begun on the record itself
        self._model_task: Task[Any] | None = None
        self._model: Embedder | None = None  # loaded, waiting for the library to open
        self._ipc: Server | None = None  # answers `lectern search`/`status`/`ask` beside the app
        self._closing = False
        self.phase = "starting"

    def start(self) -> bool:
        """Open the library and load the model, side by side, in the background; False
        when the window closed before its first frame (see desktop/__main__.py).

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
            return False
        self._set_phase("opening", "Opening your library…")
        store, embedder = self._store, self._embedder
        settings = store.current
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
                library = Library(store, embedder=embedder, defer_model=True)
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

        self._background.submit(
            open_library,
            name="open library",
            on_progress=self._library_opened,
            on_error=self._start_failed,
        )
        self._model_task = self._engine.submit(
            load_model,
            name="load model",
            on_result=self._model_loaded,
            on_error=self._start_failed,
        )
        return True

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

            self._model_task = self._engine.submit(
                load,
                name="load model",
                on_result=lambda _model: self._opened(library),
                on_error=self._start_failed,
            )
            return
        if self._closing:
            return
        self._set_phase("ready", "Ready")
        self.ready.emit()
        # Repairs made at open (a log set aside, a damaged file rebuilt) are said once.
        for repaired in library.recovery_notices:
            self._notices.say("warning", f"{repaired.message} {repaired.hint}".strip())

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

    def _set_phase(self, phase: str, text: str) -> None:
        self.phase = phase
        self.phase_changed.emit(phase, text)

    @property
    def is_open(self) -> bool:
        """The library is open: searches and quoted answers work (by keyword until the
        model is loaded, ``is_ready``)."""
        return self.library is not None and self.phase in ("loading_model", "ready")

    @property
    def is_ready(self) -> bool:
        return self.phase == "ready" and self.library is not None

    @property
    def model_loaded(self) -> bool:
        library = self.library
        return library is not None and library.model_loaded

    # --- closing (in this order: see Backend.shutdown) ---------------------------------

    def begin_close(self) -> bool | None:
        """Stop starting; None when closing already. True when the open had begun on the
        record, and so is waited for (still importing, it stops before touching it)."""
        if self._closing:
            return None
        with self._start_lock:
            self._closing = True
            return self._opening_record

    def close_server(self, deadline: float) -> None:
        server, self._ipc = self._ipc, None
        if server is not None:
            server.close(timeout=max(0.1, deadline - time.monotonic()))

    def wait_opened(self, open_waited: bool) -> bool:
        opening = self._open_done
        return opening is None or not open_waited or opening.wait(OPEN_WAIT_S)

    def close_library(
        self, deadline: float, *, opened: bool, idle: bool, others_running: bool
    ) -> bool:
        """Close the library unless ``idle`` says something still reads it (then it is
        left for the process's exit); True when work is left running that the process
        should not wait for (see Backend.shutdown)."""
        model, opening = self._model_task, self._open_done
        # None of them touches the library: loading the model, asking the model server
        # (up to seconds against a server that does not answer), an open still importing.
        left_running = (
            (model is not None and not model.done.is_set())
            or others_running
            or (opening is not None and not opening.is_set())  # still importing
        )
        with self._start_lock:
            library = self.library or self._opening
            self._opening = None
        if library is None:
            # Nothing open to close; an open still running closes its library itself.
            return left_running and opened
        # Searches and answers in flight read the library: closed after them.
        if idle and self._background.wait(max(0, int((deadline - time.monotonic()) * 1000))):
            # The close itself waits on what it cannot interrupt (a re-embedding's batch in
            # the model, up to a second; a checkpoint): on a busy computer it took seconds
            # (3.2-6.6 s at load 6-8). It has what is left of the wait, then the process
            # exits without it (see close_in_background).
            closing = close_in_background(library)
            closing.join(max(0.05, deadline - time.monotonic()))
            self.library = None
            if not closing.is_alive():
                return left_running  # the record is closed: the rest is not waited for
            log.warning("closing the library takes longer than a quit may; not waited for")
        else:
            log.warning("closing with indexing still finishing a batch; it is not waited for")
        # No reader may outlive the app; one holds nothing of the library, so it is
        # stopped at once rather than asked (which waited up to seconds under load).
        with contextlib.suppress(Exception):
            library.parser.kill()
        return True
