"""Retrieval stage: BM25 and dense candidates fused by reciprocal rank fusion.

Keyword and meaning search fail differently (an error code vs a paraphrase), so both run
and are fused by rank, not score: BM25 and cosine scores live on unrelated scales, while
RRF (k=60) needs no calibration and is robust to either list being noisy.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from core.embedding import Embedder
from core.errors import LecternError
from core.records import Hit
from core.store.db import Database
from core.store.keyword import KeywordIndex
from core.store.vectors import VectorIndex, blobs_to_matrix

MODES = ("hybrid", "bm25", "dense")


@dataclass(frozen=True)
class SearchFilters:
    folders: tuple[str, ...] = ()
    types: tuple[str, ...] = ()

    def sql(self) -> tuple[str, list[object]]:
        clauses: list[str] = []
        params: list[object] = []
        if self.folders:
            ors = []
            for folder in self.folders:
                ors.append("(d.folder = ? OR starts_with(d.path, ?))")
                params.extend([folder, folder.rstrip("/") + "/"])
            clauses.append("(" + " OR ".join(ors) + ")")
        if self.types:
            clauses.append("d.type IN (SELECT unnest(?::VARCHAR[]))")
            params.append([t.lower().lstrip(".") for t in self.types])
        return " AND ".join(clauses), params

    def __bool__(self) -> bool:
        return bool(self.folders or self.types)


def rrf_fuse(ranked_lists: Sequence[Sequence[int]], k: int = 60) -> list[tuple[int, float]]:
    scores: dict[int, float] = {}
    for ranked in ranked_lists:
        for rank, key in enumerate(ranked, start=1):
            scores[key] = scores.get(key, 0.0) + 1.0 / (k + rank)
    return sorted(scores.items(), key=lambda kv: (-kv[1], kv[0]))


class Retriever:
    def __init__(
        self,
        db: Database,
        keyword: KeywordIndex,
        vectors: VectorIndex,
        embedder: Embedder,
        *,
        candidates: int = 50,
        rrf_k: int = 60,
    ) -> None:
        self.db = db
        self.keyword = keyword
        self.vectors = vectors
        self.embedder = embedder
        self.candidates = candidates
        self.rrf_k = rrf_k

    def search(
        self, query: str, k: int = 6, mode: str = "hybrid", filters: SearchFilters | None = None
    ) -> list[Hit]:
        if mode not in MODES:
            raise LecternError(f"Unknown search mode {mode!r}.", f"Use one of: {', '.join(MODES)}.")
        filters = filters or SearchFilters()
        query = query.strip()
        if not query:
            return []
        bm25: list[tuple[int, float]] = []
        dense: list[tuple[int, float]] = []
        if mode in ("hybrid", "bm25"):
            where, params = filters.sql()
            bm25 = self.keyword.search(
                query, self.candidates, filter_sql=where, filter_params=params
            )
        if mode in ("hybrid", "dense"):
            dense = self.dense(query, self.candidates, filters)
        if mode == "bm25":
            fused = bm25
        elif mode == "dense":
            fused = dense
        else:
            fused = rrf_fuse([[c for c, _ in bm25], [c for c, _ in dense]], self.rrf_k)
        top = fused[:k]
        bm25_rank = {c: i for i, (c, _) in enumerate(bm25, start=1)}
        dense_rank = {c: i for i, (c, _) in enumerate(dense, start=1)}
        return self._hits(top, bm25_rank, dense_rank)

    def dense(self, query: str, limit: int, filters: SearchFilters) -> list[tuple[int, float]]:
        vector = self.embedder.embed([query])[0]
        if not filters:
            found = self.vectors.search(vector, limit)
            return self._only_live(found)
        # Filtered: exact search over the matching chunks. HNSW with a post-filter would
        # silently return too few results when the filter is selective.
        where, params = filters.sql()
        rows = (
            self.db.cursor()
            .execute(
                f"""SELECT c.id, c.embedding FROM chunks c JOIN documents d ON d.id = c.document_id
                WHERE d.state = 'indexed' AND c.embedding IS NOT NULL AND {where}""",
                params,
            )
            .fetchall()
        )
        if not rows:
            return []
        matrix = blobs_to_matrix([r[1] for r in rows], len(vector))
        scores = matrix @ vector
        order = np.argsort(-scores)[:limit]
        return [(int(rows[i][0]), float(scores[i])) for i in order]

    def _only_live(self, found: list[tuple[int, float]]) -> list[tuple[int, float]]:
        if not found:
            return []
        ids = [c for c, _ in found]
        live = {
            r[0]
            for r in self.db.cursor()
            .execute(
                """SELECT c.id FROM chunks c JOIN documents d ON d.id = c.document_id
                   WHERE d.state = 'indexed' AND c.id IN (SELECT unnest(?::BIGINT[]))""",
                [ids],
            )
            .fetchall()
        }
        return [(c, s) for c, s in found if c in live]

    def _hits(
        self, ranked: list[tuple[int, float]], bm25_rank: dict[int, int], dense_rank: dict[int, int]
    ) -> list[Hit]:
        if not ranked:
            return []
        rows = (
            self.db.cursor()
            .execute(
                """SELECT c.id, c.document_id, d.path, d.title, d.type, c.text, c.start_char, c.end_char,
                      c.page_start, c.page_end, c.heading_path
               FROM chunks c JOIN documents d ON d.id = c.document_id
               WHERE c.id IN (SELECT unnest(?::BIGINT[]))""",
                [[c for c, _ in ranked]],
            )
            .fetchall()
        )
        by_id = {r[0]: r for r in rows}
        hits = []
        for chunk_id, score in ranked:
            r = by_id.get(chunk_id)
            if r is None:  # deleted between ranking and fetching
                continue
            hits.append(
                Hit(
                    chunk_id=r[0],
                    document_id=r[1],
                    path=r[2],
                    title=r[3] or "",
                    type=r[4] or "",
                    text=r[5],
                    start=r[6],
                    end=r[7],
                    page=r[8],
                    page_end=r[9],
                    heading_path=tuple(json.loads(r[10] or "[]")),
                    score=score,
                    bm25_rank=bm25_rank.get(chunk_id),
                    dense_rank=dense_rank.get(chunk_id),
                )
            )
        return hits
