"""Typed operations: the one seam between a front end and the library.

Each thing the window, the CLI and the socket server ask of a library is an :class:`Op`:
its name (for errors and logs), the work it does given the library, and a
:class:`Changes` record saying what it changes, so a front end redraws what changed and
nothing else (Anki's ``CollectionOp`` and ``OpChanges``). Where it runs is the front
end's business: the app runs an op on a worker thread (``desktop/backend.py``
``Backend.run``) and is told its ``Changes`` on one signal; the CLI and the socket server
run it in place (``Op.run``). No front end calls the library's services for these; each
calls the op, so the rules they keep (what a change backs up, what it blanks, what it
redraws) are written once, here and below.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

from core.records import (
    Collection,
    Conversation,
    ConversationMatch,
    Document,
    FileEntry,
    FolderStatus,
    Hit,
    PageSpan,
    Scope,
    Turn,
    WordBox,
)

if TYPE_CHECKING:
    from core.app.coordinator import IndexJob
    from core.app.watch import AppliedBatch, FolderWatcher
    from core.config import Settings
    from core.embedding.languages import ModelAdvice
    from core.generation.session import AnswerSession
    from core.library import Library
    from core.records import IndexProgress, IndexReport

T = TypeVar("T")
U = TypeVar("U")


@dataclass(frozen=True)
class Changes:
    """What an operation changed: each flag names what a front end shows again."""

    folders: bool = False  # folders added or removed, their counts
    documents: bool = False  # files indexed, removed or read again
    conversations: bool = False  # the list of conversations or their turns
    collections: bool = False  # collections made, renamed, filled or deleted
    scope: bool = False  # what a conversation searches
    settings: bool = False

    def __or__(self, other: Changes) -> Changes:
        return Changes(
            **{f.name: getattr(self, f.name) or getattr(other, f.name) for f in fields(self)}
        )

    def __bool__(self) -> bool:
        return any(getattr(self, f.name) for f in fields(self))

    @property
    def names(self) -> frozenset[str]:
        """The flags set, by name: what a log or a test reads."""
        return frozenset(f.name for f in fields(self) if getattr(self, f.name))


NOTHING = Changes()


class OpContext(Protocol):
    """What an op's work is handed where it runs: a way to report progress (the app shows
    it; in place it goes nowhere) and the event that asks it to stop."""

    cancel: threading.Event

    def report(self, value: object) -> None: ...


@dataclass
class InPlace:
    """The context of an op run in place, by the CLI or the socket server: progress is
    not shown, and ``cancel`` is the caller's (Ctrl+C, a client gone)."""

    cancel: threading.Event = field(default_factory=threading.Event)

    def report(self, value: object) -> None:
        pass


@dataclass(frozen=True)
class Done(Generic[T]):
    """An op's result and what it changed."""

    value: T
    changes: Changes


@dataclass(frozen=True)
class Op(Generic[T]):
    name: str
    work: Callable[[Library, OpContext], T]
    changes: Changes = NOTHING

    def run(self, library: Library, ctx: OpContext | None = None) -> Done[T]:
        """The op done here and now: its result and its changes. Its errors are raised
        (each a LecternError with its message and hint)."""
        return Done(self.work(library, ctx or InPlace()), self.changes)

    def then(self, step: Callable[[T], U]) -> Op[U]:
        """This op followed by ``step`` over its result, on the same thread: work a front
        end does with what it read (laying out a document's text) stays off its UI
        thread."""
        work = self.work
        return Op(self.name, lambda library, ctx: step(work(library, ctx)), self.changes)


# --- folders and files ------------------------------------------------------------------


def remove_folder(path: str) -> Op[int]:
    """A folder and its passages out of the library (its files stay on disk); the
    number of files removed. Saved answers that drew on them are blanked."""
    return Op(
        "remove folder",
        lambda library, ctx: library.remove_folder(path),
        Changes(folders=True, documents=True, conversations=True),
    )


def file_list(folder: str | None = None, status: str | None = None) -> Op[list[FileEntry]]:
    return Op("file list", lambda library, ctx: library.files.file_list(folder, status))


def document_text(document_id: int) -> Op[str]:
    return Op("document text", lambda library, ctx: library.files.text(document_id))


def document_pages(document_id: int) -> Op[list[PageSpan]]:
    return Op("document pages", lambda library, ctx: library.files.pages(document_id))


def ocr_words(document_id: int, start: int, end: int) -> Op[list[WordBox]]:
    return Op(
        "words read by OCR", lambda library, ctx: library.files.ocr_words(document_id, start, end)
    )


def ocr_pages(document_id: int) -> Op[list[int]]:
    return Op("pages read by OCR", lambda library, ctx: library.files.ocr_pages(document_id))


# --- search -----------------------------------------------------------------------------


