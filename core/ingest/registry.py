"""Which parser reads which file, and one entry point that turns any file into text.

Parser modules are imported on first use so that asking "is this file supported?" (the
scanner does it for every file in a folder) does not load pypdf, lxml and python-docx.
Which extension, which reader and which sniffing come from the format table,
``core.formats``.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from pathlib import Path

from core.errors import DamagedFileError, ParseError, UnsupportedFileError
from core.formats import BY_KIND, FORMATS
from core.ingest.text import cap_document
from core.records import ParsedDocument

# Derived from the format table (core/formats.py). What still names formats here is
# content sniffing (a PDF under another name, a mailbox with no extension) and the reasons
# for formats Lectern does not read.
_BY_EXTENSION: dict[str, str] = {ext: f.kind for f in FORMATS for ext in f.extensions}
SUPPORTED_EXTENSIONS: frozenset[str] = frozenset(_BY_EXTENSION)
FILE_TYPES: frozenset[str] = frozenset(f.kind for f in FORMATS)
# Formats whose files carry documents of their own (attachments, see core.indexing.scan).
CONTAINER_TYPES: frozenset[str] = frozenset(f.kind for f in FORMATS if f.container)
# Text-based formats: a PDF saved under one of these names is still read as a PDF.
_TEXT_KINDS: frozenset[str] = frozenset(f.kind for f in FORMATS if f.text_based)
_OLD_OFFICE = {
    ".doc": "Word format (.doc); save it as .docx",
    ".xls": "Excel format (.xls); save it as .xlsx",
    ".ppt": "PowerPoint format (.ppt); save it as .pptx",
}
_SNIFF_BYTES = 1024


def _head(path: Path) -> bytes:
    try:
        with path.open("rb") as handle:
            return handle.read(_SNIFF_BYTES)
    except OSError:
        return b""


def _is_office_lock_file(path: Path) -> bool:
    # Word and LibreOffice leave "~$name.docx" / ".~lock.name#" next to open files.
    return path.name.startswith(("~$", ".~lock."))


def detect_type(path: Path) -> str | None:
    """The file's type (one of ``FILE_TYPES``); ``None`` for files Lectern does not read.

    The extension decides, with two corrections from the first bytes: a PDF saved with a
    text extension is read as a PDF, and an extension-less file is read only when it is
    clearly a PDF or a mailbox (Thunderbird keeps its mail folders as files such as
    ``Inbox``). A ``.pdf`` or ``.docx`` whose content is wrong still maps to its
    parser, which then reports the file as damaged: that is more useful to a person than
    silently skipping it.
    """
    path = Path(path)
    if _is_office_lock_file(path):
        return None
    suffix = path.suffix.lower()
    kind = _BY_EXTENSION.get(suffix)
    extensionless = kind is None and not suffix
    if kind in _TEXT_KINDS or extensionless:
        head = _head(path)
        if head.lstrip().startswith(b"%PDF-"):
            return "pdf"
        if extensionless and _looks_like_mbox(head):
            return "mbox"
    return kind


def _looks_like_mbox(head: bytes) -> bool:
    lines = head.split(b"\n", 8)
    if not lines[0].startswith(b"From ") or len(lines) < 3:
        return False
    return any(line[:1].isalpha() and b": " in line[:40] for line in lines[1:-1])


def skip_reason(path: Path) -> str:
    """Why ``detect_type`` returned ``None``, in words for a status list."""
    path = Path(path)
    if _is_office_lock_file(path):
        return "temporary Office lock file"
    suffix = path.suffix.lower()
    if not suffix:
        return "unsupported file type (no extension)"
    if suffix in _OLD_OFFICE:
        return f"unsupported file type: old {_OLD_OFFICE[suffix]}"
    return f"unsupported file type ({suffix})"


def _parser(kind: str) -> Callable[[Path], ParsedDocument]:
    found = BY_KIND[kind]
    module = importlib.import_module(found.module)
    parse: Callable[[Path], ParsedDocument] = getattr(module, found.function)
    return parse


def preload() -> None:
    """Import every parser now (the sandbox worker does this before it takes requests)."""
    for kind in BY_KIND:
        _parser(kind)


def parse_file(path: Path) -> ParsedDocument:
    """Parse one file in this process. Raises a ``ParseError`` subclass with a short
    reason on any failure; ``MemoryError`` passes through for the caller's limits."""
    path = Path(path)
    kind = detect_type(path)
    if kind is None:
        raise UnsupportedFileError(skip_reason(path))
    try:
        return cap_document(_parser(kind)(path))
    except (ParseError, MemoryError, ImportError):
        raise  # ImportError is a broken installation, not a broken file
    except RecursionError as exc:
        raise DamagedFileError("too deeply nested to read") from exc
    except FileNotFoundError as exc:
        raise ParseError("file disappeared", hint="It was moved or deleted.") from exc
    except PermissionError as exc:
        raise ParseError(
            "permission denied", hint="Give your user read access to the file."
        ) from exc
    except IsADirectoryError as exc:
        raise UnsupportedFileError("is a folder") from exc
    except OSError as exc:
        raise ParseError(f"could not read the file: {exc.strerror or exc}") from exc
    except Exception as exc:
        # A parser bug or an exotic library error must cost this file only; the type
        # name in the reason keeps such bugs visible.
        raise DamagedFileError(f"could not read ({type(exc).__name__})") from exc
