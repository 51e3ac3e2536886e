"""The re-embedding side table: a new model's vectors for the library's chunks, kept
apart from ``chunks.embedding`` until every live chunk has one (core/indexing/reembed.py).

Progress is the table itself, so a migration interrupted by a crash or a close resumes
where it stopped. The old model's vectors in ``chunks`` are never touched until
:meth:`ReembedStore.swap` replaces all of them in one transaction: a reader sees either
every vector of the old model or every vector of the new one.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import duckdb
import numpy as np

from core.records import embedding_text
from core.store.db import Database
from core.store.documents import Unembedded
from core.store.vectors import READ_BATCH, blobs_to_matrix, vector_base64

# meta keys: the model being switched to (present while a migration is pending) and its
# vector size (once its first batch is stored).
TARGET_KEY = "reembed_model"
TARGET_DIM_KEY = "reembed_dim"


def _clear(cur: duckdb.DuckDBPyConnection) -> None:
    """No migration pending: the stored vectors and the target go."""
    cur.execute("DELETE FROM reembed")
    cur.execute("DELETE FROM meta WHERE key IN (?, ?)", [TARGET_KEY, TARGET_DIM_KEY])


class ReembedStore:
    def __init__(self, db: Database) -> None:
        self.db = db

    # --- the migration's state ----------------------------------------------------------

    def target(self) -> str | None:
        """The model a pending migration switches to, or None when none is pending."""
        return self.db.get_meta(TARGET_KEY)

    def begin(self, model_id: str) -> None:
        """Start (or keep) a migration to ``model_id``. Vectors stored for another target
        are dropped: they belong to a model nobody asked for any more."""
        if self.target() == model_id:
            return
        with self.db.transaction() as cur:
            _clear(cur)
            self.db.set_meta(TARGET_KEY, model_id, cur)

    def cancel(self) -> None:
        """Forget a pending migration and every vector it stored."""
        if self.target() is None and not self._has_rows():
            return
        with self.db.transaction() as cur:
            _clear(cur)

    def _has_rows(self) -> bool:
        return self.db.cursor().execute("SELECT 1 FROM reembed LIMIT 1").fetchone() is not None

    # --- the work -----------------------------------------------------------------------

    def pending(self, after_id: int, limit: int) -> list[Unembedded]:
        """Live chunks without a new-model vector, by id, above ``after_id`` (the caller's
        cursor: ids only grow, so chunks written meanwhile come after it)."""
        rows = (
            self.db.cursor()
            .execute(
                """SELECT c.id, coalesce(c.context, ''), c.text FROM chunks c
                   WHERE c.id > ? AND NOT EXISTS (SELECT 1 FROM reembed r WHERE r.chunk_id = c.id)
                   ORDER BY c.id LIMIT ?""",
                [int(after_id), int(limit)],
            )
            .fetchall()
        )
        return [Unembedded(int(i), embedding_text(ctx, text)) for i, ctx, text in rows]

    def save(self, chunk_ids: Sequence[int], vectors: np.ndarray) -> None:
        """Store new-model vectors; a chunk deleted meanwhile is skipped."""
        if not len(chunk_ids):
            return
        rows = {  # noqa: F841 - read by DuckDB's replacement scan below
            "id": np.asarray(chunk_ids, dtype=np.int64),
            "embedding": np.array([vector_base64(v) for v in vectors]),
        }
        dim = int(np.asarray(vectors).shape[1])
        with self.db.transaction() as cur:
            cur.execute(
                """INSERT INTO reembed
                   SELECT r.id, from_base64(r.embedding) FROM rows r
                   WHERE EXISTS (SELECT 1 FROM chunks c WHERE c.id = r.id)
                     AND NOT EXISTS (SELECT 1 FROM reembed e WHERE e.chunk_id = r.id)"""
            )
            self.db.set_meta(TARGET_DIM_KEY, str(dim), cur)

    def prune(self) -> None:
        """Drop the vectors of chunks deleted since they were stored."""
        with self.db.transaction() as cur:
            cur.execute(
                "DELETE FROM reembed WHERE NOT EXISTS "
                "(SELECT 1 FROM chunks c WHERE c.id = reembed.chunk_id)"
            )

    def progress(self) -> tuple[int, int]:
        """(live chunks with a new-model vector, all chunks)."""
        row = (
            self.db.cursor()
            .execute(
                """SELECT (SELECT count(*) FROM reembed r
                           WHERE EXISTS (SELECT 1 FROM chunks c WHERE c.id = r.chunk_id)),
                          (SELECT count(*) FROM chunks)"""
            )
            .fetchone()
        )
        return (int(row[0]), int(row[1])) if row else (0, 0)

    def vectors(self, dim: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """(chunk ids, float32 vectors) of the stored new-model vectors, in id ranges."""
        cur = self.db.cursor()
        after = 0
        while True:
            rows = cur.execute(
                "SELECT chunk_id, embedding FROM reembed WHERE chunk_id > ? "
                "ORDER BY chunk_id LIMIT ?",
                [after, READ_BATCH],
            ).fetchall()
            if not rows:
                return
            after = int(rows[-1][0])
            yield (
                np.array([r[0] for r in rows], dtype=np.uint64),
                blobs_to_matrix([r[1] for r in rows], dim),
            )

    # --- the switch ---------------------------------------------------------------------

    def swap(self, meta: dict[str, str], old_config: str, new_config: str) -> bool:
        """In one transaction: every chunk's embedding becomes its new-model vector, the
        documents indexed under ``old_config`` are recorded under ``new_config``, and
        ``meta`` (model, dimension, configuration) is written. Returns False, changing
        nothing, when a live chunk still lacks its vector."""
        with self.db.transaction() as cur:
            row = cur.execute(
                "SELECT count(*) FROM chunks c WHERE NOT EXISTS "
                "(SELECT 1 FROM reembed r WHERE r.chunk_id = c.id)"
            ).fetchone()
            if row and int(row[0]):
                return False
            cur.execute(
                "UPDATE chunks SET embedding = r.embedding FROM reembed r WHERE chunks.id = r.chunk_id"
            )
            # The old model's word pieces go with its vectors (core/store/pieces.py).
            cur.execute("DELETE FROM chunk_pieces")
            cur.execute(
                "UPDATE documents SET index_config = ? WHERE index_config = ?",
                [new_config, old_config],
            )
            _clear(cur)
            for key, value in meta.items():
                self.db.set_meta(key, value, cur)
        return True
