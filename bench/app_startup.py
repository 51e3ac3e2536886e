"""Start-up and quit of the desktop app, run from source, timed from outside.

    .venv/bin/python bench/app_startup.py             # 3 runs
    .venv/bin/python bench/app_startup.py --runs 5

``python -m desktop``'s own ``main()`` is started ``--runs`` times per case on the
sample documents (resources/sample-docs), with no model server, under Qt's offscreen
platform (no display needed) or the ``QT_QPA_PLATFORM`` given. A probe in the child
process (this file with ``--child``) watches the real window and reports, in seconds from
the launch of the process:

- ``painted``: the window's first paint (before it the window is blank or black);
- ``library_shown``: the first paint that shows the library's folders in the library
  panel (``library_first_paint``: whether the first paint already did, that is no
  first-run "No folders yet" / "Welcome" screen flashed before the library);
- ``search_usable``: a search typed into the Search tab at the first paint, as a person
  who knows what they want does, returned its passages;
- ``ready``: the status bar said "Ready" (the embedding model loaded and warm);
- ``exit``: from the window's close (two seconds after Ready) to the process's end;
  the window is hidden at once, but the library is closed before the process ends
  (``exit_closing``: the part spent in closing the window, the rest is the
  interpreter's own end). Three cases: a reopen of the library a first run made; a
  first run (a fresh data folder, the sample folder given to index, quit once indexed);
  and a quit 0.3 s after the first paint, while the model still loads.

``--before DIR`` runs another source tree the same way, interleaved round by round with
this one (an earlier commit exported without touching the checkout:
``git archive COMMIT | tar -x -C DIR``). ``--note`` labels the figures. The last line of
output is one JSON object with the medians and every run.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

try:
    from bench.record import emit
except ModuleNotFoundError:  # run as a script: bench/ itself is first on sys.path
    from record import emit  # type: ignore[no-redef]

REPO = Path(__file__).resolve().parents[1]
SAMPLE_DOCS = REPO / "resources" / "sample-docs"
QUERY = "mileage"
CLOSE_AFTER_READY_S = 2.0
EARLY_QUIT_S = 0.3  # after the first paint, in the "early" case
CHILD_LIMIT_S = 300.0
MARKS = ("painted", "library_shown", "search_usable", "ready")


# --- the child: the real app with a probe ------------------------------------------------


def child(marks_path: str, launched: float, case: str, folders: list[str]) -> int:
    """Run ``desktop.__main__.main`` with an event filter that writes the marks.

    ``case``: "first" (``folders`` given to index; quit once indexed and Ready),
    "reopen" (search at the first paint; quit once it answered and Ready) or "early"
    (quit just after the first paint, with the model still loading)."""
    os.chdir(os.environ.get("LECTERN_BENCH_SOURCE", REPO))
    sys.path.insert(0, os.environ.get("LECTERN_BENCH_SOURCE", str(REPO)))
    from desktop.qt import (
        QApplication,
        QCoreApplication,
        QEvent,
        QGuiApplication,
        QObject,
        Qt,
        QTimer,
        QWidget,
    )

    marks: dict[str, Any] = {}

    def mark(name: str) -> None:
        marks.setdefault(name, time.time() - launched)

    def save() -> None:
        Path(marks_path).write_text(json.dumps(marks), encoding="utf-8")

    # The same application set-up as main(), made here so that the probe can watch the
    # window from its first event; main() takes the instance as it finds it.
    QCoreApplication.setOrganizationName("Lectern")
    QCoreApplication.setApplicationName("Lectern")
    QGuiApplication.setHighDpiScaleFactorRoundingPolicy(
        Qt.HighDpiScaleFactorRoundingPolicy.PassThrough
    )
    app = QApplication([sys.argv[0]])

    class Probe(QObject):
        window: Any = None
        poll: QTimer | None = None

        def eventFilter(self, obj: QObject, event: QEvent) -> bool:
            kind = event.type()
            if kind == QEvent.Type.Show and type(obj).__name__ == "MainWindow":
                self.window = obj
                obj.backend.startup.ready.connect(self.ready)
                obj.backend.indexing.finished.connect(self.indexed)
            elif (
                kind == QEvent.Type.Paint
                and self.window is not None
                and isinstance(obj, QWidget)
                and obj.window() is self.window
            ):
                self.painted()
            return False

        def painted(self) -> None:
            window = self.window
            first = "painted" not in marks
            mark("painted")
            snapshot = window.library.snapshot
            shown = bool(snapshot is not None and snapshot.folders)
            if first:
                marks["library_first_paint"] = shown
                marks["welcome_first_paint"] = (
                    window.conversation.welcome.title.text() == "Welcome to Lectern"
                )
                if case == "early":
                    # Quit while the model still loads: a launch by mistake.
                    QTimer.singleShot(int(EARLY_QUIT_S * 1000), self.close)
                elif not folders:
                    QTimer.singleShot(0, self.search)
            if shown:
                mark("library_shown")

        def search(self) -> None:
            conversation = self.window.conversation
            conversation.set_search_mode(True)
            conversation.input.setPlainText(QUERY)
            conversation.submit()
            self.poll = QTimer(self)
            self.poll.setInterval(10)
            self.poll.timeout.connect(self.check_search)
            self.poll.start()

        def check_search(self) -> None:
            results = self.window.conversation.search_results
            if results is not None and results.hits:
                mark("search_usable")
                marks["search_hits"] = len(results.hits)
                assert self.poll is not None
                self.poll.stop()
                self.maybe_close()

        def ready(self) -> None:
            mark("ready")
            self.maybe_close()

        def indexed(self, _report: object) -> None:
            mark("indexed")
            self.maybe_close()

        def maybe_close(self) -> None:
            if (
                "ready" in marks
                and ("search_usable" in marks or folders)
                and ("indexed" in marks or not folders)
            ):
                QTimer.singleShot(int(CLOSE_AFTER_READY_S * 1000), self.close)

        def close(self) -> None:
            if "close" in marks:
                return
            # The next run opens as this one did (the mode is saved at close).
            self.window.conversation.set_search_mode(False)
            mark("close")
            save()
            self.window.close()
            # What closing the window itself took (stopping work, closing the library);
            # the rest of "exit" is the interpreter's own ending.
            mark("closed")
            save()

    probe = Probe()
    app.installEventFilter(probe)

    def give_up() -> None:
        marks["timed_out"] = True
        probe.close() if probe.window is not None else app.quit()

    QTimer.singleShot(int(CHILD_LIMIT_S * 1000), give_up)
    from desktop.__main__ import main

    code = main(folders)
    save()
    return code


# --- the parent: library, runs, figures --------------------------------------------------


def run_once(
    env: dict[str, str], tmp: Path, kind: str, index: int, folders: list[str]
) -> dict[str, Any]:
    """One app start: ``kind`` is what the probe does (see ``child``)."""
    marks_path = tmp / f"marks-{env['LECTERN_HOME'].rsplit('/', 1)[-1]}-{kind}-{index}.json"
    launched = time.time()
    proc = subprocess.Popen(
        [sys.executable, __file__, "--child", str(marks_path), repr(launched), kind, *folders],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    _, status, usage = os.wait4(proc.pid, 0)
    ended = time.time()
    err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
    if proc.stderr:
        proc.stderr.close()
    code = os.waitstatus_to_exitcode(status)
    if code != 0 or not marks_path.is_file():
        raise SystemExit(f"the app failed ({code}):\n{err[-3000:]}")
    marks = json.loads(marks_path.read_text(encoding="utf-8"))
    if marks.get("timed_out"):
        raise SystemExit(f"the app did not get ready in {CHILD_LIMIT_S:.0f} s: {marks}")
    run: dict[str, Any] = {key: round(marks[key], 3) for key in MARKS if key in marks}
    run["exit"] = round(ended - launched - marks["close"], 3)
    run["exit_closing"] = round(marks.get("closed", marks["close"]) - marks["close"], 3)
    for key in ("library_first_paint", "welcome_first_paint", "search_hits"):
        run[key] = marks.get(key)
    run["cpu_s"] = round(usage.ru_utime + usage.ru_stime, 2)
    run["peak_mb"] = round(usage.ru_maxrss / 1024, 1)
    return run


def medians(runs: list[dict[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key in (*MARKS, "exit", "exit_closing", "cpu_s", "peak_mb"):
        values = [r[key] for r in runs if r.get(key) is not None]
        result[key] = round(statistics.median(values), 3) if values else None
    return result


def report(label: str, cases: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    result: dict[str, Any] = {case: medians(runs) for case, runs in cases.items()}
    reopen = cases["reopen"]
    result["reopen"]["library_first_paint"] = all(r["library_first_paint"] for r in reopen)
    result["reopen"]["welcome_flashed"] = any(r["welcome_first_paint"] for r in reopen)
    print(f"{label}: {'mark (median s)':16} {'reopen':>8} {'first run':>9} {'quit early':>10}")
    for key in (*MARKS, "exit"):
        row = [result[case][key] for case in cases]
        print(
            f"{'':{len(label) + 2}}{key:16} "
            + " ".join(f"{v if v is not None else float('nan'):9.2f}" for v in row)
        )
    result["each"] = cases
    return result


def main() -> int:
    if sys.argv[1:2] == ["--child"]:
        return child(sys.argv[2], float(sys.argv[3]), sys.argv[4], sys.argv[5:])
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="app starts per case (default 3)")
    parser.add_argument("--note", default="", help="a label kept with the figures")
    parser.add_argument(
        "--before",
        type=Path,
        help="another source tree to run the same way, interleaved (an export of an "
        "earlier commit: git archive COMMIT | tar -x -C DIR)",
    )
    args = parser.parse_args()
    sources = {"after": REPO} if args.before is None else {"before": args.before, "after": REPO}
    cases = ("reopen", "first_run", "quit_while_loading")
    runs: dict[str, dict[str, list[dict[str, Any]]]] = {
        label: {case: [] for case in cases} for label in sources
    }
    with tempfile.TemporaryDirectory(prefix="lectern-app-start-") as name:
        tmp = Path(name)
        docs = tmp / "docs"
        shutil.copytree(SAMPLE_DOCS, docs)

        def environment(home: str, source: Path) -> dict[str, str]:
            env = dict(
                os.environ,
                LECTERN_HOME=str(tmp / home),
                XDG_CONFIG_HOME=str(tmp / home / "config"),
                HF_HUB_OFFLINE="1",
                TRANSFORMERS_OFFLINE="1",
                LECTERN_BENCH_SOURCE=str(source),
            )
            env.setdefault("QT_QPA_PLATFORM", "offscreen")
            env.pop("OLLAMA_HOST", None)  # no model server: the default address, unused
            return env

        # Round by round, the sources interleaved, so a busy spell falls on both alike.
        for index in range(args.runs):
            for label, source in sources.items():
                # A first run: a fresh data folder, the folder given to index, quit once
                # done. The first one's data folder is then the one reopened, as a
                # person's second day opens what their first made.
                env = environment(f"{label}-first-{index}", source)
                done = run_once(env, tmp, "first", index, [str(docs)])
                runs[label]["first_run"].append(done)
                reopen_env = environment(f"{label}-first-0", source)
                for case, kind in (("reopen", "reopen"), ("quit_while_loading", "early")):
                    runs[label][case].append(run_once(reopen_env, tmp, kind, index, []))
                print(
                    f"round {index + 1} {label}: "
                    + json.dumps({case: runs[label][case][-1] for case in cases}),
                    file=sys.stderr,
                    flush=True,
                )
    result: dict[str, Any] = {"note": args.note, "runs": args.runs}
    for label in sources:
        result[label] = report(label, runs[label])
    emit("app_startup", result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
