"""Choose the fusion and second-stage constants on a training split, from cached candidates.

Running a full ``lectern eval`` per setting would cost minutes each; instead ``dump``
stores, once per data set and split, every query's deep BM25 and dense chunk lists (the
production searches, 1,500 chunks deep), the chunk -> document map, the query embeddings
and the candidate chunks' embeddings. ``tune`` then replays fusion (core/fusion.py, the
same code search runs) over a grid of constants on the *training* cache, keeps the best,
and reports it on every other cache with the single modes and RRF measured in the same run.

  .venv/bin/python bench/retrieval_tune.py dump --beir ../shared/data/scifact --split train \\
      --home /tmp/scifact/home --cache /tmp/scifact-train.pkl
  .venv/bin/python bench/retrieval_tune.py tune --train /tmp/scifact-train.pkl \\
      --check /tmp/scifact-test.pkl --check /tmp/squad-test.pkl
  .venv/bin/python bench/retrieval_tune.py partial --cache /tmp/scifact-test.pkl ...

The library at --home must already hold the corpus (``lectern eval`` builds it, under
<data folder>/eval/). The last line printed is one JSON object.
"""

from __future__ import annotations

import argparse
import itertools
import json
import pickle
import random
import sys
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from core.config import load_settings  # noqa: E402
from core.eval import load_beir, materialize, ndcg_at  # noqa: E402
from core.fusion import FusionParams, best_per_document, fuse  # noqa: E402
from core.library import Library  # noqa: E402
from core.records import SearchFilters  # noqa: E402
from core.retrieval import rrf_fuse  # noqa: E402
from core.store.lookup import chunk_embeddings, live_chunk_documents  # noqa: E402

DUMP_DEPTH = 1500


def dump(args: argparse.Namespace) -> dict[str, object]:
    beir_dir = Path(args.beir).resolve()
    beir = load_beir(beir_dir, args.split)
    home = Path(args.home)
    mapping = materialize(beir, home.parent / "docs")
    settings = replace(load_settings(), home=home)
    queries = list(beir.qrels)
    with Library(settings) as library:
        by_path = {d.path: d.id for d in library.documents()}
        corpus_of = {by_path[p]: cid for p, cid in mapping.items() if p in by_path}
        t0 = time.monotonic()
        vectors = library.embedder.embed([beir.queries[q] for q in queries])
        embed_s = time.monotonic() - t0
        retriever = library.retriever
        rows = {}
        all_chunks: set[int] = set()
        for qid, vector in zip(queries, vectors, strict=True):
            bm25 = library.keyword.search(beir.queries[qid], DUMP_DEPTH)
            dense = retriever.dense_vector(vector, DUMP_DEPTH, SearchFilters())
            rows[qid] = (bm25, dense)
            all_chunks.update(c for c, _ in bm25)
            all_chunks.update(c for c, _ in dense)
        document_of = live_chunk_documents(library.db, sorted(all_chunks))
        embeddings = chunk_embeddings(library.db, sorted(all_chunks), library.vectors.dim)
    cache = {
        "dataset": beir_dir.name,
        "split": args.split,
        "qrels": beir.qrels,
        "queries": {q: beir.queries[q] for q in queries},
        "query_vectors": dict(zip(queries, vectors, strict=True)),
        "lists": rows,
        "document_of": document_of,
        "corpus_of": corpus_of,
        "embeddings": embeddings,
    }
    with open(args.cache, "wb") as handle:
        pickle.dump(cache, handle)
    return {"dumped": args.cache, "queries": len(queries), "embed_s": round(embed_s, 1)}


def prefix(ranked: list[tuple[int, float]], document_of: dict[int, int], depth: int):
    """The chunks production search would fetch: enough to reach ``depth`` documents."""
    seen: set[int] = set()
    for i, (chunk, _) in enumerate(ranked):
        seen.add(document_of[chunk])
        if len(seen) > depth:
            return ranked[:i]
    return ranked


def ndcg(cache: dict, ranked_docs: dict[str, list[int]]) -> float:
    corpus_of = cache["corpus_of"]
    total = 0.0
    for qid, relevant in cache["qrels"].items():
        ranked = [corpus_of[d] for d in ranked_docs[qid]]
        total += ndcg_at(ranked, relevant, 10)
    return total / max(1, len(cache["qrels"]))


def doc_lists(cache: dict, depth: int):
    doc_of = cache["document_of"]
    out = {}
    for qid, (bm25, dense) in cache["lists"].items():
        bm25 = [x for x in bm25 if x[0] in doc_of]
        dense = [x for x in dense if x[0] in doc_of]
        out[qid] = (
            best_per_document(prefix(bm25, doc_of, depth), doc_of),
            best_per_document(prefix(dense, doc_of, depth), doc_of),
        )
    return out


