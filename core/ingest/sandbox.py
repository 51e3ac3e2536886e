"""Parsing in a separate worker process, so one bad file cannot hang or sink the app.

Files in a watched folder are untrusted input: a crafted PDF can loop for minutes, a
zip bomb can eat all memory, a C extension can crash. The worker runs with a memory cap
(``RLIMIT_AS`` where the OS enforces it, an RSS watchdog elsewhere) and the parent kills
it when a file takes too long, then starts a fresh one for the next file.

One worker is kept alive and reused: starting a Python process per file would cost more
than parsing the thousands of small files a typical folder holds. It is started with the
"spawn" method so it does not inherit the parent's memory (the embedding model, Qt) and
imports only ``core.ingest``.

A reader never outlives the process that started it, and never writes to the terminal:
its standard output and error go to the null device from its first instruction (a reader
whose parent was killed printed a BrokenPipeError traceback into the terminal), and a
thread in it exits the process as soon as the parent is gone (a reader orphaned by a
``kill -9`` went on reading its file for as long as the file took). The outcome of every
file is reported through the pipe. ``PR_SET_PDEATHSIG`` is not used: Linux sends it when
the *thread* that started the reader ends, and the indexing thread that starts one ends
after every run while the reader is reused by the next.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
import sys
import threading
import time
import weakref
from collections.abc import Iterator
from dataclasses import dataclass
from multiprocessing import spawn
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from pathlib import Path
from types import TracebackType
from typing import Any

from core import errors
from core.errors import (
    DamagedFileError,
    LecternError,
    ParseError,
    ParseLimitError,
    ReadingStoppedError,
)
from core.ingest.ocr import OcrOptions
from core.ingest.registry import parse_file
from core.ingest.text import cap_document
from core.records import ParsedDocument

_MB = 1024 * 1024
_POLL_S = 0.2
_SIGKILL = getattr(signal, "SIGKILL", None)


def _memory_words(memory_mb: int) -> str:
    if memory_mb >= 1024 and memory_mb % 1024 == 0:
        return f"{memory_mb // 1024} GB"
    return f"{memory_mb} MB"


def memory_limit_error(memory_mb: int) -> ParseLimitError:
    return ParseLimitError(f"needs more than {_memory_words(memory_mb)} of memory to read")


def timeout_error(timeout_s: float) -> ParseLimitError:
    return ParseLimitError(f"took longer than {timeout_s:g} s to read")


# --- worker side ---------------------------------------------------------------------


def _virtual_size() -> int:
    try:
        with open("/proc/self/statm") as handle:
            return int(handle.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, AttributeError):
        import psutil

        return int(psutil.Process().memory_info().vms)


def _limit_address_space(memory_mb: int) -> bool:
    """Cap the worker's address space at its current size + ``memory_mb``.

    Returns False where no enforced cap is available (Windows; macOS accepts
    RLIMIT_AS but does not enforce it), so the parent watches RSS instead.
    """
    if sys.platform == "darwin":
        return False
    try:
        import resource
    except ImportError:
        return False
    try:
        _soft, hard = resource.getrlimit(resource.RLIMIT_AS)
        limit = _virtual_size() + memory_mb * _MB
        if hard != resource.RLIM_INFINITY:
            limit = min(limit, hard)
        resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
    except (ValueError, OSError):
        return False
    return True


# Run by a reader before anything else, even before multiprocessing reads what to run
# (see _reader_command_line): Ctrl-C in a terminal reaches the whole process group, and
# the parent decides; nothing the reader prints can reach the terminal.
_READER_PRELUDE = (
    "import os, signal; signal.signal(signal.SIGINT, signal.SIG_IGN); "
    "_null = os.open(os.devnull, os.O_RDWR); os.dup2(_null, 1); os.dup2(_null, 2); "
    "os.close(_null); del _null; "
)
_PARENT_CHECK_S = 0.1


def _silence() -> None:
    """Standard output and error to the null device (again, for a frozen app, whose
    readers start without the prelude)."""
    if os.environ.get("LECTERN_DEBUG") == "1":
        return
    with contextlib.suppress(OSError):
        null = os.open(os.devnull, os.O_RDWR)
        os.dup2(null, 1)
        os.dup2(null, 2)
        os.close(null)


def _exit_with_parent() -> None:
    """A thread that ends this reader the moment the process that started it is gone:
    its end of the spawn pipe reads as closed (every OS), or it was re-parented (POSIX)."""
    from multiprocessing.connection import wait

    parent = multiprocessing.parent_process()
    sentinel = parent.sentinel if parent is not None else None
    parent_pid = os.getppid()

    def watch() -> None:
        while True:
            try:
                if sentinel is not None and wait([sentinel], timeout=_PARENT_CHECK_S):
                    os._exit(0)
            except (OSError, ValueError):
                os._exit(0)
            if sentinel is None:
                time.sleep(_PARENT_CHECK_S)
            if os.name != "nt" and os.getppid() != parent_pid:
                os._exit(0)

    threading.Thread(target=watch, name="lectern-parent-watch", daemon=True).start()


def _worker_main(conn: Connection, memory_mb: int, kind: str = "parse") -> None:
    import logging
    import warnings

    _exit_with_parent()
    _silence()
    signal.signal(signal.SIGINT, signal.SIG_IGN)

    from core.ingest.registry import preload

    # Parser libraries warn about every quirk of every file; nobody reads the worker's
    # stderr, and the outcome of each file is reported through the pipe.
    logging.disable(logging.WARNING)
    warnings.simplefilter("ignore")
    preload()  # import parsers before the cap, so the cap is for the files alone
    readers: dict[tuple[str, ...], Any] = {}
    if kind == "ocr":
        # The OCR engine and the page renderer load their libraries once, before the cap.
        import pypdfium2  # noqa: F401

        from core.ingest import ocr

        readers[ocr.DEFAULT_LANGUAGES] = ocr.PageReader(ocr.DEFAULT_LANGUAGES)
    limited = _limit_address_space(memory_mb)
    if not _send(conn, ("ready", limited)):
        return
    while True:
        try:
            request = conn.recv()
        except (EOFError, OSError):
            return
        if request[0] not in ("parse", "ocr"):
            # A stop: nothing here to keep, and the interpreter's orderly end (its parser
            # libraries' teardown) took a good part of a second that closing the app
            # waited for (ParserPool.close joins this process).
            os._exit(0)
        reply: tuple[Any, ...]
        try:
            if request[0] == "ocr":
                reply = ("ok", _read_scanned(Path(request[1]), request[2], request[3], readers))
            else:
                reply = ("ok", parse_file(Path(request[1])))
        except ParseError as exc:
            reply = ("error", type(exc).__name__, exc.reason, exc.hint)
        except MemoryError:
            reply = ("memory",)
        try:
            conn.send(reply)
        except MemoryError:
            reply = ("memory",)
            if not _send(conn, reply):
                return
        except (OSError, ValueError):
            return  # the parent is gone (or closed the pipe): nobody is waiting
        if reply[0] == "memory":
            # A heap that hit its cap is fragmented and may fail again: start afresh.
            return
        del reply


def _send(conn: Connection, message: tuple[Any, ...]) -> bool:
    """Send to the parent; False when it is gone."""
    try:
        conn.send(message)
    except (OSError, ValueError):
        return False
    return True


def _read_scanned(
    path: Path, languages: tuple[str, ...], dpi: int, readers: dict[tuple[str, ...], Any]
) -> ParsedDocument:
    from core.ingest import ocr, pdf

    languages = ocr.usable_languages(languages)
    reader = readers.get(languages)
    if reader is None:
        reader = readers[languages] = ocr.PageReader(languages)
    try:
        # Within the text limit as every file read is (core.ingest.registry.parse_file).
        return cap_document(pdf.parse_scanned(path, reader, dpi))
    except (ParseError, MemoryError):
        raise
    except RecursionError as exc:
        raise DamagedFileError("too deeply nested to read") from exc
    except FileNotFoundError as exc:
        raise ParseError("file disappeared", hint="It was moved or deleted.") from exc
    except OSError as exc:
        raise ParseError(f"could not read the file: {exc.strerror or exc}") from exc
    except Exception as exc:
        raise DamagedFileError(f"could not read the page images ({type(exc).__name__})") from exc


# --- parent side ---------------------------------------------------------------------

_SPAWN_PATCH_LOCK = threading.Lock()


@contextlib.contextmanager
def _main_module_not_imported() -> Iterator[None]:
    """Start the worker without re-running the parent's ``__main__`` module.

    "spawn" normally re-imports the main script in the child. Here that would load
    whatever the entry point imports (the CLI's whole engine, torch) into the worker,
    and a script without an ``if __name__ == "__main__"`` guard would even start a
    second pool from inside the worker. The worker's target lives in this module, so
    the main module is never needed: drop it from what the child is told to prepare.
    """
    original = spawn.get_preparation_data
    original_command = spawn.get_command_line

    def preparation_data(name: str) -> dict[str, Any]:
        data = dict(original(name))
        data.pop("init_main_from_name", None)
        data.pop("init_main_from_path", None)
        return data

    def command_line(**kwds: Any) -> list[str]:
        return _reader_command_line(original_command(**kwds))

    with _SPAWN_PATCH_LOCK:
        spawn.get_preparation_data = preparation_data
        spawn.get_command_line = command_line
        try:
            yield
        finally:
            spawn.get_preparation_data = original
            spawn.get_command_line = original_command


def _reader_command_line(command: list[str]) -> list[str]:
    """The interpreter's ``-c`` program with ``_READER_PRELUDE`` in front, so that even
    a failure while the reader starts (its parent killed meanwhile) prints nothing. A
    frozen app's readers start through its own entry point instead: _worker_main then
    silences them once it runs."""
    command = list(command)
    if os.environ.get("LECTERN_DEBUG") != "1" and "-c" in command[:-1]:
        at = command.index("-c") + 1
        command[at] = _READER_PRELUDE + command[at]
    return command


@dataclass
class _Worker:
    process: BaseProcess
    conn: Connection
    rlimited: bool
    baseline_rss: int
    finalizer: weakref.finalize[[BaseProcess], ParserPool]


class ParserPool:
    """Parses files in one reusable worker process with a time and memory limit.

    ``parse`` raises the same ``ParseError`` subclasses as ``parse_file``, plus
    ``ParseLimitError`` when a file runs out of time or memory and ``DamagedFileError``
    when the parser crashes. Requests from several threads are served one at a time.
    ``in_process=True`` parses in the calling process without limits (for debugging).

    ``parse_scanned`` reads a PDF's image pages by OCR (``ocr``: whether, in which
    languages, within what limits). It runs in a second worker with the OCR limits, so
    a long scan never holds the worker that reads everything else.
    """

    def __init__(
        self,
        timeout_s: float = 60.0,
        memory_mb: int = 1024,
        *,
        in_process: bool = False,
        start_timeout_s: float = 60.0,
        ocr: OcrOptions | None = None,
        kind: str = "parse",
    ) -> None:
        self.timeout_s = timeout_s
        self.memory_mb = memory_mb
        self.in_process = in_process
        self.start_timeout_s = start_timeout_s
        self.ocr = ocr
        self.kind = kind  # "parse", or "ocr" for the pool that parse_scanned uses
        self._ocr_pool: ParserPool | None = None
        self._ocr_readers: dict[tuple[str, ...], Any] = {}
        self._lock = threading.Lock()
        self._worker: _Worker | None = None
        self._closing = False
        self._closed = False

    # -- public API --

    def parse(self, path: Path) -> ParsedDocument:
        path = Path(path)
        if self.in_process:
            try:
                return parse_file(path)
            except MemoryError as exc:
                raise memory_limit_error(self.memory_mb) from exc
        return self._request(("parse", str(path)))

    @property
    def ocr_enabled(self) -> bool:
        """Whether scanned pages are read: OCR is on and its engine is installed."""
        from core.ingest.ocr import engine_installed

        return self.ocr is not None and self.ocr.enabled and engine_installed()

    def parse_scanned(self, path: Path) -> ParsedDocument:
        """``path`` (a PDF) with its pages that have no text layer read by OCR."""
        options = self.ocr
        if options is None or not options.enabled:
            raise RuntimeError("OCR is turned off")
        path = Path(path)
        if self.in_process:
            try:
                return _read_scanned(path, options.languages, options.dpi, self._ocr_readers)
            except MemoryError as exc:
                raise memory_limit_error(options.memory_mb) from exc
        with self._lock:
            if self._closed or self._closing:
                raise RuntimeError("ParserPool is closed")
            if self._ocr_pool is None:
                self._ocr_pool = ParserPool(
                    options.timeout_s,
                    options.memory_mb,
                    start_timeout_s=self.start_timeout_s,
                    kind="ocr",
                )
            pool = self._ocr_pool
        return pool._request(("ocr", str(path), tuple(options.languages), options.dpi))

    def _request(self, message: tuple[Any, ...]) -> ParsedDocument:
        with self._lock:
            if self._closed or self._closing:
                raise RuntimeError("ParserPool is closed")
            worker = self._ensure_worker()
            try:
                worker.conn.send(message)
            except (OSError, ValueError):
                # The worker died while idle (killed from outside): one fresh try.
                self._discard()
                worker = self._ensure_worker()
                worker.conn.send(message)
            reply = self._await_reply(worker)
            if reply[0] == "memory":
                # The worker exits after a MemoryError; reap it before the next file.
                worker.process.join(5)
                self._discard()
                raise memory_limit_error(self.memory_mb)
        return self._result(reply)

    @property
    def worker_pid(self) -> int | None:
        """The worker's process id, or None before the first parse (for diagnostics)."""
        worker = self._worker
        return worker.process.pid if worker is not None else None

    def close(self) -> None:
        """Stop the worker. A parse in flight on another thread is cut short."""
        self._closing = True
        if self._ocr_pool is not None:
            self._ocr_pool.close()
        for reader in self._ocr_readers.values():
            reader.close()
        self._ocr_readers.clear()
        acquired = self._lock.acquire(timeout=0.2)
        try:
            worker = self._worker
            if worker is not None:
                if acquired:
                    with contextlib.suppress(OSError, ValueError):
                        worker.conn.send(("stop",))
                    worker.process.join(2)
                    self._discard()
                else:
                    # The owner of the lock sees the worker die and cleans up.
                    worker.process.kill()
            self._closed = True
        finally:
            if acquired:
                self._lock.release()

    def kill(self) -> None:
        """Stop the reader processes at once instead of asking them to (``close`` waits
        up to seconds for a reader to finish and exit): for a process about to exit,
        which must leave no reader running. A reader holds nothing of the library."""
        self._closing = True
        ocr = self._ocr_pool
        if ocr is not None:
            ocr.kill()
        worker, self._worker = self._worker, None
        if worker is not None:
            # The signal is sent, its end not waited for: a killed reader on a busy
            # computer took a third of a second to be reaped. A parse in flight on
            # another thread sees the pipe end, and, closing, the file is not blamed.
            worker.finalizer()
        self._closed = True

    def __enter__(self) -> ParserPool:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # -- internals --

    def _ensure_worker(self) -> _Worker:
        if self._worker is not None and self._worker.process.is_alive():
            return self._worker
        if self._worker is not None:
            self._discard()
        ctx = multiprocessing.get_context("spawn")
        parent_conn, child_conn = ctx.Pipe(duplex=True)
        process = ctx.Process(
            target=_worker_main,
            args=(child_conn, self.memory_mb, self.kind),
            name="lectern-ocr" if self.kind == "ocr" else "lectern-parser",
            daemon=True,
        )
        with _main_module_not_imported():
            process.start()
        # Without closing our copy of the child's end, a dead worker would never read
        # as EOF here.
        child_conn.close()
        finalizer = weakref.finalize(self, _kill, process)
        try:
            if not parent_conn.poll(self.start_timeout_s):
                raise TimeoutError("no answer")
            _tag, rlimited = parent_conn.recv()
        except (OSError, EOFError, TimeoutError) as exc:
            process.join(1)
            stopped = self._closing or _stopped_by_signal(process.exitcode)
            finalizer()
            parent_conn.close()
            if stopped:
                # Stopped from outside while it started (a service stop signals the
                # whole process group; Lectern closing): not a fault of the file or
                # of the installation.
                raise ReadingStoppedError("reading was stopped") from exc
            raise LecternError(
                f"the document reader process could not start ({type(exc).__name__})",
                hint="Reinstall Lectern; if it persists, report this as a bug.",
            ) from exc
        self._worker = _Worker(process, parent_conn, bool(rlimited), _rss(process.pid), finalizer)
        return self._worker

    def _discard(self) -> None:
        worker, self._worker = self._worker, None
        if worker is None:
            return
        worker.finalizer()  # kills the process if it is still running
        worker.process.join(5)
        worker.conn.close()

    def _await_reply(self, worker: _Worker) -> tuple[Any, ...]:
        deadline = time.monotonic() + self.timeout_s
        memory_cap = worker.baseline_rss + self.memory_mb * _MB
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                self._discard()
                raise timeout_error(self.timeout_s)
            try:
                ready = worker.conn.poll(min(remaining, _POLL_S))
            except (OSError, EOFError):
                ready = True
            if ready or not worker.process.is_alive():
                try:
                    if ready or worker.conn.poll(0):
                        return tuple(worker.conn.recv())
                except (OSError, EOFError):
                    pass
                self._crashed(worker)
            if not worker.rlimited and _rss(worker.process.pid) > memory_cap:
                self._discard()
                raise memory_limit_error(self.memory_mb)

    def _crashed(self, worker: _Worker) -> None:
        worker.process.join(2)
        exitcode = worker.process.exitcode
        self._discard()
        if self._closing or (_stopped_by_signal(exitcode) and exitcode != -(_SIGKILL or 0)):
            # Lectern closing, or a stop signal to the whole process group (a service
            # stop, a terminal closed): the file is not at fault.
            raise ReadingStoppedError("reading was stopped")
        if _SIGKILL is not None and exitcode == -_SIGKILL:
            # Nobody here killed it, so it was the system's out-of-memory killer.
            raise memory_limit_error(self.memory_mb)
        raise DamagedFileError("parser crashed on this file")

    @staticmethod
    def _result(reply: tuple[Any, ...]) -> ParsedDocument:
        if reply[0] == "ok":
            document: ParsedDocument = reply[1]
            return document
        _, name, reason, hint = reply
        cls = getattr(errors, name, None)
        if not (isinstance(cls, type) and issubclass(cls, ParseError)):
            cls = ParseError
        raise cls(reason, hint)


_STOP_SIGNALS = tuple(
    getattr(signal, name)
    for name in ("SIGTERM", "SIGINT", "SIGHUP", "SIGKILL")
    if hasattr(signal, name)
)


def _stopped_by_signal(exitcode: int | None) -> bool:
    """Whether a reader's exit code says a signal that stops programs ended it."""
    return exitcode is not None and exitcode < 0 and -exitcode in _STOP_SIGNALS


def _rss(pid: int | None) -> int:
    if pid is None:
        return 0
    try:
        import psutil

        return int(psutil.Process(pid).memory_info().rss)
    except Exception:
        return 0


def _kill(process: BaseProcess) -> None:
    if process.is_alive():
        process.kill()
