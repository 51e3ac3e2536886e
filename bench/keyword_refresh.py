"""Keyword refresh benchmark: what making a small change keyword-searchable costs while the
delta is large, with the fresh snapshot (as shipped) against rebuilding the whole delta
(as before), in alternating rounds over the same library; and (``--growth``) what keeping
keyword search current costs over a library's growth, with rebuilds carrying the old
snapshot's postings over (as shipped) against reading every passage again (as before).

The delta grows to a tenth of the library before a base merge, so at 300k chunks a
refresh rebuilt up to 30,000 chunks whatever the change. Each round adds ``--change``
chunks (80-180-word chunks of SciFact sentences, as ``bench/keyword_scale.py`` writes)
and refreshes one way or the other; the shipped way only folds the fresh snapshot into
the delta once it is as large, which these small rounds never reach.

    .venv/bin/python bench/keyword_refresh.py                   # deltas of 6k and 30k
    .venv/bin/python bench/keyword_refresh.py --deltas 2000 --rounds 4
    .venv/bin/python bench/keyword_refresh.py --growth 30000    # two libraries to 30k

``--growth N`` grows two libraries side by side to N chunks in indexing-like runs of
``--run`` chunks (the first two files made searchable at once, then the rest; a base
merge that falls due runs in the background and is waited for at the end of the run, as
the indexer publishes; one earlier file edited away each run). One library carries
postings over, the other reads every passage again; their runs alternate, and each run's
keyword work (refreshes, folds and merges) is timed in process CPU and wall time.

The last line of output is one JSON object with every figure.
"""

from __future__ import annotations

import argparse
import random
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import core.store.keyword.upkeep as upkeep_module
from bench.keyword_scale import CHUNKS_PER_DOC, add_documents, log, sentences
from bench.record import emit
from core.store.db import Database, scalar
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
                    kw.upkeep._refresh_delta(kw.state())
                else:  # as before the fresh snapshot: the whole delta read again
                    kw.upkeep._carries = lambda cur, old: False  # type: ignore[method-assign]
                    kw.upkeep._rebuild_delta(kw.state())
                    del kw.upkeep._carries
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


def growth(target: int, run: int, pool: list[str]) -> dict[str, object]:
    """Keyword upkeep over a library's growth, carried over against read again."""
    ways = ("carried", "reread")
    rng = {way: random.Random(1) for way in ways}
    totals = {way: {"cpu_s": 0.0, "wall_s": 0.0} for way in ways}
    with tempfile.TemporaryDirectory(prefix="lectern-kw-growth-") as tmp:
        libraries = {}
        for way in ways:
            (Path(tmp) / way).mkdir()
            db = Database(Path(tmp) / way / "lectern.duckdb")
            kw = KeywordIndex(db, Path(tmp) / way / "keyword.duckdb")
            if way == "reread":
                kw.upkeep._carries = lambda cur, old: False  # type: ignore[method-assign]
            libraries[way] = (db, kw)
        written = 0
        r = 0
        while written < target:
            for way in ways if r % 2 == 0 else ways[::-1]:
                db, kw = libraries[way]
                first = min(2 * CHUNKS_PER_DOC, run)
                add_documents(db, pool, rng[way], first, "/lib", f"r{r}a-")
                cpu, wall = cpu_s(), time.perf_counter()
                kw.refresh(background=True)  # the run's first files, searchable at once
                spent_cpu, spent_wall = cpu_s() - cpu, time.perf_counter() - wall
                add_documents(db, pool, rng[way], run - first, "/lib", f"r{r}b-")
                if r:  # an earlier file edited away
                    with db.transaction() as cur:
                        cur.execute(
                            "DELETE FROM chunks WHERE document_id = (SELECT min(document_id) "
                            "FROM chunks)"
                        )
                        version = int(db.get_meta("content_version", "0") or 0) + 1
                        db.set_meta("content_version", str(version), cur)
                cpu, wall = cpu_s(), time.perf_counter()
                kw.refresh(background=True)  # the end of the run
                kw.wait_for_merge()
                totals[way]["cpu_s"] += spent_cpu + cpu_s() - cpu
                totals[way]["wall_s"] += spent_wall + time.perf_counter() - wall
            written += run
            r += 1
        cur = libraries["carried"][0].cursor()
        chunks = int(scalar(cur, "SELECT count(*) FROM chunks"))
        ever = int(scalar(cur, "SELECT max(id) FROM chunks"))  # ids only grow
        for db, kw in libraries.values():
            kw.close()
            db.close()
    out: dict[str, object] = {"chunks": chunks, "chunks_written": ever, "runs": r}
    for way in ways:
        out[way] = {
            "cpu_s": round(totals[way]["cpu_s"], 1),
            "wall_s": round(totals[way]["wall_s"], 1),
            "cpu_ms_per_chunk": round(1000 * totals[way]["cpu_s"] / ever, 3),
        }
    out["cpu_ratio_carried_to_reread"] = round(
        totals["carried"]["cpu_s"] / totals["reread"]["cpu_s"], 3
    )
    out["wall_ratio_carried_to_reread"] = round(
        totals["carried"]["wall_s"] / totals["reread"]["wall_s"], 3
    )
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--deltas", default="6000,30000")
    parser.add_argument("--base", type=int, default=5_000)
    parser.add_argument("--change", type=int, default=50, help="chunks added per round (a file)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds per way")
    parser.add_argument("--growth", type=int, default=0, help="grow two libraries to N chunks")
    parser.add_argument("--run", type=int, default=816, help="chunks an indexing run adds")
    args = parser.parse_args()
    if args.growth:
        row = growth(args.growth, args.run, sentences())
        log(
            f"{row['chunks']} chunks in {row['runs']} runs: carried {row['carried']} against "
            f"read again {row['reread']} (CPU ratio {row['cpu_ratio_carried_to_reread']})"
        )
        emit("keyword_refresh_growth", {"growth": row})
        return 0
    # The library stands in for one ten times the delta's size: no merge may start.
    upkeep_module.MERGE_MIN_CHUNKS = 10**9
    pool = sentences()
    rows = []
    for delta in (int(d) for d in args.deltas.split(",")):
        row = measure(delta, args.base, args.change, args.rounds, pool)
        log(
            f"delta {row['delta_chunks']}: fresh {row['fresh']} against whole delta "
            f"{row['whole_delta']} (CPU ratio {row['cpu_ratio_fresh_to_whole']})"
        )
        rows.append(row)
    emit("keyword_refresh", {"refresh": rows})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
