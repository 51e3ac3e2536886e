"""The format table (core/formats.py) and the format added through it alone.

Org mode was added as one reader module (core/ingest/org.py) and one table row: here a
real .org file is read, indexed with the real model and found under its heading, and every
table that used to be kept by hand (the registry's, the records' units and names, the
unsupported-file hint, the welcome card, the bundle's module list) is checked against
``FORMATS``.
"""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
from pathlib import Path

import pytest

from core.errors import DamagedFileError, UnsupportedFileError
from core.formats import BY_KIND, FORMATS, family_name, readable_formats, reader_modules
from core.ingest import ParserPool, detect_type, parse_file, registry
from core.records import LOCATION_UNITS, SHEET_TYPES, BlockKind, DocState, location_label, type_name

REPO = Path(__file__).resolve().parents[2]

GARDEN_ORG = """\
#+TITLE: Garden /journal/ 2024
#+AUTHOR: Ada Gardener
#+TODO: TODO WAIT(w) | DONE(d)
#+STARTUP: overview

Notes from the allotment behind the [[https://example.org/mill][old mill]].

* Vegetables                                                        :garden:
  :PROPERTIES:
  :CUSTOM_ID: vegetables
  :END:
** WAIT [#A] Tomatoes
   SCHEDULED: <2024-05-01 Wed>
   The San Marzano tomatoes ripened on the fourteenth of August, three weeks
   after the cherry tomatoes, and gave eleven kilos of sauce.
   - water every morning
     in dry weeks
   - feed with comfrey tea every second Sunday
** Beans
   | Variety  | Sown  |
   |----------+-------|
   | Borlotti | May   |
   | Runner   | June  |
# Remember to order seed potatoes.
* Tools
  The rain gauge is read at seven and logged by a small script.
  #+BEGIN_SRC python
    def log_rain(millimetres):
        return f"{millimetres} mm"
  #+END_SRC
  #+BEGIN_COMMENT
  The neighbour's hose leaks.
  #+END_COMMENT
"""


