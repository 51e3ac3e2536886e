"""Markdown files.

The stored text is the Markdown source itself (normalised), so a cited span maps
straight back to what the person wrote. Structure comes from a small line scanner, not a
full CommonMark parser: it only has to find headings, list items, fenced/indented code,
pipe tables and paragraphs, and it must never split a code block or a table.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from pathlib import Path

from core.errors import DamagedFileError
from core.ingest.text import EMPTY_FILE, clean_inline, limit_notice, normalize, read_text
from core.records import Block, BlockKind, ParsedDocument

_ATX = re.compile(r"^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$")
_SETEXT = re.compile(r"^ {0,3}(=+|-+)[ \t]*$")
_FENCE = re.compile(r"^[ \t]*(`{3,}|~{3,})")
_THEMATIC = re.compile(r"^ {0,3}([-*_])(?:[ \t]*\1){2,}[ \t]*$")
_LIST = re.compile(r"^([ \t]*)(?:[-*+]|\d{1,9}[.)])(?:[ \t]+|$)")
_BULLET_OR_ONE = re.compile(r"^[ \t]*(?:[-*+]|1[.)])[ \t]+\S")
_TABLE_DELIM = re.compile(r"^[ \t]*\|?[ \t]*:?-+:?[ \t]*(?:\|[ \t]*:?-+:?[ \t]*)*\|?[ \t]*$")
_QUOTE = re.compile(r"^ {0,3}>")
_FRONT_TITLE = re.compile(r"^title[ \t]*:[ \t]*(.+?)[ \t]*$", re.MULTILINE | re.IGNORECASE)

# Inline markup removed from heading and title text (which feed chunk context).
_LINK = re.compile(r"!?\[([^\]]*)\]\([^)]*\)")
_EMPHASIS = re.compile(r"(\*{1,3}|_{1,3}|`+|~~)(?=\S)(.+?)(?<=\S)\1")


def _heading_text(raw: str) -> str:
    text = _LINK.sub(r"\1", raw)
    text = _EMPHASIS.sub(r"\2", text)
    return clean_inline(text.replace("\\", ""))


@dataclass(frozen=True)
class _Line:
    text: str
    start: int

    @property
    def end(self) -> int:
        return self.start + len(self.text)

    @property
    def blank(self) -> bool:
        return not self.text.strip()

    @property
    def indent(self) -> int:
        return len(self.text.expandtabs(4)) - len(self.text.expandtabs(4).lstrip())


def _lines(text: str) -> list[_Line]:
    out: list[_Line] = []
    pos = 0
    for raw in text.split("\n"):
        out.append(_Line(raw, pos))
        pos += len(raw) + 1
    return out


def _front_matter_end(lines: list[_Line]) -> int:
    """Index of the first line after YAML front matter, or 0 when there is none."""
    if not lines or lines[0].text.strip() != "---":
        return 0
    for i in range(1, min(len(lines), 200)):
        if lines[i].text.strip() in ("---", "..."):
            return i + 1
    return 0


class _Scanner:
    def __init__(self, text: str) -> None:
        self.text = text
        self.lines = _lines(text)
        self.blocks: list[Block] = []
        self.headings: list[tuple[int, str]] = []
        self.first_h1 = ""

    def path(self) -> tuple[str, ...]:
        return tuple(t for _, t in self.headings)

    def emit(self, kind: BlockKind, first: int, last: int) -> None:
        start, end = self.lines[first].start, self.lines[last].end
        # Trim so the block text has no surrounding whitespace (indented list items).
        chunk = self.text[start:end]
        start += len(chunk) - len(chunk.lstrip())
        end -= len(chunk) - len(chunk.rstrip())
        if end > start:
            self.blocks.append(Block(kind, start, end, self.path()))

    def heading(self, level: int, title: str, first: int, last: int) -> None:
        while self.headings and self.headings[-1][0] >= level:
            self.headings.pop()
        title = _heading_text(title)
        if title:
            self.headings.append((level, title))
            if level == 1 and not self.first_h1:
                self.first_h1 = title
        self.emit(BlockKind.HEADING, first, last)

    def starts_block(self, i: int) -> bool:
        """Whether line ``i`` interrupts a running paragraph or list item."""
        text = self.lines[i].text
        return bool(
            _ATX.match(text)
            or _FENCE.match(text)
            or _THEMATIC.match(text)
            or _QUOTE.match(text)
            or _BULLET_OR_ONE.match(text)
        )

    def is_table_start(self, i: int) -> bool:
        return (
            i + 1 < len(self.lines)
            and "|" in self.lines[i].text
            and bool(_TABLE_DELIM.match(self.lines[i + 1].text))
            and "-" in self.lines[i + 1].text
            and "|" in self.lines[i + 1].text  # "text | text" over "---" is a setext heading
        )

    def scan(self, begin: int) -> None:
        lines = self.lines
        n = len(lines)
        i = begin
        prev_kind: BlockKind | None = None
        after_blank = True
        while i < n:
            line = lines[i]
            text = line.text
            if line.blank:
                after_blank = True
                i += 1
                continue

            if fence := _FENCE.match(text):
                marker = fence.group(1)
                closing = re.compile(rf"^[ \t]*{re.escape(marker[0])}{{{len(marker)},}}[ \t]*$")
                j = i + 1
                while j < n and not closing.match(lines[j].text):
                    j += 1
                last = min(j, n - 1)  # an unclosed fence runs to the end of the file
                self.emit(BlockKind.CODE, i, last)
                prev_kind, after_blank, i = BlockKind.CODE, False, last + 1
                continue

            if atx := _ATX.match(text):
                self.heading(len(atx.group(1)), atx.group(2) or "", i, i)
                prev_kind, after_blank, i = BlockKind.HEADING, False, i + 1
                continue

            if _THEMATIC.match(text):
                after_blank, i = True, i + 1
                continue

            if self.is_table_start(i):
                j = i + 2
                while j < n and not lines[j].blank and "|" in lines[j].text:
                    j += 1
                self.emit(BlockKind.TABLE, i, j - 1)
                prev_kind, after_blank, i = BlockKind.TABLE, False, j
                continue

            # Indented code: only after a blank line and not inside a list, where
            # indentation means continuation instead.
            if line.indent >= 4 and after_blank and prev_kind is not BlockKind.LIST_ITEM:
                j = i + 1
                while j < n and (lines[j].blank or lines[j].indent >= 4):
                    j += 1
                while lines[j - 1].blank:
                    j -= 1
                self.emit(BlockKind.CODE, i, j - 1)
                prev_kind, after_blank, i = BlockKind.CODE, False, j
                continue

            if item := _LIST.match(text):
                marker_indent = len(item.group(1).expandtabs(4))
                j = i + 1
                while j < n:
                    nxt = lines[j]
                    if nxt.blank:
                        # A blank line ends the item unless the next text is indented
                        # under it (a second paragraph of the same item).
                        k = j
                        while k < n and lines[k].blank:
                            k += 1
                        if (
                            k < n
                            and lines[k].indent > marker_indent
                            and not _LIST.match(lines[k].text)
                            and not _FENCE.match(lines[k].text)
                        ):
                            j = k
                            continue
                        break
                    if _LIST.match(nxt.text) or self.starts_block(j) or self.is_table_start(j):
                        break
                    j += 1
                self.emit(BlockKind.LIST_ITEM, i, j - 1)
                prev_kind, after_blank, i = BlockKind.LIST_ITEM, False, j
                continue

            if _QUOTE.match(text):
                j = i + 1
                while j < n and not lines[j].blank and _QUOTE.match(lines[j].text):
                    j += 1
                self.emit(BlockKind.PARAGRAPH, i, j - 1)
                prev_kind, after_blank, i = BlockKind.PARAGRAPH, False, j
                continue

            # Paragraph, which may turn out to be a setext heading.
            j = i + 1
            setext_level = 0
            while j < n and not lines[j].blank:
                underline = _SETEXT.match(lines[j].text)
                if underline:
                    setext_level = 1 if underline.group(1).startswith("=") else 2
                    break
                if self.starts_block(j) or self.is_table_start(j):
                    break
                j += 1
            if setext_level:
                title = " ".join(lines[k].text.strip() for k in range(i, j))
                self.heading(setext_level, title, i, j)
                prev_kind, after_blank, i = BlockKind.HEADING, False, j + 1
                continue
            self.emit(BlockKind.PARAGRAPH, i, j - 1)
            prev_kind, after_blank, i = BlockKind.PARAGRAPH, False, j


def parse_markdown(text: str, fallback_title: str) -> ParsedDocument:
    text = normalize(text)
    if not text:
        raise DamagedFileError(EMPTY_FILE)
    scanner = _Scanner(text)
    body = _front_matter_end(scanner.lines)
    title = ""
    if body:
        front = text[: scanner.lines[body - 1].end]
        if match := _FRONT_TITLE.search(front):
            title = clean_inline(match.group(1).strip("'\""))
    scanner.scan(body)
    title = title or scanner.first_h1 or fallback_title
    return ParsedDocument(text=text, title=title, blocks=tuple(scanner.blocks))


def parse(path: Path) -> ParsedDocument:
    raw, cut = read_text(path)
    doc = parse_markdown(raw, path.stem)
    return replace(doc, notice=limit_notice()) if cut else doc
