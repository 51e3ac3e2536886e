"""A headless end-to-end check of an installation: index a folder, search it, answer.

The packaged app runs this as ``Lectern --self-test DIR`` so a build can be proven on a
machine with no display and no network (the packaging tests do exactly that). It works
on a throw-away data folder, never the user's library, and each step says what it
checked, so a failure names the broken part (the fts extension, the model files, the
parser worker, the LLM server) instead of a stack trace.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from core import __version__
from core.config import Settings, load_settings
from core.errors import LecternError, LLMUnavailableError

if TYPE_CHECKING:
    from core.generation.answer_state import AnswerState
    from core.generation.events import DoneEvent
    from core.library import Library

SEARCH_DEPTH = 5  # the probed document must rank at least this high


@dataclass(frozen=True)
class StepResult:
    name: str
    ok: bool
    detail: str
    seconds: float


@dataclass
class SelfTestReport:
    steps: list[StepResult] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return bool(self.steps) and all(step.ok for step in self.steps)


class StepFailed(Exception):
    """A check whose outcome is wrong (as opposed to one that raised)."""


class StepSkipped(Exception):
    """A check that does not apply on this machine; not a failure (shown as ``skip``)."""


class SelfTest:
    """Runs the steps in order; a failed step stops the ones that depend on it."""

    def __init__(
        self,
        folder: Path,
        *,
        llm_url: str | None = None,
        model: str | None = None,
        question: str | None = None,
        out: TextIO | None = None,
    ) -> None:
        self.folder = folder.expanduser().resolve()
        self.llm_url = llm_url
        self.model = model
        self.question = question
        self.out = out or sys.stdout
        self.report = SelfTestReport()
        self.extra_steps: list[tuple[str, Callable[[], str]]] = []

    # --- plumbing -----------------------------------------------------------------

    def step(self, name: str, check: Callable[[], str]) -> bool:
        started = time.perf_counter()
        mark = "ok  "
        try:
            detail, ok = check(), True
        except StepSkipped as exc:
            detail, ok, mark = str(exc), True, "skip"
        except StepFailed as exc:
            detail, ok = str(exc), False
        except LecternError as exc:
            detail, ok = f"{exc.message} {exc.hint}".strip(), False
        except Exception as exc:  # a self-test reports every failure, whatever raised it
            detail, ok = f"{type(exc).__name__}: {exc}", False
        result = StepResult(name, ok, detail, time.perf_counter() - started)
        self.report.steps.append(result)
        mark = mark if ok else "FAIL"
        print(f"[{mark}] {name} ({result.seconds:.1f} s): {detail}", file=self.out, flush=True)
        return ok

    @contextmanager
    def _data_folder(self) -> Iterator[Path]:
        path = Path(tempfile.mkdtemp(prefix="lectern-selftest-"))
        try:
            yield path
        finally:
            shutil.rmtree(path, ignore_errors=True)

    # --- the run ------------------------------------------------------------------

    def run(self) -> SelfTestReport:
        print(
            f"Lectern {__version__} self-test on {self.folder}"
            f"{' (packaged)' if getattr(sys, 'frozen', False) else ''}",
            file=self.out,
            flush=True,
        )
        if self.step("folder", self._check_folder):
            with self._data_folder() as home:
                settings = load_settings(home)
                if self.llm_url:
                    settings = settings.with_changes(llm_url=self.llm_url)
                self._run_engine(settings)
        # The app's own checks do not depend on the folder: run them whatever happened.
        for name, check in self.extra_steps:
            self.step(name, check)
        verdict = "passed" if self.report.ok else "FAILED"
        print(f"Self-test {verdict}.", file=self.out, flush=True)
        return self.report

    def _run_engine(self, settings: Settings) -> None:
        from core.library import Library

        library: Library | None = None

        def open_library() -> str:
            nonlocal library
            library = Library(settings)
            return f"database and fts extension loaded in {settings.home}"

        if not self.step("open library", open_library):
            return
        assert library is not None
        try:
            if not self.step("embedding model", lambda: _check_embedder(library)):
                return
            self.step("offline mode", lambda: _check_offline_mode(library))
            if not self.step("index", lambda: _index(library, self.folder)):
                return
            if not self.step("search", lambda: _search(library)):
                return
            self.step("answer", lambda: self._answer(library))
        finally:
            library.close()

    def _check_folder(self) -> str:
        if not self.folder.is_dir():
            raise StepFailed(f"{self.folder} is not a folder.")
        files = sum(1 for p in self.folder.rglob("*") if p.is_file())
        if not files:
            raise StepFailed(f"{self.folder} has no files to index.")
        return f"{files} files"

    def _answer(self, library: Library) -> str:
        from core.generation.qa import AnswerState, ask
        from core.llm import make_client

        settings = library.settings
        client = make_client(settings)
        try:
            try:
                installed = [m.name for m in client.list_models()]
            except LLMUnavailableError:
                if self.llm_url:
                    raise  # a server named on the command line must answer
                client.close()
                # Lectern works without a model server: prove the fallback instead.
                raise StepSkipped(
                    f"no model server at {client.url} (answers fall back to quoting "
                    f"documents: {_extractive_answer(library)})"
                ) from None
            model = self.model or _pick_model(settings.llm_model, installed)
            question = self.question or _probe_question(library)
            state = AnswerState.fold(
                ask(library, question, client=client, model=model, store=False)
            )
        finally:
            client.close()
        done = _done(state)
        if done.mode != "generated":
            raise StepFailed(f"Expected a generated answer, got {done.mode!r}: {done.answer!r}")
        if not done.citations:
            raise StepFailed(f"The answer cites no passage: {done.answer!r}")
        first = done.citations[0]
        return (
            f"{model} at {client.url} answered {question!r} with {len(done.citations)} "
            f"citation(s), first in {Path(first.hit.path).name}"
        )


# --- steps --------------------------------------------------------------------------


def _extractive_answer(library: Library) -> str:
    from core.generation.qa import AnswerState, ask

    # A question the library certainly answers: the sentence the search step found (a
    # question about a whole document may rightly be declined by the quoted answer).
    _document_id, _title, sentence = _probe_passage(library)
    question = f"{sentence.rstrip('.!?')}?"
    done = _done(AnswerState.fold(ask(library, question, use_llm=False, store=False)))
    if not done.citations:
        raise StepFailed(f"The quoted answer cites no passage: {done.answer!r}")
    return f"{len(done.citations)} quoted passage(s) for {question!r}"


def _done(state: AnswerState) -> DoneEvent:
    """The answer's end, or the step's failure: its error, or a stream without an end."""
    if state.error is not None:
        error = state.error.error
        raise StepFailed(f"{error.message} {error.hint}".strip())
    if state.done is None:
        raise StepFailed("The answer stream ended without a result.")
    return state.done


def _check_offline_mode(library: Library) -> str:
    # huggingface_hub reads the variable once, at import: the entry point must set it
    # before anything imports transformers, and this checks what the library took in.
    missing = [
        name for name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE") if os.environ.get(name) != "1"
    ]
    if missing:
        raise StepFailed(f"{', '.join(missing)} not set to 1: the model loader could go online.")
    hub = sys.modules.get("huggingface_hub.constants")
    if hub is not None and not getattr(hub, "HF_HUB_OFFLINE", False):
        raise StepFailed("huggingface_hub was imported before offline mode was set.")
    if library.db.extension_downloads_allowed():
        raise StepFailed("DuckDB may download extensions: auto-install or auto-load is on.")
    return "Hugging Face offline mode on; DuckDB extension auto-install off"


def _check_embedder(library: Library) -> str:
    embedder = library.embedder
    vectors = embedder.embed(["The librarian finds the passage.", "Quarterly revenue grew."])
    if vectors.shape != (2, embedder.dim):
        raise StepFailed(f"Unexpected embedding shape {vectors.shape}.")
    similarity = float(vectors[0] @ vectors[1])
    if not -1.0 <= similarity < 0.9:
        raise StepFailed(f"Unrelated sentences scored {similarity:.2f}: the model looks broken.")
    return f"{embedder.model_id}, {embedder.dim} dimensions"


def _index(library: Library, folder: Path) -> str:
    report = library.index([folder])
    indexed = report.added + report.updated + report.unchanged
    detail = (
        f"{indexed} indexed, {report.failed} failed, {report.skipped} skipped, "
        f"{report.chunks_embedded} chunks embedded"
    )
    if not indexed:
        reasons = "; ".join(f"{Path(p).name}: {r}" for p, r in report.failures[:3])
        raise StepFailed(f"Nothing was indexed ({detail}). {reasons}".strip())
    return detail


def _probe_passage(library: Library) -> tuple[int, str, str]:
    """A sentence from the largest indexed document: (document id, title, sentence)."""
    documents = library.files.documents(state="indexed")
    if not documents:
        raise StepFailed("No document is in the index.")
    document = max(documents, key=lambda d: d.chunks)
    text = library.files.text(document.id)
    sentences = [s.strip() for s in re.split(r"(?<=[.!?])\s+", text) if 8 <= len(s.split()) <= 40]
    sentence = sentences[len(sentences) // 2] if sentences else " ".join(text.split()[:20])
    return document.id, document.title, sentence


def _search(library: Library) -> str:
    document_id, title, sentence = _probe_passage(library)
    found = []
    for mode in ("bm25", "dense", "hybrid"):
        hits = library.search(sentence, k=SEARCH_DEPTH, mode=mode)
        ranks = [i for i, hit in enumerate(hits, 1) if hit.document_id == document_id]
        if not ranks:
            raise StepFailed(f"{mode} search did not find {title!r} for a sentence it contains.")
        found.append(f"{mode} #{ranks[0]}")
    return f"{title!r} found: {', '.join(found)}"


def _probe_question(library: Library) -> str:
    _document_id, title, _sentence = _probe_passage(library)
    return f"What does {title} say?"


def _pick_model(configured: str, installed: list[str]) -> str:
    if not installed:
        raise StepFailed("The LLM server has no models installed.")
    wanted = configured if ":" in configured else f"{configured}:latest"
    return wanted if wanted in installed else installed[0]


def run_self_test(
    folder: str | Path,
    *,
    llm_url: str | None = None,
    model: str | None = None,
    question: str | None = None,
    extra_steps: list[tuple[str, Callable[[], str]]] | None = None,
    out: TextIO | None = None,
) -> int:
    """Run the self-test and return the process exit status (0 only if every step passed)."""
    test = SelfTest(
        Path(folder),
        llm_url=llm_url,
        model=model,
        question=question,
        out=out,
    )
    test.extra_steps.extend(extra_steps or [])
    return 0 if test.run().ok else 1
