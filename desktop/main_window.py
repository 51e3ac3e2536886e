"""The main window: library on the left, the conversation in the middle, evidence on the
right. Folders dropped anywhere on it are added to the library."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from core.app import ops
from core.app.ops import Changes
from core.store.export import export_file_name
from desktop.about import AboutDialog
from desktop.backend import Backend
from desktop.conversation_panel import ConversationPanel
from desktop.evidence_panel import EvidencePanel
from desktop.library_panel import LibraryPanel
from desktop.qt import (
    QAbstractItemView,
    QAction,
    QApplication,
    QByteArray,
    QCloseEvent,
    QColor,
    QDragEnterEvent,
    QDragLeaveEvent,
    QDragMoveEvent,
    QDropEvent,
    QFileDialog,
    QFont,
    QFontMetrics,
    QFrame,
    QHBoxLayout,
    QKeySequence,
    QLabel,
    QLineEdit,
    QListWidget,
    QListWidgetItem,
    QMainWindow,
    QMenu,
    QMessageBox,
    QPainter,
    QPaintEvent,
    QPen,
    QProgressBar,
    QPushButton,
    QRect,
    QSettings,
    QShortcut,
    QSize,
    QSplitter,
    QStandardPaths,
    QStyle,
    QStyledItemDelegate,
    QStyleOptionViewItem,
    Qt,
    QTimer,
    QToolButton,
    QUrl,
    QVBoxLayout,
    QWidget,
    Signal,
    named,
)
from desktop.rich import count_of
from desktop.settings_dialog import SettingsDialog
from desktop.theme import Palette, Theme, app_icon, icon
from desktop.viewmodels import IndexingState, plain_words
from desktop.welcome_view import readable_formats
from desktop.workers import describe_error

if TYPE_CHECKING:
    from desktop.library_check import LibraryCheckDialog

DEFAULT_SIZE = QSize(1360, 860)
# Item data beside the conversation id: the title as stored (an inline edit changes the
# text first) and, while searching, where the words matched.
TITLE_ROLE = Qt.ItemDataRole.UserRole + 1
SNIPPET_ROLE = Qt.ItemDataRole.UserRole + 2
SEARCH_DELAY_MS = 150  # typing pauses this long before the conversations are searched


def local_paths(urls: Sequence[QUrl]) -> list[str]:
    return [u.toLocalFile() for u in urls if u.isLocalFile() and u.toLocalFile()]


class DropOverlay(QWidget):
    """Covers the window while something is dragged over it, saying what a drop does."""

    def __init__(self, theme: Theme, parent: QWidget) -> None:
        super().__init__(parent)
        self.theme = theme
        self.setAttribute(Qt.WidgetAttribute.WA_TransparentForMouseEvents)
        self.hide()

    def paintEvent(self, event: QPaintEvent) -> None:
        p: Palette = self.theme.palette
        painter = QPainter(self)
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        veil = QColor(p.window)
        veil.setAlpha(225)
        painter.fillRect(self.rect(), veil)
        box = self.rect().adjusted(28, 28, -28, -28)
        pen = QPen(QColor(p.accent), 2.5, Qt.PenStyle.DashLine)
        painter.setPen(pen)
        soft = QColor(p.accent_soft)
        soft.setAlpha(160)
        painter.setBrush(soft)
        painter.drawRoundedRect(box, 18, 18)
        pixmap = icon("drop", p.accent, 56).pixmap(56, 56)
        center = box.center()
        painter.drawPixmap(center.x() - 28, center.y() - 70, pixmap)
        painter.setPen(QColor(p.text))
        font = painter.font()
        font.setPointSizeF(font.pointSizeF() * 1.6)
        font.setBold(True)
        painter.setFont(font)
        painter.drawText(
            box.adjusted(0, 10, 0, 0), Qt.AlignmentFlag.AlignCenter, "Drop folders to add them"
        )
        font.setPointSizeF(font.pointSizeF() / 1.6)
        font.setBold(False)
        painter.setFont(font)
        painter.setPen(QColor(p.muted))
        painter.drawText(
            box.adjusted(40, 70, -40, 0),
            int(Qt.AlignmentFlag.AlignCenter | Qt.TextFlag.TextWordWrap),
            f"Lectern indexes every {readable_formats()} file inside, and keeps watching.",
        )
        painter.end()


class MatchDelegate(QStyledItemDelegate):
    """While searching, a conversation shows under its title the words that matched in
    its questions or answers (a title match needs no second line)."""

    def __init__(self, theme: Theme, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.theme = theme

    @staticmethod
    def _font(option: QStyleOptionViewItem) -> QFont:
        font = QFont(option.font)
        # The style sheet sets sizes in pixels, which leaves the point size unset (-1).
        if font.pointSizeF() > 0:
            font.setPointSizeF(font.pointSizeF() * 0.88)
        elif font.pixelSize() > 0:
            font.setPixelSize(max(9, round(font.pixelSize() * 0.88)))
        return font

    def sizeHint(self, option: QStyleOptionViewItem, index: Any) -> QSize:
        size = super().sizeHint(option, index)
        if index.data(SNIPPET_ROLE):
            size.setHeight(size.height() + QFontMetrics(self._font(option)).height() + 2)
        return size

    def paint(self, painter: QPainter, option: QStyleOptionViewItem, index: Any) -> None:
        snippet = str(index.data(SNIPPET_ROLE) or "")
        if not snippet:
            super().paint(painter, option, index)
            return
        opt = QStyleOptionViewItem(option)
        self.initStyleOption(opt, index)
        opt.displayAlignment = Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignTop
        widget = opt.widget
        style = widget.style() if widget is not None else QApplication.style()
        style.drawControl(QStyle.ControlElement.CE_ItemViewItem, opt, painter, widget)
        text = style.subElementRect(QStyle.SubElement.SE_ItemViewItemText, opt, widget)
        font = self._font(opt)
        metrics = QFontMetrics(font)
        line = QRect(
            text.left(),
            text.top() + opt.fontMetrics.height() + 2,
            text.width(),
            metrics.height(),
        )
        painter.save()
        painter.setFont(font)
        painter.setPen(QColor(self.theme.palette.muted))
        painter.drawText(
            line,
            int(Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter),
            metrics.elidedText(snippet, Qt.TextElideMode.ElideRight, line.width()),
        )
        painter.restore()


class ConversationList(QFrame):
    """Kept conversations, most recent first, with a search box above them; a title is
    renamed in place (double-click, F2 or the context menu)."""

    query_changed = Signal(str)  # the search words, once typing pauses ("" : show all)
    rename_requested = Signal(int, str)  # conversation id, the title as typed

    def __init__(self, theme: Theme, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("conversationList")
        self.theme = theme
        self.conversations: list[Any] = []
        self.current: int | None = None
        self.shown_query = ""  # the query whose matches the list shows ("" : all of them)
        lay = QVBoxLayout(self)
        lay.setContentsMargins(10, 8, 10, 10)
        lay.setSpacing(6)
        head = QHBoxLayout()
        head.setContentsMargins(6, 0, 0, 0)
        head.addWidget(named(QLabel("Conversations"), "sidebarTitle"))
        head.addStretch(1)
        self.new_button = named(QToolButton(), "iconButton")
        self.new_button.setToolTip("New conversation (Ctrl+N)")
        self.new_button.setAccessibleName("New conversation")
        self.new_button.setIconSize(QSize(17, 17))
        head.addWidget(self.new_button)
        lay.addLayout(head)
        self.search = named(QLineEdit(), "conversationSearch")
        self.search.setPlaceholderText("Search conversations")
        self.search.setAccessibleName("Search conversations")
        self.search.setToolTip("Find conversations by their title, questions or answers")
        self.search.setClearButtonEnabled(True)
        self._search_icon = self.search.addAction(
            icon("search", theme.palette.faint, 16), QLineEdit.ActionPosition.LeadingPosition
        )
        lay.addWidget(self.search)
        self._search_timer = QTimer(self)
        self._search_timer.setSingleShot(True)
        self._search_timer.setInterval(SEARCH_DELAY_MS)
        self._search_timer.timeout.connect(lambda: self.query_changed.emit(self.query))
        self.search.textChanged.connect(self._typed)
        clear = QShortcut(QKeySequence(Qt.Key.Key_Escape), self.search)
        clear.setContext(Qt.ShortcutContext.WidgetShortcut)
        clear.activated.connect(self.search.clear)
        self.list = named(QListWidget(), "conversationItems")
        self.list.setFrameShape(QFrame.Shape.NoFrame)
        self.list.setContextMenuPolicy(Qt.ContextMenuPolicy.CustomContextMenu)
        self.list.setAccessibleName("Conversations")
        self.list.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.list.setTextElideMode(Qt.TextElideMode.ElideRight)
        self.list.setEditTriggers(QAbstractItemView.EditTrigger.DoubleClicked)
        self.list.setItemDelegate(MatchDelegate(theme, self.list))
        self.list.itemChanged.connect(self._edited)
        self._pending: list[tuple[Any, Any]] | None = None
        self.list.itemDelegate().closeEditor.connect(
            lambda *_: QTimer.singleShot(0, self._fill_pending)
        )
        rename = QShortcut(QKeySequence(Qt.Key.Key_F2), self.list)
        rename.setContext(Qt.ShortcutContext.WidgetShortcut)
        rename.activated.connect(self.rename_current)
        lay.addWidget(self.list, 1)
        self.empty = named(QLabel("Your questions and answers are kept here."), "sidebarEmpty")
        self.empty.setWordWrap(True)
        self.empty.setTextFormat(Qt.TextFormat.PlainText)  # the query is shown as typed
        lay.addWidget(self.empty)
        theme.changed.connect(self._restyle)
        self.new_button.setIcon(icon("new-chat", theme.palette.muted))

    def _restyle(self, palette: Palette) -> None:
        self.new_button.setIcon(icon("new-chat", palette.muted))
        self._search_icon.setIcon(icon("search", palette.faint, 16))

    @property
    def query(self) -> str:
        return " ".join(self.search.text().split())

    def _typed(self, _text: str) -> None:
        if not self.query:
            # Cleared: every conversation at once, no search needed.
            self._search_timer.stop()
            self.shown_query = ""
            self._fill([(c, None) for c in self.conversations])
            self.query_changed.emit("")
        else:
            self._search_timer.start()

    def set_conversations(self, conversations: list[Any], current: int | None) -> None:
        """The whole list (after any change); while searching, the window searches again."""
        self.conversations = list(conversations)
        self.current = current
        if not self.query:
            self.shown_query = ""
            self._fill([(c, None) for c in conversations])

    def show_matches(self, query: str, matches: list[Any]) -> None:
        """What a search for ``query`` found; ignored if the words have changed since."""
        if query != self.query:
            return
        self.shown_query = query
        self._fill([(m.conversation, m) for m in matches])

    def _fill_pending(self) -> None:
        rows, self._pending = self._pending, None
        if rows is not None:
            self._fill(rows)

    def _fill(self, rows: list[tuple[Any, Any]]) -> None:
        if self.list.state() == QAbstractItemView.State.EditingState:
            # Rebuilding the list would throw away the title being typed: after the edit.
            self._pending = rows
            return
        self.list.blockSignals(True)
        self.list.clear()
        where = {"title": "Title", "question": "Question", "answer": "Answer"}
        for conv, found in rows:
            item = QListWidgetItem(conv.title)
            item.setData(Qt.ItemDataRole.UserRole, conv.id)
            item.setData(TITLE_ROLE, conv.title)
            item.setFlags(item.flags() | Qt.ItemFlag.ItemIsEditable)
            when = conv.created_at.strftime("%d %b %Y, %H:%M") if conv.created_at else ""
            tip = f"{conv.title}\n{conv.turn_count} question(s) · {when}"
            if found is not None:
                tip += f"\n{where.get(found.matched_in, 'Match')}: {found.snippet}"
                if found.matched_in != "title":
                    item.setData(SNIPPET_ROLE, found.snippet)
            item.setToolTip(tip)
            item.setIcon(icon("chat", self.theme.palette.faint, 16))
            self.list.addItem(item)
            if conv.id == self.current:
                self.list.setCurrentItem(item)
        self.list.blockSignals(False)
        searching = bool(self.query)
        if searching and not rows:
            self.empty.setText(f"No conversations match “{self.query}”.")
        else:
            self.empty.setText("Your questions and answers are kept here.")
        self.empty.setVisible(not rows and (searching or not self.conversations))
        self.list.setVisible(bool(rows))
        # Nothing to search yet: the box would only be in the way of the first question.
        self.search.setVisible(bool(self.conversations) or searching)

    def select(self, conversation_id: int | None) -> None:
        self.current = conversation_id
        self.list.blockSignals(True)
        self.list.clearSelection()
        self.list.setCurrentRow(-1)  # what setCurrentItem(None) does, in a typed call
        for i in range(self.list.count()):
            item = self.list.item(i)
            if item.data(Qt.ItemDataRole.UserRole) == conversation_id:
                self.list.setCurrentItem(item)
        self.list.blockSignals(False)

    def item_for(self, conversation_id: int) -> QListWidgetItem | None:
        for i in range(self.list.count()):
            item = self.list.item(i)
            if item.data(Qt.ItemDataRole.UserRole) == conversation_id:
                return item
        return None

    def rename(self, conversation_id: int) -> None:
        """Open the title of ``conversation_id`` for editing in place."""
        item = self.item_for(conversation_id)
        if item is not None:
            self.list.scrollToItem(item)
            self.list.editItem(item)

    def rename_current(self) -> None:
        item = self.list.currentItem()
        if item is not None:
            self.list.editItem(item)

    def set_title(self, conversation_id: int, title: str) -> None:
        """Show ``title`` (a rename done, or undone) without asking anything again."""
        item = self.item_for(conversation_id)
        if item is not None:
            self.list.blockSignals(True)
            item.setText(title)
            item.setData(TITLE_ROLE, title)
            self.list.blockSignals(False)
        self.conversations = [
            replace(c, title=title) if c.id == conversation_id else c for c in self.conversations
        ]

    def _edited(self, item: QListWidgetItem) -> None:
        before = str(item.data(TITLE_ROLE) or "")
        if item.text() != before:
            self.rename_requested.emit(int(item.data(Qt.ItemDataRole.UserRole)), item.text())


class Banner(QFrame):
    """A message across the top of the window for problems that stop everything."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("banner")
        lay = QHBoxLayout(self)
        lay.setContentsMargins(16, 10, 12, 10)
        self.icon = QLabel()
        lay.addWidget(self.icon)
        self.text = named(QLabel(), "bannerText")
        self.text.setWordWrap(True)
        self.text.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        lay.addWidget(self.text, 1)
        self.action = named(QPushButton("Try again"), "primaryButton")
        lay.addWidget(self.action)
        self.hide()


