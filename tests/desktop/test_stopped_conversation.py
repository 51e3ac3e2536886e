"""Nothing lost on screen (issue 45): an answer stopped with Esc keeps its conversation
(titled, listed, found, reopened with its partial text), and an answer whose watched
source file is deleted says so in one line instead of a row of stand-ins.

The window over a real library, real model and DuckDB; only the Ollama server is fake.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pytestqt")

from PySide6.QtCore import Qt

from core.config import Settings
from core.store.redaction import REMOVED_SENTENCE
from desktop.main_window import MainWindow
from desktop.turn_view import TurnWidget
from tests.desktop import test_window as base
from tests.desktop.test_window import WAIT_ANSWER_MS, ask
from tests.fake_ollama import FakeOllama, Messages, sources_in

pytestmark = pytest.mark.slow

open_window = base.open_window
indexed = base.indexed

QUESTION = "Who approves expense claims?"


def listed(window: MainWindow) -> list[str]:
    items = window.conversation_list.list
    return [items.item(i).text() for i in range(items.count())]


def notes(turn: TurnWidget) -> list[tuple[str, str]]:
    """The notes under an answer as shown: (kind, words)."""
    shown = []
    for i in range(turn.notes.count()):
        row = turn.notes.itemAt(i).widget()
        if row is None or row.isHidden():
            continue
        for label in row.findChildren(type(turn.answer)):
            kind = label.property("warningKind")
            if kind:
                shown.append((str(kind), label.text()))
    return shown


def test_an_answer_stopped_with_esc_keeps_its_conversation_titled_listed_and_found(
    qtbot: Any,
    open_window: Callable[..., MainWindow],
    fake_ollama: FakeOllama,
    indexed: tuple[Path, Path],
) -> None:
    window = open_window(url=fake_ollama.url, copy_from=indexed[0])
    panel = window.conversation
    qtbot.keyClick(window, Qt.Key.Key_N, Qt.KeyboardModifier.ControlModifier)
    fake_ollama.answer = "Your manager approves claims up to EUR 2,500 [1]. " * 20
    fake_ollama.token_delay_s = 0.05
    panel.input.setPlainText(QUESTION)
    qtbot.keyClick(panel.input, Qt.Key.Key_Return)
    turn = panel.last_turn()
    assert turn is not None
    # The conversation is there from its first question: titled and listed at once.
    assert panel.title.full_text() == QUESTION
    qtbot.waitUntil(lambda: listed(window) == [QUESTION], timeout=WAIT_ANSWER_MS)
    qtbot.waitUntil(lambda: len(turn.turn.answer) > 20, timeout=WAIT_ANSWER_MS)
    qtbot.keyClick(panel.input, Qt.Key.Key_Escape)
    qtbot.waitUntil(lambda: not panel.busy, timeout=10_000)
    fake_ollama.token_delay_s = 0.0
    partial = turn.turn.answer
    assert 0 < len(partial) < len(str(fake_ollama.answer))
    assert ("cancelled", "Stopped before the answer was finished.") in turn.turn.warnings

    conversation = panel.conversation_id
    assert conversation is not None
    assert panel.title.full_text() == QUESTION
    qtbot.waitUntil(lambda: listed(window) == [QUESTION], timeout=10_000)
    # Found by the words of its partial answer too (only the answer says "manager").
    box = window.conversation_list.search
    for words, found in (("manager", [QUESTION]), ("zebra quasar", [])):
        box.clear()
        qtbot.keyClicks(box, words)
        qtbot.waitUntil(lambda w=words: window.conversation_list.shown_query == w, timeout=10_000)
        assert listed(window) == found
    box.clear()

    # Opened again, it shows what was written and that it was stopped.
    qtbot.keyClick(window, Qt.Key.Key_N, Qt.KeyboardModifier.ControlModifier)
    assert panel.conversation_id is None and not panel.turns
    window.conversation_list.list.setCurrentRow(0)
    qtbot.waitUntil(lambda: len(panel.turns) == 1, timeout=10_000)
    reopened = panel.turns[0]
    assert panel.conversation_id == conversation
    assert reopened.turn.answer == partial.strip()
    assert ("cancelled", "Stopped before the answer was finished.") in notes(reopened)


# --- a watched source file deleted under an answer --------------------------------------

STIPEND = (
    "The lighthouse keeper's stipend is 312 guilders per lunar quarter, paid in silver "
    "at the harbour office."
)
LAMP = "Keepers light the lamp at dusk and trim the wick twice a night."
LIGHTHOUSE = f"Lighthouse duties\n\n{STIPEND} {LAMP}\n\nThe relief keeper arrives by boat.\n"


def two_sentences_on_the_lighthouse(messages: Messages) -> str:
    keeper = next(i for i, s in enumerate(sources_in(messages), 1) if "guilders" in s)
    return f"{STIPEND} [{keeper}] {LAMP} [{keeper}]"


@pytest.fixture(scope="module")
def lighthouse(tmp_path_factory: pytest.TempPathFactory, embedder: object) -> tuple[Path, Path]:
    """A library holding the lighthouse note (in a folder of its own): (home, the note)."""
    from core.library import Library

    base_dir = tmp_path_factory.mktemp("lighthouse")
    coast = base_dir / "coast"
    coast.mkdir()
    (coast / "lighthouse.txt").write_text(LIGHTHOUSE, encoding="utf-8")
    home = base_dir / "home"
    with Library(Settings(home=home), embedder=embedder) as lib:  # type: ignore[arg-type]
        lib.index([coast])
    return home, coast / "lighthouse.txt"


@pytest.mark.skipif(
    not os.path.exists("/proc/sys/fs/inotify"), reason="needs inotify for a quick event"
)
def test_a_deleted_watched_source_reads_as_missing_in_one_line_not_wiped(
    qtbot: Any,
    open_window: Callable[..., MainWindow],
    fake_ollama: FakeOllama,
    lighthouse: tuple[Path, Path],
    tmp_path: Path,
) -> None:
    home = tmp_path / "watched-home"
    shutil.copytree(lighthouse[0], home)
    note = lighthouse[1]
    window = open_window(url=fake_ollama.url, home=home, watch=True)
    fake_ollama.answer = two_sentences_on_the_lighthouse
    turn = ask(qtbot, window, "What is the lighthouse keeper paid, and what are the night duties?")
    assert "312 guilders" in turn.answer.text()

    original = note.read_text(encoding="utf-8")
    note.unlink()
    try:
        qtbot.waitUntil(lambda: any(s.removed for s in turn.turn.sources), timeout=60_000)
        shown = turn.answer.text()
        assert REMOVED_SENTENCE not in shown and "guilders" not in shown
        missing = [words for kind, words in notes(turn) if kind == "source_missing"]
        assert missing == [
            "Part of this answer is missing: its source file lighthouse.txt was deleted or "
            "removed from the library; its text returns if the file does."
        ]
        # Reopened from the list, the stored answer reads the same way.
        panel = window.conversation
        conversation = panel.conversation_id
        qtbot.keyClick(window, Qt.Key.Key_N, Qt.KeyboardModifier.ControlModifier)
        window.conversation_list.list.setCurrentRow(0)
        qtbot.waitUntil(lambda: len(panel.turns) == 1, timeout=10_000)
        assert panel.conversation_id == conversation
        stored = panel.turns[0]
        assert REMOVED_SENTENCE not in stored.answer.text()
        assert [w for k, w in notes(stored) if k == "source_missing"] == missing
    finally:
        note.write_text(original, encoding="utf-8")
