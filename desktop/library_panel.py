"""The library panel: folders with their counts, files that need attention, indexing progress."""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING

from core.app.coordinator import IndexJob
from core.indexing.throttle import BUSY_WAITING
from core.private import session_umask
from core.records import Document, IndexProgress, IndexReport
from desktop.backend import Backend
from desktop.file_list import FileListWindow, next_step, plain_reason
from desktop.library_view import LibrarySnapshot
from desktop.qt import (
    QDesktopServices,
    QEvent,
    QFrame,
    QHBoxLayout,
    QKeySequence,
    QLabel,
    QMenu,
    QObject,
    QPoint,
    QProgressBar,
    QPushButton,
    QShortcut,
    QSize,
    Qt,
    QToolButton,
    QTreeWidget,
    QTreeWidgetItem,
    QUrl,
    QVBoxLayout,
    QWidget,
    Signal,
    named,
)

if TYPE_CHECKING:
    from core.records import FolderStatus
from desktop.rich import count_of
from desktop.theme import Palette, Theme, icon
from desktop.viewmodels import IndexingState, indexing_view, plain_words
from desktop.widgets import DetailsFold, ElidedLabel, WrapLabel, display_path

ROLE_PATH = Qt.ItemDataRole.UserRole
ROLE_KIND = Qt.ItemDataRole.UserRole + 1  # "folder" | "group" | "file"
MAX_LISTED = 300  # problem files listed per folder; the rest are summarised
FOLDER_ROW_HEIGHT = 58  # name, path and one line of counts
ITEM_PADDING = 6  # #libraryTree::item's vertical padding in app.qss, top and bottom


def fmt_duration(seconds: float | None) -> str:
    if seconds is None:
        return "estimating…"
    seconds = round(seconds)
    if seconds < 60:
        return f"about {max(seconds, 1)} s left"
    if seconds < 3600:
        return f"about {seconds // 60} min {seconds % 60:02d} s left"
    return f"about {seconds // 3600} h {seconds // 60 % 60:02d} min left"


# A parenthesis of measurements in core's offer: "(0.93 against 0.67 on Lectern's ... tests)".
_FIGURES = re.compile(r"\s*\(([^()]*\d\.\d\d[^()]*)\)")


def offer_words(advice: str) -> tuple[str, str]:
    """The model offer in words, and the measurements behind it for its Details fold
    (benchmark figures mean nothing to most people; they are a click away)."""
    figures = [m.group(1) for m in _FIGURES.finditer(advice)]
    words = plain_words(_FIGURES.sub("", advice))
    details = "".join(
        f"Search quality, the multilingual model's figure first: {f}." for f in figures
    )
    return words, details


def _children(item: QTreeWidgetItem) -> list[QTreeWidgetItem]:
    return [child for j in range(item.childCount()) if (child := item.child(j)) is not None]


