"""Shared fixtures: real model, real DuckDB, real files. Only the LLM server is faked."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from tests.fake_ollama import fake_ollama, llm  # noqa: F401 - the running fake Ollama fixtures

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

REPO = Path(__file__).resolve().parents[1]
# An override lets a run check that tests which do not need the data still run without it
# (point it at a folder that does not exist).
SHARED_DATA = Path(os.environ.get("LECTERN_SHARED_DATA") or REPO.parent / "shared" / "data")
SAMPLE_DOCS = REPO / "resources" / "sample-docs"


@pytest.fixture(scope="session")
def shared_data() -> Path:
    if not SHARED_DATA.exists():
        pytest.skip(f"evaluation data not found at {SHARED_DATA}")
    return SHARED_DATA


@pytest.fixture(scope="session")
def embedder():
    from core.embedding.models import load_embedder

    return load_embedder()


@pytest.fixture()
def lectern_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("LECTERN_HOME", str(home))
    monkeypatch.delenv("OLLAMA_HOST", raising=False)
    return home


@pytest.fixture()
def sample_folder(tmp_path: Path) -> Path:
    """A private copy of the sample documents that a test may change."""
    folder = tmp_path / "docs"
    shutil.copytree(SAMPLE_DOCS, folder)
    return folder


@pytest.fixture()
def library(lectern_home: Path, embedder) -> Iterator[object]:
    from core.config import Settings
    from core.library import Library

    lib = Library(replace(Settings(home=lectern_home)), embedder=embedder)
    yield lib
    lib.close()
