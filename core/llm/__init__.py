"""Clients for the language-model server: Ollama (native API) and OpenAI-compatible servers.

Both speak one small interface, :class:`LLMClient`, so the answering code never cares which
server is behind it; what else differs between kinds of server (names, addresses, hints)
is each one's :class:`Backend`, listed in :data:`BACKENDS`. The things that make local
servers painful are handled here, once:

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

from core.llm.backends import BACKEND_KEYS, BACKENDS, backend_for
from core.llm.base import Backend, ServerSettings
from core.llm.errors import partial_text
from core.llm.ollama import OLLAMA, OLLAMA_START_HINT, OllamaClient
from core.llm.openai import OPENAI, OPENAI_START_HINT, OpenAICompatClient
from core.llm.records import (
    ChatDelta,
    LLMClient,
    Message,
    ModelInfo,
    PullProgress,
    complete,
)
from core.llm.urls import normalise_url, resolve_url

__all__ = [
    "BACKENDS",
    "BACKEND_KEYS",
    "OLLAMA",
    "OLLAMA_START_HINT",
    "OPENAI",
    "OPENAI_START_HINT",
    "Backend",
    "ChatDelta",
    "LLMClient",
    "Message",
    "ModelInfo",
    "OllamaClient",
    "OpenAICompatClient",
    "PullProgress",
    "backend_for",
    "complete",
    "make_client",
    "normalise_url",
    "partial_text",
    "resolve_url",
]


def make_client(settings: ServerSettings, **timeouts: float) -> LLMClient:
    """The client for the server kind the settings name."""
    return backend_for(settings.llm_kind).make_client(settings, **timeouts)
