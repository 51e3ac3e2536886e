"""Dense vector search: exact search over float16 vectors in a file beside the database.

The index is derived data. DuckDB holds every embedding; this file is only an accelerator.
It holds each chunk's embedding as a unit-length float16 row and is searched exactly,
block by block, with USearch's SIMD kernels or torch, whichever this CPU runs faster
(``_Scan``). Exact search was chosen by measurement over HNSW
(``bench/scale.py``): HNSW at the settings used before (f16, connectivity 16, expansion
64) found only 0.967 of the true top 10 at 10k chunks and 0.881 at 300k, and building its
graph from DuckDB took 1,091 s at 300k; the flat file is rebuilt in seconds. float16
keeps recall@10 against exact float32 search at 1.0 on near-duplicate passages, where
int8 (half the memory, no faster here: the scan is bound by memory) fell to 0.99; it
takes half the memory of float32 (768 MB at 1M chunks).

At open the file is mapped into memory, not copied (``FlatVectors.read``), and its content
is checked twice: a checksum written after the data at save
time must match (a zeroed or altered payload still parses, and its keys still match), and
a sample of its vectors must equal the embeddings stored in DuckDB. Then its keys are
compared with the ids of the chunks that have an embedding and repaired (missing vectors
added, stale ones removed); a chunk whose embedding is not computed yet (NULL) is not
missing. A file that fails a check is rebuilt from DuckDB. Saving writes a temporary file
and renames it over the old one, so a crash never leaves a half-written index.
"""

from __future__ import annotations

import base64
import hashlib
import io
import logging
import mmap
import os
import struct
import sys
import threading
import time
import warnings
import weakref
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
from usearch.index import search as exact_search

from core.errors import DiskFullError
from core.private import private_file
from core.store.db import Database, disk_full_error, is_disk_full

log = logging.getLogger(__name__)

# A reconcile that finds more than this share of keys wrong rebuilds from DuckDB instead
# (a rebuild is one ordered scan; many small repairs are not cheaper).
TOMBSTONE_REBUILD_FRACTION = 0.25
# The file ends with this marker and a BLAKE2b digest of everything before it.
CHECKSUM_MARKER = b"LECTERN-VECTORS-BLAKE2B:"
DIGEST_SIZE = 32
# The file starts with this magic, a format version, the dimension and the row count;
# then the keys (uint64, row order) and the float16 rows.
MAGIC = b"LECTVEC\0"
FORMAT_VERSION = 1
HEADER = struct.Struct("<8sIIQ")
# Files written by the HNSW index before version 1 carry this in their header.
LEGACY_USEARCH_MAGIC = b"usearch"
# Vectors compared with DuckDB at open; float16 keeps cosine above 0.9999.
SAMPLE_SIZE = 64
MIN_SAMPLE_COSINE = 0.99
# Rows per block. Blocks never move once allocated, so the store grows without copying
# all of it (a doubling array would briefly hold twice the vectors), and a save can write
# a block while a change to it goes to a fresh copy (copy on write). 96 MB at 384 dims.
BLOCK_ROWS = 1 << 17
# Rows read from DuckDB per query when building (25 MB of float32 at 384 dims).
READ_BATCH = 16_384
# Bytes checksummed per call at open (hashlib lets go of the GIL for each).
CHECKSUM_STEP = 1 << 24
SEARCH_THREADS = max(1, min(8, os.cpu_count() or 1))
STORED_DTYPE = np.float16


class DamagedVectorsError(ValueError):
    """The vector file's content does not match what was saved or what DuckDB holds."""


class LegacyVectorsError(ValueError):
    """The file is an HNSW index from before the flat format: rebuilt, not damaged."""


def checksum_trailer(data: bytes | bytearray | memoryview) -> bytes:
    return CHECKSUM_MARKER + hashlib.blake2b(data, digest_size=DIGEST_SIZE).digest()


def vector_base64(vector: np.ndarray) -> str:
    """An embedding as the base64 text of its float32 bytes: what ``from_base64`` turns
    into a BLOB column (DuckDB takes a numpy str column ~4x faster than an object array
    of bytes)."""
    return base64.b64encode(np.ascontiguousarray(vector, dtype=np.float32).tobytes()).decode()


def blobs_to_matrix(blobs: list[bytes], dim: int) -> np.ndarray:
    if not blobs:
        return np.zeros((0, dim), dtype=np.float32)
    return np.frombuffer(b"".join(blobs), dtype=np.float32).reshape(len(blobs), dim)


