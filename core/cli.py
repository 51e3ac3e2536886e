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
from typing import Any, TextIO

from core import __version__
from core.cli_args import positive_int
from core.errors import LecternError
from core.records import IndexProgress

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
if not sys.stderr.isatty():
    # The model loader's "Loading weights 0/103" bar is for a person watching a terminal;
    # in a pipe or a log it is noise on every command. Read once, when huggingface_hub is
    # imported, so it must be set before anything loads the model.
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")

EXIT_ERROR = 2
EXIT_INTERRUPTED = 130


def _fmt_duration(seconds: float | None) -> str:
    if seconds is None:
        return "--:--"
    seconds = int(seconds)
    return (
        f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"
        if seconds >= 3600
        else f"{seconds // 60:02d}:{seconds % 60:02d}"
    )


class ProgressBar:
    """A one-line progress bar on stderr: files and chunks done, rate, time left."""

    def __init__(self, stream: TextIO | None = None, min_interval: float = 0.2) -> None:
        # Looked up per bar, not bound at import: sys.stderr may have been replaced since.
        self.stream = stream or sys.stderr
        self.enabled = self.stream.isatty() or os.environ.get("LECTERN_PROGRESS") == "1"
        self.min_interval = min_interval
        self._last = 0.0
        self._shown = False

    def __call__(self, p: IndexProgress) -> None:
        now = time.monotonic()
        final = p.files_done >= p.files_total
        if not self.enabled or (now - self._last < self.min_interval and not final):
            return
        self._last = now
        width = 28
        frac = p.files_done / p.files_total if p.files_total else 1.0
        bar = "█" * int(width * frac) + "░" * (width - int(width * frac))
        chunk_rate = p.chunks_done / p.elapsed_s if p.elapsed_s > 0 else 0.0
        line = (
            f"\r{bar} {p.files_done}/{p.files_total} files  {p.chunks_done} chunks  "
            f"{chunk_rate:.1f} chunks/s  ETA {_fmt_duration(p.eta_s)}"
        )
        if p.failed:
            line += f"  {p.failed} failed"
        self.stream.write(line[:160].ljust(100))
        self.stream.flush()
        self._shown = True

    def close(self) -> None:
        if self._shown:
            self.stream.write("\n")
            self.stream.flush()


def _open_library():
    from core.library import Library

    library = Library()
    # What was repaired at open is said once, where the person is looking.
    for notice in library.recovery_notices:
        print(f"{notice.message} {notice.hint}".strip(), file=sys.stderr)
        if notice.kept_at:
            print(f"  (kept at {notice.kept_at})", file=sys.stderr)
    return library


