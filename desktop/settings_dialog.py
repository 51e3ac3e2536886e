"""Settings: the model server, the model (picked from what the server has, or downloaded
with a progress bar), how many sources an answer uses, light or dark, and when indexing
runs (always, only while the computer is idle, or within a share of its CPU)."""

from __future__ import annotations

from typing import Any

from core.config import Settings
from core.generation.llm_order import LLM_RERANK_CANDIDATES
from core.generation.pull import byte_size
from core.indexing.throttle import IDLE_THRESHOLD, Throttle, cpu_cores
from core.llm import BACKENDS, backend_for
from desktop.backend import Backend
from desktop.model_probe import LLMStatus, model_matches, probe_llm
from desktop.qt import (
    QCheckBox,
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QEvent,
    QFormLayout,
    QFrame,
    QHBoxLayout,
    QIcon,
    QLabel,
    QLineEdit,
    QProgressBar,
    QPushButton,
    QScrollArea,
    QSize,
    QSpinBox,
    QStandardItemModel,
    Qt,
    QVBoxLayout,
    QWidget,
    Signal,
    named,
)
from desktop.theme import Theme
from desktop.workers import Task, TaskContext, describe_error

KINDS = tuple((key, backend.display_name) for key, backend in BACKENDS.items())
APPEARANCES = (("system", "Follow the system"), ("light", "Light"), ("dark", "Dark"))
SUGGESTED_MODELS = ("llama3.2", "qwen2.5:3b", "mistral", "gemma3:4b", "phi4-mini")
INDEX_WHEN = (
    ("always", "Always"),
    ("idle", "Only when the computer is idle"),
    ("share", "Using at most a share of the CPU"),
)


