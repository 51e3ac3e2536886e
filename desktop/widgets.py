"""Small widgets shared by the panels."""

from __future__ import annotations

import os
from collections.abc import Sequence

from desktop.qt import (
    QButtonGroup,
    QEvent,
    QFontMetrics,
    QFrame,
    QGuiApplication,
    QHBoxLayout,
    QKeyEvent,
    QKeySequence,
    QLabel,
    QMenu,
    QMouseEvent,
    QObject,
    QResizeEvent,
    QSize,
    QSizePolicy,
    Qt,
    QToolButton,
    QVBoxLayout,
    QWidget,
    Signal,
    named,
)
from desktop.rich import NO_BREAK_HYPHEN


def display_path(path: str) -> str:
    """``~/Documents/x`` for paths under the home folder: shorter, and what people know."""
    home = os.path.expanduser("~")
    if home and home != os.sep and (path == home or path.startswith(home + os.sep)):
        return "~" + path[len(home) :]
    return path


def segmented_control(
    owner: QObject, choices: Sequence[tuple[str, str]], *, icons: bool = False
) -> tuple[QFrame, QButtonGroup, list[QToolButton]]:
    """Exclusive buttons drawn as one control (``choices``: text and tooltip of each);
    ``icons``: room for an icon beside each text."""
    segment = named(QFrame(), "segment")
    row = QHBoxLayout(segment)
    row.setContentsMargins(3, 3, 3, 3)
    row.setSpacing(2)
    group = QButtonGroup(owner)
    buttons = []
    for text, tip in choices:
        button = named(QToolButton(), "segmentButton")
        button.setText(text)
        button.setToolTip(tip)
        button.setCheckable(True)
        if icons:
            button.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextBesideIcon)
            button.setIconSize(QSize(15, 15))
        group.addButton(button)
        row.addWidget(button)
        buttons.append(button)
    return segment, group, buttons


# Left at the end of a shortened phrase, they would read as the sentence's own.
_TRAILING = " ,;:–—-"


def elide_at_words(metrics: QFontMetrics, text: str, width: int) -> str:
    """``text`` as it fits ``width``: whole, or its first words and "…". A first word too
    long on its own is cut where Qt cuts it (never inside a character)."""
    if metrics.horizontalAdvance(text) <= width:
        return text
    words = text.split(" ")
    fitted = ""
    for end in range(1, len(words)):
        shown = " ".join(words[:end]).rstrip(_TRAILING)
        if not shown:
            continue
        if metrics.horizontalAdvance(shown + "…") > width:
            break
        fitted = shown + "…"
    return fitted or metrics.elidedText(text, Qt.TextElideMode.ElideRight, width)


class ElidedLabel(QLabel):
    """A one-line label that shortens its text with "…" instead of being clipped; with
    ``at_words``, after a whole word (a title, a sentence) rather than inside one."""

    def __init__(
        self,
        text: str = "",
        mode: Qt.TextElideMode = Qt.TextElideMode.ElideRight,
        parent: QWidget | None = None,
        *,
        objectName: str = "",  # mirrors the keyword Qt widgets take
        at_words: bool = False,
    ) -> None:
        super().__init__(parent)
        if objectName:
            self.setObjectName(objectName)
        self._full = ""
        self._mode = mode
        self._at_words = at_words
        self.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self.setTextFormat(Qt.TextFormat.PlainText)
        self.set_full_text(text)

    def set_full_text(self, text: str) -> None:
        self._full = text
        self.setToolTip(text if text else "")
        self._elide()

    def full_text(self) -> str:
        return self._full

    def resizeEvent(self, event: QResizeEvent) -> None:
        super().resizeEvent(event)
        self._elide()

    def minimumSizeHint(self) -> QSize:
        return QSize(20, super().minimumSizeHint().height())

    def _elide(self) -> None:
        width = max(0, self.contentsRect().width())
        if not width:
            shown = self._full
        elif self._at_words and self._mode == Qt.TextElideMode.ElideRight:
            shown = elide_at_words(self.fontMetrics(), self._full, width)
        else:
            shown = self.fontMetrics().elidedText(self._full, self._mode, width)
        if shown != self.text():
            self.setText(shown)


