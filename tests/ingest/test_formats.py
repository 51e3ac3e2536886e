"""E-books, slides, sheets, OpenDocument, RTF and mail: real files made by each format's
own library (python-pptx, openpyxl, odfpy, ebooklib, the standard library's email and
mailbox), indexed with the real model, searched, cited with the right place, and hostile
variants of each (bombs, truncation, wrong extension, huge inputs) read in the sandbox.
"""

from __future__ import annotations

import csv
import io
import mailbox
import os
import re
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from email.message import EmailMessage
from pathlib import Path
from typing import Any

import pytest

from core.errors import DamagedFileError, EncryptedError, ParseError, ParseLimitError
from core.ingest import ParserPool, detect_type, parse_file
from core.records import DocState, location_label

pytest.importorskip("pptx")
pytest.importorskip("odf")
pytest.importorskip("ebooklib")

MB = 1024 * 1024


# --- sample files, each made by its format's own library --------------------------------


def make_pptx(path: Path, slides: int = 4) -> Path:
    from pptx import Presentation

    deck = Presentation()
    deck.core_properties.title = "Coastal survey briefing"
    for n in range(1, slides + 1):
        slide = deck.slides.add_slide(deck.slide_layouts[1])
        slide.shapes.title.text = f"Survey day {n}"
        body = f"Weather on day {n} was calm with light fog."
        if n == 3:
            body = "The lighthouse keeper counted 417 gulls on the northern pier."
        slide.placeholders[1].text = body
        slide.notes_slide.notes_text_frame.text = f"Speaker notes for day {n}."
    deck.save(str(path))
    return path


def _odf_paragraph(text: str) -> object:
    from odf.text import P

    return P(text=text)


def make_odp(path: Path) -> Path:
    from odf import draw, style
    from odf.opendocument import OpenDocumentPresentation

    doc = OpenDocumentPresentation()
    layout = style.PageLayout(name="Layout")
    doc.automaticstyles.addElement(layout)
    master = style.MasterPage(name="Master", pagelayoutname=layout)
    doc.masterstyles.addElement(master)
    texts = [
        "Opening remarks about the glass trade in the lagoon.",
        "Glassblowers in Murano ship 58 vases to Vienna every week.",
        "Questions and closing thoughts from the guild.",
    ]
    for text in texts:
        page = draw.Page(masterpagename=master)
        frame = draw.Frame(width="20cm", height="5cm", x="1cm", y="1cm")
        box = draw.TextBox()
        box.addElement(_odf_paragraph(text))
        frame.addElement(box)
        page.addElement(frame)
        doc.presentation.addElement(page)
    doc.save(str(path))
    return path


def make_epub(path: Path) -> Path:
    from ebooklib import epub

    book = epub.EpubBook()
    book.set_identifier("lectern-test-river")
    book.set_title("Tales of the River")
    book.set_language("en")
    chapters = []
    bodies = [
        "The village wakes before dawn and the mist lies low on the water.",
        "The ferryman charges nine copper coins for each crossing of the river.",
        "At the mouth of the river the fishermen mend their nets in silence.",
    ]
    names = ["Morning Mist", "The Ferryman", "The Estuary"]
    for n, (name, body) in enumerate(zip(names, bodies, strict=True), start=1):
        chapter = epub.EpubHtml(title=name, file_name=f"chapter{n}.xhtml", lang="en")
        chapter.content = f"<h1>{name}</h1><p>{body}</p>"
        book.add_item(chapter)
        chapters.append(chapter)
    book.toc = chapters
    book.add_item(epub.EpubNcx())
    book.add_item(epub.EpubNav())
    book.spine = ["nav", *chapters]
    epub.write_epub(str(path), book)
    return path


BUDGET_ROWS = [
    ("Rent", 1200, "all year"),
    ("Electricity", 95, "all year"),
    ("Garden hoses", 40, "summer"),
    ("Bicycle repairs", 75, "spring"),
    ("Firewood", 310, "autumn"),
    ("Internet", 45, "all year"),
    ("School books", 130, "autumn"),
    ("Car insurance", 560, "all year"),
    ("Dentist", 220, "spring"),
    ("Holiday cottage", 900, "summer"),
    ("Snow tyres", 640, "winter"),  # row 12, under the header in row 1
    ("Birthday gifts", 150, "all year"),
]


