"""Keyword upkeep: the keyword file, its snapshots, and keeping them up to date with
``chunks``.

The keyword index is derived data and lives in a DuckDB file of its own
(``keyword.duckdb``), attached to the library's connection as ``kw``. ``PRAGMA
create_fts_index`` is DDL (schemas, tables, macros); killed while such DDL sat in the
write-ahead log, DuckDB has failed every later open of the file with "Cannot drop entry
... because there are entries that depend on it". In a file of its own, that costs a
rebuild of the keyword index, never the library: a keyword file that will not open is
set aside and rebuilt in the background while search carries on with meaning search.
The library's database never holds fts DDL.

``PRAGMA create_fts_index`` indexes a whole table at once (~9 s per 100k chunks here), so
a one-file change cannot pay for a rebuild. The keyword index is therefore three fts
indexes over snapshot tables:

- the *base*: every chunk with ``id <= watermark`` at the time it was built, rebuilt
  rarely (when the delta grows past a fraction of it);
- the *delta*: chunks with ``id > watermark``, up to ``delta_watermark``;
- the *fresh* one: the chunks newer than that, all a refresh rebuilds, folded into the
  delta once it is as large (``FRESH_MIN_FOLD``).

A rebuild of any of them reads only the chunks newer than the snapshot it replaces and
carries that snapshot's postings over (``_build_merged``); only a keyword file rebuilt
after damage or an upgrade reads every passage again.

Chunk ids only grow, so "newer than the watermark" is exactly "not in the base". Deleted
chunks need no tombstone table: every query joins with the live ``chunks`` table, which
drops them (scoring.py).

Each snapshot alternates between two table names so that a rebuild never drops the index
a concurrent reader is using; the switch is one metadata write.

A base rebuild takes seconds on a large library (~9 s per 100k chunks), so while indexing
it runs on its own thread (``refresh(background=True)``) without the write lock: it only
creates new tables, readers and the indexer carry on with the old base and a growing
delta, and the write lock is taken only for the switch (with a fresh delta of the chunks
newer than the new base).

Beside its fts ``dict``/``docs``/``stats``, each snapshot keeps a postings table with one
row per term (the documents holding it and their term frequencies, packed as
little-endian arrays), which is all a query reads (scoring.py). Once the postings are
derived, ``terms`` and the snapshot's copy of the text are dropped: the file holds the
dictionary, document lengths and postings only.
"""

from __future__ import annotations

import base64
import logging
import os
import tempfile
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import duckdb
import numpy as np

from core.errors import (
    DiskFullError,
    IndexBusyError,
    LibraryAccessError,
    ReadOnlyLibraryError,
    StoreError,
)
from core.private import scratch_file
from core.store.db import Database, classify_open_error, scalar, set_aside
from core.store.keyword.tokens import fts_pragma, snapshot_rows_sql

log = logging.getLogger(__name__)

ALIAS = "kw"

BASE_NAMES = ("kw_base_a", "kw_base_b")
DELTA_NAMES = ("kw_delta_a", "kw_delta_b")
FRESH_NAMES = ("kw_fresh_a", "kw_fresh_b")
MERGE_FRACTION = 0.10
MERGE_MIN_CHUNKS = 2_000
# The delta's newest chunks sit in a third snapshot, the *fresh* one, which is all a
# refresh rebuilds; it is folded into the delta once it holds as many chunks as the
# delta (or FRESH_MIN_FOLD, when the delta is smaller). So a refresh costs in proportion
# to the chunks written since the last fold, not to the whole delta (which grows to 10 %
# of the library: a 30,300-chunk delta took 10.4 s of CPU a refresh, the fresh snapshot
# 0.13 s, bench/keyword_refresh.py). Each fold at least doubles the delta, so between
# merges a chunk takes part in a few folds, not in every refresh.
FRESH_MIN_FOLD = 500
# The snapshot of the chunks newer than the one a rebuild carries over is built beside the
# new snapshot under its name and this suffix (``_build_merged``).
MERGE_ADDED_SUFFIX = "_new"
# The layout of a snapshot (fts dict/docs/stats plus packed postings, no ``terms``, words
# of SCRIPT_STEMMERS' scripts and LANGUAGE_MARKERS' languages stemmed, the languages it
# holds, Chinese and Japanese characters one term each). A keyword file written in
# another layout is rebuilt in the background at open.
FORMAT = "postings-5"
# Postings are derived from fts's ``terms`` in termid ranges of about this many rows, so
# a rebuild holds tens of megabytes, not the whole index, in memory. A base rebuild at
# 300k chunks (library open with its vectors and the model) peaked at 1,438 MB with 2M
# rows a range and 1,319 MB with 500k, in the same time (bench/scale.py --child merge).
POSTINGS_BATCH_ROWS = 500_000