# The narrowest a shrinking WrapLabel asks to be: a few words, whatever its text.
SHRUNK_WIDTH = 60


def _plain_hyphens() -> None:
    """The clipboard's text (and the selection's, where the system has one) with
    non-breaking hyphens made plain again."""
    clipboard = QGuiApplication.clipboard()
    modes = [clipboard.Mode.Clipboard]
    if clipboard.supportsSelection():
        modes.append(clipboard.Mode.Selection)
    for mode in modes:
        text = clipboard.text(mode)
        if NO_BREAK_HYPHEN in text:
            clipboard.setText(text.replace(NO_BREAK_HYPHEN, "-"), mode)


def _copied_from_menu(_action: object) -> None:
    _plain_hyphens()


class WrapLabel(QLabel):
    """A word-wrapped label that remembers its height for each width until it changes.

    Qt asks every word-wrapped label in a layout for its height at several widths whenever
    anything in that layout changes, and a rich-text QLabel lays its whole text out again
    for each question (QWidgetItem's own cache holds three widths; the transcript asks for
    four). Adding three search results to a conversation with a few long answers
    re-laid out every earlier answer half a dozen times: 70-110 ms of the UI thread,
    growing with the conversation. With this cache only new or changed labels are laid out.
    """

    def __init__(
        self,
        text: str = "",
        parent: QWidget | None = None,
        *,
        objectName: str = "",  # mirrors the keyword Qt widgets take
        shrinks: bool = False,
    ) -> None:
        super().__init__(text, parent)
        if objectName:
            self.setObjectName(objectName)
        self._heights: dict[tuple[int, int, int, int, int], int] = {}
        # A word-wrapped label's minimum width is its longest unbreakable run of text: one
        # long file name or row list held a 1024 px window's conversation wider than its
        # pane, under the evidence panel. Shrinking, the pane decides the width and the
        # text wraps inside it (what still does not fit is the text's to shorten).
        self._shrinks = shrinks
        self.setWordWrap(True)

    def minimumSizeHint(self) -> QSize:
        hint = super().minimumSizeHint()
        if self._shrinks:
            return QSize(min(hint.width(), SHRUNK_WIDTH), hint.height())
        return hint

    def _forget(self) -> None:
        self._heights.clear()

    def heightForWidth(self, width: int) -> int:
        margins = self.contentsMargins()
        # Style sheets set contents margins from C++ (no Python call to hook), so they
        # are part of the key rather than an invalidation.
        key = (width, margins.left(), margins.top(), margins.right(), margins.bottom())
        height = self._heights.get(key)
        if height is None:
            height = super().heightForWidth(width)
            self._heights[key] = height
        return height

    def setText(self, text: str) -> None:
        if text != self.text():
            self._forget()
            super().setText(text)

    def setTextFormat(self, fmt: Qt.TextFormat) -> None:
        self._forget()
        super().setTextFormat(fmt)

    def setWordWrap(self, on: bool) -> None:
        self._forget()
        super().setWordWrap(on)

    def setIndent(self, indent: int) -> None:
        self._forget()
        super().setIndent(indent)

    def setMargin(self, margin: int) -> None:
        self._forget()
        super().setMargin(margin)

    def changeEvent(self, event: QEvent) -> None:
        if event.type() in (QEvent.Type.FontChange, QEvent.Type.StyleChange):
            self._forget()
        super().changeEvent(event)

    # Copying. Code in an answer is drawn with non-breaking hyphens (desktop/rich.py), so
    # that a command never wraps inside an option ("--canary-" / "duration"); pasted
    # into a terminal, a command copied from the label must still be the command.

    def keyPressEvent(self, event: QKeyEvent) -> None:
        super().keyPressEvent(event)
        if event.matches(QKeySequence.StandardKey.Copy) and self.hasSelectedText():
            _plain_hyphens()

    def mouseReleaseEvent(self, event: QMouseEvent) -> None:
        super().mouseReleaseEvent(event)  # a selection made sets the system's selection
        if self.hasSelectedText():
            _plain_hyphens()

    def contextMenuEvent(self, event: QEvent) -> None:
        # The label's own menu (Copy, Select All) is made as its child and shown without
        # waiting: its Copy is followed by the menu's triggered signal.
        before = set(self.findChildren(QMenu))
        # (QContextMenuEvent is not among desktop.qt's names; the event is one.)
        super().contextMenuEvent(event)  # type: ignore[arg-type]
        for menu in self.findChildren(QMenu):
            if menu not in before:
                menu.triggered.connect(_copied_from_menu)


