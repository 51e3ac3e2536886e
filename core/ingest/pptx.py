"""PowerPoint decks (.pptx): each slide's text, tables and speaker notes, by slide number.

The slide XML is read directly with lxml rather than through python-pptx: python-pptx
loads every part of the package into memory on open, images and video included, and
brings Pillow with it; only the slides' text is needed here. Slide numbers follow the
deck's order in ``presentation.xml``, as PowerPoint numbers them.
"""

from __future__ import annotations

import posixpath
import zipfile
from pathlib import Path
from typing import Any

from core.errors import DamagedFileError, EncryptedError, UnsupportedFileError
from core.ingest.bounds import Composer, open_package, read_xml
from core.ingest.text import clean_inline, sensible_title
from core.records import BlockKind, ParsedDocument

# The heading over a slide's speaker notes (also for .odp, core/ingest/odf.py).
SPEAKER_NOTES = "Speaker notes"

_WHAT = "PowerPoint file"
_OLE_MAGIC = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"
_ENCRYPTED_PACKAGE = "EncryptedPackage".encode("utf-16-le")
_P = "http://schemas.openxmlformats.org/presentationml/2006/main"
_A = "http://schemas.openxmlformats.org/drawingml/2006/main"
_R = "http://schemas.openxmlformats.org/officeDocument/2006/relationships"
_PKG = "http://schemas.openxmlformats.org/package/2006/relationships"
_NS = {"p": _P, "a": _A, "r": _R, "rel": _PKG, "dc": "http://purl.org/dc/elements/1.1/"}
_TITLE_TYPES = frozenset({"title", "ctrTitle"})
_SKIP_PLACEHOLDERS = frozenset({"sldNum", "dt", "ftr", "hdr", "sldImg"})
_T, _BR, _PARA = f"{{{_A}}}t", f"{{{_A}}}br", f"{{{_A}}}p"
_TBL, _TR, _TC = f"{{{_A}}}tbl", f"{{{_A}}}tr", f"{{{_A}}}tc"
_SP, _GRP, _FRAME = f"{{{_P}}}sp", f"{{{_P}}}grpSp", f"{{{_P}}}graphicFrame"
MAX_SLIDES = 5_000


def _check(path: Path) -> None:
    with path.open("rb") as handle:
        head = handle.read(8)
        if head.startswith(_OLE_MAGIC):
            if _ENCRYPTED_PACKAGE in handle.read(4 * 1024 * 1024):
                raise EncryptedError("encrypted")
            raise UnsupportedFileError("old PowerPoint format (.ppt); save it as .pptx")


def _rels(package: zipfile.ZipFile, part: str) -> dict[str, tuple[str, str]]:
    """Relationship id -> (type, target part name) for ``part``."""
    folder, name = posixpath.split(part)
    rels_name = posixpath.join(folder, "_rels", f"{name}.rels")
    if rels_name not in package.namelist():
        return {}
    found: dict[str, tuple[str, str]] = {}
    for rel in read_xml(package, rels_name, _WHAT).iterfind("rel:Relationship", _NS):
        target = rel.get("Target", "")
        if rel.get("TargetMode") == "External":
            continue
        resolved = posixpath.normpath(posixpath.join(folder, target)).lstrip("/")
        if target.startswith("/"):
            resolved = target.lstrip("/")
        found[rel.get("Id", "")] = (rel.get("Type", ""), resolved)
    return found


def _paragraph_text(paragraph: Any) -> str:
    pieces = []
    for node in paragraph.iter(_T, _BR):
        pieces.append("\n" if node.tag == _BR else node.text or "")
    return "".join(pieces)


def _placeholder(shape: Any) -> str:
    found = shape.find("./p:nvSpPr/p:nvPr/p:ph", _NS)
    if found is None:
        return ""
    return str(found.get("type", "body"))


def _table_text(table: Any) -> str:
    rows = []
    for tr in table.iter(_TR):
        cells = [
            " ".join(clean_inline(_paragraph_text(p)) for p in tc.iter(_PARA)).strip()
            for tc in tr.iter(_TC)
        ]
        while cells and not cells[-1]:
            cells.pop()
        if cells:
            rows.append(" | ".join(cells))
    return "\n".join(rows)


