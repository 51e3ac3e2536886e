"""Help › About Lectern: the version, what it runs on, where the data lives, and licences.

The third-party notices are several hundred kilobytes built from package metadata in a
source checkout, so they are read on a background thread (``Backend.run_local``) and
appear when ready.
"""

from __future__ import annotations

import platform
import sys
from typing import TYPE_CHECKING

from core import __version__
from desktop.qt import (
    QDialog,
    QDialogButtonBox,
    QFont,
    QFontDatabase,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPlainTextEdit,
    Qt,
    QTabWidget,
    QVBoxLayout,
    QWidget,
    qVersion,
)
from desktop.qt import binding_version as pyside_version
from desktop.theme import app_icon

if TYPE_CHECKING:
    from pathlib import Path

    from desktop.backend import Backend
    from desktop.workers import TaskContext

PRIVACY = (
    "Your files, the index and your questions never leave this computer. The only network "
    "connection Lectern makes is to the language-model server you set in Settings."
)


def build_facts(data_folder: Path | None) -> list[tuple[str, str]]:
    facts = [
        ("Version", __version__),
        ("Build", "packaged app" if getattr(sys, "frozen", False) else "source checkout"),
        ("Python", platform.python_version()),
        ("Qt", f"{qVersion()} (PySide6 {pyside_version})"),
        ("Platform", f"{platform.system()} {platform.release()} {platform.machine()}"),
    ]
    # Only name engine libraries that are already loaded: importing torch here would
    # freeze the window for seconds just to print a version number.
    for module, label in (("torch", "PyTorch"), ("duckdb", "DuckDB"), ("usearch", "USearch")):
        loaded = sys.modules.get(module)
        version = getattr(loaded, "__version__", None)
        if version:
            facts.append((label, str(version)))
    if data_folder is not None:
        facts.append(("Data folder", str(data_folder)))
    return facts


class AboutDialog(QDialog):
    def __init__(
        self, backend: Backend, parent: QWidget | None = None, *, muted: str = "#6b7280"
    ) -> None:
        super().__init__(parent)
        self._backend = backend
        self._muted = muted
        self.setWindowTitle("About Lectern")
        self.setObjectName("aboutDialog")
        self.resize(640, 520)

        layout = QVBoxLayout(self)
        layout.setContentsMargins(22, 20, 22, 16)
        layout.setSpacing(12)

        header = QHBoxLayout()
        logo = QLabel()
        logo.setPixmap(app_icon().pixmap(64, 64))
        header.addWidget(logo, 0, Qt.AlignmentFlag.AlignTop)
        title = QLabel(
            f"<div style='font-size: 20px; font-weight: 600'>Lectern {__version__}</div>"
            "<div>Private question answering over your own documents.</div>"
        )
        title.setTextFormat(Qt.TextFormat.RichText)
        header.addWidget(title, 1)
        layout.addLayout(header)

        tabs = QTabWidget()
        tabs.addTab(self._about_tab(backend.settings.home), "About")
        tabs.addTab(self._licences_tab(), "Third-party licences")
        layout.addWidget(tabs, 1)
        self.tabs = tabs

        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        buttons.rejected.connect(self.reject)
        layout.addWidget(buttons)
        self._load_notices()

    def _about_tab(self, data_folder: Path | None) -> QWidget:
        page = QWidget()
        column = QVBoxLayout(page)
        privacy = QLabel(PRIVACY)
        privacy.setWordWrap(True)
        column.addWidget(privacy)
        rows = "".join(
            f"<tr><td style='padding-right: 14px; color: {self._muted}'>{name}</td>"
            f"<td>{value}</td></tr>"
            for name, value in build_facts(data_folder)
        )
        facts = QLabel(f"<table>{rows}</table>")
        facts.setTextFormat(Qt.TextFormat.RichText)
        facts.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        column.addWidget(facts)
        licence = QLabel(
            "Lectern is released under the MIT licence. It is built on the open-source "
            "software listed under Third-party licences, each under its own terms."
        )
        licence.setWordWrap(True)
        column.addWidget(licence)
        column.addStretch(1)
        return page

    def _licences_tab(self) -> QWidget:
        page = QWidget()
        column = QVBoxLayout(page)
        self.filter = QLineEdit()
        self.filter.setPlaceholderText("Find a package…")
        self.filter.setClearButtonEnabled(True)
        self.filter.returnPressed.connect(self._find_next)
        self.filter.textChanged.connect(lambda _text: self._find_next(from_top=True))
        column.addWidget(self.filter)
        self.notices = QPlainTextEdit()
        self.notices.setReadOnly(True)
        self.notices.setObjectName("licenceNotices")
        font = QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont)
        font.setStyleHint(QFont.StyleHint.Monospace)
        self.notices.setFont(font)
        self.notices.setPlainText("Reading licence notices…")
        column.addWidget(self.notices, 1)
        return page

    def _load_notices(self) -> None:
        def read(_ctx: TaskContext) -> str:
            from core.notices import notices_text

            return notices_text()

        self._backend.run_local(
            read, name="licence notices", on_result=self._show_notices, on_error=self._failed
        )

    def _show_notices(self, text: str) -> None:
        self.notices.setPlainText(text)

    def _failed(self, exc: BaseException) -> None:
        self.notices.setPlainText(f"The licence notices could not be read: {exc}")

    def _find_next(self, from_top: bool = False) -> None:
        needle = self.filter.text().strip()
        if not needle:
            return
        if from_top:
            cursor = self.notices.textCursor()
            cursor.movePosition(cursor.MoveOperation.Start)
            self.notices.setTextCursor(cursor)
        if not self.notices.find(needle) and not from_top:
            self._find_next(from_top=True)
