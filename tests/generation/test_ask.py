"""``ask`` end to end: a tiny real library, the fake Ollama, every failure path, the CLI."""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from core.config import Settings
from core.embedding.models import load_embedder
from core.generation.citations import REFUSAL
from core.generation.extractive import EXCERPT_FROM_CHARS
from core.generation.qa import (
    MODEL_UNCHECKED,
    REWRITING,
    DoneEvent,
    DraftEvent,
    ErrorEvent,
    SourcesEvent,
    StatusEvent,
    TokenEvent,
    WarningEvent,
    ask,
)
from core.library import Library
from core.llm import OllamaClient, OpenAICompatClient
from core.store.conversations import ConversationStore
from core.store.db import Database
from tests.fake_ollama import FakeOllama, Messages, quote_first_source, sources_in

# Committed articles in the SQuAD layout, so these tests run without ../shared/data.
PARAGRAPHS = Path(__file__).resolve().parents[1] / "fixtures" / "paragraphs.json"

NOTE = """# Office fees 2024

The membership fee for 2024 is 240 euros per year, payable before 31 March.
Late payments cost an extra 15 euros. The bank account is DE44 5001 0517 5407 3249 31.
Questions go to the treasurer, Marta Keller, by email.
"""


@pytest.fixture(scope="module")
def qa_library(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Library]:
    root = tmp_path_factory.mktemp("qa")
    docs = root / "docs"
    docs.mkdir()
    articles = json.loads(PARAGRAPHS.read_text(encoding="utf-8"))
    for article in articles["data"]:
        text = "\n\n".join(p["context"] for p in article["paragraphs"][:4])
        (docs / f"{article['title'].lower()}.txt").write_text(
            f"{article['title']}\n\n{text}\n", encoding="utf-8"
        )
    (docs / "fees.md").write_text(NOTE, encoding="utf-8")
    lib = Library(Settings(home=root / "home"), embedder=load_embedder())
    report = lib.index([docs])
    assert report.added == 3 and not report.failed
    yield lib
    lib.close()


def run(library: Library, question: str, **kwargs) -> list:
    return list(ask(library, question, **kwargs))


def done_of(events: list) -> DoneEvent:
    assert isinstance(events[-1], DoneEvent), events[-1]
    return events[-1]


def model_answer(library: Library, fake: FakeOllama, reply: str, question: str) -> DoneEvent:
    """``question`` answered by the fake server with ``reply``."""
    fake.answer = reply
    return done_of(run(library, question, client=OllamaClient(fake.url)))


def check_order(events: list) -> None:
    kinds = [type(e).__name__ for e in events]
    pattern = r"^SourcesEvent,(TokenEvent,)+CitationsEvent,(WarningEvent,)*DoneEvent$"
    assert re.match(pattern, ",".join(kinds)), kinds


# --- the happy path -----------------------------------------------------------------------


def test_generated_answer_with_verified_citations(
    qa_library: Library, fake_ollama: FakeOllama
) -> None:
    client = OllamaClient(fake_ollama.url)
    events = run(qa_library, "Who was the leader of the Norse raiders?", client=client)
    check_order(events)
    sources = events[0]
    assert isinstance(sources, SourcesEvent) and sources.hits
    done = done_of(events)
    assert done.mode == "generated" and done.model == "llama3.2"
    assert "".join(e.text for e in events if isinstance(e, TokenEvent)) == done.answer
    assert done.answer.endswith("[1]")
    citation = done.citations[0]
    assert citation.n == 1 and citation.hit == sources.hits[0]
    document = qa_library.files.text(citation.hit.document_id)
    for span in citation.spans:
        assert citation.hit.start <= span.start < span.end <= citation.hit.end
        assert document[span.start : span.end] == span.text
    assert not [w for w in done.warnings if w.kind != "unsupported"]
    # What went over the wire: a context sized for prompt + answer, the delimited sources.
    chat = fake_ollama.last_chat
    assert (
        chat.options["num_ctx"]
        >= done.timings["prompt_tokens_estimated"] + chat.options["num_predict"]
    )
    assert len(sources_in(chat.messages)) == len(sources.hits)
    assert "Who was the leader of the Norse raiders?" in chat.messages[-1]["content"]
    assert done.timings["total_s"] > 0 and done.timings["prompt_eval_count"]


