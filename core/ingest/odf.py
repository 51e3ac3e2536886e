"""OpenDocument files: text (.odt), presentations (.odp) and spreadsheets (.ods).

All three are a zip holding ``content.xml``; it is read directly with lxml (no entity
expansion, bounded sizes, see ``bounds``). Spreadsheets are streamed row by row, since a
large sheet's XML would not fit in memory as a tree; text and slides are read whole.
"""

from __future__ import annotations

import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from core.errors import DamagedFileError, EncryptedError
from core.ingest.bounds import Composer, iter_xml, open_package, read_xml
from core.ingest.pptx import SPEAKER_NOTES
from core.ingest.tables import CellBudget, add_sheet, cell_text, sheet_notice
from core.ingest.text import clean_inline, sensible_title
from core.records import BlockKind, ParsedDocument

_NS = {
    "office": "urn:oasis:names:tc:opendocument:xmlns:office:1.0",
    "text": "urn:oasis:names:tc:opendocument:xmlns:text:1.0",
    "table": "urn:oasis:names:tc:opendocument:xmlns:table:1.0",
    "draw": "urn:oasis:names:tc:opendocument:xmlns:drawing:1.0",
    "presentation": "urn:oasis:names:tc:opendocument:xmlns:presentation:1.0",
    "dc": "http://purl.org/dc/elements/1.1/",
    "manifest": "urn:oasis:names:tc:opendocument:xmlns:manifest:1.0",
}


def _q(prefix: str, name: str) -> str:
    return f"{{{_NS[prefix]}}}{name}"


_P, _H, _SPAN, _S, _TAB, _BR = (
    _q("text", "p"),
    _q("text", "h"),
    _q("text", "span"),
    _q("text", "s"),
    _q("text", "tab"),
    _q("text", "line-break"),
)
_LIST, _LIST_ITEM, _LIST_HEADER = (
    _q("text", "list"),
    _q("text", "list-item"),
    _q("text", "list-header"),
)
_SECTION, _NOTE, _NOTE_CITATION = (
    _q("text", "section"),
    _q("text", "note"),
    _q("text", "note-citation"),
)
_TOC = (
    _q("text", "table-of-content"),
    _q("text", "illustration-index"),
    _q("text", "sequence-decls"),
)
_TABLE, _ROW, _CELL, _COVERED = (
    _q("table", "table"),
    _q("table", "table-row"),
    _q("table", "table-cell"),
    _q("table", "covered-table-cell"),
)
_PAGE, _FRAME = _q("draw", "page"), _q("draw", "frame")
_NOTES = _q("presentation", "notes")
_PRESENTATION_CLASS = _q("presentation", "class")
_ROWS_REPEATED = _q("table", "number-rows-repeated")
_COLS_REPEATED = _q("table", "number-columns-repeated")
_TABLE_NAME = _q("table", "name")
_OUTLINE = _q("text", "outline-level")
_SPACES = _q("text", "c")
# Repeats beyond this are padding (LibreOffice pads rows to column 1024 and sheets to
# row 1,048,576) or a crafted file; either way nothing more is gained by expanding them.
_MAX_REPEAT = 1_000

_KINDS = {
    "odt": ("OpenDocument text", "office:text"),
    "odp": ("OpenDocument presentation", "office:presentation"),
    "ods": ("OpenDocument spreadsheet", "office:spreadsheet"),
}


_MIMETYPES = {"odt": "text", "odp": "presentation", "ods": "spreadsheet"}


def _inline(element: Any) -> str:
    """The text of a paragraph with its spans, spaces, tabs and line breaks; footnote
    markers are left out (the note's body follows as text of its own)."""
    pieces: list[str] = []

    def walk(node: Any) -> None:
        if node.text:
            pieces.append(node.text)
        for child in node:
            tag = child.tag
            if tag == _S:
                pieces.append(" " * min(int(child.get(_SPACES, "1") or 1), 100))
            elif tag == _TAB:
                pieces.append("\t")
            elif tag == _BR:
                pieces.append("\n")
            elif tag == _NOTE_CITATION:
                pass
            elif tag == _NOTE:
                # Only the citation inside a note is skipped; its body reads inline.
                for part in child:
                    if part.tag != _NOTE_CITATION:
                        pieces.append(" ")
                        walk(part)
            elif isinstance(tag, str):
                walk(child)
            if child.tail:
                pieces.append(child.tail)

    walk(element)
    return "".join(pieces)


