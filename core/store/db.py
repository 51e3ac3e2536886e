"""DuckDB connection, schema and numbered migrations.

One process owns the database file (DuckDB takes an OS lock on it); inside that process
one writer thread changes it at a time, under ``Database.write_lock``, and each document
is written in a single transaction so readers on other cursors never see half of one.
"""

from __future__ import annotations

import atexit
import errno
import functools
import glob
import importlib.util
import itertools
import os
import re
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import duckdb

from core.errors import (
    DamagedStoreError,
    DiskFullError,
    IndexBusyError,
    LibraryAccessError,
    ReadOnlyLibraryError,
    StoreError,
    UnreplayableLogError,
    reinstall_hint,
)
from core.private import write_private


def _remember_pandas_is_missing() -> None:
    """DuckDB's Python client imports pandas for every statement that binds a Python
    value or reads a Python object (to tell whether it is a DataFrame). Python does not
    remember an import that failed, so without pandas each try walked sys.path again: 380
    tries, about 0.2 s of stat calls, in one four-file indexing run (5 % of it). A
    missing pandas is recorded once, so the next try fails at once; an installed one is
    left alone."""
    if "pandas" not in sys.modules and importlib.util.find_spec("pandas") is None:
        sys.modules["pandas"] = None  # type: ignore[assignment]  # "import pandas" fails fast


_remember_pandas_is_missing()

# Indexing stops before the disk is this close to full: DuckDB needs room for its
# write-ahead log and a checkpoint, and the rest of the machine needs room too.
MIN_FREE_BYTES = 64 * 1024 * 1024
# DuckDB's buffer cache otherwise grows to 80 % of RAM with what it has read (embeddings,
# keyword postings): 3.4 GB at 1M chunks. The keyword file is ATTACHed to the same
# connection, so this one limit covers both. Past it DuckDB evicts what it cached and
# spills work (the fts build's joins and aggregates) to ``temp_directory``. Chosen by
# measurement with bench/scale.py (README, "Growth"): a keyword base rebuild at 300k
# chunks, as indexing runs it, peaked at 1,609 MB of the process under 512 MB, 1,438 MB
# under 384 MB and 1,398 MB under 256 MB, none of them slower (31-39 s).
MEMORY_LIMIT = "384MB"


def temp_directory(path: Path | str) -> str:
    """Where DuckDB spills: beside the database, so it is inside the library's data
    folder (DuckDB removes it on close); a database in memory (or read-only) spills into
    a folder of this process's own in the system's temp folder."""
    if str(path) == ":memory:":
        return str(_private_spill_root() / f"spill-{next(_spills)}")
    return f"{path}.tmp"


_spills = itertools.count(1)


@functools.cache
def _private_spill_root() -> Path:
    """A 0700 folder under a name no one can guess: a predictable one in a shared temp
    folder could be made first by another account (a link, or a folder it can read)."""
    root = Path(tempfile.mkdtemp(prefix="lectern-duckdb-"))
    atexit.register(shutil.rmtree, root, True)
    return root


def scalar(cur: duckdb.DuckDBPyConnection, sql: str, params: Sequence[object] = ()) -> Any:
    """The single value a query like ``SELECT count(*) ...`` returns."""
    row = cur.execute(sql, list(params)).fetchone()
    if row is None:
        raise StoreError(f"The library's database returned nothing for: {sql.split()[0]} ...")
    return row[0]


def _quote(text: str) -> str:
    return text.replace("'", "''")


def is_disk_full(exc: BaseException) -> bool:
    if isinstance(exc, DiskFullError):
        return True
    if isinstance(exc, OSError) and exc.errno == errno.ENOSPC:
        return True
    text = str(exc)
    # DuckDB spilling past MEMORY_LIMIT to a full disk says "failed to offload data
    # block ... max_temp_directory_size" (an OutOfMemoryException): the disk is full.
    return (
        "No space left on device" in text
        or "Disk is full" in text
        or "failed to offload data block" in text
    )


def _mb(n: int) -> str:
    return f"{max(1, round(n / 1_048_576))} MB"


