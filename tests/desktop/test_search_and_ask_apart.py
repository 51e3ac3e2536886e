"""The Search tab and the Ask tab do not trip over each other (issue 46): each keeps its
own words in the box (a search's words became a half-typed question at Ctrl+1), and a
conversation clicked in the list from the Search tab opens in Ask (it showed nothing).

The window over a real library, real model and DuckDB; only the Ollama server is fake.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

pytest.importorskip("pytestqt")

from PySide6.QtCore import Qt

from desktop.main_window import MainWindow
from tests.desktop import test_window as base
from tests.desktop.test_window import ask
from tests.fake_ollama import FakeOllama

pytestmark = pytest.mark.slow

open_window = base.open_window
indexed = base.indexed


def switch(qtbot: Any, window: MainWindow, key: Qt.Key) -> None:
    qtbot.keyClick(window, key, Qt.KeyboardModifier.ControlModifier)


def click_conversation(qtbot: Any, window: MainWindow, row: int) -> None:
    items = window.conversation_list.list
    item = items.item(row)
    qtbot.mouseClick(
        items.viewport(), Qt.MouseButton.LeftButton, pos=items.visualItemRect(item).center()
    )


def test_the_search_and_the_question_each_keep_their_own_words(
    qtbot: Any, open_window: Callable[..., MainWindow], indexed: Any
) -> None:
    window = open_window(copy_from=indexed[0])
    panel = window.conversation
    panel.input.setPlainText("What is the monthly")
    switch(qtbot, window, Qt.Key.Key_2)
    assert panel.search_only and panel.input.toPlainText() == ""
    panel.input.setPlainText("corporate card")
    qtbot.keyClick(panel.input, Qt.Key.Key_Return)
    results = panel.search_results
    assert results is not None
    qtbot.waitUntil(lambda: not results.loading, timeout=20_000)
    # Back in Ask: the half-typed question, not the search's words.
    switch(qtbot, window, Qt.Key.Key_1)
    assert not panel.search_only and panel.input.toPlainText() == "What is the monthly"
    switch(qtbot, window, Qt.Key.Key_2)
    assert panel.input.toPlainText() == "corporate card"
    # A new conversation from the Search tab leaves the search's words where they are
    # (and the unsaved conversation, new again, keeps its draft).
    qtbot.keyClick(window, Qt.Key.Key_N, Qt.KeyboardModifier.ControlModifier)
    assert panel.search_only and panel.input.toPlainText() == "corporate card"
    switch(qtbot, window, Qt.Key.Key_1)
    assert panel.input.toPlainText() == "What is the monthly"


def test_a_conversation_clicked_from_the_search_tab_opens_in_ask(
    qtbot: Any,
    open_window: Callable[..., MainWindow],
    fake_ollama: FakeOllama,
    indexed: Any,
) -> None:
    window = open_window(url=fake_ollama.url, copy_from=indexed[0])
    panel = window.conversation
    turn = ask(qtbot, window, "What is the monthly limit of the corporate card?")
    qtbot.waitUntil(lambda: window.conversation_list.list.count() == 1, timeout=10_000)

    # The open conversation itself, clicked from the Search tab.
    switch(qtbot, window, Qt.Key.Key_2)
    panel.input.setPlainText("receipts")
    click_conversation(qtbot, window, 0)
    assert not panel.search_only
    assert panel.stack.currentWidget() is panel.scroll_area
    assert panel.turns and panel.turns[0].turn.answer == turn.turn.answer
    assert panel.input.toPlainText() == ""

    # Another conversation (here the one asked, from a new one), from the Search tab.
    qtbot.keyClick(window, Qt.Key.Key_N, Qt.KeyboardModifier.ControlModifier)
    panel.input.setPlainText("And the daily one?")
    switch(qtbot, window, Qt.Key.Key_2)
    assert panel.input.toPlainText() == "receipts"
    click_conversation(qtbot, window, 0)
    assert not panel.search_only
    qtbot.waitUntil(lambda: len(panel.turns) == 1, timeout=10_000)
    assert panel.stack.currentWidget() is panel.scroll_area
    assert panel.turns[0].turn.answer == turn.turn.answer
    # Its own draft (none), not the search's words nor the new conversation's draft.
    assert panel.input.toPlainText() == ""
    qtbot.keyClick(window, Qt.Key.Key_N, Qt.KeyboardModifier.ControlModifier)
    assert panel.input.toPlainText() == "And the daily one?"


def test_the_search_tabs_way_of_finding_is_kept_for_the_next_start(
    open_window: Callable[..., MainWindow], tmp_path: Any
) -> None:
    # Like the window's size and the tab: chosen once (or by the library check's advice),
    # it is what the next start searches with.
    window = open_window(start=False, url="")
    search = window.conversation.search_view
    assert search.words_only  # the first start's choice
    search.set_words_only(False)
    window.save_state()
    again = open_window(start=False, home=tmp_path / "home0")
    assert not again.conversation.search_view.words_only
    again.conversation.search_view.set_words_only(True)
    again.save_state()
    third = open_window(start=False, home=tmp_path / "home0")
    assert third.conversation.search_view.words_only