def test_a_long_passage_is_sent_as_its_sentences_around_the_question(
    qa_library: Library, fake_ollama: FakeOllama
) -> None:
    client = OllamaClient(fake_ollama.url)
    question = "Who was the leader of the Norse raiders?"
    events = run(qa_library, question, client=client)
    hits = events[0].hits
    sent = sources_in(fake_ollama.last_chat.messages)
    assert len(sent) == len(hits)
    cut = [
        (h, body)
        for h, body in zip(hits, sent, strict=True)
        if " ".join(body.split()) != " ".join(h.text.split())
    ]
    assert cut, "passages of many sentences are cut"
    for hit, body in cut:
        assert len(hit.text) > EXCERPT_FROM_CHARS and len(body) < 0.8 * len(hit.text)
        # Each piece is the passage's own words, the gaps marked.
        for piece in body.split("…"):
            assert " ".join(piece.split()) in " ".join(hit.text.split())
    assert any("Rollo" in body for body in sent)
    done = done_of(events)
    assert done.mode == "generated" and done.citations
    # Off: every passage goes whole.
    qa_library.settings_store.update(source_excerpts=False)
    try:
        run(qa_library, question, client=client)
        whole = sources_in(fake_ollama.last_chat.messages)
        assert [" ".join(b.split()) for b in whole] == [" ".join(h.text.split()) for h in hits]
    finally:
        qa_library.settings_store.update(source_excerpts=True)


def test_turns_are_stored_with_sources_and_citations(
    qa_library: Library, fake_ollama: FakeOllama
) -> None:
    done = done_of(
        run(
            qa_library, "What is the membership fee for 2024?", client=OllamaClient(fake_ollama.url)
        )
    )
    store = qa_library.conversations
    assert store is not None and done.conversation_id is not None
    turns = store.turns(done.conversation_id)
    assert len(turns) == 1 and turns[0].id == done.turn_id
    assert turns[0].answer == done.answer and turns[0].mode == "generated"
    assert turns[0].sources[0]["document"].endswith("fees.md") and turns[0].sources[0]["n"] == 1
    assert turns[0].citations[0]["spans"][0]["text"]
    assert store.get(done.conversation_id).title == "What is the membership fee for 2024?"


def test_follow_up_is_rewritten_before_retrieval(
    qa_library: Library, fake_ollama: FakeOllama
) -> None:
    def answer(messages: Messages) -> str:
        if "Standalone question:" in messages[-1]["content"]:
            return "Standalone question: When is the 2024 membership fee due?"
        return quote_first_source(messages)

    fake_ollama.answer = answer
    client = OllamaClient(fake_ollama.url)
    first = done_of(run(qa_library, "How much is the membership fee?", client=client))
    events = run(
        qa_library, "And when is it due?", conversation=first.conversation_id, client=client
    )
    done = done_of(events)
    assert done.question == "When is the 2024 membership fee due?"
    # Said before the model is asked (issue 46: "Searching your documents…" for ~30 s).
    assert events[0] == REWRITING
    assert isinstance(events[1], SourcesEvent) and events[1].question == done.question
    rewrite = [
        r for r in fake_ollama.requests_to("/api/chat") if "Standalone question:" in r.prompt_text
    ]
    assert len(rewrite) == 1 and "How much is the membership fee?" in rewrite[0].prompt_text
    assert done.conversation_id == first.conversation_id
    assert len(qa_library.conversations.turns(first.conversation_id)) == 2


def test_follow_up_without_a_model_adds_the_previous_key_terms(qa_library: Library) -> None:
    first = done_of(run(qa_library, "What is the membership fee for 2024?", use_llm=False))
    events = run(
        qa_library, "And the late payment?", conversation=first.conversation_id, use_llm=False
    )
    done = done_of(events)
    assert REWRITING not in events  # no model is asked: nothing to wait for
    assert done.question.startswith("And the late payment?") and "membership" in done.question
    assert done.mode == "extractive" and "15 euros" in done.answer


