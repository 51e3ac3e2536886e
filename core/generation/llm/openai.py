"""Any server with OpenAI's ``/v1/chat/completions`` (LM Studio, llama.cpp, vLLM, Jan, Ollama)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import httpx

from core.errors import LLMError, LLMTimeoutError, LLMUnavailableError
from core.generation.llm.errors import ErrorMapper
from core.generation.llm.records import ChatDelta, Message, ModelInfo, PullProgress, T, int_or_none
from core.generation.llm.stream import StreamTimeout, pump, trace_hook
from core.generation.llm.urls import _split_url, normalise_url, resolve_url


def _first(iterator: Iterator[T]) -> T:
    for item in iterator:
        return item
    raise LLMError("The model server sent an empty reply.")


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
        self._errors = ErrorMapper(self.kind, self.url)
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
                    event_hooks={"request": [trace_hook]},
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
            for event in pump(
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
                        prompt_eval_count=int_or_none((usage or {}).get("prompt_tokens")),
                        eval_count=int_or_none((usage or {}).get("completion_tokens")),
                    )
                    return
                if "error" in event:
                    err = event["error"]
                    message = str(err.get("message") if isinstance(err, dict) else err)
                    partial = "".join(received)
                    if partial:
                        raise self._errors.interrupted(partial, message, server_said=True)
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
