"""Measure the extractive (no-LLM) answer on SQuAD 2.0 dev, first two articles.

For the answerable questions: how often the extracted answer contains a gold answer text.
For the unanswerable ones (SQuAD 2.0 writes them against the same paragraph, so they look
very much like answerable ones): how often the answer declines.

Retrieval, selectable with --retrieval:
  oracle   the question's own paragraph is the only source (measures extraction alone)
  dense    the bundled embedding model ranks the 87 paragraphs, top --k are the sources
  library  the paragraphs are indexed as text files by core.library.Library (full pipeline)

--sweep prints, for each decline threshold, both rates, so the threshold in
core/generation/extractive.py can be re-calibrated; the chosen one maximises their mean.

Usage: .venv/bin/python bench/extractive_squad.py [--retrieval dense] [--k 4] [--sweep]
The last line printed is one JSON object with the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from core.embedding import Embedder, load_embedder  # noqa: E402
from core.generation import extractive  # noqa: E402
from core.generation.citations import SpanFinder  # noqa: E402
from core.records import Hit  # noqa: E402

DATA = ROOT.parent / "shared" / "data" / "squad-small" / "squad_small.json"


@dataclass(frozen=True)
class Question:
    text: str
    paragraph: int
    answers: tuple[str, ...]
    impossible: bool


def load(path: Path) -> tuple[list[Hit], list[Question]]:
    data = json.loads(path.read_text(encoding="utf-8"))
    hits: list[Hit] = []
    questions: list[Question] = []
    for article in data["data"]:
        for p in article["paragraphs"]:
            i = len(hits)
            text = p["context"]
            hits.append(
                Hit(
                    chunk_id=i,
                    document_id=i,
                    path=f"{article['title']}_{i}.txt",
                    title=article["title"],
                    type="txt",
                    text=text,
                    start=0,
                    end=len(text),
                    page=None,
                    page_end=None,
                    heading_path=(),
                    score=1.0,
                )
            )
            for qa in p["qas"]:
                answers = tuple(dict.fromkeys(a["text"] for a in qa["answers"]))
                questions.append(
                    Question(qa["question"].strip(), i, answers, bool(qa["is_impossible"]))
                )
    return hits, questions


def norm(text: str) -> str:
    return re.sub(r"\s+", " ", text.lower()).strip()


def contains_gold(answer: str, golds: tuple[str, ...]) -> bool:
    a = norm(answer)
    return any(norm(g) in a for g in golds)


class DenseRetriever:
    def __init__(self, hits: list[Hit], embedder: Embedder) -> None:
        self.hits = hits
        self.embedder = embedder
        self.matrix = embedder.embed([h.text for h in hits])

    def search(self, question: str, k: int) -> list[Hit]:
        q = self.embedder.embed([question])[0]
        order = np.argsort(-(self.matrix @ q))[:k]
        return [self.hits[int(i)] for i in order]


class LibraryRetriever:
    def __init__(self, hits: list[Hit]) -> None:
        from core.config import Settings
        from core.library import Library

        self._tmp = tempfile.TemporaryDirectory(prefix="lectern-squad-")
        home = Path(self._tmp.name) / "home"
        docs = Path(self._tmp.name) / "docs"
        docs.mkdir(parents=True)
        home.mkdir()
        self.by_path: dict[str, int] = {}
        for i, hit in enumerate(hits):
            path = docs / f"p{i:03d}.txt"
            path.write_text(hit.text, encoding="utf-8")
            self.by_path[str(path)] = i
        os.environ["LECTERN_HOME"] = str(home)
        self.library = Library(Settings(home=home))
        self.library.index([docs])

    def search(self, question: str, k: int) -> list[Hit]:
        return self.library.search(question, k=k)


def run(args: argparse.Namespace) -> dict[str, object]:
    hits, questions = load(Path(args.data))
    if args.limit:
        questions = questions[: args.limit]
    started = time.perf_counter()
    embedder = load_embedder()
    retriever: DenseRetriever | LibraryRetriever | None = None
    if args.retrieval == "dense":
        retriever = DenseRetriever(hits, embedder)
    elif args.retrieval == "library":
        retriever = LibraryRetriever(hits)

    finder = SpanFinder(embedder)  # caches each paragraph's sentence vectors across questions
    rows: list[
        tuple[bool, float, bool, bool]
    ] = []  # impossible, best score, contains, gold-para retrieved
    answer_time = 0.0
    for q in questions:
        sources = [hits[q.paragraph]] if retriever is None else retriever.search(q.text, args.k)
        retrieved = any(h.text == hits[q.paragraph].text for h in sources)
        t = time.perf_counter()
        result = extractive.extract_answer(
            q.text, sources, embedder, threshold=-10.0, finder=finder
        )
        answer_time += time.perf_counter() - t
        rows.append(
            (q.impossible, result.best_score, contains_gold(result.text, q.answers), retrieved)
        )

    # Out of corpus: each answerable question asked of the *other* article's paragraphs,
    # where its answer is certainly absent: the case of a question the documents don't cover.
    titles = sorted({h.title for h in hits})
    other_retrievers = {
        t: DenseRetriever([h for h in hits if h.title != t], embedder) for t in titles
    }
    off_scores: list[float] = []
    for q in questions:
        if q.impossible:
            continue
        sources = other_retrievers[hits[q.paragraph].title].search(q.text, args.k)
        result = extractive.extract_answer(
            q.text, sources, embedder, threshold=-10.0, finder=finder
        )
        off_scores.append(result.best_score)

    def rates(threshold: float) -> tuple[float, float, float]:
        answerable = [r for r in rows if not r[0]]
        impossible = [r for r in rows if r[0]]
        contain = sum(1 for r in answerable if r[1] >= threshold and r[2]) / max(1, len(answerable))
        decline = sum(1 for r in impossible if r[1] < threshold) / max(1, len(impossible))
        off = sum(1 for s in off_scores if s < threshold) / max(1, len(off_scores))
        return contain, decline, off

    thresholds = [round(float(x), 3) for x in np.arange(0.2, 1.2, 0.025)]
    # Calibrate on what the threshold can tell apart: in-corpus answers vs out-of-corpus
    # questions (SQuAD's unanswerables are near-copies of answerable ones; see the AUC).
    best_threshold = max(thresholds, key=lambda th: rates(th)[0] + rates(th)[2])
    if args.sweep:
        print("threshold  answerable_contains  unanswerable_declined  out_of_corpus_declined")
        for th in thresholds:
            c, d, o = rates(th)
            print(f"{th:9.3f}  {c:19.3f}  {d:21.3f}  {o:22.3f}")

    answerable = [r for r in rows if not r[0]]
    impossible = [r for r in rows if r[0]]
    no_decline_contain = sum(1 for r in answerable if r[2]) / max(1, len(answerable))
    contain, decline, off_declined = rates(extractive.DECLINE_BELOW)
    scores_a = np.array([r[1] for r in answerable])
    scores_i = np.array([r[1] for r in impossible])
    # Probability that an answerable question outscores an unanswerable one (ROC AUC).
    auc = (
        float(np.mean(scores_a[:, None] > scores_i[None, :]))
        if len(scores_a) and len(scores_i)
        else None
    )
    scores_o = np.array(off_scores)
    auc_off = (
        float(np.mean(scores_a[:, None] > scores_o[None, :]))
        if len(scores_a) and len(scores_o)
        else None
    )
    result: dict[str, object] = {
        "benchmark": "extractive_squad",
        "retrieval": args.retrieval,
        "k": 1 if retriever is None else args.k,
        "questions": len(rows),
        "answerable": len(answerable),
        "unanswerable": len(impossible),
        "threshold": extractive.DECLINE_BELOW,
        "answerable_contains_gold": round(contain, 4),
        "unanswerable_declined": round(decline, 4),
        "answerable_contains_gold_if_never_declining": round(no_decline_contain, 4),
        "gold_paragraph_retrieved": round(
            sum(1 for r in answerable if r[3]) / max(1, len(answerable)), 4
        ),
        "out_of_corpus_declined": round(off_declined, 4),
        "score_auc_answerable_vs_unanswerable": round(auc, 4) if auc is not None else None,
        "score_auc_answerable_vs_out_of_corpus": round(auc_off, 4) if auc_off is not None else None,
        "best_threshold_in_sample": best_threshold,
        "at_best_threshold": dict(
            zip(
                ("contains", "unanswerable_declined", "out_of_corpus_declined"),
                (round(x, 4) for x in rates(best_threshold)),
                strict=True,
            )
        ),
        "ms_per_answer": round(1000 * answer_time / max(1, len(rows)), 2),
        "elapsed_s": round(time.perf_counter() - started, 1),
    }
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=str(DATA))
    parser.add_argument("--retrieval", choices=("oracle", "dense", "library"), default="dense")
    parser.add_argument("--k", type=int, default=4)
    parser.add_argument("--limit", type=int, default=0)
    parser.add_argument("--sweep", action="store_true")
    args = parser.parse_args()
    print(json.dumps(run(args)))


if __name__ == "__main__":
    main()
