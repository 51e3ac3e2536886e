"""Frozen records passed between pipeline stages.

Offsets are character offsets into the document's extracted text (``ParsedDocument.text``),
which is stored alongside the chunks, so any stage can map a chunk or a cited span back to
the exact characters and page the user should see highlighted.
"""

from __future__ import annotations

import bisect
import dataclasses
import functools
import types
import typing
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from enum import Enum
from pathlib import Path
from typing import Any, TypeVar

from core.errors import LecternError, error_from_json, error_to_json
from core.formats import FORMATS


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


# What ``PageSpan.page`` counts, per document type (from the format table); types not
# listed have no numbered places (their heading path says where a passage is).
LOCATION_UNITS: dict[str, str] = {f.kind: f.unit for f in FORMATS if f.unit is not None}
# Types whose heading path starts with the sheet's name (and then its header row): those
# whose places are rows.
SHEET_TYPES = frozenset(kind for kind, unit in LOCATION_UNITS.items() if unit == "row")
SLIDE_TYPES = frozenset(kind for kind, unit in LOCATION_UNITS.items() if unit == "slide")


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
    # document of its own at "<this file's path>/<name>" (see core.indexing.scan.attachment_path).
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


def embedding_text(context: str | None, text: str) -> str:
    """What a chunk is embedded (and re-encoded) from: its context line, then its text."""
    return f"{context}\n{text}" if context else text


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
        return embedding_text(self.context, self.text)


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


# The file list's states, in its default order: what needs the person first. "waiting" is
# the store's "pending"; "keyword only" is indexed with passages the meaning pass has not
# embedded yet (found by keyword meanwhile).
FILE_STATUSES = ("failed", "skipped", "waiting", "keyword only", "indexed")


@dataclass(frozen=True)
class FileEntry:
    """One document as the library's file list shows it (``DocumentStore.file_list``): its state
    and reason, and how much of it is searchable each way."""

    path: str
    folder: str  # the library folder it is under
    type: str
    title: str
    state: DocState
    reason: str
    pages: int
    passages: int
    embedded: int  # of ``passages``, those searchable by meaning
    size: int
    mtime: float
    indexed_at: float | None  # seconds since the epoch of the last write; None: never
    ocr: bool = False  # some of its text was read by OCR

    @property
    def status(self) -> str:
        """One of ``FILE_STATUSES``."""
        if self.state is DocState.INDEXED:
            return "keyword only" if self.embedded < self.passages else "indexed"
        return "waiting" if self.state is DocState.PENDING else self.state.value

    @property
    def keyword_only(self) -> int:
        """Passages found by keyword only until the meaning pass embeds them."""
        return max(0, self.passages - self.embedded)

    def to_json(self) -> dict[str, object]:
        return {
            "path": self.path,
            "folder": self.folder,
            "type": self.type,
            "title": self.title,
            "state": self.state.value,
            "status": self.status,
            "reason": self.reason,
            "pages": self.pages,
            "passages": self.passages,
            "embedded": self.embedded,
            "size": self.size,
            "mtime": self.mtime,
            "indexed_at": self.indexed_at,
            "ocr": self.ocr,
        }


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
    # The second stage: True, the document was re-scored; False, it was in the short list
    # but the search's time ran out first (a busy computer); None, not in the stage.
    reranked: bool | None = None

    @property
    def location(self) -> str:
        """ "page 3", "slide 2", "Budget, rows 12–20"; "" where the type has none."""
        return location_label(self.type, self.page, self.page_end, self.heading_path)

    def to_json(self) -> dict[str, object]:
        """What ``lectern search --json`` prints; the record itself travels and is kept
        through ``record_to_json``."""
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
            "reranked": self.reranked,
        }


def second_stage_state(hits: Sequence[Hit]) -> str:
    """How the second stage went for a search's hits: "off" (not run: keyword or meaning
    mode, switched off, or a model without word-piece states), "full", "cut short" (the
    computer was busy, so only the first documents were re-scored) or "skipped"."""
    states = [hit.reranked for hit in hits if hit.reranked is not None]
    if not states:
        return "off"
    if all(states):
        return "full"
    return "cut short" if any(states) else "skipped"


