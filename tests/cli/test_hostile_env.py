"""Lectern in a hostile environment (issue 29, part B): file names that are not UTF-8, a
locale or terminal that cannot encode the text, reader processes whose parent is killed,
signals while a reader starts, impossible intervals, and settings files with absurd
numbers or a byte-order mark. Each ends in a result or a sentence, never a traceback.

Every command runs as the real ``lectern`` in a child process, with LECTERN_HOME pointed
at a folder of the test's own."""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import fields
from pathlib import Path
from typing import Any

import psutil
import pytest

from core.config import NUMERIC_BOUNDS, Settings, load_settings
from core.library import Library
from core.store.paths import disk_path, stored_path

REPO = Path(__file__).resolve().parents[2]
LECTERN = Path(sys.executable).parent / "lectern"
BAD_NAME = b"bad\xff\xfe.txt"  # not UTF-8: two bytes that start no character
C_LOCALE = {"LC_ALL": "C", "LANG": "C", "PYTHONUTF8": "0"}

posix_only = pytest.mark.skipif(os.name != "posix", reason="POSIX file names and signals")


def environment(home: Path, **extra: str) -> dict[str, str]:
    env = {**os.environ, "LECTERN_HOME": str(home), **extra}
    for name in ("LECTERN_DEBUG", "PYTHONIOENCODING", "LECTERN_PROGRESS", "OLLAMA_HOST"):
        if name not in extra:
            env.pop(name, None)
    return env


def lectern(
    home: Path, *args: str, timeout: float = 300, **extra: str
) -> subprocess.CompletedProcess[bytes]:
    """``lectern ARGS``; its output as bytes, since the locale under test may not be
    UTF-8."""
    return subprocess.run(
        [str(LECTERN), *args],
        cwd=REPO,
        env=environment(home, **extra),
        capture_output=True,
        timeout=timeout,
    )


def last_json(done: subprocess.CompletedProcess[bytes]) -> Any:
    return json.loads(done.stdout.decode("ascii").strip().splitlines()[-1])


def no_traceback(done: subprocess.CompletedProcess[bytes]) -> None:
    err = done.stderr.decode("utf-8", "replace")
    assert "Traceback" not in err, err[-3000:]


def make_bad_name(folder: Path, text: str) -> Path:
    raw = os.path.join(os.fsencode(folder), BAD_NAME)
    try:
        with open(raw, "wb") as handle:
            handle.write(text.encode("utf-8"))
    except OSError:  # a file system that only takes UTF-8 names (APFS)
        pytest.skip("this file system refuses names that are not UTF-8")
    return Path(os.fsdecode(raw))


@pytest.fixture(scope="module")
def hostile(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Path, Path]]:
    """A library indexed by the real command: one file with a name that is not UTF-8,
    one with an accented name and an accented word. (home, folder, the bad file)"""
    if os.name != "posix":
        pytest.skip("POSIX file names")
    root = tmp_path_factory.mktemp("hostile")
    home, folder = root / "home", root / "docs"
    folder.mkdir()
    (folder / "café-notes.txt").write_text(
        "The café on the harbour serves kedgeree on Tuesdays.\n", encoding="utf-8"
    )
    (folder / "plain.txt").write_text("Wind turbines need inspection every spring.\n")
    bad = make_bad_name(folder, "The zebrafinch nests in the reeds by the harbour wall.\n")
    done = lectern(home, "index", str(folder), "--json")
    no_traceback(done)
    assert done.returncode == 0, done.stderr.decode("utf-8", "replace")[-3000:]
    summary = last_json(done)
    assert (summary["added"], summary["failed"]) == (3, 0), summary
    yield home, folder, bad


# --- 1. a file name that is not UTF-8 -----------------------------------------------------


def test_stored_paths_are_text_and_map_back_to_the_same_bytes() -> None:
    names = [
        "plain/name.txt",
        "café/ñandú.md",
        "日本語.pdf",
        os.fsdecode(b"/x/" + BAD_NAME),
        os.fsdecode(b"/x/\xc3(\xa9\x80.txt"),
        "/x/private-use-\uef80\uefff.txt",  # the stored form's own characters, escaped
    ]
    for name in names:
        stored = stored_path(name)
        stored.encode("utf-8")  # what DuckDB takes
        assert disk_path(stored) == name
        assert os.fsencode(disk_path(stored)) == os.fsencode(name)
    # Valid names are stored as they read (an existing library is unchanged).
    assert [stored_path(n) for n in names[:3]] == names[:3]
    # Different names never share a stored form.
    assert len({stored_path(n) for n in names}) == len(names)


