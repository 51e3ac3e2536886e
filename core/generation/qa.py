"""``ask``: one question in, a stream of events out. The CLI and the desktop app both use it.

Events come in this order::

    StatusEvent             (a follow-up the model makes standalone first: ``REWRITING``)
    SourcesEvent            the numbered sources ([1] = hits[0]) the answer may cite
    StatusEvent, DraftEvent while a slow server loads or reads the prompt: what it is doing,
                            and (once, after a second) the quoted answer to show meanwhile
    TokenEvent ...          the answer as it is written (or extracted)
    CitationsEvent          verified citations with the spans to highlight
    WarningEvent ...        anything the reader should know (any number, maybe none)
    DoneEvent | ErrorEvent  always last, exactly one of them

``SourcesEvent`` is missing only when retrieval itself failed (then an ErrorEvent follows);
it comes again, with fewer sources, when the server says the prompt exceeds its context.
The streamed tokens are the raw model output; ``DoneEvent.answer`` is the checked answer
(citation numbers that match no source removed), which a UI should show in their place.

The events are defined in core/generation/events.py, with the kinds of warning
(``WarningKind``); they are read by folding them into an AnswerState
(core/generation/answer_state.py), which says what the person sees. The client the
answer is written with comes from an AnswerSession (core/generation/session.py), the
same for the CLI, the app and the socket.

What happens when the model server misbehaves:

* the settings name no usable server (a malformed address): the extractive answer, with
  a WarningEvent of kind "llm_config" (the app words it as "llm_unavailable").
* not running / not reachable, or silent before its first token: the answer falls back
  to the extractive mode (sentences from the sources), with a WarningEvent saying why;
  ``DoneEvent.mode`` is "extractive" (or "declined" when nothing is close enough).
* model not installed: the extractive answer too, with a WarningEvent of kind
  "model_missing" whose ``model`` says what to pull (a UI offers to download it and ask
  again); "No answer" would leave the person with nothing while the fix downloads.
* the prompt does not fit the server's context: sources are dropped and the prompt sent
  again (the server's own token count decides how many); when not even one source fits,
  the extractive answer with a "context" warning.
* the server answers 503 "Loading model" (llama.cpp starting): waited out, with a
  StatusEvent; a server that is alive but reading a long prompt is waited for up to
  ``llm_first_token_timeout_s``, one that stops answering is given up on in ~30 s.
* stream cut, stalled or failed mid-answer: the partial answer is kept, mode "generated",
  with a WarningEvent of kind "incomplete".
* cancelled: the stream stops at once; DoneEvent with what had arrived and a "cancelled"
  warning.

A conversation exists from its first question: the question is stored (and a new
conversation made, titled by it) before anything else, its turn "in progress"; when the
answer ends the turn is completed with its sources and citations, and its state says how
it ended (core.records.TurnState): done, stopped (cancelled, or the events closed: Ctrl+C,
a window closed), or failed (an ErrorEvent, with the partial answer). One that never
ends (the process killed) reads as cut off. SourcesEvent and ErrorEvent carry the
conversation's id, DoneEvent its turn's too (core/store/conversations.py).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Generator, Iterator, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import TYPE_CHECKING, Any

from core.citation_marks import strip_citations
from core.errors import (
    ContextTooSmallError,
    LecternError,
    LLMError,
    LLMTimeoutError,
    LLMUnavailableError,
    ModelNotFoundError,
    StoreError,
    StreamInterruptedError,
)
from core.generation.answer_state import AnswerState, Change
from core.generation.citations import REFUSAL, AnswerWarning, PageLookup, SpanFinder, verify_answer
from core.generation.events import (
    REWRITING,
    CitationsEvent,
    DoneEvent,
    DraftEvent,
    ErrorEvent,
    Event,
    SourcesEvent,
    StatusEvent,
    TokenEvent,
    WarningEvent,
    WarningKind,
    with_conversation,
)
from core.generation.extractive import ExtractiveAnswer, excerpts, extract_answer
from core.generation.llm_order import LLM_RERANK_CANDIDATES, llm_order
from core.generation.prompt import (
    MIN_ANSWER_TOKENS,
    Prompt,
    PromptChoices,
    clean_rewrite,
    fit_prompt,
    keyword_followup,
    looks_truncated,
    rewrite_messages,
)
from core.generation.session import AnswerSession, fallback_warning
from core.generation.widen import widen_for_prompt
from core.library import Library
from core.llm import ChatDelta, LLMClient, complete
from core.records import Citation, Hit, Scope, Turn, TurnState
from core.retrieval.search import ANSWER_LEAD
from core.store.conversations import ConversationStore
from core.text import content_words

if TYPE_CHECKING:
    from core.embedding.models import Embedder

__all__ = [
    "REWRITING",
    "AnswerState",
    "Change",
    "CitationsEvent",
    "DoneEvent",
    "DraftEvent",
    "ErrorEvent",
    "Event",
    "SourcesEvent",
    "StatusEvent",
    "TokenEvent",
    "WarningEvent",
    "WarningKind",
    "ask",
]

log = logging.getLogger(__name__)

MODES = ("generated", "extractive", "declined")
REWRITE_CONTEXT = 4096
REWRITE_TOKENS = 128


# --- helpers over the library ----------------------------------------------------------


def _embedder(library: Library) -> Embedder | None:
    try:
        return library.embedder
    except LecternError:
        return None  # spans then come from word overlap alone


def _dates(library: Library, hits: Sequence[Hit]) -> dict[str, str]:
    """Each source file's modification date, for the prompt."""
    try:
        dates = library.files.modified_dates(sorted({h.document_id for h in hits}))
    except LecternError:  # the date is a nicety; never fail an answer over it
        dates = {}
    for hit in hits:
        if hit.path not in dates:
            try:
                dates[hit.path] = (
                    datetime.fromtimestamp(os.stat(hit.path).st_mtime).date().isoformat()
                )
            except OSError:
                pass
    return dates


