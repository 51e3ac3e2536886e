"""PDF files (pypdf for text, PDFium and Tesseract for scanned pages).

Each page's text is kept as pypdf extracts it (after normalisation) and pages are joined
with a blank line, so every character maps to exactly one page. pypdf rarely emits blank
lines between paragraphs, so paragraph blocks come from line-shape heuristics; headings
come from type size (a line set clearly larger than the body text), which gives PDF
chunks heading paths like Markdown's.

Pages without a text layer are read in two steps. ``parse`` (the fast pass every file
gets) notes them in ``needs_ocr``, or raises ``ScannedError`` when no page has text;
``parse_scanned`` (a later pass, in a sandbox of its own, see core/ingest/sandbox.py)
renders them with PDFium and reads them with Tesseract (core/ingest/ocr.py).
"""

from __future__ import annotations

import collections
import io
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from pypdf import PageObject, PasswordType, PdfReader
from pypdf.errors import DependencyError, FileNotDecryptedError, WrongPasswordError

from core.errors import DamagedFileError, EncryptedError, NoTextError, ScannedError
from core.ingest import pdf_tables
from core.ingest.text import EMPTY_FILE, clean_inline, looks_like_title, normalize, sensible_title
from core.records import Block, BlockKind, PageSpan, ParsedDocument, WordBox

PAGE_SEPARATOR = "\n\n"
SCANNED_REASON = "no text layer (scanned?)"

_BULLET = re.compile(r"^(?:[•◦▪‣●○■□–—*-]|\(?\d{1,2}[.)]|\(?[a-z][.)])\s+\S")
_SENTENCE_END = re.compile(r"[.!?:][\"'”’)\]]*$")
_SPACE_BEFORE_PUNCT = re.compile(r"\s+([:;,.!?])")
_OPENERS = "\"'“‘(["
# A heading is set at least this much larger than the body text.
_HEADING_RATIO = 1.15
_HEADING_MIN_GAIN_PT = 1.0
# Sizes used by more than this share of the text are body text of some kind (a second
# column style, a large-print document), not headings.
_HEADING_MAX_SHARE = 0.2
_MAX_HEADING_LEVELS = 4
# A page with fewer letters than this has no text layer worth the name (a page number,
# a scanner's stamp).
_PAGE_MIN_LETTERS = 3


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


def _mostly_letters(line: str, share: float = 0.6) -> bool:
    visible = [ch for ch in line if not ch.isspace()]
    return bool(visible) and sum(ch.isalpha() for ch in visible) >= share * len(visible)


def _title_line(line: str) -> bool:
    """A first-page line that can stand in for a missing title: not a fragment of prose
    (lowercase start, hyphenated end) and not a row of figures."""
    line = line.strip()
    if not (looks_like_title(line) and _starts_upper(line)) or line.endswith("-"):
        return False
    return _mostly_letters(line)


_NUMBERED = re.compile(r"^\d+(?:\.\d+)*\.?\s+\S")


def _heading_line(line: str) -> bool:
    # "3 Results" and "2.1 Setup" are numbered headings; "34HotpotQA" is a chart label.
    if line[:1].isdigit() and not _NUMBERED.match(line):
        return False
    return (
        sum(ch.isalpha() for ch in line) >= 2
        and len(line) <= 90
        and len(line.split()) <= 12
        and line[-1] not in ".,;"
        and _starts_upper(line)
        and _mostly_letters(line, 0.5)
    )


# --- reading pages -------------------------------------------------------------------


@dataclass
class _Page:
    number: int  # 1-based
    text: str  # normalised
    sizes: list[float]  # type size of each line of ``text`` (0.0 where unknown)
    from_ocr: bool = False
    words: tuple[tuple[int, int, float, float, float, float], ...] = ()  # page offsets, box
    # Lines that also hold smaller text: the words set in the line's own size.
    large: dict[int, str] = field(default_factory=dict)
    # Tables read row by row (core/ingest/pdf_tables.py): line ranges, end exclusive.
    tables: tuple[tuple[int, int], ...] = ()


def _effective_size(cm: Sequence[float], tm: Sequence[float], font_size: float) -> float:
    # The text matrix times the current transformation matrix: its area scale is the
    # square of the size at which the glyphs are painted.
    a = tm[0] * cm[0] + tm[1] * cm[2]
    b = tm[0] * cm[1] + tm[1] * cm[3]
    c = tm[2] * cm[0] + tm[3] * cm[2]
    d = tm[2] * cm[1] + tm[3] * cm[3]
    return round(float(font_size) * math.sqrt(abs(a * d - b * c)), 1)


