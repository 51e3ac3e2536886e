"""Freshness benchmark: with the folder watcher running on a large index, how long from
saving a file to its text being returned by search, from deleting a file to its chunks
no longer being returned, and how fast a 1,000-file bulk copy is taken in.

Building a 100k-chunk index through the model takes hours on 2 CPU cores (~13 chunks/s),
and the index is only the backdrop here. So the base index is written directly through
the store layer: real Markdown files on disk (sections of real SciFact sentences), one
chunk per section with its real offsets, and embeddings computed once by the real model
for ``--distinct`` section texts and reused across the files (a section's vector is that
of its text without the heading prefix). The fts base index and the vector index are then
built the normal way. Everything measured afterwards is the live path: real watchdog
events, the real watcher, parser, model and search.

    .venv/bin/python bench/freshness.py            # 100k chunks
    .venv/bin/python bench/freshness.py --quick    # smoke run (5k chunks, fewer files)

The last line of output is one JSON object with every figure.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import resource
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from core.config import Settings
from core.embedding import load_embedder
from core.library import Library
from core.text import split_sentences
from core.watch import FolderWatcher

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"
SECTIONS_PER_FILE = 50
WORDS = [
    "river",
    "delta",
    "sediment",
    "nitrogen",
    "cohort",
    "enzyme",
    "protein",
    "lattice",
    "glacier",
    "pollen",
    "signal",
    "receptor",
    "isotope",
    "plasma",
    "membrane",
    "cortex",
    "tundra",
    "aquifer",
    "catalyst",
    "genome",
]


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def real_sentences(rng: random.Random, limit: int = 40_000) -> list[str]:
    path = SHARED / "scifact" / "corpus.jsonl"
    sentences: list[str] = []
    if path.exists():
        with open(path, encoding="utf-8") as handle:
            for line in handle:
                text = json.loads(line)["text"]
                sentences.extend(text[s:e] for s, e in split_sentences(text) if 40 < e - s < 300)
                if len(sentences) >= limit:
                    break
    if not sentences:  # no evaluation data here: plain synthetic sentences
        for i in range(5_000):
            words = " ".join(rng.choice(WORDS) for _ in range(14))
            sentences.append(f"Study {i} reports that {words}.")
    return sentences


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, int(np.ceil(q * len(ordered))) - 1))]


def build_base(
    library: Library, corpus: Path, chunks: int, distinct: int, rng: random.Random
) -> dict[str, float]:
    """Write the files and insert their documents, text and chunks in bulk."""
    sentences = real_sentences(rng)
    embedder = library.embedder
    pool: list[str] = []
    pool_tokens: list[int] = []
    while len(pool) < distinct:
        text = " ".join(rng.sample(sentences, 3))
        count = embedder.count_tokens(text)
        if count <= 180:  # with its heading prefix, well inside the model's 256
            pool.append(text)
            pool_tokens.append(count)
    t0 = time.monotonic()
    vectors = np.zeros((distinct, embedder.dim), dtype=np.float32)
    for i in range(0, distinct, 64):
        vectors[i : i + 64] = embedder.embed(pool[i : i + 64])
        if i % 640 == 0:
            log(f"  embedded {i + len(pool[i : i + 64])}/{distinct} distinct texts")
    embed_s = time.monotonic() - t0

    t0 = time.monotonic()
    files = max(1, -(-chunks // SECTIONS_PER_FILE))
    cur = library.db.cursor()
    doc_ids = [
        r[0]
        for r in cur.execute("SELECT nextval('document_ids') FROM range(?)", [files]).fetchall()
    ]
    chunk_ids = [
        r[0]
        for r in cur.execute(
            "SELECT nextval('chunk_ids') FROM range(?)", [files * SECTIONS_PER_FILE]
        ).fetchall()
    ]
    docs: dict[str, list] = {k: [] for k in ("id", "path", "size", "mtime", "hash", "title")}
    texts: list[str] = []
    rows: dict[str, list] = {
        k: []
        for k in ("id", "document_id", "ordinal", "text", "context", "start", "end", "heading")
    }
    embeddings: list[bytes] = []
    tokens: list[int] = []
    folder = str(corpus)
    for f in range(files):
        title = f"Research notes {f}"
        parts = [f"# {title}\n"]
        offset = len(parts[0]) + 1
        sections = []
        for s in range(SECTIONS_PER_FILE):
            k = rng.randrange(distinct)
            heading = f"## Finding {f}.{s}\n\n"
            start = offset + len(heading)
            sections.append((s, k, start, start + len(pool[k]), f"Finding {f}.{s}"))
            parts.append(heading + pool[k] + "\n")
            offset += len(heading) + len(pool[k]) + 1 + 1
        text = "\n".join(parts)
        path = corpus / f"notes-{f:05d}.md"
        path.write_text(text, encoding="utf-8")
        st = path.stat()
        doc_id = doc_ids[f]
        docs["id"].append(doc_id)
        docs["path"].append(str(path))
        docs["size"].append(st.st_size)
        docs["mtime"].append(st.st_mtime)
        docs["hash"].append(hashlib.sha256(text.encode("utf-8")).hexdigest())
        docs["title"].append(title)
        texts.append(text)
        for s, k, start, end, heading in sections:
            assert text[start:end] == pool[k]
            rows["id"].append(chunk_ids[f * SECTIONS_PER_FILE + s])
            rows["document_id"].append(doc_id)
            rows["ordinal"].append(s)
            rows["text"].append(pool[k])
            rows["context"].append(library.chunker.context_for(title, (title, heading)))
            rows["start"].append(start)
            rows["end"].append(end)
            rows["heading"].append(json.dumps([title, heading]))
            embeddings.append(vectors[k].tobytes())
            tokens.append(pool_tokens[k])
    write_files_s = time.monotonic() - t0

    t0 = time.monotonic()
    # Bulk inserts from numpy columns (DuckDB scans them in place; per-row is ~1000x slower).
    new_docs = {  # noqa: F841 - read by DuckDB's replacement scan
        "id": np.array(docs["id"], dtype=np.int64),
        "path": np.array(docs["path"], dtype=object),
        "size": np.array(docs["size"], dtype=np.int64),
        "mtime": np.array(docs["mtime"], dtype=np.float64),
        "hash": np.array(docs["hash"], dtype=object),
        "title": np.array(docs["title"], dtype=object),
        "text": np.array(texts, dtype=object),
    }
    new_chunks = {  # noqa: F841 - read by DuckDB's replacement scan
        "id": np.array(rows["id"], dtype=np.int64),
        "document_id": np.array(rows["document_id"], dtype=np.int64),
        "ordinal": np.array(rows["ordinal"], dtype=np.int32),
        "text": np.array(rows["text"], dtype=object),
        "context": np.array(rows["context"], dtype=object),
        "start_char": np.array(rows["start"], dtype=np.int64),
        "end_char": np.array(rows["end"], dtype=np.int64),
        "heading_path": np.array(rows["heading"], dtype=object),
        "token_count": np.array(tokens, dtype=np.int32),
        "embedding": np.array(embeddings, dtype=object),
    }
    with library.db.transaction() as tx:
        tx.execute(
            """INSERT INTO documents(id, path, folder, size, mtime, content_hash, type, title, pages,
                   state, reason, chunks, index_config, indexed_at)
               SELECT id, path, ?, size, mtime, hash, 'md', title, 0, 'indexed', '', ?, ?,
                   current_timestamp FROM new_docs""",
            [folder, SECTIONS_PER_FILE, library.index_config],
        )
        tx.execute("INSERT INTO document_text SELECT id, text, '[]' FROM new_docs")
        tx.execute(
            """INSERT INTO chunks(id, document_id, ordinal, text, context, start_char, end_char,
                   page_start, page_end, heading_path, token_count, embedding)
               SELECT id, document_id, ordinal, text, context, start_char, end_char, NULL, NULL,
                   heading_path, token_count, embedding::BLOB FROM new_chunks"""
        )
        version = int(library.db.get_meta("content_version", "0") or 0) + 1
        library.db.set_meta("content_version", str(version), tx)
    library.db.checkpoint()
    insert_s = time.monotonic() - t0

    t0 = time.monotonic()
    library.keyword.refresh(force_merge=True)
    fts_s = time.monotonic() - t0
    t0 = time.monotonic()
    library.vectors.reconcile()  # every chunk is missing from the empty file: a full build
    vectors_s = time.monotonic() - t0
    return {
        "files": files,
        "distinct_embeddings": distinct,
        "embed_distinct_s": round(embed_s, 1),
        "write_files_s": round(write_files_s, 1),
        "insert_s": round(insert_s, 1),
        "fts_base_build_s": round(fts_s, 1),
        "vector_index_build_s": round(vectors_s, 1),
    }


def wait_for(predicate, timeout: float = 300.0, poll: float = 0.0) -> float:
    """Seconds until ``predicate()`` holds (checked back to back, or every ``poll``)."""
    t0 = time.monotonic()
    while not predicate():
        if time.monotonic() - t0 > timeout:
            raise TimeoutError("condition not reached")
        if poll:
            time.sleep(poll)
    return time.monotonic() - t0


def returned(library: Library, marker: str) -> bool:
    return any(marker in h.text for h in library.search(marker, k=10))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--chunks", type=int, default=100_000)
    parser.add_argument("--distinct", type=int, default=2_000, help="texts embedded for the base")
    parser.add_argument("--edits", type=int, default=20)
    parser.add_argument("--deletes", type=int, default=20)
    parser.add_argument("--bulk", type=int, default=1_000)
    parser.add_argument("--quick", action="store_true", help="smoke run: small index, 200 files")
    args = parser.parse_args()
    if args.quick:
        args.chunks, args.distinct, args.bulk = min(args.chunks, 5_000), 200, 200
    rng = random.Random(11)
    load_before = os.getloadavg()[0]
    embedder = load_embedder()
    with tempfile.TemporaryDirectory(prefix="lectern-freshness-") as tmp:
        root = Path(tmp)
        corpus = root / "corpus"
        corpus.mkdir()
        library = Library(Settings(home=root / "home"), embedder=embedder)
        library.add_folder(corpus)
        log(f"building a {args.chunks}-chunk base index ({args.distinct} distinct embeddings)")
        build = build_base(library, corpus, args.chunks, args.distinct, rng)
        chunks = int(library.status()["chunks"])
        log(f"base ready: {chunks} chunks; {build}")

        watcher = FolderWatcher(library)  # the defaults the app uses
        t0 = time.monotonic()
        watcher.start(reconcile=True)
        watcher.wait_idle(600)
        start_reconcile_s = time.monotonic() - t0
        first = watcher.recent()[0].report if watcher.recent() else None
        assert first is not None and first.unchanged == build["files"], first

        queries = [" ".join(rng.sample(WORDS, 3)) for _ in range(20)]
        library.search(queries[0])
        search_ms = []
        for q in queries:
            t = time.monotonic()
            library.search(q)
            search_ms.append(1000 * (time.monotonic() - t))

        # Save -> searchable, on a note that already exists (an edit, not a new file).
        live = corpus / "live-note.md"
        live.write_text("# Field log\n\nNothing observed yet.\n", encoding="utf-8")
        wait_for(lambda: returned(library, "Nothing observed yet"), poll=0.05)
        watcher.wait_idle(60)
        save_s: list[float] = []
        for i in range(args.edits):
            marker = f"quokka{i}x{rng.randrange(10**6)} sighting near the ridge"
            t0 = time.monotonic()
            live.write_text(
                f"# Field log\n\nEntry {i}: a {marker}, logged at dawn.\n", encoding="utf-8"
            )
            wait_for(lambda m=marker: returned(library, m), poll=0.02)
            save_s.append(time.monotonic() - t0)
            watcher.wait_idle(60)
            log(f"  edit {i + 1}/{args.edits}: searchable after {save_s[-1]:.2f} s")

        # Delete -> gone.
        doomed = []
        for i in range(args.deletes):
            marker = f"wombat{i}y{rng.randrange(10**6)}"
            path = corpus / f"doomed-{i:02d}.txt"
            path.write_text(f"Temporary note {i} about the {marker} burrow.\n", encoding="utf-8")
            doomed.append((path, marker))
        wait_for(lambda: all(returned(library, m) for _, m in doomed), poll=0.2)
        watcher.wait_idle(120)
        delete_s: list[float] = []
        for i, (path, marker) in enumerate(doomed):
            t0 = time.monotonic()
            path.unlink()
            wait_for(lambda m=marker: not returned(library, m), poll=0.02)
            delete_s.append(time.monotonic() - t0)
            watcher.wait_idle(60)
            log(f"  delete {i + 1}/{args.deletes}: gone after {delete_s[-1]:.2f} s")

        # Bulk copy: files prepared outside the library, then copied in at once.
        staging = root / "staging"
        staging.mkdir()
        for i in range(args.bulk):
            (staging / f"bulk-{i:04d}.txt").write_text(
                f"Bulk record {i}: crate {i} of the {rng.choice(WORDS)} shipment holds "
                f"{rng.randrange(1000)} samples.\n",
                encoding="utf-8",
            )
        bulk_started = time.time()
        t0 = time.monotonic()
        shutil.copytree(staging, corpus / "bulk")
        copy_s = time.monotonic() - t0
        prefix = str(corpus / "bulk") + os.sep
        bulk_s = wait_for(
            lambda: (
                sum(1 for d in library.documents(state="indexed") if d.path.startswith(prefix))
                >= args.bulk
                and watcher.wait_idle(0.2)
            ),
            timeout=3600,
            poll=0.25,
        )
        bulk_s += copy_s
        # The watcher keeps only its last 50 batches, so chunks are counted in the index.
        batches = [b for b in watcher.recent() if not b.reconcile and b.finished_at >= bulk_started]
        bulk_chunks = sum(d.chunks for d in library.documents() if d.path.startswith(prefix))
        last_found = returned(library, f"Bulk record {args.bulk - 1}: crate {args.bulk - 1}")
        watcher.stop()
        library.close()

    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    result = {
        "chunks": chunks,
        **build,
        "base_embeddings": "computed once for the distinct texts and reused (see docstring)",
        "start_reconcile_s": round(start_reconcile_s, 2),
        "search_p50_ms": round(statistics.median(search_ms), 1),
        "edits": len(save_s),
        "save_to_searchable_p50_s": round(statistics.median(save_s), 3),
        "save_to_searchable_p95_s": round(percentile(save_s, 0.95), 3),
        "save_to_searchable_max_s": round(max(save_s), 3),
        "deletes": len(delete_s),
        "delete_to_gone_p50_s": round(statistics.median(delete_s), 3),
        "delete_to_gone_p95_s": round(percentile(delete_s, 0.95), 3),
        "delete_to_gone_max_s": round(max(delete_s), 3),
        "bulk_files": args.bulk,
        "bulk_copy_s": round(copy_s, 2),
        "bulk_all_indexed_s": round(bulk_s, 2),
        "bulk_files_per_s": round(args.bulk / bulk_s, 2),
        "bulk_chunks_per_s": round(bulk_chunks / bulk_s, 2),
        "bulk_batches": len(batches),  # at most 50: the watcher keeps its last 50
        "bulk_last_file_found": last_found,
        "peak_rss_mb": round(peak_mb, 1),
        "cpu_count": os.cpu_count(),
        # Other work on the machine slows everything (one query embedded with torch's 2
        # threads took 0.7 s at load 6 on 2 cores, 16 ms with 1): read figures with these.
        "load_avg_1m_before": round(load_before, 2),
        "load_avg_1m_after": round(os.getloadavg()[0], 2),
        "quick": args.quick,
    }
    print(
        f"{chunks} chunks: save -> searchable p50 {result['save_to_searchable_p50_s']} s, "
        f"p95 {result['save_to_searchable_p95_s']} s; delete -> gone p50 "
        f"{result['delete_to_gone_p50_s']} s, p95 {result['delete_to_gone_p95_s']} s; "
        f"{args.bulk} files copied in indexed in {result['bulk_all_indexed_s']} s "
        f"({result['bulk_files_per_s']} files/s) in {len(batches)} batches"
    )
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
