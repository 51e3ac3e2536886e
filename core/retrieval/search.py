"""Retrieval stage: BM25 and dense candidates, fused per document, shown diversified.

Keyword and meaning search fail differently (an error code vs a paraphrase), so both run.
Candidates are counted in *documents*: each list fetches enough chunks to reach
``candidates`` distinct documents (a long document can fill 50 chunk places on its own).
core/retrieval/fusion.py fuses the two lists at document level, score-aware and weighted per query.
In hybrid mode core/retrieval/second_stage.py then re-scores the top documents by late interaction
(MaxSim over the model's word-piece states), where the model offers them. A hybrid
question written in a script the model never learned is answered by keyword alone. The
user sees the best chunks of each document in that order, a document taking at most two
of the top places (the second only after every other document's first) unless it is the
only one that matches.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import cached_property
from typing import cast

import numpy as np

from core.embedding.models import Embedder, embed_queries, reads_script_of
from core.embedding.pieces import pack
from core.embedding.probe import probe_tokens_per_s
from core.errors import LecternError
from core.records import Hit, SearchFilters
from core.retrieval.fusion import (
    FUSIONS,
    FusionContext,
    FusionParams,
    LibraryCalibration,
    best_per_document,
)
from core.retrieval.second_stage import RerankParams, packed_scorer, passage_order, rerank_counted
from core.store.db import Database
from core.store.keyword import KeywordIndex
from core.store.lookup import LiveChunks, embedding_texts, filtered_embeddings, hits_for
from core.store.pieces import PieceStore
from core.store.vectors import VectorIndex

MODES = ("hybrid", "bm25", "dense")


# Chunks fetched per wanted document at first; doubled (up to the cap) while a list has
# fewer distinct documents than wanted and more chunks to give.
_CHUNKS_PER_DOCUMENT = 3
_MAX_CHUNKS_PER_DOCUMENT = 64
MAX_PER_DOCUMENT = 2
ANSWER_LEAD = 5  # the best document's passages an answer reads first (``diversified``)


@dataclass(frozen=True)
class Candidates:
    """One query's chunk lists (best first) and their documents, before fusion."""

    bm25: list[tuple[int, float]]
    dense: list[tuple[int, float]]
    document_of: dict[int, int]

    @cached_property
    def passages(self) -> dict[int, list[int]]:
        """Each document's chunks, best placed first (the second stage and the shown
        order both use it)."""
        return passage_order((self.bm25, self.dense), self.document_of)


def _document_ranks(
    ranked: Sequence[tuple[int, float]], document_of: dict[int, int]
) -> dict[int, int]:
    ranks: dict[int, int] = {}
    for chunk, _ in ranked:
        doc = document_of[chunk]
        if doc not in ranks:
            ranks[doc] = len(ranks) + 1
    return ranks


def diversified(
    documents: Sequence[tuple[int, float]], found: Candidates, k: int, lead: int = 0
) -> list[tuple[int, float]]:
    """Up to ``k`` (chunk, document score): each document's best chunk in document order,
    then a second chunk of each in the same order; more of one document only when it is
    the only one found. A document's chunks are ordered by their best place in either
    list. ``lead``: the best document's first chunks, up to that many, come first (an
    answer: keyword and meaning search often put different passages of the right
    document first, a table's row and its section's opening, and one place each is
    not enough)."""
    chunks_of = found.passages
    documents = [(d, s) for d, s in documents if d in chunks_of]
    per_document = MAX_PER_DOCUMENT if len(documents) > 1 else k
    out: list[tuple[int, float]] = []
    if lead and documents:
        doc, score = documents[0]
        out.extend((chunk, score) for chunk in chunks_of[doc][: min(lead, k)])
    taken = {chunk for chunk, _ in out}
    for turn in range(per_document):
        for doc, score in documents:
            if len(out) >= k:
                return out
            if turn < len(chunks_of[doc]) and chunks_of[doc][turn] not in taken:
                out.append((chunks_of[doc][turn], score))
    return out