def make_xlsx(path: Path) -> Path:
    import openpyxl

    book = openpyxl.Workbook()
    summary = book.active
    summary.title = "Summary"
    summary.append(["Household plan", "2026"])
    sheet = book.create_sheet("Budget")
    sheet.append(["Item", "Amount (EUR)", "Season"])
    for row in BUDGET_ROWS:
        sheet.append(list(row))
    book.properties.title = "Household budget 2026"
    book.save(path)
    return path


def make_ods(path: Path) -> Path:
    from odf.opendocument import OpenDocumentSpreadsheet
    from odf.table import Table, TableCell, TableRow

    doc = OpenDocumentSpreadsheet()
    table = Table(name="Harvest")
    rows = [
        ["Fruit", "Crates", "Orchard"],
        ["Apples", "120", "north"],
        ["Pears", "64", "west"],
        ["Plums", "18", "south"],
        ["Quinces", "31", "east"],  # row 5
    ]
    for values in rows:
        tr = TableRow()
        for value in values:
            cell = TableCell()
            cell.addElement(_odf_paragraph(value))
            tr.addElement(cell)
        table.addElement(tr)
    doc.spreadsheet.addElement(table)
    doc.save(str(path))
    return path


def make_csv(path: Path) -> Path:
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["Name", "Club", "Meets on"])
        for name, club, day in [
            ("Anna Berg", "chess", "Monday"),
            ("Tomas Lind", "rowing", "Tuesday"),
            ("Maja Ek", "choir", "Wednesday"),
            ("Olle Falk", "chess", "Monday"),
            ("Sara Holm", "pottery", "Friday"),
            ("Ingrid Solberg", "beekeeping", "Thursday"),  # row 7
        ]:
            writer.writerow([name, club, day])
    return path


def make_odt(path: Path) -> Path:
    from odf.opendocument import OpenDocumentText
    from odf.text import H

    doc = OpenDocumentText()
    doc.text.addElement(H(outlinelevel=1, text="Orchard care"))
    doc.text.addElement(_odf_paragraph("Water young trees weekly through their first summer."))
    doc.text.addElement(H(outlinelevel=2, text="Pruning"))
    doc.text.addElement(
        _odf_paragraph("The espalier pear tree needs pruning in late February, before buds open.")
    )
    doc.save(str(path))
    return path


def make_rtf(path: Path) -> Path:
    # No Python library writes RTF; it is a text format, so the file is written as such.
    path.write_bytes(
        rb"{\rtf1\ansi\ansicpg1252\deff0{\fonttbl{\f0 Times New Roman;}}"
        rb"\f0\fs24 School notices\par\par "
        rb"The piano tuner visits the school on the second Monday of each month.\par "
        rb"The caf\'e9 in the hall opens at noon.\par}"
    )
    return path


def make_docx_bytes(text: str) -> bytes:
    import docx

    document = docx.Document()
    document.add_heading("Committee minutes", 1)
    document.add_paragraph(text)
    buffer = io.BytesIO()
    document.save(buffer)
    return buffer.getvalue()


def make_docx(path: Path) -> Path:
    path.write_bytes(make_docx_bytes("The committee approved the new bicycle shed."))
    return path


def make_eml(path: Path) -> Path:
    message = EmailMessage()
    message["Subject"] = "Parking at the depot"
    message["From"] = "Alice Moreau <alice@example.org>"
    message["To"] = "team@example.org"
    message["Date"] = "Fri, 06 Mar 2026 10:15:00 +0100"
    message.set_content(
        "Hello all,\n\nThe gate code for the depot car park is 4711 from Monday on.\n\nAlice"
    )
    message.add_attachment(
        make_docx_bytes("The committee approved a budget of 980 euros for paper lanterns."),
        maintype="application",
        subtype="vnd.openxmlformats-officedocument.wordprocessingml.document",
        filename="minutes.docx",
    )
    path.write_bytes(bytes(message))
    return path


MAILBOX_SUBJECTS = [
    "Choir rehearsal moved",
    "Library fines",
    "Bake sale",
    "Boiler service",  # message 4
    "",  # message 5: not a message at all
    "Summer fair volunteers",
]


