"""Damage a library the ways a crash, a disk or a person can, and check that it opens,
says what happened, keeps the damaged file aside and loses nothing it cannot rebuild."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from core.config import Settings
from core.errors import DiskFullError, IndexBusyError, LecternError
from core.library import KEYWORD_FILE, Library
from core.records import Citation, Hit
from tests.conftest import REPO
from tests.indexing.test_index_and_search import assert_consistent

# damage, crashes and full disks on real libraries: not in `make test-fast`.
pytestmark = pytest.mark.slow

QUESTION = "What is the corporate card monthly limit?"

# Index a folder, keep a conversation, then die without closing: the last changes are
# left in the write-ahead log, as after a crash or a power cut.
_CRASHING_RUN = textwrap.dedent(
    """
    import os, sys
    from core.config import Settings
    from core.library import Library
    from core.records import Hit
    from pathlib import Path

    library = Library(Settings(home=Path(sys.argv[1])))
    library.index([sys.argv[2]])
    store = library.conversations
    conversation = store.create(sys.argv[3])
    store.add_turn(conversation, question=sys.argv[3], standalone_question=sys.argv[3],
                   answer="5,000 a month", mode="extractive", sources=[], citations=[])
    library.vectors.save()
    if sys.argv[4] == "checkpoint":
        library.db.checkpoint()
    os._exit(0)
    """
)


def crashed_library(home: Path, folder: Path, *, checkpoint: bool = False) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    mode = "checkpoint" if checkpoint else "crash"
    subprocess.run(
        [sys.executable, "-c", _CRASHING_RUN, str(home), str(folder), QUESTION, mode],
        check=True,
        env=env,
        cwd=REPO,
        timeout=600,
    )


def open_library(home: Path, embedder: object) -> Library:
    return Library(Settings(home=home), embedder=embedder)  # type: ignore[arg-type]


@pytest.fixture()
def opened() -> Iterator[list[Library]]:
    libraries: list[Library] = []
    yield libraries
    for library in libraries:
        library.close()


def assert_conversation_kept(library: Library) -> None:
    conversations = library.conversations.list()
    assert [c.title for c in conversations] == [QUESTION]
    turns = library.conversations.turns(conversations[0].id)
    assert [t.answer for t in turns] == ["5,000 a month"]


def assert_indexed_again(library: Library, folder: Path) -> None:
    library.sync()
    hits = library.search("corporate card monthly limit", mode="bm25")
    assert any("5,000" in h.text for h in hits)
    assert library.files.documents(state="pending") == []
    assert len(library.files.documents(state="indexed")) == len(list(folder.iterdir()))
    assert_consistent(library)


def flip_byte(path: Path, at: int) -> None:
    with open(path, "r+b") as handle:
        handle.seek(at)
        value = handle.read(1)
        handle.seek(at)
        handle.write(bytes([value[0] ^ 0xFF]))


def test_wal_with_flipped_bytes_is_set_aside_and_the_library_opens(
    tmp_path: Path, sample_folder: Path, embedder: object, opened: list[Library]
) -> None:
    home = tmp_path / "home"
    crashed_library(home, sample_folder)
    wal = home / "lectern.duckdb.wal"
    assert wal.stat().st_size > 0
    original = wal.read_bytes()
    flip_byte(wal, wal.stat().st_size // 2)

    library = open_library(home, embedder)
    opened.append(library)
    kinds = [n.kind for n in library.recovery_notices]
    assert kinds == ["log_set_aside"]
    notice = library.recovery_notices[0]
    assert "redone from your files" in notice.message
    kept = Path(notice.kept_at)
    assert kept.exists() and kept.name.startswith("lectern.duckdb.wal.unreplayable-")
    assert len(kept.read_bytes()) == len(original)  # kept as it was, never deleted
    assert library.status()["recovery"][-1]["kind"] == "log_set_aside"
    assert_indexed_again(library, sample_folder)


def test_wal_cut_short_is_reported(
    tmp_path: Path, sample_folder: Path, embedder: object, opened: list[Library]
) -> None:
    home = tmp_path / "home"
    crashed_library(home, sample_folder)
    wal = home / "lectern.duckdb.wal"
    os.truncate(wal, wal.stat().st_size // 2)

    library = open_library(home, embedder)
    opened.append(library)
    assert [n.kind for n in library.recovery_notices] == ["log_cut_short"]
    assert "newest of them were lost" in library.recovery_notices[0].message
    assert_indexed_again(library, sample_folder)
    library.close()
    opened.clear()
    # Told once: the next open is quiet.
    again = open_library(home, embedder)
    opened.append(again)
    assert again.recovery_notices == []


def test_damaged_main_file_is_kept_aside_and_rebuilt_with_conversations(
    tmp_path: Path, sample_folder: Path, embedder: object, opened: list[Library]
) -> None:
    home = tmp_path / "home"
    crashed_library(home, sample_folder, checkpoint=True)
    main = home / "lectern.duckdb"
    with open(main, "r+b") as handle:
        handle.write(b"\0" * 4096)

    library = open_library(home, embedder)
    opened.append(library)
    notices = library.recovery_notices
    assert [n.kind for n in notices] == ["library_rebuilt"]
    assert "busy" not in notices[0].message and "another" not in notices[0].message.lower()
    kept = Path(notices[0].kept_at)
    assert kept.exists() and kept.name.startswith("lectern.duckdb.damaged-")
    assert library.files.folders() == [str(sample_folder)]
    assert_conversation_kept(library)
    assert_indexed_again(library, sample_folder)


def test_damaged_block_is_not_reported_as_busy(tmp_path: Path) -> None:
    """'block' in DuckDB's damage report once matched a test for 'lock'."""
    from core.errors import DamagedStoreError
    from core.store.db import Database

    path = tmp_path / "x.duckdb"
    Database(path).close()
    with open(path, "r+b") as handle:
        handle.seek(4096 * 3)
        handle.write(b"\x55" * 8192)
    with pytest.raises(LecternError) as caught:
        Database(path)
    assert not isinstance(caught.value, IndexBusyError)
    assert isinstance(caught.value, DamagedStoreError)


