"""A backup that cannot be read is set aside, never overwritten or deleted; conversations
keep their ids through a repair; a partly readable backup gives back what it can
(issue 45).

Real libraries, the real model and DuckDB; the damage is done to the files as a disk, a
crash or a person would: a backup file cut short, garbled, of the wrong shape, deleted,
and the database file's first block zeroed.
"""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path
from typing import Any

import pytest

from core.config import Settings
from core.generation.qa import DoneEvent, ask
from core.library import Library
from tests.conftest import SAMPLE_DOCS
from tests.helpers import cli

QUESTIONS = (
    "What is the monthly limit of the corporate card?",
    "When are receipts required for an expense?",
    "How soon must a lost laptop be reported?",
    "What is the hotel cap per night?",
    "Who approves expense claims?",
    "How are on-call shifts handed over?",
    "What is the per diem for meals?",
)


def zero_database(home: Path) -> None:
    with open(home / "lectern.duckdb", "r+b") as handle:
        handle.write(b"\0" * 4096)


def open_library(home: Path, embedder: object) -> Library:
    return Library(Settings(home=home), embedder=embedder)  # type: ignore[arg-type]


def asked(library: Library, question: str, conversation: int | None = None) -> DoneEvent:
    done = list(ask(library, question, conversation, use_llm=False))[-1]
    assert isinstance(done, DoneEvent) and done.conversation_id is not None, done
    return done


@pytest.fixture(scope="module")
def seven(tmp_path_factory: pytest.TempPathFactory, embedder: object) -> Path:
    """A library with the sample documents and seven conversations, 1 to 7; the
    fourth has three questions."""
    base = tmp_path_factory.mktemp("seven")
    docs = base / "docs"
    shutil.copytree(SAMPLE_DOCS, docs)
    home = base / "home"
    with open_library(home, embedder) as lib:
        lib.index([docs])
        for question in QUESTIONS:
            done = asked(lib, question)
            if question == QUESTIONS[3]:
                asked(lib, "And for a suite?", done.conversation_id)
                asked(lib, "Is breakfast included?", done.conversation_id)
        assert [c.id for c in lib.conversations.list()] == [7, 6, 5, 4, 3, 2, 1]
    return home


