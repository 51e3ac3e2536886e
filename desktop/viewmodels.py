"""What the panels show, as plain records built from core's results.

A live answer carries ``Hit`` and ``Citation`` objects while a stored one (a conversation
reopened later) carries their JSON copies; both become the same records here, so each
panel has one code path for both.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from core.records import SHEET_TYPES, Citation, Hit, location_label


@dataclass(frozen=True)
class SpanView:
    start: int
    end: int
    page: int | None
    text: str


@dataclass(frozen=True)
class SourceView:
    n: int
    document_id: int | None
    path: str
    title: str
    type: str
    page: int | None
    page_end: int | None
    text: str
    start: int
    end: int
    removed: bool = False
    headings: tuple[str, ...] = ()

    @property
    def section(self) -> str:
        """The heading the passage sits under (when it adds something to the title)."""
        if self.type in SHEET_TYPES:
            return ""  # a sheet's heading path is its name and header row, not a section
        names = [h.strip() for h in self.headings if h.strip()]
        if names and names[0].casefold() == self.title.strip().casefold():
            names = names[1:]
        return names[-1] if names else ""

    @property
    def file_name(self) -> str:
        return os.path.basename(self.path) or self.path

    @property
    def display_name(self) -> str:
        return self.title.strip() or self.file_name

    @property
    def location(self) -> str:
        """ "slide 3", "Budget, row 12", "chapter 2"; "" where the type has none."""
        return location_label(self.type, self.page, self.page_end, self.headings)

    @property
    def where(self) -> str:
        """``file.pdf · p. 3`` (or pages 3–4); ``deck.pptx · slide 3`` and the like for
        the formats whose places are not pages."""
        if self.type not in ("pdf", ""):
            location = self.location
            return f"{self.file_name} · {location}" if location else self.file_name
        if self.page is None:
            return self.file_name
        if self.page_end and self.page_end != self.page:
            return f"{self.file_name} · pp. {self.page}–{self.page_end}"
        return f"{self.file_name} · p. {self.page}"

    @classmethod
    def from_hit(cls, n: int, hit: Hit) -> SourceView:
        return cls(
            n=n,
            document_id=hit.document_id,
            path=hit.path,
            title=hit.title,
            type=hit.type,
            page=hit.page,
            page_end=hit.page_end,
            text=hit.text,
            start=hit.start,
            end=hit.end,
            headings=tuple(hit.heading_path),
        )

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> SourceView:
        return cls(
            n=int(data.get("n") or 0),
            document_id=_int(data.get("document_id")),
            path=str(data.get("document") or ""),
            title=str(data.get("title") or ""),
            type=str(data.get("type") or ""),
            page=_int(data.get("page")),
            page_end=_int(data.get("page_end")),
            text=str(data.get("text") or ""),
            start=int(data.get("start") or 0),
            end=int(data.get("end") or 0),
            removed=bool(data.get("removed")),
            headings=tuple(str(h) for h in data.get("heading_path") or ()),
        )


@dataclass(frozen=True)
class CitationView:
    n: int
    source: SourceView | None
    spans: tuple[SpanView, ...]
    sentence: str = ""

    @property
    def quote(self) -> str:
        return " ".join(s.text for s in self.spans)

    @property
    def page(self) -> int | None:
        if self.spans and self.spans[0].page is not None:
            return self.spans[0].page
        return self.source.page if self.source else None

    @property
    def location(self) -> str:
        """Where the cited words are, in the document's own terms ("slide 3")."""
        source = self.source
        if source is None:
            return ""
        return location_label(source.type, self.page, None, source.headings)

    @classmethod
    def from_citation(cls, citation: Citation, sources: Sequence[SourceView]) -> CitationView:
        source = _source(sources, citation.n) or SourceView.from_hit(citation.n, citation.hit)
        spans = tuple(SpanView(s.start, s.end, s.page, s.text) for s in citation.spans)
        return cls(citation.n, source, spans, citation.sentence)

    @classmethod
    def from_json(cls, data: Mapping[str, Any], sources: Sequence[SourceView]) -> CitationView:
        n = int(data.get("n") or 0)
        spans = tuple(
            SpanView(
                int(s.get("start") or 0),
                int(s.get("end") or 0),
                _int(s.get("page")),
                str(s.get("text") or ""),
            )
            for s in data.get("spans") or []
        )
        return cls(n, _source(sources, n), spans, str(data.get("sentence") or ""))