def _paragraphs(element: Any) -> Iterator[Any]:
    """Paragraphs and headings under ``element`` in reading order."""
    for node in element.iter(_P, _H):
        if node.tag == _P and node.getparent() is not None and node.getparent().tag == _NOTE:
            continue
        yield node


def _table_text(table: Any) -> str:
    rows: list[str] = []
    for row in table.iter(_ROW):
        cells = []
        for cell in row:
            if cell.tag in (_CELL, _COVERED):
                text = " ".join(clean_inline(_inline(p)) for p in cell.iter(_P, _H))
                repeat = min(int(cell.get(_COLS_REPEATED, "1") or 1), _MAX_REPEAT if text else 1)
                cells.extend([text] * repeat)
        while cells and not cells[-1]:
            cells.pop()
        if cells:
            rows.append(" | ".join(cells))
    return "\n".join(rows)


def _check(path: Path, kind: str) -> tuple[zipfile.ZipFile, Any]:
    what, body_tag = _KINDS[kind]
    package = open_package(path, what)
    names = set(package.namelist())
    if "mimetype" in names:
        mimetype = package.read("mimetype")[:100].decode("ascii", "replace").strip()
        expected = f"application/vnd.oasis.opendocument.{_MIMETYPES[kind]}"
        if mimetype.startswith("application/vnd.oasis.opendocument.") and mimetype != expected:
            package.close()
            found = mimetype.rsplit(".", 1)[-1]
            raise DamagedFileError(
                f"damaged {what}: it holds an OpenDocument {found} (wrong extension?)"
            )
    if "META-INF/manifest.xml" in names:
        manifest = read_xml(package, "META-INF/manifest.xml", what)
        if manifest.find(".//manifest:encryption-data", _NS) is not None:
            package.close()
            raise EncryptedError("encrypted", hint="Save an unprotected copy to index it.")
    if "content.xml" not in names:
        package.close()
        raise DamagedFileError(f"damaged {what}: no content.xml (not an OpenDocument file?)")
    return package, body_tag


def _title(package: zipfile.ZipFile, what: str) -> str:
    if "meta.xml" not in package.namelist():
        return ""
    try:
        meta = read_xml(package, "meta.xml", what)
    except DamagedFileError:
        return ""
    found = meta.find(".//dc:title", _NS)
    return sensible_title(found.text if found is not None else "")


def _body(package: zipfile.ZipFile, what: str, body_tag: str) -> Any:
    content = read_xml(package, "content.xml", what)
    body = content.find(f"office:body/{body_tag}", _NS)
    if body is None:
        raise DamagedFileError(f"damaged {what}: its content is not {what.split()[-1]} content")
    return body


def _text_document(composer: Composer, body: Any) -> str:
    headings: list[tuple[int, str]] = []
    first_heading = ""

    def walk(container: Any, list_depth: int = 0) -> None:
        nonlocal first_heading
        for node in container:
            if composer.full:
                return
            tag = node.tag
            path_now = tuple(t for _, t in headings)
            if tag == _H:
                text = clean_inline(_inline(node))
                if not text:
                    continue
                level = int(node.get(_OUTLINE, "1") or 1)
                while headings and headings[-1][0] >= level:
                    headings.pop()
                headings.append((level, text))
                first_heading = first_heading or text
                composer.add(BlockKind.HEADING, text, tuple(t for _, t in headings))
            elif tag == _P:
                kind = BlockKind.LIST_ITEM if list_depth else BlockKind.PARAGRAPH
                composer.add(kind, _inline(node), path_now)
            elif tag == _LIST:
                walk(node, list_depth + 1)
            elif tag in (_LIST_ITEM, _LIST_HEADER, _SECTION):
                walk(node, list_depth)
            elif tag == _TABLE:
                composer.add(BlockKind.TABLE, _table_text(node), path_now)
            elif tag in _TOC:
                continue  # a table of contents repeats the headings that follow
            elif isinstance(tag, str) and len(node):
                walk(node, list_depth)  # frames, text boxes, change tracking wrappers

    walk(body)
    return first_heading


def _slide_title(page: Any, number: int) -> str:
    for frame in page.iter(_FRAME):
        if frame.get(_PRESENTATION_CLASS) == "title":
            text = " ".join(clean_inline(_inline(p)) for p in _paragraphs(frame))
            if text.strip():
                return text
    return ""


