"""Chinese and Japanese are keyword-searchable by their characters: those scripts put no
space between words, so a clause was one term and a question never met it (issue 44:
"东北电气2018年第一季度的营业收入是多少？" found nothing by keyword). The words a search
met are lit character by character in the app, as the index matched them.

Real DuckDB files, real fts, documents written through the store layer."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.text import content_words
from desktop.rich import term_key, term_ranges
from tests.store.test_keyword_scripts import found, keyword_over

PASSAGES = [
    ["本公司2018年第一季度营业收入为4,755,785.11元，较上年同期增长12%。"],
    ["报告期末普通股股东总数为79,053户。"],
    ["株式会社極洋の当期純利益は1,269百万円でした。"],
    ["Hedgehogs hibernate through the winter in nests of dry leaves."],
]


@pytest.fixture()
def keyword(tmp_path: Path):
    yield from keyword_over(tmp_path, PASSAGES)


def test_a_chinese_question_finds_its_passage_by_keyword(keyword) -> None:
    kw, passage_of = keyword
    assert found(kw, passage_of, "2018年第一季度的营业收入是多少？")[0] == 0
    assert found(kw, passage_of, "报告期末公司普通股股东总数有多少户？")[0] == 1


def test_a_japanese_question_finds_its_passage_by_keyword(keyword) -> None:
    kw, passage_of = keyword
    assert found(kw, passage_of, "極洋の純利益はいくらですか")[0] == 2


def test_english_is_searched_as_before(keyword) -> None:
    kw, passage_of = keyword
    assert found(kw, passage_of, "hibernating hedgehog") == [3]


def test_the_characters_met_are_the_words_lit_and_compared() -> None:
    text = PASSAGES[0][0]
    lit = {text[s:e] for s, e in term_ranges(text, {term_key("营"), term_key("业")})}
    assert lit == {"营", "业"}
    # The quoted answer's keyword overlap counts them too.
    assert {"营", "业", "收", "入"} <= set(content_words(text))
