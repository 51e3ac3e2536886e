"""Indexing benchmark: pipeline throughput against the raw model, query latency,
one-file freshness and peak memory, all measured in the same run.

The corpus is synthetic Markdown built from real sentences (SciFact abstracts): each file
has sections of a few sentences, so chunk sizes look like real notes. Usage:

    .venv/bin/python bench/indexing.py                 # 100k chunks (hours on 2 CPU cores)
    .venv/bin/python bench/indexing.py --chunks 5000   # a quicker run

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
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from core.config import Settings
from core.embedding import load_embedder
from core.library import Library
from core.text import split_sentences

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"
SECTIONS_PER_FILE = 50


def real_sentences(limit: int = 60_000) -> list[str]:
    sentences: list[str] = []
    with open(SHARED / "scifact" / "corpus.jsonl", encoding="utf-8") as handle:
        for line in handle:
            text = json.loads(line)["text"]
            sentences.extend(text[s:e] for s, e in split_sentences(text) if 40 < e - s < 400)
            if len(sentences) >= limit:
                break
    return sentences


def write_corpus(folder: Path, chunks: int, rng: random.Random, sentences: list[str]) -> int:
    files = max(1, chunks // SECTIONS_PER_FILE)
    for f in range(files):
        lines = [f"# Research notes {f}\n"]
        for s in range(SECTIONS_PER_FILE):
            picked = rng.sample(sentences, 3)
            lines.append(f"## Finding {f}.{s}\n\n{' '.join(picked)}\n")
        (folder / f"notes-{f:05d}.md").write_text("\n".join(lines), encoding="utf-8")
    return files


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--chunks", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument(
        "--model-sample", type=int, default=2000, help="chunks encoded by the raw model"
    )
    args = parser.parse_args()
    rng = random.Random(7)
    sentences = real_sentences()
    with tempfile.TemporaryDirectory(prefix="lectern-bench-") as tmp:
        root = Path(tmp)
        corpus = root / "corpus"
        corpus.mkdir()
        files = write_corpus(corpus, args.chunks, rng, sentences)
        embedder = load_embedder()
        library = Library(Settings(home=root / "home"), embedder=embedder)

        t0 = time.monotonic()
        report = library.index([corpus])
        index_s = time.monotonic() - t0
        chunks = int(library.status()["chunks"])
        pipeline_rate = report.chunks_embedded / index_s

        # The raw model on the same chunk texts (a spread sample), same process, same run.
        sample = int(min(args.model_sample, chunks))
        sample_sql = f"SELECT context || chr(10) || text FROM chunks USING SAMPLE reservoir({sample} ROWS) REPEATABLE (7)"
        rows = library.db.cursor().execute(sample_sql).fetchall()
        texts = [r[0] for r in rows]
        t0 = time.monotonic()
        for i in range(0, len(texts), 64):
            embedder.embed(texts[i : i + 64])
        model_rate = len(texts) / (time.monotonic() - t0)

        queries = [" ".join(rng.choice(sentences).split()[:8]) for _ in range(args.queries)]
        library.search(queries[0])  # warm caches
        latencies = []
        for q in queries:
            t0 = time.monotonic()
            library.search(q, k=6, mode="hybrid")
            latencies.append(time.monotonic() - t0)

        target = corpus / "notes-00000.md"
        marker = "Zanzibar quokka telemetry shows a 42.7 percent drift"
        t0 = time.monotonic()
        target.write_text(
            target.read_text(encoding="utf-8") + f"\n## Late finding\n\n{marker}.\n",
            encoding="utf-8",
        )
        library.sync_files([str(target)])
        found = any(marker in h.text for h in library.search(marker, k=3))
        change_s = time.monotonic() - t0
        library.close()

    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    child_mb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    result = {
        "files": files,
        "chunks": chunks,
        "index_s": round(index_s, 1),
        "pipeline_chunks_per_s": round(pipeline_rate, 2),
        "model_chunks_per_s": round(model_rate, 2),
        "pipeline_vs_model": round(pipeline_rate / model_rate, 3),
        "query_p50_ms": round(1000 * statistics.median(latencies), 1),
        "query_p95_ms": round(1000 * percentile(latencies, 0.95), 1),
        "one_file_change_to_searchable_s": round(change_s, 2),
        "changed_text_found": found,
        "peak_rss_mb": round(peak_mb, 1),
        "parser_worker_peak_rss_mb": round(child_mb, 1),
        "cpu_count": os.cpu_count(),
    }
    print(
        f"{chunks} chunks in {index_s:.0f} s: pipeline {pipeline_rate:.1f} chunks/s vs raw model "
        f"{model_rate:.1f} chunks/s ({100 * (1 - pipeline_rate / model_rate):.1f}% lost); hybrid query "
        f"p50 {result['query_p50_ms']} ms, p95 {result['query_p95_ms']} ms; one changed file searchable "
        f"in {change_s:.2f} s; peak RSS {peak_mb:.0f} MB"
    )
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
