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

The prior itself is calibrated per library, from the library's own questions
(``LibraryCalibration``): where the share of its questions on which the meaning list was
the surer one (``cd > cb``) is above ``tilt_reference``, it lowers the prior's odds by
``(reference odds / library odds) ^ tilt``. No label is needed, and the share says what
the per-query confidences alone cannot: on a library of paraphrased questions over
passages that share their words (web answers, entity abstracts), meaning search is the
surer list on three questions in four and keyword search is weak but not empty, so a
question where BM25 happens to look surer is still better left mostly to dense; on SciFact
it is one in four. A new library's record is ``tilt_pseudo_questions`` imaginary questions
at the reference share, so its first answers use the plain prior.

The constants are chosen per embedding model (its dense list is what the weight balances),
each with bench/retrieval_tune.py on training data only: the ``FusionParams`` defaults,
for the default model, on the SciFact *train* split (the tilt with Lectern's own English,
German, Italian, Portuguese and Dutch sets added); ``MODEL_FUSION``'s on SciFact train and
Lectern's own sets together. docs/decisions/retrieval-fusion.md has the figures.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from collections.abc import Set as AbstractSet
from contextlib import contextmanager
from dataclasses import dataclass, replace
from types import MappingProxyType

from core.embedding.models import MULTILINGUAL_MODEL_ID

Ranked = Sequence[tuple[int, float]]


@dataclass(frozen=True)
class FusionParams:
    bm25_prior: float = 0.35
    confidence_power: float = 3.0
    depth: int = 100  # documents per list that are normalised and fused
    # The library's record of which list was surer tilts the prior (0: it does not).
    library_tilt: float = 2.0
    tilt_reference: float = 0.3  # the share of meaning-surer questions that leaves the prior
    tilt_pseudo_questions: float = 10.0  # a new library's record, all at the reference
    tilt_share_cap: float = 0.95  # a record is never taken as certain


