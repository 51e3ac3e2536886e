"""Dense vector search: a USearch HNSW index in a file beside the database.

The index is derived data. DuckDB holds every embedding; this file is only an accelerator.
At open its content is checked twice: a checksum written after the index at save time
must match (a zeroed or altered payload still loads, and its keys still match), and a
sample of its vectors must equal the embeddings stored in DuckDB. Then its keys are
compared with the chunk ids in DuckDB and repaired (missing vectors added, stale ones
removed). A file that fails a check is rebuilt from DuckDB. Saving writes a temporary
file and renames it over the old one, so a crash never leaves a half-written index.
"""

from __future__ import annotations

import hashlib
import logging
import os
import threading
from pathlib import Path

import numpy as np
from usearch.index import Index

from core.errors import DiskFullError, StoreError
from core.store.db import Database, disk_full_error, is_disk_full

log = logging.getLogger(__name__)

# Removed keys stay in the HNSW graph as tombstones; past this share, search quality and
# memory suffer and a clean rebuild is cheaper.
TOMBSTONE_REBUILD_FRACTION = 0.25
# The file ends with this marker and a BLAKE2b digest of everything before it.
CHECKSUM_MARKER = b"LECTERN-VECTORS-BLAKE2B:"
DIGEST_SIZE = 32
# Vectors compared with DuckDB at open; f16 storage keeps cosine above 0.9999.
SAMPLE_SIZE = 64
MIN_SAMPLE_COSINE = 0.99


class DamagedVectorsError(ValueError):
    """The vector file's content does not match what was saved or what DuckDB holds."""


def checksum_trailer(data: bytes | bytearray) -> bytes:
    return CHECKSUM_MARKER + hashlib.blake2b(data, digest_size=DIGEST_SIZE).digest()


def verified_payload(raw: bytes) -> bytes:
    """The index bytes of a saved file, or DamagedVectorsError when its checksum fails.
    A file from before checksums (no marker) passes here; the sample check still runs."""
    tail = len(CHECKSUM_MARKER) + DIGEST_SIZE
    if len(raw) < tail or raw[-tail:-DIGEST_SIZE] != CHECKSUM_MARKER:
        return raw
    payload, digest = raw[:-tail], raw[-DIGEST_SIZE:]
    if hashlib.blake2b(payload, digest_size=DIGEST_SIZE).digest() != digest:
        raise DamagedVectorsError("checksum does not match the content")
    return payload


def blobs_to_matrix(blobs: list[bytes], dim: int) -> np.ndarray:
    if not blobs:
        return np.zeros((0, dim), dtype=np.float32)
    return np.frombuffer(b"".join(blobs), dtype=np.float32).reshape(len(blobs), dim)


def _yield_gil(done: int, total: int) -> bool:
    """USearch progress callback: returning into Python lets waiting threads run."""
    return True


# USearch checks a callback's annotations against the real types; with postponed
# evaluation (``from __future__ import annotations``) they would be strings.
_yield_gil.__annotations__ = {"done": int, "total": int, "return": bool}


