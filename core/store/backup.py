"""A copy of what cannot be rebuilt from the files, kept outside the database.

Folders and conversations are the part of the record a person cannot get back by
re-indexing. They are copied here, one small JSON file per conversation, each written to a
temporary name and renamed over the old one, so a damaged database file cannot take them
down with it: a library rebuilt from a damaged file gets them back (see
``core/store/recovery.py``).

A backup file that cannot be read whole (cut short, garbled, of the wrong shape) is the
only copy of whatever it still holds: it is moved to ``set-aside/`` under a time-stamped
name, never overwritten or deleted, before anything is written in its place, and the
person is told in one line (a RecoveryNotice). What can be read of a conversation is
given back: the turns before a cut, the well-typed turns of one whose shape is wrong.
"""

from __future__ import annotations

import json
import logging
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from core.private import make_private_dir, write_private
from core.records import RecoveryNotice, TurnState
from core.store.db import aside_name, local_time

log = logging.getLogger(__name__)

SET_ASIDE = "set-aside"
KEPT_HINT = "Nothing needs doing; the unreadable copy is kept in case it is needed."


def write_atomically(path: Path, data: str) -> None:
    make_private_dir(path.parent)
    write_private(path, data)


_DECODER = json.JSONDecoder()
_SPACE = re.compile(r"\s*")


@dataclass(frozen=True)
class ReadConversation:
    """What a conversation's backup file gave back: ``conversation`` (None when nothing
    of it could be read) and whether the file was whole."""

    conversation: dict[str, Any] | None
    whole: bool
    cut_short: bool = False  # the file ends early: turns after the cut are unknown
    turns_unread: int = 0  # turns present but not readable (not counting a cut)


@dataclass(frozen=True)
class DamagedCopy:
    """A conversation's backup file that could not be read whole, and where it was kept."""

    name: str
    conversation_id: int | None
    kept_at: str  # "" when it could not be moved (it is then never written over)
    read: bool  # any of it came back (a title, turns)
    turns_read: int
    cut_short: bool
    turns_unread: int


def _skip(text: str, pos: int) -> int:
    match = _SPACE.match(text, pos)
    return match.end() if match else pos


def _cut_list(text: str, pos: int) -> tuple[list[Any], int, bool]:
    """The items of the JSON list whose ``[`` is before ``pos``, decoded one at a time up
    to the first that does not decode (a cut); returns (items, position, complete)."""
    items: list[Any] = []
    pos = _skip(text, pos)
    if text.startswith("]", pos):
        return items, pos + 1, True
    while True:
        try:
            item, pos = _DECODER.raw_decode(text, _skip(text, pos))
        except ValueError:
            return items, pos, False
        items.append(item)
        pos = _skip(text, pos)
        if text.startswith(",", pos):
            pos += 1
        elif text.startswith("]", pos):
            return items, pos + 1, True
        else:
            return items, pos, False


def _cut_object(text: str) -> dict[str, Any]:
    """The members of a JSON object cut short (a backup file written in part), up to
    the cut; the ``turns`` list gives back each complete turn before it."""
    found: dict[str, Any] = {}
    pos = _skip(text, 0)
    if not text.startswith("{", pos):
        return found
    pos += 1
    while True:
        pos = _skip(text, pos)
        try:
            key, pos = _DECODER.raw_decode(text, pos)
        except ValueError:
            return found
        pos = _skip(text, pos)
        if not isinstance(key, str) or not text.startswith(":", pos):
            return found
        pos = _skip(text, pos + 1)
        if key == "turns" and text.startswith("[", pos):
            found[key], pos, complete = _cut_list(text, pos + 1)
            if not complete:
                return found
        else:
            try:
                value, pos = _DECODER.raw_decode(text, pos)
            except ValueError:
                return found
            if pos >= len(text.rstrip()) and not isinstance(value, dict | list | str):
                return found  # a number or word at the very end may itself be cut
            found[key] = value
        pos = _skip(text, pos)
        if not text.startswith(",", pos):
            return found
        pos += 1


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _read_turn(raw: object) -> tuple[dict[str, Any] | None, bool]:
    """A stored turn with its well-typed fields (others at their defaults), and whether
    it was whole; None without a question, which no turn lacks."""
    if not isinstance(raw, dict) or not isinstance(raw.get("question"), str):
        return None, False
    whole = True
    turn: dict[str, Any] = {"question": raw["question"]}
    if _is_int(raw.get("id")):
        turn["id"] = raw["id"]
    elif "id" in raw:
        whole = False
    texts: tuple[tuple[str, str | None], ...] = (
        ("standalone_question", None),
        ("answer", ""),
        ("mode", ""),
        ("created_at", None),
        ("state", TurnState.DONE),
    )
    for key, default in texts:
        value = raw.get(key, default)
        if value is not None and not isinstance(value, str):
            whole, value = False, default
        turn[key] = value
    if turn["state"] not in TurnState.ALL:
        whole, turn["state"] = False, TurnState.DONE
    for key in ("sources", "citations", "warnings"):
        items = raw.get(key, [])
        if not isinstance(items, list):
            whole, items = False, []
        kept = [item for item in items if isinstance(item, dict)]
        whole = whole and len(kept) == len(items)
        turn[key] = kept
    return turn, whole


