"""Frozen records passed between pipeline stages.

Offsets are character offsets into the document's extracted text (``ParsedDocument.text``),
which is stored alongside the chunks, so any stage can map a chunk or a cited span back to
the exact characters and page the user should see highlighted.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from datetime import datetime
from enum import Enum
from typing import Any


class DocState(str, Enum):
    PENDING = "pending"
    INDEXED = "indexed"
    FAILED = "failed"
    SKIPPED = "skipped"


class BlockKind(str, Enum):
    HEADING = "heading"
    PARAGRAPH = "paragraph"
    LIST_ITEM = "list_item"
    TABLE = "table"
    CODE = "code"


@dataclass(frozen=True)
class PageSpan:
    """Characters ``[start, end)`` of the document text come from page ``page`` (1-based).

    ``page`` is the document's own unit of place, named by its type (``LOCATION_UNITS``):
    a PDF page, a slide, an EPUB chapter, a spreadsheet row, a message in a mailbox. So
    chunks, citation spans and the stored page list carry every format's location the
    same way, and ``location_label`` turns one into words."""

    page: int
    start: int
    end: int


# What ``PageSpan.page`` counts, per document type; types not listed have no numbered
# places (their heading path says where a passage is).
LOCATION_UNITS: dict[str, str] = {
    "pdf": "page",
    "pptx": "slide",
    "odp": "slide",
    "epub": "chapter",
    "xlsx": "row",
    "ods": "row",
    "csv": "row",
    "mbox": "message",
}
# Types whose heading path starts with the sheet's name (and then its header row).
SHEET_TYPES = frozenset({"xlsx", "ods", "csv"})


def location_label(
    doc_type: str,
    page: int | None,
    page_end: int | None = None,
    heading_path: tuple[str, ...] | list[str] = (),
) -> str:
    """Where a passage is, in words a person understands: "page 3", "slides 3–4",
    "chapter 2", "Budget, row 12"; "" when the document has no numbered places."""
    unit = LOCATION_UNITS.get(doc_type)
    if unit is None or page is None:
        return ""
    if page_end is not None and page_end != page:
        where = f"{unit}s {page}–{page_end}"
    else:
        where = f"{unit} {page}"
    if doc_type in SHEET_TYPES and heading_path and heading_path[0] and doc_type != "csv":
        return f"{heading_path[0]}, {where}"
    return where


@dataclass(frozen=True)
class Block:
    """One structural unit of a document: a heading, paragraph, list item, table or code block.

    ``text == document.text[start:end]`` always holds.
    """

    kind: BlockKind
    start: int
    end: int
    heading_path: tuple[str, ...] = ()
    page: int | None = None


@dataclass(frozen=True)
class WordBox:
    """A word read by OCR: characters ``[start, end)`` of the document text, on ``page``,
    inside the box ``x0, y0, x1, y1`` in PDF points from the page's top-left corner as it
    is displayed (rotation applied), the same frame as a digital page's text selection."""

    page: int
    start: int
    end: int
    x0: float
    y0: float
    x1: float
    y1: float


@dataclass(frozen=True)
class ParsedDocument:
    text: str
    title: str
    blocks: tuple[Block, ...]
    pages: tuple[PageSpan, ...] = ()
    page_count: int = 0
    # Said to the person alongside "indexed" when only part of the file could be read
    # within the parser's limits (a sheet cut at its cell limit, messages that failed).
    notice: str = ""
    # Documents carried inside this file (a mail's attachments), each stored as a
    # document of its own at "<this file's path>/<name>" (see core.scan.attachment_path).
    attachments: tuple[tuple[str, ParsedDocument], ...] = ()
    # Pages with no text layer that show an image: OCR reads them in a later, slower pass.
    needs_ocr: tuple[int, ...] = ()
    # Pages whose text was read by OCR, and where each word it read lies on its page.
    ocr_pages: tuple[int, ...] = ()
    words: tuple[WordBox, ...] = ()

    def page_at(self, offset: int) -> int | None:
        # Spans are in text order; a sheet has one per row, so search rather than scan.
        pages = self.pages
        if not pages:
            return None
        i = bisect.bisect_right(pages, offset, key=lambda span: span.start) - 1
        if i >= 0 and offset < pages[i].end:
            return pages[i].page
        return pages[-1].page if offset >= pages[-1].end else None


