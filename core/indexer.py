"""Indexing stage: diff the library folders against the database, then parse, chunk,
embed and write each changed file.

Work is committed per file (its chunks, embeddings, text and state in one transaction),
so an interrupted run loses at most the file in flight and the next run resumes from the
database: files already written are unchanged on disk and skipped. Parsing runs ahead in
a thread (the parser itself in a separate process) while the model embeds, so the two
cores stay busy; embedding batches span several small files for the same reason.
"""

from __future__ import annotations

import bisect
import hashlib
import json
import logging
import os
import queue
import shutil
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import duckdb
import numpy as np

from core.chunking import Chunker
from core.embedding import Embedder
from core.errors import DiskFullError, ParseError
from core.ingest.registry import detect_type, skip_reason
from core.ingest.sandbox import ParserPool
from core.records import Chunk, DocState, IndexProgress, IndexReport, ParsedDocument
from core.scan import FileInfo, file_info, is_ignored_in, iter_files
from core.store.db import MIN_FREE_BYTES, Database, disk_full_error, is_disk_full
from core.store.keyword import KeywordIndex
from core.store.vectors import VectorIndex, blobs_to_matrix

log = logging.getLogger(__name__)

ProgressCallback = Callable[[IndexProgress], None]
EMBED_BATCH_CHUNKS = 64
PUBLISH_EVERY_S = 30.0
HASH_BLOCK = 1 << 20


