"""The answer to one question as the conversation shows it: the streamed text, its
sources and citations, warnings, and the actions a failed answer offers."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING

from core.generation.events import SERVER_FAILED, WarningKind
from core.store.redaction import blank_answer, shown_answer
from desktop.qt import (
    QFrame,
    QGuiApplication,
    QHBoxLayout,
    QLabel,
    QProgressBar,
    QPushButton,
    QSize,
    QSizePolicy,
    Qt,
    QTimer,
    QToolButton,
    QVBoxLayout,
    QWidget,
    Signal,
    named,
)
from desktop.rich import (
    answer_html,
    esc,
    shorten_words,
    turn_markdown,
)
from desktop.theme import Palette, Theme, icon
from desktop.viewmodels import (
    EvidenceRequest,
    NoteView,
    SourceView,
    TurnView,
)
from desktop.widgets import DetailsFold, WrapLabel

if TYPE_CHECKING:
    from desktop.model_download import ModelDownload

# Warnings that say the answer itself is incomplete or second-best, shown prominently;
# the rest are advice about individual sentences.
STRONG_WARNINGS = {
    WarningKind.INCOMPLETE,
    WarningKind.CANCELLED,
    WarningKind.FAILED,
    WarningKind.CUT_OFF,
    WarningKind.TRUNCATED,
    *SERVER_FAILED,  # no model wrote the answer: unavailable, silent or without the model
    WarningKind.EMPTY,
    WarningKind.NOT_SAVED,
    WarningKind.NO_SOURCES,
    WarningKind.EMPTY_LIBRARY,
    WarningKind.STILL_INDEXING,
}


# Warnings whose answer a second try may complete: they carry an "Ask again" button.
ASK_AGAIN_WARNINGS = {
    WarningKind.INCOMPLETE,
    WarningKind.LLM_TIMEOUT,
    WarningKind.LLM_UNAVAILABLE,
    WarningKind.FAILED,  # a kept answer an error or Lectern's end cut short
    WarningKind.CUT_OFF,
}
# The note that stands for an answer's sentences whose document left the library.
SOURCE_MISSING = "source_missing"

# No language model to write answers: said once in a conversation (and all along by the
# header's model badge and each card's "no language model" badge). The same large box
# on every answer buried the answers under it.
ONCE_PER_CONVERSATION = {WarningKind.LLM_UNAVAILABLE, WarningKind.MODEL_MISSING}

# Warnings said in a few words on the card, the whole message (the server's address, how
# to start it) in the note's tooltip: the header's badge says it all along, and the full
# sentences filled half of a card in a narrow window.
SHORT_WARNINGS: dict[str, str] = {
    # The card's badge already says the answer is quoted: the note says what to do.
    WarningKind.LLM_UNAVAILABLE: "Model server not running: start it and ask again.",
}


class _Bubble(WrapLabel):
    """The question: one line when it fits, wrapped when the column is narrower.

    A minimum width would hold the column wider than a small window and push the answer
    under the evidence panel; asking for the width in the size hint lets the layout give
    less."""

    def __init__(self, *, objectName: str = "") -> None:
        super().__init__(objectName=objectName)
        self.wanted = 0

    def sizeHint(self) -> QSize:
        hint = super().sizeHint()
        if not self.wanted:
            return hint
        return QSize(self.wanted, self.heightForWidth(self.wanted))

    def minimumSizeHint(self) -> QSize:
        return QSize(min(self.wanted or 120, 120), super().minimumSizeHint().height())


class TurnWidget(QFrame):
    evidence_requested = Signal(object)  # EvidenceRequest
    # name, argument: pull (the model, in Settings) / download (the model, here) /
    # settings / retry (the question)
    action_requested = Signal(str, object)

    def __init__(
        self,
        turn: TurnView,
        theme: Theme,
        parent: QWidget | None = None,
        *,
        said_before: Callable[[str], bool] | None = None,
        earlier_sources: Callable[[], set[tuple[str, int, int]]] | None = None,
    ) -> None:
        super().__init__(parent)
        self.setObjectName("turn")
        self.turn = turn
        self.theme = theme
        # Whether an earlier answer of the conversation already said a warning of this
        # kind (the conversation panel answers; alone, a card says everything). Given
        # here, not set after: a reopened answer is drawn once, by this constructor, and
        # drawn without it repeated the no-model note on every answer.
        self.said_before: Callable[[str], bool] = said_before or (lambda _kind: False)
        # The passages earlier answers of the conversation listed, as (path, start, end):
        # a follow-up's retrieval carries the earlier question's words, so it finds them
        # again; listed uncited under every follow-up they were noise.
        self.earlier_sources: Callable[[], set[tuple[str, int, int]]] = earlier_sources or set
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(8)

        qrow = QHBoxLayout()
        qrow.addStretch(1)
        self.question = _Bubble(objectName="questionBubble")
        self.question.setWordWrap(True)
        self.question.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.question.setMaximumWidth(640)
        qrow.addWidget(self.question)
        layout.addLayout(qrow)

        card = named(QFrame(), "answerCard")
        self.card = card
        body = QVBoxLayout(card)
        body.setContentsMargins(18, 14, 18, 14)
        body.setSpacing(10)
        head = QHBoxLayout()
        head.setSpacing(8)
        self.badge_icon = QLabel()
        # Wraps in a narrow column rather than holding the card wider than the window.
        self.badge = WrapLabel(objectName="answerBadge", shrinks=True)
        self.badge.setTextFormat(Qt.TextFormat.PlainText)
        self.badge_icon.setAlignment(Qt.AlignmentFlag.AlignTop)
        head.addWidget(self.badge_icon, 0, Qt.AlignmentFlag.AlignTop)
        head.addWidget(self.badge, 1)
        self.copy_button = named(QToolButton(), "iconButton")
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

        # Copied from, it gives code's hyphens plain again (WrapLabel).
        self.answer = WrapLabel(objectName="answerText", shrinks=True)
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
        # A missing model downloaded from this answer's note (see desktop/model_download.py).
        self.download: ModelDownload | None = None
        self.download_outcome = ""  # "" | "done" | "cancelled" | the failure's words
        self.download_bar: QProgressBar | None = None
        self.download_text: WrapLabel | None = None

        self.error_box = named(QFrame(), "errorBox")
        ebox = QVBoxLayout(self.error_box)
        ebox.setContentsMargins(12, 10, 12, 10)
        ebox.setSpacing(8)
        self.error_text = WrapLabel(objectName="errorText", shrinks=True)
        self.error_text.setWordWrap(True)
        self.error_text.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        ebox.addWidget(self.error_text)
        self.error_details = DetailsFold(objectName="errorDetails")
        ebox.addWidget(self.error_details)
        self.error_actions = QHBoxLayout()
        self.error_actions.setSpacing(8)
        ebox.addLayout(self.error_actions)
        self.error_box.hide()
        body.addWidget(self.error_box)

        self.sources_title = named(QLabel("Sources"), "sectionCaption")
        body.addWidget(self.sources_title)
        self.sources = WrapLabel(objectName="sourcesList", shrinks=True)
        self.sources.setWordWrap(True)
        self.sources.setTextFormat(Qt.TextFormat.RichText)
        self.sources.setTextInteractionFlags(
            Qt.TextInteractionFlag.LinksAccessibleByMouse
            | Qt.TextInteractionFlag.LinksAccessibleByKeyboard
        )
        self.sources.linkActivated.connect(self._link)
        body.addWidget(self.sources)
        layout.addWidget(card)
        self._missing = ""  # the one line said for sentences gone with their document
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
        self.question.setText(esc(turn.question).replace("\n", "<br>"))
        # A word-wrapped label asks for a narrow width; give short questions one line.
        self.question.ensurePolished()
        longest = max(
            (
                self.question.fontMetrics().horizontalAdvance(line)
                for line in turn.question.splitlines() or [""]
            ),
            default=0,
        )
        self.question.wanted = min(longest + 34, 560)
        self.question.updateGeometry()
        self._badge(palette)
        answer, self._missing = self._shown_answer()
        if answer:
            known = turn.cited_numbers if turn.mode else {s.n for s in turn.sources} or None
            self.answer.setText(answer_html(answer, palette, known, cursor=turn.streaming))
            self.answer.show()
        elif turn.streaming:
            if turn.rewriting:
                waiting = esc(turn.rewriting)
            elif not turn.sources:
                waiting = "Searching your documents…"
            else:
                waiting = "Reading the sources…"
            self.answer.setText(f'<span style="color:{palette.muted};">{waiting}</span>')
            self.answer.show()
        else:
            self.answer.clear()  # no text of a sentence since removed lingers, even hidden
            self.answer.hide()
        self._notes(palette)
        self._error(palette)
        self._sources(palette)
        self.copy_button.setVisible(bool(turn.answer) and not turn.streaming)
        self.copy_button.setIcon(icon("copy", palette.muted, 16))

    def _shown_answer(self) -> tuple[str, str]:
        """The answer as shown, and the line said once for its sentences whose document
        left the library (core.store.redaction.shown_answer): missing, not wiped."""
        turn = self.turn
        if turn.streaming:
            return turn.answer, ""
        removed = [s for s in turn.sources if s.removed]
        drawn = [s for s in removed if s.n in turn.cited_numbers] or removed
        return shown_answer(turn.answer, [s.file_name for s in drawn])

    def _badge(self, palette: Palette) -> None:
        turn = self.turn
        if turn.streaming:
            name, text, color = "sparkle", "Writing the answer…", palette.accent
            if not turn.answer:
                text = "Looking through your documents…"
        elif (turn.error is not None or turn.state not in ("done", "")) and not turn.answer:
            # A kept answer that never got a word: failed, stopped or cut off.
            name, text, color = "error", "No answer", palette.error_text
        elif turn.mode == "generated":
            name, text, color = (
                "sparkle",
                f"Answer{' · ' + turn.model if turn.model else ''}",
                palette.accent,
            )
            if turn.reordered_s is not None:
                text += f" · sources put in order in {turn.reordered_s:.1f} s"
        elif turn.mode == "extractive" and any(k == "quoted_first" for k, _ in turn.warnings):
            # The model wrote an answer that failed its check: it follows the quote.
            name, text, color = (
                "book",
                # "unverified" is said once, where the model's text begins.
                f"Quoted from your documents · then {turn.model or 'the model'}'s answer",
                palette.muted,
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
        self.badge.setToolTip(text)  # the whole words, where a long model name is cut
        self.badge.setStyleSheet(f"color: {color};")

    def _notes(self, palette: Palette) -> None:
        while self.notes.count():
            item = self.notes.takeAt(0)
            widget = item.widget() if item is not None else None
            if widget:
                # Hidden at once: deleteLater leaves it a live child until the event loop runs.
                widget.hide()
                widget.deleteLater()
        missing = [NoteView(SOURCE_MISSING, self._missing)] if self._missing else []
        for note in [*missing, *self.turn.notes]:
            kind, message = note.kind, note.message
            if kind in ONCE_PER_CONVERSATION and self.said_before(kind):
                continue
            strong = kind in STRONG_WARNINGS
            row = named(QFrame(), "warningNote" if strong else "adviceNote")
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
            if kind == WarningKind.MODEL_MISSING and self.turn.missing_model:
                # The CLI's words name `lectern pull`; here the next step is the button.
                message = (
                    f"The model {self.turn.missing_model} is not installed, so these are "
                    "sentences quoted from your documents instead of a written answer."
                )
            short = SHORT_WARNINGS.get(kind)
            text = WrapLabel(esc(short or message), shrinks=True)
            whole = "\n\n".join(w for w in (message if short else "", note.details) if w)
            if whole:
                text.setToolTip(whole)
                row.setToolTip(whole)
            text.setObjectName("warningText" if strong else "adviceText")
            text.setWordWrap(True)
            text.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
            text.setProperty("warningKind", kind)
            lay.addWidget(mark)
            column = QVBoxLayout()
            column.setSpacing(6)
            column.addWidget(text)
            lay.addLayout(column, 1)
            if (
                kind == WarningKind.MODEL_MISSING
                and self.turn.missing_model
                and not self.turn.streaming
            ):
                # Buttons under the sentence: beside it they squeezed it to a column.
                actions = QHBoxLayout()
                actions.setSpacing(8)
                self._download_note(column, actions)
                actions.addStretch(1)
                column.addLayout(actions)
            elif kind in ASK_AGAIN_WARNINGS and not self.turn.streaming:
                # The answer was cut short: the next step is one click, not a sentence.
                button = named(QPushButton("Ask again"), "secondaryButton")
                button.clicked.connect(
                    lambda: self.action_requested.emit("retry", self.turn.question)
                )
                lay.addWidget(button, 0, Qt.AlignmentFlag.AlignTop)
            self.notes.addWidget(row)
            # A child added to a shown widget is shown by a queued call: shown now, a note
            # and its button never lag a frame behind the answer (or a check of them).
            row.show()

    def _download_note(self, column: QVBoxLayout, buttons: QHBoxLayout) -> None:
        """The missing model's note: *Download* it here, its progress, then *Ask again*."""
        model = self.turn.missing_model
        self.download_bar = self.download_text = None
        running = self.download is not None and self.download.running
        if running:
            bar = QProgressBar()
            bar.setRange(0, 1000)
            bar.setTextVisible(False)
            bar.setFixedHeight(8)
            status = WrapLabel(objectName="adviceText")
            status.setWordWrap(True)
            column.addWidget(bar)
            column.addWidget(status)
            self.download_bar, self.download_text = bar, status
            if self.download is not None:
                self.show_download(self.download.status)
            self._action("Cancel", "cancel_download", model, row=buttons)
            return
        outcome = self.download_outcome
        if outcome == "done":
            ready = WrapLabel(esc(f"✓ {model} is ready. Ask again for a written answer."))
            ready.setObjectName("adviceText")
            ready.setWordWrap(True)
            column.addWidget(ready)
            self._action("Ask again", "retry", self.turn.question, primary=True, row=buttons)
            return
        if outcome and outcome != "cancelled":
            failed = WrapLabel(esc(outcome))
            failed.setObjectName("warningText")
            failed.setWordWrap(True)
            column.addWidget(failed)
        label = "Try again" if outcome and outcome != "cancelled" else f"Download {model}"
        self._action(label, "download", model, primary=True, row=buttons)
        self._action("Choose another model…", "settings", None, row=buttons)

    def follow_download(self, download: ModelDownload) -> None:
        """Show ``download``'s progress in this answer's note until it ends."""
        self.download = download
        self.download_outcome = ""
        # Bound methods, not lambdas: Qt drops them when this answer is closed first.
        download.progressed.connect(self.show_download)
        download.finished.connect(self._download_done)
        download.cancelled.connect(self._download_cancelled)
        download.failed.connect(self._download_failed)
        self._notes(self.theme.palette)

    def show_download(self, status: object) -> None:
        bar, text = self.download_bar, self.download_text
        if bar is None or text is None:
            return
        fraction = getattr(status, "fraction", None)
        if fraction is None:
            bar.setRange(0, 0)  # busy until the first layer with a size
        else:
            bar.setRange(0, 1000)
            bar.setValue(int(fraction * 1000))
        words = (
            getattr(status, "text", "") or f"Starting the download of {self.turn.missing_model}…"
        )
        text.setText(esc(words))

    def _download_done(self, _model: str) -> None:
        self._download_ended("done")

    def _download_cancelled(self) -> None:
        self._download_ended("cancelled")

    def _download_failed(self, message: str, hint: str) -> None:
        self._download_ended(f"{message} {hint}")

    def _download_ended(self, outcome: str) -> None:
        self.download_outcome = outcome.strip()
        self._notes(self.theme.palette)

    def _error(self, palette: Palette) -> None:
        error = self.turn.error
        while self.error_actions.count():
            item = self.error_actions.takeAt(0)
            widget = item.widget() if item is not None else None
            if widget:
                widget.deleteLater()
        if error is None:
            self.error_box.hide()
            return
        hint = f"<br>{esc(error.hint)}" if error.hint else ""
        self.error_text.setText(f"<b>{esc(error.message)}</b>{hint}")
        self.error_details.set_details(error.details)
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

    def _action(
        self,
        text: str,
        name: str,
        arg: object,
        primary: bool = False,
        row: QHBoxLayout | None = None,
    ) -> None:
        """A button asking for ``name`` with ``arg``; in the error box unless ``row``."""
        button = named(QPushButton(text), "primaryButton" if primary else "secondaryButton")
        button.clicked.connect(lambda: self.action_requested.emit(name, arg))
        if row is None:
            self.error_actions.addWidget(button)
        else:
            row.addWidget(button, 0, Qt.AlignmentFlag.AlignLeft)

    def shown_sources(self) -> list[list[SourceView]]:
        """The sources the card lists, one entry per document with its passages in
        number order; an uncited passage an earlier answer already listed is left out,
        unless the answer cites nothing (then every passage it was given is its source)."""
        turn = self.turn
        final = bool(turn.mode)
        cited = turn.cited_numbers
        earlier = self.earlier_sources() if final and cited else set()
        documents: dict[str, list[SourceView]] = {}
        for source in turn.sources:
            carried = (source.path, source.start, source.end) in earlier
            if final and carried and source.n not in cited:
                continue
            documents.setdefault(source.path, []).append(source)
        return list(documents.values())

    def _sources(self, palette: Palette) -> None:
        turn = self.turn
        shown = self.shown_sources()
        if not shown:
            self.sources_title.hide()
            self.sources.hide()
            self.sources.setText("")
            return
        cited = turn.cited_numbers
        final = bool(turn.mode)
        rows = []
        whole: list[str] = []
        for passages in shown:
            # Passages under one label (a section, or the title of a document without
            # sections) share it: "1 6 Expense limits", not the label twice.
            labels: dict[str, list[SourceView]] = {}
            for source in passages:
                labels.setdefault(source.label, []).append(source)
            parts = []
            for label, group in labels.items():
                chips = []
                for source in group:
                    is_cited = source.n in cited or not final
                    color = palette.text if is_cited else palette.faint
                    chip_bg = palette.accent_soft if is_cited else palette.surface_alt
                    chip_fg = palette.accent if is_cited else palette.faint
                    chips.append(
                        f'<a href="src:{source.n}" style="text-decoration:none; color:{color};">'
                        f'<span style="background-color:{chip_bg}; color:{chip_fg}; '
                        f'font-weight:600;">&#8202;{source.n}&#8202;</span></a>'
                    )
                first = group[0]
                any_cited = any(g.n in cited for g in group) or not final
                color = palette.text if any_cited else palette.faint
                extra = (
                    "" if any_cited else f' <span style="color:{palette.faint};">· not cited</span>'
                )
                if all(g.removed for g in group):
                    extra = (
                        f' <span style="color:{palette.faint};">· removed from the library</span>'
                    )
                # The section says more than a title repeated on every row of one document;
                # the file name after it still tells which document it is.
                title = shorten_words(label, 64 // len(labels) + 8)
                parts.append(
                    " ".join(chips)
                    + f'&nbsp; <a href="src:{first.n}" style="text-decoration:none; '
                    f'color:{color};">{esc(title)}</a>{extra}'
                )
            # One entry per document: its passages, then once where they are.
            name, places = _where_of(passages)
            shown_name = _short_file_name(name)
            if shown_name != name:
                whole.append(f"{name} · {', '.join(places)}" if places else name)
            rows.append(
                "; ".join(parts)
                + f' <span style="color:{palette.faint};">'
                + f"—&nbsp;{_where_html(shown_name, places)}</span>"
            )
        self.sources.setText("<br>".join(rows))
        # A file name shortened to fit is there whole, in the tooltip.
        self.sources.setToolTip("\n".join(whole))
        self.sources_title.show()
        self.sources.show()

    def forget_sources(self, kept: Callable[[str], bool]) -> bool:
        """Blank the text of the sources whose document is no longer in the library (not
        ``kept``), and the answer's sentences citing or quoting them, as the stored
        conversation does (core/store/redaction.py); True when any was."""
        turn = self.turn
        gone = {s.path for s in turn.sources if not s.removed and not kept(s.path)}
        if not gone:
            return False
        if not turn.streaming:
            passages = {s.n: s.text for s in turn.sources if s.path in gone and s.text}
            turn.answer = blank_answer(turn.answer, passages)
        turn.sources = [
            replace(s, text="", removed=True) if s.path in gone else s for s in turn.sources
        ]
        by_n = {s.n: s for s in turn.sources}
        turn.citations = [
            replace(
                c,
                source=by_n.get(c.n, c.source),
                spans=tuple(replace(span, text="") for span in c.spans),
                sentence="",
            )
            if c.source is not None and c.source.path in gone
            else c
            for c in turn.citations
        ]
        return True

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


def _where_of(passages: list[SourceView]) -> tuple[str, list[str]]:
    """A document's file name and the places of its passages, each once: ``file.pdf``
    and ``["p. 1", "p. 3"]``; no places for a format without them."""
    name = passages[0].file_name
    places: list[str] = []
    for source in passages:
        where = source.where
        place = where[len(name) + 3 :] if where.startswith(f"{name} · ") else ""
        if place and place not in places:
            places.append(place)
    return name, places


# The longest file name a source line shows whole; longer ones keep their start and end.
FILE_NAME_CHARS = 40


def _short_file_name(name: str, limit: int = FILE_NAME_CHARS) -> str:
    """``name`` whole when short; else its start up to a word break, "…", and its end
    with the extension ("equipment-register-north…-2024.csv")."""
    if len(name) <= limit:
        return name
    stem, dot, extension = name.rpartition(".")
    if not dot or not stem or len(extension) > 8:
        stem, extension = name, ""
    end = stem[-12:]
    # The end from a word's start: "…final-2024.csv", not "…nal-2024.csv".
    starts = [i + 1 for i, c in enumerate(end[:-1]) if c in " -_."]
    tail = (end[starts[0] :] if starts else end[-8:]) + (f".{extension}" if extension else "")
    head = shorten_words(stem, max(8, limit - len(tail))).removesuffix("…")
    return f"{head}…{tail}"


def _where_html(name: str, places: list[str]) -> str:
    """Where a source is, as rich text that wraps between its places, never inside one:
    "p.&nbsp;3" or "rows&nbsp;1–14" apart on two lines read as noise, while the whole
    line held together (a table's passages: "rows 1–14, rows 15–28, …") was wider than a
    1024 px window's conversation. The file name keeps its hyphens (no break inside it)."""
    shown = esc(name).replace("-", "\u2011")
    if not places:
        return shown
    kept = [esc(place).replace(" ", "&nbsp;").replace("-", "\u2011") for place in places]
    return f"{shown} ·&nbsp;{', '.join(kept)}"
