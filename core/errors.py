"""One root error for everything Lectern reports to a person.

Each subclass carries a plain-language ``message`` (what happened) and a ``hint``
(what to do next), so the CLI and the desktop app can show the same words.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Mapping
from typing import Any

from core.formats import readable_formats


class LecternError(Exception):
    """Root of every error Lectern raises on purpose."""

    default_hint = ""

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint if hint is not None else self.default_hint

    def __str__(self) -> str:
        return f"{self.message} ({self.hint})" if self.hint else self.message


def reinstall_hint(reason: str) -> str:
    """How to repair a broken installation: a packaged app is not rebuilt with make."""
    how = (
        "Reinstall Lectern"
        if getattr(sys, "frozen", False)
        else "Reinstall Lectern with `make install`"
    )
    return f"{how}; {reason}"


class ConfigError(LecternError):
    default_hint = "Check the settings file or the LECTERN_* environment variables."


class StoreError(LecternError):
    default_hint = "Close other Lectern windows or commands, then try again."


class IndexBusyError(StoreError):
    """Another process holds the writer lock on the data folder."""


class ModelLoadError(LecternError):
    default_hint = reinstall_hint("the embedding model ships inside it.")


class ModelNotReadyError(LecternError):
    """The embedding model is still loading and the caller asked not to wait for it
    (``Library(defer_model=True)``: the app, whose library is searchable by keyword
    meanwhile)."""

    default_hint = "Search by keyword works meanwhile; meaning follows in a few seconds."


# --- ingestion -----------------------------------------------------------------


class ParseError(LecternError):
    """A file could not be turned into text. ``reason`` is the short status text."""

    default_hint = "Lectern skipped this file; the rest of the folder is indexed."

    def __init__(self, reason: str, hint: str | None = None) -> None:
        super().__init__(reason, hint)
        self.reason = reason


class ReadingStoppedError(ParseError):
    """The reader process was stopped from outside (a service stop signals the whole
    process group; Lectern closing): not the file's fault, so it is not marked failed."""

    default_hint = "Lectern was closing; it reads the file next time."


class EncryptedError(ParseError):
    default_hint = "Remove the password (save an unprotected copy) to index this file."


class NoTextError(ParseError):
    default_hint = "Run OCR on the file (for example with ocrmypdf) so it has a text layer."


class ScannedError(NoTextError):
    """A PDF with no text layer whose pages are images: OCR may read it (a later pass)."""

    default_hint = "Turn on reading scanned pages (ocr_enabled) in the settings to index it."


class DamagedFileError(ParseError):
    default_hint = "Re-export or re-download the file; it is damaged."


class ParseLimitError(ParseError):
    default_hint = (
        "The file is too large or too complex to read safely; split it into smaller files."
    )


class UnsupportedFileError(ParseError):
    default_hint = f"Lectern reads {readable_formats()} files."


# --- answering -----------------------------------------------------------------


class LLMError(LecternError):
    """Base for failures talking to the language-model server."""

    default_hint = "Check that the model server is running, or use the Search tab."


class LLMUnavailableError(LLMError):
    default_hint = "Start Ollama (run `ollama serve` or open the Ollama app), then try again."


class ModelNotFoundError(LLMError):
    default_hint = "Pull the model first, for example `lectern pull llama3.2`."

    def __init__(self, message: str, hint: str | None = None, model: str = "") -> None:
        super().__init__(message, hint)
        self.model = model


class LLMTimeoutError(LLMError):
    default_hint = "The model server is too slow or stuck; try a smaller model or try again."


class StreamInterruptedError(LLMError):
    default_hint = "What arrived is kept; ask again for a complete answer."


class ContextTooSmallError(LLMError):
    default_hint = "Use a model with a larger context window, or ask for fewer sources."

    def __init__(
        self,
        message: str,
        hint: str | None = None,
        *,
        n_ctx: int | None = None,
        n_prompt_tokens: int | None = None,
    ) -> None:
        super().__init__(message, hint)
        # What the server counted, where it says: the prompt can be cut to fit and resent.
        self.n_ctx = n_ctx
        self.n_prompt_tokens = n_prompt_tokens


# --- the library's own files -----------------------------------------------------


