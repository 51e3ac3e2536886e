"""The model server kinds as one table: each backend says everything that differs between
kinds (names, hints, addresses), and nothing else in the product asks which kind it has.

Adding a kind is its module and one row of BACKENDS; this file then checks it too.
"""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path

import pytest

from core.config import Settings, load_settings
from core.errors import ConfigError, LLMUnavailableError
from core.generation.events import DoneEvent, SourcesEvent, TokenEvent, WarningEvent, WarningKind
from core.generation.session import AnswerSession, fallback_warning
from core.llm import BACKENDS, Backend, backend_for, make_client
from core.llm.errors import ErrorMapper

REPO = Path(__file__).resolve().parents[2]
KEYS = tuple(BACKENDS)


@pytest.fixture()
def home(lectern_home: Path) -> Path:
    return lectern_home


# --- every row of the table -------------------------------------------------------------


@pytest.mark.parametrize("key", KEYS)
def test_every_backend_says_what_differs(key: str, home: Path) -> None:
    backend = BACKENDS[key]
    assert isinstance(backend, Backend) and backend.key == key and backend_for(key) is backend
    for words in (backend.display_name, backend.server_name, backend.short_name):
        assert isinstance(words, str) and words.strip()
    assert backend.title_name[0].isupper() and backend.title_short_name[0].isupper()
    assert len(backend.start_hint) > 20
    assert isinstance(backend.can_download_models, bool)
    assert isinstance(backend.takes_api_key, bool)
    # A server one installs has a place to get it and a command that starts it.
    assert bool(backend.install_url) == bool(backend.serve_command)
    if backend.install_url:
        assert backend.install_url.startswith("https://")
    # A kind that downloads models says the command; one that cannot, says none.
    assert bool(backend.pull_command("llama3.2")) == backend.can_download_models
    assert "http://127.0.0.1:9" in backend.not_running("http://127.0.0.1:9")
    assert backend.not_found_hint("llama3.2")
    assert backend.url_placeholder(Settings(home=home, llm_kind=key))


@pytest.mark.parametrize("key", KEYS)
def test_every_backend_builds_its_own_client_and_words_its_errors(key: str, home: Path) -> None:
    backend = BACKENDS[key]
    client = make_client(Settings(home=home, llm_kind=key, llm_url="http://127.0.0.1:9"))
    try:
        assert client.kind == key
        assert getattr(client, "backend", None) is backend
    finally:
        client.close()
    errors = ErrorMapper(backend, "http://127.0.0.1:9")
    down = errors.unavailable()
    assert down.message == backend.not_running("http://127.0.0.1:9") + "."
    assert down.hint == backend.start_hint
    assert errors.not_found("llama3.2").hint == backend.not_found_hint("llama3.2")
    assert errors.server_name == backend.title_name


def test_no_server_is_said_as_before() -> None:
    """The sentences people know (and scripts match) survived the move into the table."""
    url = "http://127.0.0.1:9"
    assert BACKENDS["ollama"].not_running(url) == f"Ollama is not running at {url}"
    assert BACKENDS["openai"].not_running(url) == f"No model server is running at {url}"


@pytest.mark.parametrize("key", KEYS)
def test_settings_accept_every_kind_in_the_table(key: str, home: Path) -> None:
    (home / "settings.json").write_text(json.dumps({"llm_kind": key}), encoding="utf-8")
    assert load_settings(home).llm_kind == key


def test_an_unknown_kind_is_refused_naming_the_kinds_there_are(home: Path) -> None:
    listed = " or ".join(repr(k) for k in KEYS) if len(KEYS) == 2 else None
    with pytest.raises(ConfigError) as raised:
        backend_for("llamafile")
    assert "'llamafile'" in raised.value.message
    if listed:
        assert raised.value.message.endswith(f"use {listed}.")
    with pytest.raises(ConfigError):
        make_client(Settings(home=home, llm_kind="llamafile"))
    # In settings.json: the default instead, said with the kinds there are.
    (home / "settings.json").write_text(json.dumps({"llm_kind": "llamafile"}), encoding="utf-8")
    settings = load_settings(home)
    assert settings.llm_kind == Settings(home=home).llm_kind
    [replaced] = settings.replaced
    assert "'llm_kind'" in replaced.message
    assert all(f'"{key}"' in replaced.message for key in KEYS)


# --- the URL rules, as they were before the table ---------------------------------------

