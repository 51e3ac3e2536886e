"""The client: what the read-only commands need of a library, asked of the process that
holds it (protocol in core/ipc/__init__.py)."""

from __future__ import annotations

import errno
import json
import os
import socket
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from core.errors import LecternError, error_from_json
from core.ipc.address import candidates, peer_uid, supported
from core.ipc.wire import (
    PROTOCOL,
    BadReply,
    VersionMismatch,
    event_from_wire,
    frame,
)
from core.records import (
    Conversation,
    ConversationMatch,
    FileEntry,
    Hit,
    Scope,
    Turn,
    record_from_json,
)

if TYPE_CHECKING:
    from core.config import Settings
    from core.generation.qa import Event

CONNECT_TIMEOUT_S = 2.0
HELLO_TIMEOUT_S = 30.0  # a busy server answers hello after the requests ahead of it


def _open(path: Path) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.settimeout(CONNECT_TIMEOUT_S)
        sock.connect(str(path))
        uid = peer_uid(sock)
        if uid is not None and uid != os.getuid():
            raise ConnectionRefusedError(errno.EACCES, "the server is another user's")
    except BaseException:
        sock.close()
        raise
    return sock


def _exchange(
    path: Path, request: Mapping[str, object], timeout: float | None
) -> Iterator[dict[str, Any]]:
    """Send ``request`` to the server at ``path`` and yield its reply lines; closing the
    iterator hangs up."""
    sock = _open(path)
    try:
        sock.sendall(frame(request))
        sock.settimeout(timeout)
        reader = sock.makefile("rb")
        while True:
            line = reader.readline()
            if not line:
                return
            try:
                reply = json.loads(line.decode("utf-8"))
            except (UnicodeDecodeError, ValueError):
                raise BadReply("a reply that is not JSON") from None
            if not isinstance(reply, dict):
                raise BadReply("a reply that is not a JSON object")
            if reply.get("v") != PROTOCOL:
                raise VersionMismatch(reply.get("v"))
            yield reply
    finally:
        sock.close()


def _gone() -> LecternError:
    return LecternError(
        "The running Lectern stopped before it answered.",
        "Run the command again.",
    )


class RemoteLibrary:
    """The library as the process that holds it answers: what the read-only commands
    need of :class:`core.library.Library`, over its socket."""

    recovery_notices: tuple[()] = ()  # repairs at open were told by the process that opened it

    def __init__(self, path: Path, info: Mapping[str, Any]) -> None:
        self.path = path
        self.info = dict(info)

    def _call(self, request: Mapping[str, object]) -> Any:
        try:
            for reply in _exchange(self.path, request, timeout=None):
                if reply.get("ok"):
                    return reply.get("result")
                raise error_from_json(reply.get("error") or {})
        except (OSError, BadReply, VersionMismatch):
            raise _gone() from None
        raise _gone()

    def status(self) -> dict[str, object]:
        result = self._call({"op": "status"})
        if not isinstance(result, dict):
            raise _gone()
        return result

    @property
    def files(self) -> RemoteFiles:
        """The library's files, read as :class:`core.store.documents.DocumentStore` reads
        them."""
        return RemoteFiles(self)

    def search(
        self,
        query: str,
        k: int | None = None,
        mode: str = "hybrid",
        folders: Sequence[str] | None = None,
        types: Sequence[str] | None = None,
        *,
        scope: Scope | None = None,
    ) -> list[Hit]:
        from core.store.paths import normalize_folder

        result = self._call(
            {
                "op": "search",
                "query": query,
                "k": k,
                "mode": mode,
                # Relative to this command's folder, not the server's.
                "folders": [normalize_folder(f) for f in folders] if folders else None,
                "types": list(types) if types else None,
                "scope": _scope_to_wire(scope),
            }
        )
        hits: list[Hit] = _records(list[Hit], result)
        return hits

    def ask(
        self,
        question: str,
        conversation: int | None = None,
        *,
        settings: Settings,
        model: str | None = None,
        use_llm: bool = True,
        k: int | None = None,
        scope: Scope | None = None,
    ) -> Iterator[Event]:
        """The events of :func:`core.generation.qa.ask`, answered by the running Lectern with this
        command's settings (model, server, number of sources). Closing the iterator (or
        Ctrl-C while waiting) hangs up, which cancels the answer there."""
        llm: dict[str, str] = {}
        if use_llm:
            llm = {
                "kind": settings.llm_kind,
                "url": settings.resolved_llm_url,
                "api_key": settings.llm_api_key,
            }
        request = {
            "op": "ask",
            "question": question,
            "conversation": conversation,
            "model": model or settings.llm_model,
            "k": k or settings.top_k,
            "use_llm": use_llm,
            "llm": llm,
            "scope": _scope_to_wire(scope),
        }
        finished = False
        try:
            for reply in _exchange(self.path, request, timeout=None):
                if "event" in reply:
                    event = event_from_wire(reply["event"])
                    finished = reply["event"].get("type") in ("done", "error")
                    yield event
                    if finished:
                        return
                elif reply.get("ok") is False:
                    raise error_from_json(reply.get("error") or {})
        except (OSError, BadReply, VersionMismatch, KeyError, TypeError, ValueError):
            raise _gone() from None
        if not finished:
            raise _gone()

    @property
    def conversations(self) -> RemoteConversations:
        """The kept conversations, read as :class:`core.store.conversations.ConversationStore`
        reads them."""
        return RemoteConversations(self)

    def close(self) -> None:
        """Nothing to close: each request has its own connection."""


