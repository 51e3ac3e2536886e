"""A text file of any size is indexed up to the text limit (issue 45): a 30 MB .txt gave
30,264 passages, and a 200 MB one was read whole and failed at the reader's memory
limit. Now its first 4,000,000 characters are indexed, and the file list says the rest
is not. The real sandbox, model and DuckDB; the run is stopped once the file is written
(its passages are found by keyword then; embedding thousands of them is not the point)."""

from __future__ import annotations

import time
from pathlib import Path

from core.indexing.indexer import Controls
from core.ingest.text import MAX_TEXT_CHARS, limit_notice
from core.library import Library
from core.records import IndexProgress

MB = 1024 * 1024
LINE = "Harbour log: the ferry left the north pier at nine and came back at noon.\n\n"


def test_a_200_mb_text_file_is_indexed_up_to_the_limit_with_the_notice(
    library: Library, tmp_path: Path
) -> None:
    folder = tmp_path / "logs"
    folder.mkdir()
    huge = folder / "harbour.txt"
    block = (LINE * (MB // len(LINE) + 1))[:MB].encode()
    with huge.open("wb") as handle:
        handle.write(b"Opening entry: the zanzibarite buoy was painted red.\n\n")
        for _ in range(200):
            handle.write(block)
        handle.write(b"\n\nClosing entry: the quoxalene beacon was switched off.\n")
    assert huge.stat().st_size > 200 * MB

    controls = Controls()

    def progress(p: IndexProgress) -> None:
        if p.files_done >= 1:
            controls.stop()  # written: what this test looks at

    started = time.monotonic()
    report = library.index([folder], progress=progress, controls=controls)
    elapsed = time.monotonic() - started
    assert report.failed == 0, report.failures
    (entry,) = library.files.file_list()
    assert entry.state.value == "indexed"
    assert entry.reason == limit_notice()
    assert entry.reason.startswith("only the first 4,000,000 characters of text are indexed")
    # About 1,000 characters a passage: the limit bounds them, where 200 MB gave ~150,000.
    assert 1_000 < entry.passages <= MAX_TEXT_CHARS // 500
    assert any("zanzibarite" in h.text for h in library.search("zanzibarite buoy", mode="bm25"))
    assert not any("quoxalene" in h.text for h in library.search("quoxalene beacon", mode="bm25"))
    print({"seconds": round(elapsed, 1), "passages": entry.passages})
    assert elapsed < 60
