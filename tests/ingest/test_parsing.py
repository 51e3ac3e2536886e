"""Parsing real files: every format, the PDF robustness set, and the sandbox limits.

Everything here reads real files from disk (the sample documents, the shared PDF set, or
files written to ``tmp_path``) and runs the real worker process; nothing is mocked.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
import unicodedata
from pathlib import Path

import docx
import psutil
import pytest
from docx.oxml import parse_xml
from docx.oxml.ns import nsdecls
from docx.shared import Inches

from core.errors import (
    DamagedFileError,
    EncryptedError,
    ParseError,
    ParseLimitError,
    ScannedError,
    UnsupportedFileError,
)
from core.ingest import (
    SUPPORTED_EXTENSIONS,
    ParserPool,
    detect_type,
    parse_file,
    skip_reason,
)
from core.records import Block, BlockKind, ParsedDocument

REPO = Path(__file__).resolve().parents[2]
SAMPLES = REPO / "resources" / "sample-docs"
PDFS = REPO.parent / "shared" / "data" / "pdfs"

MC_NS = "http://schemas.openxmlformats.org/markup-compatibility/2006"

HANDBOOK = SAMPLES / "on-call-handbook.md"
TRAVEL = SAMPLES / "travel-policy.html"
EXPENSES = SAMPLES / "expense-limits-note.txt"
ERROR_CODES = SAMPLES / "api-error-codes.docx"
SECURITY = SAMPLES / "security-policy.pdf"

# Every file of the shared PDF set that must fail, and how. All others must be indexed.
# encrypted-rc4-40-owner-only.pdf has only an owner password, so it opens with the empty
# user password and is indexed; the others need a real user password (the AES ones also
# need the `cryptography` package, pinned in requirements.txt). aes256-r6-user opens with an
# empty password with pypdf (it reports the owner password matched), so it is indexed.
PDF_FAILURES: dict[str, tuple[type[ParseError], str]] = {
    "empty-zero-bytes.pdf": (DamagedFileError, "empty file"),
    "encrypted-aes256-r6-pdfminer.pdf": (EncryptedError, "encrypted"),
    "encrypted-crazyones-256.pdf": (EncryptedError, "encrypted"),
    "encrypted-libreoffice-openpassword.pdf": (EncryptedError, "encrypted"),
    "encrypted-password-example.pdf": (EncryptedError, "encrypted"),
    "encrypted-rc4-128.pdf": (EncryptedError, "encrypted"),
    "evil-recursive-xobjects.pdf": (DamagedFileError, "damaged PDF: startxref not found"),
    # The fast pass leaves scans to OCR (tests/ingest/test_ocr.py reads them in its own pass).
    "scan-ccittfax-image-only.pdf": (ScannedError, "no text layer (scanned?)"),
    "scanned-non-text-searchable.pdf": (ScannedError, "no text layer (scanned?)"),
    "unreadable-metadata.pdf": (DamagedFileError, "damaged PDF: Invalid object in /Pages"),
}


def block_texts(doc: ParsedDocument, kind: BlockKind | None = None) -> list[str]:
    return [doc.text[b.start : b.end] for b in doc.blocks if kind is None or b.kind == kind]


def find_block(doc: ParsedDocument, needle: str) -> Block:
    matches = [b for b in doc.blocks if needle in doc.text[b.start : b.end]]
    assert matches, f"no block contains {needle!r}"
    return matches[0]


def assert_well_formed(doc: ParsedDocument) -> None:
    text = doc.text
    assert text and text == text.strip()
    assert "\x00" not in text and "\r" not in text
    assert unicodedata.is_normalized("NFC", text)
    assert doc.title and doc.title == doc.title.strip()
    previous_end = 0
    for block in doc.blocks:
        assert previous_end <= block.start < block.end <= len(text), block
        piece = text[block.start : block.end]
        assert piece == piece.strip() and piece, block
        previous_end = block.end
    if doc.pages:
        assert doc.pages[0].start == 0
        assert doc.pages[-1].end == len(text)
        for before, after in zip(doc.pages, doc.pages[1:], strict=False):
            assert before.end == after.start and before.page < after.page
        assert all(1 <= span.page <= doc.page_count for span in doc.pages)
        for block in doc.blocks:
            assert block.page == doc.page_at(block.start)
            span = next(s for s in doc.pages if s.page == block.page)
            assert block.end <= span.end


@pytest.fixture(scope="module")
def pool():
    with ParserPool(timeout_s=30.0, memory_mb=1024) as shared:
        yield shared


def wait_for_exit(pid: int, timeout_s: float = 10.0) -> bool:
    """Whether process ``pid`` ends (or is a zombie nobody has reaped yet) in time."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            # A killed process shows as a zombie as soon as its first thread is gone,
            # while its other threads (a reader's parent watch) still hold its sockets.
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE and (
                not os.path.isdir(f"/proc/{pid}/task") or len(os.listdir(f"/proc/{pid}/task")) <= 1
            ):
                return True
        except psutil.NoSuchProcess:
            return True
        time.sleep(0.05)
    return False