def _line_size(counts: collections.Counter[float]) -> float:
    """A line's type size: the largest size that sets a tenth of its characters, so a
    title in small capitals (large capitals, smaller lowercase) counts at its capitals."""
    total = sum(counts.values())
    if not total:
        return 0.0
    # Half-point steps: 9.9, 10.0 and 10.1 are one size painted through different matrices.
    return round(2 * max(size for size, n in counts.items() if n >= 0.1 * total)) / 2


# A footnote's or reference's number set as a superscript: "laws¹⁰", "studies¹²,¹³".
_MARK = re.compile(r"\d{1,3}(?:[,–-]\d{1,3})*")
# What a footnote mark follows: a word of four letters or more, or a word's punctuation
# ("the crash.³"). "km²" and "mc²" are units and formulas; "10⁶" follows a digit.
_MARKED = re.compile(r"(?:[^\W\d_]{4}|[^\W\d_][.,;:)\"'”’])$")
# What follows a mark on its line: a space, a word or punctuation. A digit, a slash or
# an operator makes it a fraction's numerator ("falls ½ ≤ t", "der Länge ¹/n").
_AFTER_MARK = re.compile(r"(?:\s|[^\W\d_]|[.,;:)\]\"'”’])")
# A mark is set this much smaller than the text it follows, and raised by this share of
# that text's size (TeX raises its footnote marks by about a third).
_MARK_MAX_SIZE = 0.85
_MARK_RISE = (0.15, 0.9)


def _shown(operands: Sequence[Any]) -> str:
    """The string a Tj or TJ shows, read as single bytes: enough to tell digits and
    letters of the simple fonts marks are set in (a two-byte font's codes read as
    neither, and its marks stay)."""
    if not operands:
        return ""
    first = operands[0]
    parts = first if isinstance(first, list) else [first]
    out = []
    for part in parts:
        if isinstance(part, str):
            out.append(part)
        elif isinstance(part, bytes):
            out.append(part.decode("latin-1"))
    return "".join(out)


@dataclass(frozen=True)
class _Shown:
    text: str
    size: float
    baseline: float


def _may_be_mark(shown: _Shown, before: _Shown) -> bool:
    """Whether ``shown`` is set as a footnote mark on ``before``'s line: digits, smaller
    and raised, after a word."""
    if not _MARK.fullmatch(shown.text.strip()) or shown.size <= 0 or before.size <= 0:
        return False
    rise = (shown.baseline - before.baseline) / before.size
    return (
        shown.size <= _MARK_MAX_SIZE * before.size
        and _MARK_RISE[0] <= rise <= _MARK_RISE[1]
        and _MARKED.search(before.text.rstrip()) is not None
    )


def _line_resumes(before: _Shown, after: _Shown | None) -> bool:
    """After a mark, the line goes on at its baseline with words, or ends (``after``:
    the next text shown; None for none, or not upright)."""
    if after is None:
        return True
    drop = abs(after.baseline - before.baseline) / before.size
    return drop >= 0.9 or (drop <= 0.1 and _AFTER_MARK.match(after.text) is not None)


class _FootnoteMarks:
    """pypdf operator visitors that find footnote marks (digits shown in a smaller size,
    raised above the text they follow on its line, then back to it), and on a second
    reading hide them from pypdf's text. pypdf joins a mark to that text when the font
    stays the same ("control laws 10 associated", where the PDF shows "laws¹⁰"), and
    then no size or position tells it apart from a number of the sentence ("section 10
    describes"). A mark's string is emptied while pypdf reads its operator and put back
    after it, so the page object is left as it was."""

    def __init__(self) -> None:
        self.font_size = 0.0
        self.rise = 0.0
        self._saved: list[tuple[float, float]] = []  # the text state at each q
        self._shows: list[_Shown | None] = []  # each Tj and TJ in order (None: not upright)
        self.hide: set[int] = set()  # of those, the marks (by their place in that order)
        self._hidden: tuple[list[Any], Any] | None = None

    def marks(self) -> set[int]:
        """The places of the marks among the operators read."""
        found: set[int] = set()
        before: _Shown | None = None
        shows = self._shows
        for i, shown in enumerate(shows):
            if shown is None:
                before = None
                continue
            if not shown.text.strip(" "):
                continue
            if before is not None and _may_be_mark(shown, before):
                after = next((s for s in shows[i + 1 :] if s is None or s.text.strip(" ")), None)
                if _line_resumes(before, after):
                    found.add(i)
                    continue
            before = shown
        return found

    def read_again(self) -> None:
        """Ready for a second reading of the page that hides the marks found."""
        self.hide = self.marks()
        self.font_size, self.rise = 0.0, 0.0
        self._saved.clear()
        self._shows.clear()

    def before(self, operator: bytes, operands: list[Any], cm: Any, tm: Any) -> None:
        try:
            if operator == b"Tf" and len(operands) >= 2:
                self.font_size = float(operands[1])
            elif operator == b"Ts" and operands:
                self.rise = float(operands[0])
            elif operator == b"q":
                self._saved.append((self.font_size, self.rise))
            elif operator == b"Q" and self._saved:
                self.font_size, self.rise = self._saved.pop()
            elif operator in (b"Tj", b"TJ"):
                self._show(operands, cm, tm)
        except (TypeError, ValueError, IndexError):
            if operator in (b"Tj", b"TJ"):
                self._shows.append(None)  # an odd operand: no mark, and none after it

    def after(self, operator: bytes, operands: list[Any], _cm: Any, _tm: Any) -> None:
        hidden, self._hidden = self._hidden, None
        if hidden is not None and hidden[0] is operands:
            operands[0] = hidden[1]

    def _show(self, operands: list[Any], cm: Sequence[float], tm: Sequence[float]) -> None:
        at = len(self._shows)
        # The text rendering matrix's vertical terms, upright text only.
        b = tm[0] * cm[1] + tm[1] * cm[3]
        c = tm[2] * cm[0] + tm[3] * cm[2]
        d = tm[2] * cm[1] + tm[3] * cm[3]
        if abs(b) > 1e-6 or abs(c) > 1e-6 or d <= 0:
            self._shows.append(None)
            return
        baseline = tm[4] * cm[1] + tm[5] * cm[3] + cm[5] + self.rise * d
        size = _effective_size(cm, tm, self.font_size)
        self._shows.append(_Shown(_shown(operands), size, baseline))
        if at in self.hide and operands:
            self._hidden = (operands, operands[0])
            operands[0] = type(operands[0])() if isinstance(operands[0], list) else ""


