"""Keyword refresh benchmark: what making a small change keyword-searchable costs while the
delta is large, with the fresh snapshot (as shipped) against rebuilding the whole delta
(as before), in alternating rounds over the same library.

The delta grows to a tenth of the library before a base merge, so at 300k chunks a
refresh rebuilt up to 30,000 chunks whatever the change. Each round adds ``--change``
chunks (80-180-word chunks of SciFact sentences, as ``bench/keyword_scale.py`` writes)
and refreshes one way or the other; the shipped way only folds the fresh snapshot into
the delta once it is as large, which these small rounds never reach.

    .venv/bin/python bench/keyword_refresh.py                   # deltas of 6k and 30k
    .venv/bin/python bench/keyword_refresh.py --deltas 2000 --rounds 4

The last line of output is one JSON object with every figure.
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import core.store.keyword as keyword_module
from bench.keyword_scale import add_documents, log, sentences
from core.store.db import Database
from core.store.keyword import KeywordIndex


def cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def measure(delta: int, base: int, change: int, rounds: int, pool: list[str]) -> dict:
    rng = random.Random(delta)
    with tempfile.TemporaryDirectory(prefix="lectern-kw-refresh-") as tmp:
        db = Database(Path(tmp) / "lectern.duckdb")
        kw = KeywordIndex(db, Path(tmp) / "keyword.duckdb")
        add_documents(db, pool, rng, base, "/lib", "base")
        kw.refresh(force_merge=True)
        add_documents(db, pool, rng, delta, "/lib", "delta")
        kw.refresh()  # the delta, folded whole
        figures: dict[str, dict[str, list[float]]] = {
            way: {"cpu_s": [], "wall_s": []} for way in ("fresh", "whole_delta")
        }
        for r in range(2 * rounds):
            way = "fresh" if r % 2 == 0 else "whole_delta"
            add_documents(db, pool, rng, change, "/lib", f"r{r}-")
            cpu, wall = cpu_s(), time.perf_counter()
            with db.write_lock:
                if way == "fresh":
                    kw._refresh_delta(kw.state())
                else:
                    kw._rebuild_delta(kw.state())
            figures[way]["cpu_s"].append(cpu_s() - cpu)
            figures[way]["wall_s"].append(time.perf_counter() - wall)
        delta_size = kw.delta_size()
        kw.close()
        db.close()
    out: dict[str, object] = {"delta_chunks": delta_size, "change_chunks": change}
    for way, values in figures.items():
        out[way] = {k: round(statistics.median(v), 3) for k, v in values.items()}
    fresh, whole = out["fresh"], out["whole_delta"]
    assert isinstance(fresh, dict) and isinstance(whole, dict)
    out["cpu_ratio_fresh_to_whole"] = round(fresh["cpu_s"] / whole["cpu_s"], 4)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--deltas", default="6000,30000")
    parser.add_argument("--base", type=int, default=5_000)
    parser.add_argument("--change", type=int, default=50, help="chunks added per round (a file)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds per way")
    args = parser.parse_args()
    # The library stands in for one ten times the delta's size: no merge may start.
    keyword_module.MERGE_MIN_CHUNKS = 10**9
    pool = sentences()
    rows = []
    for delta in (int(d) for d in args.deltas.split(",")):
        row = measure(delta, args.base, args.change, args.rounds, pool)
        log(
            f"delta {row['delta_chunks']}: fresh {row['fresh']} against whole delta "
            f"{row['whole_delta']} (CPU ratio {row['cpu_ratio_fresh_to_whole']})"
        )
        rows.append(row)
    print(json.dumps({"refresh": rows}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