def disk_full_error(path: Path | str, needed_bytes: int = 0) -> DiskFullError:
    """A plain report of a full disk: which one, what is free, what is needed."""
    folder = Path(str(path)).parent if str(path) != ":memory:" else Path.cwd()
    try:
        free = shutil.disk_usage(folder).free
    except OSError:
        free = 0
    needed = max(needed_bytes, MIN_FREE_BYTES)
    return DiskFullError(
        f"The disk holding your library ({folder}) is full: {_mb(free)} free, and indexing "
        f"needs about {_mb(needed)} more.",
        f"Free at least {_mb(needed)} on that disk. Search and your conversations keep "
        "working meanwhile; indexing carries on where it stopped and nothing is lost.",
        folder=str(folder),
        free_bytes=free,
        needed_bytes=needed,
    )


def local_time() -> str:
    """When a repair happened, as its RecoveryNotice says."""
    return time.strftime("%Y-%m-%dT%H:%M:%S")


def aside_name(
    source: Path, why: str, folder: Path | None = None, stamp: str | None = None
) -> Path:
    """``<name>.<why>-<timestamp>`` beside ``source`` (or in ``folder``), a name no file
    has yet: a file set aside never replaces another."""
    place = source.parent if folder is None else folder
    stamp = stamp or time.strftime("%Y%m%d-%H%M%S")
    target = place / f"{source.name}.{why}-{stamp}"
    n = 1
    while target.exists():
        n += 1
        target = place / f"{source.name}.{why}-{stamp}-{n}"
    return target


def set_aside(path: Path, why: str) -> Path | None:
    """Rename ``path`` (and its write-ahead log) to ``<name>.<why>-<timestamp>``, never
    deleting it; returns the new name, or None when there was no file. A file that may
    not be renamed (a read-only folder, no permission) raises the error that says so,
    never a bare OSError."""
    kept: Path | None = None
    stamp = time.strftime("%Y%m%d-%H%M%S")  # the file and its log alike
    for source in (path, Path(f"{path}.wal")):
        if source.exists():
            target = aside_name(source, why, stamp=stamp)
            try:
                os.replace(source, target)
            except OSError as exc:
                raise os_open_error(source, exc) or LibraryAccessError(
                    f"Lectern could not rename {source} aside to repair it: {exc.strerror}.",
                    path=str(source),
                ) from exc
            kept = kept or target
    return kept


# Words DuckDB passes on from the operating system when a file cannot be opened as it
# is. None of them is damage: a file that is renamed aside for them is a healthy library
# replaced by an empty one.
_READ_ONLY_WORDS = ("Read-only file system",)
_DENIED_WORDS = ("Permission denied", "Operation not permitted")
_NOT_A_FILE_WORDS = ("Is a directory",)
_NAMED_FILE = re.compile(r'file "([^"]+)"')


def _folder_of(path: Path) -> Path:
    return path.parent


def read_only_error(path: Path) -> ReadOnlyLibraryError:
    return ReadOnlyLibraryError(
        f"The library's folder {_folder_of(path)} is read-only (a read-only disk or mount), "
        "so Lectern can read the library there but not change it.",
        path=str(path),
    )


def _denied_error(path: Path, why: str) -> LibraryAccessError:
    return LibraryAccessError(
        f"Lectern may not open {path} ({why}), so it left the library as it is.",
        path=str(path),
    )


def _not_a_file_error(path: Path) -> LibraryAccessError:
    return LibraryAccessError(
        f"{path} is a folder, where Lectern keeps a file of its own, so it left the library "
        "as it is.",
        "Move that folder out of the library's data folder, then open Lectern again.",
        path=str(path),
    )


def os_open_error(path: Path, exc: OSError) -> StoreError | None:
    """The error for an OSError met opening or renaming one of the library's files, when
    it is about the file's access rather than its content."""
    if exc.errno == errno.EROFS:
        return read_only_error(path)
    if exc.errno in (errno.EACCES, errno.EPERM):
        return _denied_error(path, exc.strerror or "permission denied")
    if exc.errno == errno.EISDIR:
        return _not_a_file_error(path)
    if exc.errno == errno.ENOSPC:
        return disk_full_error(path)
    return None


def _access_problem(path: Path) -> StoreError | None:
    """Open the database file and its log for reading and writing, as DuckDB does, to
    tell a file that may not be opened from one whose content is damaged."""
    for target in (path, Path(f"{path}.wal")):
        try:
            fd = os.open(target, os.O_RDWR)
        except FileNotFoundError:
            continue
        except OSError as exc:
            found = os_open_error(target, exc)
            if found is not None:
                return found
            continue
        os.close(fd)
    return None


