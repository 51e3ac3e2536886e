"""The second stage (core/retrieval/second_stage.py): MaxSim over the model's word-piece states."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import numpy as np

from core.embedding.pieces import late_scores, pack
from core.retrieval.second_stage import RerankParams, maxsim, packed_scorer, passage_order, rerank


def _unit(rows: list[list[float]]) -> np.ndarray:
    matrix = np.asarray(rows, dtype=np.float32)
    return matrix / np.linalg.norm(matrix, axis=1, keepdims=True)


def test_word_piece_states_are_the_models_own(embedder) -> None:
    text = "Mitochondria produce most of the cell's chemical energy."
    (states,) = embedder.token_vectors([text])
    # One row per word piece, [CLS] and [SEP] left out, each of unit length.
    assert states.shape == (embedder.count_tokens(text), embedder.dim)
    assert np.allclose(np.linalg.norm(states, axis=1), 1.0, atol=1e-3)
    # A text matches itself piece for piece; an unrelated one does not.
    (other,) = embedder.token_vectors(["The invoice is due on the first of the month."])
    assert maxsim(states, states) > 0.99
    assert maxsim(states, other) < 0.8


def test_packed_pieces_keep_late_interactions_order(embedder) -> None:
    """Sign codes (core/embedding/pieces.py) rank passages as the float states do."""
    query_text = "what pressure should the heating boiler show"
    texts = [
        "The boiler pressure gauge should read between one and two bar.",
        "Inflate the bicycle tyres to the pressure printed on the sidewall.",
        "Water the tomatoes early in the morning during hot weeks.",
    ]
    (query,) = embedder.token_vectors([query_text])
    states = embedder.token_vectors(texts)
    exact = [maxsim(query, m) for m in states]
    packed = late_scores(query, [pack(m) for m in states], embedder.dim)
    assert np.argsort(exact).tolist() == np.argsort(packed).tolist()
    # 48 bytes a word piece for 384 dimensions; an empty passage scores 0.
    assert len(pack(states[0])) == len(states[0]) * embedder.dim // 8
    assert late_scores(query, [b"", pack(states[0])], embedder.dim)[0] == 0.0


def test_packed_pieces_score_as_their_unpacked_signs(monkeypatch) -> None:
    """MaxSim over the packed bytes (torch's byte tables, or NumPy unpacking them when
    torch is not loaded) is the product with the +-1 signs themselves."""
    import torch  # noqa: F401 - loaded, as it is whenever a model made the states

    rng = np.random.default_rng(7)
    dim = 384
    query = _unit(rng.standard_normal((9, dim)).tolist())
    passages = [rng.standard_normal((n, dim)) for n in (1, 40, 0, 17, 230)]
    blobs = [pack(m) if len(m) else b"" for m in passages]
    expected = [
        float(np.mean(np.max(query @ (np.where(m > 0, 1.0, -1.0) / np.sqrt(dim)).T, axis=1)))
        if len(m)
        else 0.0
        for m in passages
    ]
    assert np.allclose(late_scores(query, blobs, dim), expected, atol=1e-6)
    monkeypatch.delitem(sys.modules, "torch")
    assert np.allclose(late_scores(query, blobs, dim), expected, atol=1e-6)


def test_the_same_forward_pass_gives_vectors_and_pieces(embedder) -> None:
    texts = ["The boiler pressure gauge should read between one and two bar.", "Tax is due."]
    vectors, pieces = embedder.embed_with_pieces(texts)
    assert np.allclose(vectors, embedder.embed(texts), atol=1e-5)
    assert pieces == [pack(m) for m in embedder.token_vectors(texts)]


def test_a_questions_vector_and_pieces_come_from_one_forward_pass(embedder) -> None:
    # Lengths off the padding step: the pooled vector averages the question's own pieces.
    for question in ("boiler pressure", "what pressure should the heating boiler show now"):
        vector, states = embedder.query_with_states(question)
        assert np.allclose(vector, embedder.embed_query([question])[0], atol=1e-5)
        assert np.allclose(states, embedder.token_vectors([question])[0], atol=1e-5)


def test_the_short_list_is_reordered_by_late_interaction() -> None:
    query = _unit([[1, 0, 0, 0, 0, 0, 0, 0], [0, 1, 0, 0, 0, 0, 0, 0]])
    pieces = {
        10: pack(_unit([[-1, -1, 1, 0, 0, 0, 0, 0]])),  # document 1: nothing of the query
        20: pack(_unit([[1, -1, 0, 0, 0, 0, 0, 0], [-1, 1, 0, 0, 0, 0, 0, 0]])),  # all of it
        30: pack(_unit([[1, -1, 0.2, 0, 0, 0, 0, 0]])),
    }
    fused = [(1, 2.0), (2, 1.9), (3, 1.0), (4, 0.5)]
    chunks_of = {1: [10], 2: [20], 3: [30], 4: [40]}
    asked: list[list[int]] = []

    def chunk_pieces(ids: list[int]) -> dict[int, bytes]:
        asked.append(ids)
        return {c: pieces[c] for c in ids if c in pieces}

    scorer = packed_scorer(query, chunk_pieces, 8)
    out = rerank(fused, chunks_of, scorer, RerankParams(depth=3, weight=1.0))
    assert [d for d, _ in out] == [2, 1, 3, 4]
    assert asked == [[10, 20, 30]]  # only the short list's passages are read
    scores = [s for _, s in out]
    assert scores == sorted(scores, reverse=True)  # the rest stays below, in order
    # Weight 0 is the first stage as it was.
    assert rerank(fused, chunks_of, scorer, RerankParams(weight=0.0)) == fused


def test_passages_are_taken_in_the_order_they_were_found() -> None:
    document_of = {1: 7, 2: 7, 3: 8, 4: 7}
    bm25 = [(3, 9.0), (2, 5.0)]
    dense = [(1, 0.9), (4, 0.8), (2, 0.7)]
    assert passage_order([bm25, dense], document_of) == {7: [1, 2, 4], 8: [3]}


@contextlib.contextmanager
def counting_passages(embedder) -> Iterator[list[int]]:
    """While held, how many texts each ``token_vectors`` call encodes: the passages the
    second stage encodes at search time (a question's pieces come with its vector)."""
    calls: list[int] = []
    real = embedder.token_vectors

    def counting(texts: list[str]) -> list[np.ndarray]:
        calls.append(len(texts))
        return real(texts)

    embedder.token_vectors = counting
    try:
        yield calls
    finally:
        del embedder.token_vectors


def _library(home: Path, embedder, *, second_stage: bool):
    from core.config import Settings
    from core.library import Library

    return Library(replace(Settings(home=home), rerank=second_stage), embedder=embedder)


def test_hybrid_search_runs_the_second_stage_and_can_be_switched_off(
    lectern_home: Path, embedder, tmp_path: Path
) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    notes = {
        "boiler.md": "# Boiler\nThe boiler pressure gauge should read between one and two bar.",
        "garden.md": "# Garden\nWater the tomatoes early in the morning during hot weeks.",
        "bike.md": "# Bike\nInflate the bicycle tyres to the pressure printed on the sidewall.",
        "tax.md": "# Tax\nThe annual tax return is due at the end of January.",
    }
    for name, text in notes.items():
        (docs / name).write_text(text, encoding="utf-8")
    with _library(lectern_home, embedder, second_stage=True) as library:
        library.index([docs])
        with counting_passages(library.embedder) as calls:
            hits = library.search("what pressure should the heating boiler show", k=4)
            assert Path(hits[0].path).name == "boiler.md"
            # The passages' word pieces were kept when they were indexed: no passage is
            # encoded (the question's pieces come with its vector), and the second stage
            # re-scored the short list.
            assert not calls
            assert any(h.reranked for h in hits)
            calls.clear()
            library.search("boiler pressure", k=4, mode="bm25")
            library.search("boiler pressure", k=4, mode="dense")
            assert not calls  # single modes are the lists as they are
    with _library(lectern_home, embedder, second_stage=False) as library:
        assert library.retriever.second_stage is None


def test_a_library_without_kept_pieces_encodes_them_once_then_keeps_them(
    lectern_home: Path, embedder, tmp_path: Path
) -> None:
    """Indexed with the stage off (or before pieces were kept): searches encode the short
    list as before, with the same order as stored pieces give, and the next indexing run
    fills the pieces in, after which a search encodes only its question."""
    docs = tmp_path / "docs"
    docs.mkdir()
    for i, text in enumerate(
        [
            "The boiler pressure gauge should read between one and two bar.",
            "Inflate the bicycle tyres to the pressure printed on the sidewall.",
            "Water the tomatoes early in the morning during hot weeks.",
            "The annual tax return is due at the end of January.",
        ]
    ):
        (docs / f"note{i}.md").write_text(f"# Note {i}\n{text}\n", encoding="utf-8")
    question = "what pressure should the heating boiler show"
    with _library(lectern_home, embedder, second_stage=False) as library:
        library.index([docs])
        assert library.pieces.counts() == (0, 4)
    with (
        _library(lectern_home, embedder, second_stage=True) as library,
        counting_passages(embedder) as calls,
    ):
        encoded = library.search(question, k=4)
        assert sum(calls) >= 3  # the short list's passages
        library.index([docs])  # nothing changed on disk: only the pieces are made
        assert library.pieces.counts() == (4, 4)
        library._retriever = None  # a new search session: nothing cached
        calls.clear()
        stored = library.search(question, k=4)
        assert not calls
        assert [h.chunk_id for h in stored] == [h.chunk_id for h in encoded]
        # A document's pieces go with it.
        (docs / "note0.md").unlink()
        library.index([docs])
        assert library.pieces.counts() == (3, 3)
        assert library.pieces.prune() == 0
