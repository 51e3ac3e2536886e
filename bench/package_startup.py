"""Start-up of the packaged app against the source checkout, in the same run.

    python bench/package_startup.py [--bundle dist/Lectern/Lectern] [--runs 3]

For each of the bundle and ``python -m desktop`` it measures, on a fresh data folder:
- ``--version``: process start to exit (interpreter and bootloader cost);
- window: launch until a top-level window titled "Lectern" is mapped on an Xvfb display
  (polled with ``xwininfo`` every 20 ms), which is what a user waits for after a click.
It prints medians, the bundle/source ratio, and the bundle's size from
dist/package-report.json when ``make package`` wrote one.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
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

ROOT = Path(__file__).resolve().parents[1]
DISPLAY = ":97"


def fresh_env(home: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.pop("QT_QPA_PLATFORM", None)
    env["DISPLAY"] = DISPLAY
    env["LECTERN_HOME"] = str(home)
    env["XDG_CONFIG_HOME"] = str(home / "config")
    return env


def time_version(command: list[str]) -> float:
    home = Path(tempfile.mkdtemp(prefix="lectern-bench-"))
    try:
        started = time.perf_counter()
        subprocess.run(
            [*command, "--version"], env=fresh_env(home), check=True, capture_output=True
        )
        return time.perf_counter() - started
    finally:
        shutil.rmtree(home, ignore_errors=True)


def window_mapped() -> bool:
    tree = subprocess.run(
        ["xwininfo", "-root", "-tree"], env={"DISPLAY": DISPLAY}, capture_output=True, text=True
    ).stdout
    return any('"Lectern"' in line and "x" in line for line in tree.splitlines())


def time_window(command: list[str], limit_s: float = 60.0) -> float | None:
    home = Path(tempfile.mkdtemp(prefix="lectern-bench-"))
    app = subprocess.Popen(
        command,
        env=fresh_env(home),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    started = time.perf_counter()
    seen: float | None = None
    try:
        while time.perf_counter() - started < limit_s and app.poll() is None:
            if window_mapped():
                seen = time.perf_counter() - started
                break
            time.sleep(0.02)
    finally:
        os.killpg(app.pid, signal.SIGTERM)
        try:
            app.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(app.pid, signal.SIGKILL)
        shutil.rmtree(home, ignore_errors=True)
    return seen


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bundle", type=Path, default=ROOT / "dist" / "Lectern" / "Lectern")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    if not args.bundle.is_file():
        print(f"No bundle at {args.bundle}: run `make package` first.")
        return 2
    if shutil.which("Xvfb") is None or shutil.which("xwininfo") is None:
        print("Needs Xvfb and xwininfo (Debian: xvfb, x11-utils).")
        return 2
    xvfb = subprocess.Popen(["Xvfb", DISPLAY, "-screen", "0", "1440x900x24", "-nolisten", "tcp"])
    time.sleep(1.0)
    try:
        commands = {
            "bundle": [str(args.bundle)],
            "source": [sys.executable, "-m", "desktop"],
        }
        results: dict[str, dict[str, float | None]] = {}
        for name, command in commands.items():
            versions = [time_version(command) for _ in range(args.runs)]
            windows = [time_window(command) for _ in range(args.runs)]
            shown = [w for w in windows if w is not None]
            results[name] = {
                "version_s": statistics.median(versions),
                "window_s": statistics.median(shown) if shown else None,
                "window_runs_failed": float(len(windows) - len(shown)),
            }
            print(
                f"{name:>6}: --version {results[name]['version_s']:.2f} s, window shown "
                f"{results[name]['window_s'] or float('nan'):.2f} s (median of {args.runs})"
            )
    finally:
        xvfb.terminate()
        xvfb.wait()
    bundle, source = results["bundle"], results["source"]
    if bundle["window_s"] and source["window_s"]:
        print(f"bundle/source window time: {bundle['window_s'] / source['window_s']:.2f}x")
    report_path = ROOT / "dist" / "package-report.json"
    if report_path.is_file():
        report = json.loads(report_path.read_text(encoding="utf-8"))
        mib = 1024 * 1024
        print(f"bundle size {report['bundle_bytes'] / mib:,.0f} MiB", end="")
        if report.get("archive_bytes"):
            print(f", archive {report['archive_bytes'] / mib:,.0f} MiB", end="")
        print()
    emit("package_startup", results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
