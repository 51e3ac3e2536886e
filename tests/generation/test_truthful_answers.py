"""Old answers tell the truth about the library (issue 29, part C).

- Removing a folder blanks its passages in old answers as promised: the cited passages,
  the answer sentences quoting them and what conversation search finds.
- A file deleted and then restored gets its citations back (same path, same passage),
  after a restart too; the evidence panel's Open button agrees with its message.
- A question asked while files are still being read says how many are not searchable yet.
- The status bar's count of files that could not be read is the library's, after Retry too.
- ``lectern files`` shows control and bidi characters in file names escaped.
- A file deleted or renamed during a long run leaves the list and search within seconds.

Real model, real DuckDB, real files, real watchdog observers.
"""

from __future__ import annotations

import json
import os
import shutil
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from core.config import Settings
from core.generation.qa import DoneEvent, ask
from core.library import Library
from core.records import Citation, Hit, IndexProgress, IndexReport, Span
from core.store.conversations import ConversationStore
from core.store.db import Database
from core.store.redaction import REMOVED_SENTENCE
from tests.conftest import SAMPLE_DOCS

STIPEND = (
    "The lighthouse keeper's stipend is 312 guilders per lunar quarter, paid in silver "
    "at the harbour office."
)
LIGHTHOUSE = (
    "Lighthouse duties\n\n"
    f"{STIPEND} Keepers light the lamp at dusk and trim the wick twice a night.\n\n"
    "The relief keeper arrives by boat every second Thursday.\n"
)
QUESTION = "What is the lighthouse keeper's stipend per lunar quarter?"


def wait_until(predicate: Callable[[], Any], timeout: float = 120.0, what: str = "it") -> Any:
    deadline = time.monotonic() + timeout
    while True:
        result = predicate()
        if result:
            return result
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(0.05)


def answer(lib: Library, question: str, **options: Any) -> DoneEvent:
    events = list(ask(lib, question, use_llm=False, **options))
    done = events[-1]
    assert isinstance(done, DoneEvent), done
    return done


def flat(text: str) -> str:
    return " ".join(text.split())


@pytest.fixture()
def two_folders(tmp_path: Path) -> tuple[Path, Path]:
    """The sample documents, and a folder of its own holding the lighthouse note."""
    docs = tmp_path / "docs"
    shutil.copytree(SAMPLE_DOCS, docs)
    coast = tmp_path / "coast"
    coast.mkdir()
    (coast / "lighthouse.txt").write_text(LIGHTHOUSE, encoding="utf-8")
    return docs, coast


def backup_text(home: Path) -> str:
    return "\n".join(
        p.read_text(encoding="utf-8", errors="replace")
        for p in sorted((home / "backup").rglob("*"))
        if p.is_file()
    )


# --- 1. Remove from library blanks as promised ----------------------------------------


def test_removing_a_folder_blanks_the_answer_sentences_quoting_it_and_search_no_longer_finds_them(
    library: Library, two_folders: tuple[Path, Path], lectern_home: Path
) -> None:
    docs, coast = two_folders
    library.index([docs, coast])
    done = answer(library, QUESTION)
    assert done.mode == "extractive" and "312 guilders" in done.answer
    cid = done.conversation_id
    assert cid is not None
    assert [m.conversation.id for m in library.conversations.search("guilders")] == [cid]
    assert "312 guilders" in backup_text(lectern_home)

    library.remove_folder(coast)

    turn = library.conversations.turns(cid)[0]
    # The answer keeps its question and says what went; nothing of the passage is left.
    assert turn.question == QUESTION
    assert "guilders" not in turn.answer and REMOVED_SENTENCE in turn.answer
    stored = json.dumps(turn.to_json())
    assert "guilders" not in stored and "harbour office" not in stored
    gone = [s for s in turn.sources if s["document"].startswith(str(coast))]
    assert gone and all(s["removed"] and not s["text"] for s in gone)
    kept = [s for s in turn.sources if not s["document"].startswith(str(coast))]
    assert kept and all(s["text"] and not s.get("removed") for s in kept)
    assert library.conversations.search("guilders") == []
    assert library.conversations.search("stipend lunar quarter")  # the question still matches
    assert "guilders" not in backup_text(lectern_home)
    assert "guilders" not in library.conversations.export(cid)


