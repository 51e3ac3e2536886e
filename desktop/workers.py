"""The one helper for background work.

Everything slow (opening the library, loading the model, indexing, searching, answering,
reading a document to show it, talking to the LLM server) runs through
:class:`Background.submit`. The function runs on a pool thread and gets a
:class:`TaskContext` to report progress and to see whether it was cancelled; its result,
its error and its progress come back to the UI thread as Qt signals, so no widget is ever
touched from another thread and the event loop never waits on the engine.
"""

from __future__ import annotations

import logging
import threading
import time
import traceback
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

from core.errors import LecternError
from core.indexing.threads import lower_thread_priority
from desktop.qt import QObject, QRunnable, QThread, QThreadPool, Signal

if TYPE_CHECKING:
    from core.app.ops import Changes, Op
    from core.config import Settings

log = logging.getLogger(__name__)

T = TypeVar("T")
# Covariant: a task of any result is a Task[object], for code that only cancels or waits.
T_co = TypeVar("T_co", covariant=True)


class TaskContext:
    """Handed to a background function: progress reporting and cancellation."""

    def __init__(self, signals: TaskSignals, min_interval_s: float = 0.0) -> None:
        self._signals = signals
        self._min_interval = min_interval_s
        self._last = 0.0
        self.cancel = threading.Event()

    @property
    def cancelled(self) -> bool:
        return self.cancel.is_set()

    def report(self, value: object, *, force: bool = False) -> None:
        """Send ``value`` to the UI thread's progress handler.

        With a minimum interval, intermediate reports are dropped: the UI repaints at a
        human rate and a flood of queued events would itself delay input handling.
        """
        if self._min_interval and not force:
            now = time.monotonic()
            if now - self._last < self._min_interval:
                return
            self._last = now
        self._signals.progress.emit(value)


class TaskSignals(QObject):
    progress = Signal(object)
    result = Signal(object)
    error = Signal(object)
    finished = Signal()


def lower_current_thread_priority(step: int = 10) -> None:
    """Let the person's foreground work (this window first) win the CPU over ours: the
    nice value on Linux (see core/indexing/threads.py), Qt's thread priority elsewhere."""
    if lower_thread_priority(step):
        return
    thread = QThread.currentThread()
    if thread is not None:
        thread.setPriority(QThread.Priority.LowPriority)


class Task(QRunnable, Generic[T_co]):
    """One background function; ``T_co`` is what it returns, what ``signals.result`` carries."""

    def __init__(
        self,
        fn: Callable[[TaskContext], T_co],
        name: str,
        min_interval_s: float = 0.0,
        lower_by: int = 0,
    ) -> None:
        super().__init__()
        # Python keeps ownership: the pool must not delete an object we still reference.
        self.setAutoDelete(False)
        self.name = name
        self.signals = TaskSignals()
        self.context = TaskContext(self.signals, min_interval_s)
        self._fn = fn
        self._lower_by = lower_by
        self.done = threading.Event()

    def cancel(self) -> None:
        self.context.cancel.set()

    def run(self) -> None:
        if self._lower_by:
            # Only on pools made for it: a lowered thread stays lowered, as raising a nice
            # value back needs privileges.
            lower_current_thread_priority(self._lower_by)
        try:
            result = self._fn(self.context)
        except BaseException as exc:  # every failure must reach the UI, never vanish
            if not isinstance(exc, LecternError):
                log.error("background task %s failed:\n%s", self.name, traceback.format_exc())
            self.signals.error.emit(exc)
        else:
            self.signals.result.emit(result)
        finally:
            self.done.set()
            self.signals.finished.emit()