class _Scan:
    """How a block of float16 rows is compared with a question, chosen once a process by
    timing both on this CPU: USearch's SIMD kernel, or torch converting slices of rows
    into one float32 buffer and multiplying (when torch is loaded: it is whenever the model
    made the question's vector). On this project's machines torch took 6.3 ms of CPU for a
    block of 131,072 rows against USearch's 13.3 ms (0.48 against 1.07 ms for SciFact's
    10,558), with recall@10 against exact float32 at 1M rows of 0.9985 against 0.997 when
    torch read the question in float32 (since 2026-12-07 both read it rounded as stored and
    divide by the rows' lengths, so both score alike); another CPU may differ either way. torch runs on the thread count the question's
    encoding set (one)."""

    PROBE_ROWS = 16_384
    # Rows a hybrid search keeps (core/retrieval/search.py: 100 candidate documents x 64
    # passages), whose lengths the torch path then reads.
    PROBE_KEEP = 6_400
    SLICE_ROWS = 4_096  # 6 MB of float32 at 384 dims: converted and used while in cache
    MARGIN = 0.9  # torch must take under this share of USearch's time

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._torch: Any = None
        self._buffer: Any = None  # reused: a fresh one each slice faulted in new pages
        self._warned = False
        self.choice = ""  # "", "usearch" or "torch"

    def kernel(self, ndim: int) -> Any:
        """torch where it was measured faster here, else None (USearch)."""
        if self.choice:
            return self._torch if self.choice == "torch" else None
        torch = sys.modules.get("torch")
        if torch is None:
            return None  # not loaded: measured once it is
        with self._lock:
            if not self.choice:
                self._torch = torch
                self.choice = self._measure(torch, ndim)
        return self._torch if self.choice == "torch" else None

    def _measure(self, torch: Any, ndim: int) -> str:
        rng = np.random.default_rng(0)
        rows = as_stored(rng.standard_normal((self.PROBE_ROWS, ndim)))
        query = as_stored(rng.standard_normal(ndim))[0]
        spent: dict[str, list[float]] = {"usearch": [], "torch": []}
        for _ in range(5):
            started = time.process_time()
            exact_search(rows, query, self.PROBE_KEEP, "cos", exact=True, threads=1)
            spent["usearch"].append(time.process_time() - started)
            started = time.process_time()
            # The whole path a search takes, not the scan alone: the kept rows' lengths
            # once cost more than the scan (_lengths).
            sims = self._similarities(torch, rows, query.astype(np.float32))
            _kept(torch, sims, rows, self.PROBE_KEEP)
            spent["torch"].append(time.process_time() - started)
        faster = min(spent["torch"]) < self.MARGIN * min(spent["usearch"])
        log.info("vector scan: %s (%s)", "torch" if faster else "usearch", spent)
        return "torch" if faster else "usearch"

    def nearest(
        self, rows: np.ndarray, query: np.ndarray, take: int
    ) -> tuple[np.ndarray, np.ndarray]:
        """The ``take`` float16 ``rows`` nearest a float32 unit ``query``, by torch: their
        positions and cosine distances, unordered."""
        with self._lock:
            sims = self._similarities(self._torch, rows, query)
        return _kept(self._torch, sims, rows, take)

    def _similarities(self, torch: Any, rows: np.ndarray, query: np.ndarray) -> np.ndarray:
        ndim = rows.shape[1]
        if self._buffer is None or self._buffer.shape[1] != ndim:
            self._buffer = torch.empty((self.SLICE_ROWS, ndim), dtype=torch.float32)
        out = torch.empty(len(rows), dtype=torch.float32)
        q = torch.from_numpy(np.ascontiguousarray(query, dtype=np.float32))
        if not self._warned:
            # torch warns, once a process, that a tensor made of a read-only array (a
            # mapped block) could be written through; the scan only reads. Said here,
            # silenced, rather than to a person at their first search.
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", UserWarning)
                readonly = np.zeros(1, dtype=STORED_DTYPE)
                readonly.flags.writeable = False
                torch.from_numpy(readonly)
            self._warned = True
        with torch.inference_mode():
            for at in range(0, len(rows), self.SLICE_ROWS):
                part = torch.from_numpy(rows[at : at + self.SLICE_ROWS])
                buffer = self._buffer[: len(part)]
                buffer.copy_(part)
                torch.mv(buffer, q, out=out[at : at + len(part)])
        result: np.ndarray = out.numpy()
        return result


_SCAN = _Scan()


def _kept(
    torch: Any, sims: np.ndarray, rows: np.ndarray, take: int
) -> tuple[np.ndarray, np.ndarray]:
    """The positions of the ``take`` best dot products ``sims`` of ``rows``, and their
    cosine distances."""
    top = np.argpartition(-sims, take - 1)[:take] if take < len(rows) else np.arange(len(rows))
    return top, 1.0 - sims[top] / _lengths(rows[top], torch)