def warm_page_cache(path: Path) -> threading.Thread:
    """Ask the OS to read the keyword file into its page cache, on a thread of its own.

    After a reboot (or once the OS has evicted the file), each of the first few dozen
    queries reads its terms' postings from disk: BM25 p95 234-312 ms over the first 200
    queries at 300k chunks, against 27 ms warm. The file holds only the dictionary,
    lengths and postings (146 MB live at 300k), so reading ahead all of it costs one
    sequential read the kernel does in the background, and pages it can drop again."""

    def read_ahead() -> None:
        try:
            with open(path, "rb") as handle:
                advise = getattr(os, "posix_fadvise", None)
                if advise is not None:
                    advise(handle.fileno(), 0, 0, os.POSIX_FADV_WILLNEED)
                else:  # no fadvise (macOS, Windows): read it through once
                    while handle.read(1 << 20):
                        pass
        except OSError:
            pass  # only a warm-up: the queries read what they need anyway

    thread = threading.Thread(target=read_ahead, daemon=True, name="lectern-kw-warm")
    thread.start()
    return thread


@dataclass(frozen=True)
class KeywordState:
    base: str | None
    delta: str | None
    watermark: int
    # Unique per build: a snapshot name is reused every other rebuild, so cached
    # per-snapshot arrays are keyed by this.
    base_stamp: str = ""
    delta_stamp: str = ""
    # The delta holds chunks up to delta_watermark, the fresh snapshot the newer ones;
    # -1: not known (a file from before the fresh snapshot), so the next refresh
    # rebuilds the whole delta.
    fresh: str | None = None
    fresh_stamp: str = ""
    delta_watermark: int = -1

    def parts(self) -> list[tuple[str, str]]:
        """(snapshot, stamp) of each snapshot that holds chunks, oldest first."""
        return [
            (name, stamp)
            for name, stamp in (
                (self.base, self.base_stamp),
                (self.delta, self.delta_stamp),
                (self.fresh, self.fresh_stamp),
            )
            if name
        ]


def _termid_batches(termids: object, dfs: object) -> list[tuple[int, int]]:
    """Inclusive termid ranges of about POSTINGS_BATCH_ROWS postings each (a term's df is
    its postings count), in termid order."""
    ids = np.asarray(termids, dtype=np.int64)
    if not len(ids):
        return []
    batch_of = np.cumsum(np.asarray(dfs, dtype=np.int64)) // POSTINGS_BATCH_ROWS
    cuts = np.flatnonzero(np.diff(batch_of)) + 1
    return [
        (int(ids[lo]), int(ids[hi - 1]))
        for lo, hi in zip(
            np.concatenate([[0], cuts]).tolist(),
            np.concatenate([cuts, [len(ids)]]).tolist(),
            strict=True,
        )
    ]


def _renumbered(docs: dict[str, object], first: int) -> tuple[np.ndarray, ...]:
    """A snapshot's documents (docid order, with a ``live`` flag) numbered from ``first``,
    live ones only: the map from its docids to the new ones (-1 for a dead document), and
    the live documents' chunk ids and lengths."""
    docid = np.asarray(docs["docid"], dtype=np.int64)
    live = np.asarray(docs["live"], dtype=bool)
    doc_of = np.full(int(docid.max()) + 1 if len(docid) else 0, -1, dtype=np.int64)
    doc_of[docid[live]] = first + np.arange(int(live.sum()))
    names = np.asarray(docs["name"], dtype=np.int64)[live]
    return doc_of, names, np.asarray(docs["len"], dtype=np.int64)[live]


