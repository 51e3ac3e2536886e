"""Query words stemmed in-process (PyStemmer's Porter) are the terms fts indexes a passage's
words as: a word stemmed differently would never meet its passages."""

from __future__ import annotations

import re
from pathlib import Path

import duckdb

from core.store.db import fts_extension_path
from core.store.keyword.tokens import QueryStems, term_sql

REPO = Path(__file__).resolve().parents[2]
# Suffixes Porter treats specially, and words that are not words.
AWKWARD = " ".join(
    (
        "caresses ponies ties caress cats feed agreed plastered bled motoring sing conflated "
        "troubled sized hopping tanned falling hissing fizzed failing filing happy sky "
        "relational conditional rational valenci hesitanci digitizer conformabli radicalli "
        "differentli vileli analogousli vietnamization predication operator feudalism "
        "decisiveness hopefulness callousness formaliti sensitiviti sensibiliti triplicate "
        "formative formalize electriciti electrical hopeful goodness revival allowance "
        "inference airliner gyroscopic adjustable defensible irritant replacement adjustment "
        "dependent adoption homologou communism activate angulariti homologous effective "
        "bowdlerize probate rate cease controll roll generalizations oscillators y ys yy "
        "a i 0 42 3d 1990s covid19 h2o x86 mcas aoa b737 e2e ok ooo zzz",
    )
).split()


def test_in_process_porter_stems_are_the_indexs_terms() -> None:
    words = set(AWKWARD)
    for path in [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]:
        words.update(re.findall(r"[a-z0-9]+", path.read_text(encoding="utf-8").lower()))
    words_list = sorted(words)
    assert len(words_list) > 3000
    con = duckdb.connect()
    con.execute(f"LOAD '{fts_extension_path()}'")
    expected = dict(
        con.execute(
            f"SELECT w, {term_sql('w')} FROM (SELECT unnest(?::VARCHAR[]) AS w)", [words_list]
        ).fetchall()
    )
    stems = QueryStems()
    # ``stems`` asks DuckDB only for what it cannot stem itself: a connection that
    # fails every statement proves these came from the process.
    got = stems.stems(_Refuses(), [(w, "") for w in words_list])
    wrong = {w: (got[(w, "")], expected[w]) for w in words_list if got[(w, "")] != expected[w]}
    assert not wrong


class _Refuses:
    def execute(self, *args: object, **kwargs: object) -> None:
        raise AssertionError("an ASCII word's stem was asked of the database")
