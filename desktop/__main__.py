"""``python -m desktop`` (and the ``lectern-desktop`` launcher): start the window.

The window is shown before anything heavy is imported; the library and the embedding
model load in the background while the status bar says so. The same entry point takes
``--version``, ``--self-test [DIR]`` (see ``desktop/selftest.py``) and ``--cli ARGS``
(the ``lectern`` command), which is how the one-executable packaged app offers them.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

from core.offline import force_offline
from core.private import private_umask


def restore_user_library_path() -> None:
    """Give programs Lectern starts (a PDF viewer, xdg-open) the user's library path.

    The packaged app's bootloader points LD_LIBRARY_PATH at the bundle so Python finds
    its own libraries, and keeps the user's value in LD_LIBRARY_PATH_ORIG. Inherited as
    is, a system PDF viewer would load the bundle's Qt or libstdc++ and could crash.
    This process is unaffected: the dynamic loader read the variable when it started.
    """
    bundle = getattr(sys, "_MEIPASS", None)
    if not bundle:
        return
    original = os.environ.pop("LD_LIBRARY_PATH_ORIG", None)
    if original is not None:
        os.environ["LD_LIBRARY_PATH"] = original
        return
    kept = [
        entry
        for entry in os.environ.get("LD_LIBRARY_PATH", "").split(os.pathsep)
        if entry and not entry.startswith(bundle)
    ]
    if kept:
        os.environ["LD_LIBRARY_PATH"] = os.pathsep.join(kept)
    else:
        os.environ.pop("LD_LIBRARY_PATH", None)


FIRST_PAINT_WAIT_MS = 500  # start anyway if no paint comes (a window shown minimised)


def start_after_first_paint(app: Any, start: Callable[[], None]) -> None:
    """Call ``start`` once the window has painted its first frame.

    Opening the library and importing the model's libraries on other threads hold the
    GIL for long stretches; started before the first paint, they kept the window black
    (mapped but unpainted) for about a second. Waiting for the first frame costs them a
    few tens of milliseconds.
    """
    from desktop.qt import QEvent, QObject, QTimer

    class FirstPaint(QObject):
        started = False

        def eventFilter(self, _obj: QObject, event: QEvent) -> bool:
            if event.type() == QEvent.Type.Paint and not self.started:
                # After this paint's frame is flushed to the screen, not during it.
                QTimer.singleShot(0, self.start)
            return False

        def start(self) -> None:
            if self.started:
                return
            self.started = True
            app.removeEventFilter(self)
            start()

    watcher = FirstPaint(app)
    app.installEventFilter(watcher)
    QTimer.singleShot(FIRST_PAINT_WAIT_MS, watcher.start)


def main(argv: Sequence[str] | None = None) -> int:
    # Before anything is written: DuckDB's files, Qt's settings and the style images are
    # made by code that takes the umask, and the library is no one else's (core/private.py).
    private_umask()
    restore_user_library_path()
    force_offline()
    logging.basicConfig(
        level=os.environ.get("LECTERN_LOG", "WARNING").upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["--version"]:
        from core import __version__

        print(f"Lectern {__version__}")
        return 0
    if args[:1] == ["--self-test"]:
        from desktop.selftest import main as self_test

        return self_test(args[1:])
    if args[:1] == ["--cli"]:
        # The packaged app has one executable; the headless engine rides along in it.
        from core.cli.main import main as cli

        return cli(args[1:])
    folders = [a for a in args if not a.startswith("-")]

    # Before Qt loads: without a display or with a library of its xcb plugin missing, Qt
    # aborts the process naming the wrong culprit.
    from desktop.system_check import problems

    found = problems()
    if found:
        print("\n\n".join(found), file=sys.stderr)
        return 1

    from desktop.qt import QApplication, QCoreApplication, QGuiApplication, QSettings, Qt

    QCoreApplication.setOrganizationName("Lectern")
    QCoreApplication.setApplicationName("Lectern")
    QGuiApplication.setHighDpiScaleFactorRoundingPolicy(
        Qt.HighDpiScaleFactorRoundingPolicy.PassThrough
    )
    app = QApplication.instance() or QApplication(
        [sys.argv[0], *[a for a in args if a.startswith("-")]]
    )
    assert isinstance(app, QApplication)
    app.setApplicationDisplayName("Lectern")
    app.setDesktopFileName("lectern")

    from core.config import load_settings
    from core.errors import LecternError
    from desktop.single_instance import SingleInstance

    try:
        settings = load_settings()
    except LecternError as exc:
        from desktop.qt import QMessageBox

        QMessageBox.critical(None, "Lectern", f"{exc.message}\n\n{exc.hint}")
        return 2
    instance = SingleInstance(str(settings.home))
    if instance.notify_running([os.path.abspath(f) for f in folders]):
        return 0
    instance.listen()

    from desktop.backend import Backend
    from desktop.main_window import MainWindow
    from desktop.theme import Theme, app_icon

    qsettings = QSettings()
    theme = Theme(str(qsettings.value("appearance", "system")))
    theme.apply()
    app.setWindowIcon(app_icon())
    backend = Backend(settings)
    window = MainWindow(backend, theme, qsettings)
    instance.activated.connect(window.bring_to_front)
    # The folders as the last session left them, in the window's first frame: a reopen
    # never flashes the first-run screen while the library opens.
    backend.view.show_saved()
    window.show()

    def start() -> None:
        backend.start()
        if folders:
            backend.indexing.add_folders(folders)

    start_after_first_paint(app, start)
    code = app.exec()
    instance.close()
    if backend.abandoned:
        # The model is still loading, or an index run is still finishing an embedding
        # batch: neither can be interrupted. The library is closed (or, mid-batch, every
        # document written is committed and the rest is indexed next time), so exit now
        # rather than keep the process (and the library's lock) for seconds.
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    return code


if __name__ == "__main__":
    sys.exit(main())
