"""Stop words of the other languages the keyword index stems (German, French, ...):
fts drops only English ones, so a German passage's "die" and "ist" are terms, and a
query's "die" met every German passage. The query leaves them out where the library
holds such passages, unless it is nothing else; and the words a result lights are the
ones the index matched, stemmed in the passage's own language.

Real DuckDB files, real fts, documents written through the store layer."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.store.db import Database
from core.store.keyword import KeywordIndex
from tests.store.test_keyword_postings import add_documents

GERMAN_NOTICE = (
    "Die Kündigungsfrist für Mitarbeitern ist vier Wochen zum Monatsende, und die "
    "Kündigung muss schriftlich erfolgen."
)
GERMAN_HOLIDAY = "Der Urlaub beträgt dreißig Tage im Jahr, die Übertragung ist möglich."
ENGLISH_CARD = (
    "The monthly limits of the corporate card are reviewed every year; expenses are "
    "reimbursed within ten days."
)
ENGLISH_PLANTS = "Without water the seedlings die within a week."


@pytest.fixture()
def keyword(tmp_path: Path):
    db = Database(tmp_path / "lectern.duckdb")
    kw = KeywordIndex(db, tmp_path / "keyword.duckdb")
    doc_ids = add_documents(
        db, [[GERMAN_NOTICE], [GERMAN_HOLIDAY], [ENGLISH_CARD], [ENGLISH_PLANTS]], "/lib"
    )
    assert kw.refresh(force_merge=True) == "merged"
    chunk_doc = dict(db.cursor().execute("SELECT id, document_id FROM chunks").fetchall())
    yield kw, {chunk: doc_ids.index(doc) for chunk, doc in chunk_doc.items()}
    db.close()


def found(kw: KeywordIndex, passage_of: dict[int, int], query: str) -> list[int]:
    return sorted(passage_of[chunk] for chunk, _ in kw.search(query, 10))


def test_german_stop_words_in_a_query_match_no_passage(keyword) -> None:
    kw, passage_of = keyword
    # The index does hold them for German passages (fts drops English ones only) ...
    assert found(kw, passage_of, "die der und") == [0, 1, 3]
    # ... so with a word beside them they are left out of the query: "die" and "ist"
    # no longer bring in the holiday passage, nor "die" the English plants.
    assert found(kw, passage_of, "die Kündigungsfrist ist") == [0]
    assert found(kw, passage_of, "Urlaub der Mitarbeiter") == [0, 1]


def test_a_library_without_german_searches_the_word_as_before(tmp_path: Path) -> None:
    db = Database(tmp_path / "lectern.duckdb")
    kw = KeywordIndex(db, tmp_path / "keyword.duckdb")
    add_documents(db, [[ENGLISH_PLANTS], [ENGLISH_CARD]], "/lib")
    assert kw.refresh(force_merge=True) == "merged"
    try:
        assert len(kw.search("plants die", 10)) == 1
        # English stop words alone find nothing by keyword, as before.
        assert kw.search("to be or not to be", 10) == []
    finally:
        db.close()


def test_the_words_a_result_lights_are_the_ones_the_index_matched(keyword) -> None:
    kw, _ = keyword
    texts = [GERMAN_NOTICE, GERMAN_HOLIDAY, ENGLISH_CARD, ENGLISH_PLANTS]
    lit = kw.matched_words("die Mitarbeiter Kündigung", texts)
    assert lit is not None
    # German stems ("Mitarbeitern" is "Mitarbeiter"), no article, and nothing in the
    # English passages for the German "die" left out of the query.
    assert lit[0] == {"mitarbeitern", "kündigung"}
    assert lit[1] == set() and lit[3] == set()
    # Porter's stems, whichever form the passage has ("reimbursed"), and no stop words.
    assert kw.matched_words("limit reimbursement of the card", texts) == [
        set(),
        set(),
        {"limits", "reimbursed", "card"},
        set(),
    ]
    # A query of stop words alone found its passages by them: they are lit there.
    alone = kw.matched_words("die der", texts)
    assert alone is not None and alone[1] == {"der", "die"}
