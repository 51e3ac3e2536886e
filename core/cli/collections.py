"""``lectern collection``: named groups of library folders, to keep a search or a question to.

    lectern collection create Papers ~/papers ~/reading
    lectern collection add Papers ~/more-papers
    lectern collection remove Papers ~/reading
    lectern collection rename Papers Research
    lectern collection list [--json]
    lectern collection delete Research

``lectern search`` and ``lectern ask`` take ``--collection NAME`` (repeatable). Errors
(an unknown collection, a folder outside the library) are LecternErrors: core/cli/main.py
prints their message and hint and exits with its error status.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from typing import Any

from core.app import ops
from core.cli.common import open_library, open_reader
from core.cli.terminal import printable
from core.records import Collection, Scope

Handler = Callable[[argparse.Namespace], int]


def add_scope_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--collection",
        action="append",
        metavar="NAME",
        help="only the folders of this collection (repeatable; see `lectern collection list`)",
    )


def scope_from_args(args: argparse.Namespace) -> Scope | None:
    """The scope that ``--collection``, ``--folder`` and ``--type`` ask for; None when
    none is given (``ask`` then keeps the conversation's saved scope)."""
    collections = tuple(getattr(args, "collection", None) or ())
    folders = tuple(getattr(args, "folder", None) or ())
    types = tuple(getattr(args, "type", None) or ())
    scope = Scope(collections, folders, types)
    return scope or None


def register(subparsers: Any) -> dict[str, Handler]:
    p = subparsers.add_parser("collection", help="named groups of folders to search in")
    actions = p.add_subparsers(dest="action", required=True)
    a = actions.add_parser("create", help="make a collection, optionally with folders")
    a.add_argument("name")
    a.add_argument("folders", nargs="*", help="library folders (or folders inside them)")
    a = actions.add_parser("add", help="add library folders to a collection")
    a.add_argument("name")
    a.add_argument("folders", nargs="+")
    a = actions.add_parser("remove", help="take folders out of a collection (not the library)")
    a.add_argument("name")
    a.add_argument("folders", nargs="+")
    a = actions.add_parser("rename", help="rename a collection")
    a.add_argument("name")
    a.add_argument("new_name")
    a = actions.add_parser("delete", help="delete a collection (its folders stay in the library)")
    a.add_argument("name")
    a = actions.add_parser("list", help="the collections and their folders")
    a.add_argument("--json", action="store_true")
    return {"collection": cmd_collection}


def _line(collection: Collection, library_folders: list[str]) -> list[str]:
    n = len(collection.folders)
    # Names and folders escaped (core/cli/terminal.py), as every name shown.
    lines = [f"{printable(collection.name)} ({n} folder{'' if n == 1 else 's'})"]
    for folder in collection.folders:
        inside = any(
            folder == f or folder.startswith(f.rstrip("/\\") + "/") for f in library_folders
        )
        lines.append(f"  {printable(folder)}" + ("" if inside else "  (not in the library now)"))
    return lines


def _count(collection: Collection) -> str:
    n = len(collection.folders)
    return f"{n} folder{'' if n == 1 else 's'}"


def cmd_collection(args: argparse.Namespace) -> int:
    if args.action == "list":
        reader = open_reader()
        try:
            status = reader.status()
        finally:
            reader.close()
        listed = status.get("collections")
        collections = [c for c in listed if isinstance(c, dict)] if isinstance(listed, list) else []
        if args.json:
            print(json.dumps({"collections": collections}))
            return 0
        if not collections:
            print("No collections yet. Make one with: lectern collection create NAME FOLDER")
            return 0
        folders = status.get("folders")
        library_folders = (
            [str(f["path"]) for f in folders if isinstance(f, dict)]
            if isinstance(folders, list)
            else []
        )
        for c in collections:
            record = Collection(str(c["name"]), tuple(str(f) for f in c.get("folders", [])))
            print("\n".join(_line(record, library_folders)))
        return 0
    library = open_library()
    try:
        if args.action == "create":
            made = ops.create_collection(args.name, args.folders).run(library).value
            print(f"Created the collection “{printable(made.name)}” ({_count(made)}).")
        elif args.action == "add":
            changed = ops.add_to_collection(args.name, args.folders).run(library).value
            print(f"“{printable(changed.name)}” now holds {_count(changed)}.")
        elif args.action == "remove":
            changed = ops.remove_from_collection(args.name, args.folders).run(library).value
            print(f"“{printable(changed.name)}” now holds {_count(changed)}.")
        elif args.action == "rename":
            renamed = ops.rename_collection(args.name, args.new_name).run(library).value
            print(f"Renamed to “{printable(renamed.name)}”.")
        elif args.action == "delete":
            ops.delete_collection(args.name).run(library)
            print(
                f"Deleted the collection “{printable(args.name)}”; its folders stay in the library."
            )
    finally:
        library.close()
    return 0
