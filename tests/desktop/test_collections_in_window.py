"""Collections in the window: made in the Collections dialog, chosen on the question box,
shown there, saved and restored with the conversation, and answers that cite only the
chosen folders (real model, real DuckDB, real files; only the LLM server is faked)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pytestqt")

from PySide6.QtCore import Qt

from core.app.ops import Changes
from core.records import Scope
from desktop.main_window import MainWindow
from tests.desktop import test_window as base
from tests.desktop.test_window import ask
from tests.fake_ollama import FakeOllama
from tests.store.test_collections import ENGINEERING, POLICIES
from tests.store.test_collections import indexed as scoped_library

pytestmark = pytest.mark.slow

open_window = base.open_window
indexed = scoped_library  # (home, root): root/policies and root/engineering indexed

QUESTION = "Who approves expenses and what are the rules for escalation?"


def names(paths: list[str]) -> set[str]:
    return {Path(p).name for p in paths}


def make_collection(qtbot: Any, window: MainWindow, name: str, folder: str) -> None:
    """Through the dialog the scope menu opens: a name, New, then tick the folder."""
    panel = window.conversation
    panel.show_scope_menu()
    qtbot.waitUntil(lambda: "Manage collections…" in panel.scope_actions(), timeout=10_000)
    panel.scope_actions()["Manage collections…"].trigger()
    dialog = panel.collections_dialog
    assert dialog is not None and dialog.isVisible()
    dialog.name_edit.setText(name)
    qtbot.mouseClick(dialog.new_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(
        lambda: dialog.current() is not None and dialog.current().name == name, timeout=10_000
    )
    item = next(
        dialog.folders.item(i)
        for i in range(dialog.folders.count())
        if dialog.folders.item(i).data(Qt.ItemDataRole.UserRole) == folder
    )
    item.setCheckState(Qt.CheckState.Checked)
    qtbot.waitUntil(
        lambda: dialog.current() is not None and dialog.current().folders == (folder,),
        timeout=10_000,
    )
    dialog.close()


def test_a_collection_scope_on_the_question_box_is_saved_restored_and_honoured(
    qtbot: Any,
    open_window: Callable[..., MainWindow],
    fake_ollama: FakeOllama,
    indexed: tuple[Path, Path],
) -> None:
    home, root = indexed
    window = open_window(url=fake_ollama.url, copy_from=home)
    panel = window.conversation
    engineering = str(root / "engineering")
    assert panel.scope_button.text() == "All documents"
    assert panel.scope_button.isVisible()

    make_collection(qtbot, window, "Engineering", engineering)
    panel.show_scope_menu()
    qtbot.waitUntil(lambda: "Engineering" in panel.scope_actions(), timeout=10_000)
    actions = panel.scope_actions()
    assert actions["All documents"].isChecked()
    assert {"policies", "engineering"} <= set(actions)  # the library's folders
    assert "PDF" in actions and "Markdown" in actions  # and the indexed file types
    actions["Engineering"].trigger()
    assert panel.scope == Scope(collections=("Engineering",))
    assert panel.scope_button.text() == "Collection: Engineering"
    assert actions["Engineering"].isChecked() and not actions["All documents"].isChecked()
    # A click on a file type ticks it and leaves the menu open for more.
    menu = panel.scope_menu
    assert menu is not None and menu.isVisible()
    spot = menu.actionGeometry(actions["Markdown"]).center()
    qtbot.mouseClick(menu, Qt.MouseButton.LeftButton, pos=spot)
    assert panel.scope_button.text() == "Collection: Engineering · Markdown"
    assert menu.isVisible() and actions["Markdown"].isChecked()
    actions["Markdown"].trigger()
    assert panel.scope_button.text() == "Collection: Engineering"
    menu.hide()

    # The answer cites only the collection's files, and the prompt held only them.
    turn = ask(qtbot, window, QUESTION)
    view = turn.turn
    assert view.error is None and view.sources and view.citations
    assert names([s.path for s in view.sources]) <= set(ENGINEERING)
    assert names([c.source.path for c in view.citations if c.source]) <= set(ENGINEERING)
    conversation = panel.conversation_id
    assert conversation is not None
    library = window.backend.startup.library
    assert library is not None
    qtbot.waitUntil(
        lambda: library.collections.scope(conversation) == Scope(("Engineering",)),
        timeout=10_000,
    )

    # A new conversation searches everything; the old one comes back with its scope.
    panel.new_conversation()
    assert panel.scope_button.text() == "All documents"
    everywhere = ask(qtbot, window, QUESTION).turn
    assert names([s.path for s in everywhere.sources]) & set(POLICIES)
    panel.open_conversation(conversation, "Expenses")
    qtbot.waitUntil(lambda: panel.scope_button.text() == "Collection: Engineering", timeout=10_000)
    assert panel.scope_button.property("scoped") is True

    # Deleting the collection: the conversation says so instead of searching everything.
    library.collections.delete("Engineering")
    window.backend.announce(Changes(collections=True))
    qtbot.waitUntil(lambda: panel.scope_button.property("missing") is True, timeout=10_000)
    assert "deleted" in panel.scope_button.toolTip()
    gone = ask(qtbot, window, "And who approves travel?").turn
    assert gone.error is not None and gone.error.kind == "CollectionNotFoundError"
    assert "Engineering" in gone.error.message
