"""HTML pages: visible text only, with heading structure.

The output text is built here (not taken from the source) so that menus, scripts, cookie
banners and form controls never reach the index; offsets are recorded as blocks are
appended.
"""

from __future__ import annotations

import re
import warnings
from dataclasses import replace
from pathlib import Path

import soupsieve
from bs4 import BeautifulSoup, Tag, XMLParsedAsHTMLWarning
from bs4.element import (
    Comment,
    Declaration,
    Doctype,
    NavigableString,
    ProcessingInstruction,
)

from core.errors import NoTextError
from core.ingest.text import DocBuilder, clean_inline, limit_notice, read_head
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
    if name in ("header", "footer"):
        # Site-wide header/footer is navigation; an article's own header holds its title.
        return tag.find_parent(["article", "main"]) is None
    if name == "form":
        # Search and login forms go; pages wrapped whole in a <form> (ASP.NET) stay.
        return tag.find(_CONTENT_TAGS) is None
    return False


# --- what CSS hides ----------------------------------------------------------------------
#
# Text a reader cannot see must not reach the index: a page can hide instructions for a
# language model in it. Only the page's own CSS is read (inline styles and <style>
# sheets, outside @media blocks, which usually hide content on some screens only); a
# value Lectern cannot evaluate (var(), calc(), an image) never hides anything.

_STYLE_PROPS = _names("display visibility font-size opacity color background background-color")
_CSS_COMMENT = re.compile(r"/\*.*?\*/", re.S)
_SIMPLE_SELECTOR = re.compile(r"^(?P<tag>[a-zA-Z][\w-]*|\*)?(?P<rest>(?:[.#][\w-]+)*)$")
_SELECTOR_PART = re.compile(r"[.#][\w-]+")
_LENGTH = re.compile(r"^([+-]?(?:\d+\.?\d*|\.\d+))(px|em|rem|pt|pc|%|ex|ch|q|mm|cm|in)?$")
# At or below these a text is unreadable: 1px and 0.05em hide it as surely as 0.
_UNREADABLE_SIZE = {
    **dict.fromkeys(("px", "pt", "q"), 1.0),
    **dict.fromkeys(("em", "rem", "ex", "ch"), 0.1),
    **{"%": 10.0, "pc": 0.08, "mm": 0.3, "cm": 0.03, "in": 0.01, "": 0.0},
}
_RELATIVE_SIZE = re.compile(r"(?:em|%|ex|ch)$|^(?:inherit|smaller|larger)$")
_UNKNOWN = "?"  # a colour that cannot be evaluated (var(), an image): never "equal"
_NAMED_COLOURS = {
    "white": "#ffffff",
    "black": "#000000",
    "red": "#ff0000",
    "lime": "#00ff00",
    "blue": "#0000ff",
    "yellow": "#ffff00",
    "silver": "#c0c0c0",
    "gray": "#808080",
    "grey": "#808080",
    "snow": "#fffafa",
    "whitesmoke": "#f5f5f5",
    "ivory": "#fffff0",
}
_TRANSPARENT = "transparent"


def _declarations(text: str) -> dict[str, tuple[str, bool]]:
    """``prop: value`` pairs of a style attribute or rule body; True marks !important."""
    found: dict[str, tuple[str, bool]] = {}
    for declaration in text.split(";"):
        name, sep, value = declaration.partition(":")
        name = name.strip().lower()
        if not sep or name not in _STYLE_PROPS:
            continue
        value = value.strip().lower()
        important = value.endswith("!important")
        if important:
            value = value[: -len("!important")].strip()
        found[name] = (value, important)
    return found


def _colour(value: str) -> str:
    """A comparable form of a CSS colour: ``#rrggbb``, ``transparent``, a name, or ``?``."""
    value = value.strip().lower()
    if not value or any(f in value for f in ("var(", "calc(", "url(", "gradient", "env(")):
        return _UNKNOWN
    if value in ("transparent", "none"):
        return _TRANSPARENT
    if value.startswith("#"):
        digits = value[1:]
        if len(digits) in (3, 4):
            digits = "".join(ch * 2 for ch in digits)
        if len(digits) == 8:
            if digits[6:] == "00":
                return _TRANSPARENT
            digits = digits[:6]
        return f"#{digits}" if re.fullmatch(r"[0-9a-f]{6}", digits) else _UNKNOWN
    match = re.fullmatch(r"rgba?\((.*)\)", value)
    if match:
        parts = [p for p in re.split(r"[\s,/]+", match[1].strip()) if p]
        try:
            channels = [
                round(float(p[:-1]) * 2.55) if p.endswith("%") else round(float(p))
                for p in parts[:3]
            ]
            alpha = (
                (float(parts[3][:-1]) / 100 if parts[3].endswith("%") else float(parts[3]))
                if len(parts) > 3
                else 1.0
            )
        except (ValueError, IndexError):
            return _UNKNOWN
        if len(channels) != 3:
            return _UNKNOWN
        if alpha == 0:
            return _TRANSPARENT
        return "#" + "".join(f"{max(0, min(255, c)):02x}" for c in channels)
    if value in ("inherit", "initial", "unset", "currentcolor", "revert"):
        return _UNKNOWN
    return _NAMED_COLOURS.get(value, value if re.fullmatch(r"[a-z]+", value) else _UNKNOWN)


