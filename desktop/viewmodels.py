"""What the panels show, as plain records built from core's results.

A live answer carries ``Hit`` and ``Citation`` objects while a stored one (a conversation
reopened later) carries their JSON copies; both become the same records here, so each
panel has one code path for both.
"""

from __future__ import annotations

import os
import re
import sys
import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from core.records import SHEET_TYPES, Citation, Hit, IndexProgress, location_label

# A section's own number before its name ("3 Results", "2.1 Setup"): beside the source's
# number it read as one ("3 3 Results"); a year ("2024 Budget") is no section number.
_SECTION_NUMBER = re.compile(r"(\d{1,2}(?:\.\d{1,3})*)\.?\s+(?=[^\W\d_])")


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
    def label(self) -> str:
        """What a list of sources names it by, after its number: its section, its own
        number after its name ("Results (section 3)"), or else its document's title."""
        section = self.section
        if not section:
            return self.display_name
        numbered = _SECTION_NUMBER.match(section)
        if numbered is None:
            return section
        return f"{section[numbered.end() :]} (section {numbered.group(1)})"

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
    details: str = ""  # the program's words for it, for the Details fold only


# Warning kinds the notes fold (core.generation.events.WarningKind's values: importing
# it here would load core's generation code with the first panel).
NO_CITATIONS = "no_citations"
UNSUPPORTED = "unsupported"
UNVERIFIED_NUMBER = "unverified_number"
UNKNOWN_CITATION = "unknown_citation"
QUOTED_FIRST = "quoted_first"


