"""The library's file list: every file with its state, pages, passages and when it was last
indexed, failed and skipped first; sortable, filterable, with Retry and Open at hand.

The rows are read (``ops.file_list``, one query) and turned into display rows on a worker
thread; the UI thread only swaps the list in. A library of 20k files is 20k rows,
so this is a model and a view (``QTableView``), never a widget per row, and nothing here
walks the rows per paint: each row's strings, sort keys and filter text are made once.
"""

from __future__ import annotations

import os
import re
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from core.app import ops
from core.errors import (
    DamagedFileError,
    EncryptedError,
    NoTextError,
    ParseLimitError,
    UnsupportedFileError,
)
from core.ingest.text import EMPTY_FILE
from core.private import session_umask
from core.records import DocState, FileEntry
from desktop.backend import Backend
from desktop.library_view import LibrarySnapshot
from desktop.qt import (
    QAbstractItemView,
    QAbstractTableModel,
    QColor,
    QComboBox,
    QDesktopServices,
    QDialog,
    QFont,
    QGuiApplication,
    QHBoxLayout,
    QHeaderView,
    QItemSelectionModel,
    QKeySequence,
    QLabel,
    QLineEdit,
    QMenu,
    QModelIndex,
    QPersistentModelIndex,
    QPoint,
    QPushButton,
    QShortcut,
    Qt,
    QTableView,
    QTimer,
    QUrl,
    QVBoxLayout,
    QWidget,
    named,
)
from desktop.rich import count_of
from desktop.theme import Palette, Theme, icon
from desktop.viewmodels import IndexingState, indexing_view
from desktop.widgets import DetailsFold, display_path

COLUMNS = ("File", "Folder", "State", "Pages", "Passages", "Indexed", "Details")
COL_FILE, COL_FOLDER, COL_STATE, COL_PAGES, COL_PASSAGES, COL_INDEXED, COL_DETAILS = range(7)
NUMERIC = (COL_PAGES, COL_PASSAGES)
ROLE_PATH = Qt.ItemDataRole.UserRole
ROLE_STATUS = Qt.ItemDataRole.UserRole + 1

# The state filter: label, ``FileEntry.status`` values shown ("indexed" includes files
# whose passages are still found by keyword only).
STATE_FILTERS: tuple[tuple[str, frozenset[str] | None], ...] = (
    ("All states", None),
    ("Failed", frozenset({"failed"})),
    ("Skipped", frozenset({"skipped"})),
    ("Waiting", frozenset({"waiting"})),
    ("Indexed", frozenset({"indexed", "keyword only"})),
    ("Keyword only", frozenset({"keyword only"})),
)
STATUS_WORDS = {
    "failed": "Failed",
    "skipped": "Skipped",
    "waiting": "Waiting",
    "keyword only": "Keyword only",
    "indexed": "Indexed",
}
HEADER_TIPS = {
    COL_PAGES: "Pages; for other types their slides, chapters, rows or messages",
    COL_PASSAGES: "Passages found by search; none for a file that could not be read",
    COL_INDEXED: "When the file was last read: indexed, or found failed or skipped",
}
STATUS_RANK = {"failed": 0, "skipped": 1, "waiting": 2, "keyword only": 3, "indexed": 4}
# While indexing, the library reports a change every 0.7 s; the list is read again at
# most this often (a 20k-file read and row build is about a tenth of a second).
RELOAD_MIN_INTERVAL_S = 2.0
FILTER_DELAY_MS = 150


def next_step(reason: str) -> str:
    """The next step for a file's failure reason, in core's own words."""
    text = reason.lower()
    if "encrypt" in text or "password" in text:
        return EncryptedError.default_hint
    if "no text" in text or "scanned" in text or "only images" in text:
        return NoTextError.default_hint
    if text == EMPTY_FILE:
        return "Nothing to index in it. It is read again once it has text."
    if text.startswith("a link to"):
        return (
            "Lectern reads the files inside its folders, each once. To index what the link "
            "points to, add that file's folder."
        )
    if "damaged" in text or "empty" in text or "crashed" in text:
        return DamagedFileError.default_hint
    if "longer than" in text or "memory" in text or "nested" in text:
        return ParseLimitError.default_hint
    if "unsupported" in text or ".doc)" in text:
        return UnsupportedFileError.default_hint
    if "moved" in text or "disappeared" in text or "cannot be read" in text:
        return "Check that the file is still there and that you may open it, then retry."
    return "Retry it; if it keeps failing, re-save the file in another program."


