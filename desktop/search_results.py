"""Search-only results: one card per passage, with the searched words highlighted.

The Search tab is a list of its own (``SearchView``), not part of the conversation's
transcript: the latest search's results, best first and scrolled to the top, kept with
each conversation while the app runs. It searches the words (passages that contain
them) or, when asked, their meaning too (passages that may not hold the words at all)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from core.records import MODE_NAMES, SECOND_STAGE_NOTE, second_stage_state
from desktop.qt import (
    QFrame,
    QHBoxLayout,
    QLabel,
    QScrollArea,
    Qt,
    QTimer,
    QVBoxLayout,
    QWidget,
    Signal,
    named,
)
from desktop.rich import (
    esc,
    highlight_terms_html,
    markdown_as_read,
    query_terms,
    shorten,
    snippet,
    term_key,
)
from desktop.theme import Theme
from desktop.viewmodels import (
    EvidenceRequest,
    SourceView,
)
from desktop.widgets import ClickableFrame, WrapLabel, segmented_control


class _ResultCard(ClickableFrame):
    label: WrapLabel  # assigned right after construction, once the card has a layout to hold it


class SearchResultsWidget(QFrame):
    evidence_requested = Signal(object)

    def __init__(
        self, query: str, theme: Theme, parent: QWidget | None = None, *, words_only: bool = False
    ) -> None:
        super().__init__(parent)
        self.setObjectName("turn")
        self.query = query
        self.words_only = words_only
        self.theme = theme
        self.hits: list[SourceView] = []
        self.error: tuple[str, str] | None = None
        self.loading = True
        self.cut_short = False  # the second stage ran out of time (a busy computer)
        self._queue: list[tuple[SourceView, set[str]]] = []
        self._terms: set[str] = set()
        # Per hit, the words the keyword index matched in it (None: not known, the
        # query's own words are looked for).
        self._matched: list[frozenset[str]] | None = None
        self.layout_ = QVBoxLayout(self)
        self.layout_.setContentsMargins(0, 0, 0, 0)
        self.layout_.setSpacing(8)
        self.header = WrapLabel(objectName="searchHeader")
        self.header.setWordWrap(True)
        self.layout_.addWidget(self.header)
        self.results = QVBoxLayout()
        self.results.setSpacing(8)
        self.layout_.addLayout(self.results)
        self.cards: list[_ResultCard] = []
        self.refresh()

    def set_hits(self, hits: list[Any], matched: Sequence[frozenset[str]] | None = None) -> None:
        """``matched``: the words of each hit that the keyword index matched (see
        KeywordIndex.matched_words): lit as found, stemmed in the passage's language
        ("Mitarbeitern" for "Mitarbeiter", "reimbursed" for "reimbursement") and without
        its stop words, where the query's own words would miss some and light others."""
        self.loading = False
        self.cut_short = second_stage_state(hits) in ("cut short", "skipped")
        self.hits = [SourceView.from_hit(i, h) for i, h in enumerate(hits, 1)]
        self._matched = list(matched) if matched is not None and len(matched) == len(hits) else None
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
            advice = (
                "No passage holds these words. Try other words, or search by meaning."
                if self.words_only
                else "Try other words, or check that your folders are indexed."
            )
            self.header.setText(
                f"<b>No passages match “{q}”.</b> "
                f'<span style="color:{palette.muted};">{advice}</span>'
            )
            return
        how = "containing the words" if self.words_only else "by words and meaning"
        self.header.setText(
            f"<b>{count} passage{'s' if count != 1 else ''} for “{q}”</b> "
            f'<span style="color:{palette.muted};">· {how} · best match first · '
            "click one to see it in its document</span>"
            + (
                f'<br><span style="color:{palette.muted};">{SECOND_STAGE_NOTE}</span>'
                if self.cut_short
                else ""
            )
        )
        self._terms = query_terms(self.query)
        matched = self._matched
        self._queue = [
            (source, {term_key(w) for w in matched[i]} if matched is not None else self._terms)
            for i, source in enumerate(self.hits)
        ]
        self._add_cards()

    def _add_cards(self, batch: int = 3) -> None:
        """A few cards per turn of the event loop: laying out ten rich-text cards at once
        kept the window from repainting for a noticeable moment on a busy machine."""
        palette = self.theme.palette
        for source, terms in self._queue[:batch]:
            card = _ResultCard()
            card.setObjectName("resultCard")
            card.setAccessibleName(f"Result {source.n}: {source.display_name}")
            lay = QVBoxLayout(card)
            lay.setContentsMargins(14, 10, 14, 12)
            text = markdown_as_read(source.text) if source.type == "md" else source.text
            shown = snippet(text, terms)
            label = WrapLabel(
                f'<span style="color:{palette.accent}; font-weight:600;">{source.n}</span>'
                f"&nbsp;&nbsp;<b>{esc(shorten(source.label, 80))}</b>"
                f' <span style="color:{palette.muted};">— {esc(source.where)}</span>'
                f'<div style="margin-top:4px;">'
                f"{highlight_terms_html(shown, terms, palette)}</div>"
            )
            label.setObjectName("resultSnippet")
            label.setTextFormat(Qt.TextFormat.RichText)
            label.setWordWrap(True)
            lay.addWidget(label)
            card.label = label
            # The panel lights the searched words, not the whole passage (every line and
            # table cell of it), and quotes what this card shows.
            request = replace(
                EvidenceRequest.for_source(source, f"Result {source.n}"),
                terms=tuple(sorted(terms)),
                quote=shown,
            )
            card.clicked.connect(lambda r=request: self.evidence_requested.emit(r))
            self.results.addWidget(card)
            self.cards.append(card)
        del self._queue[:batch]
        if self._queue:
            QTimer.singleShot(0, self._add_cards)


