"""Keyword search over packed postings returns what the full fts join returned.

The shipped search reads only the postings of the query's terms and checks liveness and
filters on the best candidates by id. The reference here is the query it replaced (the
stemmed query terms joined with fts's one-row-per-token ``terms`` table, then with the
live ``chunks`` and ``documents``), run over fts indexes of its own built with the same
``create_fts_index`` settings over the same base/delta split. Libraries are real DuckDB
files holding real SciFact sentences, written through the store layer.
"""

from __future__ import annotations

import itertools
import json
import os
import random
import threading
import time
from pathlib import Path

import numpy as np
import pytest

import core.store.keyword.scoring as scoring_module
import core.store.keyword.tokens as tokens_module
import core.store.keyword.upkeep as upkeep_module
from bench.keyword_scale import legacy_search
from core.records import SearchFilters
from core.store.db import Database
from core.store.keyword import KeywordIndex
from core.store.keyword.tokens import fts_pragma, snapshot_rows_sql
from core.text import split_sentences

CHUNKS_PER_DOC = 12


@pytest.fixture(scope="module")
def sentences(shared_data: Path) -> list[str]:
    out: list[str] = []
    with open(shared_data / "scifact" / "corpus.jsonl", encoding="utf-8") as handle:
        for line in handle:
            text = json.loads(line)["text"]
            out.extend(text[s:e] for s, e in split_sentences(text) if 20 < e - s < 400)
            if len(out) > 6_000:
                break
    return out


@pytest.fixture(scope="module")
def queries(shared_data: Path) -> list[str]:
    """SciFact *train* queries (never the test split)."""
    with open(shared_data / "scifact" / "qrels" / "train.tsv", encoding="utf-8") as handle:
        next(handle)
        ids = {line.split("\t")[0] for line in handle if line.strip()}
    out = []
    with open(shared_data / "scifact" / "queries.jsonl", encoding="utf-8") as handle:
        for line in handle:
            row = json.loads(line)
            if row["_id"] in ids:
                out.append(row["text"])
    random.Random(3).shuffle(out)
    return out[:40]


def add_documents(db: Database, texts: list[list[str]], folder: str, kind: str = "md") -> list[int]:
    """One document per list of chunk texts; returns the document ids."""
    doc_ids = []
    with db.transaction() as cur:
        for chunks in texts:
            doc_id = int(cur.execute("SELECT nextval('document_ids')").fetchone()[0])  # type: ignore[index]
            doc_ids.append(doc_id)
            cur.execute(
                """INSERT INTO documents(id, path, folder, size, mtime, content_hash, type,
                       title, state, chunks)
                   VALUES (?, ?, ?, 0, 0, ?, ?, ?, 'indexed', ?)""",
                [
                    doc_id,
                    f"{folder}/doc-{doc_id}.{kind}",
                    folder,
                    f"h{doc_id}",
                    kind,
                    f"Notes {doc_id}",
                    len(chunks),
                ],
            )
            for ordinal, text in enumerate(chunks):
                cur.execute(
                    """INSERT INTO chunks(document_id, ordinal, text, context, start_char,
                           end_char, heading_path, token_count, embedding)
                       VALUES (?, ?, ?, ?, 0, ?, '[]', 0, NULL)""",
                    [doc_id, ordinal, text, f"Notes {doc_id} > Finding {ordinal}", len(text)],
                )
        version = int(db.get_meta("content_version", "0") or 0) + 1
        db.set_meta("content_version", str(version), cur)
    return doc_ids


def random_docs(rng: random.Random, pool: list[str], docs: int) -> list[list[str]]:
    return [
        [" ".join(rng.sample(pool, rng.randint(2, 6))) for _ in range(CHUNKS_PER_DOC)]
        for _ in range(docs)
    ]


