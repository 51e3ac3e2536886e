"""The fusion learns from the library's own questions which list is the surer one.

Hand-made score lists for the rule; a real library (real files, model and DuckDB) for the
record it keeps, what may and may not teach it, and what `lectern status` says of it."""

from __future__ import annotations

import json
from pathlib import Path

from core.embedding.models import DEFAULT_MODEL_ID, MULTILINGUAL_MODEL_ID
from core.retrieval.fusion import (
    FUSIONS,
    FusionContext,
    FusionParams,
    LibraryCalibration,
    SurerList,
    calibrated_prior,
    fuse,
    fusion_params,
)


def _flat(docs: range, top: float, step: float) -> list[tuple[int, float]]:
    return [(d, top - i * step) for i, d in enumerate(docs)]


# BM25 singles out document 1 (a word it happens to share with the question); meaning
# search puts document 2 just above it. Alone, the query's confidences give BM25 the say.
BM25 = [(1, 7.0), *_flat(range(100, 199), top=5.0, step=0.03)]
DENSE = [(2, 0.62), (1, 0.6), *_flat(range(200, 298), top=0.55, step=0.002)]


def test_a_new_library_fuses_with_the_plain_prior() -> None:
    params = FusionParams()
    assert calibrated_prior(params, SurerList()) == params.bm25_prior
    assert fuse(BM25, DENSE, params, prior=calibrated_prior(params, SurerList()))[0][0] == 1


def test_where_meaning_search_is_usually_surer_the_keyword_list_loses_its_say() -> None:
    # Three questions in four led by meaning (a library of paraphrased questions): the
    # same lists now rank meaning search's document first.
    params = FusionParams()
    led = SurerList(questions=80, meaning_surer=60)
    prior = calibrated_prior(params, led)
    assert prior < params.bm25_prior / 10
    assert fuse(BM25, DENSE, params, prior=prior)[0][0] == 2
    # The record only ever moves towards meaning: a keyword-led library keeps the prior.
    assert calibrated_prior(params, SurerList(80, 5)) == params.bm25_prior
    # A few questions move it less than many: a new record counts as ten at the reference.
    assert prior < calibrated_prior(params, SurerList(3, 3)) < params.bm25_prior
    # No tilt, no calibration.
    untilted = FusionParams(library_tilt=0.0)
    assert calibrated_prior(untilted, led) == untilted.bm25_prior


def test_each_model_tells_a_keyword_led_library_from_a_paraphrase_one() -> None:
    # The records measured on SciFact train (the meaning list surer on 297 of 809
    # questions with multilingual-e5-small, 211 with MiniLM), where BM25 is the stronger
    # list, and on the English paraphrase set (40 of 80 with e5, 60 with MiniLM), where
    # meaning search is. Under e5's first calibration (reference 0.3) SciFact's record
    # tilted its prior away and hybrid fell under BM25 (0.673 against 0.689).
    for model, scifact, paraphrases in (
        (MULTILINGUAL_MODEL_ID, SurerList(809, 297), SurerList(80, 40)),
        (DEFAULT_MODEL_ID, SurerList(809, 211), SurerList(80, 60)),
    ):
        params = fusion_params(model)
        assert calibrated_prior(params, scifact) == params.bm25_prior, model
        assert calibrated_prior(params, paraphrases) < 0.6 * params.bm25_prior, model


def test_the_adaptive_fusion_keeps_the_record_as_questions_come() -> None:
    saved: list[SurerList] = []
    calibration = LibraryCalibration(save=saved.append, save_every=3)
    context = FusionContext(FusionParams(), 60, lambda docs: frozenset(), calibration)
    confidences: list[tuple[float, float]] = []
    fuse(BM25, DENSE, FusionParams(), observe=lambda b, d: confidences.append((b, d)))
    ((cb, cd),) = confidences
    assert cb > cd  # on this question keyword search is the surer list
    for _ in range(2):
        FUSIONS["adaptive"](BM25, DENSE, context)
        FUSIONS["adaptive"](DENSE, BM25, context)  # lists swapped: meaning surer
    assert calibration.record == SurerList(4, 2)
    assert saved == [SurerList(3, 1)]  # every third question, not every one
    calibration.flush()
    assert saved[-1] == SurerList(4, 2)
    # One empty list says nothing of which is surer.
    FUSIONS["adaptive"](BM25, [], context)
    with calibration.paused():
        FUSIONS["adaptive"](BM25, DENSE, context)
    assert calibration.record == SurerList(4, 2)
    calibration.reset()
    assert calibration.record == SurerList() and saved[-1] == SurerList()


