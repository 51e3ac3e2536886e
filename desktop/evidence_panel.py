"""The evidence panel: the cited passage in its document, with the supporting sentence lit.

PDFs are shown as the rendered page (QtPdf): the span's text is located in the page's own
text layer and its character range turned into rectangles with
``QPdfDocument.getSelectionAtIndex``; page rendering and text lookup run in the background,
on a private ``QPdfDocument``, so a large page never stalls the window. A scanned page has
no text layer: there the rectangles are the boxes OCR stored for the span's words, drawn
the same way. Other formats show the surrounding extracted text with the span highlighted.
"""

from __future__ import annotations

import os
import shutil
import sys
from bisect import bisect_left
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from core.app import ops
from core.errors import LecternError
from core.private import session_umask
from core.records import WordBox
from core.store.export import plain_quote
from desktop.backend import Backend
from desktop.library_view import LibrarySnapshot
from desktop.locate import _folded as folded
from desktop.locate import excerpt_bounds, locate, locate_all
from desktop.qt import (
    QColor,
    QDesktopServices,
    QFrame,
    QGuiApplication,
    QHBoxLayout,
    QImage,
    QLabel,
    QPainter,
    QPaintEvent,
    QPen,
    QProcess,
    QPushButton,
    QRectF,
    QResizeEvent,
    QScrollArea,
    QSize,
    QSizeF,
    QSizePolicy,
    QStackedWidget,
    Qt,
    QTextBrowser,
    QTextCharFormat,
    QTextCursor,
    QTextDocument,
    QTextEdit,
    QTimer,
    QToolButton,
    QUrl,
    QVBoxLayout,
    QWidget,
    Signal,
    named,
)
from desktop.rich import highlight_terms_html, term_ranges
from desktop.theme import Palette, Theme, icon
from desktop.viewmodels import EvidenceRequest
from desktop.widgets import WrapLabel
from desktop.workers import describe_error

if TYPE_CHECKING:
    from desktop.qt_pdf import QPdfDocument

OPEN_LABEL = "Open original"
COMPACT_WIDTH = 420  # narrower than this, "Open original" shows its icon only
RENDER_WIDTH = 1800  # pixels; painted scaled, so zooming never waits for a re-render
MAX_AUTO_ZOOM = 2.6
QUOTE_CHARS = 260


@dataclass
class PdfEvidence:
    image: QImage
    page: int  # 1-based
    page_count: int
    page_size: QSizeF  # points
    rects: list[QRectF] = field(default_factory=list)  # points, origin top-left
    found: bool = False
    ocr: bool = False  # the page's text was read by OCR
    # The whole lines of text the lit rectangles sit on (points): what the reading zoom
    # fits to the panel, so a sentence that starts mid-line is not cut at the side.
    lines: list[QRectF] = field(default_factory=list)


@dataclass
class TextEvidence:
    text: str
    ranges: list[tuple[int, int]]  # highlight ranges inside ``text``
    clipped_start: bool
    clipped_end: bool


def render_pdf_evidence(
    path: str,
    page: int | None,
    needles: list[str],
    width: int = RENDER_WIDTH,
    words: Sequence[WordBox] = (),
    terms: Sequence[str] = (),
    page_words: Sequence[WordBox] = (),
) -> PdfEvidence:
    """Render the page holding ``needles`` (tried on ``page`` first, then its neighbours).

    ``words``: the OCR boxes of the cited characters, for pages read by OCR, and
    ``page_words`` all the OCR boxes of their pages (the lines they sit on). ``terms``
    (a search hit's words, ``rich.term_key`` keys): light only those words inside the
    needles, not the needles whole."""
    from desktop.qt_pdf import QPdfDocument

    doc = QPdfDocument()
    try:
        error = doc.load(path)
        if error != QPdfDocument.Error.None_ or doc.pageCount() == 0:
            raise LecternError(
                f"The PDF could not be displayed ({_pdf_error(error)}).",
                "Use “Open original” to view it in your PDF reader.",
            )
        count = doc.pageCount()
        first = min(max((page or 1) - 1, 0), count - 1)
        order = [first] + [p for p in (first + 1, first - 1, first + 2) if 0 <= p < count]
        chosen, rects = first, []
        ocr_pages = {w.page for w in words}
        for index in order:
            found = word_rects(words, index + 1, merge=not terms) or (
                _find_term_rects(doc, index, needles, terms)
                if terms
                else _find_rects(doc, index, needles)
            )
            if found:
                chosen, rects = index, found
                break
        evidence = _render(doc, chosen, width, rects, count)
        evidence.ocr = chosen + 1 in ocr_pages
        if evidence.ocr:
            # Word by word: OCR lines merged run across the gutter between columns.
            segments = word_rects([*page_words, *words], chosen + 1, merge=False)
        else:
            segments = [p.boundingRect() for p in doc.getAllText(chosen).bounds()]
        evidence.lines = whole_lines(rects, segments)
        return evidence
    finally:
        doc.close()


