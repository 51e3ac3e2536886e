"""Live folders with real watchdog observers, real temporary folders and the real model.

Nothing here asserts on elapsed time: every test waits (with a generous timeout) until the
index equals what is on disk, then checks how it got there.
"""

from __future__ import annotations

import errno
import os
import shutil
import signal
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from core.app.watch import (
    NETWORK_FILESYSTEMS,
    OFFLINE,
    POLLING,
    WATCHING,
    AppliedBatch,
    FolderWatcher,
    filesystem_type,
)
from core.config import Settings
from core.indexing.scan import iter_files
from core.library import Library
from core.records import IndexProgress, IndexReport
from tests.helpers import drain, files_done
from tests.indexing.test_index_and_search import assert_consistent

# real folder watching, with a 1,000-file bulk copy: not in `make test-fast`.
pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]


# --- helpers --------------------------------------------------------------------------


def wait_until(predicate: Callable[[], Any], timeout: float = 120.0, what: str = "it") -> Any:
    deadline = time.monotonic() + timeout
    while True:
        result = predicate()
        if result:
            return result
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(0.05)


def on_disk(lib: Library) -> dict[str, int]:
    """Path -> size of every file the library should hold (online folders only)."""
    files: dict[str, int] = {}
    for folder in lib.files.folders():
        if lib.folder_online(folder):
            for info in iter_files(folder, lib.settings.ignore_patterns):
                files[info.path] = info.size
    return files


def in_index(lib: Library) -> dict[str, int]:
    return {d.path: d.size for d in lib.files.documents()}


def settle(lib: Library, watcher: FolderWatcher, timeout: float = 180.0) -> None:
    """Wait until the watcher is idle and the index equals the disk, then check the
    invariants a crash or an incremental run must never break."""
    wait_until(
        lambda: watcher.wait_idle(0.5) and in_index(lib) == on_disk(lib),
        timeout,
        "the index to equal the disk",
    )
    assert all(d.state.value != "pending" for d in lib.files.documents())
    assert_consistent(lib)


def found(lib: Library, text: str, mode: str = "bm25") -> bool:
    return any(text in h.text for h in lib.search(text, k=10, mode=mode))


def since(batches: list[AppliedBatch], start: int) -> IndexReport:
    """The reports of the batches from ``start`` on, added up."""
    total: dict[str, int] = {}
    for batch in batches[start:]:
        for key in ("added", "updated", "removed", "failed", "chunks_embedded", "chunks_reused"):
            total[key] = total.get(key, 0) + getattr(batch.report, key)
    return IndexReport(**total)


@pytest.fixture()
def notes(tmp_path: Path) -> Path:
    folder = tmp_path / "notes"
    folder.mkdir()
    (folder / "aardvark.txt").write_text("The aardvark census counted twelve animals in May.\n")
    (folder / "heron.md").write_text("# Herons\n\nGrey herons nest in tall alder trees.\n")
    return folder


@pytest.fixture()
def start_watcher(library: Library) -> Iterator[Callable[..., tuple[FolderWatcher, list]]]:
    watchers: list[FolderWatcher] = []

    def start(*folders: Path, **options: Any) -> tuple[FolderWatcher, list[AppliedBatch]]:
        for folder in folders:
            library.add_folder(folder)
        batches: list[AppliedBatch] = []
        options.setdefault("reconcile_interval_s", None)
        options.setdefault("debounce_s", 0.2)
        watcher = FolderWatcher(library, on_batch=batches.append, **options).start()
        watchers.append(watcher)
        return watcher, batches

    yield start
    for watcher in watchers:
        watcher.stop()


# --- create, modify, delete, rename, atomic save, move -----------------------------------