# (kind, llm_url, OLLAMA_HOST, the address resolved, the client's URL)
URL_RULES = [
    ("ollama", "", None, "http://127.0.0.1:11434", "http://127.0.0.1:11434"),
    ("ollama", "", "10.0.0.5", "http://10.0.0.5:11434", "http://10.0.0.5:11434"),
    ("ollama", "", "localhost:8080", "http://localhost:8080", "http://localhost:8080"),
    ("ollama", "", "http://[::1]", "http://[::1]:11434", "http://[::1]:11434"),
    ("ollama", "127.0.0.1:9999", "10.0.0.5", "http://127.0.0.1:9999", "http://127.0.0.1:9999"),
    ("ollama", "http://0.0.0.0:11434/", None, "http://0.0.0.0:11434/", "http://127.0.0.1:11434"),
    ("openai", "", "10.0.0.5", "http://127.0.0.1:11434/v1", "http://127.0.0.1:11434/v1"),
    ("openai", "http://localhost:1234", None, "http://localhost:1234", "http://localhost:1234/v1"),
    ("openai", "127.0.0.1:8080/v1", None, "http://127.0.0.1:8080/v1", "http://127.0.0.1:8080/v1"),
]


@pytest.mark.parametrize(("kind", "url", "env", "resolved", "client_url"), URL_RULES)
def test_url_rules_resolve_as_before(
    kind: str,
    url: str,
    env: str | None,
    resolved: str,
    client_url: str,
    home: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    if env is not None:
        monkeypatch.setenv("OLLAMA_HOST", env)
    settings = Settings(home=home, llm_kind=kind, llm_url=url)
    assert BACKENDS[kind].resolve_url(settings) == resolved
    assert settings.resolved_llm_url == resolved
    client = make_client(settings)
    try:
        assert client.url == client_url
    finally:
        client.close()
    # Another process (the socket's server) given the resolved address, whatever its own
    # environment, builds the same client: what `lectern ask` sends it.
    sent = settings.resolved_llm_url
    monkeypatch.delenv("OLLAMA_HOST", raising=False)
    there = make_client(replace(settings, llm_url=sent))
    try:
        assert there.url == client_url
    finally:
        there.close()


def test_addresses_are_shown_as_configured(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ollama, openai = BACKENDS["ollama"], BACKENDS["openai"]
    assert ollama.address(Settings(home=home)) == "http://127.0.0.1:11434"
    assert openai.address(Settings(home=home, llm_kind="openai")) == ""
    assert ollama.url_placeholder(Settings(home=home, llm_url="x:1")) == (
        "Default: http://127.0.0.1:11434"
    )
    monkeypatch.setenv("OLLAMA_HOST", "127.0.0.1:abc")
    assert ollama.address(Settings(home=home)) == "127.0.0.1:abc"  # never raises
    with pytest.raises(ConfigError, match="OLLAMA_HOST"):
        _ = Settings(home=home).resolved_llm_url


@pytest.mark.parametrize("key", KEYS)
def test_a_malformed_address_names_the_setting(key: str, home: Path) -> None:
    settings = Settings(home=home, llm_kind=key, llm_url="http://[::1")
    with pytest.raises(ConfigError, match=r"llm_url in settings\.json"):
        BACKENDS[key].resolve_url(settings)


def test_only_ollama_says_another_server_is_not_ollama() -> None:
    foreign = BACKENDS["ollama"].foreign_server("http://h:1", 404, "File Not Found")
    assert isinstance(foreign, LLMUnavailableError) and "is not Ollama" in foreign.message
    assert '"openai"' in foreign.hint
    assert BACKENDS["ollama"].foreign_server("http://h:1", 404, "model 'x' not found") is None
    assert BACKENDS["openai"].foreign_server("http://h:1", 404, "File Not Found") is None


# --- nothing else asks which kind it has -------------------------------------------------


def _key_comparisons(text: str) -> list[str]:
    keys = "|".join(re.escape(k) for k in KEYS)
    literal = rf"""(?P<q>["'])(?:{keys})(?P=q)"""
    patterns = [
        rf"(?:==|!=)\s*{literal}",  # kind == "ollama"
        rf"{literal}\s*(?:==|!=)",  # "ollama" == kind
        rf"\bin\s*[\(\[\{{][^\)\]\}}]*{literal}",  # kind in ("ollama", ...)
        rf"\bcase\s+{literal}",  # match kind: case "ollama"
    ]
    return [m.group(0) for p in patterns for m in re.finditer(p, text)]


def test_the_comparison_finder_finds_comparisons() -> None:
    found = _key_comparisons(
        "a = x if kind == 'ollama' else y\nif \"openai\" != k: pass\nif k in ('x', \"ollama\"): pass"
    )
    assert len(found) == 3
    assert not _key_comparisons('llm_kind: str = "ollama"\nkind = "openai"')


def test_no_module_compares_against_a_backend_key() -> None:
    offenders = []
    for folder in ("core", "desktop"):
        for path in sorted((REPO / folder).rglob("*.py")):
            for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
                if _key_comparisons(line):
                    offenders.append(f"{path.relative_to(REPO)}:{number}: {line.strip()}")
    assert not offenders, "ask the backend (core/llm/backends.py):\n" + "\n".join(offenders)


# --- one answer session, one set of warning kinds ---------------------------------------


def test_warning_kinds_are_their_strings_on_the_wire() -> None:
    event = WarningEvent("The model server is down.", WarningKind.LLM_UNAVAILABLE)
    assert json.dumps(event.to_json()) == json.dumps(
        {"kind": "llm_unavailable", "message": "The model server is down."}
    )
    assert WarningKind("sources_trimmed") is WarningKind.SOURCES_TRIMMED
    assert WarningEvent("x", "context").kind == WarningKind.CONTEXT


def test_a_bad_address_is_one_fallback_worded_by_its_front_end(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OLLAMA_HOST", "127.0.0.1:abc")
    settings = Settings(home=home)
    cli = AnswerSession(settings)
    assert cli.client is None and not cli.use_llm and cli.problem is not None
    assert cli.problem.kind == WarningKind.LLM_CONFIG
    assert "(OLLAMA_HOST) is not valid" in cli.problem.message
    assert "instead of a written answer" in cli.problem.message

    app = AnswerSession(
        settings,
        config_kind=WarningKind.LLM_UNAVAILABLE,
        describe=lambda exc: (exc.message, "Open Settings."),
    )
    assert app.problem is not None and app.problem.kind == WarningKind.LLM_UNAVAILABLE
    assert app.problem.message.endswith("instead of a written answer. Open Settings.")

    off = AnswerSession(settings, use_llm=False)
    assert off.client is None and off.problem is None


def test_the_problem_is_said_with_the_warnings_and_first_in_the_done_event(home: Path) -> None:
    session = AnswerSession(Settings(home=home, llm_url="http://[::1"))
    problem = session.problem
    assert problem is not None
    later = WarningEvent("Nothing matches.", WarningKind.NO_SOURCES)
    done = DoneEvent("x", "extractive", (), (later,))
    events = list(session.amend([SourcesEvent(()), TokenEvent("x"), later, done]))
    assert events[:3] == [SourcesEvent(()), TokenEvent("x"), problem]
    assert events[3] is later
    assert isinstance(events[4], DoneEvent) and events[4].warnings == (problem, later)


def test_a_server_that_fails_falls_back_with_the_same_words() -> None:
    down = LLMUnavailableError("Ollama is not running at http://127.0.0.1:9.", "Start it.")
    warning = fallback_warning(down)
    assert warning.kind == WarningKind.LLM_UNAVAILABLE
    assert warning.message == (
        "Ollama is not running at http://127.0.0.1:9. These are sentences extracted from "
        "your documents instead of a written answer. Start it."
    )


def test_a_new_kind_of_server_is_one_module_and_one_row(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What adding a kind of model server takes: its Backend and client (here LM Studio as
    a kind of its own, its own default port and words) and a row in the table. Nothing
    else changes, and the settings, the client, the errors and the fallback follow."""
    from types import MappingProxyType

    from core.llm import backends as table
    from core.llm.base import ServerSettings
    from core.llm.openai import OpenAIBackend, OpenAICompatClient
    from core.llm.urls import check_server_url

    class LMStudioBackend(OpenAIBackend):
        key = "lmstudio"
        display_name = "LM Studio"
        server_name = "LM Studio"
        short_name = "LM Studio"
        start_hint = "Open LM Studio and start its server (the Developer tab), then try again."

        def resolve_url(self, settings: ServerSettings) -> str:
            if settings.llm_url.strip():
                return check_server_url(settings.llm_url, "llm_url in settings.json")
            return "http://127.0.0.1:1234/v1"

        def build_client(self, settings: ServerSettings, **timeouts: float) -> OpenAICompatClient:
            return LMStudioClient(self.resolve_url(settings), settings.llm_api_key, **timeouts)

        def not_running(self, url: str) -> str:
            return f"LM Studio's server is not running at {url}"

    lmstudio = LMStudioBackend()

    class LMStudioClient(OpenAICompatClient):
        backend = lmstudio
        kind = lmstudio.key

    rows = MappingProxyType({**table.BACKENDS, lmstudio.key: lmstudio})  # the one row
    monkeypatch.setattr(table, "BACKENDS", rows)
    monkeypatch.setattr(table, "BACKEND_KEYS", tuple(rows))

    (home / "settings.json").write_text(json.dumps({"llm_kind": "lmstudio"}), encoding="utf-8")
    settings = load_settings(home)
    assert settings.llm_kind == "lmstudio"
    assert settings.resolved_llm_url == "http://127.0.0.1:1234/v1"
    client = make_client(replace(settings, llm_url="http://127.0.0.1:9/v1"))
    try:
        assert isinstance(client, LMStudioClient) and client.kind == "lmstudio"
    finally:
        client.close()
    down = ErrorMapper(lmstudio, "http://127.0.0.1:9/v1").unavailable()
    assert down.message == "LM Studio's server is not running at http://127.0.0.1:9/v1."
    assert down.hint == lmstudio.start_hint
    warning = fallback_warning(down)
    assert warning.kind == WarningKind.LLM_UNAVAILABLE and "LM Studio's server" in warning.message
