"""Limits shared by the parsers of zipped XML formats (EPUB, OOXML, OpenDocument), and a
text builder that records each block's place (slide, chapter, row, message).

These files are untrusted: a zip can claim gigabytes behind a few kilobytes (a zip
bomb), an XML part can declare entities that expand a billion-fold, a sheet can hold a
million cells. Each check here fails early with a reason a person can act on, before
the sandbox's memory cap or timeout has to cut the worker down. The sandbox limits stay
the last line of defence.
"""

from __future__ import annotations

import struct
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from lxml import etree

from core.errors import DamagedFileError, NoTextError, ParseLimitError
from core.ingest.text import EMPTY_FILE, normalize
from core.ingest.text import MAX_TEXT_CHARS as MAX_TEXT_CHARS
from core.ingest.text import limit_notice as limit_notice
from core.records import Block, BlockKind, PageSpan, ParsedDocument

_MB = 1024 * 1024
MAX_ZIP_ENTRIES = 20_000
MAX_UNPACKED_BYTES = 1024 * _MB  # declared size of everything in the package
MAX_RATIO = 200  # larger members packed tighter than this are bombs, not documents
RATIO_FLOOR_BYTES = 16 * _MB  # small members may compress as they like
MAX_XML_TREE_BYTES = 64 * _MB  # a part read as a whole tree (lxml needs ~10x in memory)
MAX_XML_STREAM_BYTES = 512 * _MB  # a part read as a stream (sheet data)
MAX_CELLS = 250_000  # non-empty cells read from one workbook
_PROLOG_LIMIT = 1 * _MB

_EOCD = b"PK\x05\x06"
_EOCD64_LOCATOR = b"PK\x06\x07"


def _declared_entries(path: Path) -> int:
    """The entry count in the zip's end record, read before ``zipfile`` builds one
    object per entry (a million-entry zip would cost hundreds of MB just to open)."""
    with path.open("rb") as handle:
        handle.seek(0, 2)
        size = handle.tell()
        tail_len = min(size, 65_536 + 22)
        handle.seek(size - tail_len)
        tail = handle.read(tail_len)
        at = tail.rfind(_EOCD)
        if at < 0 or at + 22 > len(tail):
            raise DamagedFileError("damaged or truncated package (no zip directory at its end)")
        total = struct.unpack("<H", tail[at + 10 : at + 12])[0]
        if total == 0xFFFF and at >= 20 and tail[at - 20 : at - 16] == _EOCD64_LOCATOR:
            offset = struct.unpack("<Q", tail[at - 12 : at - 4])[0]
            handle.seek(offset)
            record = handle.read(56)
            if len(record) == 56:
                total = struct.unpack("<Q", record[32:40])[0]
        return int(total)


def open_package(path: Path, what: str) -> zipfile.ZipFile:
    """Open a zipped document after checking it is one and that it is not a bomb.

    ``what`` names the format in reasons ("PowerPoint file"). Reading a member later is
    bounded by its declared size (``zipfile`` stops there), so checking the declared
    sizes here bounds what any parser can unpack."""
    with path.open("rb") as handle:
        head = handle.read(4)
    if not head:
        raise DamagedFileError(EMPTY_FILE)
    if not head.startswith(b"PK"):
        raise DamagedFileError(f"damaged {what}: not a zip package (wrong extension?)")
    entries = _declared_entries(path)
    if entries > MAX_ZIP_ENTRIES:
        raise ParseLimitError(
            f"holds {entries:,} packed files, more than the {MAX_ZIP_ENTRIES:,} a {what} can have"
        )
    try:
        package = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, zipfile.LargeZipFile, ValueError, EOFError) as exc:
        raise DamagedFileError(f"damaged {what}: {exc}") from exc
    total = 0
    for info in package.infolist():
        total += info.file_size
        packed = max(info.compress_size, 1)
        if info.file_size > RATIO_FLOOR_BYTES and info.file_size / packed > MAX_RATIO:
            package.close()
            raise ParseLimitError(
                f"a zip bomb: {info.filename} unpacks {info.file_size // packed:,} times "
                "larger than it is stored",
                hint="Lectern does not unpack it. If the file is genuine, re-save it.",
            )
    if total > MAX_UNPACKED_BYTES:
        package.close()
        raise ParseLimitError(
            f"unpacks to {total // _MB:,} MB, more than the {MAX_UNPACKED_BYTES // _MB:,} MB "
            "Lectern reads from one file"
        )
    return package