def _page_lookup(library: Library, hits: Sequence[Hit]) -> PageLookup | None:
    """Exact pages for spans inside chunks that cross a page break."""
    spanning = sorted(
        {h.document_id for h in hits if h.page_end is not None and h.page_end != h.page}
    )
    if not spanning:
        return None
    pages: dict[int, list[Any]] = {}
    try:
        for document_id in spanning:
            pages[document_id] = list(library.files.pages(document_id))
    except Exception:  # the chunk's first page is still a fair answer
        return None

    def page_of(hit: Hit, offset: int) -> int | None:
        for span in pages.get(hit.document_id, ()):
            if span.start <= offset < span.end:
                return int(span.page)
        return hit.page

    return page_of


def _text_lookup(library: Library) -> Callable[[Hit], str | None]:
    """A cited document's whole text, read once per answer and only when a cited sentence
    runs past its chunk."""
    texts: dict[int, str | None] = {}

    def text_of(hit: Hit) -> str | None:
        if hit.document_id not in texts:
            try:
                texts[hit.document_id] = library.files.text(hit.document_id) or None
            except Exception:  # the chunk's own part of the sentence is still shown
                texts[hit.document_id] = None
        return texts[hit.document_id]

    return text_of


def answer_finder(library: Library, hits: Sequence[Hit], embedder: Embedder | None) -> SpanFinder:
    """The span finder an answer over ``hits`` uses: it reads pages, and a document's whole
    text where a passage starts inside a table (its header is above) or a cited sentence
    runs past its chunk. Benches that measure the answer use the same one."""
    return SpanFinder(embedder, _page_lookup(library, hits), text_of=_text_lookup(library))


def _warning(kind: WarningKind, message: str) -> WarningEvent:
    return WarningEvent(message=message, kind=kind)


def _from_answer_warnings(items: Sequence[AnswerWarning]) -> list[WarningEvent]:
    return [WarningEvent(message=w.message, kind=w.kind) for w in items]


# --- the call ---------------------------------------------------------------------------


def ask(
    library: Library,
    question: str,
    conversation: int | None = None,
    *,
    client: LLMClient | None = None,
    model: str | None = None,
    cancel: threading.Event | None = None,
    use_llm: bool = True,
    k: int | None = None,
    store: bool = True,
    scope: Scope | None = None,
    session: AnswerSession | None = None,
) -> Iterator[Event]:
    """Answer ``question`` from ``library``; see the module docstring for the events.

    ``conversation`` is the id of an earlier conversation to continue (its turns make a
    follow-up question standalone before retrieval); None starts a new one. ``client``
    defaults to the server in the library's settings; ``use_llm=False`` answers
    extractively without contacting any server; settings that name no usable server
    answer so too, with an ``llm_config`` warning (core/generation/session.py). ``scope``
    keeps retrieval to collections, folders or file types and is saved with the
    conversation; None uses the scope saved with ``conversation`` (all documents for a
    new one).
    """
    settings = library.settings
    # A front end's own session (how it words a bad address) is used and left open; one
    # made here is closed with the answer.
    own = session is None
    if session is None:
        try:
            session = AnswerSession(settings, use_llm=use_llm, client=client)
        except LecternError as exc:
            yield ErrorEvent(exc)
            return
    try:
        yield from session.amend(
            _ask(
                library,
                question,
                conversation,
                session.client,
                model or settings.llm_model,
                cancel,
                k or settings.top_k,
                store,
                scope,
            )
        )
    finally:
        if own:
            session.close()


