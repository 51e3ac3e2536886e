"""A conversation exists from its first question (issue 45): an answer stopped, failed
or cut off by the end of the process is kept with what it had, marked, listed, found by
conversation search and in the backup, in the app's calls and the CLI's.

Real model, real DuckDB, real files; the fake Ollama server streams slowly, fails
mid-answer, and is cut off by a Ctrl+C or a ``kill -9`` of ``lectern ask``.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from core.config import Settings
from core.generation.qa import DoneEvent, ErrorEvent, SourcesEvent, TokenEvent, ask
from core.library import Library
from core.llm import OllamaClient
from core.store.backup import RecordBackup
from tests.conftest import REPO, SAMPLE_DOCS
from tests.fake_ollama import FakeOllama
from tests.helpers import cli, lectern_env

QUESTION = "What is the monthly limit of the corporate card?"
# Long enough to be stopped in the middle: 120 words at 0.05 s each.
LONG_ANSWER = "The corporate card has a monthly limit of EUR 5,000 [1]. " * 12


@pytest.fixture(scope="module")
def indexed(tmp_path_factory: pytest.TempPathFactory, embedder: object) -> Path:
    base = tmp_path_factory.mktemp("stopped")
    docs = base / "docs"
    docs.mkdir()
    for name in ("expense-limits-note.txt", "travel-policy.html"):
        shutil.copy(SAMPLE_DOCS / name, docs / name)
    home = base / "home"
    with Library(Settings(home=home), embedder=embedder) as lib:  # type: ignore[arg-type]
        assert lib.index([docs]).added == 2
    return home


@pytest.fixture
def home(indexed: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    copy = tmp_path / "home"
    shutil.copytree(indexed, copy)
    monkeypatch.setenv("LECTERN_HOME", str(copy))
    monkeypatch.delenv("OLLAMA_HOST", raising=False)
    return copy


@pytest.fixture
def slow(fake_ollama: FakeOllama) -> FakeOllama:
    fake_ollama.answer = LONG_ANSWER
    fake_ollama.token_delay_s = 0.05
    return fake_ollama


def listed(home: Path) -> list[dict]:
    done = cli(home, "conversations", "list", "--json")
    assert done.returncode == 0, done.stderr
    return list(json.loads(done.stdout.splitlines()[-1])["conversations"])


def shown(home: Path, conversation: int) -> tuple[dict, str]:
    """``conversations show`` as JSON, and as the person reads it."""
    as_json = cli(home, "conversations", "show", str(conversation), "--json")
    assert as_json.returncode == 0, as_json.stderr
    text = cli(home, "conversations", "show", str(conversation))
    assert text.returncode == 0 and "Traceback" not in text.stderr, text.stderr
    return json.loads(as_json.stdout.splitlines()[-1]), text.stdout


def found_by_search(home: Path, words: str) -> list[int]:
    done = cli(home, "conversations", "search", words, "--json")
    assert done.returncode == 0, done.stderr
    return [c["id"] for c in json.loads(done.stdout.splitlines()[-1])["conversations"]]


def backed_up(home: Path, conversation: int) -> dict:
    saved = {c["id"]: c for c in RecordBackup(home / "backup").load_conversations()}
    return saved[conversation]


def test_an_answer_stopped_midway_is_kept_marked_listed_found_and_backed_up(
    home: Path, slow: FakeOllama, embedder: object
) -> None:
    cancel = threading.Event()
    events = []
    with Library(Settings(home=home), embedder=embedder) as lib:  # type: ignore[arg-type]
        for event in ask(lib, QUESTION, client=OllamaClient(slow.url), cancel=cancel):
            events.append(event)
            tokens = [e for e in events if isinstance(e, TokenEvent)]
            if len(tokens) == 8:
                cancel.set()  # what Esc does in the app
    done = events[-1]
    assert isinstance(done, DoneEvent) and done.conversation_id is not None
    # The conversation was made when the question was asked: its id comes with the sources.
    sources = next(e for e in events if isinstance(e, SourcesEvent))
    assert sources.conversation_id == done.conversation_id
    partial = "".join(e.text for e in events if isinstance(e, TokenEvent))
    assert 0 < len(partial) < len(LONG_ANSWER)

    conversation = done.conversation_id
    assert [(c["id"], c["title"], c["questions"]) for c in listed(home)] == [
        (conversation, QUESTION, 1)
    ]
    assert found_by_search(home, "corporate card monthly") == [conversation]
    record, text = shown(home, conversation)
    [turn] = record["turns"]
    assert turn["state"] == "stopped" and turn["question"] == QUESTION
    assert turn["answer"] and turn["answer"] in LONG_ANSWER
    assert "[Stopped before the answer was finished.]" in text
    assert backed_up(home, conversation)["turns"][0]["state"] == "stopped"


def test_an_answer_whose_events_are_closed_midway_is_kept_stopped(
    home: Path, slow: FakeOllama, embedder: object
) -> None:
    """A window closed or a socket gone while the answer streams: the events are closed
    (GeneratorExit), and the turn keeps what was shown."""
    with Library(Settings(home=home), embedder=embedder) as lib:  # type: ignore[arg-type]
        events = ask(lib, QUESTION, client=OllamaClient(slow.url))
        seen = ""
        for event in events:
            if isinstance(event, TokenEvent):
                seen += event.text
                if len(seen.split()) >= 6:
                    break
        events.close()  # type: ignore[attr-defined]
    [conversation] = listed(home)
    record, _ = shown(home, conversation["id"])
    [turn] = record["turns"]
    assert turn["state"] == "stopped" and turn["answer"] == seen.strip()


def test_a_failed_answer_is_kept_with_its_error(
    home: Path, fake_ollama: FakeOllama, embedder: object
) -> None:
    fake_ollama.error_after_tokens = (0, "the model ran out of memory")
    with Library(Settings(home=home), embedder=embedder) as lib:  # type: ignore[arg-type]
        events = list(ask(lib, QUESTION, client=OllamaClient(fake_ollama.url)))
    error = events[-1]
    assert isinstance(error, ErrorEvent) and error.conversation_id is not None
    assert found_by_search(home, "corporate card") == [error.conversation_id]
    record, text = shown(home, error.conversation_id)
    [turn] = record["turns"]
    assert turn["state"] == "failed" and turn["question"] == QUESTION
    assert "The answer failed" in text and "out of memory" in text


def start_asking(home: Path, fake: FakeOllama, out: Path) -> subprocess.Popen[bytes]:
    with out.open("wb") as stdout:
        return subprocess.Popen(
            [sys.executable, "-m", "core", "ask", QUESTION],
            cwd=REPO,
            env=lectern_env(home, OLLAMA_HOST=f"127.0.0.1:{fake.port}"),
            stdout=stdout,
            stderr=subprocess.PIPE,
            # Ctrl+C as a terminal's foreground job has it (a suite run in the
            # background hands its children SIGINT ignored).
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )


def wait_for_words(asking: subprocess.Popen[bytes], out: Path, words: int) -> str:
    deadline = time.monotonic() + 180
    while len(out.read_text(errors="replace").split()) < words:
        assert asking.poll() is None, asking.stderr.read() if asking.stderr else ""
        assert time.monotonic() < deadline, "no answer streamed"
        time.sleep(0.05)
    return out.read_text(errors="replace")


def test_ctrl_c_in_lectern_ask_keeps_the_question_and_the_answer_so_far(
    home: Path, slow: FakeOllama, tmp_path: Path
) -> None:
    out = tmp_path / "ask.out"
    asking = start_asking(home, slow, out)
    try:
        wait_for_words(asking, out, 10)
        asking.send_signal(signal.SIGINT)
        _, err = asking.communicate(timeout=60)
    finally:
        if asking.poll() is None:
            asking.kill()
            asking.wait(timeout=30)
    assert asking.returncode == 130 and b"Cancelled." in err and b"Traceback" not in err
    printed = out.read_text()
    [conversation] = listed(home)
    assert conversation["title"] == QUESTION
    record, text = shown(home, conversation["id"])
    [turn] = record["turns"]
    assert turn["state"] == "stopped"
    assert turn["answer"] and turn["answer"] in printed
    assert "[Stopped before the answer was finished.]" in text


def test_lectern_ask_killed_midway_leaves_the_turn_cut_off_with_its_text_so_far(
    home: Path, slow: FakeOllama, tmp_path: Path
) -> None:
    out = tmp_path / "ask.out"
    asking = start_asking(home, slow, out)
    try:
        wait_for_words(asking, out, 10)
        time.sleep(2.5)  # the answer so far is stored every 2 s while it streams
        printed = out.read_text()
        os.kill(asking.pid, signal.SIGKILL)
        asking.wait(timeout=30)
    finally:
        if asking.poll() is None:
            asking.kill()
            asking.wait(timeout=30)
    [conversation] = listed(home)
    assert conversation["title"] == QUESTION
    record, text = shown(home, conversation["id"])
    [turn] = record["turns"]
    assert turn["state"] == "cut_off"
    assert turn["answer"] and printed.strip().startswith(turn["answer"])
    assert "[Lectern was closed before this answer was finished.]" in text
    assert found_by_search(home, "corporate card") == [conversation["id"]]


@pytest.fixture(autouse=True)
def _no_leftover_server(fake_ollama: FakeOllama) -> Iterator[None]:
    yield
    fake_ollama.token_delay_s = 0.0
    fake_ollama.error_after_tokens = None
