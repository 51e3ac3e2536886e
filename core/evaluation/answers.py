"""Answer evaluation: the generation half of ``lectern eval`` (``--answers``).

Every question goes through ``core.generation.qa.ask``, the call the app and ``lectern ask`` make,
over an ordinary ``Library`` in a scratch data folder: mode "none" answers without a
model (sentences extracted from the sources), mode "llm" with the server the settings
name (Ollama or an OpenAI-compatible one). Answers are not stored.

Questions come from SQuAD 2.0 JSON (each paragraph written as a text file, its article's
title on the first line, and indexed; the scratch index is keyed by the file, so reruns do
not re-embed) or from JSONL, one object a line::

    {"question": "...", "answers": ["...", ...], "document": "file.txt", "group": "..."}

``answers`` empty: the documents do not say, and the answer must decline. ``document``
(optional) is the file the answer should come from, relative to the documents folder.
``group`` (optional) is "answerable", "unanswerable" (a near miss: the documents cover the
subject but not this) or "out_of_corpus"; by default a question with answers is
answerable, one without is unanswerable in the main file and out of the corpus in a file
added with ``--questions``.

An answer is correct when it contains a gold answer (both normalised like SQuAD's
scorer: lower case, punctuation and articles removed, matched on word boundaries) and did
not decline; an unanswerable question is answered correctly by declining. A citation is
supported when its span contains a gold answer or at least half of the content words of
the answer sentence it is attached to.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import sys
import time
import unicodedata
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

import numpy as np

from core.citation_marks import strip_citations
from core.config import Settings, load_settings
from core.errors import (
    DatasetError,
    LecternError,
    LLMError,
    LLMTimeoutError,
    LLMUnavailableError,
    ModelNotFoundError,
)
from core.evaluation.beir import jsonl_rows
from core.generation.citations import is_refusal, unverified_identifiers, unverified_names
from core.generation.events import SERVER_FAILED, WarningKind
from core.generation.qa import MODEL_UNCHECKED
from core.library import Library
from core.records import Citation, IndexProgress
from core.text import content_words, overlap

if TYPE_CHECKING:
    from core.generation.qa import DoneEvent
    from core.llm import LLMClient

GROUPS = ("answerable", "unanswerable", "out_of_corpus")
MODES = ("none", "llm")
SUPPORT_SHARE = 0.5  # of the answer sentence's content words found in the cited span
FALLBACK_WARNINGS = SERVER_FAILED  # the answer was quoted because the server failed
PROGRESS_EVERY_S = 5.0


# --- records -----------------------------------------------------------------------------


@dataclass(frozen=True)
class AnswerQuestion:
    question: str
    answers: tuple[str, ...]  # empty: the answer must decline
    group: str  # one of GROUPS
    document: str | None = None  # the file the answer should come from
    # Questions asked before it in the same conversation: it is a follow-up to them.
    history: tuple[str, ...] = ()

    @property
    def answerable(self) -> bool:
        return bool(self.answers)


@dataclass(frozen=True)
class Paragraph:
    """One SQuAD paragraph, written as ``name`` with ``title`` on its first line."""

    name: str
    title: str
    text: str


@dataclass(frozen=True)
class AnswerSet:
    kind: str  # "squad" | "jsonl"
    questions: tuple[AnswerQuestion, ...]
    paragraphs: tuple[Paragraph, ...] = ()  # SQuAD only


@dataclass(frozen=True)
class QuestionResult:
    """One answer, scored."""

    group: str
    answerable: bool
    mode: str  # "generated" | "extractive" | "declined" | "error"
    correct: bool
    retrieved: bool | None  # the gold document among the sources; None: no gold document
    cited: bool | None  # ... among the cited sources
    citations: int
    supported: int
    first_token_s: float | None
    question_to_first_token_s: float | None
    tokens_per_s: float | None
    model: str | None
    fallback: bool = False  # the server failed, so the answer was extracted instead
    # The model's own text scored alone: for an answer whose quote came first (the model's
    # text failed its check), what the answer would have been without that rule.
    model_correct: bool | None = None
    quoted_first: bool = False
    prompt_tokens: int | None = None  # as the server counted them
    weak_evidence: bool = False  # warned that no passage seems to answer the question

    @property
    def declined(self) -> bool:
        return self.mode == "declined"


# --- metrics -----------------------------------------------------------------------------

_ARTICLES = re.compile(r"\b(a|an|the)\b")


def normalize_answer(text: str) -> str:
    """SQuAD's normalisation (lower case, no punctuation, no articles, single spaces),
    after the answer's ``[n]`` markers are removed. Punctuation becomes a space rather
    than nothing, so "10th-century" and "10th century" agree."""
    text = strip_citations(text).lower()
    # SQuAD's scorer drops string.punctuation, which holds "$", "%", "+" and the like:
    # symbols, to Unicode ("1 200 000$" holds "1 200 000").
    text = "".join(" " if unicodedata.category(ch)[0] in "PS" else ch for ch in text)
    return " ".join(_ARTICLES.sub(" ", text).split())


def contains_gold(answer: str, golds: Iterable[str]) -> bool:
    """Whether ``answer`` contains one of ``golds``, whole words only, both normalised."""
    said = f" {normalize_answer(answer)} "
    for gold in golds:
        wanted = normalize_answer(gold)
        if wanted and f" {wanted} " in said:
            return True
    return False


def citation_supported(citation: Citation, golds: Sequence[str]) -> bool:
    """The cited span holds a gold answer, or half the content words of its sentence and
    every figure and name of it (swapped subjects share the words, not the names). A
    citation shown without evidence supports nothing."""
    span = citation.quote
    if not span:
        return False
    if golds and contains_gold(span, golds):
        return True
    sentence = strip_citations(citation.sentence)
    claim = content_words(sentence)
    if unverified_identifiers(sentence, [span]) or unverified_names(sentence, [span]):
        return False
    return bool(claim) and overlap(claim, set(content_words(span))) >= SUPPORT_SHARE


def _matches(path: str, document: str, documents: Path | None) -> bool:
    wanted = document.replace("\\", "/").strip("/")
    if documents is not None:
        try:
            if Path(path).relative_to(documents).as_posix() == wanted:
                return True
        except ValueError:
            pass
    return Path(path).name == wanted


def score_answer(
    question: AnswerQuestion,
    done: DoneEvent,
    *,
    first_token_s: float | None,
    documents: Path | None = None,
    question_to_first_token_s: float | None = None,
) -> QuestionResult:
    """``done`` (a ``core.generation.qa.DoneEvent``) scored against ``question``. ``first_token_s``
    is the time to the first token as the mode defines it; ``documents`` is the folder the
    gold document names are relative to."""
    declined = done.mode == "declined"
    correct = (
        declined
        if not question.answerable
        else not declined and contains_gold(done.answer, question.answers)
    )
    retrieved = cited = None
    if question.document:
        retrieved = any(_matches(h.path, question.document, documents) for h in done.sources)
        cited = any(_matches(c.hit.path, question.document, documents) for c in done.citations)
    supported = sum(citation_supported(c, question.answers) for c in done.citations)
    timings = done.timings or {}
    tokens_per_s = None
    eval_count, generation_s = timings.get("eval_count"), timings.get("generation_s")
    if done.mode != "declined" and eval_count and generation_s:
        tokens_per_s = float(eval_count) / float(generation_s)
    fallback = any(w.kind in FALLBACK_WARNINGS for w in done.warnings)
    quoted_first = any(w.kind == WarningKind.QUOTED_FIRST for w in done.warnings)
    model_correct: bool | None = None
    if done.model is not None and not fallback:
        if quoted_first:  # the model's own text is the part after the label
            own = done.answer.partition(MODEL_UNCHECKED)[2]
            model_correct = (
                contains_gold(own, question.answers) if question.answerable else is_refusal(own)
            )
        else:
            model_correct = correct
    prompt_tokens = timings.get("prompt_eval_count")
    return QuestionResult(
        group=question.group,
        answerable=question.answerable,
        mode=done.mode,
        correct=correct,
        retrieved=retrieved,
        cited=cited,
        citations=len(done.citations),
        supported=supported,
        first_token_s=first_token_s,
        question_to_first_token_s=question_to_first_token_s,
        tokens_per_s=tokens_per_s,
        model=done.model,
        fallback=fallback,
        model_correct=model_correct,
        quoted_first=quoted_first,
        prompt_tokens=int(prompt_tokens) if isinstance(prompt_tokens, int | float) else None,
        weak_evidence=any(w.kind == WarningKind.WEAK_EVIDENCE for w in done.warnings),
    )


def _failed(question: AnswerQuestion) -> QuestionResult:
    """A question whose ask ended in an ErrorEvent: no answer, so wrong either way."""
    return QuestionResult(
        question.group,
        question.answerable,
        "error",
        False,
        None,
        None,
        0,
        0,
        None,
        None,
        None,
        None,
    )


def _share(flags: Sequence[bool]) -> float | None:
    return round(sum(flags) / len(flags), 4) if flags else None


def _spread(values: Sequence[float]) -> dict[str, float | None]:
    if not values:
        return {"mean": None, "p50": None, "p95": None}
    array = np.asarray(values, dtype=float)
    return {
        "mean": round(float(array.mean()), 4),
        "p50": round(float(np.percentile(array, 50)), 4),
        "p95": round(float(np.percentile(array, 95)), 4),
    }


def group_metrics(results: Sequence[QuestionResult]) -> dict[str, Any]:
    """The figures of one group of answers (see the README, "How well it answers")."""
    answerable = [r for r in results if r.answerable]
    unanswerable = [r for r in results if not r.answerable]
    answered = [r for r in results if r.mode in ("generated", "extractive")]
    citations = sum(r.citations for r in answered)
    rates = [r.tokens_per_s for r in results if r.tokens_per_s is not None]
    return {
        "questions": len(results),
        "correct": _share([r.correct for r in results]),
        "refusal_rate": _share([r.declined for r in unanswerable]),
        "false_refusal_rate": _share([r.declined for r in answerable]),
        "gold_document_retrieved": _share(
            [r.retrieved for r in answerable if r.retrieved is not None]
        ),
        "gold_document_cited": _share([r.cited for r in answerable if r.cited is not None]),
        "citations": citations,
        "citation_precision": (
            round(sum(r.supported for r in answered) / citations, 4) if citations else None
        ),
        "all_citations_supported": _share([0 < r.citations == r.supported for r in answered]),
        "first_token_s": _spread([r.first_token_s for r in results if r.first_token_s is not None]),
        "question_to_first_token_s": _spread(
            [
                r.question_to_first_token_s
                for r in results
                if r.question_to_first_token_s is not None
            ]
        ),
        "tokens_per_s": round(float(np.mean(rates)), 2) if rates else None,
        # The model's answers: its own text scored alone, and how often the quote came first.
        "model_alone_correct": _share(
            [r.model_correct for r in results if r.model_correct is not None]
        ),
        "quoted_first": _share([r.quoted_first for r in results if r.model is not None]),
        # Declined, or answered with the warning that no passage seems to answer it.
        "declined_or_warned": _share([r.declined or r.weak_evidence for r in results]),
        "prompt_tokens": _spread([r.prompt_tokens for r in results if r.prompt_tokens is not None]),
    }


def summarize(results: Sequence[QuestionResult]) -> dict[str, dict[str, Any]]:
    """``group_metrics`` for each group and for all questions together."""
    report = {group: group_metrics([r for r in results if r.group == group]) for group in GROUPS}
    report["all"] = group_metrics(results)
    return report


# --- question files ----------------------------------------------------------------------


def _bad(path: Path, number: int, problem: str) -> DatasetError:
    return DatasetError(
        f"{path}, line {number}: {problem}.",
        'Each line is one JSON object: {"question": "...", "answers": ["..."], '
        '"document": "file name (optional)"}; "answers": [] when the documents do not say.',
    )


def _question(row: dict[str, Any], path: Path, number: int, unanswerable: str) -> AnswerQuestion:
    question, answers = row["question"], row["answers"]
    if not isinstance(question, str):
        raise _bad(path, number, "'question' must be text")
    if not question.strip():
        raise _bad(path, number, "'question' is empty")
    if not isinstance(answers, list) or not all(isinstance(a, str) for a in answers):
        raise _bad(path, number, "'answers' must be a list of texts ([] when unanswerable)")
    golds = tuple(dict.fromkeys(a.strip() for a in answers if a.strip()))
    document = row.get("document")
    if document is not None and (not isinstance(document, str) or not document.strip()):
        raise _bad(path, number, "'document' must be a file name")
    group = row.get("group") or ("answerable" if golds else unanswerable)
    if group not in GROUPS:
        raise _bad(path, number, f"'group' must be one of {', '.join(GROUPS)}, not {group!r}")
    if (group == "answerable") != bool(golds):
        raise _bad(
            path,
            number,
            f"group {group!r} "
            + ("needs answers" if group == "answerable" else "must have no answers ([])"),
        )
    history = row.get("history", [])
    if not isinstance(history, list) or not all(isinstance(h, str) and h.strip() for h in history):
        raise _bad(path, number, "'history' must be a list of the questions asked before it")
    return AnswerQuestion(
        question.strip(),
        golds,
        group,
        document.strip() if document else None,
        tuple(h.strip() for h in history),
    )


def load_questions(path: Path, *, unanswerable: str = "unanswerable") -> list[AnswerQuestion]:
    """The questions of a JSONL file; a bad line is a DatasetError naming it.
    ``unanswerable``: the group of a question without answers that names none."""
    path = Path(path)
    questions = [
        _question(row, path, number, unanswerable)
        for number, row in jsonl_rows(path, ("question", "answers"), _bad(path, 0, "").hint)
    ]
    if not questions:
        raise DatasetError(f"{path} holds no questions.")
    return questions


def _file_name(title: str, index: int) -> str:
    return f"{re.sub(r'[^A-Za-z0-9_.-]', '_', title)[:80] or 'paragraph'}-{index:03d}.txt"


def _load_squad(path: Path, data: dict[str, Any]) -> AnswerSet:
    paragraphs: list[Paragraph] = []
    questions: list[AnswerQuestion] = []
    try:
        for article in data["data"]:
            raw_title = str(article.get("title") or "")
            title = " ".join(raw_title.replace("_", " ").split())
            for paragraph in article["paragraphs"]:
                name = _file_name(raw_title, len(paragraphs))
                paragraphs.append(Paragraph(name, title, str(paragraph["context"])))
                for qa in paragraph["qas"]:
                    golds = tuple(
                        dict.fromkeys(str(a["text"]).strip() for a in qa.get("answers") or [])
                    )
                    impossible = bool(qa.get("is_impossible")) or not golds
                    questions.append(
                        AnswerQuestion(
                            str(qa["question"]).strip(),
                            () if impossible else golds,
                            "unanswerable" if impossible else "answerable",
                            name,
                        )
                    )
    except (KeyError, TypeError, AttributeError) as exc:
        raise DatasetError(
            f"{path} is not SQuAD-format JSON (at {exc!r}).",
            "SQuAD files hold data[].paragraphs[].context and .qas[] with question, "
            "answers[].text and is_impossible.",
        ) from None
    return AnswerSet("squad", tuple(questions), tuple(paragraphs))


def load_answer_set(path: Path) -> AnswerSet:
    """SQuAD 2.0 JSON (a JSON object with ``data``) or JSONL questions."""
    path = Path(path)
    if path.suffix.lower() != ".jsonl":
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except ValueError:
            data = None  # JSONL under another name, or broken: the line reader says which
        except OSError as exc:
            raise DatasetError(f"{path} could not be read: {exc.strerror or exc}.") from exc
        if isinstance(data, dict) and "data" in data:
            return _load_squad(path, data)
        if isinstance(data, dict) and "question" not in data:
            raise DatasetError(
                f"{path} is neither SQuAD-format JSON nor questions, one JSON object a line.",
                "Give --answers a SQuAD 2.0 .json file or a .jsonl file of questions.",
            )
    return AnswerSet("jsonl", tuple(load_questions(path)))


def write_paragraphs(paragraphs: Sequence[Paragraph], folder: Path) -> list[Path]:
    """Each paragraph as a text file (title, blank line, text); files already right are
    left alone so the scratch index finds them unchanged."""
    folder.mkdir(parents=True, exist_ok=True)
    paths: list[Path] = []
    for paragraph in paragraphs:
        path = folder / paragraph.name
        body = (
            f"{paragraph.title}\n\n{paragraph.text.strip()}\n"
            if paragraph.title
            else (f"{paragraph.text.strip()}\n")
        )
        if not path.exists() or path.read_text(encoding="utf-8") != body:
            path.write_text(body, encoding="utf-8")
        paths.append(path)
    return paths


# --- the run -----------------------------------------------------------------------------


def _key(*parts: object) -> str:
    return hashlib.sha1("|".join(str(p) for p in parts).encode()).hexdigest()[:12]


def _say(log: TextIO | None, text: str) -> None:
    stream = log or sys.stderr
    print(text, file=stream, flush=True)


def _ask_all(
    library: Library,
    questions: Sequence[AnswerQuestion],
    mode: str,
    documents: Path,
    client: LLMClient | None,
    log: TextIO | None,
) -> tuple[list[QuestionResult], list[str]]:
    """Every question through ``ask``; the scored answers and the errors' messages."""
    from core.generation.qa import AnswerState, ask

    results: list[QuestionResult] = []
    errors: list[str] = []
    started = last = time.monotonic()
    for number, question in enumerate(questions, start=1):
        t0 = time.perf_counter()
        conversation = _conversation(library, question.history)
        state = AnswerState.fold(
            ask(
                library,
                question.question,
                conversation,
                client=client,
                use_llm=mode != "none",
                # A follow-up's conversation is kept so that it can be read; a scratch library.
                store=conversation is not None,
            )
        )
        first = state.first_token_at - t0 if state.first_token_at is not None else None
        done = state.done
        if done is None:
            results.append(_failed(question))
            if state.error is not None and len(errors) < 5:
                errors.append(state.error.error.message)
        else:
            # The model's own clock where it wrote the answer (from the request to its
            # first token); otherwise the time the first words reached the caller.
            model_first = done.timings.get("first_token_s") if done.mode != "declined" else None
            measured = float(model_first) if model_first is not None else first
            results.append(
                score_answer(
                    question,
                    done,
                    first_token_s=measured,
                    documents=documents,
                    question_to_first_token_s=first,
                )
            )
        now = time.monotonic()
        if now - last >= PROGRESS_EVERY_S or number == len(questions):
            last = now
            _say(
                log, f"answers [{mode}]: {number}/{len(questions)} questions, {now - started:.0f} s"
            )
    return results, errors


