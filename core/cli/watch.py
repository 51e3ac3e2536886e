"""``lectern watch [PATH...]``: index the library folders, then keep the index equal to
them until Ctrl-C, printing each change set as it is applied.

Human-readable lines go to standard output as they happen (progress bars to standard
error); with ``--json`` each line is one JSON object instead.
"""

from __future__ import annotations

import argparse
import json
import math
import queue
import signal
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from core.cli.terminal import printable
from core.errors import LecternError
from core.records import IndexProgress

Handler = Callable[[argparse.Namespace], int]

# A day: longer waits overflow the timers of the threads that poll and reconcile
# ("--poll-interval inf" killed the polling thread with an OverflowError while the
# command went on saying it polled).
MAX_INTERVAL_S = 86_400.0


def interval(text: str) -> float:
    """argparse type for ``--poll-interval``: seconds, above 0 and at most a day."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not math.isfinite(value) or not 0 < value <= MAX_INTERVAL_S:
        raise argparse.ArgumentTypeError(
            f"must be a number of seconds above 0 and at most {MAX_INTERVAL_S:g}, not {text}"
        )
    return value


def interval_or_never(text: str) -> float:
    """argparse type for ``--reconcile``: ``interval``, or 0 for never."""
    try:
        if float(text) == 0:
            return 0.0
    except ValueError:
        pass
    return interval(text)


def register(subparsers: Any) -> dict[str, Handler]:
    p = subparsers.add_parser("watch", help="index folders, then follow their changes until Ctrl-C")
    p.add_argument(
        "paths", nargs="*", help="folders or files to add; none means every folder already added"
    )
    p.add_argument(
        "--reconcile",
        type=interval_or_never,
        default=60.0,
        metavar="SECONDS",
        help="how often to re-check every folder for changes no event reported "
        "(default 60; 0: never)",
    )
    p.add_argument(
        "--poll",
        action="store_true",
        help="check folders by polling instead of file-system events (network drives)",
    )
    p.add_argument(
        "--poll-interval", type=interval, default=5.0, metavar="SECONDS", help="(default 5)"
    )
    p.add_argument("--json", action="store_true", help="one JSON object per line")
    return {"watch": cmd_watch}


def _emit(
    args: argparse.Namespace, lock: threading.Lock, record: dict[str, object], text: str
) -> None:
    with lock:
        print(json.dumps(record) if args.json else text, flush=True)


def cmd_watch(args: argparse.Namespace) -> int:
    from core.app.coordinator import DISK_RECHECK_S, IndexingCoordinator
    from core.app.watch import AppliedBatch, FolderWatcher
    from core.cli.common import ProgressBar, open_library
    from core.ipc import serve

    library = open_library(migrate=True)
    out_lock = threading.Lock()
    bar_holder: list[ProgressBar] = [ProgressBar()]

    def progress(p: IndexProgress) -> None:
        bar_holder[0](p)

    def on_batch(batch: AppliedBatch) -> None:
        bar_holder[0].close()
        bar_holder[0] = ProgressBar()
        notice = library.take_model_notice()  # a new library that took the multilingual model
        if notice:
            with out_lock:
                print(notice, file=sys.stderr, flush=True)
        r = batch.report
        if not (r.added or r.updated or r.removed or r.failed or r.skipped):
            return
        when = time.strftime("%H:%M:%S", time.localtime(batch.finished_at))
        kind = "reconciled" if batch.reconcile else "applied"
        # Names escaped (core/cli/terminal.py): a file name must not forge a line.
        shown = ", ".join(printable(p) for p in batch.paths[:5]) + (
            f" and {len(batch.paths) - 5} more" if len(batch.paths) > 5 else ""
        )
        text = (
            f"{when} {kind}: {r.added} added, {r.updated} updated, {r.removed} removed, "
            f"{r.failed} failed ({r.chunks_embedded} chunks embedded, {r.chunks_reused} reused) "
            f"in {r.elapsed_s:.2f} s: {shown}"
        )
        for path, reason in r.failures:
            text += f"\n  failed: {printable(path)}: {printable(reason)}"
        if r.empty:
            from core.cli.files import empty_files_line

            text += f"\n  {empty_files_line(r.empty)}"
        _emit(
            args,
            out_lock,
            {
                "event": kind,
                "added": r.added,
                "updated": r.updated,
                "removed": r.removed,
                "failed": r.failed,
                "skipped": r.skipped,
                "empty": r.empty,
                "chunks_embedded": r.chunks_embedded,
                "chunks_reused": r.chunks_reused,
                "elapsed_s": round(r.elapsed_s, 3),
                "paths": list(batch.paths),
                "failures": [{"path": p, "reason": why} for p, why in r.failures],
            },
            text,
        )

    def on_status(folder: str, state: str, reason: str) -> None:
        text = f"{printable(folder)}: {state}" + (f" ({printable(reason)})" if reason else "")
        _emit(
            args,
            out_lock,
            {"event": "status", "folder": folder, "state": state, "reason": reason},
            text,
        )

    # Errors come from the watcher's thread; the main thread tells them and decides
    # (the coordinator is one thread's, as in the app).
    errors: queue.Queue[LecternError] = queue.Queue()

    def on_error(exc: LecternError) -> None:
        errors.put(exc)

    def tell(exc: LecternError) -> None:
        with out_lock:
            print(f"Error: {printable(exc.message)}", file=sys.stderr, flush=True)
            if exc.hint:
                print(f"Hint: {printable(exc.hint)}", file=sys.stderr, flush=True)

    for path in args.paths:
        library.add_folder(Path(path))
    if not library.files.folders():
        library.close()
        raise LecternError("There is no folder to watch.", "Run `lectern watch FOLDER` to add one.")

    switching = library.reembedding_status()
    if switching is not None:  # re-embedded while watching (core/indexing/reembed.py)
        with out_lock:
            print(switching.sentence, file=sys.stderr, flush=True)

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, interrupt)  # a service stop ends cleanly too
    # `lectern search`, `status` and `ask` cannot open the library while this process
    # holds it; they ask this process instead (core/ipc/).
    server = serve(library)
    watcher = FolderWatcher(
        library,
        reconcile_interval_s=args.reconcile if args.reconcile > 0 else None,
        poll_interval_s=args.poll_interval,
        force_polling=args.poll,
        on_batch=on_batch,
        on_status=on_status,
        on_error=on_error,
        progress=progress,
    )
    try:
        watcher.start(reconcile=True)  # the first pass indexes what changed while away
        while not watcher.wait_idle(0.5):
            pass
        folders = library.files.folders()
        _emit(
            args,
            out_lock,
            {"event": "watching", "folders": folders},
            f"Watching {len(folders)} folder{'s' if len(folders) != 1 else ''}. "
            "Press Ctrl-C to stop.",
        )
        # A full disk holds the watcher until there is room, then one reconcile catches
        # up (core/app/coordinator.py, the app's rule too).
        work = IndexingCoordinator()
        work.watcher = watcher
        while True:
            try:
                error = errors.get(timeout=DISK_RECHECK_S)
            except queue.Empty:
                if work.disk_full is not None and work.room_again():
                    _emit(
                        args,
                        out_lock,
                        {"event": "room_again"},
                        "There is room on the disk again; indexing carries on.",
                    )
                    watcher.request_reconcile()
                continue
            tell(error)
            if work.failed(error) and work.disk_full is not None:
                folder = str(work.disk_full.folder)
                _emit(
                    args,
                    out_lock,
                    {"event": "waiting_for_room", "folder": folder},
                    f"Indexing waits until there is room on the disk ({printable(folder)}).",
                )
    except KeyboardInterrupt:
        pass
    finally:
        signal.signal(signal.SIGTERM, previous)
        watcher.stop()
        bar_holder[0].close()
        server.close()
        library.close()
    _emit(args, out_lock, {"event": "stopped"}, "Stopped. The index is saved.")
    return 0
