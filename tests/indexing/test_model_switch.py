"""Changing the embedding model: the old index keeps answering while every passage is
re-embedded in the background, then the library switches, never mixing the two models
(real models, real files, real DuckDB)."""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import core.indexing.reembed
from core.cli.main import status_lines
from core.config import Settings
from core.embedding.models import DEFAULT_MODEL_ID, MULTILINGUAL_MODEL_ID, load_embedder
from core.ipc import connect, serve
from core.library import Library
from tests.helpers import write_files

FILES = {
    "lease.md": "# Lease\n\nThe lease on the ground-floor unit is renewed every June for two "
    "years.\n\nEither party may end it with ninety days' written notice.\n",
    "pump.md": "# Pump\n\nBefore replacing the filter, switch off the pump and wait until the "
    "pressure gauge reads zero.\n",
    "bread.md": "# Bread\n\nMix the flour, salt and yeast, then knead the dough for ten "
    "minutes.\n\nLet it rise for an hour before baking.\n",
    "hedgehog.md": "# Ежи\n\nЕжи зимой впадают в спячку и живут за счёт осеннего жира.\n",
    "baikal.md": "# Байкал\n\nБайкал — самое глубокое озеро на планете, глубже 1600 метров.\n",
}
QUERY = "how long is the notice to end the lease"
RUSSIAN_QUERY = "Что делают колючие зверьки в холодное время года?"
WAIT_S = 300.0  # a hang fails here instead of at the suite's timeout


class Gated:
    """The real new model, whose passage batches past the first ``allow`` wait for
    ``go``: the test decides when the background re-embedding may go on."""

    def __init__(self, inner: Any, allow: int = 0) -> None:
        self.inner = inner
        self.allow = allow
        self.go = threading.Event()
        self.held = threading.Event()  # a batch is waiting for ``go``
        self.calls = 0
        self.texts = 0

    def embed(self, texts: list[str], batch_size: int = 32) -> np.ndarray:
        self.calls += 1
        if self.calls > self.allow:
            self.held.set()
            assert self.go.wait(WAIT_S)
        self.texts += len(texts)
        return self.inner.embed(texts, batch_size=batch_size)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def _folder(tmp_path: Path) -> Path:
    return write_files(tmp_path / "docs", FILES)


@contextlib.contextmanager
def _indexed_library(tmp_path: Path, home: Path) -> Iterator[tuple[Settings, Library]]:
    """The test files indexed with the default model, in an open library."""
    folder = _folder(tmp_path)
    settings = Settings(home=home)
    with Library(settings) as library:
        library.index([folder])
        yield settings, library


def _stored(library: Library) -> list[tuple[int, str, np.ndarray]]:
    """Every chunk: id, the text its embedding is made from, and its embedding."""
    rows = (
        library.db.cursor()
        .execute("SELECT id, coalesce(context, ''), text, embedding FROM chunks ORDER BY id")
        .fetchall()
    )
    return [
        (int(i), f"{ctx}\n{text}" if ctx else text, np.frombuffer(blob, dtype=np.float32))
        for i, ctx, text, blob in rows
    ]


def _made_by(library: Library, model: Any, chunk_ids: set[int] | None = None) -> bool:
    """Whether the stored embeddings (of these chunks, or all) are ``model``'s."""
    rows = [r for r in _stored(library) if chunk_ids is None or r[0] in chunk_ids]
    assert rows
    fresh = model.embed([text for _, text, _ in rows])
    return all(
        len(vector) == len(expected) and float(vector @ expected) > 0.999
        for (_, _, vector), expected in zip(rows, fresh, strict=True)
    )


def _names(hits: list[Any]) -> list[str]:
    return [Path(h.path).name for h in hits]


def _rank(hits: list[Any], name: str) -> int:
    return _names(hits).index(name) if name in _names(hits) else len(hits)


def _side_rows(library: Library) -> int:
    row = library.db.cursor().execute("SELECT count(*) FROM reembed").fetchone()
    return int(row[0]) if row else 0


