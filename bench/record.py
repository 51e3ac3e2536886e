"""One place where a bench prints its figures and, when asked, records them.

Every bench prints one JSON object on its last line. ``emit(name, result)`` prints that
line; run with ``LECTERN_BENCH_RECORD=1`` in the environment (or ``--record`` among the
bench's arguments, taken out before the bench parses them) it also writes the figures to
``bench/results/<name>.json`` with the date and the command that produced them, which
``bench/report.py`` turns into docs/BENCHMARKS.md.
"""

from __future__ import annotations

import datetime
import json
import os
import shlex
import sys
from pathlib import Path
from typing import Any

from core.embedding.probe import cpu_identity

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
RECORD_ENV = "LECTERN_BENCH_RECORD"

if "--record" in sys.argv[1:]:
    sys.argv.remove("--record")
    os.environ[RECORD_ENV] = "1"


def recording() -> bool:
    return os.environ.get(RECORD_ENV, "").strip() not in ("", "0", "false", "no")


def command_line(argv: list[str] | None = None) -> str:
    """The command as a person would type it from the repository root."""
    argv = list(sys.argv if argv is None else argv)
    script = Path(argv[0]).resolve() if argv else Path("?")
    try:
        shown = str(script.relative_to(ROOT))
    except ValueError:
        shown = argv[0]
    return shlex.join([".venv/bin/python", shown, *argv[1:]])


# Features that change which of Lectern's paths is fastest (core/embedding/probe.py picks
# bf16 only where it measures faster): a figure is compared with one from a like CPU.
_CPU_FLAGS = ("avx2", "avx512f", "avx512_bf16", "amx_bf16")


def cpu_description() -> str:
    """The CPU's model name and the vector features among ``_CPU_FLAGS`` it has."""
    model, flags = cpu_identity()
    have = [f for f in _CPU_FLAGS if f in flags.split()]
    return f"{model} ({', '.join(have) or 'no AVX2'})"


def record_file(name: str, result: dict[str, Any], date: str | None = None) -> Path:
    """Write ``result`` to bench/results/<name>.json and return the path."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}.json"
    entry = {
        "bench": name,
        "date": date or datetime.date.today().isoformat(),
        "command": command_line(),
        "cores": os.cpu_count(),
        "cpu": cpu_description(),
        "result": result,
    }
    path.write_text(json.dumps(entry, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return path


def emit(name: str, result: dict[str, Any]) -> None:
    """Print the bench's last line (one JSON object); record it when asked."""
    print(json.dumps(result), flush=True)
    if recording():
        path = record_file(name, result)
        print(f"recorded in {path.relative_to(ROOT)}", file=sys.stderr, flush=True)
