"""The prompt choices bench/prompt_choices.py measures: source order, dates, the newest
rule and the follow-up rewrite, each a setting that reaches the prompt the server reads."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import pytest

from core.config import Settings, load_settings
from core.errors import ConfigError, DatasetError
from core.evaluation.answers import evaluate_answers, load_questions
from core.generation.llm_order import rerank_messages
from core.generation.prompt import (
    NEWEST_RULE,
    SYSTEM_MESSAGE,
    PromptChoices,
    build_messages,
    layout,
)
from core.generation.qa import DoneEvent, ask
from core.library import Library
from core.llm import OllamaClient
from core.records import Hit
from tests.fake_ollama import FakeOllama, Messages, quote_first_source
from tests.helpers import text_hit

FEES_2021 = "Club fees. The yearly membership fee is 180 euros, paid by bank transfer."
FEES_2024 = "Club fees. The yearly membership fee is 240 euros, paid by bank transfer."
ROTA = "Cleaning rota. Anna cleans the kitchen on Mondays; Piotr takes the stairs on Fridays."


def _hit(n: int) -> Hit:
    return text_hit(f"Passage number {n}.", n, score=1.0 / n)


def _order_in(message: str) -> list[int]:
    return [int(n) for n in re.findall(r"<<source-\w+ n=(\d+)", message)]


def test_edges_puts_the_two_best_sources_first_and_last_keeping_their_numbers() -> None:
    assert layout(6, "edges") == [0, 2, 4, 5, 3, 1]
    assert layout(5, "edges") == [0, 2, 4, 3, 1]
    assert layout(6, "relevance") == list(range(6))
    hits = [_hit(n) for n in range(1, 7)]
    edges = build_messages("Which?", hits, "0badcafe", choices=PromptChoices(order="edges"))
    assert _order_in(edges[1]["content"]) == [1, 3, 5, 6, 4, 2]
    # [n] still names the n-th most relevant source, wherever it stands.
    assert "n=2 " in edges[1]["content"] and "Passage number 2." in edges[1]["content"]
    plain = build_messages("Which?", hits, "0badcafe")
    assert _order_in(plain[1]["content"]) == [1, 2, 3, 4, 5, 6]


def test_dates_can_be_left_out_and_the_newest_rule_is_said_only_when_chosen() -> None:
    hits = [_hit(1), _hit(2)]
    dates = {hits[0].path: "2021-03-02", hits[1].path: "2024-06-11"}
    shown = build_messages("Fee?", hits, "0badcafe", dates)
    assert "date=2021-03-02" in shown[1]["content"] and "date=2024-06-11" in shown[1]["content"]
    assert shown[0]["content"] == SYSTEM_MESSAGE and NEWEST_RULE not in shown[0]["content"]
    hidden = build_messages("Fee?", hits, "0badcafe", dates, PromptChoices(dates=False))
    assert "date=" not in hidden[1]["content"]
    newest = build_messages("Fee?", hits, "0badcafe", dates, PromptChoices(prefer_newest=True))
    assert newest[0]["content"].endswith(NEWEST_RULE)
    # Still the same instructions whatever the request, so a prompt cache keeps them.
    again = build_messages("Other?", hits, "12345678", dates, PromptChoices(prefer_newest=True))
    assert again[0]["content"] == newest[0]["content"]


def test_the_rerank_instructions_are_the_same_for_every_request() -> None:
    hits = [_hit(n) for n in range(1, 4)]
    first, second = rerank_messages("Which?", hits), rerank_messages("Which?", hits)
    assert first[0]["content"] == second[0]["content"]
    tag = re.search(r"Request tag: (\w+)", first[1]["content"])
    assert tag and tag.group(1) not in first[0]["content"]
    assert first[1]["content"].index("Request tag") < first[1]["content"].index("<<source-")


@pytest.mark.parametrize(
    ("setting", "value", "expected"),
    [
        ("source_order", "middle", '"relevance" or "edges"'),
        ("followup_rewrite", "always", '"model" or "keywords"'),
    ],
)
def test_a_wrong_choice_in_settings_is_replaced_naming_the_choices(
    tmp_path: Path, setting: str, value: str, expected: str
) -> None:
    (tmp_path / "settings.json").write_text(json.dumps({setting: value}), encoding="utf-8")
    settings = load_settings(tmp_path)
    assert getattr(settings, setting) == getattr(Settings(home=tmp_path), setting)
    [replaced] = settings.replaced
    assert replaced.name == setting and expected in replaced.message


def test_a_wrong_kind_of_value_in_settings_names_what_it_takes(tmp_path: Path) -> None:
    (tmp_path / "settings.json").write_text(json.dumps({"prefer_newest": "yes"}), encoding="utf-8")
    with pytest.raises(ConfigError) as caught:
        load_settings(tmp_path)
    assert "prefer_newest" in caught.value.message and "true or false" in caught.value.message


def test_a_temperature_out_of_range_is_replaced_and_said(tmp_path: Path) -> None:
    (tmp_path / "settings.json").write_text(
        json.dumps({"answer_temperature": 7, "source_order": "edges"}), encoding="utf-8"
    )
    settings = load_settings(tmp_path)
    assert settings.answer_temperature == Settings().answer_temperature
    assert settings.source_order == "edges"
    assert [r.name for r in settings.replaced] == ["answer_temperature"]


# --- through ask, against the fake server ---------------------------------------------------


@pytest.fixture(scope="module")
def dated_library(tmp_path_factory: pytest.TempPathFactory, embedder) -> Iterator[Library]:
    root = tmp_path_factory.mktemp("choices")
    docs = root / "docs"
    docs.mkdir()
    for name, text, date in (
        ("fees-a.txt", FEES_2024, "2024-06-11"),
        ("fees-b.txt", FEES_2021, "2021-03-02"),
        ("rota.txt", ROTA, "2023-01-01"),
    ):
        (docs / name).write_text(text + "\n", encoding="utf-8")
        stamp = datetime.fromisoformat(date).timestamp()
        os.utime(docs / name, (stamp, stamp))
    library = Library(Settings(home=root / "home"), embedder=embedder)
    assert library.index([docs]).added == 3
    yield library
    library.close()


def _done(events: list) -> DoneEvent:
    assert isinstance(events[-1], DoneEvent), events[-1]
    return events[-1]


def test_the_settings_reach_the_prompt_the_server_reads(
    dated_library: Library, fake_ollama: FakeOllama
) -> None:
    original = dated_library.settings
    client = OllamaClient(fake_ollama.url)
    try:
        dated_library.settings_store.replace(
            original.with_changes(
                source_order="edges", source_dates=False, prefer_newest=True, answer_temperature=0.0
            )
        )
        _done(list(ask(dated_library, "What is the yearly membership fee?", client=client)))
        chat = fake_ollama.last_chat
        assert chat.messages[0]["content"].endswith(NEWEST_RULE)
        assert "date=" not in chat.messages[1]["content"]
        placed = _order_in(chat.messages[1]["content"])
        assert len(placed) == 3 and placed == [i + 1 for i in layout(3, "edges")] == [1, 3, 2]
        assert chat.options["temperature"] == 0.0

        dated_library.settings_store.replace(original.with_changes(answer_max_tokens=100))
        _done(list(ask(dated_library, "What is the yearly membership fee?", client=client)))
        assert fake_ollama.last_chat.options["num_predict"] == 100

        dated_library.settings_store.replace(original)
        _done(list(ask(dated_library, "What is the yearly membership fee?", client=client)))
        chat = fake_ollama.last_chat
        assert "date=2024-06-11" in chat.messages[1]["content"]
        assert NEWEST_RULE not in chat.messages[0]["content"]
        assert chat.options["temperature"] == original.answer_temperature
    finally:
        dated_library.settings_store.replace(original)


def test_keywords_rewrite_never_asks_the_model_to_rewrite(
    dated_library: Library, fake_ollama: FakeOllama
) -> None:
    def answer(messages: Messages) -> str:
        if "Standalone question:" in messages[-1]["content"]:
            return "Who cleans the kitchen on Mondays according to the rota?"
        return quote_first_source(messages)

    fake_ollama.answer = answer
    client = OllamaClient(fake_ollama.url)
    original = dated_library.settings
    try:
        for rewrite, asked_to_rewrite in (("keywords", 0), ("model", 1)):
            dated_library.settings_store.replace(original.with_changes(followup_rewrite=rewrite))
            before = len(fake_ollama.requests_to("/api/chat"))
            first = _done(
                list(ask(dated_library, "What does the cleaning rota say?", client=client))
            )
            follow = _done(
                list(
                    ask(
                        dated_library, "Who does the kitchen?", first.conversation_id, client=client
                    )
                )
            )
            rewrites = [
                r
                for r in fake_ollama.requests_to("/api/chat")[before:]
                if "Standalone question:" in r.prompt_text
            ]
            assert len(rewrites) == asked_to_rewrite
            if rewrite == "keywords":
                assert "rota" in follow.question and follow.question.startswith("Who does")
            else:
                assert follow.question == "Who cleans the kitchen on Mondays according to the rota?"
    finally:
        dated_library.settings_store.replace(original)


# --- follow-ups in the answer eval ----------------------------------------------------------


def test_a_follow_up_line_names_its_history(tmp_path: Path) -> None:
    good = tmp_path / "good.jsonl"
    good.write_text(
        json.dumps({"history": ["Who was Rollo?"], "question": "When?", "answers": ["911"]}) + "\n",
        encoding="utf-8",
    )
    [question] = load_questions(good)
    assert question.history == ("Who was Rollo?",)
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"history": "Rollo", "question": "When?", "answers": []}) + "\n")
    with pytest.raises(DatasetError) as caught:
        load_questions(bad)
    assert "line 1" in caught.value.message and "history" in caught.value.message


def test_the_answer_eval_asks_a_follow_up_after_its_history(tmp_path: Path, embedder) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "rota.txt").write_text(ROTA + "\n", encoding="utf-8")
    (docs / "fees.txt").write_text(FEES_2024 + "\n", encoding="utf-8")
    questions = tmp_path / "followups.jsonl"
    rows = [
        {
            "history": ["What does the cleaning rota say?"],
            "question": "Who takes the stairs?",
            "answers": ["Piotr"],
        },
    ]
    questions.write_text("\n".join(json.dumps(r) for r in rows) + "\n", encoding="utf-8")
    report = evaluate_answers(
        questions,
        documents=docs,
        modes=("none",),
        settings=Settings(home=tmp_path / "home"),
        scratch=tmp_path / "scratch",
    )
    answerable = report["modes"]["none"]["groups"]["answerable"]
    assert answerable["questions"] == 1 and answerable["correct"] == 1.0
    # The history was asked first, in the same conversation as the follow-up.
    with Library(Settings(home=tmp_path / "scratch" / "home")) as library:
        assert library.conversations is not None
        [conversation] = library.conversations.list()
        turns = library.conversations.turns(conversation.id)
        assert [t.question for t in turns] == [
            "What does the cleaning rota say?",
            "Who takes the stairs?",
        ]
        assert "rota" in turns[1].standalone_question


def test_keyword_follow_ups_do_not_pile_up_every_earlier_question(dated_library: Library) -> None:
    """Each follow-up borrows the words of the question before it, not of all of them: by
    the fourth question the search query carried the three before it."""
    conversation = None
    asked = [
        "What does the cleaning rota say about the kitchen?",
        "And the stairs?",
        "Who pays the yearly membership fee?",
        "And how?",
    ]
    questions = []
    for question in asked:
        done = _done(list(ask(dated_library, question, conversation, use_llm=False)))
        conversation = done.conversation_id
        questions.append(done.question)
    assert "kitchen" in questions[1]  # a follow-up borrows the question it follows
    assert "fee" in questions[3] and "membership" in questions[3]
    assert "kitchen" not in questions[3] and "rota" not in questions[3]
