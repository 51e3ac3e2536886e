"""The file list follows the library's real state after a retry (issue 46: a retried file
stayed "Waiting" in the list, even reopened, while `lectern files` said failed).

A retry marks the file waiting, reads it, and marks it failed again: the library's counts
end where they began, so a list read while the file waited must not take the unchanged
counts for "nothing changed". Real model and library; the file is a damaged Word file.
"""

from __future__ import annotations

import shutil
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pytestqt")

from desktop.file_list import FileListWindow
from desktop.main_window import MainWindow
from tests.conftest import SAMPLE_DOCS
from tests.desktop import test_window as base
from tests.fake_ollama import unused_port

pytestmark = pytest.mark.slow

open_window = base.open_window


def _state(files: FileListWindow, path: Path) -> str:
    row = files.model.row_of(str(path))
    assert row >= 0
    return files.model.rows[row].status


def test_a_retried_file_that_fails_again_is_listed_failed_not_waiting(
    qtbot: Any, open_window: Callable[..., MainWindow], tmp_path: Path
) -> None:
    folder = tmp_path / "mixed"
    folder.mkdir()
    shutil.copy(SAMPLE_DOCS / "expense-limits-note.txt", folder)
    damaged = folder / "minutes.docx"
    with zipfile.ZipFile(damaged, "w") as package:
        package.writestr("notes.txt", "not a Word document")
    window = open_window(url=f"http://127.0.0.1:{unused_port()}")
    base.drop(window, folder)
    base.wait_indexed(qtbot, window, files=2)
    backend = window.backend

    files = window.library.open_file_list()
    assert isinstance(files, FileListWindow)
    qtbot.waitUntil(lambda: files.loaded, timeout=20_000)
    assert _state(files, damaged) == "failed"

    # What a cancel and resume gave: the list read again (a snapshot of the resumed pass
    # arriving) just as the retry had marked the file waiting, before it failed again.
    marked: list[bool] = []
    library = backend.startup.library
    assert library is not None
    backend.background.submit(
        lambda _ctx: library.files.mark_pending(str(damaged)),
        on_result=lambda _r: marked.append(True),
    )
    qtbot.waitUntil(lambda: bool(marked), timeout=10_000)
    loads = files.loads
    files.reload()
    qtbot.waitUntil(lambda: files.loads > loads, timeout=20_000)
    assert _state(files, damaged) == "waiting"

    with qtbot.waitSignal(backend.indexing.finished, timeout=60_000):
        backend.indexing.retry([str(damaged)])
    qtbot.waitUntil(
        lambda: not backend.indexing.active and not backend.view._refreshing, timeout=20_000
    )
    qtbot.waitUntil(lambda: _state(files, damaged) == "failed", timeout=10_000)

    # Closed and opened again, it still says what the library says.
    files.close()
    again = window.library.open_file_list()
    assert isinstance(again, FileListWindow)
    qtbot.wait(300)
    assert _state(again, damaged) == "failed"
    again.close()
