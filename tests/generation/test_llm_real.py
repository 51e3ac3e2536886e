"""Lectern's answer path against a real language model: llama.cpp's server (xllamacpp)
with SmolLM2-135M-Instruct, on loopback (bench/llm_server.py installs and starts it).

A 135M model's answers prove little about quality; what these tests hold is everything
between Lectern and a real server: chat template, streaming, context sizing, the server's
own errors, prompt caching, citation forms of real model output and timings. Each covers
a defect found running Lectern against llama.cpp for the first time.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.llm_server import LLMServer
from core.config import Settings
from core.embedding.models import load_embedder
from core.generation.qa import (
    MODEL_UNCHECKED,
    DoneEvent,
    DraftEvent,
    ErrorEvent,
    SourcesEvent,
    TokenEvent,
    ask,
)
from core.library import Library
from core.llm import OpenAICompatClient, make_client
from tests.conftest import SHARED_DATA

pytestmark = pytest.mark.llm

SQUAD = SHARED_DATA / "squad-small" / "squad_small.json"


@pytest.fixture(scope="module")
def server() -> Iterator[LLMServer]:
    with LLMServer(ctx=4096) as running:
        yield running


@pytest.fixture(scope="module")
def library(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Library]:
    if not SQUAD.exists():
        pytest.skip(f"evaluation data not found at {SQUAD}")
    root = tmp_path_factory.mktemp("llm")
    docs = root / "docs"
    docs.mkdir()
    squad = json.loads(SQUAD.read_text(encoding="utf-8"))
    for article in squad["data"]:
        for i, paragraph in enumerate(article["paragraphs"][:12]):
            (docs / f"{article['title'].lower()}-{i:02}.txt").write_text(
                f"{article['title']}\n\n{paragraph['context']}\n", encoding="utf-8"
            )
    lib = Library(Settings(home=root / "home"), embedder=load_embedder())
    lib.index([docs])
    yield lib
    lib.close()


def client_for(server: LLMServer, **timeouts: float) -> OpenAICompatClient:
    return OpenAICompatClient(server.url, prompt_timeout=600.0, **timeouts)


def answer(library: Library, question: str, client: object, **kwargs: object) -> list[object]:
    return list(ask(library, question, client=client, store=False, **kwargs))  # type: ignore[arg-type]


def done_of(events: list[object]) -> DoneEvent:
    assert isinstance(events[-1], DoneEvent), events[-1]
    return events[-1]


def answered(done: DoneEvent) -> bool:
    """Written, declined, or (a 135M model seldom cites) its text after the quote, marked
    unverified: the three ends of a model's answer."""
    if done.mode == "extractive":
        return any(w.kind == "quoted_first" for w in done.warnings) and MODEL_UNCHECKED in (
            done.answer
        )
    return done.mode in ("generated", "declined")


def test_a_real_model_streams_an_answer_whose_citations_are_checked(
    server: LLMServer, library: Library
) -> None:
    client = client_for(server)
    events = answer(library, "Who was the leader of the Norse raiders?", client)
    done = done_of(events)
    tokens = [e for e in events if isinstance(e, TokenEvent)]
    sources = [e for e in events if isinstance(e, SourcesEvent)][-1].hits
    assert len(tokens) > 3  # streamed, not one block
    assert answered(done) and done.answer.strip()
    # The single-model server's own name, not the configured default "llama3.2".
    assert done.model == "SmolLM2-135M-Instruct.Q4_1"
    for citation in done.citations:  # every citation points at a source and a real span
        assert 1 <= citation.n <= len(sources) and citation.hit == sources[citation.n - 1]
        assert citation.spans
    assert "<<" not in done.answer and "source-" not in done.answer
    timings = done.timings
    assert timings["first_token_s"] is not None and timings["eval_count"]
    assert timings["prompt_eval_count"] and timings["num_ctx"] is None


def test_the_second_question_reuses_the_servers_prompt_cache(
    server: LLMServer, library: Library
) -> None:
    # What is cached is the prompt; a 135M model's answers run on to the length allowed
    # (two of 1,024 tokens were two minutes of this test on two cores), so they are short.
    before = library.settings
    library.settings_store.replace(before.with_changes(answer_max_tokens=64))
    try:
        client = client_for(server)
        first = done_of(answer(library, "When were the Normans in Normandy?", client))
        second = done_of(answer(library, "What is computational complexity theory?", client))
    finally:
        library.settings_store.replace(before)
    # The instructions come first and are the same for every question, so the server
    # reads them once: before, the request tag opened them and 1,317 of 1,320 tokens
    # were read again.
    assert first.timings["prompt_eval_count"] and second.timings["prompt_eval_count"]
    cached = int(second.timings["prompt_cached"] or 0)
    assert cached >= 150, second.timings
    assert int(second.timings["prompt_read"] or 0) + cached == second.timings["prompt_eval_count"]