def _is_loader(embedder: object) -> bool:
    """Whether ``embedder`` is a function giving the model rather than the model: no
    model is called, and every model has an ``embed`` method."""
    return callable(embedder) and not hasattr(embedder, "embed")


class PieceCache:
    """Packed word-piece states (core/embedding/pieces.py) of chunks the second stage
    encoded at search time, because the library had none stored for them, so a follow-up
    question or a search again over the same documents does not encode them again. A
    chunk's text never changes under its id (an edited file gets new chunks), and a new
    model gets a new Retriever, so entries never go stale; the oldest go first past
    ``max_bytes``."""

    def __init__(self, max_bytes: int = 16 << 20) -> None:
        self.max_bytes = max_bytes
        self._pieces: OrderedDict[int, bytes] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()  # searches run on several threads at once

    def get_many(self, chunk_ids: Sequence[int]) -> dict[int, bytes]:
        with self._lock:
            found = {}
            for chunk in chunk_ids:
                blob = self._pieces.get(chunk)
                if blob is not None:
                    self._pieces.move_to_end(chunk)
                    found[chunk] = blob
            return found

    def put_many(self, pieces: Mapping[int, bytes]) -> None:
        with self._lock:
            for chunk, blob in pieces.items():
                old = self._pieces.pop(chunk, None)
                if old is not None:
                    self._bytes -= len(old)
                self._pieces[chunk] = blob
                self._bytes += len(blob)
            while self._bytes > self.max_bytes and self._pieces:
                _, dropped = self._pieces.popitem(last=False)
                self._bytes -= len(dropped)


