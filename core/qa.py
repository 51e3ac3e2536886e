"""``ask``: one question in, a stream of events out. The CLI and the desktop app both use it.

Events come in this order::

    SourcesEvent            the numbered sources ([1] = hits[0]) the answer may cite
    TokenEvent ...          the answer as it is written (or extracted)
    CitationsEvent          verified citations with the spans to highlight
    WarningEvent ...        anything the reader should know (any number, maybe none)
    DoneEvent | ErrorEvent  always last, exactly one of them

``SourcesEvent`` is missing only when retrieval itself failed (then an ErrorEvent follows).
The streamed tokens are the raw model output; ``DoneEvent.answer`` is the checked answer
(citation numbers that match no source removed), which a UI should show in their place.

What happens when the model server misbehaves:

* not running / not reachable, or silent before its first token: the answer falls back
  to the extractive mode (sentences from the sources), with a WarningEvent saying why;
  ``DoneEvent.mode`` is "extractive" (or "declined" when nothing is close enough).
* model not installed: ErrorEvent carrying ModelNotFoundError (its ``model`` says what
  to pull); no fallback, because the person asked for that model and can fix it at once.
* the prompt does not fit the model even with one source: ErrorEvent (ContextTooSmallError).
* stream cut, stalled or failed mid-answer: the partial answer is kept, mode "generated",
  with a WarningEvent of kind "incomplete".
* cancelled: the stream stops at once; DoneEvent with what had arrived and a "cancelled"
  warning. Cancelled turns are not stored in the conversation.

Every completed turn is stored with its sources and citations (core/conversations.py).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, Union

from core.config import Settings, load_settings
from core.conversations import ConversationStore, Turn
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
from core.generation.citations import (
    REFUSAL,
    AnswerWarning,
    PageLookup,
    SpanFinder,
    content_words,
    verify_answer,
)
from core.generation.extractive import extract_answer
from core.generation.llm import LLMClient, complete, make_client
from core.generation.prompt import (
    Prompt,
    clean_rewrite,
    fit_prompt,
    keyword_followup,
    looks_truncated,
    rewrite_messages,
)
from core.records import Citation, Hit

if TYPE_CHECKING:
    from core.embedding import Embedder

MODES = ("generated", "extractive", "declined")
REWRITE_CONTEXT = 4096
REWRITE_TOKENS = 128
TEMPERATURE = 0.1  # grounded answers: little room for invention


# --- events ---------------------------------------------------------------------------


@dataclass(frozen=True)
class SourcesEvent:
    hits: tuple[Hit, ...]
    question: str = ""  # the standalone question the sources were retrieved for


@dataclass(frozen=True)
class TokenEvent:
    text: str


@dataclass(frozen=True)
class CitationsEvent:
    citations: tuple[Citation, ...]


@dataclass(frozen=True)
class WarningEvent:
    message: str
    kind: str

    def to_json(self) -> dict[str, str]:
        return {"kind": self.kind, "message": self.message}


@dataclass(frozen=True)
class DoneEvent:
    answer: str
    mode: str  # "generated" | "extractive" | "declined"
    citations: tuple[Citation, ...]
    warnings: tuple[WarningEvent, ...]
    timings: dict[str, float | int | None] = field(default_factory=dict)
    conversation_id: int | None = None
    turn_id: int | None = None
    model: str | None = None  # None when no model wrote the answer
    question: str = ""  # the standalone question used for retrieval
    sources: tuple[Hit, ...] = ()

    def to_json(self) -> dict[str, object]:
        return {
            "answer": self.answer,
            "mode": self.mode,
            "citations": [c.to_json() for c in self.citations],
            "warnings": [w.to_json() for w in self.warnings],
            "timings": dict(self.timings),
            "conversation": self.conversation_id,
            "turn": self.turn_id,
            "model": self.model,
            "question": self.question,
        }


@dataclass(frozen=True)
class ErrorEvent:
    error: LecternError
    partial_answer: str = ""

    def to_json(self) -> dict[str, object]:
        return {
            "error": type(self.error).__name__,
            "message": self.error.message,
            "hint": self.error.hint,
            "model": getattr(self.error, "model", None),
            "partial_answer": self.partial_answer,
        }


Event = Union[SourcesEvent, TokenEvent, CitationsEvent, WarningEvent, DoneEvent, ErrorEvent]  # noqa: UP007


# --- helpers over the library ----------------------------------------------------------


def _settings_of(library: Any) -> Settings:
    settings = getattr(library, "settings", None)
    return settings if isinstance(settings, Settings) else load_settings()


def _db_of(library: Any) -> Any:
    return getattr(library, "db", None)


def _cursor(db: Any) -> Any:
    return db.cursor()


def conversation_store(library: Any) -> ConversationStore | None:
    store = getattr(library, "conversations", None)
    if isinstance(store, ConversationStore):
        return store  # the library's own, which also keeps the backup copy
    db = _db_of(library)
    if db is None:
        return None
    return ConversationStore(lambda: _cursor(db), getattr(db, "write_lock", None))


def _embedder(library: Any) -> Embedder | None:
    try:
        return library.embedder  # type: ignore[no-any-return]
    except LecternError:
        return None  # spans then come from word overlap alone


def _dates(library: Any, hits: Sequence[Hit]) -> dict[str, str]:
    """Each source file's modification date, for the prompt."""
    dates: dict[str, str] = {}
    db = _db_of(library)
    ids = sorted({h.document_id for h in hits})
    if db is not None and ids:
        try:
            rows = (
                _cursor(db)
                .execute(
                    "SELECT path, mtime FROM documents WHERE id IN (SELECT unnest(?::BIGINT[]))",
                    [ids],
                )
                .fetchall()
            )
            for path, mtime in rows:
                if mtime:
                    dates[path] = datetime.fromtimestamp(float(mtime)).date().isoformat()
        except Exception:  # the date is a nicety; never fail an answer over it
            pass
    for hit in hits:
        if hit.path not in dates:
            try:
                dates[hit.path] = (
                    datetime.fromtimestamp(os.stat(hit.path).st_mtime).date().isoformat()
                )
            except OSError:
                pass
    return dates