def _background(value: str) -> str:
    """The colour a ``background`` shorthand paints; ``?`` when an image may cover it."""
    if "url(" in value or "gradient" in value:
        return _UNKNOWN
    tokens = re.findall(r"rgba?\([^)]*\)|\S+", value)
    known = [c for c in map(_colour, tokens) if c != _UNKNOWN]
    return known[-1] if known else _UNKNOWN


def _specificity(selector: str) -> tuple[int, int, int]:
    ids = selector.count("#")
    classes = len(re.findall(r"\.[\w-]|\[|:(?!:)", selector))
    tags = len(re.findall(r"(?:^|[\s>+~])[a-zA-Z]", selector))
    return ids, classes, tags


def _style_rules(soup: BeautifulSoup) -> list[tuple[str, dict[str, tuple[str, bool]]]]:
    """(selector, declarations) of the page's <style> sheets, top level only."""
    rules: list[tuple[str, dict[str, tuple[str, bool]]]] = []
    for sheet in soup.find_all("style"):
        media = str(sheet.get("media", "all")).lower()
        if media and not any(m in media for m in ("all", "screen")):
            continue
        css = _CSS_COMMENT.sub("", sheet.get_text())
        pos, depth, start = 0, 0, 0
        selector = ""
        skipping = False
        while pos < len(css):
            ch = css[pos]
            if ch == "{":
                if depth == 0:
                    selector = css[start:pos].strip()
                    skipping = selector.startswith("@")
                    start = pos + 1
                depth += 1
            elif ch == "}":
                depth -= 1
                if depth <= 0:
                    depth = 0
                    if not skipping and selector:
                        declarations = _declarations(css[start:pos])
                        if declarations:
                            rules.extend(
                                (part.strip(), declarations) for part in selector.split(",")
                            )
                    start = pos + 1
                    selector, skipping = "", False
            elif ch == ";" and depth == 0:
                start = pos + 1  # an @import or @charset statement
            pos += 1
    return rules


def _unreadable_size(value: str) -> bool:
    match = _LENGTH.match(value.strip())
    if not match:
        return False  # a keyword (small, larger) or calc(): readable
    number, unit = float(match[1]), match[2] or ""
    return number <= _UNREADABLE_SIZE[unit]


def _transparent(opacity: str) -> bool:
    value = opacity.strip()
    try:
        number = float(value[:-1]) / 100 if value.endswith("%") else float(value)
    except ValueError:
        return False
    return number < 0.05


def _hides(declarations: dict[str, tuple[str, bool]]) -> bool:
    display = declarations.get("display", ("", False))[0]
    opacity = declarations.get("opacity", ("", False))[0]
    return display == "none" or bool(opacity and _transparent(opacity))


