"""Freshness benchmark: with the folder watcher running on a large index, how long from
saving a file to its text being returned by search, from deleting a file to its chunks
no longer being returned, and how fast a 1,000-file bulk copy is taken in.

The index is only the backdrop here, so the base library is written directly through the
store layer by ``bench/synthetic_library.py``: real Markdown files on disk (sections of
real SciFact sentences), one chunk per section with its real offsets, and embeddings
computed once by the real model for ``--distinct`` section texts and reused across the
files. The fts base index and the vector index are then built the normal way. Everything measured afterwards is the live path: real watchdog
events, the real watcher, parser, model and search.

    .venv/bin/python bench/freshness.py            # 100k chunks
    .venv/bin/python bench/freshness.py --quick    # smoke run (5k chunks, fewer files)

The last line of output is one JSON object with every figure.
"""

from __future__ import annotations

import argparse
import os
import random
import resource
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.record import emit
from bench.synthetic_library import WORDS, build_base, log, percentile
from core.app.watch import FolderWatcher
from core.config import Settings
from core.embedding.models import load_embedder
from core.library import Library


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
                sum(
                    1 for d in library.files.documents(state="indexed") if d.path.startswith(prefix)
                )
                >= args.bulk
                and watcher.wait_idle(0.2)
            ),
            timeout=3600,
            poll=0.25,
        )
        bulk_s += copy_s
        # The watcher keeps only its last 50 batches, so chunks are counted in the index.
        batches = [b for b in watcher.recent() if not b.reconcile and b.finished_at >= bulk_started]
        bulk_chunks = sum(d.chunks for d in library.files.documents() if d.path.startswith(prefix))
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
    emit("freshness", result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
