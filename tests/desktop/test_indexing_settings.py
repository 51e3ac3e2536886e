"""Settings > Indexing in the desktop app: the choice is saved, restored and applied to
the running library at once, and the progress card says why indexing waits."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pytestqt")

from core.records import IndexProgress
from desktop.main_window import MainWindow
from tests.desktop import test_window as base
from tests.fake_ollama import unused_port
from tests.indexing.test_throttle import (  # noqa: F401 - burners is a fixture
    _folder,
    _wait_busy,
    burners,
    carries_on,
)

pytestmark = pytest.mark.slow

open_window = base.open_window


def _choose(dialog: Any, when: str, share: int | None = None) -> None:
    dialog.index_when.setCurrentIndex(dialog.index_when.findData(when))
    if share is not None:
        dialog.cpu_share.setValue(share)


def test_the_indexing_choice_is_saved_restored_and_applied_at_once(
    qtbot: Any, open_window: Callable[..., MainWindow]
) -> None:
    window = open_window(url=f"http://127.0.0.1:{unused_port()}")
    backend = window.backend
    dialog = window.open_settings()
    assert dialog.index_when.currentData() == "always"
    assert not dialog.cpu_share.isEnabled()
    _choose(dialog, "share", 25)
    assert dialog.cpu_share.isEnabled()
    assert "all" in dialog.index_note.text() and "cores" in dialog.index_note.text()
    dialog.accept()
    qtbot.waitUntil(lambda: window.settings_dialog is None, timeout=5_000)

    assert (backend.settings.index_when, backend.settings.index_cpu_share) == ("share", 25)
    saved = json.loads(backend.settings.settings_path.read_text())
    assert (saved["index_when"], saved["index_cpu_share"]) == ("share", 25)
    assert backend.startup.library is not None
    throttle = backend.startup.library.indexer.throttle
    assert (throttle.mode, throttle.cpu_share) == ("share", 25)
    # The progress card says why indexing goes slower.
    window.library.set_progress(IndexProgress(files_total=9, files_done=2, chunks_done=0))
    assert "at most 25 % of the CPU" in window.library.progress_detail.text()

    dialog = window.open_settings()
    assert dialog.index_when.currentData() == "share"
    assert dialog.cpu_share.value() == 25
    _choose(dialog, "idle")
    assert "other programs" in dialog.index_note.text()
    dialog.accept()
    qtbot.waitUntil(lambda: window.settings_dialog is None, timeout=5_000)
    assert throttle.mode == "idle"

    dialog = window.open_settings()
    assert dialog.index_when.currentData() == "idle"
    dialog.reject()


def test_the_dialog_changes_the_one_settings_the_library_reads(
    qtbot: Any, open_window: Callable[..., MainWindow]
) -> None:
    """No copy kept in step: what the dialog saves is the object the open library reads."""
    window = open_window(url=f"http://127.0.0.1:{unused_port()}")
    backend, library = window.backend, window.backend.startup.library
    assert library is not None and library.settings_store is backend.settings_store
    dialog = window.open_settings()
    dialog.top_k.setValue(4)
    _choose(dialog, "idle")
    dialog.accept()
    qtbot.waitUntil(lambda: window.settings_dialog is None, timeout=5_000)
    assert library.settings is backend.settings
    assert (library.settings.top_k, library.settings.index_when) == (4, "idle")
    assert library.indexer.throttle.mode == "idle"


def test_the_progress_card_says_indexing_waits_for_the_computer(
    qtbot: Any,
    open_window: Callable[..., MainWindow],
    tmp_path: Path,
    burners: Callable[[], None],  # noqa: F811
) -> None:
    window = open_window(url=f"http://127.0.0.1:{unused_port()}")
    backend, panel = window.backend, window.library
    backend.apply_settings(backend.settings.with_changes(index_when="idle"))
    assert backend.startup.library is not None
    throttle = backend.startup.library.indexer.throttle
    # Others must hold half the machine, not nine tenths: once the run starts, this
    # process (its parser, the window, and in a full suite the threads earlier tests left)
    # takes its turn beside the burners, and above a tenth of the CPU the computer looked
    # idle, the run went on and "Waiting" never came (twice in full runs, never alone).
    throttle.idle_threshold = 0.5
    throttle.idle_window_s = 0.5
    throttle.idle_recheck_s = 0.5
    _wait_busy(throttle)
    folder = _folder(tmp_path)
    backend.indexing.add_folders([str(folder)])
    try:
        qtbot.waitUntil(lambda: panel.progress_title.text().startswith("Waiting"), timeout=60_000)
    except qtbot.TimeoutError:
        pytest.fail(
            f"the card says {panel.progress_title.text()!r} / {panel.progress_detail.text()!r};"
            f" the throttle is waiting: {throttle.waiting!r}, active: {backend.indexing.active}"
        )
    assert panel.progress_detail.text() == (
        "Waiting · the computer is busy; indexing resumes when it is idle"
    )
    assert panel.progress_card.isVisible()
    burners()
    carries_on(throttle, lambda: (qtbot.wait(50), not backend.indexing.active)[1])
    assert not panel.progress_detail.text().startswith("Waiting")