@posix_only
@pytest.mark.slow
def test_a_name_that_is_not_utf8_is_indexed_with_its_folder(
    hostile: tuple[Path, Path, Path],
) -> None:
    # Before: "Unable to cast Python instance of type str" from DuckDB, 0 files indexed.
    home, folder, bad = hostile
    again = lectern(home, "index", str(folder), "--json")
    assert again.returncode == 0
    assert last_json(again)["unchanged"] == 3  # read back as the same file: no churn

    found = lectern(home, "search", "zebrafinch", "--mode", "bm25", "--json")
    no_traceback(found)
    assert found.returncode == 0
    paths = [r["document"] for r in last_json(found)["results"]]
    assert paths and paths[0] == str(bad)
    assert os.fsencode(paths[0]) == os.path.join(os.fsencode(folder), BAD_NAME)
    assert os.path.exists(paths[0])

    # The human-readable list names the file by its own bytes, not a traceback.
    shown = lectern(home, "search", "zebrafinch", "--mode", "bm25")
    assert shown.returncode == 0 and BAD_NAME in shown.stdout
    listed = lectern(home, "files", "--json")
    no_traceback(listed)
    assert listed.returncode == 0


@posix_only
def test_a_file_with_such_a_name_is_removed_and_renamed_like_any_other(
    tmp_path: Path, embedder: Any
) -> None:
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "plain.txt").write_text("Kestrels hover over the motorway verge.\n")
    bad = make_bad_name(folder, "Otters returned to the canal in March.\n")
    with Library(Settings(home=tmp_path / "home"), embedder=embedder) as library:
        report = library.index([folder])
        assert (report.added, report.failed) == (2, 0)
        entries = {e.path: e for e in library.files.file_list()}
        assert str(bad) in entries and entries[str(bad)].status == "indexed"
        assert "\ufffd" in entries[str(bad)].title  # shown as text, never as bytes

        renamed = Path(os.fsdecode(os.path.join(os.fsencode(folder), b"otters-\xe9.txt")))
        os.rename(bad, renamed)
        report = library.index([folder])
        assert (report.added, report.removed, report.failed) == (1, 1, 0)
        assert report.chunks_reused or report.chunks_embedded == 0  # the move kept them
        hits = library.search("otters canal", mode="bm25")
        assert hits and hits[0].path == str(renamed)

        renamed.unlink()
        report = library.index([folder])
        assert report.removed == 1
        assert [e.path for e in library.files.file_list()] == [str(folder / "plain.txt")]


# --- 2. a locale or terminal that cannot encode the text ----------------------------------


@posix_only
@pytest.mark.slow
def test_search_in_the_c_locale(hostile: tuple[Path, Path, Path]) -> None:
    # Before: the query arrived as "caf\udcc3\udca9" and DuckDB refused it.
    home, folder, _ = hostile
    done = lectern(home, "search", "café", "--mode", "bm25", **C_LOCALE)
    no_traceback(done)
    assert done.returncode == 0
    assert b"caf" in done.stdout and b"notes.txt" in done.stdout
    assert BAD_NAME not in done.stdout  # the word matched, not anything
    status = lectern(home, "status", **C_LOCALE)
    no_traceback(status)
    assert status.returncode == 0 and BAD_NAME not in status.stdout
    # The same files, named in this locale's way, are the ones indexed: nothing changes.
    again = lectern(home, "index", str(folder), "--json", **C_LOCALE)
    no_traceback(again)
    assert again.returncode == 0 and last_json(again)["unchanged"] == 3


@posix_only
@pytest.mark.slow
def test_search_printing_to_an_ascii_terminal(hostile: tuple[Path, Path, Path]) -> None:
    # Before: a UnicodeEncodeError printing the café passage.
    home, _, _ = hostile
    done = lectern(home, "search", "café harbour", "--mode", "bm25", PYTHONIOENCODING="ascii")
    no_traceback(done)
    assert done.returncode == 0
    assert "caf\\xe9" in done.stdout.decode("ascii", "replace") and b"kedgeree" in done.stdout
    assert BAD_NAME in done.stdout  # a name's own bytes, as the shell can take them back


