"""What the round-four screenshots still showed (issue 46), each through the real widgets:
a folder with nothing indexed had the green dot of a searchable one; the paused card said
"paused" twice; a section's own number read as part of its source's ("3 3 Results"); an
answer whose model text came after the quote said "unverified" three times."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pytestqt")

from core.config import Settings
from core.records import FolderStatus, IndexProgress
from desktop.backend import Backend
from desktop.library_view import LibrarySnapshot
from desktop.main_window import MainWindow
from desktop.search_results import SearchResultsWidget
from desktop.theme import Theme
from desktop.turn_view import TurnWidget
from desktop.viewmodels import SourceView, TurnView
from tests.desktop import test_window as base
from tests.desktop.test_answer_notes import shown_notes
from tests.fake_ollama import FakeOllama

open_window = base.open_window
indexed = base.indexed


@pytest.fixture
def backend(qtbot: Any, tmp_path: Path) -> Iterator[Backend]:
    """A backend that is never started: the widgets' own behaviour, without a library."""
    home = tmp_path / "home"
    home.mkdir()
    made = Backend(Settings(home=home), watch=False)
    yield made
    made.shutdown()


@pytest.fixture
def theme() -> Theme:
    made = Theme("light")
    made.apply()
    return made


def _dot_colour(html: str) -> str:
    found = re.search(r'color:(#[0-9A-Fa-f]{6});">●', html)
    assert found, html
    return found.group(1).upper()


def test_a_folder_with_nothing_indexed_has_no_green_dot(
    qtbot: Any, backend: Backend, theme: Theme
) -> None:
    from desktop.library_panel import LibraryPanel

    panel = LibraryPanel(backend, theme)
    qtbot.addWidget(panel)
    panel.show()
    some = FolderStatus("/home/someone/Documents/Team handbook", True, 5, 0, 0, 0, 20)
    none = FolderStatus("/home/someone/Documents/Notes", True, 0, 0, 0, 0, 0)
    panel.set_snapshot(LibrarySnapshot(folders=(some, none), problems={}))
    green = theme.palette.success.upper()
    assert _dot_colour(panel._rows[some.path].counts.text()) == green
    assert _dot_colour(panel._rows[none.path].counts.text()) != green
    assert "0 indexed" in panel._rows[none.path].counts.text()


def test_the_paused_card_says_paused_once(qtbot: Any, backend: Backend, theme: Theme) -> None:
    from desktop.library_panel import LibraryPanel

    panel = LibraryPanel(backend, theme)
    qtbot.addWidget(panel)
    panel.resize(300, 500)
    panel.show()
    backend.indexing.pause()
    panel._paused(True)
    panel.set_progress(IndexProgress(files_total=40, files_done=0, chunks_done=0, elapsed_s=1.0))
    card = " ".join(w.text() for w in (panel.progress_title, panel.progress_detail))
    assert panel.progress_title.text().startswith("Paused"), card
    assert card.lower().count("paused") == 1, card
    assert "0 of 40 files read" in card
    panel._paused(True)  # the pause itself, said before the next count
    card = " ".join(w.text() for w in (panel.progress_title, panel.progress_detail))
    assert card.lower().count("paused") == 1, card


def _source(n: int, heading: str) -> SourceView:
    return SourceView(
        n, n, "/docs/report.pdf", "Field report", "pdf", 2, None, "x", 0, 1,
        headings=("Field report", heading),
    )  # fmt: skip


def test_a_sections_own_number_is_not_read_as_the_sources(qtbot: Any, theme: Theme) -> None:
    sources = [
        _source(3, "3 Results"),
        _source(5, "2.1 Laptops and phones"),
        _source(6, "2024 Budget"),
    ]
    assert [s.label for s in sources] == [
        "Results (section 3)",
        "Laptops and phones (section 2.1)",
        "2024 Budget",
    ]
    view = TurnView(
        question="What were the results?", answer="…", mode="extractive", sources=sources
    )
    turn = TurnWidget(view, theme)
    qtbot.addWidget(turn)
    turn.show()
    listed = re.sub(r"<[^>]+>|&#8202;|&nbsp;", " ", turn.sources.text())
    assert not re.search(r"\b3\s+3 Results\b", listed), listed
    assert "Results (section 3)" in listed and "Laptops and phones (section" in listed

    found = SearchResultsWidget("results", theme)
    qtbot.addWidget(found)
    found.loading = False
    found.hits = sources
    found.refresh()
    qtbot.waitUntil(lambda: len(found.cards) == 3, timeout=5000)
    cards = " ".join(card.label.text() for card in found.cards)
    assert "Results (section 3)" in cards and "<b>3 Results" not in cards


@pytest.mark.slow
def test_an_answer_after_the_quote_says_unverified_once(
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
    assert "quoted_first" in [kind for kind, _ in turn.turn.warnings]
    said = " ".join(
        [turn.badge.text(), turn.answer.text(), *(text for _, text in shown_notes(turn))]
    )
    assert said.lower().count("unverified") == 1, said
    # Where the model's own text begins: that is where it is said.
    assert "The model's answer, unverified:" in turn.answer.text()