def test_a_written_answer_loses_the_sentences_citing_or_quoting_a_removed_file(
    tmp_path: Path,
) -> None:
    """A model's answer: the sentence citing the removed source goes, and so does an
    uncited sentence copied from it, and the note quoting it; the rest stays as written."""
    store = ConversationStore(Database(tmp_path / "c.duckdb"))
    cid = store.create("keeper pay")
    keeper = Hit(1, 1, "/d/coast/lighthouse.txt", "Lighthouse", "txt", STIPEND, 0, len(STIPEND),
                 None, None, (), 0.9)  # fmt: skip
    meals = "Meals on business trips are covered by a daily allowance."
    trips = Hit(2, 2, "/d/docs/travel.md", "Travel", "md", meals, 0, len(meals), None, None, (),
                0.5)  # fmt: skip
    written = (
        "Keepers are paid 312 guilders each lunar quarter [1]. "
        "Meals are covered by a daily allowance [2]. "
        "It is paid in silver at the harbour office."
    )
    note = {
        "kind": "unverified_number",
        "message": "'312' does not appear in the cited source [1]: "
        '"Keepers are paid 312 guilders each lunar quarter."',
    }
    store.add_turn(
        cid,
        question="How are keepers paid?",
        standalone_question="How are keepers paid?",
        answer=written,
        mode="generated",
        sources=[keeper, trips],
        citations=[
            Citation(1, keeper, (Span(0, 60, None, STIPEND[:60]),), written.split(" [1]")[0]),
            Citation(2, trips, (Span(0, len(meals), None, meals),), "Meals are covered [2]."),
        ],
        warnings=[note],
    )
    assert store.forget_documents(["/d/coast/lighthouse.txt"]) == 1
    turn = store.turns(cid)[0]
    assert turn.answer == (
        f"{REMOVED_SENTENCE} Meals are covered by a daily allowance [2]. {REMOVED_SENTENCE}"
    )
    assert "guilders" not in json.dumps(turn.to_json())
    assert turn.warnings[0]["kind"] == "unverified_number"
    assert "guilders" not in turn.warnings[0]["message"]
    assert turn.citations[1]["quote"] == meals
    assert store.search("silver") == [] and store.search("guilders") == []
    assert [m.conversation.id for m in store.search("daily allowance")] == [cid]


def test_files_removed_and_back_one_after_another_restore_each_its_own_sentences() -> None:
    """Two files removed at different times, then back in the other order: each gives
    back its own passage and sentences, wherever the other's placeholder moved them."""
    from core.store.redaction import blank_turn, restore_turn

    texts = {
        "/d/a.txt": "Otters hold hands while they sleep in the kelp beds of the bay.",
        "/d/b.txt": "Herons nest in tall alder trees beside the slow river each spring.",
        "/d/c.txt": "Kestrels hover over the meadow before they drop onto voles.",
    }

    def source(n: int, path: str) -> dict[str, Any]:
        text = texts[path]
        return {"n": n, "document": path, "document_id": n, "text": text, "start": 0,
                "end": len(text)}  # fmt: skip

    def citation(n: int, path: str, sentence: str) -> dict[str, Any]:
        text = texts[path]
        span = {"start": 0, "end": len(text), "page": None, "text": text}
        return {"n": n, "document": path, "quote": text, "spans": [span], "sentence": sentence}

    answer = (
        "Otters hold hands while asleep [1]. Herons nest in alder trees [2]. "
        "Kestrels hover first [3]. Otters sleep in the kelp beds of the bay."
    )
    sources = [source(1, "/d/a.txt"), source(2, "/d/b.txt"), source(3, "/d/c.txt")]
    citations = [
        citation(1, "/d/a.txt", "Otters hold hands while asleep [1]."),
        citation(2, "/d/b.txt", "Herons nest in alder trees [2]."),
        citation(3, "/d/c.txt", "Kestrels hover first [3]."),
    ]
    first = blank_turn(answer, sources, citations, [], {"/d/a.txt"})
    second = blank_turn(first.answer, first.sources, first.citations, [], {"/d/b.txt"})
    assert second.answer == (
        f"{REMOVED_SENTENCE} {REMOVED_SENTENCE} Kestrels hover first [3]. {REMOVED_SENTENCE}"
    )
    assert "Otters" not in json.dumps([second.sources, second.citations])
    assert "Herons" not in json.dumps([second.sources, second.citations])

    def reader(back: dict[str, str]) -> Callable[[str, int, int], str | None]:
        return lambda path, start, end: back[path][start:end] if path in back else None

    only_b = restore_turn(second.answer, second.sources, second.citations, [],
                          reader({"/d/b.txt": texts["/d/b.txt"]}), {"/d/b.txt": 22})  # fmt: skip
    assert only_b.answer == (
        f"{REMOVED_SENTENCE} Herons nest in alder trees [2]. Kestrels hover first [3]. "
        f"{REMOVED_SENTENCE}"
    )
    assert only_b.sources[1]["document_id"] == 22 and only_b.sources[1]["text"]
    # The first file back with other words where its passage was: it stays blanked.
    changed = restore_turn(only_b.answer, only_b.sources, only_b.citations, [],
                           reader({"/d/a.txt": texts["/d/a.txt"].upper()}), {"/d/a.txt": 21})  # fmt: skip
    assert not changed.changed
    both = restore_turn(only_b.answer, only_b.sources, only_b.citations, [],
                        reader(texts), {"/d/a.txt": 21})  # fmt: skip
    assert both.answer == answer
    assert [c["quote"] for c in both.citations] == [c["quote"] for c in citations]
    assert [c["sentence"] for c in both.citations] == [c["sentence"] for c in citations]
    assert not any(s.get("removed") or s.get("sealed") for s in both.sources)


