"""PDF files (pypdf).

Each page's text is kept as pypdf extracts it (after normalisation) and pages are joined
with a blank line, so every character maps to exactly one page. pypdf rarely emits blank
lines between paragraphs, so paragraph blocks come from line-shape heuristics.
"""

from __future__ import annotations

import io
import re
from pathlib import Path

from pypdf import PasswordType, PdfReader
from pypdf.errors import DependencyError, FileNotDecryptedError, WrongPasswordError

from core.errors import DamagedFileError, EncryptedError, NoTextError
from core.ingest.text import clean_inline, looks_like_title, normalize, sensible_title
from core.records import Block, BlockKind, PageSpan, ParsedDocument

PAGE_SEPARATOR = "\n\n"

_BULLET = re.compile(r"^(?:[•◦▪‣●○■□–—*-]|\(?\d{1,2}[.)]|\(?[a-z][.)])\s+\S")
_SENTENCE_END = re.compile(r"[.!?:][\"'”’)\]]*$")
_OPENERS = "\"'“‘(["


def _short_cause(exc: BaseException) -> str:
    message = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    message = message or type(exc).__name__
    return message if len(message) <= 80 else message[:77] + "..."


def _starts_upper(line: str) -> bool:
    first = line.lstrip(_OPENERS)[:1]
    return bool(first) and (first.isupper() or first.isdigit())


def _title_like(line: str) -> bool:
    return (
        len(line) <= 70
        and len(line.split()) <= 10
        and line[-1] not in ".,;:"
        and _starts_upper(line)
    )


def _title_line(line: str) -> bool:
    """A first-page line that can stand in for a missing title: not a fragment of prose
    (lowercase start, hyphenated end) and not a row of figures."""
    line = line.strip()
    if not (looks_like_title(line) and _starts_upper(line)) or line.endswith("-"):
        return False
    visible = [ch for ch in line if not ch.isspace()]
    return sum(ch.isalpha() for ch in visible) >= 0.6 * len(visible)


def _page_blocks(text: str, offset: int, page: int) -> list[Block]:
    """Paragraph blocks of one page's normalised ``text`` (which starts at ``offset``)."""
    lines: list[tuple[int, str]] = []
    pos = 0
    for raw in text.split("\n"):
        lines.append((pos, raw))
        pos += len(raw) + 1
    lengths = sorted(len(raw.strip()) for _, raw in lines if raw.strip())
    # A line that stops well short of the usual width ended its paragraph.
    typical = lengths[(len(lengths) * 3) // 4] if lengths else 0

    spans: list[tuple[int, int]] = []
    start = end = -1
    prev = ""
    only_titles = False  # the running block is title-like lines only
    for at, raw in lines:
        line = raw.strip()
        if not line:
            if start >= 0:
                spans.append((start, end))
            start, prev = -1, ""
            continue
        line_start = at + (len(raw) - len(raw.lstrip()))
        line_end = line_start + len(line)
        if start >= 0:
            sentence_ended = bool(_SENTENCE_END.search(prev))
            boundary = (
                bool(_BULLET.match(line))
                or (sentence_ended and _starts_upper(line) and len(prev) < 0.85 * typical)
                or (sentence_ended and _title_like(line))
                or (only_titles and _starts_upper(line) and len(line) >= 0.6 * typical)
            )
            if boundary:
                spans.append((start, end))
                start = -1
        if start < 0:
            start, only_titles = line_start, True
        only_titles = only_titles and _title_like(line)
        end = line_end
        prev = line
    if start >= 0:
        spans.append((start, end))
    return [Block(BlockKind.PARAGRAPH, offset + s, offset + e, (), page) for s, e in spans]


def _open(data: bytes) -> PdfReader:
    try:
        reader = PdfReader(io.BytesIO(data), strict=False)
        # pypdf already tried the empty password; this reports whether it worked.
        if reader.is_encrypted and reader.decrypt("") == PasswordType.NOT_DECRYPTED:
            raise EncryptedError("encrypted")
    except (FileNotDecryptedError, WrongPasswordError) as exc:
        raise EncryptedError("encrypted") from exc
    except DependencyError as exc:
        # AES needs the optional `cryptography` package; without it even PDFs with an
        # empty user password stay closed.
        raise EncryptedError(
            "encrypted",
            hint="This PDF uses AES encryption; save an unprotected copy to index it.",
        ) from exc
    except EncryptedError:
        raise
    except MemoryError:
        raise
    except Exception as exc:
        raise DamagedFileError(f"damaged PDF: {_short_cause(exc)}") from exc
    return reader


def _metadata_title(reader: PdfReader) -> str:
    try:
        metadata = reader.metadata
        return sensible_title(str(metadata.title)) if metadata and metadata.title else ""
    except MemoryError:
        raise
    except Exception:
        return ""  # unreadable metadata must not cost the whole document


def parse(path: Path) -> ParsedDocument:
    data = path.read_bytes()
    if not data or data.isspace():
        raise DamagedFileError("empty file")
    if b"%PDF" not in data[:1024]:
        raise DamagedFileError("damaged PDF: not a PDF file")
    reader = _open(data)
    try:
        pages = reader.pages
        page_count = len(pages)
    except (FileNotDecryptedError, DependencyError) as exc:
        raise EncryptedError("encrypted") from exc
    except MemoryError:
        raise
    except Exception as exc:
        raise DamagedFileError(f"damaged PDF: {_short_cause(exc)}") from exc
    if page_count == 0:
        raise DamagedFileError("damaged PDF: no pages")

    page_texts: list[tuple[int, str]] = []
    failures = 0
    last_error: BaseException | None = None
    for index in range(page_count):
        try:
            raw = pages[index].extract_text() or ""
        except MemoryError:
            raise
        except Exception as exc:
            # One pathological page (bad font, broken stream, recursion) costs that
            # page only.
            failures += 1
            last_error = exc
            continue
        page_text = normalize(raw)
        if page_text:
            page_texts.append((index + 1, page_text))
    if failures == page_count and last_error is not None:
        raise DamagedFileError(f"damaged PDF: {_short_cause(last_error)}")

    text = PAGE_SEPARATOR.join(t for _, t in page_texts)
    letters = sum(ch.isalnum() for ch in text)
    # Scans often carry a stray page number or stamp; a few characters a page is no text.
    if letters < 3 or (page_count >= 5 and letters < 4 * page_count):
        raise NoTextError("no text layer (scanned?)")

    spans: list[PageSpan] = []
    blocks: list[Block] = []
    offset = 0
    for i, (page, page_text) in enumerate(page_texts):
        end = offset + len(page_text)
        # Spans are contiguous: the separator after a page belongs to that page.
        span_end = end + len(PAGE_SEPARATOR) if i + 1 < len(page_texts) else end
        spans.append(PageSpan(page, offset, span_end))
        blocks.extend(_page_blocks(page_text, offset, page))
        offset = span_end

    title = _metadata_title(reader)
    if not title:
        first_lines = page_texts[0][1].split("\n")[:3]
        title = next((clean_inline(line) for line in first_lines if _title_line(line)), path.stem)
    return ParsedDocument(
        text=text, title=title, blocks=tuple(blocks), pages=tuple(spans), page_count=page_count
    )
