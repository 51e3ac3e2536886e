"""Keyword scoring: BM25 over the keyword file's snapshots, at query time.

A query never reads fts's ``terms`` table (one row per token occurrence, ~30 million at
300k chunks: every query scanned it, 243 ms p95). Each snapshot instead keeps, beside its
fts ``dict``/``docs``/``stats``, a postings table with one row per term (the documents
holding it and their term frequencies, packed as little-endian arrays; see upkeep.py). A
query reads the dictionary rows of its stemmed terms, then only those terms' postings
rows, and scores them with numpy in the same BM25 formula and combined statistics;
liveness and filters are then checked on the best few hundred with a literal id list
(more are taken when too few survive), so the result is the same top-k the full join
gave.

A query scores every snapshot with BM25 using the *combined* statistics (total
documents, average length, and each term's document frequency summed over the
snapshots), so a chunk scores the same whether it sits in the base or the delta.
Deleted chunks need no tombstone table: liveness is checked against the live ``chunks``
table, which drops them.

Between queries the scorer keeps what does not change until the next rebuild: each
snapshot's dictionary (as sorted hashes), decoded postings with their per-document BM25
contribution (48 MB at most), the stems of words seen, and, while the database is quiet,
which chunks are live.
"""

from __future__ import annotations

import math
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import duckdb
import numpy as np

from core.records import SearchFilters
from core.store.db import Database
from core.store.keyword.tokens import QueryStems, matched_words
from core.store.keyword.upkeep import ALIAS
from core.store.lookup import LiveChunks, filter_clause, id_list

# Chosen on SciFact *train* (bench: a grid over k1 in 0.7-1.5 and b in 0.4-0.75):
# 0.9/0.4 and 0.7/0.5 tied best for hybrid (nDCG@10 0.7435 against 0.7409 for the
# textbook 1.2/0.75); 0.9/0.4 is also Anserini's setting for BEIR, so the less tuned of
# the two. Short passages (abstracts, chunks) want little length normalisation.
BM25_K1 = 0.9
BM25_B = 0.4
# Candidates checked for liveness and filters in a first round, beyond ``limit``.
FIRST_CHECK_EXTRA = 100
# Past this many candidates checked by id, the allowed chunks are listed instead.
MAX_CHECKED_BY_ID = 5_000
# Decoded postings, with each term's BM25 contribution per document, kept in memory
# (least recently used out first) up to this many bytes for the whole index: the frequent
# terms, whose lists are longest (slowest to fetch and to score), are the ones queries
# share.
POSTINGS_CACHE_BYTES = 48 * 1024 * 1024


class _Postings:
    """One term's postings in one snapshot, and its BM25 contribution per document for
    the last (avgdl, idf) it was scored with (both move only when a snapshot changes)."""

    __slots__ = ("doc", "scored", "tfs")

    def __init__(self, doc: np.ndarray, tfs: np.ndarray) -> None:
        self.doc = doc
        self.tfs = tfs
        self.scored: tuple[float, float, np.ndarray] | None = None

    @property
    def nbytes(self) -> int:
        return self.doc.nbytes + self.tfs.nbytes + 8 * len(self.doc)

    def contribution(self, avgdl: float, idf: float, norm: np.ndarray) -> np.ndarray:
        """idf * (tf * (k1 + 1)) / (tf + norm), in that order (the same bits as the SQL
        it replaced)."""
        scored = self.scored
        if scored is not None and scored[0] == avgdl and scored[1] == idf:
            return scored[2]
        term_score = self.tfs * (BM25_K1 + 1)
        term_score *= idf
        denominator = norm[self.doc]
        denominator += self.tfs
        term_score /= denominator
        self.scored = (avgdl, idf, term_score)
        return term_score


@dataclass
class _Snapshot:
    """What a query needs of one built snapshot besides the postings of its terms:
    docid -> chunk id and docid -> length (a few MB at 300k chunks), and fts's stats.
    Snapshots never change once built, so this is read once per build."""

    chunk_ids: np.ndarray
    lengths: np.ndarray
    num_docs: int
    avgdl: float
    # (avgdl, norm) in one reference, so a concurrent query never pairs one with the
    # other's.
    norm: tuple[float, np.ndarray] | None = None
    # The dictionary as Python hashes of the terms (sorted), with termid and df in the
    # same order: 24 bytes a term, where asking DuckDB scans the dictionary on every
    # query (1-2 ms of CPU at 25k terms, growing with the vocabulary). Two terms with one
    # 64-bit hash (odds ~1e-12 a query at a million terms) is the only way it can differ.
    term_hashes: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    term_ids: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    term_dfs: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    languages: tuple[str, ...] = ()  # Latin-script languages its passages were stemmed as

    def lookup(self, term: str) -> tuple[int, int] | None:
        """(termid, df) of ``term``, None when no chunk of this snapshot holds it."""
        key = hash(term)
        at = int(np.searchsorted(self.term_hashes, key))
        if at < len(self.term_hashes) and int(self.term_hashes[at]) == key:
            return int(self.term_ids[at]), int(self.term_dfs[at])
        return None

    def length_norm(self, avgdl: float) -> np.ndarray:
        """k1 * (1 - b + b * len / avgdl) per docid, for the combined ``avgdl`` (which
        moves with every delta rebuild)."""
        cached = self.norm
        if cached is not None and cached[0] == avgdl:
            return cached[1]
        norm = BM25_K1 * (1 - BM25_B + BM25_B * self.lengths / avgdl)
        self.norm = (avgdl, norm)
        return norm