SECOND_STAGE_NOTE = (
    "The computer was busy, so some results are in the quick first order only; "
    "search again when it is quieter for the finer order."
)


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
    # Why the run is holding ("" while it works): e.g. core.indexing.throttle.WAITING_IDLE.
    waiting_reason: str = ""
    # Every passage is searchable by meaning; the model is packing the word pieces the
    # second stage reads, for passages indexed without them (core/store/pieces.py).
    packing_pieces: bool = False

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
    # Of ``skipped``, the empty files: said once as a count, not file by file.
    empty: int = 0


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
    state: str = "done"  # TurnState: whether the answer was finished

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
            "state": self.state,
        }

    @property
    def state_note(self) -> str:
        """What the state says to the person ("" for a finished answer)."""
        return TURN_STATE_NOTES.get(self.state, "")


class TurnState:
    """Where a kept turn's answer got to. A turn is stored when its question is asked
    (``IN_PROGRESS``) and updated when its answer ends; one still in progress when the
    library is opened again was cut off by the end of the process answering it."""

    IN_PROGRESS = "in_progress"
    DONE = "done"
    STOPPED = "stopped"  # the person stopped it (Esc, Ctrl+C)
    FAILED = "failed"  # an error ended it
    CUT_OFF = "cut_off"  # Lectern ended (closed, killed, crashed) while it was written

    ALL = (IN_PROGRESS, DONE, STOPPED, FAILED, CUT_OFF)


TURN_STATE_NOTES = {
    TurnState.IN_PROGRESS: "The answer is still being written.",
    TurnState.STOPPED: "Stopped before the answer was finished.",
    TurnState.FAILED: "The answer failed before it was finished.",
    TurnState.CUT_OFF: "Lectern was closed before this answer was finished.",
}


@dataclass(frozen=True)
class Conversation:
    id: int
    title: str
    created_at: datetime | None
    turn_count: int = 0


@dataclass(frozen=True)
class ConversationMatch:
    """A conversation found by a search, with where the words matched and a window of
    text around them (``matched_in``: "title", "question" or "answer")."""

    conversation: Conversation
    matched_in: str
    snippet: str
    turn_id: int | None = None


@dataclass(frozen=True)
class SearchFilters:
    """Which part of the library a search looks in: folders (and what is under them)
    and file types; empty means everywhere."""

    folders: tuple[str, ...] = ()
    types: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.folders or self.types)


# File types as a person names them, for the scope's label (others show upper-cased), from
# the format table; an extension ("htm", "tsv") names its format too.
_TYPE_NAMES: dict[str, str] = {
    **{ext.lstrip("."): f.name for f in FORMATS for ext in f.extensions},
    **{f.kind: f.name for f in FORMATS},
}


def type_name(file_type: str) -> str:
    t = file_type.lower().lstrip(".")
    return _TYPE_NAMES.get(t, t.upper())


@dataclass(frozen=True)
class Collection:
    """A named group of library folders that a conversation or a search can keep to."""

    name: str
    folders: tuple[str, ...] = ()
    created_at: datetime | None = None

    def to_json(self) -> dict[str, object]:
        return {
            "name": self.name,
            "folders": list(self.folders),
            "created_at": self.created_at.isoformat() if self.created_at else None,
        }


