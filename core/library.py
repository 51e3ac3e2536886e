"""The engine behind the CLI and the desktop app: one object per data folder.

``Library`` wires the pipeline stages together (scan -> parse -> chunk -> embed -> store,
and hybrid retrieval) and owns the resources that must exist once per process: the
DuckDB connection, the vector index, the parser worker and the embedding model. It is
safe to call from several threads: writes are serialised on the database's write lock,
and reads use per-thread cursors.
"""

from __future__ import annotations

import json
import logging
import os
import stat
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import duckdb

from core.chunking import Chunker
from core.config import Settings, load_settings
from core.conversations import ConversationStore
from core.embedding import DEFAULT_MODEL_ID, Embedder, WordPieceCounter, load_embedder
from core.errors import DiskFullError, LecternError
from core.indexer import Controls, Indexer, ProgressCallback
from core.ingest.sandbox import ParserPool
from core.records import DocState, Document, Hit, IndexReport, PageSpan, RecoveryNotice
from core.retrieval import Retriever, SearchFilters
from core.scan import normalize_folder
from core.store.backup import RecordBackup
from core.store.keyword import KeywordIndex
from core.store.recovery import open_database
from core.store.vectors import VectorIndex

DEFAULT_DIM = 384  # all-MiniLM-L6-v2; used before the model is loaded
_DEVICE_KEY = "folder_device:"  # meta key prefix: the device a library folder was last seen on
_RECOVERY_KEY = "recovery_log"  # meta: the last repairs made at open, for `lectern status`
KEYWORD_FILE = "keyword.duckdb"


@dataclass(frozen=True)
class FolderStatus:
    path: str
    online: bool
    indexed: int
    failed: int
    skipped: int
    pending: int
    chunks: int


