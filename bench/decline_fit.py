"""Fit the extractive answer's decline model (core/generation/decline.py) and report it
leave-one-article-out and leave-one-document-set-out.

Two steps:

  collect  every question of the training data asked of a real library the way `ask`
           asks it (hybrid search, the settings' top k, core.generation.extractive),
           never declining; for each, the signals the model weighs, whether the quote
           holds a gold answer, whether it cites the gold document, and what the rule
           cascade the model replaces decided. Rows go to --cache (resumable).
  fit      a logistic model over the signals, each data set weighted equally; the
           threshold chosen on the training folds; every held-out fold reported with the
           figures the issue asks for, and the cascade's on the same questions.
  misses   for each answerable question whose quote misses the answer, where the answer
           was: in no passage given, in no unit, or in a unit another outscored.

Data (all training; the sets kept outside the project are not here):
  squad-small (Normans, Computational_complexity_theory) and squad-train (eight articles),
  each its own library, with the written sets asked of the same library
  (squad_out_of_corpus, squad_absent_facts over squad-small; squad_train_out_of_corpus
  over squad-train); the real-document sets (realdocs_*.jsonl over
  ../shared/data/realdocs, made.jsonl over bench/answer_sets/made/), one library of all
  those documents, as a person's library would be.

Usage:
  .venv/bin/python bench/decline_fit.py collect [--only realdocs|squad] [--limit N]
  .venv/bin/python bench/decline_fit.py fit [--write]
  .venv/bin/python bench/decline_fit.py misses [--only realdocs|squad]
The last line printed is one JSON object with the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.record import emit  # noqa: E402
from core.config import Settings  # noqa: E402
from core.embedding.models import load_embedder  # noqa: E402
from core.evaluation.answers import (  # noqa: E402
    AnswerQuestion,
    contains_gold,
    load_answer_set,
    load_questions,
    write_paragraphs,
)
from core.generation import extractive  # noqa: E402
from core.generation.citations import SpanFinder  # noqa: E402
from core.generation.decline import DeclineModel, DeclineSignals  # noqa: E402
from core.generation.qa import answer_finder  # noqa: E402
from core.library import Library  # noqa: E402
from core.records import Hit  # noqa: E402
from core.retrieval.search import ANSWER_LEAD  # noqa: E402

DATA = ROOT.parent / "shared" / "data"
SETS = ROOT / "bench" / "answer_sets"
MADE = SETS / "made"
SCRATCH = Path(os.environ.get("LECTERN_DECLINE_SCRATCH", "/tmp/lectern-decline"))
CACHE = SCRATCH / "signals.jsonl"
TARGET_CONTAINS = os.environ.get("LECTERN_DECLINE_TARGET", "contains") == "contains"
REAL_SETS = ("realdocs_pdf_a", "realdocs_pdf_b", "realdocs_office", "made")

# The bars: (figure, at least / at most, value).
BARS = {
    "squad": {"answerable_right": 0.85, "near_miss_declined": 0.30, "wrongly_declined": 0.06},
    "real": {"answerable_right": 0.75, "near_miss_declined": 0.50, "wrongly_declined": 0.08},
}


@dataclass(frozen=True)
class Library_:
    name: str
    folders: tuple[Path, ...]
    questions: tuple[tuple[str, str, AnswerQuestion], ...]  # (set, fold, question)


def _squad(name: str, path: Path, written: Sequence[tuple[str, str]]) -> Library_:
    answer_set = load_answer_set(path)
    folder = SCRATCH / name / "docs"
    write_paragraphs(answer_set.paragraphs, folder)
    article_of = {p.name: p.name.rsplit("-", 1)[0] for p in answer_set.paragraphs}
    rows = [(name, article_of.get(q.document or "", name), q) for q in answer_set.questions]
    for file, group in written:
        if not (SETS / f"{file}.jsonl").exists():
            continue
        for q in load_questions(SETS / f"{file}.jsonl", unanswerable=group):
            rows.append((name, file, q))
    return Library_(name, (folder,), tuple(rows))


def libraries(only: str | None) -> list[Library_]:
    out: list[Library_] = []
    if only in (None, "squad"):
        out.append(
            _squad(
                "squad-small",
                DATA / "squad-small" / "squad_small.json",
                [("squad_out_of_corpus", "out_of_corpus"), ("squad_absent_facts", "unanswerable")],
            )
        )
        out.append(
            _squad(
                "squad-train",
                DATA / "squad-train" / "squad_train.json",
                [("squad_train_out_of_corpus", "out_of_corpus")],
            )
        )
    if only in (None, "realdocs"):
        rows = []
        for name in REAL_SETS:
            path = SETS / f"{name}.jsonl"
            if path.exists():
                rows += [("realdocs", name, q) for q in load_questions(path)]
        out.append(Library_("realdocs", (DATA / "realdocs", MADE), tuple(rows)))
    return out


def _key(library: str, fold: str, q: AnswerQuestion) -> str:
    return f"{library}\x1f{fold}\x1f{q.question}"


def _indexed(lib: Library_, embedder: Any) -> Library:
    """The data set's library in the scratch folder, brought up to date."""
    home = SCRATCH / lib.name / "home"
    home.mkdir(parents=True, exist_ok=True)
    os.environ["LECTERN_HOME"] = str(home)
    # The folder's own index of what each file is would answer for the files.
    settings = Settings(home=home, ignore_patterns=("INDEX.txt",))
    library = Library(settings, embedder=embedder)
    t = time.perf_counter()
    library.index(list(lib.folders))
    library.keyword.wait_for_merge()  # a keyword file of an older layout
    print(f"{lib.name}: indexed in {time.perf_counter() - t:.0f} s", flush=True)
    return library