def member(package: zipfile.ZipFile, name: str, what: str) -> zipfile.ZipInfo:
    try:
        return package.getinfo(name)
    except KeyError as exc:
        raise DamagedFileError(f"damaged {what}: {name} is missing") from exc


def check_prolog(stream: IO[bytes], name: str) -> bytes:
    """Read up to the root element and refuse entity declarations.

    Office, OpenDocument and EPUB parts never declare entities; a part that does is an
    entity-expansion bomb (or worse, an external-entity probe). Returns the bytes read,
    which the caller parses together with the rest of the stream."""
    seen = b""
    while len(seen) < _PROLOG_LIMIT:
        block = stream.read(16_384)
        if not block:
            break
        seen += block
        if b"<!ENTITY" in seen or b"<!entity" in seen:
            raise ParseLimitError(
                f"an XML bomb: {name} declares entities",
                hint="Lectern does not expand XML entities. If the file is genuine, re-save it.",
            )
        if _root_started(seen):
            return seen
    if len(seen) >= _PROLOG_LIMIT:
        raise ParseLimitError(f"{name} has an XML preamble over 1 MB (crafted?)")
    return seen


def _root_started(data: bytes) -> bool:
    pos = 0
    while True:
        lt = data.find(b"<", pos)
        if lt < 0 or lt + 1 >= len(data):
            return False
        nxt = data[lt + 1 : lt + 2]
        if nxt == b"?":
            end = data.find(b"?>", lt)
        elif data.startswith(b"<!--", lt):
            end = data.find(b"-->", lt)
        elif nxt == b"!":
            # A DOCTYPE; its internal subset in [...] may hold '>' characters.
            bracket, close = data.find(b"[", lt), data.find(b">", lt)
            if bracket >= 0 and (close < 0 or bracket < close):
                end = data.find(b"]", bracket)
                end = data.find(b">", end) if end >= 0 else -1
            else:
                end = close
        else:
            return True
        if end < 0:
            return False
        pos = end + 1


def _parser(**extra: Any) -> etree.XMLParser:
    # No DTDs, no entity expansion, no network, no "huge tree" lifting libxml2's caps.
    return etree.XMLParser(
        resolve_entities=False, load_dtd=False, no_network=True, huge_tree=False, **extra
    )


def read_xml(package: zipfile.ZipFile, name: str, what: str) -> Any:
    """Parse a whole (small) XML part of the package into a tree."""
    info = member(package, name, what)
    if info.file_size > MAX_XML_TREE_BYTES:
        raise ParseLimitError(
            f"{name} is {info.file_size // _MB:,} MB of XML, more than the "
            f"{MAX_XML_TREE_BYTES // _MB} MB Lectern reads from one part"
        )
    with package.open(info) as stream:
        data = check_prolog(stream, name) + stream.read()
    try:
        return etree.fromstring(data, _parser(recover=False))
    except etree.XMLSyntaxError as exc:
        raise DamagedFileError(f"damaged {what}: {name} is not valid XML") from exc


def read_member(package: zipfile.ZipFile, name: str, what: str, limit: int) -> bytes:
    """The bytes of an XML or XHTML part, after the entity check; at most ``limit``."""
    info = member(package, name, what)
    if info.file_size > limit:
        raise ParseLimitError(
            f"{name} is {info.file_size // _MB:,} MB, more than the {limit // _MB} MB "
            "Lectern reads from one part"
        )
    with package.open(info) as stream:
        return check_prolog(stream, name) + stream.read()


def check_xml_members(package: zipfile.ZipFile, suffixes: tuple[str, ...] = (".xml",)) -> None:
    """Refuse entity declarations in every XML part, for formats read by a library that
    opens the parts itself (openpyxl)."""
    for info in package.infolist():
        if info.filename.lower().endswith(suffixes) and info.file_size:
            with package.open(info) as stream:
                check_prolog(stream, info.filename)


