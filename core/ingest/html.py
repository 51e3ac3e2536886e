"""HTML pages: visible text only, with heading structure.

The output text is built here (not taken from the source) so that menus, scripts, cookie
banners and form controls never reach the index; offsets are recorded as blocks are
appended.
"""

from __future__ import annotations

import re
import warnings
from pathlib import Path

from bs4 import BeautifulSoup, NavigableString, Tag, XMLParsedAsHTMLWarning
from bs4.element import Comment, Declaration, Doctype, ProcessingInstruction

from core.errors import NoTextError
from core.ingest.text import DocBuilder, clean_inline, read_bytes
from core.records import BlockKind, ParsedDocument

# XHTML pages are parsed as HTML on purpose: one lenient parser for every page.
warnings.filterwarnings("ignore", category=XMLParsedAsHTMLWarning)


def _names(words: str) -> frozenset[str]:
    return frozenset(words.split())


# Never visible, or chrome around the content rather than the content itself.
_DROP = _names(
    "script style noscript template nav aside button input select option optgroup "
    "textarea datalist svg canvas iframe object embed audio video map head menu "
    "dialog meta link base"
)
_DROP_ROLES = _names("navigation banner contentinfo search complementary menu menubar dialog alert")
_INLINE = _names(
    "a abbr acronym b bdi bdo big cite code data dfn em font i img kbd label mark "
    "nobr q ruby rp rt s samp small span strike strong sub sup time tt u var wbr del "
    "ins math"
)
_HEADINGS = {f"h{n}": n for n in range(1, 7)}
_LEAF_KINDS = {
    "p": BlockKind.PARAGRAPH,
    "li": BlockKind.LIST_ITEM,
    "dt": BlockKind.PARAGRAPH,
    "dd": BlockKind.PARAGRAPH,
    "caption": BlockKind.PARAGRAPH,
    "figcaption": BlockKind.PARAGRAPH,
    "address": BlockKind.PARAGRAPH,
    "summary": BlockKind.PARAGRAPH,
}
_CONTENT_TAGS = ["p", "h1", "h2", "h3", "h4", "h5", "h6", "article", "main"]
_LAYOUT_TAGS = ["table", "p", "h1", "h2", "h3", "h4", "h5", "h6", "ul", "ol", "pre", "blockquote"]
_HIDDEN_STYLE = re.compile(r"display\s*:\s*none|visibility\s*:\s*hidden", re.IGNORECASE)
_WS = re.compile(r"\s+")
_SKIPPED_STRINGS = (Comment, Declaration, Doctype, ProcessingInstruction)


def _hidden(tag: Tag) -> bool:
    name = tag.name
    if name in _DROP:
        return True
    attrs = tag.attrs
    if "hidden" in attrs or str(attrs.get("aria-hidden", "")).lower() == "true":
        return True
    if str(attrs.get("type", "")).lower() == "hidden":
        return True
    if str(attrs.get("role", "")).lower() in _DROP_ROLES:
        return True
    if _HIDDEN_STYLE.search(str(attrs.get("style", ""))):
        return True
    if name in ("header", "footer"):
        # Site-wide header/footer is navigation; an article's own header holds its title.
        return tag.find_parent(["article", "main"]) is None
    if name == "form":
        # Search and login forms go; pages wrapped whole in a <form> (ASP.NET) stay.
        return tag.find(_CONTENT_TAGS) is None
    return False


def _join_inline(pieces: list[str]) -> str:
    text = "".join(pieces)
    # Spaces around <br> line breaks are layout, not content.
    lines = [" ".join(line.split()) for line in text.split("\n")]
    return "\n".join(line for line in lines if line)


