"""Indexing benchmark: the encoding path picked for this CPU, the token sort, the query lane,
and the whole pipeline against the raw model, each measured against its baseline in the
same run (the machine is shared, so only same-run ratios mean anything).

1. Encoding: fp32 against the picked path (and bf16 forced), on 1 and 2 threads, in
   interleaved rounds over the same real chunk texts.
2. Token-slot fill: the share of padded slots holding real tokens, with batches sorted by
   characters (as sentence-transformers does) and by token count (as embed() does).
3. Query latency while an indexing embed() runs: with the query lane, and with one lock
   held for the whole call (the old behaviour), against idle.
4. Pipeline against the raw model: the real Library/Indexer over folders of Markdown built
   from real sentences (SciFact abstracts), in short rounds alternating with the raw
   model on the very chunk texts the round produced, which of the two goes first
   alternating too (ABBA: a drift in the machine's speed favours neither). A keyword
   rebuild the run leaves in the background is timed as the pipeline's. CPU time and
   wall throughput, over all rounds and as the median round.

Usage:

    .venv/bin/python bench/indexing.py                 # about 10 minutes on 2 busy cores
    .venv/bin/python bench/indexing.py --rounds 3 --files-per-round 2   # a quicker run

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
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.record import emit
from bench.synthetic_library import percentile, real_sentences
from core.config import Settings
from core.embedding.batching import WIDTH_STEP, plan_batches, token_fill
from core.embedding.models import SentenceTransformerEmbedder, load_embedder
from core.library import Library

SECTIONS_PER_FILE = 50
INDEXER_CALL = 64  # texts per embed() call from the indexer (EMBED_BATCH_CHUNKS)
ST_BATCH = 32  # sentence-transformers' batch size, the old path's


def write_folder(folder: Path, files: int, rng: random.Random, sentences: list[str]) -> None:
    folder.mkdir(parents=True)
    for f in range(files):
        lines = [f"# Research notes {folder.name} {f}\n"]
        for s in range(SECTIONS_PER_FILE):
            picked = rng.sample(sentences, rng.randint(2, 5))
            lines.append(f"## Finding {f}.{s}\n\n{' '.join(picked)}\n")
        (folder / f"notes-{f:05d}.md").write_text("\n".join(lines), encoding="utf-8")


def chunk_like_texts(count: int, rng: random.Random, sentences: list[str]) -> list[str]:
    """Texts as the indexer embeds them: two to five real sentences under a heading."""
    return [
        f"Research notes > Finding {i}\n" + " ".join(rng.sample(sentences, rng.randint(2, 5)))
        for i in range(count)
    ]


@contextmanager
def clocks() -> Iterator[dict[str, float]]:
    out: dict[str, float] = {}
    wall, cpu = time.perf_counter(), time.process_time()
    yield out
    out["wall"], out["cpu"] = time.perf_counter() - wall, time.process_time() - cpu


def raw_encode(embedder: SentenceTransformerEmbedder, texts: list[str]) -> np.ndarray:
    """The model alone on ``texts``, in calls the size the indexer makes."""
    return np.vstack(
        [
            embedder.embed(texts[i : i + INDEXER_CALL], batch_size=ST_BATCH)
            for i in range(0, len(texts), INDEXER_CALL)
        ]
    )


def encoding_matrix(
    paths: dict[str, SentenceTransformerEmbedder], texts: list[str], rounds: int
) -> dict[str, dict[str, float]]:
    """Passages/s (wall) and per CPU-second for each path and thread count, in rounds that
    alternate between them so load changes hit them all alike."""
    configs = [(name, t) for name in paths for t in (1, 2) if t <= (os.cpu_count() or 1)]
    totals = {f"{n}@{t}": {"wall": 0.0, "cpu": 0.0, "n": 0} for n, t in configs}
    for name, _ in configs:
        raw_encode(paths[name], texts[:8])  # warm each model once
    for r in range(rounds):
        for name, threads in configs if r % 2 == 0 else configs[::-1]:
            embedder = paths[name]
            saved, embedder.threads = embedder.threads, threads
            with clocks() as c:
                raw_encode(embedder, texts)
            embedder.threads = saved
            slot = totals[f"{name}@{threads}"]
            slot["wall"] += c["wall"]
            slot["cpu"] += c["cpu"]
            slot["n"] += len(texts)
    return {
        k: {
            "passages_per_s": round(v["n"] / v["wall"], 2),
            "passages_per_cpu_s": round(v["n"] / v["cpu"], 2),
        }
        for k, v in totals.items()
    }


def cosine_min(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.min(np.sum(a * b, axis=1)))


def fill_figures(embedder: SentenceTransformerEmbedder, texts: list[str]) -> dict[str, float]:
    """Token-slot fill per indexer call: char sort in batches of 32 against token sort."""
    lengths_all: list[int] = []
    char_batches: list[list[int]] = []
    token_batches: list[list[int]] = []
    token32_batches: list[list[int]] = []
    for start in range(0, len(texts), INDEXER_CALL):
        group = texts[start : start + INDEXER_CALL]
        lengths, batches = embedder.batch_plan(group, batch_size=ST_BATCH)
        base = len(lengths_all)
        lengths_all.extend(lengths)
        by_chars = sorted(range(len(group)), key=lambda i: -len(group[i]))
        char_batches += [
            [base + i for i in by_chars[s : s + ST_BATCH]] for s in range(0, len(group), ST_BATCH)
        ]
        token_batches += [[base + i for i in b] for b in batches]
        token32_batches += [[base + i for i in b] for b in plan_batches(lengths, ST_BATCH, 1 << 30)]
    lengths, batches = embedder.batch_plan(texts[:1024], batch_size=ST_BATCH)
    by_chars_1024 = sorted(range(len(lengths)), key=lambda i: -len(texts[i]))
    return {
        "fill_char_sort_batch32": round(token_fill(lengths_all, char_batches), 4),
        "fill_token_sort_batch32": round(token_fill(lengths_all, token32_batches), 4),
        # As embed() runs them: padded to a multiple of WIDTH_STEP word pieces.
        "fill_token_sort_sub_batches": round(token_fill(lengths_all, token_batches, WIDTH_STEP), 4),
        "fill_char_sort_groups_1024": round(
            token_fill(
                lengths,
                [by_chars_1024[s : s + ST_BATCH] for s in range(0, len(lengths), ST_BATCH)],
            ),
            4,
        ),
        "fill_token_sort_groups_1024": round(
            token_fill(lengths, plan_batches(lengths, ST_BATCH, 1 << 30)), 4
        ),
    }


def query_latency(
    embedder: SentenceTransformerEmbedder, texts: list[str], queries: list[str]
) -> dict[str, float]:
    """A query's embedding while the indexer's embed() calls run back to back on another
    thread: through the lane, and through one lock held per whole call (the old code)."""
    idle = []
    for q in queries:
        with clocks() as c:
            embedder.embed_query([q])
        idle.append(c["wall"])
    result = {"idle_p50_ms": round(1000 * statistics.median(idle), 1)}
    old_lock = threading.Lock()

    def old_index(batch: list[str]) -> None:
        with old_lock:
            embedder.embed(batch, batch_size=ST_BATCH)

    def old_query(q: str) -> None:
        with old_lock:
            embedder.embed_query([q])

    def new_index(batch: list[str]) -> None:
        embedder.embed(batch, batch_size=ST_BATCH)

    def new_query(q: str) -> None:
        embedder.embed_query([q])

    variants: list[tuple[str, Callable[[list[str]], None], Callable[[str], None]]] = [
        ("one_lock", old_index, old_query),
        ("lane", new_index, new_query),
    ]
    rng = random.Random(3)
    for name, index, query in variants:
        stop = threading.Event()

        def indexer(
            index: Callable[[list[str]], None] = index, stop: threading.Event = stop
        ) -> None:
            i = 0
            while not stop.is_set():
                index(texts[i : i + INDEXER_CALL] or texts[:INDEXER_CALL])
                i = (i + INDEXER_CALL) % max(1, len(texts) - INDEXER_CALL)

        worker = threading.Thread(target=indexer, daemon=True)
        worker.start()
        time.sleep(0.5)
        waits = []
        for q in queries:
            with clocks() as c:
                query(q)
            waits.append(c["wall"])
            time.sleep(rng.uniform(0.05, 0.4))  # queries arrive at random points of a call
        stop.set()
        worker.join()
        result[f"{name}_p50_ms"] = round(1000 * statistics.median(waits), 1)
        result[f"{name}_max_ms"] = round(1000 * max(waits), 1)
    return result


def chunk_texts(library: Library, folder: Path) -> list[str]:
    """The embedding texts indexing ``folder`` will produce, read and chunked ahead by the
    library's own indexer (so the raw model can go first on the very same texts)."""
    indexer = library.indexer
    texts = []
    for info in indexer.plan([str(folder)]).to_index:
        prepared = indexer._prepare(info)
        texts.extend(chunk.embedding_text for chunk in prepared.chunks)
    return texts