class ClickableFrame(QFrame):
    clicked = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setCursor(Qt.CursorShape.PointingHandCursor)
        self.setFocusPolicy(Qt.FocusPolicy.StrongFocus)

    def mouseReleaseEvent(self, event: QMouseEvent) -> None:
        if event.button() == Qt.MouseButton.LeftButton and self.rect().contains(
            event.position().toPoint()
        ):
            self.clicked.emit()
        super().mouseReleaseEvent(event)

    def keyPressEvent(self, event: QKeyEvent) -> None:
        if event.key() in (Qt.Key.Key_Return, Qt.Key.Key_Enter, Qt.Key.Key_Space):
            self.clicked.emit()
            return
        super().keyPressEvent(event)


class DetailsFold(QWidget):
    """Technical words a click away: a "Details" toggle over a folded body.

    The window speaks in plain words; an error's name, a benchmark's figures or a file
    the app keeps are still there for whoever wants them (or is asked for them by
    support), one click away instead of in the sentence. Empty details hide the fold.
    """

    def __init__(self, parent: QWidget | None = None, *, objectName: str = "") -> None:
        super().__init__(parent)
        if objectName:
            self.setObjectName(objectName)
        column = QVBoxLayout(self)
        column.setContentsMargins(0, 0, 0, 0)
        column.setSpacing(2)
        self.toggle = named(QToolButton(), "detailsToggle")
        self.toggle.setText("Details")
        self.toggle.setCheckable(True)
        self.toggle.setAutoRaise(True)
        self.toggle.setArrowType(Qt.ArrowType.RightArrow)
        self.toggle.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextBesideIcon)
        self.toggle.setAccessibleName("Show details")
        self.toggle.toggled.connect(self._toggled)
        column.addWidget(self.toggle, 0, Qt.AlignmentFlag.AlignLeft)
        self.body = WrapLabel(objectName="detailsBody")
        self.body.setTextFormat(Qt.TextFormat.PlainText)
        self.body.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.body.hide()
        column.addWidget(self.body)
        self.hide()

    def set_details(self, text: str) -> None:
        self.body.setText(text)
        self.setVisible(bool(text))

    def details(self) -> str:
        return self.body.text()

    @property
    def is_open(self) -> bool:
        return self.toggle.isChecked()

    def _toggled(self, on: bool) -> None:
        self.toggle.setArrowType(Qt.ArrowType.DownArrow if on else Qt.ArrowType.RightArrow)
        self.toggle.setAccessibleName("Hide details" if on else "Show details")
        self.body.setVisible(on)


def inside_details(widget: QWidget | None) -> bool:
    """Whether ``widget`` is (in) the body of a Details fold, where technical words
    belong; the tests of the window's words skip those."""
    while widget is not None:
        parent = widget.parentWidget()
        if isinstance(parent, DetailsFold) and widget is parent.body:
            return True
        widget = parent
    return False
