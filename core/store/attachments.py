"""Documents stored under another document's path: a mail file's attachments.

A mail file ``/m/lunch.eml`` with an attachment ``minutes.docx`` is stored as two
documents, ``/m/lunch.eml`` and ``/m/lunch.eml/minutes.docx``; this finds the second
kind from the first, so that re-indexing or removing a mail file takes its attachments
with it.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence

from core.store.db import Database
from core.store.paths import disk_path, stored_path


def attached_paths(db: Database, paths: Sequence[str], container_types: Iterable[str]) -> list[str]:
    """Paths of the documents stored inside those of ``paths`` that are stored documents
    of one of ``container_types``. Only such documents count: a path that is a folder
    (the watcher removes a renamed folder's old path) must not take the folder's files."""
    if not paths:
        return []
    rows = (
        db.cursor()
        .execute(
            """SELECT d.path FROM documents d
               JOIN (SELECT path || ? AS prefix FROM documents
                     WHERE type IN (SELECT unnest(?::VARCHAR[]))
                       AND path IN (SELECT unnest(?::VARCHAR[]))) c
                 ON starts_with(d.path, c.prefix)""",
            [os.sep, sorted(container_types), [stored_path(p) for p in paths]],
        )
        .fetchall()
    )
    return sorted({disk_path(r[0]) for r in rows})
