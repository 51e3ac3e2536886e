"""Every file format Lectern reads, one row each: the one place a format is declared.

The parser registry (which extension, which reader, which formats carry attachments or may
hide a PDF), the records (what a format's page number counts, what a person calls it), the
unsupported-file hint, the welcome card and the bundle's module list are all derived from
``FORMATS``. This module imports nothing from Lectern and no reader: the scanner asks "is
this file supported?" for every file, and ``core.records`` builds its tables from here.

Adding a format: write the reader module (``parse(path) -> ParsedDocument``, see
``core/ingest/org.py`` for a small one), add one ``FileFormat`` row below, and add a test
that reads a real file of that format (``tests/ingest/test_format_table.py``). Nothing else lists
formats; ``tests/ingest/test_format_table.py`` checks that every derived table agrees with this one.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class FileFormat:
    """One format: how its files are recognised, who reads them, and how it is named."""

    kind: str  # the type stored with each document and used in search filters
    extensions: tuple[str, ...]  # lower-case, with the dot
    reader: str  # "module" (its ``parse``) or "module:function"
    name: str  # in a label or a filter ("Word", "PDF")
    # In a sentence that lists formats ("OpenDocument" for its three kinds); rows with the
    # same family are named once. Empty: ``name``.
    family: str = ""
    # What ``PageSpan.page`` counts ("page", "slide", "row"); None: no numbered places,
    # the heading path says where a passage is.
    unit: str | None = None
    # Its files carry documents of their own (a mail's attachments).
    container: bool = False
    # Text under this name may really be a PDF saved with the wrong extension, so the first
    # bytes are looked at (binary formats go to their reader, which reports damage).
    text_based: bool = False
    # Name the extensions in a sentence: "Word (.docx)" says the old .doc is not read.
    show_extensions: bool = False
    # The reader's version: raising it has the files of this format read again once, in
    # the next indexing pass (core/library.py ``_reread_changed_formats``), where a
    # reader that now reads them better would otherwise leave old files as they were.
    version: int = 1

    @property
    def module(self) -> str:
        return self.reader.partition(":")[0]

    @property
    def function(self) -> str:
        return self.reader.partition(":")[2] or "parse"

    @property
    def phrase_name(self) -> str:
        return self.family or self.name


# In the order a person meets them: the common formats first (the welcome card and the
# unsupported-file hint name them in this order). One row a line, so it reads as a table.
FORMATS: tuple[FileFormat, ...] = (
    # 2: headings set in spaced letters joined, footnote marks left out of sentences.
    # 3: running heads and feet left out of passages.
    FileFormat("pdf", (".pdf",), "core.ingest.pdf", "PDF", unit="page", version=3),
    FileFormat("docx", (".docx",), "core.ingest.docx", "Word", show_extensions=True),
    FileFormat("md", (".md", ".markdown"), "core.ingest.markdown", "Markdown", text_based=True),
    FileFormat("txt", (".txt", ".text"), "core.ingest.text", "Text", family="text", text_based=True),
    FileFormat("html", (".html", ".htm"), "core.ingest.html", "HTML", text_based=True),
    FileFormat("epub", (".epub",), "core.ingest.epub", "EPUB", unit="chapter"),
    FileFormat("pptx", (".pptx", ".pptm"), "core.ingest.pptx", "PowerPoint", unit="slide", show_extensions=True),
    FileFormat("xlsx", (".xlsx", ".xlsm"), "core.ingest.xlsx", "Excel", unit="row", show_extensions=True),
    FileFormat("csv", (".csv", ".tsv"), "core.ingest.tables", "CSV", unit="row", text_based=True),
    FileFormat("odt", (".odt",), "core.ingest.odf:parse_odt", "ODT", family="OpenDocument"),
    FileFormat("ods", (".ods",), "core.ingest.odf:parse_ods", "ODS", family="OpenDocument", unit="row"),
    FileFormat("odp", (".odp",), "core.ingest.odf:parse_odp", "ODP", family="OpenDocument", unit="slide"),
    FileFormat("rtf", (".rtf",), "core.ingest.rtf", "RTF", text_based=True),
    FileFormat("eml", (".eml",), "core.ingest.mail:parse_eml", "E-mail", family="e-mail", container=True, text_based=True, show_extensions=True),
    FileFormat("mbox", (".mbox",), "core.ingest.mail:parse_mbox", "E-mail", family="e-mail", unit="message", container=True, text_based=True, show_extensions=True),
    FileFormat("org", (".org",), "core.ingest.org", "Org", family="Org mode", text_based=True),
)  # fmt: skip

BY_KIND: dict[str, FileFormat] = {f.kind: f for f in FORMATS}


def reader_versions() -> dict[str, int]:
    """Each format's reader version, by kind."""
    return {f.kind: f.version for f in FORMATS}


def reader_modules() -> tuple[str, ...]:
    """The modules that read the formats, each once (the bundle must carry them: the
    registry imports them by name)."""
    return tuple(dict.fromkeys(f.module for f in FORMATS))


def family_name(kind: str) -> str:
    """What a person calls ``kind`` in a sentence ("OpenDocument", "e-mail")."""
    found = BY_KIND.get(kind)
    return found.phrase_name if found else kind.upper()


def readable_formats() -> str:
    """Every format in one phrase, for a sentence: "PDF, Word (.docx), Markdown, text, …,
    e-mail (.eml, .mbox) and Org mode"."""
    families: dict[str, list[FileFormat]] = {}
    for f in FORMATS:
        families.setdefault(f.phrase_name, []).append(f)
    names: list[str] = []
    for family, rows in families.items():
        if any(f.show_extensions for f in rows):
            family += f" ({', '.join(ext for f in rows for ext in f.extensions)})"
        names.append(family)
    return ", ".join(names[:-1]) + " and " + names[-1] if len(names) > 1 else "".join(names)
