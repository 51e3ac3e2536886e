"""The record of what the library holds: folders, documents, their text and chunks.

Every query on these tables lives here, so a column is changed in one module. Writes go
through ``Database.transaction`` (the writer lock), and a document's rows are replaced in
one transaction so a reader never sees half of a file.

Paths go in through ``stored_path`` and come out through ``disk_path`` (core/store/paths.py): a
file name that is not valid UTF-8 is stored as valid text and handed back as the name the
file has on disk, so callers only ever see the paths the OS gives them.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

import duckdb
import numpy as np

from core.ingest.text import EMPTY_FILE
from core.records import (
    FILE_STATUSES,
    Chunk,
    DocState,
    Document,
    FileEntry,
    FileInfo,
    PageSpan,
    PreparedFile,
    WordBox,
    embedding_text,
)
from core.store import ocr
from core.store.db import Database
from core.store.lookup import id_list
from core.store.paths import disk_path, display_text, normalize_folder, stored_path
from core.store.vectors import blobs_to_matrix, vector_base64


@dataclass(frozen=True)
class KnownFile:
    """What the database recorded about a file when it was last indexed."""

    size: int
    mtime: float
    state: str
    content_hash: str
    index_config: str | None
    reason: str = ""


@dataclass(frozen=True)
class DocumentWrite:
    """What a document write changed, for the vector index to follow."""

    document_id: int
    old_chunk_ids: tuple[int, ...]
    new_chunk_ids: np.ndarray
    # Of ``new_chunk_ids``, those written with an embedding (the rest wait for the
    # meaning pass), and their vectors in the same order.
    embedded_ids: np.ndarray
    embedded_vectors: np.ndarray | None


# Appended to a document's index configuration when a newer reader is to read it again.
REREAD_MARK = "|reread"


@dataclass(frozen=True)
class Unembedded:
    """A chunk written without its embedding yet: the meaning pass's work."""

    chunk_id: int
    embedding_text: str


def _state(table: str = "") -> str:
    """The state column, with an empty file recorded by an older Lectern ("failed",
    "empty file") read as the skipped file this one records: one state whichever wrote it."""
    t = f"{table}." if table else ""
    return (
        f"CASE WHEN {t}state = 'failed' AND {t}reason = '{EMPTY_FILE}' THEN 'skipped' "
        f"ELSE {t}state END"
    )


_DOCUMENT_COLUMNS = (
    "id, path, folder, size, mtime, content_hash, type, title, pages, "
    f"{_state()} AS state, reason, chunks"
)


def _document(r: Sequence[object]) -> Document:
    return Document(
        id=int(r[0]),  # type: ignore[call-overload]
        path=disk_path(str(r[1])),
        folder=disk_path(str(r[2] or "")),
        size=int(r[3] or 0),  # type: ignore[call-overload]
        mtime=float(r[4] or 0.0),  # type: ignore[arg-type]
        content_hash=str(r[5] or ""),
        type=str(r[6] or ""),
        title=str(r[7] or ""),
        pages=int(r[8] or 0),  # type: ignore[call-overload]
        state=DocState(r[9]),
        reason=str(r[10] or ""),
        chunks=int(r[11] or 0),  # type: ignore[call-overload]
    )


