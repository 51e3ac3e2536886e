"""The ``lectern`` command: the same engine as the desktop app, headless.

Every command that takes ``--json`` prints exactly one JSON object on its last line of
standard output; human-readable progress goes to standard error.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from core import __version__
from core.cli.args import percent, positive_int
from core.cli.common import (
    ProgressBar,
    ThreadFailures,
    debugging,
    decode_text_arguments,
    open_library,
    open_reader,
    prepare_streams,
    quiet_logging,
    write_crash_log,
)
from core.cli.terminal import printable
from core.errors import LecternError
from core.offline import force_offline
from core.private import private_umask

if TYPE_CHECKING:
    from core.library import Library

force_offline()
if not sys.stderr.isatty():
    # The model loader's "Loading weights 0/103" bar is for a person watching a terminal;
    # in a pipe or a log it is noise on every command. Read once, when huggingface_hub is
    # imported, so it must be set before anything loads the model.
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")

EXIT_ERROR = 2
EXIT_INTERRUPTED = 130


def cmd_index(args: argparse.Namespace) -> int:
    from core.indexing.indexer import Controls
    from core.ipc import serve

    library = open_library(migrate=True)
    if args.when_idle or args.cpu_share is not None:  # this run only; settings unchanged
        library.set_index_pace(
            "idle" if args.when_idle else "share",
            args.cpu_share or library.settings.index_cpu_share,
        )
    server = serve(library)  # `lectern search` and `status` meanwhile ask this process
    bar = ProgressBar()
    controls = Controls()
    try:
        report = library.index(
            [Path(p) for p in args.paths] or None, progress=bar, controls=controls
        )
    except KeyboardInterrupt:
        bar.close()
        server.close()
        library.close()
        print(
            "Interrupted. Finished files are saved; run `lectern index` again to continue.",
            file=sys.stderr,
        )
        return 130
    bar.close()
    notice = library.take_model_notice()  # a new library that took the multilingual model
    if notice:
        print(notice, file=sys.stderr)
    if not _finish_model_switch(library):
        server.close()
        library.close()
        print(
            "Interrupted. The passages re-embedded so far are kept; run `lectern index` "
            "again to continue.",
            file=sys.stderr,
        )
        return EXIT_INTERRUPTED
    status = library.status()
    server.close()
    library.close()
    summary = {
        "added": report.added,
        "updated": report.updated,
        "removed": report.removed,
        "unchanged": report.unchanged,
        "failed": report.failed,
        "skipped": report.skipped,
        "empty": report.empty,
        "chunks_embedded": report.chunks_embedded,
        "chunks_reused": report.chunks_reused,
        "elapsed_s": round(report.elapsed_s, 2),
        "chunks_total": status["chunks"],
        "failures": [{"path": p, "reason": r} for p, r in report.failures],
    }
    if args.json:
        print(json.dumps(summary))
    else:
        print(
            f"Indexed: {report.added} added, {report.updated} updated, {report.removed} removed, "
            f"{report.unchanged} unchanged, {report.failed} failed, {report.skipped} skipped "
            f"({report.chunks_embedded} chunks embedded, {report.chunks_reused} reused) "
            f"in {report.elapsed_s:.1f} s."
        )
        for path, reason in report.failures:
            print(f"  failed: {printable(path)}: {printable(reason)}")
        if report.empty:
            from core.cli.files import empty_files_line

            print(f"  {empty_files_line(report.empty)}")
    return 0


def _finish_model_switch(library: Library) -> bool:
    """After a change of model, `lectern index` stays until the library has switched to
    it (core/indexing/reembed.py), saying how far it is; False when interrupted."""
    if not library.switching_model:
        return True
    last = ""
    try:
        while not library.models.wait(timeout=2.0):
            status = library.reembedding_status()
            if status is None:
                break
            if status.sentence != last:
                last = status.sentence
                print(printable(last), file=sys.stderr)  # may quote a failure's words
            if status.state == "failed":
                break  # said above; the old model keeps answering
    except KeyboardInterrupt:
        return False
    if not library.switching_model:
        print(f"Switched to {library.status()['embedding_model']}.", file=sys.stderr)
    return True


def cmd_status(args: argparse.Namespace) -> int:
    library = open_reader()
    status = library.status()
    library.close()
    if args.json:
        print(json.dumps(status))
        return 0
    print("\n".join(status_lines(status)))
    return 0


def searchable_line(chunks: int, searchable: Mapping[str, Any]) -> str:
    """How much is searchable each way: passages are searchable by keyword as soon as
    they are written and by meaning once the model has embedded them."""
    by_keyword, by_meaning = int(searchable.get("keyword", 0)), int(searchable.get("meaning", 0))
    if by_keyword == chunks and by_meaning == chunks:
        return f"Searchable: all {chunks} passages, by keyword and by meaning"
    waiting = chunks - by_meaning
    return (
        f"Searchable: {by_keyword} of {chunks} passages by keyword, {by_meaning} by meaning "
        f"({waiting} waiting for the model: they are found by keyword meanwhile)"
    )


def indexing_lines(indexing: Mapping[str, Any]) -> list[str]:
    """When indexing runs (core/indexing/throttle.py), and why a running index is waiting."""
    from core.indexing.throttle import BUSY_WAITING

    if indexing.get("waiting"):
        return [f"Indexing: {BUSY_WAITING}"]
    if indexing.get("when") == "idle":
        return ["Indexing: only while the computer is idle"]
    if indexing.get("when") == "share":
        return [f"Indexing: using at most {indexing.get('cpu_share')} % of the CPU"]
    return []


def status_lines(status: Mapping[str, Any]) -> list[str]:
    """The human-readable ``lectern status``: folders, totals, model, then every file
    that is not indexed, with the reason."""
    counts = status.get("counts", {})

    def tally(c: Mapping[str, Any]) -> str:
        return ", ".join(
            f"{c.get(key, 0)} {key}" for key in ("indexed", "failed", "skipped", "pending")
        )

    # Paths, reasons and repairs are shown escaped (core/cli/terminal.py): a file name
    # holding ESC or a line break must not rewrite the terminal or forge a line.
    lines = [f"Data folder: {printable(str(status.get('home', '')))}"]
    folders = status.get("folders", [])
    if not folders:
        lines.append("No folders yet. Add one with: lectern index FOLDER")
    else:
        lines.append("Folders:")
        for folder in folders:
            state = "online" if folder.get("online", True) else "offline (not reachable now)"
            chunks = folder.get("chunks")
            lines.append(
                f"  {printable(str(folder['path']))} ({state}): {tally(folder)}"
                + (f"; {chunks} chunks" if chunks is not None else "")
            )
    lines.append(
        f"Total: {sum(counts.get(k, 0) for k in counts)} files: {tally(counts)}; "
        f"{status.get('chunks', 0)} chunks"
    )
    searchable = status.get("searchable") or {}
    if searchable:
        lines.append(searchable_line(int(status.get("chunks", 0)), searchable))
    lines.append(f"Embedding model: {status.get('embedding_model', '')}")
    languages = status.get("languages") or {}
    if languages.get("sampled"):
        from core.embedding.languages import LanguageMix

        mix = LanguageMix(tuple(languages["shares"].items()), int(languages["sampled"]))
        lines.append(f"Languages: {mix.sentence()} (of {mix.sampled:,} passages sampled)")
    fusion = status.get("fusion") or {}
    if fusion.get("questions") and fusion.get("fusion") == "adaptive":
        lines.append(
            f"Hybrid search: meaning search was the surer list on {fusion['meaning_surer']} "
            f"of the {fusion['questions']} question{'s' if fusion['questions'] != 1 else ''} "
            f"asked here; keyword search's weight is {float(fusion['bm25_prior']):.0%}"
        )
    advice = status.get("model_advice")
    if advice:
        lines.append(printable(str(advice.get("message", ""))))
        lines.append(
            f'  To switch: set "embedding_model": "{advice.get("model")}" in settings.json, '
            "then run: lectern index"
        )
    switching = status.get("reembedding")
    if switching:
        lines.append(printable(str(switching.get("message", ""))))
    keyword = status.get("keyword_index")
    if keyword and keyword != "ready":
        lines.append(
            "Keyword index: being rebuilt in the background (search finds passages by "
            "meaning meanwhile)"
            if keyword == "rebuilding"
            else f"Keyword index: {keyword}"
        )
    lines.extend(indexing_lines(status.get("indexing") or {}))
    repairs = status.get("recovery") or []
    if repairs:
        lines.append("Recent repairs:")
        for repair in repairs[-5:]:
            kept = f" (kept at {repair['kept_at']})" if repair.get("kept_at") else ""
            said = f"  {repair.get('at', '')} {repair.get('message', '')}{kept}"
            lines.append(printable(said.rstrip()))
    for state, title in (("failed", "Failed"), ("skipped", "Skipped"), ("pending", "Pending")):
        docs = [d for d in status.get("documents", []) if d.get("state") == state]
        if docs:
            lines.append(f"{title} files ({len(docs)}):")
            lines.extend(
                f"  {printable(str(d['path']))}: "
                f"{printable(str(d.get('reason') or 'not indexed yet'))}"
                for d in docs
            )
    return lines


def cmd_search(args: argparse.Namespace) -> int:
    if not any(ch.isalnum() for ch in args.query):
        print("Type some words to search for.", file=sys.stderr)
        return EXIT_ERROR
    from core.cli.collections import scope_from_args
    from core.records import SECOND_STAGE_NOTE, second_stage_state

    library = open_reader()
    started = time.monotonic()
    scope = scope_from_args(args)
    try:
        hits = library.search(args.query, k=args.k, mode=args.mode, scope=scope)
    finally:
        library.close()
    elapsed = time.monotonic() - started
    if args.json:
        print(
            json.dumps(
                {
                    "query": args.query,
                    "mode": args.mode,
                    "elapsed_ms": round(elapsed * 1000, 1),
                    "second_stage": second_stage_state(hits),
                    "results": [h.to_json() for h in hits],
                }
            )
        )
        return 0
    if not hits and scope:
        print(f"No matching passages in {scope.phrase()}. See `lectern collection list`.")
        return 0
    if not hits:
        print("No matching passages. Is the folder indexed? See `lectern status`.")
        return 0
    for i, hit in enumerate(hits, start=1):
        place = f", {hit.location}" if hit.location else ""
        snippet = " ".join(hit.text.split())
        # A document's text may hold ESC as its name may: both shown escaped.
        print(f"[{i}] {printable(hit.path + place)}  (score {hit.score:.4f})")
        print(f"    {printable(snippet[:300])}{'…' if len(snippet) > 300 else ''}")
    if second_stage_state(hits) in ("cut short", "skipped"):
        print(f"\n{SECOND_STAGE_NOTE}")
    return 0


def answer_modes(text: str) -> tuple[str, ...]:
    """argparse type for ``--modes``: "none", "llm" or both, comma-separated."""
    modes = tuple(dict.fromkeys(m.strip() for m in text.split(",") if m.strip()))
    unknown = [m for m in modes if m not in ("none", "llm")]
    if not modes or unknown:
        raise argparse.ArgumentTypeError(
            f"{', '.join(unknown) or text!r}: use none, llm or none,llm"
        )
    return modes


def cmd_eval_answers(args: argparse.Namespace) -> int:
    from core.evaluation.answers import evaluate_answers

    bar = ProgressBar()
    result = evaluate_answers(
        Path(args.answers),
        questions=[Path(q) for q in args.questions],
        documents=Path(args.documents) if args.documents else None,
        modes=args.modes,
        limit=args.limit,
        progress=bar,
    )
    bar.close()
    if not args.json:
        print(
            f"{printable(str(result['dataset']))}: {result['questions']} questions "
            + ", ".join(f"{n} {g}" for g, n in result["groups"].items())
            + f"; {result['chunks']} passages, indexed in {result['index_s']} s"
        )
        columns = {
            "correct": "correct",
            "refusal_rate": "declined (unans.)",
            "false_refusal_rate": "declined (ans.)",
            "gold_document_cited": "gold doc cited",
            "citation_precision": "citations ok",
        }
        keys = tuple(columns)
        print(f"{'mode':5} {'group':14} " + " ".join(f"{c:>18}" for c in columns.values()))
        for mode, report in result["modes"].items():
            if "error" in report:
                print(f"{mode:5} not run: {report['error']}")
                continue
            for group, figures in report["groups"].items():
                if not figures["questions"]:
                    continue
                cells = ("-" if figures[k] is None else f"{figures[k]:.3f}" for k in keys)
                print(f"{mode:5} {group:14} " + " ".join(f"{c:>18}" for c in cells))
    print(json.dumps(result))
    return 0


def cmd_eval_library(args: argparse.Namespace) -> int:
    from core.evaluation.library_check import SIZE, check_library, model_writer

    library = open_library()
    try:
        writer = None if args.without_model else model_writer(library)
        report = check_library(library, size=args.limit or SIZE, fresh=args.new, ask_model=writer)
    finally:
        library.close()
    if not args.json:
        for line in report["lines"]:
            print(printable(line))
        print(f"(question set kept at {printable(str(report['set']))}; --new makes another)")
    print(json.dumps(report))
    return 0


def cmd_eval(args: argparse.Namespace) -> int:
    if args.answers:
        return cmd_eval_answers(args)
    if args.library:
        return cmd_eval_library(args)
    from core.evaluation.beir import evaluate_many

    modes = ("hybrid", "bm25", "dense") if args.mode == "all" else (args.mode,)
    bar = ProgressBar()
    result = evaluate_many(
        [Path(b) for b in args.beir], split=args.split, modes=modes, progress=bar
    )
    bar.close()
    if args.json:
        print(json.dumps(result))
        return 0
    keys = ["ndcg@10", "mrr@10", "recall@5", "recall@10", "recall@20", "recall@50", "query_ms"]
    for summary in result["sets"]:
        print(
            f"{printable(str(summary['dataset']))} ({summary['split']}): "
            f"{summary['queries']} queries, "
            f"{summary['documents']} documents, {summary['chunks']} chunks, "
            f"indexed in {summary['index_s']} s"
        )
        print("mode     " + "  ".join(f"{k:>9}" for k in keys))
        for mode, scores in summary["by_mode"].items():
            print(f"{mode:8} " + "  ".join(f"{scores[k]:>9}" for k in keys))
        if "hybrid_minus_best_single" in summary:
            print(
                f"hybrid - best single mode (nDCG@10): {summary['hybrid_minus_best_single']:+.4f}"
            )
        print()
    if len(result["sets"]) > 1 and args.mode == "all":
        print(f"{'nDCG@10':24} {'hybrid':>8} {'bm25':>8} {'dense':>8} {'hyb-best':>9}")
        for summary in result["sets"]:
            by = summary["by_mode"]
            print(
                f"{printable(str(summary['dataset'])):24} {by['hybrid']['ndcg@10']:>8.4f} "
                f"{by['bm25']['ndcg@10']:>8.4f} {by['dense']['ndcg@10']:>8.4f} "
                f"{summary['hybrid_minus_best_single']:>+9.4f}"
            )
    print("configuration: " + ", ".join(f"{k}={v}" for k, v in result["config"].items()))
    print(json.dumps(result))
    return 0


def build_parser() -> tuple[
    argparse.ArgumentParser, dict[str, Callable[[argparse.Namespace], int]]
]:
    parser = argparse.ArgumentParser(
        prog="lectern", description="Private, offline search and answers over your documents."
    )
    parser.add_argument("--version", action="version", version=f"lectern {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    handlers: dict[str, Callable[[argparse.Namespace], int]] = {}

    p = sub.add_parser("index", help="index folders (and remember them); re-run to pick up changes")
    p.add_argument(
        "paths", nargs="*", help="folders or files; none means every folder already added"
    )
    p.add_argument("--json", action="store_true")
    pace = p.add_mutually_exclusive_group()
    pace.add_argument(
        "--when-idle",
        action="store_true",
        help="index only while the computer is otherwise idle (this run; see Settings)",
    )
    pace.add_argument(
        "--cpu-share",
        type=percent,
        metavar="N",
        help="use at most N %% of the computer's CPU, all cores together (this run)",
    )
    handlers["index"] = cmd_index

    p = sub.add_parser("status", help="folders and files with their state")
    p.add_argument("--json", action="store_true")
    handlers["status"] = cmd_status

    from core.cli import collections as cli_collections

    p = sub.add_parser("search", help="find passages (no language model needed)")
    p.add_argument("query")
    p.add_argument("--mode", choices=("hybrid", "bm25", "dense"), default="hybrid")
    p.add_argument("-k", type=positive_int, default=6, help="how many passages (default 6)")
    p.add_argument("--folder", action="append", help="only this library folder (repeatable)")
    p.add_argument(
        "--type", action="append", help="only this file type: pdf, md, txt, html, docx (repeatable)"
    )
    cli_collections.add_scope_arguments(p)
    p.add_argument("--json", action="store_true")
    handlers["search"] = cmd_search

    p = sub.add_parser(
        "eval", help="measure retrieval (--beir) or answers (--answers) on evaluation data"
    )
    what = p.add_mutually_exclusive_group(required=True)
    what.add_argument(
        "--beir",
        action="append",
        help="folder with corpus.jsonl, queries.jsonl, qrels/ (repeatable: one run, several sets)",
    )
    what.add_argument(
        "--answers",
        metavar="PATH",
        help="measure answers: SQuAD 2.0 .json, or .jsonl questions "
        '({"question", "answers": [] when unanswerable, "document"}) with --documents',
    )
    what.add_argument(
        "--library",
        action="store_true",
        help="how well Lectern finds things in your own library: a question set made from "
        "it (kept for later runs), each search mode measured, the verdict in plain words",
    )
    p.add_argument("--new", action="store_true", help="with --library: make a new question set")
    p.add_argument(
        "--without-model",
        action="store_true",
        help="with --library: make the questions without the language model",
    )
    p.add_argument(
        "--documents", metavar="FOLDER", help="with --answers FILE.jsonl: the folder it asks about"
    )
    p.add_argument(
        "--questions",
        action="append",
        default=[],
        metavar="FILE",
        help="with --answers: more .jsonl questions over the same documents (repeatable; "
        "those without answers count as out of the corpus)",
    )
    p.add_argument(
        "--modes",
        type=answer_modes,
        default=("none", "llm"),
        help="with --answers: none (no model), llm (the configured server), or both, "
        "comma-separated (default none,llm)",
    )
    p.add_argument(
        "--limit",
        type=positive_int,
        help="with --answers: the first N questions of each file; with --library: the "
        "questions in a new set (default 40)",
    )
    p.add_argument(
        "--split",
        default="test",
        help="qrels/<split>.tsv: test, or train when tuning (default test)",
    )
    p.add_argument("--mode", choices=("hybrid", "bm25", "dense", "all"), default="all")
    p.add_argument("--json", action="store_true")
    handlers["eval"] = cmd_eval

    # Imported here, not at the top: `lectern --version` must not load the HTTP client.
    from core.cli import answer as cli_answer
    from core.cli import watch as cli_watch

    handlers.update(cli_answer.register(sub))
    handlers.update(cli_watch.register(sub))
    from core.cli import conversations as cli_conversations

    handlers.update(cli_conversations.register(sub))
    from core.cli import files as cli_files

    handlers.update(cli_files.register(sub))
    handlers.update(cli_collections.register(sub))
    return parser, handlers


def main(argv: Sequence[str] | None = None) -> int:
    # Before anything is written: DuckDB makes its files by the umask, and a library (its
    # documents' text, conversations, an API key) is no one else's (core/private.py).
    # Given back after: a program (or test) that calls main keeps its own.
    previous = private_umask()
    try:
        # Before anything is printed: no locale, terminal encoding or log record may end
        # a command in a traceback (core/cli/common.py).
        prepare_streams()
        quiet_logging()
        parser, handlers = build_parser()
        args = parser.parse_args(argv)
        decode_text_arguments(args)
        with ThreadFailures() as background:
            code = _run(handlers[args.command], args)
        return EXIT_ERROR if background.failed else code
    finally:
        os.umask(previous)


def _run(handler: Callable[[argparse.Namespace], int], args: argparse.Namespace) -> int:
    try:
        return handler(args)
    except LecternError as exc:
        # A message may quote a path or a server's words: escaped like every name shown.
        print(f"Error: {printable(exc.message)}", file=sys.stderr)
        if exc.hint:
            print(f"Hint: {printable(exc.hint)}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:  # Ctrl+C is an answer, not an error: no traceback
        return EXIT_INTERRUPTED
    except Exception as exc:  # the last line of defence: a bug, told in one plain line
        if debugging():
            raise
        log = write_crash_log(traceback.format_exc())
        where = f"Details are in {log}" if log else "Details"
        what = printable(f"{type(exc).__name__}: {exc}")
        print(
            f"Error: something unexpected went wrong ({what}).\n"
            f"Hint: {where}; run the command again with LECTERN_DEBUG=1 to see them here.",
            file=sys.stderr,
        )
        return EXIT_ERROR


if __name__ == "__main__":
    sys.exit(main())