def _extract(page: PageObject) -> tuple[str, list[float], dict[int, str]]:
    """The page's normalised text, the type size of each of its lines, and for lines
    that also hold smaller text, the words set in the line's own size (by line number)."""
    runs: list[tuple[str, float]] = []

    def visit(text: str, cm: Any, tm: Any, _font: Any, font_size: Any) -> None:
        if text:
            try:
                runs.append((text, _effective_size(cm, tm, float(font_size or 0))))
            except (TypeError, ValueError, IndexError):
                runs.append((text, 0.0))

    marks = _FootnoteMarks()

    def read() -> str:
        runs.clear()
        text = page.extract_text(
            visitor_text=visit,
            visitor_operand_before=marks.before,
            visitor_operand_after=marks.after,
        )
        return text or ""

    raw = read()
    if marks.marks():
        # Read again without the footnote marks (pages that have none are read once).
        marks.read_again()
        raw = read()
    # pypdf's output is the visited runs in order, with line breaks it adds: walk both to
    # give each character of the output the size of the run it came from.
    char_sizes = [0.0] * len(raw)
    pos = 0
    for text, size in runs:
        at = pos if raw.startswith(text, pos) else raw.find(text, pos, pos + len(text) + 64)
        if at < 0:
            continue
        char_sizes[at : at + len(text)] = [size] * len(text)
        pos = at + len(text)
    raw, char_sizes = _close_small_caps_gaps(raw, char_sizes)
    raw_sizes: dict[str, list[tuple[float, str]]] = collections.defaultdict(list)
    at = 0
    for raw_line in raw.split("\n"):
        line_sizes = char_sizes[at : at + len(raw_line)]
        counts: collections.Counter[float] = collections.Counter(
            size
            for ch, size in zip(raw_line, line_sizes, strict=False)
            if size > 0 and not ch.isspace()
        )
        at += len(raw_line) + 1
        key = normalize(raw_line)
        if key:
            size = _line_size(counts)
            raw_sizes[key].append((size, _set_in(raw_line, line_sizes, size)))
    text = normalize(raw)
    sizes = []
    large: dict[int, str] = {}
    for n, line in enumerate(text.split("\n")):
        found = raw_sizes.get(line.strip())
        size, own = found.pop(0) if found else (0.0, "")
        sizes.append(size)
        if own and own != clean_inline(line):
            large[n] = own
    return text, sizes, large


# A space between a letter and a lone letter (a word of one letter).
_LONE_LETTER = re.compile(r"(?<=[^\W\d_]) [^\W\d_](?!\w)")