def timed_pipeline(library: Library, folder: Path) -> tuple[dict[str, float], int]:
    with clocks() as p:
        report = library.index([folder])
        # A keyword base rebuild the run started in the background is indexing work:
        # timed here, and never left running into the raw model's turn.
        library.keyword.wait_for_merge()
    return p, report.chunks_embedded


def timed_raw(embedder: SentenceTransformerEmbedder, texts: list[str]) -> dict[str, float]:
    with clocks() as c:
        raw_encode(embedder, texts)
    return c


def pipeline_against_raw(
    embedder: SentenceTransformerEmbedder,
    root: Path,
    rounds: int,
    files: int,
    rng: random.Random,
    sentences: list[str],
) -> tuple[dict[str, object], Library]:
    library = Library(Settings(home=root / "home"), embedder=embedder)
    folders = [root / f"corpus-{r}" for r in range(rounds + 1)]
    for folder in folders:
        write_folder(folder, files, rng, sentences)
    cursor = library.db.cursor()

    def last_chunk_id() -> int:
        row = cursor.execute("SELECT coalesce(max(id), 0) FROM chunks").fetchone()
        return int(row[0]) if row else 0

    def texts_after(chunk_id: int) -> list[str]:
        rows = cursor.execute(
            "SELECT coalesce(context, ''), text FROM chunks WHERE id > ? ORDER BY id", [chunk_id]
        ).fetchall()
        return [f"{ctx}\n{text}" if ctx else text for ctx, text in rows]

    library.index([folders[0]])  # warm-up: first writes, vector file, keyword index
    library.keyword.wait_for_merge()
    totals = {k: 0.0 for k in ("p_wall", "p_cpu", "p_n", "r_wall", "r_cpu", "r_n")}
    per_round = []
    for r, folder in enumerate(folders[1:]):
        before = last_chunk_id()
        if r % 2 == 0:  # pipeline first, then the raw model on what it produced
            p, embedded = timed_pipeline(library, folder)
            texts = texts_after(before)
            c = timed_raw(embedder, texts)
        else:  # the raw model first (on this round's texts, chunked ahead), then the pipeline
            texts = chunk_texts(library, folder)
            c = timed_raw(embedder, texts)
            p, embedded = timed_pipeline(library, folder)
            if sorted(texts_after(before)) != sorted(texts):
                raise SystemExit("the raw model's texts differ from the pipeline's chunks")
        totals["p_wall"] += p["wall"]
        totals["p_cpu"] += p["cpu"]
        totals["p_n"] += embedded
        totals["r_wall"] += c["wall"]
        totals["r_cpu"] += c["cpu"]
        totals["r_n"] += len(texts)
        per_round.append(round((embedded / p["wall"]) / (len(texts) / c["wall"]), 3))
        print(
            f"round {r}: pipeline {embedded} chunks in {p['wall']:.1f} s, "
            f"raw model {len(texts)} in {c['wall']:.1f} s "
            f"({'pipeline' if r % 2 == 0 else 'raw model'} first)",
            flush=True,
        )
    pipeline_rate = totals["p_n"] / totals["p_wall"]
    raw_rate = totals["r_n"] / totals["r_wall"]
    return {
        "pipeline_chunks_per_s": round(pipeline_rate, 2),
        "raw_chunks_per_s": round(raw_rate, 2),
        "pipeline_vs_raw_wall": round(pipeline_rate / raw_rate, 3),
        "pipeline_chunks_per_cpu_s": round(totals["p_n"] / totals["p_cpu"], 2),
        "raw_chunks_per_cpu_s": round(totals["r_n"] / totals["r_cpu"], 2),
        "pipeline_vs_raw_cpu": round(
            (totals["p_n"] / totals["p_cpu"]) / (totals["r_n"] / totals["r_cpu"]), 3
        ),
        "pipeline_vs_raw_wall_per_round": per_round,
        # Rounds alternate which of the two goes first (ABBA), so a drift in the
        # machine's speed over a pair does not favour either; the median resists one
        # round that a neighbour's burst of work slowed.
        "pipeline_vs_raw_wall_median": round(statistics.median(per_round), 3),
        "pipeline_chunks": int(totals["p_n"]),
    }, library


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=6, help="pipeline/raw round pairs")
    parser.add_argument("--files-per-round", type=int, default=4, help="50 sections a file")
    parser.add_argument("--encoding-texts", type=int, default=96)
    parser.add_argument("--encoding-rounds", type=int, default=2)
    parser.add_argument("--queries", type=int, default=30)
    args = parser.parse_args()
    rng = random.Random(7)
    sentences = real_sentences(random.Random(7), 60_000)
    embedder = load_embedder()
    assert isinstance(embedder, SentenceTransformerEmbedder)
    result: dict[str, object] = {
        "cpu_count": os.cpu_count(),
        "encoding": {
            "precision": embedder.encoding.precision,
            "threads": embedder.encoding.threads,
            "sub_batch_tokens": embedder.encoding.sub_batch_tokens,
            "source": embedder.encoding.source,
            "probe": embedder.encoding.figures,
        },
    }
    # Chunk-like texts: 2-5 real sentences under a heading, as the indexer embeds them.
    texts = chunk_like_texts(max(args.encoding_texts, 1024), rng, sentences)
    sample = texts[: args.encoding_texts]

    fp32 = SentenceTransformerEmbedder(encoding="fp32")
    paths = {"fp32": fp32, "picked": embedder}
    if embedder.encoding.precision != "bf16":
        paths["bf16"] = SentenceTransformerEmbedder(encoding="bf16")
    matrix = encoding_matrix(paths, sample, args.encoding_rounds)
    result["encoding_matrix"] = matrix
    best_threads = str(embedder.threads)
    result["picked_vs_fp32_wall"] = round(
        matrix[f"picked@{best_threads}"]["passages_per_s"]
        / matrix[f"fp32@{best_threads}"]["passages_per_s"],
        3,
    )
    result["picked_vs_fp32_cpu"] = round(
        matrix["picked@1"]["passages_per_cpu_s"] / matrix["fp32@1"]["passages_per_cpu_s"], 3
    )
    exact = fp32.embed(sample)
    result["cosine_min_picked_to_fp32"] = round(cosine_min(embedder.embed(sample), exact), 6)
    queries = [" ".join(rng.choice(sentences).split()[:8]) for _ in range(args.queries)]
    result["cosine_min_queries_to_fp32"] = round(
        cosine_min(
            np.vstack([embedder.embed_query([q]) for q in queries[:10]]),
            np.vstack([fp32.embed_query([q]) for q in queries[:10]]),
        ),
        6,
    )
    query_ms = {}
    for name, model in (("fp32", fp32), ("picked", embedder)):
        with clocks() as c:
            for q in queries[:10]:
                model.embed_query([q])
        query_ms[name] = round(1000 * c["wall"] / 10, 1)
    result["query_ms_idle"] = query_ms
    del fp32, paths

    result["token_fill"] = fill_figures(embedder, texts)
    result["query_while_indexing"] = query_latency(embedder, texts, queries)
    print(json.dumps(result), flush=True)

    with tempfile.TemporaryDirectory(prefix="lectern-bench-") as tmp:
        pipeline, library = pipeline_against_raw(
            embedder, Path(tmp), args.rounds, args.files_per_round, rng, sentences
        )
        result["pipeline"] = pipeline
        library.search(queries[0])  # warm caches
        latencies = []
        for q in queries:
            with clocks() as c:
                library.search(q, k=6, mode="hybrid")
            latencies.append(c["wall"])
        result["hybrid_query_p50_ms"] = round(1000 * statistics.median(latencies), 1)
        result["hybrid_query_p95_ms"] = round(1000 * percentile(latencies, 0.95), 1)
        library.close()

    result["peak_rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
    fill = result["token_fill"]
    lane = result["query_while_indexing"]
    assert isinstance(fill, dict) and isinstance(lane, dict)
    print(
        f"encoding {embedder.encoding.precision} on {embedder.threads} thread(s): "
        f"{result['picked_vs_fp32_wall']}x fp32 (wall), {result['picked_vs_fp32_cpu']}x (CPU, "
        f"1 thread), cosine >= {result['cosine_min_picked_to_fp32']}; token fill "
        f"{fill['fill_char_sort_batch32']} -> {fill['fill_token_sort_sub_batches']}; query "
        f"while indexing p50/max {lane['one_lock_p50_ms']}/{lane['one_lock_max_ms']} ms with "
        f"one lock, {lane['lane_p50_ms']}/{lane['lane_max_ms']} ms with the lane; pipeline/raw "
        f"{pipeline['pipeline_vs_raw_wall']} wall, {pipeline['pipeline_vs_raw_cpu']} CPU"
    )
    emit("indexing", result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
