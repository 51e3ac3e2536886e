"""LLM clients against the fake Ollama server: protocol, timeouts, cancel, every failure."""

from __future__ import annotations

import json
import threading
import time

import httpx
import pytest

from core.config import Settings
from core.errors import (
    ContextTooSmallError,
    LLMError,
    LLMTimeoutError,
    LLMUnavailableError,
    ModelNotFoundError,
    StreamInterruptedError,
)
from core.llm import (
    ChatDelta,
    OllamaClient,
    OpenAICompatClient,
    complete,
    make_client,
    normalise_url,
    partial_text,
)
from tests.fake_ollama import FakeOllama, unused_port

MESSAGES = [
    {"role": "system", "content": "Answer from the sources."},
    {
        "role": "user",
        "content": "<<source-ab12 n=1>>\nRollo led the Norse. He swore fealty.\n<<end-ab12>>\n\nQuestion: Who?",
    },
]


def text_of(deltas: list[ChatDelta]) -> str:
    return "".join(d.text for d in deltas)


# --- the fake speaks Ollama's protocol --------------------------------------------------


def test_fake_chat_stream_is_ndjson_with_final_counters(fake_ollama: FakeOllama) -> None:
    with (
        httpx.Client(base_url=fake_ollama.url) as http,
        http.stream("POST", "/api/chat", json={"model": "llama3.2", "messages": MESSAGES}) as r,
    ):
        assert r.status_code == 200
        assert r.headers["content-type"] == "application/x-ndjson"
        assert r.headers["transfer-encoding"] == "chunked"
        records = [json.loads(line) for line in r.iter_lines() if line]
    assert all(rec["done"] is False for rec in records[:-1])
    assert all(rec["message"]["role"] == "assistant" for rec in records)
    final = records[-1]
    assert final["done"] is True and final["done_reason"] == "stop"
    for key in (
        "total_duration",
        "load_duration",
        "prompt_eval_count",
        "prompt_eval_duration",
        "eval_count",
        "eval_duration",
    ):
        assert isinstance(final[key], int)
    assert "".join(rec["message"]["content"] for rec in records) == "Rollo led the Norse. [1]"


def test_fake_missing_model_is_404_with_ollamas_error_body(fake_ollama: FakeOllama) -> None:
    r = httpx.post(f"{fake_ollama.url}/api/chat", json={"model": "mistral", "messages": MESSAGES})
    assert r.status_code == 404
    assert r.json() == {"error": 'model "mistral" not found, try pulling it first'}


# --- Ollama client ----------------------------------------------------------------------


def test_list_models_and_context_length(fake_ollama: FakeOllama) -> None:
    fake_ollama.add_model("qwen3:4b", context_length=40960, family="qwen3", parameter_size="4.0B")
    client = OllamaClient(fake_ollama.url)
    models = {m.name: m for m in client.list_models()}
    assert set(models) == {"llama3.2:latest", "qwen3:4b"}
    assert models["qwen3:4b"].parameter_size == "4.0B" and models["llama3.2:latest"].size
    assert client.context_length("qwen3:4b") == 40960
    assert client.context_length("llama3.2") == 131072
    client.close()


def test_chat_streams_and_sends_num_ctx(fake_ollama: FakeOllama) -> None:
    client = OllamaClient(fake_ollama.url)
    deltas = list(client.chat("llama3.2", MESSAGES, num_ctx=8192, num_predict=512, temperature=0.1))
    assert text_of(deltas) == "Rollo led the Norse. [1]"
    assert len(deltas) > 2 and deltas[-1].done and not any(d.done for d in deltas[:-1])
    assert (
        deltas[-1].done_reason == "stop"
        and deltas[-1].prompt_eval_count
        and deltas[-1].eval_count == 5
    )
    assert fake_ollama.last_chat.options == {
        "num_ctx": 8192,
        "num_predict": 512,
        "temperature": 0.1,
    }
    assert fake_ollama.last_chat.messages == MESSAGES
    assert complete(client, "llama3.2", MESSAGES) == "Rollo led the Norse. [1]"


def test_length_limit_is_reported(fake_ollama: FakeOllama) -> None:
    deltas = list(OllamaClient(fake_ollama.url).chat("llama3.2", MESSAGES, num_predict=2))
    assert text_of(deltas) == "Rollo led" and deltas[-1].done_reason == "length"


