"""Citations in an answer: parse them, check them, and find the sentences they point at.

An answer cites sources as ``[n]``, ``[n, m]`` or ``[n-m]``. Everything here is checked in
code rather than trusted: a number that matches no source is removed and reported, a
sentence that states something without a citation is marked unsupported, and a number or
identifier that none of the cited sources contains is flagged. For each citation the
sentence(s) of the cited chunk that best support the citing sentence are located (meaning
via the embedding model plus plain word overlap) and returned as character offsets into
the *document* text, so the desktop app can highlight them: inside the cited chunk, except
that a long sentence the chunker split is grown into the next chunk as far as the claim
supports it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np

from core.citation_marks import (
    AnswerSentence,
    answer_sentences,
    parse_citations,
    remove_unknown,
    strip_citations,
)
from core.generation.events import WarningKind
from core.records import Citation, Hit, Span
from core.text import content_words, overlap, split_sentences

if TYPE_CHECKING:
    from core.embedding.models import Embedder

PageLookup = Callable[[Hit, int], "int | None"]  # (hit, document offset) -> page

REFUSAL = "The documents do not contain the answer to this question."

# How real models cite when they do not write [n]: the source marker copied back
# ("<<source-1a2b3c4d n=1 title=...>>", 4 of 16 answers of a 1.5B model), "(Source 2)",
# "【1】", "[^1]", "[1†source]", "[n=1]". Each becomes [n]; an end marker goes.
# The marker is also copied in square brackets ("[[source-c2cb51d1 n=1]]", a 1.5B model).
_MARKER_CITE = re.compile(
    r"(?:[<‹«]{1,2}|\[{1,2})\s*source[-\w]*\s+n\s*=\s*(\d{1,3})\b[^<>\[\]\n]{0,400}?"
    r"(?:[>›»]{1,2}|\]{1,2})",
    re.IGNORECASE,
)
_MARKER_END = re.compile(r"(?:[<‹«]{1,2}|\[{1,2})\s*/?\s*end[-\w]*\s*(?:[>›»]{1,2}|\]{1,2})", re.I)
# A marker the model mangled past reading its number ("<<source-c2cb51d1>>"): removed, so
# nothing of the prompt's scaffolding reaches the answer.
_MARKER_LEFT = re.compile(
    r"[ \t]*(?:[<‹«]{1,2}|\[{1,2})\s*source-[0-9a-f]{4,}\b[^<>\[\]\n]{0,400}?(?:[>›»]{1,2}|\]{1,2})",
    re.IGNORECASE,
)
_PAREN_CITE = re.compile(
    r"\(\s*(?:sources?|src)\s*:?\s*(\d{1,3}(?:\s*(?:,|;|-|–|and|&)\s*\d{1,3})*)\s*\)",
    re.IGNORECASE,
)
_ODD_BRACKETS = re.compile(
    r"【\s*(\d{1,3})[^】]{0,40}】|\[\^(\d{1,3})\]|\[(\d{1,3})†[^\]]{0,40}\]|\[\s*n\s*=\s*(\d{1,3})\s*\]"
)


def normalise_citations(text: str, tag: str | None = None) -> str:
    """The answer with every citation form real models write turned into ``[n]``, and the
    request tag gone wherever the model repeated it (it is never shown)."""
    text = _MARKER_CITE.sub(lambda m: f"[{m.group(1)}]", text)
    text = _MARKER_END.sub("", text)
    text = _PAREN_CITE.sub(lambda m: f"[{m.group(1)}]", text)
    text = _ODD_BRACKETS.sub(lambda m: f"[{next(g for g in m.groups() if g)}]", text)
    text = _MARKER_LEFT.sub("", text)
    if tag:
        text = re.sub(r"(?:request\s+tag:?\s*)?" + re.escape(tag), "", text, flags=re.IGNORECASE)
    # Two markers in a row make "[1][2]"; a space before punctuation is left by a removal.
    return re.sub(r"[ \t]+([.,;:!?])", r"\1", text)


# The refusal as models reword it: "The sources do not contain the answer to this
# question.", "The provided context does not mention …", "I could not find this in the
# documents." Only a short answer that is nothing else counts.
_REWORDED_REFUSAL = re.compile(
    r"^(?:(?:unfortunately|sorry|i'?m sorry)\s*)?"
    r"(?:(?:the|these|this|provided|given)\s+)*(?:provided\s+|given\s+)?"
    r"(?:sources?|documents?|passages?|context|texts?|information|excerpts?)\s+"
    r"(?:provided\s+|given\s+)?(?:do|does|did)\s*(?:not|n't)\s+"
    r"(?:contain|include|mention|say|state|provide|give|specify|answer|have)\b"
    r"|^(?:i|we)\s+(?:could|can|did|do)\s*(?:not|n't)\s+find\b"
    r"|^(?:there\s+is\s+)?no\s+(?:information|answer|mention)\s+(?:about|on|of|to|for|in)\b",
    re.IGNORECASE,
)


def is_refusal(answer: str) -> bool:
    plain = strip_citations(answer).strip()
    norm = re.sub(r"\W+", " ", plain.lower()).strip()
    target = re.sub(r"\W+", " ", REFUSAL.lower()).strip()
    if norm == target or (norm.startswith(target) and len(norm) < len(target) + 40):
        return True
    # One or two sentences, citing nothing, that say only that the sources lack it.
    if parse_citations(answer) or re.search(r"\b(?:but|however|although)\b", plain, re.I):
        return False
    return (
        len(plain) <= 220
        and len(split_sentences(plain)) <= 2
        and bool(_REWORDED_REFUSAL.match(plain.replace("’", "'")))
    )


_META = re.compile(
    r"\b(?:the|these|provided|given)\s+(?:sources?|documents?|texts?|passages?)\b.*\b(?:not|no)\b"
    r"|\bno (?:information|mention)\b",
    re.IGNORECASE,
)


_FILLER = re.compile(
    r"(?:i hope|hope this|let me know|feel free|happy to help|glad to help|here (?:is|are)|"
    r"i (?:can|could|would)|thank)",
    re.IGNORECASE,
)


def is_claim(claim: str) -> bool:
    """Whether a sentence states something that would need a source."""
    text = claim.strip()
    if not text or text.endswith(("?", ":")):
        return False
    if is_refusal(text) or _META.search(text) or _FILLER.match(text):
        return False
    return len(content_words(text)) >= 2


# --- numbers and identifiers -----------------------------------------------------------

_NUMBERISH = re.compile(
    r"\d{1,3}(?:[,\u202f\u00a0]\d{3})+(?:\.\d+)?"  # 1,000,000.5
    r"|[A-Za-z0-9][A-Za-z0-9_./:-]*[A-Za-z0-9]"  # tokens, filtered below
    r"|\d"
)
_SMALL = [
    "zero",
    "one",
    "two",
    "three",
    "four",
    "five",
    "six",
    "seven",
    "eight",
    "nine",
    "ten",
    "eleven",
    "twelve",
]


def _norm_digits(text: str) -> str:
    return re.sub(r"(?<=\d)[,\u202f\u00a0](?=\d{3}\b)", "", text.lower())


def identifiers(text: str) -> list[str]:
    """Numbers, dates, versions, codes: tokens a model must copy exactly."""
    found: list[str] = []
    for match in _NUMBERISH.finditer(text):
        token = match.group(0).rstrip(".:/-")
        has_digit = any(c.isdigit() for c in token)
        code_like = "_" in token or re.fullmatch(r"[A-Z]{2,}(?:-[A-Z0-9]+)+", token) is not None
        if (has_digit or code_like) and token not in found:
            found.append(token)
    return found


def _contains_token(haystack: str, token: str) -> bool:
    needle = _norm_digits(token)
    if re.search(r"(?<![0-9a-z])" + re.escape(needle) + r"(?![0-9a-z])", haystack):
        return True
    if needle.isdigit() and int(needle) < len(_SMALL):  # "3" written as "three"
        return re.search(r"\b" + _SMALL[int(needle)] + r"\b", haystack) is not None
    return False


def unverified_identifiers(claim: str, sources: Sequence[str]) -> list[str]:
    haystack = _norm_digits(" ".join(sources))
    return [t for t in identifiers(claim) if not _contains_token(haystack, t)]


_NAME = re.compile(r"(?<![\w'’])(?:[A-Z][\w'’-]+)(?:\s+(?:of\s+|de\s+|von\s+)?[A-Z][\w'’-]+)*")
_NOT_NAMES = frozenset({"i", "the", "a", "an", "in", "on", "it", "this", "that", "yes", "no"})


def names(claim: str) -> list[str]:
    """Capitalised names in a sentence ("Old Norse", "Rollo"), not the word that opens it:
    a model that swaps one name for another ("Old Norse" for "Frankish") keeps the
    sentence's shape, so a name no source has is worth a warning."""
    found: list[str] = []
    for match in _NAME.finditer(claim):
        name = match.group(0)
        if match.start() == len(claim) - len(claim.lstrip()):
            # The sentence's first word is capitalised anyway; keep the rest of the run.
            rest = name.split(None, 1)
            if len(rest) < 2:
                continue
            name = rest[1]
        if name.casefold() in _NOT_NAMES or len(name) < 3 or name not in claim:
            continue
        if name not in found:
            found.append(name)
    return found


