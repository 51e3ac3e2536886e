"""Crash torture harness shared by ``tests/indexing/test_crash_torture.py`` and
``bench/crash_torture.py``: a corpus of real files, ``lectern index`` run as a child
process and ``kill -9``-ed at random moments after it has started writing, the library
reopened after every kill, and the end state compared with a clean rebuild.

Every file written holds one made-up *marker* word of its own (letters only, so no
tokeniser or stemmer splits it), which keyword search must find in exactly that file.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SAMPLE_DOCS = REPO / "resources" / "sample-docs"
# Small, text-bearing real PDFs from the robustness set (plus one broken one, which must
# end as failed, not stuck).
PDF_NAMES = ("acroform.pdf", "excel-table-export.pdf", "google-docs-export.pdf", "multilang.pdf")
BROKEN_PDF = "empty-zero-bytes.pdf"
MAX_PASSAGE_CHARS = 450
try:
    from core.indexing.indexer import PUBLISH_EVERY_S  # long runs publish keyword search as they go
except ImportError:
    PUBLISH_EVERY_S = 30.0  # about one chunk per file: the run stays within minutes


def marker(n: int) -> str:
    """A word no real text holds: ``zqv``, ``n`` in base 26 and ``q``; letters only, and
    ending in ``q`` so the Porter stemmer leaves it whole (no two markers share a stem)."""
    letters = ""
    n += 26 * 26  # at least three letters after the prefix
    while n:
        n, r = divmod(n, 26)
        letters = chr(ord("a") + r) + letters
    return "zqv" + letters + "q"


def load_passages(shared_data: Path, limit: int) -> list[tuple[str, str]]:
    """(title, text) pairs: SQuAD paragraphs first, then SciFact abstracts."""
    out: list[tuple[str, str]] = []
    for name in ("squad-small/beir/corpus.jsonl", "scifact/corpus.jsonl"):
        with (shared_data / name).open(encoding="utf-8") as fh:
            for line in fh:
                row = json.loads(line)
                text = " ".join(str(row.get("text", "")).split())
                if len(text) < 200:
                    continue
                out.append((str(row.get("title") or "Untitled"), text[:MAX_PASSAGE_CHARS]))
                if len(out) >= limit:
                    return out
    return out


@dataclass
class Corpus:
    """The folder being indexed and what each text file on disk should contain."""

    folder: Path
    passages: list[tuple[str, str]]
    rng: random.Random
    target_files: int  # text files the folder grows to
    markers: dict[str, str] = field(default_factory=dict)  # path -> its marker word
    gone: set[str] = field(default_factory=set)  # markers of deleted or rewritten text
    _next: int = 0
    _next_passage: int = 0
    _new_files: int = 0

    def _passage(self) -> tuple[str, str]:
        passage = self.passages[self._next_passage % len(self.passages)]
        self._next_passage += 1
        return passage

    def write_file(self, name: str | None = None) -> Path:
        n = self._next
        self._next += 1
        word = marker(n)
        title, text = self._passage()
        suffix = ".md" if n % 2 == 0 else ".txt"
        if name is None:
            self._new_files += 1
        path = self.folder / (name or f"sub{n % 5}/doc{n:04d}{suffix}")
        path.parent.mkdir(parents=True, exist_ok=True)
        body = f"{text} Reference {word}."
        content = f"# {title}\n\n{body}\n" if path.suffix == ".md" else f"{title}\n\n{body}\n"
        path.write_text(content, encoding="utf-8")
        self.markers[str(path)] = word
        return path

    @property
    def to_add(self) -> int:
        """Text files still to be written to reach ``target_files``."""
        return max(0, self.target_files - self._new_files)

    def mutate(self, edits: int, adds: int, deletes: int, renames: int) -> None:
        """Change the folder between runs so every run has writing to do."""
        for _ in range(min(adds, self.to_add)):
            self.write_file()
        paths = sorted(self.markers)
        for path in self.rng.sample(paths, min(deletes, len(paths))):
            Path(path).unlink()
            self.gone.add(self.markers.pop(path))
        paths = sorted(self.markers)
        for path in self.rng.sample(paths, min(edits, len(paths))):
            self.gone.add(self.markers.pop(path))
            self.write_file(str(Path(path).relative_to(self.folder)))  # new text, new marker
        paths = sorted(self.markers)
        for path in self.rng.sample(paths, min(renames, len(paths))):
            target = Path(path).with_name("moved-" + Path(path).name)
            if target.exists():
                continue
            Path(path).rename(target)
            self.markers[str(target)] = self.markers.pop(path)


def build_corpus(
    folder: Path, shared_data: Path, files: int, rng: random.Random, initial: int | None = None
) -> Corpus:
    """Small Markdown and text files of real passages (``initial`` of the ``files`` now,
    the rest added by :meth:`Corpus.mutate` over the runs), some real PDFs and the sample
    documents."""
    folder.mkdir(parents=True)
    corpus = Corpus(folder, load_passages(shared_data, files + 200), rng, files)
    for _ in range(files if initial is None else initial):
        corpus.write_file()
    pdfs = folder / "pdfs"
    pdfs.mkdir()
    for name in (*PDF_NAMES, BROKEN_PDF):
        shutil.copyfile(shared_data / "pdfs" / name, pdfs / name)
    shutil.copytree(SAMPLE_DOCS, folder / "samples")
    return corpus


# --- child processes -------------------------------------------------------------------


def lectern_env(home: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        LECTERN_HOME=str(home),
        LECTERN_PROGRESS="0",
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        TOKENIZERS_PARALLELISM="false",
        PYTHONPATH=str(REPO) + os.pathsep + env.get("PYTHONPATH", ""),
    )
    env.pop("OLLAMA_HOST", None)
    return env


def lectern(home: Path, *args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "core.cli.main", *args],
        cwd=REPO,
        env=lectern_env(home),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def _signature(home: Path) -> frozenset[tuple[str, int, int]]:
    """(name, size, mtime) of every file in the data folder: it changes with each write
    to a database, its write-ahead log, the vector file or the commit counter."""
    out: set[tuple[str, int, int]] = set()
    try:
        entries = list(os.scandir(home))
    except FileNotFoundError:
        return frozenset()
    for entry in entries:
        try:
            st = entry.stat()
        except FileNotFoundError:
            continue
        out.add((entry.name, st.st_size, st.st_mtime_ns))
    return frozenset(out)


@dataclass
class KillPlan:
    """When to kill: once ``changes`` changes to the data folder's files were seen (each
    write to a database, its log, the vector file or the commit counter is one; the first
    few are the run's bookkeeping, later ones chunk batches, keyword rebuilds, vector
    saves and checkpoints), then ``delay_s`` more."""

    changes: int
    delay_s: float

    @staticmethod
    def draw(rng: random.Random, typical_changes: int, typical_s: float) -> KillPlan:
        """``typical_changes`` and ``typical_s``: what a run that was not killed saw."""
        kind = rng.random()
        late = rng.uniform(0.0, 0.02)  # on the heels of a write: mid-DDL, mid-checkpoint
        if kind < 0.35:  # a run's last writes: keyword rebuild, vector save, checkpoint
            return KillPlan(
                rng.randint(max(1, typical_changes - 15), max(2, typical_changes)), late
            )
        if kind < 0.6:  # anywhere: chunk batches, removals, bookkeeping
            return KillPlan(rng.randint(1, max(2, typical_changes)), late)
        if kind < 0.9:
            return KillPlan(1, rng.uniform(0.0, max(1.0, typical_s)))
        return KillPlan(rng.randint(1, 4), rng.uniform(0.0, 0.3))  # during start-up


@dataclass
class Attempt:
    plan: KillPlan
    killed: bool  # false when the run finished first
    changes_seen: int
    run_s: float
    opened: bool
    recovery_s: float
    error: str = ""
    repairs: list[str] = field(default_factory=list)


def index_and_kill(
    home: Path, folder: Path, plan: KillPlan, poll_s: float = 0.003, start_timeout_s: float = 120
) -> tuple[bool, int]:
    """Start ``lectern index folder`` and SIGKILL it per ``plan``. Returns (killed, log
    size changes seen)."""
    before = _signature(home)
    proc = subprocess.Popen(
        [sys.executable, "-m", "core.cli.main", "index", str(folder), "--json"],
        cwd=REPO,
        env=lectern_env(home),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        changes = 0
        first = 0.0
        last = before
        deadline = time.monotonic() + start_timeout_s
        while changes < plan.changes and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(poll_s)
            now = _signature(home)
            if now != last:
                changes += 1
                last = now
                first = first or time.monotonic()
        first = first or time.monotonic()
        end = time.monotonic() + plan.delay_s
        while proc.poll() is None and time.monotonic() < end:
            time.sleep(poll_s)
            now = _signature(home)
            if now != last:
                changes += 1
                last = now
        killed = proc.poll() is None
        if killed:
            os.kill(proc.pid, signal.SIGKILL)
        else:  # finished first: count what the rest of a whole run does
            while True:
                now = _signature(home)
                if now != last:
                    changes += 1
                    last = now
                if proc.poll() is not None:
                    break
                time.sleep(poll_s)
        proc.wait()
        return killed, changes, time.monotonic() - first
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


# Repairs at open that mean committed changes of the record were lost or set aside: a
# kill -9 (the disk intact, nothing unwritten in the page cache lost) must never need them.
RECORD_REPAIRS = ("log_set_aside", "log_cut_short", "library_rebuilt")


def reopen(home: Path) -> tuple[bool, float, str, list[str]]:
    """Open the library (its database, keyword index and vector file) and read its
    status, as the app does after a crash; no model is needed for that. Returns (opened,
    seconds, error, kinds of the repairs made at open)."""
    from core.config import Settings
    from core.library import Library

    started = time.monotonic()
    repairs: list[str] = []
    try:
        lib = Library(Settings(home=home))
        try:
            repairs = [str(n.kind) for n in getattr(lib, "recovery_notices", ())]
            json.dumps(lib.status())
            # A kill before the vector file was first saved leaves it far behind DuckDB:
            # it is rebuilt from the stored embeddings (not damage: no notice is shown).
            report = str(lib.vectors.repair_report) if len(lib.vectors) else ""
            if report.startswith("rebuilt") and "vectors_rebuilt" not in repairs:
                repairs.append("vector_file_caught_up")
        finally:
            lib.close()
    except Exception as exc:
        return False, time.monotonic() - started, f"{type(exc).__name__}: {exc}", repairs
    return True, time.monotonic() - started, "", repairs


def torture(
    home: Path,
    corpus: Corpus,
    kills: int,
    rng: random.Random,
    *,
    long_runs: tuple[int, ...] = (),
    long_files: int = 150,
    stop_on_failure: bool = False,
    log: Callable[[str], None] = print,
) -> list[Attempt]:
    """``kills`` runs of ``lectern index`` killed at random moments, each followed by a
    reopen; before each run but the first the folder changes a little, so every run has
    writing to do (and a short run reaches its keyword rebuild, vector save and final
    checkpoint, which the kills must hit too). The runs numbered (from 0) in
    ``long_runs`` get ``long_files`` new or rewritten files and are killed just after the
    indexer's first publish."""
    attempts: list[Attempt] = []
    typical_changes, typical_s = 40, 6.0
    while sum(a.killed for a in attempts) < kills:
        long_run = len(attempts) in long_runs
        if long_run:
            # A run longer than the indexer's publish interval: its keyword rebuild then
            # sits in the log while the run writes on (the kill -9 failure).
            adds = min(corpus.to_add, long_files)
            corpus.mutate(edits=long_files - adds, adds=adds, deletes=0, renames=0)
            plan = KillPlan(1, rng.uniform(PUBLISH_EVERY_S + 1, PUBLISH_EVERY_S + 12))
        else:
            if attempts:
                # Grow the folder to its full size over the planned runs.
                share = -(-corpus.to_add // max(1, kills - sum(a.killed for a in attempts)))
                corpus.mutate(
                    edits=rng.randint(1, 4),
                    adds=share + rng.randint(0, 2),
                    deletes=rng.randint(0, 1),
                    renames=rng.randint(0, 1),
                )
            plan = KillPlan.draw(rng, typical_changes, typical_s)
        killed, seen, run_s = index_and_kill(home, corpus.folder, plan)
        if long_run:
            pass  # not what a usual run looks like
        elif not killed:  # what a whole run looks like now
            typical_changes, typical_s = max(2, seen), run_s
        elif seen >= typical_changes or run_s >= typical_s:
            # Runs are longer than thought: widen the range until one finishes.
            typical_changes = max(typical_changes, int(seen * 1.5))
            typical_s = max(typical_s, run_s * 1.5)
        opened, took, error, repairs = reopen(home)
        attempt = Attempt(plan, killed, seen, run_s, opened, took, error, repairs)
        attempts.append(attempt)
        log(
            f"run {len(attempts)}: {'killed' if killed else 'finished'} after {seen} changes "
            f"(plan {plan.changes} + {plan.delay_s:.3f} s); reopen "
            f"{'ok' if opened else 'FAILED'} in {took:.1f} s"
            + (f"; repaired: {', '.join(repairs)}" if repairs else "")
        )
        if not opened:
            log(f"  reopen error: {error}")
            if stop_on_failure:
                break
    corpus.mutate(edits=0, adds=corpus.to_add, deletes=0, renames=0)
    return attempts


def final_run(home: Path, folder: Path) -> dict[str, object]:
    """An uninterrupted ``lectern index``; returns its JSON summary."""
    result = lectern(home, "index", str(folder), "--json")
    if result.returncode != 0:
        raise RuntimeError(f"lectern index failed: {result.stderr[-2000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def clean_rebuild(home: Path, folder: Path, embedder: object) -> None:
    """Index ``folder`` into a fresh library ``home``, in this process."""
    from core.config import Settings
    from core.library import Library

    home.mkdir(parents=True, exist_ok=True)
    with Library(Settings(home=home), embedder=embedder) as lib:  # type: ignore[arg-type]
        lib.index([folder])


# --- comparing with a clean rebuild -----------------------------------------------------


@dataclass
class Snapshot:
    chunks: Counter[tuple[str, int, str]]  # (path relative to the folder, ordinal, text)
    states: dict[str, str]  # relative path -> document state
    chunk_ids_with_embedding: set[int]
    vector_keys: set[int]  # the open library's vector index (after its repair at open)
    file_keys: set[int] | None  # the vector file as the last run left it (None: unreadable)
    vector_repair: str  # what opening the vector file had to do ("ok" when nothing)
    marker_hits: dict[str, list[str]]  # marker -> relative paths keyword search returned


def snapshot(home: Path, folder: Path, words: list[str], embedder: object) -> Snapshot:
    """Read the library in this process (the model is passed in, loaded once)."""
    from core.config import Settings
    from core.library import Library
    from core.store.vectors import saved_keys

    file_keys: set[int] | None = None
    try:
        file_keys = {int(k) for k in saved_keys(Settings(home=home).vectors_path)}
    except Exception:
        file_keys = None
    lib = Library(Settings(home=home), embedder=embedder)  # type: ignore[arg-type]
    try:
        cur = lib.db.cursor()
        root = str(folder)
        rows = cur.execute(
            """SELECT d.path, c.ordinal, c.text FROM chunks c
               JOIN documents d ON d.id = c.document_id"""
        ).fetchall()
        chunks = Counter((os.path.relpath(p, root), int(o), str(t)) for p, o, t in rows)
        orphans = cur.execute(
            "SELECT count(*) FROM chunks WHERE document_id NOT IN (SELECT id FROM documents)"
        ).fetchone()[0]
        if orphans:
            chunks[("<no document>", -1, "")] += int(orphans)
        states = {
            os.path.relpath(p, root): str(s)
            for p, s in cur.execute("SELECT path, state FROM documents").fetchall()
        }
        with_embedding = {
            int(r[0])
            for r in cur.execute("SELECT id FROM chunks WHERE embedding IS NOT NULL").fetchall()
        }
        vector_keys = {int(k) for k in lib.vectors._index.keys}
        repair = str(lib.vectors.repair_report)
        hits: dict[str, list[str]] = {}
        for word in words:
            found = lib.search(word, k=5, mode="bm25")
            hits[word] = [os.path.relpath(h.path, root) for h in found]
        return Snapshot(chunks, states, with_embedding, vector_keys, file_keys, repair, hits)
    finally:
        lib.close()


@dataclass
class Comparison:
    lost: int
    duplicated: int
    extra: int
    stuck: list[str]
    vector_mismatch: int  # keys of the open vector index that are not chunk ids, and back
    file_mismatch: int  # the same for the file as the last run saved it
    states_differ: list[str]
    markers_missed: list[str]  # a file's own word not found (only) in that file
    ghosts: list[str]  # words of deleted or rewritten text still found

    @property
    def ok(self) -> bool:
        return not (
            self.lost
            or self.duplicated
            or self.extra
            or self.stuck
            or self.vector_mismatch
            or self.file_mismatch
            or self.states_differ
            or self.markers_missed
            or self.ghosts
        )


def compare(got: Snapshot, clean: Snapshot, corpus: Corpus) -> Comparison:
    markers, folder = corpus.markers, corpus.folder
    lost = sum((clean.chunks - got.chunks).values())
    surplus = got.chunks - clean.chunks
    duplicated = sum(n for key, n in surplus.items() if key in clean.chunks)
    extra = sum(n for key, n in surplus.items() if key not in clean.chunks)
    stuck = sorted(p for p, s in got.states.items() if s not in ("indexed", "failed", "skipped"))
    vector_mismatch = len(got.vector_keys ^ got.chunk_ids_with_embedding)
    file_mismatch = (
        len(got.file_keys ^ got.chunk_ids_with_embedding)
        if got.file_keys is not None
        else max(1, len(got.chunk_ids_with_embedding))
    )
    states_differ = sorted(
        p for p in set(got.states) | set(clean.states) if got.states.get(p) != clean.states.get(p)
    )
    missed = [
        f"{word} (in {os.path.relpath(path, folder)}, got {got.marker_hits.get(word)})"
        for path, word in sorted(markers.items())
        if got.marker_hits.get(word) != [os.path.relpath(path, folder)]
    ]
    ghosts = sorted(w for w in corpus.gone if got.marker_hits.get(w))
    return Comparison(
        lost,
        duplicated,
        extra,
        stuck,
        vector_mismatch,
        file_mismatch,
        states_differ,
        missed,
        ghosts,
    )
