"""Whether the quoted answer answers the question: a small logistic model over signals
the extractive answer already computes.

The rules it replaces (a score threshold, then a name rule, a "not" rule and a
"how many X" rule, each a hard veto) were chosen on one SQuAD article and described
SQuAD 2.0's way of writing near misses; on real documents they declined half of the
questions whose page search had found (OCR spellings, codes, tables, German notes).
Here each of those observations is a signal with a weight, so none vetoes alone: a
missing name counts against an answer whose quoted row otherwise matches the question
well, and counts for less when the passages are tables or another language.

The weights and the threshold are fit by ``bench/decline_fit.py`` on the training data
(SQuAD 2.0 squad-small and squad-train, the written out-of-corpus and absent-fact sets,
and the real-document sets in ``bench/answer_sets/``), each data set weighted equally so
that SQuAD's 3,800 questions do not outvote the real documents; the bench reports them
leave-one-article-out and leave-one-document-set-out. ``MODEL`` below is its output.
"""

from __future__ import annotations

import math
from dataclasses import astuple, dataclass, fields


@dataclass(frozen=True)
class DeclineSignals:
    """What the extractive answer observed about a question and its best units."""

    best: float  # the best unit's score (cosine + weighted overlap + bonuses)
    cosine: float  # the best unit's cosine with the question
    overlap: float  # the best unit's share of the question's (idf-weighted) words
    coverage: float  # share of the question's content words in the quoted units
    margin: float  # the best unit's score over the next best's
    names_missing: float  # share of the question's names and numbers in no passage
    words_missing: float  # share of the question's content words in no passage
    drop: float  # 1 - cosine(question, question without those words)
    shift: float  # how much nearer the best unit the question is without them
    typed: float  # 1: the quote holds what is asked (a date for "when"); -1: asked, none
    negation_unmet: float  # asks what is "not" so, and no quoted unit denies anything
    counted_unmet: float  # asks "how many X", and no quoted unit names X
    tabular: float  # the best unit is a row, a field or a slide (not prose)
    foreign: float  # the best unit is not in English (the default model reads it less well)
    measure_unmet: float  # asks a sum of money or a percentage, and no quoted unit holds one

    def values(self) -> tuple[float, ...]:
        return tuple(float(v) for v in astuple(self))

    @classmethod
    def names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in fields(cls))


@dataclass(frozen=True)
class DeclineModel:
    """``weights`` per signal (in ``DeclineSignals`` order) and ``bias``: the log-odds that
    the passages answer the question; an answer below ``threshold`` probability is
    declined."""

    weights: tuple[float, ...]
    bias: float
    threshold: float

    def probability(self, signals: DeclineSignals) -> float:
        z = self.bias + sum(w * v for w, v in zip(self.weights, signals.values(), strict=True))
        return 1.0 / (1.0 + math.exp(-max(-30.0, min(30.0, z))))

    def against(self, signals: DeclineSignals) -> str:
        """The signal that counts most against answering (what a decline is put down to)."""
        pulls = [w * v for w, v in zip(self.weights, signals.values(), strict=True)]
        worst = min(range(len(pulls)), key=lambda i: pulls[i])
        return DeclineSignals.names()[worst]


# Fit by bench/decline_fit.py (see its last JSON line in bench/results/decline_fit.json).
# What it learns is whether the quote holds the answer (an answerable question's quote
# that holds none is no better than a decline to the person reading it). Fit to "the
# question is answerable" instead, it declined 0.20 of the real documents' near misses
# held out, against 0.42 when both were measured (2026-12-06;
# docs/decisions/answers-on-real-documents.md).
MODEL = DeclineModel(
    weights=(
        7.8148,  # best
        -4.2233,  # cosine
        -2.6087,  # overlap
        1.3802,  # coverage
        0.4198,  # margin
        -1.0667,  # names_missing
        1.6455,  # words_missing
        -7.2649,  # drop
        -6.4302,  # shift
        -0.3002,  # typed
        -4.2264,  # negation_unmet
        -1.2446,  # counted_unmet
        0.9194,  # tabular
        -0.2674,  # foreign
        -1.1242,  # measure_unmet
    ),
    bias=-3.6295,
    threshold=0.24,
)