def test_create_modify_delete_follow_the_disk(
    library: Library, notes: Path, start_watcher: Callable
) -> None:
    applied: list[IndexReport] = []
    watcher, _ = start_watcher(notes, on_applied=applied.append)
    settle(library, watcher)  # the start-up reconcile indexed what was there
    assert len(library.files.documents(state="indexed")) == 2
    assert watcher.statuses()[0].state == WATCHING

    otter = notes / "otter.txt"
    otter.write_text("Sea otters hold hands while sleeping in kelp beds.\n")
    wait_until(lambda: found(library, "otters hold hands"), what="the new file to be searchable")

    otter.write_text("River otters dig burrows along muddy banks.\n")
    wait_until(lambda: found(library, "burrows along muddy banks"), what="the edit")
    assert not found(library, "otters hold hands")

    otter.unlink()
    wait_until(lambda: not found(library, "burrows along muddy banks"), what="the deletion")
    settle(library, watcher)
    assert sum(r.added for r in applied) >= 3  # start-up pass (2) and the new file
    assert sum(r.removed for r in applied) == 1


def test_rename_keeps_embeddings(library: Library, notes: Path, start_watcher: Callable) -> None:
    watcher, batches = start_watcher(notes)
    settle(library, watcher)
    mark = len(batches)
    os.rename(notes / "heron.md", notes / "grey-heron.md")
    settle(library, watcher)
    report = since(batches, mark)
    assert (report.added, report.removed) == (1, 1)
    assert report.chunks_embedded == 0 and report.chunks_reused > 0
    hits = library.search("herons nest in alder trees", k=3, mode="dense")
    assert hits and hits[0].path == str(notes / "grey-heron.md")


def test_rename_while_closed_is_matched_by_content(library: Library, notes: Path) -> None:
    library.index([notes])
    os.rename(notes / "heron.md", notes / "herons.md")
    (notes / "moved").mkdir()
    os.rename(notes / "aardvark.txt", notes / "moved" / "aardvark.txt")
    report = library.sync()  # what the watcher does at start
    assert (report.added, report.removed, report.chunks_embedded) == (2, 2, 0)
    assert report.chunks_reused == 2
    assert set(in_index(library)) == set(on_disk(library))
    assert_consistent(library)


def test_vector_file_is_saved_when_the_watcher_stops(
    library: Library, notes: Path, start_watcher: Callable
) -> None:
    from core.store.vectors import VectorIndex

    watcher, _ = start_watcher(notes, vector_save_interval_s=3600)
    settle(library, watcher)
    (notes / "owl.txt").write_text("Barn owls hunt by sound alone.\n")
    settle(library, watcher)
    watcher.stop()
    reopened = VectorIndex(library.db, library.settings.vectors_path, library.vectors.dim)
    assert reopened.open() == "ok"  # nothing to repair: the file matches DuckDB


def test_atomic_save_indexes_the_final_file_once(
    library: Library, notes: Path, start_watcher: Callable
) -> None:
    watcher, batches = start_watcher(notes)
    settle(library, watcher)
    mark = len(batches)
    target = notes / "aardvark.txt"
    # How editors save: write a temporary file next to the original, rename it over.
    temp = notes / ".aardvark.txt.goutputstream-X1Y2"
    temp.write_text("The aardvark census counted fourteen animals in June.\n")
    os.replace(temp, target)
    wait_until(lambda: found(library, "fourteen animals in June"), what="the saved text")
    settle(library, watcher)
    report = since(batches, mark)
    assert (report.added, report.updated, report.removed) == (0, 1, 0)
    assert not found(library, "twelve animals in May")

    # A temporary name that is not ignored: still one final file, nothing left behind.
    mark = len(batches)
    temp = notes / "aardvark-save-0001.txt"
    temp.write_text("The aardvark census counted sixteen animals in July.\n")
    os.replace(temp, target)
    settle(library, watcher)
    assert found(library, "sixteen animals in July")
    assert str(temp) not in in_index(library)
    assert since(batches, mark).updated + since(batches, mark).added >= 1


def test_move_between_two_library_folders(
    library: Library, notes: Path, tmp_path: Path, start_watcher: Callable
) -> None:
    other = tmp_path / "archive"
    other.mkdir()
    watcher, batches = start_watcher(notes, other)
    settle(library, watcher)
    mark = len(batches)
    shutil.move(str(notes / "heron.md"), str(other / "heron.md"))
    settle(library, watcher)
    report = since(batches, mark)
    assert report.chunks_embedded == 0 and report.chunks_reused > 0
    docs = {d.path: d for d in library.files.documents()}
    assert docs[str(other / "heron.md")].folder == str(other)
    hits = library.search("grey herons", k=3, folders=[str(other)])
    assert hits and hits[0].path == str(other / "heron.md")


