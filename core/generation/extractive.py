"""The answer without a language model: the parts of the retrieved passages that best
answer the question, quoted.

A part is what the document itself is made of (a "unit"): a sentence of prose, a row of a
sheet, a CSV file or a table (shown with its column names: "Title: The Remains of the
Day; Rating: 5"), a slide (its lines together, read with its title), a field of a form or
a mail's header ("Date: 2024-03-06 09:00", read with the mail's subject). Headings and
title lines, blocks of glyphs (private-use characters that a PDF's symbol font left
behind) and repeats of the same words from another passage are never units. Each unit is
scored by meaning (cosine between the question and the unit, with the bundled embedding
model) plus keyword overlap with the question, plus a bonus when it holds what the
question asks for (a date for "when", a number for "how many", a name for "who"); a
sentence that holds the figure or date asked for but opens with a pronoun ("Er sprach von
einem Einbehalt von 300 Euro") is compared as read with the sentence before it. The
best unit is quoted with the sentence after it in its paragraph (which often completes
it), the sentence before it when it opens with "he", "it" or "they", the neighbour that
holds the date, number or name asked for when it does not ("The outage was caused by a
failed disk. Priya Raman, the on-call engineer, replaced it."), and up to two more units
scoring within 0.15 of it (0.1, chosen on one SQuAD article, left out units that held the
answer on all ten and on the real-document sets), but not another table's row of the
best row's label. Each is verbatim, with its citation and span, labelled as extracted
rather than written. Bracketed numbers of the document's own text ("per kilometre
[1][2][3]") are left out of the answer, so that its only [n] are its sources.

Whether to decline is weighed, not vetoed (core/generation/decline.py): the best unit's
score, cosine and keyword overlap, how much of the question the quoted units cover, the
share of its names, numbers and content words no passage has and how much those carry
(the question's cosine with itself without them, and how much nearer the best unit it is
without them: "What was the name of Alan Turing's dog?"), whether the quote holds what is
asked, a "not" or "how many X" the quote does not meet, and whether the best unit is a
row or not in English. A logistic model over these, fit by bench/decline_fit.py on SQuAD
2.0 (ten articles), the written out-of-corpus sets and the real-document sets of
bench/answer_sets/ (each set weighted alike), declines below its threshold. The hard
rules it replaces (a name no passage has, a "not" no unit meets) declined real questions
over OCR spellings, codes, tables and other languages; they are kept as ``CASCADE`` for
comparison, and without an embedding model.

The quote reaches the value: a sentence whose value is one or two sentences on in its
paragraph is quoted with them; a table's row carries its column names, also in a passage
that starts inside a table too long for one (read from the document's text); a footnote's
number set after a word ("fatalities2") is left out of the quote. Real layouts: a table
that a PDF's text layer gives line by line (lines of two or more figures) is read row by
row, each row with the line that names its figures, never as headings; a label alone on
its line ("Contact Information:") is read with the short line under it; a sum alone on its
line ("£164.00") and a sentence closing inside its quotes are units, not titles. When no
quoted unit holds the figure, date or name asked for, the best unit among the next that
holds it and names something of the question the quote does not ("Kerala 14.32 9.43 4.86"
under the caption that matched "What was Kerala's growth rate?") is quoted beside them. A
year is not an amount, nor is "Table 4"; questions in French, Spanish, Portuguese, Italian,
German, Dutch and Russian are typed too. Figures: docs/decisions/answers-on-real-documents.md.

"How many" answered by rows of a table says their count too, in a last line of its own
("Added up, the “count” of the 3 rows quoted here is 8 (2 + 5 + 1)."): of the quoted rows
alone, and only when each of them has every word of the question that any of them has
(rows that disagree are not all the answer) and a count column with whole numbers.
"""

from __future__ import annotations

import bisect
import difflib
import itertools
import re
import unicodedata
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np

from core.citation_marks import strip_citations
from core.embedding.languages import ENGLISH, passage_language
from core.generation.citations import REFUSAL, PageLookup, SpanFinder, to_spans
from core.generation.decline import MODEL, DeclineModel, DeclineSignals
from core.records import SHEET_TYPES, SLIDE_TYPES, Citation, Hit
from core.text import STOPWORDS, content_words, trimmed, words

if TYPE_CHECKING:
    from core.embedding.models import Embedder

OVERLAP_WEIGHT = 0.35  # keyword overlap added to the cosine similarity
TYPE_BONUS = 0.08  # the unit holds what the question asks for (a date for "when")
RANK_DECAY = 0.02  # small preference for units from better-ranked passages
DECLINE_BELOW = 0.5  # best score under this: the documents do not seem to hold the answer
DROP_BELOW = 0.8  # cosine of the question with and without the words no passage has
DECLINE_BELOW_MISSING = 0.58  # best score under this when a question word is in no passage
SHIFT_ABOVE = 0.1  # without those words, the question this much closer to the best unit
KEEP_WITHIN = 0.15  # further units must score within this of the best one
NEXT_SENTENCE = True  # the sentence after the best one, in its paragraph, joins it
REQUIRE_NEGATION = True  # decline a question with "not" when no quoted unit has one
MAX_SENTENCES = 3
MAX_HITS = 6
MIN_SENTENCE_CHARS = 12
SLIDE_UNIT_CHARS = 600  # a slide's body up to this long is one unit
EXCERPT_FROM_CHARS = 400  # a passage this short is sent to the model whole
EXCERPT_UNITS = 1  # a longer one: its best unit, with the unit before and after

EXTRACTIVE_NOTE = "extracted from your documents; no language model wrote this answer"


@dataclass(frozen=True)
class ScoredSentence:
    hit_index: int  # index into the hits (the source number is hit_index + 1)
    start: int  # offsets within the hit's text
    end: int
    text: str  # as the answer shows it
    cosine: float
    overlap: float
    score: float
    kind: str = "sentence"  # sentence | row | field | slide
    has_type: bool = False  # holds what the question asks for
    context: str = ""  # what was compared with the question, when more than ``text``


@dataclass(frozen=True)
class ExtractiveAnswer:
    text: str  # the units, each followed by its [n]; or the refusal
    citations: tuple[Citation, ...]
    declined: bool
    best_score: float
    sentences: tuple[ScoredSentence, ...] = ()
    reason: str = ""  # why declined: score, name, negation, counted, missing_words


# --- units ----------------------------------------------------------------------------


@dataclass(frozen=True)
class _Unit:
    hit_index: int
    start: int  # offsets within the hit's text: what the citation highlights
    end: int
    text: str  # what the answer shows
    kind: str
    context: str  # what is compared with the question: a field with its document's title
    before: str = ""  # the sentence before, when this one opens with a pronoun


