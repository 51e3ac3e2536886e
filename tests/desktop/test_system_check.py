"""Start-up on a system that cannot show a window: a plain sentence, never a Qt abort."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from desktop.system_check import display_problem, install_command, missing_from_ldd

ROOT = Path(__file__).resolve().parents[2]

LDD_OUTPUT = """\
\tlinux-vdso.so.1 (0x00007ffc1b5f6000)
\tlibQt6XcbQpa.so.6 => /venv/PySide6/Qt/lib/libQt6XcbQpa.so.6 (0x00007f0e4a000000)
\tlibxcb-icccm.so.4 => not found
\tlibxcb-keysyms.so.1 => not found
\tlibxcb-icccm.so.4 => not found
\tlibxkbcommon-x11.so.0 => /lib/x86_64-linux-gnu/libxkbcommon-x11.so.0 (0x00007f0e49f00000)
"""


def test_missing_libraries_become_one_install_line() -> None:
    missing = missing_from_ldd(LDD_OUTPUT)
    assert missing == ["libxcb-icccm.so.4", "libxcb-keysyms.so.1"]
    assert install_command(missing) == "sudo apt-get install libxcb-icccm4 libxcb-keysyms1"


def test_headless_platforms_need_no_display() -> None:
    assert display_problem({"QT_QPA_PLATFORM": "offscreen"}) is None
    assert display_problem({"DISPLAY": ":0"}) is None
    assert "No display" in (display_problem({}) or "")


def test_the_app_without_a_display_says_so_and_exits_cleanly(tmp_path: Path) -> None:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("DISPLAY", "WAYLAND_DISPLAY", "QT_QPA_PLATFORM")
    }
    env["LECTERN_HOME"] = str(tmp_path / "home")
    result = subprocess.run(
        [sys.executable, "-m", "desktop"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    # Qt itself would abort (SIGABRT, -6) blaming a platform plugin that is installed.
    assert result.returncode == 1
    assert "No display was found" in result.stderr
    assert "xvfb-run" in result.stderr
    assert "Traceback" not in result.stderr
    assert "platform plugin" not in result.stderr
