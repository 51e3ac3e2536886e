"""Indexing that stays out of the way: how fast the indexer may go.

The indexer asks :meth:`Throttle.pace` between units of work (before each file it writes
and before each batch the model embeds). The policy then either returns at once
("always", the default), sleeps long enough that this process's CPU time stays within a
chosen share of the computer's ("share"), or holds until the rest of the computer has
been quiet for a moment ("idle").

Both are measured, not assumed. "This process" is Lectern's own CPU time (every thread,
torch's and DuckDB's included) plus the parser process's, which does the reading; the
rest of the computer is the system's busy time (psutil: ``/proc/stat`` on Linux, the
kernel's counters on macOS and Windows) minus ours.

The share is of the whole computer, all cores together: "25 %" on a four-core machine
is one core's worth. That is what a system monitor's total shows, and what a person
means by "a quarter of my computer"; a share of one core would let indexing take all of
a small laptop at 100 % and almost nothing of a workstation.

Every wait is on an event in short slices, so pausing, cancelling, quitting or a new
setting take effect within a fraction of a second.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Protocol

import psutil

from core.config import INDEX_WHEN

MODES = INDEX_WHEN
DEFAULT_SHARE = 50
# The computer counts as idle while the other processes together use less than this
# share of all its cores, measured over at least IDLE_WINDOW_S.
IDLE_THRESHOLD = 0.15
IDLE_WINDOW_S = 1.0
# While the computer is busy, look again this often.
IDLE_RECHECK_S = 3.0
# A measurement older than this says nothing about now: measure afresh before a run.
IDLE_STALE_S = 10.0
# Time spent below the share (waiting for files, say) may be spent later, up to this
# much: enough to smooth one unit's burst, not enough to run flat out after a long rest.
SHARE_CREDIT_S = 1.0
# Waits are cut into slices this long so that cancel and new settings act promptly.
WAIT_SLICE_S = 0.1

WAITING_IDLE = "waiting for the computer to be idle"
# What a person is told meanwhile (the progress card, `lectern index` and `status`).
BUSY_WAITING = "waiting · the computer is busy; indexing resumes when it is idle"


class Cancellable(Protocol):
    """What a wait watches (core.indexing.indexer.Controls has it)."""

    cancel: threading.Event


def cpu_cores() -> int:
    """The cores this process may run on (its affinity where the platform tells it)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def share_wait(
    cpu_s: float, wall_s: float, share: float, cores: int, carried_s: float = 0.0
) -> tuple[float, float]:
    """How long to sleep after a unit that took ``cpu_s`` of CPU over ``wall_s`` seconds,
    so that CPU over wall time stays at ``share`` (0..1) of ``cores``; returns (the wait,
    the credit or debt carried to the next unit).

    A unit that used C CPU-seconds must take C / (share * cores) seconds of wall time;
    what it took less is slept. Time left over (a unit below the share) is kept as
    credit, at most SHARE_CREDIT_S."""
    budget = max(1e-6, share) * max(1, cores)
    balance = carried_s + max(0.0, cpu_s) / budget - max(0.0, wall_s)
    if balance > 0:
        return balance, 0.0
    return 0.0, max(balance, -SHARE_CREDIT_S)


@dataclass(frozen=True)
class CpuSample:
    """Counters at one moment, in CPU-seconds summed over cores."""

    at: float  # time.monotonic()
    busy_s: float  # the whole system's busy time
    total_s: float  # busy plus idle
    own_s: float  # Lectern's process and its helpers


def others_share(before: CpuSample, after: CpuSample) -> float:
    """The share (0..1) of the computer's capacity that other processes used between
    two samples."""
    capacity = after.total_s - before.total_s
    if capacity <= 0:
        return 0.0
    others = (after.busy_s - before.busy_s) - (after.own_s - before.own_s)
    return min(1.0, max(0.0, others / capacity))


def _system_times() -> tuple[float, float] | None:
    """(busy, total) CPU-seconds since boot, over all cores; None where unknown."""
    try:
        times = psutil.cpu_times()
    except (OSError, RuntimeError, NotImplementedError):
        return None
    idle = float(getattr(times, "idle", 0.0)) + float(getattr(times, "iowait", 0.0))
    # Time the hypervisor gave to other machines is nobody's work here; guests' time is
    # already inside user on Linux.
    skip = {"idle", "iowait", "steal", "guest", "guest_nice"}
    busy = sum(float(getattr(times, name)) for name in times._fields if name not in skip)
    return busy, busy + idle


def _process_cpu(process: psutil.Process, *, children: bool) -> float:
    times = process.cpu_times()
    total = float(times.user) + float(times.system)
    if children:  # helpers that ended (and were waited for) leave their time here
        total += float(getattr(times, "children_user", 0.0))
        total += float(getattr(times, "children_system", 0.0))
    return total


