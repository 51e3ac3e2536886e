"""Colours, style sheet and icons, light or dark, following the system unless told otherwise.

The style sheet lives in ``resources/styles/app.qss`` with ``{name}`` placeholders filled
from one palette here, so both themes stay in step. Icons are single-colour SVGs drawn
with a black stroke and recoloured when loaded, so one file serves every theme and state.
"""

from __future__ import annotations

import atexit
import shutil
import sys
import tempfile
from dataclasses import dataclass, fields
from functools import lru_cache
from pathlib import Path

from desktop.qt import (
    QApplication,
    QByteArray,
    QColor,
    QGuiApplication,
    QIcon,
    QObject,
    QPainter,
    QPalette,
    QPixmap,
    QRectF,
    QSize,
    QSvgRenderer,
    Qt,
    Signal,
)


def resources_dir() -> Path:
    # Frozen builds put resources next to the executable's data; source runs use the repo.
    base = getattr(sys, "_MEIPASS", None)
    if base:
        return Path(base) / "resources"
    return Path(__file__).resolve().parents[1] / "resources"


@dataclass(frozen=True)
class Palette:
    name: str
    window: str
    sidebar: str
    surface: str
    surface_alt: str
    border: str
    border_strong: str
    text: str
    muted: str
    faint: str
    accent: str
    accent_hover: str
    accent_text: str
    accent_soft: str
    warning_bg: str
    warning_border: str
    warning_text: str
    error_bg: str
    error_border: str
    error_text: str
    success: str
    highlight: str  # the supporting sentence in the evidence panel
    highlight_strong: str  # its outline on a PDF page
    match: str  # matched query words in search results
    selection: str

    def as_dict(self) -> dict[str, str]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


LIGHT = Palette(
    name="light",
    window="#F5F6FA",
    sidebar="#EDEFF5",
    surface="#FFFFFF",
    surface_alt="#F8F9FC",
    border="#DFE3EB",
    border_strong="#C9CFDB",
    text="#1B1F2B",
    muted="#5F677A",
    faint="#8A91A3",
    accent="#5457D6",
    accent_hover="#4548C2",
    accent_text="#FFFFFF",
    accent_soft="#ECECFD",
    warning_bg="#FFF7E3",
    warning_border="#F0D8A0",
    warning_text="#7A5300",
    error_bg="#FDEEEE",
    error_border="#F1C0C0",
    error_text="#9F1F1F",
    success="#1D8A4D",
    highlight="#FFE07A",
    highlight_strong="#E5A800",
    match="#FFF0B3",
    selection="#C9CCFA",
)

DARK = Palette(
    name="dark",
    window="#15171D",
    sidebar="#1A1D25",
    surface="#20232C",
    surface_alt="#1C1F27",
    border="#2E323D",
    border_strong="#3D4250",
    text="#E6E8EF",
    muted="#A0A6B6",
    faint="#737A8C",
    accent="#8F90FF",
    accent_hover="#A3A4FF",
    accent_text="#11131A",
    accent_soft="#2A2C4C",
    warning_bg="#35301C",
    warning_border="#5E5124",
    warning_text="#F1D48A",
    error_bg="#3A2023",
    error_border="#6A2F35",
    error_text="#F5AEAE",
    success="#58C98A",
    highlight="#8A6A12",
    highlight_strong="#E8B73A",
    match="#5A4A15",
    selection="#3C3F7A",
)


def system_prefers_dark() -> bool:
    app = QGuiApplication.instance()
    if app is None:
        return False
    scheme = QGuiApplication.styleHints().colorScheme()
    if scheme == Qt.ColorScheme.Dark:
        return True
    if scheme == Qt.ColorScheme.Light:
        return False
    # Unknown: judge by the platform palette's window colour.
    return QGuiApplication.palette().color(QPalette.ColorRole.Window).lightness() < 128


