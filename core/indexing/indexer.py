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
import logging
import os
import queue
import shutil
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor, wait
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass, field, replace
from pathlib import Path

import duckdb
import numpy as np

from core.chunking import Chunker
from core.embedding.models import Embedder, PieceEmbedder
from core.errors import DiskFullError, ParseError, ReadingStoppedError, ScannedError
from core.indexing.scan import (
    attachment_path,
    container_in,
    file_info,
    is_ignored_in,
    iter_files,
    link_reason,
)
from core.indexing.throttle import Throttle
from core.ingest.registry import CONTAINER_TYPES, detect_type, skip_reason
from core.ingest.sandbox import ParserPool
from core.ingest.text import EMPTY_FILE
from core.records import (
    DocState,
    FileInfo,
    IndexPlan,
    IndexProgress,
    IndexReport,
    ParsedDocument,
    PreparedFile,
)
from core.store import ocr as ocr_store
from core.store.attachments import attached_paths
from core.store.db import MIN_FREE_BYTES, disk_full_error, is_disk_full
from core.store.documents import DocumentStore, DocumentWrite, Unembedded
from core.store.keyword import KeywordIndex
from core.store.pieces import PieceStore
from core.store.vectors import VectorIndex

log = logging.getLogger(__name__)

# Put on the queue between the digital files and the scanned ones: what was read so far
# is made searchable before OCR starts, since OCR can take minutes.
_OCR_STARTS = "ocr-starts"

ProgressCallback = Callable[[IndexProgress], None]
EMBED_BATCH_CHUNKS = 64
# A batch the model encoded, not stored yet: its chunks, their vectors, and their packed
# word pieces when the second stage keeps them.
Encoded = tuple[list[Unembedded], np.ndarray, list[bytes] | None]
PUBLISH_EVERY_S = 30.0
# While files are being written, the keyword index is refreshed at most this often, and
# at most as often as keeps its refreshes under 1/KEYWORD_COST_RATIO of the run's time.
KEYWORD_PUBLISH_S = 1.0
KEYWORD_COST_RATIO = 20.0
# While files keep coming, writing pauses this often for a keyword refresh.
WRITE_SLICE_S = 1.0
HASH_BLOCK = 1 << 20
# A library without vectors chooses its model by its first files' language
# (core/indexing/model_switch.py): the run holds them back (not yet keyword-searchable)
# until this many passages are read, or this many files, or the run has no more. A
# hundred passages tell a share within about ±10 points (binomial, 95 %), enough to tell
# a German library from an English one without holding its first files long.
SAMPLE_PASSAGES = 100
SAMPLE_FILES = 16


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


@contextmanager
def _unless_disk_full() -> Iterator[None]:
    """Derived indexes stay behind on a full disk (the record is what counts): the next
    publish, or the next open, brings them up to date."""
    try:
        yield
    except (DiskFullError, duckdb.Error, OSError) as exc:
        if not is_disk_full(exc):
            raise
        log.warning("derived indexes not updated, the disk is full: %s", exc)


@dataclass
class _RunState:
    """One run's tallies, and its progress reports."""

    started: float
    total: int
    existing: set[str]
    progress: ProgressCallback | None
    paths: tuple[str, ...] = ()  # the files to read, for a question asked meanwhile
    written: list[str] = field(default_factory=list)  # in the order written
    done: int = 0
    chunks_written: int = 0
    passages_total: int = 0
    passages_embedded: int = 0
    packing_pieces: bool = False  # the meaning pass's second share (Indexer._fill_pieces)
    files_searchable: int = 0
    keyword_due: bool = False
    keyword_now: bool = False  # OCR is about to start: what was read, searchable first
    more_ready: bool = False  # files were left in the queue when writing paused
    writing_done: bool = False  # the producer has handed over its last file
    last_keyword: float = 0.0  # when keyword search was last refreshed
    keyword_gap: float = 0.0  # seconds until the next refresh, at the least
    model: Embedder | None = None  # once the run has loaded it
    waiting: str = ""  # why the run is waiting (core/indexing/throttle.py), shown with progress
    # Between units of work: the throttle's pace; False when the run was cancelled.
    pace: Callable[[], bool] = lambda: True
    failures: list[tuple[str, str]] = field(default_factory=list)
    # Taken from the queue to choose the model by (Indexer._choose_model), written first.
    held: list[PreparedFile | str | None] = field(default_factory=list)
    counts: dict[str, int] = field(
        default_factory=lambda: dict.fromkeys(
            ("added", "updated", "failed", "skipped", "empty", "embedded", "reused", "gone"), 0
        )
    )

    def beside_model(self) -> AbstractContextManager[None]:
        """Held by a thread working beside the model, once it is loaded: the model leaves
        it a core (Embedder.share_cpu)."""
        return self.model.share_cpu() if self.model is not None else nullcontext()

    def report(self, current: str = "") -> None:
        if self.progress:
            self.progress(
                IndexProgress(
                    files_total=self.total,
                    files_done=self.done,
                    chunks_done=self.counts["embedded"] + self.counts["reused"],
                    current=current,
                    elapsed_s=time.monotonic() - self.started,
                    failed=self.counts["failed"],
                    skipped=self.counts["skipped"],
                    passages_total=self.passages_total,
                    passages_embedded=self.passages_embedded,
                    files_searchable=self.files_searchable,
                    waiting_reason=self.waiting,
                    packing_pieces=self.packing_pieces,
                )
            )


