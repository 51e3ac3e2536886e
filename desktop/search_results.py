"""Search-only results: one card per passage, with the searched words highlighted."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from desktop.qt import (
    QFrame,
    Qt,
    QTimer,
    QVBoxLayout,
    QWidget,
    Signal,
)
from desktop.rich import (
    esc,
    highlight_terms_html,
    markdown_as_read,
    query_terms,
    shorten,
    snippet,
)
from desktop.theme import Theme
from desktop.viewmodels import (
    EvidenceRequest,
    SourceView,
)
from desktop.widgets import ClickableFrame, WrapLabel


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
        q = esc(self.query)
        if self.loading:
            self.header.setText(f'<span style="color:{palette.muted};">Searching for “{q}”…</span>')
            return
        if self.error:
            message, hint = self.error
            self.header.setText(
                f'<span style="color:{palette.error_text};"><b>{esc(message)}</b></span> {esc(hint)}'
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
            text = markdown_as_read(source.text) if source.type == "md" else source.text
            shown = snippet(text, self._terms)
            label = WrapLabel(
                f'<span style="color:{palette.accent}; font-weight:600;">{source.n}</span>'
                f"&nbsp;&nbsp;<b>{esc(shorten(source.section or source.display_name, 80))}</b>"
                f' <span style="color:{palette.muted};">— {esc(source.where)}</span>'
                f'<div style="margin-top:4px;">'
                f"{highlight_terms_html(shown, self._terms, palette)}</div>"
            )
            label.setObjectName("resultSnippet")
            label.setTextFormat(Qt.TextFormat.RichText)
            label.setWordWrap(True)
            lay.addWidget(label)
            card.label = label  # type: ignore[attr-defined]
            # The panel lights the searched words, not the whole passage (every line and
            # table cell of it), and quotes what this card shows.
            request = replace(
                EvidenceRequest.for_source(source, f"Result {source.n}"),
                terms=tuple(sorted(self._terms)),
                quote=shown,
            )
            card.clicked.connect(lambda r=request: self.evidence_requested.emit(r))
            self.results.addWidget(card)
            self.cards.append(card)
        del self._queue[:batch]
        if self._queue:
            QTimer.singleShot(0, self._add_cards)