def _has_name(haystack: str, name: str) -> bool:
    """Whether ``haystack`` (casefolded) has ``name``: each of its words (a source may
    write "the Norse" where the answer says "Norse")."""
    words = [w for w in re.findall(r"\w+", name.casefold()) if len(w) > 2]
    return not words or all(re.search(r"\b" + re.escape(w), haystack) for w in words)


def unverified_names(claim: str, sources: Sequence[str]) -> list[str]:
    haystack = " ".join(sources).casefold()
    return [name for name in names(claim) if not _has_name(haystack, name)]


def _holds(text: str, item: str) -> bool:
    """Whether ``text`` has ``item``, a figure or a name that ``_lacking`` gave."""
    if item in identifiers(item):
        return _contains_token(_norm_digits(text), item)
    return _has_name(text.casefold(), item)


# --- spans ----------------------------------------------------------------------------

EMBED_WEIGHT = 0.55
OVERLAP_WEIGHT = 0.45


@dataclass(frozen=True)
class _Scored:
    start: int  # offsets within the chunk text
    end: int
    score: float
    words: frozenset[str]


def _score_sentences(
    claim: str,
    claim_vec: np.ndarray | None,
    chunk_text: str,
    sentences: list[tuple[int, int]],
    sentence_vecs: np.ndarray | None,
) -> list[_Scored]:
    claim_words = content_words(claim)
    scored: list[_Scored] = []
    for i, (s, e) in enumerate(sentences):
        sent_words = frozenset(content_words(chunk_text[s:e]))
        score = overlap(claim_words, set(sent_words))
        if claim_vec is not None and sentence_vecs is not None:
            cos = float(sentence_vecs[i] @ claim_vec)
            score = EMBED_WEIGHT * cos + OVERLAP_WEIGHT * score
        scored.append(_Scored(s, e, score, sent_words))
    return scored


