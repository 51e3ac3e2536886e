"""Conversations: questions, answers, their sources and citations, kept in DuckDB.

A conversation is a list of turns. Each turn stores what was asked, the standalone form
used for retrieval, the answer and how it was made, and JSON copies of the sources and
citations shown, so an old answer can be displayed (and its spans highlighted) without
re-running anything. When a file leaves the library, :meth:`forget_documents` blanks the
text copied from it (the passages, and the answer sentences drawing on them: see
core/store/redaction.py), so no removed document lingers in the history or its search; when the
same file is indexed again, :meth:`bring_back_documents` gives the turns their text back.

A turn is stored when its question is asked (:meth:`start_turn`, state "in_progress")
and completed when its answer ends (:meth:`finish_turn`: done, stopped or failed), so no
answer is lost to a stop, an error or the end of the process; one left in progress by a
process that ended reads as "cut_off" (core.records.TurnState).
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import duckdb

from core.errors import ConversationNotFoundError, InvalidTitleError, StoreError
from core.records import (
    Citation,
    Conversation,
    ConversationMatch,
    Hit,
    RecoveryNotice,
    Turn,
    TurnState,
)
from core.store.backup import KEPT_HINT, DamagedCopy, RecordBackup
from core.store.db import Database, local_time, scalar
from core.store.export import conversation_markdown, write_export
from core.store.paths import disk_path, stored_path
from core.store.redaction import BlankedTurn, blank_older, blank_turn, restore_turn


def source_json(n: int, hit: Hit) -> dict[str, Any]:
    return {"n": n, **hit.to_json(), "document_id": hit.document_id}


def _title(question: str) -> str:
    """A new conversation's title: its first question, cut after a whole word past 80
    characters (a title cut mid-word read as a typo in the list and the header)."""
    text = " ".join(question.split())
    if len(text) <= 80:
        return text
    cut = text[:79]
    space = cut.rfind(" ")
    if space >= 40 and text[79] != " ":
        cut = cut[:space]
    return cut.rstrip(" ,;:-") + "…"


# A title is one line in a narrow list and a file name on export: longer ones are cut.
TITLE_MAX_CHARS = 120
SEARCH_MAX_TERMS = 8
SNIPPET_CHARS = 140
_FIELDS = ("title", "question", "answer")


def clean_title(title: str) -> str:
    """``title`` as a conversation keeps it: one line, trimmed, at most
    ``TITLE_MAX_CHARS``; a blank one is refused (the list would show an empty row)."""
    visible = "".join(" " if unicodedata.category(ch)[0] == "C" else ch for ch in title)
    text = " ".join(visible.split())
    if not text:
        raise InvalidTitleError("A conversation needs a title; this one is empty.")
    return text if len(text) <= TITLE_MAX_CHARS else text[: TITLE_MAX_CHARS - 1].rstrip() + "…"


def search_terms(query: str) -> list[str]:
    """The words of a conversation search: each must occur in the conversation."""
    seen: list[str] = []
    for word in query.split():
        if word.casefold() not in (w.casefold() for w in seen):
            seen.append(word)
    return seen[:SEARCH_MAX_TERMS]


def _like_pattern(term: str) -> str:
    """``term`` as an ILIKE pattern matching it anywhere, literally: a person searching
    for "50%" or "file_name" means those characters, not wildcards."""
    escaped = term.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


def snippet_around(text: str, terms: Sequence[str], width: int = SNIPPET_CHARS) -> str:
    """A window of ``text`` (on one line) around the first of ``terms`` in it."""
    flat = " ".join(text.split())
    if len(flat) <= width:
        return flat
    found = [m.start() for t in terms if (m := re.search(re.escape(t), flat, re.IGNORECASE))]
    first = min(found) if found else 0
    # A little before the match: a one-line list shows only the window's start.
    start = max(0, first - 30)
    if start:
        space = flat.find(" ", start, first)
        start = space + 1 if space >= 0 else start
    end = min(len(flat), start + width)
    if end < len(flat):
        space = flat.rfind(" ", start, end)
        end = space if space > first else end
    return ("…" if start else "") + flat[start:end].strip() + ("…" if end < len(flat) else "")


class ConversationStore:
    """Conversation tables inside the library database (made by migration 4).

    Writes take the database's writer lock, so these small writes never interleave with an
    indexing transaction.
    """

    def __init__(self, db: Database, backup: RecordBackup | None = None) -> None:
        self._db = db
        self._lock = db.write_lock
        self._backup = backup
        # The documents' content version when blanked turns were last matched against
        # the library (see bring_back_documents); None: not yet since opening.
        self._checked_version: str | None = None
        # Turns this process is answering now; any other turn still in progress was left
        # so by a process that ended, and reads as cut off.
        self._running: set[int] = set()

    def _copy_to_backup(self, conversation_id: int) -> None:
        """Every change is copied outside the database (see core/store/backup.py)."""
        if self._backup is None:
            return
        conversation = self.get(conversation_id)
        if conversation is None:
            self._backup.remove_conversation(conversation_id)
            return
        self._backup.save_conversation(
            {
                "id": conversation.id,
                "title": conversation.title,
                "created_at": conversation.created_at.isoformat()
                if conversation.created_at
                else None,
                "turns": [t.to_json() for t in self.turns(conversation_id)],
            }
        )

    def back_up_all(self) -> None:
        for conversation in self.list(limit=1_000_000):
            self._copy_to_backup(conversation.id)

    def restore(self, saved: Sequence[dict[str, Any]]) -> int:
        """Bring back what the database lost of the backed-up conversations (after a
        write-ahead log was lost, or into a library rebuilt after damage); returns how
        many conversations gained something. Each keeps its id (and its turns theirs), so
        ``--conversation 3`` means the same conversation after a repair: one still
        present gets back the turns it lost (and the end of one it holds unfinished),
        one that is gone comes back under its own id, and only an id taken by another
        conversation gives a new one, said in a notice."""
        restored = 0
        renumbered: list[tuple[int, int]] = []
        with self._lock:
            cur = self._cursor()
            for conversation in saved:
                wanted = conversation.get("id")
                wanted_id = wanted if isinstance(wanted, int) and wanted > 0 else None
                turns = [t for t in conversation.get("turns") or [] if isinstance(t, dict)]
                present = self.get(wanted_id) if wanted_id is not None else None
                # Matched by id and creation time, not title: a rename the database lost
                # (with its log) is the same conversation, and gets its new title back.
                same = present is not None and (
                    (present.created_at.isoformat() if present.created_at else None)
                    == conversation.get("created_at")
                )
                if present is not None and same:
                    conversation_id = present.id
                    gained = self._restore_turns(cur, conversation_id, turns)
                    title = str(conversation.get("title") or "")
                    if title and title != present.title:
                        cur.execute(
                            "UPDATE conversations SET title = ? WHERE id = ?",
                            [title, conversation_id],
                        )
                        gained = True
                    restored += gained
                    continue
                row = cur.execute(
                    f"""INSERT INTO conversations({"id, " if present is None else ""}title,
                               created_at)
                       VALUES ({"?, " if present is None else ""}?,
                               coalesce(TRY_CAST(? AS TIMESTAMP), current_timestamp))
                       RETURNING id""",
                    [
                        *([wanted_id] if present is None else []),
                        str(conversation.get("title") or "Untitled"),
                        conversation.get("created_at"),
                    ],
                ).fetchone()
                assert row is not None
                conversation_id = int(row[0])
                if wanted_id is not None and wanted_id != conversation_id:
                    renumbered.append((wanted_id, conversation_id))
                self._restore_turns(cur, conversation_id, turns)
                restored += 1
            # Ids given explicitly above are past where the sequences stood.
            for sequence, table in (("conversation_ids", "conversations"), ("turn_ids", "turns")):
                top = int(scalar(cur, f"SELECT coalesce(max(id), 0) FROM {table}"))
                following = int(scalar(cur, f"SELECT nextval('{sequence}')"))
                if following <= top:
                    cur.execute(
                        f"SELECT max(nextval('{sequence}')) FROM range(?)", [top - following]
                    )
        if self._backup is not None:
            # The copies follow the database from here on: a file that could not be read
            # whole was set aside before, so this writes over no copy of anything.
            self.back_up_all()
            self._tell_restored(self._backup, renumbered)
        return restored

    def _restore_turns(
        self, cur: duckdb.DuckDBPyConnection, conversation_id: int, turns: Sequence[dict[str, Any]]
    ) -> bool:
        """Insert the backed-up ``turns`` the conversation lacks (by id; a turn without
        one by place), and complete one the database holds unfinished; True if any."""
        held = {
            int(r[0]): str(r[1] or TurnState.DONE)
            for r in cur.execute(
                "SELECT id, state FROM turns WHERE conversation_id = ? ORDER BY id",
                [conversation_id],
            ).fetchall()
        }
        gained = False
        for place, turn in enumerate(turns):
            turn_id = turn.get("id")
            if not isinstance(turn_id, int) or isinstance(turn_id, bool):
                if place < len(held):
                    continue
            elif turn_id in held:
                state = turn.get("state") or TurnState.DONE
                if held[turn_id] == TurnState.IN_PROGRESS and state != TurnState.IN_PROGRESS:
                    values = self._turn_values(turn)
                    cur.execute(
                        """UPDATE turns SET standalone_question = ?, answer = ?, mode = ?,
                               sources = ?, citations = ?, warnings = ?, state = ?
                           WHERE id = ?""",
                        [*values[1:4], *values[5:], turn_id],
                    )
                    gained = True
                continue
            free = (
                isinstance(turn_id, int)
                and turn_id > 0
                and not scalar(cur, "SELECT count(*) FROM turns WHERE id = ?", [turn_id])
            )
            cur.execute(
                f"""INSERT INTO turns({"id, " if free else ""}conversation_id, question,
                       standalone_question, answer, mode, created_at, sources, citations,
                       warnings, state)
                   VALUES ({"?, " if free else ""}?, ?, ?, ?, ?,
                       coalesce(TRY_CAST(? AS TIMESTAMP), current_timestamp), ?, ?, ?, ?)""",
                [*([turn_id] if free else []), conversation_id, *self._turn_values(turn)],
            )
            gained = True
        return gained

    @staticmethod
    def _turn_values(turn: dict[str, Any]) -> list[Any]:
        """question, standalone question, answer, mode, created_at, sources, citations,
        warnings, state: a backed-up turn's columns."""
        state = turn.get("state")
        return [
            str(turn.get("question") or ""),
            turn.get("standalone_question"),
            str(turn.get("answer") or ""),
            str(turn.get("mode") or ""),
            turn.get("created_at"),
            json.dumps(turn.get("sources") or []),
            json.dumps(turn.get("citations") or []),
            json.dumps(turn.get("warnings") or []),
            state if state in TurnState.ALL else TurnState.DONE,
        ]

    def _tell_restored(self, backup: RecordBackup, renumbered: Sequence[tuple[int, int]]) -> None:
        """One notice per backup file set aside (what of its conversation came back) and
        per conversation that could not keep its id."""
        for damaged in backup.damaged:
            backup.notices.append(self._damage_notice(damaged))
        backup.damaged = []
        for old, new in renumbered:
            backup.notices.append(
                RecoveryNotice(
                    "conversation_renumbered",
                    f"Conversation {old} from the backup is now conversation {new}: its "
                    "number was taken by another conversation.",
                    f"Use --conversation {new} to continue it.",
                    at=local_time(),
                )
            )

    def _damage_notice(self, damaged: DamagedCopy) -> RecoveryNotice:
        which = (
            f"conversation {damaged.conversation_id}"
            if damaged.conversation_id is not None
            else f"a conversation ({damaged.name})"
        )
        n = damaged.turns_read
        first = "its first question" if n == 1 else f"its first {n} questions"
        if damaged.cut_short and n:
            what = f"was cut short: {first} came back, what followed could not be read"
        elif damaged.cut_short and damaged.read:
            what = "was cut short: its title came back, its questions could not be read"
        elif damaged.turns_unread and n:
            what = (
                f"was partly unreadable: {n} of its questions came back, "
                f"{damaged.turns_unread} could not be read"
            )
        elif damaged.read:
            what = "was partly unreadable: what could be read of it came back"
        elif damaged.conversation_id is not None and self.get(damaged.conversation_id):
            what = "could not be read, but the library still holds the conversation"
        else:
            what = "could not be read, so the conversation it held could not be restored"
        aside = "it was set aside" if damaged.kept_at else "it is left as it is"
        return RecoveryNotice(
            "backup_set_aside",
            f"The backup of {which} {what}; {aside}, never overwritten.",
            KEPT_HINT,
            kept_at=damaged.kept_at,
            at=local_time(),
        )

    def _cursor(self) -> duckdb.DuckDBPyConnection:
        try:
            return self._db.cursor()
        except duckdb.Error as exc:
            raise StoreError(f"The conversation history could not be opened: {exc}") from exc

    def create(self, title: str, *, copy: bool = True) -> int:
        """A new conversation titled ``title``; ``copy`` off leaves its backup copy to the
        turn stored next (one write fewer before an answer starts)."""
        with self._lock:
            row = (
                self._cursor()
                .execute(
                    "INSERT INTO conversations(title) VALUES (?) RETURNING id",
                    [_title(title) or "Untitled"],
                )
                .fetchone()
            )
        assert row is not None
        if copy:
            self._copy_to_backup(int(row[0]))
        return int(row[0])

    def get(self, conversation_id: int) -> Conversation | None:
        row = (
            self._cursor()
            .execute(
                """SELECT c.id, c.title, c.created_at, count(t.id)
               FROM conversations c LEFT JOIN turns t ON t.conversation_id = c.id
               WHERE c.id = ? GROUP BY c.id, c.title, c.created_at""",
                [conversation_id],
            )
            .fetchone()
        )
        return Conversation(int(row[0]), row[1], row[2], int(row[3])) if row else None

    def add_turn(
        self,
        conversation_id: int,
        *,
        question: str,
        standalone_question: str,
        answer: str,
        mode: str,
        sources: Sequence[Hit],
        citations: Sequence[Citation],
        warnings: Sequence[dict[str, Any]] = (),
        state: str = TurnState.DONE,
    ) -> int:
        payload_sources = json.dumps([source_json(i, h) for i, h in enumerate(sources, 1)])
        payload_citations = json.dumps([c.to_json() for c in citations])
        with self._lock:
            row = (
                self._cursor()
                .execute(
                    """INSERT INTO turns(conversation_id, question, standalone_question, answer, mode,
                                     sources, citations, warnings, state)
                   VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING id""",
                    [
                        conversation_id,
                        question,
                        standalone_question,
                        answer,
                        mode,
                        payload_sources,
                        payload_citations,
                        json.dumps(list(warnings)),
                        state,
                    ],
                )
                .fetchone()
            )
        assert row is not None
        self._copy_to_backup(conversation_id)
        return int(row[0])

    def start_turn(self, conversation_id: int, question: str) -> int:
        """Keep ``question`` now, its answer to come (:meth:`finish_turn`): a turn in
        progress, which reads as cut off if this process ends before it is finished."""
        turn_id = self.add_turn(
            conversation_id,
            question=question,
            standalone_question=question,
            answer="",
            mode="",
            sources=(),
            citations=(),
            state=TurnState.IN_PROGRESS,
        )
        self._running.add(turn_id)
        return turn_id

    def save_partial(self, turn_id: int, answer: str) -> bool:
        """The answer so far of a turn in progress, so one cut off by the end of the
        process keeps what was written. Skipped (False) while another writer holds the
        database: a streaming answer never waits for an index run."""
        if not self._lock.acquire(blocking=False):
            return False
        try:
            row = (
                self._cursor()
                .execute(
                    "UPDATE turns SET answer = ? WHERE id = ? AND state = ? "
                    "RETURNING conversation_id",
                    [answer, turn_id, TurnState.IN_PROGRESS],
                )
                .fetchone()
            )
        finally:
            self._lock.release()
        # Not copied to the backup: that reads the turns, which may wait for a writer;
        # finish_turn copies the whole turn.
        return row is not None

    def finish_turn(
        self,
        turn_id: int,
        *,
        standalone_question: str,
        answer: str,
        mode: str,
        sources: Sequence[Hit],
        citations: Sequence[Citation],
        warnings: Sequence[dict[str, Any]] = (),
        state: str = TurnState.DONE,
    ) -> bool:
        """Store how the answer to a started turn ended (``state``: done, stopped or
        failed); False when the turn is gone (its conversation deleted meanwhile)."""
        try:
            with self._lock:
                row = (
                    self._cursor()
                    .execute(
                        """UPDATE turns SET standalone_question = ?, answer = ?, mode = ?,
                               sources = ?, citations = ?, warnings = ?, state = ?
                           WHERE id = ? RETURNING conversation_id""",
                        [
                            standalone_question,
                            answer,
                            mode,
                            json.dumps([source_json(i, h) for i, h in enumerate(sources, 1)]),
                            json.dumps([c.to_json() for c in citations]),
                            json.dumps(list(warnings)),
                            state,
                            turn_id,
                        ],
                    )
                    .fetchone()
                )
        finally:
            self._running.discard(turn_id)
        if row is None:
            return False
        self._copy_to_backup(int(row[0]))
        return True

    def turns(self, conversation_id: int) -> list[Turn]:
        self.bring_back_documents()
        rows = (
            self._cursor()
            .execute(
                """SELECT id, conversation_id, question, standalone_question, answer, mode, created_at,
                      sources, citations, warnings, state
               FROM turns WHERE conversation_id = ? ORDER BY id""",
                [conversation_id],
            )
            .fetchall()
        )
        return [
            Turn(
                id=int(r[0]),
                conversation_id=int(r[1]),
                question=r[2],
                standalone_question=r[3] or r[2],
                answer=r[4] or "",
                mode=r[5] or "",
                created_at=r[6],
                sources=tuple(json.loads(r[7] or "[]")),
                citations=tuple(json.loads(r[8] or "[]")),
                warnings=tuple(json.loads(r[9] or "[]")),
                state=self._state(int(r[0]), r[10]),
            )
            for r in rows
        ]

    def _state(self, turn_id: int, stored: str | None) -> str:
        state = stored or TurnState.DONE
        if state == TurnState.IN_PROGRESS and turn_id not in self._running:
            return TurnState.CUT_OFF
        return state

    def rename(self, conversation_id: int, title: str) -> Conversation:
        """Give a conversation a title of the person's choosing (see :func:`clean_title`)."""
        text = clean_title(title)
        with self._lock:
            row = (
                self._cursor()
                .execute(
                    "UPDATE conversations SET title = ? WHERE id = ? RETURNING id",
                    [text, conversation_id],
                )
                .fetchone()
            )
        if row is None:
            raise ConversationNotFoundError(f"There is no conversation {conversation_id}.")
        self._copy_to_backup(conversation_id)
        renamed = self.get(conversation_id)
        assert renamed is not None
        return renamed

    def require(self, conversation_id: int) -> Conversation:
        conversation = self.get(conversation_id)
        if conversation is None:
            raise ConversationNotFoundError(f"There is no conversation {conversation_id}.")
        return conversation

    def search(self, query: str, limit: int = 100) -> list[ConversationMatch]:
        """Conversations whose title, questions and answers hold every word of ``query``
        (anywhere in the conversation, ignoring case), most recent first, each with a
        snippet from the text that matched most of them (the title before questions,
        questions before answers)."""
        terms = search_terms(query)
        if not terms:
            return []
        self.bring_back_documents()
        patterns = {f"t{i}": _like_pattern(t) for i, t in enumerate(terms)}
        like = [f"body ILIKE $t{i} ESCAPE '\\'" for i in range(len(terms))]
        sql = f"""
            WITH texts AS (
                SELECT id AS conversation_id, 0 AS place, NULL::BIGINT AS turn_id,
                       title AS body FROM conversations
                UNION ALL SELECT conversation_id, 1, id, question FROM turns
                UNION ALL SELECT conversation_id, 2, id, answer FROM turns
            ), hits AS (
                SELECT *, {" + ".join(f"({c})::INTEGER" for c in like)} AS matched
                FROM texts WHERE {" OR ".join(like)}
            ), found AS (
                SELECT conversation_id FROM hits GROUP BY conversation_id
                HAVING {" AND ".join(f"bool_or({c})" for c in like)}
            ), best AS (
                SELECT h.*, row_number() OVER (
                    PARTITION BY h.conversation_id ORDER BY matched DESC, place, turn_id
                ) AS pick
                FROM hits h JOIN found f ON f.conversation_id = h.conversation_id
            )
            SELECT c.id, c.title, c.created_at,
                   (SELECT count(*) FROM turns t WHERE t.conversation_id = c.id),
                   b.place, b.turn_id, b.body,
                   coalesce((SELECT max(t.created_at) FROM turns t
                             WHERE t.conversation_id = c.id), c.created_at) AS last
            FROM best b JOIN conversations c ON c.id = b.conversation_id
            WHERE b.pick = 1
            ORDER BY last DESC, c.id DESC
            LIMIT $limit"""
        try:
            rows = self._cursor().execute(sql, {**patterns, "limit": limit}).fetchall()
        except duckdb.Error as exc:
            raise StoreError(f"The conversations could not be searched: {exc}") from exc
        return [
            ConversationMatch(
                Conversation(int(r[0]), r[1], r[2], int(r[3])),
                _FIELDS[int(r[4])],
                snippet_around(r[6] or "", terms),
                int(r[5]) if r[5] is not None else None,
            )
            for r in rows
        ]

    def delete(self, conversation_id: int) -> None:
        """A conversation, its turns and what it searched (its scope: core/store/collections.py)
        go together."""
        with self._db.transaction() as cur:
            cur.execute("DELETE FROM turns WHERE conversation_id = ?", [conversation_id])
            cur.execute("DELETE FROM conversations WHERE id = ?", [conversation_id])
            cur.execute(
                "DELETE FROM conversation_scopes WHERE conversation_id = ?", [conversation_id]
            )
        if self._backup is not None:
            self._backup.remove_conversation(conversation_id)

    def export(self, conversation_id: int, path: str | Path | None = None) -> str:
        """The conversation as Markdown with its cited passages (core/store/export.py);
        written to ``path`` too when one is given."""
        conversation = self.require(conversation_id)
        text = conversation_markdown(conversation, self.turns(conversation_id))
        if path is not None:
            write_export(path, text)
        return text

    def forget_documents(self, paths: Iterable[str]) -> int:
        """Take the text copied from ``paths`` out of stored turns: the passages, the
        quotes, and the answer sentences and notes drawing on them (core/store/redaction.py);
        returns turns changed. The backup is rewritten with them."""
        gone = set(paths)
        if not gone:
            return 0
        changed = 0
        touched: set[int] = set()
        with self._lock:
            cur = self._cursor()
            rows = cur.execute(
                "SELECT id, answer, sources, citations, warnings, conversation_id FROM turns"
            ).fetchall()
            for turn_id, answer, raw_sources, raw_citations, raw_warnings, conversation_id in rows:
                sources = json.loads(raw_sources or "[]")
                citations = json.loads(raw_citations or "[]")
                if not any(item.get("document") in gone for item in (*sources, *citations)):
                    continue
                blanked = blank_turn(
                    answer or "", sources, citations, json.loads(raw_warnings or "[]"), gone
                )
                if blanked.changed:
                    self._write_turn(cur, int(turn_id), blanked)
                    changed += 1
                    touched.add(int(conversation_id))
            for conversation_id in touched:
                self._copy_to_backup(conversation_id)
        return changed

    def _write_turn(self, cur: duckdb.DuckDBPyConnection, turn_id: int, turn: BlankedTurn) -> None:
        cur.execute(
            "UPDATE turns SET answer = ?, sources = ?, citations = ?, warnings = ? WHERE id = ?",
            [
                turn.answer,
                json.dumps(turn.sources),
                json.dumps(turn.citations),
                json.dumps(turn.warnings),
                turn_id,
            ],
        )

    def bring_back_documents(self) -> int:
        """Give blanked turns back the passages of files that are in the library again:
        same path, and the same passage (by its hash) at the same place in the re-indexed
        text; returns turns changed. Cheap when nothing changed: the documents' content
        version is compared first, so reading turns calls it every time."""
        if self._db.read_only:
            return 0  # a library opened read-only shows its turns as they are stored
        if self._db.get_meta("content_version", "0") == self._checked_version:
            return 0
        # Under the writer's lock throughout: a removal blanking the same turns meanwhile
        # must not be overwritten with what was read before it.
        with self._lock:
            version = self._db.get_meta("content_version", "0")
            if version == self._checked_version:
                return 0
            changed = self._bring_back()
            self._checked_version = version
        return changed

    def _bring_back(self) -> int:
        cur = self._cursor()
        rows = cur.execute(
            """SELECT id, answer, sources, citations, warnings, conversation_id FROM turns
               WHERE contains(sources, '"removed": true')"""
        ).fetchall()
        if not rows:
            return 0
        turns: dict[int, tuple[int, BlankedTurn]] = {}
        touched: set[int] = set()
        for turn_id, answer, raw_sources, raw_citations, raw_warnings, conversation_id in rows:
            turn = blank_older(
                answer or "",
                json.loads(raw_sources or "[]"),
                json.loads(raw_citations or "[]"),
                json.loads(raw_warnings or "[]"),
            )
            if turn.changed:
                # Blanked by an older Lectern, which left the answer's sentences.
                self._write_turn(cur, int(turn_id), turn)
                touched.add(int(conversation_id))
            turns[int(turn_id)] = (int(conversation_id), turn)
        wanted = {
            str(s.get("document"))
            for _, turn in turns.values()
            for s in turn.sources
            if s.get("removed") and s.get("check")
        }
        found = cur.execute(
            """SELECT d.path, d.id FROM documents d
               WHERE d.path IN (SELECT unnest(?::VARCHAR[])) AND d.state = 'indexed'""",
            [sorted(stored_path(p) for p in wanted)],
        ).fetchall()
        document_ids = {disk_path(str(path)): int(doc_id) for path, doc_id in found}
        texts: dict[str, str] = {}

        def read(path: str, start: int, end: int) -> str | None:
            if path not in document_ids:
                return None
            if path not in texts:
                row = cur.execute(
                    "SELECT text FROM document_text WHERE document_id = ?", [document_ids[path]]
                ).fetchone()
                texts[path] = str(row[0]) if row else ""
            text = texts[path]
            return text[start:end] if 0 <= start < end <= len(text) else None

        changed = len(touched)
        for turn_id, (conversation_id, turn) in turns.items() if document_ids else ():
            back = restore_turn(
                turn.answer, turn.sources, turn.citations, turn.warnings, read, document_ids
            )
            if back.changed:
                self._write_turn(cur, turn_id, back)
                changed += conversation_id not in touched
                touched.add(conversation_id)
        # Set before the backup copy, which reads the turns (and so would ask again).
        self._checked_version = self._db.get_meta("content_version", "0")
        for conversation_id in touched:
            self._copy_to_backup(conversation_id)
        return changed

    # Last in the class: a method named ``list`` would shadow the builtin in the
    # annotations of every method after it.
    def list(self, limit: int = 100) -> list[Conversation]:
        rows = (
            self._cursor()
            .execute(
                """SELECT c.id, c.title, c.created_at, count(t.id)
               FROM conversations c LEFT JOIN turns t ON t.conversation_id = c.id
               GROUP BY c.id, c.title, c.created_at
               ORDER BY max(coalesce(t.created_at, c.created_at)) DESC, c.id DESC LIMIT ?""",
                [limit],
            )
            .fetchall()
        )
        return [Conversation(int(r[0]), r[1], r[2], int(r[3])) for r in rows]
