"""One owner for the settings (core/settings_store.py): a change is checked, saved and told
to whoever follows them, the open library's next search uses it, and a word in
settings.json that a setting does not take is replaced by the default and said."""

from __future__ import annotations

import json
import typing
from pathlib import Path
from typing import Any

import pytest

from core.config import TEXT_CHOICES, FusionName, Settings, load_settings
from core.errors import ConfigError
from core.library import Library
from core.settings_store import SettingsStore

QUERY = "expense limits for travel"


def _told(store: SettingsStore) -> list[tuple[Settings, frozenset[str]]]:
    heard: list[tuple[Settings, frozenset[str]]] = []
    store.subscribe(lambda settings, changed: heard.append((settings, changed)))
    return heard


def test_a_subscriber_is_told_which_settings_changed(tmp_path: Path) -> None:
    store = SettingsStore(Settings(home=tmp_path))
    heard = _told(store)
    later: list[frozenset[str]] = []
    stop = store.subscribe(lambda _settings, changed: later.append(changed))

    now = store.update(top_k=3, fusion="rrf")
    assert heard == [(now, frozenset({"top_k", "fusion"}))] and store.current is now
    assert (load_settings(tmp_path).top_k, load_settings(tmp_path).fusion) == (3, "rrf")

    store.replace(now)  # nothing changed: nothing to tell
    stop()
    store.replace(now.with_changes(index_when="idle"))
    assert [changed for _, changed in heard[1:]] == [frozenset({"index_when"})]
    assert later == [frozenset({"top_k", "fusion"})]  # stopped before the second change


@pytest.mark.parametrize(
    ("change", "said"),
    [
        ({"fusion": "borda"}, '"adaptive" or "rrf"'),
        ({"index_when": "never"}, '"always", "idle" or "share"'),
        ({"candidates": 0}, "a whole number from 1 to 1000"),
    ],
)
def test_a_change_outside_what_a_setting_takes_is_refused_whole(
    tmp_path: Path, change: dict[str, Any], said: str
) -> None:
    store = SettingsStore(Settings(home=tmp_path))
    before, heard = store.current, _told(store)
    with pytest.raises(ConfigError) as refused:
        store.update(top_k=3, **change)
    assert said in refused.value.message and next(iter(change)) in refused.value.message
    assert store.current is before and not heard
    assert not before.settings_path.exists()


def test_a_change_that_cannot_be_saved_holds_for_this_run(tmp_path: Path) -> None:
    store = SettingsStore(Settings(home=tmp_path / "not-made"))
    heard = _told(store)
    with pytest.raises(OSError):
        store.update(top_k=3)
    assert store.current.top_k == 3 and [c for _, c in heard] == [frozenset({"top_k"})]


def test_a_change_through_the_store_is_what_the_librarys_next_search_uses(
    library: Library, sample_folder: Path
) -> None:
    library.index([sample_folder])
    store = library.settings_store
    # Adaptive fusion's scores are not rank-based; reciprocal rank fusion's are at most
    # 2 / (rrf_k + 1), for a document first in both lists.
    assert max(h.score for h in library.search(QUERY, k=10)) > 2 / 61
    store.update(fusion="rrf", rerank=False)
    assert 0 < max(h.score for h in library.search(QUERY, k=10)) <= 2 / 61
    store.update(rrf_k=1000)
    assert 0 < max(h.score for h in library.search(QUERY, k=10)) <= 2 / 1001

    documents = {h.path for h in library.search(QUERY, k=10, mode="dense")}
    store.update(candidates=1)  # one document per list, before fusion
    fewer = {h.path for h in library.search(QUERY, k=10, mode="dense")}
    assert len(documents) == 5 and 0 < len(fewer) < len(documents)

    store.update(index_when="share", index_cpu_share=25)
    throttle = library.indexer.throttle
    assert (throttle.mode, throttle.cpu_share) == ("share", 25)
    assert library.settings is store.current
    saved = load_settings(library.settings.home)
    assert (saved.fusion, saved.rrf_k, saved.candidates) == ("rrf", 1000, 1)


def test_a_library_given_a_store_reads_and_changes_the_settings_there(
    lectern_home: Path, embedder: Any
) -> None:
    store = SettingsStore(Settings(home=lectern_home))
    with Library(store, embedder=embedder) as library:
        assert library.settings_store is store
        store.update(top_k=2)
        assert library.settings is store.current and library.settings.top_k == 2
    store.update(index_when="idle")  # the app's store outlives the library it opened
    assert library.indexer.throttle.mode == "always"


def test_a_word_a_setting_does_not_take_is_replaced_and_said(
    lectern_home: Path, embedder: Any
) -> None:
    (lectern_home / "settings.json").write_text(
        json.dumps({"fusion": "borda", "index_when": 3, "source_order": "edges"}),
        encoding="utf-8",
    )
    settings = load_settings(lectern_home)
    assert (settings.fusion, settings.index_when) == ("adaptive", "always")
    assert settings.source_order == "edges"
    fusion, index_when = settings.replaced
    assert (fusion.name, fusion.given, fusion.used) == ("fusion", "borda", "adaptive")
    assert '"borda", which is not one of "adaptive" or "rrf"' in fusion.message
    assert 'Lectern uses "adaptive" instead' in fusion.message
    assert (index_when.name, index_when.given) == ("index_when", 3)
    with Library(settings, embedder=embedder) as library:
        said = [n.message for n in library.recovery_notices if n.kind == "setting_replaced"]
        assert said == [fusion.message, index_when.message]


def test_every_word_setting_is_a_literal_of_its_words() -> None:
    """The loader and the store check against each setting's declared words, and the
    fusions the retriever knows are those words."""
    from core.retrieval.fusion import FUSIONS

    hints = typing.get_type_hints(Settings)
    assert set(TEXT_CHOICES) == {"fusion", "index_when", "source_order", "followup_rewrite"}
    for name, words in TEXT_CHOICES.items():
        assert words == typing.get_args(hints[name])
        assert getattr(Settings(home=Path()), name) in words
    assert set(FUSIONS) == set(typing.get_args(FusionName))
