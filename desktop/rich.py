"""Answer text to rich text (and back to Markdown).

Models write light Markdown: paragraphs, bullet and numbered lists, **bold**, `code`.
That much is rendered; everything else is shown as written. Citation markers (parsed by
core's own citation parser, so the app and the checker agree on what a citation is;
imported on first use, since it pulls in numpy and would slow the window's first paint)
become links ``cite:<n>:<occurrence>``: the occurrence tells which sentence's citation
of source n was clicked, so its own supporting span is highlighted.
"""

from __future__ import annotations

import html
import re
import unicodedata
from collections.abc import Iterable

from core.text import WORD
from desktop.theme import Palette
from desktop.viewmodels import TurnView

_BULLET = re.compile(r"^\s*[-*•]\s+(.*)$")
_NUMBERED = re.compile(r"^\s*(\d{1,3})[.)]\s+(.*)$")
_HEADING = re.compile(r"^\s*#{1,6}\s+(.*)$")
_BOLD = re.compile(r"\*\*(.+?)\*\*")
_ITALIC = re.compile(r"(?<![*\w])\*(?!\s)(.+?)(?<!\s)\*(?![*\w])")
_CODE = re.compile(r"`([^`]+)`")
_FENCE = re.compile(r"^\s*(```|~~~)")
# Code is drawn with these for its hyphens: Qt's line breaking may break after any
# hyphen, and "--canary-" / "duration" on two lines is no longer a command. What is
# copied from an answer gets plain hyphens back (turn_view.AnswerLabel).
NO_BREAK_HYPHEN = "\u2011"


def code_html(code: str) -> str:
    """Escaped ``code`` that never wraps at its hyphens (it still wraps at spaces, so a
    long command stays inside a narrow column)."""
    return html.escape(code, quote=False).replace("-", NO_BREAK_HYPHEN)


def _inline(text: str, palette: Palette) -> str:
    out = html.escape(text, quote=False)
    out = _CODE.sub(
        lambda m: (
            f'<code style="background-color:{palette.surface_alt};">'
            f"{m.group(1).replace('-', NO_BREAK_HYPHEN)}</code>"
        ),
        out,
    )
    out = _BOLD.sub(r"<b>\1</b>", out)
    return _ITALIC.sub(r"<i>\1</i>", out)


def citation_chip(n: int, occurrence: int, palette: Palette, known: bool = True) -> str:
    if not known:
        return f'<span style="color:{palette.faint};">[{n}]</span>'
    return (
        f'<a href="cite:{n}:{occurrence}" style="text-decoration:none;">'
        f'<span style="background-color:{palette.accent_soft}; color:{palette.accent};'
        f' font-weight:600;">&#8202;{n}&#8202;</span></a>'
    )


def _line_html(line: str, palette: Palette, counts: dict[int, int], known: set[int] | None) -> str:
    from core.citation_marks import parse_citations

    parts: list[str] = []
    pos = 0
    for ref in parse_citations(line):
        parts.append(_inline(line[pos : ref.start].rstrip(" "), palette))
        chips = []
        for n in ref.numbers:
            occurrence = counts.get(n, 0)
            counts[n] = occurrence + 1
            chips.append(citation_chip(n, occurrence, palette, known is None or n in known))
        parts.append("&#8201;" + "&#8201;".join(chips))
        pos = ref.end
    parts.append(_inline(line[pos:], palette))
    return "".join(parts)


