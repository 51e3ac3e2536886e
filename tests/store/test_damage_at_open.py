"""Issue 29: whatever fails while a library opens is classified by what it is, wherever
in the open sequence it happens, and handled by class:

- damage to the database (cut short, garbled) sets it aside and restores the record
  from the backup;
- damage to a derived file (the keyword file) rebuilds it and never stops the open;
- a read-only data folder opens for reading, and indexing says why it cannot;
- a file that may not be opened (no permission, a folder in its place) is named, and
  nothing is changed.

Every case goes through the calls the app and the command make: ``Library(Settings(...))``
or ``lectern`` in a child process with LECTERN_HOME set. Read-only folders and denied
files are real: a read-only bind mount, ``chattr +i`` (which denies even root), a child
run as another user, a folder where a file should be; each is skipped where this machine
cannot make it.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path

import duckdb
import pytest

from bench.crash_torture import (
    CUT_FRACTIONS,
    STATES,
    Baseline,
    build_baseline,
    cut_and_open,
)
from core.config import Settings
from core.errors import LibraryAccessError, ReadOnlyLibraryError
from core.library import KEYWORD_FILE, Library
from tests.conftest import REPO, SAMPLE_DOCS
from tests.crash_harness import lectern, lectern_env

# real libraries, damaged and reopened: not in `make test-fast`.
pytestmark = pytest.mark.slow

QUESTION = "What is the corporate card monthly limit?"
PROBE = "corporate card monthly limit"
UNEXPECTED = "something unexpected went wrong"
NOBODY = 65534


def _open(home: Path, embedder: object) -> Library:
    return Library(Settings(home=home), embedder=embedder)  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory, embedder: object) -> tuple[Path, Path]:
    """(data folder, documents folder) of a library of the sample documents with one
    conversation, closed cleanly; tests work on copies."""
    root = tmp_path_factory.mktemp("pristine")
    folder = root / "docs"
    shutil.copytree(SAMPLE_DOCS, folder)
    home = root / "home"
    library = _open(home, embedder)
    try:
        library.index([folder])
        conversation = library.conversations.create(QUESTION)
        library.conversations.add_turn(
            conversation,
            question=QUESTION,
            standalone_question=QUESTION,
            answer="5,000 a month",
            mode="extractive",
            sources=[],
            citations=[],
        )
    finally:
        library.close()
    return home, folder


@pytest.fixture()
def home(pristine: tuple[Path, Path], tmp_path: Path) -> Path:
    copy = tmp_path / "home"
    shutil.copytree(pristine[0], copy)
    return copy


def listing(home: Path) -> dict[str, bytes]:
    """Every file of the data folder with its content: what "nothing changed" compares."""
    return {
        str(p.relative_to(home)): p.read_bytes()
        for p in sorted(home.rglob("*"))
        if p.is_file() and not p.name.startswith(".lectern.sock")
    }


def cut(path: Path, fraction: float) -> None:
    os.truncate(path, int(path.stat().st_size * fraction))


def assert_plain(done: subprocess.CompletedProcess[str]) -> None:
    assert UNEXPECTED not in done.stderr, done.stderr
    assert "Traceback" not in done.stderr, done.stderr


# --- damage found at the first read -------------------------------------------------


def test_main_file_cut_in_half_is_set_aside_and_restored_from_backup(
    home: Path, pristine: tuple[Path, Path], embedder: object
) -> None:
    """Before: every command failed with "something unexpected went wrong
    (IOException ... Could not read enough bytes ...)", nothing set aside."""
    cut(home / "lectern.duckdb", 0.5)

    done = lectern(home, "status")
    assert_plain(done)
    assert done.returncode == 0, done.stderr
    assert "damaged" in done.stderr and "kept at" in done.stderr
    kept = [p.name for p in home.iterdir() if p.name.startswith("lectern.duckdb.damaged-")]
    assert len(kept) == 1

    library = _open(home, embedder)
    try:
        assert library.files.folders() == [str(pristine[1])]  # from the backup
        conversations = library.conversations.list()
        assert [c.title for c in conversations] == [QUESTION]
        library.sync()
        assert any("5,000" in h.text for h in library.search(PROBE, mode="bm25"))
        assert len(library.files.documents(state="indexed")) == len(list(pristine[1].iterdir()))
    finally:
        library.close()


