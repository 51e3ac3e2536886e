"""A copy of what cannot be rebuilt from the files, kept outside the database.

Folders and conversations are the part of the record a person cannot get back by
re-indexing. They are copied here, one small JSON file per conversation, each written to a
temporary name and renamed over the old one, so a damaged database file cannot take them
down with it: a library rebuilt from a damaged file gets them back (see
``core/store/recovery.py``).
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)


def write_atomically(path: Path, data: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", encoding="utf-8") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)


class RecordBackup:
    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self._conversations = folder / "conversations"

    @property
    def folders_path(self) -> Path:
        return self.folder / "folders.json"

    def exists(self) -> bool:
        return self.folders_path.exists()

    def save_folders(self, folders: Sequence[str]) -> None:
        self._write(self.folders_path, {"folders": list(folders)})

    @property
    def collections_path(self) -> Path:
        return self.folder / "collections.json"

    def save_collections(self, collections: Sequence[dict[str, Any]]) -> None:
        """Collections are named by a person, like folders: kept here too."""
        self._write(self.collections_path, {"collections": list(collections)})

    def load_collections(self) -> list[dict[str, Any]]:
        data = self._read(self.collections_path) if self.collections_path.exists() else None
        found = data.get("collections") if isinstance(data, dict) else None
        return [c for c in found if isinstance(c, dict)] if isinstance(found, list) else []

    def save_conversation(self, conversation: dict[str, Any]) -> None:
        self._write(self._conversations / f"{int(conversation['id'])}.json", conversation)

    def remove_conversation(self, conversation_id: int) -> None:
        try:
            (self._conversations / f"{int(conversation_id)}.json").unlink(missing_ok=True)
        except OSError as exc:
            log.warning("backup of conversation %s not removed: %s", conversation_id, exc)

    def clear_conversations(self) -> None:
        if self._conversations.is_dir():
            for path in self._conversations.glob("*.json"):
                path.unlink(missing_ok=True)

    def load_folders(self) -> list[str]:
        data = self._read(self.folders_path)
        folders = data.get("folders") if isinstance(data, dict) else None
        return [f for f in folders if isinstance(f, str)] if isinstance(folders, list) else []

    def unreadable(self) -> list[Path]:
        """The backup's files that cannot be read back (cut short, garbled): a backup
        that only looks complete would restore nothing after damage to the database."""
        paths = [self.folders_path, self.collections_path]
        if self._conversations.is_dir():
            paths.extend(sorted(self._conversations.glob("*.json")))
        bad = []
        for path in paths:
            if not path.exists():
                continue
            try:
                json.loads(path.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                bad.append(path)
        return bad

    def load_conversations(self) -> list[dict[str, Any]]:
        """Every readable conversation, oldest first; an unreadable file is skipped."""
        if not self._conversations.is_dir():
            return []
        found = []
        for path in self._conversations.glob("*.json"):
            data = self._read(path)
            if isinstance(data, dict) and isinstance(data.get("turns"), list):
                found.append(data)
        return sorted(found, key=lambda c: (str(c.get("created_at") or ""), int(c.get("id", 0))))

    def _write(self, path: Path, data: object) -> None:
        # A copy that cannot be written (a full disk) must not fail what the user did;
        # the next change writes it again.
        try:
            write_atomically(path, json.dumps(data, default=str))
        except OSError as exc:
            log.warning("backup %s not written: %s", path, exc)

    @staticmethod
    def _read(path: Path) -> object:
        try:
            return json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            log.warning("backup %s unreadable: %s", path, exc)
            return None
