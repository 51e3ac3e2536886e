"""Small widgets shared by the panels."""

from __future__ import annotations

import os

from PySide6.QtCore import QSize, Qt
from PySide6.QtGui import QResizeEvent
from PySide6.QtWidgets import QLabel, QSizePolicy, QWidget


def display_path(path: str) -> str:
    """``~/Documents/x`` for paths under the home folder: shorter, and what people know."""
    home = os.path.expanduser("~")
    if home and home != os.sep and (path == home or path.startswith(home + os.sep)):
        return "~" + path[len(home) :]
    return path


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
