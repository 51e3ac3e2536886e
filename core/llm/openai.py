"""Any server with OpenAI's ``/v1/chat/completions`` (LM Studio, llama.cpp, vLLM, Jan, Ollama):
its backend and its client."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import httpx

from core.errors import LLMError, LLMTimeoutError, LLMUnavailableError
from core.llm.base import Backend, ServerSettings
from core.llm.errors import ErrorMapper
from core.llm.records import ChatDelta, Message, ModelInfo, PullProgress, T, int_or_none
from core.llm.stream import Patience, StreamTimeout, client_options, pump, read_limit
from core.llm.urls import (
    _split_url,
    check_server_url,
    normalise_url,
    resolve_url,
    unusable_client,
)

# With no address set: Ollama's own OpenAI-compatible API, the server most likely there.
DEFAULT_OPENAI_URL = "http://127.0.0.1:11434/v1"
OPENAI_START_HINT = (
    "Start your OpenAI-compatible server (LM Studio, llama.cpp server, vLLM, Jan) and check its "
    "base URL in the settings, then try again."
)


class OpenAIBackend(Backend):
    key = "openai"
    display_name = "OpenAI-compatible server (LM Studio, llama.cpp, vLLM, Jan)"
    server_name = "the model server"
    short_name = "the server"
    start_hint = OPENAI_START_HINT
    can_download_models = False  # each server downloads in its own app, if at all
    takes_api_key = True

    def resolve_url(self, settings: ServerSettings) -> str:
        if settings.llm_url.strip():
            return check_server_url(settings.llm_url, "llm_url in settings.json")
        return DEFAULT_OPENAI_URL

    def address(self, settings: ServerSettings) -> str:
        # The default is a guess (Ollama's API), not an address the person chose to show.
        return settings.llm_url

    def url_placeholder(self, settings: ServerSettings) -> str:
        return "For example http://127.0.0.1:1234/v1 (LM Studio)"

    def build_client(self, settings: ServerSettings, **timeouts: float) -> OpenAICompatClient:
        return OpenAICompatClient(self.resolve_url(settings), settings.llm_api_key, **timeouts)

    def not_running(self, url: str) -> str:
        return f"No model server is running at {url}"

    def not_found_hint(self, model: str) -> str:
        return "Load the model in your server, or pick one that `lectern models` lists."


OPENAI = OpenAIBackend()


def _first(iterator: Iterator[T]) -> T:
    for item in iterator:
        return item
    raise LLMError("The model server sent an empty reply.")


class OpenAICompatClient:
    """Any server with OpenAI's ``/v1/chat/completions`` (LM Studio, llama.cpp, vLLM, Jan, Ollama)."""

    backend = OPENAI
    kind = OPENAI.key
    sets_num_ctx = False  # the OpenAI API has no per-request context size

    def __init__(
        self,
        base_url: str,
        api_key: str = "",
        *,
        connect_timeout: float = 5.0,
        first_token_timeout: float = 30.0,
        idle_timeout: float = 60.0,
        request_timeout: float = 30.0,
        prompt_timeout: float | None = None,
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
        # How long a server that still answers a status check may read the prompt before
        # its first word; None: no longer than ``first_token_timeout``.
        self.prompt_timeout = prompt_timeout
        self._errors = ErrorMapper(self.backend, self.url)
        self._client: httpx.Client | None = None
        self._lock = threading.Lock()
        self._props: dict[str, Any] | None = None  # llama.cpp's /props, once read
        self._listed: list[ModelInfo] | None = None
        self._model_ctx: dict[str, int] = {}  # context sizes /v1/models states (llama.cpp)

    def _http(self) -> httpx.Client:
        with self._lock:
            if self._client is None:
                base = resolve_url(self.url, self.connect_timeout)
                headers = {"Accept": "application/json"}
                if self.api_key:
                    headers["Authorization"] = f"Bearer {self.api_key}"
                read = read_limit(
                    self.first_token_timeout,
                    self.prompt_timeout,
                    self.idle_timeout,
                    self.request_timeout,
                )
                try:
                    self._client = httpx.Client(
                        base_url=base.rstrip("/") + "/",
                        headers=headers,
                        **client_options(base, self.connect_timeout, read),
                    )
                except Exception as exc:  # a proxy httpx cannot use: said, and quoted
                    raise unusable_client(exc, self.url) from None
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

    @staticmethod
    def _error_details(response: httpx.Response) -> Mapping[str, Any]:
        """The error object's other fields (llama.cpp: ``n_ctx``, ``n_prompt_tokens``)."""
        try:
            error = response.json().get("error")
        except (ValueError, AttributeError):
            return {}
        return error if isinstance(error, dict) else {}

    def list_models(self) -> list[ModelInfo]:
        http = self._http()

        def fetch() -> list[ModelInfo]:
            response = http.get("models")
            if response.status_code >= 400:
                raise self._errors.status(response.status_code, self._error_message(response), "")
            data = response.json().get("data") or []
            for entry in data:
                meta = entry.get("meta") if isinstance(entry, dict) else None
                if isinstance(meta, dict) and int_or_none(meta.get("n_ctx")):
                    self._model_ctx[str(entry.get("id", ""))] = int(meta["n_ctx"])
            return [ModelInfo(name=str(m.get("id", ""))) for m in data if isinstance(m, dict)]

        try:
            return _first(
                pump(
                    lambda: iter([fetch()]),
                    first_timeout=self.request_timeout,
                    idle_timeout=self.request_timeout,
                    cancel=None,
                )
            )
        except StreamTimeout:
            raise LLMTimeoutError(
                f"The server at {self.url} did not reply within {self.request_timeout:g} s."
            ) from None
        except LLMError:
            raise
        except Exception as exc:
            raise self._errors.transport(exc, "", "") from None

    def _server_props(self) -> dict[str, Any]:
        """llama.cpp's ``/props`` ({} from servers without it), read once per client."""
        if self._props is not None:
            return self._props
        props: dict[str, Any] = {}
        try:
            # /props sits at the server's root, beside /v1.
            root = str(self._http().base_url).rstrip("/").removesuffix("/v1")
            response = self._http().get(root + "/props", timeout=self.request_timeout)
            if response.status_code == 200:
                body = response.json()
                props = body if isinstance(body, dict) else {}
        except (httpx.HTTPError, ValueError, OSError, LLMError):
            props = {}
        self._props = props
        return props

    @property
    def is_llamacpp(self) -> bool:
        props = self._server_props()
        return "default_generation_settings" in props or "total_slots" in props

    def context_length(self, model: str) -> int | None:
        """The context size the server says it runs with (llama.cpp: ``/props`` and
        ``/v1/models``), or None where it does not say (the caller assumes 4,096).

        The model is checked against the server's list. A server that lists a single model
        (llama.cpp serves whatever it loaded, under any name) or cannot list at all is
        given the benefit of the doubt.
        """
        try:
            listed = self.list_models()
        except (LLMUnavailableError, LLMTimeoutError):
            raise
        except LLMError:
            listed = []
        names = {m.name for m in listed}
        if len(names) > 1 and model not in names and f"{model}:latest" not in names:
            raise self._errors.not_found(model)
        served = self.served_model(model, listed)
        if served in self._model_ctx:
            return self._model_ctx[served]
        settings = self._server_props().get("default_generation_settings")
        n_ctx = int_or_none(settings.get("n_ctx")) if isinstance(settings, dict) else None
        return n_ctx or int_or_none(self._server_props().get("n_ctx"))

    def served_model(self, model: str, listed: Sequence[ModelInfo] | None = None) -> str:
        """``model``, or the only model a single-model server has: llama.cpp answers to
        any name, and reporting its real one keeps a default "llama3.2" from being called
        missing."""
        if listed is None:
            try:
                listed = self.list_models()
            except LLMError:
                return model
        names = [m.name for m in listed if m.name]
        if len(names) == 1 and model not in names:
            return names[0]
        return model

    def alive(self) -> bool:
        """Whether the server answers a status request now (on its own connection), so a
        long silence before the first word is a busy server, not a dead one."""
        try:
            response = self._http().get("models", timeout=min(5.0, self.request_timeout))
        except (httpx.HTTPError, OSError):
            return False
        return response.status_code < 500 or response.status_code == 503

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
        if self.prompt_timeout and self.is_llamacpp:
            # llama.cpp then says how far it has read the prompt: proof of life that needs
            # no status request. Other servers may refuse fields they do not know.
            body["return_progress"] = True
        patience_limit = max(self.prompt_timeout or 0.0, self.first_token_timeout)

        def produce() -> Iterator[dict[str, Any]]:
            started = time.monotonic()
            while True:
                with http.stream("POST", "chat/completions", json=body) as response:
                    if response.status_code == 503 and time.monotonic() - started < patience_limit:
                        response.read()
                        if "load" in self._error_message(response).lower():
                            # llama.cpp answers 503 "Loading model" while it starts: wait.
                            yield {"__loading__": True}
                            time.sleep(1.0)
                            continue
                    if response.status_code >= 400:
                        response.read()
                        raise self._errors.status(
                            response.status_code,
                            self._error_message(response),
                            model,
                            details=self._error_details(response),
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
                    return

        def is_progress(event: dict[str, Any]) -> bool:
            if "__loading__" in event or "__waiting__" in event or "prompt_progress" in event:
                return True
            # The opening record of a stream names the role and carries no text yet.
            return not event.get("usage") and not any(
                (c.get("delta") or {}).get("content") or c.get("finish_reason")
                for c in event.get("choices") or []
            )

        patience = Patience(
            limit=patience_limit,
            alive=self.alive if self.prompt_timeout else None,
            heartbeat=1.0,
            waiting=lambda seconds: {"__waiting__": seconds},
            progress=is_progress,
        )
        received: list[str] = []
        finish_reason: str | None = None
        usage: Mapping[str, Any] | None = None
        timings: Mapping[str, Any] = {}
        try:
            for event in pump(
                produce,
                first_timeout=self.first_token_timeout,
                idle_timeout=self.idle_timeout,
                cancel=cancel,
                patience=patience,
            ):
                if event.get("__done__"):
                    yield ChatDelta(
                        text="",
                        done=True,
                        done_reason=finish_reason,
                        prompt_eval_count=int_or_none((usage or {}).get("prompt_tokens")),
                        eval_count=int_or_none((usage or {}).get("completion_tokens")),
                        prompt_read=int_or_none(timings.get("prompt_n")),
                        prompt_cached=int_or_none(timings.get("cache_n")),
                    )
                    return
                if "__waiting__" in event:
                    yield ChatDelta(text="", waiting_s=float(event["__waiting__"]))
                    continue
                if "__loading__" in event:
                    yield ChatDelta(text="", loading=True)
                    continue
                if "error" in event:
                    err = event["error"]
                    message = str(err.get("message") if isinstance(err, dict) else err)
                    partial = "".join(received)
                    if partial:
                        raise self._errors.interrupted(partial, message, server_said=True)
                    raise self._errors.status(500, message, model)
                progress = event.get("prompt_progress")
                if isinstance(progress, dict):
                    yield ChatDelta(
                        text="",
                        read=int_or_none(progress.get("processed")),
                        total=int_or_none(progress.get("total")),
                    )
                if event.get("usage"):
                    usage = event["usage"]
                if isinstance(event.get("timings"), dict):
                    timings = event["timings"]
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
