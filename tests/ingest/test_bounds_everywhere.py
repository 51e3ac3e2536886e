"""Every reader within the same bounds (issue 45): a zip bomb of any zipped format fails
fast without being unpacked, and a text of any size is read up to the text limit only,
with the notice an e-book cut at the limit gives. Real files in the real sandbox."""

from __future__ import annotations

import io
import time
import zipfile
from email.message import EmailMessage
from pathlib import Path

import pytest

from core.errors import ParseLimitError
from core.formats import FORMATS
from core.ingest import ParserPool
from core.ingest.text import MAX_TEXT_CHARS, cap_document, decode_head, limit_notice
from core.records import Block, BlockKind, PageSpan, ParsedDocument, WordBox
from tests.ingest import test_formats as formats
from tests.ingest.test_formats import make_docx_bytes

# The worker's peak memory, and a pool with the indexer's limits (1 GB, 60 s).
_peak_rss_mb = formats._peak_rss_mb
pool = formats.pool

MB = 1024 * 1024
# The zipped formats: each reader opens its file through core.ingest.bounds.open_package.
ZIPPED = {"docx", "pptx", "xlsx", "epub", "odt", "ods", "odp"}
# The others, which a zip is not (they say so, or read it as the bytes it is).
NOT_ZIPPED = {"pdf", "md", "txt", "html", "csv", "rtf", "eml", "mbox", "org"}
TEXT_NOTICE = limit_notice()


@pytest.fixture(scope="module")
def bomb_bytes() -> bytes:
    """A 300 KB zip whose one member unpacks to 300 MB (a thousand times its size)."""
    buffer = io.BytesIO()
    with (
        zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as package,
        package.open("word/document.xml", "w", force_zip64=True) as member,
    ):
        block = bytes(MB)
        for _ in range(300):
            member.write(block)
    return buffer.getvalue()


def test_every_format_is_sorted_as_zipped_or_not() -> None:
    # A new format is named here, so a new zipped one gets its bomb test.
    assert {f.kind for f in FORMATS} == ZIPPED | NOT_ZIPPED
    assert not ZIPPED & NOT_ZIPPED


@pytest.mark.parametrize("kind", sorted(ZIPPED))
def test_a_zip_bomb_of_every_zipped_format_fails_without_being_unpacked(
    pool: ParserPool, tmp_path: Path, kind: str, bomb_bytes: bytes
) -> None:
    extension = next(f.extensions[0] for f in FORMATS if f.kind == kind)
    bomb = tmp_path / f"bomb{extension}"
    bomb.write_bytes(bomb_bytes)
    pool.parse(_small_text(tmp_path))  # the worker is up: its memory so far is the baseline
    baseline = _peak_rss_mb(pool.worker_pid)
    started = time.monotonic()
    with pytest.raises(ParseLimitError, match=r"a zip bomb: word/document\.xml unpacks"):
        pool.parse(bomb)
    assert time.monotonic() - started < 5
    # Unpacking even a tenth of it would show: 300 MB unpacked, then parsed.
    assert _peak_rss_mb(pool.worker_pid) - baseline < 30