def file_hash(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(HASH_BLOCK):
            digest.update(block)
    return digest.hexdigest()


@dataclass
class Controls:
    """Pause/resume/cancel for a running index job (set from any thread)."""

    cancel: threading.Event = field(default_factory=threading.Event)
    running: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        self.running.set()

    def pause(self) -> None:
        self.running.clear()

    def resume(self) -> None:
        self.running.set()

    def stop(self) -> None:
        self.cancel.set()
        self.running.set()

    def wait_if_paused(self) -> None:
        while not self.running.wait(0.2):
            if self.cancel.is_set():
                return


@dataclass(frozen=True)
class _Prepared:
    info: FileInfo
    content_hash: str
    doc_type: str | None
    parsed: ParsedDocument | None = None
    chunks: tuple[Chunk, ...] = ()
    reuse_from: int | None = None  # document id with identical content already embedded
    state: DocState = DocState.INDEXED
    reason: str = ""


@dataclass(frozen=True)
class Plan:
    to_index: tuple[FileInfo, ...]
    to_remove: tuple[str, ...]
    touched: tuple[FileInfo, ...]  # same content, new mtime: metadata update only
    unchanged: int


def _root_of(path: str, folders: Sequence[str]) -> str | None:
    """The library folder that holds ``path``."""
    return next(
        (f for f in folders if path == f or path.startswith(f.rstrip(os.sep) + os.sep)), None
    )


def _under(sorted_paths: list[str], folder: str) -> list[str]:
    prefix = folder.rstrip(os.sep) + os.sep
    start = bisect.bisect_left(sorted_paths, prefix)
    found = []
    for path in sorted_paths[start:]:
        if not path.startswith(prefix):
            break
        found.append(path)
    return found


class Indexer:
    def __init__(
        self,
        db: Database,
        keyword: KeywordIndex,
        vectors: Callable[[], VectorIndex],
        embedder: Callable[[], Embedder],
        chunker: Callable[[], Chunker],
        parser: ParserPool,
        index_config: str,
        ignore_patterns: Sequence[str] = (),
    ) -> None:
        self.db = db
        self.keyword = keyword
        self._vectors = vectors
        self._embedder = embedder
        self._chunker = chunker
        self.parser = parser
        self.index_config = index_config
        self.ignore_patterns = tuple(ignore_patterns)
        # One run at a time: the watcher, a full index and a folder removal must not
        # interleave their plans and writes.
        self.lock = threading.RLock()
        # Called with the paths of removed documents after their rows are gone, so other
        # stores (saved conversations) can drop text copied from them.
        self.on_removed: list[Callable[[Sequence[str]], None]] = []
        # Saving the vector file costs ~0.5 s at 100k chunks. It is derived data (checked
        # against DuckDB at open), so the folder watcher, applying many small change
        # sets, raises this to save it at most this often instead of after every one.
        self.vector_save_interval_s = 0.0
        self._last_vector_save = float("-inf")

    # --- planning ---------------------------------------------------------------

    def plan(self, folders: Iterable[str], only: Iterable[str] | None = None) -> Plan:
        """Compare disk with the database. ``only`` limits the plan to these paths
        (used by the watcher); otherwise whole folders are scanned. A folder in ``only``
        stands for everything under it: what is on disk now and what was indexed there
        (a folder deleted, moved away or moved in)."""
        cur = self.db.cursor()
        known: dict[str, tuple[int, float, str, str, str | None]] = {}
        folder_list = list(folders)
        roots = set(folder_list)
        rows = cur.execute(
            "SELECT path, size, mtime, state, content_hash, index_config, folder FROM documents"
        ).fetchall()
        for path, size, mtime, state, digest, config, folder in rows:
            if folder in roots:
                known[path] = (size, mtime, state, digest, config)
        on_disk: list[FileInfo] = []
        if only is None:
            for folder in folder_list:
                on_disk.extend(iter_files(folder, self.ignore_patterns))
            candidates = set(known)
        else:
            candidates = set()
            sorted_known: list[str] | None = None
            listed: set[str] = set()
            for path in only:
                folder = _root_of(path, folder_list)
                if folder is None:
                    continue
                candidates.add(path)
                if path not in known:
                    # Possibly a folder: what was indexed below it is in question too.
                    if sorted_known is None:
                        sorted_known = sorted(known)
                    candidates.update(_under(sorted_known, path))
                if is_ignored_in(path, folder, self.ignore_patterns):
                    continue  # as in a full scan: not part of the library (removed if known)
                if os.path.isdir(path):
                    for info in iter_files(path, self.ignore_patterns):
                        if info.path not in listed:
                            listed.add(info.path)
                            on_disk.append(replace(info, folder=folder))
                    continue
                info = file_info(path, folder)
                if info is not None and path not in listed:
                    listed.add(path)
                    on_disk.append(info)
        seen = {f.path for f in on_disk}
        to_index: list[FileInfo] = []
        touched: list[FileInfo] = []
        unchanged = 0
        for info in on_disk:
            prior = known.get(info.path)
            if prior is None:
                to_index.append(info)
                continue
            size, mtime, state, digest, config = prior
            if (
                state == DocState.PENDING.value
                or (state == DocState.INDEXED.value and config != self.index_config)
                or size != info.size
            ):
                to_index.append(info)
            elif mtime != info.mtime and info.special:
                to_index.append(info)  # never hashed: a pipe would block the open
            elif mtime != info.mtime:
                # Same size, new mtime: only a hash tells whether the content changed
                # (a `touch`, a copy, a sync tool re-writing the same bytes).
                try:
                    same = file_hash(info.path) == digest
                except OSError:
                    same = False
                (touched if same else to_index).append(info)
            else:
                unchanged += 1
        to_remove = tuple(sorted(p for p in candidates if p not in seen))
        return Plan(tuple(to_index), to_remove, tuple(touched), unchanged)

    # --- running ----------------------------------------------------------------

    def run(
        self,
        folders: Iterable[str],
        *,
        only: Iterable[str] | None = None,
        progress: ProgressCallback | None = None,
        controls: Controls | None = None,
    ) -> IndexReport:
        with self.lock:
            return self._run(folders, only, progress, controls or Controls())

    def _run(
        self,
        folders: Iterable[str],
        only: Iterable[str] | None,
        progress: ProgressCallback | None,
        controls: Controls,
    ) -> IndexReport:
        started = time.monotonic()
        self._vectors()  # open (and reconcile) before writing, so it never replays our own writes
        plan = self.plan(folders, only)
        # A file that was moved or renamed shows up as one path removed and one added with
        # the same content: the removed one stays until the run ends so that the added one
        # can take its chunks and embeddings (matched by content hash) instead of
        # re-embedding them. Only sizes that match a new file can be such a source.
        move_sources = self._possible_move_sources(plan)
        removed = self.remove_paths([p for p in plan.to_remove if p not in move_sources])
        self._touch(plan.touched)
        counts = {"added": 0, "updated": 0, "failed": 0, "skipped": 0, "embedded": 0, "reused": 0}
        failures: list[tuple[str, str]] = []
        existing = self._existing_paths([f.path for f in plan.to_index])
        total = len(plan.to_index)
        done = 0

        def report(current: str = "") -> None:
            if progress:
                progress(
                    IndexProgress(
                        files_total=total,
                        files_done=done,
                        chunks_done=counts["embedded"] + counts["reused"],
                        current=current,
                        elapsed_s=time.monotonic() - started,
                        failed=counts["failed"],
                        skipped=counts["skipped"],
                    )
                )

        report()
        prepared_queue: queue.Queue[_Prepared | None] = queue.Queue(maxsize=32)
        stop_producer = threading.Event()
        producer = threading.Thread(
            target=self._produce,
            args=(plan.to_index, prepared_queue, controls, stop_producer),
            daemon=True,
            name="lectern-parse",
        )
        producer.start()
        pending: list[_Prepared] = []
        pending_chunks = 0
        finished = False
        last_publish = time.monotonic()
        try:
            while not (finished and not pending):
                idle = False
                try:
                    # With work waiting, look for more only briefly: a batch that spans
                    # files embeds faster, but the model must not sit idle.
                    item = prepared_queue.get(timeout=0.05 if pending else 0.5)
                except queue.Empty:
                    idle = True
                    if not producer.is_alive() and prepared_queue.empty():
                        finished = True
                else:
                    if item is None:
                        finished = True
                    else:
                        pending.append(item)
                        if item.reuse_from is None:
                            pending_chunks += len(item.chunks)
                if not pending or not (finished or idle or pending_chunks >= EMBED_BATCH_CHUNKS):
                    continue
                controls.wait_if_paused()
                if controls.cancel.is_set():
                    break
                batch, pending, pending_chunks = pending, [], 0
                vectors = self._embed_batch(batch)
                for prepared in batch:
                    vectors_for, fresh = vectors.get(prepared.info.path, (None, 0))
                    self._ensure_space(total - done, counts["embedded"] + counts["reused"], done)
                    chunks_written = self._write(prepared, vectors_for)
                    done += 1
                    if prepared.state is DocState.FAILED:
                        counts["failed"] += 1
                        failures.append((prepared.info.path, prepared.reason))
                    elif prepared.state is DocState.SKIPPED:
                        counts["skipped"] += 1
                    elif prepared.info.path in existing:
                        counts["updated"] += 1
                    else:
                        counts["added"] += 1
                    counts["embedded"] += fresh
                    counts["reused"] += chunks_written - fresh
                    report(prepared.info.path)
                if time.monotonic() - last_publish > PUBLISH_EVERY_S:
                    # Long runs: make finished files searchable and persist vectors as we go.
                    self.publish()
                    last_publish = time.monotonic()
        finally:
            stop_producer.set()
            deadline = time.monotonic() + 2.0
            while producer.is_alive() and time.monotonic() < deadline:
                try:
                    prepared_queue.get(timeout=0.05)
                except queue.Empty:
                    pass
            # Wait for the producer before removing donors it may still be reading.
            producer.join(timeout=5.0)
            removed += self.remove_paths(sorted(move_sources))
            self.publish()
        return IndexReport(
            added=counts["added"],
            updated=counts["updated"],
            removed=removed,
            unchanged=plan.unchanged + len(plan.touched),
            failed=counts["failed"],
            skipped=counts["skipped"],
            chunks_embedded=counts["embedded"],
            chunks_reused=counts["reused"],
            elapsed_s=time.monotonic() - started,
            cancelled=controls.cancel.is_set(),
            failures=tuple(failures),
        )

    def _possible_move_sources(self, plan: Plan) -> set[str]:
        if not plan.to_remove or not plan.to_index:
            return set()
        rows = (
            self.db.cursor()
            .execute(
                """SELECT path FROM documents WHERE path IN (SELECT unnest(?::VARCHAR[]))
                   AND state = 'indexed' AND size IN (SELECT unnest(?::BIGINT[]))""",
                [list(plan.to_remove), sorted({f.size for f in plan.to_index})],
            )
            .fetchall()
        )
        return {r[0] for r in rows}

    def publish(self) -> None:
        """Make committed changes visible to keyword search and persist the vector file.
        A due keyword base rebuild runs on its own thread; new chunks go to the delta,
        searchable at once, so indexing and other writers never wait seconds for it.

        On a full disk the derived indexes stay behind (the record is what counts): the
        next publish, or the next open, brings them up to date."""
        try:
            self.keyword.refresh(background=True)
            self._vectors().maybe_compact()
            self.save_vectors(older_than_s=self.vector_save_interval_s)
        except (DiskFullError, duckdb.Error, OSError) as exc:
            if not is_disk_full(exc):
                raise
            log.warning("derived indexes not updated, the disk is full: %s", exc)

    def _ensure_space(self, files_left: int, chunks_so_far: int, files_so_far: int) -> None:
        """Stop before the disk is full rather than when DuckDB finds it full: the report
        says how much room the rest of the run needs."""
        if self.db.path == ":memory:":
            return
        try:
            free = shutil.disk_usage(Path(str(self.db.path)).parent).free
        except OSError:
            return
        if free >= MIN_FREE_BYTES:
            return
        per_file = chunks_so_far / files_so_far if files_so_far else 10.0
        # A generous guess of 8 KB a chunk: a 1.5 KB float32 embedding, up to 256 tokens
        # of text and the index entries, written once to the log and again to the file.
        raise disk_full_error(self.db.path, MIN_FREE_BYTES + int(files_left * per_file * 8192))

    def save_vectors(self, older_than_s: float = 0.0) -> None:
        """Persist the vector file if it changed, unless saved less than ``older_than_s`` ago."""
        if time.monotonic() - self._last_vector_save >= older_than_s:
            self._vectors().save_if_dirty()
            self._last_vector_save = time.monotonic()

    # --- producer: hash, detect, parse, chunk -------------------------------------

    def _produce(
        self,
        files: Sequence[FileInfo],
        out: queue.Queue[_Prepared | None],
        controls: Controls,
        stop: threading.Event,
    ) -> None:
        try:
            for info in files:
                controls.wait_if_paused()
                if controls.cancel.is_set() or stop.is_set():
                    break
                prepared = self._prepare(info)
                while not stop.is_set():
                    try:
                        out.put(prepared, timeout=0.2)
                        break
                    except queue.Full:
                        continue
        finally:
            # The end marker must arrive even when the queue is full while the consumer
            # embeds a large batch; only an abandoned run (stop set) may drop it.
            while not stop.is_set():
                try:
                    out.put(None, timeout=0.2)
                    break
                except queue.Full:
                    continue

    def _prepare(self, info: FileInfo) -> _Prepared:
        if info.special:
            return _Prepared(info, "", None, state=DocState.SKIPPED, reason=info.special)
        try:
            digest = file_hash(info.path)
        except OSError as exc:
            return _Prepared(
                info,
                "",
                None,
                state=DocState.FAILED,
                reason=f"cannot be read: {exc.strerror or exc}",
            )
        doc_type = detect_type(info.path)
        if doc_type is None:
            return _Prepared(
                info, digest, None, state=DocState.SKIPPED, reason=skip_reason(info.path)
            )
        donor = self._find_donor(digest, info.path)
        if donor is not None:
            return _Prepared(info, digest, doc_type, reuse_from=donor)
        try:
            parsed = self.parser.parse(info.path)
        except ParseError as exc:
            return _Prepared(info, digest, doc_type, state=DocState.FAILED, reason=exc.reason)
        except Exception as exc:  # a parser bug must cost one file, not the run
            log.exception("parser failed on %s", info.path)
            return _Prepared(
                info, digest, doc_type, state=DocState.FAILED, reason=f"could not be read: {exc}"
            )
        chunks = tuple(self._chunker().chunk(parsed))
        if not chunks:
            return _Prepared(
                info, digest, doc_type, parsed=parsed, state=DocState.FAILED, reason="no text found"
            )
        return _Prepared(info, digest, doc_type, parsed=parsed, chunks=chunks)

    def _find_donor(self, digest: str, path: str) -> int | None:
        row = (
            self.db.cursor()
            .execute(
                """SELECT id FROM documents WHERE content_hash = ? AND state = 'indexed'
               AND index_config = ? AND path <> ? LIMIT 1""",
                [digest, self.index_config, path],
            )
            .fetchone()
        )
        return int(row[0]) if row else None

    # --- consumer: embed and write ------------------------------------------------

    def _embed_batch(self, batch: Sequence[_Prepared]) -> dict[str, tuple[np.ndarray, int]]:
        """Vectors per file, and how many of them the model had to compute.

        An edited file usually keeps most of its passages: chunks whose exact text (with
        context) is already stored for that path reuse their embedding, so saving a small
        change to a long document re-embeds only the passages that changed.
        """
        texts: list[str] = []
        owners: list[tuple[str, list[int | np.ndarray]]] = []
        for prepared in batch:
            if prepared.state is not DocState.INDEXED or prepared.reuse_from is not None:
                continue
            previous = self._stored_embeddings(prepared.info.path)
            slots: list[int | np.ndarray] = []
            for chunk in prepared.chunks:
                known = previous.get(chunk.embedding_text)
                if known is not None:
                    slots.append(known)
                else:
                    slots.append(len(texts))
                    texts.append(chunk.embedding_text)
            owners.append((prepared.info.path, slots))
        computed = self._embedder().embed(texts) if texts else np.zeros((0, 0), dtype=np.float32)
        result: dict[str, tuple[np.ndarray, int]] = {}
        for path, slots in owners:
            rows = [computed[s] if isinstance(s, int) else s for s in slots]
            fresh = sum(1 for s in slots if isinstance(s, int))
            result[path] = (np.vstack(rows).astype(np.float32) if rows else computed[:0], fresh)
        return result

    def _stored_embeddings(self, path: str) -> dict[str, np.ndarray]:
        rows = (
            self.db.cursor()
            .execute(
                """SELECT coalesce(c.context, '') , c.text, c.embedding FROM chunks c
                   JOIN documents d ON d.id = c.document_id
                   WHERE d.path = ? AND d.index_config = ? AND c.embedding IS NOT NULL""",
                [path, self.index_config],
            )
            .fetchall()
        )
        stored: dict[str, np.ndarray] = {}
        for context, text, blob in rows:
            key = f"{context}\n{text}" if context else text
            stored[key] = np.frombuffer(blob, dtype=np.float32)
        return stored

    def _existing_paths(self, paths: Sequence[str]) -> set[str]:
        if not paths:
            return set()
        rows = (
            self.db.cursor()
            .execute(
                "SELECT path FROM documents WHERE path IN (SELECT unnest(?::VARCHAR[])) AND state <> 'pending'",
                [list(paths)],
            )
            .fetchall()
        )
        return {r[0] for r in rows}

    def _write(self, prepared: _Prepared, vectors: np.ndarray | None) -> int:
        """Replace the file's rows in one transaction; returns the chunks written."""
        info = prepared.info
        parsed = prepared.parsed
        old_ids: list[int] = []
        new_keys: np.ndarray = np.zeros(0, dtype=np.uint64)
        with self.db.transaction() as cur:
            row = cur.execute("SELECT id FROM documents WHERE path = ?", [info.path]).fetchone()
            if row is None:
                doc_id = int(
                    cur.execute(
                        "INSERT INTO documents(path, folder, state) VALUES (?, ?, 'pending') RETURNING id",
                        [info.path, info.folder],
                    ).fetchone()[0]
                )
            else:
                doc_id = int(row[0])
                old_ids = [
                    r[0]
                    for r in cur.execute(
                        "SELECT id FROM chunks WHERE document_id = ?", [doc_id]
                    ).fetchall()
                ]
                cur.execute("DELETE FROM chunks WHERE document_id = ?", [doc_id])
                cur.execute("DELETE FROM document_text WHERE document_id = ?", [doc_id])
            title = os.path.splitext(os.path.basename(info.path))[0]
            pages = 0
            chunk_count = 0
            if prepared.reuse_from is not None:
                donor = prepared.reuse_from
                title, pages = cur.execute(
                    "SELECT title, pages FROM documents WHERE id = ?", [donor]
                ).fetchone()
                cur.execute(
                    "INSERT INTO document_text SELECT ?, text, pages FROM document_text WHERE document_id = ?",
                    [doc_id, donor],
                )
                new_keys = np.array(
                    [
                        r[0]
                        for r in cur.execute(
                            """INSERT INTO chunks(document_id, ordinal, text, context, start_char, end_char,
                                   page_start, page_end, heading_path, token_count, embedding)
                               SELECT ?, ordinal, text, context, start_char, end_char, page_start, page_end,
                                   heading_path, token_count, embedding
                               FROM chunks WHERE document_id = ? ORDER BY ordinal RETURNING id""",
                            [doc_id, donor],
                        ).fetchall()
                    ],
                    dtype=np.uint64,
                )
                chunk_count = len(new_keys)
            elif parsed is not None:
                title = parsed.title or title
                pages = parsed.page_count
                cur.execute(
                    "INSERT INTO document_text VALUES (?, ?, ?)",
                    [
                        doc_id,
                        parsed.text,
                        json.dumps([[p.page, p.start, p.end] for p in parsed.pages]),
                    ],
                )
                if prepared.state is DocState.INDEXED and vectors is not None:
                    new_keys = self._insert_chunks(cur, doc_id, prepared.chunks, vectors)
                    chunk_count = len(new_keys)
            cur.execute(
                """UPDATE documents SET folder = ?, size = ?, mtime = ?, content_hash = ?, type = ?, title = ?,
                       pages = ?, state = ?, reason = ?, chunks = ?, index_config = ?, indexed_at = current_timestamp
                   WHERE id = ?""",
                [
                    info.folder,
                    info.size,
                    info.mtime,
                    prepared.content_hash,
                    prepared.doc_type or "",
                    title,
                    pages,
                    prepared.state.value,
                    prepared.reason,
                    chunk_count,
                    self.index_config,
                    doc_id,
                ],
            )
            self._bump_version(cur)
        vectors_index = self._vectors()
        vectors_index.remove(old_ids)
        if len(new_keys):
            if prepared.reuse_from is not None:
                rows = (
                    self.db.cursor()
                    .execute(
                        "SELECT embedding FROM chunks WHERE document_id = ? ORDER BY ordinal",
                        [doc_id],
                    )
                    .fetchall()
                )
                vectors_index.add(
                    new_keys, blobs_to_matrix([r[0] for r in rows], vectors_index.dim)
                )
            elif vectors is not None:
                vectors_index.add(new_keys, vectors)
        return chunk_count

    def _insert_chunks(
        self,
        cur: duckdb.DuckDBPyConnection,
        doc_id: int,
        chunks: Sequence[Chunk],
        vectors: np.ndarray,
    ) -> np.ndarray:
        ids = np.array(
            [
                r[0]
                for r in cur.execute(
                    "SELECT nextval('chunk_ids') FROM range(?)", [len(chunks)]
                ).fetchall()
            ],
            dtype=np.int64,
        )
        # A dict of numpy columns is scanned by DuckDB in bulk; per-row parameters are far slower.
        new_chunks = {  # noqa: F841 - read by DuckDB's replacement scan below
            "id": ids,
            "ordinal": np.array([c.ordinal for c in chunks], dtype=np.int32),
            "text": np.array([c.text for c in chunks], dtype=object),
            "context": np.array([c.context for c in chunks], dtype=object),
            "start_char": np.array([c.start for c in chunks], dtype=np.int64),
            "end_char": np.array([c.end for c in chunks], dtype=np.int64),
            "page_start": np.array(
                [c.page_start if c.page_start is not None else -1 for c in chunks], dtype=np.int32
            ),
            "page_end": np.array(
                [c.page_end if c.page_end is not None else -1 for c in chunks], dtype=np.int32
            ),
            "heading_path": np.array(
                [json.dumps(list(c.heading_path)) for c in chunks], dtype=object
            ),
            "token_count": np.array([c.token_count for c in chunks], dtype=np.int32),
            "embedding": np.array(
                [np.ascontiguousarray(v, dtype=np.float32).tobytes() for v in vectors], dtype=object
            ),
        }
        cur.execute(
            """INSERT INTO chunks(id, document_id, ordinal, text, context, start_char, end_char, page_start,
                   page_end, heading_path, token_count, embedding)
               SELECT id, ?, ordinal, text, context, start_char, end_char, nullif(page_start, -1),
                   nullif(page_end, -1), heading_path, token_count, embedding::BLOB FROM new_chunks""",
            [doc_id],
        )
        return ids.astype(np.uint64)

    def _bump_version(self, cur: object) -> None:
        version = int(self.db.get_meta("content_version", "0") or 0) + 1
        self.db.set_meta("content_version", str(version), cur)  # type: ignore[arg-type]

    def _touch(self, files: Sequence[FileInfo]) -> None:
        if not files:
            return
        with self.db.transaction() as cur:
            for info in files:
                cur.execute(
                    "UPDATE documents SET mtime = ? WHERE path = ?", [info.mtime, info.path]
                )

    def remove_paths(self, paths: Sequence[str]) -> int:
        """Forget these files: their rows, text, chunks and vectors."""
        if not paths:
            return 0
        with self.db.transaction() as cur:
            ids = [
                r[0]
                for r in cur.execute(
                    "SELECT id FROM documents WHERE path IN (SELECT unnest(?::VARCHAR[]))",
                    [list(paths)],
                ).fetchall()
            ]
            if not ids:
                return 0
            chunk_ids = [
                r[0]
                for r in cur.execute(
                    "SELECT id FROM chunks WHERE document_id IN (SELECT unnest(?::BIGINT[]))", [ids]
                ).fetchall()
            ]
            cur.execute(
                "DELETE FROM chunks WHERE document_id IN (SELECT unnest(?::BIGINT[]))", [ids]
            )
            cur.execute(
                "DELETE FROM document_text WHERE document_id IN (SELECT unnest(?::BIGINT[]))", [ids]
            )
            cur.execute("DELETE FROM documents WHERE id IN (SELECT unnest(?::BIGINT[]))", [ids])
            self._bump_version(cur)
        self._vectors().remove(chunk_ids)
        for callback in self.on_removed:
            try:
                callback(list(paths))
            except Exception:  # a secondary store must never undo or block the removal
                log.exception("removal callback failed")
        return len(ids)
