"""Records read back from JSON are the records written (issue 45): the same types all the
way down, not only equal values. A ``DocState`` read back as the text "failed" compares
equal to ``DocState.FAILED`` (it is a ``str`` enum) yet has no ``.value``; the library
panel's first frame was empty over it. So every comparison here is by value *and* type.

Every frozen record of core/records.py, the settings and the app's saved library view
are built with a value in every field (each value of every enum in turn), written as
JSON and read back."""

from __future__ import annotations

import dataclasses
import inspect
import json
import types
import typing
from datetime import UTC, datetime
from enum import Enum
from pathlib import Path
from typing import Any

import pytest

import core.records as records
from core.config import FOLLOWUP_REWRITES, INDEX_WHEN, SOURCE_ORDERS, Settings, load_settings
from core.embedding.models import MODELS
from core.errors import (
    DiskFullError,
    LecternError,
    LLMTimeoutError,
    ModelNotFoundError,
    error_to_json,
)
from core.generation.events import Event
from core.ingest.ocr import available_languages
from core.ipc.wire import EVENT_TYPES, event_from_wire, event_to_wire, frame
from core.records import DocState, Document, FolderStatus, record_from_json, record_to_json


def same(a: object, b: object, where: str = "") -> None:
    """``a`` and ``b`` equal, and of the same type at every level."""
    assert type(a) is type(b), f"{where}: {type(a).__name__} against {type(b).__name__}"
    if isinstance(a, LecternError):  # exceptions compare by identity: compare their words
        assert error_to_json(a) == error_to_json(b), where  # type: ignore[arg-type]
    elif dataclasses.is_dataclass(a) and not isinstance(a, type):
        for f in dataclasses.fields(a):
            same(getattr(a, f.name), getattr(b, f.name), f"{where}.{f.name}")
    elif isinstance(a, dict):
        assert isinstance(b, dict) and list(a) == list(b), where
        for k in a:
            same(a[k], b[k], f"{where}[{k!r}]")
    elif isinstance(a, list | tuple):
        assert isinstance(b, list | tuple) and len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            same(x, y, f"{where}[{i}]")
    else:
        assert a == b, where


def sample(kind: Any, variant: int = 0, depth: int = 0) -> Any:
    """A value of ``kind`` unlike its default; ``variant`` picks the enum member. Records
    that hold their own kind (a document's attachments) stop at ``depth`` 2."""
    origin = typing.get_origin(kind)
    args = typing.get_args(kind)
    if origin in (typing.Union, types.UnionType):
        return sample(next(a for a in args if a is not type(None)), variant, depth)
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            if depth >= 2:
                return ()
            return (sample(args[0], variant, depth + 1), sample(args[0], variant + 1, depth + 1))
        return tuple(sample(a, variant, depth) for a in args)
    if origin is list:
        return [sample(args[0], variant, depth + 1)]
    if origin is dict:
        return {"key ✓": sample(args[1], variant, depth + 1)}
    if kind is Any or kind is object:
        return {"n": 3, "words": ["a", "b"], "none": None}
    if isinstance(kind, type) and issubclass(kind, Enum):
        members = list(kind)
        return members[variant % len(members)]
    if isinstance(kind, type) and dataclasses.is_dataclass(kind):
        return build(kind, variant, depth)
    if kind is LecternError:  # each variant another class, one with its model
        return [
            ModelNotFoundError(f"not found ✓ {variant}", "pull it", model="llama3.2"),
            LLMTimeoutError(f"silent ✓ {variant}"),
            DiskFullError(f"full ✓ {variant}", "free some space"),
        ][variant % 3]
    return {
        int: 7 + variant,
        float: 2.5 + variant,
        str: f"text ✓ {variant}",
        bool: True,
        datetime: datetime(2024, 5, 6, 7, 8, 9, tzinfo=UTC),
        Path: Path("/tmp/somewhere"),
    }[kind]


def build(cls: type, variant: int = 0, depth: int = 0) -> Any:
    hints = typing.get_type_hints(cls)
    return cls(
        **{f.name: sample(hints[f.name], variant, depth) for f in dataclasses.fields(cls) if f.init}
    )


def enum_count(cls: type, seen: frozenset[type] = frozenset()) -> int:
    """How many variants make every enum value appear in ``cls`` somewhere."""
    counts = [1]
    for hint in typing.get_type_hints(cls).values():
        for part in _parts(hint):
            if isinstance(part, type) and issubclass(part, Enum):
                counts.append(len(part))
            elif dataclasses.is_dataclass(part) and part not in seen:
                counts.append(enum_count(part, seen | {cls}))
    return max(counts)


def _parts(hint: Any) -> list[Any]:
    args = typing.get_args(hint)
    return [hint] if not args else [p for a in args for p in _parts(a)]


def round_trip(record: Any) -> Any:
    return record_from_json(type(record), json.loads(json.dumps(record_to_json(record))))


RECORDS = sorted(
    (
        cls
        for _, cls in inspect.getmembers(records, inspect.isclass)
        if dataclasses.is_dataclass(cls) and cls.__module__ == records.__name__
    ),
    key=lambda cls: cls.__name__,
)


