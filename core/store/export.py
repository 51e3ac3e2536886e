"""A conversation as a Markdown file a person can keep, send or print.

Each question is a section with its answer as it was written (the ``[n]`` citation
markers kept), then the passages the answer cites: each quoted with ``>``, in the words
the app's quote box shows for it (the supporting span of the citation, or the whole
passage where the answer cites one without a verified span), with the file name, the
place in the file and a ``file://`` link to open it. An answer extracted from the
documents without a model, an answer cut short and one the documents could not give
say so in a note, as the app does beside them.
"""

from __future__ import annotations

import errno
import os
import re
import unicodedata
from collections.abc import Mapping, Sequence
from datetime import datetime
from pathlib import Path, PurePath
from typing import Any

from core.errors import ExportError
from core.private import write_private
from core.records import Conversation, Turn, location_label

# The names Windows keeps for devices: a file called "con.md" cannot be made there.
_RESERVED = {"con", "prn", "aux", "nul"} | {f"{p}{i}" for p in ("com", "lpt") for i in range(10)}
_UNSAFE = re.compile(r'[<>:"/\\|?*\x00-\x1f\x7f]')
_LEADING_MARK = re.compile(r"^([#>])")
NAME_MAX_BYTES = 120  # far below any file system's 255, leaving room for " (2)" and more


def plain_quote(text: str) -> str:
    """Passage text as a quotation, as the evidence panel's quote box shows it: Markdown
    emphasis and list markers are not the words, and line breaks are the layout's."""
    text = re.sub(r"\*\*|__|`", "", text)
    text = re.sub(r"(?m)^\s*(?:[-*•]|\d{1,3}[.)])\s+", "", text)
    return " ".join(text.split())


def export_file_name(title: str, suffix: str = ".md") -> str:
    """A file name for ``title`` that every common file system accepts."""
    text = unicodedata.normalize("NFC", title)
    text = _UNSAFE.sub(" ", text.replace("…", ""))
    text = " ".join(text.split()).strip(" .")
    while len(text.encode("utf-8")) > NAME_MAX_BYTES:
        text = text[:-1]
    text = text.rstrip(" .")
    if not text or text.split(".")[0].casefold() in _RESERVED:
        text = f"Conversation {text}".strip()
    return text + suffix


def _where(source: Mapping[str, Any], page: int | None, spans: bool) -> str:
    """The place in the file, in its own terms: "page 3", "slide 2", "Budget, row 12"."""
    kind = str(source.get("type") or "")
    headings = tuple(str(h) for h in source.get("heading_path") or ())
    if spans:
        return location_label(kind, page, None, headings)
    return location_label(kind, source.get("page"), source.get("page_end"), headings)


def _link(path: str, kind: str, page: int | None) -> str:
    if not path or not os.path.isabs(path):
        return ""
    uri = PurePath(path).as_uri()
    # PDF viewers (browsers, Okular, Evince, Preview) open a #page=N fragment at that page.
    return f"{uri}#page={page}" if kind == "pdf" and page else uri


def cited_numbers(answer: str, citations: Sequence[Mapping[str, Any]]) -> list[int]:
    """The sources an answer cites, in the order they first appear in it."""
    # core's own parser, so the export, the app and the checker agree on what a citation is.
    from core.citation_marks import parse_citations

    order: list[int] = []
    for ref in parse_citations(answer):
        for n in ref.numbers:
            if n not in order:
                order.append(n)
    for citation in citations:
        n = int(citation.get("n") or 0)
        if n and n not in order:
            order.append(n)
    return order


def _quotes(n: int, turn: Turn) -> list[tuple[str, int | None, bool]]:
    """What the quote box shows for each citation of source ``n``: (text, page, whether
    it is a span inside the passage). Repeats of one span are kept once."""
    found: list[tuple[str, int | None, bool]] = []
    for citation in turn.citations:
        if int(citation.get("n") or 0) != n:
            continue
        spans = [s for s in citation.get("spans") or [] if isinstance(s, Mapping)]
        text = plain_quote(" ".join(str(s.get("text") or "") for s in spans))
        if not text:
            continue
        page = spans[0].get("page") if spans else citation.get("page")
        entry = (text, int(page) if page is not None else None, True)
        if all(entry[0] != f[0] for f in found):
            found.append(entry)
    return found


def _source(turn: Turn, n: int) -> Mapping[str, Any] | None:
    return next((s for s in turn.sources if int(s.get("n") or 0) == n), None)