def test_bulk_copy_of_1000_files(
    library: Library, notes: Path, tmp_path: Path, start_watcher: Callable
) -> None:
    staging = tmp_path / "staging"
    staging.mkdir()
    for i in range(1000):
        (staging / f"bulk-{i:04d}.txt").write_text(f"Crate {i} holds {i * 3} widgets.\n")
    watcher, batches = start_watcher(notes)
    settle(library, watcher)
    mark = len(batches)
    shutil.copytree(staging, notes / "bulk")
    settle(library, watcher, timeout=900)
    report = since(batches, mark)
    assert report.added == 1000 and report.failed == 0
    # Events were batched, not applied one file at a time.
    assert len(batches) - mark < 200
    hits = library.search("crate 517 widgets", k=3, mode="bm25")
    assert hits and hits[0].path.endswith("bulk-0517.txt")


# --- folders ----------------------------------------------------------------------------


def test_folder_deleted_and_renamed_inside_a_library(
    library: Library, notes: Path, start_watcher: Callable
) -> None:
    sub = notes / "birds" / "waders"
    sub.mkdir(parents=True)
    (sub / "curlew.txt").write_text("Curlews probe mudflats with long curved bills.\n")
    (sub / "avocet.txt").write_text("Avocets sweep upturned bills through shallow water.\n")
    (notes / "birds" / "wren.txt").write_text("Wrens sing loudly for their size.\n")
    watcher, batches = start_watcher(notes)
    settle(library, watcher)

    mark = len(batches)
    os.rename(notes / "birds", notes / "shorebirds")
    settle(library, watcher)
    report = since(batches, mark)
    assert (report.added, report.removed, report.chunks_embedded) == (3, 3, 0)
    assert str(notes / "shorebirds" / "waders" / "curlew.txt") in in_index(library)

    shutil.rmtree(notes / "shorebirds" / "waders")
    settle(library, watcher)
    assert not found(library, "curved bills")
    assert found(library, "sing loudly")


def test_library_folder_renamed_goes_offline_and_comes_back(
    library: Library, notes: Path, tmp_path: Path, start_watcher: Callable
) -> None:
    statuses: list[tuple[str, str, str]] = []
    watcher, _ = start_watcher(
        notes, folder_check_s=0.2, on_status=lambda *s: statuses.append(tuple(s))
    )
    settle(library, watcher)
    moved = tmp_path / "notes-renamed"
    os.rename(notes, moved)
    wait_until(lambda: watcher.statuses()[0].state == OFFLINE, what="the folder to go offline")
    assert [f.online for f in library.folder_status()] == [False]
    # Offline is not removed: the documents stay searchable.
    assert len(library.files.documents()) == 2
    assert found(library, "aardvark census")
    assert (str(notes), OFFLINE) in [(f, s) for f, s, _ in statuses]

    (moved / "otter.txt").write_text("Otters were counted while the folder was away.\n")
    os.rename(moved, notes)
    wait_until(lambda: watcher.statuses()[0].state == WATCHING, what="the folder to come back")
    settle(library, watcher)
    assert found(library, "counted while the folder was away")
    (notes / "otter.txt").write_text("Otters returned to the estuary.\n")
    wait_until(lambda: found(library, "returned to the estuary"), what="events after coming back")


def test_library_folder_deleted_goes_offline_not_wiped(
    library: Library, notes: Path, start_watcher: Callable
) -> None:
    watcher, _ = start_watcher(notes, folder_check_s=0.2)
    settle(library, watcher)
    shutil.rmtree(notes)
    wait_until(lambda: watcher.statuses()[0].state == OFFLINE, what="the folder to go offline")
    assert watcher.wait_idle(60)
    assert len(library.files.documents()) == 2  # the file events of the deletion removed nothing
    assert found(library, "herons nest in tall alder")
    notes.mkdir()  # made again: it is the library folder, with what it holds now
    (notes / "new.txt").write_text("A fresh start with notes on storks.\n")
    wait_until(lambda: watcher.statuses()[0].state == WATCHING, what="the folder to come back")
    settle(library, watcher)
    assert [Path(p).name for p in in_index(library)] == ["new.txt"]


