"""The vector index at scale: exact enough, rebuilt the same as built, chunks without an
embedding left out, damage in the flat file caught. Real model, real DuckDB."""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import pytest

import core.store.vectors as vectors_module
from bench.synthetic_library import train_queries
from core.library import Library
from core.store.vectors import FlatVectors, VectorIndex, checksum_trailer

COPIES = 15  # perturbed copies of each real vector: near neighbours that are not ties
NOISE = 0.3


def _sentences(scifact: Path, limit: int) -> list[str]:
    out: list[str] = []
    with open(scifact / "corpus.jsonl", encoding="utf-8") as handle:
        for line in handle:
            for part in json.loads(line)["text"].split(". "):
                if 40 < len(part) < 200:
                    out.append(part)
            if len(out) >= limit:
                return out[:limit]
    return out


@pytest.fixture(scope="module")
def real(embedder: object, shared_data: Path) -> tuple[np.ndarray, np.ndarray]:
    """9,600 vectors (600 real sentence embeddings, each with 15 perturbed copies) and 40
    real train-query embeddings."""
    from core.embedding.models import embed_queries

    base = np.asarray(embedder.embed(_sentences(shared_data / "scifact", 600)), dtype=np.float32)  # type: ignore[attr-defined]
    rng = np.random.default_rng(14)
    copies = np.repeat(base, COPIES, axis=0)
    copies += rng.standard_normal(copies.shape, dtype=np.float32) * (NOISE / np.sqrt(base.shape[1]))
    copies /= np.linalg.norm(copies, axis=1, keepdims=True)
    corpus = np.concatenate([base, copies])
    queries = np.asarray(
        embed_queries(embedder, train_queries(40, shared_data / "scifact")), dtype=np.float32
    )  # type: ignore[arg-type]
    return corpus, queries


def _exact_top(corpus: np.ndarray, keys: np.ndarray, query: np.ndarray, k: int) -> list[int]:
    sims = corpus @ query / np.linalg.norm(corpus, axis=1) / np.linalg.norm(query)
    return [int(x) for x in keys[np.argsort(-sims, kind="stable")[:k]]]


def _store_chunks(library: Library, vectors: np.ndarray, null_every: int = 0) -> np.ndarray:
    """Chunk rows for ``vectors`` in DuckDB (one document); every ``null_every``-th row
    keeps a NULL embedding, as a chunk not embedded yet. Returns the chunk ids."""
    cur = library.db.cursor()
    ids = [
        r[0]
        for r in cur.execute("SELECT nextval('chunk_ids') FROM range(?)", [len(vectors)]).fetchall()
    ]
    with library.db.transaction() as tx:
        row = tx.execute(
            "INSERT INTO documents(path, folder, state) VALUES (?, ?, 'indexed') RETURNING id",
            [f"/nowhere/{ids[0]}.txt", "/nowhere"],
        ).fetchone()
        assert row is not None
        doc = row[0]
        for n, (cid, vector) in enumerate(zip(ids, vectors, strict=True)):
            blob = None if null_every and n % null_every == 0 else vector.astype("<f4").tobytes()
            tx.execute(
                "INSERT INTO chunks(id, document_id, ordinal, text, embedding) VALUES (?, ?, ?, ?, ?)",
                [cid, doc, n, f"chunk {n}", blob],
            )
    return np.array(ids, dtype=np.uint64)


@pytest.mark.parametrize("scan", ["usearch", "torch"])
def test_dense_recall_at_10_against_exact_search_is_at_least_099(
    library: Library,
    tmp_path: Path,
    real: tuple[np.ndarray, np.ndarray],
    monkeypatch: pytest.MonkeyPatch,
    scan: str,
) -> None:
    """Either scan a process may choose (by timing them on its CPU) keeps recall."""
    import torch

    monkeypatch.setattr(vectors_module._SCAN, "choice", scan)
    monkeypatch.setattr(vectors_module._SCAN, "_torch", torch)
    corpus, queries = real
    keys = np.arange(1, len(corpus) + 1, dtype=np.uint64)
    index = VectorIndex(library.db, tmp_path / "v.usearch", corpus.shape[1])
    for i in range(0, len(corpus), 64):  # in the indexer's batch size
        index.add(keys[i : i + 64], corpus[i : i + 64])
    found = 0
    for q in queries:
        got = [k for k, _ in index.search(q, 10)]
        found += len(set(got) & set(_exact_top(corpus, keys, q, 10)))
    # The HNSW index used before (f16, connectivity 16, expansion 128/64) found 0.9375
    # of these (0.995 with 6 copies, which is why there are 15), so this fails on it.
    assert found / (10 * len(queries)) >= 0.99


