"""Word (.docx) files.

python-docx's ``Document.paragraphs`` and ``.tables`` lose the order between the two, and
``Paragraph.text`` skips tracked insertions and content controls, so this walks the body
XML itself, in order, and reads text from the ``w:t`` runs directly.
"""

from __future__ import annotations

import re
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import docx
from docx.opc.exceptions import PackageNotFoundError
from docx.oxml.ns import qn
from lxml import etree

from core.errors import (
    DamagedFileError,
    EncryptedError,
    NoTextError,
    ParseLimitError,
    UnsupportedFileError,
)
from core.ingest.bounds import MAX_XML_TREE_BYTES, check_xml_members, open_package
from core.ingest.text import EMPTY_FILE, DocBuilder, clean_inline, sensible_title
from core.records import BlockKind, ParsedDocument

_P, _TBL, _TR, _TC = qn("w:p"), qn("w:tbl"), qn("w:tr"), qn("w:tc")
_SDT, _SDT_CONTENT, _CUSTOM_XML = qn("w:sdt"), qn("w:sdtContent"), qn("w:customXml")
_T, _TAB, _BR, _CR = qn("w:t"), qn("w:tab"), qn("w:br"), qn("w:cr")
_MC = "http://schemas.openxmlformats.org/markup-compatibility/2006"
# Tab-stop definitions live in w:pPr as w:tab too; a text box appears twice, once as
# drawing (mc:Choice) and once as a legacy VML fallback (mc:Fallback).
_SKIP_SUBTREES = frozenset({qn("w:pPr"), qn("w:rPr"), f"{{{_MC}}}Fallback"})
_HEADING_NAME = re.compile(r"^heading\s*([1-9])$", re.IGNORECASE)
_WHAT = "Word file"
_XML_PARTS = (".xml", ".rels")
_OLE_MAGIC = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"
# Password-protected .docx files are OLE containers holding an "EncryptedPackage" stream.
_ENCRYPTED_PACKAGE = "EncryptedPackage".encode("utf-16-le")


@dataclass(frozen=True)
class _Style:
    name: str
    heading_level: int | None  # 0 for Title, 1-9 for headings, None for body text
    is_list: bool
    is_toc: bool


def _outline_level(element: Any) -> int | None:
    values = element.xpath("./w:pPr/w:outlineLvl/@w:val")
    if values and values[0].isdigit() and int(values[0]) < 9:
        return int(values[0]) + 1
    return None


def _read_styles(document: Any) -> dict[str, _Style]:
    raw: dict[str, tuple[str, int | None, bool, str]] = {}
    try:
        styles_element = document.styles.element
    except (KeyError, AttributeError):
        return {}
    for style in styles_element.iterchildren(qn("w:style")):
        style_id = style.get(qn("w:styleId")) or ""
        names = style.xpath("./w:name/@w:val")
        based = style.xpath("./w:basedOn/@w:val")
        has_num = bool(style.xpath("./w:pPr/w:numPr"))
        raw[style_id] = (
            names[0] if names else style_id,
            _outline_level(style),
            has_num,
            based[0] if based else "",
        )

    def resolve(style_id: str) -> _Style:
        name, outline, has_num, based = raw[style_id]
        lowered = name.lower()
        level: int | None
        if match := _HEADING_NAME.match(lowered):
            level = int(match.group(1))
        elif lowered == "title":
            level = 0
        else:
            level = outline
            seen = {style_id}
            # Custom heading styles often inherit their outline level from a parent.
            while level is None and based in raw and based not in seen:
                seen.add(based)
                level = raw[based][1]
                based = raw[based][3]
        return _Style(name, level, has_num or lowered.startswith("list"), lowered.startswith("toc"))

    return {style_id: resolve(style_id) for style_id in raw}


def _text_of(element: Any) -> str:
    pieces: list[str] = []
    stack = [element]
    while stack:
        node = stack.pop()
        tag = node.tag
        if tag in _SKIP_SUBTREES:
            continue
        if tag == _T:
            pieces.append(node.text or "")
        elif tag == _TAB:
            pieces.append("\t")
        elif tag in (_BR, _CR):
            pieces.append("\n")
        else:
            stack.extend(reversed(node))
    return "".join(pieces)