# --- the shared PDF robustness set -----------------------------------------------------


@pytest.mark.timeout(300)
def test_every_pdf_is_indexed_or_fails_with_a_reason(pool: ParserPool) -> None:
    if not PDFS.is_dir():
        pytest.skip(f"shared PDF set not found at {PDFS}")
    files = sorted(PDFS.glob("*.pdf"))
    assert len(files) == 36, "the shared set has 36 PDFs"
    outcomes: dict[str, ParsedDocument | ParseError] = {}
    rows = []
    started = time.perf_counter()
    for path in files:
        t0 = time.perf_counter()
        try:
            outcome: ParsedDocument | ParseError = pool.parse(path)
        except ParseError as exc:
            outcome = exc
        elapsed = time.perf_counter() - t0
        outcomes[path.name] = outcome
        if isinstance(outcome, ParsedDocument):
            detail = f"indexed  {outcome.page_count:>3} pages {len(outcome.text):>7} chars"
        else:
            detail = f"failed   {type(outcome).__name__}: {outcome.reason}"
        rows.append(f"  {path.name:<40} {detail}  ({elapsed:.2f} s)")
    total = time.perf_counter() - started
    print("\nPDF outcomes through ParserPool:\n" + "\n".join(rows))
    print(f"36 PDFs parsed in {total:.1f} s")

    for name, outcome in outcomes.items():
        if isinstance(outcome, ParseError):
            assert outcome.reason, name
            assert not isinstance(outcome, ParseLimitError), f"{name} hit a limit: {outcome}"
            assert name in PDF_FAILURES, f"{name} should be indexed, got {outcome!r}"
            cls, reason = PDF_FAILURES[name]
            assert type(outcome) is cls and outcome.reason == reason, name
        else:
            assert name not in PDF_FAILURES, f"{name} should fail"
            assert outcome.text.strip(), name
            assert_well_formed(outcome)

    owner_only = outcomes["encrypted-rc4-40-owner-only.pdf"]
    assert isinstance(owner_only, ParsedDocument)
    assert "pdf encryption test" in owner_only.text

    thesis = outcomes["geotopo-german-thesis.pdf"]
    assert isinstance(thesis, ParsedDocument)
    assert thesis.page_count == 117 and thesis.title == "Geometrie und Topologie"


def test_pdf_pages_and_blocks_map_back_to_the_page() -> None:
    doc = parse_file(SECURITY)
    assert_well_formed(doc)
    assert doc.title == "Information Security Policy"
    assert doc.page_count == 2 and [s.page for s in doc.pages] == [1, 2]
    assert doc.page_at(doc.text.index("at least 14 characters")) == 1
    assert doc.page_at(doc.text.index("within 1 hour")) == 2
    # Single-newline pypdf output is still split into paragraphs at section titles.
    assert "3 Reporting incidents" in block_texts(doc)
    incident = find_block(doc, "within 1 hour")
    assert incident.page == 2 and doc.text[incident.start : incident.end].startswith("Report a")


