"""What a saved answer keeps of a document that left the library, and how it gets it back.

A saved turn holds copies of what it showed: each source's passage, each citation's quoted
spans and the sentence that cites it, the answer itself and its notes. When a file leaves
the library (its folder removed, or the file deleted from disk), :func:`blank_turn` takes
out of the turn every copy of its text:

- the source's passage and the citations' quotes are blanked; a keyed hash of each is
  kept, to recognise the same passage when it comes back;
- the answer's sentences that cite the source, or quote it (``QUOTE_MIN_WORDS`` words in
  a row) without citing it, give way to :data:`REMOVED_SENTENCE`, and so do the notes
  that quote those sentences. They are not kept in the clear: each is *sealed*, encrypted
  with a key derived from the passage it drew on, so neither the database, the backup nor
  conversation search can read it while the passage is gone, and only someone holding
  that passage (the file itself) could open it.

When the file comes back (indexed again at the same path), :func:`restore_turn` reads each
blanked passage from the re-indexed document at the same offsets; where its hash matches,
the passage is back, and it opens the seals it keyed: the old answer reads as it did. A
file that came back changed keeps whatever no longer matches blanked.

Pure functions over the stored JSON (see core/store/conversations.py); the desktop blanks
an answer on screen with :func:`blank_answer`, the same rule without the seals.
"""

from __future__ import annotations

import base64
import copy
import hashlib
import hmac
import os
import re
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from core.citation_marks import answer_sentences, parse_citations

# Stands in the answer for a sentence that drew on a removed document. It ends a sentence
# of its own, so a later removal never takes it for part of its neighbour.
REMOVED_SENTENCE = "(Removed with its source document.)"
# Notes about an answer sentence quote it; such a note goes with the sentence.
REMOVED_NOTE = "A note about a sentence removed with its source document."
# An answer sentence quotes a source it does not cite when it shares a run of this many
# words with it, so a short common phrase ("in the policy of the") does not count.
QUOTE_MIN_WORDS = 6
_BULLET = re.compile(r"\s*(?:[-*•·▪‣]|\d{1,3}[.)]|#+)\s+")
_SPACES = re.compile(r"\s+")
_WORD = re.compile(r"\w+")
_CHECK = b"lectern-passage"
_KEY = b"lectern-seal-key"


def passage_check(text: str) -> str:
    """A passage's fingerprint: whether a text read later is the same passage."""
    return hashlib.blake2b(text.encode("utf-8"), digest_size=16, person=_CHECK).hexdigest()


def _key(passage: str) -> bytes:
    return hashlib.blake2b(passage.encode("utf-8"), digest_size=32, person=_KEY).digest()


def _seal(plain: str, passage: str) -> dict[str, str]:
    """``plain`` encrypted under the key ``passage`` gives: a SHAKE-256 key stream (fresh
    nonce per seal) XORed in, and a BLAKE2b MAC that tells a wrong key from a right one."""
    key, nonce = _key(passage), os.urandom(16)
    data = plain.encode("utf-8")
    stream = hashlib.shake_256(key + nonce).digest(len(data))
    sealed = bytes(a ^ b for a, b in zip(data, stream, strict=True))
    tag = hashlib.blake2b(nonce + sealed, key=key, digest_size=16).hexdigest()
    return {"nonce": nonce.hex(), "data": base64.b64encode(sealed).decode("ascii"), "tag": tag}


def _unseal(seal: Mapping[str, Any], passage: str) -> str | None:
    """The sealed text, or None when ``passage`` is not the one it was sealed with."""
    try:
        key, nonce = _key(passage), bytes.fromhex(str(seal["nonce"]))
        sealed = base64.b64decode(str(seal["data"]))
        tag = hashlib.blake2b(nonce + sealed, key=key, digest_size=16).hexdigest()
        if not hmac.compare_digest(tag, str(seal["tag"])):
            return None
        stream = hashlib.shake_256(key + nonce).digest(len(sealed))
        return bytes(a ^ b for a, b in zip(sealed, stream, strict=True)).decode("utf-8")
    except (KeyError, ValueError, TypeError):
        return None


def _flat(text: str) -> str:
    return _SPACES.sub(" ", text).strip().casefold()


def _runs(text: str) -> set[tuple[str, ...]]:
    """Every run of QUOTE_MIN_WORDS consecutive words of ``text``, ignoring case."""
    words = _WORD.findall(text.casefold())
    return {tuple(words[i : i + QUOTE_MIN_WORDS]) for i in range(len(words) - QUOTE_MIN_WORDS + 1)}


