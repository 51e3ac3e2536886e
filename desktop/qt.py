"""Every Qt class the desktop app uses, imported from one place.

The app is written against PySide6; keeping the binding's name out of the other modules means
a binding or version change (PySide6 to a later major version, or a renamed class) is made
here once. QtPdf is in ``desktop/qt_pdf.py`` because it loads the PDF engine, which the
window does not need before the first cited page is shown.
"""

from __future__ import annotations

from typing import TypeVar

from PySide6 import __version__ as binding_version
from PySide6.QtCore import (
    QAbstractTableModel,
    QByteArray,
    QCoreApplication,
    QEvent,
    QItemSelectionModel,
    QModelIndex,
    QObject,
    QPersistentModelIndex,
    QPoint,
    QProcess,
    QRect,
    QRectF,
    QRunnable,
    QSettings,
    QSize,
    QSizeF,
    QSortFilterProxyModel,
    QStandardPaths,
    Qt,
    QThread,
    QThreadPool,
    QTimer,
    QUrl,
    Signal,
    qVersion,
)
from PySide6.QtGui import (
    QAction,
    QCloseEvent,
    QColor,
    QDesktopServices,
    QDragEnterEvent,
    QDragLeaveEvent,
    QDragMoveEvent,
    QDropEvent,
    QFocusEvent,
    QFont,
    QFontDatabase,
    QFontMetrics,
    QGuiApplication,
    QIcon,
    QImage,
    QKeyEvent,
    QKeySequence,
    QMouseEvent,
    QPainter,
    QPaintEvent,
    QPalette,
    QPen,
    QPixmap,
    QResizeEvent,
    QShortcut,
    QStandardItemModel,
    QTextCharFormat,
    QTextCursor,
    QTextDocument,
    QTextOption,
)
from PySide6.QtNetwork import (
    QLocalServer,
    QLocalSocket,
)
from PySide6.QtSvg import (
    QSvgRenderer,
)
from PySide6.QtWidgets import (
    QAbstractItemView,
    QApplication,
    QButtonGroup,
    QCheckBox,
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QFileDialog,
    QFormLayout,
    QFrame,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QListWidget,
    QListWidgetItem,
    QMainWindow,
    QMenu,
    QMessageBox,
    QPlainTextEdit,
    QProgressBar,
    QPushButton,
    QScrollArea,
    QSizePolicy,
    QSpinBox,
    QSplitter,
    QStackedWidget,
    QStyle,
    QStyledItemDelegate,
    QStyleOptionViewItem,
    QTableView,
    QTabWidget,
    QTextBrowser,
    QTextEdit,
    QToolButton,
    QTreeWidget,
    QTreeWidgetItem,
    QVBoxLayout,
    QWidget,
    QWidgetAction,
)


def _none_refcount_guard() -> bool:
    """Make ``None`` immortal where the binding drops a reference to it on every call.

    PySide6 6.12.0's abi3 build returns ``None`` from void methods without a new
    reference on Python 3.11 (where, unlike 3.12, ``None`` is refcounted): each
    ``label.setText(...)`` takes one reference away, and after a few hundred thousand
    calls Python aborts ("none_dealloc: deallocating None"). The app would crash after
    hours of use; the test suite crashed after about 90 window tests. Measured here,
    not assumed from the version: when a void call is seen to drop a reference, the
    count is raised far beyond reach, which is what Python 3.12 does for every
    immortal object. Returns whether the guard was needed.
    """
    import ctypes
    import sys

    if sys.version_info >= (3, 12):
        return False  # None is immortal there
    probe = QObject()
    before = sys.getrefcount(None)
    for _ in range(64):
        probe.setObjectName("probe")
    if before - sys.getrefcount(None) < 32:
        return False
    # ob_refcnt is the first field of every object; 2**60 is out of reach of any leak.
    ctypes.c_ssize_t.from_address(id(None)).value += 2**60
    return True


NONE_GUARDED = _none_refcount_guard()

_O = TypeVar("_O", bound=QObject)


def named(obj: _O, name: str) -> _O:
    """``obj`` with its object name set, the name the theme's style sheet selects on.

    The binding also takes ``objectName=`` (any Qt property) as a constructor keyword, but
    its type stubs list no such keywords; naming through this call keeps the constructor
    calls checked instead of silencing the checker for each of them.
    """
    obj.setObjectName(name)
    return obj


__all__ = [
    "NONE_GUARDED",
    "QAbstractItemView",
    "QAbstractTableModel",
    "QAction",
    "QApplication",
    "QButtonGroup",
    "QByteArray",
    "QCheckBox",
    "QCloseEvent",
    "QColor",
    "QComboBox",
    "QCoreApplication",
    "QDesktopServices",
    "QDialog",
    "QDialogButtonBox",
    "QDragEnterEvent",
    "QDragLeaveEvent",
    "QDragMoveEvent",
    "QDropEvent",
    "QEvent",
    "QFileDialog",
    "QFocusEvent",
    "QFont",
    "QFontDatabase",
    "QFontMetrics",
    "QFormLayout",
    "QFrame",
    "QGuiApplication",
    "QHBoxLayout",
    "QHeaderView",
    "QIcon",
    "QImage",
    "QItemSelectionModel",
    "QKeyEvent",
    "QKeySequence",
    "QLabel",
    "QLineEdit",
    "QListWidget",
    "QListWidgetItem",
    "QLocalServer",
    "QLocalSocket",
    "QMainWindow",
    "QMenu",
    "QMessageBox",
    "QModelIndex",
    "QMouseEvent",
    "QObject",
    "QPaintEvent",
    "QPainter",
    "QPalette",
    "QPen",
    "QPersistentModelIndex",
    "QPixmap",
    "QPlainTextEdit",
    "QPoint",
    "QProcess",
    "QProgressBar",
    "QPushButton",
    "QRect",
    "QRectF",
    "QResizeEvent",
    "QRunnable",
    "QScrollArea",
    "QSettings",
    "QShortcut",
    "QSize",
    "QSizeF",
    "QSizePolicy",
    "QSortFilterProxyModel",
    "QSpinBox",
    "QSplitter",
    "QStackedWidget",
    "QStandardItemModel",
    "QStandardPaths",
    "QStyle",
    "QStyleOptionViewItem",
    "QStyledItemDelegate",
    "QSvgRenderer",
    "QTabWidget",
    "QTableView",
    "QTextBrowser",
    "QTextCharFormat",
    "QTextCursor",
    "QTextDocument",
    "QTextEdit",
    "QTextOption",
    "QThread",
    "QThreadPool",
    "QTimer",
    "QToolButton",
    "QTreeWidget",
    "QTreeWidgetItem",
    "QUrl",
    "QVBoxLayout",
    "QWidget",
    "QWidgetAction",
    "Qt",
    "Signal",
    "binding_version",
    "named",
    "qVersion",
]
