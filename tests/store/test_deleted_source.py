"""A deleted source reads as missing, not wiped (issue 45): an old answer whose source file
was deleted says so in one line, not one "(Removed with its source document.)" per
sentence, and reads as it did when the file comes back.

Real model, real DuckDB, real files; the fake Ollama server writes an answer of two
sentences drawn on one file and one on another.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from core.config import Settings
from core.generation.qa import DoneEvent, ask
from core.library import Library
from core.llm import OllamaClient
from core.store.redaction import REMOVED_SENTENCE
from tests.conftest import SAMPLE_DOCS
from tests.fake_ollama import Messages, sources_in
from tests.helpers import cli

STIPEND = (
    "The lighthouse keeper's stipend is 312 guilders per lunar quarter, paid in silver "
    "at the harbour office."
)
LAMP = "Keepers light the lamp at dusk and trim the wick twice a night."
LIGHTHOUSE = f"Lighthouse duties\n\n{STIPEND} {LAMP}\n\nThe relief keeper arrives by boat.\n"
QUESTION = "What is the lighthouse keeper paid, and what are the keeper's duties at night?"
MISSING = (
    "Part of this answer is missing: its source file lighthouse.txt was deleted or removed "
    "from the library; its text returns if the file does."
)


def two_sentences_on_the_lighthouse(messages: Messages) -> str:
    sources = sources_in(messages)
    keeper = next(i for i, s in enumerate(sources, 1) if "guilders" in s)
    other = next((i for i, s in enumerate(sources, 1) if "guilders" not in s), None)
    answer = f"{STIPEND} [{keeper}] {LAMP} [{keeper}]"
    if other is not None:
        answer += f"\n\nAlso: the other source says more [{other}]."
    return answer


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "home"
    monkeypatch.setenv("LECTERN_HOME", str(home))
    monkeypatch.delenv("OLLAMA_HOST", raising=False)
    return home


def show(home: Path, conversation: int) -> str:
    done = cli(home, "conversations", "show", str(conversation))
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    return done.stdout


def test_a_deleted_source_file_is_one_line_and_its_text_returns_with_the_file(
    home: Path, tmp_path: Path, embedder: object, fake_ollama: object
) -> None:
    coast = tmp_path / "coast"
    coast.mkdir()
    note = coast / "lighthouse.txt"
    note.write_text(LIGHTHOUSE, encoding="utf-8")
    docs = tmp_path / "docs"
    docs.mkdir()
    shutil.copy(SAMPLE_DOCS / "expense-limits-note.txt", docs)
    fake_ollama.answer = two_sentences_on_the_lighthouse  # type: ignore[attr-defined]
    settings = Settings(home=home)
    with Library(settings, embedder=embedder) as lib:  # type: ignore[arg-type]
        lib.index([coast, docs])
        events = list(ask(lib, QUESTION, client=OllamaClient(fake_ollama.url)))  # type: ignore[attr-defined]
        done = events[-1]
        assert isinstance(done, DoneEvent) and done.conversation_id is not None
        assert "312 guilders" in done.answer
        conversation = done.conversation_id
    before = show(home, conversation)
    assert "312 guilders" in before and "Part of this answer is missing" not in before

    note.unlink()
    with Library(settings, embedder=embedder) as lib:  # type: ignore[arg-type]
        lib.sync()
        stored = lib.conversations.turns(conversation)[0].answer
        assert stored.count(REMOVED_SENTENCE) >= 2  # the record keeps a place per sentence
    gone = show(home, conversation)
    assert REMOVED_SENTENCE not in gone and "guilders" not in gone
    assert gone.count(MISSING) == 1
    assert "(gone from the library)" in gone
    # What did not draw on the file is still there, as written.
    assert re.search(r"Also: the other source says more \[\d\]\.", gone) or "Also:" not in before

    note.write_text(LIGHTHOUSE, encoding="utf-8")
    with Library(settings, embedder=embedder) as lib:  # type: ignore[arg-type]
        lib.sync()
    back = show(home, conversation)
    assert back == before
