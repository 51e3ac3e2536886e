"""One account of indexing in the window: paused on the library card is paused in the
status bar and in the file list, with nothing moving (real model, real library)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pytestqt")

from desktop.main_window import MainWindow
from tests.desktop import test_window as base
from tests.fake_ollama import unused_port

pytestmark = pytest.mark.slow

open_window = base.open_window

FILES = 60


def _folder(root: Path) -> Path:
    root.mkdir()
    for i in range(FILES):
        (root / f"note-{i:02d}.txt").write_text(
            f"Note {i}. The boiler in block {i} is serviced every October by an engineer, "
            f"and the tenants of floor {i % 7} are told two weeks before the visit.\n" * 4,
            encoding="utf-8",
        )
    return root


def _still(window: MainWindow) -> None:
    """Card, status bar and file list all say paused, and no bar moves."""
    card = window.library
    assert card.progress_card.isVisible()
    assert card.progress_title.text().startswith("Paused"), card.progress_title.text()
    assert card.progress_bar.maximum() > 0  # a still bar, not the busy animation
    assert window.phase_label.text().startswith("Indexing paused"), window.phase_label.text()
    assert not window.phase_busy.isVisible()


def _paused_at_start(
    qtbot: Any, open_window: Callable[..., MainWindow], tmp_path: Path
) -> MainWindow:
    """A window indexing a folder of notes, paused the moment the run starts (as a person
    pressing Pause would a little later)."""
    window = open_window(url=f"http://127.0.0.1:{unused_port()}")
    card = window.library
    window.backend.indexing.started.connect(
        lambda _job: card.pause_button.click() if not window.backend.indexing.paused else None
    )
    base.drop(window, _folder(tmp_path / "notes"))
    qtbot.waitUntil(
        lambda: window.backend.indexing.paused and card.progress_card.isVisible(), timeout=20_000
    )
    return window


def test_paused_on_the_card_is_paused_in_the_status_bar_with_nothing_moving(
    qtbot: Any, open_window: Callable[..., MainWindow], tmp_path: Path
) -> None:
    window = _paused_at_start(qtbot, open_window, tmp_path)
    card = window.library
    _still(window)
    # Reports still arriving from the file being read when Pause came change nothing.
    qtbot.wait(1500)
    _still(window)
    files = card.open_file_list()
    qtbot.waitUntil(lambda: files.loaded, timeout=20_000)
    # Not "No files yet: add a folder" while one is being indexed: paused, as the card says.
    assert files.summary.text().endswith("indexing paused"), files.summary.text()
    assert "add a folder" not in files.summary.text()
    files.close()

    card.pause_button.click()  # resume
    assert not window.backend.indexing.paused
    assert not card.progress_title.text().startswith("Paused")
    assert window.phase_label.text().startswith("Indexing…")
    assert window.phase_busy.isVisible()
    base.wait_indexed(qtbot, window, files=FILES)
    qtbot.waitUntil(lambda: window.phase_label.text().startswith("Ready"), timeout=20_000)
    assert not window.phase_busy.isVisible() and not card.progress_card.isVisible()


def test_a_folder_added_while_paused_is_said_to_wait_for_resume(
    qtbot: Any, open_window: Callable[..., MainWindow], tmp_path: Path
) -> None:
    window = _paused_at_start(qtbot, open_window, tmp_path)
    later = tmp_path / "later"
    later.mkdir()
    (later / "plan.txt").write_text("The roof is repaired in May.\n", encoding="utf-8")
    base.drop(window, later)
    # Not "Adding later to your library…" beside "Indexing paused".
    notice = window.notice_label.text()
    assert "Adding" not in notice and "paused" in notice and "resume" in notice, notice
    _still(window)
