"""A link never carries a file from outside a library folder into it (issue 45): `lectern
index` on a folder holding a link to /etc/passwd indexed the password file, searchable
and quoted. A link out of the folder is skipped with its reason; a link to another file
of the folder is skipped too, that file being read once under its own name; a folder
link that leads out is never walked, whichever way a path reaches it (a full scan, the
folder watcher's path, a retry)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from core.indexing.scan import OUTSIDE_LINK
from core.library import Library
from tests.helpers import cli

SECRET = "Quarterly payroll: the zanzibarite account holds the pension reserve."
INSIDE = "a link to real.txt, another file in this folder (each file is read once)"


@pytest.fixture()
def linked_folder(tmp_path: Path) -> Path:
    """A library folder with links out of it and within it, beside a private folder."""
    private = tmp_path / "private"
    private.mkdir()
    (private / "payroll.txt").write_text(SECRET + "\n")
    (private / "more").mkdir()
    (private / "more" / "ledger.txt").write_text(SECRET + " Ledger copy.\n")
    folder = tmp_path / "shared"
    folder.mkdir()
    (folder / "real.txt").write_text("The ferry leaves the north pier at nine.\n")
    os.symlink(private / "payroll.txt", folder / "payroll.txt")  # a link out
    os.symlink(folder / "real.txt", folder / "alias.txt")  # a link within
    os.symlink(private, folder / "private")  # a folder link out: never walked
    os.symlink("../private/payroll.txt", folder / "relative.txt")  # relative, still out
    if os.path.exists("/etc/passwd"):
        os.symlink("/etc/passwd", folder / "p.txt")  # as the issue found it
    return folder


def test_lectern_index_skips_links_out_of_the_folder_and_says_why(
    linked_folder: Path, tmp_path: Path
) -> None:
    home = tmp_path / "home"
    indexed = cli(home, "index", str(linked_folder))
    assert indexed.returncode == 0, indexed.stderr
    assert "Traceback" not in indexed.stderr + indexed.stdout
    assert "0 failed" in indexed.stdout

    for words, expected in (("ferry north pier", 1), ("zanzibarite pension reserve", 0)) + (
        (("root daemon nologin", 0),) if (linked_folder / "p.txt").exists() else ()
    ):
        found = cli(home, "search", words, "--mode", "bm25", "--json")
        assert found.returncode == 0, found.stderr
        documents = {h["document"] for h in json.loads(found.stdout.splitlines()[-1])["results"]}
        assert documents == ({str(linked_folder / "real.txt")} if expected else set()), words

    files = cli(home, "files", "--json")
    assert files.returncode == 0, files.stderr
    entries = {Path(f["path"]).name: f for f in json.loads(files.stdout.splitlines()[-1])["files"]}
    outside = ["payroll.txt", "relative.txt"] + (
        ["p.txt"] if (linked_folder / "p.txt").exists() else []
    )
    for name in outside:
        assert (entries[name]["status"], entries[name]["reason"]) == ("skipped", OUTSIDE_LINK)
        assert entries[name]["passages"] == 0
    assert (entries["alias.txt"]["status"], entries["alias.txt"]["reason"]) == ("skipped", INSIDE)
    assert entries["real.txt"]["status"] in ("indexed", "keyword only")
    assert "ledger.txt" not in entries  # the linked folder is not walked

    listed = cli(home, "files", "--state", "skipped")
    assert f"{linked_folder / 'payroll.txt'}: {OUTSIDE_LINK}" in listed.stdout


def test_a_path_through_a_linked_folder_is_never_read(
    library: Library, linked_folder: Path
) -> None:
    """The watcher and a retry hand the indexer paths, not a walk: a path whose folder
    is a link out of the library, or the linked folder itself, must not be read."""
    library.index([linked_folder])
    through = linked_folder / "private" / "payroll.txt"
    library.sync_files([str(through), str(linked_folder / "private" / "more")])
    library.sync_files([str(linked_folder / "private")])
    library.retry([str(linked_folder / "payroll.txt"), str(through)])
    docs = {d.path: d for d in library.files.documents()}
    assert str(through) not in docs
    assert not any("ledger" in p for p in docs)
    assert (docs[str(linked_folder / "payroll.txt")].state.value) == "skipped"
    assert not [
        h for h in library.search("zanzibarite pension", mode="bm25") if "zanzibarite" in h.text
    ]


def test_a_file_indexed_through_a_link_before_is_taken_out(
    library: Library, linked_folder: Path, tmp_path: Path
) -> None:
    """A library that read a link's target (an older Lectern) drops its text at the next
    scan, though the link itself did not change."""
    notes = linked_folder / "payroll.txt"
    notes.unlink()
    notes.write_text(SECRET + "\n")  # an ordinary file first: indexed
    library.index([linked_folder])
    assert library.search("zanzibarite pension", mode="bm25")
    notes.unlink()
    os.symlink(tmp_path / "private" / "payroll.txt", notes)
    os.utime(notes, follow_symlinks=False)
    library.index()
    doc = next(d for d in library.files.documents() if d.path == str(notes))
    assert (doc.state.value, doc.reason, doc.chunks) == ("skipped", OUTSIDE_LINK, 0)
    assert not library.search("zanzibarite pension", mode="bm25")
