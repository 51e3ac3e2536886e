"""A protocol-faithful fake Ollama server for tests: real HTTP on 127.0.0.1.

It speaks Ollama's wire protocol as documented in ollama/docs/api.md and as the server
sends it: ``/api/chat`` as a chunked NDJSON stream whose last record carries ``done``,
``done_reason`` and the counters (``prompt_eval_count``, ``eval_count``, durations in
nanoseconds); ``/api/tags``; ``/api/show`` with ``model_info["<arch>.context_length"]``;
``/api/pull`` progress; ``/api/version``; errors as ``{"error": "..."}`` bodies with their
status codes (404 for a missing model). It also serves the OpenAI-compatible
``/v1/models`` and ``/v1/chat/completions`` (server-sent events ending in ``[DONE]``).

Switches make it misbehave the ways real servers do: die mid-stream (close the socket
after N tokens, leaving the chunked body unfinished), stall before the first token or
between tokens, send an error record mid-stream, truncate an oversized prompt silently as
Ollama does (or reject it), and stop listening altogether (connection refused).

Every request is recorded, so tests can check what was sent (``num_ctx``, the prompt).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import re
import select
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

REFUSAL = "The documents do not contain the answer to this question."

Messages = list[dict[str, Any]]
Answer = str | Callable[[Messages], str]


def _now() -> str:
    return datetime.now(UTC).isoformat().replace("+00:00", "Z")


def full_name(name: str) -> str:
    return name if ":" in name else f"{name}:latest"


@dataclass
class FakeModel:
    name: str
    context_length: int = 131072
    family: str = "llama"
    parameter_size: str = "3.2B"
    quantization: str = "Q4_K_M"
    size: int = 2019393189
    num_ctx_param: int | None = None  # a PARAMETER num_ctx in the Modelfile

    def __post_init__(self) -> None:
        self.name = full_name(self.name)

    @property
    def digest(self) -> str:
        return hashlib.sha256(self.name.encode()).hexdigest()


@dataclass
class Recorded:
    method: str
    path: str
    body: Any
    headers: dict[str, str]
    at: float

    @property
    def options(self) -> dict[str, Any]:
        return dict((self.body or {}).get("options") or {})

    @property
    def messages(self) -> Messages:
        return list((self.body or {}).get("messages") or [])

    @property
    def prompt_text(self) -> str:
        return "\n".join(str(m.get("content", "")) for m in self.messages)


# --- answers ---------------------------------------------------------------------------

_SOURCE = re.compile(
    r"<<source-(?P<tag>\w+) n=(?P<n>\d+)[^\n]*>>\n(?P<body>.*?)\n<<end-(?P=tag)>>", re.S
)


def sources_in(messages: Messages) -> list[str]:
    """The source texts of a Lectern prompt, in order ([1] first)."""
    text = "\n".join(str(m.get("content", "")) for m in messages)
    return [m.group("body") for m in _SOURCE.finditer(text)]


def first_sentence(text: str) -> str:
    text = text.strip().lstrip("… ")  # a source sent as an excerpt may open with a gap mark
    match = re.match(r"(.+?[.!?])(?:\s|$)", text, re.S)
    return re.sub(r"\s+", " ", (match.group(1) if match else text.strip())).strip()


def quote_first_source(messages: Messages) -> str:
    """Answer by quoting the first sentence of source [1] and citing it."""
    sources = sources_in(messages)
    if not sources:
        return REFUSAL
    return f"{first_sentence(sources[0])} [1]"


def default_answer(messages: Messages) -> str:
    """Quotes source [1]; for a follow-up rewrite request, returns the last question."""
    user = next(
        (str(m.get("content", "")) for m in reversed(messages) if m.get("role") == "user"), ""
    )
    if "Standalone question:" in user:
        match = re.search(r"Last question: (.*)\n", user)
        return match.group(1).strip() if match else user
    return quote_first_source(messages)


def tokens_of(text: str) -> list[str]:
    """Split like a model streams: words with their leading whitespace."""
    return re.findall(r"\s*\S+", text) or ([text] if text else [])


def count_prompt_tokens(messages: Messages) -> int:
    # Roughly what a real tokenizer gives for English: 4 characters a token, plus template.
    return sum(len(str(m.get("content", ""))) // 4 + 6 for m in messages) + 4


# --- the server ------------------------------------------------------------------------


class FakeOllama:
    def __init__(self, models: list[FakeModel] | None = None) -> None:
        self.models: dict[str, FakeModel] = {
            m.name: m for m in (models if models is not None else [FakeModel("llama3.2")])
        }
        self.answer: Answer = default_answer
        self.version = "0.6.8"
        self.default_num_ctx = 2048  # what Ollama uses when a request does not say
        self.overflow = "truncate"  # "truncate" (what Ollama does) or "error"
        self.ignore_num_ctx = False  # act like a server that drops the requested num_ctx
        self.die_after_tokens: int | None = None
        self.error_after_tokens: tuple[int, str] | None = None
        self.stall_before_first_s = 0.0
        self.stall_between_s = 0.0
        self.stall_after_tokens = 0  # stall_between_s applies from this token on
        self.token_delay_s = 0.0
        self.load_duration_ns = 5_000_000
        self.pull_layers: list[tuple[str, int]] = [
            ("sha256:" + "6a0746a1ec1a" + "0" * 52, 2_019_377_376),
            ("sha256:" + "4fa551d4f938" + "0" * 52, 12_403),
        ]
        self.pull_steps = 4
        self.pull_error: str | None = None
        self.pull_delay_s = 0.0
        self.api_key: str | None = None  # required bearer token on /v1 when set
        # llama.cpp while it loads its model: /v1/chat/completions answers 503 "Loading
        # model" until this many seconds after the first such request.
        self.loading_for_s = 0.0
        self._loading_since: float | None = None
        self.requests: list[Recorded] = []
        self.disconnects: list[float] = []  # when a client hung up during a stall
        self.port = 0
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._lock = threading.Lock()

    # lifecycle ------------------------------------------------------------------

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def localhost_url(self) -> str:
        return f"http://localhost:{self.port}"

    @property
    def running(self) -> bool:
        return self._server is not None

    def start(self) -> FakeOllama:
        if self._server is not None:
            return self
        handler = type("Handler", (_Handler,), {"fake": self})
        ThreadingHTTPServer.allow_reuse_address = True
        server = ThreadingHTTPServer(("127.0.0.1", self.port), handler)
        server.daemon_threads = True
        self.port = server.server_address[1]
        self._stop.clear()
        self._server = server
        self._thread = threading.Thread(
            target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop listening: connections to :attr:`url` are refused until :meth:`start`."""
        self._stop.set()
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    close = stop

    def __enter__(self) -> FakeOllama:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # helpers for tests -----------------------------------------------------------

    def add_model(self, name: str, **kwargs: Any) -> FakeModel:
        model = FakeModel(name, **kwargs)
        self.models[model.name] = model
        return model

    def requests_to(self, path: str) -> list[Recorded]:
        return [r for r in self.requests if r.path == path]

    @property
    def last_chat(self) -> Recorded:
        chats = [r for r in self.requests if r.path in ("/api/chat", "/v1/chat/completions")]
        assert chats, "no chat request was made"
        return chats[-1]

    def record(self, entry: Recorded) -> None:
        with self._lock:
            self.requests.append(entry)

    def answer_for(self, messages: Messages) -> str:
        return self.answer(messages) if callable(self.answer) else self.answer

    def wait(self, seconds: float) -> bool:
        """Sleep that ends early when the server stops; True if it was stopped."""
        return self._stop.wait(seconds)