class RemoteFiles:
    """What the read-only commands read of the library's files, over the socket."""

    def __init__(self, remote: RemoteLibrary) -> None:
        self._remote = remote

    def file_list(self, folder: str | None = None, status: str | None = None) -> list[FileEntry]:
        from core.store.paths import normalize_folder

        result = self._remote._call(
            {
                "op": "files",
                # Relative to this command's folder, not the server's.
                "folder": normalize_folder(folder) if folder else None,
                "status": status,
            }
        )
        entries: list[FileEntry] = _records(list[FileEntry], result)
        return entries


class RemoteConversations:
    """What the read-only commands read of the kept conversations, over the socket."""

    def __init__(self, remote: RemoteLibrary) -> None:
        self._remote = remote

    def _one(self, conversation_id: int) -> tuple[Conversation, list[Turn]]:
        result = self._remote._call({"op": "conversation", "id": conversation_id})
        if not isinstance(result, dict):
            raise _gone()
        return (
            _records(Conversation, result.get("conversation")),
            _records(list[Turn], result.get("turns")),
        )

    def require(self, conversation_id: int) -> Conversation:
        return self._one(conversation_id)[0]

    def turns(self, conversation_id: int) -> list[Turn]:
        return self._one(conversation_id)[1]

    def search(self, query: str, limit: int = 100) -> list[ConversationMatch]:
        result = self._remote._call({"op": "search_conversations", "query": query, "limit": limit})
        matches: list[ConversationMatch] = _records(list[ConversationMatch], result)
        return matches

    def export(self, conversation_id: int) -> str:
        """The conversation as Markdown (written by the command itself, where it is asked
        to: the running Lectern may see another folder as the current one)."""
        result = self._remote._call({"op": "export", "id": conversation_id})
        if not isinstance(result, str):
            raise _gone()
        return result

    # Last: below it, ``list`` in this class names the method, not the type.
    def list(self, limit: int = 100) -> list[Conversation]:
        result = self._remote._call({"op": "conversations", "limit": limit})
        conversations: list[Conversation] = _records(list[Conversation], result)
        return conversations


def _records(kind: Any, result: object) -> Any:
    """``result`` read back as ``kind`` (records typed all the way down); a reply of
    another shape is a server that stopped making sense, said as one that stopped."""
    try:
        return record_from_json(kind, result)
    except ValueError:
        raise _gone() from None


def _scope_to_wire(scope: Scope | None) -> dict[str, list[str]] | None:
    """A scope for the server; its folders relative to this command's folder."""
    from core.store.paths import normalize_folder

    if scope is None:
        return None
    wire = scope.to_json()
    wire["folders"] = [normalize_folder(f) for f in scope.folders]
    return wire


def _same_folder(served: str, home: Path) -> bool:
    try:
        return os.path.samefile(served, home)
    except OSError:
        return False


def connect(home: Path) -> RemoteLibrary | None:
    """The running Lectern that holds the library in ``home``, if one answers; None when
    none does (it stopped, or is a version without a server) or sockets are missing."""
    if not supported():
        return None
    for path in candidates(home):
        try:
            for reply in _exchange(path, {"op": "hello"}, timeout=HELLO_TIMEOUT_S):
                result = reply.get("result")
                if (
                    reply.get("ok")
                    and isinstance(result, dict)
                    and _same_folder(str(result.get("home", "")), home)
                ):
                    return RemoteLibrary(path, result)
                break
        except (OSError, BadReply, VersionMismatch):
            continue  # refused: a socket a stopped Lectern left behind
    return None