def make_mbox(path: Path) -> Path:
    box = mailbox.mbox(str(path))
    for n, subject in enumerate(MAILBOX_SUBJECTS, start=1):
        if not subject:
            continue
        message = EmailMessage()
        message["Subject"] = subject
        message["From"] = f"neighbour{n}@example.org"
        message["Date"] = f"Mon, 0{n} Mar 2026 09:00:00 +0000"
        body = f"A short note about {subject.lower()}."
        if subject == "Boiler service":
            body = "The plumber replaces the boiler valve on Tuesday at eight in the morning."
        message.set_content(body)
        box.add(message)
    box.flush()
    box.close()
    # Message 5: a "From " line followed by junk with no headers, between real ones.
    raw = path.read_bytes()
    parts = raw.split(b"\nFrom ")
    parts.insert(4, b"MAILER-DAEMON Thu Jan  1 00:00:00 1970\n\x00\x01 not a header line\n")
    path.write_bytes(b"\nFrom ".join(parts))
    return path


@dataclass(frozen=True)
class Case:
    name: str
    make: Callable[[Path], Path]
    doc_type: str
    query: str
    fact: str  # words of the passage that must be found and cited
    location: str  # where a person finds it ("" where the format has no numbered places)


CASES = [
    Case(
        "deck.pptx",
        make_pptx,
        "pptx",
        "how many gulls did the lighthouse keeper count",
        "417 gulls",
        "slide 3",
    ),
    Case(
        "talk.odp",
        make_odp,
        "odp",
        "how many vases do the Murano glassblowers ship",
        "58 vases",
        "slide 2",
    ),
    Case(
        "river.epub",
        make_epub,
        "epub",
        "what does the ferryman charge for a crossing",
        "nine copper coins",
        "chapter 2",
    ),
    Case(
        "budget.xlsx", make_xlsx, "xlsx", "snow tyres amount", "Snow tyres | 640", "Budget, row 12"
    ),
    Case(
        "harvest.ods",
        make_ods,
        "ods",
        "how many crates of quinces",
        "Quinces | 31",
        "Harvest, row 5",
    ),
    Case(
        "members.csv",
        make_csv,
        "csv",
        "Ingrid Solberg beekeeping club",
        "Ingrid Solberg | beekeeping",
        "row 7",
    ),
    Case(
        "orchard.odt", make_odt, "odt", "when to prune the espalier pear tree", "late February", ""
    ),
    Case(
        "notices.rtf",
        make_rtf,
        "rtf",
        "when does the piano tuner visit the school",
        "second Monday",
        "",
    ),
    Case("depot.eml", make_eml, "eml", "gate code for the depot car park", "4711", ""),
    Case(
        "minutes-in-mail.eml",
        make_eml,
        "docx",
        "budget approved for paper lanterns",
        "980 euros",
        "",
    ),
    Case(
        "neighbours.mbox",
        make_mbox,
        "mbox",
        "when does the plumber replace the boiler valve",
        "boiler valve",
        "message 4",
    ),
]


@pytest.fixture(scope="module")
def formats(
    tmp_path_factory: pytest.TempPathFactory, embedder: object
) -> Iterator[tuple[object, Path]]:
    """One library holding one sample of every new format, indexed once for the module."""
    from core.config import Settings
    from core.library import Library

    base = tmp_path_factory.mktemp("formats")
    folder = base / "docs"
    folder.mkdir()
    for case in CASES:
        if case.name != "minutes-in-mail.eml":  # the same file as depot.eml, asked twice
            case.make(folder / case.name)
    home = base / "home"
    home.mkdir()
    lib = Library(Settings(home=home), embedder=embedder)  # type: ignore[arg-type]
    report = lib.index([folder])
    assert report.failed == 0, report.failures
    yield lib, folder
    lib.close()


def _file_of(case: Case) -> str:
    # The attachment of depot.eml, stored as a document of its own: depot.eml/minutes.docx.
    return "minutes.docx" if case.name == "minutes-in-mail.eml" else case.name


