"""Indexing that stays out of the way (core/indexing/throttle.py): the CPU share indexing achieves
against the share requested, and how much it slows another program, all in one run.

A competing program (a separate process spinning on one core, counting work units)
runs throughout. The same small real folder (Markdown built from SciFact sentences) is
indexed into a fresh library once per mode:

* always: today's behaviour, the baseline;
* always, with the indexing thread at nice +10 (core/indexing/threads.py, as the desktop app and
  the watcher run it), to see what the priority alone buys;
* share 50, 25 and 10 (% of all cores together; the model embeds on the threads it
  measured fastest at start-up, one here, so "always" itself stays near one core);
* idle, with the competitor running for a fixed time and then stopping: indexing should
  wait meanwhile and carry on once it stops.

Achieved share = Lectern's CPU-seconds (every thread, and the parser process) over wall
time times the cores. The competitor's slowdown = its work rate alone (measured in the
same run, before and after) over its rate during the indexing run.

    .venv/bin/python bench/throttle.py                 # about 3 minutes on 2 busy cores
    .venv/bin/python bench/throttle.py --files 6        # quicker

The last line of output is one JSON object with every figure.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import mmap
import os
import random
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.record import emit
from bench.synthetic_library import real_sentences
from core.config import Settings
from core.embedding.models import load_embedder
from core.indexing.threads import lower_thread_priority
from core.indexing.throttle import Throttle, cpu_cores
from core.library import Library

SECTIONS_PER_FILE = 20


# The other program: fixed units of pure-Python work, its count kept in a shared file.
COMPETE = """
import mmap, struct, sys
with open(sys.argv[1], "r+b") as f:
    counter = mmap.mmap(f.fileno(), 8)
    n = 0
    while True:
        sum(i * i for i in range(20_000))
        n += 1
        struct.pack_into("q", counter, 0, n)
