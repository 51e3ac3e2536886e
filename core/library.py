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
from dataclasses import replace
from pathlib import Path
from typing import Protocol

import duckdb

from core.chunking import Chunker, chunker_for
from core.config import Settings, load_settings
from core.embedding.languages import (
    LANGUAGE_SAMPLE,
    LanguageMix,
    ModelAdvice,
    language_mix,
    model_advice,
)
from core.embedding.models import (
    DEFAULT_MODEL_ID,
    MODELS,
    Embedder,
    WordPieceCounter,
    load_embedder,
)
from core.embedding.pieces import CODEC as PIECES_CODEC
from core.errors import (
    ConfigError,
    DamagedStoreError,
    DiskFullError,
    LecternError,
    ModelNotReadyError,
    ReadOnlyLibraryError,
    StoreError,
)
from core.formats import reader_versions
from core.indexing.indexer import Controls, Indexer, ProgressCallback
from core.indexing.model_switch import (
    CHOSEN_KEY,
    ModelSwitch,
    chosen_message,
    first_model,
    multilingual_available,
)
from core.indexing.reembed import ReembedStatus
from core.ingest.ocr import OcrOptions
from core.ingest.sandbox import ParserPool
from core.private import make_private_dir, shared, tighten
from core.records import (
    Conversation,
    ConversationMatch,
    FileEntry,
    FolderStatus,
    Hit,
    IndexReport,
    RecoveryNotice,
    Scope,
    SearchFilters,
    Turn,
)
from core.retrieval.fusion import LibraryCalibration, SurerList, fusion_params
from core.retrieval.search import Retriever
from core.retrieval.second_stage import RerankParams
from core.settings_store import SettingsStore
from core.store.backup import RecordBackup
from core.store.collections import CollectionStore
from core.store.conversations import ConversationStore
from core.store.db import classify_open_error, named_file
from core.store.documents import DocumentStore
from core.store.keyword import KeywordIndex
from core.store.lookup import LiveChunks
from core.store.paths import normalize_folder
from core.store.pieces import PieceStore
from core.store.recovery import open_database, start_anew
from core.store.reembed import ReembedStore
from core.store.vectors import VectorIndex

DEFAULT_DIM = 384  # all-MiniLM-L6-v2; used before the model is loaded
_DEVICE_KEY = "folder_device:"  # meta key prefix: the device a library folder was last seen on
_RECOVERY_KEY = "recovery_log"  # meta: the last repairs made at open, for `lectern status`
READER_VERSIONS_KEY = (
    "reader_versions"  # meta: each format's reader version the files were read with
)
KEYWORD_FILE = "keyword.duckdb"
# The settings the library's retriever is made from, and the indexing pace's.
_RETRIEVER_SETTINGS = frozenset({"candidates", "rrf_k", "fusion", "rerank"})
_PACE_SETTINGS = frozenset({"index_when", "index_cpu_share"})


class FileReader(Protocol):
    """What the read-only commands read of the library's files: the store itself, or the
    running Lectern's over its socket (:class:`core.ipc.client.RemoteFiles`)."""

    def file_list(
        self, folder: str | None = None, status: str | None = None
    ) -> list[FileEntry]: ...


class ConversationReader(Protocol):
    """What the read-only commands read of the kept conversations: the store itself, or
    the running Lectern's over its socket (:class:`core.ipc.client.RemoteConversations`)."""

    def require(self, conversation_id: int) -> Conversation: ...

    def turns(self, conversation_id: int) -> list[Turn]: ...

    def search(self, query: str, limit: int = 100) -> list[ConversationMatch]: ...

    def export(self, conversation_id: int) -> str: ...

    # Last: below it, ``list`` in this class names the method, not the type.
    def list(self, limit: int = 100) -> list[Conversation]: ...


class LibraryReader(Protocol):
    """What the read-only commands (``search``, ``status``, ``files``, ``conversations``)
    need of a library, whether this process opened it (:class:`Library`) or another
    process holds it and answers over its socket (:class:`core.ipc.RemoteLibrary`)."""

    @property
    def recovery_notices(self) -> Sequence[RecoveryNotice]: ...

    def status(self) -> dict[str, object]: ...

    @property
    def files(self) -> FileReader: ...

    def search(
        self,
        query: str,
        k: int | None = None,
        mode: str = "hybrid",
        folders: Sequence[str] | None = None,
        types: Sequence[str] | None = None,
        *,
        scope: Scope | None = None,
    ) -> list[Hit]: ...

    @property
    def conversations(self) -> ConversationReader: ...

    def close(self) -> None: ...


