"""Words read by OCR and their boxes on the page (table ``ocr_words``, migration 5).

A document has rows here exactly when some of its text was read by OCR, which is also
how the library and citations know to say "read by OCR". Every function takes the
caller's cursor, so writes join the indexer's per-file transaction.
"""

from __future__ import annotations

from collections.abc import Sequence

import duckdb
import numpy as np

from core.records import WordBox
from core.store.paths import disk_path

_SCANNED_REASON = "no text layer (scanned?)"


def insert_words(
    cur: duckdb.DuckDBPyConnection, document_id: int, words: Sequence[WordBox]
) -> None:
    """Add the words of a document whose old ones the caller has already removed."""
    if not words:
        return
    # Columns as numpy arrays: DuckDB scans them in bulk (a scanned book has 100k words).
    new_words = {  # noqa: F841 - read by DuckDB's replacement scan below
        "page": np.array([w.page for w in words], dtype=np.int32),
        "start_char": np.array([w.start for w in words], dtype=np.int32),
        "end_char": np.array([w.end for w in words], dtype=np.int32),
        "x0": np.array([w.x0 for w in words], dtype=np.float32),
        "y0": np.array([w.y0 for w in words], dtype=np.float32),
        "x1": np.array([w.x1 for w in words], dtype=np.float32),
        "y1": np.array([w.y1 for w in words], dtype=np.float32),
    }
    cur.execute(
        """INSERT INTO ocr_words SELECT ?, page, start_char, end_char, x0, y0, x1, y1
           FROM new_words""",
        [document_id],
    )


def copy_words(cur: duckdb.DuckDBPyConnection, document_id: int, donor_id: int) -> None:
    """A moved or copied file takes its donor's words, as it takes its chunks."""
    cur.execute(
        """INSERT INTO ocr_words SELECT ?, page, start_char, end_char, x0, y0, x1, y1
           FROM ocr_words WHERE document_id = ?""",
        [document_id, donor_id],
    )


def words_in(
    cur: duckdb.DuckDBPyConnection, document_id: int, start: int, end: int
) -> list[WordBox]:
    """The words that overlap characters ``[start, end)``, in text order."""
    rows = cur.execute(
        """SELECT page, start_char, end_char, x0, y0, x1, y1 FROM ocr_words
           WHERE document_id = ? AND end_char > ? AND start_char < ? ORDER BY start_char""",
        [document_id, start, end],
    ).fetchall()
    return [WordBox(int(r[0]), int(r[1]), int(r[2]), *map(float, r[3:])) for r in rows]


def has_words(cur: duckdb.DuckDBPyConnection, document_id: int) -> bool:
    row = cur.execute(
        "SELECT 1 FROM ocr_words WHERE document_id = ? LIMIT 1", [document_id]
    ).fetchone()
    return row is not None


def ocr_pages(cur: duckdb.DuckDBPyConnection, document_id: int) -> list[int]:
    rows = cur.execute(
        "SELECT DISTINCT page FROM ocr_words WHERE document_id = ? ORDER BY page", [document_id]
    ).fetchall()
    return [int(r[0]) for r in rows]


def ocr_counts(cur: duckdb.DuckDBPyConnection) -> dict[str, int]:
    """Indexed documents read (at least in part) by OCR, per library folder."""
    rows = cur.execute(
        """SELECT d.folder, count(*) FROM documents d
           WHERE d.state = 'indexed'
             AND d.id IN (SELECT DISTINCT document_id FROM ocr_words)
           GROUP BY d.folder"""
    ).fetchall()
    return {disk_path(str(r[0])): int(r[1]) for r in rows}


def ocr_document_ids(cur: duckdb.DuckDBPyConnection) -> set[int]:
    rows = cur.execute("SELECT DISTINCT document_id FROM ocr_words").fetchall()
    return {int(r[0]) for r in rows}


def scanned_waiting(cur: duckdb.DuckDBPyConnection) -> set[str]:
    """Paths that failed as scanned while OCR was off: read again once it is on."""
    rows = cur.execute(
        "SELECT path FROM documents WHERE state = 'failed' AND reason = ?", [_SCANNED_REASON]
    ).fetchall()
    return {disk_path(str(r[0])) for r in rows}
