"""Clients for the language-model server: Ollama (native API) and OpenAI-compatible servers.

Both speak one small interface, :class:`LLMClient`, so the answering code never cares which
server is behind it. The things that make local servers painful are handled here, once:

* Timeouts are explicit. The ``ollama`` client's default is *no* timeout, and a stuck
  server would otherwise hang a question for hours. Connecting, waiting for the first
  token (which includes loading the model) and silence between tokens each have a limit.
* A stream is read on a helper thread and handed over through a queue, so the thread
  that consumes it can give up the moment the user cancels or a deadline passes, even
  while the server sends nothing at all; the socket is then shut down so the reader
  thread (and the server's generation) stop too.
* Every failure becomes one of the errors in :mod:`core.errors`, with words a person can
  act on, and a stream cut mid-answer keeps the text that already arrived.
* ``localhost`` and ``127.0.0.1`` are the same server: ``localhost`` is tried as IPv4
  first (Ollama listens on 127.0.0.1 only by default) and as ``::1`` if that refuses.
"""

from __future__ import annotations

import contextlib
import json
import queue
import socket
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import httpx

from core.config import check_server_url
from core.errors import (
    ContextTooSmallError,
    LLMError,
    LLMTimeoutError,
    LLMUnavailableError,
    ModelNotFoundError,
    StreamInterruptedError,
)

if TYPE_CHECKING:
    from core.config import Settings

T = TypeVar("T")

Message = Mapping[str, str]

OLLAMA_START_HINT = (
    "Start Ollama (run `ollama serve` or open the Ollama app), then try again, or check the "
    "server address in the settings (OLLAMA_HOST)."
)
OPENAI_START_HINT = (
    "Start your OpenAI-compatible server (LM Studio, llama.cpp server, vLLM, Jan) and check its "
    "base URL in the settings, then try again."
)

# How long the consumer waits on the queue before looking at the cancel flag again.
_POLL_S = 0.05


# --- records --------------------------------------------------------------------------


@dataclass(frozen=True)
class ModelInfo:
    name: str
    size: int | None = None
    family: str = ""
    parameter_size: str = ""
    quantization: str = ""
    modified_at: str = ""

    def to_json(self) -> dict[str, object]:
        return {
            "name": self.name,
            "size": self.size,
            "family": self.family,
            "parameter_size": self.parameter_size,
            "quantization": self.quantization,
            "modified_at": self.modified_at,
        }


@dataclass(frozen=True)
class PullProgress:
    status: str
    digest: str = ""
    total: int | None = None
    completed: int | None = None

    @property
    def fraction(self) -> float | None:
        if not self.total:
            return None
        return min(1.0, (self.completed or 0) / self.total)


@dataclass(frozen=True)
class ChatDelta:
    """One piece of a streamed answer. The last one has ``done`` set and the counters."""

    text: str
    done: bool = False
    done_reason: str | None = None
    prompt_eval_count: int | None = None
    eval_count: int | None = None
    total_duration_ns: int | None = None
    load_duration_ns: int | None = None


class LLMClient(Protocol):
    kind: str  # "ollama" or "openai"
    url: str  # the base URL as the user configured it (used in messages)
    sets_num_ctx: bool  # whether chat() can size the server's context window per request

    def list_models(self) -> list[ModelInfo]: ...

    def context_length(self, model: str) -> int | None: ...

    def pull(
        self, model: str, *, cancel: threading.Event | None = None
    ) -> Iterator[PullProgress]: ...

    def chat(
        self,
        model: str,
        messages: Sequence[Message],
        *,
        num_ctx: int | None = None,
        num_predict: int | None = None,
        temperature: float | None = None,
        cancel: threading.Event | None = None,
    ) -> Iterator[ChatDelta]: ...

    def close(self) -> None: ...


def complete(
    client: LLMClient,
    model: str,
    messages: Sequence[Message],
    *,
    num_ctx: int | None = None,
    num_predict: int | None = None,
    cancel: threading.Event | None = None,
) -> str:
    """The whole text of a short answer (used for rewriting follow-up questions)."""
    parts: list[str] = []
    for delta in client.chat(
        model, messages, num_ctx=num_ctx, num_predict=num_predict, temperature=0.0, cancel=cancel
    ):
        parts.append(delta.text)
    return "".join(parts)


