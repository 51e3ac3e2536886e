"""E-books (.epub, versions 2 and 3): the spine's documents in reading order, each a
chapter, titled from the book's table of contents.

An EPUB is a zip of XHTML files listed by an OPF package file; each spine document is
read with the same HTML reader as a web page (visible text only), and its blocks get the
chapter's number as their place and its title at the top of their heading path. No
e-book library is used: the format is small, and the common one (ebooklib) is AGPL.
"""

from __future__ import annotations

import posixpath
import zipfile
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urldefrag

from core.errors import DamagedFileError, EncryptedError, NoTextError
from core.ingest.bounds import Composer, open_package, read_member, read_xml
from core.ingest.html import parse_html
from core.ingest.text import clean_inline, sensible_title
from core.records import BlockKind, ParsedDocument

_WHAT = "e-book"
_NS = {
    "c": "urn:oasis:names:tc:opendocument:xmlns:container",
    "opf": "http://www.idpf.org/2007/opf",
    "dc": "http://purl.org/dc/elements/1.1/",
    "ncx": "http://www.daisy.org/z3986/2005/ncx/",
    "x": "http://www.w3.org/1999/xhtml",
    "epub": "http://www.idpf.org/2007/ops",
    "enc": "http://www.w3.org/2001/04/xmlenc#",
}
_HTML_TYPES = frozenset({"application/xhtml+xml", "text/html", "application/x-dtbook+xml"})
# Font obfuscation (IDPF and Adobe) "encrypts" fonts only; any other algorithm is DRM.
_FONT_OBFUSCATION = frozenset(
    {"http://www.idpf.org/2008/embedding", "http://ns.adobe.com/pdf/enc#RC"}
)
_MAX_CHAPTER_BYTES = 32 * 1024 * 1024


def _resolve(base: str, href: str) -> str:
    return posixpath.normpath(posixpath.join(posixpath.dirname(base), unquote(href))).lstrip("/")


def _check_drm(package: zipfile.ZipFile) -> None:
    if "META-INF/encryption.xml" not in package.namelist():
        return
    encryption = read_xml(package, "META-INF/encryption.xml", _WHAT)
    for method in encryption.iterfind(".//enc:EncryptionMethod", _NS):
        if method.get("Algorithm", "") not in _FONT_OBFUSCATION:
            raise EncryptedError(
                "protected by DRM",
                hint="Lectern cannot read copy-protected e-books; use a DRM-free copy.",
            )


def _toc_titles(package: zipfile.ZipFile, opf_path: str, opf: Any) -> dict[str, str]:
    """Document path -> its first title in the table of contents (EPUB 3 nav or NCX)."""
    titles: dict[str, str] = {}
    manifest = opf.find("opf:manifest", _NS)
    if manifest is None:
        return titles
    names = set(package.namelist())
    for item in manifest.iterfind("opf:item", _NS):
        href = _resolve(opf_path, item.get("href", ""))
        if href not in names:
            continue
        if "nav" in (item.get("properties") or "").split():
            nav = read_xml(package, href, _WHAT)
            for link in nav.iterfind(".//x:nav//x:a", _NS):
                target = _resolve(href, urldefrag(link.get("href", ""))[0])
                text = clean_inline("".join(link.itertext()))
                if text:
                    titles.setdefault(target, text)
        elif item.get("media-type") == "application/x-dtbncx+xml":
            ncx = read_xml(package, href, _WHAT)
            for point in ncx.iterfind(".//ncx:navPoint", _NS):
                label = point.find("ncx:navLabel/ncx:text", _NS)
                content = point.find("ncx:content", _NS)
                if label is None or content is None:
                    continue
                target = _resolve(href, urldefrag(content.get("src", ""))[0])
                text = clean_inline(label.text or "")
                if text:
                    titles.setdefault(target, text)
    return titles


def parse(path: Path) -> ParsedDocument:
    package = open_package(path, _WHAT)
    with package:
        names = set(package.namelist())
        if "META-INF/container.xml" not in names:
            raise DamagedFileError(f"damaged {_WHAT}: no META-INF/container.xml (not an EPUB?)")
        _check_drm(package)
        container = read_xml(package, "META-INF/container.xml", _WHAT)
        rootfile = container.find(".//c:rootfile", _NS)
        opf_path = rootfile.get("full-path", "") if rootfile is not None else ""
        if opf_path not in names:
            raise DamagedFileError(f"damaged {_WHAT}: its package file is missing")
        opf = read_xml(package, opf_path, _WHAT)
        manifest = {item.get("id", ""): item for item in opf.iterfind("opf:manifest/opf:item", _NS)}
        titles = _toc_titles(package, opf_path, opf)
        composer = Composer()
        chapter = 0
        for ref in opf.iterfind("opf:spine/opf:itemref", _NS):
            item = manifest.get(ref.get("idref", ""))
            if item is None or item.get("media-type", "") not in _HTML_TYPES:
                continue
            if "nav" in (item.get("properties") or "").split():
                continue  # the table of contents repeats the chapter titles
            href = _resolve(opf_path, item.get("href", ""))
            if href not in names:
                continue
            data = read_member(package, href, _WHAT, _MAX_CHAPTER_BYTES)
            try:
                doc = parse_html(data, "")
            except NoTextError:
                continue  # a cover image or a blank page
            chapter += 1
            title = titles.get(href) or (doc.title if doc.title else "") or f"Chapter {chapter}"
            composer.add(BlockKind.HEADING, title, (title,), chapter)
            composer.add_document(_without_title(doc, title), (title,), chapter)
            if composer.full:
                break
        found = opf.find("opf:metadata/dc:title", _NS)
        book_title = sensible_title(found.text if found is not None else "")
    return composer.build(
        book_title or path.stem, page_count=chapter, empty="no text in the e-book"
    )


def _without_title(doc: ParsedDocument, title: str) -> ParsedDocument:
    """The chapter's own blocks, minus a first heading that repeats the chapter title."""
    blocks = doc.blocks
    if blocks and blocks[0].kind is BlockKind.HEADING:
        first = clean_inline(doc.text[blocks[0].start : blocks[0].end])
        if first.casefold() == title.casefold():
            blocks = blocks[1:]
    return ParsedDocument(text=doc.text, title=doc.title, blocks=blocks)