def test_refusal_is_counted_as_declined(qa_library: Library, fake_ollama: FakeOllama) -> None:
    fake_ollama.answer = REFUSAL
    done = done_of(
        run(qa_library, "What colour is the treasurer's car?", client=OllamaClient(fake_ollama.url))
    )
    assert done.mode == "declined" and done.answer == REFUSAL and not done.citations


def test_a_cited_answer_to_what_the_documents_do_not_say_is_flagged(
    qa_library: Library, fake_ollama: FakeOllama
) -> None:
    # A near miss answered with the nearby fact, cited and verified: the quote's decline
    # model finds no passage that answers the question, and the answer says so.
    done = model_answer(
        qa_library,
        fake_ollama,
        "Questions go to the treasurer, Marta Keller, by email [1].",
        "What colour is the treasurer's car?",
    )
    assert done.mode == "generated"
    assert "weak_evidence" in {w.kind for w in done.warnings}
    # A question the documents answer carries no such warning.
    done = model_answer(
        qa_library,
        fake_ollama,
        "The membership fee for 2024 is 240 euros per year [1].",
        "What is the membership fee for 2024?",
    )
    assert done.mode == "generated"
    assert "weak_evidence" not in {w.kind for w in done.warnings}


def test_invented_citations_and_numbers_are_reported(
    qa_library: Library, fake_ollama: FakeOllama
) -> None:
    fake_ollama.answer = (
        "The membership fee for 2024 is 260 euros per year [1][7]. It is paid by cheque."
    )
    events = run(
        qa_library, "What is the membership fee for 2024?", client=OllamaClient(fake_ollama.url)
    )
    done = done_of(events)
    kinds = {w.kind for w in done.warnings}
    assert {"unknown_citation", "unverified_number", "unsupported"} <= kinds
    assert "[7]" not in done.answer and "[1]" in done.answer
    assert [w for w in events if isinstance(w, WarningEvent)] == list(done.warnings)


def test_an_uncited_model_answer_follows_the_quote(
    qa_library: Library, fake_ollama: FakeOllama
) -> None:
    # Issue 44: a follow-up got a small model's uncited "The answer is: 3" in place of the
    # correct quoted value. The quote is the answer; the model's text follows, marked.
    question = "What is the membership fee for 2024?"
    done = model_answer(qa_library, fake_ollama, "The answer is: 3", question)
    assert done.mode == "extractive" and done.model == "llama3.2"
    quote, _, model_text = done.answer.partition("\n\n")
    assert "240 euros" in quote and quote.endswith("]")
    assert model_text == f"{MODEL_UNCHECKED} The answer is: 3"
    assert done.citations and all("240" in c.quote or c.spans for c in done.citations)
    assert done.warnings[0].kind == "quoted_first"
    # A figure its cited source lacks is the same failure.
    reply = "The membership fee for 2024 is 260 euros per year [1]."
    done = model_answer(qa_library, fake_ollama, reply, question)
    assert done.mode == "extractive" and "240 euros" in done.answer.partition("\n\n")[0]
    assert "260 euros" in done.answer.partition("\n\n")[2]
    # When no passage answers, the decline comes first and the model's text after it.
    done = model_answer(
        qa_library, fake_ollama, "It is blue.", "What colour is the treasurer's car?"
    )
    assert done.mode == "declined" and done.answer.startswith(REFUSAL)
    assert done.answer.endswith(f"{MODEL_UNCHECKED} It is blue.")


# --- failures -------------------------------------------------------------------------------


def test_server_down_falls_back_to_extracted_sentences(
    qa_library: Library, fake_ollama: FakeOllama
) -> None:
    url = fake_ollama.url
    fake_ollama.stop()
    events = run(qa_library, "Who was the leader of the Norse raiders?", client=OllamaClient(url))
    check_order(events)
    done = done_of(events)
    assert done.mode == "extractive" and done.model is None
    assert "Rollo" in done.answer and re.search(r"\[\d\]$", done.answer)
    warning = done.warnings[0]
    assert (
        warning.kind == "llm_unavailable"
        and url in warning.message
        and "ollama serve" in warning.message
    )
    span = done.citations[0].spans[0]
    assert (
        "Rollo" in span.text
        and qa_library.files.text(done.citations[0].hit.document_id)[span.start : span.end]
        == span.text
    )