def test_a_word_file_whose_text_is_the_bomb_fails_fast(pool: ParserPool, tmp_path: Path) -> None:
    """As found: a real .docx whose document.xml unpacks to hundreds of MB (it was
    unpacked to the worker's memory limit, then failed as needing more than 1 GB)."""
    good = zipfile.ZipFile(io.BytesIO(make_docx_bytes("A short note.")))
    bomb = tmp_path / "minutes.docx"
    paragraph = b"<w:p><w:r><w:t>lol</w:t></w:r></w:p>" * 100_000
    with zipfile.ZipFile(bomb, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as package:
        for info in good.infolist():
            data = good.read(info)
            if info.filename != "word/document.xml":
                package.writestr(info, data)
                continue
            head, tail = data.split(b"<w:body>")
            with package.open(info.filename, "w", force_zip64=True) as member:
                member.write(head + b"<w:body>")
                for _ in range(100):  # 360 MB of paragraphs
                    member.write(paragraph)
                member.write(tail)
    assert bomb.stat().st_size < 2 * MB
    pool.parse(_small_text(tmp_path))
    baseline = _peak_rss_mb(pool.worker_pid)
    started = time.monotonic()
    with pytest.raises(ParseLimitError) as raised:
        pool.parse(bomb)
    assert raised.value.reason.startswith("a zip bomb: word/document.xml unpacks")
    assert "does not unpack it" in (raised.value.hint or "")
    assert time.monotonic() - started < 5
    assert _peak_rss_mb(pool.worker_pid) - baseline < 30


def test_a_bomb_attached_to_a_mail_is_skipped_unopened(
    pool: ParserPool, tmp_path: Path, bomb_bytes: bytes
) -> None:
    message = EmailMessage()
    message["Subject"] = "Minutes attached"
    message["From"] = "clerk@example.org"
    message.set_content("The minutes of Tuesday's meeting are attached.")
    message.add_attachment(
        bomb_bytes,
        maintype="application",
        subtype="vnd.openxmlformats-officedocument.wordprocessingml.document",
        filename="minutes.docx",
    )
    mail = tmp_path / "minutes.eml"
    mail.write_bytes(message.as_bytes())
    started = time.monotonic()
    doc = pool.parse(mail)
    assert time.monotonic() - started < 5
    assert "meeting are attached" in doc.text and not doc.attachments
    assert doc.notice.startswith("attachments not read: minutes.docx (a zip bomb")


# --- text of any size ---------------------------------------------------------------------


class EndlessText(io.RawIOBase):
    """A stream of text that never ends, counting what is read of it."""

    def __init__(self) -> None:
        self.line = b"The ferry leaves the north pier at nine and returns at noon.\n"
        self.given = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        if self.given > 256 * MB:
            raise AssertionError("the reader does not stop")
        n = len(buffer)
        data = (self.line * (n // len(self.line) + 1))[:n]
        buffer[:n] = data
        self.given += n
        return n


def test_the_text_reader_stops_at_the_text_limit() -> None:
    stream = EndlessText()
    text, cut = decode_head(io.BufferedReader(stream))
    assert cut
    assert MAX_TEXT_CHARS - 100 <= len(text) <= MAX_TEXT_CHARS
    assert text.endswith("returns at noon.")  # cut at a line's end, not inside a word
    # Four bytes a character at most (UTF-32's width), whatever the encoding.
    assert stream.given <= 4 * MAX_TEXT_CHARS + 2 * MB


def test_a_character_cut_in_half_by_the_limit_is_not_taken_for_another_encoding() -> None:
    # 3 bytes a character: the bytes read end inside one, which must not make the whole
    # text read as Windows-1252.
    data = "日本語のテキスト。\n".encode() * (MAX_TEXT_CHARS // 5)
    text, cut = decode_head(io.BytesIO(data))
    assert cut and text.startswith("日本語のテキスト。") and "æ" not in text


def _small_text(folder: Path) -> Path:
    path = folder / "warm.txt"
    path.write_text("A short note about the ferry timetable.\n")
    return path


def _huge(path: Path, unit: str, text_mb: int = 24, total_mb: int = 200) -> Path:
    """A file of ``total_mb``: ``text_mb`` of text repeating ``unit``, the rest a hole
    (sparse, so it costs no time to write). Its last words come after the hole."""
    block = (unit * (MB // len(unit) + 1))[:MB].encode()
    with path.open("wb") as handle:
        for _ in range(text_mb):
            handle.write(block)
        handle.truncate(total_mb * MB)
    with path.open("ab") as handle:
        handle.write(b"\nA closing line past the limit about the lighthouse keeper.\n")
    return path


@pytest.mark.parametrize(
    ("name", "unit"),
    [
        ("log.txt", "Ferry log: the ferry left the north pier at nine, back at noon.\n\n"),
        ("notes.md", "## Ferry\n\nThe ferry left the *north pier* at nine, back at noon.\n\n"),
        ("notes.org", "* Ferry\nThe ferry left the north pier at nine, back at noon.\n\n"),
    ],
)
def test_a_200_mb_text_is_read_up_to_the_limit_with_its_notice(
    pool: ParserPool, tmp_path: Path, name: str, unit: str
) -> None:
    huge = _huge(tmp_path / name, unit)
    pool.parse(_small_text(tmp_path))
    baseline = _peak_rss_mb(pool.worker_pid)
    started = time.monotonic()
    doc = pool.parse(huge)
    elapsed = time.monotonic() - started
    assert doc.notice == TEXT_NOTICE
    assert MAX_TEXT_CHARS * 0.8 < len(doc.text) <= MAX_TEXT_CHARS
    assert "lighthouse keeper" not in doc.text
    assert doc.blocks and doc.blocks[-1].end <= len(doc.text)
    # Read whole, the file took 7 s and 749 MB.
    peak = _peak_rss_mb(pool.worker_pid) - baseline
    print({"file": name, "seconds": round(elapsed, 2), "peak_mb_over_baseline": round(peak)})
    assert elapsed < 10
    assert peak < 300


def test_a_huge_web_page_is_read_up_to_its_limit(pool: ParserPool, tmp_path: Path) -> None:
    unit = "<div><p>The ferry left the <b>north pier</b> at nine.</p></div>\n"
    page = tmp_path / "archive.html"
    _huge(page, unit, text_mb=16, total_mb=100)
    doc = pool.parse(page)
    assert doc.notice == limit_notice("8 MB of the page")
    assert "north pier" in doc.text and "lighthouse keeper" not in doc.text


def test_a_page_of_pictures_is_measured_by_its_markup(pool: ParserPool, tmp_path: Path) -> None:
    """Pictures saved inside a page are no text: 20 MB of them do not push the text
    after them past the limit."""
    picture = "A" * (20 * MB)
    page = tmp_path / "saved.html"
    page.write_text(
        f'<html><body><img src="data:image/png;base64,{picture}">'
        "<p>The ferry left the north pier at nine.</p></body></html>"
    )
    doc = pool.parse(page)
    assert doc.text == "The ferry left the north pier at nine." and not doc.notice


def test_a_word_file_past_the_text_limit_is_cut_there(pool: ParserPool, tmp_path: Path) -> None:
    good = zipfile.ZipFile(io.BytesIO(make_docx_bytes("A short note.")))
    long_docx = tmp_path / "long.docx"
    paragraph = (
        "<w:p><w:r><w:t>" + "The ferry left the north pier at nine. " * 25 + "</w:t></w:r></w:p>"
    )
    with zipfile.ZipFile(long_docx, "w", zipfile.ZIP_DEFLATED) as package:
        for info in good.infolist():
            data = good.read(info)
            if info.filename == "word/document.xml":
                head, tail = data.split(b"<w:body>")
                data = head + b"<w:body>" + paragraph.encode() * 5_000 + tail
            package.writestr(info, data)
    doc = pool.parse(long_docx)
    assert doc.notice == TEXT_NOTICE
    assert MAX_TEXT_CHARS * 0.9 < len(doc.text) <= MAX_TEXT_CHARS
    assert doc.blocks[-1].end <= len(doc.text)


def test_a_document_cut_at_the_limit_keeps_its_places_and_words_consistent() -> None:
    """Every reader's result goes through the cut (core.ingest.registry.parse_file):
    blocks, pages and OCR words past it go with the text."""
    text = "First page words here.\n\nSecond page, more words.\n\nThird page is long."
    second = text.index("Second")
    third = text.index("Third")
    doc = ParsedDocument(
        text=text,
        title="Scan",
        blocks=(
            Block(BlockKind.PARAGRAPH, 0, second - 2, (), 1),
            Block(BlockKind.PARAGRAPH, second, third - 2, (), 2),
            Block(BlockKind.PARAGRAPH, third, len(text), (), 3),
        ),
        pages=(PageSpan(1, 0, second), PageSpan(2, second, third), PageSpan(3, third, len(text))),
        notice="2 pages could not be read",
        words=(
            WordBox(2, second, second + 6, 0, 0, 1, 1),
            WordBox(3, third, third + 5, 0, 0, 1, 1),
        ),
    )
    assert cap_document(doc, len(text)) is doc
    cut = cap_document(doc, third + 8)
    assert cut.text == text[: third - 2]
    assert [cut.text[b.start : b.end] for b in cut.blocks] == [
        "First page words here.",
        "Second page, more words.",
    ]
    assert cut.pages == (PageSpan(1, 0, second), PageSpan(2, second, third - 2))
    assert [w.page for w in cut.words] == [2]
    assert cut.notice == "2 pages could not be read; " + TEXT_NOTICE
