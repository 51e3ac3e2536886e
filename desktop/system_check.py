"""What the system must have before Qt can open a window, checked without loading Qt.

Without a display, or with one of the X11 libraries Qt's xcb plugin links against missing,
Qt aborts the process (SIGABRT) with "could not load the Qt platform plugin", naming a
plugin that is installed. This check runs first (``make run`` and the app's entry point)
and says plainly what is wrong and the one command that fixes it.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

from platformdirs import user_cache_dir

# Shared libraries Qt's xcb platform plugin needs, and the Debian/Ubuntu package of each.
DEBIAN_PACKAGES = {
    "libxcb-icccm.so.4": "libxcb-icccm4",
    "libxcb-keysyms.so.1": "libxcb-keysyms1",
    "libxcb-cursor.so.0": "libxcb-cursor0",
    "libxcb-image.so.0": "libxcb-image0",
    "libxcb-render-util.so.0": "libxcb-render-util0",
    "libxcb-shape.so.0": "libxcb-shape0",
    "libxcb-xkb.so.1": "libxcb-xkb1",
    "libxcb-randr.so.0": "libxcb-randr0",
    "libxcb-xfixes.so.0": "libxcb-xfixes0",
    "libxcb-sync.so.1": "libxcb-sync1",
    "libxcb-shm.so.0": "libxcb-shm0",
    "libxcb-xinput.so.0": "libxcb-xinput0",
    "libxcb-render.so.0": "libxcb-render0",
    "libxcb-glx.so.0": "libxcb-glx0",
    "libxcb-util.so.1": "libxcb-util1",
    "libxcb.so.1": "libxcb1",
    "libX11-xcb.so.1": "libx11-xcb1",
    "libX11.so.6": "libx11-6",
    "libxkbcommon-x11.so.0": "libxkbcommon-x11-0",
    "libxkbcommon.so.0": "libxkbcommon0",
    "libEGL.so.1": "libegl1",
    "libGL.so.1": "libgl1",
    "libOpenGL.so.0": "libopengl0",
    "libfontconfig.so.1": "libfontconfig1",
    "libfreetype.so.6": "libfreetype6",
    "libdbus-1.so.3": "libdbus-1-3",
    "libglib-2.0.so.0": "libglib2.0-0",
    "libSM.so.6": "libsm6",
    "libICE.so.6": "libice6",
}
# Platforms that draw into no window system: nothing to check.
_HEADLESS_PLATFORMS = ("offscreen", "minimal", "vnc", "linuxfb", "eglfs")


def display_problem(env: Mapping[str, str]) -> str | None:
    """Why no window can open here (no display at all), or None."""
    platform = env.get("QT_QPA_PLATFORM", "").split(":")[0].strip()
    if platform.startswith(_HEADLESS_PLATFORMS):
        return None
    if env.get("DISPLAY") or env.get("WAYLAND_DISPLAY"):
        return None
    return (
        "No display was found, so Lectern cannot open its window: it needs a graphical "
        "session (X11 or Wayland).\nRun it from your desktop, or for a machine without a "
        "screen use the `lectern` command, or start it under a virtual screen: "
        "xvfb-run make run"
    )


def missing_from_ldd(output: str) -> list[str]:
    """The shared libraries ``ldd`` reported as "not found", each once, in order."""
    missing: list[str] = []
    for line in output.splitlines():
        if "=> not found" in line:
            name = line.split("=>")[0].strip()
            if name not in missing:
                missing.append(name)
    return missing


def install_command(missing: list[str]) -> str:
    packages = [DEBIAN_PACKAGES.get(name, name) for name in missing]
    return "sudo apt-get install " + " ".join(dict.fromkeys(packages))


def _qt_root() -> Path | None:
    spec = importlib.util.find_spec("PySide6")
    if spec is None or not spec.origin:
        return None
    return Path(spec.origin).parent / "Qt"


def missing_qt_libraries() -> list[str]:
    """System libraries the xcb plugin needs but cannot find (Linux with ldd only).

    ``ldd`` lists the whole dependency tree (libQt6XcbQpa's included) and takes about a
    tenth of a second, so a tree found complete is remembered, keyed by the plugin file:
    later starts only look at the marker."""
    root = _qt_root()
    ldd = shutil.which("ldd")
    if not sys.platform.startswith("linux") or root is None or ldd is None:
        return []
    plugin = root / "plugins" / "platforms" / "libqxcb.so"
    try:
        stamp = f"{plugin} {plugin.stat().st_mtime_ns}"
    except OSError:
        return []
    marker = Path(user_cache_dir("lectern", appauthor=False)) / "qt-libraries-found"
    try:
        if marker.read_text(encoding="utf-8") == stamp:
            return []
    except OSError:
        pass
    try:
        result = subprocess.run(
            [ldd, str(plugin)], capture_output=True, text=True, timeout=20, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return []
    missing = missing_from_ldd(result.stdout)
    if not missing:
        try:
            marker.parent.mkdir(parents=True, exist_ok=True)
            marker.write_text(stamp, encoding="utf-8")
        except OSError:
            pass  # checked again next time
    return missing


def problems(env: Mapping[str, str] | None = None) -> list[str]:
    """Everything that would stop the window from opening, as sentences to print."""
    env = os.environ if env is None else env
    found = []
    no_display = display_problem(env)
    if no_display:
        found.append(no_display)
    wayland_only = env.get("QT_QPA_PLATFORM", "").startswith("wayland")
    if not wayland_only and not env.get("QT_QPA_PLATFORM", "").startswith(_HEADLESS_PLATFORMS):
        missing = missing_qt_libraries()
        if missing:
            found.append(
                "Qt cannot open a window: these system libraries are missing: "
                f"{', '.join(missing)}.\nInstall them with:\n  {install_command(missing)}"
            )
    return found


def main() -> int:
    found = problems()
    for problem in found:
        print(problem, file=sys.stderr)
    return 1 if found else 0


if __name__ == "__main__":
    raise SystemExit(main())