def _shapes(tree: Any) -> Any:
    """Text-bearing shapes in drawing order, looking inside groups."""
    for node in tree:
        if node.tag == _GRP:
            yield from _shapes(node)
        elif node.tag in (_SP, _FRAME):
            yield node


def _slide(composer: Composer, slide: Any, number: int, notes: Any | None) -> None:
    tree = slide.find("./p:cSld/p:spTree", _NS)
    if tree is None:
        return
    title = ""
    bodies: list[tuple[BlockKind, str]] = []
    for shape in _shapes(tree):
        if shape.tag == _FRAME:
            for table in shape.iter(_TBL):
                bodies.append((BlockKind.TABLE, _table_text(table)))
            continue
        kind = _placeholder(shape)
        if kind in _SKIP_PLACEHOLDERS:
            continue
        paragraphs = [_paragraph_text(p) for p in shape.iterfind("./p:txBody/a:p", _NS)]
        if kind in _TITLE_TYPES and not title:
            title = clean_inline(" ".join(paragraphs))
            if title:
                continue
        for text in paragraphs:
            bodies.append((BlockKind.PARAGRAPH, text))
    notes_text: list[str] = []
    notes_tree = notes.find("./p:cSld/p:spTree", _NS) if notes is not None else None
    for shape in _shapes(notes_tree if notes_tree is not None else []):
        if shape.tag == _SP and _placeholder(shape) == "body":
            notes_text.extend(_paragraph_text(p) for p in shape.iterfind("./p:txBody/a:p", _NS))
    if not title and not any(t.strip() for _, t in bodies) and not any(map(str.strip, notes_text)):
        return  # a picture-only slide: a lone "Slide 7" would only be noise in search
    heading = f"Slide {number}: {title}" if title else f"Slide {number}"
    path = (heading,)
    composer.add(BlockKind.HEADING, heading, path, number)
    for kind, text in bodies:
        composer.add(kind, text, path, number)
    if any(map(str.strip, notes_text)):
        # Said in the text, not only in the heading path: shown or quoted, the notes
        # must not read as words on the slide.
        notes_path = (*path, SPEAKER_NOTES)
        composer.add(BlockKind.HEADING, SPEAKER_NOTES, notes_path, number)
        for text in notes_text:
            composer.add(BlockKind.PARAGRAPH, text, notes_path, number)


def parse(path: Path) -> ParsedDocument:
    _check(path)
    package = open_package(path, _WHAT)
    with package:
        names = set(package.namelist())
        if "ppt/presentation.xml" not in names:
            raise DamagedFileError(f"damaged {_WHAT}: not a PowerPoint deck (wrong extension?)")
        presentation = read_xml(package, "ppt/presentation.xml", _WHAT)
        rels = _rels(package, "ppt/presentation.xml")
        slide_ids = presentation.findall("./p:sldIdLst/p:sldId", _NS)
        composer = Composer()
        notice = ""
        if len(slide_ids) > MAX_SLIDES:
            notice = f"only the first {MAX_SLIDES:,} of {len(slide_ids):,} slides are indexed"
        for number, slide_id in enumerate(slide_ids[:MAX_SLIDES], start=1):
            target = rels.get(slide_id.get(f"{{{_R}}}id", ""))
            if target is None or target[1] not in names:
                continue  # a dangling reference: PowerPoint skips it too
            slide = read_xml(package, target[1], _WHAT)
            notes = None
            for rel_type, part in _rels(package, target[1]).values():
                if rel_type.endswith("/notesSlide") and part in names:
                    notes = read_xml(package, part, _WHAT)
            _slide(composer, slide, number, notes)
            if composer.full:
                break
        title = ""
        if "docProps/core.xml" in names:
            found = read_xml(package, "docProps/core.xml", _WHAT).find(".//dc:title", _NS)
            title = sensible_title(found.text if found is not None else "")
    return composer.build(
        title or path.stem,
        page_count=len(slide_ids),
        notice=notice,
        empty="no text on the slides",
    )
