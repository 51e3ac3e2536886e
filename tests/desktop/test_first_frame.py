"""The window's first frame shows the library as the last session left it even when a
folder has failed and skipped files (issue 45): the saved view's documents came back
with their state as text, the panel failed on ``state.value`` and showed "No folders
yet" beside a card counting the folders. Offscreen, a real library and model."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pytestqt")

from core.config import Settings
from core.library import Library
from desktop.library_panel import ROLE_KIND
from tests.cli.test_file_list import mixed_folder
from tests.desktop import test_start_and_quit as startup
from tests.desktop.test_start_and_quit import WAIT_MS, Made, folders_listed

make_window = startup.make_window  # the window as the app makes it (a fixture)


@pytest.fixture
def home(tmp_path: Path, embedder: Any, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, str]:
    """A library of one folder with a failed and a skipped file: (home, folder)."""
    folder = mixed_folder(tmp_path)
    home = tmp_path / "home"
    home.mkdir()
    with Library(Settings(home=home), embedder=embedder) as lib:
        report = lib.index([folder])
    assert (report.failed, report.skipped) == (1, 1)
    monkeypatch.setenv("LECTERN_HOME", str(home))
    monkeypatch.delenv("OLLAMA_HOST", raising=False)
    return home, str(folder)


def groups(window: Any) -> list[str]:
    """The kinds of the rows under the first folder: its failed and skipped files."""
    item = window.library.tree.topLevelItem(0)
    return [item.child(i).data(0, ROLE_KIND) for i in range(item.childCount())]


def test_first_frame_shows_folders_with_failed_and_skipped_files(
    qtbot: Any, home: tuple[Path, str], make_window: Callable[[Path], Made]
) -> None:
    path, folder = home
    # The first session keeps the library as it shows it, its problems included.
    window, backend, held = make_window(path)
    held.release()
    backend.start()
    qtbot.waitUntil(
        lambda: (
            backend.view.snapshot is not None
            and not backend.view.snapshot.saved
            and bool(backend.view.snapshot.problems.get(folder))
        ),
        timeout=WAIT_MS,
    )
    window.close()

    # The next start, before the library opens: the first frame.
    window, backend, held = make_window(path)
    assert backend.startup.library is None and backend.view.snapshot is not None
    assert folders_listed(window) == [folder]
    assert window.library.empty.isHidden()  # no "No folders yet"
    assert groups(window) == ["group-failed", "group-skipped"]
    window.grab()
    assert folders_listed(window) == [folder] and window.library.empty.isHidden()