def search(
    query: str,
    k: int | None = None,
    mode: str = "hybrid",
    folders: Sequence[str] | None = None,
    types: Sequence[str] | None = None,
    *,
    scope: Scope | None = None,
) -> Op[list[Hit]]:
    return Op(
        "search", lambda library, ctx: library.search(query, k, mode, folders, types, scope=scope)
    )


def matched_words(query: str, texts: Sequence[str]) -> Op[list[frozenset[str]] | None]:
    """The words of each text that a keyword search for ``query`` lights; None while
    there is no keyword index to ask."""
    return Op("search words", lambda library, ctx: library.keyword.matched_words(query, texts))


# --- conversations ----------------------------------------------------------------------


def conversations(limit: int = 100) -> Op[list[Conversation]]:
    return Op("conversations", lambda library, ctx: library.conversations.list(limit))


def conversation(conversation_id: int) -> Op[Conversation]:
    """One conversation; ConversationNotFoundError when there is none of that id."""
    return Op("conversation", lambda library, ctx: library.conversations.require(conversation_id))


def turns(conversation_id: int) -> Op[list[Turn]]:
    return Op(
        "load conversation", lambda library, ctx: library.conversations.turns(conversation_id)
    )


def delete_conversation(conversation_id: int) -> Op[None]:
    return Op(
        "delete conversation",
        lambda library, ctx: library.conversations.delete(conversation_id),
        Changes(conversations=True, scope=True),
    )


def rename_conversation(conversation_id: int, title: str) -> Op[Conversation]:
    return Op(
        "rename conversation",
        lambda library, ctx: library.conversations.rename(conversation_id, title),
        Changes(conversations=True),
    )


def search_conversations(query: str, limit: int = 100) -> Op[list[ConversationMatch]]:
    return Op(
        "search conversations", lambda library, ctx: library.conversations.search(query, limit)
    )


def export_conversation(conversation_id: int, path: str | Path | None = None) -> Op[str]:
    """The conversation as Markdown, written to ``path`` too when one is given."""
    return Op(
        "export conversation",
        lambda library, ctx: library.conversations.export(conversation_id, path),
    )


# --- collections and scopes -------------------------------------------------------------


@dataclass(frozen=True)
class ScopeChoices:
    """What a conversation's scope can be made of."""

    collections: tuple[Collection, ...] = ()
    folders: tuple[str, ...] = ()
    types: tuple[str, ...] = ()


def scope_choices() -> Op[ScopeChoices]:
    return Op(
        "scope choices",
        lambda library, ctx: ScopeChoices(
            tuple(library.collections.all()),
            tuple(library.files.folders()),
            tuple(library.collections.document_types()),
        ),
    )


def collections() -> Op[list[Collection]]:
    return Op("collections", lambda library, ctx: library.collections.all())


_COLLECTIONS = Changes(collections=True)


def create_collection(name: str, folders: Sequence[str | Path] = ()) -> Op[Collection]:
    return Op(
        "make collection",
        lambda library, ctx: library.collections.create(name, folders),
        _COLLECTIONS,
    )


def rename_collection(old: str, new: str) -> Op[Collection]:
    # Saved scopes name collections: a rename rewrites them.
    return Op(
        "rename collection",
        lambda library, ctx: library.collections.rename(old, new),
        _COLLECTIONS | Changes(scope=True),
    )


def delete_collection(name: str) -> Op[None]:
    return Op(
        "delete collection", lambda library, ctx: library.collections.delete(name), _COLLECTIONS
    )


def add_to_collection(name: str, folders: Sequence[str | Path]) -> Op[Collection]:
    return Op(
        "add to collection",
        lambda library, ctx: library.collections.add_folders(name, folders),
        _COLLECTIONS,
    )


def remove_from_collection(name: str, folders: Sequence[str | Path]) -> Op[Collection]:
    return Op(
        "remove from collection",
        lambda library, ctx: library.collections.remove_folders(name, folders),
        _COLLECTIONS,
    )


def conversation_scope(conversation_id: int) -> Op[Scope]:
    return Op("conversation scope", lambda library, ctx: library.collections.scope(conversation_id))


def set_conversation_scope(conversation_id: int, scope: Scope) -> Op[None]:
    return Op(
        "save scope",
        lambda library, ctx: library.collections.set_scope(conversation_id, scope),
        Changes(scope=True),
    )


# --- what the app runs over its open library ---------------------------------------------


class RunOp(Protocol):
    """Runs an op in the middle of another's work, on its thread (``compose``)."""

    def __call__(self, op: Op[U], /) -> U: ...


@dataclass(frozen=True)
class _RunInside:
    library: Library
    ctx: OpContext

    def __call__(self, op: Op[U], /) -> U:
        return op.work(self.library, self.ctx)


def compose(name: str, work: Callable[[RunOp], T], changes: Changes = NOTHING) -> Op[T]:
    """One op made of others, ``work(run)`` calling ``run(op)`` for each in turn on one
    thread: a view that needs several reads (a cited page's OCR words and the lines they
    sit on) costs one trip to a worker. ``changes`` are the whole's: the inner ops' are
    not added up."""
    return Op(name, lambda library, ctx: work(_RunInside(library, ctx)), changes)