class _Run:
    """State shared by the steps of one question."""

    def __init__(self) -> None:
        self.started = time.perf_counter()
        self.timings: dict[str, float | int | None] = {}
        self.warnings: list[WarningEvent] = []
        self.extract_question: str | None = None
        self.quoted: tuple[tuple[int, ...], ExtractiveAnswer] | None = None
        self.finder: tuple[tuple[int, ...], SpanFinder] | None = None

    def mark(self, name: str, since: float) -> None:
        self.timings[name] = round(time.perf_counter() - since, 4)


@dataclass
class _Question:
    """One question on its way to an answer, and where the answer is saved."""

    library: Library
    run: _Run
    writer: ConversationStore | None  # None: the answer is not saved
    conversation: int | None
    question: str
    standalone: str
    cancel: threading.Event | None
    scope: Scope = field(default_factory=Scope)
    turn_id: int | None = None  # the stored turn, once there is one
    ended: bool = False  # the turn's end is stored (or was tried)
    kept_at: float = 0.0  # when the answer so far was last stored (time.monotonic)

    @property
    def cancelled(self) -> bool:
        return self.cancel is not None and self.cancel.is_set()

    def begin(self) -> None:
        """Keep the question before answering it: a new conversation is made now, titled
        by the question (so it is listed and found at once), and the turn stored in
        progress. A failure here is tried again when the answer ends."""
        if self.writer is None:
            return
        try:
            # Copied to the backup with its turn, just after.
            conversation = self.ensure_conversation(self.writer, copy=False)
            self.turn_id = self.writer.start_turn(conversation, self.question)
            self.kept_at = time.monotonic()
        except Exception as exc:  # the answer goes on; finish says if it is not kept
            log.warning("question not stored before its answer: %s", exc)

    def ensure_conversation(self, writer: ConversationStore, *, copy: bool = True) -> int:
        """The conversation this question is kept in, made now (titled by the question,
        with the scope it searches) when it is the first."""
        if self.conversation is None:
            self.conversation = writer.create(self.question, copy=copy)
            if self.scope:
                self.library.collections.set_scope(self.conversation, self.scope)
        return self.conversation

    def keep_partial(self, written: str) -> None:
        """Store the answer written so far every ``PARTIAL_EVERY_S`` while it streams, so
        an answer cut off by the end of the process keeps most of its text."""
        if self.writer is None or self.turn_id is None or self.ended:
            return
        if time.monotonic() - self.kept_at < PARTIAL_EVERY_S:
            return
        self.kept_at = time.monotonic()
        try:
            self.writer.save_partial(self.turn_id, written)
        except Exception as exc:  # only what a killed process would keep is at stake
            log.warning("partial answer not stored: %s", exc)

    def save(
        self,
        answer: str,
        mode: str,
        citations: Sequence[Citation],
        sources: Sequence[Hit],
        state: str,
        warnings: Sequence[dict[str, Any]] = (),
    ) -> None:
        """Store how the turn ended (once); raises what the store raises."""
        if self.writer is None or self.ended:
            return
        self.ended = True
        notes = [*(w.to_json() for w in self.run.warnings), *warnings]
        if self.turn_id is None:  # begin could not store it: the question is kept now
            self.turn_id = self.writer.start_turn(
                self.ensure_conversation(self.writer), self.question
            )
        self.writer.finish_turn(
            self.turn_id,
            standalone_question=self.standalone,
            answer=answer,
            mode=mode,
            sources=sources,
            citations=citations,
            warnings=notes,
            state=state,
        )

    def end_unfinished(
        self, state: str, answer: str, sources: Sequence[Hit], error: BaseException | None
    ) -> None:
        """Store the turn as it stands when its answer ends without finishing: an error
        (with its message, as a "failed" note), or a stop. Never raises: it runs while
        the answer's events are closed or an error is on its way to the person."""
        if state == TurnState.STOPPED:
            note = {"kind": WarningKind.CANCELLED, "message": TURN_STOPPED}
        else:
            # A LecternError says what happened in the person's words; anything else is
            # a fault of Lectern's, whose own words (a traceback's) are for the log.
            if isinstance(error, LecternError):
                why, hint = f"The answer failed: {error.message}", error.hint
            else:
                why, hint = "The answer failed: something unexpected went wrong.", ""
                if error is not None:
                    log.warning("answer failed: %r", error)
            note = {"kind": WarningKind.FAILED, "message": why, "hint": hint}
        said = any(w.kind == note["kind"] for w in self.run.warnings)
        try:
            self.save(answer.strip(), "", (), sources, state, [] if said else [note])
        except Exception as exc:  # the person is told of the error or stop itself
            log.warning("unfinished answer not stored: %s", exc)

    def kept(self, events: Iterator[Event]) -> Iterator[Event]:
        """``events`` with the id of the conversation they are kept in, storing the turn
        however the answer ends: finished (``finish``), failed (an ErrorEvent), or
        stopped when the events are closed or interrupted before the end (a window
        closed, Ctrl+C)."""
        # What the person sees is what is kept when the answer does not end: the text
        # so far, else the draft; while it streams, the written text.
        state = AnswerState()
        try:
            for event in events:
                change = state.apply(event)
                if change & Change.TEXT and state.written and not state.finished:
                    self.keep_partial(state.written)
                if change & Change.FINISHED and state.error is not None:
                    self.end_unfinished(TurnState.FAILED, state.text, state.hits, state.error.error)
                yield with_conversation(event, self.conversation)
        except BaseException as exc:
            stopped = isinstance(exc, GeneratorExit | KeyboardInterrupt)
            self.end_unfinished(
                TurnState.STOPPED if stopped else TurnState.FAILED,
                state.text,
                state.hits,
                None if stopped else exc,
            )
            raise
        # Every way through ends in finish or an ErrorEvent; one that did not is kept too.
        if not self.ended:
            self.end_unfinished(TurnState.FAILED, state.text, state.hits, None)

    def finish(
        self,
        answer: str,
        mode: str,
        citations: Sequence[Citation],
        sources: Sequence[Hit],
        model: str | None,
    ) -> Iterator[Event]:
        """Save the turn (stopped when cancelled) and send the closing events."""
        run = self.run
        turn_id: int | None = None
        if self.writer is not None:
            try:
                state = TurnState.STOPPED if self.cancelled else TurnState.DONE
                self.save(answer, mode, citations, sources, state)
                turn_id = self.turn_id
            except Exception as exc:  # an answer is never lost to a history write
                run.warnings.append(
                    _warning(
                        WarningKind.NOT_SAVED,
                        f"The answer could not be saved to the conversation: {exc}",
                    )
                )
        run.timings["total_s"] = round(time.perf_counter() - run.started, 4)
        yield CitationsEvent(tuple(citations))
        yield from run.warnings
        yield DoneEvent(
            answer=answer,
            mode=mode,
            citations=tuple(citations),
            warnings=tuple(run.warnings),
            timings=dict(run.timings),
            conversation_id=self.conversation,
            turn_id=turn_id,
            model=model,
            question=self.standalone,
            sources=tuple(sources),
        )

    def note_still_indexing(self) -> None:
        """A "not found" while files are still being read says how many are not
        searchable yet: the answer may be in one of them."""
        indexing = _still_indexing(self.library, self.scope)
        if indexing is not None and not any(w.kind == indexing.kind for w in self.run.warnings):
            self.run.warnings.append(indexing)

    def finder(self, hits: Sequence[Hit]) -> SpanFinder:
        """One finder per question and hits: the quote and the excerpts sent to the
        model embed each unit once."""
        key = tuple(h.chunk_id for h in hits)
        if self.run.finder is None or self.run.finder[0] != key:
            self.run.finder = (key, answer_finder(self.library, hits, _embedder(self.library)))
        return self.run.finder[1]

    def quote(self, hits: Sequence[Hit]) -> ExtractiveAnswer:
        """The answer quoted from the documents (computed once per question and hits)."""
        key = tuple(h.chunk_id for h in hits)
        if self.run.quoted is None or self.run.quoted[0] != key:
            t = time.perf_counter()
            finder = self.finder(hits)
            result = extract_answer(
                self.run.extract_question or self.standalone,
                hits,
                _embedder(self.library),
                finder=finder,
                page_of=finder.page_of,
            )
            self.run.mark("extractive_s", t)
            self.run.quoted = (key, result)
        return self.run.quoted[1]

    def extractive(self, hits: Sequence[Hit]) -> Iterator[Event]:
        """The answer quoted from the documents, with no language model."""
        result = self.quote(hits)
        yield TokenEvent(result.text)
        mode = "declined" if result.declined else "extractive"
        if result.declined:
            self.note_still_indexing()
        yield from self.finish(result.text, mode, result.citations, hits, None)