def word_rects(words: Sequence[WordBox], page: int, merge: bool = True) -> list[QRectF]:
    """One rectangle per line of the OCR words on ``page`` (points, origin top-left), as
    a text selection on a digital page gives one per line; one per word without ``merge``
    (searched words apart on a line must not light the words between them)."""
    rects: list[QRectF] = []
    for word in words:
        if word.page != page:
            continue
        box = QRectF(word.x0, word.y0, word.x1 - word.x0, word.y1 - word.y0)
        if rects and merge:
            last = rects[-1]
            overlap = min(last.bottom(), box.bottom()) - max(last.top(), box.top())
            # The next word of the same line: beside the last one, sharing most of its height.
            if box.left() >= last.left() and overlap >= 0.5 * min(last.height(), box.height()):
                rects[-1] = last.united(box)
                continue
        rects.append(box)
    return rects


def whole_lines(rects: Sequence[QRectF], segments: Sequence[QRectF]) -> list[QRectF]:
    """Each of ``rects`` widened to the whole line of text it sits on.

    ``segments``: the page's text as rectangles (runs of a line, or OCR lines). A line is
    the segments beside a rectangle (sharing most of its height) joined while the gap
    between them stays under a line's height: a word gap, not the gutter between
    columns, so in three columns a line is a line of its own column."""
    lines: list[QRectF] = []
    for rect in rects:
        line = QRectF(rect)
        beside = [
            s
            for s in segments
            if min(s.bottom(), rect.bottom()) - max(s.top(), rect.top())
            >= 0.5 * min(s.height(), rect.height())
        ]
        grew = True
        while grew:
            grew = False
            gap = max(line.height(), 1.0)
            for segment in beside:
                if line.contains(segment):
                    continue
                if segment.left() <= line.right() + gap and segment.right() >= line.left() - gap:
                    line = line.united(segment)
                    grew = True
        if not any(line == known for known in lines):
            lines.append(line)
    return lines


def render_pdf_page(path: str, page: int, width: int = RENDER_WIDTH) -> PdfEvidence:
    from desktop.qt_pdf import QPdfDocument

    doc = QPdfDocument()
    try:
        error = doc.load(path)
        if error != QPdfDocument.Error.None_:
            raise LecternError(f"The PDF could not be displayed ({_pdf_error(error)}).")
        count = doc.pageCount()
        return _render(doc, min(max(page - 1, 0), count - 1), width, [], count)
    finally:
        doc.close()


def _pdf_error(error: object) -> str:
    name = getattr(error, "name", str(error))
    return {
        "FileNotFound": "the file is no longer there",
        "IncorrectPassword": "it is password-protected",
        "InvalidFileFormat": "the file is damaged",
        "UnsupportedSecurityScheme": "its protection is not supported",
    }.get(name, name)


def _find_rects(doc: QPdfDocument, index: int, needles: list[str]) -> list[QRectF]:
    page_text = doc.getAllText(index)
    text = page_text.text()
    # QtPdf leaves out characters it cannot map (glyphs of figure fonts without a Unicode
    # table) from the text but not from the character indices that selections take: past
    # the first such glyph, a position in the text is not a character index any more.
    dropped = max(0, page_text.endIndex() - page_text.startIndex() - len(text))
    rects: list[QRectF] = []
    for needle in needles:
        best: list[QRectF] = []
        best_height = -1.0
        for start, end in locate_all(needle, text):
            first = _char_index(doc, index, text, start, dropped)
            last = _char_index(doc, index, text, end - 1, dropped, lowest=first)
            selection = doc.getSelectionAtIndex(index, first, last + 1 - first)
            found = [polygon.boundingRect() for polygon in selection.bounds()]
            if not found:
                continue
            # A page can hold a sentence twice (figures embed caption text in tiny type):
            # the visible copy is set in the larger type.
            height = sum(r.height() for r in found) / len(found)
            if height > best_height:
                best, best_height = found, height
        rects.extend(best)
    return rects


def _find_term_rects(
    doc: QPdfDocument, index: int, needles: list[str], terms: Sequence[str]
) -> list[QRectF]:
    """The boxes of the words matching ``terms`` inside the needles' text on the page.

    Words outside the passage are left dark even where they match: the passage is what
    was found, and a page can repeat a word in every line of a table."""
    page_text = doc.getAllText(index)
    text = page_text.text()
    dropped = max(0, page_text.endIndex() - page_text.startIndex() - len(text))
    rects: list[QRectF] = []
    for needle in needles:
        region = locate(needle, text)
        if region is None:
            continue
        for start, end in term_ranges(text, terms, *region):
            first = _char_index(doc, index, text, start, dropped)
            last = _char_index(doc, index, text, end - 1, dropped, lowest=first)
            selection = doc.getSelectionAtIndex(index, first, last + 1 - first)
            rects.extend(polygon.boundingRect() for polygon in selection.bounds())
    return rects


