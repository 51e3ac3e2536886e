"""Keeping folders in sync while the window is open, with ``core.watch.FolderWatcher``.

The watcher calls back on its own threads; these callbacks only emit Qt signals, which
Qt queues to the UI thread, so the window reacts to file changes without ever being
touched from another thread.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

from PySide6.QtCore import QObject, Signal

from core.records import IndexProgress

if TYPE_CHECKING:
    from desktop.app import Backend

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

    def report_progress(self, p: IndexProgress) -> None:
        # Called on the watcher's thread for every file: send a human-rate trickle.
        now = time.monotonic()
        if p.files_done < p.files_total and now - self._last < PROGRESS_INTERVAL_S:
            return
        self._last = now
        self.progress.emit(p)


def start_watcher(backend: Backend) -> Any:
    """Start a FolderWatcher on the backend's library (None when core has no watcher)."""
    try:
        from core.watch import FolderWatcher
    except ImportError:
        return None
    library = backend.library
    if library is None:
        return None
    bridge = WatchBridge(backend)
    watcher = FolderWatcher(
        library,
        on_batch=bridge.batch.emit,
        on_status=bridge.status.emit,
        on_error=bridge.error.emit,
        progress=bridge.report_progress,
    )
    bridge.progress.connect(backend._watch_progress)
    bridge.batch.connect(backend._watch_batch)
    bridge.status.connect(backend._watch_status)
    bridge.error.connect(backend._watch_error)
    backend.watch_bridge = bridge
    # Setting the first watches walks every folder: never on the UI thread.
    backend.background.submit(
        lambda ctx: watcher.start(reconcile=True),
        name="start watcher",
        on_error=backend._watch_error,
    )
    return watcher
