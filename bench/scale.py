"""Scale benchmark: search latency, dense recall, open time, memory and disk as the library
grows to 10k, 100k, 300k and 1M chunks.

Each library is written through the store layer by ``bench/synthetic_library.py``: real
Markdown files (sections of three real SciFact sentences), real chunk rows, and the real
model's embeddings computed once for ``--distinct`` texts and reused. Reused vectors get
seeded Gaussian noise of norm ``--noise`` (0.3: cosine ~0.955 to the real vector) and are
renormalised, so that the copies of one text are not exact ties and recall@10 against
exact search measures whether the index finds the true nearest ten. The figures below
are therefore those of a library of near-duplicate passages, a hard case for an
approximate index.

Queries are SciFact *train* queries only. For each size, four processes run one after
the other (so each peak RSS is its own):

- build: writes the library, builds the keyword base index (timed: the keyword rebuild)
  and the vector file, embeds the queries and computes the exact float32 top 10 over every stored embedding;
  up to ``--baseline-max`` chunks it also builds the HNSW index used before (f16,
  connectivity 16, expansion 128/64) from the same vectors, for recall and time;
- measure: opens the library cold, every file dropped from the page cache (open time), searches each mode through
  ``Library.search`` (p50/p95; hybrid with its second stage reading the stored word
  pieces), the hybrid first stage alone, and the vector index directly (dense recall@10
  against exact), and records peak RSS while searching;
- cold (twice): with every file of the library dropped from the OS page cache first,
  as after a reboot, opens it and times BM25 through ``Library.search``, once without
  the keyword file's read-ahead at open and once with it (as shipped);
- rebuild: opens the library and rebuilds the vector file from DuckDB (timed), with
  peak RSS, as a damaged file or a changed model would; then adds 10k vectors back in
  batches of 64, as the meaning pass does, and saves (timed, peak RSS);
- merge: opens the library with its vectors and the model, as an indexing run holds
  them, and rebuilds the keyword base twice: as indexing does (the old base's postings
  carried over, timed) and over every passage read again (the fts build and the postings
  derivation under DuckDB's memory cap, as after damage or an upgrade: the largest
  keyword job, timed), then saves the vectors; peak RSS (the figure for "while
  indexing"), and whether any spill is left in the data folder after close.

    .venv/bin/python bench/scale.py                        # 10k, 100k, 300k, 1M
    .venv/bin/python bench/scale.py --sizes 10000,100000
    .venv/bin/python bench/scale.py --quick                # 2k and 10k, few queries

Libraries are built under ``/tmp`` (``--root``) and removed after each size unless
``--keep``; ``--reuse`` measures a kept library again without building it (its build
figures are those kept in its ``build.json``). The last line of output is one JSON object with every figure; the growth
exponent is the log-log slope of p95 latency against size.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import random
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import core.store.keyword.upkeep as keyword_upkeep
from bench.record import emit
from bench.synthetic_library import CACHE, build_base, log, percentile, train_queries
from core.config import Settings
from core.library import Library
from core.records import second_stage_state
from core.store.db import MEMORY_LIMIT

MODES = ("bm25", "dense", "hybrid")
K = 10
OLD_HNSW = {"connectivity": 16, "expansion_add": 128, "expansion_search": 64}


def peak_rss_mb() -> float:
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


def stats_ms(values: list[float]) -> dict[str, float]:
    return {
        "p50_ms": round(1000 * percentile(values, 0.5), 2),
        "p95_ms": round(1000 * percentile(values, 0.95), 2),
    }


def stream_embeddings(library: Library, batch: int = 16_384):
    """(ids, float32 vectors) of every embedded chunk, in id order, a batch at a time."""
    cur = library.db.cursor()
    last = -1
    while True:
        rows = cur.execute(
            "SELECT id, embedding FROM chunks WHERE id > ? AND embedding IS NOT NULL "
            "ORDER BY id LIMIT ?",
            [last, batch],
        ).fetchall()
        if not rows:
            return
        last = int(rows[-1][0])
        ids = np.array([r[0] for r in rows], dtype=np.uint64)
        yield (
            ids,
            np.frombuffer(b"".join(r[1] for r in rows), dtype=np.float32).reshape(len(rows), -1),
        )


def exact_top(library: Library, queries: np.ndarray, k: int) -> np.ndarray:
    """Exact float32 cosine top k ids per query (embeddings are unit length)."""
    best_ids = np.zeros((len(queries), 0), dtype=np.uint64)
    best_sims = np.zeros((len(queries), 0), dtype=np.float32)
    for ids, vectors in stream_embeddings(library):
        sims = queries @ vectors.T
        all_sims = np.concatenate([best_sims, sims], axis=1)
        all_ids = np.concatenate([best_ids, np.broadcast_to(ids, sims.shape)], axis=1)
        keep = np.argsort(-all_sims, axis=1, kind="stable")[:, :k]
        best_sims = np.take_along_axis(all_sims, keep, axis=1)
        best_ids = np.take_along_axis(all_ids, keep, axis=1)
    return best_ids


def recall(found: list[list[int]], truth: np.ndarray) -> float:
    hits = sum(len(set(f[:K]) & set(t[:K].tolist())) for f, t in zip(found, truth, strict=True))
    return round(hits / (K * len(found)), 4)


def query_vectors(library: Library, queries: list[str]) -> np.ndarray:
    import hashlib

    from core.embedding.models import embed_queries

    key = hashlib.sha256(
        ("\n".join(queries) + "\0" + library.index_config).encode("utf-8")
    ).hexdigest()[:24]
    cached = CACHE / f"queries-{key}.npy"
    if cached.exists():
        return np.load(cached)
    vectors = np.asarray(embed_queries(library.embedder, queries), dtype=np.float32)
    CACHE.mkdir(parents=True, exist_ok=True)
    np.save(cached, vectors)
    return vectors


def hnsw_baseline(library: Library, qvecs: np.ndarray, truth: np.ndarray) -> dict:
    """The HNSW index used before, built from the same vectors, for comparison."""
    from usearch.index import Index

    index = Index(ndim=qvecs.shape[1], metric="cos", dtype="f16", **OLD_HNSW)
    t0 = time.monotonic()
    for ids, vectors in stream_embeddings(library):
        index.add(ids, vectors, threads=2)
    build_s = time.monotonic() - t0
    found, times = [], []
    for q in qvecs:
        t = time.perf_counter()
        matches = index.search(q, K)
        times.append(time.perf_counter() - t)
        found.append([int(x) for x in matches.keys])
    return {"build_s": round(build_s, 1), "recall_at_10": recall(found, truth), **stats_ms(times)}


# --- the three child processes -------------------------------------------------------


def child_build(args: argparse.Namespace) -> dict:
    root = Path(args.root)
    corpus, home = root / "corpus", root / "home"
    corpus.mkdir(parents=True)
    library = Library(Settings(home=home))
    library.add_folder(corpus)
    build = build_base(
        library,
        corpus,
        args.size,
        args.distinct,
        random.Random(14),
        noise=args.noise,
        seed=14,
    )
    chunks = int(library.db.cursor().execute("SELECT count(*) FROM chunks").fetchone()[0])
    queries = train_queries(args.queries)
    qvecs = query_vectors(library, queries)
    t0 = time.monotonic()
    truth = exact_top(library, qvecs, K)
    exact_s = time.monotonic() - t0
    np.save(root / "truth.npy", truth)
    np.save(root / "queries.npy", qvecs)
    (root / "queries.json").write_text(json.dumps(queries))
    baseline = None
    if args.size <= args.baseline_max:
        log(f"  HNSW baseline at {chunks} chunks")
        baseline = hnsw_baseline(library, qvecs, truth)
    library.close()
    result = {
        "chunks": chunks,
        **build,
        "keyword_rebuild_s": build["fts_base_build_s"],
        "vector_build_s": build["vector_index_build_s"],
        "exact_truth_s": round(exact_s, 1),
        "hnsw_before": baseline,
        "build_peak_rss_mb": peak_rss_mb(),
    }
    # Kept beside the library, so that ``--keep`` then ``--reuse`` measures it again.
    (root / "build.json").write_text(json.dumps(result))
    return result


def child_measure(args: argparse.Namespace) -> dict:
    root = Path(args.root)
    queries = json.loads((root / "queries.json").read_text())
    qvecs = np.load(root / "queries.npy")
    truth = np.load(root / "truth.npy")
    evict_from_page_cache(root / "home")  # opened as after a reboot
    t0 = time.monotonic()
    library = Library(Settings(home=root / "home"))
    t1 = time.monotonic()
    vectors = library.vectors  # mapped, checksummed, sample-checked, reconciled
    vector_open_s = time.monotonic() - t1
    vector_open_rss = peak_rss_mb()
    t1 = time.monotonic()
    library.embedder  # noqa: B018 - loads the model, timed apart from the library
    model_s = time.monotonic() - t1
    library.search(queries[0], mode="bm25")
    open_s = time.monotonic() - t0 - model_s
    model_rss = peak_rss_mb()
    library.search(queries[0], mode="hybrid")
    out: dict = {
        "model_peak_rss_mb": model_rss,
        "open_s": round(open_s, 2),
        "vector_open_s": round(vector_open_s, 2),
        "model_load_s": round(model_s, 2),
        "vector_open_report": vectors.repair_report,
        "vector_open_peak_rss_mb": vector_open_rss,
    }
    stage_states: dict[str, int] = {}
    for mode in MODES:
        times = []
        for q in queries:
            t = time.perf_counter()
            hits = library.search(q, mode=mode)
            times.append(time.perf_counter() - t)
            if mode == "hybrid":  # read from stored pieces, or cut short on a busy machine
                state = second_stage_state(hits)
                stage_states[state] = stage_states.get(state, 0) + 1
        out[mode] = stats_ms(times)
        out[f"{mode}_peak_rss_mb"] = peak_rss_mb()  # peak so far, after this mode's queries
    # The same hybrid search without its second stage (a library with ``rerank`` off):
    # the retriever's copy, so the library's settings and stored pieces stay as they are.
    first_stage = copy.copy(library.retriever)
    first_stage._second_stage = None
    times = []
    for q in queries:
        t = time.perf_counter()
        first_stage.search(q, k=Settings().top_k, mode="hybrid")
        times.append(time.perf_counter() - t)
    out["hybrid_first_stage"] = stats_ms(times)
    out["second_stage_states"] = stage_states
    out["chunks_with_pieces"], _ = library.pieces.counts()
    found, times = [], []
    for q in qvecs:
        t = time.perf_counter()
        hits = vectors.search(q, K)
        times.append(time.perf_counter() - t)
        found.append([k for k, _ in hits])
    out["dense_index"] = {"recall_at_10": recall(found, truth), **stats_ms(times)}
    out["search_peak_rss_mb"] = peak_rss_mb()
    out["keyword_state"] = str(library.status().get("keyword_index"))
    library.close()
    home = root / "home"
    out["disk_mb"] = round(sum(p.stat().st_size for p in home.rglob("*") if p.is_file()) / 2**20)
    out["corpus_mb"] = round(
        sum(p.stat().st_size for p in (root / "corpus").rglob("*") if p.is_file()) / 2**20
    )
    out["vector_file_mb"] = round(Settings(home=home).vectors_path.stat().st_size / 2**20, 1)
    return out


def evict_from_page_cache(folder: Path) -> None:
    """Drop ``folder``'s files from the OS page cache, as after a reboot or memory
    pressure (their pages are clean: the library was closed and checkpointed)."""
    for path in folder.rglob("*"):
        if path.is_file():
            with open(path, "rb") as handle:
                os.posix_fadvise(handle.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)


def child_cold(args: argparse.Namespace) -> dict:
    """BM25 in a process that opens the library with none of its files in the page cache,
    with the keyword file's read-ahead at open (``--warm on``, as shipped) or without."""
    root = Path(args.root)
    queries = json.loads((root / "queries.json").read_text())
    if args.warm == "off":
        keyword_upkeep.warm_page_cache = lambda path: None  # type: ignore[assignment,return-value]
    evict_from_page_cache(root / "home")
    library = Library(Settings(home=root / "home"))
    # As in the app, the first question comes once the model has loaded (seconds).
    library.embedder  # noqa: B018
    times = []
    for q in queries:
        t = time.perf_counter()
        library.search(q, mode="bm25")
        times.append(time.perf_counter() - t)
    library.close()
    first = times[:30]
    return {
        f"bm25_cold_warm_{args.warm}": stats_ms(times)
        | {"first_30_p95_ms": round(1000 * percentile(first, 0.95), 2)}
    }