# --- host handling -----------------------------------------------------------------


def _split_url(url: str) -> urllib.parse.SplitResult:
    if "://" not in url:
        url = "http://" + url
    return urllib.parse.urlsplit(url)


def normalise_url(url: str, default_port: int | None = None) -> str:
    """``scheme://host:port[/path]`` with no trailing slash; ``0.0.0.0`` means this machine.

    A malformed address raises ConfigError here, when the client is built, rather than a
    ValueError from urllib at the first request."""
    parts = _split_url(check_server_url(url))
    host = parts.hostname or "127.0.0.1"
    if host in ("0.0.0.0", "::", ""):  # a listen-everywhere address, not a destination
        host = "127.0.0.1"
    port = parts.port or default_port or (443 if parts.scheme == "https" else 80)
    if ":" in host:
        host = f"[{host}]"
    path = parts.path.rstrip("/")
    return f"{parts.scheme}://{host}:{port}{path}"


def _host_candidates(url: str) -> list[str]:
    """URLs to try, in order, for one configured address."""
    parts = _split_url(url)
    if (parts.hostname or "").lower() != "localhost":
        return [url]
    netloc_v4 = f"127.0.0.1:{parts.port}" if parts.port else "127.0.0.1"
    netloc_v6 = f"[::1]:{parts.port}" if parts.port else "[::1]"
    return [
        urllib.parse.urlunsplit(parts._replace(netloc=netloc_v4)),
        urllib.parse.urlunsplit(parts._replace(netloc=netloc_v6)),
    ]


def _accepts(url: str, timeout: float) -> bool:
    parts = _split_url(url)
    host = parts.hostname or "127.0.0.1"
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def resolve_url(url: str, connect_timeout: float) -> str:
    """The first candidate for ``url`` that accepts a TCP connection, else the first one.

    ``localhost`` often resolves to ``::1`` first while Ollama listens on 127.0.0.1 only;
    trying IPv4 first avoids a refused (or, behind some firewalls, a hanging) connection.
    """
    candidates = _host_candidates(url)
    if len(candidates) == 1:
        return candidates[0]
    for candidate in candidates:
        if _accepts(candidate, min(connect_timeout, 2.0)):
            return candidate
    return candidates[0]


# --- stream pumping ----------------------------------------------------------------


class _Abort(Exception):
    """Raised inside the reader thread's iteration once the consumer has gone."""


@dataclass
class _StreamControl:
    """What the consumer needs to stop one in-flight request from another thread."""

    stopped: threading.Event = field(default_factory=threading.Event)
    sockets: list[socket.socket] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def trace(self, event: str, info: Mapping[str, Any]) -> None:
        # httpcore reports the connection it opened; keep its socket so abort() can shut
        # it down, which wakes a read blocked in another thread at once.
        stream = info.get("return_value")
        if stream is None or not hasattr(stream, "get_extra_info"):
            return
        sock = stream.get_extra_info("socket")
        if isinstance(sock, socket.socket):
            with self.lock:
                self.sockets.append(sock)
            if self.stopped.is_set():
                self._shutdown(sock)

    def abort(self) -> None:
        self.stopped.set()
        with self.lock:
            sockets = list(self.sockets)
        for sock in sockets:
            self._shutdown(sock)

    @staticmethod
    def _shutdown(sock: socket.socket) -> None:
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)


_current_control = threading.local()


def _trace_hook(request: httpx.Request) -> None:
    control: _StreamControl | None = getattr(_current_control, "control", None)
    if control is not None:
        request.extensions["trace"] = control.trace


class _StreamTimeout(Exception):
    def __init__(self, first: bool, seconds: float) -> None:
        super().__init__(seconds)
        self.first = first
        self.seconds = seconds


