"""A model downloaded where the answer said it was missing, with the next step after it.

An answer quoted from the documents because the model is not installed carries a
*Download* button. The download runs on a worker thread and reports into the answer's
own note (one bar for the whole model, words for each step), and when it is done the
note offers *Ask again*: the person never leaves the conversation for a settings dialog.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from desktop.qt import QObject, Signal

if TYPE_CHECKING:
    from core.generation.pull import PullStatus
    from desktop.backend import Backend
    from desktop.workers import Task, TaskContext


class ModelDownload(QObject):
    """One download of ``model``; its signals arrive on the UI thread."""

    progressed = Signal(object)  # PullStatus
    finished = Signal(str)  # the model, ready to use
    cancelled = Signal()
    failed = Signal(str, str)  # message, hint

    def __init__(self, backend: Backend, model: str, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.backend = backend
        self.model = model
        self.status: PullStatus | None = None
        self.task: Task[bool] | None = None

    @property
    def running(self) -> bool:
        return self.task is not None

    def start(self) -> None:
        if self.task is not None:
            return
        settings = self.backend.settings
        model = self.model

        def pull(ctx: TaskContext) -> bool:
            from core.generation.pull import pull_model
            from core.llm import make_client

            client = make_client(settings)
            try:
                return pull_model(client, model, ctx.report, cancel=ctx.cancel)
            finally:
                client.close()

        self.task = self.backend.run_local(
            pull,
            name=f"download {model}",
            on_progress=self._progress,
            on_result=self._done,
            on_error=self._failed,
            min_interval_s=0.1,
        )

    def cancel(self) -> None:
        if self.task is not None:
            self.task.cancel()

    def _progress(self, status: Any) -> None:
        self.status = status
        self.progressed.emit(status)

    def _done(self, completed: bool) -> None:
        self.task = None
        if not completed:
            self.cancelled.emit()
            return
        # The badge and the next answer must see the model at once, not at the next poll.
        self.backend.llm.check(quiet=True)
        self.finished.emit(self.model)

    def _failed(self, exc: BaseException) -> None:
        from desktop.workers import describe_error

        self.task = None
        message, hint = describe_error(exc)
        self.failed.emit(message, hint)
