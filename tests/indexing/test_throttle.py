"""Indexing that stays out of the way (core/indexing/throttle.py): only while the computer is
otherwise idle, or within a share of its CPU. Measured with real CPU burners, a real
library and the real model; no assertion on how long anything takes."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from core.config import Settings, load_settings
from core.errors import ConfigError
from core.indexing.indexer import Controls
from core.indexing.throttle import (
    BUSY_WAITING,
    SHARE_CREDIT_S,
    WAITING_IDLE,
    Throttle,
    cpu_cores,
    others_share,
    share_wait,
)
from core.library import Library
from core.records import IndexProgress, IndexReport

# The test machine is shared: "busy" here is every core spinning, and "idle" anything
# below nine tenths of that, so other work on the machine does not decide the outcome.
TEST_IDLE_THRESHOLD = 0.9


def spin_elsewhere(code: str = "while True: pass") -> int:
    """Start ``code`` in a process that is not ours (its parent shell exits at once), so
    its CPU time never joins this process's children's, as another program's would not;
    returns its pid."""
    shell = subprocess.run(
        ["sh", "-c", f'"{sys.executable}" -c "{code}" >/dev/null 2>&1 & echo $!'],
        capture_output=True,
        text=True,
        check=True,
    )
    return int(shell.stdout.strip())


@pytest.fixture()
def burners() -> Iterator[Callable[[], None]]:
    """Spin every core (one more process than cores) in other programs; call the
    returned function to stop them."""
    pids = [spin_elsewhere() for _ in range(cpu_cores() + 1)]

    def stop() -> None:
        while pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pids.pop(), signal.SIGKILL)

    yield stop
    stop()


def _spin_cpu(seconds: float) -> None:
    """Use ``seconds`` of this thread's own CPU time."""
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


def _folder(tmp_path: Path, files: int = 5) -> Path:
    folder = tmp_path / "notes"
    folder.mkdir()
    for i in range(files):
        body = f"Log {i}: the valve on line {i} was inspected and its seal replaced. " * 12
        (folder / f"log-{i}.md").write_text(f"# Log {i}\n\n{body}\n")
    return folder


def _idle_library(home: Path, embedder: Any) -> Library:
    library = Library(Settings(home=home, index_when="idle"), embedder=embedder)
    throttle = library.indexer.throttle
    throttle.idle_threshold = TEST_IDLE_THRESHOLD
    throttle.idle_window_s = 0.5
    throttle.idle_recheck_s = 0.5
    return library


