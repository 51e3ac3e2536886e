"""Every kind of model server Lectern can use, by the key ``llm_kind`` names it with.

Adding a kind is its module (a :class:`~core.llm.base.Backend` and a client)
and one row here; the settings' validation, the settings dialog, the errors' words and the
app's guidance all read this table.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from core.errors import ConfigError
from core.llm.base import Backend
from core.llm.ollama import OLLAMA
from core.llm.openai import OPENAI

# In the order the settings dialog offers them; the first is the default.
BACKENDS: Mapping[str, Backend] = MappingProxyType(
    {
        backend.key: backend
        for backend in (
            OLLAMA,
            OPENAI,
        )
    }
)
BACKEND_KEYS: tuple[str, ...] = tuple(BACKENDS)


def choices_text(keys: tuple[str, ...] = BACKEND_KEYS) -> str:
    """``'ollama' or 'openai'``: the keys as a message lists them."""
    quoted = [repr(key) for key in keys]
    return " or ".join([", ".join(quoted[:-1]), quoted[-1]] if len(quoted) > 1 else quoted)


def backend_for(key: str) -> Backend:
    """The backend ``llm_kind`` names; an unknown one raises ConfigError."""
    try:
        return BACKENDS[key]
    except KeyError:
        raise ConfigError(f"Unknown model server kind {key!r}; use {choices_text()}.") from None