def answer_html(
    text: str, palette: Palette, known: set[int] | None = None, *, cursor: bool = False
) -> str:
    """Rich text for an answer; ``known`` limits which numbers become links."""
    if cursor:
        last = text.rsplit("\n", 1)[-1]
        if not _FENCE.match(last) and last.count("`") % 2:
            # Code still being written is drawn as code already: its backtick bare and
            # its option broken at a hyphen, then redrawn whole, made it jump.
            text += "`"
    counts: dict[int, int] = {}
    blocks: list[str] = []
    list_kind: str | None = None
    items: list[str] = []
    paragraph: list[str] = []

    def flush_paragraph() -> None:
        if paragraph:
            blocks.append(f'<p style="margin:0 0 8px 0;">{"<br>".join(paragraph)}</p>')
            paragraph.clear()

    def flush_list() -> None:
        nonlocal list_kind
        if list_kind:
            body = "".join(f'<li style="margin-bottom:4px;">{i}</li>' for i in items)
            blocks.append(f'<{list_kind} style="margin:0 0 8px 0;">{body}</{list_kind}>')
            items.clear()
            list_kind = None

    code: list[str] | None = None  # the lines of a fenced code block being read

    def flush_code() -> None:
        nonlocal code
        if code is not None:
            lines = "<br>".join(code_html(line) for line in code) or "&nbsp;"
            blocks.append(
                '<p style="margin:0 0 8px 0; white-space:pre-wrap;">'
                f'<code style="background-color:{palette.surface_alt};">{lines}</code></p>'
            )
            code = None

    for raw in text.replace("\r\n", "\n").split("\n"):
        if _FENCE.match(raw):
            if code is None:
                flush_paragraph()
                flush_list()
                code = []
            else:
                flush_code()
            continue
        if code is not None:
            code.append(raw)
            continue
        if not raw.strip():
            flush_paragraph()
            flush_list()
            continue
        bullet = _BULLET.match(raw)
        numbered = _NUMBERED.match(raw)
        heading = _HEADING.match(raw)
        content = bullet.group(1) if bullet else numbered.group(2) if numbered else None
        if content is not None:
            flush_paragraph()
            kind = "ul" if bullet else "ol"
            if list_kind != kind:
                flush_list()
                list_kind = kind
            items.append(_line_html(content, palette, counts, known))
            continue
        flush_list()
        if heading:
            flush_paragraph()
            blocks.append(
                f'<p style="margin:4px 0 6px 0;"><b>{_line_html(heading.group(1), palette, counts, known)}</b></p>'
            )
            continue
        paragraph.append(_line_html(raw.strip(), palette, counts, known))
    flush_paragraph()
    flush_list()
    flush_code()  # a block still being written, or never closed
    if cursor:
        caret = f'<span style="color:{palette.accent};">▍</span>'
        if blocks and blocks[-1].endswith("</p>"):
            blocks[-1] = blocks[-1][: -len("</p>")] + caret + "</p>"
        else:
            blocks.append(f"<p>{caret}</p>")
    return "".join(blocks) or "&nbsp;"


# --- search results ---------------------------------------------------------------------

_WORD = WORD  # as the keyword index splits words (Chinese and Japanese by character)


def term_key(word: str) -> str:
    """A word as the keyword index matches it: lowercased, accents stripped and the common
    English endings folded the way its Porter stemmer folds them ("limits", "limited" and
    "limiting" are one term), so what is highlighted is what was matched."""
    w = "".join(
        c for c in unicodedata.normalize("NFKD", word.casefold()) if not unicodedata.combining(c)
    )
    if len(w) > 4 and w.endswith("ies"):
        w = w[:-3] + "y"
    elif w.endswith("sses"):
        w = w[:-2]
    elif len(w) > 3 and w.endswith("s") and not w.endswith(("ss", "us", "is")):
        w = w[:-1]
    if len(w) > 2 and w.endswith("e"):
        w = w[:-1]
    for suffix in () if w.endswith("eed") else ("ing", "ed"):
        stem = w[: -len(suffix)]
        if w.endswith(suffix) and len(stem) >= 2 and any(v in stem for v in "aeiouy"):
            w = stem[:-1] if len(stem) > 3 and stem[-1] == stem[-2] not in "lsz" else stem
            break
    return w


def query_terms(query: str) -> set[str]:
    """The keys of the words a keyword search for ``query`` looks for (stop words left out,
    as the index leaves them out)."""
    from core.text import STOPWORDS, words

    return {term_key(w) for w in words(query) if w not in STOPWORDS and (len(w) > 1 or w.isdigit())}


def term_ranges(
    text: str, terms: Iterable[str], start: int = 0, end: int | None = None
) -> list[tuple[int, int]]:
    """``(start, end)`` of each word of ``text[start:end]`` that matches ``terms``."""
    from core.text import STOPWORDS

    wanted = set(terms)
    found: list[tuple[int, int]] = []
    for match in _WORD.finditer(text, start, len(text) if end is None else end):
        word = match.group(0)
        if word.casefold() not in STOPWORDS and term_key(word) in wanted:
            found.append((match.start(), match.end()))
    return found


