"""The library check in the app: how well Lectern finds things in this library.

The same check as `lectern eval --library` (core/evaluation/library_check.py), run on a worker thread;
the dialog shows its verdict in plain words, the figures per search mode, and offers a
new question set. The configured language model writes the questions when it runs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from core.records import MODE_NAMES
from desktop.qt import (
    QDialog,
    QDialogButtonBox,
    QLabel,
    QPushButton,
    Qt,
    QVBoxLayout,
    QWidget,
    named,
)
from desktop.workers import describe_error

if TYPE_CHECKING:
    from core.library import Library
    from desktop.backend import Backend
    from desktop.workers import TaskContext


def run_check(library: Library, fresh: bool, use_model: bool) -> dict[str, Any]:
    """The check, with questions written by the configured model when it answers."""
    from core.evaluation.library_check import check_library, model_writer

    return check_library(
        library, fresh=fresh, ask_model=model_writer(library) if use_model else None
    )


def figures_table(report: dict[str, Any]) -> str:
    """The per-mode figures as a small rich-text table."""
    rows = "".join(
        f"<tr><td>{MODE_NAMES.get(mode, mode)}</td>"
        f"<td align='right'>{figures['recall@10'] * 100:.0f} %</td>"
        f"<td align='right'>{figures['hit@1'] * 100:.0f} %</td></tr>"
        for mode, figures in report["modes"].items()
    )
    return (
        "<table cellspacing='0' cellpadding='4'><tr><th align='left'>Search</th>"
        "<th>found in the first 10</th><th>found first</th></tr>" + rows + "</table>"
    )


class LibraryCheckDialog(QDialog):
    def __init__(self, backend: Backend, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.backend = backend
        self.report: dict[str, Any] | None = None
        self.setWindowTitle("How well Lectern finds things in your library")
        self.setMinimumWidth(520)
        column = QVBoxLayout(self)
        self.verdict = named(QLabel(), "libraryCheckVerdict")
        self.verdict.setWordWrap(True)
        self.verdict.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        column.addWidget(self.verdict)
        self.table = named(QLabel(), "libraryCheckTable")
        self.table.setTextFormat(Qt.TextFormat.RichText)
        column.addWidget(self.table)
        self.note = named(QLabel(), "libraryCheckNote")
        self.note.setWordWrap(True)
        column.addWidget(self.note)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        self.again = QPushButton("New questions")
        self.again.setToolTip("Make a new question set from your documents and check again")
        buttons.addButton(self.again, QDialogButtonBox.ButtonRole.ActionRole)
        buttons.rejected.connect(self.reject)
        self.again.clicked.connect(lambda: self.start(fresh=True))
        column.addWidget(buttons)

    def start(self, fresh: bool = False) -> None:
        self.again.setEnabled(False)
        self.table.clear()
        self.note.clear()
        self.verdict.setText(
            "Checking: making test questions from your documents and searching for each "
            "of them with every search mode. This can take a minute."
        )
        use_model = self.backend.llm_status.state == "ready"

        def work(library: Library, _ctx: TaskContext) -> dict[str, Any]:
            return run_check(library, fresh, use_model)

        task = self.backend.run(
            work, name="library check", on_result=self._show, on_error=self._failed
        )
        if task is None:
            self.again.setEnabled(True)

    def _show(self, report: dict[str, Any]) -> None:
        self.report = report
        self.verdict.setText("\n\n".join(report["lines"]))
        self.table.setText(figures_table(report))
        kept = "the same questions as last time" if report["reused"] else "a new question set"
        self.note.setText(
            f"{report['questions']} questions, {kept}, kept in {report['set']} so that later "
            "checks compare like with like. Nothing leaves this computer."
        )
        self.again.setEnabled(True)

    def _failed(self, exc: BaseException) -> None:
        message, hint = describe_error(exc)
        self.verdict.setText(f"The check could not run: {message} {hint}".strip())
        self.again.setEnabled(True)
