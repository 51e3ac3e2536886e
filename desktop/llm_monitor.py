"""The model server's badge: what the configured server has, asked at start, every
``LLM_RECHECK_MS`` while the window is open, after each answer and after a change of
settings, and corrected at once by what an answer shows of it.

Asking touches no library data and waits on the network for up to seconds, so it runs on
a pool of its own that closing never waits for.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from desktop.model_probe import LLMStatus, address_problem, llm_address, model_matches, probe_llm
from desktop.qt import QObject, QTimer, Signal
from desktop.workers import Background, Task, TaskContext, describe_error

if TYPE_CHECKING:
    from core.config import Settings
    from core.generation.answer_state import AnswerState, Change
    from core.generation.session import AnswerSession

# How often the model server is asked again while the window is open, so the badge
# follows a server that stopped or started meanwhile (requests also re-check at once).
LLM_RECHECK_MS = 20_000


def answer_session(settings: Settings) -> AnswerSession:
    """The model server's session for one answer, a bad address answered as with no server
    at all and a hint that points at Settings. Called on the answer's own thread: the HTTP
    client's import must not freeze the window."""
    from core.generation.events import WarningKind
    from core.generation.session import AnswerSession

    return AnswerSession(
        settings, config_kind=WarningKind.LLM_UNAVAILABLE, describe=address_problem
    )


class LLMMonitor(QObject):
    status_changed = Signal(object)  # LLMStatus

    def __init__(self, settings: Callable[[], Settings], parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._settings = settings
        self._probes = Background(max_threads=1, parent=self)
        self.status = LLMStatus("checking", settings().llm_kind)
        self._check: Task[Any] | None = None
        self._closing = False
        self._timer = QTimer(self)
        self._timer.setInterval(LLM_RECHECK_MS)
        self._timer.timeout.connect(lambda: self.check(quiet=True))

    def start(self) -> None:
        self.check()
        self._timer.start()

    def check(self, settings: Settings | None = None, *, quiet: bool = False) -> None:
        """Ask the model server what it has, on a worker thread.

        ``quiet`` (the periodic check and the one after each answer) keeps showing the
        current state until the answer comes, and is skipped while a check is running.
        """
        if self._closing:
            return
        settings = settings or self._settings()
        previous = self._check
        if quiet and previous is not None and not previous.done.is_set():
            return
        if not quiet:
            self._set(LLMStatus("checking", settings.llm_kind))
        if previous is not None:
            previous.cancel()

        def check(ctx: TaskContext) -> LLMStatus:
            return probe_llm(settings)

        def done(status: LLMStatus) -> None:
            if task is not self._check or self._closing:
                return  # a newer check (or an answer) superseded this one
            self._set(status)

        def failed(exc: BaseException) -> None:  # never leave "checking" up for good
            message, hint = describe_error(exc)
            done(
                LLMStatus(
                    "error", settings.llm_kind, model=settings.llm_model, message=message, hint=hint
                )
            )

        task = self._probes.submit(check, name="check llm", on_result=done, on_error=failed)
        self._check = task

    def _set(self, status: LLMStatus) -> None:
        self.status = status
        self.status_changed.emit(status)

    def follow(self, answer: AnswerState, change: Change) -> None:
        """What an answer just showed about the server beats what the last check said."""
        from core.errors import LLMError, ModelNotFoundError
        from core.generation.answer_state import Change
        from core.generation.events import WarningKind

        settings, status = self._settings(), self.status
        url = status.url or llm_address(settings)
        down = [
            w
            for w in answer.warnings
            if w.kind in (WarningKind.LLM_UNAVAILABLE, WarningKind.LLM_TIMEOUT)
        ]
        error = answer.error.error if answer.error is not None else None
        if change & Change.FINISHED and answer.model:
            if status.ready and model_matches(status.model, answer.model):
                return
            models = status.models if status.models else (answer.model,)
            new = LLMStatus("ready", settings.llm_kind, url, answer.model, models)
        elif change & Change.WARNINGS and down:
            if status.state in ("invalid", "unreachable"):
                return
            new = LLMStatus(
                "unreachable", settings.llm_kind, url, settings.llm_model, message=down[-1].message
            )
        elif change & Change.FINISHED and isinstance(error, ModelNotFoundError):
            if status.state == "model_missing":
                return
            new = LLMStatus(
                "model_missing",
                settings.llm_kind,
                url,
                settings.llm_model,
                message=error.message,
                hint=error.hint,
            )
        elif change & Change.FINISHED and isinstance(error, LLMError):
            self.check(quiet=True)
            return
        else:
            return
        if self._check is not None:
            self._check.cancel()
            self._check = None  # a check that started before the answer is stale
        self._set(new)

    @property
    def busy(self) -> bool:
        """A check is still waiting on the server (it is never waited for)."""
        return self._probes.busy

    def close(self) -> None:
        self._closing = True
        self._timer.stop()
        self._probes.cancel_all()