def run_modes(cache: dict, params: FusionParams) -> dict[str, float]:
    lists = doc_lists(cache, params.depth)
    bm25 = {q: [d for d, _ in b] for q, (b, _) in lists.items()}
    dense = {q: [d for d, _ in v] for q, (_, v) in lists.items()}
    rrf = {q: [d for d, _ in rrf_fuse([bm25[q], dense[q]], 60)] for q in lists}
    hybrid = {q: [d for d, _ in fuse(b, v, params)] for q, (b, v) in lists.items()}
    scores = {
        "hybrid": ndcg(cache, hybrid),
        "bm25": ndcg(cache, bm25),
        "dense": ndcg(cache, dense),
        "rrf_docs": ndcg(cache, rrf),
    }
    scores["hybrid_minus_best_single"] = scores["hybrid"] - max(scores["bm25"], scores["dense"])
    return {k: round(v, 4) for k, v in scores.items()}


def tune(args: argparse.Namespace) -> dict[str, object]:
    with open(args.train, "rb") as handle:
        train = pickle.load(handle)
    grid = itertools.product(
        [0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.55, 0.6],
        [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0],
        [100],
    )
    results = []
    cached = {d: doc_lists(train, d) for d in {100}}
    for prior, power, depth in grid:
        params = FusionParams(bm25_prior=prior, confidence_power=power, depth=depth)
        hybrid = {q: [d for d, _ in fuse(b, v, params)] for q, (b, v) in cached[depth].items()}
        results.append((ndcg(train, hybrid), params))
    results.sort(key=lambda r: -r[0])
    for score, params in results[:10]:
        print(f"train {score:.4f}  {params}")
    best = results[0][1]
    report: dict[str, object] = {
        "params": best.__dict__,
        "train": {"set": train["dataset"], **run_modes(train, best)},
        "default": FusionParams().__dict__,
    }
    for path in args.check or []:
        with open(path, "rb") as handle:
            check = pickle.load(handle)
        report[f"{check['dataset']}/{check['split']}"] = {
            "chosen": run_modes(check, best),
            "default": run_modes(check, FusionParams()),
        }
    return report


def partial(args: argparse.Namespace) -> dict[str, object]:
    """Hybrid over a partly embedded library (indexing is keyword first, meaning next):
    a seeded share of the documents has no vectors yet, so dense cannot return them.
    Compares fusion that ranks those by keyword alone (production) with fusion that
    treats them as not found by dense, and with BM25 alone. No constant is chosen here."""
    report: dict[str, object] = {}
    params = FusionParams()
    for path in args.cache:
        with open(path, "rb") as handle:
            cache = pickle.load(handle)
        lists = doc_lists(cache, params.depth)
        documents = sorted(set(cache["document_of"].values()))
        rows: dict[str, dict[str, float]] = {}
        for share in (0.0, 0.25, 0.5, 0.75, 1.0):
            rng = random.Random(5)
            waiting = set(rng.sample(documents, round((1.0 - share) * len(documents))))
            fallback, floor, dense_only = {}, {}, {}
            for q, (b, v) in lists.items():
                seen = [x for x in v if x[0] not in waiting]
                fallback[q] = [d for d, _ in fuse(b, seen, params, waiting)]
                floor[q] = [d for d, _ in fuse(b, seen, params)]
                dense_only[q] = [d for d, _ in seen]
            rows[f"embedded_{share:.2f}"] = {
                "hybrid_keyword_fallback": round(ndcg(cache, fallback), 4),
                "hybrid_no_fallback": round(ndcg(cache, floor), 4),
                "bm25": round(
                    ndcg(cache, {q: [d for d, _ in b] for q, (b, _) in lists.items()}), 4
                ),
                "dense": round(ndcg(cache, dense_only), 4),
            }
            print(
                f"{cache['dataset']}/{cache['split']} {share:.2f} embedded: {rows[f'embedded_{share:.2f}']}"
            )
        report[f"{cache['dataset']}/{cache['split']}"] = rows
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    d = sub.add_parser("dump")
    d.add_argument("--beir", required=True)
    d.add_argument("--split", default="train")
    d.add_argument("--home", required=True)
    d.add_argument("--cache", required=True)
    t = sub.add_parser("tune")
    t.add_argument("--train", required=True)
    t.add_argument("--check", action="append")
    pa = sub.add_parser("partial")
    pa.add_argument("--cache", action="append", required=True)
    args = parser.parse_args()
    result = {"dump": dump, "tune": tune, "partial": partial}[args.command](args)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