def test_every_sample_is_indexed_with_its_type_and_title(formats: tuple[object, Path]) -> None:
    library, _ = formats
    docs = {Path(d.path).name: d for d in library.files.documents()}  # type: ignore[attr-defined]
    assert set(docs) == {_file_of(c) for c in CASES}
    for case in CASES:
        doc = docs[_file_of(case)]
        assert doc.state is DocState.INDEXED, (doc.path, doc.reason)
        assert doc.type == case.doc_type and doc.chunks > 0
    assert docs["deck.pptx"].title == "Coastal survey briefing"
    assert docs["deck.pptx"].pages == 4  # slides
    assert docs["river.epub"].title == "Tales of the River"
    assert docs["budget.xlsx"].title == "Household budget 2026"
    assert docs["depot.eml"].title == "Parking at the depot"  # the subject
    # One broken message in the mailbox costs that message only, and is said.
    assert docs["neighbours.mbox"].reason.startswith("1 of 6 messages could not be read (message 5")


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_search_finds_the_passage_at_its_place(formats: tuple[object, Path], case: Case) -> None:
    library, _ = formats
    hits = library.search(case.query, k=3)  # type: ignore[attr-defined]
    assert hits, case.query
    hit = hits[0]
    assert Path(hit.path).name == _file_of(case), [(Path(h.path).name, h.text[:60]) for h in hits]
    assert case.fact in hit.text
    # The passage's offsets index the stored text exactly.
    text = library.files.text(hit.document_id)  # type: ignore[attr-defined]
    assert text[hit.start : hit.end] == hit.text
    fact_at = text.index(case.fact)
    place = library.files.page_at(hit.document_id, fact_at)  # type: ignore[attr-defined]
    assert location_label(hit.type, place, None, hit.heading_path) == case.location
    if case.location:
        # The hit's own label covers the place (a chunk of rows spans several).
        assert hit.location and hit.page is not None and hit.page_end is not None
        assert hit.page <= place <= hit.page_end  # type: ignore[operator]
        assert hit.to_json()["location"] == hit.location
    else:
        assert hit.location == ""


def test_mail_context_and_attachment_sections(formats: tuple[object, Path]) -> None:
    library, folder = formats
    hit = library.search("budget approved for paper lanterns", k=1)[0]  # type: ignore[attr-defined]
    # The attachment is a document of its own, stored under the mail's path, and its
    # passages carry the mail's subject, sender and date.
    assert hit.path == str(folder / "depot.eml" / "minutes.docx") and hit.type == "docx"
    assert hit.heading_path[:3] == (
        "Parking at the depot",
        "From Alice Moreau <alice@example.org> · 2026-03-06 10:15",
        "Committee minutes",
    )
    mail = library.search("gate code for the depot car park", k=1)[0]  # type: ignore[attr-defined]
    assert mail.path == str(folder / "depot.eml")
    text = library.files.text(mail.document_id)  # type: ignore[attr-defined]
    assert "Attachments: minutes.docx" in text and "paper lanterns" not in text
    sheet = library.search("snow tyres amount", k=1)[0]  # type: ignore[attr-defined]
    # Every chunk of a sheet carries its header row in its context.
    assert sheet.heading_path == ("Budget", "Item | Amount (EUR) | Season")


def test_attachments_are_documents_that_follow_their_mail(library: object, tmp_path: Path) -> None:
    from desktop.evidence_panel import original_file

    folder = tmp_path / "mail"
    folder.mkdir()
    eml = make_eml(folder / "depot.eml")
    box = mailbox.mbox(str(folder / "club.mbox"))
    for n in (1, 2):
        message = EmailMessage()
        message["Subject"], message["From"] = f"Club news {n}", "club@example.org"
        message.set_content(f"Issue {n} of the club news.")
        if n == 2:
            message.add_attachment(
                make_docx_bytes("The rowing club repaints its boathouse in May."),
                maintype="application",
                subtype="vnd.openxmlformats-officedocument.wordprocessingml.document",
                filename="minutes.docx",
            )
        box.add(message)
    box.close()
    library.index([folder])  # type: ignore[attr-defined]
    minutes = str(eml / "minutes.docx")
    boathouse = str(folder / "club.mbox" / "message 2" / "minutes.docx")
    paths = {d.path for d in library.files.documents()}  # type: ignore[attr-defined]
    assert paths == {str(eml), minutes, str(folder / "club.mbox"), boathouse}
    assert original_file(boathouse) == str(folder / "club.mbox")  # what "Open original" opens

    # Nothing changed: an attachment is not mistaken for a file deleted from the folder.
    again = library.index()  # type: ignore[attr-defined]
    assert again.removed == 0 and {d.path for d in library.files.documents()} == paths  # type: ignore[attr-defined]

    # The mail changes: its new attachment replaces the old one.
    message = EmailMessage()
    message["Subject"], message["From"] = "Parking at the depot", "alice@example.org"
    message.set_content("The gate code changes to 5822 next month.")
    message.add_attachment(
        make_docx_bytes("The picnic starts at the old mill at two."),
        maintype="application",
        subtype="vnd.openxmlformats-officedocument.wordprocessingml.document",
        filename="agenda.docx",
    )
    eml.write_bytes(bytes(message))
    library.index()  # type: ignore[attr-defined]
    paths = {d.path for d in library.files.documents()}  # type: ignore[attr-defined]
    assert minutes not in paths and str(eml / "agenda.docx") in paths
    assert not [h for h in library.search("paper lanterns", mode="bm25") if h.path == minutes]  # type: ignore[attr-defined]
    assert library.search("picnic at the old mill", k=1)[0].path == str(eml / "agenda.docx")  # type: ignore[attr-defined]

    # The mail is deleted: its attachments go with it.
    eml.unlink()
    library.index()  # type: ignore[attr-defined]
    paths = {d.path for d in library.files.documents()}  # type: ignore[attr-defined]
    assert paths == {str(folder / "club.mbox"), boathouse}

    # A folder holding a mailbox is renamed, as the watcher reports it (old and new path).
    inbox = folder / "inbox"
    inbox.mkdir()
    (folder / "club.mbox").rename(inbox / "club.mbox")
    library.sync_files([str(folder / "club.mbox"), str(inbox)])  # type: ignore[attr-defined]
    archive = folder / "archive"
    inbox.rename(archive)
    library.sync_files([str(inbox), str(archive)])  # type: ignore[attr-defined]
    paths = {d.path for d in library.files.documents()}  # type: ignore[attr-defined]
    moved = archive / "club.mbox"
    assert paths == {str(moved), str(moved / "message 2" / "minutes.docx")}
    assert library.search("boathouse repaints", k=1)[0].path == str(
        moved / "message 2" / "minutes.docx"
    )  # type: ignore[attr-defined]


