"""Tables in real PDFs read row by row with their column names (pdfplumber), in place
of pypdf's run-together reading, and kept with their header through chunking and the
extractive answer."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.chunking import PassageChunker
from core.embedding.models import MAX_SEQ_TOKENS, WordPieceCounter
from core.generation.extractive import NEVER, extract_answer
from core.ingest import pdf
from core.records import BlockKind, Chunk, Hit, ParsedDocument

pytestmark = pytest.mark.usefixtures("shared_data")


def _parse(shared_data: Path, name: str) -> ParsedDocument:
    return pdf.parse(shared_data / "realdocs" / name)


def _page_text(doc: ParsedDocument, page: int) -> str:
    span = next(s for s in doc.pages if s.page == page)
    return doc.text[span.start : span.end]


def _tables(doc: ParsedDocument) -> list[str]:
    return [doc.text[b.start : b.end] for b in doc.blocks if b.kind is BlockKind.TABLE]


def test_a_ruled_table_reads_as_rows_of_cells_under_its_header(shared_data: Path) -> None:
    doc = _parse(shared_data, "eu-004.pdf")
    page = _page_text(doc, 4)
    lines = page.split("\n")
    assert "Finland | n.a. | 95.2" in lines
    assert "Belgium/Luxembourg | 6.9 | 130.7" in lines
    # The table's text is there once: not also as pypdf read it.
    assert page.count("Belgium/Luxembourg") == 1
    table = next(t for t in _tables(doc) if "Finland | n.a. | 95.2" in t)
    header = table.split("\n")[0]
    assert "% growth in total retail sales volume, 1990-94" in header
    assert "value of food sales 1996 (1990=100)" in header
    # The prose around the table is kept, on its own page.
    assert "Table 6.4: Growth in demand by member state" in page
    finland = doc.text.index("Finland | n.a. | 95.2")
    assert doc.page_at(finland) == 4


def test_a_header_on_two_lines_reads_as_one_row_of_names(shared_data: Path) -> None:
    doc = _parse(shared_data, "twotables.pdf")
    lines = doc.text.split("\n")
    assert "当期首残高 | 5,664 | 749 | 12,017 | △747 | 17,683" in lines
    tables = _tables(doc)
    assert len(tables) == 2
    assert (
        tables[0].split("\n")[0]
        == "— | 株主資本 資本金 | 資本剰余金 | 利益剰余金 | 自己株式 | 株主資本合計"
    )
    # pypdf's reading of the same row is gone.
    assert "当期首残高 5,664 749 12,017 △747 17,683" not in doc.text


def test_an_unruled_table_of_figures_keeps_its_columns(shared_data: Path) -> None:
    doc = _parse(shared_data, "us-017.pdf")
    lines = doc.text.split("\n")
    assert "Year | Total | PK | K | 1 | 2 | 3 | 4 | 5 | 6" in lines
    assert "1996 | 45,611 | 670 | 3,532 | 3,770 | 3,600 | 3,524 | 3,454 | 3,453 | 3,494" in lines
    assert not any(line.startswith("1996 45,611 670") for line in lines)
    at = doc.text.index("1996 | 45,611")
    assert doc.page_at(at) == 3


def test_no_row_runs_its_label_into_its_figures(shared_data: Path) -> None:
    doc = _parse(shared_data, "rainfall_distribution.pdf")
    rows = [line for table in _tables(doc) for line in table.split("\n")[1:]]
    assert "2 | ASSAM | 17.9 | 17.1 | 4% | N | 441.9 | 591.2 | -25% | D" in rows
    assert "Excess | 12 | 5" in rows
    assert "2 ASSAM 17.9" not in doc.text


def _hit(shared_data: Path, doc: ParsedDocument, chunk: Chunk, n: int = 0) -> Hit:
    """``chunk`` as search returns it."""
    return Hit(
        chunk_id=n,
        document_id=1,
        path=str(shared_data / "realdocs" / "rainfall_distribution.pdf"),
        title=doc.title,
        type="pdf",
        text=chunk.text,
        start=chunk.start,
        end=chunk.end,
        page=chunk.page_start,
        page_end=chunk.page_end,
        heading_path=chunk.heading_path,
        score=1.0 / (n + 1),
    )


def test_a_split_table_starts_every_chunk_with_its_header(shared_data: Path) -> None:
    doc = _parse(shared_data, "rainfall_distribution.pdf")
    table = max(_tables(doc), key=len)
    header = table.split("\n")[0]
    chunks = PassageChunker(WordPieceCounter().count, max_tokens=MAX_SEQ_TOKENS).chunk(
        doc, file_stem="rainfall"
    )
    holding = [c for c in chunks if any(row in c.text for row in table.split("\n")[2:])]
    assert len(holding) >= 2  # too big for one passage
    for chunk in chunks:
        assert chunk.text.strip() != header
    for chunk in holding:
        embedded = chunk.embedding_text.split("\n")
        first_row = next(i for i, line in enumerate(embedded) if line in table.split("\n")[1:])
        assert embedded[first_row - 1] == header


def test_the_answer_about_a_row_quotes_it_with_its_column_names(
    shared_data: Path, embedder
) -> None:
    doc = _parse(shared_data, "rainfall_distribution.pdf")
    chunks = PassageChunker(WordPieceCounter().count, max_tokens=MAX_SEQ_TOKENS).chunk(
        doc, file_stem="rainfall"
    )
    hits = [_hit(shared_data, doc, c, i) for i, c in enumerate(chunks)]
    answer = extract_answer("What was the actual rainfall in Assam?", hits, embedder)
    assert not answer.declined
    assert "ASSAM" in answer.text
    assert "ACTUAL (mm): 17.9" in answer.text


def test_a_row_in_a_later_passage_of_a_split_table_is_quoted_with_its_column_names(
    shared_data: Path, embedder
) -> None:
    from core.generation.citations import SpanFinder

    doc = _parse(shared_data, "rainfall_distribution.pdf")
    chunks = PassageChunker(WordPieceCounter().count, max_tokens=MAX_SEQ_TOKENS).chunk(
        doc, file_stem="rainfall"
    )
    goa = next(c for c in chunks if "| GOA |" in c.text)
    assert goa.start > 0 and not goa.text.startswith("S NO")  # the header is not in its text
    hit = _hit(shared_data, doc, goa)
    # The document's text, as the answer reads it from the library.
    finder = SpanFinder(embedder, text_of=lambda _hit: doc.text)
    # What is quoted, whether or not the decline model thinks one passage enough (this
    # passage never says "rainfall": bench/decline_fit.py measures that decision).
    answer = extract_answer(
        "What was the actual rainfall in Goa?", [hit], embedder, finder=finder, rules=NEVER
    )
    assert not answer.declined
    assert "GOA" in answer.text and "ACTUAL (mm): 19.8" in answer.text
