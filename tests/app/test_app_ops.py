"""The ops the desktop app runs over its open library (core/app/ops.py, issue 48): several
reads in one trip, the library as the window summarises it, and an index job whose
progress a window can follow without being flooded."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from core.app import ops
from core.app.coordinator import FOLDERS_ADDED, IndexJob
from core.app.ops import Changes, InPlace, Op
from core.records import IndexReport


class Reported(InPlace):
    def __init__(self) -> None:
        super().__init__()
        self.values: list[object] = []

    def report(self, value: object) -> None:
        self.values.append(value)


def test_a_composed_op_runs_its_parts_on_one_library_and_says_its_own_changes() -> None:
    library: Any = object()
    seen: list[object] = []

    def part(n: int) -> Op[int]:
        return Op(f"part {n}", lambda given, ctx: seen.append(given) or n)

    whole = ops.compose("both", lambda run: run(part(1)) + run(part(2)), Changes(folders=True))
    done = whole.run(library)
    assert done.value == 3 and seen == [library, library]
    assert done.changes == Changes(folders=True) and whole.name == "both"


def test_the_overview_names_each_folders_problems_and_asks_advice_only_when_told(
    library: Any, sample_folder: Path
) -> None:
    library.index([sample_folder])
    (sample_folder / "broken.pdf").write_bytes(b"%PDF-1.4 not really")
    library.index([sample_folder])
    overview = ops.library_overview(advise=False).run(library).value
    (folder,) = overview.folders
    assert [Path(d.path).name for d in overview.problems[folder.path]] == ["broken.pdf"]
    assert overview.embedded == folder.chunks and overview.switching == ""
    assert overview.advice is None  # not asked for


def test_an_index_job_reports_at_a_human_rate_but_never_drops_what_must_be_seen(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    report = IndexReport()

    def run_job(library: object, job: IndexJob, progress: Any) -> IndexReport:
        progress(FOLDERS_ADDED, True)
        for n in range(50):  # a flood within one interval
            progress(n, False)
        progress("last", True)
        return report

    monkeypatch.setattr("core.app.coordinator.run_job", run_job)
    ctx = Reported()
    job = ops.index_job(IndexJob(paths=["/docs"]), interval_s=60.0)
    assert job.work(object(), ctx) is report  # type: ignore[arg-type]
    assert ctx.values == [FOLDERS_ADDED, 0, "last"]
    assert job.changes == Changes(folders=True, documents=True)