def unused_port() -> int:
    """A port nothing listens on (connections to it are refused)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class _ClientGone(Exception):
    pass


class _Handler(BaseHTTPRequestHandler):
    fake: FakeOllama
    protocol_version = "HTTP/1.1"
    server_version = "ollama-fake"
    sys_version = ""

    def log_message(self, format: str, *args: Any) -> None:  # keep test output quiet
        pass

    # plumbing ---------------------------------------------------------------------

    def _body(self) -> Any:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        if not raw:
            return None
        try:
            return json.loads(raw)
        except ValueError:
            return raw.decode("utf-8", "replace")

    def _json(self, status: int, payload: Any) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _text(self, status: int, text: str) -> None:
        data = text.encode()
        self.send_response(status)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _start_stream(self, content_type: str) -> None:
        self.send_response(200)
        self.send_header("Content-Type", content_type)
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        self.wfile.flush()

    def _chunk(self, data: bytes) -> None:
        try:
            self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            self.wfile.flush()
        except OSError as exc:
            raise _ClientGone from exc

    def _end_stream(self) -> None:
        with contextlib.suppress(OSError):
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()

    def _die(self) -> None:
        """Drop the connection with the chunked body unfinished, as a crashed server does."""
        self.close_connection = True
        with contextlib.suppress(OSError):
            self.wfile.flush()
            self.connection.shutdown(socket.SHUT_RDWR)
        with contextlib.suppress(OSError):
            self.connection.close()

    def _client_gone(self) -> bool:
        try:
            readable, _, _ = select.select([self.connection], [], [], 0)
            if not readable:
                return False
            return self.connection.recv(1, socket.MSG_PEEK) == b""
        except OSError:
            return True

    def _stall(self, seconds: float) -> None:
        """Wait, noticing (and recording) a client that hangs up meanwhile."""
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            if self.fake.wait(min(0.02, max(0.0, end - time.monotonic()))):
                raise _ClientGone
            if self._client_gone():
                self.fake.disconnects.append(time.monotonic())
                raise _ClientGone

    def _record(self, body: Any) -> None:
        self.fake.record(
            Recorded(
                self.command,
                self.path,
                body,
                {k.lower(): v for k, v in self.headers.items()},
                time.monotonic(),
            )
        )

    # routing ----------------------------------------------------------------------

    def do_GET(self) -> None:
        self._record(None)
        if self.path in ("/", ""):
            self._text(200, "Ollama is running")
        elif self.path == "/api/version":
            self._json(200, {"version": self.fake.version})
        elif self.path == "/api/tags":
            self._tags()
        elif self.path == "/v1/models":
            if self._openai_auth():
                self._v1_models()
        else:
            self._text(404, "404 page not found")

    def do_HEAD(self) -> None:
        self._record(None)
        self.send_response(200 if self.path in ("/", "") else 404)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_POST(self) -> None:
        body = self._body()
        self._record(body)
        try:
            if self.path == "/api/chat":
                self._chat(body or {})
            elif self.path == "/api/show":
                self._show(body or {})
            elif self.path == "/api/pull":
                self._pull(body or {})
            elif self.path == "/v1/chat/completions":
                if self._still_loading():
                    self._json(
                        503,
                        {
                            "error": {
                                "code": 503,
                                "message": "Loading model",
                                "type": "unavailable_error",
                            }
                        },
                    )
                elif self._openai_auth():
                    self._v1_chat(body or {})
            else:
                self._text(404, "404 page not found")
        except _ClientGone:
            self.close_connection = True

    def _still_loading(self) -> bool:
        fake = self.fake
        if fake.loading_for_s <= 0:
            return False
        with fake._lock:
            if fake._loading_since is None:
                fake._loading_since = time.monotonic()
            return time.monotonic() - fake._loading_since < fake.loading_for_s

    # Ollama native --------------------------------------------------------------------

    def _tags(self) -> None:
        models = []
        for m in self.fake.models.values():
            models.append(
                {
                    "name": m.name,
                    "model": m.name,
                    "modified_at": "2025-05-01T10:00:00.000000+02:00",
                    "size": m.size,
                    "digest": m.digest,
                    "details": {
                        "parent_model": "",
                        "format": "gguf",
                        "family": m.family,
                        "families": [m.family],
                        "parameter_size": m.parameter_size,
                        "quantization_level": m.quantization,
                    },
                }
            )
        self._json(200, {"models": models})

    def _show(self, body: dict[str, Any]) -> None:
        name = str(body.get("model") or body.get("name") or "")
        model = self.fake.models.get(full_name(name))
        if model is None:
            self._json(404, {"error": f"model '{name}' not found"})
            return
        params = 'stop                           "<|eot_id|>"'
        if model.num_ctx_param:
            params = f"num_ctx                        {model.num_ctx_param}\n" + params
        arch = model.family
        self._json(
            200,
            {
                "modelfile": f'# Modelfile generated by "ollama show"\nFROM {model.name}\n',
                "parameters": params,
                "template": "{{ .Prompt }}",
                "details": {
                    "parent_model": "",
                    "format": "gguf",
                    "family": model.family,
                    "families": [model.family],
                    "parameter_size": model.parameter_size,
                    "quantization_level": model.quantization,
                },
                "model_info": {
                    "general.architecture": arch,
                    "general.file_type": 15,
                    "general.parameter_count": 3212749888,
                    f"{arch}.context_length": model.context_length,
                    f"{arch}.embedding_length": 3072,
                    f"{arch}.block_count": 28,
                    "tokenizer.ggml.model": "gpt2",
                },
                "capabilities": ["completion", "tools"],
                "modified_at": "2025-05-01T10:00:00.000000+02:00",
            },
        )

    def _pull(self, body: dict[str, Any]) -> None:
        name = full_name(str(body.get("model") or body.get("name") or ""))
        self._start_stream("application/x-ndjson")

        def send(obj: dict[str, Any]) -> None:
            self._chunk((json.dumps(obj) + "\n").encode())
            if self.fake.pull_delay_s:
                self._stall(self.fake.pull_delay_s)

        send({"status": "pulling manifest"})
        if self.fake.pull_error:
            send({"error": self.fake.pull_error})
            self._end_stream()
            return
        for digest, total in self.fake.pull_layers:
            status = f"pulling {digest[7:19]}"
            send({"status": status, "digest": digest, "total": total})
            for step in range(1, self.fake.pull_steps + 1):
                send(
                    {
                        "status": status,
                        "digest": digest,
                        "total": total,
                        "completed": total * step // self.fake.pull_steps,
                    }
                )
        for status in ("verifying sha256 digest", "writing manifest", "success"):
            send({"status": status})
        self.fake.models.setdefault(name, FakeModel(name))
        self._end_stream()

    def _missing_model(self, name: str) -> str:
        return f'model "{name}" not found, try pulling it first'

    def _run_chat(
        self, body: dict[str, Any], emit: Callable[[str], None], options: dict[str, Any]
    ) -> tuple[int, int, str]:
        """Stream the answer through ``emit``; returns (prompt_eval_count, eval_count, done_reason).

        Raises _ClientGone after a deliberate cut (the caller must not finish the stream).
        """
        fake = self.fake
        model = fake.models[full_name(str(body.get("model")))]
        messages: Messages = list(body.get("messages") or [])
        requested = None if fake.ignore_num_ctx else options.get("num_ctx")
        num_ctx = int(requested or model.num_ctx_param or fake.default_num_ctx)
        num_ctx = min(num_ctx, model.context_length)
        prompt_tokens = count_prompt_tokens(messages)
        if prompt_tokens > num_ctx:
            if fake.overflow == "error":
                raise _Overflow(prompt_tokens, num_ctx)
            prompt_tokens = num_ctx  # Ollama keeps the start and drops the rest, silently
        num_predict = int(options.get("num_predict") or -1)
        tokens = tokens_of(fake.answer_for(messages))
        done_reason = "stop"
        if num_predict > 0 and len(tokens) > num_predict:
            tokens, done_reason = tokens[:num_predict], "length"
        if fake.stall_before_first_s:
            self._stall(fake.stall_before_first_s)
        for i, token in enumerate(tokens):
            if fake.die_after_tokens is not None and i >= fake.die_after_tokens:
                self._die()
                raise _ClientGone
            if fake.error_after_tokens is not None and i >= fake.error_after_tokens[0]:
                raise _MidStreamError(fake.error_after_tokens[1])
            if i and fake.stall_between_s and i >= fake.stall_after_tokens:
                self._stall(fake.stall_between_s)
            elif fake.token_delay_s:
                self._stall(fake.token_delay_s)
            emit(token)
        return prompt_tokens, len(tokens), done_reason

    def _chat(self, body: dict[str, Any]) -> None:
        name = str(body.get("model") or "")
        if full_name(name) not in self.fake.models:
            self._json(404, {"error": self._missing_model(name)})
            return
        options = dict(body.get("options") or {})
        stream = body.get("stream", True) is not False
        model_name = full_name(name)
        started = time.monotonic_ns()
        parts: list[str] = []

        if not stream:
            try:
                prompt_eval, evals, reason = self._run_chat(body, parts.append, options)
            except _Overflow as exc:
                self._json(400, {"error": exc.message})
                return
            self._json(
                200, self._final(model_name, "".join(parts), started, prompt_eval, evals, reason)
            )
            return

        headers_sent = False

        def emit(token: str) -> None:
            nonlocal headers_sent
            if not headers_sent:
                self._start_stream("application/x-ndjson")
                headers_sent = True
            record = {
                "model": model_name,
                "created_at": _now(),
                "message": {"role": "assistant", "content": token},
                "done": False,
            }
            self._chunk((json.dumps(record) + "\n").encode())

        try:
            prompt_eval, evals, reason = self._run_chat(body, emit, options)
        except _Overflow as exc:
            if headers_sent:
                raise
            self._json(400, {"error": exc.message})
            return
        except _MidStreamError as exc:
            if not headers_sent:
                self._start_stream("application/x-ndjson")
            self._chunk((json.dumps({"error": exc.message}) + "\n").encode())
            self._end_stream()
            return
        if not headers_sent:
            self._start_stream("application/x-ndjson")
        self._chunk(
            (
                json.dumps(self._final(model_name, "", started, prompt_eval, evals, reason)) + "\n"
            ).encode()
        )
        self._end_stream()

    def _final(
        self, model: str, content: str, started: int, prompt_eval: int, evals: int, reason: str
    ) -> dict[str, Any]:
        total = max(1, time.monotonic_ns() - started)
        return {
            "model": model,
            "created_at": _now(),
            "message": {"role": "assistant", "content": content},
            "done_reason": reason,
            "done": True,
            "total_duration": total + self.fake.load_duration_ns,
            "load_duration": self.fake.load_duration_ns,
            "prompt_eval_count": prompt_eval,
            "prompt_eval_duration": total // 3,
            "eval_count": evals,
            "eval_duration": total // 2,
        }

    # OpenAI-compatible --------------------------------------------------------------------

    def _openai_error(self, status: int, message: str) -> None:
        kind = {
            400: "invalid_request_error",
            401: "invalid_request_error",
            404: "not_found_error",
        }.get(status, "api_error")
        self._json(
            status, {"error": {"message": message, "type": kind, "param": None, "code": None}}
        )

    def _openai_auth(self) -> bool:
        if self.fake.api_key and self.headers.get("Authorization") != f"Bearer {self.fake.api_key}":
            self._openai_error(401, "Invalid API key")
            return False
        return True

    def _v1_models(self) -> None:
        data = [
            {"id": m.name, "object": "model", "created": 1746086400, "owned_by": "library"}
            for m in self.fake.models.values()
        ]
        self._json(200, {"object": "list", "data": data})

    def _v1_chat(self, body: dict[str, Any]) -> None:
        name = str(body.get("model") or "")
        if full_name(name) not in self.fake.models:
            self._openai_error(404, self._missing_model(name))
            return
        options: dict[str, Any] = {}
        if body.get("max_tokens"):
            options["num_predict"] = body["max_tokens"]
        cid = f"chatcmpl-{int(time.time() * 1000) % 1000}"
        stream = bool(body.get("stream"))
        parts: list[str] = []
        if not stream:
            try:
                prompt_eval, evals, reason = self._run_chat(body, parts.append, options)
            except _Overflow as exc:
                self._openai_error(400, exc.message)
                return
            self._json(
                200,
                {
                    "id": cid,
                    "object": "chat.completion",
                    "created": int(time.time()),
                    "model": name,
                    "system_fingerprint": "fp_ollama",
                    "choices": [
                        {
                            "index": 0,
                            "message": {"role": "assistant", "content": "".join(parts)},
                            "finish_reason": reason,
                        }
                    ],
                    "usage": {
                        "prompt_tokens": prompt_eval,
                        "completion_tokens": evals,
                        "total_tokens": prompt_eval + evals,
                    },
                },
            )
            return

        headers_sent = False

        def chunk(delta: dict[str, Any], finish: str | None) -> dict[str, Any]:
            return {
                "id": cid,
                "object": "chat.completion.chunk",
                "created": int(time.time()),
                "model": name,
                "system_fingerprint": "fp_ollama",
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
            }

        def send(obj: Any) -> None:
            nonlocal headers_sent
            if not headers_sent:
                self._start_stream("text/event-stream")
                headers_sent = True
            data = obj if isinstance(obj, str) else json.dumps(obj)
            self._chunk(f"data: {data}\n\n".encode())

        try:
            prompt_eval, evals, reason = self._run_chat(
                body, lambda t: send(chunk({"role": "assistant", "content": t}, None)), options
            )
        except _Overflow as exc:
            if headers_sent:
                raise
            self._openai_error(400, exc.message)
            return
        except _MidStreamError as exc:
            send(
                {
                    "error": {
                        "message": exc.message,
                        "type": "api_error",
                        "param": None,
                        "code": None,
                    }
                }
            )
            self._end_stream()
            return
        send(chunk({"role": "assistant", "content": ""}, reason))
        if (body.get("stream_options") or {}).get("include_usage"):
            usage = {
                "prompt_tokens": prompt_eval,
                "completion_tokens": evals,
                "total_tokens": prompt_eval + evals,
            }
            send({**chunk({}, None), "choices": [], "usage": usage})
        send("[DONE]")
        self._end_stream()


class _Overflow(Exception):
    def __init__(self, prompt_tokens: int, num_ctx: int) -> None:
        self.message = f"the input length ({prompt_tokens} tokens) exceeds the context length ({num_ctx} tokens)"
        super().__init__(self.message)


class _MidStreamError(Exception):
    def __init__(self, message: str) -> None:
        self.message = message
        super().__init__(message)


@pytest.fixture
def fake_ollama() -> Iterator[FakeOllama]:
    """A running fake Ollama with ``llama3.2:latest`` installed; stopped afterwards."""
    server = FakeOllama().start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def llm() -> Iterator[FakeOllama]:
    """One fake Ollama for a whole test module, for tests that only read from it."""
    server = FakeOllama().start()
    try:
        yield server
    finally:
        server.stop()


__all__ = [
    "REFUSAL",
    "FakeModel",
    "FakeOllama",
    "Recorded",
    "default_answer",
    "fake_ollama",
    "first_sentence",
    "quote_first_source",
    "sources_in",
    "tokens_of",
    "unused_port",
]


def serve(argv: list[str] | None = None) -> int:
    """``python -m tests.fake_ollama``: serve until killed, for checks run outside pytest
    (the packaged app's self-test). Prints the URL on its first line."""
    import argparse
    import signal

    parser = argparse.ArgumentParser(description="A fake Ollama server on 127.0.0.1.")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    args = parser.parse_args(argv)
    server = FakeOllama()
    server.port = args.port
    server.start()
    print(server.url, flush=True)
    stopped = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopped.set())
    try:
        stopped.wait()
    except KeyboardInterrupt:
        pass
    server.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(serve())
