"""Managing collections: make, rename and delete them, and tick the library folders each
one holds. Reached from the scope menu on the question box ("Manage collections…").

Every change is one small write, an op (core/app/ops.py) run off the UI thread; the
dialog and the scope menu reload from the library after its ``changed``, so what they show
is what is stored. Deleting a collection never touches its folders or files.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from core.app import ops
from core.app.ops import Changes, Op, ScopeChoices
from core.records import Collection
from desktop.backend import Backend
from desktop.qt import (
    QDialog,
    QDialogButtonBox,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QListWidget,
    QListWidgetItem,
    QPushButton,
    Qt,
    QVBoxLayout,
    QWidget,
    named,
)
from desktop.widgets import display_path
from desktop.workers import describe_error

FOLDER_ROLE = Qt.ItemDataRole.UserRole


class CollectionsDialog(QDialog):
    def __init__(self, backend: Backend, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("collectionsDialog")
        self.setWindowTitle("Collections")
        self.setMinimumSize(620, 380)
        self.backend = backend
        self.choices = ScopeChoices()
        self._filling = False
        self._select_after = ""  # a collection just made or renamed is selected
        self._creating = ""  # the name of a collection being made

        layout = QVBoxLayout(self)
        layout.setSpacing(10)
        intro = named(
            QLabel(
                "A collection is a named group of library folders. Choose it on the question box "
                "to keep a conversation to those folders."
            ),
            "muted",
        )
        intro.setWordWrap(True)
        layout.addWidget(intro)

        columns = QHBoxLayout()
        left = QVBoxLayout()
        left.addWidget(named(QLabel("Collections"), "dialogSection"))
        self.list = named(QListWidget(), "collectionList")
        self.list.setAccessibleName("Collections")
        self.list.currentRowChanged.connect(self._selected)
        left.addWidget(self.list, 1)
        self.name_edit = QLineEdit()
        self.name_edit.setPlaceholderText("Name, such as Papers")
        self.name_edit.setAccessibleName("Collection name")
        self.name_edit.returnPressed.connect(self.create_collection)
        left.addWidget(self.name_edit)
        buttons = QHBoxLayout()
        self.new_button = named(QPushButton("New"), "primaryButton")
        self.new_button.setToolTip("Make a collection with the name typed above")
        self.new_button.clicked.connect(self.create_collection)
        self.rename_button = named(QPushButton("Rename"), "secondaryButton")
        self.rename_button.setToolTip("Give the selected collection the name typed above")
        self.rename_button.clicked.connect(self.rename)
        self.delete_button = named(QPushButton("Delete"), "secondaryButton")
        self.delete_button.setToolTip("Delete the selected collection (its folders stay)")
        self.delete_button.clicked.connect(self.delete)
        for button in (self.new_button, self.rename_button, self.delete_button):
            # Enter in the name is the line edit's (New); a default button would be
            # pressed by the same Enter and make the collection a second time.
            button.setAutoDefault(False)
            buttons.addWidget(button)
        left.addLayout(buttons)
        columns.addLayout(left, 1)

        right = QVBoxLayout()
        self.folders_title = named(QLabel("Folders"), "dialogSection")
        right.addWidget(self.folders_title)
        self.folders = named(QListWidget(), "collectionFolders")
        self.folders.setAccessibleName("Folders in the collection")
        self.folders.itemChanged.connect(self._folder_ticked)
        right.addWidget(self.folders, 1)
        columns.addLayout(right, 2)
        layout.addLayout(columns, 1)

        self.error = named(QLabel(), "errorText")
        self.error.setWordWrap(True)
        self.error.hide()
        layout.addWidget(self.error)
        close = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        close_button = close.button(QDialogButtonBox.StandardButton.Close)
        if close_button is not None:
            close_button.setAutoDefault(False)  # nor would it close the dialog
        close.rejected.connect(self.close)
        layout.addWidget(close)
        backend.changed.connect(self._changed)
        self._show()

    # --- reading ---------------------------------------------------------------------

    def _changed(self, changes: Changes) -> None:
        if changes.collections:
            self.reload()

    def reload(self) -> None:
        self.backend.run(ops.scope_choices(), on_result=self._loaded)

    def _loaded(self, choices: ScopeChoices) -> None:
        current = self.current()
        self.choices = choices
        select, self._select_after = self._select_after, ""
        self._show(select or (current.name if current else ""))

    def current(self) -> Collection | None:
        row = self.list.currentRow()
        collections = self.choices.collections
        return collections[row] if 0 <= row < len(collections) else None

    def _show(self, select: str = "") -> None:
        self._filling = True
        self.list.clear()
        for collection in self.choices.collections:
            n = len(collection.folders)
            item = QListWidgetItem(f"{collection.name}  ({n} folder{'s' if n != 1 else ''})")
            self.list.addItem(item)
        names = [c.name.lower() for c in self.choices.collections]
        row = names.index(select.lower()) if select.lower() in names else (0 if names else -1)
        self._filling = False
        self.list.setCurrentRow(row)
        self._selected(row)

    def _selected(self, _row: int) -> None:
        if self._filling:
            return
        collection = self.current()
        self._filling = True
        self.folders.clear()
        self.rename_button.setEnabled(collection is not None)
        self.delete_button.setEnabled(collection is not None)
        if collection is None:
            self.folders_title.setText("Folders")
            placeholder = QListWidgetItem(
                "Type a name and press New to make a collection."
                if self.choices.folders
                else "Add a folder to the library first."
            )
            placeholder.setFlags(Qt.ItemFlag.NoItemFlags)
            self.folders.addItem(placeholder)
        else:
            self.folders_title.setText(f"Folders in “{collection.name}”")
            inside = set(collection.folders)
            gone = [f for f in collection.folders if f not in self.choices.folders]
            for folder in [*self.choices.folders, *gone]:
                name = os.path.basename(folder.rstrip(os.sep)) or folder
                label = f"{name}  —  {display_path(folder)}"
                if folder in gone:
                    label += "  (not in the library now)"
                item = QListWidgetItem(label)
                item.setData(FOLDER_ROLE, folder)
                item.setToolTip(folder)
                item.setFlags(Qt.ItemFlag.ItemIsEnabled | Qt.ItemFlag.ItemIsUserCheckable)
                checked = Qt.CheckState.Checked if folder in inside else Qt.CheckState.Unchecked
                item.setCheckState(checked)
                self.folders.addItem(item)
        self._filling = False

    # --- changes ---------------------------------------------------------------------

    def _change(
        self, change: Op[Any], select: str = "", then: Callable[[object], None] | None = None
    ) -> None:
        self.error.hide()

        def failed(exc: BaseException) -> None:
            if then is not None:
                then(None)
            message, hint = describe_error(exc)
            self.error.setText(f"{message} {hint}".strip())
            self.error.show()
            self.reload()

        def done(result: object) -> None:
            if then is not None:
                then(result)
            if select:
                self.name_edit.clear()
                self._select_after = select

        self.backend.run(change, on_result=done, on_error=failed)

    # Not ``create``: that is QWidget's, which makes the native window.
    def create_collection(self) -> None:
        name = self.name_edit.text().strip()
        if not name or name == self._creating:
            return  # a second Enter or click while the first is being written
        self._creating = name

        def made(_result: object) -> None:
            self._creating = ""

        self._change(ops.create_collection(name), select=name, then=made)

    def rename(self) -> None:
        current, name = self.current(), self.name_edit.text().strip()
        if current is not None:
            old = current.name
            self._change(ops.rename_collection(old, name), select=name)

    def delete(self) -> None:
        current = self.current()
        if current is not None:
            name = current.name
            self._change(ops.delete_collection(name))

    def _folder_ticked(self, item: QListWidgetItem) -> None:
        if self._filling:
            return
        current, folder = self.current(), item.data(FOLDER_ROLE)
        if current is None or not folder:
            return
        name = current.name
        if item.checkState() == Qt.CheckState.Checked:
            self._change(ops.add_to_collection(name, [folder]))
        else:
            self._change(ops.remove_from_collection(name, [folder]))
