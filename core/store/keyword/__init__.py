"""BM25 keyword search over chunks with DuckDB's ``fts`` extension, updated incrementally.

The keyword index lives in a DuckDB file of its own, as snapshots over ``chunks`` (a
rarely rebuilt base, a delta and a fresh one). One module a job:

- ``tokens``: how passages and queries become terms (the fts tokenizer, the stemmers
  of other scripts and Latin-script languages, ASCII queries tokenized in Python);
- ``upkeep``: the file and its snapshots: opening (set aside and rebuilt when damaged),
  refreshes, background base rebuilds, postings carried over from the snapshot replaced;
- ``scoring``: BM25 at query time over the snapshots' postings, with the combined
  statistics, liveness and filters checked on the best candidates.

``KeywordIndex`` composes the last two: upkeep says which snapshots are current, the
scorer reads them.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from core.records import SearchFilters
from core.store.db import Database
from core.store.keyword.scoring import KeywordScorer
from core.store.keyword.upkeep import KeywordState, KeywordUpkeep
from core.store.lookup import LiveChunks

__all__ = ["KeywordIndex", "KeywordState"]


class KeywordIndex:
    """``path`` None keeps the index in memory (a library in memory, in tests)."""

    def __init__(
        self,
        db: Database,
        path: Path | None = None,
        *,
        stale: bool = False,
        live: LiveChunks | None = None,
    ) -> None:
        """``stale``: the file was built from a database that is gone (see
        KeywordUpkeep._check_format); ``live``: the library's map of live chunks, shared
        with its meaning search."""
        self.upkeep = KeywordUpkeep(db, path, stale=stale)
        # The state is read per query (cached by upkeep until the next change), so a
        # switch of snapshots reaches the very next search.
        self.scorer = KeywordScorer(db, lambda: self.upkeep.state().parts(), live or LiveChunks(db))

    @property
    def db(self) -> Database:
        return self.upkeep.db

    @property
    def path(self) -> Path | None:
        return self.upkeep.path

    @property
    def recovery(self) -> str:
        """What happened to the file at open ("" when it opened as it was): "rebuilding",
        "upgrading" or "unavailable" (a read-only library's unusable file)."""
        return self.upkeep.recovery

    @property
    def kept_at(self) -> Path | None:
        """The name a damaged file was set aside under."""
        return self.upkeep.kept_at

    @property
    def merging(self) -> bool:
        return self.upkeep.merging

    def state(self) -> KeywordState:
        return self.upkeep.state()

    def status(self) -> str:
        return self.upkeep.status()

    def is_current(self) -> bool:
        return self.upkeep.is_current()

    def delta_size(self) -> int:
        return self.upkeep.delta_size()

    def checkpoint(self) -> bool:
        return self.upkeep.checkpoint()

    def refresh(self, *, force_merge: bool = False, background: bool = False) -> str:
        return self.upkeep.refresh(force_merge=force_merge, background=background)

    def wait_for_merge(self) -> None:
        """Wait until a keyword index being rebuilt in the background (after an upgrade
        of its format, or damage) is switched in."""
        self.upkeep.wait_for_merge()

    def close(self) -> None:
        self.upkeep.close()

    def search(
        self, query: str, limit: int, *, filters: SearchFilters | None = None
    ) -> list[tuple[int, float]]:
        """Chunk ids and BM25 scores, best first (ties by chunk id), inside ``filters``."""
        return self.scorer.search(query, limit, filters=filters)

    def matched_words(self, query: str, texts: Sequence[str]) -> list[frozenset[str]] | None:
        """The words (lower-cased) of each of ``texts`` that a search for ``query`` finds
        there, stemmed in the text's language as its passage was: what a result lights.
        None while there is no index to ask."""
        return self.scorer.matched_words(query, texts)
