"""An answer's sources lead with the best document's passages (issue 44): keyword and
meaning search put different passages of the right document first (a table's row, its
section's opening), and one place per document left the row out of the answer."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from core.config import Settings
from core.embedding.models import Embedder
from core.generation.qa import DoneEvent, ask
from core.library import Library

MADE = Path(__file__).resolve().parents[2] / "bench" / "answer_sets" / "made"


@pytest.fixture(scope="module")
def notes_library(tmp_path_factory: pytest.TempPathFactory, embedder: Embedder) -> Library:
    root = tmp_path_factory.mktemp("notes")
    docs = root / "docs"
    docs.mkdir()
    # A person's notes: Markdown, text and a CSV (the scanned letters are not needed here).
    for path in MADE.iterdir():
        if path.suffix in (".md", ".txt", ".csv"):
            shutil.copy(path, docs / path.name)
    library = Library(Settings(home=root / "home"), embedder=embedder)
    library.index([docs])
    return library


def _answer(library: Library, question: str) -> DoneEvent:
    events = list(ask(library, question, use_llm=False, store=False))
    done = events[-1]
    assert isinstance(done, DoneEvent)
    return done


def test_a_row_in_the_best_documents_second_passage_answers(notes_library: Library) -> None:
    done = _answer(notes_library, "How much did the quartz worktop cost?")
    assert done.mode == "extractive"
    assert "1,890" in done.answer and "Quartz worktop" in done.answer
    assert Path(done.citations[0].hit.path).name == "renovation_log.md"
    # The search tab still shows one passage of each document first.
    shown = notes_library.search("How much did the quartz worktop cost?")
    names = [Path(h.path).name for h in shown]
    assert len(set(names[:4])) == 4
