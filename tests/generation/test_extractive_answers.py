"""The answer without a language model, through the calls the app makes: real files (a CSV
of books, a Federal-Register-like PDF, a scanned page, a mail, a PDF set in a symbol font,
slides, a note with its own bracketed references) indexed into a real Library with the
real model, then ``core.generation.qa.ask(..., use_llm=False)``.

Each test is a finding of issue 28 (item 3) or 29 that failed before the fix: a row of a
sheet is the answer, with its column names; the sentence with the date, not the header
block; never a heading; the next sentence when it names who; the refusal, never a block
of glyphs; no [n] copied from a document's own text.
"""

from __future__ import annotations

import csv
import io
import re
import shutil
import textwrap
from collections.abc import Iterator
from email.message import EmailMessage
from pathlib import Path

import pytest

from core.citation_marks import parse_citations
from core.config import Settings
from core.generation.citations import REFUSAL
from core.generation.qa import DoneEvent, ask
from core.ingest import ocr
from core.library import Library
from tests.conftest import SAMPLE_DOCS, SHARED_DATA
from tests.pdf_bytes import pdf_bytes

SCANNED = SHARED_DATA / "pdfs" / "scanned-non-text-searchable.pdf"
PUA = "\ue000"  # a private-use character: a bullet of a symbol font read without its font


def write_pdf(path: Path, lines: list[str], size: float = 9) -> Path:
    """A one-page PDF, each line at one type size. Byte 0x80 is mapped to the private-use
    character U+E000 by the font's ToUnicode table, as a symbol font's bullets are."""
    cmap = (
        b"/CIDInit /ProcSet findresource begin 12 dict begin begincmap /CIDSystemInfo "
        b"<< /Registry (Adobe) /Ordering (UCS) /Supplement 0 >> def /CMapName /Adobe-Identity-UCS "
        b"def /CMapType 2 def 1 begincodespacerange <00> <FF> endcodespacerange 1 beginbfrange "
        b"<20> <7E> <0020> endbfrange 1 beginbfchar <80> <E000> endbfchar endcmap CMapName "
        b"currentdict /CMap defineresource pop end end"
    )
    ops = []
    y = 760.0
    for line in lines:
        y -= size * 1.6
        raw = line.replace(PUA, "\x80").encode("latin-1")
        raw = raw.replace(b"\\", b"\\\\").replace(b"(", b"\\(").replace(b")", b"\\)")
        ops.append(b"BT /F1 %g Tf 72 %.1f Td (" % (size, y) + raw + b") Tj ET")
    content = b"\n".join(ops)
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] "
        b"/Resources << /Font << /F1 4 0 R >> >> /Contents 5 0 R >>",
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica /ToUnicode 6 0 R >>",
        b"<< /Length %d >>\nstream\n" % len(content) + content + b"\nendstream",
        b"<< /Length %d >>\nstream\n" % len(cmap) + cmap + b"\nendstream",
    ]
    path.write_bytes(pdf_bytes(objects))
    return path


BOOKS = [
    ("Title", "Author", "Year read", "Rating", "Notes"),
    ("Never Let Me Go", "Kazuo Ishiguro", "2020", "4", "sad boarding school"),
    ("Middlemarch", "George Eliot", "2018", "5", "long but worth it"),
    ("The Road", "Cormac McCarthy", "2021", "3", "bleak"),
    ("Atonement", "Ian McEwan", "2017", "4", "the twist"),
    ("The Remains of the Day", "Kazuo Ishiguro", "2019", "2", "a butler looks back"),
    ("Wolf Hall", "Hilary Mantel", "2022", "5", "Cromwell"),
    ("Gone Girl", "Gillian Flynn", "2016", "2", "not for me"),
    ("The Hobbit", "J. R. R. Tolkien", "2015", "4", "reread"),
    ("Beloved", "Toni Morrison", "2023", "5", "haunting"),
]

# The first page of a notice as the Federal Register sets it: a running head, the agency,
# the docket numbers, then the body with the comment date.
FEDERAL_REGISTER_HEAD = [
    "Federal Register / Vol. 89, No. 22 / Thursday, February 1, 2024 / Proposed Rules / 6712",
    "DEPARTMENT OF TRANSPORTATION",
    "Federal Aviation Administration",
    "14 CFR Part 39",
    "[Docket No. FAA-2024-0211; Project Identifier AD-2023-01020-T]",
    "RIN 2120-AA64",
    "Airworthiness Directives; The Boeing Company Airplanes",
    "AGENCY: Federal Aviation Administration (FAA), Department of Transportation (DOT).",
    "ACTION: Notice of proposed rulemaking (NPRM).",
]
FEDERAL_REGISTER_BODY = (
    "SUMMARY: The FAA proposes to adopt a new airworthiness directive (AD) for certain The "
    "Boeing Company Model 787 airplanes. This proposed AD was prompted by reports of cracking "
    "in the aft pressure bulkhead. This proposed AD would require repetitive inspections for "
    "cracking and repair if necessary. The FAA is proposing this AD to address the unsafe "
    "condition on these products. DATES: Comments must be received on or before March 4, "
    "2024. You may send comments, using the procedures found in 14 CFR 11.43 and 11.45, "
    "through the Federal eRulemaking Portal at regulations.gov."
)
DATE_SENTENCE = "Comments must be received on or before March 4, 2024."