def _close_small_caps_gaps(raw: str, sizes: list[float]) -> tuple[str, list[float]]:
    """``raw`` without the spaces pypdf put inside words set in small capitals.

    Faux small capitals are capitals in two sizes ("R" large, "EACT" smaller), and their
    letter-spacing kerns can pass pypdf's word-gap threshold: "REAC T". A smaller-size
    capital standing alone between such a space and the end of its word was a lowercase
    letter in the source, and the only lowercase word of one letter is "a", so any other
    is the end of the word before it."""
    drop: list[int] = []
    n = len(raw)
    for match in _LONE_LETTER.finditer(raw):
        i = match.start()
        if not (raw[i - 1].isupper() and raw[i + 1].isupper()) or raw[i + 1] == "A":
            continue
        small = sizes[i + 1]
        if small <= 0 or sizes[i - 1] != small:
            continue
        # Capitals of the larger size on the same line: it is set in small capitals.
        start = raw.rfind("\n", 0, i) + 1
        end = raw.find("\n", i)
        end = n if end < 0 else end
        larger = [
            s
            for ch, s in zip(raw[start:end], sizes[start:end], strict=False)
            if ch.isupper() and s > small
        ]
        if larger and 0.6 <= small / max(larger) <= 0.9:
            drop.append(i)
    if not drop:
        return raw, sizes
    gone = set(drop)
    return (
        "".join(ch for i, ch in enumerate(raw) if i not in gone),
        [s for i, s in enumerate(sizes) if i not in gone],
    )


def _set_in(line: str, sizes: Sequence[float], size: float) -> str:
    """The words of ``line`` set in its own type size (small capitals included), without
    smaller text that the page has on the same baseline: a table's column heads beside a
    report's title ("November - 2015Pre-Pawn Redemption ...")."""
    if size <= 0 or min((s for s in sizes if s > 0), default=size) >= 0.6 * size:
        return ""
    kept = []
    for ch, s in zip(line, sizes, strict=False):
        if s <= 0 or s >= 0.6 * size:
            kept.append(ch)
        elif kept and kept[-1] != " ":
            kept.append(" ")
    return clean_inline("".join(kept))


def _draws_image(page: PageObject, depth: int = 0) -> bool:
    """Whether the page (or a form it draws) has an image: a scan, not a blank page."""
    try:
        resources = page.get("/Resources")
        resources = resources.get_object() if resources is not None else None
        xobjects = resources.get("/XObject") if resources is not None else None
        if xobjects is None:
            return False
        for ref in xobjects.get_object().values():
            obj = ref.get_object()
            subtype = obj.get("/Subtype")
            if subtype == "/Image":
                return True
            if subtype == "/Form" and depth < 3 and _draws_image(obj, depth + 1):
                return True
    except MemoryError:
        raise
    except Exception:
        return False
    return False


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


@dataclass
class _Read:
    reader: PdfReader
    page_count: int
    pages: list[_Page]  # pages with text, in order
    blank: list[int]  # pages without a text layer
    images: set[int]  # of those, the ones that show an image


def _read(path: Path) -> _Read:
    data = path.read_bytes()
    if not data or data.isspace():
        raise DamagedFileError(EMPTY_FILE)
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

    read: list[_Page] = []
    blank: list[int] = []
    images: set[int] = set()
    maybe_tables: dict[int, str] = {}
    failures = 0
    last_error: BaseException | None = None
    for index in range(page_count):
        try:
            page = pages[index]
            text, sizes, large = _extract(page)
        except MemoryError:
            raise
        except Exception as exc:
            # One pathological page (bad font, broken stream, recursion) costs that
            # page only.
            failures += 1
            last_error = exc
            continue
        if sum(ch.isalnum() for ch in text) < _PAGE_MIN_LETTERS:
            blank.append(index + 1)
            if _draws_image(page):
                images.add(index + 1)
        if text:
            read.append(_Page(index + 1, text, sizes, large=large))
            if _may_have_table(page, text):
                maybe_tables[index + 1] = text
    if failures == page_count and last_error is not None:
        raise DamagedFileError(f"damaged PDF: {_short_cause(last_error)}")
    found = pdf_tables.find_tables(path, maybe_tables) if maybe_tables else {}
    read = [_with_tables(p, found[p.number]) if p.number in found else p for p in read]
    return _Read(reader, page_count, read, blank, images)


def _may_have_table(page: PageObject, text: str) -> bool:
    """Whether the page is worth pdfplumber's (slow) look for tables, and small enough
    for it to take no more than about a second."""
    if len(text) > pdf_tables.MAX_PAGE_CHARS:
        return False
    try:
        contents = page.get_contents()
        content = contents.get_data() if contents is not None else b""
    except MemoryError:
        raise
    except Exception:
        return False
    if len(content) > pdf_tables.MAX_CONTENT_BYTES:
        return False
    return pdf_tables.may_have_table(text, content)


def _with_tables(page: _Page, tables: Sequence[pdf_tables.Table]) -> _Page:
    """``page`` with its tables' rows in place of pypdf's reading of them."""
    lines, origin, ranges = pdf_tables.merge(page.text.split("\n"), tables)
    if not ranges:
        return page
    # A table's lines have no type size: they are never taken for headings or titles.
    sizes = [page.sizes[o] if 0 <= o < len(page.sizes) else 0.0 for o in origin]
    moved = {o: n for n, o in enumerate(origin) if o >= 0}
    large = {moved[o]: words for o, words in page.large.items() if o in moved}
    return replace(page, text="\n".join(lines), sizes=sizes, large=large, tables=tuple(ranges))