class _Run:
    """``library.index`` on a thread, with every progress report kept."""

    def __init__(self, library: Library, folder: Path) -> None:
        self.reports: list[IndexProgress] = []
        self.controls = Controls()
        self.result: IndexReport | None = None
        self.thread = threading.Thread(
            target=self._run, args=(library, folder), daemon=True, name="test-index"
        )
        self.thread.start()

    def _run(self, library: Library, folder: Path) -> None:
        self.result = library.index([folder], progress=self.reports.append, controls=self.controls)

    def wait_for(self, check: Callable[[], bool], timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while not check():
            assert time.monotonic() < deadline, "timed out"
            time.sleep(0.05)

    def waiting(self) -> bool:
        return any(r.waiting_reason == WAITING_IDLE for r in self.reports)

    def stop(self) -> None:
        """Before the library closes (a test that failed or skipped mid-run)."""
        self.controls.stop()
        self.thread.join(timeout=60)


def _wait_busy(throttle: Throttle) -> None:
    """Until the burners are seen spinning (they take a moment to start)."""
    for _ in range(100):
        before = throttle.sample()
        time.sleep(0.3)
        after = throttle.sample()
        assert before and after
        if others_share(before, after) >= TEST_IDLE_THRESHOLD:
            return
    pytest.fail("the burners never made the computer look busy")


def carries_on(throttle: Throttle, done: Callable[[], bool], timeout: float = 120.0) -> None:
    """Wait for ``done`` once the burners stopped. The machine is shared: should other
    work keep it busy all along, the test cannot tell, and skips; while it is idle,
    indexing must not stay waiting."""
    deadline = time.monotonic() + timeout
    while not done() and time.monotonic() < deadline:
        time.sleep(0.1)
    if done():
        return
    before = throttle.sample()
    time.sleep(1.0)
    after = throttle.sample()
    assert before and after
    if others_share(before, after) >= TEST_IDLE_THRESHOLD:
        pytest.skip("other work kept this machine busy: idle mode could not be seen resuming")
    deadline = time.monotonic() + 15.0
    while not done():
        assert time.monotonic() < deadline, "the computer is idle, yet indexing still waits"
        time.sleep(0.1)


# --- the policy ---------------------------------------------------------------------------


def test_share_wait_is_proportional_to_the_measured_cpu() -> None:
    # 1 CPU-second at 25 % of 2 cores must take 2 s of wall time: 1.5 s still to wait.
    wait, carried = share_wait(1.0, 0.5, 0.25, 2)
    assert wait == pytest.approx(1.5) and carried == 0.0
    # Twice the CPU, twice the wall time it must take.
    assert share_wait(2.0, 0.5, 0.25, 2)[0] == pytest.approx(3.5)
    # A share of all cores: the same CPU on twice the cores needs half the wall time.
    assert share_wait(1.0, 0.0, 0.25, 4)[0] == pytest.approx(share_wait(1.0, 0.0, 0.25, 2)[0] / 2)
    # At 100 % nothing waits; below the share the credit carried is bounded.
    assert share_wait(1.0, 0.5, 1.0, 2)[0] == 0.0
    wait, carried = share_wait(0.0, 60.0, 0.25, 2)
    assert wait == 0.0 and carried == -SHARE_CREDIT_S
    # Credit is spent on the next unit.
    assert share_wait(1.0, 0.5, 0.25, 2, carried)[0] == pytest.approx(1.5 - SHARE_CREDIT_S)


def test_share_mode_holds_this_process_to_its_share_of_measured_cpu() -> None:
    throttle = Throttle("share", 10)
    controls = Controls()
    budget = 0.10 * cpu_cores()
    throttle.begin()
    throttle.pace(controls)  # the first unit's start
    start_wall, start_cpu = time.monotonic(), throttle.own_cpu_s()
    _spin_cpu(0.3)
    throttle.pace(controls)
    cpu = throttle.own_cpu_s() - start_cpu
    wall = time.monotonic() - start_wall
    # Measured, not assumed: the wait made wall time at least CPU / share (a slow,
    # contended machine only makes the wall time longer).
    assert throttle.held_s > 0
    assert cpu / wall <= budget * 1.05 + 0.01


def test_idle_detection_sees_a_busy_computer_and_not_its_own_work(
    burners: Callable[[], None],
) -> None:
    throttle = Throttle("idle", idle_threshold=TEST_IDLE_THRESHOLD)
    _wait_busy(throttle)
    burners()
    # Our own spinning is subtracted: it is not "the computer is busy".
    before = throttle.sample()
    spinning = threading.Thread(target=_spin_cpu, args=(0.5,))
    spinning.start()
    spinning.join()
    after = throttle.sample()
    # Another thread's CPU is the process's (torch's and DuckDB's threads are).
    assert before and after and after.own_s - before.own_s >= 0.4
    capacity = after.total_s - before.total_s
    ours = (after.own_s - before.own_s) / capacity
    everyone = (after.busy_s - before.busy_s) / capacity
    assert others_share(before, after) <= max(0.0, everyone - ours) + 1e-9


def test_a_new_setting_ends_a_wait_at_once(burners: Callable[[], None]) -> None:
    throttle = Throttle("idle", idle_threshold=TEST_IDLE_THRESHOLD, idle_recheck_s=3600)
    _wait_busy(throttle)
    reasons: list[str] = []
    done = threading.Event()
    pacer = threading.Thread(target=lambda: (throttle.pace(Controls(), reasons.append), done.set()))
    pacer.start()
    deadline = time.monotonic() + 60
    while WAITING_IDLE not in reasons:
        assert time.monotonic() < deadline and not done.is_set()
        time.sleep(0.05)
    throttle.configure("always")  # the burners still spin; an hour-long recheck is pending
    pacer.join(timeout=30)
    assert done.is_set() and reasons == [WAITING_IDLE, ""]


# --- the indexer --------------------------------------------------------------------------


def test_idle_mode_holds_indexing_while_the_computer_is_busy_then_carries_on(
    lectern_home: Path, embedder: Any, tmp_path: Path, burners: Callable[[], None]
) -> None:
    folder = _folder(tmp_path)
    library = _idle_library(lectern_home, embedder)
    run: _Run | None = None
    try:
        _wait_busy(library.indexer.throttle)
        run = _Run(library, folder)
        run.wait_for(run.waiting)
        assert library.status()["indexing"]["waiting"] == WAITING_IDLE
        time.sleep(1.5)  # several rechecks, all busy
        assert run.thread.is_alive()
        assert all(r.files_done == 0 and r.passages_embedded == 0 for r in run.reports)
        assert library.files.documents() == []
        burners()
        carries_on(library.indexer.throttle, lambda: not run.thread.is_alive())
        assert run.result is not None and run.result.added == 5
        assert run.reports[-1].waiting_reason == ""
        assert not run.result.cancelled
        assert library.status()["indexing"]["waiting"] == ""
    finally:
        if run is not None:
            run.stop()
        library.close()


def test_cancel_while_waiting_for_idle_returns(
    lectern_home: Path, embedder: Any, tmp_path: Path, burners: Callable[[], None]
) -> None:
    folder = _folder(tmp_path)
    library = _idle_library(lectern_home, embedder)
    library.indexer.throttle.idle_recheck_s = 3600  # only the cancel can end this wait
    run: _Run | None = None
    try:
        _wait_busy(library.indexer.throttle)
        run = _Run(library, folder)
        run.wait_for(run.waiting)
        run.controls.stop()
        run.thread.join(timeout=30)
        assert not run.thread.is_alive()
        assert run.result is not None and run.result.cancelled and run.result.added == 0
    finally:
        if run is not None:
            run.stop()
        library.close()


def test_share_mode_rests_between_units_of_a_real_run(
    lectern_home: Path, embedder: Any, tmp_path: Path
) -> None:
    folder = _folder(tmp_path, files=8)
    library = Library(
        Settings(home=lectern_home, index_when="share", index_cpu_share=10), embedder=embedder
    )
    try:
        report = library.index([folder])
        assert report.added == 8
        assert library.indexer.throttle.held_s > 0
        # Switched live to "always": the next run does not rest.
        library.set_index_pace("always", 10)
        held = library.indexer.throttle.held_s
        (folder / "log-0.md").write_text("# Log 0\n\nThe valve was replaced again.\n")
        assert library.index([folder]).updated == 1
        assert library.indexer.throttle.held_s == held
    finally:
        library.close()


# --- settings and the CLI -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("key", "value"),
    [
        # (0 or 150 is out of range: replaced by the default with a warning, as every
        # numeric setting; tests/cli/test_hostile_env.py. So is an index_when that is not
        # one of its words, as every such setting: tests/test_settings_store.py.)
        ("index_cpu_share", 12.5),
        ("index_cpu_share", "50"),
        ("index_cpu_share", True),
    ],
)
def test_a_malformed_indexing_setting_is_a_clear_error(
    lectern_home: Path, key: str, value: object
) -> None:
    (lectern_home / "settings.json").write_text(json.dumps({key: value}))
    with pytest.raises(ConfigError) as info:
        load_settings()
    assert key in info.value.message and "settings.json" in info.value.message


