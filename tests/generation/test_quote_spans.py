"""Quotes that reach the value (issue 44, item 3), with the real embedding model: the
sentence that holds what was asked is quoted even when it is two sentences on, a
footnote's number stays out of the quote, and "what did it charge" asks for a sum."""

from __future__ import annotations

from core.embedding.models import Embedder
from core.generation.extractive import answer_type, extract_answer
from tests.helpers import text_hit

GUN = (
    "The Dahlgren gun was the standard bow gun of the Union navy's river boats. "
    "It was cast at the Washington Navy Yard under Dahlgren's own eye. "
    "Its tube measured twelve feet from breech to muzzle.\n\n"
    "The crews preferred it to the older Parrott rifles, which burst more often."
)

CRASH = (
    "The accident report lists 189 fatalities2 among the passengers and crew. "
    "The aircraft had been delivered to the airline eleven weeks earlier.3 "
    "Investigators recovered both flight recorders within days."
)


def test_the_value_two_sentences_on_is_quoted(embedder: Embedder) -> None:
    answer = extract_answer("How long was the Dahlgren gun?", [text_hit(GUN)], embedder)
    assert not answer.declined
    assert "twelve feet" in answer.text
    # The sentence between is quoted too: the quote reads as the document does.
    assert "Washington Navy Yard" in answer.text
    assert "Parrott" not in answer.text  # another paragraph


def test_a_footnote_number_is_not_part_of_the_quote(embedder: Embedder) -> None:
    answer = extract_answer(
        "How many fatalities does the accident report list?", [text_hit(CRASH)], embedder
    )
    assert not answer.declined
    assert "189 fatalities among" in answer.text
    assert "fatalities2" not in answer.text and "earlier.3" not in answer.text
    # The citation still highlights the document's own characters.
    span = answer.citations[0].spans[0]
    assert CRASH[span.start : span.end] == span.text


def test_a_question_about_a_charge_or_a_wage_asks_for_a_number() -> None:
    for question in (
        "What did the AA charge for the new battery?",
        "What does the Roman Catholic chaplain job at the VA pay?",
        "What share of occupied housing units were inadequate in 2009?",
        "number of states in the scanty category on 10 July",
    ):
        assert answer_type(question) == "number", question
    assert answer_type("What did he pay attention to?") == ""