def _no_text(read: _Read) -> bool:
    letters = sum(sum(ch.isalnum() for ch in p.text) for p in read.pages)
    # Scans often carry a stray page number or stamp; a few characters a page is no text.
    return letters < 3 or (read.page_count >= 5 and letters < 4 * read.page_count)


# --- headings and title --------------------------------------------------------------


def _body_size(pages: Sequence[_Page]) -> float:
    weights: collections.Counter[float] = collections.Counter()
    for page in pages:
        for line, size in zip(page.text.split("\n"), page.sizes, strict=False):
            if size > 0:
                weights[size] += len(line.strip())
    return weights.most_common(1)[0][0] if weights else 0.0


def _heading_levels(
    pages: Sequence[_Page], body: float, skip: set[tuple[int, int]]
) -> dict[float, int]:
    """Heading type sizes, largest first, mapped to levels 1, 2, ..."""
    if body <= 0:
        return {}
    total = 0
    by_size: collections.Counter[float] = collections.Counter()
    for page in pages:
        for i, (line, size) in enumerate(zip(page.text.split("\n"), page.sizes, strict=False)):
            total += len(line.strip())
            if (
                size >= body * _HEADING_RATIO
                and size >= body + _HEADING_MIN_GAIN_PT
                and (page.number, i) not in skip
                and _heading_line(line.strip())
            ):
                by_size[size] += len(line.strip())
    sizes = [s for s, chars in by_size.items() if chars <= _HEADING_MAX_SHARE * max(total, 1)]
    # Sizes within half a point are one style set by different tools or scalings.
    levels: dict[float, int] = {}
    level = 0
    previous = None
    for size in sorted(sizes, reverse=True):
        if previous is None or previous - size > 0.5:
            level += 1
        previous = size
        if level <= _MAX_HEADING_LEVELS:
            levels[size] = level
    return levels


def _largest_text(page: _Page, body: float) -> tuple[str, set[int]]:
    """The first run of lines set in the largest type of the page, when that type is
    clearly larger than the body text: a paper's or report's title."""
    lines = page.text.split("\n")
    # Only lines of words: an arXiv stamp or a big page number is not a title.
    known = [
        s
        for line, s in zip(lines, page.sizes, strict=False)
        if s > 0 and _mostly_letters(line) and sum(ch.isalpha() for ch in line) >= 3
    ]
    if not known or body <= 0:
        return "", set()
    largest = max(known)
    if largest < body * _HEADING_RATIO:
        return "", set()
    picked: list[int] = []
    for i, (line, size) in enumerate(zip(lines, page.sizes, strict=False)):
        if abs(size - largest) <= 0.5 and line.strip():
            if picked and i != picked[-1] + 1:
                break
            picked.append(i)
            if len(picked) == 3:
                break
        elif picked:
            break
    words = " ".join(page.large.get(i, lines[i]) for i in picked)
    title = _SPACE_BEFORE_PUNCT.sub(r"\1", clean_inline(words))
    if not (3 <= len(title) <= 200 and _mostly_letters(title) and len(title.split()) <= 25):
        return "", set()
    return title, set(picked)


def _choose_title(read: _Read, path: Path, body: float) -> tuple[str, set[tuple[int, int]]]:
    """The title, and the (page, line) places it was taken from (not headings then)."""
    title = _metadata_title(read.reader)
    first = read.pages[0] if read.pages else None
    if title or first is None:
        return title or path.stem, set()
    largest, lines = _largest_text(first, body) if first.number == 1 else ("", set())
    if largest:
        return largest, {(first.number, i) for i in lines}
    first_lines = first.text.split("\n")[:3]
    title = next((clean_inline(line) for line in first_lines if _title_line(line)), path.stem)
    return title, set()


# --- words split by letter-spacing ----------------------------------------------------

_LETTERS = re.compile(r"[^\W\d_]+")
# Three or more lone capitals in a row: a word set with wide tracking ("S U M M A R Y").
_SPACED_LETTERS = re.compile(r"(?<!\S)(?:[^\W\d_] ){2,}[^\W\d_](?!\S)")


def _capitals(word: str) -> bool:
    return word.isalpha() and word.isupper()


def _vocabulary(pages: Sequence[_Page], body: float) -> set[str]:
    """The document's words (case-folded) from its text lines, not its larger type."""
    words: set[str] = set()
    for page in pages:
        for line, size in zip(page.text.split("\n"), page.sizes, strict=False):
            if size < body * _HEADING_RATIO:
                words.update(w.casefold() for w in _LETTERS.findall(line))
    return words