def _ask(library: object, question: str) -> object:
    from core.generation.qa import DoneEvent, ask

    events = list(ask(library, question, use_llm=False, store=False))
    done = events[-1]
    assert isinstance(done, DoneEvent), events[-1]
    return done


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_extractive_answer_cites_the_right_place(formats: tuple[object, Path], case: Case) -> None:
    library, _ = formats
    done = _ask(library, case.query)
    cited = [c for c in done.citations if Path(c.hit.path).name == _file_of(case)]  # type: ignore[attr-defined]
    assert cited, (done.answer, [c.hit.path for c in done.citations])  # type: ignore[attr-defined]
    citation = next((c for c in cited if case.fact in c.quote), None)
    assert citation is not None, [c.quote for c in cited]
    assert citation.location == case.location
    assert citation.to_json()["location"] == case.location


def _inline_backend(library: object) -> object:
    """What the evidence panel asks of the app's backend, run at once on this thread
    against the real library (the panel's own code loads and highlights the text)."""
    from desktop.qt import QObject, Signal

    class View(QObject):
        snapshot_changed = Signal(object)
        documents_removed = Signal(object)

    class Inline(QObject):
        def __init__(self) -> None:
            super().__init__()
            self.view = View(self)

        def run(
            self,
            op: Any,
            *,
            on_result: Callable[[object], None],
            on_error: Callable[[BaseException], None],
            **_: object,
        ) -> None:
            try:
                result = op.run(library).value
            except Exception as exc:
                on_error(exc)
            else:
                on_result(result)

    return Inline()


def test_evidence_panel_names_the_place_and_highlights_the_words(
    qtbot: object, formats: tuple[object, Path]
) -> None:
    pytest.importorskip("pytestqt")
    from desktop.evidence_panel import EvidencePanel
    from desktop.theme import Theme
    from desktop.viewmodels import CitationView, EvidenceRequest, SourceView

    library, _ = formats
    theme = Theme("light")
    panel = EvidencePanel(_inline_backend(library), theme)  # type: ignore[arg-type]
    qtbot.addWidget(panel)  # type: ignore[attr-defined]
    panel.show()
    for case in (CASES[0], CASES[2], CASES[3], CASES[10]):  # deck, e-book, sheet, mailbox
        done = _ask(library, case.query)
        citation = next(
            c
            for c in done.citations  # type: ignore[attr-defined]
            if Path(c.hit.path).name == case.name and case.fact in c.quote
        )
        source = SourceView.from_hit(citation.n, citation.hit)
        assert source.where == f"{case.name} · {source.location}" and source.location
        view = CitationView.from_citation(citation, [source])
        assert view.location == case.location
        request = EvidenceRequest.for_citation(view)
        assert request is not None
        panel.show_request(request)
        qtbot.waitUntil(lambda: panel.mode == "text", timeout=20_000)  # type: ignore[attr-defined]
        assert panel.meta.text() == f"{case.name} · {case.location}"
        lit = " ".join(panel.highlighted_text())
        assert case.fact in lit, (case.name, lit)