def test_answers_blanked_by_an_older_lectern_lose_the_sentences_it_left(tmp_path: Path) -> None:
    """A turn whose source was blanked before answers were (as a backup of that time
    holds it): the sentence citing the removed file goes when the turns are read."""
    store = ConversationStore(Database(tmp_path / "c.duckdb"))
    meals = "Meals on business trips are covered by a daily allowance."
    store.restore(
        [
            {
                "id": 1,
                "title": "keeper pay",
                "created_at": "2025-01-02T03:04:05",
                "turns": [
                    {
                        "question": "How are keepers paid?",
                        "answer": "Keepers earn 312 guilders a quarter [1]. Meals are covered [2].",
                        "mode": "generated",
                        "sources": [
                            {"n": 1, "document": "/d/lighthouse.txt", "text": "", "removed": True},
                            {"n": 2, "document": "/d/travel.md", "text": meals},
                        ],
                        "citations": [
                            {
                                "n": 1,
                                "document": "/d/lighthouse.txt",
                                "quote": "",
                                "spans": [],
                                "sentence": "Keepers earn 312 guilders a quarter [1].",
                                "removed": True,
                            },
                            {
                                "n": 2,
                                "document": "/d/travel.md",
                                "quote": meals,
                                "spans": [],
                                "sentence": "Meals are covered [2].",
                            },
                        ],
                        "warnings": [],
                    }
                ],
            }
        ]
    )
    (conversation,) = store.list()
    turn = store.turns(conversation.id)[0]
    assert turn.answer == f"{REMOVED_SENTENCE} Meals are covered [2]."
    assert "guilders" not in json.dumps(turn.to_json())
    assert store.search("guilders") == []
    assert store.turns(conversation.id)[0].answer == turn.answer  # done once


# --- 2. A file deleted and restored gets its citations back ----------------------------


