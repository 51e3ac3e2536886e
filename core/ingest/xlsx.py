"""Excel workbooks (.xlsx, .xlsm): every worksheet, row by row.

openpyxl's read-only mode streams each sheet's XML instead of building all cells in
memory, so memory stays flat however large the sheet; the cell budget and text limit
stop the reading. Cached values are read (``data_only``): what the person saw, not the
formulas behind it.
"""

from __future__ import annotations

import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from core.errors import DamagedFileError, EncryptedError
from core.ingest.bounds import Composer, check_xml_members, open_package
from core.ingest.tables import CellBudget, add_sheet, cell_text, sheet_notice
from core.ingest.text import sensible_title
from core.records import ParsedDocument

_WHAT = "Excel file"
_OLE_MAGIC = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"


def _rows(sheet: Any) -> Iterator[tuple[int, list[str]]]:
    # After reset_dimensions, rows are not padded to the size the file claims (a crafted
    # "A1:XFD1048576" would otherwise mean a million rows of 16,384 empty cells).
    sheet.reset_dimensions()
    for number, values in enumerate(sheet.iter_rows(values_only=True), start=1):
        yield number, [cell_text(v) for v in values]


def parse(path: Path) -> ParsedDocument:
    with path.open("rb") as handle:
        if handle.read(8).startswith(_OLE_MAGIC):
            raise EncryptedError(
                "encrypted, or the old Excel format (.xls)",
                hint="Save an unprotected .xlsx copy to index it.",
            )
    package = open_package(path, _WHAT)
    with package:
        check_xml_members(package, (".xml", ".rels"))
    import openpyxl
    from openpyxl.utils.exceptions import InvalidFileException

    try:
        workbook = openpyxl.load_workbook(path, read_only=True, data_only=True)
    except (InvalidFileException, zipfile.BadZipFile, KeyError, ValueError, TypeError) as exc:
        raise DamagedFileError(
            f"damaged {_WHAT}: not an Excel workbook ({type(exc).__name__})"
        ) from exc
    try:
        composer = Composer()
        budget = CellBudget()
        for sheet in workbook.worksheets:
            if not hasattr(sheet, "iter_rows"):
                continue  # a chart sheet
            add_sheet(composer, str(sheet.title), _rows(sheet), budget)
            if composer.full or budget.exceeded:
                break
        title = sensible_title(workbook.properties.title) or path.stem
    finally:
        workbook.close()
    return composer.build(
        title, notice=sheet_notice(composer, budget), empty="no values in the workbook"
    )
