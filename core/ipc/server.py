"""The server: the process that holds the library answers read-only requests on its own
threads (protocol in core/ipc/__init__.py)."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import selectors
import socket
import threading
import time
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from core import __version__
from core.app import ops
from core.errors import LecternError
from core.ipc.address import (
    default_path,
    in_own_folder,
    peer_uid,
    record_path,
    recorded,
    socket_path,
    supported,
    temporary_name,
)
from core.ipc.wire import PROTOCOL, BadRequest, error_frame, event_to_wire, frame
from core.private import write_private
from core.records import FILE_STATUSES, Scope, record_to_json

if TYPE_CHECKING:
    from core.library import Library

log = logging.getLogger(__name__)

MAX_REQUEST_BYTES = 1 << 20
MAX_CONNECTIONS = 16  # requests served at once, each on a thread of its own
REQUEST_TIMEOUT_S = 10.0  # a client that connects and says nothing is dropped
MODES = ("hybrid", "bm25", "dense")


def _parse_request(line: bytes) -> dict[str, Any]:
    try:
        request = json.loads(line.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        raise BadRequest("The request was not one line of JSON.") from None
    if not isinstance(request, dict):
        raise BadRequest("The request was not a JSON object.")
    if request.get("v") != PROTOCOL:
        raise BadRequest(
            f"This Lectern speaks protocol version {PROTOCOL}, not {request.get('v')!r}.",
            "Use the `lectern` command of the same version as the running Lectern.",
        )
    return request


def _text(request: Mapping[str, Any], key: str) -> str:
    value = request.get(key)
    if not isinstance(value, str) or not value.strip():
        raise BadRequest(f"The request has no {key}.")
    return value


def _optional_int(request: Mapping[str, Any], key: str, least: int = 1) -> int | None:
    value = request.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise BadRequest(f"The request's {key} must be a whole number of at least {least}.")
    return value


def _names(request: Mapping[str, Any], key: str) -> list[str] | None:
    value = request.get(key)
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise BadRequest(f"The request's {key} must be a list of text.")
    return value


def _scope(request: Mapping[str, Any]) -> Scope | None:
    """The request's scope (collections, folders, types); None when it names none."""
    value = request.get("scope")
    if value is None:
        return None
    if not isinstance(value, dict):
        raise BadRequest("The request's scope must be an object.")
    for key in ("collections", "folders", "types"):
        _names(value, key)
    return Scope.from_json(value)


