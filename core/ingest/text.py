"""Plain-text files, plus the text helpers every format parser shares.

Every parser normalises text *before* it records offsets, so ``Block`` and ``PageSpan``
offsets always index the text that is stored, not the bytes on disk.
"""

from __future__ import annotations

import codecs
import re
import unicodedata
from dataclasses import replace
from pathlib import Path
from typing import BinaryIO

from core.errors import DamagedFileError, UnsupportedFileError
from core.records import Block, BlockKind, PageSpan, ParsedDocument

# Text kept from one file: about a 1,500-page book. Past it, embedding alone takes
# longer than anyone waits for one file, and the rest is noted as not indexed.
MAX_TEXT_CHARS = 4_000_000
# The reason every reader gives for a file with nothing in it. The indexer lists such a
# file as skipped, not failed: there is nothing wrong with it, and nothing to retry.
EMPTY_FILE = "empty file"
# A character is at most this many bytes (UTF-32, UTF-8's longest): reading this many
# bytes a character wanted holds the characters whatever the encoding.
_MAX_CHAR_BYTES = 4

# Control characters that carry no meaning in extracted text. Tab and newline are kept;
# form feed / vertical tab become newlines below because they separate lines or pages.
_CONTROL = re.compile(r"[\x00-\x08\x0e-\x1f\x7f]")
_LINE_BREAKS = re.compile(r"\r\n?|[\x0b\x0c\x85\u2028\u2029]")
_TRAILING_SPACE = re.compile(r"[ \t\u00a0]+(?=\n|\Z)")
_MANY_BLANKS = re.compile(r"\n{3,}")
_BLANK_LINES = re.compile(r"\n[ \t]*\n\s*")


def normalize(text: str) -> str:
    """The canonical form of stored text: NFC, ``\\n`` line ends, no NULs, at most one
    blank line in a row, no trailing spaces, no surrounding whitespace."""
    text = _LINE_BREAKS.sub("\n", text)
    text = _CONTROL.sub("", text)
    text = unicodedata.normalize("NFC", text)
    text = _TRAILING_SPACE.sub("", text)
    text = _MANY_BLANKS.sub("\n\n", text)
    return text.strip()


_OVER_LIMIT = "the rest is over Lectern's limit for one file"


def limit_notice(what: str = "") -> str:
    thing = what or f"{MAX_TEXT_CHARS:,} characters of text"
    return f"only the first {thing} are indexed; {_OVER_LIMIT}"


def read_bytes(path: Path) -> bytes:
    """The whole file; only for readers that check its size first (RTF, e-mail, CSV)."""
    data = path.read_bytes()
    if not data or data.isspace():
        raise DamagedFileError(EMPTY_FILE)
    return data


def read_head(path: Path, limit_bytes: int) -> tuple[bytes, bool]:
    """At most ``limit_bytes`` of the file, and whether more was left unread."""
    with path.open("rb") as handle:
        data = _read_upto(handle, limit_bytes)
        more = bool(handle.read(1))
    if not data or data.isspace():
        raise DamagedFileError(EMPTY_FILE)
    return data, more


def _read_upto(stream: BinaryIO, limit: int) -> bytes:
    """At most ``limit`` bytes, read a block at a time: ``read(limit)`` sets aside all of
    ``limit`` first, which a small file read under a memory limit cannot afford."""
    parts: list[bytes] = []
    left = limit
    while left > 0:
        block = stream.read(min(left, 1 << 20))
        if not block:
            break
        parts.append(block)
        left -= len(block)
    return b"".join(parts)


def read_text(path: Path, limit_chars: int = MAX_TEXT_CHARS) -> tuple[str, bool]:
    """The file's text as ``decode_text`` reads it, at most ``limit_chars`` characters of
    it, and whether the rest was left unread. A file of any size costs the memory of its
    first characters only: a 200 MB text file was read whole, and failed at the reader's
    memory limit."""
    with path.open("rb") as handle:
        return decode_head(handle, limit_chars)


