"""The library knows its languages: ``lectern status`` gives the mix, and a library mostly
in another language than English is offered the multilingual model, with its reason."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from core.cli.main import main, status_lines
from core.config import Settings
from core.embedding.languages import (
    OFFER_FROM_SHARE,
    LanguageMix,
    language_mix,
    model_advice,
    passage_language,
)
from core.embedding.models import MULTILINGUAL_MODEL_ID
from core.library import Library

ENGLISH = [
    "The membership fee for 2024 is 240 euros per year, payable before the end of March.",
    "Late payments cost an extra 15 euros, and the treasurer sends a reminder by email.",
    "The committee meets on the first Tuesday of every month in the town library.",
]
GERMAN = [
    "Die Heizungsanlage im Keller wird jedes Jahr im Oktober von der Firma Brenner gewartet, "
    "und der Termin wird den Mietern zwei Wochen vorher mitgeteilt.",
    "Für die Nutzung des Gemeinschaftsgartens gilt eine Ruhezeit von 13 bis 15 Uhr, und "
    "Grillen ist nur auf der Terrasse hinter dem Fahrradschuppen erlaubt.",
    "Die Nebenkostenabrechnung für das vergangene Jahr wird bis zum 30. Juni verschickt, "
    "und Nachzahlungen sind innerhalb von vier Wochen fällig.",
]
ARABIC = [
    "يفتح المتحف الوطني أبوابه للزوار من الساعة التاسعة صباحا حتى الخامسة مساء في جميع "
    "أيام الأسبوع ما عدا يوم الجمعة.",
    "تقع المكتبة العامة في وسط المدينة بجانب الحديقة الكبيرة وتضم أكثر من عشرين ألف كتاب "
    "باللغة العربية والإنجليزية.",
]


@pytest.mark.parametrize(
    ("text", "language"),
    [
        (ENGLISH[0], "English"),
        (GERMAN[0], "German"),
        (ARABIC[0], "Arabic script"),
        (
            "Членский взнос на 2024 год составляет 240 евро и оплачивается до конца марта.",
            "Cyrillic script (Russian and others)",
        ),
        (
            "La cotisation pour 2024 est de 240 euros par an, à payer avant la fin du mois de mars.",
            "French",
        ),
        ("2024年の会費は年間240ユーロで、3月末までにお支払いください。", "Japanese"),
        ("Table 3: 12.5 | 13.1 | 14.0", None),
    ],
)
def test_each_passage_gets_its_language_or_script(text: str, language: str | None) -> None:
    assert passage_language(text) == language


def test_the_offer_follows_the_share_of_other_languages() -> None:
    mostly_english = language_mix(ENGLISH * 9 + GERMAN[:1])  # 1 in 28 German
    assert mostly_english.non_english < OFFER_FROM_SHARE
    assert model_advice(mostly_english, None) is None
    german = language_mix(ENGLISH + GERMAN * 2)
    advice = model_advice(german, "sentence-transformers/all-MiniLM-L6-v2")
    assert advice is not None and advice.model == MULTILINGUAL_MODEL_ID
    assert "67 % of your passages are in German" in advice.message
    assert model_advice(german, MULTILINGUAL_MODEL_ID) is None  # already in use
    assert model_advice(LanguageMix((), 0), None) is None  # nothing indexed yet


def _write(folder: Path, texts: list[str], stem: str) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for i, text in enumerate(texts):
        (folder / f"{stem}-{i}.txt").write_text(text + "\n", encoding="utf-8")


def test_status_gives_the_mix_and_the_offer_for_a_fresh_library(
    tmp_path: Path, lectern_home: Path, embedder, capsys: pytest.CaptureFixture[str]
) -> None:
    docs = tmp_path / "docs"
    _write(docs / "english", ENGLISH, "en")
    _write(docs / "german", GERMAN, "de")
    _write(docs / "arabic", ARABIC, "ar")
    with Library(Settings(home=lectern_home), embedder=embedder) as library:
        assert library.index([docs]).added == 8
        status = library.status()
    shares = status["languages"]["shares"]
    assert set(shares) == {"English", "German", "Arabic script"}
    assert shares["German"] > shares["Arabic script"] > 0
    assert status["model_advice"]["model"] == MULTILINGUAL_MODEL_ID
    lines = status_lines(status)
    assert any(line.startswith("Languages: ") and "German" in line for line in lines)
    assert any("multilingual model" in line for line in lines)
    assert any(MULTILINGUAL_MODEL_ID in line and "settings.json" in line for line in lines)

    assert main(["status", "--json"]) == 0
    printed = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert printed["languages"]["sampled"] == status["languages"]["sampled"]


def test_an_english_library_is_not_offered_a_model(
    tmp_path: Path, lectern_home: Path, embedder
) -> None:
    _write(tmp_path / "docs", ENGLISH, "en")
    with Library(Settings(home=lectern_home), embedder=embedder) as library:
        library.index([tmp_path / "docs"])
        status = library.status()
    assert status["languages"]["shares"] == {"English": 1.0}
    assert status["model_advice"] is None
    assert not any("multilingual" in line for line in status_lines(status))
