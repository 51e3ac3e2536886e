"""Retrieval evaluation on BEIR-format data, through the same pipeline as user files.

Each corpus document is written as a Markdown file (its title as the H1, so the ordinary
Markdown parser makes it the document title) into a scratch folder, indexed by an
ordinary ``Library`` in its own data folder, and queried with ``Library.search``. The
scratch index is keyed by the corpus and the index configuration, so repeated runs (for
each mode, or after a retrieval change) do not re-embed.

Metrics are document-level: a document's rank is that of its best chunk.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import re
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from core.config import Settings, load_settings
from core.errors import DatasetError
from core.library import Library
from core.records import Hit, IndexProgress
from core.retrieval.second_stage import RerankParams

CUTOFFS = (5, 10, 20, 50)
CHUNK_DEPTH = 200  # chunks fetched per query, enough to rank 50 documents


@dataclass(frozen=True)
class BeirSet:
    corpus: dict[str, tuple[str, str]]  # id -> (title, text)
    queries: dict[str, str]
    qrels: dict[str, dict[str, int]]


def load_beir(folder: Path, split: str = "test") -> BeirSet:
    folder = Path(folder)
    qrels_path = folder / "qrels" / f"{split}.tsv"
    for needed in (folder / "corpus.jsonl", folder / "queries.jsonl", qrels_path):
        if not needed.exists():
            raise DatasetError(
                f"{needed} is missing.",
                "Point --beir at a BEIR folder (corpus.jsonl, queries.jsonl, qrels/).",
            )
    corpus: dict[str, tuple[str, str]] = {}
    for _, row in jsonl_rows(folder / "corpus.jsonl", ("_id",)):
        corpus[str(row["_id"])] = (str(row.get("title") or ""), str(row.get("text") or ""))
    queries: dict[str, str] = {}
    for _, row in jsonl_rows(folder / "queries.jsonl", ("_id", "text")):
        queries[str(row["_id"])] = str(row["text"])
    qrels: dict[str, dict[str, int]] = {}
    try:
        with open(qrels_path, encoding="utf-8") as handle:
            for i, line in enumerate(handle):
                parts = line.strip().split("\t")
                if len(parts) < 3 or (i == 0 and not parts[2].lstrip("-").isdigit()):
                    continue  # header
                qid, did = parts[0], parts[1]
                try:
                    score = int(parts[2])
                except ValueError:
                    raise DatasetError(
                        f"{qrels_path}, line {i + 1}: the score {parts[2]!r} is not a whole number.",
                        "Each qrels line is: query-id, corpus-id, score (tab-separated).",
                    ) from None
                if score > 0:
                    qrels.setdefault(qid, {})[did] = score
    except (OSError, UnicodeDecodeError) as exc:
        raise DatasetError(f"{qrels_path} could not be read: {exc}") from exc
    qrels = {q: r for q, r in qrels.items() if q in queries}
    return BeirSet(corpus, queries, qrels)


def jsonl_rows(
    path: Path, required: tuple[str, ...], hint: str | None = None
) -> Iterator[tuple[int, dict[str, Any]]]:
    """The JSON objects of a .jsonl file with their line numbers; a bad line is a
    DatasetError naming it (with ``hint``, what a good line looks like)."""
    try:
        with open(path, encoding="utf-8") as handle:
            for number, line in enumerate(handle, start=1):
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                except ValueError as exc:
                    raise DatasetError(
                        f"{path}, line {number}, is not valid JSON: {exc}.", hint
                    ) from None
                if not isinstance(row, dict):
                    raise DatasetError(f"{path}, line {number}, is not a JSON object.", hint)
                missing = [key for key in required if key not in row]
                if missing:
                    raise DatasetError(
                        f"{path}, line {number}, has no {', '.join(repr(k) for k in missing)}.",
                        hint,
                    )
                yield number, row
    except UnicodeDecodeError as exc:
        raise DatasetError(f"{path} is not UTF-8 text: {exc}.") from exc
    except OSError as exc:
        raise DatasetError(f"{path} could not be read: {exc.strerror or exc}.") from exc


def _safe_name(doc_id: str) -> str:
    return (
        re.sub(r"[^A-Za-z0-9_.-]", "_", doc_id)[:100]
        + "-"
        + hashlib.sha1(doc_id.encode()).hexdigest()[:8]
    )


def materialize(beir: BeirSet, folder: Path) -> dict[str, str]:
    """Write the corpus as Markdown files; returns file path -> corpus id."""
    folder.mkdir(parents=True, exist_ok=True)
    mapping: dict[str, str] = {}
    for doc_id, (title, text) in beir.corpus.items():
        path = folder / f"{_safe_name(doc_id)}.md"
        mapping[str(path)] = doc_id
        body = f"# {title.strip()}\n\n{text.strip()}\n" if title.strip() else f"{text.strip()}\n"
        if not path.exists() or path.read_text(encoding="utf-8") != body:
            path.write_text(body, encoding="utf-8")
    return mapping


def ndcg_at(ranked: list[str], relevant: dict[str, int], k: int) -> float:
    dcg = sum(relevant.get(d, 0) / math.log2(i + 2) for i, d in enumerate(ranked[:k]))
    ideal = sorted(relevant.values(), reverse=True)[:k]
    idcg = sum(r / math.log2(i + 2) for i, r in enumerate(ideal))
    return dcg / idcg if idcg else 0.0


def score_run(run: dict[str, list[str]], qrels: dict[str, dict[str, int]]) -> dict[str, float]:
    totals = {f"recall@{k}": 0.0 for k in CUTOFFS} | {"mrr@10": 0.0, "ndcg@10": 0.0}
    for qid, relevant in qrels.items():
        ranked = run.get(qid, [])
        for k in CUTOFFS:
            totals[f"recall@{k}"] += len(set(ranked[:k]) & set(relevant)) / len(relevant)
        rr = next((1.0 / (i + 1) for i, d in enumerate(ranked[:10]) if d in relevant), 0.0)
        totals["mrr@10"] += rr
        totals["ndcg@10"] += ndcg_at(ranked, relevant, 10)
    n = max(1, len(qrels))
    return {k: round(v / n, 4) for k, v in totals.items()}


@dataclass(frozen=True)
class IndexedBeir:
    """A BEIR set indexed in its scratch library, ready to be searched."""

    beir: BeirSet
    library: Library
    mapping: dict[str, str]  # indexed file path -> corpus id
    root: Path
    index_s: float
    chunks_embedded: int
    failed: int


@contextlib.contextmanager
def indexed_beir(
    beir_dir: Path,
    *,
    split: str = "test",
    settings: Settings | None = None,
    progress: Callable[[IndexProgress], None] | None = None,
    scratch: Path | None = None,
) -> Iterator[IndexedBeir]:
    """The set's scratch library (built, or brought up to date), open until the block ends."""
    beir_dir = Path(beir_dir).resolve()
    beir = load_beir(beir_dir, split)
    base = settings or load_settings()
    corpus_file = beir_dir / "corpus.jsonl"
    key = hashlib.sha1(
        f"{corpus_file}|{corpus_file.stat().st_size}|{corpus_file.stat().st_mtime}".encode()
    ).hexdigest()[:12]
    # Resolved: the indexed paths are the real ones, so a scratch folder reached through a
    # link (moved to a bigger disk) is still the same index.
    root = (scratch or (base.home / "eval" / f"{beir_dir.name}-{key}")).resolve()
    docs = root / "docs"
    mapping = materialize(beir, docs)
    eval_settings = replace(base, home=root / "home")
    started = time.monotonic()
    with Library(eval_settings) as library:
        report = library.index([docs], progress=progress)
        # A scratch index built with another model switches to this one in the background
        # (core/indexing/reembed.py); the run must not search with the old one meanwhile.
        library.models.wait()
        # Nor with a keyword index still being rebuilt in another format.
        library.keyword.wait_for_merge()
        yield IndexedBeir(
            beir,
            library,
            mapping,
            root,
            time.monotonic() - started,
            report.chunks_embedded,
            report.failed,
        )