def _pump(
    produce: Callable[[], Iterator[T]],
    *,
    first_timeout: float,
    idle_timeout: float,
    cancel: threading.Event | None,
) -> Iterator[T]:
    """Iterate ``produce()`` on a helper thread, enforcing deadlines and cancellation here.

    Yields items until the producer ends. Cancelling ends the iteration quietly; a deadline
    raises :class:`_StreamTimeout`; an exception in the producer is re-raised here.
    """
    control = _StreamControl()
    items: queue.Queue[tuple[str, Any]] = queue.Queue()

    def reader() -> None:
        _current_control.control = control
        iterator: Iterator[T] | None = None
        try:
            iterator = produce()
            for item in iterator:
                if control.stopped.is_set():
                    raise _Abort
                items.put(("item", item))
            items.put(("end", None))
        except BaseException as exc:
            if not control.stopped.is_set():
                items.put(("error", exc))
        finally:
            _current_control.control = None
            close = getattr(iterator, "close", None)
            if close is not None:
                with contextlib.suppress(Exception):
                    close()

    thread = threading.Thread(target=reader, name="lectern-llm-stream", daemon=True)
    thread.start()
    deadline = time.monotonic() + first_timeout
    got_first = False
    try:
        while True:
            if cancel is not None and cancel.is_set():
                return
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise _StreamTimeout(
                    first=not got_first, seconds=first_timeout if not got_first else idle_timeout
                )
            wait = min(remaining, _POLL_S) if cancel is not None else remaining
            try:
                kind, value = items.get(timeout=wait)
            except queue.Empty:
                continue
            if kind == "end":
                return
            if kind == "error":
                raise value
            got_first = True
            deadline = time.monotonic() + idle_timeout
            yield value
    finally:
        control.abort()


# --- error mapping -----------------------------------------------------------------


def _is_context_message(message: str) -> bool:
    text = message.lower()
    return (
        "context" in text and ("exceed" in text or "too long" in text or "too large" in text)
    ) or ("prompt is too long" in text)


class _ErrorMapper:
    def __init__(self, kind: str, url: str) -> None:
        self.kind = kind
        self.url = url

    @property
    def server_name(self) -> str:
        return "Ollama" if self.kind == "ollama" else "The model server"

    def unavailable(self, detail: str = "") -> LLMUnavailableError:
        hint = OLLAMA_START_HINT if self.kind == "ollama" else OPENAI_START_HINT
        who = "Ollama is" if self.kind == "ollama" else "No model server is"
        message = f"{who} not running at {self.url}"
        if detail:
            message += f" ({detail})"
        return LLMUnavailableError(message + ".", hint)

    def not_found(self, model: str) -> ModelNotFoundError:
        if self.kind == "ollama":
            hint = f"Pull it with `lectern pull {model}` (or `ollama pull {model}`), or pick another model."
        else:
            hint = "Load the model in your server, or pick one that `lectern models` lists."
        return ModelNotFoundError(
            f"The model {model!r} is not installed on the server at {self.url}.", hint, model=model
        )

    def status(self, status: int, message: str, model: str) -> LLMError:
        if status == 404:
            return self.not_found(model)
        if _is_context_message(message):
            return ContextTooSmallError(
                f"The question and its sources do not fit the model's context window: {message}"
            )
        return LLMError(
            f"{self.server_name} at {self.url} reported an error (HTTP {status}): {message}"
        )

    def timeout(self, exc: _StreamTimeout, model: str) -> LLMTimeoutError:
        if exc.first:
            return LLMTimeoutError(
                f"The model {model!r} at {self.url} did not start answering within "
                f"{exc.seconds:g} s (loading a large model can take a while)."
            )
        return LLMTimeoutError(
            f"The model {model!r} at {self.url} stopped sending text for {exc.seconds:g} s."
        )

    def interrupted(self, partial: str, detail: str) -> StreamInterruptedError:
        if partial:
            message = f"The connection to {self.url} broke mid-answer ({detail}); the partial answer is kept."
        else:
            message = f"The server at {self.url} closed the connection before answering ({detail})."
        error = StreamInterruptedError(message)
        error.partial_text = partial  # type: ignore[attr-defined]
        return error

    def transport(self, exc: BaseException, partial: str, model: str) -> LLMError:
        """Map an exception raised while talking to the server."""
        if isinstance(exc, LLMError):
            return exc
        if isinstance(exc, _StreamTimeout):
            error = self.timeout(exc, model)
            error.partial_text = partial  # type: ignore[attr-defined]
            return error
        if isinstance(exc, httpx.ConnectTimeout):
            return self.unavailable("it did not accept a connection in time")
        if isinstance(exc, httpx.ConnectError | ConnectionRefusedError) or (
            isinstance(exc, ConnectionError) and "Failed to connect" in str(exc)
        ):
            return self.unavailable()
        if isinstance(exc, httpx.TimeoutException):
            error = LLMTimeoutError(
                f"The server at {self.url} stopped responding ({type(exc).__name__})."
            )
            error.partial_text = partial  # type: ignore[attr-defined]
            return error
        if isinstance(
            exc, httpx.RemoteProtocolError | httpx.ReadError | httpx.WriteError | OSError
        ):
            return self.interrupted(partial, str(exc) or type(exc).__name__)
        if isinstance(exc, json.JSONDecodeError | ValueError):
            return self.interrupted(partial, f"unreadable reply: {exc}")
        return LLMError(f"Talking to {self.url} failed: {exc}")