def read_conversation(text: str, file_id: int | None) -> ReadConversation:
    """A conversation from the text of its backup file (``file_id``: the id its name
    says), as much of it as can be read: a file cut short gives back the turns before
    the cut, one of the wrong shape its well-typed turns."""
    try:
        data = json.loads(text)
        cut = False
    except ValueError:
        data, cut = _cut_object(text), True
    if not isinstance(data, dict):
        return ReadConversation(None, False)
    whole = not cut
    conversation_id = file_id if file_id is not None else data.get("id")
    if not _is_int(conversation_id) or data.get("id") != conversation_id:
        whole = False
    title = data.get("title")
    created = data.get("created_at")
    if title is not None and not isinstance(title, str):
        whole, title = False, None
    if created is not None and not isinstance(created, str):
        whole, created = False, None
    raw_turns = data.get("turns", [] if not cut else None)
    if not isinstance(raw_turns, list):
        whole, raw_turns = False, []
    turns, unread = [], 0
    for raw in raw_turns:
        turn, turn_whole = _read_turn(raw)
        whole = whole and turn_whole
        if turn is None:
            unread += 1
        else:
            turns.append(turn)
    if not _is_int(conversation_id) or (not turns and not title):
        return ReadConversation(None, whole, cut, unread)
    conversation = {
        "id": conversation_id,
        "title": title or turns[0]["question"],
        "created_at": created,
        "turns": turns,
    }
    return ReadConversation(conversation, whole, cut, unread)


def _file_id(path: Path) -> int | None:
    return int(path.stem) if path.stem.isdigit() else None