def build_reference(db: Database, watermark: int, base_from: str = "") -> None:
    """fts indexes with their ``terms`` tables over the base/delta split at ``watermark``.
    A snapshot counts the chunks it was built over, deleted since or not, so the base's
    rows come from ``base_from`` (a copy taken when the base was built) when given."""
    cur = db.new_cursor()
    cur.execute("USE ref")
    live = f'"{db.catalog}".main.chunks'
    for name, source, where in (
        ("ref_base", base_from or live, "id <= ?"),
        ("ref_delta", live, "id > ?"),
    ):
        cur.execute(
            f"CREATE OR REPLACE TABLE {name} AS " + snapshot_rows_sql(source, where), [watermark]
        )
        if cur.execute(f"SELECT count(*) FROM {name}").fetchone()[0]:  # type: ignore[index]
            cur.execute(fts_pragma(name))
        else:
            cur.execute(f"DROP SCHEMA IF EXISTS fts_main_{name} CASCADE")
    cur.close()


def reference_search(
    db: Database, query: str, limit: int, filters: SearchFilters | None = None
) -> list[tuple[int, float]]:
    """The query the postings search replaced, over the reference indexes."""
    return legacy_search(db, query, limit, filters, catalog="ref")


def assert_same(got: list[tuple[int, float]], want: list[tuple[int, float]]) -> None:
    """Same ids in the same order, scores within 1e-6. Chunks whose scores tie (to 1e-9)
    may come in either order in the reference (it sums in no fixed order), and a tie at
    the cut may keep either; the postings search breaks ties by chunk id."""
    assert len(got) == len(want)
    for (_, a), (_, b) in zip(got, want, strict=True):
        assert abs(a - b) <= 1e-6
    last = want[-1][1] if want else 0.0
    for (g, s), (w, _) in zip(got, want, strict=True):
        if g != w and abs(s - last) > 1e-9:
            assert {i for i, x in got if abs(x - s) <= 1e-9} == {
                i for i, x in want if abs(x - s) <= 1e-9
            }
    for (a, sa), (b, sb) in itertools.pairwise(got):
        assert sa > sb or (sa == sb and a < b)


@pytest.fixture()
def store(tmp_path: Path, sentences: list[str], monkeypatch: pytest.MonkeyPatch):
    """A library of base, delta and fresh snapshots: two folders, two types, dead chunks,
    a duplicate."""
    # Small snapshots fold as large ones do: the first refresh after the merge builds the
    # delta, the second (fewer chunks than the delta) only the fresh snapshot.
    monkeypatch.setattr(upkeep_module, "FRESH_MIN_FOLD", 0)
    db = Database(tmp_path / "lectern.duckdb")
    db.attach(tmp_path / "reference.duckdb", "ref")
    kw = KeywordIndex(db, tmp_path / "keyword.duckdb")
    rng = random.Random(5)
    base_docs = random_docs(rng, sentences, 30)
    base_docs.append(list(base_docs[0]))  # the same text twice: tied scores
    add_documents(db, base_docs[:20], "/lib/a", "md")
    removed = add_documents(db, base_docs[20:], "/lib/b", "txt")
    assert kw.refresh(force_merge=True) == "merged"
    add_documents(db, random_docs(rng, sentences, 4), "/lib/a", "txt")
    assert kw.refresh() == "delta"
    assert kw.state().delta and not kw.state().fresh
    add_documents(db, random_docs(rng, sentences, 2), "/lib/b", "txt")
    assert kw.refresh() == "delta"
    db.cursor().execute("CREATE TABLE ref.base_rows AS SELECT * FROM chunks")
    with db.transaction() as cur:
        # A document being removed, and one whose old chunks were replaced.
        cur.execute("UPDATE documents SET state = 'removing' WHERE id = ?", [removed[0]])
        cur.execute("DELETE FROM chunks WHERE document_id = ? AND ordinal < 6", [removed[1]])
    state = kw.state()
    assert state.base and state.delta and state.fresh
    build_reference(db, state.watermark, "ref.base_rows")
    yield db, kw
    kw.close()
    db.close()


FILTERS = [
    None,
    SearchFilters(folders=("/lib/a",)),
    SearchFilters(types=("txt",)),
    SearchFilters(folders=("/lib/b",), types=("txt",)),
]