# A failure reason that ends in a program's name for the error: "damaged Word file:
# PackageNotFoundError", "could not read (BadZipFile)". The name means nothing to a person.
_TECHNICAL = re.compile(
    r"(?::\s*|\s*\()"
    r"([A-Z]\w*(?:Error|Exception)|[A-Z][A-Za-z0-9_.]*[a-z0-9][A-Z][A-Za-z0-9_]*)\)?\s*$"
)


def plain_reason(reason: str) -> tuple[str, str]:
    """A file's reason in words, and the technical name it carried ("" when none) for
    the Details fold."""
    match = _TECHNICAL.search(reason)
    if match is None or not reason[: match.start()].strip():
        return reason, ""
    return reason[: match.start()].rstrip(" :"), match.group(1)


def status_color(status: str, palette: Palette) -> str:
    return {
        "failed": palette.error_text,
        "skipped": palette.muted,
        "waiting": palette.warning_text,
        "keyword only": palette.accent,
        "indexed": palette.success,
    }[status]


@dataclass(frozen=True)
class FileRow:
    """One file as the table shows it: its strings, sort keys and filter text, made once
    (on the worker thread), so painting, sorting and filtering call no formatting."""

    entry: FileEntry
    cells: tuple[str, ...]
    keys: tuple[Any, ...]
    tooltip: str
    haystack: str  # lower-case text the filter box matches

    @property
    def path(self) -> str:
        return self.entry.path

    @property
    def status(self) -> str:
        return self.entry.status


def details(entry: FileEntry) -> str:
    """What the row's state means for this file, in a phrase."""
    status = entry.status
    reason = plain_reason(entry.reason)[0]
    if status == "failed":
        return reason or "could not be read"
    if status == "skipped":
        return reason or "not read"
    if status == "waiting":
        return "waiting to be read" + (f" (last time: {reason})" if reason else "")
    bits: list[str] = []
    if entry.keyword_only:
        bits.append(
            f"{entry.keyword_only} of {count_of(entry.passages, 'passage')} found by keyword "
            "only until embedded"
        )
    if entry.ocr:
        bits.append("read by OCR")
    if entry.reason:  # an indexed file's note: what the limits left out
        bits.append(entry.reason)
    if not entry.passages:
        bits.append("no text to search")
    return "; ".join(bits)


def folder_label(entry: FileEntry) -> str:
    """The library folder's name and the sub-folder inside it: "Research papers/2021"."""
    root = entry.folder.rstrip(os.sep)
    name = os.path.basename(root) or root
    parent = os.path.dirname(entry.path)
    if parent.startswith(root + os.sep):
        return name + "/" + parent[len(root) + 1 :].replace(os.sep, "/")
    return name


def _when(ts: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(ts)) if ts else "—"


def _size(n: int) -> str:
    if n < 1024:
        return f"{n} bytes"
    for unit in ("KB", "MB", "GB"):
        n_f = n / 1024
        if n_f < 1024 or unit == "GB":
            return f"{n_f:.1f} {unit}" if n_f < 10 else f"{n_f:.0f} {unit}"
        n = int(n_f)
    return f"{n} bytes"


def make_row(entry: FileEntry) -> FileRow:
    name = os.path.basename(entry.path) or entry.path
    folder = folder_label(entry)
    status = entry.status
    words = STATUS_WORDS[status]
    detail = details(entry)
    has_text = entry.state is DocState.INDEXED
    pages = str(entry.pages) if entry.pages else ("—" if not has_text else "")
    passages = str(entry.passages) if has_text else "—"
    cells = (name, folder, words, pages, passages, _when(entry.indexed_at), detail)
    lower = name.lower()
    keys = (
        (lower, entry.path),
        (folder.lower(), lower),
        (STATUS_RANK[status], entry.path),
        (entry.pages, lower),
        (entry.passages if has_text else -1, lower),
        (entry.indexed_at or 0.0, lower),
        (detail.lower(), lower),
    )
    said = plain_reason(entry.reason)[0]
    tip = [display_path(entry.path), words + (f": {said}" if said else "")]
    if status in ("failed", "skipped"):
        tip.append(next_step(entry.reason))
    elif detail and status != "waiting":
        tip.append(detail[:1].upper() + detail[1:] + ".")
    haystack = "\n".join(
        (entry.path.lower(), folder.lower(), words.lower(), detail.lower(), entry.reason.lower())
    )
    return FileRow(entry, cells, keys, "\n".join(tip), haystack)