def highlight_terms_html(text: str, terms: Iterable[str], palette: Palette) -> str:
    """``text`` escaped, with words matching ``terms`` (stem-insensitive) highlighted."""
    out: list[str] = []
    pos = 0
    for start, end in term_ranges(text, terms):
        out.append(html.escape(text[pos:start], quote=False))
        out.append(
            f'<span style="background-color:{palette.match}; font-weight:600;">'
            f"{html.escape(text[start:end], quote=False)}</span>"
        )
        pos = end
    out.append(html.escape(text[pos:], quote=False))
    return "".join(out)


def markdown_as_read(text: str) -> str:
    """A Markdown passage as it reads: the words without their markup (``**``, ``#``,
    link targets, table pipes). Qt's own Markdown reader, as the evidence panel renders
    it, so a card's snippet and the panel's text agree."""
    from desktop.qt import QTextDocument

    document = QTextDocument()
    document.setMarkdown(text, QTextDocument.MarkdownFeature.MarkdownDialectGitHub)
    return document.toPlainText()


def snippet(text: str, terms: Iterable[str], limit: int = 420) -> str:
    """A window of ``text`` around its first matching word, on word boundaries."""
    flat = " ".join(text.split())
    if len(flat) <= limit:
        return flat
    matches = term_ranges(flat, terms)
    first = matches[0][0] if matches else 0
    start = max(0, first - limit // 4)
    if start:
        space = flat.find(" ", start)
        start = space + 1 if 0 <= space < first else start
    end = min(len(flat), start + limit)
    if end < len(flat):
        space = flat.rfind(" ", start, end)
        end = space if space > start else end
    return ("…" if start else "") + flat[start:end] + ("…" if end < len(flat) else "")


# --- copying ----------------------------------------------------------------------------


def turn_markdown(turn: TurnView) -> str:
    """The answer with its citations, as Markdown a person can paste anywhere."""
    from core.citation_marks import parse_citations

    lines = [f"**Question:** {turn.question.strip()}", "", turn.answer.strip()]
    cited = sorted(turn.cited_numbers) or sorted(
        {n for ref in parse_citations(turn.answer) for n in ref.numbers}
    )
    if cited:
        lines += ["", "**Sources**", ""]
        for n in cited:
            source = turn.source(n)
            if source is None:
                continue
            citation = turn.citation_for(n)
            quote = " ".join((citation.quote if citation else "").split())
            place = (citation.location if citation else "") or source.location
            where = source.path + (f", {place}" if place else "")
            line = f"[{n}] {source.display_name} — {where}"
            if quote:
                line += f': "{quote}"'
            lines.append(line)
    if turn.mode == "extractive":
        lines += ["", "_Extracted from the documents; no language model wrote this answer._"]
    return "\n".join(lines).strip() + "\n"


def esc(text: str) -> str:
    return html.escape(text, quote=False)


def shorten(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def shorten_words(text: str, limit: int) -> str:
    """``text`` in at most ``limit`` characters, cut after a whole word with "…" (a cut
    inside a word, "Expense li…", reads as a typo); inside a word only when its first
    word alone is longer than the limit."""
    text = " ".join(text.split())
    if len(text) <= limit:
        return text
    cut = text[: limit - 1]
    # A break at a space or after a hyphen, slash or underscore, not in the first half.
    breaks = [i for i, c in enumerate(cut) if c in " -_/." and i >= len(cut) // 2]
    if breaks and text[len(cut)] not in " -_/.":
        cut = cut[: breaks[-1]]
    return cut.rstrip(" -_/.") + "…"


def count_of(n: int, noun: str, plural: str = "") -> str:
    """ "1 file", "3 files", "12 345 passages": counts as a person would write them
    (thousands set apart by a narrow space, which no locale misreads as a decimal)."""
    number = f"{n:,}".replace(",", "\u202f")
    return f"{number} {noun if n == 1 else plural or noun + 's'}"
