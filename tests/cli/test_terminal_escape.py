"""What the CLI prints never carries a control character from a file name, a document or
a model server (issue 45). A name holding ``\\r[1] ∕home∕alice∕Official∕contract.pdf,
page 2: "…"\\e[K`` printed a forged source line under ``lectern ask``, and ``\\e]0;…``
set the terminal's title. Every name, passage, answer and message is shown through one
escape (core/cli/terminal.py), the one ``lectern files`` used. Real ``lectern``
processes, real files, the real model; a fake Ollama for a model that writes ESC."""

from __future__ import annotations

import json
import unicodedata
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from core.cli.terminal import printable, printable_lines
from tests.fake_ollama import FakeOllama
from tests.helpers import cli

FORGED = '\r[1] ∕home∕alice∕Official∕contract.pdf, page 2: "the real terms"\x1b[K'
NAME = f"hotel{FORGED}\x1b]0;pwned\x07\u202e\nrates.txt"
BROKEN = "broken\x1b[31m\r.pdf"
FOLDER = "docs \x1b]0;folder title\x07"
TEXT = (
    "The nightly hotel cap is 200 euros for staff travel.\x1b[2J Receipts are required "
    "for every claim.\x1b]0;from the text\x07 Claims go to finance within 30 days.\n"
)
QUESTION = "What is the nightly hotel cap?"


def raw_controls(text: str) -> list[str]:
    """The characters of ``text`` that could move, recolour or reorder a terminal line,
    other than the line breaks a command prints."""
    return sorted(
        {
            repr(ch)
            for ch in text
            if ch != "\n"
            and unicodedata.category(ch) in ("Cc", "Cf", "Cs", "Zl", "Zp")
            and ch not in "\u200c\u200d"
        }
    )


def clean(result: Any) -> str:
    """``result``'s standard output, once both its streams are checked."""
    assert raw_controls(result.stdout) == [], result.stdout
    assert raw_controls(result.stderr) == [], result.stderr
    assert "Traceback" not in result.stderr
    out: str = result.stdout
    return out


@pytest.fixture(scope="module")
def library(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Path, Any]]:
    """(home, folder, what `lectern index` printed) for a folder of hostile names."""
    root = tmp_path_factory.mktemp("escape")
    folder = root / FOLDER
    folder.mkdir()
    (folder / NAME).write_text(TEXT, encoding="utf-8")
    (folder / BROKEN).write_bytes(b"%PDF-1.7\n1 0 obj << /Type /Catalog broken\n" * 20)
    home = root / "home"
    home.mkdir()
    indexed = cli(home, "index", str(folder))
    assert indexed.returncode == 0, indexed.stderr
    yield home, folder, indexed


def test_index_says_a_failed_file_escaped(library: tuple[Path, Path, Any]) -> None:
    _, folder, indexed = library
    out = clean(indexed)
    assert f"  failed: {printable(str(folder / BROKEN))}: " in out


def test_search_shows_names_and_passages_escaped(library: tuple[Path, Path, Any]) -> None:
    home, folder, _ = library
    out = clean(cli(home, "search", "nightly hotel cap"))
    assert out.startswith(f"[1] {printable(str(folder / NAME))}  (score ")
    assert "\\r[1] ∕home∕alice" in out  # the forged line is part of the name, in view
    assert "nightly hotel cap is 200 euros" in out


def test_ask_without_a_model_shows_sources_escaped(library: tuple[Path, Path, Any]) -> None:
    home, folder, _ = library
    out = clean(cli(home, "ask", QUESTION, "--no-llm"))
    sources = out.split("\nSources:\n", 1)[1]
    assert sources.startswith(f"[1] {printable(str(folder / NAME))}: ")
    # The only source line is the one Lectern wrote: the forged one is inside the name.
    assert [line[:4] for line in sources.splitlines() if line.startswith("[")] == ["[1] "]


def test_a_model_answer_with_escapes_is_shown_escaped(
    library: tuple[Path, Path, Any], llm: FakeOllama
) -> None:
    home, _, _ = library
    llm.answer = "The cap is 200 euros a night [1].\x1b]0;model title\x07\x1b[2J\r\nThat is all."
    out = clean(cli(home, "ask", QUESTION, OLLAMA_HOST=f"127.0.0.1:{llm.port}"))
    assert "\\x1b]0;model title\\x07\\x1b[2J" in out
    assert "\nThat is all." in out  # a Windows line end is still a line end


def test_status_files_and_collections_show_names_escaped(
    library: tuple[Path, Path, Any],
) -> None:
    home, folder, _ = library
    status = clean(cli(home, "status"))
    assert f"  {printable(str(folder))} (online): " in status
    assert f"  {printable(str(folder / BROKEN))}: " in status
    clean(cli(home, "files"))

    made = cli(home, "collection", "create", "Trips\x1b[5m", str(folder))
    assert made.returncode == 0, made.stderr
    assert "Trips\\x1b[5m" in clean(made)
    listed = clean(cli(home, "collection", "list"))
    assert f"Trips\\x1b[5m (1 folder)\n  {printable(str(folder))}\n" in listed
    # JSON needs no escape of its own: json.dumps escapes every control character.
    as_json = cli(home, "collection", "list", "--json")
    assert json.loads(as_json.stdout)["collections"][0]["folders"] == [str(folder)]


def test_one_escape_for_lines_and_for_text_of_several_lines() -> None:
    assert printable("a\r\x1b[K\u202eb\nc") == "a\\r\\x1b[K\\u202eb\\nc"
    assert printable_lines("one\r\ntwo\tthree\x1b]0;t\x07\n") == "one\ntwo\tthree\\x1b]0;t\\x07\n"
    assert printable_lines("café, 東京, مرحبا, 👍🏽") == "café, 東京, مرحبا, 👍🏽"
    # A name's bytes that are not UTF-8 stay its bytes (the shell can take them back),
    # but not those an 8-bit terminal reads as controls (0x9B is CSI there).
    assert printable("bad\udcff\udcfe\udc9b.txt") == "bad\udcff\udcfe\\udc9b.txt"
