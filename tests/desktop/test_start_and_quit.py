"""The app's start and quit (issues 30 and 33), offscreen, on a real library and model.

- A reopen shows the library in the window's first frame, not the first-run screen.
- While the model loads, the library is searchable: the Search tab lists passages and a
  question gets a quoted answer, both ranked by keyword, with no model loaded.
- Quitting while the model loads closes the library cleanly and does not wait for it.

"The model is still loading" is made certain rather than hoped for: the engine's one
thread (where the model loads) is held by a task of the test's until it is let go, so
the model's load waits behind it exactly as it would behind a slow disk.
"""

from __future__ import annotations

import shutil
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import duckdb
import pytest

pytest.importorskip("pytestqt")

from PySide6.QtCore import QSettings, Qt

from core.config import Settings
from core.errors import ModelNotReadyError
from core.library import Library
from desktop.backend import Backend
from desktop.library_panel import ROLE_PATH
from desktop.library_view import SAVED_SNAPSHOT, read_saved_snapshot
from desktop.main_window import MainWindow
from desktop.theme import Theme
from tests.conftest import SAMPLE_DOCS

WAIT_MS = 60_000


@pytest.fixture(scope="module")
def indexed(tmp_path_factory: pytest.TempPathFactory, embedder: Any) -> tuple[Path, Path]:
    """The sample documents indexed: (home, folder); each test opens a copy of home."""
    base = tmp_path_factory.mktemp("startup")
    folder = base / "docs"
    shutil.copytree(SAMPLE_DOCS, folder)
    home = base / "home"
    home.mkdir()
    with Library(Settings(home=home), embedder=embedder) as lib:
        lib.index([folder])
    return home, folder


