"""Conversations in the window: renamed in the list (F2, double-click, the context menu)
with the panel's title following, searched as you type, exported to Markdown (and a
failed export told in plain words). A real library; only the LLM server is faked."""

from __future__ import annotations

import html
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pytestqt")

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QAbstractItemView, QLineEdit

from core.app.ops import Changes
from desktop import main_window as main_window_module
from desktop.main_window import SNIPPET_ROLE, MainWindow
from tests.desktop import test_window as base
from tests.desktop.test_window import ask
from tests.fake_ollama import FakeOllama

pytestmark = pytest.mark.slow

open_window = base.open_window
indexed = base.indexed

CARD = "What is the monthly limit of the corporate card?"
ONCALL = "Who is on call at the weekend?"


def listed(window: MainWindow) -> list[str]:
    items = window.conversation_list.list
    return [items.item(i).text() for i in range(items.count())] if items.isVisible() else []


def two_conversations(qtbot: Any, window: MainWindow) -> None:
    ask(qtbot, window, CARD)
    window.new_conversation()
    ask(qtbot, window, ONCALL)
    qtbot.waitUntil(lambda: len(listed(window)) == 2, timeout=10_000)


def edit_title(qtbot: Any, window: MainWindow, text: str) -> None:
    """Type ``text`` into the open inline editor and press Enter."""
    items = window.conversation_list.list
    qtbot.waitUntil(lambda: items.state() == QAbstractItemView.State.EditingState, timeout=5_000)
    # (An earlier edit's editor may linger until deleted: the open one is visible.)
    editors = [e for e in items.findChildren(QLineEdit) if e.isVisible()]
    assert len(editors) == 1
    editor = editors[0]
    editor.selectAll()
    qtbot.keyClicks(editor, text)
    qtbot.keyClick(editor, Qt.Key.Key_Return)


def test_rename_from_the_list_updates_the_list_and_the_title(
    qtbot: Any,
    open_window: Callable[..., MainWindow],
    fake_ollama: FakeOllama,
    indexed: tuple[Path, Path],
) -> None:
    window = open_window(url=fake_ollama.url, copy_from=indexed[0])
    ask(qtbot, window, CARD)
    qtbot.waitUntil(lambda: listed(window) == [CARD], timeout=10_000)
    panel = window.conversation
    cid = panel.conversation_id
    assert cid is not None and panel.title.full_text() == CARD
    items = window.conversation_list.list

    # F2 on the selected conversation opens its title for editing.
    items.setCurrentRow(0)
    items.setFocus()
    qtbot.keyClick(items, Qt.Key.Key_F2)
    edit_title(qtbot, window, "  Card limits  ")
    qtbot.waitUntil(lambda: listed(window) == ["Card limits"], timeout=10_000)
    qtbot.waitUntil(lambda: panel.title.full_text() == "Card limits", timeout=10_000)
    assert panel.conversation_title == "Card limits"
    # Kept: the list comes back from the database with it.
    window.backend.announce(Changes(conversations=True))
    qtbot.waitUntil(
        lambda: [c.title for c in window.conversations] == ["Card limits"], timeout=10_000
    )
    assert listed(window) == ["Card limits"]

    # A blank title is refused: the old one stays, and the reason is said.
    items.editItem(items.item(0))
    edit_title(qtbot, window, "   ")
    qtbot.waitUntil(lambda: "needs a title" in window.notice_label.text(), timeout=10_000)
    assert listed(window) == ["Card limits"] and panel.title.full_text() == "Card limits"

    # Double-click edits in place too; the context menu offers Rename and Export.
    rect = items.visualItemRect(items.item(0))
    # (A real double-click is a press and release, then the double-click event.)
    qtbot.mouseClick(items.viewport(), Qt.MouseButton.LeftButton, pos=rect.center())
    qtbot.mouseDClick(items.viewport(), Qt.MouseButton.LeftButton, pos=rect.center())
    edit_title(qtbot, window, "Corporate card")
    qtbot.waitUntil(lambda: listed(window) == ["Corporate card"], timeout=10_000)
    qtbot.waitUntil(lambda: panel.title.full_text() == "Corporate card", timeout=10_000)
    menu = window.conversation_menu(cid)
    assert [a.text() for a in menu.actions() if a.text()] == [
        "Rename",
        "Export to Markdown…",
        "Delete conversation",
    ]
    menu.actions()[0].trigger()
    assert items.state() == QAbstractItemView.State.EditingState
    edit_title(qtbot, window, "Card, renamed from the menu")
    qtbot.waitUntil(lambda: listed(window) == ["Card, renamed from the menu"], timeout=10_000)


