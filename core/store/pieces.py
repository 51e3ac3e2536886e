"""Each passage's packed word-piece states (core/embedding/pieces.py), by chunk id: what the
second stage reads instead of encoding the short list again.

Derived like the vectors: made by the model from the chunk's text, thrown away whenever
they might not match (another model, another packing, a re-embedding), and made again by
the next indexing run's meaning pass (``missing``). A chunk without them is encoded at
search time, as before they were kept, so a search never depends on them.

Rows are only ever inserted: a chunk's text never changes under its id (an edited file
gets new chunks), and rows of deleted chunks are dropped by ``prune``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from core.records import embedding_text
from core.store.db import Database
from core.store.documents import Unembedded
from core.store.lookup import id_list

# meta key: "<model id> <codec>" of the stored pieces.
PIECES_KEY = "pieces_of"


class PieceStore:
    def __init__(self, db: Database) -> None:
        self.db = db

    def keep_for(self, model_id: str, codec: str) -> None:
        """Make the stored pieces those of ``model_id`` packed by ``codec``: any stored
        under another pair go (the meaning pass makes them again)."""
        wanted = f"{model_id} {codec}"
        if self.db.read_only or self.db.get_meta(PIECES_KEY) == wanted:
            return
        with self.db.transaction() as cur:
            cur.execute("DELETE FROM chunk_pieces")
            self.db.set_meta(PIECES_KEY, wanted, cur)

    def drop_all(self) -> None:
        """Forget every stored piece (the model's vectors were replaced)."""
        with self.db.transaction() as cur:
            cur.execute("DELETE FROM chunk_pieces")

    def put(self, chunk_ids: Sequence[int], blobs: Sequence[bytes]) -> int:
        """Store pieces for chunks still in the library that have none; returns how many."""
        if not len(chunk_ids):
            return 0
        new_pieces = {  # noqa: F841 - read by DuckDB's replacement scan below
            "chunk_id": np.asarray(chunk_ids, dtype=np.int64),
            "pieces": np.array(list(blobs), dtype=object),
        }
        with self.db.transaction() as cur:
            rows = cur.execute(
                f"""INSERT INTO chunk_pieces
                    SELECT r.chunk_id, r.pieces FROM new_pieces r
                    WHERE r.chunk_id IN ({id_list(chunk_ids)})
                      AND EXISTS (SELECT 1 FROM chunks c WHERE c.id = r.chunk_id)
                      AND NOT EXISTS (SELECT 1 FROM chunk_pieces p WHERE p.chunk_id = r.chunk_id)
                    RETURNING chunk_id"""
            ).fetchall()
        return len(rows)

    def get(self, chunk_ids: Sequence[int]) -> dict[int, bytes]:
        """chunk id -> its stored pieces, for those that have them."""
        if not len(chunk_ids):
            return {}
        rows = (
            self.db.cursor()
            .execute(
                f"SELECT chunk_id, pieces FROM chunk_pieces WHERE chunk_id IN ({id_list(chunk_ids)})"
            )
            .fetchall()
        )
        return {int(r[0]): bytes(r[1]) for r in rows}

    def missing(self, after_id: int, limit: int) -> list[Unembedded]:
        """Embedded chunks without pieces, oldest first, ids above ``after_id``: the
        meaning pass's second share of work (a library from before pieces were kept,
        chunks whose vectors a donor gave, a change of model)."""
        rows = (
            self.db.cursor()
            .execute(
                """SELECT c.id, coalesce(c.context, ''), c.text FROM chunks c
                   WHERE c.embedding IS NOT NULL AND c.id > ?
                     AND NOT EXISTS (SELECT 1 FROM chunk_pieces p WHERE p.chunk_id = c.id)
                   ORDER BY c.id LIMIT ?""",
                [int(after_id), int(limit)],
            )
            .fetchall()
        )
        return [Unembedded(int(i), embedding_text(ctx, text)) for i, ctx, text in rows]

    def counts(self) -> tuple[int, int]:
        """(chunks with pieces, embedded chunks)."""
        row = (
            self.db.cursor()
            .execute(
                """SELECT (SELECT count(*) FROM chunk_pieces p
                           WHERE EXISTS (SELECT 1 FROM chunks c WHERE c.id = p.chunk_id)),
                          (SELECT count(embedding) FROM chunks)"""
            )
            .fetchone()
        )
        return (int(row[0]), int(row[1])) if row else (0, 0)

    def prune(self) -> int:
        """Drop the pieces of chunks no longer in the library; returns how many."""
        with self.db.transaction() as cur:
            rows = cur.execute(
                """DELETE FROM chunk_pieces p
                   WHERE NOT EXISTS (SELECT 1 FROM chunks c WHERE c.id = p.chunk_id)
                   RETURNING chunk_id"""
            ).fetchall()
        return len(rows)