_NEIGHBOUR_SCORE = 0.6  # of the best sentence's score, for a neighbour read with it
# A sentence that opens by referring to the one before: its subject is that sentence's.
# English words only; in other languages the pair is not read and the citation stays
# without evidence, as before this rule.
_REFERS_BACK = re.compile(
    r"\s*(?:he|she|his|her|it|its|they|their|this|these|those|such)\b", re.IGNORECASE
)


def _title_line(text: str) -> bool:
    """A line that names rather than states ("Harvard University", a file's first line):
    never the evidence for a sentence."""
    line = text.strip()
    return "\n" not in line and not _SENTENCE_END.search(line) and len(line.split()) <= 6


def _pick(claim: str, scored: list[_Scored], text: str = "") -> list[tuple[int, int]]:
    """The best sentence, plus a neighbour when it supplies claim words the best one lacks;
    a title line only when nothing else is there."""
    if not scored:
        return []
    stating = [i for i, s in enumerate(scored) if not _title_line(text[s.start : s.end])]
    best_i = max(stating or range(len(scored)), key=lambda i: scored[i].score)
    best = scored[best_i]
    chosen = [best_i]
    needed = set(content_words(claim))
    missing = needed - best.words
    if missing and len(needed) >= 3:
        for j in (best_i + 1, best_i - 1):
            if 0 <= j < len(scored):
                gain = len(missing & scored[j].words)
                if (
                    gain >= 2
                    and gain / len(needed) >= 0.2
                    and scored[j].score >= _NEIGHBOUR_SCORE * best.score
                ):
                    chosen.append(j)
                    break
    chosen.sort()
    return [(scored[i].start, scored[i].end) for i in chosen]