def test_search_box_filters_the_list_as_you_type(
    qtbot: Any,
    open_window: Callable[..., MainWindow],
    fake_ollama: FakeOllama,
    indexed: tuple[Path, Path],
) -> None:
    window = open_window(url=fake_ollama.url, copy_from=indexed[0])
    two_conversations(qtbot, window)
    box = window.conversation_list.search
    assert box.isVisible()
    qtbot.keyClicks(box, "WEEKEND")
    qtbot.waitUntil(lambda: listed(window) == [ONCALL], timeout=10_000)
    # What matched is shown with the conversation.
    tip = window.conversation_list.list.item(0).toolTip()
    assert "weekend" in tip.casefold()

    # A word only the card conversation's answer holds.
    answer = window.backend.startup.library.conversations.turns(  # type: ignore[union-attr]
        next(c.id for c in window.conversations if c.title == CARD)
    )[0].answer
    word = next(w for w in answer.split() if len(w) > 5 and w.isalpha() and w not in CARD)
    box.clear()
    qtbot.keyClicks(box, word.lower())
    qtbot.waitUntil(lambda: listed(window) == [CARD], timeout=10_000)
    # Found in the answer: the words around it show under the title.
    shown = window.conversation_list.list.item(0).data(SNIPPET_ROLE)
    assert shown and word.casefold() in shown.casefold()

    box.clear()
    qtbot.keyClicks(box, "zebra quasar")
    empty = window.conversation_list.empty
    qtbot.waitUntil(lambda: empty.isVisible(), timeout=10_000)
    assert "No conversations match" in empty.text() and listed(window) == []

    box.setFocus()
    qtbot.keyClick(box, Qt.Key.Key_Escape)  # Esc clears the box: every conversation again
    assert box.text() == ""
    qtbot.waitUntil(lambda: sorted(listed(window)) == sorted([CARD, ONCALL]), timeout=10_000)
    assert not empty.isVisible()


def test_export_to_markdown_writes_the_file_and_a_failure_is_plain(
    qtbot: Any,
    open_window: Callable[..., MainWindow],
    fake_ollama: FakeOllama,
    indexed: tuple[Path, Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    window = open_window(url=fake_ollama.url, copy_from=indexed[0])
    assert not window.export_action.isEnabled()
    turn = ask(qtbot, window, CARD)
    assert window.export_action.isEnabled()
    # The quote box's words for the citation, to find in the file.
    turn.answer.linkActivated.emit("cite:1:0")
    evidence = window.evidence
    qtbot.waitUntil(lambda: evidence.quote_wrap.isVisible(), timeout=30_000)
    quote = html.unescape(evidence.quote.text()).strip("“”")

    asked: list[str] = []
    target = tmp_path / "out" / "card"  # no suffix: .md is added

    def save_as(_parent: object, _caption: str, suggested: str, _filter: str) -> tuple[str, str]:
        asked.append(suggested)
        return str(target), "Markdown (*.md)"

    (tmp_path / "out").mkdir()
    monkeypatch.setattr(main_window_module.QFileDialog, "getSaveFileName", save_as)
    window.export_action.trigger()
    written = tmp_path / "out" / "card.md"
    qtbot.waitUntil(written.exists, timeout=10_000)
    assert Path(asked[0]).name == "What is the monthly limit of the corporate card.md"
    text = written.read_text(encoding="utf-8")
    assert text.startswith(f"# {CARD}\n") and f"## 1. {CARD}" in text
    assert turn.turn.answer.strip() in text and "[1]" in text
    source = turn.turn.sources[0]
    assert f"[1] {source.file_name}**" in text and Path(source.path).as_uri() in text
    if not quote.endswith("…"):
        assert f"> {quote}\n" in text
    else:
        assert f"> {quote[:-1]}" in text
    qtbot.waitUntil(lambda: "Exported to" in window.notice_label.text(), timeout=5_000)

    # A folder that cannot be written: a plain message, no traceback.
    target = tmp_path / "gone" / "card.md"
    window.export_conversation(window.conversation.conversation_id)
    qtbot.waitUntil(lambda: window.export_error is not None, timeout=10_000)
    box = window.export_error
    assert box is not None
    assert box.text() == "The conversation could not be exported."
    assert "could not be saved" in box.informativeText()
    assert "Traceback" not in box.informativeText() and "Errno" not in box.informativeText()
    box.done(0)
