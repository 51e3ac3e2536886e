"""Read-only commands beside a writer: the process that holds the library answers them.

DuckDB lets one process open the library's database, so while ``lectern watch``,
``lectern index`` or the desktop app holds it, ``lectern search``, ``status`` and ``ask``
cannot open it themselves (IndexBusyError). Instead the holder runs a :class:`Server` on
background threads, listening on a local (AF_UNIX) socket, and those commands send it
their request and print its reply exactly as they would print their own.

The socket is ``<data folder>/lectern.sock`` when that path fits in a socket address
(about 104 bytes); otherwise it lives under ``$XDG_RUNTIME_DIR`` or a private (0700)
folder in the temp folder, named by a hash of the data folder. Where it is, is recorded
in ``lectern.sock.json`` beside the database. The socket is 0600 and a connection from
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
* ``ask`` (``question``, ``conversation``, ``model``, ``k``, ``use_llm``, ``llm``, ``scope``,
  ``Scope.to_json()`` or null): one
  ``{"event": {...}}`` line per event of :func:`core.generation.qa.ask` as it happens, the last one
  a ``done`` or an ``error``; closing the connection cancels the answer.

A failed request gets ``{"ok": false, "error": {"type", "message", "hint"}}``: the
LecternError's words, never a traceback.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import logging
import os
import selectors
import socket
import stat
import struct
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from core import __version__
from core import errors as lectern_errors
from core.errors import LecternError
from core.records import FILE_STATUSES, Citation, FileEntry, Hit, Scope, Span

if TYPE_CHECKING:
    from core.config import Settings
    from core.generation.qa import Event, WarningEvent
    from core.library import Library

log = logging.getLogger(__name__)

PROTOCOL = 1
SOCKET_NAME = "lectern.sock"
RECORD_NAME = "lectern.sock.json"
# sun_path holds 108 bytes on Linux and 104 on macOS, the closing NUL included.
MAX_SOCKET_PATH = 103
MAX_REQUEST_BYTES = 1 << 20
MAX_CONNECTIONS = 16  # requests served at once, each on a thread of its own
CONNECT_TIMEOUT_S = 2.0
HELLO_TIMEOUT_S = 30.0  # a busy server answers hello after the requests ahead of it
REQUEST_TIMEOUT_S = 10.0  # a client that connects and says nothing is dropped
MODES = ("hybrid", "bm25", "dense")


def supported() -> bool:
    return hasattr(socket, "AF_UNIX") and hasattr(os, "getuid")


# --- where the socket lives ----------------------------------------------------------


def _fits(path: Path) -> bool:
    # The server binds a longer temporary name first (see Server._bind).
    return len(os.fsencode(str(_temporary_name(path)))) <= MAX_SOCKET_PATH


def _temporary_name(path: Path) -> Path:
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
    if _fits(beside):
        return beside
    digest = hashlib.sha256(os.fsencode(os.path.abspath(home))).hexdigest()[:16]
    runtime = os.environ.get("XDG_RUNTIME_DIR", "")
    if runtime and _private(Path(runtime)) and _fits(Path(runtime) / f"lectern-{digest}.sock"):
        return Path(runtime) / f"lectern-{digest}.sock"
    for base in (tempfile.gettempdir(), "/tmp"):
        folder = Path(base) / f"lectern-ipc-{os.getuid()}"
        with contextlib.suppress(FileExistsError):
            folder.mkdir(mode=0o700)
        # Someone else's folder (or a symlink) in a shared /tmp must not receive the socket.
        if _private(folder) and _fits(folder / f"{digest}.sock"):
            return folder / f"{digest}.sock"
    raise OSError(errno.ENAMETOOLONG, f"no place for the socket of {home}")


def record_path(home: Path) -> Path:
    return Path(home) / RECORD_NAME


def _candidates(home: Path) -> list[Path]:
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


def _peer_uid(sock: socket.socket) -> int | None:
    """The user id of the other end, where the system tells it (Linux)."""
    option = getattr(socket, "SO_PEERCRED", None)
    if option is None:
        return None
    size = struct.calcsize("3i")
    _pid, uid, _gid = struct.unpack("3i", sock.getsockopt(socket.SOL_SOCKET, option, size))
    return int(uid)


# --- what travels: hits, citations and answer events ------------------------------------


def hit_to_wire(hit: Hit) -> dict[str, object]:
    wire = hit.to_json()
    wire["document_id"] = hit.document_id
    wire["score"] = hit.score  # unrounded: the text output formats it itself
    return wire


def hit_from_wire(wire: Mapping[str, Any]) -> Hit:
    return Hit(
        chunk_id=int(wire["chunk_id"]),
        document_id=int(wire["document_id"]),
        path=str(wire["document"]),
        title=str(wire["title"]),
        type=str(wire["type"]),
        text=str(wire["text"]),
        start=int(wire["start"]),
        end=int(wire["end"]),
        page=wire["page"],
        page_end=wire["page_end"],
        heading_path=tuple(wire["heading_path"]),
        score=float(wire["score"]),
        bm25_rank=wire.get("bm25_rank"),
        dense_rank=wire.get("dense_rank"),
        reranked=wire.get("reranked"),
    )


def citation_to_wire(citation: Citation) -> dict[str, object]:
    wire = citation.to_json()
    wire["hit"] = hit_to_wire(citation.hit)
    return wire


def citation_from_wire(wire: Mapping[str, Any]) -> Citation:
    return Citation(
        n=int(wire["n"]),
        hit=hit_from_wire(wire["hit"]),
        spans=tuple(
            Span(int(s["start"]), int(s["end"]), s["page"], str(s["text"])) for s in wire["spans"]
        ),
        sentence=str(wire.get("sentence", "")),
    )


def error_to_wire(exc: LecternError) -> dict[str, object]:
    return {"type": type(exc).__name__, "message": exc.message, "hint": exc.hint}


def error_from_wire(wire: Mapping[str, Any]) -> LecternError:
    """The error the server reported, as its own class where core.errors has it, so the
    command says the same words (and ``lectern ask --json`` names the same type)."""
    message, hint = str(wire.get("message", "")), str(wire.get("hint", ""))
    cls = getattr(lectern_errors, str(wire.get("type", "")), None)
    error: LecternError = LecternError(message, hint)
    if isinstance(cls, type) and issubclass(cls, LecternError):
        with contextlib.suppress(TypeError):
            error = cls(message, hint)
    if wire.get("model") is not None:
        error.model = wire["model"]  # type: ignore[attr-defined]
    return error


def event_to_wire(event: Event) -> dict[str, object]:
    """One answer event as ``lectern ask --json`` writes its parts, plus what the
    command needs to print the answer and its sources as text."""
    from core.generation.qa import (
        CitationsEvent,
        DoneEvent,
        DraftEvent,
        ErrorEvent,
        SourcesEvent,
        StatusEvent,
        TokenEvent,
    )

    if isinstance(event, DraftEvent):
        return {
            "type": "draft",
            "answer": event.answer,
            "citations": [citation_to_wire(c) for c in event.citations],
            "declined": event.declined,
        }
    if isinstance(event, StatusEvent):
        return {"type": "status", "message": event.message, "kind": event.kind}
    if isinstance(event, SourcesEvent):
        return {
            "type": "sources",
            "hits": [hit_to_wire(h) for h in event.hits],
            "question": event.question,
        }
    if isinstance(event, TokenEvent):
        return {"type": "token", "text": event.text}
    if isinstance(event, CitationsEvent):
        return {"type": "citations", "citations": [citation_to_wire(c) for c in event.citations]}
    if isinstance(event, DoneEvent):
        wire = event.to_json()
        wire["citations"] = [citation_to_wire(c) for c in event.citations]
        wire["sources"] = [hit_to_wire(h) for h in event.sources]
        return {"type": "done", **wire}
    if isinstance(event, ErrorEvent):
        return {"type": "error", **event.to_json()}
    return {"type": "warning", **event.to_json()}


def _warning_from(wire: Mapping[str, Any]) -> WarningEvent:
    from core.generation.qa import WarningEvent

    return WarningEvent(
        message=str(wire["message"]), kind=str(wire["kind"]), model=str(wire.get("model", ""))
    )


def event_from_wire(wire: Mapping[str, Any]) -> Event:
    from core.generation.qa import (
        CitationsEvent,
        DoneEvent,
        DraftEvent,
        ErrorEvent,
        SourcesEvent,
        StatusEvent,
        TokenEvent,
    )

    kind = wire.get("type")
    if kind == "draft":
        return DraftEvent(
            str(wire["answer"]),
            tuple(citation_from_wire(c) for c in wire["citations"]),
            bool(wire.get("declined")),
        )
    if kind == "status":
        return StatusEvent(str(wire["message"]), str(wire["kind"]))
    if kind == "sources":
        return SourcesEvent(
            tuple(hit_from_wire(h) for h in wire["hits"]), str(wire.get("question", ""))
        )
    if kind == "token":
        return TokenEvent(str(wire["text"]))
    if kind == "citations":
        return CitationsEvent(tuple(citation_from_wire(c) for c in wire["citations"]))
    if kind == "warning":
        return _warning_from(wire)
    if kind == "done":
        return DoneEvent(
            answer=str(wire["answer"]),
            mode=str(wire["mode"]),
            citations=tuple(citation_from_wire(c) for c in wire["citations"]),
            warnings=tuple(_warning_from(w) for w in wire["warnings"]),
            timings=dict(wire["timings"]),
            conversation_id=wire.get("conversation"),
            turn_id=wire.get("turn"),
            model=wire.get("model"),
            question=str(wire.get("question", "")),
            sources=tuple(hit_from_wire(h) for h in wire.get("sources", ())),
        )
    if kind == "error":
        return ErrorEvent(
            error_from_wire({**wire, "type": wire.get("error")}),
            partial_answer=str(wire.get("partial_answer", "")),
        )
    raise _BadReply(f"an answer event of unknown type {kind!r}")


# --- the server -----------------------------------------------------------------------


class _BadRequest(LecternError):
    default_hint = "This is a bug in the program that sent it; run the `lectern` command again."


class _BadReply(Exception):
    """The other end spoke something other than this protocol."""


class _VersionMismatch(Exception):
    pass


def _frame(payload: Mapping[str, object]) -> bytes:
    return (json.dumps({"v": PROTOCOL, **payload}) + "\n").encode("utf-8")


def _error_frame(exc: LecternError) -> bytes:
    return _frame({"ok": False, "error": error_to_wire(exc)})


def _parse_request(line: bytes) -> dict[str, Any]:
    try:
        request = json.loads(line.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        raise _BadRequest("The request was not one line of JSON.") from None
    if not isinstance(request, dict):
        raise _BadRequest("The request was not a JSON object.")
    if request.get("v") != PROTOCOL:
        raise _BadRequest(
            f"This Lectern speaks protocol version {PROTOCOL}, not {request.get('v')!r}.",
            "Use the `lectern` command of the same version as the running Lectern.",
        )
    return request


def _text(request: Mapping[str, Any], key: str) -> str:
    value = request.get(key)
    if not isinstance(value, str) or not value.strip():
        raise _BadRequest(f"The request has no {key}.")
    return value


def _optional_int(request: Mapping[str, Any], key: str, least: int = 1) -> int | None:
    value = request.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise _BadRequest(f"The request's {key} must be a whole number of at least {least}.")
    return value


def _names(request: Mapping[str, Any], key: str) -> list[str] | None:
    value = request.get(key)
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise _BadRequest(f"The request's {key} must be a list of text.")
    return value


def _scope(request: Mapping[str, Any]) -> Scope | None:
    """The request's scope (collections, folders, types); None when it names none."""
    value = request.get("scope")
    if value is None:
        return None
    if not isinstance(value, dict):
        raise _BadRequest("The request's scope must be an object.")
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
        try:
            path = socket_path(self.home)
            self._listener = self._bind(path)
            self.path = path
            self._write_record()
        except OSError as exc:
            log.warning("commands beside this process cannot reach it: %s", exc)
            if self._listener is not None:
                self._listener.close()
                self._listener = None
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
        temporary = _temporary_name(path)
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
        record = record_path(self.home)
        temporary = record.with_name(record.name + ".tmp")
        body = {"protocol": PROTOCOL, "socket": str(self.path), "pid": os.getpid()}
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(body, f)
        os.replace(temporary, record)

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
            uid = _peer_uid(conn)
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
                    _error_frame(
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
                    conn.sendall(
                        _error_frame(_BadRequest("The request was cut short or too long."))
                    )
                return
            try:
                request = _parse_request(line)
                # A search behind an indexing batch, or an answer, may take a while.
                conn.settimeout(None)
                self._dispatch(request, conn)
            except LecternError as exc:
                conn.sendall(_error_frame(exc))
            except OSError:
                raise
            except Exception as exc:  # a bug: one plain line for the command, the trace here
                log.exception("a request from a command failed")
                conn.sendall(
                    _error_frame(
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
                raise _BadRequest(f"The search mode must be one of {', '.join(MODES)}.")
            hits = library.search(
                _text(request, "query"),
                k=_optional_int(request, "k"),
                mode=mode,
                folders=_names(request, "folders"),
                types=_names(request, "types"),
                scope=_scope(request),
            )
            result = [hit_to_wire(h) for h in hits]
        elif op == "files":
            status = request.get("status")
            if status is not None and status not in FILE_STATUSES:
                raise _BadRequest(f"The file status must be one of {', '.join(FILE_STATUSES)}.")
            folder = request.get("folder")
            if folder is not None and not isinstance(folder, str):
                raise _BadRequest("The folder must be a string.")
            result = [e.to_json() for e in library.file_list(folder=folder, status=status)]
        elif op == "ask":
            self._ask(request, conn)
            return
        else:
            raise _BadRequest(
                f"Unknown request {op!r}; this Lectern knows hello, status, files, search and ask."
            )
        conn.sendall(_frame({"ok": True, "result": result}))

    def _ask(self, request: Mapping[str, Any], conn: socket.socket) -> None:
        from core.generation.llm import LLMClient, make_client
        from core.generation.qa import ask

        question = _text(request, "question")
        conversation = _optional_int(request, "conversation", least=0)
        k = _optional_int(request, "k")
        model = request.get("model")
        if model is not None and not isinstance(model, str):
            raise _BadRequest("The request's model must be text.")
        use_llm = bool(request.get("use_llm", True))
        client: LLMClient | None = None
        if use_llm:
            # The model server is the one the asking command was configured with (its
            # environment may differ from this process's), not this process's own.
            llm = request.get("llm")
            settings = self.library.settings
            if isinstance(llm, dict):
                settings = replace(
                    settings,
                    llm_kind=str(llm.get("kind", settings.llm_kind)),
                    llm_url=str(llm.get("url", settings.llm_url)),
                    llm_api_key=str(llm.get("api_key", settings.llm_api_key)),
                )
            client = make_client(settings)
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
            client=client,
            model=model,
            cancel=cancel,
            use_llm=use_llm,
            k=k,
            scope=_scope(request),
        )
        try:
            for event in events:
                conn.sendall(_frame({"event": event_to_wire(event)}))
        except OSError:
            cancel.set()  # the command is gone: stop writing its answer
            raise
        finally:
            stop = getattr(events, "close", None)  # a generator: its own finally runs now
            if stop is not None:
                stop()
            with self._lock:
                self._cancels.discard(cancel)
            if client is not None:
                client.close()

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
        with contextlib.suppress(OSError):
            st = os.stat(self.path)
            if (st.st_dev, st.st_ino) == self._inode:
                self.path.unlink()
        with contextlib.suppress(OSError, ValueError):
            record = json.loads(record_path(self.home).read_text(encoding="utf-8"))
            if record.get("pid") == os.getpid() and record.get("socket") == str(self.path):
                record_path(self.home).unlink()

    def __enter__(self) -> Server:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def serve(library: Library) -> Server:
    """Start answering read-only commands for ``library`` (see :class:`Server`)."""
    return Server(library).start()


# --- the client -----------------------------------------------------------------------


def _open(path: Path) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.settimeout(CONNECT_TIMEOUT_S)
        sock.connect(str(path))
        uid = _peer_uid(sock)
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
        sock.sendall(_frame(request))
        sock.settimeout(timeout)
        reader = sock.makefile("rb")
        while True:
            line = reader.readline()
            if not line:
                return
            try:
                reply = json.loads(line.decode("utf-8"))
            except (UnicodeDecodeError, ValueError):
                raise _BadReply("a reply that is not JSON") from None
            if not isinstance(reply, dict):
                raise _BadReply("a reply that is not a JSON object")
            if reply.get("v") != PROTOCOL:
                raise _VersionMismatch(reply.get("v"))
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
                raise error_from_wire(reply.get("error") or {})
        except (OSError, _BadReply, _VersionMismatch):
            raise _gone() from None
        raise _gone()

    def status(self) -> dict[str, object]:
        result = self._call({"op": "status"})
        if not isinstance(result, dict):
            raise _gone()
        return result

    def file_list(self, folder: str | None = None, status: str | None = None) -> list[FileEntry]:
        from core.indexing.scan import normalize_folder

        result = self._call(
            {
                "op": "files",
                # Relative to this command's folder, not the server's.
                "folder": normalize_folder(folder) if folder else None,
                "status": status,
            }
        )
        try:
            return [FileEntry.from_json(e) for e in result]
        except (KeyError, TypeError, ValueError):
            raise _gone() from None

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
        from core.indexing.scan import normalize_folder

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
        try:
            return [hit_from_wire(h) for h in result]
        except (KeyError, TypeError, ValueError):
            raise _gone() from None

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
            url = settings.resolved_llm_url if settings.llm_kind == "ollama" else settings.llm_url
            llm = {"kind": settings.llm_kind, "url": url, "api_key": settings.llm_api_key}
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
                    raise error_from_wire(reply.get("error") or {})
        except (OSError, _BadReply, _VersionMismatch, KeyError, TypeError, ValueError):
            raise _gone() from None
        if not finished:
            raise _gone()

    def close(self) -> None:
        """Nothing to close: each request has its own connection."""


def _scope_to_wire(scope: Scope | None) -> dict[str, list[str]] | None:
    """A scope for the server; its folders relative to this command's folder."""
    from core.indexing.scan import normalize_folder

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
    for path in _candidates(home):
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
        except (OSError, _BadReply, _VersionMismatch):
            continue  # refused: a socket a stopped Lectern left behind
    return None


__all__ = [
    "PROTOCOL",
    "RemoteLibrary",
    "Server",
    "connect",
    "event_from_wire",
    "event_to_wire",
    "record_path",
    "serve",
    "socket_path",
]
