"""UI responsiveness benchmark: the longest stall of the desktop app's UI thread.

A 10 ms QTimer ticks on the UI thread for the whole run; every tick records how late it
came. A late tick is time the window could not repaint or react to input. The run drives
the real app (real model, real DuckDB, real files; the fake Ollama server streams
answers over real HTTP): start-up, dropping a large folder (SciFact abstracts as text
files plus the real-world PDF set, hostile files included), asking questions while that
folder is being indexed, opening cited passages (PDF pages rendered) and searching.

    .venv/bin/python bench/ui_stall.py                  # 600 text files + 36 PDFs
    .venv/bin/python bench/ui_stall.py --files 150      # quicker

Figures are printed per phase ("window": building the window before it is first shown;
"startup": the library opening and the model loading behind the visible window; then the
indexing phases), with, for each stall over 50 ms, how long the UI thread ran, waited for
a CPU, and how much CPU the host took from the virtual machine meanwhile (Linux). The
last line is one JSON object. The target is a longest stall under 100 ms while indexing
and answering.
"""

from __future__ import annotations

import time

STARTED = time.perf_counter()

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import shutil  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
from pathlib import Path  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "data"
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from PySide6.QtCore import QElapsedTimer, QEventLoop, QSettings, QTimer  # noqa: E402
from PySide6.QtWidgets import QApplication  # noqa: E402

from bench.record import emit  # noqa: E402

TICK_MS = 10


def _cpu_counters() -> tuple[int, int, int] | None:
    """Linux: the UI thread's CPU time and time spent runnable but waiting for a CPU (ns),
    and the CPU time the hypervisor took from this virtual machine (ms, all CPUs)."""
    try:
        with open("/proc/thread-self/schedstat") as handle:
            ran, waited, _ = handle.read().split()
        with open("/proc/stat") as handle:
            steal = int(handle.readline().split()[8])
    except (OSError, ValueError, IndexError):
        return None
    return int(ran), int(waited), steal * 1000 // os.sysconf("SC_CLK_TCK")


class StallMeter:
    """Records how late each 10 ms tick of a UI-thread timer arrives, per phase.

    For each stall over 50 ms it also records, where Linux tells, what the UI thread did
    meanwhile: ran (its own work), waited for a CPU (other threads or processes had them),
    or neither (blocked: the GIL, a lock, or the whole virtual machine paused, which the
    host's "steal" time shows). The figures themselves are not adjusted."""

    def __init__(self) -> None:
        self.clock = QElapsedTimer()
        self.clock.start()
        self.last = 0
        # Building the window, before it is first shown; then "startup" while the
        # library opens and the model loads behind the visible window.
        self.phase = "window"
        self.gaps: dict[str, list[float]] = {}
        self.worst: dict[str, tuple[float, float]] = {}  # phase -> (stall ms, at s)
        self.counters = _cpu_counters()
        # (stall ms, phase, UI thread ran ms, waited for a CPU ms, VM steal ms)
        self.long: list[tuple[float, str, float, float, float]] = []
        self.timer = QTimer()
        self.timer.setInterval(TICK_MS)
        self.timer.timeout.connect(self.tick)

    def start(self) -> None:
        self.last = self.clock.nsecsElapsed()
        self.timer.start()

    def set_phase(self, name: str) -> None:
        self.phase = name

    def pause(self) -> None:
        self.timer.stop()

    def resume(self) -> None:
        """Measure again from now: the gap while paused was the benchmark's own work."""
        self.last = self.clock.nsecsElapsed()
        self.counters = _cpu_counters()
        self.timer.start()

    def tick(self) -> None:
        now = self.clock.nsecsElapsed()
        stall = max(0.0, (now - self.last) / 1e6 - TICK_MS)
        self.last = now
        self.gaps.setdefault(self.phase, []).append(stall)
        if stall > self.worst.get(self.phase, (-1.0, 0.0))[0]:
            self.worst[self.phase] = (stall, now / 1e9)
        before, self.counters = self.counters, _cpu_counters()
        if stall > 50 and before is not None and self.counters is not None:
            ran, waited, steal = (b - a for a, b in zip(before, self.counters, strict=True))
            self.long.append((stall, self.phase, ran / 1e6, waited / 1e6, float(steal)))

    def summary(self) -> dict[str, dict[str, float]]:
        out: dict[str, dict[str, float]] = {}
        for phase, gaps in self.gaps.items():
            ordered = sorted(gaps)
            out[phase] = {
                "ticks": len(gaps),
                "max_ms": round(ordered[-1], 1),
                "p99_ms": round(ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))], 1),
                "median_ms": round(statistics.median(ordered), 2),
                "over_50ms": sum(1 for g in gaps if g > 50),
                "over_100ms": sum(1 for g in gaps if g > 100),
            }
        return out