def test_empty_mount_point_on_another_device_counts_as_offline(
    library: Library, notes: Path, tmp_path: Path
) -> None:
    library.index([notes])
    folder = library.files.folders()[0]
    # An unmounted drive leaves its mount point: an empty folder on another device.
    library.db.set_meta("folder_device:" + folder, "4242")
    parked = tmp_path / "parked"
    shutil.move(str(notes), str(parked))
    notes.mkdir()
    assert not library.folder_online(folder)
    report = library.sync()
    assert report.removed == 0 and len(library.files.documents()) == 2
    assert found(library, "aardvark census")
    notes.rmdir()
    shutil.move(str(parked), str(notes))
    assert library.folder_online(folder)
    assert library.sync().removed == 0


def test_removed_folder_is_wiped_and_no_longer_watched(
    library: Library, notes: Path, start_watcher: Callable
) -> None:
    watcher, _ = start_watcher(notes, folder_check_s=0.2)
    settle(library, watcher)
    library.remove_folder(notes)
    assert library.files.documents() == []
    wait_until(lambda: watcher.statuses() == [], what="the watch to be dropped")
    (notes / "late.txt").write_text("Written after the folder was removed.\n")
    watcher.request_reconcile()
    assert watcher.wait_idle(60)
    assert library.files.documents() == []
    assert_consistent(library)


# --- awkward files ----------------------------------------------------------------------


def _unreadable_file(path: Path) -> str | None:
    """Make ``path`` a file whose read fails; returns why not possible, or None."""
    if os.geteuid() != 0:
        path.write_text("secret")
        path.chmod(0)
        return None
    # chmod does not stop root. Write-only sysfs attributes are regular files that even
    # root cannot read; one is mounted over a file of the folder (a link to it would be
    # skipped as a link out of the folder, never read).
    for candidate in ("/sys/bus/cpu/uevent", "/sys/bus/platform/uevent", "/sys/bus/pci/uevent"):
        try:
            if not stat.S_ISREG(os.stat(candidate).st_mode):
                continue
            with open(candidate, "rb") as handle:
                handle.read(1)
        except OSError:
            path.touch()
            mounted = subprocess.run(
                ["mount", "--bind", candidate, str(path)], capture_output=True, check=False
            )
            if mounted.returncode == 0:
                return None
            path.unlink()
            return "running as root, and a file cannot be mounted here to make it unreadable"
    return "running as root and no unreadable sysfs file was found"


def _make_readable(path: Path) -> None:
    """Undo ``_unreadable_file``: ``path`` no longer exists."""
    if os.path.ismount(path):
        subprocess.run(["umount", str(path)], capture_output=True, check=False)
    path.unlink(missing_ok=True)


def test_unreadable_file_and_fifo_do_not_stop_the_rest(
    library: Library, notes: Path, start_watcher: Callable
) -> None:
    locked = notes / "locked.txt"
    why = _unreadable_file(locked)
    if why:
        pytest.skip(why)
    try:
        watcher, _ = start_watcher(notes)
        settle(library, watcher)
        os.mkfifo(notes / "pipe.txt")  # reading it would block forever: never opened
        (notes / "plain.txt").write_text("Plain notes about kingfishers diving.\n")
        settle(library, watcher)
        docs = {Path(d.path).name: d for d in library.files.documents()}
        assert docs["locked.txt"].state.value == "failed"
        assert docs["locked.txt"].reason.startswith("cannot be read")
        assert (docs["pipe.txt"].state.value, docs["pipe.txt"].reason) == (
            "skipped",
            "a named pipe, not a file",
        )
        assert found(library, "kingfishers diving")

        _make_readable(locked)
        locked.write_text("Now readable: notes about dippers walking underwater.\n")
        settle(library, watcher)
        docs = {Path(d.path).name: d for d in library.files.documents()}
        assert docs["locked.txt"].state.value == "indexed"
        assert found(library, "dippers walking underwater")
    finally:
        if os.path.ismount(locked):
            _make_readable(locked)


