"""BM25 keyword search over chunks with DuckDB's ``fts`` extension, updated incrementally.

The keyword index is derived data and lives in a DuckDB file of its own
(``keyword.duckdb``), attached to the library's connection as ``kw``. ``PRAGMA
create_fts_index`` is DDL (schemas, tables, macros); killed while such DDL sat in the
write-ahead log, DuckDB has failed every later open of the file with "Cannot drop entry
... because there are entries that depend on it". In a file of its own, that costs a
rebuild of the keyword index, never the library: a keyword file that will not open is
set aside and rebuilt in the background while search carries on with meaning search.
The library's database never holds fts DDL.

``PRAGMA create_fts_index`` indexes a whole table at once (~9 s per 100k chunks here), so
a one-file change cannot pay for a rebuild. The keyword index is therefore three fts
indexes over snapshot tables:

- the *base*: every chunk with ``id <= watermark`` at the time it was built, rebuilt
  rarely (when the delta grows past a fraction of it);
- the *delta*: chunks with ``id > watermark``, up to ``delta_watermark``;
- the *fresh* one: the chunks newer than that, all a refresh rebuilds, folded into the
  delta once it is as large (``FRESH_MIN_FOLD``).

A rebuild of any of them reads only the chunks newer than the snapshot it replaces and
carries that snapshot's postings over (``_build_merged``); only a keyword file rebuilt
after damage or an upgrade reads every passage again.

Chunk ids only grow, so "newer than the watermark" is exactly "not in the base". Deleted
chunks need no tombstone table: every query joins with the live ``chunks`` table, which
drops them. A query scores every snapshot with BM25 using the *combined* statistics (total
documents, average length, and each term's document frequency summed over the snapshots),
so a chunk scores the same whether it sits in the base or the delta.

Each snapshot alternates between two table names so that a rebuild never drops the index
a concurrent reader is using; the switch is one metadata write.

A base rebuild takes seconds on a large library (~9 s per 100k chunks), so while indexing
it runs on its own thread (``refresh(background=True)``) without the write lock: it only
creates new tables, readers and the indexer carry on with the old base and a growing
delta, and the write lock is taken only for the switch (with a fresh delta of the chunks
newer than the new base).

A query never reads fts's ``terms`` table (one row per token occurrence, ~30 million at
300k chunks: every query scanned it, 243 ms p95). Each snapshot instead keeps, beside its
fts ``dict``/``docs``/``stats``, a postings table with one row per term (the documents
holding it and their term frequencies, packed as little-endian arrays). A query reads the
dictionary rows of its stemmed terms, then only those terms' postings rows, and scores
them with numpy in the same BM25 formula and combined statistics; liveness and filters are
then checked on the best few hundred with a literal id list (more are taken when too few
survive), so the result is the same top-k the full join gave. Once the postings are
derived, ``terms`` and the snapshot's copy of the text are dropped: the file holds the
dictionary, document lengths and postings only.

Between queries the index keeps what does not change until the next rebuild: each
snapshot's dictionary (as sorted hashes), decoded postings with their per-document BM25
contribution (48 MB at most), the stems of words seen, and, while the database is quiet,
which chunks are live. ASCII queries are tokenized in Python, exactly as fts does.
"""

from __future__ import annotations

import base64
import logging
import math
import os
import re
import tempfile
import threading
import uuid
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import duckdb
import numpy as np

from core.errors import (
    DiskFullError,
    IndexBusyError,
    LibraryAccessError,
    ReadOnlyLibraryError,
    StoreError,
)
from core.records import SearchFilters
from core.store.db import Database, classify_open_error, scalar, set_aside
from core.store.lookup import filter_clause, id_list

log = logging.getLogger(__name__)

ALIAS = "kw"

BASE_NAMES = ("kw_base_a", "kw_base_b")
DELTA_NAMES = ("kw_delta_a", "kw_delta_b")
FRESH_NAMES = ("kw_fresh_a", "kw_fresh_b")
# Digits are kept (the fts default drops them): error codes, figures and identifiers are
# exactly what people search by keyword. Letters are any script's (the default keeps only
# a-z, so Russian, Greek, Arabic or CJK text was not keyword-searchable at all). A change
# here needs a rebuilt keyword index: it goes with CHUNKER_VERSION in core/chunking/passages.py.
IGNORE_PATTERN = r"(\\.|[^\p{L}\p{N}])+"
# fts's one stemmer (Porter, for English) leaves other scripts' words as they are, so a
# Russian "ёжики" never met "ежей". Words written wholly in one of these scripts are
# stemmed by its language's Snowball stemmer before fts sees them (porter then leaves
# the stem alone: its rules are a-z). Stemming comes before fts strips accents, which
# would turn "й" into "и" and matras into nothing under the stemmer's feet. A change here
# or in LANGUAGE_MARKERS needs a rebuilt keyword index: bump FORMAT.
SCRIPT_STEMMERS = (
    ("Cyrillic", "russian"),
    ("Greek", "greek"),
    ("Arabic", "arabic"),
    ("Devanagari", "hindi"),
    ("Tamil", "tamil"),
)
# Latin-script languages share one script, so a passage's language is guessed from its
# commonest words: the language (a Snowball stemmer's name) with the most of its markers
# among the passage's words, at least two, English winning ties ("" keeps Porter). Words
# that are just as common in English ("die", "in", "a", "plus", "per", "door", ...) are
# left out. Only text with a non-ASCII character is guessed (German, French, Spanish
# or Swedish prose has its umlauts and accents within a few words): an all-ASCII passage
# keeps Porter, and an English library builds exactly as before.
LANGUAGE_MARKERS: tuple[tuple[str, str], ...] = (
    (
        "",
        "the and of to is that with for was are this be by from which have not or it on "
        "as at an were has been their they we these can",
    ),
    (
        "german",
        "der das und ist nicht ein eine zu den von mit sich des auf für im dem auch es "
        "als wie bei oder aus nach wird werden sind hat haben noch nur um über wenn kann "
        "sie ich",
    ),
    (
        "french",
        "le la les et des est une un du dans pour que qui pas sur au avec ce il sont par "
        "ne se ou mais leur cette été aux",
    ),
    (
        "spanish",
        "el la los las y de que en del se por un una es con para al lo como más pero sus "
        "le ya o este sí porque esta entre cuando muy sin sobre también",
    ),
    (
        "italian",
        "il di che la e un una non con del della sono le dei si gli nel alla anche più "
        "ma ha questo essere lo tra dalla delle",
    ),
    (
        "portuguese",
        "o os de que e da em um uma para com não por mais dos das se na ao mas foi ele "
        "ela sua seu são também",
    ),
    (
        "dutch",
        "de het een en van dat op te zijn niet met voor die er aan ook als bij maar om "
        "dan nog wordt naar worden geen",
    ),
    (
        "swedish",
        "och att det som en på är av för med den har de inte om ett var jag sig så från "
        "när kan vi eller också",
    ),
)
# IGNORE_PATTERN keeping combining marks inside words (fts strips them after this split).
WORD_SPLIT_PATTERN = r"(\\.|[^\p{L}\p{N}\p{M}])+"
_LATIN_WORD = r"[\p{Latin}\p{M}]+"
MERGE_FRACTION = 0.10
MERGE_MIN_CHUNKS = 2_000
# The delta's newest chunks sit in a third snapshot, the *fresh* one, which is all a
# refresh rebuilds; it is folded into the delta once it holds as many chunks as the
# delta (or FRESH_MIN_FOLD, when the delta is smaller). So a refresh costs in proportion
# to the chunks written since the last fold, not to the whole delta (which grows to 10 %
# of the library: a 30,300-chunk delta took 10.4 s of CPU a refresh, the fresh snapshot
# 0.13 s, bench/keyword_refresh.py). Each fold at least doubles the delta, so between
# merges a chunk takes part in a few folds, not in every refresh.
FRESH_MIN_FOLD = 500
# The snapshot of the chunks newer than the one a rebuild carries over is built beside the
# new snapshot under its name and this suffix (``_build_merged``).
MERGE_ADDED_SUFFIX = "_new"
# Chosen on SciFact *train* (bench: a grid over k1 in 0.7-1.5 and b in 0.4-0.75):
# 0.9/0.4 and 0.7/0.5 tied best for hybrid (nDCG@10 0.7435 against 0.7409 for the
# textbook 1.2/0.75); 0.9/0.4 is also Anserini's setting for BEIR, so the less tuned of
# the two. Short passages (abstracts, chunks) want little length normalisation.
BM25_K1 = 0.9
BM25_B = 0.4
# The layout of a snapshot (fts dict/docs/stats plus packed postings, no ``terms``, words
# of SCRIPT_STEMMERS' scripts and LANGUAGE_MARKERS' languages stemmed, the languages it
# holds). A keyword file written in another layout is rebuilt in the background at open.
FORMAT = "postings-4"
# Postings are derived from fts's ``terms`` in termid ranges of about this many rows, so
# a rebuild holds tens of megabytes, not the whole index, in memory. A base rebuild at
# 300k chunks (library open with its vectors and the model) peaked at 1,438 MB with 2M
# rows a range and 1,319 MB with 500k, in the same time (bench/scale.py --child merge).
POSTINGS_BATCH_ROWS = 500_000
# Candidates checked for liveness and filters in a first round, beyond ``limit``.
FIRST_CHECK_EXTRA = 100
# Past this many candidates checked by id, the allowed chunks are listed instead.
MAX_CHECKED_BY_ID = 5_000
# Decoded postings, with each term's BM25 contribution per document, kept in memory
# (least recently used out first) up to this many bytes for the whole index: the frequent
# terms, whose lists are longest (slowest to fetch and to score), are the ones queries
# share.
POSTINGS_CACHE_BYTES = 48 * 1024 * 1024
# fts's ``tokenize`` (lower(strip_accents(s)), IGNORE_PATTERN replaced by a space, split
# on spaces) for ASCII text, where strip_accents does nothing and \p{L}\p{N} are a-z0-9:
# calling the macro costs ~3.5 ms of CPU per query (DuckDB compiles its Unicode regex on
# every call). Other text goes through the macro. tests/test_keyword_speed.py checks the
# two agree.
ASCII_IGNORE = re.compile(r"(\\.|[^a-z0-9])+")
# Stems remembered per word (the stemmer is a pure function), up to this many words.
STEM_MEMO_MAX = 100_000