def test_damaged_keyword_file_is_rebuilt_while_meaning_search_works(
    tmp_path: Path, sample_folder: Path, embedder: object, opened: list[Library]
) -> None:
    home = tmp_path / "home"
    library = open_library(home, embedder)
    library.index([sample_folder])
    library.close()
    keyword_file = home / KEYWORD_FILE
    with open(keyword_file, "r+b") as handle:
        handle.write(b"\0" * 4096)

    library = open_library(home, embedder)
    opened.append(library)
    assert [n.kind for n in library.recovery_notices] == ["keyword_rebuilding"]
    assert Path(library.recovery_notices[0].kept_at).name.startswith("keyword.duckdb.broken-")
    dense = library.search("how much may I spend on the company card each month", mode="dense")
    assert any("5,000" in h.text for h in dense)
    library.keyword.wait_for_merge()
    assert library.status()["keyword_index"] == "ready"
    assert_indexed_again(library, sample_folder)


def test_keyword_file_holds_every_fts_schema(
    tmp_path: Path, sample_folder: Path, embedder: object, opened: list[Library]
) -> None:
    """No fts DDL may sit in the library's own database (or its log)."""
    library = open_library(tmp_path / "home", embedder)
    opened.append(library)
    library.index([sample_folder])
    library.keyword.refresh(force_merge=True)
    rows = (
        library.db.cursor()
        .execute("SELECT catalog_name, schema_name FROM information_schema.schemata")
        .fetchall()
    )
    fts = [(c, s) for c, s in rows if s.startswith("fts_")]
    assert fts and all(c == "kw" for c, _ in fts)


