"""OCR of scanned pages: real scans from the shared PDF set, the real engine (Tesseract
through tesserocr), the real model and DuckDB.

What is checked: a scanned PDF ends indexed and a question finds its page; an image with
nothing to read ends failed with a plain reason; scanned pages inside a digital PDF are
read too; OCR waits for the digital files; it can be turned off; it runs inside its own
time limit; and a citation on a scanned page is highlighted on the words of the page
image, from the boxes OCR stored.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path

import pytest
from pypdf import PdfReader, PdfWriter

from core.config import Settings, load_settings
from core.errors import ConfigError, ParseLimitError, ScannedError
from core.ingest import ocr, pdf
from core.ingest.sandbox import ParserPool
from core.records import DocState, IndexProgress
from tests.conftest import SAMPLE_DOCS, SHARED_DATA

PDFS = SHARED_DATA / "pdfs"
SCANNED = PDFS / "scanned-non-text-searchable.pdf"
BLANK_SCAN = PDFS / "scan-ccittfax-image-only.pdf"
SECURITY = SAMPLE_DOCS / "security-policy.pdf"
# Words printed on the scanned page (read from the page image by eye).
SCANNED_SENTENCE = "This is an example of a non-text-searchable PDF."

pytestmark = pytest.mark.skipif(not ocr.engine_installed(), reason="OCR engine not installed")


@pytest.fixture(scope="module")
def reader() -> ocr.PageReader:
    page_reader = ocr.PageReader()
    yield page_reader
    page_reader.close()


def need_shared() -> None:
    if not PDFS.is_dir():
        pytest.skip(f"shared PDF set not found at {PDFS}")


def mixed_pdf(path: Path) -> Path:
    """The two-page digital security policy with the scanned page as its third page."""
    writer = PdfWriter()
    for source in (SECURITY, SCANNED):
        for page in PdfReader(source).pages:
            writer.add_page(page)
    with path.open("wb") as handle:
        writer.write(handle)
    return path


def many_scanned_pages(path: Path, copies: int) -> Path:
    writer = PdfWriter()
    page = PdfReader(SCANNED).pages[0]
    for _ in range(copies):
        writer.add_page(page)
    with path.open("wb") as handle:
        writer.write(handle)
    return path


# --- the engine and its languages ----------------------------------------------------


def test_languages_are_the_ones_the_engine_ships() -> None:
    shipped = ocr.available_languages()
    assert "eng" in shipped and "osd" not in shipped
    assert ocr.usable_languages(["xx-none", "eng"]) == ("eng",)
    assert ocr.usable_languages(["xx-none"]) == ("eng",)  # nothing usable: English


def test_a_language_that_is_not_shipped_is_a_clear_settings_error(tmp_path: Path) -> None:
    (tmp_path / "settings.json").write_text(json.dumps({"ocr_languages": ["klingon"]}))
    with pytest.raises(ConfigError) as info:
        load_settings(tmp_path)
    assert "ocr_languages" in info.value.message and '"eng"' in info.value.hint
    (tmp_path / "settings.json").write_text(
        json.dumps({"ocr_languages": ["eng"], "ocr_enabled": False})
    )
    settings = load_settings(tmp_path)
    assert settings.ocr_languages == ("eng",) and settings.ocr_enabled is False


# --- parsing -------------------------------------------------------------------------


def test_scanned_page_is_read_with_a_box_for_every_word(reader: ocr.PageReader) -> None:
    need_shared()
    with pytest.raises(ScannedError, match=r"no text layer \(scanned\?\)"):
        pdf.parse(SCANNED)  # the fast pass leaves it to OCR
    doc = pdf.parse_scanned(SCANNED, reader, ocr.DEFAULT_DPI)
    assert SCANNED_SENTENCE in " ".join(doc.text.split())
    assert doc.ocr_pages == (1,) and doc.page_count == 1
    assert [(s.page, s.start, s.end) for s in doc.pages] == [(1, 0, len(doc.text))]
    assert len(doc.words) > 40
    width, height = 612, 792  # the page, in points
    previous = -1
    for word in doc.words:
        piece = doc.text[word.start : word.end]
        assert piece and piece == piece.strip() and " " not in piece
        assert word.start > previous
        previous = word.start
        assert 0 <= word.x0 < word.x1 <= width and 0 <= word.y0 < word.y1 <= height
    # Reading order: the heading above the first sentence, which is above the last line.
    first = next(w for w in doc.words if doc.text[w.start : w.end] == "example")
    title = next(w for w in doc.words if doc.text[w.start : w.end] == "Non-text-searchable")
    assert title.y1 <= first.y0
    for block in doc.blocks:
        assert doc.text[block.start : block.end].strip() == doc.text[block.start : block.end]


def test_an_image_with_nothing_to_read_fails_with_a_plain_reason(
    reader: ocr.PageReader,
) -> None:
    need_shared()
    with pytest.raises(ScannedError):
        pdf.parse(BLANK_SCAN)
    with pytest.raises(Exception) as info:
        pdf.parse_scanned(BLANK_SCAN, reader, ocr.DEFAULT_DPI)
    assert getattr(info.value, "reason", "") == "no readable text on the page image"


def test_scanned_pages_inside_a_digital_pdf_are_read_too(
    tmp_path: Path, reader: ocr.PageReader
) -> None:
    need_shared()
    path = mixed_pdf(tmp_path / "policy-with-scan.pdf")
    fast = pdf.parse(path)
    assert fast.needs_ocr == (3,) and [s.page for s in fast.pages] == [1, 2]
    assert not fast.words and "at least 14 characters" in fast.text
    doc = pdf.parse_scanned(path, reader, ocr.DEFAULT_DPI)
    assert doc.ocr_pages == (3,) and [s.page for s in doc.pages] == [1, 2, 3]
    assert doc.title == fast.title == "Information Security Policy"
    at = " ".join(doc.text.split()).index("non-text-searchable")
    assert at > 0
    assert doc.page_at(doc.text.index("at least 14 characters")) == 1
    assert doc.page_at(doc.text.index("non-text-searchable")) == 3
    assert {w.page for w in doc.words} == {3}
    assert all(doc.page_at(w.start) == 3 for w in doc.words)


def test_ocr_runs_in_its_own_sandbox_with_its_own_time_limit(tmp_path: Path) -> None:
    need_shared()
    path = many_scanned_pages(tmp_path / "long-scan.pdf", 8)
    options = ocr.OcrOptions(timeout_s=1.0)
    with ParserPool(timeout_s=30.0, ocr=options) as pool:
        assert pool.ocr_enabled
        with pytest.raises(ParseLimitError, match=r"took longer than 1 s to read"):
            pool.parse_scanned(path)
        # The parser for everything else was never held up or harmed.
        assert pool.parse(SECURITY).title == "Information Security Policy"
        assert pool.worker_pid is not None
    # Its own memory cap: a page image the engine cannot hold is a limit, not "no text"
    # (Leptonica's failed allocations would otherwise read as a blank page).
    with (
        ParserPool(ocr=replace(options, timeout_s=120.0, memory_mb=60)) as pool,
        pytest.raises(ParseLimitError, match=r"needs more than 60 MB of memory"),
    ):
        pool.parse_scanned(SCANNED)
    with ParserPool(ocr=replace(options, timeout_s=120.0)) as pool:
        doc = pool.parse_scanned(SCANNED)
        assert SCANNED_SENTENCE in " ".join(doc.text.split()) and doc.words


# --- indexing --------------------------------------------------------------------------


def test_a_scanned_pdf_is_indexed_after_the_digital_files_and_found_by_a_question(
    lectern_home: Path, embedder: object, tmp_path: Path
) -> None:
    need_shared()
    from core.library import Library

    folder = tmp_path / "letters"
    folder.mkdir()
    shutil.copy(SCANNED, folder / "a-scanned-letter.pdf")  # sorts first: OCR still waits
    shutil.copy(BLANK_SCAN, folder / "b-fax.pdf")
    shutil.copy(SECURITY, folder / "security-policy.pdf")
    shutil.copy(SAMPLE_DOCS / "on-call-handbook.md", folder / "on-call-handbook.md")
    order: list[str] = []

    def progress(p: IndexProgress) -> None:
        if p.current and (not order or order[-1] != p.current):
            order.append(Path(p.current).name)

    with Library(Settings(home=lectern_home), embedder=embedder) as library:  # type: ignore[arg-type]
        report = library.index([folder], progress=progress)
        assert report.added == 3 and report.failed == 1
        by_name = {Path(d.path).name: d for d in library.files.documents()}
        scanned = by_name["a-scanned-letter.pdf"]
        assert scanned.state is DocState.INDEXED and scanned.pages == 1 and scanned.chunks >= 1
        fax = by_name["b-fax.pdf"]
        assert fax.state is DocState.FAILED
        assert fax.reason == "no readable text on the page image"
        # The digital files were written before OCR read either scan.
        assert order.index("security-policy.pdf") < order.index("a-scanned-letter.pdf")
        assert order.index("on-call-handbook.md") < order.index("b-fax.pdf")

        hits = library.search("Why can a non-text-searchable PDF not be rendered as plain text?")
        assert hits and hits[0].path.endswith("a-scanned-letter.pdf") and hits[0].page == 1
        assert library.files.ocr_pages(scanned.id) == [1]
        assert library.files.ocr_pages(by_name["security-policy.pdf"].id) == []
        status = library.folder_status()[0]
        assert status.ocr == 1 and status.indexed == 3 and status.failed == 1
        # The words of the hit, with their boxes, are there for the citation highlight.
        words = library.files.ocr_words(scanned.id, hits[0].start, hits[0].end)
        text = library.files.text(scanned.id)
        assert [text[w.start : w.end] for w in words] == text[hits[0].start : hits[0].end].split()

        # Removing the file removes its words.
        (folder / "a-scanned-letter.pdf").unlink()
        library.index()
        assert library.folder_status()[0].ocr == 0
        assert library.files.ocr_words(scanned.id, 0, 10**9) == []


def test_with_ocr_off_a_scan_waits_until_it_is_turned_on(
    lectern_home: Path, embedder: object, tmp_path: Path
) -> None:
    need_shared()
    from core.library import Library

    folder = tmp_path / "scans"
    folder.mkdir()
    shutil.copy(SCANNED, folder / "scan.pdf")
    mixed_pdf(folder / "policy-with-scan.pdf")
    off = Settings(home=lectern_home, ocr_enabled=False)
    with Library(off, embedder=embedder) as library:  # type: ignore[arg-type]
        library.index([folder])
        by_name = {Path(d.path).name: d for d in library.files.documents()}
        assert by_name["scan.pdf"].state is DocState.FAILED
        assert by_name["scan.pdf"].reason == "no text layer (scanned?)"
        mixed = by_name["policy-with-scan.pdf"]
        assert mixed.state is DocState.INDEXED  # its digital pages
        assert library.files.ocr_pages(mixed.id) == []
        assert not library.parser.ocr_enabled
    with Library(replace(off, ocr_enabled=True), embedder=embedder) as library:  # type: ignore[arg-type]
        report = library.index()
        assert report.updated >= 1
        by_name = {Path(d.path).name: d for d in library.files.documents()}
        assert by_name["scan.pdf"].state is DocState.INDEXED
        assert library.files.ocr_pages(by_name["scan.pdf"].id) == [1]


# --- the desktop: highlight on the page image, "read by OCR" ---------------------------


def test_citation_on_a_scanned_page_lights_the_cited_words_of_the_image(
    qtbot: object, lectern_home: Path, embedder: object, tmp_path: Path
) -> None:
    need_shared()
    pytest.importorskip("pytestqt")
    from core.library import Library
    from desktop.backend import Backend
    from desktop.evidence_panel import EvidencePanel
    from desktop.library_panel import LibraryPanel
    from desktop.theme import Theme
    from desktop.viewmodels import EvidenceRequest, SpanView

    folder = tmp_path / "letters"
    folder.mkdir()
    shutil.copy(SCANNED, folder / "scan.pdf")
    settings = Settings(home=lectern_home)
    with Library(settings, embedder=embedder) as library:  # type: ignore[arg-type]
        library.index([folder])
        doc = library.files.documents()[0]
        text = library.files.text(doc.id)
        # The cited sentence: the second one on the page, which wraps over two lines.
        flat = " ".join(text.split())
        assert "Because it was created from an image" in flat
        start = text.index("Because")
        end = text.index("PDF reader.") + len("PDF reader.")
        cited = library.files.ocr_words(doc.id, start, end)
        everything = library.files.ocr_words(doc.id, 0, len(text))
    assert [text[w.start : w.end] for w in cited][:3] == ["Because", "it", "was"]
    others = [w for w in everything if w not in cited]

    theme = Theme("light")
    theme.apply()
    backend = Backend(settings, embedder=embedder, watch=False)  # type: ignore[arg-type]
    backend.start()
    qtbot.waitUntil(lambda: backend.is_ready, timeout=60_000)  # type: ignore[attr-defined]
    panel = EvidencePanel(backend, theme)
    qtbot.addWidget(panel)  # type: ignore[attr-defined]
    panel.resize(700, 900)
    panel.show()
    request = EvidenceRequest(
        path=str(folder / "scan.pdf"),
        title=doc.title,
        type="pdf",
        document_id=doc.id,
        spans=(SpanView(start, end, 1, text[start:end]),),
        page=1,
        label="[1]",
    )
    panel.show_request(request)
    qtbot.waitUntil(lambda: panel.mode == "pdf", timeout=30_000)  # type: ignore[attr-defined]
    assert panel.located and panel.pdf_page == 1
    assert "read by OCR" in panel.meta.text()
    rects = panel.pdf_view.canvas.rects
    assert 2 <= len(rects) <= 3  # one per line of the sentence

    def inside(word: object, slack: float = 0.5) -> bool:
        return any(
            r.left() - slack <= word.x0  # type: ignore[attr-defined]
            and word.x1 <= r.right() + slack  # type: ignore[attr-defined]
            and r.top() - slack <= word.y0  # type: ignore[attr-defined]
            and word.y1 <= r.bottom() + slack  # type: ignore[attr-defined]
            for r in rects
        )

    def centre_lit(word: object) -> bool:
        x = (word.x0 + word.x1) / 2  # type: ignore[attr-defined]
        y = (word.y0 + word.y1) / 2  # type: ignore[attr-defined]
        return any(r.contains(x, y) for r in rects)

    assert all(inside(w) for w in cited)
    assert not any(centre_lit(w) for w in others)
    # And it is painted on the image: the first cited word's centre is tinted.
    canvas = panel.pdf_view.canvas
    image = canvas.grab().toImage()
    s = canvas.scale()
    first = cited[0]
    pixel = image.pixelColor(int((first.x0 + 1) * s), int((first.y0 + first.y1) / 2 * s))
    assert pixel.blue() < pixel.red() - 20

    # The library marks the folder's scanned file as read by OCR.
    library_panel = LibraryPanel(backend, theme)
    qtbot.addWidget(library_panel)  # type: ignore[attr-defined]
    backend.view.snapshot = None
    backend.view.refresh()
    qtbot.waitUntil(lambda: backend.view.snapshot is not None, timeout=20_000)  # type: ignore[attr-defined]
    library_panel.set_snapshot(backend.view.snapshot)
    assert "1 read by OCR" in library_panel._rows[str(folder)].counts.text()
    backend.shutdown()
