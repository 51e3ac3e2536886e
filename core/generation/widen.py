"""Small-to-big: retrieval finds small passages, the answer reads them widened.

A chunk is small (at most 256 word pieces) so that its embedding is about one thing and
ranks well; but the sentence that answers is often just past its end, or needs the one
before it. So the source an answer reads can be the hit widened to its neighbouring
chunks of the same document, within the hit's own section (the chunker never crosses a
heading, so neighbours with the same heading path are the enclosing section), and only
as far as the prompt has room for: best-ranked sources first, ``REACH`` chunks each way
at most, the next chunk before the previous one (a choice, not a measurement: a passage
found by what it is about tends to go on to the details), and never a chunk that another
source already holds (the model would read it twice).

A widened ``Hit`` keeps its ``chunk_id`` (the passage retrieval found) and its text is
exactly ``document_text[start:end]``, so the citation spans found in it
(``core.generation.citations``) are document offsets like any other: the citation still
points at the exact sentence, wherever in the widened passage it is.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

import duckdb

from core.errors import LecternError
from core.generation.prompt import (
    ASSUMED_CONTEXT,
    CHARS_PER_TOKEN,
    build_messages,
    choose_num_ctx,
    estimate_messages,
    new_tag,
)
from core.records import Hit
from core.store.db import Database
from core.store.lookup import ChunkPlace, chunk_neighbours, text_slice

REACH = 1  # neighbouring chunks each way
# Tokens kept free beyond the estimate: each message's estimate rounds up on its own.
SLACK_TOKENS = 4


def _narrow(hit: Hit, own: ChunkPlace) -> Hit | None:
    """``hit`` as its own chunk alone (a source widened before, cut for a smaller
    context, widens again from its chunk); None when they no longer agree (the document
    changed since the search)."""
    if (hit.start, hit.end) == (own.start, own.end):
        return hit
    if not hit.start <= own.start <= own.end <= hit.end:
        return None
    return replace(
        hit,
        text=hit.text[own.start - hit.start : own.end - hit.start],
        start=own.start,
        end=own.end,
        page=own.page,
        page_end=own.page_end,
    )


def _pages(places: Sequence[ChunkPlace]) -> tuple[int | None, int | None]:
    firsts = [p.page for p in places if p.page is not None]
    lasts = [p.page_end if p.page_end is not None else p.page for p in places]
    known = [page for page in lasts if page is not None]
    return (min(firsts) if firsts else None), (max(known) if known else None)


def plan(
    hits: Sequence[Hit], places: Mapping[int, Sequence[ChunkPlace]], room: int, reach: int = REACH
) -> list[tuple[ChunkPlace, ...]]:
    """For each hit (its own chunk's place in ``places``), the run of chunks it reads:
    itself and the neighbours that fit in ``room`` characters, shared out in rank order.
    A hit without a place reads nothing more (an empty run)."""
    held = {hit.chunk_id for hit in hits}
    runs: list[tuple[ChunkPlace, ...]] = []
    for hit in hits:
        around = list(places.get(hit.chunk_id, ()))
        index = next((i for i, p in enumerate(around) if p.chunk_id == hit.chunk_id), None)
        if index is None:
            runs.append(())
            continue
        own = around[index]
        first = last = index
        lo, hi = own.start, own.end
        growing = {True: True, False: True}  # after, before
        for _ in range(reach):
            for after in (True, False):
                if not growing[after]:
                    continue
                j = last + 1 if after else first - 1
                neighbour = around[j] if 0 <= j < len(around) else None
                cost = (
                    max(hi, neighbour.end) - min(lo, neighbour.start) - (hi - lo)
                    if neighbour is not None
                    else 0
                )
                if (
                    neighbour is None
                    or abs(neighbour.ordinal - around[last if after else first].ordinal) != 1
                    or neighbour.heading_path != own.heading_path
                    or neighbour.chunk_id in held
                    or cost > room
                ):
                    growing[after] = False
                    continue
                room -= cost
                held.add(neighbour.chunk_id)
                lo, hi = min(lo, neighbour.start), max(hi, neighbour.end)
                if after:
                    last = j
                else:
                    first = j
        runs.append(tuple(around[first : last + 1]))
    return runs


def _as_found(
    db: Database, hits: Sequence[Hit], reach: int
) -> tuple[list[Hit], dict[int, list[ChunkPlace]]]:
    """Each hit as its own chunk alone, and the chunks around it (none for a hit whose
    chunk is gone or no longer agrees with it)."""
    places = chunk_neighbours(db, [h.chunk_id for h in hits if h.chunk_id >= 0], reach)
    narrow: list[Hit] = []
    for hit in hits:
        own = next((p for p in places.get(hit.chunk_id, ()) if p.chunk_id == hit.chunk_id), None)
        cut = _narrow(hit, own) if own is not None else None
        if cut is None:
            places.pop(hit.chunk_id, None)
        narrow.append(cut or hit)
    return narrow, places


def widen(db: Database, hits: Sequence[Hit], room: int, *, reach: int = REACH) -> list[Hit]:
    """``hits`` widened to their neighbouring chunks within ``room`` characters in all; a
    hit that cannot be widened comes back as its own chunk."""
    narrow, places = _as_found(db, hits, reach)
    return _apply(db, narrow, plan(narrow, places, room, reach))


def _apply(db: Database, hits: Sequence[Hit], runs: Sequence[tuple[ChunkPlace, ...]]) -> list[Hit]:
    out: list[Hit] = []
    for hit, run in zip(hits, runs, strict=True):
        if len(run) <= 1:
            out.append(hit)
            continue
        start, end = min(p.start for p in run), max(p.end for p in run)
        text = text_slice(db, hit.document_id, start, end)
        # The stored text must still hold the passage where the chunk says (a document
        # re-indexed since the search would not): else the source stays as found.
        if text is None or text[hit.start - start : hit.end - start] != hit.text:
            out.append(hit)
            continue
        page, page_end = _pages(run)
        out.append(replace(hit, text=text, start=start, end=end, page=page, page_end=page_end))
    return out


def prompt_room(
    question: str,
    hits: Sequence[Hit],
    *,
    context_length: int | None,
    sets_num_ctx: bool,
    answer_tokens: int,
    dates: Mapping[str, str] | None = None,
) -> int:
    """Characters the sources may grow by while the prompt still fits as
    ``core.generation.prompt.fit_prompt`` sizes it: within the model's context, and for
    a server whose context is set per request, within the step the prompt needs anyway
    (a larger ``num_ctx`` makes Ollama reload the model)."""
    limit = context_length if context_length else (None if sets_num_ctx else ASSUMED_CONTEXT)
    estimate = estimate_messages(build_messages(question, hits, new_tag(), dates))
    ceiling = choose_num_ctx(estimate + answer_tokens, limit) if sets_num_ctx else limit
    assert ceiling is not None
    return max(0, ceiling - estimate - answer_tokens - SLACK_TOKENS) * CHARS_PER_TOKEN


def widen_for_prompt(
    db: Database,
    question: str,
    hits: Sequence[Hit],
    *,
    context_length: int | None,
    sets_num_ctx: bool,
    answer_tokens: int,
    dates: Mapping[str, str] | None = None,
    reach: int = REACH,
) -> list[Hit]:
    """The sources a model reads for ``question``: ``hits`` widened within the room the
    prompt has left. Never fails an answer: on a database error the hits come back as
    they were."""
    try:
        narrow, places = _as_found(db, hits, reach)
        room = prompt_room(
            question,
            narrow,
            context_length=context_length,
            sets_num_ctx=sets_num_ctx,
            answer_tokens=answer_tokens,
            dates=dates,
        )
        return _apply(db, narrow, plan(narrow, places, room, reach))
    except (LecternError, duckdb.Error):
        return list(hits)