def named_file(exc: BaseException) -> Path | None:
    """The file a DuckDB error names last ('... file "/x/y": ...'), if any."""
    named = _NAMED_FILE.findall(str(exc))
    return Path(named[-1]) if named else None


def access_error(exc: BaseException, path: Path) -> StoreError | None:
    """The error for a DuckDB failure that says a file may not be opened or written
    (the file it names, else ``path``), or None when it says nothing of the kind."""
    text = str(exc)
    culprit = named_file(exc) or path
    if any(w in text for w in _READ_ONLY_WORDS):
        return read_only_error(culprit)
    for words in _DENIED_WORDS:
        if words in text:
            return _denied_error(culprit, words.lower())
    if any(w in text for w in _NOT_A_FILE_WORDS):
        return _not_a_file_error(culprit)
    return None


def classify_open_error(path: Path, exc: BaseException) -> StoreError:
    """What a failure to open (or first read) the DuckDB file at ``path`` is: another
    process holding it, a full disk, a read-only folder, a file that may not be opened,
    a log that cannot be replayed, or damage. Only the last two are repaired by setting
    a file aside; damage is what is left once the file itself opens for reading and
    writing. (The words DuckDB uses decide: "block" in a damage report once read as
    "lock".)"""
    if isinstance(exc, StoreError):
        return exc
    text = str(exc)
    if "Could not set lock" in text or "Conflicting lock" in text:
        return IndexBusyError(
            f"Another Lectern process is using the library at {path}.",
            "Close the other Lectern window or command, or set LECTERN_HOME to another folder.",
        )
    if is_disk_full(exc):
        return disk_full_error(path)
    culprit = named_file(exc) or path
    found = access_error(exc, path)
    if found is not None:
        return found
    if isinstance(exc, OSError):
        found = os_open_error(path, exc)
        if found is not None:
            return found
    if isinstance(exc, duckdb.IOException) and not os.path.exists(path.parent):
        return StoreError(f"The library folder {path.parent} cannot be reached: {text}")
    found = _access_problem(path)
    if found is not None:
        return found
    # A log that fails to replay because the database file under it cannot be read
    # (cut short: "Could not read enough bytes from file <database>") is the database's
    # damage; the log is set aside with it.
    if ("WAL" in text or "write-ahead" in text) and culprit.name != path.name:
        return UnreplayableLogError(
            f"The last changes to {path.name} could not be replayed: {text}"
        )
    return DamagedStoreError(f"The library file {path} is damaged: {text}")


# A DuckDB file starts with three 4 KiB headers, then its blocks (DuckDB's
# Storage::FILE_HEADER_SIZE and BLOCK_START).
FILE_HEADERS_BYTES = 3 * 4096


def check_not_cut_short(cur: duckdb.DuckDBPyConnection, catalog: str, path: Path) -> None:
    """Raise DamagedStoreError when the file behind ``catalog`` has lost its end.

    A file cut short (a copy or a sync that stopped, a disk that lost its tail) still
    opens: DuckDB reads only its header, and fails at the first read of a block past the
    end, which may be minutes later or in the middle of indexing. Its header says how
    many blocks it has and which of them are free; a file with room for fewer blocks
    than are in use has lost some. (The block count alone is not enough: DuckDB trims
    free blocks off the end after a checkpoint without rewriting the header, so a
    healthy file may be shorter than its header's count.)"""
    # A cursor of its own, read to the end: a result left open keeps a transaction
    # open on the connection, and DuckDB then refuses every CHECKPOINT.
    own = cur.cursor()
    try:
        rows = own.execute(
            "SELECT block_size, total_blocks, free_blocks FROM pragma_database_size() "
            "WHERE database_name = ?",
            [catalog],
        ).fetchall()
    finally:
        own.close()
    if not rows:
        return
    block_size, total, free = (int(v) for v in rows[0])
    size = os.path.getsize(path)
    held = max(0, size - FILE_HEADERS_BYTES) // max(1, block_size)
    if held < total - free:
        raise DamagedStoreError(
            f"The file {path} is cut short: {size} bytes hold {held} of the "
            f"{total - free} blocks it uses."
        )


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