def test_pdf_without_header_or_empty_is_reported_damaged(tmp_path: Path) -> None:
    fake = tmp_path / "invoice.pdf"
    fake.write_text("this is not a PDF at all")
    assert detect_type(fake) == "pdf"
    with pytest.raises(DamagedFileError) as info:
        parse_file(fake)
    assert info.value.reason == "damaged PDF: not a PDF file"
    empty = tmp_path / "empty.pdf"
    empty.write_bytes(b"")
    with pytest.raises(DamagedFileError, match="empty file"):
        parse_file(empty)


# --- Markdown ---------------------------------------------------------------------------


def test_markdown_headings_lists_code_and_tables() -> None:
    doc = parse_file(HANDBOOK)
    assert_well_formed(doc)
    assert doc.title == "Kestrel Labs On-call Handbook"  # from the front matter
    # The stored text is the Markdown source after normalisation.
    assert doc.text == HANDBOOK.read_text(encoding="utf-8").strip()

    headings = {
        doc.text[b.start : b.end]: b.heading_path for b in doc.blocks if b.kind == "heading"
    }
    assert headings["# On-call Handbook"] == ("On-call Handbook",)
    assert headings["### Acknowledging a page"] == (
        "On-call Handbook",
        "Severity levels and response times",
        "Acknowledging a page",
    )
    assert find_block(doc, "+49 30 5550 1234").heading_path == (
        "On-call Handbook",
        "Severity levels and response times",
        "Acknowledging a page",
    )
    # A level-2 heading closes the level-3 section before it.
    assert find_block(doc, "€50 per incident").heading_path == ("On-call Handbook", "Compensation")
    assert find_block(doc, "setext heading").heading_path == (
        "On-call Handbook",
        "Setext headings work too",
    )

    code = block_texts(doc, BlockKind.CODE)
    assert len(code) == 1
    assert code[0].startswith("```bash") and code[0].endswith("```")
    assert "beacon ack --incident INC-2041" in code[0] and "beacon escalate" in code[0]
    # A shell comment inside the fence is not a heading.
    assert not any("Acknowledge and take" in t for t in block_texts(doc, BlockKind.HEADING))

    tables = block_texts(doc, BlockKind.TABLE)
    assert len(tables) == 1 and tables[0].count("\n") == 5 and "Sofia Russo" in tables[0]
    items = block_texts(doc, BlockKind.LIST_ITEM)
    assert len(items) == 9
    assert items[1].startswith("- **Secondary**") and "helps on SEV1 incidents." in items[1]
    assert items[3].startswith("1. **SEV1**") and "within 30 minutes." in items[3]