def warm_page_cache(path: Path) -> threading.Thread:
    """Ask the OS to read the keyword file into its page cache, on a thread of its own.

    After a reboot (or once the OS has evicted the file), each of the first few dozen
    queries reads its terms' postings from disk: BM25 p95 234-312 ms over the first 200
    queries at 300k chunks, against 27 ms warm. The file holds only the dictionary,
    lengths and postings (146 MB live at 300k), so reading ahead all of it costs one
    sequential read the kernel does in the background, and pages it can drop again."""

    def read_ahead() -> None:
        try:
            with open(path, "rb") as handle:
                advise = getattr(os, "posix_fadvise", None)
                if advise is not None:
                    advise(handle.fileno(), 0, 0, os.POSIX_FADV_WILLNEED)
                else:  # no fadvise (macOS, Windows): read it through once
                    while handle.read(1 << 20):
                        pass
        except OSError:
            pass  # only a warm-up: the queries read what they need anyway

    thread = threading.Thread(target=read_ahead, daemon=True, name="lectern-kw-warm")
    thread.start()
    return thread


@dataclass(frozen=True)
class KeywordState:
    base: str | None
    delta: str | None
    watermark: int
    # Unique per build: a snapshot name is reused every other rebuild, so cached
    # per-snapshot arrays are keyed by this.
    base_stamp: str = ""
    delta_stamp: str = ""
    # The delta holds chunks up to delta_watermark, the fresh snapshot the newer ones;
    # -1: not known (a file from before the fresh snapshot), so the next refresh
    # rebuilds the whole delta.
    fresh: str | None = None
    fresh_stamp: str = ""
    delta_watermark: int = -1

    def parts(self) -> list[tuple[str, str]]:
        """(snapshot, stamp) of each snapshot that holds chunks, oldest first."""
        return [
            (name, stamp)
            for name, stamp in (
                (self.base, self.base_stamp),
                (self.delta, self.delta_stamp),
                (self.fresh, self.fresh_stamp),
            )
            if name
        ]


class _Postings:
    """One term's postings in one snapshot, and its BM25 contribution per document for
    the last (avgdl, idf) it was scored with (both move only when a snapshot changes)."""

    __slots__ = ("doc", "scored", "tfs")

    def __init__(self, doc: np.ndarray, tfs: np.ndarray) -> None:
        self.doc = doc
        self.tfs = tfs
        self.scored: tuple[float, float, np.ndarray] | None = None

    @property
    def nbytes(self) -> int:
        return self.doc.nbytes + self.tfs.nbytes + 8 * len(self.doc)

    def contribution(self, avgdl: float, idf: float, norm: np.ndarray) -> np.ndarray:
        """idf * (tf * (k1 + 1)) / (tf + norm), in that order (the same bits as the SQL
        it replaced)."""
        scored = self.scored
        if scored is not None and scored[0] == avgdl and scored[1] == idf:
            return scored[2]
        term_score = self.tfs * (BM25_K1 + 1)
        term_score *= idf
        denominator = norm[self.doc]
        denominator += self.tfs
        term_score /= denominator
        self.scored = (avgdl, idf, term_score)
        return term_score


@dataclass
class _Snapshot:
    """What a query needs of one built snapshot besides the postings of its terms:
    docid -> chunk id and docid -> length (a few MB at 300k chunks), and fts's stats.
    Snapshots never change once built, so this is read once per build."""

    chunk_ids: np.ndarray
    lengths: np.ndarray
    num_docs: int
    avgdl: float
    # (avgdl, norm) in one reference, so a concurrent query never pairs one with the
    # other's.
    norm: tuple[float, np.ndarray] | None = None
    # The dictionary as Python hashes of the terms (sorted), with termid and df in the
    # same order: 24 bytes a term, where asking DuckDB scans the dictionary on every
    # query (1-2 ms of CPU at 25k terms, growing with the vocabulary). Two terms with one
    # 64-bit hash (odds ~1e-12 a query at a million terms) is the only way it can differ.
    term_hashes: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    term_ids: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    term_dfs: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    languages: tuple[str, ...] = ()  # Latin-script languages its passages were stemmed as

    def lookup(self, term: str) -> tuple[int, int] | None:
        """(termid, df) of ``term``, None when no chunk of this snapshot holds it."""
        key = hash(term)
        at = int(np.searchsorted(self.term_hashes, key))
        if at < len(self.term_hashes) and int(self.term_hashes[at]) == key:
            return int(self.term_ids[at]), int(self.term_dfs[at])
        return None

    def length_norm(self, avgdl: float) -> np.ndarray:
        """k1 * (1 - b + b * len / avgdl) per docid, for the combined ``avgdl`` (which
        moves with every delta rebuild)."""
        cached = self.norm
        if cached is not None and cached[0] == avgdl:
            return cached[1]
        norm = BM25_K1 * (1 - BM25_B + BM25_B * self.lengths / avgdl)
        self.norm = (avgdl, norm)
        return norm


def _schema(table: str) -> str:
    return f"{ALIAS}.fts_main_{table}"


def _postings(table: str) -> str:
    return f"{ALIAS}.{table}_postings"


def _script_cases(word: str) -> str:
    return " ".join(
        f"WHEN regexp_full_match({word}, '[\\p{{{script}}}\\p{{M}}]+') THEN stem({word}, '{stemmer}')"
        for script, stemmer in SCRIPT_STEMMERS
    )


def _sql_list(words: str) -> str:
    return "[" + ", ".join(f"'{w}'" for w in words.split()) + "]"


def snapshot_rows_sql(chunks_table: str, where: str) -> str:
    """SQL for the (chunk_id, body, lang) rows a snapshot indexes: each chunk's context
    line and text as fts is to read it, and the Latin-script language it was stemmed as
    ("" for Porter alone). Text with a non-ASCII character is split into lower-cased
    words, each word of SCRIPT_STEMMERS' scripts replaced by its stem and, in a passage
    of a LANGUAGE_MARKERS language, each Latin-script word by its stem in that language;
    all-ASCII text goes to fts as it is."""
    counts = ", ".join(
        f"len(list_intersect(words, {_sql_list(markers)}))" for _, markers in LANGUAGE_MARKERS
    )
    names = ", ".join(f"'{name}'" for name, _ in LANGUAGE_MARKERS)
    return (
        f"SELECT chunk_id, CASE WHEN words IS NULL THEN raw ELSE array_to_string("
        f"list_transform(words, w -> CASE {_script_cases('w')} WHEN lang <> '' AND "
        f"regexp_full_match(w, '{_LATIN_WORD}') THEN stem(w, lang) ELSE w END), ' ') END "
        "AS body, lang FROM ("
        "SELECT chunk_id, raw, words, CASE WHEN words IS NULL OR list_max(counts) < 2 "
        f"THEN '' ELSE [{names}][list_position(counts, list_max(counts))] END AS lang FROM ("
        f"SELECT chunk_id, raw, words, [{counts}] AS counts FROM ("
        "SELECT chunk_id, raw, CASE WHEN strlen(raw) = length(raw) THEN NULL ELSE "
        f"string_split_regex(lower(raw), '{WORD_SPLIT_PATTERN}') END AS words FROM ("
        "SELECT id AS chunk_id, coalesce(context, '') || chr(10) || text AS raw "
        f"FROM {chunks_table} WHERE {where}))))"
    )