@dataclass(frozen=True)
class NoteView:
    """One note under an answer: a warning's kind and words, and the whole words of the
    warnings it stands for (its tooltip), if any."""

    kind: str
    message: str
    details: str = ""


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
    state: str = "done"  # a stored turn's core.records.TurnState
    # A follow-up the model is making standalone before any search (tens of seconds on a
    # slow model): core's words for it (its "rewriting" StatusEvent), "" when it is not.
    rewriting: str = ""

    @property
    def cited_numbers(self) -> set[int]:
        return {c.n for c in self.citations}

    @property
    def notes(self) -> list[NoteView]:
        """The warnings as the card shows them. An answer whose model text could not be
        checked, or that cites nothing, gets one note, not one more per sentence ("No
        source is cited for: …" under "The answer cites no source" said the same thing
        three times for two sentences); the notes it stands for are in its details."""
        kinds = {kind for kind, _ in self.warnings}
        if QUOTED_FIRST in kinds:
            # The quote comes first and the model's whole text is marked unverified:
            # notes on its sentences and citations say it again, sentence by sentence.
            kept, folded = QUOTED_FIRST, {NO_CITATIONS, UNSUPPORTED, UNVERIFIED_NUMBER}
            folded.add(UNKNOWN_CITATION)
        elif NO_CITATIONS in kinds:
            kept, folded = NO_CITATIONS, {UNSUPPORTED, UNVERIFIED_NUMBER}
        else:
            return [NoteView(kind, message) for kind, message in self.warnings]
        details = "\n".join(message for kind, message in self.warnings if kind in folded)
        # Said of an answer that cites nothing, an invented figure would go unmentioned.
        invented = NO_CITATIONS in kinds and UNVERIFIED_NUMBER in kinds
        notes = []
        for kind, message in self.warnings:
            if kind == kept:
                if invented:
                    message += " Some of its figures or names appear in none of the sources."
                notes.append(NoteView(kind, message, details))
            elif kind not in folded:
                notes.append(NoteView(kind, message))
        return notes

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
        state = str(getattr(turn, "state", "") or "done")
        # An answer that never ended says so (a stopped or failed one keeps its note).
        note = str(getattr(turn, "state_note", "") or "")
        if state in ("cut_off", "in_progress") and note:
            warnings.insert(0, (state, note))
        return cls(
            question=turn.question,
            answer=turn.answer,
            mode=turn.mode,
            sources=sources,
            citations=citations,
            warnings=warnings,
            turn_id=turn.id,
            missing_model=missing_model(stored),
            state=state,
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


# --- plain words ---------------------------------------------------------------------------

# Core's sentences name what the command line knows; the window names what it has.
_APP_WORDS = (
    (
        re.compile(r"\(continues while the app, `lectern watch` or `lectern index` runs\)"),
        "(continues while Lectern is open)",
    ),
)


def plain_words(text: str) -> str:
    """``text`` as the window says it: models by their names ("the multilingual
    model"), not their ids, and what the app does instead of commands to type."""
    # Only once core's model module is in: a model id reaches the window from code that
    # has loaded it, and importing it here could hold the UI thread on the import lock
    # while the background loads the model.
    models = sys.modules.get("core.embedding.models")
    labels: Mapping[str, str] = getattr(models, "MODEL_LABELS", {}) if models else {}
    for model_id, label in labels.items():
        text = _named(text, model_id, label)
    for pattern, words in _APP_WORDS:
        text = pattern.sub(words, text)
    return text


def _named(text: str, model_id: str, label: str) -> str:
    """``model_id`` replaced by ``label``, capitalised where it opens a sentence."""
    opening = label[:1].upper() + label[1:]
    parts = text.split(model_id)
    out = parts[0]
    for part in parts[1:]:
        starts = not out.strip() or out.rstrip().endswith((".", "!", "?", ":\n"))
        out += (opening if starts else label) + part
    return out


# --- indexing, as the window shows it ------------------------------------------------------


@dataclass(frozen=True)
class IndexingState:
    """What the library card, the status bar and the file list say of indexing. All
    three read this one record, made from the indexing host's state by ``IndexingView``, so
    the card cannot say Paused while the status bar says Indexing."""

    # idle | starting (no count yet) | running | waiting (for an idle computer) | paused
    # | cancelled (nothing runs until the person resumes)
    phase: str
    progress: IndexProgress | None = None
    not_indexed: int | None = None

    @property
    def active(self) -> bool:
        """A run is under way (working, waiting or paused)."""
        return self.phase in ("starting", "running", "waiting", "paused")

    @property
    def moving(self) -> bool:
        """Whether something is being done right now: a busy indicator may move only then."""
        return self.phase in ("starting", "running")

    @property
    def verb(self) -> str:
        return {"paused": "Paused", "waiting": "Waiting", "cancelled": "Cancelled"}.get(
            self.phase, "Indexing"
        )

    @property
    def share(self) -> int | None:
        """How much of the run is done, in percent; None before the first count."""
        if self.progress is None:
            return None
        # As the card's bar shows it (in thousandths), so that title and bar agree.
        return round(round(1000 * self.progress.fraction) / 10)

    @property
    def status(self) -> str:
        """The status bar's words; "" when there is no run to speak of."""
        return {
            "starting": "Indexing… · search works meanwhile",
            "running": "Indexing… · search works meanwhile",
            "waiting": "Indexing waits for the computer to be idle · search works meanwhile",
            "paused": "Indexing paused · search works meanwhile",
            "cancelled": "Indexing cancelled · search works on the files indexed so far",
        }.get(self.phase, "")

    @property
    def note(self) -> str:
        """The run in a few words, for a list's summary line ("" when there is none)."""
        return {
            "starting": "indexing…",
            "running": "indexing…",
            "paused": "indexing paused",
            "waiting": "indexing waits for the computer to be idle",
            "cancelled": "indexing cancelled",
        }.get(self.phase, "")


StateListener = Callable[[IndexingState], None]


class IndexingView:
    """The one account of the app's indexing (one per ``IndexingHost``, desktop/indexing_host.py:
    ``indexing_view``).

    It follows the host's signals itself and then tells its listeners, so that every
    reader sees the same state, already updated, whichever signal came first."""

    def __init__(self, host: Any) -> None:
        self._host = weakref.ref(host)
        self._progress: IndexProgress | None = None
        self._listeners: list[Callable[[], StateListener | None]] = []
        host.started.connect(self._started)
        host.progress.connect(self._reported)
        for signal in (host.pause_changed, host.cancel_changed):
            signal.connect(lambda _flag: self._tell())
        host.finished.connect(lambda _report: self._ended())
        host.failed.connect(lambda _message, _hint: self._ended())
        host.watch_idle.connect(self._ended)

    @property
    def state(self) -> IndexingState:
        host = self._host()
        if host is None:
            return IndexingState("idle")
        progress = self._progress
        if host.cancelled:
            return IndexingState("cancelled", progress, host.not_indexed)
        if not host.active and progress is None:
            return IndexingState("idle")
        # (A count with no run known is one the card was handed directly: shown as a run.)
        if host.paused:
            return IndexingState("paused", progress)
        if progress is not None and progress.waiting_reason:
            return IndexingState("waiting", progress)
        return IndexingState("running" if progress is not None else "starting", progress)

    def subscribe(self, listener: StateListener) -> None:
        """Call ``listener`` with the new state after every change; held weakly when it
        is a widget's method, so a closed window is not kept or called."""
        if hasattr(listener, "__self__"):
            self._listeners.append(weakref.WeakMethod(listener))
        else:
            self._listeners.append(lambda: listener)

    def take(self, progress: IndexProgress) -> None:
        """A count shown before the host's own signal has brought it (the same count
        again when it has)."""
        self._progress = progress

    def _started(self, _job: object) -> None:
        self._progress = None  # the last run's count is not this one's
        self._tell()

    def _reported(self, progress: object) -> None:
        if isinstance(progress, IndexProgress):
            self._progress = progress
        self._tell()

    def _ended(self) -> None:
        host = self._host()
        if host is not None and not host.active and not host.cancelled:
            self._progress = None
        self._tell()

    def _tell(self) -> None:
        state = self.state
        for ref in list(self._listeners):
            listener = ref()
            if listener is None:
                self._listeners.remove(ref)
                continue
            try:
                listener(state)
            except RuntimeError:  # its widget was deleted by Qt while Python held it
                self._listeners.remove(ref)


_views: weakref.WeakKeyDictionary[Any, IndexingView] = weakref.WeakKeyDictionary()


def indexing_view(host: Any) -> IndexingView:
    """The indexing host's one ``IndexingView`` (made on first use)."""
    view = _views.get(host)
    if view is None:
        view = _views[host] = IndexingView(host)
    return view
