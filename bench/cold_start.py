"""Cold start of the `lectern` command: whole processes, timed from outside.

A library of the sample documents (resources/sample-docs) is indexed once into a
temporary data folder; then each command runs as a fresh process, ``--runs`` times,
the commands interleaved round by round so that a busy spell of the machine falls on
all of them alike. Per command: the median wall time, CPU time (user + system of the
process and its children) and peak resident memory, and the wall and CPU ratios to
``lectern --version`` (an interpreter start plus the entry point's own imports: the
floor any command pays).

    .venv/bin/python bench/cold_start.py            # 5 runs each
    .venv/bin/python bench/cold_start.py --runs 9

No model server is needed: ``ask`` runs as a person without one would (the default
address, nothing listening) and quotes its answer from the documents. The last line of
output is one JSON object with every figure.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

try:
    from bench.record import emit
except ModuleNotFoundError:  # run as a script: bench/ itself is first on sys.path
    from record import emit  # type: ignore[no-redef]

REPO = Path(__file__).resolve().parents[1]
SAMPLE_DOCS = REPO / "resources" / "sample-docs"

COMMANDS: dict[str, tuple[str, ...]] = {
    "version": ("--version",),
    "search_bm25": ("search", "mileage", "--mode", "bm25"),
    "status": ("status",),
    "files": ("files",),
    "search_hybrid": ("search", "mileage"),
    # No model server runs: the answer is quoted from the documents. It loads the
    # embedding model: hybrid retrieval and the sentence spans use it (see docs/QUALITY.md
    # for what the model adds to the quoted answers).
    "ask_no_server": ("ask", "How is mileage for a private car reimbursed?"),
}


def lectern_command() -> list[str]:
    """The installed `lectern` script beside this interpreter, else the module."""
    script = Path(sys.executable).with_name("lectern")
    return [str(script)] if script.exists() else [sys.executable, "-m", "core.cli.main"]


def run_once(argv: list[str], env: dict[str, str]) -> dict[str, float]:
    """One whole process: wall seconds, CPU seconds and peak memory (MB) from its rusage."""
    started = time.perf_counter()
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - started
    proc.returncode = os.waitstatus_to_exitcode(status)
    err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
    if proc.stderr:
        proc.stderr.close()
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed ({proc.returncode}):\n{err}")
    return {
        "wall_s": wall,
        "cpu_s": usage.ru_utime + usage.ru_stime,
        # ru_maxrss is in KiB on Linux: the largest of the process and its children.
        "peak_mb": usage.ru_maxrss / 1024,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="runs per command (default 5)")
    args = parser.parse_args()
    base = lectern_command()
    with tempfile.TemporaryDirectory(prefix="lectern-cold-") as tmp:
        home, docs = Path(tmp) / "home", Path(tmp) / "docs"
        shutil.copytree(SAMPLE_DOCS, docs)
        env = dict(os.environ, LECTERN_HOME=str(home), HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
        env.pop("OLLAMA_HOST", None)
        subprocess.run([*base, "index", str(docs)], env=env, check=True, capture_output=True)
        samples: dict[str, list[dict[str, float]]] = {name: [] for name in COMMANDS}
        for round_no in range(args.runs):
            for name, extra in COMMANDS.items():
                samples[name].append(run_once([*base, *extra], env))
            print(f"round {round_no + 1}/{args.runs} done", file=sys.stderr, flush=True)
    medians = {
        name: {key: statistics.median(s[key] for s in runs) for key in runs[0]}
        for name, runs in samples.items()
    }
    floor = medians["version"]
    result: dict[str, object] = {"runs": args.runs, "documents": len(list(SAMPLE_DOCS.iterdir()))}
    print(f"{'command':14} {'wall s':>8} {'cpu s':>8} {'peak MB':>8} {'wall x':>7} {'cpu x':>7}")
    for name, m in medians.items():
        wall_x, cpu_x = m["wall_s"] / floor["wall_s"], m["cpu_s"] / floor["cpu_s"]
        print(
            f"{name:14} {m['wall_s']:8.2f} {m['cpu_s']:8.2f} {m['peak_mb']:8.0f} "
            f"{wall_x:7.2f} {cpu_x:7.2f}"
        )
        result[name] = {
            "wall_s": round(m["wall_s"], 3),
            "cpu_s": round(m["cpu_s"], 3),
            "peak_mb": round(m["peak_mb"], 1),
            "wall_ratio": round(wall_x, 2),
            "cpu_ratio": round(cpu_x, 2),
        }
    emit("cold_start", result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