CONVERSATION_SCHEMA = (
    "CREATE SEQUENCE IF NOT EXISTS conversation_ids START 1",
    "CREATE SEQUENCE IF NOT EXISTS turn_ids START 1",
    """CREATE TABLE IF NOT EXISTS conversations(
        id BIGINT PRIMARY KEY DEFAULT nextval('conversation_ids'),
        title VARCHAR NOT NULL,
        created_at TIMESTAMP DEFAULT current_timestamp
    )""",
    """CREATE TABLE IF NOT EXISTS turns(
        id BIGINT PRIMARY KEY DEFAULT nextval('turn_ids'),
        conversation_id BIGINT NOT NULL,
        question VARCHAR NOT NULL,
        standalone_question VARCHAR,
        answer VARCHAR,
        mode VARCHAR,
        created_at TIMESTAMP DEFAULT current_timestamp,
        sources JSON,
        citations JSON,
        warnings JSON
    )""",
    "CREATE INDEX IF NOT EXISTS turns_conversation ON turns(conversation_id)",
)


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


def _migration_3(con: duckdb.DuckDBPyConnection) -> None:
    # The keyword index moved to a file of its own (see core/store/keyword/upkeep.py): its old
    # tables and fts schemas leave the library's database, and with them fts DDL.
    old = [
        r[0]
        for r in con.execute(
            "SELECT table_name FROM information_schema.tables "
            "WHERE table_catalog = current_database() AND table_schema = 'main' "
            "AND (table_name LIKE 'kw_base_%' OR table_name LIKE 'kw_delta_%')"
        ).fetchall()
    ]
    for table in old:
        schema = con.execute(
            "SELECT count(*) FROM information_schema.schemata "
            "WHERE catalog_name = current_database() AND schema_name = ?",
            [f"fts_main_{table}"],
        ).fetchone()
        if schema and schema[0]:
            con.execute(f"PRAGMA drop_fts_index('{table}')")
        con.execute(f"DROP TABLE IF EXISTS {table}")
    con.execute("DELETE FROM meta WHERE key LIKE 'kw\\_%' ESCAPE '\\'")


def _migration_4(con: duckdb.DuckDBPyConnection) -> None:
    # Conversations are record: their tables get an upgrade path like every other table.
    # IF NOT EXISTS because libraries from before this migration made them on first use.
    for statement in CONVERSATION_SCHEMA:
        con.execute(statement)


def _migration_5(con: duckdb.DuckDBPyConnection) -> None:
    # Words read by OCR with their boxes on the page (core/store/ocr.py), so a citation
    # on a scanned page is highlighted on the page image.
    con.execute(
        """CREATE TABLE IF NOT EXISTS ocr_words(
            document_id BIGINT NOT NULL,
            page INTEGER NOT NULL,
            start_char INTEGER NOT NULL,
            end_char INTEGER NOT NULL,
            x0 REAL, y0 REAL, x1 REAL, y1 REAL
        )"""
    )


def _migration_6(con: duckdb.DuckDBPyConnection) -> None:
    # Collections (named groups of folders) and what each conversation searches
    # (core/store/collections.py).
    con.execute("CREATE SEQUENCE IF NOT EXISTS collection_ids START 1")
    con.execute(
        """CREATE TABLE IF NOT EXISTS collections(
            id BIGINT PRIMARY KEY DEFAULT nextval('collection_ids'),
            name VARCHAR NOT NULL UNIQUE,
            created_at TIMESTAMP DEFAULT current_timestamp
        )"""
    )
    con.execute(
        """CREATE TABLE IF NOT EXISTS collection_folders(
            collection_id BIGINT NOT NULL,
            folder VARCHAR NOT NULL,
            PRIMARY KEY (collection_id, folder)
        )"""
    )
    con.execute(
        """CREATE TABLE IF NOT EXISTS conversation_scopes(
            conversation_id BIGINT PRIMARY KEY,
            scope JSON NOT NULL
        )"""
    )


def _migration_7(con: duckdb.DuckDBPyConnection) -> None:
    # A change of embedding model re-embeds every chunk in the background while the old
    # vectors keep answering (core/indexing/reembed.py): the new model's vectors wait here, by
    # chunk id, until all are done and one transaction swaps them in.
    con.execute(
        """CREATE TABLE IF NOT EXISTS reembed(
            chunk_id BIGINT PRIMARY KEY,
            embedding BLOB NOT NULL
        )"""
    )