@dataclass(frozen=True)
class Chunk:
    """A retrievable passage. ``text == document_text[start:end]``."""

    ordinal: int
    text: str
    start: int
    end: int
    page_start: int | None
    page_end: int | None
    heading_path: tuple[str, ...]
    token_count: int
    context: str  # title and heading path, prepended for embedding and keyword search

    @property
    def embedding_text(self) -> str:
        return f"{self.context}\n{self.text}" if self.context else self.text


@dataclass(frozen=True)
class Document:
    id: int
    path: str
    folder: str
    size: int
    mtime: float
    content_hash: str
    type: str
    title: str
    pages: int
    state: DocState
    reason: str
    chunks: int


@dataclass(frozen=True)
class FileInfo:
    path: str
    folder: str
    size: int
    mtime: float
    # Set for an entry that is not a readable regular file (a pipe, a socket, a broken or
    # looping link): it is listed as skipped with this reason and never opened.
    special: str = ""


@dataclass(frozen=True)
class PreparedFile:
    """A file read and chunked by the indexer, ready to be embedded and written."""

    info: FileInfo
    content_hash: str
    doc_type: str | None
    parsed: ParsedDocument | None = None
    chunks: tuple[Chunk, ...] = ()
    reuse_from: int | None = None  # document id with identical content already embedded
    state: DocState = DocState.INDEXED
    reason: str = ""
    # Documents carried inside this file (a mail's attachments), written right after it.
    attached: tuple[PreparedFile, ...] = ()


@dataclass(frozen=True)
class IndexPlan:
    """What a run must do: the result of comparing the disk with the database."""

    to_index: tuple[FileInfo, ...]
    to_remove: tuple[str, ...]
    touched: tuple[FileInfo, ...]  # same content, new mtime: metadata update only
    unchanged: int


@dataclass(frozen=True)
class FolderStatus:
    path: str
    online: bool
    indexed: int
    failed: int
    skipped: int
    pending: int
    chunks: int
    ocr: int = 0  # indexed documents read (at least in part) by OCR


@dataclass(frozen=True)
class Hit:
    """One retrieved chunk with where it came from and how it ranked."""

    chunk_id: int
    document_id: int
    path: str
    title: str
    type: str
    text: str
    start: int
    end: int
    page: int | None
    page_end: int | None
    heading_path: tuple[str, ...]
    score: float
    bm25_rank: int | None = None
    dense_rank: int | None = None

    @property
    def location(self) -> str:
        """ "page 3", "slide 2", "Budget, rows 12–20"; "" where the type has none."""
        return location_label(self.type, self.page, self.page_end, self.heading_path)

    def to_json(self) -> dict[str, object]:
        return {
            "chunk_id": self.chunk_id,
            "document": self.path,
            "title": self.title,
            "type": self.type,
            "page": self.page,
            "page_end": self.page_end,
            "location": self.location,
            "score": round(self.score, 6),
            "text": self.text,
            "start": self.start,
            "end": self.end,
            "heading_path": list(self.heading_path),
            "bm25_rank": self.bm25_rank,
            "dense_rank": self.dense_rank,
        }


@dataclass(frozen=True)
class Span:
    """Characters ``[start, end)`` of a document's text, on ``page``."""

    start: int
    end: int
    page: int | None
    text: str


@dataclass(frozen=True)
class Citation:
    n: int
    hit: Hit
    spans: tuple[Span, ...]
    sentence: str = ""  # the answer sentence that cites this source

    @property
    def quote(self) -> str:
        return " ".join(s.text for s in self.spans)

    @property
    def location(self) -> str:
        """Where the cited words are: the first span's place, else the passage's."""
        hit = self.hit
        if self.spans and self.spans[0].page is not None:
            return location_label(hit.type, self.spans[0].page, None, hit.heading_path)
        return hit.location

    def to_json(self) -> dict[str, object]:
        first = self.spans[0] if self.spans else None
        return {
            "n": self.n,
            "document": self.hit.path,
            "title": self.hit.title,
            "location": self.location,
            "page": first.page if first else self.hit.page,
            "start": first.start if first else self.hit.start,
            "end": self.spans[-1].end if self.spans else self.hit.end,
            "quote": self.quote,
            "spans": [
                {"start": s.start, "end": s.end, "page": s.page, "text": s.text} for s in self.spans
            ],
            "sentence": self.sentence,
        }


