"""One answer session: the model server client answers are written with, built the same way
wherever a question is asked (``ask`` itself, ``lectern ask``, the app, the socket), and
the fallback when it cannot be: the answer quoted from the documents, with a warning that
says why and what to fix.

A mistyped server address must not cost the answer: it is answered as when no server is
running. Every "quoted instead of written" warning has the same words, made here.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterable
from dataclasses import replace
from types import TracebackType
from typing import TYPE_CHECKING

from core.errors import (
    ConfigError,
    LecternError,
    LLMTimeoutError,
    LLMUnavailableError,
    ModelNotFoundError,
)
from core.generation.answer_state import AnswerState, Change
from core.generation.events import Event, WarningEvent, WarningKind
from core.llm import LLMClient, make_client

if TYPE_CHECKING:
    from core.config import Settings

QUOTED_INSTEAD = "These are sentences extracted from your documents instead of a written answer."

# An error's message and hint as the reader should see them (the app names its own
# Settings dialog where the CLI names settings.json).
Describe = Callable[[LecternError], tuple[str, str]]


def own_words(error: LecternError) -> tuple[str, str]:
    return error.message, error.hint


def fallback_warning(
    error: LecternError, kind: WarningKind | None = None, describe: Describe = own_words
) -> WarningEvent:
    """The warning of an answer quoted from the documents because ``error`` kept a model
    from writing it. ``kind`` defaults to the one the error stands for."""
    message, hint = describe(error)
    text = f"{message} {QUOTED_INSTEAD}" + (f" {hint}" if hint else "")
    if isinstance(error, ModelNotFoundError):
        # The model to download: a UI offers it, and asks again when it is there.
        return WarningEvent(text, kind or WarningKind.MODEL_MISSING, model=error.model)
    if kind is None:
        if isinstance(error, LLMTimeoutError):
            kind = WarningKind.LLM_TIMEOUT
        elif isinstance(error, ConfigError):
            kind = WarningKind.LLM_CONFIG
        else:
            kind = WarningKind.LLM_UNAVAILABLE
    return WarningEvent(text, kind)


class AnswerSession:
    """The client for the server ``settings`` name, or None: when ``use_llm`` is off, or
    when the settings name no usable server (then ``problem`` says so, and every answer
    asked through the session is quoted and carries it).

    ``config_kind`` and ``describe`` are how a front end words that problem: the CLI
    keeps the default (``llm_config``, with core's hint), the app reports it as the server
    being unavailable, with a hint that points at its Settings dialog. A ``client`` given
    is used as it is and left open; one the session builds is closed with it.
    """

    def __init__(
        self,
        settings: Settings,
        *,
        use_llm: bool = True,
        client: LLMClient | None = None,
        config_kind: WarningKind = WarningKind.LLM_CONFIG,
        describe: Describe = own_words,
    ) -> None:
        self.settings = settings
        self.client: LLMClient | None = client if use_llm else None
        self.problem: WarningEvent | None = None
        self._owned: LLMClient | None = None
        if use_llm and client is None:
            try:
                self.client = self._owned = make_client(settings)
            except ConfigError as exc:
                self.problem = fallback_warning(exc, config_kind, describe)
            except LecternError as exc:
                self.problem = fallback_warning(exc, None, describe)
            except Exception as exc:  # a client that cannot even be built never costs the answer
                problem = LLMUnavailableError(
                    "Lectern could not set up the model server's client"
                    + (f" ({exc})." if str(exc) else ".")
                )
                problem.detail = type(exc).__name__  # type: ignore[attr-defined]
                self.problem = fallback_warning(problem, None, describe)

    @property
    def use_llm(self) -> bool:
        return self.client is not None

    def amend(self, events: Iterable[Event]) -> Generator[Event, None, None]:
        """``events`` (of this process's ``ask`` or another's over the socket) with the
        session's problem among the answer's warnings: said before the first warning or
        the end, and first in ``DoneEvent.warnings``. Closing the result closes
        ``events``, which stops the answer."""
        problem = self.problem
        said = problem is None
        state = AnswerState()
        try:
            for event in events:
                change = state.apply(event)
                if problem is not None:
                    if not said and change & (Change.WARNINGS | Change.FINISHED):
                        said = True
                        yield problem
                    if change & Change.FINISHED and state.done is not None:
                        event = replace(state.done, warnings=(problem, *state.done.warnings))
                yield event
        finally:
            close = getattr(events, "close", None)
            if close is not None:
                close()

    def close(self) -> None:
        if self._owned is not None:
            self._owned.close()
            self._owned = None

    def __enter__(self) -> AnswerSession:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
