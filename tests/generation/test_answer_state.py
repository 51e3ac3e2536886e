"""The one fold of ``ask``'s events (core/generation/answer_state.py): what the person sees
after each event of real sequences, the CLI printing the same answer, and no other place
left that reads the events' meaning for itself."""

from __future__ import annotations

import io
import re
from pathlib import Path

from core.cli.answer import show_answer
from core.errors import LLMError
from core.generation.answer_state import AnswerState, Change
from core.generation.events import (
    REWRITING,
    CitationsEvent,
    DoneEvent,
    DraftEvent,
    ErrorEvent,
    Event,
    SourcesEvent,
    StatusEvent,
    TokenEvent,
    WarningEvent,
    WarningKind,
)
from core.records import Citation, Span
from tests.helpers import text_hit

ROOT = Path(__file__).resolve().parents[2]

FEE = "The fee is 240 euros."
HIT = text_hit(FEE)
OTHER = text_hit("Receipts are kept for ten years.", 2)
CITED = Citation(1, HIT, (Span(0, len(FEE), None, FEE),), FEE)
READING = StatusEvent("The model is reading the question and 1 source(s)…", "reading")
DRAFT = DraftEvent(f"{FEE} [1]", (CITED,))
TIMEOUT = WarningEvent("The model server did not answer in time.", WarningKind.LLM_TIMEOUT)


def done(answer: str, mode: str = "generated", **extra: object) -> DoneEvent:
    fields: dict[str, object] = {
        "answer": answer,
        "mode": mode,
        "citations": (CITED,),
        "warnings": (),
        "timings": {"first_token_s": 0.5, "total_s": 1.5},
        "conversation_id": 7,
        "turn_id": 11,
        "model": "qwen3:4b" if mode == "generated" else None,
        "question": "What is the fee?",
        "sources": (HIT,),
    }
    fields.update(extra)
    return DoneEvent(**fields)  # type: ignore[arg-type]


def fold(events: list[Event]) -> tuple[AnswerState, list[Change]]:
    state = AnswerState()
    return state, [state.apply(event) for event in events]


def test_a_written_answer_replaces_the_draft_and_the_wait_at_its_first_token() -> None:
    state = AnswerState()
    assert state.apply(SourcesEvent((HIT,), "What is the fee?", 7)) & Change.SOURCES
    assert (state.hits, state.question, state.conversation_id) == ((HIT,), "What is the fee?", 7)
    assert state.apply(READING) == Change.STATUS
    assert state.status == READING

    changed = state.apply(DRAFT)
    assert changed == Change.DRAFT | Change.TEXT | Change.CITATIONS
    assert state.drafting and state.text == DRAFT.answer and state.citations == (CITED,)
    assert state.written == "" and state.status == READING  # the wait goes on

    changed = state.apply(TokenEvent("The fee"))
    # The quote, its citations and the note about the wait all go: the answer has started.
    assert changed == Change.TEXT | Change.DRAFT | Change.CITATIONS | Change.STATUS
    assert not state.drafting and state.status is None and state.citations == ()
    assert state.text == state.written == "The fee"
    assert state.first_token_at is not None

    assert state.apply(TokenEvent(" is 240 euros [1].")) == Change.TEXT  # only the text
    assert state.text == "The fee is 240 euros [1]."
    assert state.apply(CitationsEvent((CITED,))) == Change.CITATIONS
    changed = state.apply(done("The fee is 240 euros [1]."))
    assert changed & Change.FINISHED and state.finished
    assert (state.mode, state.model, state.turn_id) == ("generated", "qwen3:4b", 11)
    assert state.timings["total_s"] == 1.5 and state.error is None


def test_a_token_equal_to_the_draft_is_the_quote_standing_not_a_written_answer() -> None:
    # The model failed after the quote was shown: ``ask`` falls back to the same quote,
    # sent as the answer's one token. It is not a written answer replacing the quote.
    state, changes = fold(
        [SourcesEvent((HIT,)), READING, DRAFT, TokenEvent(DRAFT.answer), CitationsEvent((CITED,))]
    )
    assert changes[3] == Change.DRAFT | Change.STATUS  # the text did not change
    assert state.text == DRAFT.answer and state.written == ""
    assert state.quote_stands and not state.drafting
    assert state.citations == (CITED,)
    state.apply(TIMEOUT)
    state.apply(done(DRAFT.answer, "extractive", warnings=(TIMEOUT,)))
    assert state.mode == "extractive" and state.model is None
    assert state.text == DRAFT.answer and state.warnings == (TIMEOUT,)


def test_warnings_said_before_the_first_token_stay_after_it() -> None:
    state, _ = fold([SourcesEvent((HIT,)), DRAFT, TIMEOUT, TokenEvent("The fee")])
    assert state.warnings == (TIMEOUT,)
    assert not state.drafting  # the draft's own note goes; the warnings are the answer's