def to_spans(
    hit: Hit, pieces: list[tuple[int, int]], page_of: PageLookup | None
) -> tuple[Span, ...]:
    length = max(0, hit.end - hit.start)
    merged: list[tuple[int, int]] = []
    for s, e in pieces:
        if merged and s - merged[-1][1] <= 3:
            merged[-1] = (merged[-1][0], e)
        else:
            merged.append((s, e))
    spans: list[Span] = []
    for s, e in merged:
        s, e = max(0, min(s, length)), max(0, min(e, length))  # never outside the chunk
        if e <= s:
            continue
        start = hit.start + s
        page = page_of(hit, start) if page_of is not None else None
        spans.append(
            Span(
                start=start,
                end=hit.start + e,
                page=page if page is not None else hit.page,
                text=hit.text[s:e],
            )
        )
    return tuple(spans)


# A sentence over ``split_sentences``' length limit arrives in line-sized pieces, and the
# chunker may put a chunk boundary between them: a long cited sentence would then be
# quoted and highlighted one line at a time. The pick grows over the neighbouring lines of
# the same sentence that the claim's words support.
_SENTENCE_END = re.compile(r"[.!?…。！？][\"'”’)\]]*$")
_GROW_SUPPORT = 0.5  # share of a line's content words the claim must contain
_GROW_LIMIT = 2000  # characters a span may grow by, each way
_STOP = re.compile(r"[.!?…。！？][\"'”’)\]]*(?=\s+(?![a-z])|$)")
_STOP_SPACE = re.compile(r"[.!?…。！？][\"'”’)\]]*\s+(?![a-z])")
_HEADING_CHARS = 40  # a line above this short, before a capital, is taken for a heading


def _ends_sentence(text: str) -> bool:
    return bool(_SENTENCE_END.search(text[-8:].rstrip()))


def _supported(piece: str, claim_words: set[str]) -> bool:
    words = set(content_words(piece))
    return not words or len(words & claim_words) / len(words) >= _GROW_SUPPORT


