"""How a file's path is held in the database: names that are not valid text.

The store keeps every path in this form (documents, lookups, attachments, OCR, the
conversations' sources); the scanner and the watcher hand it paths as the OS gave them.
"""

from __future__ import annotations

import codecs
import os
import re
import sys
from pathlib import Path

#
# A file name is bytes. Python hands undecodable ones over with each bad byte as a lone
# surrogate (U+DC80-U+DCFF, PEP 383), and so does a process whose locale is ASCII (LC_ALL=C)
# with every byte above 127. DuckDB's text columns take only valid UTF-8: one such name
# stopped the indexing of its whole folder. So the database holds the name's bytes read
# as UTF-8, each byte that is not UTF-8 written as U+EF80 + (byte - 0x80), a private-use
# character; a real name holding one of those characters has its UTF-8 bytes written the
# same way, so the mapping is one to one. A valid name, in any locale, is stored as the
# text it reads as, so a library indexed under UTF-8 matches the same files under LC_ALL=C.

_RAW_BYTE_BASE = 0xEF00  # byte b (0x80..0xFF) is stored as chr(_RAW_BYTE_BASE + b)
_STORED_RAW = re.compile("[\uef80-\uefff]")
_NEEDS_ESCAPE = re.compile("[\udc80-\udcff\uef80-\uefff]")
_FS_IS_UTF8 = codecs.lookup(sys.getfilesystemencoding()).name == "utf-8"


def _bytes_of(text: str) -> bytes:
    """The bytes ``text`` names: as the OS would encode it, else as UTF-8 (text that did
    not come from the OS, in an ASCII locale)."""
    try:
        return os.fsencode(text)
    except UnicodeEncodeError:
        pass
    try:
        return text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        return text.encode("utf-8", "surrogatepass")


def _escape_char(match: re.Match[str]) -> str:
    raw = match.group().encode("utf-8", "surrogateescape")  # a lone surrogate: its byte
    return "".join(chr(_RAW_BYTE_BASE + b) for b in raw)


def stored_path(path: str) -> str:
    """``path`` (as the OS gave it to this process) in the form the database holds:
    valid Unicode that :func:`disk_path` turns back into the same bytes."""
    if path.isascii():
        return path
    text = _bytes_of(path).decode("utf-8", "surrogateescape")
    return _NEEDS_ESCAPE.sub(_escape_char, text)


def disk_path(stored: str) -> str:
    """A path read from the database, as this process names the file on disk."""
    if stored.isascii() or (_FS_IS_UTF8 and not _STORED_RAW.search(stored)):
        return stored
    text = _STORED_RAW.sub(lambda m: chr(0xDC00 + ord(m.group()) - _RAW_BYTE_BASE), stored)
    return os.fsdecode(text.encode("utf-8", "surrogateescape"))


def normalize_folder(path: str | Path) -> str:
    """A folder as the library records it: absolute, user expanded, without ``..``."""
    return os.path.normpath(os.path.abspath(os.path.expanduser(os.fspath(path))))


def display_text(text: str) -> str:
    """``text`` taken from a file name (a title) as valid Unicode, for storing and
    showing: bytes that are not UTF-8 become U+FFFD."""
    if text.isascii():
        return text
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return _bytes_of(text).decode("utf-8", "replace")