def partial_text(error: BaseException) -> str:
    """Text that had arrived before ``error`` ended a stream ("" when none)."""
    return str(getattr(error, "partial_text", "") or "")


# --- Ollama ------------------------------------------------------------------------


def _int_or_none(value: object) -> int | None:
    try:
        return int(value)  # type: ignore[call-overload, no-any-return]
    except (TypeError, ValueError):
        return None


class OllamaClient:
    """Ollama's native API through the official ``ollama`` package."""

    kind = "ollama"
    sets_num_ctx = True

    def __init__(
        self,
        host: str,
        *,
        connect_timeout: float = 5.0,
        first_token_timeout: float = 120.0,
        idle_timeout: float = 60.0,
        request_timeout: float = 30.0,
    ) -> None:
        self.url = normalise_url(host, default_port=11434)
        self.connect_timeout = connect_timeout
        self.first_token_timeout = first_token_timeout
        self.idle_timeout = idle_timeout
        self.request_timeout = request_timeout
        self._errors = _ErrorMapper(self.kind, self.url)
        self._client: Any = None
        self._lock = threading.Lock()
        self._context_cache: dict[str, int | None] = {}

    def _ollama(self) -> Any:
        with self._lock:
            if self._client is None:
                import ollama

                base = resolve_url(self.url, self.connect_timeout)
                # The read limit is the longest single wait the reader thread may block;
                # the consumer enforces the finer first-token and idle limits itself.
                read = max(self.first_token_timeout, self.idle_timeout, self.request_timeout) + 5
                self._client = ollama.Client(
                    host=base,
                    timeout=httpx.Timeout(
                        connect=self.connect_timeout,
                        read=read,
                        write=30.0,
                        pool=self.connect_timeout,
                    ),
                    # One connection per request, so a stream's socket is always known
                    # (reported by the trace hook) and can be shut down on cancel.
                    limits=httpx.Limits(max_keepalive_connections=0),
                    event_hooks={"request": [_trace_hook]},
                    trust_env=False,  # a proxy setting must never route local calls elsewhere
                )
            return self._client

    def close(self) -> None:
        with self._lock:
            if self._client is not None:
                self._client.close()
                self._client = None

    def _call(self, fn: Callable[[], T], model: str = "") -> T:
        """Run a short request with the request timeout and mapped errors."""
        import ollama

        try:
            return _first(
                _pump(
                    lambda: iter([fn()]),
                    first_timeout=self.request_timeout,
                    idle_timeout=self.request_timeout,
                    cancel=None,
                )
            )
        except ollama.ResponseError as exc:
            raise self._errors.status(exc.status_code, str(exc.error), model) from None
        except _StreamTimeout:
            raise LLMTimeoutError(
                f"Ollama at {self.url} did not reply within {self.request_timeout:g} s."
            ) from None
        except LLMError:
            raise
        except Exception as exc:
            raise self._errors.transport(exc, "", model) from None

    def version(self) -> str:
        client = self._ollama()

        def fetch() -> str:
            response = client._client.get("/api/version")  # not wrapped by the ollama package
            response.raise_for_status()
            return str(response.json().get("version", ""))

        return self._call(fetch)

    def list_models(self) -> list[ModelInfo]:
        client = self._ollama()
        listing = self._call(client.list)
        models: list[ModelInfo] = []
        for entry in listing.models:
            details = entry.details
            models.append(
                ModelInfo(
                    name=str(entry.model or ""),
                    size=int(entry.size) if entry.size is not None else None,
                    family=str(getattr(details, "family", "") or ""),
                    parameter_size=str(getattr(details, "parameter_size", "") or ""),
                    quantization=str(getattr(details, "quantization_level", "") or ""),
                    modified_at=entry.modified_at.isoformat() if entry.modified_at else "",
                )
            )
        return models

    def context_length(self, model: str) -> int | None:
        """The model's trained context length from ``/api/show`` (None when it is not said).

        Raises ModelNotFoundError for a model the server does not have.
        """
        if model in self._context_cache:
            return self._context_cache[model]
        client = self._ollama()
        shown = self._call(lambda: client.show(model), model)
        info: Mapping[str, Any] = shown.modelinfo or {}
        length: int | None = None
        arch = info.get("general.architecture")
        if arch:
            length = _int_or_none(info.get(f"{arch}.context_length"))
        if length is None:
            for key, value in info.items():
                if key.endswith(".context_length"):
                    length = _int_or_none(value)
                    break
        self._context_cache[model] = length
        return length

    def pull(self, model: str, *, cancel: threading.Event | None = None) -> Iterator[PullProgress]:
        import ollama

        client = self._ollama()
        try:
            for part in _pump(
                lambda: client.pull(model, stream=True),
                first_timeout=self.first_token_timeout,
                idle_timeout=max(self.idle_timeout, 120.0),  # registries can be slow
                cancel=cancel,
            ):
                yield PullProgress(
                    status=str(part.status or ""),
                    digest=str(part.digest or ""),
                    total=part.total,
                    completed=part.completed,
                )
        except ollama.ResponseError as exc:
            message = str(exc.error)
            if exc.status_code in (-1, 400, 404, 500) and (
                "manifest" in message or "not exist" in message or "not found" in message
            ):
                raise LLMError(
                    f"Ollama could not pull {model!r}: {message}",
                    "Check the model name on ollama.com/library; pulling needs an internet connection.",
                ) from None
            raise self._errors.status(exc.status_code, message, model) from None
        except _StreamTimeout as exc:
            raise LLMTimeoutError(
                f"Pulling {model!r} from {self.url} made no progress for {exc.seconds:g} s."
            ) from None
        except LLMError:
            raise
        except Exception as exc:
            raise self._errors.transport(exc, "", model) from None

    def chat(
        self,
        model: str,
        messages: Sequence[Message],
        *,
        num_ctx: int | None = None,
        num_predict: int | None = None,
        temperature: float | None = None,
        cancel: threading.Event | None = None,
    ) -> Iterator[ChatDelta]:
        import ollama

        client = self._ollama()
        options: dict[str, Any] = {}
        if num_ctx:
            options["num_ctx"] = int(num_ctx)
        if num_predict:
            options["num_predict"] = int(num_predict)
        if temperature is not None:
            options["temperature"] = float(temperature)
        payload = [dict(m) for m in messages]
        received: list[str] = []
        finished = False
        try:
            for part in _pump(
                lambda: client.chat(
                    model=model, messages=payload, stream=True, options=options or None
                ),
                first_timeout=self.first_token_timeout,
                idle_timeout=self.idle_timeout,
                cancel=cancel,
            ):
                text = str(part.message.content or "") if part.message is not None else ""
                received.append(text)
                if part.done:
                    finished = True
                    yield ChatDelta(
                        text=text,
                        done=True,
                        done_reason=part.done_reason,
                        prompt_eval_count=part.prompt_eval_count,
                        eval_count=part.eval_count,
                        total_duration_ns=part.total_duration,
                        load_duration_ns=part.load_duration,
                    )
                    return
                if text:
                    yield ChatDelta(text=text)
        except ollama.ResponseError as exc:
            partial = "".join(received)
            if exc.status_code == -1:  # an {"error": ...} line inside a 200 stream
                if partial:
                    raise self._errors.interrupted(partial, str(exc.error)) from None
                if _is_context_message(str(exc.error)):
                    raise self._errors.status(400, str(exc.error), model) from None
                raise LLMError(f"Ollama at {self.url} failed to answer: {exc.error}") from None
            raise self._errors.status(exc.status_code, str(exc.error), model) from None
        except LLMError:
            raise
        except Exception as exc:
            raise self._errors.transport(exc, "".join(received), model) from None
        if not finished and not (cancel is not None and cancel.is_set()):
            # The server closed a well-formed stream without the final "done" record.
            raise self._errors.interrupted("".join(received), "the stream ended without finishing")