def cmd_index(args: argparse.Namespace) -> int:
    from core.indexer import Controls

    library = _open_library()
    bar = ProgressBar()
    controls = Controls()
    try:
        report = library.index(
            [Path(p) for p in args.paths] or None, progress=bar, controls=controls
        )
    except KeyboardInterrupt:
        bar.close()
        library.close()
        print(
            "Interrupted. Finished files are saved; run `lectern index` again to continue.",
            file=sys.stderr,
        )
        return 130
    bar.close()
    status = library.status()
    library.close()
    summary = {
        "added": report.added,
        "updated": report.updated,
        "removed": report.removed,
        "unchanged": report.unchanged,
        "failed": report.failed,
        "skipped": report.skipped,
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
            print(f"  failed: {path}: {reason}")
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    library = _open_library()
    status = library.status()
    library.close()
    if args.json:
        print(json.dumps(status))
        return 0
    print("\n".join(status_lines(status)))
    return 0


def status_lines(status: Mapping[str, Any]) -> list[str]:
    """The human-readable ``lectern status``: folders, totals, model, then every file
    that is not indexed, with the reason."""
    counts = status.get("counts", {})

    def tally(c: Mapping[str, Any]) -> str:
        return ", ".join(
            f"{c.get(key, 0)} {key}" for key in ("indexed", "failed", "skipped", "pending")
        )

    lines = [f"Data folder: {status.get('home', '')}"]
    folders = status.get("folders", [])
    if not folders:
        lines.append("No folders yet. Add one with: lectern index FOLDER")
    else:
        lines.append("Folders:")
        for folder in folders:
            state = "online" if folder.get("online", True) else "offline (not reachable now)"
            chunks = folder.get("chunks")
            lines.append(
                f"  {folder['path']} ({state}): {tally(folder)}"
                + (f"; {chunks} chunks" if chunks is not None else "")
            )
    lines.append(
        f"Total: {sum(counts.get(k, 0) for k in counts)} files: {tally(counts)}; "
        f"{status.get('chunks', 0)} chunks"
    )
    lines.append(f"Embedding model: {status.get('embedding_model', '')}")
    keyword = status.get("keyword_index")
    if keyword and keyword != "ready":
        lines.append(
            "Keyword index: being rebuilt in the background (search finds passages by "
            "meaning meanwhile)"
            if keyword == "rebuilding"
            else f"Keyword index: {keyword}"
        )
    repairs = status.get("recovery") or []
    if repairs:
        lines.append("Recent repairs:")
        for repair in repairs[-5:]:
            kept = f" (kept at {repair['kept_at']})" if repair.get("kept_at") else ""
            lines.append(f"  {repair.get('at', '')} {repair.get('message', '')}{kept}".rstrip())
    for state, title in (("failed", "Failed"), ("skipped", "Skipped"), ("pending", "Pending")):
        docs = [d for d in status.get("documents", []) if d.get("state") == state]
        if docs:
            lines.append(f"{title} files ({len(docs)}):")
            lines.extend(f"  {d['path']}: {d.get('reason') or 'not indexed yet'}" for d in docs)
    return lines


def cmd_search(args: argparse.Namespace) -> int:
    if not any(ch.isalnum() for ch in args.query):
        print("Type some words to search for.", file=sys.stderr)
        return EXIT_ERROR
    library = _open_library()
    started = time.monotonic()
    hits = library.search(
        args.query, k=args.k, mode=args.mode, folders=args.folder, types=args.type
    )
    elapsed = time.monotonic() - started
    library.close()
    if args.json:
        print(
            json.dumps(
                {
                    "query": args.query,
                    "mode": args.mode,
                    "elapsed_ms": round(elapsed * 1000, 1),
                    "results": [h.to_json() for h in hits],
                }
            )
        )
        return 0
    if not hits:
        print("No matching passages. Is the folder indexed? See `lectern status`.")
        return 0
    for i, hit in enumerate(hits, start=1):
        page = f", page {hit.page}" if hit.page else ""
        snippet = " ".join(hit.text.split())
        print(f"[{i}] {hit.path}{page}  (score {hit.score:.4f})")
        print(f"    {snippet[:300]}{'…' if len(snippet) > 300 else ''}")
    return 0


def cmd_eval(args: argparse.Namespace) -> int:
    from core.eval import evaluate

    modes = ("hybrid", "bm25", "dense") if args.mode == "all" else (args.mode,)
    bar = ProgressBar()
    summary = evaluate(Path(args.beir), split=args.split, modes=modes, progress=bar)
    bar.close()
    if args.json:
        print(json.dumps(summary))
        return 0
    print(
        f"{summary['dataset']} ({summary['split']}): {summary['queries']} queries, "
        f"{summary['documents']} documents, {summary['chunks']} chunks, indexed in {summary['index_s']} s"
    )
    keys = ["ndcg@10", "mrr@10", "recall@5", "recall@10", "recall@20", "recall@50", "query_ms"]
    print("mode     " + "  ".join(f"{k:>9}" for k in keys))
    for mode, scores in summary["by_mode"].items():  # type: ignore[union-attr]
        print(f"{mode:8} " + "  ".join(f"{scores[k]:>9}" for k in keys))
    print(json.dumps(summary))
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
    handlers["index"] = cmd_index

    p = sub.add_parser("status", help="folders and files with their state")
    p.add_argument("--json", action="store_true")
    handlers["status"] = cmd_status

    p = sub.add_parser("search", help="find passages (no language model needed)")
    p.add_argument("query")
    p.add_argument("--mode", choices=("hybrid", "bm25", "dense"), default="hybrid")
    p.add_argument("-k", type=positive_int, default=6, help="how many passages (default 6)")
    p.add_argument("--folder", action="append", help="only this library folder (repeatable)")
    p.add_argument(
        "--type", action="append", help="only this file type: pdf, md, txt, html, docx (repeatable)"
    )
    p.add_argument("--json", action="store_true")
    handlers["search"] = cmd_search

    p = sub.add_parser("eval", help="measure retrieval on a BEIR-format dataset")
    p.add_argument("--beir", required=True, help="folder with corpus.jsonl, queries.jsonl, qrels/")
    p.add_argument("--split", default="test")
    p.add_argument("--mode", choices=("hybrid", "bm25", "dense", "all"), default="all")
    p.add_argument("--json", action="store_true")
    handlers["eval"] = cmd_eval

    try:
        from core import cli_answer
    except ImportError:
        cli_answer = None  # type: ignore[assignment]
    if cli_answer is not None:
        handlers.update(cli_answer.register(sub))
    try:
        from core import cli_watch
    except ImportError:
        cli_watch = None  # type: ignore[assignment]
    if cli_watch is not None:
        handlers.update(cli_watch.register(sub))
    return parser, handlers


def main(argv: Sequence[str] | None = None) -> int:
    parser, handlers = build_parser()
    args = parser.parse_args(argv)
    try:
        return handlers[args.command](args)
    except LecternError as exc:
        print(f"Error: {exc.message}", file=sys.stderr)
        if exc.hint:
            print(f"Hint: {exc.hint}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:  # Ctrl+C is an answer, not an error: no traceback
        return EXIT_INTERRUPTED
    except Exception as exc:  # the last line of defence: a bug, told in one plain line
        if os.environ.get("LECTERN_DEBUG") == "1":
            raise
        log = _write_crash_log()
        where = f"Details are in {log}" if log else "Details"
        print(
            f"Error: something unexpected went wrong ({type(exc).__name__}: {exc}).\n"
            f"Hint: {where}; run the command again with LECTERN_DEBUG=1 to see them here.",
            file=sys.stderr,
        )
        return EXIT_ERROR


def _write_crash_log() -> Path | None:
    """The traceback of an unexpected error, kept for a bug report; None if unwritable."""
    try:
        from core.config import data_dir

        path = data_dir() / "cli-error.log"
        with path.open("a", encoding="utf-8") as log:
            log.write(f"--- lectern {__version__} {time.strftime('%Y-%m-%d %H:%M:%S')}\n")
            log.write(traceback.format_exc())
        return path
    except Exception:  # the data folder itself may be what is broken
        return None


if __name__ == "__main__":
    sys.exit(main())
