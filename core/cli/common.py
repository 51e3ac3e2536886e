"""What the CLI's commands share: opening the library, the progress bar, and a terminal
that no locale, encoding or background failure can turn into a traceback."""

from __future__ import annotations

import argparse
import codecs
import logging
import os
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from core import __version__
from core.cli.terminal import printable
from core.indexing.throttle import BUSY_WAITING
from core.private import append_private
from core.records import IndexProgress

if TYPE_CHECKING:
    from core.errors import IndexBusyError
    from core.ipc import RemoteLibrary
    from core.library import Library, LibraryReader

# --- the terminal ----------------------------------------------------------------------

_TERMINAL_ERRORS = "lectern-terminal"


def _terminal_errors(exc: UnicodeError) -> tuple[str | bytes, int]:
    """What a character the terminal's encoding cannot show is written as: a file name's
    byte that is not UTF-8 (a lone surrogate, PEP 383) as that very byte, so the name
    can be copied back into a command; anything else as a backslash escape."""
    if not isinstance(exc, UnicodeEncodeError):
        raise exc
    bad = exc.object[exc.start : exc.end]
    if all("\udc80" <= ch <= "\udcff" for ch in bad):
        return bytes(ord(ch) - 0xDC00 for ch in bad), exc.end
    return codecs.backslashreplace_errors(exc)


codecs.register_error(_TERMINAL_ERRORS, _terminal_errors)


def prepare_streams() -> None:
    """Standard output and error never fail on a character: LC_ALL=C or
    PYTHONIOENCODING=ascii made `lectern search café` end in a UnicodeEncodeError."""
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is None:
            continue
        try:
            reconfigure(errors=_TERMINAL_ERRORS)
        except (ValueError, OSError):  # closed, or a stream that cannot change
            continue


# Arguments that are words, not file names. In an ASCII locale (LC_ALL=C) Python hands
# every byte above 127 of an argument over as a lone surrogate, which DuckDB refuses; a
# word is read back as the UTF-8 the terminal almost always sends. A path is left as the
# OS gave it, since that is the name this process opens it by. tests/cli/test_hostile_env.py
# checks that every argument of every command is in one of the two sets.
TEXT_ARGUMENTS = frozenset(
    {"query", "question", "title", "name", "new_name", "collection", "type", "model", "split"}
)
PATH_ARGUMENTS = frozenset(
    {"paths", "folders", "folder", "beir", "answers", "documents", "questions", "output"}
)


def text_argument(text: str) -> str:
    """``text`` from the command line as valid Unicode: bytes the locale could not
    decode are read as UTF-8, and any that are not UTF-8 either become U+FFFD."""
    if text.isascii() or not any("\udc80" <= ch <= "\udcff" for ch in text):
        return text
    try:
        raw = os.fsencode(text)
    except UnicodeEncodeError:
        raw = text.encode("utf-8", "surrogateescape")
    return raw.decode("utf-8", "replace")


def decode_text_arguments(args: argparse.Namespace) -> None:
    for name in TEXT_ARGUMENTS:
        value = getattr(args, name, None)
        if isinstance(value, str):
            setattr(args, name, text_argument(value))
        elif isinstance(value, list):
            setattr(args, name, [text_argument(v) if isinstance(v, str) else v for v in value])


# --- what goes wrong out of sight -----------------------------------------------------


def crash_log() -> Path | None:
    """The file that keeps tracebacks for a bug report (in the data folder); None when
    there is none to write to."""
    try:
        from core.config import data_dir

        return data_dir() / "cli-error.log"
    except Exception:  # the data folder itself may be what is broken
        return None


def write_crash_log(details: str) -> Path | None:
    path = crash_log()
    if path is None:
        return None
    try:
        # Private: a traceback can quote a question, a passage or a path.
        append_private(
            path,
            f"--- lectern {__version__} {time.strftime('%Y-%m-%d %H:%M:%S')}\n"
            + (details if details.endswith("\n") else details + "\n"),
        )
        return path
    except OSError:
        return None


def debugging() -> bool:
    return os.environ.get("LECTERN_DEBUG") == "1"


