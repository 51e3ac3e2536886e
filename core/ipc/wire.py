"""What travels over the socket: frames, hits, citations, errors and answer events.

Each frame is one JSON line carrying the protocol version ``v``. Hits and citations travel
as their records serialise themselves (``Hit.to_wire``, ``Citation.to_wire`` in
core/records.py); answer events as ``lectern ask --json`` writes their parts.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from core import errors as lectern_errors
from core.errors import LecternError
from core.records import Citation, Hit

if TYPE_CHECKING:
    from core.generation.qa import Event, WarningEvent

PROTOCOL = 1


class BadRequest(LecternError):
    default_hint = "This is a bug in the program that sent it; run the `lectern` command again."


class BadReply(Exception):
    """The other end spoke something other than this protocol."""


class VersionMismatch(Exception):
    pass


def frame(payload: Mapping[str, object]) -> bytes:
    return (json.dumps({"v": PROTOCOL, **payload}) + "\n").encode("utf-8")


def error_frame(exc: LecternError) -> bytes:
    return frame({"ok": False, "error": error_to_wire(exc)})


def error_to_wire(exc: LecternError) -> dict[str, object]:
    return {"type": type(exc).__name__, "message": exc.message, "hint": exc.hint}


def error_from_wire(wire: Mapping[str, Any]) -> LecternError:
    """The error the server reported, as its own class where core.errors has it, so the
    command says the same words (and ``lectern ask --json`` names the same type)."""
    message, hint = str(wire.get("message", "")), str(wire.get("hint", ""))
    cls = getattr(lectern_errors, str(wire.get("type", "")), None)
    error: LecternError = LecternError(message, hint)
    if isinstance(cls, type) and issubclass(cls, LecternError):
        with contextlib.suppress(TypeError):
            error = cls(message, hint)
    if wire.get("model") is not None:
        error.model = wire["model"]  # type: ignore[attr-defined]
    return error


def event_to_wire(event: Event) -> dict[str, object]:
    """One answer event as ``lectern ask --json`` writes its parts, plus what the
    command needs to print the answer and its sources as text."""
    from core.generation.qa import (
        CitationsEvent,
        DoneEvent,
        DraftEvent,
        ErrorEvent,
        SourcesEvent,
        StatusEvent,
        TokenEvent,
    )

    if isinstance(event, DraftEvent):
        return {
            "type": "draft",
            "answer": event.answer,
            "citations": [c.to_wire() for c in event.citations],
            "declined": event.declined,
        }
    if isinstance(event, StatusEvent):
        return {"type": "status", "message": event.message, "kind": event.kind}
    if isinstance(event, SourcesEvent):
        return {
            "type": "sources",
            "hits": [h.to_wire() for h in event.hits],
            "question": event.question,
        }
    if isinstance(event, TokenEvent):
        return {"type": "token", "text": event.text}
    if isinstance(event, CitationsEvent):
        return {"type": "citations", "citations": [c.to_wire() for c in event.citations]}
    if isinstance(event, DoneEvent):
        wire = event.to_json()
        wire["citations"] = [c.to_wire() for c in event.citations]
        wire["sources"] = [h.to_wire() for h in event.sources]
        return {"type": "done", **wire}
    if isinstance(event, ErrorEvent):
        return {"type": "error", **event.to_json()}
    return {"type": "warning", **event.to_json()}


def _warning_from(wire: Mapping[str, Any]) -> WarningEvent:
    from core.generation.qa import WarningEvent

    return WarningEvent(
        message=str(wire["message"]), kind=str(wire["kind"]), model=str(wire.get("model", ""))
    )


def event_from_wire(wire: Mapping[str, Any]) -> Event:
    from core.generation.qa import (
        CitationsEvent,
        DoneEvent,
        DraftEvent,
        ErrorEvent,
        SourcesEvent,
        StatusEvent,
        TokenEvent,
    )

    kind = wire.get("type")
    if kind == "draft":
        return DraftEvent(
            str(wire["answer"]),
            tuple(Citation.from_wire(c) for c in wire["citations"]),
            bool(wire.get("declined")),
        )
    if kind == "status":
        return StatusEvent(str(wire["message"]), str(wire["kind"]))
    if kind == "sources":
        return SourcesEvent(
            tuple(Hit.from_wire(h) for h in wire["hits"]), str(wire.get("question", ""))
        )
    if kind == "token":
        return TokenEvent(str(wire["text"]))
    if kind == "citations":
        return CitationsEvent(tuple(Citation.from_wire(c) for c in wire["citations"]))
    if kind == "warning":
        return _warning_from(wire)
    if kind == "done":
        return DoneEvent(
            answer=str(wire["answer"]),
            mode=str(wire["mode"]),
            citations=tuple(Citation.from_wire(c) for c in wire["citations"]),
            warnings=tuple(_warning_from(w) for w in wire["warnings"]),
            timings=dict(wire["timings"]),
            conversation_id=wire.get("conversation"),
            turn_id=wire.get("turn"),
            model=wire.get("model"),
            question=str(wire.get("question", "")),
            sources=tuple(Hit.from_wire(h) for h in wire.get("sources", ())),
        )
    if kind == "error":
        return ErrorEvent(
            error_from_wire({**wire, "type": wire.get("error")}),
            partial_answer=str(wire.get("partial_answer", "")),
        )
    raise BadReply(f"an answer event of unknown type {kind!r}")
