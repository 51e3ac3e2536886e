"""What ``ask`` (core/generation/qa.py) says as it answers: its events, and the kinds of
warning an answer can carry.

The kinds are a StrEnum whose values are the strings JSON, the socket and stored turns
carry, so a kind compares equal to its string wherever one was read back.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Union

from core.errors import LecternError
from core.records import Citation, Hit


class WarningKind(StrEnum):
    """Every kind of WarningEvent (and of AnswerWarning, which becomes one)."""

    # No model wrote the answer; it was quoted from the documents instead.
    LLM_UNAVAILABLE = "llm_unavailable"  # the server is not running or not reachable
    LLM_TIMEOUT = "llm_timeout"  # silent before its first word
    MODEL_MISSING = "model_missing"  # the server lacks the model (WarningEvent.model)
    LLM_CONFIG = "llm_config"  # the settings name no usable server (a malformed address)
    CONTEXT = "context"  # not even one source fits the model's context window
    EMPTY = "empty"  # the model returned nothing
    # What became of the written answer or its sources.
    INCOMPLETE = "incomplete"
    CANCELLED = "cancelled"
    TRUNCATED = "truncated"  # the server read fewer prompt tokens than were sent
    SOURCES_TRIMMED = "sources_trimmed"
    REWRITE_FAILED = "rewrite_failed"
    RERANK_FAILED = "rerank_failed"
    RERANK_UNREAD = "rerank_unread"
    NOT_SAVED = "not_saved"
    # A kept turn whose answer did not end (core.records.TurnState): an error ended it,
    # or Lectern did (stored turns only).
    FAILED = "failed"
    CUT_OFF = "cut_off"
    # Why nothing was found.
    NO_SOURCES = "no_sources"
    EMPTY_LIBRARY = "empty_library"
    EMPTY_SCOPE = "empty_scope"
    STILL_INDEXING = "still_indexing"
    # The citation check of a written answer (core/generation/citations.py).
    UNKNOWN_CITATION = "unknown_citation"
    UNVERIFIED_NUMBER = "unverified_number"
    NO_CITATIONS = "no_citations"
    UNSUPPORTED = "unsupported"
    # The model's answer failed that check, so the quote comes first (qa.py).
    QUOTED_FIRST = "quoted_first"
    # A cited answer where the quote's decline found no passage that answers (qa.py).
    WEAK_EVIDENCE = "weak_evidence"


# The server failed (down, silent or without the model), so the answer was quoted instead.
SERVER_FAILED = frozenset(
    {WarningKind.LLM_UNAVAILABLE, WarningKind.LLM_TIMEOUT, WarningKind.MODEL_MISSING}
)


@dataclass(frozen=True)
class SourcesEvent:
    hits: tuple[Hit, ...]
    question: str = ""  # the standalone question the sources were retrieved for
    # The conversation the question is kept in (made when it was asked); None when the
    # answer is not kept, or when it came over the socket.
    conversation_id: int | None = None


@dataclass(frozen=True)
class TokenEvent:
    text: str


@dataclass(frozen=True)
class CitationsEvent:
    citations: tuple[Citation, ...]


@dataclass(frozen=True)
class DraftEvent:
    """The answer quoted from the documents, shown while a slow server reads the prompt;
    the written answer's tokens replace it. Never saved."""

    answer: str
    citations: tuple[Citation, ...]
    declined: bool = False


@dataclass(frozen=True)
class StatusEvent:
    """What is being done before the answer is written: the model working out what a
    follow-up refers to (its first step, which a slow model takes tens of seconds over),
    the server loading the model or reading the prompt."""

    message: str
    kind: str  # "rewriting" | "loading" | "reading"


# The follow-up made standalone by the model, before anything is searched.
REWRITING = StatusEvent("Working out what your follow-up question refers to…", "rewriting")


@dataclass(frozen=True)
class WarningEvent:
    message: str
    # A WarningKind, whose value is what JSON and the socket carry. Typed str: a kind this
    # version does not know (from another Lectern over the socket) still reads.
    kind: str
    model: str = ""  # "model_missing": the model to download

    def to_json(self) -> dict[str, str]:
        data = {"kind": str(self.kind), "message": self.message}  # plain str on the wire
        if self.model:
            data["model"] = self.model
        return data


@dataclass(frozen=True)
class DoneEvent:
    answer: str
    mode: str  # "generated" | "extractive" | "declined"
    citations: tuple[Citation, ...]
    warnings: tuple[WarningEvent, ...]
    timings: dict[str, float | int | None] = field(default_factory=dict)
    conversation_id: int | None = None
    turn_id: int | None = None
    model: str | None = None  # None when no model wrote the answer
    question: str = ""  # the standalone question used for retrieval
    sources: tuple[Hit, ...] = ()

    def to_json(self) -> dict[str, object]:
        return {
            "answer": self.answer,
            "mode": self.mode,
            "citations": [c.to_json() for c in self.citations],
            "warnings": [w.to_json() for w in self.warnings],
            "timings": dict(self.timings),
            "conversation": self.conversation_id,
            "turn": self.turn_id,
            "model": self.model,
            "question": self.question,
        }


@dataclass(frozen=True)
class ErrorEvent:
    error: LecternError
    partial_answer: str = ""
    # The conversation the failed turn is kept in (as SourcesEvent's).
    conversation_id: int | None = None

    def to_json(self) -> dict[str, object]:
        return {
            "error": type(self.error).__name__,
            "message": self.error.message,
            "hint": self.error.hint,
            "model": getattr(self.error, "model", None),
            "partial_answer": self.partial_answer,
            "conversation": self.conversation_id,
        }


Event = Union[  # noqa: UP007
    SourcesEvent,
    TokenEvent,
    DraftEvent,
    StatusEvent,
    CitationsEvent,
    WarningEvent,
    DoneEvent,
    ErrorEvent,
]


def with_conversation(event: Event, conversation_id: int | None) -> Event:
    """``event`` naming the conversation it is kept in, where it carries one before the
    end: the sources and an error (DoneEvent is made with it)."""
    if isinstance(event, SourcesEvent | ErrorEvent):
        return replace(event, conversation_id=conversation_id)
    return event
