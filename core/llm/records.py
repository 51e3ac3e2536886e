"""What the model-server clients return, and the one interface both speak."""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar

T = TypeVar("T")

Message = Mapping[str, str]


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
    # Before the first word: the server is alive and still reading (``waiting_s`` of
    # silence so far, ``read``/``total`` prompt tokens where it says) or loading the model.
    waiting_s: float | None = None
    read: int | None = None
    total: int | None = None
    loading: bool = False
    # The final record, where the server says (llama.cpp): prompt tokens it read anew and
    # those it reused from its prompt cache.
    prompt_read: int | None = None
    prompt_cached: int | None = None

    @property
    def is_wait(self) -> bool:
        """A sign of life before the answer, carrying no text."""
        return not self.text and not self.done


class LLMClient(Protocol):
    kind: str  # its backend's key (core/llm/backends.py)
    url: str  # the base URL as the user configured it (used in messages)
    sets_num_ctx: bool  # whether chat() can size the server's context window per request

    def list_models(self) -> list[ModelInfo]: ...

    def context_length(self, model: str) -> int | None: ...

    def served_model(self, model: str) -> str:
        """The name to ask for: ``model``, or the one model a single-model server serves
        whatever the request names (llama.cpp), so its name is not "missing"."""
        ...

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


def int_or_none(value: object) -> int | None:
    if not isinstance(value, int | float | str | bytes):
        return None
    try:
        return int(value)
    except (TypeError, ValueError):
        return None