class Throttle:
    """The indexing pace, shared by every run of one library (a full index, the
    watcher's batches); :meth:`configure` changes it while a run is going."""

    def __init__(
        self,
        mode: str = "always",
        cpu_share: int = DEFAULT_SHARE,
        *,
        helper_pids: Callable[[], Iterable[int | None]] = tuple,
        idle_threshold: float = IDLE_THRESHOLD,
        idle_window_s: float = IDLE_WINDOW_S,
        idle_recheck_s: float = IDLE_RECHECK_S,
    ) -> None:
        self.helper_pids = helper_pids
        self.idle_threshold = idle_threshold
        self.idle_window_s = idle_window_s
        self.idle_recheck_s = idle_recheck_s
        self._lock = threading.Lock()
        self._changed = 0  # bumped by configure: a wait in progress starts over
        self._mode = "always"
        self._share = DEFAULT_SHARE
        self.configure(mode, cpu_share)
        self._process = psutil.Process()
        # Share mode: where the current unit started, and the credit carried.
        self._mark: tuple[float, float] | None = None
        self._carried = 0.0
        # Idle mode: the last sample, and whether the computer was idle up to it.
        self._sample: CpuSample | None = None
        self._idle = True
        self._holding = threading.Event()  # set while a wait is in progress
        self.waiting = ""  # why indexing is waiting now ("" when it is not)
        self.held_s = 0.0  # seconds spent waiting, all runs together (for the bench)

    # --- settings ---------------------------------------------------------------

    def configure(self, mode: str, cpu_share: int = DEFAULT_SHARE) -> None:
        if mode not in MODES:
            raise ValueError(f"unknown indexing mode {mode!r}; expected one of {MODES}")
        with self._lock:
            self._mode = mode
            self._share = min(100, max(1, int(cpu_share)))
            self._changed += 1

    @property
    def mode(self) -> str:
        return self._mode

    @property
    def cpu_share(self) -> int:
        return self._share

    def describe(self) -> str:
        """The setting in words, for progress lines."""
        if self._mode == "share":
            return f"using at most {self._share} % of the CPU"
        if self._mode == "idle":
            return "only while the computer is idle"
        return ""

    # --- measuring --------------------------------------------------------------

    def own_cpu_s(self) -> float:
        """CPU-seconds used by Lectern: this process (all threads) and its helpers."""
        total = _process_cpu(self._process, children=True)
        for pid in self.helper_pids():
            if pid is None:
                continue
            try:
                total += _process_cpu(psutil.Process(pid), children=False)
            except (psutil.Error, OSError):
                continue  # it ended meanwhile: its time is in children_* once waited for
        return total

    def sample(self) -> CpuSample | None:
        system = _system_times()
        if system is None:
            return None
        return CpuSample(time.monotonic(), system[0], system[1], self.own_cpu_s())

    @staticmethod
    def idle_available() -> bool:
        """Whether this platform tells the system's CPU use (so "idle" can work)."""
        return _system_times() is not None

    # --- pacing -----------------------------------------------------------------

    def begin(self) -> None:
        """A run starts: time spent before it (another thread's, the UI's) is not the
        run's, and an old idle measurement says nothing about now."""
        with self._lock:
            self._mark = None
            self._carried = 0.0
            if self._sample is not None and time.monotonic() - self._sample.at > IDLE_STALE_S:
                self._sample = None

    def pace(self, controls: Cancellable, on_wait: Callable[[str], None] | None = None) -> None:
        """Between two units of work: return when the next one may start. ``on_wait``
        is told the reason when a wait for the computer starts, and "" when it ends."""
        mode = self._mode
        if mode == "share":
            self._pace_share(controls)
        elif mode == "idle":
            self._pace_idle(controls, on_wait)
        else:
            self._mark = None

    def hold(self, controls: Cancellable) -> None:
        """Wait while a :meth:`pace` wait is in progress (the parser thread calls this,
        so that reading ahead does not go on while writing waits)."""
        while self._holding.is_set() and not controls.cancel.wait(WAIT_SLICE_S):
            pass

    def _pace_share(self, controls: Cancellable) -> None:
        now, cpu = time.monotonic(), self.own_cpu_s()
        mark, self._mark = self._mark, (now, cpu)
        if mark is None:
            return  # the run's first unit: nothing measured yet
        wait, self._carried = share_wait(
            cpu - mark[1], now - mark[0], self._share / 100, cpu_cores(), self._carried
        )
        if wait <= 0:
            return
        self._holding.set()
        try:
            self._sleep(controls, wait)
        finally:
            self._holding.clear()
        # The wait is not part of the next unit (other threads' CPU meanwhile is).
        self._mark = (time.monotonic(), self._mark[1])

    def _pace_idle(self, controls: Cancellable, on_wait: Callable[[str], None] | None) -> None:
        if self._sample is None:
            self._sample = self.sample()
            if self._sample is None:
                return  # unknown on this platform: the settings dialog says so
            self._sleep(controls, self.idle_window_s)  # a first measurement, before work
        waited = False
        try:
            while not controls.cancel.is_set() and self._mode == "idle":
                self._measure()
                if self._idle:
                    return
                if not waited:
                    waited = True
                    self._holding.set()
                    self.waiting = WAITING_IDLE
                    if on_wait:
                        on_wait(WAITING_IDLE)
                self._sleep(controls, self.idle_recheck_s)
        finally:
            if waited:
                self.waiting = ""
                self._holding.clear()
                if on_wait:
                    on_wait("")

    def _measure(self) -> None:
        """Update the idle verdict once at least a window has passed since the last
        sample; the work done meanwhile was ours, so it is subtracted."""
        before = self._sample
        if before is None or time.monotonic() - before.at < self.idle_window_s:
            return
        after = self.sample()
        if after is None:
            self._idle = True
            return
        self._idle = others_share(before, after) < self.idle_threshold
        self._sample = after

    def _sleep(self, controls: Cancellable, seconds: float) -> None:
        """Sleep up to ``seconds``, ending early on cancel or a new setting."""
        changed = self._changed
        started = time.monotonic()
        deadline = started + seconds
        try:
            while (left := deadline - time.monotonic()) > 0:
                if controls.cancel.wait(min(WAIT_SLICE_S, left)) or self._changed != changed:
                    return
        finally:
            self.held_s += time.monotonic() - started