def test_markdown_edge_cases_and_normalisation(tmp_path: Path) -> None:
    source = (
        "Intro line before any heading.\r\n\r\n\r\n\r\n"
        "# Cafe\u0301 guide\r\n"
        "Some text with a NUL\x00 inside.\r\n"
        "\r\n"
        "    indented code\r\n"
        "    more code\r\n"
        "\r\n"
        "## Part *one*\r\n"
        "~~~\r\n"
        "# not a heading\r\n"
        "\r\n"
        "still code\r\n"
        "~~~\r\n"
        "* item one\r\n"
        "continued lazily\r\n"
        "* item two\r\n"
        "***\r\n"
        "Setext\r\n"
        "===\r\n"
        "Pipes | in a line\r\n"
        "---\r\n"
        "```python\r\n"
        "print('unclosed fence runs to the end')\r\n"
    )
    path = tmp_path / "guide.markdown"
    path.write_bytes(source.encode("utf-8"))
    doc = parse_file(path)
    assert_well_formed(doc)
    assert doc.title == "Café guide"  # first H1, NFC-composed
    assert "\n\n\n" not in doc.text and "NUL inside" in doc.text
    kinds = [(b.kind.value, doc.text[b.start : b.end].split("\n")[0]) for b in doc.blocks]
    assert kinds == [
        ("paragraph", "Intro line before any heading."),
        ("heading", "# Café guide"),
        ("paragraph", "Some text with a NUL inside."),
        ("code", "indented code"),
        ("heading", "## Part *one*"),
        ("code", "~~~"),
        ("list_item", "* item one"),
        ("list_item", "* item two"),
        ("heading", "Setext"),
        ("heading", "Pipes | in a line"),
        ("code", "```python"),
    ]
    tilde = doc.blocks[5]
    assert doc.text[tilde.start : tilde.end].endswith("still code\n~~~")
    assert tilde.heading_path == ("Café guide", "Part one")
    assert doc.blocks[6].end == doc.text.index("continued lazily") + len("continued lazily")
    assert doc.blocks[8].heading_path == ("Setext",)
    assert doc.text.endswith("print('unclosed fence runs to the end')")


# --- HTML -------------------------------------------------------------------------------


def test_html_keeps_visible_content_only() -> None:
    doc = parse_file(TRAVEL)
    assert_well_formed(doc)
    assert doc.title == "Travel Policy – Kestrel Labs Intranet"
    for hidden in (
        "TRACKING-SCRIPT-TEXT",  # script
        "font-family",  # style
        "People directory",  # nav
        "Search the intranet",  # form
        "cookies",  # hidden attribute
        "RELATED-SIDEBAR-TEXT",  # aside
        "Imprint",  # site footer
        "enable JavaScript",  # noscript
    ):
        assert hidden not in doc.text, hidden
    table = find_block(doc, "Germany")
    assert table.kind == BlockKind.TABLE
    assert doc.text[table.start : table.end] == (
        "Per diem rates 2025\n"
        "Country | Full day | Arrival or departure day\n"
        "Germany | €28 | €14\n"
        "United Kingdom | £35 | £18\n"
        "United States | $60 | $30"
    )
    assert table.heading_path == ("Travel Policy", "Meals and per diem")
    assert find_block(doc, "€250 per night").heading_path == ("Travel Policy", "Hotels")
    assert find_block(doc, "serviced apartment").heading_path == (
        "Travel Policy",
        "Hotels",
        "Longer stays",
    )
    items = block_texts(doc, BlockKind.LIST_ITEM)
    assert len(items) == 4 and items[1] == (
        "Second class rail by default; first class is allowed for journeys longer than 3 hours."
    )
    booking = find_block(doc, "at least 14 days")
    # Inline markup (<strong>, <em>) joins into the paragraph's running text.
    assert "the TripDesk portal at least 14 days before" in doc.text[booking.start : booking.end]


def test_html_edge_cases(tmp_path: Path) -> None:
    page = (
        "<html><head><meta charset='windows-1252'></head><body>"
        "<form id='aspnetForm'>"  # whole page in a form, as ASP.NET does: keep it
        "<h1>Caf\xe9 menu</h1>"
        "<p>Line one<br>line two</p>"
        "<div role='navigation'>Skip me</div>"
        "<p style='display: none'>Invisible</p>"
        "<table><tr><td><p>Layout cell text.</p></td><td><h2>Side heading</h2></td></tr></table>"
        "<div>Loose text in a div <span>with inline</span> parts</div>"
        "<pre>  keep   spacing\n    here</pre>"
        "<ul><li><p>Loose list item</p></li></ul>"
        "<!-- a comment -->"
        "</form></body></html>"
    )
    path = tmp_path / "menu.htm"
    path.write_bytes(page.encode("cp1252"))
    doc = parse_file(path)
    assert_well_formed(doc)
    assert doc.title == "Café menu"  # no <title>: first h1
    assert "Skip me" not in doc.text and "Invisible" not in doc.text and "comment" not in doc.text
    assert "Line one\nline two" in block_texts(doc)
    # A table used for layout is read as content, not as a grid of cells.
    assert find_block(doc, "Layout cell text.").kind == BlockKind.PARAGRAPH
    assert find_block(doc, "Side heading").kind == BlockKind.HEADING
    assert "Loose text in a div with inline parts" in block_texts(doc)
    assert block_texts(doc, BlockKind.CODE) == ["keep   spacing\n    here"]
    assert block_texts(doc, BlockKind.LIST_ITEM) == ["Loose list item"]


