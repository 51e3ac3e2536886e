"""Opening the library's database whatever a crash or a damaged disk left behind.

What is the record and what is derived (docs/ARCHITECTURE.md has the whole table):

- the database file holds the record: folders, documents, their text, chunks with their
  embeddings, conversations;
- a write-ahead log beside it holds the last committed changes not yet checkpointed;
- the keyword file and the vector file are derived, and are rebuilt from the record.

Nothing here deletes a file. A log that will not replay is renamed aside with a time
stamp, and the library opens without it (the changes it held are redone from the files
by the next scan); a database file that cannot be read is renamed aside too, and a new
library starts from the backup of folders and conversations (core/store/backup.py).
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

from core.errors import DamagedStoreError, UnreplayableLogError
from core.records import RecoveryNotice
from core.store.db import Database, set_aside

log = logging.getLogger(__name__)

REDONE = (
    "The last moments of indexing are redone from your files; the last answer may be "
    "missing from the conversation list."
)


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S")


def open_database(path: Path) -> tuple[Database, list[RecoveryNotice]]:
    """Open (and if need be repair) the database at ``path``; returns it with what was
    done, for the user to be told."""
    notices: list[RecoveryNotice] = []
    try:
        db = Database(path)
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
                at=_now(),
            )
        )
        try:
            db = Database(path)
        except DamagedStoreError as damaged:
            db, notice = _start_anew(path, damaged)
            notices.append(notice)
            return db, notices
    except DamagedStoreError as exc:
        db, notice = _start_anew(path, exc)
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
                at=_now(),
            )
        )
    if db.generation != recorded:
        db.record_generation()
    return db, notices


def _start_anew(path: Path, exc: DamagedStoreError) -> tuple[Database, RecoveryNotice]:
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
        at=_now(),
    )