def grow_span(text: str, start: int, end: int, claim: str) -> tuple[int, int]:
    """``[start, end)`` of ``text`` grown line by line over the rest of its sentence, as
    far as the claim supports it; never past a sentence end or a blank line."""
    claim_words = set(content_words(claim))
    if not claim_words:
        return start, end
    # Only a window is looked at: ``text`` may be a whole book.
    w0 = max(0, start - _GROW_LIMIT)
    window = text[w0 : end + _GROW_LIMIT]
    lo, hi = start - w0, end - w0
    while hi < len(window) and not _ends_sentence(window[lo:hi]):
        nxt = hi
        while nxt < len(window) and window[nxt].isspace():
            nxt += 1
        if window.count("\n", hi, nxt) > 1 or nxt >= len(window):
            break
        line_end = window.find("\n", nxt)
        line_end = len(window) if line_end < 0 else line_end
        stop = _STOP.search(window, nxt, line_end)
        piece_end = stop.end() if stop else line_end
        if not _supported(window[nxt:piece_end], claim_words):
            break
        hi = piece_end
    while lo > 0:
        before = lo
        while before > 0 and window[before - 1].isspace():
            before -= 1
        if before == 0 or _ends_sentence(window[:before]) or window.count("\n", before, lo) > 1:
            break
        line_start = window.rfind("\n", 0, before) + 1
        stops = list(_STOP_SPACE.finditer(window, line_start, before))
        piece_start = stops[-1].end() if stops else line_start
        heading = "\n" in window[before:lo] and before - piece_start < _HEADING_CHARS
        if heading and window[lo].isupper():
            break
        if not _supported(window[piece_start:before], claim_words):
            break
        lo = piece_start
    return lo + w0, hi + w0