def test_symlink_loops_neither_hang_nor_duplicate(
    library: Library, notes: Path, start_watcher: Callable
) -> None:
    os.symlink(notes, notes / "loop")  # a folder that contains itself
    os.symlink(notes.parent, notes / "up")
    os.symlink(notes / "b.txt", notes / "a.txt")  # a -> b -> a
    os.symlink(notes / "a.txt", notes / "b.txt")
    watcher, _ = start_watcher(notes)
    settle(library, watcher)
    (notes / "swift.txt").write_text("Swifts sleep on the wing.\n")
    settle(library, watcher)
    assert found(library, "sleep on the wing")
    assert len(library.files.documents(state="indexed")) == 3
    loops = {Path(d.path).name: d.reason for d in library.files.documents(state="skipped")}
    assert loops == dict.fromkeys(("a.txt", "b.txt"), "a link that points to itself in a loop")
    watcher.stop()

    polling, _ = start_watcher(notes, force_polling=True, poll_interval_s=0.3)
    assert polling.statuses()[0].state == POLLING
    (notes / "martin.txt").write_text("House martins build mud nests.\n")
    settle(library, polling)
    assert found(library, "mud nests")


def test_ignored_files_and_user_patterns(
    lectern_home: Path, embedder: Any, notes: Path, tmp_path: Path
) -> None:
    settings = replace(Settings(home=lectern_home), ignore_patterns=("*.log", "drafts"))
    with Library(settings, embedder=embedder) as lib:
        lib.add_folder(notes)
        watcher = FolderWatcher(lib, reconcile_interval_s=None, debounce_s=0.2).start()
        try:
            settle(lib, watcher)
            (notes / "debug.log").write_text("log line about falcons")
            (notes / ".hidden.txt").write_text("hidden falcons")
            (notes / "report.txt.swp").write_text("swap falcons")
            (notes / "~$report.docx").write_text("lock falcons")
            (notes / "drafts").mkdir()
            (notes / "drafts" / "draft.txt").write_text("draft falcons")
            (notes / "kept.txt").write_text("Peregrine falcons nest on cathedrals.\n")
            settle(lib, watcher)
            assert {Path(d.path).name for d in lib.files.documents()} == {
                "aardvark.txt",
                "heron.md",
                "kept.txt",
            }
            os.rename(notes / "debug.log", notes / "debug.txt")  # no longer ignored
            settle(lib, watcher)
            assert str(notes / "debug.txt") in in_index(lib)
        finally:
            watcher.stop()


# --- falling back, pausing, searching meanwhile ------------------------------------------


def test_polling_fallback_when_the_watch_limit_is_reached(
    library: Library, notes: Path, start_watcher: Callable, monkeypatch: pytest.MonkeyPatch
) -> None:
    from watchdog.observers import Observer

    import core.app.watch

    class ExhaustedObserver(Observer):  # type: ignore[misc, valid-type]
        # What inotify_add_watch answers when fs.inotify.max_user_watches is used up.
        def schedule(self, *args: Any, **kwargs: Any) -> Any:
            raise OSError(errno.ENOSPC, "inotify watch limit reached")

    monkeypatch.setattr(core.app.watch, "Observer", ExhaustedObserver)
    statuses: list[tuple[str, str, str]] = []
    watcher, _ = start_watcher(
        notes, poll_interval_s=0.3, on_status=lambda *s: statuses.append(tuple(s))
    )
    assert watcher.statuses()[0].state == POLLING
    assert "limit" in watcher.statuses()[0].reason
    assert statuses and statuses[0][1] == POLLING
    settle(library, watcher)
    (notes / "polled.txt").write_text("Polling found the nightjar notes.\n")
    wait_until(lambda: found(library, "nightjar notes"), what="the polled change")
    settle(library, watcher)


def test_local_folders_are_not_taken_for_network_shares(tmp_path: Path) -> None:
    assert filesystem_type(str(tmp_path)) not in NETWORK_FILESYSTEMS


