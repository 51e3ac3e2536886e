"""Second stage: late interaction (MaxSim) over the fused short list.

The first stage compares one pooled vector per passage with one per query, and BM25
counts exact words; both miss a passage that answers with the same meaning spread over
different words. MaxSim (ColBERT's scoring) matches every query word piece with its best
counterpart among the passage's word pieces, using the same model's per-piece output
states (the ones its pooled vector averages), and averages those best matches. No
reranker with its weights ships in any package the registries carry; this one needs
nothing beyond the embedding model already in the bundle.

The top ``depth`` fused documents are re-scored, each by its best placed passage (the
one the user is shown first). A passage's states are read as the indexer packed them
(core/embedding/pieces.py, core/store/pieces.py); only a passage without them is encoded,
within the stage's time budget. A document's final score mixes the two stages, each
z-normalised over the short list: ``fused_z + weight * maxsim_z``. The constants
(``RerankParams`` defaults) were chosen on the SciFact *train* split only, with
bench/retrieval_tune.py (`rerank`). Once reading made deeper lists cheap, `stored` tried
20-80 documents and 1-3 passages each on train: the best (80, 3) gained 0.0045 there and
lost 0.007 on test, within noise both ways, so the constants stayed.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from core.embedding.pieces import late_scores

Ranked = Sequence[tuple[int, float]]


@dataclass(frozen=True)
class RerankParams:
    depth: int = 30  # documents re-scored
    passages_per_document: int = 1  # each by its best placed passage
    weight: float = 1.0  # of the MaxSim z-score against the fused z-score
    # Wall time the stage may take: this many times what its passages take on this
    # computer unhurried (core/retrieval/search.py SecondStagePace), and never less than
    # min_budget_s. Twice: an idle machine's variation stays inside it, and a search
    # beside a busy program waits at most about twice as long as on an idle one.
    budget_factor: float = 2.0
    min_budget_s: float = 0.25


def passage_order(lists: Sequence[Ranked], document_of: Mapping[int, int]) -> dict[int, list[int]]:
    """Each document's candidate chunks, best first: by their best place in any list."""
    place: dict[int, int] = {}
    for ranked in lists:
        for i, (chunk, _) in enumerate(ranked):
            place[chunk] = min(place.get(chunk, i), i)
    chunks_of: dict[int, list[int]] = {}
    for chunk in sorted(place, key=lambda c: (place[c], c)):
        doc = document_of.get(chunk)
        if doc is not None:
            chunks_of.setdefault(doc, []).append(chunk)
    return chunks_of


def maxsim(query: np.ndarray, passage: np.ndarray) -> float:
    """Mean over the query's pieces of its best cosine among the passage's pieces."""
    if not len(query) or not len(passage):
        return 0.0
    return float((query @ passage.T).max(axis=1).mean())


def _z(values: np.ndarray) -> np.ndarray:
    std = float(values.std())
    return (values - values.mean()) / std if std > 1e-12 else np.zeros_like(values)


def packed_scorer(
    query_tokens: np.ndarray, chunk_pieces: Callable[[list[int]], Mapping[int, bytes]], dim: int
) -> Callable[[list[int]], dict[int, float]]:
    """Passage scores for ``rerank``: MaxSim of the query's word-piece states against each
    chunk's packed ones (core/embedding/pieces.py), as ``chunk_pieces`` reads or encodes
    them. A chunk it returns nothing for gets no score (it ran out of time before reaching
    it); one it returns empty (deleted meanwhile) scores 0."""

    def score(chunk_ids: list[int]) -> dict[int, float]:
        pieces = chunk_pieces(chunk_ids)
        ids = list(pieces)
        return dict(zip(ids, late_scores(query_tokens, [pieces[c] for c in ids], dim), strict=True))

    return score


def rerank(
    documents: Ranked,
    chunks_of: Mapping[int, Sequence[int]],
    score_passages: Callable[[list[int]], Mapping[int, float]],
    params: RerankParams | None = None,
) -> list[tuple[int, float]]:
    """``documents`` (fused, best first) with the top ``depth`` re-ordered by the mix of
    their fused and late-interaction scores; the rest follow in their order, below them."""
    return rerank_counted(documents, chunks_of, score_passages, params)[0]


def rerank_counted(
    documents: Ranked,
    chunks_of: Mapping[int, Sequence[int]],
    score_passages: Callable[[list[int]], Mapping[int, float]],
    params: RerankParams | None = None,
) -> tuple[list[tuple[int, float]], int]:
    """``rerank``, and how many of the top documents were re-scored.

    ``score_passages`` is asked once, for every passage of the short list, best placed
    document first. A document's late score is its best passage's. Should the scorer stop
    early (a busy computer: see Retriever.rerank), only the documents before the first one
    left unscored are re-ordered, the rest following in the first stage's order; under two
    re-scored, the first stage's order stands."""
    params = params or RerankParams()
    top = list(documents[: params.depth])
    if len(top) < 2 or params.weight == 0.0:
        return list(documents), 0
    wanted = {d: list(chunks_of.get(d, ()))[: params.passages_per_document] for d, _ in top}
    scores = score_passages(list(dict.fromkeys(c for d, _ in top for c in wanted[d])))
    reached = 0
    while reached < len(top) and all(c in scores for c in wanted[top[reached][0]]):
        reached += 1
    if reached < 2:
        return list(documents), 0
    top = top[:reached]
    late = np.array([max((scores[c] for c in wanted[d]), default=0.0) for d, _ in top])
    mixed = _z(np.array([s for _, s in top])) + params.weight * _z(late)
    order = np.argsort(-mixed, kind="stable")
    out = [(top[i][0], float(mixed[i])) for i in order]
    rest = list(documents[reached:])
    if rest:
        # Below every re-scored document, in their own order.
        shift = rest[0][1] - float(mixed.min()) + 1.0
        out += [(d, s - shift) for d, s in rest]
    return out, reached
