"""The folder watcher's callbacks (``core.app.watch.FolderWatcher``) as Qt signals.

The watcher calls back on its own threads; these callbacks only emit Qt signals, which
Qt queues to the UI thread, so the window reacts to file changes without ever being
touched from another thread (desktop/indexing_host.py connects them).
"""

from __future__ import annotations

import time

from core.records import IndexProgress
from desktop.qt import QObject, Signal

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