class SpanFinder:
    """Locates supporting sentences, embedding each chunk's sentences once.

    ``text_of`` (a hit's whole document text, or None) lets a cited sentence that the
    chunker split across chunks be quoted whole."""

    def __init__(
        self,
        embedder: Embedder | None = None,
        page_of: PageLookup | None = None,
        text_of: Callable[[Hit], str | None] | None = None,
    ) -> None:
        self.embedder = embedder
        self.page_of = page_of
        self.text_of = text_of
        self._sentences: dict[int, list[tuple[int, int]]] = {}
        self._vectors: dict[int, np.ndarray] = {}
        self._claims: dict[str, np.ndarray] = {}

    def _key(self, hit: Hit) -> int:
        return hit.chunk_id if hit.chunk_id >= 0 else id(hit)

    def sentences(self, hit: Hit) -> list[tuple[int, int]]:
        key = self._key(hit)
        if key not in self._sentences:
            self._sentences[key] = split_sentences(hit.text) or (
                [(0, len(hit.text))] if hit.text else []
            )
        return self._sentences[key]

    def prepare(self, claims: Sequence[str], hits: Sequence[Hit]) -> None:
        """Embed the claims and the hits' sentences in one batch."""
        if self.embedder is None:
            return
        texts: list[str] = []
        todo_claims = [c for c in dict.fromkeys(claims) if c not in self._claims]
        texts.extend(todo_claims)
        todo_hits: list[Hit] = []
        for hit in hits:
            if self._key(hit) in self._vectors or any(
                self._key(h) == self._key(hit) for h in todo_hits
            ):
                continue
            todo_hits.append(hit)
            texts.extend(hit.text[s:e] for s, e in self.sentences(hit))
        if not texts:
            return
        vectors = self.embedder.embed(texts)
        pos = 0
        for claim in todo_claims:
            self._claims[claim] = vectors[pos]
            pos += 1
        for hit in todo_hits:
            count = len(self.sentences(hit))
            self._vectors[self._key(hit)] = vectors[pos : pos + count]
            pos += count

    def text_vectors(self, texts: Sequence[str]) -> np.ndarray | None:
        """One vector per text (None without an embedder), each text embedded once per
        finder: the extractive answer's question and candidate units."""
        if self.embedder is None:
            return None
        self.prepare(texts, ())
        if not texts:
            return np.zeros((0, 0), dtype=np.float32)
        return np.stack([self._claims[t] for t in texts])

    def vectors(self, claim: str, hit: Hit) -> tuple[np.ndarray | None, np.ndarray | None]:
        """The claim's vector and the hit's sentence vectors (None without an embedder)."""
        if self.embedder is None:
            return None, None
        self.prepare([claim], [hit])
        return self._claims.get(claim), self._vectors.get(self._key(hit))

    def _scored(self, claim: str, hit: Hit) -> list[_Scored]:
        """``hit``'s sentences scored against ``claim`` ([] when it has none)."""
        sentences = self.sentences(hit)
        if not sentences:
            return []
        if self.embedder is not None:
            self.prepare([claim], [hit])
        return _score_sentences(
            claim, self._claims.get(claim), hit.text, sentences, self._vectors.get(self._key(hit))
        )

    def find(self, claim: str, hit: Hit) -> tuple[Span, ...]:
        scored = self._scored(claim, hit)
        if not scored:
            return ()
        return self.grown(hit, to_spans(hit, _pick(claim, scored, hit.text), self.page_of), claim)

    def grown(self, hit: Hit, spans: tuple[Span, ...], claim: str) -> tuple[Span, ...]:
        """``spans`` grown over the rest of their sentences where ``claim`` supports it:
        into the document beyond the chunk when ``text_of`` gives its text."""
        document: str | None = None
        bounds: list[tuple[int, int]] = []
        for span in spans:
            lo, hi = grow_span(hit.text, span.start - hit.start, span.end - hit.start, claim)
            # A chunk starts at a capital unless the chunker split a sentence before it.
            cut_before = lo == 0 and hit.start > 0 and not hit.text.lstrip()[:1].isupper()
            cut_after = hi == len(hit.text) and not _ends_sentence(hit.text[lo:hi])
            lo, hi = lo + hit.start, hi + hit.start
            if (cut_before or cut_after) and self.text_of is not None:
                if document is None:
                    document = self.text_of(hit) or ""
                    # Only the text this hit was read from: the file may have changed since.
                    if document[hit.start : hit.end] != hit.text:
                        document = ""
                if document:
                    lo, hi = grow_span(document, lo, hi, claim)
            if bounds and lo <= bounds[-1][1]:  # grown into the previous span: one span
                lo, hi = bounds[-1][0], max(hi, bounds[-1][1])
                bounds.pop()
            bounds.append((lo, hi))
        if bounds == [(s.start, s.end) for s in spans]:
            return spans
        out: list[Span] = []
        for lo, hi in bounds:
            inside = hit.start <= lo and hi <= hit.end
            text = hit.text[lo - hit.start : hi - hit.start] if inside else (document or "")[lo:hi]
            page = self.page_of(hit, lo) if self.page_of is not None else None
            if page is None:
                page = next((s.page for s in spans if s.start == lo), hit.page)
            out.append(Span(start=lo, end=hi, page=page, text=text))
        return tuple(out)

    def continued(self, claim: str, hit: Hit, lacking: Sequence[str]) -> tuple[Span, ...]:
        """Two sentences of ``hit`` that say ``claim`` together, when the sentence most
        like it lacks some of its names or figures (``lacking``): one of the best, and
        the next, which holds them all and opens by referring back to it ("… was a man
        whose name the ledger records. His name was Tobias Grell"). () when none does.

        Only a sentence that refers back is read with the one before: a next sentence
        about someone else ("Harold Wilson, then leader of the opposition, …") does not
        make the first one say its name."""
        scored = self._scored(claim, hit) if lacking else []
        if len(scored) < 2:
            return ()
        best = max(s.score for s in scored)
        pairs = [
            j
            for j in range(1, len(scored))
            if scored[j - 1].score >= _NEIGHBOUR_SCORE * best
            and _REFERS_BACK.match(hit.text[scored[j].start : scored[j].end])
            and all(_holds(hit.text[scored[j].start : scored[j].end], m) for m in lacking)
        ]
        if not pairs:
            return ()
        j = max(pairs, key=lambda i: scored[i - 1].score + scored[i].score)
        pieces = [(scored[j - 1].start, scored[j - 1].end), (scored[j].start, scored[j].end)]
        return self.grown(hit, to_spans(hit, pieces, self.page_of), claim)

    def best_score(self, claim: str, hit: Hit) -> float:
        scored = self._scored(claim, hit)
        return max((s.score for s in scored), default=0.0)