def _migration_8(con: duckdb.DuckDBPyConnection) -> None:
    # A turn is stored when its question is asked and updated when its answer ends
    # (core/generation/qa.py), so a stopped, failed or cut-off answer is kept: its state
    # says which (core.records.TurnState). Turns from before were all finished.
    con.execute("ALTER TABLE turns ADD COLUMN IF NOT EXISTS state VARCHAR DEFAULT 'done'")


def _migration_9(con: duckdb.DuckDBPyConnection) -> None:
    # Each passage's packed word-piece states, for the second stage to read instead of
    # encoding (core/store/pieces.py). Keyed: a short list's 30 ids are read in under
    # 1 ms through the key's index, against 19 ms scanning 10k rows without it.
    con.execute(
        "CREATE TABLE IF NOT EXISTS chunk_pieces(chunk_id BIGINT PRIMARY KEY, pieces BLOB NOT NULL)"
    )


MIGRATIONS: dict[int, Callable[[duckdb.DuckDBPyConnection], None]] = {
    1: _migration_1,
    2: _migration_2,
    3: _migration_3,
    4: _migration_4,
    5: _migration_5,
    6: _migration_6,
    7: _migration_7,
    8: _migration_8,
    9: _migration_9,
}
SCHEMA_VERSION = max(MIGRATIONS)


