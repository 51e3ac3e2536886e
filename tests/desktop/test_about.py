"""Help › About: version, facts, and the third-party licences the app ships with."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("pytestqt")

from core import __version__
from core.config import Settings
from core.notices import collect_notices, render_notices, shipped_distributions
from desktop.about import AboutDialog
from desktop.backend import Backend


def test_notices_cover_every_shipped_dependency_with_its_licence_text() -> None:
    names = {d.metadata["Name"].lower().replace("_", "-") for d in shipped_distributions()}
    # the engine's direct needs and deep ones (torch pulls sympy; transformers pulls tokenizers)
    for needed in ("duckdb", "usearch", "torch", "pyside6-essentials", "sympy", "tokenizers"):
        assert needed in names
    assert "pytest" not in names and "ruff" not in names  # development tools are not shipped
    # Nor what the model package asks for and the bundle leaves out (packaging/lectern.spec).
    assert not names & {"sentence-transformers", "scikit-learn", "scipy", "joblib"}
    notices = {n.name.lower(): n for n in collect_notices()}
    assert notices["torch"].texts  # its LICENSE, which lists torch's own third parties
    assert any("LICENSE" in name for name, _text in notices["duckdb"].texts)
    text = render_notices(list(notices.values()))
    assert text.startswith(f"Lectern {__version__} includes")
    assert "Python " in text


def test_about_shows_version_data_folder_and_searchable_licences(qtbot, tmp_path: Path) -> None:
    backend = Backend(Settings(home=tmp_path / "data"), watch=False)
    dialog = AboutDialog(backend)
    qtbot.addWidget(dialog)
    dialog.show()
    from PySide6.QtWidgets import QLabel

    shown = " ".join(label.text() for label in dialog.findChildren(QLabel))
    assert f"Lectern {__version__}" in shown
    assert str(tmp_path / "data") in shown
    assert "never leave this computer" in shown
    qtbot.waitUntil(lambda: "includes the following" in dialog.notices.toPlainText(), timeout=30000)
    dialog.tabs.setCurrentIndex(1)
    dialog.filter.setText("usearch")
    assert "usearch" in dialog.notices.textCursor().selectedText().lower()
    dialog.filter.setText("no-such-package-anywhere")
    assert dialog.notices.textCursor().selectedText() == ""
    dialog.reject()
    backend.shutdown()
