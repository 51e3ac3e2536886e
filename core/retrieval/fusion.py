"""Document-level, score-aware fusion of the BM25 and dense lists, weighted per query.

Why not reciprocal rank fusion over chunks (what Lectern did first):
- A document found by both lists through *different* chunks got two half-votes that never
  added up; fusing at document level (a document scores as its best chunk in each list)
  lets the evidence of both lists meet.
- Equal-weight RRF lets a weak list drag good results of the other down: on passage sets
  where BM25 is poor, RRF ranked below dense alone. Scores say how far a document stands
  above the rest of its list, ranks do not.

Each list's document scores are z-normalised over its top ``depth`` documents (a BM25
list shorter than that is completed with zeros: what it does not return has none of the
query's words); a document missing from a list gets that list's lowest normalised score
(it was not found above the cut, so at best it sits just below it). The two lists are mixed with a per-query weight:
each list's *confidence* is how far its best document stands above its own list (the top
z-score), and the share of BM25 is ``prior * cb^p / (prior * cb^p + (1 - prior) * cd^p)``.
A query whose keywords single out one document gives BM25 the say; a query whose words
are common (BM25 flat) leaves it to dense, and the reverse. ``p = 0`` is a fixed weight.

The constants are chosen per embedding model (its dense list is what the weight balances),
each with bench/retrieval_tune.py on training data only: the ``FusionParams`` defaults,
for the default model, on the SciFact *train* split; ``MODEL_FUSION``'s on SciFact train
and Lectern's own Russian and German sets together. docs/ARCHITECTURE.md has the figures.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, replace
from types import MappingProxyType

from core.embedding.models import MULTILINGUAL_MODEL_ID

Ranked = Sequence[tuple[int, float]]


@dataclass(frozen=True)
class FusionParams:
    bm25_prior: float = 0.35
    confidence_power: float = 3.0
    depth: int = 100  # documents per list that are normalised and fused


# multilingual-e5's dense list is far stronger than BM25 on paraphrased questions in
# other languages and weaker on English science; chosen as the setting whose hybrid is
# furthest above its best single mode on the worst of SciFact train and
# bench/retrieval_sets' Russian and German sets (ties broken by mean nDCG@10). The
# French and Spanish sets, written after, are its checks. With the later Italian,
# Portuguese and Dutch training sets the same rule picks prior 0.05, which costs 0.020
# on SciFact train for about one question on those sets: not taken (docs/ARCHITECTURE.md).
MODEL_FUSION: dict[str, FusionParams] = {
    MULTILINGUAL_MODEL_ID: FusionParams(bm25_prior=0.15, confidence_power=1.5),
}


def fusion_params(model_id: str, depth: int = 100) -> FusionParams:
    """The fusion constants chosen for ``model_id``, over ``depth`` documents per list."""
    return replace(MODEL_FUSION.get(model_id, FusionParams()), depth=depth)


def best_per_document(
    ranked_chunks: Ranked, document_of: Mapping[int, int]
) -> list[tuple[int, float]]:
    """(document, its best chunk's score), best first; chunks of unknown documents dropped."""
    best: dict[int, float] = {}
    for chunk, score in ranked_chunks:
        doc = document_of.get(chunk)
        if doc is not None and (doc not in best or score > best[doc]):
            best[doc] = score
    return sorted(best.items(), key=lambda kv: (-kv[1], kv[0]))


def _normalised(
    docs: Ranked, depth: int, *, zero_below: bool = False
) -> tuple[dict[int, float], float, float]:
    """z-scores of the top ``depth`` documents, the floor given to absent documents, and
    the list's confidence (its top z-score, never below 0).

    ``zero_below``: every document the list does not return scores 0 (BM25: it contains
    none of the query's words), so a list shorter than ``depth`` is completed with zeros.
    A query whose rare word only one document contains then gives that document a high
    z-score and BM25 the say, instead of a list of one that "does not discriminate"."""
    top = list(docs[:depth])
    if not top:
        return {}, 0.0, 0.0
    values = [s for _, s in top]
    if zero_below and len(values) < depth:
        values += [0.0] * (depth - len(values))
    mean = sum(values) / len(values)
    std = math.sqrt(sum((v - mean) ** 2 for v in values) / len(values))
    if std <= 1e-12:  # all equal: the list does not discriminate
        return {d: 0.0 for d, _ in top}, 0.0, 0.0
    z = {d: (s - mean) / std for d, s in top}
    floor = (min(values) - mean) / std
    return z, floor, max(0.0, max(z.values()))


def bm25_share(bm25_confidence: float, dense_confidence: float, params: FusionParams) -> float:
    """The weight of BM25 for this query (dense gets the rest)."""
    p = params.confidence_power
    wb = params.bm25_prior * (bm25_confidence**p if p else 1.0)
    wd = (1.0 - params.bm25_prior) * (dense_confidence**p if p else 1.0)
    if wb + wd <= 0.0:
        return params.bm25_prior
    return wb / (wb + wd)


def fuse(
    bm25_docs: Ranked,
    dense_docs: Ranked,
    params: FusionParams | None = None,
    keyword_only: AbstractSet[int] = frozenset(),
) -> list[tuple[int, float]]:
    """Fused (document, score), best first. Either list may be empty (then the other
    one's order is kept).

    ``keyword_only`` are documents meaning search cannot find yet (indexing writes
    passages first and embeds them behind): they are ranked by their BM25 score alone
    instead of being pushed down as if dense had looked and not found them."""
    params = params or FusionParams()
    zb, floor_b, cb = _normalised(bm25_docs, params.depth, zero_below=True)
    zd, floor_d, cd = _normalised(dense_docs, params.depth)
    if not zb:
        return [(d, zd[d]) for d, _ in dense_docs[: params.depth]]
    if not zd:
        return [(d, zb[d]) for d, _ in bm25_docs[: params.depth]]
    share = bm25_share(cb, cd, params)
    fused = {
        doc: zb[doc]
        if doc in keyword_only and doc in zb
        else share * zb.get(doc, floor_b) + (1.0 - share) * zd.get(doc, floor_d)
        for doc in zb.keys() | zd.keys()
    }
    return sorted(fused.items(), key=lambda kv: (-kv[1], kv[0]))


def rrf_fuse(ranked_lists: Sequence[Sequence[int]], k: int = 60) -> list[tuple[int, float]]:
    """Reciprocal rank fusion: each list gives ``1 / (k + rank)`` to what it ranks."""
    scores: dict[int, float] = {}
    for ranked in ranked_lists:
        for rank, key in enumerate(ranked, start=1):
            scores[key] = scores.get(key, 0.0) + 1.0 / (k + rank)
    return sorted(scores.items(), key=lambda kv: (-kv[1], kv[0]))


# --- the fusions a library can be set to ("fusion" in settings.json) ----------------------


@dataclass(frozen=True)
class FusionContext:
    """What a fusion may use besides the two lists."""

    params: FusionParams
    rrf_k: int
    # Of the documents given, those meaning search cannot find yet (written, not embedded).
    keyword_only: Callable[[Sequence[int]], AbstractSet[int]]


Fusion = Callable[[Ranked, Ranked, FusionContext], list[tuple[int, float]]]


def _adaptive(
    bm25_docs: Ranked, dense_docs: Ranked, context: FusionContext
) -> list[tuple[int, float]]:
    first = [doc for doc, _ in bm25_docs[: context.params.depth]]
    return fuse(bm25_docs, dense_docs, context.params, context.keyword_only(first))


def _rrf(bm25_docs: Ranked, dense_docs: Ranked, context: FusionContext) -> list[tuple[int, float]]:
    return rrf_fuse([[d for d, _ in bm25_docs], [d for d, _ in dense_docs]], context.rrf_k)


# A new fusion is a function of this shape and one row here.
FUSIONS: Mapping[str, Fusion] = MappingProxyType({"adaptive": _adaptive, "rrf": _rrf})
