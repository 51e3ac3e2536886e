"""Words and sentences, one definition for every stage that needs them.

Chunking (a chunk never ends inside a sentence), citation spans (the sentences of a cited
chunk that support a claim) and extractive answers (the sentences that answer a question)
must agree on what a sentence is, or a highlight could start inside a chunk's first
sentence. Sentences end at Latin and CJK full stops, blank lines and bullets, and not after
abbreviations or initials; words are lowercased, stop words dropped and plurals folded.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

# --- words --------------------------------------------------------------------------

STOPWORDS = frozenset(
    [
        "a",
        "about",
        "above",
        "after",
        "again",
        "against",
        "all",
        "also",
        "am",
        "an",
        "and",
        "any",
        "are",
        "as",
        "at",
        "be",
        "because",
        "been",
        "before",
        "being",
        "below",
        "between",
        "both",
        "but",
        "by",
        "can",
        "could",
        "did",
        "do",
        "does",
        "doing",
        "down",
        "during",
        "each",
        "few",
        "for",
        "from",
        "further",
        "had",
        "has",
        "have",
        "having",
        "he",
        "her",
        "here",
        "hers",
        "herself",
        "him",
        "himself",
        "his",
        "how",
        "i",
        "if",
        "in",
        "into",
        "is",
        "it",
        "its",
        "itself",
        "just",
        "me",
        "more",
        "most",
        "my",
        "myself",
        "no",
        "nor",
        "not",
        "now",
        "of",
        "off",
        "on",
        "once",
        "only",
        "or",
        "other",
        "our",
        "ours",
        "ourselves",
        "out",
        "over",
        "own",
        "same",
        "she",
        "should",
        "so",
        "some",
        "such",
        "than",
        "that",
        "the",
        "their",
        "theirs",
        "them",
        "themselves",
        "then",
        "there",
        "these",
        "they",
        "this",
        "those",
        "through",
        "to",
        "too",
        "under",
        "until",
        "up",
        "very",
        "was",
        "we",
        "were",
        "what",
        "when",
        "where",
        "which",
        "while",
        "who",
        "whom",
        "why",
        "will",
        "with",
        "would",
        "you",
        "your",
        "yours",
        "yourself",
        "yourselves",
        "may",
        "might",
        "must",
        "shall",
        "upon",
        "within",
        "without",
        "via",
        "per",
        "among",
        "whether",
        "yet",
        "though",
        "although",
        "however",
        "thus",
        "therefore",
        "one",
        "ones",
        "many",
        "much",
        "several",
        "etc",
        "according",
        "source",
        "sources",
        "document",
        "documents",
        "did",
        "does",
        "say",
        "says",
        "said",
        "called",
        "named",
        "known",
        "name",
    ]
)

_WORD = re.compile(r"\w+", re.UNICODE)


def stem(word: str) -> str:
    # Just enough folding for overlap between an answer and its source (plural/possessive).
    if len(word) > 4 and word.endswith("ies"):
        return word[:-3] + "y"
    if len(word) > 3 and word.endswith("s") and not word.endswith("ss"):
        return word[:-1]
    return word


def words(text: str) -> list[str]:
    return _WORD.findall(text.lower())


def content_words(text: str) -> list[str]:
    return [stem(w) for w in words(text) if w not in STOPWORDS and (len(w) > 1 or w.isdigit())]


def overlap(query_words: Sequence[str], text_words: set[str]) -> float:
    """Share of the distinct query words present in the text."""
    unique = set(query_words)
    if not unique:
        return 0.0
    return len(unique & text_words) / len(unique)


# --- sentences ----------------------------------------------------------------------

_ABBREVIATIONS = frozenset(
    [
        "e.g",
        "i.e",
        "mr",
        "mrs",
        "ms",
        "dr",
        "st",
        "vs",
        "no",
        "nos",
        "fig",
        "figs",
        "al",
        "inc",
        "ltd",
        "jr",
        "sr",
        "prof",
        "gen",
        "col",
        "lt",
        "sgt",
        "approx",
        "ca",
        "cf",
        "p",
        "pp",
        "vol",
        "ed",
        "eds",
        "dept",
        "est",
        "jan",
        "feb",
        "mar",
        "apr",
        "jun",
        "jul",
        "aug",
        "sep",
        "sept",
        "oct",
        "nov",
        "dec",
        "art",
        "sec",
        "ch",
    ]
)
# A sentence ends at . ! ? (plus closing quotes/brackets) when whitespace and then something
# other than a lowercase letter follows; at CJK full stops; and at blank lines or bullets.
_BOUNDARY = re.compile(
    r"(?P<latin>[.!?…]+[\"'”’)\]]*)(?=\s+(?![a-z]))"
    r"|(?P<cjk>[。！？]+[」』”’)]*)"
    r"|(?P<para>\n[ \t]*\n\s*)"
    r"|(?P<bullet>\n(?=[ \t]*(?:[-*•·▪‣]|\d{1,3}[.)])\s))"
)
_MAX_SENTENCE = 600


def _is_abbreviation(text: str, dot: int) -> bool:
    """Whether the period at ``dot`` closes an abbreviation or initial, not a sentence."""
    head = text[max(0, dot - 12) : dot]
    match = re.search(r"(?:^|[\s(\[])([A-Za-z.]{1,6})$", head)
    if not match:
        return False
    token = match.group(1)
    if re.fullmatch(r"(?:[A-Z]\.)*[A-Z]", token):  # J. / U.S.
        return True
    return token.lower().rstrip(".") in _ABBREVIATIONS


def _trimmed(text: str, start: int, end: int) -> tuple[int, int] | None:
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    return (start, end) if end > start else None


def split_sentences(text: str, start: int = 0, end: int | None = None) -> list[tuple[int, int]]:
    """``(start, end)`` offsets of the sentences of ``text[start:end]``, as offsets into
    ``text``, whitespace trimmed."""
    stop = len(text) if end is None else end
    spans: list[tuple[int, int]] = []
    for match in _BOUNDARY.finditer(text, start, stop):
        if match.group("latin") is not None:
            punct = match.group("latin")
            if (
                punct.startswith(".")
                and punct.rstrip("\"'”’)]") == "."
                and _is_abbreviation(text, match.start())
            ):
                continue
            cut = next_start = match.end()
        elif match.group("cjk") is not None:
            cut = next_start = match.end()
        else:
            cut = match.start()
            next_start = match.end()
        span = _trimmed(text, start, cut)
        if span:
            spans.append(span)
        start = next_start
    span = _trimmed(text, start, stop)
    if span:
        spans.append(span)
    return [piece for s in spans for piece in _split_long(text, s)]


def _split_long(text: str, span: tuple[int, int]) -> list[tuple[int, int]]:
    # Tables and lists without punctuation would otherwise become one huge "sentence".
    start, end = span
    if end - start <= _MAX_SENTENCE or "\n" not in text[start:end]:
        return [span]
    out: list[tuple[int, int]] = []
    pos = start
    for line in re.finditer(r"\n", text[start:end]):
        cut = start + line.start()
        if cut - pos >= 80:
            piece = _trimmed(text, pos, cut)
            if piece:
                out.append(piece)
            pos = cut + 1
    piece = _trimmed(text, pos, end)
    if piece:
        out.append(piece)
    return out
