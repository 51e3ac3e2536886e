"""Reading a streamed reply on a helper thread, so its consumer can give up at once.

The consumer waits on a queue with a short poll, so a cancel or a deadline is noticed even
while the server sends nothing; the socket is then shut down so the reader thread (and
the server's generation) stop too.
"""

from __future__ import annotations

import contextlib
import queue
import socket
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import httpx

from core.llm.records import T
from core.llm.urls import trusts_environment

# How long the consumer waits on the queue before looking at the cancel flag again.
POLL_S = 0.05


class Abort(Exception):
    """Raised inside the reader thread's iteration once the consumer has gone."""


@dataclass
class StreamControl:
    """What the consumer needs to stop one in-flight request from another thread."""

    stopped: threading.Event = field(default_factory=threading.Event)
    sockets: list[socket.socket] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def trace(self, event: str, info: Mapping[str, Any]) -> None:
        # httpcore reports the connection it opened; keep its socket so abort() can shut
        # it down, which wakes a read blocked in another thread at once.
        stream = info.get("return_value")
        if stream is None or not hasattr(stream, "get_extra_info"):
            return
        sock = stream.get_extra_info("socket")
        if isinstance(sock, socket.socket):
            with self.lock:
                self.sockets.append(sock)
            if self.stopped.is_set():
                self._shutdown(sock)

    def abort(self) -> None:
        self.stopped.set()
        with self.lock:
            sockets = list(self.sockets)
        for sock in sockets:
            self._shutdown(sock)

    @staticmethod
    def _shutdown(sock: socket.socket) -> None:
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)


current_control = threading.local()


def trace_hook(request: httpx.Request) -> None:
    control: StreamControl | None = getattr(current_control, "control", None)
    if control is not None:
        request.extensions["trace"] = control.trace


def read_limit(first_token: float, prompt: float | None, idle: float, request: float) -> float:
    """The longest single wait a client's reader thread may block on a read; the consumer
    enforces the finer first-token and idle limits itself."""
    return max(first_token, prompt or 0.0, idle, request) + 5


def client_options(base: str, connect: float, read: float) -> dict[str, Any]:
    """The httpx options both model-server clients are built with."""
    return {
        "timeout": httpx.Timeout(connect=connect, read=read, write=30.0, pool=connect),
        # One connection per request, so a stream's socket is always known (reported by
        # the trace hook) and can be shut down on cancel.
        "limits": httpx.Limits(max_keepalive_connections=0),
        "event_hooks": {"request": [trace_hook]},
        # A proxy setting never routes a call to this machine elsewhere; a server
        # elsewhere is reached the way the person's proxy says.
        "trust_env": trusts_environment(base),
    }


class StreamTimeout(Exception):
    def __init__(self, first: bool, seconds: float, alive: bool | None = None) -> None:
        super().__init__(seconds)
        self.first = first
        self.seconds = seconds
        self.alive = alive  # the server answered a status check (None: not asked)


@dataclass(frozen=True)
class Patience:
    """How long to wait for the first item from a server that is alive but busy.

    A server reading a long prompt on a CPU sends nothing for minutes (llama.cpp: 80-528 s
    for 1.1-1.6k tokens on two busy cores), which a fixed first-token limit cannot tell
    from a dead one. So at each ``first_timeout`` of silence ``alive`` is asked (a cheap
    request on another connection); while it says yes the wait goes on, up to ``limit``
    seconds in all. ``waiting`` makes the item handed out every ``heartbeat`` seconds of
    silence before the first item, so the consumer can show something meanwhile. Items for
    which ``progress`` is true (llama.cpp's prompt progress) prove the server alive without
    ending the wait for the first real item.
    """

    limit: float
    alive: Callable[[], bool] | None = None
    heartbeat: float | None = None
    waiting: Callable[[float], Any] | None = None
    progress: Callable[[Any], bool] | None = None  # items that report reading, not text


def pump(
    produce: Callable[[], Iterator[T]],
    *,
    first_timeout: float,
    idle_timeout: float,
    cancel: threading.Event | None,
    patience: Patience | None = None,
) -> Iterator[T]:
    """Iterate ``produce()`` on a helper thread, enforcing deadlines and cancellation here.

    Yields items until the producer ends. Cancelling ends the iteration quietly; a deadline
    raises :class:`StreamTimeout` (``alive`` set when the server still answered a status
    check: it was busy, not gone); an exception in the producer is re-raised here.
    ``patience.waiting`` items are yielded too (they are the caller's own type).
    """
    control = StreamControl()
    items: queue.Queue[tuple[str, Any]] = queue.Queue()

    def reader() -> None:
        current_control.control = control
        iterator: Iterator[T] | None = None
        try:
            iterator = produce()
            for item in iterator:
                if control.stopped.is_set():
                    raise Abort
                items.put(("item", item))
            items.put(("end", None))
        except BaseException as exc:
            if not control.stopped.is_set():
                items.put(("error", exc))
        finally:
            current_control.control = None
            close = getattr(iterator, "close", None)
            if close is not None:
                with contextlib.suppress(Exception):
                    close()

    thread = threading.Thread(target=reader, name="lectern-llm-stream", daemon=True)
    thread.start()
    started = time.monotonic()
    deadline = started + first_timeout
    next_beat = (
        started + patience.heartbeat
        if patience is not None and patience.heartbeat and patience.waiting
        else None
    )
    got_first = False
    try:
        while True:
            if cancel is not None and cancel.is_set():
                return
            now = time.monotonic()
            if next_beat is not None and not got_first and now >= next_beat:
                assert patience is not None and patience.waiting is not None
                next_beat = now + (patience.heartbeat or 1.0)
                yield patience.waiting(now - started)
                continue
            remaining = deadline - now
            if remaining <= 0:
                if not got_first and patience is not None:
                    waited = now - started
                    alive = patience.alive() if patience.alive is not None else None
                    if alive and waited < patience.limit:
                        deadline = now + min(first_timeout, patience.limit - waited)
                        continue
                    raise StreamTimeout(first=True, seconds=waited, alive=alive)
                raise StreamTimeout(
                    first=not got_first, seconds=first_timeout if not got_first else idle_timeout
                )
            wait = remaining
            if cancel is not None or next_beat is not None:
                wait = min(remaining, POLL_S)
            try:
                kind, value = items.get(timeout=wait)
            except queue.Empty:
                continue
            if kind == "end":
                return
            if kind == "error":
                raise value
            if (
                not got_first
                and patience is not None
                and patience.progress is not None
                and patience.progress(value)
            ):
                # The server says how far it has read: alive, and still before the answer.
                now = time.monotonic()
                deadline = min(now + first_timeout, started + max(patience.limit, first_timeout))
                yield value
                continue
            got_first = True
            deadline = time.monotonic() + idle_timeout
            yield value
    finally:
        control.abort()
