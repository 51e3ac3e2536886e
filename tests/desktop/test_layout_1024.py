"""Every pane keeps its layout at 1024x700 and 1440x900 whatever the content: a table's
long source line, a question of several lines, a long model name.

Real model, real DuckDB, a real table document; the model server is faked or absent.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pytestqt")

from PySide6.QtCore import Qt

from core.config import Settings
from desktop.main_window import MainWindow
from tests.desktop import test_window as base
from tests.desktop.test_evidence_and_layout import cut_texts, overflowing
from tests.fake_ollama import FakeModel, FakeOllama, unused_port

# the window over a real library: model loading and indexing: not in `make test-fast`.
pytestmark = pytest.mark.slow

open_window = base.open_window

TABLE = "equipment-register-north-germany.csv"
QUESTION = "How many hydraulic pumps are in Hamburg?"


def equipment_register() -> str:
    """A table long enough to be cut into several passages, which an answer lists as one
    source line: "rows 56–68, rows 1–14, rows 69–82, …"."""
    cities = ["Hamburg", "Bremen", "Kiel", "Hannover", "Berlin", "Lübeck"]
    kinds = ["hydraulic pump", "centrifugal pump", "compressor", "valve block", "hydraulic pump"]
    rows = ["site,city,equipment,count,last service"]
    for i in range(90):
        service = f"2024-0{i % 9 + 1}-1{i % 9}"
        rows.append(f"Site {i + 1},{cities[i % 6]},{kinds[i % 5]},{(i * 7) % 13 + 1},{service}")
    return "\n".join(rows) + "\n"


@pytest.fixture(scope="module")
def table_library(tmp_path_factory: pytest.TempPathFactory, embedder: object) -> Path:
    """A library holding the one table document, indexed."""
    from core.library import Library

    base_dir = tmp_path_factory.mktemp("table")
    folder = base_dir / "docs"
    folder.mkdir()
    (folder / TABLE).write_text(equipment_register(), encoding="utf-8")
    home = base_dir / "home"
    home.mkdir()
    with Library(Settings(home=home), embedder=embedder) as lib:  # type: ignore[arg-type]
        lib.index([folder])
    return home


def fits(window: MainWindow) -> list[str]:
    """What does not keep its place in the conversation pane: a column wider than the
    pane, labels past its right edge, text cut."""
    panel = window.conversation
    viewport = panel.scroll_area.viewport()
    problems = overflowing(panel) + cut_texts(panel)
    if panel.column.minimumSizeHint().width() > viewport.width():
        problems.append(f"column needs {panel.column.minimumSizeHint().width()} px")
    return problems


def test_a_long_table_source_line_wraps_inside_the_pane_at_1024_and_1440(
    qtbot: Any, open_window: Callable[..., MainWindow], table_library: Path
) -> None:
    window = open_window(url=f"http://127.0.0.1:{unused_port()}", copy_from=table_library)
    panel = window.conversation
    window.resize(1024, 700)
    turn = base.ask(qtbot, window, QUESTION)
    places = {s.location for s in turn.turn.sources}
    assert len(places) >= 4, places  # one document, many places: one long source line
    turn.open_citation(turn.turn.citations[0].n if turn.turn.citations else 1)
    qtbot.waitUntil(lambda: window.evidence.mode == "text", timeout=20_000)
    qtbot.wait(300)
    # No label of an answer asks for more room than a few words, whatever its text.
    for label in (turn.sources, turn.answer, turn.badge):
        assert label.minimumSizeHint().width() <= 120, (label.objectName(), label.text()[:80])
    assert fits(window) == []
    # The places wrap between themselves, never inside one ("rows" / "1–14").
    sources = turn.sources.text()
    assert "rows&nbsp;1–14" in sources and "rows&nbsp;1–14, " in sources, sources

    window.resize(1440, 900)
    qtbot.wait(300)
    assert fits(window) == []

    # Reopened, the conversation keeps its layout too.
    window.resize(1024, 700)
    asked = panel.conversation_id
    assert asked is not None
    window.new_conversation()
    panel.open_conversation(asked)
    qtbot.waitUntil(lambda: len(panel.turns) == 1, timeout=10_000)
    panel.turns[0].open_citation(1)
    qtbot.wait(300)
    assert window.evidence.isVisible()
    assert fits(window) == []


def test_a_long_file_name_is_shortened_with_the_whole_name_in_the_tooltip(
    qtbot: Any, open_window: Callable[..., MainWindow], table_library: Path, tmp_path: Path
) -> None:
    home = tmp_path / "long-name-home"
    shutil.copytree(table_library, home)
    window = open_window(url=f"http://127.0.0.1:{unused_port()}", home=home)
    window.resize(1024, 700)
    turn = base.ask(qtbot, window, QUESTION)
    # The file name, made long after the fact (as a document renamed between answers).
    long_name = "equipment-register-north-germany-hydraulics-and-compressors-2024.csv"
    turn.turn.sources = [
        replace(s, path=str(Path(s.path).with_name(long_name))) for s in turn.turn.sources
    ]
    turn.refresh()
    qtbot.wait(200)
    assert long_name.replace("-", "\u2011") not in turn.sources.text()
    assert "…" in turn.sources.text()
    assert long_name in turn.sources.toolTip()
    assert fits(window) == []


def test_the_question_box_shows_every_line_of_a_long_question_up_to_a_limit(
    qtbot: Any, open_window: Callable[..., MainWindow], table_library: Path
) -> None:
    window = open_window(url="", copy_from=table_library)
    window.resize(1024, 700)
    box = window.conversation.input
    two_lines = (
        "Which of the hydraulic pumps in Hamburg were serviced last,\n"
        "and which of them need a new valve block before the winter?"
    )
    for question in (two_lines, two_lines + "\nAnd in Bremen?", "\n".join("abcdefghij")):
        box.setPlainText(question)
        qtbot.wait(100)
        lines = sum(block.layout().lineCount() for block in blocks(box))
        assert lines >= 2
        first = blocks(box)[0]
        line = box.document().documentLayout().blockBoundingRect(first).height() / max(
            1, first.layout().lineCount()
        )
        inside = box.viewport().height() - 2 * box.document().documentMargin()
        if lines <= 6:
            # Every line whole: nothing to scroll to.
            assert box.verticalScrollBar().maximum() == 0, (question, lines)
            assert inside >= lines * line - 0.5, (inside, lines, line)
        else:
            # At its limit, it shows whole lines (never one cut through the middle).
            assert box.verticalScrollBar().maximum() > 0
            assert abs(inside / line - round(inside / line)) < 0.1, (inside, line)
            assert round(inside / line) == 6
        assert box.height() < 260  # it stops growing


def blocks(box: Any) -> list[Any]:
    found = []
    block = box.document().begin()
    while block.isValid():
        found.append(block)
        block = block.next()
    return found


def test_a_long_model_name_is_shortened_after_a_whole_word_with_a_tooltip(
    qtbot: Any, open_window: Callable[..., MainWindow], table_library: Path
) -> None:
    fake = FakeOllama([FakeModel("SmolLM2-135M-Instruct")]).start()
    try:
        window = open_window(url=fake.url, model="SmolLM2-135M-Instruct", copy_from=table_library)
        window.resize(1024, 700)
        qtbot.waitUntil(lambda: window.backend.llm.status.ready, timeout=20_000)
        qtbot.wait(200)
        pill = window.conversation.llm_pill
        assert pill.text() in (
            "SmolLM2-135M…",
            "SmolLM2-135M-Instruct",
            "SmolLM2-135M-Instruct:latest",
        )
        assert "SmolLM2-135M-Instruct" in pill.toolTip()
        assert cut_texts(window.conversation) == []
        # Where the header has the room, the whole name.
        window.resize(1440, 900)
        qtbot.wait(200)
        assert pill.text().startswith("SmolLM2-135M-Instruct")
        assert pill.toolButtonStyle() == Qt.ToolButtonStyle.ToolButtonTextBesideIcon
    finally:
        fake.stop()


LONG_QUESTION = (
    "How many hydraulic pumps are in Hamburg, counting every site of the equipment register "
    "for northern Germany, those waiting for their yearly service and those marked for "
    "replacement?"
)


def cut_at_a_word(shown: str, whole: str) -> bool:
    """``shown`` is ``whole`` up to the end of one of its words, then "…"."""
    if not shown.endswith("…"):
        return False
    kept = shown[:-1].rstrip()
    return bool(kept) and whole.startswith(kept) and whole[len(kept)] in " ,;:"


def test_a_long_conversation_title_is_cut_after_a_whole_word_with_all_of_it_in_the_tooltip(
    qtbot: Any, open_window: Callable[..., MainWindow], table_library: Path
) -> None:
    window = open_window(url="", copy_from=table_library)
    window.resize(1024, 700)
    base.ask(qtbot, window, LONG_QUESTION)
    title = window.conversation.title
    for size in ((1024, 700), (1440, 900)):
        window.resize(*size)
        qtbot.wait(100)
        assert cut_at_a_word(title.text(), LONG_QUESTION), (size, title.text())
        assert title.toolTip() == LONG_QUESTION

    # Opened again from the list: the library keeps a shorter title, the header still
    # says the whole question in its tooltip and cuts it after a word.
    window.conversation.new_conversation()
    panel = window.conversation
    conversations = window.conversation_list.list
    qtbot.waitUntil(lambda: conversations.count() == 1, timeout=10_000)
    conversations.setCurrentRow(0)
    conversations.itemClicked.emit(conversations.item(0))
    qtbot.waitUntil(lambda: bool(panel.items), timeout=10_000)
    qtbot.wait(100)
    assert cut_at_a_word(title.text(), LONG_QUESTION), title.text()
    assert title.toolTip() == LONG_QUESTION