class _TerminalLog(logging.Handler):
    """The engine's log records as one sentence each on standard error; the traceback of
    a record that has one goes to the crash log (LECTERN_DEBUG=1 prints it too)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)

    def emit(self, record: logging.LogRecord) -> None:
        try:
            # A log line may quote a file name or a document's words.
            message = printable(record.getMessage())
            if record.exc_info and record.exc_info[1] is not None:
                exc = record.exc_info[1]
                write_crash_log(f"{message}\n{''.join(traceback.format_exception(exc))}")
                if debugging():
                    message += "\n" + "".join(traceback.format_exception(exc)).rstrip()
                else:
                    message += f" ({printable(f'{type(exc).__name__}: {exc}')})"
            print(f"Warning: {message}", file=sys.stderr, flush=True)
        except Exception:  # a log line must never become a failure of its own
            pass


_log_handler: _TerminalLog | None = None


def quiet_logging() -> None:
    """Without a handler, Python prints a warning's traceback to the terminal (the
    indexer logs a reader that failed to start with its traceback)."""
    global _log_handler
    root = logging.getLogger()
    if _log_handler is not None or root.handlers:
        return  # already configured: by an earlier call, or by a program embedding this
    _log_handler = _TerminalLog()
    root.addHandler(_log_handler)


class ThreadFailures:
    """While a command runs, a background thread that fails on an unexpected error is
    said in one sentence and ends the command (exit status 2), instead of a traceback
    and a command that goes on as if nothing happened (a watcher saying it polls after
    its polling thread died)."""

    def __init__(self) -> None:
        self.failed: list[str] = []
        self._previous: Callable[[Any], object] | None = None
        self._main = threading.main_thread()
        self._previous_wake: Any = None
        self._wakes_with_own_signal = False

    def __enter__(self) -> ThreadFailures:
        self._previous = threading.excepthook
        threading.excepthook = self._hook
        # The command's thread is woken as Ctrl-C wakes it, but by a signal of its own: a
        # command a shell started in the background (`lectern watch &` in a script) or
        # under nohup has Ctrl-C's signal ignored, and would wait for it forever.
        if _WAKE_SIGNAL is not None and threading.current_thread() is self._main:
            self._previous_wake = signal.signal(_WAKE_SIGNAL, _interrupted)
            self._wakes_with_own_signal = True
        return self

    def __exit__(self, *exc: object) -> None:
        if threading.excepthook == self._hook and self._previous is not None:
            threading.excepthook = self._previous
        if _WAKE_SIGNAL is not None and self._wakes_with_own_signal:
            if threading.current_thread() is self._main:
                # None: the handler before was set outside Python, which cannot restore it.
                signal.signal(_WAKE_SIGNAL, self._previous_wake or signal.SIG_DFL)
            self._wakes_with_own_signal = False

    def _hook(self, hook_args: Any) -> None:
        exc = hook_args.exc_value
        if hook_args.exc_type is SystemExit or exc is None:
            return
        thread = hook_args.thread
        name = thread.name if thread is not None else "a background task"
        details = "".join(
            traceback.format_exception(hook_args.exc_type, exc, hook_args.exc_traceback)
        )
        where = write_crash_log(f"in thread {name}:\n{details}")
        self.failed.append(name)
        try:
            print(
                f"Error: a background part of Lectern ({printable(name)}) stopped on an "
                f"unexpected error ({printable(f'{type(exc).__name__}: {exc}')}), so this "
                "command ends here.\n"
                f"Hint: {f'Details are in {where}' if where else 'Details'}; run the command "
                "again with LECTERN_DEBUG=1 to see them here.",
                file=sys.stderr,
                flush=True,
            )
            if debugging():
                print(details.rstrip(), file=sys.stderr, flush=True)
        except Exception:
            pass
        self._stop_main()

    def _stop_main(self) -> None:
        """Interrupt the command's own thread as Ctrl-C would, waking it from a sleep."""
        if threading.current_thread() is self._main:
            return
        wake = signal.SIGINT
        if _WAKE_SIGNAL is not None and self._wakes_with_own_signal:
            wake = _WAKE_SIGNAL
        if hasattr(signal, "pthread_kill") and self._main.ident is not None:
            try:
                signal.pthread_kill(self._main.ident, wake)
                return
            except (OSError, ValueError):
                pass
        import _thread

        _thread.interrupt_main()