def child_rebuild(args: argparse.Namespace) -> dict:
    root = Path(args.root)
    qvecs = np.load(root / "queries.npy")
    truth = np.load(root / "truth.npy")
    settings = Settings(home=root / "home")
    settings.vectors_path.unlink()  # as after damage: rebuilt from DuckDB at open
    library = Library(settings)
    t0 = time.monotonic()
    vectors = library.vectors
    rebuild_s = time.monotonic() - t0
    found = [[k for k, _ in vectors.search(q, K)] for q in qvecs]
    out = {
        "vector_rebuild_s": round(rebuild_s, 1),
        "rebuild_report": vectors.repair_report,
        "recall_after_rebuild": recall(found, truth),
        "rebuild_peak_rss_mb": peak_rss_mb(),
    }
    # As the meaning pass does: vectors arrive in batches of 64 and are added (here the
    # last 10k stored ones, removed first), then the file is saved.
    cur = library.db.cursor()
    # By id range: a top-N over the embedding column would read every embedding.
    first = cur.execute("SELECT min(id) FROM (SELECT id FROM chunks ORDER BY id DESC LIMIT 10000)")
    rows = cur.execute(
        "SELECT id, embedding FROM chunks WHERE id >= ? AND embedding IS NOT NULL ORDER BY id",
        [int(first.fetchone()[0])],
    ).fetchall()
    ids = np.array([r[0] for r in rows], dtype=np.uint64)
    batch = np.frombuffer(b"".join(r[1] for r in rows), dtype=np.float32).reshape(len(rows), -1)
    del rows
    vectors.remove(ids)
    t0 = time.monotonic()
    for i in range(0, len(ids), 64):
        vectors.add(ids[i : i + 64], batch[i : i + 64])
    add_s = time.monotonic() - t0
    t0 = time.monotonic()
    vectors.save()
    out["incremental_add_per_s"] = round(len(ids) / add_s)
    out["vector_save_s"] = round(time.monotonic() - t0, 2)
    out["add_peak_rss_mb"] = peak_rss_mb()
    library.close()
    return out