class VectorIndex:
    def __init__(self, db: Database, path: Path, dim: int) -> None:
        self.db = db
        self.path = path
        self.dim = dim
        self._lock = threading.RLock()
        self._save_lock = threading.Lock()  # one writer of the file at a time
        self._serialised = 0  # generations: a slow older save never overwrites a newer one
        self._written = 0
        self._index = self._new_index()
        self._removed_since_build = 0
        self._dirty = False
        self.repair_report = ""

    def _new_index(self) -> Index:
        return Index(
            ndim=self.dim,
            metric="cos",
            dtype="f16",
            connectivity=16,
            expansion_add=128,
            expansion_search=64,
        )

    def __len__(self) -> int:
        return len(self._index)

    # --- open / repair --------------------------------------------------------

    def open(self) -> str:
        """Load the file and reconcile it with DuckDB. Returns what was done."""
        with self._lock:
            loaded = False
            why = ""
            if self.path.exists():
                try:
                    index = self._new_index()
                    index.load(verified_payload(self.path.read_bytes()))
                    if index.ndim != self.dim:
                        raise ValueError(f"dimension {index.ndim} != {self.dim}")
                    self._check_sample(index)
                    self._index = index
                    loaded = True
                except Exception as exc:  # damaged or foreign file: rebuild from DuckDB
                    log.warning("vector index %s unusable (%s); rebuilding", self.path, exc)
                    why = f" ({exc})"
            if not loaded:
                self.rebuild()
                self.repair_report = f"rebuilt, damaged{why}" if why else "rebuilt"
                return self.repair_report
            self.repair_report = self.reconcile()
            return self.repair_report

    def _check_sample(self, index: Index) -> None:
        """Compare a spread of the file's vectors with the embeddings in DuckDB."""
        rows = (
            self.db.cursor()
            .execute(
                "SELECT id, embedding FROM chunks WHERE embedding IS NOT NULL "
                "ORDER BY hash(id) LIMIT ?",
                [SAMPLE_SIZE],
            )
            .fetchall()
        )
        rows = [r for r in rows if index.contains(int(r[0]))]
        if not rows:
            return
        stored = blobs_to_matrix([r[1] for r in rows], self.dim)
        found = np.asarray(
            index.get(np.array([r[0] for r in rows], dtype=np.uint64)), dtype=np.float32
        ).reshape(len(rows), self.dim)
        norms = np.linalg.norm(stored, axis=1) * np.linalg.norm(found, axis=1)
        cosine = np.einsum("ij,ij->i", stored, found) / np.where(norms > 0, norms, 1.0)
        bad = int(np.sum(~(cosine >= MIN_SAMPLE_COSINE)))
        if bad:
            raise DamagedVectorsError(
                f"{bad} of {len(rows)} sampled vectors differ from the stored embeddings"
            )

    def stored_ids(self) -> np.ndarray:
        rows = (
            self.db.cursor()
            .execute("SELECT id FROM chunks WHERE embedding IS NOT NULL ORDER BY id")
            .fetchnumpy()
        )
        return np.asarray(rows["id"], dtype=np.uint64)

    def reconcile(self) -> str:
        """Make the index's keys equal to the chunk ids that have embeddings."""
        with self._lock:
            wanted = self.stored_ids()
            present = (
                np.sort(np.asarray(self._index.keys, dtype=np.uint64))
                if len(self._index)
                else np.zeros(0, dtype=np.uint64)
            )
            missing = np.setdiff1d(wanted, present, assume_unique=True)
            stale = np.setdiff1d(present, wanted, assume_unique=True)
            if not len(missing) and not len(stale):
                return "ok"
            if len(stale) + len(missing) > TOMBSTONE_REBUILD_FRACTION * max(1, len(wanted)):
                self.rebuild()
                return f"rebuilt ({len(missing)} missing, {len(stale)} stale)"
            if len(stale):
                self.remove(stale)
            if len(missing):
                self._add_from_db(missing)
            self._save_unless_disk_full()
            return f"repaired ({len(missing)} added, {len(stale)} removed)"

    def rebuild(self) -> None:
        with self._lock:
            self._index = self._new_index()
            self._removed_since_build = 0
            ids = self.stored_ids()
            self._add_from_db(ids)
            self._save_unless_disk_full()

    def _save_unless_disk_full(self) -> None:
        """A repair made at open is kept in memory when the disk is full, so search works;
        the next save writes it."""
        try:
            self.save()
        except DiskFullError as exc:
            log.warning("vector index kept in memory: %s", exc.message)

    def _add_from_db(self, ids: np.ndarray, batch: int = 20_000) -> None:
        cur = self.db.cursor()
        for i in range(0, len(ids), batch):
            part = [int(x) for x in ids[i : i + batch]]
            rows = cur.execute(
                "SELECT id, embedding FROM chunks WHERE id IN (SELECT unnest(?::BIGINT[]))", [part]
            ).fetchall()
            if not rows:
                continue
            keys = np.array([r[0] for r in rows], dtype=np.uint64)
            vectors = blobs_to_matrix([r[1] for r in rows], self.dim)
            self.add(keys, vectors)

    # --- changes ----------------------------------------------------------------

    def add(self, keys: np.ndarray, vectors: np.ndarray) -> None:
        """Insert or replace vectors (a replayed write must not fail on existing keys)."""
        if not len(keys):
            return
        keys = np.asarray(keys, dtype=np.uint64)
        with self._lock:
            present = [k for k in keys.tolist() if self._index.contains(k)]
            if present:
                self._index.remove(present)
            self._index.add(keys, np.asarray(vectors, dtype=np.float32), threads=2)
            self._dirty = True

    def remove(self, keys: np.ndarray | list[int]) -> None:
        keys = np.asarray(keys, dtype=np.uint64)
        if not len(keys):
            return
        with self._lock:
            present = [k for k in keys.tolist() if self._index.contains(k)]
            if present:
                self._index.remove(present)
                self._removed_since_build += len(present)
                self._dirty = True

    def maybe_compact(self) -> bool:
        with self._lock:
            if self._removed_since_build > TOMBSTONE_REBUILD_FRACTION * max(1, len(self._index)):
                self.rebuild()
                return True
            return False

    def save(self) -> None:
        # Writing and fsyncing the file takes ~0.5-0.7 s at 100k chunks; under the index
        # lock, every dense search (a question, a search) waited that long. Only the
        # in-memory serialisation needs the lock; the file is written outside it. The
        # file lock is never held while waiting for the index lock (no lock-order cycle
        # with rebuild, which saves while holding the index lock).
        with self._lock:
            # Bytes (the index is made without a path of its own). USearch serialises
            # holding the GIL: without a callback, 20-30 ms per 30k vectors during which
            # no other Python thread (the window's included) runs. The per-node callback
            # is a point where the interpreter can hand the GIL over.
            data = self._index.save(progress=_yield_gil)
            if data is None:  # usearch returns None only when given a path to write to
                raise StoreError("The meaning-search index could not be serialised.")
            self._dirty = False
            self._serialised += 1
            generation = self._serialised
        with self._save_lock:
            if generation < self._written:
                return  # a newer state is already on disk
            tmp = self.path.with_name(self.path.name + ".tmp")
            try:
                with open(tmp, "wb") as handle:
                    handle.write(data)
                    handle.write(checksum_trailer(data))
                    handle.flush()
                    os.fsync(handle.fileno())
                os.replace(tmp, self.path)
            except BaseException as exc:
                self._dirty = True  # not on disk: the next save must try again
                tmp.unlink(missing_ok=True)
                if isinstance(exc, OSError) and is_disk_full(exc):
                    raise disk_full_error(self.path) from exc
                raise
            self._written = generation

    def save_if_dirty(self) -> None:
        if self._dirty:
            self.save()

    # --- query ------------------------------------------------------------------

    def search(self, vector: np.ndarray, limit: int) -> list[tuple[int, float]]:
        with self._lock:
            if not len(self._index):
                return []
            matches = self._index.search(
                np.asarray(vector, dtype=np.float32), min(limit, len(self._index))
            )
        # usearch reports cosine distance; callers want similarity.
        return [
            (int(k), 1.0 - float(d)) for k, d in zip(matches.keys, matches.distances, strict=True)
        ]
