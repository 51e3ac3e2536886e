"""The typed operations (core/app/ops.py), run in place on a real library: each gives its
result with what it changed, and the CLI, the socket server and the app call them
rather than the library's services."""

from __future__ import annotations

import re
import threading
from pathlib import Path
from typing import Any

import pytest

from core.app import ops
from core.app.ops import NOTHING, Changes, InPlace, Op
from core.errors import CollectionError
from core.records import Scope

ROOT = Path(__file__).resolve().parents[2]


def test_changes_join_and_name_themselves() -> None:
    both = Changes(collections=True) | Changes(scope=True)
    assert both.names == {"collections", "scope"} and both
    assert not NOTHING and NOTHING.names == frozenset()
    assert (NOTHING | NOTHING) == NOTHING


def test_an_op_gives_its_result_with_what_it_changed(library: Any, sample_folder: Path) -> None:
    library.index([sample_folder])
    made = ops.create_collection("Papers", [sample_folder]).run(library)
    assert made.value.name == "Papers" and made.value.folders == (str(sample_folder),)
    assert made.changes.names == {"collections"}
    # A read changes nothing, and reads what the change left.
    listed = ops.collections().run(library)
    assert [c.name for c in listed.value] == ["Papers"] and not listed.changes
    renamed = ops.rename_collection("Papers", "Reading").run(library)
    assert renamed.value.name == "Reading" and renamed.changes.names == {"collections", "scope"}
    choices = ops.scope_choices().run(library).value
    assert [c.name for c in choices.collections] == ["Reading"]
    assert str(sample_folder) in choices.folders and choices.types


def test_a_failed_op_raises_its_own_error_and_changes_nothing(library: Any) -> None:
    with pytest.raises(CollectionError) as raised:
        ops.create_collection("Papers", ["/nowhere/at/all"]).run(library)
    assert raised.value.hint  # what to do, for the front end to say
    assert ops.collections().run(library).value == []


def test_then_runs_on_the_ops_thread_with_its_result(library: Any, sample_folder: Path) -> None:
    library.index([sample_folder])
    hits = ops.search("hotel", k=3, mode="bm25").run(library).value
    assert hits
    seen: list[str] = []

    def lay_out(text: str) -> int:
        seen.append(threading.current_thread().name)
        return len(text)

    length = ops.document_text(hits[0].document_id).then(lay_out)
    assert isinstance(length, Op) and length.name == "document text"
    assert length.run(library).value > 0 and seen == [threading.current_thread().name]


def test_a_conversations_scope_and_its_deletion(library: Any) -> None:
    conversation = library.conversations.create("What is kept?")
    saved = ops.set_conversation_scope(conversation, Scope(types=("pdf",))).run(library)
    assert saved.changes.names == {"scope"}
    assert ops.conversation_scope(conversation).run(library).value == Scope(types=("pdf",))
    gone = ops.delete_conversation(conversation).run(library)
    assert gone.changes.conversations
    assert ops.conversations().run(library).value == []


def test_in_place_ops_can_be_asked_to_stop() -> None:
    ctx = InPlace()
    ctx.report("progress goes nowhere in place")
    assert not ctx.cancel.is_set()
    ctx.cancel.set()
    assert ctx.cancel.is_set()


CHANGES = re.compile(
    r"library\.collections\.(create|rename|delete|add_folders|remove_folders|set_scope)\(|"
    r"library\.conversations\.(rename|delete)\("
)
READS = re.compile(
    r"library\.(search|files\.file_list)\(|"
    r"library\.conversations\.(list|require|turns|search|export)\("
)


def _calls(pattern: re.Pattern[str], *places: str) -> list[str]:
    return [
        f"{path.relative_to(ROOT)}:{n}"
        for place in places
        for path in sorted((ROOT / place).rglob("*.py"))
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if pattern.search(line)
    ]


def test_the_fronts_call_ops_for_what_they_change() -> None:
    """The CLI's and the socket server's changes go through ops, and so do the server's
    reads (a command that asks a running writer reads through it, not the library)."""
    assert not _calls(CHANGES, "core/cli", "core/ipc")
    assert not _calls(READS, "core/ipc")
