"""BM25 keyword search over chunks with DuckDB's ``fts`` extension, updated incrementally.

The keyword index is derived data and lives in a DuckDB file of its own
(``keyword.duckdb``), attached to the library's connection as ``kw``. ``PRAGMA
create_fts_index`` is DDL (schemas, tables, macros); killed while such DDL sat in the
write-ahead log, DuckDB has failed every later open of the file with "Cannot drop entry
... because there are entries that depend on it". In a file of its own, that costs a
rebuild of the keyword index, never the library: a keyword file that will not open is
set aside and rebuilt in the background while search carries on with meaning search.
The library's database never holds fts DDL.

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
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import duckdb

from core.errors import DiskFullError, IndexBusyError, StoreError
from core.records import SearchFilters
from core.store.db import Database, scalar, set_aside
from core.store.lookup import filter_clause

log = logging.getLogger(__name__)

ALIAS = "kw"

BASE_NAMES = ("kw_base_a", "kw_base_b")
DELTA_NAMES = ("kw_delta_a", "kw_delta_b")
# Digits are kept (the fts default drops them): error codes, figures and identifiers are
# exactly what people search by keyword. Letters are any script's (the default keeps only
# a-z, so Russian, Greek, Arabic or CJK text was not keyword-searchable at all). A change
# here needs a rebuilt keyword index: it goes with CHUNKER_VERSION in core/chunking.py.
IGNORE_PATTERN = r"(\\.|[^\p{L}\p{N}])+"
MERGE_FRACTION = 0.10
MERGE_MIN_CHUNKS = 2_000
# Chosen on SciFact *train* (bench: a grid over k1 in 0.7-1.5 and b in 0.4-0.75):
# 0.9/0.4 and 0.7/0.5 tied best for hybrid (nDCG@10 0.7435 against 0.7409 for the
# textbook 1.2/0.75); 0.9/0.4 is also Anserini's setting for BEIR, so the less tuned of
# the two. Short passages (abstracts, chunks) want little length normalisation.
BM25_K1 = 0.9
BM25_B = 0.4


@dataclass(frozen=True)
class KeywordState:
    base: str | None
    delta: str | None
    watermark: int


def _schema(table: str) -> str:
    return f"{ALIAS}.fts_main_{table}"


class KeywordIndex:
    """``path`` None keeps the index in memory (a library in memory, in tests)."""

    def __init__(self, db: Database, path: Path | None = None) -> None:
        self.db = db
        self.path = path
        self._checkpoint_pending = False
        self._merge_thread: threading.Thread | None = None
        self._merge_cursor: duckdb.DuckDBPyConnection | None = None
        self._closing = False
        # What happened to the file at open ("" when it opened as it was), and the name
        # it was kept under when it had to be set aside.
        self.recovery = ""
        self.kept_at: Path | None = None
        self._attach()

    def _attach(self) -> None:
        target = self.path if self.path is not None else Path(":memory:")
        try:
            self.db.attach(target, ALIAS)
            self._ensure_meta()
            return
        except (StoreError, duckdb.Error) as exc:
            if self.path is None or isinstance(exc, (IndexBusyError, DiskFullError)):
                raise
            log.warning("keyword index %s unusable (%s); rebuilding it", self.path, exc)
            self.db.detach(ALIAS)
        self.kept_at = set_aside(self.path, "broken")
        self.recovery = "rebuilding"
        self.db.attach(self.path, ALIAS)
        self._ensure_meta()

    def _ensure_meta(self) -> None:
        self.db.cursor().execute(
            f"CREATE TABLE IF NOT EXISTS {ALIAS}.kw_meta(key VARCHAR PRIMARY KEY, value VARCHAR)"
        )

    def _get(self, key: str, default: str | None = None) -> str | None:
        row = (
            self.db.cursor()
            .execute(f"SELECT value FROM {ALIAS}.kw_meta WHERE key = ?", [key])
            .fetchone()
        )
        return row[0] if row else default

    def _set(self, cur: duckdb.DuckDBPyConnection, values: dict[str, str]) -> None:
        """One transaction in the keyword file (DuckDB lets a transaction write to one
        attached database only)."""
        cur.execute("BEGIN TRANSACTION")
        try:
            for key, value in values.items():
                cur.execute(
                    f"INSERT OR REPLACE INTO {ALIAS}.kw_meta(key, value) VALUES (?, ?)",
                    [key, value],
                )
            cur.execute("COMMIT")
        except BaseException:
            try:
                cur.execute("ROLLBACK")
            except duckdb.Error:
                pass
            raise

    @contextmanager
    def _kw_cursor(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """A cursor whose default catalog is the keyword file: ``create_fts_index`` puts
        its schema beside the table it indexes, in the current catalog."""
        cur = self.db.new_cursor()
        try:
            cur.execute(f"USE {ALIAS}")
            yield cur
        finally:
            cur.close()

    def checkpoint(self) -> bool:
        try:
            with self.db.write_lock:
                self.db.cursor().execute(f"CHECKPOINT {ALIAS}")
        except duckdb.Error:
            return False
        return True

    def status(self) -> str:
        """What a person is told about keyword search: ready, rebuilding or updating.
        ``recovery`` stays set until a rebuilt base is switched in."""
        if self.recovery:
            return "rebuilding"
        return "ready" if self.is_current() else "updating"

    # --- state ------------------------------------------------------------------

    def state(self) -> KeywordState:
        return KeywordState(
            base=self._get("kw_base") or None,
            delta=self._get("kw_delta") or None,
            watermark=int(self._get("kw_watermark", "0") or 0),
        )

    def is_current(self) -> bool:
        """True when the delta was built after the last chunk change."""
        return self._get("kw_built_version") == self.db.get_meta("content_version", "0")

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
        self.checkpoint()

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
                self._checkpoint_pending = not self.checkpoint()
            state = self.state()
            cur = self.db.cursor()
            total = int(scalar(cur, "SELECT count(*) FROM chunks"))
            delta = self.delta_size()
            due = (
                force_merge
                or state.base is None
                or delta > max(MERGE_MIN_CHUNKS, MERGE_FRACTION * total)
            )
            # A keyword file rebuilt after damage starts empty: the whole library goes
            # into the background rebuild, and the delta covers what is newer.
            if due and background and (state.base is not None or self.recovery):
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
        watermark = int(scalar(cur, "SELECT coalesce(max(id), 0) FROM chunks"))
        name = BASE_NAMES[1] if state.base == BASE_NAMES[0] else BASE_NAMES[0]
        self._merge_thread = threading.Thread(
            target=self._merge, args=(name, watermark), daemon=True, name="lectern-kw-merge"
        )
        self._merge_thread.start()

    def _merge(self, name: str, watermark: int) -> None:
        try:
            with self._kw_cursor() as cur:
                self._merge_cursor = cur
                # The long part, without the write lock: a new table nobody reads yet.
                self._build(cur, name, "id <= ?", [watermark])
                with self.db.write_lock:
                    if self._closing:
                        self._drop(cur, name)
                        return
                    self._switch_base(cur, self.state(), name, watermark)
        except duckdb.Error as exc:
            if not self._closing:
                log.warning("keyword index rebuild failed (%s); the next refresh retries", exc)
            try:
                with self.db.write_lock, self._kw_cursor() as cur:
                    if self.state().base != name:
                        self._drop(cur, name)
            except duckdb.Error:
                pass
        finally:
            self._merge_cursor = None

    def _switch_base(
        self, cur: duckdb.DuckDBPyConnection, state: KeywordState, name: str, watermark: int
    ) -> None:
        """Make ``name`` (chunks up to ``watermark``) the base, with a delta of the rest.
        Called under the write lock."""
        version = self.db.get_meta("content_version", "0") or "0"
        delta = DELTA_NAMES[1] if state.delta == DELTA_NAMES[0] else DELTA_NAMES[0]
        self._build(cur, delta, "id > ?", [watermark])
        self._set(
            cur,
            {
                "kw_base": name if self._has_rows(cur, name) else "",
                "kw_delta": delta if self._has_rows(cur, delta) else "",
                "kw_watermark": str(watermark),
                "kw_built_version": version,
            },
        )
        for old in (state.base, state.delta):
            if old and old not in (name, delta):
                self._drop(cur, old)
        self.recovery = ""
        # A short log opens fast; losing it would only cost a rebuild.
        self._checkpoint_pending = not self.checkpoint()

    def _rebuild_base(self, state: KeywordState) -> None:
        with self._kw_cursor() as cur:
            version = self.db.get_meta("content_version", "0") or "0"
            name = BASE_NAMES[1] if state.base == BASE_NAMES[0] else BASE_NAMES[0]
            watermark = int(scalar(self.db.cursor(), "SELECT coalesce(max(id), 0) FROM chunks"))
            self._build(cur, name, "id <= ?", [watermark])
            self._set(
                cur,
                {
                    "kw_base": name if self._has_rows(cur, name) else "",
                    "kw_delta": "",
                    "kw_watermark": str(watermark),
                    "kw_built_version": version,
                },
            )
            for old in (state.base, state.delta):
                if old and old != name:
                    self._drop(cur, old)
        self.recovery = ""
        self._checkpoint_pending = not self.checkpoint()

    def _rebuild_delta(self, state: KeywordState) -> None:
        with self._kw_cursor() as cur:
            version = self.db.get_meta("content_version", "0") or "0"
            name = DELTA_NAMES[1] if state.delta == DELTA_NAMES[0] else DELTA_NAMES[0]
            self._build(cur, name, "id > ?", [state.watermark])
            self._set(
                cur,
                {
                    "kw_delta": name if self._has_rows(cur, name) else "",
                    "kw_built_version": version,
                },
            )
            if state.delta and state.delta != name:
                self._drop(cur, state.delta)

    def _build(
        self, cur: duckdb.DuckDBPyConnection, name: str, where: str, params: list[object]
    ) -> None:
        self._drop(cur, name)
        cur.execute(
            f"CREATE TABLE {name} AS SELECT id AS chunk_id, "
            f"coalesce(context, '') || chr(10) || text AS body "
            f'FROM "{self.db.catalog}".main.chunks WHERE {where}',
            params,
        )
        if self._has_rows(cur, name):
            cur.execute(
                f"PRAGMA create_fts_index('{name}', 'chunk_id', 'body', stemmer='porter', "
                f"stopwords='english', ignore='{IGNORE_PATTERN}', strip_accents=1, lower=1, "
                "overwrite=1)"
            )

    @staticmethod
    def _has_rows(cur: duckdb.DuckDBPyConnection, name: str) -> bool:
        return bool(scalar(cur, f"SELECT count(*) FROM {name}"))

    @staticmethod
    def _drop(cur: duckdb.DuckDBPyConnection, name: str) -> None:
        exists = scalar(
            cur,
            "SELECT count(*) FROM information_schema.schemata "
            "WHERE catalog_name = ? AND schema_name = ?",
            [ALIAS, f"fts_main_{name}"],
        )
        if exists:
            cur.execute(f"PRAGMA drop_fts_index('{name}')")
        cur.execute(f"DROP TABLE IF EXISTS {name}")

    # --- query ------------------------------------------------------------------

    def search(
        self,
        query: str,
        limit: int,
        *,
        filters: SearchFilters | None = None,
        _retries: int = 2,
    ) -> list[tuple[int, float]]:
        """Chunk ids and BM25 scores, best first, inside ``filters``."""
        filter_sql, filter_params = filter_clause(filters or SearchFilters())
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
            rows = self.db.cursor().execute(sql, [query, *filter_params]).fetchall()
        except duckdb.CatalogException:
            # A concurrent merge swapped the snapshot between reading the state and the
            # query; the next attempt sees the new one.
            if _retries <= 0:
                raise
            return self.search(query, limit, filters=filters, _retries=_retries - 1)
        return [(int(r[0]), float(r[1])) for r in rows]