# --- hostile files ----------------------------------------------------------------------


def _peak_rss_mb(pid: int | None) -> float:
    """The worker's peak resident memory so far (Linux: VmHWM)."""
    status = Path(f"/proc/{pid}/status")
    if pid is None or not status.exists():
        pytest.skip("peak memory is read from /proc")
    match = re.search(r"VmHWM:\s+(\d+) kB", status.read_text())
    assert match
    return int(match.group(1)) / 1024


@pytest.fixture(scope="module")
def pool() -> Iterator[ParserPool]:
    # The limits the indexer uses (core.config): 1 GB, 60 s.
    with ParserPool(timeout_s=60.0, memory_mb=1024) as parser:
        yield parser


def _rezip(
    source: Path,
    target: Path,
    change: Callable[[str, bytes], bytes | None],
    extra: dict[str, bytes] | None = None,
    level: int = 6,
) -> Path:
    with (
        zipfile.ZipFile(source) as old,
        zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED, compresslevel=level) as new,
    ):
        for info in old.infolist():
            data = change(info.filename, old.read(info))
            if data is not None:
                new.writestr(info.filename, data)
        for name, data in (extra or {}).items():
            new.writestr(name, data)
    return target


ZIP_FORMATS = {
    "docx": (make_docx, "word/document.xml"),
    "pptx": (make_pptx, "ppt/slides/slide1.xml"),
    "odp": (make_odp, "content.xml"),
    "xlsx": (make_xlsx, "xl/worksheets/sheet2.xml"),
    "ods": (make_ods, "content.xml"),
    "odt": (make_odt, "content.xml"),
    "epub": (make_epub, "EPUB/chapter2.xhtml"),
}

ENTITY_BOMB = (
    b'<?xml version="1.0"?>\n<!DOCTYPE lolz [\n <!ENTITY lol "lol">\n'
    + b"".join(
        f' <!ENTITY lol{i} "{("&lol" + (str(i - 1) if i > 1 else "") + ";") * 10}">\n'.encode()
        for i in range(1, 10)
    )
    + b"]>\n"
)


def _with_entity_bomb(part: str) -> Callable[[str, bytes], bytes]:
    def change(name: str, data: bytes) -> bytes:
        if name != part:
            return data
        body = re.sub(rb"^<\?xml[^>]*\?>\s*", b"", data)
        # The root element gets the bomb as its first child: &lol9; is 10^9 "lol"s.
        return ENTITY_BOMB + re.sub(rb"(<[A-Za-z][^>]*>)", rb"\1&lol9;", body, count=1)

    return change


@pytest.fixture(scope="module")
def zeros_member() -> bytes:
    return bytes(64 * MB)