# Set as the scanned page reads after OCR: a code, a title, then the text.
ARCHIVE_NOTE = (
    "KX-7\nRead-only archive\n\nThis folder is an example of a read-only archive. Because it "
    "was copied from a backup rather than the live drive, it cannot be changed by the team.\n"
)

OFFICES = [
    "Where our offices are",
    f"{PUA} Germany {PUA} Austria {PUA} France {PUA} New Zealand {PUA} Canada "
    f"{PUA} the capital region",
    "Each office has its own manager.",
]

SCOOTERS = (
    "Scooter rules\n\nElectric scooters are reimbursed at EUR 9.99 per kilometre [1][2][3]. "
    "Scooter hire needs a receipt from the hire company [4].\n"
)


def make_mail(path: Path) -> Path:
    message = EmailMessage()
    message["Subject"] = "Storage outage on Tuesday"
    message["From"] = "Ops Team <ops@example.org>"
    message["To"] = "all@example.org"
    message["Date"] = "Wed, 06 Mar 2024 09:00:00 +0000"
    message.set_content(
        "Hello everyone,\n\nYesterday the file server was unavailable for two hours. The outage "
        "was caused by a failed disk. Priya Raman, the on-call engineer, replaced it. The "
        "backups were not affected.\n\nRegards,\nOps"
    )
    path.write_bytes(bytes(message))
    return path


def make_deck(path: Path) -> bool:
    try:
        from pptx import Presentation
    except ImportError:
        return False
    deck = Presentation()
    slides = [
        (
            "Survey day 1",
            ["Weather was calm with light fog.", "The team walked the southern dunes."],
        ),
        ("Survey day 2", ["Rain all morning.", "The boat stayed in the harbour."]),
        (
            "Survey day 3",
            ["The lighthouse keeper counted 417 gulls", "Most nested on the northern pier"],
        ),
    ]
    for title, bullets in slides:
        slide = deck.slides.add_slide(deck.slide_layouts[1])
        slide.shapes.title.text = title
        frame = slide.placeholders[1].text_frame
        frame.text = bullets[0]
        for bullet in bullets[1:]:
            frame.add_paragraph().text = bullet
    buffer = io.BytesIO()
    deck.save(buffer)
    path.write_bytes(buffer.getvalue())
    return True


@pytest.fixture(scope="module")
def answers(tmp_path_factory: pytest.TempPathFactory, embedder: object) -> Iterator[Library]:
    """One library of the sample documents and every file the findings were made on."""
    base = tmp_path_factory.mktemp("answers")
    folder = base / "docs"
    shutil.copytree(SAMPLE_DOCS, folder)
    with (folder / "books.csv").open("w", newline="", encoding="utf-8") as handle:
        csv.writer(handle).writerows(BOOKS)
    body = textwrap.wrap(FEDERAL_REGISTER_BODY, 60)
    write_pdf(folder / "2024-01987.pdf", FEDERAL_REGISTER_HEAD + body)
    (folder / "archive-note.txt").write_text(ARCHIVE_NOTE, encoding="utf-8")
    write_pdf(folder / "offices.pdf", OFFICES, size=11)
    (folder / "scooters.txt").write_text(SCOOTERS, encoding="utf-8")
    make_mail(folder / "outage.eml")
    make_deck(folder / "survey.pptx")
    if SCANNED.exists() and ocr.engine_installed():
        shutil.copy(SCANNED, folder / "scanned-letter.pdf")
    home = base / "home"
    home.mkdir()
    library = Library(Settings(home=home), embedder=embedder)  # type: ignore[arg-type]
    report = library.index([folder])
    assert report.failed == 0, report.failures
    yield library
    library.close()


def answer(library: Library, question: str) -> DoneEvent:
    done = list(ask(library, question, use_llm=False, store=False))[-1]
    assert isinstance(done, DoneEvent), done
    check_citations(library, done)
    return done


def check_citations(library: Library, done: DoneEvent) -> None:
    """Every citation is a span of its source's stored text, every [n] of the answer is one
    of its citations, and nothing but the refusal is said without one."""
    if done.mode == "declined":
        assert done.answer == REFUSAL and not done.citations
        return
    assert done.mode == "extractive" and done.citations
    for citation in done.citations:
        assert citation.hit == done.sources[citation.n - 1]
        text = library.files.text(citation.hit.document_id)
        for span in citation.spans:
            assert text[span.start : span.end] == span.text
    cited = {n for ref in parse_citations(done.answer) for n in ref.numbers}
    assert cited == {c.n for c in done.citations}, done.answer
    assert PUA not in done.answer and "\ufffd" not in done.answer