def find_spans(
    claim: str, hit: Hit, embedder: Embedder | None = None, page_of: PageLookup | None = None
) -> tuple[Span, ...]:
    """The sentence(s) of ``hit`` that best support ``claim``, in document offsets."""
    return SpanFinder(embedder, page_of).find(strip_citations(claim), hit)


# --- the whole check ---------------------------------------------------------------------


@dataclass(frozen=True)
class AnswerWarning:
    kind: WarningKind  # UNKNOWN_CITATION, UNSUPPORTED, UNVERIFIED_NUMBER or NO_CITATIONS
    message: str


@dataclass(frozen=True)
class CitationReport:
    answer: str  # the answer with unknown citation numbers removed
    citations: tuple[Citation, ...]
    warnings: tuple[AnswerWarning, ...]
    removed: tuple[int, ...] = ()
    unsupported: tuple[str, ...] = ()
    unverified: tuple[str, ...] = ()
    refusal: bool = False


def _lacking(claim: str, texts: Sequence[str]) -> list[str]:
    """The figures and names of ``claim`` that none of ``texts`` has."""
    return unverified_identifiers(claim, texts) + unverified_names(claim, texts)


def _said_about(hit: Hit, spans: Sequence[Span], finder: SpanFinder) -> list[str]:
    """What a cited passage says and what it says it about: the spans, the sentence
    before the first ("They settled in 911" after "Rollo led the Vikings"), the
    document's title and headings."""
    first = min(sp.start for sp in spans) - hit.start
    before = [hit.text[s:e] for s, e in finder.sentences(hit) if e <= first]
    return [sp.text for sp in spans] + before[-1:] + [hit.title, *hit.heading_path]


def _share_of(claim: str, text: str) -> float:
    return overlap(content_words(claim), set(content_words(text)))


CARRY_SHARE = 0.5  # of a sentence's content words its source must have to be cited by it


def _carried_back(
    answer: str, sentences: list[AnswerSentence], hits: Sequence[Hit]
) -> list[AnswerSentence]:
    """One citation after several sentences of a paragraph ("… He ruled until 927. …
    [1]") cites those before it that its source holds: every figure and name, and half
    the words."""
    out = list(sentences)
    carried: tuple[int, ...] = ()
    for i in range(len(out) - 1, -1, -1):
        sentence = out[i]
        if sentence.numbers:
            carried = sentence.numbers
            continue
        if not carried or re.search(r"\n\s*\n", answer[sentence.end : out[i + 1].start]):
            carried = ()
            continue
        if not is_claim(sentence.claim):
            continue
        holding = tuple(
            n
            for n in carried
            if 1 <= n <= len(hits)
            and not _lacking(sentence.claim, [hits[n - 1].text])
            and _share_of(sentence.claim, hits[n - 1].text) >= CARRY_SHARE
        )
        if holding:
            out[i] = replace(sentence, numbers=holding)
        else:
            carried = ()
    return out


def _short(text: str, limit: int = 120) -> str:
    text = re.sub(r"\s+", " ", text).strip()
    return text if len(text) <= limit else text[: limit - 1] + "…"


