"""Running heads and feet (a report's name atop every page, "Page 2 of 4" at its foot) stay
out of passages, headings and quotes past the first page they appear on, while the page's
text keeps its offsets; a table
header repeated above its rows, an amount at a page's foot and a short PDF keep theirs
(PDFs written here with plain PDF syntax)."""

from __future__ import annotations

import re
from pathlib import Path

from core.chunking import PassageChunker
from core.embedding.models import MAX_SEQ_TOKENS, WordPieceCounter
from core.ingest import pdf
from tests.pdf_bytes import pdf_bytes

HEAD = "Northwind Aviation Safety Review"


def write_pages(path: Path, pages: list[list[tuple[float, str]]]) -> Path:
    """A PDF of ``pages``, each line drawn at its type size, top to bottom."""
    streams = []
    for lines in pages:
        y, ops = 760.0, []
        for size, text in lines:
            y -= size * 1.6
            escaped = text.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)")
            ops.append(f"BT /F1 {size:g} Tf 72 {y:.1f} Td ({escaped}) Tj ET")
        streams.append("\n".join(ops).encode("latin-1"))
    n = len(pages)
    # 1 catalog, 2 pages, 3 font, then a page and its content per page.
    kids = " ".join(f"{4 + 2 * i} 0 R" for i in range(n))
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        f"<< /Type /Pages /Kids [{kids}] /Count {n} >>".encode(),
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica /Encoding /WinAnsiEncoding >>",
    ]
    for i, content in enumerate(streams):
        objects.append(
            f"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Resources << /Font "
            f"<< /F1 3 0 R >> >> /Contents {5 + 2 * i} 0 R >>".encode()
        )
        objects.append(b"<< /Length %d >>\nstream\n" % len(content) + content + b"\nendstream")
    path.write_bytes(pdf_bytes(objects))
    return path


BODY = [
    [
        "Inspectors visited every hangar on the northern field during the spring round.",
        "They found the de-icing fluid stored where the manual says it must be kept.",
    ],
    [
        "Two incidents on the runway were traced to worn markings near the threshold.",
        "Across the decade the review lists 189",
    ],
    [
        "fatalities among passengers and crew, most of them in the first three years.",
        "Training hours for ground staff rose by a third after the second incident.",
    ],
    [
        "The board recommends repainting the markings before the winter season begins.",
        "A follow-up visit is planned for the autumn to check the stored fluid again.",
    ],
]


def report(tmp_path: Path, pages: list[list[str]], head: str | None = HEAD) -> Path:
    drawn = []
    for number, lines in enumerate(pages, start=1):
        page = [(9.0, head)] if head else []
        page += [(10.0, line) for line in lines]
        page.append((9.0, f"Page {number} of {len(pages)}"))
        drawn.append(page)
    return write_pages(tmp_path / "review.pdf", drawn)


def chunk_texts(path: Path) -> list[str]:
    doc = pdf.parse(path)
    chunker = PassageChunker(WordPieceCounter().count, max_tokens=MAX_SEQ_TOKENS)
    return [c.text for c in chunker.chunk(doc, file_stem="review")]


def test_running_heads_and_feet_stay_out_of_passages_and_headings(tmp_path: Path) -> None:
    path = report(tmp_path, BODY)
    doc = pdf.parse(path)
    # Kept where it first appears (a repeated line may be the only place something is
    # said), left out of every later page.
    assert doc.text.count(HEAD) == 1 and doc.text.index(HEAD) < doc.pages[0].end
    assert re.findall(r"Page \d of 4", doc.text) == ["Page 1 of 4"]
    assert doc.text == doc.text.strip()  # the last page's foot leaves no trailing blank
    for lines in BODY:
        for line in lines:
            assert line in doc.text  # the body is whole
    assert not any(HEAD in " ".join(b.heading_path) for b in doc.blocks)
    texts = chunk_texts(path)
    joined = " ".join(texts)
    assert joined.count(HEAD) <= 1 and "Page 2 of 4" not in joined
    # The sentence cut by the page break reads on without the foot and the head between.
    assert re.search(r"lists 189\s+fatalities among", joined)
    # Offsets still point into the page: each page's span holds its own body lines.
    for span, lines in zip(doc.pages, BODY, strict=True):
        assert lines[0] in doc.text[span.start : span.end]


def test_a_short_pdf_a_repeated_table_header_and_a_page_total_keep_their_lines(
    tmp_path: Path,
) -> None:
    two = report(tmp_path, BODY[:2])
    assert HEAD in pdf.parse(two).text  # two pages cannot tell a running head
    # Pages that are nothing but the same line keep it: they would be left empty.
    same = write_pages(tmp_path / "same.pdf", [[(10.0, "Habibi")]] * 4)
    assert pdf.parse(same).text.count("Habibi") == 4
    rows = [
        ["Cable gland  Thread  Clamping range", "M20  1.5  6.0 - 12.0", "M25  1.5  9.0 - 16.0"],
        ["Cable gland  Thread  Clamping range", "M32  1.5  13.0 - 21.0", "M40  1.5  19.0 - 28.0"],
        ["Cable gland  Thread  Clamping range", "M50  1.5  25.0 - 35.0", "M63  1.5  32.0 - 44.0"],
    ]
    tables = write_pages(
        tmp_path / "glands.pdf",
        [[(10.0, line) for line in page] + [(9.0, "Page total 1,240.50")] for page in rows],
    )
    text = pdf.parse(tables).text
    assert text.count("Cable gland") == 3
    assert text.count("Page total 1,240.50") == 3
