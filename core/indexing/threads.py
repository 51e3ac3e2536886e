"""Background work yields the CPU to the person's foreground work."""

from __future__ import annotations

import os
import sys
import threading


def lower_thread_priority(step: int = 10) -> bool:
    """Set the calling thread ``step`` nice levels below the process (Linux only); returns
    whether the platform allowed it.

    On Linux the nice value is per thread and inherited by the threads and processes the
    thread starts: the parser process, DuckDB's and torch's worker threads. The level is
    relative to the process's own priority, not to where the thread was, so a pooled
    thread running its tenth task is no lower than on its first.
    """
    if not sys.platform.startswith("linux"):
        return False
    try:
        tid = threading.get_native_id()
        target = min(19, os.getpriority(os.PRIO_PROCESS, os.getpid()) + step)
        if os.getpriority(os.PRIO_PROCESS, tid) < target:
            os.setpriority(os.PRIO_PROCESS, tid, target)
    except (OSError, AttributeError):
        pass
    return True