@dataclass(frozen=True)
class Scope:
    """What a conversation searches: the union of the collections' and the folders'
    documents, of the given file types; empty means all documents. Collections are kept
    by name (a rename rewrites saved scopes), so a deleted one can still be named."""

    collections: tuple[str, ...] = ()
    folders: tuple[str, ...] = ()
    types: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.collections or self.folders or self.types)

    def to_json(self) -> dict[str, list[str]]:
        return {
            "collections": list(self.collections),
            "folders": list(self.folders),
            "types": list(self.types),
        }

    @classmethod
    def from_json(cls, data: object) -> Scope:
        if not isinstance(data, dict):
            return cls()

        def names(key: str) -> tuple[str, ...]:
            value = data.get(key) or []
            return tuple(str(v) for v in value) if isinstance(value, list) else ()

        return cls(names("collections"), names("folders"), tuple(t.lower() for t in names("types")))

    def label(self) -> str:
        """Short, for the question box: "All documents", "Collection: Papers · PDF"."""
        if not self:
            return "All documents"
        parts: list[str] = []
        if self.collections:
            word = "Collection" if len(self.collections) == 1 else "Collections"
            parts.append(f"{word}: {', '.join(self.collections)}")
        if self.folders:
            word = "Folder" if len(self.folders) == 1 else "Folders"
            parts.append(f"{word}: {', '.join(_base(f) for f in self.folders)}")
        if self.types:
            parts.append(", ".join(type_name(t) for t in self.types))
        return " · ".join(parts)

    def phrase(self) -> str:
        """For a sentence: "PDF files in the collection “Papers”"; "all documents"."""
        if not self:
            return "all documents"
        places: list[str] = []
        if self.collections:
            word = "collection" if len(self.collections) == 1 else "collections"
            places.append(f"the {word} " + _and(f"“{c}”" for c in self.collections))
        if self.folders:
            word = "folder" if len(self.folders) == 1 else "folders"
            places.append(f"the {word} " + _and(f"“{_base(f)}”" for f in self.folders))
        kinds = _and(type_name(t) for t in self.types) + " files" if self.types else ""
        where = " and ".join(places)
        if kinds and where:
            return f"{kinds} in {where}"
        return kinds or where


def _base(folder: str) -> str:
    name = folder.rstrip("/\\").replace("\\", "/").rsplit("/", 1)[-1]
    return name or folder


def _and(items: Any) -> str:
    words = [str(item) for item in items]
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " and " + words[-1]


# What the app calls each search mode (the Search tab offers the first two); the library
# check's table and advice name them the same way.
MODE_NAMES = {"hybrid": "Words and meaning", "bm25": "Exact words", "dense": "Meaning only"}


# --- records to JSON and back ----------------------------------------------------------
#
# ``dataclasses.asdict`` and ``json.dumps`` keep a record's values but not their types: an
# enum comes back as its text, a tuple as a list, a nested record as a dict, a time as a
# string. A record rebuilt with ``Record(**data)`` then holds a ``str`` where its code
# expects a ``DocState`` (``'str' object has no attribute 'value'``, far from the cause).
# ``record_from_json`` rebuilds each field by its annotation instead (records, enums,
# fixed and open tuples, lists, dicts, unions with None, datetime, Path, numbers, text,
# booleans; ``Any`` kept as read), and refuses a value of the wrong kind with a
# ValueError naming where it is. A field missing from the JSON takes its default; keys
# the record lacks are ignored (a file from a newer version).

T = TypeVar("T")