def test_every_argument_is_either_text_or_a_path() -> None:
    """A new argument must be sorted into one of the two (core/cli/common.py): a word is
    decoded as UTF-8 in an ASCII locale, a path is left as the OS gave it."""
    from core.cli.common import PATH_ARGUMENTS, TEXT_ARGUMENTS
    from core.cli.main import build_parser

    assert not TEXT_ARGUMENTS & PATH_ARGUMENTS
    parser, _ = build_parser()
    unsorted = set()

    def walk(p: argparse.ArgumentParser) -> None:
        for action in p._actions:
            if isinstance(action, argparse._SubParsersAction):
                for child in action.choices.values():
                    walk(child)
            elif (
                action.type is None
                and not action.choices
                and action.nargs != 0
                and action.dest not in ("help", "version")
            ):
                unsorted.add(action.dest)

    walk(parser)
    assert unsorted - TEXT_ARGUMENTS - PATH_ARGUMENTS == set()


# --- 3. reader processes ------------------------------------------------------------------


def slow_html(folder: Path, divs: int = 60_000) -> Path:
    """Several seconds of the HTML reader's work (tests/ingest/test_parsing.py's slow file, 3x)."""
    body = "".join(
        f"<div><p>Paragraph {i} with <b>bold</b> words.</p><ul><li>item {i}</li></ul></div>"
        for i in range(divs)
    )
    path = folder / "slow.html"
    path.write_text(f"<html><body>{body}</body></html>")
    return path


def read_until_closed(fd: int, limit_s: float) -> tuple[bytes, bool]:
    """What arrives on ``fd`` until every writer has closed it (True) or ``limit_s``."""
    chunks: list[bytes] = []
    closed = threading.Event()

    def pump() -> None:
        while chunk := os.read(fd, 65536):
            chunks.append(chunk)
        closed.set()

    threading.Thread(target=pump, daemon=True).start()
    closed.wait(limit_s)
    return b"".join(chunks), closed.is_set()


def gone(process: psutil.Process, limit_s: float) -> bool:
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        try:
            if process.status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        time.sleep(0.05)
    return False


@posix_only
@pytest.mark.slow
def test_a_reader_dies_with_a_killed_index_and_prints_nothing(tmp_path: Path) -> None:
    # Before: the orphaned reader read on for the rest of its file (14 s here), then
    # printed a BrokenPipeError traceback into the terminal.
    folder = tmp_path / "docs"
    folder.mkdir()
    slow_html(folder)
    read_end, write_end = os.pipe()
    proc = subprocess.Popen(
        [str(LECTERN), "index", str(folder)],
        cwd=REPO,
        env=environment(tmp_path / "home"),
        stdout=write_end,
        stderr=write_end,
    )
    os.close(write_end)
    try:
        reader = None
        deadline = time.monotonic() + 240
        while reader is None and proc.poll() is None and time.monotonic() < deadline:
            reader = busy_child(proc.pid)
            time.sleep(0.05)
        assert reader is not None, "the reader never got busy"
        proc.send_signal(signal.SIGKILL)
        proc.wait(60)
        assert gone(reader, 10), "the reader outlived the killed command"
        after, closed = read_until_closed(read_end, 30)
        assert closed, "something still holds the terminal"
        assert b"Traceback" not in after and b"Error" not in after, after.decode()[-3000:]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(read_end)


def busy_child(pid: int) -> psutil.Process | None:
    """A child process past its start (about 0.4 s of CPU), so reading the file."""
    for child in psutil.Process(pid).children():
        try:
            if child.cpu_times().user > 1.5:
                return child
        except psutil.Error:  # ended between listing and looking
            continue
    return None