def _char_index(
    doc: QPdfDocument, page: int, text: str, pos: int, dropped: int, lowest: int = 0
) -> int:
    """The character index of ``text[pos]``, between ``pos`` and ``pos + dropped``.

    The number of text characters before index ``j`` (the length of the selection
    ``[0, j)``) grows with ``j``, so a binary search needs about ten selections."""
    if dropped == 0:
        return pos
    lo, hi = max(pos, lowest), pos + dropped
    while lo < hi:
        mid = (lo + hi) // 2
        kept = len(doc.getSelectionAtIndex(page, 0, mid + 1).text())
        if kept >= pos + 1:
            hi = mid
        else:
            lo = mid + 1
    return lo


def _render(
    doc: QPdfDocument, index: int, width: int, rects: list[QRectF], count: int
) -> PdfEvidence:
    size_pt: QSizeF = doc.pagePointSize(index)
    if size_pt.width() <= 0:
        size_pt = QSizeF(612, 792)
    # Oversized sheets (posters, drawings) are capped by height too.
    scale = min(width / size_pt.width(), 2.2 * width / max(size_pt.height(), 1))
    pixels = QSize(max(1, int(size_pt.width() * scale)), max(1, int(size_pt.height() * scale)))
    image = doc.render(index, pixels)
    return PdfEvidence(image, index + 1, count, size_pt, rects, bool(rects))


def load_text_evidence(
    text: str, ranges: list[tuple[int, int]], terms: Sequence[str] = ()
) -> TextEvidence:
    """The text around ``ranges``, with them lit; with ``terms``, only the words of the
    ranges that match them are lit (a search hit)."""
    ranges = [(max(0, s), min(len(text), e)) for s, e in ranges if e > s]
    if not ranges:
        return TextEvidence(text[:6000], [], False, len(text) > 6000)
    lo, hi = excerpt_bounds(text, min(s for s, _ in ranges), max(e for _, e in ranges))
    if terms:
        ranges = [w for s, e in ranges for w in term_ranges(text, terms, s, e)] or [
            (s, s)
            for s, _ in ranges[:1]  # none matched (a hit by meaning): show the place
        ]
    return TextEvidence(text[lo:hi], [(s - lo, e - lo) for s, e in ranges], lo > 0, hi < len(text))