@pytest.fixture
def home(seven: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    copy = tmp_path / "home"
    shutil.copytree(seven, copy)
    monkeypatch.setenv("LECTERN_HOME", str(copy))
    return copy


def listed(home: Path) -> dict[int, dict[str, Any]]:
    done = cli(home, "conversations", "list", "--json")
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    return {c["id"]: c for c in json.loads(done.stdout.splitlines()[-1])["conversations"]}


def turns_shown(home: Path, conversation: int) -> list[dict[str, Any]]:
    done = cli(home, "conversations", "show", str(conversation), "--json")
    assert done.returncode == 0, done.stderr
    return list(json.loads(done.stdout.splitlines()[-1])["turns"])


def set_aside(home: Path) -> dict[str, bytes]:
    """The set-aside backup files by the name they had, with what they hold."""
    folder = home / "backup" / "set-aside"
    found = {}
    for path in folder.iterdir() if folder.is_dir() else ():
        name, _, stamp = path.name.partition(".unreadable-")
        assert stamp, path.name
        found[name] = path.read_bytes()
    return found


def test_unreadable_backups_are_set_aside_ids_survive_and_a_cut_one_gives_back_its_part(
    home: Path, embedder: object
) -> None:
    before = listed(home)
    fourth = turns_shown(home, 4)
    copies = home / "backup" / "conversations"
    cut_4 = (copies / "4.json").read_bytes()
    third = cut_4.index(json.dumps(fourth[2]["question"]).encode())
    cut_4 = cut_4[: third + 5]  # in the third turn: two whole ones before it
    (copies / "4.json").write_bytes(cut_4)
    cut_3 = (copies / "3.json").read_bytes()[:700]
    (copies / "3.json").write_bytes(cut_3)
    wrong = b'{"id":"x","turns":"nope"}'
    (copies / "5.json").write_bytes(wrong)
    garbage = b"\x00\xff\xfe not json {{{"
    (copies / "6.json").write_bytes(garbage)
    zero_database(home)

    status = cli(home, "status")
    assert status.returncode == 0 and "Traceback" not in status.stderr, status.stderr
    said = status.stderr
    assert "The backup of conversation 3 was cut short: its title came back" in said
    assert "The backup of conversation 4 was cut short: its first 2 questions came back" in said
    assert "The backup of conversation 5 could not be read" in said
    assert "The backup of conversation 6 could not be read" in said
    assert said.count("set aside, never overwritten") == 4

    # Set aside as they were, nothing deleted, nothing written over them.
    assert set_aside(home) == {"3.json": cut_3, "4.json": cut_4, "5.json": wrong, "6.json": garbage}
    after = listed(home)
    assert sorted(after) == [1, 2, 3, 4, 7]  # the same numbers: none renumbered
    for conversation in (1, 2, 3, 4, 7):
        assert after[conversation]["title"] == before[conversation]["title"]
    assert after[3]["questions"] == 0
    assert [t["question"] for t in turns_shown(home, 4)] == [t["question"] for t in fourth[:2]]
    assert [t["id"] for t in turns_shown(home, 4)] == [t["id"] for t in fourth[:2]]
    assert turns_shown(home, 7)[0]["question"] == QUESTIONS[6]
    # The copies follow the library again, each whole.
    for conversation in (1, 2, 3, 4, 7):
        saved = json.loads((copies / f"{conversation}.json").read_text())
        assert saved["id"] == conversation and saved["title"] == before[conversation]["title"]
    assert not (copies / "5.json").exists() and not (copies / "6.json").exists()

    # A new conversation takes a number past every one restored.
    with open_library(home, embedder) as lib:
        assert asked(lib, "Is the per diem taxed?").conversation_id == 8


def test_a_backup_of_the_wrong_shape_keeps_its_well_typed_turns_and_counts_the_rest(
    home: Path,
) -> None:
    copies = home / "backup" / "conversations"
    saved = json.loads((copies / "4.json").read_text())
    saved["turns"][0]["sources"] = "nope"  # kept, without its sources
    saved["turns"][1] = ["not", "a", "turn"]
    saved["turns"][2]["question"] = 42
    (copies / "4.json").write_text(json.dumps(saved))
    zero_database(home)

    status = cli(home, "status")
    assert status.returncode == 0, status.stderr
    assert (
        "The backup of conversation 4 was partly unreadable: 1 of its questions came back, "
        "2 could not be read" in status.stderr
    )
    [kept] = turns_shown(home, 4)
    assert kept["question"] == QUESTIONS[3] and kept["sources"] == [] and kept["answer"]
    assert json.loads(set_aside(home)["4.json"]) == saved


def test_an_unreadable_backup_beside_a_whole_library_is_set_aside_not_overwritten(
    home: Path,
) -> None:
    copies = home / "backup" / "conversations"
    garbled = (copies / "2.json").read_bytes()[:-40]
    (copies / "2.json").write_bytes(garbled)
    folders = b'{"folders": 7}'
    (home / "backup" / "folders.json").write_bytes(folders)

    status = cli(home, "status")
    assert status.returncode == 0, status.stderr
    assert "The backup of conversation 2 could not be read whole" in status.stderr
    assert "The backup of your folders could not be read" in status.stderr
    assert set_aside(home) == {"2.json": garbled, "folders.json": folders}
    # Written again from the library, which is whole.
    assert json.loads((copies / "2.json").read_text())["title"] == QUESTIONS[1]
    assert json.loads((home / "backup" / "folders.json").read_text())["folders"]
    again = cli(home, "status")
    assert "backup" not in again.stderr  # told once


# --- torture: rounds of damage to the database and the backups -------------------------

ROUNDS = 30
CONVERSATIONS = 12
DAMAGE = ("cut", "garbage", "wrong", "deleted")


def _answer(rng: random.Random) -> str:
    words = ["ledger", "harbour", "invoice", "glacier", "receipt", "lantern", "quarto"]
    return " ".join(rng.choice(words) for _ in range(rng.randint(20, 60)))


def _converse(
    library: Library, rng: random.Random, name: str, conversation: int | None = None
) -> int:
    """A new conversation of one to four turns (or one turn more in ``conversation``)."""
    store = library.conversations
    turns = rng.randint(1, 4) if conversation is None else 1
    if conversation is None:
        conversation = store.create(f"Conversation {name}: what does the ledger say?")
    for j in range(turns):
        store.add_turn(
            conversation,
            question=f"Question {name}.{j}?",
            standalone_question=f"Question {name}.{j}?",
            answer=f"Answer {name}.{j}: " + _answer(rng),
            mode="extractive",
            sources=[],
            citations=[],
        )
    return conversation


def _held(library: Library) -> dict[int, tuple[str, dict[int, tuple[str, str]]]]:
    """id -> (title, turn id -> (question, answer)): what the library holds."""
    store = library.conversations
    return {
        c.id: (c.title, {t.id: (t.question, t.answer) for t in store.turns(c.id)})
        for c in store.list(limit=1_000_000)
    }


def _damage(
    rng: random.Random, path: Path, held: tuple[str, dict[int, tuple[str, str]]]
) -> tuple[str, bytes | None, tuple[str, dict[int, tuple[str, str]]] | None]:
    """Damage one conversation's backup file; returns the damage, the bytes left there,
    and what of the conversation that copy still holds (None: nothing)."""
    text = path.read_bytes()
    data = json.loads(text)
    kind = rng.choice(DAMAGE if data["turns"] else DAMAGE[:2] + DAMAGE[3:])
    title, turns = held
    if kind == "deleted":
        path.unlink()
        return kind, None, None
    if kind == "garbage":
        garbage = bytes(rng.randrange(256) for _ in range(rng.randint(1, 400)))
        path.write_bytes(garbage)
        return kind, garbage, None
    if kind == "cut":
        at = rng.randint(1, len(text) - 1)
        left = text[:at]
        path.write_bytes(left)
        whole = {
            t["id"]: turns[t["id"]]
            for t in data["turns"]
            if text.index(json.dumps(t, default=str).encode()) + len(json.dumps(t)) <= at
        }
        title_end = text.index(json.dumps(data["title"]).encode()) + len(json.dumps(data["title"]))
        if not whole and title_end > at:
            return kind, left, None
        return kind, left, (title, whole)
    # Wrong types: some turns not turns at all, some with a field of the wrong kind.
    spoiled = rng.sample(range(len(data["turns"])), rng.randint(1, len(data["turns"])))
    kept = dict(turns)
    for index in spoiled:
        turn = data["turns"][index]
        if rng.random() < 0.5:
            data["turns"][index] = rng.choice(["nope", 7, None, [1, 2]])
            del kept[turn["id"]]
        else:
            turn[rng.choice(["sources", "citations", "warnings"])] = "nope"
    if rng.random() < 0.3:
        data["title"] = 12
    wrong = json.dumps(data).encode()
    path.write_bytes(wrong)
    if not kept and not isinstance(data["title"], str):
        return kind, wrong, None  # nothing of it is readable
    return kind, wrong, (title, kept)


@pytest.mark.slow
def test_rounds_of_damage_to_the_database_and_the_backups_lose_nothing_a_copy_held(
    tmp_path: Path, embedder: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    rng = random.Random(45)
    home = tmp_path / "home"
    monkeypatch.setenv("LECTERN_HOME", str(home))
    with open_library(home, embedder) as lib:
        for i in range(CONVERSATIONS):
            _converse(lib, rng, str(i))
        held = _held(lib)
    copies = home / "backup" / "conversations"
    figures = {
        "rounds": 0,
        "damaged files": 0,
        "database damaged": 0,
        "conversations checked": 0,
        "turns checked": 0,
        "gone with every copy": 0,
        "lost": 0,
    }
    for round_ in range(ROUNDS):
        damage_db = rng.random() < 0.7
        names = sorted(p.name for p in copies.glob("*.json"))
        hit = rng.sample(names, rng.randint(1, max(1, len(names) // 3)))
        kept_bytes: list[bytes] = []
        surviving: dict[int, tuple[str, dict[int, tuple[str, str]]]] = {}
        for name in names:
            conversation = int(name.removesuffix(".json"))
            if name not in hit:
                surviving[conversation] = held[conversation]
                continue
            _kind, left, copy = _damage(rng, copies / name, held[conversation])
            if left is not None:
                kept_bytes.append(left)
            if copy is not None:
                surviving[conversation] = copy
        figures["damaged files"] += len(hit)
        if damage_db:
            zero_database(home)
            figures["database damaged"] += 1
        expected = surviving if damage_db else held
        figures["conversations checked"] += len(expected)
        figures["turns checked"] += sum(len(turns) for _, turns in expected.values())
        figures["gone with every copy"] += len(set(held) - set(expected))

        aside_before = sorted((home / "backup" / "set-aside").glob("*"))
        with open_library(home, embedder) as lib:
            now = _held(lib)
            notices = [n for n in lib.recovery_notices if n.kind == "backup_set_aside"]
            lost = 0
            for conversation, (_title, turns) in expected.items():
                if conversation not in now:
                    lost += 1 + len(turns)
                    continue
                lost += sum(now[conversation][1].get(t) != turns[t] for t in turns)
            figures["lost"] += lost
            assert lost == 0, (round_, sorted(expected), sorted(now))
            # Every damaged file that was still there is kept, as it was, under set-aside/.
            aside = sorted((home / "backup" / "set-aside").glob("*"))
            new = [p.read_bytes() for p in aside if p not in aside_before]
            assert sorted(new) == sorted(kept_bytes)
            assert len(notices) == len(kept_bytes)
            # New questions take numbers past every conversation and turn there is.
            top = max(now, default=0)
            top_turn = max((t for _, turns in now.values() for t in turns), default=0)
            fresh = [_converse(lib, rng, f"{round_}.{n}") for n in range(2)]
            assert min(fresh) > top
            if now:
                extra = _converse(lib, rng, f"{round_}.more", rng.choice(sorted(now)))
                assert max(_held(lib)[extra][1]) > top_turn
            held = _held(lib)
        figures["rounds"] += 1
    print(f"\nbackup torture: {figures}, conversations at the end: {len(held)}")
    assert figures == {**figures, "rounds": ROUNDS, "lost": 0}
