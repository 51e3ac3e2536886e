"""Model-based test of the index against the disk (issue 10).

Hypothesis drives a small folder through random adds, edits, renames and deletes, index
runs (``Library.index`` and ``Library.sync``), keyword searches, and crashes (``lectern
index`` in a child process, ``kill -9``-ed once it has begun writing, then the library
reopened). The model is the folder itself plus what the last finished index run saw.

- After every index run the index equals the disk: one document row per file with its
  content hash, chunks only of existing files, vector keys equal to the chunk ids.
- A file's own word is found by keyword search, in that file only, iff the file existed
  when the library was last indexed; words of deleted or rewritten text are never found.

Derandomized (the same examples in every run) and sized to run in about two minutes;
``LECTERN_MODEL_EXAMPLES=200`` explores further.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    consumes,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from tests.crash_harness import KillPlan, index_and_kill, marker

NAMES = ("a.md", "b.txt", "c.md", "sub/d.txt", "sub/e.md", "sub/deeper/f.md")
# The passages are only filler around each file's marker word, so the committed articles
# serve, and the test runs where ../shared/data is missing.
PARAGRAPHS = Path(__file__).resolve().parents[1] / "fixtures" / "paragraphs.json"
_EMBEDDER: object | None = None
_PASSAGES: list[tuple[str, str]] = []


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


class IndexMatchesDisk(RuleBasedStateMachine):
    files = Bundle("files")

    def __init__(self) -> None:
        super().__init__()
        from core.config import Settings
        from core.library import Library

        self._library_type = Library
        self.root = Path(tempfile.mkdtemp(prefix="lectern-model-"))
        self.folder = self.root / "docs"
        self.folder.mkdir()
        self.home = self.root / "home"
        self.home.mkdir()
        self.settings = Settings(home=self.home)
        self.lib = Library(self.settings, embedder=_EMBEDDER)  # type: ignore[arg-type]
        self.words: dict[str, str] = {}  # name on disk -> its word
        self.gone: set[str] = set()  # words no longer on disk
        # name -> word as of the last finished index run; None: unknown (after a crash)
        self.indexed: dict[str, str] | None = {}
        self.folder_added = False
        self.fresh = False  # the index ran and nothing changed since
        self.serial = 0

    # --- the folder ---------------------------------------------------------------

    def _write(self, name: str, passage: int) -> None:
        self.serial += 1
        word = marker(self.serial)
        title, text = _PASSAGES[passage % len(_PASSAGES)]
        path = self.folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"# {title}\n\n{text[:300]} Marked {word}.\n", encoding="utf-8")
        if name in self.words:
            self.gone.add(self.words[name])
        self.words[name] = word
        self.fresh = False

    @initialize(target=files, name=st.sampled_from(NAMES), passage=st.integers(0, 80))
    def first_file(self, name: str, passage: int) -> str:
        self._write(name, passage)
        return name

    @rule(target=files, name=st.sampled_from(NAMES), passage=st.integers(0, 80))
    def add_file(self, name: str, passage: int) -> str:
        if name in self.words:
            return name  # already there: an edit, as a person saving over it
        self._write(name, passage)
        return name

    @rule(name=files, passage=st.integers(0, 80))
    def edit_file(self, name: str, passage: int) -> None:
        if name in self.words:
            self._write(name, passage)

    @rule(target=files, name=consumes(files), new=st.sampled_from(NAMES))
    def rename_file(self, name: str, new: str) -> str:
        if name not in self.words or new in self.words:
            return name
        target = self.folder / new
        target.parent.mkdir(parents=True, exist_ok=True)
        (self.folder / name).rename(target)
        self.words[new] = self.words.pop(name)
        self.fresh = False
        return new

    @rule(name=consumes(files))
    def delete_file(self, name: str) -> None:
        if name in self.words:
            (self.folder / name).unlink()
            self.gone.add(self.words.pop(name))
            self.fresh = False

    # --- the library --------------------------------------------------------------

    @rule(use_sync=st.booleans())
    def index(self, use_sync: bool) -> None:
        if use_sync and self.folder_added:
            report = self.lib.sync()
        else:
            report = self.lib.index([self.folder])
            self.folder_added = True
        assert not report.failures, report.failures
        self.indexed = dict(self.words)
        self.fresh = True

    @precondition(lambda self: self.folder_added)
    @rule(changes=st.integers(1, 40), delay=st.sampled_from((0.0, 0.005, 0.05, 0.3, 1.0)))
    def crash(self, changes: int, delay: float) -> None:
        """``lectern index`` in a child process, killed mid-run; the library reopens."""
        self.lib.close()
        index_and_kill(self.home, self.folder, KillPlan(changes, delay))
        self.lib = self._library_type(self.settings, embedder=_EMBEDDER)  # type: ignore[arg-type]
        self.lib.status()
        self.indexed = None  # somewhere between the last run and the disk
        self.fresh = False

    @precondition(lambda self: self.indexed is not None)
    @rule(data=st.data())
    def search(self, data: st.DataObject) -> None:
        indexed = self.indexed or {}
        candidates = sorted(set(indexed.values()) | set(self.words.values()) | self.gone)
        if not candidates:
            return
        word = data.draw(st.sampled_from(candidates))
        hits = sorted({os.path.relpath(h.path, self.folder) for h in self._search(word)})
        expected = [n for n, w in indexed.items() if w == word]
        assert hits == expected, f"{word}: found in {hits}, indexed as {expected}"

    def _search(self, word: str) -> list:
        return self.lib.search(word, k=5, mode="bm25")

    # --- invariants -------------------------------------------------------------------

    @invariant()
    def index_equals_disk(self) -> None:
        if not self.fresh:
            return
        cur = self.lib.db.cursor()
        docs = {
            os.path.relpath(p, self.folder): (int(i), h, s)
            for i, p, h, s in cur.execute(
                "SELECT id, path, content_hash, state FROM documents"
            ).fetchall()
        }
        assert set(docs) == set(self.words), (
            f"documents {sorted(docs)} != disk {sorted(self.words)}"
        )
        for name, (_, digest, state) in docs.items():
            assert state == "indexed", f"{name} is {state}"
            assert digest == _sha256(self.folder / name), f"{name}: stale content hash"
        ids = {i for i, _, _ in docs.values()}
        chunk_rows = cur.execute(
            "SELECT id, document_id, embedding IS NOT NULL FROM chunks"
        ).fetchall()
        orphans = [r for r in chunk_rows if int(r[1]) not in ids]
        assert not orphans, f"chunks of removed documents: {orphans[:5]}"
        with_text = {int(r[1]) for r in chunk_rows}
        assert with_text == ids, "a document without chunks"
        for name, (doc_id, _, _) in docs.items():
            text = self.lib.files.text(doc_id)
            assert self.words[name] in text, f"{name}: stored text is not the file's"
        embedded = {int(r[0]) for r in chunk_rows if r[2]}
        keys = {int(k) for k in self.lib.vectors._index.keys}
        assert keys == embedded, f"vector keys differ from chunk ids: {keys ^ embedded}"

    def teardown(self) -> None:
        try:
            self.lib.close()
        finally:
            shutil.rmtree(self.root, ignore_errors=True)


SETTINGS = settings(
    max_examples=int(os.environ.get("LECTERN_MODEL_EXAMPLES", "15")),
    stateful_step_count=15,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)


def committed_passages() -> list[tuple[str, str]]:
    articles = json.loads(PARAGRAPHS.read_text(encoding="utf-8"))["data"]
    return [(a["title"], p["context"]) for a in articles for p in a["paragraphs"]]


@pytest.mark.slow
def test_index_matches_disk(embedder: object) -> None:
    global _EMBEDDER
    _EMBEDDER = embedder
    _PASSAGES[:] = committed_passages()
    run_state_machine_as_test(IndexMatchesDisk, settings=SETTINGS)