def quotes(done: DoneEvent) -> list[str]:
    return [" ".join(c.quote.split()) for c in done.citations]


def test_a_csv_row_is_the_answer_with_its_column_names(answers: Library) -> None:
    done = answer(answers, "What rating did I give The Remains of the Day?")
    assert done.mode == "extractive", done.answer
    row = "The Remains of the Day | Kazuo Ishiguro | 2019 | 2 | a butler looks back"
    citation = next(c for c in done.citations if Path(c.hit.path).name == "books.csv")
    assert citation.quote == row and citation.location == "row 6"
    # Shown with the header's names, so "2" reads as the rating and not the year.
    assert "Title: The Remains of the Day" in done.answer and "Rating: 2" in done.answer


def test_the_sentence_with_the_date_is_quoted_not_the_header_block(answers: Library) -> None:
    for question in (
        "By what date must the FAA receive comments?",
        "By what date must the Federal Aviation Administration receive comments?",
    ):
        done = answer(answers, question)
        assert DATE_SENTENCE in done.answer, (question, done.answer)
        for header in ("Federal Register / Vol.", "DEPARTMENT OF TRANSPORTATION", "Docket No."):
            assert header not in done.answer, (question, done.answer)


def test_a_title_is_never_the_answer(answers: Library) -> None:
    done = answer(answers, "Why can the read-only archive not be changed?")
    assert "it cannot be changed by the team" in done.answer, done.answer
    assert "KX-7" not in done.answer and "Read-only archive [" not in done.answer
    assert all(q.endswith((".", "?", "!")) for q in quotes(done)), quotes(done)


def test_a_title_on_a_scanned_page_is_never_the_answer(answers: Library) -> None:
    if not SCANNED.exists() or not ocr.engine_installed():
        pytest.skip("the scanned PDF or the OCR engine is not available")
    done = answer(answers, "Why can a non-text-searchable PDF not be rendered as plain text?")
    scanned = [c for c in done.citations if Path(c.hit.path).name == "scanned-letter.pdf"]
    assert scanned, done.answer
    assert "cannot be rendered as plain text" in done.answer
    for quote in (" ".join(c.quote.split()) for c in scanned):
        assert "Non-text-searchable PDF" not in quote and "IDRH" not in quote, quote


def test_the_next_sentence_that_names_who_is_quoted(answers: Library) -> None:
    done = answer(answers, "Who fixed the outage?")
    assert "Priya Raman" in done.answer, done.answer
    assert "failed disk" in done.answer  # and what "it" is
    assert {Path(c.hit.path).name for c in done.citations} == {"outage.eml"}


def test_a_mail_header_field_is_an_answer(answers: Library) -> None:
    done = answer(answers, "When was the mail about the storage outage sent?")
    assert "Date: 2024-03-06 09:00" in done.answer, done.answer


def test_a_slide_is_answered_whole(answers: Library) -> None:
    if not any(Path(d.path).name == "survey.pptx" for d in answers.files.documents()):
        pytest.skip("python-pptx is not installed")
    done = answer(answers, "Where did the gulls nest?")
    assert "417 gulls" in done.answer and "northern pier" in done.answer, done.answer
    citation = next(c for c in done.citations if Path(c.hit.path).name == "survey.pptx")
    assert citation.location == "slide 3"
    # A slide's lines are read with its title: "survey day 2" is the second slide's.
    done = answer(answers, "What happened on survey day 2?")
    assert "The boat stayed in the harbour." in done.answer, done.answer


def test_an_unknown_question_is_declined_and_glyphs_are_never_quoted(answers: Library) -> None:
    done = answer(answers, "What is the capital of Australia?")
    assert done.mode == "declined" and done.answer == REFUSAL and not done.citations
    assert done.sources  # something was found; none of it answers
    done = answer(answers, "Which countries are our offices in?")
    assert all(PUA not in c.quote for c in done.citations), quotes(done)


def test_a_documents_own_bracketed_numbers_never_look_like_citations(answers: Library) -> None:
    done = answer(answers, "How much are electric scooters reimbursed per kilometre?")
    assert "EUR 9.99 per kilometre" in done.answer, done.answer
    assert "[1][2][3]" not in done.answer
    # Each [n] follows words that source n holds: the markers are the answer's, not the note's.
    for part, number in re.findall(r"(.+?) \[(\d+)\]", done.answer):
        source = " ".join(done.sources[int(number) - 1].text.split())
        words = re.sub(r"\s*\[\d+\]", "", source)
        assert " ".join(part.split()).strip() in " ".join(words.split()), (part, number)