def test_same_results_as_the_fts_join(store, queries: list[str]) -> None:
    db, kw = store
    matched = 0
    for i, query in enumerate(queries):
        for limit in (1, 10, 60):
            filters = FILTERS[i % len(FILTERS)]
            got = kw.search(query, limit, filters=filters)
            assert_same(got, reference_search(db, query, limit, filters))
            matched += bool(got)
    assert matched > len(queries)  # the queries do find passages


def test_tied_chunks_come_in_chunk_id_order(store) -> None:
    db, kw = store
    text = db.cursor().execute("SELECT text FROM chunks ORDER BY id LIMIT 1").fetchone()[0]
    got = kw.search(text, 4)
    want = reference_search(db, text, 4)
    assert_same(got, want)
    # The first document's chunk and its duplicate's score the same; the lower id leads.
    assert abs(got[0][1] - got[1][1]) <= 1e-9 and got[0][0] < got[1][0]


def test_dead_and_filtered_candidates_are_skipped_in_rounds(
    store, queries: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """With a first round of only ``limit`` candidates and a low cap on id checks, most
    queries need more rounds or the list of allowed chunks; the top-k stays exact."""
    db, kw = store
    monkeypatch.setattr(scoring_module, "FIRST_CHECK_EXTRA", 0)
    monkeypatch.setattr(scoring_module, "MAX_CHECKED_BY_ID", 40)
    for query in queries[:15]:
        for filters in FILTERS[1:]:
            assert_same(
                kw.search(query, 5, filters=filters), reference_search(db, query, 5, filters)
            )


def test_absent_terms_and_empty_queries(store, queries: list[str]) -> None:
    db, kw = store
    assert kw.search("zzqxvvt plorbification", 10) == []
    assert kw.search("", 10) == [] and kw.search("   ", 10) == []
    assert kw.search("the of and", 10) == []  # stopwords only: nothing in the dictionary
    assert kw.search("!!! ...", 10) == []
    mixed = f"zzqxvvt {queries[0]}"
    got = kw.search(mixed, 10)
    assert got and got == kw.search(queries[0], 10)
    assert_same(got, reference_search(db, mixed, 10))


def test_same_results_while_a_merge_is_in_progress(
    store, sentences: list[str], queries: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    db, kw = store
    monkeypatch.setattr(upkeep_module, "MERGE_MIN_CHUNKS", 0)
    monkeypatch.setattr(upkeep_module, "MERGE_FRACTION", 0.0)
    building, release = threading.Event(), threading.Event()
    build = kw.upkeep._build

    def held_build(cur: object, name: str, where: str, params: list[object]) -> None:
        if name.startswith("kw_base"):
            building.set()
            assert release.wait(60)
        build(cur, name, where, params)

    monkeypatch.setattr(kw.upkeep, "_build", held_build)
    add_documents(db, random_docs(random.Random(9), sentences, 3), "/lib/a")
    try:
        assert kw.refresh(background=True) == "merging"
        assert building.wait(30) and kw.merging
        state = kw.state()
        build_reference(db, state.watermark, "ref.base_rows")  # the old base, a new delta
        for query in queries[:10]:
            assert_same(kw.search(query, 10), reference_search(db, query, 10))
    finally:
        release.set()
    kw.wait_for_merge()
    state = kw.state()
    assert state.delta is None and kw.delta_size() == 0
    build_reference(db, state.watermark)
    for query in queries[:10]:
        assert_same(kw.search(query, 10), reference_search(db, query, 10))


def test_a_refresh_rebuilds_only_the_newest_chunks(
    store, sentences: list[str], queries: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A refresh indexes the chunks written since the delta was last folded, not the
    whole delta, which grows to a tenth of the library before a merge (30,000 chunks and
    ~5 s of CPU a refresh at 300k); the fresh snapshot folds into the delta once it is
    as large. Search scores the same either way."""
    db, kw = store
    built: list[tuple[str, int]] = []
    build = kw.upkeep._build
    live = f'"{db.catalog}".main.chunks'

    def counting_build(cur: object, name: str, where: str, params: list[object]) -> None:
        rows = db.cursor().execute(f"SELECT count(*) FROM {live} WHERE {where}", params)
        kind = name.removesuffix("_new").rsplit("_", 1)[0]
        built.append((kind, int(rows.fetchone()[0])))  # type: ignore[index]
        build(cur, name, where, params)

    monkeypatch.setattr(kw.upkeep, "_build", counting_build)
    before = kw.state()
    assert before.fresh
    fresh = snapshot_contents(db, before.fresh)["lengths"]
    monkeypatch.setattr(upkeep_module, "FRESH_MIN_FOLD", 10**6)
    added = add_documents(db, random_docs(random.Random(11), sentences, 1), "/lib/a", "txt")
    assert kw.refresh() == "delta"
    state = kw.state()
    newer = int(
        db.cursor()
        .execute("SELECT count(*) FROM chunks WHERE document_id = ?", [added[0]])
        .fetchone()[0]
    )  # type: ignore[index]
    # Only the new document's chunks are read: the fresh snapshot's own are carried over.
    assert built == [("kw_fresh", newer)] and newer < len(fresh) < kw.delta_size()  # type: ignore[arg-type]
    assert state.delta_stamp == before.delta_stamp and state.fresh_stamp != before.fresh_stamp
    build_reference(db, state.watermark, "ref.base_rows")
    for query in queries[:10]:
        assert_same(kw.search(query, 10), reference_search(db, query, 10))

    # The fresh snapshot as large as the delta: folded into it. The delta's own postings
    # are carried over, so only the chunks newer than it are read.
    monkeypatch.setattr(upkeep_module, "FRESH_MIN_FOLD", 0)
    built.clear()
    add_documents(db, random_docs(random.Random(12), sentences, 1), "/lib/a", "md")
    newer = int(
        db.cursor()
        .execute("SELECT count(*) FROM chunks WHERE id > ?", [state.delta_watermark])
        .fetchone()[0]
    )  # type: ignore[index]
    assert kw.refresh() == "delta"
    state = kw.state()
    assert built == [("kw_delta", newer)] and newer < kw.delta_size()
    assert state.fresh is None and state.delta_stamp != before.delta_stamp
    newest = db.cursor().execute("SELECT max(id) FROM chunks").fetchone()[0]  # type: ignore[index]
    assert state.delta_watermark == newest
    build_reference(db, state.watermark, "ref.base_rows")
    for query in queries[:10]:
        assert_same(kw.search(query, 10), reference_search(db, query, 10))


def snapshot_contents(db: Database, name: str) -> dict[str, object]:
    """A snapshot as search sees it, by chunk id and term rather than by its own
    numbering: each chunk's length, each term's df and (chunk, tf) postings, the stats."""
    cur = db.cursor()
    schema = f"kw.fts_main_{name}"
    chunk_of = dict(cur.execute(f"SELECT docid, name FROM {schema}.docs").fetchall())
    term_of = dict(cur.execute(f"SELECT termid, term FROM {schema}.dict").fetchall())
    postings = {}
    for termid, docids, tfs in cur.execute(
        f"SELECT termid, docids, tfs FROM kw.{name}_postings"
    ).fetchall():
        doc = np.frombuffer(docids, dtype="<u4")
        tf = np.frombuffer(tfs, dtype="<u1" if len(tfs) == len(doc) else "<u2")
        assert list(doc) == sorted(doc)  # each term's documents ascending
        chunk_ids = [chunk_of[int(d)] for d in doc]
        postings[term_of[termid]] = sorted(zip(chunk_ids, tf.tolist(), strict=True))
    num_docs, avgdl = cur.execute(f"SELECT num_docs, avgdl FROM {schema}.stats").fetchone()  # type: ignore[misc]
    return {
        "lengths": sorted(cur.execute(f"SELECT name, len FROM {schema}.docs").fetchall()),
        "df": sorted(cur.execute(f"SELECT term, df FROM {schema}.dict").fetchall()),
        "postings": postings,
        "stats": (num_docs, round(avgdl, 9)),
        "languages": sorted(cur.execute(f"SELECT lang FROM kw.{name}_languages").fetchall()),
    }


def test_a_merge_reads_only_the_chunks_newer_than_the_base(
    store, queries: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A base rebuild carries the old base's postings over (its dead chunks dropped) and
    reads only the chunks newer than it: the snapshot is the one a build over every live
    chunk gives, and search returns what the fts join over the live chunks returns."""
    db, kw = store
    before = kw.state()
    built: list[tuple[str, int]] = []
    build = kw.upkeep._build
    live = f'"{db.catalog}".main.chunks'

    def counting_build(cur: object, name: str, where: str, params: list[object]) -> None:
        rows = db.cursor().execute(f"SELECT count(*) FROM {live} WHERE {where}", params)
        built.append((name, int(rows.fetchone()[0])))  # type: ignore[index]
        build(cur, name, where, params)

    deleted = {
        r[0]
        for r in db.cursor()
        .execute("SELECT id FROM ref.base_rows WHERE id NOT IN (SELECT id FROM chunks)")
        .fetchall()
    }
    carried = {chunk for chunk, _ in snapshot_contents(db, before.base)["lengths"]}  # type: ignore[attr-defined]
    assert deleted and deleted <= carried  # the old base still holds chunks deleted since
    monkeypatch.setattr(kw.upkeep, "_build", counting_build)
    newer = int(
        db.cursor()
        .execute("SELECT count(*) FROM chunks WHERE id > ?", [before.watermark])
        .fetchone()[0]
    )  # type: ignore[index]
    assert kw.refresh(force_merge=True) == "merged"
    state = kw.state()
    assert state.base and state.base != before.base and not state.delta and not state.fresh
    assert built == [(f"{state.base}_new", newer)]
    monkeypatch.undo()

    with kw.upkeep._kw_cursor() as cur:
        kw.upkeep._build(cur, "kw_check", "id <= ?", [state.watermark])
    try:
        merged, rebuilt = snapshot_contents(db, state.base), snapshot_contents(db, "kw_check")
        assert merged == rebuilt
        assert not deleted & {chunk for chunk, _ in merged["lengths"]}  # type: ignore[attr-defined]
    finally:
        with kw.upkeep._kw_cursor() as cur:
            kw.upkeep._drop(cur, "kw_check")
    build_reference(db, state.watermark)
    for query in queries:
        assert_same(kw.search(query, 10), reference_search(db, query, 10))


def test_a_merge_killed_midway_does_not_stop_the_next(store, queries: list[str]) -> None:
    """A process killed during a carried-over rebuild leaves its half-made tables in the
    keyword file (each statement commits): the next rebuild of that name clears them."""
    db, kw = store
    state = kw.state()
    name = "kw_base_b" if state.base == "kw_base_a" else "kw_base_a"
    cur = db.cursor()
    for table in (f"{name}_termmap", f"{name}_new", f"{name}_new_postings", f"{name}_postings"):
        cur.execute(f"CREATE TABLE kw.{table}(termid BIGINT)")
    cur.execute(f"CREATE SCHEMA kw.fts_main_{name}_new")
    cur.execute(f"CREATE TABLE kw.fts_main_{name}_new.docs(docid BIGINT)")
    cur.execute(f"CREATE SCHEMA kw.fts_main_{name}")
    assert kw.refresh(force_merge=True) == "merged"
    assert kw.state().base == name
    left = {
        r[0]
        for r in cur.execute(
            "SELECT table_name FROM duckdb_tables() WHERE database_name = 'kw'"
        ).fetchall()
    }
    assert not {t for t in left if t.endswith(("_termmap", "_new", "_new_postings"))}
    build_reference(db, kw.state().watermark)
    for query in queries[:10]:
        assert_same(kw.search(query, 10), reference_search(db, query, 10))


def test_keyword_file_keeps_postings_not_tokens(store) -> None:
    """The per-token table and the copy of the text go once the postings are derived."""
    db, _ = store
    tables = {
        (s, t)
        for s, t in db.cursor()
        .execute("SELECT schema_name, table_name FROM duckdb_tables() WHERE database_name = 'kw'")
        .fetchall()
    }
    names = {t for _, t in tables}
    assert {"kw_base_a_postings", "kw_delta_a_postings"} <= names
    assert "terms" not in names and not names & {"kw_base_a", "kw_delta_a"}


def test_a_keyword_file_of_the_old_layout_is_rebuilt(store, queries: list[str]) -> None:
    db, kw = store
    with db.write_lock:
        db.cursor().execute("DELETE FROM kw.kw_meta WHERE key = 'kw_format'")
    db.detach("kw")  # as a later open finds it
    reopened = KeywordIndex(db, kw.path)
    assert reopened.recovery == "upgrading" and reopened.status() == "rebuilding"
    assert reopened.state().base is None and reopened.search(queries[0], 10) == []
    assert reopened.refresh(background=True) == "merging"
    reopened.wait_for_merge()
    assert reopened.status() == "ready"
    state = reopened.state()
    build_reference(db, state.watermark)
    for query in queries[:10]:
        assert_same(reopened.search(query, 10), reference_search(db, query, 10))


def test_ascii_tokens_are_fts_tokens(store, queries: list[str]) -> None:
    """The query's words are split in Python for ASCII text; fts's ``tokenize`` macro is
    the reference, on the queries and on punctuation, digits, case and backslashes."""
    db, _ = store
    cases = [
        *queries,
        "p53-mediated APOPTOSIS, in 3.5% of (HeLa) cells!",
        r"C:\new\Table a\\b \x41 end\ ",
        "tabs\tand\nnewlines\r\nand  double  spaces",
        "e-mail: x@y.org; code=E1234_b; ~`'\"[]{}|<>?/",
        "",
        "   ",
        "...",
        "ALLCAPS MiXeD lower 0123456789",
    ]
    cur = db.cursor()
    checked = 0
    for text in cases:
        if not text.isascii():
            assert tokens_module.ascii_tokens(text) is None  # the macro's job
            continue
        checked += 1
        row = cur.execute("SELECT kw.fts_main_kw_base_a.tokenize(?)", [text]).fetchone()
        assert row is not None
        assert tokens_module.ascii_tokens(text) == [w for w in row[0] if w], text
    assert checked > 30


def test_cached_scores_and_liveness_follow_changes(
    store, sentences: list[str], queries: list[str]
) -> None:
    """Postings, their scores, the dictionary and the live-chunk mask are kept between
    queries; a removed document, a new delta (moving avgdl and idf) and a new base are
    each seen by the next query."""
    db, kw = store
    for query in queries[:10]:  # twice at one generation: the live mask is built
        kw.search(query, 10)
        kw.search(query, 10)
    assert kw.scorer._live_chunks.mask() is not None and kw.scorer._postings_cache
    top = kw.search(queries[0], 1)[0][0]
    with db.transaction() as cur:
        cur.execute(
            "UPDATE documents SET state = 'removing' WHERE id = "
            "(SELECT document_id FROM chunks WHERE id = ?)",
            [top],
        )
    assert top not in {c for c, _ in kw.search(queries[0], 10)}
    add_documents(db, random_docs(random.Random(11), sentences, 3), "/lib/a")
    assert kw.refresh() == "delta"
    build_reference(db, kw.state().watermark, "ref.base_rows")
    for query in queries[:10]:
        for _ in range(2):
            assert_same(kw.search(query, 10), reference_search(db, query, 10))
    assert kw.refresh(force_merge=True) == "merged"
    build_reference(db, kw.state().watermark)
    for query in queries[:10]:
        assert_same(kw.search(query, 10), reference_search(db, query, 10))


def test_duckdb_memory_is_capped_and_spills_inside_the_data_folder(
    tmp_path: Path, sentences: list[str], queries: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """DuckDB's cache is capped (it would grow to 80 % of RAM), the keyword file shares
    the cap (it is attached to the same connection), and what does not fit spills beside
    the database, inside the library's data folder, and is gone after close. The fts
    build and the postings derivation still succeed under a cap far below what they
    hold unbounded."""
    import core.store.db as db_module

    db = Database(tmp_path / "lectern.duckdb")
    limit = db.cursor().execute("SELECT current_setting('memory_limit')").fetchone()[0]  # type: ignore[index]
    assert limit != "" and db_module.MEMORY_LIMIT == "384MB" and "MiB" in limit
    temp = db.cursor().execute("SELECT current_setting('temp_directory')").fetchone()[0]  # type: ignore[index]
    assert Path(temp).parent == tmp_path
    db.close()

    monkeypatch.setattr(db_module, "MEMORY_LIMIT", "64MB")
    monkeypatch.setattr(upkeep_module, "POSTINGS_BATCH_ROWS", 20_000)
    home = tmp_path / "tight"
    home.mkdir()
    db = Database(home / "lectern.duckdb")
    kw = KeywordIndex(db, home / "keyword.duckdb")
    rng = random.Random(21)
    for _ in range(6):
        add_documents(db, random_docs(rng, sentences, 50), "/lib/a")
    assert kw.refresh(force_merge=True) == "merged"
    db.attach(home / "reference.duckdb", "ref")
    build_reference(db, kw.state().watermark)
    for query in queries[:10]:
        got = kw.search(query, 10)
        assert got
        assert_same(got, reference_search(db, query, 10))
    kw.close()
    db.close()
    assert not list(home.glob("*.tmp")) or not any(home.glob("*.tmp/*"))


def test_a_spill_that_finds_no_room_is_a_disk_full_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past the memory cap DuckDB spills to the data folder; when the disk there has no
    room (here: DuckDB's own cap on the spill, which is how it meets a full disk, with
    the same message), the write fails with the plain DiskFullError, not an
    out-of-memory error, and the spill folder is empty once the database closes."""
    import core.store.db as db_module
    from core.errors import DiskFullError

    monkeypatch.setattr(db_module, "MEMORY_LIMIT", "32MB")
    db = Database(tmp_path / "lectern.duckdb")
    db.cursor().execute("SET max_temp_directory_size = '1MB'")
    with pytest.raises(DiskFullError), db.transaction() as tx:
        tx.execute(
            "CREATE TABLE big AS SELECT range AS id, md5(range::VARCHAR) || "
            "md5((range * 7)::VARCHAR) AS s FROM range(2000000)"
        )
        tx.execute("SELECT s, count(*) FROM big GROUP BY s ORDER BY s LIMIT 5").fetchall()
    db.close()
    spill = tmp_path / "lectern.duckdb.tmp"
    assert not spill.exists() or not any(spill.iterdir())


def test_the_keyword_file_is_read_ahead_at_open(
    store, queries: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """After a reboot the first few dozen queries each read postings from disk (p95
    234-312 ms at 300k against 27 ms warm): opening the index asks the OS to read the
    keyword file ahead, on a thread of its own, and a file it cannot read costs nothing."""
    db, kw = store
    asked: list[tuple[str, int, int, int]] = []
    advise = os.posix_fadvise

    def recording(fd: int, offset: int, length: int, advice: int) -> None:
        asked.append((os.readlink(f"/proc/self/fd/{fd}"), offset, length, advice))
        advise(fd, offset, length, advice)

    monkeypatch.setattr(os, "posix_fadvise", recording)
    db.detach("kw")  # as a later open finds it
    reopened = KeywordIndex(db, kw.path)
    deadline = time.monotonic() + 10  # the open's own thread
    while (str(kw.path), 0, 0, os.POSIX_FADV_WILLNEED) not in asked:
        assert time.monotonic() < deadline, asked
        time.sleep(0.01)
    assert reopened.search(queries[0], 10)
    # Without fadvise (macOS, Windows) the file is read through once instead.
    monkeypatch.delattr(os, "posix_fadvise")
    reads: list[int] = []
    real_open = open

    def counting_open(path: object, mode: str = "r", *args: object, **kwargs: object):
        handle = real_open(path, mode, *args, **kwargs)  # type: ignore[call-overload]
        if path == kw.path:
            read = handle.read
            handle.read = lambda n=-1: reads.append(n) or read(n)  # type: ignore[method-assign]
        return handle

    monkeypatch.setattr("builtins.open", counting_open)
    upkeep_module.warm_page_cache(kw.path).join(10)
    assert reads and len(reads) >= kw.path.stat().st_size // (1 << 20)
    # A file that is gone (or unreadable) is no error: it was only a warm-up.
    upkeep_module.warm_page_cache(kw.path.parent / "missing.duckdb").join(10)
