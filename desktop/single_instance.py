"""One window per library: a second launch hands its request to the first and exits.

DuckDB lets one process write a database file, so two windows on the same library would
fail anyway; instead the second launch connects to the first one's local socket, asks it
to come forward (and to add any folders given on the command line), and quits. The
socket name is derived from the data folder, so separate libraries (LECTERN_HOME) can
run side by side.
"""

from __future__ import annotations

import getpass
import hashlib
import json
from collections.abc import Sequence

from desktop.qt import QLocalServer, QLocalSocket, QObject, Signal

CONNECT_TIMEOUT_MS = 500


def server_name(home: str) -> str:
    try:
        user = getpass.getuser()
    except Exception:  # no login name (some containers): the home folder still separates
        user = "user"
    digest = hashlib.sha1(f"{user}\0{home}".encode()).hexdigest()[:16]
    return f"lectern-{digest}"


class SingleInstance(QObject):
    """``activated(folders)`` fires in the first instance when another launch asks."""

    activated = Signal(list)

    def __init__(self, home: str, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.name = server_name(home)
        self.server: QLocalServer | None = None

    def notify_running(self, folders: Sequence[str] = ()) -> bool:
        """True when another instance took the request (this one should exit)."""
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
