"""Keeping folders in sync while the window is open, with ``core.indexing.watch.FolderWatcher``.

The watcher calls back on its own threads; these callbacks only emit Qt signals, which
Qt queues to the UI thread, so the window reacts to file changes without ever being
touched from another thread.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from core.indexing.watch import AppliedBatch, FolderWatcher
from core.records import IndexProgress
from desktop.qt import QObject, Signal

if TYPE_CHECKING:
    from core.library import Library
    from desktop.workers import Background

log = logging.getLogger(__name__)

PROGRESS_INTERVAL_S = 0.1


class WatchBridge(QObject):
    progress = Signal(object)  # IndexProgress
    batch = Signal(object)  # AppliedBatch
    status = Signal(str, str, str)  # folder, state, reason
    error = Signal(object)  # LecternError

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._last = 0.0
        self._waiting = ""  # a wait starting or ending is always sent (core/indexing/throttle.py)

    def report_progress(self, p: IndexProgress) -> None:
        # Called on the watcher's thread for every file: send a human-rate trickle.
        now = time.monotonic()
        changed, self._waiting = p.waiting_reason != self._waiting, p.waiting_reason
        if not p.finished and not changed and now - self._last < PROGRESS_INTERVAL_S:
            return
        self._last = now
        self.progress.emit(p)


@dataclass(frozen=True)
class WatchHandlers:
    """Where the watcher's reports go, on the UI thread."""

    progress: Callable[[IndexProgress], None]
    batch: Callable[[AppliedBatch], None]
    status: Callable[[str, str, str], None]
    error: Callable[[BaseException], None]


def start_watcher(
    library: Library, background: Background, handlers: WatchHandlers, parent: QObject
) -> tuple[FolderWatcher, WatchBridge]:
    """Start a FolderWatcher on ``library``; its first walk runs on ``background``."""
    bridge = WatchBridge(parent)
    watcher = FolderWatcher(
        library,
        on_batch=bridge.batch.emit,
        on_status=bridge.status.emit,
        on_error=bridge.error.emit,
        progress=bridge.report_progress,
    )
    bridge.progress.connect(handlers.progress)
    bridge.batch.connect(handlers.batch)
    bridge.status.connect(handlers.status)
    bridge.error.connect(handlers.error)
    # Setting the first watches walks every folder: never on the UI thread.
    background.submit(
        lambda ctx: watcher.start(reconcile=True),
        name="start watcher",
        on_error=handlers.error,
    )
    return watcher, bridge
