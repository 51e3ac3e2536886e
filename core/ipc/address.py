"""Where a library's socket lives, and who may connect to it.

The socket is ``<data folder>/lectern.sock`` when that path fits in a socket address
(about 104 bytes); otherwise it lives in ``$XDG_RUNTIME_DIR`` (when that is this user's
and private), named by a hash of the data folder, or else in a 0700 folder the server
makes in the temp folder under a name no one can guess (``mkdtemp``): a predictable one
there could be made first by another account, which would deny the socket. Where it is,
is recorded in ``lectern.sock.json`` beside the database, which is how a command finds
a socket in the temp folder; a server reuses the folder its record names while that
folder is still its user's alone.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import socket
import stat
import struct
import tempfile
from pathlib import Path

SOCKET_NAME = "lectern.sock"
RECORD_NAME = "lectern.sock.json"
# sun_path holds 108 bytes on Linux and 104 on macOS, the closing NUL included.
MAX_SOCKET_PATH = 103
# The start of the name of a folder a server makes for its socket in the temp folder.
FOLDER_PREFIX = "lectern-ipc-"


def supported() -> bool:
    return hasattr(socket, "AF_UNIX") and hasattr(os, "getuid")


def fits(path: Path) -> bool:
    # The server binds a longer temporary name first (see Server._bind).
    return len(os.fsencode(str(temporary_name(path)))) <= MAX_SOCKET_PATH


def temporary_name(path: Path) -> Path:
    return path.with_name(f".{path.name}.{os.getpid()}")


def _private(folder: Path) -> bool:
    """Whether ``folder`` is a real folder that only this user can enter."""
    try:
        st = os.lstat(folder)
    except OSError:
        return False
    return stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid() and not st.st_mode & 0o077


def _runtime_socket(home: Path) -> Path | None:
    """The socket's place in this user's runtime folder, when there is one (private) and
    the path fits."""
    runtime = os.environ.get("XDG_RUNTIME_DIR", "")
    if not runtime or not _private(Path(runtime)):
        return None
    digest = hashlib.sha256(os.fsencode(os.path.abspath(home))).hexdigest()[:16]
    path = Path(runtime) / f"lectern-{digest}.sock"
    return path if fits(path) else None


def default_path(home: Path) -> Path | None:
    """Where the socket of ``home`` is without asking its record: beside the database,
    or in the runtime folder; None when it must go to a folder of its own (the record
    says which)."""
    beside = Path(home) / SOCKET_NAME
    if fits(beside):
        return beside
    return _runtime_socket(home)


def in_own_folder(path: Path) -> bool:
    """Whether ``path`` is in a folder a server made for it (``socket_path``), to be
    removed with it."""
    return path.parent.name.startswith(FOLDER_PREFIX)


def socket_path(home: Path, previous: Path | None = None) -> Path:
    """Where the server for the library in ``home`` listens; OSError if nowhere fits.
    ``previous``: where the record says an earlier server listened, whose folder is
    used again while it is still this user's alone (not one more folder per crash)."""
    found = default_path(home)
    if found is not None:
        return found
    if (
        previous is not None
        and in_own_folder(previous)
        and _private(previous.parent)
        and fits(previous)
    ):
        return previous
    for base in (tempfile.gettempdir(), "/tmp"):
        try:
            folder = Path(tempfile.mkdtemp(prefix=FOLDER_PREFIX, dir=base))
        except OSError:
            continue
        if fits(folder / SOCKET_NAME):
            return folder / SOCKET_NAME
        with contextlib.suppress(OSError):
            folder.rmdir()
    raise OSError(errno.ENAMETOOLONG, f"no place for the socket of {home}")


def record_path(home: Path) -> Path:
    return Path(home) / RECORD_NAME


def recorded(home: Path) -> Path | None:
    """Where the record beside the database says a server listens."""
    try:
        record = json.loads(record_path(home).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if isinstance(record, dict) and isinstance(record.get("socket"), str):
        return Path(record["socket"])
    return None


def candidates(home: Path) -> list[Path]:
    """Where a server for ``home`` may listen: what the record says, then the default."""
    found = [p for p in (recorded(home), default_path(home)) if p is not None]
    return list(dict.fromkeys(found))


def peer_uid(sock: socket.socket) -> int | None:
    """The user id of the other end, where the system tells it (Linux)."""
    option = getattr(socket, "SO_PEERCRED", None)
    if option is None:
        return None
    size = struct.calcsize("3i")
    _pid, uid, _gid = struct.unpack("3i", sock.getsockopt(socket.SOL_SOCKET, option, size))
    return int(uid)
