"""Does `lectern eval --library` tell the truth? Its self-made figures beside real qrels.

For each corpus, indexed as a folder through the whole engine: the real judgements'
nDCG@10 per mode (``lectern eval --beir``'s own code) beside the library check's
recall@10 per mode (core/evaluation/library_check.py, questions made without a model), with each
embedding model where it is measured. The check is useful when it ranks the modes and
the models in the same order as the real judgements; ``agree`` says whether it does.

Corpora: squad-small (English), the German, Russian and Arabic sets written for Lectern
(bench/retrieval_multilingual.py, with the same distractors), SciFact test (English,
5,183 abstracts: default model only, as indexing it with the multilingual model takes
long on 2 cores), and the sample documents (no judgements: the check alone).

Usage: .venv/bin/python bench/library_check.py [--skip-scifact] [--sets ...] [--llm]
(``--llm``: the questions written by a real model, bench/llm_server.py, as the app writes
them when a model runs.)
The last line printed is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.record import emit  # noqa: E402
from bench.retrieval_multilingual import write_beir  # noqa: E402
from core.config import Settings  # noqa: E402
from core.embedding.models import DEFAULT_MODEL_ID, MULTILINGUAL_MODEL_ID  # noqa: E402
from core.evaluation.beir import evaluate  # noqa: E402
from core.evaluation.library_check import DEPTH, check_library, model_writer  # noqa: E402
from core.library import Library  # noqa: E402

DATA = ROOT.parent / "shared" / "data"
MODES = ("hybrid", "bm25", "dense")
RECALL = f"recall@{DEPTH}"


def _order(scores: dict[str, float]) -> list[str]:
    return sorted(scores, key=lambda k: -scores[k])


def _check(home: Path, compare: bool, llm_url: str | None) -> dict[str, Any]:
    """The library check on the library in ``home`` (its kept question set, made on the
    first model's run, is reused by the second); ``llm_url``: questions written by the
    model served there, as the app does when a model runs."""
    llm = {"llm_kind": "openai", "llm_url": llm_url} if llm_url else {}
    with Library(Settings(home=home, **llm)) as library:
        writer = model_writer(library) if llm_url else None
        if llm_url and writer is None:
            raise SystemExit(f"the model server at {llm_url} does not answer")
        return check_library(library, compare=compare, ask_model=writer)


def run_set(
    name: str, beir: Path, scratch: Path, models: tuple[str, ...], llm_url: str | None = None
) -> dict[str, Any]:
    out: dict[str, Any] = {"qrels": {}, "check": {}, "check_mrr": {}}
    # One scratch library for both models (the second re-embeds it, as a switch does),
    # so the kept question set's files are the same files.
    root = scratch / name
    for model in models:
        t0 = time.monotonic()
        settings = Settings(home=scratch / "home", embedding_model=model)
        summary = evaluate(beir, modes=MODES, settings=settings, scratch=root)
        by_mode = summary["by_mode"]
        assert isinstance(by_mode, dict)
        out["qrels"][model] = {m: by_mode[m]["ndcg@10"] for m in MODES}
        report = _check(root / "home", compare=len(models) == 1, llm_url=llm_url)
        out["check"][model] = {m: report["modes"][m][RECALL] for m in MODES}
        out["check_mrr"][model] = {m: report["modes"][m][f"mrr@{DEPTH}"] for m in MODES}
        if "models" in report:
            out["check_scratch_models"] = {
                k: v["hybrid"][RECALL] for k, v in report["models"].items() if isinstance(v, dict)
            }
        out["questions"] = report["questions"]
        out["recipe"] = report["recipe"]
        out["lines"] = report["lines"]
        print(f"{name} / {model}: {time.monotonic() - t0:.0f} s", file=sys.stderr, flush=True)
    # Recall@10 saturates on easy sets; the order is read from MRR@10 beside nDCG@10.
    out["modes_order"] = {
        model: {"qrels": _order(out["qrels"][model]), "check": _order(out["check_mrr"][model])}
        for model in models
    }
    out["modes_agree"] = {
        model: order["qrels"] == order["check"] for model, order in out["modes_order"].items()
    }
    if len(models) == 2:
        # The model changes meaning search (keyword search is the same with either), so
        # the verdict compares models on it; on hybrid too, for the record.
        for mode in ("dense", "hybrid"):
            q = {m: out["qrels"][m][mode] for m in models}
            c = {m: out["check_mrr"][m][mode] for m in models}
            out[f"models_agree_{mode}"] = _order(q)[0] == _order(c)[0]
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--skip-scifact", action="store_true")
    parser.add_argument(
        "--sets",
        default="squad-small,de,ru,ar,scifact,sample-docs",
        help="comma-separated, from the default list",
    )
    parser.add_argument(
        "--llm",
        action="store_true",
        help="questions written by a real model (bench/llm_server.py, SmolLM2-135M by "
        "default) instead of half-remembered sentences",
    )
    parser.add_argument("--llm-model", default="", help="a GGUF file for --llm")
    args = parser.parse_args(argv)
    if args.llm:
        from bench.llm_server import LLMServer

        model = Path(args.llm_model) if args.llm_model else None
        with LLMServer(ctx=4096, model=model) as server:
            return _run(args, server.url)
    return _run(args, None)


def _run(args: argparse.Namespace, llm_url: str | None) -> int:
    wanted = set(args.sets.split(","))
    if args.skip_scifact:
        wanted.discard("scifact")
    started = time.monotonic()
    results: dict[str, Any] = {}
    both = (DEFAULT_MODEL_ID, MULTILINGUAL_MODEL_ID)
    with tempfile.TemporaryDirectory(prefix="lectern-check-") as tmp:
        scratch = Path(tmp)
        sets: list[tuple[str, Path | None, tuple[str, ...]]] = [
            ("squad-small", DATA / "squad-small" / "beir", both),
            ("de", None, both),
            ("ru", None, both),
            ("ar", None, both),
            ("scifact", DATA / "scifact", (DEFAULT_MODEL_ID,)),
        ]
        for name, beir, models in sets:
            if name not in wanted:
                continue
            beir = beir or write_beir(name, 300, scratch / "beir")
            results[name] = run_set(name, beir, scratch, models, llm_url)
            print(json.dumps({name: results[name]}), file=sys.stderr, flush=True)
        if "sample-docs" in wanted:
            docs = ROOT / "resources" / "sample-docs"
            with Library(Settings(home=scratch / "sample")) as library:
                library.index([docs])
            sample = _check(scratch / "sample", compare=True, llm_url=llm_url)
            results["sample-docs"] = {
                "questions": sample["questions"],
                "check": {m: sample["modes"][m][RECALL] for m in MODES},
                "lines": sample["lines"],
            }
    emit(
        "library_check",
        {
            "bench": "library_check",
            "depth": DEPTH,
            "elapsed_s": round(time.monotonic() - started, 1),
            "sets": results,
        },
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
