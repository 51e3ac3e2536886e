"""A theme asked for again is not set again: setting the style, palette or style sheet
makes Qt polish every widget of the application, and the suite's windows (every test
opens one) made each later window's theme cost more, until CI ran out of time."""

from __future__ import annotations

from typing import Any

import pytest
from PySide6.QtCore import QEvent, QObject
from PySide6.QtWidgets import QApplication, QLabel

from desktop.theme import Theme


class StyleChanges(QObject):
    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        if event.type() in (QEvent.Type.StyleChange, QEvent.Type.PaletteChange):
            self.count += 1
        return False


def test_the_same_theme_again_polishes_nothing(qtbot: Any) -> None:
    Theme("light").apply()
    label = QLabel("a passage")
    qtbot.addWidget(label)
    label.show()
    changes = StyleChanges()
    label.installEventFilter(changes)

    Theme("light").apply()
    assert changes.count == 0


def test_another_theme_is_still_set(qtbot: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    # What is set is recorded, not applied: applying it would restyle every widget the
    # earlier tests of this process left behind.
    Theme("light").apply()
    app = QApplication.instance()
    assert isinstance(app, QApplication)
    sheets: list[str] = []
    palettes: list[object] = []
    monkeypatch.setattr(app, "setStyleSheet", sheets.append)
    monkeypatch.setattr(app, "setPalette", palettes.append)
    Theme("dark").apply()
    assert len(sheets) == 1 and sheets[0] != app.styleSheet()
    assert len(palettes) == 1