class Database:
    """Owns the DuckDB connection; hands out per-thread cursors.

    Every write transaction also bumps ``commit_generation`` in ``meta`` and, once
    committed, copies it to a small file beside the database. DuckDB replays a write-ahead
    log that was cut short without a word; a database whose generation is behind that
    file's has lost committed changes, and :func:`open_database` says so.
    """

    def __init__(self, path: Path | str, *, read_only: bool = False) -> None:
        """``read_only``: open a library whose folder cannot be written (nothing is
        migrated, checkpointed or recorded; a write raises ReadOnlyLibraryError)."""
        self.path = Path(path) if path != ":memory:" else path
        self.read_only = read_only
        self.write_lock = threading.RLock()
        self._local = threading.local()
        # A read-only folder cannot take DuckDB's spill files either.
        spill = temp_directory(":memory:" if read_only else path)
        config: dict[str, str | bool | int | float | list[str]] = {
            "autoinstall_known_extensions": False,
            "autoload_known_extensions": False,
            "allow_community_extensions": False,
            "memory_limit": MEMORY_LIMIT,
            "temp_directory": spill,
        }
        file = Path(str(path))
        try:
            self._con = duckdb.connect(str(path), read_only=read_only, config=config)
        except duckdb.Error as exc:
            raise classify_open_error(file, exc) from exc
        # Everything up to here read only the file's header: the first reads of its
        # blocks (the catalog, the meta table) are where a damaged or cut-short file
        # fails, so they are classified the same way, and the connection is closed so
        # that the file can be set aside.
        try:
            row = self._con.execute("SELECT current_database()").fetchone()
            self.catalog = str(row[0]) if row else "memory"
            self._con.execute(f"LOAD '{fts_extension_path()}'")
            if path != ":memory:":
                check_not_cut_short(self._con, self.catalog, file)
            self._generation = 0
            self._migrate()
            self._generation = int(self.get_meta("commit_generation", "0") or 0)
        except BaseException as exc:
            self._con.close()
            if isinstance(exc, duckdb.Error):
                raise classify_open_error(file, exc) from exc
            raise

    def extension_downloads_allowed(self) -> bool:
        """Whether DuckDB could fetch an extension from the network (it must not)."""
        row = (
            self.cursor()
            .execute(
                "SELECT current_setting('autoinstall_known_extensions'), "
                "current_setting('autoload_known_extensions')"
            )
            .fetchone()
        )
        return bool(row and (row[0] or row[1]))

    @property
    def generation(self) -> int:
        """How many write transactions this database has committed."""
        return self._generation

    @property
    def generation_path(self) -> Path | None:
        return None if self.path == ":memory:" else Path(f"{self.path}.commits")

    def recorded_generation(self) -> int:
        """The last generation known to be committed, from the file beside the database."""
        path = self.generation_path
        try:
            return int(path.read_text(encoding="ascii").strip()) if path else 0
        except (OSError, ValueError):
            return 0

    def record_generation(self) -> None:
        path = self.generation_path
        if path is None or self.read_only:
            return
        try:
            # Not flushed to the disk: on every commit, and DuckDB's own log is the record.
            write_private(path, str(self._generation), durable=False)
        except OSError:
            pass  # only weakens the check for a cut-short log; never blocks a write

    def attach(self, path: Path, alias: str, *, read_only: bool = False) -> None:
        """Attach another DuckDB file (a derived index) under ``alias``; a file that will
        not open, or is cut short, raises the classified error (classify_open_error)."""
        mode = " (READ_ONLY)" if read_only else ""
        try:
            self._con.execute(f"ATTACH '{_quote(str(path))}' AS {alias}{mode}")
        except duckdb.Error as exc:
            raise classify_open_error(path, exc) from exc
        if str(path) == ":memory:":
            return
        try:
            check_not_cut_short(self._con, alias, path)
        except (StoreError, duckdb.Error) as exc:
            self.detach(alias)
            raise classify_open_error(path, exc) from exc

    def detach(self, alias: str) -> None:
        try:
            self._con.execute(f"DETACH {alias}")
        except duckdb.Error:
            pass

    def new_cursor(self) -> duckdb.DuckDBPyConnection:
        """A cursor of its own (for a thread that changes its default catalog)."""
        return self._con.cursor()

    def cursor(self) -> duckdb.DuckDBPyConnection:
        """A cursor for the calling thread (DuckDB cursors must not be shared across threads)."""
        cur = getattr(self._local, "cursor", None)
        if cur is None:
            cur = self._con.cursor()
            self._local.cursor = cur
        return cur

    def refuse_writes(self) -> ReadOnlyLibraryError:
        """The error for a change asked of a library opened read-only."""
        path = Path(str(self.path))
        return ReadOnlyLibraryError(
            f"The library's folder {path.parent} is read-only, so Lectern cannot save "
            "changes to it.",
            path=str(path),
        )

    @contextmanager
    def transaction(self) -> Iterator[duckdb.DuckDBPyConnection]:
        if self.read_only:
            raise self.refuse_writes()
        with self.write_lock:
            cur = self.cursor()
            cur.execute("BEGIN TRANSACTION")
            try:
                yield cur
                cur.execute(
                    "INSERT OR REPLACE INTO meta(key, value) VALUES ('commit_generation', ?)",
                    [str(self._generation + 1)],
                )
                cur.execute("COMMIT")
            except BaseException as exc:
                try:
                    cur.execute("ROLLBACK")
                except duckdb.Error:
                    pass  # a failed COMMIT has already rolled back
                if isinstance(exc, duckdb.Error) and is_disk_full(exc):
                    raise disk_full_error(self.path) from exc
                if isinstance(exc, duckdb.Error):
                    # A folder that refuses the write-ahead log (no permission, made
                    # read-only since the library opened): said, naming the file.
                    denied = access_error(exc, Path(str(self.path)))
                    if denied is not None:
                        raise denied from exc
                raise
            self._generation += 1
            self.record_generation()

    def get_meta(self, key: str, default: str | None = None) -> str | None:
        row = self.cursor().execute("SELECT value FROM meta WHERE key = ?", [key]).fetchone()
        return row[0] if row else default

    def set_meta(self, key: str, value: str, cur: duckdb.DuckDBPyConnection | None = None) -> None:
        (cur or self.cursor()).execute(
            "INSERT OR REPLACE INTO meta(key, value) VALUES (?, ?)", [key, value]
        )

    def checkpoint(self) -> None:
        if self.read_only:
            return
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
        if self.read_only:
            self._check_readable_schema()
            return
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
            if current < SCHEMA_VERSION:
                self.try_checkpoint()

    def _check_readable_schema(self) -> None:
        """A library opened read-only is read as it is: one that would need a migration
        (or holds no library at all) cannot be read without writing."""
        try:
            current = int(self.get_meta("schema_version", "0") or 0)
        except duckdb.CatalogException:
            current = 0
        if current == SCHEMA_VERSION:
            return
        path = Path(str(self.path))
        if current > SCHEMA_VERSION:
            raise StoreError(
                f"This library was written by a newer Lectern (schema {current}).",
                "Update Lectern, or point LECTERN_HOME at a new folder.",
            )
        what = (
            "holds no library yet"
            if current == 0
            else "holds a library from an earlier Lectern that must be upgraded first"
        )
        raise ReadOnlyLibraryError(
            f"The library's folder {path.parent} is read-only and {what}, which needs "
            "writing to it.",
            "Make the folder writable (or set LECTERN_HOME to a writable folder), then "
            "open Lectern again.",
            path=str(path),
        )
