"""Emacs Org mode files (.org).

Org is plain text with line-based structure, so a small line scanner finds what matters:
headings (``*``, ``**``, … with their TODO keyword, priority and tags left out of the
title), paragraphs, list items, tables, and source or example blocks. The stored text is
rebuilt from those blocks, as the HTML reader does, rather than kept as the source, as the
Markdown reader does: keyword lines (``#+AUTHOR:``), drawers (``:PROPERTIES:`` …
``:END:``), planning lines and comments are Org's bookkeeping, not the document's words,
and would otherwise land in passages and answers.
"""

from __future__ import annotations

import re
import textwrap
from dataclasses import replace
from pathlib import Path

from core.errors import DamagedFileError
from core.ingest.text import (
    EMPTY_FILE,
    DocBuilder,
    clean_inline,
    limit_notice,
    normalize,
    read_text,
)
from core.records import BlockKind, ParsedDocument

_HEADING = re.compile(r"^(\*+)[ \t]+(.*?)[ \t]*$")
_PRIORITY = re.compile(r"^\[#[A-Za-z0-9]\][ \t]*")
_TAGS = re.compile(r"[ \t]+:(?:[\w@#%]+:)+$")
_KEYWORD = re.compile(r"^[ \t]*#\+(\w+):[ \t]*(.*?)[ \t]*$")
_BEGIN = re.compile(r"^[ \t]*#\+begin_(\w+)", re.IGNORECASE)
_COMMENT = re.compile(r"^[ \t]*#(?:[ \t]|$)")
_DRAWER = re.compile(r"^[ \t]*:[\w-]+:[ \t]*$")
_DRAWER_END = re.compile(r"^[ \t]*:end:[ \t]*$", re.IGNORECASE)
_PLANNING = re.compile(r"^[ \t]*(?:SCHEDULED|DEADLINE|CLOSED):")
_FIXED_WIDTH = re.compile(r"^[ \t]*:(?:[ \t]|$)")
_LIST = re.compile(r"^([ \t]*)(?:[-+]|\d{1,9}[.)]|(?<=[ \t])\*)(?:[ \t]+|$)")
_TABLE = re.compile(r"^[ \t]*\|")
_TABLE_RULE = re.compile(r"^[ \t]*\|[-+:| \t]*$")
_RULE = re.compile(r"^[ \t]*-{5,}[ \t]*$")

# Inline markup removed from heading and title text (which feed chunk context); links are
# shown by their description everywhere, as Org itself shows them.
_LINK = re.compile(r"\[\[([^\]]*)\](?:\[([^\]]*)\])?\]")
_EMPHASIS = re.compile(r"(?<![\w*/=~+])([*/_=~+])(?=\S)(.+?)(?<=\S)\1(?![\w*/=~+])")

# Blocks whose content is code, shown as written; those whose content is not the
# document's text (raw export markup, comments) are left out.
_CODE_BLOCKS = frozenset({"src", "example"})
_HIDDEN_BLOCKS = frozenset({"comment", "export"})
_DEFAULT_TODO = ("TODO", "DONE")


def _links(text: str) -> str:
    return _LINK.sub(lambda m: m.group(2) or m.group(1), text)


def _inline(raw: str) -> str:
    return clean_inline(_EMPHASIS.sub(r"\2", _links(raw)))


def _indent(line: str) -> int:
    return len(line.expandtabs(8)) - len(line.expandtabs(8).lstrip())


def _todo_keywords(lines: list[str]) -> frozenset[str]:
    """TODO, DONE and the keywords the file declares (``#+TODO: TODO WAIT | DONE(d)``)."""
    words = set(_DEFAULT_TODO)
    for line in lines:
        match = _KEYWORD.match(line)
        if match and match.group(1).upper() in ("TODO", "SEQ_TODO", "TYP_TODO"):
            words.update(w.split("(")[0] for w in match.group(2).split() if w != "|")
    return frozenset(words)