def _languages(snapshots: Sequence[_Snapshot]) -> list[str]:
    return sorted({lang for snapshot in snapshots for lang in snapshot.languages})


def _schema(table: str) -> str:
    return f"{ALIAS}.fts_main_{table}"


def _postings(table: str) -> str:
    return f"{ALIAS}.{table}_postings"


class KeywordScorer:
    """Chunk ids and BM25 scores for a query, from the snapshots ``parts`` names now
    ((snapshot, stamp) pairs, oldest first; read again when a switch raced a query)."""

    def __init__(
        self, db: Database, parts: Callable[[], list[tuple[str, str]]], live: LiveChunks
    ) -> None:
        self.db = db
        self._live_chunks = live
        self._parts = parts
        self._snapshots: dict[str, _Snapshot] = {}
        self._lock = threading.Lock()
        # The last query's scores: retrieval asks again with a larger limit when too few
        # documents came back, and only the liveness check depends on the limit.
        self._last_scored: (
            tuple[tuple[str, tuple[tuple[str, str], ...]], np.ndarray, np.ndarray] | None
        ) = None
        # (snapshot stamp, termid) -> (docids, tfs), under _lock.
        self._postings_cache: OrderedDict[tuple[str, int], _Postings] = OrderedDict()
        self._postings_cached_bytes = 0
        self._stems = QueryStems()

    def search(
        self,
        query: str,
        limit: int,
        *,
        filters: SearchFilters | None = None,
        _retries: int = 2,
    ) -> list[tuple[int, float]]:
        """Chunk ids and BM25 scores, best first (ties by chunk id), inside ``filters``."""
        if limit <= 0 or not query.strip():
            return []
        parts = self._parts()
        if not parts:
            return []
        try:
            return self._search(query, limit, filters or SearchFilters(), parts)
        except duckdb.CatalogException:
            # A concurrent merge swapped the snapshot between reading the state and the
            # query; the next attempt sees the new one.
            if _retries <= 0:
                raise
            return self.search(query, limit, filters=filters, _retries=_retries - 1)

    def matched_words(self, query: str, texts: Sequence[str]) -> list[frozenset[str]] | None:
        """The words of each text that a search for ``query`` finds there, as the index
        matches them (see tokens.matched_words); None while there is no index to ask."""
        parts = self._parts()
        if not parts or not query.strip():
            return None
        cur = self.db.cursor()
        try:
            snapshots = [self._snapshot(cur, name, stamp) for name, stamp in parts]
        except duckdb.CatalogException:
            return None  # a merge swapped the snapshots meanwhile: the caller does without
        return matched_words(
            cur,
            self._stems,
            query,
            texts,
            _languages(snapshots),
            lambda term: any(s.lookup(term) is not None for s in snapshots),
        )

    def _snapshot(self, cur: duckdb.DuckDBPyConnection, name: str, stamp: str) -> _Snapshot:
        key = f"{name}@{stamp}"
        with self._lock:
            found = self._snapshots.get(key)
        if found is not None:
            return found
        schema = _schema(name)
        docs = cur.execute(f"SELECT docid, name, len FROM {schema}.docs").fetchnumpy()
        docid = np.asarray(docs["docid"], dtype=np.int64)
        size = int(docid.max()) + 1 if len(docid) else 0
        chunk_ids = np.zeros(size, dtype=np.int64)
        lengths = np.zeros(size, dtype=np.float64)
        chunk_ids[docid] = np.asarray(docs["name"], dtype=np.int64)
        lengths[docid] = np.asarray(docs["len"], dtype=np.float64)
        stats = cur.execute(f"SELECT num_docs, avgdl FROM {schema}.stats").fetchone()
        snapshot = _Snapshot(
            chunk_ids, lengths, int(stats[0]) if stats else 0, float(stats[1]) if stats else 0.0
        )
        terms = cur.execute(f"SELECT term, termid, df FROM {schema}.dict").fetchnumpy()
        hashes = np.fromiter((hash(t) for t in terms["term"]), dtype=np.int64)
        order = np.argsort(hashes, kind="stable")
        snapshot.term_hashes = hashes[order]
        snapshot.term_ids = np.asarray(terms["termid"], dtype=np.int64)[order]
        snapshot.term_dfs = np.asarray(terms["df"], dtype=np.int64)[order]
        del terms
        snapshot.languages = tuple(
            sorted(
                str(r[0])
                for r in cur.execute(f"SELECT lang FROM {ALIAS}.{name}_languages").fetchall()
            )
        )
        with self._lock:
            # Only the snapshots in use now stay cached (a base, a delta and a fresh one,
            # briefly the ones a switch replaced).
            if len(self._snapshots) >= 6:
                self._snapshots.clear()
            self._snapshots[key] = snapshot
        return snapshot

    def _search(
        self, query: str, limit: int, filters: SearchFilters, parts: list[tuple[str, str]]
    ) -> list[tuple[int, float]]:
        cur = self.db.cursor()
        key = (query, tuple(parts))
        last = self._last_scored
        if last is not None and last[0] == key:
            return self._best_live(cur, last[1], last[2], limit, filters)
        ids, scores = self._score(cur, query, parts)
        self._last_scored = (key, ids, scores)
        return self._best_live(cur, ids, scores, limit, filters)

    def _score(
        self, cur: duckdb.DuckDBPyConnection, query: str, parts: list[tuple[str, str]]
    ) -> tuple[np.ndarray, np.ndarray]:
        """Every chunk holding a query term, with its BM25 score (in no order)."""
        none = (np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float64))
        snapshots = [self._snapshot(cur, name, stamp) for name, stamp in parts]
        # Two small queries, not one join: DuckDB plans the join of the tokenized query
        # with the dictionaries poorly (10 ms against 3), and a literal list prunes.
        stems = self._stems.terms(cur, query, _languages(snapshots))
        if not stems:
            return none
        terms = self._lookup_terms(stems, snapshots)
        if not terms:
            return none
        # BM25 over the combined statistics of base and delta, so a chunk scores the same
        # wherever it sits.
        n = sum(s.num_docs for s in snapshots)
        avgdl = sum(s.avgdl * s.num_docs for s in snapshots) / n
        df: dict[str, int] = {}
        for _, term, _, term_df in terms:
            df[term] = df.get(term, 0) + int(term_df)
        idf = {t: math.log((n - d + 0.5) / (d + 0.5) + 1) for t, d in df.items()}
        wanted: list[dict[int, str]] = [{} for _ in parts]
        for part, term, termid, _ in terms:
            wanted[part][int(termid)] = term
        postings = self._fetch_postings(cur, parts, wanted)
        ids: list[np.ndarray] = []
        scores: list[np.ndarray] = []
        for i, snapshot in enumerate(snapshots):
            rows = postings[i]
            if not rows:
                continue
            norm = snapshot.length_norm(avgdl)
            acc = np.zeros(len(snapshot.chunk_ids), dtype=np.float64)
            # Terms in one fixed order for every chunk: equal inputs sum to equal scores,
            # so ties are broken by chunk id alone.
            for termid in sorted(rows, key=lambda t: wanted[i][t]):
                entry = rows[termid]
                acc[entry.doc] += entry.contribution(avgdl, idf[wanted[i][termid]], norm)
            hit = np.flatnonzero(acc)
            ids.append(snapshot.chunk_ids[hit])
            scores.append(acc[hit])
        if not ids:
            return none
        return np.concatenate(ids), np.concatenate(scores)

    def _fetch_postings(
        self,
        cur: duckdb.DuckDBPyConnection,
        parts: list[tuple[str, str]],
        wanted: list[dict[int, str]],
    ) -> list[dict[int, _Postings]]:
        """Per part, termid -> its postings, from the cache or DuckDB."""
        out: list[dict[int, _Postings]] = [{} for _ in parts]
        missing: list[list[int]] = [[] for _ in parts]
        with self._lock:
            for i, (_, stamp) in enumerate(parts):
                for termid in wanted[i]:
                    hit = self._postings_cache.get((stamp, termid))
                    if hit is None:
                        missing[i].append(termid)
                    else:
                        self._postings_cache.move_to_end((stamp, termid))
                        out[i][termid] = hit
        if not any(missing):
            return out
        rows = cur.execute(
            " UNION ALL ".join(
                f"SELECT {i} AS part, termid, docids, tfs FROM {_postings(name)} "
                f"WHERE termid IN ({id_list(sorted(missing[i]))})"
                for i, (name, _) in enumerate(parts)
                if missing[i]
            )
        ).fetchall()
        fetched: list[tuple[tuple[str, int], _Postings]] = []
        for part, termid, docids, tfs in rows:
            doc = np.frombuffer(docids, dtype="<u4")
            width = len(tfs) // len(doc)
            entry = _Postings(doc, np.frombuffer(tfs, dtype="<u1" if width == 1 else "<u2"))
            out[part][int(termid)] = entry
            fetched.append(((parts[part][1], int(termid)), entry))
        with self._lock:
            for key, entry in fetched:
                size = entry.nbytes
                if size > POSTINGS_CACHE_BYTES // 4 or key in self._postings_cache:
                    continue
                self._postings_cache[key] = entry
                self._postings_cached_bytes += size
            while self._postings_cached_bytes > POSTINGS_CACHE_BYTES:
                _, old = self._postings_cache.popitem(last=False)
                self._postings_cached_bytes -= old.nbytes
        return out

    @staticmethod
    def _lookup_terms(
        stems: list[str], snapshots: list[_Snapshot]
    ) -> list[tuple[int, str, int, int]]:
        """(part, term, termid, df) of every stem each snapshot's dictionary holds."""
        out: list[tuple[int, str, int, int]] = []
        for i, snapshot in enumerate(snapshots):
            for term in stems:
                entry = snapshot.lookup(term)
                if entry is not None:
                    out.append((i, term, entry[0], entry[1]))
        return out

    def _best_live(
        self,
        cur: duckdb.DuckDBPyConnection,
        ids: np.ndarray,
        scores: np.ndarray,
        limit: int,
        filters: SearchFilters,
    ) -> list[tuple[int, float]]:
        """The best ``limit`` of the scored chunks whose document is indexed and inside
        ``filters``: candidates are checked best first, in growing rounds, so the result
        is the top-k of the live, filtered chunks, not of all of them."""
        filter_sql, filter_params = filter_clause(filters)
        # Unfiltered in a library that is not changing: live chunks by id, held per
        # generation; otherwise the candidates are checked by id, best first.
        mask = None if filter_sql else self._live_chunks.mask()
        if mask is not None:
            keep = ids < len(mask)
            keep[keep] = mask[ids[keep]]
            kept_ids, kept_scores = ids[keep], scores[keep]
            ranked = _ranked(kept_ids, kept_scores, limit)[:limit]
            return [(int(kept_ids[j]), float(kept_scores[j])) for j in ranked]
        found: list[tuple[int, float]] = []
        checked = 0
        want = limit + FIRST_CHECK_EXTRA
        while checked < len(ids):
            if want > MAX_CHECKED_BY_ID:
                # Most candidates are dead or filtered out: list what is allowed instead.
                allowed = self._allowed(cur, filter_sql, filter_params)
                keep = np.isin(ids, allowed)
                kept_ids, kept_scores = ids[keep], scores[keep]
                ranked = _ranked(kept_ids, kept_scores, limit)[:limit]
                return [(int(kept_ids[j]), float(kept_scores[j])) for j in ranked]
            order = _ranked(ids, scores, want)
            batch = order[checked:]
            live = self._live(cur, ids[batch], filter_sql, filter_params)
            found.extend((int(ids[j]), float(scores[j])) for j in batch if int(ids[j]) in live)
            if len(found) >= limit:
                break
            checked = len(order)
            want *= 8
        return found[:limit]

    @staticmethod
    def _live(
        cur: duckdb.DuckDBPyConnection,
        chunk_ids: Sequence[int],
        filter_sql: str,
        filter_params: list[object],
    ) -> set[int]:
        rows = cur.execute(
            f"""SELECT c.id FROM chunks c JOIN documents d ON d.id = c.document_id
                WHERE c.id IN ({id_list(chunk_ids)}) AND d.state = 'indexed'
                {("AND " + filter_sql) if filter_sql else ""}""",
            filter_params,
        ).fetchall()
        return {int(r[0]) for r in rows}

    @staticmethod
    def _allowed(
        cur: duckdb.DuckDBPyConnection, filter_sql: str, filter_params: list[object]
    ) -> np.ndarray:
        rows = cur.execute(
            f"""SELECT c.id FROM chunks c JOIN documents d ON d.id = c.document_id
                WHERE d.state = 'indexed' {("AND " + filter_sql) if filter_sql else ""}""",
            filter_params,
        ).fetchnumpy()
        return np.asarray(rows["id"], dtype=np.int64)


def _ranked(ids: np.ndarray, scores: np.ndarray, at_least: int) -> np.ndarray:
    """Positions of the best ``at_least`` (score descending, then chunk id), with every
    chunk tied with the last of them, so a cut never splits a tie arbitrarily."""
    if len(scores) > at_least:
        cut = np.partition(scores, len(scores) - at_least)[len(scores) - at_least]
        pick = np.flatnonzero(scores >= cut)
    else:
        pick = np.arange(len(scores))
    return pick[np.lexsort((ids[pick], -scores[pick]))]
