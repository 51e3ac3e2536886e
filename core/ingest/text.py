"""Plain-text files, plus the text helpers every format parser shares.

Every parser normalises text *before* it records offsets, so ``Block`` and ``PageSpan``
offsets always index the text that is stored, not the bytes on disk.
"""

from __future__ import annotations

import codecs
import re
import unicodedata
from pathlib import Path

from core.errors import DamagedFileError, UnsupportedFileError
from core.records import Block, BlockKind, ParsedDocument

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


def read_bytes(path: Path) -> bytes:
    data = path.read_bytes()
    if not data or data.isspace():
        raise DamagedFileError("empty file")
    return data


_BOMS = (
    (codecs.BOM_UTF8, "utf-8-sig"),
    (codecs.BOM_UTF32_LE, "utf-32"),  # before UTF-16 LE: its BOM starts the same way
    (codecs.BOM_UTF32_BE, "utf-32"),
    (codecs.BOM_UTF16_LE, "utf-16"),
    (codecs.BOM_UTF16_BE, "utf-16"),
)


_TEXT_CONTROLS = frozenset(b"\t\n\r\x0b\x0c\x1b")


def _decode_wide(data: bytes, head: bytes) -> str | None:
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
            return data.decode(encoding, errors="replace")
    return None


def decode_text(data: bytes) -> str:
    """Decode a text file: BOM if present, else UTF-8, else Windows-1252 (the usual
    encoding of old notes on Windows), else Latin-1, which never fails."""
    for bom, encoding in _BOMS:
        if data.startswith(bom):
            return data.decode(encoding, errors="replace")
    head = data[:8192]
    if head.count(0) > len(head) // 10:
        wide = _decode_wide(data, head)
        if wide is not None:
            return wide
    # Real text has next to no control bytes; binary files (images, archives renamed to
    # .txt) are full of them. UTF-16 without a BOM is rare enough to report the same way.
    controls = sum(1 for byte in head if byte < 32 and byte not in _TEXT_CONTROLS)
    if controls > len(head) // 20:
        raise UnsupportedFileError("binary data, not text")
    try:
        return data.decode("utf-8")
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


def parse(path: Path) -> ParsedDocument:
    text = normalize(decode_text(read_bytes(path)))
    if not text:
        raise DamagedFileError("empty file")
    blocks = paragraph_blocks(text)
    first_line = text.split("\n", 1)[0]
    # A note's first line is its title only when it stands alone above the body.
    title = path.stem
    first_alone = len(blocks) > 1 and "\n" not in text[blocks[0].start : blocks[0].end]
    if first_alone and looks_like_title(first_line):
        title = clean_inline(first_line)
    return ParsedDocument(text=text, title=title, blocks=tuple(blocks))


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