def term_sql(word: str, language: str | None = None) -> str:
    """SQL for the term the index holds for the lower-cased word ``word`` (an SQL
    expression): its script's stem, or with ``language`` (an SQL expression naming a
    Snowball stemmer) a Latin-script word's stem in that language (NULL for another
    word), then what fts does to a word (accents stripped, Porter)."""
    if language is None:
        inner = f"CASE {_script_cases(word)} ELSE {word} END"
    else:
        inner = (
            f"CASE WHEN regexp_full_match({word}, '{_LATIN_WORD}') "
            f"THEN stem({word}, {language}) END"
        )
    return f"stem(lower(strip_accents({inner})), 'porter')"


def query_terms_sql() -> str:
    """SQL for the distinct terms of the query ``?`` without language variants, in one
    statement (the reference searches of bench/keyword_scale.py and the tests)."""
    return (
        f"SELECT DISTINCT {term_sql('w')} AS t FROM (SELECT unnest(string_split_regex("
        f"lower(?), '{WORD_SPLIT_PATTERN}')) AS w) WHERE w <> ''"
    )


def fts_pragma(table: str) -> str:
    """The fts index every snapshot gets (its tokenizer, stemmer and stopwords)."""
    return (
        f"PRAGMA create_fts_index('{table}', 'chunk_id', 'body', stemmer='porter', "
        f"stopwords='english', ignore='{IGNORE_PATTERN}', strip_accents=1, lower=1, "
        "overwrite=1)"
    )


def _termid_batches(termids: object, dfs: object) -> list[tuple[int, int]]:
    """Inclusive termid ranges of about POSTINGS_BATCH_ROWS postings each (a term's df is
    its postings count), in termid order."""
    ids = np.asarray(termids, dtype=np.int64)
    if not len(ids):
        return []
    batch_of = np.cumsum(np.asarray(dfs, dtype=np.int64)) // POSTINGS_BATCH_ROWS
    cuts = np.flatnonzero(np.diff(batch_of)) + 1
    return [
        (int(ids[lo]), int(ids[hi - 1]))
        for lo, hi in zip(
            np.concatenate([[0], cuts]).tolist(),
            np.concatenate([cuts, [len(ids)]]).tolist(),
            strict=True,
        )
    ]


def _renumbered(docs: dict[str, object], first: int) -> tuple[np.ndarray, ...]:
    """A snapshot's documents (docid order, with a ``live`` flag) numbered from ``first``,
    live ones only: the map from its docids to the new ones (-1 for a dead document), and
    the live documents' chunk ids and lengths."""
    docid = np.asarray(docs["docid"], dtype=np.int64)
    live = np.asarray(docs["live"], dtype=bool)
    doc_of = np.full(int(docid.max()) + 1 if len(docid) else 0, -1, dtype=np.int64)
    doc_of[docid[live]] = first + np.arange(int(live.sum()))
    names = np.asarray(docs["name"], dtype=np.int64)[live]
    return doc_of, names, np.asarray(docs["len"], dtype=np.int64)[live]