class Theme(QObject):
    """The current palette; emits ``changed`` when the system or the user switches."""

    changed = Signal(object)

    def __init__(self, preference: str = "system", parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.preference = preference
        self.palette = self._resolve()
        hints = QGuiApplication.styleHints()
        hints.colorSchemeChanged.connect(self._system_changed)

    def _resolve(self) -> Palette:
        if self.preference == "dark":
            return DARK
        if self.preference == "light":
            return LIGHT
        return DARK if system_prefers_dark() else LIGHT

    def set_preference(self, preference: str) -> None:
        self.preference = preference
        self.apply()

    def _system_changed(self, _scheme: object) -> None:
        if self.preference == "system":
            self.apply()

    @property
    def dark(self) -> bool:
        return self.palette.name == "dark"

    def apply(self) -> None:
        app = QApplication.instance()
        self.palette = self._resolve()
        if isinstance(app, QApplication):
            apply_palette(app, self.palette)
        self.changed.emit(self.palette)


def _qt_palette(p: Palette) -> QPalette:
    pal = QPalette()
    role = QPalette.ColorRole
    pal.setColor(role.Window, QColor(p.window))
    pal.setColor(role.WindowText, QColor(p.text))
    pal.setColor(role.Base, QColor(p.surface))
    pal.setColor(role.AlternateBase, QColor(p.surface_alt))
    pal.setColor(role.Text, QColor(p.text))
    pal.setColor(role.Button, QColor(p.surface))
    pal.setColor(role.ButtonText, QColor(p.text))
    pal.setColor(role.Highlight, QColor(p.accent))
    pal.setColor(role.HighlightedText, QColor(p.accent_text))
    pal.setColor(role.ToolTipBase, QColor(p.text))
    pal.setColor(role.ToolTipText, QColor(p.surface))
    pal.setColor(role.PlaceholderText, QColor(p.faint))
    pal.setColor(role.Link, QColor(p.accent))
    pal.setColor(role.LinkVisited, QColor(p.accent))
    pal.setColor(role.Mid, QColor(p.border))
    pal.setColor(role.Midlight, QColor(p.border))
    pal.setColor(role.Dark, QColor(p.border_strong))
    pal.setColor(role.Light, QColor(p.surface))
    group = QPalette.ColorGroup.Disabled
    pal.setColor(group, role.Text, QColor(p.faint))
    pal.setColor(group, role.ButtonText, QColor(p.faint))
    pal.setColor(group, role.WindowText, QColor(p.faint))
    return pal


@lru_cache(maxsize=2)
def _stylesheet_template() -> str:
    return (resources_dir() / "styles" / "app.qss").read_text(encoding="utf-8")


def _arrow_images(p: Palette) -> dict[str, str]:
    """Recoloured arrows for combo and spin boxes and the check box's tick, as files: QSS
    can only load images by path. Written once per colour, into this process's own folder."""
    folder = _style_folder()
    out: dict[str, str] = {}
    for key, name, color, size in (
        ("arrow_down", "chevron-down", p.muted, 12),
        ("arrow_up", "chevron-up", p.muted, 12),
        # Drawn on the accent: Fusion's own box outlines a darker shade of the window,
        # which on the dark palette left an unchecked box all but invisible (1.1:1).
        ("check_mark", "check", p.accent_text, 14),
    ):
        path = folder / f"{name}-{color.lstrip('#')}-{size}.png"
        if not path.exists():
            svg_pixmap(name, color, size, 2.0).save(str(path))
        out[key] = path.as_posix()
    return out


@lru_cache(maxsize=1)
def _style_folder() -> Path:
    """This process's own 0700 folder under a name no one can guess, gone at exit: one
    named after the user in the shared temp folder could be made first by another
    account, with links where the images are then written."""
    folder = Path(tempfile.mkdtemp(prefix="lectern-style-"))
    atexit.register(shutil.rmtree, folder, True)
    return folder


def stylesheet(p: Palette) -> str:
    # The template uses {name}; braces of QSS blocks are doubled there.
    return _stylesheet_template().format(**p.as_dict(), **_arrow_images(p))


def apply_palette(app: QApplication, p: Palette) -> None:
    """Only what changed is set: each of the three makes Qt polish every widget again,
    which a window that asks for the theme it already has need not pay (in the test
    suite, with earlier tests' windows alive, one window's theme came to take 80 s)."""
    # Read from a mark of ours: with a style sheet set, app.style() is the sheet's
    # wrapper and names no style.
    if app.property("lectern_style") != "Fusion":
        app.setStyle("Fusion")
        app.setProperty("lectern_style", "Fusion")
    palette = _qt_palette(p)
    if app.palette() != palette:
        app.setPalette(palette)
    sheet = stylesheet(p)
    if app.styleSheet() != sheet:
        app.setStyleSheet(sheet)
    _icon_cache.clear()


# --- icons ----------------------------------------------------------------------------

_icon_cache: dict[tuple[str, str, int], QIcon] = {}


@lru_cache(maxsize=128)
def _svg_source(name: str) -> str:
    return (resources_dir() / "icons" / f"{name}.svg").read_text(encoding="utf-8")


def svg_pixmap(name: str, color: str, size: int = 18, ratio: float = 2.0) -> QPixmap:
    data = _svg_source(name).replace("#000000", color)
    renderer = QSvgRenderer(QByteArray(data.encode()))
    pixmap = QPixmap(QSize(int(size * ratio), int(size * ratio)))
    pixmap.fill(Qt.GlobalColor.transparent)
    painter = QPainter(pixmap)
    painter.setRenderHint(QPainter.RenderHint.Antialiasing)
    renderer.render(painter, QRectF(0, 0, size * ratio, size * ratio))
    painter.end()
    pixmap.setDevicePixelRatio(ratio)
    return pixmap


def _faded(pixmap: QPixmap, opacity: float = 0.35) -> QPixmap:
    out = QPixmap(pixmap.size())
    out.fill(Qt.GlobalColor.transparent)
    out.setDevicePixelRatio(pixmap.devicePixelRatio())
    painter = QPainter(out)
    painter.setOpacity(opacity)
    painter.drawPixmap(0, 0, pixmap)
    painter.end()
    return out


def icon(name: str, color: str | None = None, size: int = 18) -> QIcon:
    """A recoloured icon; ``color`` defaults to the current text colour."""
    app = QApplication.instance()
    if color is None:
        pal = app.palette() if isinstance(app, QApplication) else QPalette()
        color = pal.color(QPalette.ColorRole.WindowText).name()
    key = (name, color, size)
    cached = _icon_cache.get(key)
    if cached is not None:
        return cached
    result = QIcon()
    normal = svg_pixmap(name, color, size)
    result.addPixmap(normal, QIcon.Mode.Normal)
    result.addPixmap(_faded(normal), QIcon.Mode.Disabled)
    _icon_cache[key] = result
    return result


@lru_cache(maxsize=1)
def app_icon() -> QIcon:
    result = QIcon()
    path = str(resources_dir() / "icons" / "logo.svg")
    for size in (16, 24, 32, 48, 64, 128, 256):
        renderer = QSvgRenderer(path)
        pixmap = QPixmap(size, size)
        pixmap.fill(Qt.GlobalColor.transparent)
        painter = QPainter(pixmap)
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        renderer.render(painter)
        painter.end()
        result.addPixmap(pixmap)
    return result