@pytest.mark.parametrize("kind", list(ZIP_FORMATS))
def test_hostile_zipped_formats_fail_with_a_reason(
    pool: ParserPool, tmp_path: Path, kind: str, zeros_member: bytes
) -> None:
    make, main_part = ZIP_FORMATS[kind]
    good = make(tmp_path / f"good.{kind}")
    assert pool.parse(good).text  # the untouched sample reads

    bomb = _rezip(
        good, tmp_path / f"bomb.{kind}", lambda n, d: d, {"padding.xml": zeros_member}, level=9
    )
    with pytest.raises(ParseLimitError, match="zip bomb"):
        pool.parse(bomb)

    entities = _rezip(good, tmp_path / f"entities.{kind}", _with_entity_bomb(main_part))
    with pytest.raises(ParseLimitError, match="XML bomb"):
        pool.parse(entities)

    truncated = tmp_path / f"truncated.{kind}"
    truncated.write_bytes(good.read_bytes()[: good.stat().st_size // 2])
    with pytest.raises(DamagedFileError, match="damaged or truncated"):
        pool.parse(truncated)

    not_zip = tmp_path / f"photo.{kind}"
    not_zip.write_bytes(b"\x89PNG\r\n\x1a\n" + os.urandom(2048))
    with pytest.raises(DamagedFileError, match="not a zip package"):
        pool.parse(not_zip)

    # Another zipped format under this extension: read as damaged, never as something else.
    other = "odt" if kind != "odt" else "pptx"
    wrong = tmp_path / f"wrong.{kind}"
    wrong.write_bytes(ZIP_FORMATS[other][0](tmp_path / f"other.{other}").read_bytes())
    with pytest.raises(DamagedFileError):
        pool.parse(wrong)


def test_hostile_text_formats_fail_with_a_reason(pool: ParserPool, tmp_path: Path) -> None:
    pdf_named_rtf = tmp_path / "scan.rtf"
    pdf_named_rtf.write_bytes(b"just some words, no RTF header at all\n")
    with pytest.raises(DamagedFileError, match="not an RTF file"):
        pool.parse(pdf_named_rtf)
    truncated_rtf = tmp_path / "cut.rtf"
    truncated_rtf.write_bytes(make_rtf(tmp_path / "whole.rtf").read_bytes()[:120])
    assert "piano tuner" in pool.parse(truncated_rtf).text  # what is there is read

    eml = tmp_path / "photo.eml"
    eml.write_bytes(b"\xff\xd8\xff\xe0" + os.urandom(4096))
    with pytest.raises(ParseError, match=r"not an e-mail message|binary"):
        pool.parse(eml)
    mbox = tmp_path / "notes.mbox"
    mbox.write_text("Dear diary, this is not a mailbox.\n")
    with pytest.raises(DamagedFileError, match="not a mailbox"):
        pool.parse(mbox)
    truncated_mbox = tmp_path / "cut.mbox"
    whole = make_mbox(tmp_path / "whole.mbox").read_bytes()
    truncated_mbox.write_bytes(whole[: whole.index(b"boiler valve") + 5])
    cut = pool.parse(truncated_mbox)
    assert "Boiler service" in cut.text and cut.pages[-1].page == 4

    binary_csv = tmp_path / "data.csv"
    binary_csv.write_bytes(os.urandom(4096).replace(b"\n", b""))
    with pytest.raises(ParseError, match="binary"):
        pool.parse(binary_csv)


def _huge_xlsx(path: Path, rows: int, cols: int) -> Path:
    """A real openpyxl workbook whose sheet XML is replaced by ``rows x cols`` cells,
    written directly (openpyxl itself takes ~10 s for a million cells here)."""
    import openpyxl
    from openpyxl.utils import get_column_letter

    small = path.with_suffix(".small.xlsx")
    book = openpyxl.Workbook()
    book.active.title = "Ledger"
    book.active["A1"] = "x"
    book.save(small)
    letters = [get_column_letter(c + 1) for c in range(cols)]
    buffer = io.StringIO()
    buffer.write(
        '<?xml version="1.0" encoding="UTF-8"?>'
        '<worksheet xmlns="http://schemas.openxmlformats.org/spreadsheetml/2006/main"><sheetData>'
    )
    for r in range(1, rows + 1):
        cells = "".join(f'<c r="{letters[c]}{r}"><v>{r * cols + c}</v></c>' for c in range(cols))
        buffer.write(f'<row r="{r}">{cells}</row>')
    buffer.write("</sheetData></worksheet>")
    data = buffer.getvalue().encode()
    _rezip(small, path, lambda n, d: data if n == "xl/worksheets/sheet1.xml" else d, level=1)
    small.unlink()
    return path


def _huge_ods(path: Path, rows: int, cols: int) -> Path:
    """An odfpy spreadsheet whose content.xml is replaced by ``rows x cols`` cells."""
    small = make_ods(path.with_suffix(".small.ods"))
    with zipfile.ZipFile(small) as package:
        content = package.read("content.xml").decode()
    head, _, tail = content.partition("<table:table ")
    tail = tail[tail.index("</table:table>") + len("</table:table>") :]
    buffer = io.StringIO()
    buffer.write(head + '<table:table table:name="Ledger">')
    for r in range(1, rows + 1):
        cells = "".join(
            f"<table:table-cell><text:p>{r * cols + c}</text:p></table:table-cell>"
            for c in range(cols)
        )
        buffer.write(f"<table:table-row>{cells}</table:table-row>")
    buffer.write("</table:table>" + tail)
    data = buffer.getvalue().encode()
    _rezip(small, path, lambda n, d: data if n == "content.xml" else d, level=1)
    small.unlink()
    return path


def _big_mbox(path: Path, messages: int) -> Path:
    with path.open("w", encoding="ascii") as handle:
        for n in range(1, messages + 1):
            handle.write(
                f"From sender{n % 97}@example.org Mon Mar  2 09:00:00 2026\n"
                f"From: sender{n % 97}@example.org\nSubject: Reading group note {n}\n"
                f"Date: Mon, 02 Mar 2026 09:00:00 +0000\n\n"
                f"Chapter {n % 40} is for next week; bring {n % 7} questions.\n\n"
            )
    return path


def _big_deck(path: Path, slides: int) -> Path:
    return make_pptx(path, slides=slides)


@pytest.mark.slow
def test_huge_inputs_end_within_the_sandbox_limits(pool: ParserPool, tmp_path: Path) -> None:
    """A million cells (Excel and OpenDocument), 100,000 messages, 1,000 slides: each ends
    read up to a limit that is said in words, inside the worker's 1 GB and 60 s, and its
    peak memory is measured."""
    pool.parse(make_csv(tmp_path / "warm.csv"))
    baseline = _peak_rss_mb(pool.worker_pid)
    peaks: dict[str, float] = {}

    sheet = pool.parse(_huge_xlsx(tmp_path / "million.xlsx", rows=100_000, cols=10))
    assert sheet.notice.startswith("only the first 250,000 cells are indexed")
    assert location_label("xlsx", sheet.pages[-1].page, None, ("Ledger",)) == "Ledger, row 25000"
    peaks["xlsx 1M cells"] = _peak_rss_mb(pool.worker_pid)

    ods = pool.parse(_huge_ods(tmp_path / "million.ods", rows=100_000, cols=10))
    assert ods.notice.startswith("only the first 250,000 cells are indexed")
    assert location_label("ods", ods.pages[-1].page, None, ("Ledger",)) == "Ledger, row 25000"
    peaks["ods 1M cells"] = _peak_rss_mb(pool.worker_pid)

    box = pool.parse(_big_mbox(tmp_path / "big.mbox", 100_000))
    assert "messages are indexed" in box.notice and 1_000 < box.page_count < 100_000
    peaks["mbox 100k messages"] = _peak_rss_mb(pool.worker_pid)

    deck = pool.parse(_big_deck(tmp_path / "big.pptx", 1_000))
    assert deck.page_count == 1_000 and deck.pages[-1].page == 1_000 and not deck.notice
    peaks["pptx 1,000 slides"] = _peak_rss_mb(pool.worker_pid)

    print({"baseline_mb": round(baseline), **{k: round(v) for k, v in peaks.items()}})
    for name, peak in peaks.items():
        assert peak - baseline < 1024, (name, peak, baseline)


def test_extensionless_mailbox_is_detected(tmp_path: Path) -> None:
    inbox = tmp_path / "Inbox"  # how Thunderbird stores a mail folder
    inbox.write_bytes(make_mbox(tmp_path / "x.mbox").read_bytes())
    assert detect_type(inbox) == "mbox"
    notes = tmp_path / "README"
    notes.write_text("From the start, this project...\nNot mail.\n")
    assert detect_type(notes) is None


def test_drm_epub_and_encrypted_opendocument_are_refused(tmp_path: Path) -> None:
    good = make_epub(tmp_path / "book.epub")
    drm = _rezip(
        good,
        tmp_path / "drm.epub",
        lambda n, d: d,
        {
            "META-INF/encryption.xml": b'<encryption xmlns="urn:oasis:names:tc:opendocument:xmlns:container" '
            b'xmlns:enc="http://www.w3.org/2001/04/xmlenc#"><enc:EncryptedData>'
            b'<enc:EncryptionMethod Algorithm="http://www.w3.org/2001/04/xmlenc#aes128-cbc"/>'
            b"</enc:EncryptedData></encryption>"
        },
    )
    with pytest.raises(EncryptedError, match="DRM"):
        parse_file(drm)
    odt = make_odt(tmp_path / "a.odt")

    def encrypt(name: str, data: bytes) -> bytes:
        if name != "META-INF/manifest.xml":
            return data
        entry = (
            b'<manifest:file-entry manifest:full-path="content.xml" manifest:media-type="text/xml">'
            b"<manifest:encryption-data/></manifest:file-entry>"
        )
        return data.replace(b"</manifest:manifest>", entry + b"</manifest:manifest>", 1)

    locked = _rezip(odt, tmp_path / "locked.odt", encrypt)
    with pytest.raises(EncryptedError):
        parse_file(locked)
