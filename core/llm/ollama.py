"""Ollama: its backend (how it is named, found and started) and its native API through
the official ``ollama`` package."""

from __future__ import annotations

import os
import threading
import urllib.parse
from collections.abc import Callable, Iterator, Mapping, Sequence
from types import ModuleType
from typing import Any

import httpx

from core.errors import LecternError, LLMError, LLMTimeoutError, LLMUnavailableError
from core.llm.base import Backend, ServerSettings
from core.llm.errors import ErrorMapper, _is_context_message
from core.llm.openai import OPENAI, _first
from core.llm.records import ChatDelta, Message, ModelInfo, PullProgress, T, int_or_none
from core.llm.stream import Patience, StreamTimeout, client_options, pump, read_limit
from core.llm.urls import (
    check_server_url,
    normalise_url,
    proxies_masked,
    resolve_url,
    unusable_client,
)

DEFAULT_OLLAMA_HOST = "http://127.0.0.1:11434"
OLLAMA_START_HINT = (
    "Start Ollama (run `ollama serve` or open the Ollama app), then try again, or check the "
    "server address in the settings (OLLAMA_HOST)."
)


class OllamaBackend(Backend):
    key = "ollama"
    display_name = "Ollama"
    server_name = "Ollama"
    short_name = "Ollama"
    start_hint = OLLAMA_START_HINT
    can_download_models = True
    takes_api_key = False
    install_url = "https://ollama.com/download"
    serve_command = "ollama serve"

    def resolve_url(self, settings: ServerSettings) -> str:
        if settings.llm_url.strip():
            return check_server_url(settings.llm_url, "llm_url in settings.json")
        return self._default_url()

    def _default_url(self) -> str:
        """Where Ollama is when the settings name no address."""
        # Ollama's own variable, so that Lectern finds the server wherever `ollama` does.
        host = os.environ.get("OLLAMA_HOST", "").strip()
        if not host:
            return DEFAULT_OLLAMA_HOST
        parts = urllib.parse.urlsplit(check_server_url(host, "OLLAMA_HOST"))
        if parts.port is None:  # Ollama's own default applies
            parts = parts._replace(netloc=parts.netloc + ":11434")
        return urllib.parse.urlunsplit(parts)

    def address(self, settings: ServerSettings) -> str:
        if settings.llm_url:
            return settings.llm_url
        return self._default_address()

    def _default_address(self) -> str:
        try:
            return self._default_url()
        except LecternError:  # a malformed OLLAMA_HOST: shown as written
            return os.environ.get("OLLAMA_HOST", "").strip()

    def url_placeholder(self, settings: ServerSettings) -> str:
        return f"Default: {self._default_address()}"

    def build_client(self, settings: ServerSettings, **timeouts: float) -> OllamaClient:
        return OllamaClient(self.resolve_url(settings), **timeouts)

    def pull_command(self, model: str) -> str:
        return f"ollama pull {model}"

    def not_running(self, url: str) -> str:
        return f"Ollama is not running at {url}"

    def not_found_hint(self, model: str) -> str:
        return (
            f"Pull it with `lectern pull {model}` (or `{self.pull_command(model)}`), "
            "or pick another model."
        )

    def foreign_server(self, url: str, status: int, message: str) -> LLMError | None:
        if status != 404 or "model" in message.lower():
            return None
        # Ollama's own 404 names the model; a bare "File Not Found" means the address is
        # some other server (llama.cpp, LM Studio) without Ollama's API.
        return LLMUnavailableError(
            f"The server at {url} is not Ollama: it has no Ollama API ({message}).",
            "If it is an OpenAI-compatible server (llama.cpp, LM Studio, vLLM, Jan), "
            f'choose that kind in Settings (llm_kind "{OPENAI.key}" in settings.json).',
        )


OLLAMA = OllamaBackend()

_package: ModuleType | None = None
_package_lock = threading.Lock()


def ollama_package() -> ModuleType:
    """The ``ollama`` package. Importing it builds a default client that trusts the
    environment, so ``ALL_PROXY=socks5://...`` without socksio made the import itself
    fail (ImportError) and cost the answer: it is imported with the proxy variables out
    of the way, and any failure is said as a server that cannot be used."""
    global _package
    with _package_lock:
        if _package is None:
            try:
                with proxies_masked():
                    import ollama
            except Exception as exc:
                error = LLMUnavailableError(
                    "Lectern could not load its Ollama client"
                    + (f" ({exc})." if str(exc) else "."),
                    "Reinstall Lectern; meanwhile answers are quoted from your documents.",
                )
                error.detail = type(exc).__name__  # type: ignore[attr-defined]
                raise error from None
            _package = ollama
        return _package