def _idle(stack: str) -> bool:
    """Threads parked waiting for work cannot be what holds the UI up."""
    return any(
        marker in stack
        for marker in (
            "wait(",
            "waiter.acquire",
            ".get(timeout",
            "select(",
            "sleep(",
            "_wait_for_tstate_lock",
            "serve_forever",
            ".recv(",
            "readinto(",
            "accept(",
        )
    )


class StallTracer:
    """With --trace: samples the UI thread's Python stack every 10 ms while a tick is
    overdue, and prints the samples of every stall over the threshold, to show what the
    UI thread was doing (or, inside the event loop, waiting for) meanwhile."""

    def __init__(self, meter: StallMeter, threshold_ms: float = 80.0) -> None:
        import threading

        self.meter = meter
        self.threshold = threshold_ms
        self.main = threading.main_thread().ident
        self.stalls: list[tuple[float, str, list[str]]] = []
        self.running = True
        self.thread = threading.Thread(target=self.run, daemon=True, name="stall-tracer")
        self.thread.start()

    def run(self) -> None:
        import threading
        import traceback

        current: list[str] = []
        current_tick = -1
        worst = 0.0
        while self.running:
            time.sleep(0.01)
            last = self.meter.last
            if last != current_tick:
                if worst > self.threshold:
                    self.stalls.append((worst, self.meter.phase, current))
                current, current_tick, worst = [], last, 0.0
            late_ms = (self.meter.clock.nsecsElapsed() - last) / 1e6 - TICK_MS
            if late_ms > 30:
                worst = late_ms
                names = {t.ident: t.name for t in threading.enumerate()}
                for ident, frame in sys._current_frames().items():
                    if ident == threading.get_ident():
                        continue
                    depth = 4 if ident == self.main else 2
                    where = "".join(traceback.format_stack(frame)[-depth:])
                    if _idle(where) and ident != self.main:
                        continue
                    stack = f"[{names.get(ident, ident)}]\n{where}"
                    if stack not in current:
                        current.append(stack)

    def report(self) -> None:
        self.running = False
        for late, phase, stacks in self.stalls:
            print(f"--- UI thread stalled {late:.0f}+ ms ({phase}); its stack meanwhile:")
            for stack in stacks:
                print(stack)