class Background(QObject):
    """Runs functions on a private thread pool and reports back through signals."""

    def __init__(
        self,
        max_threads: int = 4,
        parent: QObject | None = None,
        *,
        low_priority: bool = False,
        lower_by: int | None = None,
    ) -> None:
        """``lower_by``: nice steps below the UI thread for this pool's threads (Linux);
        ``low_priority`` is the usual 10."""
        super().__init__(parent)
        self.lower_by = lower_by if lower_by is not None else (10 if low_priority else 0)
        self.pool = QThreadPool(self)
        # Indexing holds one thread for a long time; questions, searches and document
        # previews must still find free threads meanwhile.
        self.pool.setMaxThreadCount(max_threads)
        self._active: set[Task[object]] = set()

    def submit(
        self,
        fn: Callable[[TaskContext], T],
        *,
        name: str = "task",
        on_result: Callable[[T], None] | None = None,
        on_error: Callable[[BaseException], None] | None = None,
        on_progress: Callable[[Any], None] | None = None,
        on_finished: Callable[[], None] | None = None,
        min_interval_s: float = 0.0,
    ) -> Task[T]:
        task = Task(fn, name, min_interval_s, self.lower_by)
        if on_result is not None:
            task.signals.result.connect(on_result)
        if on_error is not None:
            task.signals.error.connect(on_error)
        else:
            task.signals.error.connect(lambda exc: log.warning("%s failed: %s", name, exc))
        if on_progress is not None:
            task.signals.progress.connect(on_progress)
        if on_finished is not None:
            task.signals.finished.connect(on_finished)
        task.signals.finished.connect(lambda: self._active.discard(task))
        self._active.add(task)
        self.pool.start(task)
        return task

    @property
    def busy(self) -> bool:
        return bool(self._active)

    def cancel_all(self) -> None:
        for task in list(self._active):
            task.cancel()

    def wait(self, timeout_ms: int = 30000) -> bool:
        return self.pool.waitForDone(timeout_ms)


class Notices(QObject):
    """What the app tells the person in passing (the status bar's line): a level (info |
    warning | error) and a sentence."""

    posted = Signal(str, str)

    def say(self, level: str, text: str) -> None:
        self.posted.emit(level, text)

    def error(self, exc: BaseException) -> None:
        message, hint = describe_error(exc)
        self.posted.emit("error", f"{message} {hint}".strip())


class OpRunner(Protocol):
    """What the parts of the app's backend (desktop/backend.py) ask of it: ops run on the
    open library, and what changed said once."""

    @property
    def is_ready(self) -> bool: ...

    @property
    def settings(self) -> Settings: ...

    def apply_settings(self, settings: Settings) -> None: ...

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
    ) -> Task[T] | None: ...

    def run_local(
        self,
        fn: Callable[[TaskContext], T],
        *,
        name: str,
        on_result: Callable[[T], None] | None = None,
        on_error: Callable[[BaseException], None] | None = None,
        on_progress: Callable[[Any], None] | None = None,
        min_interval_s: float = 0.0,
    ) -> Task[T]: ...

    def announce(self, changes: Changes) -> None: ...


def describe_error(exc: BaseException) -> tuple[str, str]:
    """A plain sentence and a next step for any failure: never the program's name for it
    (that is :func:`error_details`, for a Details fold)."""
    if isinstance(exc, LecternError):
        return exc.message, exc.hint
    if isinstance(exc, MemoryError):
        return (
            "Lectern ran out of memory.",
            "Close other programs, or index fewer or smaller files at once.",
        )
    if isinstance(exc, OSError):
        where = f" ({exc.filename})" if getattr(exc, "filename", None) else ""
        why = f": {exc.strerror}" if exc.strerror else ""
        return (
            f"A file could not be read or written{where}{why}.",
            "Check that the file exists and that you may read it, then try again.",
        )
    return (
        "Something unexpected went wrong.",
        "Try again. If it keeps happening, restart Lectern.",
    )


def error_details(exc: BaseException) -> str:
    """What went wrong in a program's words, for a Details fold (and a bug report): the
    error's name, its own text and the detail an error carries beside its sentence."""
    text = str(exc.message if isinstance(exc, LecternError) else exc)
    lines = [f"{type(exc).__name__}: {text}" if text else type(exc).__name__]
    detail = getattr(exc, "detail", "")
    if detail:
        lines.append(str(detail))
    return "\n".join(lines)