class Library:
    """The library's own work (opening and closing, the model, indexing its folders,
    search, status) and its record as services: ``files`` (folders, documents, their
    text and pages), ``conversations``, ``collections`` (and each conversation's scope)
    and ``settings_store``. Callers use the services directly."""

    def __init__(
        self,
        settings: Settings | SettingsStore | None = None,
        *,
        embedder: Embedder | None = None,
        migrate: bool = True,
        defer_model: bool = False,
    ) -> None:
        """``migrate``: re-embed in the background after a change of model (see
        core/indexing/reembed.py). The app, `lectern index` and `lectern watch` do; short
        commands (`lectern status`, `search`, `ask`) pass False and leave it to them.

        ``defer_model``: the model is loaded by someone else (the app, beside opening the
        library) and handed over with ``adopt_embedder`` or loaded with ``load_model``;
        until then a hybrid search ranks by keyword alone and ``embedder`` raises
        ModelNotReadyError instead of loading it, so searches and quoted answers never
        wait seconds for a model that is on its way.

        ``settings``: the store the app keeps its settings in, which the library then
        reads and changes them through (and follows: see ``_settings_changed``); given
        as ``Settings`` or not at all (settings.json), they get a store of their own."""
        self.settings_store = (
            settings
            if isinstance(settings, SettingsStore)
            else SettingsStore(settings or load_settings())
        )
        # Private whatever the umask of a program using the library as a module: the
        # folder is what keeps DuckDB's own files (made by its umask) from other accounts.
        make_private_dir(self.settings.home)
        self._embedder = embedder
        # A model handed over at open is the caller's choice, as one named in settings.json:
        # the library does not choose another by its documents' language.
        self._model_given = embedder is not None
        # What the library said of its model on its own, until the CLI or app takes it.
        self._model_notice: str | None = None
        # The model is part of the index configuration: a library built with one model is
        # never searched or extended with another's vectors (see _check_index_config).
        # ``models.current`` is the model the index holds and search uses; after a change
        # of model it stays the old one until the background re-embedding switches.
        self.models = ModelSwitch(
            embedder.model_id if embedder else self.settings.embedding_model, embedder
        )
        self._lock = threading.RLock()
        self._model_lock = threading.Lock()
        self._defer_model = defer_model
        self._language_mix: tuple[int, LanguageMix] | None = None  # (chunks then, mix)
        self.db, notices = open_database(self.settings.db_path)
        # Once the library is this process's: a command refused as busy leaves it, and
        # its one line, to the process that opens it.
        was_shared = shared(self.settings.home)
        tightened = tighten(self.settings.home)
        self.read_only = self.db.read_only
        # What was repaired at open, for the user to be told once (the CLI on standard
        # error, the app in its status bar); `lectern status` shows the recent ones.
        self.recovery_notices: list[RecoveryNotice] = []
        self.backup = RecordBackup(self.settings.home / "backup")
        self._vectors: VectorIndex | None = None
        self._chunker: Chunker | None = None
        self._retriever: Retriever | None = None
        self._open_record(notices)
        if was_shared and tightened:
            # Only when the folder itself was open: inside a 0700 folder, a file left
            # 0644 (by DuckDB under a program's own umask) was never readable by others.
            self._notice(_made_private(tightened))
        # Values of settings.json out of range, said once with the value used instead
        # (core/config.py); not kept as repairs: the file says so until it is changed.
        self.recovery_notices[:0] = [
            RecoveryNotice("setting_replaced", r.message, r.hint) for r in self.settings.replaced
        ]
        self.parser = ParserPool(
            self.settings.parse_timeout_s,
            self.settings.parse_memory_mb,
            ocr=OcrOptions(
                self.settings.ocr_enabled,
                self.settings.ocr_languages,
                self.settings.ocr_timeout_s,
                self.settings.ocr_memory_mb,
            ),
        )
        self.indexer = Indexer(
            self.files,
            self.keyword,
            lambda: self.vectors,
            lambda: self.embedder,
            lambda: self.chunker,
            self.parser,
            self.index_config,
            self.settings.ignore_patterns,
            embed_batch_size=self.settings.embed_batch_size,
        )
        # A removed file leaves no cached answer text behind.
        self.indexer.on_removed.append(self.conversations.forget_documents)
        # The second stage's word pieces are kept while it is on (settings may change).
        self.indexer.pieces = lambda: self.pieces if self.settings.rerank else None
        self.set_index_pace(self.settings.index_when, self.settings.index_cpu_share)
        if migrate and self.switching_model:
            self._start_reembedding()
        if self._may_choose_model():
            self.indexer.choose_model = self._choose_first_model
        self._stop_following = self.settings_store.subscribe(self._settings_changed)

    @property
    def settings(self) -> Settings:
        return self.settings_store.current

    def _settings_changed(self, _settings: Settings, changed: frozenset[str]) -> None:
        """What the library built from the settings, made again from the current ones
        (read here, not from the call: changes on two threads may be told out of order).
        The rest is read at each use (top_k, the model server, the answers' and the word
        pieces' settings) or at the next open (parsing, OCR, ignored files, batch size,
        chunk overlap; a new model is ``change_embedding_model``'s)."""
        if changed & _RETRIEVER_SETTINGS:
            with self._lock:
                self._drop_retriever()  # made from the new settings at the next search
        if changed & _PACE_SETTINGS:
            self.set_index_pace(self.settings.index_when, self.settings.index_cpu_share)

    def set_index_pace(self, when: str, cpu_share: int) -> None:
        """When indexing may run (core/indexing/throttle.py); a running index or watcher batch
        follows the change at its next file or batch."""
        self.indexer.throttle.configure(when, cpu_share)

    # --- repairs at open ----------------------------------------------------------------

    def _open_record(self, notices: Sequence[RecoveryNotice]) -> None:
        """The stores over the database and the keyword file, and the repairs made at
        open. The database has answered its first reads in ``open_database``; a block
        first read here (folders and conversations for the backup, the configuration)
        can still turn out damaged. That failure is classified like one at connect:
        damage to the database sets it aside and starts anew from the backup (once),
        anything else is said as what it is, never as a bare DuckDB error."""
        try:
            self._open_parts(notices)
            return
        except duckdb.Error as exc:
            error = self._classify_failed_open(exc)
            if not isinstance(error, DamagedStoreError) or self.read_only:
                raise error from exc
            self.db, notice = start_anew(self.settings.db_path, error)
        try:
            self._open_parts([notice])
        except duckdb.Error as exc:
            raise self._classify_failed_open(exc) from exc

    def _classify_failed_open(self, exc: duckdb.Error) -> StoreError:
        keyword = getattr(self, "keyword", None)
        if keyword is not None:
            keyword.close()
        self.db.close()
        path = self.settings.db_path
        named = named_file(exc)
        if named is not None and named not in (path, Path(f"{path}.wal")):
            # Another file's (a derived one's, which its own open repairs): said.
            error = classify_open_error(named, exc)
            return StoreError(error.message) if isinstance(error, DamagedStoreError) else error
        return classify_open_error(path, exc)

    def _open_parts(self, notices: Sequence[RecoveryNotice]) -> None:
        self.read_only = self.db.read_only
        self.recovery_notices = []
        self.files = DocumentStore(self.db)
        self.conversations = ConversationStore(self.db, self.backup)
        self.collections = CollectionStore(self.db, self.backup, self.files.folders)
        # A database started anew after damage numbers its chunks from 1 again: the
        # keyword file built from the old one is emptied and rebuilt.
        rebuilt = any(n.kind == "library_rebuilt" for n in notices)
        # One map of live chunks for keyword and meaning search alike (core/store/lookup.py).
        self.live = LiveChunks(self.db)
        self.keyword = KeywordIndex(
            self.db, self.settings.home / KEYWORD_FILE, stale=rebuilt, live=self.live
        )
        self.reembed_store = ReembedStore(self.db)
        self.pieces = PieceStore(self.db)
        self._restore_record(notices)
        self._keep_first_model()
        self._check_index_config()
        self._reread_changed_formats()
        try:
            self.pieces.keep_for(self.models.current, PIECES_CODEC)
        except duckdb.Error as exc:
            # Derived: searches encode what they lack, and the next run tries again.
            logging.getLogger(__name__).warning("stored word pieces not checked: %s", exc)
        if self.keyword.recovery == "unavailable":
            self._notice(
                RecoveryNotice(
                    "keyword_unavailable",
                    "The keyword index cannot be used and the library's folder is "
                    "read-only, so it cannot be rebuilt: search finds passages by meaning.",
                    "Make the folder writable and open Lectern again to rebuild it.",
                )
            )
        elif self.keyword.recovery and self.keyword.recovery != "upgrading":
            # (An older keyword format being rebuilt is not damage: status says
            # "rebuilding" meanwhile, and no repair is reported.)
            self._notice(
                RecoveryNotice(
                    "keyword_rebuilding",
                    "The keyword index could not be opened, so it is being rebuilt in the "
                    "background; meanwhile search finds passages by meaning.",
                    "Nothing needs doing.",
                    kept_at=str(self.keyword.kept_at or ""),
                )
            )
        if not self.keyword.is_current() and not self.read_only:
            # A run was interrupted after committing chunks but before publishing them
            # (quick: a delta), or the keyword file is new (a rebuild, in the background).
            self._refresh_keywords_at_open()

    def _notice(self, notice: RecoveryNotice) -> None:
        self.recovery_notices.append(notice)
        if self.read_only:
            return  # told now; a read-only library keeps no history
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
        if self.read_only:
            return
        if any(n.kind in ("library_rebuilt", "log_set_aside", "log_cut_short") for n in notices):
            self.files.add_folders(self.backup.load_folders())
            self.conversations.restore(self.backup.load_conversations())
            self.collections.restore(self.backup.load_collections())
        elif not self.backup.exists() or self.backup.set_aside_unreadable():
            # A first open, or a backup file cut short or garbled (set aside, never
            # written over): written again from the record now, while the record is whole.
            self.backup.save_folders(self.files.folders())
            self.collections.back_up_all()
            self.conversations.back_up_all()
        for notice in self.backup.take_notices():
            self._notice(notice)

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
        embedder = self._embedder
        if embedder is not None:
            return embedder
        if self._defer_model:
            raise ModelNotReadyError("The search model is still loading.")
        return self.load_model()

    def load_model(self) -> Embedder:
        """The index's model, loaded now if it is not yet (even with ``defer_model``)."""
        # A lock of its own: loading the model takes seconds, and opening the vector
        # index or building the chunker must not wait behind it.
        with self._model_lock:
            if self._embedder is None:
                self._embedder = load_embedder(self.models.current)
            return self._embedder

    @property
    def model_loaded(self) -> bool:
        return self._embedder is not None

    def adopt_embedder(self, embedder: Embedder) -> bool:
        """Use a model loaded elsewhere (the app loads it beside opening the library);
        False when it is not the index's model (a change of model pending), which
        ``load_model`` then loads."""
        with self._model_lock:
            if self._embedder is None and embedder.model_id == self.models.current:
                self._embedder = embedder
            return self._embedder is embedder

    @property
    def chunker(self) -> Chunker:
        with self._lock:
            if self._chunker is None:
                # Sized by the model that embeds the passages; by the bundled tokenizer's
                # count while no model is loaded yet (the same limit: both read 256).
                self._chunker = chunker_for(
                    self._embedder if self._embedder is not None else WordPieceCounter(),
                    overlap_sentences=self.settings.chunk_overlap_sentences,
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
        if self._retriever is not None:
            return self._retriever
        with self._lock:
            if self._retriever is None:
                # The model and the vector file are handed over as loaders: a keyword
                # search never imports the model (seconds and half a gigabyte, issue 33);
                # the first search that needs meaning loads each, under its own lock.
                self._retriever = Retriever(
                    self.db,
                    self.keyword,
                    self._vectors if self._vectors is not None else (lambda: self.vectors),
                    self._embedder if self._embedder is not None else (lambda: self.embedder),
                    model_id=self.models.current,
                    candidates=self.settings.candidates,
                    rrf_k=self.settings.rrf_k,
                    fusion=self.settings.fusion,
                    params=fusion_params(self.models.current, self.settings.candidates),
                    second_stage=RerankParams() if self.settings.rerank else None,
                    calibration=self._fusion_calibration(self.models.current),
                    pieces=self.pieces,
                    live=self.live,
                )
            return self._retriever

    def _drop_retriever(self) -> None:
        """Under ``_lock``: the next search makes a new retriever; what the old one learnt
        of the lists' sureness is kept first."""
        if self._retriever is not None:
            self._retriever.calibration.flush()
        self._retriever = None

    def _fusion_calibration(self, model_id: str) -> LibraryCalibration:
        """The library's record of which list was surer (core/retrieval/fusion.py), per
        model, since it is the model's meaning list that it weighs."""
        key = f"fusion_record|{model_id}"
        record = SurerList.from_text(self.db.get_meta(key))

        def save(record: SurerList) -> None:
            if self.db.read_only:
                return
            try:
                self.db.set_meta(key, record.to_text())
            except duckdb.Error as exc:
                # Derived and small: an update lost to a full disk or a busy write costs a
                # few questions of learning, never the search that made it.
                logging.getLogger(__name__).warning("fusion record not saved: %s", exc)

        return LibraryCalibration(record, save)

    @property
    def index_config(self) -> str:
        overlap = self.settings.chunk_overlap_sentences
        from core.chunking.passages import CHUNKER_VERSION

        return f"{self.models.current}|chunker {CHUNKER_VERSION}|overlap {overlap}"

    def _reread_changed_formats(self) -> None:
        """Files of a format whose reader changed since the library last read them are
        read again by the next indexing pass (``FileFormat.version``): a PDF indexed
        before headings in spaced letters were joined keeps "R E SULTS" otherwise. They
        stay searchable as they are until then."""
        if self.read_only:
            return
        current = reader_versions()
        try:
            stored = json.loads(self.db.get_meta(READER_VERSIONS_KEY) or "{}")
        except ValueError:
            stored = {}
        if not isinstance(stored, dict):
            stored = {}
        if stored == current:
            return
        # A library from before versions were kept read its files with version 1 of each.
        changed = [k for k, v in current.items() if int(stored.get(k, 1) or 1) < v]
        try:
            marked = self.files.mark_reread(
                changed, {READER_VERSIONS_KEY: json.dumps(current, sort_keys=True)}
            )
        except duckdb.Error as exc:
            # Nothing lost: the files keep what the older reader made; the next open
            # tries again.
            logging.getLogger(__name__).warning("files not marked to be read again: %s", exc)
            return
        if marked:
            logging.getLogger(__name__).info("%d files to be read again by newer readers", marked)

    def _check_index_config(self) -> None:
        """Vectors of two models (or chunkings) must never be mixed. A change of model
        alone keeps the index and the old model answering while the new one re-embeds
        in the background (core/indexing/reembed.py); any other change drops every chunk and
        queues every document for re-indexing."""
        stored = self.db.get_meta("index_config")
        if self.read_only:
            # Nothing is re-embedded or dropped in a library that cannot be written:
            # search uses the model its vectors were made with.
            if stored is not None:
                self.models.current = self.models.target = stored.split("|", 1)[0]
                if self._embedder is not None and self._embedder.model_id != self.models.current:
                    self._embedder = None
            return
        if stored == self.index_config:
            # Changed back before a background switch finished: it is dropped.
            self.reembed_store.cancel()
            return
        if stored is not None and self._reembeddable(stored):
            self.models.current = stored.split("|", 1)[0]
            if self._embedder is not None and self._embedder.model_id != self.models.current:
                self._embedder = None  # the new model's, used by the re-embedding
            self.reembed_store.begin(self.models.target)
            return
        # Every chunk goes: a background re-embedding has nothing left to switch. (Before
        # the drop: a crash between the two leaves the config unchanged, so it is redone.)
        self.reembed_store.cancel()
        dim = self._embedder.dim if self._embedder else DEFAULT_DIM
        version = int(self.db.get_meta("content_version", "0") or 0) + 1
        self.files.set_index_config(
            {
                "index_config": self.index_config,
                "embedding_model": self.models.current,
                "embedding_dim": str(dim),
                "content_version": str(version),
            },
            drop_chunks=stored is not None,
        )
        if stored is not None:
            self.settings.vectors_path.unlink(missing_ok=True)
            self.keyword.refresh(force_merge=True)

    def _reembeddable(self, stored: str) -> bool:
        """Whether ``stored`` differs from the wanted configuration in the model alone,
        and its model is one that ships (it keeps answering until the switch)."""
        model, _, rest = stored.partition("|")
        wanted_rest = self.index_config.partition("|")[2]
        return rest == wanted_rest and model != self.models.target and model in MODELS

    # --- the model a new library starts with (core/indexing/model_switch.py) -------------

    def _may_choose_model(self) -> bool:
        """Whether the library may still take the multilingual model by its first
        documents' language: nobody chose a model (the person, in settings.json or by
        declining the offer, or the code that opened it), and the engine is here. Whether
        the library has vectors yet, each run asks (Indexer.choose_model)."""
        chosen = (
            self._model_given
            or self.settings.embedding_model_chosen
            or self.settings.model_offer_declined
        )
        return (
            not (chosen or self.read_only)
            and self.models.current == self.models.target == DEFAULT_MODEL_ID
            and multilingual_available()
        )

    def _keep_first_model(self) -> None:
        """The model the library took from its first documents stays while settings.json
        names none (the app writes back the settings it read before the choice, without
        the model): otherwise the library would be re-embedded with the default."""
        chosen = self.db.get_meta(CHOSEN_KEY)
        stored = (self.db.get_meta("index_config") or "").partition("|")[0]
        if (
            chosen in MODELS
            and stored == chosen
            and not (self._model_given or self.settings.embedding_model_chosen)
            and self.settings.embedding_model == DEFAULT_MODEL_ID
        ):
            self.models.want(chosen)
            # Not a change of the person's (with_changes would make it one), nor saved.
            self.settings_store.replace(replace(self.settings, embedding_model=chosen), save=False)

    def _choose_first_model(self, passages: list[str]) -> None:
        """Called by the indexer before the first passage of a library without vectors
        is written: the multilingual model when most of ``passages`` are not English,
        taken at once (nothing to re-embed) and recorded as a switch the person makes."""
        model_id, mix = first_model(passages)
        if not mix.sampled:
            return  # no text to judge (figures, scans): asked again until vectors exist
        self.indexer.choose_model = None  # decided: from here on the offer speaks
        if model_id is None:
            return
        log = logging.getLogger(__name__)
        try:
            embedder = load_embedder(model_id)
        except LecternError as exc:
            log.warning("the multilingual model did not load, the default stays: %s", exc.message)
            return
        with self._model_lock:
            self._embedder = embedder
        with self._lock:
            self.models.want(model_id)
            self.files.set_index_config(
                {
                    "index_config": self.index_config,
                    "embedding_model": model_id,
                    "embedding_dim": str(embedder.dim),
                    CHOSEN_KEY: model_id,
                },
                drop_chunks=False,
            )
            if self._vectors is not None and self._vectors.dim != embedder.dim:
                self._vectors = None  # empty: opened again at the new model's size
                self.settings.vectors_path.unlink(missing_ok=True)
            self._drop_retriever()  # it embeds questions with the model it was made with
            self.indexer.index_config = self.index_config
        try:
            self.settings_store.update(embedding_model=model_id)
        except OSError as exc:
            # The library keeps the model all the same (_keep_first_model).
            log.warning("settings.json does not record the multilingual model: %s", exc)
        self._model_notice = chosen_message(mix)
        log.info("%s", self._model_notice)

    def take_model_notice(self) -> str | None:
        """What the library said of its model on its own (it started with the
        multilingual model), once; None when there is nothing (more) to say."""
        notice, self._model_notice = self._model_notice, None
        return notice

    # --- changing the model in the background ---------------------------------------

    @property
    def switching_model(self) -> bool:
        """Whether a change of model waits to be switched to (re-embedding pending)."""
        return self.models.switching

    def _start_reembedding(self) -> None:
        self.models.start(
            self.reembed_store,
            self._switch_model,
            self.indexer.throttle,
            batch_size=self.settings.embed_batch_size,
        )

    def _switch_model(self, embedder: Embedder) -> bool:
        return self.models.swap(
            embedder,
            db=self.db,
            store=self.reembed_store,
            indexing=self.indexer.lock,
            config=self.index_config,
            vectors_path=self.settings.vectors_path,
            commit=self._take_switched_model,
        )

    def _take_switched_model(self, embedder: Embedder, vectors: VectorIndex, config: str) -> None:
        with self._model_lock:
            self._embedder = embedder
        with self._lock:
            self.models.current = embedder.model_id
            self._vectors = vectors
            self._drop_retriever()
        self.indexer.index_config = config

    def reembedding_status(self) -> ReembedStatus | None:
        """Where a change of model stands, or None when there is none."""
        return self.models.status(self.reembed_store)

    def change_embedding_model(self, model_id: str) -> None:
        """Switch to ``model_id`` while the library stays open: re-embedded in the
        background while the current model answers (core/indexing/reembed.py), as after a change
        of ``embedding_model`` in settings.json and a reopen."""
        if model_id not in MODELS:
            raise ConfigError(
                f"{model_id!r} is not an embedding model Lectern ships.",
                f"Choose one of: {', '.join(MODELS)}.",
            )
        with self._lock:
            self.indexer.choose_model = None  # the person chose
            if model_id == self.models.target:
                return
            # Saved by the caller (the app, beside its other settings), as before a reopen.
            self.settings_store.replace(
                self.settings.with_changes(embedding_model=model_id), save=False
            )
            # As at open: the wanted model first, then the stored configuration decides
            # (a model change alone is re-embedded; back to the stored one cancels it).
            self.models.want(model_id)
            self._check_index_config()
            if self.switching_model:
                self._start_reembedding()

    # --- folders --------------------------------------------------------------------

    def add_folder(self, path: str | Path) -> str:
        folder = normalize_folder(path)
        if not os.path.exists(folder):
            raise LecternError(f"{folder} does not exist.", "Check the path and try again.")
        self.files.add_folders([folder])
        self.backup.save_folders(self.files.folders())
        return folder

    def remove_folder(self, path: str | Path) -> int:
        """Forget a folder the user removed: its documents, chunks and vectors go too.
        (A folder that merely disappeared, such as an unplugged drive, is kept: see
        ``folder_online``.)"""
        folder = normalize_folder(path)
        with self.indexer.lock:  # a running sync must not re-add what is being removed
            removed = self.indexer.remove_paths(self.files.paths_in_folder(folder))
            self.files.remove_folder(folder, _DEVICE_KEY + folder)
            self.backup.save_folders(self.files.folders())
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
        if recorded != str(st.st_dev) and not self.read_only:
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
        self._refuse_indexing_if_read_only()
        if paths:
            for path in paths:
                self.add_folder(path)
            targets = [normalize_folder(p) for p in paths]
        else:
            targets = self.files.folders()
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
        self._refuse_indexing_if_read_only()
        known = self.files.folders()
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
        self._refuse_indexing_if_read_only()
        folders = [f for f in self.files.folders() if self.folder_online(f)]
        return self.indexer.run(
            folders, only=[normalize_folder(p) for p in paths], progress=progress, controls=controls
        )

    def retry(
        self,
        paths: str | Sequence[str],
        *,
        progress: ProgressCallback | None = None,
        controls: Controls | None = None,
    ) -> IndexReport:
        """Read these files again (those that failed, say), all in one run: its report
        counts every one of them."""
        chosen = [paths] if isinstance(paths, str) else list(paths)
        for path in chosen:
            self.files.mark_pending(normalize_folder(path))
        return self.sync_files(chosen, progress=progress, controls=controls)

    def _refuse_indexing_if_read_only(self) -> None:
        if self.read_only:
            folder = self.settings.home
            raise ReadOnlyLibraryError(
                f"Lectern cannot index: the library's folder {folder} is read-only (a "
                "read-only disk or mount), so nothing can be added to the library or "
                "brought up to date.",
                path=str(folder),
            )

    def _mark_online(self, folders: Sequence[str]) -> list[str]:
        """Record which folders are online; returns those."""
        online = [f for f in folders if self.folder_online(f)]
        self.files.set_folder_states({f: "online" if f in online else "offline" for f in folders})
        return online

    # --- reading --------------------------------------------------------------------

    def search(
        self,
        query: str,
        k: int | None = None,
        mode: str = "hybrid",
        folders: Sequence[str] | None = None,
        types: Sequence[str] | None = None,
        *,
        scope: Scope | None = None,
        lead: int = 0,
    ) -> list[Hit]:
        """Passages for ``query``; ``folders``/``types`` narrow it, and so does ``scope``
        (collections, folders, types): the two are combined into one scope. ``lead``:
        the best document's first passages, up to that many, come first (an answer's
        sources; core/retrieval/search.py ``diversified``)."""
        if scope:
            merged = Scope(
                scope.collections,
                (*scope.folders, *(folders or ())),
                (*scope.types, *(types or ())),
            )
            filters = self.collections.filters_for(merged)
            if filters is None:  # a scope whose folders all left the library
                return []
        else:
            filters = SearchFilters(
                folders=tuple(normalize_folder(f) for f in folders or ()),
                types=tuple(types or ()),
            )
        if mode == "hybrid" and self._defer_model and self._embedder is None:
            # The model is on its way (see ``defer_model``): keyword now rather than
            # seconds of waiting; hybrid ranks a document without vectors the same way.
            mode = "bm25"
        with (
            self.models.gate.reading()
        ):  # never across a switch of model (core/indexing/reembed.py)
            return self.retriever.search(query, k or self.settings.top_k, mode, filters, lead)

    def folder_status(self) -> list[FolderStatus]:
        read_by_ocr = self.files.ocr_counts()
        return [
            FolderStatus(
                path,
                self.folder_online(path),
                indexed,
                failed,
                skipped,
                pending,
                chunks,
                ocr=read_by_ocr.get(path, 0),
            )
            for path, indexed, failed, skipped, pending, chunks in self.files.folder_counts()
        ]

    def searchable(self) -> tuple[int, int]:
        """Passages searchable (by keyword, by meaning). Indexing writes passages first
        and embeds them behind, so meaning search can lag behind keyword search."""
        embedded, chunks = self.files.embedding_counts()
        # While the keyword file is rebuilt after damage, nothing is keyword-searchable.
        return (0 if self.keyword.status() in ("rebuilding", "unavailable") else chunks), embedded

    def language_mix(self) -> LanguageMix:
        """The languages of a sample of the library's passages (core/embedding/languages.py),
        sampled again only once the library has grown or shrunk by a tenth: `status`,
        the app's snapshots and the evals all ask, and a sample reads a thousand
        passages."""
        chunks = self.files.counts()[1]
        cached = self._language_mix
        if cached is not None and cached[0] and abs(chunks - cached[0]) < cached[0] / 10:
            return cached[1]
        mix = language_mix(self.files.sample_chunk_texts(LANGUAGE_SAMPLE))
        self._language_mix = (chunks, mix)
        return mix

    def fusion_record(self) -> dict[str, object]:
        """What the library's own questions have taught the fusion so far."""
        retriever = self.retriever
        record = retriever.calibration.record
        return {
            "questions": record.questions,
            "meaning_surer": record.meaning_surer,
            "bm25_prior": round(retriever.calibration.prior(retriever.params), 3),
            "fusion": retriever.fusion,
        }

    def model_advice(self, mix: LanguageMix | None = None) -> ModelAdvice | None:
        """The embedding model this library's languages call for, when it is not the one
        in use (and no switch is under way)."""
        if self.reembedding_status() is not None:
            return None
        return model_advice(mix or self.language_mix(), self.db.get_meta("embedding_model"))

    def status(self) -> dict[str, object]:
        counts, chunks = self.files.counts()
        by_keyword, by_meaning = self.searchable()
        switching = self.reembedding_status()
        mix = self.language_mix()
        advice = self.model_advice(mix)
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
                for d in self.files.documents()
            ],
            "counts": counts,
            "chunks": chunks,
            "collections": [c.to_json() for c in self.collections.all()],
            "searchable": {"keyword": by_keyword, "meaning": by_meaning},
            "embedding_model": self.db.get_meta("embedding_model"),
            "languages": mix.to_json(),
            "fusion": self.fusion_record(),
            "model_advice": advice.to_json() if advice else None,
            "reembedding": switching.to_json() if switching else None,
            "index_config": self.index_config,
            "keyword_delta_chunks": self.keyword.delta_size(),
            "keyword_index": self.keyword.status(),
            "recovery": self.recovery_log(),
            "indexing": {
                "when": self.indexer.throttle.mode,
                "cpu_share": self.indexer.throttle.cpu_share,
                "waiting": self.indexer.throttle.waiting,
            },
        }

    def close(self) -> None:
        # Background work is stopped first. A re-embedding keeps what it stored (the next
        # open resumes it); a keyword base rebuild's tables are new and unused, so nothing
        # is lost (the next run starts it again).
        self._stop_following()  # the app's store outlives its library
        self.models.stop()
        self.keyword.close()
        with self._lock:
            if self._retriever is not None:
                self._retriever.calibration.flush()
            if self._vectors is not None:
                try:
                    self._vectors.save_if_dirty()
                except DiskFullError:
                    # Derived: the next open adds what the file lacks from the database.
                    logging.getLogger(__name__).warning(
                        "vector file not saved at close: the disk is full"
                    )
            self.parser.close()
            self.db.close()
        # What DuckDB made this session under a program's own umask is private at rest too.
        tighten(self.settings.home)

    def __enter__(self) -> Library:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _made_private(count: int) -> RecoveryNotice:
    """The one line said when opening took other accounts' access off the library."""
    things = "file or folder" if count == 1 else "files and folders"
    verb = "is" if count == 1 else "are"
    return RecoveryNotice(
        "made_private",
        f"Made your library private: {count:,} {things} other accounts on this computer "
        f"could read {verb} now yours alone.",
    )
