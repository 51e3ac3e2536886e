"""The parts an answer is quoted from, on real documents' layouts (issue 44), with the
real embedding model: a table that the PDF's text layer gave line by line is quoted by
its row, a label alone on its line is read with the value under it, a sentence closing
inside its quotes and a sum on a line of its own are quoted, a day written "6." before
its month ends no sentence, a year is not an amount, and the row that holds the asked
figure is quoted beside the table's caption that only talks about it."""

from __future__ import annotations

from core.embedding.models import Embedder
from core.generation.extractive import extract_answer, has_type
from core.text import split_sentences
from tests.helpers import text_hit

# As pypdf gives a price table that no table reader took: one line per row.
PRICES = (
    "National Weekly Energy Round-Up\n"
    "Ethanol ($/gal)\n"
    "Iowa 1.35 - 1.42 1.38 - 1.43 1.27 - 1.35 Iowa Ethanol\n"
    "Minnesota 1.38 - 1.48 1.40 - 1.49 1.28 - 1.35 Minnesota Ethanol\n"
    "South Dakota 1.48 - 1.55 1.49 - 1.55 1.28 - 1.34 South Dakota Ethanol\n"
    "Wisconsin 1.30 - 1.34 1.31 - 1.36 1.27 - 1.34 Wisconsin Ethanol\n"
    "Biodiesel ($/gal)\n"
    "Iowa 2.85 2.99 - 3.30 2.85 - 3.07\n"
)

NOTICE = (
    "Applications sent through an internal mail system will not be considered.\n\n"
    "Contact Information:\n\n"
    "MARGARET OYELARAN\n\n"
    "Phone: 555-0142\n\n"
    "Normally applicants hear back within three weeks."
)

REVIEW = (
    "The grants programme was evaluated by the ministry's assessment panel in 2019. "
    "The programme received a rating of \u201cModerately effective.\u201d\n"
    "This rating describes a programme that needs to set more ambitious goals."
)

CAR_LOG = (
    "30 May 2022    55,020 mi   MOT, Fairfield Autos\n"
    "  Passed, no advisories.\n"
    "  \u00a354.85\n\n"
    "8 Jan 2023    58,700 mi   roadside (AA)\n"
    "  Battery dead on a cold morning. The AA patrol jump-started it and fitted a new\n"
    "  battery on the spot (Varta, 3-year warranty).\n"
    "  \u00a3164.00\n\n"
    "2 Jun 2023    61,450 mi   MOT + service, Fairfield Autos\n"
    "  MOT passed. Service included brake fluid change.\n"
)

HANDOVER = (
    "**Schlafzimmer:** Zwei Dübellöcher über dem Bett waren noch nicht verspachtelt.\n"
    "Wir haben vereinbart, dass ich sie bis zum 6. September schließe.\n\n"
    "**Keller:** Leer geräumt, besenrein."
)

GROWTH = (
    "TABLE 4: STATE-WISE DECADAL GROWTH RATE OF POPULATION (Per cent)\n"
    "States 1981-1991 1991-2001 2001-2011\n"
    "Goa 16.08 15.21 8.17\n"
    "Gujarat 21.19 22.66 19.17\n"
    "Kerala 14.32 9.43 4.86\n"
    "Odisha 20.06 16.25 13.97\n"
    "Source: Registrar General of India.\n"
)


def test_a_table_read_line_by_line_is_quoted_by_its_row(embedder: Embedder) -> None:
    answer = extract_answer(
        "What was ethanol selling for in South Dakota?", [text_hit(PRICES)], embedder
    )
    assert not answer.declined
    assert "South Dakota 1.48 - 1.55" in answer.text
    assert "Minnesota" not in answer.text and "Wisconsin" not in answer.text


def test_a_label_alone_on_its_line_is_read_with_its_value(embedder: Embedder) -> None:
    answer = extract_answer("Who is the contact person?", [text_hit(NOTICE)], embedder)
    assert not answer.declined
    assert "Contact Information: MARGARET OYELARAN" in answer.text


def test_a_sentence_closing_inside_its_quotes_is_quoted(embedder: Embedder) -> None:
    answer = extract_answer(
        "What rating did the grants programme get?", [text_hit(REVIEW)], embedder
    )
    assert not answer.declined
    assert "Moderately effective" in answer.text


def test_a_sum_on_a_line_of_its_own_is_quoted(embedder: Embedder) -> None:
    answer = extract_answer(
        "What did the AA charge for the new battery?", [text_hit(CAR_LOG)], embedder
    )
    assert not answer.declined
    assert "\u00a3164.00" in answer.text
    assert "\u00a354.85" not in answer.text


def test_a_day_before_its_month_ends_no_sentence(embedder: Embedder) -> None:
    sentences = [HANDOVER[s:e] for s, e in split_sentences(HANDOVER)]
    assert "Wir haben vereinbart, dass ich sie bis zum 6. September schließe." in sentences
    # English keeps its own: a number then a month that only English names.
    text = "The results are in Table 12. March was the worst month."
    assert len(split_sentences(text)) == 2
    answer = extract_answer(
        "Bis wann muss ich die Dübellöcher über dem Bett schließen?",
        [text_hit(HANDOVER)],
        embedder,
    )
    assert "bis zum 6. September" in answer.text


def test_the_row_holding_the_figure_is_quoted_beside_its_caption(embedder: Embedder) -> None:
    answer = extract_answer(
        "What was Kerala's decadal population growth rate for 2001-2011, in per cent?",
        [text_hit(GROWTH)],
        embedder,
    )
    assert not answer.declined
    assert "Kerala 14.32 9.43 4.86" in answer.text
    assert "Goa" not in answer.text and "Odisha" not in answer.text


def test_a_year_is_not_an_amount() -> None:
    question = "How many discount stores were there in Germany in 1996?"
    assert not has_type("number", "1991 1992 1993 1994 1995", question)
    assert not has_type("number", "See Table 6.7 and Figure 2", question)
    assert has_type("number", "Germany 12130 stores", question)


# Page 1 ends mid-sentence; the PDF reader joins pages with a blank line.
CUT = (
    "The investigation began two days after the accident. The final report lists 189\n\n"
    "fatalities among the passengers and crew of the flight.\n"
    "Both flight recorders were recovered from the sea bed."
)


def test_a_sentence_cut_by_a_page_break_is_quoted_whole(embedder: Embedder) -> None:
    answer = extract_answer(
        "How many fatalities does the final report list?", [text_hit(CUT)], embedder
    )
    assert not answer.declined
    assert "The final report lists 189 fatalities among the passengers" in answer.text
