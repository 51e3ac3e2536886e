"""Choose the fusion and second-stage constants on a training split, from cached candidates.

Running a full ``lectern eval`` per setting would cost minutes each; instead ``dump``
stores, once per data set and split, every query's deep BM25 and dense chunk lists (the
production searches, 1,500 chunks deep), the chunk -> document map, the query embeddings
and the candidate chunks' embeddings. ``tune`` then replays fusion (core/retrieval/fusion.py, the
same code search runs) over a grid of constants on the *training* cache, keeps the best,
and reports it on every other cache with the single modes and RRF measured in the same run.

  .venv/bin/python bench/retrieval_tune.py dump --beir ../shared/data/scifact --split train \\
      --home /tmp/scifact/home --cache /tmp/scifact-train.pkl
  .venv/bin/python bench/retrieval_tune.py tune --train /tmp/scifact-train.pkl \\
      --check /tmp/scifact-test.pkl --check /tmp/squad-test.pkl
  .venv/bin/python bench/retrieval_tune.py tune --train /tmp/scifact-train-e5.pkl \\
      --train /tmp/ru-e5.pkl --check /tmp/de-e5.pkl --check /tmp/scifact-test-e5.pkl
  .venv/bin/python bench/retrieval_tune.py partial --cache /tmp/scifact-test.pkl ...
  .venv/bin/python bench/retrieval_tune.py rerank --train /tmp/scifact-train.pkl \
      --check /tmp/scifact-test.pkl --check /tmp/squad-test.pkl

``joint`` chooses a model's fusion constants, its library tilt and the second stage's
weight together over several training caches of that model (the worst gap to the best
single mode first), replaying the library calibration question by question as `lectern
eval` asks them; the English set is bench/retrieval_sets/en.json:

  .venv/bin/python bench/retrieval_tune.py joint --train /tmp/scifact-train.pkl \
      --train /tmp/en.pkl --train /tmp/de.pkl --train /tmp/it.pkl --check /tmp/fr.pkl
  .venv/bin/python bench/retrieval_tune.py joint --train /tmp/sf-train-e5.pkl \
      --train /tmp/ru-e5.pkl ... --references 0.3,0.4,0.45,0.5 --pseudo-questions 10,5,3,2 \
      --orders 10

``rerank`` chooses the second stage's constants (core/retrieval/second_stage.py) on the training cache the
same way. It needs each passage's token states, which the model makes at query time in
production; they are computed once per cache from its library (recorded in the cache as
``home``) and kept beside it in ``<cache>.tokens.pkl``. ``pieces`` compares, from the
same states, the default second stage over float16 states with it over the sign codes the
library stores (core/embedding/pieces.py):

  .venv/bin/python bench/retrieval_tune.py pieces --train /tmp/scifact-train.pkl

The library at --home must already hold the corpus (``lectern eval`` builds it, under
<data folder>/eval/). The last line printed is one JSON object.
"""

from __future__ import annotations

import argparse
import itertools
import multiprocessing
import os
import pickle
import random
import sys
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.record import emit  # noqa: E402
from core.config import load_settings  # noqa: E402
from core.embedding.models import (  # noqa: E402
    DEFAULT_MODEL_ID,
    embed_queries,
    load_embedder,
    reads_script_of,
)
from core.embedding.pieces import pack, unpack  # noqa: E402
from core.evaluation.beir import (  # noqa: E402
    indexed_beir,
    load_beir,
    materialize,
    ndcg_at,
    score_run,
)
from core.library import Library  # noqa: E402
from core.records import SearchFilters  # noqa: E402
from core.retrieval.fusion import (  # noqa: E402
    FUSIONS,
    FusionContext,
    FusionParams,
    LibraryCalibration,
    best_per_document,
    fuse,
    fusion_params,
    rrf_fuse,
)
from core.retrieval.second_stage import RerankParams, maxsim, passage_order, rerank  # noqa: E402
from core.store.lookup import (  # noqa: E402
    chunk_embeddings,
    embedding_texts,
    live_chunk_documents,
)

