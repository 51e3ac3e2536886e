"""What an answer card says while the model writes and after: the notes about the wait go
when the written answer starts, a follow-up being worked out says so, an answer that
cites nothing gets one note, the no-model note is said once in a reopened conversation,
and code in an answer never wraps at its hyphens.

Real model, real DuckDB, real files; the only fake is the Ollama server.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pytestqt")

from PySide6.QtCore import Qt
from PySide6.QtGui import QGuiApplication, QTextDocument
from PySide6.QtWidgets import QLabel

from desktop.main_window import MainWindow
from desktop.rich import NO_BREAK_HYPHEN
from desktop.theme import Theme
from desktop.turn_view import TurnWidget
from desktop.viewmodels import SourceView, TurnView
from tests.desktop import test_window as base
from tests.fake_ollama import FakeOllama, Messages, default_answer, unused_port

# the window over a real library: model loading and indexing: not in `make test-fast`.
pytestmark = pytest.mark.slow

# The desktop tests' fixtures: a window on a fresh or copied library, and a library with
# the sample documents indexed once per module.
open_window = base.open_window
indexed = base.indexed

WAIT_NOTES = ("draft", "status")


@pytest.fixture
def theme() -> Theme:
    made = Theme("light")
    made.apply()
    return made


def shown_notes(turn: TurnWidget) -> list[tuple[str, str]]:
    """The kind and words of each note the card shows."""
    return [
        (str(label.property("warningKind")), label.text())
        for label in turn.findChildren(QLabel)
        if label.property("warningKind") and label.isVisibleTo(turn)
    ]


def send(qtbot: Any, window: MainWindow, question: str) -> TurnWidget:
    """Ask ``question`` and return its card at once, while it is being answered."""
    panel = window.conversation
    panel.input.setPlainText(question)
    qtbot.keyClick(panel.input, Qt.Key.Key_Return)
    turn = panel.last_turn()
    assert turn is not None and turn.turn.question == question
    return turn


def long_answer(messages: Messages) -> str:
    answer = default_answer(messages)
    if "Standalone question:" in str(messages[-1].get("content", "")):
        return answer
    return answer + " " + " ".join(["More words follow here."] * 6)


def written_meanwhile(qtbot: Any, window: MainWindow, turn: TurnWidget) -> None:
    """Wait until the written answer streams in (its first words shown, more to come)."""
    qtbot.waitUntil(
        lambda: turn.turn.streaming and "More words" in turn.turn.answer, timeout=30_000
    )
    qtbot.wait(60)  # a frame of the stream's own redraws


# --- the wait's notes -----------------------------------------------------------------------


def test_the_quote_shown_while_the_model_reads_goes_with_its_note_at_the_first_word(
    qtbot: Any,
    open_window: Callable[..., MainWindow],
    indexed: tuple[Path, Path],
    fake_ollama: FakeOllama,
) -> None:
    # A slow server: the quoted answer is shown meanwhile, labelled as such.
    fake_ollama.stall_before_first_s = 2.5
    fake_ollama.token_delay_s = 0.15
    fake_ollama.answer = long_answer
    window = open_window(url=fake_ollama.url, copy_from=indexed[0])
    turn = send(qtbot, window, "What is the nightly hotel cap?")
    qtbot.waitUntil(lambda: "draft" in [k for k, _ in shown_notes(turn)], timeout=30_000)
    written_meanwhile(qtbot, window, turn)
    notes = shown_notes(turn)
    assert not [n for n in notes if n[0] in WAIT_NOTES], notes
    assert not any("replaces this" in text for _, text in notes), notes
    qtbot.waitUntil(lambda: not window.conversation.busy, timeout=60_000)


def test_the_servers_loading_note_goes_at_the_first_word(
    qtbot: Any,
    open_window: Callable[..., MainWindow],
    indexed: tuple[Path, Path],
    fake_ollama: FakeOllama,
) -> None:
    # llama.cpp says it is loading its model (a status note), then writes.
    window = open_window(url=fake_ollama.url, copy_from=indexed[0])
    backend = window.backend
    backend.apply_settings(backend.settings.with_changes(llm_kind="openai"))
    qtbot.waitUntil(lambda: backend.llm.status.ready, timeout=20_000)
    fake_ollama.loading_for_s = 1.5
    fake_ollama.token_delay_s = 0.15
    fake_ollama.answer = long_answer
    turn = send(qtbot, window, "What is the nightly hotel cap?")
    qtbot.waitUntil(lambda: "status" in [k for k, _ in shown_notes(turn)], timeout=30_000)
    written_meanwhile(qtbot, window, turn)
    notes = shown_notes(turn)
    assert not [n for n in notes if n[0] in WAIT_NOTES], notes
    qtbot.waitUntil(lambda: not window.conversation.busy, timeout=60_000)


def test_a_followup_being_worked_out_says_so(
    qtbot: Any,
    open_window: Callable[..., MainWindow],
    indexed: tuple[Path, Path],
    fake_ollama: FakeOllama,
) -> None:
    def slow_rewrite(messages: Messages) -> str:
        if "Standalone question:" in str(messages[-1].get("content", "")):
            time.sleep(2.0)  # a small model on a busy CPU took ~30 s here
        return default_answer(messages)

    fake_ollama.answer = slow_rewrite
    window = open_window(url=fake_ollama.url, copy_from=indexed[0])
    base.ask(qtbot, window, "What is the nightly hotel cap?")
    turn = send(qtbot, window, "And in London?")
    qtbot.waitUntil(lambda: "follow-up question" in turn.answer.text(), timeout=10_000)
    assert "Searching" not in turn.answer.text()
    qtbot.waitUntil(lambda: not window.conversation.busy, timeout=60_000)
    assert "follow-up question" not in turn.answer.text()
    assert turn.turn.answer and not turn.turn.rewriting


def test_a_followup_is_said_to_be_worked_out_whatever_the_badge_last_knew(
    qtbot: Any,
    open_window: Callable[..., MainWindow],
    indexed: tuple[Path, Path],
    fake_ollama: FakeOllama,
) -> None:
    # The window guessed from its badge whether the model would be asked; a badge not
    # checked again yet guessed wrong and "Searching your documents…" stayed. Core says
    # when it asks the model, and the window shows what it says.
    def slow_rewrite(messages: Messages) -> str:
        if "Standalone question:" in str(messages[-1].get("content", "")):
            time.sleep(2.0)
        return default_answer(messages)

    fake_ollama.answer = slow_rewrite
    window = open_window(url=fake_ollama.url, copy_from=indexed[0])
    base.ask(qtbot, window, "What is the nightly hotel cap?")
    backend = window.backend
    check = backend.llm._check  # the check after the answer, let finish first
    qtbot.waitUntil(lambda: check is None or check.done.is_set(), timeout=20_000)
    qtbot.wait(100)
    backend.llm.status = replace(backend.llm.status, state="checking")
    turn = send(qtbot, window, "And in London?")
    qtbot.waitUntil(lambda: "follow-up question" in turn.answer.text(), timeout=10_000)
    assert "Searching" not in turn.answer.text()
    qtbot.waitUntil(lambda: not window.conversation.busy, timeout=60_000)
    assert turn.turn.answer and not turn.turn.rewriting


# --- one note where one is meant ------------------------------------------------------------


def test_an_answer_that_cites_nothing_gets_one_note(
    qtbot: Any,
    open_window: Callable[..., MainWindow],
    indexed: tuple[Path, Path],
    fake_ollama: FakeOllama,
) -> None:
    fake_ollama.answer = (
        "Hotels in big cities are allowed a higher nightly amount. "
        "Travellers should book their rooms through the travel desk."
    )
    window = open_window(url=fake_ollama.url, copy_from=indexed[0])
    turn = base.ask(qtbot, window, "What is the nightly hotel cap?")
    kinds = [kind for kind, _ in turn.turn.warnings]
    assert "no_citations" in kinds and kinds.count("unsupported") == 2, kinds
    notes = shown_notes(turn)
    assert len(notes) == 1, notes
    # The sentences it stands for are a hover away.
    (label,) = [
        w for w in turn.findChildren(QLabel) if w.property("warningKind") and w.isVisibleTo(turn)
    ]
    assert "travel desk" in label.toolTip()


def test_a_model_answer_marked_unverified_gets_one_note_not_one_per_sentence(
    qtbot: Any, theme: Theme
) -> None:
    # Core's warnings for a model answer that cited [1] once, with a name no source has
    # and two uncited sentences: the quote comes first and the whole text is unverified.
    warnings = [
        (
            "quoted_first",
            "llama3.2's answer could not be checked against your documents (it has a "
            "figure or name its cited source lacks), so the passage quoted from them comes "
            "first; the model's text follows it, unverified.",
        ),
        ("unverified_number", "'Ctrl' appears in none of the sources: \"Stop it with Ctrl+C.\""),
        ("unsupported", 'No source is cited for: "Stop it with Ctrl+C."'),
        ("unsupported", 'No source is cited for: "More words follow here."'),
    ]
    source = SourceView(1, 1, "/docs/rota.md", "Rota", "md", None, None, "x", 0, 1)
    view = TurnView(
        question="How is on-call handover done?",
        answer="Handover happens every Monday [1].\n\nThe model's answer, unverified: …",
        mode="extractive",
        sources=[source],
        warnings=warnings,
    )
    turn = TurnWidget(view, theme)
    qtbot.addWidget(turn)
    turn.show()
    assert [kind for kind, _ in shown_notes(turn)] == ["quoted_first"]
    (label,) = [
        w for w in turn.findChildren(QLabel) if w.property("warningKind") and w.isVisibleTo(turn)
    ]
    assert "Ctrl" in label.toolTip() and "More words follow here" in label.toolTip()


def test_the_no_model_note_is_said_once_in_a_reopened_conversation(
    qtbot: Any, open_window: Callable[..., MainWindow], indexed: tuple[Path, Path]
) -> None:
    window = open_window(url=f"http://127.0.0.1:{unused_port()}", copy_from=indexed[0])
    panel = window.conversation
    base.ask(qtbot, window, "What is the nightly hotel cap?")
    base.ask(qtbot, window, "When are receipts required?")
    asked = panel.conversation_id
    assert asked is not None
    window.new_conversation()
    panel.open_conversation(asked)
    qtbot.waitUntil(lambda: len(panel.turns) == 2, timeout=10_000)
    first, second = panel.turns
    assert "llm_unavailable" in [kind for kind, _ in second.turn.warnings]
    assert [k for k, _ in shown_notes(first)].count("llm_unavailable") == 1
    assert "llm_unavailable" not in [k for k, _ in shown_notes(second)]


# --- code in answers ------------------------------------------------------------------------


def lines_of(html: str, label: QLabel, width: int) -> list[str]:
    """The lines ``html`` is broken into at ``width`` in ``label``'s font."""
    document = QTextDocument()
    document.setDefaultFont(label.font())
    document.setHtml(html)
    document.setTextWidth(width)
    document.documentLayout().documentSize()
    lines = []
    block = document.begin()
    while block.isValid():
        layout = block.layout()
        for i in range(layout.lineCount()):
            line = layout.lineAt(i)
            lines.append(block.text()[line.textStart() : line.textStart() + line.textLength()])
        block = block.next()
    return lines