@posix_only
@pytest.mark.slow
@pytest.mark.parametrize("delay_s", [0.0, 0.3])
def test_a_service_stop_while_a_reader_starts_is_quiet(tmp_path: Path, delay_s: float) -> None:
    # Before: SIGTERM to the process group (a service stop) killed the starting reader and
    # the command printed an EOFError traceback ("the document reader process could not
    # start") and counted the file as failed.
    read_end, write_end = os.pipe()
    home = tmp_path / "home"
    proc = subprocess.Popen(
        [str(LECTERN), "watch", str(REPO / "resources" / "sample-docs")],
        cwd=REPO,
        env=environment(home),
        stdout=write_end,
        stderr=write_end,
        start_new_session=True,
    )
    os.close(write_end)
    try:
        deadline = time.monotonic() + 240
        while not psutil.Process(proc.pid).children() and time.monotonic() < deadline:
            assert proc.poll() is None
            time.sleep(0.002)
        time.sleep(delay_s)
        os.killpg(proc.pid, signal.SIGTERM)
        assert proc.wait(120) == 0
        output, closed = read_until_closed(read_end, 60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(read_end)
    text = output.decode("utf-8", "replace")
    assert closed and "Traceback" not in text and "could not start" not in text, text[-3000:]
    assert "Stopped. The index is saved." in text
    status = lectern(home, "status", "--json")
    assert last_json(status)["counts"]["failed"] == 0


# --- 4. threads ---------------------------------------------------------------------------


@pytest.mark.parametrize("value", ["inf", "nan", "1e10", "0", "-5", "soon"])
def test_an_impossible_poll_interval_is_a_usage_error(tmp_path: Path, value: str) -> None:
    # Before: with "inf" the polling thread died of an OverflowError (a traceback) and
    # the command went on saying it was polling.
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "note.txt").write_text("Swifts return in May.\n")
    home = tmp_path / "home"
    done = lectern(home, "watch", str(folder), "--poll", "--poll-interval", value, timeout=60)
    no_traceback(done)
    assert done.returncode == 2
    assert b"--poll-interval" in done.stderr
    if value != "0":  # --reconcile 0: never
        again = lectern(home, "watch", str(folder), "--reconcile", value, timeout=60)
        assert again.returncode == 2 and b"--reconcile" in again.stderr


def test_the_watcher_refuses_an_interval_its_threads_cannot_wait(library: Library) -> None:
    from core.app.watch import FolderWatcher

    for bad in (math.inf, math.nan, 0.0, -1.0, 1e12):
        with pytest.raises(ValueError, match="poll_interval_s"):
            FolderWatcher(library, poll_interval_s=bad)


# The command waits as the real watch loop does, in bounded waits: a signal that lands
# after Python's last check but before the sleep's system call starts is only seen when
# that call returns, so an hour-long sleep turned that race into a hung test (in full
# runs on a loaded machine, never alone).
FAILING_THREAD = """
import sys, threading, time
import core.cli.watch

def watch(args):
    def die():
        raise RuntimeError("the polling thread broke")
    threading.Thread(target=die, name="polling-emitter").start()
    while True:
        time.sleep(0.5)

core.cli.watch.cmd_watch = watch
from core.cli.main import main
sys.exit(main(["watch"]))
"""


def run_failing_thread(
    tmp_path: Path, before_start: Callable[[], object] | None = None
) -> subprocess.CompletedProcess[bytes]:
    """`watch` whose polling thread fails (FAILING_THREAD); ``before_start`` runs in the
    child before it starts."""
    return subprocess.run(
        [sys.executable, "-c", FAILING_THREAD],
        cwd=REPO,
        env=environment(tmp_path / "home"),
        capture_output=True,
        timeout=120,
        preexec_fn=before_start,
    )


@posix_only
def test_a_thread_that_fails_ends_the_command_with_a_sentence(tmp_path: Path) -> None:
    done = run_failing_thread(tmp_path)
    err = done.stderr.decode("utf-8", "replace")
    assert done.returncode == 2, err
    assert "Traceback" not in err
    assert "(polling-emitter) stopped on an unexpected error" in err
    assert "RuntimeError: the polling thread broke" in err and "cli-error.log" in err
    log = (tmp_path / "home" / "cli-error.log").read_text()
    assert "Traceback" in log and "the polling thread broke" in log


