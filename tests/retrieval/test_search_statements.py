"""What a search asks the database. On a library that is not changing, which document each
candidate belongs to, whether it is live, which documents wait for their vectors and the
stems of an English question's words and the paths and titles of its documents are held
in the process (core/store/lookup.py LiveChunks, core/store/keyword/tokens.py), so a hybrid
search reads only postings, word pieces and its hits' chunks; the answers are those the
database gives."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from core.store.lookup import (
    LiveChunks,
    hits_for,
    live_chunk_documents,
    unembedded_documents,
)

QUESTIONS = [
    "How much may be spent on a hotel night?",
    "Who approves travel outside the country?",
    "What does error code E1042 mean?",
    "How long is an on-call shift?",
    "Which passwords are allowed by the security policy?",
    "When must expenses be submitted?",
]


class _Recording:
    """A cursor that notes each statement it runs."""

    def __init__(self, cursor: Any, seen: list[str]) -> None:
        self._cursor, self._seen = cursor, seen

    def execute(self, sql: str, *args: Any) -> Any:
        self._seen.append(sql)
        return self._cursor.execute(sql, *args)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._cursor, name)


def test_a_quiet_librarys_hybrid_search_asks_only_for_postings_pieces_and_hits(
    library: Any, sample_folder: Path, monkeypatch: Any
) -> None:
    library.index([sample_folder])
    before = {q: library.search(q, k=6, mode="hybrid") for q in QUESTIONS}
    seen: list[str] = []
    real = library.db.cursor
    monkeypatch.setattr(library.db, "cursor", lambda: _Recording(real(), seen))
    for question in QUESTIONS:
        seen.clear()
        again = library.search(question + " please", k=6, mode="hybrid")
        assert again  # the question's words, plus one no question had before
        asked = "\n".join(seen)
        assert "stem(" not in asked
        assert "d.state = 'indexed'" not in asked  # the liveness join
        assert len(seen) <= 3, asked  # postings, word pieces, the hits' chunks
        assert "JOIN documents" not in asked  # their paths and titles are held
        assert "embedding IS NULL" not in asked
    monkeypatch.undo()
    # Held in the process or asked of the database, a search finds the same.
    assert {q: library.search(q, k=6, mode="hybrid") for q in QUESTIONS} == before


def test_the_held_map_answers_as_the_database_does_and_follows_changes(
    library: Any, sample_folder: Path
) -> None:
    library.index([sample_folder])
    db = library.db
    live = LiveChunks(db)
    chunks = [int(r[0]) for r in db.cursor().execute("SELECT id FROM chunks").fetchall()]
    documents = sorted(
        {int(r[0]) for r in db.cursor().execute("SELECT id FROM documents").fetchall()}
    )
    probe = [*chunks, max(chunks) + 10, -1]
    for _ in range(LiveChunks.BUILD_AFTER):
        assert live.documents_of(probe) == live_chunk_documents(db, probe)
    assert live.mask() is not None  # held now
    assert live.documents_of(probe) == live_chunk_documents(db, probe)
    # A document being replaced is no longer live; one whose vectors were dropped waits.
    gone, waiting = documents[0], documents[1]
    with db.transaction() as cur:
        cur.execute("UPDATE documents SET state = 'removing' WHERE id = ?", [gone])
        cur.execute("UPDATE chunks SET embedding = NULL WHERE document_id = ?", [waiting])
    for _ in range(LiveChunks.BUILD_AFTER + 1):
        assert live.documents_of(probe) == live_chunk_documents(db, probe)
        assert live.unembedded(documents) == unembedded_documents(db, documents) == {waiting}
    assert live.mask() is not None
    assert gone not in set(live.documents_of(probe).values())
    # Hits read with the held paths and titles are those the join gives, and a retitled
    # document's hits carry its new title.
    assert hits_for(db, chunks, live) == hits_for(db, chunks)
    retitled = documents[2]
    with db.transaction() as cur:
        cur.execute("UPDATE documents SET title = 'Renamed here' WHERE id = ?", [retitled])
    for _ in range(LiveChunks.BUILD_AFTER + 1):
        found = hits_for(db, chunks, live)
        assert found == hits_for(db, chunks)
        assert {h.title for h in found.values() if h.document_id == retitled} == {"Renamed here"}
    assert live.document_rows() is not None
