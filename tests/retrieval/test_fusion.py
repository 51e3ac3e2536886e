"""Document-level fusion, diversified results and noise-free chunk context.

The fusion tests use hand-made score lists (the rule is what is under test); the library
tests use real files, the real model and real DuckDB."""

from __future__ import annotations

from pathlib import Path

from core.retrieval.fusion import FusionParams, best_per_document, bm25_share, fuse

# --- fusion -------------------------------------------------------------------------


def _flat(docs: range, top: float = 10.0, step: float = 0.01) -> list[tuple[int, float]]:
    return [(d, top - i * step) for i, d in enumerate(docs)]


def test_a_document_scores_as_its_best_chunk_in_each_list() -> None:
    document_of = {1: 10, 2: 10, 3: 20}
    assert best_per_document([(1, 0.5), (3, 0.4), (2, 0.9)], document_of) == [
        (10, 0.9),
        (20, 0.4),
    ]


def test_evidence_from_different_chunks_of_one_document_adds_up() -> None:
    # Document 7 is second in both lists (through different chunks, which chunk-level
    # fusion would have counted as two unrelated half-votes); 1 and 2 top one list each.
    bm25 = [(1, 10.0), (7, 9.0), *_flat(range(100, 198), top=5.0)]
    dense = [(2, 0.8), (7, 0.78), *_flat(range(200, 298), top=0.5, step=0.001)]
    fused = fuse(bm25, dense, FusionParams(bm25_prior=0.5, confidence_power=0.0))
    assert fused[0][0] == 7


def test_a_confident_list_outweighs_a_flat_one() -> None:
    # BM25 is flat (common words: nothing stands out), dense singles out document 5.
    bm25 = _flat(range(100, 200))
    dense = [(5, 0.9), *_flat(range(6, 105), top=0.4, step=0.001)]
    adaptive = fuse(bm25, dense, FusionParams(bm25_prior=0.5, confidence_power=2.0))
    assert adaptive[0][0] == 5
    # ...and the share moves with the confidence, both ways.
    params = FusionParams(bm25_prior=0.5, confidence_power=1.0)
    assert bm25_share(1.0, 4.0, params) < 0.5 < bm25_share(4.0, 1.0, params)
    assert bm25_share(2.0, 2.0, params) == 0.5


def test_one_empty_list_leaves_the_other_in_its_order() -> None:
    dense = [(3, 0.9), (1, 0.8), (2, 0.7)]
    assert [d for d, _ in fuse([], dense)] == [3, 1, 2]
    assert [d for d, _ in fuse(dense, [])] == [3, 1, 2]


# --- the library --------------------------------------------------------------------

SECTION = (
    "## Part {n}\n\nThe glacier survey of part {n} measured how the Vatnajokull ice cap "
    "retreated, with stakes drilled into the ice and read every spring by the survey team.\n\n"
)


def _write_corpus(folder: Path) -> None:
    folder.mkdir()
    (folder / "glaciers.md").write_text(
        "# Glacier survey\n\n" + "".join(SECTION.format(n=n) for n in range(1, 9)),
        encoding="utf-8",
    )
    (folder / "tides.md").write_text(
        "# Tides\n\nThe tide tables list the high and low water at each harbour.\n",
        encoding="utf-8",
    )
    (folder / "ice.md").write_text(
        "# Sea ice\n\nSea ice in the Arctic retreats each summer and refreezes in winter.\n",
        encoding="utf-8",
    )
    (folder / "bread.md").write_text(
        "# Bread\n\nA sourdough starter needs flour, water and a warm kitchen.\n",
        encoding="utf-8",
    )


def test_one_document_takes_at_most_two_of_the_top_places(library, tmp_path: Path) -> None:
    folder = tmp_path / "docs"
    _write_corpus(folder)
    library.index([folder])
    hits = library.search("how did the ice cap retreat, measured with stakes", k=5)
    paths = [Path(h.path).name for h in hits]
    assert paths[0] == "glaciers.md"
    assert paths.count("glaciers.md") == 2
    assert len(paths) == 5 and len(set(paths)) == 4
    # The second chunk of the best document comes after every other document's first.
    assert paths.index("glaciers.md", 1) == 4
    assert all(h.bm25_rank is not None or h.dense_rank is not None for h in hits)


def test_the_only_matching_document_fills_the_places(library, tmp_path: Path) -> None:
    folder = tmp_path / "docs"
    _write_corpus(folder)
    library.index([folder])
    # Only the glacier survey has the word; by keyword nothing else matches at all.
    hits = library.search("Vatnajokull", k=5, mode="bm25")
    assert [Path(h.path).name for h in hits] == ["glaciers.md"] * 5
    assert len({h.chunk_id for h in hits}) == 5


def test_an_untitled_document_gets_no_file_name_as_context(library, tmp_path: Path) -> None:
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "4380635-3f2a9c.md").write_text(
        "Stakes drilled into the ice were read every spring.\n\nThe cap retreated.\n",
        encoding="utf-8",
    )
    (folder / "titled.md").write_text("# Harbour tides\n\nHigh water at noon.\n", encoding="utf-8")
    library.index([folder])
    # The file name would be keyword-searchable if it were the chunks' context.
    assert library.search("4380635", mode="bm25") == []
    found = library.search("harbour", mode="bm25")
    assert [Path(h.path).name for h in found] == ["titled.md"]
    untitled = library.search("stakes drilled", mode="bm25")
    assert untitled and Path(untitled[0].path).name == "4380635-3f2a9c.md"


def test_keyword_search_reads_every_script(library, tmp_path: Path) -> None:
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "ru.txt").write_text(
        "Библиотека открыта по субботам до шести часов вечера.\n", encoding="utf-8"
    )
    (folder / "el.txt").write_text("Ο παράγοντας TNF-α ρυθμίζει τη φλεγμονή.\n", encoding="utf-8")
    (folder / "en.txt").write_text("The library opens on Saturdays.\n", encoding="utf-8")
    library.index([folder])
    # Letters outside a-z used to be dropped by the keyword tokenizer: nothing matched.
    found = library.search("библиотека", mode="bm25")
    assert [Path(h.path).name for h in found][:1] == ["ru.txt"]
    assert [Path(h.path).name for h in library.search("φλεγμονή", mode="bm25")][:1] == ["el.txt"]


def test_every_fusion_in_the_table_puts_what_both_lists_found_first() -> None:
    """The fusions a library can be set to are one table (core/retrieval/fusion.py): each
    ranks every document either list found, the one both found on top."""
    from core.retrieval.fusion import FUSIONS, FusionContext, FusionParams

    bm25 = [(1, 9.0), (2, 5.0), (3, 1.0)]
    dense = [(1, 0.9), (3, 0.5), (4, 0.4)]
    context = FusionContext(FusionParams(), 60, lambda docs: frozenset())
    assert set(FUSIONS) == {"adaptive", "rrf"}
    for name, fusion in FUSIONS.items():
        ranked = fusion(bm25, dense, context)
        assert ranked[0][0] == 1, name
        assert {doc for doc, _ in ranked} == {1, 2, 3, 4}, name