# multilingual-e5's dense list is far stronger than BM25 on paraphrased questions in
# other languages and weaker on English science. Its constants, the calibration's
# included, are the setting whose hybrid is furthest above its best single mode on the
# worst of its training sets (SciFact train and bench/retrieval_sets' Russian, German,
# Italian, Portuguese, Dutch, English and Arabic), ties by mean, each set's score the
# mean over ten orders of its questions (bench/retrieval_tune.py joint --orders 10): the
# record learns question by question, and the setting chosen on each set's own order
# alone (prior 0.25) lost to dense by up to 0.011 (Russian) when the same questions came
# in other orders. Its reference share is higher than the default model's: e5's meaning
# list is the surer one on 37 % of SciFact's questions (MiniLM's: 26 %) and on 50-80 % of
# the paraphrase sets', so 0.4 is what tells the two kinds apart; a tilt at 0.3 had cost
# SciFact train 0.029 (0.703 -> 0.673, under its BM25 0.689). Three pseudo questions let
# a paraphrase library's first questions lean on meaning sooner.
MODEL_FUSION: dict[str, FusionParams] = {
    MULTILINGUAL_MODEL_ID: FusionParams(
        bm25_prior=0.15,
        confidence_power=2.0,
        library_tilt=3.0,
        tilt_reference=0.4,
        tilt_pseudo_questions=3.0,
    ),
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


@dataclass(frozen=True)
class SurerList:
    """A library's record: of its hybrid questions, on how many the meaning list was the
    surer of the two."""

    questions: int = 0
    meaning_surer: int = 0

    def to_text(self) -> str:
        return f"{self.questions} {self.meaning_surer}"

    @classmethod
    def from_text(cls, text: str | None) -> SurerList:
        """The record as stored; an unreadable one (hand-edited, truncated) is a new one:
        it is derived, and the prior it tilts has a safe default."""
        try:
            questions, meaning_surer = (int(x) for x in (text or "").split())
        except ValueError:
            return cls()
        if questions < 0 or not 0 <= meaning_surer <= questions:
            return cls()
        return cls(questions, meaning_surer)


def calibrated_prior(params: FusionParams, record: SurerList) -> float:
    """``params.bm25_prior`` tilted by the library's record (see the module's text)."""
    if not params.library_tilt:
        return params.bm25_prior
    ref, pseudo = params.tilt_reference, params.tilt_pseudo_questions
    share = (record.meaning_surer + pseudo * ref) / (record.questions + pseudo)
    # Only ever towards meaning: where keyword search is the surer list, the per-query
    # confidences already give it the say (raising the prior there cost the Italian and
    # Portuguese training sets in the replay, docs/decisions/retrieval-fusion.md).
    if share <= ref:
        return params.bm25_prior
    share = min(share, params.tilt_share_cap)
    odds = params.bm25_prior / (1.0 - params.bm25_prior)
    odds *= ((ref / (1.0 - ref)) / (share / (1.0 - share))) ** params.library_tilt
    return float(odds / (1.0 + odds))


class LibraryCalibration:
    """The library's ``SurerList``, updated by each hybrid question and handed to
    ``save`` every ``save_every`` questions (and by ``flush``). Thread-safe: the app's
    searches and answers run on worker threads."""

    def __init__(
        self,
        record: SurerList | None = None,
        save: Callable[[SurerList], None] | None = None,
        save_every: int = 5,
    ) -> None:
        self._record = record or SurerList()
        self._save = save
        self._save_every = save_every
        self._unsaved = 0
        self._paused = 0
        self._lock = threading.Lock()

    @property
    def record(self) -> SurerList:
        return self._record

    def prior(self, params: FusionParams) -> float:
        return calibrated_prior(params, self._record)

    def observe(self, bm25_confidence: float, dense_confidence: float) -> None:
        with self._lock:
            if self._paused:
                return
            self._record = SurerList(
                self._record.questions + 1,
                self._record.meaning_surer + (dense_confidence > bm25_confidence),
            )
            self._unsaved += 1
            due = self._unsaved >= self._save_every
        if due:
            self.flush()

    def flush(self) -> None:
        with self._lock:
            if not self._unsaved or self._save is None:
                return
            record, self._unsaved = self._record, 0
        self._save(record)

    def reset(self) -> None:
        """Back to a new library's record (evaluations start from it, to be repeatable)."""
        with self._lock:
            self._record, self._unsaved = SurerList(), 0
        if self._save is not None:
            self._save(SurerList())

    @contextmanager
    def paused(self) -> Iterator[None]:
        """Questions asked meanwhile are not the user's (the library check's made-up
        ones): they leave the record as it is."""
        with self._lock:
            self._paused += 1
        try:
            yield
        finally:
            with self._lock:
                self._paused -= 1


def bm25_share(
    bm25_confidence: float,
    dense_confidence: float,
    params: FusionParams,
    prior: float | None = None,
) -> float:
    """The weight of BM25 for this query (dense gets the rest); ``prior`` instead of
    ``params.bm25_prior`` (the library's calibrated one)."""
    prior = params.bm25_prior if prior is None else prior
    p = params.confidence_power
    wb = prior * (bm25_confidence**p if p else 1.0)
    wd = (1.0 - prior) * (dense_confidence**p if p else 1.0)
    if wb + wd <= 0.0:
        return prior
    return wb / (wb + wd)


def fuse(
    bm25_docs: Ranked,
    dense_docs: Ranked,
    params: FusionParams | None = None,
    keyword_only: AbstractSet[int] = frozenset(),
    *,
    prior: float | None = None,
    observe: Callable[[float, float], None] | None = None,
) -> list[tuple[int, float]]:
    """Fused (document, score), best first. Either list may be empty (then the other
    one's order is kept). ``prior``: the library's calibrated BM25 prior, instead of
    ``params.bm25_prior``; ``observe`` is told both lists' confidences (BM25, dense) when
    both found something.

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
    if observe is not None:
        observe(cb, cd)
    share = bm25_share(cb, cd, params, prior)
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
    calibration: LibraryCalibration | None = None


Fusion = Callable[[Ranked, Ranked, FusionContext], list[tuple[int, float]]]


def _adaptive(
    bm25_docs: Ranked, dense_docs: Ranked, context: FusionContext
) -> list[tuple[int, float]]:
    params, calibration = context.params, context.calibration
    first = [doc for doc, _ in bm25_docs[: params.depth]]
    keyword_only = context.keyword_only(first)
    if calibration is None:
        return fuse(bm25_docs, dense_docs, params, keyword_only)
    # While the library is being embedded the meaning list is partial: which list was
    # surer then says nothing of the library.
    observe = None if keyword_only else calibration.observe
    prior = calibration.prior(params)
    return fuse(bm25_docs, dense_docs, params, keyword_only, prior=prior, observe=observe)


def _rrf(bm25_docs: Ranked, dense_docs: Ranked, context: FusionContext) -> list[tuple[int, float]]:
    return rrf_fuse([[d for d, _ in bm25_docs], [d for d, _ in dense_docs]], context.rrf_k)


# A new fusion is a function of this shape and one row here.
FUSIONS: Mapping[str, Fusion] = MappingProxyType({"adaptive": _adaptive, "rrf": _rrf})
