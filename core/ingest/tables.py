"""Sheets (Excel, OpenDocument, CSV) as text: one line per row, the place of each row
recorded, and the header row carried in the heading path.

A sheet is one section (a heading with its name) and each row is one block, so the
chunker packs whole rows and never splits one. Rows are separated like paragraphs, so
each row is also one "sentence" to the citation finder: a citation highlights, and
names, the exact row. The heading path is (sheet, header row):
the chunker puts it in every chunk's context, so each chunk of rows is embedded and
searched together with the column names it needs to make sense.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable
from datetime import date, datetime, time
from pathlib import Path
from typing import Any

from core.errors import DamagedFileError
from core.ingest.bounds import MAX_CELLS, MAX_TEXT_CHARS, Composer, limit_notice
from core.ingest.text import decode_text, read_bytes
from core.records import BlockKind, ParsedDocument

MAX_CELL_CHARS = 2_000  # a cell holding a whole essay is cut; the row stays one unit
MAX_HEADER_CHARS = 300
_CELL_SEP = " | "
# CSV files larger than this are read only up to it (the text limit stops well before).
MAX_CSV_BYTES = 64 * 1024 * 1024


def cell_text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, float):
        return str(int(value)) if value.is_integer() and abs(value) < 1e15 else f"{value:g}"
    if isinstance(value, datetime):
        return value.date().isoformat() if value.time() == time() else value.isoformat(" ")
    if isinstance(value, (date, time)):
        return value.isoformat()
    text = " ".join(str(value).split())
    return text if len(text) <= MAX_CELL_CHARS else text[: MAX_CELL_CHARS - 1] + "…"


class CellBudget:
    """Counts non-empty cells across a workbook and stops reading at ``MAX_CELLS``."""

    def __init__(self, limit: int = MAX_CELLS) -> None:
        self.limit = limit
        self.used = 0
        self.exceeded = False

    def take(self, n: int) -> bool:
        if self.used + n > self.limit:
            self.exceeded = True
            return False
        self.used += n
        return True


def add_sheet(
    composer: Composer,
    name: str,
    rows: Iterable[tuple[int, list[str]]],
    budget: CellBudget,
) -> int:
    """Add one sheet: ``rows`` yields (row number, cell texts). Returns rows added."""
    header: tuple[str, ...] | None = None
    added = 0
    for number, cells in rows:
        while cells and not cells[-1]:
            cells.pop()
        filled = sum(1 for c in cells if c)
        if not filled:
            continue
        if not budget.take(filled):
            break
        line = _CELL_SEP.join(cells)
        if header is None:
            names = _CELL_SEP.join(c for c in cells if c)
            if len(names) > MAX_HEADER_CHARS:
                names = names[: MAX_HEADER_CHARS - 1] + "…"
            header = (name, names) if name else (names,)
            if name:
                # At the header's row, so a chunk starting with the sheet's name has a place.
                composer.add(BlockKind.HEADING, name, header, number)
        if composer.add(BlockKind.TABLE, line, header, number) is None:
            break
        added += 1
        if composer.full:
            break
    return added


def sheet_notice(composer: Composer, budget: CellBudget) -> str:
    if budget.exceeded:
        return limit_notice(f"{budget.limit:,} cells")
    if composer.full:
        return limit_notice(f"{MAX_TEXT_CHARS:,} characters of text")
    return ""


def _csv_rows(text: str) -> Iterable[tuple[int, list[str]]]:
    try:
        dialect: Any = csv.Sniffer().sniff(text[:8192], delimiters=",;\t|")
    except csv.Error:
        dialect = csv.excel
    reader = csv.reader(io.StringIO(text), dialect)
    try:
        # Numbered by record, as a spreadsheet shows the file (a quoted cell may span lines).
        for number, row in enumerate(reader, start=1):
            yield number, [cell_text(c) for c in row]
    except csv.Error as exc:
        raise DamagedFileError(f"damaged CSV file: {exc}") from exc


def parse(path: Path) -> ParsedDocument:
    """A .csv file: one sheet without a name; the location is the row number."""
    if path.stat().st_size > MAX_CSV_BYTES:
        with path.open("rb") as handle:
            data = handle.read(MAX_CSV_BYTES)
        data = data[: data.rfind(b"\n") + 1] or data
        cut = True
    else:
        data, cut = read_bytes(path), False
    text = decode_text(data)
    csv.field_size_limit(MAX_CSV_BYTES)
    composer = Composer()
    budget = CellBudget()
    add_sheet(composer, "", _csv_rows(text), budget)
    notice = sheet_notice(composer, budget) or (
        limit_notice(f"{MAX_CSV_BYTES // (1024 * 1024)} MB") if cut else ""
    )
    return composer.build(path.stem, notice=notice, empty="no values in the file")