# --- DOCX -------------------------------------------------------------------------------


def test_docx_headings_lists_and_tables_in_body_order() -> None:
    doc = parse_file(ERROR_CODES)
    assert_well_formed(doc)
    assert doc.title == "API Error Codes"
    headings = [
        (doc.text[b.start : b.end], b.heading_path) for b in doc.blocks if b.kind == "heading"
    ]
    assert headings[:3] == [
        ("API Error Codes", ("API Error Codes",)),
        ("How to read an error", ("API Error Codes", "How to read an error")),
        ("Client errors", ("API Error Codes", "Client errors")),
    ]
    kinds = [b.kind.value for b in doc.blocks]
    table_index = kinds.index("table")
    # The table sits between the paragraph before it and the heading after it.
    assert "not retried automatically" in block_texts(doc)[table_index - 1]
    assert block_texts(doc)[table_index + 1] == "Rate limits"
    table = doc.blocks[table_index]
    assert table.heading_path == ("API Error Codes", "Client errors")
    rows = doc.text[table.start : table.end].split("\n")
    assert rows[0] == "Code | Meaning | What to do"
    assert rows[4] == (
        "KST-412 | Rate limit reached | "
        "Slow down; the limit is 600 requests per minute per API key."
    )
    items = [b for b in doc.blocks if b.kind == BlockKind.LIST_ITEM]
    assert len(items) == 2
    assert items[0].heading_path == ("API Error Codes", "Client errors", "Rate limits")
    assert find_block(doc, "KST-503").heading_path == ("API Error Codes", "Server errors")


def test_docx_title_fallbacks_and_broken_files(tmp_path: Path) -> None:
    made = docx.Document()
    made.add_heading("Quarterly numbers", level=1)
    made.add_paragraph("Revenue grew by 12 percent.")
    table = made.add_table(rows=2, cols=2)
    table.cell(0, 0).merge(table.cell(0, 1)).text = "Merged header"
    table.cell(1, 0).text, table.cell(1, 1).text = "Q1", "12%"
    tabbed = made.add_paragraph("Name\tValue")
    tabbed.paragraph_format.tab_stops.add_tab_stop(Inches(2))
    # A text box as Word writes it: the drawing, then the same text as a VML fallback.
    boxed = made.add_paragraph("See box: ")
    boxed._p.append(
        parse_xml(
            f'<w:r {nsdecls("w")} xmlns:mc="{MC_NS}"><mc:AlternateContent>'
            '<mc:Choice Requires="wps"><w:drawing><w:txbxContent><w:p><w:r>'
            "<w:t>Box text</w:t></w:r></w:p></w:txbxContent></w:drawing></mc:Choice>"
            "<mc:Fallback><w:pict><w:txbxContent><w:p><w:r><w:t>Box text</w:t></w:r></w:p>"
            "</w:txbxContent></w:pict></mc:Fallback></mc:AlternateContent></w:r>"
        )
    )
    path = tmp_path / "numbers.docx"
    made.save(str(path))
    doc = parse_file(path)
    assert_well_formed(doc)
    assert doc.title == "Quarterly numbers"  # no core title, no Title style: first heading
    assert block_texts(doc, BlockKind.TABLE) == ["Merged header\nQ1 | 12%"]
    assert "Name\tValue" in block_texts(doc)  # tab-stop definitions add no tabs
    assert "See box: Box text" in block_texts(doc)  # once, not twice

    not_zip = tmp_path / "notes.docx"
    not_zip.write_text("plain text saved with the wrong extension")
    with pytest.raises(DamagedFileError, match="damaged Word file"):
        parse_file(not_zip)
    ole = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + bytes(504)
    old_format = tmp_path / "old.docx"
    old_format.write_bytes(ole + "WordDocument".encode("utf-16-le"))
    with pytest.raises(UnsupportedFileError, match=r"old Word format"):
        parse_file(old_format)
    locked = tmp_path / "locked.docx"
    locked.write_bytes(ole + "EncryptedPackage".encode("utf-16-le"))
    with pytest.raises(EncryptedError):
        parse_file(locked)