def _conversation(library: Library, history: Sequence[str]) -> int | None:
    """A conversation holding ``history``, for a follow-up question; None without history.
    The earlier questions are answered without the model: their answers only feed the
    follow-up's rewrite, and a model answer each would double a run's time."""
    from core.generation.qa import AnswerState, ask

    conversation: int | None = None
    for earlier in history:
        state = AnswerState.fold(ask(library, earlier, conversation, use_llm=False))
        if state.conversation_id is not None:
            conversation = state.conversation_id
    return conversation


def _probe(client: LLMClient, model: str) -> LLMError | None:
    """The error that makes the model-written mode impossible, None when it can run."""
    try:
        client.context_length(model)
    except (LLMUnavailableError, LLMTimeoutError, ModelNotFoundError) as exc:
        return exc
    except LLMError:
        return None  # the server answered, only not with a context length
    return None


def _run_mode(
    library: Library,
    questions: Sequence[AnswerQuestion],
    mode: str,
    documents: Path,
    log: TextIO | None,
) -> dict[str, Any]:
    from core.llm import make_client

    report: dict[str, Any] = {"model": None}
    client = None
    if mode == "llm":
        settings = library.settings
        model = settings.llm_model
        report["model"] = model
        try:
            client = make_client(settings)
        except LecternError as exc:
            return report | {"error": exc.message, "hint": exc.hint}
        report["server"] = client.url
        report["server_kind"] = client.kind
        down = _probe(client, model)
        if down is not None:
            client.close()
            _say(log, f"answers [llm]: {down.message}")
            return report | {"error": down.message, "hint": down.hint}
    started = time.monotonic()
    try:
        results, errors = _ask_all(library, questions, mode, documents, client, log)
    finally:
        if client is not None:
            client.close()
    elapsed = time.monotonic() - started
    counts = {
        m: sum(r.mode == m for r in results)
        for m in ("generated", "extractive", "declined", "error")
    }
    report["answer_modes"] = counts
    if mode == "llm":
        report["fallbacks"] = sum(r.fallback for r in results)
        used = sorted({r.model for r in results if r.model})
        report["models_answering"] = used
    if errors:
        report["errors"] = errors
    report["elapsed_s"] = round(elapsed, 1)
    report["seconds_per_question"] = round(elapsed / max(1, len(results)), 3)
    report["groups"] = summarize(results)
    return report