class FolderRow(QWidget):
    """One library folder: name, path and counts, with a menu of actions."""

    def __init__(self, on_menu: Callable[[QPoint], None], parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("folderRow")
        self.setAttribute(Qt.WidgetAttribute.WA_TransparentForMouseEvents, False)
        lay = QHBoxLayout(self)
        lay.setContentsMargins(4, 6, 4, 6)
        lay.setSpacing(8)
        self.icon = QLabel()
        self.icon.setFixedSize(20, 20)
        lay.addWidget(self.icon, 0, Qt.AlignmentFlag.AlignTop)
        col = QVBoxLayout()
        col.setSpacing(1)
        self.name = ElidedLabel(objectName="folderName")
        self.path = ElidedLabel(mode=Qt.TextElideMode.ElideMiddle, objectName="folderPath")
        # Wraps in a narrow sidebar: "12 indexed · 3 failed · 1 skipped" was cut at "1 skipp".
        self.counts = WrapLabel(objectName="folderCounts")
        self.counts.setTextFormat(Qt.TextFormat.RichText)
        self.counts.setWordWrap(True)
        for label in (self.name, self.path, self.counts):
            col.addWidget(label)
        lay.addLayout(col, 1)
        self.menu_button = named(QToolButton(), "iconButton")
        self.menu_button.setText("⋯")
        self.menu_button.setToolTip("Folder actions")
        self.menu_button.setAccessibleName("Folder actions")
        self.menu_button.clicked.connect(
            lambda: on_menu(self.menu_button.mapToGlobal(QPoint(0, self.menu_button.height())))
        )
        lay.addWidget(self.menu_button, 0, Qt.AlignmentFlag.AlignTop)


class LibraryPanel(QFrame):
    add_folder_requested = Signal()
    remove_requested = Signal(str)
    rescan_requested = Signal()  # the window says what a rescan does and what it found
    check_requested = Signal()  # the window opens the library check

    def __init__(self, backend: Backend, theme: Theme, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("libraryPanel")
        self.backend = backend
        self.theme = theme
        self.snapshot: LibrarySnapshot | None = None
        self._rows: dict[str, FolderRow] = {}
        self._watch_shown: dict[str, tuple[str, str]] = {}
        self._palette_shown = ""
        self._expanded: set[str] = set()
        self._last_progress: IndexProgress | None = None
        self._start_title = "Indexing…"  # what the card says before a run's first count
        self.file_list: FileListWindow | None = None
        # Made before this panel connects to the backend, so that it has taken in each
        # signal by the time the panel's own handlers read it.
        self.indexing = indexing_view(backend.indexing)

        layout = QVBoxLayout(self)
        layout.setContentsMargins(10, 10, 10, 6)
        layout.setSpacing(6)

        head = QHBoxLayout()
        head.setContentsMargins(6, 0, 0, 0)
        title = named(QLabel("Library"), "sidebarTitle")
        head.addWidget(title)
        head.addStretch(1)
        # Every file with its state: the library's health at a glance.
        self.files_button = self._tool("file", "Every file with its state, failed first")
        self.files_button.setText("Files…")
        self.files_button.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextBesideIcon)
        self.files_button.setAccessibleName("Files: every file with its state")
        self.files_button.clicked.connect(lambda: self.open_file_list())
        head.addWidget(self.files_button)
        self.rescan_button = self._tool("refresh", "Rescan all folders for changes (F5)")
        self.rescan_button.clicked.connect(self.rescan_requested.emit)
        self.add_button = self._tool("folder-plus", "Add folder… (Ctrl+O)")
        self.add_button.clicked.connect(self.add_folder_requested.emit)
        head.addWidget(self.rescan_button)
        head.addWidget(self.add_button)
        layout.addLayout(head)

        self.tree = named(QTreeWidget(), "libraryTree")
        self.tree.viewport().installEventFilter(self)
        self.tree.setHeaderHidden(True)
        self.tree.setIndentation(14)
        self.tree.setRootIsDecorated(True)
        self.tree.setUniformRowHeights(False)
        self.tree.setContextMenuPolicy(Qt.ContextMenuPolicy.CustomContextMenu)
        self.tree.customContextMenuRequested.connect(self._context_menu)
        self.tree.itemActivated.connect(self._activated)
        self.tree.itemExpanded.connect(lambda i: self._expanded.add(self._key(i)))
        self.tree.itemCollapsed.connect(lambda i: self._expanded.discard(self._key(i)))
        self.tree.setAccessibleName("Library folders")
        # Keyboard: Delete removes the selected folder, the menu key opens its actions.
        # (Shortcuts rather than an event filter: a Python filter would run on every event
        # the tree gets, paints included.)
        for key, slot in (
            (Qt.Key.Key_Delete, self._remove_current),
            (Qt.Key.Key_Menu, self._menu_for_current),
        ):
            shortcut = QShortcut(QKeySequence(key), self.tree)
            shortcut.setContext(Qt.ShortcutContext.WidgetShortcut)
            shortcut.activated.connect(slot)
        self.tree.setFrameShape(QFrame.Shape.NoFrame)
        self.tree.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        layout.addWidget(self.tree, 1)

        self.empty = named(
            QLabel(
                "No folders yet.\nDrop a folder anywhere on the window, or click + to choose one."
            ),
            "sidebarEmpty",
        )
        self.empty.setWordWrap(True)
        self.empty.setAlignment(Qt.AlignmentFlag.AlignCenter)
        layout.addWidget(self.empty)

        self.progress_card = named(QFrame(), "progressCard")
        pc = QVBoxLayout(self.progress_card)
        pc.setContentsMargins(12, 10, 12, 10)
        pc.setSpacing(6)
        prow = QHBoxLayout()
        # Wrapped, never cut: a title with the run's counts was clipped at the sidebar's
        # width ("Indexing · meaning searc").
        self.progress_title = WrapLabel("Indexing…", objectName="progressTitle")
        self.progress_title.setTextFormat(Qt.TextFormat.PlainText)
        prow.addWidget(self.progress_title, 1, Qt.AlignmentFlag.AlignTop)
        self.pause_button = self._tool("pause", "Pause indexing")
        self.pause_button.clicked.connect(self._toggle_pause)
        self.cancel_button = self._tool("close", "Cancel indexing (finished files are kept)")
        self.cancel_button.clicked.connect(lambda: backend.indexing.cancel())
        # After a cancel nothing runs until the person says so: this is how.
        self.resume_button = named(QPushButton("Resume"), "secondaryButton")
        self.resume_button.setToolTip("Index the files left (also F5, Retry or adding a folder)")
        self.resume_button.setAccessibleName("Resume indexing")
        self.resume_button.clicked.connect(backend.indexing.resume)
        self.resume_button.hide()
        for button in (self.pause_button, self.cancel_button, self.resume_button):
            prow.addWidget(button, 0, Qt.AlignmentFlag.AlignTop)
        pc.addLayout(prow)
        self.progress_bar = named(QProgressBar(), "indexProgress")
        self.progress_bar.setTextVisible(False)
        self.progress_bar.setFixedHeight(6)
        pc.addWidget(self.progress_bar)
        self.progress_detail = WrapLabel(objectName="progressDetail")
        self.progress_detail.setTextFormat(Qt.TextFormat.PlainText)
        # The file being read: its name shortened in the middle (its tooltip has the path).
        self.progress_current = ElidedLabel(
            mode=Qt.TextElideMode.ElideMiddle, objectName="progressCurrent"
        )
        pc.addWidget(self.progress_detail)
        pc.addWidget(self.progress_current)
        self.progress_card.installEventFilter(self)
        self.progress_card.hide()
        layout.addWidget(self.progress_card)

        self.summary = named(QLabel(), "sidebarSummary")
        self.summary.setWordWrap(True)
        self.summary.hide()
        layout.addWidget(self.summary)
        # A change of embedding model re-embeds in the background with no indexing card
        # to pause it from: Pause here holds it as Pause indexing does.
        self.switch_button = named(QPushButton("Pause"), "secondaryButton")
        self.switch_button.setToolTip(
            "Pause re-embedding for the new model (search keeps using the current one)"
        )
        self.switch_button.setAccessibleName("Pause switching the embedding model")
        self.switch_button.clicked.connect(self._toggle_switch)
        self.switch_button.hide()
        switch_row = QHBoxLayout()
        # In line with the summary's text above it (its style sheet pads it), and clear
        # of the Conversations rule below.
        switch_row.setContentsMargins(11, 0, 0, 8)
        switch_row.addWidget(self.switch_button)
        switch_row.addStretch(1)
        layout.addLayout(switch_row)
        # The library check (core/evaluation/library_check.py): how well search does on this library.
        self.check_button = named(QPushButton("Check search quality"), "secondaryButton")
        self.check_button.setToolTip(
            "Measure how well Lectern finds things in your documents, on questions made from them"
        )
        self.check_button.clicked.connect(self.check_requested)
        check_row = QHBoxLayout()
        check_row.setContentsMargins(11, 0, 0, 8)
        check_row.addWidget(self.check_button)
        check_row.addStretch(1)
        layout.addLayout(check_row)
        self.check_button.hide()
        # The embedding model the library's languages call for (core/embedding/languages.py),
        # offered until the person switches or says not now.
        self.model_offer = named(QFrame(), "modelOffer")
        offer = QVBoxLayout(self.model_offer)
        # Narrow sides: at the sidebar's narrowest its two buttons need the room whole
        # ("Switch model" was cut at 11 px).
        offer.setContentsMargins(6, 6, 6, 8)
        self.model_offer_text = named(QLabel(), "modelOfferText")
        self.model_offer_text.setWordWrap(True)
        offer.addWidget(self.model_offer_text)
        # The measurements behind the offer, for whoever wants them.
        self.model_offer_details = DetailsFold(objectName="modelOfferDetails")
        self.model_offer_details.toggle.toggled.connect(lambda _on: self._fit_offer())
        offer.addWidget(self.model_offer_details)
        offer_buttons = QHBoxLayout()
        self.model_offer_switch = named(QPushButton("Switch model"), "secondaryButton")
        self.model_offer_switch.setToolTip(
            "Re-embed the library with the multilingual model in the background; search "
            "keeps using the current model until it is done"
        )
        self.model_offer_switch.clicked.connect(self._accept_model_offer)
        self.model_offer_decline = named(QPushButton("Not now"), "secondaryButton")
        self.model_offer_decline.clicked.connect(self._decline_model_offer)
        offer_buttons.addWidget(self.model_offer_switch)
        offer_buttons.addWidget(self.model_offer_decline)
        offer_buttons.addStretch(1)
        offer.addLayout(offer_buttons)
        self.model_offer.hide()
        self.model_offer.installEventFilter(self)
        layout.addWidget(self.model_offer)

        work = backend.indexing
        backend.view.snapshot_changed.connect(self.set_snapshot)
        work.started.connect(self._index_started)
        work.progress.connect(self.set_progress)
        work.pause_changed.connect(self._paused)
        work.cancel_changed.connect(self._cancelled)
        work.finished.connect(self._finished)
        work.failed.connect(self._index_failed)
        work.watch_idle.connect(self._watch_idle)
        work.watch_changed.connect(lambda _w: self.snapshot and self.set_snapshot(self.snapshot))
        theme.changed.connect(self._restyle)
        self._restyle(theme.palette)
        self.set_snapshot(LibrarySnapshot((), {}))

    def _tool(self, name: str, tip: str) -> QToolButton:
        button = named(QToolButton(), "iconButton")
        button.setProperty("iconName", name)
        button.setToolTip(tip)
        button.setAccessibleName(tip)
        button.setIconSize(QSize(17, 17))
        return button

    def _restyle(self, palette: Palette) -> None:
        for button in (
            self.files_button,
            self.rescan_button,
            self.add_button,
            self.pause_button,
            self.cancel_button,
        ):
            button.setIcon(icon(str(button.property("iconName")), palette.muted))
        if self.snapshot is not None:
            self.set_snapshot(self.snapshot)

    # --- folders ----------------------------------------------------------------------

    def _fit_rows(self) -> None:
        """Each folder row as tall as its wrapped counts need at the tree's width (a tree
        item keeps the height it is given: a fixed one cut "1 skipped" in a narrow
        sidebar)."""
        width = self.tree.viewport().width() - self.tree.indentation()
        changed = False
        for item in self._folder_items():
            row = self.tree.itemWidget(item, 0)
            if row is None or width <= 0:
                continue
            # The row's layout keeps its height for a width until its next layout pass: a
            # new count's text would be measured at the old text's height.
            layout = row.layout()
            if layout is not None:
                layout.invalidate()
            height = max(FOLDER_ROW_HEIGHT, row.heightForWidth(width) + ITEM_PADDING)
            if item.sizeHint(0).height() != height:
                item.setSizeHint(0, QSize(100, height))
                changed = True
        if changed:
            # A new size hint alone left the row widget at its old height inside the
            # taller item (seen in a real window: "1 skipped" cut in half).
            self.tree.doItemsLayout()

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        if event.type() == QEvent.Type.Resize:
            if watched is self.progress_card:
                self._fit_card()
            elif watched is self.model_offer:
                self._fit_offer()
            else:
                # The tree's viewport, resized after the panel's own resize event has run.
                self._fit_rows()
        return False

    def _fit_offer(self) -> None:
        """The model offer as tall as its wrapped words need (see ``_fit_card``): at
        1024x700 its sentence was cut at the top and bottom."""
        layout = self.model_offer.layout()
        width = self.model_offer.width()
        if layout is None or width <= 0:
            return
        # The sentence's own height at the width it has: the frame's layout, under the
        # style sheet's margins, gave it the height for a wider one.
        text = self.model_offer_text
        if text.width() > 0:
            need = text.heightForWidth(text.width())
            if need > 0 and text.minimumHeight() != need:
                text.setMinimumHeight(need)
        height = layout.totalHeightForWidth(width)
        if height > 0 and self.model_offer.minimumHeight() != height:
            self.model_offer.setMinimumHeight(height)

    def _fit_card(self) -> None:
        """The indexing card as tall as its wrapped words need at its width.

        The sidebar's splitter sizes the panel by minimum sizes, which know nothing of
        word wrapping: a card given its one-line height laid its wrapped detail over the
        bar. Its minimum height follows its width instead."""
        layout = self.progress_card.layout()
        width = self.progress_card.width()
        if layout is None or width <= 0:
            return
        height = layout.totalHeightForWidth(width)
        if height > 0 and self.progress_card.minimumHeight() != height:
            self.progress_card.setMinimumHeight(height)

    @staticmethod
    def _key(item: QTreeWidgetItem) -> str:
        return f"{item.data(0, ROLE_KIND)}:{item.data(0, ROLE_PATH)}"

    def set_snapshot(self, snapshot: LibrarySnapshot) -> None:
        previous, self.snapshot = self.snapshot, snapshot
        palette = self.theme.palette
        # While indexing, snapshots come every 1.5 s and usually change only the counts:
        # update those in place rather than rebuilding the tree under the user's cursor.
        if (
            previous is not None
            and [f.path for f in previous.folders] == [f.path for f in snapshot.folders]
            and previous.problems == snapshot.problems
            and set(self._rows) == {f.path for f in snapshot.folders}
            and self._watch_shown == self.backend.indexing.watch_status
            and self._palette_shown == palette.name
        ):
            for folder in snapshot.folders:
                self._fill_row(self._rows[folder.path], folder, palette)
            self._fit_rows()
            self._update_summary(snapshot)
            self._show_model_offer(snapshot)
            return
        self._watch_shown = dict(self.backend.indexing.watch_status)
        self._palette_shown = palette.name
        selected = self.tree.currentItem()
        selected_key = self._key(selected) if selected else None
        scroll = self.tree.verticalScrollBar().value()
        self.tree.clear()
        self._rows.clear()
        for folder in snapshot.folders:
            item = QTreeWidgetItem(self.tree)
            item.setData(0, ROLE_PATH, folder.path)
            item.setData(0, ROLE_KIND, "folder")
            row = FolderRow(partial(self._folder_menu, folder.path))
            self._fill_row(row, folder, palette)
            item.setSizeHint(0, QSize(100, FOLDER_ROW_HEIGHT))
            self.tree.setItemWidget(item, 0, row)
            self._rows[folder.path] = row
            self._add_problems(item, snapshot.problems.get(folder.path, ()), palette)
            key = self._key(item)
            if key in self._expanded:
                item.setExpanded(True)
            if key == selected_key:
                self.tree.setCurrentItem(item)
        self.tree.verticalScrollBar().setValue(scroll)
        self._fit_rows()
        self._update_summary(snapshot)
        self._show_model_offer(snapshot)

    def _update_summary(self, snapshot: LibrarySnapshot) -> None:
        has = bool(snapshot.folders)
        self.empty.setVisible(not has)
        self.tree.setVisible(has)
        if has:
            waiting = max(0, snapshot.chunks - snapshot.embedded)
            self.summary.setText(
                f"{count_of(snapshot.documents, 'file')} · {count_of(snapshot.chunks, 'passage')}"
                + (f" · {waiting} found by keyword only until embedded" if waiting else "")
                + (f"\n{plain_words(snapshot.switching)}" if snapshot.switching else "")
            )
        self._set_summary_visible(has and not self.progress_card.isVisible())

    def _show_model_offer(self, snapshot: LibrarySnapshot) -> None:
        words, figures = offer_words(snapshot.advice)
        self.model_offer_text.setText(words)
        self.model_offer_details.set_details(figures)
        self.model_offer.setVisible(bool(snapshot.advice and snapshot.advice_model))
        self._fit_offer()

    def _accept_model_offer(self) -> None:
        snapshot = self.snapshot
        if snapshot is not None and snapshot.advice_model:
            self.model_offer.hide()
            self.backend.indexing.switch_model(snapshot.advice_model)

    def _decline_model_offer(self) -> None:
        self.model_offer.hide()
        self.backend.view.decline_offer()

    def _set_summary_visible(self, visible: bool) -> None:
        """The summary, and under it the switch's Pause while a model switch runs."""
        self.summary.setVisible(visible)
        self.check_button.setVisible(visible)
        self.switch_button.setVisible(
            visible and self.snapshot is not None and bool(self.snapshot.switching)
        )
        self._label_switch_button()

    def _label_switch_button(self) -> None:
        paused = self.backend.indexing.paused
        self.switch_button.setText("Resume" if paused else "Pause")
        self.switch_button.setAccessibleName(
            "Resume switching the embedding model"
            if paused
            else "Pause switching the embedding model"
        )

    def _toggle_switch(self) -> None:
        work = self.backend.indexing
        if work.paused:
            work.resume()
        else:
            work.pause()
        self.backend.view.refresh()  # the summary's "(paused with indexing)"

    def _fill_row(self, row: FolderRow, folder: FolderStatus, palette: Palette) -> None:
        name = os.path.basename(folder.path.rstrip(os.sep)) or folder.path
        row.name.set_full_text(name)
        row.path.set_full_text(display_path(folder.path))
        # Green says "searchable": not of a folder with nothing indexed yet.
        dot = palette.success if folder.indexed else palette.faint
        parts = [f'<span style="color:{dot};">●</span> {folder.indexed} indexed']
        if folder.ocr:
            parts.append(f"{folder.ocr} read by OCR")
        if folder.failed:
            parts.append(f'<span style="color:{palette.error_text};">{folder.failed} failed</span>')
        if folder.skipped:
            parts.append(f"{folder.skipped} skipped")
        if folder.pending:
            parts.append(f"{folder.pending} waiting")
        watch_state, watch_reason = self.backend.indexing.watch_status.get(folder.path, ("", ""))
        if not folder.online or watch_state == "offline":
            parts = [
                f'<span style="color:{palette.warning_text};">offline — not found on disk</span>',
                *parts,
            ]
        elif watch_state == "polling":
            parts.append(f'<span style="color:{palette.faint};">checked periodically</span>')
        row.counts.setText(" · ".join(parts))
        tip = f"{folder.path}\n{folder.chunks} passages"
        if watch_state == "watching":
            tip += "\nWatched: changes are indexed within seconds."
        elif watch_reason:
            tip += f"\n{watch_reason[:1].upper()}{watch_reason[1:]}."
        row.setToolTip(tip)
        row.icon.setPixmap(
            icon(
                "folder" if folder.online else "folder-off",
                palette.accent if folder.online else palette.faint,
                20,
            ).pixmap(20, 20)
        )

    def _add_problems(
        self, parent: QTreeWidgetItem, docs: tuple[Document, ...], palette: Palette
    ) -> None:
        failed = [d for d in docs if d.state.value == "failed"]
        skipped = [d for d in docs if d.state.value == "skipped"]
        for kind, group, name, color in (
            ("failed", failed, "error", palette.error_text),
            ("skipped", skipped, "info", palette.muted),
        ):
            if not group:
                continue
            head = QTreeWidgetItem(parent)
            head.setText(
                0,
                f"{len(group)} {kind}" + (" — select a file to retry" if kind == "failed" else ""),
            )
            head.setIcon(0, icon(name, color, 16))
            head.setData(0, ROLE_KIND, f"group-{kind}")
            head.setData(0, ROLE_PATH, parent.data(0, ROLE_PATH))
            head.setToolTip(
                0,
                "Files Lectern could not read. Right-click one to retry."
                if kind == "failed"
                else "Files Lectern does not read (unsupported types) or that hold no text.",
            )
            for doc in group[:MAX_LISTED]:
                child = QTreeWidgetItem(head)
                file_name = os.path.basename(doc.path)
                said = plain_reason(doc.reason)[0]
                child.setText(0, f"{file_name} — {said}")
                child.setData(0, ROLE_KIND, "file")
                child.setData(0, ROLE_PATH, doc.path)
                child.setToolTip(0, f"{doc.path}\n{said}\n{next_step(doc.reason)}")
            if len(group) > MAX_LISTED:
                more = QTreeWidgetItem(head)
                more.setText(0, f"and {len(group) - MAX_LISTED} more (see Files…)")
                more.setData(0, ROLE_KIND, "more")
            if self._key(head) in self._expanded:
                head.setExpanded(True)

    def _folder_items(self) -> list[QTreeWidgetItem]:
        tree = self.tree
        return [
            item
            for i in range(tree.topLevelItemCount())
            if (item := tree.topLevelItem(i)) is not None
        ]

    def expand_problems(self) -> None:
        for item in self._folder_items():
            item.setExpanded(True)
            for child in _children(item):
                child.setExpanded(True)

    def problem_items(self) -> list[QTreeWidgetItem]:
        found = []
        for folder in self._folder_items():
            for group in _children(folder):
                for entry in _children(group):
                    if entry.data(0, ROLE_KIND) == "file":
                        found.append(entry)
        return found

    # --- actions --------------------------------------------------------------------

    def _activated(self, item: QTreeWidgetItem, _column: int) -> None:
        if item.data(0, ROLE_KIND) == "file":
            self.retry([str(item.data(0, ROLE_PATH))])

    def retry(self, paths: list[str]) -> None:
        self.backend.indexing.retry(paths)

    def _failed_in(self, folder: str) -> list[str]:
        docs = self.snapshot.problems.get(folder, ()) if self.snapshot else ()
        return [d.path for d in docs if d.state.value == "failed"]

    def folder_menu(self, path: str) -> QMenu:
        """The actions on one library folder."""
        menu = QMenu(self)
        menu.addAction(icon("file"), "Show files", lambda: self.open_file_list(path))
        menu.addAction(icon("refresh"), "Rescan", self.rescan_requested.emit)
        failed = self._failed_in(path)
        if failed:  # not "Retry 0 failed file(s)", greyed out, in every folder's menu
            menu.addAction(
                icon("refresh"),
                f"Retry {count_of(len(failed), 'failed file')}",
                lambda: self.retry(failed),
            )
        menu.addAction(icon("folder"), "Open in file manager", lambda: _open(path))
        menu.addSeparator()
        menu.addAction(
            icon("trash"), "Remove from library…", lambda: self.remove_requested.emit(path)
        )
        return menu

    def _folder_menu(self, path: str, pos: QPoint) -> None:
        self.folder_menu(path).exec(pos)

    def _context_menu(self, pos: QPoint) -> None:
        item = self.tree.itemAt(pos)
        if item is None:
            return
        kind = item.data(0, ROLE_KIND)
        path = str(item.data(0, ROLE_PATH) or "")
        global_pos = self.tree.viewport().mapToGlobal(pos)
        if kind == "folder":
            self._folder_menu(path, global_pos)
            return
        menu = QMenu(self)
        if kind == "file":
            menu.addAction(icon("refresh"), "Retry", lambda: self.retry([path]))
            menu.addAction(icon("external"), "Open file", lambda: _open(path))
            menu.addAction(icon("folder"), "Show in folder", lambda: _open(os.path.dirname(path)))
        elif kind == "group-failed":
            failed = self._failed_in(path)
            menu.addAction(icon("refresh"), f"Retry all {len(failed)}", lambda: self.retry(failed))
        else:
            return
        menu.exec(global_pos)

    def open_file_list(self, folder: str | None = None) -> FileListWindow:
        """The window listing every file (or ``folder``'s) with its state, failed first."""
        if self.file_list is None:
            self.file_list = FileListWindow(self.backend, self.theme, self.window())
        self.file_list.show_folder(folder)
        return self.file_list

    def _remove_current(self) -> None:
        item = self.tree.currentItem()
        if item is not None and item.data(0, ROLE_KIND) == "folder":
            self.remove_requested.emit(str(item.data(0, ROLE_PATH)))

    def _menu_for_current(self) -> None:
        item = self.tree.currentItem()
        if item is not None:
            rect = self.tree.visualItemRect(item)
            self._context_menu(rect.center())

    # --- progress -------------------------------------------------------------------

    def _index_started(self, job: IndexJob) -> None:
        self._start_title = (
            "Retrying…"
            if job.retry
            else "Checking for changes…"
            if job.paths is None
            else "Indexing…"
        )
        self._last_progress = None
        self.progress_detail.setText("Looking for new and changed files…")
        self.progress_current.set_full_text("")
        self._show_running()
        self._paused(self.backend.indexing.paused)
        self.progress_card.show()
        self._set_summary_visible(False)
        self._fit_card()

    def _show_state(self, state: IndexingState) -> None:
        """The card's title and bar as ``state`` says (the status bar reads the same)."""
        share = state.share
        if share is None:
            self.progress_title.setText("Paused" if state.phase == "paused" else self._start_title)
        else:
            self.progress_title.setText(f"{state.verb} · {share} %")
        if state.progress is not None:
            self.progress_bar.setRange(0, 1000)
            self.progress_bar.setValue(round(1000 * state.progress.fraction))
            self.progress_bar.setAccessibleName(f"Indexing progress: {share} %")
        elif state.moving:
            self.progress_bar.setRange(0, 0)  # busy, no count yet
        else:
            # Paused or waiting before the first count: a still bar, never a moving one.
            self.progress_bar.setRange(0, 1000)
            self.progress_bar.setValue(0)

    def _show_running(self) -> None:
        self.resume_button.hide()
        self.pause_button.show()
        self.cancel_button.show()
        self.progress_bar.show()

    def _cancelled(self, cancelled: bool) -> None:
        if cancelled:
            self._show_cancelled()
        elif not self.backend.indexing.active:
            self._finished(None)

    def _show_cancelled(self) -> None:
        left = self.backend.indexing.not_indexed
        self.progress_title.setText("Indexing cancelled")
        self.progress_detail.setText(
            f"{left} file{'s' if left != 1 else ''} not indexed yet"
            if left
            else "Some files may not be indexed yet"
            if left is None
            else "Files finished so far are searchable"
        )
        self.progress_current.set_full_text("Nothing is indexed until you resume.")
        self.progress_current.setToolTip(
            "Changes to your folders are noted meanwhile and indexed when you resume "
            "(Resume, F5, Retry or adding a folder)."
        )
        self.progress_bar.hide()
        self.pause_button.hide()
        self.cancel_button.hide()
        self.resume_button.show()
        self.progress_card.show()
        self._set_summary_visible(False)
        self._fit_card()

    def set_progress(self, p: IndexProgress) -> None:
        if self.backend.indexing.cancelled:
            return  # a cancelled run's last reports
        if not self.progress_card.isVisible() or self.resume_button.isVisible():
            self._show_running()
            self.progress_card.show()
            self._set_summary_visible(False)
        self.indexing.take(p)
        state = self.indexing.state
        paused = state.phase == "paused"
        # Waiting for the computer to be idle (Settings > Indexing, core/indexing/throttle.py).
        waiting = state.phase == "waiting"
        # Files are written (keyword-searchable) first and embedded behind: the bar counts
        # the model's work, the slow part, so it moves evenly from start to end. The title
        # gives the bar's own share, so the two never disagree ("32 of 37 files" over a
        # bar at 12 % did), and the files read are said as what they are below it.
        self._show_state(state)
        bits: list[str] = []
        if p.files_total and p.files_done < p.files_total:
            bits.append(f"{p.files_done} of {count_of(p.files_total, 'file')} read")
            rate = p.files_per_s
            if rate > 0:
                bits.append(f"{rate:.1f} files/s" if rate >= 0.95 else f"{rate * 60:.0f} files/min")
        elif p.passages_total > p.passages_embedded:
            bits.append(
                f"all {count_of(p.files_total, 'file')} searchable by keyword"
                if p.files_total
                else "searchable by keyword"
            )
            bits.append(
                # Every passage is searchable by meaning already; the model is making what
                # the closer ranking of the best matches reads (core/store/pieces.py).
                ("preparing closer ranking: " if p.packing_pieces else "meaning search: ")
                + f"{p.passages_embedded:,}".replace(",", "\u202f")  # as count_of writes it
                + f" of {count_of(p.passages_total, 'passage')}"
            )
        elif p.files_total:
            bits.append(f"{p.files_done} of {count_of(p.files_total, 'file')} read")
        if waiting:
            bits = [BUSY_WAITING[0].upper() + BUSY_WAITING[1:]]
        elif paused:
            pass  # the title says Paused; "· paused" under it said it twice
        else:
            bits.append(fmt_duration(p.eta_s))
            if self.backend.settings.index_when == "share":  # why it goes slower
                bits.append(f"at most {self.backend.settings.index_cpu_share} % of the CPU")
        if p.failed:
            bits.append(f"{p.failed} failed")
        self.progress_detail.setText(" · ".join(bits))
        current = os.path.basename(p.current) if p.current else ""
        self.progress_current.set_full_text(current)
        self.progress_current.setToolTip(p.current)
        self._fit_card()
        self._last_progress = p

    def _paused(self, paused: bool) -> None:
        self._label_switch_button()
        if self.backend.indexing.cancelled:
            return
        palette = self.theme.palette
        self.pause_button.setProperty("iconName", "play" if paused else "pause")
        self.pause_button.setIcon(icon("play" if paused else "pause", palette.muted))
        tip = "Resume indexing" if paused else "Pause indexing"
        self.pause_button.setToolTip(tip)
        self.pause_button.setAccessibleName(tip)
        self._show_state(self.indexing.state)
        if paused:
            self.progress_detail.setText("Finished files are already searchable")
            self._fit_card()
        elif self._last_progress is not None:
            self.set_progress(self._last_progress)  # not "paused" until the next report

    def _toggle_pause(self) -> None:
        work = self.backend.indexing
        if work.paused:
            work.resume()
        else:
            work.pause()

    def _watch_idle(self) -> None:
        if not self.backend.indexing.active:
            self._finished(None)

    def _finished(self, report: IndexReport | None) -> None:
        if self.backend.indexing.active:
            return
        if self.backend.indexing.cancelled:
            self._show_cancelled()
            return
        self.progress_card.hide()
        self._set_summary_visible(bool(self.snapshot and self.snapshot.folders))

    def _index_failed(self, message: str, hint: str) -> None:
        self.progress_card.hide()
        self.summary.setText(f"Indexing stopped: {message} {hint}")
        self._set_summary_visible(True)


def _open(path: str) -> None:
    with session_umask():
        QDesktopServices.openUrl(QUrl.fromLocalFile(path))