class Indexer:
    def __init__(
        self,
        store: DocumentStore,
        keyword: KeywordIndex,
        vectors: Callable[[], VectorIndex],
        embedder: Callable[[], Embedder],
        chunker: Callable[[], Chunker],
        parser: ParserPool,
        index_config: str,
        ignore_patterns: Sequence[str] = (),
        embed_batch_size: int = 32,
    ) -> None:
        self.store = store
        self.db = store.db
        self.keyword = keyword
        self._vectors = vectors
        self._embedder = embedder
        self._chunker = chunker
        self.parser = parser
        self.index_config = index_config
        self.ignore_patterns = tuple(ignore_patterns)
        self.embed_batch_size = embed_batch_size
        # One run at a time: the watcher, a full index and a folder removal must not
        # interleave their plans and writes.
        self.lock = threading.RLock()
        # Called with the paths of removed documents after their rows are gone, so other
        # stores (saved conversations) can drop text copied from them.
        self.on_removed: list[Callable[[Sequence[str]], object]] = []
        # Saving the vector file costs ~0.5 s at 100k chunks. It is derived data (checked
        # against DuckDB at open), so the folder watcher, applying many small change
        # sets, raises this to save it at most this often instead of after every one.
        self.vector_save_interval_s = 0.0
        self._last_vector_save = float("-inf")
        # Whether a run has had the model yet: until then a run's first files are made
        # keyword-searchable before it loads (seconds), not beside its first batch.
        self._model_loaded = False
        # How fast runs may go (always, only while the computer is idle, a CPU share);
        # the parser process's CPU counts as the indexer's.
        self.throttle = Throttle(helper_pids=lambda: (parser.worker_pid,))
        # Set by the library while it may still choose its model by the language of its
        # first documents (core/indexing/model_switch.py): a run that finds no vector in
        # the library calls it with its first files' passages before writing any.
        self.choose_model: Callable[[list[str]], None] | None = None
        # The run in progress (see not_searchable); None between runs.
        self._active: _RunState | None = None
        # Held while a run writes a file and while a deletion seen during the run is
        # applied (remove_gone): a file deleted meanwhile is never written back.
        self._gone_lock = threading.Lock()
        self._removed_meanwhile = False  # remove_gone ran during this run: donors may be gone
        # Where the meaning pass keeps each passage's word pieces for the second stage
        # (core/store/pieces.py); None while the stage is off. Set by the library.
        self.pieces: Callable[[], PieceStore | None] = lambda: None

    def not_searchable(self, folders: Sequence[str] = ()) -> tuple[int, int]:
        """While a run goes: how many of the files it is to read are not searchable yet,
        of how many (only those under ``folders`` when given); (0, 0) between runs. Safe
        from any thread: a question asked meanwhile says so rather than "not found"."""
        run = self._active
        if run is None:
            return 0, 0
        searchable = set(run.written[: run.files_searchable])
        inside = [p for p in run.paths if not folders or _root_of(p, folders) is not None]
        return sum(p not in searchable for p in inside), len(inside)

    def remove_gone(self, folders: Sequence[str], paths: Iterable[str]) -> int:
        """Forget the documents at or under ``paths`` that are no longer on disk, while a
        run goes: the folder watcher calls it when files are deleted or renamed during a
        long run, which would otherwise leave them listed and searchable until the run
        ends. Safe beside the run (it does not wait for it); returns documents removed."""
        gone = [p for p in paths if not os.path.lexists(p)]
        if not gone:
            return 0
        # The plan decides what "under" means (a folder's files, a mail's attachments).
        stale = self.plan(folders, only=gone).to_remove
        with self._gone_lock:
            removed = self.remove_paths([p for p in stale if not os.path.lexists(p)])
            if removed:
                self._removed_meanwhile = True
        # The vector file is saved by the run (it is checked against the database at open).
        return removed

    # --- planning ---------------------------------------------------------------

    def plan(self, folders: Iterable[str], only: Iterable[str] | None = None) -> IndexPlan:
        """Compare disk with the database. ``only`` limits the plan to these paths
        (used by the watcher); otherwise whole folders are scanned. A folder in ``only``
        stands for everything under it: what is on disk now and what was indexed there
        (a folder deleted, moved away or moved in)."""
        folder_list = list(folders)
        known = self.store.known_files(set(folder_list))
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
                root = _root_of(path, folder_list)
                if root is None:
                    continue
                candidates.add(path)
                if path not in known:
                    # Possibly a folder: what was indexed below it is in question too.
                    if sorted_known is None:
                        sorted_known = sorted(known)
                    candidates.update(_under(sorted_known, path))
                if is_ignored_in(path, root, self.ignore_patterns):
                    continue  # as in a full scan: not part of the library (removed if known)
                parent = os.path.dirname(path)
                if path != root and parent != root and link_reason(parent, root):
                    # Reached through a linked folder, which a full scan does not walk
                    # (it may lead out of the library, or round in a loop).
                    continue
                if os.path.isdir(path):
                    if path != root and link_reason(path, root):
                        continue  # a linked folder itself, likewise
                    for info in iter_files(path, self.ignore_patterns, root=root):
                        if info.path not in listed:
                            listed.add(info.path)
                            on_disk.append(info)
                    continue
                entry = file_info(path, root, parents_checked=True)
                if entry is not None and path not in listed:
                    listed.add(path)
                    on_disk.append(entry)
        seen = {f.path for f in on_disk}
        to_index: list[FileInfo] = []
        touched: list[FileInfo] = []
        unchanged = 0
        # Scans that failed while OCR was off are read once it is on.
        scanned = ocr_store.scanned_waiting(self.db.cursor()) if self.parser.ocr_enabled else set()
        for info in on_disk:
            prior = known.get(info.path)
            if prior is None or info.path in scanned:
                to_index.append(info)
                continue
            if (
                prior.state == DocState.PENDING.value
                or (
                    prior.state == DocState.INDEXED.value
                    and prior.index_config != self.index_config
                )
                or prior.size != info.size
                # A link's own size and time stay when what it points to changes (a
                # broken link repaired, a link out of the folder indexed by an older
                # Lectern, whose text must leave the library): its reason tells.
                or (
                    info.special
                    and (prior.state != DocState.SKIPPED.value or prior.reason != info.special)
                )
            ):
                to_index.append(info)
            elif prior.mtime != info.mtime and info.special:
                to_index.append(info)  # never hashed: a pipe would block the open
            elif prior.mtime != info.mtime:
                # Same size, new mtime: only a hash tells whether the content changed
                # (a `touch`, a copy, a sync tool re-writing the same bytes).
                try:
                    same = file_hash(info.path) == prior.content_hash
                except OSError:
                    same = False
                (touched if same else to_index).append(info)
            else:
                unchanged += 1
        # An attachment is never on disk: it stays while the file it came in is there.
        to_remove = tuple(
            sorted(p for p in candidates if p not in seen and container_in(p, seen) is None)
        )
        return IndexPlan(tuple(to_index), to_remove, tuple(touched), unchanged)

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
            try:
                return self._run(folders, only, progress, controls or Controls())
            finally:
                self._active = None

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
        self.store.touch(plan.touched)
        run = _RunState(
            started=started,
            total=len(plan.to_index),
            existing=self.store.indexed_before([f.path for f in plan.to_index]),
            progress=progress,
            paths=tuple(f.path for f in plan.to_index),
        )
        self._active = run
        self._removed_meanwhile = False
        embedded, chunks = self.store.embedding_counts()
        run.passages_total = chunks - embedded  # left by an earlier run (cancelled, killed)
        run.report()

        def waiting(reason: str) -> None:
            run.waiting = reason
            run.report()

        pacing = threading.Lock()

        def pace() -> bool:
            # Called by the model's thread and the writing helper: the throttle's account
            # of CPU since its last call is one, so they take turns.
            with pacing:
                self.throttle.pace(controls, waiting)
            return not controls.cancel.is_set()

        self.throttle.begin()
        run.pace = pace
        prepared_queue: queue.Queue[PreparedFile | str | None] = queue.Queue(maxsize=128)
        stop_producer = threading.Event()
        producer = threading.Thread(
            target=self._produce,
            args=(plan.to_index, prepared_queue, controls, stop_producer, run.beside_model),
            daemon=True,
            name="lectern-parse",
        )
        producer.start()
        try:
            choose = self.choose_model
            if choose is not None and not embedded:
                self._choose_model(choose, run, prepared_queue, producer, controls)
            self._write_and_embed(run, prepared_queue, producer, controls)
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
        embedded, chunks = self.store.embedding_counts()
        run.passages_total = run.passages_embedded + (chunks - embedded)
        run.report()
        counts = run.counts
        return IndexReport(
            added=counts["added"],
            updated=counts["updated"],
            removed=removed + counts["gone"],
            unchanged=plan.unchanged + len(plan.touched),
            failed=counts["failed"],
            skipped=counts["skipped"],
            empty=counts["empty"],
            chunks_embedded=counts["embedded"],
            chunks_reused=counts["reused"],
            elapsed_s=time.monotonic() - started,
            cancelled=controls.cancel.is_set(),
            failures=tuple(run.failures),
        )

    def _choose_model(
        self,
        choose: Callable[[list[str]], None],
        run: _RunState,
        prepared_queue: queue.Queue[PreparedFile | str | None],
        producer: threading.Thread,
        controls: Controls,
    ) -> None:
        """Hold the run's first files back until their passages can tell the library's
        language (SAMPLE_PASSAGES), and let the library choose its model by them: they
        are then written under the configuration of the model that embeds them."""
        passages: list[str] = []
        while len(run.held) < SAMPLE_FILES and len(passages) < SAMPLE_PASSAGES:
            controls.wait_if_paused()
            if controls.cancel.is_set():
                return
            try:
                item = prepared_queue.get(timeout=0.5)
            except queue.Empty:
                if not producer.is_alive() and prepared_queue.empty():
                    break
                continue
            run.held.append(item)
            if item is None or (isinstance(item, str) and passages):
                break  # the end of the run, or OCR starts: judged by what was read
            if isinstance(item, str):
                continue  # only scans so far: nothing is searchable to hold back
            for prepared in (item, *item.attached):
                passages.extend(chunk.text for chunk in prepared.chunks)
        choose(passages)

    def _write_and_embed(
        self,
        run: _RunState,
        prepared_queue: queue.Queue[PreparedFile | str | None],
        producer: threading.Thread,
        controls: Controls,
    ) -> None:
        """Keyword first, meaning next: every file the producer has ready is written at
        once (its chunks keyword-searchable, with the embeddings already known for them),
        and the passages written are embedded behind it, batch after batch.

        The model encodes on this thread while a helper thread writes the files ready,
        refreshes keyword search and stores the batch before (``_beside_model``), so
        the model does not stop for them (done one after the other, they took 18 % of a
        run, issue 14). The helper's work is joined after each batch: the two never run
        past one batch apart. The model stays on this thread because torch ran 20-30 %
        slower on a second thread of the process than on the first that used it."""
        run.last_keyword = time.monotonic()
        run.keyword_gap = KEYWORD_PUBLISH_S
        last_publish = time.monotonic()
        cursor = 0  # chunks up to this id have been offered to the model in this run
        encoded: Encoded | None = None  # not stored yet
        helper = ThreadPoolExecutor(max_workers=1, thread_name_prefix="lectern-write")
        try:
            while True:
                controls.wait_if_paused()
                if controls.cancel.is_set():
                    return  # a batch encoded but not stored is embedded again next run
                batch = self.store.unembedded(cursor, EMBED_BATCH_CHUNKS)
                if not batch:
                    self._store_embedded(run, encoded)
                    encoded = None
                    if run.writing_done:
                        self._fill_pieces(run, controls)
                        return
                    # Nothing for the model: wait here for the producer's next file. Its
                    # keyword refresh waits for the helper, beside the model's first batch,
                    # unless the model is still to load (seconds) or there is nothing to
                    # embed.
                    self._write_files(run, prepared_queue, producer, block=True, refresh=False)
                    if not self._model_loaded or not self.store.unembedded(cursor, 1):
                        self._refresh_if_due(run)
                    continue
                if not run.pace():
                    return
                model = run.model = self._embedder()
                self._model_loaded = True
                model_done = threading.Event()
                beside = helper.submit(
                    self._beside_model, run, prepared_queue, producer, controls, encoded, model_done
                )
                encoded = None
                try:
                    texts = [u.embedding_text for u in batch]
                    pieces = None
                    if self.pieces() is not None and isinstance(model, PieceEmbedder):
                        vectors, pieces = model.embed_with_pieces(texts, self.embed_batch_size)
                    else:
                        vectors = model.embed(texts, batch_size=self.embed_batch_size)
                finally:
                    model_done.set()
                    wait([beside])
                beside.result()  # the helper's error (a full disk, say) is raised here
                encoded = (batch, vectors, pieces)
                cursor = batch[-1].chunk_id
                if time.monotonic() - last_publish > PUBLISH_EVERY_S:
                    # Long runs: persist vectors as we go.
                    self._store_embedded(run, encoded)
                    encoded = None
                    self.publish()
                    last_publish = run.last_keyword = time.monotonic()
        finally:
            helper.shutdown(wait=True)

    def _beside_model(
        self,
        run: _RunState,
        prepared_queue: queue.Queue[PreparedFile | str | None],
        producer: threading.Thread,
        controls: Controls,
        encoded: Encoded | None,
        model_done: threading.Event,
    ) -> None:
        """The helper's share of one batch: store the batch before, then write the files
        the producer hands over until the model is done with this one. The model leaves
        it a core while it works (Embedder.share_cpu), not while it waits for a file."""
        with run.beside_model():
            self._store_embedded(run, encoded)
        while not controls.cancel.is_set():
            with run.beside_model():
                self._write_files(run, prepared_queue, producer, block=False)
            if run.writing_done or model_done.wait(0.05):
                return

    def _write_files(
        self,
        run: _RunState,
        prepared_queue: queue.Queue[PreparedFile | str | None],
        producer: threading.Thread,
        *,
        block: bool,
        refresh: bool = True,
    ) -> None:
        """Write the files ready in the queue (waiting a little for one when ``block``),
        refreshing keyword search as due (unless not ``refresh``), until the queue is
        empty."""
        while True:
            wrote, run.writing_done, ocr_starts = self._write_ready(
                run, prepared_queue, producer, run.writing_done, block=block
            )
            run.keyword_due = run.keyword_due or wrote
            run.keyword_now = run.keyword_now or ocr_starts
            if not refresh:
                return
            self._refresh_if_due(run)
            if not run.more_ready or run.writing_done:
                return

    def _refresh_if_due(self, run: _RunState) -> None:
        """Make the files written keyword-searchable, when it is time to."""
        if run.keyword_due and (
            run.keyword_now
            or run.writing_done
            or not run.files_searchable  # the first files: searchable at once
            or time.monotonic() - run.last_keyword >= run.keyword_gap
        ):
            refresh_started = time.monotonic()
            self.publish_keyword()
            run.last_keyword = time.monotonic()
            # A refresh rebuilds the chunks written since the delta was last folded (and
            # now and then folds them into it): spaced so that it never takes more than
            # 1/KEYWORD_COST_RATIO of the run.
            run.keyword_gap = max(
                KEYWORD_PUBLISH_S, KEYWORD_COST_RATIO * (run.last_keyword - refresh_started)
            )
            run.keyword_due = run.keyword_now = False
            run.files_searchable = run.done
            run.report()

    def _write_ready(
        self,
        run: _RunState,
        prepared_queue: queue.Queue[PreparedFile | str | None],
        producer: threading.Thread,
        finished: bool,
        *,
        block: bool,
    ) -> tuple[bool, bool, bool]:
        """Write the prepared files waiting in the queue (waiting a little for one when
        ``block``); returns (wrote any, the producer is done, OCR is about to start).

        A fast producer can keep the queue full for a long time, so writing pauses after
        WRITE_SLICE_S (and after the run's first file) for a keyword refresh; the caller
        carries on writing before the model's next batch while ``run.more_ready``."""
        wrote = ocr_starts = False
        run.more_ready = False
        deadline = time.monotonic() + WRITE_SLICE_S
        while not finished:
            if wrote and (not run.files_searchable or time.monotonic() >= deadline):
                run.more_ready = True
                break
            try:
                item = (
                    run.held.pop(0)
                    if run.held
                    else prepared_queue.get(timeout=0.5 if block and not wrote else 0.0)
                )
            except queue.Empty:
                if not producer.is_alive() and prepared_queue.empty():
                    finished = True
                break
            if item is None:
                finished = True
            elif isinstance(item, str):  # _OCR_STARTS: what was read so far, searchable now
                ocr_starts = True
                break
            else:
                if not run.pace():
                    break  # cancelled while waiting: not written, so read again next run
                self._ensure_space(run.total - run.done, run.chunks_written, run.done)
                item, written = self._write_present(run, item)
                if written is None:
                    self._record_gone(run, item)
                else:
                    self._record(run, item, written)
                wrote = True
        return wrote, finished, ocr_starts

    def _write_present(
        self, run: _RunState, prepared: PreparedFile
    ) -> tuple[PreparedFile, list[DocumentWrite] | None]:
        """Write ``prepared`` unless its file was deleted since it was read: then None,
        and what it had in the library goes instead. A file to be copied from a donor
        that the watcher removed meanwhile (remove_gone) is read itself (the file as
        written is returned)."""
        while True:
            read_again = False
            with self._gone_lock:
                if not os.path.lexists(prepared.info.path):
                    run.counts["gone"] += self.remove_paths([prepared.info.path])
                    return prepared, None
                if prepared.reuse_from is not None and self._removed_meanwhile:
                    donor = self.store.donor(
                        prepared.content_hash, self.index_config, prepared.info.path
                    )
                    prepared = replace(prepared, reuse_from=donor)
                    read_again = donor is None
                if not read_again:
                    return prepared, self._write(prepared, self._known_vectors)
            # Read outside the lock, which a deletion waits for.
            info, digest, doc_type = prepared.info, prepared.content_hash, prepared.doc_type
            parsed = self._read(info, digest, doc_type, self.parser.parse)
            prepared = (
                parsed
                if isinstance(parsed, PreparedFile)
                else self._chunked(info, digest, doc_type, parsed)
            )

    def _record_gone(self, run: _RunState, prepared: PreparedFile) -> None:
        """A file of the run deleted before it was written: done, and not in the library."""
        run.written.append(prepared.info.path)
        run.done += 1
        run.report(prepared.info.path)

    def _record(self, run: _RunState, prepared: PreparedFile, written: list[DocumentWrite]) -> None:
        run.written.append(prepared.info.path)
        run.done += 1
        if prepared.state is DocState.FAILED:
            run.counts["failed"] += 1
            run.failures.append((prepared.info.path, prepared.reason))
        elif prepared.state is DocState.SKIPPED:
            run.counts["skipped"] += 1
            if prepared.reason == EMPTY_FILE:
                run.counts["empty"] += 1
        elif prepared.info.path in run.existing:
            run.counts["updated"] += 1
        else:
            run.counts["added"] += 1
        for w in written:
            run.chunks_written += len(w.new_chunk_ids)
            run.counts["reused"] += len(w.embedded_ids)
            run.passages_total += len(w.new_chunk_ids) - len(w.embedded_ids)
        run.report(prepared.info.path)

    def _store_embedded(self, run: _RunState, encoded: Encoded | None) -> None:
        """The meaning pass's write for one batch: store it, add it to the vector index."""
        if encoded is None:
            return
        batch, vectors, pieces = encoded
        ids = [u.chunk_id for u in batch]
        updated = self.store.set_embeddings(ids, vectors)
        if len(updated):
            row_of = {chunk_id: i for i, chunk_id in enumerate(ids)}
            self._vectors().add(updated, vectors[[row_of[int(k)] for k in updated]])
        store = self.pieces()
        if pieces is not None and store is not None:
            with _unless_disk_full():  # derived: the fill pass makes them later
                store.put(ids, pieces)
        run.counts["embedded"] += len(batch)
        run.passages_embedded += len(batch)
        run.report()

    def _fill_pieces(self, run: _RunState, controls: Controls) -> None:
        """After the run's files are searchable: word pieces for embedded passages that
        have none (a library from before they were kept, vectors a donor gave, a change
        of model), so the second stage reads them rather than encoding at search time.
        The model encodes each such passage once more; a cancel or a pause stops it
        between batches and the next run goes on from there."""
        store = self.pieces()
        if store is None:
            return
        kept, embedded = store.counts()
        if kept >= embedded or not isinstance(self._embedder(), PieceEmbedder):
            return  # nothing missing, or a model without word pieces (no second stage)
        # Model work like embedding, so the progress a person sees counts it: a library
        # from before pieces were kept would otherwise sit at 100 % for minutes.
        run.passages_total += embedded - kept
        run.packing_pieces = True
        run.report()
        cursor = 0
        while not controls.cancel.is_set():
            controls.wait_if_paused()
            batch = store.missing(cursor, EMBED_BATCH_CHUNKS)
            if not batch or not run.pace():
                return
            model = run.model = self._embedder()
            if not isinstance(model, PieceEmbedder):
                return
            _vectors, pieces = model.embed_with_pieces(
                [u.embedding_text for u in batch], self.embed_batch_size
            )
            try:
                store.put([u.chunk_id for u in batch], pieces)
            except (duckdb.Error, OSError) as exc:
                if not is_disk_full(exc):
                    raise
                # Derived: searches encode what they lack; the next run goes on.
                log.warning("word pieces not stored, the disk is full: %s", exc)
                return
            cursor = batch[-1].chunk_id
            run.passages_embedded += len(batch)
            run.report()

    def _possible_move_sources(self, plan: IndexPlan) -> set[str]:
        if not plan.to_remove or not plan.to_index:
            return set()
        return self.store.indexed_paths_of_sizes(
            plan.to_remove, sorted({f.size for f in plan.to_index})
        )

    def publish(self) -> None:
        """Make committed changes visible to keyword search and persist the vector file.
        A due keyword base rebuild runs on its own thread; new chunks go to the delta,
        searchable at once, so indexing and other writers never wait seconds for it."""
        self.publish_keyword()
        with _unless_disk_full():
            self.save_vectors(older_than_s=self.vector_save_interval_s)

    def publish_keyword(self) -> None:
        """Make written files keyword-searchable (a refresh of the small delta index)."""
        with _unless_disk_full():
            self.keyword.refresh(background=True)

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
        out: queue.Queue[PreparedFile | str | None],
        controls: Controls,
        stop: threading.Event,
        beside_model: Callable[[], AbstractContextManager[None]],
    ) -> None:
        def put(item: PreparedFile | str | None) -> None:
            while not stop.is_set():
                try:
                    out.put(item, timeout=0.2)
                    break
                except queue.Full:
                    continue

        scanned: list[PreparedFile] = []
        try:
            for info in files:
                controls.wait_if_paused()
                self.throttle.hold(controls)
                if controls.cancel.is_set() or stop.is_set():
                    break
                with beside_model():  # parsing and chunking, here and in the parser
                    try:
                        prepared = self._prepare(info)
                    except ReadingStoppedError:
                        # The reader was stopped by a signal to the process group: this
                        # process is being stopped too. The file stays unread (not failed).
                        break
                if prepared.state is DocState.PENDING:
                    scanned.append(prepared)  # OCR reads it after every digital file
                else:
                    put(prepared)
            if scanned and not (controls.cancel.is_set() or stop.is_set()):
                put(_OCR_STARTS)
            for waiting in scanned:
                controls.wait_if_paused()
                if controls.cancel.is_set() or stop.is_set():
                    break
                try:
                    put(self._prepare_scanned(waiting))
                except ReadingStoppedError:
                    break
        finally:
            # The end marker must arrive even when the queue is full while the consumer
            # embeds a large batch; only an abandoned run (stop set) may drop it.
            put(None)

    def _prepare(self, info: FileInfo) -> PreparedFile:
        if info.special:
            return PreparedFile(info, "", None, state=DocState.SKIPPED, reason=info.special)
        try:
            digest = file_hash(info.path)
        except OSError as exc:
            return PreparedFile(
                info,
                "",
                None,
                state=DocState.FAILED,
                reason=f"cannot be read: {exc.strerror or exc}",
            )
        doc_type = detect_type(Path(info.path))
        if doc_type is None:
            return PreparedFile(
                info, digest, None, state=DocState.SKIPPED, reason=skip_reason(Path(info.path))
            )
        if not info.size:
            # Nothing to read: no reader is started for it.
            return PreparedFile(info, digest, doc_type, state=DocState.SKIPPED, reason=EMPTY_FILE)
        # A mail file's attachments are documents of their own, which a donor's rows do
        # not carry: such files are always read.
        donor = (
            None
            if doc_type in CONTAINER_TYPES
            else self.store.donor(digest, self.index_config, info.path)
        )
        if donor is not None:
            return PreparedFile(info, digest, doc_type, reuse_from=donor)
        parsed = self._read(info, digest, doc_type, self.parser.parse)
        if isinstance(parsed, PreparedFile):
            return parsed
        if parsed.needs_ocr and self.parser.ocr_enabled:
            return PreparedFile(info, digest, doc_type, state=DocState.PENDING)
        return self._chunked(info, digest, doc_type, parsed)

    def _chunked(
        self, info: FileInfo, digest: str, doc_type: str | None, parsed: ParsedDocument
    ) -> PreparedFile:
        chunks = tuple(self._chunker().chunk(parsed, file_stem=Path(info.path).stem))
        if not chunks:
            return PreparedFile(
                info, digest, doc_type, parsed=parsed, state=DocState.FAILED, reason="no text found"
            )
        # An indexed file that was read only in part (parser limits) says so in its reason.
        return PreparedFile(
            info,
            digest,
            doc_type,
            parsed=parsed,
            chunks=chunks,
            reason=parsed.notice,
            attached=self._attached(info, parsed),
        )

    def _attached(self, info: FileInfo, parsed: ParsedDocument) -> tuple[PreparedFile, ...]:
        """The documents a file carries (mail attachments), chunked, each under the
        file's own path ("lunch.eml/minutes.docx")."""
        attached = []
        for name, document in parsed.attachments:
            path = attachment_path(info.path, name)
            text = document.text.encode("utf-8", "replace")
            child = FileInfo(path, info.folder, len(text), info.mtime)
            digest = hashlib.sha256(text).hexdigest()
            attached.append(self._chunked(child, digest, detect_type(Path(name)), document))
        return tuple(a for a in attached if a.state is DocState.INDEXED)

    def _prepare_scanned(self, waiting: PreparedFile) -> PreparedFile:
        """The second pass: a PDF with scanned pages, read again with OCR."""
        info, digest, doc_type = waiting.info, waiting.content_hash, waiting.doc_type
        parsed = self._read(info, digest, doc_type, self.parser.parse_scanned)
        if isinstance(parsed, PreparedFile):
            return parsed
        return self._chunked(info, digest, doc_type, parsed)

    def _read(
        self,
        info: FileInfo,
        digest: str,
        doc_type: str | None,
        read: Callable[[Path], ParsedDocument],
    ) -> ParsedDocument | PreparedFile:
        """``read(path)``, or the file as failed with the reason a person is shown (or as
        waiting for OCR: a scan found by the fast pass while OCR is on)."""
        try:
            return read(Path(info.path))
        except ReadingStoppedError:
            raise
        except ScannedError as exc:
            if self.parser.ocr_enabled:
                return PreparedFile(info, digest, doc_type, state=DocState.PENDING)
            reason = exc.reason
        except ParseError as exc:
            if exc.reason == EMPTY_FILE:
                # Nothing wrong with it and nothing to retry: one state, counted once
                # (a thousand empty files were a thousand "failed" lines).
                return PreparedFile(
                    info, digest, doc_type, state=DocState.SKIPPED, reason=EMPTY_FILE
                )
            reason = exc.reason
        except Exception as exc:  # a parser or OCR bug must cost one file, not the run
            log.exception("reading failed on %s", info.path)
            reason = f"could not be read: {exc}"
        return PreparedFile(info, digest, doc_type, state=DocState.FAILED, reason=reason)

    def _known_vectors(self, prepared: PreparedFile) -> list[np.ndarray | None]:
        """Per chunk, its embedding if already known, else None (the meaning pass embeds it).

        An edited file usually keeps most of its passages: chunks whose exact text (with
        context) is already stored for that path reuse their embedding, so saving a small
        change to a long document re-embeds only the passages that changed.
        """
        if prepared.state is not DocState.INDEXED or prepared.reuse_from is not None:
            return []
        previous = self.store.stored_embeddings(prepared.info.path, self.index_config)
        return [previous.get(chunk.embedding_text) for chunk in prepared.chunks]

    def _write(
        self,
        prepared: PreparedFile,
        known_vectors: Callable[[PreparedFile], list[np.ndarray | None]],
    ) -> list[DocumentWrite]:
        """Replace the file's rows in one transaction, then bring the vector index along;
        returns what was written (the file's attachments first, if any)."""
        written: list[DocumentWrite] = []
        if prepared.doc_type in CONTAINER_TYPES:
            # The attachments read now replace those stored before, whatever they were.
            self._drop_attached(prepared.info.path)
            for child in prepared.attached:
                written.extend(self._write(child, known_vectors))
        written.append(self._write_one(prepared, known_vectors(prepared)))
        return written

    def _drop_attached(self, container: str) -> None:
        paths = attached_paths(self.db, [container], CONTAINER_TYPES)
        if paths:
            # Not a removal the person made: saved answers keep their quotes.
            _count, chunk_ids = self.store.remove_documents(paths)
            self._vectors().remove(chunk_ids)

    def _write_one(self, prepared: PreparedFile, vectors: list[np.ndarray | None]) -> DocumentWrite:
        written = self.store.write_document(prepared, vectors or None, self.index_config)
        vectors_index = self._vectors()
        vectors_index.remove(list(written.old_chunk_ids))
        if written.embedded_vectors is not None and len(written.embedded_ids):
            vectors_index.add(written.embedded_ids, written.embedded_vectors)
        return written

    def remove_paths(self, paths: Sequence[str]) -> int:
        """Forget these files: their rows, text, chunks and vectors, and those of the
        documents they carried (mail attachments)."""
        paths = [*paths, *attached_paths(self.db, paths, CONTAINER_TYPES)]
        removed, chunk_ids = self.store.remove_documents(paths)
        if not removed:
            return 0
        self._vectors().remove(chunk_ids)
        for callback in self.on_removed:
            try:
                callback(list(paths))
            except Exception:  # a secondary store must never undo or block the removal
                log.exception("removal callback failed")
        return removed
