"""A follow-up's source list (issue 44): the documents that support its answer are listed
even when an earlier answer of the conversation listed the same passages."""

from __future__ import annotations

from typing import Any

import pytest

from desktop.theme import Theme
from desktop.turn_view import TurnWidget
from desktop.viewmodels import CitationView, SourceView, TurnView

INVENTORY = SourceView(1, 1, "/docs/inventory.csv", "inventory", "csv", None, None, "", 0, 80)
MANUAL = SourceView(2, 2, "/docs/pump-manual.pdf", "Pump manual", "pdf", 3, 3, "", 0, 120)


@pytest.fixture
def theme() -> Theme:
    made = Theme("light")
    made.apply()
    return made


def _shown(qtbot: Any, theme: Theme, view: TurnView) -> list[str]:
    widget = TurnWidget(view, theme)
    qtbot.addWidget(widget)
    # The first answer of the conversation listed both passages.
    widget.earlier_sources = lambda: {(s.path, s.start, s.end) for s in (INVENTORY, MANUAL)}
    return [group[0].path for group in widget.shown_sources()]


def test_an_answer_citing_nothing_lists_the_passages_it_was_given(qtbot: Any, theme: Theme) -> None:
    # "And what is the unit price of that pump?" answered "The answer is: 3" by a small
    # model: before, inventory.csv was left out as already listed, and the list was empty.
    view = TurnView(
        question="And what is the unit price of that pump?",
        answer="The answer is: 3",
        mode="generated",
        sources=[INVENTORY, MANUAL],
    )
    assert _shown(qtbot, theme, view) == ["/docs/inventory.csv", "/docs/pump-manual.pdf"]


def test_a_cited_answer_still_leaves_out_uncited_passages_listed_before(
    qtbot: Any, theme: Theme
) -> None:
    cited = CitationView(n=1, source=INVENTORY, spans=(), sentence="1890.0 [1]")
    view = TurnView(
        question="And what is the unit price of that pump?",
        answer="Unit price: 1890.0 [1]",
        mode="extractive",
        sources=[INVENTORY, MANUAL],
        citations=[cited],
    )
    assert _shown(qtbot, theme, view) == ["/docs/inventory.csv"]