class OllamaClient:
    """Ollama's native API through the official ``ollama`` package."""

    backend = OLLAMA
    kind = OLLAMA.key
    sets_num_ctx = True

    def __init__(
        self,
        host: str,
        *,
        connect_timeout: float = 5.0,
        first_token_timeout: float = 30.0,
        idle_timeout: float = 60.0,
        request_timeout: float = 30.0,
        prompt_timeout: float | None = None,
    ) -> None:
        self.url = normalise_url(host, default_port=11434)
        self.connect_timeout = connect_timeout
        self.first_token_timeout = first_token_timeout
        self.idle_timeout = idle_timeout
        self.request_timeout = request_timeout
        # How long a server that still answers a status check may load the model and read
        # the prompt before its first word; None: no longer than ``first_token_timeout``.
        self.prompt_timeout = prompt_timeout
        self._errors = ErrorMapper(self.backend, self.url)
        self._client: Any = None
        self._lock = threading.Lock()
        self._context_cache: dict[str, int | None] = {}

    def _ollama(self) -> Any:
        with self._lock:
            if self._client is None:
                ollama = ollama_package()
                base = resolve_url(self.url, self.connect_timeout)
                read = read_limit(
                    self.first_token_timeout,
                    self.prompt_timeout,
                    self.idle_timeout,
                    self.request_timeout,
                )
                try:
                    self._client = ollama.Client(
                        host=base, **client_options(base, self.connect_timeout, read)
                    )
                except Exception as exc:  # a proxy httpx cannot use: said, and quoted
                    raise unusable_client(exc, self.url) from None
            return self._client

    def close(self) -> None:
        with self._lock:
            if self._client is not None:
                self._client.close()
                self._client = None

    def _call(self, fn: Callable[[], T], model: str = "") -> T:
        """Run a short request with the request timeout and mapped errors."""
        ollama = ollama_package()
        try:
            return _first(
                pump(
                    lambda: iter([fn()]),
                    first_timeout=self.request_timeout,
                    idle_timeout=self.request_timeout,
                    cancel=None,
                )
            )
        except ollama.ResponseError as exc:
            raise self._errors.status(exc.status_code, str(exc.error), model) from None
        except StreamTimeout:
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

    def served_model(self, model: str) -> str:
        return model  # Ollama serves many models, each by its own name

    def alive(self) -> bool:
        """Whether Ollama answers a status request now (on its own connection): while it
        loads a model or reads a long prompt it sends nothing on the answer's stream."""
        client = self._ollama()
        try:
            response = client._client.get("/api/version", timeout=min(5.0, self.request_timeout))
        except (httpx.HTTPError, OSError):
            return False
        return bool(response.status_code < 500)

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
            length = int_or_none(info.get(f"{arch}.context_length"))
        if length is None:
            for key, value in info.items():
                if key.endswith(".context_length"):
                    length = int_or_none(value)
                    break
        self._context_cache[model] = length
        return length

    def pull(self, model: str, *, cancel: threading.Event | None = None) -> Iterator[PullProgress]:
        ollama = ollama_package()
        client = self._ollama()
        try:
            for part in pump(
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
        except StreamTimeout as exc:
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
        ollama = ollama_package()
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
        patience = Patience(
            limit=max(self.prompt_timeout or 0.0, self.first_token_timeout),
            alive=self.alive if self.prompt_timeout else None,
            heartbeat=1.0,
            waiting=lambda seconds: seconds,
        )
        try:
            for part in pump(
                lambda: client.chat(
                    model=model, messages=payload, stream=True, options=options or None
                ),
                first_timeout=self.first_token_timeout,
                idle_timeout=self.idle_timeout,
                cancel=cancel,
                patience=patience,
            ):
                if isinstance(part, float):
                    yield ChatDelta(text="", waiting_s=part)
                    continue
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
                    raise self._errors.interrupted(
                        partial, str(exc.error), server_said=True
                    ) from None
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
