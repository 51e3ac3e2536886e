"""``lectern conversations``: list, search, show, rename and export the kept conversations.

``list`` and ``search`` print one line per conversation (``--json``: one JSON object);
``show`` prints one conversation's questions and answers, each with how it ended (a
stopped, failed or cut-off answer is kept with what it had) and one line for an answer
whose source file is gone; ``export`` writes Markdown with the cited passages to a file
(``-o``) or standard output.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from core.app import ops
from core.cli.terminal import printable, printable_lines
from core.records import Conversation, Turn, TurnState

Handler = Callable[[argparse.Namespace], int]


def register(subparsers: Any) -> dict[str, Handler]:
    p = subparsers.add_parser(
        "conversations", help="list, search, rename or export kept conversations"
    )
    actions = p.add_subparsers(dest="action", required=True)

    q = actions.add_parser("list", help="the conversations, most recent first")
    q.add_argument("--json", action="store_true")

    q = actions.add_parser("search", help="conversations whose title, questions or answers match")
    q.add_argument("query", help="words that must all occur in the conversation")
    q.add_argument("--json", action="store_true")

    q = actions.add_parser("show", help="a conversation's questions and answers")
    q.add_argument("id", type=int, help="the conversation's id (see `conversations list`)")
    q.add_argument("--json", action="store_true")

    q = actions.add_parser("rename", help="give a conversation a new title")
    q.add_argument("id", type=int, help="the conversation's id (see `conversations list`)")
    q.add_argument("title", help="the new title")
    q.add_argument("--json", action="store_true")

    q = actions.add_parser("export", help="a conversation as Markdown with the cited passages")
    q.add_argument("id", type=int, help="the conversation's id (see `conversations list`)")
    q.add_argument(
        "-o",
        "--output",
        metavar="FILE",
        help="write to FILE (a folder: a file named after the title in it); "
        "default standard output",
    )
    return {"conversations": cmd_conversations}


def _record(conversation: Conversation) -> dict[str, object]:
    return {
        "id": conversation.id,
        "title": conversation.title,
        "created_at": conversation.created_at.isoformat() if conversation.created_at else None,
        "questions": conversation.turn_count,
    }


def _line(conversation: Conversation) -> str:
    when = conversation.created_at.strftime("%Y-%m-%d %H:%M") if conversation.created_at else ""
    count = conversation.turn_count
    return (
        f"{conversation.id:>5}  {when:16}  {printable(conversation.title)}  "
        f"({count} question{'' if count == 1 else 's'})"
    )


def cmd_conversations(args: argparse.Namespace) -> int:
    from core.cli.common import open_reader

    if args.action == "rename":
        return _rename(args)
    # Reading is answered by the running Lectern beside `lectern watch` or the app, as
    # `search` is (core/ipc/); only a rename needs the library to itself.
    library = open_reader()
    try:
        if args.action == "list":
            found = library.conversations.list(limit=1_000_000)
            if args.json:
                print(json.dumps({"conversations": [_record(c) for c in found]}))
            elif not found:
                print("No conversations yet. Ask one with: lectern ask QUESTION")
            else:
                print("\n".join(_line(c) for c in found))
        elif args.action == "search":
            matches = library.conversations.search(args.query)
            if args.json:
                print(
                    json.dumps(
                        {
                            "query": args.query,
                            "conversations": [
                                {
                                    **_record(m.conversation),
                                    "matched_in": m.matched_in,
                                    "turn": m.turn_id,
                                    "snippet": m.snippet,
                                }
                                for m in matches
                            ],
                        }
                    )
                )
            elif not matches:
                print("No conversations match.")
            else:
                for m in matches:
                    print(_line(m.conversation))
                    print(f"       {m.matched_in}: {printable(m.snippet)}")
        elif args.action == "show":
            _show(library, args)
        else:
            return _export(library, args)
    finally:
        library.close()
    return 0


def _rename(args: argparse.Namespace) -> int:
    from core.cli.common import open_library

    library = open_library()
    try:
        renamed = ops.rename_conversation(args.id, args.title).run(library).value
        print(json.dumps(_record(renamed)) if args.json else f"Renamed: {_line(renamed)}")
    finally:
        library.close()
    return 0


# Notes a turn's state already says, in other words.
_STATE_KINDS = {TurnState.STOPPED: "cancelled", TurnState.FAILED: "failed"}


def _show(library: Any, args: argparse.Namespace) -> None:
    from core.store.redaction import removed_files, shown_answer

    conversation = library.conversations.require(args.id)
    turns: list[Turn] = library.conversations.turns(args.id)
    if args.json:
        record = {**_record(conversation), "turns": [t.to_json() for t in turns]}
        print(json.dumps(record))
        return
    print(_line(conversation))
    for number, turn in enumerate(turns, 1):
        print(f"\nQ{number}: {printable(turn.question)}")
        names, returns = removed_files(turn.sources)
        answer, missing = shown_answer(turn.answer, names, returns=returns)
        if answer.strip():
            print(printable_lines(answer))
        if missing:
            print(f"({printable(missing)})")
        said = _STATE_KINDS.get(turn.state)
        notes = [str(w.get("message") or "") for w in turn.warnings if w.get("kind") == said]
        if turn.state_note:
            print(f"[{printable(notes[0] if notes and notes[0] else turn.state_note)}]")
        for warning in turn.warnings:
            if warning.get("kind") != said and warning.get("message"):
                print(f"Note: {printable(str(warning['message']))}")
        sources = _source_lines(turn)
        if sources:
            print("Sources:\n" + "\n".join(sources))


def _source_lines(turn: Turn) -> list[str]:
    cited = {c.get("n") for c in turn.citations}
    lines = []
    for source in turn.sources:
        n = source.get("n")
        if cited and n not in cited:
            continue
        where = Path(str(source.get("document") or "")).name
        page = source.get("page")
        if page:
            where += f" · p. {page}"
        gone = " (gone from the library)" if source.get("removed") else ""
        lines.append(f"  [{n}] {printable(where)}{gone}")
    return lines


def _export(library: Any, args: argparse.Namespace) -> int:
    from core.store.export import export_file_name, write_export

    text = library.conversations.export(args.id)
    if args.output is None:
        # On a terminal the passages' own control characters are escaped; into a pipe
        # or a file the Markdown goes as written.
        sys.stdout.write(printable_lines(text) if sys.stdout.isatty() else text)
        return 0
    target = Path(args.output).expanduser()
    if target.is_dir():
        target = target / export_file_name(library.conversations.require(args.id).title)
    written = write_export(target, text)
    print(f"Exported conversation {args.id} to {written}", file=sys.stderr)
    return 0