def test_every_record_has_been_found() -> None:
    names = {cls.__name__ for cls in RECORDS}
    assert {"Document", "FolderStatus", "FileEntry", "Hit", "Citation", "Turn"} <= names
    assert all(cls.__dataclass_params__.frozen for cls in RECORDS)  # type: ignore[attr-defined]


@pytest.mark.parametrize("cls", RECORDS, ids=lambda cls: cls.__name__)
def test_every_record_comes_back_the_same(cls: type) -> None:
    for variant in range(enum_count(cls)):
        record = build(cls, variant)
        same(round_trip(record), record, cls.__name__)


EVENTS = sorted(EVENT_TYPES.values(), key=lambda cls: cls.__name__)


def test_every_answer_event_travels_the_socket() -> None:
    assert len(EVENTS) == len(typing.get_args(Event))  # each kind of event has its frame


@pytest.mark.parametrize("cls", EVENTS, ids=lambda cls: cls.__name__)
def test_every_answer_event_comes_back_the_same_over_the_socket(cls: type) -> None:
    for variant in range(max(enum_count(cls), 3)):
        event = build(cls, variant)
        line = frame({"event": event_to_wire(event)})
        back = event_from_wire(json.loads(line)["event"])
        same(back, event, cls.__name__)


@pytest.mark.parametrize("cls", RECORDS, ids=lambda cls: cls.__name__)
def test_every_record_comes_back_the_same_over_the_socket(cls: type) -> None:
    for variant in range(enum_count(cls)):
        record = build(cls, variant)
        line = frame({"result": record_to_json(record)})
        same(record_from_json(cls, json.loads(line)["result"]), record, cls.__name__)


def test_every_doc_state_comes_back_a_doc_state() -> None:
    for state in DocState:
        doc = build(Document, 0)
        doc = dataclasses.replace(doc, state=state)
        back = round_trip(doc)
        assert back.state is state  # an enum member, with its .value


def test_a_record_of_the_wrong_shape_is_refused_not_half_read() -> None:
    good = record_to_json(build(FolderStatus))
    for bad in (
        {**good, "path": 1},
        {**good, "online": "yes"},
        {k: v for k, v in good.items() if k != "indexed"},
        [good],
    ):
        with pytest.raises(ValueError):
            record_from_json(FolderStatus, bad)
    doc = record_to_json(build(Document))
    with pytest.raises(ValueError):
        record_from_json(Document, {**doc, "state": "exploded"})
    # Missing fields with defaults take them; keys from a newer version are ignored.
    trimmed = {k: v for k, v in good.items() if k != "ocr"}
    assert record_from_json(FolderStatus, {**trimmed, "later": 1}).ocr == 0


def test_settings_come_back_the_same(tmp_path: Path) -> None:
    """Every setting given a value unlike its default, saved and loaded."""
    choices: dict[str, object] = {
        "llm_kind": "openai",
        "llm_url": "http://127.0.0.1:1234/v1",
        "index_when": INDEX_WHEN[-1],
        "source_order": SOURCE_ORDERS[-1],
        "followup_rewrite": FOLLOWUP_REWRITES[-1],
        "fusion": "rrf",
        "embedding_model": MODELS[-1],
        "ocr_languages": available_languages()[:1] or ("eng",),
        "ignore_patterns": ("*.bak", "drafts/"),
    }
    hints = typing.get_type_hints(Settings)
    default = Settings(home=tmp_path)
    changes: dict[str, object] = {}
    for f in dataclasses.fields(Settings):
        if f.name in ("home", "replaced", "embedding_model_chosen"):
            continue
        if f.name in choices:
            changes[f.name] = choices[f.name]
        elif hints[f.name] is bool:
            changes[f.name] = not getattr(default, f.name)
        elif hints[f.name] in (int, float):
            changes[f.name] = hints[f.name](getattr(default, f.name) + 1)
        else:
            changes[f.name] = sample(hints[f.name])
    settings = default.with_changes(**changes)
    settings.save()
    loaded = load_settings(tmp_path)
    assert not loaded.replaced  # every value was in range
    same(loaded, settings, "Settings")


def test_the_saved_library_view_comes_back_the_same(tmp_path: Path) -> None:
    from desktop.library_view import LibrarySnapshot, read_saved_snapshot, write_saved_snapshot

    folder = "/home/alice/Papers"
    problems = tuple(
        dataclasses.replace(build(Document), id=i, path=f"{folder}/{i}.pdf", state=state)
        for i, state in enumerate(DocState)
    )
    snapshot = LibrarySnapshot(
        folders=(dataclasses.replace(build(FolderStatus), path=folder),),
        problems={folder: problems},
        chunks=12,
        documents=4,
        embedded=9,
    )
    write_saved_snapshot(tmp_path / "view.json", snapshot)
    back = read_saved_snapshot(tmp_path / "view.json")
    assert back is not None and back.saved
    same(dataclasses.replace(back, saved=False), snapshot, "LibrarySnapshot")
    assert [d.state.value for d in back.problems[folder]] == [s.value for s in DocState]
