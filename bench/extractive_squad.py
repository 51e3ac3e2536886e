"""Measure the extractive (no-LLM) answer on SQuAD 2.0 dev, first two articles.

Each SQuAD article is reported apart, then both together:

* answerable questions: how often the extracted answer contains a gold answer text (a
  declined answer contains none);
* unanswerable ones (SQuAD 2.0 writes them against the same paragraph, so they look very
  much like answerable ones: near misses): how often the answer declines.

Then question sets written for this bench (bench/answer_sets/, one JSON object a line:
{"question", "answers", "document"}; empty answers: must be declined), asked of the same
library:

* squad_out_of_corpus.jsonl: questions on subjects neither article covers that share
  words with them ("What is the capital of Australia?");
* squad_absent_facts.jsonl: questions about the articles' own subjects asking for a fact
  they do not state ("What was the name of Alan Turing's dog?").

And, as before, each answerable question asked of the *other* article's paragraphs only
(dense retrieval), where its answer is certainly absent.

The decline rules and constants of core/generation/extractive.py were chosen on the
Normans article and the written sets only; the other article (computational complexity
theory) is held out.

Retrieval, selectable with --retrieval:
  oracle   the question's own paragraph is the only source (measures extraction alone)
  dense    the bundled embedding model ranks the 87 paragraphs, top --k are the sources
  library  the paragraphs are indexed as text files by core.library.Library and searched
           as `ask` does (full pipeline; the default)

--sweep prints, per article and set, the figures for each best-score threshold (the
other rules as they are), for re-calibrating DECLINE_BELOW on the Normans article.

Usage: .venv/bin/python bench/extractive_squad.py [--retrieval dense] [--k 6] [--sweep]
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
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.record import emit  # noqa: E402
from core.config import Settings  # noqa: E402
from core.embedding.models import Embedder, load_embedder  # noqa: E402
from core.generation import extractive  # noqa: E402
from core.generation.citations import SpanFinder  # noqa: E402
from core.records import Hit  # noqa: E402

DATA = ROOT.parent / "shared" / "data" / "squad-small" / "squad_small.json"
SETS = ROOT / "bench" / "answer_sets"
WRITTEN = ("squad_out_of_corpus", "squad_absent_facts")
TRAINING = "Normans"


@dataclass(frozen=True)
class Question:
    text: str
    paragraph: int | None  # None: a written question, about no paragraph
    answers: tuple[str, ...]
    impossible: bool
    group: str  # the article's title, or the written set's name


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
                    Question(
                        qa["question"].strip(),
                        i,
                        answers,
                        bool(qa["is_impossible"]),
                        article["title"],
                    )
                )
    return hits, questions


def load_written(name: str) -> list[Question]:
    questions = []
    for line in (SETS / f"{name}.jsonl").read_text(encoding="utf-8").splitlines():
        if line.strip():
            item = json.loads(line)
            answers = tuple(item.get("answers") or ())
            questions.append(Question(item["question"], None, answers, not answers, name))
    return questions


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
    def __init__(self, hits: list[Hit], embedder: Embedder) -> None:
        from core.library import Library

        self._tmp = tempfile.TemporaryDirectory(prefix="lectern-squad-")
        home = Path(self._tmp.name) / "home"
        docs = Path(self._tmp.name) / "docs"
        docs.mkdir(parents=True)
        home.mkdir()
        self.paragraph_of: dict[str, int] = {}
        for i, hit in enumerate(hits):
            path = docs / f"p{i:03d}.txt"
            path.write_text(hit.text, encoding="utf-8")
            self.paragraph_of[str(path)] = i
        os.environ["LECTERN_HOME"] = str(home)
        self.library = Library(Settings(home=home), embedder=embedder)
        self.library.index([docs])

    def search(self, question: str, k: int) -> list[Hit]:
        return self.library.search(question, k=k)


@dataclass(frozen=True)
class Row:
    question: Question
    declined: bool
    reason: str
    contains: bool
    retrieved: bool  # the question's own paragraph is among the sources
    chars: int  # length of the answer shown (0 when declined)
    units: int


def answer_all(
    questions: list[Question],
    sources_of: dict[str, list[Hit]],
    own: dict[str, bool],
    embedder: Embedder,
    finder: SpanFinder,
    rules: extractive.DeclineRules,
) -> tuple[list[Row], float]:
    rows: list[Row] = []
    spent = 0.0
    for q in questions:
        t = time.perf_counter()
        result = extractive.extract_answer(
            q.text, sources_of[q.text], embedder, finder=finder, rules=rules
        )
        spent += time.perf_counter() - t
        rows.append(
            Row(
                q,
                result.declined,
                result.reason,
                not result.declined and contains_gold(result.text, q.answers),
                own[q.text],
                0 if result.declined else len(result.text),
                0 if result.declined else len(result.citations),
            )
        )
    return rows, spent


def figures(rows: list[Row]) -> dict[str, object]:
    answerable = [r for r in rows if not r.question.impossible]
    impossible = [r for r in rows if r.question.impossible]
    shown = [r for r in rows if not r.declined]
    out: dict[str, object] = {"questions": len(rows)}
    if answerable:
        out["answerable"] = len(answerable)
        out["answerable_contains_gold"] = round(np.mean([r.contains for r in answerable]), 4)
        out["answerable_declined"] = round(np.mean([r.declined for r in answerable]), 4)
        if answerable[0].question.paragraph is not None:
            out["gold_paragraph_retrieved"] = round(np.mean([r.retrieved for r in answerable]), 4)
    if impossible:
        out["unanswerable"] = len(impossible)
        out["unanswerable_declined"] = round(np.mean([r.declined for r in impossible]), 4)
        reasons: dict[str, int] = {}
        for r in impossible:
            if r.declined:
                reasons[r.reason] = reasons.get(r.reason, 0) + 1
        out["declined_because"] = dict(sorted(reasons.items()))
    if shown:
        out["answer_chars_mean"] = round(float(np.mean([r.chars for r in shown])), 1)
        out["answer_units_mean"] = round(float(np.mean([r.units for r in shown])), 2)
    return out


def report(rows: list[Row], groups: list[str]) -> dict[str, dict[str, object]]:
    out = {g: figures([r for r in rows if r.question.group == g]) for g in groups}
    out["squad_all"] = figures([r for r in rows if r.question.paragraph is not None])
    return out


def run(args: argparse.Namespace) -> dict[str, object]:
    hits, questions = load(Path(args.data))
    if args.limit:
        questions = questions[: args.limit]
    articles = list(dict.fromkeys(q.group for q in questions))
    written = [q for name in WRITTEN for q in load_written(name)]
    started = time.perf_counter()
    embedder = load_embedder()
    retriever: DenseRetriever | LibraryRetriever | None = None
    if args.retrieval == "dense":
        retriever = DenseRetriever(hits, embedder)
    elif args.retrieval == "library":
        retriever = LibraryRetriever(hits, embedder)

    sources_of: dict[str, list[Hit]] = {}
    own: dict[str, bool] = {}
    nearest = DenseRetriever(hits, embedder) if retriever is None else None
    for q in questions + written:
        if nearest is not None:
            # Oracle: the question's own paragraph; a written question gets the paragraph
            # the dense model ranks first, so it still has something to decline.
            sources = [hits[q.paragraph]] if q.paragraph is not None else nearest.search(q.text, 1)
        else:
            assert retriever is not None
            sources = retriever.search(q.text, args.k)
        sources_of[q.text] = sources
        own[q.text] = q.paragraph is not None and any(
            h.text == hits[q.paragraph].text for h in sources
        )

    finder = SpanFinder(embedder)  # each unit and question is embedded once for the run
    rules = extractive.DeclineRules()
    rows, spent = answer_all(questions + written, sources_of, own, embedder, finder, rules)
    groups = articles + list(WRITTEN)
    result: dict[str, object] = {
        "benchmark": "extractive_squad",
        "retrieval": args.retrieval,
        "k": 1 if retriever is None else args.k,
        "trained_on": [TRAINING, *WRITTEN],
        "held_out": [a for a in articles if a != TRAINING],
        "rules": asdict(rules),
        "figures": report(rows, groups),
    }
    never, _ = answer_all(questions, sources_of, own, embedder, finder, extractive.NEVER)
    result["answerable_contains_gold_if_never_declining"] = {
        g: figures([r for r in never if r.question.group == g]).get("answerable_contains_gold")
        for g in articles
    } | {"squad_all": figures(never).get("answerable_contains_gold")}

    # Each answerable question asked of the other article's paragraphs only, where its
    # answer is certainly absent.
    others = {t: DenseRetriever([h for h in hits if h.title != t], embedder) for t in set(articles)}
    off = [q for q in questions if not q.impossible]
    off_sources = {q.text: others[q.group].search(q.text, args.k) for q in off}
    off_rows, _ = answer_all(
        [replace(q, impossible=True) for q in off],
        off_sources,
        dict.fromkeys(off_sources, False),
        embedder,
        finder,
        rules,
    )
    result["other_article_declined"] = figures(off_rows).get("unanswerable_declined")

    if args.sweep:
        print("threshold  " + "  ".join(f"{g[:12]:>12}" for g in groups))
        for threshold in np.arange(0.3, 0.75, 0.025):
            swept = replace(rules, threshold=float(threshold))
            swept_rows, _ = answer_all(
                questions + written, sources_of, own, embedder, finder, swept
            )
            cells = []
            for g in groups:
                f = figures([r for r in swept_rows if r.question.group == g])
                ans = f.get("answerable_contains_gold", "")
                dec = f.get("unanswerable_declined", "")
                cells.append(f"{ans!s:>5}/{dec!s:<6}")
            print(f"{threshold:9.3f}  " + "  ".join(f"{c:>12}" for c in cells))

    result["ms_per_answer"] = round(1000 * spent / max(1, len(rows)), 2)
    result["elapsed_s"] = round(time.perf_counter() - started, 1)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=str(DATA))
    parser.add_argument("--retrieval", choices=("oracle", "dense", "library"), default="library")
    parser.add_argument("--k", type=int, default=Settings().top_k)
    parser.add_argument("--limit", type=int, default=0)
    parser.add_argument("--sweep", action="store_true")
    args = parser.parse_args()
    emit("extractive_squad", run(args))


if __name__ == "__main__":
    main()