def iter_xml(
    package: zipfile.ZipFile, name: str, tags: tuple[str, ...], what: str
) -> Iterator[Any]:
    """Stream the elements ``tags`` of a large part (OpenDocument sheets) with bounded
    memory: each is yielded complete, then cleared with what came before it."""
    info = member(package, name, what)
    if info.file_size > MAX_XML_STREAM_BYTES:
        raise ParseLimitError(
            f"{name} is {info.file_size // _MB:,} MB of XML, more than Lectern reads"
        )
    parser = etree.XMLPullParser(
        events=("end",),
        tag=tags,
        resolve_entities=False,
        load_dtd=False,
        no_network=True,
        huge_tree=False,
    )
    with package.open(info) as stream:
        parser.feed(check_prolog(stream, name))
        while True:
            try:
                for _event, element in parser.read_events():
                    yield element
                block = stream.read(1 << 20)
                if not block:
                    parser.close()
                    yield from (element for _event, element in parser.read_events())
                    return
                parser.feed(block)
            except etree.XMLSyntaxError as exc:
                raise DamagedFileError(f"damaged {what}: {name} is not valid XML") from exc


class Composer:
    """Builds a document's text block by block, recording where each block is (the
    ``PageSpan`` of its slide, chapter, row or message) and stopping at the text limit.

    ``sep`` joins a block to the one before it (a blank line, as between paragraphs)."""

    def __init__(self, limit_chars: int = MAX_TEXT_CHARS) -> None:
        self.limit_chars = limit_chars
        self._parts: list[str] = []
        self.length = 0
        self.blocks: list[Block] = []
        self.pages: list[PageSpan] = []
        self.full = False  # set once a block did not fit: the caller stops reading

    def add(
        self,
        kind: BlockKind,
        text: str,
        heading_path: tuple[str, ...] = (),
        location: int | None = None,
        sep: str = "\n\n",
    ) -> Block | None:
        text = normalize(text)
        if not text or self.full:
            return None
        gap = sep if self._parts else ""
        if self.length + len(gap) + len(text) > self.limit_chars:
            self.full = True
            return None
        self._parts.append(gap)
        start = self.length + len(gap)
        self._parts.append(text)
        self.length = start + len(text)
        block = Block(kind, start, self.length, heading_path, location)
        self.blocks.append(block)
        if location is not None:
            last = self.pages[-1] if self.pages else None
            if last is not None and last.page == location:
                self.pages[-1] = PageSpan(location, last.start, self.length)
            else:
                self.pages.append(PageSpan(location, start, self.length))
        return block

    def mark(self) -> tuple[int, int, int, int, PageSpan | None]:
        """A point to roll back to (a mailbox message that fails halfway through)."""
        return (
            len(self._parts),
            self.length,
            len(self.blocks),
            len(self.pages),
            self.pages[-1] if self.pages else None,
        )

    def rollback(self, mark: tuple[int, int, int, int, PageSpan | None]) -> None:
        parts, self.length, blocks, pages, last = mark
        del self._parts[parts:], self.blocks[blocks:], self.pages[pages:]
        if last is not None:
            self.pages[-1] = last

    def add_document(
        self, doc: ParsedDocument, prefix: tuple[str, ...] = (), location: int | None = None
    ) -> int:
        """Append another parsed document's blocks (an EPUB chapter, a mail attachment)
        under ``prefix``; returns how many were added."""
        added = 0
        for block in doc.blocks:
            text = doc.text[block.start : block.end]
            if self.add(block.kind, text, prefix + block.heading_path, location) is not None:
                added += 1
            elif self.full:
                break
        return added

    def text(self) -> str:
        return "".join(self._parts)

    def build(
        self, title: str, *, page_count: int = 0, notice: str = "", empty: str = "no text"
    ) -> ParsedDocument:
        text = self.text()
        if not text:
            raise NoTextError(empty, hint="The file has no text to index.")
        if self.full and not notice:
            notice = limit_notice()
        return ParsedDocument(
            text=text,
            title=title,
            blocks=tuple(self.blocks),
            pages=tuple(self.pages),
            page_count=page_count,
            notice=notice,
        )