def ranked_documents(indexed: IndexedBeir, hits: Iterable[Hit]) -> list[str]:
    """Corpus ids in the order of their best hit."""
    ranked: list[str] = []
    for hit in hits:
        doc_id = indexed.mapping.get(hit.path)
        if doc_id is not None and doc_id not in ranked:
            ranked.append(doc_id)
    return ranked


def evaluate(
    beir_dir: Path,
    *,
    split: str = "test",
    modes: Iterable[str] = ("hybrid",),
    settings: Settings | None = None,
    progress: Callable[[IndexProgress], None] | None = None,
    scratch: Path | None = None,
) -> dict[str, object]:
    with indexed_beir(
        beir_dir, split=split, settings=settings, progress=progress, scratch=scratch
    ) as indexed:
        beir, library = indexed.beir, indexed.library
        stats = library.status()
        second_stage = describe_second_stage(library.retriever.second_stage)
        # The fusion learns from a library's questions (core/retrieval/fusion.py); each
        # run starts from a new library's record, so that runs can be compared.
        library.retriever.calibration.reset()
        results: dict[str, dict[str, float]] = {}
        for mode in modes:
            run: dict[str, list[str]] = {}
            t0 = time.monotonic()
            for qid in beir.qrels:
                hits = library.search(beir.queries[qid], k=CHUNK_DEPTH, mode=mode)
                run[qid] = ranked_documents(indexed, hits)
            scores = score_run(run, beir.qrels)
            scores["query_ms"] = round(1000 * (time.monotonic() - t0) / max(1, len(beir.qrels)), 2)
            results[mode] = scores
    first = next(iter(results))
    summary: dict[str, object] = {
        "dataset": beir_dir.name,
        "split": split,
        "queries": len(beir.qrels),
    }
    summary["mode"] = first
    summary.update(results[first])
    summary["by_mode"] = results
    summary["documents"] = len(beir.corpus)
    summary["chunks"] = stats["chunks"]
    summary["index_s"] = round(indexed.index_s, 1)
    summary["chunks_embedded"] = indexed.chunks_embedded
    summary["failed"] = indexed.failed
    summary["scratch"] = os.fspath(indexed.root)
    summary["second_stage"] = second_stage
    return summary