# --- plain text -------------------------------------------------------------------------


def test_text_paragraphs_title_and_encodings(tmp_path: Path) -> None:
    doc = parse_file(EXPENSES)
    assert_well_formed(doc)
    assert doc.title == "Expense limits - quick reference"
    assert len(doc.blocks) == 9
    assert "monthly limit of EUR 5,000" in doc.text[doc.blocks[6].start : doc.blocks[6].end]

    windows = tmp_path / "cafe.txt"
    windows.write_bytes("Caf\xe9 opening hours\r\n\r\nMonday to Friday.\x00\r\n".encode("cp1252"))
    doc = parse_file(windows)
    assert doc.text == "Café opening hours\n\nMonday to Friday."
    assert doc.title == "Café opening hours"

    utf16 = tmp_path / "notes.text"
    utf16.write_text("One paragraph only, so the title is the file name.", encoding="utf-16")
    doc = parse_file(utf16)
    assert doc.title == "notes" and doc.text.startswith("One paragraph")

    no_bom = tmp_path / "export.txt"
    no_bom.write_bytes("Exported from a Windows tool without a BOM.".encode("utf-16-le"))
    assert parse_file(no_bom).text == "Exported from a Windows tool without a BOM."

    binary = tmp_path / "image.txt"
    binary.write_bytes(bytes(range(256)) * 8)
    with pytest.raises(UnsupportedFileError, match="binary"):
        parse_file(binary)
    blank = tmp_path / "blank.txt"
    blank.write_text("  \n\n \t\n")
    with pytest.raises(DamagedFileError, match="empty file"):
        parse_file(blank)


# --- registry ---------------------------------------------------------------------------


def test_detect_type_and_skip_reasons(tmp_path: Path) -> None:
    assert set(SUPPORTED_EXTENSIONS) == {
        ".org",
        ".pdf",
        ".txt",
        ".text",
        ".md",
        ".markdown",
        ".html",
        ".htm",
        ".docx",
        ".epub",
        ".pptx",
        ".pptm",
        ".odp",
        ".xlsx",
        ".xlsm",
        ".ods",
        ".csv",
        ".tsv",
        ".odt",
        ".rtf",
        ".eml",
        ".mbox",
    }
    expected = {
        "a.PDF": "pdf",
        "b.txt": "txt",
        "c.md": "md",
        "d.markdown": "md",
        "e.HTM": "html",
        "f.docx": "docx",
        "g.key": None,
        "README": None,
        "~$report.docx": None,
    }
    for name, kind in expected.items():
        path = tmp_path / name
        path.write_text("hello")
        assert detect_type(path) == kind, name
    # Content wins over a text extension, and makes an extension-less PDF readable.
    for name in ("scan.txt", "scan"):
        path = tmp_path / name
        path.write_bytes(SECURITY.read_bytes())
        assert detect_type(path) == "pdf"
        assert parse_file(path).page_count == 2

    assert skip_reason(tmp_path / "g.key") == "unsupported file type (.key)"
    assert skip_reason(tmp_path / "README") == "unsupported file type (no extension)"
    assert skip_reason(tmp_path / "~$report.docx") == "temporary Office lock file"
    with pytest.raises(UnsupportedFileError, match=r"\(\.key\)"):
        parse_file(tmp_path / "g.key")
    with pytest.raises(ParseError, match="file disappeared"):
        parse_file(tmp_path / "gone.md")


