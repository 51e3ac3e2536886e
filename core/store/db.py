"""DuckDB connection, schema and numbered migrations.

One process owns the database file (DuckDB takes an OS lock on it); inside that process
one writer thread changes it at a time, under ``Database.write_lock``, and each document
is written in a single transaction so readers on other cursors never see half of one.
"""

from __future__ import annotations

import glob
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import duckdb

from core.errors import IndexBusyError, StoreError, reinstall_hint

SCHEMA_VERSION = 2


def fts_extension_path() -> str:
    """The fts binary shipped by the duckdb-extension-fts package, for this duckdb version."""
    import duckdb_extension_fts

    root = Path(duckdb_extension_fts.__file__).parent / "extensions"
    exact = root / f"v{duckdb.__version__}" / "fts.duckdb_extension"
    if exact.exists():
        return str(exact)
    found = sorted(glob.glob(str(root / "*" / "fts.duckdb_extension")))
    if not found:
        raise StoreError(
            "The full-text search extension is missing from this installation.",
            reinstall_hint("duckdb-extension-fts must match duckdb."),
        )
    return found[-1]


def _migration_1(con: duckdb.DuckDBPyConnection) -> None:
    con.execute("CREATE TABLE IF NOT EXISTS meta(key VARCHAR PRIMARY KEY, value VARCHAR)")
    con.execute("CREATE SEQUENCE IF NOT EXISTS document_ids START 1")
    con.execute("CREATE SEQUENCE IF NOT EXISTS chunk_ids START 1")
    con.execute(
        """CREATE TABLE IF NOT EXISTS folders(
            path VARCHAR PRIMARY KEY,
            added_at TIMESTAMP DEFAULT current_timestamp,
            state VARCHAR DEFAULT 'online'
        )"""
    )
    con.execute(
        """CREATE TABLE IF NOT EXISTS documents(
            id BIGINT PRIMARY KEY DEFAULT nextval('document_ids'),
            path VARCHAR NOT NULL UNIQUE,
            folder VARCHAR,
            size BIGINT,
            mtime DOUBLE,
            content_hash VARCHAR,
            type VARCHAR,
            title VARCHAR,
            pages INTEGER DEFAULT 0,
            state VARCHAR NOT NULL,
            reason VARCHAR DEFAULT '',
            chunks INTEGER DEFAULT 0,
            index_config VARCHAR,
            indexed_at TIMESTAMP
        )"""
    )
    con.execute(
        """CREATE TABLE IF NOT EXISTS document_text(
            document_id BIGINT PRIMARY KEY,
            text VARCHAR,
            pages VARCHAR
        )"""
    )
    con.execute(
        """CREATE TABLE IF NOT EXISTS chunks(
            id BIGINT PRIMARY KEY DEFAULT nextval('chunk_ids'),
            document_id BIGINT NOT NULL,
            ordinal INTEGER,
            text VARCHAR,
            context VARCHAR,
            start_char INTEGER,
            end_char INTEGER,
            page_start INTEGER,
            page_end INTEGER,
            heading_path VARCHAR,
            token_count INTEGER,
            embedding BLOB  -- float32 little-endian; DuckDB converts Python float lists ~1000x slower
        )"""
    )


def _migration_2(con: duckdb.DuckDBPyConnection) -> None:
    # Documents sharing content are embedded once: this lookup must be fast.
    con.execute("CREATE INDEX IF NOT EXISTS documents_hash ON documents(content_hash)")
    con.execute("CREATE INDEX IF NOT EXISTS chunks_document ON chunks(document_id)")


MIGRATIONS: dict[int, Callable[[duckdb.DuckDBPyConnection], None]] = {
    1: _migration_1,
    2: _migration_2,
}


class Database:
    """Owns the DuckDB connection; hands out per-thread cursors."""

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path) if path != ":memory:" else path
        self.write_lock = threading.RLock()
        self._local = threading.local()
        config = {
            "autoinstall_known_extensions": False,
            "autoload_known_extensions": False,
            "allow_community_extensions": False,
        }
        try:
            self._con = duckdb.connect(str(path), config=config)
        except duckdb.IOException as exc:
            if "lock" in str(exc).lower():
                raise IndexBusyError(
                    f"Another Lectern process is using the library at {path}.",
                    "Close the other Lectern window or command, or set LECTERN_HOME to another folder.",
                ) from exc
            raise StoreError(f"The library database at {path} could not be opened: {exc}") from exc
        except duckdb.Error as exc:
            raise StoreError(
                f"The library database at {path} is damaged: {exc}",
                "Move the data folder aside; Lectern rebuilds the index from your files.",
            ) from exc
        self._con.execute(f"LOAD '{fts_extension_path()}'")
        self._migrate()

    def cursor(self) -> duckdb.DuckDBPyConnection:
        """A cursor for the calling thread (DuckDB cursors must not be shared across threads)."""
        cur = getattr(self._local, "cursor", None)
        if cur is None:
            cur = self._con.cursor()
            self._local.cursor = cur
        return cur

    @contextmanager
    def transaction(self) -> Iterator[duckdb.DuckDBPyConnection]:
        with self.write_lock:
            cur = self.cursor()
            cur.execute("BEGIN TRANSACTION")
            try:
                yield cur
            except BaseException:
                cur.execute("ROLLBACK")
                raise
            else:
                cur.execute("COMMIT")

    def get_meta(self, key: str, default: str | None = None) -> str | None:
        row = self.cursor().execute("SELECT value FROM meta WHERE key = ?", [key]).fetchone()
        return row[0] if row else default

    def set_meta(self, key: str, value: str, cur: duckdb.DuckDBPyConnection | None = None) -> None:
        (cur or self.cursor()).execute(
            "INSERT OR REPLACE INTO meta(key, value) VALUES (?, ?)", [key, value]
        )

    def checkpoint(self) -> None:
        with self.write_lock:
            self.cursor().execute("CHECKPOINT")

    def try_checkpoint(self) -> bool:
        """Checkpoint unless another thread's write transaction is open (DuckDB refuses
        then); the caller retries later, and ``close`` always checkpoints."""
        try:
            self.checkpoint()
        except duckdb.TransactionException:
            return False
        return True

    def close(self) -> None:
        try:
            self.checkpoint()
        except duckdb.Error:
            pass
        self._con.close()

    def _migrate(self) -> None:
        with self.write_lock:
            cur = self.cursor()
            cur.execute("CREATE TABLE IF NOT EXISTS meta(key VARCHAR PRIMARY KEY, value VARCHAR)")
            current = int(self.get_meta("schema_version", "0") or 0)
            if current > SCHEMA_VERSION:
                raise StoreError(
                    f"This library was written by a newer Lectern (schema {current}).",
                    "Update Lectern, or point LECTERN_HOME at a new folder.",
                )
            for version in range(current + 1, SCHEMA_VERSION + 1):
                cur.execute("BEGIN TRANSACTION")
                try:
                    MIGRATIONS[version](cur)
                    self.set_meta("schema_version", str(version), cur)
                    cur.execute("COMMIT")
                except BaseException:
                    cur.execute("ROLLBACK")
                    raise
