"""``Lectern --self-test [DIR]``: the engine's self-test plus the parts only the app has.

Runs with Qt's offscreen platform so it works on a build machine with no display. Beyond
``core.evaluation.selftest`` (index, search, answer) it proves that the bundle carries what the
window needs: the Qt platform plugin, QtPdf able to render a page, the icons and style
sheet, and the licence notices the About dialog shows.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable, Sequence
from pathlib import Path

from core.evaluation.selftest import StepFailed, run_self_test


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="Lectern --self-test",
        description="Index a folder, search it and answer one question, then exit "
        "(status 0 only if every step passed). Uses a temporary data folder.",
    )
    parser.add_argument(
        "folder", nargs="?", help="folder to index (default: the bundled sample documents)"
    )
    parser.add_argument("--llm-url", help="LLM server to ask (default: the configured one)")
    parser.add_argument("--model", help="model to ask (default: the configured one if installed)")
    parser.add_argument("--question", help="question to ask (default: one about a document)")
    return parser.parse_args(list(argv))


def _sample_folder() -> Path:
    from desktop.theme import resources_dir

    return resources_dir() / "sample-docs"


def _check_resources() -> str:
    from desktop.theme import resources_dir

    root = resources_dir()
    needed = [root / "styles" / "app.qss", root / "icons" / "logo.svg"]
    missing = [str(p) for p in needed if not p.is_file()]
    if missing:
        raise StepFailed(f"Missing from the bundle: {', '.join(missing)}")
    icons = len(list((root / "icons").glob("*.svg")))
    return f"style sheet and {icons} icons in {root}"


def _check_qt() -> str:
    from desktop.qt import QApplication

    # Held until the check ends; platformName is static, and instance() is typed as the
    # GUI-less base class that lacks it.
    _app = QApplication.instance() or QApplication(["Lectern", "-platform", "offscreen"])
    from desktop.theme import app_icon

    if app_icon().isNull():
        raise StepFailed("The application icon could not be drawn (QtSvg missing?).")
    return f"{QApplication.platformName()} platform plugin loaded, icons drawn"


def _check_pdf(folder: Path) -> Callable[[], str]:
    def check() -> str:
        from desktop.qt import QSize
        from desktop.qt_pdf import QPdfDocument

        candidates = sorted(folder.rglob("*.pdf")) or sorted(_sample_folder().glob("*.pdf"))
        if not candidates:
            raise StepFailed("No PDF to render.")
        document = QPdfDocument()
        try:
            for path in candidates:
                if document.load(str(path)) != QPdfDocument.Error.None_:
                    continue
                image = document.render(0, QSize(300, 400))
                if image.isNull():
                    continue
                inked = sum(
                    1
                    for x in range(0, image.width(), 6)
                    for y in range(0, image.height(), 6)
                    if image.pixelColor(x, y).lightness() < 200
                )
                if not inked:
                    continue
                return f"rendered page 1 of {path.name} ({document.pageCount()} pages)"
        finally:
            document.close()
        raise StepFailed(f"QtPdf could not render any of {len(candidates)} PDF(s).")

    return check


def _check_child_environment() -> str:
    # What "Open original" hands to the system's PDF viewer: no path into the bundle.
    import subprocess
    import sys

    shown = subprocess.run(
        ["/bin/sh", "-c", 'printf %s "$LD_LIBRARY_PATH"'],
        capture_output=True,
        text=True,
        timeout=10,
        check=True,
    ).stdout
    bundle = getattr(sys, "_MEIPASS", None)
    if bundle and bundle in shown:
        raise StepFailed(f"Programs started from Lectern would load its libraries: {shown}")
    return f"LD_LIBRARY_PATH for started programs: {shown or '(unset)'}"


def _check_notices() -> str:
    from core.notices import notices_text

    text = notices_text()
    for name in ("torch", "PySide6", "duckdb", "usearch", "Python"):
        if name.lower() not in text.lower():
            raise StepFailed(f"The licence notices do not mention {name}.")
    return f"{len(text) // 1024} KiB of third-party notices"


def main(argv: Sequence[str]) -> int:
    args = parse_args(argv)
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    folder = Path(args.folder) if args.folder else _sample_folder()
    extra: list[tuple[str, Callable[[], str]]] = [
        ("bundled resources", _check_resources),
        ("Qt", _check_qt),
        ("QtPdf", _check_pdf(folder)),
        ("licence notices", _check_notices),
        ("started programs", _check_child_environment),
    ]
    return run_self_test(
        folder,
        llm_url=args.llm_url,
        model=args.model,
        question=args.question,
        extra_steps=extra,
    )