# --- the sandbox ------------------------------------------------------------------------


def test_pool_matches_in_process_results_and_rebuilds_errors(pool: ParserPool) -> None:
    for path in (HANDBOOK, TRAVEL, EXPENSES, ERROR_CODES, SECURITY):
        assert pool.parse(path) == parse_file(path) == ParserPool(in_process=True).parse(path)
    if PDFS.is_dir():
        with pytest.raises(EncryptedError) as info:
            pool.parse(PDFS / "encrypted-rc4-128.pdf")
        assert info.value.reason == "encrypted"
        assert "password" in info.value.hint  # the error's hint survives the trip
    with pytest.raises(UnsupportedFileError, match=r"unsupported file type \(\.key\)"):
        pool.parse(REPO / "nothing.key")


def test_pool_is_thread_safe(pool: ParserPool) -> None:
    files = [HANDBOOK, TRAVEL, EXPENSES, ERROR_CODES, SECURITY]
    expected = {path: parse_file(path) for path in files}
    failures: list[BaseException] = []

    def work() -> None:
        try:
            for path in files * 2:
                assert pool.parse(path) == expected[path]
        except BaseException as exc:
            failures.append(exc)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert not failures


def slow_html(tmp_path: Path) -> Path:
    # About 1.7 MB of nested markup: several seconds of BeautifulSoup work.
    body = "".join(
        f"<div><p>Paragraph {i} with <b>bold</b> words.</p><ul><li>item {i}</li></ul></div>"
        for i in range(20_000)
    )
    path = tmp_path / "slow.html"
    path.write_text(f"<html><body>{body}</body></html>")
    return path


def test_timeout_kills_the_worker_and_the_pool_recovers(tmp_path: Path) -> None:
    slow = slow_html(tmp_path)
    with ParserPool(timeout_s=0.5) as limited:
        assert limited.parse(EXPENSES).title == "Expense limits - quick reference"
        first_pid = limited.worker_pid
        assert first_pid is not None
        started = time.monotonic()
        with pytest.raises(ParseLimitError) as info:
            limited.parse(slow)
        assert info.value.reason == "took longer than 0.5 s to read"
        assert time.monotonic() - started < 5
        assert wait_for_exit(first_pid), "the stuck worker was not killed"
        assert limited.parse(HANDBOOK).title == "Kestrel Labs On-call Handbook"
        assert limited.worker_pid not in (None, first_pid)


def test_memory_limit_stops_a_runaway_parse_and_the_pool_recovers(tmp_path: Path) -> None:
    # A 4 MB web page: BeautifulSoup's tree takes some sixty times the markup, far above
    # a 50 MB allowance, yet quick to write. (Text files are read only up to the text
    # limit now, so no text file is this costly.)
    big = tmp_path / "huge-page.html"
    unit = "<div><p>The quick brown <b>fox</b> jumps.</p><ul><li>a</li><li>b</li></ul></div>\n"
    big.write_text(f"<html><body>{unit * (4_000_000 // len(unit))}</body></html>")
    with ParserPool(timeout_s=60, memory_mb=50) as limited:
        with pytest.raises(ParseLimitError) as info:
            limited.parse(big)
        assert info.value.reason == "needs more than 50 MB of memory to read"
        assert limited.parse(TRAVEL).title == "Travel Policy – Kestrel Labs Intranet"