class RecordBackup:
    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self._conversations = folder / "conversations"
        # What could not be read whole, since the last ConversationStore.restore: the
        # store words its notice, knowing what of each conversation the library holds.
        self.damaged: list[DamagedCopy] = []
        # Said once, when the library opens (Library.recovery_notices).
        self.notices: list[RecoveryNotice] = []
        # Files that could not be set aside: never written over, the only copy of what
        # they hold.
        self._held: set[Path] = set()

    @property
    def set_aside_folder(self) -> Path:
        return self.folder / SET_ASIDE

    def take_notices(self) -> list[RecoveryNotice]:
        notices, self.notices = self.notices, []
        return notices

    def set_aside(self, path: Path) -> Path | None:
        """Move ``path`` to ``set-aside/<name>.unreadable-<time>``, never over another
        file; None when it cannot be moved (it is then never written over either)."""
        try:
            make_private_dir(self.set_aside_folder)
            target = aside_name(path, "unreadable", self.set_aside_folder)
            os.replace(path, target)
        except OSError as exc:
            log.warning("backup %s could not be set aside: %s", path, exc)
            self._held.add(path)
            return None
        return target

    def _set_aside_record(self, path: Path, what: str, after: str) -> None:
        """Set aside folders.json or collections.json, unreadable, with its notice."""
        kept = self.set_aside(path)
        self.notices.append(
            RecoveryNotice(
                "backup_set_aside",
                f"The backup of {what} could not be read, so it was set aside, never "
                f"overwritten; {after}.",
                KEPT_HINT,
                kept_at=str(kept or ""),
                at=local_time(),
            )
        )

    @property
    def folders_path(self) -> Path:
        return self.folder / "folders.json"

    def exists(self) -> bool:
        return self.folders_path.exists()

    def save_folders(self, folders: Sequence[str]) -> None:
        if self.folders_path not in self._held:
            self._write(self.folders_path, {"folders": list(folders)})

    @property
    def collections_path(self) -> Path:
        return self.folder / "collections.json"

    def save_collections(self, collections: Sequence[dict[str, Any]]) -> None:
        """Collections are named by a person, like folders: kept here too."""
        if self.collections_path not in self._held:
            self._write(self.collections_path, {"collections": list(collections)})

    def load_collections(self) -> list[dict[str, Any]]:
        found = self._load_list(
            self.collections_path,
            "collections",
            "your collections",
            "the collections it held were not restored",
        )
        return [c for c in found if isinstance(c, dict)]

    def conversation_path(self, conversation_id: int) -> Path:
        return self._conversations / f"{int(conversation_id)}.json"

    def save_conversation(self, conversation: dict[str, Any]) -> None:
        path = self.conversation_path(int(conversation["id"]))
        if path not in self._held:
            self._write(path, conversation)

    def remove_conversation(self, conversation_id: int) -> None:
        """The person deleted the conversation: its copy goes too."""
        try:
            self.conversation_path(conversation_id).unlink(missing_ok=True)
        except OSError as exc:
            log.warning("backup of conversation %s not removed: %s", conversation_id, exc)

    def load_folders(self) -> list[str]:
        found = self._load_list(
            self.folders_path, "folders", "your folders", "add the folders it held again"
        )
        return [f for f in found if isinstance(f, str)]

    def _load_list(self, path: Path, key: str, what: str, after: str) -> list[Any]:
        """The list under ``key`` in ``path``; a file there that cannot be read as one is
        set aside (with a notice saying ``after``), so the next copy does not replace it."""
        if not path.exists():
            return []
        data = self._read(path)
        found = data.get(key) if isinstance(data, dict) else None
        if isinstance(found, list):
            return found
        if path.exists() and path not in self._held:
            self._set_aside_record(path, what, after)
        return []

    def _conversation_files(self) -> list[Path]:
        if not self._conversations.is_dir():
            return []
        return sorted(self._conversations.glob("*.json"))

    def _read_conversation(self, path: Path) -> ReadConversation | None:
        """None when the file cannot be opened at all (it is then left alone, and never
        written over)."""
        try:
            data = path.read_bytes()
        except OSError as exc:
            log.warning("backup %s unreadable: %s", path, exc)
            self._held.add(path)
            return None
        try:
            text, garbled = data.decode("utf-8"), False
        except UnicodeDecodeError:
            text, garbled = data.decode("utf-8", errors="replace"), True
        found = read_conversation(text, _file_id(path))
        return ReadConversation(
            found.conversation, found.whole and not garbled, found.cut_short, found.turns_unread
        )

    def unreadable(self) -> list[Path]:
        """The backup's files that cannot be read back whole (cut short, garbled, of the
        wrong shape): a backup that only looks complete would restore nothing after
        damage to the database."""
        bad = []
        for path, key in ((self.folders_path, "folders"), (self.collections_path, "collections")):
            if path.exists():
                data = self._read(path)
                if not (isinstance(data, dict) and isinstance(data.get(key), list)):
                    bad.append(path)
        for path in self._conversation_files():
            found = self._read_conversation(path)
            if found is not None and not found.whole:
                bad.append(path)
        return bad

    def set_aside_unreadable(self) -> list[Path]:
        """Set aside each file :meth:`unreadable` finds, with a notice, before the backup
        is written again from a whole library; returns them (by their old names)."""
        bad = self.unreadable()
        for path in bad:
            if path == self.folders_path:
                self._set_aside_record(path, "your folders", "it is written again")
            elif path == self.collections_path:
                self._set_aside_record(path, "your collections", "it is written again")
            else:
                kept = self.set_aside(path)
                self.notices.append(
                    RecoveryNotice(
                        "backup_set_aside",
                        f"The backup of conversation {path.stem} could not be read whole, "
                        "so it was set aside, never overwritten, and the conversation "
                        "copied again from the library.",
                        KEPT_HINT,
                        kept_at=str(kept or ""),
                        at=local_time(),
                    )
                )
        return bad

    def load_conversations(self) -> list[dict[str, Any]]:
        """Every conversation that can be read, whole or in part, oldest first. A file
        not read whole is set aside first (and listed in :attr:`damaged`): what follows
        writes the conversation's copy again, which must not replace the only copy of
        what could not be read."""
        self.damaged = []
        found = []
        for path in self._conversation_files():
            read = self._read_conversation(path)
            if read is None:
                continue
            if read.conversation is not None:
                found.append(read.conversation)
            if not read.whole:
                kept = self.set_aside(path)
                self.damaged.append(
                    DamagedCopy(
                        path.name,
                        read.conversation["id"] if read.conversation else _file_id(path),
                        str(kept or ""),
                        read.conversation is not None,
                        len(read.conversation["turns"]) if read.conversation else 0,
                        read.cut_short,
                        read.turns_unread,
                    )
                )
        return sorted(found, key=lambda c: (str(c.get("created_at") or ""), int(c["id"])))

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