def test_default_client_comes_from_the_settings(
    qa_library: Library, fake_ollama: FakeOllama
) -> None:
    original = qa_library.settings
    qa_library.settings_store.replace(original.with_changes(llm_url=fake_ollama.localhost_url))
    try:
        done = done_of(run(qa_library, "Who was the leader of the Norse raiders?"))
    finally:
        qa_library.settings_store.replace(original)
    assert done.mode == "generated" and fake_ollama.requests_to("/api/chat")


def test_missing_model_quotes_the_documents_and_names_the_model(
    qa_library: Library, fake_ollama: FakeOllama
) -> None:
    """Issue 12: a model that is not installed gives the quoted answer, as a dead server
    does, with a warning naming the model to download (not "No answer")."""
    events = run(
        qa_library,
        "What is the membership fee for 2024?",
        client=OllamaClient(fake_ollama.url),
        model="mistral",
    )
    check_order(events)
    assert not [e for e in events if isinstance(e, ErrorEvent)]
    done = done_of(events)
    assert done.mode == "extractive" and done.citations and done.model is None
    assert "240 euros" in done.answer
    missing = [w for w in done.warnings if w.kind == "model_missing"]
    assert len(missing) == 1 and missing[0].model == "mistral"
    assert "mistral" in missing[0].message and "pull" in missing[0].message
    assert missing[0].to_json()["model"] == "mistral"
    assert not fake_ollama.requests_to("/api/chat")


def test_missing_model_for_a_follow_up_still_answers(
    qa_library: Library, fake_ollama: FakeOllama
) -> None:
    """The rewrite of a follow-up is the first request; its 404 must not end the turn."""
    client = OllamaClient(fake_ollama.url)
    first = done_of(run(qa_library, "Who led the Norse?", client=client))
    events = run(
        qa_library,
        "When did he die?",
        conversation=first.conversation_id,
        client=client,
        model="mistral",
    )
    done = done_of(events)
    assert done.mode in ("extractive", "declined")
    assert [w.kind for w in done.warnings].count("model_missing") == 1


def test_stream_cut_keeps_the_partial_answer(qa_library: Library, fake_ollama: FakeOllama) -> None:
    fake_ollama.die_after_tokens = 4
    events = run(
        qa_library, "Who was the leader of the Norse raiders?", client=OllamaClient(fake_ollama.url)
    )
    check_order(events)
    done = done_of(events)
    # Cut before it cited anything: the quote comes first, the partial answer after it.
    assert done.mode == "extractive" and len(done.answer.partition(MODEL_UNCHECKED)[2].split()) == 4
    assert any(w.kind == "incomplete" for w in done.warnings)


def test_a_server_killed_mid_answer_is_told_in_one_plain_sentence(
    qa_library: Library, fake_ollama: FakeOllama
) -> None:
    fake_ollama.die_after_tokens = 4
    done = done_of(
        run(
            qa_library,
            "Who was the leader of the Norse raiders?",
            client=OllamaClient(fake_ollama.url),
        )
    )
    (warning,) = [w for w in done.warnings if w.kind == "incomplete"]
    text = warning.message
    # No library wording ("incomplete chunked read"), no repeated clause, one sentence.
    assert "(" not in text and "chunked" not in text and "peer" not in text
    assert text.count("partial answer") <= 1 and text.count(".") == 1
    assert "stopped" in text


def test_no_first_token_falls_back(qa_library: Library, fake_ollama: FakeOllama) -> None:
    fake_ollama.stall_before_first_s = 20
    started = time.monotonic()
    done = done_of(
        run(
            qa_library,
            "Who was the leader of the Norse raiders?",
            client=OllamaClient(fake_ollama.url, first_token_timeout=0.5),
        )
    )
    assert time.monotonic() - started < 10
    assert done.mode == "extractive" and done.warnings[0].kind == "llm_timeout"


def test_stall_mid_answer_keeps_the_partial_answer(
    qa_library: Library, fake_ollama: FakeOllama
) -> None:
    fake_ollama.stall_between_s = 20
    fake_ollama.stall_after_tokens = 3
    done = done_of(
        run(
            qa_library,
            "Who was the leader of the Norse raiders?",
            client=OllamaClient(fake_ollama.url, idle_timeout=0.5),
        )
    )
    assert done.mode == "extractive" and len(done.answer.partition(MODEL_UNCHECKED)[2].split()) == 3
    assert any(w.kind == "incomplete" for w in done.warnings)