def test_localhost_and_127_are_the_same_server(fake_ollama: FakeOllama) -> None:
    # The fake listens on IPv4 only, like Ollama's default; localhost may resolve to ::1.
    client = OllamaClient(fake_ollama.localhost_url)
    assert [m.name for m in client.list_models()] == ["llama3.2:latest"]
    assert text_of(list(client.chat("llama3.2", MESSAGES))).endswith("[1]")
    assert normalise_url("localhost:11434") == "http://localhost:11434"
    assert normalise_url("0.0.0.0") == "http://127.0.0.1:80"
    assert normalise_url("http://127.0.0.1:11434/", default_port=11434) == "http://127.0.0.1:11434"


def test_ollama_host_variable_is_honoured(
    fake_ollama: FakeOllama, monkeypatch: pytest.MonkeyPatch, tmp_path
) -> None:
    monkeypatch.setenv("OLLAMA_HOST", f"localhost:{fake_ollama.port}")
    client = make_client(Settings(home=tmp_path))
    assert isinstance(client, OllamaClient)
    assert client.url == f"http://localhost:{fake_ollama.port}"
    assert client.list_models()


def test_missing_model_offers_a_pull(fake_ollama: FakeOllama) -> None:
    client = OllamaClient(fake_ollama.url)
    with pytest.raises(ModelNotFoundError) as info:
        list(client.chat("mistral:7b", MESSAGES))
    assert info.value.model == "mistral:7b"
    assert "lectern pull mistral:7b" in info.value.hint
    with pytest.raises(ModelNotFoundError):
        client.context_length("mistral:7b")


def test_server_not_running_says_how_to_start_it(fake_ollama: FakeOllama) -> None:
    url = fake_ollama.url
    fake_ollama.stop()
    client = OllamaClient(url)
    for call in (
        client.list_models,
        lambda: client.context_length("llama3.2"),
        lambda: list(client.chat("llama3.2", MESSAGES)),
    ):
        with pytest.raises(LLMUnavailableError) as info:
            call()
        assert url in info.value.message
        assert "ollama serve" in info.value.hint


def test_never_started_port_is_unavailable_not_a_hang() -> None:
    started = time.monotonic()
    with pytest.raises(LLMUnavailableError):
        list(OllamaClient(f"http://localhost:{unused_port()}").chat("llama3.2", MESSAGES))
    assert time.monotonic() - started < 5


def test_stream_cut_mid_answer_keeps_partial_text(fake_ollama: FakeOllama) -> None:
    fake_ollama.die_after_tokens = 3
    received: list[str] = []
    with pytest.raises(StreamInterruptedError) as info:
        for delta in OllamaClient(fake_ollama.url).chat("llama3.2", MESSAGES):
            received.append(delta.text)
    assert "".join(received) == "Rollo led the"
    assert partial_text(info.value) == "Rollo led the"


def test_error_record_mid_stream_keeps_partial_text(fake_ollama: FakeOllama) -> None:
    fake_ollama.error_after_tokens = (2, "llama runner process has terminated: signal: killed")
    with pytest.raises(StreamInterruptedError) as info:
        list(OllamaClient(fake_ollama.url).chat("llama3.2", MESSAGES))
    assert partial_text(info.value) == "Rollo led"
    assert "terminated" in info.value.message


def test_no_first_token_in_time_is_a_timeout(fake_ollama: FakeOllama) -> None:
    fake_ollama.stall_before_first_s = 10
    client = OllamaClient(fake_ollama.url, first_token_timeout=0.4)
    started = time.monotonic()
    with pytest.raises(LLMTimeoutError) as info:
        list(client.chat("llama3.2", MESSAGES))
    assert time.monotonic() - started < 2
    assert "did not start answering" in info.value.message


def test_silence_between_tokens_is_a_timeout_with_partial_text(fake_ollama: FakeOllama) -> None:
    fake_ollama.stall_between_s = 10
    fake_ollama.stall_after_tokens = 2
    client = OllamaClient(fake_ollama.url, idle_timeout=0.4)
    started = time.monotonic()
    with pytest.raises(LLMTimeoutError) as info:
        list(client.chat("llama3.2", MESSAGES))
    assert time.monotonic() - started < 2
    assert partial_text(info.value) == "Rollo led"


def test_cancel_stops_a_stalled_stream_at_once_and_hangs_up(fake_ollama: FakeOllama) -> None:
    fake_ollama.stall_before_first_s = 30
    cancel = threading.Event()
    client = OllamaClient(fake_ollama.url)
    threading.Timer(0.3, cancel.set).start()
    started = time.monotonic()
    assert list(client.chat("llama3.2", MESSAGES, cancel=cancel)) == []
    assert time.monotonic() - started < 1.0
    deadline = time.monotonic() + 2
    while not fake_ollama.disconnects and time.monotonic() < deadline:
        time.sleep(0.02)
    assert fake_ollama.disconnects, "the server never saw the client hang up"


