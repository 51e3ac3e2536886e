"""One definition of a sentence, shared by chunking, citation spans and extractive answers."""

from __future__ import annotations

from core.chunking import Chunker
from core.ingest.text import parse as parse_text
from core.text import split_sentences

# Eight sentences of Chinese with no spaces: only the CJK full stop separates them.
CJK = "".join(
    f"第{n}号实验在高温下持续了很长时间并且记录了大量的数据以便后续分析。" for n in range(8)
)


def _count_chars(text: str) -> int:
    # A stand-in counter where each CJK character is one word piece, as in the real tokenizer.
    return len(text)


def test_cjk_sentences_split_at_the_full_stop() -> None:
    spans = split_sentences(CJK)
    assert len(spans) == 8
    assert all(CJK[e - 1] == "。" for _, e in spans)


def test_chunks_end_where_citation_sentences_end(tmp_path) -> None:
    path = tmp_path / "notes.txt"
    path.write_text(CJK + "\n\nSee Fig. 3 for details. The U.S. team agreed.", encoding="utf-8")
    doc = parse_text(path)
    chunker = Chunker(_count_chars, max_tokens=80)
    chunks = chunker.chunk(doc)
    ends = {e for s, e in split_sentences(doc.text)}
    # The Chinese paragraph is split between sentences rather than kept whole past the limit.
    assert all(_count_chars(chunk.text) <= 80 for chunk in chunks)
    assert sum("。" in chunk.text for chunk in chunks) > 1
    # Every chunk ends on a sentence end of the shared splitter, never inside a sentence.
    assert all(chunk.end in ends for chunk in chunks)
    # "Fig." and "U.S." do not end sentences for either stage.
    assert any("See Fig. 3 for details." in chunk.text for chunk in chunks)
