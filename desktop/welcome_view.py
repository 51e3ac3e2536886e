"""The first-run and empty state: what to do next (add a folder, start a model server)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from desktop.library_view import LibrarySnapshot
from desktop.model_probe import LLMStatus
from desktop.qt import (
    QFrame,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QScrollArea,
    Qt,
    QVBoxLayout,
    QWidget,
    Signal,
    named,
)
from desktop.rich import (
    esc,
)
from desktop.theme import Palette, Theme, icon


def format_name(kind: str) -> str:
    """What a person calls the file type ``kind`` in a sentence ("OpenDocument", "e-mail"),
    from the format table (core/formats.py)."""
    from core.formats import family_name

    return family_name(kind)


def readable_formats() -> str:
    """Every kind of file Lectern reads, named as a person would, in one phrase from the
    format table: "PDF, Word (.docx), Markdown, …, e-mail (.eml, .mbox) and Org mode"."""
    from core.formats import readable_formats as every_format

    return every_format()


class WelcomeView(QScrollArea):
    add_folder = Signal()
    open_settings = Signal()
    check_again = Signal()
    pull_model = Signal(str)
    use_model = Signal(str)

    def __init__(self, theme: Theme, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("welcome")
        self.theme = theme
        self.snapshot: LibrarySnapshot | None = None
        self.status: LLMStatus | None = None
        # Scrollable, so every step stays whole in a short window.
        self.setWidgetResizable(True)
        self.setFrameShape(QFrame.Shape.NoFrame)
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        inner = named(QWidget(), "welcomeInner")
        self.setWidget(inner)
        outer = QVBoxLayout(inner)
        outer.setContentsMargins(24, 24, 24, 24)
        outer.addStretch(1)
        column = QWidget()
        column.setMaximumWidth(640)
        col = QVBoxLayout(column)
        col.setSpacing(14)
        self.logo = QLabel()
        self.logo.setAlignment(Qt.AlignmentFlag.AlignCenter)
        col.addWidget(self.logo)
        self.title = named(QLabel("Ask your documents"), "welcomeTitle")
        self.title.setAlignment(Qt.AlignmentFlag.AlignCenter)
        col.addWidget(self.title)
        self.subtitle = named(
            QLabel(
                "Lectern answers from your own files and shows the exact sentences it used. "
                "Everything stays on this computer."
            ),
            "welcomeSubtitle",
        )
        self.subtitle.setWordWrap(True)
        self.subtitle.setAlignment(Qt.AlignmentFlag.AlignCenter)
        col.addWidget(self.subtitle)
        col.addSpacing(6)

        self.step_docs = self._step()
        self.step_llm = self._step()
        self.step_ask = self._step()
        for step in (self.step_docs, self.step_llm, self.step_ask):
            col.addWidget(step["frame"])
        row = QHBoxLayout()
        row.addStretch(1)
        row.addWidget(column, 100)
        row.addStretch(1)
        outer.addLayout(row)
        outer.addStretch(2)
        theme.changed.connect(lambda _p: self.refresh())
        self.refresh()

    def _step(self) -> dict[str, Any]:
        frame = named(QFrame(), "stepCard")
        lay = QHBoxLayout(frame)
        lay.setContentsMargins(16, 14, 16, 14)
        lay.setSpacing(14)
        mark = named(QLabel(), "stepNumber")
        mark.setFixedSize(28, 28)
        mark.setAlignment(Qt.AlignmentFlag.AlignCenter)
        lay.addWidget(mark, 0, Qt.AlignmentFlag.AlignTop)
        text_col = QVBoxLayout()
        text_col.setSpacing(4)
        title = named(QLabel(), "stepTitle")
        title.setWordWrap(True)
        body = named(QLabel(), "stepBody")
        body.setWordWrap(True)
        body.setTextFormat(Qt.TextFormat.RichText)
        body.setTextInteractionFlags(
            Qt.TextInteractionFlag.TextSelectableByMouse
            | Qt.TextInteractionFlag.LinksAccessibleByMouse
        )
        body.setOpenExternalLinks(True)
        text_col.addWidget(title)
        text_col.addWidget(body)
        buttons = QHBoxLayout()
        buttons.setSpacing(8)
        text_col.addLayout(buttons)
        lay.addLayout(text_col, 1)
        return {"frame": frame, "mark": mark, "title": title, "body": body, "buttons": buttons}

    def _set_step(
        self,
        step: dict[str, Any],
        number: int,
        state: str,
        title: str,
        body: str,
        actions: Sequence[tuple[str, Any, bool]] = (),
    ) -> None:
        palette = self.theme.palette
        mark: QLabel = step["mark"]
        if state == "done":
            mark.setPixmap(icon("check", palette.success, 26).pixmap(26, 26))
            mark.setProperty("state", "done")
        elif state == "problem":
            mark.setPixmap(icon("warning", palette.warning_text, 24).pixmap(24, 24))
            mark.setProperty("state", "problem")
        else:
            mark.setText(str(number))
            mark.setProperty("state", "todo")
        mark.style().unpolish(mark)
        mark.style().polish(mark)
        step["title"].setText(title)
        step["body"].setText(body)
        step["body"].setVisible(bool(body))
        buttons: QHBoxLayout = step["buttons"]
        while buttons.count():
            item = buttons.takeAt(0)
            widget = item.widget() if item is not None else None
            if widget:
                # Hidden at once: until the event loop deletes it, an old button was
                # still drawn, stretched over the step.
                widget.hide()
                widget.deleteLater()
        for text, slot, primary in actions:
            button = named(QPushButton(text), "primaryButton" if primary else "secondaryButton")
            button.clicked.connect(slot)
            buttons.addWidget(button)
        buttons.addStretch(1)

    def set_snapshot(self, snapshot: LibrarySnapshot) -> None:
        self.snapshot = snapshot
        self._refresh_if_changed()

    def set_llm_status(self, status: LLMStatus) -> None:
        self.status = status
        self._refresh_if_changed()

    def _refresh_if_changed(self) -> None:
        # Snapshots arrive every second or so while indexing; rebuild only on a change.
        snap = self.snapshot
        key = (
            len(snap.folders) if snap else 0,
            snap.documents if snap else 0,
            self.status,
            self.theme.palette.name,
        )
        if key != getattr(self, "_shown", None):
            self._shown = key
            self.refresh()

    def refresh(self) -> None:
        palette = self.theme.palette
        from desktop.theme import app_icon

        self.logo.setPixmap(app_icon().pixmap(64, 64))
        snap = self.snapshot
        folders = len(snap.folders) if snap else 0
        if folders:
            files = snap.documents if snap else 0
            self.title.setText("Ask your documents")
            self._set_step(
                self.step_docs,
                1,
                "done",
                f"{folders} folder{'s' if folders != 1 else ''} in your library",
                f"{files} file{'s' if files != 1 else ''} indexed. Drop more folders anywhere on this window.",
            )
        else:
            self.title.setText("Welcome to Lectern")
            self._set_step(
                self.step_docs,
                1,
                "todo",
                "Add a folder of documents",
                "Drop a folder anywhere on this window, or choose one. Lectern reads "
                f"{esc(readable_formats())} files, and keeps watching the folder for changes.",
                [("Add folder…", self.add_folder.emit, True)],
            )
        self._llm_step(palette)
        self._set_step(
            self.step_ask,
            3,
            "todo",
            "Ask a question",
            "Type it below and press Enter. Every answer cites its sources: click a number to "
            "see the highlighted passage. Switch to <b>Search</b> for ranked passages instead.",
        )

    def _llm_step(self, palette: Palette) -> None:
        status = self.status
        step = self.step_llm
        if status is None or status.state == "checking":
            self._set_step(step, 2, "todo", "Checking for a language model…", "")
            return
        url = esc(status.url or "")
        if status.ready:
            self._set_step(
                step,
                2,
                "done",
                f"Language model ready: {status.model}",
                f"Answers are written by {esc(status.model)} on {status.server_name} at {url}.",
                [("Change…", self.open_settings.emit, False)],
            )
            return
        fallback = (
            "Until then, Lectern answers with <b>no model</b>, by quoting the best "
            "matching sentences from your documents, with their sources."
        )
        server = status.backend
        if status.state == "unreachable" and server is not None and server.install_url:
            # A server one installs: how to install, start and fill it, step by step.
            name = server.server_name
            pull = server.pull_command(status.model or "llama3.2")
            body = (
                f"Lectern did not find {name} at {url}. To get written answers:"
                "<ol style='margin:4px 0 4px 0;'>"
                f"<li>Install {name} from <a href='{server.install_url}'>"
                f"{server.install_url.split('://', 1)[-1]}</a>.</li>"
                f"<li>Start it: open the {name} app, or run <code>{server.serve_command}</code>.</li>"
                + (
                    f"<li>Download a model: <code>{esc(pull)}</code>"
                    " (or use the button that appears here).</li>"
                    if pull
                    else ""
                )
                + "<li>Click <b>Check again</b>.</li></ol>"
                + fallback
            )
            self._set_step(
                step,
                2,
                "problem",
                "Optional: connect a language model",
                body,
                [
                    ("Check again", self.check_again.emit, True),
                    ("Use another server…", self.open_settings.emit, False),
                ],
            )
        elif status.state == "invalid":
            self._set_step(
                step,
                2,
                "problem",
                "The model server address is not valid",
                f"{esc(status.message)} {esc(status.hint)}<br>{fallback}",
                [
                    ("Open Settings…", self.open_settings.emit, True),
                    ("Check again", self.check_again.emit, False),
                ],
            )
        elif status.state == "unreachable":
            self._set_step(
                step,
                2,
                "problem",
                "The model server is not answering",
                f"{esc(status.message)} {esc(status.hint)}<br>{fallback}",
                [
                    ("Check again", self.check_again.emit, True),
                    ("Settings…", self.open_settings.emit, False),
                ],
            )
        elif status.state == "no_models":
            model = status.model or "llama3.2"
            self._set_step(
                step,
                2,
                "problem",
                f"{status.server_name.capitalize()} is running but has no model yet",
                f"Download one to get written answers: {esc(model)} is about 2 GB and runs on "
                f"most laptops. Or run <code>ollama pull {esc(model)}</code> yourself.<br>{fallback}",
                [
                    (f"Download {model}", lambda: self.pull_model.emit(model), True),
                    ("Choose a model…", self.open_settings.emit, False),
                ],
            )
        elif status.state == "model_missing":
            other = status.models[0] if status.models else ""
            actions: list[tuple[str, Any, bool]] = []
            if server is not None and server.can_download_models:
                actions.append(
                    (f"Download {status.model}", lambda: self.pull_model.emit(status.model), True)
                )
            if other:
                actions.append((f"Use {other}", lambda: self.use_model.emit(other), not actions))
            actions.append(("Settings…", self.open_settings.emit, False))
            self._set_step(
                step,
                2,
                "problem",
                f"The model {status.model} is not installed",
                f"The server has {esc(', '.join(status.models[:4]))}. Download {esc(status.model)}, "
                f"or use one that is there.<br>{fallback}",
                actions,
            )
        else:
            self._set_step(
                step,
                2,
                "problem",
                "The model server has a problem",
                f"{esc(status.message)} {esc(status.hint)}<br>{fallback}",
                [
                    ("Check again", self.check_again.emit, True),
                    ("Settings…", self.open_settings.emit, False),
                ],
            )