def _decoded(rows: dict[str, object], doc_of: np.ndarray) -> tuple[np.ndarray, ...]:
    """(term, doc, tf) entries of postings rows, each doc renumbered through ``doc_of``;
    entries of documents it maps to -1 (no longer live) are left out."""
    termids = np.asarray(rows["termid"], dtype=np.int64)
    doc_blobs = list(rows["docids"])  # type: ignore[call-overload]
    tf_blobs = list(rows["tfs"])  # type: ignore[call-overload]
    if not doc_blobs:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty, empty
    counts = np.fromiter((len(b) // 4 for b in doc_blobs), dtype=np.int64, count=len(doc_blobs))
    doc = doc_of[np.frombuffer(b"".join(doc_blobs), dtype="<u4").astype(np.int64)]
    tf = np.concatenate(
        [
            np.frombuffer(t, dtype="<u1" if len(t) == n else "<u2")
            for t, n in zip(tf_blobs, counts.tolist(), strict=True)
        ]
    ).astype(np.int64)
    term = np.repeat(termids, counts)
    live = doc >= 0
    return term[live], doc[live], tf[live]


class KeywordIndex:
    """``path`` None keeps the index in memory (a library in memory, in tests)."""

    def __init__(self, db: Database, path: Path | None = None, *, stale: bool = False) -> None:
        """``stale``: the file was built from a database that is gone (see _check_format)."""
        self.db = db
        self.path = path
        self._stale = stale
        self._checkpoint_pending = False
        self._merge_thread: threading.Thread | None = None
        self._merge_cursor: duckdb.DuckDBPyConnection | None = None
        self._closing = False
        # What happened to the file at open ("" when it opened as it was), and the name
        # it was kept under when it had to be set aside.
        self.recovery = ""
        self.kept_at: Path | None = None
        self._snapshots: dict[str, _Snapshot] = {}
        self._snapshots_lock = threading.Lock()
        # kw_meta is written only through _set (this process owns the file), so the state
        # is read once per change, not once per query.
        self._state: KeywordState | None = None
        self._meta_changes = 0
        # The last query's scores: retrieval asks again with a larger limit when too few
        # documents came back, and only the liveness check depends on the limit.
        self._last_scored: (
            tuple[tuple[str, tuple[tuple[str, str], ...]], np.ndarray, np.ndarray] | None
        ) = None
        # Which chunk ids are live (their document indexed), by chunk id, as of a
        # database generation; and the generation the last unfiltered search saw.
        self._live_mask: tuple[int, np.ndarray] | None = None
        self._live_seen = -1
        # (snapshot stamp, termid) -> (docids, tfs), under _snapshots_lock.
        self._postings_cache: OrderedDict[tuple[str, int], _Postings] = OrderedDict()
        self._postings_cached_bytes = 0
        self._stem_memo: dict[tuple[str, str], str] = {}
        self._attach()
        if self.path is not None and self.recovery != "unavailable":
            warm_page_cache(self.path)

    def _attach(self) -> None:
        """Attach the keyword file and check its format; a file that fails anywhere in
        that (will not attach, is cut short, cannot be read or written) is derived data:
        it is set aside and rebuilt in the background, and never stops the library
        opening. Only what is not damage stops it: another process, a full disk, a
        file that may not be opened (named, left as it is)."""
        if self.path is None:
            self.db.attach(Path(":memory:"), ALIAS)
            self._ensure_meta()
            self._check_format()
            return
        if self.db.read_only:
            self._attach_read_only(self.path)
            return
        try:
            self.db.attach(self.path, ALIAS)
            self._ensure_meta()
            self._check_format()
        except (StoreError, duckdb.Error) as exc:
            error = classify_open_error(self.path, exc)
            self.db.detach(ALIAS)
            self._state = None
            if isinstance(
                error, (IndexBusyError, DiskFullError, ReadOnlyLibraryError, LibraryAccessError)
            ):
                if error is exc:
                    raise
                raise error from exc
            log.warning("keyword index %s unusable (%s); rebuilding it", self.path, exc)
            self.kept_at = set_aside(self.path, "broken")
            self.recovery = "rebuilding"
            self.db.attach(self.path, ALIAS)
            self._ensure_meta()
            self._check_format()
        self._remove_orphans(self.path.parent)

    def _attach_read_only(self, path: Path) -> None:
        """In a library opened read-only the keyword file is used as it is; one that is
        missing, damaged or of another format cannot be rebuilt there, so keyword search
        is off (``recovery`` "unavailable") and search finds passages by meaning."""
        try:
            if not path.exists():
                raise FileNotFoundError(str(path))
            self.db.attach(path, ALIAS, read_only=True)
            if self._get("kw_format") == FORMAT:
                return
            why = "an earlier format"
        except (IndexBusyError, LibraryAccessError):
            raise
        except (StoreError, duckdb.Error, OSError) as exc:
            why = str(exc)
        self.db.detach(ALIAS)
        log.warning("keyword index %s not usable in a read-only folder (%s)", path, why)
        self.recovery = "unavailable"
        self.db.attach(Path(":memory:"), ALIAS)
        self._ensure_meta()
        self._check_format()

    @staticmethod
    def _remove_orphans(folder: Path) -> None:
        """Postings scratch files (``_scratch``) left by a process killed while writing
        one: nobody else writes them (this process holds the library), so any found at
        open are orphans."""
        for orphan in folder.glob(".kw_*-postings-*.csv"):
            try:
                orphan.unlink()
            except OSError as exc:
                log.warning("left-over %s not removed: %s", orphan, exc)

    def _ensure_meta(self) -> None:
        self.db.cursor().execute(
            f"CREATE TABLE IF NOT EXISTS {ALIAS}.kw_meta(key VARCHAR PRIMARY KEY, value VARCHAR)"
        )

    def _check_format(self) -> None:
        """A keyword file from before the postings layout is emptied and rebuilt in the
        background (``recovery``); meanwhile search finds passages by meaning. So is one
        made from another database (``stale``): the library's database was rebuilt after
        damage, and its chunk ids start again, so the file's ids name other passages."""
        if self._get("kw_format") == FORMAT and not self._stale:
            return
        state = self.state()
        with self.db.write_lock, self._kw_cursor() as cur:
            for name in (*BASE_NAMES, *DELTA_NAMES, *FRESH_NAMES):
                self._drop(cur, name)
            self._set(
                cur,
                {
                    "kw_base": "",
                    "kw_delta": "",
                    "kw_fresh": "",
                    "kw_delta_watermark": "-1",
                    "kw_watermark": "0",
                    "kw_built_version": "",
                    "kw_format": FORMAT,
                },
            )
        if state.base or state.delta:
            self.recovery = self.recovery or "upgrading"

    def _get(self, key: str, default: str | None = None) -> str | None:
        row = (
            self.db.cursor()
            .execute(f"SELECT value FROM {ALIAS}.kw_meta WHERE key = ?", [key])
            .fetchone()
        )
        return row[0] if row else default

    def _set(self, cur: duckdb.DuckDBPyConnection, values: dict[str, str]) -> None:
        """One transaction in the keyword file (DuckDB lets a transaction write to one
        attached database only)."""
        cur.execute("BEGIN TRANSACTION")
        try:
            for key, value in values.items():
                cur.execute(
                    f"INSERT OR REPLACE INTO {ALIAS}.kw_meta(key, value) VALUES (?, ?)",
                    [key, value],
                )
            cur.execute("COMMIT")
        except BaseException:
            try:
                cur.execute("ROLLBACK")
            except duckdb.Error:
                pass
            raise
        finally:
            with self._snapshots_lock:
                self._meta_changes += 1
                self._state = None

    @contextmanager
    def _kw_cursor(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """A cursor whose default catalog is the keyword file: ``create_fts_index`` puts
        its schema beside the table it indexes, in the current catalog."""
        cur = self.db.new_cursor()
        try:
            cur.execute(f"USE {ALIAS}")
            yield cur
        finally:
            cur.close()

    def checkpoint(self) -> bool:
        try:
            with self.db.write_lock:
                self.db.cursor().execute(f"CHECKPOINT {ALIAS}")
        except duckdb.Error:
            return False
        return True

    def status(self) -> str:
        """What a person is told about keyword search: ready, rebuilding or updating.
        ``recovery`` stays set until a rebuilt base is switched in."""
        if self.recovery == "unavailable":
            return "unavailable"  # a read-only library whose keyword file is unusable
        if self.recovery:
            return "rebuilding"
        return "ready" if self.is_current() else "updating"

    # --- state ------------------------------------------------------------------

    def state(self) -> KeywordState:
        """Read in one query, so a concurrent switch is seen whole or not at all; kept
        until the next change unless a change landed while it was being read."""
        cached = self._state
        if cached is not None:
            return cached
        changes = self._meta_changes
        state = self._read_state()
        with self._snapshots_lock:
            if self._meta_changes == changes:
                self._state = state
        return state

    def _read_state(self) -> KeywordState:
        rows = dict(
            self.db.cursor()
            .execute(
                f"SELECT key, value FROM {ALIAS}.kw_meta WHERE key IN "
                "('kw_base', 'kw_delta', 'kw_watermark', 'kw_base_stamp', 'kw_delta_stamp', "
                "'kw_fresh', 'kw_fresh_stamp', 'kw_delta_watermark')"
            )
            .fetchall()
        )
        return KeywordState(
            base=rows.get("kw_base") or None,
            delta=rows.get("kw_delta") or None,
            watermark=int(rows.get("kw_watermark") or 0),
            base_stamp=rows.get("kw_base_stamp") or "",
            delta_stamp=rows.get("kw_delta_stamp") or "",
            fresh=rows.get("kw_fresh") or None,
            fresh_stamp=rows.get("kw_fresh_stamp") or "",
            delta_watermark=int(rows.get("kw_delta_watermark") or -1),
        )

    def is_current(self) -> bool:
        """True when the delta was built after the last chunk change."""
        return self._get("kw_built_version") == self.db.get_meta("content_version", "0")

    def delta_size(self) -> int:
        state = self.state()
        row = (
            self.db.cursor()
            .execute("SELECT count(*) FROM chunks WHERE id > ?", [state.watermark])
            .fetchone()
        )
        return int(row[0]) if row else 0

    # --- maintenance ------------------------------------------------------------

    @property
    def merging(self) -> bool:
        thread = self._merge_thread
        return thread is not None and thread.is_alive()

    def wait_for_merge(self) -> None:
        """Block until a background base rebuild has finished (or failed)."""
        thread = self._merge_thread
        if thread is not None and thread is not threading.current_thread():
            thread.join()

    def close(self) -> None:
        """Stop a background rebuild (its half-built table is dropped) before the
        database closes."""
        self._closing = True
        cursor = self._merge_cursor
        if cursor is not None and self.merging:
            try:
                cursor.interrupt()
            except duckdb.Error:
                pass
        self.wait_for_merge()
        self.checkpoint()

    def refresh(self, *, force_merge: bool = False, background: bool = False) -> str:
        """Bring keyword search up to date with ``chunks``; returns what it did.

        With ``background``, a due base rebuild starts on its own thread and this call
        only refreshes the delta, so new chunks are searchable at once and the caller
        (the indexer, between batches) is not held up for seconds."""
        if not background:
            # A caller that wants the index settled waits for a rebuild in flight (outside
            # the write lock, which the rebuild takes to switch).
            self.wait_for_merge()
        with self.db.write_lock:
            if self._checkpoint_pending:
                self._checkpoint_pending = not self.checkpoint()
            state = self.state()
            cur = self.db.cursor()
            total = int(scalar(cur, "SELECT count(*) FROM chunks"))
            delta = self.delta_size()
            due = (
                force_merge
                or state.base is None
                or delta > max(MERGE_MIN_CHUNKS, MERGE_FRACTION * total)
            )
            # A keyword file rebuilt after damage starts empty: the whole library goes
            # into the background rebuild, and the delta covers what is newer.
            if due and background and (state.base is not None or self.recovery):
                if not self.merging and not self._closing:
                    self._start_merge(state)
                if not self.is_current():
                    self._refresh_delta(state)
                return "merging"
            if due:
                self._rebuild_base(state)
                return "merged"
            if not self.is_current():
                self._refresh_delta(state)
                return "delta"
            return "current"

    def _start_merge(self, state: KeywordState) -> None:
        """Called under the write lock, so no write is in flight: every chunk id up to
        the watermark is committed and the new base sees them all."""
        watermark = self._newest_chunk()
        name = BASE_NAMES[1] if state.base == BASE_NAMES[0] else BASE_NAMES[0]
        self._merge_thread = threading.Thread(
            target=self._merge,
            args=(name, watermark, state.base, state.watermark),
            daemon=True,
            name="lectern-kw-merge",
        )
        self._merge_thread.start()

    def _merge(self, name: str, watermark: int, old: str | None, old_watermark: int) -> None:
        try:
            with self._kw_cursor() as cur:
                self._merge_cursor = cur
                # The long part, without the write lock: a new table nobody reads yet.
                # Only this thread replaces or drops the base it carries over meanwhile.
                self._build_base(cur, name, watermark, old, old_watermark)
                with self.db.write_lock:
                    if self._closing:
                        self._drop(cur, name)
                        return
                    self._switch_base(cur, self.state(), name, watermark)
        except duckdb.Error as exc:
            if not self._closing:
                log.warning("keyword index rebuild failed (%s); the next refresh retries", exc)
            try:
                with self.db.write_lock, self._kw_cursor() as cur:
                    if self.state().base != name:
                        self._drop(cur, name)
            except duckdb.Error:
                pass
        finally:
            self._merge_cursor = None

    def _switch_base(
        self, cur: duckdb.DuckDBPyConnection, state: KeywordState, name: str, watermark: int
    ) -> None:
        """Make ``name`` (chunks up to ``watermark``) the base, with a delta of the rest.
        Called under the write lock."""
        version = self.db.get_meta("content_version", "0") or "0"
        delta = DELTA_NAMES[1] if state.delta == DELTA_NAMES[0] else DELTA_NAMES[0]
        newest = self._newest_chunk()
        self._build(cur, delta, "id > ?", [watermark])
        self._set(
            cur,
            {
                "kw_base": name if self._has_rows(cur, name) else "",
                "kw_delta": delta if self._has_rows(cur, delta) else "",
                "kw_fresh": "",
                "kw_watermark": str(watermark),
                "kw_delta_watermark": str(newest),
                "kw_built_version": version,
                "kw_base_stamp": _stamp(name),
                "kw_delta_stamp": _stamp(delta),
            },
        )
        for old in (state.base, state.delta, state.fresh):
            if old and old not in (name, delta):
                self._drop(cur, old)
        self.recovery = ""
        # A short log opens fast; losing it would only cost a rebuild.
        self._checkpoint_pending = not self.checkpoint()

    def _rebuild_base(self, state: KeywordState) -> None:
        with self._kw_cursor() as cur:
            version = self.db.get_meta("content_version", "0") or "0"
            name = BASE_NAMES[1] if state.base == BASE_NAMES[0] else BASE_NAMES[0]
            watermark = self._newest_chunk()
            self._build_base(cur, name, watermark, state.base, state.watermark)
            self._set(
                cur,
                {
                    "kw_base": name if self._has_rows(cur, name) else "",
                    "kw_delta": "",
                    "kw_fresh": "",
                    "kw_watermark": str(watermark),
                    "kw_delta_watermark": str(watermark),
                    "kw_built_version": version,
                    "kw_base_stamp": _stamp(name),
                    "kw_delta_stamp": "",
                },
            )
            for old in (state.base, state.delta, state.fresh):
                if old and old != name:
                    self._drop(cur, old)
        self.recovery = ""
        self._checkpoint_pending = not self.checkpoint()

    def _build_base(
        self,
        cur: duckdb.DuckDBPyConnection,
        name: str,
        watermark: int,
        old: str | None,
        old_watermark: int,
    ) -> None:
        """A base of every chunk up to ``watermark``: the old base carried over with the
        chunks newer than it, or, without one to trust, every chunk read again."""
        if self._carries(cur, old):
            assert old is not None
            self._build_merged(cur, name, old, "id > ? AND id <= ?", [old_watermark, watermark])
        else:
            self._build(cur, name, "id <= ?", [watermark])

    def _newest_chunk(self) -> int:
        """The highest chunk id written (called under the write lock: none is in flight)."""
        return int(scalar(self.db.cursor(), "SELECT coalesce(max(id), 0) FROM chunks"))

    def _refresh_delta(self, state: KeywordState) -> None:
        """Make every chunk newer than the base searchable: rebuild only the fresh
        snapshot, or fold it into the delta once it has grown as large (see
        FRESH_MIN_FOLD). Called under the write lock."""
        cur = self.db.cursor()
        if state.delta_watermark >= state.watermark:
            row = cur.execute(
                "SELECT count(*) FILTER (WHERE id > ?), count(*) FILTER (WHERE id <= ?) "
                "FROM chunks WHERE id > ?",
                [state.delta_watermark, state.delta_watermark, state.watermark],
            ).fetchone()
            fresh, older = (int(row[0]), int(row[1])) if row else (0, 0)
            if fresh < max(FRESH_MIN_FOLD, older):
                self._rebuild_fresh(state)
                return
        self._rebuild_delta(state)

    def _rebuild_fresh(self, state: KeywordState) -> None:
        with self._kw_cursor() as cur:
            version = self.db.get_meta("content_version", "0") or "0"
            name = FRESH_NAMES[1] if state.fresh == FRESH_NAMES[0] else FRESH_NAMES[0]
            if self._carries(cur, state.fresh):
                assert state.fresh is not None
                # Carried over, with the chunks newer than its newest (written since: no
                # write is in flight under the write lock, and chunk ids only grow).
                covered = scalar(cur, f"SELECT max(name) FROM fts_main_{state.fresh}.docs")
                self._build_merged(cur, name, state.fresh, "id > ?", [covered])
            else:
                self._build(cur, name, "id > ?", [state.delta_watermark])
            self._set(
                cur,
                {
                    "kw_fresh": name if self._has_rows(cur, name) else "",
                    "kw_built_version": version,
                    "kw_fresh_stamp": _stamp(name),
                },
            )
            if state.fresh and state.fresh != name:
                self._drop(cur, state.fresh)

    def _rebuild_delta(self, state: KeywordState) -> None:
        """The delta over every chunk newer than the base, the fresh snapshot emptied."""
        with self._kw_cursor() as cur:
            version = self.db.get_meta("content_version", "0") or "0"
            name = DELTA_NAMES[1] if state.delta == DELTA_NAMES[0] else DELTA_NAMES[0]
            newest = self._newest_chunk()
            if state.delta_watermark >= state.watermark and self._carries(cur, state.delta):
                assert state.delta is not None
                # The delta carried over, with what is newer (the fresh snapshot's chunks
                # and any written since).
                self._build_merged(cur, name, state.delta, "id > ?", [state.delta_watermark])
            else:
                self._build(cur, name, "id > ?", [state.watermark])
            self._set(
                cur,
                {
                    "kw_delta": name if self._has_rows(cur, name) else "",
                    "kw_fresh": "",
                    "kw_delta_watermark": str(newest),
                    "kw_built_version": version,
                    "kw_delta_stamp": _stamp(name),
                },
            )
            for old in (state.delta, state.fresh):
                if old and old != name:
                    self._drop(cur, old)

    def _build(
        self, cur: duckdb.DuckDBPyConnection, name: str, where: str, params: list[object]
    ) -> None:
        self._drop(cur, name)
        cur.execute(
            f"CREATE TABLE {name} AS "
            + snapshot_rows_sql(f'"{self.db.catalog}".main.chunks', where),
            params,
        )
        # The languages its passages were stemmed as: a query's words are looked up in
        # each of them too (a German question meets German-stemmed passages).
        cur.execute(
            f"CREATE TABLE {name}_languages AS SELECT DISTINCT lang FROM {name} WHERE lang <> ''"
        )
        if scalar(cur, f"SELECT count(*) FROM {name}"):
            cur.execute(fts_pragma(name))
            self._build_postings(cur, name)
            # Only the postings are read from here on; the token table and the copy of
            # the text are most of the file.
            cur.execute(f"DROP TABLE fts_main_{name}.terms")
        cur.execute(f"DROP TABLE {name}")

    def _build_postings(self, cur: duckdb.DuckDBPyConnection, name: str) -> None:
        """One row per term: its docids (uint32) and term frequencies (uint8, or uint16
        when a frequency passes 255), ascending by docid, in termid order."""
        schema = f"fts_main_{name}"
        self._create_postings(cur, name)
        # df sums to the (term, document) pairs, so cumulative df cuts termid ranges of
        # about POSTINGS_BATCH_ROWS postings each.
        df = cur.execute(f"SELECT termid, df FROM {schema}.dict ORDER BY termid").fetchnumpy()
        for lo, hi in _termid_batches(df["termid"], df["df"]):
            if self._closing:
                raise duckdb.InterruptException("the library is closing")
            rows = cur.execute(
                f"SELECT termid, docid, count(*) AS tf FROM {schema}.terms "
                f"WHERE termid BETWEEN {lo} AND {hi} GROUP BY termid, docid"
            ).fetchnumpy()
            term = np.asarray(rows["termid"], dtype=np.int64)
            doc = np.asarray(rows["docid"], dtype=np.int64)
            tf = np.asarray(rows["tf"], dtype=np.int64)
            order = np.lexsort((doc, term))
            self._write_postings(cur, name, term[order], doc[order], tf[order])

    @staticmethod
    def _create_postings(cur: duckdb.DuckDBPyConnection, name: str) -> None:
        cur.execute(
            f"CREATE TABLE {name}_postings(termid BIGINT PRIMARY KEY, docids BLOB, tfs BLOB)"
        )

    def _write_postings(
        self,
        cur: duckdb.DuckDBPyConnection,
        name: str,
        term: np.ndarray,
        doc: np.ndarray,
        tf: np.ndarray,
    ) -> tuple[np.ndarray, np.ndarray]:
        """Add a row per term to ``{name}_postings`` from (term, doc, tf) entries sorted by
        term, then doc; returns the terms and how many documents hold each."""
        if not len(term):
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
        starts = np.concatenate([[0], np.flatnonzero(np.diff(term)) + 1])
        ends = np.concatenate([starts[1:], [len(term)]])
        docs32 = doc.astype("<u4")
        blob_docs, blob_tfs = [], []
        for a, b in zip(starts.tolist(), ends.tolist(), strict=True):
            blob_docs.append(base64.b64encode(docs32[a:b].tobytes()).decode("ascii"))
            part = tf[a:b]
            packed = part.astype("<u1" if part.max() <= 255 else "<u2").tobytes()
            blob_tfs.append(base64.b64encode(packed).decode("ascii"))
        # Base64 text through a CSV file: DuckDB 1.5 takes Python bytes, lists and
        # object arrays at milliseconds a row (it tries to import pandas per value).
        lines = [
            f"{t},{d},{f}"
            for t, d, f in zip(term[starts].tolist(), blob_docs, blob_tfs, strict=True)
        ]
        scratch = self._scratch(name)
        try:
            scratch.write_text("\n".join(lines) + "\n", encoding="ascii")
            cur.execute(
                f"INSERT INTO {name}_postings SELECT termid, from_base64(d), from_base64(f) "
                "FROM read_csv(?, header = false, delim = ',', quote = '', escape = '', "
                "columns = {'termid': 'BIGINT', 'd': 'VARCHAR', 'f': 'VARCHAR'}, "
                "max_line_size = ?)",
                [str(scratch), max(len(line) for line in lines) + 1024],
            )
        finally:
            scratch.unlink(missing_ok=True)
        return term[starts], ends - starts

    def _carries(self, cur: duckdb.DuckDBPyConnection, old: str | None) -> bool:
        """Whether a rebuild may carry ``old``'s postings over (``_build_merged``) instead
        of reading its passages again: not while the file is being rebuilt after damage
        or an upgrade, when a snapshot's layout is the one thing not to trust."""
        return old is not None and not self.recovery and self._has_rows(cur, old)

    def _build_merged(
        self,
        cur: duckdb.DuckDBPyConnection,
        name: str,
        old: str,
        where: str,
        params: list[object],
    ) -> None:
        """Build snapshot ``name`` over snapshot ``old``'s chunks still live and the
        chunks matching ``where`` (each newer than any of ``old``'s), reading and
        tokenizing only the latter: ``old``'s postings are carried over, renumbered.

        Reading and tokenizing is most of a build: with a base merge reading the whole
        library again at every 10 % of growth, keeping keyword search current while a
        library grew to 30k chunks cost 2.77 ms of CPU a chunk, against 1.43 carried over
        (bench/keyword_refresh.py --growth; the model takes ~35). Chunks are never edited
        and their ids only grow, so the result is the snapshot a full build gives:
        the same documents, lengths, dictionary, document frequencies and postings."""
        added = name + MERGE_ADDED_SUFFIX
        self._drop(cur, name)
        self._build(cur, added, where, params)
        try:
            self._merge_snapshots(cur, name, old, added if self._has_rows(cur, added) else None)
        finally:
            self._drop(cur, added)

    def _merge_snapshots(
        self, cur: duckdb.DuckDBPyConnection, name: str, old: str, added: str | None
    ) -> None:
        old_schema, schema = f"fts_main_{old}", f"fts_main_{name}"
        chunks = f'"{self.db.catalog}".main.chunks'
        # Documents are numbered old's live ones first, then added's, each in its own
        # order: every term's documents stay ascending once renumbered.
        doc_of_old, old_names, old_lengths = _renumbered(
            cur.execute(
                f"SELECT docid, name, len, name IN (SELECT id FROM {chunks}) AS live "
                f"FROM {old_schema}.docs ORDER BY docid"
            ).fetchnumpy(),
            0,
        )
        names, lengths = [old_names], [old_lengths]
        top_termid = int(scalar(cur, f"SELECT coalesce(max(termid), -1) FROM {old_schema}.dict"))
        doc_of_added = np.zeros(0, dtype=np.int64)
        new_terms = 0
        if added is not None:
            added_schema = f"fts_main_{added}"
            doc_of_added, added_names, added_lengths = _renumbered(
                cur.execute(
                    f"SELECT docid, name, len, true AS live FROM {added_schema}.docs ORDER BY docid"
                ).fetchnumpy(),
                len(old_names),
            )
            names.append(added_names)
            lengths.append(added_lengths)
            # A term old holds keeps its id there; a new one is numbered after old's.
            terms = cur.execute(
                f"SELECT a.termid, coalesce(o.termid, -1) AS kept FROM {added_schema}.dict a "
                f"LEFT JOIN {old_schema}.dict o USING (term) ORDER BY a.termid"
            ).fetchnumpy()
            mapped = np.asarray(terms["kept"], dtype=np.int64).copy()
            unseen = mapped < 0
            new_terms = int(unseen.sum())
            mapped[unseen] = top_termid + 1 + np.arange(new_terms)
            term_map = {  # noqa: F841 - read by DuckDB's replacement scan below
                "old": np.asarray(terms["termid"], dtype=np.int64),
                "new": mapped,
            }
            cur.execute(f"CREATE OR REPLACE TABLE {name}_termmap AS SELECT old, new FROM term_map")
        try:
            cur.execute(f"CREATE SCHEMA {schema}")
            self._create_postings(cur, name)
            df = cur.execute(
                f"SELECT termid, df FROM {old_schema}.dict ORDER BY termid"
            ).fetchnumpy()
            batches = _termid_batches(df["termid"], df["df"])
            if new_terms:  # the last batch takes the terms only added holds
                lo, _ = batches[-1] if batches else (0, 0)
                batches[-1:] = [(lo, top_termid + new_terms)]
            held_terms, held_dfs = [], []
            for lo, hi in batches:
                if self._closing:
                    raise duckdb.InterruptException("the library is closing")
                parts = [
                    _decoded(
                        cur.execute(
                            f"SELECT termid, docids, tfs FROM {old}_postings "
                            f"WHERE termid BETWEEN {lo} AND {hi}"
                        ).fetchnumpy(),
                        doc_of_old,
                    )
                ]
                if added is not None:
                    parts.append(
                        _decoded(
                            cur.execute(
                                f"SELECT m.new AS termid, p.docids, p.tfs FROM {added}_postings p "
                                f"JOIN {name}_termmap m ON m.old = p.termid "
                                f"WHERE m.new BETWEEN {lo} AND {hi}"
                            ).fetchnumpy(),
                            doc_of_added,
                        )
                    )
                term, doc, tf = (np.concatenate([part[i] for part in parts]) for i in range(3))
                # Stable: a term's documents from old come before added's, each ascending.
                order = np.argsort(term, kind="stable")
                held, counts = self._write_postings(cur, name, term[order], doc[order], tf[order])
                held_terms.append(held)
                held_dfs.append(counts)
            merged_dict = {  # noqa: F841 - read by DuckDB's replacement scan below
                "termid": np.concatenate(held_terms) if held_terms else np.zeros(0, np.int64),
                "df": np.concatenate(held_dfs) if held_dfs else np.zeros(0, np.int64),
            }
            spelled = f"SELECT termid, term FROM {old_schema}.dict"
            if added is not None:
                spelled += (
                    f" UNION ALL SELECT m.new, a.term FROM {name}_termmap m "
                    f"JOIN fts_main_{added}.dict a ON a.termid = m.old WHERE m.new > {top_termid}"
                )
            cur.execute(
                f"CREATE TABLE {schema}.dict AS SELECT d.termid, t.term, d.df "
                f"FROM merged_dict d JOIN ({spelled}) t USING (termid)"
            )
            all_names = np.concatenate(names)
            merged_docs = {  # noqa: F841 - read by DuckDB's replacement scan below
                "docid": np.arange(len(all_names), dtype=np.int64),
                "name": all_names,
                "len": np.concatenate(lengths),
            }
            cur.execute(f"CREATE TABLE {schema}.docs AS SELECT docid, name, len FROM merged_docs")
            cur.execute(
                f"CREATE TABLE {schema}.stats AS SELECT count(docid) AS num_docs, "
                f"sum(len) / count(len) AS avgdl FROM {schema}.docs"
            )
            languages = f"SELECT lang FROM {old}_languages"
            if added is not None:
                languages += f" UNION SELECT lang FROM {added}_languages"
            cur.execute(f"CREATE TABLE {name}_languages AS {languages}")
            if not len(all_names):  # nothing live: an empty snapshot, as a build leaves it
                self._drop(cur, name)
                cur.execute(f"CREATE TABLE {name}_languages(lang VARCHAR)")
        except BaseException:
            self._drop(cur, name)
            raise
        finally:
            cur.execute(f"DROP TABLE IF EXISTS {name}_termmap")

    def _scratch(self, name: str) -> Path:
        folder = self.path.parent if self.path is not None else Path(tempfile.gettempdir())
        return folder / f".{name}-postings-{uuid.uuid4().hex[:8]}.csv"

    @staticmethod
    def _has_rows(cur: duckdb.DuckDBPyConnection, name: str) -> bool:
        """Whether ``name`` was built with at least one chunk (an empty one has no
        fts schema and no postings)."""
        return bool(
            scalar(
                cur,
                "SELECT count(*) FROM information_schema.tables "
                "WHERE table_catalog = ? AND table_schema = 'main' AND table_name = ?",
                [ALIAS, f"{name}_postings"],
            )
        )

    @classmethod
    def _drop(cls, cur: duckdb.DuckDBPyConnection, name: str) -> None:
        """Drop snapshot ``name`` and whatever a build or merge of it killed midway left:
        its text copy, postings, languages, term map and the snapshot of newer chunks
        a merge builds beside it (``_build_merged``)."""
        if not name.endswith(MERGE_ADDED_SUFFIX):
            cls._drop(cur, name + MERGE_ADDED_SUFFIX)
        exists = scalar(
            cur,
            "SELECT count(*) FROM information_schema.schemata "
            "WHERE catalog_name = ? AND schema_name = ?",
            [ALIAS, f"fts_main_{name}"],
        )
        if exists:
            cur.execute(f"PRAGMA drop_fts_index('{name}')")
        cur.execute(f"DROP TABLE IF EXISTS {name}")
        cur.execute(f"DROP TABLE IF EXISTS {name}_postings")
        cur.execute(f"DROP TABLE IF EXISTS {name}_languages")
        cur.execute(f"DROP TABLE IF EXISTS {name}_termmap")

    # --- query ------------------------------------------------------------------

    def search(
        self,
        query: str,
        limit: int,
        *,
        filters: SearchFilters | None = None,
        _retries: int = 2,
    ) -> list[tuple[int, float]]:
        """Chunk ids and BM25 scores, best first (ties by chunk id), inside ``filters``."""
        if limit <= 0 or not query.strip():
            return []
        parts = self.state().parts()
        if not parts:
            return []
        try:
            return self._search(query, limit, filters or SearchFilters(), parts)
        except duckdb.CatalogException:
            # A concurrent merge swapped the snapshot between reading the state and the
            # query; the next attempt sees the new one.
            if _retries <= 0:
                raise
            return self.search(query, limit, filters=filters, _retries=_retries - 1)

    def _snapshot(self, cur: duckdb.DuckDBPyConnection, name: str, stamp: str) -> _Snapshot:
        key = f"{name}@{stamp}"
        with self._snapshots_lock:
            found = self._snapshots.get(key)
        if found is not None:
            return found
        schema = _schema(name)
        docs = cur.execute(f"SELECT docid, name, len FROM {schema}.docs").fetchnumpy()
        docid = np.asarray(docs["docid"], dtype=np.int64)
        size = int(docid.max()) + 1 if len(docid) else 0
        chunk_ids = np.zeros(size, dtype=np.int64)
        lengths = np.zeros(size, dtype=np.float64)
        chunk_ids[docid] = np.asarray(docs["name"], dtype=np.int64)
        lengths[docid] = np.asarray(docs["len"], dtype=np.float64)
        stats = cur.execute(f"SELECT num_docs, avgdl FROM {schema}.stats").fetchone()
        snapshot = _Snapshot(
            chunk_ids, lengths, int(stats[0]) if stats else 0, float(stats[1]) if stats else 0.0
        )
        terms = cur.execute(f"SELECT term, termid, df FROM {schema}.dict").fetchnumpy()
        hashes = np.fromiter((hash(t) for t in terms["term"]), dtype=np.int64)
        order = np.argsort(hashes, kind="stable")
        snapshot.term_hashes = hashes[order]
        snapshot.term_ids = np.asarray(terms["termid"], dtype=np.int64)[order]
        snapshot.term_dfs = np.asarray(terms["df"], dtype=np.int64)[order]
        del terms
        snapshot.languages = tuple(
            sorted(
                str(r[0])
                for r in cur.execute(f"SELECT lang FROM {ALIAS}.{name}_languages").fetchall()
            )
        )
        with self._snapshots_lock:
            # Only the snapshots in use now stay cached (a base, a delta and a fresh one,
            # briefly the ones a switch replaced).
            if len(self._snapshots) >= 6:
                self._snapshots.clear()
            self._snapshots[key] = snapshot
        return snapshot

    def _search(
        self, query: str, limit: int, filters: SearchFilters, parts: list[tuple[str, str]]
    ) -> list[tuple[int, float]]:
        cur = self.db.cursor()
        key = (query, tuple(parts))
        last = self._last_scored
        if last is not None and last[0] == key:
            return self._best_live(cur, last[1], last[2], limit, filters)
        ids, scores = self._score(cur, query, parts)
        self._last_scored = (key, ids, scores)
        return self._best_live(cur, ids, scores, limit, filters)

    def _score(
        self, cur: duckdb.DuckDBPyConnection, query: str, parts: list[tuple[str, str]]
    ) -> tuple[np.ndarray, np.ndarray]:
        """Every chunk holding a query term, with its BM25 score (in no order)."""
        none = (np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float64))
        snapshots = [self._snapshot(cur, name, stamp) for name, stamp in parts]
        # Two small queries, not one join: DuckDB plans the join of the tokenized query
        # with the dictionaries poorly (10 ms against 3), and a literal list prunes.
        languages = sorted({lang for snapshot in snapshots for lang in snapshot.languages})
        stems = self._stems(cur, query, languages)
        if not stems:
            return none
        terms = self._lookup_terms(stems, snapshots)
        if not terms:
            return none
        # BM25 over the combined statistics of base and delta, so a chunk scores the same
        # wherever it sits.
        n = sum(s.num_docs for s in snapshots)
        avgdl = sum(s.avgdl * s.num_docs for s in snapshots) / n
        df: dict[str, int] = {}
        for _, term, _, term_df in terms:
            df[term] = df.get(term, 0) + int(term_df)
        idf = {t: math.log((n - d + 0.5) / (d + 0.5) + 1) for t, d in df.items()}
        wanted: list[dict[int, str]] = [{} for _ in parts]
        for part, term, termid, _ in terms:
            wanted[part][int(termid)] = term
        postings = self._fetch_postings(cur, parts, wanted)
        ids: list[np.ndarray] = []
        scores: list[np.ndarray] = []
        for i, snapshot in enumerate(snapshots):
            rows = postings[i]
            if not rows:
                continue
            norm = snapshot.length_norm(avgdl)
            acc = np.zeros(len(snapshot.chunk_ids), dtype=np.float64)
            # Terms in one fixed order for every chunk: equal inputs sum to equal scores,
            # so ties are broken by chunk id alone.
            for termid in sorted(rows, key=lambda t: wanted[i][t]):
                entry = rows[termid]
                acc[entry.doc] += entry.contribution(avgdl, idf[wanted[i][termid]], norm)
            hit = np.flatnonzero(acc)
            ids.append(snapshot.chunk_ids[hit])
            scores.append(acc[hit])
        if not ids:
            return none
        return np.concatenate(ids), np.concatenate(scores)

    def _fetch_postings(
        self,
        cur: duckdb.DuckDBPyConnection,
        parts: list[tuple[str, str]],
        wanted: list[dict[int, str]],
    ) -> list[dict[int, _Postings]]:
        """Per part, termid -> its postings, from the cache or DuckDB."""
        out: list[dict[int, _Postings]] = [{} for _ in parts]
        missing: list[list[int]] = [[] for _ in parts]
        with self._snapshots_lock:
            for i, (_, stamp) in enumerate(parts):
                for termid in wanted[i]:
                    hit = self._postings_cache.get((stamp, termid))
                    if hit is None:
                        missing[i].append(termid)
                    else:
                        self._postings_cache.move_to_end((stamp, termid))
                        out[i][termid] = hit
        if not any(missing):
            return out
        rows = cur.execute(
            " UNION ALL ".join(
                f"SELECT {i} AS part, termid, docids, tfs FROM {_postings(name)} "
                f"WHERE termid IN ({id_list(sorted(missing[i]))})"
                for i, (name, _) in enumerate(parts)
                if missing[i]
            )
        ).fetchall()
        fetched: list[tuple[tuple[str, int], _Postings]] = []
        for part, termid, docids, tfs in rows:
            doc = np.frombuffer(docids, dtype="<u4")
            width = len(tfs) // len(doc)
            entry = _Postings(doc, np.frombuffer(tfs, dtype="<u1" if width == 1 else "<u2"))
            out[part][int(termid)] = entry
            fetched.append(((parts[part][1], int(termid)), entry))
        with self._snapshots_lock:
            for key, entry in fetched:
                size = entry.nbytes
                if size > POSTINGS_CACHE_BYTES // 4 or key in self._postings_cache:
                    continue
                self._postings_cache[key] = entry
                self._postings_cached_bytes += size
            while self._postings_cached_bytes > POSTINGS_CACHE_BYTES:
                _, old = self._postings_cache.popitem(last=False)
                self._postings_cached_bytes -= old.nbytes
        return out

    def _stems(
        self, cur: duckdb.DuckDBPyConnection, query: str, languages: Sequence[str]
    ) -> list[str]:
        """The query's distinct terms as the index holds a document's words: each word's
        own, and its stem in each language the index's passages were stemmed as (the
        question's language is not guessed: a short one has too few words)."""
        words = ascii_tokens(query)
        if words is None:
            split = f"SELECT unnest(string_split_regex(lower(?), '{WORD_SPLIT_PATTERN}'))"
            words = [str(r[0]) for r in cur.execute(split, [query]).fetchall() if r[0]]
        pairs = [(w, lang) for w in dict.fromkeys(words) for lang in ("", *languages)]
        memo = self._stem_memo
        missing = [pair for pair in pairs if pair not in memo]
        if missing:
            # A literal list: a list parameter costs ~3 ms to bind.
            values = ", ".join("('" + w.replace("'", "''") + f"', '{lang}')" for w, lang in missing)
            rows = cur.execute(
                f"SELECT w, l, CASE WHEN l = '' THEN {term_sql('w')} ELSE {term_sql('w', 'l')} "
                f"END FROM (VALUES {values}) AS v(w, l)"
            ).fetchall()
            if len(memo) + len(rows) > STEM_MEMO_MAX:
                memo = {pair: memo[pair] for pair in pairs if pair in memo}
            memo = {**memo, **{(str(w), str(lang)): str(t or "") for w, lang, t in rows}}
            self._stem_memo = memo
        return [t for t in dict.fromkeys(memo[pair] for pair in pairs) if t]

    @staticmethod
    def _lookup_terms(
        stems: list[str], snapshots: list[_Snapshot]
    ) -> list[tuple[int, str, int, int]]:
        """(part, term, termid, df) of every stem each snapshot's dictionary holds."""
        out: list[tuple[int, str, int, int]] = []
        for i, snapshot in enumerate(snapshots):
            for term in stems:
                entry = snapshot.lookup(term)
                if entry is not None:
                    out.append((i, term, entry[0], entry[1]))
        return out

    def _live_ids(self, cur: duckdb.DuckDBPyConnection) -> np.ndarray | None:
        """Live chunk ids as a boolean array by chunk id, when the database has not
        changed since it was built; None while it keeps changing (the indexer commits
        file after file), when each search checks its candidates by id instead. It is
        built on the second unfiltered search at one generation, so a quiet library pays
        the listing once (~20 ms at 300k chunks) and a busy one never."""
        generation = self.db.generation
        cached = self._live_mask
        if cached is not None and cached[0] == generation:
            return cached[1]
        if self._live_seen != generation:
            self._live_seen = generation
            return None
        allowed = self._allowed(cur, "", [])
        mask = np.zeros(int(allowed.max()) + 1 if len(allowed) else 0, dtype=bool)
        mask[allowed] = True
        self._live_mask = (generation, mask)
        return mask

    def _best_live(
        self,
        cur: duckdb.DuckDBPyConnection,
        ids: np.ndarray,
        scores: np.ndarray,
        limit: int,
        filters: SearchFilters,
    ) -> list[tuple[int, float]]:
        """The best ``limit`` of the scored chunks whose document is indexed and inside
        ``filters``: candidates are checked best first, in growing rounds, so the result
        is the top-k of the live, filtered chunks, not of all of them."""
        filter_sql, filter_params = filter_clause(filters)
        mask = None if filter_sql else self._live_ids(cur)
        if mask is not None:
            keep = ids < len(mask)
            keep[keep] = mask[ids[keep]]
            kept_ids, kept_scores = ids[keep], scores[keep]
            ranked = _ranked(kept_ids, kept_scores, limit)[:limit]
            return [(int(kept_ids[j]), float(kept_scores[j])) for j in ranked]
        found: list[tuple[int, float]] = []
        checked = 0
        want = limit + FIRST_CHECK_EXTRA
        while checked < len(ids):
            if want > MAX_CHECKED_BY_ID:
                # Most candidates are dead or filtered out: list what is allowed instead.
                allowed = self._allowed(cur, filter_sql, filter_params)
                keep = np.isin(ids, allowed)
                kept_ids, kept_scores = ids[keep], scores[keep]
                ranked = _ranked(kept_ids, kept_scores, limit)[:limit]
                return [(int(kept_ids[j]), float(kept_scores[j])) for j in ranked]
            order = _ranked(ids, scores, want)
            batch = order[checked:]
            live = self._live(cur, ids[batch], filter_sql, filter_params)
            found.extend((int(ids[j]), float(scores[j])) for j in batch if int(ids[j]) in live)
            if len(found) >= limit:
                break
            checked = len(order)
            want *= 8
        return found[:limit]

    @staticmethod
    def _live(
        cur: duckdb.DuckDBPyConnection,
        chunk_ids: Sequence[int],
        filter_sql: str,
        filter_params: list[object],
    ) -> set[int]:
        rows = cur.execute(
            f"""SELECT c.id FROM chunks c JOIN documents d ON d.id = c.document_id
                WHERE c.id IN ({id_list(chunk_ids)}) AND d.state = 'indexed'
                {("AND " + filter_sql) if filter_sql else ""}""",
            filter_params,
        ).fetchall()
        return {int(r[0]) for r in rows}

    @staticmethod
    def _allowed(
        cur: duckdb.DuckDBPyConnection, filter_sql: str, filter_params: list[object]
    ) -> np.ndarray:
        rows = cur.execute(
            f"""SELECT c.id FROM chunks c JOIN documents d ON d.id = c.document_id
                WHERE d.state = 'indexed' {("AND " + filter_sql) if filter_sql else ""}""",
            filter_params,
        ).fetchnumpy()
        return np.asarray(rows["id"], dtype=np.int64)


def ascii_tokens(text: str) -> list[str] | None:
    """fts's ``tokenize`` of ASCII ``text`` (None for other text)."""
    if not text.isascii():
        return None
    return [w for w in ASCII_IGNORE.sub(" ", text.lower()).split(" ") if w]


def _ranked(ids: np.ndarray, scores: np.ndarray, at_least: int) -> np.ndarray:
    """Positions of the best ``at_least`` (score descending, then chunk id), with every
    chunk tied with the last of them, so a cut never splits a tie arbitrarily."""
    if len(scores) > at_least:
        cut = np.partition(scores, len(scores) - at_least)[len(scores) - at_least]
        pick = np.flatnonzero(scores >= cut)
    else:
        pick = np.arange(len(scores))
    return pick[np.lexsort((ids[pick], -scores[pick]))]


def _stamp(name: str) -> str:
    return f"{name}-{uuid.uuid4().hex[:12]}"
