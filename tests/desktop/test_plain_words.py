"""One vocabulary for people in the window: no exception names, model ids, benchmark
figures, settings file names, command options or commands in what it shows, in the states
a walk-through found them (a failed file's details, the language offer, a model switch,
the library check's progress and verdict, Settings). They are a click away, in a Details
fold, which is the one place the walk skips. Real model and library; only the LLM server
is faked."""

from __future__ import annotations

import re
import shutil
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pytestqt")

from PySide6.QtCore import QModelIndex, Qt
from PySide6.QtWidgets import (
    QAbstractButton,
    QAbstractItemView,
    QComboBox,
    QLabel,
    QLineEdit,
    QTreeWidget,
    QTreeWidgetItem,
    QWidget,
)

from core.embedding.models import DEFAULT_MODEL_ID, MULTILINGUAL_MODEL_ID
from desktop.file_list import FileListWindow
from desktop.main_window import MainWindow
from desktop.widgets import DetailsFold, inside_details
from tests.conftest import SAMPLE_DOCS
from tests.desktop import test_window as base
from tests.desktop.test_language_offer import _folder as languages_folder
from tests.desktop.test_library_check_dialog import _report
from tests.fake_ollama import FakeOllama, unused_port

pytestmark = pytest.mark.slow

open_window = base.open_window

TECHNICAL = {
    "an exception name": re.compile(r"\b\w+(?:Error|Exception)\b"),
    "a command option": re.compile(r"(?<![\w-])--[a-z]"),
    "a settings file": re.compile(r"settings\.json"),
    # sentence-transformers/all-MiniLM-L6-v2; not a path's /tmp/pytest-of-me/ parts.
    "a model id": re.compile(r"(?<![\w/.~:-])[A-Za-z][\w.-]*/[\w.-]*-[\w.-]+(?![\w/])"),
    "a benchmark figure": re.compile(r"\b\d\.\d\d\b"),
    "a command": re.compile(r"`lectern|\blectern (?:index|watch|status|eval|check)\b"),
}


def _item_texts(item: QTreeWidgetItem) -> Iterator[str]:
    yield item.text(0)
    yield item.toolTip(0)
    for i in range(item.childCount()):
        child = item.child(i)
        if child is not None:
            yield from _item_texts(child)


def _view_texts(view: QAbstractItemView) -> Iterator[str]:
    model = view.model()
    if model is None:
        return
    for row in range(model.rowCount(QModelIndex())):
        for column in range(model.columnCount(QModelIndex())):
            index = model.index(row, column, QModelIndex())
            for role in (Qt.ItemDataRole.DisplayRole, Qt.ItemDataRole.ToolTipRole):
                value = model.data(index, role)
                if value:
                    yield str(value)


def shown_texts(top: QWidget) -> list[tuple[str, str]]:
    """Every text ``top`` shows (or shows on hovering), with where: labels, buttons,
    fields, lists, tables and tooltips of the visible widgets outside Details folds."""
    found: list[tuple[str, str]] = [("title", top.windowTitle())]
    for widget in [top, *top.findChildren(QWidget)]:
        if (not widget.isVisibleTo(top) and widget is not top) or inside_details(widget):
            continue
        where = widget.objectName() or type(widget).__name__
        texts = [widget.toolTip(), widget.accessibleName()]
        if isinstance(widget, QLabel):
            texts.append(re.sub(r"<[^>]+>", "", widget.text()))
        elif isinstance(widget, QAbstractButton):
            texts.append(widget.text())
        elif isinstance(widget, QLineEdit):
            texts += [widget.text(), widget.placeholderText()]
        elif isinstance(widget, QComboBox):
            texts += [widget.itemText(i) for i in range(widget.count())]
        if isinstance(widget, QTreeWidget):
            for i in range(widget.topLevelItemCount()):
                item = widget.topLevelItem(i)
                if item is not None:
                    texts += list(_item_texts(item))
        elif isinstance(widget, QAbstractItemView):
            texts += list(_view_texts(widget))
        found += [(where, t) for t in texts if t]
    return found


def assert_plain(top: QWidget) -> None:
    faults = [
        f"{what} in {where}: {text!r}"
        for where, text in shown_texts(top)
        for what, pattern in TECHNICAL.items()
        if pattern.search(text)
    ]
    assert not faults, "\n".join(faults)