@dataclass(frozen=True)
class LibraryOverview:
    """The library folder by folder, for a front end's summary of it."""

    folders: tuple[FolderStatus, ...]
    problems: dict[str, tuple[Document, ...]]  # folder -> its failed and skipped files
    embedded: int  # passages searchable by meaning (the rest by keyword only, for now)
    switching: str  # a change of embedding model under way, in words; "" when none
    advice: ModelAdvice | None  # the model the library's languages call for


def library_overview(advise: bool = True) -> Op[LibraryOverview]:
    """``advise``: ask for the model advice too (a front end leaves it out while indexing,
    when the first files alone would decide, and once the person said not now)."""

    def work(library: Library, ctx: OpContext) -> LibraryOverview:
        folders = tuple(library.folder_status())
        problems: dict[str, list[Document]] = {f.path: [] for f in folders}
        for state in ("failed", "skipped"):
            for doc in library.files.documents(state=state):
                problems.setdefault(doc.folder, []).append(doc)
        switching = library.reembedding_status()
        chunks = sum(f.chunks for f in folders)
        return LibraryOverview(
            folders,
            {k: tuple(v) for k, v in problems.items()},
            library.searchable()[1],
            switching.sentence if switching else "",
            library.model_advice() if advise and chunks and not switching else None,
        )

    return Op("library overview", work)


def index_job(job: IndexJob, interval_s: float = 0.0) -> Op[IndexReport]:
    """One of a long-running host's index jobs (core/app/coordinator.py). Its progress is
    reported at most every ``interval_s`` (a window repaints at a human rate), bar the
    values that must not be dropped: a wait starting or ending, the folders in, the last
    count."""

    def work(library: Library, ctx: OpContext) -> IndexReport:
        from core.app.coordinator import run_job

        last = 0.0

        def report(value: object, force: bool) -> None:
            nonlocal last
            if not force:
                now = time.monotonic()
                if now - last < interval_s:
                    return
                last = now
            ctx.report(value)

        return run_job(library, job, report)

    return Op("index", work, Changes(folders=True, documents=True))


def folder_watcher(
    on_batch: Callable[[AppliedBatch], None],
    on_status: Callable[[str, str, str], None],
    on_error: Callable[[BaseException], None],
    progress: Callable[[IndexProgress], None],
) -> Op[FolderWatcher]:
    """A watcher over the library's folders, not started: its ``start`` walks every folder,
    and its callbacks come on its own threads (core/app/watch.py)."""

    def work(library: Library, ctx: OpContext) -> FolderWatcher:
        from core.app.watch import FolderWatcher

        return FolderWatcher(
            library, on_batch=on_batch, on_status=on_status, on_error=on_error, progress=progress
        )

    return Op("watch folders", work)


def take_model_notice() -> Op[str | None]:
    """What a new library said of the model it chose on its own (it started with the
    multilingual one), once; the settings then name that model."""
    return Op("model notice", lambda library, ctx: library.take_model_notice())


def change_embedding_model(model_id: str) -> Op[None]:
    """Re-embed the library with ``model_id`` in the background; the current model answers
    until the switch."""
    return Op(
        "switch the embedding model",
        lambda library, ctx: library.change_embedding_model(model_id),
        Changes(documents=True),
    )


def ask(
    question: str,
    conversation_id: int | None = None,
    *,
    scope: Scope | None = None,
    session: Callable[[Settings], AnswerSession] | None = None,
) -> Op[None]:
    """The answer to ``question``, each event reported as it comes (core/generation/qa.py)
    and the turn kept in its conversation (a new one when ``conversation_id`` is None);
    ``ctx.cancel`` stops it. ``session`` opens the model server's session from the
    library's settings: how a front end words a server it cannot use."""

    def work(library: Library, ctx: OpContext) -> None:
        from core.generation.qa import ask
        from core.generation.session import AnswerSession

        settings = library.settings
        with (session or AnswerSession)(settings) as opened:
            for event in ask(
                library,
                question,
                conversation_id,
                model=settings.llm_model,
                cancel=ctx.cancel,
                k=settings.top_k,
                scope=scope,
                session=opened,
            ):
                ctx.report(event)

    return Op("ask", work, Changes(conversations=True))


def library_check(fresh: bool, use_model: bool) -> Op[dict[str, Any]]:
    """``lectern eval --library`` (core/evaluation/library_check.py): its steps reported as
    they come, stopped at the next question by ``ctx.cancel``; with ``use_model`` the
    configured language model writes the questions."""

    def work(library: Library, ctx: OpContext) -> dict[str, Any]:
        from core.evaluation.library_check import check_library, model_writer

        return check_library(
            library,
            fresh=fresh,
            ask_model=model_writer(library) if use_model else None,
            progress=ctx.report,
            cancel=ctx.cancel,
        )

    return Op("library check", work)
