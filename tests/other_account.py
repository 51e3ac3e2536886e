"""A second local account for tests of what another user can reach (issue 45): made with
``useradd`` for the test and removed after, and a shared folder like /tmp to meet in."""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

TOOLS = ("useradd", "userdel", "runuser")


@dataclass(frozen=True)
class Account:
    name: str
    uid: int

    def run(self, *command: str) -> subprocess.CompletedProcess[str]:
        """``command`` run as this account, its output in pipes."""
        return subprocess.run(
            ["runuser", "-u", self.name, "--", *command],
            capture_output=True,
            text=True,
            timeout=60,
            cwd="/",
        )


def skip_unless_possible() -> None:
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        pytest.skip("making a second local account needs root")
    missing = [t for t in TOOLS if shutil.which(t) is None]
    if missing:
        pytest.skip(f"making a second local account needs {', '.join(missing)}")


@contextlib.contextmanager
def other_account() -> Iterator[Account]:
    """A throwaway account with no home and no login, removed afterwards."""
    skip_unless_possible()
    name = f"lectern-t{uuid.uuid4().hex[:8]}"
    made = subprocess.run(
        ["useradd", "--no-create-home", "--shell", "/usr/sbin/nologin", name],
        capture_output=True,
        text=True,
        timeout=60,
    )
    if made.returncode != 0:
        pytest.skip(f"useradd could not make an account here: {made.stderr.strip()}")
    try:
        uid = int(
            subprocess.run(["id", "-u", name], capture_output=True, text=True, check=True).stdout
        )
        yield Account(name, uid)
    finally:
        subprocess.run(["userdel", name], capture_output=True, timeout=60)


@contextlib.contextmanager
def shared_root() -> Iterator[Path]:
    """A folder every account may enter (pytest's own temp folder is 0700), removed after."""
    root = Path(tempfile.mkdtemp(prefix="lectern-shared-"))
    try:
        os.chmod(root, 0o755)
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


def sticky_folder(path: Path) -> Path:
    """``path`` made like /tmp: anyone may add to it, only an entry's owner remove it."""
    path.mkdir()
    os.chmod(path, 0o1777)
    return path


def not_private(home: Path) -> list[str]:
    """Every folder in ``home`` (itself included) that is not 0700 and every file that is
    not 0600, with its mode; links are not followed."""
    found = []
    for path in [home, *sorted(home.rglob("*"))]:
        st = path.lstat()
        mode = stat.S_IMODE(st.st_mode)
        if stat.S_ISLNK(st.st_mode):
            continue
        wanted = 0o700 if stat.S_ISDIR(st.st_mode) else 0o600
        if mode != wanted:
            found.append(f"{path.relative_to(home.parent)} {mode:o}")
    return found


@contextlib.contextmanager
def umask(mask: int) -> Iterator[None]:
    previous = os.umask(mask)
    try:
        yield
    finally:
        os.umask(previous)
