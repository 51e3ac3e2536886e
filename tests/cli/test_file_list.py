"""The library's file list (issue 12): every file with its state, reason, pages, passages
and when it was last indexed, failed and skipped first; the same through `lectern files`
and in the desktop window (sort, filter, Retry). Real files, real model, real DuckDB."""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from core.config import Settings
from core.library import Library
from core.records import DocState, FileEntry, record_from_json, record_to_json
from tests.conftest import SAMPLE_DOCS
from tests.indexing.test_keyword_first import ObservedEmbedder, hold_until

GOOD_TXT = "expense-limits-note.txt"
GOOD_PDF = "security-policy.pdf"
BROKEN_PDF = "broken.pdf"
UNSUPPORTED = "budget.numbers"


def mixed_folder(root: Path) -> Path:
    """Two good files (one a PDF with pages), a damaged PDF and an unsupported file."""
    folder = root / "mixed"
    folder.mkdir()
    shutil.copy(SAMPLE_DOCS / GOOD_TXT, folder / GOOD_TXT)
    shutil.copy(SAMPLE_DOCS / GOOD_PDF, folder / GOOD_PDF)
    # A PDF header over bytes that are no PDF: the reader fails it as damaged.
    (folder / BROKEN_PDF).write_bytes(b"%PDF-1.7\n1 0 obj << /Type /Catalog broken\n" * 20)
    (folder / UNSUPPORTED).write_bytes(b"PK\x03\x04 not really a spreadsheet")
    return folder


def by_name(entries: list[FileEntry]) -> dict[str, FileEntry]:
    return {Path(e.path).name: e for e in entries}


def store_counts(library: Library, path: str) -> tuple[int, int, int]:
    """(pages, passages, embedded passages) as the store holds them for ``path``."""
    cur = library.db.cursor()
    row = cur.execute(
        """SELECT d.pages, count(c.id), count(c.embedding) FROM documents d
           LEFT JOIN chunks c ON c.document_id = d.id WHERE d.path = ? GROUP BY d.pages""",
        [path],
    ).fetchone()
    assert row is not None
    return int(row[0]), int(row[1]), int(row[2])


@pytest.fixture()
def mixed_library(library: Library, tmp_path: Path) -> tuple[Library, Path]:
    folder = mixed_folder(tmp_path)
    report = library.index([folder])
    assert (report.added, report.failed, report.skipped) == (2, 1, 1)
    return library, folder


# --- core ---------------------------------------------------------------------------------


def test_every_file_is_listed_failed_and_skipped_first_with_counts_from_the_store(
    mixed_library: tuple[Library, Path],
) -> None:
    library, folder = mixed_library
    before = time.time()
    entries = library.files.file_list()
    assert [Path(e.path).name for e in entries] == [
        BROKEN_PDF,
        UNSUPPORTED,
        GOOD_TXT,  # the rest by path
        GOOD_PDF,
    ]
    assert [e.status for e in entries] == ["failed", "skipped", "indexed", "indexed"]
    files = by_name(entries)
    assert "damaged" in files[BROKEN_PDF].reason.lower()
    assert "unsupported" in files[UNSUPPORTED].reason.lower()
    assert files[GOOD_TXT].reason == "" and files[GOOD_PDF].reason == ""
    for name in (GOOD_TXT, GOOD_PDF):
        entry = files[name]
        assert (entry.pages, entry.passages, entry.embedded) == store_counts(library, entry.path)
        assert entry.passages > 0 and entry.embedded == entry.passages
        assert entry.folder == str(folder) and entry.size == (folder / name).stat().st_size
        # Written moments ago: the time is read back in the right time zone.
        assert entry.indexed_at is not None and abs(entry.indexed_at - before) < 600
    assert files[GOOD_PDF].pages >= 1 and files[GOOD_PDF].type == "pdf"
    assert files[BROKEN_PDF].passages == 0 and files[UNSUPPORTED].passages == 0
    # Across the whole list, passages add up to the chunks the store holds.
    assert sum(e.passages for e in entries) == library.files.counts()[1]


