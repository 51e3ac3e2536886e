"""One definition of a sentence, shared by chunking, citation spans and extractive answers."""

from __future__ import annotations

from core.chunking import PassageChunker, chunker_for
from core.embedding.models import MAX_SEQ_TOKENS
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
    chunker = PassageChunker(_count_chars, max_tokens=80)
    chunks = chunker.chunk(doc)
    ends = {e for s, e in split_sentences(doc.text)}
    # The Chinese paragraph is split between sentences rather than kept whole past the limit.
    assert all(_count_chars(chunk.text) <= 80 for chunk in chunks)
    assert sum("。" in chunk.text for chunk in chunks) > 1
    # Every chunk ends on a sentence end of the shared splitter, never inside a sentence.
    assert all(chunk.end in ends for chunk in chunks)
    # "Fig." and "U.S." do not end sentences for either stage.
    assert any("See Fig. 3 for details." in chunk.text for chunk in chunks)


# English, German, French, Greek, Chinese and code-like text under Markdown headings: the
# units the chunker packs are joined across spaces, newlines and none at all (CJK).
MIXED = "\n\n".join(
    [
        "# Field notes",
        "## Results",
        " ".join(
            f"Trial {n} measured TNF-α at {n}.5 ng/mL (p < 0.0{n}); see Fig. {n}b and U.S. data."
            for n in range(1, 30)
        ),
        "## Zusammenfassung",
        " ".join(
            f"Die Häuser Nr. {n} wurden überprüft, und die Ergebnisse waren größtenteils gut."
            for n in range(20)
        ),
        "## Résumé",
        " ".join(f"L'été {n} fut très chaud ; les élèves étaient déçus." for n in range(20)),
        "## Σύνοψη",
        " ".join(f"Η μελέτη {n} έδειξε ότι οι ασθενείς βελτιώθηκαν." for n in range(15)),
        "## 摘要",
        CJK * 3,
        "## Code",
        "- `config.max_tokens=256` and `os.environ['HF_HUB_OFFLINE']`\n- snake_case_names_here",
    ]
)


def test_chunk_token_counts_are_exact_and_counted_once(tmp_path) -> None:
    """A chunk's token count is the real tokenizer's count of its text (it is stored and
    bounds what the model reads), yet the chunker does not count a chunk's text again
    when its sentences were joined across whitespace: their counts add up exactly, and
    counting twice made token counting half of the indexer's work beside the model."""
    from core.embedding.models import WordPieceCounter

    tokenizer = WordPieceCounter()
    counted_chars = 0

    def counting(text: str) -> int:
        nonlocal counted_chars
        counted_chars += len(text)
        return tokenizer.count(text)

    path = tmp_path / "notes.md"
    path.write_text(MIXED, encoding="utf-8")
    from core.ingest.markdown import parse as parse_markdown_file

    doc = parse_markdown_file(path)
    for max_tokens in (96, 128, 256):
        counted_chars = 0
        chunks = PassageChunker(counting, max_tokens=max_tokens).chunk(doc)
        assert len(chunks) > 3
        for chunk in chunks:
            assert chunk.token_count == tokenizer.count(chunk.text), chunk.text
            context = tokenizer.count(chunk.context) + 1 if chunk.context else 0
            assert chunk.token_count + context <= max_tokens - 2
        # Each sentence once (and the headings as context), not every chunk a second time.
        assert counted_chars < 1.3 * len(doc.text), (max_tokens, counted_chars, len(doc.text))


def test_the_chunker_is_sized_by_the_model_that_embeds_its_passages(tmp_path) -> None:
    """``chunker_for`` takes the model's word-piece limit and its own count: a passage
    never runs past what the model reads."""
    from core.embedding.models import WordPieceCounter

    class Narrow:
        max_tokens = 40

        def count_tokens(self, text: str) -> int:
            return len(text.split())

    path = tmp_path / "notes.md"
    path.write_text(MIXED, encoding="utf-8")
    from core.ingest.markdown import parse as parse_markdown_file

    doc = parse_markdown_file(path)
    narrow = chunker_for(Narrow(), overlap_sentences=1)
    assert narrow.max_tokens == 40 and narrow.version.endswith(":max40:ov1")
    for chunk in narrow.chunk(doc):
        context = len(chunk.context.split()) + 1 if chunk.context else 0
        assert chunk.token_count + context <= 40 - 2
    bundled = chunker_for(WordPieceCounter())
    assert bundled.max_tokens == MAX_SEQ_TOKENS == 256
    assert (
        bundled.version
        == PassageChunker(WordPieceCounter().count, max_tokens=MAX_SEQ_TOKENS).version
    )