@pytest.mark.skipif(not hasattr(signal, "SIGSEGV") or os.name == "nt", reason="POSIX signals")
def test_a_crashing_worker_fails_only_that_file(tmp_path: Path) -> None:
    slow = slow_html(tmp_path)
    with ParserPool(timeout_s=60) as crashing:
        crashing.parse(EXPENSES)
        pid = crashing.worker_pid
        assert pid is not None
        # Crash the worker for real while it is busy with the slow file.
        killer = threading.Timer(0.5, os.kill, args=(pid, signal.SIGSEGV))
        killer.start()
        with pytest.raises(DamagedFileError) as info:
            crashing.parse(slow)
        killer.join()
        assert info.value.reason == "parser crashed on this file"
        assert crashing.parse(EXPENSES).title == "Expense limits - quick reference"

        # A worker that dies while idle is replaced without failing the next file.
        idle_pid = crashing.worker_pid
        assert idle_pid is not None
        os.kill(idle_pid, signal.SIGKILL)
        assert wait_for_exit(idle_pid)
        assert crashing.parse(HANDBOOK).blocks


def test_close_stops_the_worker() -> None:
    closing = ParserPool()
    closing.parse(EXPENSES)
    pid = closing.worker_pid
    assert pid is not None
    closing.close()
    assert wait_for_exit(pid)
    with pytest.raises(RuntimeError):
        closing.parse(EXPENSES)


def test_close_cuts_short_a_parse_in_flight(tmp_path: Path) -> None:
    slow = slow_html(tmp_path)
    closing = ParserPool(timeout_s=60)
    closing.parse(EXPENSES)
    outcome: list[BaseException] = []

    def work() -> None:
        try:
            closing.parse(slow)
        except BaseException as exc:
            outcome.append(exc)

    worker = threading.Thread(target=work)
    worker.start()
    time.sleep(0.5)
    started = time.monotonic()
    closing.close()
    worker.join(10)
    assert time.monotonic() - started < 5
    assert len(outcome) == 1 and isinstance(outcome[0], ParseError)
    assert outcome[0].reason == "reading was stopped"


def test_pool_works_from_a_script_without_a_main_guard(tmp_path: Path) -> None:
    # "spawn" would normally re-run this script inside the worker, which would start a
    # pool from inside the worker; the pool must not depend on callers' main guards.
    script = tmp_path / "index_one.py"
    script.write_text(
        textwrap.dedent(
            f"""
            from pathlib import Path
            from core.ingest import ParserPool
            with ParserPool() as pool:
                print(pool.parse(Path({str(EXPENSES)!r})).title)
            """
        )
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    result = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=120, env=env
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "Expense limits - quick reference"


@pytest.mark.skipif(not hasattr(signal, "SIGTERM") or os.name != "posix", reason="POSIX")
def test_a_reader_stopped_by_a_signal_leaves_its_file_unread_not_failed(
    tmp_path: Path, library
) -> None:
    """A service stop signals the whole process group; when the reader's death is seen
    before this process's own handler runs, the file was marked failed ("reading was
    stopped") and, unchanged on disk, never read again. Now the run stops there and the
    file is read by the next one."""
    folder = tmp_path / "docs"
    folder.mkdir()
    for i in range(40):
        (folder / f"note-{i:02d}.md").write_text(
            f"# Note {i}\n\n" + "A line about the harbour and its ferries. " * 200,
            encoding="utf-8",
        )
    killed: list[int] = []

    def kill_the_reader() -> None:
        me = psutil.Process()
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not killed:
            for child in me.children(recursive=True):
                try:
                    os.kill(child.pid, signal.SIGTERM)
                    killed.append(child.pid)
                except ProcessLookupError:
                    continue
            time.sleep(0.005)

    killer = threading.Thread(target=kill_the_reader)
    killer.start()
    report = library.index([folder])
    killer.join()
    assert killed
    assert report.failed == 0, report.failures
    counts = library.status()["counts"]
    assert counts["failed"] == 0
    again = library.index([folder])
    assert again.failed == 0
    assert library.status()["counts"]["indexed"] == 40
