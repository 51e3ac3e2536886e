"""``lectern conversations`` and ``lectern files`` beside a running ``lectern watch``
(issue 45): answered by the writer over its socket, as ``search`` is, instead of "Another
Lectern process is using the library". Real processes, the real model and DuckDB.

The watched folder holds a file whose name carries ESC, CR and LF: what ``watch`` prints
of it is escaped as every other command prints names (core/cli/terminal.py)."""

from __future__ import annotations

import json
import re
import shutil
import unicodedata
from collections.abc import Iterator
from pathlib import Path

import pytest

from core import ipc
from core.cli.common import ANSWERED_REMOTELY
from core.cli.terminal import printable
from tests.conftest import SAMPLE_DOCS
from tests.helpers import cli
from tests.ipc.test_ipc import BUSY, Writer

pytestmark = pytest.mark.skipif(not ipc.supported(), reason="no AF_UNIX sockets here")

HOSTILE = "rota\x1b]0;pwned\x07\r[1] forged\n.txt"
QUESTION = "How much is the nightly hotel cap?"


@pytest.fixture(scope="module")
def watched(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Writer]:
    """``lectern watch`` over the sample documents and a hostile name, one conversation
    kept from before it started."""
    root = tmp_path_factory.mktemp("reads")
    docs = root / "docs"
    shutil.copytree(SAMPLE_DOCS, docs)
    (docs / HOSTILE).write_text("The on-call rota changes every Monday.\n", encoding="utf-8")
    home = root / "home"
    home.mkdir()
    asked = cli(home, "index", str(docs))
    assert asked.returncode == 0, asked.stderr
    asked = cli(home, "ask", QUESTION, "--no-llm")
    assert asked.returncode == 0, asked.stderr
    writer = Writer(home, "watch", "--reconcile", "0")
    try:
        writer.wait_for("Watching")
        writer.wait_serving()
        yield writer
    finally:
        writer.stop()


def beside(watched: Writer, *args: str) -> str:
    result = cli(watched.home, *args)
    assert result.returncode == 0, result.stderr
    assert BUSY not in result.stderr and ANSWERED_REMOTELY in result.stderr
    return result.stdout


def test_conversations_beside_watch(watched: Writer, tmp_path: Path) -> None:
    listed = json.loads(beside(watched, "conversations", "list", "--json"))
    [conversation] = listed["conversations"]
    number = str(conversation["id"])
    assert conversation["questions"] == 1
    assert f"{number}  " in beside(watched, "conversations", "list")

    found = json.loads(beside(watched, "conversations", "search", "hotel cap", "--json"))
    assert [c["id"] for c in found["conversations"]] == [conversation["id"]]

    shown = beside(watched, "conversations", "show", number)
    assert f"Q1: {QUESTION}" in shown and "Sources:" in shown
    as_json = json.loads(beside(watched, "conversations", "show", number, "--json"))
    assert [t["question"] for t in as_json["turns"]] == [QUESTION]

    exported = beside(watched, "conversations", "export", number)
    assert QUESTION in exported
    # Written by the command itself, in its own folder.
    result = cli(watched.home, "conversations", "export", number, "-o", str(tmp_path))
    assert result.returncode == 0, result.stderr
    [written] = list(tmp_path.glob("*.md"))
    # The same export, but for the minute it was made in (a minute may turn between them).
    minute = re.compile(r"Exported from Lectern on .*? · ")
    assert minute.sub("", written.read_text(encoding="utf-8")) == minute.sub("", exported)

    # An unknown conversation is the writer's own words, not a broken connection.
    missing = cli(watched.home, "conversations", "show", "9999")
    assert missing.returncode == 2 and "no conversation 9999" in missing.stderr

    # A rename writes: beside a writer it is still refused, in words.
    renamed = cli(watched.home, "conversations", "rename", number, "Trips")
    assert renamed.returncode == 2 and BUSY in renamed.stderr
    assert "Traceback" not in renamed.stderr


def test_files_beside_watch(watched: Writer) -> None:
    files = json.loads(beside(watched, "files", "--json"))
    names = {Path(f["path"]).name for f in files["files"]}
    assert HOSTILE in names and "security-policy.pdf" in names
    assert printable(HOSTILE) in beside(watched, "files")


def test_watch_prints_names_escaped(watched: Writer) -> None:
    (watched.home.parent / "docs" / HOSTILE).write_text("The rota changed.\n", encoding="utf-8")
    watched.wait_for("rota\\x1b]0;pwned")
    said = watched.out.read_text(encoding="utf-8")
    assert not [ch for ch in said if ch != "\n" and unicodedata.category(ch) in ("Cc", "Cf")], said
