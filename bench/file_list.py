"""The library's file list at 20k files: the one-query read against the ways it could have
been done, and the table's work on the UI thread.

A synthetic library is written straight through DuckDB (the schema of core/store/db.py):
``--files`` documents in 8 folders, 2 % failed, 3 % skipped, 1 % waiting, the rest indexed
with 1-40 passages each (float32 embeddings of the real size, 384 dimensions), the last
tenth of the indexed ones not embedded yet (keyword only), as while the meaning pass
lags. Measured, each the median of ``--repeat`` runs after one warm-up:

* ``file_list``: ``DocumentStore.file_list()`` (one statement, passages counted in one
  aggregate), all files, one folder, the failed ones;
* baseline ``documents``: ``DocumentStore.documents()``, the existing read of every
  document (``lectern status``; no passage counts), over the same rows;
* baseline ``per_document``: what the list would cost with a count query per document
  (timed on ``--sample`` documents, scaled to all);
* the table (offscreen Qt, a shown ``QTableView``): building the display rows (worker
  thread), swapping them into the model with the state sort, a text filter and a header
  sort by another column (UI thread); for comparison a ``QSortFilterProxyModel`` over the
  same rows filtering with a Python ``filterAcceptsRow`` and sorting itself.

    .venv/bin/python bench/file_list.py [--files 20000]

The last line of standard output is one JSON object.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from bench.record import emit
from core.store.db import Database
from core.store.documents import DocumentStore

DIM = 384


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def timed(fn: Callable[[], object], repeat: int) -> float:
    """Median wall time of ``fn`` in milliseconds, after one warm-up call."""
    fn()
    samples = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - t0) * 1000)
    return statistics.median(samples)


def build(db: Database, files: int, seed: int) -> dict[str, int]:
    rng = np.random.default_rng(seed)
    folders = [f"/home/alex/Documents/Folder {i}" for i in range(8)]
    states = rng.choice(
        ["failed", "skipped", "pending", "indexed"], size=files, p=[0.02, 0.03, 0.01, 0.94]
    )
    chunks = np.where(states == "indexed", rng.integers(1, 41, size=files), 0)
    indexed_ids = np.flatnonzero(states == "indexed")
    lagging = set(indexed_ids[int(len(indexed_ids) * 0.9) :].tolist())
    doc = {
        "id": np.arange(1, files + 1, dtype=np.int64),
        "path": np.array(
            [f"{folders[i % 8]}/sub {i % 97}/file-{i:06d}.pdf" for i in range(files)], dtype=object
        ),
        "folder": np.array([folders[i % 8] for i in range(files)], dtype=object),
        "size": rng.integers(2_000, 5_000_000, size=files).astype(np.int64),
        "mtime": np.full(files, 1_790_000_000.0),
        "state": states.astype(object),
        "reason": np.array(
            [
                "damaged PDF: no trailer"
                if s == "failed"
                else "unsupported file type (.numbers)"
                if s == "skipped"
                else ""
                for s in states
            ],
            dtype=object,
        ),
        "pages": np.where(states == "indexed", rng.integers(1, 60, size=files), 0).astype(np.int32),
        "chunks": chunks.astype(np.int32),
    }
    with db.transaction() as cur:
        cur.execute("INSERT INTO folders(path) SELECT unnest(?::VARCHAR[])", [folders])
        cur.register("doc", doc)
        cur.execute(
            """INSERT INTO documents(id, path, folder, size, mtime, content_hash, type, title,
                   pages, state, reason, chunks, index_config, indexed_at)
               SELECT id, path, folder, size, mtime, 'h', 'pdf', 'T', pages, state, reason,
                   chunks, 'c', current_timestamp FROM doc"""
        )
        cur.unregister("doc")
    total = 0
    batch_docs = 1000
    for start in range(0, files, batch_docs):
        ids = np.arange(start, min(files, start + batch_docs))
        counts = chunks[ids]
        n = int(counts.sum())
        if not n:
            continue
        owner = np.repeat(ids + 1, counts).astype(np.int64)
        embedded = np.array([int(d - 1) not in lagging for d in owner])
        vectors = rng.standard_normal((n, DIM), dtype=np.float32)
        blobs = np.array(
            # b"" for not embedded yet (NULL below): a column of only None is not scanned.
            [v.tobytes() if e else b"" for v, e in zip(vectors, embedded, strict=True)],
            dtype=object,
        )
        rows = {
            "id": np.arange(total + 1, total + n + 1, dtype=np.int64),
            "document_id": owner,
            "text": np.array(["Some passage text of a realistic length. " * 8] * n, dtype=object),
            "embedding": blobs,
        }
        with db.transaction() as cur:
            cur.register("rows", rows)
            cur.execute(
                """INSERT INTO chunks(id, document_id, ordinal, text, context, start_char,
                       end_char, token_count, embedding)
                   SELECT id, document_id, 0, text, '', 0, 0, 64,
                       nullif(embedding::BLOB, ''::BLOB) FROM rows"""
            )
            cur.unregister("rows")
        total += n
    db.checkpoint()
    return {"files": files, "chunks": total, "keyword_only_files": len(lagging)}


def stored_counts(db: Database) -> dict[str, int]:
    """What ``build`` returned, for a library it built in an earlier run."""
    cur = db.cursor()
    row = cur.execute(
        """SELECT (SELECT count(*) FROM documents), (SELECT count(*) FROM chunks),
                  (SELECT count(DISTINCT document_id) FROM chunks WHERE embedding IS NULL)"""
    ).fetchone()
    assert row is not None
    return {"files": int(row[0]), "chunks": int(row[1]), "keyword_only_files": int(row[2])}


def per_document(db: Database, sample: int) -> float:
    """Milliseconds for ``sample`` documents read one query each (with their counts)."""
    cur = db.cursor()
    ids = [r[0] for r in cur.execute("SELECT id FROM documents LIMIT ?", [sample]).fetchall()]
    t0 = time.perf_counter()
    for doc_id in ids:
        cur.execute(
            "SELECT path, state, reason, pages FROM documents WHERE id = ?", [doc_id]
        ).fetchone()
        cur.execute(
            "SELECT count(*), count(embedding) FROM chunks WHERE document_id = ?", [doc_id]
        ).fetchone()
    return (time.perf_counter() - t0) * 1000


def table(entries: list, repeat: int) -> dict[str, float]:
    """The table's work, with a shown ``QTableView`` on the model (each step timed with
    the events it causes processed, as the UI thread would)."""
    from PySide6.QtCore import QSortFilterProxyModel, Qt
    from PySide6.QtWidgets import QApplication, QTableView

    from desktop.file_list import COL_FILE, COL_PASSAGES, FileListModel, make_rows
    from desktop.theme import LIGHT

    app = QApplication.instance() or QApplication([])
    rows = make_rows(entries)
    out = {"rows_build_ms": timed(lambda: make_rows(entries), repeat)}  # the worker thread
    model = FileListModel(LIGHT)
    view = QTableView()
    view.setModel(model)
    view.resize(1000, 600)
    view.show()

    def settle(fn: Callable[[], object]) -> Callable[[], None]:
        def run() -> None:
            fn()
            app.processEvents()

        return run

    out["model_swap_ms"] = timed(settle(lambda: model.set_rows(rows)), repeat)
    out["text_filter_ms"] = (
        timed(
            settle(
                lambda: (
                    model.set_filter("sub 42", None, None),
                    app.processEvents(),
                    model.set_filter("", None, None),
                )
            ),
            repeat,
        )
        / 2
    )
    out["sort_by_column_ms"] = (
        timed(
            settle(
                lambda: (
                    model.sort(COL_PASSAGES, Qt.SortOrder.DescendingOrder),
                    app.processEvents(),
                    model.sort(COL_FILE, Qt.SortOrder.AscendingOrder),
                )
            ),
            repeat,
        )
        / 2
    )

    # Baselines: a QSortFilterProxyModel over the same model, filtering with a Python
    # filterAcceptsRow (the least it can do: one look-up in a ready mask) and sorting
    # itself (it asks the Python model for both cells of every comparison).
    class MaskProxy(QSortFilterProxyModel):
        def __init__(self) -> None:
            super().__init__()
            self.mask: list[bool] = []

        def filterAcceptsRow(self, source_row: int, parent: object) -> bool:
            return self.mask[source_row]

    proxy = MaskProxy()
    proxy.mask = [True] * len(rows)
    proxy.setSourceModel(model)
    view.setModel(proxy)
    view.show()
    app.processEvents()

    def proxy_filter(words: str) -> None:
        proxy.beginFilterChange()
        proxy.mask = [words in r.haystack for r in model.all_rows]
        proxy.endFilterChange(QSortFilterProxyModel.Direction.Rows)
        app.processEvents()

    out["proxy_filter_ms"] = timed(lambda: (proxy_filter("sub 42"), proxy_filter("")), repeat) / 2
    t0 = time.perf_counter()
    proxy.sort(COL_PASSAGES, Qt.SortOrder.DescendingOrder)
    app.processEvents()
    out["proxy_own_sort_ms"] = (time.perf_counter() - t0) * 1000
    assert proxy.rowCount() == len(rows)
    view.hide()
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--files", type=int, default=20_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--sample", type=int, default=1_000)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument(
        "--keep", type=Path, help="build the library here once and reuse it in later runs"
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="lectern-file-list-") as tmp:
        path = args.keep / f"library-{args.files}-{args.seed}.duckdb" if args.keep else None
        reuse = path is not None and path.exists()
        if path is None:
            path = Path(tmp) / "library.duckdb"
        path.parent.mkdir(parents=True, exist_ok=True)
        db = Database(path)
        t0 = time.perf_counter()
        built = stored_counts(db) if reuse else build(db, args.files, args.seed)
        log(f"built {built} in {time.perf_counter() - t0:.1f} s")
        store = DocumentStore(db)
        entries = store.file_list()
        assert len(entries) == args.files
        assert sum(e.passages for e in entries) == built["chunks"]
        assert sum(e.status == "keyword only" for e in entries) == built["keyword_only_files"]
        figures: dict[str, float] = {
            "file_list_ms": timed(store.file_list, args.repeat),
            "file_list_folder_ms": timed(
                lambda: store.file_list(folder="/home/alex/Documents/Folder 3"), args.repeat
            ),
            "file_list_failed_ms": timed(lambda: store.file_list(status="failed"), args.repeat),
            "documents_baseline_ms": timed(store.documents, args.repeat),
        }
        sample = min(args.sample, args.files)
        figures["per_document_baseline_ms"] = per_document(db, sample) * args.files / sample
        figures.update(table(entries, args.repeat))
        db.close()
    result = {
        "bench": "file_list",
        **built,
        **{k: round(v, 1) for k, v in figures.items()},
        "file_list_vs_documents": round(
            figures["file_list_ms"] / figures["documents_baseline_ms"], 2
        ),
        "file_list_vs_per_document": round(
            figures["file_list_ms"] / figures["per_document_baseline_ms"], 4
        ),
        "model_sort_vs_proxy_sort": round(
            figures["sort_by_column_ms"] / figures["proxy_own_sort_ms"], 3
        ),
        "model_filter_vs_proxy_filter": round(
            figures["text_filter_ms"] / figures["proxy_filter_ms"], 3
        ),
        "per_document_sample": sample,
    }
    emit("file_list", result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