def test_cancel_stops_at_once_and_is_kept_as_stopped(
    qa_library: Library, fake_ollama: FakeOllama
) -> None:
    fake_ollama.stall_between_s = 30
    fake_ollama.stall_after_tokens = 2
    cancel = threading.Event()
    events = []
    started = None
    for event in ask(
        qa_library,
        "Who was the leader of the Norse raiders?",
        client=OllamaClient(fake_ollama.url),
        cancel=cancel,
    ):
        events.append(event)
        if isinstance(event, TokenEvent) and started is None:
            started = time.monotonic()
            threading.Timer(0.2, cancel.set).start()
    assert started is not None and time.monotonic() - started < 5
    done = done_of(events)
    assert any(w.kind == "cancelled" for w in done.warnings)
    # Kept with what had arrived, marked stopped (tests/generation/test_stopped_answer_kept.py).
    assert done.turn_id is not None and done.conversation_id is not None and done.answer
    [turn] = qa_library.conversations.turns(done.conversation_id)
    assert turn.state == "stopped" and turn.answer == done.answer


def test_context_too_small_for_one_source_quotes_the_documents(
    qa_library: Library, fake_ollama: FakeOllama
) -> None:
    # Not even one source fits: the person still gets the quoted answer, told why (it was
    # an error with no answer at all).
    fake_ollama.add_model("tiny", context_length=400)
    events = run(
        qa_library,
        "Who was the leader of the Norse raiders?",
        client=OllamaClient(fake_ollama.url),
        model="tiny",
    )
    done = done_of(events)
    assert not any(isinstance(e, ErrorEvent) for e in events)
    assert done.mode == "extractive" and done.citations
    assert done.warnings[0].kind == "context" and "400 tokens" in done.warnings[0].message
    assert not fake_ollama.requests_to("/api/chat")


def test_sources_are_trimmed_to_fit_the_model(qa_library: Library, fake_ollama: FakeOllama) -> None:
    # Small enough that even the passages' excerpts do not all fit.
    fake_ollama.add_model("small", context_length=1500)
    events = run(
        qa_library,
        "Who was the leader of the Norse raiders?",
        client=OllamaClient(fake_ollama.url),
        model="small",
        k=6,
    )
    done = done_of(events)
    sent = events[0].hits
    assert 1 <= len(sent) < 6
    assert any(w.kind == "sources_trimmed" for w in done.warnings)
    assert fake_ollama.last_chat.options["num_ctx"] <= 1500
    assert len(sources_in(fake_ollama.last_chat.messages)) == len(sent)


def test_silent_truncation_by_the_server_is_detected(
    qa_library: Library, fake_ollama: FakeOllama
) -> None:
    fake_ollama.ignore_num_ctx = True  # like a proxy that drops options; Ollama then uses 256 here
    # (a prompt of excerpts is small: 512 tokens read of it is no longer far too few)
    fake_ollama.default_num_ctx = 256
    done = done_of(
        run(
            qa_library,
            "Who was the leader of the Norse raiders?",
            client=OllamaClient(fake_ollama.url),
            k=6,
        )
    )
    assert any(w.kind == "truncated" for w in done.warnings)


def test_openai_compatible_server(qa_library: Library, fake_ollama: FakeOllama) -> None:
    done = done_of(
        run(
            qa_library,
            "Who was the leader of the Norse raiders?",
            client=OpenAICompatClient(fake_ollama.url),
        )
    )
    assert done.mode == "generated" and done.citations
    body = fake_ollama.last_chat.body
    assert fake_ollama.last_chat.path == "/v1/chat/completions" and "options" not in body


# --- without a model ----------------------------------------------------------------------


def test_extractive_answer_and_decline(qa_library: Library) -> None:
    done = done_of(run(qa_library, "How much is the late payment fee?", use_llm=False))
    assert done.mode == "extractive" and "15 euros" in done.answer
    assert not any(w.kind == "llm_unavailable" for w in done.warnings)
    declined = done_of(
        run(qa_library, "What is the boiling point of liquid nitrogen in kelvin?", use_llm=False)
    )
    assert declined.mode == "declined" and declined.answer == REFUSAL and not declined.citations
    unsaved = done_of(
        run(qa_library, "How much is the late payment fee?", use_llm=False, store=False)
    )
    assert unsaved.turn_id is None and unsaved.conversation_id is None
    assert isinstance(run(qa_library, "   ", use_llm=False)[-1], ErrorEvent)