def verify_answer(
    answer: str,
    hits: Sequence[Hit],
    embedder: Embedder | None = None,
    *,
    page_of: PageLookup | None = None,
    finder: SpanFinder | None = None,
    tag: str | None = None,
) -> CitationReport:
    """Check every citation of ``answer`` against the numbered ``hits`` (``[1]`` is hits[0]).

    ``tag`` is the prompt's request tag: citations written as copies of its source
    markers are read as ``[n]`` and the tag never reaches the answer shown.
    """
    cleaned, removed = remove_unknown(normalise_citations(answer, tag), len(hits))
    warnings: list[AnswerWarning] = []
    if removed:
        listed = ", ".join(f"[{n}]" for n in removed)
        warnings.append(
            AnswerWarning(
                WarningKind.UNKNOWN_CITATION,
                f"The answer cited {listed}, which matches no source; removed.",
            )
        )
    if is_refusal(cleaned):
        return CitationReport(cleaned, (), tuple(warnings), removed, refusal=True)

    sentences = _carried_back(cleaned, answer_sentences(cleaned), hits)
    finder = finder or SpanFinder(embedder, page_of)
    cited_hits = [hits[n - 1] for s in sentences for n in s.numbers]
    finder.prepare([s.claim for s in sentences if s.numbers], cited_hits)

    citations: list[Citation] = []
    unsupported: list[str] = []
    unverified: list[str] = []
    every_source = [h.text for h in hits]
    for sentence in sentences:
        if not sentence.numbers:
            if is_claim(sentence.claim):
                unsupported.append(sentence.claim)
                # Uncited, yet its numbers and names can still be checked: against every
                # source the model was given.
                missing = unverified_identifiers(sentence.claim, every_source)
                missing += unverified_names(sentence.claim, every_source)
                unverified.extend(m for m in missing if m not in unverified)
                if missing:
                    listed = ", ".join(repr(m) for m in missing)
                    warnings.append(
                        AnswerWarning(
                            WarningKind.UNVERIFIED_NUMBER,
                            f'{listed} appears in none of the sources: "{_short(sentence.claim)}"',
                        )
                    )
            continue
        numbers = sentence.numbers
        missing = _lacking(sentence.claim, [hits[n - 1].text for n in numbers])
        if missing:
            # Cited to the wrong source: the one that holds every figure and name instead.
            holders = [
                m
                for m in range(1, len(hits) + 1)
                if m not in numbers and not _lacking(sentence.claim, [hits[m - 1].text])
            ]
            if holders:
                best = max(holders, key=lambda m: _share_of(sentence.claim, hits[m - 1].text))
                refs = ", ".join(f"[{n}]" for n in numbers)
                warnings.append(
                    AnswerWarning(
                        WarningKind.UNKNOWN_CITATION,
                        f"Cited {refs}, but source [{best}] is the one that says: "
                        f'"{_short(sentence.claim)}"; the citation points there.',
                    )
                )
                numbers, missing = (best,), []
        for n in numbers:
            hit = hits[n - 1]
            spans = () if missing else finder.find(sentence.claim, hit)
            # The passage shown must say it of the claim's subject: a name or figure of the
            # claim that is in the source but not in that passage (the subjects swapped,
            # "Wilson" for "Heath") is not supported by it.
            swapped = _lacking(sentence.claim, _said_about(hit, spans, finder)) if spans else []
            if swapped:
                # The sentence most like the claim lacks its name; the next may give it.
                spans = finder.continued(sentence.claim, hit, swapped)
                if spans:
                    swapped = _lacking(sentence.claim, _said_about(hit, spans, finder))
            if swapped:
                missing.extend(m for m in swapped if m not in missing)
                spans = ()
            citations.append(Citation(n=n, hit=hit, spans=spans, sentence=sentence.text))
        unverified.extend(m for m in missing if m not in unverified)
        if missing:
            listed = ", ".join(repr(m) for m in missing)
            refs = ", ".join(f"[{n}]" for n in numbers)
            warnings.append(
                AnswerWarning(
                    WarningKind.UNVERIFIED_NUMBER,
                    f"{listed} is not in what the cited source {refs} says about it: "
                    f'"{_short(sentence.claim)}"',
                )
            )
    if not citations and sentences:
        warnings.append(
            AnswerWarning(
                WarningKind.NO_CITATIONS,
                "The answer cites no source; check it against the sources.",
            )
        )
    for claim in unsupported:
        warnings.append(
            AnswerWarning(WarningKind.UNSUPPORTED, f'No source is cited for: "{_short(claim)}"')
        )
    return CitationReport(
        answer=cleaned,
        citations=tuple(citations),
        warnings=tuple(warnings),
        removed=removed,
        unsupported=tuple(unsupported),
        unverified=tuple(unverified),
    )