def test_the_two_scans_rank_alike_and_one_is_chosen_by_timing(
    library: Library,
    tmp_path: Path,
    real: tuple[np.ndarray, np.ndarray],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import torch

    corpus, queries = real
    keys = np.arange(1, len(corpus) + 1, dtype=np.uint64)
    index = VectorIndex(library.db, tmp_path / "v.usearch", corpus.shape[1])
    monkeypatch.setattr(vectors_module, "BLOCK_ROWS", 3_000)  # several blocks
    index.add(keys, corpus)
    found = {}
    for scan in ("usearch", "torch"):
        monkeypatch.setattr(vectors_module._SCAN, "choice", scan)
        monkeypatch.setattr(vectors_module._SCAN, "_torch", torch)
        found[scan] = [index.nearest(q, 50) for q in queries]
    for (u_keys, u_sims), (t_keys, t_sims) in zip(found["usearch"], found["torch"], strict=True):
        assert len(set(u_keys[:10].tolist()) & set(t_keys[:10].tolist())) >= 9
        assert np.allclose(u_sims, t_sims, atol=2e-3)
    fresh = vectors_module._Scan()
    assert fresh.kernel(corpus.shape[1]) in (None, torch)
    assert fresh.choice in ("usearch", "torch")


def _burn(seconds: float) -> None:
    started = time.process_time()
    while time.process_time() - started < seconds:
        pass


def test_the_scan_probe_times_what_a_search_does_after_the_scan(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The probe once timed torch's scan alone; the kept rows' lengths, read after it,
    cost a search more than the scan did, so torch won the probe and lost the search.
    Here the lengths are made dear and USearch a little dear: the whole path must lose."""
    import torch  # noqa: F401  (the probe runs once torch is loaded, as in a search)

    real_lengths, real_search = vectors_module._lengths, vectors_module.exact_search

    def dear_lengths(rows: np.ndarray, torch_module: object) -> np.ndarray:
        _burn(0.08)
        return real_lengths(rows, torch_module)

    def dear_search(*args: object, **kwargs: object) -> object:
        _burn(0.02)
        return real_search(*args, **kwargs)

    monkeypatch.setattr(vectors_module, "_lengths", dear_lengths)
    monkeypatch.setattr(vectors_module, "exact_search", dear_search)
    fresh = vectors_module._Scan()
    assert fresh.kernel(384) is None and fresh.choice == "usearch"


def test_rebuild_from_duckdb_searches_the_same_as_incremental_adds(
    library: Library,
    tmp_path: Path,
    real: tuple[np.ndarray, np.ndarray],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(vectors_module, "BLOCK_ROWS", 1_000)  # several blocks
    monkeypatch.setattr(vectors_module, "READ_BATCH", 700)
    corpus, queries = real
    corpus = corpus[:3_000]
    ids = _store_chunks(library, corpus)
    dim = corpus.shape[1]
    rebuilt = VectorIndex(library.db, tmp_path / "rebuilt.usearch", dim)
    assert rebuilt.open() == "rebuilt"
    # Incremental: shuffled batches, some removed and added back, some replaced.
    grown = VectorIndex(library.db, tmp_path / "grown.usearch", dim)
    order = np.random.default_rng(3).permutation(len(ids))
    for i in range(0, len(order), 97):
        part = order[i : i + 97]
        grown.add(ids[part], corpus[part])
    grown.remove(ids[order[:900]])
    grown.add(ids[order[:900]], corpus[order[:900]])
    grown.add(ids[order[900:950]], corpus[order[900:950]])
    assert len(grown) == len(rebuilt) == len(ids)
    for q in queries:
        assert grown.search(q, 10) == rebuilt.search(q, 10)
    assert grown.reconcile() == "ok"


def test_chunks_without_an_embedding_are_neither_searched_nor_missing(
    library: Library, tmp_path: Path, real: tuple[np.ndarray, np.ndarray]
) -> None:
    corpus, _queries = real
    vectors = corpus[:300]
    ids = _store_chunks(library, vectors, null_every=3)
    pending = set(ids[::3].tolist())
    path = tmp_path / "v.usearch"
    index = VectorIndex(library.db, path, vectors.shape[1])
    assert index.open() == "rebuilt"
    assert len(index) == 200
    assert pending.isdisjoint(index.stored_ids().tolist())
    for n in range(len(vectors)):  # its own vector is the nearest, unless it is pending
        top = [k for k, _ in index.search(vectors[n], 300)]
        assert pending.isdisjoint(top)
    assert index.reconcile() == "ok"
    reopened = VectorIndex(library.db, path, vectors.shape[1])
    assert reopened.open() == "ok"  # the pending chunks are not "missing"
    # The meaning pass embeds some of them: now those are missing, and added.
    embedded = sorted(pending)[:20]
    with library.db.transaction() as tx:
        for cid in embedded:
            n = int(np.flatnonzero(ids == cid)[0])
            tx.execute("UPDATE chunks SET embedding = ? WHERE id = ?", [vectors[n].tobytes(), cid])
    assert reopened.reconcile() == "repaired (20 added, 0 removed)"
    assert len(reopened) == 220
    for cid in embedded:
        n = int(np.flatnonzero(ids == cid)[0])
        assert int(reopened.search(vectors[n], 1)[0][0]) == cid


def _saved(library: Library, tmp_path: Path, vectors: np.ndarray) -> tuple[VectorIndex, Path]:
    _store_chunks(library, vectors)
    path = tmp_path / "v.usearch"
    index = VectorIndex(library.db, path, vectors.shape[1])
    assert index.open() == "rebuilt"
    return index, path


def test_saved_file_reopens_ok_with_the_same_results(
    library: Library, tmp_path: Path, real: tuple[np.ndarray, np.ndarray]
) -> None:
    corpus, queries = real
    index, path = _saved(library, tmp_path, corpus[:500])
    again = VectorIndex(library.db, path, corpus.shape[1])
    assert again.open() == "ok"
    for q in queries[:10]:
        assert again.search(q, 10) == index.search(q, 10)


@pytest.mark.parametrize("damage", ["flipped byte", "truncated", "valid checksum, wrong vectors"])
def test_damage_to_the_flat_file_is_caught_and_rebuilt(
    library: Library, tmp_path: Path, real: tuple[np.ndarray, np.ndarray], damage: str
) -> None:
    corpus, queries = real
    index, path = _saved(library, tmp_path, corpus[:500])
    expected = index.search(queries[0], 10)
    raw = bytearray(path.read_bytes())
    if damage == "flipped byte":
        raw[len(raw) - 5_000] ^= 0x01  # one int8 component of one vector
    elif damage == "truncated":
        raw = raw[: len(raw) // 2]
    else:
        flat = FlatVectors(corpus.shape[1])
        keys = index._index.keys
        flat.add(keys, np.random.default_rng(1).normal(size=(len(keys), corpus.shape[1])))
        data = flat.save()
        raw = bytearray(data + checksum_trailer(data))
    path.write_bytes(bytes(raw))
    reopened = VectorIndex(library.db, path, corpus.shape[1])
    assert reopened.open().startswith("rebuilt, damaged")
    assert reopened.search(queries[0], 10) == expected


def test_an_hnsw_file_from_before_is_rebuilt_without_a_damage_report(
    library: Library, tmp_path: Path, real: tuple[np.ndarray, np.ndarray]
) -> None:
    from usearch.index import Index

    corpus, _queries = real
    ids = _store_chunks(library, corpus[:200])
    old = Index(ndim=corpus.shape[1], metric="cos", dtype="f16", connectivity=16)
    old.add(ids, corpus[:200])
    data = old.save()
    assert data is not None
    path = tmp_path / "v.usearch"
    path.write_bytes(bytes(data) + checksum_trailer(data))
    index = VectorIndex(library.db, path, corpus.shape[1])
    assert index.open() == "rebuilt (earlier format)"
    assert int(index.search(corpus[7], 1)[0][0]) == int(ids[7])


def test_a_save_writes_the_state_it_snapshotted_while_changes_go_on(
    monkeypatch: pytest.MonkeyPatch, real: tuple[np.ndarray, np.ndarray]
) -> None:
    monkeypatch.setattr(vectors_module, "BLOCK_ROWS", 100)
    corpus, _ = real
    dim = corpus.shape[1]
    flat = FlatVectors(dim)
    keys = np.arange(1, 351, dtype=np.uint64)
    flat.add(keys, corpus[:350])
    before = flat.save()
    snap = flat.snapshot()
    # Changes after the snapshot: removals move tail rows into earlier blocks, adds fill
    # the last block. The snapshot's blocks must not change under the writer.
    flat.remove(keys[::7])
    flat.add(np.arange(1000, 1100, dtype=np.uint64), corpus[400:500])
    written = b"".join(bytes(c) for c in FlatVectors.chunks(dim, snap))
    assert written == before
    assert len(flat) == 350 - len(keys[::7]) + 100


def test_a_read_file_changes_in_memory_only_and_saves_over_itself(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, real: tuple[np.ndarray, np.ndarray]
) -> None:
    """A read file's blocks are its mapped pages: removals and adds after the read change
    copies, never the file (nor raise on its read-only pages), and a save renames a new
    file over the one still mapped."""
    monkeypatch.setattr(vectors_module, "BLOCK_ROWS", 100)
    corpus, queries = real
    dim = corpus.shape[1]
    keys = np.arange(1, 351, dtype=np.uint64)
    path = tmp_path / "v.usearch"

    def write(flat: FlatVectors) -> None:
        data = flat.save()
        tmp = path.with_suffix(".tmp")
        tmp.write_bytes(data + checksum_trailer(data))
        tmp.replace(path)

    in_memory = FlatVectors(dim)
    in_memory.add(keys, corpus[:350])
    write(in_memory)
    on_disk = path.read_bytes()
    with open(path, "rb") as handle:
        read = FlatVectors.read(handle, len(on_disk))
    for flat in (in_memory, read):
        flat.remove(keys[::7])  # tail rows move into the first blocks
        flat.add(np.arange(1000, 1100, dtype=np.uint64), corpus[400:500])
    assert path.read_bytes() == on_disk
    for q in queries[:10]:
        found, expected = read.search(q, 10), in_memory.search(q, 10)
        assert found[0].tolist() == expected[0].tolist()
    write(read)  # over the file its untouched blocks still map
    for q in queries[:10]:
        assert read.search(q, 10)[0].tolist() == in_memory.search(q, 10)[0].tolist()
    with open(path, "rb") as handle:
        again = FlatVectors.read(handle, path.stat().st_size)
    assert sorted(again.keys.tolist()) == sorted(in_memory.keys.tolist())
    assert np.array_equal(again.get(keys[1:5]), in_memory.get(keys[1:5]))


def test_set_embeddings_stores_the_exact_vectors_and_skips_the_rest(
    library: Library, real: tuple[np.ndarray, np.ndarray]
) -> None:
    """The meaning pass's store (passed to DuckDB as base64 text): every float32 bit
    round-trips; chunks deleted meanwhile or embedded already are left as they are."""
    corpus, _queries = real
    vectors = corpus[:70]
    ids = _store_chunks(library, vectors, null_every=1)  # all written without a vector
    with library.db.transaction() as tx:
        tx.execute("DELETE FROM chunks WHERE id = ?", [int(ids[3])])
        tx.execute(
            "UPDATE chunks SET embedding = ? WHERE id = ?",
            [vectors[5].astype("<f4").tobytes(), int(ids[4])],
        )
    stored = library.files.set_embeddings([int(i) for i in ids], corpus[100:170])
    expected = [int(i) for n, i in enumerate(ids) if n not in (3, 4)]
    assert stored.tolist() == expected
    rows = dict(
        library.db.cursor()
        .execute(
            "SELECT id, embedding FROM chunks WHERE id IN (SELECT unnest(?::BIGINT[]))",
            [[int(i) for i in ids]],
        )
        .fetchall()
    )
    for n, cid in enumerate(ids.tolist()):
        if n == 3:
            assert cid not in rows
            continue
        want = vectors[5] if n == 4 else corpus[100 + n]
        assert rows[cid] == np.ascontiguousarray(want, dtype="<f4").tobytes()


def test_chunk_rows_round_trip_exactly(
    library: Library, real: tuple[np.ndarray, np.ndarray]
) -> None:
    """Chunks are written as numpy str columns and base64 embeddings: text in any script,
    empty context, a trailing NUL (which a str column would drop), known vectors and
    none all come back as written."""
    from core.records import Chunk
    from core.store.documents import _insert_chunks

    corpus, _queries = real
    texts = ["Résumé — 東京 😀 naïve", "plain text", "ends in a NUL\0", "", "x" * 5000]
    contexts = ["Title > Heading", "", "Title", "T\0", "Long"]
    chunks = [
        Chunk(n, t, 0, len(t), None if n % 2 else n, None, (f"h{n}", "é"), n, c)
        for n, (t, c) in enumerate(zip(texts, contexts, strict=True))
    ]
    vectors = [corpus[0], None, corpus[2], None, corpus[4]]
    with library.db.transaction() as tx:
        row = tx.execute(
            "INSERT INTO documents(path, folder, state) VALUES ('/x/a.txt', '/x', 'indexed') "
            "RETURNING id"
        ).fetchone()
        assert row is not None
        ids = _insert_chunks(tx, int(row[0]), chunks, vectors)
    rows = (
        library.db.cursor()
        .execute(
            "SELECT text, context, page_start, heading_path, token_count, embedding FROM chunks "
            "WHERE id IN (SELECT unnest(?::BIGINT[])) ORDER BY ordinal",
            [[int(i) for i in ids]],
        )
        .fetchall()
    )
    for chunk, vector, got in zip(chunks, vectors, rows, strict=True):
        assert got[0] == chunk.text and got[1] == chunk.context
        assert got[2] == chunk.page_start and json.loads(got[3]) == list(chunk.heading_path)
        assert got[4] == chunk.token_count
        want = None if vector is None else np.ascontiguousarray(vector, dtype="<f4").tobytes()
        assert got[5] == want
