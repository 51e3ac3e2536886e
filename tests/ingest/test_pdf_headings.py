"""PDF words as the page shows them (issue 46): a heading in letter-spaced small capitals
reads as its words ("2 REACT: SYNERGIZING REASONING + ACTING", not "RE ASONING + ACT
ING"), and a footnote mark set as a superscript is not read into the sentence ("control
laws associated", not "control laws 10 associated") while numbers of the sentence,
fractions and powers stay. PDFs written here with known positions and sizes, and the
real ones from the shared set."""

from __future__ import annotations

from pathlib import Path

from core.ingest import pdf
from core.records import BlockKind, ParsedDocument
from desktop.locate import locate
from tests.conftest import SHARED_DATA
from tests.ingest.test_pdf_titles import write_content

PDFS = SHARED_DATA / "pdfs"


def line(y: float, text: str, size: float = 10) -> str:
    return f"BT /F1 {size:g} Tf 72 {y} Td ({text}) Tj ET"


def small_caps_heading(y: float) -> str:
    """The heading "2 REACT: SYNERGIZING REASONING + ACTING" as TeX sets faux small caps:
    capitals at 12 pt, the rest at 9.6 pt, each piece placed on its own, with the
    letter-spacing that pypdf reads as word gaps ("REAC T :", "RE ASONING", "AC T ING")."""
    pieces = [
        (12, 72.0, "2"),
        (12, 90.0, "R"),
        (9.6, 98.7, "E"),
        (12, 105.1, "A"),
        (9.6, 113.1, "C"),
        (9.6, 121.4, "T"),
        (12, 131.5, ":"),
        (12, 139.5, "S"),
        (9.6, 147.5, "YNERGIZING"),
        (12, 210.0, "R"),
        (9.6, 218.7, "E"),
        (9.6, 228.0, "ASONING"),
        (12, 275.0, "+"),
        (12, 286.0, "A"),
        (9.6, 294.0, "C"),
        (9.6, 302.3, "T"),
        (9.6, 311.5, "ING"),
    ]
    shown = " ".join(f"/F1 {s:g} Tf 1 0 0 1 {x} {y} Tm ({t}) Tj" for s, x, t in pieces)
    return f"BT {shown} ET"


def headings(doc: ParsedDocument) -> list[str]:
    return [doc.text[b.start : b.end] for b in doc.blocks if b.kind == BlockKind.HEADING]


def test_a_letter_spaced_small_caps_heading_reads_as_its_words(tmp_path: Path) -> None:
    path = write_content(
        tmp_path / "agents.pdf",
        "\n".join(
            [
                line(760, "Agents That Think", 18),
                line(740, "Reasoning and acting are studied together in this short report."),
                line(726, "The agent interleaves reasoning traces with acting steps."),
                small_caps_heading(690),
                line(660, "Each step of acting is followed by an observation, then reasoning."),
            ]
        ),
    )
    doc = pdf.parse(path)
    assert headings(doc) == ["2 REACT: SYNERGIZING REASONING + ACTING"]
    # The section label every passage under it carries.
    under = [b for b in doc.blocks if "observation" in doc.text[b.start : b.end]]
    assert under and under[0].heading_path == ("2 REACT: SYNERGIZING REASONING + ACTING",)


def test_the_react_paper_s_section_label(shared_data: Path) -> None:
    shown = headings(pdf.parse(PDFS / "arxiv-react-paper.pdf"))
    assert "2 REACT: SYNERGIZING REASONING + ACTING" in shown
    # Words in capitals that are apart stay apart.
    assert "3 KNOWLEDGE-INTENSIVE REASONING TASKS" in shown
    assert "D HOTPOTQA FINETUNING DETAILS" in shown


def test_a_footnote_mark_set_as_a_superscript_is_left_out(tmp_path: Path) -> None:
    path = write_content(
        tmp_path / "rules.pdf",
        "\n".join(
            [
                # "laws" then "10" at 6.4 pt raised 2.3 pt, as the Federal Register sets
                # it: one font throughout, so pypdf reads it into the line.
                "BT /F1 1 Tf 9 0 0 9 72 700 Tm (revised flight control laws)Tj "
                "7 0 0 5.85 176.5 702.3 Tm (10)Tj 9 0 0 9 186 700 Tm (associated with MCAS.)Tj ET",
                line(680, "As section 10 describes, the limit of 10 applies to every run."),
                # A fraction after a word: its numerator is raised and smaller too.
                "BT /F1 10 Tf 1 0 0 1 72 650 Tm (the share falls)Tj "
                "/F1 7 Tf 1 0 0 1 150 654 Tm (1)Tj 1 0 0 1 150 646 Tm (2)Tj ET",
                # A power of ten and a unit's square.
                "BT /F1 10 Tf 1 0 0 1 72 620 Tm (about 10)Tj /F1 7 Tf 1 0 0 1 117 624 Tm (6)Tj "
                "/F1 10 Tf 1 0 0 1 125 620 Tm (cells in 3 km)Tj /F1 7 Tf 1 0 0 1 190 624 Tm (2)Tj "
                "ET",
            ]
        ),
    )
    text = " ".join(pdf.parse(path).text.split())
    assert "control laws associated with MCAS." in text
    assert "section 10 describes, the limit of 10 applies" in text
    assert "falls 1 2" in text
    assert "about 10 6 cells in 3 km 2" in text


def test_the_federal_register_s_footnote_marks(shared_data: Path) -> None:
    text = " ".join(pdf.parse(PDFS / "three-column-federal-register.pdf").text.split())
    assert "revised flight control laws associated with MCAS" in text
    assert "laws 10 associated" not in text
    # The footnotes themselves keep their numbers.
    assert "10 A flight control law generates commands" in text


def test_the_page_still_shows_where_a_sentence_without_its_mark_is(tmp_path: Path) -> None:
    """The evidence panel finds a quoted sentence on the page as the renderer reads it,
    footnote mark and all; a sentence whose numbers differ is not taken for it."""
    import pypdfium2 as pdfium

    path = write_content(
        tmp_path / "rules.pdf",
        "BT /F1 1 Tf 9 0 0 9 72 700 Tm (revised flight control laws)Tj "
        "7 0 0 5.85 176.5 702.3 Tm (10)Tj 9 0 0 9 186 700 Tm (associated with MCAS.)Tj ET\n"
        + line(680, "The total of 12 flights was approved."),
    )
    sentence = pdf.parse(path).text.split("\n")[0]
    assert sentence == "revised flight control laws associated with MCAS."
    document = pdfium.PdfDocument(str(path))
    try:
        page_text = document[0].get_textpage().get_text_range()
    finally:
        document.close()
    found = locate(sentence, page_text)
    assert found is not None
    assert " ".join(page_text[found[0] : found[1]].split()).startswith("revised flight")
    assert " ".join(page_text[found[0] : found[1]].split()).endswith("with MCAS")
    assert locate("The total of 10 flights was approved.", page_text) != locate(
        "The total of 12 flights was approved.", page_text
    )
