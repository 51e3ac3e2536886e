"""Every failure of a model server mapped to one of the errors in core.errors, in words
a person can act on; a stream cut mid-answer keeps the text that already arrived.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import httpx

from core.errors import (
    ContextTooSmallError,
    LLMError,
    LLMTimeoutError,
    LLMUnavailableError,
    ModelNotFoundError,
    StreamInterruptedError,
)
from core.llm.records import int_or_none
from core.llm.stream import StreamTimeout

if TYPE_CHECKING:
    from core.llm.base import Backend

log = logging.getLogger(__name__)


def _is_context_message(message: str) -> bool:
    text = message.lower()
    return (
        "context" in text and ("exceed" in text or "too long" in text or "too large" in text)
    ) or ("prompt is too long" in text)


def _number_after(message: str, words: str) -> int | None:
    """The number in parentheses after ``words`` ("the available context size (2048
    tokens)"), for servers that say it only in prose."""
    found = re.search(re.escape(words) + r"\s*\((\d+)", message, re.IGNORECASE)
    return int(found.group(1)) if found else None


class ErrorMapper:
    """The errors of one client; the words that differ between kinds of server are its
    backend's."""

    def __init__(self, backend: Backend, url: str) -> None:
        self.backend = backend
        self.url = url

    @property
    def server_name(self) -> str:
        return self.backend.title_name

    def unavailable(self, detail: str = "") -> LLMUnavailableError:
        message = self.backend.not_running(self.url)
        if detail:
            message += f" ({detail})"
        return LLMUnavailableError(message + ".", self.backend.start_hint)

    def not_found(self, model: str) -> ModelNotFoundError:
        return ModelNotFoundError(
            f"The model {model!r} is not installed on the server at {self.url}.",
            self.backend.not_found_hint(model),
            model=model,
        )

    def status(
        self, status: int, message: str, model: str, details: Mapping[str, Any] | None = None
    ) -> LLMError:
        foreign = self.backend.foreign_server(self.url, status, message)
        if foreign is not None:
            return foreign
        if status == 404:
            return self.not_found(model)
        if _is_context_message(message):
            details = details or {}
            return ContextTooSmallError(
                f"The question and its sources do not fit the model's context window: {message}",
                n_ctx=int_or_none(details.get("n_ctx")) or _number_after(message, "context size"),
                n_prompt_tokens=int_or_none(details.get("n_prompt_tokens"))
                or _number_after(message, "request"),
            )
        return LLMError(
            f"{self.server_name} at {self.url} reported an error (HTTP {status}): {message}"
        )

    def timeout(self, exc: StreamTimeout, model: str) -> LLMTimeoutError:
        if exc.first and exc.alive:
            return LLMTimeoutError(
                f"The model {model!r} at {self.url} was still reading the question and its "
                f"sources after {exc.seconds:.0f} s.",
                "A smaller or faster model answers sooner; or allow a longer wait for the "
                "first word in Settings (llm_first_token_timeout_s).",
            )
        if exc.first and exc.alive is False:
            return LLMTimeoutError(
                f"The model {model!r} at {self.url} did not start answering within "
                f"{exc.seconds:.0f} s, and the server no longer answers.",
                self.backend.start_hint,
            )
        if exc.first:
            return LLMTimeoutError(
                f"The model {model!r} at {self.url} did not start answering within "
                f"{exc.seconds:g} s."
            )
        return LLMTimeoutError(
            f"The model {model!r} at {self.url} stopped sending text for {exc.seconds:g} s."
        )

    def interrupted(
        self, partial: str, detail: str, *, server_said: bool = False
    ) -> StreamInterruptedError:
        """A stream that ended early. ``server_said``: ``detail`` is the server's own
        error message ("llama runner process has terminated"), which is worth showing."""
        # The transport's words ("incomplete chunked read") help a developer, not the
        # person reading the answer: they go to the log and to ``error.detail``.
        log.info("stream from %s ended early: %s", self.url, detail)
        if partial and server_said:
            message = (
                f"{self.server_name} stopped in the middle of the answer: {detail.rstrip('.')}."
            )
        elif partial:
            message = f"{self.server_name} stopped in the middle of the answer."
        else:
            message = f"{self.server_name} closed the connection before answering."
        error = StreamInterruptedError(message)
        error.partial_text = partial  # type: ignore[attr-defined]
        error.detail = detail  # type: ignore[attr-defined]
        return error

    def transport(self, exc: BaseException, partial: str, model: str) -> LLMError:
        """Map an exception raised while talking to the server."""
        if isinstance(exc, LLMError):
            return exc
        if isinstance(exc, StreamTimeout):
            error = self.timeout(exc, model)
            error.partial_text = partial  # type: ignore[attr-defined]
            return error
        if isinstance(exc, httpx.ConnectTimeout):
            return self.unavailable("it did not accept a connection in time")
        if isinstance(exc, httpx.ConnectError | ConnectionRefusedError) or (
            isinstance(exc, ConnectionError) and "Failed to connect" in str(exc)
        ):
            return self.unavailable()
        if isinstance(exc, httpx.TimeoutException):
            error = LLMTimeoutError(f"The server at {self.url} stopped responding.")
            error.partial_text = partial  # type: ignore[attr-defined]
            # Which of the client's timeouts it was helps a developer, not the reader.
            error.detail = type(exc).__name__  # type: ignore[attr-defined]
            return error
        if isinstance(
            exc, httpx.RemoteProtocolError | httpx.ReadError | httpx.WriteError | OSError
        ):
            return self.interrupted(partial, str(exc) or type(exc).__name__)
        if isinstance(exc, json.JSONDecodeError | ValueError):
            return self.interrupted(partial, f"unreadable reply: {exc}")
        return LLMError(f"Talking to {self.url} failed: {exc}")


def partial_text(error: BaseException) -> str:
    """Text that had arrived before ``error`` ended a stream ("" when none)."""
    return str(getattr(error, "partial_text", "") or "")