class PageCanvas(QWidget):
    """A rendered PDF page with translucent highlight boxes, scaled to fit the width."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.evidence: PdfEvidence | None = None
        self.zoom = 1.0
        self.fit_width = 400
        self.fill = QColor("#FFE07A")
        self.outline = QColor("#E5A800")
        self.setSizePolicy(QSizePolicy.Policy.Fixed, QSizePolicy.Policy.Fixed)

    @property
    def rects(self) -> list[QRectF]:
        return self.evidence.rects if self.evidence else []

    def set_colors(self, palette: Palette) -> None:
        self.fill = QColor(palette.highlight)
        self.fill.setAlpha(110)
        self.outline = QColor(palette.highlight_strong)
        self.update()

    def set_evidence(self, evidence: PdfEvidence | None) -> None:
        self.evidence = evidence
        self._resize()

    def set_fit_width(self, width: int) -> None:
        self.fit_width = max(120, width)
        self._resize()

    def set_zoom(self, zoom: float) -> None:
        self.zoom = min(4.0, max(0.4, zoom))
        self._resize()

    def scale(self) -> float:
        if not self.evidence:
            return 1.0
        return self.fit_width * self.zoom / self.evidence.page_size.width()

    def _resize(self) -> None:
        if not self.evidence:
            self.setFixedSize(1, 1)
            return
        s = self.scale()
        size = self.evidence.page_size
        self.setFixedSize(int(size.width() * s), int(size.height() * s))
        self.update()

    def lines_box(self) -> QRectF | None:
        """The whole lines of the lit text, scaled (the lit boxes where lines are unknown)."""
        lines = (self.evidence.lines if self.evidence else []) or self.rects
        if not lines:
            return None
        s = self.scale()
        box = lines[0]
        for r in lines[1:]:
            box = box.united(r)
        return QRectF(box.x() * s, box.y() * s, box.width() * s, box.height() * s)

    def highlight_box(self) -> QRectF | None:
        if not self.rects:
            return None
        s = self.scale()
        box = self.rects[0]
        for r in self.rects[1:]:
            box = box.united(r)
        return QRectF(box.x() * s, box.y() * s, box.width() * s, box.height() * s)

    def paintEvent(self, event: QPaintEvent) -> None:
        if not self.evidence:
            return
        painter = QPainter(self)
        painter.setRenderHint(QPainter.RenderHint.SmoothPixmapTransform)
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        painter.fillRect(self.rect(), QColor("white"))
        painter.drawImage(QRectF(self.rect()), self.evidence.image)
        s = self.scale()
        painter.setPen(QPen(self.outline, 1.2))
        painter.setBrush(self.fill)
        # Multiply keeps the text readable under the highlight, like a marker pen.
        painter.setCompositionMode(QPainter.CompositionMode.CompositionMode_Multiply)
        for r in self.rects:
            painter.drawRoundedRect(
                QRectF(r.x() * s - 2, r.y() * s - 1, r.width() * s + 4, r.height() * s + 2), 2, 2
            )
        painter.end()


class PdfView(QScrollArea):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("pdfView")
        self.canvas = PageCanvas()
        self.setWidget(self.canvas)
        self.setWidgetResizable(False)
        self.setAlignment(Qt.AlignmentFlag.AlignHCenter | Qt.AlignmentFlag.AlignTop)
        self.setFrameShape(QFrame.Shape.NoFrame)

    def resizeEvent(self, event: QResizeEvent) -> None:
        super().resizeEvent(event)
        self.canvas.set_fit_width(self.viewport().width() - 24)

    def show_evidence(self, evidence: PdfEvidence) -> None:
        self.canvas.set_fit_width(self.viewport().width() - 24)
        self.canvas.set_evidence(evidence)
        self.canvas.set_zoom(self._reading_zoom(evidence))
        QTimer.singleShot(0, self.scroll_to_highlight)

    def _reading_zoom(self, evidence: PdfEvidence) -> float:
        """Zoom so the highlighted lines fill the panel's width: a whole page fitted into
        a side panel is too small to read, and reading the sentence is the point."""
        lines = evidence.lines or evidence.rects
        if not lines:
            return 1.0
        # The whole lines, not only the lit words: a sentence starting mid-line zoomed to
        # its own width cut the line's beginning off ("… Passwords are never shared").
        left = min(r.left() for r in lines)
        right = max(r.right() for r in lines)
        width_pt = max(right - left, 1.0)
        base = self.canvas.fit_width / evidence.page_size.width()
        wanted = (self.viewport().width() - 40) / (width_pt * base)
        return max(1.0, min(MAX_AUTO_ZOOM, wanted))

    def scroll_to_highlight(self) -> None:
        box = self.canvas.highlight_box()
        if box is None:
            self.verticalScrollBar().setValue(0)
            self.horizontalScrollBar().setValue(0)
            return
        target = int(box.center().y() - self.viewport().height() / 3)
        self.verticalScrollBar().setValue(max(0, target))
        lines = self.canvas.lines_box() or box
        width = self.viewport().width()
        if lines.width() <= width:
            across = lines.center().x() - width / 2
        else:
            # Zoomed in past the lines' width: their start, where reading begins.
            across = min(lines.left() - 8, box.left() - 8)
        self.horizontalScrollBar().setValue(max(0, int(across)))


class EvidencePanel(QFrame):
    open_settings = Signal()

    def __init__(self, backend: Backend, theme: Theme, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("evidencePanel")
        self.backend = backend
        self.theme = theme
        self.current: EvidenceRequest | None = None
        self.mode = "empty"  # empty | loading | pdf | text | message
        self.pdf_page: int | None = None
        self.pdf_count = 0
        self.located = False
        self._token = 0

        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(0)

        header = named(QFrame(), "panelHeader")
        head = QVBoxLayout(header)
        head.setContentsMargins(16, 12, 12, 10)
        head.setSpacing(4)
        top = QHBoxLayout()
        top.setSpacing(6)
        self.caption = named(QLabel("Evidence"), "panelTitle")
        top.addWidget(self.caption)
        top.addStretch(1)
        self.zoom_out = self._tool("zoom-out", "Zoom out (Ctrl+-)", lambda: self._zoom(1 / 1.2))
        self.zoom_in = self._tool("zoom-in", "Zoom in (Ctrl++)", lambda: self._zoom(1.2))
        self.prev_page = self._tool("page-prev", "Previous page", lambda: self._step(-1))
        self.next_page = self._tool("page-next", "Next page", lambda: self._step(1))
        for button in (self.prev_page, self.next_page, self.zoom_out, self.zoom_in):
            top.addWidget(button)
        self.open_button = named(QPushButton(OPEN_LABEL), "secondaryButton")
        self.open_button.setToolTip("Open the file in your system's viewer")
        self.open_button.setAccessibleName(OPEN_LABEL)
        self.open_button.clicked.connect(self.open_original)
        top.addWidget(self.open_button)
        head.addLayout(top)
        self.title = named(QLabel(), "evidenceTitle")
        self.title.setWordWrap(True)
        self.title.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.meta = named(QLabel(), "muted")
        self.meta.setWordWrap(True)
        head.addWidget(self.title)
        head.addWidget(self.meta)
        # Said when the system has no program to open the file: the path, to copy.
        self.open_failed = named(QFrame(), "warningNote")
        ofl = QHBoxLayout(self.open_failed)
        ofl.setContentsMargins(10, 6, 10, 6)
        ofl.setSpacing(8)
        self.open_failed_text = WrapLabel(objectName="warningText")
        self.open_failed_text.setTextFormat(Qt.TextFormat.PlainText)
        self.open_failed_text.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        ofl.addWidget(self.open_failed_text, 1)
        self.copy_path_button = named(QPushButton("Copy path"), "secondaryButton")
        self.copy_path_button.clicked.connect(self._copy_path)
        ofl.addWidget(self.copy_path_button, 0, Qt.AlignmentFlag.AlignTop)
        self.open_failed.hide()
        self._failed_path = ""
        head.addWidget(self.open_failed)
        layout.addWidget(header)

        self.quote = named(QLabel(), "quoteBox")
        self.quote.setWordWrap(True)
        self.quote.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.quote.setTextFormat(Qt.TextFormat.RichText)
        quote_wrap = named(QFrame(), "quoteWrap")
        qlay = QVBoxLayout(quote_wrap)
        qlay.setContentsMargins(14, 10, 14, 10)
        qlay.addWidget(self.quote)
        self.quote_wrap = quote_wrap
        layout.addWidget(quote_wrap)

        self.stack = QStackedWidget()
        self.placeholder = self._placeholder()
        self.loading = named(QLabel("Opening the document…"), "muted")
        self.loading.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.pdf_view = PdfView()
        self.text_view = named(QTextBrowser(), "textEvidence")
        self.text_view.setOpenLinks(False)
        self.text_view.setFrameShape(QFrame.Shape.NoFrame)
        self.message = named(QLabel(), "evidenceMessage")
        self.message.setWordWrap(True)
        self.message.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.message.setContentsMargins(24, 24, 24, 24)
        for widget in (self.placeholder, self.loading, self.pdf_view, self.text_view, self.message):
            self.stack.addWidget(widget)
        layout.addWidget(self.stack, 1)

        theme.changed.connect(self._restyle)
        backend.view.snapshot_changed.connect(self._library_changed)
        backend.view.documents_removed.connect(self._documents_removed)
        self._restyle(theme.palette)
        self.clear()

    def _library_changed(self, snapshot: LibrarySnapshot) -> None:
        """The document shown went with its folder: say so at once, keep none of its text."""
        folders = [f.path for f in snapshot.folders]
        self._let_go(
            lambda path: any(
                path == f or path.startswith(f.rstrip(os.sep) + os.sep) for f in folders
            )
        )

    def _documents_removed(self, paths: list[str]) -> None:
        gone = set(paths)
        self._let_go(lambda path: path not in gone)

    def _let_go(self, kept: Callable[[str], bool]) -> None:
        request = self.current
        if request is None or request.removed or kept(request.path):
            return
        self.show_request(
            replace(
                request,
                removed=True,
                quote="",
                spans=tuple(replace(span, text="") for span in request.spans),
            )
        )

    def resizeEvent(self, event: QResizeEvent) -> None:
        super().resizeEvent(event)
        # A narrow panel would cut the button's words ("Open orig"); the icon and its
        # tooltip say the same.
        compact = event.size().width() < COMPACT_WIDTH
        self.open_button.setText("" if compact else OPEN_LABEL)
        self.open_button.setToolTip(
            f"{OPEN_LABEL}: open the file in your system's viewer"
            if compact
            else "Open the file in your system's viewer"
        )

    # --- building ------------------------------------------------------------------------

    def _tool(self, name: str, tip: str, slot: Callable[[], object]) -> QToolButton:
        button = named(QToolButton(), "iconButton")
        button.setToolTip(tip)
        button.setAccessibleName(tip)
        button.setProperty("iconName", name)
        button.setIcon(icon(name))
        button.setIconSize(QSize(16, 16))
        button.clicked.connect(slot)
        return button

    def _placeholder(self) -> QWidget:
        box = QWidget()
        lay = QVBoxLayout(box)
        lay.setContentsMargins(32, 32, 32, 32)
        lay.addStretch(1)
        self._placeholder_icon = QLabel()
        self._placeholder_icon.setAlignment(Qt.AlignmentFlag.AlignCenter)
        lay.addWidget(self._placeholder_icon)
        title = named(QLabel("See where answers come from"), "emptyTitle")
        title.setAlignment(Qt.AlignmentFlag.AlignCenter)
        lay.addWidget(title)
        text = named(
            QLabel(
                "Click a numbered citation in an answer, or a search result, to open the passage "
                "in its document with the supporting sentence highlighted."
            ),
            "muted",
        )
        text.setWordWrap(True)
        text.setAlignment(Qt.AlignmentFlag.AlignCenter)
        lay.addWidget(text)
        lay.addStretch(2)
        return box

    def _restyle(self, palette: Palette) -> None:
        self.pdf_view.canvas.set_colors(palette)
        for button in (self.prev_page, self.next_page, self.zoom_out, self.zoom_in):
            button.setIcon(icon(str(button.property("iconName")), palette.muted))
        self.open_button.setIcon(icon("external", palette.text, 16))
        self._placeholder_icon.setPixmap(icon("document-search", palette.faint, 40).pixmap(40, 40))
        if self.mode == "text" and self.current is not None:
            self._apply_text_highlights()

    # --- showing --------------------------------------------------------------------------

    def clear(self) -> None:
        self.open_failed.hide()
        self._token += 1
        self.current = None
        self.mode = "empty"
        self.title.setText("")
        self.meta.setText("")
        self.title.hide()
        self.meta.hide()
        self.quote_wrap.hide()
        self.open_button.setEnabled(False)
        self._pdf_controls(False)
        self.stack.setCurrentWidget(self.placeholder)

    def show_request(self, request: EvidenceRequest) -> None:
        self.open_failed.hide()
        self._token += 1
        token = self._token
        self.current = request
        self.located = False
        self.title.setText(f"{request.label}  {request.title}")
        self.title.show()
        self.meta.setText(self._meta_text(request, None))
        self.meta.show()
        quote = plain_quote(" ".join(s.text for s in request.spans))
        if request.quote:
            # A search hit: what its card showed, with the same words lit.
            lit = highlight_terms_html(request.quote, request.terms, self.theme.palette)
            self.quote.setText(f"“{lit}”")
            self.quote.setToolTip("")
            self.quote_wrap.show()
        elif quote:
            # The page below shows it whole; a long quote here would push the page away.
            shown = quote if len(quote) <= QUOTE_CHARS else quote[: QUOTE_CHARS - 1].rstrip() + "…"
            self.quote.setText(f"“{_escape(shown)}”")
            self.quote.setToolTip(quote if shown != quote else "")
            self.quote_wrap.show()
        else:
            self.quote.setText("")
            self.quote_wrap.hide()
        available = not request.removed and original_file(request.path) is not None
        # The button agrees with the message below: a passage gone from the library is
        # not offered from a file that may since hold something else.
        self.open_button.setEnabled(available)
        if not available:
            self._show_message(
                "This document is no longer available.",
                "It was removed from the library or moved. Add its folder again to see it here.",
            )
            return
        self.mode = "loading"
        self.stack.setCurrentWidget(self.loading)
        if request.type == "pdf":
            needles = [s.text for s in request.spans if s.text.strip()]
            path, page = request.path, request.page
            document_id = request.document_id
            spans = [(s.start, s.end) for s in request.spans]
            terms = request.terms

            # The OCR boxes are read and the page drawn on one worker, in one trip.
            def render(run: ops.RunOp) -> PdfEvidence:
                words = _ocr_words(run, document_id, _term_spans(run, document_id, spans, terms))
                return render_pdf_evidence(
                    path,
                    page,
                    needles,
                    words=words,
                    terms=terms,
                    page_words=_ocr_page_words(run, document_id, words),
                )

            self.backend.run(
                ops.compose("render pdf", render),
                on_result=lambda ev: self._pdf_ready(token, ev),
                on_error=lambda exc: self._pdf_failed(token, exc),
            )
        else:
            self._load_text(token, request)

    def _load_text(self, token: int, request: EvidenceRequest) -> None:
        document_id = request.document_id
        spans = [(s.start, s.end) for s in request.spans]
        terms = request.terms
        if document_id is None:
            self._show_message("This passage has no stored text to show.", "")
            return

        def laid_out(text: str) -> TextEvidence:
            if not text:
                raise LecternError(
                    "The text of this document is no longer in the library.",
                    "It was removed or is being re-indexed; try again in a moment.",
                )
            return load_text_evidence(text, spans, terms)

        self.backend.run(
            ops.document_text(document_id).then(laid_out),
            on_result=lambda ev: self._text_ready(token, ev),
            on_error=lambda exc: self._text_failed(token, exc),
        )

    def _pdf_ready(self, token: int, evidence: PdfEvidence) -> None:
        if token != self._token:
            return
        self.mode = "pdf"
        self.pdf_page = evidence.page
        self.pdf_count = evidence.page_count
        self.located = evidence.found or self.located
        self.stack.setCurrentWidget(self.pdf_view)
        self.pdf_view.show_evidence(evidence)
        self._pdf_controls(True)
        if self.current is not None:
            self.meta.setText(self._meta_text(self.current, evidence))

    def _pdf_failed(self, token: int, exc: BaseException) -> None:
        if token != self._token or self.current is None:
            return
        # The extracted text still shows the passage when the page cannot be drawn.
        self._load_text(token, self.current)

    def _text_ready(self, token: int, evidence: TextEvidence) -> None:
        if token != self._token:
            return
        self.mode = "text"
        self._pdf_controls(False)
        self._text = evidence
        prefix = "…\n\n" if evidence.clipped_start else ""
        suffix = "\n\n…" if evidence.clipped_end else ""
        shifted = [(s + len(prefix), e + len(prefix)) for s, e in evidence.ranges]
        source = prefix + evidence.text + suffix
        if self.current is not None and self.current.type == "md":
            # Shown as it reads, not as it is written; the lit characters are found again
            # in the rendered text.
            document = self.text_view.document()
            document.setMarkdown(source, QTextDocument.MarkdownFeature.MarkdownDialectGitHub)
            _wrap_code_blocks(document)
            self._lit = map_ranges(source, document.toPlainText(), shifted)
        else:
            self.text_view.setPlainText(_unwrap(source))
            self._lit = shifted
        self.stack.setCurrentWidget(self.text_view)
        self.located = any(e > s for s, e in evidence.ranges)
        self._apply_text_highlights()

    def _apply_text_highlights(self) -> None:
        if getattr(self, "_text", None) is None:
            return
        palette = self.theme.palette
        fmt = QTextCharFormat()
        fmt.setBackground(QColor(palette.highlight))
        fmt.setForeground(QColor(palette.text))
        selections = []
        last = max(0, self.text_view.document().characterCount() - 1)
        for start, end in self._lit:
            cursor = QTextCursor(self.text_view.document())
            cursor.setPosition(min(start, last))
            cursor.setPosition(min(end, last), QTextCursor.MoveMode.KeepAnchor)
            selection = QTextEdit.ExtraSelection()
            selection.cursor = cursor
            selection.format = fmt
            selections.append(selection)
        self.text_view.setExtraSelections(selections)
        if self._lit:
            first = self._lit[0][0]
            QTimer.singleShot(0, lambda: self._scroll_text_to(first))

    def highlighted_text(self) -> list[str]:
        """The highlighted characters in the text view (used by tests and copy)."""
        return [s.cursor.selectedText() for s in self.text_view.extraSelections()]

    def _scroll_text_to(self, position: int) -> None:
        cursor = QTextCursor(self.text_view.document())
        cursor.setPosition(min(position, max(0, self.text_view.document().characterCount() - 1)))
        rect = self.text_view.cursorRect(cursor)
        bar = self.text_view.verticalScrollBar()
        bar.setValue(bar.value() + rect.top() - self.text_view.viewport().height() // 3)

    def _text_failed(self, token: int, exc: BaseException) -> None:
        if token != self._token:
            return
        message, hint = describe_error(exc)
        self._show_message(message, hint)

    def _show_message(self, message: str, hint: str) -> None:
        self.mode = "message"
        self._pdf_controls(False)
        self.message.setText(
            f"<p><b>{_escape(message)}</b></p><p>{_escape(hint)}</p>" if hint else _escape(message)
        )
        self.stack.setCurrentWidget(self.message)

    def _meta_text(self, request: EvidenceRequest, evidence: PdfEvidence | None) -> str:
        name = os.path.basename(request.path)
        if evidence is not None:
            where = f"page {evidence.page} of {evidence.page_count}"
            if evidence.ocr:
                where += " · read by OCR"
            if not evidence.found and request.spans:
                where += " · the exact sentence could not be located on the page"
            return f"{name} · {where}"
        if request.type != "pdf":
            # Slides, chapters, rows and messages are not pages.
            return f"{name} · {request.location}" if request.location else name
        if request.page:
            return f"{name} · page {request.page}"
        return name

    def _pdf_controls(self, visible: bool) -> None:
        for button in (self.prev_page, self.next_page, self.zoom_out, self.zoom_in):
            button.setVisible(visible)
        if visible:
            self.prev_page.setEnabled(bool(self.pdf_page and self.pdf_page > 1))
            self.next_page.setEnabled(bool(self.pdf_page and self.pdf_page < self.pdf_count))

    def _zoom(self, factor: float) -> None:
        if self.mode == "pdf":
            canvas = self.pdf_view.canvas
            canvas.set_zoom(canvas.zoom * factor)
            QTimer.singleShot(0, self.pdf_view.scroll_to_highlight)

    def _step(self, delta: int) -> None:
        if self.mode != "pdf" or self.current is None or self.pdf_page is None:
            return
        target = self.pdf_page + delta
        if not 1 <= target <= self.pdf_count:
            return
        self._token += 1
        token = self._token
        path = self.current.path
        request = self.current

        def render(run: ops.RunOp) -> PdfEvidence:
            if request.page is not None and target == request.page:
                spans = [(s.start, s.end) for s in request.spans]
                spans = _term_spans(run, request.document_id, spans, request.terms)
                words = _ocr_words(run, request.document_id, spans)
                return render_pdf_evidence(
                    path,
                    target,
                    [s.text for s in request.spans],
                    words=words,
                    terms=request.terms,
                    page_words=_ocr_page_words(run, request.document_id, words),
                )
            evidence = render_pdf_page(path, target)
            if request.document_id is not None:
                evidence.ocr = target in run(ops.ocr_pages(request.document_id))
            return evidence

        self.backend.run(
            ops.compose("render page", render),
            on_result=lambda ev: self._pdf_ready(token, ev),
            on_error=lambda exc: self._text_failed(token, exc),
        )

    # --- opening the file -------------------------------------------------------------

    def open_original(self) -> None:
        if self.current is None:
            return
        page = self.pdf_page if self.mode == "pdf" else self.current.page
        path = original_file(self.current.path) or self.current.path
        own = path == self.current.path and self.current.type == "pdf"
        if not open_document(path, page if own else None):
            self._failed_path = path
            self.open_failed_text.setText(
                "This system has no program set up to open the file, so Lectern could not "
                f"open it. It is at {path}"
            )
            self.open_failed.show()

    def _copy_path(self) -> None:
        QGuiApplication.clipboard().setText(self._failed_path)
        self.copy_path_button.setText("Copied")
        button = self.copy_path_button
        QTimer.singleShot(1500, button, lambda: button.setText("Copy path"))


def original_file(path: str) -> str | None:
    """The file on disk that holds ``path``: itself, or for a mail attachment (stored as
    "lunch.eml/minutes.docx") the mail file it came in; None when neither is there."""
    if os.path.exists(path):
        return path
    parent = os.path.dirname(path)
    while parent and parent != os.path.dirname(parent):
        if os.path.isfile(parent):
            return parent
        if os.path.isdir(parent):
            return None
        parent = os.path.dirname(parent)
    return None


def open_document(path: str, page: int | None = None) -> bool:
    """Open ``path`` in the system's viewer, at ``page`` where a known viewer allows it."""
    with session_umask():
        return _open_document(path, page)


