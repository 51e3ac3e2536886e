"""The library check in the app: how well Lectern finds things in this library.

The same check as `lectern eval --library` (core/evaluation/library_check.py), run on a
worker thread. While it runs the dialog says which step it is on and how far it is (it
can take minutes: questions written by the language model one by one, and for a library
not in English both models measured on a copy of part of it), and Cancel stops it at
the next question. Its verdict is in the app's own words, with the figures per search
mode, and buttons that do what it advises: search by exact words, or switch the model.
Technical facts (where the question set is kept, the models' ids) are in a Details fold.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from core.app import ops
from core.errors import LecternError
from core.records import MODE_NAMES
from desktop.qt import (
    QDialog,
    QDialogButtonBox,
    QFrame,
    QHBoxLayout,
    QIcon,
    QLabel,
    QProgressBar,
    QPushButton,
    QScrollArea,
    QSize,
    Qt,
    QVBoxLayout,
    QWidget,
    Signal,
    named,
)
from desktop.widgets import DetailsFold, WrapLabel
from desktop.workers import describe_error, error_details

if TYPE_CHECKING:
    from core.evaluation.library_check import CheckProgress
    from desktop.backend import Backend
    from desktop.workers import Task

# Room for the verdict's four paragraphs and the table without scrolling, yet within a
# 1024x700 screen; the person can make it larger or smaller.
PREFERRED_SIZE = QSize(760, 600)
MINIMUM_SIZE = QSize(520, 400)
CHECKING = (
    "Checking: making test questions from your documents, then searching for each of them "
    "with every search mode."
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


def verdict_lines(report: dict[str, Any]) -> list[str]:
    """The verdict's paragraphs, the figures in them the table's own.

    The two models are compared on a copy of part of the library, as text: the current
    model's figure there is not the table's "Meaning only" (87 % beside 81 % in one
    verdict). What the copy is good for is the difference between the models, so that is
    what is said of it."""
    from core.evaluation.library_check import verdict

    lines = verdict(report, app=True)
    compared = report.get("models")
    if not compared:
        return lines
    before = verdict({**report, "models": None}, app=True)
    if lines[: len(before)] != before or len(lines) == len(before):
        return lines
    lines[len(before)] = comparison_words(report)
    return lines


def _how_many(points: int) -> str:
    """A difference in percentage points, as questions in every 100."""
    if points == 0:
        return "as many questions"
    return f"{abs(points)} {'more' if points > 0 else 'fewer'} questions in every 100"


def comparison_words(report: dict[str, Any]) -> str:
    """The two models compared, as the difference between them on the same copy."""
    from core.embedding.languages import ENGLISH
    from core.embedding.models import model_label

    compared = report["models"]
    current, other = report["embedding_model"], report["other_model"]
    mine, theirs = compared[current]["dense"], compared[other]["dense"]
    found = round((theirs["recall@10"] - mine["recall@10"]) * 100)
    first = round((theirs["hit@1"] - mine["hit@1"]) * 100)
    shares = (report.get("languages") or {}).get("shares") or {}
    top = next(iter(shares), ENGLISH)
    where = f"a copy of {compared['documents']} of your documents"
    lead = (
        f"Your documents are mostly {top}: searching by meaning on {where}"
        if top != ENGLISH
        else f"Searching by meaning on {where}"
    )
    than = " as" if found == 0 else " than"
    return (
        f"{lead}, {model_label(other)} found the passage for {_how_many(found)}{than} "
        f"{model_label(current)}, and as the very first result for "
        f"{_how_many(first).replace(' questions', '')}."
    )


def progress_words(p: CheckProgress, use_model: bool) -> str:
    """Where the check is, in the app's words."""
    from core.embedding.models import model_label

    if p.stage == "questions":
        how = " (the language model writes each one)" if use_model else ""
        what = f"making test questions from your documents{how}"
    elif p.stage == "search":
        what = "searching for each question with every search mode"
    else:
        what = "comparing the two search models on a copy of part of your library"
        if p.model:
            what += f", now {model_label(p.model)}"
    if p.steps > 1:
        return f"Step {p.step} of {p.steps}: {what}…"
    return f"{what[:1].upper()}{what[1:]}…"