def test_a_deleted_file_that_comes_back_gets_its_citations_back_after_a_restart_too(
    lectern_home: Path, embedder: Any, two_folders: tuple[Path, Path]
) -> None:
    docs, coast = two_folders
    note = coast / "lighthouse.txt"
    settings = Settings(home=lectern_home)
    with Library(settings, embedder=embedder) as lib:
        lib.index([docs, coast])
        done = answer(lib, QUESTION)
        cid = done.conversation_id
        assert cid is not None and "312 guilders" in done.answer
        before = lib.conversations.turns(cid)[0]

        note.unlink()
        lib.sync()
        blanked = lib.conversations.turns(cid)[0]
        assert "guilders" not in blanked.answer
        assert any(s.get("removed") for s in blanked.sources)

        # Back, same content: the old answer reads as it did, pointing at the new rows.
        note.write_text(LIGHTHOUSE, encoding="utf-8")
        lib.sync()
        back = lib.conversations.turns(cid)[0]
        assert back.answer == before.answer
        assert [s["text"] for s in back.sources] == [s["text"] for s in before.sources]
        assert not any(s.get("removed") for s in back.sources)
        assert [c["quote"] for c in back.citations] == [c["quote"] for c in before.citations]
        new_id = next(d.id for d in lib.files.documents() if d.path == str(note))
        restored = [s for s in back.sources if s["document"] == str(note)]
        assert restored and all(s["document_id"] == new_id for s in restored)
        assert [m.conversation.id for m in lib.conversations.search("guilders")] == [cid]

        # Deleted again while Lectern is closed, restored before it opens again.
        note.unlink()
        lib.sync()
        assert "guilders" not in lib.conversations.turns(cid)[0].answer
    note.write_text(LIGHTHOUSE, encoding="utf-8")
    with Library(settings, embedder=embedder) as lib:
        lib.sync()
    with Library(settings, embedder=embedder) as lib:
        assert lib.conversations.turns(cid)[0].answer == before.answer

    # Back with other words where the passage was: it stays blanked.
    note.unlink()
    with Library(settings, embedder=embedder) as lib:
        lib.sync()
    note.write_text(LIGHTHOUSE.replace("312 guilders", "95 florins"), encoding="utf-8")
    with Library(settings, embedder=embedder) as lib:
        lib.sync()
        turn = lib.conversations.turns(cid)[0]
        assert "guilders" not in turn.answer and "florins" not in turn.answer
        assert any(s.get("removed") for s in turn.sources if s["document"] == str(note))


# --- 3. A question asked while files are still being read -------------------------------


def test_a_question_asked_while_the_first_folder_is_read_says_how_much_is_not_searchable(
    library: Library, tmp_path: Path
) -> None:
    folder = tmp_path / "shelf"
    folder.mkdir()
    files = 12
    for i in range(files):
        (folder / f"log-{i:02d}.txt").write_text(
            f"Ship log {i}: the schooner Mirabel anchored in bay number {i}.\n", encoding="utf-8"
        )
    from core.indexing.indexer import Controls

    controls = Controls()
    controls.pause()  # the run plans its files, then holds before reading any
    planned = threading.Event()

    def progress(p: IndexProgress) -> None:
        if p.files_total:
            planned.set()

    result: list[IndexReport] = []
    run = threading.Thread(
        target=lambda: result.append(library.index([folder], progress=progress, controls=controls))
    )
    run.start()
    try:
        assert planned.wait(120)
        done = answer(library, "Where did the schooner Mirabel anchor?")
        assert done.mode == "declined"
        kinds = {w.kind: w.message for w in done.warnings}
        assert "still_indexing" in kinds, kinds
        assert f"{files} of {files} files" in kinds["still_indexing"]
        assert "empty_library" not in kinds  # it is not empty: it is being read
    finally:
        controls.resume()
        run.join(300)
    assert result and result[0].added == files
    done = answer(library, "Where did the schooner Mirabel anchor?")
    assert "still_indexing" not in {w.kind for w in done.warnings}


# --- 5. `lectern files` escapes what would rewrite the terminal ------------------------