class SettingsDialog(QDialog):
    pulled = Signal(str)

    def __init__(
        self,
        backend: Backend,
        theme: Theme,
        appearance: str,
        parent: QWidget | None = None,
        *,
        start_pull: str | None = None,
    ) -> None:
        super().__init__(parent)
        self.setWindowTitle("Settings")
        self.setObjectName("settingsDialog")
        self.setMinimumWidth(560)
        self.backend = backend
        self.theme = theme
        self.appearance = appearance
        self.models_task: Task[Any] | None = None
        self.pull_task: Task[Any] | None = None
        settings = backend.settings

        # The form scrolls inside the dialog: on a short screen (1024x700) the dialog is
        # capped at the screen's height, and a capped layout squeezes its labels until
        # their words are cut. The buttons stay outside, always in view.
        outer = QVBoxLayout(self)
        outer.setContentsMargins(0, 0, 0, 16)
        outer.setSpacing(0)
        self.scroll_area = named(QScrollArea(), "settingsScroll")
        self.scroll_area.setWidgetResizable(True)
        self.scroll_area.setFrameShape(QFrame.Shape.NoFrame)
        self.scroll_area.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.body = named(QWidget(), "settingsBody")
        self.scroll_area.setWidget(self.body)
        outer.addWidget(self.scroll_area, 1)
        layout = QVBoxLayout(self.body)
        layout.setContentsMargins(22, 20, 22, 8)
        layout.setSpacing(14)

        title = named(QLabel("Language model"), "dialogSection")
        layout.addWidget(title)
        intro = named(
            QLabel(
                "Lectern writes answers with a model running on this computer (or on a server "
                "you choose). Without one it still answers, by quoting the best sentences from "
                "your documents."
            ),
            "muted",
        )
        intro.setWordWrap(True)
        layout.addWidget(intro)

        form = QFormLayout()
        form.setLabelAlignment(Qt.AlignmentFlag.AlignRight)
        form.setHorizontalSpacing(14)
        form.setVerticalSpacing(10)
        self.kind = QComboBox()
        for key, label in KINDS:
            self.kind.addItem(label, key)
        kinds = [k for k, _ in KINDS]
        self.kind.setCurrentIndex(
            kinds.index(settings.llm_kind) if settings.llm_kind in kinds else 0
        )
        self.kind.currentIndexChanged.connect(self._kind_switched)
        form.addRow("Server", self.kind)

        url_row = QHBoxLayout()
        self.url = QLineEdit(settings.llm_url)
        self.url.setClearButtonEnabled(True)
        url_row.addWidget(self.url, 1)
        self.test_button = named(QPushButton("Test connection"), "secondaryButton")
        self.test_button.clicked.connect(self.refresh_models)
        url_row.addWidget(self.test_button)
        form.addRow("Address", url_row)

        self.api_key = QLineEdit(settings.llm_api_key)
        self.api_key.setEchoMode(QLineEdit.EchoMode.Password)
        self.api_key.setPlaceholderText("Only if your server asks for one")
        self.api_key_label = QLabel("API key")
        form.addRow(self.api_key_label, self.api_key)

        model_row = QHBoxLayout()
        self.model = QComboBox()
        self.model.setEditable(True)
        self.model.setMinimumWidth(260)
        self.model.setCurrentText(settings.llm_model)
        self.model.setToolTip("Models installed on the server; you can also type a name")
        line = self.model.lineEdit()
        if line is not None:
            line.setPlaceholderText("Choose one of the server's models")
        model_row.addWidget(self.model, 1)
        self.refresh_button = named(QPushButton("Refresh"), "secondaryButton")
        self.refresh_button.setToolTip("Ask the server again which models it has")
        self.refresh_button.clicked.connect(self.refresh_models)
        model_row.addWidget(self.refresh_button)
        form.addRow("Model", model_row)

        self.server_status = named(QLabel(), "muted")
        self.server_status.setWordWrap(True)
        self.server_status.setTextFormat(Qt.TextFormat.RichText)
        form.addRow("", self.server_status)
        layout.addLayout(form)

        self.pull_box = named(QFrame(), "pullBox")
        pull = QVBoxLayout(self.pull_box)
        pull.setContentsMargins(14, 12, 14, 12)
        pull.setSpacing(8)
        pull_title = named(QLabel("Download a model into Ollama"), "stepTitle")
        pull.addWidget(pull_title)
        prow = QHBoxLayout()
        self.pull_name = QComboBox()
        self.pull_name.setEditable(True)
        self.pull_name.addItems(SUGGESTED_MODELS)
        self.pull_name.setCurrentText(start_pull or settings.llm_model or SUGGESTED_MODELS[0])
        self.pull_name.setToolTip(
            "Any name from ollama.com/library, for example llama3.2 or qwen2.5:7b"
        )
        prow.addWidget(self.pull_name, 1)
        self.pull_button = named(QPushButton("Download"), "primaryButton")
        self.pull_button.clicked.connect(self._pull_clicked)
        prow.addWidget(self.pull_button)
        pull.addLayout(prow)
        self.pull_progress = QProgressBar()
        self.pull_progress.setRange(0, 1000)
        self.pull_progress.setTextVisible(False)
        self.pull_progress.setFixedHeight(8)
        self.pull_progress.hide()
        pull.addWidget(self.pull_progress)
        self.pull_status = named(QLabel(), "muted")
        self.pull_status.setWordWrap(True)
        pull.addWidget(self.pull_status)
        layout.addWidget(self.pull_box)

        section = named(QLabel("Answers and appearance"), "dialogSection")
        layout.addWidget(section)
        form2 = QFormLayout()
        form2.setLabelAlignment(Qt.AlignmentFlag.AlignRight)
        form2.setHorizontalSpacing(14)
        self.top_k = QSpinBox()
        self.top_k.setRange(1, 20)
        self.top_k.setValue(settings.top_k)
        self.top_k.setMaximumWidth(90)
        self.top_k.setToolTip(
            "How many passages an answer is built from. More gives fuller answers but needs a "
            "model with a larger context window and takes longer."
        )
        form2.addRow("Sources per answer", self.top_k)
        self.llm_rerank = QCheckBox("Let the language model put them in order (slower)")
        self.llm_rerank.setChecked(settings.llm_rerank)
        self.llm_rerank.setToolTip(
            f"Before answering, the model reads the {LLM_RERANK_CANDIDATES} best passages "
            "search found and picks the most helpful. This can find a better source, but the "
            "answer starts seconds later; each answer shows how long it took."
        )
        form2.addRow("", self.llm_rerank)
        self.theme_box = QComboBox()
        for key, label in APPEARANCES:
            self.theme_box.addItem(label, key)
        looks = [k for k, _ in APPEARANCES]
        self.theme_box.setCurrentIndex(looks.index(appearance) if appearance in looks else 0)
        form2.addRow("Appearance", self.theme_box)
        self._indexing_group(form2, settings)
        layout.addLayout(form2)

        data = named(
            QLabel(
                f"Your library is stored in {settings.home}. Nothing is sent anywhere except to "
                "the model server above."
            ),
            "faint",
        )
        data.setWordWrap(True)
        data.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        layout.addWidget(data)

        buttons = QDialogButtonBox(
            QDialogButtonBox.StandardButton.Save | QDialogButtonBox.StandardButton.Cancel
        )
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        save = buttons.button(QDialogButtonBox.StandardButton.Save)
        cancel = buttons.button(QDialogButtonBox.StandardButton.Cancel)
        save.setObjectName("primaryButton")
        cancel.setObjectName("secondaryButton")
        for button in (save, cancel):
            button.setIcon(QIcon())  # some platform themes add stock icons; keep it plain
        self.buttons = buttons
        button_row = QHBoxLayout()
        button_row.setContentsMargins(22, 8, 22, 0)
        button_row.addWidget(buttons)
        outer.addLayout(button_row)

        self._kind_changed()
        self.refresh_models()
        if start_pull:
            self.start_pull(start_pull)

    def event(self, event: QEvent) -> bool:
        handled = super().event(event)
        if event.type() == QEvent.Type.LayoutRequest:
            self._fit_height()
        return handled

    def _needed_height(self, width: int) -> int:
        """The dialog's height with the whole form in view at ``width``, up to the
        screen's height (past that the form scrolls)."""
        body = self.body.layout()
        if body is None:
            return 0
        form = max(
            body.totalHeightForWidth(width) if body.hasHeightForWidth() else 0,
            body.totalMinimumSize().height(),
        )
        chrome = self.height() - self.scroll_area.viewport().height() if self.isVisible() else 64
        need = form + max(chrome, 0)
        screen = self.screen().availableGeometry().height() if self.screen() else need
        return min(need, screen)

    def sizeHint(self) -> QSize:
        # A scroll area hints a small height; adjustSize() would shrink the dialog to it.
        hint = super().sizeHint()
        return QSize(hint.width(), max(hint.height(), self._needed_height(hint.width())))

    def _fit_height(self) -> None:
        """Grow to hold a status that wrapped onto more lines: a top-level window keeps
        its size when a label inside it grows."""
        if not self.isVisible():
            return
        need = self._needed_height(self.scroll_area.viewport().width())
        if need > self.height():
            self.resize(self.width(), need)

    # --- reading the form ------------------------------------------------------------------

    def form_settings(self) -> Settings:
        return self.backend.settings.with_changes(
            llm_kind=str(self.kind.currentData()),
            llm_url=self.url.text().strip(),
            llm_model=self.model_name() or self.backend.settings.llm_model,
            llm_api_key=self.api_key.text().strip(),
            top_k=int(self.top_k.value()),
            llm_rerank=self.llm_rerank.isChecked(),
            index_when=str(self.index_when.currentData()),
            index_cpu_share=int(self.cpu_share.value()),
        )

    def _indexing_group(self, form: QFormLayout, settings: Settings) -> None:
        """Index: always, only while the computer is idle, or at most N % of its CPU (in
        the form above, so that the labels line up)."""
        section = named(QLabel("Indexing"), "dialogSection")
        section.setContentsMargins(0, 10, 0, 0)
        form.addRow(section)
        self.index_when = QComboBox()
        self.index_when.setObjectName("indexWhen")
        for key, label in INDEX_WHEN:
            self.index_when.addItem(label, key)
        if not Throttle.idle_available():
            # This system does not tell how busy it is: the choice could never work.
            model = self.index_when.model()
            if isinstance(model, QStandardItemModel):  # a combo box's own model
                item = model.item(1)
                item.setEnabled(False)
                item.setToolTip("This system does not report how busy it is")
        keys = [k for k, _ in INDEX_WHEN]
        self.index_when.setCurrentIndex(
            keys.index(settings.index_when) if settings.index_when in keys else 0
        )
        form.addRow("Index", self.index_when)
        self.cpu_share = QSpinBox()
        self.cpu_share.setObjectName("indexCpuShare")
        self.cpu_share.setRange(1, 100)
        self.cpu_share.setSingleStep(5)
        self.cpu_share.setSuffix(" % of the CPU")
        self.cpu_share.setValue(settings.index_cpu_share)
        self.cpu_share.setMaximumWidth(160)
        form.addRow("At most", self.cpu_share)
        self._index_form = form
        cores = cpu_cores()
        self.index_note = named(QLabel(), "muted")
        self.index_note.setWordWrap(True)
        self._core_words = f"The share is of the whole computer, all {cores} cores together" + (
            f": {100 // cores} % is one core." if cores > 1 else "."
        )
        form.addRow(self.index_note)
        self.index_when.currentIndexChanged.connect(self._index_when_changed)
        self._index_when_changed()

    def _index_when_changed(self, *_: object) -> None:
        when = self.index_when.currentData()
        # The share applies only to its own choice: elsewhere an editable "At most 50 %"
        # reads as a limit in force (the style draws a disabled box like an enabled one).
        self.cpu_share.setEnabled(when == "share")
        self._index_form.setRowVisible(self.cpu_share, when == "share")
        notes = {
            "always": "Lectern indexes as fast as it can, at a low priority so that your "
            "own work comes first.",
            "idle": "Indexing waits while other programs together use more than "
            f"{IDLE_THRESHOLD * 100:.0f} % of the processor, and looks again every few seconds. "
            "Finished files stay searchable meanwhile.",
            "share": "Indexing rests between files and batches so that it uses no more "
            f"than this share of the processor. {self._core_words}",
        }
        self.index_note.setText(
            notes.get(str(when), "") + " This applies at once, also to indexing in progress."
        )

    @property
    def chosen_appearance(self) -> str:
        return str(self.theme_box.currentData())

    def _kind_switched(self, *_: object) -> None:
        """Another kind of server: the model named was the old server's, so the field is
        emptied and filled again from what the new one lists (in the background)."""
        self._kind_changed()
        self.model.clear()
        self.model.setEditText("")
        self.refresh_models()

    def _kind_changed(self, *_: object) -> None:
        server = backend_for(str(self.kind.currentData()))
        self.url.setPlaceholderText(server.url_placeholder(self.backend.settings))
        self.api_key.setVisible(server.takes_api_key)
        self.api_key_label.setVisible(server.takes_api_key)
        self.pull_box.setVisible(server.can_download_models)

    # --- models ---------------------------------------------------------------------------

    def model_name(self) -> str:
        """The chosen model without the size its list entry shows ("qwen3 · 2.0 GB")."""
        return self.model.currentText().split(" · ", 1)[0].strip()

    def refresh_models(self) -> None:
        settings = self.form_settings()
        self.server_status.setText("Connecting…")
        if self.models_task is not None:
            self.models_task.cancel()

        def probe(ctx: TaskContext) -> LLMStatus:
            return probe_llm(settings)

        task = self.backend.run_local(
            probe, name="list models", on_result=lambda status: self._models(task, status)
        )
        self.models_task = task

    def _models(self, task: Task[Any], status: LLMStatus) -> None:
        if task is not self.models_task:
            return
        palette = self.theme.palette
        current = self.model_name()
        if status.models:
            self.model.blockSignals(True)
            self.model.clear()
            for name in status.models:
                # The size says what a model costs in disk and memory before it is chosen.
                size = status.size_of(name)
                self.model.addItem(f"{name} · {byte_size(size)}" if size else name, name)
            match = next((m for m in status.models if model_matches(current, m)), None)
            if match is None and status.model in status.models:
                # A single-model server answers to any name with its own (llama.cpp).
                match = status.model
            if match is None and not current and len(status.models) == 1:
                match = status.models[0]
            # An empty field (another kind of server was chosen) stays empty until the
            # person picks one: its placeholder asks them to.
            self.model.setCurrentText(match or current)
            self.model.blockSignals(False)
            current = self.model_name()
        if status.state == "ready":
            text = f'<span style="color:{palette.success};">✓ Connected to {status.url}</span> · {len(status.models)} model(s) installed'
        elif status.state == "model_missing" and not current:
            text = (
                f'<span style="color:{palette.success};">✓ Connected to {status.url}</span> · '
                f"choose one of its {len(status.models)} models above."
            )
        elif status.state == "model_missing" and current in status.models:
            # The model the form names now, not the one the server was asked about.
            text = f'<span style="color:{palette.success};">✓ Connected to {status.url}</span> · {len(status.models)} model(s) installed'
        elif status.state == "model_missing":
            text = (
                f'<span style="color:{palette.success};">✓ Connected to {status.url}</span> · '
                f'<span style="color:{palette.warning_text};">“{current}” is not installed: pick one above or download it below.</span>'
            )
        elif status.state == "no_models":
            text = (
                f'<span style="color:{palette.warning_text};">Connected, but the server has no models yet.</span> '
                "Download one below."
            )
        else:
            text = (
                f'<span style="color:{palette.error_text};">{status.message}</span> {status.hint}'
            )
        self.server_status.setText(text)

    # --- pulling ---------------------------------------------------------------------------

    def _pull_clicked(self) -> None:
        if self.pull_task is not None:
            self.pull_task.cancel()
            return
        self.start_pull(self.pull_name.currentText().strip())

    def start_pull(self, name: str) -> None:
        if not name or self.pull_task is not None:
            return
        settings = self.form_settings()
        self.pull_name.setCurrentText(name)
        self.pull_progress.setValue(0)
        self.pull_progress.show()
        self.pull_status.setText(f"Starting the download of {name}…")
        self.pull_button.setText("Cancel")
        self.pull_button.setObjectName("secondaryButton")
        self._repolish(self.pull_button)

        def pull(ctx: TaskContext) -> str:
            from core.generation.pull import pull_model
            from core.llm import make_client

            client = make_client(settings)
            try:
                completed = pull_model(client, name, ctx.report, cancel=ctx.cancel)
            finally:
                client.close()
            return "done" if completed else "cancelled"

        self.pull_task = self.backend.run_local(
            pull,
            name="pull model",
            on_progress=self._pull_progress,
            on_result=lambda outcome: self._pull_done(name, outcome),
            on_error=self._pull_failed,
            min_interval_s=0.1,
        )

    def _pull_progress(self, status: Any) -> None:
        # One bar for the whole model (core.generation.pull.PullTracker), never restarting
        # per layer; steps without a size leave it where it was.
        if status.fraction is None:
            if self.pull_progress.value() <= 0:
                self.pull_progress.setRange(0, 0)
        else:
            self.pull_progress.setRange(0, 1000)
            self.pull_progress.setValue(int(status.fraction * 1000))
        self.pull_status.setText(status.text)

    def _pull_done(self, name: str, outcome: str) -> None:
        self._pull_reset()
        if outcome == "cancelled":
            self.pull_status.setText("Download cancelled.")
            self.pull_progress.hide()
            return
        self.pull_progress.setRange(0, 1000)
        self.pull_progress.setValue(1000)
        self.pull_status.setText(f"✓ {name} is ready to use.")
        self.model.setCurrentText(name)
        self.pulled.emit(name)
        self.refresh_models()

    def _pull_failed(self, exc: BaseException) -> None:
        self._pull_reset()
        message, hint = describe_error(exc)
        self.pull_progress.hide()
        self.pull_status.setText(f"{message} {hint}".strip())

    def _pull_reset(self) -> None:
        self.pull_task = None
        self.pull_button.setText("Download")
        self.pull_button.setObjectName("primaryButton")
        self._repolish(self.pull_button)

    @staticmethod
    def _repolish(widget: QWidget) -> None:
        widget.style().unpolish(widget)
        widget.style().polish(widget)

    # --- closing ----------------------------------------------------------------------------

    def done(self, result: int) -> None:
        if self.models_task is not None:
            self.models_task.cancel()
            # A reply already on its way is then ignored (_models), not shown in widgets
            # Qt deletes with the closed dialog.
            self.models_task = None
        # Closing stops the download; Ollama keeps the layers it has, so a new pull resumes.
        if self.pull_task is not None:
            self.pull_task.cancel()
        super().done(result)