"""


class Competitor:
    """Another program on one core. Not our child: a child's CPU time, once it is waited
    for, joins ours (psutil's children times), which another program's never would."""

    def __init__(self, folder: Path) -> None:
        path = folder / "competitor.count"
        path.write_bytes(bytes(8))
        self._file = open(path, "r+b")  # noqa: SIM115 - kept open for the mapping
        self._counter = mmap.mmap(self._file.fileno(), 8)
        shell = subprocess.run(
            ["sh", "-c", f'"{sys.executable}" -c \'{COMPETE}\' "{path}" >/dev/null 2>&1 & echo $!'],
            capture_output=True,
            text=True,
            check=True,
        )
        self.pid = int(shell.stdout.strip())
        while self.units() == 0:
            time.sleep(0.05)

    def units(self) -> int:
        return int(struct.unpack_from("q", self._counter, 0)[0])

    def rate_alone(self, seconds: float = 3.0) -> float:
        start, at = self.units(), time.monotonic()
        time.sleep(seconds)
        return (self.units() - start) / (time.monotonic() - at)

    def stop(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signal.SIGKILL)


def write_folder(folder: Path, files: int, sentences: list[str]) -> None:
    rng = random.Random(11)
    folder.mkdir(parents=True)
    for f in range(files):
        lines = [f"# Notes {f}\n"]
        for s in range(SECTIONS_PER_FILE):
            lines.append(f"## Finding {f}.{s}\n\n{' '.join(rng.sample(sentences, 4))}\n")
        (folder / f"notes-{f:03d}.md").write_text("\n".join(lines), encoding="utf-8")


def niced_threads() -> tuple[int, int]:
    """(threads of this process above nice 0, all threads), from /proc (Linux)."""
    try:
        tasks = os.listdir("/proc/self/task")
    except OSError:
        return 0, 0
    niced = 0
    for tid in tasks:
        try:
            fields = Path(f"/proc/self/task/{tid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        niced += int(fields[16]) > 0  # field 19 of stat, counted after "comm)"
    return niced, len(tasks)


def index_once(
    root: Path,
    folder: Path,
    embedder: Any,
    when: str,
    share: int,
    *,
    nice: bool = False,
    competitor: Competitor,
    idle_competitor_s: float = 0.0,
) -> dict[str, Any]:
    home = Path(tempfile.mkdtemp(dir=root))
    library = Library(
        Settings(home=home, index_when=when, index_cpu_share=share), embedder=embedder
    )
    throttle: Throttle = library.indexer.throttle
    result: dict[str, Any] = {}
    first_file_at: list[float] = []

    def progress(p: Any) -> None:
        if p.files_done and not first_file_at:
            first_file_at.append(time.monotonic())

    def run() -> None:
        if nice:
            lower_thread_priority()
        result["report"] = library.index([folder], progress=progress)
        result["niced_threads"] = niced_threads()

    try:
        units0, cpu0, wall0 = competitor.units(), throttle.own_cpu_s(), time.monotonic()
        worker = threading.Thread(target=run, name="bench-index")
        worker.start()
        competitor_stopped_at = None
        if idle_competitor_s:
            worker.join(idle_competitor_s)
            competitor_units = competitor.units() - units0
            competitor_stopped_at = time.monotonic()
            competitor.stop()
            # Other work on a shared machine can keep it busy after ours stopped.
            worker.join(60)
            if worker.is_alive():
                result["never_idle"] = True
                throttle.configure("always")
        worker.join()
        wall = time.monotonic() - wall0
        cpu = throttle.own_cpu_s() - cpu0
        report = result["report"]
        figures: dict[str, Any] = {
            "mode": when if when != "share" else f"share {share}",
            "nice": nice,
            "wall_s": round(wall, 2),
            "cpu_s": round(cpu, 2),
            "achieved_share": round(cpu / (wall * cpu_cores()), 3),
            "requested_share": share / 100 if when == "share" else None,
            "files": report.added,
            "passages": report.chunks_embedded,
            "held_s": round(throttle.held_s, 2),
        }
        if idle_competitor_s:
            during = competitor_units / (competitor_stopped_at - wall0)
            figures["competitor_rate"] = during
            figures["first_file_after_s"] = (
                round(first_file_at[0] - wall0, 2) if first_file_at else None
            )
            figures["competitor_ran_s"] = round(competitor_stopped_at - wall0, 2)
            figures["never_idle_after_competitor"] = bool(result.get("never_idle"))
        else:
            figures["competitor_rate"] = (competitor.units() - units0) / wall
        if nice:
            figures["niced_threads"], figures["threads"] = result["niced_threads"]
        return figures
    finally:
        library.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", type=int, default=12)
    parser.add_argument("--idle-competitor-s", type=float, default=8.0)
    parser.add_argument(
        "--shares",
        type=lambda text: [int(v) for v in text.split(",")],
        default=[50, 25, 10],
        help="the shares to request, in %% of all cores (default 50,25,10)",
    )
    args = parser.parse_args()

    sentences = real_sentences(random.Random(3), limit=5_000)
    embedder = load_embedder()
    embedder.embed(["warm the model up"] * 8)
    with tempfile.TemporaryDirectory(prefix="lectern-throttle-") as tmp:
        root = Path(tmp)
        folder = root / "notes"
        write_folder(folder, args.files, sentences)
        competitor = Competitor(root)
        try:
            alone_before = competitor.rate_alone()
            runs = []
            modes = [("always", 100, False), ("always", 100, True)]
            modes += [("share", share, False) for share in args.shares]
            for when, share, nice in modes:
                runs.append(
                    index_once(
                        root, folder, embedder, when, share, nice=nice, competitor=competitor
                    )
                )
                print(json.dumps(runs[-1]), file=sys.stderr, flush=True)
            alone_after = competitor.rate_alone()
            alone = (alone_before + alone_after) / 2
            runs.append(
                index_once(
                    root,
                    folder,
                    embedder,
                    "idle",
                    100,
                    competitor=competitor,
                    idle_competitor_s=args.idle_competitor_s,
                )
            )
            print(json.dumps(runs[-1]), file=sys.stderr, flush=True)
        finally:
            competitor.stop()
    baseline = runs[0]
    for run in runs:
        run["competitor_slowdown"] = round(alone / run.pop("competitor_rate"), 3)
        run["wall_vs_always"] = round(run["wall_s"] / baseline["wall_s"], 2)
        run["cpu_share_vs_always"] = round(run["achieved_share"] / baseline["achieved_share"], 3)
    emit(
        "throttle",
        {
            "cores": cpu_cores(),
            "files": args.files,
            "competitor_rate_alone": round(alone, 2),
            "competitor_alone_drift": round(alone_after / alone_before, 3),
            "runs": runs,
        },
    )


if __name__ == "__main__":
    main()
