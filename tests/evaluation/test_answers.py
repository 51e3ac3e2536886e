"""`lectern eval --answers`: the metrics on hand-made answers, the question files, and runs
end to end (real files, model and DuckDB; the fake Ollama for the model-written mode)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from core.cli.main import main
from core.errors import DatasetError
from core.evaluation.answers import (
    AnswerQuestion,
    citation_supported,
    contains_gold,
    load_answer_set,
    load_questions,
    normalize_answer,
    score_answer,
    summarize,
    write_paragraphs,
)
from core.generation.citations import REFUSAL
from core.generation.qa import DoneEvent
from core.records import Citation, Hit, Span
from tests.fake_ollama import FakeOllama
from tests.helpers import text_hit

GLACIER = (
    "Stakes drilled into the ice cap show that the Morteratsch glacier retreated "
    "2.9 kilometres since 1878. Its tongue now ends above the old railway bridge."
)


def _hit(path: str, text: str) -> Hit:
    return text_hit(text, path=path)


def _citation(hit: Hit, quote: str, sentence: str) -> Citation:
    start = hit.text.find(quote)
    return Citation(
        n=1, hit=hit, spans=(Span(start, start + len(quote), None, quote),), sentence=sentence
    )


def _done(
    answer: str, mode: str, citations: tuple[Citation, ...], sources: tuple[Hit, ...]
) -> DoneEvent:
    return DoneEvent(answer=answer, mode=mode, citations=citations, warnings=(), sources=sources)


# --- the metric functions ----------------------------------------------------------------


def test_answers_are_normalised_like_squad_and_matched_on_word_boundaries() -> None:
    assert (
        normalize_answer("The  Glacier's tongue, [2] (retreated)!") == "glacier s tongue retreated"
    )
    assert contains_gold("It retreated 2.9 kilometres [1].", ("2.9 kilometres",))
    assert contains_gold("In France.", ("the France", "Paris"))
    assert not contains_gold("In 1990 it moved.", ("19",))
    # A citation marker is not an answer: gold "1" is not found in "... [1]".
    assert not contains_gold("It happened in spring [1].", ("1",))
    assert not contains_gold(REFUSAL, ("kilometres",))
    assert not contains_gold("anything", ())


def test_a_citation_supports_its_sentence_by_the_gold_answer_or_half_its_words() -> None:
    hit = _hit("/docs/glacier.txt", GLACIER)
    first = GLACIER.split(". ")[0] + "."
    # The span holds the gold answer, whatever the sentence says.
    assert citation_supported(_citation(hit, first, "It moved a lot [1]."), ("2.9 kilometres",))
    # No gold given: most of the sentence's content words are in the span.
    assert citation_supported(
        _citation(hit, first, "The Morteratsch glacier retreated since 1878 [1]."), ()
    )
    # The span is about something else than the sentence attached to it.
    second = "Its tongue now ends above the old railway bridge."
    assert not citation_supported(
        _citation(hit, second, "The Morteratsch glacier retreated 2.9 kilometres [1]."),
        ("2.9 kilometres",),
    )
    # Half the words, the subject swapped: "Heath called for …" does not support "Wilson
    # called for …" (issue 44, a 1.5B model's near miss passed as supported).
    heath = "In 1970 Edward Heath called for Israel to withdraw to its 1967 borders."
    assert not citation_supported(
        _citation(
            _hit("/docs/uk.txt", heath), heath, "In 1970 Wilson called for Israel to withdraw [1]."
        ),
        (),
    )
    assert citation_supported(
        _citation(
            _hit("/docs/uk.txt", heath), heath, "In 1970 Heath called for Israel to withdraw [1]."
        ),
        (),
    )


def test_score_answer_counts_correct_wrong_refused_and_cited() -> None:
    hit = _hit("/docs/glacier.txt", GLACIER)
    other = _hit("/docs/tides.txt", "Tide tables list the high and low water at each harbour.")
    first = GLACIER.split(". ")[0] + "."
    answerable = AnswerQuestion(
        "How far did it retreat?", ("2.9 kilometres",), "answerable", "glacier.txt"
    )
    unanswerable = AnswerQuestion("How far did it advance?", (), "unanswerable", "glacier.txt")

    right = score_answer(
        answerable,
        _done(f"{first} [1]", "extractive", (_citation(hit, first, first),), (hit, other)),
        first_token_s=0.25,
        documents=Path("/docs"),
    )
    assert right.correct and not right.declined
    assert right.retrieved and right.cited
    assert (right.citations, right.supported) == (1, 1)
    assert right.first_token_s == 0.25

    second = "Tide tables list the high and low water at each harbour."
    wrong = score_answer(
        answerable,
        _done(f"{second} [1]", "extractive", (_citation(other, second, second),), (other,)),
        first_token_s=0.5,
        documents=Path("/docs"),
    )
    assert not wrong.correct and not wrong.retrieved and not wrong.cited

    refused = score_answer(
        unanswerable,
        _done(REFUSAL, "declined", (), (hit,)),
        first_token_s=0.1,
        documents=Path("/docs"),
    )
    assert refused.declined and refused.correct
    wrongly_refused = score_answer(
        answerable,
        _done(REFUSAL, "declined", (), (hit,)),
        first_token_s=0.1,
        documents=Path("/docs"),
    )
    assert wrongly_refused.declined and not wrongly_refused.correct

    report = summarize([right, wrong, refused, wrongly_refused])
    assert report["answerable"]["questions"] == 3
    assert report["answerable"]["correct"] == pytest.approx(1 / 3, abs=1e-4)
    assert report["answerable"]["false_refusal_rate"] == pytest.approx(1 / 3, abs=1e-4)
    assert report["answerable"]["refusal_rate"] is None
    assert report["unanswerable"]["refusal_rate"] == 1.0
    assert report["all"]["questions"] == 4
    assert report["all"]["correct"] == 0.5
    # Gold documents: among the sources of all but the wrong answer, cited by the right one.
    assert report["answerable"]["gold_document_retrieved"] == pytest.approx(2 / 3, abs=1e-4)
    assert report["answerable"]["gold_document_cited"] == pytest.approx(1 / 3, abs=1e-4)
    assert report["all"]["first_token_s"]["p50"] == pytest.approx(0.175, abs=1e-3)
    assert report["out_of_corpus"]["questions"] == 0


# --- question files -------------------------------------------------------------------------


def test_the_jsonl_loader_names_the_bad_line(tmp_path: Path) -> None:
    good = {"question": "How far did the glacier retreat?", "answers": ["2.9 kilometres"]}
    cases = {
        "not json": "line 2, is not valid JSON",
        json.dumps({"answers": []}): "line 2, has no 'question'",
        json.dumps({"question": "Why?", "answers": "yes"}): "line 2: 'answers' must be a list",
        json.dumps({"question": " ", "answers": []}): "line 2: 'question' is empty",
        json.dumps({"question": "Why?", "answers": [], "document": 3}): "line 2: 'document'",
        json.dumps({"question": "Why?", "answers": ["x"], "group": "out_of_corpus"}): "line 2",
    }
    for line, expected in cases.items():
        path = tmp_path / "questions.jsonl"
        path.write_text(json.dumps(good) + "\n" + line + "\n", encoding="utf-8")
        with pytest.raises(DatasetError) as caught:
            load_questions(path)
        assert expected in caught.value.message, (line, caught.value.message)
        assert str(path) in caught.value.message


def test_the_command_says_which_line_is_bad_and_what_is_missing(
    tmp_path: Path, lectern_home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"question": "Why?", "answers": []}\n{"question": "How?"}\n', encoding="utf-8")
    assert main(["eval", "--answers", str(bad), "--documents", str(tmp_path)]) == 2
    assert f"{bad}, line 2, has no 'answers'" in capsys.readouterr().err
    good = tmp_path / "good.jsonl"
    good.write_text('{"question": "Why?", "answers": []}\n', encoding="utf-8")
    assert main(["eval", "--answers", str(good)]) == 2
    assert "--documents" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["eval", "--answers", str(good), "--documents", str(tmp_path), "--modes", "gpt"])
    assert "use none, llm or none,llm" in capsys.readouterr().err


def test_the_jsonl_loader_reads_groups(tmp_path: Path) -> None:
    path = tmp_path / "q.jsonl"
    rows = [
        {"question": "How far?", "answers": ["2.9 kilometres"], "document": "glacier.txt"},
        {"question": "Who won the 1930 cup?", "answers": []},
        {"question": "Who won the 1934 cup?", "answers": [], "group": "out_of_corpus"},
    ]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n\n", encoding="utf-8")
    questions = load_questions(path)
    assert [q.group for q in questions] == ["answerable", "unanswerable", "out_of_corpus"]
    assert questions[0].document == "glacier.txt" and questions[0].answers == ("2.9 kilometres",)
    # Added question files: a question with no answer is out of the corpus unless it says.
    assert [q.group for q in load_questions(path, unanswerable="out_of_corpus")][
        1
    ] == "out_of_corpus"


def test_squad_json_becomes_one_text_file_per_paragraph(tmp_path: Path) -> None:
    path = _squad(tmp_path / "squad.json")
    answer_set = load_answer_set(path)
    assert answer_set.kind == "squad"
    assert [q.group for q in answer_set.questions] == ["answerable", "unanswerable", "answerable"]
    assert answer_set.questions[0].answers == ("2.9 kilometres",)
    files = write_paragraphs(answer_set.paragraphs, tmp_path / "docs")
    names = sorted(p.name for p in files)
    assert names == ["Alpine_glaciers-000.txt", "Tides-001.txt"]
    assert answer_set.questions[0].document == "Alpine_glaciers-000.txt"
    text = (tmp_path / "docs" / "Alpine_glaciers-000.txt").read_text(encoding="utf-8")
    assert text.startswith("Alpine glaciers\n\n") and GLACIER in text
    # A second write leaves the files alone (their mtimes kept: no re-indexing).
    before = [(p.stat().st_mtime_ns) for p in files]
    write_paragraphs(answer_set.paragraphs, tmp_path / "docs")
    assert [(p.stat().st_mtime_ns) for p in files] == before


def test_a_file_that_is_neither_squad_nor_questions_is_a_dataset_error(tmp_path: Path) -> None:
    path = tmp_path / "other.json"
    path.write_text(json.dumps({"version": "x", "rows": []}), encoding="utf-8")
    with pytest.raises(DatasetError):
        load_answer_set(path)


# --- end to end -----------------------------------------------------------------------------

TIDES = "Tide tables list the high and low water at each harbour. Spring tides follow a full moon."
BREAD = "A sourdough starter needs flour, water and a warm kitchen to rise."


def _squad(path: Path) -> Path:
    data = {
        "version": "v2.0",
        "data": [
            {
                "title": "Alpine_glaciers",
                "paragraphs": [
                    {
                        "context": GLACIER,
                        "qas": [
                            {
                                "question": "How far has the Morteratsch glacier retreated since 1878?",
                                "id": "a",
                                "answers": [{"text": "2.9 kilometres", "answer_start": 70}] * 2,
                                "is_impossible": False,
                            },
                            {
                                "question": "How far has the Morteratsch glacier advanced since 1990?",
                                "id": "b",
                                "answers": [],
                                "plausible_answers": [
                                    {"text": "2.9 kilometres", "answer_start": 70}
                                ],
                                "is_impossible": True,
                            },
                        ],
                    }
                ],
            },
            {
                "title": "Tides",
                "paragraphs": [
                    {
                        "context": TIDES,
                        "qas": [
                            {
                                "question": "What do tide tables list?",
                                "id": "c",
                                "answers": [{"text": "the high and low water", "answer_start": 17}],
                                "is_impossible": False,
                            }
                        ],
                    }
                ],
            },
        ],
    }
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def _last_json(out: str) -> dict:
    return json.loads(out.strip().splitlines()[-1])


def test_eval_answers_without_a_model_on_own_questions(
    tmp_path: Path, lectern_home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "glacier.txt").write_text(f"Glaciers\n\n{GLACIER}\n", encoding="utf-8")
    (docs / "tides.txt").write_text(f"Tides\n\n{TIDES}\n", encoding="utf-8")
    (docs / "bread.txt").write_text(f"Bread\n\n{BREAD}\n", encoding="utf-8")
    questions = tmp_path / "questions.jsonl"
    rows = [
        {
            "question": "How far has the Morteratsch glacier retreated since 1878?",
            "answers": ["2.9 kilometres"],
            "document": "glacier.txt",
        },
        {
            "question": "What does a sourdough starter need to rise?",
            "answers": ["flour, water and a warm kitchen"],
            "document": "bread.txt",
        },
    ]
    questions.write_text("\n".join(json.dumps(r) for r in rows) + "\n", encoding="utf-8")
    extra = tmp_path / "outside.jsonl"
    extra.write_text(
        json.dumps({"question": "Which striker scored in the 1954 World Cup final?", "answers": []})
        + "\n",
        encoding="utf-8",
    )
    code = main(
        [
            "eval",
            "--answers",
            str(questions),
            "--documents",
            str(docs),
            "--questions",
            str(extra),
            "--modes",
            "none",
            "--json",
        ]
    )
    captured = capsys.readouterr()
    assert code == 0, captured.err
    result = _last_json(captured.out)
    assert result["questions"] == 3
    assert result["groups"] == {"answerable": 2, "unanswerable": 0, "out_of_corpus": 1}
    assert set(result["modes"]) == {"none"}
    none = result["modes"]["none"]
    assert none["model"] is None
    answerable = none["groups"]["answerable"]
    assert answerable["questions"] == 2
    assert answerable["correct"] == 1.0
    assert answerable["false_refusal_rate"] == 0.0
    assert answerable["gold_document_retrieved"] == 1.0
    assert answerable["gold_document_cited"] == 1.0
    assert answerable["citation_precision"] == 1.0
    assert answerable["all_citations_supported"] == 1.0
    assert answerable["first_token_s"]["p50"] > 0
    assert answerable["tokens_per_s"] is None  # nothing was generated
    assert none["groups"]["out_of_corpus"]["refusal_rate"] == 1.0
    assert none["groups"]["all"]["correct"] == 1.0
    assert none["answer_modes"]["declined"] == 1
    assert "questions" in captured.err  # progress went to standard error


def test_eval_answers_with_the_configured_server_side_by_side(
    tmp_path: Path,
    lectern_home: Path,
    fake_ollama: FakeOllama,
    capsys: pytest.CaptureFixture[str],
) -> None:
    (lectern_home / "settings.json").write_text(
        json.dumps({"llm_url": fake_ollama.url}), encoding="utf-8"
    )
    squad = _squad(tmp_path / "squad.json")
    args = ["eval", "--answers", str(squad), "--modes", "none,llm", "--json"]
    assert main(args) == 0
    result = _last_json(capsys.readouterr().out)
    assert result["groups"] == {"answerable": 2, "unanswerable": 1, "out_of_corpus": 0}
    llm = result["modes"]["llm"]
    assert "error" not in llm
    assert llm["model"] == "llama3.2"
    assert llm["answer_modes"]["generated"] == 3  # the fake quotes source [1] every time
    assert len(fake_ollama.requests_to("/api/chat")) == 3
    answerable = llm["groups"]["answerable"]
    assert answerable["gold_document_retrieved"] == 1.0
    assert answerable["citation_precision"] == 1.0  # a quoted sentence supports itself
    assert answerable["first_token_s"]["mean"] > 0
    assert answerable["tokens_per_s"] > 0
    assert llm["groups"]["unanswerable"]["refusal_rate"] == 0.0  # the fake never declines
    assert result["modes"]["none"]["model"] is None

    # The server gone: the model-written mode says so; the run and the other mode go on.
    fake_ollama.stop()
    assert main(args) == 0
    result = _last_json(capsys.readouterr().out)
    assert "error" in result["modes"]["llm"] and result["modes"]["llm"]["model"] == "llama3.2"
    assert result["modes"]["none"]["groups"]["all"]["questions"] == 3