def _page_lookup(library: Any, hits: Sequence[Hit]) -> PageLookup | None:
    """Exact pages for spans inside chunks that cross a page break."""
    spanning = sorted(
        {h.document_id for h in hits if h.page_end is not None and h.page_end != h.page}
    )
    if not spanning or not hasattr(library, "document_pages"):
        return None
    pages: dict[int, list[Any]] = {}
    try:
        for document_id in spanning:
            pages[document_id] = list(library.document_pages(document_id))
    except Exception:  # the chunk's first page is still a fair answer
        return None

    def page_of(hit: Hit, offset: int) -> int | None:
        for span in pages.get(hit.document_id, ()):
            if span.start <= offset < span.end:
                return int(span.page)
        return hit.page

    return page_of


def _warning(kind: str, message: str) -> WarningEvent:
    return WarningEvent(message=message, kind=kind)


def _from_answer_warnings(items: Sequence[AnswerWarning]) -> list[WarningEvent]:
    return [_warning(w.kind, w.message) for w in items]


def _fallback_warning(error: LLMError) -> WarningEvent:
    kind = "llm_timeout" if isinstance(error, LLMTimeoutError) else "llm_unavailable"
    hint = f" {error.hint}" if error.hint else ""
    return _warning(
        kind,
        f"{error.message} These are sentences extracted from your documents instead of a "
        f"written answer.{hint}",
    )


# --- the call ---------------------------------------------------------------------------


def ask(
    library: Any,
    question: str,
    conversation: int | None = None,
    *,
    client: LLMClient | None = None,
    model: str | None = None,
    cancel: threading.Event | None = None,
    use_llm: bool = True,
    k: int | None = None,
    store: bool = True,
) -> Iterator[Event]:
    """Answer ``question`` from ``library``; see the module docstring for the events.

    ``conversation`` is the id of an earlier conversation to continue (its turns make a
    follow-up question standalone before retrieval); None starts a new one. ``client``
    defaults to the server in the library's settings; ``use_llm=False`` answers
    extractively without contacting any server.
    """
    settings = _settings_of(library)
    model_name = model or settings.llm_model
    own_client = False
    if use_llm and client is None:
        try:
            client = make_client(settings)
            own_client = True
        except LecternError as exc:
            yield ErrorEvent(exc)
            return
    try:
        yield from _ask(
            library,
            settings,
            question,
            conversation,
            client if use_llm else None,
            model_name,
            cancel,
            k or settings.top_k,
            store,
        )
    finally:
        if own_client and client is not None:
            client.close()


class _Run:
    """State shared by the steps of one question."""

    def __init__(self) -> None:
        self.started = time.perf_counter()
        self.timings: dict[str, float | int | None] = {}
        self.warnings: list[WarningEvent] = []
        self.extract_question: str | None = None

    def mark(self, name: str, since: float) -> None:
        self.timings[name] = round(time.perf_counter() - since, 4)