def _short(text: str, limit: int = 120) -> str:
    # As core.generation.citations quotes a sentence in a note.
    text = _SPACES.sub(" ", text).strip()
    return text if len(text) <= limit else text[: limit - 1] + "…"


@dataclass(frozen=True)
class _Region:
    start: int
    end: int
    n: int  # the removed source it drew on
    claim: str


def _regions(answer: str, passages: Mapping[int, str]) -> list[_Region]:
    """The stretches of ``answer`` to take out: each sentence citing one of ``passages``
    (source number -> passage text) or quoting one (QUOTE_MIN_WORDS words in a row), with
    the citation markers written after it; a list bullet stays."""
    runs = {n: _runs(text) for n, text in passages.items()}
    found: list[_Region] = []
    for sentence in answer_sentences(answer):
        if _flat(REMOVED_SENTENCE) in (_flat(sentence.text), _flat(sentence.claim)):
            continue  # blanked by an earlier removal
        cited = [n for n in sentence.numbers if n in passages]
        if not cited:
            quoted = _runs(sentence.claim)
            cited = [n for n, passage in runs.items() if quoted & passage]
        if not cited:
            continue
        start, end = sentence.start, sentence.end
        bullet = _BULLET.match(answer, start, end)
        if bullet:
            start = bullet.end()
        # Markers after the full stop ("... headsets. [1]") belong to the sentence.
        for ref in parse_citations(answer):
            if ref.start >= end and not answer[end : ref.start].strip():
                end = ref.end
        if start < end:
            found.append(_Region(start, end, cited[0], sentence.claim))
    return found


def _shifted(position: int, edits: Sequence[tuple[int, int, int]]) -> int:
    """Where ``position`` (outside every edit) lands once ``edits`` (start, end, length of
    the replacement) are made."""
    return position + sum(length - (end - start) for start, end, length in edits if end <= position)


def _replace(text: str, edits: Sequence[tuple[int, int, str]]) -> str:
    out, pos = [], 0
    for start, end, replacement in sorted(edits):
        out += [text[pos:start], replacement]
        pos = end
    out.append(text[pos:])
    return "".join(out)


def blank_answer(answer: str, passages: Mapping[int, str]) -> str:
    """``answer`` without the sentences that cite or quote ``passages`` (source number ->
    the removed passage's text); what the desktop shows of an answer open on screen."""
    regions = _regions(answer, passages)
    return _replace(answer, [(r.start, r.end, REMOVED_SENTENCE) for r in regions])


def _copies(
    *parts: Sequence[Mapping[str, Any]],
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]]]:
    """Deep copies of a turn's sources, citations and notes: the caller's stay as they were."""
    sources, citations, warnings = (copy.deepcopy([dict(item) for item in part]) for part in parts)
    return sources, citations, warnings


@dataclass(frozen=True)
class BlankedTurn:
    answer: str
    sources: list[dict[str, Any]]
    citations: list[dict[str, Any]]
    warnings: list[dict[str, Any]]
    changed: bool