def _body_items(container: Any) -> Any:
    """Paragraphs and tables in reading order, looking inside content controls."""
    for child in container.iterchildren():
        if child.tag in (_P, _TBL):
            yield child
        elif child.tag == _SDT:
            for content in child.iterchildren(_SDT_CONTENT):
                yield from _body_items(content)
        elif child.tag == _CUSTOM_XML:
            yield from _body_items(child)


def _nearest(node: Any, tag: str) -> Any:
    return next(node.iterancestors(tag), None)


def _table_text(table: Any) -> str:
    rows: list[str] = []
    for tr in table.iter(_TR):
        if _nearest(tr, _TBL) is not table:
            continue  # a row of a nested table: already read as part of its cell
        cells = []
        for tc in tr.iter(_TC):
            if _nearest(tc, _TR) is tr:
                paragraphs = (_text_of(p) for p in tc.iter(_P))
                cells.append(" ".join(" ".join(t.split()) for t in paragraphs if t.strip()))
        if any(cells):
            rows.append(" | ".join(cells))
    return "\n".join(rows)


def _check_container(path: Path) -> None:
    """Refuse what is not a .docx before python-docx unpacks any of it: an old or
    encrypted Word file, a zip bomb (a 918 KB file whose text unpacked to 900 MB was
    unpacked up to the reader's memory limit), or XML that declares entities."""
    with path.open("rb") as handle:
        head = handle.read(8)
        if not head:
            raise DamagedFileError(EMPTY_FILE)
        if head.startswith(_OLE_MAGIC):
            if _ENCRYPTED_PACKAGE in handle.read(4 * 1024 * 1024):
                raise EncryptedError("encrypted")
            raise UnsupportedFileError("old Word format (.doc); save it as .docx")
    with open_package(path, _WHAT) as package:
        # python-docx reads each XML part it loads as one tree.
        for info in package.infolist():
            if info.filename.endswith(_XML_PARTS) and info.file_size > MAX_XML_TREE_BYTES:
                raise ParseLimitError(
                    f"{info.filename} is {info.file_size // (1024 * 1024):,} MB of XML, more "
                    f"than the {MAX_XML_TREE_BYTES // (1024 * 1024)} MB Lectern reads from one part"
                )
        check_xml_members(package, _XML_PARTS)


def parse(path: Path) -> ParsedDocument:
    _check_container(path)
    try:
        document = docx.Document(str(path))
        body = document.element.body
    except (PackageNotFoundError, zipfile.BadZipFile, KeyError, ValueError) as exc:
        raise DamagedFileError(f"damaged Word file: {type(exc).__name__}") from exc
    except etree.XMLSyntaxError as exc:
        raise DamagedFileError("damaged Word file: invalid XML") from exc

    styles = _read_styles(document)
    builder = DocBuilder()
    headings: list[tuple[int, str]] = []
    title_paragraph = ""
    first_h1 = ""
    for item in _body_items(body):
        path_now = tuple(t for _, t in headings)
        if item.tag == _TBL:
            builder.add(BlockKind.TABLE, _table_text(item), path_now)
            continue
        text = _text_of(item)
        if not text.strip():
            continue
        style_ids = item.xpath("./w:pPr/w:pStyle/@w:val")
        style = styles.get(style_ids[0]) if style_ids else None
        if style is not None and style.is_toc:
            continue  # a table of contents repeats the headings that follow
        level = _outline_level(item)
        if level is None and style is not None:
            level = style.heading_level
        if level is not None:
            heading = clean_inline(text)
            if level == 0 and not title_paragraph:
                title_paragraph = heading
            if level == 1 and not first_h1:
                first_h1 = heading
            while headings and headings[-1][0] >= level:
                headings.pop()
            headings.append((level, heading))
            builder.add(BlockKind.HEADING, text, tuple(t for _, t in headings))
            continue
        is_list = bool(item.xpath("./w:pPr/w:numPr")) or (style is not None and style.is_list)
        builder.add(BlockKind.LIST_ITEM if is_list else BlockKind.PARAGRAPH, text, path_now)

    text = builder.text()
    if not text:
        raise NoTextError("no text", hint="The document has no text to index (only images?).")
    try:
        core_title = document.core_properties.title
    except (KeyError, ValueError, AttributeError):
        core_title = ""
    title = sensible_title(core_title) or title_paragraph or first_h1 or path.stem
    return ParsedDocument(text=text, title=title, blocks=tuple(builder.blocks))
