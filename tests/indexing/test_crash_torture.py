"""Issue 10: no crash can break the library.

``lectern index`` runs over a few hundred real files and is ``kill -9``-ed at 10 random
moments after it has begun writing: during chunk batches, keyword (fts) rebuilds, vector
saves and checkpoints. After every kill the library must open. After the kills one
uninterrupted run must leave exactly what a clean rebuild of the same folder holds: the
same chunks (none lost, none duplicated), vector keys equal to the chunk ids, no document
left pending, and keyword search finding each file's own word.

The seed is printed; ``LECTERN_TORTURE_SEED=<seed>`` replays the same kill plan (the
moments themselves depend on timing). ``bench/crash_torture.py`` runs the same harness
with 100+ kills.
"""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

from tests.crash_harness import (
    RECORD_REPAIRS,
    build_corpus,
    clean_rebuild,
    compare,
    final_run,
    snapshot,
    torture,
)

# Each run loads the model: twenty kills were four and a half minutes of the suite on an
# AVX2-only CPU.
KILLS = 10
FILES = 240  # text files at the end (40 at first, more before each run); 5 PDFs, 5 samples
INITIAL = 40
# Run 5 takes in 250 new or rewritten files at once and is killed after the indexer's first
# mid-run publish of keyword search (the moment the failure needs).
LONG_RUNS = (4,)
LONG_FILES = 250


@pytest.mark.slow
def test_kill_9_at_random_moments_never_breaks_the_library(
    tmp_path: Path, shared_data: Path, embedder: object
) -> None:
    seed = int(os.environ.get("LECTERN_TORTURE_SEED") or random.SystemRandom().randrange(2**32))
    print(f"crash torture seed: {seed} (LECTERN_TORTURE_SEED={seed} to replay)")
    rng = random.Random(seed)
    corpus = build_corpus(tmp_path / "docs", shared_data, FILES, rng, INITIAL)
    home = tmp_path / "home"
    home.mkdir()

    attempts = torture(
        home, corpus, KILLS, rng, long_runs=LONG_RUNS, long_files=LONG_FILES, stop_on_failure=True
    )
    failed = [a for a in attempts if not a.opened]
    assert not failed, (
        f"seed {seed}: the library did not open after kill {len(attempts)}: {failed[0].error}"
    )

    lost = [
        (i + 1, a.repairs) for i, a in enumerate(attempts) if set(a.repairs) & set(RECORD_REPAIRS)
    ]
    assert not lost, f"seed {seed}: committed changes were set aside after kills: {lost}"

    summary = final_run(home, corpus.folder)
    print(f"final run: {summary}")
    clean_home = tmp_path / "clean"
    clean_rebuild(clean_home, corpus.folder, embedder)

    words = [*corpus.markers.values(), *sorted(corpus.gone)]
    got = snapshot(home, corpus.folder, words, embedder)
    clean = snapshot(clean_home, corpus.folder, words, embedder)
    result = compare(got, clean, corpus)
    print(f"seed {seed}: {result}")
    assert sum(clean.chunks.values()) >= len(corpus.markers)  # the rebuild indexed them all
    assert result.lost == 0, f"seed {seed}: {result.lost} chunks lost"
    assert result.duplicated == 0, f"seed {seed}: {result.duplicated} chunks duplicated"
    assert result.extra == 0, f"seed {seed}: {result.extra} chunks a clean rebuild lacks"
    assert not result.stuck, f"seed {seed}: documents not finished: {result.stuck[:10]}"
    assert not result.states_differ, f"seed {seed}: states differ: {result.states_differ[:10]}"
    assert result.vector_mismatch == 0, f"seed {seed}: vector keys != chunk ids"
    assert result.file_mismatch == 0, f"seed {seed}: the saved vector file != chunk ids"
    assert not result.markers_missed, f"seed {seed}: keyword search: {result.markers_missed[:5]}"
    assert not result.ghosts, f"seed {seed}: removed text still found: {result.ghosts[:5]}"
