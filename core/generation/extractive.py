"""The answer without a language model: the retrieved sentences that best answer the question.

Each sentence of the top chunks is scored by meaning (cosine between the question and the
sentence, with the bundled embedding model) plus keyword overlap with the question; the
best one to three sentences are returned verbatim, each with its citation and span, and
labelled as extracted rather than written. When even the best sentence scores below a
threshold the documents probably do not hold the answer, and the refusal is returned.

The weights and threshold were calibrated on SQuAD 2.0 (../shared/data/squad-small) with
bench/extractive_squad.py. SQuAD's unanswerable questions are near-copies of answerable
ones written against the same paragraph, and no similarity threshold separates them (ROC
AUC 0.52-0.54). What a threshold can do is decline questions the documents do not cover at
all (answerable questions asked of the other article: AUC 0.9998). 0.5 declines 99.7% of
those while giving up about 1% of the answerable ones (full pipeline: 77.1% contain the gold
answer, 77.8% if never declining).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from core.generation.citations import (
    REFUSAL,
    PageLookup,
    SpanFinder,
    to_spans,
)
from core.records import Citation, Hit
from core.text import content_words

if TYPE_CHECKING:
    from core.embedding import Embedder

OVERLAP_WEIGHT = 0.35  # keyword overlap added to the cosine similarity
RANK_DECAY = 0.02  # small preference for sentences from better-ranked chunks
DECLINE_BELOW = 0.5  # best score under this: the documents do not seem to hold the answer
KEEP_WITHIN = 0.06  # further sentences must score within this of the best one
MAX_SENTENCES = 3
MAX_HITS = 4
MIN_SENTENCE_CHARS = 12

EXTRACTIVE_NOTE = "extracted from your documents; no language model wrote this answer"


@dataclass(frozen=True)
class ScoredSentence:
    hit_index: int  # index into the hits (the source number is hit_index + 1)
    start: int  # offsets within the hit's text
    end: int
    text: str
    cosine: float
    overlap: float
    score: float


@dataclass(frozen=True)
class ExtractiveAnswer:
    text: str  # the sentences, each followed by its [n]; or the refusal
    citations: tuple[Citation, ...]
    declined: bool
    best_score: float
    sentences: tuple[ScoredSentence, ...] = ()


def _clean(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


_TERMINAL = tuple(".!?:;,…。！？")
_HEADING_MAX = 80  # characters: a longer line is running text


def _is_heading(line: str, headings: set[str]) -> bool:
    """A line that titles what follows: a Markdown heading, one of the chunk's own
    headings, or a short title-cased line without closing punctuation."""
    line = line.strip()
    if not line:
        return False
    if line.startswith("#") or line.casefold() in headings:
        return True
    if len(line) > _HEADING_MAX or line.endswith(_TERMINAL) or "|" in line:
        return False  # running text, or a table row (a sheet's or a CSV's)
    words = [w for w in re.findall(r"\w+", line) if len(w) > 3]
    return bool(words) and sum(w[0].isupper() or w[0].isdigit() for w in words) >= 0.6 * len(words)


def _after_headings(text: str, start: int, end: int, headings: set[str]) -> int:
    """Where the sentence ``text[start:end]`` starts once the heading lines it opens with
    are left out: quoted with it, a heading runs into the sentence ("Travel Policy This
    policy applies…"). ``end`` when the sentence is headings only."""
    while start < end:
        newline = text.find("\n", start, end)
        if newline < 0:
            # The last line: only a known heading goes; a short title-cased line alone (a
            # name, a row) is the sentence itself.
            last = text[start:end].strip()
            return end if last.startswith("#") or last.casefold() in headings else start
        if not _is_heading(text[start:newline], headings):
            return start
        start = newline + 1
        while start < end and text[start].isspace():
            start += 1
    return end


def _weighted_overlap(
    question_words: list[str], sentence_words: set[str], idf: dict[str, float]
) -> float:
    unique = set(question_words)
    if not unique:
        return 0.0
    total = sum(idf.get(w, 1.0) for w in unique)
    found = sum(idf.get(w, 1.0) for w in unique if w in sentence_words)
    return found / total if total else 0.0


def score_sentences(
    question: str,
    hits: Sequence[Hit],
    embedder: Embedder | None,
    *,
    max_hits: int = MAX_HITS,
    finder: SpanFinder | None = None,
) -> list[ScoredSentence]:
    """Every sentence of the top ``max_hits`` hits, best first."""
    finder = finder or SpanFinder(embedder)
    top = list(hits[:max_hits])
    # (hit, start, end, sentence number): a quoted sentence starts after its headings,
    # while its meaning is the sentence's as embedded, headings and all.
    candidates: list[tuple[int, int, int, int]] = []
    for i, hit in enumerate(top):
        headings = {h.strip().casefold() for h in hit.heading_path if h.strip()}
        for j, (s, e) in enumerate(finder.sentences(hit)):
            s = _after_headings(hit.text, s, e, headings)
            if e - s >= MIN_SENTENCE_CHARS and re.search(r"\w{2}", hit.text[s:e]):
                candidates.append((i, s, e, j))
    if not candidates:
        return []
    texts = [_clean(top[i].text[s:e]) for i, s, e, _ in candidates]
    q_words = content_words(question)
    sent_words = [set(content_words(t)) for t in texts]
    # Rarer question words matter more: "Rollo" beats "leader" (document frequency over
    # the candidate sentences, which is all the corpus this answer can see).
    df: dict[str, int] = {}
    for ws in sent_words:
        for w in ws:
            df[w] = df.get(w, 0) + 1
    n = len(texts)
    idf = {w: 1.0 + np.log((n + 1) / (df.get(w, 0) + 1)) for w in set(q_words)}
    cosines = np.zeros(n, dtype=np.float32)
    if embedder is not None:
        finder.prepare([question], top)  # one batch; chunk sentences are cached by chunk id
        k = 0
        for i, hit in enumerate(top):
            q_vec, s_vecs = finder.vectors(question, hit)
            while k < n and candidates[k][0] == i:
                j = candidates[k][3]
                if q_vec is not None and s_vecs is not None:
                    cosines[k] = float(s_vecs[j] @ q_vec)
                k += 1
    scored: list[ScoredSentence] = []
    for k, (i, s, e, _) in enumerate(candidates):
        ov = _weighted_overlap(q_words, sent_words[k], idf)
        cos = float(cosines[k])
        score = cos + OVERLAP_WEIGHT * ov - RANK_DECAY * i
        scored.append(ScoredSentence(i, s, e, texts[k], cos, ov, score))
    scored.sort(key=lambda x: -x.score)
    return scored


def extract_answer(
    question: str,
    hits: Sequence[Hit],
    embedder: Embedder | None,
    *,
    threshold: float = DECLINE_BELOW,
    max_sentences: int = MAX_SENTENCES,
    keep_within: float = KEEP_WITHIN,
    max_hits: int = MAX_HITS,
    page_of: PageLookup | None = None,
    finder: SpanFinder | None = None,
) -> ExtractiveAnswer:
    """Pick the sentences that answer ``question``; ``[n]`` refers to ``hits[n-1]``."""
    scored = score_sentences(question, hits, embedder, max_hits=max_hits, finder=finder)
    # Without the embedding model only overlap counts, on a lower scale.
    limit = threshold if embedder is not None else threshold * OVERLAP_WEIGHT
    best = scored[0].score if scored else 0.0
    if not scored or best < limit:
        return ExtractiveAnswer(REFUSAL, (), True, best, tuple(scored[:1]))
    chosen = [scored[0]]
    for candidate in scored[1:]:
        if len(chosen) >= max_sentences or candidate.score < best - keep_within:
            break
        if any(c.hit_index == candidate.hit_index and c.start == candidate.start for c in chosen):
            continue
        chosen.append(candidate)
    # Read in document order within each source, sources in rank order.
    chosen.sort(key=lambda c: (c.hit_index, c.start))
    parts: list[str] = []
    citations: list[Citation] = []
    for c in chosen:
        hit = hits[c.hit_index]
        parts.append(f"{c.text} [{c.hit_index + 1}]")
        citations.append(
            Citation(
                n=c.hit_index + 1,
                hit=hit,
                spans=to_spans(hit, [(c.start, c.end)], page_of),
                sentence=c.text,
            )
        )
    return ExtractiveAnswer(" ".join(parts), tuple(citations), False, best, tuple(chosen))