def test_a_command_in_an_answer_never_wraps_at_its_hyphens_and_copies_plain(
    qtbot: Any, theme: Theme
) -> None:
    command = "lectern watch --canary-duration 5 --log-level debug"
    source = SourceView(1, 1, "/docs/ops.md", "Operations", "md", None, None, "x", 0, 1)
    view = TurnView(
        question="How do I try the watcher?",
        answer=f"Start it with `{command}` and watch the log [1].\n\n```\n{command}\n```",
        mode="generated",
        sources=[source],
    )
    turn = TurnWidget(view, theme)
    qtbot.addWidget(turn)
    turn.resize(420, 600)
    turn.show()
    label = turn.answer
    for width in range(120, 420, 6):
        for line in lines_of(label.text(), label, width):
            end = line.rstrip()
            # A line may end before an option ("… --log-level"), never inside one.
            assert not end.endswith(("-", NO_BREAK_HYPHEN)), (width, line)
    # What is copied from it runs as typed.
    label.setFocus()
    document = QTextDocument()
    document.setHtml(label.text())
    label.setSelection(0, len(document.toPlainText()))
    assert label.hasSelectedText()
    QGuiApplication.clipboard().clear()
    qtbot.keyClick(label, Qt.Key.Key_C, Qt.KeyboardModifier.ControlModifier)
    copied = QGuiApplication.clipboard().text()
    assert command in copied and NO_BREAK_HYPHEN not in copied, copied
