"""PDF titles and headings from type size: real PDFs from the shared set, plus PDFs
written here with known sizes (plain PDF syntax with the standard Helvetica font)."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.chunking import PassageChunker
from core.embedding.models import MAX_SEQ_TOKENS, WordPieceCounter
from core.ingest import pdf
from core.records import BlockKind, ParsedDocument
from tests.conftest import SAMPLE_DOCS, SHARED_DATA
from tests.pdf_bytes import pdf_bytes

PDFS = SHARED_DATA / "pdfs"


def write_pdf(path: Path, lines: list[tuple[float, str]], title: str | None = None) -> Path:
    """A one-page PDF: each line drawn at its type size, top to bottom."""
    y = 760.0
    ops = []
    for size, text in lines:
        y -= size * 1.6
        escaped = text.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)")
        ops.append(f"BT /F1 {size:g} Tf 72 {y:.1f} Td ({escaped}) Tj ET")
    return write_content(path, "\n".join(ops), title)


def write_content(path: Path, stream: str, title: str | None = None) -> Path:
    """A one-page PDF drawing ``stream`` (content-stream operators) in Helvetica as /F1."""
    content = stream.encode("latin-1")
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] "
        b"/Resources << /Font << /F1 4 0 R >> >> /Contents 5 0 R >>",
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica /Encoding /WinAnsiEncoding >>",
        b"<< /Length %d >>\nstream\n" % len(content) + content + b"\nendstream",
    ]
    if title is not None:
        objects.append(b"<< /Title (" + title.encode("latin-1") + b") >>")
    path.write_bytes(pdf_bytes(objects, len(objects) if title is not None else None))
    return path


BODY = [
    (10, "Every laptop is encrypted and locked after five minutes of inactivity."),
    (10, "Lost devices are reported to the service desk on the same day, always."),
]
REPORT = [
    (22, "Annual Field Report"),
    (10, "Prepared by the survey team for the regional office, spring edition."),
    (16, "1 Survey sites"),
    *BODY,
    (13, "1.1 Northern ridge"),
    (10, "The ridge was walked twice and every marker was found where it was left."),
    (13, "1.2 Southern marsh"),
    (10, "The marsh flooded in April, so its markers were read from the boardwalk."),
    (16, "2 Equipment"),
    (10, "Each team carried two receivers and a spare battery for every receiver."),
]


def heading_paths(doc: ParsedDocument, needle: str) -> tuple[str, ...]:
    block = next(b for b in doc.blocks if needle in doc.text[b.start : b.end])
    return block.heading_path


def test_headings_from_type_size_give_nested_heading_paths(tmp_path: Path) -> None:
    doc = pdf.parse(write_pdf(tmp_path / "report.pdf", REPORT))
    headings = [doc.text[b.start : b.end] for b in doc.blocks if b.kind is BlockKind.HEADING]
    assert headings == ["1 Survey sites", "1.1 Northern ridge", "1.2 Southern marsh", "2 Equipment"]
    assert heading_paths(doc, "walked twice") == ("1 Survey sites", "1.1 Northern ridge")
    assert heading_paths(doc, "boardwalk") == ("1 Survey sites", "1.2 Southern marsh")
    assert heading_paths(doc, "spare battery") == ("2 Equipment",)
    assert heading_paths(doc, "spring edition") == ()  # before the first heading
    # The title (the largest type on page 1) is the title, not a heading.
    assert doc.title == "Annual Field Report"
    # Chunks carry the path in their context, as Markdown sections do.
    chunks = PassageChunker(WordPieceCounter().count, max_tokens=MAX_SEQ_TOKENS).chunk(
        doc, file_stem="report"
    )
    marsh = next(c for c in chunks if "boardwalk" in c.text)
    assert marsh.heading_path == ("1 Survey sites", "1.2 Southern marsh")
    assert marsh.context.startswith("Annual Field Report")
    assert "1.2 Southern marsh" in marsh.context


def test_a_pdf_set_in_one_size_has_no_headings_and_keeps_its_first_line_title(
    tmp_path: Path,
) -> None:
    lines = [(10, "Minutes of the board meeting"), *BODY]
    doc = pdf.parse(write_pdf(tmp_path / "minutes.pdf", lines))
    assert not [b for b in doc.blocks if b.kind is BlockKind.HEADING]
    assert doc.title == "Minutes of the board meeting"


def test_the_metadata_title_wins_and_is_not_repeated_as_a_heading(tmp_path: Path) -> None:
    doc = pdf.parse(write_pdf(tmp_path / "r.pdf", REPORT, title="Field Report 2024"))
    assert doc.title == "Field Report 2024"
    # Without a title from the page, the big first line is a heading like the others.
    assert heading_paths(doc, "walked twice")[-1] == "1.1 Northern ridge"
    policy = pdf.parse(SAMPLE_DOCS / "security-policy.pdf")
    assert policy.title == "Information Security Policy"
    assert heading_paths(policy, "within 1 hour") == ("3 Reporting incidents",)


def test_a_poor_first_line_gives_way_to_the_largest_text_on_page_one() -> None:
    if not PDFS.is_dir():
        pytest.skip(f"shared PDF set not found at {PDFS}")
    react = pdf.parse(PDFS / "arxiv-react-paper.pdf")
    # The first line alone is "REACT: SYNERGIZING REASONING AND ACTING IN": the title
    # runs over two lines of the largest type, without the arXiv stamp in the margin.
    assert react.title == "REACT: SYNERGIZING REASONING AND ACTING IN LANGUAGE MODELS"
    assert heading_paths(react, "chain-of-thought")[:1] in (("ABSTRACT",), ("1 INTRODUCTION",))
    headings = [react.text[b.start : b.end] for b in react.blocks if b.kind is BlockKind.HEADING]
    assert "1 INTRODUCTION" in headings and "ABSTRACT" in headings
    assert not any(h[:1].isdigit() and not h[1:2].isspace() and "." not in h[:4] for h in headings)
    thesis = pdf.parse(PDFS / "geotopo-german-thesis.pdf")
    assert thesis.title == "Geometrie und Topologie"  # metadata
    assert any(b.heading_path[:1] == ("Vorwort",) for b in thesis.blocks)


# Faux small capitals: capitals at 20 pt, the lowercase letters as capitals at 16 pt, with
# letter-spacing kerns; the kern between "C" and "T" passes pypdf's word-gap threshold
# as in the ReAct paper ("[(C)-150(T)]TJ" there gave "REAC T").
SMALL_CAPS = (
    "BT /F1 20 Tf 72 700 Td [(R)]TJ /F1 16 Tf [(E)]TJ /F1 20 Tf [(A)]TJ "
    "/F1 16 Tf [(C)-400(T)]TJ /F1 20 Tf [(:)-600(S)]TJ /F1 16 Tf [(YNERGY)-600(AND)]TJ "
    "/F1 16 Tf [( A)]TJ /F1 20 Tf [( P)]TJ /F1 16 Tf [(LAN)]TJ ET"
)
# A title beside a table's column heads on the same baseline, in much smaller type.
BESIDE_A_TABLE = (
    "BT /F1 20 Tf 72 640 Td (Background Checks November - 2015) Tj "
    "/F1 7 Tf 330 0 Td (Pre-Pawn Redemption Returned) Tj ET"
)
BODY_STREAM = "\n".join(
    f"BT /F1 10 Tf 72 {560 - 16 * n} Td ({text}) Tj ET" for n, (_, text) in enumerate(BODY)
)


def test_small_capitals_keep_their_words_whole_in_the_title(tmp_path: Path) -> None:
    doc = pdf.parse(write_content(tmp_path / "paper.pdf", SMALL_CAPS + "\n" + BODY_STREAM))
    # Not "REAC T: SYNERGY AND A PLAN": the lone small "T" ends "REAC"; "A" is a word.
    assert doc.title == "REACT: SYNERGY AND A PLAN"
    assert "REACT" in doc.text


def test_smaller_text_on_the_title_line_is_not_part_of_the_title(tmp_path: Path) -> None:
    doc = pdf.parse(write_content(tmp_path / "checks.pdf", BESIDE_A_TABLE + "\n" + BODY_STREAM))
    # Not "Background Checks November - 2015Pre-Pawn Redemption Returned".
    assert doc.title == "Background Checks November - 2015"
    assert "Pre-Pawn Redemption" in doc.text  # still read, as text of the page


def test_the_shared_set_gives_no_run_together_or_gapped_titles() -> None:
    if not PDFS.is_dir():
        pytest.skip(f"shared PDF set not found at {PDFS}")
    nics = pdf.parse(PDFS / "table-nics-background-checks.pdf")
    assert nics.title == "NICS Firearm Background Checks November - 2015"
    register = pdf.parse(PDFS / "three-column-federal-register.pdf")
    assert register.title == "Proposed Rules"  # not with the 8 pt masthead beside it
