"""A proxy setting in the environment never costs an answer (issue 45).

``ALL_PROXY=socks5://...`` made ``lectern ask`` and ``lectern models`` end in
``ImportError: Using SOCKS proxy, but the 'socksio' package is not installed``: importing
the ``ollama`` package builds a client that trusts the environment. A server on this
machine is asked directly whatever the proxy variables say; one elsewhere goes through
the proxy, and a proxy that cannot be used is a warning and a quoted answer, never a
traceback. Real ``lectern`` processes, a real library and model, a fake Ollama on
127.0.0.1."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from core.config import Settings
from core.library import Library
from tests.conftest import SAMPLE_DOCS
from tests.fake_ollama import FakeOllama
from tests.helpers import cli

QUESTION = "How much is the nightly hotel cap?"
SOCKS = "socks5://alice:secret@10.9.9.9:1080"
# Every variable httpx reads a proxy from, in both cases.
PROXIES = {
    name: SOCKS
    for base in ("all_proxy", "https_proxy", "http_proxy")
    for name in (base, base.upper())
}
REMOTE = "10.255.255.1:11434"  # not this machine: reached through the proxy, if at all


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory, embedder: Any) -> Path:
    root = tmp_path_factory.mktemp("proxy")
    shutil.copytree(SAMPLE_DOCS, root / "docs")
    home = root / "home"
    home.mkdir()
    with Library(Settings(home=home), embedder=embedder) as lib:
        lib.index([root / "docs"])
    return home


def answer_of(result: Any) -> dict[str, Any]:
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr and "ImportError" not in result.stderr
    answer: dict[str, Any] = json.loads(result.stdout.splitlines()[-1])
    return answer


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost"])
def test_ask_beside_a_socks_proxy_setting_is_answered_by_the_model(
    home: Path, llm: FakeOllama, host: str
) -> None:
    chats = len(llm.requests_to("/api/chat"))
    result = cli(home, "ask", QUESTION, "--json", OLLAMA_HOST=f"{host}:{llm.port}", **PROXIES)
    answer = answer_of(result)
    assert answer["mode"] == "generated" and answer["answer"]
    assert answer["citations"]
    assert not answer["warnings"]
    assert len(llm.requests_to("/api/chat")) > chats  # asked directly, not through the proxy


def test_models_beside_a_socks_proxy_setting(home: Path, llm: FakeOllama) -> None:
    result = cli(home, "models", "--json", OLLAMA_HOST=f"127.0.0.1:{llm.port}", **PROXIES)
    assert result.returncode == 0, result.stderr
    listed = json.loads(result.stdout.splitlines()[-1])
    assert [m["name"] for m in listed["models"]] == ["llama3.2:latest"]


def test_an_openai_server_here_beside_a_socks_proxy_setting(home: Path, llm: FakeOllama) -> None:
    settings = home.parent / "openai-home"
    shutil.copytree(home, settings)
    (settings / "settings.json").write_text(
        json.dumps({"llm_kind": "openai", "llm_url": f"http://localhost:{llm.port}/v1"}),
        encoding="utf-8",
    )
    answer = answer_of(cli(settings, "ask", QUESTION, "--json", **PROXIES))
    assert answer["mode"] == "generated" and not answer["warnings"]


def test_a_server_elsewhere_behind_an_unusable_proxy_is_a_warning_and_a_quote(
    home: Path,
) -> None:
    answer = answer_of(cli(home, "ask", QUESTION, "--json", OLLAMA_HOST=REMOTE, **PROXIES))
    assert answer["mode"] in ("extractive", "declined")
    [warning] = [w for w in answer["warnings"] if w["kind"] == "llm_unavailable"]
    message = warning["message"]
    assert "socks5://10.9.9.9:1080" in message and "socksio" in message
    assert "NO_PROXY" in message
    assert "secret" not in message  # the proxy's password is not repeated

    text = cli(home, "ask", QUESTION, OLLAMA_HOST=REMOTE, **PROXIES)
    assert text.returncode == 0, text.stderr
    assert "\nSources:\n[1] " in text.stdout
    assert "Warning: " in text.stderr and "Traceback" not in text.stderr

    # Listing needs the server: a plain error, not a traceback.
    models = cli(home, "models", OLLAMA_HOST=REMOTE, **PROXIES)
    assert models.returncode == 2
    assert models.stderr.startswith("Error: ") and "socksio" in models.stderr
    assert "Traceback" not in models.stderr


def test_a_server_elsewhere_named_in_no_proxy_is_asked_directly(home: Path) -> None:
    """NO_PROXY takes the server out of the proxy's way, as the warning's hint says."""
    host = REMOTE.split(":")[0]
    result = cli(home, "ask", QUESTION, "--json", OLLAMA_HOST=REMOTE, NO_PROXY=host, **PROXIES)
    answer = answer_of(result)
    # No proxy involved: the server is simply not there.
    assert all("socksio" not in w["message"] for w in answer["warnings"])
    assert any(w["kind"] in ("llm_unavailable", "llm_timeout") for w in answer["warnings"])