class _Walker:
    def __init__(self) -> None:
        self.builder = DocBuilder()
        self.headings: list[tuple[int, str]] = []
        self.first_h1 = ""
        self.buffer: list[str] = []

    def path(self) -> tuple[str, ...]:
        return tuple(t for _, t in self.headings)

    def flush(self, kind: BlockKind) -> None:
        if self.buffer:
            text = _join_inline(self.buffer)
            self.buffer = []
            self.builder.add(kind, text, self.path())

    def inline_text(self, tag: Tag, breaks: str = "\n") -> str:
        pieces: list[str] = []
        self._collect(tag, pieces, breaks)
        return _join_inline(pieces)

    def _collect(self, tag: Tag, pieces: list[str], breaks: str) -> None:
        for child in tag.children:
            if isinstance(child, NavigableString):
                if not isinstance(child, _SKIPPED_STRINGS):
                    pieces.append(_WS.sub(" ", str(child)))
            elif isinstance(child, Tag) and not _hidden(child):
                if child.name == "br":
                    pieces.append(breaks)
                else:
                    # Block children inside a heading or cell still read as separate words.
                    if child.name not in _INLINE:
                        pieces.append(" ")
                    self._collect(child, pieces, breaks)
                    if child.name not in _INLINE:
                        pieces.append(" ")

    def heading(self, tag: Tag, level: int) -> None:
        title = clean_inline(self.inline_text(tag, " "))
        if not title:
            return
        while self.headings and self.headings[-1][0] >= level:
            self.headings.pop()
        self.headings.append((level, title))
        if level == 1 and not self.first_h1:
            self.first_h1 = title
        self.builder.add(BlockKind.HEADING, title, self.path())

    def table(self, table: Tag) -> None:
        rows: list[str] = []
        caption = table.find("caption")
        if caption is not None and caption.find_parent("table") is table:
            rows.append(self.inline_text(caption, " "))
        for tr in table.find_all("tr"):
            if tr.find_parent("table") is not table or _hidden(tr):
                continue
            cells = [
                self.inline_text(cell, " ")
                for cell in tr.find_all(["td", "th"], recursive=False)
                if not _hidden(cell)
            ]
            if any(cells):
                rows.append(" | ".join(cells))
        self.builder.add(BlockKind.TABLE, "\n".join(rows), self.path())

    def walk(self, node: Tag, kind: BlockKind) -> None:
        for child in node.children:
            if isinstance(child, NavigableString):
                if not isinstance(child, _SKIPPED_STRINGS):
                    self.buffer.append(_WS.sub(" ", str(child)))
                continue
            if not isinstance(child, Tag) or _hidden(child):
                continue
            name = child.name
            if name == "br":
                self.buffer.append("\n")
            elif name in _INLINE:
                self.walk(child, kind)
            elif name in _HEADINGS:
                self.flush(kind)
                self.heading(child, _HEADINGS[name])
            elif name == "pre":
                self.flush(kind)
                self.builder.add(BlockKind.CODE, child.get_text().strip("\n"), self.path())
            elif name == "table" and child.find(_LAYOUT_TAGS) is None:
                self.flush(kind)
                self.table(child)
            elif name in _LEAF_KINDS:
                self.flush(kind)
                # <li><p>..</p></li> (loose lists) is still a list item.
                inner = kind if kind == BlockKind.LIST_ITEM and name == "p" else _LEAF_KINDS[name]
                self.walk(child, inner)
                self.flush(inner)
            else:
                # Any other element (div, section, a layout table...) is a block boundary.
                self.flush(kind)
                self.walk(child, kind)
                self.flush(kind)


def _page_title(soup: BeautifulSoup) -> str:
    title = soup.find("title")
    if title is not None and title.find_parent("svg") is not None:
        # An <svg> <title> is an image tooltip, not the page's name.
        title = next((t for t in soup.find_all("title") if t.find_parent("svg") is None), None)
    return clean_inline(title.get_text()) if title is not None else ""


def parse_html(data: bytes | str, fallback_title: str) -> ParsedDocument:
    soup = BeautifulSoup(data, "lxml")
    title = _page_title(soup)
    walker = _Walker()
    root = soup.body or soup
    walker.walk(root, BlockKind.PARAGRAPH)
    walker.flush(BlockKind.PARAGRAPH)
    text = walker.builder.text()
    if not text:
        raise NoTextError("no visible text", hint="The page has no readable text to index.")
    return ParsedDocument(
        text=text,
        title=title or walker.first_h1 or fallback_title,
        blocks=tuple(walker.builder.blocks),
    )


def parse(path: Path) -> ParsedDocument:
    return parse_html(read_bytes(path), path.stem)