def test_cancel_mid_stream_stops_reading(fake_ollama: FakeOllama) -> None:
    fake_ollama.answer = " ".join(f"w{i}" for i in range(200))
    fake_ollama.token_delay_s = 0.01
    cancel = threading.Event()
    got: list[str] = []
    for delta in OllamaClient(fake_ollama.url).chat("llama3.2", MESSAGES, cancel=cancel):
        got.append(delta.text)
        if len(got) == 5:
            cancel.set()
    assert 5 <= len(got) < 20


def test_prompt_too_big_for_the_server_is_context_too_small(fake_ollama: FakeOllama) -> None:
    fake_ollama.overflow = "error"
    big = [{"role": "user", "content": "word " * 4000}]
    with pytest.raises(ContextTooSmallError):
        list(OllamaClient(fake_ollama.url).chat("llama3.2", big, num_ctx=2048))


def test_pull_reports_progress_then_success(fake_ollama: FakeOllama) -> None:
    client = OllamaClient(fake_ollama.url)
    progress = list(client.pull("qwen3:0.6b"))
    assert progress[0].status == "pulling manifest"
    assert progress[-1].status == "success"
    layer = [p for p in progress if p.digest == fake_ollama.pull_layers[0][0]]
    assert layer[0].completed is None and layer[-1].fraction == 1.0
    assert "qwen3:0.6b" in {m.name for m in client.list_models()}


def test_pull_of_unknown_model_fails_clearly(fake_ollama: FakeOllama) -> None:
    fake_ollama.pull_error = "pull model manifest: file does not exist"
    with pytest.raises(LLMError) as info:
        list(OllamaClient(fake_ollama.url).pull("no-such-model"))
    assert "no-such-model" in info.value.message and "file does not exist" in info.value.message


# --- OpenAI-compatible client ----------------------------------------------------------------


def test_openai_models_and_streamed_chat(fake_ollama: FakeOllama) -> None:
    client = OpenAICompatClient(fake_ollama.url)  # "/v1" is added when missing
    assert client.url.endswith("/v1")
    assert [m.name for m in client.list_models()] == ["llama3.2:latest"]
    assert client.context_length("llama3.2") is None
    deltas = list(client.chat("llama3.2", MESSAGES, num_predict=256))
    assert text_of(deltas) == "Rollo led the Norse. [1]"
    final = deltas[-1]
    assert (
        final.done
        and final.done_reason == "stop"
        and final.prompt_eval_count
        and final.eval_count == 5
    )
    body = fake_ollama.last_chat.body
    assert body["stream"] is True and body["max_tokens"] == 256 and "options" not in body


def test_openai_failures(fake_ollama: FakeOllama) -> None:
    client = OpenAICompatClient(fake_ollama.url + "/v1")
    with pytest.raises(ModelNotFoundError):
        list(client.chat("mistral", MESSAGES))
    assert client.context_length("mistral") is None  # one model listed: llama.cpp-style
    fake_ollama.add_model("qwen3:4b")
    with pytest.raises(ModelNotFoundError):
        client.context_length("mistral")
    with pytest.raises(LLMError, match="cannot download"):
        list(client.pull("llama3.2"))
    fake_ollama.die_after_tokens = 2
    with pytest.raises(StreamInterruptedError) as info:
        list(client.chat("llama3.2", MESSAGES))
    assert partial_text(info.value) == "Rollo led"
    fake_ollama.stop()
    with pytest.raises(LLMUnavailableError):
        client.list_models()


def test_openai_api_key_is_sent(fake_ollama: FakeOllama) -> None:
    fake_ollama.api_key = "sk-local"
    with pytest.raises(LLMError, match="401"):
        OpenAICompatClient(fake_ollama.url, "wrong").list_models()
    assert OpenAICompatClient(fake_ollama.url, "sk-local").list_models()
    assert fake_ollama.requests[-1].headers["authorization"] == "Bearer sk-local"


def test_make_client_picks_the_kind(tmp_path) -> None:
    assert isinstance(
        make_client(Settings(home=tmp_path, llm_kind="openai", llm_url="http://localhost:1234")),
        OpenAICompatClient,
    )
    assert isinstance(
        make_client(Settings(home=tmp_path, llm_url="http://127.0.0.1:11434")), OllamaClient
    )