def make_rows(entries: Sequence[FileEntry]) -> list[FileRow]:
    return [make_row(e) for e in entries]


class FileListModel(QAbstractTableModel):
    """Every row loaded (``all_rows``, in the order of the chosen column) and those the
    filter lets through (``rows``, what the view shows).

    Sorting and filtering are done here, in bulk on keys and text made with the rows,
    rather than by a ``QSortFilterProxyModel``, which asks Python for both cells of every
    comparison to sort and once per row to filter (again after every reload). At 20k rows
    (bench/file_list.py): a sort 26 ms here against 2.4 s, a filter 16 ms against 34 ms."""

    def __init__(self, palette: Palette, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.all_rows: list[FileRow] = []
        self.rows: list[FileRow] = []
        self.palette = palette
        self._colors: dict[str, QColor] = {}
        self.sort_column = COL_STATE  # failed, skipped, waiting, then the rest
        self.sort_order = Qt.SortOrder.AscendingOrder
        self.text = ""
        self.statuses: frozenset[str] | None = None
        self.folder: str | None = None
        self._bold = QFont()
        self._bold.setBold(True)
        self.set_palette(palette)

    def set_palette(self, palette: Palette) -> None:
        self.palette = palette
        self._colors = {s: QColor(status_color(s, palette)) for s in STATUS_WORDS}
        if self.rows:
            self.dataChanged.emit(
                self.index(0, COL_STATE), self.index(len(self.rows) - 1, COL_STATE)
            )

    # --- the model's interface ------------------------------------------------------------

    def rowCount(self, parent: Any = None) -> int:
        return 0 if parent is not None and parent.isValid() else len(self.rows)

    def columnCount(self, parent: Any = None) -> int:
        return 0 if parent is not None and parent.isValid() else len(COLUMNS)

    def headerData(self, section: int, orientation: Qt.Orientation, role: int = 0) -> Any:
        if orientation == Qt.Orientation.Horizontal:
            if role == Qt.ItemDataRole.DisplayRole:
                return COLUMNS[section]
            if role == Qt.ItemDataRole.TextAlignmentRole:
                side = (
                    Qt.AlignmentFlag.AlignRight
                    if section in NUMERIC
                    else Qt.AlignmentFlag.AlignLeft
                )
                return int(side | Qt.AlignmentFlag.AlignVCenter)
            if role == Qt.ItemDataRole.ToolTipRole:
                return HEADER_TIPS.get(section)
        return None

    def data(self, index: QModelIndex | QPersistentModelIndex, role: int = 0) -> Any:
        if not index.isValid():
            return None
        row = self.rows[index.row()]
        column = index.column()
        if role == Qt.ItemDataRole.DisplayRole:
            return row.cells[column]
        if role == Qt.ItemDataRole.ToolTipRole:
            return row.tooltip
        if role == Qt.ItemDataRole.ForegroundRole and column == COL_STATE:
            return self._colors[row.status]
        if role == Qt.ItemDataRole.FontRole and column == COL_STATE and row.status == "failed":
            return self._bold
        if role == Qt.ItemDataRole.TextAlignmentRole and column in NUMERIC:
            return int(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        if role == ROLE_PATH:
            return row.path
        if role == ROLE_STATUS:
            return row.status
        return None

    def sort(self, column: int, order: Qt.SortOrder = Qt.SortOrder.AscendingOrder) -> None:
        """Called by the view when a header is clicked."""
        if not 0 <= column < len(COLUMNS):
            return
        self.sort_column, self.sort_order = column, order
        self.layoutAboutToBeChanged.emit()
        # Persistent indexes (the selection, the current row) follow their rows.
        held = [(p, self.rows[p.row()]) for p in self.persistentIndexList() if p.isValid()]
        self._sort_rows()
        self.rows = self._filtered()
        where = {id(r): i for i, r in enumerate(self.rows)}
        for p, row in held:
            self.changePersistentIndex(p, self.index(where[id(row)], p.column()))
        self.layoutChanged.emit()

    def _sort_rows(self) -> None:
        column = self.sort_column
        self.all_rows.sort(
            key=lambda r: r.keys[column], reverse=self.sort_order == Qt.SortOrder.DescendingOrder
        )

    def _filtered(self) -> list[FileRow]:
        statuses, folder, words = self.statuses, self.folder, self.text.split()
        if statuses is None and folder is None and not words:
            return list(self.all_rows)
        return [
            r
            for r in self.all_rows
            if (statuses is None or r.status in statuses)
            and (folder is None or r.entry.folder == folder)
            and all(w in r.haystack for w in words)
        ]

    # --- changes ------------------------------------------------------------------------

    def set_rows(self, rows: list[FileRow]) -> None:
        self.beginResetModel()
        self.all_rows = list(rows)
        self._sort_rows()
        self.rows = self._filtered()
        self.endResetModel()

    def set_filter(self, text: str, statuses: frozenset[str] | None, folder: str | None) -> bool:
        """Show only the rows whose text holds every word of ``text``, in ``statuses``
        (None: any) and of the library folder ``folder`` (None: any); False if unchanged."""
        text = text.strip().lower()
        if (text, statuses, folder) == (self.text, self.statuses, self.folder):
            return False
        self.beginResetModel()
        self.text, self.statuses, self.folder = text, statuses, folder
        self.rows = self._filtered()
        self.endResetModel()
        return True

    def replace_row(self, old: FileRow, new: FileRow) -> None:
        for rows in (self.all_rows, self.rows):
            for i, r in enumerate(rows):
                if r is old:
                    rows[i] = new
                    break
        i = self.row_of(new.path)
        if i >= 0:
            self.dataChanged.emit(self.index(i, 0), self.index(i, len(COLUMNS) - 1))

    def row_of(self, path: str) -> int:
        """The shown row of ``path``; -1 where the filter hides it or it is not listed."""
        for i, r in enumerate(self.rows):
            if r.path == path:
                return i
        return -1

    def path_at(self, index: QModelIndex) -> str:
        return self.rows[index.row()].path if index.isValid() else ""


class FileListWindow(QDialog):
    """Every file of the library with its state; reachable from the library panel ("Files…",
    a folder's "Show files") and the View menu."""

    def __init__(self, backend: Backend, theme: Theme, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("fileList")
        self.setWindowTitle("Library files")
        self.setModal(False)
        self.resize(1060, 620)
        self.backend = backend
        self.theme = theme
        self.loaded = False  # the first read has arrived
        self.loads = 0  # reads that have arrived
        self._loading = False
        self._reload_again = False
        self._last_load = 0.0
        self._fingerprint: object = None
        self._stale = True
        self._folders: list[str] = []
        self.message = ""
        self._indexing_note = ""

        layout = QVBoxLayout(self)
        layout.setContentsMargins(14, 12, 14, 12)
        layout.setSpacing(8)

        bar = QHBoxLayout()
        self.filter_edit = named(QLineEdit(), "fileFilter")
        self.filter_edit.setPlaceholderText("Filter by name, folder or reason")
        self.filter_edit.setClearButtonEnabled(True)
        self.filter_edit.setAccessibleName("Filter files")
        bar.addWidget(self.filter_edit, 1)
        self.state_box = named(QComboBox(), "fileStateFilter")
        for label, _ in STATE_FILTERS:
            self.state_box.addItem(label)
        self.state_box.setAccessibleName("Show files in this state")
        bar.addWidget(self.state_box)
        self.folder_box = named(QComboBox(), "fileFolderFilter")
        self.folder_box.addItem("All folders", None)
        self.folder_box.setAccessibleName("Show files of this folder")
        self.folder_box.setMinimumContentsLength(18)
        self.folder_box.setSizeAdjustPolicy(
            QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon
        )
        bar.addWidget(self.folder_box)
        layout.addLayout(bar)

        self.summary = named(QLabel("Reading the library…"), "muted")
        self.summary.setWordWrap(True)
        layout.addWidget(self.summary)

        self.model = FileListModel(theme.palette, self)
        self.table = named(QTableView(), "fileTable")
        self.table.setModel(self.model)
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.ExtendedSelection)
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.setWordWrap(False)
        self.table.setTextElideMode(Qt.TextElideMode.ElideMiddle)
        self.table.setAlternatingRowColors(True)
        self.table.setShowGrid(False)
        # Room between a right-aligned count and the next column's text.
        self.table.setStyleSheet("QTableView::item { padding-right: 10px; }")
        self.table.verticalHeader().hide()
        self.table.verticalHeader().setDefaultSectionSize(26)
        self.table.setContextMenuPolicy(Qt.ContextMenuPolicy.CustomContextMenu)
        self.table.customContextMenuRequested.connect(self._context_menu)
        self.table.setAccessibleName("Library files")
        header = self.table.horizontalHeader()
        header.setStretchLastSection(True)
        header.setHighlightSections(False)
        # Fixed widths: fitting columns to their contents would measure all 20k rows.
        for column, width in enumerate((250, 170, 110, 64, 84, 146)):
            header.setSectionResizeMode(column, QHeaderView.ResizeMode.Interactive)
            header.resizeSection(column, width)
        header.setSortIndicator(self.model.sort_column, self.model.sort_order)
        self.table.setSortingEnabled(True)  # (sorts by the indicator: state, failed first)
        layout.addWidget(self.table, 1)

        self.details = named(QLabel(), "fileDetails")
        self.details.setTextFormat(Qt.TextFormat.RichText)
        self.details.setWordWrap(True)
        self.details.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.details.setMinimumHeight(38)
        self.details.setAlignment(Qt.AlignmentFlag.AlignTop | Qt.AlignmentFlag.AlignLeft)
        layout.addWidget(self.details)
        # What the reader reported, word for word (an error's name), for whoever asks.
        self.reported = DetailsFold(objectName="fileReported")
        layout.addWidget(self.reported)

        buttons = QHBoxLayout()
        self.retry_button = named(QPushButton("Retry"), "primaryButton")
        self.retry_button.setToolTip("Read the selected failed files again (after fixing them)")
        self.retry_button.clicked.connect(self.retry_selected)
        self.open_button = named(QPushButton("Open original"), "secondaryButton")
        self.open_button.setToolTip("Open the file in its program (Enter or double-click)")
        self.open_button.clicked.connect(self.open_selected)
        self.show_button = named(QPushButton("Show in folder"), "secondaryButton")
        self.show_button.setToolTip("Open the folder that holds the file")
        self.show_button.clicked.connect(self.show_selected_in_folder)
        close = named(QPushButton("Close"), "secondaryButton")
        close.clicked.connect(self.close)
        for button in (self.retry_button, self.open_button, self.show_button):
            buttons.addWidget(button)
        buttons.addStretch(1)
        buttons.addWidget(close)
        layout.addLayout(buttons)

        self._filter_timer = QTimer(self)
        self._filter_timer.setSingleShot(True)
        self._filter_timer.setInterval(FILTER_DELAY_MS)
        self._filter_timer.timeout.connect(self._apply_filter)
        self._reload_timer = QTimer(self)
        self._reload_timer.setSingleShot(True)
        self._reload_timer.timeout.connect(self.reload)
        self.filter_edit.textChanged.connect(lambda _t: self._filter_timer.start())
        self.state_box.currentIndexChanged.connect(lambda _i: self._apply_filter())
        self.folder_box.currentIndexChanged.connect(lambda _i: self._apply_filter())
        self.table.selectionModel().selectionChanged.connect(lambda *_: self._selection_changed())
        self.table.doubleClicked.connect(lambda _i: self.open_selected())
        enter = QShortcut(QKeySequence(Qt.Key.Key_Return), self.table)
        enter.setContext(Qt.ShortcutContext.WidgetShortcut)
        enter.activated.connect(self.open_selected)
        find = QShortcut(QKeySequence.StandardKey.Find, self)
        find.activated.connect(self._focus_filter)

        backend.view.snapshot_changed.connect(self._library_changed)
        backend.indexing.finished.connect(self._run_ended)
        backend.indexing.failed.connect(self._run_ended)
        indexing_view(backend.indexing).subscribe(self._indexing_changed)
        theme.changed.connect(self._restyle)
        self._selection_changed()

    # --- opening and filtering --------------------------------------------------------

    def show_folder(self, folder: str | None) -> None:
        """Show the window, listing ``folder``'s files (None: every folder)."""
        self._set_folders(self._known_folders() | ({folder} if folder else set()))
        at = self.folder_box.findData(folder) if folder else 0
        self.folder_box.setCurrentIndex(max(0, at))
        self._apply_filter()
        self.show()
        self.raise_()
        self.activateWindow()
        if self._stale or not self.loaded:
            self.reload()

    def set_state_filter(self, label: str) -> None:
        at = self.state_box.findText(label)
        if at >= 0:
            self.state_box.setCurrentIndex(at)

    def _apply_filter(self) -> None:
        statuses = STATE_FILTERS[max(0, self.state_box.currentIndex())][1]
        folder = self.folder_box.currentData()
        selected = self.selected_paths()
        current = self.model.path_at(self.table.currentIndex())
        if self.model.set_filter(self.filter_edit.text(), statuses, folder or None):
            self._restore_selection(selected, current)
        self._update_summary()
        self._selection_changed()

    def _known_folders(self) -> set[str]:
        snapshot = self.backend.view.snapshot
        known = {f.path for f in snapshot.folders} if snapshot else set()
        return known | {r.entry.folder for r in self.model.all_rows}

    def _set_folders(self, folders: set[str]) -> None:
        ordered = sorted(folders)
        if ordered == self._folders:
            return
        current = self.folder_box.currentData()
        self._folders = ordered
        self.folder_box.blockSignals(True)
        self.folder_box.clear()
        self.folder_box.addItem("All folders", None)
        for folder in ordered:
            self.folder_box.addItem(os.path.basename(folder.rstrip(os.sep)) or folder, folder)
            self.folder_box.setItemData(
                self.folder_box.count() - 1, display_path(folder), Qt.ItemDataRole.ToolTipRole
            )
        at = self.folder_box.findData(current) if current else 0
        self.folder_box.setCurrentIndex(max(0, at))
        self.folder_box.blockSignals(False)

    # --- loading ------------------------------------------------------------------------

    def reload(self) -> None:
        """Read the list again on a worker thread (at most one read at a time)."""
        if self._loading:
            self._reload_again = True
            return
        self._loading = True
        self._stale = False
        self._last_load = time.monotonic()
        snapshot = self.backend.view.snapshot
        fingerprint = self._fingerprint_of(snapshot)
        task = self.backend.run(
            ops.file_list().then(make_rows),
            on_result=lambda rows: self._loaded(rows, fingerprint),
            on_error=self._load_failed,
            on_finished=self._load_finished,
        )
        if task is None:
            self._loading = False

    def _load_finished(self) -> None:
        self._loading = False
        if self._reload_again:
            self._reload_again = False
            self._schedule_reload()

    def _loaded(self, rows: list[FileRow], fingerprint: object) -> None:
        self._fingerprint = fingerprint
        # Keep what the person was looking at: the selected files, the current one, and
        # the scroll position; the sort order is the model's and stays.
        selected = self.selected_paths()
        current = self.model.path_at(self.table.currentIndex())
        scroll = self.table.verticalScrollBar().value()
        self.model.set_rows(rows)
        self._set_folders(self._known_folders())
        self._restore_selection(selected, current)
        self.table.verticalScrollBar().setValue(scroll)
        self.loaded = True
        self.loads += 1
        self.message = ""
        self._update_summary()
        self._selection_changed()

    def _load_failed(self, exc: BaseException) -> None:
        from desktop.workers import describe_error

        message, hint = describe_error(exc)
        self.message = f"The list could not be read: {message} {hint}".strip()
        self.summary.setText(self.message)

    def _restore_selection(self, paths: list[str], current: str) -> None:
        if not paths and not current:
            return
        model = self.model
        where = {r.path: i for i, r in enumerate(model.rows)}
        selection = self.table.selectionModel()
        flags = QItemSelectionModel.SelectionFlag.Select | QItemSelectionModel.SelectionFlag.Rows
        for path in paths:
            i = where.get(path)
            if i is not None:
                selection.select(model.index(i, 0), flags)
        i = where.get(current)
        if i is not None:
            selection.setCurrentIndex(model.index(i, 0), QItemSelectionModel.SelectionFlag.NoUpdate)

    @staticmethod
    def _fingerprint_of(snapshot: LibrarySnapshot | None) -> object:
        if snapshot is None:
            return None
        return (snapshot.folders, snapshot.problems, snapshot.chunks, snapshot.embedded)

    def _library_changed(self, snapshot: LibrarySnapshot) -> None:
        if self._fingerprint_of(snapshot) == self._fingerprint and self.loaded:
            return  # the same counts and the same problem files: nothing to read again
        if not self.isVisible():
            self._stale = True  # read when shown
            return
        self._schedule_reload()

    def _run_ended(self, *_outcome: object) -> None:
        # The counts cannot tell every change: a retried file is waiting, then failed
        # again, and the counts end where they began, so a list read while it waited
        # would stay "Waiting". Once a run ends nothing it did is still moving: read again.
        if not self.isVisible():
            self._stale = True
            return
        self._schedule_reload()

    def _schedule_reload(self) -> None:
        wait = RELOAD_MIN_INTERVAL_S - (time.monotonic() - self._last_load)
        if wait <= 0:
            self.reload()
        elif not self._reload_timer.isActive():
            self._reload_timer.start(int(wait * 1000))

    # --- what is shown ------------------------------------------------------------------

    def _indexing_changed(self, state: IndexingState) -> None:
        # A pause, a wait, a cancel or their end change the summary; a count does not.
        if state.note != self._indexing_note:
            self._indexing_note = state.note
            self._update_summary()

    def _update_summary(self) -> None:
        if not self.loaded:
            return
        rows = self.model.all_rows
        counts = Counter(r.status for r in rows)
        shown = len(self.model.rows)
        head = (
            count_of(len(rows), "file")
            if shown == len(rows)
            else f"{shown:,} of {count_of(len(rows), 'file')}".replace(",", "\u202f")
        )
        parts = [head]
        for status in ("failed", "skipped", "waiting", "keyword only"):
            if counts.get(status):
                parts.append(f"{counts[status]} {status}")
        # The run as the library card and the status bar say it (one state for all three).
        state = indexing_view(self.backend.indexing).state
        if not rows:
            parts = [
                "No files read yet"
                if state.active
                else "No files yet: add a folder to the library."
            ]
        if state.note:
            parts.append(state.note)
        self.summary.setText(" · ".join(parts))

    def selected_rows(self) -> list[FileRow]:
        rows = self.model.rows
        return [rows[index.row()] for index in self.table.selectionModel().selectedRows()]

    def selected_paths(self) -> list[str]:
        return [r.path for r in self.selected_rows()]

    def _focus_filter(self) -> None:
        self.filter_edit.setFocus()
        self.filter_edit.selectAll()

    def _selection_changed(self) -> None:
        rows = self.selected_rows()
        failed = [r for r in rows if r.status == "failed"]
        self.retry_button.setEnabled(bool(failed) and self.backend.is_ready)
        self.retry_button.setText(f"Retry {len(failed)} files" if len(failed) > 1 else "Retry")
        self.open_button.setEnabled(len(rows) == 1)
        self.show_button.setEnabled(len(rows) == 1)
        # Always the selection's: a failed read says so in the summary line, and keeping
        # the details then left them on a file no longer selected.
        if len(rows) != 1:
            self.details.setText(
                f"{count_of(len(rows), 'file')} selected" if rows else "Select a file to see more."
            )
            self.reported.set_details("")
            return
        self.details.setText(self._details_text(rows[0]))
        reason = rows[0].entry.reason
        technical = plain_reason(reason)[1]
        self.reported.set_details(f"The file's reader reported: {reason}" if technical else "")

    def _details_text(self, row: FileRow) -> str:
        e = row.entry
        palette = self.theme.palette
        words = STATUS_WORDS[e.status]
        lines = [
            f"<b>{_esc(display_path(e.path))}</b>",
            f'<span style="color:{status_color(e.status, palette)};">{words}</span>'
            + (f" — {_esc(plain_reason(e.reason)[0])}" if e.reason else ""),
        ]
        if e.status in ("failed", "skipped"):
            lines[-1] += f" · {_esc(next_step(e.reason))}"
        facts = [_size(e.size)]
        if e.state is DocState.INDEXED:
            if e.pages:
                facts.append(count_of(e.pages, "page"))
            facts.append(count_of(e.passages, "passage"))
            if e.keyword_only:
                facts.append(f"{e.keyword_only} found by keyword only until embedded")
            if e.ocr:
                facts.append("read by OCR")
        read = "indexed" if e.state is DocState.INDEXED else "last read"
        facts.append(f"{read} {_when(e.indexed_at)}" if e.indexed_at else "not read yet")
        lines[-1] += "<br>" + " · ".join(facts)
        return "<br>".join(lines)

    def _restyle(self, palette: Palette) -> None:
        self.model.set_palette(palette)
        self._selection_changed()

    # --- actions ------------------------------------------------------------------------

    def retry_selected(self) -> None:
        failed = [r for r in self.selected_rows() if r.status == "failed"]
        if not failed:
            return
        self.backend.indexing.retry([r.path for r in failed])
        # Said at once: the row waits for its new read (the next reload shows the result).
        for row in failed:
            self.model.replace_row(row, make_row(replace(row.entry, state=DocState.PENDING)))
        self._update_summary()
        self._selection_changed()

    def _single(self) -> FileRow | None:
        rows = self.selected_rows()
        if len(rows) == 1:
            return rows[0]
        current = self.table.currentIndex()
        return self.model.rows[current.row()] if current.isValid() else None

    def open_selected(self) -> None:
        row = self._single()
        if row is None:
            return
        from desktop.evidence_panel import open_document, original_file

        path = original_file(row.path) or row.path
        if not os.path.exists(path):
            self._say(f"{display_path(path)} is no longer there.")
        elif not open_document(path):
            self._say(
                "This system has no program set up to open the file, so Lectern could not "
                f"open it. It is at {display_path(path)}"
            )

    def show_selected_in_folder(self) -> None:
        row = self._single()
        if row is None:
            return
        from desktop.evidence_panel import original_file

        folder = os.path.dirname(original_file(row.path) or row.path)
        with session_umask():
            opened = os.path.isdir(folder) and QDesktopServices.openUrl(QUrl.fromLocalFile(folder))
        if not opened:
            self._say(f"The folder could not be opened. It is at {display_path(folder)}")

    def _say(self, text: str) -> None:
        self.details.setText(_esc(text))

    def _copy_paths(self) -> None:
        QGuiApplication.clipboard().setText("\n".join(self.selected_paths()))

    def _context_menu(self, pos: QPoint) -> None:
        index = self.table.indexAt(pos)
        if not index.isValid():
            return
        if not self.table.selectionModel().isRowSelected(index.row(), index.parent()):
            self.table.selectRow(index.row())
        rows = self.selected_rows()
        failed = [r for r in rows if r.status == "failed"]
        menu = QMenu(self)
        retry = menu.addAction(
            icon("refresh"),
            f"Retry {len(failed)} failed files" if len(failed) > 1 else "Retry",
            self.retry_selected,
        )
        retry.setEnabled(bool(failed))
        single = len(rows) == 1
        menu.addAction(icon("external"), "Open original", self.open_selected).setEnabled(single)
        menu.addAction(icon("folder"), "Show in folder", self.show_selected_in_folder).setEnabled(
            single
        )
        menu.addAction(icon("copy"), "Copy path", self._copy_paths)
        menu.exec(self.table.viewport().mapToGlobal(pos))


def _esc(text: str) -> str:
    import html

    return html.escape(text, quote=False)