def test_conversation_store_roundtrip_and_forgetting(tmp_path: Path) -> None:
    store = ConversationStore(Database(tmp_path / "c.duckdb"))
    cid = store.create("A question about fees " * 10)
    assert len(store.get(cid).title) <= 80
    from core.records import Citation, Hit, Span

    hit = Hit(1, 1, "/d/fees.md", "fees", "md", "Fee is 240 euros.", 0, 17, None, None, (), 0.5)
    citation = Citation(1, hit, (Span(0, 17, None, "Fee is 240 euros."),), "It is 240 euros [1].")
    store.add_turn(
        cid,
        question="q",
        standalone_question="q",
        answer="It is 240 euros [1].",
        mode="generated",
        sources=[hit],
        citations=[citation],
        warnings=[{"kind": "x", "message": "y"}],
    )
    assert store.list()[0].turn_count == 1
    assert store.forget_documents(["/d/fees.md"]) == 1
    turn = store.turns(cid)[0]
    assert (
        turn.sources[0]["text"] == ""
        and turn.citations[0]["quote"] == ""
        and turn.warnings[0]["kind"] == "x"
    )
    store.delete(cid)
    assert store.get(cid) is None and store.turns(cid) == []


# --- command line ---------------------------------------------------------------------------


@pytest.fixture
def cli_env(
    qa_library: Library, fake_ollama: FakeOllama, monkeypatch: pytest.MonkeyPatch
) -> FakeOllama:
    monkeypatch.setenv("LECTERN_HOME", str(qa_library.settings.home))
    monkeypatch.setenv("OLLAMA_HOST", f"127.0.0.1:{fake_ollama.port}")
    return fake_ollama


