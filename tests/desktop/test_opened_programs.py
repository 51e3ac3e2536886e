"""Programs the app starts get the person's umask back, not Lectern's private one."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

from core.private import private_umask


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="a viewer found on PATH")
def test_a_viewer_opened_from_the_app_saves_with_the_persons_umask(
    qtbot: object, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from desktop.evidence_panel import open_document

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    said = tmp_path / "umask.txt"
    viewer = bin_dir / "evince"
    viewer.write_text(f"#!/bin/sh\numask > {said}\n", encoding="utf-8")
    viewer.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")
    document = tmp_path / "letter.pdf"
    document.write_bytes(b"%PDF-1.4\n")

    session = os.umask(0o022)
    try:
        private_umask()  # what desktop.__main__ does first
        assert open_document(str(document), page=2)
        deadline = time.monotonic() + 10
        while not said.exists() or not said.read_text().strip():
            assert time.monotonic() < deadline, "the viewer never ran"
            time.sleep(0.05)
        assert said.read_text().strip() == "0022"
        assert os.umask(0o077) == 0o077  # Lectern's own stays private
    finally:
        os.umask(session)