def decode_head(stream: BinaryIO, limit_chars: int = MAX_TEXT_CHARS) -> tuple[str, bool]:
    """The first ``limit_chars`` characters of ``stream`` (see ``read_text``)."""
    # The byte-order mark comes on top of the characters.
    data = _read_upto(stream, _MAX_CHAR_BYTES * limit_chars + _MAX_CHAR_BYTES)
    more = bool(stream.read(1))
    if not data or data.isspace():
        if more:  # not empty: blank as far as it is read
            raise DamagedFileError(f"no text in its first {len(data) // (1024 * 1024):,} MB")
        raise DamagedFileError(EMPTY_FILE)
    text = decode_text(data, final=not more)
    if len(text) > limit_chars:
        text, more = cut_text(text, limit_chars), True
    return text, more


def cut_text(text: str, limit: int) -> str:
    """``text`` cut to at most ``limit`` characters, at a line break near the limit
    where there is one, else at a space, so no word is cut in half."""
    if len(text) <= limit:
        return text
    window = max(0, limit - 10_000)
    for sep in ("\n", " "):
        at = text.rfind(sep, window, limit)
        if at > 0:
            return text[:at]
    return text[:limit]


_BOMS = (
    (codecs.BOM_UTF8, "utf-8-sig"),
    (codecs.BOM_UTF32_LE, "utf-32"),  # before UTF-16 LE: its BOM starts the same way
    (codecs.BOM_UTF32_BE, "utf-32"),
    (codecs.BOM_UTF16_LE, "utf-16"),
    (codecs.BOM_UTF16_BE, "utf-16"),
)


_TEXT_CONTROLS = frozenset(b"\t\n\r\x0b\x0c\x1b")


def _decode(data: bytes, encoding: str, errors: str, final: bool) -> str:
    """``data`` decoded; when it is the start of a longer file (not ``final``), a
    character cut in half at its end is left out rather than taken for an error."""
    if final:
        return data.decode(encoding, errors)
    decoder = codecs.getincrementaldecoder(encoding)(errors)
    return str(decoder.decode(data, final=False))


def _decode_wide(data: bytes, head: bytes, final: bool = True) -> str | None:
    """UTF-32/UTF-16 text saved without a byte-order mark, recognised by trying each
    and keeping the one that reads as printable text."""
    for encoding, unit in (("utf-32-le", 4), ("utf-32-be", 4), ("utf-16-le", 2), ("utf-16-be", 2)):
        sample = head[: len(head) - len(head) % unit]
        try:
            decoded = sample.decode(encoding)
        except UnicodeDecodeError:
            continue
        printable = sum(ch.isprintable() or ch in "\t\n\r" for ch in decoded)
        if decoded and printable >= 0.95 * len(decoded):
            return _decode(data, encoding, "replace", final)
    return None


def decode_text(data: bytes, *, final: bool = True) -> str:
    """Decode a text file: BOM if present, else UTF-8, else Windows-1252 (the usual
    encoding of old notes on Windows), else Latin-1, which never fails.

    ``final``: ``data`` is the whole file, not its first part."""
    for bom, encoding in _BOMS:
        if data.startswith(bom):
            return _decode(data, encoding, "replace", final)
    head = data[:8192]
    if head.count(0) > len(head) // 10:
        wide = _decode_wide(data, head, final)
        if wide is not None:
            return wide
    # Real text has next to no control bytes; binary files (images, archives renamed to
    # .txt) are full of them. UTF-16 without a BOM is rare enough to report the same way.
    controls = sum(1 for byte in head if byte < 32 and byte not in _TEXT_CONTROLS)
    if controls > len(head) // 20:
        raise UnsupportedFileError("binary data, not text")
    try:
        return _decode(data, "utf-8", "strict", final)
    except UnicodeDecodeError:
        pass
    try:
        return data.decode("cp1252")
    except UnicodeDecodeError:
        return data.decode("latin-1")


class DocBuilder:
    """Appends blocks to a growing text and records their offsets as it goes.

    Parsers that build their own text (HTML, DOCX, PDF) use this so offsets can never
    drift from the text: each block's text is normalised first, then appended.
    """

    def __init__(self) -> None:
        self._parts: list[str] = []
        self._length = 0
        self.blocks: list[Block] = []

    @property
    def length(self) -> int:
        return self._length

    def add(
        self,
        kind: BlockKind,
        text: str,
        heading_path: tuple[str, ...] = (),
        page: int | None = None,
    ) -> Block | None:
        text = normalize(text)
        if not text:
            return None
        if self._parts:
            self._append("\n\n")
        start = self._length
        self._append(text)
        block = Block(kind, start, self._length, heading_path, page)
        self.blocks.append(block)
        return block

    def separator(self, sep: str) -> None:
        """Add text that belongs to no block (for example the gap between PDF pages)."""
        self._append(sep)

    def _append(self, piece: str) -> None:
        self._parts.append(piece)
        self._length += len(piece)

    def text(self) -> str:
        return "".join(self._parts)


