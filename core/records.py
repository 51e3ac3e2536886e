"""Frozen records passed between pipeline stages.

Offsets are character offsets into the document's extracted text (``ParsedDocument.text``),
which is stored alongside the chunks, so any stage can map a chunk or a cited span back to
the exact characters and page the user should see highlighted.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum


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
    """Characters ``[start, end)`` of the document text come from page ``page`` (1-based)."""

    page: int
    start: int
    end: int


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
class ParsedDocument:
    text: str
    title: str
    blocks: tuple[Block, ...]
    pages: tuple[PageSpan, ...] = ()
    page_count: int = 0

    def page_at(self, offset: int) -> int | None:
        for span in self.pages:
            if span.start <= offset < span.end:
                return span.page
        return self.pages[-1].page if self.pages and offset >= self.pages[-1].end else None


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

    def to_json(self) -> dict[str, object]:
        return {
            "chunk_id": self.chunk_id,
            "document": self.path,
            "title": self.title,
            "type": self.type,
            "page": self.page,
            "page_end": self.page_end,
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

    def to_json(self) -> dict[str, object]:
        first = self.spans[0] if self.spans else None
        return {
            "n": self.n,
            "document": self.hit.path,
            "title": self.hit.title,
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
    files_total: int
    files_done: int
    chunks_done: int
    current: str = ""
    elapsed_s: float = 0.0
    failed: int = 0
    skipped: int = 0

    @property
    def files_per_s(self) -> float:
        return self.files_done / self.elapsed_s if self.elapsed_s > 0 else 0.0

    @property
    def eta_s(self) -> float | None:
        rate = self.files_per_s
        if rate <= 0:
            return None
        return max(0.0, (self.files_total - self.files_done) / rate)


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