def _first(iterator: Iterator[T]) -> T:
    for item in iterator:
        return item
    raise LLMError("The model server sent an empty reply.")


# --- OpenAI-compatible ---------------------------------------------------------------


class OpenAICompatClient:
    """Any server with OpenAI's ``/v1/chat/completions`` (LM Studio, llama.cpp, vLLM, Jan, Ollama)."""

    kind = "openai"
    sets_num_ctx = False  # the OpenAI API has no per-request context size

    def __init__(
        self,
        base_url: str,
        api_key: str = "",
        *,
        connect_timeout: float = 5.0,
        first_token_timeout: float = 120.0,
        idle_timeout: float = 60.0,
        request_timeout: float = 30.0,
    ) -> None:
        url = normalise_url(base_url)
        if not _split_url(url).path:
            url += "/v1"  # people paste the server's address without the API prefix
        self.url = url
        self.api_key = api_key
        self.connect_timeout = connect_timeout
        self.first_token_timeout = first_token_timeout
        self.idle_timeout = idle_timeout
        self.request_timeout = request_timeout
        self._errors = _ErrorMapper(self.kind, self.url)
        self._client: httpx.Client | None = None
        self._lock = threading.Lock()

    def _http(self) -> httpx.Client:
        with self._lock:
            if self._client is None:
                base = resolve_url(self.url, self.connect_timeout)
                headers = {"Accept": "application/json"}
                if self.api_key:
                    headers["Authorization"] = f"Bearer {self.api_key}"
                read = max(self.first_token_timeout, self.idle_timeout, self.request_timeout) + 5
                self._client = httpx.Client(
                    base_url=base.rstrip("/") + "/",
                    headers=headers,
                    timeout=httpx.Timeout(
                        connect=self.connect_timeout,
                        read=read,
                        write=30.0,
                        pool=self.connect_timeout,
                    ),
                    limits=httpx.Limits(max_keepalive_connections=0),
                    event_hooks={"request": [_trace_hook]},
                    trust_env=False,
                )
            return self._client

    def close(self) -> None:
        with self._lock:
            if self._client is not None:
                self._client.close()
                self._client = None

    @staticmethod
    def _error_message(response: httpx.Response) -> str:
        try:
            body = response.json()
        except ValueError:
            return response.text.strip()[:500] or response.reason_phrase
        error = body.get("error") if isinstance(body, dict) else None
        if isinstance(error, dict):
            return str(error.get("message") or error)
        if error:
            return str(error)
        return response.text.strip()[:500]

    def list_models(self) -> list[ModelInfo]:
        http = self._http()

        def fetch() -> list[ModelInfo]:
            response = http.get("models")
            if response.status_code >= 400:
                raise self._errors.status(response.status_code, self._error_message(response), "")
            data = response.json().get("data") or []
            return [ModelInfo(name=str(m.get("id", ""))) for m in data if isinstance(m, dict)]

        try:
            return _first(
                _pump(
                    lambda: iter([fetch()]),
                    first_timeout=self.request_timeout,
                    idle_timeout=self.request_timeout,
                    cancel=None,
                )
            )
        except _StreamTimeout:
            raise LLMTimeoutError(
                f"The server at {self.url} did not reply within {self.request_timeout:g} s."
            ) from None
        except LLMError:
            raise
        except Exception as exc:
            raise self._errors.transport(exc, "", "") from None

    def context_length(self, model: str) -> int | None:
        """The OpenAI API does not say; the model is checked against the server's list.

        A server that lists a single model (llama.cpp serves whatever it loaded, under any
        name) or cannot list at all is given the benefit of the doubt.
        """
        try:
            names = {m.name for m in self.list_models()}
        except (LLMUnavailableError, LLMTimeoutError):
            raise
        except LLMError:
            return None
        if len(names) > 1 and model not in names and f"{model}:latest" not in names:
            raise self._errors.not_found(model)
        return None

    def pull(self, model: str, *, cancel: threading.Event | None = None) -> Iterator[PullProgress]:
        raise LLMError(
            f"The OpenAI-compatible server at {self.url} cannot download models.",
            "Download the model in the server's own app (for example LM Studio), or use Ollama.",
        )

    def chat(
        self,
        model: str,
        messages: Sequence[Message],
        *,
        num_ctx: int | None = None,
        num_predict: int | None = None,
        temperature: float | None = None,
        cancel: threading.Event | None = None,
    ) -> Iterator[ChatDelta]:
        http = self._http()
        body: dict[str, Any] = {
            "model": model,
            "messages": [dict(m) for m in messages],
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if num_predict:
            body["max_tokens"] = int(num_predict)
        if temperature is not None:
            body["temperature"] = float(temperature)

        def produce() -> Iterator[dict[str, Any]]:
            with http.stream("POST", "chat/completions", json=body) as response:
                if response.status_code >= 400:
                    response.read()
                    raise self._errors.status(
                        response.status_code, self._error_message(response), model
                    )
                for line in response.iter_lines():
                    line = line.strip()
                    if not line or line.startswith(":") or not line.startswith("data:"):
                        continue
                    data = line[5:].strip()
                    if data == "[DONE]":
                        yield {"__done__": True}
                        return
                    yield json.loads(data)

        received: list[str] = []
        finish_reason: str | None = None
        usage: Mapping[str, Any] | None = None
        try:
            for event in _pump(
                produce,
                first_timeout=self.first_token_timeout,
                idle_timeout=self.idle_timeout,
                cancel=cancel,
            ):
                if event.get("__done__"):
                    yield ChatDelta(
                        text="",
                        done=True,
                        done_reason=finish_reason,
                        prompt_eval_count=_int_or_none((usage or {}).get("prompt_tokens")),
                        eval_count=_int_or_none((usage or {}).get("completion_tokens")),
                    )
                    return
                if "error" in event:
                    err = event["error"]
                    message = str(err.get("message") if isinstance(err, dict) else err)
                    partial = "".join(received)
                    if partial:
                        raise self._errors.interrupted(partial, message)
                    raise self._errors.status(500, message, model)
                if event.get("usage"):
                    usage = event["usage"]
                for choice in event.get("choices") or []:
                    delta = choice.get("delta") or {}
                    text = str(delta.get("content") or "")
                    if choice.get("finish_reason"):
                        finish_reason = str(choice["finish_reason"])
                    if text:
                        received.append(text)
                        yield ChatDelta(text=text)
        except LLMError:
            raise
        except Exception as exc:
            raise self._errors.transport(exc, "".join(received), model) from None
        if not (cancel is not None and cancel.is_set()):
            raise self._errors.interrupted("".join(received), "the stream ended without [DONE]")


# --- factory -----------------------------------------------------------------------


def make_client(settings: Settings, **timeouts: float) -> LLMClient:
    if settings.llm_kind == "openai":
        base = (
            check_server_url(settings.llm_url, "llm_url in settings.json")
            if settings.llm_url.strip()
            else "http://127.0.0.1:11434/v1"
        )
        return OpenAICompatClient(base, settings.llm_api_key, **timeouts)
    if settings.llm_kind != "ollama":
        from core.errors import ConfigError

        raise ConfigError(
            f"Unknown model server kind {settings.llm_kind!r}; use 'ollama' or 'openai'."
        )
    return OllamaClient(settings.resolved_llm_url, **timeouts)
