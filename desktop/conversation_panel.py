"""The conversation panel: ask (or search), watch the answer arrive, check its sources.

Answers stream in through ``core.qa.ask`` events. Tokens are appended to the turn and the
answer is re-rendered at most every few tens of milliseconds, so a fast model never makes
the window spend its time re-laying out text. The verified answer from the final event
replaces the streamed text, and its citation markers become links to the evidence panel.
"""

from __future__ import annotations

import html
from typing import Any

from PySide6.QtCore import QSize, Qt, QTimer, Signal
from PySide6.QtGui import QFocusEvent, QGuiApplication, QKeyEvent, QMouseEvent, QTextOption
from PySide6.QtWidgets import (
    QButtonGroup,
    QFrame,
    QHBoxLayout,
    QLabel,
    QPlainTextEdit,
    QPushButton,
    QScrollArea,
    QSizePolicy,
    QStackedWidget,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from core.errors import LecternError
from desktop.app import Backend, LibrarySnapshot, LLMStatus
from desktop.rich import (
    answer_html,
    highlight_terms_html,
    query_terms,
    snippet,
    turn_markdown,
)
from desktop.theme import Palette, Theme, icon
from desktop.viewmodels import (
    CitationView,
    ErrorView,
    EvidenceRequest,
    SourceView,
    TurnView,
)
from desktop.widgets import ElidedLabel, WrapLabel
from desktop.workers import Task, describe_error

RENDER_INTERVAL_MS = 40
MAX_COLUMN = 860

# Warnings that say the answer itself is incomplete or second-best, shown prominently;
# the rest are advice about individual sentences.
STRONG_WARNINGS = {
    "incomplete",
    "cancelled",
    "truncated",
    "llm_unavailable",
    "llm_timeout",
    "empty",
    "not_saved",
    "no_sources",
}


def _esc(text: str) -> str:
    return html.escape(text, quote=False)


def _short(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


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


# --- one question and its answer -------------------------------------------------------


class ClickableFrame(QFrame):
    clicked = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setCursor(Qt.CursorShape.PointingHandCursor)
        self.setFocusPolicy(Qt.FocusPolicy.StrongFocus)

    def mouseReleaseEvent(self, event: QMouseEvent) -> None:
        if event.button() == Qt.MouseButton.LeftButton and self.rect().contains(
            event.position().toPoint()
        ):
            self.clicked.emit()
        super().mouseReleaseEvent(event)

    def keyPressEvent(self, event: QKeyEvent) -> None:
        if event.key() in (Qt.Key.Key_Return, Qt.Key.Key_Enter, Qt.Key.Key_Space):
            self.clicked.emit()
            return
        super().keyPressEvent(event)


class TurnWidget(QFrame):
    evidence_requested = Signal(object)  # EvidenceRequest
    action_requested = Signal(str, object)  # name, argument (pull / settings / retry)

    def __init__(self, turn: TurnView, theme: Theme, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("turn")
        self.turn = turn
        self.theme = theme
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(8)

        qrow = QHBoxLayout()
        qrow.addStretch(1)
        self.question = WrapLabel(objectName="questionBubble")
        self.question.setWordWrap(True)
        self.question.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.question.setMaximumWidth(640)
        qrow.addWidget(self.question)
        layout.addLayout(qrow)

        card = QFrame(objectName="answerCard")
        self.card = card
        body = QVBoxLayout(card)
        body.setContentsMargins(18, 14, 18, 14)
        body.setSpacing(10)
        head = QHBoxLayout()
        head.setSpacing(8)
        self.badge_icon = QLabel()
        self.badge = QLabel(objectName="answerBadge")
        head.addWidget(self.badge_icon)
        head.addWidget(self.badge)
        head.addStretch(1)
        self.copy_button = QToolButton(objectName="iconButton")
        self.copy_button.setToolTip("Copy the answer and its sources as Markdown")
        self.copy_button.setAccessibleName("Copy answer as Markdown")
        self.copy_button.setText("Copy")
        self.copy_button.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextBesideIcon)
        self.copy_button.clicked.connect(self.copy_markdown)
        # A child timer dies with the widget, so a late tick never touches a deleted button.
        self._copied_timer = QTimer(self)
        self._copied_timer.setSingleShot(True)
        self._copied_timer.timeout.connect(lambda: self.copy_button.setText("Copy"))
        head.addWidget(self.copy_button)
        body.addLayout(head)

        self.answer = WrapLabel(objectName="answerText")
        self.answer.setWordWrap(True)
        self.answer.setTextFormat(Qt.TextFormat.RichText)
        self.answer.setTextInteractionFlags(
            Qt.TextInteractionFlag.TextSelectableByMouse
            | Qt.TextInteractionFlag.LinksAccessibleByMouse
            | Qt.TextInteractionFlag.LinksAccessibleByKeyboard
        )
        self.answer.linkActivated.connect(self._link)
        self._badge_streaming = False
        self.answer.setSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Minimum)
        body.addWidget(self.answer)

        self.notes = QVBoxLayout()
        self.notes.setSpacing(6)
        body.addLayout(self.notes)

        self.error_box = QFrame(objectName="errorBox")
        ebox = QVBoxLayout(self.error_box)
        ebox.setContentsMargins(12, 10, 12, 10)
        ebox.setSpacing(8)
        self.error_text = WrapLabel(objectName="errorText")
        self.error_text.setWordWrap(True)
        self.error_text.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        ebox.addWidget(self.error_text)
        self.error_actions = QHBoxLayout()
        self.error_actions.setSpacing(8)
        ebox.addLayout(self.error_actions)
        self.error_box.hide()
        body.addWidget(self.error_box)

        self.sources_title = QLabel("Sources", objectName="sectionCaption")
        body.addWidget(self.sources_title)
        self.sources = WrapLabel(objectName="sourcesList")
        self.sources.setWordWrap(True)
        self.sources.setTextFormat(Qt.TextFormat.RichText)
        self.sources.setTextInteractionFlags(
            Qt.TextInteractionFlag.LinksAccessibleByMouse
            | Qt.TextInteractionFlag.LinksAccessibleByKeyboard
        )
        self.sources.linkActivated.connect(self._link)
        body.addWidget(self.sources)
        layout.addWidget(card)
        self.refresh()

    # rendering --------------------------------------------------------------------------

    def refresh_answer(self) -> None:
        """Only the streaming text: notes, sources and buttons do not change per token."""
        turn = self.turn
        palette = self.theme.palette
        if not self._badge_streaming:
            self._badge(palette)
            self._badge_streaming = True
        known = {s.n for s in turn.sources} or None
        self.answer.setText(answer_html(turn.answer, palette, known, cursor=turn.streaming))
        self.answer.show()

    def refresh(self) -> None:
        turn = self.turn
        palette = self.theme.palette
        self._badge_streaming = False
        self.question.setText(_esc(turn.question).replace("\n", "<br>"))
        # A word-wrapped label asks for a narrow width; give short questions one line.
        self.question.ensurePolished()
        longest = max(
            (
                self.question.fontMetrics().horizontalAdvance(line)
                for line in turn.question.splitlines() or [""]
            ),
            default=0,
        )
        self.question.setMinimumWidth(min(longest + 34, 560))
        self._badge(palette)
        if turn.answer:
            known = turn.cited_numbers if turn.mode else {s.n for s in turn.sources} or None
            self.answer.setText(answer_html(turn.answer, palette, known, cursor=turn.streaming))
            self.answer.show()
        elif turn.streaming:
            waiting = "Searching your documents…" if not turn.sources else "Reading the sources…"
            self.answer.setText(f'<span style="color:{palette.muted};">{waiting}</span>')
            self.answer.show()
        else:
            self.answer.hide()
        self._notes(palette)
        self._error(palette)
        self._sources(palette)
        self.copy_button.setVisible(bool(turn.answer) and not turn.streaming)
        self.copy_button.setIcon(icon("copy", palette.muted, 16))

    def _badge(self, palette: Palette) -> None:
        turn = self.turn
        if turn.streaming:
            name, text, color = "sparkle", "Writing the answer…", palette.accent
            if not turn.answer:
                text = "Looking through your documents…"
        elif turn.error is not None and not turn.answer:
            name, text, color = "error", "No answer", palette.error_text
        elif turn.mode == "generated":
            name, text, color = (
                "sparkle",
                f"Answer{' · ' + turn.model if turn.model else ''}",
                palette.accent,
            )
        elif turn.mode == "extractive":
            name, text, color = (
                "book",
                "Extracted from your documents · no language model",
                palette.muted,
            )
        elif turn.mode == "declined":
            name, text, color = "info", "Not found in your documents", palette.muted
        else:
            name, text, color = "sparkle", "Answer", palette.accent
        self.badge_icon.setPixmap(icon(name, color, 16).pixmap(16, 16))
        self.badge.setText(text)
        self.badge.setStyleSheet(f"color: {color};")

    def _notes(self, palette: Palette) -> None:
        while self.notes.count():
            item = self.notes.takeAt(0)
            if item.widget():
                item.widget().deleteLater()
        for kind, message in self.turn.warnings:
            strong = kind in STRONG_WARNINGS
            row = QFrame(objectName="warningNote" if strong else "adviceNote")
            lay = QHBoxLayout(row)
            lay.setContentsMargins(10, 6, 10, 6)
            lay.setSpacing(8)
            mark = QLabel()
            mark.setPixmap(
                icon(
                    "warning" if strong else "info",
                    palette.warning_text if strong else palette.muted,
                    16,
                ).pixmap(16, 16)
            )
            mark.setAlignment(Qt.AlignmentFlag.AlignTop)
            text = WrapLabel(_esc(message))
            text.setObjectName("warningText" if strong else "adviceText")
            text.setWordWrap(True)
            text.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
            text.setProperty("warningKind", kind)
            lay.addWidget(mark)
            lay.addWidget(text, 1)
            self.notes.addWidget(row)

    def _error(self, palette: Palette) -> None:
        error = self.turn.error
        while self.error_actions.count():
            item = self.error_actions.takeAt(0)
            if item.widget():
                item.widget().deleteLater()
        if error is None:
            self.error_box.hide()
            return
        hint = f"<br>{_esc(error.hint)}" if error.hint else ""
        self.error_text.setText(f"<b>{_esc(error.message)}</b>{hint}")
        if error.kind == "ModelNotFoundError" and error.model:
            self._action(f"Download {error.model}", "pull", error.model, primary=True)
            self._action("Choose another model…", "settings", None)
        elif error.kind in ("ContextTooSmallError", "ConfigError"):
            self._action("Open settings…", "settings", None, primary=True)
        else:
            self._action("Try again", "retry", self.turn.question, primary=True)
            self._action("Settings…", "settings", None)
        self.error_actions.addStretch(1)
        self.error_box.show()

    def _action(self, text: str, name: str, arg: object, primary: bool = False) -> None:
        button = QPushButton(text, objectName="primaryButton" if primary else "secondaryButton")
        button.clicked.connect(lambda: self.action_requested.emit(name, arg))
        self.error_actions.addWidget(button)

    def _sources(self, palette: Palette) -> None:
        turn = self.turn
        if not turn.sources:
            self.sources_title.hide()
            self.sources.hide()
            return
        cited = turn.cited_numbers
        final = bool(turn.mode)
        rows = []
        for source in turn.sources:
            is_cited = source.n in cited or not final
            color = palette.text if is_cited else palette.faint
            chip_bg = palette.accent_soft if is_cited else palette.surface_alt
            chip_fg = palette.accent if is_cited else palette.faint
            extra = "" if is_cited else f' <span style="color:{palette.faint};">· not cited</span>'
            if source.removed:
                extra = f' <span style="color:{palette.faint};">· removed from the library</span>'
            # The section says more than a title repeated on every row of one document;
            # the file name after it still tells which document it is.
            title = _short(source.section or source.display_name, 64)
            # Keep "file · p. 3" together: a page number alone on a line reads as noise.
            where = _esc(source.where).replace(" ", "&nbsp;").replace("-", "\u2011")
            rows.append(
                f'<a href="src:{source.n}" style="text-decoration:none; color:{color};">'
                f'<span style="background-color:{chip_bg}; color:{chip_fg}; font-weight:600;">'
                f"&#8202;{source.n}&#8202;</span>&nbsp; {_esc(title)}"
                f' <span style="color:{palette.faint};">—&nbsp;{where}</span></a>{extra}'
            )
        self.sources.setText("<br>".join(rows))
        self.sources_title.show()
        self.sources.show()

    # interaction ------------------------------------------------------------------------

    def _link(self, href: str) -> None:
        kind, _, rest = href.partition(":")
        if kind == "cite":
            n_text, _, occ = rest.partition(":")
            self.open_citation(int(n_text), int(occ or 0))
        elif kind == "src":
            n = int(rest)
            citation = self.turn.citation_for(n)
            if citation is not None:
                self.open_citation(n, 0)
            else:
                source = self.turn.source(n)
                if source is not None:
                    self.evidence_requested.emit(EvidenceRequest.for_source(source, f"[{n}]"))

    def open_citation(self, n: int, occurrence: int = 0) -> EvidenceRequest | None:
        citation = self.turn.citation_for(n, occurrence)
        request: EvidenceRequest | None
        if citation is not None:
            request = EvidenceRequest.for_citation(citation)
        else:
            source = self.turn.source(n)
            request = EvidenceRequest.for_source(source, f"[{n}]") if source else None
        if request is not None:
            self.evidence_requested.emit(request)
        return request

    def copy_markdown(self) -> str:
        text = turn_markdown(self.turn)
        QGuiApplication.clipboard().setText(text)
        self.copy_button.setText("Copied")
        self._copied_timer.start(1500)
        return text


# --- search-only results -------------------------------------------------------------


class SearchResultsWidget(QFrame):
    evidence_requested = Signal(object)

    def __init__(self, query: str, theme: Theme, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("turn")
        self.query = query
        self.theme = theme
        self.hits: list[SourceView] = []
        self.error: tuple[str, str] | None = None
        self.loading = True
        self._queue: list[SourceView] = []
        self._terms: set[str] = set()
        self.layout_ = QVBoxLayout(self)
        self.layout_.setContentsMargins(0, 0, 0, 0)
        self.layout_.setSpacing(8)
        self.header = WrapLabel(objectName="searchHeader")
        self.header.setWordWrap(True)
        self.layout_.addWidget(self.header)
        self.results = QVBoxLayout()
        self.results.setSpacing(8)
        self.layout_.addLayout(self.results)
        self.cards: list[ClickableFrame] = []
        self.refresh()

    def set_hits(self, hits: list[Any]) -> None:
        self.loading = False
        self.hits = [SourceView.from_hit(i, h) for i, h in enumerate(hits, 1)]
        self.refresh()

    def set_error(self, message: str, hint: str) -> None:
        self.loading = False
        self.error = (message, hint)
        self.refresh()

    def refresh(self) -> None:
        palette = self.theme.palette
        for card in self.cards:
            card.deleteLater()
        self.cards.clear()
        q = _esc(self.query)
        if self.loading:
            self.header.setText(f'<span style="color:{palette.muted};">Searching for “{q}”…</span>')
            return
        if self.error:
            message, hint = self.error
            self.header.setText(
                f'<span style="color:{palette.error_text};"><b>{_esc(message)}</b></span> {_esc(hint)}'
            )
            return
        count = len(self.hits)
        if not count:
            self.header.setText(
                f"<b>No passages match “{q}”.</b> "
                f'<span style="color:{palette.muted};">Try other words, or check that your folders are indexed.</span>'
            )
            return
        self.header.setText(
            f"<b>{count} passage{'s' if count != 1 else ''} for “{q}”</b> "
            f'<span style="color:{palette.muted};">· best match first · click one to see it in its document</span>'
        )
        self._terms = query_terms(self.query)
        self._queue = list(self.hits)
        self._add_cards()

    def _add_cards(self, batch: int = 3) -> None:
        """A few cards per turn of the event loop: laying out ten rich-text cards at once
        kept the window from repainting for a noticeable moment on a busy machine."""
        palette = self.theme.palette
        for source in self._queue[:batch]:
            card = ClickableFrame()
            card.setObjectName("resultCard")
            card.setAccessibleName(f"Result {source.n}: {source.display_name}")
            lay = QVBoxLayout(card)
            lay.setContentsMargins(14, 10, 14, 12)
            label = WrapLabel(
                f'<span style="color:{palette.accent}; font-weight:600;">{source.n}</span>'
                f"&nbsp;&nbsp;<b>{_esc(_short(source.section or source.display_name, 80))}</b>"
                f' <span style="color:{palette.muted};">— {_esc(source.where)}</span>'
                f'<div style="margin-top:4px;">'
                f"{highlight_terms_html(snippet(source.text, self._terms), self._terms, palette)}</div>"
            )
            label.setObjectName("resultSnippet")
            label.setTextFormat(Qt.TextFormat.RichText)
            label.setWordWrap(True)
            lay.addWidget(label)
            card.label = label  # type: ignore[attr-defined]
            card.clicked.connect(
                lambda s=source: self.evidence_requested.emit(
                    EvidenceRequest.for_source(s, f"Result {s.n}")
                )
            )
            self.results.addWidget(card)
            self.cards.append(card)
        del self._queue[:batch]
        if self._queue:
            QTimer.singleShot(0, self._add_cards)


# --- the first-run / empty state ---------------------------------------------------------


class WelcomeView(QScrollArea):
    add_folder = Signal()
    open_settings = Signal()
    check_again = Signal()
    pull_model = Signal(str)
    use_model = Signal(str)

    def __init__(self, theme: Theme, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("welcome")
        self.theme = theme
        self.snapshot: LibrarySnapshot | None = None
        self.status: LLMStatus | None = None
        # Scrollable, so every step stays whole in a short window.
        self.setWidgetResizable(True)
        self.setFrameShape(QFrame.Shape.NoFrame)
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        inner = QWidget(objectName="welcomeInner")
        self.setWidget(inner)
        outer = QVBoxLayout(inner)
        outer.setContentsMargins(24, 24, 24, 24)
        outer.addStretch(1)
        column = QWidget()
        column.setMaximumWidth(640)
        col = QVBoxLayout(column)
        col.setSpacing(14)
        self.logo = QLabel()
        self.logo.setAlignment(Qt.AlignmentFlag.AlignCenter)
        col.addWidget(self.logo)
        self.title = QLabel("Ask your documents", objectName="welcomeTitle")
        self.title.setAlignment(Qt.AlignmentFlag.AlignCenter)
        col.addWidget(self.title)
        self.subtitle = QLabel(
            "Lectern answers from your own files and shows the exact sentences it used. "
            "Everything stays on this computer.",
            objectName="welcomeSubtitle",
        )
        self.subtitle.setWordWrap(True)
        self.subtitle.setAlignment(Qt.AlignmentFlag.AlignCenter)
        col.addWidget(self.subtitle)
        col.addSpacing(6)

        self.step_docs = self._step()
        self.step_llm = self._step()
        self.step_ask = self._step()
        for step in (self.step_docs, self.step_llm, self.step_ask):
            col.addWidget(step["frame"])
        row = QHBoxLayout()
        row.addStretch(1)
        row.addWidget(column, 100)
        row.addStretch(1)
        outer.addLayout(row)
        outer.addStretch(2)
        theme.changed.connect(lambda _p: self.refresh())
        self.refresh()

    def _step(self) -> dict[str, Any]:
        frame = QFrame(objectName="stepCard")
        lay = QHBoxLayout(frame)
        lay.setContentsMargins(16, 14, 16, 14)
        lay.setSpacing(14)
        mark = QLabel(objectName="stepNumber")
        mark.setFixedSize(28, 28)
        mark.setAlignment(Qt.AlignmentFlag.AlignCenter)
        lay.addWidget(mark, 0, Qt.AlignmentFlag.AlignTop)
        text_col = QVBoxLayout()
        text_col.setSpacing(4)
        title = QLabel(objectName="stepTitle")
        title.setWordWrap(True)
        body = QLabel(objectName="stepBody")
        body.setWordWrap(True)
        body.setTextFormat(Qt.TextFormat.RichText)
        body.setTextInteractionFlags(
            Qt.TextInteractionFlag.TextSelectableByMouse
            | Qt.TextInteractionFlag.LinksAccessibleByMouse
        )
        body.setOpenExternalLinks(True)
        text_col.addWidget(title)
        text_col.addWidget(body)
        buttons = QHBoxLayout()
        buttons.setSpacing(8)
        text_col.addLayout(buttons)
        lay.addLayout(text_col, 1)
        return {"frame": frame, "mark": mark, "title": title, "body": body, "buttons": buttons}

    def _set_step(
        self,
        step: dict[str, Any],
        number: int,
        state: str,
        title: str,
        body: str,
        actions: list[tuple[str, Any, bool]] = (),  # type: ignore[assignment]
    ) -> None:
        palette = self.theme.palette
        mark: QLabel = step["mark"]
        if state == "done":
            mark.setPixmap(icon("check", palette.success, 26).pixmap(26, 26))
            mark.setProperty("state", "done")
        elif state == "problem":
            mark.setPixmap(icon("warning", palette.warning_text, 24).pixmap(24, 24))
            mark.setProperty("state", "problem")
        else:
            mark.setText(str(number))
            mark.setProperty("state", "todo")
        mark.style().unpolish(mark)
        mark.style().polish(mark)
        step["title"].setText(title)
        step["body"].setText(body)
        step["body"].setVisible(bool(body))
        buttons: QHBoxLayout = step["buttons"]
        while buttons.count():
            item = buttons.takeAt(0)
            if item.widget():
                item.widget().deleteLater()
        for text, slot, primary in actions:
            button = QPushButton(text, objectName="primaryButton" if primary else "secondaryButton")
            button.clicked.connect(slot)
            buttons.addWidget(button)
        buttons.addStretch(1)

    def set_snapshot(self, snapshot: LibrarySnapshot) -> None:
        self.snapshot = snapshot
        self._refresh_if_changed()

    def set_llm_status(self, status: LLMStatus) -> None:
        self.status = status
        self._refresh_if_changed()

    def _refresh_if_changed(self) -> None:
        # Snapshots arrive every second or so while indexing; rebuild only on a change.
        snap = self.snapshot
        key = (
            len(snap.folders) if snap else 0,
            snap.documents if snap else 0,
            self.status,
            self.theme.palette.name,
        )
        if key != getattr(self, "_shown", None):
            self._shown = key
            self.refresh()

    def refresh(self) -> None:
        palette = self.theme.palette
        from desktop.theme import app_icon

        self.logo.setPixmap(app_icon().pixmap(64, 64))
        snap = self.snapshot
        folders = len(snap.folders) if snap else 0
        if folders:
            files = snap.documents if snap else 0
            self.title.setText("Ask your documents")
            self._set_step(
                self.step_docs,
                1,
                "done",
                f"{folders} folder{'s' if folders != 1 else ''} in your library",
                f"{files} file{'s' if files != 1 else ''} indexed. Drop more folders anywhere on this window.",
            )
        else:
            self.title.setText("Welcome to Lectern")
            self._set_step(
                self.step_docs,
                1,
                "todo",
                "Add a folder of documents",
                "Drop a folder anywhere on this window, or choose one. Lectern reads PDF, Word "
                "(.docx), Markdown, HTML and text files, and keeps watching the folder for changes.",
                [("Add folder…", self.add_folder.emit, True)],
            )
        self._llm_step(palette)
        self._set_step(
            self.step_ask,
            3,
            "todo",
            "Ask a question",
            "Type it below and press Enter. Every answer cites its sources: click a number to "
            "see the highlighted passage. Switch to <b>Search</b> for ranked passages instead.",
        )

    def _llm_step(self, palette: Palette) -> None:
        status = self.status
        step = self.step_llm
        if status is None or status.state == "checking":
            self._set_step(step, 2, "todo", "Checking for a language model…", "")
            return
        url = _esc(status.url or "")
        if status.ready:
            self._set_step(
                step,
                2,
                "done",
                f"Language model ready: {status.model}",
                f"Answers are written by {_esc(status.model)} on {status.server_name} at {url}.",
                [("Change…", self.open_settings.emit, False)],
            )
            return
        fallback = (
            "Until then, Lectern answers in <b>search-only mode</b>: it quotes the best "
            "matching sentences from your documents, with their sources."
        )
        if status.state == "unreachable" and status.kind == "ollama":
            body = (
                f"Lectern did not find Ollama at {url}. To get written answers:"
                "<ol style='margin:4px 0 4px 0;'>"
                "<li>Install Ollama from <a href='https://ollama.com/download'>ollama.com/download</a>.</li>"
                "<li>Start it: open the Ollama app, or run <code>ollama serve</code>.</li>"
                f"<li>Download a model: <code>ollama pull {_esc(status.model or 'llama3.2')}</code>"
                " (or use the button that appears here).</li>"
                "<li>Click <b>Check again</b>.</li></ol>" + fallback
            )
            self._set_step(
                step,
                2,
                "problem",
                "Optional: connect a language model",
                body,
                [
                    ("Check again", self.check_again.emit, True),
                    ("Use another server…", self.open_settings.emit, False),
                ],
            )
        elif status.state == "invalid":
            self._set_step(
                step,
                2,
                "problem",
                "The model server address is not valid",
                f"{_esc(status.message)} {_esc(status.hint)}<br>{fallback}",
                [
                    ("Open Settings…", self.open_settings.emit, True),
                    ("Check again", self.check_again.emit, False),
                ],
            )
        elif status.state == "unreachable":
            self._set_step(
                step,
                2,
                "problem",
                "The model server is not answering",
                f"{_esc(status.message)} {_esc(status.hint)}<br>{fallback}",
                [
                    ("Check again", self.check_again.emit, True),
                    ("Settings…", self.open_settings.emit, False),
                ],
            )
        elif status.state == "no_models":
            model = status.model or "llama3.2"
            self._set_step(
                step,
                2,
                "problem",
                f"{status.server_name.capitalize()} is running but has no model yet",
                f"Download one to get written answers: {_esc(model)} is about 2 GB and runs on "
                f"most laptops. Or run <code>ollama pull {_esc(model)}</code> yourself.<br>{fallback}",
                [
                    (f"Download {model}", lambda: self.pull_model.emit(model), True),
                    ("Choose a model…", self.open_settings.emit, False),
                ],
            )
        elif status.state == "model_missing":
            other = status.models[0] if status.models else ""
            actions: list[tuple[str, Any, bool]] = []
            if status.kind == "ollama":
                actions.append(
                    (f"Download {status.model}", lambda: self.pull_model.emit(status.model), True)
                )
            if other:
                actions.append((f"Use {other}", lambda: self.use_model.emit(other), not actions))
            actions.append(("Settings…", self.open_settings.emit, False))
            self._set_step(
                step,
                2,
                "problem",
                f"The model {status.model} is not installed",
                f"The server has {_esc(', '.join(status.models[:4]))}. Download {_esc(status.model)}, "
                f"or use one that is there.<br>{fallback}",
                actions,
            )
        else:
            self._set_step(
                step,
                2,
                "problem",
                "The model server has a problem",
                f"{_esc(status.message)} {_esc(status.hint)}<br>{fallback}",
                [
                    ("Check again", self.check_again.emit, True),
                    ("Settings…", self.open_settings.emit, False),
                ],
            )


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
            "Search-only: ranked passages with your words highlighted, no language model (Ctrl+2)"
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
            text, color = "Search-only", palette.warning_text
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
        self.llm_pill.setToolTip(tip)
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