@dataclass(frozen=True)
class ErrorView:
    message: str
    hint: str
    kind: str  # the error class name: ModelNotFoundError, LLMUnavailableError, ...
    model: str = ""


@dataclass
class TurnView:
    question: str
    answer: str = ""
    mode: str = ""  # generated | extractive | declined ("" while streaming)
    model: str | None = None
    sources: list[SourceView] = field(default_factory=list)
    citations: list[CitationView] = field(default_factory=list)
    warnings: list[tuple[str, str]] = field(default_factory=list)  # (kind, message)
    error: ErrorView | None = None
    streaming: bool = False
    turn_id: int | None = None
    missing_model: str = ""  # the model a "model_missing" warning offers to download
    reordered_s: float | None = None  # seconds the model took to put the sources in order

    @property
    def cited_numbers(self) -> set[int]:
        return {c.n for c in self.citations}

    def citation_for(self, n: int, occurrence: int = 0) -> CitationView | None:
        """The ``occurrence``-th citation of source ``n`` in answer order."""
        matching = [c for c in self.citations if c.n == n]
        if not matching:
            return None
        return matching[min(occurrence, len(matching) - 1)]

    def source(self, n: int) -> SourceView | None:
        return _source(self.sources, n)

    @classmethod
    def from_stored(cls, turn: Any) -> TurnView:
        sources = [SourceView.from_json(s) for s in turn.sources]
        citations = [CitationView.from_json(c, sources) for c in turn.citations]
        stored = [w for w in turn.warnings if isinstance(w, Mapping)]
        warnings = [(str(w.get("kind") or ""), str(w.get("message") or "")) for w in stored]
        return cls(
            question=turn.question,
            answer=turn.answer,
            mode=turn.mode,
            sources=sources,
            citations=citations,
            warnings=warnings,
            turn_id=turn.id,
            missing_model=missing_model(stored),
        )


@dataclass(frozen=True)
class EvidenceRequest:
    """What the evidence panel should show: a place in a document and what to highlight."""

    path: str
    title: str
    type: str
    document_id: int | None
    spans: tuple[SpanView, ...]
    page: int | None
    label: str  # "[2]" or "Result 3"
    removed: bool = False
    location: str = ""  # "slide 3", "Budget, row 12": shown for formats without pages
    # A search hit: the words lit are these (``rich.term_key`` keys) inside the spans, not
    # the spans whole; and the quote box shows ``quote``, the snippet its card showed.
    terms: tuple[str, ...] = ()
    quote: str = ""

    @classmethod
    def for_citation(cls, citation: CitationView) -> EvidenceRequest | None:
        source = citation.source
        if source is None:
            return None
        spans = citation.spans or (SpanView(source.start, source.end, source.page, source.text),)
        return cls(
            path=source.path,
            title=source.display_name,
            type=source.type,
            document_id=source.document_id,
            spans=spans,
            page=citation.page,
            label=f"[{citation.n}]",
            removed=source.removed,
            location=citation.location if citation.spans else source.location,
        )

    @classmethod
    def for_source(cls, source: SourceView, label: str) -> EvidenceRequest:
        return cls(
            path=source.path,
            title=source.display_name,
            type=source.type,
            document_id=source.document_id,
            spans=(SpanView(source.start, source.end, source.page, source.text),),
            page=source.page,
            label=label,
            removed=source.removed,
            location=source.location,
        )


def _source(sources: Sequence[SourceView], n: int) -> SourceView | None:
    for source in sources:
        if source.n == n:
            return source
    return None


def _int(value: object) -> int | None:
    # A JSON value: a list, an object or null is no number, as a non-numeric string is not.
    if not isinstance(value, (int, float, str)):
        return None
    try:
        return int(value)
    except ValueError:
        return None


def missing_model(warnings: Sequence[Any]) -> str:
    """The model a "model_missing" warning names (stored dicts or WarningEvents)."""
    for w in warnings:
        kind = w.get("kind") if isinstance(w, Mapping) else getattr(w, "kind", "")
        if kind == "model_missing":
            model = w.get("model") if isinstance(w, Mapping) else getattr(w, "model", "")
            return str(model or "")
    return ""