def _rejoined(line: str, vocabulary: set[str]) -> str:
    """``line`` (set large: a title or heading) with the words in capitals that its
    letter-spacing split rejoined, and in a line of capitals no space before a colon
    or comma ("REACT :"; a French "Téléphone :" keeps its space).

    Faux small capitals change size (and often font) inside a word, and the kerning
    between the pieces passes pypdf's word-gap test: "RE ASONING + ACT ING". Two pieces
    in capitals are one word when that word is in the document's running text and one
    of the pieces is not ("re" may be, "asoning" is not; "SOME TIMES" stays apart)."""

    def spaced(match: re.Match[str]) -> str:
        word = match.group(0).replace(" ", "")
        return word if _capitals(word) and word.casefold() in vocabulary else match.group(0)

    out: list[str] = []
    for token in _SPACED_LETTERS.sub(spaced, line).split(" "):
        if out and _capitals(out[-1]) and _capitals(token):
            joined = out[-1] + token
            pieces_words = out[-1].casefold() in vocabulary and token.casefold() in vocabulary
            if joined.casefold() in vocabulary and not pieces_words:
                out[-1] = joined
                continue
        out.append(token)
    joined = " ".join(out)
    if all(ch.isupper() for ch in joined if ch.isalpha()):
        return _SPACE_BEFORE_PUNCT.sub(r"\1", joined)
    return joined


def _rejoin_large_lines(pages: Sequence[_Page], body: float) -> list[_Page]:
    """``pages`` with the lines set larger than the body text (titles, headings) read by
    :func:`_rejoined`; one line for one line, so sizes and tables keep their places."""
    if body <= 0:
        return list(pages)
    vocabulary = _vocabulary(pages, body)
    out: list[_Page] = []
    for page in pages:
        lines = page.text.split("\n")
        changed = False
        for n, size in enumerate(page.sizes[: len(lines)]):
            if size >= body * _HEADING_RATIO:
                line = _rejoined(lines[n], vocabulary)
                changed = changed or line != lines[n]
                lines[n] = line
        if not changed:
            out.append(page)
            continue
        large = {n: _rejoined(words, vocabulary) for n, words in page.large.items()}
        out.append(replace(page, text="\n".join(lines), large=large))
    return out


# --- blocks --------------------------------------------------------------------------


