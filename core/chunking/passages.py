"""Chunking stage: split a parsed document on its own structure into passages that fit
the embedding model.

Rules, in order of priority:
- a chunk never crosses a heading (sections are retrieval units of their own);
- a chunk never ends inside a sentence, and tables and code blocks stay whole unless the
  block alone is over the limit (then they split on line boundaries);
- a table split over several chunks keeps its header row with its rows: the header is
  never a chunk of its own (it goes with the first row), and every later chunk of the
  table carries the header line at the start of its context, the text it is embedded
  and keyword-searched with (the chunk's own text stays a slice of the document's, so
  citations keep their offsets);
- the context prefix (title and heading path) plus the chunk text fits in the model's
  word pieces (``max_tokens``, 256 for both shipped models), counted with the model's own
  tokenizer, because the model silently drops everything past that;
- within a section, chunks are balanced in size rather than filled greedily, so the last
  chunk of a section is not a stub that carries too little meaning to be found.

Every chunk records character offsets into the document text and its page range.
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from core.records import Block, BlockKind, Chunk, ParsedDocument
from core.text import split_sentences

# 3: no file name as context; 4: sentences from core.text (CJK, bullets); 5: a split
# table's header in each of its chunks
CHUNKER_VERSION = "5"
SPECIAL_TOKENS = 2  # [CLS] and [SEP] count against the model's limit
MAX_CONTEXT_TOKENS = 48
# A split table's header, carried by each of its chunks: a wide table's column names
# are long, and rows read without them are bare figures; past this, it is cut.
MAX_TABLE_HEADER_TOKENS = 96

TokenCounter = Callable[[str], int]
_TABLE_RULE = re.compile(r"^\s*\|?\s*:?-{3,}")  # Markdown's line under a table's header


@dataclass(frozen=True)
class _Unit:
    start: int
    end: int
    tokens: int
    heading_path: tuple[str, ...]
    section: int  # index of the section (heading) this unit belongs to
    # For a row of a table too big for one chunk (not its first): the table's header
    # line, which a chunk starting here carries in its context.
    table_header: str = ""


def _word_pieces(
    text: str, start: int, end: int, budget: int, count: TokenCounter
) -> list[tuple[int, int, int]]:
    """Split an over-long sentence or line at word boundaries into parts that fit."""
    words = [(m.start(), m.end()) for m in re.finditer(r"\S+", text[start:end])]
    parts: list[tuple[int, int, int]] = []
    i = 0
    while i < len(words):
        lo, hi = i + 1, len(words)
        # binary search for the longest run of words from i that fits the budget
        best = i + 1
        while lo <= hi:
            mid = (lo + hi) // 2
            piece = text[start + words[i][0] : start + words[mid - 1][1]]
            if count(piece) <= budget:
                best, lo = mid, mid + 1
            else:
                hi = mid - 1
        s, e = start + words[i][0], start + words[best - 1][1]
        parts.append((s, e, count(text[s:e])))
        i = best
    return parts


class PassageChunker:
    """The chunker (see the module docstring); satisfies core.chunking.Chunker. Build it
    with ``core.chunking.chunker_for(embedder)`` so it is sized by the model."""

    def __init__(
        self,
        count_tokens: TokenCounter,
        *,
        max_tokens: int,
        overlap_sentences: int = 0,
    ) -> None:
        self._count = count_tokens
        self.max_tokens = max_tokens
        self.overlap_sentences = overlap_sentences

    @property
    def version(self) -> str:
        return f"{CHUNKER_VERSION}:max{self.max_tokens}:ov{self.overlap_sentences}"

    def context_for(self, title: str, heading_path: Sequence[str]) -> str:
        parts = [p.strip() for p in (title, *heading_path) if p and p.strip()]
        # A heading path that repeats the title (a Markdown H1 equal to the title) adds nothing.
        deduped: list[str] = []
        for p in parts:
            if not deduped or deduped[-1].casefold() != p.casefold():
                deduped.append(p)
        context = " > ".join(deduped)
        if self._count(context) > MAX_CONTEXT_TOKENS:
            pieces = _word_pieces(context, 0, len(context), MAX_CONTEXT_TOKENS, self._count)
            context = context[pieces[0][0] : pieces[0][1]] + " …" if pieces else ""
        return context

    def chunk(self, doc: ParsedDocument, *, file_stem: str = "") -> list[Chunk]:
        """``file_stem``: the file's name without its extension. A title that is only the
        file name (the parsers' fallback for an untitled document) is kept out of the
        context: a name like ``4380635-3f2a`` is noise to both BM25 and the embedding."""
        units = list(self._units(doc))
        chunks: list[Chunk] = []
        title = "" if file_stem and doc.title.strip() == file_stem.strip() else doc.title
        for section_units in _group_by_section(units):
            context = self.context_for(title, section_units[0].heading_path)
            budget = self.max_tokens - SPECIAL_TOKENS - (self._count(context) + 1 if context else 0)
            # Room for the longest table header a chunk of this section may carry.
            headers = {u.table_header for u in section_units if u.table_header}
            budget -= max((self._count(h) + 1 for h in headers), default=0)
            for group in self._pack(section_units, budget):
                header = group[0].table_header
                own = f"{context}\n{header}" if context and header else context or header
                chunks.append(self._make_chunk(doc, group, own, budget, len(chunks)))
        return chunks

    def _units(self, doc: ParsedDocument) -> Iterable[_Unit]:
        text = doc.text
        section = 0
        # Budget for splitting units: the worst case is the longest allowed context.
        unit_budget = self.max_tokens - SPECIAL_TOKENS - MAX_CONTEXT_TOKENS - 4
        for block in doc.blocks:
            if block.kind is BlockKind.HEADING:
                section += 1
            spans = self._block_spans(text, block)
            if block.kind is BlockKind.TABLE and spans:
                s, e = spans[0]
                if self._count(text[s:e]) > unit_budget:
                    yield from self._table_rows(text, s, e, block, section, unit_budget)
                    continue
            for s, e in spans:
                tokens = self._count(text[s:e])
                if tokens <= unit_budget:
                    yield _Unit(s, e, tokens, block.heading_path, section)
                    continue
                for ps, pe, pt in _word_pieces(text, s, e, unit_budget, self._count):
                    yield _Unit(ps, pe, pt, block.heading_path, section)

    def _table_rows(
        self, text: str, start: int, end: int, block: Block, section: int, budget: int
    ) -> Iterable[_Unit]:
        """A table too big for one chunk, one unit per row. The header line goes with
        the first row (never a passage alone), and is the ``table_header`` of the rest."""
        lines = [
            (m.start() + start, m.end() + start)
            for m in re.finditer(r"[^\n]*\S[^\n]*", text[start:end])
        ]
        lines = [(s + len(text[s:e]) - len(text[s:e].lstrip()), e) for s, e in lines]
        header = ""
        if len(lines) >= 2 and "|" in text[lines[0][0] : lines[0][1]]:
            first = (
                2 if len(lines) > 2 and _TABLE_RULE.match(text[lines[1][0] : lines[1][1]]) else 1
            )
            lines = [(lines[0][0], lines[first][1]), *lines[first + 1 :]]
            header = " ".join(text[lines[0][0] : lines[0][1]].split("\n")[0].split())
            if self._count(header) > MAX_TABLE_HEADER_TOKENS:
                pieces = _word_pieces(header, 0, len(header), MAX_TABLE_HEADER_TOKENS, self._count)
                header = header[pieces[0][0] : pieces[0][1]] + " …" if pieces else ""
        for n, (s, e) in enumerate(lines):
            own = header if n else ""
            tokens = self._count(text[s:e])
            if tokens <= budget:
                yield _Unit(s, e, tokens, block.heading_path, section, own)
                continue
            for ps, pe, pt in _word_pieces(text, s, e, budget, self._count):
                yield _Unit(ps, pe, pt, block.heading_path, section, own)

    def _block_spans(self, text: str, block: Block) -> list[tuple[int, int]]:
        if block.kind in (BlockKind.TABLE, BlockKind.CODE):
            return [(block.start, block.end)] if block.end > block.start else []
        if block.kind in (BlockKind.HEADING, BlockKind.LIST_ITEM):
            return [(block.start, block.end)] if text[block.start : block.end].strip() else []
        return split_sentences(text, block.start, block.end)

    def _pack(self, units: list[_Unit], budget: int) -> list[list[_Unit]]:
        # Whole tables/code blocks that are too big arrive here as one unit over budget:
        # re-split them on lines first.
        total = sum(u.tokens for u in units)
        if total <= budget:
            return [units]
        target = total / math.ceil(total / budget)
        groups: list[list[_Unit]] = []
        current: list[_Unit] = []
        size = 0
        for unit in units:
            if current and (size + unit.tokens > budget or size >= target):
                groups.append(current)
                overlap = current[-self.overlap_sentences :] if self.overlap_sentences else []
                current = [u for u in overlap if u.tokens + unit.tokens <= budget // 2]
                size = sum(u.tokens for u in current)
            current.append(unit)
            size += unit.tokens
        if current:
            groups.append(current)
        return groups

    def _make_chunk(
        self, doc: ParsedDocument, group: list[_Unit], context: str, budget: int, ordinal: int
    ) -> Chunk:
        tokens = sum(u.tokens for u in group)
        if tokens > budget or not _whitespace_joined(doc.text, group):
            group, tokens = self._fitted(doc.text, group, budget)
        start, end = group[0].start, group[-1].end
        text = doc.text[start:end]
        return Chunk(
            ordinal=ordinal,
            text=text,
            start=start,
            end=end,
            page_start=doc.page_at(start),
            page_end=doc.page_at(max(start, end - 1)),
            heading_path=group[0].heading_path,
            token_count=tokens,
            context=context,
        )

    def _fitted(self, text: str, group: list[_Unit], budget: int) -> tuple[list[_Unit], int]:
        """The group and its real token count. Joining units can only merge tokens, never
        add them, but the real tokenizer decides: trailing units are dropped in the
        (rare) case it disagrees."""
        while True:
            tokens = self._count(text[group[0].start : group[-1].end])
            if tokens <= budget or len(group) == 1:
                return group, tokens
            group = group[:-1]


def _whitespace_joined(text: str, group: list[_Unit]) -> bool:
    """Whether whitespace separates each unit from the next. Both shipped tokenizers
    split text at whitespace before cutting word pieces, so such a chunk has exactly the
    sum of its units' tokens and needs no count of its own (counting every chunk again
    doubled the characters the chunker tokenized, beside the model)."""
    return all(
        a.end < b.start and text[a.end : b.start].isspace() for a, b in itertools.pairwise(group)
    )


def _group_by_section(units: list[_Unit]) -> list[list[_Unit]]:
    groups: list[list[_Unit]] = []
    for unit in units:
        if groups and groups[-1][-1].section == unit.section:
            groups[-1].append(unit)
        else:
            groups.append([unit])
    return groups