def _lengths(rows: np.ndarray, torch: Any) -> np.ndarray:
    """The float16 ``rows``' own lengths, which rounding leaves a little off 1: USearch's
    "cos" divides by them, so torch's kernel does too, for the rows it keeps only (all
    of a block's would be half as much work again as the scan). Widened by torch: NumPy
    converts float16 one value at a time, and the 6,400 rows a search keeps took 8.6 ms
    of its CPU that way (SciFact), against under 1 ms here."""
    with torch.inference_mode():
        lengths = torch.linalg.vector_norm(torch.from_numpy(rows).float(), dim=1)
        floored: np.ndarray = lengths.clamp(min=1e-12).numpy()
    return floored


def as_stored(vectors: np.ndarray) -> np.ndarray:
    """Unit-length float16 rows with the same directions (the model's vectors are unit
    length already; another embedder's need not be, and float16 keeps most precision
    near 1)."""
    vectors = np.asarray(vectors, dtype=np.float32)
    if vectors.ndim == 1:
        vectors = vectors.reshape(1, -1)
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return (vectors / np.where(norms > 0, norms, 1.0)).astype(STORED_DTYPE)


def _is_usearch_file(handle: io.BufferedIOBase, head: bytes, file_size: int) -> bool:
    """USearch's dense files start with the row count and the bytes per row (uint32
    each), then the rows, then a header that begins with its magic."""
    if len(head) < 8:
        return False
    rows, row_bytes = struct.unpack("<II", head[:8])
    at = 8 + rows * row_bytes
    if at + len(LEGACY_USEARCH_MAGIC) > file_size:
        return False
    handle.seek(at)
    found = handle.read(len(LEGACY_USEARCH_MAGIC)) == LEGACY_USEARCH_MAGIC
    handle.seek(len(head))
    return found


