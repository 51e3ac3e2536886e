"""The optional third stage: the user's LLM puts an answer's candidate sources in order.

A real library (SQuAD articles and a note), the real model and DuckDB, the fake Ollama
server over HTTP: the only fake allowed."""

from __future__ import annotations

import argparse
import io
from collections.abc import Iterator
from pathlib import Path

import pytest

from core.cli.answer import cmd_ask
from core.config import Settings
from core.generation.llm_order import LLM_RERANK_CANDIDATES, parse_order
from core.generation.qa import SourcesEvent
from core.library import Library
from core.llm import OllamaClient
from core.retrieval.search import ANSWER_LEAD
from tests.fake_ollama import FakeOllama, Messages, default_answer, sources_in
from tests.generation.test_ask import NOTE, done_of, qa_library, run  # noqa: F401 - the module's library
from tests.helpers import write_files

QUESTION = "Who was the leader of the Norse raiders?"


def _is_rerank(messages: Messages) -> bool:
    return "You rank passages" in str(messages[0].get("content", ""))


@pytest.fixture()
def ordering(qa_library: Library) -> Iterator[Library]:  # noqa: F811
    original = qa_library.settings
    qa_library.settings_store.replace(original.with_changes(llm_rerank=True))
    try:
        yield qa_library
    finally:
        qa_library.settings_store.replace(original)


def test_reply_numbers_are_read_in_order_once() -> None:
    assert parse_order("3, 1, 7", 5) == [2, 0]  # 7 is not a passage
    assert parse_order("Passages [2] and [2], then 4.", 4) == [1, 3]
    assert parse_order("None of them help.", 4) == []


def test_off_by_default_no_ordering_request(
    qa_library: Library,  # noqa: F811
    fake_ollama: FakeOllama,
) -> None:
    done = done_of(run(qa_library, QUESTION, client=OllamaClient(fake_ollama.url)))
    assert "llm_rerank_s" not in done.timings
    assert not [r for r in fake_ollama.requests_to("/api/chat") if _is_rerank(r.messages)]


def test_the_model_puts_the_candidates_in_order(ordering: Library, fake_ollama: FakeOllama) -> None:
    # As an answer searches: the best document's passages lead (ANSWER_LEAD).
    searched = ordering.search(QUESTION, k=LLM_RERANK_CANDIDATES, lead=ANSWER_LEAD)
    assert len(searched) >= 5
    # The model prefers the fifth passage search found, then the second.
    fake_ollama.answer = lambda m: "5, 2" if _is_rerank(m) else default_answer(m)
    # Three sources per answer: the fifth is only there because more were retrieved.
    events = run(ordering, QUESTION, client=OllamaClient(fake_ollama.url), k=3)
    done = done_of(events)
    sources = next(e for e in events if isinstance(e, SourcesEvent)).hits
    assert [h.chunk_id for h in sources] == [
        h.chunk_id for h in (searched[4], searched[1], searched[0])
    ]
    assert done.mode == "generated" and done.timings["llm_rerank_s"] >= 0
    asked = [r for r in fake_ollama.requests_to("/api/chat") if _is_rerank(r.messages)]
    assert len(asked) == 1
    shown = asked[0].messages[1]["content"]
    assert len(sources_in(asked[0].messages)) == len(searched) and QUESTION in shown
    assert asked[0].options["num_predict"] <= 64
    # The answer is written from the first k of the new order, [1] the model's choice.
    assert len(sources_in(fake_ollama.last_chat.messages)) == len(sources) == 3
    # (sent as the passage's sentences around the question: each piece is its own words)
    first = sources_in(fake_ollama.last_chat.messages)[0]
    whole = " ".join(searched[4].text.split())
    assert all(" ".join(p.split()) in whole for p in first.split("…") if p.strip())


def test_a_reply_without_numbers_keeps_search_order_and_says_so(
    ordering: Library, fake_ollama: FakeOllama
) -> None:
    searched = ordering.search(QUESTION, k=6, lead=ANSWER_LEAD)
    fake_ollama.answer = lambda m: "I think they all help." if _is_rerank(m) else default_answer(m)
    events = run(ordering, QUESTION, client=OllamaClient(fake_ollama.url))
    sources = next(e for e in events if isinstance(e, SourcesEvent)).hits
    assert [h.chunk_id for h in sources] == [h.chunk_id for h in searched]
    done = done_of(events)
    assert [w.kind for w in done.warnings if w.kind.startswith("rerank")] == ["rerank_unread"]


def test_a_dead_server_quotes_the_documents_in_search_order(
    ordering: Library, fake_ollama: FakeOllama
) -> None:
    url = fake_ollama.url
    fake_ollama.stop()
    events = run(ordering, QUESTION, client=OllamaClient(url, connect_timeout=1.0))
    done = done_of(events)
    assert done.mode == "extractive" and done.answer
    assert "llm_rerank_s" not in done.timings
    assert [w.kind for w in done.warnings][:1] == ["llm_unavailable"]


def test_lectern_ask_shows_how_long_the_ordering_took(
    tmp_path: Path, lectern_home: Path, fake_ollama: FakeOllama, monkeypatch: pytest.MonkeyPatch
) -> None:
    docs = write_files(tmp_path / "docs", {"fees.md": NOTE})
    with Library(Settings(home=lectern_home)) as library:
        library.index([docs])
    (lectern_home / "settings.json").write_text('{"llm_rerank": true}', encoding="utf-8")
    monkeypatch.setenv("OLLAMA_HOST", fake_ollama.url)
    fake_ollama.answer = lambda m: "1" if _is_rerank(m) else default_answer(m)
    out, err = io.StringIO(), io.StringIO()
    args = argparse.Namespace(question="What is the membership fee?", json=False, k=None)
    assert cmd_ask(args, out=out, err=err) == 0, err.getvalue()
    assert "Sources put in order by llama3.2 in " in out.getvalue()
    assert [r for r in fake_ollama.requests_to("/api/chat") if _is_rerank(r.messages)]