SEARCH_EMPTY = (
    "Type words below and press Enter: the passages that contain them are listed here, "
    "best match first. Click one to see it in its document."
)


class SearchView(QFrame):
    """The Search tab: how to search (the words, or their meaning too) over the latest
    search's results, one list per conversation."""

    evidence_requested = Signal(object)
    mode_changed = Signal(bool)  # words only

    def __init__(self, theme: Theme, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("searchView")
        self.theme = theme
        # Each conversation's latest results (None: the conversation not saved yet).
        self._kept: dict[int | None, SearchResultsWidget] = {}
        self.key: int | None = None
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(0)

        bar = QHBoxLayout()
        bar.setContentsMargins(24, 12, 24, 4)
        bar.setSpacing(8)
        bar.addWidget(named(QLabel("Find"), "searchModeLabel"))
        segment, self.mode_group, (self.words_button, self.meaning_button) = segmented_control(
            self,
            [
                (MODE_NAMES["bm25"], "Only passages that contain the words you typed"),
                (
                    MODE_NAMES["hybrid"],
                    "Also passages close in meaning, which may not contain the words",
                ),
            ],
        )
        self.words_button.setChecked(True)
        self.mode_group.buttonToggled.connect(
            lambda button, on: self.mode_changed.emit(self.words_only) if on else None
        )
        bar.addWidget(segment)
        bar.addStretch(1)
        layout.addLayout(bar)

        self.scroll_area = named(QScrollArea(), "transcript")
        self.scroll_area.setWidgetResizable(True)
        self.scroll_area.setFrameShape(QFrame.Shape.NoFrame)
        self.scroll_area.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        holder = named(QWidget(), "transcriptHolder")
        hl = QHBoxLayout(holder)
        hl.setContentsMargins(24, 12, 24, 24)
        hl.addStretch(1)
        self.column = named(QWidget(), "transcriptColumn")
        self.column.setMaximumWidth(860)
        self.column_layout = QVBoxLayout(self.column)
        self.column_layout.setContentsMargins(0, 0, 0, 0)
        self.empty = WrapLabel(SEARCH_EMPTY, objectName="searchEmpty")
        self.column_layout.addWidget(self.empty)
        self.column_layout.addStretch(1)
        hl.addWidget(self.column, 100)
        hl.addStretch(1)
        self.scroll_area.setWidget(holder)
        layout.addWidget(self.scroll_area, 1)
        theme.changed.connect(self._restyle)
        self._restyle()

    @property
    def words_only(self) -> bool:
        return self.words_button.isChecked()

    def set_words_only(self, on: bool) -> None:
        (self.words_button if on else self.meaning_button).setChecked(True)

    @property
    def results(self) -> SearchResultsWidget | None:
        """The results shown now (None: no search in this conversation yet)."""
        return self._kept.get(self.key)

    def show_for(self, key: int | None) -> None:
        """Show the latest results of conversation ``key`` (None: the unsaved one)."""
        current = self.results
        if current is not None:
            current.hide()
        self.key = key
        shown = self.results
        if shown is not None:
            shown.show()
        self.empty.setVisible(shown is None)
        self._to_top()

    def start(self, query: str) -> SearchResultsWidget:
        """A new search's results, in place of the conversation's earlier ones."""
        old = self._kept.pop(self.key, None)
        if old is not None:
            old.deleteLater()
        widget = SearchResultsWidget(query, self.theme, words_only=self.words_only)
        widget.evidence_requested.connect(self.evidence_requested.emit)
        self.column_layout.insertWidget(0, widget)
        self._kept[self.key] = widget
        self.empty.hide()
        self._to_top()
        return widget

    def holds(self, widget: SearchResultsWidget) -> bool:
        """``widget`` is a conversation's latest results (not replaced, not deleted)."""
        return any(kept is widget for kept in self._kept.values())

    def rekey(self, old: int | None, new: int | None) -> None:
        """The unsaved conversation was saved as ``new``: its results go with it."""
        if old in self._kept and new not in self._kept:
            self._kept[new] = self._kept.pop(old)
        if self.key == old:
            self.key = new

    def forget(self, key: int | None) -> None:
        widget = self._kept.pop(key, None)
        if widget is not None:
            widget.deleteLater()
        if key == self.key:
            self.empty.show()

    def refresh(self) -> None:
        for widget in self._kept.values():
            widget.refresh()

    def _to_top(self) -> None:
        # Now and once the cards added in later turns of the event loop are laid out.
        self.scroll_area.verticalScrollBar().setValue(0)
        QTimer.singleShot(0, lambda: self.scroll_area.verticalScrollBar().setValue(0))

    def _restyle(self, *_: object) -> None:
        self.empty.setStyleSheet(f"color: {self.theme.palette.muted};")
