"""The conversation panel: ask (or search), watch the answer arrive, check its sources.

Answers stream in through ``core.generation.qa.ask`` events. Tokens are appended to the turn and the
answer is re-rendered at most every few tens of milliseconds, so a fast model never makes
the window spend its time re-laying out text. The verified answer from the final event
replaces the streamed text, and its citation markers become links to the evidence panel.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from core.app import ops
from core.app.ops import Changes, ScopeChoices
from core.errors import LecternError
from core.records import Scope, type_name
from desktop.backend import Backend
from desktop.llm_monitor import answer_session
from desktop.model_probe import LLMStatus
from desktop.qt import (
    QAction,
    QEvent,
    QFocusEvent,
    QFrame,
    QHBoxLayout,
    QKeyEvent,
    QLabel,
    QMenu,
    QMouseEvent,
    QPlainTextEdit,
    QResizeEvent,
    QScrollArea,
    QSize,
    QStackedWidget,
    Qt,
    QTextCursor,
    QTextOption,
    QTimer,
    QToolButton,
    QVBoxLayout,
    QWidget,
    QWidgetAction,
    Signal,
    named,
)
from desktop.rich import shorten_words
from desktop.search_results import SearchResultsWidget, SearchView
from desktop.theme import Palette, Theme, icon
from desktop.turn_view import TurnWidget
from desktop.viewmodels import (
    CitationView,
    ErrorView,
    SourceView,
    TurnView,
    missing_model,
)
from desktop.welcome_view import WelcomeView
from desktop.widgets import ElidedLabel, display_path, segmented_control
from desktop.workers import Task, describe_error, error_details

if TYPE_CHECKING:
    from core.generation.answer_state import AnswerState, Change

MAX_COLUMN = 860


RENDER_INTERVAL_MS = 40
# The note on the quoted answer shown while a slow server reads the prompt.
DRAFT_NOTE = (
    "Quoted from your documents while the model reads the sources; its written answer "
    "replaces this when it starts."
)
# The badge without a model server: answers still come, quoted from the documents ("Search"
# is the other tab, which lists passages).
NO_MODEL = "No model · quoting passages"
# The room the conversation's title keeps in the header: when it would get less, the mode
# switch shows its icons only, then the model badge its short form (words in tooltips).
TITLE_ROOM = 160
# The badge's short forms, for a narrow window (the whole words stay in its tooltip).
SHORT_BADGES = {
    NO_MODEL: "No model",
    "Checking model…": "Checking…",
    "Server address invalid": "Bad address",
}
SHORT_MODEL_CHARS = 16


def short_badge(text: str, status: LLMStatus) -> str:
    """A few words for the model badge where its whole words do not fit."""
    if text in SHORT_BADGES:
        return SHORT_BADGES[text]
    if status.ready and len(text) > SHORT_MODEL_CHARS:
        # "qwen2.5:14b-instruct-q4_K_M": the name before its tag, and of a name with a
        # path ("hf.co/user/SmolLM2-135M-Instruct-GGUF") its last part; shortened after
        # a whole part of it ("SmolLM2-135M…", never "SmolLM2-135M-In…").
        name = text.split(":", 1)[0].rstrip("/").rsplit("/", 1)[-1] or text
        return shorten_words(name, SHORT_MODEL_CHARS)
    return text


# --- the question box ------------------------------------------------------------------

# The most lines the question box grows to; a longer question scrolls inside it.
MAX_LINES = 6


class QuestionEdit(QPlainTextEdit):
    """Enter sends, Shift+Enter starts a new line, Esc stops the answer."""

    submitted = Signal()
    stop_requested = Signal()
    focus_changed = Signal(bool)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("questionEdit")
        self.setTabChangesFocus(True)
        self.setWordWrapMode(QTextOption.WrapMode.WrapAtWordBoundaryOrAnywhere)
        self.setVerticalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAsNeeded)
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.setFrameShape(QFrame.Shape.NoFrame)
        self.document().documentLayout().documentSizeChanged.connect(self._fit)
        self.setAccessibleName("Question")
        self._fitting = False
        self._fit()

    def keyPressEvent(self, event: QKeyEvent) -> None:
        key = event.key()
        if key in (Qt.Key.Key_Return, Qt.Key.Key_Enter):
            if event.modifiers() & Qt.KeyboardModifier.ShiftModifier:
                self.insertPlainText("\n")
            else:
                self.submitted.emit()
            return
        if key == Qt.Key.Key_Escape:
            self.stop_requested.emit()
            return
        super().keyPressEvent(event)

    def focusInEvent(self, event: QFocusEvent) -> None:
        super().focusInEvent(event)
        self.focus_changed.emit(True)

    def focusOutEvent(self, event: QFocusEvent) -> None:
        super().focusOutEvent(event)
        self.focus_changed.emit(False)

    def _fit(self, *_: object) -> None:
        """As tall as the question's lines, up to MAX_LINES (then it scrolls), in whole
        lines: the height is measured on the laid-out lines themselves, in the font the
        style sheet gives. Reckoned from the font metrics before the style sheet's
        larger font applied, a two-line question showed a line and a half."""
        if self._fitting:
            return  # laying out a block below says the document's size changed
        self._fitting = True
        try:
            self._fit_lines()
        finally:
            self._fitting = False

    def _fit_lines(self) -> None:
        document = self.document()
        layout = document.documentLayout()
        # The box lays out only the lines it shows: the lines below the box's height
        # would count as one each, and the box would stay a line short.
        ensure = getattr(layout, "ensureBlockLayout", None)
        lines = 0
        line = 0.0  # one line's height, as laid out (every line has the box's one font)
        block = document.begin()
        while block.isValid():
            if block.isVisible():
                if callable(ensure) and lines <= MAX_LINES:
                    ensure(block)
                count = block.layout().lineCount()
                height = layout.blockBoundingRect(block).height()
                if count and height > 0 and not line:
                    line = height / count
                lines += max(1, count)  # a block not laid out yet is a line at least
            block = block.next()
        # Before any layout, a line is the font's height (no leading, as the layout).
        line = line or float(self.fontMetrics().height())
        shown = max(1, min(MAX_LINES, lines)) * line
        frame = 2 * self.frameWidth() + self.contentsMargins().top()
        frame += self.contentsMargins().bottom() + self.viewportMargins().top()
        frame += self.viewportMargins().bottom()
        # (+1: QPlainTextEdit counts a line as shown only with a pixel to spare below it,
        # and scrolls by one otherwise.)
        height = math.ceil(shown + 2 * document.documentMargin()) + frame + 1
        if height != self.height():
            self.setFixedHeight(height)

    def changeEvent(self, event: QEvent) -> None:
        super().changeEvent(event)
        if event.type() in (QEvent.Type.FontChange, QEvent.Type.StyleChange):
            self._fit()  # the style sheet's font comes after the box is made


# --- the scope on the question box ------------------------------------------------------


class ScopeMenu(QMenu):
    """A menu whose check boxes toggle without closing it, so several collections,
    folders and types can be picked in one go."""

    def mouseReleaseEvent(self, event: QMouseEvent) -> None:
        action = self.activeAction()
        if action is not None and action.isCheckable() and action.isEnabled():
            action.trigger()
            return
        super().mouseReleaseEvent(event)


def _folder_name(folder: str) -> str:
    return os.path.basename(folder.rstrip(os.sep)) or folder


# --- the panel ------------------------------------------------------------------------


class ConversationPanel(QFrame):
    evidence_requested = Signal(object)
    open_settings = Signal()
    add_folder_requested = Signal()
    pull_requested = Signal(str)
    conversation_changed = Signal(object)  # the current conversation id (None: new)

    def __init__(self, backend: Backend, theme: Theme, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("conversationPanel")
        self.backend = backend
        self.theme = theme
        self._downloads: dict[str, Any] = {}  # model -> ModelDownload started from an answer
        self.conversation_id: int | None = None
        self.conversation_title = ""
        self.items: list[QWidget] = []
        self.task: Task[object] | None = None
        self.active_turn: TurnWidget | None = None
        self._pending: tuple[str, str] | None = None
        self._keyword_search: SearchResultsWidget | None = None  # see _start_search
        self._render_timer = QTimer(self)
        self._render_timer.setSingleShot(True)
        self._render_timer.setInterval(RENDER_INTERVAL_MS)
        self._render_timer.timeout.connect(self._render_active)
        self._stick_to_bottom = True
        # What the conversation searches (saved with it), and what it can be made of.
        self.scope = Scope()
        self.choices = ScopeChoices()
        self.scope_menu: ScopeMenu | None = None
        self.collections_dialog: Any = None
        self._choice_folders: tuple[str, ...] | None = None
        self._scope_known = True  # False while a reopened conversation's scope is read
        self._pill_words = ("", "")  # the model badge's whole words and short form
        # What was typed and not sent, per conversation (None: the new, unsaved one): a
        # half-typed question stays with its conversation instead of following you.
        self._drafts: dict[int | None, str] = {}
        # The other tab's words: the search while Ask is shown, the open conversation's
        # draft while Search is. One box serves both, and a search's words left in it
        # became a half-typed question at Ctrl+1.
        self._other_tab_text = ""

        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(0)

        header = named(QFrame(), "panelHeader")
        head = QHBoxLayout(header)
        head.setContentsMargins(20, 10, 14, 10)
        head.setSpacing(8)
        self.title = ElidedLabel("New conversation", objectName="panelTitle", at_words=True)
        head.addWidget(self.title, 1)
        segment, self.mode_group, (self.ask_mode, self.search_mode) = segmented_control(
            self,
            [
                ("Ask", "Answers written from your documents, with citations (Ctrl+1)"),
                (
                    "Search",
                    "Search: ranked passages with your words highlighted, no language model "
                    "(Ctrl+2)",
                ),
            ],
            icons=True,
        )
        self.ask_mode.setChecked(True)
        self.mode_group.buttonToggled.connect(self._mode_changed)
        head.addWidget(segment)
        self.llm_pill = named(QToolButton(), "llmPill")
        self.llm_pill.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextBesideIcon)
        self.llm_pill.clicked.connect(self.open_settings.emit)
        head.addWidget(self.llm_pill)
        layout.addWidget(header)

        self.stack = QStackedWidget()
        self.welcome = WelcomeView(theme)
        self.welcome.add_folder.connect(self.add_folder_requested.emit)
        self.welcome.open_settings.connect(self.open_settings.emit)
        self.welcome.check_again.connect(lambda: self.backend.llm.check())
        self.welcome.pull_model.connect(self.pull_requested.emit)
        self.welcome.use_model.connect(self._use_model)
        self.stack.addWidget(self.welcome)

        self.scroll_area = named(QScrollArea(), "transcript")
        self.scroll_area.setWidgetResizable(True)
        self.scroll_area.setFrameShape(QFrame.Shape.NoFrame)
        self.scroll_area.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        holder = named(QWidget(), "transcriptHolder")
        hl = QHBoxLayout(holder)
        hl.setContentsMargins(24, 20, 24, 24)
        hl.addStretch(1)
        self.column = named(QWidget(), "transcriptColumn")
        self.column.setMaximumWidth(MAX_COLUMN)
        self.column_layout = QVBoxLayout(self.column)
        self.column_layout.setContentsMargins(0, 0, 0, 0)
        self.column_layout.setSpacing(22)
        self.column_layout.addStretch(1)
        hl.addWidget(self.column, 100)
        hl.addStretch(1)
        self.scroll_area.setWidget(holder)
        self.scroll_area.verticalScrollBar().rangeChanged.connect(self._range_changed)
        self.scroll_area.verticalScrollBar().valueChanged.connect(self._scrolled)
        self.stack.addWidget(self.scroll_area)
        # The Search tab's own list: results never join the transcript.
        self.search_view = SearchView(theme)
        self.search_view.evidence_requested.connect(self.evidence_requested.emit)
        self.search_view.mode_changed.connect(self._search_how_changed)
        self.stack.addWidget(self.search_view)
        layout.addWidget(self.stack, 1)

        composer_wrap = named(QFrame(), "composerWrap")
        cw = QVBoxLayout(composer_wrap)
        cw.setContentsMargins(24, 8, 24, 12)
        cw.setSpacing(6)
        crow = QHBoxLayout()
        crow.addStretch(1)
        self.composer = named(QFrame(), "composer")
        self.composer.setMaximumWidth(MAX_COLUMN)
        stacked = QVBoxLayout(self.composer)
        stacked.setContentsMargins(10, 8, 8, 8)
        stacked.setSpacing(4)
        scope_row = QHBoxLayout()
        scope_row.setContentsMargins(0, 0, 0, 0)
        self.scope_button = named(QToolButton(), "scopeChip")
        self.scope_button.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextBesideIcon)
        self.scope_button.setIconSize(QSize(13, 13))
        self.scope_button.setCursor(Qt.CursorShape.PointingHandCursor)
        self.scope_button.clicked.connect(self.show_scope_menu)
        scope_row.addWidget(self.scope_button)
        scope_row.addStretch(1)
        stacked.addLayout(scope_row)
        comp = QHBoxLayout()
        comp.setContentsMargins(4, 0, 0, 0)
        comp.setSpacing(8)
        stacked.addLayout(comp)
        self.input = QuestionEdit()
        self.input.submitted.connect(self.submit)
        self.input.stop_requested.connect(self.stop)
        self.input.focus_changed.connect(self._composer_focus)
        comp.addWidget(self.input, 1)
        self.send_button = named(QToolButton(), "sendButton")
        self.send_button.setIconSize(QSize(18, 18))
        self.send_button.setFixedSize(36, 36)
        self.send_button.clicked.connect(self._send_clicked)
        comp.addWidget(self.send_button, 0, Qt.AlignmentFlag.AlignBottom)
        crow.addWidget(self.composer, 100)
        crow.addStretch(1)
        cw.addLayout(crow)
        self.hint = named(QLabel(), "composerHint")
        self.hint.setAlignment(Qt.AlignmentFlag.AlignCenter)
        # Wrapped in a narrow window: centred on one line it lost both ends (".ectern is").
        self.hint.setWordWrap(True)
        cw.addWidget(self.hint)
        layout.addWidget(composer_wrap)

        backend.llm.status_changed.connect(self._llm_status)
        backend.view.snapshot_changed.connect(self.welcome.set_snapshot)
        backend.view.snapshot_changed.connect(self._library_changed)
        backend.view.documents_removed.connect(self._documents_removed)
        # Searches and quoted answers work once the library is open (by keyword until the
        # model is loaded); a search made by keyword meanwhile is made again at Ready.
        backend.startup.opened.connect(self._backend_opened)
        backend.startup.ready.connect(self._backend_ready)
        backend.startup.ready.connect(self.reload_scope_choices)
        backend.changed.connect(self._changed)
        theme.changed.connect(self._restyle)
        self._restyle(theme.palette)
        self._llm_status(backend.llm.status)
        self._update_state()

    # --- state -----------------------------------------------------------------------

    @property
    def busy(self) -> bool:
        return self.task is not None or self._pending is not None

    @property
    def search_only(self) -> bool:
        return self.search_mode.isChecked()

    def set_search_mode(self, on: bool) -> None:
        (self.search_mode if on else self.ask_mode).setChecked(True)

    def _mode_changed(self, _button: object, checked: bool) -> None:
        if checked:  # the tab left reports too, unchecked: one swap per switch
            shown, self._other_tab_text = self._other_tab_text, self.input.toPlainText()
            self.input.setPlainText(shown)
            self.input.moveCursor(QTextCursor.MoveOperation.End)
        self._update_state()

    def _update_state(self) -> None:
        palette = self.theme.palette
        if self.search_only:
            self.input.setPlaceholderText("Search your documents…")
            hint = "Enter to search · Shift+Enter for a new line"
        else:
            self.input.setPlaceholderText("Ask a question about your documents…")
            hint = "Enter to send · Shift+Enter for a new line · Esc to stop"
        # QPlainTextEdit does not repaint for a new placeholder: the other mode's would stay.
        self.input.viewport().update()
        if self.busy:
            self.send_button.setIcon(icon("stop", palette.accent_text))
            self.send_button.setToolTip("Stop the answer (Esc)")
            self.send_button.setAccessibleName("Stop")
            self.send_button.setProperty("busy", True)
        else:
            self.send_button.setIcon(
                icon("search" if self.search_only else "send", palette.accent_text)
            )
            self.send_button.setToolTip("Search (Enter)" if self.search_only else "Ask (Enter)")
            self.send_button.setAccessibleName("Search" if self.search_only else "Send")
            self.send_button.setProperty("busy", False)
        self.send_button.style().unpolish(self.send_button)
        self.send_button.style().polish(self.send_button)
        if not self.backend.is_open and self.backend.startup.phase != "failed":
            hint = "Lectern is opening your library; you can already type your question."
        elif not self.backend.is_ready and self.backend.startup.phase != "failed":
            hint = "Searching by keyword while the search model loads."
        self.hint.setText(hint)
        self.ask_mode.setIcon(
            icon("sparkle", palette.text if self.ask_mode.isChecked() else palette.muted)
        )
        self.search_mode.setIcon(
            icon("search", palette.text if self.search_mode.isChecked() else palette.muted)
        )
        self.stack.setCurrentWidget(
            self.search_view
            if self.search_only
            else self.scroll_area
            if self.items
            else self.welcome
        )
        # The Search tab lists passages, not the conversation: its title would mislead.
        self.title.set_full_text(
            "Search" if self.search_only else self.conversation_title or "New conversation"
        )

    def _library_changed(self, snapshot: Any) -> None:
        """A folder removed from the library leaves the open answers at once: their
        sources from it lose their text and say so, as the stored copies already do."""
        folders = [f.path for f in snapshot.folders]

        def kept(path: str) -> bool:
            return any(path == f or path.startswith(f.rstrip(os.sep) + os.sep) for f in folders)

        self._forget(kept)
        if tuple(folders) != self._choice_folders:
            self._choice_folders = tuple(folders)
            self.reload_scope_choices()

    def _changed(self, changes: Changes) -> None:
        # Folders indexed or removed bring their file types; collections their names.
        if changes.folders or changes.collections:
            self.reload_scope_choices()

    def _documents_removed(self, paths: list[str]) -> None:
        """A single file deleted or no longer matched leaves the open answers too."""
        gone = set(paths)
        self._forget(lambda path: path not in gone)

    def _forget(self, kept: Callable[[str], bool]) -> None:
        for item in self.items:
            if isinstance(item, TurnWidget) and item.forget_sources(kept):
                item.refresh()

    def resizeEvent(self, event: QResizeEvent) -> None:
        super().resizeEvent(event)
        self._fit_header(event.size().width())

    def _fit_header(self, width: int) -> None:
        icon_only = Qt.ToolButtonStyle.ToolButtonIconOnly

        def words(button: QToolButton) -> int:
            return button.fontMetrics().horizontalAdvance(button.text()) + 8

        def bare(button: QToolButton) -> int:
            hint = button.sizeHint().width()
            return hint if button.toolButtonStyle() == icon_only else hint - words(button)

        def advance(text: str) -> int:
            return self.llm_pill.fontMetrics().horizontalAdvance(text) + 8

        pill = self.llm_pill
        text_only = Qt.ToolButtonStyle.ToolButtonTextOnly
        icon_width = pill.iconSize().width() + 4
        # The badge's padding and icon, whatever it shows now.
        pill_bare = pill.sizeHint().width() - advance(pill.text())
        if pill.toolButtonStyle() == text_only:
            pill_bare += icon_width
        modes = (self.ask_mode, self.search_mode)
        # Margins and spacing of the header row and of the mode switch.
        room = width - 50 - 8 - sum(bare(b) for b in modes) - pill_bare
        mode_words = sum(words(b) for b in modes)
        full, short = self._pill_words
        # Narrower, the modes show their icons, then the badge says its short form ("No
        # model") without its icon: never the bare icon, which said nothing at 1024 px.
        style = Qt.ToolButtonStyle.ToolButtonTextBesideIcon
        if room - mode_words - advance(full) >= TITLE_ROOM:
            compact_modes, words_shown = False, full
        elif room - advance(full) >= TITLE_ROOM:
            compact_modes, words_shown = True, full
        else:
            compact_modes, words_shown, style = True, short, text_only
        if pill.text() != words_shown:
            pill.setText(words_shown)
        if pill.toolButtonStyle() != style:
            pill.setToolButtonStyle(style)
        for button in modes:
            mode_style = icon_only if compact_modes else Qt.ToolButtonStyle.ToolButtonTextBesideIcon
            if button.toolButtonStyle() != mode_style:
                button.setToolButtonStyle(mode_style)

    def _restyle(self, palette: Palette) -> None:
        for item in self.items:
            if isinstance(item, TurnWidget | SearchResultsWidget):
                item.refresh()
        self.search_view.refresh()
        self._llm_status(self.backend.llm.status)
        self._update_state()
        self._show_scope()

    # --- the scope ---------------------------------------------------------------------

    def reload_scope_choices(self) -> None:
        self.backend.run(ops.scope_choices(), on_result=self._set_choices)

    def _set_choices(self, choices: ScopeChoices) -> None:
        self.choices = choices
        self._show_scope()
        if self.scope_menu is not None and self.scope_menu.isVisible():
            self._fill_scope_menu(self.scope_menu)

    def missing_collections(self) -> list[str]:
        """Collections the scope names that no longer exist (deleted meanwhile)."""
        if not self.backend.is_ready:
            return []
        known = {c.name.lower() for c in self.choices.collections}
        return [c for c in self.scope.collections if c.lower() not in known]

    def set_scope(self, scope: Scope, *, save: bool = True) -> None:
        """Search ``scope`` from now on; saved with the open conversation at once."""
        self.scope = scope
        self._scope_known = True
        self._show_scope()
        if self.scope_menu is not None and self.scope_menu.isVisible():
            self._sync_scope_menu(self.scope_menu)
        if save and self.conversation_id is not None:
            self.backend.run(ops.set_conversation_scope(self.conversation_id, scope))

    def _show_scope(self) -> None:
        palette = self.theme.palette
        missing = self.missing_collections()
        label = self.scope.label()
        self.scope_button.setText(label)
        if missing:
            gone = ", ".join(f"“{m}”" for m in missing)
            tip = f"The collection {gone} was deleted. Click to choose what to search."
        elif self.scope:
            tip = f"Searching {self.scope.phrase()}. Click to change what is searched."
        else:
            tip = "Searching all documents. Click to keep to collections, folders or file types."
        self.scope_button.setToolTip(tip)
        self.scope_button.setAccessibleName(f"Scope: {label}")
        color = palette.warning_text if missing else palette.text if self.scope else palette.muted
        self.scope_button.setIcon(icon("warning" if missing else "folder", color, 13))
        for name, value in (("scoped", bool(self.scope)), ("missing", bool(missing))):
            self.scope_button.setProperty(name, value)
        self.scope_button.style().unpolish(self.scope_button)
        self.scope_button.style().polish(self.scope_button)

    def show_scope_menu(self) -> ScopeMenu:
        """Open the menu that chooses collections, folders and file types."""
        if self.scope_menu is None:
            self.scope_menu = ScopeMenu(self)
            self.scope_menu.setObjectName("scopeMenu")
            self.scope_menu.setToolTipsVisible(True)
        menu = self.scope_menu
        self._fill_scope_menu(menu)
        self.reload_scope_choices()  # a collection made elsewhere shows up while it is open
        # Above the chip: the question box sits at the bottom of the window.
        at = self.scope_button.mapToGlobal(self.scope_button.rect().topLeft())
        at.setY(at.y() - menu.sizeHint().height() - 4)
        menu.popup(at)
        return menu

    def _fill_scope_menu(self, menu: QMenu) -> None:
        menu.clear()
        choices = self.choices
        every = menu.addAction("All documents")
        every.setCheckable(True)
        every.setData(("all", ""))
        every.triggered.connect(lambda: self.set_scope(Scope()))

        def section(title: str, entries: list[tuple[str, str, str, str]]) -> None:
            # A disabled entry, not addSection: styled menus draw a section as a bare line.
            menu.addSeparator()
            header = QWidgetAction(menu)
            header.setDefaultWidget(named(QLabel(title), "scopeMenuHeader"))
            header.setEnabled(False)
            menu.addAction(header)
            if not entries:
                empty = menu.addAction("None yet" if title == "Collections" else "None")
                empty.setEnabled(False)
            for kind, value, text, tip in entries:
                action = menu.addAction(text)
                action.setCheckable(True)
                action.setData((kind, value))
                if kind == "folder":
                    tip = display_path(tip)
                if tip:
                    action.setToolTip(tip)
                action.triggered.connect(
                    lambda _checked=False, k=kind, v=value: self._toggle_scope(k, v)
                )

        gone = self.missing_collections()
        section(
            "Collections",
            [
                (
                    "collection",
                    c.name,
                    c.name,
                    "\n".join(display_path(f) for f in c.folders) or "No folders yet",
                )
                for c in choices.collections
            ]
            + [("collection", g, f"{g} (deleted)", "This collection was deleted") for g in gone],
        )
        folders = list(choices.folders) + [
            f for f in self.scope.folders if f not in choices.folders
        ]
        section("Folders", [("folder", f, _folder_name(f), f) for f in folders])
        types = list(dict.fromkeys([*choices.types, *self.scope.types]))
        section("File types", [("type", t, type_name(t), "") for t in types])
        menu.addSeparator()
        manage = menu.addAction("Manage collections…")
        manage.setData(("manage", ""))
        manage.triggered.connect(self.open_collections)
        self._sync_scope_menu(menu)

    def _sync_scope_menu(self, menu: QMenu) -> None:
        scope = self.scope
        chosen = {
            "all": {""} if not scope else set(),
            "collection": {c.lower() for c in scope.collections},
            "folder": set(scope.folders),
            "type": set(scope.types),
        }
        for action in menu.actions():
            data = action.data()
            if isinstance(data, tuple) and data[0] in chosen:
                value = data[1].lower() if data[0] == "collection" else data[1]
                action.setChecked(value in chosen[data[0]])

    def scope_actions(self) -> dict[str, QAction]:
        """The menu's check boxes by their text (for tests and the screenshots)."""
        menu = self.scope_menu
        return {a.text(): a for a in menu.actions()} if menu is not None else {}

    def _toggle_scope(self, kind: str, value: str) -> None:
        def flip(items: tuple[str, ...], item: str) -> tuple[str, ...]:
            lowered = [i.lower() for i in items] if kind == "collection" else list(items)
            key = item.lower() if kind == "collection" else item
            if key in lowered:
                return tuple(i for i, k in zip(items, lowered, strict=True) if k != key)
            return (*items, item)

        scope = self.scope
        if kind == "collection":
            scope = Scope(flip(scope.collections, value), scope.folders, scope.types)
        elif kind == "folder":
            scope = Scope(scope.collections, flip(scope.folders, value), scope.types)
        elif kind == "type":
            scope = Scope(scope.collections, scope.folders, flip(scope.types, value))
        self.set_scope(scope)

    def open_collections(self) -> None:
        """The dialog that makes, renames and deletes collections and fills them."""
        from desktop.collections_dialog import CollectionsDialog

        if self.scope_menu is not None:
            self.scope_menu.hide()
        if self.collections_dialog is None:
            self.collections_dialog = CollectionsDialog(self.backend, self.window())
        self.collections_dialog.reload()
        self.collections_dialog.show()
        self.collections_dialog.raise_()

    def _llm_status(self, status: LLMStatus) -> None:
        palette = self.theme.palette
        self.welcome.set_llm_status(status)
        if status.state == "checking":
            text, color, tip = (
                "Checking model…",
                palette.muted,
                "Looking for the language model server",
            )
        elif status.ready:
            text, color = status.model, palette.success
            tip = f"Answers are written by {status.model} at {status.url}. Click to change."
        elif status.state == "invalid":
            text, color = "Server address invalid", palette.error_text
            tip = (
                f"{status.message} {status.hint} Answers are extracted sentences until it "
                "is fixed. Click to open Settings."
            )
        elif status.state == "unreachable":
            text, color = NO_MODEL, palette.warning_text
            tip = f"{status.message} Answers are extracted sentences until a model server is running. Click to set one up."
        else:
            text, color = (
                "Model missing"
                if status.state in ("no_models", "model_missing")
                else "Model problem",
                palette.warning_text,
            )
            tip = f"{status.message} Answers are extracted sentences meanwhile. Click to fix."
        self._pill_words = (text, short_badge(text, status))
        self.llm_pill.setText(text)
        self.llm_pill.setIcon(icon("server", color, 15))
        self.llm_pill.setToolTip(f"{text}. {tip}")  # the whole words, when it is short
        self._fit_header(self.width())
        self.llm_pill.setAccessibleName(f"Language model: {text}")
        self.llm_pill.setStyleSheet(f"color: {color};")

    @property
    def llm_badge(self) -> str:
        """The badge's whole words (it may show a short form of them)."""
        return self._pill_words[0]

    def _use_model(self, name: str) -> None:
        self.backend.apply_settings(self.backend.settings.with_changes(llm_model=name))

    def _composer_focus(self, focused: bool) -> None:
        self.composer.setProperty("focused", focused)
        self.composer.style().unpolish(self.composer)
        self.composer.style().polish(self.composer)

    # --- conversations ------------------------------------------------------------------

    def _switch_draft(self, to: int | None) -> None:
        """Keep the draft with the conversation being left; bring back ``to``'s (into the
        box in Ask; aside while Search keeps the box for its words)."""
        text = self._other_tab_text if self.search_only else self.input.toPlainText()
        if text.strip():
            self._drafts[self.conversation_id] = text
        else:
            self._drafts.pop(self.conversation_id, None)
        if self.search_only:
            self._other_tab_text = self._drafts.pop(to, "")
            return
        self.input.setPlainText(self._drafts.pop(to, ""))
        self.input.moveCursor(QTextCursor.MoveOperation.End)

    def new_conversation(self) -> None:
        self.stop()
        self._switch_draft(None)
        self.conversation_id = None
        self.conversation_title = ""
        self.set_scope(Scope(), save=False)  # a new conversation searches everything
        self._clear_items()
        self.search_view.show_for(None)
        self._update_state()
        self.conversation_changed.emit(None)
        self.input.setFocus()

    def open_conversation(self, conversation_id: int, title: str = "") -> None:
        if conversation_id == self.conversation_id and self.items:
            return
        self.stop()
        if conversation_id != self.conversation_id:
            self._switch_draft(conversation_id)
        self.conversation_id = conversation_id
        self.conversation_title = title
        self.set_scope(Scope(), save=False)
        self._scope_known = False  # an answer asked meanwhile keeps the saved scope
        self._clear_items()
        self.search_view.show_for(conversation_id)
        self._update_state()
        self.conversation_changed.emit(conversation_id)

        def scoped(scope: Scope) -> None:
            if self.conversation_id == conversation_id:
                self._scope_known = True
                self.set_scope(scope, save=False)

        self.backend.run(ops.conversation_scope(conversation_id), on_result=scoped)

        def loaded(turns: list[Any]) -> None:
            if self.conversation_id != conversation_id:
                return
            for stored in turns:
                self._add_turn(TurnView.from_stored(stored))
            if self.items and isinstance(self.items[0], TurnWidget):
                self.conversation_title = whole_title(
                    self.conversation_title, self.items[0].turn.question
                )
            self._update_state()
            QTimer.singleShot(0, self._scroll_to_bottom)

        self.backend.run(ops.turns(conversation_id), on_result=loaded)

    def _clear_items(self) -> None:
        for item in self.items:
            item.deleteLater()
        self.items.clear()
        self.active_turn = None

    def _add_item(self, widget: QWidget) -> None:
        self.column_layout.insertWidget(self.column_layout.count() - 1, widget)
        self.items.append(widget)
        self._stick_to_bottom = True

    def _add_turn(self, turn: TurnView) -> TurnWidget:
        # The widget draws itself before it is known here (None): then every answer of
        # the conversation is above it.
        made: list[TurnWidget] = []
        widget = TurnWidget(
            turn,
            self.theme,
            said_before=lambda kind: self._said_before(made[0] if made else None, kind),
            earlier_sources=lambda: self._earlier_sources(made[0] if made else None),
        )
        made.append(widget)
        widget.evidence_requested.connect(self.evidence_requested.emit)
        widget.action_requested.connect(self._turn_action)
        self._add_item(widget)
        return widget

    def _earlier(self, widget: TurnWidget | None) -> list[TurnView]:
        """The answers above ``widget``; all of them for None (one being made)."""
        earlier: list[TurnView] = []
        for item in self.turns:
            if item is widget:
                break
            earlier.append(item.turn)
        return earlier

    def _said_before(self, widget: TurnWidget | None, kind: str) -> bool:
        """An answer above ``widget`` carries a warning of ``kind``."""
        return any(k == kind for turn in self._earlier(widget) for k, _ in turn.warnings)

    def _earlier_sources(self, widget: TurnWidget | None) -> set[tuple[str, int, int]]:
        """The passages the answers above ``widget`` listed."""
        return {(s.path, s.start, s.end) for turn in self._earlier(widget) for s in turn.sources}

    @property
    def turns(self) -> list[TurnWidget]:
        return [i for i in self.items if isinstance(i, TurnWidget)]

    def last_turn(self) -> TurnWidget | None:
        turns = self.turns
        return turns[-1] if turns else None

    def copy_last_answer(self) -> str | None:
        for item in reversed(self.turns):
            if item.turn.answer and not item.turn.streaming:
                return item.copy_markdown()
        return None

    # --- asking --------------------------------------------------------------------------

    def _send_clicked(self) -> None:
        if self.busy:
            self.stop()
        else:
            self.submit()

    def submit(self) -> None:
        text = self.input.toPlainText().strip()
        if not text or self.busy:
            return
        if self.search_only:
            # The words stay in the box, to be refined and searched again.
            self.run_search(text)
        else:
            self.input.clear()
            self.ask(text)

    def ask(self, question: str) -> None:
        turn = TurnView(question=question, streaming=True)
        self.active_turn = self._add_turn(turn)
        if self.conversation_id is None and not self.conversation_title:
            # The conversation is kept from its first question, titled by it.
            self.conversation_title = _title(question)
        self._update_state()
        if not self.backend.is_open:
            self._pending = ("ask", question)
            self._update_state()
            return
        self._start_ask(question)

    @property
    def search_results(self) -> SearchResultsWidget | None:
        """The Search tab's results for the open conversation (None: no search yet)."""
        return self.search_view.results

    def _search_how_changed(self, _words_only: bool) -> None:
        """Exact words or meaning too: the shown search again, the other way."""
        shown = self.search_view.results
        if shown is None or self.active_turn is not None or self._pending is not None:
            return  # nothing to search again, or an answer is being written
        if self.task is not None:
            self.task.cancel()  # the search the other way, still running
        self.run_search(shown.query)

    def run_search(self, query: str) -> None:
        widget = self.search_view.start(query)
        if not self.backend.is_open:
            self._pending = ("search", query)
            self._update_state()
            return
        self._start_search(widget, query)

    def _start_search(self, widget: SearchResultsWidget, query: str) -> None:
        # A search replaced (searched again, or the other way) before it answered has
        # its list deleted: its answer goes nowhere.
        def found(hits: list[Any]) -> None:
            if self.search_view.holds(widget):
                self._show_hits(widget, hits)

        def failed(exc: BaseException) -> None:
            if self.search_view.holds(widget):
                widget.set_error(*describe_error(exc))

        def finished() -> None:
            if self.task is task:  # not a newer search started meanwhile
                self.task = None
            self._update_state()

        # Before the model is in, a search by words and meaning ranks by keyword alone:
        # made again once it is (``_backend_ready``).
        self._keyword_search = (
            widget if not widget.words_only and not self.backend.startup.model_loaded else None
        )
        # "bm25" finds only passages holding the words; "hybrid" their meaning too.
        search = ops.search(
            query,
            k=max(10, self.backend.settings.top_k),
            mode="bm25" if widget.words_only else "hybrid",
            scope=self.scope,
        )
        task = self.backend.run(search, on_result=found, on_error=failed, on_finished=finished)
        self.task = task
        self._update_state()

    def _show_hits(self, widget: SearchResultsWidget, hits: list[Any]) -> None:
        """``hits`` on their cards once the words the keyword index matched in each are
        known (asked in the background: its stemmers are DuckDB's). Without them the
        cards light the query's own words."""
        if not hits:
            widget.set_hits(hits)
            return
        query, texts = widget.query, [h.text for h in hits]

        def matched(words: Any) -> None:
            if self.search_view.holds(widget):
                widget.set_hits(hits, words)

        def unknown(_exc: BaseException) -> None:
            if self.search_view.holds(widget):
                widget.set_hits(hits)

        # A library not open (any more) answers ``unknown`` at once.
        self.backend.run(ops.matched_words(query, texts), on_result=matched, on_error=unknown)

    def _backend_ready(self) -> None:
        searched, self._keyword_search = self._keyword_search, None
        if (
            searched is not None
            and self.search_view.results is searched
            and not searched.words_only
            and self._pending is None
            and self.active_turn is None
        ):
            if self.task is not None:
                self.task.cancel()
            self.run_search(searched.query)
        self._update_state()

    def _backend_opened(self) -> None:
        pending, self._pending = self._pending, None
        if pending is None:
            self._update_state()
            return
        kind, text = pending
        if kind == "ask":
            self._start_ask(text)
        else:
            widget = self.search_view.results
            if widget is not None:
                self._start_search(widget, text)

    def _start_ask(self, question: str) -> None:
        widget = self.active_turn
        if widget is None:
            return

        def finished() -> None:
            # Every answer says something about the server: ask it again right away.
            self.backend.llm.check(quiet=True)
            self.task = None
            widget.turn.streaming = False
            widget.refresh()
            if self.active_turn is widget:
                self.active_turn = None
            self._update_state()

        # The events are folded here, on the window's thread, into one AnswerState; the
        # badge learns from it too.
        from core.generation.answer_state import AnswerState

        answer = AnswerState()

        def event(value: Any) -> None:
            change = answer.apply(value)
            self.backend.llm.follow(answer, change)
            self._show(widget, answer, change)

        asked = ops.ask(
            question,
            self.conversation_id,
            scope=self.scope if self._scope_known else None,
            session=answer_session,
        )
        self.task = self.backend.run(
            asked,
            on_progress=event,
            on_error=lambda exc: self._failed(widget, exc),
            on_finished=finished,
        )
        self._update_state()

    def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()
        if self._pending is not None:
            self._pending = None
            if self.active_turn is not None:
                self.active_turn.turn.streaming = False
                self.active_turn.turn.warnings.append(
                    ("cancelled", "Stopped before the answer was started.")
                )
                self.active_turn.refresh()
                self.active_turn = None
            self._update_state()

    def _show(self, widget: TurnWidget, answer: AnswerState, change: Change) -> None:
        """Draw what one event changed in the answer (AnswerState has the rules)."""
        from core.generation.answer_state import Change
        from core.generation.events import REWRITING

        turn = widget.turn
        if change == Change.TEXT:
            # A written token: the stream's own timer redraws only the text.
            turn.answer = answer.text
            if not self._render_timer.isActive():
                self._render_timer.start()
            return
        status = answer.status
        # A follow-up being worked out is said where the answer will be, in place of
        # "Searching your documents…"; the server's progress is a note.
        turn.rewriting = status.message if status and status.kind == REWRITING.kind else ""
        if change & Change.SOURCES:
            turn.sources = [SourceView.from_hit(i, h) for i, h in enumerate(answer.hits, 1)]
        turn.answer = answer.text
        if change & Change.CITATIONS:
            turn.citations = [CitationView.from_citation(c, turn.sources) for c in answer.citations]
        notes = [(w.kind, w.message) for w in answer.warnings]
        if answer.drafting:
            notes.insert(0, ("draft", DRAFT_NOTE))
        if status is not None and status.kind != REWRITING.kind:
            notes.insert(0, ("status", status.message))
        turn.warnings = notes
        done, failed = answer.done, answer.error
        if done is not None:
            turn.mode = done.mode
            turn.model = done.model
            turn.missing_model = missing_model(done.warnings)
            reordered = done.timings.get("llm_rerank_s")
            turn.reordered_s = float(reordered) if reordered is not None else None
            turn.turn_id = done.turn_id
        elif failed is not None:
            error = failed.error
            turn.error = ErrorView(
                error.message,
                error.hint,
                type(error).__name__,
                str(getattr(error, "model", "") or ""),
                error_details(error),
            )
        if change & Change.FINISHED:
            turn.streaming = False
        if change & (Change.SOURCES | Change.FINISHED):
            self._adopt(widget, answer.conversation_id)
        widget.refresh()

    def _adopt(self, widget: TurnWidget, conversation_id: int | None) -> None:
        """The new conversation an answer on screen is kept in, once its id is known (its
        sources come, or it ends however it ends): open here, and listed at once."""
        if conversation_id is None or self.conversation_id is not None:
            return
        if widget not in self.items:
            return  # a conversation left (Ctrl+N) while its answer was stopping
        self.conversation_id = conversation_id
        self.search_view.rekey(None, conversation_id)
        self.conversation_title = _title(widget.turn.question)
        self.conversation_changed.emit(conversation_id)
        self.backend.announce(Changes(conversations=True))
        self._update_state()

    def _render_active(self) -> None:
        if self.active_turn is not None and self.active_turn.turn.streaming:
            self.active_turn.refresh_answer()

    def _failed(self, widget: TurnWidget, exc: BaseException) -> None:
        message, hint = describe_error(exc)
        kind = type(exc).__name__ if isinstance(exc, LecternError) else "Error"
        widget.turn.error = ErrorView(
            message, hint, kind, str(getattr(exc, "model", "") or ""), error_details(exc)
        )
        widget.turn.streaming = False
        widget.refresh()

    def _turn_action(self, name: str, arg: object) -> None:
        if name == "pull":
            self.pull_requested.emit(str(arg))
        elif name == "settings":
            self.open_settings.emit()
        elif name == "retry" and not self.busy:
            self.ask(str(arg))
        elif name in ("download", "cancel_download"):
            sender = self.sender()
            if isinstance(sender, TurnWidget):
                self._download(sender, str(arg), start=name == "download")

    def _download(self, widget: TurnWidget, model: str, *, start: bool) -> None:
        """The missing model downloaded in the answer's own note; one download per model,
        however many answers offer it."""
        from desktop.model_download import ModelDownload

        download = self._downloads.get(model)
        if not start:
            if download is not None:
                download.cancel()
            return
        if download is None or not download.running:
            download = ModelDownload(self.backend, model, self)
            self._downloads[model] = download
            download.start()
        widget.follow_download(download)

    # --- scrolling -------------------------------------------------------------------

    def _scrolled(self, value: int) -> None:
        bar = self.scroll_area.verticalScrollBar()
        self._stick_to_bottom = value >= bar.maximum() - 40

    def _range_changed(self, _lo: int, hi: int) -> None:
        if self._stick_to_bottom:
            self.scroll_area.verticalScrollBar().setValue(hi)

    def _scroll_to_bottom(self) -> None:
        bar = self.scroll_area.verticalScrollBar()
        bar.setValue(bar.maximum())


def _title(question: str) -> str:
    # Whole: the header shortens it to its room, after a word, and its tooltip says it all.
    return " ".join(question.split())


def whole_title(title: str, first_question: str) -> str:
    """The title the header shows for a stored conversation: the library keeps a long
    first question's title cut (at a fixed length, even inside a word); the question
    itself is the whole of it."""
    question = _title(first_question)
    if title.endswith("…") and len(question) >= len(title) and question.startswith(title[:-1]):
        return question
    return title
