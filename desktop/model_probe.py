"""Asking the configured model server what it has, for the badge and the settings.

Runs off the UI thread, the badge's checks on a pool of their own (desktop/llm_monitor.py:
network waits of up to seconds must never hold up the window or closing it); every
outcome, a malformed address included, becomes an ``LLMStatus`` the UI can show with a
fix.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from core.config import Settings
from core.errors import LecternError
from desktop.workers import describe_error

if TYPE_CHECKING:
    from core.llm import Backend


@dataclass(frozen=True)
class LLMStatus:
    """What the configured model server said when last asked."""

    state: str  # checking | ready | unreachable | no_models | model_missing | invalid | error
    kind: str = Settings.llm_kind  # a key of core.llm.BACKENDS
    url: str = ""
    model: str = ""
    models: tuple[str, ...] = ()
    message: str = ""
    hint: str = ""
    sizes: tuple[int | None, ...] = ()  # bytes on disk, in the order of ``models``

    def size_of(self, model: str) -> int | None:
        sizes = dict(zip(self.models, self.sizes, strict=False))
        return sizes.get(model)

    @property
    def ready(self) -> bool:
        return self.state == "ready"

    @property
    def backend(self) -> Backend | None:
        """The kind of server, None for a kind this version does not know."""
        # Imported here: the window opens before the HTTP clients are loaded.
        from core.llm import BACKENDS

        return BACKENDS.get(self.kind)

    @property
    def server_name(self) -> str:
        return self.backend.server_name if self.backend else "the model server"


def model_matches(wanted: str, installed: str) -> bool:
    """``llama3.2`` and ``llama3.2:latest`` name the same Ollama model."""

    def full(name: str) -> str:
        return name if ":" in name else f"{name}:latest"

    return full(wanted.strip()) == full(installed.strip())


def llm_address(settings: Settings) -> str:
    """The server address as configured (never raises, unlike resolving it)."""
    from core.llm import BACKENDS

    backend = BACKENDS.get(settings.llm_kind)
    return backend.address(settings) if backend else settings.llm_url


def address_problem(exc: LecternError) -> tuple[str, str]:
    """Core's sentence naming the setting at fault, and how to fix it in the app."""
    fix = "Open Settings (Ctrl+,) and enter an address like http://127.0.0.1:11434."
    hint = exc.hint if exc.hint != type(exc).default_hint else ""
    if "Settings" not in hint:
        hint = f"{hint} {fix}".strip()
    return exc.message, hint


def probe_llm(settings: Settings) -> LLMStatus:
    """Ask the configured server what it has (runs in the background)."""
    from core.errors import ConfigError, LLMUnavailableError
    from core.llm import backend_for, make_client

    kind = settings.llm_kind
    url = llm_address(settings)
    try:
        client = make_client(settings, connect_timeout=3.0, request_timeout=8.0)
    except ConfigError as exc:
        message, hint = address_problem(exc)
        return LLMStatus("invalid", kind, url, settings.llm_model, message=message, hint=hint)
    except LecternError as exc:
        return LLMStatus("error", kind, url, settings.llm_model, message=exc.message, hint=exc.hint)
    except Exception as exc:  # whatever building the client raised, say it
        message, hint = describe_error(exc)
        return LLMStatus("error", kind, url, settings.llm_model, message=message, hint=hint)
    try:
        url = client.url
        listed = client.list_models()
        models = tuple(m.name for m in listed)
        sizes = tuple(m.size for m in listed)
        # A single-model server (llama.cpp) answers to any name with the one it loaded,
        # so the badge names that model rather than calling the configured one missing.
        served = client.served_model(settings.llm_model)
        if served != settings.llm_model:
            settings = replace(settings, llm_model=served)
    except LLMUnavailableError as exc:
        return LLMStatus(
            "unreachable", kind, url, settings.llm_model, message=exc.message, hint=exc.hint
        )
    except LecternError as exc:
        return LLMStatus("error", kind, url, settings.llm_model, message=exc.message, hint=exc.hint)
    except Exception as exc:  # a strange reply must not break start-up
        message, hint = describe_error(exc)
        return LLMStatus("error", kind, url, settings.llm_model, message=message, hint=hint)
    finally:
        client.close()
    if not models:
        return LLMStatus(
            "no_models",
            kind,
            url,
            settings.llm_model,
            # The client was built, so the kind is a known one.
            message=f"{backend_for(kind).title_short_name} is running but has no models yet.",
        )
    if not any(model_matches(settings.llm_model, m) for m in models):
        return LLMStatus(
            "model_missing",
            kind,
            url,
            settings.llm_model,
            models,
            message=f"The model “{settings.llm_model}” is not installed on the server.",
            sizes=sizes,
        )
    return LLMStatus("ready", kind, url, settings.llm_model, models, sizes=sizes)
