"""The folder watcher keeps links to the rule a full scan follows (issue 45): `lectern
watch` indexed a link to /etc/hostname made while it watched. A link made while
watching, to a file or a folder outside, is never read; a link to a file of the folder
is skipped, that file being read once. Real watchdog observers and the real model."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from core.app.watch import FolderWatcher
from core.indexing.scan import OUTSIDE_LINK
from core.library import Library
from tests.app.test_watch import found, settle

pytestmark = pytest.mark.slow

SECRET = "Hostname record: the zanzibarite server answers at the loading dock."


@pytest.fixture()
def private(tmp_path: Path) -> Path:
    folder = tmp_path / "private"
    (folder / "deep").mkdir(parents=True)
    (folder / "hostname.txt").write_text(SECRET + "\n")
    (folder / "deep" / "notes.txt").write_text(SECRET + " Deep copy.\n")
    return folder


def _states(library: Library) -> dict[str, tuple[str, str]]:
    return {Path(d.path).name: (d.state.value, d.reason) for d in library.files.documents()}


@pytest.mark.parametrize("force_polling", [False, True])
def test_links_made_while_watching_follow_the_scan_rule(
    library: Library, tmp_path: Path, private: Path, force_polling: bool
) -> None:
    folder = tmp_path / "notes"
    folder.mkdir()
    (folder / "heron.txt").write_text("Grey herons nest in tall alder trees.\n")
    library.add_folder(folder)
    options = {"force_polling": True, "poll_interval_s": 0.3} if force_polling else {}
    watcher = FolderWatcher(library, reconcile_interval_s=None, debounce_s=0.2, **options).start()
    try:
        settle(library, watcher)
        os.symlink(private / "hostname.txt", folder / "hostname.txt")
        os.symlink(folder / "heron.txt", folder / "alias.txt")
        os.symlink(private, folder / "elsewhere")
        os.symlink(private / "deep", folder / "deep")
        (folder / "swift.txt").write_text("Swifts sleep on the wing.\n")
        settle(library, watcher)
        assert found(library, "sleep on the wing")  # the rest goes on being indexed
        states = _states(library)
        assert states["hostname.txt"] == ("skipped", OUTSIDE_LINK)
        assert states["alias.txt"] == (
            "skipped",
            "a link to heron.txt, another file in this folder (each file is read once)",
        )
        assert "notes.txt" not in states  # linked folders are not walked
        assert not [
            h for h in library.search("zanzibarite", mode="bm25") if "zanzibarite" in h.text
        ]

        # The target changing, or the watcher being told of a path through the link,
        # reads nothing either.
        (private / "hostname.txt").write_text(SECRET + " Changed.\n")
        (private / "deep" / "more.txt").write_text(SECRET + " More.\n")
        library.sync_files([str(folder / "deep" / "more.txt"), str(folder / "elsewhere")])
        settle(library, watcher)
        states = _states(library)
        assert "more.txt" not in states and "notes.txt" not in states
        assert not [
            h for h in library.search("zanzibarite", mode="bm25") if "zanzibarite" in h.text
        ]
    finally:
        watcher.stop()
