"""The multilingual embedding option: it finds what MiniLM cannot, and a library built
with one model is never mixed with another (real models, real files, real DuckDB)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from core.config import Settings
from core.embedding.models import (
    DEFAULT_MODEL_ID,
    MULTILINGUAL_MODEL_ID,
    load_embedder,
    reads_script_of,
)
from core.errors import ModelLoadError
from core.library import Library
from tests.helpers import write_files

RUSSIAN = {
    "baikal.md": "# Байкал\n\nБайкал — самое глубокое озеро на планете, глубже 1600 метров.\n",
    "hedgehog.md": "# Ежи\n\nЕжи зимой впадают в спячку и живут за счёт осеннего жира.\n",
    "laptop.md": "# Ноутбук\n\nЕсли ноутбук не включается, проверьте зарядное устройство.\n",
}


def _folder(tmp_path: Path) -> Path:
    return write_files(tmp_path / "docs", RUSSIAN)


def test_multilingual_model_finds_a_paraphrased_russian_question(
    tmp_path: Path, lectern_home: Path
) -> None:
    folder = _folder(tmp_path)
    settings = Settings(home=lectern_home, embedding_model=MULTILINGUAL_MODEL_ID)
    with Library(settings) as library:
        library.index([folder])
        hits = library.search("Что делают колючие зверьки в холодное время года?", mode="dense")
        assert Path(hits[0].path).name == "hedgehog.md"
        assert library.status()["embedding_model"] == MULTILINGUAL_MODEL_ID


def test_changing_the_model_reembeds_everything_never_mixing(
    tmp_path: Path, lectern_home: Path
) -> None:
    folder = _folder(tmp_path)
    with Library(Settings(home=lectern_home, embedding_model=MULTILINGUAL_MODEL_ID)) as library:
        first = library.index([folder])
        assert first.chunks_embedded == 3
    with Library(Settings(home=lectern_home)) as library:
        # The old model answers until every chunk is re-embedded in the background, then
        # the library switches (tests/indexing/test_model_switch.py): none of the old vectors is kept.
        assert library.models.wait(timeout=300)
        assert library.status()["embedding_model"] == DEFAULT_MODEL_ID
        assert library.index().chunks_embedded == 0
        assert library.status()["chunks"] == 3
        rows = (
            library.db.cursor()
            .execute("SELECT coalesce(context, '') || chr(10) || text, embedding FROM chunks")
            .fetchall()
        )
        fresh = load_embedder().embed([text.lstrip() for text, _ in rows])
        for (_, blob), expected in zip(rows, fresh, strict=True):
            assert float(np.frombuffer(blob, dtype=np.float32) @ expected) > 0.999
        hits = library.search("Байкал", mode="dense", k=3)
        assert sorted(Path(h.path).name for h in hits) == sorted(RUSSIAN)


def test_an_unknown_model_is_refused_with_the_choices() -> None:
    with pytest.raises(ModelLoadError) as caught:
        load_embedder("some/other-model")
    assert MULTILINGUAL_MODEL_ID in (caught.value.hint or "")


def test_scripts_a_model_reads() -> None:
    assert reads_script_of(DEFAULT_MODEL_ID, "How deep is Lake Baikal? (1,642 m)")
    assert reads_script_of(DEFAULT_MODEL_ID, "Wie tief ist der Baikalsee, über 1600 Meter?")
    assert not reads_script_of(DEFAULT_MODEL_ID, "Какое озеро самое глубокое?")
    assert not reads_script_of(DEFAULT_MODEL_ID, "ما أعلى قمة في جبال الأطلس؟")
    assert reads_script_of(DEFAULT_MODEL_ID, "Lake Байкал depth")  # mostly Latin letters
    assert reads_script_of(DEFAULT_MODEL_ID, "2024-05-01 / 17")  # no letters at all
    assert reads_script_of(MULTILINGUAL_MODEL_ID, "Какое озеро самое глубокое?")


def test_english_model_answers_a_russian_question_by_keyword(
    tmp_path: Path, lectern_home: Path, embedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    """MiniLM's meaning lists for a Russian question are noise: hybrid is the keyword list
    (other inflections of its words found by Russian stemming), and the meaning lists are
    asked only when no passage holds the question's words."""
    folder = _folder(tmp_path)
    asked: list[str] = []
    real = embedder.embed_query
    real_with_states = embedder.query_with_states

    def counting(texts: list[str]) -> np.ndarray:
        asked.extend(texts)
        return real(texts)

    def counting_with_states(text: str) -> tuple[np.ndarray, np.ndarray]:
        asked.append(text)  # a hybrid search's question, with its word pieces
        return real_with_states(text)

    # The English model given: a new library of Russian files would start with e5 itself.
    with Library(Settings(home=lectern_home), embedder=embedder) as library:
        library.index([folder])
        monkeypatch.setattr(embedder, "embed_query", counting)
        monkeypatch.setattr(embedder, "query_with_states", counting_with_states)
        question = "Когда ежа клонит в спячку?"
        hybrid = library.search(question, mode="hybrid")
        assert [h.chunk_id for h in hybrid] == [
            h.chunk_id for h in library.search(question, mode="bm25")
        ]
        assert Path(hybrid[0].path).name == "hedgehog.md"
        assert question not in asked
        paraphrase = "Чем заняты колючие звери холодами?"  # no word of it in any passage
        assert library.search(paraphrase, mode="bm25") == []
        assert library.search(paraphrase, mode="hybrid")
        assert paraphrase in asked
