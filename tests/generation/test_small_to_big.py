"""Small-to-big (core/generation/widen.py): the answer reads the passage found widened to
its neighbouring chunks of the same section, and its citations still point at the exact
sentence, as document offsets.

The document below is one section the chunker cuts in two: the first half is all about
the Harwick lighthouse and its keeper in 1887, so a question about them finds it; the
keeper's name is only in the second half. With k=1 only the first half is a source, so
the name reaches the answer only through widening.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from core.citation_marks import strip_citations
from core.config import Settings
from core.generation.citations import SpanFinder, to_spans, verify_answer
from core.generation.prompt import fit_prompt
from core.generation.qa import MODEL_UNCHECKED, DoneEvent, SourcesEvent, ask
from core.generation.widen import prompt_room, widen, widen_for_prompt
from core.library import Library
from core.llm import OllamaClient, OpenAICompatClient
from core.records import Hit
from core.store.lookup import chunk_neighbours
from tests.fake_ollama import FakeOllama, Messages, sources_in

QUESTION = "Who was the keeper of the Harwick lighthouse in 1887?"
NAME = "Tobias Grell"
FIRST_HALF = (
    "The Harwick lighthouse stands on the northern rock of Harwick harbour. "
    "The Harwick lighthouse was built of grey granite in 1861 and painted white in 1870. "
    "Ships entering Harwick harbour at night steer by the Harwick lighthouse beam. "
    "The lamp of the Harwick lighthouse burned colza oil until 1880 and paraffin after. "
    "The lighthouse keeper lived in a cottage at the foot of the tower with his family. "
    "Each evening the keeper climbed the one hundred and twelve steps to light the lamp. "
    "The keeper of the Harwick lighthouse wrote the weather in a logbook every four hours. "
    "In the great storm of 1887 the Harwick lighthouse keeper kept the lamp burning for "
    "three nights without sleep. "
    "The harbour board praised the keeper of the Harwick lighthouse in its report of 1887. "
    "The Harwick lighthouse keeper in 1887 was a man whose name the harbour ledger records."
)
SECOND_HALF = (
    f"His name was {NAME}, and he kept the light for forty years. "
    "The fish market opens on the quay at five in the morning from March to October. "
    "Herring, mackerel and crab are landed by the small boats of the inner basin. "
    "The town band plays on the green on Sunday afternoons in the summer months. "
    "A ferry crosses to the island twice a day when the tide allows it. "
    "The old customs house now holds a museum of nets, ropes and ship models. "
    "Visitors walk the cliff path to the bay of seals south of the town. "
    "The parish church has a clock that was made by a watchmaker from the county town. "
    "The railway reached the town in 1874 and brought visitors from the cities. "
    "Gardens behind the harbour grow apples, plums and late summer roses."
)


def write_document(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "harwick.txt"
    path.write_text(f"Harbour notes\n\n{FIRST_HALF} {SECOND_HALF}\n", encoding="utf-8")
    return path


def found(library: Library) -> Hit:
    """The passage retrieval finds for the question: the first half, without the name."""
    hits = library.search(QUESTION, k=1)
    assert hits and "Harwick lighthouse keeper in 1887" in hits[0].text
    assert NAME not in hits[0].text  # the chunker put the name in the next chunk
    return hits[0]


@pytest.fixture()
def harbour(library: Library, tmp_path: Path) -> Library:
    library.index([write_document(tmp_path / "docs").parent])
    return library


# --- the widening itself -----------------------------------------------------------------


def test_a_hit_widens_to_its_neighbour_with_document_offsets(harbour: Library) -> None:
    hit = found(harbour)
    document = harbour.files.text(hit.document_id)
    [wide] = widen(harbour.db, [hit], room=10_000)
    assert wide.chunk_id == hit.chunk_id and wide.document_id == hit.document_id
    assert wide.start <= hit.start and wide.end > hit.end
    assert wide.text == document[wide.start : wide.end]
    assert hit.text in wide.text and NAME in wide.text

    # A citation span found in the widened text is a span of the document: the sentence
    # that names the keeper, in the second chunk.
    sentence = f"His name was {NAME}, and he kept the light for forty years."
    at = wide.text.index(sentence)
    [span] = to_spans(wide, [(at, at + len(sentence))], None)
    assert span.start >= hit.end and document[span.start : span.end] == span.text == sentence


def test_widening_stays_within_the_room(harbour: Library) -> None:
    hit = found(harbour)
    [neighbour] = [
        p
        for p in chunk_neighbours(harbour.db, [hit.chunk_id], 1)[hit.chunk_id]
        if p.chunk_id != hit.chunk_id
    ]
    grows_by = max(hit.end, neighbour.end) - min(hit.start, neighbour.start) - len(hit.text)
    assert widen(harbour.db, [hit], room=grows_by - 1) == [hit]
    [wide] = widen(harbour.db, [hit], room=grows_by)
    assert len(wide.text) == len(hit.text) + grows_by
    # A source widened before comes back to its own chunk when there is no room now.
    assert widen(harbour.db, [wide], room=0) == [hit]


def test_a_chunk_that_is_a_source_of_its_own_is_not_read_twice(harbour: Library) -> None:
    hit = found(harbour)
    [neighbour] = [
        p
        for p in chunk_neighbours(harbour.db, [hit.chunk_id], 1)[hit.chunk_id]
        if p.chunk_id != hit.chunk_id
    ]
    document = harbour.files.text(hit.document_id)
    other = replace(
        hit,
        chunk_id=neighbour.chunk_id,
        start=neighbour.start,
        end=neighbour.end,
        text=document[neighbour.start : neighbour.end],
    )
    assert widen(harbour.db, [hit, other], room=10_000) == [hit, other]


def test_widening_never_crosses_a_heading(library: Library, tmp_path: Path) -> None:
    folder = tmp_path / "notes"
    folder.mkdir()
    (folder / "harwick.md").write_text(
        f"# Harbour notes\n\n## The lighthouse\n\n{FIRST_HALF}\n\n## The town\n\n{SECOND_HALF}\n",
        encoding="utf-8",
    )
    library.index([folder])
    hit = library.search(QUESTION, k=1)[0]
    assert hit.heading_path[-1] == "The lighthouse"
    [same] = widen(library.db, [hit], room=10_000)
    assert NAME not in same.text and same.text == hit.text


def test_the_widened_prompt_fits_as_the_narrow_one_did(harbour: Library) -> None:
    hit = found(harbour)
    roomy = widen_for_prompt(
        harbour.db,
        QUESTION,
        [hit],
        context_length=4096,
        sets_num_ctx=False,
        answer_tokens=1024,
    )
    assert NAME in roomy[0].text
    prompt = fit_prompt(QUESTION, roomy, context_length=4096, sets_num_ctx=False)
    assert prompt.hits == tuple(roomy) and not prompt.dropped
    # A context that only just holds the passage as found leaves no room to widen.
    narrow = fit_prompt(QUESTION, [hit], context_length=4096, sets_num_ctx=False)
    tight = narrow.estimated_tokens + 1024 + 4
    assert (
        prompt_room(QUESTION, [hit], context_length=tight, sets_num_ctx=False, answer_tokens=1024)
        == 0
    )
    assert widen_for_prompt(
        harbour.db,
        QUESTION,
        [hit],
        context_length=tight,
        sets_num_ctx=False,
        answer_tokens=1024,
    ) == [hit]


# --- through ask, with the setting ---------------------------------------------------------


def _quote_the_name(messages: Messages) -> str:
    """Answer with the source sentence that names the keeper, citing [1]."""
    for source in sources_in(messages)[:1]:
        for sentence in source.split(". "):
            if NAME in sentence:
                return f"{sentence.strip().rstrip('.')}. [1]"
    return "The documents do not contain the answer to this question."


@pytest.mark.parametrize("small_to_big", [True, False])
def test_ask_sends_the_widened_passage_and_cites_the_exact_sentence(
    harbour: Library, fake_ollama: FakeOllama, small_to_big: bool
) -> None:
    harbour.settings_store.update(small_to_big=small_to_big)
    fake_ollama.answer = _quote_the_name
    events = list(ask(harbour, QUESTION, client=OllamaClient(fake_ollama.url), store=False, k=1))
    done = events[-1]
    assert isinstance(done, DoneEvent)
    [sent] = sources_in(fake_ollama.last_chat.messages)
    assert ("Harwick lighthouse keeper in 1887" in sent) and ((NAME in sent) == small_to_big)
    if not small_to_big:
        assert done.mode == "declined"
        return
    source = [e for e in events if isinstance(e, SourcesEvent)][-1].hits[0]
    document = harbour.files.text(source.document_id)
    assert source.text == document[source.start : source.end]
    [citation] = done.citations
    assert citation.hit == source and citation.spans
    for span in citation.spans:
        assert document[span.start : span.end] == span.text
    assert NAME in citation.quote and citation.spans[0].start >= found(harbour).end


# --- with a real model ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def real_library(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Library]:
    from core.embedding.models import load_embedder

    root = tmp_path_factory.mktemp("small-to-big")
    settings = Settings(home=root / "home", small_to_big=True)
    lib = Library(settings, embedder=load_embedder())
    lib.index([write_document(root / "docs").parent])
    yield lib
    lib.close()


@pytest.mark.llm
def test_a_real_model_reads_both_halves_and_its_citations_are_document_spans(
    real_library: Library,
) -> None:
    from bench.llm_server import LLMServer

    with LLMServer(ctx=4096) as server:
        client = OpenAICompatClient(server.url, prompt_timeout=600.0)
        events = list(ask(real_library, QUESTION, client=client, store=False, k=1))
        client.close()
    done = events[-1]
    assert isinstance(done, DoneEvent), done
    print(json.dumps({"answer": done.answer, "timings": done.timings}))
    source = [e for e in events if isinstance(e, SourcesEvent)][-1].hits[0]
    document = real_library.files.text(source.document_id)
    # Both halves went into the prompt, as one passage of the document.
    assert "Harwick lighthouse keeper in 1887" in source.text and NAME in source.text
    assert source.text == document[source.start : source.end]
    # Uncited, the model's text follows the quote (issue 44); its own words are after the label.
    quoted = any(w.kind == "quoted_first" for w in done.warnings)
    assert done.mode in ("generated", "declined") or quoted, (done.answer, done.warnings)
    if done.mode == "declined":
        return  # a refusal cites nothing; the widened passage was checked above
    own = done.answer.partition(MODEL_UNCHECKED)[2] if quoted else done.answer
    citations = () if quoted else done.citations
    if not citations:
        # A 135M model often states the fact without its [1] (SmolLM2 did here, naming
        # the keeper): its own sentence, cited, goes through the same check ask makes.
        answer = strip_citations(own).rstrip() + " [1]"
        citations = verify_answer(
            answer,
            [source],
            real_library.embedder,
            finder=SpanFinder(
                real_library.embedder, text_of=lambda h: real_library.files.text(h.document_id)
            ),
        ).citations
    assert citations, done.answer
    # Which sentence a 135M model's claim lands on is the model's doing, not Lectern's;
    # that every span is exact text of the widened passage is Lectern's.
    for citation in citations:
        assert citation.hit == source and citation.spans
        for span in citation.spans:
            assert source.start <= span.start < span.end <= source.end
            assert document[span.start : span.end] == span.text