def test_a_server_slow_to_read_the_prompt_is_waited_for_and_the_quote_shown_meanwhile(
    library: Library,
) -> None:
    # One thread and small prompt batches: the server takes seconds to read the prompt,
    # far past a 0.3 s silence limit; it is alive, so the answer is waited for.
    with LLMServer(ctx=4096, threads=1, batch=64) as slow:
        client = OpenAICompatClient(slow.url, first_token_timeout=0.3, prompt_timeout=600.0)
        events = answer(library, "What century did the Normans first gain their identity?", client)
    done = done_of(events)
    assert answered(done), done.warnings
    assert float(done.timings["first_token_s"] or 0) > 0.3
    drafts = [e for e in events if isinstance(e, DraftEvent)]
    first_token = next(i for i, e in enumerate(events) if isinstance(e, TokenEvent))
    assert drafts and events.index(drafts[0]) < first_token  # the quote came first
    assert "[1]" in drafts[0].answer or drafts[0].declined
    assert not any(w.kind == "llm_timeout" for w in done.warnings)


def test_a_small_context_is_read_from_the_server_and_the_prompt_cut_to_fit(
    library: Library,
) -> None:
    with LLMServer(ctx=1024) as small:
        client = client_for(small)
        assert client.context_length("anything") == 1024
        events = answer(library, "Who was the duke in the battle of Hastings?", client, k=8)
        done = done_of(events)
        assert not any(isinstance(e, ErrorEvent) for e in events)
        assert answered(done)
        assert any(w.kind == "sources_trimmed" for w in done.warnings)
        assert 1 <= int(done.timings["sources_sent"] or 0) < 8

        # A server that does not say its context: the prompt is sized for 4,096 tokens
        # and refused; the server's own count then decides how many sources to drop.
        client = client_for(small)
        client.context_length = lambda model: None  # type: ignore[method-assign]
        events = answer(library, "Who was the duke in the battle of Hastings?", client, k=8)
        done = done_of(events)
        assert not any(isinstance(e, ErrorEvent) for e in events)
        assert done.mode in ("generated", "declined", "extractive")
        assert int(done.timings.get("context_retries") or 0) >= 1


def test_a_server_killed_mid_answer_keeps_the_partial_answer(library: Library) -> None:
    with LLMServer(ctx=4096) as doomed:
        client = client_for(doomed)
        events: list[object] = []
        for event in ask(
            library, "Describe the Norman conquest in detail.", client=client, store=False
        ):
            events.append(event)
            if (
                isinstance(event, TokenEvent)
                and sum(isinstance(e, TokenEvent) for e in events) == 3
            ):
                doomed.stop()
    done = done_of(events)
    assert answered(done) and done.mode != "declined" and done.answer.strip()
    assert any(w.kind == "incomplete" for w in done.warnings)


def test_a_server_gone_before_the_answer_quotes_the_documents(library: Library) -> None:
    stopped = LLMServer(ctx=2048).start()
    url = stopped.url
    stopped.stop()
    done = done_of(
        answer(library, "Who was the leader of the Norse raiders?", OpenAICompatClient(url))
    )
    assert done.mode in ("extractive", "declined")
    assert done.warnings[0].kind == "llm_unavailable"


def test_ollama_kind_pointed_at_llama_cpp_says_so(server: LLMServer, library: Library) -> None:
    settings = Settings(home=library.settings.home, llm_kind="ollama", llm_url=server.url[:-3])
    client = make_client(settings)
    try:
        done = done_of(answer(library, "Who was the leader of the Norse raiders?", client))
    finally:
        client.close()
    assert done.mode in ("extractive", "declined")
    warning = done.warnings[0]
    assert "is not Ollama" in warning.message and "''" not in warning.message
    assert "openai" in warning.message


def test_cancel_stops_a_real_stream(server: LLMServer, library: Library) -> None:
    cancel = threading.Event()
    events: list[object] = []
    for event in ask(
        library,
        "Describe the Normans.",
        client=client_for(server),
        store=False,
        cancel=cancel,
    ):
        events.append(event)
        if isinstance(event, TokenEvent):
            cancel.set()
    done = done_of(events)
    assert any(w.kind == "cancelled" for w in done.warnings)


def test_models_command_names_the_servers_model(
    server: LLMServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import argparse
    import io

    from core.cli.answer import cmd_models

    home = tmp_path / "home"
    home.mkdir()
    (home / "settings.json").write_text(
        json.dumps({"llm_kind": "openai", "llm_url": server.url}), encoding="utf-8"
    )
    monkeypatch.setenv("LECTERN_HOME", str(home))
    out = io.StringIO()
    assert cmd_models(argparse.Namespace(json=False), out=out) == 0
    text = out.getvalue()
    assert "* SmolLM2-135M-Instruct.Q4_1" in text and "not installed" not in text
    assert "pull" not in text