class _Scanner:
    def __init__(self, text: str) -> None:
        self.lines = text.split("\n")
        self.todo = _todo_keywords(self.lines)
        self.doc = DocBuilder()
        self.headings: list[tuple[int, str]] = []
        self.title = ""

    def path(self) -> tuple[str, ...]:
        return tuple(title for _, title in self.headings)

    def add(self, kind: BlockKind, lines: list[str]) -> None:
        # Code keeps its own indentation, less the block's (the first line's would be lost
        # to normalising otherwise); elsewhere indentation only places text under its
        # heading or bullet.
        if kind is BlockKind.CODE:
            text = textwrap.dedent("\n".join(lines))
        else:
            text = _links("\n".join(line.strip() for line in lines))
        self.doc.add(kind, text, self.path())

    def heading(self, level: int, raw: str) -> None:
        first, _, rest = raw.partition(" ")
        if first in self.todo:
            raw = rest
        raw = _TAGS.sub("", _PRIORITY.sub("", raw.strip()))
        while self.headings and self.headings[-1][0] >= level:
            self.headings.pop()
        title = _inline(raw)
        if title:
            self.headings.append((level, title))
            self.doc.add(BlockKind.HEADING, title, self.path())

    def starts_element(self, line: str) -> bool:
        """Whether ``line`` ends a running paragraph."""
        return bool(
            _HEADING.match(line)
            or _LIST.match(line)
            or _TABLE.match(line)
            or _KEYWORD.match(line)
            or _BEGIN.match(line)
            or _COMMENT.match(line)
            or _DRAWER.match(line)
            or _FIXED_WIDTH.match(line)
            or _PLANNING.match(line)
            or _RULE.match(line)
        )

    def drawer_end(self, i: int) -> int | None:
        """The line closing the drawer opened at ``i``; None when there is none before the
        next heading (then the line is just text)."""
        for j in range(i + 1, len(self.lines)):
            if _DRAWER_END.match(self.lines[j]):
                return j
            if _HEADING.match(self.lines[j]):
                return None
        return None

    def scan(self) -> None:
        lines = self.lines
        n = len(lines)
        i = 0
        while i < n:
            line = lines[i]
            if not line.strip():
                i += 1
                continue

            if heading := _HEADING.match(line):
                self.heading(len(heading.group(1)), heading.group(2))
                i += 1
                continue

            if begin := _BEGIN.match(line):
                name = begin.group(1).lower()
                end = re.compile(rf"^[ \t]*#\+end_{re.escape(name)}\b", re.IGNORECASE)
                j = i + 1
                while j < n and not end.match(lines[j]):
                    j += 1
                body = lines[i + 1 : j]  # an unclosed block runs to the end of the file
                if name in _CODE_BLOCKS:
                    self.add(BlockKind.CODE, body)
                elif name not in _HIDDEN_BLOCKS:
                    for paragraph in "\n".join(body).split("\n\n"):
                        self.add(BlockKind.PARAGRAPH, [paragraph])
                i = j + 1
                continue

            if keyword := _KEYWORD.match(line):
                if keyword.group(1).upper() == "TITLE" and not self.title:
                    self.title = _inline(keyword.group(2))
                i += 1
                continue

            if _COMMENT.match(line) or _PLANNING.match(line) or _RULE.match(line):
                i += 1
                continue

            if _DRAWER.match(line) and (end_at := self.drawer_end(i)) is not None:
                i = end_at + 1
                continue

            if _FIXED_WIDTH.match(line):
                j = i
                while j < n and _FIXED_WIDTH.match(lines[j]):
                    j += 1
                self.add(BlockKind.CODE, [re.sub(r"^[ \t]*:[ \t]?", "", t) for t in lines[i:j]])
                i = j
                continue

            if _TABLE.match(line):
                j = i
                while j < n and _TABLE.match(lines[j]):
                    j += 1
                self.add(BlockKind.TABLE, [t for t in lines[i:j] if not _TABLE_RULE.match(t)])
                i = j
                continue

            if item := _LIST.match(line):
                i = self.list_item(i, _indent(item.group(1)))
                continue

            j = i + 1
            while j < n and lines[j].strip() and not self.starts_element(lines[j]):
                j += 1
            self.add(BlockKind.PARAGRAPH, lines[i:j])
            i = j

    def list_item(self, i: int, marker_indent: int) -> int:
        """Add the item starting at line ``i``; the index of the line after it. Lines
        indented under the bullet continue it (a blank line too, when text follows under
        it); a nested item is an item of its own."""
        lines = self.lines
        n = len(lines)
        j = i + 1
        while j < n:
            line = lines[j]
            if not line.strip():
                k = j
                while k < n and not lines[k].strip():
                    k += 1
                if k < n and _indent(lines[k]) > marker_indent and not _LIST.match(lines[k]):
                    j = k
                    continue
                break
            if _indent(line) <= marker_indent or _LIST.match(line) or _HEADING.match(line):
                break
            j += 1
        self.add(BlockKind.LIST_ITEM, lines[i:j])
        return j


def parse_org(text: str, fallback_title: str) -> ParsedDocument:
    text = normalize(text)
    if not text:
        raise DamagedFileError(EMPTY_FILE)
    scanner = _Scanner(text)
    scanner.scan()
    if not scanner.doc.blocks:
        raise DamagedFileError("no text in the Org file")
    return ParsedDocument(
        text=scanner.doc.text(),
        title=scanner.title or fallback_title,
        blocks=tuple(scanner.doc.blocks),
    )


def parse(path: Path) -> ParsedDocument:
    raw, cut = read_text(path)
    doc = parse_org(raw, path.stem)
    return replace(doc, notice=limit_notice()) if cut else doc
