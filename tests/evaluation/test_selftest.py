"""``Lectern --self-test`` from a source checkout (the packaged run is in test_packaging)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fake_ollama import FakeOllama

# the self-test loads the model and indexes the samples: not in `make test-fast`.
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]


def run_self_test(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, LECTERN_HOME=str(home), QT_QPA_PLATFORM="offscreen")
    return subprocess.run(
        [sys.executable, "-m", "desktop", "--self-test", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_self_test_passes_on_the_sample_documents(tmp_path: Path, fake_ollama: FakeOllama) -> None:
    done = run_self_test(tmp_path / "home", "--llm-url", fake_ollama.url)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "[ok  ] search " in done.stdout and "bm25 #1" in done.stdout
    assert "[ok  ] answer " in done.stdout
    assert fake_ollama.requests_to("/api/chat")
    assert not (tmp_path / "home" / "lectern.duckdb").exists()  # the user's data is untouched


def test_self_test_fails_on_an_empty_folder_and_says_why(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    done = run_self_test(tmp_path / "home", str(empty))
    assert done.returncode == 1
    assert f"[FAIL] folder (0.0 s): {empty} has no files to index." in done.stdout
    assert "Self-test FAILED." in done.stdout
