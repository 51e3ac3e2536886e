"""Exact words (issue 46): a result's snippet lights the words the keyword index matched
in it, as the index matched them: stemmed in the passage's own language ("Mitarbeitern"
for "Mitarbeiter", "reimbursed" for "reimbursement"), and never the passage language's
stop words ("die", "der", "ist"), which no longer match a German passage either. The
evidence panel lights the same words.

The window over a real library, real model and DuckDB.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pytestqt")

from PySide6.QtCore import Qt

from core.config import Settings
from desktop.main_window import MainWindow
from desktop.search_results import SearchResultsWidget
from tests.desktop import test_window as base

pytestmark = pytest.mark.slow

open_window = base.open_window

FILES = {
    "kuendigung.txt": (
        "Kündigung des Arbeitsvertrags\n\n"
        "Die Kündigungsfrist für Mitarbeitern ist in der Regel vier Wochen zum Monatsende. "
        "Die Frist gilt für beide Seiten, und die Kündigung muss schriftlich erfolgen.\n"
    ),
    "urlaub.txt": (
        "Urlaub\n\nDer Urlaub beträgt dreißig Tage im Jahr. Nicht genommener Urlaub "
        "verfällt am Ende des Jahres, wenn er nicht übertragen wird.\n"
    ),
    "expenses.txt": (
        "Expenses\n\nTravel expenses are reimbursed within ten days of the claim, once the "
        "receipts are attached.\n"
    ),
    "garden.txt": "Garden notes\n\nWithout water the seedlings die within a week.\n",
}


@pytest.fixture(scope="module")
def library_home(tmp_path_factory: pytest.TempPathFactory, embedder: object) -> Path:
    from core.library import Library

    base_dir = tmp_path_factory.mktemp("exact")
    folder = base_dir / "docs"
    folder.mkdir()
    for name, text in FILES.items():
        (folder / name).write_text(text, encoding="utf-8")
    home = base_dir / "home"
    home.mkdir()
    with Library(Settings(home=home), embedder=embedder) as lib:  # type: ignore[arg-type]
        lib.index([folder])
    return home


def search(qtbot: Any, window: MainWindow, words: str) -> SearchResultsWidget:
    panel = window.conversation
    qtbot.keyClick(window, Qt.Key.Key_2, Qt.KeyboardModifier.ControlModifier)
    assert panel.search_only and panel.search_view.words_only  # Exact words
    panel.input.setPlainText(words)
    qtbot.keyClick(panel.input, Qt.Key.Key_Return)
    results = panel.search_results
    assert results is not None
    qtbot.waitUntil(lambda: not results.loading, timeout=20_000)
    qtbot.waitUntil(lambda: len(results.cards) == len(results.hits), timeout=5_000)
    return results


def lit(html: str) -> list[str]:
    return re.findall(r'<span style="background-color:[^"]*">([^<]*)</span>', html)


def test_snippets_light_the_words_matched_in_the_passage_s_language(
    qtbot: Any, open_window: Callable[..., MainWindow], library_home: Path, tmp_path: Path
) -> None:
    home = tmp_path / "home"
    shutil.copytree(library_home, home)
    window = open_window(home=home)

    results = search(qtbot, window, "die Mitarbeiter Kündigung")
    # "die" finds neither the holiday notes nor the garden's seedlings that die.
    assert [Path(h.path).name for h in results.hits] == ["kuendigung.txt"]
    shown = lit(results.cards[0].label.text())
    assert "Mitarbeitern" in shown and "Kündigung" in shown
    assert not {"die", "Die", "der", "ist"} & set(shown)
    # The evidence panel lights the same words in the passage.
    results.cards[0].clicked.emit()
    qtbot.waitUntil(lambda: window.evidence.mode == "text", timeout=20_000)
    assert set(window.evidence.highlighted_text()) == {"Mitarbeitern", "Kündigung"}

    results = search(qtbot, window, "reimbursement")
    assert [Path(h.path).name for h in results.hits] == ["expenses.txt"]
    assert lit(results.cards[0].label.text()) == ["reimbursed"]