def blank_turn(
    answer: str,
    stored_sources: Sequence[Mapping[str, Any]],
    stored_citations: Sequence[Mapping[str, Any]],
    stored_warnings: Sequence[Mapping[str, Any]],
    gone: Collection[str],
) -> BlankedTurn:
    """The turn with every copy of the documents at ``gone`` (paths) blanked, and the
    answer sentences and notes drawing on them sealed (see the module docstring)."""
    sources, citations, warnings = _copies(stored_sources, stored_citations, stored_warnings)
    passages = {
        int(s.get("n") or 0): str(s.get("text") or "")
        for s in sources
        if s.get("document") in gone and not s.get("removed") and s.get("text")
    }
    changed = False
    by_n = {int(s.get("n") or 0): s for s in sources}
    regions = _regions(answer, passages)
    if regions:
        # Seals already in the answer (an earlier removal) move with the text around them.
        edits = [(r.start, r.end, len(REMOVED_SENTENCE)) for r in regions]
        for source in sources:
            for seal in source.get("sealed") or []:
                seal["at"] = _shifted(int(seal["at"]), edits)
        blanked = _replace(answer, [(r.start, r.end, REMOVED_SENTENCE) for r in regions])
        for region in regions:
            at = _shifted(region.start, edits)
            seal = {**_seal(answer[region.start : region.end], passages[region.n]), "at": at}
            by_n[region.n].setdefault("sealed", []).append(seal)
        # A note quoting a blanked sentence goes with it.
        for warning in warnings:
            message = str(warning.get("message") or "")
            quoted = next((r for r in regions if _short(r.claim) in message), None)
            if quoted is not None and "sealed" not in warning:
                warning["sealed"] = {**_seal(message, passages[quoted.n]), "n": quoted.n}
                warning["message"] = REMOVED_NOTE
        answer, changed = blanked, True
    for n, passage in passages.items():
        source = by_n[n]
        source["check"] = passage_check(passage)
        source["text"] = ""
        source["removed"] = True
        changed = True
    for citation in citations:
        if citation.get("document") not in gone or citation.get("removed"):
            continue
        if not (citation.get("quote") or citation.get("spans") or citation.get("sentence")):
            continue
        n = int(citation.get("n") or 0)
        citation["spans"] = [
            {**span, "text": "", "check": passage_check(str(span.get("text") or ""))}
            for span in citation.get("spans") or []
        ]
        sentence = str(citation.get("sentence") or "")
        if sentence and n in passages:
            citation["sealed_sentence"] = _seal(sentence, passages[n])
        citation["quote"] = ""
        citation["sentence"] = ""
        citation["removed"] = True
        changed = True
    return BlankedTurn(answer, sources, citations, warnings, changed)


def blank_older(
    answer: str,
    stored_sources: Sequence[Mapping[str, Any]],
    stored_citations: Sequence[Mapping[str, Any]],
    stored_warnings: Sequence[Mapping[str, Any]],
) -> BlankedTurn:
    """A turn blanked before answers were: its removed sources lost their passages but
    the answer kept the sentences citing them. Those go now, for good (there is no
    passage left to seal them with), and the notes quoting them; done once per source."""
    sources, citations, warnings = _copies(stored_sources, stored_citations, stored_warnings)
    older = {
        int(s.get("n") or 0)
        for s in sources
        if s.get("removed") and "check" not in s and not s.get("text")
    }
    if not older:
        return BlankedTurn(answer, sources, citations, warnings, False)
    regions = _regions(answer, dict.fromkeys(older, ""))
    for warning in warnings:
        if any(_short(r.claim) in str(warning.get("message") or "") for r in regions):
            warning["message"] = REMOVED_NOTE
    for citation in citations:
        if citation.get("removed") and int(citation.get("n") or 0) in older:
            citation["sentence"] = ""
    edits = [(r.start, r.end, len(REMOVED_SENTENCE)) for r in regions]
    for source in sources:
        if int(source.get("n") or 0) in older:
            source["check"] = ""  # nothing to match a file that comes back against
        for seal in source.get("sealed") or []:
            seal["at"] = _shifted(int(seal["at"]), edits)
    answer = _replace(answer, [(r.start, r.end, REMOVED_SENTENCE) for r in regions])
    return BlankedTurn(answer, sources, citations, warnings, True)


# (document path, start, end) -> the re-indexed document's text there, or None when the
# path is not in the library (indexed) now.
PassageReader = Callable[[str, int, int], "str | None"]


