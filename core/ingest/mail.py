"""E-mail: single messages (.eml) and mailboxes (.mbox), with the standard library.

A message's subject is its title; sender and date go into the heading path, so every
chunk of the message is embedded and searched with them (the chunker puts the heading
path in each chunk's context). Attachments of a type Lectern reads are parsed with that
type's parser and returned as documents of their own (``ParsedDocument.attachments``),
which the indexer stores under the mail file's path ("mail.eml/minutes.docx").

A mailbox is read message by message from a stream: one message that cannot be read
is counted and skipped, never the whole file, and the file's memory use does not grow
with the mailbox. Each message's number in the mailbox is its place ("message 12").
"""

from __future__ import annotations

import email
import email.policy
import os
import tempfile
from collections.abc import Iterator
from dataclasses import replace
from email.message import EmailMessage, Message
from email.utils import parsedate_to_datetime
from pathlib import Path

from core.errors import DamagedFileError, NoTextError, ParseError, ParseLimitError
from core.ingest.bounds import Composer, limit_notice
from core.ingest.text import clean_inline, decode_text, normalize, paragraph_blocks, read_bytes
from core.records import BlockKind, ParsedDocument

MAX_MESSAGE_BYTES = 64 * 1024 * 1024
MAX_MESSAGES = 50_000
MAX_ATTACHMENT_BYTES = 32 * 1024 * 1024  # one attachment parsed
MAX_ATTACHMENTS_BYTES = 128 * 1024 * 1024  # all attachments of one file, together
MAX_ATTACHED_DOCUMENTS = 1_000
_MAIL_TYPES = frozenset({"eml", "mbox"})  # a message attached to a message is not opened
_NO_SUBJECT = "(no subject)"


def _header(message: Message, name: str) -> str:
    try:
        value = message.get(name)
    except Exception:  # a malformed header: the rest of the message still reads
        return ""
    return clean_inline(str(value)) if value is not None else ""


def _date(message: Message) -> str:
    raw = _header(message, "Date")
    if not raw:
        return ""
    try:
        moment = parsedate_to_datetime(raw)
    except (TypeError, ValueError, IndexError):
        return raw
    return moment.strftime("%Y-%m-%d %H:%M")


def _part_text(part: Message) -> str:
    try:
        content = part.get_content()  # type: ignore[attr-defined]
        if isinstance(content, str):
            return content
    except (LookupError, UnicodeError, ValueError, AssertionError, KeyError):
        pass
    payload = part.get_payload(decode=True)
    return decode_text(payload) if isinstance(payload, bytes) and payload else ""


def _body(message: EmailMessage) -> tuple[str, bool]:
    """The message's text and whether it is HTML."""
    try:
        body = message.get_body(preferencelist=("plain", "html"))
    except (KeyError, ValueError, AttributeError):
        body = None
    if body is None:
        return "", False
    return _part_text(body), body.get_content_subtype() == "html"


class _Attachments:
    """Parses supported attachments in a private temporary folder, within a byte budget."""

    def __init__(self) -> None:
        self._folder: tempfile.TemporaryDirectory[str] | None = None
        self.bytes_left = MAX_ATTACHMENTS_BYTES
        self.skipped: list[str] = []
        self.documents: list[tuple[str, ParsedDocument]] = []
        self._names: set[str] = set()

    def add(self, name: str, document: ParsedDocument) -> None:
        """Keep a parsed attachment, under a name unique within the file."""
        stem, dot, suffix = name.rpartition(".")
        unique, n = name, 1
        while unique in self._names:
            n += 1
            unique = f"{stem} ({n}).{suffix}" if dot else f"{name} ({n})"
        self._names.add(unique)
        self.documents.append((unique, document))

    def parse(self, name: str, data: bytes) -> ParsedDocument | None:
        from core.ingest.registry import detect_type, parse_file

        safe = os.path.basename(name.replace("\\", "/")).strip() or "attachment"
        kind = detect_type(Path(safe))
        if kind is None or kind in _MAIL_TYPES:
            return None
        if len(self.documents) >= MAX_ATTACHED_DOCUMENTS:
            self.skipped.append(f"{safe} (over {MAX_ATTACHED_DOCUMENTS:,} attachments)")
            return None
        if len(data) > min(MAX_ATTACHMENT_BYTES, self.bytes_left):
            self.skipped.append(f"{safe} (too large)")
            return None
        self.bytes_left -= len(data)
        if self._folder is None:
            self._folder = tempfile.TemporaryDirectory(prefix="lectern-mail-")
        target = Path(self._folder.name) / safe
        target.write_bytes(data)
        try:
            return parse_file(target)
        except ParseError as exc:
            self.skipped.append(f"{safe} ({exc.reason})")
            return None
        finally:
            target.unlink(missing_ok=True)

    def close(self) -> None:
        if self._folder is not None:
            self._folder.cleanup()