def test_lectern_files_escapes_control_and_bidi_characters(
    library: Library, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from core.cli.main import main

    folder = tmp_path / "names"
    folder.mkdir()
    tricky = ["invoice\u202efdp.txt", "two\nlines.txt", "bell\x07\x1b[31mred.txt"]
    for name in tricky:
        (folder / name).write_text(f"Ledger entry for {name!r}.\n", encoding="utf-8")
    library.index([folder])
    library.close()  # the command opens the library itself
    assert main(["files"]) == 0
    out = capsys.readouterr().out
    for raw in ("\u202e", "\x07", "\x1b"):
        assert raw not in out
    lines = out.splitlines()
    # One line per file (a header and a total besides): no name broke its line.
    assert len(lines) == len(tricky) + 2, lines
    assert any("invoice\\u202efdp.txt" in line for line in lines), lines
    assert any("two\\nlines.txt" in line for line in lines), lines
    # --json keeps the names exact (JSON escapes them itself).
    assert main(["files", "--json"]) == 0
    data = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert sorted(Path(f["path"]).name for f in data["files"]) == sorted(tricky)


# --- 6. Deletions during a long run ------------------------------------------------------


@pytest.fixture()
def watched(library: Library) -> Iterator[Callable[..., Any]]:
    from core.app.watch import FolderWatcher

    watchers: list[FolderWatcher] = []

    def start(**options: Any) -> FolderWatcher:
        options.setdefault("reconcile_interval_s", None)
        options.setdefault("debounce_s", 0.2)
        watcher = FolderWatcher(library, **options).start()
        watchers.append(watcher)
        return watcher

    yield start
    for watcher in watchers:
        watcher.stop()


@pytest.mark.slow
def test_files_deleted_or_renamed_during_a_long_run_leave_within_seconds(
    library: Library, tmp_path: Path, watched: Callable[..., Any]
) -> None:
    from core.app.watch import WATCHING
    from core.indexing.indexer import Controls
    from tests.indexing.test_index_and_search import assert_consistent

    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "aardvark.txt").write_text("The aardvark census counted twelve animals in May.\n")
    (notes / "heron.md").write_text("# Herons\n\nGrey herons nest in tall alder trees.\n")
    library.index([notes])
    watcher = watched()
    assert watcher.wait_idle(120)

    big = tmp_path / "big"
    big.mkdir()
    for i in range(30):
        (big / f"report-{i:02d}.txt").write_text(
            f"Quarterly report {i}: the kestrel survey found {i + 3} nesting pairs.\n"
        )
    controls = Controls()
    midway = threading.Event()

    def progress(p: IndexProgress) -> None:
        # Hold the long run once a few of its files are written.
        if p.files_done >= 3 and not midway.is_set():
            controls.pause()
            midway.set()

    result: list[IndexReport] = []
    run = threading.Thread(
        target=lambda: result.append(library.index([big], progress=progress, controls=controls))
    )
    run.start()
    try:
        assert midway.wait(300)
        wait_until(
            lambda: any(s.folder == str(big) and s.state == WATCHING for s in watcher.statuses()),
            what="the new folder to be watched",
        )
        written = sorted(d.path for d in library.files.documents() if d.path.startswith(str(big)))
        assert written
        listed = {e.path for e in library.files.file_list()}
        assert str(notes / "aardvark.txt") in listed

        (notes / "aardvark.txt").unlink()
        os.rename(notes / "heron.md", notes / "grey-heron.md")
        Path(written[0]).unlink()  # written by this run already
        (big / "report-29.txt").unlink()  # not read yet

        def left() -> bool:
            paths = {e.path for e in library.files.file_list()}
            return not paths & {str(notes / "aardvark.txt"), str(notes / "heron.md"), written[0]}

        wait_until(left, timeout=60, what="the deleted files to leave the list")
        assert run.is_alive() and not result  # the run has not ended
        assert not any("aardvark" in h.text for h in library.search("aardvark census"))
        assert not any("herons nest" in h.text for h in library.search("herons nest alder", k=10))
    finally:
        controls.resume()
        run.join(300)
    assert result
    assert watcher.wait_idle(120)
    wait_until(lambda: watcher.wait_idle(0.5), what="the watcher to settle")
    paths = {d.path: d.state.value for d in library.files.documents()}
    assert str(big / "report-29.txt") not in paths  # deleted before it was read: not "failed"
    assert written[0] not in paths
    assert paths.get(str(notes / "grey-heron.md")) == "indexed"
    on_disk = {str(p) for f in (notes, big) for p in f.iterdir()}
    assert set(paths) == on_disk
    assert_consistent(library)


# --- the desktop app --------------------------------------------------------------------


try:  # the window fixture, where Qt is installed (the core tests above need none)
    from tests.desktop import test_window as _desktop

    open_window = _desktop.open_window
except pytest.skip.Exception:
    pass