def test_the_list_filters_by_state_and_folder(
    mixed_library: tuple[Library, Path], tmp_path: Path
) -> None:
    library, folder = mixed_library
    other = tmp_path / "other"
    other.mkdir()
    (other / "note.md").write_text("# Other\n\nA note about the lighthouse keeper's log.\n")
    library.index([other])
    assert [Path(e.path).name for e in library.files.file_list(status="failed")] == [BROKEN_PDF]
    assert [Path(e.path).name for e in library.files.file_list(status="skipped")] == [UNSUPPORTED]
    assert {Path(e.path).name for e in library.files.file_list(status="indexed")} == {
        GOOD_PDF,
        GOOD_TXT,
        "note.md",
    }
    assert [Path(e.path).name for e in library.files.file_list(folder=str(other))] == ["note.md"]
    assert len(library.files.file_list(folder=str(folder))) == 4
    # A retried file waits until it is read again.
    library.files.mark_pending(str(folder / BROKEN_PDF))
    waiting = library.files.file_list(status="waiting")
    assert [(Path(e.path).name, e.state) for e in waiting] == [(BROKEN_PDF, DocState.PENDING)]
    assert [e.status for e in library.files.file_list(folder=str(folder))][:2] == [
        "skipped",
        "waiting",
    ]
    with pytest.raises(ValueError):
        library.files.file_list(status="pending")  # the list's own words, not the column's


def test_passages_not_embedded_yet_show_as_keyword_only(
    lectern_home: Path, embedder: Any, tmp_path: Path
) -> None:
    folder = mixed_folder(tmp_path)
    seen: list[list[FileEntry]] = []
    library: Library

    def before_batch(n: int, texts: list[str]) -> None:
        # The model waits on its first batch while every file is written: nothing is
        # embedded yet.
        if n == 1:
            assert hold_until(lambda: len(library.files.file_list()) == 4)
            seen.append(library.files.file_list())

    library = Library(
        Settings(home=lectern_home), embedder=ObservedEmbedder(embedder, before_batch)
    )
    try:
        library.index([folder])
        early = by_name(seen[0])
        txt = early[GOOD_TXT]
        assert txt.state is DocState.INDEXED and txt.passages > 0 and txt.embedded == 0
        assert txt.status == "keyword only" and txt.keyword_only == txt.passages
        assert {Path(e.path).name for e in seen[0] if e.status == "keyword only"} == {
            GOOD_TXT,
            GOOD_PDF,
        }
        # Once the meaning pass has run, nothing is keyword only.
        after = by_name(library.files.file_list())
        assert after[GOOD_TXT].status == "indexed"
        assert after[GOOD_TXT].embedded == after[GOOD_TXT].passages == txt.passages
        assert library.files.file_list(status="keyword only") == []
    finally:
        library.close()


def test_the_record_round_trips_through_json(mixed_library: tuple[Library, Path]) -> None:
    library, _ = mixed_library
    entries = library.files.file_list()
    back = record_from_json(list[FileEntry], json.loads(json.dumps(record_to_json(entries))))
    assert back == entries


# --- the CLI ------------------------------------------------------------------------------