class _Styles:
    """Which elements are hidden whole (``dropped``) and which ones' own text is invisible
    (``muted``: visibility, zero font size, text coloured like its background). Those
    properties inherit, so they are worked out top-down over the whole tree once."""

    def __init__(self, soup: BeautifulSoup) -> None:
        self.dropped: set[int] = set()
        self.muted: set[int] = set()
        matched = self._match_rules(soup)
        root = soup.body or soup
        # (tag, visibility hidden, font size zero, text colour, background colour)
        stack: list[tuple[Tag, bool, bool, str, str]] = [(root, False, False, "", "#ffffff")]
        while stack:
            tag, invisible, tiny, colour, background = stack.pop()
            props: dict[str, tuple[str, bool]] = {}
            for _key, declarations in sorted(matched.get(id(tag), [])):
                props.update(declarations)
            for name, (value, important) in _declarations(str(tag.attrs.get("style", ""))).items():
                if not (props.get(name, ("", False))[1] and not important):
                    props[name] = (value, important)
            values = {name: value for name, (value, _important) in props.items()}
            if _hides(props):
                self.dropped.add(id(tag))
                continue
            if "visibility" in values:
                invisible = values["visibility"] in ("hidden", "collapse") or (
                    values["visibility"] == "inherit" and invisible
                )
            if "font-size" in values:
                size = values["font-size"]
                tiny = _unreadable_size(size) or (tiny and bool(_RELATIVE_SIZE.search(size)))
            if "color" in values and values["color"] not in ("inherit", "currentcolor"):
                colour = _colour(values["color"])
            paint = values.get("background-color") or values.get("background")
            if paint is not None:
                painted = _colour(paint) if "background-color" in values else _background(paint)
                if painted != _TRANSPARENT:
                    background = painted
            same = colour not in ("", _UNKNOWN) and colour == background
            if invisible or tiny or colour == _TRANSPARENT or same:
                self.muted.add(id(tag))
            for child in tag.children:
                if isinstance(child, Tag):
                    stack.append((child, invisible, tiny, colour, background))

    @staticmethod
    def _match_rules(
        soup: BeautifulSoup,
    ) -> dict[
        int, list[tuple[tuple[bool, tuple[int, int, int], int], dict[str, tuple[str, bool]]]]
    ]:
        rules = _style_rules(soup)
        matched: dict[
            int, list[tuple[tuple[bool, tuple[int, int, int], int], dict[str, tuple[str, bool]]]]
        ] = {}
        if not rules:
            return matched
        by_tag: dict[str, list[Tag]] = {}
        by_class: dict[str, list[Tag]] = {}
        by_id: dict[str, list[Tag]] = {}
        every = soup.find_all(True)
        budget = [MATCH_BUDGET]
        for tag in every:
            by_tag.setdefault(tag.name, []).append(tag)
            for cls in tag.get_attribute_list("class"):
                if cls:
                    by_class.setdefault(cls, []).append(tag)
            if tag.get("id"):
                by_id.setdefault(str(tag["id"]), []).append(tag)
        for order, (selector, declarations) in enumerate(rules):
            targets = _select(selector, declarations, soup, every, by_tag, by_class, by_id, budget)
            specificity = _specificity(selector)
            for important in (False, True):
                chosen = {k: v for k, v in declarations.items() if v[1] == important}
                if not chosen:
                    continue
                for tag in targets:
                    matched.setdefault(id(tag), []).append(
                        ((important, specificity, order), chosen)
                    )
        return matched


# Elements checked against longer selectors per page, at about 15 µs each: below a
# second even for a 20,000-paragraph page whose sheet hides by descendant selectors.
MATCH_BUDGET = 50_000
_COMBINATOR = re.compile(r"\s*[>+~]\s*|\s+")
_BRACKETED = re.compile(r"\([^()]*\)|\[[^\]]*\]")


def _select(
    selector: str,
    declarations: dict[str, tuple[str, bool]],
    soup: BeautifulSoup,
    every: list[Tag],
    by_tag: dict[str, list[Tag]],
    by_class: dict[str, list[Tag]],
    by_id: dict[str, list[Tag]],
    budget: list[int],
) -> list[Tag]:
    """Elements ``selector`` matches. Candidates come from the tag, class or id of its
    last compound, looked up directly; soupsieve checks the rest of a longer selector
    (``.box p``) on those candidates only, and only for rules that hide outright: a
    big site sheet has hundreds of colour rules, and a full match walks the tree."""
    simple = _SIMPLE_SELECTOR.match(selector)
    compound = simple
    if simple is None:
        if not (
            _hides(declarations) or "visibility" in declarations or "font-size" in declarations
        ):
            return []
        plain = _BRACKETED.sub("", selector).strip()
        # Every class and id it names must be on the page for it to match anything; a
        # site-wide sheet names far more than one page uses.
        for token in _SELECTOR_PART.findall(plain):
            if token[1:] not in (by_class if token[0] == "." else by_id):
                return []
        last = _COMBINATOR.split(plain)[-1]
        compound = _SIMPLE_SELECTOR.match(re.sub(r"::?[\w-]+", "", last))
    if compound is None:
        return []
    tag_name = (compound["tag"] or "*").lower()
    parts = _SELECTOR_PART.findall(compound["rest"])
    if parts:
        first = parts[0]
        pool = by_class.get(first[1:], []) if first[0] == "." else by_id.get(first[1:], [])
    else:
        pool = every if tag_name == "*" else by_tag.get(tag_name, [])
    if simple is None:
        if len(pool) > budget[0]:
            return []  # a huge page with a huge sheet: parsing must stay fast (MATCH_BUDGET)
        budget[0] -= len(pool)
    if not parts:
        candidates = list(pool)
    else:
        classes = {p[1:] for p in parts if p[0] == "."}
        ids = {p[1:] for p in parts if p[0] == "#"}
        candidates = [
            tag
            for tag in pool
            if (tag_name == "*" or tag.name == tag_name)
            and classes <= set(tag.get_attribute_list("class"))
            and all(str(tag.get("id", "")) == i for i in ids)
        ]
    if simple is not None or not candidates:
        return candidates
    try:
        compiled = soupsieve.compile(selector)
        return [tag for tag in candidates if compiled.match(tag)]
    except Exception:  # pseudo-elements and syntax soupsieve does not know: not applied
        return []