def write_garden(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "garden.org"
    path.write_text(GARDEN_ORG, encoding="utf-8")
    return path


# --- the .org reader -------------------------------------------------------------------------


def test_org_file_reads_title_headings_lists_tables_and_code(tmp_path: Path) -> None:
    path = write_garden(tmp_path)
    assert detect_type(path) == "org"
    doc = parse_file(path)
    assert doc.title == "Garden journal 2024"  # #+TITLE:, emphasis markers dropped

    def blocks(kind: BlockKind) -> list[tuple[str, tuple[str, ...]]]:
        return [(doc.text[b.start : b.end], b.heading_path) for b in doc.blocks if b.kind is kind]

    # Headings carry their path; TODO keyword, priority and tags are not part of a title.
    assert blocks(BlockKind.HEADING) == [
        ("Vegetables", ("Vegetables",)),
        ("Tomatoes", ("Vegetables", "Tomatoes")),
        ("Beans", ("Vegetables", "Beans")),
        ("Tools", ("Tools",)),
    ]
    paragraphs = blocks(BlockKind.PARAGRAPH)
    assert paragraphs[0] == ("Notes from the allotment behind the old mill.", ())
    assert paragraphs[1][1] == ("Vegetables", "Tomatoes")
    assert paragraphs[1][0].startswith("The San Marzano tomatoes ripened")
    assert blocks(BlockKind.LIST_ITEM) == [
        ("- water every morning\nin dry weeks", ("Vegetables", "Tomatoes")),
        ("- feed with comfrey tea every second Sunday", ("Vegetables", "Tomatoes")),
    ]
    assert blocks(BlockKind.TABLE) == [
        (
            "| Variety  | Sown  |\n| Borlotti | May   |\n| Runner   | June  |",
            ("Vegetables", "Beans"),
        )
    ]
    # The source block's body, its own indentation kept, without the #+BEGIN/#+END lines.
    assert blocks(BlockKind.CODE) == [
        ('def log_rain(millimetres):\n    return f"{millimetres} mm"', ("Tools",))
    ]
    # Org's bookkeeping is not the document's words.
    for left_out in (
        "#+",
        "Ada Gardener",
        ":PROPERTIES:",
        "CUSTOM_ID",
        "SCHEDULED",
        "WAIT",
        ":garden:",
        "seed potatoes",
        "hose leaks",
        "https://example.org",
    ):
        assert left_out not in doc.text, left_out
    for block in doc.blocks:
        assert doc.text[block.start : block.end].strip() == doc.text[block.start : block.end]


def test_org_file_without_title_or_text(tmp_path: Path) -> None:
    untitled = tmp_path / "plain-notes.org"
    untitled.write_text("* One\nBody text.\n", encoding="utf-8")
    assert parse_file(untitled).title == "plain-notes"  # Org's own export falls back so
    bookkeeping = tmp_path / "settings.org"
    bookkeeping.write_text("#+STARTUP: overview\n:PROPERTIES:\n:ID: 1\n:END:\n", encoding="utf-8")
    with pytest.raises(DamagedFileError, match="no text in the Org file"):
        parse_file(bookkeeping)
    # A PDF saved as .org is read as the PDF it is (the row says Org is text-based).
    pdf = next((REPO / "resources" / "sample-docs").glob("*.pdf"))
    disguised = tmp_path / "disguised.org"
    disguised.write_bytes(pdf.read_bytes())
    assert detect_type(disguised) == "pdf"


def test_org_file_reads_the_same_in_the_sandbox(tmp_path: Path) -> None:
    path = write_garden(tmp_path)
    with ParserPool(timeout_s=30.0, memory_mb=1024) as pool:
        assert pool.parse(path) == parse_file(path)


def test_search_finds_the_org_passage_under_its_heading(library: object, tmp_path: Path) -> None:
    folder = tmp_path / "notes"
    write_garden(folder)
    (folder / "kitchen.md").write_text(
        "# Kitchen\n\nThe bread oven is lit on Fridays and bakes six loaves.\n", encoding="utf-8"
    )
    report = library.index([folder])  # type: ignore[attr-defined]
    assert report.failed == 0, report.failures
    docs = {Path(d.path).name: d for d in library.files.documents()}  # type: ignore[attr-defined]
    garden = docs["garden.org"]
    assert garden.state is DocState.INDEXED and garden.type == "org"
    assert garden.title == "Garden journal 2024"

    hit = library.search("when did the San Marzano tomatoes ripen", k=3)[0]  # type: ignore[attr-defined]
    assert Path(hit.path).name == "garden.org"
    assert "fourteenth of August" in hit.text
    assert hit.heading_path == ("Vegetables", "Tomatoes")
    assert hit.location == ""  # no numbered places: the heading path says where
    text = library.files.text(hit.document_id)  # type: ignore[attr-defined]
    assert text[hit.start : hit.end] == hit.text
    code = library.search("log_rain millimetres script", k=3, mode="bm25")[0]  # type: ignore[attr-defined]
    assert Path(code.path).name == "garden.org" and code.heading_path == ("Tools",)
    # The new type is a search filter like any other.
    only = library.search("bread oven loaves", k=5, types=["org"])  # type: ignore[attr-defined]
    assert only and {h.type for h in only} == {"org"}


# --- every derived table agrees with FORMATS -------------------------------------------------


def test_rows_are_well_formed() -> None:
    kinds = [f.kind for f in FORMATS]
    extensions = [ext for f in FORMATS for ext in f.extensions]
    assert len(set(kinds)) == len(kinds) and set(BY_KIND) == set(kinds)
    assert len(set(extensions)) == len(extensions), "an extension maps to two formats"
    for f in FORMATS:
        assert f.extensions and f.name, f
        for ext in f.extensions:
            assert ext.startswith(".") and ext == ext.lower() and " " not in ext, ext
        # Each reader is a real function of a real module.
        reader = getattr(importlib.import_module(f.module), f.function)
        assert callable(reader), f.reader
        assert f.unit is None or f.unit.isalpha(), f


def test_the_table_loads_no_reader() -> None:
    # The scanner asks every file whether it is supported; records and errors read the
    # table at import. None of that may load a reader (pypdf, lxml, python-docx…).
    code = (
        "import sys, core.records, core.errors, core.formats;"
        "print(sorted(m for m in sys.modules if m.startswith('core.ingest')))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "[]"


def test_the_registry_is_the_table(tmp_path: Path) -> None:
    assert {ext for f in FORMATS for ext in f.extensions} == registry.SUPPORTED_EXTENSIONS
    assert {f.kind for f in FORMATS} == registry.FILE_TYPES
    assert {f.kind for f in FORMATS if f.container} == registry.CONTAINER_TYPES == {"eml", "mbox"}
    assert {f.kind for f in FORMATS if f.text_based} == registry._TEXT_KINDS
    for f in FORMATS:
        for ext in f.extensions:
            path = tmp_path / f"sample{ext.upper()}"
            path.write_text("hello")
            assert detect_type(path) == f.kind, ext


def test_records_name_and_place_every_format() -> None:
    assert {f.kind: f.unit for f in FORMATS if f.unit} == LOCATION_UNITS
    assert {"xlsx", "ods", "csv"} == SHEET_TYPES
    assert location_label("pptx", 3) == "slide 3" and location_label("mbox", 2) == "message 2"
    assert location_label("org", 1) == ""
    for f in FORMATS:
        assert type_name(f.kind) == f.name
        assert type_name(f.kind.upper()) == f.name
        for ext in f.extensions:
            assert type_name(ext) == f.name
    assert type_name("htm") == "HTML" and type_name("docx") == "Word" and type_name("xyz") == "XYZ"


def test_hint_and_welcome_name_every_format() -> None:
    phrase = readable_formats()
    hint = UnsupportedFileError("unsupported file type (.key)").hint
    assert hint == f"Lectern reads {phrase} files."
    for f in FORMATS:
        assert family_name(f.kind) in phrase, f.kind
        if f.show_extensions:
            for ext in f.extensions:
                assert ext in phrase, ext
    assert phrase.startswith("PDF, Word (.docx), Markdown, text, HTML")
    assert phrase.endswith("e-mail (.eml, .mbox) and Org mode")
    assert phrase.count("OpenDocument") == 1 and phrase.count("e-mail") == 1

    pytest.importorskip("PySide6")
    from desktop.welcome_view import format_name
    from desktop.welcome_view import readable_formats as welcome_formats

    assert welcome_formats() == phrase
    assert all(format_name(f.kind) == family_name(f.kind) for f in FORMATS)


def test_the_bundle_carries_every_reader() -> None:
    """packaging/lectern.spec derives its parser imports from the table: run the spec's own
    import and ``hiddenimports`` statement (the rest needs PyInstaller's build)."""
    spec = (REPO / "packaging" / "lectern.spec").read_text(encoding="utf-8")
    tree = ast.parse(spec)
    wanted: list[ast.stmt] = []
    listed: list[str] = []
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.module == "core.formats":
            wanted.append(node)
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "hiddenimports" for t in node.targets
        ):
            wanted.append(node)
            assert isinstance(node.value, ast.List)
            listed = [e.value for e in node.value.elts if isinstance(e, ast.Constant)]
    assert len(wanted) == 2, "the spec no longer imports the table for hiddenimports"
    namespace: dict[str, object] = {}
    exec(compile(ast.Module(body=wanted, type_ignores=[]), "lectern.spec", "exec"), namespace)
    hidden = namespace["hiddenimports"]
    assert isinstance(hidden, list)
    modules = reader_modules()
    assert "core.ingest.org" in modules and len(modules) == len(set(modules))
    assert set(modules) <= set(hidden)
    # No reader is listed by hand beside the table's (a second list to keep in step).
    assert not set(modules) & set(listed)
    assert {f.module for f in FORMATS} == set(modules)