def test_the_walk_finds_what_it_looks_for(qtbot: Any) -> None:
    # The patterns themselves, on what the walk-through saw.
    seen = (
        "damaged Word file: PackageNotFoundError",
        "0.93 against 0.67 on Lectern's German, Russian",
        "Switching to intfloat/multilingual-e5-small: 3 of 40 passages",
        "search with --mode bm25",
        'set "embedding_model" in settings.json',
        "(continues while the app, `lectern watch` or `lectern index` runs)",
    )
    assert all(any(p.search(text) for p in TECHNICAL.values()) for text in seen)
    fine = "Your library is stored in /tmp/pytest-of-me/pytest-3/home0 · qwen2.5:3b · 2.0 GB"
    assert not any(p.search(fine) for p in TECHNICAL.values())
    # The Details fold keeps its words out of the walk, open or folded.
    holder = QWidget()
    qtbot.addWidget(holder)
    fold = DetailsFold(holder)
    fold.set_details("KeyError: 'word/document.xml'")
    holder.show()
    fold.toggle.click()
    assert fold.body.isVisible()
    assert_plain(holder)


def test_a_failed_files_details_say_it_in_words_the_error_name_in_details(
    qtbot: Any, open_window: Callable[..., MainWindow], tmp_path: Path
) -> None:
    folder = tmp_path / "mixed"
    folder.mkdir()
    shutil.copy(SAMPLE_DOCS / "expense-limits-note.txt", folder)
    # A zip that is no Word package: python-docx's KeyError, named in the reason.
    with zipfile.ZipFile(folder / "minutes.docx", "w") as package:
        package.writestr("notes.txt", "not a Word document")
    window = open_window(url=f"http://127.0.0.1:{unused_port()}")
    base.drop(window, folder)
    base.wait_indexed(qtbot, window, files=2)
    window.library.expand_problems()
    assert any("minutes.docx" in i.text(0) for i in window.library.problem_items())
    assert_plain(window.library)

    files = window.library.open_file_list()
    assert isinstance(files, FileListWindow)
    qtbot.waitUntil(lambda: files.loaded, timeout=20_000)
    row = files.model.row_of(str(folder / "minutes.docx"))
    assert row >= 0
    files.table.selectRow(row)
    assert "damaged Word file" in files.details.text()
    assert files.reported.isVisible() and not files.reported.is_open
    assert "Error" in files.reported.details()  # the name, for a bug report
    assert_plain(files)
    files.reported.toggle.click()  # opened, its words are still only in the fold
    assert files.reported.body.isVisible()
    assert_plain(files)
    files.close()


def test_the_language_offer_and_a_model_switch_are_said_without_figures_or_ids(
    qtbot: Any, open_window: Callable[..., MainWindow], tmp_path: Path
) -> None:
    window = open_window(url="")
    base.drop(window, languages_folder(tmp_path / "docs"))
    base.wait_indexed(qtbot, window, files=6)
    panel = window.library
    qtbot.waitUntil(lambda: panel.model_offer.isVisible(), timeout=20_000)
    text = panel.model_offer_text.text()
    assert "German" in text and "multilingual model" in text
    assert_plain(panel)
    assert "0." in panel.model_offer_details.details()  # the figures, a click away

    snapshot = window.backend.view.snapshot
    assert snapshot is not None
    switching = (
        f"Switching to {MULTILINGUAL_MODEL_ID}: 3 of 40 passages re-embedded; search uses "
        f"{DEFAULT_MODEL_ID} until then (continues while the app, `lectern watch` or "
        "`lectern index` runs)"
    )
    panel.set_snapshot(replace(snapshot, switching=switching, advice="", advice_model=""))
    assert "Switching to the multilingual model" in panel.summary.text()
    assert "the English model" in panel.summary.text()
    assert_plain(panel)
    window.show_notice("info", f"This library uses the search model {MULTILINGUAL_MODEL_ID}.")
    assert_plain(window.statusBar())


def test_the_library_check_and_settings_speak_the_apps_words(
    qtbot: Any, open_window: Callable[..., MainWindow], fake_ollama: FakeOllama
) -> None:
    from core.evaluation.library_check import CheckProgress
    from desktop.library_check import progress_words

    window = open_window(url=fake_ollama.url)
    dialog = window.library_check_dialog()
    dialog.show()
    for stage, model in (("questions", ""), ("search", ""), ("compare", MULTILINGUAL_MODEL_ID)):
        dialog.stage.setText(progress_words(CheckProgress(stage, 1, 3, 5, 40, model), True))
        dialog.progress_box.show()
        assert_plain(dialog)
    dialog.progress_box.hide()
    for report in (
        _report(),
        _report(
            advised_mode="dense",
            modes=_report()["modes"] | {"dense": {**_report()["modes"]["dense"], "recall@10": 0.9}},
        ),
        _report(recipe="model", written_by_model=40),
    ):
        dialog.show_report(report)
        assert dialog.details.isVisible()
        assert_plain(dialog)
    dialog.details.toggle.click()
    assert "library-check.jsonl" in dialog.details.details()
    assert_plain(dialog)
    dialog.close()

    settings = window.open_settings()
    qtbot.waitUntil(lambda: "Connected" in settings.server_status.text(), timeout=20_000)
    assert_plain(settings)
    settings.reject()