class DiskFullError(StoreError):
    """The disk holding the library has no room for indexing."""

    default_hint = "Free some space on that disk; indexing carries on where it stopped."

    def __init__(
        self,
        message: str,
        hint: str | None = None,
        *,
        folder: str = "",
        free_bytes: int = 0,
        needed_bytes: int = 0,
    ) -> None:
        super().__init__(message, hint)
        self.folder = folder
        self.free_bytes = free_bytes
        self.needed_bytes = needed_bytes


class DamagedStoreError(StoreError):
    """A database file cannot be read; recovery sets it aside (never seen by a user)."""

    default_hint = "Lectern keeps the damaged file aside and rebuilds the library from your files."


class UnreplayableLogError(StoreError):
    """A write-ahead log cannot be replayed; recovery sets it aside."""

    default_hint = "Lectern keeps the log aside and redoes the last changes from your files."


class ReadOnlyLibraryError(StoreError):
    """The library's data folder can be read but not written (a read-only disk or
    mount): the library opens for reading, and indexing or saving says this."""

    default_hint = (
        "Search and your conversations work as they are. To index, make the folder "
        "writable again (or copy it to a writable disk and set LECTERN_HOME to the copy)."
    )

    def __init__(self, message: str, hint: str | None = None, *, path: str = "") -> None:
        super().__init__(message, hint)
        self.path = path


class LibraryAccessError(StoreError):
    """A file in the library's data folder cannot be opened as it is (permission denied,
    a folder in its place): the file is named and nothing is changed."""

    default_hint = (
        "Give your user read and write access to that file and to the library's data "
        "folder (or move what is in its way), then try again; nothing in the library "
        "was changed."
    )

    def __init__(self, message: str, hint: str | None = None, *, path: str = "") -> None:
        super().__init__(message, hint)
        self.path = path


# --- conversations ---------------------------------------------------------------


class ConversationError(LecternError):
    """A conversation could not be renamed, found or exported as asked."""

    default_hint = "Pick the conversation from the list (`lectern conversations list`)."


class InvalidTitleError(ConversationError):
    default_hint = "Type a few words that say what the conversation is about."


class ConversationNotFoundError(ConversationError):
    default_hint = "It may have been deleted; see `lectern conversations list` for the ids."


class ExportError(ConversationError):
    """The exported file could not be written (read-only folder, full disk, ...)."""

    default_hint = "Choose another folder, for example your Documents folder, and try again."


# --- evaluation data -------------------------------------------------------------


class DatasetError(LecternError):
    """An evaluation dataset (BEIR folder) cannot be read; the message names file and line."""

    default_hint = "Fix or re-download the dataset; each line of a .jsonl file is one JSON object."


# --- collections and scopes --------------------------------------------------------------


class CollectionError(LecternError):
    """A collection cannot be made or changed as asked (a name taken, a folder outside
    the library)."""

    default_hint = "See your collections with `lectern collection list`."


class CollectionNotFoundError(CollectionError):
    """A collection named by a command or kept in a conversation's scope does not exist
    (any more): said, never replaced by searching everything."""

    default_hint = (
        "Choose what to search from the scope on the question box, or see "
        "`lectern collection list`."
    )


# --- an error as JSON (the socket, ``lectern ask --json``) ---------------------------------


def error_to_json(error: LecternError) -> dict[str, object]:
    """``error`` as its class's name, its words and, for a missing model, the model."""
    data: dict[str, object] = {
        "type": type(error).__name__,
        "message": error.message,
        "hint": error.hint,
    }
    model = getattr(error, "model", None)
    if model:
        data["model"] = model
    return data


def error_from_json(data: Mapping[str, Any]) -> LecternError:
    """The error ``error_to_json`` wrote, as its own class where this module has it, so a
    front end says the same words (and ``lectern ask --json`` names the same type)."""
    message, hint = str(data.get("message", "")), str(data.get("hint", ""))
    cls = globals().get(str(data.get("type", "")))
    error: LecternError = LecternError(message, hint)
    if isinstance(cls, type) and issubclass(cls, LecternError):
        with contextlib.suppress(TypeError):
            error = cls(message, hint)
    if data.get("model"):
        error.model = str(data["model"])  # type: ignore[attr-defined]
    return error
