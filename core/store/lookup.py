"""Read-only chunk look-ups for retrieval: which document a chunk belongs to, its stored
embedding, and its neighbours in the document. Kept here so that retrieval holds no SQL."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from core.records import Hit, SearchFilters, embedding_text
from core.store.db import Database
from core.store.paths import disk_path, stored_path
from core.store.vectors import blobs_to_matrix


def id_list(ids: Sequence[int]) -> str:
    """Chunk or document ids as a literal SQL list. ``IN (SELECT unnest(?))`` makes
    DuckDB scan the whole chunks table (42 ms at 300k chunks); a literal list of integers
    is looked up through the primary key (under 3 ms). ``int()`` keeps it injection-safe."""
    return ", ".join(str(int(i)) for i in ids)


def filter_clause(filters: SearchFilters) -> tuple[str, list[object]]:
    """A condition on ``d`` (documents) for ``filters``, and its parameters."""
    clauses: list[str] = []
    params: list[object] = []
    if filters.folders:
        ors = []
        for folder in filters.folders:
            ors.append("(d.folder = ? OR starts_with(d.path, ?))")
            stored = stored_path(folder)  # a name that is not UTF-8: as documents.py stores it
            params.extend([stored, stored.rstrip("/") + "/"])
        clauses.append("(" + " OR ".join(ors) + ")")
    if filters.types:
        clauses.append("d.type IN (SELECT unnest(?::VARCHAR[]))")
        params.append([t.lower().lstrip(".") for t in filters.types])
    return " AND ".join(clauses), params


def filtered_embeddings(
    db: Database, filters: SearchFilters, dim: int
) -> tuple[list[int], np.ndarray]:
    """Every indexed chunk inside ``filters``: ids and their embeddings (exact search)."""
    where, params = filter_clause(filters)
    rows = (
        db.cursor()
        .execute(
            f"""SELECT c.id, c.embedding FROM chunks c JOIN documents d ON d.id = c.document_id
            WHERE d.state = 'indexed' AND c.embedding IS NOT NULL AND {where or "true"}""",
            params,
        )
        .fetchall()
    )
    return [int(r[0]) for r in rows], blobs_to_matrix([r[1] for r in rows], dim)


DocumentRow = tuple[str, str, str]  # a document's stored path, title and type


def hits_for(
    db: Database, chunk_ids: Sequence[int], live: LiveChunks | None = None
) -> dict[int, Hit]:
    """The chunks as hits (score 0, no ranks: the caller ranks them); a chunk whose
    document is gone meanwhile is left out. ``live``: its documents' paths and titles,
    where it holds them, so that only the chunks are read (10 SciFact hits: 3.4-3.9 ms
    of CPU against 5.9-6.8 ms joined)."""
    if not chunk_ids:
        return {}
    documents = live.document_rows() if live is not None else None
    if documents is not None:
        rows = (
            db.cursor()
            .execute(
                f"""SELECT id, document_id, text, start_char, end_char, page_start, page_end,
                           heading_path
                    FROM chunks WHERE id IN ({id_list(chunk_ids)})"""
            )
            .fetchall()
        )
        if all(int(row[1]) in documents for row in rows):
            return _hits(tuple(row) + documents[int(row[1])] for row in rows)
        # A document changed under the held listing: asked as before.
    return _hits(_joined_rows(db, chunk_ids))


def _joined_rows(db: Database, chunk_ids: Sequence[int]) -> list[tuple[object, ...]]:
    # The chunks first, through their primary key, then joined with their documents:
    # joined directly, DuckDB read every chunk's text (31 ms a search at 300k chunks);
    # materialised first, one statement costs less than the two look-ups it replaced
    # (1.8 against 2.3 ms on SciFact, 4.2 against 5.1 ms at 1M chunks).
    rows = (
        db.cursor()
        .execute(
            f"""WITH c AS MATERIALIZED (
                    SELECT id, document_id, text, start_char, end_char, page_start,
                           page_end, heading_path
                    FROM chunks WHERE id IN ({id_list(chunk_ids)}))
                SELECT c.id, c.document_id, c.text, c.start_char, c.end_char, c.page_start,
                       c.page_end, c.heading_path, d.path, d.title, d.type
                FROM c JOIN documents d ON d.id = c.document_id"""
        )
        .fetchall()
    )
    return [tuple(row) for row in rows]


def _hits(rows: Iterable[tuple[Any, ...]]) -> dict[int, Hit]:
    hits = {}
    for (
        chunk_id,
        document_id,
        text,
        start,
        end,
        page,
        page_end,
        heading_path,
        path,
        title,
        doc_type,
    ) in rows:
        hits[int(chunk_id)] = Hit(
            chunk_id=int(chunk_id),
            document_id=int(document_id),
            path=disk_path(path),
            title=title or "",
            type=doc_type or "",
            text=text,
            start=start,
            end=end,
            page=page,
            page_end=page_end,
            heading_path=tuple(json.loads(heading_path or "[]")),
            score=0.0,
        )
    return hits


def live_chunk_documents(db: Database, chunk_ids: Sequence[int]) -> dict[int, int]:
    """chunk id -> document id, for the chunks whose document is indexed (a chunk of a
    document being replaced or removed is left out)."""
    if not chunk_ids:
        return {}
    rows = (
        db.cursor()
        .execute(
            f"""SELECT c.id, c.document_id FROM chunks c JOIN documents d ON d.id = c.document_id
               WHERE d.state = 'indexed' AND c.id IN ({id_list(chunk_ids)})"""
        )
        .fetchall()
    )
    return {int(r[0]): int(r[1]) for r in rows}


@dataclass(frozen=True)
class _LiveAt:
    generation: int
    document_of: np.ndarray  # document id by chunk id; -1: no such chunk, or not live
    live: np.ndarray  # document_of >= 0
    unembedded: frozenset[int]  # documents with chunks, none of them embedded yet
    documents: dict[int, DocumentRow]  # indexed documents by id


class LiveChunks:
    """Which document each live chunk (its document indexed) belongs to, and which
    documents wait for the meaning pass, held as arrays by id for one database
    generation: every search asked the database both (a third of a hybrid search's CPU
    on SciFact). Built once a generation has been asked about ``BUILD_AFTER`` times (a
    search asks three to five times), so a quiet library pays the listing once (~0.1 s
    at 1M chunks) and a library being indexed, whose generation moves with every file,
    seldom: until then its searches ask the database by id, as before."""

    BUILD_AFTER = 8

    def __init__(self, db: Database) -> None:
        self.db = db
        self._seen = -1
        self._asked = 0
        self._held: _LiveAt | None = None
        self._lock = threading.Lock()

    def _current(self) -> _LiveAt | None:
        generation = self.db.generation
        held = self._held
        if held is not None and held.generation == generation:
            return held
        with self._lock:
            held = self._held
            if held is not None and held.generation == generation:
                return held
            if self._seen != generation:
                self._seen, self._asked = generation, 0
            self._asked += 1
            if self._asked < self.BUILD_AFTER:
                return None
            cur = self.db.cursor()
            # A NULL test is answered from the column's validity, without reading the
            # embeddings.
            rows = cur.execute(
                """SELECT c.id, c.document_id, c.embedding IS NULL AS waiting
                   FROM chunks c JOIN documents d ON d.id = c.document_id
                   WHERE d.state = 'indexed'"""
            ).fetchnumpy()
            ids = np.asarray(rows["id"], dtype=np.int64)
            documents = np.asarray(rows["document_id"], dtype=np.int64)
            waiting = np.asarray(rows["waiting"], dtype=bool)
            # By id up to the largest (ids of deleted chunks are never reused): int32 and
            # the one-byte mask, 5 MB a million ids.
            document_of = np.full(int(ids.max()) + 1 if len(ids) else 0, -1, dtype=np.int32)
            document_of[ids] = documents
            unembedded = frozenset(np.setdiff1d(documents[waiting], documents[~waiting]).tolist())
            # A search's hits are read with their documents' paths and titles: held here
            # rather than joined each time (about 100 bytes a document).
            named = {
                int(i): (path, title, kind)
                for i, path, title, kind in cur.execute(
                    "SELECT id, path, title, type FROM documents WHERE state = 'indexed'"
                ).fetchall()
            }
            held = _LiveAt(generation, document_of, document_of >= 0, unembedded, named)
            self._held = held
            return held

    def documents_of(self, chunk_ids: Sequence[int]) -> dict[int, int]:
        """chunk id -> document id, for the chunks whose document is indexed."""
        held = self._current()
        if held is None:
            return live_chunk_documents(self.db, chunk_ids)
        document_of = held.document_of
        ids = np.asarray(chunk_ids, dtype=np.int64)
        inside = ids[(ids >= 0) & (ids < len(document_of))]
        found = document_of[inside]
        live = found >= 0
        return dict(zip(inside[live].tolist(), found[live].tolist(), strict=True))

    def document_rows(self) -> dict[int, DocumentRow] | None:
        """Indexed documents' stored path, title and type by id; None while the library
        keeps changing (then ask by id)."""
        held = self._current()
        return None if held is None else held.documents

    def mask(self) -> np.ndarray | None:
        """Live chunk ids as a boolean array by chunk id; None while the library keeps
        changing (then ask by id)."""
        held = self._current()
        return None if held is None else held.live

    def unembedded(self, document_ids: Sequence[int]) -> set[int]:
        """Of ``document_ids``, those with no embedded chunk yet (unembedded_documents)."""
        held = self._current()
        if held is None:
            return unembedded_documents(self.db, document_ids)
        return {int(d) for d in document_ids if int(d) in held.unembedded}


def chunk_embeddings(db: Database, chunk_ids: Sequence[int], dim: int) -> dict[int, np.ndarray]:
    """chunk id -> its stored (L2-normalised) embedding."""
    if not chunk_ids:
        return {}
    rows = (
        db.cursor()
        .execute(
            """SELECT id, embedding FROM chunks
               WHERE embedding IS NOT NULL AND id IN (SELECT unnest(?::BIGINT[]))""",
            [list(chunk_ids)],
        )
        .fetchall()
    )
    matrix = blobs_to_matrix([r[1] for r in rows], dim)
    return {int(r[0]): matrix[i] for i, r in enumerate(rows)}


def unembedded_documents(db: Database, document_ids: Sequence[int]) -> set[int]:
    """Of ``document_ids``, those with no embedded chunk yet: meaning search cannot find
    them while the meaning pass has not reached them."""
    if not document_ids:
        return set()
    # Only NULL tests: DuckDB answers them from the column's validity, where counting
    # the embeddings read every one of them (194 ms a hybrid search at 300k chunks, and
    # 500 MB of cache).
    cur = db.cursor()
    waiting = {
        int(r[0])
        for r in cur.execute(
            f"""SELECT DISTINCT document_id FROM chunks
                WHERE document_id IN ({id_list(document_ids)}) AND embedding IS NULL"""
        ).fetchall()
    }
    if not waiting:
        return set()
    partly = {
        int(r[0])
        for r in cur.execute(
            f"""SELECT DISTINCT document_id FROM chunks
                WHERE document_id IN ({id_list(sorted(waiting))}) AND embedding IS NOT NULL"""
        ).fetchall()
    }
    return waiting - partly


def embedding_texts(db: Database, chunk_ids: Sequence[int]) -> dict[int, str]:
    """chunk id -> the text its embedding was made from (context line, then the passage),
    for a second stage that encodes passages again."""
    if not chunk_ids:
        return {}
    rows = (
        db.cursor()
        .execute(f"SELECT id, context, text FROM chunks WHERE id IN ({id_list(chunk_ids)})")
        .fetchall()
    )
    return {int(r[0]): embedding_text(r[1], r[2]) for r in rows}


@dataclass(frozen=True)
class ChunkPlace:
    """Where a chunk lies in its document (``document_text[start:end]`` is its text)."""

    chunk_id: int
    document_id: int
    ordinal: int
    start: int
    end: int
    page: int | None
    page_end: int | None
    heading_path: tuple[str, ...]


def chunk_neighbours(
    db: Database, chunk_ids: Sequence[int], reach: int
) -> dict[int, list[ChunkPlace]]:
    """For each of ``chunk_ids``, the chunks of its document up to ``reach`` places before
    and after it, itself included, in document order; a chunk gone meanwhile is left out."""
    if not chunk_ids:
        return {}
    cur = db.cursor()
    own = cur.execute(
        f"SELECT id, document_id, ordinal FROM chunks WHERE id IN ({id_list(chunk_ids)})"
    ).fetchall()
    if not own:
        return {}
    # Literal integers (int() keeps them safe): chunks are written a document at a time,
    # so DuckDB's zone maps on document_id skip nearly all of the table.
    wanted = " OR ".join(
        f"(document_id = {int(d)} AND ordinal BETWEEN {int(o) - reach} AND {int(o) + reach})"
        for _, d, o in own
    )
    rows = cur.execute(
        f"""SELECT id, document_id, ordinal, start_char, end_char, page_start, page_end,
               heading_path FROM chunks WHERE {wanted} ORDER BY document_id, ordinal"""
    ).fetchall()
    places = [
        ChunkPlace(
            chunk_id=int(r[0]),
            document_id=int(r[1]),
            ordinal=int(r[2]),
            start=int(r[3]),
            end=int(r[4]),
            page=r[5],
            page_end=r[6],
            heading_path=tuple(json.loads(r[7] or "[]")),
        )
        for r in rows
    ]
    return {
        int(chunk_id): [
            p for p in places if p.document_id == document_id and abs(p.ordinal - ordinal) <= reach
        ]
        for chunk_id, document_id, ordinal in own
    }


def text_slice(db: Database, document_id: int, start: int, end: int) -> str | None:
    """``document_text[start:end]`` of one document (None when it has no text), cut in the
    database so a passage of a book does not bring the whole book over."""
    row = (
        db.cursor()
        .execute(
            # substring counts characters (code points) from 1, as Python's slices do from 0.
            "SELECT substring(text, ?, ?) FROM document_text WHERE document_id = ?",
            [int(start) + 1, max(0, int(end) - int(start)), int(document_id)],
        )
        .fetchone()
    )
    return str(row[0]) if row and row[0] is not None else None