def describe_second_stage(params: RerankParams | None) -> str:
    """The second stage a run's searches used, in words ("off": switched off, or a model
    without word-piece states, such as multilingual-e5's engine)."""
    if params is None:
        return "off"
    return (
        f"maxsim over the top {params.depth} documents, {params.passages_per_document} "
        f"passages each, weight {params.weight}"
    )


def configuration(settings: Settings, second_stage: str = "off") -> dict[str, object]:
    """What produced a run's figures: the model, the fusion and its constants, and the
    second stage (as ``describe_second_stage`` put it for the run's searches)."""
    from core.retrieval.fusion import fusion_params

    params = fusion_params(settings.embedding_model, settings.candidates)
    config: dict[str, object] = {
        "embedding_model": settings.embedding_model,
        "fusion": settings.fusion,
        "candidate_documents": settings.candidates,
    }
    if settings.fusion == "rrf":
        config["rrf_k"] = settings.rrf_k
    else:
        config["bm25_prior"] = params.bm25_prior
        config["confidence_power"] = params.confidence_power
        config["library_tilt"] = params.library_tilt
        config["tilt_reference"] = params.tilt_reference
        config["tilt_pseudo_questions"] = params.tilt_pseudo_questions
    config["second_stage"] = second_stage
    return config


def evaluate_many(
    beir_dirs: Iterable[Path],
    *,
    split: str = "test",
    modes: Iterable[str] = ("hybrid", "bm25", "dense"),
    settings: Settings | None = None,
    progress: Callable[[IndexProgress], None] | None = None,
) -> dict[str, Any]:
    """``evaluate`` on each data set, with "hybrid − best single mode" per set."""
    base = settings or load_settings()
    modes = tuple(modes)
    sets = []
    for beir_dir in beir_dirs:
        summary = evaluate(beir_dir, split=split, modes=modes, settings=base, progress=progress)
        by_mode: dict[str, dict[str, float]] = summary["by_mode"]  # type: ignore[assignment]
        singles = [by_mode[m]["ndcg@10"] for m in ("bm25", "dense") if m in by_mode]
        if "hybrid" in by_mode and singles:
            summary["hybrid_minus_best_single"] = round(
                by_mode["hybrid"]["ndcg@10"] - max(singles), 4
            )
        sets.append(summary)
    second_stage = str(sets[0]["second_stage"]) if sets else "off"
    return {"split": split, "config": configuration(base, second_stage), "sets": sets}