def test_indexing_settings_round_trip(lectern_home: Path) -> None:
    Settings(home=lectern_home, index_when="share", index_cpu_share=25).save()
    loaded = load_settings()
    assert (loaded.index_when, loaded.index_cpu_share) == ("share", 25)


def test_status_and_the_progress_line_say_why_indexing_waits() -> None:
    from io import StringIO

    from core.cli.common import ProgressBar
    from core.cli.main import build_parser, indexing_lines

    assert indexing_lines({"when": "idle", "waiting": WAITING_IDLE}) == [
        f"Indexing: {BUSY_WAITING}"
    ]
    assert indexing_lines({"when": "share", "cpu_share": 25, "waiting": ""}) == [
        "Indexing: using at most 25 % of the CPU"
    ]
    stream = StringIO()
    bar = ProgressBar(stream)
    bar.enabled = True
    bar(IndexProgress(files_total=5, files_done=0, chunks_done=0, waiting_reason=WAITING_IDLE))
    assert BUSY_WAITING in stream.getvalue()
    parser, _ = build_parser()
    assert parser.parse_args(["index", "--cpu-share", "25"]).cpu_share == 25
    assert parser.parse_args(["index", "--when-idle"]).when_idle
    with pytest.raises(SystemExit):
        parser.parse_args(["index", "--cpu-share", "150"])