def evaluate_answers(
    path: Path,
    *,
    questions: Sequence[Path] = (),
    documents: Path | None = None,
    modes: Sequence[str] = MODES,
    limit: int | None = None,
    settings: Settings | None = None,
    progress: Callable[[IndexProgress], None] | None = None,
    log: TextIO | None = None,
    scratch: Path | None = None,
) -> dict[str, Any]:
    """Index the documents in a scratch data folder, answer every question in each of
    ``modes`` and report the figures per mode and group. ``limit``: the first N
    questions of each question file."""
    for mode in modes:
        if mode not in MODES:
            raise DatasetError(
                f"Unknown answer mode {mode!r}.", f"Use {' or '.join(MODES)}, comma-separated."
            )
    path = Path(path).resolve()
    answer_set = load_answer_set(path)
    base = settings or load_settings()
    if answer_set.kind == "squad":
        if documents is not None:
            raise DatasetError(
                "--documents is for questions in JSONL: a SQuAD file brings its own paragraphs.",
                "Leave out --documents.",
            )
        stat = path.stat()
        root = (
            scratch
            or base.home / "eval" / f"answers-{path.stem}-{_key(path, stat.st_size, stat.st_mtime)}"
        )
        docs = root.resolve() / "docs"
        write_paragraphs(answer_set.paragraphs, docs)
    else:
        if documents is None:
            raise DatasetError(
                f"{path.name} holds questions only: which documents do they ask about?",
                "Name the folder with --documents FOLDER.",
            )
        docs = Path(documents).resolve()
        if not docs.is_dir():
            raise DatasetError(f"{docs} is not a folder.", "Give --documents a folder of files.")
        root = scratch or base.home / "eval" / f"answers-{docs.name}-{_key(docs)}"
    root = Path(root).resolve()
    asked: list[AnswerQuestion] = list(
        answer_set.questions[:limit] if limit else answer_set.questions
    )
    for extra in questions:
        more = load_questions(Path(extra), unanswerable="out_of_corpus")
        asked.extend(more[:limit] if limit else more)

    eval_settings = replace(base, home=root / "home")
    started = time.monotonic()
    with Library(eval_settings) as library:
        report = library.index([docs], progress=progress)
        # As in core/evaluation/beir.py: never answer from another model's vectors or a keyword
        # index still being rebuilt in another format.
        library.models.wait()
        library.keyword.wait_for_merge()
        # And, as there, every run starts from a new library's record of which list was
        # surer (core/retrieval/fusion.py), so that runs can be compared.
        library.retriever.calibration.reset()
        index_s = time.monotonic() - started
        stats = library.status()
        _say(
            log,
            f"answers: {len(asked)} questions over {stats['chunks']} passages "
            f"(indexed in {index_s:.1f} s)",
        )
        by_mode = {mode: _run_mode(library, asked, mode, docs, log) for mode in modes}
        embedding_model = library.status().get("embedding_model")
    return {
        "dataset": path.name,
        "format": answer_set.kind,
        "question_files": [os.fspath(Path(q).resolve()) for q in questions],
        "questions": len(asked),
        "groups": {group: sum(q.group == group for q in asked) for group in GROUPS},
        "documents": os.fspath(docs),
        "files_indexed": report.added + report.updated + report.unchanged,
        "chunks": stats["chunks"],
        "failed": report.failed,
        "index_s": round(index_s, 1),
        "scratch": os.fspath(root),
        "embedding_model": embedding_model,
        "top_k": base.top_k,
        "modes": by_mode,
    }