@pytest.fixture()
def small_batches(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two passages per batch: a handful of files make several batches."""
    monkeypatch.setattr(core.indexing.reembed, "BATCH_CHUNKS", 2)
    monkeypatch.setattr(core.indexing.reembed, "SLICE_TEXTS", 2)


def test_old_model_answers_until_the_new_one_has_every_passage(
    tmp_path: Path, lectern_home: Path, embedder: Any
) -> None:
    e5 = load_embedder(MULTILINGUAL_MODEL_ID)
    with _indexed_library(tmp_path, lectern_home) as (settings, library):
        modes = ("bm25", "dense", "hybrid")
        before = {m: [h.chunk_id for h in library.search(QUERY, mode=m)] for m in modes}
        russian_before = _rank(library.search(RUSSIAN_QUERY, mode="dense", k=5), "hedgehog.md")
        chunks = library.status()["chunks"]
        assert library.pieces.counts() == (chunks, chunks)  # the second stage's word pieces

    gated = Gated(e5)
    library = Library(replace(settings, embedding_model=MULTILINGUAL_MODEL_ID), embedder=gated)
    try:
        assert gated.held.wait(WAIT_S)  # the re-embedding has started, and is held
        # Searchable at once, by keyword and by meaning, with the old model: same results.
        assert {m: [h.chunk_id for h in library.search(QUERY, mode=m)] for m in modes} == before
        assert library.retriever.embedder.model_id == DEFAULT_MODEL_ID
        status = library.status()
        assert status["embedding_model"] == DEFAULT_MODEL_ID
        switching = status["reembedding"]
        assert switching["model"] == MULTILINGUAL_MODEL_ID and switching["from"] == DEFAULT_MODEL_ID
        assert (switching["done"], switching["total"]) == (0, chunks)
        assert switching["message"] == (
            f"Switching to {MULTILINGUAL_MODEL_ID}: 0 of {chunks} passages re-embedded; "
            f"search uses {DEFAULT_MODEL_ID} until then"
        )
        assert switching["message"] in status_lines(status)
        server = serve(library)  # what `lectern status` is told while this process holds it
        try:
            remote = connect(lectern_home)
            assert remote is not None
            assert remote.status()["reembedding"]["message"] == switching["message"]
            remote.close()
        finally:
            server.close()
        assert _made_by(library, embedder)

        gated.go.set()
        assert library.models.wait(timeout=WAIT_S)
        status = library.status()
        assert status["embedding_model"] == MULTILINGUAL_MODEL_ID
        assert status["reembedding"] is None
        assert status["searchable"] == {"keyword": chunks, "meaning": chunks}
        assert str(status["index_config"]).startswith(MULTILINGUAL_MODEL_ID + "|")
        assert _made_by(library, e5)  # what a fresh e5 index holds: cosine ~1 per chunk
        assert _side_rows(library) == 0
        assert len(library.vectors) == chunks and library.vectors.dim == e5.dim
        assert library.retriever.embedder.model_id == MULTILINGUAL_MODEL_ID
        russian = library.search(RUSSIAN_QUERY, mode="dense", k=5)
        assert _rank(russian, "hedgehog.md") == 0 and russian_before > 0
        assert [h.chunk_id for h in library.search(QUERY, mode="bm25")] == before["bm25"]
        # Nothing is queued again: the documents are recorded under the new model.
        assert library.index().chunks_embedded == 0
        # The old model's word pieces went with its vectors; e5 makes none to keep.
        assert library.pieces.counts() == (0, chunks)
    finally:
        gated.go.set()
        library.close()

    with Library(replace(settings, embedding_model=MULTILINGUAL_MODEL_ID)) as again:
        assert not again.switching_model
        assert _rank(again.search(RUSSIAN_QUERY, mode="dense", k=5), "hedgehog.md") == 0
        assert not again.vectors.repair_report.startswith("rebuilt")  # the file saved is e5's


def test_an_interrupted_switch_resumes_and_never_mixes(
    tmp_path: Path, lectern_home: Path, embedder: Any, small_batches: None
) -> None:
    folder = _folder(tmp_path)
    settings = Settings(home=lectern_home)
    e5_settings = replace(settings, embedding_model=MULTILINGUAL_MODEL_ID)
    e5 = load_embedder(MULTILINGUAL_MODEL_ID)
    with Library(settings) as library:
        library.index([folder])
        chunks = library.status()["chunks"]
    assert chunks > 4

    first = Gated(e5, allow=1)  # one batch of two passages, then held
    library = Library(e5_settings, embedder=first)
    assert first.held.wait(WAIT_S)
    library.close()  # with a batch in the model: close does not wait for it
    first.go.set()

    with Library(e5_settings, migrate=False) as reader:  # as `lectern status` opens it
        switching = reader.status()["reembedding"]
        assert (switching["done"], switching["total"]) == (2, chunks)
        assert switching["state"] == "stopped" and "lectern index" in switching["message"]
        assert reader.status()["embedding_model"] == DEFAULT_MODEL_ID
        assert _made_by(reader, embedder)  # the index holds the old model's vectors only

    second = Gated(e5, allow=10**6)
    with Library(e5_settings, embedder=second) as library:
        assert library.models.wait(timeout=WAIT_S)
        assert second.texts == chunks - 2  # resumed: what was stored is not embedded again
        assert library.status()["embedding_model"] == MULTILINGUAL_MODEL_ID
        assert _made_by(library, e5)


def test_files_changed_during_the_switch_end_up_in_the_new_model(
    tmp_path: Path, lectern_home: Path, embedder: Any, small_batches: None
) -> None:
    e5 = load_embedder(MULTILINGUAL_MODEL_ID)
    with _indexed_library(tmp_path, lectern_home) as (settings, _):
        folder = tmp_path / "docs"

    gated = Gated(e5, allow=1)
    with Library(
        replace(settings, embedding_model=MULTILINGUAL_MODEL_ID), embedder=gated
    ) as library:
        assert gated.held.wait(WAIT_S)
        (folder / "kettle.md").write_text(
            "# Kettle\n\nDescale the kettle with vinegar once a month.\n", encoding="utf-8"
        )
        (folder / "bread.md").unlink()
        report = library.index()
        assert (report.added, report.removed) == (1, 1) and report.chunks_embedded > 0
        hits = library.search("descale the kettle with vinegar", mode="bm25")
        added = {h.chunk_id for h in hits if Path(h.path).name == "kettle.md"}
        assert added and _made_by(library, embedder, added)  # written with the old model
        assert library.switching_model

        gated.go.set()
        assert library.models.wait(timeout=WAIT_S)
        assert _made_by(library, e5)  # the new file too, and no trace of the removed one
        assert _side_rows(library) == 0
        status = library.status()
        assert len(library.vectors) == status["chunks"]
        assert _names(library.search("descale the kettle", mode="dense", k=1)) == ["kettle.md"]


def test_changing_back_before_the_switch_cancels_it(
    tmp_path: Path, lectern_home: Path, embedder: Any, small_batches: None
) -> None:
    with _indexed_library(tmp_path, lectern_home) as (settings, library):
        expected = [h.chunk_id for h in library.search(QUERY, mode="dense")]

    gated = Gated(load_embedder(MULTILINGUAL_MODEL_ID), allow=1)
    library = Library(replace(settings, embedding_model=MULTILINGUAL_MODEL_ID), embedder=gated)
    assert gated.held.wait(WAIT_S)
    library.close()
    gated.go.set()

    with Library(settings) as library:
        assert not library.switching_model
        assert library.status()["reembedding"] is None
        assert library.reembed_store.target() is None and _side_rows(library) == 0
        assert [h.chunk_id for h in library.search(QUERY, mode="dense")] == expected
        assert library.index().chunks_embedded == 0  # nothing was dropped or queued
        assert _made_by(library, embedder)


def test_a_model_that_cannot_load_leaves_the_old_index_answering(
    tmp_path: Path, lectern_home: Path, embedder: Any
) -> None:
    with _indexed_library(tmp_path, lectern_home) as (settings, library):
        expected = [h.chunk_id for h in library.search(QUERY)]

    with Library(replace(settings, embedding_model="some/other-model")) as library:
        assert not library.models.wait(timeout=WAIT_S)
        assert [h.chunk_id for h in library.search(QUERY)] == expected
        status = library.status()
        switching = status["reembedding"]
        assert switching["state"] == "failed"
        assert "Unknown embedding model 'some/other-model'" in switching["message"]
        assert MULTILINGUAL_MODEL_ID in switching["hint"]
        assert switching["message"].endswith(f"Search uses {DEFAULT_MODEL_ID} meanwhile.")
        assert "Traceback" not in "\n".join(status_lines(status))
        assert status["embedding_model"] == DEFAULT_MODEL_ID


def test_the_app_shows_the_switch_where_it_shows_what_is_searchable(
    qtbot: Any, tmp_path: Path, lectern_home: Path
) -> None:
    from desktop.backend import Backend
    from desktop.library_panel import LibraryPanel
    from desktop.theme import Theme

    with _indexed_library(tmp_path, lectern_home) as (settings, library):
        chunks = library.status()["chunks"]

    gated = Gated(load_embedder(MULTILINGUAL_MODEL_ID))
    theme = Theme("light")
    theme.apply()
    backend = Backend(
        replace(settings, embedding_model=MULTILINGUAL_MODEL_ID), embedder=gated, watch=False
    )
    try:
        backend.start()
        qtbot.waitUntil(lambda: backend.is_ready, timeout=60_000)
        panel = LibraryPanel(backend, theme)
        qtbot.addWidget(panel)
        qtbot.waitUntil(lambda: backend.view.snapshot is not None, timeout=20_000)
        assert backend.view.snapshot.switching == (
            f"Switching to {MULTILINGUAL_MODEL_ID}: 0 of {chunks} passages re-embedded; "
            f"search uses {DEFAULT_MODEL_ID} until then"
        )
        panel.set_snapshot(backend.view.snapshot)
        # In the window, the models by their names (desktop/viewmodels.py plain_words).
        assert "Switching to the multilingual model: 0 of" in panel.summary.text()
        assert "search uses the English model until then" in panel.summary.text()
        gated.go.set()
        # The backend follows it on its own until the switch, then says nothing more.
        qtbot.waitUntil(lambda: backend.view.snapshot.switching == "", timeout=int(WAIT_S * 1000))
        panel.set_snapshot(backend.view.snapshot)
        assert "Switching" not in panel.summary.text()
        assert backend.startup.library.status()["embedding_model"] == MULTILINGUAL_MODEL_ID
    finally:
        gated.go.set()
        backend.shutdown()


def test_lectern_index_stays_until_the_switch_and_status_says_so(
    tmp_path: Path, lectern_home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from core.cli.main import main

    folder = _folder(tmp_path)
    assert main(["index", str(folder)]) == 0
    (lectern_home / "settings.json").write_text(
        json.dumps({"embedding_model": MULTILINGUAL_MODEL_ID}), encoding="utf-8"
    )
    capsys.readouterr()
    assert main(["status"]) == 0  # opened to read: says how far it is, starts nothing
    out = capsys.readouterr().out
    assert f"Embedding model: {DEFAULT_MODEL_ID}" in out
    assert f"Switching to {MULTILINGUAL_MODEL_ID}: 0 of " in out
    assert main(["index"]) == 0
    assert f"Switched to {MULTILINGUAL_MODEL_ID}." in capsys.readouterr().err
    assert main(["status", "--json"]) == 0
    status = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert status["embedding_model"] == MULTILINGUAL_MODEL_ID and status["reembedding"] is None


def test_pausing_indexing_pauses_the_switch_too(
    tmp_path: Path, lectern_home: Path, embedder: Any, small_batches: None
) -> None:
    """The app's Pause gives the computer back: the re-embedding holds before its next
    call into the model, says so, and carries on where it was after Resume."""
    e5 = load_embedder(MULTILINGUAL_MODEL_ID)
    with _indexed_library(tmp_path, lectern_home) as (settings, library):
        chunks = library.status()["chunks"]
    assert chunks > 4
    gated = Gated(e5, allow=1)  # one batch, then held inside the model's second call
    library = Library(replace(settings, embedding_model=MULTILINGUAL_MODEL_ID), embedder=gated)
    try:
        assert gated.held.wait(WAIT_S)
        library.models.pause(True)
        gated.go.set()  # the call in the model finishes; no further call may start
        deadline = threading.Event()
        for _ in range(50):
            status = library.reembedding_status()
            assert status is not None
            if status.state == "paused" and status.done == 4:
                break
            deadline.wait(0.1)
        assert status.state == "paused" and "(paused with indexing)" in status.sentence
        calls = gated.calls
        deadline.wait(1.5)
        assert gated.calls == calls and library.switching_model
        library.models.pause(False)
        assert library.models.wait(timeout=WAIT_S)
        assert library.status()["embedding_model"] == MULTILINGUAL_MODEL_ID
    finally:
        gated.go.set()
        library.close()