def _ask(
    library: Library,
    question: str,
    conversation: int | None,
    client: LLMClient | None,
    model: str,
    cancel: threading.Event | None,
    k: int,
    store: bool,
    scope: Scope | None = None,
) -> Iterator[Event]:
    question = question.strip()
    if not question:
        yield ErrorEvent(LecternError("The question is empty.", "Type a question to ask."))
        return
    history = yield from _history(library, conversation)
    if history is None:
        return
    writer = library.conversations if store else None  # history is read either way
    q = _Question(library, _Run(), writer, conversation, question, question, cancel)
    # The conversation keeps what it searches: a scope given now is saved with it (a new
    # conversation's once it exists, in begin); none given means the saved one.
    try:
        if scope is None:
            scope = library.collections.scope(conversation) if conversation else Scope()
        elif conversation is not None and store:
            library.collections.set_scope(conversation, scope)
    except LecternError as exc:
        yield ErrorEvent(exc)
        return
    q.scope = scope
    q.begin()
    yield from q.kept(_answer(q, history, client, model, k))


def _answer(
    q: _Question, history: Sequence[Turn], client: LLMClient | None, model: str, k: int
) -> Iterator[Event]:
    """The steps from the question kept to the answer's last event."""
    library = q.library
    llm_down: LLMError | None = None

    # 1. Make a follow-up standalone before retrieving for it. Asking the model for it
    # is said first: nothing else is shown until its sources, which a slow model delays.
    if history:
        if client is not None and library.settings.followup_rewrite == "model":
            yield REWRITING
        q.standalone, llm_down = _make_standalone(q, history, client, model)

    # 2. Retrieve; with llm_rerank on, more candidates, which the model puts in order.
    reorder = client is not None and llm_down is None and library.settings.llm_rerank
    hits = yield from _retrieve(q, max(k, LLM_RERANK_CANDIDATES) if reorder else k)
    if hits is None:
        return
    if reorder and client is not None and hits and not q.cancelled:
        hits, llm_down = _llm_reorder(q, client, model, hits)
    hits = hits[:k]
    if not hits:
        yield SourcesEvent((), q.standalone)
        q.run.warnings.append(_nothing_found(q.library, q.scope))
        yield TokenEvent(REFUSAL)
        yield from q.finish(REFUSAL, "declined", (), (), None)
        return

    # 3. Decide: generate (prompt sized to the model) or extract.
    prompt: Prompt | None = None
    if client is not None and llm_down is None and not q.cancelled:
        model = client.served_model(model)
        prompt, llm_down = _fit(q, client, model, hits)
    if prompt is None or client is None:
        if llm_down is not None:
            q.run.warnings.insert(0, fallback_warning(llm_down))
        yield SourcesEvent(tuple(hits), q.standalone)
        yield from q.extractive(hits)
        return

    # 4. Stream the answer, 5. check its citations.
    yield from _generate(q, client, model, prompt)


