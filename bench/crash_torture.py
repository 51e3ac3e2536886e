"""Crash torture benchmark (issue 10): ``kill -9`` of ``lectern index`` at many random
moments, the library reopened after each, then compared with a clean rebuild.

The harness is the one ``tests/test_crash_torture.py`` runs with 20 kills
(``tests/crash_harness.py``): a folder of real passages (SQuAD and SciFact) as small
Markdown and text files, some real PDFs and the sample documents, growing and changing
between runs so every run has writing to do; each run is killed a random number of file
changes (database, write-ahead log, keyword index, vector file) after it started writing,
plus a random delay. Measured: how many reopens succeeded, the longest reopen (open the
library, its keyword index and vector file, and read its status), and after one final
uninterrupted run, chunks lost, duplicated or extra against a clean rebuild of the same
folder, vector keys that are not chunk ids, and files whose own word keyword search
misses.

    .venv/bin/python bench/crash_torture.py                 # 100 kills, 240 files
    .venv/bin/python bench/crash_torture.py --kills 20 --seed 7

The last line of output is one JSON object with every figure.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from core.embedding import load_embedder
from tests.crash_harness import (
    RECORD_REPAIRS,
    build_corpus,
    clean_rebuild,
    compare,
    final_run,
    snapshot,
    torture,
)

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=100)
    parser.add_argument("--files", type=int, default=240, help="text files at the end")
    parser.add_argument("--initial", type=int, default=40, help="text files before the first run")
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument(
        "--long-every", type=int, default=25, help="every Nth run takes in 250 files at once"
    )
    parser.add_argument("--shared-data", type=Path, default=SHARED)
    args = parser.parse_args()
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(2**32)
    print(f"seed {seed}", file=sys.stderr)
    rng = random.Random(seed)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="lectern-torture-") as tmp:
        root = Path(tmp)
        corpus = build_corpus(root / "docs", args.shared_data, args.files, rng, args.initial)
        home = root / "home"
        home.mkdir()
        attempts = torture(
            home,
            corpus,
            args.kills,
            rng,
            long_runs=tuple(range(4, 4 * args.kills, max(1, args.long_every))),
            long_files=250,
            stop_on_failure=True,
            log=lambda line: print(line, file=sys.stderr),
        )
        killed = [a for a in attempts if a.killed]
        failed = [a for a in attempts if not a.opened]
        result: dict[str, object] = {
            "seed": seed,
            "kills": len(killed),
            "runs": len(attempts),
            "runs_finished_before_kill": len(attempts) - len(killed),
            "opens_ok": sum(a.opened for a in attempts),
            "open_attempts": len(attempts),
            "first_failed_open": (attempts.index(failed[0]) + 1) if failed else None,
            "first_failed_open_error": failed[0].error[:500] if failed else None,
            "repairs_at_open": dict(Counter(r for a in attempts for r in a.repairs)),
            "record_repairs": sum(r in RECORD_REPAIRS for a in attempts for r in a.repairs),
            "max_recovery_s": round(max(a.recovery_s for a in attempts), 3),
            "mean_recovery_s": round(sum(a.recovery_s for a in attempts) / len(attempts), 3),
        }
        if not failed:
            embedder = load_embedder()
            final = final_run(home, corpus.folder)
            clean_home = root / "clean"
            clean_rebuild(clean_home, corpus.folder, embedder)
            words = [*corpus.markers.values(), *sorted(corpus.gone)]
            got = snapshot(home, corpus.folder, words, embedder)
            clean = snapshot(clean_home, corpus.folder, words, embedder)
            cmp = compare(got, clean, corpus)
            result.update(
                files=len(clean.states),
                chunks_clean=sum(clean.chunks.values()),
                chunks_after_kills=sum(got.chunks.values()),
                chunks_lost=cmp.lost,
                chunks_duplicated=cmp.duplicated,
                chunks_extra=cmp.extra,
                documents_not_finished=len(cmp.stuck),
                document_states_differ=len(cmp.states_differ),
                vector_keys_mismatch=cmp.vector_mismatch,
                vector_file_mismatch=cmp.file_mismatch,
                vector_repair_at_open=got.vector_repair,
                keyword_words_missed=len(cmp.markers_missed),
                keyword_removed_text_found=len(cmp.ghosts),
                final_run_chunks_embedded=final.get("chunks_embedded"),
                ok=cmp.ok and not result["record_repairs"],
            )
        else:
            result["ok"] = False
        result["elapsed_s"] = round(time.monotonic() - started, 1)
    print(json.dumps(result))
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