def test_cli_ask_json(cli_env: FakeOllama, capsys: pytest.CaptureFixture[str]) -> None:
    from core.cli.main import main

    assert main(["ask", "Who was the leader of the Norse raiders?", "--json"]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    result = json.loads(out[-1])
    assert set(result) >= {"answer", "mode", "citations", "warnings", "timings", "conversation"}
    assert result["mode"] == "generated"
    c = result["citations"][0]
    assert set(c) >= {"n", "document", "page", "start", "end", "quote"} and c["quote"]


def test_cli_ask_streams_then_lists_sources(
    cli_env: FakeOllama, capsys: pytest.CaptureFixture[str]
) -> None:
    from core.cli.main import main

    assert main(["ask", "What is the membership fee for 2024?"]) == 0
    out = capsys.readouterr().out
    assert "[1]" in out and re.search(r'^\[1\] .*fees\.md: ".+"$', out, re.M)


def test_cli_ask_errors_and_fallback(
    cli_env: FakeOllama, capsys: pytest.CaptureFixture[str]
) -> None:
    from core.cli.main import main

    # A missing model still answers by quoting, and says how to get the model.
    assert main(["ask", "Who was the leader of the Norse raiders?", "--model", "mistral"]) == 0
    captured = capsys.readouterr()
    assert "extracted from your documents" in captured.out
    assert "mistral" in captured.err and "lectern pull mistral" in captured.err
    cli_env.stop()
    assert main(["ask", "Who was the leader of the Norse raiders?", "--json"]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["mode"] == "extractive" and result["warnings"][0]["kind"] == "llm_unavailable"


def test_cli_models_and_pull(cli_env: FakeOllama, capsys: pytest.CaptureFixture[str]) -> None:
    from core.cli.main import main

    assert main(["models"]) == 0
    assert "llama3.2:latest" in capsys.readouterr().out
    assert main(["pull", "qwen3:0.6b"]) == 0
    captured = capsys.readouterr()
    assert "Pulled qwen3:0.6b." in captured.out and "pulling manifest" in captured.err
    assert main(["models", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert {m["name"] for m in listed["models"]} == {"llama3.2:latest", "qwen3:0.6b"}
    cli_env.stop()
    assert main(["models"]) != 0
    assert "ollama serve" in capsys.readouterr().err


def test_deleting_a_file_blanks_its_text_in_saved_answers(
    tmp_path: Path, embedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    note = docs / "fees.md"
    note.write_text(NOTE, encoding="utf-8")
    with Library(Settings(home=tmp_path / "home"), embedder=embedder) as lib:
        lib.index([docs])
        events = list(ask(lib, "How much is the late payment fee?", use_llm=False))
        done = next(e for e in events if isinstance(e, DoneEvent))
        store = lib.conversations
        turn = store.turns(done.conversation_id)[0]
        assert any("15 euros" in s.get("text", "") for s in turn.sources)
        note.unlink()
        lib.index()
        turn = store.turns(done.conversation_id)[0]
        assert all(s.get("text", "") == "" for s in turn.sources if s.get("document") == str(note))
        assert "15 euros" not in json.dumps(turn.sources)


def test_an_empty_library_says_to_add_a_folder(tmp_path: Path, embedder) -> None:
    with Library(Settings(home=tmp_path / "home"), embedder=embedder) as lib:
        done = done_of(run(lib, "How much is the late payment fee?", use_llm=False))
        kinds = [w.kind for w in done.warnings]
        assert "empty_library" in kinds and "no_sources" not in kinds
        (note,) = [w.message for w in done.warnings if w.kind == "empty_library"]
        assert "add a folder" in note.lower()
        # A library whose folders hold documents still says nothing matched.
        docs = tmp_path / "docs"
        docs.mkdir()
        (docs / "fees.md").write_text(NOTE, encoding="utf-8")
        lib.index([docs])
        done = done_of(run(lib, "zqxv wplk", use_llm=False))
        assert "empty_library" not in [w.kind for w in done.warnings]


def test_a_server_still_loading_its_model_is_waited_out(
    qa_library: Library, fake_ollama: FakeOllama
) -> None:
    # llama.cpp answers 503 "Loading model" while it starts; the question used to end
    # after 2 s with "check that the model server is running".
    fake_ollama.loading_for_s = 1.5
    events = run(
        qa_library,
        "Who was the leader of the Norse raiders?",
        client=OpenAICompatClient(fake_ollama.url, prompt_timeout=60.0),
    )
    done = done_of(events)
    assert done.mode == "generated", done.warnings
    statuses = [e for e in events if isinstance(e, StatusEvent)]
    assert statuses and statuses[0].kind == "loading" and "loading the model" in statuses[0].message
    assert len(fake_ollama.requests_to("/v1/chat/completions")) >= 2


def test_a_silent_server_that_is_alive_is_waited_for_and_the_quote_shown(
    qa_library: Library, fake_ollama: FakeOllama
) -> None:
    # Ollama reading a long prompt on a CPU sends nothing for minutes; it still answers a
    # status request, so the silence is not taken for a dead server.
    fake_ollama.stall_before_first_s = 2.5
    events = run(
        qa_library,
        "Who was the leader of the Norse raiders?",
        client=OllamaClient(fake_ollama.url, first_token_timeout=0.5, prompt_timeout=60.0),
    )
    done = done_of(events)
    assert done.mode == "generated", done.warnings
    drafts = [e for e in events if isinstance(e, DraftEvent)]
    first_token = next(i for i, e in enumerate(events) if isinstance(e, TokenEvent))
    assert drafts and events.index(drafts[0]) < first_token
    assert "[1]" in drafts[0].answer and drafts[0].citations
    assert done.answer != drafts[0].answer  # the written answer replaced the quote


def test_an_alive_server_past_the_wait_limit_is_named_as_slow_not_dead(
    qa_library: Library, fake_ollama: FakeOllama
) -> None:
    fake_ollama.stall_before_first_s = 20
    done = done_of(
        run(
            qa_library,
            "Who was the leader of the Norse raiders?",
            client=OllamaClient(fake_ollama.url, first_token_timeout=0.5, prompt_timeout=1.5),
        )
    )
    assert done.mode == "extractive" and done.warnings[0].kind == "llm_timeout"
    message = done.warnings[0].message
    assert "still reading" in message and "loading a large model" not in message
