"""Text from the library (file names, reasons, titles, passages, answers) as a terminal
should show it: the one escape for everything a command prints that it did not write.

A file name may hold any character but "/" and NUL: a newline breaks a listing's lines,
a carriage return starts a forged one over it, an escape sequence recolours or rewrites
the terminal (``ESC]0;...`` sets its title), and a right-to-left override (U+202E) makes
"invoice<U+202E>fdp.txt" read as "invoicetxt.pdf". A document's text and a model's
answer can hold the same. Printed, such characters are escaped the way Python writes
them (``\\n``, ``\\x1b``, ``\\u202e``), so what a person reads is what is on disk. JSON
output needs none of this: ``json.dumps`` escapes them.
"""

from __future__ import annotations

import unicodedata

# Control characters (C0, C1), format characters (bidi embeddings, overrides and isolates,
# zero-width spaces, the byte-order mark, tags), lone surrogates and the Unicode line and
# paragraph separators.
_ESCAPED = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})


def _raw_byte(ch: str) -> bool:
    """A byte of a file name that is not UTF-8, as Python decodes it (PEP 383), that is
    printed as that very byte (core/cli/common.py) so the name can be copied back into a
    command; not 0x80-0x9F, which an 8-bit terminal reads as C1 controls (0x9B: CSI)."""
    return "\udca0" <= ch <= "\udcff"


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
        if unicodedata.category(ch) in _ESCAPED and ch not in _JOINERS and not _raw_byte(ch)
        else ch
        for ch in text
    )


def printable_lines(text: str) -> str:
    """``text`` of several lines (an answer, a passage) as :func:`printable` shows one
    line, its line breaks and tabs kept: a document's own ESC or carriage return must not
    reach the terminal any more than a file name's."""
    if text.isprintable():
        return text
    text = text.replace("\r\n", "\n")  # a Windows line end is a line end, not a "\r"
    return "\n".join(
        "\t".join(printable(part) for part in line.split("\t")) for line in text.split("\n")
    )
