"""Collections and conversation scopes: real files indexed with the real model in real
DuckDB, searched and asked (extractively: no model server) inside a scope, through the
Library, core.generation.qa.ask and the `lectern` command."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from core.config import Settings
from core.errors import CollectionError, CollectionNotFoundError
from core.generation.qa import DoneEvent, ErrorEvent, ask
from core.library import Library
from core.records import Scope
from tests.conftest import SAMPLE_DOCS

# The sample documents in two library folders.
POLICIES = ("security-policy.pdf", "travel-policy.html", "expense-limits-note.txt")
ENGINEERING = ("api-error-codes.docx", "on-call-handbook.md")
# Words every sample document shares some of, so an unscoped search reaches both folders.
BROAD = "policy rules approval error escalation expenses travel security on-call"
# Quoted (no model) from the on-call handbook among others when unscoped, from the
# security policy alone when kept to the policies.
DEADLINES = "Within what time must a security incident be reported?"


@pytest.fixture(scope="module")
def indexed(tmp_path_factory: pytest.TempPathFactory, embedder: object) -> tuple[Path, Path]:
    """(home, root): root/policies and root/engineering indexed once for the module."""
    root = tmp_path_factory.mktemp("scoped")
    for name, files in (("policies", POLICIES), ("engineering", ENGINEERING)):
        (root / name).mkdir()
        for f in files:
            shutil.copy(SAMPLE_DOCS / f, root / name / f)
    home = root / "home"
    home.mkdir()
    with Library(Settings(home=home), embedder=embedder) as lib:  # type: ignore[arg-type]
        lib.index([root / "policies", root / "engineering"])
    return home, root


@pytest.fixture
def lib(
    indexed: tuple[Path, Path], tmp_path: Path, embedder: object, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Library]:
    """A private copy of the indexed library (a test may change it)."""
    home = tmp_path / "home"
    shutil.copytree(indexed[0], home)
    monkeypatch.setenv("LECTERN_HOME", str(home))
    monkeypatch.delenv("OLLAMA_HOST", raising=False)
    library = Library(Settings(home=home), embedder=embedder)  # type: ignore[arg-type]
    yield library
    library.close()


def folder_of(lib: Library, name: str) -> str:
    return next(f for f in lib.files.folders() if f.endswith(name))


def folder_of_path(sibling: str, name: str) -> str:
    return str(Path(sibling).parent / name)


def names(paths: list[str]) -> set[str]:
    return {Path(p).name for p in paths}


def answer(lib: Library, question: str, **kw: object) -> DoneEvent | ErrorEvent:
    events = list(ask(lib, question, use_llm=False, **kw))  # type: ignore[arg-type]
    last = events[-1]
    assert isinstance(last, DoneEvent | ErrorEvent)
    return last


# --- the engine ----------------------------------------------------------------------------


def test_search_in_a_collection_returns_only_passages_from_its_folders(lib: Library) -> None:
    everywhere = names([h.path for h in lib.search(BROAD, k=20)])
    assert everywhere & set(POLICIES) and everywhere & set(ENGINEERING)

    lib.collections.create("Engineering", [folder_of(lib, "engineering")])
    hits = lib.search(BROAD, k=20, scope=Scope(collections=("engineering",)))  # any case
    assert hits and names([h.path for h in hits]) <= set(ENGINEERING)

    # Collections and folders add up; file types narrow.
    both = lib.search(
        BROAD, k=20, scope=Scope(("Engineering",), (folder_of(lib, "policies"),), ("pdf",))
    )
    assert names([h.path for h in both]) == {"security-policy.pdf"}


def test_collections_are_created_renamed_changed_listed_and_deleted(lib: Library) -> None:
    eng, pol = folder_of(lib, "engineering"), folder_of(lib, "policies")
    made = lib.collections.create(" Team   docs ", [eng])
    assert made.name == "Team docs" and made.folders == (eng,)
    with pytest.raises(CollectionError) as taken:
        lib.collections.create("team DOCS")
    assert "already" in taken.value.message and taken.value.hint
    with pytest.raises(CollectionError) as outside:
        lib.collections.create("Elsewhere", ["/nowhere/in/the/library"])
    assert "not in the library" in outside.value.message
    assert lib.collections.add_folders("team docs", [pol]).folders == tuple(sorted([eng, pol]))
    assert lib.collections.remove_folders("Team docs", [eng]).folders == (pol,)
    assert lib.collections.rename("Team docs", "Policies").name == "Policies"
    assert [c.name for c in lib.collections.all()] == ["Policies"]
    assert lib.status()["collections"] == [c.to_json() for c in lib.collections.all()]
    lib.collections.delete("policies")
    assert lib.collections.all() == []
    assert set(lib.files.folders()) == {eng, pol}  # the folders stay in the library
    with pytest.raises(CollectionNotFoundError):
        lib.collections.delete("Policies")


def test_an_answer_in_a_scope_cites_only_its_folders_and_the_scope_is_kept(
    lib: Library,
) -> None:
    lib.collections.create("Policies", [folder_of(lib, "policies")])
    unscoped = answer(lib, DEADLINES, store=False)
    assert isinstance(unscoped, DoneEvent)
    assert names([c.hit.path for c in unscoped.citations]) & set(ENGINEERING)

    done = answer(lib, DEADLINES, scope=Scope(collections=("Policies",)))
    assert isinstance(done, DoneEvent) and done.conversation_id is not None
    assert done.sources and names([h.path for h in done.sources]) <= set(POLICIES)
    assert done.citations and names([c.hit.path for c in done.citations]) <= set(POLICIES)
    conversation = done.conversation_id
    assert lib.collections.scope(conversation) == Scope(collections=("Policies",))

    # A follow-up with no scope given keeps the conversation's.
    follow = answer(lib, "And how are on-call pages acknowledged?", conversation=conversation)
    assert isinstance(follow, DoneEvent)
    assert follow.sources and names([h.path for h in follow.sources]) <= set(POLICIES)

    # A rename keeps the conversation's meaning; deleting the conversation drops its scope.
    lib.collections.rename("Policies", "Pol")
    assert lib.collections.scope(conversation) == Scope(collections=("Pol",))
    lib.conversations.delete(conversation)
    assert lib.collections.scope(conversation) == Scope()
    assert lib.db.cursor().execute("SELECT count(*) FROM conversation_scopes").fetchone() == (0,)


def test_a_deleted_collection_is_said_not_replaced_by_everything(lib: Library) -> None:
    lib.collections.create("Engineering", [folder_of(lib, "engineering")])
    done = answer(lib, "What do the error codes mean?", scope=Scope(("Engineering",)))
    assert isinstance(done, DoneEvent) and done.conversation_id is not None
    lib.collections.delete("Engineering")

    later = answer(lib, "Who approves travel?", conversation=done.conversation_id)
    assert isinstance(later, ErrorEvent)
    assert isinstance(later.error, CollectionNotFoundError)
    assert "Engineering" in later.error.message and later.error.hint
    with pytest.raises(CollectionNotFoundError):
        lib.search(BROAD, scope=Scope(("Engineering",)))


def test_a_collection_whose_folder_left_the_library_contributes_nothing(lib: Library) -> None:
    eng, pol = folder_of(lib, "engineering"), folder_of(lib, "policies")
    lib.collections.create("Engineering", [eng])
    lib.collections.create("Mixed", [eng, pol])
    lib.remove_folder(eng)

    assert lib.search(BROAD, k=20, scope=Scope(("Engineering",))) == []
    mixed = lib.search(BROAD, k=20, scope=Scope(("Mixed",)))
    assert mixed and names([h.path for h in mixed]) <= set(POLICIES)

    done = answer(lib, "What do the error codes mean?", scope=Scope(("Engineering",)))
    assert isinstance(done, DoneEvent) and done.mode == "declined" and not done.sources
    warning = next(w for w in done.warnings if w.kind == "empty_scope")
    assert "“Engineering”" in warning.message


def test_scope_labels_for_the_question_box() -> None:
    assert Scope().label() == "All documents"
    assert Scope(("Papers",), (), ("pdf",)).label() == "Collection: Papers · PDF"
    assert Scope((), ("/home/a/notes",), ("md", "txt")).label() == "Folder: notes · Markdown, Text"
    assert Scope(("A", "B")).phrase() == "the collections “A” and “B”"
    assert Scope.from_json(Scope(("A",), ("/x",), ("PDF",)).to_json()) == Scope(
        ("A",), ("/x",), ("pdf",)
    )


# --- the command ---------------------------------------------------------------------------


def test_cli_collections_and_scoped_search_and_ask(
    lib: Library, capsys: pytest.CaptureFixture[str]
) -> None:
    from core.cli.main import EXIT_ERROR, main

    eng = folder_of(lib, "engineering")
    lib.close()  # the command opens the library itself

    assert main(["collection", "create", "Eng", eng]) == 0
    assert main(["collection", "list", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert [(c["name"], c["folders"]) for c in listed["collections"]] == [("Eng", [eng])]

    assert main(["search", BROAD, "-k", "20", "--json"]) == 0
    everywhere = json.loads(capsys.readouterr().out.strip().splitlines()[-1])["results"]
    assert names([r["document"] for r in everywhere]) & set(POLICIES)
    assert main(["search", BROAD, "-k", "20", "--collection", "Eng", "--json"]) == 0
    scoped = json.loads(capsys.readouterr().out.strip().splitlines()[-1])["results"]
    assert scoped and names([r["document"] for r in scoped]) <= set(ENGINEERING)

    assert main(["collection", "create", "Pol", folder_of_path(eng, "policies")]) == 0
    assert main(["ask", DEADLINES, "--no-llm", "--json"]) == 0
    answered = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert names([c["document"] for c in answered["citations"]]) & set(ENGINEERING)
    assert main(["ask", DEADLINES, "--no-llm", "--collection", "Pol", "--json"]) == 0
    answered = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert answered["citations"]
    assert names([c["document"] for c in answered["citations"]]) <= set(POLICIES)

    assert main(["search", BROAD, "--collection", "Nope"]) == EXIT_ERROR
    err = capsys.readouterr().err
    assert "There is no collection “Nope”" in err and "Hint:" in err
    assert main(["collection", "delete", "Eng"]) == 0
    assert main(["collection", "list"]) == 0
    listing = capsys.readouterr().out
    assert "Pol (1 folder)" in listing and "Eng" not in listing.split("library.")[-1]
    assert main(["collection", "delete", "pol"]) == 0
    assert main(["collection", "list"]) == 0
    assert "No collections yet" in capsys.readouterr().out


def test_scopes_travel_to_the_running_lectern(lib: Library) -> None:
    """`lectern search/ask --collection` beside the app or `lectern watch` are answered
    by that process: the scope goes over its socket, and so does an unknown collection."""
    from core import ipc

    if not ipc.supported():
        pytest.skip("no AF_UNIX sockets here")
    lib.collections.create("Policies", [folder_of(lib, "policies")])
    server = ipc.serve(lib)
    try:
        remote = ipc.connect(lib.settings.home)
        assert remote is not None
        hits = remote.search(BROAD, k=20, scope=Scope(("Policies",)))
        assert hits and names([h.path for h in hits]) <= set(POLICIES)
        with pytest.raises(CollectionNotFoundError):
            remote.search(BROAD, scope=Scope(("Nope",)))
        events = list(
            remote.ask(DEADLINES, settings=lib.settings, use_llm=False, scope=Scope(("Policies",)))
        )
        done = events[-1]
        assert isinstance(done, DoneEvent) and done.citations
        assert names([c.hit.path for c in done.citations]) <= set(POLICIES)
    finally:
        server.close()


def test_collections_come_back_in_a_library_rebuilt_after_damage(
    lib: Library, embedder: object
) -> None:
    """Collections are named by a person, as folders are: the backup beside the database
    brings them back when a damaged database file is rebuilt."""
    pol = folder_of(lib, "policies")
    lib.collections.create("Policies", [pol])
    home = lib.settings.home
    lib.close()
    with open(home / "lectern.duckdb", "r+b") as handle:
        handle.write(b"\0" * 4096)
    rebuilt = Library(Settings(home=home), embedder=embedder)  # type: ignore[arg-type]
    try:
        assert [n.kind for n in rebuilt.recovery_notices] == ["library_rebuilt"]
        assert [(c.name, c.folders) for c in rebuilt.collections.all()] == [("Policies", (pol,))]
    finally:
        rebuilt.close()