class Library:
    def __init__(
        self, settings: Settings | None = None, *, embedder: Embedder | None = None
    ) -> None:
        self.settings = settings or load_settings()
        self.settings.home.mkdir(parents=True, exist_ok=True)
        self._embedder = embedder
        self._model_id = embedder.model_id if embedder else DEFAULT_MODEL_ID
        self._lock = threading.RLock()
        self.db, notices = open_database(self.settings.db_path)
        # What was repaired at open, for the user to be told once (the CLI on standard
        # error, the app in its status bar); `lectern status` shows the recent ones.
        self.recovery_notices: list[RecoveryNotice] = []
        self.backup = RecordBackup(self.settings.home / "backup")
        self.conversations = ConversationStore(self.db.cursor, self.db.write_lock, self.backup)
        self.keyword = KeywordIndex(self.db, self.settings.home / KEYWORD_FILE)
        self.parser = ParserPool(self.settings.parse_timeout_s, self.settings.parse_memory_mb)
        self._vectors: VectorIndex | None = None
        self._chunker: Chunker | None = None
        self._retriever: Retriever | None = None
        self._restore_record(notices)
        self._check_index_config()
        if self.keyword.recovery:
            self._notice(
                RecoveryNotice(
                    "keyword_rebuilding",
                    "The keyword index could not be opened, so it is being rebuilt in the "
                    "background; meanwhile search finds passages by meaning.",
                    "Nothing needs doing.",
                    kept_at=str(self.keyword.kept_at or ""),
                )
            )
        if not self.keyword.is_current():
            # A run was interrupted after committing chunks but before publishing them
            # (quick: a delta), or the keyword file is new (a rebuild, in the background).
            self._refresh_keywords_at_open()
        self.indexer = Indexer(
            self.db,
            self.keyword,
            lambda: self.vectors,
            lambda: self.embedder,
            lambda: self.chunker,
            self.parser,
            self.index_config,
            self.settings.ignore_patterns,
        )
        self.indexer.on_removed.append(self._forget_in_conversations)

    def _forget_in_conversations(self, paths: Sequence[str]) -> None:
        """A removed file leaves no cached answer text behind."""
        self.conversations.forget_documents(paths)

    # --- repairs at open ----------------------------------------------------------------

    def _notice(self, notice: RecoveryNotice) -> None:
        self.recovery_notices.append(notice)
        try:
            log = json.loads(self.db.get_meta(_RECOVERY_KEY, "[]") or "[]")
            log = [*log, notice.to_json()][-20:]
            with self.db.transaction() as cur:
                self.db.set_meta(_RECOVERY_KEY, json.dumps(log), cur)
        except (LecternError, ValueError, duckdb.Error):
            pass  # the notice is still shown now; only the history misses it

    def recovery_log(self) -> list[dict[str, str]]:
        try:
            entries = json.loads(self.db.get_meta(_RECOVERY_KEY, "[]") or "[]")
        except ValueError:
            return []
        return [e for e in entries if isinstance(e, dict)]

    def _restore_record(self, notices: Sequence[RecoveryNotice]) -> None:
        """After a damaged database file or a lost log, bring back folders and
        conversations from the backup; on a first open with no backup yet, make one."""
        for notice in notices:
            self._notice(notice)
        if any(n.kind in ("library_rebuilt", "log_set_aside", "log_cut_short") for n in notices):
            folders = self.backup.load_folders()
            with self.db.transaction() as cur:
                for folder in folders:
                    cur.execute("INSERT OR IGNORE INTO folders(path) VALUES (?)", [folder])
            self.conversations.restore(self.backup.load_conversations())
        elif not self.backup.exists():
            self.backup.save_folders(self.folders())
            self.conversations.back_up_all()

    def _refresh_keywords_at_open(self) -> None:
        try:
            self.keyword.refresh(background=bool(self.keyword.recovery))
        except (LecternError, duckdb.Error) as exc:
            # A full disk (or a keyword file that failed mid-build) must not keep the
            # library closed: search falls back to what is there, the next run retries.
            logging.getLogger(__name__).warning("keyword refresh at open failed: %s", exc)

    # --- lazily loaded parts ----------------------------------------------------------

    @property
    def embedder(self) -> Embedder:
        with self._lock:
            if self._embedder is None:
                self._embedder = load_embedder()
            return self._embedder

    @property
    def chunker(self) -> Chunker:
        with self._lock:
            if self._chunker is None:
                counter = (
                    self._embedder.count_tokens if self._embedder else WordPieceCounter().count
                )
                self._chunker = Chunker(
                    counter, max_tokens=256, overlap_sentences=self.settings.chunk_overlap_sentences
                )
            return self._chunker

    @property
    def vectors(self) -> VectorIndex:
        with self._lock:
            if self._vectors is None:
                dim = int(self.db.get_meta("embedding_dim", str(DEFAULT_DIM)) or DEFAULT_DIM)
                vectors = VectorIndex(self.db, self.settings.vectors_path, dim)
                report = vectors.open()
                self._vectors = vectors
                if report.startswith("rebuilt, damaged"):
                    self._notice(
                        RecoveryNotice(
                            "vectors_rebuilt",
                            "The meaning-search index was damaged, so it was rebuilt from "
                            "the library.",
                            "Nothing needs doing.",
                        )
                    )
            return self._vectors

    @property
    def retriever(self) -> Retriever:
        with self._lock:
            if self._retriever is None:
                self._retriever = Retriever(
                    self.db,
                    self.keyword,
                    self.vectors,
                    self.embedder,
                    candidates=self.settings.candidates,
                    rrf_k=self.settings.rrf_k,
                )
            return self._retriever

    @property
    def index_config(self) -> str:
        overlap = self.settings.chunk_overlap_sentences
        from core.chunking import CHUNKER_VERSION

        return f"{self._model_id}|chunker {CHUNKER_VERSION}|overlap {overlap}"

    def _check_index_config(self) -> None:
        """Vectors of two models (or chunkings) must never be mixed: on a change, drop
        every chunk and queue every document for re-indexing."""
        stored = self.db.get_meta("index_config")
        if stored == self.index_config:
            return
        with self.db.transaction() as cur:
            if stored is not None:
                cur.execute("DELETE FROM chunks")
                cur.execute("DELETE FROM document_text")
                cur.execute(
                    "UPDATE documents SET state = 'pending', chunks = 0 WHERE state = 'indexed'"
                )
            self.db.set_meta("index_config", self.index_config, cur)
            self.db.set_meta("embedding_model", self._model_id, cur)
            dim = self._embedder.dim if self._embedder else DEFAULT_DIM
            self.db.set_meta("embedding_dim", str(dim), cur)
            version = int(self.db.get_meta("content_version", "0") or 0) + 1
            self.db.set_meta("content_version", str(version), cur)
        if stored is not None:
            self.settings.vectors_path.unlink(missing_ok=True)
            self.keyword.refresh(force_merge=True)

    # --- folders --------------------------------------------------------------------

    def folders(self) -> list[str]:
        return [
            r[0]
            for r in self.db.cursor().execute("SELECT path FROM folders ORDER BY path").fetchall()
        ]

    def add_folder(self, path: str | Path) -> str:
        folder = normalize_folder(path)
        if not os.path.exists(folder):
            raise LecternError(f"{folder} does not exist.", "Check the path and try again.")
        with self.db.transaction() as cur:
            cur.execute("INSERT OR IGNORE INTO folders(path) VALUES (?)", [folder])
        self.backup.save_folders(self.folders())
        return folder

    def remove_folder(self, path: str | Path) -> int:
        """Forget a folder the user removed: its documents, chunks and vectors go too.
        (A folder that merely disappeared, such as an unplugged drive, is kept: see
        ``folder_online``.)"""
        folder = normalize_folder(path)
        with self.indexer.lock:  # a running sync must not re-add what is being removed
            paths = [
                r[0]
                for r in self.db.cursor()
                .execute("SELECT path FROM documents WHERE folder = ?", [folder])
                .fetchall()
            ]
            removed = self.indexer.remove_paths(paths)
            with self.db.transaction() as cur:
                cur.execute("DELETE FROM folders WHERE path = ?", [folder])
                cur.execute("DELETE FROM meta WHERE key = ?", [_DEVICE_KEY + folder])
            self.backup.save_folders(self.folders())
            self.indexer.publish()
        return removed

    def folder_online(self, folder: str) -> bool:
        """Whether a library folder can be read now. An offline folder (unmounted drive,
        network share away, folder renamed or deleted outside Lectern) keeps its
        documents searchable instead of being wiped; it is re-read when it comes back.

        An unmounted drive often leaves its mount point behind as an empty folder on
        another device: that also counts as offline, or the index would be emptied."""
        try:
            st = os.stat(folder)
            if stat.S_ISDIR(st.st_mode):
                with os.scandir(folder) as entries:
                    empty = next(entries, None) is None
            else:
                empty = False
        except OSError:
            return False
        recorded = self.db.get_meta(_DEVICE_KEY + folder)
        if recorded is not None and recorded != str(st.st_dev) and empty:
            return False
        if recorded != str(st.st_dev):
            try:
                with self.db.transaction() as cur:
                    self.db.set_meta(_DEVICE_KEY + folder, str(st.st_dev), cur)
            except DiskFullError:
                pass  # reading the library must work on a full disk; recorded next time
        return True

    # --- indexing -------------------------------------------------------------------

    def index(
        self,
        paths: Sequence[str | Path] | None = None,
        *,
        progress: ProgressCallback | None = None,
        controls: Controls | None = None,
    ) -> IndexReport:
        """Index ``paths`` (recording them as library folders), or every known folder."""
        if paths:
            for path in paths:
                self.add_folder(path)
            targets = [normalize_folder(p) for p in paths]
        else:
            targets = self.folders()
        online = self._mark_online(targets)
        return self.indexer.run(online, progress=progress, controls=controls)

    def sync(
        self,
        folders: Sequence[str | Path] | None = None,
        *,
        progress: ProgressCallback | None = None,
        controls: Controls | None = None,
    ) -> IndexReport:
        """Reconcile library folders (all, or these) with the disk, without adding any:
        a cheap stat-only pass that re-reads only files whose size or mtime changed.
        Offline folders are marked and left alone."""
        known = self.folders()
        wanted = {normalize_folder(f) for f in folders} if folders is not None else None
        targets = [f for f in known if wanted is None or f in wanted]
        online = self._mark_online(targets)
        return self.indexer.run(online, progress=progress, controls=controls)

    def sync_files(
        self,
        paths: Iterable[str],
        *,
        progress: ProgressCallback | None = None,
        controls: Controls | None = None,
    ) -> IndexReport:
        """Re-check just these paths (changed, created or deleted) against the disk."""
        folders = [f for f in self.folders() if self.folder_online(f)]
        return self.indexer.run(
            folders, only=[normalize_folder(p) for p in paths], progress=progress, controls=controls
        )

    def retry(self, path: str) -> IndexReport:
        with self.db.transaction() as cur:
            cur.execute(
                "UPDATE documents SET state = 'pending' WHERE path = ?", [normalize_folder(path)]
            )
        return self.sync_files([path])

    def _mark_online(self, folders: Sequence[str]) -> list[str]:
        """Record which folders are online; returns those."""
        online = [f for f in folders if self.folder_online(f)]
        with self.db.transaction() as cur:
            for folder in folders:
                state = "online" if folder in online else "offline"
                cur.execute("UPDATE folders SET state = ? WHERE path = ?", [state, folder])
        return online

    # --- reading --------------------------------------------------------------------

    def search(
        self,
        query: str,
        k: int | None = None,
        mode: str = "hybrid",
        folders: Sequence[str] | None = None,
        types: Sequence[str] | None = None,
    ) -> list[Hit]:
        filters = SearchFilters(
            folders=tuple(normalize_folder(f) for f in folders or ()), types=tuple(types or ())
        )
        return self.retriever.search(query, k or self.settings.top_k, mode, filters)

    def documents(self, folder: str | None = None, state: str | None = None) -> list[Document]:
        sql = """SELECT id, path, folder, size, mtime, content_hash, type, title, pages, state, reason, chunks
                 FROM documents WHERE 1=1"""
        params: list[object] = []
        if folder:
            sql += " AND folder = ?"
            params.append(normalize_folder(folder))
        if state:
            sql += " AND state = ?"
            params.append(state)
        rows = self.db.cursor().execute(sql + " ORDER BY path", params).fetchall()
        return [
            Document(
                id=r[0],
                path=r[1],
                folder=r[2] or "",
                size=r[3] or 0,
                mtime=r[4] or 0.0,
                content_hash=r[5] or "",
                type=r[6] or "",
                title=r[7] or "",
                pages=r[8] or 0,
                state=DocState(r[9]),
                reason=r[10] or "",
                chunks=r[11] or 0,
            )
            for r in rows
        ]

    def document_text(self, document_id: int) -> str:
        row = (
            self.db.cursor()
            .execute("SELECT text FROM document_text WHERE document_id = ?", [document_id])
            .fetchone()
        )
        return row[0] if row else ""

    def document_pages(self, document_id: int) -> list[PageSpan]:
        row = (
            self.db.cursor()
            .execute("SELECT pages FROM document_text WHERE document_id = ?", [document_id])
            .fetchone()
        )
        return [PageSpan(*p) for p in json.loads(row[0])] if row and row[0] else []

    def page_at(self, document_id: int, offset: int) -> int | None:
        for span in self.document_pages(document_id):
            if span.start <= offset < span.end:
                return span.page
        return None

    def folder_status(self) -> list[FolderStatus]:
        rows = (
            self.db.cursor()
            .execute(
                """SELECT f.path, f.state,
                      count(*) FILTER (WHERE d.state = 'indexed'),
                      count(*) FILTER (WHERE d.state = 'failed'),
                      count(*) FILTER (WHERE d.state = 'skipped'),
                      count(*) FILTER (WHERE d.state = 'pending'),
                      coalesce(sum(d.chunks), 0)
               FROM folders f LEFT JOIN documents d ON d.folder = f.path
               GROUP BY f.path, f.state ORDER BY f.path"""
            )
            .fetchall()
        )
        return [
            FolderStatus(
                r[0],
                self.folder_online(r[0]),
                int(r[2]),
                int(r[3]),
                int(r[4]),
                int(r[5]),
                int(r[6]),
            )
            for r in rows
        ]

    def status(self) -> dict[str, object]:
        cur = self.db.cursor()
        chunks = int(cur.execute("SELECT count(*) FROM chunks").fetchone()[0])
        counts = dict(
            cur.execute("SELECT state, count(*) FROM documents GROUP BY state").fetchall()
        )
        return {
            "home": str(self.settings.home),
            "folders": [f.__dict__ for f in self.folder_status()],
            "documents": [
                {
                    "path": d.path,
                    "state": d.state.value,
                    "reason": d.reason,
                    "chunks": d.chunks,
                    "type": d.type,
                    "title": d.title,
                    "pages": d.pages,
                    "size": d.size,
                }
                for d in self.documents()
            ],
            "counts": {s.value: int(counts.get(s.value, 0)) for s in DocState},
            "chunks": chunks,
            "embedding_model": self.db.get_meta("embedding_model"),
            "index_config": self.index_config,
            "keyword_delta_chunks": self.keyword.delta_size(),
            "keyword_index": self.keyword.status(),
            "recovery": self.recovery_log(),
        }

    def close(self) -> None:
        # A keyword base rebuild running in the background is stopped first: its tables
        # are new and unused, so nothing is lost (the next run starts it again).
        self.keyword.close()
        with self._lock:
            if self._vectors is not None:
                self._vectors.save_if_dirty()
            self.parser.close()
            self.db.close()

    def __enter__(self) -> Library:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