def collect(args: argparse.Namespace) -> dict[str, Any]:
    SCRATCH.mkdir(parents=True, exist_ok=True)
    done: set[str] = set()
    if CACHE.exists() and not args.fresh:
        for line in CACHE.read_text(encoding="utf-8").splitlines():
            row = json.loads(line)
            done.add(row["key"])
    elif CACHE.exists():
        CACHE.unlink()
    embedder = load_embedder()
    asked = 0
    started = time.perf_counter()
    with CACHE.open("a", encoding="utf-8") as out:
        for lib in libraries(args.only):
            library = _indexed(lib, embedder)
            questions = lib.questions[: args.limit] if args.limit else lib.questions
            for n, (_set, fold, q) in enumerate(questions):
                key = _key(lib.name, fold, q)
                if key in done:
                    continue
                row = _ask(library, q, embedder)
                row.update(key=key, library=lib.name, fold=fold)
                out.write(json.dumps(row) + "\n")
                out.flush()
                asked += 1
                if n % 100 == 0:
                    print(f"  {lib.name} {n}/{len(questions)}", flush=True)
            library.close()
    return {"asked": asked, "seconds": round(time.perf_counter() - started, 1)}


def _quoted(
    library: Library, q: AnswerQuestion, embedder: Any
) -> tuple[list[Hit], SpanFinder, extractive.ExtractiveAnswer]:
    """The answer's passages, its span finder and its quote never declining."""
    hits = library.search(q.question, k=library.settings.top_k, lead=ANSWER_LEAD)
    # As an answer reads them: a table's header above a passage that starts inside it.
    finder = answer_finder(library, hits, embedder)
    never = extractive.extract_answer(
        q.question, hits, embedder, finder=finder, rules=extractive.NEVER
    )
    return hits, finder, never


def _ask(library: Library, q: AnswerQuestion, embedder: Any) -> dict[str, Any]:
    hits, finder, never = _quoted(library, q, embedder)
    cascade = extractive.extract_answer(
        q.question, hits, embedder, finder=finder, rules=extractive.CASCADE
    )
    signals = None
    if never.sentences:
        scored = extractive.score_sentences(
            q.question, hits[: extractive.MAX_HITS], embedder, finder=finder
        )
        signals = extractive.decline_signals(
            q.question, hits[: extractive.MAX_HITS], scored, never.sentences, finder
        ).values()
    wanted = (q.document or "").rsplit("/", 1)[-1]
    return {
        "group": q.group,
        "answerable": q.answerable,
        "contains": bool(q.answers) and not never.declined and contains_gold(never.text, q.answers),
        "retrieved": bool(wanted) and any(Path(h.path).name == wanted for h in hits),
        "cited": bool(wanted) and any(Path(c.hit.path).name == wanted for c in never.citations),
        "cascade_declined": cascade.declined,
        "cascade_reason": cascade.reason,
        "signals": signals,
    }


# --- fitting ---------------------------------------------------------------------------


def _rows() -> list[dict[str, Any]]:
    return [json.loads(line) for line in CACHE.read_text(encoding="utf-8").splitlines()]


def _dataset(row: dict[str, Any]) -> str:
    """The data set a row counts in: a real-document set, a SQuAD article or written set."""
    return row["fold"] if row["library"] == "realdocs" else f"{row['library']}/{row['fold']}"