def test_keyword_file_cut_short_is_rebuilt_and_never_stops_the_open(
    home: Path, embedder: object
) -> None:
    """Before: the format check read kw_meta outside the guarded attach, and every
    command failed with "something unexpected went wrong"."""
    cut(home / KEYWORD_FILE, 0.5)

    done = lectern(home, "status")
    assert_plain(done)
    assert done.returncode == 0, done.stderr
    assert "keyword index could not be opened" in done.stderr
    assert any(p.name.startswith("keyword.duckdb.broken-") for p in home.iterdir())

    library = _open(home, embedder)
    try:
        library.keyword.wait_for_merge()
        assert library.status()["keyword_index"] == "ready"
        assert any("5,000" in h.text for h in library.search(PROBE, mode="bm25"))
    finally:
        library.close()


def test_damage_met_later_in_the_open_sequence_is_classified_and_repaired(
    home: Path, pristine: tuple[Path, Path], embedder: object
) -> None:
    """A block the database's own open never reads (the folders, conversations and
    turns, read when the backup is written again from the record) is damaged: found in
    the middle of Library's open sequence. Before: a bare DuckDB error ("Corrupt
    database file: computed checksum ...")."""
    db = duckdb.connect(str(home / "lectern.duckdb"), read_only=True)

    def segments(table: str) -> set[tuple[int, int]]:
        rows = db.execute(
            f"SELECT block_id, block_offset FROM pragma_storage_info('{table}')"
        ).fetchall()
        return {(int(b), int(o)) for b, o in rows if b is not None and b >= 0}

    read_later = segments("folders") | segments("conversations") | segments("turns")
    meta_blocks = {b for b, _ in segments("meta")}
    candidates = sorted((b, o) for b, o in read_later if b not in meta_blocks)
    row = db.execute("SELECT block_size FROM pragma_database_size()").fetchone()
    db.close()
    assert candidates and row is not None, "the record's tables all share the meta block"
    block, offset = candidates[0]
    # A block starts with its 8-byte checksum; the segment's bytes follow at its offset.
    at = 3 * 4096 + block * int(row[0]) + 8 + offset
    with open(home / "lectern.duckdb", "r+b") as handle:
        handle.seek(at)
        data = handle.read(64)
        handle.seek(at)
        handle.write(bytes(b ^ 0xFF for b in data))
    # No copy of the folders: the open writes the backup again from the record, reading
    # the folders, conversations and turns.
    (home / "backup" / "folders.json").unlink()

    library = _open(home, embedder)
    try:
        assert [n.kind for n in library.recovery_notices] == ["library_rebuilt"]
        kept = Path(library.recovery_notices[0].kept_at)
        assert kept.name.startswith("lectern.duckdb.damaged-")
        # The conversation's own copy was whole: it comes back.
        assert [c.title for c in library.conversations.list()] == [QUESTION]
    finally:
        library.close()


# --- every file of the data folder cut at three points ------------------------------


@pytest.fixture(scope="module")
def baselines(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Baseline]:
    """The sample documents indexed with a conversation, closed cleanly ("closed") or
    with a last file and turn left in the write-ahead logs by a process that died
    ("crashed"), as bench/crash_torture.py --truncate makes them; each made once."""
    made: dict[str, Baseline] = {}
    root = tmp_path_factory.mktemp("cuts")

    def get(state: str) -> Baseline:
        if state not in made:
            made[state] = build_baseline(root, state=state)
        return made[state]

    return get


