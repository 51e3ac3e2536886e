"""Opening the library's database whatever a crash, a damaged disk or a read-only one
left behind.

What is the record and what is derived (docs/ARCHITECTURE.md has the whole table):

- the database file holds the record: folders, documents, their text, chunks with their
  embeddings, conversations;
- a write-ahead log beside it holds the last committed changes not yet checkpointed;
- the keyword file and the vector file are derived, and are rebuilt from the record.

Every failure to open is classified first (``core.store.db.classify_open_error``), and
handled by what it is:

- another process holding the library, a full disk: said, nothing changed;
- a file that may not be opened (no permission, a folder in its place): said, naming
  the file, nothing changed;
- a read-only folder (a read-only disk or mount): the library opens for reading, and a
  notice says why it cannot index (ReadOnlyLibraryError when it is asked to);
- a log that will not replay: renamed aside with a time stamp, and the library opens
  without it (the changes it held are redone from the files by the next scan);
- a damaged or cut-short database file: renamed aside too, and a new library starts
  from the backup of folders and conversations (core/store/backup.py).

Nothing here deletes a file.
"""

from __future__ import annotations

import logging
from pathlib import Path

from core.errors import DamagedStoreError, ReadOnlyLibraryError, UnreplayableLogError
from core.records import RecoveryNotice
from core.store.db import Database, local_time, set_aside

log = logging.getLogger(__name__)

REDONE = (
    "The last moments of indexing are redone from your files; the last answer may be "
    "missing from the conversation list."
)


def open_database(path: Path) -> tuple[Database, list[RecoveryNotice]]:
    """Open (and if need be repair) the database at ``path``; returns it with what was
    done, for the user to be told."""
    notices: list[RecoveryNotice] = []
    try:
        db = Database(path)
    except ReadOnlyLibraryError as exc:
        return open_read_only(path, exc)
    except UnreplayableLogError as exc:
        log.warning("%s", exc)
        kept = set_aside(Path(f"{path}.wal"), "unreplayable")
        notices.append(
            RecoveryNotice(
                "log_set_aside",
                "Lectern was stopped in the middle of saving, and its last changes could "
                f"not be read back, so it opened the library without them. {REDONE}",
                "Nothing needs doing; the unread log is kept in case it is needed.",
                kept_at=str(kept or ""),
                at=local_time(),
            )
        )
        try:
            db = Database(path)
        except DamagedStoreError as damaged:
            db, notice = start_anew(path, damaged)
            notices.append(notice)
            return db, notices
    except DamagedStoreError as exc:
        db, notice = start_anew(path, exc)
        notices.append(notice)
        return db, notices
    recorded = db.recorded_generation()
    if db.generation < recorded and not notices:
        notices.append(
            RecoveryNotice(
                "log_cut_short",
                "Lectern's record of its last changes was cut short (after a crash or a "
                f"disk problem), so the newest of them were lost. {REDONE}",
                "Nothing needs doing; your files are checked again.",
                at=local_time(),
            )
        )
    if db.generation != recorded:
        db.record_generation()
    return db, notices


def open_read_only(path: Path, why: ReadOnlyLibraryError) -> tuple[Database, list[RecoveryNotice]]:
    """The library in a folder that cannot be written, opened for reading as it is (a
    log is replayed in memory). Damage cannot be repaired there: said, nothing changed."""
    log.info("%s", why.message)
    if not path.exists():
        raise ReadOnlyLibraryError(
            f"The folder {path.parent} is read-only and holds no library yet, so Lectern "
            "cannot start one there.",
            "Set LECTERN_HOME to a writable folder (or make this one writable).",
            path=str(path),
        )
    try:
        db = Database(path, read_only=True)
    except (DamagedStoreError, UnreplayableLogError) as exc:
        raise ReadOnlyLibraryError(
            f"The library file {path} is damaged, and its folder is read-only, so Lectern "
            f"can neither read it nor repair it ({exc.message}).",
            "Make the folder writable and open Lectern again: it keeps the damaged file "
            "aside and rebuilds the library from your files.",
            path=str(path),
        ) from exc
    return db, [
        RecoveryNotice(
            "read_only",
            f"The library's folder {path.parent} is read-only, so Lectern opened the library "
            "for reading: search and your conversations work, but nothing can be indexed "
            "or saved.",
            "To index again, make the folder writable (or copy it to a writable disk and "
            "set LECTERN_HOME to the copy).",
            at=local_time(),
        )
    ]


def start_anew(path: Path, exc: DamagedStoreError) -> tuple[Database, RecoveryNotice]:
    """Set the damaged database file aside and open a new one in its place; the caller
    restores the record from the backup (Library._restore_record)."""
    log.warning("%s", exc)
    kept = set_aside(path, "damaged")
    db = Database(path)
    db.record_generation()
    return db, RecoveryNotice(
        "library_rebuilt",
        "The library file was damaged, so Lectern kept it aside and started a new one: "
        "your folders and conversations are restored from their backup, and your files "
        "are indexed again.",
        "Nothing needs doing; the damaged file is kept in case it is needed.",
        kept_at=str(kept or ""),
        at=local_time(),
    )
