"""The conversation panel: ask (or search), watch the answer arrive, check its sources.

Answers stream in through ``core.qa.ask`` events. Tokens are appended to the turn and the
answer is re-rendered at most every few tens of milliseconds, so a fast model never makes
the window spend its time re-laying out text. The verified answer from the final event
replaces the streamed text, and its citation markers become links to the evidence panel.
"""

from __future__ import annotations

import os
from typing import Any

from core.errors import LecternError
from desktop.backend import Backend
from desktop.model_probe import LLMStatus
from desktop.qt import (
    QButtonGroup,
    QFocusEvent,
    QFrame,
    QHBoxLayout,
    QKeyEvent,
    QLabel,
    QPlainTextEdit,
    QResizeEvent,
    QScrollArea,
    QSize,
    QStackedWidget,
    Qt,
    QTextOption,
    QTimer,
    QToolButton,
    QVBoxLayout,
    QWidget,
    Signal,
)
from desktop.search_results import SearchResultsWidget
from desktop.theme import Palette, Theme, icon
from desktop.turn_view import TurnWidget
from desktop.viewmodels import (
    CitationView,
    ErrorView,
    SourceView,
    TurnView,
)
from desktop.welcome_view import WelcomeView
from desktop.widgets import ElidedLabel
from desktop.workers import Task, describe_error

MAX_COLUMN = 860


RENDER_INTERVAL_MS = 40
# The badge without a model server: answers still come, quoted from the documents ("Search"
# is the other tab, which lists passages).
NO_MODEL = "No model · quoting passages"
# The room the conversation's title keeps in the header: when it would get less, the mode
# switch and then the model badge show their icons only (their words stay in tooltips).
TITLE_ROOM = 160


