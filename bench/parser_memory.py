"""Peak memory of the parser worker on huge and hostile files of the new formats.

Each file is parsed in a fresh sandbox worker (``ParserPool``, the indexer's 60 s and
1 GB limits) and the worker's peak resident memory (VmHWM, Linux) is read after it; the
baseline is the same worker after parsing a small CSV file. The inputs are made by the
generators of tests/ingest/test_formats.py: a million cells as .xlsx and .ods, a mailbox of
100,000 messages, a deck of 1,000 slides, a zip bomb and an XML entity bomb.

    .venv/bin/python bench/parser_memory.py

Prints one line per file and one JSON object on the last line.
"""

from __future__ import annotations

import re
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.record import emit
from core.errors import ParseError
from core.ingest import ParserPool
from tests.ingest.test_formats import (
    ZIP_FORMATS,
    _big_mbox,
    _huge_ods,
    _huge_xlsx,
    _rezip,
    _with_entity_bomb,
    make_csv,
    make_pptx,
    make_xlsx,
)

MB = 1024 * 1024


def peak_mb(pid: int | None) -> float:
    text = Path(f"/proc/{pid}/status").read_text()
    match = re.search(r"VmHWM:\s+(\d+) kB", text)
    return int(match.group(1)) / 1024 if match else float("nan")


def measure(path: Path) -> dict[str, object]:
    with ParserPool(timeout_s=60.0, memory_mb=1024) as pool:
        pool.parse(make_csv(path.parent / "warm.csv"))
        baseline = peak_mb(pool.worker_pid)
        started = time.perf_counter()
        try:
            doc = pool.parse(path)
            outcome = f"indexed: {len(doc.text):,} chars" + (
                f"; {doc.notice}" if doc.notice else ""
            )
        except ParseError as exc:
            outcome = f"failed: {exc.reason}"
        seconds = time.perf_counter() - started
        peak = peak_mb(pool.worker_pid) if pool.worker_pid else float("nan")
    return {
        "baseline_mb": round(baseline, 1),
        "peak_mb": round(peak, 1),
        "peak_over_baseline": round(peak / baseline, 2),
        "seconds": round(seconds, 2),
        "outcome": outcome,
    }


def main() -> int:
    results: dict[str, dict[str, object]] = {}
    with tempfile.TemporaryDirectory(prefix="lectern-parser-memory-") as tmp:
        folder = Path(tmp)
        good_xlsx = make_xlsx(folder / "good.xlsx")
        cases: dict[str, Callable[[], Path]] = {
            "xlsx_1m_cells": lambda: _huge_xlsx(folder / "million.xlsx", 100_000, 10),
            "ods_1m_cells": lambda: _huge_ods(folder / "million.ods", 100_000, 10),
            "mbox_100k_messages": lambda: _big_mbox(folder / "big.mbox", 100_000),
            "pptx_1000_slides": lambda: make_pptx(folder / "big.pptx", slides=1_000),
            "xlsx_zip_bomb": lambda: _rezip(
                good_xlsx, folder / "bomb.xlsx", lambda n, d: d, {"pad.xml": bytes(512 * MB)}, 9
            ),
            "pptx_entity_bomb": lambda: _rezip(
                make_pptx(folder / "deck.pptx"),
                folder / "entities.pptx",
                _with_entity_bomb(ZIP_FORMATS["pptx"][1]),
            ),
        }
        for name, make in cases.items():
            results[name] = measure(make())
            print(name, results[name], flush=True)
    worst = max(float(r["peak_mb"]) for r in results.values())  # type: ignore[arg-type]
    emit("parser_memory", {"limit_mb": 1024, "worst_peak_mb": worst, "files": results})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