def record_to_json(value: object) -> Any:
    """``value`` as plain JSON values (dicts, lists, text, numbers, booleans, None)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {
            f.name: record_to_json(getattr(value, f.name))
            for f in dataclasses.fields(value)
            if f.init
        }
    if isinstance(value, LecternError):
        return error_to_json(value)
    if isinstance(value, Enum):
        return record_to_json(value.value)
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, Mapping):
        return {str(record_to_json(k)): record_to_json(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [record_to_json(v) for v in value]
    return value


def record_from_json(kind: type[T], data: object) -> T:
    """``data`` (as ``json.loads`` gives it) as a ``kind``; ValueError when it is not one."""
    return typing.cast(T, _json_value(kind, data, kind.__name__))


@functools.cache
def _json_hints(cls: type) -> dict[str, Any]:
    # Resolved once per record: annotations are strings under `from __future__ import
    # annotations`, looked up in the record's own module.
    return typing.get_type_hints(cls)


def _json_bad(where: str, expected: str, data: object) -> ValueError:
    shown = repr(data)
    if len(shown) > 60:
        shown = shown[:57] + "..."
    return ValueError(f"{where}: expected {expected}, not {shown}")


def _json_value(kind: Any, data: object, where: str) -> object:
    if kind is Any or kind is object:
        return data
    if kind is type(None) or kind is None:
        if data is not None:
            raise _json_bad(where, "null", data)
        return None
    origin = typing.get_origin(kind)
    if origin is typing.Union or origin is types.UnionType:
        return _json_union(typing.get_args(kind), data, where)
    if origin is typing.Literal:
        if data not in typing.get_args(kind):
            raise _json_bad(where, f"one of {typing.get_args(kind)}", data)
        return data
    if origin is not None:
        return _json_generic(origin, typing.get_args(kind), data, where)
    if isinstance(kind, type):
        if dataclasses.is_dataclass(kind):
            return _json_record(kind, data, where)
        if issubclass(kind, LecternError):
            if not isinstance(data, Mapping):
                raise _json_bad(where, "an error", data)
            return error_from_json(data)
        if issubclass(kind, Enum):
            try:
                return kind(data)
            except ValueError:
                raise _json_bad(where, f"a {kind.__name__}", data) from None
        return _json_scalar(kind, data, where)
    raise ValueError(f"{where}: cannot read a value of type {kind!r}")


def _json_union(options: tuple[Any, ...], data: object, where: str) -> object:
    if data is None and type(None) in options:
        return None
    problems: list[str] = []
    for option in options:
        if option is type(None):
            continue
        try:
            return _json_value(option, data, where)
        except ValueError as exc:
            problems.append(str(exc))
    raise ValueError(problems[0] if len(problems) == 1 else f"{where}: none of {options} fits")


def _json_generic(origin: Any, args: tuple[Any, ...], data: object, where: str) -> object:
    if origin is tuple or origin in (list, set, frozenset, Sequence):
        if not isinstance(data, list | tuple):
            raise _json_bad(where, "a list", data)
        if origin is tuple and args and not (len(args) == 2 and args[1] is Ellipsis):
            if len(args) != len(data):
                raise _json_bad(where, f"a list of {len(args)}", data)
            return tuple(
                _json_value(a, v, f"{where}[{i}]")
                for i, (a, v) in enumerate(zip(args, data, strict=True))
            )
        item = args[0] if args else Any
        items = [_json_value(item, v, f"{where}[{i}]") for i, v in enumerate(data)]
        if origin in (list, Sequence):
            return items if origin is list else tuple(items)
        return origin(items)
    if origin in (dict, Mapping):
        if not isinstance(data, dict):
            raise _json_bad(where, "an object", data)
        key, value = args if args else (Any, Any)
        return {
            _json_key(key, k, where): _json_value(value, v, f"{where}[{k!r}]")
            for k, v in data.items()
        }
    raise ValueError(f"{where}: cannot read a value of type {origin!r}")


def _json_key(kind: Any, key: str, where: str) -> object:
    """A JSON object's key (always text) as the dict's key type."""
    if kind is int:
        try:
            return int(key)
        except ValueError:
            raise _json_bad(where, "whole-number keys", key) from None
    return _json_value(kind, key, f"{where} key")


def _json_record(cls: type, data: object, where: str) -> object:
    if not isinstance(data, dict):
        raise _json_bad(where, f"a {cls.__name__} object", data)
    hints = _json_hints(cls)
    values: dict[str, object] = {}
    for f in dataclasses.fields(cls):
        if not f.init:
            continue
        if f.name in data:
            values[f.name] = _json_value(hints[f.name], data[f.name], f"{where}.{f.name}")
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise ValueError(f"{where}: {f.name} is missing")
    return cls(**values)


def _json_scalar(kind: type, data: object, where: str) -> object:
    if kind is bool:
        if not isinstance(data, bool):
            raise _json_bad(where, "true or false", data)
        return data
    if kind is int:
        if isinstance(data, float) and data.is_integer():
            return int(data)  # JSON's 1e3 or 5.0: a whole number written as a float
        if isinstance(data, bool) or not isinstance(data, int):
            raise _json_bad(where, "a whole number", data)
        return data
    if kind is float:
        if isinstance(data, bool) or not isinstance(data, int | float):
            raise _json_bad(where, "a number", data)
        return float(data)
    if kind is str:
        if not isinstance(data, str):
            raise _json_bad(where, "text", data)
        return data
    if kind is datetime:
        if not isinstance(data, str):
            raise _json_bad(where, "a time", data)
        try:
            return datetime.fromisoformat(data)
        except ValueError:
            raise _json_bad(where, "a time", data) from None
    if issubclass(kind, Path):
        if not isinstance(data, str):
            raise _json_bad(where, "a path", data)
        return kind(data)
    if isinstance(data, kind):
        return data
    raise _json_bad(where, f"a {kind.__name__}", data)
