"""A "how many" question whose answer is rows of a table gets their count said, not only
the rows listed (issue 46: "How many hydraulic pumps are in Hamburg?" quoted three rows
and never said how many). The sum is of the quoted rows alone, and says so: a row the
quote leaves out is not counted, and rows that do not all match the question are not
added up. Real files, real model, ``ask(..., use_llm=False)``."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest

from core.config import Settings
from core.generation.qa import DoneEvent, ask
from core.library import Library
from tests.generation.test_extractive_answers import check_citations

CITIES = ["Hamburg", "Bremen", "Kiel", "Hannover", "Berlin", "Lübeck"]
KINDS = ["hydraulic pump", "centrifugal pump", "compressor", "valve block", "hydraulic pump"]


def equipment_register() -> str:
    """The walk-through's table: 90 sites, a count of each kind of equipment per site."""
    rows = ["site,city,equipment,count,last service"]
    for i in range(90):
        service = f"2024-0{i % 9 + 1}-1{i % 9}"
        rows.append(f"Site {i + 1},{CITIES[i % 6]},{KINDS[i % 5]},{(i * 7) % 13 + 1},{service}")
    return "\n".join(rows) + "\n"


@pytest.fixture(scope="module")
def library(tmp_path_factory: pytest.TempPathFactory, embedder: object) -> Iterator[Library]:
    base = tmp_path_factory.mktemp("counts")
    folder = base / "docs"
    folder.mkdir()
    (folder / "equipment-register-north-germany.csv").write_text(
        equipment_register(), encoding="utf-8"
    )
    (folder / "crew.txt").write_text(
        "The night shift in Kiel has four engineers. Each of them is on call one week in "
        "four, and the rota is kept by the harbour office.\n",
        encoding="utf-8",
    )
    home = base / "home"
    home.mkdir()
    made = Library(Settings(home=home), embedder=embedder)  # type: ignore[arg-type]
    made.index([folder])
    yield made
    made.close()


def answer(library: Library, question: str) -> DoneEvent:
    done = list(ask(library, question, use_llm=False, store=False))[-1]
    assert isinstance(done, DoneEvent), done
    check_citations(library, done)
    return done


SUM_LINE = re.compile(
    r"Added up, the “count” of the (\d+) rows quoted here is (\d+) \(([\d + ]+)\)\."
)


def test_how_many_over_table_rows_says_the_count_of_the_rows_quoted(library: Library) -> None:
    done = answer(library, "How many hydraulic pumps are in Hamburg?")
    assert done.mode == "extractive", done.answer
    rows = [c.sentence for c in done.citations]
    assert len(rows) >= 2 and all("Hamburg" in r and "hydraulic pump" in r for r in rows)
    found = SUM_LINE.search(done.answer)
    assert found, done.answer
    counts = [int(re.search(r"count: (\d+)", r).group(1)) for r in rows]  # type: ignore[union-attr]
    assert int(found.group(1)) == len(rows)
    assert int(found.group(2)) == sum(counts)
    assert found.group(3) == " + ".join(str(c) for c in counts)
    # Said after the rows it adds up, as a paragraph of its own.
    assert done.answer.endswith(found.group(0)) and "\n\n" in done.answer


def test_no_count_is_said_where_the_rows_are_not_the_answer(library: Library) -> None:
    # A sentence answers it: nothing to add up.
    prose = answer(library, "How many engineers are on the night shift in Kiel?")
    assert not SUM_LINE.search(prose.answer) and "Added up" not in prose.answer
    # Rows, but not a "how many" question.
    rows = answer(library, "When was the hydraulic pump at Site 55 last serviced?")
    assert "Added up" not in rows.answer


def test_rows_that_do_not_all_match_the_question_are_not_added_up() -> None:
    from core.generation.extractive import ScoredSentence, count_line

    def row(city: str, count: int) -> ScoredSentence:
        text = f"site: Site 1; city: {city}; equipment: hydraulic pump; count: {count}"
        return ScoredSentence(0, 0, 1, text, 0.5, 0.5, 0.5, kind="row")

    question = "How many hydraulic pumps are in Hamburg?"
    assert count_line(question, [row("Hamburg", 2), row("Hamburg", 5)]) == (
        "Added up, the “count” of the 2 rows quoted here is 7 (2 + 5)."
    )
    assert count_line(question, [row("Hamburg", 2), row("Bremen", 5)]) == ""
    assert count_line(question, [row("Hamburg", 2)]) == ""  # one row says it itself
    assert count_line("Which pumps are in Hamburg?", [row("Hamburg", 2), row("Hamburg", 5)]) == ""