def child_merge(args: argparse.Namespace) -> dict:
    """What indexing a library this size holds at its peak: the library open with its
    vectors and the model loaded (as the indexer has them), a keyword base rebuild as
    indexing runs one (the old base's postings carried over), then one over every
    passage read again (the fts build and the postings derivation, as after damage or an
    upgrade: the largest keyword job), then one vector save. Peak RSS of the process."""
    root = Path(args.root)
    library = Library(Settings(home=root / "home"))
    library.vectors  # noqa: B018 - read and checked, as an indexing run has them
    library.embedder  # noqa: B018
    open_rss = peak_rss_mb()
    keyword = library.keyword
    t0 = time.monotonic()
    keyword.refresh(force_merge=True)  # as indexing merges: the old base carried over
    merge_s = time.monotonic() - t0
    out: dict[str, object] = {
        "indexing_open_peak_rss_mb": open_rss,
        "keyword_merge_s": round(merge_s, 1),
        "keyword_merge_peak_rss_mb": peak_rss_mb(),
    }
    # As a keyword file rebuilt after damage or an upgrade is: every passage read again.
    keyword.upkeep._carries = lambda cur, old: False  # type: ignore[method-assign]
    t0 = time.monotonic()
    keyword.refresh(force_merge=True)
    out["keyword_reread_s"] = round(time.monotonic() - t0, 1)
    out["keyword_reread_peak_rss_mb"] = peak_rss_mb()
    library.vectors.save()
    out["indexing_peak_rss_mb"] = peak_rss_mb()
    library.close()
    spill = Settings(home=root / "home").home
    out["spill_left_after_close"] = sorted(
        str(p.relative_to(spill)) for p in spill.rglob("*.tmp") if p.is_dir() and any(p.iterdir())
    )
    return out


