"""The index work shared by the app and ``lectern watch`` (core/app/coordinator.py):
one job at a time, pause, cancel and resume, and a full disk that holds the queue and the
watcher until there is room. Real Library, real model, real folder watcher; the host is
a thread, as the app's engine thread is."""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from core.app.coordinator import IndexingCoordinator, IndexJob, run_job
from core.app.watch import FolderWatcher
from core.errors import DiskFullError
from core.records import IndexProgress, IndexReport
from tests.helpers import write_files

NOTES = {f"note{i}.md": f"# Note {i}\n\nThe boiler pressure log for week {i}.\n" for i in range(6)}


class ThreadHost:
    """Runs each job on a thread of its own and hands the outcome back to the test's
    thread, as the app's engine thread hands it to the UI thread."""

    def __init__(self, library: Any) -> None:
        self.library = library
        self.outcomes: queue.Queue[tuple[IndexJob, object]] = queue.Queue()
        self.started: list[IndexJob] = []
        self.paused: list[bool] = []
        self.cancelled: list[bool] = []
        self.hold = threading.Event()
        self.hold.set()
        self.work = IndexingCoordinator(
            self.start,
            on_paused=self.paused.append,
            on_cancelled=self.cancelled.append,
            library=lambda: self.library,
        )

    def start(self, job: IndexJob) -> None:
        self.started.append(job)

        def run() -> None:
            self.hold.wait(60)
            try:

                def report(value: object, force: bool) -> None:
                    if isinstance(value, IndexProgress):
                        self.work.last_progress = value

                outcome: object = run_job(self.library, job, report)
            except BaseException as exc:
                outcome = exc
            self.outcomes.put((job, outcome))

        threading.Thread(target=run, daemon=True).start()

    def settle(self) -> object:
        """Wait for the running job and tell the coordinator, as the host's thread does."""
        _job, outcome = self.outcomes.get(timeout=120)
        if isinstance(outcome, IndexReport):
            self.work.job_done(outcome)
            self.work.next_job()
        else:
            assert isinstance(outcome, BaseException)
            if not self.work.job_failed(outcome):
                self.work.next_job()
        return outcome


@pytest.fixture()
def host(library: Any) -> Iterator[ThreadHost]:
    yield ThreadHost(library)


def test_jobs_run_one_at_a_time_in_order(host: ThreadHost, tmp_path: Path, library: Any) -> None:
    first = write_files(tmp_path / "first", dict(list(NOTES.items())[:3]))
    second = write_files(tmp_path / "second", dict(list(NOTES.items())[3:]))
    host.hold.clear()
    host.work.enqueue(IndexJob(paths=[str(first)]))
    host.work.enqueue(IndexJob(paths=[str(second)]))
    assert len(host.started) == 1 and host.work.indexing
    host.hold.set()
    report = host.settle()
    assert isinstance(report, IndexReport) and report.added == 3
    assert len(host.started) == 2  # the second began only when the first had ended
    report = host.settle()
    assert isinstance(report, IndexReport) and report.added == 3
    assert not host.work.indexing
    assert {Path(p).name for p in library.files.folders()} == {"first", "second"}


def test_a_queued_full_pass_is_not_queued_twice(host: ThreadHost, tmp_path: Path) -> None:
    folder = write_files(tmp_path / "docs", NOTES)
    host.hold.clear()
    host.work.enqueue(IndexJob(paths=[str(folder)]))
    host.work.enqueue(IndexJob(paths=None))
    host.work.enqueue(IndexJob(paths=None))
    host.hold.set()
    host.settle()
    host.settle()
    assert [job.is_full_rescan for job in host.started] == [False, True]
    assert host.outcomes.empty()


def test_pause_holds_the_job_and_the_model_switch_and_new_work_lifts_it(
    host: ThreadHost, tmp_path: Path, library: Any
) -> None:
    folder = write_files(tmp_path / "docs", NOTES)
    host.hold.clear()
    host.work.enqueue(IndexJob(paths=[str(folder)]))
    host.work.pause()
    job = host.work.current_job
    assert job is not None and job.paused and job.controls is not None
    assert host.work.paused and library.models.paused and host.paused == [True]
    host.work.resume()
    assert not host.work.paused and not library.models.paused and not job.paused
    host.work.pause()
    host.hold.set()
    host.work.resume()
    host.settle()
    # Paused again with nothing running: adding work is a request to index it now.
    host.work.pause()
    host.work.enqueue(IndexJob(paths=None))
    assert not host.work.paused and host.paused[-1] is False
    host.settle()


def test_cancel_stays_until_resumed_and_resuming_runs_one_full_pass(
    host: ThreadHost, tmp_path: Path
) -> None:
    folder = write_files(tmp_path / "docs", NOTES)
    host.hold.clear()
    host.work.enqueue(IndexJob(paths=[str(folder)]))
    host.work.enqueue(IndexJob(paths=None, files=[str(folder / "note0.md")]))
    host.work.last_progress = IndexProgress(files_total=6, files_done=2, chunks_done=2)
    host.work.cancel()
    assert host.work.cancelled and host.cancelled == [True]
    assert host.work.not_indexed == 4  # from the last progress shown
    host.hold.set()
    report = host.settle()
    assert isinstance(report, IndexReport) and report.cancelled
    # The queued job was dropped, and nothing starts while cancelled.
    host.work.next_job()
    assert len(host.started) == 1 and not host.work.indexing
    host.work.resume()
    assert not host.work.cancelled and host.cancelled[-1] is False
    assert host.started[-1].is_full_rescan
    report = host.settle()
    assert isinstance(report, IndexReport) and report.added + report.updated >= 1


def test_a_full_disk_holds_the_queue_and_the_watcher_until_there_is_room(
    host: ThreadHost, tmp_path: Path, library: Any
) -> None:
    folder = write_files(tmp_path / "docs", NOTES)
    library.add_folder(folder)
    watcher = FolderWatcher(library, reconcile_interval_s=None)
    host.work.watcher = watcher
    full = DiskFullError("The disk is full.", folder=str(tmp_path), needed_bytes=1 << 62)
    host.work.enqueue(IndexJob(paths=None, files=[str(folder / "note0.md")]))
    host.work.enqueue(IndexJob(paths=None))
    assert host.work.job_failed(full)  # what the running job raised
    assert host.work.disk_full is full and watcher.paused
    assert not host.work.room_again()  # an exabyte is not free
    host.outcomes.get(timeout=120)  # the job that was running ends on its own
    assert len(host.started) == 1  # the queued full pass was dropped, not run into the wall
    # Room again (what the failed write needed is free now): the watcher goes on, and
    # the host catches up with one full pass.
    host.work.disk_full = DiskFullError("The disk is full.", folder=str(tmp_path), needed_bytes=1)
    assert host.work.room_again()
    assert host.work.disk_full is None and not watcher.paused
    assert not host.work.failed(RuntimeError("not a disk"))