@pytest.fixture
def home(indexed: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    copy = tmp_path / "home"
    shutil.copytree(indexed[0], copy)
    monkeypatch.setenv("LECTERN_HOME", str(copy))
    monkeypatch.delenv("OLLAMA_HOST", raising=False)
    return copy


class Held:
    """A task of the test's on the engine's one thread: the model's load queues behind
    it until ``release``."""

    def __init__(self, backend: Backend) -> None:
        self.gate = threading.Event()
        backend.engine.submit(lambda ctx: self.gate.wait(WAIT_MS / 1000), name="held")

    def release(self) -> None:
        self.gate.set()


Made = tuple[MainWindow, Backend, Held]


@pytest.fixture
def make_window(qtbot: Any, tmp_path: Path, embedder: Any) -> Iterator[Callable[[Path], Made]]:
    """A window as ``python -m desktop`` makes it, its model loaded the app's way
    (``load_embedder`` in the background: the session's model, shared, makes it quick),
    held until the test releases it."""
    made: list[Made] = []

    def make(home: Path) -> Made:
        theme = Theme("light")
        theme.apply()
        backend = Backend(Settings(home=home), watch=False)
        qsettings = QSettings(str(tmp_path / "ui.ini"), QSettings.Format.IniFormat)
        window = MainWindow(backend, theme, qsettings)
        held = Held(backend)
        made.append((window, backend, held))
        backend.view.show_saved()
        window.show()
        return window, backend, held

    yield make
    for window, backend, held in made:
        held.release()
        window.close()
        backend.engine.wait(WAIT_MS)


def folders_listed(window: MainWindow) -> list[str]:
    tree = window.library.tree
    return [
        tree.topLevelItem(i).data(0, ROLE_PATH)  # type: ignore[union-attr]
        for i in range(tree.topLevelItemCount())
    ]


def test_a_reopen_shows_the_library_in_the_first_frame(
    qtbot: Any, home: Path, indexed: tuple[Path, Path], make_window: Callable[[Path], Made]
) -> None:
    folder = str(indexed[1])
    # The first session: the library as it shows it is kept for the next start.
    window, backend, held = make_window(home)
    held.release()
    backend.start()
    qtbot.waitUntil(lambda: backend.is_ready, timeout=WAIT_MS)
    qtbot.waitUntil(
        lambda: backend.view.snapshot is not None and bool(backend.view.snapshot.folders),
        timeout=WAIT_MS,
    )
    window.close()

    # The next start, before the library is even opened: what the first frame shows.
    window, backend, held = make_window(home)
    assert backend.startup.library is None
    panel = window.library
    assert folders_listed(window) == [folder]
    assert panel.empty.isHidden()  # no "No folders yet"
    assert window.conversation.welcome.title.text() != "Welcome to Lectern"
    window.grab()  # the first paint leaves it so
    assert folders_listed(window) == [folder] and panel.empty.isHidden()

    # Then the open library's own snapshot replaces it.
    held.release()
    backend.start()
    qtbot.waitUntil(
        lambda: backend.view.snapshot is not None and not backend.view.snapshot.saved,
        timeout=WAIT_MS,
    )
    assert [f.path for f in backend.view.snapshot.folders] == [folder]
    assert folders_listed(window) == [folder]


def test_a_damaged_saved_view_is_ignored(tmp_path: Path) -> None:
    path = tmp_path / SAVED_SNAPSHOT
    assert read_saved_snapshot(path) is None  # none yet
    path.write_text('{"folders": [{"path": 1}]}', encoding="utf-8")
    assert read_saved_snapshot(path) is None
    path.write_text("not json", encoding="utf-8")
    assert read_saved_snapshot(path) is None


def test_the_library_is_searchable_and_answers_before_the_model_is_loaded(
    qtbot: Any, home: Path, make_window: Callable[[Path], Made]
) -> None:
    window, backend, held = make_window(home)
    backend.start()
    qtbot.waitUntil(lambda: backend.is_open, timeout=WAIT_MS)
    assert not backend.is_ready and backend.startup.phase == "loading_model"
    library = backend.startup.library
    assert library is not None and not library.model_loaded

    # The Search tab, by words and meaning: ranked by keyword for now.
    panel = window.conversation
    panel.set_search_mode(True)
    panel.search_view.set_words_only(False)
    panel.input.setPlainText("mileage for a private car")
    qtbot.keyClick(panel.input, Qt.Key.Key_Return)
    qtbot.waitUntil(
        lambda: (
            panel.search_results is not None and bool(panel.search_results.hits) and not panel.busy
        ),
        timeout=WAIT_MS,
    )
    searched = panel.search_results
    assert searched is not None and not searched.words_only
    # By keyword: every passage holds one of the words (meaning would add others).
    assert all(
        any(word in h.text.lower() for word in ("mileage", "private", "car")) for h in searched.hits
    )

    # A question: the answer quoted from the documents, its sources cited.
    panel.set_search_mode(False)
    panel.input.setPlainText("How is mileage for a private car reimbursed?")
    qtbot.keyClick(panel.input, Qt.Key.Key_Return)
    turn = panel.last_turn()
    assert turn is not None
    qtbot.waitUntil(lambda: not panel.busy and not turn.turn.streaming, timeout=WAIT_MS)
    assert turn.turn.mode == "extractive" and "0.30" in turn.turn.answer
    assert turn.turn.citations
    # All of it without the model, and without waiting for it.
    assert not library.model_loaded and not backend.is_ready
    with pytest.raises(ModelNotReadyError):
        library.embedder  # noqa: B018

    # The model comes in: Ready, and the search shown is made again with meaning.
    panel.set_search_mode(True)
    held.release()
    qtbot.waitUntil(lambda: backend.is_ready, timeout=WAIT_MS)
    assert library.model_loaded
    qtbot.waitUntil(
        lambda: (
            panel.search_results is not searched
            and panel.search_results is not None
            and bool(panel.search_results.hits)
        ),
        timeout=WAIT_MS,
    )


def test_quitting_while_the_model_loads_closes_the_library_and_does_not_wait(
    qtbot: Any, home: Path, make_window: Callable[[Path], Made]
) -> None:
    window, backend, _held = make_window(home)
    backend.start()
    qtbot.waitUntil(lambda: backend.is_open, timeout=WAIT_MS)
    library = backend.startup.library
    assert library is not None
    window.close()  # the model's load has not even begun: it is held
    # The record is closed cleanly (checkpointed: no log left to replay) ...
    assert backend.startup.library is None
    with pytest.raises(duckdb.Error):
        library.db.cursor().execute("SELECT 1")
    assert not Path(str(library.settings.db_path) + ".wal").exists()
    # ... and the process is told not to wait for the load (python -m desktop exits).
    assert backend.abandoned


def test_a_library_that_defers_its_model_ranks_by_keyword_until_it_comes(
    home: Path, embedder: Any
) -> None:
    with Library(Settings(home=home), defer_model=True) as lib:
        hybrid = lib.search("mileage for a private car", k=5)
        assert not lib.model_loaded
        assert [h.chunk_id for h in hybrid] == [
            h.chunk_id for h in lib.search("mileage for a private car", k=5, mode="bm25")
        ]
        with pytest.raises(ModelNotReadyError):
            lib.embedder  # noqa: B018
        assert lib.adopt_embedder(embedder)
        assert lib.embedder is embedder
        assert lib.search("mileage for a private car", k=5)
