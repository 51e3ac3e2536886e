"""The answer as the person sees it, folded from ``ask``'s events (core/generation/events.py)
one at a time: the one place that reads what an event means. The CLI, the app (its
answer card and its model-server badge), the AnswerSession adding its warning, the
evaluation and ``ask``'s own keeping of a stopped answer all fold the stream here and
read the state, so they cannot come to differ on what was answered.

``apply`` says what an event changed (a ``Change``), so a front end redraws only that: a
written token changes only the text, which a window can redraw on its own timer.

The rules, decided here once:

* The text is the draft (the answer quoted while a slow server reads the prompt) until
  the first written token replaces it; then the written tokens; once done, the checked
  answer (``DoneEvent.answer``, unknown citation numbers removed); after an error, the
  partial answer the error kept, else the text shown so far.
* A first token equal to the draft is the quote standing, not a written answer: ``ask``
  falls back to the same quote, sent as one token, when the model fails after the draft
  was shown. The text stays as it is and the draft is no longer "to be replaced". (The
  app used to take it for the written answer and redraw the same words, dropping the
  quote's citations until the end; the CLI printed nothing: the CLI's reading is kept.)
* The wait's own notes (the status, "the model is still reading") go when the first
  token comes or the answer ends; warnings (WarningEvent) are the answer's and stay
  whenever they were said, until DoneEvent's list, which holds them all, replaces them.
* The draft's citations go with the draft; the written answer's come in CitationsEvent.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from enum import Flag, auto

from core.generation.events import (
    CitationsEvent,
    DoneEvent,
    DraftEvent,
    ErrorEvent,
    Event,
    SourcesEvent,
    StatusEvent,
    TokenEvent,
    WarningEvent,
)
from core.records import Citation, Hit


class Change(Flag):
    """What one event changed in an AnswerState: what a front end redraws."""

    NOTHING = 0
    STATUS = auto()  # ``status`` (set, or cleared when the wait is over)
    SOURCES = auto()  # ``hits`` (and ``question``)
    DRAFT = auto()  # ``drafting``: the draft shown, or no longer awaiting its replacement
    TEXT = auto()  # ``text``
    CITATIONS = auto()
    WARNINGS = auto()
    FINISHED = auto()  # ``done`` or ``error``: the answer ended


class AnswerState:
    """One answer folded from its events; read its fields after each ``apply``."""

    def __init__(self) -> None:
        self.question = ""  # the standalone question the sources were retrieved for
        self.hits: tuple[Hit, ...] = ()  # the numbered sources: [1] is hits[0]
        # What is being done before the answer is written (rewriting, loading, reading).
        self.status: StatusEvent | None = None
        self.draft: DraftEvent | None = None  # the quote shown while the model reads
        self.quote_stands = False  # the model failed after the draft: the quote is the answer
        self.written = ""  # the streamed tokens as they came (citations not yet checked)
        self.citations: tuple[Citation, ...] = ()
        self.warnings: tuple[WarningEvent, ...] = ()
        self.conversation_id: int | None = None
        self.done: DoneEvent | None = None
        self.error: ErrorEvent | None = None
        # time.perf_counter() when the first token came: when the first words reached
        # whoever reads the stream.
        self.first_token_at: float | None = None

    @classmethod
    def fold(cls, events: Iterable[Event]) -> AnswerState:
        """The state after the whole of ``events``."""
        state = cls()
        for event in events:
            state.apply(event)
        return state

    @property
    def finished(self) -> bool:
        return self.done is not None or self.error is not None

    @property
    def drafting(self) -> bool:
        """The draft is shown in place of a written answer still to come."""
        return (
            self.draft is not None
            and not self.written
            and not self.quote_stands
            and not self.finished
        )

    @property
    def text(self) -> str:
        """The answer's text as it should be shown now."""
        if self.done is not None:
            return self.done.answer
        if self.error is not None and self.error.partial_answer:
            return self.error.partial_answer
        if self.written:
            return self.written
        return self.draft.answer if self.draft is not None else ""

    @property
    def mode(self) -> str:
        """One of core.generation.qa.MODES once done; "" until then."""
        return self.done.mode if self.done is not None else ""

    @property
    def model(self) -> str | None:
        """The model that wrote the answer; None until done, or when none wrote it."""
        return self.done.model if self.done is not None else None

    @property
    def turn_id(self) -> int | None:
        return self.done.turn_id if self.done is not None else None

    @property
    def timings(self) -> dict[str, float | int | None]:
        return self.done.timings if self.done is not None else {}

    def apply(self, event: Event) -> Change:
        """Fold ``event`` in; what it changed."""
        if isinstance(event, TokenEvent):
            return self._token(event.text)
        if isinstance(event, SourcesEvent):
            self.hits = event.hits
            self.question = event.question or self.question
            self._adopt(event.conversation_id)
            # A new prompt is on its way (the first, or one cut to fit the context).
            return Change.SOURCES | self._end_wait()
        if isinstance(event, StatusEvent):
            self.status = event
            return Change.STATUS
        if isinstance(event, DraftEvent):
            if self.written or self.quote_stands or self.finished:
                return Change.NOTHING  # too late: the answer itself is shown
            self.draft = event
            self.citations = event.citations
            return Change.DRAFT | Change.TEXT | Change.CITATIONS
        if isinstance(event, CitationsEvent):
            self.citations = event.citations
            return Change.CITATIONS
        if isinstance(event, WarningEvent):
            self.warnings = (*self.warnings, event)
            return Change.WARNINGS
        was_drafting = self.drafting
        change = Change.FINISHED | self._end_wait()
        if isinstance(event, DoneEvent):
            self.done = event
            if event.sources:  # one sent over the socket may leave them out
                self.hits = event.sources
                change |= Change.SOURCES
            self.question = event.question or self.question
            self.citations = event.citations
            self.warnings = event.warnings
            change |= Change.TEXT | Change.CITATIONS | Change.WARNINGS
        else:
            self.error = event
            if event.partial_answer:
                change |= Change.TEXT
        self._adopt(event.conversation_id)
        return change | (Change.DRAFT if was_drafting else Change.NOTHING)

    def _token(self, text: str) -> Change:
        if self.first_token_at is None:
            self.first_token_at = time.perf_counter()
        change = self._end_wait()
        if self.drafting:
            if self.draft is not None and text == self.draft.answer:
                self.quote_stands = True
                return change | Change.DRAFT
            self.citations = ()  # the quote's, which the written answer does not have
            change |= Change.DRAFT | Change.CITATIONS
        self.written += text
        return change | Change.TEXT

    def _end_wait(self) -> Change:
        if self.status is None:
            return Change.NOTHING
        self.status = None
        return Change.STATUS

    def _adopt(self, conversation_id: int | None) -> None:
        if conversation_id is not None:
            self.conversation_id = conversation_id
