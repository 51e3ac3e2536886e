"""Where the socket goes when the data folder's path is too long for one (issue 45).
Before: it went to ``<temp>/lectern-ipc-<uid>``, a name another account could make first
(``mkdir -m777``), and the server then had no place for its socket."""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

import pytest

from core import ipc
from core.cli.common import ANSWERED_REMOTELY
from core.config import Settings
from core.library import Library
from tests.helpers import cli
from tests.other_account import other_account, shared_root, sticky_folder

pytestmark = pytest.mark.skipif(not ipc.supported(), reason="no AF_UNIX sockets here")


def long_home(root: Path) -> Path:
    home = root.joinpath(*["a-rather-long-folder-name"] * 5)
    assert len(str(home / ipc.SOCKET_NAME)) > 108
    return home


def predictable_places() -> set[Path]:
    return {Path(base) / f"lectern-ipc-{os.getuid()}" for base in (tempfile.gettempdir(), "/tmp")}


def test_a_folder_another_account_made_first_does_not_deny_the_socket(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with shared_root() as root, other_account() as other:
        shared_tmp = sticky_folder(root / "tmp")
        monkeypatch.setattr(tempfile, "tempdir", str(shared_tmp))
        monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
        planted = []
        for place in predictable_places():
            if not os.path.lexists(place):
                made = other.run("mkdir", "-m", "777", str(place))
                assert made.returncode == 0, made.stderr
                planted.append(place)
        assert shared_tmp / f"lectern-ipc-{os.getuid()}" in planted
        home = long_home(root)
        try:
            with Library(Settings(home=home)) as library, ipc.serve(library) as server:
                assert server.active and server.path is not None
                folder = server.path.parent
                assert folder not in predictable_places()
                st = folder.lstat()
                assert stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid()
                assert stat.S_IMODE(st.st_mode) == 0o700
                # The command beside it finds the socket by the record, with no
                # runtime folder and its own temp folder.
                done = cli(home, "status")
                assert done.returncode == 0, done.stderr
                assert ANSWERED_REMOTELY in done.stderr
            assert not folder.exists()  # made for the socket, gone with it
        finally:
            for place in planted:
                other.run("rmdir", str(place))


def test_the_folder_a_stopped_server_made_is_used_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A server that did not close (killed) leaves its folder; the next one uses that
    folder again while it is still this user's alone, not one more folder per crash."""
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    home = long_home(tmp_path)
    with Library(Settings(home=home)) as library:
        first = ipc.serve(library)
        kept = first.path
        assert kept is not None
        first.path = None  # as if killed: nothing removed
        first.close()
        second = ipc.serve(library)
        try:
            assert second.path == kept
            remote = ipc.connect(home)
            assert remote is not None and remote.path == kept
        finally:
            second.close()
        assert not kept.parent.exists()
        # Not when the folder is open to others: a new private one then.
        kept.parent.mkdir(mode=0o700)
        os.chmod(kept.parent, 0o777)
        ipc.record_path(home).write_text(f'{{"socket": "{kept}"}}')
        try:
            with ipc.serve(library) as third:
                assert third.path is not None and third.path.parent != kept.parent
                assert stat.S_IMODE(third.path.parent.stat().st_mode) == 0o700
        finally:
            kept.parent.rmdir()
