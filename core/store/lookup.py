"""Read-only chunk look-ups for retrieval: which document a chunk belongs to, its stored
embedding, and its neighbours in the document. Kept here so that retrieval holds no SQL."""

from __future__ import annotations

import json
from collections.abc import Sequence

import numpy as np

from core.records import Hit, SearchFilters, embedding_text
from core.store.db import Database
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
            params.extend([folder, folder.rstrip("/") + "/"])
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


def hits_for(db: Database, chunk_ids: Sequence[int]) -> dict[int, Hit]:
    """The chunks as hits (score 0, no ranks: the caller ranks them); a chunk whose
    document is gone meanwhile is left out."""
    if not chunk_ids:
        return {}
    cur = db.cursor()
    # Two look-ups, not a join: joined with documents, DuckDB read every chunk's text
    # (31 ms a search at 300k chunks); alone, chunks is read through its primary key
    # (under 1 ms).
    rows = cur.execute(
        f"""SELECT id, document_id, text, start_char, end_char, page_start, page_end,
               heading_path FROM chunks WHERE id IN ({id_list(chunk_ids)})"""
    ).fetchall()
    if not rows:
        return {}
    documents = {
        int(d[0]): d[1:]
        for d in cur.execute(
            f"SELECT id, path, title, type FROM documents WHERE id IN "
            f"({id_list(sorted({int(r[1]) for r in rows}))})"
        ).fetchall()
    }
    hits = {}
    for chunk_id, document_id, text, start, end, page, page_end, heading_path in rows:
        document = documents.get(int(document_id))
        if document is None:
            continue
        path, title, doc_type = document
        hits[int(chunk_id)] = Hit(
            chunk_id=int(chunk_id),
            document_id=int(document_id),
            path=path,
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
