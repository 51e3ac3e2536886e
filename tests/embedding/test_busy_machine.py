"""A busy computer (issue 34): OpenMP threads that wait without spinning, and a second
stage that keeps to its time and says when it was cut short."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from core.records import SECOND_STAGE_NOTE, second_stage_state
from core.retrieval.search import SecondStagePace
from core.retrieval.second_stage import RerankParams, rerank_counted
from tests.conftest import REPO
from tests.helpers import text_hit, write_files

WAIT_POLICY_PROBE = """
import os, sys
sys.path.insert(0, {repo!r})
from core.embedding.models import SentenceTransformerEmbedder
SentenceTransformerEmbedder(encoding="fp32", threads=2).embed(["one", "two", "three", "four", "five"])
print(os.environ.get("OMP_WAIT_POLICY"), os.environ.get("GOMP_SPINCOUNT"))
"""


@pytest.mark.parametrize(("given", "seen"), [(None, "PASSIVE 3000"), ("ACTIVE", "ACTIVE None")])
def test_the_encoders_threads_spin_briefly_then_sleep_unless_the_user_said_otherwise(
    given: str | None, seen: str
) -> None:
    # Read by OpenMP once, when torch loads it: so checked in a fresh process, as the
    # encoder leaves it set there before torch's libraries load.
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
    if given:
        env["OMP_WAIT_POLICY"] = given
    out = subprocess.run(
        [sys.executable, "-c", WAIT_POLICY_PROBE.format(repo=str(REPO))],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == seen


def test_a_stage_cut_short_reorders_only_the_documents_it_reached() -> None:
    fused = [(1, 4.0), (2, 3.0), (3, 2.0), (4, 1.0), (5, 0.5)]
    chunks_of = {d: [10 * d] for d in range(1, 6)}
    late = {10: 0.1, 20: 0.9, 30: 0.8, 40: 0.99, 50: 0.99}
    asked: list[list[int]] = []

    def reached_three(ids: list[int]) -> dict[int, float]:
        asked.append(ids)
        return {c: late[c] for c in ids[:3]}  # time ran out after three passages

    out, rescored = rerank_counted(fused, chunks_of, reached_three, RerankParams(depth=5))
    assert asked == [[10, 20, 30, 40, 50]]  # best placed document first
    assert rescored == 3
    assert [d for d, _ in out][3:] == [4, 5]  # the rest in the first stage's order
    assert sorted(d for d, _ in out[:3]) == [1, 2, 3] and out[0][0] != 1
    scores = [s for _, s in out]
    assert scores == sorted(scores, reverse=True)

    def reached_one(ids: list[int]) -> dict[int, float]:
        return {c: late[c] for c in ids[:1]}

    # One document re-scored orders nothing: the first stage's order stands.
    assert rerank_counted(fused, chunks_of, reached_one, RerankParams(depth=5)) == (fused, 0)


def test_the_budget_follows_the_unhurried_rate_of_slices_of_that_size() -> None:
    pace = SecondStagePace()
    params = RerankParams(budget_factor=2.0, min_budget_s=0.25)
    assert pace.budget_s([512], params) == float("inf")  # nothing known: no limit yet
    pace.observe(1000, 0.1)  # long slices: 10,000 pieces a second
    pace.observe(100, 0.05)  # short ones pay the fixed cost per call: 2,000
    pace.observe(1000, 1.0)  # the same size on a busy moment does not lower the best
    assert pace.expected_s(1000) == pytest.approx(0.1)
    assert pace.expected_s(100) == pytest.approx(0.05)
    assert pace.budget_s([1000, 1000, 100], params) == pytest.approx(2 * 0.25)
    assert pace.budget_s([10], params) == 0.25  # never below the floor
    prior = SecondStagePace(prior_tokens_per_s=5000)
    assert prior.expected_s(1024) == pytest.approx(1024 / 5000)


def _hits(*states: bool | None) -> list[Any]:
    return [replace(text_hit(f"passage {i}", i), reranked=s) for i, s in enumerate(states, 1)]


def test_a_search_says_how_its_second_stage_went() -> None:
    assert second_stage_state(_hits(None, None)) == "off"
    assert second_stage_state(_hits(True, True, None)) == "full"
    assert second_stage_state(_hits(True, False, None)) == "cut short"
    assert second_stage_state(_hits(False, False)) == "skipped"
    assert _hits(False)[0].to_json()["reranked"] is False


NOTES = {
    "boiler.md": "# Boiler\nThe boiler pressure gauge should read between one and two bar.",
    "garden.md": "# Garden\nWater the tomatoes early in the morning during hot weeks.",
    "bike.md": "# Bike\nInflate the bicycle tyres to the pressure printed on the sidewall.",
    "tax.md": "# Tax\nThe annual tax return is due at the end of January.",
    "kettle.md": "# Kettle\nDescale the kettle when the pressure of limescale builds up.",
    "tyres.md": "# Car\nCheck the car tyre pressure monthly and before long journeys.",
}
QUESTION = "what pressure should the heating boiler show"


def test_a_slow_computer_cuts_the_second_stage_short_and_the_results_say_so(
    lectern_home: Path, embedder, tmp_path: Path
) -> None:
    from core.config import Settings
    from core.library import Library

    docs = write_files(tmp_path / "docs", NOTES)
    real = embedder.token_vectors
    encoded: list[int] = []

    def slowed(texts: list[str]) -> list[np.ndarray]:
        # Another program holds the cores: each call takes ten times its own time.
        t0 = time.monotonic()
        states = real(texts)
        time.sleep(9 * (time.monotonic() - t0) + 0.02)
        encoded.append(len(texts))
        return states

    with Library(Settings(home=lectern_home), embedder=embedder) as library:
        library.index([docs])
        retriever = library.retriever
        unhurried = library.search(QUESTION, k=6)
        assert second_stage_state(unhurried) in ("full", "cut short")  # a busy CI may cut
        # The stage reads the word pieces indexing kept; a library without them (indexed
        # before they were kept) encodes the passages within the stage's time budget.
        retriever._pieces = None
        retriever._piece_cache = type(retriever._piece_cache)()
        library.embedder.token_vectors = slowed  # type: ignore[method-assign]
        # One passage per look at the clock, so the test sees the stage stop between them.
        retriever.pace.SLICE = 1
        try:
            busy = library.search(QUESTION, k=6)
        finally:
            del library.embedder.token_vectors
        assert second_stage_state(busy) in ("cut short", "skipped")
        assert sum(encoded) - 1 < len(NOTES)  # fewer passages than the short list holds
        assert {h.document_id for h in busy} == {h.document_id for h in unhurried}
        # With no time at all the stage is skipped: the first stage's order, said so.
        library.embedder.token_vectors = real  # type: ignore[method-assign]
        try:
            retriever._second_stage = RerankParams(budget_factor=0.0, min_budget_s=0.0)
            retriever._piece_cache = type(retriever._piece_cache)()
            skipped = library.search(QUESTION, k=6)
            retriever._second_stage = None
            first_stage = library.search(QUESTION, k=6)
        finally:
            del library.embedder.token_vectors
        assert second_stage_state(skipped) == "skipped"
        assert [h.chunk_id for h in skipped] == [h.chunk_id for h in first_stage]
        assert second_stage_state(first_stage) == "off"


def test_lectern_search_prints_the_note_when_the_stage_was_cut(
    lectern_home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch
) -> None:
    import json

    from core.cli import main as cli

    docs = write_files(tmp_path / "docs", NOTES)
    assert cli.main(["index", str(docs)]) == 0
    from core.library import Library

    with Library(migrate=False) as library:
        # As indexed before word pieces were kept: the stage would have to encode.
        library.pieces.drop_all()
    no_time = RerankParams(budget_factor=0.0, min_budget_s=0.0)
    monkeypatch.setattr("core.library.RerankParams", lambda: no_time)
    capsys.readouterr()
    assert cli.main(["search", QUESTION]) == 0
    assert SECOND_STAGE_NOTE in capsys.readouterr().out
    assert cli.main(["search", QUESTION, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["second_stage"] == "skipped"
    assert cli.main(["search", "boiler pressure", "--mode", "bm25", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["second_stage"] == "off"


def test_the_search_list_says_when_the_computer_was_too_busy(qtbot: Any) -> None:
    from desktop.search_results import SearchResultsWidget
    from desktop.theme import Theme

    theme = Theme("light")
    cut = SearchResultsWidget("boiler pressure", theme)
    qtbot.addWidget(cut)
    cut.set_hits(_hits(True, False, False))
    assert SECOND_STAGE_NOTE in cut.header.text()
    full = SearchResultsWidget("boiler pressure", theme)
    qtbot.addWidget(full)
    full.set_hits(_hits(True, True))
    assert SECOND_STAGE_NOTE not in full.header.text()


def test_indexing_threads_follow_the_cores_that_are_free() -> None:
    from core.embedding.batching import ThreadChooser

    chooser = ThreadChooser(start=1, cores=2)  # a probe taken while another program ran
    assert chooser.candidates == [1, 2]
    every, run = ThreadChooser.EXPLORE_EVERY, ThreadChooser.EXPLORE_RUN
    picks = [chooser.pick() for _ in range(every)]
    assert picks == [1] * (every - run - 1) + [2] * run + [1]  # a few in a row on two

    def ran(threads: int, rate: float, times: int = 1) -> None:
        for _ in range(times):
            chooser.record(threads, int(rate), 1.0)

    ran(1, 5_000, 2)
    ran(2, 1_000)  # the first after a change: threads waking up, left out
    ran(2, 8_000)  # the second core is free now
    assert chooser.current == 2 and chooser.rates == {1: 5_000, 2: 8_000}
    ran(2, 4_000, 6)  # then another program takes it: two threads gain nothing
    assert chooser.current == 1
    ran(1, 5_000, 2)
    ran(2, 5_000, 3)  # within 5% of one thread: the fewer threads stay
    assert chooser.current == 1
    assert ThreadChooser(start=1, cores=1).candidates == [1]