def _open_document(path: str, page: int | None) -> bool:
    if page and sys.platform.startswith("linux"):
        # xdg-open cannot pass a page; these readers take one on the command line.
        for program, args in (
            ("evince", ["-i", str(page), path]),
            ("okular", ["-p", str(page), path]),
            ("zathura", ["-P", str(page), path]),
        ):
            exe = shutil.which(program)
            if exe and QProcess.startDetached(exe, args)[0]:
                return True
    if page and sys.platform == "win32":
        sumatra = shutil.which("SumatraPDF")
        if sumatra and QProcess.startDetached(sumatra, ["-page", str(page), path])[0]:
            return True
    return QDesktopServices.openUrl(QUrl.fromLocalFile(path))


def _ocr_words(
    run: ops.RunOp, document_id: int | None, spans: Sequence[tuple[int, int]]
) -> list[WordBox]:
    """The OCR boxes of the cited characters; none on a digital page."""
    if document_id is None:
        return []
    words: list[WordBox] = []
    for start, end in spans:
        boxes: list[WordBox] = run(ops.ocr_words(document_id, start, end))
        words.extend(boxes)
    return words


def _ocr_page_words(
    run: ops.RunOp, document_id: int | None, words: Sequence[WordBox]
) -> list[WordBox]:
    """All the OCR boxes of the pages ``words`` are on: the lines the cited words sit on."""
    if document_id is None or not words:
        return []
    pages = {w.page for w in words}
    found: list[WordBox] = []
    for span in run(ops.document_pages(document_id)):
        if span.page in pages:
            boxes: list[WordBox] = run(ops.ocr_words(document_id, span.start, span.end))
            found.extend(boxes)
    return found