def _notes(turn: Turn) -> list[str]:
    notes = []
    if turn.mode == "extractive":
        notes.append(
            "Extracted from the documents: these sentences are quoted from them; no "
            "language model wrote this answer."
        )
    elif turn.mode == "declined":
        notes.append("Not found in the documents.")
    for warning in turn.warnings:
        message = " ".join(str(warning.get("message") or "").split())
        if message and message not in notes:
            notes.append(message)
    return notes


def _blockquote(text: str) -> str:
    # A passage from a Markdown file may start with its heading's "#": shown, as in the
    # quote box, not made a heading inside the quote.
    lines = [_LEADING_MARK.sub(r"\\\1", line) for line in text.splitlines()]
    return "\n".join(f"> {line}" if line else ">" for line in lines)


def turn_markdown(turn: Turn, number: int) -> str:
    question = " ".join(turn.question.split())
    lines = [f"## {number}. {question}", ""]
    answer = turn.answer.strip()
    lines += [answer if answer else "_No answer was written._", ""]
    for note in _notes(turn):
        lines += [f"*Note: {note}*", ""]
    cited = [n for n in cited_numbers(answer, turn.citations) if _source(turn, n) is not None]
    if not cited:
        return "\n".join(lines)
    lines += ["### Sources", ""]
    for n in cited:
        source = _source(turn, n)
        assert source is not None
        path = str(source.get("document") or "")
        kind = str(source.get("type") or "")
        name = os.path.basename(path) or path or "(unknown file)"
        title = " ".join(str(source.get("title") or "").split())
        quotes = _quotes(n, turn)
        if not quotes:
            whole = plain_quote(str(source.get("text") or ""))
            page = source.get("page")
            quotes = [(whole, int(page) if page is not None else None, False)] if whole else []
        first_page = quotes[0][1] if quotes else source.get("page")
        place = _where(source, first_page, bool(quotes and quotes[0][2]))
        link = _link(path, kind, first_page)
        lines.append(
            f"**[{n}] {name}**"
            + (f", {place}" if place else "")
            + (f" ({title})" if title and title != name else "")
            + (f" · [open]({link.replace(')', '%29')})" if link else "")
        )
        lines.append("")
        if source.get("removed") or not quotes:
            lines += ["_The passage is gone: its file was removed from the library._", ""]
            continue
        for text, page, is_span in quotes:
            other = page is not None and page != first_page
            if other:
                lines += [f"{_where(source, page, is_span)}:", ""]
            lines += [_blockquote(text), ""]
    return "\n".join(lines)


def conversation_markdown(
    conversation: Conversation, turns: Sequence[Turn], *, exported_at: datetime | None = None
) -> str:
    """The whole conversation as Markdown (see the module docstring)."""
    when = (exported_at or datetime.now()).strftime("%d %B %Y, %H:%M")
    count = len(turns)
    head = [
        f"# {' '.join(conversation.title.split()) or 'Untitled'}",
        "",
        f"*Exported from Lectern on {when} · {count} question{'' if count == 1 else 's'}*",
        "",
    ]
    body = [turn_markdown(turn, i) for i, turn in enumerate(turns, 1)]
    return "\n".join([*head, *body]).rstrip() + "\n"


def write_export(path: str | Path, text: str) -> Path:
    """Write ``text`` to ``path`` whole or not at all (a full disk leaves no half file
    over an older export); a failure is an :class:`ExportError` in plain words."""
    target = Path(path).expanduser()
    try:
        if target.is_dir():
            raise IsADirectoryError(errno.EISDIR, "is a folder", str(target))
        # Through a temporary no one can guess or plant a link at (the folder may be a
        # shared one like /tmp); the export is 0600, as private as the conversation.
        write_private(target, text)
    except OSError as exc:
        raise _export_error(target, exc) from exc
    return target


def _export_error(target: Path, exc: OSError) -> ExportError:
    name, folder = target.name, str(target.parent)
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return ExportError(
            f"{name} could not be saved: the disk is full.",
            "Free some space, or choose a folder on another disk.",
        )
    if isinstance(exc, PermissionError) or exc.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
        return ExportError(f"{name} could not be saved: the folder {folder} cannot be written to.")
    if isinstance(exc, FileNotFoundError):
        return ExportError(f"{name} could not be saved: the folder {folder} does not exist.")
    if isinstance(exc, IsADirectoryError):
        return ExportError(f"{name} could not be saved: a folder has that name.")
    reason = exc.strerror or str(exc)
    return ExportError(f"{name} could not be saved: {reason[:1].lower()}{reason[1:]}.")