# --- driver --------------------------------------------------------------------------


def run_child(step: str, args: argparse.Namespace, size: int, root: Path) -> dict:
    step, _, warm = step.partition("-")
    cmd = [
        sys.executable,
        __file__,
        "--child",
        step,
        "--warm",
        warm or "on",
        "--size",
        str(size),
        "--root",
        str(root),
        "--distinct",
        str(args.distinct),
        "--noise",
        str(args.noise),
        "--queries",
        str(args.queries),
        "--baseline-max",
        str(args.baseline_max),
    ]
    done = subprocess.run(cmd, stdout=subprocess.PIPE, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def slope(sizes: list[int], values: list[float]) -> float | None:
    if len(sizes) < 2:
        return None
    x, y = np.log(np.array(sizes, dtype=float)), np.log(np.array(values, dtype=float))
    return round(float(np.polyfit(x, y, 1)[0]), 3)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes", default="10000,100000,300000,1000000")
    parser.add_argument("--quick", action="store_true", help="2k and 10k chunks, 30 queries")
    parser.add_argument("--distinct", type=int, default=3_000)
    parser.add_argument("--noise", type=float, default=0.3)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--baseline-max", type=int, default=100_000)
    parser.add_argument("--root", default="/tmp/lectern-scale")
    parser.add_argument("--keep", action="store_true")
    parser.add_argument(
        "--reuse",
        action="store_true",
        help="measure the libraries a --keep run left under --root instead of building them",
    )
    parser.add_argument("--child", choices=("build", "measure", "cold", "rebuild", "merge"))
    parser.add_argument("--warm", choices=("on", "off"), default="on", help="cold: read-ahead")
    parser.add_argument("--size", type=int)
    args = parser.parse_args()
    if args.child:
        result = {
            "build": child_build,
            "measure": child_measure,
            "cold": child_cold,
            "rebuild": child_rebuild,
            "merge": child_merge,
        }[args.child](args)
        print(json.dumps(result))
        return 0
    if args.quick:
        args.sizes, args.queries = "2000,10000", min(args.queries, 30)
    sizes = [int(s) for s in args.sizes.split(",")]
    load_before = os.getloadavg()[0]
    rows = []
    for size in sizes:
        root = Path(args.root) / f"{size}"
        reused = args.reuse and (root / "build.json").exists()
        if reused:
            log(f"{size} chunks: measuring the library kept under {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)
            log(f"{size} chunks: building under {root}")
        try:
            row = {"size": size, "reused_build": reused}
            steps = ("measure", "cold-off", "cold-on", "rebuild", "merge")
            if reused:
                row.update(json.loads((root / "build.json").read_text()))
            else:
                steps = ("build", *steps)
            for step in steps:
                t0 = time.monotonic()
                row.update(run_child(step, args, size, root))
                log(f"  {step} done in {time.monotonic() - t0:.0f} s")
            rows.append(row)
            dense, hnsw = row["dense_index"], row.get("hnsw_before") or {}
            print(
                f"{row['chunks']:>8} chunks | bm25 {row['bm25']['p50_ms']}/{row['bm25']['p95_ms']}"
                f" ms | dense {row['dense']['p50_ms']}/{row['dense']['p95_ms']} ms (index "
                f"{dense['p50_ms']}/{dense['p95_ms']} ms, recall@10 {dense['recall_at_10']}"
                f"{', HNSW before ' + str(hnsw['recall_at_10']) if hnsw else ''}) | hybrid "
                f"{row['hybrid']['p50_ms']}/{row['hybrid']['p95_ms']} ms (first stage "
                f"{row['hybrid_first_stage']['p50_ms']}/{row['hybrid_first_stage']['p95_ms']}"
                " ms) | open "
                f"{row['open_s']} s | vector rebuild {row['vector_rebuild_s']} s"
                f"{' (HNSW ' + str(hnsw['build_s']) + ' s)' if hnsw else ''} | keyword rebuild "
                f"{row['keyword_rebuild_s']} s | RSS search {row['search_peak_rss_mb']} MB, "
                f"rebuild {row['rebuild_peak_rss_mb']} MB, keyword merge "
                f"{row['keyword_merge_peak_rss_mb']} MB ({row['keyword_merge_s']} s), "
                f"reread {row['keyword_reread_peak_rss_mb']} MB ({row['keyword_reread_s']} s)"
                " | disk "
                f"{row['disk_mb']} MB "
                f"(vectors {row['vector_file_mb']} MB)",
                flush=True,
            )
        finally:
            if not args.keep and not args.reuse:
                shutil.rmtree(root, ignore_errors=True)
    measured = [r["size"] for r in rows]
    growth = {mode: slope(measured, [r[mode]["p95_ms"] for r in rows]) for mode in (*MODES,)} | {
        "dense_index": slope(measured, [r["dense_index"]["p95_ms"] for r in rows])
    }
    result = {
        "sizes": rows,
        "growth_exponent_p95": growth,
        "embedding_noise": args.noise,
        "distinct_embeddings": args.distinct,
        "queries": args.queries,
        "query_split": "scifact train",
        "cpu_count": os.cpu_count(),
        "load_avg_1m_before": round(load_before, 2),
        "load_avg_1m_after": round(os.getloadavg()[0], 2),
        "quick": args.quick,
        "duckdb_memory_limit": MEMORY_LIMIT,
    }
    emit("scale", result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
