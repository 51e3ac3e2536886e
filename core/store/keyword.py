"""BM25 keyword search over chunks with DuckDB's ``fts`` extension, updated incrementally.

``PRAGMA create_fts_index`` indexes a whole table at once (~9 s per 100k chunks here), so
a one-file change cannot pay for a rebuild. The keyword index is therefore two fts
indexes over snapshot tables:

- the *base*: every chunk with ``id <= watermark`` at the time it was built, rebuilt
  rarely (when the delta grows past a fraction of it);
- the *delta*: chunks with ``id > watermark``; small, so rebuilt after each batch.

Chunk ids only grow, so "newer than the watermark" is exactly "not in the base". Deleted
chunks need no tombstone table: every query joins with the live ``chunks`` table, which
drops them. A query scores both indexes with BM25 using the *combined* statistics (total
documents, average length, and each term's document frequency summed over base and delta),
so a chunk scores the same whether it sits in the base or the delta.

Each snapshot alternates between two table names so that a rebuild never drops the index
a concurrent reader is using; the switch is one metadata write.

A base rebuild takes seconds on a large library (~9 s per 100k chunks), so while indexing
it runs on its own thread (``refresh(background=True)``) without the write lock: it only
creates new tables, readers and the indexer carry on with the old base and a growing
delta, and the write lock is taken only for the switch (with a fresh delta of the chunks
newer than the new base).
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass

import duckdb

from core.store.db import Database

log = logging.getLogger(__name__)

BASE_NAMES = ("kw_base_a", "kw_base_b")
DELTA_NAMES = ("kw_delta_a", "kw_delta_b")
# Digits are kept (the fts default drops them): error codes, figures and identifiers are
# exactly what people search by keyword.
IGNORE_PATTERN = r"(\\.|[^a-z0-9])+"
MERGE_FRACTION = 0.10
MERGE_MIN_CHUNKS = 2_000
BM25_K1 = 1.2
BM25_B = 0.75


@dataclass(frozen=True)
class KeywordState:
    base: str | None
    delta: str | None
    watermark: int


def _schema(table: str) -> str:
    return f"fts_main_{table}"


class KeywordIndex:
    def __init__(self, db: Database) -> None:
        self.db = db
        self._checkpoint_pending = False
        self._merge_thread: threading.Thread | None = None
        self._merge_cursor: duckdb.DuckDBPyConnection | None = None
        self._closing = False

    # --- state ------------------------------------------------------------------

    def state(self) -> KeywordState:
        return KeywordState(
            base=self.db.get_meta("kw_base") or None,
            delta=self.db.get_meta("kw_delta") or None,
            watermark=int(self.db.get_meta("kw_watermark", "0") or 0),
        )

    def is_current(self) -> bool:
        """True when the delta was built after the last chunk change."""
        return self.db.get_meta("kw_built_version") == self.db.get_meta("content_version", "0")

    def delta_size(self) -> int:
        state = self.state()
        row = (
            self.db.cursor()
            .execute("SELECT count(*) FROM chunks WHERE id > ?", [state.watermark])
            .fetchone()
        )
        return int(row[0]) if row else 0

    # --- maintenance ------------------------------------------------------------

    @property
    def merging(self) -> bool:
        thread = self._merge_thread
        return thread is not None and thread.is_alive()

    def wait_for_merge(self) -> None:
        """Block until a background base rebuild has finished (or failed)."""
        thread = self._merge_thread
        if thread is not None and thread is not threading.current_thread():
            thread.join()

    def close(self) -> None:
        """Stop a background rebuild (its half-built table is dropped) before the
        database closes."""
        self._closing = True
        cursor = self._merge_cursor
        if cursor is not None and self.merging:
            try:
                cursor.interrupt()
            except duckdb.Error:
                pass
        self.wait_for_merge()

    def refresh(self, *, force_merge: bool = False, background: bool = False) -> str:
        """Bring keyword search up to date with ``chunks``; returns what it did.

        With ``background``, a due base rebuild starts on its own thread and this call
        only refreshes the delta, so new chunks are searchable at once and the caller
        (the indexer, between batches) is not held up for seconds."""
        if not background:
            # A caller that wants the index settled waits for a rebuild in flight (outside
            # the write lock, which the rebuild takes to switch).
            self.wait_for_merge()
        with self.db.write_lock:
            if self._checkpoint_pending:
                self._checkpoint_pending = not self.db.try_checkpoint()
            state = self.state()
            cur = self.db.cursor()
            total = int(cur.execute("SELECT count(*) FROM chunks").fetchone()[0])
            delta = self.delta_size()
            due = (
                force_merge
                or state.base is None
                or delta > max(MERGE_MIN_CHUNKS, MERGE_FRACTION * total)
            )
            if due and background and state.base is not None:
                if not self.merging and not self._closing:
                    self._start_merge(state)
                if not self.is_current():
                    self._rebuild_delta(state)
                return "merging"
            if due:
                self._rebuild_base(state)
                return "merged"
            if not self.is_current():
                self._rebuild_delta(state)
                return "delta"
            return "current"

    def _start_merge(self, state: KeywordState) -> None:
        """Called under the write lock, so no write is in flight: every chunk id up to
        the watermark is committed and the new base sees them all."""
        cur = self.db.cursor()
        watermark = int(cur.execute("SELECT coalesce(max(id), 0) FROM chunks").fetchone()[0])
        name = BASE_NAMES[1] if state.base == BASE_NAMES[0] else BASE_NAMES[0]
        self._merge_thread = threading.Thread(
            target=self._merge, args=(name, watermark), daemon=True, name="lectern-kw-merge"
        )
        self._merge_thread.start()

    def _merge(self, name: str, watermark: int) -> None:
        self._merge_cursor = self.db.cursor()
        try:
            # The long part, without the write lock: a new table nobody reads yet.
            self._build(name, "id <= ?", [watermark])
            with self.db.write_lock:
                if self._closing:
                    self._drop(name)
                    return
                self._switch_base(self.state(), name, watermark)
        except duckdb.Error as exc:
            if not self._closing:
                log.warning("keyword index rebuild failed (%s); the next refresh retries", exc)
            try:
                with self.db.write_lock:
                    if self.state().base != name:
                        self._drop(name)
            except duckdb.Error:
                pass
        finally:
            self._merge_cursor = None

    def _switch_base(self, state: KeywordState, name: str, watermark: int) -> None:
        """Make ``name`` (chunks up to ``watermark``) the base, with a delta of the rest.
        Called under the write lock."""
        cur = self.db.cursor()
        version = self.db.get_meta("content_version", "0") or "0"
        delta = DELTA_NAMES[1] if state.delta == DELTA_NAMES[0] else DELTA_NAMES[0]
        self._build(delta, "id > ?", [watermark])
        cur.execute("BEGIN TRANSACTION")
        self.db.set_meta("kw_base", name if self._has_rows(name) else "", cur)
        self.db.set_meta("kw_delta", delta if self._has_rows(delta) else "", cur)
        self.db.set_meta("kw_watermark", str(watermark), cur)
        self.db.set_meta("kw_built_version", version, cur)
        cur.execute("COMMIT")
        for old in (state.base, state.delta):
            if old and old not in (name, delta):
                self._drop(old)
        # fts DDL left only in the write-ahead log has made databases unopenable elsewhere.
        self._checkpoint_pending = not self.db.try_checkpoint()

    def _rebuild_base(self, state: KeywordState) -> None:
        cur = self.db.cursor()
        version = self.db.get_meta("content_version", "0") or "0"
        name = BASE_NAMES[1] if state.base == BASE_NAMES[0] else BASE_NAMES[0]
        watermark = int(cur.execute("SELECT coalesce(max(id), 0) FROM chunks").fetchone()[0])
        self._build(name, "id <= ?", [watermark])
        cur.execute("BEGIN TRANSACTION")
        self.db.set_meta("kw_base", name if self._has_rows(name) else "", cur)
        self.db.set_meta("kw_delta", "", cur)
        self.db.set_meta("kw_watermark", str(watermark), cur)
        self.db.set_meta("kw_built_version", version, cur)
        cur.execute("COMMIT")
        for old in (state.base, state.delta):
            if old and old != name:
                self._drop(old)
        # fts DDL left only in the write-ahead log has made databases unopenable elsewhere.
        self._checkpoint_pending = not self.db.try_checkpoint()

    def _rebuild_delta(self, state: KeywordState) -> None:
        cur = self.db.cursor()
        version = self.db.get_meta("content_version", "0") or "0"
        name = DELTA_NAMES[1] if state.delta == DELTA_NAMES[0] else DELTA_NAMES[0]
        self._build(name, "id > ?", [state.watermark])
        cur.execute("BEGIN TRANSACTION")
        self.db.set_meta("kw_delta", name if self._has_rows(name) else "", cur)
        self.db.set_meta("kw_built_version", version, cur)
        cur.execute("COMMIT")
        if state.delta and state.delta != name:
            self._drop(state.delta)

    def _build(self, name: str, where: str, params: list[object]) -> None:
        cur = self.db.cursor()
        self._drop(name)
        cur.execute(
            f"CREATE TABLE {name} AS SELECT id AS chunk_id, "
            f"coalesce(context, '') || chr(10) || text AS body FROM chunks WHERE {where}",
            params,
        )
        if self._has_rows(name):
            cur.execute(
                f"PRAGMA create_fts_index('{name}', 'chunk_id', 'body', stemmer='porter', "
                f"stopwords='english', ignore='{IGNORE_PATTERN}', strip_accents=1, lower=1, "
                "overwrite=1)"
            )

    def _has_rows(self, name: str) -> bool:
        return bool(self.db.cursor().execute(f"SELECT count(*) FROM {name}").fetchone()[0])

    def _drop(self, name: str) -> None:
        cur = self.db.cursor()
        exists = cur.execute(
            "SELECT count(*) FROM information_schema.schemata WHERE schema_name = ?",
            [_schema(name)],
        ).fetchone()[0]
        if exists:
            cur.execute(f"PRAGMA drop_fts_index('{name}')")
        cur.execute(f"DROP TABLE IF EXISTS {name}")

    # --- query ------------------------------------------------------------------

    def search(
        self,
        query: str,
        limit: int,
        *,
        filter_sql: str = "",
        filter_params: list[object] | None = None,
        _retries: int = 2,
    ) -> list[tuple[int, float]]:
        """Chunk ids and BM25 scores, best first. ``filter_sql`` is a condition on
        ``c`` (chunks) and ``d`` (documents)."""
        state = self.state()
        parts = [t for t in (state.base, state.delta) if t]
        if not parts or not query.strip():
            return []
        tokenizer = _schema(parts[0])
        hits_sql = []
        df_sql = []
        stats_sql = []
        for table in parts:
            s = _schema(table)
            hits_sql.append(
                f"""SELECT docs.name AS chunk_id, docs.len AS len, d.term AS term, count(*) AS tf
                    FROM {s}.dict d JOIN q ON d.term = q.t
                    JOIN {s}.terms tm ON tm.termid = d.termid
                    JOIN {s}.docs docs ON docs.docid = tm.docid
                    GROUP BY ALL"""
            )
            df_sql.append(f"SELECT term, df FROM {s}.dict WHERE term IN (SELECT t FROM q)")
            stats_sql.append(f"SELECT num_docs, avgdl FROM {s}.stats")
        sql = f"""
            WITH q AS (
                SELECT DISTINCT stem(unnest({tokenizer}.tokenize(?)), 'porter') AS t
            ),
            hits AS ({" UNION ALL ".join(hits_sql)}),
            dfs AS (SELECT term, sum(df) AS df FROM ({" UNION ALL ".join(df_sql)}) GROUP BY term),
            stats AS (
                SELECT sum(num_docs) AS n, sum(avgdl * num_docs) / sum(num_docs) AS avgdl
                FROM ({" UNION ALL ".join(stats_sql)})
            ),
            scored AS (
                SELECT hits.chunk_id,
                       sum(ln((stats.n - dfs.df + 0.5) / (dfs.df + 0.5) + 1)
                           * (hits.tf * ({BM25_K1} + 1))
                           / (hits.tf + {BM25_K1} * (1 - {BM25_B} + {BM25_B} * hits.len / stats.avgdl))
                       ) AS score
                FROM hits JOIN dfs ON dfs.term = hits.term CROSS JOIN stats
                GROUP BY hits.chunk_id
            )
            SELECT s.chunk_id, s.score
            FROM scored s
            JOIN chunks c ON c.id = s.chunk_id
            JOIN documents d ON d.id = c.document_id
            WHERE d.state = 'indexed' {("AND " + filter_sql) if filter_sql else ""}
            ORDER BY s.score DESC, s.chunk_id
            LIMIT {int(limit)}
        """
        try:
            rows = self.db.cursor().execute(sql, [query, *(filter_params or [])]).fetchall()
        except duckdb.CatalogException:
            # A concurrent merge swapped the snapshot between reading the state and the
            # query; the next attempt sees the new one.
            if _retries <= 0:
                raise
            return self.search(
                query,
                limit,
                filter_sql=filter_sql,
                filter_params=filter_params,
                _retries=_retries - 1,
            )
        return [(int(r[0]), float(r[1])) for r in rows]