def test_zeroed_vector_payload_is_detected_and_rebuilt(
    tmp_path: Path, sample_folder: Path, embedder: object, opened: list[Library]
) -> None:
    home = tmp_path / "home"
    library = open_library(home, embedder)
    library.index([sample_folder])
    probe = "how much may I spend on the company card each month"
    before = [h.chunk_id for h in library.search(probe, mode="dense", k=3)]
    library.close()
    path = home / "vectors.usearch"
    raw = bytearray(path.read_bytes())
    # The vectors sit after the header and graph; zero the second half of the file
    # except its last bytes (the checksum), as the issue did.
    end = len(raw) - 64
    raw[len(raw) // 2 : end] = b"\0" * (end - len(raw) // 2)
    path.write_bytes(bytes(raw))

    library = open_library(home, embedder)
    opened.append(library)
    assert library.vectors.repair_report.startswith("rebuilt, damaged")
    assert "vectors_rebuilt" in [n.kind for n in library.recovery_notices]
    assert [h.chunk_id for h in library.search(probe, mode="dense", k=3)] == before
    assert_consistent(library)


def test_sampled_vectors_catch_a_file_with_a_valid_checksum_but_wrong_content(
    tmp_path: Path, sample_folder: Path, embedder: object, opened: list[Library]
) -> None:
    from core.store.vectors import checksum_trailer

    home = tmp_path / "home"
    library = open_library(home, embedder)
    library.index([sample_folder])
    index = library.vectors._index
    keys = np.asarray(index.keys, dtype=np.uint64)
    # Every key kept, every vector replaced: the keys-only check used to say "ok".
    index.remove(keys.tolist())
    index.add(keys, np.random.default_rng(1).normal(size=(len(keys), index.ndim)).astype("f4"))
    data = index.save()
    library.close()
    (home / "vectors.usearch").write_bytes(bytes(data) + checksum_trailer(data))

    library = open_library(home, embedder)
    opened.append(library)
    assert library.vectors.repair_report.startswith("rebuilt, damaged")
    assert_consistent(library)


# --- a full disk ---------------------------------------------------------------------


def _mount_tmpfs(path: Path, size: str) -> bool:
    path.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
        capture_output=True,
    )
    return done.returncode == 0


