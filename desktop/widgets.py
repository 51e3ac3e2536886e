"""Small widgets shared by the panels."""

from __future__ import annotations

import os
from collections.abc import Sequence

from desktop.qt import (
    QButtonGroup,
    QEvent,
    QFrame,
    QHBoxLayout,
    QKeyEvent,
    QLabel,
    QMouseEvent,
    QObject,
    QResizeEvent,
    QSize,
    QSizePolicy,
    Qt,
    QToolButton,
    QWidget,
    Signal,
    named,
)


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


class ElidedLabel(QLabel):
    """A one-line label that shortens its text with "…" instead of being clipped."""

    def __init__(
        self,
        text: str = "",
        mode: Qt.TextElideMode = Qt.TextElideMode.ElideRight,
        parent: QWidget | None = None,
        *,
        objectName: str = "",  # mirrors the keyword Qt widgets take
    ) -> None:
        super().__init__(parent)
        if objectName:
            self.setObjectName(objectName)
        self._full = ""
        self._mode = mode
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
        shown = (
            self.fontMetrics().elidedText(self._full, self._mode, width) if width else self._full
        )
        if shown != self.text():
            self.setText(shown)


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
    ) -> None:
        super().__init__(text, parent)
        if objectName:
            self.setObjectName(objectName)
        self._heights: dict[tuple[int, int, int, int, int], int] = {}
        self.setWordWrap(True)

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