def _ask(
    library: Any,
    settings: Settings,
    question: str,
    conversation: int | None,
    client: LLMClient | None,
    model: str,
    cancel: threading.Event | None,
    k: int,
    store: bool,
) -> Iterator[Event]:
    run = _Run()
    question = question.strip()
    if not question:
        yield ErrorEvent(LecternError("The question is empty.", "Type a question to ask."))
        return
    conversations = conversation_store(library) if store else None
    history: list[Turn] = []
    if conversation is not None:
        if conversations is None:
            conversations = conversation_store(library)
        try:
            if conversations is None or conversations.get(conversation) is None:
                yield ErrorEvent(
                    LecternError(
                        f"There is no conversation {conversation}.",
                        "Leave out --conversation to start a new one.",
                    )
                )
                return
            history = conversations.turns(conversation)
        except StoreError as exc:
            yield ErrorEvent(exc)
            return

    writer = conversations if store else None  # history is read either way
    llm_down: LLMError | None = None

    # 1. Make a follow-up standalone before retrieving for it.
    standalone = question
    if history:
        t = time.perf_counter()
        rewritten: str | None = None
        if client is not None:
            try:
                reply = complete(
                    client,
                    model,
                    rewrite_messages([(h.question, h.answer) for h in history], question),
                    num_ctx=REWRITE_CONTEXT if client.sets_num_ctx else None,
                    num_predict=REWRITE_TOKENS,
                    cancel=cancel,
                )
                rewritten = clean_rewrite(reply, question)
            except (LLMUnavailableError, LLMTimeoutError) as exc:
                llm_down = exc
            except ModelNotFoundError as exc:
                yield ErrorEvent(exc)
                return
            except LLMError as exc:
                run.warnings.append(
                    _warning(
                        "rewrite_failed",
                        f"The follow-up question could not be rewritten: {exc.message}",
                    )
                )
        standalone = rewritten or keyword_followup(
            [h.standalone_question for h in history], question
        )
        if not rewritten and len(content_words(question)) >= 2:
            # The previous question's terms help retrieval but would drag the extracted
            # sentences back to the previous answer; pick them by the question as asked.
            run.extract_question = question
        run.mark("rewrite_s", t)

    # 2. Retrieve.
    t = time.perf_counter()
    try:
        hits = list(library.search(standalone, k=k))
    except LecternError as exc:
        yield ErrorEvent(exc)
        return
    run.mark("retrieval_s", t)

    if not hits:
        yield SourcesEvent((), standalone)
        run.warnings.append(_warning("no_sources", "Nothing in the library matches this question."))
        yield TokenEvent(REFUSAL)
        yield from _finish(
            library,
            run,
            writer,
            conversation,
            question,
            standalone,
            REFUSAL,
            "declined",
            (),
            (),
            None,
        )
        return

    # 3. Decide: generate (prompt sized to the model) or extract.
    prompt: Prompt | None = None
    if client is not None and llm_down is None and not _cancelled(cancel):
        try:
            context_length = client.context_length(model)
        except (LLMUnavailableError, LLMTimeoutError) as exc:
            llm_down = exc
        except ModelNotFoundError as exc:
            yield SourcesEvent(tuple(hits), standalone)
            yield ErrorEvent(exc)
            return
        except LLMError:
            context_length = None  # the server could not say; size for the request alone
        if llm_down is None:
            try:
                prompt = fit_prompt(
                    standalone,
                    hits,
                    context_length=context_length,
                    sets_num_ctx=client.sets_num_ctx,
                    dates=_dates(library, hits),
                )
            except ContextTooSmallError as exc:
                yield SourcesEvent(tuple(hits), standalone)
                yield ErrorEvent(exc)
                return

    if prompt is None:
        if llm_down is not None:
            run.warnings.insert(0, _fallback_warning(llm_down))
        yield SourcesEvent(tuple(hits), standalone)
        yield from _extractive(
            library, run, writer, conversation, question, standalone, hits, cancel
        )
        return

    assert client is not None
    sources = list(prompt.hits)
    if prompt.dropped:
        run.warnings.append(
            _warning(
                "sources_trimmed",
                f"{len(prompt.dropped)} less relevant source(s) were left out so the prompt fits the "
                f"model's context window ({prompt.context_limit} tokens).",
            )
        )
    yield SourcesEvent(tuple(sources), standalone)

    # 4. Stream the answer.
    t = time.perf_counter()
    parts: list[str] = []
    final = None
    failure: LLMError | None = None
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
            temperature=TEMPERATURE,
            cancel=cancel,
        ):
            if "first_token_s" not in run.timings:
                run.mark("first_token_s", t)
            if delta.text:
                parts.append(delta.text)
                yield TokenEvent(delta.text)
            if delta.done:
                final = delta
    except (ModelNotFoundError, ContextTooSmallError) as exc:
        yield ErrorEvent(exc, "".join(parts))
        return
    except LLMError as exc:
        failure = exc
    run.mark("generation_s", t)
    partial = "".join(parts).strip()

    if failure is not None and not partial:
        if isinstance(failure, LLMUnavailableError | LLMTimeoutError | StreamInterruptedError):
            run.warnings.insert(0, _fallback_warning(failure))
            yield from _extractive(
                library, run, writer, conversation, question, standalone, sources, cancel
            )
            return
        yield ErrorEvent(failure, "")
        return
    if failure is not None:
        # The hint is the next step ("try again"); the message alone reads like a crash report.
        hint = f" {failure.hint}" if failure.hint else ""
        run.warnings.append(
            _warning("incomplete", f"The answer is incomplete: {failure.message}{hint}")
        )
    if _cancelled(cancel):
        run.warnings.append(_warning("cancelled", "Stopped before the answer was finished."))
    if final is not None:
        run.timings["prompt_eval_count"] = final.prompt_eval_count
        run.timings["eval_count"] = final.eval_count
        if looks_truncated(final.prompt_eval_count, prompt.estimated_tokens):
            run.warnings.append(
                _warning(
                    "truncated",
                    f"The server read only {final.prompt_eval_count} prompt tokens of about "
                    f"{prompt.estimated_tokens} sent: it probably cut the sources, so the answer "
                    "may miss information. Use a model with a larger context window.",
                )
            )
        if final.done_reason == "length":
            run.warnings.append(
                _warning("incomplete", "The answer reached the length limit and was cut off.")
            )
    if not partial and not _cancelled(cancel):
        run.warnings.append(_warning("empty", "The model returned an empty answer."))
        yield from _extractive(
            library, run, writer, conversation, question, standalone, sources, cancel
        )
        return

    # 5. Check the citations.
    t = time.perf_counter()
    embedder = _embedder(library)
    report = verify_answer(
        partial, sources, embedder, finder=SpanFinder(embedder, _page_lookup(library, sources))
    )
    run.mark("citations_s", t)
    run.warnings.extend(_from_answer_warnings(report.warnings))
    mode = "declined" if report.refusal else "generated"
    yield from _finish(
        library,
        run,
        writer,
        conversation,
        question,
        standalone,
        report.answer,
        mode,
        report.citations,
        sources,
        model,
        save=not _cancelled(cancel),
    )