class FlatVectors:
    """Keys and float16 vectors in fixed-size blocks, searched exactly.

    Removing a key moves the last row into its place, so there are no tombstones and
    rows 0..len-1 are always live. A sorted copy of the keys (with each key's row) answers
    contains, get and remove by binary search. Not thread-safe: VectorIndex locks."""

    def __init__(self, ndim: int) -> None:
        self.ndim = ndim
        self._vectors: list[np.ndarray] = []
        self._keys: list[np.ndarray] = []
        self._size = 0
        self._sorted_keys = np.zeros(0, dtype=np.uint64)
        self._sorted_rows = np.zeros(0, dtype=np.int64)
        # Blocks a save in progress may still be reading: written only after a copy.
        self._shared: set[int] = set()
        # Blocks that are views of the mapped file (``read``): the mapping (weakly: a
        # replaced file's disk space is freed once no block needs it) and the byte
        # ranges its keys and rows take there.
        self._file_pages: dict[int, tuple[weakref.ref[mmap.mmap], list[tuple[int, int]]]] = {}

    def __len__(self) -> int:
        return self._size

    @property
    def keys(self) -> np.ndarray:
        """Every key, in row order."""
        if not self._size:
            return np.zeros(0, dtype=np.uint64)
        return np.concatenate(
            [self._keys[b][: self._rows_in(b)] for b in range(len(self._keys))]
        ).astype(np.uint64, copy=False)

    def _rows_in(self, block: int) -> int:
        return min(BLOCK_ROWS, self._size - block * BLOCK_ROWS)

    def _positions(self, keys: np.ndarray) -> np.ndarray:
        """Index into the sorted arrays of each key, or -1 where absent."""
        keys = np.asarray(keys, dtype=np.uint64)
        at = np.searchsorted(self._sorted_keys, keys)
        found = at < len(self._sorted_keys)
        found[found] = self._sorted_keys[at[found]] == keys[found]
        return np.where(found, at, -1)

    def contains(self, key: int) -> bool:
        return bool(self._positions(np.array([key], dtype=np.uint64))[0] >= 0)

    def get(self, keys: np.ndarray) -> np.ndarray:
        """Unit-length float32 vectors of present keys (rows of zeros for absent ones)."""
        pos = self._positions(np.asarray(keys, dtype=np.uint64))
        out = np.zeros((len(pos), self.ndim), dtype=np.float32)
        for i, p in enumerate(pos.tolist()):
            if p >= 0:
                row = int(self._sorted_rows[p])
                out[i] = self._vectors[row // BLOCK_ROWS][row % BLOCK_ROWS]
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        return out / np.where(norms > 0, norms, 1.0)

    def _writable(self, block: int) -> None:
        if block in self._shared:
            # Only the rows in use are copied, into fresh lazily mapped blocks: the last
            # block is mostly empty, and copying all of its 96 MB after every save cost
            # the meaning pass ~50 ms (and as much memory) for a batch of 64 vectors.
            used = max(0, self._rows_in(block))
            vectors = np.zeros((BLOCK_ROWS, self.ndim), dtype=STORED_DTYPE)
            vectors[:used] = self._vectors[block][:used]
            keys = np.zeros(BLOCK_ROWS, dtype=np.uint64)
            keys[:used] = self._keys[block][:used]
            self._vectors[block], self._keys[block] = vectors, keys
            self._shared.discard(block)
            self._release_file_pages(block)

    def _release_file_pages(self, block: int) -> None:
        """A copied block's pages of the mapped file leave this process's memory now,
        rather than whenever the kernel needs them: a re-embedding changes every block,
        and would otherwise hold the file's pages beside their copies."""
        ref, ranges = self._file_pages.pop(block, (None, []))
        mapping = ref() if ref is not None else None
        if mapping is None or not hasattr(mmap, "MADV_DONTNEED"):
            return
        for start, length in ranges:
            first = -(-start // mmap.PAGESIZE) * mmap.PAGESIZE
            last = (start + length) // mmap.PAGESIZE * mmap.PAGESIZE
            if last > first:
                try:
                    mapping.madvise(mmap.MADV_DONTNEED, first, last - first)
                except (OSError, ValueError):
                    return  # only memory kept a little longer

    def _append_rows(self, keys: np.ndarray, rows: np.ndarray) -> None:
        done = 0
        while done < len(keys):
            block, offset = divmod(self._size, BLOCK_ROWS)
            if block == len(self._vectors):
                # np.zeros maps fresh pages lazily: a small library never touches most of
                # its only block.
                self._vectors.append(np.zeros((BLOCK_ROWS, self.ndim), dtype=STORED_DTYPE))
                self._keys.append(np.zeros(BLOCK_ROWS, dtype=np.uint64))
            self._writable(block)
            take = min(len(keys) - done, BLOCK_ROWS - offset)
            self._vectors[block][offset : offset + take] = rows[done : done + take]
            self._keys[block][offset : offset + take] = keys[done : done + take]
            self._size += take
            done += take

    def add(self, keys: np.ndarray, vectors: np.ndarray) -> None:
        """Append keys that are not present (the caller removes replaced ones first)."""
        keys = np.asarray(keys, dtype=np.uint64)
        if not len(keys):
            return
        first = self._size
        self._append_rows(keys, as_stored(vectors).reshape(len(keys), self.ndim))
        self._merge_sorted(keys, np.arange(first, first + len(keys), dtype=np.int64))

    def _merge_sorted(self, keys: np.ndarray, rows: np.ndarray) -> None:
        order = np.argsort(keys, kind="stable")
        keys, rows = keys[order], rows[order]
        at = np.searchsorted(self._sorted_keys, keys)
        self._sorted_keys = np.insert(self._sorted_keys, at, keys)
        self._sorted_rows = np.insert(self._sorted_rows, at, rows)

    def remove(self, keys: np.ndarray | list[int]) -> int:
        """Remove present keys; returns how many were removed."""
        pos = self._positions(np.unique(np.asarray(keys, dtype=np.uint64)))
        pos = pos[pos >= 0]
        if not len(pos):
            return 0
        gone = np.sort(self._sorted_rows[pos])
        self._sorted_keys = np.delete(self._sorted_keys, pos)
        self._sorted_rows = np.delete(self._sorted_rows, pos)
        last = self._size - len(gone)
        holes = gone[gone < last]  # rows to fill, with the live rows from the tail
        tail = np.setdiff1d(np.arange(last, self._size, dtype=np.int64), gone)
        for hole, src in zip(holes.tolist(), tail.tolist(), strict=True):
            hb, ho = divmod(hole, BLOCK_ROWS)
            sb, so = divmod(src, BLOCK_ROWS)
            self._writable(hb)
            self._vectors[hb][ho] = self._vectors[sb][so]
            self._keys[hb][ho] = self._keys[sb][so]
        if len(holes):
            moved = np.array([self._keys[h // BLOCK_ROWS][h % BLOCK_ROWS] for h in holes.tolist()])
            self._sorted_rows[self._positions(moved)] = holes
        self._size = last
        blocks = -(-self._size // BLOCK_ROWS)
        del self._vectors[blocks:], self._keys[blocks:]
        self._shared = {b for b in self._shared if b < blocks}
        for block in [b for b in self._file_pages if b >= blocks]:
            self._release_file_pages(block)
        return len(gone)

    def search(self, vector: np.ndarray, count: int) -> tuple[np.ndarray, np.ndarray]:
        """The ``count`` nearest keys and their cosine distances, nearest first."""
        torch = _SCAN.kernel(self.ndim)
        if torch is not None:
            # The question rounded as USearch's kernel reads it, so that a search scores
            # the same whichever kernel this process timed faster (a search served by
            # the app and the same search run alone print the same scores).
            exact = as_stored(vector)[0].astype(np.float32)
            exact = exact / max(float(np.linalg.norm(exact)), 1e-12)
        else:
            query = as_stored(vector)[0]
        keys: list[np.ndarray] = []
        distances: list[np.ndarray] = []
        for block in range(len(self._vectors)):
            rows = self._rows_in(block)
            take = min(count, rows)
            if torch is not None:
                top, near = _SCAN.nearest(self._vectors[block][:rows], exact, take)
                keys.append(self._keys[block][top])
                distances.append(near)
                continue
            found = exact_search(
                self._vectors[block][:rows],
                query,
                take,
                "cos",
                exact=True,
                threads=SEARCH_THREADS,
            )
            keys.append(self._keys[block][np.asarray(found.keys, dtype=np.int64)])
            distances.append(np.asarray(found.distances, dtype=np.float32))
        if not keys:
            return np.zeros(0, dtype=np.uint64), np.zeros(0, dtype=np.float32)
        all_keys, all_distances = np.concatenate(keys), np.concatenate(distances)
        best = np.lexsort((all_keys, all_distances))[:count]  # ties broken by key
        return all_keys[best], all_distances[best]

    # --- file ---------------------------------------------------------------------

    def snapshot(self) -> tuple[int, list[np.ndarray], list[np.ndarray]]:
        """What a save writes; the blocks are shared until changed (copied then)."""
        blocks = len(self._vectors)
        self._shared = set(range(blocks))
        return self._size, list(self._keys), list(self._vectors)

    @staticmethod
    def chunks(
        ndim: int, snapshot: tuple[int, list[np.ndarray], list[np.ndarray]]
    ) -> Iterator[bytes | memoryview]:
        size, keys, vectors = snapshot
        yield HEADER.pack(MAGIC, FORMAT_VERSION, ndim, size)
        for b, block in enumerate(keys):
            yield block[: min(BLOCK_ROWS, size - b * BLOCK_ROWS)].data.cast("B")
        for b, block in enumerate(vectors):
            yield block[: min(BLOCK_ROWS, size - b * BLOCK_ROWS)].data.cast("B")

    def save(self) -> bytes:
        """The file's content (without its checksum trailer), as bytes."""
        snap = self.snapshot()
        return b"".join(bytes(c) for c in self.chunks(self.ndim, snap))

    @classmethod
    def read(cls, handle: io.BufferedIOBase, file_size: int) -> FlatVectors:
        """Load a saved file, checking its length and its checksum as it is read.

        The blocks are read-only views of the file mapped into memory, shared (copied
        before a change) like the blocks a save is writing. Copying 740 MB into fresh
        memory took 1.5-6 s on these virtual machines, almost all of it the first touch
        of each new page, against 0.6 s to map and checksum the same file from a cold
        page cache; the pages also stay the kernel's to drop and read again under memory
        pressure. Lectern never changes the file in place (a save renames a new one over
        it), so the mapping stays valid; Windows, which cannot rename over a mapped file,
        reads a copy."""
        mapping: mmap.mmap | None = None
        if os.name == "nt" or file_size < HEADER.size:
            data: memoryview = memoryview(handle.read())
        else:
            mapping = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
            data = memoryview(mapping)
        if len(data) != file_size:
            raise DamagedVectorsError("the file changed while it was read")
        head = bytes(data[: HEADER.size])
        if head[: len(MAGIC)] != MAGIC and _is_usearch_file(handle, head, file_size):
            raise LegacyVectorsError("an HNSW index from an earlier version")
        if len(head) < HEADER.size:
            raise DamagedVectorsError("the file is too short")
        magic, version, ndim, size = HEADER.unpack(head)
        if magic != MAGIC or version != FORMAT_VERSION:
            raise DamagedVectorsError("not a vector file of this version")
        tail = len(CHECKSUM_MARKER) + DIGEST_SIZE
        row_bytes = ndim * np.dtype(STORED_DTYPE).itemsize
        end = HEADER.size + size * (8 + row_bytes)
        if file_size != end + tail:
            raise DamagedVectorsError("the file's length does not match its header")
        digest = hashlib.blake2b(digest_size=DIGEST_SIZE)
        for start in range(0, end, CHECKSUM_STEP):
            digest.update(data[start : min(end, start + CHECKSUM_STEP)])
        trailer = bytes(data[end:])
        if trailer[: len(CHECKSUM_MARKER)] != CHECKSUM_MARKER:
            raise DamagedVectorsError("no checksum at the end of the file")
        if trailer[len(CHECKSUM_MARKER) :] != digest.digest():
            raise DamagedVectorsError("checksum does not match the content")
        flat = cls(ndim)
        blocks = -(-size // BLOCK_ROWS)
        rows_at = HEADER.size + size * 8
        for b in range(blocks):
            first = b * BLOCK_ROWS
            count = min(BLOCK_ROWS, size - first)
            keys_at, vectors_at = HEADER.size + first * 8, rows_at + first * row_bytes
            flat._keys.append(np.frombuffer(data, np.uint64, count, keys_at))
            flat._vectors.append(
                np.frombuffer(data, STORED_DTYPE, count * ndim, vectors_at).reshape(count, ndim)
            )
            if mapping is not None:
                flat._file_pages[b] = (
                    weakref.ref(mapping),
                    [(keys_at, count * 8), (vectors_at, count * row_bytes)],
                )
        flat._shared = set(range(blocks))  # the file's pages: copied before a change
        flat._size = size
        all_keys = flat.keys
        order = np.argsort(all_keys, kind="stable")
        flat._sorted_keys = all_keys[order]
        flat._sorted_rows = order.astype(np.int64)
        if len(all_keys) and np.any(flat._sorted_keys[1:] == flat._sorted_keys[:-1]):
            raise DamagedVectorsError("a key appears twice")
        return flat


class VectorIndex:
    def __init__(self, db: Database, path: Path, dim: int) -> None:
        self.db = db
        self.path = path
        self.dim = dim
        # Two locks, always taken in this order: ``_change_lock`` serialises changes
        # (add, remove, reconcile, rebuild), ``_lock`` guards the store against a search
        # reading it mid-change. A rebuild reads DuckDB holding only the first, so searches
        # go on against the old store until the new one is swapped in.
        self._change_lock = threading.RLock()
        self._lock = threading.RLock()
        self._save_lock = threading.Lock()  # one writer of the file at a time
        self._serialised = 0  # generations: a slow older save never overwrites a newer one
        self._written = 0
        self._index = FlatVectors(dim)
        self._dirty = False
        self.repair_report = ""

    def __len__(self) -> int:
        return len(self._index)

    # --- open / repair --------------------------------------------------------

    def open(self) -> str:
        """Load the file and reconcile it with DuckDB. Returns what was done."""
        with self._change_lock:
            loaded = False
            why = ""
            legacy = False
            if self.path.exists():
                try:
                    with open(self.path, "rb") as handle:
                        index = FlatVectors.read(handle, os.fstat(handle.fileno()).st_size)
                    if index.ndim != self.dim:
                        raise DamagedVectorsError(f"dimension {index.ndim} != {self.dim}")
                    self._check_sample(index)
                    with self._lock:
                        self._index = index
                    loaded = True
                except LegacyVectorsError:
                    legacy = True  # the format changed: rebuilt, and no damage to report
                except Exception as exc:  # damaged or foreign file: rebuild from DuckDB
                    log.warning("vector index %s unusable (%s); rebuilding", self.path, exc)
                    why = f" ({exc})"
            if not loaded:
                self.rebuild()
                if why:
                    self.repair_report = f"rebuilt, damaged{why}"
                else:
                    self.repair_report = "rebuilt (earlier format)" if legacy else "rebuilt"
                return self.repair_report
            self.repair_report = self.reconcile()
            return self.repair_report

    def _check_sample(self, index: FlatVectors) -> None:
        """Compare a spread of the file's vectors with the embeddings in DuckDB.

        The sample is drawn from the file's keys and each is looked up by its primary key:
        choosing it in SQL (``ORDER BY hash(id)``) scanned every embedding, which took
        seconds at open and left the whole column (1.5 GB at 1M chunks) in DuckDB's
        cache."""
        keys = np.sort(index.keys)
        if not len(keys):
            return
        picks = np.unique(
            keys[np.linspace(0, len(keys) - 1, min(SAMPLE_SIZE, len(keys))).astype(int)]
        )
        cur = self.db.cursor()
        rows = []
        for key in picks.tolist():
            row = cur.execute(
                "SELECT id, embedding FROM chunks WHERE id = ? AND embedding IS NOT NULL", [key]
            ).fetchone()
            if row is not None:  # gone or not embedded: reconcile removes it
                rows.append(row)
        if not rows:
            return
        stored = blobs_to_matrix([r[1] for r in rows], self.dim)
        found = index.get(np.array([r[0] for r in rows], dtype=np.uint64))
        norms = np.linalg.norm(stored, axis=1) * np.linalg.norm(found, axis=1)
        cosine = np.einsum("ij,ij->i", stored, found) / np.where(norms > 0, norms, 1.0)
        # A zero embedding quantises to zeros: nothing to compare, not damage.
        bad = int(np.sum(~(cosine >= MIN_SAMPLE_COSINE) & (np.abs(stored).sum(axis=1) > 0)))
        if bad:
            raise DamagedVectorsError(
                f"{bad} of {len(rows)} sampled vectors differ from the stored embeddings"
            )

    def stored_ids(self) -> np.ndarray:
        """Ids of the chunks that have an embedding, sorted (one not embedded yet has no
        place in the vector index). Reads every embedding: DuckDB cannot test a BLOB for
        NULL without loading it, so the paths that run at open avoid this."""
        rows = (
            self.db.cursor()
            .execute("SELECT id FROM chunks WHERE embedding IS NOT NULL ORDER BY id")
            .fetchnumpy()
        )
        return np.asarray(rows["id"], dtype=np.uint64)

    def _chunk_ids(self) -> np.ndarray:
        """Every chunk id, sorted: the id column alone (8 MB at 1M chunks)."""
        rows = self.db.cursor().execute("SELECT id FROM chunks ORDER BY id").fetchnumpy()
        return np.asarray(rows["id"], dtype=np.uint64)

    def _embedded_among(self, ids: np.ndarray) -> np.ndarray:
        """Those of the sorted ``ids`` whose chunk has an embedding, asked by id range so
        DuckDB reads the embedding column only where the ids are (at open, the ids not in
        the file: none, or the newest chunks)."""
        cur = self.db.cursor()
        found: list[np.ndarray] = []
        for i in range(0, len(ids), READ_BATCH):
            part = ids[i : i + READ_BATCH]
            lo, hi = int(part[0]), int(part[-1])
            if hi - lo + 1 == len(part):
                rows = cur.execute(
                    "SELECT id FROM chunks WHERE id BETWEEN ? AND ? AND embedding IS NOT NULL",
                    [lo, hi],
                ).fetchnumpy()
            else:
                rows = cur.execute(
                    "SELECT id FROM chunks WHERE id BETWEEN ? AND ? AND embedding IS NOT NULL "
                    "AND id IN (SELECT unnest(?::BIGINT[]))",
                    [lo, hi, [int(x) for x in part]],
                ).fetchnumpy()
            found.append(np.asarray(rows["id"], dtype=np.uint64))
        return np.sort(np.concatenate(found)) if found else np.zeros(0, dtype=np.uint64)

    def reconcile(self) -> str:
        """Make the index's keys equal to the chunk ids that have embeddings.

        Stale keys are those whose chunk is gone; missing ones are chunks outside the
        file that have an embedding. An embedding is never cleared once set (a changed
        chunk is a new row with a new id), so a key whose chunk still exists is kept
        without reading its embedding: reading them all took 1.1 s and 150 MB of DuckDB
        cache per 100k chunks at every open."""
        with self._change_lock:
            chunk_ids = self._chunk_ids()
            present = np.sort(self._index.keys)
            stale = np.setdiff1d(present, chunk_ids, assume_unique=True)
            missing = self._embedded_among(np.setdiff1d(chunk_ids, present, assume_unique=True))
            if not len(missing) and not len(stale):
                return "ok"
            wanted = len(present) - len(stale) + len(missing)
            if len(stale) + len(missing) > TOMBSTONE_REBUILD_FRACTION * max(1, wanted):
                self.rebuild()
                return f"rebuilt ({len(missing)} missing, {len(stale)} stale)"
            if len(stale):
                self.remove(stale)
            if len(missing):
                self._add_from_db(missing)
            self._save_unless_disk_full()
            return f"repaired ({len(missing)} added, {len(stale)} removed)"

    def rebuild(self) -> None:
        """A new store from every embedding in DuckDB, read in id order in batches (the
        whole table at once took gigabytes at 1M chunks). Searches use the old store
        until the new one is complete."""
        with self._change_lock:
            fresh = FlatVectors(self.dim)
            for keys, vectors in self._read_embeddings(self._chunk_ids()):
                fresh.add(keys, vectors)
            with self._lock:
                self._index = fresh
                self._dirty = True
            self._save_unless_disk_full()

    def _save_unless_disk_full(self) -> None:
        """A repair made at open is kept in memory when the disk is full, so search works;
        the next save writes it."""
        try:
            self.save()
        except DiskFullError as exc:
            log.warning("vector index kept in memory: %s", exc.message)

    def _read_embeddings(self, ids: np.ndarray) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """(keys, float32 vectors) for the given sorted ids that still have an embedding,
        by id range: DuckDB skips row groups outside each range instead of scanning the
        table for every batch."""
        cur = self.db.cursor()
        for i in range(0, len(ids), READ_BATCH):
            part = ids[i : i + READ_BATCH]
            lo, hi = int(part[0]), int(part[-1])
            if hi - lo + 1 == len(part):  # a contiguous run: the range says it all
                rows = cur.execute(
                    "SELECT id, embedding FROM chunks WHERE id BETWEEN ? AND ? "
                    "AND embedding IS NOT NULL",
                    [lo, hi],
                ).fetchall()
            else:
                rows = cur.execute(
                    "SELECT id, embedding FROM chunks WHERE id BETWEEN ? AND ? "
                    "AND embedding IS NOT NULL AND id IN (SELECT unnest(?::BIGINT[]))",
                    [lo, hi, [int(x) for x in part]],
                ).fetchall()
            if rows:
                keys = np.array([r[0] for r in rows], dtype=np.uint64)
                yield keys, blobs_to_matrix([r[1] for r in rows], self.dim)

    def _add_from_db(self, ids: np.ndarray) -> None:
        for keys, vectors in self._read_embeddings(np.sort(np.asarray(ids, dtype=np.uint64))):
            self.add(keys, vectors)

    # --- changes ----------------------------------------------------------------

    def add(self, keys: np.ndarray, vectors: np.ndarray) -> None:
        """Insert or replace vectors (a replayed write must not fail on existing keys)."""
        if not len(keys):
            return
        keys = np.asarray(keys, dtype=np.uint64)
        vectors = np.asarray(vectors, dtype=np.float32).reshape(len(keys), self.dim)
        # A key given twice keeps its last vector, as repeated inserts would.
        _, last = np.unique(keys[::-1], return_index=True)
        if len(last) != len(keys):
            pick = np.sort(len(keys) - 1 - last)
            keys, vectors = keys[pick], vectors[pick]
        with self._change_lock, self._lock:
            self._index.remove(keys)
            self._index.add(keys, vectors)
            self._dirty = True

    def remove(self, keys: np.ndarray | list[int]) -> None:
        keys = np.asarray(keys, dtype=np.uint64)
        if not len(keys):
            return
        with self._change_lock, self._lock:
            if self._index.remove(keys):
                self._dirty = True

    def save(self) -> None:
        if self.db.read_only:
            return  # a library opened read-only: a repair made at open stays in memory
        # Writing and fsyncing the file takes ~0.5-0.7 s at 100k chunks. Under the index
        # lock, every dense search would wait that long; only taking the snapshot holds
        # it (the blocks are shared, and a change during the write copies the block it
        # touches). The file lock is never held while waiting for the index lock.
        with self._lock:
            snap = self._index.snapshot()
            self._dirty = False
            self._serialised += 1
            generation = self._serialised
        with self._save_lock:
            if generation < self._written:
                return  # a newer state is already on disk
            try:
                with private_file(self.path) as handle:
                    digest = hashlib.blake2b(digest_size=DIGEST_SIZE)
                    for chunk in FlatVectors.chunks(self.dim, snap):
                        digest.update(chunk)
                        handle.write(chunk)
                    handle.write(CHECKSUM_MARKER + digest.digest())
            except BaseException as exc:
                self._dirty = True  # not on disk: the next save must try again
                if isinstance(exc, OSError) and is_disk_full(exc):
                    raise disk_full_error(self.path) from exc
                raise
            self._written = generation

    def save_if_dirty(self) -> None:
        if self._dirty:
            self.save()

    # --- query ------------------------------------------------------------------

    def search(self, vector: np.ndarray, limit: int) -> list[tuple[int, float]]:
        """(chunk id, cosine similarity) of the ``limit`` nearest, nearest first."""
        keys, sims = self.nearest(vector, limit)
        return list(zip(keys.tolist(), sims.tolist(), strict=True))

    def nearest(self, vector: np.ndarray, limit: int) -> tuple[np.ndarray, np.ndarray]:
        """The ``limit`` nearest chunk ids (int64) and their cosine similarities
        (float32), nearest first."""
        with self._lock:
            if not len(self._index) or limit <= 0:
                return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32)
            keys, distances = self._index.search(np.asarray(vector, dtype=np.float32), limit)
        # Cosine distance from the kernel; callers want similarity.
        return keys.astype(np.int64), (1.0 - distances).astype(np.float32)


def saved_keys(path: Path) -> np.ndarray:
    """The keys of a saved vector file, its checksum checked (DamagedVectorsError or
    LegacyVectorsError when it cannot be used): what a crash left on disk."""
    with open(path, "rb") as handle:
        return FlatVectors.read(handle, os.fstat(handle.fileno()).st_size).keys
