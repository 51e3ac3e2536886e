"""Text from the library (file names, reasons, titles) as a terminal should show it.

A file name may hold any character but "/" and NUL: a newline breaks a listing's lines,
an escape sequence recolours or rewrites the terminal, and a right-to-left override
(U+202E) makes "invoice<U+202E>fdp.txt" read as "invoicetxt.pdf". Printed, such characters
are escaped the way Python writes them (``\\n``, ``\\x1b``, ``\\u202e``), so what a person
reads is what is on disk. JSON output needs none of this: ``json.dumps`` escapes them.
"""

from __future__ import annotations

import unicodedata

# Control characters (C0, C1), format characters (bidi embeddings, overrides and isolates,
# zero-width spaces, the byte-order mark, tags), lone surrogates (bytes of a file name that
# are not UTF-8, as Python decodes them) and the Unicode line and paragraph separators.
_ESCAPED = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})
# Format characters that writing systems need between letters (Persian, the Indic
# scripts, emoji sequences): they move nothing and hide nothing.
_JOINERS = frozenset({"\u200c", "\u200d"})


def printable(text: str) -> str:
    """``text`` with every character that could rewrite or reorder a terminal line
    escaped; ordinary text, accents and every script unchanged."""
    if text.isprintable():
        return text
    return "".join(
        ch.encode("unicode_escape", "backslashreplace").decode("ascii")
        if unicodedata.category(ch) in _ESCAPED and ch not in _JOINERS
        else ch
        for ch in text
    )