def _matrix(rows: Sequence[dict[str, Any]]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    x = np.array([r["signals"] for r in rows], dtype=float)
    # What is learnt: the quote answers the question (an answerable question's quote
    # that holds no gold answer is no better than a decline to the person reading it).
    y = np.array(
        [r["answerable"] and (r["contains"] or not TARGET_CONTAINS) for r in rows], dtype=float
    )
    sets = [_dataset(r) for r in rows]
    count = {s: sets.count(s) for s in set(sets)}
    w = np.array([1.0 / count[s] for s in sets])
    return x, y, w * len(rows) / w.sum()


def fit_logistic(
    x: np.ndarray, y: np.ndarray, w: np.ndarray, l2: float = 1.0
) -> tuple[np.ndarray, float]:
    """Weighted L2 logistic regression (Newton's method) on standardised signals; the
    weights returned apply to the raw signals."""
    mean, std = x.mean(axis=0), x.std(axis=0)
    std[std < 1e-9] = 1.0
    z = np.hstack([(x - mean) / std, np.ones((len(x), 1))])
    beta = np.zeros(z.shape[1])
    penalty = np.full(z.shape[1], l2)
    penalty[-1] = 0.0
    for _ in range(50):
        p = 1.0 / (1.0 + np.exp(-np.clip(z @ beta, -30, 30)))
        grad = z.T @ (w * (p - y)) + penalty * beta
        hess = (z * (w * p * (1 - p))[:, None]).T @ z + np.diag(penalty)
        step = np.linalg.solve(hess, grad)
        beta -= step
        if np.abs(step).max() < 1e-8:
            break
    weights = beta[:-1] / std
    bias = float(beta[-1] - (beta[:-1] * mean / std).sum())
    return weights, bias


def _probabilities(x: np.ndarray, weights: np.ndarray, bias: float) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-np.clip(x @ weights + bias, -30, 30)))


def figures(rows: Sequence[dict[str, Any]], declined: Iterable[bool]) -> dict[str, Any]:
    out: dict[str, list[bool]] = {"right": [], "wrong_decline": [], "near": [], "ooc": []}
    for r, d in zip(rows, declined, strict=True):
        if r["answerable"]:
            out["right"].append(not d and r["contains"])
            out["wrong_decline"].append(d)
        elif r["group"] == "out_of_corpus":
            out["ooc"].append(d)
        else:
            out["near"].append(d)

    def share(v: list[bool]) -> float | None:
        return round(sum(v) / len(v), 3) if v else None

    return {
        "questions": len(rows),
        "answerable_right": share(out["right"]),
        "wrongly_declined": share(out["wrong_decline"]),
        "near_miss_declined": share(out["near"]),
        "out_of_corpus_declined": share(out["ooc"]),
    }


def _utility(rows: Sequence[dict[str, Any]], declined: np.ndarray) -> float:
    """What the threshold is chosen to maximise on the training folds, per data set and
    averaged: answerable right plus near misses and out-of-corpus declined, less what the
    set misses of the issue's bars (wrong declines three times over)."""
    total, count = 0.0, 0
    for name in sorted({_dataset(r) for r in rows}):
        idx = [i for i, r in enumerate(rows) if _dataset(r) == name]
        f = figures([rows[i] for i in idx], declined[idx])
        bars = BARS["real" if name in REAL_SETS else "squad"]
        right = f["answerable_right"] or 0.0
        wrong = f["wrongly_declined"] or 0.0
        near = f["near_miss_declined"]
        caught = [v for v in (near, f["out_of_corpus_declined"]) if v is not None]
        score = (
            right
            + (sum(caught) / len(caught) if caught else 0.0)
            - 3 * max(0.0, wrong - bars["wrongly_declined"])
            - (max(0.0, bars["near_miss_declined"] - near) if near is not None else 0.0)
        )
        total += score
        count += 1
    return total / max(count, 1)


def choose_threshold(rows: Sequence[dict[str, Any]], p: np.ndarray) -> float:
    grid = np.round(np.arange(0.05, 0.951, 0.01), 2)
    scores = [_utility(rows, p < t) for t in grid]
    return float(grid[int(np.argmax(scores))])


def _folds(rows: Sequence[dict[str, Any]]) -> list[tuple[str, list[int]]]:
    """Leave one out: each SQuAD article (with the written sets of its library held with
    the library's last article), and each real-document set."""
    folds: dict[str, list[int]] = {}
    for i, r in enumerate(rows):
        folds.setdefault(_dataset(r), []).append(i)
    return sorted(folds.items())