@pytest.fixture()
def crashed_baseline(baselines: Callable[[str], Baseline]) -> Baseline:
    return baselines("crashed")


@pytest.mark.parametrize("fraction", CUT_FRACTIONS)
@pytest.mark.parametrize("state", STATES)
def test_every_file_cut_short_still_opens_and_loses_nothing(
    state: str,
    fraction: float,
    baselines: Callable[[str], Baseline],
    tmp_path: Path,
    embedder: object,
) -> None:
    baseline = baselines(state)
    assert {"lectern.duckdb", "keyword.duckdb", "vectors.usearch"} <= set(baseline.files)
    failures = []
    for file in baseline.files:
        result = cut_and_open(baseline, file, fraction, tmp_path, embedder)
        if not (result.opened and result.status_ok and result.search_ok):
            failures.append(f"{file}: {result.error or 'status or search failed'}")
        elif result.documents_lost or result.turns_lost:
            failures.append(
                f"{file}: {result.documents_lost} documents, {result.turns_lost} turns lost"
            )
        elif file == "lectern.duckdb":
            assert result.repairs == ("library_rebuilt",), result.repairs
            # The log goes aside with the damaged file; it is not blamed on its own.
            assert any(n.startswith("lectern.duckdb.damaged-") for n in result.set_aside)
        elif file == KEYWORD_FILE:
            assert result.repairs == ("keyword_rebuilding",), result.repairs
    assert not failures, "\n".join(failures)


# --- a read-only data folder ----------------------------------------------------------


def _mount_read_only(folder: Path) -> bool:
    if os.geteuid() != 0:
        return False
    done = subprocess.run(["mount", "--bind", str(folder), str(folder)], capture_output=True)
    if done.returncode:
        return False
    done = subprocess.run(["mount", "-o", "remount,bind,ro", str(folder)], capture_output=True)
    if done.returncode:
        subprocess.run(["umount", str(folder)], check=False)
        return False
    return True


@pytest.fixture()
def read_only_home(home: Path) -> Iterator[Path]:
    """The library's folder as a read-only mount of itself (as a read-only disk is)."""
    if not _mount_read_only(home):
        pytest.skip("a read-only bind mount needs root and mount")
    try:
        yield home
    finally:
        subprocess.run(["umount", "-l", str(home)], check=False)


def test_read_only_folder_opens_for_reading_and_says_why_it_cannot_index(
    read_only_home: Path, pristine: tuple[Path, Path], embedder: object
) -> None:
    """Before: opening tried to rename the healthy lectern.duckdb aside and failed with
    a raw "OSError: Read-only file system"."""
    home = read_only_home
    before = listing(home)
    with pytest.raises(OSError):
        (home / "probe").write_text("x")  # the mount is really read-only

    status = lectern(home, "status")
    assert_plain(status)
    assert status.returncode == 0, status.stderr
    assert "read-only" in status.stderr and "opened the library for reading" in status.stderr
    assert "5 indexed" in status.stdout

    search = lectern(home, "search", PROBE)
    assert_plain(search)
    assert search.returncode == 0 and "5,000" in search.stdout, search.stderr

    index = lectern(home, "index", str(pristine[1]))
    assert_plain(index)
    assert index.returncode != 0
    assert "Lectern cannot index" in index.stderr and "read-only" in index.stderr
    assert "Hint:" in index.stderr

    library = _open(home, embedder)
    try:
        assert library.read_only
        assert [n.kind for n in library.recovery_notices] == ["read_only"]
        assert any("5,000" in h.text for h in library.search(PROBE, mode="hybrid"))
        assert library.status()["keyword_index"] == "ready"
        with pytest.raises(ReadOnlyLibraryError) as caught:
            library.index([pristine[1]])
        assert "cannot index" in caught.value.message and caught.value.hint
        with pytest.raises(ReadOnlyLibraryError):
            library.sync()
    finally:
        library.close()
    assert listing(home) == before  # never renamed, never written


