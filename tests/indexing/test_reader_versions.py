"""A format whose reader changed is read again once (core/formats.py ``version``):
a library indexed by an older reader would otherwise keep what it made (issue 46: PDFs
indexed before spaced-letter headings were joined kept "R E SULTS")."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

from core.config import Settings
from core.formats import BY_KIND, reader_versions
from core.library import READER_VERSIONS_KEY, Library


def test_files_of_a_changed_reader_are_read_again_once_and_stay_searchable(
    lectern_home: Path, embedder: Any, sample_folder: Path
) -> None:
    assert BY_KIND["pdf"].version > 1
    settings = replace(Settings(home=lectern_home))
    with Library(settings, embedder=embedder) as library:
        first = library.index([sample_folder])
        assert first.added == 5
        # What a library indexed before the PDF reader's current version holds.
        older = {**reader_versions(), "pdf": 1}
        library.db.set_meta(READER_VERSIONS_KEY, json.dumps(older))

    with Library(settings, embedder=embedder) as library:
        # Until the next pass reads it again, the PDF is found as it was.
        hits = library.search("security policy", mode="bm25")
        assert any(h.path.endswith("security-policy.pdf") for h in hits)
        again = library.index([sample_folder])
        assert (again.updated, again.unchanged) == (1, 4)  # the PDF, and only it
        assert again.chunks_embedded == 0  # read the same: its vectors are kept
        assert json.loads(library.db.get_meta(READER_VERSIONS_KEY) or "") == reader_versions()
        # Once: the next pass finds nothing to read.
        assert library.index([sample_folder]).updated == 0

    # A library opened again by the same readers marks nothing.
    with Library(settings, embedder=embedder) as library:
        assert library.index([sample_folder]).updated == 0