def _still_indexing(library: Library, scope: Scope | None = None) -> WarningEvent | None:
    """While files are being read, what was not found may be in one of them: how many are
    not searchable yet (of those in ``scope``), or None when nothing is being read."""
    folders: tuple[str, ...] = ()
    if scope:
        try:
            filters = library.collections.filters_for(scope)
        except LecternError:
            return None
        if filters is None:
            return None
        folders = filters.folders
    waiting, total = library.indexer.not_searchable(folders)
    if not waiting:
        return None
    files = "file" if total == 1 else "files"
    verb = "is" if waiting == 1 else "are"
    return _warning(
        WarningKind.STILL_INDEXING,
        f"Lectern is still reading your documents: {waiting:,} of {total:,} {files} {verb} "
        "not searchable yet, and the answer may be in one of them. Ask again once indexing "
        "is done.",
    )


def _nothing_found(library: Library, scope: Scope | None = None) -> WarningEvent:
    """An empty library needs a folder, not a better question; one still being read needs
    time, and says how much of it is not searchable yet."""
    indexing = _still_indexing(library, scope)
    if indexing is not None:
        return indexing
    try:
        empty = library.files.counts()[0].get("indexed", 0) == 0
    except LecternError:
        empty = False
    if empty:
        return _warning(
            WarningKind.EMPTY_LIBRARY,
            "The library has no documents yet: add a folder of your documents, then ask again.",
        )
    if scope:
        try:
            nothing_left = library.collections.filters_for(scope) is None
        except LecternError:
            nothing_left = False
        if nothing_left:
            return _warning(
                WarningKind.EMPTY_SCOPE,
                f"There is nothing left to search in {scope.phrase()}: its folders are no "
                "longer in the library. Choose another scope, then ask again.",
            )
        return _warning(
            WarningKind.NO_SOURCES, f"Nothing in {scope.phrase()} matches this question."
        )
    return _warning(WarningKind.NO_SOURCES, "Nothing in the library matches this question.")


def _history(
    library: Library, conversation: int | None
) -> Generator[Event, None, list[Turn] | None]:
    """The earlier turns of ``conversation`` ([] for a new one); None after an error."""
    if conversation is None:
        return []
    try:
        if library.conversations.get(conversation) is None:
            yield ErrorEvent(
                LecternError(
                    f"There is no conversation {conversation}.",
                    "Leave out --conversation to start a new one.",
                )
            )
            return None
        return library.conversations.turns(conversation)
    except StoreError as exc:
        yield ErrorEvent(exc)
        return None


