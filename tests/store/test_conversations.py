"""Conversations renamed, searched and exported to Markdown: the store, the library, the CLI.

A small real library (a two-page PDF and a text note, the real model, real DuckDB) is
asked three questions once per module: two answered by the fake Ollama server, one
extracted from the documents with no model; each test works on a copy of that library.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import pytest

from core.citation_marks import strip_citations
from core.config import Settings
from core.errors import ConversationNotFoundError, ExportError, InvalidTitleError
from core.generation.qa import DoneEvent, ask
from core.library import Library
from core.llm import OllamaClient
from core.store.backup import RecordBackup
from core.store.conversations import TITLE_MAX_CHARS, ConversationStore
from core.store.db import Database
from core.store.export import (
    conversation_markdown,
    export_file_name,
    plain_quote,
    write_export,
)
from tests.conftest import SAMPLE_DOCS
from tests.fake_ollama import FakeOllama

PDF = "security-policy.pdf"
NOTE = "expense-limits-note.txt"
LAPTOP = "How soon must a lost or stolen laptop be reported?"
CARD = "What is the monthly limit of the corporate card?"
RECEIPTS = "When are receipts required for an expense?"


def done_of(library: Library, question: str, **kwargs: object) -> DoneEvent:
    events = list(ask(library, question, **kwargs))  # type: ignore[arg-type]
    assert isinstance(events[-1], DoneEvent), events[-1]
    return events[-1]


@pytest.fixture(scope="module")
def asked(tmp_path_factory: pytest.TempPathFactory, embedder: object) -> tuple[Path, dict]:
    """A library home with three conversations: {question: conversation id}."""
    root = tmp_path_factory.mktemp("conversations")
    docs = root / "docs"
    docs.mkdir()
    for name in (PDF, NOTE):
        shutil.copy(SAMPLE_DOCS / name, docs / name)
    home = root / "home"
    server = FakeOllama().start()
    ids: dict[str, int] = {}
    try:
        with Library(Settings(home=home), embedder=embedder) as lib:  # type: ignore[arg-type]
            assert lib.index([docs]).added == 2
            client = OllamaClient(server.url)
            for question in (LAPTOP, CARD):
                done = done_of(lib, question, client=client)
                assert done.mode == "generated" and done.citations
                assert done.conversation_id is not None
                ids[question] = done.conversation_id
            done = done_of(lib, RECEIPTS, use_llm=False)
            assert done.mode == "extractive" and done.conversation_id is not None
            ids[RECEIPTS] = done.conversation_id
    finally:
        server.stop()
    return home, ids


@pytest.fixture
def home(asked: tuple[Path, dict], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    copy = tmp_path / "home"
    shutil.copytree(asked[0], copy)
    monkeypatch.setenv("LECTERN_HOME", str(copy))
    return copy


@pytest.fixture
def lib(home: Path, embedder: object) -> Iterator[Library]:
    library = Library(Settings(home=home), embedder=embedder)  # type: ignore[arg-type]
    yield library
    library.close()


@pytest.fixture
def ids(asked: tuple[Path, dict]) -> dict[str, int]:
    return asked[1]


# --- rename -----------------------------------------------------------------------------


def test_rename_is_trimmed_kept_and_survives_reopening(
    home: Path, ids: dict[str, int], embedder: object
) -> None:
    cid = ids[CARD]
    with Library(Settings(home=home), embedder=embedder) as lib:  # type: ignore[arg-type]
        renamed = lib.conversations.rename(cid, "  Card\n limits\t ")
        assert renamed.title == "Card limits" and renamed.turn_count == 1
        assert lib.conversations.get(cid).title == "Card limits"  # type: ignore[union-attr]
        # The other conversations keep their titles.
        assert lib.conversations.get(ids[LAPTOP]).title == LAPTOP  # type: ignore[union-attr]
    with Library(Settings(home=home), embedder=embedder) as lib:  # type: ignore[arg-type]
        assert lib.conversations.get(cid).title == "Card limits"  # type: ignore[union-attr]
        assert [c.title for c in lib.conversations.list() if c.id == cid] == ["Card limits"]
    saved = {c["id"]: c for c in RecordBackup(home / "backup").load_conversations()}
    assert saved[cid]["title"] == "Card limits"


def test_blank_long_and_unknown_titles(lib: Library, ids: dict[str, int]) -> None:
    cid = ids[CARD]
    for blank in ("", "   ", "\n\t", "\x00\x07"):
        with pytest.raises(InvalidTitleError) as caught:
            lib.conversations.rename(cid, blank)
        assert caught.value.message and caught.value.hint
    assert lib.conversations.get(cid).title == CARD  # type: ignore[union-attr]
    long = lib.conversations.rename(cid, "word " * 100)
    assert len(long.title) == TITLE_MAX_CHARS and long.title.endswith("…")
    with pytest.raises(ConversationNotFoundError):
        lib.conversations.rename(987654, "Anything")


def test_rename_comes_back_after_the_database_file_is_damaged(
    home: Path, ids: dict[str, int], embedder: object
) -> None:
    with Library(Settings(home=home), embedder=embedder) as lib:  # type: ignore[arg-type]
        lib.conversations.rename(ids[LAPTOP], "Lost laptops")
    with open(home / "lectern.duckdb", "r+b") as handle:
        handle.write(b"\0" * 4096)
    with Library(Settings(home=home), embedder=embedder) as lib:  # type: ignore[arg-type]
        assert [n.kind for n in lib.recovery_notices] == ["library_rebuilt"]
        titles = sorted(c.title for c in lib.conversations.list())
        assert titles == sorted(["Lost laptops", CARD, RECEIPTS])
        laptop = next(c for c in lib.conversations.list() if c.title == "Lost laptops")
        assert lib.conversations.turns(laptop.id)[0].question == LAPTOP


def test_a_long_first_question_titles_its_conversation_cut_after_a_whole_word(
    tmp_path: Path,
) -> None:
    db = Database(tmp_path / "c.duckdb")
    store = ConversationStore(db, RecordBackup(tmp_path / "backup"))
    question = (
        "Which of the maintenance intervals for the hydraulic pumps in the Hamburg "
        "hangar were changed after the audit?"
    )
    title = store.get(store.create(question)).title  # type: ignore[union-attr]
    assert title == "Which of the maintenance intervals for the hydraulic pumps in the Hamburg…"
    assert len(title) <= 80
    db.close()


def test_a_rename_the_database_lost_is_restored_without_a_duplicate(tmp_path: Path) -> None:
    """The log holding a rename was lost: the backup has the new title, the database the
    old one. It is the same conversation (id and creation time), renamed, not a copy."""
    db = Database(tmp_path / "c.duckdb")
    store = ConversationStore(db, RecordBackup(tmp_path / "backup"))
    cid = store.create("Old title")
    store.add_turn(
        cid,
        question="Old title",
        standalone_question="Old title",
        answer="An answer.",
        mode="extractive",
        sources=[],
        citations=[],
    )
    store.rename(cid, "New title")
    saved = RecordBackup(tmp_path / "backup").load_conversations()
    with db.transaction() as cur:  # what the database holds once the log is gone
        cur.execute("UPDATE conversations SET title = 'Old title' WHERE id = ?", [cid])
    assert store.restore(saved) == 1
    assert [(c.id, c.title, c.turn_count) for c in store.list()] == [(cid, "New title", 1)]
    db.close()


# --- search -----------------------------------------------------------------------------


def test_search_finds_titles_questions_and_answers_ignoring_case(
    lib: Library, ids: dict[str, int]
) -> None:
    store = lib.conversations
    card = store.turns(ids[CARD])[0]
    # A word of the answer only (not of the question): the fake model quotes the passage.
    answer_words = [
        w for w in re.findall(r"[A-Za-z]{5,}", card.answer) if w.casefold() not in CARD.casefold()
    ]
    assert answer_words, card.answer
    word = answer_words[0]
    found = lib.conversations.search(word.upper())
    assert ids[CARD] in [m.conversation.id for m in found]
    match = next(m for m in found if m.conversation.id == ids[CARD])
    assert match.matched_in == "answer" and word.casefold() in match.snippet.casefold()
    assert match.turn_id == card.id

    by_question = lib.conversations.search("STOLEN laptop")
    assert [m.conversation.id for m in by_question] == [ids[LAPTOP]]
    assert by_question[0].matched_in in ("title", "question")

    lib.conversations.rename(ids[RECEIPTS], "Paperwork for claims")
    by_title = lib.conversations.search("paperwork")
    assert [(m.conversation.id, m.matched_in) for m in by_title] == [(ids[RECEIPTS], "title")]
    # Every word must occur in the conversation; none here has both.
    assert lib.conversations.search("laptop corporate") == []
    assert lib.conversations.search("   ") == []


def test_search_takes_percent_and_underscore_literally(lib: Library, ids: dict[str, int]) -> None:
    assert lib.conversations.search("%") == []
    assert lib.conversations.search("_") == []
    assert lib.conversations.search("l_ptop") == []
    lib.conversations.rename(ids[CARD], "Card: 100% of the_limit")
    assert [m.conversation.id for m in lib.conversations.search("100%")] == [ids[CARD]]
    assert [m.conversation.id for m in lib.conversations.search("the_limit")] == [ids[CARD]]
    assert lib.conversations.search("thexlimit") == []


# --- export -----------------------------------------------------------------------------


def cited_passages(lib: Library, cid: int) -> list[tuple[str, str, int | None]]:
    """(file name, quote, page) of each citation of each answer, from the stored turns."""
    return [(os.path.basename(path), quote, page) for path, quote, page in cited(lib, cid)]


def cited(lib: Library, cid: int) -> list[tuple[str, str, int | None]]:
    found = []
    for turn in lib.conversations.turns(cid):
        for citation in turn.citations:
            source = next(s for s in turn.sources if s["n"] == citation["n"])
            quote = plain_quote(" ".join(s["text"] for s in citation["spans"]))
            page = citation["spans"][0]["page"] if citation["spans"] else source["page"]
            found.append((source["document"], quote, page))
    return found


def test_export_holds_questions_answers_and_the_cited_passages(
    lib: Library, ids: dict[str, int], tmp_path: Path
) -> None:
    cid = ids[LAPTOP]
    done = done_of(lib, "And a lost phone?", conversation=cid, use_llm=False)
    assert done.conversation_id == cid
    text = lib.conversations.export(cid, tmp_path / "out.md")
    assert (tmp_path / "out.md").read_text(encoding="utf-8") == text
    assert text.startswith(f"# {LAPTOP}\n")
    turns = lib.conversations.turns(cid)
    assert len(turns) == 2
    for turn in turns:
        assert turn.question in text
        assert turn.answer.strip() in text  # the [n] markers as they were written
    assert "[1]" in turns[0].answer
    passages = cited_passages(lib, cid)
    assert passages
    pdf_pages = [page for name, _q, page in passages if name == PDF]
    assert pdf_pages, passages  # the laptop rule is in the PDF
    for path, quote, page in cited(lib, cid):
        assert quote and f"> {quote}" in text  # quoted in full, as the quote box has it
        assert f"{os.path.basename(path)}**" in text
        if path.endswith(PDF):
            # Named with its page, and a link that opens the file at that page.
            assert f"{PDF}**, page {page} (" in text
            assert f" · [open]({Path(path).as_uri()}#page={page})" in text
    # The quote is the documents' own words.
    document = next(d for d in lib.files.documents() if d.path.endswith(PDF))
    source_text = " ".join(lib.files.text(document.id).split())
    for name, quote, _page in passages:
        if name == PDF:
            assert quote in source_text
    # The extracted follow-up says no model wrote it.
    assert "no language model wrote this answer" in text


def test_export_of_an_extractive_answer_and_of_notes(
    lib: Library, ids: dict[str, int], tmp_path: Path
) -> None:
    text = lib.conversations.export(ids[RECEIPTS])
    turn = lib.conversations.turns(ids[RECEIPTS])[0]
    assert turn.mode == "extractive"
    assert turn.question in text and turn.answer.strip() in text
    assert "no language model wrote this answer" in text
    for warning in turn.warnings:
        assert " ".join(warning["message"].split()) in text
    for name, quote, _page in cited_passages(lib, ids[RECEIPTS]):
        assert f"> {quote}" in text and name in text


def test_export_of_a_partial_answer_keeps_it_with_its_note(lib: Library, tmp_path: Path) -> None:
    server = FakeOllama().start()
    try:
        server.answer = (
            "Receipts are required for any single expense over EUR 25 [1]. More follows."
        )
        server.die_after_tokens = 6
        done = done_of(lib, RECEIPTS, client=OllamaClient(server.url))
    finally:
        server.stop()
    assert done.conversation_id is not None
    assert any(w.kind == "incomplete" for w in done.warnings)
    text = lib.conversations.export(done.conversation_id)
    assert done.answer.strip() in text
    assert "*Note: " in text and "incomplete" in text.lower()


def test_export_of_a_removed_file_says_the_passage_is_gone(
    lib: Library, ids: dict[str, int]
) -> None:
    turn = lib.conversations.turns(ids[CARD])[0]
    paths = {s["document"] for s in turn.sources}
    lib.conversations.forget_documents(paths)
    text = lib.conversations.export(ids[CARD])
    assert "its file was removed from the library" in text
    # The answer's sentences quoting it went with it (core/store/redaction.py); the rest stays.
    stored = lib.conversations.turns(ids[CARD])[0]
    assert stored.answer.strip() in text and turn.question in text
    quoted = strip_citations(turn.answer).strip("… ")  # the fake model quotes its source [1]
    assert len(quoted) > 20 and quoted not in text


def test_markdown_is_stable_for_a_given_time(lib: Library, ids: dict[str, int]) -> None:
    conversation = lib.conversations.require(ids[CARD])
    turns = lib.conversations.turns(ids[CARD])
    when = datetime(2025, 3, 4, 5, 6)
    first = conversation_markdown(conversation, turns, exported_at=when)
    assert first == conversation_markdown(conversation, turns, exported_at=when)
    assert "Exported from Lectern on 04 March 2025, 05:06 · 1 question*" in first
    with pytest.raises(ConversationNotFoundError):
        lib.conversations.export(987654)


def test_export_file_names_are_safe() -> None:
    assert export_file_name("What is the monthly limit?") == "What is the monthly limit.md"
    assert export_file_name('a/b\\c:d*e?"f<g>h|i') == "a b c d e f g h i.md"
    assert export_file_name("  ...  ") == "Conversation.md"
    assert export_file_name("CON") == "Conversation CON.md"
    assert export_file_name("Lost line\nbreak\x00") == "Lost line break.md"
    long = export_file_name("ü" * 400)
    assert long.endswith(".md") and len(long.encode("utf-8")) <= 130
    assert export_file_name("Title…") == "Title.md"


def test_export_write_failures_are_plain_errors(tmp_path: Path) -> None:
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(stat.S_IRUSR | stat.S_IXUSR)
    try:
        # Root may write into any folder; sysfs refuses new files even to root.
        read_only = locked if not os.access(locked, os.W_OK) else Path("/sys")
        if os.access(read_only, os.W_OK) and read_only != Path("/sys"):
            pytest.skip("no folder here refuses a new file")
        with pytest.raises(ExportError) as caught:
            write_export(read_only / "c.md", "# x\n")
        assert "cannot be written to" in caught.value.message and caught.value.hint
        assert list(locked.iterdir()) == []
    finally:
        locked.chmod(stat.S_IRWXU)
    with pytest.raises(ExportError) as missing:
        write_export(tmp_path / "no" / "such" / "c.md", "# x\n")
    assert "does not exist" in missing.value.message
    with pytest.raises(ExportError) as folder:
        write_export(tmp_path, "# x\n")
    assert "a folder has that name" in folder.value.message


def test_export_to_a_full_disk_leaves_an_older_export_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "c.md"
    target.write_text("older export\n", encoding="utf-8")
    real_fsync = os.fsync

    def no_space(fd: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", no_space)
    with pytest.raises(ExportError) as caught:
        write_export(target, "# new\n")
    monkeypatch.setattr(os, "fsync", real_fsync)
    assert "disk is full" in caught.value.message
    assert target.read_text(encoding="utf-8") == "older export\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.md"]


# --- the command line -------------------------------------------------------------------


def test_cli_list_search_rename_export(
    home: Path, ids: dict[str, int], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from core.cli.main import main

    assert main(["conversations", "list", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert {c["id"] for c in listed["conversations"]} == set(ids.values())

    assert main(["conversations", "rename", str(ids[CARD]), "  Card limits  "]) == 0
    assert "Card limits" in capsys.readouterr().out
    assert main(["conversations", "list"]) == 0
    assert "Card limits" in capsys.readouterr().out

    assert main(["conversations", "rename", str(ids[CARD]), "   "]) == 2
    err = capsys.readouterr().err
    assert "Error: A conversation needs a title" in err and "Hint:" in err
    assert "Traceback" not in err

    assert main(["conversations", "search", "stolen", "--json"]) == 0
    found = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert [c["id"] for c in found["conversations"]] == [ids[LAPTOP]]
    assert main(["conversations", "search", "zzzqqq"]) == 0
    assert "No conversations match." in capsys.readouterr().out

    assert main(["conversations", "export", str(ids[LAPTOP])]) == 0
    shown = capsys.readouterr().out
    assert shown.startswith(f"# {LAPTOP}") and "> " in shown and PDF in shown

    out = tmp_path / "exports"
    out.mkdir()
    assert main(["conversations", "export", str(ids[CARD]), "-o", str(out)]) == 0
    written = out / "Card limits.md"
    assert written.read_text(encoding="utf-8").startswith("# Card limits")
    assert main(["conversations", "export", str(ids[CARD]), "-o", str(out / "x" / "y.md")]) == 2
    err = capsys.readouterr().err
    assert "could not be saved" in err and "Traceback" not in err
    assert main(["conversations", "export", "987654"]) == 2
    assert "There is no conversation 987654" in capsys.readouterr().err


def test_markdown_of_stored_turns_of_every_kind() -> None:
    """Built from stored JSON alone: a cited number without a verified span quotes the
    whole passage; spans on two pages say which; a Markdown heading at a quote's start
    stays text; a declined answer and a turn with no answer say so."""
    from core.records import Conversation, Turn

    def turn(n: int, **fields: object) -> Turn:
        base: dict[str, object] = {
            "id": n,
            "conversation_id": 1,
            "question": f"Question {n}?",
            "standalone_question": f"Question {n}?",
            "answer": "",
            "mode": "generated",
            "created_at": None,
            "sources": (),
            "citations": (),
            "warnings": (),
        }
        base.update(fields)
        return Turn(**base)  # type: ignore[arg-type]

    pdf = {
        "n": 1,
        "document": "/docs/Report 2024 (final).pdf",
        "title": "Annual report",
        "type": "pdf",
        "page": 3,
        "page_end": 4,
        "text": "Revenue rose by **12%** in 2024.\nCosts fell.",
        "heading_path": [],
    }
    md = {
        "n": 2,
        "document": "/docs/notes.md",
        "title": "notes.md",
        "type": "md",
        "page": None,
        "text": "# Notes\n- Costs fell by 3%.",
        "heading_path": ["Notes"],
    }
    spans = [
        {"start": 0, "end": 5, "page": 3, "text": "Revenue rose by **12%**"},
    ]
    later = [{"start": 9, "end": 20, "page": 4, "text": "Costs fell."}]
    turns = [
        turn(
            1,
            answer="Revenue rose [1]. Costs fell [1]. See the notes [2].",
            sources=(pdf, md),
            citations=(
                {"n": 1, "spans": spans, "page": 3},
                {"n": 1, "spans": later, "page": 4},
            ),
        ),
        turn(2, answer="The documents do not contain the answer.", mode="declined"),
        turn(3, answer="", warnings=({"kind": "incomplete", "message": "Stopped early."},)),
    ]
    text = conversation_markdown(
        Conversation(1, "Report / notes", None, 3), turns, exported_at=datetime(2025, 1, 2)
    )
    uri = Path("/docs/Report 2024 (final).pdf").as_uri().replace(")", "%29")
    assert f"**[1] Report 2024 (final).pdf**, page 3 (Annual report) · [open]({uri}#page=3)" in text
    assert "> Revenue rose by 12%\n" in text  # emphasis is not the words
    assert "page 4:\n\n> Costs fell.\n" in text
    # [2] has no verified span: its whole passage, list marker dropped, heading escaped.
    assert "**[2] notes.md** · [open](file:///docs/notes.md)" in text
    assert "> \\# Notes Costs fell by 3%.\n" in text
    assert (
        "## 2. Question 2?\n\nThe documents do not contain the answer.\n\n*Note: Not found" in text
    )
    assert "## 3. Question 3?\n\n_No answer was written._\n\n*Note: Stopped early.*" in text
    assert text.startswith("# Report / notes\n\n*Exported from Lectern on 02 January 2025")