def fit(args: argparse.Namespace) -> dict[str, Any]:
    rows = [r for r in _rows() if r["signals"] is not None]
    empty = [r for r in _rows() if r["signals"] is None]
    x, y, w = _matrix(rows)
    result: dict[str, Any] = {"signals": list(DeclineSignals.names()), "folds": {}}
    held_declined = np.zeros(len(rows), dtype=bool)
    for name, idx in _folds(rows):
        train = np.setdiff1d(np.arange(len(rows)), idx)
        weights, bias = fit_logistic(x[train], y[train], w[train], args.l2)
        p_train = _probabilities(x[train], weights, bias)
        threshold = choose_threshold([rows[i] for i in train], p_train)
        held = _probabilities(x[idx], weights, bias) < threshold
        held_declined[idx] = held
        fold_rows = [rows[i] for i in idx]
        result["folds"][name] = {
            "model": figures(fold_rows, held),
            "cascade": figures(fold_rows, [r["cascade_declined"] for r in fold_rows]),
            "threshold": threshold,
        }
    weights, bias = fit_logistic(x, y, w, args.l2)
    p = _probabilities(x, weights, bias)
    threshold = choose_threshold(rows, p)
    result["model"] = {
        "weights": [round(float(v), 4) for v in weights],
        "bias": round(bias, 4),
        "threshold": threshold,
    }
    for part, keep in (("squad", "squad"), ("real", "realdocs")):
        idx = [i for i, r in enumerate(rows) if r["library"].startswith(keep)]
        sub = [rows[i] for i in idx]
        result[f"{part}_held_out"] = figures(sub, held_declined[idx])
        result[f"{part}_cascade"] = figures(sub, [r["cascade_declined"] for r in sub])
        result[f"{part}_in_sample"] = figures(sub, p[idx] < threshold)
        folds = [
            f["model"]
            for n, f in result["folds"].items()
            if any(rows[i]["library"].startswith(keep) for i in dict(_folds(rows))[n])
        ]
        result[f"{part}_spread"] = {
            k: [
                min(v for f in folds if (v := f[k]) is not None),
                max(v for f in folds if (v := f[k]) is not None),
            ]
            for k in BARS[part]
            if any(f[k] is not None for f in folds)
        }
    result["no_units"] = len(empty)
    for name, value in result["folds"].items():
        m, c = value["model"], value["cascade"]
        print(
            f"{name:48s} right {m['answerable_right']} ({c['answerable_right']})  "
            f"wrongly {m['wrongly_declined']} ({c['wrongly_declined']})  "
            f"near {m['near_miss_declined']} ({c['near_miss_declined']})  "
            f"ooc {m['out_of_corpus_declined']} ({c['out_of_corpus_declined']})  t={value['threshold']}"
        )
    if args.write:
        model = DeclineModel(tuple(round(float(v), 4) for v in weights), round(bias, 4), threshold)
        print(f"MODEL = {model!r}")
    return result


def misses(args: argparse.Namespace) -> dict[str, Any]:
    """Where the answer was, for each answerable question whose quote (never declining)
    does not hold it: in no passage the answer was given, in a passage but in no unit,
    or in a unit another outscored (its rank and score beside the quoted one's). One JSON
    line a question; the counts are the result. What to fix next is read from these."""
    embedder = load_embedder()
    where: dict[str, int] = {"no_passage": 0, "no_unit": 0, "unit_lost": 0}
    answerable = 0
    for lib in libraries(args.only or "realdocs"):
        library = _indexed(lib, embedder)
        for _set, fold, q in lib.questions[: args.limit] if args.limit else lib.questions:
            if not q.answerable:
                continue
            answerable += 1
            hits, finder, never = _quoted(library, q, embedder)
            if not never.declined and contains_gold(never.text, q.answers):
                continue
            shown = hits[: extractive.MAX_HITS]
            scored = extractive.score_sentences(q.question, shown, embedder, finder=finder)
            holding = [(n, u) for n, u in enumerate(scored) if contains_gold(u.text, q.answers)]
            if holding:
                kind = "unit_lost"
            elif any(contains_gold(h.text, q.answers) for h in shown):
                kind = "no_unit"
            else:
                kind = "no_passage"
            where[kind] += 1
            line: dict[str, Any] = {"set": fold, "question": q.question, "where": kind}
            line["quoted"] = never.text[:200]
            if holding:
                rank, unit = holding[0]
                line["holding_unit"] = {"rank": rank, "score": round(unit.score, 3)}
                line["holding_unit"]["text"] = unit.text[:200]
                line["best_score"] = round(scored[0].score, 3)
            print(json.dumps(line, ensure_ascii=False), flush=True)
        library.close()
    return {"answerable": answerable, "missed": sum(where.values()), **where}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="step", required=True)
    c = sub.add_parser("collect")
    c.add_argument("--only", choices=("squad", "realdocs"))
    c.add_argument("--limit", type=int, default=0)
    c.add_argument("--fresh", action="store_true", help="forget the cached rows")
    f = sub.add_parser("fit")
    f.add_argument("--l2", type=float, default=1.0)
    f.add_argument("--write", action="store_true", help="print the MODEL constant")
    m = sub.add_parser("misses", help="where each missed answer was (real documents by default)")
    m.add_argument("--only", choices=("squad", "realdocs"))
    m.add_argument("--limit", type=int, default=0)
    args = parser.parse_args()
    steps = {"collect": collect, "fit": fit, "misses": misses}
    result = steps[args.step](args)
    emit(f"decline_{args.step}", result)


if __name__ == "__main__":
    main()