def test_a_question_asked_while_the_library_is_being_embedded_teaches_nothing() -> None:
    # Keyword search's document 1 is written but not embedded yet: the meaning list is
    # partial, so which list was surer says nothing of the library.
    calibration = LibraryCalibration()
    pending = FusionContext(FusionParams(), 60, lambda docs: frozenset({1}), calibration)
    ranked = FUSIONS["adaptive"](BM25, DENSE, pending)
    assert ranked[0][0] == 1  # still found, by keyword search
    assert calibration.record == SurerList()
    embedded = FusionContext(FusionParams(), 60, lambda docs: frozenset(), calibration)
    FUSIONS["adaptive"](BM25, DENSE, embedded)
    assert calibration.record == SurerList(1, 0)


def test_an_unreadable_record_is_a_new_one() -> None:
    assert SurerList.from_text(SurerList(12, 7).to_text()) == SurerList(12, 7)
    for text in (None, "", "12", "a b", "5 9", "-1 0", "3 2 1"):
        assert SurerList.from_text(text) == SurerList(), text


def _write_notes(folder: Path) -> None:
    folder.mkdir()
    notes = {
        "boiler.md": "The boiler is serviced every October by the Brenner company.",
        "bikes.md": "Bicycles are kept in the shed behind the house; the key hangs inside.",
        "bins.md": "Recycling goes out on Tuesday evenings, garden waste every other Friday.",
    }
    for name, text in notes.items():
        (folder / name).write_text(f"# {name[:-3].title()}\n\n{text}\n", encoding="utf-8")


def test_the_library_keeps_its_record_across_sessions_and_says_it(
    lectern_home: Path, embedder, tmp_path: Path
) -> None:
    from core.cli.main import status_lines
    from core.config import Settings
    from core.evaluation.library_check import CheckQuestion, measure
    from core.library import Library

    folder = tmp_path / "notes"
    _write_notes(folder)
    settings = Settings(home=lectern_home)
    questions = [
        "when is the boiler looked at",
        "where is the shed key",
        "which evening does the recycling go out",
    ]
    with Library(settings, embedder=embedder) as library:
        library.index([folder])
        assert library.status()["fusion"]["questions"] == 0
        for question in questions:
            assert library.search(question, k=3)  # hybrid: the fusion learns
        # One list only says nothing of which is surer: a keyword search, or a question
        # none of whose words any passage holds.
        library.search("boiler", k=3, mode="bm25")
        assert library.search("when is the heating looked at", k=3)
        record = library.status()["fusion"]
        assert record["questions"] == len(questions)
        # Made-up questions (the library check's) do not count.
        target = library.search("boiler serviced", k=1)[0]
        made_up = CheckQuestion("boiler October", target.path, target.start, target.end, "sentence")
        measure(library, [made_up] * 4)
        assert library.status()["fusion"]["questions"] == len(questions) + 1
    with Library(settings, embedder=embedder) as library:
        status = library.status()
        assert status["fusion"]["questions"] == len(questions) + 1
        assert 0 <= status["fusion"]["meaning_surer"] <= len(questions) + 1
        line = next(x for x in status_lines(status) if x.startswith("Hybrid search:"))
        assert f"of the {len(questions) + 1} questions asked here" in line
        json.dumps(status)  # `lectern status --json` prints it as it is


def test_an_evaluation_starts_from_a_new_record(
    lectern_home: Path, embedder, tmp_path: Path
) -> None:
    from core.config import Settings
    from core.evaluation.beir import evaluate
    from core.library import Library

    beir = tmp_path / "set"
    (beir / "qrels").mkdir(parents=True)
    docs = {
        "d1": "The boiler is serviced every October by the Brenner company.",
        "d2": "Bicycles are kept in the shed behind the house.",
    }
    (beir / "corpus.jsonl").write_text(
        "".join(json.dumps({"_id": k, "title": "", "text": v}) + "\n" for k, v in docs.items())
    )
    (beir / "queries.jsonl").write_text(
        json.dumps({"_id": "q1", "text": "when is the boiler looked at"}) + "\n"
    )
    (beir / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\n")
    scratch = tmp_path / "scratch"
    settings = Settings(home=lectern_home)
    for _ in range(2):
        evaluate(beir, settings=settings, scratch=scratch)
    with Library(Settings(home=scratch / "home"), embedder=embedder) as library:
        # Each run taught it its one question, from nothing: not two.
        assert library.status()["fusion"]["questions"] == 1