class Server:
    """Answers read-only requests against ``library`` from its own threads.

    Start it once the library is open, and close it before the library: closing stops
    listening, cancels answers being written and waits (up to a timeout) for requests
    still running. It never raises on start: where no socket can be made, the library
    works as before and the commands beside it say it is busy.
    """

    def __init__(self, library: Library) -> None:
        self.library = library
        # Absolute: a command elsewhere compares it with its own data folder.
        self.home = Path(os.path.abspath(library.settings.home))
        self.path: Path | None = None
        self._listener: socket.socket | None = None
        self._inode: tuple[int, int] | None = None
        self._wake_r, self._wake_w = socket.socketpair()
        self._closed = threading.Event()
        self._lock = threading.Lock()
        self._conns: set[socket.socket] = set()
        self._cancels: set[threading.Event] = set()
        # Daemon threads, so that a process ending without close() is not held up by a
        # command still reading an answer (DuckDB cursors are per thread and go with it).
        self._threads: set[threading.Thread] = set()
        self._thread: threading.Thread | None = None

    @property
    def active(self) -> bool:
        return self._listener is not None and not self._closed.is_set()

    def start(self) -> Server:
        if not supported():
            return self
        path: Path | None = None
        try:
            path = socket_path(self.home, recorded(self.home))
            self._listener = self._bind(path)
            self.path = path
            self._write_record()
        except OSError as exc:
            log.warning("commands beside this process cannot reach it: %s", exc)
            if self._listener is not None:
                self._listener.close()
                self._listener = None
            if path is not None:
                self._remove_socket(path)
            self.path = None
            return self
        self._thread = threading.Thread(
            target=self._accept_loop, name="lectern-ipc-accept", daemon=True
        )
        self._thread.start()
        return self

    def _bind(self, path: Path) -> socket.socket:
        if path.is_socket():
            probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            probe.settimeout(0.5)
            try:
                probe.connect(str(path))
                # Only this process holds the library, so whatever answers there is an
                # earlier server of this process: the newer one takes over the name.
                log.info("replacing the server answering at %s", path)
            except OSError:
                log.info("removing the socket a stopped Lectern left at %s", path)
                with contextlib.suppress(FileNotFoundError):
                    path.unlink()
            finally:
                probe.close()
        # Bound under a temporary name and made 0600 before it gets its real one, so no
        # other user can connect in between.
        temporary = temporary_name(path)
        with contextlib.suppress(FileNotFoundError):
            temporary.unlink()
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            listener.bind(str(temporary))
            os.chmod(temporary, 0o600)
            listener.listen(MAX_CONNECTIONS)
            os.replace(temporary, path)
            st = os.stat(path)
            self._inode = (st.st_dev, st.st_ino)
        except OSError:
            listener.close()
            with contextlib.suppress(OSError):
                temporary.unlink()
            raise
        listener.setblocking(False)
        return listener

    def _write_record(self) -> None:
        body = {"protocol": PROTOCOL, "socket": str(self.path), "pid": os.getpid()}
        write_private(record_path(self.home), json.dumps(body), durable=False)

    def _accept_loop(self) -> None:
        listener = self._listener
        assert listener is not None
        # A selector, not select(): a desktop process may hold descriptors past 1024.
        with selectors.DefaultSelector() as selector:
            selector.register(listener, selectors.EVENT_READ)
            selector.register(self._wake_r, selectors.EVENT_READ)
            while not self._closed.is_set():
                try:
                    ready = {key.fileobj for key, _ in selector.select()}
                except (OSError, ValueError):
                    return
                if self._wake_r in ready or self._closed.is_set():
                    return
                self._accept(listener)

    def _accept(self, listener: socket.socket) -> None:
        """Take one waiting connection and serve it on a thread of its own."""
        try:
            conn, _ = listener.accept()
        except OSError:  # gone before it was taken (or the listener is closing)
            return
        conn.setblocking(True)
        try:
            uid = peer_uid(conn)
        except OSError:
            uid = None
        if uid is not None and uid != os.getuid():
            conn.close()
            return
        with self._lock:
            crowded = len(self._conns) >= MAX_CONNECTIONS
            if not crowded:
                self._conns.add(conn)
        if crowded:
            with contextlib.suppress(OSError):
                conn.settimeout(1.0)
                conn.sendall(
                    error_frame(
                        LecternError(
                            "The running Lectern is answering many commands at once.",
                            "Try again in a moment.",
                        )
                    )
                )
            conn.close()
            return
        thread = threading.Thread(target=self._serve, args=(conn,), name="lectern-ipc", daemon=True)
        with self._lock:
            self._threads.add(thread)
        thread.start()

    def _serve(self, conn: socket.socket) -> None:
        try:
            conn.settimeout(REQUEST_TIMEOUT_S)
            reader = conn.makefile("rb")
            line = reader.readline(MAX_REQUEST_BYTES + 1)
            if not line.endswith(b"\n"):
                if line:
                    conn.sendall(error_frame(BadRequest("The request was cut short or too long.")))
                return
            try:
                request = _parse_request(line)
                # A search behind an indexing batch, or an answer, may take a while.
                conn.settimeout(None)
                self._dispatch(request, conn)
            except LecternError as exc:
                conn.sendall(error_frame(exc))
            except OSError:
                raise
            except Exception as exc:  # a bug: one plain line for the command, the trace here
                log.exception("a request from a command failed")
                conn.sendall(
                    error_frame(
                        LecternError(
                            f"Something unexpected went wrong in the running Lectern "
                            f"({type(exc).__name__}: {exc}).",
                            "Try again; if it keeps happening, stop the running Lectern "
                            "and run the command on its own.",
                        )
                    )
                )
        except OSError:
            pass  # the command went away (Ctrl-C) or stopped listening
        finally:
            with self._lock:
                self._conns.discard(conn)
                self._threads.discard(threading.current_thread())
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
            conn.close()

    def _dispatch(self, request: Mapping[str, Any], conn: socket.socket) -> None:
        op = request.get("op")
        library = self.library
        if op == "hello":
            result: object = {
                "pid": os.getpid(),
                "home": str(self.home),
                "version": __version__,
                "protocol": PROTOCOL,
            }
        elif op == "status":
            result = library.status()
        elif op == "search":
            mode = request.get("mode", "hybrid")
            if mode not in MODES:
                raise BadRequest(f"The search mode must be one of {', '.join(MODES)}.")
            hits = ops.search(
                _text(request, "query"),
                k=_optional_int(request, "k"),
                mode=mode,
                folders=_names(request, "folders"),
                types=_names(request, "types"),
                scope=_scope(request),
            )
            result = record_to_json(hits.run(library).value)
        elif op == "files":
            status = request.get("status")
            if status is not None and status not in FILE_STATUSES:
                raise BadRequest(f"The file status must be one of {', '.join(FILE_STATUSES)}.")
            folder = request.get("folder")
            if folder is not None and not isinstance(folder, str):
                raise BadRequest("The folder must be a string.")
            result = record_to_json(ops.file_list(folder, status).run(library).value)
        elif op == "conversations":
            limit = _optional_int(request, "limit") or 100
            result = record_to_json(ops.conversations(limit).run(library).value)
        elif op == "conversation":
            # One conversation and its turns: `lectern conversations show` and the name
            # `export` gives a file.
            number = _optional_int(request, "id", least=0)
            if number is None:
                raise BadRequest("The request has no id.")
            result = {
                "conversation": record_to_json(ops.conversation(number).run(library).value),
                "turns": record_to_json(ops.turns(number).run(library).value),
            }
        elif op == "search_conversations":
            limit = _optional_int(request, "limit") or 100
            matches = ops.search_conversations(_text(request, "query"), limit)
            result = record_to_json(matches.run(library).value)
        elif op == "export":
            number = _optional_int(request, "id", least=0)
            if number is None:
                raise BadRequest("The request has no id.")
            # The text; the command writes it.
            result = ops.export_conversation(number).run(library).value
        elif op == "ask":
            self._ask(request, conn)
            return
        else:
            raise BadRequest(
                f"Unknown request {op!r}; this Lectern knows hello, status, files, search, "
                "conversations, conversation, search_conversations, export and ask."
            )
        conn.sendall(frame({"ok": True, "result": result}))

    def _ask(self, request: Mapping[str, Any], conn: socket.socket) -> None:
        from core.generation.qa import ask
        from core.generation.session import AnswerSession

        question = _text(request, "question")
        conversation = _optional_int(request, "conversation", least=0)
        k = _optional_int(request, "k")
        model = request.get("model")
        if model is not None and not isinstance(model, str):
            raise BadRequest("The request's model must be text.")
        use_llm = bool(request.get("use_llm", True))
        # The model server is the one the asking command was configured with (its
        # environment may differ from this process's), not this process's own.
        llm = request.get("llm")
        settings = self.library.settings
        if use_llm and isinstance(llm, dict):
            settings = replace(
                settings,
                llm_kind=str(llm.get("kind", settings.llm_kind)),
                llm_url=str(llm.get("url", settings.llm_url)),
                llm_api_key=str(llm.get("api_key", settings.llm_api_key)),
            )
        # The session the command itself would use: a server address it cannot use is
        # answered from the documents with the same warning as a local `lectern ask`.
        session = AnswerSession(settings, use_llm=use_llm)
        cancel = threading.Event()
        with self._lock:
            self._cancels.add(cancel)
        if self._closed.is_set():
            cancel.set()
        threading.Thread(target=self._cancel_on_hang_up, args=(conn, cancel), daemon=True).start()
        events = ask(
            self.library,
            question,
            conversation,
            model=model,
            cancel=cancel,
            k=k,
            scope=_scope(request),
            session=session,
        )
        try:
            for event in events:
                conn.sendall(frame({"event": event_to_wire(event)}))
        except OSError:
            cancel.set()  # the command is gone: stop writing its answer
            raise
        finally:
            stop = getattr(events, "close", None)  # a generator: its own finally runs now
            if stop is not None:
                stop()
            with self._lock:
                self._cancels.discard(cancel)
            session.close()

    @staticmethod
    def _cancel_on_hang_up(conn: socket.socket, cancel: threading.Event) -> None:
        """The command says nothing after its request: an end of input means it hung up
        (Ctrl-C), and the answer stops at once rather than at the next token."""
        try:
            while conn.recv(4096):
                pass
        except OSError:
            pass
        cancel.set()

    def close(self, timeout: float = 5.0) -> None:
        if self._closed.is_set():
            return
        self._closed.set()
        with contextlib.suppress(OSError):
            self._wake_w.send(b"x")
        if self._thread is not None:
            self._thread.join(timeout)
        with self._lock:
            for cancel in self._cancels:
                cancel.set()
            threads = list(self._threads)
        # Requests still running finish before the library under them closes.
        deadline = time.monotonic() + timeout
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        with self._lock:
            for conn in self._conns:
                with contextlib.suppress(OSError):
                    conn.shutdown(socket.SHUT_RDWR)
        if self._listener is not None:
            self._listener.close()
        self._remove_files()
        self._wake_r.close()
        self._wake_w.close()

    def _remove_files(self) -> None:
        """The socket and the record go, unless a newer server has taken them over."""
        if self.path is None:
            return
        self._remove_socket(self.path)
        with contextlib.suppress(OSError, ValueError):
            record = json.loads(record_path(self.home).read_text(encoding="utf-8"))
            if record.get("pid") == os.getpid() and record.get("socket") == str(self.path):
                record_path(self.home).unlink()

    def _remove_socket(self, path: Path) -> None:
        """The socket at ``path`` when it is this server's, and the folder made for it
        (in the temp folder) once empty."""
        with contextlib.suppress(OSError):
            st = os.stat(path)
            if (st.st_dev, st.st_ino) == self._inode:
                path.unlink()
        if default_path(self.home) is None and in_own_folder(path):
            with contextlib.suppress(OSError):  # not empty: a newer server's socket
                path.parent.rmdir()

    def __enter__(self) -> Server:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def serve(library: Library) -> Server:
    """Start answering read-only commands for ``library`` (see :class:`Server`)."""
    return Server(library).start()