@dataclass(frozen=True)
class IndexProgress:
    """Where a run stands. Files are written (and keyword-searchable) first; their
    passages are embedded behind them, so ``files_done`` runs ahead of
    ``passages_embedded``."""

    files_total: int
    files_done: int
    chunks_done: int
    current: str = ""
    elapsed_s: float = 0.0
    failed: int = 0
    skipped: int = 0
    # Passages waiting for the model in this run (known so far) and those embedded.
    passages_total: int = 0
    passages_embedded: int = 0
    # Files of this run that keyword search finds (written, and the keyword index
    # refreshed since): the rest of ``files_done`` becomes so within a second.
    files_searchable: int = 0

    @property
    def finished(self) -> bool:
        """Every file written and every passage embedded."""
        return self.files_done >= self.files_total and self.passages_embedded >= self.passages_total

    @property
    def files_per_s(self) -> float:
        return self.files_done / self.elapsed_s if self.elapsed_s > 0 else 0.0

    @property
    def passages_expected(self) -> float:
        """Passages to embed in the whole run: those known, plus those of the files not
        read yet estimated from the files read so far."""
        per_file = self.passages_total / self.files_done if self.files_done else 0.0
        return self.passages_total + per_file * max(0, self.files_total - self.files_done)

    @property
    def fraction(self) -> float:
        """How much of the run is done, counted in the model's work (the slow stage)."""
        if self.finished:
            return 1.0
        expected = self.passages_expected
        if expected <= 0:
            return self.files_done / self.files_total if self.files_total else 0.0
        return min(1.0, self.passages_embedded / expected)

    @property
    def eta_s(self) -> float | None:
        """The passages still to embed at the rate so far (files/s until the model has
        embedded anything)."""
        if self.finished:
            return 0.0
        if self.passages_embedded <= 0 or self.elapsed_s <= 0:
            rate = self.files_per_s
            if rate <= 0:
                return None
            return max(0.0, (self.files_total - self.files_done) / rate)
        left = self.passages_expected - self.passages_embedded
        return max(0.0, left / (self.passages_embedded / self.elapsed_s))


@dataclass(frozen=True)
class IndexReport:
    added: int = 0
    updated: int = 0
    removed: int = 0
    unchanged: int = 0
    failed: int = 0
    skipped: int = 0
    chunks_embedded: int = 0
    chunks_reused: int = 0
    elapsed_s: float = 0.0
    cancelled: bool = False
    failures: tuple[tuple[str, str], ...] = field(default=())


@dataclass(frozen=True)
class RecoveryNotice:
    """Something Lectern repaired when it opened the library, told to the user once.

    ``kind`` is one of ``log_set_aside`` (a write-ahead log that would not replay),
    ``log_cut_short`` (one that ended early), ``library_rebuilt`` (a damaged database
    file), ``keyword_rebuilding`` and ``vectors_rebuilt`` (derived indexes)."""

    kind: str
    message: str
    hint: str = ""
    kept_at: str = ""  # where a damaged file was kept, never deleted
    at: str = ""  # ISO time

    def to_json(self) -> dict[str, str]:
        return {
            "kind": self.kind,
            "message": self.message,
            "hint": self.hint,
            "kept_at": self.kept_at,
            "at": self.at,
        }


@dataclass(frozen=True)
class Turn:
    id: int
    conversation_id: int
    question: str
    standalone_question: str
    answer: str
    mode: str
    created_at: datetime | None
    sources: tuple[dict[str, Any], ...]
    citations: tuple[dict[str, Any], ...]
    warnings: tuple[dict[str, Any], ...]

    def to_json(self) -> dict[str, object]:
        return {
            "id": self.id,
            "conversation": self.conversation_id,
            "question": self.question,
            "standalone_question": self.standalone_question,
            "answer": self.answer,
            "mode": self.mode,
            "created_at": self.created_at.isoformat() if self.created_at else None,
            "sources": list(self.sources),
            "citations": list(self.citations),
            "warnings": list(self.warnings),
        }


@dataclass(frozen=True)
class Conversation:
    id: int
    title: str
    created_at: datetime | None
    turn_count: int = 0


@dataclass(frozen=True)
class SearchFilters:
    """Which part of the library a search looks in: folders (and what is under them)
    and file types; empty means everywhere."""

    folders: tuple[str, ...] = ()
    types: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.folders or self.types)