def _decoded(rows: dict[str, object], doc_of: np.ndarray) -> tuple[np.ndarray, ...]:
    """(term, doc, tf) entries of postings rows, each doc renumbered through ``doc_of``;
    entries of documents it maps to -1 (no longer live) are left out."""
    termids = np.asarray(rows["termid"], dtype=np.int64)
    doc_blobs = list(rows["docids"])  # type: ignore[call-overload]
    tf_blobs = list(rows["tfs"])  # type: ignore[call-overload]
    if not doc_blobs:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty, empty
    counts = np.fromiter((len(b) // 4 for b in doc_blobs), dtype=np.int64, count=len(doc_blobs))
    doc = doc_of[np.frombuffer(b"".join(doc_blobs), dtype="<u4").astype(np.int64)]
    tf = np.concatenate(
        [
            np.frombuffer(t, dtype="<u1" if len(t) == n else "<u2")
            for t, n in zip(tf_blobs, counts.tolist(), strict=True)
        ]
    ).astype(np.int64)
    term = np.repeat(termids, counts)
    live = doc >= 0
    return term[live], doc[live], tf[live]


class KeywordUpkeep:
    """The keyword file attached to ``db``, its snapshots' state and their rebuilds.
    ``path`` None keeps the index in memory (a library in memory, in tests)."""

    def __init__(self, db: Database, path: Path | None = None, *, stale: bool = False) -> None:
        """``stale``: the file was built from a database that is gone (see _check_format)."""
        self.db = db
        self.path = path
        self._stale = stale
        self._checkpoint_pending = False
        self._merge_thread: threading.Thread | None = None
        self._merge_cursor: duckdb.DuckDBPyConnection | None = None
        self._closing = False
        # What happened to the file at open ("" when it opened as it was), and the name
        # it was kept under when it had to be set aside.
        self.recovery = ""
        self.kept_at: Path | None = None
        self._state_lock = threading.Lock()
        # kw_meta is written only through _set (this process owns the file), so the state
        # is read once per change, not once per query.
        self._state: KeywordState | None = None
        self._meta_changes = 0
        self._attach()
        if self.path is not None and self.recovery != "unavailable":
            warm_page_cache(self.path)

    def _attach(self) -> None:
        """Attach the keyword file and check its format; a file that fails anywhere in
        that (will not attach, is cut short, cannot be read or written) is derived data:
        it is set aside and rebuilt in the background, and never stops the library
        opening. Only what is not damage stops it: another process, a full disk, a
        file that may not be opened (named, left as it is)."""
        if self.path is None:
            self.db.attach(Path(":memory:"), ALIAS)
            self._ensure_meta()
            self._check_format()
            return
        if self.db.read_only:
            self._attach_read_only(self.path)
            return
        try:
            self.db.attach(self.path, ALIAS)
            self._ensure_meta()
            self._check_format()
        except (StoreError, duckdb.Error) as exc:
            error = classify_open_error(self.path, exc)
            self.db.detach(ALIAS)
            self._state = None
            if isinstance(
                error, (IndexBusyError, DiskFullError, ReadOnlyLibraryError, LibraryAccessError)
            ):
                if error is exc:
                    raise
                raise error from exc
            log.warning("keyword index %s unusable (%s); rebuilding it", self.path, exc)
            self.kept_at = set_aside(self.path, "broken")
            self.recovery = "rebuilding"
            self.db.attach(self.path, ALIAS)
            self._ensure_meta()
            self._check_format()
        self._remove_orphans(self.path.parent)

    def _attach_read_only(self, path: Path) -> None:
        """In a library opened read-only the keyword file is used as it is; one that is
        missing, damaged or of another format cannot be rebuilt there, so keyword search
        is off (``recovery`` "unavailable") and search finds passages by meaning."""
        try:
            if not path.exists():
                raise FileNotFoundError(str(path))
            self.db.attach(path, ALIAS, read_only=True)
            if self._get("kw_format") == FORMAT:
                return
            why = "an earlier format"
        except (IndexBusyError, LibraryAccessError):
            raise
        except (StoreError, duckdb.Error, OSError) as exc:
            why = str(exc)
        self.db.detach(ALIAS)
        log.warning("keyword index %s not usable in a read-only folder (%s)", path, why)
        self.recovery = "unavailable"
        self.db.attach(Path(":memory:"), ALIAS)
        self._ensure_meta()
        self._check_format()

    @staticmethod
    def _remove_orphans(folder: Path) -> None:
        """Postings scratch files (``_scratch``) left by a process killed while writing
        one: nobody else writes them (this process holds the library), so any found at
        open are orphans."""
        for orphan in folder.glob(".kw_*-postings-*.csv"):
            try:
                orphan.unlink()
            except OSError as exc:
                log.warning("left-over %s not removed: %s", orphan, exc)

    def _ensure_meta(self) -> None:
        self.db.cursor().execute(
            f"CREATE TABLE IF NOT EXISTS {ALIAS}.kw_meta(key VARCHAR PRIMARY KEY, value VARCHAR)"
        )

    def _check_format(self) -> None:
        """A keyword file from before the postings layout is emptied and rebuilt in the
        background (``recovery``); meanwhile search finds passages by meaning. So is one
        made from another database (``stale``): the library's database was rebuilt after
        damage, and its chunk ids start again, so the file's ids name other passages."""
        if self._get("kw_format") == FORMAT and not self._stale:
            return
        state = self.state()
        with self.db.write_lock, self._kw_cursor() as cur:
            for name in (*BASE_NAMES, *DELTA_NAMES, *FRESH_NAMES):
                self._drop(cur, name)
            self._set(
                cur,
                {
                    "kw_base": "",
                    "kw_delta": "",
                    "kw_fresh": "",
                    "kw_delta_watermark": "-1",
                    "kw_watermark": "0",
                    "kw_built_version": "",
                    "kw_format": FORMAT,
                },
            )
        if state.base or state.delta:
            self.recovery = self.recovery or "upgrading"

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
        finally:
            with self._state_lock:
                self._meta_changes += 1
                self._state = None

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
        if self.recovery == "unavailable":
            return "unavailable"  # a read-only library whose keyword file is unusable
        if self.recovery:
            return "rebuilding"
        return "ready" if self.is_current() else "updating"

    # --- state ------------------------------------------------------------------

    def state(self) -> KeywordState:
        """Read in one query, so a concurrent switch is seen whole or not at all; kept
        until the next change unless a change landed while it was being read."""
        cached = self._state
        if cached is not None:
            return cached
        changes = self._meta_changes
        state = self._read_state()
        with self._state_lock:
            if self._meta_changes == changes:
                self._state = state
        return state

    def _read_state(self) -> KeywordState:
        rows = dict(
            self.db.cursor()
            .execute(
                f"SELECT key, value FROM {ALIAS}.kw_meta WHERE key IN "
                "('kw_base', 'kw_delta', 'kw_watermark', 'kw_base_stamp', 'kw_delta_stamp', "
                "'kw_fresh', 'kw_fresh_stamp', 'kw_delta_watermark')"
            )
            .fetchall()
        )
        return KeywordState(
            base=rows.get("kw_base") or None,
            delta=rows.get("kw_delta") or None,
            watermark=int(rows.get("kw_watermark") or 0),
            base_stamp=rows.get("kw_base_stamp") or "",
            delta_stamp=rows.get("kw_delta_stamp") or "",
            fresh=rows.get("kw_fresh") or None,
            fresh_stamp=rows.get("kw_fresh_stamp") or "",
            delta_watermark=int(rows.get("kw_delta_watermark") or -1),
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
                    self._refresh_delta(state)
                return "merging"
            if due:
                self._rebuild_base(state)
                return "merged"
            if not self.is_current():
                self._refresh_delta(state)
                return "delta"
            return "current"

    def _start_merge(self, state: KeywordState) -> None:
        """Called under the write lock, so no write is in flight: every chunk id up to
        the watermark is committed and the new base sees them all."""
        watermark = self._newest_chunk()
        name = BASE_NAMES[1] if state.base == BASE_NAMES[0] else BASE_NAMES[0]
        self._merge_thread = threading.Thread(
            target=self._merge,
            args=(name, watermark, state.base, state.watermark),
            daemon=True,
            name="lectern-kw-merge",
        )
        self._merge_thread.start()

    def _merge(self, name: str, watermark: int, old: str | None, old_watermark: int) -> None:
        try:
            with self._kw_cursor() as cur:
                self._merge_cursor = cur
                # The long part, without the write lock: a new table nobody reads yet.
                # Only this thread replaces or drops the base it carries over meanwhile.
                self._build_base(cur, name, watermark, old, old_watermark)
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
        newest = self._newest_chunk()
        self._build(cur, delta, "id > ?", [watermark])
        self._set(
            cur,
            {
                "kw_base": name if self._has_rows(cur, name) else "",
                "kw_delta": delta if self._has_rows(cur, delta) else "",
                "kw_fresh": "",
                "kw_watermark": str(watermark),
                "kw_delta_watermark": str(newest),
                "kw_built_version": version,
                "kw_base_stamp": _stamp(name),
                "kw_delta_stamp": _stamp(delta),
            },
        )
        for old in (state.base, state.delta, state.fresh):
            if old and old not in (name, delta):
                self._drop(cur, old)
        self.recovery = ""
        # A short log opens fast; losing it would only cost a rebuild.
        self._checkpoint_pending = not self.checkpoint()

    def _rebuild_base(self, state: KeywordState) -> None:
        with self._kw_cursor() as cur:
            version = self.db.get_meta("content_version", "0") or "0"
            name = BASE_NAMES[1] if state.base == BASE_NAMES[0] else BASE_NAMES[0]
            watermark = self._newest_chunk()
            self._build_base(cur, name, watermark, state.base, state.watermark)
            self._set(
                cur,
                {
                    "kw_base": name if self._has_rows(cur, name) else "",
                    "kw_delta": "",
                    "kw_fresh": "",
                    "kw_watermark": str(watermark),
                    "kw_delta_watermark": str(watermark),
                    "kw_built_version": version,
                    "kw_base_stamp": _stamp(name),
                    "kw_delta_stamp": "",
                },
            )
            for old in (state.base, state.delta, state.fresh):
                if old and old != name:
                    self._drop(cur, old)
        self.recovery = ""
        self._checkpoint_pending = not self.checkpoint()

    def _build_base(
        self,
        cur: duckdb.DuckDBPyConnection,
        name: str,
        watermark: int,
        old: str | None,
        old_watermark: int,
    ) -> None:
        """A base of every chunk up to ``watermark``: the old base carried over with the
        chunks newer than it, or, without one to trust, every chunk read again."""
        if self._carries(cur, old):
            assert old is not None
            self._build_merged(cur, name, old, "id > ? AND id <= ?", [old_watermark, watermark])
        else:
            self._build(cur, name, "id <= ?", [watermark])

    def _newest_chunk(self) -> int:
        """The highest chunk id written (called under the write lock: none is in flight)."""
        return int(scalar(self.db.cursor(), "SELECT coalesce(max(id), 0) FROM chunks"))

    def _refresh_delta(self, state: KeywordState) -> None:
        """Make every chunk newer than the base searchable: rebuild only the fresh
        snapshot, or fold it into the delta once it has grown as large (see
        FRESH_MIN_FOLD). Called under the write lock."""
        cur = self.db.cursor()
        if state.delta_watermark >= state.watermark:
            row = cur.execute(
                "SELECT count(*) FILTER (WHERE id > ?), count(*) FILTER (WHERE id <= ?) "
                "FROM chunks WHERE id > ?",
                [state.delta_watermark, state.delta_watermark, state.watermark],
            ).fetchone()
            fresh, older = (int(row[0]), int(row[1])) if row else (0, 0)
            if fresh < max(FRESH_MIN_FOLD, older):
                self._rebuild_fresh(state)
                return
        self._rebuild_delta(state)

    def _rebuild_fresh(self, state: KeywordState) -> None:
        with self._kw_cursor() as cur:
            version = self.db.get_meta("content_version", "0") or "0"
            name = FRESH_NAMES[1] if state.fresh == FRESH_NAMES[0] else FRESH_NAMES[0]
            if self._carries(cur, state.fresh):
                assert state.fresh is not None
                # Carried over, with the chunks newer than its newest (written since: no
                # write is in flight under the write lock, and chunk ids only grow).
                covered = scalar(cur, f"SELECT max(name) FROM fts_main_{state.fresh}.docs")
                self._build_merged(cur, name, state.fresh, "id > ?", [covered])
            else:
                self._build(cur, name, "id > ?", [state.delta_watermark])
            self._set(
                cur,
                {
                    "kw_fresh": name if self._has_rows(cur, name) else "",
                    "kw_built_version": version,
                    "kw_fresh_stamp": _stamp(name),
                },
            )
            if state.fresh and state.fresh != name:
                self._drop(cur, state.fresh)

    def _rebuild_delta(self, state: KeywordState) -> None:
        """The delta over every chunk newer than the base, the fresh snapshot emptied."""
        with self._kw_cursor() as cur:
            version = self.db.get_meta("content_version", "0") or "0"
            name = DELTA_NAMES[1] if state.delta == DELTA_NAMES[0] else DELTA_NAMES[0]
            newest = self._newest_chunk()
            if state.delta_watermark >= state.watermark and self._carries(cur, state.delta):
                assert state.delta is not None
                # The delta carried over, with what is newer (the fresh snapshot's chunks
                # and any written since).
                self._build_merged(cur, name, state.delta, "id > ?", [state.delta_watermark])
            else:
                self._build(cur, name, "id > ?", [state.watermark])
            self._set(
                cur,
                {
                    "kw_delta": name if self._has_rows(cur, name) else "",
                    "kw_fresh": "",
                    "kw_delta_watermark": str(newest),
                    "kw_built_version": version,
                    "kw_delta_stamp": _stamp(name),
                },
            )
            for old in (state.delta, state.fresh):
                if old and old != name:
                    self._drop(cur, old)

    def _build(
        self, cur: duckdb.DuckDBPyConnection, name: str, where: str, params: list[object]
    ) -> None:
        self._drop(cur, name)
        cur.execute(
            f"CREATE TABLE {name} AS "
            + snapshot_rows_sql(f'"{self.db.catalog}".main.chunks', where),
            params,
        )
        # The languages its passages were stemmed as: a query's words are looked up in
        # each of them too (a German question meets German-stemmed passages).
        cur.execute(
            f"CREATE TABLE {name}_languages AS SELECT DISTINCT lang FROM {name} WHERE lang <> ''"
        )
        if scalar(cur, f"SELECT count(*) FROM {name}"):
            cur.execute(fts_pragma(name))
            self._build_postings(cur, name)
            # Only the postings are read from here on; the token table and the copy of
            # the text are most of the file.
            cur.execute(f"DROP TABLE fts_main_{name}.terms")
        cur.execute(f"DROP TABLE {name}")

    def _build_postings(self, cur: duckdb.DuckDBPyConnection, name: str) -> None:
        """One row per term: its docids (uint32) and term frequencies (uint8, or uint16
        when a frequency passes 255), ascending by docid, in termid order."""
        schema = f"fts_main_{name}"
        self._create_postings(cur, name)
        # df sums to the (term, document) pairs, so cumulative df cuts termid ranges of
        # about POSTINGS_BATCH_ROWS postings each.
        df = cur.execute(f"SELECT termid, df FROM {schema}.dict ORDER BY termid").fetchnumpy()
        for lo, hi in _termid_batches(df["termid"], df["df"]):
            if self._closing:
                raise duckdb.InterruptException("the library is closing")
            rows = cur.execute(
                f"SELECT termid, docid, count(*) AS tf FROM {schema}.terms "
                f"WHERE termid BETWEEN {lo} AND {hi} GROUP BY termid, docid"
            ).fetchnumpy()
            term = np.asarray(rows["termid"], dtype=np.int64)
            doc = np.asarray(rows["docid"], dtype=np.int64)
            tf = np.asarray(rows["tf"], dtype=np.int64)
            order = np.lexsort((doc, term))
            self._write_postings(cur, name, term[order], doc[order], tf[order])

    @staticmethod
    def _create_postings(cur: duckdb.DuckDBPyConnection, name: str) -> None:
        cur.execute(
            f"CREATE TABLE {name}_postings(termid BIGINT PRIMARY KEY, docids BLOB, tfs BLOB)"
        )

    def _write_postings(
        self,
        cur: duckdb.DuckDBPyConnection,
        name: str,
        term: np.ndarray,
        doc: np.ndarray,
        tf: np.ndarray,
    ) -> tuple[np.ndarray, np.ndarray]:
        """Add a row per term to ``{name}_postings`` from (term, doc, tf) entries sorted by
        term, then doc; returns the terms and how many documents hold each."""
        if not len(term):
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
        starts = np.concatenate([[0], np.flatnonzero(np.diff(term)) + 1])
        ends = np.concatenate([starts[1:], [len(term)]])
        docs32 = doc.astype("<u4")
        blob_docs, blob_tfs = [], []
        for a, b in zip(starts.tolist(), ends.tolist(), strict=True):
            blob_docs.append(base64.b64encode(docs32[a:b].tobytes()).decode("ascii"))
            part = tf[a:b]
            packed = part.astype("<u1" if part.max() <= 255 else "<u2").tobytes()
            blob_tfs.append(base64.b64encode(packed).decode("ascii"))
        # Base64 text through a CSV file: DuckDB 1.5 takes Python bytes, lists and
        # object arrays at milliseconds a row (it tries to import pandas per value).
        lines = [
            f"{t},{d},{f}"
            for t, d, f in zip(term[starts].tolist(), blob_docs, blob_tfs, strict=True)
        ]
        scratch = self._scratch(name, "\n".join(lines) + "\n")
        try:
            cur.execute(
                f"INSERT INTO {name}_postings SELECT termid, from_base64(d), from_base64(f) "
                "FROM read_csv(?, header = false, delim = ',', quote = '', escape = '', "
                "columns = {'termid': 'BIGINT', 'd': 'VARCHAR', 'f': 'VARCHAR'}, "
                "max_line_size = ?)",
                [str(scratch), max(len(line) for line in lines) + 1024],
            )
        finally:
            scratch.unlink(missing_ok=True)
        return term[starts], ends - starts

    def _carries(self, cur: duckdb.DuckDBPyConnection, old: str | None) -> bool:
        """Whether a rebuild may carry ``old``'s postings over (``_build_merged``) instead
        of reading its passages again: not while the file is being rebuilt after damage
        or an upgrade, when a snapshot's layout is the one thing not to trust."""
        return old is not None and not self.recovery and self._has_rows(cur, old)

    def _build_merged(
        self,
        cur: duckdb.DuckDBPyConnection,
        name: str,
        old: str,
        where: str,
        params: list[object],
    ) -> None:
        """Build snapshot ``name`` over snapshot ``old``'s chunks still live and the
        chunks matching ``where`` (each newer than any of ``old``'s), reading and
        tokenizing only the latter: ``old``'s postings are carried over, renumbered.

        Reading and tokenizing is most of a build: with a base merge reading the whole
        library again at every 10 % of growth, keeping keyword search current while a
        library grew to 30k chunks cost 2.77 ms of CPU a chunk, against 1.43 carried over
        (bench/keyword_refresh.py --growth; the model takes ~35). Chunks are never edited
        and their ids only grow, so the result is the snapshot a full build gives:
        the same documents, lengths, dictionary, document frequencies and postings."""
        added = name + MERGE_ADDED_SUFFIX
        self._drop(cur, name)
        self._build(cur, added, where, params)
        try:
            self._merge_snapshots(cur, name, old, added if self._has_rows(cur, added) else None)
        finally:
            self._drop(cur, added)

    def _merge_snapshots(
        self, cur: duckdb.DuckDBPyConnection, name: str, old: str, added: str | None
    ) -> None:
        old_schema, schema = f"fts_main_{old}", f"fts_main_{name}"
        chunks = f'"{self.db.catalog}".main.chunks'
        # Documents are numbered old's live ones first, then added's, each in its own
        # order: every term's documents stay ascending once renumbered.
        doc_of_old, old_names, old_lengths = _renumbered(
            cur.execute(
                f"SELECT docid, name, len, name IN (SELECT id FROM {chunks}) AS live "
                f"FROM {old_schema}.docs ORDER BY docid"
            ).fetchnumpy(),
            0,
        )
        names, lengths = [old_names], [old_lengths]
        top_termid = int(scalar(cur, f"SELECT coalesce(max(termid), -1) FROM {old_schema}.dict"))
        doc_of_added = np.zeros(0, dtype=np.int64)
        new_terms = 0
        if added is not None:
            added_schema = f"fts_main_{added}"
            doc_of_added, added_names, added_lengths = _renumbered(
                cur.execute(
                    f"SELECT docid, name, len, true AS live FROM {added_schema}.docs ORDER BY docid"
                ).fetchnumpy(),
                len(old_names),
            )
            names.append(added_names)
            lengths.append(added_lengths)
            # A term old holds keeps its id there; a new one is numbered after old's.
            terms = cur.execute(
                f"SELECT a.termid, coalesce(o.termid, -1) AS kept FROM {added_schema}.dict a "
                f"LEFT JOIN {old_schema}.dict o USING (term) ORDER BY a.termid"
            ).fetchnumpy()
            mapped = np.asarray(terms["kept"], dtype=np.int64).copy()
            unseen = mapped < 0
            new_terms = int(unseen.sum())
            mapped[unseen] = top_termid + 1 + np.arange(new_terms)
            term_map = {  # noqa: F841 - read by DuckDB's replacement scan below
                "old": np.asarray(terms["termid"], dtype=np.int64),
                "new": mapped,
            }
            cur.execute(f"CREATE OR REPLACE TABLE {name}_termmap AS SELECT old, new FROM term_map")
        try:
            cur.execute(f"CREATE SCHEMA {schema}")
            self._create_postings(cur, name)
            df = cur.execute(
                f"SELECT termid, df FROM {old_schema}.dict ORDER BY termid"
            ).fetchnumpy()
            batches = _termid_batches(df["termid"], df["df"])
            if new_terms:  # the last batch takes the terms only added holds
                lo, _ = batches[-1] if batches else (0, 0)
                batches[-1:] = [(lo, top_termid + new_terms)]
            held_terms, held_dfs = [], []
            for lo, hi in batches:
                if self._closing:
                    raise duckdb.InterruptException("the library is closing")
                parts = [
                    _decoded(
                        cur.execute(
                            f"SELECT termid, docids, tfs FROM {old}_postings "
                            f"WHERE termid BETWEEN {lo} AND {hi}"
                        ).fetchnumpy(),
                        doc_of_old,
                    )
                ]
                if added is not None:
                    parts.append(
                        _decoded(
                            cur.execute(
                                f"SELECT m.new AS termid, p.docids, p.tfs FROM {added}_postings p "
                                f"JOIN {name}_termmap m ON m.old = p.termid "
                                f"WHERE m.new BETWEEN {lo} AND {hi}"
                            ).fetchnumpy(),
                            doc_of_added,
                        )
                    )
                term, doc, tf = (np.concatenate([part[i] for part in parts]) for i in range(3))
                # Stable: a term's documents from old come before added's, each ascending.
                order = np.argsort(term, kind="stable")
                held, counts = self._write_postings(cur, name, term[order], doc[order], tf[order])
                held_terms.append(held)
                held_dfs.append(counts)
            merged_dict = {  # noqa: F841 - read by DuckDB's replacement scan below
                "termid": np.concatenate(held_terms) if held_terms else np.zeros(0, np.int64),
                "df": np.concatenate(held_dfs) if held_dfs else np.zeros(0, np.int64),
            }
            spelled = f"SELECT termid, term FROM {old_schema}.dict"
            if added is not None:
                spelled += (
                    f" UNION ALL SELECT m.new, a.term FROM {name}_termmap m "
                    f"JOIN fts_main_{added}.dict a ON a.termid = m.old WHERE m.new > {top_termid}"
                )
            cur.execute(
                f"CREATE TABLE {schema}.dict AS SELECT d.termid, t.term, d.df "
                f"FROM merged_dict d JOIN ({spelled}) t USING (termid)"
            )
            all_names = np.concatenate(names)
            merged_docs = {  # noqa: F841 - read by DuckDB's replacement scan below
                "docid": np.arange(len(all_names), dtype=np.int64),
                "name": all_names,
                "len": np.concatenate(lengths),
            }
            cur.execute(f"CREATE TABLE {schema}.docs AS SELECT docid, name, len FROM merged_docs")
            cur.execute(
                f"CREATE TABLE {schema}.stats AS SELECT count(docid) AS num_docs, "
                f"sum(len) / count(len) AS avgdl FROM {schema}.docs"
            )
            languages = f"SELECT lang FROM {old}_languages"
            if added is not None:
                languages += f" UNION SELECT lang FROM {added}_languages"
            cur.execute(f"CREATE TABLE {name}_languages AS {languages}")
            if not len(all_names):  # nothing live: an empty snapshot, as a build leaves it
                self._drop(cur, name)
                cur.execute(f"CREATE TABLE {name}_languages(lang VARCHAR)")
        except BaseException:
            self._drop(cur, name)
            raise
        finally:
            cur.execute(f"DROP TABLE IF EXISTS {name}_termmap")

    def _scratch(self, name: str, text: str) -> Path:
        """A new private file holding the postings' text (the library's words), under a
        name no one can guess or plant a link at."""
        folder = self.path.parent if self.path is not None else Path(tempfile.gettempdir())
        return scratch_file(folder, f".{name}-postings-", ".csv", text)

    @staticmethod
    def _has_rows(cur: duckdb.DuckDBPyConnection, name: str) -> bool:
        """Whether ``name`` was built with at least one chunk (an empty one has no
        fts schema and no postings)."""
        return bool(
            scalar(
                cur,
                "SELECT count(*) FROM information_schema.tables "
                "WHERE table_catalog = ? AND table_schema = 'main' AND table_name = ?",
                [ALIAS, f"{name}_postings"],
            )
        )

    @classmethod
    def _drop(cls, cur: duckdb.DuckDBPyConnection, name: str) -> None:
        """Drop snapshot ``name`` and whatever a build or merge of it killed midway left:
        its text copy, postings, languages, term map and the snapshot of newer chunks
        a merge builds beside it (``_build_merged``)."""
        if not name.endswith(MERGE_ADDED_SUFFIX):
            cls._drop(cur, name + MERGE_ADDED_SUFFIX)
        exists = scalar(
            cur,
            "SELECT count(*) FROM information_schema.schemata "
            "WHERE catalog_name = ? AND schema_name = ?",
            [ALIAS, f"fts_main_{name}"],
        )
        if exists:
            cur.execute(f"PRAGMA drop_fts_index('{name}')")
        cur.execute(f"DROP TABLE IF EXISTS {name}")
        cur.execute(f"DROP TABLE IF EXISTS {name}_postings")
        cur.execute(f"DROP TABLE IF EXISTS {name}_languages")
        cur.execute(f"DROP TABLE IF EXISTS {name}_termmap")


def _stamp(name: str) -> str:
    return f"{name}-{uuid.uuid4().hex[:12]}"