def test_pause_holds_changes_until_resume(
    library: Library, notes: Path, start_watcher: Callable
) -> None:
    watcher, _ = start_watcher(notes)
    settle(library, watcher)
    watcher.pause()
    (notes / "paused.txt").write_text("Written while paused: notes on puffins.\n")
    wait_until(lambda: watcher.pending_count() >= 1, what="the event")
    assert not watcher.wait_idle(1.0)  # held, not applied
    assert str(notes / "paused.txt") not in in_index(library)
    watcher.resume()
    settle(library, watcher)
    assert found(library, "notes on puffins")


def test_search_keeps_working_while_a_sync_runs(library: Library, notes: Path) -> None:
    library.index([notes])
    new = notes / "incoming"
    new.mkdir()
    total = 12
    for i in range(total):
        (new / f"in-{i:02d}.txt").write_text(f"Incoming report {i} about lapwing flocks.\n")
    midway = threading.Event()
    searched = threading.Event()

    def progress(p: IndexProgress) -> None:
        # Hold the sync mid-run, once some of its files are keyword-searchable and before
        # the model has embedded them, while the other thread searches.
        if p.files_searchable and p.passages_embedded < p.passages_total and not midway.is_set():
            midway.set()
            searched.wait(120)

    result: list[IndexReport] = []
    sync = threading.Thread(
        target=lambda: result.append(library.sync_files([str(new)], progress=progress))
    )
    sync.start()
    try:
        assert midway.wait(300)
        # Documents indexed before the run: both retrievers, from another thread.
        assert found(library, "aardvark census", mode="bm25")
        assert found(library, "aardvark census", mode="hybrid")
        # Files already written in this run are searchable by keyword straight away,
        # and hybrid finds them too while meaning search cannot see them yet.
        assert any("lapwing" in h.text for h in library.search("lapwing flocks", mode="bm25"))
        assert any("lapwing" in h.text for h in library.search("lapwing flocks", mode="hybrid"))
        assert not any("lapwing" in h.text for h in library.search("lapwing flocks", mode="dense"))
        assert sync.is_alive()
    finally:
        searched.set()
        sync.join(300)
    assert result and result[0].added == total
    assert found(library, "Incoming report 11 about lapwing")
    # Once the run is over, by meaning too.
    assert any("lapwing" in h.text for h in library.search("lapwing flocks", mode="dense"))
    assert_consistent(library)


# --- kill -9 --------------------------------------------------------------------------


def test_kill_9_while_watching_then_restart(lectern_home: Path, embedder: Any, notes: Path) -> None:
    env = {**os.environ, "LECTERN_HOME": str(lectern_home), "LECTERN_PROGRESS": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "core", "watch", str(notes), "--reconcile", "0"],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None and proc.stderr is not None
    os.set_blocking(proc.stdout.fileno(), False)
    os.set_blocking(proc.stderr.fileno(), False)
    out, err = "", ""
    # More files than one embedding batch (64 chunks), so the kill lands between batches.
    total = 150
    killed_at = None
    try:
        deadline = time.monotonic() + 300
        while "Watching" not in out:
            assert proc.poll() is None and time.monotonic() < deadline, err[-2000:]
            out += drain(proc.stdout.fileno())
            err += drain(proc.stderr.fileno())
            time.sleep(0.05)
        incoming = notes / "incoming"
        incoming.mkdir()
        for i in range(total):
            (incoming / f"survey-{i:03d}.txt").write_text(
                f"Survey {i} counted waders along the tidal creek. Marker kw{i:03d}q.\n"
            )
        while proc.poll() is None and time.monotonic() < deadline:
            err += drain(proc.stderr.fileno())
            done = files_done(err, total)
            if done is not None and done >= 5:
                proc.send_signal(signal.SIGKILL)
                killed_at = done
                break
            time.sleep(0.02)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=60)
    assert killed_at is not None and killed_at < total, err[-2000:]

    with Library(Settings(home=lectern_home), embedder=embedder) as lib:
        assert_consistent(lib)  # committed per file: nothing half-written
        before = len(lib.files.documents(state="indexed"))
        assert before >= 2 + killed_at - 1
        watcher = FolderWatcher(lib, reconcile_interval_s=None).start()
        try:
            settle(lib, watcher)
        finally:
            watcher.stop()
        assert len(lib.files.documents(state="indexed")) == 2 + total
        assert found(lib, "kw149q")
        assert_consistent(lib)