def restore_turn(
    answer: str,
    stored_sources: Sequence[Mapping[str, Any]],
    stored_citations: Sequence[Mapping[str, Any]],
    stored_warnings: Sequence[Mapping[str, Any]],
    read: PassageReader,
    document_ids: Mapping[str, int],
) -> BlankedTurn:
    """The turn with the passages of documents that are back (``read`` finds the same
    passage at the same place) given back, and the seals they keyed opened.
    ``document_ids``: path -> the re-indexed document's id, for the evidence panel."""
    sources, citations, warnings = _copies(stored_sources, stored_citations, stored_warnings)
    back: dict[int, str] = {}
    for source in sources:
        if not source.get("removed") or not source.get("check"):
            continue
        path = str(source.get("document") or "")
        text = read(path, int(source.get("start") or 0), int(source.get("end") or 0))
        if text is None or passage_check(text) != source["check"]:
            continue
        back[int(source.get("n") or 0)] = text
        source["text"] = text
        if path in document_ids:
            source["document_id"] = document_ids[path]
        for key in ("removed", "check"):
            source.pop(key, None)
    if not back:
        return BlankedTurn(answer, sources, citations, warnings, False)

    # The answer's sentences, last first, so each one's place is still where it was sealed.
    opened: list[tuple[int, str]] = []
    for source in sources:
        n = int(source.get("n") or 0)
        kept = []
        for seal in source.get("sealed") or []:
            at = int(seal["at"])
            plain = _unseal(seal, back[n]) if n in back else None
            if plain is None or answer[at : at + len(REMOVED_SENTENCE)] != REMOVED_SENTENCE:
                kept.append(seal)
            else:
                opened.append((at, plain))
        if kept:
            source["sealed"] = kept
        else:
            source.pop("sealed", None)
    edits = [(at, at + len(REMOVED_SENTENCE), len(plain)) for at, plain in opened]
    for source in sources:
        for seal in source.get("sealed") or []:
            seal["at"] = _shifted(int(seal["at"]), edits)
    answer = _replace(answer, [(at, at + len(REMOVED_SENTENCE), plain) for at, plain in opened])

    for citation in citations:
        n = int(citation.get("n") or 0)
        if not citation.get("removed") or n not in back:
            continue
        path = str(citation.get("document") or "")
        spans = []
        for span in citation.get("spans") or []:
            text = read(path, int(span.get("start") or 0), int(span.get("end") or 0))
            if text is None or passage_check(text) != span.get("check"):
                break
            spans.append({k: v for k, v in {**span, "text": text}.items() if k != "check"})
        else:
            sealed = citation.get("sealed_sentence")
            sentence = _unseal(sealed, back[n]) if isinstance(sealed, Mapping) else ""
            if sentence is None:
                continue
            citation["spans"] = spans
            citation["quote"] = " ".join(s["text"] for s in spans)
            citation["sentence"] = sentence
            for key in ("removed", "sealed_sentence"):
                citation.pop(key, None)
    for warning in warnings:
        sealed = warning.get("sealed")
        if not isinstance(sealed, Mapping) or int(sealed.get("n") or 0) not in back:
            continue
        message = _unseal(sealed, back[int(sealed["n"])])
        if message is not None:
            warning["message"] = message
            warning.pop("sealed", None)
    return BlankedTurn(answer, sources, citations, warnings, True)


# --- what is shown of an answer while a document it drew on is gone ----------------------

_BARE_LINE = re.compile(r"\s*(?:[-*•·▪‣]|\d{1,3}[.)]|#+)?\s*")


def shown_answer(
    answer: str, removed_files: Sequence[str], *, returns: bool = True
) -> tuple[str, str]:
    """What a front end shows of an answer some of whose sentences left with their
    document: the answer without the stand-ins (:data:`REMOVED_SENTENCE`), and one line
    in their place naming ``removed_files`` ("" when nothing is missing). Said once per
    answer, not once per sentence: a row of stand-ins read as an answer wiped. The
    stored answer keeps its stand-ins, where :func:`restore_turn` puts the text back.
    ``returns``: whether the text comes back with the file (not for an answer blanked
    by an older Lectern, which kept no seal)."""
    if REMOVED_SENTENCE not in answer:
        return answer, ""
    lines = []
    for line in answer.split("\n"):
        if REMOVED_SENTENCE not in line:
            lines.append(line)
            continue
        indent = line[: len(line) - len(line.lstrip())]
        kept = indent + " ".join(line.replace(REMOVED_SENTENCE, " ").split())
        if not _BARE_LINE.fullmatch(kept):  # a bullet left with nothing after it goes
            lines.append(kept)
    text = re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip("\n")
    names = list(dict.fromkeys(n for n in removed_files if n))
    if not names:
        files, was, they = "its source file", "was", "the file does"
    elif len(names) == 1:
        files, was, they = f"its source file {names[0]}", "was", "the file does"
    else:
        listed = ", ".join(names[:-1]) + f" and {names[-1]}"
        files, was, they = f"its source files {listed}", "were", "the files do"
    line = f"Part of this answer is missing: {files} {was} deleted or removed from the library"
    line += f"; its text returns if {they}." if returns else "."
    return text, line


def removed_files(sources: Sequence[Mapping[str, Any]]) -> tuple[list[str], bool]:
    """The file names of a stored turn's removed sources that its missing sentences drew
    on (those holding their seals; every removed one for an older turn), and whether the
    sentences come back with them."""
    removed = [s for s in sources if s.get("removed")]
    drawn = [s for s in removed if s.get("sealed")] or removed
    names = [os.path.basename(str(s.get("document") or "")) for s in drawn]
    return names, any(s.get("check") for s in drawn)
