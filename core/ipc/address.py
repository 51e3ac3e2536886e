"""Where a library's socket lives, and who may connect to it.

The socket is ``<data folder>/lectern.sock`` when that path fits in a socket address
(about 104 bytes); otherwise it lives under ``$XDG_RUNTIME_DIR`` or a private (0700)
folder in the temp folder, named by a hash of the data folder. Where it is, is recorded
in ``lectern.sock.json`` beside the database.
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


def socket_path(home: Path) -> Path:
    """Where the server for the library in ``home`` listens; OSError if nowhere fits."""
    beside = Path(home) / SOCKET_NAME
    if fits(beside):
        return beside
    digest = hashlib.sha256(os.fsencode(os.path.abspath(home))).hexdigest()[:16]
    runtime = os.environ.get("XDG_RUNTIME_DIR", "")
    if runtime and _private(Path(runtime)) and fits(Path(runtime) / f"lectern-{digest}.sock"):
        return Path(runtime) / f"lectern-{digest}.sock"
    for base in (tempfile.gettempdir(), "/tmp"):
        folder = Path(base) / f"lectern-ipc-{os.getuid()}"
        with contextlib.suppress(FileExistsError):
            folder.mkdir(mode=0o700)
        # Someone else's folder (or a symlink) in a shared /tmp must not receive the socket.
        if _private(folder) and fits(folder / f"{digest}.sock"):
            return folder / f"{digest}.sock"
    raise OSError(errno.ENAMETOOLONG, f"no place for the socket of {home}")


def record_path(home: Path) -> Path:
    return Path(home) / RECORD_NAME


def candidates(home: Path) -> list[Path]:
    """Where a server for ``home`` may listen: what the record says, then the default."""
    found: list[Path] = []
    try:
        record = json.loads(record_path(home).read_text(encoding="utf-8"))
        if isinstance(record, dict) and isinstance(record.get("socket"), str):
            found.append(Path(record["socket"]))
    except (OSError, ValueError):
        pass
    with contextlib.suppress(OSError):
        default = socket_path(home)
        if default not in found:
            found.append(default)
    return found


def peer_uid(sock: socket.socket) -> int | None:
    """The user id of the other end, where the system tells it (Linux)."""
    option = getattr(socket, "SO_PEERCRED", None)
    if option is None:
        return None
    size = struct.calcsize("3i")
    _pid, uid, _gid = struct.unpack("3i", sock.getsockopt(socket.SOL_SOCKET, option, size))
    return int(uid)