class DocumentStore:
    def __init__(self, db: Database) -> None:
        self.db = db

    # --- folders ------------------------------------------------------------------------

    def folders(self) -> list[str]:
        rows = self.db.cursor().execute("SELECT path FROM folders ORDER BY path").fetchall()
        return [disk_path(r[0]) for r in rows]

    def add_folders(self, folders: Sequence[str]) -> None:
        with self.db.transaction() as cur:
            for folder in folders:
                cur.execute("INSERT OR IGNORE INTO folders(path) VALUES (?)", [stored_path(folder)])

    def remove_folder(self, folder: str, meta_key: str) -> None:
        """Drop the folder row and its per-folder metadata entry ``meta_key``."""
        with self.db.transaction() as cur:
            cur.execute("DELETE FROM folders WHERE path = ?", [stored_path(folder)])
            cur.execute("DELETE FROM meta WHERE key = ?", [stored_path(meta_key)])

    def set_folder_states(self, states: dict[str, str]) -> None:
        with self.db.transaction() as cur:
            for folder, state in states.items():
                cur.execute(
                    "UPDATE folders SET state = ? WHERE path = ?", [state, stored_path(folder)]
                )

    def folder_counts(self) -> list[tuple[str, int, int, int, int, int]]:
        """Per folder: path, then documents indexed, failed, skipped, pending, and chunks."""
        rows = (
            self.db.cursor()
            .execute(
                f"""SELECT f.path,
                      count(*) FILTER (WHERE {_state("d")} = 'indexed'),
                      count(*) FILTER (WHERE {_state("d")} = 'failed'),
                      count(*) FILTER (WHERE {_state("d")} = 'skipped'),
                      count(*) FILTER (WHERE {_state("d")} = 'pending'),
                      coalesce(sum(d.chunks), 0)
               FROM folders f LEFT JOIN documents d ON d.folder = f.path
               GROUP BY f.path ORDER BY f.path"""
            )
            .fetchall()
        )
        return [
            (disk_path(r[0]), int(r[1]), int(r[2]), int(r[3]), int(r[4]), int(r[5])) for r in rows
        ]

    # --- documents ----------------------------------------------------------------------

    def documents(self, folder: str | None = None, state: str | None = None) -> list[Document]:
        """The documents (of one library folder, as given on a command line or by the
        app), by path."""
        sql = f"SELECT {_DOCUMENT_COLUMNS} FROM documents WHERE 1=1"
        params: list[object] = []
        if folder:
            sql += " AND folder = ?"
            params.append(stored_path(normalize_folder(folder)))
        if state:
            sql += f" AND {_state()} = ?"
            params.append(state)
        rows = self.db.cursor().execute(sql + " ORDER BY path", params).fetchall()
        return [_document(r) for r in rows]

    def file_list(self, folder: str | None = None, status: str | None = None) -> list[FileEntry]:
        """Every document (of the library, or of one folder) with its state, reason, pages,
        passages and how many of them are embedded, failed first, then skipped, waiting
        and the rest, each by path: the library's health at a glance.

        One statement: the passages are counted per document in one aggregate over
        ``chunks`` (0.24 s at 20k files and 390k passages; queries per document took 33 s:
        bench/file_list.py).
        ``status`` is one of ``FILE_STATUSES``; "indexed" includes "keyword only"."""
        where: list[str] = []
        params: list[object] = []
        if folder:
            where.append("d.folder = ?")
            params.append(stored_path(normalize_folder(folder)))
        if status:
            if status not in FILE_STATUSES:
                raise ValueError(f"unknown file status {status!r}")
            state = {"waiting": "pending", "keyword only": "indexed"}.get(status, status)
            where.append(f"{_state('d')} = ?")
            params.append(state)
            if status == "keyword only":
                where.append("coalesce(c.passages, 0) > coalesce(c.embedded, 0)")
        sql = f"""
            WITH c AS (
                SELECT document_id, count(*) AS passages, count(embedding) AS embedded
                FROM chunks GROUP BY document_id
            ), o AS (SELECT DISTINCT document_id FROM ocr_words)
            SELECT d.path, coalesce(d.folder, ''), coalesce(d.type, ''),
                   coalesce(d.title, ''), {_state("d")}, coalesce(d.reason, ''),
                   coalesce(d.pages, 0), coalesce(c.passages, 0), coalesce(c.embedded, 0),
                   coalesce(d.size, 0), coalesce(d.mtime, 0.0),
                   -- indexed_at holds local wall time (current_timestamp into TIMESTAMP):
                   -- read through the session's time zone, as it was written.
                   epoch(d.indexed_at::TIMESTAMPTZ), o.document_id IS NOT NULL
            FROM documents d
            LEFT JOIN c ON c.document_id = d.id
            LEFT JOIN o ON o.document_id = d.id
            {"WHERE " + " AND ".join(where) if where else ""}
            ORDER BY CASE {_state("d")} WHEN 'failed' THEN 0 WHEN 'skipped' THEN 1
                     WHEN 'pending' THEN 2 ELSE 3 END, d.path"""
        rows = self.db.cursor().execute(sql, params).fetchall()
        # The columns come in FileEntry's order with their defaults for NULL, as the
        # Python types it holds: only the state needs making.
        states = {s.value: s for s in DocState}
        return [
            FileEntry(
                disk_path(r[0]),
                disk_path(r[1]),
                r[2],
                r[3],
                states[r[4]],
                r[5],
                r[6],
                r[7],
                r[8],
                r[9],
                r[10],
                r[11],
                r[12],
            )
            for r in rows
        ]

    def paths_in_folder(self, folder: str) -> list[str]:
        rows = (
            self.db.cursor()
            .execute("SELECT path FROM documents WHERE folder = ?", [stored_path(folder)])
            .fetchall()
        )
        return [disk_path(r[0]) for r in rows]

    def mark_pending(self, path: str) -> None:
        with self.db.transaction() as cur:
            cur.execute(
                "UPDATE documents SET state = 'pending' WHERE path = ?", [stored_path(path)]
            )

    def text(self, document_id: int) -> str:
        row = (
            self.db.cursor()
            .execute("SELECT text FROM document_text WHERE document_id = ?", [document_id])
            .fetchone()
        )
        return str(row[0]) if row else ""

    def pages(self, document_id: int) -> list[PageSpan]:
        row = (
            self.db.cursor()
            .execute("SELECT pages FROM document_text WHERE document_id = ?", [document_id])
            .fetchone()
        )
        return [PageSpan(*p) for p in json.loads(row[0])] if row and row[0] else []

    def page_at(self, document_id: int, offset: int) -> int | None:
        for span in self.pages(document_id):
            if span.start <= offset < span.end:
                return span.page
        return None

    def ocr_words(self, document_id: int, start: int, end: int) -> list[WordBox]:
        """Words read by OCR in characters ``[start, end)`` of a document, with their
        boxes on the page (none for text that came from a text layer)."""
        return ocr.words_in(self.db.cursor(), document_id, start, end)

    def ocr_pages(self, document_id: int) -> list[int]:
        """The pages of a document whose text was read by OCR."""
        return ocr.ocr_pages(self.db.cursor(), document_id)

    def ocr_counts(self) -> dict[str, int]:
        """Indexed documents read (at least in part) by OCR, per library folder."""
        return ocr.ocr_counts(self.db.cursor())

    def modified_dates(self, document_ids: Sequence[int]) -> dict[str, str]:
        """path -> the file's modification date (ISO), for the given documents."""
        if not document_ids:
            return {}
        rows = (
            self.db.cursor()
            .execute(
                "SELECT path, mtime FROM documents WHERE id IN (SELECT unnest(?::BIGINT[]))",
                [list(document_ids)],
            )
            .fetchall()
        )
        return {
            disk_path(path): datetime.fromtimestamp(float(mtime)).date().isoformat()
            for path, mtime in rows
            if mtime
        }

    def counts(self) -> tuple[dict[str, int], int]:
        """Documents per state, and the number of chunks."""
        cur = self.db.cursor()
        row = cur.execute("SELECT count(*) FROM chunks").fetchone()
        by_state = dict(
            cur.execute(f"SELECT {_state()}, count(*) FROM documents GROUP BY 1").fetchall()
        )
        return {s.value: int(by_state.get(s.value, 0)) for s in DocState}, int(row[0] if row else 0)

    def sample_chunk_texts(self, size: int, seed: int = 7) -> list[str]:
        """Up to ``size`` passages' texts, the same sample each time while the chunks do
        not change (a repeatable reservoir sample)."""
        rows = (
            self.db.cursor()
            .execute(
                f"SELECT text FROM chunks USING SAMPLE reservoir({int(size)} ROWS) "
                f"REPEATABLE ({int(seed)})"
            )
            .fetchall()
        )
        return [row[0] for row in rows if row[0]]

    def sample_chunks(
        self, size: int, seed: int = 7, min_chars: int = 80
    ) -> list[tuple[int, int, str]]:
        """Up to ``size`` (chunk id, document id, text) of passages of at least
        ``min_chars``, a repeatable sample while the chunks do not change."""
        rows = (
            self.db.cursor()
            .execute(
                "SELECT id, document_id, text FROM (SELECT id, document_id, text FROM chunks "
                "WHERE strlen(text) >= ?) "
                f"USING SAMPLE reservoir({int(size)} ROWS) REPEATABLE ({int(seed)})",
                [int(min_chars)],
            )
            .fetchall()
        )
        return sorted((int(c), int(d), str(t)) for c, d, t in rows)

    def chunk_places(self, chunk_ids: Sequence[int]) -> dict[int, tuple[str, int, int]]:
        """Each chunk's file and character range in the file's text."""
        if not chunk_ids:
            return {}
        rows = (
            self.db.cursor()
            .execute(
                "SELECT c.id, d.path, c.start_char, c.end_char FROM chunks c "
                "JOIN documents d ON d.id = c.document_id "
                "WHERE c.id IN (SELECT unnest(?::BIGINT[]))",
                [list(chunk_ids)],
            )
            .fetchall()
        )
        return {int(c): (disk_path(str(p)), int(a), int(b)) for c, p, a, b in rows}

    def set_index_config(self, meta: dict[str, str], *, drop_chunks: bool) -> None:
        """Write the index configuration ``meta``; with ``drop_chunks`` (the embedding model
        or the chunker changed) every chunk and text goes in the same transaction and every
        indexed document is queued again, so vectors of two configurations never mix."""
        with self.db.transaction() as cur:
            if drop_chunks:
                cur.execute("DELETE FROM chunks")
                cur.execute("DELETE FROM chunk_pieces")
                cur.execute("DELETE FROM document_text")
                cur.execute(
                    "UPDATE documents SET state = 'pending', chunks = 0 WHERE state = 'indexed'"
                )
            for key, value in meta.items():
                self.db.set_meta(key, value, cur)

    # --- the indexer's reads ------------------------------------------------------------

    def known_files(self, folders: set[str]) -> dict[str, KnownFile]:
        """What the database holds for every document under ``folders``."""
        rows = (
            self.db.cursor()
            .execute(
                "SELECT path, size, mtime, state, content_hash, index_config, folder, "
                "coalesce(reason, '') FROM documents"
            )
            .fetchall()
        )
        stored_folders = {stored_path(f) for f in folders}
        return {
            disk_path(path): KnownFile(size, mtime, state, digest, config, reason)
            for path, size, mtime, state, digest, config, folder, reason in rows
            if folder in stored_folders
        }

    def indexed_paths_of_sizes(self, paths: Sequence[str], sizes: Sequence[int]) -> set[str]:
        """Which of ``paths`` are indexed with one of these sizes (possible move sources)."""
        rows = (
            self.db.cursor()
            .execute(
                """SELECT path FROM documents WHERE path IN (SELECT unnest(?::VARCHAR[]))
                   AND state = 'indexed' AND size IN (SELECT unnest(?::BIGINT[]))""",
                [[stored_path(p) for p in paths], list(sizes)],
            )
            .fetchall()
        )
        return {disk_path(r[0]) for r in rows}

    def donor(self, content_hash: str, index_config: str, path: str) -> int | None:
        """Another document with this content already embedded under this configuration."""
        row = (
            self.db.cursor()
            .execute(
                """SELECT id FROM documents WHERE content_hash = ? AND state = 'indexed'
               AND index_config = ? AND path <> ? LIMIT 1""",
                [content_hash, index_config, stored_path(path)],
            )
            .fetchone()
        )
        return int(row[0]) if row else None

    def stored_embeddings(self, path: str, index_config: str) -> dict[str, np.ndarray]:
        """The file's stored embeddings keyed by their embedding text (context and text),
        also when it waits to be read again by a newer reader (``mark_reread``): the
        passages it reads the same keep their vectors."""
        rows = (
            self.db.cursor()
            .execute(
                """SELECT coalesce(c.context, '') , c.text, c.embedding FROM chunks c
                   JOIN documents d ON d.id = c.document_id
                   WHERE d.path = ? AND d.index_config IN (?, ? || ?)
                     AND c.embedding IS NOT NULL""",
                [stored_path(path), index_config, index_config, REREAD_MARK],
            )
            .fetchall()
        )
        stored: dict[str, np.ndarray] = {}
        for context, text, blob in rows:
            key = f"{context}\n{text}" if context else text
            stored[key] = np.frombuffer(blob, dtype=np.float32)
        return stored

    def indexed_before(self, paths: Sequence[str]) -> set[str]:
        """Which of ``paths`` were already in the library (an update, not an addition)."""
        if not paths:
            return set()
        rows = (
            self.db.cursor()
            .execute(
                "SELECT path FROM documents WHERE path IN (SELECT unnest(?::VARCHAR[])) AND state <> 'pending'",
                [[stored_path(p) for p in paths]],
            )
            .fetchall()
        )
        return {disk_path(r[0]) for r in rows}

    # --- the meaning pass: chunks written before their embedding ---------------------

    def unembedded(self, after_id: int, limit: int) -> list[Unembedded]:
        """Chunks still without an embedding, oldest first, with ids above ``after_id``
        (the caller's cursor: ids only grow). Only indexed documents have chunks."""
        rows = (
            self.db.cursor()
            .execute(
                """SELECT c.id, coalesce(c.context, ''), c.text FROM chunks c
                   WHERE c.embedding IS NULL AND c.id > ? ORDER BY c.id LIMIT ?""",
                [int(after_id), int(limit)],
            )
            .fetchall()
        )
        return [Unembedded(int(i), embedding_text(ctx, text)) for i, ctx, text in rows]

    def set_embeddings(self, chunk_ids: Sequence[int], vectors: np.ndarray) -> np.ndarray:
        """Store the embeddings of chunks written without one; returns the ids actually
        updated (a chunk deleted meanwhile, by an edit or a removal, is skipped)."""
        if not len(chunk_ids):
            return np.zeros(0, dtype=np.uint64)
        # Base64 text, not an object array of bytes: DuckDB takes a numpy str column ~4x
        # faster (5 against 20 ms of CPU per 64 vectors), and this runs between the
        # model's batches, on the meaning pass's critical path.
        new_embeddings = {  # noqa: F841 - read by DuckDB's replacement scan below
            "id": np.asarray(chunk_ids, dtype=np.int64),
            "embedding": np.array([vector_base64(v) for v in vectors]),
        }
        with self.db.transaction() as cur:
            updated = cur.execute(
                f"""UPDATE chunks SET embedding = from_base64(r.embedding) FROM new_embeddings r
                    WHERE chunks.id = r.id AND chunks.id IN ({id_list(chunk_ids)})
                      AND chunks.embedding IS NULL
                    RETURNING chunks.id""",
            ).fetchall()
        return np.array(sorted(int(r[0]) for r in updated), dtype=np.uint64)

    def mark_reread(self, kinds: Sequence[str], meta: dict[str, str]) -> int:
        """Have the indexed documents of these types read again by the next indexing pass
        (their reader changed), and write ``meta``, in one transaction. They stay indexed
        and searchable until then: only their configuration is marked, which the pass
        sees differ from the library's. Returns how many were marked."""
        with self.db.transaction() as cur:
            marked = 0
            if kinds:
                rows = cur.execute(
                    """UPDATE documents SET index_config = index_config || ?
                       WHERE state = 'indexed' AND type IN (SELECT unnest(?::VARCHAR[]))
                         AND NOT ends_with(index_config, ?)
                       RETURNING id""",
                    [REREAD_MARK, list(kinds), REREAD_MARK],
                ).fetchall()
                marked = len(rows)
            for key, value in meta.items():
                self.db.set_meta(key, value, cur)
        return marked

    def embedding_counts(self) -> tuple[int, int]:
        """(chunks with an embedding, all chunks): how much is searchable by meaning."""
        row = self.db.cursor().execute("SELECT count(embedding), count(*) FROM chunks").fetchone()
        return (int(row[0]), int(row[1])) if row else (0, 0)

    # --- the indexer's writes -----------------------------------------------------------

    def write_document(
        self,
        prepared: PreparedFile,
        vectors: Sequence[np.ndarray | None] | None,
        index_config: str,
    ) -> DocumentWrite:
        """Replace the file's rows (document, text, chunks) in one transaction.

        ``vectors`` holds one embedding per chunk, or None where it is not known yet:
        such a chunk is keyword-searchable at once and embedded later by the meaning pass
        (``unembedded``, ``set_embeddings``)."""
        info = prepared.info
        parsed = prepared.parsed
        old_ids: list[int] = []
        new_keys: np.ndarray = np.zeros(0, dtype=np.uint64)
        embedded_keys: np.ndarray = np.zeros(0, dtype=np.uint64)
        embedded: np.ndarray | None = None
        path, folder = stored_path(info.path), stored_path(info.folder)
        with self.db.transaction() as cur:
            row = cur.execute("SELECT id FROM documents WHERE path = ?", [path]).fetchone()
            if row is None:
                inserted = cur.execute(
                    "INSERT INTO documents(path, folder, state) VALUES (?, ?, 'pending') RETURNING id",
                    [path, folder],
                ).fetchone()
                assert inserted is not None
                doc_id = int(inserted[0])
            else:
                doc_id = int(row[0])
                old_ids = [
                    r[0]
                    for r in cur.execute(
                        "SELECT id FROM chunks WHERE document_id = ?", [doc_id]
                    ).fetchall()
                ]
                cur.execute(
                    "DELETE FROM chunk_pieces WHERE chunk_id IN "
                    "(SELECT id FROM chunks WHERE document_id = ?)",
                    [doc_id],
                )
                cur.execute("DELETE FROM chunks WHERE document_id = ?", [doc_id])
                cur.execute("DELETE FROM document_text WHERE document_id = ?", [doc_id])
                cur.execute("DELETE FROM ocr_words WHERE document_id = ?", [doc_id])
            title = os.path.splitext(os.path.basename(info.path))[0]
            pages = 0
            chunk_count = 0
            if prepared.reuse_from is not None:
                title, pages, new_keys = self._copy_from_donor(cur, doc_id, prepared.reuse_from)
                embedded_keys, embedded = _embedded_rows(cur, doc_id)
                ocr.copy_words(cur, doc_id, prepared.reuse_from)
                chunk_count = len(new_keys)
            elif parsed is not None:
                title = parsed.title or title
                pages = parsed.page_count
                cur.execute(
                    "INSERT INTO document_text VALUES (?, ?, ?)",
                    [
                        doc_id,
                        parsed.text,
                        json.dumps([[p.page, p.start, p.end] for p in parsed.pages]),
                    ],
                )
                # The words OCR read, with their boxes: in this transaction, so a
                # document never lacks the boxes its citations are drawn from.
                ocr.insert_words(cur, doc_id, parsed.words)
                if prepared.state is DocState.INDEXED:
                    slots = list(vectors) if vectors is not None else [None] * len(prepared.chunks)
                    new_keys = _insert_chunks(cur, doc_id, prepared.chunks, slots)
                    chunk_count = len(new_keys)
                    known = [i for i, v in enumerate(slots) if v is not None]
                    embedded_keys = new_keys[known]
                    known_vectors = [v for v in slots if v is not None]
                    embedded = (
                        np.vstack(known_vectors).astype(np.float32) if known_vectors else None
                    )
            cur.execute(
                """UPDATE documents SET folder = ?, size = ?, mtime = ?, content_hash = ?, type = ?, title = ?,
                       pages = ?, state = ?, reason = ?, chunks = ?, index_config = ?, indexed_at = current_timestamp
                   WHERE id = ?""",
                [
                    folder,
                    info.size,
                    info.mtime,
                    prepared.content_hash,
                    prepared.doc_type or "",
                    display_text(title),
                    pages,
                    prepared.state.value,
                    display_text(prepared.reason),
                    chunk_count,
                    index_config,
                    doc_id,
                ],
            )
            self._bump_version(cur)
        return DocumentWrite(doc_id, tuple(old_ids), new_keys, embedded_keys, embedded)

    def _copy_from_donor(
        self, cur: duckdb.DuckDBPyConnection, doc_id: int, donor: int
    ) -> tuple[str, int, np.ndarray]:
        """Identical content already embedded: copy its text and chunks, embeddings included."""
        row = cur.execute("SELECT title, pages FROM documents WHERE id = ?", [donor]).fetchone()
        assert row is not None
        cur.execute(
            "INSERT INTO document_text SELECT ?, text, pages FROM document_text WHERE document_id = ?",
            [doc_id, donor],
        )
        keys = np.array(
            [
                r[0]
                for r in cur.execute(
                    """INSERT INTO chunks(document_id, ordinal, text, context, start_char, end_char,
                           page_start, page_end, heading_path, token_count, embedding)
                       SELECT ?, ordinal, text, context, start_char, end_char, page_start, page_end,
                           heading_path, token_count, embedding
                       FROM chunks WHERE document_id = ? ORDER BY ordinal RETURNING id""",
                    [doc_id, donor],
                ).fetchall()
            ],
            dtype=np.uint64,
        )
        return str(row[0] or ""), int(row[1] or 0), keys

    def _bump_version(self, cur: duckdb.DuckDBPyConnection) -> None:
        version = int(self.db.get_meta("content_version", "0") or 0) + 1
        self.db.set_meta("content_version", str(version), cur)

    def touch(self, files: Sequence[FileInfo]) -> None:
        """Same content, new modification time: only the time is recorded."""
        if not files:
            return
        with self.db.transaction() as cur:
            for info in files:
                cur.execute(
                    "UPDATE documents SET mtime = ? WHERE path = ?",
                    [info.mtime, stored_path(info.path)],
                )

    def remove_documents(self, paths: Sequence[str]) -> tuple[int, list[int]]:
        """Forget these files' rows, text and chunks; returns how many documents went and
        the ids of their chunks (for the vector index)."""
        if not paths:
            return 0, []
        with self.db.transaction() as cur:
            ids = [
                r[0]
                for r in cur.execute(
                    "SELECT id FROM documents WHERE path IN (SELECT unnest(?::VARCHAR[]))",
                    [[stored_path(p) for p in paths]],
                ).fetchall()
            ]
            if not ids:
                return 0, []
            chunk_ids = [
                r[0]
                for r in cur.execute(
                    "SELECT id FROM chunks WHERE document_id IN (SELECT unnest(?::BIGINT[]))", [ids]
                ).fetchall()
            ]
            cur.execute(
                "DELETE FROM chunk_pieces WHERE chunk_id IN (SELECT id FROM chunks "
                "WHERE document_id IN (SELECT unnest(?::BIGINT[])))",
                [ids],
            )
            cur.execute(
                "DELETE FROM chunks WHERE document_id IN (SELECT unnest(?::BIGINT[]))", [ids]
            )
            cur.execute(
                "DELETE FROM document_text WHERE document_id IN (SELECT unnest(?::BIGINT[]))", [ids]
            )
            cur.execute("DELETE FROM documents WHERE id IN (SELECT unnest(?::BIGINT[]))", [ids])
            cur.execute(
                "DELETE FROM ocr_words WHERE document_id IN (SELECT unnest(?::BIGINT[]))", [ids]
            )
            self._bump_version(cur)
        return len(ids), chunk_ids


