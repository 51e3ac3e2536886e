"""Keyword first, meaning next: a file is keyword-searchable as soon as it is written,
its passages are embedded behind it, and a run stopped in between loses nothing."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from core.config import Settings
from core.indexing.indexer import Controls
from core.library import Library
from core.records import IndexProgress
from core.retrieval.fusion import fuse

WORDS = ["zanzibarite", "quoxalene", "vellicorn", "tressimund", "obrulite", "myrrhandel"]


class ObservedEmbedder:
    """The real model, with a hook run before each indexing batch (queries go through
    ``embed_query``, which passes through)."""

    def __init__(self, inner: Any, before_batch: Callable[[int, list[str]], None]) -> None:
        self.inner = inner
        self.before_batch = before_batch
        self.batches = 0

    def embed(self, texts: list[str], batch_size: int = 32) -> np.ndarray:
        self.batches += 1
        self.before_batch(self.batches, texts)
        return self.inner.embed(texts, batch_size=batch_size)

    def embed_with_pieces(
        self, texts: list[str], batch_size: int = 32
    ) -> tuple[np.ndarray, list[bytes]]:
        # The indexer's call when the second stage keeps word pieces: the same batch.
        self.batches += 1
        self.before_batch(self.batches, texts)
        return self.inner.embed_with_pieces(texts, batch_size=batch_size)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def hold_until(check: Callable[[], bool], timeout_s: float = 120.0) -> bool:
    """Called in a batch's hook: the model waits (the rest of the run goes on) until
    ``check`` holds; False when it never did."""
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)
    return True


def _folder(tmp_path: Path, files: int = 6) -> Path:
    folder = tmp_path / "notes"
    folder.mkdir()
    for i in range(files):
        paragraphs = [
            f"Field note {i} on the mineral {WORDS[i]}, found near the old quarry road."
            + " The sample was logged, weighed and photographed before storage." * 3
            for _ in range(4)
        ]
        (folder / f"note-{i}.md").write_text(f"# Note {i}\n\n" + "\n\n".join(paragraphs))
    return folder


def test_files_are_written_and_keyword_searchable_while_the_model_embeds(
    lectern_home: Path, embedder: Any, tmp_path: Path
) -> None:
    folder = _folder(tmp_path)
    seen: dict[str, Any] = {}
    library: Library

    def before_batch(n: int, texts: list[str]) -> None:
        if n != 1:
            return
        # The model starts on the first file's passages at once, not after every file is
        # written...
        seen["first_batch_words"] = {w for w in WORDS if any(w in t for t in texts)}

        # ...and, held on that batch, does not hold up the others: they are written and
        # made keyword-searchable meanwhile.
        def every_file_found() -> bool:
            seen["hits"] = {w: [h.path for h in library.search(w, k=3, mode="bm25")] for w in WORDS}
            seen["status"] = library.status()
            return all(seen["hits"].values())

        hold_until(every_file_found)

    observed = ObservedEmbedder(embedder, before_batch)
    library = Library(Settings(home=lectern_home), embedder=observed)
    try:
        report = library.index([folder])
        assert report.added == 6
        assert seen["first_batch_words"] == {WORDS[0]}
        # Before the model had embedded anything, every file answered keyword search...
        for w in WORDS:
            assert seen["hits"][w], f"{w} was not keyword-searchable while the model worked"
            assert Path(seen["hits"][w][0]).name == f"note-{WORDS.index(w)}.md"
        # ...and status said how much was searchable each way.
        searchable = seen["status"]["searchable"]
        assert searchable["keyword"] == seen["status"]["chunks"] > 0
        assert searchable["meaning"] == 0
        # At the end, everything is searchable by meaning too.
        status = library.status()
        assert status["searchable"] == {"keyword": status["chunks"], "meaning": status["chunks"]}
        assert library.search("a mineral logged near the quarry road", k=3, mode="dense")
    finally:
        library.close()


def test_a_run_stopped_before_embedding_is_finished_by_the_next_one(
    lectern_home: Path, embedder: Any, tmp_path: Path
) -> None:
    folder = _folder(tmp_path)
    controls = Controls()
    reports: list[IndexProgress] = []

    def progress(p: IndexProgress) -> None:
        reports.append(p)
        if p.files_done == p.files_total and p.files_total:
            controls.stop()  # every file written, nothing embedded yet

    settings = replace(Settings(home=lectern_home))
    with Library(settings, embedder=embedder) as library:
        first = library.index([folder], progress=progress, controls=controls)
        assert first.cancelled and first.chunks_embedded == 0
        status = library.status()
        assert status["counts"]["indexed"] == 6
        assert status["searchable"]["meaning"] == 0 < status["searchable"]["keyword"]
        # Keyword and hybrid search find the unembedded file; dense cannot yet.
        assert Path(library.search("quoxalene", k=1, mode="bm25")[0].path).name == "note-1.md"
        assert Path(library.search("quoxalene", k=1)[0].path).name == "note-1.md"
        assert library.search("quoxalene", k=3, mode="dense") == []
        assert not reports[-1].finished

    # Reopened (as after a crash or quitting mid-run): the next run has no file to read
    # but embeds what the last one left.
    with Library(settings, embedder=embedder) as library:
        second = library.index()
        assert second.added == 0 and second.chunks_embedded == status["chunks"]
        status = library.status()
        assert status["searchable"]["meaning"] == status["chunks"]
        hits = library.search("the mineral quoxalene near the quarry", k=3, mode="dense")
        assert hits and all(h.chunk_id for h in hits)


def test_hybrid_ranks_a_document_without_vectors_by_its_keyword_score() -> None:
    # Document 7 tops a flat BM25 list, and meaning search cannot see it yet: without
    # the fallback, the dense list's floor drags it below documents only dense liked.
    bm25 = [(7, 6.0), (1, 5.8), (2, 5.6), (3, 5.4), (4, 5.2)]
    dense = [(1, 0.9), (2, 0.5), (5, 0.48), (6, 0.47), (3, 0.46), (4, 0.45)]
    plain = [d for d, _ in fuse(bm25, dense)]
    fallback = [d for d, _ in fuse(bm25, dense, keyword_only={7})]
    assert fallback.index(7) < plain.index(7)
    assert fallback[0] == 7
    # Documents with vectors keep their relative order.
    assert [d for d in fallback if d != 7] == [d for d in plain if d != 7]


@pytest.mark.parametrize("files_done,embedded,expected", [(3, 0, False), (6, 10, False)])
def test_progress_is_finished_only_when_every_passage_is_embedded(
    files_done: int, embedded: int, expected: bool
) -> None:
    p = IndexProgress(
        files_total=6,
        files_done=files_done,
        chunks_done=0,
        passages_total=20,
        passages_embedded=embedded,
        elapsed_s=10.0,
    )
    assert p.finished is expected
    assert 0.0 <= p.fraction < 1.0
    done = replace(p, files_done=6, passages_embedded=20)
    assert done.finished and done.fraction == 1.0 and done.eta_s == 0.0


def test_a_word_only_one_document_has_puts_it_first() -> None:
    # A keyword list of one (an identifier only that file contains) discriminates as
    # much as a list can: the documents it does not return score 0. Treated as "all
    # equal, no say", the document sank below everything dense liked (it was lost in
    # bench/freshness.py over 100k chunks).
    bm25 = [(9, 7.5)]
    dense = [(1, 0.9), (2, 0.5), (3, 0.48), (4, 0.47), (9, 0.2)]
    assert fuse(bm25, dense)[0][0] == 9


def test_documents_without_any_vector_are_told_apart_from_partly_embedded_ones(
    lectern_home: Path, embedder: Any, tmp_path: Path
) -> None:
    from core.store.lookup import unembedded_documents

    folder = tmp_path / "notes"
    folder.mkdir()
    for i in range(3):
        sections = [
            f"## Part {s}\n\n" + f"Note {i} part {s} about {WORDS[i]}. " * 60 for s in (1, 2)
        ]
        (folder / f"note-{i}.md").write_text(f"# Note {i}\n\n" + "\n\n".join(sections))
    with Library(Settings(home=lectern_home), embedder=embedder) as library:
        library.index([folder])
        cur = library.db.cursor()
        ids = {
            Path(path).name: int(doc)
            for doc, path in cur.execute("SELECT id, path FROM documents").fetchall()
        }
        none, partly, whole = ids["note-0.md"], ids["note-1.md"], ids["note-2.md"]
        assert unembedded_documents(library.db, [none, partly, whole]) == set()
        # As while the meaning pass is on its way: one document not reached, one half done.
        cur.execute("UPDATE chunks SET embedding = NULL WHERE document_id = ?", [none])
        cur.execute(
            "UPDATE chunks SET embedding = NULL WHERE document_id = ? AND ordinal > 0", [partly]
        )
        counts = dict(
            cur.execute("SELECT document_id, count(*) FROM chunks GROUP BY document_id").fetchall()
        )
        assert counts[partly] > 1
        assert unembedded_documents(library.db, [none, partly, whole]) == {none}