class SecondStagePace:
    """How fast this computer encodes the second stage's word pieces when nothing else
    holds its cores, and so how long the stage may take.

    The unhurried rate is the best seen in this process (word pieces per second of wall
    time), at first the encoder's own probe. It is kept per size of slice, since a slice of
    short passages pays the model's fixed cost per call on fewer pieces. A search's stage
    may take ``RerankParams.budget_factor`` times what its slices would take at those
    rates: on a busy computer the rate falls and the stage re-scores fewer documents
    instead of taking seconds (issue 34: 0.7 s a query idle, 6 s with a build running)."""

    SLICE = 4  # passages encoded between two looks at the clock

    def __init__(self, prior_tokens_per_s: float | None = None, prior_tokens: int = 1024) -> None:
        self._best: dict[int, float] = {}
        self._lock = threading.Lock()
        if prior_tokens_per_s:
            self._best[self._size(prior_tokens)] = prior_tokens_per_s

    @staticmethod
    def _size(tokens: int) -> int:
        return min(5, max(0, (max(1, tokens) - 1) // 64).bit_length())  # 64, 128 ... 1024+

    def observe(self, tokens: int, seconds: float) -> None:
        if seconds > 0 and tokens > 0:
            size = self._size(tokens)
            with self._lock:
                self._best[size] = max(self._best.get(size, 0.0), tokens / seconds)

    def expected_s(self, tokens: int) -> float:
        """Seconds one slice of ``tokens`` word pieces takes unhurried (inf: no rate yet)."""
        size = self._size(tokens)
        with self._lock:
            if not self._best:
                return float("inf")
            nearest = min(self._best, key=lambda known: (abs(known - size), -known))
            return tokens / self._best[nearest]

    def budget_s(self, slices: Sequence[int], params: RerankParams) -> float:
        """Wall seconds for encoding slices of these many word pieces."""
        expected = sum(self.expected_s(tokens) for tokens in slices)
        return max(params.min_budget_s, params.budget_factor * expected)


class Retriever:
    """``vectors`` and ``embedder`` may be given as zero-argument loaders: a keyword
    search then never loads the model (importing it is most of a short command's time
    and memory) nor opens the vector file; the first search that needs meaning loads
    each, once. ``model_id`` names the model without loading it (required with a loader)."""

    def __init__(
        self,
        db: Database,
        keyword: KeywordIndex,
        vectors: VectorIndex | Callable[[], VectorIndex],
        embedder: Embedder | Callable[[], Embedder],
        *,
        model_id: str | None = None,
        candidates: int = 100,
        rrf_k: int = 60,
        fusion: str = "adaptive",
        params: FusionParams | None = None,
        second_stage: RerankParams | None = None,
        calibration: LibraryCalibration | None = None,
        pieces: PieceStore | None = None,
        live: LiveChunks | None = None,
    ) -> None:
        if fusion not in FUSIONS:
            raise LecternError(f"Unknown fusion {fusion!r}.", f"Use one of: {', '.join(FUSIONS)}.")
        self.db = db
        self.keyword = keyword
        self.live = live or LiveChunks(db)
        self._vectors = vectors if isinstance(vectors, VectorIndex) else None
        self._load_vectors = vectors if not isinstance(vectors, VectorIndex) else None
        loader = cast("Callable[[], Embedder]", embedder) if _is_loader(embedder) else None
        self._embedder: Embedder | None = None if loader else cast(Embedder, embedder)
        self._load_embedder = loader
        if model_id is None:
            if self._embedder is None:
                raise TypeError("Retriever: model_id is required when the model is a loader")
            model_id = self._embedder.model_id
        self.model_id = model_id
        # One lock each: opening the vector file must not wait behind the model's seconds.
        self._model_lock = threading.Lock()
        self._vectors_lock = threading.Lock()
        self.candidates = candidates
        self.rrf_k = rrf_k
        self.fusion = fusion
        self.params = params or FusionParams(depth=candidates)
        # The library's record of which list was surer, which tilts the fusion's prior.
        self.calibration = calibration or LibraryCalibration()
        self._second_stage = second_stage
        self._pieces = pieces
        self._piece_cache = PieceCache()
        self._pace: SecondStagePace | None = None

    @property
    def embedder(self) -> Embedder:
        """The model, loaded at the first search that needs meaning."""
        if self._embedder is None:
            with self._model_lock:
                if self._embedder is None:
                    assert self._load_embedder is not None
                    self._embedder = self._load_embedder()
        return self._embedder

    @property
    def vectors(self) -> VectorIndex:
        if self._vectors is None:
            with self._vectors_lock:
                if self._vectors is None:
                    assert self._load_vectors is not None
                    self._vectors = self._load_vectors()
        return self._vectors

    @property
    def second_stage(self) -> RerankParams | None:
        """None: no second stage (switched off, or a model without word-piece states);
        asking loads the model when the stage is on."""
        if self._second_stage is None or not hasattr(self.embedder, "token_vectors"):
            return None
        return self._second_stage

    def search(
        self,
        query: str,
        k: int = 6,
        mode: str = "hybrid",
        filters: SearchFilters | None = None,
        lead: int = 0,
    ) -> list[Hit]:
        """The best ``k`` passages, diversified over documents (``lead``: see
        ``diversified``)."""
        if mode not in MODES:
            raise LecternError(f"Unknown search mode {mode!r}.", f"Use one of: {', '.join(MODES)}.")
        filters = filters or SearchFilters()
        query = query.strip()
        if not query:
            return []
        if mode == "hybrid" and not reads_script_of(self.model_id, query):
            # A question in a script the model never learned (Russian for English-only
            # MiniLM) gets meaning lists that are noise, and fusing them drags the keyword
            # list down; they are asked only when no passage holds the question's words.
            found = self.candidate_lists(query, "bm25", filters)
            if found.bm25:
                ranked = self.rank_documents(found, "bm25")
                return self._hits(diversified(ranked, found, k, lead), found)
        second_stage = self.second_stage if mode == "hybrid" else None
        vector = states = None
        if second_stage is not None and hasattr(self.embedder, "query_with_states"):
            # One forward pass for the question's vector and its word pieces.
            vector, states = self.embedder.query_with_states(query)
        found = self.candidate_lists(query, mode, filters, vector)
        ranked = self.rank_documents(found, mode)
        stage: dict[int, bool] = {}
        if second_stage is not None:
            fused = ranked
            ranked, rescored = self.rerank(query, ranked, found, second_stage, states)
            if len(fused) >= 2 and second_stage.weight != 0.0:
                stage = {d: i < rescored for i, (d, _) in enumerate(fused[: second_stage.depth])}
        return self._hits(diversified(ranked, found, k, lead), found, stage)

    def rerank(
        self,
        query: str,
        ranked: list[tuple[int, float]],
        found: Candidates,
        params: RerankParams,
        query_states: np.ndarray | None = None,
    ) -> tuple[list[tuple[int, float]], int]:
        """The second stage over the fused documents (core/retrieval/second_stage.py), within its time
        budget; also how many of the top documents it re-scored.

        The passages' word pieces are read as the indexer stored them; only a passage
        without them (indexed before they were kept, or its file's vectors given by an
        identical one) is encoded here, within the stage's time budget."""
        started = time.monotonic()
        embedder = self.embedder
        token_vectors = embedder.token_vectors  # type: ignore[attr-defined]
        pace = self.pace

        def encode(texts: list[str]) -> list[np.ndarray]:
            t0 = time.monotonic()
            states: list[np.ndarray] = token_vectors(texts)
            pace.observe(sum(len(m) + 2 for m in states), time.monotonic() - t0)
            return states

        def chunk_pieces(chunk_ids: list[int]) -> dict[int, bytes]:
            pieces = self._pieces.get(chunk_ids) if self._pieces is not None else {}
            todo = [c for c in chunk_ids if c not in pieces]
            pieces |= self._piece_cache.get_many(todo)
            todo = [c for c in todo if c not in pieces]
            if not todo:
                return pieces
            texts = embedding_texts(self.db, todo)
            for chunk in todo:
                if chunk not in texts:  # deleted meanwhile: nothing of it matches
                    pieces[chunk] = b""
            ids = [c for c in todo if c in texts]
            slices = [ids[i : i + pace.SLICE] for i in range(0, len(ids), pace.SLICE)]
            sizes = [
                sum(min(embedder.max_tokens, embedder.count_tokens(texts[c]) + 2) for c in part)
                for part in slices
            ]
            deadline = started + pace.budget_s([len(query_tokens) + 2, *sizes], params)
            fresh: dict[int, bytes] = {}
            for part in slices:
                if time.monotonic() > deadline:
                    break  # the rest keep the first stage's order
                states = encode([texts[c] for c in part])
                fresh.update((c, pack(m)) for c, m in zip(part, states, strict=True))
            self._piece_cache.put_many(fresh)
            return pieces | fresh

        (query_tokens,) = [query_states] if query_states is not None else encode([query])
        scorer = packed_scorer(query_tokens, chunk_pieces, embedder.dim)
        return rerank_counted(ranked, found.passages, scorer, params)

    @property
    def pace(self) -> SecondStagePace:
        if self._pace is None:
            choice = getattr(self.embedder, "encoding", None)
            self._pace = SecondStagePace(probe_tokens_per_s(choice))
        return self._pace

    def candidate_lists(
        self, query: str, mode: str, filters: SearchFilters, vector: np.ndarray | None = None
    ) -> Candidates:
        """Each mode's chunk list; ``vector``: the question's, when already encoded."""
        fetchers: dict[str, Callable[[int], list[tuple[int, float]]]] = {}
        if mode in ("hybrid", "bm25"):
            fetchers["bm25"] = lambda n: self.keyword.search(query, n, filters=filters)
        if mode in ("hybrid", "dense"):
            if vector is None:
                vector = embed_queries(self.embedder, [query])[0]
            # Dense search is exact (a scan of every vector), so the deepest list costs
            # about what a short one does: fetched once, then taken as deep as needed
            # (made pairs only that far: all 6,400 were a tenth of a search's CPU).
            keys, sims = self.dense_vector(
                vector, self.candidates * _MAX_CHUNKS_PER_DOCUMENT, filters
            )
            fetchers["dense"] = lambda n: list(
                zip(keys[:n].tolist(), sims[:n].tolist(), strict=True)
            )
        document_of: dict[int, int] = {}
        lists = self._deep_enough(fetchers, document_of)
        return Candidates(
            [x for x in lists.get("bm25", []) if x[0] in document_of],
            [x for x in lists.get("dense", []) if x[0] in document_of],
            document_of,
        )

    def _deep_enough(
        self,
        fetchers: dict[str, Callable[[int], list[tuple[int, float]]]],
        document_of: dict[int, int],
    ) -> dict[str, list[tuple[int, float]]]:
        """Each list's chunks, enough to reach ``candidates`` documents; adds the live
        ones' documents to ``document_of`` (a chunk left out there is not live). The
        lists' new chunks are looked up together, one query a round: a query each was a
        sixth of a hybrid search's CPU."""
        limit = self.candidates * _CHUNKS_PER_DOCUMENT
        deepest = self.candidates * _MAX_CHUNKS_PER_DOCUMENT
        out: dict[str, list[tuple[int, float]]] = {}
        pending = dict(fetchers)
        while pending:
            found = {name: fetch(limit) for name, fetch in pending.items()}
            new = [c for chunks in found.values() for c, _ in chunks if c not in document_of]
            document_of.update(self.live.documents_of(list(dict.fromkeys(new))))
            for name, chunks in found.items():
                documents = {document_of[c] for c, _ in chunks if c in document_of}
                if len(chunks) < limit or limit >= deepest or len(documents) >= self.candidates:
                    out[name] = chunks
                    del pending[name]
            limit *= 2
        return out

    def rank_documents(self, found: Candidates, mode: str) -> list[tuple[int, float]]:
        """Documents, best first, with the score they are ranked by."""
        bm25 = best_per_document(found.bm25, found.document_of)
        dense = best_per_document(found.dense, found.document_of)
        if mode == "bm25":
            return bm25
        if mode == "dense":
            return dense
        context = FusionContext(
            self.params,
            self.rrf_k,
            self.live.unembedded,
            self.calibration,
        )
        return FUSIONS[self.fusion](bm25, dense, context)

    def dense_vector(
        self, vector: np.ndarray, limit: int, filters: SearchFilters
    ) -> tuple[np.ndarray, np.ndarray]:
        """The ``limit`` nearest chunks inside ``filters``: their ids and cosine
        similarities, nearest first."""
        if not filters:
            return self.vectors.nearest(vector, limit)
        # Filtered: exact search over the matching chunks. HNSW with a post-filter would
        # silently return too few results when the filter is selective.
        ids, matrix = filtered_embeddings(self.db, filters, len(vector))
        if not ids:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32)
        scores = matrix @ vector
        order = np.argsort(-scores)[:limit]
        return np.asarray(ids, dtype=np.int64)[order], scores[order]

    def _hits(
        self,
        ranked: list[tuple[int, float]],
        found: Candidates,
        reranked: dict[int, bool] | None = None,
    ) -> list[Hit]:
        """Hits for (chunk, score); the ranks given are those of the chunk's document in
        each list, since fusion ranks documents; ``reranked``: by document, whether the
        second stage re-scored it."""
        reranked = reranked or {}
        if not ranked:
            return []
        bm25_rank = _document_ranks(found.bm25, found.document_of)
        dense_rank = _document_ranks(found.dense, found.document_of)
        by_id = hits_for(self.db, [c for c, _ in ranked], self.live)
        hits = []
        for chunk_id, score in ranked:
            hit = by_id.get(chunk_id)
            if hit is None:  # deleted between ranking and fetching
                continue
            hits.append(
                replace(
                    hit,
                    score=score,
                    bm25_rank=bm25_rank.get(hit.document_id),
                    dense_rank=dense_rank.get(hit.document_id),
                    reranked=reranked.get(hit.document_id),
                )
            )
        return hits
