"""A table too big for one chunk keeps its header with its rows."""

from __future__ import annotations

from core.chunking import PassageChunker
from core.records import Block, BlockKind, ParsedDocument

HEADER = "Country | Capital | Population"


def _count_words(text: str) -> int:
    return len(text.split())


def _table_document(rows: int) -> ParsedDocument:
    intro = "The table lists countries."
    lines = [HEADER] + [f"Country{i} | City{i} | {i * 1000}" for i in range(rows)]
    table = "\n".join(lines)
    text = f"{intro}\n\n{table}\n\nThe end of the list."
    start = len(intro) + 2
    end = start + len(table)
    blocks = (
        Block(BlockKind.PARAGRAPH, 0, len(intro)),
        Block(BlockKind.TABLE, start, end),
        Block(BlockKind.PARAGRAPH, end + 2, len(text)),
    )
    return ParsedDocument(text=text, title="Countries", blocks=blocks)


def test_every_chunk_of_a_split_table_starts_with_its_header() -> None:
    doc = _table_document(60)
    chunks = PassageChunker(_count_words, max_tokens=100).chunk(doc)
    with_rows = [c for c in chunks if "Country" in c.text and " | City" in c.text]
    assert len(with_rows) >= 3  # the table was split
    for chunk in chunks:
        assert chunk.text == doc.text[chunk.start : chunk.end]  # citations' offsets hold
        assert chunk.text.strip() != HEADER  # never the header alone
    for chunk in with_rows:
        # What the passage is embedded and searched with starts its rows with the header.
        lines = chunk.embedding_text.split("\n")
        first_row = next(i for i, line in enumerate(lines) if " | City" in line)
        assert lines[first_row - 1] == HEADER, chunk.embedding_text[:160]
    # Each row is in exactly one chunk, the header's own line only in the first.
    for i in range(60):
        assert sum(f"Country{i} |" in c.text for c in chunks) == 1
    assert sum(c.text.count(HEADER) for c in chunks) == 1


def test_a_table_that_fits_stays_one_passage_with_its_header() -> None:
    doc = _table_document(5)
    chunks = PassageChunker(_count_words, max_tokens=200).chunk(doc)
    table_chunks = [c for c in chunks if HEADER in c.text]
    assert len(table_chunks) == 1
    assert "Country4 | City4 | 4000" in table_chunks[0].text