def _join_inline(pieces: list[str]) -> str:
    text = "".join(pieces)
    # Spaces around <br> line breaks are layout, not content.
    lines = [" ".join(line.split()) for line in text.split("\n")]
    return "\n".join(line for line in lines if line)


class _Walker:
    def __init__(self, styles: _Styles) -> None:
        self.styles = styles
        self.builder = DocBuilder()
        self.headings: list[tuple[int, str]] = []
        self.first_h1 = ""
        self.buffer: list[str] = []

    def hidden(self, tag: Tag) -> bool:
        return id(tag) in self.styles.dropped or _hidden(tag)

    def shows_text_of(self, tag: Tag) -> bool:
        return id(tag) not in self.styles.muted

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
        shown = self.shows_text_of(tag)
        for child in tag.children:
            if isinstance(child, NavigableString):
                if shown and not isinstance(child, _SKIPPED_STRINGS):
                    pieces.append(_WS.sub(" ", str(child)))
            elif isinstance(child, Tag) and not self.hidden(child):
                if child.name == "br":
                    pieces.append(breaks)
                else:
                    # Block children inside a heading or cell still read as separate words.
                    if child.name not in _INLINE:
                        pieces.append(" ")
                    self._collect(child, pieces, breaks)
                    if child.name not in _INLINE:
                        pieces.append(" ")

    def pre_text(self, tag: Tag) -> str:
        """A <pre> block's text as written (spacing kept), less what is hidden in it."""
        shown = self.shows_text_of(tag)
        pieces: list[str] = []
        for child in tag.children:
            if isinstance(child, NavigableString):
                if shown and not isinstance(child, _SKIPPED_STRINGS):
                    pieces.append(str(child))
            elif isinstance(child, Tag) and not self.hidden(child):
                pieces.append("\n" if child.name == "br" else self.pre_text(child))
        return "".join(pieces)

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
            if tr.find_parent("table") is not table or self.hidden(tr):
                continue
            cells = [
                self.inline_text(cell, " ")
                for cell in tr.find_all(["td", "th"], recursive=False)
                if not self.hidden(cell)
            ]
            if any(cells):
                rows.append(" | ".join(cells))
        self.builder.add(BlockKind.TABLE, "\n".join(rows), self.path())

    def walk(self, node: Tag, kind: BlockKind) -> None:
        shown = self.shows_text_of(node)
        for child in node.children:
            if isinstance(child, NavigableString):
                if shown and not isinstance(child, _SKIPPED_STRINGS):
                    self.buffer.append(_WS.sub(" ", str(child)))
                continue
            if not isinstance(child, Tag) or self.hidden(child):
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
                self.builder.add(BlockKind.CODE, self.pre_text(child).strip("\n"), self.path())
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
    walker = _Walker(_Styles(soup))
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


_MB = 1024 * 1024
# BeautifulSoup's tree takes about sixty times the page's markup in memory (8 MB of
# dense markup: 480 MB and 10 s), so a page is read up to this much of its markup: some
# 4.7 million characters of text, past the text limit already.
MAX_HTML_BYTES = 8 * _MB
# Pictures saved inside a page ("data:" addresses) are no text: they are dropped before
# the markup is measured, from at most this much of the file.
MAX_HTML_FILE_BYTES = 64 * _MB
_DATA_URI = re.compile(rb"data:[\w.+/-]*;base64,[A-Za-z0-9+/=\s]*")


def parse(path: Path) -> ParsedDocument:
    data, more = read_head(path, MAX_HTML_FILE_BYTES)
    data = _DATA_URI.sub(b"data:,", data)
    if len(data) > MAX_HTML_BYTES:
        # Cut before a tag, so the last element read is not half a name.
        tag = data.rfind(b"<", 0, MAX_HTML_BYTES)
        data, more = data[: tag if tag > 0 else MAX_HTML_BYTES], True
    doc = parse_html(data, path.stem)
    return (
        replace(doc, notice=limit_notice(f"{MAX_HTML_BYTES // _MB} MB of the page"))
        if more
        else doc
    )