def _page_blocks(
    text: str,
    offset: int,
    page: int,
    line_levels: Sequence[int] = (),
    headings: list[tuple[int, str]] | None = None,
    tables: Sequence[tuple[int, int]] = (),
) -> list[Block]:
    """Blocks of one page's normalised ``text`` (which starts at ``offset``).

    ``line_levels[i]`` is the heading level of line ``i`` (0: not a heading);
    ``headings`` is the open heading path, carried from page to page and updated here;
    ``tables`` are the line ranges (end exclusive) of tables, one block each."""
    if headings is None:
        headings = []
    lines: list[tuple[int, str]] = []
    pos = 0
    for raw in text.split("\n"):
        lines.append((pos, raw))
        pos += len(raw) + 1
    lengths = sorted(len(raw.strip()) for _, raw in lines if raw.strip())
    # A line that stops well short of the usual width ended its paragraph.
    typical = lengths[(len(lengths) * 3) // 4] if lengths else 0

    blocks: list[Block] = []

    def path() -> tuple[str, ...]:
        return tuple(t for _, t in headings)

    def close(start: int, end: int) -> None:
        blocks.append(Block(BlockKind.PARAGRAPH, offset + start, offset + end, path(), page))

    start = end = -1
    prev = ""
    only_titles = False  # the running block is title-like lines only
    heading_at = -1  # the running heading: its level while lines of it continue
    heading_level = 0
    table_end = dict(tables)
    skip_to = 0
    for index, (at, raw) in enumerate(lines):
        if index < skip_to:
            continue
        line = raw.strip()
        level = line_levels[index] if index < len(line_levels) else 0
        line_start = at + (len(raw) - len(raw.lstrip()))
        line_end = line_start + len(line)
        if heading_at >= 0 and not (line and level == heading_level):
            title = clean_inline(text[heading_at:end])
            while headings and headings[-1][0] >= heading_level:
                headings.pop()
            headings.append((heading_level, title))
            blocks.append(Block(BlockKind.HEADING, offset + heading_at, offset + end, path(), page))
            heading_at, heading_level = -1, 0
        if index in table_end:
            if start >= 0:
                close(start, end)
            start, prev = -1, ""
            skip_to = table_end[index]
            last_at, last = lines[skip_to - 1]
            blocks.append(
                Block(BlockKind.TABLE, offset + at, offset + last_at + len(last), path(), page)
            )
            continue
        if not line:
            if start >= 0:
                close(start, end)
            start, prev = -1, ""
            continue
        if level:
            if start >= 0:
                close(start, end)
                start = -1
            if heading_at < 0:
                heading_at, heading_level = line_start, level
            end = line_end
            prev = ""
            continue
        if start >= 0:
            sentence_ended = bool(_SENTENCE_END.search(prev))
            boundary = (
                bool(_BULLET.match(line))
                or (sentence_ended and _starts_upper(line) and len(prev) < 0.85 * typical)
                or (sentence_ended and _title_like(line))
                or (only_titles and _starts_upper(line) and len(line) >= 0.6 * typical)
            )
            if boundary:
                close(start, end)
                start = -1
        if start < 0:
            start, only_titles = line_start, True
        only_titles = only_titles and _title_like(line)
        end = line_end
        prev = line
    if heading_at >= 0:
        while headings and headings[-1][0] >= heading_level:
            headings.pop()
        headings.append((heading_level, clean_inline(text[heading_at:end])))
        blocks.append(Block(BlockKind.HEADING, offset + heading_at, offset + end, path(), page))
    elif start >= 0:
        close(start, end)
    return blocks


# Running heads and feet: a line among the first or last two of a page that recurs, its
# numbers aside, on at least RUNNING_MIN_PAGES pages and RUNNING_MIN_SHARE of them (a
# journal's name, a report's title, "Page 3 of 12"; odd and even pages may differ).
RUNNING_MIN_PAGES = 3
RUNNING_MIN_SHARE = 0.3
RUNNING_MAX_CHARS = 120
_NUMBER = re.compile(r"\d+")
# An amount (a decimal, a thousands separator, a currency or per cent): a page's subtotal
# may recur at its foot, and it is content; a page number never looks like this.
_AMOUNT = re.compile(r"\d[.,]\d|[$€£¥%]")
_FIGURES = re.compile(r"\d+(?:[.,]\d+)*")


def _running_lines(pages: Sequence[_Page]) -> dict[int, set[int]]:
    """Page index -> the indices of its lines that are running heads or feet, past the
    first page each appears on."""
    if len(pages) < RUNNING_MIN_PAGES:
        return {}
    places: dict[tuple[str, str], set[int]] = collections.defaultdict(set)
    candidates: list[list[tuple[int, str, str]]] = []
    filled_counts: list[int] = []
    for i, page in enumerate(pages):
        lines = page.text.split("\n")
        in_table = {n for start, end in page.tables for n in range(start, end)}
        filled = [n for n, line in enumerate(lines) if line.strip() and n not in in_table]
        found = []
        for where, chosen in (("top", filled[:2]), ("foot", filled[-2:])):
            for n in chosen:
                line = " ".join(lines[n].split())
                if len(line) > RUNNING_MAX_CHARS or _AMOUNT.search(line):
                    continue
                if where == "top" and n + 1 < len(lines):
                    # A table's header repeated above its rows on every page stays.
                    following = next((x for x in lines[n + 1 :] if x.strip()), "")
                    if len(_FIGURES.findall(following)) >= 2:
                        continue
                key = _NUMBER.sub("#", line.casefold())
                places[(where, key)].add(i)
                found.append((n, where, key))
        candidates.append(found)
        filled_counts.append(len(filled))
    needed = max(RUNNING_MIN_PAGES, math.ceil(RUNNING_MIN_SHARE * len(pages)))
    out: dict[int, set[int]] = {}
    for i, found in enumerate(candidates):
        # Kept where it first appears: a footnote's definition repeated on every page
        # ("L/F = load factor") is still found once, and so is the report's name.
        running = {
            n
            for n, where, key in found
            if len(places[(where, key)]) >= needed and min(places[(where, key)]) != i
        }
        # A page that is nothing but such lines (the same short page four times, a
        # blank page's number) keeps them: it would be left empty.
        if running and len(running) < filled_counts[i]:
            out[i] = running
    return out


def _without_running_lines(pages: Sequence[_Page]) -> list[_Page]:
    """``pages`` with their running heads and feet blanked to spaces: they stay out of
    passages, headings and quotes (a journal's name between the halves of a sentence
    cut by a page break), while every offset into the page's text stays what it was."""
    running = _running_lines(pages)
    if not running:
        return list(pages)
    out = []
    for i, page in enumerate(pages):
        leave_out = running.get(i)
        if not leave_out:
            out.append(page)
            continue
        lines = page.text.split("\n")
        spans = []
        at = 0
        for n, line in enumerate(lines):
            if n in leave_out:
                spans.append((at, at + len(line)))
                lines[n] = " " * len(line)
            at += len(line) + 1
        text = "\n".join(lines)
        if i == len(pages) - 1:
            # The document's text ends with its last words, not a blanked foot.
            text = text.rstrip()
        kept = text.count("\n") + 1
        sizes = [0.0 if n in leave_out else size for n, size in enumerate(page.sizes)][:kept]
        words = tuple(w for w in page.words if not any(s <= w[0] < e for s, e in spans))
        large = {n: t for n, t in page.large.items() if n not in leave_out and n < kept}
        out.append(replace(page, text=text, sizes=sizes, words=words, large=large))
    return out


def _assemble(
    read: _Read, pages: Sequence[_Page], path: Path, ocr_pages: Sequence[int] = ()
) -> ParsedDocument:
    pages = _without_running_lines(pages)
    body = _body_size([p for p in pages if not p.from_ocr])
    pages = _rejoin_large_lines(pages, body)
    title, title_lines = _choose_title(read, path, body)
    levels = _heading_levels([p for p in pages if not p.from_ocr], body, title_lines)

    texts: list[str] = []
    spans: list[PageSpan] = []
    blocks: list[Block] = []
    words: list[WordBox] = []
    headings: list[tuple[int, str]] = []
    offset = 0
    for i, page in enumerate(pages):
        end = offset + len(page.text)
        # Spans are contiguous: the separator after a page belongs to that page.
        span_end = end + len(PAGE_SEPARATOR) if i + 1 < len(pages) else end
        spans.append(PageSpan(page.number, offset, span_end))
        # The title set again on the page (the metadata's title as the page's largest
        # line) is not a heading: every chunk's context starts with the title already.
        line_levels = [
            levels.get(size, 0)
            if (page.number, n) not in title_lines
            and _heading_line(line.strip())
            and clean_inline(line).casefold() != title.casefold()
            else 0
            for n, (line, size) in enumerate(zip(page.text.split("\n"), page.sizes, strict=False))
        ]
        blocks.extend(
            _page_blocks(page.text, offset, page.number, line_levels, headings, page.tables)
        )
        words.extend(
            WordBox(page.number, offset + s, offset + e, x0, y0, x1, y1)
            for s, e, x0, y0, x1, y1 in page.words
        )
        texts.append(page.text)
        offset = span_end
    return ParsedDocument(
        text=PAGE_SEPARATOR.join(texts),
        title=title,
        blocks=tuple(blocks),
        pages=tuple(spans),
        page_count=read.page_count,
        ocr_pages=tuple(ocr_pages),
        words=tuple(words),
    )


# --- entry points --------------------------------------------------------------------


def parse(path: Path) -> ParsedDocument:
    """The text layer only. Scanned pages are named in ``needs_ocr``; a PDF that is all
    scan raises ``ScannedError`` (its pages are then for ``parse_scanned``)."""
    read = _read(path)
    if _no_text(read):
        if read.images:
            raise ScannedError(SCANNED_REASON)
        raise NoTextError(SCANNED_REASON)
    parsed = _assemble(read, read.pages, path)
    if read.images:
        parsed = replace(parsed, needs_ocr=tuple(sorted(read.images)))
    return parsed


def parse_scanned(path: Path, reader: Any, dpi: int) -> ParsedDocument:
    """The text layer, with the pages that have none read by OCR.

    ``reader`` is a ``core.ingest.ocr.PageReader``. In a PDF without any text layer
    every page is read; otherwise only the pages without text that show an image."""
    import pypdfium2 as pdfium

    from core.ingest.ocr import NO_TEXT_REASON, page_text, render_scale

    read = _read(path)
    scanned = _no_text(read)
    wanted = set(range(1, read.page_count + 1)) if scanned else read.images
    by_number = {p.number: p for p in read.pages}
    if scanned:
        by_number.clear()  # a stray page number is no text layer: OCR reads it too
    try:
        document = pdfium.PdfDocument(str(path))
    except pdfium.PdfiumError as exc:
        raise DamagedFileError(f"damaged PDF: {_short_cause(exc)}") from exc
    read_pages: list[int] = []
    try:
        for number in sorted(wanted):
            if number > len(document):
                continue
            page = document[number - 1]
            width, height = page.get_size()
            scale = render_scale(width, height, dpi)
            image = page.render(scale=scale, grayscale=True).to_pil()
            found = reader.read(image, 1 / scale)
            page.close()
            text, offsets = page_text(found)
            if not text:
                continue
            boxes = tuple(
                (s, e, w.x0, w.y0, w.x1, w.y1) for (s, e), w in zip(offsets, found, strict=True)
            )
            by_number[number] = _Page(number, text, [0.0] * (text.count("\n") + 1), True, boxes)
            read_pages.append(number)
    finally:
        document.close()
    pages = [by_number[n] for n in sorted(by_number)]
    letters = sum(sum(ch.isalnum() for ch in p.text) for p in pages)
    if letters < 3:
        raise NoTextError(NO_TEXT_REASON)
    return _assemble(read, pages, path, read_pages)