def test_an_error_after_some_tokens_keeps_the_text_so_far() -> None:
    state, _ = fold(
        [SourcesEvent((HIT,), conversation_id=3), TokenEvent("The fee"), TokenEvent(" is")]
    )
    error = LLMError("The model server stopped answering.")
    changed = state.apply(ErrorEvent(error, conversation_id=3))
    assert changed & Change.FINISHED and state.finished and state.done is None
    assert state.error is not None and state.error.error is error
    assert state.text == "The fee is" and state.mode == ""
    assert state.conversation_id == 3
    # An error that says what it had kept is shown instead.
    state, _ = fold([TokenEvent("The"), ErrorEvent(error, "The fee")])
    assert state.text == "The fee"


def test_an_error_while_the_draft_shows_keeps_the_quote_without_the_wait() -> None:
    state, _ = fold([SourcesEvent((HIT,)), READING, DRAFT, ErrorEvent(LLMError("down"))])
    assert state.text == DRAFT.answer and not state.drafting and state.status is None


def test_done_brings_its_sources_warnings_and_checked_answer() -> None:
    rewritten = SourcesEvent((HIT, OTHER), "What is the fee?")
    state, changes = fold([REWRITING, rewritten, TokenEvent("Fee: 240 [1] [9].")])
    assert changes[1] & Change.STATUS and state.status is None  # the rewrite is over
    note = WarningEvent("Citation [9] matches no source.", WarningKind.UNKNOWN_CITATION)
    changed = state.apply(
        done("Fee: 240 [1].", warnings=(note,), sources=(HIT,), question="What is the fee now?")
    )
    assert changed & (Change.SOURCES | Change.TEXT | Change.WARNINGS | Change.CITATIONS)
    assert state.hits == (HIT,) and state.question == "What is the fee now?"
    assert state.text == "Fee: 240 [1]." and state.written == "Fee: 240 [1] [9]."
    assert state.warnings == (note,) and state.citations == (CITED,)
    assert (state.conversation_id, state.turn_id) == (7, 11)
    # A done without sources (as a socket may send it) keeps the ones shown.
    state, _ = fold([rewritten, done("Fee: 240 [1].", sources=())])
    assert state.hits == (HIT, OTHER)


def test_fold_reads_a_whole_stream() -> None:
    events: list[Event] = [SourcesEvent((HIT,)), TokenEvent(FEE), done(FEE)]
    state = AnswerState.fold(iter(events))
    assert state.finished and state.text == FEE and state.first_token_at is not None


# --- the CLI prints the same answer ----------------------------------------------------------


def printed(events: list[Event]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = show_answer(iter(events), out=out, err=err, as_json=False)
    return code, out.getvalue(), err.getvalue()


def test_the_cli_prints_the_draft_then_the_written_answer() -> None:
    code, out, err = printed(
        [
            SourcesEvent((HIT,)),
            READING,
            DRAFT,
            TokenEvent("The fee"),
            TokenEvent(" is 240 euros [1]."),
            CitationsEvent((CITED,)),
            done("The fee is 240 euros [1]."),
        ]
    )
    assert code == 0
    written = out.index("Written answer:")
    assert out.index(DRAFT.answer) < written < out.index("The fee is 240 euros [1].")
    assert "the model is still reading" in out and "Checked answer" not in out
    assert err.count("reading the question") == 1


def test_the_cli_keeps_the_quote_when_the_model_fails_after_it() -> None:
    code, out, err = printed(
        [
            SourcesEvent((HIT,)),
            DRAFT,
            TokenEvent(DRAFT.answer),
            CitationsEvent((CITED,)),
            TIMEOUT,
            done(DRAFT.answer, "extractive", warnings=(TIMEOUT,)),
        ]
    )
    assert code == 0 and out.count(FEE) == 2  # the draft and its source line, once each
    assert "Written answer:" not in out and "Checked answer" not in out
    assert "Warning: The model server did not answer in time." in err


def test_the_cli_reports_an_error_after_partial_text() -> None:
    code, out, err = printed(
        [SourcesEvent((HIT,)), TokenEvent("The fee"), ErrorEvent(LLMError("Server gone."))]
    )
    assert code == 2 and out == "The fee\n" and "Error: Server gone." in err


# --- one place reads the events --------------------------------------------------------------

EVENTS = r"(?:Sources|Token|Draft|Status|Citations|Warning|Done|Error)Event"
READS = re.compile(rf"isinstance\([^)]*\b{EVENTS}\b|case\s+{EVENTS}\(")
# The fold itself, the events' own module and the socket's serialisation of each event.
ALLOWED = {"core/generation/answer_state.py", "core/generation/events.py", "core/ipc/wire.py"}


def test_only_the_fold_reads_what_an_event_means() -> None:
    readers = {
        f"{path.relative_to(ROOT).as_posix()}:{number}"
        for folder in ("core", "desktop")
        for path in sorted((ROOT / folder).rglob("*.py"))
        if path.relative_to(ROOT).as_posix() not in ALLOWED
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if READS.search(line)
    }
    assert not readers, sorted(readers)
    fold_source = (ROOT / "core/generation/answer_state.py").read_text(encoding="utf-8")
    assert READS.search(fold_source)