def _cancelled(cancel: threading.Event | None) -> bool:
    return cancel is not None and cancel.is_set()


def _extractive(
    library: Any,
    run: _Run,
    conversations: ConversationStore | None,
    conversation: int | None,
    question: str,
    standalone: str,
    hits: Sequence[Hit],
    cancel: threading.Event | None,
) -> Iterator[Event]:
    t = time.perf_counter()
    result = extract_answer(
        run.extract_question or standalone,
        hits,
        _embedder(library),
        page_of=_page_lookup(library, hits),
    )
    run.mark("extractive_s", t)
    yield TokenEvent(result.text)
    mode = "declined" if result.declined else "extractive"
    yield from _finish(
        library,
        run,
        conversations,
        conversation,
        question,
        standalone,
        result.text,
        mode,
        result.citations,
        hits,
        None,
        save=not _cancelled(cancel),
    )


def _finish(
    library: Any,
    run: _Run,
    conversations: ConversationStore | None,
    conversation: int | None,
    question: str,
    standalone: str,
    answer: str,
    mode: str,
    citations: Sequence[Citation],
    sources: Sequence[Hit],
    model: str | None,
    *,
    save: bool = True,
) -> Iterator[Event]:
    turn_id: int | None = None
    if conversations is not None and save:
        try:
            if conversation is None:
                conversation = conversations.create(question)
            turn_id = conversations.add_turn(
                conversation,
                question=question,
                standalone_question=standalone,
                answer=answer,
                mode=mode,
                sources=sources,
                citations=citations,
                warnings=[w.to_json() for w in run.warnings],
            )
        except Exception as exc:  # an answer is never lost to a history write
            run.warnings.append(
                _warning("not_saved", f"The answer could not be saved to the conversation: {exc}")
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
        conversation_id=conversation,
        turn_id=turn_id,
        model=model,
        question=standalone,
        sources=tuple(sources),
    )
