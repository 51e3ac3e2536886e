"""The retrieval engine end to end: real files, real model, real DuckDB and USearch."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from core.config import Settings
from core.errors import IndexBusyError
from core.library import Library
from tests.helpers import drain, files_done

# indexes real folders and data sets with the real model: not in `make test-fast`.
pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]


def assert_consistent(lib: Library) -> None:
    """The invariants a crash or an incremental run must never break."""
    cur = lib.db.cursor()
    orphans = cur.execute(
        "SELECT count(*) FROM chunks c LEFT JOIN documents d ON d.id = c.document_id WHERE d.id IS NULL"
    ).fetchone()[0]
    assert orphans == 0
    mismatched = cur.execute(
        """SELECT d.path, d.chunks, count(c.id), count(DISTINCT c.ordinal)
           FROM documents d LEFT JOIN chunks c ON c.document_id = d.id
           GROUP BY d.path, d.chunks HAVING d.chunks <> count(c.id) OR count(c.id) <> count(DISTINCT c.ordinal)"""
    ).fetchall()
    assert mismatched == []
    not_indexed_with_chunks = cur.execute(
        "SELECT count(*) FROM chunks c JOIN documents d ON d.id = c.document_id WHERE d.state <> 'indexed'"
    ).fetchone()[0]
    assert not_indexed_with_chunks == 0
    stored = set(lib.vectors.stored_ids().tolist())
    in_index = (
        set(np.asarray(lib.vectors._index.keys, dtype=np.uint64).tolist())
        if len(lib.vectors)
        else set()
    )
    assert stored == in_index


def test_sample_folder_indexes_and_chunks_keep_offsets(
    library: Library, sample_folder: Path
) -> None:
    report = library.index([sample_folder])
    docs = {Path(d.path).name: d for d in library.files.documents()}
    assert set(docs) == {p.name for p in sample_folder.iterdir()}
    assert all(d.state.value == "indexed" for d in docs.values()), [
        (d.path, d.reason) for d in docs.values()
    ]
    assert report.added == len(docs) and report.chunks_embedded > 0
    cur = library.db.cursor()
    rows = cur.execute(
        "SELECT c.document_id, c.text, c.start_char, c.end_char, c.context FROM chunks c"
    ).fetchall()
    for doc_id, text, start, end, context in rows:
        assert library.files.text(doc_id)[start:end] == text
        # the model sees at most 256 word pieces, special tokens included
        assert library.embedder.count_tokens(f"{context}\n{text}") + 2 <= 256
    assert_consistent(library)


def test_hybrid_search_finds_exact_figures_and_paraphrases(
    library: Library, sample_folder: Path
) -> None:
    library.index([sample_folder])
    hits = library.search("monthly limit of the corporate card", k=3)
    assert hits and "5,000" in hits[0].text
    assert hits[0].path.endswith("expense-limits-note.txt")
    # keyword-only finds an identifier; dense-only finds a paraphrase
    bm25 = library.search("EUR 0.30 per km", mode="bm25", k=3)
    assert any("0.30" in h.text for h in bm25)
    dense = library.search(
        "how much money do I get for driving my own automobile", mode="dense", k=3
    )
    assert any("Mileage" in h.text for h in dense)
    for hit in hits:
        assert library.files.text(hit.document_id)[hit.start : hit.end] == hit.text


def test_filters_by_type_and_folder(library: Library, sample_folder: Path, tmp_path: Path) -> None:
    other = tmp_path / "other"
    other.mkdir()
    (other / "note.txt").write_text(
        "The corporate card monthly limit is discussed in the other folder too."
    )
    library.index([sample_folder, other])
    only_other = library.search("corporate card monthly limit", folders=[str(other)], k=5)
    assert only_other and all(h.path.startswith(str(other)) for h in only_other)
    only_txt = library.search("corporate card monthly limit", types=["txt"], k=10)
    assert only_txt and all(h.type == "txt" for h in only_txt)
    only_md = library.search("corporate card", types=["md"], k=10, mode="dense")
    assert all(h.type == "md" for h in only_md)


def test_incremental_runs_touch_only_what_changed(library: Library, sample_folder: Path) -> None:
    first = library.index([sample_folder])
    again = library.index([sample_folder])
    assert (again.added, again.updated, again.removed, again.chunks_embedded) == (0, 0, 0, 0)
    assert again.unchanged == first.added

    note = sample_folder / "expense-limits-note.txt"
    note.write_text(
        note.read_text() + "\nParking at the airport is reimbursed up to EUR 19 per day.\n"
    )
    changed = library.index()
    assert changed.updated == 1 and changed.added == 0
    assert 0 < changed.chunks_embedded <= 3
    assert any(
        "EUR 19 per day" in h.text for h in library.search("airport parking reimbursement", k=3)
    )

    os.utime(note, (time.time() + 50, time.time() + 50))  # touched, same bytes: no re-embedding
    touched = library.index()
    assert touched.chunks_embedded == 0 and touched.updated == 0

    note.unlink()
    gone = library.index()
    assert gone.removed == 1
    assert not [
        h for h in library.search("airport parking reimbursement", k=10) if "EUR 19" in h.text
    ]
    assert not [
        h for h in library.search("airport parking", k=10, mode="bm25") if h.path == str(note)
    ]
    assert_consistent(library)


def test_identical_files_are_embedded_once(library: Library, sample_folder: Path) -> None:
    first = library.index([sample_folder])
    shutil.copy(sample_folder / "on-call-handbook.md", sample_folder / "copy-of-handbook.md")
    second = library.index()
    assert second.added == 1 and second.chunks_embedded == 0 and second.chunks_reused > 0
    assert first.chunks_embedded > 0
    hits = library.search("on-call", k=20, mode="bm25")
    assert {Path(h.path).name for h in hits} >= {"on-call-handbook.md", "copy-of-handbook.md"}
    assert_consistent(library)


def test_every_hostile_pdf_ends_indexed_failed_or_skipped(
    library: Library, shared_data: Path, tmp_path: Path
) -> None:
    folder = tmp_path / "pdfs"
    shutil.copytree(shared_data / "pdfs", folder)
    report = library.index([folder])
    docs = library.files.documents()
    pdfs = [d for d in docs if d.path.endswith(".pdf")]
    assert len(pdfs) == 36
    for doc in docs:
        assert doc.state.value in ("indexed", "failed", "skipped")
        if doc.state.value != "indexed":
            assert doc.reason, doc.path
    by_name = {Path(d.path).name: d for d in docs}
    assert by_name["encrypted-rc4-128.pdf"].reason == "encrypted"
    # Scans are read by OCR; an image with nothing on it says so.
    assert by_name["scanned-non-text-searchable.pdf"].state.value == "indexed"
    assert by_name["scan-ccittfax-image-only.pdf"].reason == "no readable text on the page image"
    assert by_name["arxiv-react-paper.pdf"].state.value == "indexed"
    assert report.failed == len([d for d in docs if d.state.value == "failed"])
    hits = library.search("ReAct reasoning and acting language models", k=3)
    assert hits and hits[0].path.endswith("arxiv-react-paper.pdf") and hits[0].page is not None
    assert_consistent(library)


def test_changing_the_index_config_reembeds_everything(
    lectern_home: Path, embedder, sample_folder: Path
) -> None:
    settings = Settings(home=lectern_home)
    with Library(settings, embedder=embedder) as lib:
        first = lib.index([sample_folder])
    changed = replace(settings, chunk_overlap_sentences=1)
    with Library(changed, embedder=embedder) as lib:
        assert lib.db.cursor().execute("SELECT count(*) FROM chunks").fetchone()[0] == 0
        assert lib.search("corporate card") == []  # never mixes old vectors in
        again = lib.index()
        assert again.updated + again.added == first.added and again.chunks_embedded > 0
        assert_consistent(lib)


def test_damaged_vector_file_is_rebuilt_and_stale_one_repaired(
    lectern_home: Path, embedder, sample_folder: Path
) -> None:
    settings = Settings(home=lectern_home)
    with Library(settings, embedder=embedder) as lib:
        lib.index([sample_folder])
        expected = [h.chunk_id for h in lib.search("corporate card monthly limit", mode="dense")]
    settings.vectors_path.write_bytes(b"not an index")
    with Library(settings, embedder=embedder) as lib:
        assert [
            h.chunk_id for h in lib.search("corporate card monthly limit", mode="dense")
        ] == expected
        assert lib.vectors.repair_report.startswith("rebuilt, damaged")
        assert_consistent(lib)


def test_second_process_gets_a_clear_busy_error(library: Library, lectern_home: Path) -> None:
    code = (
        "from core.library import Library\n"
        "from core.errors import IndexBusyError\n"
        "try:\n    Library()\nexcept IndexBusyError as e:\n    print('BUSY', e.message)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "LECTERN_HOME": str(lectern_home)},
        cwd=REPO,
    )
    assert "BUSY Another Lectern process" in out.stdout, out.stderr
    assert IndexBusyError


def _write_corpus(folder: Path, shared_data: Path) -> int:
    data = json.loads((shared_data / "squad-small" / "squad_small.json").read_text())
    folder.mkdir()
    n = 0
    for article in data["data"]:
        for i, paragraph in enumerate(article["paragraphs"]):
            (folder / f"{article['title']}-{i:03d}.txt").write_text(paragraph["context"])
            n += 1
    return n


def test_kill_9_mid_index_then_rerun_finishes_cleanly(
    lectern_home: Path, embedder, shared_data: Path, tmp_path: Path
) -> None:
    folder = tmp_path / "corpus"
    total = _write_corpus(folder, shared_data)
    env = {**os.environ, "LECTERN_HOME": str(lectern_home), "LECTERN_PROGRESS": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "core", "index", str(folder)],
        cwd=REPO,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    buffer = ""
    deadline = time.monotonic() + 300
    killed_at = None
    assert proc.stderr is not None
    os.set_blocking(proc.stderr.fileno(), False)
    while time.monotonic() < deadline and proc.poll() is None:
        buffer += drain(proc.stderr.fileno())
        done = files_done(buffer, total)
        if done is not None and done >= 15:
            proc.send_signal(signal.SIGKILL)
            killed_at = done
            break
        time.sleep(0.05)
    proc.wait(timeout=30)
    assert killed_at is not None and killed_at < total, buffer[-500:]
    with Library(Settings(home=lectern_home), embedder=embedder) as lib:
        before = {d.path for d in lib.files.documents(state="indexed")}
        assert len(before) >= killed_at - 1  # committed per file
        assert_consistent(lib)
        report = lib.index()
        assert report.added == total - len(before)
        assert len(lib.files.documents(state="indexed")) == total
        assert_consistent(lib)
        hits = lib.search("Normans conquest of England in 1066", k=3)
        assert hits and "Norman" in hits[0].text


def test_cli_json_contracts(lectern_home: Path, sample_folder: Path) -> None:
    env = {**os.environ, "LECTERN_HOME": str(lectern_home)}

    def run(*args: str) -> dict:
        out = subprocess.run(
            [sys.executable, "-m", "core", *args],
            capture_output=True,
            text=True,
            env=env,
            cwd=REPO,
            timeout=300,
        )
        assert out.returncode == 0, out.stderr
        return json.loads(out.stdout.strip().splitlines()[-1])

    indexed = run("index", str(sample_folder), "--json")
    assert indexed["added"] == 5 and indexed["failed"] == 0
    status = run("status", "--json")
    assert {d["state"] for d in status["documents"]} == {"indexed"}
    assert all({"path", "state", "reason", "chunks"} <= set(d) for d in status["documents"])
    found = run("search", "who approves claims above EUR 2,500", "--json", "-k", "2")
    first = found["results"][0]
    assert {"document", "page", "score", "text", "start", "end"} <= set(first)
    assert "finance director" in first["text"]


def test_squad_small_retrieval_quality(
    tmp_path: Path, shared_data: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from core.evaluation.beir import evaluate

    monkeypatch.setenv("LECTERN_HOME", str(tmp_path / "home"))
    summary = evaluate(shared_data / "squad-small" / "beir", modes=("hybrid", "bm25", "dense"))
    by_mode = summary["by_mode"]
    # 87 paragraphs about two topics: the right paragraph should almost always be in the top 5
    assert by_mode["hybrid"]["recall@5"] >= 0.85
    assert (
        by_mode["hybrid"]["ndcg@10"]
        >= max(by_mode["bm25"]["ndcg@10"], by_mode["dense"]["ndcg@10"]) - 0.02
    )
    assert summary["failed"] == 0


def test_editing_one_section_reembeds_only_that_section(
    library: Library, sample_folder: Path
) -> None:
    handbook = sample_folder / "on-call-handbook.md"
    library.index([sample_folder])
    total = library.files.documents(folder=str(sample_folder), state="indexed")
    chunks_before = next(d.chunks for d in total if d.path == str(handbook))
    assert chunks_before >= 4
    text = handbook.read_text()
    handbook.write_text(
        text.rstrip() + "\n\nThe pager escalation drill runs every second Thursday.\n"
    )
    report = library.index()
    assert report.updated == 1
    assert 1 <= report.chunks_embedded < chunks_before  # unchanged sections keep their vectors
    assert report.chunks_reused > 0
    hits = library.search("when does the pager escalation drill run", k=3)
    assert any("second Thursday" in h.text for h in hits)
    assert_consistent(library)


def test_keyword_merge_survives_another_open_write_transaction(
    library: Library, sample_folder: Path
) -> None:
    library.index([sample_folder])
    other = library.db._con.cursor()  # e.g. the conversation store writing from another thread
    other.execute("BEGIN TRANSACTION")
    other.execute("INSERT INTO meta VALUES ('probe', 'x')")
    assert library.keyword.refresh(force_merge=True) == "merged"  # CHECKPOINT refused: deferred
    other.execute("COMMIT")
    assert any(
        "5,000" in h.text for h in library.search("corporate card monthly limit", mode="bm25")
    )
    library.keyword.refresh()  # the deferred checkpoint happens now
    assert not library.keyword.upkeep._checkpoint_pending


def test_keyword_base_rebuild_runs_in_the_background(
    library: Library, sample_folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import threading

    import core.store.keyword.upkeep as upkeep_module

    library.index([sample_folder])
    # Any delta makes a base rebuild due, so the next run's publish starts one.
    monkeypatch.setattr(upkeep_module, "MERGE_MIN_CHUNKS", 0)
    monkeypatch.setattr(upkeep_module, "MERGE_FRACTION", 0.0)
    (sample_folder / "pager.md").write_text("# Pager\n\nThe escalation code is QX-4471.\n")
    building, release = threading.Event(), threading.Event()
    build = library.keyword.upkeep._build

    def held_build(cur: object, name: str, where: str, params: list[object]) -> None:
        if name.startswith("kw_base"):
            building.set()
            assert release.wait(60)
        build(cur, name, where, params)  # type: ignore[arg-type]

    monkeypatch.setattr(library.keyword.upkeep, "_build", held_build)
    try:
        report = library.index()  # returns while the rebuild is still held
        assert report.added == 1
        assert building.wait(30) and library.keyword.merging
        # Meanwhile the new file is searchable (through the delta) and writers go on.
        assert any("QX-4471" in h.text for h in library.search("QX-4471", mode="bm25"))
        with library.db.transaction() as cur:
            library.db.set_meta("probe", "written during the rebuild", cur)
    finally:
        release.set()
    library.keyword.wait_for_merge()
    assert not library.keyword.merging
    assert library.keyword.delta_size() == 0  # everything is in the new base
    assert library.keyword.is_current()
    assert any("QX-4471" in h.text for h in library.search("QX-4471", mode="bm25"))
    assert any(
        "5,000" in h.text for h in library.search("corporate card monthly limit", mode="bm25")
    )
    assert_consistent(library)


def test_vector_save_does_not_hold_up_searches(
    library: Library, sample_folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import threading

    import core.store.vectors as vectors_module

    library.index([sample_folder])
    vectors = library.vectors
    vectors._dirty = True
    writing, release = threading.Event(), threading.Event()
    held_too_long: list[bool] = []
    real_fsync = vectors_module.os.fsync

    def held_fsync(fd: int) -> None:
        writing.set()
        # Released only after the search below returns: a search waiting for the save
        # would sit out this whole wait.
        held_too_long.append(not release.wait(60))
        real_fsync(fd)

    monkeypatch.setattr(vectors_module.os, "fsync", held_fsync)
    saver = threading.Thread(target=vectors.save)
    saver.start()
    try:
        assert writing.wait(30)
        # The file is being written; a dense search still runs now.
        hits = library.search("corporate card monthly limit", mode="dense")
        assert hits
    finally:
        release.set()
        saver.join(30)
    assert held_too_long == [False]
    assert not vectors._dirty
    assert vectors.path.exists()