@posix_only
def test_a_thread_that_fails_ends_a_command_started_with_ctrl_c_ignored(tmp_path: Path) -> None:
    """A shell starts `lectern watch &` from a script, and nohup, with Ctrl-C's signal
    ignored: the failure must still end the command instead of leaving it waiting forever
    for a signal it ignores."""
    done = run_failing_thread(tmp_path, lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    err = done.stderr.decode("utf-8", "replace")
    assert done.returncode == 2, err
    assert "Traceback" not in err
    assert "(polling-emitter) stopped on an unexpected error" in err


# --- 5. settings --------------------------------------------------------------------------


def write_settings(home: Path, data: dict[str, Any], *, bom: bool = False) -> None:
    home.mkdir(parents=True, exist_ok=True)
    text = json.dumps(data)
    (home / "settings.json").write_bytes((b"\xef\xbb\xbf" if bom else b"") + text.encode())


def test_every_numeric_setting_has_bounds() -> None:
    numeric = {
        f.name
        for f in fields(Settings)
        if isinstance(f.default, (int, float)) and not isinstance(f.default, bool)
    }
    assert numeric == set(NUMERIC_BOUNDS)
    for f in fields(Settings):
        if f.name in NUMERIC_BOUNDS:
            low, high = NUMERIC_BOUNDS[f.name]
            assert low <= f.default <= high, f.name  # type: ignore[operator]


@pytest.mark.parametrize("name", sorted(NUMERIC_BOUNDS))
def test_an_out_of_range_setting_is_replaced_by_its_default_and_named(
    tmp_path: Path, name: str
) -> None:
    low, high = NUMERIC_BOUNDS[name]
    default = getattr(Settings(home=tmp_path), name)
    for value in (10**12, high * 10, low - 1, 1e12):
        write_settings(tmp_path, {name: value, "llm_model": "kept"})
        settings = load_settings(tmp_path)
        assert getattr(settings, name) == default and settings.llm_model == "kept"
        assert len(settings.replaced) == 1
        replaced = settings.replaced[0]
        assert replaced.name == name and replaced.used == default
        assert f"{name!r}" in replaced.message and f"uses {default:g} instead" in replaced.message
        assert f"from {low:g} to {high:g}" in replaced.message and name in replaced.hint
    write_settings(tmp_path, {name: high})
    assert getattr(load_settings(tmp_path), name) == high and not load_settings(tmp_path).replaced


def test_candidates_1e12_is_not_used(tmp_path: Path) -> None:
    # Before: accepted; a search then ran out of memory after two minutes.
    write_settings(tmp_path, {"candidates": 10**12})
    assert load_settings(tmp_path).candidates == 100
    write_settings(tmp_path, {"candidates": 1e12})  # JSON's float form: before, refused
    assert load_settings(tmp_path).candidates == 100
    write_settings(tmp_path, {"candidates": 2e2})  # a whole number written as a float
    settings = load_settings(tmp_path)
    assert settings.candidates == 200 and isinstance(settings.candidates, int)


def test_a_settings_file_with_a_byte_order_mark_is_read(tmp_path: Path) -> None:
    # Before: "Unexpected UTF-8 BOM", and Lectern would not start.
    write_settings(tmp_path, {"top_k": 3, "ignore_patterns": ["*.bak"]}, bom=True)
    settings = load_settings(tmp_path)
    assert settings.top_k == 3 and settings.ignore_patterns == ("*.bak",)


def test_an_overlap_of_1e9_leaves_the_index_as_it_is(
    tmp_path: Path, sample_folder: Path, embedder: Any
) -> None:
    # Before: accepted, and `lectern status` then reported every file "not indexed yet".
    home = tmp_path / "home"
    with Library(Settings(home=home), embedder=embedder) as library:
        report = library.index([sample_folder])
        indexed = report.added
    write_settings(home, {"chunk_overlap_sentences": 10**9})
    done = lectern(home, "status", "--json", timeout=120)
    no_traceback(done)
    assert done.returncode == 0
    status = last_json(done)
    assert status["counts"]["indexed"] == indexed and status["counts"]["pending"] == 0
    err = done.stderr.decode()
    assert "'chunk_overlap_sentences'" in err and "is 1000000000" in err
    assert "Lectern uses 0 instead" in err


def test_the_app_is_told_of_a_replaced_setting(tmp_path: Path, embedder: Any) -> None:
    """The app shows ``recovery_notices`` when the library opens (desktop/startup.py)."""
    write_settings(tmp_path, {"top_k": 0, "embed_batch_size": 10**6})
    with Library(load_settings(tmp_path), embedder=embedder) as library:
        told = [n for n in library.recovery_notices if n.kind == "setting_replaced"]
        assert len(told) == 2 and "'top_k'" in told[0].message + told[1].message
        assert library.settings.top_k == 6 and library.settings.embed_batch_size == 32
        # Said, but not kept as a repair of the library.
        assert not any(r.get("kind") == "setting_replaced" for r in library.recovery_log())