@pytest.mark.slow
def test_a_restored_file_gets_its_citation_back_and_open_agrees_with_the_message(
    qtbot: Any, open_window: Callable[..., Any], tmp_path: Path, embedder: Any
) -> None:
    from tests.desktop.test_window import ask as ask_in_window

    docs = tmp_path / "docs"
    shutil.copytree(SAMPLE_DOCS, docs)
    home = tmp_path / "home"
    home.mkdir()
    with Library(Settings(home=home), embedder=embedder) as lib:
        lib.index([docs])
    window = open_window(url="", home=home)
    turn = ask_in_window(qtbot, window, "How much is the home office allowance per calendar year?")
    view = turn.turn
    cited = view.citations[0].source
    assert cited is not None and cited.text
    quote = flat(view.citations[0].quote)
    assert quote and quote in flat(view.answer)
    note = Path(cited.path)
    content = note.read_bytes()
    conversation = window.conversation.conversation_id
    evidence = window.evidence

    note.unlink()
    window.backend.indexing.rescan()
    qtbot.waitUntil(
        lambda: all(s.removed for s in turn.turn.sources if s.path == str(note)), timeout=60_000
    )
    # The open answer lets go of the sentence that quoted it, not only of its sources.
    assert quote not in flat(turn.turn.answer) and REMOVED_SENTENCE in turn.turn.answer

    # The file is back on disk, not yet in the library: the panel says it is not
    # available, and its Open button agrees.
    note.write_bytes(content)
    turn.open_citation(view.citations[0].n)
    qtbot.waitUntil(lambda: evidence.mode == "message", timeout=20_000)
    assert "no longer available" in evidence.message.text()
    assert not evidence.open_button.isEnabled()

    window.backend.indexing.rescan()
    qtbot.waitUntil(
        lambda: any(
            s.path == str(note) and s.state.value == "indexed"
            for s in window.backend.startup.library.files.documents()
        ),
        timeout=60_000,
    )
    window.conversation.new_conversation()
    window.conversation.open_conversation(conversation)
    qtbot.waitUntil(lambda: window.conversation.last_turn() is not None, timeout=20_000)
    again = window.conversation.last_turn()
    assert again is not None
    qtbot.waitUntil(lambda: bool(again.turn.sources), timeout=20_000)
    back = [s for s in again.turn.sources if s.path == str(note)]
    assert back and all(s.text and not s.removed for s in back)
    assert quote in flat(again.turn.answer)
    assert flat(again.turn.citations[0].quote) == quote
    again.open_citation(again.turn.citations[0].n)
    qtbot.waitUntil(lambda: evidence.mode == "text", timeout=20_000)
    assert evidence.open_button.isEnabled()


@pytest.mark.slow
def test_the_status_bar_counts_every_file_that_could_not_be_read_after_retry_too(
    qtbot: Any, open_window: Callable[..., Any], tmp_path: Path
) -> None:
    from tests.desktop.test_window import drop, wait_indexed

    folder = tmp_path / "scans"
    folder.mkdir()
    broken = 9
    for i in range(broken):
        (folder / f"broken-{i}.pdf").write_bytes(b"%PDF-1.4\n" + bytes([i]) * 40 + b"\n%%EOF")
    (folder / "fine.txt").write_text("The ferry leaves at nine.\n", encoding="utf-8")
    window = open_window(url="")
    backend = window.backend
    with qtbot.waitSignal(backend.indexing.finished, timeout=240_000):
        drop(window, folder)
    # Read as the run ends: the notice goes after a few seconds.
    assert f"{broken} files could not be read" in window.notice_label.text()
    wait_indexed(qtbot, window, files=broken + 1)
    snapshot = backend.view.snapshot
    assert snapshot is not None and snapshot.folders[0].failed == broken

    failed = window.library._failed_in(str(folder))
    assert len(failed) == broken
    with qtbot.waitSignal(backend.indexing.finished, timeout=120_000):
        window.library.retry(failed)
    assert f"{broken} files could not be read" in window.notice_label.text(), (
        window.notice_label.text()
    )
    qtbot.waitUntil(lambda: not backend.view._refreshing, timeout=20_000)
    with qtbot.waitSignal(backend.view.snapshot_changed, timeout=20_000):
        backend.view.refresh()
    assert backend.view.snapshot is not None and backend.view.snapshot.folders[0].failed == broken