def _add_message(
    composer: Composer,
    message: EmailMessage,
    location: int | None,
    attachments: _Attachments,
) -> str:
    """Add one message as a section; returns its subject."""
    subject = _header(message, "Subject") or _NO_SUBJECT
    sender, date, to = _header(message, "From"), _date(message), _header(message, "To")
    byline = " · ".join(p for p in (f"From {sender}" if sender else "", date) if p)
    path = (subject, byline) if byline else (subject,)
    composer.add(BlockKind.HEADING, subject, path, location)
    lines = [
        f"From: {sender}" if sender else "",
        f"To: {to}" if to else "",
        f"Date: {date}" if date else "",
    ]
    composer.add(BlockKind.PARAGRAPH, "\n".join(line for line in lines if line), path, location)
    text, is_html = _body(message)
    if text.strip():
        if is_html:
            from core.ingest.html import parse_html

            try:
                composer.add_document(parse_html(text, subject), path, location)
            except NoTextError:
                pass
        else:
            text = normalize(text)
            for block in paragraph_blocks(text):
                composer.add(block.kind, text[block.start : block.end], path, location)
    named = [(part, part.get_filename() or "") for part in message.iter_attachments()]
    named = [(part, name) for part, name in named if name]
    if named:
        listing = ", ".join(clean_inline(name) for _, name in named)
        composer.add(BlockKind.PARAGRAPH, f"Attachments: {listing}", path, location)
    for part, name in named:
        payload = part.get_payload(decode=True)
        if not isinstance(payload, bytes) or not payload:
            continue
        parsed = attachments.parse(name, payload)
        if parsed is None:
            continue
        # Its own document, under the message's subject, sender and date: every chunk of
        # it is embedded and found together with the mail it came with.
        blocks = tuple(replace(b, heading_path=(*path, *b.heading_path)) for b in parsed.blocks)
        folder = f"message {location}/" if location is not None else ""
        attachments.add(folder + clean_inline(name), replace(parsed, blocks=blocks))
    return subject


def _message(data: bytes) -> EmailMessage:
    message = email.message_from_bytes(data, policy=email.policy.default)
    assert isinstance(message, EmailMessage)
    return message


def parse_eml(path: Path) -> ParsedDocument:
    if path.stat().st_size > MAX_MESSAGE_BYTES:
        raise ParseLimitError(f"a message larger than {MAX_MESSAGE_BYTES // (1024 * 1024)} MB")
    data = read_bytes(path)
    message = _message(data)
    if not message.keys():
        raise DamagedFileError("not an e-mail message (no headers; wrong extension?)")
    composer = Composer()
    attachments = _Attachments()
    try:
        subject = _add_message(composer, message, None, attachments)
    finally:
        attachments.close()
    notice = ""
    if attachments.skipped:
        notice = "attachments not read: " + "; ".join(attachments.skipped[:5])
    if composer.full:
        notice = limit_notice()
    title = subject if subject != _NO_SUBJECT else path.stem
    document = composer.build(title, notice=notice, empty="an empty message")
    return replace(document, attachments=tuple(attachments.documents))


def _split_mbox(path: Path) -> Iterator[bytes]:
    """The raw messages of a mailbox, streamed. A message starts at a line beginning
    with "From " at the top of the file or after a blank line (mboxo/mboxrd); quoted
    ">From " lines in bodies are unquoted."""
    current: list[bytes] = []
    size = 0
    previous_blank = True
    oversized = False
    with path.open("rb") as handle:
        for line in handle:
            if line.startswith(b"From ") and previous_blank:
                if current or oversized:
                    yield b"" if oversized else b"".join(current)
                current, size, oversized = [], 0, False
                previous_blank = False
                continue
            previous_blank = line in (b"\n", b"\r\n")
            if oversized:
                continue
            if line.startswith(b">") and line.lstrip(b">").startswith(b"From "):
                line = line[1:]
            size += len(line)
            if size > MAX_MESSAGE_BYTES:
                oversized, current = True, []
                continue
            current.append(line)
    if current or oversized:
        yield b"" if oversized else b"".join(current)


def parse_mbox(path: Path) -> ParsedDocument:
    with path.open("rb") as handle:
        head = handle.read(5)
    if head != b"From ":
        raise DamagedFileError('not a mailbox: it does not start with a "From " line')
    composer = Composer()
    attachments = _Attachments()
    count = bad = 0
    first_bad = ""
    cut = False
    try:
        for number, raw in enumerate(_split_mbox(path), start=1):
            if number > MAX_MESSAGES:
                cut = True
                break
            count = number
            mark = composer.mark()
            try:
                if not raw:
                    raise ParseLimitError("larger than 64 MB")
                message = _message(raw)
                if not message.keys():
                    raise DamagedFileError("no headers")
                _add_message(composer, message, number, attachments)
            except MemoryError:
                raise
            except Exception as exc:  # one bad message costs that message only
                composer.rollback(mark)
                bad += 1
                if not first_bad:
                    why = exc.reason if isinstance(exc, ParseError) else type(exc).__name__
                    first_bad = f"message {number}: {why}"
            if composer.full:
                cut = True
                break
    finally:
        attachments.close()
    notes = []
    if bad:
        notes.append(f"{bad:,} of {count:,} messages could not be read ({first_bad})")
    if cut:
        notes.append(
            limit_notice(f"{count:,} messages")
            if composer.full
            else limit_notice(f"{MAX_MESSAGES:,} messages")
        )
    if attachments.skipped:
        notes.append(f"{len(attachments.skipped):,} attachments not read")
    document = composer.build(
        path.stem, page_count=count, notice="; ".join(notes), empty="no readable messages"
    )
    return replace(document, attachments=tuple(attachments.documents))