# --- the question box ------------------------------------------------------------------


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
        line = self.fontMetrics().lineSpacing()
        lines = max(1, min(6, int(self.document().size().height())))
        self.setFixedHeight(int(lines * line + 2 * self.document().documentMargin() + 4))


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
        self.conversation_id: int | None = None
        self.conversation_title = ""
        self.items: list[QWidget] = []
        self.task: Task | None = None
        self.active_turn: TurnWidget | None = None
        self._pending: tuple[str, str] | None = None
        self._render_timer = QTimer(self)
        self._render_timer.setSingleShot(True)
        self._render_timer.setInterval(RENDER_INTERVAL_MS)
        self._render_timer.timeout.connect(self._render_active)
        self._stick_to_bottom = True

        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(0)

        header = QFrame(objectName="panelHeader")
        head = QHBoxLayout(header)
        head.setContentsMargins(20, 10, 14, 10)
        head.setSpacing(10)
        self.title = ElidedLabel("New conversation", objectName="panelTitle")
        head.addWidget(self.title, 1)
        segment = QFrame(objectName="segment")
        seg = QHBoxLayout(segment)
        seg.setContentsMargins(3, 3, 3, 3)
        seg.setSpacing(2)
        self.ask_mode = QToolButton(objectName="segmentButton")
        self.ask_mode.setText("Ask")
        self.ask_mode.setToolTip("Answers written from your documents, with citations (Ctrl+1)")
        self.search_mode = QToolButton(objectName="segmentButton")
        self.search_mode.setText("Search")
        self.search_mode.setToolTip(
            "Search: ranked passages with your words highlighted, no language model (Ctrl+2)"
        )
        self.mode_group = QButtonGroup(self)
        for button in (self.ask_mode, self.search_mode):
            button.setCheckable(True)
            button.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextBesideIcon)
            button.setIconSize(QSize(15, 15))
            self.mode_group.addButton(button)
            seg.addWidget(button)
        self.ask_mode.setChecked(True)
        self.mode_group.buttonToggled.connect(self._mode_changed)
        head.addWidget(segment)
        self.llm_pill = QToolButton(objectName="llmPill")
        self.llm_pill.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextBesideIcon)
        self.llm_pill.clicked.connect(self.open_settings.emit)
        head.addWidget(self.llm_pill)
        layout.addWidget(header)

        self.stack = QStackedWidget()
        self.welcome = WelcomeView(theme)
        self.welcome.add_folder.connect(self.add_folder_requested.emit)
        self.welcome.open_settings.connect(self.open_settings.emit)
        self.welcome.check_again.connect(lambda: self.backend.check_llm())
        self.welcome.pull_model.connect(self.pull_requested.emit)
        self.welcome.use_model.connect(self._use_model)
        self.stack.addWidget(self.welcome)

        self.scroll = QScrollArea(objectName="transcript")
        self.scroll.setWidgetResizable(True)
        self.scroll.setFrameShape(QFrame.Shape.NoFrame)
        self.scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        holder = QWidget(objectName="transcriptHolder")
        hl = QHBoxLayout(holder)
        hl.setContentsMargins(24, 20, 24, 24)
        hl.addStretch(1)
        self.column = QWidget(objectName="transcriptColumn")
        self.column.setMaximumWidth(MAX_COLUMN)
        self.column_layout = QVBoxLayout(self.column)
        self.column_layout.setContentsMargins(0, 0, 0, 0)
        self.column_layout.setSpacing(22)
        self.column_layout.addStretch(1)
        hl.addWidget(self.column, 100)
        hl.addStretch(1)
        self.scroll.setWidget(holder)
        self.scroll.verticalScrollBar().rangeChanged.connect(self._range_changed)
        self.scroll.verticalScrollBar().valueChanged.connect(self._scrolled)
        self.stack.addWidget(self.scroll)
        layout.addWidget(self.stack, 1)

        composer_wrap = QFrame(objectName="composerWrap")
        cw = QVBoxLayout(composer_wrap)
        cw.setContentsMargins(24, 8, 24, 12)
        cw.setSpacing(6)
        crow = QHBoxLayout()
        crow.addStretch(1)
        self.composer = QFrame(objectName="composer")
        self.composer.setMaximumWidth(MAX_COLUMN)
        comp = QHBoxLayout(self.composer)
        comp.setContentsMargins(14, 8, 8, 8)
        comp.setSpacing(8)
        self.input = QuestionEdit()
        self.input.submitted.connect(self.submit)
        self.input.stop_requested.connect(self.stop)
        self.input.focus_changed.connect(self._composer_focus)
        comp.addWidget(self.input, 1)
        self.send_button = QToolButton(objectName="sendButton")
        self.send_button.setIconSize(QSize(18, 18))
        self.send_button.setFixedSize(36, 36)
        self.send_button.clicked.connect(self._send_clicked)
        comp.addWidget(self.send_button, 0, Qt.AlignmentFlag.AlignBottom)
        crow.addWidget(self.composer, 100)
        crow.addStretch(1)
        cw.addLayout(crow)
        self.hint = QLabel(objectName="composerHint")
        self.hint.setAlignment(Qt.AlignmentFlag.AlignCenter)
        cw.addWidget(self.hint)
        layout.addWidget(composer_wrap)

        backend.llm_status_changed.connect(self._llm_status)
        backend.library_changed.connect(self.welcome.set_snapshot)
        backend.library_changed.connect(self._library_changed)
        backend.ready.connect(self._backend_ready)
        theme.changed.connect(self._restyle)
        self._restyle(theme.palette)
        self._llm_status(backend.llm_status)
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

    def _mode_changed(self, *_: object) -> None:
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
        if not self.backend.is_ready and self.backend.phase != "failed":
            hint = "Lectern is loading its search model; you can already type your question."
        self.hint.setText(hint)
        self.ask_mode.setIcon(
            icon("sparkle", palette.text if self.ask_mode.isChecked() else palette.muted)
        )
        self.search_mode.setIcon(
            icon("search", palette.text if self.search_mode.isChecked() else palette.muted)
        )
        self.stack.setCurrentWidget(self.scroll if self.items else self.welcome)
        self.title.set_full_text(
            self.conversation_title
            or ("Search" if self.search_only and not self.conversation_id else "New conversation")
        )

    def _library_changed(self, snapshot: Any) -> None:
        """A folder removed from the library leaves the open answers at once: their
        sources from it lose their text and say so, as the stored copies already do."""
        folders = [f.path for f in snapshot.folders]

        def kept(path: str) -> bool:
            return any(path == f or path.startswith(f.rstrip(os.sep) + os.sep) for f in folders)

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

        modes = (self.ask_mode, self.search_mode)
        # Margins and spacing of the header row and of the mode switch.
        room = width - 54 - 8 - sum(bare(b) for b in modes) - bare(self.llm_pill)
        mode_words = sum(words(b) for b in modes)
        compact_modes = room - mode_words - words(self.llm_pill) < TITLE_ROOM
        compact_pill = compact_modes and room - words(self.llm_pill) < TITLE_ROOM
        for buttons, compact in ((modes, compact_modes), ((self.llm_pill,), compact_pill)):
            style = icon_only if compact else Qt.ToolButtonStyle.ToolButtonTextBesideIcon
            for button in buttons:
                if button.toolButtonStyle() != style:
                    button.setToolButtonStyle(style)

    def _restyle(self, palette: Palette) -> None:
        for item in self.items:
            if isinstance(item, TurnWidget | SearchResultsWidget):
                item.refresh()
        self._llm_status(self.backend.llm_status)
        self._update_state()

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
        self.llm_pill.setText(text)
        self.llm_pill.setIcon(icon("server", color, 15))
        self.llm_pill.setToolTip(f"{text}. {tip}")  # the words, when it shows its icon only
        self._fit_header(self.width())
        self.llm_pill.setAccessibleName(f"Language model: {text}")
        self.llm_pill.setStyleSheet(f"color: {color};")

    def _use_model(self, name: str) -> None:
        self.backend.apply_settings(self.backend.settings.with_changes(llm_model=name))

    def _composer_focus(self, focused: bool) -> None:
        self.composer.setProperty("focused", focused)
        self.composer.style().unpolish(self.composer)
        self.composer.style().polish(self.composer)

    # --- conversations ------------------------------------------------------------------

    def new_conversation(self) -> None:
        self.stop()
        self.conversation_id = None
        self.conversation_title = ""
        self._clear_items()
        self._update_state()
        self.conversation_changed.emit(None)
        self.input.setFocus()

    def open_conversation(self, conversation_id: int, title: str = "") -> None:
        if conversation_id == self.conversation_id and self.items:
            return
        self.stop()
        self.conversation_id = conversation_id
        self.conversation_title = title
        self._clear_items()
        self._update_state()
        self.conversation_changed.emit(conversation_id)

        def loaded(turns: list[Any]) -> None:
            if self.conversation_id != conversation_id:
                return
            for stored in turns:
                self._add_turn(TurnView.from_stored(stored))
            self._update_state()
            QTimer.singleShot(0, self._scroll_to_bottom)

        self.backend.load_turns(conversation_id, loaded)

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
        widget = TurnWidget(turn, self.theme)
        widget.evidence_requested.connect(self.evidence_requested.emit)
        widget.action_requested.connect(self._turn_action)
        self._add_item(widget)
        return widget

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
        self.input.clear()
        if self.search_only:
            self.run_search(text)
        else:
            self.ask(text)

    def ask(self, question: str) -> None:
        turn = TurnView(question=question, streaming=True)
        self.active_turn = self._add_turn(turn)
        self._update_state()
        if not self.backend.is_ready:
            self._pending = ("ask", question)
            self._update_state()
            return
        self._start_ask(question)

    def run_search(self, query: str) -> None:
        widget = SearchResultsWidget(query, self.theme)
        widget.evidence_requested.connect(self.evidence_requested.emit)
        self._add_item(widget)
        if not self.backend.is_ready:
            self._pending = ("search", query)
            self._update_state()
            return
        self._start_search(widget, query)

    def _start_search(self, widget: SearchResultsWidget, query: str) -> None:
        def failed(exc: BaseException) -> None:
            widget.set_error(*describe_error(exc))

        def finished() -> None:
            self.task = None
            self._update_state()

        self.task = self.backend.search(query, on_result=widget.set_hits, on_error=failed)
        if self.task is not None:
            self.task.signals.finished.connect(finished)
        self._update_state()

    def _backend_ready(self) -> None:
        pending, self._pending = self._pending, None
        if pending is None:
            self._update_state()
            return
        kind, text = pending
        if kind == "ask":
            self._start_ask(text)
        else:
            widget = next(
                (i for i in reversed(self.items) if isinstance(i, SearchResultsWidget)), None
            )
            if widget is not None:
                self._start_search(widget, text)

    def _start_ask(self, question: str) -> None:
        widget = self.active_turn
        if widget is None:
            return

        def finished() -> None:
            self.task = None
            widget.turn.streaming = False
            widget.refresh()
            if self.active_turn is widget:
                self.active_turn = None
            self._update_state()

        self.task = self.backend.ask(
            question,
            self.conversation_id,
            on_event=lambda event: self._event(widget, event),
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

    def _event(self, widget: TurnWidget, event: Any) -> None:
        from core.qa import (
            CitationsEvent,
            DoneEvent,
            ErrorEvent,
            SourcesEvent,
            TokenEvent,
            WarningEvent,
        )

        turn = widget.turn
        if isinstance(event, TokenEvent):
            turn.answer += event.text
            if not self._render_timer.isActive():
                self._render_timer.start()
            return
        if isinstance(event, SourcesEvent):
            turn.sources = [SourceView.from_hit(i, h) for i, h in enumerate(event.hits, 1)]
        elif isinstance(event, CitationsEvent):
            turn.citations = [CitationView.from_citation(c, turn.sources) for c in event.citations]
        elif isinstance(event, WarningEvent):
            turn.warnings.append((event.kind, event.message))
        elif isinstance(event, DoneEvent):
            if event.sources:
                turn.sources = [SourceView.from_hit(i, h) for i, h in enumerate(event.sources, 1)]
            turn.answer = event.answer
            turn.mode = event.mode
            turn.model = event.model
            turn.citations = [CitationView.from_citation(c, turn.sources) for c in event.citations]
            turn.warnings = [(w.kind, w.message) for w in event.warnings]
            turn.turn_id = event.turn_id
            turn.streaming = False
            if event.conversation_id is not None and self.conversation_id is None:
                self.conversation_id = event.conversation_id
                self.conversation_title = _title(turn.question)
                self.conversation_changed.emit(self.conversation_id)
                self._update_state()
        elif isinstance(event, ErrorEvent):
            error = event.error
            turn.error = ErrorView(
                error.message,
                error.hint,
                type(error).__name__,
                str(getattr(error, "model", "") or ""),
            )
            if event.partial_answer:
                turn.answer = event.partial_answer
            turn.streaming = False
        widget.refresh()

    def _render_active(self) -> None:
        if self.active_turn is not None and self.active_turn.turn.streaming:
            self.active_turn.refresh_answer()

    def _failed(self, widget: TurnWidget, exc: BaseException) -> None:
        message, hint = describe_error(exc)
        kind = type(exc).__name__ if isinstance(exc, LecternError) else "Error"
        widget.turn.error = ErrorView(message, hint, kind, str(getattr(exc, "model", "") or ""))
        widget.turn.streaming = False
        widget.refresh()

    def _turn_action(self, name: str, arg: object) -> None:
        if name == "pull":
            self.pull_requested.emit(str(arg))
        elif name == "settings":
            self.open_settings.emit()
        elif name == "retry" and not self.busy:
            self.ask(str(arg))

    # --- scrolling -------------------------------------------------------------------

    def _scrolled(self, value: int) -> None:
        bar = self.scroll.verticalScrollBar()
        self._stick_to_bottom = value >= bar.maximum() - 40

    def _range_changed(self, _lo: int, hi: int) -> None:
        if self._stick_to_bottom:
            self.scroll.verticalScrollBar().setValue(hi)

    def _scroll_to_bottom(self) -> None:
        bar = self.scroll.verticalScrollBar()
        bar.setValue(bar.maximum())


def _title(question: str) -> str:
    text = " ".join(question.split())
    return text if len(text) <= 80 else text[:79] + "…"