def test_read_only_folder_after_a_crash_reads_the_log_and_rebuilds_vectors_in_memory(
    crashed_baseline: Baseline, tmp_path: Path, embedder: object
) -> None:
    """A library left by a process that died (its last file only in the write-ahead
    log) with no vector file, on a read-only mount: the log is replayed in memory, the
    vectors are rebuilt in memory, and nothing is written. Before: the healthy database
    was taken for damage; with that fixed, the vector file's rebuild failed with a raw
    "OSError: Read-only file system".
    """
    home = tmp_path / "home"
    shutil.copytree(crashed_baseline.home, home)
    assert (home / "lectern.duckdb.wal").stat().st_size > 0
    (home / "vectors.usearch").unlink()
    if not _mount_read_only(home):
        pytest.skip("a read-only bind mount needs root and mount")
    try:
        before = listing(home)
        library = _open(home, embedder)
        try:
            assert library.read_only
            late = [d.path for d in library.files.documents(state="indexed")]
            assert any(p.endswith("late-note.txt") for p in late)
            dense = library.search("airport parking refund for several days", mode="dense")
            assert any("airport" in h.text for h in dense)
            assert any("5,000" in h.text for h in library.search(PROBE, mode="hybrid"))
        finally:
            library.close()
        assert listing(home) == before
    finally:
        subprocess.run(["umount", "-l", str(home)], check=False)


# --- a file that may not be opened ------------------------------------------------------


def _immutable(path: Path) -> bool:
    if shutil.which("chattr") is None:
        return False
    return subprocess.run(["chattr", "+i", str(path)], capture_output=True).returncode == 0


@pytest.mark.parametrize("name", ["lectern.duckdb", KEYWORD_FILE])
def test_file_that_may_not_be_written_is_named_and_nothing_changes(
    name: str, home: Path, embedder: object
) -> None:
    """``chattr +i``: even root may not open the file for writing ("Operation not
    permitted"). Before: the healthy file was taken for damage and renamed aside (the
    rename failed with a raw PermissionError)."""
    target = home / name
    if not _immutable(target):
        pytest.skip("chattr +i is not supported here")
    try:
        before = listing(home)
        done = lectern(home, "status")
        assert_plain(done)
        assert done.returncode != 0
        assert f"Lectern may not open {target}" in done.stderr
        assert "Hint:" in done.stderr
        with pytest.raises(LibraryAccessError) as caught:
            _open(home, embedder)
        assert caught.value.path == str(target)
        assert listing(home) == before
        assert not [p for p in home.iterdir() if ".damaged-" in p.name or ".broken-" in p.name]
    finally:
        subprocess.run(["chattr", "-i", str(target)], check=False)


