"""Tables on PDF pages, read row by row with their column names (pdfplumber).

pypdf reads a table as runs of text in drawing order, so a row's label and values run
together ("618.00SENATOR'S TRANSPORTATION") and nothing says which value is in which
column. pdfplumber finds the table's grid (ruling lines, or for an unruled table of
figures, the columns the words line up in) and gives each cell its text. A table found
here replaces the lines pypdf read from the same place (``merge``): one line per row,
cells joined by `` | ``, the header row first, which is how every other format writes a
table and how the extractive answer reads one (a row labelled with its column names).

pdfplumber is pure Python and parses a page again from scratch, so it only looks at
pages where a cheap check on pypdf's text says there may be a table, skips pages whose
content is too big to read in reasonable time, and stops looking after a time budget
per document. Whatever fails here costs the tables only: the page keeps pypdf's text.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

CELL_SEP = " | "
# Time one document may spend looking for tables; the pages after it keep pypdf's text.
# Counted between pages, so one page can overrun it by its own time, which the content
# bound below keeps to about a second.
TIME_BUDGET_S = 4.0
MAX_CONTENT_BYTES = 600_000  # a page's drawing instructions, decoded
MAX_PAGE_CHARS = 20_000  # pypdf's text of the page
MAX_CELL_CHARS = 300  # a "cell" longer than this is a page region, not a table's cell
MIN_FIGURE_LINES = 4  # lines of three or more figures that make a page worth looking at
# A pypdf line whose letters and digits are this much the table's is the table's.
_LINE_COVERED = 0.8
# The lines replaced must hold this much of the table's text, or the two readings
# disagree on where the table is and pypdf's text is kept.
_TABLE_COVERED = 0.7
# A row filled in at least this share of its columns is a row of data.
_DENSE = 0.6

# A figure, or a dash standing for none ("―", "-"); "△" and "▲" mark negatives in
# Japanese accounts.
_FIGURE = re.compile(r"(?<![\w.])(?:[-+(△▲−]?[$€£]?\d[\d,.]*%?\)?|[-–—―]+)(?![\w])")
_WORD = re.compile(r"\w+")
_RULE_OPS = re.compile(rb"(?<![A-Za-z])(?:re|l)(?![A-Za-z])")
_DIGIT = re.compile(r"\d")


@dataclass(frozen=True)
class Table:
    header: tuple[str, ...]  # empty when the table has no header row of its own
    rows: tuple[tuple[str, ...], ...]

    def lines(self) -> list[str]:
        out = [_line(self.header)] if self.header else []
        out.extend(_line(row) for row in self.rows)
        return out


def _line(cells: Sequence[str]) -> str:
    # The extractive answer reads cells by splitting on "|" after stripping the line's
    # outer pipes, so an empty first cell would shift every column: it gets a dash. The
    # empty cells after a row's label stay: a line of one cell is no table row to it.
    first = cells[0] if cells and cells[0] else "—"
    return CELL_SEP.join([first, *cells[1:]]).rstrip()


def may_have_table(text: str, content: bytes | None) -> bool:
    """The cheap check: several lines holding three or more figures (a table of numbers),
    or ruling lines drawn on a page of short lines (a ruled table of words)."""
    figure_lines = sum(1 for line in text.split("\n") if len(_FIGURE.findall(line)) >= 3)
    if figure_lines >= MIN_FIGURE_LINES:
        return True
    if content is None:
        return False
    return len(_RULE_OPS.findall(content)) >= 24


def _clean_cell(cell: Any) -> str:
    text = " ".join(str(cell).split()) if cell is not None else ""
    return text.replace("|", "/")


def _shape(raw: list[list[Any]], ruled: bool) -> Table | None:
    """A table from pdfplumber's cells, or None when the grid is not a table: one
    column, a page region taken for a cell, or no rows of data."""
    rows = [[_clean_cell(c) for c in row] for row in raw]
    rows = [row for row in rows if any(row)]
    if len(rows) < 2:
        return None
    width = max(len(row) for row in rows)
    rows = [row + [""] * (width - len(row)) for row in rows]
    used = [i for i in range(width) if any(row[i] for row in rows)]
    rows = [[row[i] for i in used] for row in rows]
    width = len(used)
    if width < 2 or any(len(c) > MAX_CELL_CHARS for row in rows for c in row):
        return None
    filled = [sum(1 for c in row if c) for row in rows]
    # The first row of data: a label and figures ("Germany | 27.5 | 81.9").
    data = next((i for i, row in enumerate(rows) if row[0] and _figure_share(row) >= 0.5), None)
    if data is None:
        return None
    last = max(i for i, row in enumerate(rows) if row[0] and _figure_share(row) >= 0.5)
    body = rows[data : last + 1]
    # The header: the nearest full row above the data (rows of labels such as "Actual"
    # or "REGION : EAST" may come between), with, in a ruled table, the rows of words
    # just above it ("hypermarkets" set over "1996").
    head = next(
        (i for i in range(data - 1, max(-1, data - 4), -1) if filled[i] >= _DENSE * width),
        None,
    )
    if head is None:
        return Table((), tuple(tuple(row) for row in body)) if len(body) >= 2 else None
    body = rows[head + 1 : last + 1]
    above = head
    while ruled and above > max(0, head - 2) and not _DIGIT.search("".join(rows[above - 1])):
        above -= 1
    head_rows = rows[above : head + 1]
    header = tuple(" ".join(r[i] for r in head_rows if r[i]) for i in range(width))
    return Table(header, tuple(tuple(row) for row in body))


def _figure_share(row: Sequence[str]) -> float:
    filled = [c for c in row[1:] if c]
    return sum(1 for c in filled if _FIGURE.fullmatch(c)) / len(filled) if filled else 0.0


def _numeric(table: Table) -> bool:
    """Most cells past the first column are figures: what a table read from the
    alignment of words (no ruling lines) must be, or prose in columns passes too."""
    cells = [c for row in table.rows for c in row[1:] if c]
    return bool(cells) and sum(1 for c in cells if _DIGIT.search(c)) >= 0.6 * len(cells)


def _as_read(table: Table, text: str) -> bool:
    """Every cell is words pypdf read too, whole: columns guessed from the alignment of
    words can cut a word or a number in two ("haracteristics", "51,5 | 44")."""
    padded = " " + " ".join(text.split()) + " "
    return all(
        f" {cell} " in padded for row in (table.header, *table.rows) for cell in row[1:] if cell
    ) and all(f" {row[0]} " in padded or row[0] == "—" for row in table.rows)


def _page_tables(page: Any, text: str) -> list[Table]:
    found = [t for t in (_shape(t.extract(), True) for t in page.find_tables()) if t is not None]
    if found:
        return found
    # No ruling lines: a table of figures set in columns of aligned words.
    settings = {"vertical_strategy": "text", "horizontal_strategy": "text"}
    return [
        t
        for t in (_shape(t.extract(), False) for t in page.find_tables(settings))
        if t is not None
        and _numeric(t)
        and len(t.rows) >= 3
        and len(t.rows[0]) >= 3
        and _as_read(t, text)
    ]


def find_tables(
    path: Path, pages: dict[int, str], clock: Callable[[], float] = time.monotonic
) -> dict[int, list[Table]]:
    """The tables of the given pages (1-based number: pypdf's text of the page), by
    page."""
    if not pages:
        return {}
    try:
        import pdfplumber
    except ImportError:  # a build without it reads tables as pypdf does
        return {}
    # pdfminer logs every oddity of a damaged file as a warning; they are not the user's.
    logging.getLogger("pdfminer").setLevel(logging.ERROR)
    out: dict[int, list[Table]] = {}
    deadline = clock() + TIME_BUDGET_S
    try:
        with pdfplumber.open(str(path)) as pdf:
            count = len(pdf.pages)
            for number, text in sorted(pages.items()):
                if clock() > deadline or number > count:
                    break
                page = pdf.pages[number - 1]
                try:
                    tables = _page_tables(page, text)
                except MemoryError:
                    raise
                except Exception:
                    tables = []  # a page pdfminer cannot read keeps pypdf's text
                finally:
                    page.close()
                if tables:
                    out[number] = tables
    except MemoryError:
        raise
    except Exception:
        return out  # a file pdfminer cannot open at all: pypdf's text stands
    return out


# --- putting a table in the page's text ----------------------------------------------


def _fold(text: str) -> str:
    return "".join(ch for ch in text.casefold() if ch.isalnum())


def _covered(line: str, words: Sequence[str]) -> float:
    """The share of ``line``'s letters and digits that are words of the table (found
    inside it, so cells pypdf ran together still count)."""
    rest = _fold(line)
    total = len(rest)
    if not total:
        return 0.0
    for word in words:
        if word in rest:
            rest = rest.replace(word, " ")
    return 1 - sum(ch.isalnum() for ch in rest) / total


def merge(
    lines: list[str], tables: Sequence[Table]
) -> tuple[list[str], list[int], list[tuple[int, int]]]:
    """``lines`` with each table's lines in place of the lines pypdf read from it; for
    each line of the result, the line of ``lines`` it is (-1 for a table's line); and the
    tables' line ranges (start, end exclusive) in the result. A table that cannot be
    placed is left out: pypdf's text of it stays."""
    spans: list[tuple[int, int, Table]] = []
    for table in tables:
        cells = [c for row in (table.header, *table.rows) for c in row if c and c != "—"]
        words = sorted({_fold(w) for c in cells for w in _WORD.findall(c)} - {""}, key=len)[::-1]
        if not words:
            continue
        weights = []
        for i, line in enumerate(lines):
            if any(s <= i < e for s, e, _ in spans):
                weights.append(-1000.0)  # another table's lines
            elif not line.strip():
                weights.append(0.0)
            else:
                weights.append(1.0 if _covered(line, words) >= _LINE_COVERED else -2.0)
        best = _best_run(weights)
        if best is None:
            continue
        start, end = best
        region = _fold("".join(lines[start:end]))
        table_chars = sum(len(w) for w in words)
        found = sum(len(w) for w in words if w in region)
        if found < _TABLE_COVERED * table_chars:
            continue
        spans.append((start, end, table))
    spans.sort(key=lambda s: s[0])
    out: list[str] = []
    origin: list[int] = []
    ranges: list[tuple[int, int]] = []
    at = 0

    def keep(upto: int) -> None:
        out.extend(lines[at:upto])
        origin.extend(range(at, upto))

    def blank() -> None:
        # A blank line parts the table from the text around it (and from the next
        # table, which the answer reads with a header of its own).
        out.append("")
        origin.append(-1)

    for start, end, table in spans:
        keep(start)
        if out and out[-1].strip():
            blank()
        rows = table.lines()
        ranges.append((len(out), len(out) + len(rows)))
        out.extend(rows)
        origin.extend([-1] * len(rows))
        if end < len(lines) and lines[end].strip():
            blank()
        at = end
    keep(len(lines))
    return out, origin, ranges


def _best_run(weights: Sequence[float]) -> tuple[int, int] | None:
    """The run of lines with the largest sum of weights (Kadane), trimmed of blank
    lines; None when no run has two lines of the table."""
    best, best_span = 0.0, None
    total, start = 0.0, 0
    for i, w in enumerate(weights):
        if total <= 0:
            total, start = 0.0, i
        total += w
        if total > best:
            best, best_span = total, (start, i + 1)
    if best_span is None or best < 2:
        return None
    s, e = best_span
    while s < e and weights[s] == 0:
        s += 1
    while e > s and weights[e - 1] == 0:
        e -= 1
    return s, e
