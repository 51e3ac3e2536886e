"""The answering subcommands of ``lectern``: ``ask``, ``models`` and ``pull``.

``register(subparsers)`` adds them and returns ``{name: handler}``; core/cli/main.py calls the
handler with the parsed arguments and turns a raised LecternError into a message, a hint
and a non-zero exit status. ``ask`` reports its own errors (the answer stream carries
them) and exits 0 whenever an answer was given, extractive fallbacks included.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import threading
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, TextIO

from core.cli.args import positive_int
from core.cli.terminal import printable, printable_lines
from core.config import load_settings
from core.errors import LecternError
from core.generation.answer_state import AnswerState, Change
from core.generation.citations import REFUSAL
from core.generation.events import DoneEvent, Event, WarningKind
from core.generation.extractive import EXTRACTIVE_NOTE
from core.generation.llm_order import rerank_note
from core.generation.session import AnswerSession
from core.llm import ModelInfo, PullProgress, make_client
from core.records import Citation

if TYPE_CHECKING:
    from core.ipc import RemoteLibrary

Handler = Callable[[argparse.Namespace], int]

EXIT_ERROR = 2  # same as core/cli/main.py for a LecternError
EXIT_INTERRUPTED = 130


def register(subparsers: Any) -> dict[str, Handler]:
    p = subparsers.add_parser("ask", help="answer a question from your documents, with citations")
    p.add_argument("question")
    p.add_argument("--model", help="model name on the server (default: from the settings)")
    p.add_argument("--conversation", type=int, help="continue this conversation (its id)")
    p.add_argument(
        "-k", type=positive_int, help="how many sources to retrieve (default: from the settings)"
    )
    p.add_argument(
        "--no-llm", action="store_true", help="extract sentences instead of asking a model server"
    )
    p.add_argument("--json", action="store_true", help="print one JSON object as the last line")
    from core.cli.collections import add_scope_arguments

    add_scope_arguments(p)

    p = subparsers.add_parser("models", help="list the models the configured server has")
    p.add_argument("--json", action="store_true")

    p = subparsers.add_parser("pull", help="download a model into Ollama, with progress")
    p.add_argument("name")
    p.add_argument("--json", action="store_true")
    return {"ask": cmd_ask, "models": cmd_models, "pull": cmd_pull}


# --- ask --------------------------------------------------------------------------------


def _one_line(text: str, limit: int = 240) -> str:
    text = re.sub(r"\s+", " ", text).strip()
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _display_path(path: str) -> str:
    try:
        rel = os.path.relpath(path)
    except ValueError:  # another drive on Windows
        return path
    return rel if not rel.startswith("..") else path


def citation_lines(citations: tuple[Citation, ...]) -> list[str]:
    """``[n] file, page N: "supporting sentence"``, once per distinct (source, quote)."""
    lines: list[str] = []
    seen: set[tuple[int, str]] = set()
    for c in sorted(citations, key=lambda c: c.n):
        quote = _one_line(c.quote)
        if (c.n, quote) in seen:
            continue
        seen.add((c.n, quote))
        page = c.spans[0].page if c.spans else c.hit.page
        where = _display_path(c.hit.path) + (f", page {page}" if page is not None else "")
        # Escaped (core/cli/terminal.py): a name holding "\r[1] other.pdf" would print a
        # forged source line, and a quote is a document's text, which may hold ESC.
        lines.append(f'[{c.n}] {printable(where)}: "{printable(quote)}"')
    return lines


def answer_json(done: Any) -> dict[str, object]:
    return {
        "answer": done.answer,
        "mode": done.mode,
        "citations": [
            {
                "n": c.n,
                "document": c.hit.path,
                "page": c.spans[0].page if c.spans else c.hit.page,
                "start": c.spans[0].start if c.spans else c.hit.start,
                "end": c.spans[-1].end if c.spans else c.hit.end,
                "quote": c.quote,
            }
            for c in done.citations
        ],
        "warnings": [w.to_json() for w in done.warnings],
        "timings": dict(done.timings),
        "conversation": done.conversation_id,
        "model": done.model,
        "question": done.question,
    }


def cmd_ask(
    args: argparse.Namespace, *, out: TextIO | None = None, err: TextIO | None = None
) -> int:
    from core.cli.common import running_library
    from core.errors import IndexBusyError
    from core.generation.qa import ask
    from core.library import Library

    out = out or sys.stdout
    err = err or sys.stderr
    as_json = bool(getattr(args, "json", False))
    if not any(ch.isalnum() for ch in args.question):
        print("Type a question to ask about your documents.", file=err)
        return EXIT_ERROR
    cancel = threading.Event()
    settings = load_settings()
    # A mistyped server address quotes the documents, with an llm_config warning.
    session = AnswerSession(settings, use_llm=not getattr(args, "no_llm", False))
    from core.cli.collections import scope_from_args

    scope = scope_from_args(args)
    try:
        library: Library | RemoteLibrary = Library(settings, migrate=False)
    except IndexBusyError as busy:  # `lectern watch` or the app holds it: it answers
        library = running_library(busy, settings.home)
    try:
        if isinstance(library, Library):
            events = ask(
                library,
                args.question,
                getattr(args, "conversation", None),
                model=getattr(args, "model", None),
                cancel=cancel,
                k=getattr(args, "k", None),
                scope=scope,
                session=session,
            )
        else:
            events = session.amend(
                library.ask(
                    args.question,
                    getattr(args, "conversation", None),
                    settings=settings,
                    model=getattr(args, "model", None),
                    use_llm=session.use_llm,
                    k=getattr(args, "k", None),
                    scope=scope,
                )
            )
        return show_answer(events, out=out, err=err, as_json=as_json)
    except KeyboardInterrupt:
        cancel.set()  # the stream's finally shuts the connection; say what happened
        out.write("\n")
        print("Cancelled.", file=err)
        return EXIT_INTERRUPTED
    finally:
        library.close()
        session.close()


def show_answer(events: Iterable[Event], *, out: TextIO, err: TextIO, as_json: bool) -> int:
    """Print the answer as ``events`` (folded by AnswerState) bring it: progress and the
    draft on the way, the answer as it is written, then its sources and warnings (or the
    error); ``as_json``, one JSON object at the end. The exit status."""
    state = AnswerState()
    said: set[str] = set()
    printed = 0  # how much of the written text is on the terminal
    for event in events:
        change = state.apply(event)
        if state.error is not None:
            error = state.error
            if as_json:
                print(json.dumps(error.to_json()), file=out)
            else:
                if printed:
                    out.write("\n")
                print(f"Error: {printable(error.error.message)}", file=err)
                if error.error.hint:
                    print(f"Hint: {printable(error.error.hint)}", file=err)
            return EXIT_ERROR
        if state.done is not None:
            if as_json:
                print(json.dumps(answer_json(state.done)), file=out)
                return 0
            _print_done(state.done, state.written, out)
            # Said after the answer and its sources: the done answer holds them all.
            for warning in state.warnings:
                print(f"Warning: {printable(warning.message)}", file=err)
            return 0
        if as_json:
            continue
        if change & Change.SOURCES and not state.hits:
            print("No indexed passage matches this question.", file=err)
        status = state.status
        if change & Change.STATUS and status is not None and status.kind not in said:
            said.add(status.kind)  # once each: progress would flood the terminal
            print(printable(status.message), file=err)
        if change & Change.DRAFT and state.drafting and state.draft is not None:
            # A slow server is still reading: the quote now, the written answer after.
            shown = printable_lines(state.draft.answer)
            out.write(f"{shown}\n({EXTRACTIVE_NOTE}; the model is still reading…)\n")
            out.flush()
        if change & Change.TEXT and len(state.written) > printed:
            if state.draft is not None and not printed:
                out.write("\nWritten answer:\n")
            out.write(printable_lines(state.written[printed:]))
            printed = len(state.written)
            out.flush()
    return 0


def _print_done(done: DoneEvent, streamed: str, out: TextIO) -> None:
    if streamed and not streamed.endswith("\n"):
        out.write("\n")
    if streamed.strip() and streamed.strip() != done.answer.strip():
        # Unknown citation numbers were removed: show the checked answer.
        out.write(f"\nChecked answer:\n{printable_lines(done.answer)}\n")
    if any(w.kind == WarningKind.QUOTED_FIRST for w in done.warnings):
        model = printable(str(done.model))
        out.write(f"(quoted from your documents; {model}'s answer follows, unverified)\n")
    elif done.mode == "extractive":
        out.write(f"({EXTRACTIVE_NOTE})\n")
    elif done.mode == "declined" and not done.answer.strip().startswith(REFUSAL):
        out.write(f"{REFUSAL}\n")
    lines = citation_lines(done.citations)
    if lines:
        out.write("\nSources:\n" + "\n".join(lines) + "\n")
    reordered = done.timings.get("llm_rerank_s")
    if reordered is not None:
        out.write(f"({printable(rerank_note(done.model, reordered))})\n")
    if done.conversation_id is not None:
        out.write(
            f"\n(conversation {done.conversation_id}: continue with --conversation {done.conversation_id})\n"
        )
    out.flush()


# --- models -------------------------------------------------------------------------------


def _size(num: int | None) -> str:
    from core.generation.pull import byte_size

    return "-" if num is None else byte_size(num)


def cmd_models(args: argparse.Namespace, *, out: TextIO | None = None) -> int:
    out = out or sys.stdout
    settings = load_settings()
    client = make_client(settings)
    try:
        models: list[ModelInfo] = client.list_models()
        # A single-model server (llama.cpp) answers to any name with the one it loaded.
        current = client.served_model(settings.llm_model)
    finally:
        client.close()
    names = {m.name for m in models}
    configured_present = current in names or f"{current}:latest" in names
    if getattr(args, "json", False):
        print(
            json.dumps(
                {
                    "server": client.url,
                    "kind": client.kind,
                    "configured": current,
                    "configured_installed": configured_present,
                    "models": [m.to_json() for m in models],
                }
            ),
            file=out,
        )
        return 0
    # What a server calls its models is its own text: shown escaped like a file name.
    url, shown = printable(client.url), printable(current)
    if not models:
        out.write(f"The server at {url} has no models. Pull one: lectern pull {shown}\n")
        return 0
    listed = {m.name: printable(m.name) for m in models}
    width = max(len(n) for n in listed.values())
    out.write(f"  {'NAME':<{width}}  {'SIZE':>9}  {'PARAMS':>7}  QUANT\n")
    for m in models:
        mark = "*" if m.name in (current, f"{current}:latest") else " "
        params, quant = printable(m.parameter_size or "-"), printable(m.quantization or "-")
        out.write(f"{mark} {listed[m.name]:<{width}}  {_size(m.size):>9}  {params:>7}  {quant}\n")
    if not configured_present:
        # repr escapes what printable does.
        out.write(f"\nThe configured model {current!r} is not installed: lectern pull {shown}\n")
    return 0


# --- pull ---------------------------------------------------------------------------------


class PullBar:
    """One progress line per layer on stderr; plain status lines when not a terminal."""

    def __init__(self, stream: TextIO, min_interval: float = 0.1) -> None:
        self.stream = stream
        self.tty = stream.isatty() or os.environ.get("LECTERN_PROGRESS") == "1"
        self.min_interval = min_interval
        self._last_status = ""
        self._last_draw = 0.0
        self._open_line = False

    def __call__(self, p: PullProgress) -> None:
        if p.total and p.digest:
            self._bar(p)
            return
        self._end_line()
        if p.status != self._last_status:
            print(printable(p.status), file=self.stream)  # the server's words
        self._last_status = p.status

    def _bar(self, p: PullProgress) -> None:
        fraction = p.fraction or 0.0
        now = time.monotonic()
        if not self.tty:
            if p.status != self._last_status:
                print(f"{printable(p.status)} ({_size(p.total)})", file=self.stream)
                self._last_status = p.status
            return
        if now - self._last_draw < self.min_interval and fraction < 1.0:
            return
        self._last_draw = now
        width = 28
        filled = int(width * fraction)
        bar = "█" * filled + "░" * (width - filled)
        line = (
            f"\r{printable(p.status)} {bar} {fraction:4.0%} {_size(p.completed)}/{_size(p.total)}"
        )
        self.stream.write(line + " " * 4)
        self.stream.flush()
        self._open_line = True
        if p.status != self._last_status:
            self._last_status = p.status

    def _end_line(self) -> None:
        if self._open_line:
            self.stream.write("\n")
            self._open_line = False

    def close(self) -> None:
        self._end_line()
        self.stream.flush()


def cmd_pull(
    args: argparse.Namespace, *, out: TextIO | None = None, err: TextIO | None = None
) -> int:
    out = out or sys.stdout
    err = err or sys.stderr
    settings = load_settings()
    client = make_client(settings)
    cancel = threading.Event()
    bar = PullBar(err)
    last: PullProgress | None = None
    try:
        for progress in client.pull(args.name, cancel=cancel):
            last = progress
            bar(progress)
    except KeyboardInterrupt:
        cancel.set()
        bar.close()
        print("Cancelled; Ollama resumes the download where it stopped next time.", file=err)
        return EXIT_INTERRUPTED
    finally:
        bar.close()
        client.close()
    ok = last is not None and last.status == "success"
    if getattr(args, "json", False):
        print(
            json.dumps({"model": args.name, "status": last.status if last else "", "ok": ok}),
            file=out,
        )
    elif ok:
        print(f"Pulled {args.name}.", file=out)
    if not ok:
        raise LecternError(
            f"The pull of {args.name!r} ended without success ({last.status if last else 'no reply'}).",
            "Try again; Ollama resumes an interrupted download.",
        )
    return 0