def _as_nobody(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``lectern`` run as another user (root may open any file; that user may not)."""
    return subprocess.run(
        [
            "setpriv",
            f"--reuid={NOBODY}",
            f"--regid={NOBODY}",
            "--clear-groups",
            sys.executable,
            "-m",
            "core.cli.main",
            *args,
        ],
        cwd=REPO,
        env=lectern_env(home),
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.fixture()
def shared_home(pristine: tuple[Path, Path]) -> Iterator[Path]:
    """A copy of the library another user can reach, every file readable and writable
    by all; a test then takes away what it denies."""
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("running as another user needs root and setpriv")
    root = Path(tempfile.mkdtemp(prefix="lectern-perm-"))
    try:
        os.chmod(root, 0o755)
        home = root / "home"
        shutil.copytree(pristine[0], home)
        shutil.copytree(pristine[1], root / "docs")
        for path in [root / "docs", *(root / "docs").rglob("*"), home, *home.rglob("*")]:
            os.chmod(path, 0o777 if path.is_dir() else 0o666)
        yield home
    finally:
        shutil.rmtree(root, ignore_errors=True)


def test_permission_denied_to_the_user_is_named_and_the_library_is_not_replaced(
    shared_home: Path,
) -> None:
    """The database file only its owner may open: DuckDB says "Permission denied".
    Before: the file counted as damaged, was renamed aside (the folder is writable) and
    an empty library started in its place."""
    home = shared_home
    os.chmod(home / "lectern.duckdb", 0o600)
    before = listing(home)
    done = _as_nobody(home, "status")
    assert_plain(done)
    assert done.returncode != 0
    assert f"Lectern may not open {home / 'lectern.duckdb'} (permission denied)" in done.stderr
    assert listing(home) == before


def test_a_folder_that_refuses_the_log_is_named_when_indexing(shared_home: Path) -> None:
    """Every file may be written but the folder may not take new ones: the library
    opens (status reads it), and indexing, whose first write makes the write-ahead log,
    names that file. Before: "something unexpected went wrong (TransactionException:
    ... Cannot open file \".../lectern.duckdb.wal\": Permission denied)"."""
    home = shared_home
    os.chmod(home, 0o755)
    before = listing(home)
    status = _as_nobody(home, "status")
    assert_plain(status)
    assert status.returncode == 0, status.stderr
    done = _as_nobody(home, "index", str(home.parent / "docs"))
    assert_plain(done)
    assert done.returncode != 0
    wal = home / "lectern.duckdb.wal"
    assert f"Lectern may not open {wal} (permission denied)" in done.stderr
    assert listing(home) == before


def test_folder_where_the_log_should_be_is_named_and_left_alone(home: Path) -> None:
    """Before: DuckDB's "Failure while replaying WAL ... Is a directory" counted as a log
    that would not replay, and the folder was renamed aside."""
    (home / "lectern.duckdb.wal").mkdir()
    before = sorted(p.name for p in home.iterdir())
    done = lectern(home, "status")
    assert_plain(done)
    assert done.returncode != 0
    assert f"{home / 'lectern.duckdb.wal'} is a folder" in done.stderr
    assert sorted(p.name for p in home.iterdir()) == before


# --- what a killed keyword write leaves behind ------------------------------------------

# Index a folder and die at the moment DuckDB reads the postings scratch file (the
# process is killed, as by the OS, with the file written and not yet removed).
_KILLED_IN_POSTINGS = textwrap.dedent(
    """
    import os, signal, sys
    from pathlib import Path
    from core.config import Settings
    from core.library import Library
    from core.store.keyword import upkeep

    original = upkeep.KeywordUpkeep._write_postings

    class Killing:
        def __init__(self, cur):
            self._cur = cur
        def execute(self, sql, *args):
            if "read_csv" in sql:
                os.kill(os.getpid(), signal.SIGKILL)
            return self._cur.execute(sql, *args)
        def __getattr__(self, name):
            return getattr(self._cur, name)

    def write_postings(self, cur, *args):
        return original(self, Killing(cur), *args)

    upkeep.KeywordUpkeep._write_postings = write_postings
    library = Library(Settings(home=Path(sys.argv[1])))
    library.index([sys.argv[2]])
    """
)


def test_postings_scratch_file_left_by_a_kill_is_removed_at_open(
    tmp_path: Path, pristine: tuple[Path, Path], embedder: object
) -> None:
    """Before: a `.kw_*-postings-*.csv` left by a kill stayed in the data folder for good."""
    home = tmp_path / "home"
    done = subprocess.run(
        [sys.executable, "-c", _KILLED_IN_POSTINGS, str(home), str(pristine[1])],
        cwd=REPO,
        env=lectern_env(home),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == -signal.SIGKILL, done.stderr
    orphans = list(home.glob(".kw_*-postings-*.csv"))
    assert orphans, sorted(p.name for p in home.iterdir())

    library = _open(home, embedder)
    try:
        assert not list(home.glob(".kw_*-postings-*.csv"))
        library.sync()
        assert any("5,000" in h.text for h in library.search(PROBE, mode="bm25"))
    finally:
        library.close()