DUMP_DEPTH = 1500


def dump(args: argparse.Namespace) -> dict[str, object]:
    beir_dir = Path(args.beir).resolve()
    beir = load_beir(beir_dir, args.split)
    home = Path(args.home)
    mapping = materialize(beir, home.parent / "docs")
    settings = replace(load_settings(), home=home)
    queries = list(beir.qrels)
    with Library(settings) as library:
        by_path = {d.path: d.id for d in library.files.documents()}
        corpus_of = {by_path[p]: cid for p, cid in mapping.items() if p in by_path}
        t0 = time.monotonic()
        # As search embeds them: a model with a query form (e5's "query: ") gets it.
        vectors = embed_queries(library.embedder, [beir.queries[q] for q in queries])
        model_id = library.embedder.model_id
        embed_s = time.monotonic() - t0
        retriever = library.retriever
        rows = {}
        all_chunks: set[int] = set()
        for qid, vector in zip(queries, vectors, strict=True):
            bm25 = library.keyword.search(beir.queries[qid], DUMP_DEPTH)
            keys, sims = retriever.dense_vector(vector, DUMP_DEPTH, SearchFilters())
            dense = list(zip(keys.tolist(), sims.tolist(), strict=True))
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
        "home": str(home.resolve()),
        "model": model_id,
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


def chunk_lists(cache: dict, depth: int):
    """Per query, the BM25 and dense chunks search fetches for ``depth`` documents (chunks
    of documents no longer live left out)."""
    doc_of = cache["document_of"]
    return {
        qid: tuple(prefix([x for x in ranked if x[0] in doc_of], doc_of, depth) for ranked in lists)
        for qid, lists in cache["lists"].items()
    }


