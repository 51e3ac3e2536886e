"""Answer generation: prompt assembly, citation checks, the extractive answer, and `ask`."""

from __future__ import annotations

from core.citation_marks import parse_citations, remove_unknown
from core.generation.citations import (
    REFUSAL,
    AnswerWarning,
    CitationReport,
    SpanFinder,
    find_spans,
    verify_answer,
)
from core.generation.events import WarningKind
from core.generation.extractive import ExtractiveAnswer, extract_answer
from core.generation.prompt import Prompt, build_messages, fit_prompt, strip_invisible
from core.llm import (
    BACKENDS,
    Backend,
    ChatDelta,
    LLMClient,
    ModelInfo,
    OllamaClient,
    OpenAICompatClient,
    PullProgress,
    backend_for,
    make_client,
)
from core.text import split_sentences

__all__ = [
    "BACKENDS",
    "REFUSAL",
    "AnswerWarning",
    "Backend",
    "ChatDelta",
    "CitationReport",
    "ExtractiveAnswer",
    "LLMClient",
    "ModelInfo",
    "OllamaClient",
    "OpenAICompatClient",
    "Prompt",
    "PullProgress",
    "SpanFinder",
    "WarningKind",
    "backend_for",
    "build_messages",
    "extract_answer",
    "find_spans",
    "fit_prompt",
    "make_client",
    "parse_citations",
    "remove_unknown",
    "split_sentences",
    "strip_invisible",
    "verify_answer",
]
