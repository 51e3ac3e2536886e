"""Empty files are one state, said once (issue 45): a folder of 1,000 empty files printed
1,000 "failed: empty file" lines. An empty file is skipped ("empty file"), counted in one
line of `lectern index` and `lectern watch`, listed as such by `lectern files` and the
desktop's file list, and an empty file an older Lectern recorded as failed reads alike."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from core.config import Settings
from core.library import Library
from core.records import DocState, FileEntry
from tests.helpers import REPO, cli, drain, lectern_env

EMPTY = 1_000
LINE = f"{EMPTY + 1:,} empty files skipped (nothing to index; `lectern files --state skipped` lists them)"


def _folder(root: Path) -> Path:
    folder = root / "drafts"
    folder.mkdir()
    for i in range(EMPTY):
        (folder / f"draft-{i:04d}.txt").touch()
    (folder / "blank.md").write_text("\n   \n\t\n")  # only whitespace: read, and empty
    (folder / "ferry.txt").write_text("The ferry leaves the north pier at nine.\n")
    return folder


def test_lectern_index_says_empty_files_once(tmp_path: Path) -> None:
    home = tmp_path / "home"
    folder = _folder(tmp_path)
    started = time.monotonic()
    indexed = cli(home, "index", str(folder))
    elapsed = time.monotonic() - started
    assert indexed.returncode == 0, indexed.stderr
    lines = indexed.stdout.splitlines()
    assert lines[0].startswith(
        f"Indexed: 1 added, 0 updated, 0 removed, 0 unchanged, 0 failed, {EMPTY + 1} skipped"
    )
    assert lines[1:] == [f"  {LINE}"]
    assert "failed:" not in indexed.stdout + indexed.stderr
    print({"index_s": round(elapsed, 1)})

    summary = json.loads(cli(home, "index", str(folder), "--json").stdout.splitlines()[-1])
    assert (summary["failed"], summary["empty"], summary["unchanged"]) == (0, 0, EMPTY + 2)

    listed = json.loads(cli(home, "files", "--json").stdout.splitlines()[-1])
    assert listed["counts"]["skipped"] == EMPTY + 1 and listed["counts"]["failed"] == 0
    empty = [f for f in listed["files"] if f["status"] == "skipped"]
    assert {(f["state"], f["reason"]) for f in empty} == {("skipped", "empty file")}
    text = cli(home, "files", "--state", "skipped").stdout
    assert f"{folder / 'blank.md'}: empty file" in text

    # An empty file that gets text is read at the next run.
    (folder / "draft-0007.txt").write_text("The ferry returns from the south pier at noon.\n")
    again = cli(home, "index", str(folder))
    assert again.stdout.startswith(
        f"Indexed: 0 added, 1 updated, 0 removed, {EMPTY + 1} unchanged, 0 failed, 0 skipped"
    )
    assert "empty file" not in again.stdout  # the unchanged ones are not said again


def test_empty_files_an_older_lectern_failed_read_as_skipped(
    lectern_home: Path, embedder: object, tmp_path: Path
) -> None:
    folder = _folder(tmp_path)
    with Library(Settings(home=lectern_home), embedder=embedder) as library:  # type: ignore[arg-type]
        library.index([folder])
        # What an older Lectern wrote for the same files.
        with library.db.transaction() as cur:
            cur.execute(
                "UPDATE documents SET state = 'failed' WHERE state = 'skipped' AND reason = 'empty file'"
            )
        assert len(library.files.documents(state="failed")) == 0
        assert len(library.files.documents(state="skipped")) == EMPTY + 1
        assert library.status()["counts"]["skipped"] == EMPTY + 1  # type: ignore[index]
        entries = library.files.file_list(status="skipped")
        assert len(entries) == EMPTY + 1 and all(e.state is DocState.SKIPPED for e in entries)
        assert not library.files.file_list(status="failed")
        report = library.index()
        assert (report.failed, report.empty, report.unchanged) == (0, 0, EMPTY + 2)


def test_lectern_watch_says_empty_files_once(tmp_path: Path) -> None:
    home = tmp_path / "home"
    folder = tmp_path / "inbox"
    folder.mkdir()
    (folder / "ferry.txt").write_text("The ferry leaves the north pier at nine.\n")
    proc = subprocess.Popen(
        [sys.executable, "-m", "core", "watch", str(folder), "--reconcile", "0"],
        cwd=REPO,
        env=lectern_env(home),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None and proc.stderr is not None
    os.set_blocking(proc.stdout.fileno(), False)
    os.set_blocking(proc.stderr.fileno(), False)
    out = err = ""
    try:
        deadline = time.monotonic() + 300
        while "Watching" not in out + err:
            assert proc.poll() is None and time.monotonic() < deadline, err[-2000:]
            out += drain(proc.stdout.fileno())
            err += drain(proc.stderr.fileno())
            time.sleep(0.05)
        for i in range(300):
            (folder / f"new-{i:03d}.md").touch()
        while "empty files skipped" not in out or "applied" not in out:
            assert proc.poll() is None and time.monotonic() < deadline, (out + err)[-2000:]
            out += drain(proc.stdout.fileno())
            err += drain(proc.stderr.fileno())
            time.sleep(0.05)
        time.sleep(1.0)  # a batch still being written says its own line
        out += drain(proc.stdout.fileno())
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
    assert "failed:" not in out + err
    said = [line.strip() for line in out.splitlines() if "empty file" in line]
    counts = [int(line.split()[0].replace(",", "")) for line in said]
    assert sum(counts) == 300 and len(said) <= 3, said  # one line a batch, not one a file


def test_the_desktop_file_list_shows_an_empty_file_as_skipped_with_its_reason() -> None:
    pytest.importorskip("PySide6")
    from desktop.file_list import make_row

    entry = FileEntry(
        path="/docs/draft.txt",
        folder="/docs",
        type="txt",
        title="draft",
        state=DocState.SKIPPED,
        reason="empty file",
        pages=0,
        passages=0,
        embedded=0,
        size=0,
        mtime=0.0,
        indexed_at=None,
    )
    row = make_row(entry)
    assert row.cells[2] == "Skipped" and row.cells[-1] == "empty file"
    assert "Nothing to index in it" in row.tooltip