class LibraryCheckDialog(QDialog):
    # The person took the advice on how to search: True for Exact words, False for
    # Words and meaning (the window switches to Search with that choice).
    search_mode_chosen = Signal(bool)

    def __init__(self, backend: Backend, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("libraryCheckDialog")
        self.backend = backend
        self.report: dict[str, Any] | None = None
        self.task: Task[dict[str, Any]] | None = None
        self.outcome = ""  # "" | "done" | "cancelled" | "failed"
        self._use_model = False
        self.setWindowTitle("How well Lectern finds things in your library")
        self.setSizeGripEnabled(True)
        self.setMinimumSize(MINIMUM_SIZE)
        self.resize(self._preferred_size())

        column = QVBoxLayout(self)
        column.setContentsMargins(18, 16, 18, 12)
        column.setSpacing(10)
        self.verdict = WrapLabel(objectName="libraryCheckVerdict")
        self.verdict.setTextFormat(Qt.TextFormat.PlainText)
        self.verdict.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)

        # While it runs: the step, a bar and its count.
        self.progress_box = named(QFrame(), "libraryCheckProgress")
        progress = QVBoxLayout(self.progress_box)
        progress.setContentsMargins(0, 0, 0, 0)
        progress.setSpacing(4)
        self.stage = WrapLabel(objectName="libraryCheckStage")
        self.stage.setTextFormat(Qt.TextFormat.PlainText)
        progress.addWidget(self.stage)
        bar_row = QHBoxLayout()
        self.progress_bar = named(QProgressBar(), "libraryCheckBar")
        self.progress_bar.setTextVisible(False)
        self.progress_bar.setFixedHeight(8)
        self.progress_bar.setRange(0, 0)
        bar_row.addWidget(self.progress_bar, 1)
        self.count = named(QLabel(), "muted")
        bar_row.addWidget(self.count)
        progress.addLayout(bar_row)
        self.progress_box.hide()

        # The result scrolls inside the dialog, so that a small window cuts nothing off.
        self.scroll_area = named(QScrollArea(), "libraryCheckScroll")
        self.scroll_area.setWidgetResizable(True)
        self.scroll_area.setFrameShape(QFrame.Shape.NoFrame)
        self.scroll_area.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        body = named(QWidget(), "libraryCheckBody")
        result = QVBoxLayout(body)
        result.setContentsMargins(0, 0, 6, 0)
        result.setSpacing(12)
        result.addWidget(self.verdict)
        result.addWidget(self.progress_box)
        self.table = named(QLabel(), "libraryCheckTable")
        self.table.setTextFormat(Qt.TextFormat.RichText)
        result.addWidget(self.table)
        advice = QHBoxLayout()
        advice.setSpacing(8)
        self.mode_button = named(QPushButton(), "primaryButton")
        self.mode_button.clicked.connect(self._take_mode_advice)
        self.mode_button.hide()
        self.model_button = named(QPushButton(), "primaryButton")
        self.model_button.clicked.connect(self._take_model_advice)
        self.model_button.hide()
        advice.addWidget(self.mode_button)
        advice.addWidget(self.model_button)
        advice.addStretch(1)
        result.addLayout(advice)
        self.note = WrapLabel(objectName="libraryCheckNote")
        self.note.setTextFormat(Qt.TextFormat.PlainText)
        result.addWidget(self.note)
        self.details = DetailsFold(objectName="libraryCheckDetails")
        result.addWidget(self.details)
        result.addStretch(1)
        self.scroll_area.setWidget(body)
        column.addWidget(self.scroll_area, 1)

        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        self.again = QPushButton("New questions")
        self.again.setToolTip("Make a new question set from your documents and check again")
        buttons.addButton(self.again, QDialogButtonBox.ButtonRole.ActionRole)
        self.cancel_button = QPushButton("Cancel check")
        self.cancel_button.setToolTip("Stop the check; nothing is changed")
        buttons.addButton(self.cancel_button, QDialogButtonBox.ButtonRole.ActionRole)
        self.cancel_button.hide()
        close = buttons.button(QDialogButtonBox.StandardButton.Close)
        if close is not None:
            close.setIcon(QIcon())  # some platform themes add stock icons; keep it plain
        buttons.rejected.connect(self.reject)
        self.again.clicked.connect(lambda: self.start(fresh=True))
        self.cancel_button.clicked.connect(self.cancel)
        column.addWidget(buttons)

    def _preferred_size(self) -> QSize:
        parent = self.parentWidget()
        screen = (parent.screen() if parent is not None else None) or self.screen()
        if screen is None:
            return PREFERRED_SIZE
        room = screen.availableGeometry()
        # Leave room for the window's frame and title bar on a short screen.
        return QSize(
            max(MINIMUM_SIZE.width(), min(PREFERRED_SIZE.width(), room.width() - 40)),
            max(MINIMUM_SIZE.height(), min(PREFERRED_SIZE.height(), room.height() - 60)),
        )

    # --- running ----------------------------------------------------------------------

    @property
    def running(self) -> bool:
        return self.task is not None

    def start(self, fresh: bool = False) -> None:
        if self.task is not None:
            return
        self.again.setEnabled(False)
        self.outcome = ""  # (``report`` stays the last one made until a new one is)
        self.table.clear()
        self.note.clear()
        self.details.set_details("")
        self.mode_button.hide()
        self.model_button.hide()
        self.verdict.setText(CHECKING)
        self.stage.setText("Starting…")
        self.count.clear()
        self.progress_bar.setRange(0, 0)
        self.progress_box.show()
        self.cancel_button.setEnabled(True)
        self.cancel_button.show()
        # The questions are written by the configured model when it answers.
        self._use_model = use_model = self.backend.llm.status.state == "ready"
        task = self.backend.run(
            ops.library_check(fresh, use_model),
            on_result=self._show,
            on_error=self._failed,
            on_progress=self._progress,
            min_interval_s=0.1,
        )
        self.task = task
        if task is None:
            self._stopped()

    def cancel(self) -> None:
        """Stop the check at its next question (a question the model is writing is
        finished first: seconds at most)."""
        if self.task is None:
            return
        self.task.cancel()
        self.cancel_button.setEnabled(False)
        self.stage.setText("Cancelling…")

    def _progress(self, value: object) -> None:
        from core.evaluation.library_check import CheckProgress

        if self.task is None or not isinstance(value, CheckProgress):
            return
        if self.task.context.cancelled:
            return  # "Cancelling…" stays until it has
        self.stage.setText(progress_words(value, self._use_model))
        if value.total > 0:
            self.progress_bar.setRange(0, value.total)
            self.progress_bar.setValue(min(value.done, value.total))
            self.count.setText(f"{value.done} of {value.total}")
        else:
            self.progress_bar.setRange(0, 0)
            self.count.clear()

    def _stopped(self) -> None:
        self.task = None
        self.progress_box.hide()
        self.cancel_button.hide()
        self.again.setEnabled(True)

    def _show(self, report: dict[str, Any]) -> None:
        if self.task is None:
            return  # closed meanwhile
        self._stopped()
        self.show_report(report)

    def show_report(self, report: dict[str, Any]) -> None:
        """The verdict of ``report`` in the app's words, with a button per advice."""
        self.outcome = "done"
        self.report = report
        # No model advice while the library changes model: the switch may have begun
        # after the check did (the offer, Settings), and it is advised already.
        snapshot = self.backend.view.snapshot
        switching = bool(snapshot and snapshot.switching) or (
            report.get("embedding_model") is not None
            and self.backend.settings.embedding_model != report["embedding_model"]
        )
        shown = dict(report)
        if switching:
            shown.pop("models", None)
            shown["switching"] = True
        self.verdict.setText("\n\n".join(verdict_lines(shown)))
        self.table.setText(figures_table(report))
        self._offer(report, switching)
        kept = "the same questions as last time" if report["reused"] else "a new question set"
        self.note.setText(
            f"{report['questions']} questions, {kept}, kept so that later checks compare "
            "like with like. Nothing leaves this computer."
        )
        self.details.set_details(self._details(report))

    def _offer(self, report: dict[str, Any], switching: bool) -> None:
        """A button for each piece of advice the verdict gives."""
        from core.embedding.models import model_label

        mode = report.get("advised_mode") or ""
        self.mode_button.setEnabled(True)
        if mode:
            words_only = mode == "bm25"
            name = MODE_NAMES["bm25" if words_only else "hybrid"]
            self.mode_button.setText(f"Search by {name.lower()}")
            self.mode_button.setToolTip(f"Go to Search with {name} chosen")
            self.mode_button.setProperty("wordsOnly", words_only)
        self.mode_button.setVisible(bool(mode))
        model = "" if switching else str(report.get("advised_model") or "")
        self.model_button.setEnabled(True)
        if model:
            label = model_label(model)
            self.model_button.setText(f"Switch to {label}")
            self.model_button.setToolTip(
                f"Re-embed the library with {label} in the background; search keeps using "
                "the current model until it is done"
            )
            self.model_button.setProperty("model", model)
        self.model_button.setVisible(bool(model))

    @staticmethod
    def _details(report: dict[str, Any]) -> str:
        lines = [
            f"Question set: {report['set']}",
            f"Searching took {report.get('seconds', 0)} s; search model: "
            f"{report.get('embedding_model', '')}.",
        ]
        compared = report.get("models")
        if compared:
            for model in (report["embedding_model"], report["other_model"]):
                dense = compared[model]["dense"]
                lines.append(
                    f"{model}, meaning search on a copy of {compared['documents']} documents "
                    f"as text: recall@10 {dense['recall@10']:.2f}, MRR@10 {dense['mrr@10']:.2f}"
                )
        return "\n".join(lines)

    def _take_mode_advice(self) -> None:
        words_only = bool(self.mode_button.property("wordsOnly"))
        self.search_mode_chosen.emit(words_only)
        self.mode_button.setEnabled(False)
        self.mode_button.setText("Search is set")

    def _take_model_advice(self) -> None:
        model = str(self.model_button.property("model") or "")
        if not model:
            return
        self.backend.indexing.switch_model(model)
        self.model_button.setEnabled(False)
        self.model_button.setText("Switching in the background…")

    def _failed(self, exc: BaseException) -> None:
        from core.evaluation.library_check import CheckCancelled

        if self.task is None:
            return
        self._stopped()
        if isinstance(exc, CheckCancelled):
            self.outcome = "cancelled"
            self.verdict.setText(f"{exc.message} {exc.hint}")
            return
        self.outcome = "failed"
        if isinstance(exc, LecternError):
            message, hint = describe_error(exc)
        else:
            # A fault of Lectern's own: its name is for a bug report, not the sentence.
            message = "something unexpected went wrong."
            hint = "Try again; if it keeps happening, restart Lectern."
            self.details.set_details(error_details(exc))
        self.verdict.setText(f"The check could not run: {message} {hint}".strip())

    def done(self, result: int) -> None:
        # Closing stops a check still running; its late reply is then ignored.
        if self.task is not None:
            self.task.cancel()
            self.task = None
        super().done(result)
