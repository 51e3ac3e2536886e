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

from typing import TYPE_CHECKING

from core.config import check_server_url
from core.errors import ConfigError
from core.generation.llm.errors import partial_text
from core.generation.llm.ollama import OllamaClient
from core.generation.llm.openai import OpenAICompatClient
from core.generation.llm.records import (
    OLLAMA_START_HINT,
    OPENAI_START_HINT,
    ChatDelta,
    LLMClient,
    Message,
    ModelInfo,
    PullProgress,
    complete,
)
from core.generation.llm.urls import normalise_url, resolve_url

if TYPE_CHECKING:
    from core.config import Settings

__all__ = [
    "OLLAMA_START_HINT",
    "OPENAI_START_HINT",
    "ChatDelta",
    "LLMClient",
    "Message",
    "ModelInfo",
    "OllamaClient",
    "OpenAICompatClient",
    "PullProgress",
    "complete",
    "make_client",
    "normalise_url",
    "partial_text",
    "resolve_url",
]


def make_client(settings: Settings, **timeouts: float) -> LLMClient:
    """The client for the server kind the settings name."""
    timeouts.setdefault("prompt_timeout", settings.llm_first_token_timeout_s)
    if settings.llm_kind == "openai":
        base = (
            check_server_url(settings.llm_url, "llm_url in settings.json")
            if settings.llm_url.strip()
            else "http://127.0.0.1:11434/v1"
        )
        return OpenAICompatClient(base, settings.llm_api_key, **timeouts)
    if settings.llm_kind != "ollama":
        raise ConfigError(
            f"Unknown model server kind {settings.llm_kind!r}; use 'ollama' or 'openai'."
        )
    return OllamaClient(settings.resolved_llm_url, **timeouts)