def test_lectern_files_lists_failed_first_and_filters(
    mixed_library: tuple[Library, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    from core.cli.main import main

    library, folder = mixed_library
    library.close()  # the command opens the library itself
    assert main(["files", "--json"]) == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert [Path(f["path"]).name for f in out["files"]] == [
        BROKEN_PDF,
        UNSUPPORTED,
        GOOD_TXT,
        GOOD_PDF,
    ]
    assert out["counts"] == {
        "failed": 1,
        "skipped": 1,
        "waiting": 0,
        "keyword only": 0,
        "indexed": 2,
    }
    assert main(["files", "--state", "failed"]) == 0
    text = capsys.readouterr().out
    assert BROKEN_PDF in text and GOOD_TXT not in text and "damaged" in text.lower()
    assert main(["files", "--folder", str(folder)]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[1].startswith("failed") and lines[2].startswith("skipped")
    assert lines[-1] == "4 files: 1 failed, 1 skipped, 2 indexed"


def test_the_list_comes_over_the_socket_while_another_process_holds_the_library(
    mixed_library: tuple[Library, Path], lectern_home: Path
) -> None:
    """What `lectern files` gets from the running app (core/ipc/), when it cannot open
    the library itself."""
    from core import ipc

    library, folder = mixed_library
    with ipc.serve(library):
        remote = ipc.connect(lectern_home)
        assert remote is not None
        assert remote.files.file_list() == library.files.file_list()
        skipped = remote.files.file_list(folder=str(folder), status="skipped")
        assert [Path(e.path).name for e in skipped] == [UNSUPPORTED]


# --- the desktop window -------------------------------------------------------------------

try:  # the window's fixtures (a real library, the model, no LLM server); they need pytest-qt
    from tests.desktop.test_window import (
        WAIT_INDEX_MS,
        open_window,  # noqa: F401 - a fixture
    )

    HAVE_QT = True
except pytest.skip.Exception:
    HAVE_QT, WAIT_INDEX_MS = False, 0

qt = pytest.mark.skipif(not HAVE_QT, reason="pytest-qt is not installed")


@pytest.fixture(scope="module")
def mixed_home(tmp_path_factory: pytest.TempPathFactory, embedder: Any) -> tuple[Path, Path]:
    """A library holding the mixed folder, indexed once per module: (home, folder)."""
    root = tmp_path_factory.mktemp("files")
    folder = mixed_folder(root)
    home = root / "home"
    home.mkdir()
    with Library(Settings(home=home), embedder=embedder) as lib:
        lib.index([folder])
    return home, folder


def open_file_list(qtbot: Any, window: Any, folder: str | None = None) -> Any:
    # The window catches up with the folders when it opens; let that run finish first.
    qtbot.waitUntil(lambda: window.backend.view.snapshot is not None, timeout=20_000)
    qtbot.waitUntil(lambda: not window.backend.indexing.active, timeout=WAIT_INDEX_MS)
    files = window.library.open_file_list(folder)
    qtbot.waitUntil(lambda: files.loaded, timeout=20_000)
    assert files.isVisible()
    return files


def shown(files: Any, column: int = 0) -> list[str]:
    model = files.model
    return [str(model.index(r, column).data()) for r in range(model.rowCount())]


def click_header(qtbot: Any, files: Any, column: int) -> None:
    from PySide6.QtCore import QPoint, Qt
    from PySide6.QtGui import QGuiApplication

    # Clicks apart, as a person makes them: two within the interval are a double click.
    qtbot.wait(QGuiApplication.styleHints().mouseDoubleClickInterval() + 50)
    header = files.table.horizontalHeader()
    x = header.sectionViewportPosition(column) + header.sectionSize(column) // 2
    qtbot.mouseClick(
        header.viewport(), Qt.MouseButton.LeftButton, pos=QPoint(x, header.height() // 2)
    )


@qt
@pytest.mark.slow
def test_the_window_lists_every_file_failed_first_and_filters_and_sorts(
    qtbot: Any, open_window: Callable[..., Any], mixed_home: tuple[Path, Path]
) -> None:
    from PySide6.QtCore import Qt

    from desktop.file_list import COL_DETAILS, COL_FOLDER, COL_PASSAGES, COL_STATE
    from tests.fake_ollama import unused_port

    home, folder = mixed_home
    window = open_window(url=f"http://127.0.0.1:{unused_port()}", copy_from=home)
    files = open_file_list(qtbot, window)
    assert shown(files) == [BROKEN_PDF, UNSUPPORTED, GOOD_TXT, GOOD_PDF]
    assert shown(files, COL_STATE) == ["Failed", "Skipped", "Indexed", "Indexed"]
    assert set(shown(files, COL_FOLDER)) == {"mixed"}
    assert "4 files · 1 failed · 1 skipped" in files.summary.text()
    # The state in words and in the theme's colour; the reason in the row and its tip.
    palette = window.theme.palette
    failed = files.model.index(0, COL_STATE)
    assert failed.data(Qt.ItemDataRole.ForegroundRole).name() == palette.error_text.lower()
    assert files.model.index(2, COL_STATE).data(Qt.ItemDataRole.ForegroundRole).name() == (
        palette.success.lower()
    )
    assert "damaged" in shown(files, COL_DETAILS)[0].lower()
    tip = str(failed.data(Qt.ItemDataRole.ToolTipRole))
    assert "damaged" in tip.lower() and "Re-export" in tip  # the next step, not just the fault
    # Passages as the library counts them.
    expected = {
        Path(e.path).name: e.passages for e in window.backend.startup.library.files.file_list()
    }
    assert dict(zip(shown(files), shown(files, COL_PASSAGES), strict=True)) == {
        BROKEN_PDF: "—",
        UNSUPPORTED: "—",
        GOOD_TXT: str(expected[GOOD_TXT]),
        GOOD_PDF: str(expected[GOOD_PDF]),
    }
    # Selecting the failed file shows its reason on the details line.
    files.table.selectRow(0)
    assert "damaged" in files.details.text().lower() and files.retry_button.isEnabled()
    files.table.selectRow(2)
    assert not files.retry_button.isEnabled()

    # The filter box and the state filter.
    files.filter_edit.setText("security")
    qtbot.waitUntil(lambda: shown(files) == [GOOD_PDF], timeout=5_000)
    assert "1 of 4 files" in files.summary.text()
    files.filter_edit.setText("")
    files.set_state_filter("Skipped")
    assert shown(files) == [UNSUPPORTED]
    files.set_state_filter("Indexed")
    assert shown(files) == [GOOD_TXT, GOOD_PDF]
    files.set_state_filter("All states")

    # Sorting by any column from its header; files with no passages sort as fewest.
    click_header(qtbot, files, COL_PASSAGES)
    counts = [expected[n] if n in (GOOD_TXT, GOOD_PDF) else -1 for n in shown(files)]
    assert counts == sorted(counts) and shown(files)[-1] in (GOOD_TXT, GOOD_PDF)
    click_header(qtbot, files, COL_PASSAGES)
    counts = [expected[n] if n in (GOOD_TXT, GOOD_PDF) else -1 for n in shown(files)]
    assert counts == sorted(counts, reverse=True)
    order = shown(files)

    # A refresh keeps the order and the selection.
    at = order.index(GOOD_PDF)
    files.table.selectRow(at)
    loads = files.loads
    files.reload()
    qtbot.waitUntil(lambda: files.loads > loads, timeout=20_000)
    assert shown(files) == order
    assert [Path(p).name for p in files.selected_paths()] == [GOOD_PDF]
    header = files.table.horizontalHeader()
    assert header.sortIndicatorSection() == COL_PASSAGES

    # "Show files" on a folder row lists that folder's files.
    files.close()
    files = window.library.open_file_list(str(folder))
    assert files.folder_box.currentData() == str(folder) and len(shown(files)) == 4
    # "Files…" in the library panel and View › Library Files… open it for every folder.
    files.close()
    window.library.files_button.click()
    assert files.isVisible() and files.folder_box.currentData() is None
    files.close()
    window.files_action.trigger()
    assert files.isVisible() and len(shown(files)) == 4


def finish_before_the_caller_goes_on(backend: Any) -> None:
    """Each read the window starts ends before the window's thread runs its next line, as
    when a busy machine leaves that thread off the CPU while a worker reads the list
    (CI's run of 2026-12-07 hung there): a slot connected after the start never runs."""
    submit = backend.background.submit

    def submit_and_wait(*args: Any, **kwargs: Any) -> Any:
        task = submit(*args, **kwargs)
        task.done.wait(30)
        time.sleep(0.05)  # past the worker's last signal, sent after ``done``
        return task

    backend.background.submit = submit_and_wait


@qt
@pytest.mark.slow
@pytest.mark.parametrize("reads_end_first", [False, True], ids=["as-usual", "reads-end-first"])
def test_retry_on_a_failed_row_queues_it_and_the_list_follows(
    qtbot: Any,
    open_window: Callable[..., Any],
    embedder: Any,
    tmp_path: Path,
    reads_end_first: bool,
) -> None:
    from desktop.file_list import COL_STATE
    from tests.fake_ollama import unused_port

    folder = mixed_folder(tmp_path)
    home = tmp_path / "home"
    home.mkdir()
    with Library(Settings(home=home), embedder=embedder) as lib:
        lib.index([folder])
    window = open_window(url=f"http://127.0.0.1:{unused_port()}", home=home)
    if reads_end_first:
        finish_before_the_caller_goes_on(window.backend)
    files = open_file_list(qtbot, window)
    assert shown(files)[0] == BROKEN_PDF
    # The person fixes the file, then retries it from the list.
    shutil.copy(SAMPLE_DOCS / GOOD_PDF, folder / BROKEN_PDF)
    files.table.selectRow(0)
    with qtbot.waitSignal(window.backend.indexing.started, timeout=10_000) as started:
        files.retry_button.click()
    job = started.args[0]
    assert job.retry and job.files == [str(folder / BROKEN_PDF)]
    # The row says so at once, and shows the new state once the library has read it.
    row = files.model.row_of(str(folder / BROKEN_PDF))
    assert files.model.rows[row].status in ("waiting", "indexed")

    def state_of(name: str) -> str:
        for r in range(files.model.rowCount()):
            if files.model.index(r, 0).data() == name:
                return str(files.model.index(r, COL_STATE).data())
        return ""

    qtbot.waitUntil(lambda: state_of(BROKEN_PDF) == "Indexed", timeout=WAIT_INDEX_MS)
    assert "failed" not in files.summary.text()
    assert shown(files)[0] == UNSUPPORTED  # skipped files now come first
