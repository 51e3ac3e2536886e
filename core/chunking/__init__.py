"""Chunking stage: a parsed document split on its own structure into passages sized for the embedding model.

A chunker is sized by the model that embeds its passages (``chunker_for``): the model
silently drops every word piece past its limit, so a passage counted with another
tokenizer, or cut to another limit, would lose its end without a trace.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from core.chunking.passages import PassageChunker
from core.records import Chunk, ParsedDocument

__all__ = ["Chunker", "PassageChunker", "TokenBudget", "chunker_for"]


class Chunker(Protocol):
    """Splits a parsed document into passages of at most ``max_tokens`` word pieces,
    context line included."""

    @property
    def max_tokens(self) -> int: ...

    @property
    def version(self) -> str:
        """Changes whenever the same document would be cut differently: stored with the
        library, so a change re-chunks it."""
        ...

    def context_for(self, title: str, heading_path: Sequence[str]) -> str:
        """The context line (title and heading path) embedded and keyword-indexed with
        each passage of that section."""
        ...

    def chunk(self, doc: ParsedDocument, *, file_stem: str = "") -> list[Chunk]: ...


class TokenBudget(Protocol):
    """What sizes a chunker: the word pieces a model reads, and its own count of a text's
    word pieces (special tokens left out). Every Embedder is one."""

    @property
    def max_tokens(self) -> int: ...

    def count_tokens(self, text: str) -> int: ...


def chunker_for(model: TokenBudget, *, overlap_sentences: int = 0) -> Chunker:
    """The passage chunker for the model that will embed its passages."""
    return PassageChunker(
        model.count_tokens, max_tokens=model.max_tokens, overlap_sentences=overlap_sentences
    )