def _presentation(composer: Composer, body: Any) -> int:
    count = 0
    for number, page in enumerate(body.iter(_PAGE), start=1):
        count = number
        if composer.full:
            break
        title = _slide_title(page, number)
        heading = f"Slide {number}: {title}" if title else f"Slide {number}"
        path = (heading,)
        composer.add(BlockKind.HEADING, heading, path, number)
        notes = page.find(_NOTES)
        for node in _paragraphs(page):
            if notes is not None and any(a is notes for a in node.iterancestors(_NOTES)):
                continue
            text = _inline(node)
            if title and clean_inline(text) == title:
                continue
            composer.add(BlockKind.PARAGRAPH, text, path, number)
        for table in page.iter(_TABLE):
            composer.add(BlockKind.TABLE, _table_text(table), path, number)
        said = [_inline(node) for node in _paragraphs(notes)] if notes is not None else []
        if any(map(str.strip, said)):
            # Labelled in the text, as in .pptx: notes are not words on the slide.
            notes_path = (*path, SPEAKER_NOTES)
            composer.add(BlockKind.HEADING, SPEAKER_NOTES, notes_path, number)
            for text in said:
                composer.add(BlockKind.PARAGRAPH, text, notes_path, number)
    return count


def _sheet_rows(elements: Iterator[Any]) -> Iterator[tuple[str, Iterator[tuple[int, list[str]]]]]:
    """Group streamed rows by sheet: (sheet name, its rows with their numbers)."""
    pending: list[Any] = []
    stream = iter(elements)

    def next_row() -> Any:
        if pending:
            return pending.pop()
        return next(stream, None)

    while True:
        row = next_row()
        if row is None:
            return
        table = next(row.iterancestors(_TABLE), None)
        name = table.get(_TABLE_NAME, "") if table is not None else ""

        def rows(first: Any = row, table: Any = table) -> Iterator[tuple[int, list[str]]]:
            number = 0
            current = first
            while current is not None:
                if next(current.iterancestors(_TABLE), None) is not table:
                    pending.append(current)
                    return
                repeat = int(current.get(_ROWS_REPEATED, "1") or 1)
                cells = _row_cells(current)
                _release(current)
                if any(cells):
                    for _ in range(min(repeat, _MAX_REPEAT)):
                        number += 1
                        yield number, list(cells)
                    number += max(0, repeat - _MAX_REPEAT)
                else:
                    number += repeat
                current = next(stream, None)

        yield name, rows()


def _row_cells(row: Any) -> list[str]:
    cells: list[str] = []
    for cell in row:
        if cell.tag not in (_CELL, _COVERED):
            continue
        text = " ".join(clean_inline(_inline(p)) for p in cell.iter(_P))
        if not text and cell.tag == _CELL:
            value = cell.get(_q("office", "value")) or cell.get(_q("office", "date-value"))
            text = cell_text(value)
        repeat = int(cell.get(_COLS_REPEATED, "1") or 1)
        cells.extend([text] * min(repeat, _MAX_REPEAT))
    return cells


def _release(row: Any) -> None:
    # Keep memory flat while streaming: drop the row and the siblings read before it.
    row.clear()
    parent = row.getparent()
    if parent is not None:
        while row.getprevious() is not None:
            del parent[0]


def _spreadsheet(composer: Composer, package: zipfile.ZipFile, what: str) -> CellBudget:
    budget = CellBudget()
    rows = iter_xml(package, "content.xml", (_ROW,), what)
    for name, sheet_rows in _sheet_rows(rows):
        add_sheet(composer, name, sheet_rows, budget)
        if composer.full or budget.exceeded:
            break
    return budget


def _parse(path: Path, kind: str) -> ParsedDocument:
    what = _KINDS[kind][0]
    package, body_tag = _check(path, kind)
    with package:
        title = _title(package, what)
        composer = Composer()
        if kind == "ods":
            budget = _spreadsheet(composer, package, what)
            return composer.build(
                title or path.stem,
                notice=sheet_notice(composer, budget),
                empty="no values in the spreadsheet",
            )
        body = _body(package, what, body_tag)
        if kind == "odp":
            slides = _presentation(composer, body)
            return composer.build(
                title or path.stem, page_count=slides, empty="no text on the slides"
            )
        first_heading = _text_document(composer, body)
        return composer.build(title or first_heading or path.stem)


def parse_odt(path: Path) -> ParsedDocument:
    return _parse(path, "odt")


def parse_odp(path: Path) -> ParsedDocument:
    return _parse(path, "odp")


def parse_ods(path: Path) -> ParsedDocument:
    return _parse(path, "ods")