@pytest.fixture()
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 160 MB disk that fills up (tmpfs needs root, which these machines and CI have)."""
    disk = tmp_path / "disk"
    if os.geteuid() != 0 or not _mount_tmpfs(disk, "160m"):
        pytest.skip("mounting a small tmpfs needs root")
    try:
        yield disk
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)


def fill(disk: Path, leave_bytes: int) -> Path:
    filler = disk / "filler"
    free = os.statvfs(disk).f_bavail * os.statvfs(disk).f_frsize
    with open(filler, "wb") as handle:
        chunk = b"\0" * (1 << 20)
        remaining = max(0, free - leave_bytes)
        while remaining > 0:
            handle.write(chunk[: min(len(chunk), remaining)])
            remaining -= len(chunk)
    return filler


@pytest.mark.parametrize("where", ["before writing", "when DuckDB finds it full"])
def test_full_disk_stops_indexing_plainly_and_reading_keeps_working(
    where: str,
    small_disk: Path,
    tmp_path: Path,
    sample_folder: Path,
    embedder: object,
    shared_data: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    home = small_disk / "home"
    library = open_library(home, embedder)
    try:
        library.index([sample_folder])
        store = library.conversations
        conversation = store.create(QUESTION)
        hit = library.search("corporate card monthly limit", mode="bm25")[0]
        store.add_turn(
            conversation,
            question=QUESTION,
            standalone_question=QUESTION,
            answer="5,000 a month",
            mode="extractive",
            sources=[hit],
            citations=[],
        )
        library.db.checkpoint()
        more = tmp_path / "more"
        more.mkdir()
        for n, path in enumerate(sorted((shared_data / "pdfs").glob("*.pdf"))[:8]):
            (more / f"{n}-{path.name}").write_bytes(path.read_bytes())
        if where == "before writing":
            filler = fill(small_disk, leave_bytes=8 * 1024 * 1024)
        else:
            # Without the check ahead of writing, DuckDB's own "No space left" is
            # reported the same way.
            monkeypatch.setattr("core.indexing.indexer.MIN_FREE_BYTES", 0)
            filler = fill(small_disk, leave_bytes=256 * 1024)

        with pytest.raises(DiskFullError) as caught:
            library.index([more])
        error = caught.value
        assert str(home) in error.message and "MB free" in error.message
        assert "needs about" in error.message and error.hint
        # Reading goes on: search, status and the conversation.
        assert any("5,000" in h.text for h in library.search("corporate card", mode="bm25"))
        assert library.status()["counts"]["indexed"] >= len(list(sample_folder.iterdir()))
        assert_conversation_kept(library)
        library.close()

        # A fresh open on the full disk also works and reads everything.
        library = open_library(home, embedder)
        assert any("5,000" in h.text for h in library.search("corporate card", mode="hybrid"))
        assert_conversation_kept(library)
        status = library.status()
        assert status["counts"]["indexed"] >= len(list(sample_folder.iterdir()))

        filler.unlink()
        report = library.index([more])
        assert report.failed + report.skipped + report.added + report.unchanged >= 1
        assert library.files.documents(state="pending") == []
        assert len(library.files.documents(folder=str(more))) == len(list(more.iterdir()))
        assert_consistent(library)
        assert_conversation_kept(library)
    finally:
        library.close()


def test_backup_follows_conversations_and_folders(library: Library, sample_folder: Path) -> None:
    library.add_folder(sample_folder)
    store = library.conversations
    first = store.create("first question")
    second = store.create("second question")
    source = Hit(
        1, 1, str(sample_folder / "a.md"), "a", "md", "the quoted text", 0, 15, None, None, (), 1.0
    )
    store.add_turn(
        second,
        question="second question",
        standalone_question="second question",
        answer="an answer",
        mode="extractive",
        sources=[source],
        citations=[Citation(1, source, ())],
    )
    store.delete(first)
    backup = library.backup
    assert backup.load_folders() == [str(sample_folder)]
    saved = backup.load_conversations()
    assert [c["title"] for c in saved] == ["second question"]
    assert saved[0]["turns"][0]["sources"][0]["text"] == "the quoted text"
    # A removed file leaves no text behind in the backup either.
    store.forget_documents([str(sample_folder / "a.md")])
    saved = backup.load_conversations()
    assert saved[0]["turns"][0]["sources"][0]["text"] == ""
    assert json.loads((backup.folder / "folders.json").read_text())["folders"]


def test_lectern_watch_waits_for_room_on_a_full_disk_then_catches_up(
    small_disk: Path, tmp_path: Path
) -> None:
    """A full disk holds `lectern watch` (one sentence, not an error per file event) until
    there is room; then one reconcile indexes what changed meanwhile
    (core/app/coordinator.py, the app's rule too)."""
    home = small_disk / "home"
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "first.md").write_text("# First\n\nThe boiler was serviced in March.\n")
    out, err = tmp_path / "watch.out", tmp_path / "watch.err"
    env = {**os.environ, "LECTERN_HOME": str(home), "PYTHONPATH": str(REPO)}
    with out.open("w") as stdout, err.open("w") as stderr:
        watch = subprocess.Popen(
            [sys.executable, "-m", "core", "watch", str(docs), "--reconcile", "0"],
            cwd=REPO,
            env=env,
            stdout=stdout,
            stderr=stderr,
        )
    try:

        def wait_for(text: str, path: Path = out, timeout: float = 240.0) -> None:
            deadline = time.monotonic() + timeout
            while text not in path.read_text():
                assert watch.poll() is None, out.read_text() + err.read_text()
                assert time.monotonic() < deadline, f"{text!r} never came:\n" + (
                    out.read_text() + err.read_text()
                )
                time.sleep(0.2)

        wait_for("Watching 1 folder")
        filler = fill(small_disk, leave_bytes=8 * 1024 * 1024)
        (docs / "second.md").write_text("# Second\n\nThe chimney sweep comes in October.\n")
        wait_for("Indexing waits until there is room on the disk")
        assert "Traceback" not in err.read_text()
        filler.unlink()
        wait_for("There is room on the disk again; indexing carries on.")
        wait_for("reconciled: 1 added")
    finally:
        watch.terminate()
        watch.wait(timeout=120)
    assert watch.returncode == 0, out.read_text() + err.read_text()
    library = Library(Settings(home=home), migrate=False)
    try:
        assert any("chimney" in h.text for h in library.search("chimney sweep", mode="bm25"))
    finally:
        library.close()
