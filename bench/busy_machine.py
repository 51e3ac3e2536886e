"""Busy-machine benchmark (issue 34): encoding, hybrid search and indexing while other
programs keep the cores busy, against the same work on an idle machine, in one run.

A competing program is a CPU-bound Python loop (one process per core it takes). Every
figure below is measured beside 0, 1 or 2 of them, the conditions interleaved, since the
machine's speed drifts over minutes and only same-run ratios mean anything.

1. encode: Lectern's encoder (the path it picked for this CPU) and plain
   sentence-transformers fp32 (its default threads), on the same SciFact abstracts, each
   in its own process with its own OpenMP runtime, as a user's program would be. Also
   Lectern on 2 fixed threads, as it waits now and with OpenMP's default spinning wait
   restored (GOMP_SPINCOUNT=300000): the behaviour before the fix, on a machine whose
   probe chose 2 threads. Passages per CPU-second (the worker's own CPU time, every
   thread) and per second, each the median over the rounds.
2. search: hybrid search with the second stage on SciFact test, query blocks alternating
   idle and beside 2 competing processes (the second stage's cache cleared before each
   block, so both conditions encode the same passages): CPU per query, median wall
   time, nDCG@10 and the searches whose second stage was cut short, per condition; then
   on the first blocks with 2 threads fixed, waiting as now and spinning as before.
3. index: ``lectern index`` on 400 SciFact documents in a fresh library, idle and beside
   2 competing processes, against plain sentence-transformers fp32 encoding the very
   passages the index holds, in the same conditions: CPU of each process tree.

Usage:

    .venv/bin/python bench/busy_machine.py                     # about 30 minutes
    .venv/bin/python bench/busy_machine.py --parts encode --rounds 2

The SciFact index the search part uses is built once (as ``lectern eval --beir`` does)
and kept. The last line of output is one JSON object with every figure.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.record import emit  # noqa: E402

SCIFACT = REPO.parent / "shared" / "data" / "scifact"
SPIN_ENV = {"GOMP_SPINCOUNT": "300000"}  # libgomp's own default spin, before the fix
BURN = "while True: pass"


@contextlib.contextmanager
def competing(count: int) -> Iterator[None]:
    """``count`` CPU-bound processes for the length of the block."""
    procs = [subprocess.Popen([sys.executable, "-c", BURN]) for _ in range(count)]
    try:
        if procs:
            time.sleep(0.3)  # running before the measurement starts
        yield
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()


def clean_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OMP_", "GOMP_"))}
    env.update(extra or {})
    return env


def scifact_texts(count: int, skip: int = 0) -> list[tuple[str, str, str]]:
    rows = []
    with open(SCIFACT / "corpus.jsonl", encoding="utf-8") as handle:
        for i, line in enumerate(handle):
            if i < skip:
                continue
            row = json.loads(line)
            rows.append((str(row["_id"]), str(row.get("title") or ""), str(row["text"])))
            if len(rows) >= count:
                break
    return rows


# --- workers (each in its own process) ---------------------------------------------


def encode_worker(kind: str, texts_file: str) -> None:
    """Loads its encoder, then encodes the texts once per line read from stdin and
    answers with its CPU and wall seconds."""
    texts = json.loads(Path(texts_file).read_text(encoding="utf-8"))
    if kind == "st":
        from sentence_transformers import SentenceTransformer

        from core.embedding.models import bundled_model_path

        model = SentenceTransformer(str(bundled_model_path()), device="cpu")
        encode = lambda: model.encode(texts, batch_size=32)  # noqa: E731
        info: dict[str, Any] = {"precision": "fp32", "threads": "default"}
    else:
        from core.embedding.models import SentenceTransformerEmbedder

        fixed = int(kind.partition(":")[2] or 0) or None
        embedder = SentenceTransformerEmbedder(threads=fixed)
        encode = lambda: embedder.embed(texts, batch_size=64)  # noqa: E731
        info = {"precision": embedder.encoding.precision, "threads": fixed or "chosen"}
    encode()  # kernels made, thread pool started
    print(json.dumps(info), flush=True)
    for _ in sys.stdin:
        cpu, wall = time.process_time(), time.perf_counter()
        encode()
        done = {"cpu": time.process_time() - cpu, "wall": time.perf_counter() - wall}
        if kind == "lectern":
            done["threads"] = embedder.threads
        print(json.dumps(done), flush=True)


class Worker:
    def __init__(self, kind: str, texts_file: Path, env: dict[str, str]) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, __file__, "--worker", kind, "--texts", str(texts_file)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            env=env,
        )
        self.info = self._read()

    def _read(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise SystemExit("an encoding worker failed to start")
        return dict(json.loads(line))

    def run(self) -> dict[str, float]:
        assert self.proc.stdin is not None
        self.proc.stdin.write("go\n")
        self.proc.stdin.flush()
        return self._read()

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait()


# --- 1. encoding ---------------------------------------------------------------------


def encode_part(count: int, rounds: int) -> dict[str, Any]:
    texts = [f"{title} {text}" for _, title, text in scifact_texts(count)]
    with tempfile.TemporaryDirectory() as scratch:
        texts_file = Path(scratch) / "texts.json"
        texts_file.write_text(json.dumps(texts), encoding="utf-8")
        workers = {
            "lectern": Worker("lectern", texts_file, clean_env()),
            "lectern_2_threads": Worker("lectern:2", texts_file, clean_env()),
            "lectern_2_threads_spinning": Worker("lectern:2", texts_file, clean_env(SPIN_ENV)),
            "sentence_transformers_fp32": Worker("st", texts_file, clean_env()),
        }
        runs: dict[tuple[str, int], list[dict[str, float]]] = {}
        try:
            for r in range(rounds):
                loads = [0, 1, 2][r % 3 :] + [0, 1, 2][: r % 3]
                for load in loads:
                    names = list(workers)
                    names = names[r % len(names) :] + names[: r % len(names)]
                    with competing(load):
                        for name in names:
                            runs.setdefault((name, load), []).append(workers[name].run())
        finally:
            for worker in workers.values():
                worker.close()
    out: dict[str, Any] = {
        "passages": len(texts),
        "rounds": rounds,
        "paths": {name: w.info for name, w in workers.items()},
    }
    for load in (0, 1, 2):
        row: dict[str, Any] = {}
        for name in workers:
            done = runs[(name, load)]
            row[name] = {
                "passages_per_cpu_s": round(
                    statistics.median(len(texts) / d["cpu"] for d in done), 2
                ),
                "passages_per_s": round(statistics.median(len(texts) / d["wall"] for d in done), 2),
            }
        base = row["sentence_transformers_fp32"]
        row["lectern"]["threads_chosen"] = [d.get("threads") for d in runs[("lectern", load)]]
        for name in ("lectern", "lectern_2_threads", "lectern_2_threads_spinning"):
            row[f"{name}_vs_st_cpu"] = round(
                row[name]["passages_per_cpu_s"] / base["passages_per_cpu_s"], 2
            )
            row[f"{name}_vs_st_wall"] = round(
                row[name]["passages_per_s"] / base["passages_per_s"], 2
            )
        out[f"competing_{load}"] = row
    out["lectern_at_least_plain_fp32_everywhere"] = all(
        out[f"competing_{load}"][f"lectern_vs_st_{what}"] >= 1.0
        for load in (0, 1, 2)
        for what in ("cpu", "wall")
    )
    return out


# --- 2. search -----------------------------------------------------------------------


def search_worker(queries: int, block: int, threads: int | None) -> None:
    """Hybrid search on SciFact test, blocks alternating idle / 2 competing processes."""
    from core.evaluation.beir import indexed_beir, ndcg_at, ranked_documents
    from core.records import second_stage_state
    from core.retrieval.search import PieceCache

    with indexed_beir(SCIFACT) as indexed:
        library = indexed.library
        retriever = library.retriever
        qids = list(indexed.beir.qrels)[:queries]
        if threads:
            library.embedder.threads = threads  # type: ignore[attr-defined]
        library.search("warm up the model and the second stage", k=10)
        figures: dict[int, dict[str, Any]] = {
            load: {"cpu": 0.0, "walls": [], "ndcg": [], "cut": 0} for load in (0, 2)
        }
        for b, start in enumerate(range(0, len(qids), block)):
            part = qids[start : start + block]
            for load in (0, 2) if b % 2 == 0 else (2, 0):
                retriever._piece_cache = PieceCache()
                row = figures[load]
                with competing(load):
                    cpu = time.process_time()
                    for qid in part:
                        t0 = time.perf_counter()
                        hits = library.search(indexed.beir.queries[qid], k=200, mode="hybrid")
                        row["walls"].append(time.perf_counter() - t0)
                        row["cut"] += second_stage_state(hits) in ("cut short", "skipped")
                        ranked = ranked_documents(indexed, hits)
                        row["ndcg"].append(ndcg_at(ranked, indexed.beir.qrels[qid], 10))
                    row["cpu"] += time.process_time() - cpu
    out: dict[str, Any] = {"queries": len(qids)}
    for load, row in figures.items():
        n = len(row["walls"])
        out[f"competing_{load}"] = {
            "cpu_s_per_query": round(row["cpu"] / n, 4),
            "wall_s_p50": round(statistics.median(row["walls"]), 4),
            "wall_s_p90": round(sorted(row["walls"])[int(0.9 * (n - 1))], 4),
            "ndcg@10": round(sum(row["ndcg"]) / n, 4),
            "second_stage_cut_short": row["cut"],
        }
    out["cpu_busy_vs_idle"] = round(
        out["competing_2"]["cpu_s_per_query"] / out["competing_0"]["cpu_s_per_query"], 2
    )
    print(json.dumps(out), flush=True)


def search_part(queries: int, block: int, spin_queries: int) -> dict[str, Any]:
    def run(count: int, env: dict[str, str], threads: int = 0) -> dict[str, Any]:
        argv = [sys.executable, __file__, "--worker", "search", "--queries", str(count)]
        argv += ["--block", str(block), "--threads", str(threads)]
        done = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise SystemExit(f"the search worker failed:\n{done.stderr[-3000:]}")
        return dict(json.loads(done.stdout.strip().splitlines()[-1]))

    out = {"lectern": run(queries, clean_env())}
    if spin_queries:  # a machine whose probe chose 2 threads, before and after the fix
        out["lectern_2_threads"] = run(spin_queries, clean_env(), 2)
        out["lectern_2_threads_spinning"] = run(spin_queries, clean_env(SPIN_ENV), 2)
    return out


# --- 3. indexing ---------------------------------------------------------------------


def child_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def timed_child(argv: list[str], env: dict[str, str]) -> dict[str, float]:
    cpu, wall = child_cpu(), time.perf_counter()
    subprocess.run(argv, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return {"cpu": child_cpu() - cpu, "wall": time.perf_counter() - wall}


def raw_worker(texts_file: str) -> None:
    from sentence_transformers import SentenceTransformer

    from core.embedding.models import bundled_model_path

    texts = json.loads(Path(texts_file).read_text(encoding="utf-8"))
    SentenceTransformer(str(bundled_model_path()), device="cpu").encode(texts, batch_size=32)


def index_part(documents: int) -> dict[str, Any]:
    from bench.indexing import chunk_texts
    from core.config import Settings
    from core.evaluation.beir import load_beir, materialize
    from core.library import Library

    beir = load_beir(SCIFACT, "test")
    chosen = dict(list(beir.corpus.items())[:documents])
    out: dict[str, Any] = {"documents": documents}
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        docs = root / "docs"
        materialize(type(beir)(chosen, {}, {}), docs)
        with Library(Settings(home=root / "plan")) as planner:
            texts = chunk_texts(planner, docs)
        texts_file = root / "texts.json"
        texts_file.write_text(json.dumps(texts), encoding="utf-8")
        out["passages"] = len(texts)
        raw = [sys.executable, __file__, "--worker", "raw", "--texts", str(texts_file)]
        for r, load in enumerate((0, 2)):
            home = root / f"home-{load}"
            index = [sys.executable, "-m", "core", "index", str(docs)]
            index_env = clean_env({"LECTERN_HOME": str(home)})
            with competing(load):
                if r % 2 == 0:
                    lectern = timed_child(index, index_env)
                    plain = timed_child(raw, clean_env())
                else:
                    plain = timed_child(raw, clean_env())
                    lectern = timed_child(index, index_env)
            shutil.rmtree(home, ignore_errors=True)
            out[f"competing_{load}"] = {
                "lectern_index_cpu_s": round(lectern["cpu"], 1),
                "lectern_index_wall_s": round(lectern["wall"], 1),
                "raw_model_cpu_s": round(plain["cpu"], 1),
                "raw_model_wall_s": round(plain["wall"], 1),
                "index_vs_raw_cpu": round(lectern["cpu"] / plain["cpu"], 2),
            }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--parts", default="encode,search,index")
    parser.add_argument("--passages", type=int, default=48, help="encode: SciFact abstracts")
    parser.add_argument("--rounds", type=int, default=3, help="encode: rounds")
    parser.add_argument("--queries", type=int, default=300, help="search: SciFact test queries")
    parser.add_argument("--block", type=int, default=25, help="search: queries per block")
    parser.add_argument(
        "--spin-queries", type=int, default=50, help="search: 2 threads, sleeping and spinning"
    )
    parser.add_argument("--documents", type=int, default=400, help="index: SciFact documents")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--texts", help=argparse.SUPPRESS)
    parser.add_argument("--threads", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker == "search":
        return search_worker(args.queries, args.block, args.threads or None)
    if args.worker == "raw":
        return raw_worker(args.texts)
    if args.worker:
        return encode_worker(args.worker, args.texts)
    parts = [p.strip() for p in args.parts.split(",") if p.strip()]
    result: dict[str, Any] = {"cores": os.cpu_count()}
    if "encode" in parts:
        result["encode"] = encode_part(args.passages, args.rounds)
        print(json.dumps({"encode": result["encode"]}), flush=True)
    if "search" in parts:
        result["search"] = search_part(args.queries, args.block, args.spin_queries)
        print(json.dumps({"search": result["search"]}), flush=True)
    if "index" in parts:
        result["index"] = index_part(args.documents)
    emit("busy_machine", result)


if __name__ == "__main__":
    main()
