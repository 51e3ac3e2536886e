"""Collections (named groups of library folders) and each conversation's scope.

Made by migration 6: ``collections`` (name unique), ``collection_folders`` (which folders
a collection holds) and ``conversation_scopes`` (a conversation's :class:`Scope` as JSON).
A collection keeps a folder even after the folder leaves the library: it then contributes
nothing (see ``CollectionStore.filters_for``), and comes back if the folder is added
again. Names are unique regardless of case, so "Papers" and "papers" are never two
collections. Every change is copied to the backup (core/store/backup.py).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import duckdb

from core.errors import CollectionError, CollectionNotFoundError
from core.records import Collection, Scope, SearchFilters
from core.store.backup import RecordBackup
from core.store.db import Database
from core.store.paths import normalize_folder

MAX_NAME = 80


def clean_name(name: str) -> str:
    """The name as stored: one line, spaces collapsed; refused when empty or too long."""
    cleaned = " ".join(str(name).split())
    if not cleaned:
        raise CollectionError("A collection needs a name.", "Type a name, such as Papers.")
    if len(cleaned) > MAX_NAME:
        raise CollectionError(
            f"A collection's name can be at most {MAX_NAME} characters.", "Choose a shorter name."
        )
    return cleaned


def not_found(name: str) -> CollectionNotFoundError:
    return CollectionNotFoundError(f"There is no collection “{name}” (it may have been deleted).")


def _in_library(folder: str, library: Sequence[str]) -> bool:
    return any(folder == f or folder.startswith(f.rstrip(os.sep) + os.sep) for f in library)


class CollectionStore:
    """``library_folders``: the library's folders now, which a collection's folders must
    be (or be inside) when added, and which a scope's search is kept to."""

    def __init__(
        self,
        db: Database,
        backup: RecordBackup,
        library_folders: Callable[[], Sequence[str]],
    ) -> None:
        self._db = db
        self._backup = backup
        self._library_folders = library_folders

    # --- reading ---------------------------------------------------------------------

    def all(self) -> list[Collection]:
        cur = self._db.cursor()
        rows = cur.execute(
            "SELECT c.id, c.name, c.created_at FROM collections c ORDER BY lower(c.name)"
        ).fetchall()
        folders: dict[int, list[str]] = {}
        for cid, folder in cur.execute(
            "SELECT collection_id, folder FROM collection_folders ORDER BY folder"
        ).fetchall():
            folders.setdefault(int(cid), []).append(str(folder))
        return [Collection(str(r[1]), tuple(folders.get(int(r[0]), ())), r[2]) for r in rows]

    def get(self, name: str) -> Collection | None:
        wanted = " ".join(str(name).split()).lower()
        return next((c for c in self.all() if c.name.lower() == wanted), None)

    def _id(self, cur: duckdb.DuckDBPyConnection, name: str) -> tuple[int, str]:
        row = cur.execute(
            "SELECT id, name FROM collections WHERE lower(name) = lower(?)",
            [" ".join(str(name).split())],
        ).fetchone()
        if row is None:
            raise not_found(name)
        return int(row[0]), str(row[1])

    def document_types(self) -> list[str]:
        """The file types of the indexed documents, for choosing a scope."""
        rows = (
            self._db.cursor()
            .execute(
                "SELECT DISTINCT lower(type) FROM documents "
                "WHERE state = 'indexed' AND coalesce(type, '') <> '' ORDER BY 1"
            )
            .fetchall()
        )
        return [str(r[0]) for r in rows]

    def filters_for(self, scope: Scope) -> SearchFilters | None:
        """The search filters for ``scope``; None when it leaves nothing to search (its
        collections' and folders' folders have all left the library). A collection that
        does not exist raises CollectionNotFoundError: a conversation kept to a deleted
        collection says so rather than searching everything."""
        if not scope:
            return SearchFilters()
        library = self._library_folders()
        wanted: list[str] = []
        if scope.collections:
            known = {c.name.lower(): c for c in self.all()}
            for name in scope.collections:
                found = known.get(name.lower())
                if found is None:
                    raise not_found(name)
                wanted.extend(found.folders)
        wanted.extend(normalize_folder(f) for f in scope.folders)
        kept = tuple(dict.fromkeys(f for f in wanted if _in_library(f, library)))
        if (scope.collections or scope.folders) and not kept:
            return None
        return SearchFilters(kept, tuple(dict.fromkeys(t.lower() for t in scope.types)))

    # --- writing ---------------------------------------------------------------------

    def _in_the_library(self, folders: Sequence[str | Path]) -> list[str]:
        """``folders`` normalised; each must be a library folder or inside one."""
        library = self._library_folders()
        chosen = [normalize_folder(f) for f in folders]
        for folder in chosen:
            if not _in_library(folder, library):
                raise CollectionError(
                    f"{folder} is not in the library.",
                    "Add the folder to the library first (`lectern index FOLDER`, or "
                    "Add folder… in the app), then to the collection.",
                )
        return chosen

    def back_up_all(self) -> None:
        self._backup.save_collections([c.to_json() for c in self.all()])

    def restore(self, saved: Sequence[dict[str, Any]]) -> None:
        """Into a library rebuilt after damage: the collections it lost, from the backup
        (their folders as they were: the library's own come back beside them)."""
        for entry in saved:
            name, folders = entry.get("name"), entry.get("folders")
            if not isinstance(name, str) or self.get(name) is not None:
                continue
            kept = [f for f in folders if isinstance(f, str)] if isinstance(folders, list) else []
            try:
                self._create(name, kept)
            except CollectionError:
                continue  # a name the store no longer takes: the rest still come back

    def create(self, name: str, folders: Sequence[str | Path] = ()) -> Collection:
        made = self._create(name, self._in_the_library(folders))
        self.back_up_all()
        return made

    def _create(self, name: str, folders: Sequence[str]) -> Collection:
        name = clean_name(name)
        with self._db.transaction() as cur:
            taken = cur.execute(
                "SELECT name FROM collections WHERE lower(name) = lower(?)", [name]
            ).fetchone()
            if taken is not None:
                raise CollectionError(
                    f"There is already a collection “{taken[0]}”.",
                    "Choose another name, or add folders to that one.",
                )
            row = cur.execute(
                "INSERT INTO collections(name) VALUES (?) RETURNING id", [name]
            ).fetchone()
            assert row is not None
            self._add(cur, int(row[0]), folders)
        found = self.get(name)
        assert found is not None
        return found

    def rename(self, old: str, new: str) -> Collection:
        """Rename, and rewrite the saved scopes that name it (they keep their meaning)."""
        new = clean_name(new)
        with self._db.transaction() as cur:
            cid, current = self._id(cur, old)
            taken = cur.execute(
                "SELECT name FROM collections WHERE lower(name) = lower(?) AND id <> ?",
                [new, cid],
            ).fetchone()
            if taken is not None:
                raise CollectionError(
                    f"There is already a collection “{taken[0]}”.", "Choose another name."
                )
            cur.execute("UPDATE collections SET name = ? WHERE id = ?", [new, cid])
            for conversation_id, raw in cur.execute(
                "SELECT conversation_id, scope FROM conversation_scopes"
            ).fetchall():
                scope = Scope.from_json(json.loads(raw or "{}"))
                if any(c.lower() == current.lower() for c in scope.collections):
                    renamed = tuple(
                        new if c.lower() == current.lower() else c for c in scope.collections
                    )
                    self._save_scope(
                        cur, int(conversation_id), Scope(renamed, scope.folders, scope.types)
                    )
        found = self.get(new)
        assert found is not None
        self.back_up_all()
        return found

    def delete(self, name: str) -> None:
        """Delete the collection (never its folders or files). Scopes naming it keep the
        name, so a conversation that searched it says it is gone instead of quietly
        searching everything."""
        with self._db.transaction() as cur:
            cid, _ = self._id(cur, name)
            cur.execute("DELETE FROM collection_folders WHERE collection_id = ?", [cid])
            cur.execute("DELETE FROM collections WHERE id = ?", [cid])
        self.back_up_all()

    def add_folders(self, name: str, folders: Sequence[str | Path]) -> Collection:
        chosen = self._in_the_library(folders)
        with self._db.transaction() as cur:
            cid, current = self._id(cur, name)
            self._add(cur, cid, chosen)
        found = self.get(current)
        assert found is not None
        self.back_up_all()
        return found

    def remove_folders(self, name: str, folders: Sequence[str | Path]) -> Collection:
        """Any folder may be taken out, in the library or not (one that left it)."""
        with self._db.transaction() as cur:
            cid, current = self._id(cur, name)
            for folder in folders:
                cur.execute(
                    "DELETE FROM collection_folders WHERE collection_id = ? AND folder = ?",
                    [cid, normalize_folder(folder)],
                )
        found = self.get(current)
        assert found is not None
        self.back_up_all()
        return found

    @staticmethod
    def _add(cur: duckdb.DuckDBPyConnection, cid: int, folders: Sequence[str]) -> None:
        for folder in dict.fromkeys(folders):
            cur.execute(
                "INSERT INTO collection_folders(collection_id, folder) VALUES (?, ?) "
                "ON CONFLICT DO NOTHING",
                [cid, folder],
            )

    # --- conversation scopes -----------------------------------------------------------

    def scope(self, conversation_id: int) -> Scope:
        row = (
            self._db.cursor()
            .execute(
                "SELECT scope FROM conversation_scopes WHERE conversation_id = ?",
                [conversation_id],
            )
            .fetchone()
        )
        return Scope.from_json(json.loads(row[0])) if row and row[0] else Scope()

    def set_scope(self, conversation_id: int, scope: Scope) -> None:
        with self._db.transaction() as cur:
            self._save_scope(cur, conversation_id, scope)

    @staticmethod
    def _save_scope(cur: duckdb.DuckDBPyConnection, conversation_id: int, scope: Scope) -> None:
        if not scope:  # "all documents" is the absence of a row
            cur.execute(
                "DELETE FROM conversation_scopes WHERE conversation_id = ?", [conversation_id]
            )
            return
        # (INSERT OR REPLACE: a delete and an insert of one key in one transaction can
        # trip DuckDB's constraint check.)
        cur.execute(
            "INSERT OR REPLACE INTO conversation_scopes(conversation_id, scope) VALUES (?, ?)",
            [conversation_id, json.dumps(scope.to_json())],
        )