def _make_standalone(
    q: _Question, history: Sequence[Turn], client: LLMClient | None, model: str
) -> tuple[str, LLMError | None]:
    """The follow-up as a standalone question, and the error if the server is down or
    lacks the model (the answer is then extractive)."""
    t = time.perf_counter()
    rewritten: str | None = None
    llm_down: LLMError | None = None
    if client is not None and q.library.settings.followup_rewrite == "model":
        try:
            reply = complete(
                client,
                model,
                rewrite_messages([(h.question, h.answer) for h in history], q.question),
                num_ctx=REWRITE_CONTEXT if client.sets_num_ctx else None,
                num_predict=REWRITE_TOKENS,
                cancel=q.cancel,
            )
            rewritten = clean_rewrite(reply, q.question)
        except (LLMUnavailableError, LLMTimeoutError, ModelNotFoundError) as exc:
            llm_down = exc
        except LLMError as exc:
            q.run.warnings.append(
                _warning(
                    WarningKind.REWRITE_FAILED,
                    f"The follow-up question could not be rewritten: {exc.message}",
                )
            )
    # The words borrowed are those of the question before, as asked; only a question
    # that was itself a bare follow-up ("And the stairs?") lends its standalone form.
    # Standalone forms alone made each follow-up carry every earlier question's words.
    previous = [
        h.question if len(content_words(h.question)) >= 2 else h.standalone_question
        for h in history
    ]
    standalone = rewritten or keyword_followup(previous, q.question)
    if not rewritten and len(content_words(q.question)) >= 2:
        # The previous question's terms help retrieval but would drag the extracted
        # sentences back to the previous answer; pick them by the question as asked.
        q.run.extract_question = q.question
    q.run.mark("rewrite_s", t)
    return standalone, llm_down


def _retrieve(q: _Question, k: int) -> Generator[Event, None, list[Hit] | None]:
    t = time.perf_counter()
    try:
        hits = list(q.library.search(q.standalone, k=k, scope=q.scope, lead=ANSWER_LEAD))
    except LecternError as exc:
        yield ErrorEvent(exc)
        return None
    q.run.mark("retrieval_s", t)
    return hits


def _llm_reorder(
    q: _Question, client: LLMClient, model: str, hits: list[Hit]
) -> tuple[list[Hit], LLMError | None]:
    """The candidates in the order the model puts them (core/generation/llm_order.py), and the
    error when the server is down or lacks the model (the answer is then extractive, from
    the candidates in search order)."""
    try:
        order = llm_order(client, model, q.standalone, hits, cancel=q.cancel)
    except (LLMUnavailableError, LLMTimeoutError, ModelNotFoundError) as exc:
        return hits, exc
    except LLMError as exc:
        q.run.warnings.append(
            _warning(
                WarningKind.RERANK_FAILED,
                f"{model} could not put the sources in order ({exc.message}), so they are "
                "in search order.",
            )
        )
        return hits, None
    q.run.timings["llm_rerank_s"] = order.seconds
    if not order.understood:
        q.run.warnings.append(
            _warning(
                WarningKind.RERANK_UNREAD,
                f"{model} did not answer with passage numbers when asked to order the "
                "sources, so they are in search order. A larger model may do better, or turn "
                'off "Let the language model put them in order" in Settings.',
            )
        )
    return list(order.hits), None


# The note a turn stopped before its end keeps (the same words as the warning).
TURN_STOPPED = "Stopped before the answer was finished."
# How often a streaming answer's text so far is stored (for an answer cut off by the
# process's end); each is one small write, skipped while another writer is busy.
PARTIAL_EVERY_S = 2.0
# Before the model's own text when the quote is put first (see _stream's end).
MODEL_UNCHECKED = "The model's answer, unverified:"
CONTEXT_RETRIES = 3  # prompts re-cut after the server says one exceeds its context
DRAFT_AFTER_S = 1.0  # silence before the quoted answer is shown in the meantime


