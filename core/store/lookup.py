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
    """The chunks as hits (score 0, no ranks: the caller ranks them)."""
    if not chunk_ids:
        return {}
    rows = (
        db.cursor()
        .execute(
            f"""SELECT c.id, c.document_id, d.path, d.title, d.type, c.text, c.start_char,
                   c.end_char, c.page_start, c.page_end, c.heading_path
               FROM chunks c JOIN documents d ON d.id = c.document_id
               WHERE c.id IN ({id_list(chunk_ids)})"""
        )
        .fetchall()
    )
    return {
        int(r[0]): Hit(
            chunk_id=int(r[0]),
            document_id=int(r[1]),
            path=r[2],
            title=r[3] or "",
            type=r[4] or "",
            text=r[5],
            start=r[6],
            end=r[7],
            page=r[8],
            page_end=r[9],
            heading_path=tuple(json.loads(r[10] or "[]")),
            score=0.0,
        )
        for r in rows
    }


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
    rows = (
        db.cursor()
        .execute(
            f"""SELECT document_id FROM chunks WHERE document_id IN ({id_list(document_ids)})
                GROUP BY document_id HAVING count(embedding) = 0"""
        )
        .fetchall()
    )
    return {int(r[0]) for r in rows}


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
