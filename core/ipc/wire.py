"""What travels over the socket: frames, hits, citations, errors and answer events.

Each frame is one JSON line carrying the protocol version ``v``. Records (hits, files,
conversations, answer events and the errors in them) travel as ``record_to_json`` writes
them and are read back by their declared types (core/records.py): one serialisation for
the socket, the backups and the app's snapshot.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from core.errors import LecternError, error_to_json
from core.generation.events import (
    CitationsEvent,
    DoneEvent,
    DraftEvent,
    ErrorEvent,
    Event,
    SourcesEvent,
    StatusEvent,
    TokenEvent,
    WarningEvent,
)
from core.records import record_from_json, record_to_json

PROTOCOL = 2  # 2: records travel whole, as record_to_json writes them


class BadRequest(LecternError):
    default_hint = "This is a bug in the program that sent it; run the `lectern` command again."


class BadReply(Exception):
    """The other end spoke something other than this protocol."""


class VersionMismatch(Exception):
    pass


def frame(payload: Mapping[str, object]) -> bytes:
    return (json.dumps({"v": PROTOCOL, **payload}) + "\n").encode("utf-8")


def error_frame(exc: LecternError) -> bytes:
    return frame({"ok": False, "error": error_to_json(exc)})


# Each answer event by the name its frame carries; the event itself travels as its record
# (``record_to_json``), read back by its declared types.
EVENT_TYPES: dict[str, type[Event]] = {
    "sources": SourcesEvent,
    "status": StatusEvent,
    "draft": DraftEvent,
    "token": TokenEvent,
    "citations": CitationsEvent,
    "warning": WarningEvent,
    "done": DoneEvent,
    "error": ErrorEvent,
}
_EVENT_NAMES = {kind: name for name, kind in EVENT_TYPES.items()}


def event_to_wire(event: Event) -> dict[str, object]:
    fields: dict[str, object] = record_to_json(event)
    return {"type": _EVENT_NAMES[type(event)], **fields}


def event_from_wire(wire: Mapping[str, Any]) -> Event:
    kind = EVENT_TYPES.get(str(wire.get("type")))
    if kind is None:
        raise BadReply(f"an answer event of unknown type {wire.get('type')!r}")
    try:
        return record_from_json(kind, {k: v for k, v in wire.items() if k != "type"})
    except ValueError as exc:
        raise BadReply(f"an answer event that does not read: {exc}") from None
