"""Time to first search, and search while indexing.

A folder of ``--files`` Markdown notes (sections of real SciFact sentences, each file with
one word of its own) is indexed by the real pipeline and model while a probe thread
searches it. Measured in the same run:

- the time from the start of indexing to the first keyword hit, and to every file being
  keyword-searchable (every file's own word answered by BM25), against the time the
  whole run takes (every passage embedded);
- query latency per mode (keyword, dense, hybrid: SciFact *train* questions) while the
  indexer runs against the same queries once it is idle, and how often dense search could
  not yet see a file that keyword search already found.

    .venv/bin/python bench/first_search.py              # 500 files
    .venv/bin/python bench/first_search.py --files 60   # smoke run

The last line of output is one JSON object with every figure.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.record import emit
from bench.synthetic_library import percentile, real_sentences, train_queries
from core.config import Settings
from core.embedding.models import load_embedder
from core.library import Library
from core.store.lookup import live_chunk_documents

MODES = ("bm25", "dense", "hybrid")


def marker(i: int) -> str:
    # Letters only, so no tokenizer splits it; unlike any English word, so one hit per file.
    return "probe" + "".join(chr(ord("a") + int(d)) for d in f"{i:04d}")


def write_folder(folder: Path, files: int, sentences: list[str], rng: random.Random) -> None:
    for i in range(files):
        sections = [f"# Lab notes {i}\n"]
        for s in range(rng.randint(2, 8)):
            body = " ".join(rng.sample(sentences, 3))
            if s == 0:
                body += f" Reference {marker(i)}."
            sections.append(f"## Finding {i}.{s}\n\n{body}\n")
        (folder / f"notes-{i:04d}.md").write_text("\n".join(sections), encoding="utf-8")


def summary(latencies: dict[str, list[float]]) -> dict[str, dict[str, float]]:
    return {
        mode: {
            "n": len(values),
            "p50_ms": round(1000 * statistics.median(values), 1) if values else 0.0,
            "p95_ms": round(1000 * percentile(values, 0.95), 1),
            "max_ms": round(1000 * max(values), 1) if values else 0.0,
        }
        for mode, values in latencies.items()
    }


def keyword_files(library: Library, files: int) -> int:
    """How many files answer a keyword search for their own word (one query for all)."""
    words = " ".join(marker(i) for i in range(files))
    chunk_ids = [c for c, _ in library.keyword.search(words, files * 4)]
    return len(set(live_chunk_documents(library.db, chunk_ids).values()))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--files", type=int, default=500)
    parser.add_argument("--queries", type=int, default=30)
    args = parser.parse_args()
    rng = random.Random(11)
    sentences = real_sentences(rng, 20_000)
    queries = train_queries(args.queries)
    with tempfile.TemporaryDirectory(prefix="lectern-first-search-") as tmp:
        root = Path(tmp)
        folder = root / "notes"
        folder.mkdir()
        write_folder(folder, args.files, sentences, rng)
        library = Library(Settings(home=root / "home"), embedder=load_embedder())
        library.search("warm up the model and the caches")
        busy: dict[str, list[float]] = {m: [] for m in MODES}
        first_hit: list[float] = []
        all_keyword: list[float] = []
        stop = threading.Event()
        started = time.monotonic()

        def probe() -> None:
            turn = 0
            while not stop.is_set():
                if not all_keyword:
                    found = keyword_files(library, args.files)
                    now = time.monotonic() - started
                    if found and not first_hit:
                        first_hit.append(now)
                    if found >= args.files:
                        all_keyword.append(now)
                mode = MODES[turn % len(MODES)]
                query = queries[(turn // len(MODES)) % len(queries)]
                t0 = time.monotonic()
                library.search(query, k=6, mode=mode)
                if not stop.is_set():
                    busy[mode].append(time.monotonic() - t0)
                turn += 1
                time.sleep(0.05)

        prober = threading.Thread(target=probe, daemon=True)
        prober.start()
        report = library.index([folder])
        total_s = time.monotonic() - started
        stop.set()
        prober.join()
        if not all_keyword:
            all_keyword.append(total_s)  # the probe missed the moment: counted at the end
        idle: dict[str, list[float]] = {m: [] for m in MODES}
        for _ in range(2):
            for query in queries:
                for mode in MODES:
                    t0 = time.monotonic()
                    library.search(query, k=6, mode=mode)
                    idle[mode].append(time.monotonic() - t0)
        status = library.status()
        library.close()

    busy_s, idle_s = summary(busy), summary(idle)
    result = {
        "files": args.files,
        "chunks": status["chunks"],
        "chunks_embedded": report.chunks_embedded,
        "index_total_s": round(total_s, 1),
        "first_keyword_hit_s": round(first_hit[0], 2) if first_hit else None,
        "all_files_keyword_searchable_s": round(all_keyword[0], 2),
        "keyword_searchable_share_of_run": round(all_keyword[0] / total_s, 3),
        "while_indexing": busy_s,
        "idle": idle_s,
        "p50_busy_vs_idle": {
            m: round(busy_s[m]["p50_ms"] / idle_s[m]["p50_ms"], 2) if idle_s[m]["p50_ms"] else None
            for m in MODES
        },
        "p95_busy_vs_idle": {
            m: round(busy_s[m]["p95_ms"] / idle_s[m]["p95_ms"], 2) if idle_s[m]["p95_ms"] else None
            for m in MODES
        },
    }
    print(
        f"{args.files} files, {status['chunks']} passages: first keyword hit at "
        f"{result['first_keyword_hit_s']} s, all keyword-searchable at "
        f"{result['all_files_keyword_searchable_s']} s, all embedded at {total_s:.1f} s"
    )
    for mode in MODES:
        print(
            f"  {mode:6s} while indexing p50 {busy_s[mode]['p50_ms']} ms p95 "
            f"{busy_s[mode]['p95_ms']} ms max {busy_s[mode]['max_ms']} ms; idle p50 "
            f"{idle_s[mode]['p50_ms']} ms p95 {idle_s[mode]['p95_ms']} ms"
        )
    emit("first_search", result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