def clean_inline(text: str) -> str:
    """One-line form of a heading or title: whitespace runs collapsed."""
    return " ".join(normalize(text).split())


def looks_like_title(line: str) -> bool:
    line = line.strip()
    if not (2 <= len(line) <= 80):
        return False
    if line[-1] in ".,;:" or line.count(". ") >= 1:
        return False
    return sum(ch.isalpha() for ch in line) >= 2


def paragraph_blocks(
    text: str, offset: int = 0, heading_path: tuple[str, ...] = (), page: int | None = None
) -> list[Block]:
    """Blocks for the blank-line separated paragraphs of already-normalised ``text``."""
    blocks: list[Block] = []
    pos = 0
    for match in [*_BLANK_LINES.finditer(text), None]:
        end = match.start() if match else len(text)
        piece = text[pos:end]
        stripped = piece.strip()
        if stripped:
            lead = len(piece) - len(piece.lstrip())
            start = offset + pos + lead
            blocks.append(
                Block(BlockKind.PARAGRAPH, start, start + len(stripped), heading_path, page)
            )
        if match:
            pos = match.end()
    return blocks


def cap_document(doc: ParsedDocument, limit: int = MAX_TEXT_CHARS) -> ParsedDocument:
    """``doc`` cut to its first ``limit`` characters (at a line break), its blocks, places
    and OCR words with it, and the limit said in its notice; ``doc`` itself when it fits.

    Every file goes through this once read (``core.ingest.registry.parse_file``), so no
    format gives more text than the limit, whichever way its reader builds it."""
    if len(doc.text) <= limit:
        return doc
    text = cut_text(doc.text, limit).rstrip()
    end = len(text)
    blocks = tuple(
        replace(b, end=min(b.end, end))
        for b in doc.blocks
        if b.start < end and text[b.start : min(b.end, end)].strip()
    )
    pages = tuple(PageSpan(p.page, p.start, min(p.end, end)) for p in doc.pages if p.start < end)
    # A reader that stopped at a limit of its own (8 MB of a web page) has said so.
    if _OVER_LIMIT in doc.notice:
        notice = doc.notice
    else:
        notice = "; ".join(n for n in (doc.notice, limit_notice()) if n)
    return replace(
        doc,
        text=text,
        blocks=blocks,
        pages=pages,
        words=tuple(w for w in doc.words if w.end <= end),
        notice=notice,
    )


def parse(path: Path) -> ParsedDocument:
    raw, cut = read_text(path)
    text = normalize(raw)
    if not text:
        raise DamagedFileError(EMPTY_FILE)
    blocks = paragraph_blocks(text)
    first_line = text.split("\n", 1)[0]
    # A note's first line is its title only when it stands alone above the body.
    title = path.stem
    first_alone = len(blocks) > 1 and "\n" not in text[blocks[0].start : blocks[0].end]
    if first_alone and looks_like_title(first_line):
        title = clean_inline(first_line)
    notice = limit_notice() if cut else ""
    return ParsedDocument(text=text, title=title, blocks=tuple(blocks), notice=notice)


_JUNK_TITLE = re.compile(
    r"^(untitled|document\d*|book\d*|sheet\d*|presentation\d*|slide \d+|title|none|null)$"
    r"|^microsoft (word|powerpoint|excel) - "
    r"|\.(pdf|docx?|txt|rtf|odt|xlsx?|pptx?|html?|exe|indd|qxd|tex|dvi|ps|png|jpe?g|tiff?)$",
    re.IGNORECASE,
)


def sensible_title(raw: str | None) -> str:
    """``raw`` cleaned up if it reads like a real title, else ``""``.

    Document metadata titles are often tool defaults ("Untitled", "Book1") or the name of
    the file they were printed from ("Microsoft Word - report.docx"); those say nothing.
    """
    if not raw:
        return ""
    title = clean_inline(str(raw))
    if not (2 <= len(title) <= 200) or _JUNK_TITLE.search(title):
        return ""
    return title if sum(ch.isalpha() for ch in title) >= 2 else ""
