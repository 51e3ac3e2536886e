"""Files and folders only their owner can read.

A library holds a person's documents as text, their conversations and possibly an API
key, so everything Lectern writes is private whatever the umask: folders it creates are
0700, files it writes 0600. Every file Lectern writes itself goes through
:func:`write_private` or :func:`private_file`: made under a name no one can guess
(``mkstemp``, ``O_EXCL``, never following a link) beside its target and renamed over it,
so a link planted at a predictable temporary name cannot redirect the write.

The entry points (CLI, app) also set the umask to 0o077, for the files other code makes
(DuckDB's database, log and spill files); a program using :class:`core.library.Library`
as a module keeps its own umask, and the library's 0700 folder is what keeps those
private, :func:`tighten` putting them right at open and close.
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

PRIVATE_UMASK = 0o077
DIR_MODE = 0o700
FILE_MODE = 0o600
# Group and others: the bits tighten takes away.
_SHARED_BITS = 0o077
# The characters of a target's name kept in its temporary's: mkstemp adds eight and the
# suffix, and a name near NAME_MAX (255 bytes, up to 4 a character) would not fit.
_NAME_ROOM = 50


# The umask the person's session gave this process, before private_umask narrowed it.
_session_umask: int | None = None


def private_umask() -> int:
    """Make files and folders this process creates from now on private; returns the
    umask before."""
    global _session_umask
    before = os.umask(PRIVATE_UMASK)
    if _session_umask is None:
        _session_umask = before
    return before


@contextlib.contextmanager
def session_umask() -> Iterator[None]:
    """The person's own umask while another program is started (a PDF viewer, the file
    manager): it inherits the umask, and what the person saves from it is theirs to share."""
    if _session_umask is None:
        yield
        return
    before = os.umask(_session_umask)
    try:
        yield
    finally:
        os.umask(before)


def make_private_dir(path: Path) -> Path:
    """``path`` and every missing folder above it made 0700 (the umask cannot widen or
    narrow them); folders that exist are left as they are (see :func:`tighten`). OSError
    when one cannot be made."""
    path = Path(path)
    missing: list[Path] = []
    folder = path
    while not folder.exists():
        missing.append(folder)
        if folder.parent == folder:
            break
        folder = folder.parent
    for folder in reversed(missing):
        try:
            os.mkdir(folder, DIR_MODE)
        except FileExistsError:
            # Made meanwhile by another process, or a file (whose mkdir below fails).
            if not folder.is_dir():
                raise
            continue
        # mkdir's mode passes through the umask; one like 0o700 would leave it unusable.
        os.chmod(folder, DIR_MODE)
    if not path.is_dir():
        raise NotADirectoryError(f"{path} is not a folder")
    return path


@contextlib.contextmanager
def private_file(path: Path, *, durable: bool = True) -> Iterator[BinaryIO]:
    """A binary handle to write ``path`` whole or not at all: it writes a 0600 file made
    with O_EXCL under an unguessable name in ``path``'s folder, which replaces ``path``
    (a link there included, never followed) once the block ends without error.
    ``durable``: flushed to the disk before the rename, so a crash leaves the old file or
    the new one, never an empty one."""
    target = Path(path)
    fd, name = tempfile.mkstemp(
        dir=target.parent, prefix=f".{target.name[:_NAME_ROOM]}.", suffix=".tmp"
    )
    temporary = Path(name)
    try:
        with os.fdopen(fd, "wb") as handle:
            _owner_only(handle.fileno())
            yield handle
            handle.flush()
            if durable:
                os.fsync(handle.fileno())
        os.replace(temporary, target)
    except BaseException:
        with contextlib.suppress(OSError):
            temporary.unlink()
        raise


def _owner_only(fd: int) -> None:
    """The open file made 0600. mkstemp makes it so already; said again so that no
    platform default widens it. A disk that keeps no modes (a FAT USB stick) refuses,
    and so does a log someone else owns: written all the same."""
    if hasattr(os, "fchmod"):  # Windows' Python before 3.13 has none (and no modes)
        with contextlib.suppress(OSError):
            os.fchmod(fd, FILE_MODE)


def write_private(path: Path, data: str | bytes, *, durable: bool = True) -> None:
    """Write ``data`` (text as UTF-8) to ``path`` as :func:`private_file` does."""
    raw = data.encode("utf-8") if isinstance(data, str) else data
    with private_file(path, durable=durable) as handle:
        handle.write(raw)


def append_private(path: Path, text: str) -> None:
    """Add ``text`` to the end of the log ``path``, made 0600 if new (a link there is not
    followed), and made private if it was not."""
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0)
    fd = os.open(path, flags, FILE_MODE)
    with os.fdopen(fd, "ab") as handle:
        if os.fstat(handle.fileno()).st_mode & _SHARED_BITS:
            _owner_only(handle.fileno())
        handle.write(text.encode("utf-8", "backslashreplace"))


def scratch_file(folder: Path, prefix: str, suffix: str, data: str | bytes) -> Path:
    """A new 0600 file in ``folder`` under an unguessable name, holding ``data`` (text as
    UTF-8), for the caller to read and remove."""
    raw = data.encode("utf-8") if isinstance(data, str) else data
    fd, name = tempfile.mkstemp(dir=folder, prefix=prefix, suffix=suffix)
    try:
        with os.fdopen(fd, "wb") as handle:
            _owner_only(handle.fileno())
            handle.write(raw)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(name)
        raise
    return Path(name)


def tighten(home: Path) -> int:
    """Take group and other permissions off ``home`` and everything in it that this user
    owns; returns how many files and folders changed. Links are not followed, and what
    belongs to someone else, or cannot be changed (a read-only disk), is left alone.
    Only bits are taken away: a folder someone made read-only stays read-only. A
    ``home`` that is itself a link (the data folder moved to another disk) is followed."""
    if not hasattr(os, "geteuid"):
        return 0  # Windows: no modes to take away
    changed = 0
    me = os.geteuid()

    def strip(path: str) -> None:
        nonlocal changed
        try:
            st = os.lstat(path)
            if stat.S_ISLNK(st.st_mode) or st.st_uid != me or not st.st_mode & _SHARED_BITS:
                return
            os.chmod(path, stat.S_IMODE(st.st_mode) & ~_SHARED_BITS)
        except OSError:
            return
        changed += 1

    root = os.path.realpath(home)
    if not os.path.isdir(root):
        return 0
    strip(root)
    # os.walk does not descend into linked folders; strip skips the links themselves.
    for folder, dirs, files in os.walk(root, onerror=lambda _exc: None):
        for name in (*dirs, *files):
            strip(os.path.join(folder, name))
    return changed


def shared(path: Path) -> bool:
    """Whether group or others have any permission on the folder ``path`` (or the one a
    link there leads to)."""
    try:
        return bool(os.stat(path).st_mode & _SHARED_BITS)
    except OSError:
        return False
