"""Read-only commands beside a writer: the process that holds the library answers them.

DuckDB lets one process open the library's database, so while ``lectern watch``,
``lectern index`` or the desktop app holds it, ``lectern search``, ``status``, ``files``,
``conversations`` (all but ``rename``) and ``ask`` cannot open it themselves
(IndexBusyError). Instead the holder runs a :class:`Server` on background threads,
listening on a local (AF_UNIX) socket, and those commands send it their request and
print its reply exactly as they would print their own.

The socket is ``<data folder>/lectern.sock`` when that path fits in a socket address
(about 104 bytes); otherwise it lives under ``$XDG_RUNTIME_DIR`` or in a 0700 folder
the server makes in the temp folder under a name no one can guess (core/ipc/address.py).
Where it is, is recorded in ``lectern.sock.json`` beside the database. The socket is 0600 and a connection from
another user is refused (checked with SO_PEERCRED where the system has it). Where
AF_UNIX is missing (Windows' Python), no server runs and the commands say the library
is busy, as before.

The protocol: one request per connection, a JSON object on one line with the protocol
version ``v`` and an ``op``; replies are JSON lines with the same ``v``.

* ``hello``: ``{"ok": true, "result": {"pid", "home", "version", "protocol"}}``
* ``status``: ``{"ok": true, "result": <Library.status()>}``
* ``files`` (``folder``, ``status``): ``{"ok": true, "result": [<FileEntry.to_json()>, ...]}``
* ``search`` (``query``, ``mode``, ``k``, ``folders``, ``types``, ``scope``):
  ``{"ok": true, "result": [<hit>, ...]}``, each hit ``Hit.to_json()`` plus
  ``document_id`` and the unrounded ``score``
* ``conversations`` (``limit``), ``search_conversations`` (``query``, ``limit``),
  ``conversation`` (``id``: the conversation and its turns) and ``export`` (``id``: the
  Markdown text): the kept conversations, records as ``record_to_json`` writes them
  (core/records.py), read back typed
* ``ask`` (``question``, ``conversation``, ``model``, ``k``, ``use_llm``, ``llm``, ``scope``,
  ``Scope.to_json()`` or null): one
  ``{"event": {...}}`` line per event of :func:`core.generation.qa.ask` as it happens, the last one
  a ``done`` or an ``error``; closing the connection cancels the answer.

A failed request gets ``{"ok": false, "error": {"type", "message", "hint"}}``: the
LecternError's words, never a traceback.

The package: ``address`` (where the socket lives), ``wire`` (what travels), ``server``
and ``client``.
"""

from __future__ import annotations

from core.ipc.address import MAX_SOCKET_PATH, SOCKET_NAME, record_path, socket_path, supported
from core.ipc.client import RemoteLibrary, connect
from core.ipc.server import Server, serve
from core.ipc.wire import PROTOCOL, event_from_wire, event_to_wire

__all__ = [
    "MAX_SOCKET_PATH",
    "PROTOCOL",
    "SOCKET_NAME",
    "RemoteLibrary",
    "Server",
    "connect",
    "event_from_wire",
    "event_to_wire",
    "record_path",
    "serve",
    "socket_path",
    "supported",
]
