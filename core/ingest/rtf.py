"""Rich Text Format (.rtf) files, through striprtf (BSD licence, pure Python).

RTF is 7-bit text with escapes for everything else, so the bytes are read as Latin-1
(every byte maps to one character) and striprtf applies the file's own code page.
"""

from __future__ import annotations

from pathlib import Path

from core.errors import DamagedFileError, ParseLimitError
from core.ingest.bounds import MAX_TEXT_CHARS, limit_notice
from core.ingest.text import cut_text, looks_like_title, normalize, paragraph_blocks, read_bytes
from core.records import ParsedDocument

# Most of a large RTF file is embedded pictures as hex; striprtf works on one string
# with regular expressions, so the file size, not the text, decides the time it takes.
MAX_RTF_BYTES = 64 * 1024 * 1024


def parse(path: Path) -> ParsedDocument:
    if path.stat().st_size > MAX_RTF_BYTES:
        raise ParseLimitError(f"larger than {MAX_RTF_BYTES // (1024 * 1024)} MB of RTF")
    data = read_bytes(path)
    if not data.lstrip()[:5] == b"{\\rtf":
        raise DamagedFileError("not an RTF file (wrong extension?)")
    from striprtf.striprtf import rtf_to_text

    # striprtf has no annotations; it returns str.
    text = normalize(rtf_to_text(data.decode("latin-1"), errors="replace"))  # type: ignore[no-untyped-call]
    if not text:
        raise DamagedFileError("no text in the RTF file")
    notice = ""
    if len(text) > MAX_TEXT_CHARS:
        text = cut_text(text, MAX_TEXT_CHARS).rstrip()
        notice = limit_notice()
    blocks = paragraph_blocks(text)
    first = text[blocks[0].start : blocks[0].end] if blocks else ""
    title = first if len(blocks) > 1 and "\n" not in first and looks_like_title(first) else ""
    return ParsedDocument(text=text, title=title or path.stem, blocks=tuple(blocks), notice=notice)
