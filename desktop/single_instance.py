"""One window per library: a second launch hands its request to the first and exits.

DuckDB lets one process write a database file, so two windows on the same library would
fail anyway; instead the second launch connects to the first one's local socket, asks it
to come forward (and to add any folders given on the command line), and quits.

The socket lives in the data folder (0700), or in the user's private runtime folder when
that path is too long: never at a name in the shared temp folder, where another account
could listen first and receive the folders a launch hands over (or make it quit). With
no private place the second launch simply opens, and the library's lock says it is busy.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Sequence
from pathlib import Path

from core.ipc.address import fits
from core.private import make_private_dir
from desktop.qt import QLocalServer, QLocalSocket, QObject, Signal

CONNECT_TIMEOUT_MS = 500
SOCKET_NAME = "lectern-window.sock"


def _private(folder: Path) -> bool:
    try:
        st = folder.stat()
    except OSError:
        return False
    return st.st_uid == os.getuid() and not st.st_mode & 0o077


def server_name(home: str) -> str | None:
    """The full path of the window's socket, or None when no private place fits one."""
    beside = Path(home) / SOCKET_NAME
    if fits(beside):
        return str(beside)
    runtime = os.environ.get("XDG_RUNTIME_DIR", "")
    if runtime and _private(Path(runtime)):
        digest = hashlib.sha256(os.fsencode(os.path.abspath(home))).hexdigest()[:16]
        path = Path(runtime) / f"lectern-window-{digest}.sock"
        if fits(path):
            return str(path)
    return None


class SingleInstance(QObject):
    """``activated(folders)`` fires in the first instance when another launch asks."""

    activated = Signal(list)

    def __init__(self, home: str, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.home = home
        self.name = server_name(home)
        self.server: QLocalServer | None = None

    def notify_running(self, folders: Sequence[str] = ()) -> bool:
        """True when another instance took the request (this one should exit)."""
        if self.name is None or not _private(Path(self.name).parent):
            return False
        socket = QLocalSocket()
        socket.connectToServer(self.name)
        if not socket.waitForConnected(CONNECT_TIMEOUT_MS):
            return False
        message = json.dumps({"command": "activate", "folders": list(folders)}) + "\n"
        socket.write(message.encode())
        socket.flush()
        socket.waitForBytesWritten(CONNECT_TIMEOUT_MS)
        # Wait for the acknowledgement, so the first window is raised before we vanish.
        socket.waitForReadyRead(CONNECT_TIMEOUT_MS)
        socket.disconnectFromServer()
        return True

    def listen(self) -> bool:
        if self.name is None:
            return False
        try:
            make_private_dir(Path(self.home))
            if Path(self.name).parent == Path(self.home):
                # A library made before folders were private: the Library tightens the
                # rest when it opens, but the socket's folder must be private first.
                os.chmod(self.home, 0o700)
        except OSError:
            return False
        if not _private(Path(self.name).parent):
            return False
        server = QLocalServer(self)
        server.setSocketOptions(QLocalServer.SocketOption.UserAccessOption)
        if not server.listen(self.name):
            # A crashed instance leaves its socket file behind (Unix); nobody answered on
            # it a moment ago, so it is safe to take over.
            QLocalServer.removeServer(self.name)
            if not server.listen(self.name):
                return False
        server.newConnection.connect(self._accept)
        self.server = server
        return True

    def _accept(self) -> None:
        assert self.server is not None
        while self.server.hasPendingConnections():
            socket = self.server.nextPendingConnection()
            # The server owns its sockets and frees them when it closes; deleting them on
            # "disconnected" crashed PySide when Python still held the wrapper.
            socket.readyRead.connect(lambda s=socket: self._read(s))

    def _read(self, socket: QLocalSocket) -> None:
        if not socket.canReadLine():
            return
        line = bytes(socket.readLine().data()).decode("utf-8", "replace")
        try:
            message = json.loads(line)
        except ValueError:
            message = {}
        folders = [str(f) for f in message.get("folders") or [] if isinstance(f, str)]
        socket.write(b"ok\n")
        socket.flush()
        self.activated.emit(folders)

    def close(self) -> None:
        if self.server is not None:
            self.server.close()
            self.server = None