def map_ranges(source: str, shown: str, ranges: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
    """``ranges`` of ``source`` as ranges of ``shown``, the same text rendered (Markdown
    without its markup): letters and digits are matched up, as :mod:`desktop.locate` does
    for a PDF's own text."""
    import difflib

    a, a_index = folded(source)
    b, b_index = folded(shown)
    if not a or not b:
        return []
    to_b: dict[int, int] = {}
    matcher = difflib.SequenceMatcher(None, a, b, autojunk=False)
    for block in matcher.get_matching_blocks():
        for k in range(block.size):
            to_b[block.a + k] = block.b + k
    out: list[tuple[int, int]] = []
    for start, end in ranges:
        inside = range(bisect_left(a_index, start), bisect_left(a_index, end))
        mapped = [to_b[i] for i in inside if i in to_b]
        if mapped:
            lo, hi = b_index[min(mapped)], b_index[max(mapped)] + 1
            # The closing punctuation is no letter, but it ends the sentence lit.
            piece = source[start:end].rstrip()
            tail = piece[len(piece.rstrip(".!?…:;,)]\"'”’*_")) :].replace("*", "").replace("_", "")
            if tail and shown.startswith(tail, hi):
                hi += len(tail)
            out.append((lo, hi))
    return out


def _term_spans(
    run: ops.RunOp,
    document_id: int | None,
    spans: Sequence[tuple[int, int]],
    terms: Sequence[str],
) -> list[tuple[int, int]]:
    """The characters of the words matching ``terms`` inside ``spans`` (``spans`` itself
    when there are no terms): what OCR boxes a search hit lights."""
    if not terms:
        return list(spans)
    if document_id is None or not run(ops.ocr_pages(document_id)):
        return []  # a digital page: its own text layer finds the words
    text = run(ops.document_text(document_id))
    return [w for s, e in spans for w in term_ranges(text, terms, s, e)]


def _wrap_code_blocks(document: QTextDocument) -> None:
    """Let code blocks wrap: a side panel cut a long command line at its right edge
    ("beacon escalate --incident INC-2041 --to secondar"), to be read by scrolling."""
    block = document.begin()
    while block.isValid():
        fmt = block.blockFormat()
        if fmt.nonBreakableLines():
            fmt.setNonBreakableLines(False)
            cursor = QTextCursor(block)
            cursor.setBlockFormat(fmt)
        block = block.next()


def _unwrap(text: str) -> str:
    """Join lines that a text file wrapped mid-paragraph, so the passage reads as prose.

    One newline becomes one space, so every character keeps its offset and the highlight
    stays exact. Paragraph breaks, headings, tables, lists and indented code are kept: a
    line is joined to the next only when both look like running text."""
    lines = text.split("\n")
    out: list[str] = []
    for i, line in enumerate(lines):
        out.append(line)
        if i == len(lines) - 1:
            break
        nxt = lines[i + 1]
        prose = (
            line.strip()
            and not line.lstrip().startswith(("#", "|", "```", "    "))
            and not line.startswith(("\t", "    "))
            and nxt[:1].isalpha()
        )
        out.append(" " if prose else "\n")
    return "".join(out)


def _escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
