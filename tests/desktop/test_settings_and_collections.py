"""Settings and Collections as a person meets them: another kind of server fills the model
field from what that server lists, the CPU share is there only when it applies, and Enter
in the collection's name makes one collection, once."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

pytest.importorskip("pytestqt")

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QLabel

from desktop.collections_dialog import CollectionsDialog
from desktop.main_window import MainWindow
from tests.desktop import test_window as base
from tests.fake_ollama import FakeModel, FakeOllama, unused_port

pytestmark = pytest.mark.slow

open_window = base.open_window


@pytest.fixture
def other_server() -> Iterator[FakeOllama]:
    """An OpenAI-compatible server (llama.cpp's kind) that serves one model of its own."""
    server = FakeOllama(models=[FakeModel("qwen2.5:3b")]).start()
    try:
        yield server
    finally:
        server.stop()


def test_another_kind_of_server_fills_the_model_field_from_its_own_list(
    qtbot: Any,
    open_window: Callable[..., MainWindow],
    fake_ollama: FakeOllama,
    other_server: FakeOllama,
) -> None:
    window = open_window(url=fake_ollama.url)
    dialog = window.open_settings()
    qtbot.waitUntil(lambda: "Connected" in dialog.server_status.text(), timeout=20_000)
    assert dialog.model_name() == "llama3.2:latest"
    listed_before = len(other_server.requests_to("/v1/models"))

    dialog.url.setText(other_server.url)
    dialog.kind.setCurrentIndex(dialog.kind.findData("openai"))
    # Not the old server's "llama3.2": the field waits for the new server's list, which
    # is asked for in the background (the window is not held meanwhile).
    assert dialog.model_name() == ""
    qtbot.waitUntil(lambda: dialog.model_name() == "qwen2.5:3b", timeout=20_000)
    assert len(other_server.requests_to("/v1/models")) > listed_before
    assert {dialog.model.itemData(i) for i in range(dialog.model.count())} == {"qwen2.5:3b"}
    assert "Connected" in dialog.server_status.text()
    assert "llama3.2" not in dialog.server_status.text()

    # A server with several models: the field stays empty and asks for a choice.
    other_server.add_model("mistral:7b")
    dialog.kind.setCurrentIndex(dialog.kind.findData("ollama"))
    dialog.kind.setCurrentIndex(dialog.kind.findData("openai"))
    qtbot.waitUntil(lambda: dialog.model.count() == 2, timeout=20_000)
    qtbot.waitUntil(lambda: "choose one" in dialog.server_status.text(), timeout=20_000)
    assert dialog.model_name() == ""
    line = dialog.model.lineEdit()
    assert line is not None and "Choose" in line.placeholderText()
    dialog.model.setCurrentIndex(1)
    dialog.accept()
    assert window.backend.settings.llm_kind == "openai"
    assert window.backend.settings.llm_model == dialog.model.itemData(1)


def test_the_cpu_share_is_offered_only_where_it_applies(
    qtbot: Any, open_window: Callable[..., MainWindow]
) -> None:
    window = open_window(url=f"http://127.0.0.1:{unused_port()}")
    dialog = window.open_settings()
    qtbot.waitUntil(lambda: dialog.isVisible(), timeout=5_000)
    share_label = next(w for w in dialog.findChildren(QLabel) if w.text() == "At most")
    for when, shown in (("always", False), ("share", True), ("idle", False), ("always", False)):
        dialog.index_when.setCurrentIndex(dialog.index_when.findData(when))
        # "At most 50 % of the CPU" beside "Always" read as a limit in force.
        assert dialog.cpu_share.isVisibleTo(dialog) is shown, when
        assert share_label.isVisibleTo(dialog) is shown, when
        assert dialog.cpu_share.isEnabled() is shown, when
    dialog.reject()


def test_enter_in_the_name_makes_one_collection_and_no_complaint(
    qtbot: Any, open_window: Callable[..., MainWindow]
) -> None:
    window = open_window(url=f"http://127.0.0.1:{unused_port()}")
    dialog = CollectionsDialog(window.backend, window)
    dialog.show()
    qtbot.waitUntil(dialog.isVisible, timeout=5_000)
    dialog.name_edit.setFocus()
    qtbot.keyClicks(dialog.name_edit, "Papers")
    qtbot.keyClick(dialog.name_edit, Qt.Key.Key_Return)
    qtbot.waitUntil(
        lambda: dialog.current() is not None and dialog.current().name == "Papers",  # type: ignore[union-attr]
        timeout=10_000,
    )
    # Whatever else the Enter might have pressed has had its time to answer.
    qtbot.wait(800)
    qtbot.waitUntil(lambda: not window.backend.background.busy, timeout=10_000)
    assert not dialog.error.isVisible(), dialog.error.text()
    assert [c.name for c in dialog.choices.collections] == ["Papers"]
    assert dialog.isVisible()  # Enter did not close the dialog either
    dialog.close()