def _embedded_rows(
    cur: duckdb.DuckDBPyConnection, doc_id: int
) -> tuple[np.ndarray, np.ndarray | None]:
    rows = cur.execute(
        "SELECT id, embedding FROM chunks WHERE document_id = ? AND embedding IS NOT NULL "
        "ORDER BY id",
        [doc_id],
    ).fetchall()
    if not rows:
        return np.zeros(0, dtype=np.uint64), None
    keys = np.array([r[0] for r in rows], dtype=np.uint64)
    dim = len(rows[0][1]) // 4
    return keys, blobs_to_matrix([r[1] for r in rows], dim)


def _insert_chunks(
    cur: duckdb.DuckDBPyConnection,
    doc_id: int,
    chunks: Sequence[Chunk],
    vectors: Sequence[np.ndarray | None],
) -> np.ndarray:
    ids = np.array(
        [
            r[0]
            for r in cur.execute(
                "SELECT nextval('chunk_ids') FROM range(?)", [len(chunks)]
            ).fetchall()
        ],
        dtype=np.int64,
    )
    # A dict of numpy columns is scanned by DuckDB in bulk; per-row parameters are far slower.
    # Text goes as numpy str columns and embeddings as base64 text ('' for none): DuckDB
    # takes object columns value by value (22 against 4 ms of CPU per 50 chunks), and this
    # runs on the indexing thread between the model's batches. A str array drops trailing
    # NULs, so text ending in one keeps the object column.
    text_dtype: type = (
        object if any(c.text.endswith("\0") or c.context.endswith("\0") for c in chunks) else str
    )
    new_chunks = {  # noqa: F841 - read by DuckDB's replacement scan below
        "id": ids,
        "ordinal": np.array([c.ordinal for c in chunks], dtype=np.int32),
        "text": np.array([c.text for c in chunks], dtype=text_dtype),
        "context": np.array([c.context for c in chunks], dtype=text_dtype),
        "start_char": np.array([c.start for c in chunks], dtype=np.int64),
        "end_char": np.array([c.end for c in chunks], dtype=np.int64),
        "page_start": np.array(
            [c.page_start if c.page_start is not None else -1 for c in chunks], dtype=np.int32
        ),
        "page_end": np.array(
            [c.page_end if c.page_end is not None else -1 for c in chunks], dtype=np.int32
        ),
        "heading_path": np.array([json.dumps(list(c.heading_path)) for c in chunks], dtype=str),
        "token_count": np.array([c.token_count for c in chunks], dtype=np.int32),
        "embedding": np.array(
            ["" if v is None else vector_base64(v) for v in vectors],
            dtype=str,
        ),
    }
    cur.execute(
        """INSERT INTO chunks(id, document_id, ordinal, text, context, start_char, end_char, page_start,
               page_end, heading_path, token_count, embedding)
           SELECT id, ?, ordinal, text, context, start_char, end_char, nullif(page_start, -1),
               nullif(page_end, -1), heading_path, token_count,
               CASE WHEN embedding <> '' THEN from_base64(embedding) END FROM new_chunks""",
        [doc_id],
    )
    return ids.astype(np.uint64)
