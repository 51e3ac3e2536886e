"""Find a cited sentence inside a page's text when the two were extracted differently.

The span text comes from Lectern's own extraction (pypdf) while the page text shown comes
from the PDF renderer (pdfium): line breaks, hyphenation, ligatures and spacing differ.
Comparing only letters and digits, case-folded and NFKC-normalised, makes both agree;
an index map leads back to the page's own character positions.
"""

from __future__ import annotations

import difflib
import unicodedata

MIN_PARTIAL = 24  # letters and digits: below this a partial match could be anywhere
EDGE = 40  # characters taken from each end of the needle when the middle differs
MIN_MARKED = 12  # letters: below this, one found past digits could be anywhere


def _folded(text: str) -> tuple[str, list[int]]:
    chars: list[str] = []
    index: list[int] = []
    for i, ch in enumerate(text):
        for c in unicodedata.normalize("NFKC", ch).casefold():
            if c.isalnum():
                chars.append(c)
                index.append(i)
    return "".join(chars), index


def locate(needle: str, haystack: str) -> tuple[int, int] | None:
    """``(start, end)`` of ``needle`` in ``haystack`` (end exclusive), or None.

    Tries an exact match of the folded texts, then one past footnote marks, then the
    needle's two ends, then the longest common run (a sentence split across pages or
    columns still lights up its part).
    """
    n, _ = _folded(needle)
    h, index = _folded(haystack)
    if not n or not h:
        return None
    at = h.find(n)
    if at >= 0:
        return index[at], index[at + len(n) - 1] + 1
    marked = _past_marks(n, h)
    if marked is not None:
        return index[marked[0]], index[marked[1] - 1] + 1
    if len(n) > 2 * EDGE:
        head, tail = n[:EDGE], n[-EDGE:]
        start = h.find(head)
        if start >= 0:
            end = h.find(tail, start + EDGE)
            if end >= 0 and end + EDGE - start <= 2 * len(n):
                return index[start], index[end + EDGE - 1] + 1
    matcher = difflib.SequenceMatcher(None, h, n, autojunk=False)
    match = matcher.find_longest_match(0, len(h), 0, len(n))
    if match.size >= min(MIN_PARTIAL, len(n)):
        return index[match.a], index[match.a + match.size - 1] + 1
    return None


def _past_marks(n: str, h: str) -> tuple[int, int] | None:
    """``(start, end)`` in ``h`` of ``n`` (both folded) where ``h`` has digits more: the
    footnote marks the PDF parser leaves out of a sentence ("laws¹⁰ associated") and
    the page's renderer keeps. The needle's own digits must be there, in order, so
    "Total 10" is not found at "Total 12"."""
    bare = "".join(c for c in n if not c.isdigit())
    if len(bare) < MIN_MARKED:
        return None
    kept = [i for i, c in enumerate(h) if not c.isdigit()]
    plain = "".join(h[i] for i in kept)
    digits = [c for c in n if c.isdigit()]
    at = plain.find(bare)
    while at >= 0:
        start, end = kept[at], kept[at + len(bare) - 1] + 1
        shown = iter(c for c in h[start:end] if c.isdigit())
        if all(d in shown for d in digits):  # a subsequence: the extra digits are marks
            return start, end
        at = plain.find(bare, at + 1)
    return None


def locate_all(needle: str, haystack: str, limit: int = 8) -> list[tuple[int, int]]:
    """Every exact (folded) occurrence of ``needle``, else :func:`locate`'s best guess.

    A page can hold a sentence twice: arXiv figures often embed their own caption text in
    a tiny or hidden font, ahead of the visible caption in the text layer."""
    n, _ = _folded(needle)
    h, index = _folded(haystack)
    found: list[tuple[int, int]] = []
    at = h.find(n) if n else -1
    while at >= 0 and len(found) < limit:
        found.append((index[at], index[at + len(n) - 1] + 1))
        at = h.find(n, at + 1)
    if found:
        return found
    guess = locate(needle, haystack)
    return [guess] if guess else []


def excerpt_bounds(text: str, start: int, end: int, context: int = 2500) -> tuple[int, int]:
    """A window around ``[start, end)`` that begins and ends at line or word breaks."""
    lo = max(0, start - context)
    hi = min(len(text), end + context)
    if lo > 0:
        cut = text.rfind("\n", lo - 200, start)
        lo = cut + 1 if cut >= 0 and cut >= lo - 200 else max(0, text.rfind(" ", 0, lo) + 1)
    if hi < len(text):
        cut = text.find("\n", hi, hi + 200)
        if cut < 0:
            cut = text.find(" ", hi)
        hi = cut if cut >= 0 else len(text)
    return lo, hi
