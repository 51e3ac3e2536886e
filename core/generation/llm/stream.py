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

from core.generation.llm.records import T

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


class StreamTimeout(Exception):
    def __init__(self, first: bool, seconds: float) -> None:
        super().__init__(seconds)
        self.first = first
        self.seconds = seconds


def pump(
    produce: Callable[[], Iterator[T]],
    *,
    first_timeout: float,
    idle_timeout: float,
    cancel: threading.Event | None,
) -> Iterator[T]:
    """Iterate ``produce()`` on a helper thread, enforcing deadlines and cancellation here.

    Yields items until the producer ends. Cancelling ends the iteration quietly; a deadline
    raises :class:`StreamTimeout`; an exception in the producer is re-raised here.
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
    deadline = time.monotonic() + first_timeout
    got_first = False
    try:
        while True:
            if cancel is not None and cancel.is_set():
                return
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise StreamTimeout(
                    first=not got_first, seconds=first_timeout if not got_first else idle_timeout
                )
            wait = min(remaining, POLL_S) if cancel is not None else remaining
            try:
                kind, value = items.get(timeout=wait)
            except queue.Empty:
                continue
            if kind == "end":
                return
            if kind == "error":
                raise value
            got_first = True
            deadline = time.monotonic() + idle_timeout
            yield value
    finally:
        control.abort()