def doc_lists(cache: dict, depth: int):
    doc_of = cache["document_of"]
    return {
        qid: (best_per_document(bm25, doc_of), best_per_document(dense, doc_of))
        for qid, (bm25, dense) in chunk_lists(cache, depth).items()
    }


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
    """One training cache: the setting with the best hybrid nDCG@10. Several: the one
    whose hybrid is furthest above its best single mode on the worst of them, ties by
    mean hybrid (a weight that serves English and other languages both, or neither)."""
    trains = []
    for path in args.train:
        with open(path, "rb") as handle:
            trains.append(pickle.load(handle))
    grid = itertools.product(
        [0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.55, 0.6],
        [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0],
    )
    lists = [doc_lists(train, 100) for train in trains]
    singles = [
        max(run_modes(train, FusionParams())[m] for m in ("bm25", "dense")) for train in trains
    ]
    results = []
    for prior, power in grid:
        params = FusionParams(bm25_prior=prior, confidence_power=power)
        scores = [
            ndcg(train, {q: [d for d, _ in fuse(b, v, params)] for q, (b, v) in cached.items()})
            for train, cached in zip(trains, lists, strict=True)
        ]
        mean = sum(scores) / len(scores)
        worst_gap = min(x - single for x, single in zip(scores, singles, strict=True))
        key = (mean,) if len(trains) == 1 else (round(worst_gap, 6), mean)
        results.append((key, scores, params))
    results.sort(key=lambda r: tuple(-x for x in r[0]))
    for _key, scores, params in results[:10]:
        print(f"train {' '.join(f'{x:.4f}' for x in scores)}  {params}")
    best = results[0][2]
    report: dict[str, object] = {
        "params": best.__dict__,
        "train": [{"set": t["dataset"], **run_modes(t, best)} for t in trains],
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


RERANK_GRID = {
    "depth": (10, 20, 30),
    "passages_per_document": (1, 2),
    "weight": (0.5, 0.75, 1.0, 1.5, 2.0, 3.0),
}


def _short_lists(cache: dict, params: FusionParams):
    """Per query: fused documents and each document's chunks in shown order, as search
    builds them from the lists it fetched."""
    doc_of = cache["document_of"]
    out = {}
    for qid, (bm25, dense) in chunk_lists(cache, params.depth).items():
        fused = fuse(best_per_document(bm25, doc_of), best_per_document(dense, doc_of), params)
        out[qid] = (fused, passage_order([bm25, dense], doc_of))
    return out


def _short_list_passages(short: dict) -> set[int]:
    """Every passage the ``rerank`` grid can ask for."""
    deepest = max(RERANK_GRID["depth"])
    most = max(RERANK_GRID["passages_per_document"])
    return {
        c
        for fused, chunks_of in short.values()
        for d, _ in fused[:deepest]
        for c in chunks_of.get(d, [])[:most]
    }


def _token_states(cache_path: str, cache: dict, needed: set[int]) -> dict:
    """Token states of the ``needed`` passages and of every query, computed once with the
    library's model and kept in ``<cache>.tokens.pkl``."""
    side = Path(cache_path + ".tokens.pkl")
    states: dict = {"chunks": {}, "queries": {}}
    if side.exists():
        with open(side, "rb") as handle:
            states = pickle.load(handle)
    missing = sorted(needed - states["chunks"].keys())
    missing_q = [q for q in cache["lists"] if q not in states["queries"]]
    if missing or missing_q:
        settings = replace(load_settings(), home=Path(cache["home"]))
        with Library(settings) as library:
            embedder = library.embedder
            texts = embedding_texts(library.db, missing)
            ordered = sorted(texts, key=lambda c: len(texts[c]))
            for i in range(0, len(ordered), 256):
                part = ordered[i : i + 256]
                for chunk, matrix in zip(
                    part, embedder.token_vectors([texts[c] for c in part]), strict=True
                ):
                    states["chunks"][chunk] = matrix.astype("float16")
                print(f"token states {i + len(part)}/{len(ordered)}", flush=True)
            queries = embedder.token_vectors([cache["queries"][q] for q in missing_q])
            states["queries"].update(zip(missing_q, queries, strict=True))
        with open(side, "wb") as handle:
            pickle.dump(states, handle)
    return states


def _late_scores(short: dict, states: dict) -> dict[str, dict[int, float]]:
    """Per query, MaxSim of every passage the grid can ask for (computed once: the grid
    only mixes them)."""
    deepest = max(RERANK_GRID["depth"])
    most = max(RERANK_GRID["passages_per_document"])
    out = {}
    for q, (fused, chunks_of) in short.items():
        query = states["queries"][q].astype("float32")
        chunks = {c for d, _ in fused[:deepest] for c in chunks_of.get(d, [])[:most]}
        out[q] = {
            c: maxsim(query, states["chunks"][c].astype("float32"))
            for c in chunks
            if c in states["chunks"]
        }
    return out


def _reranked(short: dict, late: dict, params: RerankParams) -> dict[str, list[int]]:
    return {
        q: [
            d
            for d, _ in rerank(
                fused,
                chunks_of,
                lambda ids, q=q: {c: late[q][c] for c in ids if c in late[q]},
                params,
            )
        ]
        for q, (fused, chunks_of) in short.items()
    }


def rerank_tune(args: argparse.Namespace) -> dict[str, object]:
    fusion = FusionParams()
    sets = []
    for path in [args.train, *(args.check or [])]:
        with open(path, "rb") as handle:
            cache = pickle.load(handle)
        short = _short_lists(cache, fusion)
        states = _token_states(path, cache, _short_list_passages(short))
        sets.append((cache, short, _late_scores(short, states)))
    train, train_short, train_states = sets[0]
    results = []
    for depth, per_document, weight in itertools.product(*RERANK_GRID.values()):
        params = RerankParams(depth, per_document, weight)
        results.append((ndcg(train, _reranked(train_short, train_states, params)), params))
    results.sort(key=lambda r: -r[0])
    for score, params in results[:10]:
        print(f"train {score:.4f}  {params}")
    best = results[0][1]
    report: dict[str, object] = {"chosen": best.__dict__, "default": RerankParams().__dict__}
    for cache, short, states in sets:
        first = {q: [d for d, _ in fused] for q, (fused, _) in short.items()}
        row = {
            "first_stage": round(ndcg(cache, first), 4),
            "chosen": round(ndcg(cache, _reranked(short, states, best)), 4),
            "default": round(ndcg(cache, _reranked(short, states, RerankParams())), 4),
        }
        report[f"{cache['dataset']}/{cache['split']}"] = row
        print(cache["dataset"], cache["split"], row, flush=True)
    return report


def _packed(states: dict) -> dict:
    """``states`` with each passage's word pieces as the library stores them: packed to
    sign codes and unpacked (core/embedding/pieces.py), the questions' left float."""
    chunks = {}
    for chunk, matrix in states["chunks"].items():
        dim = matrix.shape[1]
        rows, _ = unpack([pack(matrix.astype("float32"))], dim)
        chunks[chunk] = rows
    return {"chunks": chunks, "queries": states["queries"]}


def pieces_table(args: argparse.Namespace) -> dict[str, object]:
    """nDCG@10 of the default second stage over float16 word-piece states (encoded
    again, as search once did) and over the sign codes the library keeps, per set."""
    report: dict[str, object] = {}
    for path in [args.train, *(args.check or [])]:
        with open(path, "rb") as handle:
            cache = pickle.load(handle)
        short = _short_lists(cache, FusionParams())
        states = _token_states(path, cache, _short_list_passages(short))
        first = {q: [d for d, _ in fused] for q, (fused, _) in short.items()}
        row = {
            "first_stage": round(ndcg(cache, first), 4),
            "float16_states": round(
                ndcg(cache, _reranked(short, _late_scores(short, states), RerankParams())), 4
            ),
            "sign_codes": round(
                ndcg(
                    cache,
                    _reranked(short, _late_scores(short, _packed(states)), RerankParams()),
                ),
                4,
            ),
        }
        report[f"{cache['dataset']}/{cache['split']}"] = row
        print(cache["dataset"], cache["split"], row, flush=True)
    return report


STORED_GRID = {
    "depth": (20, 30, 50, 80),
    "passages_per_document": (1, 2, 3),
    "weight": (0.75, 1.0, 1.5),
}


def _first_stages(indexed) -> dict[str, tuple]:
    """Per question, as a hybrid search makes them: the candidate lists, the fused
    documents and the question's word-piece states (one forward pass, as search runs)."""
    library = indexed.library
    retriever = library.retriever
    retriever.calibration.reset()
    out = {}
    for qid in indexed.beir.qrels:
        query = indexed.beir.queries[qid]
        vector, states = library.embedder.query_with_states(query)
        found = retriever.candidate_lists(query, "hybrid", SearchFilters(), vector)
        out[qid] = (query, found, retriever.rank_documents(found, "hybrid"), states)
    return out


def _stored_ndcg(
    indexed, firsts: dict[str, tuple], corpus_of: dict[int, str], params: RerankParams
) -> float:
    """nDCG@10 of the documents in the second stage's order (search's hits list them in
    that order: each document's first passage comes in the first round)."""
    retriever = indexed.library.retriever
    run = {}
    for qid, (query, found, ranked, states) in firsts.items():
        reranked, _ = retriever.rerank(query, ranked, found, params, states)
        run[qid] = [corpus_of[d] for d, _ in reranked[:50] if d in corpus_of]
    return score_run(run, indexed.beir.qrels)["ndcg@10"]


def stored_tune(args: argparse.Namespace) -> dict[str, object]:
    """The second stage's depth, passages per document and weight over the word pieces
    the library stores (core/store/pieces.py): reading them costs little, so deeper
    lists and more passages per document can be afforded. Chosen on ``--split`` train,
    reported on test; the first stage runs once per question and each setting replays
    only the second."""
    settings = replace(load_settings(), home=Path(args.home)) if args.home else None
    results: dict[str, dict[str, float]] = {}
    grid = [RerankParams(d, p, w) for d, p, w in itertools.product(*STORED_GRID.values())]
    grid.append(RerankParams())
    for split in ("train", "test"):
        with indexed_beir(Path(args.beir), split=split, settings=settings) as indexed:
            firsts = _first_stages(indexed)
            by_path = {d.path: d.id for d in indexed.library.files.documents()}
            corpus_of = {by_path[p]: c for p, c in indexed.mapping.items() if p in by_path}
            scores = {p: _stored_ndcg(indexed, firsts, corpus_of, p) for p in dict.fromkeys(grid)}
            first = _stored_ndcg(indexed, firsts, corpus_of, RerankParams(weight=0.0))
        results[split] = {"first_stage": round(first, 4)} | {
            f"{p.depth}/{p.passages_per_document}/{p.weight}": round(v, 4)
            for p, v in scores.items()
        }
        if split == "train":
            best = max(scores, key=lambda p: (round(scores[p], 4), p == RerankParams()))
        print(
            split,
            "first stage",
            round(first, 4),
            "default",
            round(scores[RerankParams()], 4),
            flush=True,
        )
    chosen = f"{best.depth}/{best.passages_per_document}/{best.weight}"
    return {
        "chosen": best.__dict__,
        "default": RerankParams().__dict__,
        "train": {
            "first_stage": results["train"]["first_stage"],
            "chosen": results["train"][chosen],
        },
        "test": {"first_stage": results["test"]["first_stage"], "chosen": results["test"][chosen]},
        "grid": results,
    }


JOINT_GRID = {
    "bm25_prior": (0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.6),
    "confidence_power": (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0),
    "library_tilt": (0.0, 1.0, 2.0, 3.0, 4.0),
    "weight": (0.0, 0.5, 0.75, 1.0, 1.5),
}


def _joint_set(path: str) -> dict:
    """A cache ready for the joint grid: every document's first passage in shown order
    (whatever the fusion constants, a re-scored document is scored by it) and its MaxSim."""
    with open(path, "rb") as handle:
        cache = pickle.load(handle)
    chunks_of = {
        qid: passage_order(lists, cache["document_of"])
        for qid, lists in chunk_lists(cache, 100).items()
    }
    needed = {chunks[0] for by_doc in chunks_of.values() for chunks in by_doc.values()}
    model = cache.get("model", DEFAULT_MODEL_ID)  # caches dumped before it was recorded
    late: dict = {}
    if not hasattr(load_embedder(model), "token_vectors"):
        needed = set()  # no word-piece states: no second stage (e5)
    states = _token_states(path, cache, needed) if needed else {"queries": {}}
    for qid, by_doc in chunks_of.items() if needed else ():
        query = states["queries"][qid].astype("float32")
        late[qid] = {
            chunks[0]: maxsim(query, states["chunks"][chunks[0]].astype("float32"))
            for chunks in by_doc.values()
            if chunks[0] in states["chunks"]
        }
    lists = doc_lists(cache, 100)
    singles = run_modes(cache, FusionParams())
    return {
        "cache": cache,
        "lists": lists,
        "chunks_of": chunks_of,
        "late": late,
        "best_single": max(singles["bm25"], singles["dense"]),
        # As search answers them: a question in a script the model never learned (MiniLM
        # and Russian) by keyword alone.
        "keyword_alone": {
            q
            for q, (bm25, _) in lists.items()
            if bm25 and not reads_script_of(model, cache["queries"][q])
        },
    }


def _joint_ndcg(prepared: dict, fusion: FusionParams, weight: float) -> float:
    """nDCG@10 of the production hybrid: the adaptive fusion, learning the library's record
    (core/retrieval/fusion.py LibraryCalibration) from a new one, question by question in
    the set's order as `lectern eval` asks them, then the second stage."""
    lists, keyword_alone = prepared["lists"], prepared["keyword_alone"]
    context = FusionContext(fusion, 60, lambda docs: frozenset(), LibraryCalibration())
    short = {
        q: (FUSIONS["adaptive"](bm25, dense, context), prepared["chunks_of"][q])
        for q, (bm25, dense) in lists.items()
        if q not in keyword_alone
    }
    # Weight 0 leaves the fused order as it is (``rerank``).
    ranked = _reranked(short, prepared["late"], RerankParams(weight=weight))
    ranked.update({q: [d for d, _ in lists[q][0]] for q in keyword_alone})
    return ndcg(prepared["cache"], ranked)


def _in_order(prepared: dict, seed: int) -> dict:
    """The set with its questions asked in another order (seed 0: the set's own). The
    library's record learns question by question, so a setting can win on a set's own
    order by where its few telling questions happen to fall."""
    if seed == 0:
        return prepared
    order = list(prepared["lists"])
    random.Random(seed).shuffle(order)
    return {**prepared, "lists": {q: prepared["lists"][q] for q in order}}


# Filled in the parent before the workers fork, so each worker reads the prepared caches
# without pickling them per setting: each set in every order asked.
_JOINT_SETS: list[list[dict]] = []


def _joint_scores(setting: tuple[FusionParams, float]) -> list[float]:
    """Each set's nDCG@10, the mean over its orders."""
    fusion, weight = setting
    return [
        sum(_joint_ndcg(prepared, fusion, weight) for prepared in orders) / len(orders)
        for orders in _JOINT_SETS
    ]


def _ranked_settings(
    settings: list[tuple[FusionParams, float]], trains: list[dict], orders: int, workers: int
) -> list[tuple[tuple[float, float], FusionParams, float]]:
    """``settings`` by the rule (worst gap to the best single mode, then mean), each set's
    score the mean over its first ``orders`` question orders. Over several orders the
    worst gaps are compared to three places: one question's passage a place lower moves a
    40-question set's nDCG@10 by about 0.003 in one order, so ten-order means under
    0.0005 apart differ by which order put which question where, not by the setting. (In
    one order, six places, as the rule has always been run.)"""
    _JOINT_SETS[:] = [[_in_order(t, seed) for seed in range(orders)] for t in trains]
    with multiprocessing.get_context("fork").Pool(workers) as pool:
        all_scores = pool.map(_joint_scores, settings, chunksize=4)
    places = 6 if orders == 1 else 3
    results = []
    for (fusion, weight), scores in zip(settings, all_scores, strict=True):
        worst = min(x - t["best_single"] for x, t in zip(scores, trains, strict=True))
        results.append(((round(worst, places), sum(scores) / len(scores)), fusion, weight))
    results.sort(key=lambda r: (-r[0][0], -r[0][1]))  # stable: ties keep grid order
    return results


def _floats(text: str) -> tuple[float, ...]:
    return tuple(float(x) for x in text.split(","))


def joint(args: argparse.Namespace) -> dict[str, object]:
    """Fusion constants, the library calibration and the second stage's weight chosen
    together, over several training caches of one model, by the rule ``tune`` uses for
    several: the setting whose hybrid is furthest above its best single mode on the worst
    of them, ties by mean, then by grid order (the calibration's pseudo questions as given,
    most first: a record that trusts its start more). A model without word-piece states
    (e5) has no second stage. The reference share and pseudo questions are the model's
    shipped ones unless ``--references`` / ``--pseudo-questions`` list others.
    ``--orders N``: the rule's ``--shortlist`` best are ranked again with each set's score
    the mean over N question orders, the set's own first (``_in_order``)."""
    trains = [_joint_set(path) for path in args.train]
    checks = [_joint_set(path) for path in args.check or []]
    model = trains[0]["cache"].get("model", DEFAULT_MODEL_ID)
    shipped_fusion = fusion_params(model)
    has_second_stage = all(t["late"] for t in trains)
    weights = JOINT_GRID["weight"] if has_second_stage else (0.0,)
    references = _floats(args.references) if args.references else (shipped_fusion.tilt_reference,)
    pseudos = (
        _floats(args.pseudo_questions)
        if args.pseudo_questions
        else (shipped_fusion.tilt_pseudo_questions,)
    )
    settings = [
        (
            FusionParams(
                bm25_prior=prior,
                confidence_power=power,
                library_tilt=tilt,
                tilt_reference=reference,
                tilt_pseudo_questions=pseudo,
            ),
            weight,
        )
        for prior, power, tilt, reference, pseudo, weight in itertools.product(
            JOINT_GRID["bm25_prior"],
            JOINT_GRID["confidence_power"],
            JOINT_GRID["library_tilt"],
            references,
            pseudos,
            weights,
        )
        # Without a tilt the record does nothing: one of those settings is enough.
        if tilt or (reference == references[0] and pseudo == pseudos[0])
    ]
    results = _ranked_settings(settings, trains, 1, args.workers)
    if args.orders > 1:
        # Asking every setting in every order costs the grid that many times over: the
        # rule's shortlist in the sets' own order is asked again in ``orders`` orders.
        shortlist = [(fusion, weight) for _, fusion, weight in results[: args.shortlist]]
        results = _ranked_settings(shortlist, trains, args.orders, args.workers)
    for (worst, mean), fusion, weight in results[:10]:
        print(
            f"worst gap {worst:+.4f} mean {mean:.4f}  prior {fusion.bm25_prior} "
            f"power {fusion.confidence_power} tilt {fusion.library_tilt} "
            f"reference {fusion.tilt_reference} pseudo {fusion.tilt_pseudo_questions} "
            f"weight {weight}"
        )
    chosen = results[0][1:]
    shipped = (shipped_fusion, RerankParams().weight if has_second_stage else 0.0)
    report: dict[str, object] = {
        "model": model,
        "settings": len(settings),
        "chosen": {**chosen[0].__dict__, "weight": chosen[1]},
        "shipped": {**shipped[0].__dict__, "weight": shipped[1]},
    }
    for prepared in trains + checks:
        cache = prepared["cache"]
        row = {"best_single": round(prepared["best_single"], 4)}
        for label, (fusion, weight) in (("chosen", chosen), ("shipped", shipped)):
            row[label] = round(_joint_ndcg(prepared, fusion, weight), 4)
            if args.orders > 1:
                asked = [_in_order(prepared, seed) for seed in range(args.orders)]
                mean = sum(_joint_ndcg(p, fusion, weight) for p in asked) / len(asked)
                row[f"{label}_over_orders"] = round(mean, 4)
        report[f"{cache['dataset']}/{cache['split']}"] = row
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
    t.add_argument("--train", action="append", required=True)
    t.add_argument("--check", action="append")
    pa = sub.add_parser("partial")
    pa.add_argument("--cache", action="append", required=True)
    r = sub.add_parser("rerank")
    r.add_argument("--train", required=True)
    r.add_argument("--check", action="append")
    pc = sub.add_parser("pieces")
    pc.add_argument("--train", required=True)
    pc.add_argument("--check", action="append")
    st = sub.add_parser("stored")
    st.add_argument("--beir", required=True)
    st.add_argument("--home", help="data folder holding eval/ (default: the usual one)")
    j = sub.add_parser("joint")
    j.add_argument("--train", action="append", required=True)
    j.add_argument("--check", action="append")
    j.add_argument("--references", help="calibration reference shares to try, e.g. 0.3,0.45")
    j.add_argument("--pseudo-questions", help="a new record's pseudo questions, e.g. 10,5,3,2")
    j.add_argument(
        "--orders",
        type=int,
        default=1,
        help="score each set as the mean over this many question orders (its own first)",
    )
    j.add_argument(
        "--shortlist",
        type=int,
        default=600,
        help="with --orders: how many of the best settings in the sets' own order are asked",
    )
    j.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    args = parser.parse_args()
    commands = {
        "dump": dump,
        "tune": tune,
        "partial": partial,
        "rerank": rerank_tune,
        "joint": joint,
        "stored": stored_tune,
        "pieces": pieces_table,
    }
    result = commands[args.command](args)
    emit("retrieval_tune", result)


if __name__ == "__main__":
    main()
