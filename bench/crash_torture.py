"""Crash torture benchmark (issue 10): ``kill -9`` of ``lectern index`` at many random
moments, the library reopened after each, then compared with a clean rebuild.

The harness is the one ``tests/indexing/test_crash_torture.py`` runs with 20 kills
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

``--truncate`` runs the other torture instead (issue 29): a library is indexed and holds
a conversation, once closed cleanly and once left by a process that died with its last
changes (a file, a turn) in the write-ahead logs; then every file in its data folder is
cut short in turn, at a quarter, a half and three quarters of its size, and the library
is opened after each cut through ``Library(Settings(home=...))``, as the app and the
command do. Measured: opens that
succeeded out of those tried (an open must also answer status and a search), the repairs
it reported, and documents and conversation turns lost after it brought itself up to date
from the files (``sync``), against the library before the cut.

    .venv/bin/python bench/crash_torture.py --truncate
    .venv/bin/python bench/crash_torture.py --truncate --texts 0   # sample documents only

The last line of output is one JSON object with every figure.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.record import emit
from core.embedding.models import load_embedder
from tests.crash_harness import (
    RECORD_REPAIRS,
    SAMPLE_DOCS,
    build_corpus,
    clean_rebuild,
    compare,
    final_run,
    lectern_env,
    load_passages,
    snapshot,
    torture,
)

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"
REPO = Path(__file__).resolve().parents[1]

# --- truncation of every file in the data folder ------------------------------------

CUT_FRACTIONS = (0.25, 0.5, 0.75)
PROBE_WORDS = "corporate card monthly limit"
PROBE_TEXT = "5,000"
# A file added and a turn said by the process that dies: both sit only in the
# write-ahead log (and the turn in the backup) when the cuts are made.
LATE_FILE = "late-note.txt"
LATE_TEXT = (
    "Late note about the zqvlatewordq procedure: parking at the airport is refunded up "
    "to four days per trip when the train is not an option.\n"
)
FIRST_QUESTION = "What is the corporate card monthly limit?"
LATE_QUESTION = "How long is airport parking refunded?"

# The two states a library is cut in: closed cleanly (everything checkpointed, no
# write-ahead log), and left by a process that died (its last changes in the logs).
STATES = ("closed", "crashed")

# Index, keep a conversation, close; then ("crashed") open again, index one more file,
# say one more turn and die without closing, so the last changes are in the logs.
_BUILD = textwrap.dedent(
    """
    import os, sys
    from pathlib import Path
    from core.config import Settings
    from core.library import Library

    home, folder, late, first, second = sys.argv[1:6]
    library = Library(Settings(home=Path(home)))
    library.index([folder])
    store = library.conversations
    conversation = store.create(first)
    store.add_turn(conversation, question=first, standalone_question=first,
                   answer="5,000 a month", mode="extractive", sources=[], citations=[])
    library.close()
    if sys.argv[7] == "closed":
        sys.exit(0)
    library = Library(Settings(home=Path(home)))
    Path(folder, late).write_text(sys.argv[6], encoding="utf-8")
    library.index([folder])
    library.conversations.add_turn(conversation, question=second, standalone_question=second,
                   answer="four days", mode="extractive", sources=[], citations=[])
    library.vectors.save()
    os._exit(0)
    """
)


@dataclass(frozen=True)
class Baseline:
    """What the library held before any cut."""

    state: str  # one of STATES
    home: Path
    folder: Path
    documents: frozenset[str]  # paths of indexed documents
    turns: int
    files: tuple[str, ...]  # every file of the data folder, relative to it


@dataclass(frozen=True)
class Cut:
    """One file cut at one point, and what the open after it did."""

    file: str
    fraction: float
    size_before: int
    opened: bool
    error: str
    repairs: tuple[str, ...]
    set_aside: tuple[str, ...]  # files renamed aside by the open
    status_ok: bool
    search_ok: bool
    documents_at_open: int  # indexed documents right after the open
    documents_lost: int  # of the baseline's, still missing after the sync
    turns_lost: int


def _data_files(home: Path) -> tuple[str, ...]:
    return tuple(
        sorted(
            str(p.relative_to(home)) for p in home.rglob("*") if p.is_file() and p.stat().st_size
        )
    )


def build_baseline(
    root: Path, texts: int = 0, shared_data: Path | None = None, state: str = "crashed"
) -> Baseline:
    """A library of the sample documents (and ``texts`` passages of the shared data as
    text files, when it is there) in ``state``: closed cleanly, or left with its last
    changes in the write-ahead logs."""
    root = root / state
    folder = root / "docs"
    shutil.copytree(SAMPLE_DOCS, folder)
    if texts and shared_data is not None and shared_data.exists():
        for n, (title, text) in enumerate(load_passages(shared_data, texts)):
            (folder / f"passage-{n:04d}.txt").write_text(f"{title}\n\n{text}\n", encoding="utf-8")
    home = root / "pristine"
    subprocess.run(
        [
            sys.executable,
            "-c",
            _BUILD,
            str(home),
            str(folder),
            LATE_FILE,
            FIRST_QUESTION,
            LATE_QUESTION,
            LATE_TEXT,
            state,
        ],
        check=True,
        cwd=REPO,
        env=lectern_env(home),
        timeout=1200,
    )
    documents, turns = _read_library(home, None)
    return Baseline(state, home, folder, frozenset(documents), turns, _data_files(home))


def _read_library(home: Path, embedder: object | None) -> tuple[list[str], int]:
    """(indexed document paths, conversation turns) of a library, opened on a copy so
    that the pristine folder is never changed."""
    from core.config import Settings
    from core.library import Library

    with tempfile.TemporaryDirectory(prefix="lectern-read-") as tmp:
        copy = Path(tmp) / "home"
        shutil.copytree(home, copy)
        library = Library(Settings(home=copy), embedder=embedder, migrate=False)  # type: ignore[arg-type]
        try:
            documents = [d.path for d in library.files.documents(state="indexed")]
            turns = sum(
                len(library.conversations.turns(c.id)) for c in library.conversations.list()
            )
        finally:
            library.close()
    return documents, turns


def cut_and_open(
    baseline: Baseline, file: str, fraction: float, work: Path, embedder: object
) -> Cut:
    """Copy the library, cut ``file`` to ``fraction`` of its size, open it as the app
    does, check that status and search answer, bring it up to date from the files, and
    count what was lost."""
    from core.config import Settings
    from core.library import Library

    home = work / "home"
    if home.exists():
        shutil.rmtree(home)
    shutil.copytree(baseline.home, home)
    target = home / file
    size = target.stat().st_size
    os.truncate(target, int(size * fraction))
    before = {p.name for p in home.rglob("*")}
    opened = status_ok = search_ok = False
    error, repairs, at_open, lost, turns_lost = "", (), 0, len(baseline.documents), baseline.turns
    library = None
    try:
        library = Library(Settings(home=home), embedder=embedder)  # type: ignore[arg-type]
        opened = True
        repairs = tuple(n.kind for n in library.recovery_notices)
        status = library.status()
        status_ok = isinstance(status.get("counts"), dict)
        at_open = len(library.files.documents(state="indexed"))
        library.search(PROBE_WORDS, mode="hybrid")
        library.sync()
        library.keyword.wait_for_merge()
        hits = library.search(PROBE_WORDS, mode="bm25")
        search_ok = any(PROBE_TEXT in h.text for h in hits)
        indexed = {d.path for d in library.files.documents(state="indexed")}
        lost = len(baseline.documents - indexed)
        turns = sum(len(library.conversations.turns(c.id)) for c in library.conversations.list())
        turns_lost = max(0, baseline.turns - turns)
    except Exception as exc:  # what the person would have seen instead of a library
        error = f"{type(exc).__name__}: {exc}"[:500]
    finally:
        if library is not None:
            try:
                library.close()
            except Exception as exc:
                error = error or f"close: {type(exc).__name__}: {exc}"[:500]
                opened = False
    aside = tuple(
        sorted(
            p.name
            for p in home.rglob("*")
            if p.name not in before
            and (".damaged-" in p.name or ".broken-" in p.name or ".unreplayable-" in p.name)
        )
    )
    return Cut(
        file,
        fraction,
        size,
        opened and not error,
        error,
        repairs,
        aside,
        status_ok,
        search_ok,
        at_open,
        lost,
        turns_lost,
    )


def truncation_torture(
    baseline: Baseline,
    work: Path,
    embedder: object,
    fractions: Sequence[float] = CUT_FRACTIONS,
    log: Callable[[str], None] = lambda line: None,
) -> list[Cut]:
    cuts = []
    for file in baseline.files:
        for fraction in fractions:
            cut = cut_and_open(baseline, file, fraction, work, embedder)
            log(
                f"{baseline.state}: {file} cut to {fraction:.2f}: "
                + ("opened" if cut.opened else f"FAILED {cut.error}")
                + (f", repairs {','.join(cut.repairs)}" if cut.repairs else "")
                + f", {cut.documents_lost} documents and {cut.turns_lost} turns lost"
            )
            cuts.append(cut)
    return cuts


def truncation_summary(runs: Sequence[tuple[Baseline, Sequence[Cut]]]) -> dict[str, object]:
    """The figures over every state and cut, and per state."""

    def figures(cuts: Sequence[Cut]) -> dict[str, object]:
        documents = {id(c): len(b.documents) for b, cs in runs for c in cs}
        return {
            "open_attempts": len(cuts),
            "opens_ok": sum(c.opened for c in cuts),
            "status_and_search_ok": sum(c.opened and c.status_ok and c.search_ok for c in cuts),
            "documents_lost": sum(c.documents_lost for c in cuts),
            "documents_reindexed": sum(
                max(0, documents[id(c)] - c.documents_at_open) for c in cuts if c.opened
            ),
            "turns_lost": sum(c.turns_lost for c in cuts),
            "repairs_at_open": dict(Counter(r for c in cuts for r in c.repairs)),
            "files_set_aside": sum(len(c.set_aside) for c in cuts),
        }

    every = [c for _, cuts in runs for c in cuts]
    failed = [
        {
            "state": b.state,
            "file": c.file,
            "fraction": c.fraction,
            "error": c.error,
            "status_ok": c.status_ok,
            "search_ok": c.search_ok,
        }
        for b, cuts in runs
        for c in cuts
        if not (c.opened and c.status_ok and c.search_ok)
    ]
    return {
        "mode": "truncate",
        "fractions": list(CUT_FRACTIONS),
        **figures(every),
        "states": {
            b.state: {
                "files": list(b.files),
                "documents": len(b.documents),
                "turns": b.turns,
                **figures(cuts),
            }
            for b, cuts in runs
        },
        "failures": failed,
        "ok": not failed and not any(c.documents_lost or c.turns_lost for c in every),
    }


def main_truncate(args: argparse.Namespace) -> int:
    started = time.monotonic()
    embedder = load_embedder()
    runs = []
    with tempfile.TemporaryDirectory(prefix="lectern-cuts-") as tmp:
        root = Path(tmp)
        for state in STATES:
            baseline = build_baseline(root, args.texts, args.shared_data, state)
            print(
                f"{state}: {len(baseline.documents)} documents, {baseline.turns} turns; "
                f"cutting {len(baseline.files)} files: {', '.join(baseline.files)}",
                file=sys.stderr,
            )
            cuts = truncation_torture(
                baseline,
                root / "work",
                embedder,
                log=lambda line: print(line, file=sys.stderr),
            )
            runs.append((baseline, cuts))
        result = truncation_summary(runs)
    result["elapsed_s"] = round(time.monotonic() - started, 1)
    emit("crash_torture_truncate", result)
    return 0 if result["ok"] else 1


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
    parser.add_argument(
        "--truncate",
        action="store_true",
        help="cut every file of the data folder short at 1/4, 1/2 and 3/4 instead of killing",
    )
    parser.add_argument(
        "--texts", type=int, default=60, help="with --truncate: passages added as text files"
    )
    args = parser.parse_args()
    if args.truncate:
        return main_truncate(args)
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
    emit("crash_torture", result)
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