def _fit(
    q: _Question,
    client: LLMClient,
    model: str,
    hits: Sequence[Hit],
    context_length: int | None = None,
) -> tuple[Prompt | None, LLMError | None]:
    """The prompt sized to the model's context (``context_length`` when the server has
    just said it, else asked), or the error that makes the answer extractive; (None, None)
    when not even one source fits (the answer is then quoted, with a warning)."""
    if context_length is None:
        try:
            context_length = client.context_length(model)
        except (LLMUnavailableError, LLMTimeoutError, ModelNotFoundError) as exc:
            return None, exc
        except LLMError:
            context_length = None  # the server could not say; size for the request alone
    answer_tokens = q.library.settings.answer_max_tokens
    if context_length and not client.sets_num_ctx:
        # A server with a fixed context (llama.cpp) refuses only a prompt longer than it,
        # and a grounded answer is a few sentences: a 2,048-token context need not give
        # half of itself to the answer.
        answer_tokens = min(answer_tokens, max(MIN_ANSWER_TOKENS, context_length // 4))
    dates = _dates(q.library, hits)
    if q.library.settings.small_to_big:
        hits = widen_for_prompt(
            q.library.db,
            q.standalone,
            hits,
            context_length=context_length,
            sets_num_ctx=client.sets_num_ctx,
            answer_tokens=answer_tokens,
            dates=dates,
        )
    settings = q.library.settings
    choices = PromptChoices(
        order=settings.source_order,
        dates=settings.source_dates,
        prefer_newest=settings.prefer_newest,
    )
    cut = None
    if settings.source_excerpts and not settings.small_to_big:
        t = time.perf_counter()
        cut = excerpts(q.standalone, hits, _embedder(q.library), q.finder(hits))
        q.run.mark("excerpts_s", t)
    try:
        prompt = fit_prompt(
            q.standalone,
            hits,
            context_length=context_length,
            sets_num_ctx=client.sets_num_ctx,
            dates=dates,
            answer_tokens=answer_tokens,
            choices=choices,
            excerpts=cut,
        )
    except ContextTooSmallError as exc:
        q.run.warnings.insert(0, _context_warning(exc))
        return None, None
    return prompt, None


def _context_warning(error: ContextTooSmallError) -> WarningEvent:
    return fallback_warning(error, WarningKind.CONTEXT)


def _refit_context(error: ContextTooSmallError, prompt: Prompt) -> int | None:
    """The context size to cut the prompt for after the server refused it, in the
    estimate's own units (3 characters a token), or None when it cannot be smaller."""
    limit = error.n_ctx or (prompt.context_limit or 4096) // 2
    if error.n_prompt_tokens and prompt.estimated_tokens:
        # The server counted more tokens than the estimate: scale its limit down alike.
        ratio = error.n_prompt_tokens / prompt.estimated_tokens
        if ratio > 1:
            limit = int(limit / ratio)
    if len(prompt.hits) <= 1:
        return None
    return max(limit, 1)


def _generate(q: _Question, client: LLMClient, model: str, prompt: Prompt) -> Iterator[Event]:
    run = q.run
    for attempt in range(CONTEXT_RETRIES + 1):
        refused = yield from _stream(q, client, model, prompt)
        if refused is None:
            return
        limit = _refit_context(refused, prompt) if attempt < CONTEXT_RETRIES else None
        refit = None
        if limit is not None:
            # One source fewer at least, so every retry makes progress.
            refit = _fit(q, client, model, prompt.hits[:-1], context_length=limit)
        if refit is None or refit[0] is None:
            if not any(w.kind == WarningKind.CONTEXT for w in run.warnings):
                run.warnings.insert(0, _context_warning(refused))
            yield from q.extractive(prompt.hits)
            return
        dropped = len(prompt.dropped) + len(prompt.hits) - len(refit[0].hits)
        prompt = replace(
            refit[0], dropped=tuple(prompt.dropped) + tuple(prompt.hits[len(refit[0].hits) :])
        )
        run.timings["context_retries"] = attempt + 1
        run.timings["sources_dropped"] = dropped


def _server_status(delta: ChatDelta, sources: int) -> StatusEvent | None:
    if delta.loading:
        return StatusEvent("The model server is loading the model…", "loading")
    if delta.total:
        read = f"{delta.read or 0:,} of {delta.total:,} tokens"
        return StatusEvent(
            f"The model is reading the question and {sources} source(s) ({read})…", "reading"
        )
    return None


def _stream(
    q: _Question, client: LLMClient, model: str, prompt: Prompt
) -> Generator[Event, None, ContextTooSmallError | None]:
    """Stream one prompt's answer and finish the question; the server's refusal of the
    prompt as too long is returned instead (nothing was shown yet), so it can be cut."""
    run = q.run
    sources = list(prompt.hits)
    if prompt.dropped:
        run.warnings = [w for w in run.warnings if w.kind != WarningKind.SOURCES_TRIMMED]
        run.warnings.append(
            _warning(
                WarningKind.SOURCES_TRIMMED,
                f"{len(prompt.dropped)} less relevant source(s) were left out so the prompt fits the "
                f"model's context window ({prompt.context_limit} tokens).",
            )
        )
    yield SourcesEvent(tuple(sources), q.standalone)

    t = time.perf_counter()
    parts: list[str] = []
    final: ChatDelta | None = None
    failure: LLMError | None = None
    drafted = False
    run.timings.update(
        {
            "prompt_tokens_estimated": prompt.estimated_tokens,
            "num_ctx": prompt.num_ctx,
            "sources_sent": len(sources),
        }
    )
    try:
        for delta in client.chat(
            model,
            prompt.messages,
            num_ctx=prompt.num_ctx,
            num_predict=prompt.num_predict,
            temperature=q.library.settings.answer_temperature,
            cancel=q.cancel,
        ):
            if delta.is_wait:
                status = _server_status(delta, len(sources))
                if status is not None:
                    yield status
                if not drafted and (delta.waiting_s or 0.0) >= DRAFT_AFTER_S:
                    # The person is not left waiting while a slow server reads: the quoted
                    # answer now, which the written one replaces when it streams.
                    drafted = True
                    quoted = q.quote(sources)
                    run.mark("draft_s", run.started)
                    yield DraftEvent(quoted.text, quoted.citations, quoted.declined)
                continue
            if delta.text and "first_token_s" not in run.timings:
                run.mark("first_token_s", t)
            if delta.text:
                parts.append(delta.text)
                yield TokenEvent(delta.text)
            if delta.done:
                final = delta
    except ContextTooSmallError as exc:
        if not parts:
            return exc
        yield ErrorEvent(exc, "".join(parts))
        return None
    except LLMError as exc:
        failure = exc
    run.mark("generation_s", t)
    partial = "".join(parts).strip()

    if failure is not None and not partial:
        if isinstance(
            failure,
            LLMUnavailableError | LLMTimeoutError | StreamInterruptedError | ModelNotFoundError,
        ):
            run.warnings.insert(0, fallback_warning(failure))
            yield from q.extractive(sources)
            return None
        yield ErrorEvent(failure, "")
        return None
    _stream_warnings(q, failure, final, prompt)
    if not partial and not q.cancelled:
        run.warnings.append(_warning(WarningKind.EMPTY, "The model returned an empty answer."))
        yield from q.extractive(sources)
        return None

    t = time.perf_counter()
    embedder = _embedder(q.library)
    report = verify_answer(
        partial,
        sources,
        embedder,
        finder=answer_finder(q.library, sources, embedder),
        tag=prompt.tag,
    )
    run.mark("citations_s", t)
    run.warnings.extend(_from_answer_warnings(report.warnings))
    mode = "declined" if report.refusal else "generated"
    answer, citations = report.answer, report.citations
    if report.refusal:
        q.note_still_indexing()
    elif not q.cancelled and (not report.citations or report.unverified):
        # A model's answer is never worse than the quote: one that cites nothing, or
        # whose figures or names its cited source lacks, follows the quote, marked; when
        # no passage answers the question, the decline is what comes first.
        quoted = q.quote(sources)
        answer = f"{quoted.text}\n\n{MODEL_UNCHECKED} {strip_citations(report.answer)}"
        citations = quoted.citations
        mode = "declined" if quoted.declined else "extractive"
        why = (
            "cites no source"
            if not report.citations
            else "has a figure or name its cited source lacks"
        )
        first = (
            "no passage of them seems to answer the question, which comes first"
            if quoted.declined
            else "the passage quoted from them comes first"
        )
        run.warnings.insert(
            0,
            _warning(
                WarningKind.QUOTED_FIRST,
                f"{model}'s answer could not be checked against your documents (it {why}), "
                f"so {first}; the model's text follows it.",
            ),
        )
    if mode == "generated" and not q.cancelled and q.quote(sources).declined:
        # A near miss: the model answers with the nearby fact ("What did Wilson call
        # for?" answered with Heath's call, cited). The quote's decline model found no
        # passage that answers the question; say so beside the cited answer.
        run.warnings.insert(
            0,
            _warning(
                WarningKind.WEAK_EVIDENCE,
                "No passage of your documents seems to answer this question itself; the "
                "answer may rest on a nearby fact. Check it against the cited passages.",
            ),
        )
    yield from q.finish(answer, mode, citations, sources, model)
    return None


def _stream_warnings(
    q: _Question, failure: LLMError | None, final: ChatDelta | None, prompt: Prompt
) -> None:
    """What the end of the stream says about the answer: cut short, cancelled, the
    prompt truncated by the server, or the length limit reached."""
    run = q.run
    if failure is not None:
        # One sentence: what happened to this answer. The next step (ask again) is a
        # button beside the warning, not more words in it.
        reason = failure.message.rstrip(".")
        if reason.startswith("The "):
            reason = "the " + reason[4:]
        run.warnings.append(
            _warning(WarningKind.INCOMPLETE, f"The answer is incomplete: {reason}.")
        )
    if q.cancelled:
        run.warnings.append(
            _warning(WarningKind.CANCELLED, "Stopped before the answer was finished.")
        )
    if final is None:
        return
    run.timings["prompt_eval_count"] = final.prompt_eval_count
    run.timings["eval_count"] = final.eval_count
    if final.prompt_read is not None:
        run.timings["prompt_read"] = final.prompt_read  # read anew, not from the cache
    if final.prompt_cached is not None:
        run.timings["prompt_cached"] = final.prompt_cached
    if looks_truncated(final.prompt_eval_count, prompt.estimated_tokens):
        run.warnings.append(
            _warning(
                WarningKind.TRUNCATED,
                f"The server read only {final.prompt_eval_count} prompt tokens of about "
                f"{prompt.estimated_tokens} sent: it probably cut the sources, so the answer "
                "may miss information. Use a model with a larger context window.",
            )
        )
    if final.done_reason == "length":
        run.warnings.append(
            _warning(WarningKind.INCOMPLETE, "The answer reached the length limit and was cut off.")
        )