# What ThreadFailures wakes the command's thread with (Windows has no spare signal: there,
# Ctrl-C's, through _thread.interrupt_main).
_WAKE_SIGNAL: signal.Signals | None = getattr(signal, "SIGUSR1", None)


def _interrupted(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def _fmt_duration(seconds: float | None) -> str:
    if seconds is None:
        return "--:--"
    seconds = int(seconds)
    return (
        f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"
        if seconds >= 3600
        else f"{seconds // 60:02d}:{seconds % 60:02d}"
    )


def _bar_blocks(stream: TextIO) -> tuple[str, str]:
    """The bar's characters: blocks where the terminal's encoding has them, else ASCII."""
    try:
        "█░".encode(getattr(stream, "encoding", None) or "ascii")
        return "█", "░"
    except (UnicodeEncodeError, LookupError):
        return "#", "-"


class ProgressBar:
    """A one-line progress bar on stderr: files and chunks done, rate, time left."""

    def __init__(self, stream: TextIO | None = None, min_interval: float = 0.2) -> None:
        # Looked up per bar, not bound at import: sys.stderr may have been replaced since.
        self.stream = stream or sys.stderr
        self.enabled = self.stream.isatty() or os.environ.get("LECTERN_PROGRESS") == "1"
        self.blocks = _bar_blocks(self.stream)
        self.min_interval = min_interval
        self._last = 0.0
        self._shown = False
        self._waiting = ""

    def __call__(self, p: IndexProgress) -> None:
        now = time.monotonic()
        final = p.finished
        changed = p.waiting_reason != self._waiting
        if not self.enabled or (now - self._last < self.min_interval and not final and not changed):
            return
        self._last = now
        self._waiting = p.waiting_reason
        if p.waiting_reason:
            line = f"\r{p.files_done}/{p.files_total} files  {BUSY_WAITING}"
            self.stream.write(line[:160].ljust(100))
            self.stream.flush()
            self._shown = True
            return
        width = 28
        frac = p.fraction
        done, todo = self.blocks
        bar = done * int(width * frac) + todo * (width - int(width * frac))
        chunk_rate = p.passages_embedded / p.elapsed_s if p.elapsed_s > 0 else 0.0
        line = (
            f"\r{bar} {p.files_done}/{p.files_total} files  "
            + ("prepared for ranking " if p.packing_pieces else "embedded ")
            + f"{p.passages_embedded}/{p.passages_total}  "
            f"{chunk_rate:.1f} passages/s  ETA {_fmt_duration(p.eta_s)}"
        )
        if p.failed:
            line += f"  {p.failed} failed"
        self.stream.write(line[:160].ljust(100))
        self.stream.flush()
        self._shown = True

    def close(self) -> None:
        if self._shown:
            self.stream.write("\n")
            self.stream.flush()


def open_library(*, migrate: bool = False) -> Library:
    """The library in the configured data folder; repairs made at open are told once.
    ``migrate``: whether a change of model re-embeds in the background meanwhile (for
    the commands that index; a short command would only load a model for nothing)."""
    from core.library import Library

    library = Library(migrate=migrate)
    # What was repaired at open is said once, where the person is looking.
    for notice in library.recovery_notices:
        print(printable(f"{notice.message} {notice.hint}".strip()), file=sys.stderr)
        if notice.kept_at:
            print(f"  (kept at {printable(notice.kept_at)})", file=sys.stderr)
    return library


# Said on standard error, where the other notes about how a command ran go, so that
# standard output (and its --json line) is the same as when the command runs alone.
ANSWERED_REMOTELY = "(answered by the running Lectern)"


def running_library(busy: IndexBusyError, home: Path) -> RemoteLibrary:
    """The Lectern process that holds the library, for a command that only reads;
    ``busy`` again when none answers (it stopped, or predates answering: core/ipc/)."""
    from core.ipc import connect

    remote = connect(home)
    if remote is None:
        raise busy
    print(ANSWERED_REMOTELY, file=sys.stderr)
    return remote


def open_reader() -> LibraryReader:
    """The library for the commands that only read (``search``, ``status``, ``files``,
    ``conversations``): opened here, or, while ``lectern watch``, ``lectern index`` or the
    app holds it, asked through that process."""
    from core.config import data_dir
    from core.errors import IndexBusyError

    try:
        return open_library()
    except IndexBusyError as busy:
        return running_library(busy, data_dir())
