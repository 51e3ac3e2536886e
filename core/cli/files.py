"""``lectern files``: every file of the library with its state, pages, passages and when it
was last indexed, failed and skipped first (the desktop app's file list, headless).

With ``--json`` the last line of standard output is one JSON object: ``files`` (one object
per file, ``FileEntry.to_json``) and ``counts`` (files per status).
"""

from __future__ import annotations

import argparse
import json
import time
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

from core.cli.terminal import printable
from core.records import FILE_STATUSES, FileEntry

Handler = Callable[[argparse.Namespace], int]


def register(subparsers: Any) -> dict[str, Handler]:
    p = subparsers.add_parser(
        "files",
        help="every file with its state, pages and passages; failed and skipped first",
    )
    p.add_argument(
        "--state",
        choices=[s.replace(" ", "-") for s in FILE_STATUSES],
        help="only files in this state (indexed includes keyword-only)",
    )
    p.add_argument("--folder", help="only the files of this library folder")
    p.add_argument("--json", action="store_true", help="print one JSON object as the last line")
    return {"files": cmd_files}


def cmd_files(args: argparse.Namespace) -> int:
    from core.cli.common import open_reader

    library = open_reader()
    try:
        status = args.state.replace("-", " ") if args.state else None
        entries = library.files.file_list(folder=args.folder, status=status)
    finally:
        library.close()
    counts = Counter(e.status for e in entries)
    if args.json:
        print(
            json.dumps(
                {
                    "files": [e.to_json() for e in entries],
                    "counts": {s: counts.get(s, 0) for s in FILE_STATUSES},
                }
            )
        )
        return 0
    if not entries:
        print(
            "No files match."
            if status or args.folder
            else "No files yet. Add a folder with: lectern index FOLDER"
        )
        return 0
    print("\n".join(file_lines(entries)))
    return 0


def empty_files_line(count: int) -> str:
    """Empty files in one line of `lectern index` or `lectern watch`, however many (a
    thousand were a thousand "failed" lines); this command lists each."""
    files = "1 empty file" if count == 1 else f"{count:,} empty files"
    return f"{files} skipped (nothing to index; `lectern files --state skipped` lists them)"


def file_lines(entries: Sequence[FileEntry]) -> list[str]:
    """One line per file (state, pages, passages, when indexed, path and reason), then a
    total by state. Names and reasons are shown escaped where they hold control or bidi
    characters (core/cli/terminal.py): a file name must not break its line or reorder it."""
    lines = [f"{'STATE':<13} {'PAGES':>5} {'PASSAGES':>8}  {'INDEXED':<16}  FILE"]
    for e in entries:
        when = (
            time.strftime("%Y-%m-%d %H:%M", time.localtime(e.indexed_at)) if e.indexed_at else "-"
        )
        pages = str(e.pages) if e.pages else "-"
        passages = str(e.passages) if e.passages or e.state.value == "indexed" else "-"
        note = e.reason
        if e.keyword_only:
            note = "; ".join(
                x for x in (note, f"{e.keyword_only} by keyword only until embedded") if x
            )
        if e.ocr:
            note = "; ".join(x for x in (note, "read by OCR") if x)
        lines.append(
            f"{e.status:<13} {pages:>5} {passages:>8}  {when:<16}  {printable(e.path)}"
            + (f": {printable(note)}" if note else "")
        )
    counts = Counter(e.status for e in entries)
    tally = ", ".join(f"{counts[s]} {s}" for s in FILE_STATUSES if counts.get(s))
    lines.append(f"{len(entries)} file{'s' if len(entries) != 1 else ''}: {tally}")
    return lines
