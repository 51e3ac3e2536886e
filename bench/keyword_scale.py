"""Keyword (BM25) search latency as the library grows: the shipped search (packed
postings, core/store/keyword/scoring.py) against the query it replaced (a join of the query
terms with fts's one-row-per-token ``terms`` table), interleaved in the same run. The old
query runs over fts indexes of its own (``legacy.duckdb``, attached as ``lg``) built with
the same settings over the same base/delta split, and every query's top-k is compared.

Libraries are written directly through the store layer (documents and chunks rows; no
embeddings, which keyword search never reads): each chunk is 80-180 words of real SciFact
sentences drawn at random, 50 chunks to a document, with a heading context as the chunker
writes it. After the base is built, a delta of new documents is added and some documents
are removed, so queries see the base+delta split and dead chunks as they do in use.
Queries are SciFact *train* queries (never the test split).

The libraries are kept under ``--root`` (in /tmp) and reused by later runs; ``--rebuild``
times a fresh base rebuild of each one.

    .venv/bin/python bench/keyword_scale.py                       # 10k, 100k, 300k
    .venv/bin/python bench/keyword_scale.py --sizes 10000 --queries 50

The last line of output is one JSON object with every figure.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import statistics
import sys
import time
from pathlib import Path

import duckdb
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.record import emit
from bench.synthetic_library import percentile, train_queries
from core.records import SearchFilters
from core.store.db import Database, scalar
from core.store.keyword import KeywordIndex
from core.store.keyword.scoring import BM25_B, BM25_K1
from core.store.keyword.tokens import fts_pragma, query_terms_sql, snapshot_rows_sql
from core.store.lookup import filter_clause
from core.text import split_sentences

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data" / "scifact"
CHUNKS_PER_DOC = 50
DELTA_CHUNKS = 1_000
FORMAT = "kwscale-1"


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def sentences() -> list[str]:
    out: list[str] = []
    with open(SHARED / "corpus.jsonl", encoding="utf-8") as handle:
        for line in handle:
            text = json.loads(line)["text"]
            out.extend(text[s:e] for s, e in split_sentences(text) if 20 < e - s < 400)
    return out


def add_documents(
    db: Database, pool: list[str], rng: random.Random, chunks: int, folder: str, tag: str
) -> None:
    """``chunks`` chunks in documents of ``CHUNKS_PER_DOC``, in one transaction."""
    files = max(1, -(-chunks // CHUNKS_PER_DOC))
    cur = db.cursor()
    doc_ids = [
        r[0]
        for r in cur.execute("SELECT nextval('document_ids') FROM range(?)", [files]).fetchall()
    ]
    chunk_ids = [
        r[0]
        for r in cur.execute(
            "SELECT nextval('chunk_ids') FROM range(?)", [files * CHUNKS_PER_DOC]
        ).fetchall()
    ]
    docs: dict[str, list] = {k: [] for k in ("id", "path", "title", "type")}
    rows: dict[str, list] = {k: [] for k in ("id", "document_id", "ordinal", "text", "context")}
    for f in range(files):
        title = f"Research notes {tag}{f}"
        docs["id"].append(doc_ids[f])
        docs["path"].append(f"{folder}/{tag}notes-{f:06d}.{'md' if f % 3 else 'txt'}")
        docs["title"].append(title)
        docs["type"].append("md" if f % 3 else "txt")
        for s in range(CHUNKS_PER_DOC):
            target = rng.randint(80, 180)
            words: list[str] = []
            while len(words) < target:
                words.extend(rng.choice(pool).split())
            rows["id"].append(chunk_ids[f * CHUNKS_PER_DOC + s])
            rows["document_id"].append(doc_ids[f])
            rows["ordinal"].append(s)
            rows["text"].append(" ".join(words))
            rows["context"].append(f"{title} > Finding {s}")
    new_docs = {  # noqa: F841 - read by DuckDB's replacement scan
        k: np.array(v, dtype=np.int64 if k == "id" else object) for k, v in docs.items()
    }
    new_chunks = {  # noqa: F841 - read by DuckDB's replacement scan
        k: np.array(v, dtype=object if k in ("text", "context") else np.int64)
        for k, v in rows.items()
    }
    with db.transaction() as tx:
        tx.execute(
            """INSERT INTO documents(id, path, folder, size, mtime, content_hash, type, title,
                   pages, state, reason, chunks, index_config, indexed_at)
               SELECT id, path, ?, 0, 0, 'x' || id, type, title, 0, 'indexed', '', ?, 'bench',
                   current_timestamp FROM new_docs""",
            [folder, CHUNKS_PER_DOC],
        )
        tx.execute(
            """INSERT INTO chunks(id, document_id, ordinal, text, context, start_char, end_char,
                   page_start, page_end, heading_path, token_count, embedding)
               SELECT id, document_id, ordinal, text, context, 0, length(text), NULL, NULL,
                   '[]', 0, NULL FROM new_chunks"""
        )
        version = int(db.get_meta("content_version", "0") or 0) + 1
        db.set_meta("content_version", str(version), tx)


def open_library(root: Path, size: int, pool: list[str]) -> tuple[Database, KeywordIndex, dict]:
    """The library of ``size`` chunks under ``root``, built on first use, with its
    keyword index (base, then a delta of newer documents) and the legacy index."""
    folder = root / f"lib-{size}"
    folder.mkdir(parents=True, exist_ok=True)
    db = Database(folder / "lectern.duckdb")
    info: dict[str, object] = {}
    rng = random.Random(size)
    if db.get_meta("bench_format") != FORMAT:
        log(f"writing a {size}-chunk library in {folder}")
        t0 = time.monotonic()
        for start in range(0, size, 50_000):
            add_documents(db, pool, rng, min(50_000, size - start), "/bench/a", f"a{start}-")
        with db.transaction() as tx:
            # Dead chunks in the base: documents being replaced or removed.
            tx.execute("UPDATE documents SET state = 'removing' WHERE id % 97 = 5")
            db.set_meta("bench_format", FORMAT, tx)
        db.checkpoint()
        info["insert_s"] = round(time.monotonic() - t0, 1)
    kw = KeywordIndex(db, folder / "keyword.duckdb")
    if kw.state().base is None or kw.recovery:
        with db.transaction() as tx:  # the delta documents come after the base
            tx.execute(
                "DELETE FROM chunks WHERE document_id IN "
                "(SELECT id FROM documents WHERE folder = '/bench/b')"
            )
            tx.execute("DELETE FROM documents WHERE folder = '/bench/b'")
        log(f"building the keyword base of {size} chunks")
        t0 = time.monotonic()
        kw.refresh(force_merge=True)
        db.set_meta("bench_base_build_s", str(round(time.monotonic() - t0, 1)))
        add_documents(db, pool, rng, DELTA_CHUNKS, "/bench/b", "b-")
        assert kw.refresh() == "delta"
        db.checkpoint()
    info["base_build_s"] = float(db.get_meta("bench_base_build_s", "0") or 0)
    build_legacy(db, kw, folder / "legacy.duckdb")
    return db, kw, info


def build_legacy(db: Database, kw: KeywordIndex, path: Path) -> None:
    """fts indexes over the same base/delta split, with their ``terms`` tables, for the
    query the shipped search replaced (attached as ``lg``)."""
    watermark = kw.state().watermark
    top = int(scalar(db.cursor(), "SELECT coalesce(max(id), 0) FROM chunks"))
    key = f"{watermark}:{top}"
    db.attach(path, "lg")
    cur = db.new_cursor()
    cur.execute("USE lg")
    cur.execute("CREATE TABLE IF NOT EXISTS lg_meta(key VARCHAR PRIMARY KEY, value VARCHAR)")
    row = cur.execute("SELECT value FROM lg_meta WHERE key = 'split'").fetchone()
    if row is None or row[0] != key:
        log(f"building the legacy fts index (watermark {watermark})")
        for name, where in (("lg_base", "id <= ?"), ("lg_delta", "id > ?")):
            cur.execute(
                f"CREATE OR REPLACE TABLE {name} AS "
                + snapshot_rows_sql(f'"{db.catalog}".main.chunks', where),
                [watermark],
            )
            cur.execute(fts_pragma(name))
        cur.execute("INSERT OR REPLACE INTO lg_meta VALUES ('split', ?)", [key])
        cur.execute("CHECKPOINT lg")
    cur.close()


def legacy_search(
    db: Database,
    query: str,
    limit: int,
    filters: SearchFilters | None = None,
    catalog: str = "lg",
) -> list[tuple[int, float]]:
    """The query the postings search replaced, verbatim but for the schema names: the
    stemmed query terms joined with fts's one-row-per-token ``terms``, over the fts
    indexes ``<catalog>_base`` and ``<catalog>_delta`` in the attached ``catalog`` (the
    baseline of this bench, and the reference of tests/store/test_keyword_postings.py)."""
    filter_sql, filter_params = filter_clause(filters or SearchFilters())
    schemas = [
        f"{catalog}.fts_main_{t}"
        for t in (f"{catalog}_base", f"{catalog}_delta")
        if db.cursor()
        .execute(
            "SELECT count(*) FROM information_schema.schemata "
            "WHERE catalog_name = ? AND schema_name = ?",
            [catalog, f"fts_main_{t}"],
        )
        .fetchone()[0]  # type: ignore[index]
    ]
    if not schemas or not query.strip():
        return []
    hits = " UNION ALL ".join(
        f"""SELECT docs.name AS chunk_id, docs.len AS len, d.term AS term, count(*) AS tf
            FROM {s}.dict d JOIN q ON d.term = q.t
            JOIN {s}.terms tm ON tm.termid = d.termid
            JOIN {s}.docs docs ON docs.docid = tm.docid GROUP BY ALL"""
        for s in schemas
    )
    dfs = " UNION ALL ".join(
        f"SELECT term, df FROM {s}.dict WHERE term IN (SELECT t FROM q)" for s in schemas
    )
    stats = " UNION ALL ".join(f"SELECT num_docs, avgdl FROM {s}.stats" for s in schemas)
    sql = f"""
        WITH q AS ({query_terms_sql()}),
        hits AS ({hits}),
        dfs AS (SELECT term, sum(df) AS df FROM ({dfs}) GROUP BY term),
        stats AS (
            SELECT sum(num_docs) AS n, sum(avgdl * num_docs) / sum(num_docs) AS avgdl
            FROM ({stats})
        ),
        scored AS (
            SELECT hits.chunk_id,
                   sum(ln((stats.n - dfs.df + 0.5) / (dfs.df + 0.5) + 1)
                       * (hits.tf * ({BM25_K1} + 1))
                       / (hits.tf + {BM25_K1} * (1 - {BM25_B} + {BM25_B} * hits.len / stats.avgdl))
                   ) AS score
            FROM hits JOIN dfs ON dfs.term = hits.term CROSS JOIN stats
            GROUP BY hits.chunk_id
        )
        SELECT s.chunk_id, s.score FROM scored s
        JOIN chunks c ON c.id = s.chunk_id
        JOIN documents d ON d.id = c.document_id
        WHERE d.state = 'indexed' {("AND " + filter_sql) if filter_sql else ""}
        ORDER BY s.score DESC, s.chunk_id
        LIMIT {int(limit)}
    """
    rows = db.cursor().execute(sql, [query, *filter_params]).fetchall()
    return [(int(r[0]), float(r[1])) for r in rows]


def same(a: list[tuple[int, float]], b: list[tuple[int, float]]) -> bool:
    """Equal ids in order and scores within 1e-6; chunks whose scores tie (to 1e-9) may
    come in either order (the old query summed in no fixed order), and a tie at the cut
    may keep either chunk."""
    if len(a) != len(b) or any(abs(x - y) > 1e-6 for (_, x), (_, y) in zip(a, b, strict=True)):
        return False
    last = a[-1][1] if a else 0.0
    for (ia, sa), (ib, _) in zip(a, b, strict=True):
        if ia == ib or abs(sa - last) <= 1e-9:
            continue
        tied_a = {j for j, s in a if abs(s - sa) <= 1e-9}
        tied_b = {j for j, s in b if abs(s - sa) <= 1e-9}
        if tied_a != tied_b:
            return False
    return True


def measure(kw: KeywordIndex, queries: list[str], limit: int) -> dict[str, object]:
    filters = [None, SearchFilters(folders=("/bench/b",)), SearchFilters(types=("txt",))]
    for q in queries[:5]:  # warm both paths (first-touch of the file's blocks)
        legacy_search(kw.db, q, limit)
        kw.search(q, limit)
    old_ms: list[float] = []
    new_ms: list[float] = []
    # CPU time of the whole process (DuckDB's threads included) per query: on a shared,
    # loaded machine wall time mostly measures the other processes, CPU time the work.
    old_cpu: list[float] = []
    new_cpu: list[float] = []
    mismatches: list[str] = []
    for i, q in enumerate(queries):
        f = filters[i % len(filters)] if i % 4 == 3 else None
        # Alternate which path goes first, so neither always meets a warmer cache.
        order = (0, 1) if i % 2 else (1, 0)
        results: dict[int, list[tuple[int, float]]] = {}
        for which in order:
            c0 = time.process_time()
            t0 = time.perf_counter()
            if which == 0:
                results[0] = legacy_search(kw.db, q, limit, f)
                old_ms.append(1000 * (time.perf_counter() - t0))
                old_cpu.append(1000 * (time.process_time() - c0))
            else:
                results[1] = kw.search(q, limit, filters=f)
                new_ms.append(1000 * (time.perf_counter() - t0))
                new_cpu.append(1000 * (time.process_time() - c0))
        if not same(results[0], results[1]):
            mismatches.append(q)
    return {
        "queries": len(queries),
        "old_p50_ms": round(statistics.median(old_ms), 1),
        "old_p95_ms": round(percentile(old_ms, 0.95), 1),
        "new_p50_ms": round(statistics.median(new_ms), 1),
        "new_p95_ms": round(percentile(new_ms, 0.95), 1),
        "p95_ratio_new_over_old": round(percentile(new_ms, 0.95) / percentile(old_ms, 0.95), 3),
        "old_cpu_p50_ms": round(statistics.median(old_cpu), 1),
        "old_cpu_p95_ms": round(percentile(old_cpu, 0.95), 1),
        "new_cpu_p50_ms": round(statistics.median(new_cpu), 1),
        "new_cpu_p95_ms": round(percentile(new_cpu, 0.95), 1),
        "top_k_identical": len(queries) - len(mismatches),
        "mismatched_queries": mismatches[:5],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes", default="10000,100000,300000")
    parser.add_argument("--root", type=Path, default=Path("/tmp/lectern-kwscale"))
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--limit", type=int, default=10)
    parser.add_argument("--rebuild", action="store_true", help="time a fresh base rebuild")
    args = parser.parse_args()
    pool = sentences()
    queries = train_queries()
    random.Random(7).shuffle(queries)
    queries = queries[: args.queries]
    out: dict[str, object] = {"limit": args.limit, "duckdb": duckdb.__version__, "sizes": {}}
    out["load_avg_1m_before"] = round(os.getloadavg()[0], 2)
    for size in (int(s) for s in args.sizes.split(",")):
        db, kw, info = open_library(args.root, size, pool)
        if args.rebuild:
            t0 = time.monotonic()
            kw.refresh(force_merge=True)
            info["base_rebuild_s"] = round(time.monotonic() - t0, 1)
        kw.checkpoint()
        info["chunks"] = int(scalar(db.cursor(), "SELECT count(*) FROM chunks"))
        info["delta_chunks"] = kw.delta_size()
        lib = args.root / f"lib-{size}"
        info["keyword_file_mb"] = round((lib / "keyword.duckdb").stat().st_size / 1e6, 1)
        info["legacy_file_mb"] = round((lib / "legacy.duckdb").stat().st_size / 1e6, 1)
        info.update(measure(kw, queries, args.limit))
        log(f"{size}: {info}")
        out["sizes"][str(size)] = info  # type: ignore[index]
        kw.close()
        db.close()
    out["peak_rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
    out["load_avg_1m_after"] = round(os.getloadavg()[0], 2)
    emit("keyword_scale", out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
