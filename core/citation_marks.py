"""How an answer cites its sources: the ``[n]`` markers, and an answer's sentences with the
sources each cites.

The model writes these marks (core/generation/citations.py checks them against the
sources), the stored conversations blank and restore the sentences that cite a deleted
document by them (core/store/redaction.py), and the app draws them as links. It is read by
all three, so it imports nothing of Lectern but the sentence splitter.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from core.text import split_sentences

_CITE = re.compile(
    r"\[\s*(?:(?:sources?|src|doc)\s*)?"
    r"(?P<body>\d{1,3}(?:\s*(?:,|;|-|–|—|and|&)\s*(?:(?:sources?|src|doc)\s*)?\d{1,3})*)\s*\]",
    re.IGNORECASE,
)
_MAX_RANGE = 50


@dataclass(frozen=True)
class CitationRef:
    """One bracketed citation in the answer text, ``text[start:end]``."""

    start: int
    end: int
    numbers: tuple[int, ...]


def _expand(body: str) -> tuple[int, ...]:
    numbers: list[int] = []
    for part in re.split(r"\s*(?:,|;|and|&)\s*", body, flags=re.IGNORECASE):
        part = re.sub(r"(?i)sources?|src|doc", "", part).strip()
        if not part:
            continue
        bounds = re.split(r"\s*[-–—]\s*", part)
        if len(bounds) == 2 and bounds[0].isdigit() and bounds[1].isdigit():
            low, high = int(bounds[0]), int(bounds[1])
            if low <= high and high - low <= _MAX_RANGE:
                numbers.extend(range(low, high + 1))
            else:
                numbers.extend([low, high])
        else:
            numbers.extend(int(b) for b in bounds if b.isdigit())
    seen: dict[int, None] = {}
    for n in numbers:
        seen.setdefault(n, None)
    return tuple(seen)


def parse_citations(text: str) -> list[CitationRef]:
    return [CitationRef(m.start(), m.end(), _expand(m.group("body"))) for m in _CITE.finditer(text)]


def remove_unknown(text: str, source_count: int) -> tuple[str, tuple[int, ...]]:
    """Drop citation numbers outside ``1..source_count``; returns the text and what was dropped."""
    removed: set[int] = set()
    out: list[str] = []
    pos = 0
    for ref in parse_citations(text):
        valid = [n for n in ref.numbers if 1 <= n <= source_count]
        bad = [n for n in ref.numbers if not 1 <= n <= source_count]
        if not bad:
            continue
        removed.update(bad)
        head = text[pos : ref.start]
        if valid:
            out.append(head + "[" + ", ".join(str(n) for n in valid) + "]")
        else:
            out.append(head.rstrip(" \t") if head.endswith((" ", "\t")) else head)
        pos = ref.end
    out.append(text[pos:])
    return "".join(out), tuple(sorted(removed))


_CITE_WITH_SPACE = re.compile(r"[ \t]*" + _CITE.pattern, re.IGNORECASE)
_LEADING_CITES = re.compile(r"(?:\s*" + _CITE.pattern + r")+\s*", re.IGNORECASE)


def strip_citations(text: str) -> str:
    return re.sub(r"\s+", " ", _CITE_WITH_SPACE.sub("", text)).strip()


# --- answer sentences ------------------------------------------------------------------


@dataclass(frozen=True)
class AnswerSentence:
    start: int
    end: int
    text: str  # as written, with its citation markers
    claim: str  # the text without markers or list bullets
    numbers: tuple[int, ...]


_LEADING_MARKUP = re.compile(r"^\s*(?:[-*•·▪‣]|\d{1,3}[.)]|#+)\s+")


def answer_sentences(answer: str) -> list[AnswerSentence]:
    """Sentences of an answer, each with the sources it cites.

    A citation written after the full stop ("... in 1911. [2]") belongs to the sentence
    before it, not to the next one.
    """
    spans = split_sentences(answer)
    refs = parse_citations(answer)
    cited: list[list[int]] = [[] for _ in spans]
    for ref in refs:
        index = next((i for i, (s, e) in enumerate(spans) if s <= ref.start < e), None)
        if index is None:
            continue
        s, _ = spans[index]
        before = _CITE.sub("", answer[s : ref.start]).strip()
        if not before and index > 0:
            index -= 1
        for n in ref.numbers:
            if n not in cited[index]:
                cited[index].append(n)
    out: list[AnswerSentence] = []
    for i, ((s, e), numbers) in enumerate(zip(spans, cited, strict=True)):
        if i > 0:  # markers at the start were counted for the sentence before
            lead = _LEADING_CITES.match(answer, s, e)
            if lead:
                s = lead.end()
        text = answer[s:e]
        claim = _LEADING_MARKUP.sub("", strip_citations(text)).strip()
        if not claim:  # only markers
            continue
        out.append(AnswerSentence(s, e, text, claim, tuple(numbers)))
    return out
