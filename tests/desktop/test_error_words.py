"""A failure is said in words, never in a program's name for it (issue 46): the name
("ValueError", "ReadTimeout") is for a bug report, in the Details fold under the
sentence. The errors are the ones Lectern's own code makes; the answer's error box is
the real widget."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

pytest.importorskip("pytestqt")

from core.errors import LecternError
from core.llm import BACKENDS
from core.llm.errors import ErrorMapper
from core.llm.urls import unusable_client
from desktop.theme import Theme
from desktop.turn_view import TurnWidget
from desktop.viewmodels import ErrorView, TurnView
from desktop.workers import describe_error, error_details
from tests.desktop.test_plain_words import TECHNICAL, assert_plain

NAMED = TECHNICAL["an exception name"]

FAULTS: list[BaseException] = [
    ValueError("invalid literal for int() with base 10: 'x'"),
    KeyError("word/document.xml"),
    RuntimeError("TransactionException: Catalog write-write conflict"),
    AttributeError("'NoneType' object has no attribute 'read'"),
    OSError("no strerror here"),
    ErrorMapper(BACKENDS["ollama"], "http://127.0.0.1:9").transport(
        httpx.ReadTimeout("timed out"), "", "llama3.2"
    ),
    unusable_client(ValueError("Unknown scheme for proxy URL"), "http://127.0.0.1:9"),
]


@pytest.mark.parametrize("exc", FAULTS, ids=lambda e: type(e).__name__)
def test_no_program_name_reaches_the_sentence_or_its_next_step(exc: BaseException) -> None:
    message, hint = describe_error(exc)
    assert message and hint
    for words in (message, hint):
        assert not NAMED.search(words), words
        assert type(exc).__name__ not in words
        assert "ReadTimeout" not in words and "TransactionException" not in words
    # Still there for whoever asks: the name, in the Details fold's text.
    details = error_details(exc)
    assert type(exc).__name__ in details
    if isinstance(exc, LecternError) and "responding" in exc.message:
        assert "ReadTimeout" in details


def test_a_failed_answer_says_it_in_words_with_the_name_in_details(qtbot: Any) -> None:
    theme = Theme("light")
    exc = RuntimeError("TransactionException: Catalog write-write conflict")
    message, hint = describe_error(exc)
    view = TurnView(
        question="What is the limit?",
        error=ErrorView(message, hint, "Error", "", error_details(exc)),
    )
    turn = TurnWidget(view, theme)
    qtbot.addWidget(turn)
    turn.show()
    assert turn.error_box.isVisible()
    assert "Something unexpected went wrong" in turn.error_text.text()
    assert_plain(turn)
    assert "RuntimeError" in turn.error_details.details()
    turn.error_details.toggle.click()
    assert turn.error_details.body.isVisible()
    assert_plain(turn)  # opened, the name is still only in the fold