class MainWindow(QMainWindow):
    def __init__(
        self,
        backend: Backend,
        theme: Theme,
        qsettings: QSettings | None = None,
        parent: QWidget | None = None,
    ) -> None:
        super().__init__(parent)
        self.backend = backend
        self.theme = theme
        self.qsettings = qsettings or QSettings()
        self.setWindowTitle("Lectern")
        self.setWindowIcon(app_icon())
        self.setAcceptDrops(True)
        self.setMinimumSize(900, 560)
        self.settings_dialog: SettingsDialog | None = None
        self.conversations: list[Any] = []
        self.export_error: QMessageBox | None = None  # the last export failure shown
        # A rescan asked for ("asked"), then its run ("running"): its outcome is said when
        # that run ends, not when a run started before it does.
        self._rescan = ""

        self.library = LibraryPanel(backend, theme)
        self.conversation_list = ConversationList(theme)
        self.conversation = ConversationPanel(backend, theme)
        self.evidence = EvidencePanel(backend, theme)

        sidebar = named(QFrame(), "sidebar")
        side = QVBoxLayout(sidebar)
        side.setContentsMargins(0, 0, 0, 0)
        side.setSpacing(0)
        brand = named(QFrame(), "brand")
        bl = QHBoxLayout(brand)
        bl.setContentsMargins(16, 12, 12, 6)
        logo = QLabel()
        logo.setPixmap(app_icon().pixmap(26, 26))
        bl.addWidget(logo)
        bl.addWidget(named(QLabel("Lectern"), "brandName"))
        bl.addStretch(1)
        self.settings_button = named(QToolButton(), "iconButton")
        self.settings_button.setToolTip("Settings (Ctrl+,)")
        self.settings_button.setAccessibleName("Settings")
        self.settings_button.setIconSize(QSize(18, 18))
        self.settings_button.clicked.connect(lambda: self.open_settings())
        bl.addWidget(self.settings_button)
        side.addWidget(brand)
        self.side_split = named(QSplitter(Qt.Orientation.Vertical), "sideSplit")
        self.side_split.addWidget(self.library)
        self.side_split.addWidget(self.conversation_list)
        self.side_split.setStretchFactor(0, 5)
        self.side_split.setStretchFactor(1, 2)
        self.side_split.setChildrenCollapsible(False)
        self.side_split.setHandleWidth(8)
        side.addWidget(self.side_split, 1)

        self.banner = Banner()
        center = QWidget()
        cl = QVBoxLayout(center)
        cl.setContentsMargins(0, 0, 0, 0)
        cl.setSpacing(0)
        cl.addWidget(self.banner)
        self.split = named(QSplitter(Qt.Orientation.Horizontal), "mainSplit")
        self.split.addWidget(sidebar)
        self.split.addWidget(self.conversation)
        self.split.addWidget(self.evidence)
        self.split.setStretchFactor(0, 0)
        self.split.setStretchFactor(1, 1)
        self.split.setStretchFactor(2, 0)
        self.split.setCollapsible(1, False)
        # Minimums keep every pane usable however the splitters were left last time.
        sidebar.setMinimumWidth(250)
        self.conversation.setMinimumWidth(440)
        self.evidence.setMinimumWidth(320)
        self.split.setSizes([300, 640, 420])
        cl.addWidget(self.split, 1)
        self.setCentralWidget(center)
        self.overlay = DropOverlay(theme, center)

        self._build_status_bar()
        self._build_menus()
        self._connect()
        self._restore()
        theme.changed.connect(self._restyle)
        self._restyle(theme.palette)
        # After the engine is up: the cards use core's citation parser, which must not be
        # imported on this thread while the background is importing it.
        backend.startup.ready.connect(lambda: QTimer.singleShot(0, self._warm_up))

    # --- building ------------------------------------------------------------------------

    def _build_status_bar(self) -> None:
        bar = self.statusBar()
        bar.setObjectName("statusBar")
        bar.setSizeGripEnabled(True)
        self.phase_dot = named(QLabel("●"), "phaseDot")
        self.phase_label = named(QLabel("Starting…"), "phaseLabel")
        self.phase_busy = named(QProgressBar(), "phaseBusy")
        self.phase_busy.setRange(0, 0)
        self.phase_busy.setFixedSize(70, 5)
        self.phase_busy.setTextVisible(False)
        holder = QWidget()
        hl = QHBoxLayout(holder)
        hl.setContentsMargins(10, 0, 0, 0)
        hl.setSpacing(6)
        hl.addWidget(self.phase_dot)
        hl.addWidget(self.phase_label)
        hl.addWidget(self.phase_busy)
        bar.addWidget(holder)
        self.notice_label = named(QLabel(), "noticeLabel")
        self.notice_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        bar.addWidget(self.notice_label, 1)
        self._notice_timer = QTimer(self)
        self._notice_timer.setSingleShot(True)
        self._notice_timer.timeout.connect(lambda: self.notice_label.setText(""))

    def _action(
        self,
        menu: QMenu,
        text: str,
        slot: Any,
        shortcut: QKeySequence | QKeySequence.StandardKey | str | None = None,
        tip: str = "",
    ) -> QAction:
        action = QAction(text, self)
        if shortcut is not None:
            action.setShortcut(QKeySequence(shortcut))
        if tip:
            action.setStatusTip(tip)
            action.setToolTip(tip)
        action.triggered.connect(slot)
        menu.addAction(action)
        return action

    def check_search_quality(self) -> None:
        dialog = self.library_check_dialog()
        dialog.show()
        dialog.start()

    def library_check_dialog(self) -> LibraryCheckDialog:
        """The library check's window, its advice on searching wired to this window."""
        from desktop.library_check import LibraryCheckDialog

        dialog = LibraryCheckDialog(self.backend, self)
        dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        dialog.search_mode_chosen.connect(self.search_by)
        return dialog

    def search_by(self, words_only: bool) -> None:
        """Search, with Exact words (``words_only``) or Words and meaning chosen: the
        library check's advice taken."""
        self.conversation.set_search_mode(True)
        self.conversation.search_view.set_words_only(words_only)
        how = "containing the words you type" if words_only else "by words and meaning"
        self.show_notice("info", f"Search now finds passages {how}.")

    def _build_menus(self) -> None:
        bar = self.menuBar()
        file = bar.addMenu("&File")
        self.add_action = self._action(
            file,
            "&Add Folder…",
            self.add_folder_dialog,
            QKeySequence.StandardKey.Open,
            "Add a folder of documents to the library",
        )
        self._action(
            file,
            "&Rescan Library",
            self.rescan,
            "F5",
            "Look for new, changed and deleted files",
        )
        self._action(
            file,
            "Check &Search Quality…",
            self.check_search_quality,
            None,
            "How well Lectern finds things in your own documents, measured on questions "
            "made from them",
        )
        file.addSeparator()
        self.export_action = self._action(
            file,
            "&Export Conversation to Markdown…",
            lambda: self.export_conversation(),
            "Ctrl+Shift+E",
            "Save the open conversation, with the passages it cites, as a Markdown file",
        )
        self.export_action.setEnabled(False)
        file.addSeparator()
        self._action(
            file,
            "&Settings…",
            lambda: self.open_settings(),
            "Ctrl+,",
            "Model server, model, sources and appearance",
        )
        file.addSeparator()
        self._action(file, "&Quit", self.close, QKeySequence.StandardKey.Quit)

        edit = bar.addMenu("&Edit")
        self._action(
            edit,
            "&Copy Answer as Markdown",
            self.conversation.copy_last_answer,
            "Ctrl+Shift+C",
            "Copy the latest answer with its citations",
        )

        conv = bar.addMenu("&Conversation")
        self._action(conv, "&New Conversation", self.new_conversation, QKeySequence.StandardKey.New)
        self._action(conv, "&Ask a Question", self.focus_question, "Ctrl+L")
        self._action(
            conv, "&Stop Answer", self.conversation.stop, None, "Esc while typing also stops"
        )
        conv.addSeparator()
        self._action(conv, "Ask &Mode", lambda: self.conversation.set_search_mode(False), "Ctrl+1")
        self._action(
            conv, "Search-&Only Mode", lambda: self.conversation.set_search_mode(True), "Ctrl+2"
        )

        view = bar.addMenu("&View")
        self.evidence_action = self._action(
            view, "&Evidence Panel", self._toggle_evidence, "Ctrl+E"
        )
        self.evidence_action.setCheckable(True)
        self.evidence_action.setChecked(True)
        self.files_action = self._action(
            view,
            "Library &Files…",
            lambda: self.library.open_file_list(),
            "Ctrl+Shift+L",
            "Every file with its state, pages and passages; failed and skipped first",
        )

        help_menu = bar.addMenu("&Help")
        self._action(help_menu, "&Getting Started", self.new_conversation)
        self._action(help_menu, "&About Lectern", self.open_about)

        # Esc anywhere in the conversation stops the answer (the question box handles its own).
        stop = QShortcut(QKeySequence(Qt.Key.Key_Escape), self.conversation)
        stop.setContext(Qt.ShortcutContext.WidgetWithChildrenShortcut)
        stop.activated.connect(self.conversation.stop)

    def _connect(self) -> None:
        backend, startup, work = self.backend, self.backend.startup, self.backend.indexing
        startup.phase_changed.connect(self._phase)
        startup.failed.connect(self._failed)
        backend.notices.posted.connect(self.show_notice)
        backend.changed.connect(self._changed)
        backend.view.snapshot_changed.connect(
            lambda _s: self._phase("ready", "Ready") if startup.phase == "ready" else None
        )
        work.finished.connect(self._index_finished)
        # A job starting or pausing, the watcher's run reporting, a cancel: whatever the
        # card shows of indexing, the status bar says too.
        self.library.indexing.subscribe(self._indexing_changed)
        work.failed.connect(lambda m, h: self.show_notice("error", f"Indexing stopped: {m} {h}"))
        self.library.add_folder_requested.connect(self.add_folder_dialog)
        self.library.rescan_requested.connect(self.rescan)
        self.library.check_requested.connect(self.check_search_quality)
        work.watch_idle.connect(self._rescan_done)
        work.started.connect(self._rescan_started)
        self.library.remove_requested.connect(self.confirm_remove)
        self.conversation.evidence_requested.connect(self.show_evidence)
        self.conversation.open_settings.connect(lambda: self.open_settings())
        self.conversation.add_folder_requested.connect(self.add_folder_dialog)
        self.conversation.pull_requested.connect(lambda name: self.open_settings(start_pull=name))
        self.conversation.conversation_changed.connect(self.conversation_list.select)
        self.conversation.conversation_changed.connect(
            lambda cid: self.export_action.setEnabled(cid is not None)
        )
        self.conversation_list.new_button.clicked.connect(self.new_conversation)
        self.conversation_list.list.currentItemChanged.connect(self._conversation_picked)
        # A conversation clicked is read in Ask: from the Search tab a click showed only
        # its searches (or none). Keys that walk the list stay in the tab they are in.
        self.conversation_list.list.itemClicked.connect(
            lambda _item: self.conversation.set_search_mode(False)
        )
        self.conversation_list.list.customContextMenuRequested.connect(self._conversation_menu)
        self.conversation_list.query_changed.connect(self._search_conversations)
        self.conversation_list.rename_requested.connect(self.rename_conversation)
        self.banner.action.clicked.connect(self._retry_start)

    def _restyle(self, palette: Palette) -> None:
        self.settings_button.setIcon(icon("settings", palette.muted))
        self._phase(self.backend.startup.phase, self.phase_label.text())

    def _warm_up(self) -> None:
        """Lay out one answer card and one search card off screen.

        The first rich-text card of a session pays for font, glyph and style caches (about
        150 ms here); paying it as the app becomes ready keeps the first real answer or
        search from freezing the window mid-use."""
        from desktop.search_results import SearchResultsWidget
        from desktop.turn_view import TurnWidget
        from desktop.viewmodels import SourceView, TurnView

        source = SourceView(1, None, "warm-up.txt", "Warm up", "txt", 1, 1, "Warm up text.", 0, 1)
        turn = TurnView("Warm up?", "An **answer** [1].", "generated", "model", [source])
        for widget in (TurnWidget(turn, self.theme), SearchResultsWidget("warm up", self.theme)):
            if isinstance(widget, SearchResultsWidget):
                widget.loading = False
                widget.hits = [source]
                widget.refresh()
            widget.resize(700, 400)
            widget.grab()
            widget.deleteLater()

    # --- window state ---------------------------------------------------------------------

    def _restore(self) -> None:
        geometry = self.qsettings.value("window/geometry")
        if isinstance(geometry, QByteArray) and not geometry.isEmpty():
            self.restoreGeometry(geometry)
        else:
            self.resize(DEFAULT_SIZE)
        split = self.qsettings.value("window/splitter")
        if isinstance(split, QByteArray):
            self.split.restoreState(split)
        side = self.qsettings.value("window/sidebar")
        if isinstance(side, QByteArray):
            self.side_split.restoreState(side)
        else:
            # Most of the sidebar for the folders: at 3:2 a 1440x900 window showed three
            # of five whole, while the conversations' list had room to spare.
            self.side_split.setSizes([640, 260])
        if self.qsettings.value("conversation/mode") == "search":
            self.conversation.set_search_mode(True)
        finding = self.qsettings.value("search/find")
        if finding in ("words", "meaning"):
            self.conversation.search_view.set_words_only(finding == "words")
        if self.qsettings.value("window/evidence", "1") == "0":
            self.evidence_action.setChecked(False)
            self.evidence.hide()

    def save_state(self) -> None:
        self.qsettings.setValue("window/geometry", self.saveGeometry())
        self.qsettings.setValue("window/splitter", self.split.saveState())
        self.qsettings.setValue("window/sidebar", self.side_split.saveState())
        self.qsettings.setValue(
            "conversation/mode", "search" if self.conversation.search_only else "ask"
        )
        self.qsettings.setValue(
            "search/find", "words" if self.conversation.search_view.words_only else "meaning"
        )
        self.qsettings.setValue("window/evidence", "1" if self.evidence.isVisible() else "0")
        self.qsettings.sync()

    def closeEvent(self, event: QCloseEvent) -> None:
        self.save_state()
        # Gone from the screen at once; the backend then stops the index run, the watcher
        # and the parser without waiting out an embedding batch (see Backend.shutdown).
        self.hide()
        self.conversation.stop()
        self.backend.shutdown()
        super().closeEvent(event)

    def resizeEvent(self, event: Any) -> None:
        super().resizeEvent(event)
        central = self.centralWidget()
        if central is not None:
            self.overlay.setGeometry(central.rect())

    def bring_to_front(self, folders: Sequence[str] = ()) -> None:
        if self.isMinimized():
            self.showNormal()
        self.show()
        self.raise_()
        self.activateWindow()
        if folders:
            self.backend.indexing.add_folders(list(folders))

    # --- drag and drop -------------------------------------------------------------------

    def dragEnterEvent(self, event: QDragEnterEvent) -> None:
        if event.mimeData().hasUrls() and local_paths(event.mimeData().urls()):
            event.acceptProposedAction()
            central = self.centralWidget()
            if central is not None:
                self.overlay.setGeometry(central.rect())
            self.overlay.show()
            self.overlay.raise_()
        else:
            event.ignore()

    def dragMoveEvent(self, event: QDragMoveEvent) -> None:
        if event.mimeData().hasUrls():
            event.acceptProposedAction()

    def dragLeaveEvent(self, event: QDragLeaveEvent) -> None:
        self.overlay.hide()
        super().dragLeaveEvent(event)

    def dropEvent(self, event: QDropEvent) -> None:
        self.overlay.hide()
        paths = local_paths(event.mimeData().urls()) if event.mimeData().hasUrls() else []
        if not paths:
            event.ignore()
            return
        event.acceptProposedAction()
        self.handle_drop(paths)

    def handle_drop(self, paths: Sequence[str]) -> list[str]:
        accepted = self.backend.indexing.add_folders(list(paths))
        if accepted:
            names = ", ".join(os.path.basename(p.rstrip(os.sep)) or p for p in accepted)
            if self.library.indexing.state.phase == "paused":
                # "Adding…" beside "Indexing paused" would read as a contradiction.
                self.show_notice("info", f"{names} added: indexing is paused; resume to read it.")
            else:
                self.show_notice("info", f"Adding {names} to your library…")
        return accepted

    # --- actions ----------------------------------------------------------------------------

    def add_folder_dialog(self) -> None:
        start = self.folder_dialog_start()
        path = QFileDialog.getExistingDirectory(self, "Add a folder to your library", start)
        if path:
            self.folder_chosen(path)

    def folder_dialog_start(self) -> str:
        """Where "Add folder…" opens: beside the last folder chosen, else the user's
        documents, else their home (it opened at the home folder, /root for root)."""
        last = str(self.qsettings.value("library/last_folder", "") or "")
        # Its parent: the place browsed to, with the folder's neighbours to pick from.
        beside = os.path.dirname(last.rstrip(os.sep)) if last else ""
        if beside and os.path.isdir(beside):
            return beside
        documents = QStandardPaths.writableLocation(
            QStandardPaths.StandardLocation.DocumentsLocation
        )
        return documents if documents and os.path.isdir(documents) else os.path.expanduser("~")

    def folder_chosen(self, path: str) -> list[str]:
        """A folder picked in the dialog: remembered for the next one, and added."""
        self.qsettings.setValue("library/last_folder", path)
        return self.handle_drop([path])

    def confirm_remove(self, path: str) -> None:
        name = os.path.basename(path.rstrip(os.sep)) or path
        box = QMessageBox(self)
        box.setIcon(QMessageBox.Icon.Question)
        box.setWindowTitle("Remove folder")
        box.setText(f"Remove “{name}” from your library?")
        box.setInformativeText(
            "Its passages leave the index and are blanked in old answers. The files themselves "
            "stay where they are."
        )
        remove = box.addButton("Remove", QMessageBox.ButtonRole.DestructiveRole)
        box.addButton(QMessageBox.StandardButton.Cancel)
        box.setDefaultButton(QMessageBox.StandardButton.Cancel)
        box.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)  # one box each time asked
        box.open()
        box.finished.connect(lambda _r: self._removed(box, remove, path))

    def _removed(self, box: QMessageBox, remove: Any, path: str) -> None:
        if box.clickedButton() is remove:
            self.backend.indexing.remove_folder(path)
            if self.evidence.current is not None and self.evidence.current.path.startswith(path):
                self.evidence.clear()

    def open_settings(self, start_pull: str | None = None) -> SettingsDialog:
        if self.settings_dialog is not None:
            self.settings_dialog.raise_()
            if start_pull:
                self.settings_dialog.start_pull(start_pull)
            return self.settings_dialog
        appearance = str(self.qsettings.value("appearance", "system"))
        dialog = SettingsDialog(self.backend, self.theme, appearance, self, start_pull=start_pull)
        dialog.pulled.connect(lambda _name: self.backend.llm.check())
        dialog.accepted.connect(lambda: self._settings_saved(dialog))
        dialog.finished.connect(lambda _r: setattr(self, "settings_dialog", None))
        # A closed dialog kept as a hidden child would be polished again at every theme
        # change for as long as the window lives; the next opening makes a new one.
        dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        self.settings_dialog = dialog
        dialog.open()
        return dialog

    def _settings_saved(self, dialog: SettingsDialog) -> None:
        self.backend.apply_settings(dialog.form_settings())
        appearance = dialog.chosen_appearance
        self.qsettings.setValue("appearance", appearance)
        if appearance != self.theme.preference:
            self.theme.set_preference(appearance)
        self.backend.llm.check()

    def new_conversation(self) -> None:
        self.conversation.new_conversation()
        self.evidence.clear()

    def focus_question(self) -> None:
        self.conversation.input.setFocus()

    def show_evidence(self, request: Any) -> None:
        if not self.evidence.isVisible():
            self.evidence.show()
            self.evidence_action.setChecked(True)
        self.evidence.show_request(request)

    def _toggle_evidence(self) -> None:
        self.evidence.setVisible(self.evidence_action.isChecked())

    def open_about(self) -> AboutDialog:
        dialog = AboutDialog(self.backend, self, muted=self.theme.palette.muted)
        dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        dialog.open()
        return dialog

    # --- backend events --------------------------------------------------------------------

    def _phase(self, phase: str, text: str) -> None:
        p = self.theme.palette
        color = {
            "ready": p.success,
            "failed": p.error_text,
        }.get(phase, p.accent)
        # The library card's own account of indexing (desktop/viewmodels.py), so that the
        # two never disagree: paused there is paused here, with nothing moving.
        state = self.library.indexing.state
        said = state.status if phase == "ready" else ""
        if said:
            # Not "Ready" while a run goes on: search and answers work meanwhile, but what
            # they find is still growing.
            color = p.accent if state.moving else p.warning_text if state.active else p.muted
            text = said
        elif phase == "ready":
            snap = self.backend.view.snapshot
            text = "Ready" + (
                f" · {count_of(snap.documents, 'file')} indexed" if snap and snap.documents else ""
            )
        style = f"color: {color};"
        if self.phase_dot.styleSheet() != style:  # progress comes ten times a second
            self.phase_dot.setStyleSheet(style)
        self.phase_label.setText(text)
        self.phase_busy.setVisible(
            (bool(said) and state.moving) or phase in ("opening", "loading_model", "starting")
        )
        if phase == "ready":
            self.banner.hide()

    def _indexing_changed(self, _state: IndexingState) -> None:
        self._phase(self.backend.startup.phase, self.phase_label.text())

    def _failed(self, message: str, hint: str) -> None:
        p = self.theme.palette
        self.banner.icon.setPixmap(icon("error", p.error_text, 20).pixmap(20, 20))
        self.banner.text.setText(f"<b>Lectern could not open your library.</b> {message} {hint}")
        self.banner.show()

    def _retry_start(self) -> None:
        self.banner.hide()
        self.backend.retry_start()

    def _index_finished(self, report: Any) -> None:
        if self.backend.startup.phase == "ready":
            self._phase("ready", "Ready")
        changed = report.added + report.updated + report.removed
        if report.cancelled:
            self.show_notice("info", "Indexing cancelled. Files finished so far are searchable.")
        elif report.failed:
            self.show_notice(
                "warning",
                f"{count_of(report.failed, 'file')} could not be read; they are listed in the library with the reason.",
            )
            self.library.expand_problems()
        elif changed:
            self.show_notice(
                "info", f"Library up to date: {count_of(changed, 'file')} indexed or updated."
            )
        elif self._rescan == "running":
            self.show_notice("info", "Rescan done: no new, changed or deleted files.")
        if self._rescan == "running":
            self._rescan = ""

    def rescan(self) -> None:
        """F5, the Rescan button and menu item: look for changes, and say so."""
        snap = self.backend.view.snapshot
        if not self.backend.is_ready:
            self.show_notice(
                "info", "Lectern is still opening your library; rescan once it is ready."
            )
            return
        if snap is not None and not snap.folders:
            self.show_notice("info", "No folders to rescan yet: add a folder first.")
            return
        folders = count_of(len(snap.folders), "folder") if snap is not None else "your folders"
        self.show_notice("info", f"Rescanning {folders} for new, changed and deleted files…")
        self._rescan = "asked"
        self.backend.indexing.rescan()

    def _rescan_started(self, job: Any) -> None:
        if self._rescan == "asked" and job.is_full_rescan:
            self._rescan = "running"

    def _rescan_done(self) -> None:
        """The watcher's pass for a rescan ended (a run without a watcher ends in
        ``_index_finished``)."""
        if self._rescan and not self.backend.indexing.active:
            self._rescan = ""
            self.show_notice("info", "Rescan done: your library is up to date.")

    def show_notice(self, level: str, text: str) -> None:
        p = self.theme.palette
        color = {"error": p.error_text, "warning": p.warning_text}.get(level, p.muted)
        self.notice_label.setStyleSheet(f"color: {color};")
        # Core's notices name models by id (a new library that started multilingual).
        self.notice_label.setText(plain_words(text))
        self._notice_timer.start(12000 if level != "info" else 6000)

    def _changed(self, changes: Changes) -> None:
        if changes.conversations:
            self.backend.run(ops.conversations(), on_result=self._conversations)

    def _conversations(self, conversations: list[Any]) -> None:
        self.conversations = conversations
        self.conversation_list.set_conversations(conversations, self.conversation.conversation_id)
        if self.conversation_list.query:
            # A new answer or a rename may change what matches.
            self._search_conversations(self.conversation_list.query)

    def _conversation_picked(self, item: QListWidgetItem | None, _previous: object) -> None:
        if item is None:
            return
        conversation_id = item.data(Qt.ItemDataRole.UserRole)
        self.conversation.open_conversation(int(conversation_id), item.text())
        self.evidence.clear()

    def _conversation_menu(self, pos: Any) -> None:
        item = self.conversation_list.list.itemAt(pos)
        if item is None:
            return
        conversation_id = int(item.data(Qt.ItemDataRole.UserRole))
        menu = self.conversation_menu(conversation_id)
        menu.exec(self.conversation_list.list.viewport().mapToGlobal(pos))

    def conversation_menu(self, conversation_id: int) -> QMenu:
        menu = QMenu(self)
        rename = menu.addAction("Rename", lambda: self.conversation_list.rename(conversation_id))
        rename.setShortcut(QKeySequence(Qt.Key.Key_F2))
        menu.addAction(
            icon("copy"),
            "Export to Markdown…",
            lambda: self.export_conversation(conversation_id),
        )
        menu.addSeparator()
        menu.addAction(
            icon("trash"), "Delete conversation", lambda: self._delete_conversation(conversation_id)
        )
        return menu

    def _search_conversations(self, query: str) -> None:
        if not query:
            return
        self.backend.run(
            ops.search_conversations(query),
            on_result=lambda matches: self.conversation_list.show_matches(query, matches),
        )

    def _title_of(self, conversation_id: int) -> str:
        for conversation in self.conversation_list.conversations:
            if conversation.id == conversation_id:
                return str(conversation.title)
        if conversation_id == self.conversation.conversation_id:
            return self.conversation.conversation_title
        return ""

    def rename_conversation(self, conversation_id: int, title: str) -> None:
        before = self._title_of(conversation_id)

        def failed(exc: BaseException) -> None:
            self.conversation_list.set_title(conversation_id, before)
            message, hint = describe_error(exc)
            self.show_notice("error", f"{message} {hint}".strip())

        self.backend.run(
            ops.rename_conversation(conversation_id, title),
            on_result=self._renamed,
            on_error=failed,
        )

    def _renamed(self, conversation: Any) -> None:
        self.conversation_list.set_title(conversation.id, conversation.title)
        if self.conversation.conversation_id == conversation.id:
            # The panel's header shows the title too (it keeps it in conversation_title).
            self.conversation.conversation_title = conversation.title
            self.conversation.title.set_full_text(conversation.title)

    def export_conversation(self, conversation_id: int | None = None) -> None:
        """Ask where to save the conversation (the open one by default) as Markdown."""
        cid = conversation_id if conversation_id is not None else self.conversation.conversation_id
        if cid is None:
            self.show_notice("info", "Ask a question first: there is no conversation to export.")
            return
        folder = str(self.qsettings.value("export/folder", "") or "")
        if not folder or not os.path.isdir(folder):
            documents = os.path.expanduser("~/Documents")
            folder = documents if os.path.isdir(documents) else os.path.expanduser("~")
        suggested = os.path.join(folder, export_file_name(self._title_of(cid) or "Conversation"))
        path, _filter = QFileDialog.getSaveFileName(
            self, "Export conversation to Markdown", suggested, "Markdown (*.md);;All files (*)"
        )
        if not path:
            return
        if not os.path.splitext(path)[1]:
            path += ".md"
        self.backend.run(
            ops.export_conversation(cid, path).then(lambda _markdown: path),
            on_result=self._exported,
            on_error=self._export_failed,
        )

    def _exported(self, path: str) -> None:
        self.qsettings.setValue("export/folder", os.path.dirname(path))
        self.show_notice("info", f"Exported to {path}")

    def _export_failed(self, exc: BaseException) -> None:
        message, hint = describe_error(exc)
        box = QMessageBox(self)
        box.setIcon(QMessageBox.Icon.Warning)
        box.setWindowTitle("Export failed")
        box.setText("The conversation could not be exported.")
        box.setInformativeText(f"{message} {hint}".strip())
        box.setStandardButtons(QMessageBox.StandardButton.Ok)
        box.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        box.finished.connect(lambda _r: setattr(self, "export_error", None))
        self.export_error = box
        box.open()

    def _delete_conversation(self, conversation_id: int) -> None:
        if self.conversation.conversation_id == conversation_id:
            self.new_conversation()
        self.backend.run(ops.delete_conversation(conversation_id))