def _clean(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


# Private-use characters (a symbol font's bullets and boxes read without their font), the
# replacement character and the geometric-shape boxes: glyphs, not words.
_GLYPH = re.compile("[\ue000-\uf8ff\U000f0000-\U0010fffd\ufffd\u25a0-\u25ff]")
_LEADING_GLYPHS = re.compile(r"(?:[\ue000-\uf8ff\ufffd\u25a0-\u25ff•·▪‣◦]\s*)+")
_TERMINAL = tuple(".!?:;,…。！？")
_HEADING_MAX = 120  # characters: a longer line is running text (a journal's running head is ~90)
_FIELD = re.compile(r"^\s*([^\W\d][^:|\n]{0,40}?)\s*:\s+\S")  # "Date: 2026-03-06"
_SLIDE_HEADING = re.compile(r"^\s*Slide \d+(?::.*)?$")


# A footnote's number set after a word or its full stop ("fatalities2 in", "the crash.3
# The"), which a PDF's text layer gives as plain digits: not the document's words.
_FOOTNOTE = re.compile(
    r"(?<=[a-z]{4})\d{1,2}(?=[\s,;:)]|\.(?:\s|$)|$)|(?<=[a-z][.,;:])\d{1,2}(?=\s+[A-Z])"
)


def _without_footnotes(text: str) -> str:
    return _FOOTNOTE.sub("", text)


def _is_field(line: str) -> bool:
    """A "Label: value" line: a form's field, a mail's header, "DATES: Comments must …"."""
    match = _FIELD.match(line)
    return match is not None and len(match.group(1).split()) <= 4


_NUMBER_TOKEN = re.compile(r"(?<![\w.,])[-+(£$€]?\d[\d.,:/%]*")
_CLOSING = "\"'”’»)]"


# A number that names a part of the document ("Table 4", "Fig. 2", "page 6"), not a
# value of it.
_LABEL_NUMBER = re.compile(
    r"\b(?:table|tab|figure|fig|chart|graph|page|p|pp|section|sec|chapter|annex|appendix|"
    r"exhibit|item|note|no)\.?\s*\d+(?:[.-]\d+)*[a-z]?\b",
    re.IGNORECASE,
)


def _figure_line(line: str) -> bool:
    """A line holding two or more figures past a leading item or page number: the row of
    a table that the PDF's text layer gave as a line ("South Dakota 1.48 - 1.55 1.49 -
    1.55"), which states a value and titles nothing."""
    body = _LABEL_NUMBER.sub(" ", re.sub(r"^\s*\d{1,3}[.)]?\s+", "", line))
    return len(_NUMBER_TOKEN.findall(body)) >= 2


def _is_value(line: str) -> bool:
    """A line that is a figure with no word ("£164.00", "12/20/2015"): a value set under
    what it belongs to, never a title."""
    return bool(re.search(r"\d", line)) and not re.search(r"[^\W\d_]{2}", line)


def _is_heading(line: str, headings: set[str]) -> bool:
    """A line that titles what follows: a Markdown heading, one of the chunk's own
    headings, or a short title-cased line without closing punctuation."""
    line = line.strip()
    if not line:
        return False
    if line.startswith("#") or line.casefold() in headings or _SLIDE_HEADING.match(line):
        return True
    if len(line) > _HEADING_MAX or line.rstrip(_CLOSING).endswith(_TERMINAL) or "|" in line:
        return False  # running text, a table row (a sheet's or a CSV's)
    if _is_field(line) or _figure_line(line) or _is_value(line):
        return False  # a form's field, a row of figures, a value
    found = [w for w in re.findall(r"\w+", line) if len(w) > 3]
    return bool(found) and sum(w[0].isupper() or w[0].isdigit() for w in found) >= 0.6 * len(found)


def _after_headings(text: str, start: int, end: int, headings: set[str]) -> int:
    """Where the sentence ``text[start:end]`` starts once the heading lines it opens with
    are left out: quoted with it, a heading runs into the sentence ("Travel Policy This
    policy applies…"). ``end`` when the sentence is headings only."""
    while start < end:
        newline = text.find("\n", start, end)
        if newline < 0:
            # The last line: only a known heading goes here (a lone short line is judged
            # by _lone_title, which knows what follows it).
            last = text[start:end].strip()
            known = last.startswith("#") or last.casefold() in headings
            return end if known or _SLIDE_HEADING.match(last) else start
        if not _is_heading(text[start:newline], headings):
            return start
        start = newline + 1
        while start < end and text[start].isspace():
            start += 1
    return end


def _lone_title(text: str) -> bool:
    """Short lines without closing punctuation, a label or a list bullet, before more text:
    a title block ("KX-7 / Read-only archive", "Non-text-searchable PDF") or a
    signature, which states nothing."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if not lines:
        return False
    for line in lines:
        if len(line) > _HEADING_MAX or line.rstrip(_CLOSING).endswith(_TERMINAL) or "|" in line:
            return False  # ('a rating of “Adequate.”' closes inside its quotes)
        if _is_field(line) or re.match(r"(?:[-*•·▪‣]|\d{1,3}[.)])\s", line):
            return False
        if _figure_line(line) or _is_value(line):
            return False
    return sum(len(line.split()) for line in lines) <= 12


def _glyph_block(text: str) -> bool:
    """Glyphs amid the words: a list set in a symbol font, a page of boxes."""
    glyphs = len(_GLYPH.findall(text))
    visible = len(re.sub(r"\s", "", text))
    return glyphs >= 2 or (glyphs > 0 and glyphs * 10 > visible)


def _cells(row: str) -> list[str]:
    return [c.strip() for c in row.strip().strip("|").split("|")]


def _header_cells(hit: Hit) -> list[str]:
    """The column names a sheet's or a CSV file's rows are read with (its header row,
    which the heading path carries)."""
    for heading in reversed(hit.heading_path):
        if " | " in heading:
            return _cells(heading)
    return []


_TABLE_RULE = re.compile(r"^\s*\|?\s*:?-{3,}")  # Markdown's line under the header


_FIGURE = re.compile(r"[\d\s.,%()+\-–—$€£/:]+")
_NOT_AVAILABLE = re.compile(r"(?i)n\.?\s?a\.?|n/a|x|\*+|-+|–")
_YEAR = re.compile(r"(?:18|19|20)\d\d")


def _is_table_line(line: str) -> bool:
    return line.count("|") >= 2 or " | " in line


def _names_columns(line: str) -> bool:
    """Whether a table's first line is its header: not a row of figures ("1995 | 12.4 |
    8.1"), though a header may hold a year or a number among its names ("Year | Total |
    PK | K | 1 | 2")."""
    cells = [c for c in _cells(line) if c and c != _EMPTY_CELL]
    # A year names a column ("Country | 1995 | 2000"); "n.a." stands for a figure.
    figures = sum(
        bool(_FIGURE.fullmatch(c) or _NOT_AVAILABLE.fullmatch(c)) and not _YEAR.fullmatch(c)
        for c in cells
    )
    return bool(cells) and figures * 2 < len(cells)


# How core/ingest/pdf_tables.py writes a table's empty first cell, so that the columns
# stay in place: not a value.
_EMPTY_CELL = "—"
_ABOVE_LIMIT = 200_000  # characters looked back for a split table's header


@dataclass(frozen=True)
class TableAbove:
    """What the document says above a passage that starts inside a table."""

    header: tuple[str, ...] = ()  # the table's column names
    caption: str = ""  # the lines just above the table ("STATE-WISE RAINFALL DISTRIBUTION")


_CAPTION_LINES = 3
_CAPTION_CHARS = 300


def _document_of(hit: Hit, text_of: Callable[[Hit], str | None] | None) -> str:
    """``hit``'s whole document text, "" when it is not known or no longer holds the
    passage where the hit says (the file changed since)."""
    if hit.start <= 0 or text_of is None:
        return ""
    document = text_of(hit)
    return document if document and document[hit.start : hit.end] == hit.text else ""


def table_above(hit: Hit, text_of: Callable[[Hit], str | None] | None) -> TableAbove:
    """The column names and caption of a table that ``hit`` starts inside (a table too
    long for one passage, split by rows), read from the document's text."""
    first = hit.text.lstrip().split("\n", 1)[0]
    if not _is_table_line(first):
        return TableAbove()
    document = _document_of(hit, text_of)
    if not document:
        return TableAbove()
    pos, header = hit.start, ""
    floor = max(0, hit.start - _ABOVE_LIMIT)
    while pos > floor:
        line_start = document.rfind("\n", floor, max(floor, pos - 1)) + 1
        line = document[line_start:pos].strip()
        if not line or not _is_table_line(line):
            break
        header, pos = line, line_start
    if not header or not _names_columns(header):
        return TableAbove()
    before = document[max(0, pos - _CAPTION_CHARS) : pos].strip().splitlines()
    caption = " ".join(line.strip() for line in before[-_CAPTION_LINES:] if line.strip())
    return TableAbove(tuple(_cells(header)), caption)


def _table_rows(text: str, above: Sequence[str] = ()) -> list[tuple[int, int, list[str]]]:
    """The rows of the tables in ``text`` (two or more lines of cells, one under the
    other: a document's table, a Markdown table), each with its table's column names:
    its first line when that names columns, or ``above`` (the header of a table the text
    starts inside); none for a table cut by a chunk whose header is not known."""
    rows: list[tuple[int, int, list[str]]] = []
    run: list[tuple[int, int]] = []
    opening = re.match(r"\s*", text)
    start_of_text = opening.end() if opening else 0

    def flush() -> None:
        if len(run) >= 2 or (run and above and run[0][0] == start_of_text):
            first = text[run[0][0] : run[0][1]]
            if above and run[0][0] == start_of_text:
                header, body = list(above), list(run)
            else:
                header = _cells(first) if _names_columns(first) else []
                body = run[1:] if header else list(run)
            rows.extend((s, e, header) for s, e in body if not _TABLE_RULE.match(text[s:e]))
        run.clear()

    for line in re.finditer(r"[^\n]+", text):
        s, e = line.span()
        if _is_table_line(text[s:e]):
            if run and text.count("\n", run[-1][1], s) > 1:
                flush()  # a blank line between: two tables, or rows of a sheet
            run.append((s, e))
        else:
            flush()
    flush()
    return rows


def _labelled_row(row: str, header: list[str]) -> str:
    """``row`` with each cell after its column's name: "Rating: 5"."""
    cells = _cells(strip_citations(row))
    if not header or len(cells) > len(header) + 1:
        return " | ".join(c for c in cells if c and c != _EMPTY_CELL)
    parts = []
    for i, cell in enumerate(cells):
        if not cell or cell == _EMPTY_CELL:
            continue
        name = header[i] if i < len(header) else ""
        named = name and name != cell and name != _EMPTY_CELL
        parts.append(f"{name}: {cell}" if named else cell)
    return "; ".join(parts)


def _split_fields(text: str, start: int, end: int) -> list[tuple[int, int]]:
    """A block of "Label: value" lines (a form, a mail's header) as one unit per line; any
    other sentence as itself."""
    lines = [(m.start() + start, m.end() + start) for m in re.finditer(r"[^\n]+", text[start:end])]
    lines = [(s, e) for s, e in lines if text[s:e].strip()]
    if len(lines) < 2 or sum(_is_field(text[s:e]) for s, e in lines) < 0.6 * len(lines):
        return [(start, end)]
    out = []
    for s, e in lines:
        while s < e and text[s].isspace():
            s += 1
        while e > s and text[e - 1].isspace():
            e -= 1
        out.append((s, e))
    return out


def _split_figure_rows(text: str, start: int, end: int) -> list[tuple[int, int]]:
    """A "sentence" of several lines that are rows of figures (a table the PDF's text
    layer gave line by line, which no table reader took) as one unit per row, the lines
    between them kept together: a block of rows has no sentence in it, and quoting the
    whole block would bury the row that was asked about."""
    lines = [(m.start(), m.end()) for m in re.finditer(r"[^\n]+", text[start:end])]
    lines = [(s + start, e + start) for s, e in lines if text[s + start : e + start].strip()]
    if len(lines) < 2 or sum(_figure_line(text[s:e]) for s, e in lines) < 2:
        return [(start, end)]
    out: list[tuple[int, int]] = []
    run: list[tuple[int, int]] = []
    for s, e in lines:
        if _figure_line(text[s:e]):
            if run:
                out.append((run[0][0], run[-1][1]))
                run = []
            out.append((s, e))
        else:
            run.append((s, e))
    if run:
        out.append((run[0][0], run[-1][1]))
    return [t for s, e in out if (t := trimmed(text, s, e))]


def _join_cut_sentences(text: str, pieces: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """A sentence that a page or column break cut ("The report lists 189" | page 2 |
    "fatalities among the passengers.") as one: the first part ends without a full stop
    and the second starts in lower case, only blank lines between."""
    out: list[tuple[int, int]] = []
    for s, e in pieces:
        if out:
            ps, pe = out[-1]
            gap = text[pe:s]
            if (
                "\n" in gap
                and not gap.strip()
                and text[s].islower()
                and not text[ps:pe].rstrip(_CLOSING).endswith(_TERMINAL)
                and not _figure_line(text[ps:pe])
                and e - ps <= 600
            ):
                out[-1] = (ps, e)
                continue
        out.append((s, e))
    return out


_LABEL_MAX = 60  # characters of a label line ("Contact Information:") and of its value


def _labels_with_values(
    text: str, pieces: list[tuple[int, int]]
) -> tuple[list[tuple[int, int]], set[tuple[int, int]]]:
    """A label alone on its line ("Contact Information:") joined with the short line under
    it ("JOHN BATTEN"), as a form's field: apart, the label says nothing and the value is
    taken for a title. The joined pieces are returned too."""
    out: list[tuple[int, int]] = []
    joined: set[tuple[int, int]] = set()
    n = 0
    while n < len(pieces):
        s, e = pieces[n]
        label = text[s:e]
        if n + 1 < len(pieces) and "\n" not in label and label.endswith(":"):
            ns, ne = pieces[n + 1]
            value = text[ns:ne]
            if (
                len(label) <= _LABEL_MAX
                and len(value) <= _LABEL_MAX
                and "\n" not in value
                and not value.rstrip().endswith(":")
                and text.count("\n", e, ns) <= 2
            ):
                out.append((s, ne))
                joined.add((s, ne))
                n += 2
                continue
        out.append((s, e))
        n += 1
    return out, joined


# A year or a span of years ("2001", "1951-1961", "2001-02"): as a table's column name.
_YEAR_SPAN = re.compile(r"(?:18|19|20)\d\d(?:[-–/](?:(?:18|19|20)?\d\d))?")
_CELL = re.compile(_NUMBER_TOKEN.pattern + r"|(?<!\S)[-–—](?!\S)")  # a figure or "-" (none)
_ROWS_LOOKED_THROUGH = 400  # lines walked up from a row for its table's caption and title


def _column_line(line: str) -> bool:
    """A line of figures that are all years or spans of years ("States/Union Territories
    1951-1961 1961-1971 …", "2001 2002 2003", "2001-07"): a table's column names or its
    period, not its values."""
    body = _LABEL_NUMBER.sub(" ", line)
    found = [t.strip("()[],;:") for t in body.split() if any(c.isdigit() for c in t)]
    return _figure_line(line) and all(_YEAR_SPAN.fullmatch(t) for t in found)


# A table's numbered title ("Table 4: State-wise…", "tABLE 2. Selected…", "Tabla 3 -…"),
# not a sentence that refers to one ("(Table 1). Householders…").
_TABLE_TITLE = re.compile(
    r"^\W{0,2}(?:table|tab|tabla|tableau|tabelle|tabella|tabel|таблица)\.?\s*"
    r"[\dIVXLC]+(?:[.-]\d+)*[.:]?\s+\S",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class _FigureTable:
    """What a row of figures is read with: the line that names what the figures are, the
    table's column names where a line of years gives them, and the table's title."""

    caption: str = ""
    columns: str = ""  # "States/Union Territories 1951-1961 1961-1971 …"
    title: str = ""  # "TABLE 2. Selected characteristics of householders in unhealthy…"

    def named(self, labelled: bool) -> str:
        """What the row is read after: title, caption and (unless the row already names
        its columns) the column names."""
        parts = (self.title if self.title != self.caption else "", self.caption)
        lead = " — ".join(p for p in parts if p)
        columns = "" if labelled else self.columns
        return f"{lead}: {columns}" if lead and columns else lead or columns


def _line_kinds(lines: Sequence[str]) -> list[tuple[str, str]]:
    """Each line, stripped, with what it is to a table above a row of figures: "title",
    "columns", "row", "text", or "" (blank, or a value alone: passed over). Computed once
    per passage: a long table's rows each walk the same lines."""
    out = []
    for line in lines:
        line = line.strip()
        if not line or _is_value(line):
            kind = ""
        elif _TABLE_TITLE.match(line):
            kind = "title"
        elif _column_line(line):
            kind = "columns"
        else:
            kind = "row" if _figure_line(line) else "text"
        out.append((kind, line))
    return out


def _figure_table(lines_above: Sequence[tuple[str, str]]) -> _FigureTable:
    """The caption, column names and title above a row of figures, from ``lines_above``
    (nearest first, as ``_line_kinds`` gives them): the rows between are walked over to
    the nearest line that is not a row (a table's title or unit, a group of rows' label)
    and the column names under or just above it, then on up to the table's numbered
    title. One caption line: more took in what the document says beside the table (a
    bill's rows read with the dentist's name above them outscored the line naming her)."""
    caption, columns = "", ""
    after_caption = 0  # lines read since the caption
    for kind, line in lines_above[:_ROWS_LOOKED_THROUGH]:
        if not kind:
            continue
        if kind == "title":
            title = _clean(line)[:_CAPTION_CHARS]
            return _FigureTable(caption or title, columns, title)
        if caption:
            after_caption += 1
        if kind == "columns" and after_caption <= 1:
            columns = columns or line  # under the caption, or the line just above it
        elif not caption and kind == "text":
            caption = _clean(line)[:_CAPTION_CHARS]
    return _FigureTable(caption, columns)


def _labelled_figures(row: str, columns: str) -> str:
    """``row`` with each figure after the year it stands under ("States/Union Territories:
    Kerala; 1951-1961: 24.76; …"), when the column names count as many figures; "" when
    they do not line up."""
    names = [
        m for m in re.finditer(r"\S+", columns) if _YEAR_SPAN.fullmatch(m.group(0).strip("()"))
    ]
    cells = list(_CELL.finditer(row))
    if not names or len(names) != len(cells):
        return ""
    label_name = columns[: names[0].start()].strip(" :")
    label = row[: cells[0].start()].strip(" :.")
    parts = [f"{label_name}: {label}" if label_name and label else label]
    parts += [
        f"{n.group(0)}: {c.group(0)}"
        for n, c in zip(names, cells, strict=True)
        if _NUMBER_TOKEN.fullmatch(c.group(0))  # "-" stands for no figure
    ]
    return "; ".join(p for p in parts if p)


def _figure_tables(finder: SpanFinder) -> Callable[[Hit, int], _FigureTable]:
    """``_figure_table`` for a row at an offset of a hit: the lines above it in the passage
    and, when the table's title is not among them (a passage that starts inside a long
    table), in the document before the passage."""
    passages: dict[int, tuple[list[int], list[tuple[str, str]]]] = {}  # line starts, kinds
    above_passage: dict[int, list[tuple[str, str]]] = {}  # the document's lines before it

    def in_passage(hit: Hit, start: int) -> list[tuple[str, str]]:
        if hit.chunk_id not in passages:
            lines = hit.text.splitlines(keepends=True)
            starts = list(itertools.accumulate((len(line) for line in lines), initial=0))
            passages[hit.chunk_id] = (starts[:-1], _line_kinds(lines))
        starts, kinds = passages[hit.chunk_id]
        return kinds[: bisect.bisect_right(starts, start) - 1][::-1]

    def lines_before(hit: Hit) -> list[tuple[str, str]]:
        if hit.chunk_id not in above_passage:
            document = _document_of(hit, finder.text_of)
            before = document[max(0, hit.start - _ABOVE_LIMIT) : hit.start]
            lines = before.splitlines()[::-1][:_ROWS_LOOKED_THROUGH]
            above_passage[hit.chunk_id] = _line_kinds(lines)
        return above_passage[hit.chunk_id]

    def read(hit: Hit, start: int) -> _FigureTable:
        above = in_passage(hit, start)
        found = _figure_table(above)
        if found.title or len(above) >= _ROWS_LOOKED_THROUGH:
            return found
        return _figure_table(above + lines_before(hit))

    return read


def _units(hits: Sequence[Hit], finder: SpanFinder) -> list[_Unit]:
    """The answerable units of ``hits``, in order within each hit."""
    units: list[_Unit] = []
    figure_table = _figure_tables(finder)
    seen: set[str] = set()
    for i, hit in enumerate(hits):
        text = hit.text
        headings = {h.strip().casefold() for h in hit.heading_path if h.strip()}
        pieces: list[tuple[int, int]] = []
        figure_rows: set[tuple[int, int]] = set()
        for s, e in finder.sentences(hit):
            s = _after_headings(text, s, e, headings)
            for fs, fe in _split_fields(text, s, e) if s < e else []:
                rows = _split_figure_rows(text, fs, fe)
                if len(rows) > 1:
                    figure_rows.update(r for r in rows if _figure_line(text[r[0] : r[1]]))
                pieces.extend(rows)
        pieces, labelled = _labels_with_values(text, _join_cut_sentences(text, pieces))
        header = _header_cells(hit) if hit.type in SHEET_TYPES else []
        slides = hit.type in SLIDE_TYPES
        above = TableAbove() if header else table_above(hit, finder.text_of)
        table = [] if header else _table_rows(text, above.header)
        if table:  # a table's rows are units; the sentences around it stay sentences
            pieces = [
                (s, e) for s, e in pieces if not any(s < te and ts < e for ts, te, _ in table)
            ]
        # A form's or a mail's field says little alone ("Date: 2024-03-06"): it is read
        # with what the document is (the mail's subject, the form's title).
        title = hit.heading_path[0] if hit.heading_path else hit.title
        found: list[_Unit] = []
        for n, (s, e) in enumerate(pieces):
            lead = _LEADING_GLYPHS.match(text, s, e)
            if lead and lead.end() < e:
                s = lead.end()  # a bullet in a symbol font
            piece = text[s:e]
            short = e - s < MIN_SENTENCE_CHARS and not (header and "|" in piece)
            if short and (e - s < 3 or not re.search(r"\w.*\d|\d.*\w", piece)):
                continue  # too short to say anything, unless a short value ("5 kg")
            if not re.search(r"\w{2}", piece) or _glyph_block(piece):
                continue
            if header and " | " in piece:
                if [c.strip() for c in piece.split(" | ")] == header:
                    continue  # the header row itself
                row = _labelled_row(piece, header)
                found.append(_Unit(i, s, e, row, "row", row))
                continue
            shown = _without_footnotes(_clean(strip_citations(piece)))
            if not slides and not header and n + 1 < len(pieces) and _lone_title(piece):
                continue  # a title over what follows it
            if (s, e) in labelled or (_is_field(piece) and "\n" not in piece):
                context = f"{title}: {shown}" if title else shown
                found.append(_Unit(i, s, e, shown, "field", context))
            elif (s, e) in figure_rows and not header:
                if _column_line(piece):
                    continue  # a table's column names: each row below is read with them
                # A row of figures is read with its table's title and column names.
                rows_table = figure_table(hit, s)
                row = _labelled_figures(shown, rows_table.columns)
                named = rows_table.named(labelled=bool(row))
                row = row or shown
                found.append(_Unit(i, s, e, row, "row", f"{named}: {row}" if named else row))
            else:
                found.append(_Unit(i, s, e, shown, "sentence", shown))
        for s, e, names in table:
            row = _labelled_row(text[s:e], names)
            # A row of a table begun above the passage is read with the table's caption.
            context = f"{above.caption}: {row}" if above.caption and names else row
            found.append(_Unit(i, s, e, row, "row", context))
        found.sort(key=lambda u: u.start)
        if slides:
            found = _slides(hit, found)
        found = _with_antecedents(text, found)
        for unit in found:
            if len(unit.text) < 2 or unit.text.casefold() in seen:
                continue  # the same words from another passage (a copy of the file)
            seen.add(unit.text.casefold())
            units.append(unit)
    return units


def _with_antecedents(text: str, found: list[_Unit]) -> list[_Unit]:
    """Each sentence that opens with a pronoun ("It is situated 6090 feet above sea-level"),
    with the sentence before it in its paragraph, which says what "it" is (St. Moritz)."""
    out: list[_Unit] = []
    for k, unit in enumerate(found):
        before = found[k - 1] if k else None
        if before and _ANAPHOR_START.match(unit.text) and _same_paragraph(text, before, unit):
            unit = replace(unit, before=before.text)
        out.append(unit)
    return out


def _same_paragraph(text: str, a: _Unit | ScoredSentence, b: _Unit | ScoredSentence) -> bool:
    """Sentences ``a`` then ``b`` of ``text`` with no blank line between them."""
    return a.kind == b.kind == "sentence" and not re.search(r"\n\s*\n", text[a.end : b.start])


def _slide_title(hit: Hit, before: int) -> str:
    """The title of the slide that the hit's text at ``before`` is on."""
    lines = [line for line in hit.text[:before].splitlines() if _SLIDE_HEADING.match(line)]
    heading = lines[-1] if lines else (hit.heading_path[0] if hit.heading_path else "")
    return re.sub(r"^\s*Slide \d+:?\s*", "", heading).strip()


def _slides(hit: Hit, found: list[_Unit]) -> list[_Unit]:
    """The lines of each slide as one unit, read with the slide's title: a slide's bullets
    lean on each other and on the title ("417 gulls" under "Survey day 3")."""
    out: list[_Unit] = []
    group: list[_Unit] = []

    def flush() -> None:
        if not group:
            return
        s, e = group[0].start, group[-1].end
        title = _slide_title(hit, s)
        if e - s <= SLIDE_UNIT_CHARS:
            shown = group[0].text
            for unit in group[1:]:
                shown += (" " if shown.endswith(_TERMINAL) else "; ") + unit.text
            context = f"{title}: {shown}" if title else shown
            out.append(_Unit(group[0].hit_index, s, e, shown, "slide", context))
        else:
            out.extend(group)
        group.clear()

    for unit in found:
        # A slide's heading line between this unit and the group's last one starts a slide.
        if group and any(
            _SLIDE_HEADING.match(line) for line in hit.text[group[-1].end : unit.start].splitlines()
        ):
            flush()
        group.append(unit)
    flush()
    return out


# --- what the question asks for --------------------------------------------------------

_MONTH_OR_DAY = re.compile(
    r"\b(?:January|February|March|April|May|June|July|August|September|October|November|"
    r"December|Jan|Feb|Mar|Apr|Jun|Jul|Aug|Sep|Sept|Oct|Nov|Dec|Monday|Tuesday|Wednesday|"
    r"Thursday|Friday|Saturday|Sunday)\b"
)  # capitalised: "may" and "march" are verbs too
_NUMBER_WORD = re.compile(
    r"\b(?:one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|"
    r"(?:thir|four|fif|six|seven|eigh|nine)teen|twenty|thirty|forty|fifty|sixty|seventy|"
    r"eighty|ninety|hundreds?|thousands?|millions?|billions?|dozens?|half|twice|"
    r"second|third|fourth|fifth|sixth|seventh|eighth|ninth|tenth)\b",
    re.IGNORECASE,
)
_DATE_WORD = re.compile(
    r"\b(?:century|centuries|decades?|noon|midnight|today|yesterday|tomorrow|spring|summer|"
    r"autumn|winter)\b",
    re.IGNORECASE,
)
_DATE_TOKEN = re.compile(
    r"\b(?:1\d{3}|20\d{2})s?\b|\b\d{1,2}(?:st|nd|rd|th)\b|\b\d{1,2}[:.]\d{2}\b"
    r"|\b\d{1,4}[-/.]\d{1,2}[-/.]\d{1,4}\b|\b\d{1,2}\s*(?:a\.?m|p\.?m)\b",
    re.IGNORECASE,
)
_DATE_Q = re.compile(
    r"\bwhen\b|\b(?:what|which)\s+(?:\w+\s+)?(?:year|years|date|day|month|century|decade|"
    r"time|era|period|season|deadline)\b|\bhow\s+long\s+ago\b|\bdeadline\b",
    re.IGNORECASE,
)
_NUMBER_Q = re.compile(
    r"\bhow\s+(?:many|much|long|far|old|big|large|tall|high|often|fast|heavy|wide)\b"
    r"|\b(?:what|which)\s+(?:\w+\s+)?(?:number|percentage|percent|share|amount|proportion|"
    r"fraction|size|price|cost|charge|fee|salary|wage|rate|rating|score|temperature|total|sum|"
    r"speed|distance|figure|count|ratio|value|level|budget|revenue|population|weight|height|"
    r"length|depth|area|volume|floor)\b"
    # "What was Kerala's decadal growth rate?": the measure a few words on, where it ends
    # the question's subject.
    r"|\b(?:what|which)\s+(?:is|was|are|were)\s+(?:[\w'’-]+\s+){1,5}?(?:number|percentage|"
    r"share|amount|price|cost|rate|total|figure|ratio|value)\s*(?:\?|$|\b(?:for|of|in|on|at)\b)"
    # "What did the AA charge?", "What does the job pay?": a sum of money.
    r"|\bwhat\s+(?:did|does|do|will|would)\b.{0,60}\b(?:charge|cost|pay|earn)"
    r"(?:\W*$|\s+(?:for|per|to|in|on|each|a|an)\b)"
    r"|^\s*(?:number|total|amount|count|share|percentage)\s+of\b",
    re.IGNORECASE,
)


# The same three asks in the other languages a library holds: French, Spanish,
# Portuguese, Italian, German, Dutch and Russian ("Combien de résidents…", "Wie viele…").
_OTHER_NUMBER_Q = re.compile(
    r"\b(?:combien|cu[aá]nt[oa]s?|quant[oa]s?|quanti|quante|wie\s*viele?|wieviel\w*|"
    r"wie\s+(?:hoch|lange?|gro(?:ß|ss)|weit|alt|teuer|schwer)|hoeveel|сколько)\b",
    re.IGNORECASE,
)
_OTHER_DATE_Q = re.compile(
    r"\b(?:quand|cu[aá]ndo|quando|wann|wanneer|когда)\b|\bbis\s+wann\b"
    r"|\b(?:en\s+)?qu[eé]\s+fecha\b|\b(?:[àa]\s+)?quelle\s+date\b|\bwelche[mn]?\s+datum\b",
    re.IGNORECASE,
)
_OTHER_PERSON_Q = re.compile(r"^\W*(?:qui|qui[eé]n(?:es)?|wer|chi|quem|кто)\b", re.IGNORECASE)


def answer_type(question: str) -> str:
    """What the question asks for: "date", "number", "person" or "" (anything)."""
    first = re.search(r"\b(?:who|whom|whose|when|what|which|how|where|why)\b", question, re.I)
    head = question[first.start() :] if first else question
    if _NUMBER_Q.search(head) or _OTHER_NUMBER_Q.search(question):
        return "number"
    if _DATE_Q.search(head) or _OTHER_DATE_Q.search(question):
        return "date"
    if _OTHER_PERSON_Q.search(question):
        return "person"
    if first and first.group(0).lower() in ("who", "whom", "whose"):
        return "person"
    return ""


# What "a number" is too wide a kind for: a sum of money and a share. Any figure in a quote
# would pass for one, and a near miss's quote usually holds figures ("How much did the MOT
# in May 2024 cost?" against a line of the car's mileages and dates). In the languages a
# library holds; "charged with" is an accusation, and a capitalised "Costa" a name.
_MONEY_Q = re.compile(
    r"\b(?:cost|costs|costed|price|prices|priced|pay|paid|fee|fees|spend|spent|salary|"
    r"salaries|wage|wages|budget|worth|fare|fares|rent|tariff)\b"
    r"|\bcharge[sd]?\b(?!\s+with)|\bhow\s+much\s+money\b|\bhow\s+expensive\b"
    r"|\b(?:co[uû]te?n?t?|co[uû]ts?|prix|payer|pay[ée]e?s?|tarifs?|loyer)\b"
    r"|\b(?:kostet|kosten|preis|zahlen|bezahlt|geb[uü]hr\w*|wie\s+teuer|miete)\b"
    r"|\b(?:cuesta|cuestan|costo|coste|precio|pagar|pag[oó]|gast[oó]|presupuesto|alquiler)\b"
    r"|\b(?:custa|custo|pre[cç]o|pagou|gastou|or[cç]amento|prezzo|(?-i:costa))\b"
    r"|\b(?:стоит|стоимость|цена|заплатил\w*)",
    re.IGNORECASE,
)
_MONEY = re.compile(
    r"[$€£¥₽₹元円]|\b(?:USD|EUR|GBP|CHF|JPY|CNY|RMB|RUB|INR|CAD|AUD|SEK|NOK|DKK|dollars?|"
    r"euros?|pounds?|pence|cents?|yen|yuan|rupees?|roubles?|rubles?|francs?|kronor|kroner|"
    r"dollar|euro|руб\w*|долл\w*|евро)\b|\d\s?p\b",
    re.IGNORECASE,
)
_SHARE_Q = re.compile(
    r"%|\b(?:percent(?:age)?s?|per\s*cent|what\s+share|what\s+proportion|pourcentage|"
    r"prozent\w*|porcentaje|percentuale|porcentagem|процент\w*)",
    re.IGNORECASE,
)
_SHARE = re.compile(
    r"%|\b(?:percent|per\s*cent|pct|prozent|pour\s*cent|por\s*ciento|per\s*cento|"
    r"por\s*cento|процент\w*)",
    re.IGNORECASE,
)


def measure_asked(question: str) -> str:
    """ "money" when the question asks a sum of money, "share" a percentage, else ""."""
    if _MONEY_Q.search(question):
        return "money"
    return "share" if _SHARE_Q.search(question) else ""


def holds_measure(kind: str, text: str) -> bool:
    """Whether ``text`` holds a ``kind`` measure: a currency, or a percent sign or word
    (a table's title counts: "(Per cent)" over a row of bare figures)."""
    return bool((_MONEY if kind == "money" else _SHARE).search(text))


def _names(text: str) -> list[str]:
    """Capitalised words that are not the sentence's first word (or are, when the next
    word is capitalised too: "Priya Raman, the engineer")."""
    tokens = list(re.finditer(r"[^\W\d_][\w'’-]*", text))
    out = []
    for n, match in enumerate(tokens):
        word = match.group(0)
        if not word[0].isupper() or word.lower() in STOPWORDS:
            continue
        first = n == 0 or re.search(r"[.!?:]\s*$", text[tokens[n - 1].end() : match.start()])
        if first and not (n + 1 < len(tokens) and tokens[n + 1].group(0)[0].isupper()):
            continue
        out.append(word)
    return out


def has_type(kind: str, text: str, question: str) -> bool:
    """Whether ``text`` holds something of the asked ``kind`` that the question does not."""
    if not kind:
        return False
    asked = {w.lower() for w in re.findall(r"\w+", question)}
    if kind == "person":
        return any(n.lower() not in asked for n in _names(text))
    if kind == "number":
        # A year says when, not how many: a table's header of years holds no amount.
        found = [
            w
            for w in words(_LABEL_NUMBER.sub(" ", text))
            if any(c.isdigit() for c in w) and not _YEAR.fullmatch(w)
        ]
        found += [m.group(0).lower() for m in _NUMBER_WORD.finditer(text)]
    else:
        found = [m.group(0).lower() for m in _DATE_TOKEN.finditer(text)]
        found += [m.group(0).lower() for m in _MONTH_OR_DAY.finditer(text)]
        found += [m.group(0).lower() for m in _DATE_WORD.finditer(text)]
    return any(f not in asked for f in found)


# --- the question's words against the passages -------------------------------------------


def _fold(text: str) -> str:
    """Lowercase without accents: "Hervé" is "herve"."""
    decomposed = unicodedata.normalize("NFKD", text)
    return "".join(c for c in decomposed if not unicodedata.combining(c)).lower()


def _stem(word: str) -> str:
    for suffix in ("ations", "ation", "ments", "ment", "ings", "ing", "ied", "ies", "ed", "es"):
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            return word[: -len(suffix)]
    for suffix in ("ly", "s", "e", "y"):
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            return word[: -len(suffix)]
    return word


class _Vocabulary:
    """The words of the passages, for asking whether a question's word is in any of them."""

    def __init__(self, hits: Sequence[Hit], extra: str = "") -> None:
        # A passage is about its document's title and headings too ("rainfall" for a row
        # of a rainfall table).
        parts = [h.text for h in hits] + [" ".join((h.title, *h.heading_path)) for h in hits]
        parts.append(extra)
        text = _fold(" ".join(parts))
        self.text = text
        self.words = set(words(text))
        self.stems = {_stem(w) for w in self.words}
        self.prefixes = {w[:5] for w in self.words if len(w) >= 5}

    def has(self, word: str) -> bool:
        word = _fold(word)
        return (
            word in self.words
            or _stem(word) in self.stems
            or (len(word) >= 5 and word[:5] in self.prefixes)
            or (len(word) >= 6 and self._near(word, 0.85))  # a typo: "unkown"
        )

    def _near(self, word: str, ratio: float) -> bool:
        # A slip is rarely in the first letter; checking that first keeps this cheap.
        return any(
            w[0] == word[0]
            and abs(len(w) - len(word)) <= 2
            and difflib.SequenceMatcher(None, word, w).ratio() >= ratio
            for w in self.words
        )

    def has_name(self, name: str) -> bool:
        """A name or number, allowing a slip of spelling ("Hatmanis" for "Hartmanis")."""
        name = _fold(name)
        if name[:1].isdigit():
            plain = name.replace(",", "")
            digits = re.sub(r"(?<=\d),(?=\d{3})", "", self.text)
            return re.search(r"(?<![\d.])" + re.escape(plain) + r"(?![\d])", digits) is not None
        parts = [p for p in words(name) if len(p) > 1 or p.isdigit()]
        if len(parts) != 1:  # "NP-complete"
            return all(self.has_name(p) for p in parts)
        name = parts[0]  # "Guy's": "guy"
        if self.has(name):
            return True
        return len(name) >= 5 and self._near(name, 0.8)


def _question_names(question: str) -> list[str]:
    """Names and numbers the question is about: capitalised words after its first word
    and numbers ("in 1066"), which a passage that answers it has too."""
    out = [w for w in _names(question) if len(w) > 1]
    out += re.findall(r"\b\d+(?:[.,]\d+)?\b", question)
    return out


_NEGATION = re.compile(r"\b(?:not|no|never|neither|nor|none|cannot|without)\b|n't\b", re.I)
# What answers a question about what is not so: a "not", or a word that excludes.
_DENIAL = re.compile(
    _NEGATION.pattern + r"|\b(?:except|unless|only|exclud\w*|reject\w*|refus\w*|den(?:y|ied|ies)"
    r"|forbid\w*|prohibit\w*|lack\w*|fail\w*|unable)\b",
    re.I,
)
_OR_NOT = re.compile(r"\bor\s+not\b", re.I)  # "whether or not" asks no negative
_WH_FRAME = frozenset(["how", "what", "which", "whose"])
# What "how many" counts is often named otherwise in the answer: "people" as "staff", a
# span of time as dates.
_LOOSE_COUNTS = re.compile(
    r"(?:people|persons|times?|years?|months?|weeks?|days?|hours?|minutes?|seconds?|"
    r"century|centuries|decades?)$"
)


def counted_word(question: str) -> str:
    """What "how many" counts: "men" in "How many men were in Robert's army?", which an
    answer names with its number ("an army of 30,000 men"); "" for no such question."""
    match = re.search(r"\bhow\s+many\s+(\w+)", question, re.IGNORECASE)
    if not match:
        return ""
    word = match.group(1).lower()
    return "" if word in STOPWORDS or _LOOSE_COUNTS.match(word) else word


def missing_words(question: str, vocabulary: _Vocabulary) -> list[str]:
    """The question's content words that no passage has, less the word that says what
    kind of answer is wanted ("how fast", "which continent"): the answer names that
    otherwise ("within 5 minutes", "Africa")."""
    tokens = words(question)
    kind = {tokens[i + 1] for i, t in enumerate(tokens[:-1]) if t in _WH_FRAME}
    return [
        w
        for w in dict.fromkeys(tokens)
        if w not in STOPWORDS
        and w not in kind
        and (len(w) > 1 or w.isdigit())
        and not vocabulary.has(w)
    ]


def without(question: str, dropped: Sequence[str]) -> str:
    pattern = r"\b(?:" + "|".join(re.escape(w) for w in dropped) + r")\b"
    return _clean(re.sub(pattern, " ", question, flags=re.IGNORECASE))


# --- scoring --------------------------------------------------------------------------


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
    type_bonus: float = TYPE_BONUS,
) -> list[ScoredSentence]:
    """Every unit of the top ``max_hits`` hits, best first."""
    finder = finder or SpanFinder(embedder)
    units = _units(list(hits[:max_hits]), finder)
    if not units:
        return []
    kind = answer_type(question)
    typed = [has_type(kind, u.text, question) for u in units]
    # A sentence holding the figure or date asked for, whose subject is a pronoun, is
    # compared with the question as read with the sentence before it ("How high above
    # sea level is St. Moritz?" against "It is situated 6090 feet above sea-level").
    # Only then: any pronoun's sentence read with its neighbour matches whatever that
    # neighbour matches, and crowded out the answer's own sentence on SQuAD
    # (docs/decisions/answers-on-real-documents.md).
    compared = [
        f"{u.before} {u.context}"
        if u.before and typed[k] and kind in ANTECEDENT_KINDS
        else u.context
        for k, u in enumerate(units)
    ]
    q_words = content_words(question)
    unit_words = [set(content_words(c)) for c in compared]
    # Rarer question words matter more: "Rollo" beats "leader" (document frequency over
    # the candidate units, which is all the corpus this answer can see).
    df: dict[str, int] = {}
    for ws in unit_words:
        for w in ws:
            df[w] = df.get(w, 0) + 1
    n = len(units)
    idf = {w: 1.0 + np.log((n + 1) / (df.get(w, 0) + 1)) for w in set(q_words)}
    cosines = np.zeros(n, dtype=np.float32)
    vectors = finder.text_vectors([question, *compared])
    if vectors is not None:
        cosines = vectors[1:] @ vectors[0]
    scored: list[ScoredSentence] = []
    for k, u in enumerate(units):
        ov = _weighted_overlap(q_words, unit_words[k], idf)
        cos = float(cosines[k])
        score = cos + OVERLAP_WEIGHT * ov - RANK_DECAY * u.hit_index
        score += type_bonus if typed[k] else 0
        scored.append(
            ScoredSentence(
                u.hit_index,
                u.start,
                u.end,
                u.text,
                cos,
                ov,
                score,
                u.kind,
                typed[k],
                compared[k] if compared[k] != u.text else "",
            )
        )
    scored.sort(key=lambda x: -x.score)
    return scored


@dataclass(frozen=True)
class DeclineRules:
    """When the passages are taken not to answer the question (see the module docstring).
    With ``model`` (the default), the signals weighed by it decide; the thresholds and
    flags are the rules without an embedding model, and the old cascade when ``model`` is
    None (kept for measuring against it)."""

    threshold: float = DECLINE_BELOW  # best unit's score below this
    threshold_missing: float = DECLINE_BELOW_MISSING  # ... when a question word is in none
    drop_below: float = DROP_BELOW  # question vs the question less the words no passage has
    shift_above: float = SHIFT_ABOVE  # ...those words pull the question off the best unit
    names: bool = True  # a name or number of the question is in no passage
    counted: bool = True  # "how many X": no X quoted
    negation: bool = REQUIRE_NEGATION  # "not" asked, none quoted
    model: DeclineModel | None = MODEL


# Never declining: for measuring what the rules cost (bench/extractive_squad.py).
NEVER = DeclineRules(
    -10.0, -10.0, -2.0, 2.0, names=False, counted=False, negation=False, model=None
)
# The rules before the decline model (a hard veto each), for comparing against it.
CASCADE = DeclineRules(model=None)


def decline_signals(
    question: str,
    hits: Sequence[Hit],
    scored: Sequence[ScoredSentence],
    chosen: Sequence[ScoredSentence],
    finder: SpanFinder,
) -> DeclineSignals:
    """What the decline model weighs (core/generation/decline.py); ``scored`` is not
    empty."""
    best = scored[0]
    # The units as read: a row with its column names, also when the passage starts inside
    # a table whose header is above it.
    vocabulary = _Vocabulary(hits, " ".join(u.context or u.text for u in scored))
    names = _question_names(question)
    unknown = [n for n in names if not vocabulary.has_name(n)]
    # "within 15 minutes or 30 days": alternatives, one of which is enough.
    if re.search(r"\bor\b", question, re.IGNORECASE) and len(unknown) < len(names):
        unknown = []
    asked = [w for w in dict.fromkeys(words(question)) if w not in STOPWORDS]
    missing = missing_words(question, vocabulary)
    quoted = _Vocabulary([], " ".join(c.text for c in chosen))
    covered = [w for w in asked if quoted.has(w)]
    negative = _NEGATION.search(_OR_NOT.sub("", question))
    counted = counted_word(question)
    kind = answer_type(question)
    measure = measure_asked(question)
    drop = shift = 0.0
    if missing:
        vectors = finder.text_vectors([question, without(question, missing), best.text])
        if vectors is not None:
            q, rest, top = vectors
            drop = 1.0 - float(q @ rest)
            shift = float(rest @ top) - float(q @ top)
    return DeclineSignals(
        best=best.score,
        cosine=best.cosine,
        overlap=best.overlap,
        coverage=len(covered) / len(asked) if asked else 1.0,
        margin=best.score - scored[1].score if len(scored) > 1 else 0.0,
        names_missing=len(unknown) / len(names) if names else 0.0,
        words_missing=len(missing) / len(asked) if asked else 0.0,
        drop=drop,
        shift=shift,
        typed=0.0 if not kind else (1.0 if any(c.has_type for c in chosen) else -1.0),
        negation_unmet=float(bool(negative) and not any(_DENIAL.search(c.text) for c in chosen)),
        counted_unmet=float(bool(counted) and not quoted.has(counted)),
        tabular=float(best.kind != "sentence"),
        foreign=float(passage_language(best.text) not in (ENGLISH, None)),
        measure_unmet=float(
            bool(measure)
            and not holds_measure(measure, " ".join(c.context or c.text for c in chosen))
        ),
    )


def decline_reason(
    question: str,
    hits: Sequence[Hit],
    scored: Sequence[ScoredSentence],
    chosen: Sequence[ScoredSentence],
    finder: SpanFinder,
    rules: DeclineRules,
    *,
    embedded: bool = True,
) -> str:
    """Why the passages do not answer ``question`` with the ``chosen`` units ("" when
    they may)."""
    best = scored[0].score if scored else 0.0
    limit = rules.threshold if embedded else rules.threshold * OVERLAP_WEIGHT
    if not scored or not chosen:
        return "score"
    if embedded and rules.model is not None:
        signals = decline_signals(question, hits, scored, chosen, finder)
        if rules.model.probability(signals) < rules.model.threshold:
            return rules.model.against(signals)
        return ""
    if best < limit:
        return "score"
    vocabulary = _Vocabulary(hits)
    if rules.names:
        names = _question_names(question)
        unknown = [n for n in names if not vocabulary.has_name(n)]
        # "within 15 minutes or 30 days": alternatives, one of which is enough.
        either = re.search(r"\bor\b", question, re.IGNORECASE) and len(unknown) < len(names)
        if unknown and not either:
            return "name"
    negative = rules.negation and _NEGATION.search(_OR_NOT.sub("", question))
    if negative and not any(_DENIAL.search(c.text) for c in chosen):
        return "negation"  # SQuAD 2.0's near misses put a "not" into an answerable question
    quoted = _Vocabulary([], " ".join(c.text for c in chosen))
    if rules.counted:
        counted = counted_word(question)
        if counted and not quoted.has(counted):
            return "counted"
    missing = missing_words(question, vocabulary)
    if missing and best < (rules.threshold_missing if embedded else limit):
        return "score"
    if not embedded:
        return ""
    if not missing:
        return ""
    vectors = finder.text_vectors([question, without(question, missing), scored[0].text])
    if vectors is None:
        return ""
    q, rest, top = vectors
    if float(q @ rest) < rules.drop_below:
        return "missing_words"  # those words carry much of what is asked
    # Without those words the question is closer to the best unit: they are what the
    # unit does not speak of ("What was the name of Alan Turing's dog?").
    if float(rest @ top) - float(q @ top) > rules.shift_above:
        return "missing_words"
    return ""


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
    rules: DeclineRules | None = None,
    type_bonus: float = TYPE_BONUS,
    next_sentence: bool = NEXT_SENTENCE,
) -> ExtractiveAnswer:
    """Pick the units that answer ``question``; ``[n]`` refers to ``hits[n-1]``.
    ``threshold`` is ``rules.threshold`` when ``rules`` is not given."""
    finder = finder or SpanFinder(embedder)
    rules = rules or DeclineRules(threshold=threshold)
    top = list(hits[:max_hits])
    scored = score_sentences(
        question,
        top,
        embedder,
        max_hits=max_hits,
        finder=finder,
        type_bonus=type_bonus,
    )
    best = scored[0].score if scored else 0.0
    chosen: list[ScoredSentence] = []
    if scored:
        chosen = [scored[0]]
        for candidate in scored[1:]:
            if len(chosen) >= max_sentences or candidate.score < best - keep_within:
                break
            if _same_row_elsewhere(scored[0], candidate):
                continue
            chosen.append(candidate)
        chosen = _with_neighbours(question, chosen, scored, top, next_sentence)
        chosen += _value_unit(question, chosen, scored)
    reason = decline_reason(
        question, top, scored, chosen, finder, rules, embedded=embedder is not None
    )
    if reason:
        return ExtractiveAnswer(REFUSAL, (), True, best, tuple(scored[:1]), reason)
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
    text = " ".join(parts)
    counted = count_line(question, chosen)
    if counted:
        text += "\n\n" + counted
    return ExtractiveAnswer(text, tuple(citations), False, best, tuple(chosen))


_ROW_LABEL = re.compile(r"^\s*([^;|\d]*?)\s*(?:[;|]|" + _NUMBER_TOKEN.pattern + ")")


def _same_row_elsewhere(best: ScoredSentence, other: ScoredSentence) -> bool:
    """``other`` is the row of the same label as the best row in another table ("Northeast"
    of table 1 under table 2's): the table's title chose between them, and quoting both
    would put the unchosen one's figures beside the answer."""
    if not (best.kind == other.kind == "row"):
        return False
    tables = [
        u.context[: -len(u.text)] if u.context.endswith(u.text) else "" for u in (best, other)
    ]
    if not all(tables) or tables[0] == tables[1]:
        return False  # rows of one table, or of tables that have no title to tell them by
    labels = {
        m.group(1).casefold() if (m := _ROW_LABEL.match(u.text)) else "" for u in (best, other)
    }
    return len(labels) == 1 and "" not in labels


# --- "how many" over rows ----------------------------------------------------------------

_HOW_MANY = re.compile(r"\bhow\s+many\b|\bwie\s*viele\b", re.IGNORECASE)
# Column names that hold how many of the row's thing there are.
_COUNT_COLUMN = re.compile(
    r"count|number|no\.?|qty\.?|quantity|units|pieces|total|stock|anzahl|menge|stück|stk\.?",
    re.IGNORECASE,
)
_WHOLE_NUMBER = re.compile(r"\d{1,9}")


def _row_fields(row: str) -> dict[str, tuple[str, str]]:
    """A row as ``_labelled_row`` wrote it ("city: Hamburg; count: 2"): by the folded
    column name, the name as written and the cell."""
    fields: dict[str, tuple[str, str]] = {}
    for part in row.split("; "):
        name, colon, value = part.partition(": ")
        if colon and name.strip():
            fields.setdefault(name.strip().casefold(), (name.strip(), value.strip()))
    return fields


def count_line(question: str, chosen: Sequence[ScoredSentence]) -> str:
    """For "how many" answered by rows of a table: their count column added up, said to
    be of the quoted rows alone (the table may hold more than the quote shows); "" where
    the rows are not all the answer (one of them lacks a word of the question another
    has: "compressors in Kiel" quoted a Kiel pump beside a Bremen compressor) or there is
    nothing to add up."""
    if not _HOW_MANY.search(question) or len(chosen) < 2:
        return ""
    if any(c.kind != "row" for c in chosen):
        return ""
    row_words = [{_stem(w) for w in words(_fold(c.text))} for c in chosen]
    asked = {_stem(w) for w in words(_fold(question)) if w not in STOPWORDS}
    shared = False
    for word in asked:
        has = [word in found for found in row_words]
        if any(has) and not all(has):
            return ""
        shared = shared or all(has)
    if not shared:
        return ""
    rows = [_row_fields(c.text) for c in chosen]
    for key, (name, _value) in rows[0].items():
        if not _COUNT_COLUMN.fullmatch(key):
            continue
        cells = [row.get(key, ("", ""))[1] for row in rows]
        if all(_WHOLE_NUMBER.fullmatch(cell) for cell in cells):
            values = [int(cell) for cell in cells]
            return (
                f"Added up, the “{name}” of the {len(values)} rows quoted here is "
                f"{sum(values)} ({' + '.join(str(v) for v in values)})."
            )
    return ""


def _with_neighbours(
    question: str,
    chosen: list[ScoredSentence],
    scored: Sequence[ScoredSentence],
    hits: Sequence[Hit],
    next_sentence: bool,
) -> list[ScoredSentence]:
    """``chosen``, plus the units next to the best one: the one that holds the date,
    number or name the question asks for when the chosen ones do not; and the sentence
    after a sentence, in the same paragraph, which often completes it."""
    best = chosen[0]
    by_place = sorted((s for s in scored if s.hit_index == best.hit_index), key=lambda s: s.start)
    at = next(i for i, s in enumerate(by_place) if s.start == best.start)
    out = list(chosen)

    def add(j: int) -> bool:
        if 0 <= j < len(by_place) and all(
            c.start != by_place[j].start or c.hit_index != best.hit_index for c in out
        ):
            out.append(by_place[j])
            return True
        return False

    text = hits[best.hit_index].text

    kind = answer_type(question)
    if kind and not any(c.has_type for c in chosen):
        # The value is often a sentence or two on ("The gun was mounted on the bow. It
        # fired a ball of 24 pounds. Its barrel was twelve feet long."): the nearest
        # neighbour that holds it, the one between coming along.
        for j in (at + 1, at - 1, at + 2):
            if not (0 <= j < len(by_place) and by_place[j].has_type):
                continue
            if j == at + 2 and not (
                _same_paragraph(text, best, by_place[at + 1])
                and _same_paragraph(text, by_place[at + 1], by_place[j])
            ):
                continue
            if j == at + 2:
                add(at + 1)
            if add(j):
                break

    # "He appointed Robert archbishop": who "he" is, the sentence before says.
    if at > 0 and _PRONOUN_START.match(best.text) and _same_paragraph(text, by_place[at - 1], best):
        add(at - 1)
    if next_sentence and at + 1 < len(by_place) and _same_paragraph(text, best, by_place[at + 1]):
        add(at + 1)
    return out


VALUE_FROM = 15  # the best-scored units looked through for the value asked for


def _value_unit(
    question: str, chosen: Sequence[ScoredSentence], scored: Sequence[ScoredSentence]
) -> list[ScoredSentence]:
    """The unit that holds what the question asks for, when none of ``chosen`` does and
    one of the next best also names something of the question that the chosen ones do
    not: a table's caption is closer in meaning to "What was Kerala's growth rate?" than
    its row "Kerala 24.76 26.29 … 4.86", which holds the figure. Quoted beside them."""
    kind = answer_type(question)
    if not kind or any(c.has_type for c in chosen):
        return []
    quoted = _Vocabulary([], " ".join(c.context or c.text for c in chosen))
    asked = [w for w in dict.fromkeys(words(question)) if w not in STOPWORDS]
    lacking = [w for w in asked if not quoted.has(w)]
    if not lacking:
        return []
    taken = {(c.hit_index, c.start) for c in chosen}
    for unit in scored[:VALUE_FROM]:
        if not unit.has_type or (unit.hit_index, unit.start) in taken:
            continue
        holds = _Vocabulary([], unit.context or unit.text)
        if any(holds.has(w) for w in lacking):
            return [unit]
    return []


_ENGLISH_PRONOUNS = "he|she|they|it|his|her|their|its|this|these|those|such"
_PRONOUN_START = re.compile(rf"(?:{_ENGLISH_PRONOUNS})\b", re.I)
# For reading a sentence with the one before: also the personal pronouns of the other
# languages questions are typed in.
_ANAPHOR_START = re.compile(
    rf"(?:{_ENGLISH_PRONOUNS}|er|sie|es|il|elle|ils|elles|él|ella|ellos|ellas|он|она|оно|они)\b",
    re.I,
)
# Asked for these, a pronoun's sentence that holds one is read with the sentence before.
ANTECEDENT_KINDS = ("number", "date")


# --- what a model is sent of each passage ----------------------------------------------


def excerpts(
    question: str,
    hits: Sequence[Hit],
    embedder: Embedder | None,
    finder: SpanFinder,
) -> dict[int, str]:
    """The part of each long passage a model is sent (by chunk id): its units that best
    match the question, each with its neighbours, in document order, a gap marked "…"; a
    table's rows with their column names. Passages left out are sent whole."""
    scored = score_sentences(question, hits, embedder, max_hits=len(hits), finder=finder)
    out: dict[int, str] = {}
    for i, hit in enumerate(hits):
        if len(hit.text) <= EXCERPT_FROM_CHARS:
            continue
        units = sorted((u for u in scored if u.hit_index == i), key=lambda u: u.start)
        if len(units) <= 2 * EXCERPT_UNITS + 1:
            continue
        best = sorted(range(len(units)), key=lambda j: -units[j].score)[:EXCERPT_UNITS]
        keep = sorted({k for j in best for k in (j - 1, j, j + 1) if 0 <= k < len(units)})
        pieces: list[str] = []
        for n, j in enumerate(keep):
            if (n == 0 and j > 0) or (n > 0 and j != keep[n - 1] + 1):
                pieces.append("…")
            unit = units[j]
            pieces.append(
                unit.text if unit.kind == "row" else _clean(hit.text[unit.start : unit.end])
            )
        if keep[-1] < len(units) - 1:
            pieces.append("…")
        tabular = any(units[j].kind != "sentence" for j in keep)
        text = ("\n" if tabular else " ").join(pieces)
        if len(text) < 0.8 * len(hit.text):
            out[hit.chunk_id] = text
    return out