class GcMeter:
    """Garbage-collection pauses: a full collection stops every Python thread, the UI's too."""

    def __init__(self, meter: StallMeter) -> None:
        import gc

        self.meter = meter
        self.started: float | None = None
        self.pauses: list[tuple[float, int, str]] = []  # (ms, generation, phase)
        gc.callbacks.append(self.callback)

    def callback(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self.started = time.perf_counter()
        elif self.started is not None:
            ms = (time.perf_counter() - self.started) * 1000
            self.pauses.append((ms, info["generation"], self.meter.phase))
            self.started = None

    def summary(self) -> dict[str, dict[str, float]]:
        out: dict[str, dict[str, float]] = {}
        for phase in dict.fromkeys(p for _, _, p in self.pauses):
            pauses = [(ms, gen) for ms, gen, p in self.pauses if p == phase]
            out[phase] = {
                "collections": len(pauses),
                "max_ms": round(max(ms for ms, _ in pauses), 1),
                "full_collections": sum(1 for _, gen in pauses if gen == 2),
            }
        return out


def build_folder(folder: Path, files: int) -> int:
    """SciFact abstracts as text files, plus every PDF of the robustness set."""
    folder.mkdir(parents=True)
    written = 0
    with open(SHARED / "scifact" / "corpus.jsonl", encoding="utf-8") as handle:
        for line in handle:
            if written >= files:
                break
            doc = json.loads(line)
            (folder / f"abstract-{doc['_id']}.txt").write_text(
                f"{doc['title']}\n\n{doc['text']}\n", encoding="utf-8"
            )
            written += 1
    pdfs = folder / "pdfs"
    pdfs.mkdir()
    for pdf in sorted((SHARED / "pdfs").glob("*.pdf")):
        shutil.copy(pdf, pdfs / pdf.name)
        written += 1
    return written


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", type=int, default=600, help="text files besides the PDFs")
    parser.add_argument("--questions", type=int, default=3)
    parser.add_argument("--max-index-s", type=float, default=900.0)
    parser.add_argument("--trace", action="store_true", help="print the UI stack at stalls")
    args = parser.parse_args()

    from core.config import Settings
    from desktop.backend import Backend
    from desktop.main_window import MainWindow
    from desktop.theme import Theme
    from tests.fake_ollama import FakeOllama

    app = QApplication.instance() or QApplication([])
    work = Path(tempfile.mkdtemp(prefix="lectern-stall-"))
    home = work / "home"
    home.mkdir()
    os.environ["LECTERN_HOME"] = str(home)
    fake = FakeOllama().start()
    fake.token_delay_s = 0.02  # about 50 tokens/s, a fast local model
    fake.answer = lambda messages: (  # a long answer: many re-renders while streaming
        "According to the sources, the findings are consistent across studies [1]. " * 12
        + "The second source reports a related measurement [2]."
    )

    meter = StallMeter()
    gc_meter = GcMeter(meter)
    meter.start()
    tracer = StallTracer(meter) if args.trace else None
    theme = Theme("light")
    theme.apply()
    backend = Backend(Settings(home=home, llm_url=fake.url))
    window = MainWindow(backend, theme, QSettings(str(work / "ui.ini"), QSettings.Format.IniFormat))
    window.show()
    app.processEvents()  # the overdue tick lands here, in the "window" phase
    meter.set_phase("startup")
    visible_s = time.perf_counter() - STARTED
    backend.start()

    def wait(condition, timeout_s: float) -> bool:  # type: ignore[no-untyped-def]
        """Run the event loop (as the app would) until ``condition`` holds."""
        deadline = time.monotonic() + timeout_s
        loop = QEventLoop()
        poll = QTimer()
        poll.timeout.connect(
            lambda: loop.quit() if condition() or time.monotonic() > deadline else None
        )
        poll.start(20)
        if not condition():
            loop.exec()
        poll.stop()
        return bool(condition())

    wait(lambda: backend.is_ready, 300)
    ready_s = time.perf_counter() - STARTED
    print(f"window visible after {visible_s:.2f} s; ready (model loaded) after {ready_s:.2f} s")

    folder = work / "library"
    # Writing the test folder is the benchmark's own work on this thread, not the app's:
    # its time must not count as a stall of whatever phase comes next.
    meter.pause()
    total_files = build_folder(folder, args.files)
    print(f"dropping a folder of {total_files} files")
    meter.set_phase("indexing")
    meter.resume()
    index_started = time.perf_counter()
    window.handle_drop([str(folder)])
    wait(lambda: backend.indexing.active, 60)

    answered = 0
    panel = window.conversation
    questions = [
        "How does diffusion tensor imaging measure white matter development?",
        "What did the studies find about vitamin D and fractures?",
        "Which methods were used to measure gene expression?",
        "What reasons does the ReAct paper give for interleaving reasoning and acting?",
    ]
    while answered < args.questions and backend.indexing.active:
        meter.set_phase("indexing+answering")
        panel.input.setPlainText(questions[answered % len(questions)])
        panel.submit()
        wait(lambda: not panel.busy, 120)
        turn = panel.last_turn()
        if turn is not None and turn.turn.citations:
            meter.set_phase("indexing+evidence")
            turn.open_citation(turn.turn.citations[0].n)
            wait(lambda: window.evidence.mode not in ("loading",), 30)
        meter.set_phase("indexing+search")
        panel.set_search_mode(True)
        panel.input.setPlainText("protein expression in tumour cells")
        panel.submit()
        wait(lambda: not panel.busy, 60)
        panel.set_search_mode(False)
        answered += 1
        meter.set_phase("indexing")
        wait(lambda: False, 2.0)

    finished = wait(lambda: not backend.indexing.active, args.max_index_s)
    index_s = time.perf_counter() - index_started
    if not finished:
        backend.indexing.cancel()
        wait(lambda: not backend.indexing.active, 60)
    meter.set_phase("idle")
    wait(lambda: False, 1.0)
    snap = backend.view.snapshot
    counts = snap.folders[0] if snap and snap.folders else None

    meter.timer.stop()
    if tracer is not None:
        tracer.report()
    summary = meter.summary()
    busy = [p for p in summary if p.startswith("indexing")]
    worst_busy = max((summary[p]["max_ms"] for p in busy), default=0.0)
    print()
    print(
        f"{'phase':22} {'ticks':>7} {'max ms':>8} {'p99 ms':>8} {'median':>8} {'>50ms':>6} {'>100ms':>7}"
    )
    for phase, s in summary.items():
        print(
            f"{phase:22} {s['ticks']:>7} {s['max_ms']:>8} {s['p99_ms']:>8} {s['median_ms']:>8} "
            f"{s['over_50ms']:>6} {s['over_100ms']:>7}"
        )
    if meter.long:
        print()
        print("stalls over 50 ms: what the UI thread did meanwhile (ms)")
        print(f"{'stall':>7} {'phase':22} {'ran':>6} {'CPU wait':>9} {'VM steal':>9}")
        for stall, phase, ran, waited, steal in sorted(meter.long, reverse=True)[:12]:
            print(f"{stall:>7.1f} {phase:22} {ran:>6.0f} {waited:>9.0f} {steal:>9.0f}")
    print()
    print(f"garbage collection: {gc_meter.summary()}")
    print(
        f"longest UI stall while indexing and answering: {worst_busy:.1f} ms "
        f"(target < 100 ms); indexed {counts.indexed if counts else 0} files, "
        f"{counts.failed if counts else 0} failed, {counts.skipped if counts else 0} skipped "
        f"in {index_s:.0f} s{'' if finished else ' (stopped at the time limit)'}; "
        f"{answered} questions answered meanwhile"
    )
    result = {
        "window_visible_s": round(visible_s, 3),
        "ready_s": round(ready_s, 2),
        "files": total_files,
        "indexed": counts.indexed if counts else 0,
        "failed": counts.failed if counts else 0,
        "skipped": counts.skipped if counts else 0,
        "index_s": round(index_s, 1),
        "index_finished": finished,
        "questions": answered,
        "max_stall_busy_ms": worst_busy,
        "max_stall_window_ms": summary.get("window", {}).get("max_ms"),
        "max_stall_startup_ms": summary.get("startup", {}).get("max_ms"),
        "phases": summary,
        "gc": gc_meter.summary(),
        "long_stalls": [
            {
                "ms": round(st, 1),
                "phase": ph,
                "ran_ms": round(r),
                "cpu_wait_ms": round(w),
                "steal_ms": sl,
            }
            for st, ph, r, w, sl in sorted(meter.long, reverse=True)
        ],
    }
    window.close()
    fake.stop()
    shutil.rmtree(work, ignore_errors=True)
    emit("ui_stall", result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
