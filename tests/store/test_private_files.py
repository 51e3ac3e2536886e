"""Nothing leaked (issue 45): everything Lectern writes is its user's alone, whatever the
umask. Before: with umask 022 the data folder was 0755 and the database, keyword index,
vectors, backups, settings.json (with an API key) and cli-error.log 0644, and a second
account read them."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from core.store.db import Database
from tests.conftest import REPO, SAMPLE_DOCS
from tests.helpers import cli, lectern_env
from tests.other_account import not_private, other_account, shared_root, umask

QUESTION = "How long do I have to file an expense report?"
API_KEY = "sk-test-very-secret-key"
SAVE_SETTINGS = (
    "from core.config import load_settings; "
    f"load_settings().with_changes(llm_kind='openai', llm_api_key={API_KEY!r}).save()"
)
# A bug in a command: its traceback goes to cli-error.log.
CRASH = (
    "import sys, core.cli.main as m\n"
    "def broken(_args):\n"
    "    raise RuntimeError('boom')\n"
    "m.cmd_status = broken\n"
    "sys.exit(m.main(['status']))\n"
)


def python(home: Path, code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code],
        cwd=REPO,
        env=lectern_env(home),
        capture_output=True,
        text=True,
        timeout=300,
    )


def make_library(root: Path) -> Path:
    """A library as a person ends up with one under umask 022: indexed, asked (a
    conversation and its backup), settings saved with an API key, a crash logged."""
    docs = root / "docs"
    shutil.copytree(SAMPLE_DOCS, docs)
    home = root / "data"
    with umask(0o022):
        done = cli(home, "index", str(docs))
        assert done.returncode == 0, done.stderr
        done = cli(home, "ask", "--no-llm", QUESTION)
        assert done.returncode == 0, done.stderr
        done = python(home, SAVE_SETTINGS)
        assert done.returncode == 0, done.stderr
        done = python(home, CRASH)
        assert done.returncode == 2 and "cli-error.log" in done.stderr, done.stderr
    return home


@pytest.fixture(scope="module")
def made() -> Iterator[Path]:
    with shared_root() as root:
        yield make_library(root)


def test_everything_in_the_data_folder_is_private_under_umask_022(made: Path) -> None:
    home = made
    for name in (
        "lectern.duckdb",
        "keyword.duckdb",
        "vectors.usearch",
        "settings.json",
        "cli-error.log",
        "backup/folders.json",
        "backup/conversations/1.json",
    ):
        assert (home / name).is_file(), sorted(p.name for p in home.rglob("*"))
    assert API_KEY in (home / "settings.json").read_text()
    assert not_private(home) == []


def test_another_account_reads_nothing_of_the_library(made: Path) -> None:
    home = made
    files = [p for p in home.rglob("*") if p.is_file()]
    with other_account() as other:
        listing = other.run("ls", str(home))
        assert listing.returncode != 0 and not listing.stdout, listing.stdout
        for path in files:
            read = other.run("cat", str(path))
            assert read.returncode != 0 and not read.stdout, f"{path} was read"
        # The one thing checked outright: the key and the conversation stay unread.
        grep = other.run("grep", "-r", "-a", "-l", API_KEY, str(home.parent))
        assert grep.stdout == ""


def test_an_existing_library_is_made_private_when_it_opens(tmp_path: Path) -> None:
    """A library written before (or by a program with its own umask): 0755 folders and
    0644 files are tightened at open, and the command says so once."""
    docs = tmp_path / "docs"
    shutil.copytree(SAMPLE_DOCS, docs)
    home = tmp_path / "data"
    done = cli(home, "index", str(docs))
    assert done.returncode == 0, done.stderr
    loosened = 0
    for path in [home, *home.rglob("*")]:
        os.chmod(path, 0o755 if path.is_dir() else 0o644)
        loosened += 1

    done = cli(home, "status")
    assert done.returncode == 0, done.stderr
    said = [line for line in done.stderr.splitlines() if "private" in line]
    assert said == [
        f"Made your library private: {loosened:,} files and folders other accounts on "
        "this computer could read are now yours alone."
    ], done.stderr
    assert not_private(home) == []

    again = cli(home, "status")
    assert again.returncode == 0 and "private" not in again.stderr, again.stderr


def test_folders_lectern_makes_for_its_data_folder_are_private(tmp_path: Path) -> None:
    """The default data folder under a home without ~/.local: Lectern makes ~/.local
    and ~/.local/share, and makes them 0700."""
    home = tmp_path / "person"
    home.mkdir(mode=0o755)
    env = {
        k: v
        for k, v in lectern_env(tmp_path / "unused").items()
        if k not in ("LECTERN_HOME", "XDG_DATA_HOME")
    }
    env["HOME"] = str(home)
    with umask(0o022):
        done = subprocess.run(
            [sys.executable, "-m", "core", "status"],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
    assert done.returncode == 0, done.stderr
    data = home / ".local" / "share" / "Lectern"
    assert (data / "lectern.duckdb").is_file()
    assert not_private(home / ".local") == []


def test_a_library_used_as_a_module_is_private_under_its_programs_umask(
    tmp_path: Path, embedder: object
) -> None:
    """A program that uses the library as a module keeps its own umask (022 here): the
    data folder is 0700 from the start, what Lectern writes itself is 0600, and what
    DuckDB made by the umask is tightened at close."""
    from core.config import Settings
    from core.library import Library

    docs = tmp_path / "docs"
    shutil.copytree(SAMPLE_DOCS, docs)
    home = tmp_path / "data"
    with umask(0o022):
        library = Library(Settings(home=home), embedder=embedder)  # type: ignore[arg-type]
        try:
            library.index([docs])
            assert oct(home.stat().st_mode & 0o777) == oct(0o700)
            for name in ("backup/folders.json", "lectern.duckdb.commits"):
                assert oct((home / name).stat().st_mode & 0o777) == oct(0o600), name
        finally:
            library.close()
    assert not_private(home) == []


def test_a_database_in_memory_spills_into_a_private_folder_no_one_can_name_first() -> None:
    """Before: ``<temp>/lectern-duckdb-<pid>.tmp``, a name another account could make
    first (a folder it reads, or a link)."""
    db = Database(":memory:")
    try:
        row = db.cursor().execute("SELECT current_setting('temp_directory')").fetchone()
        assert row is not None
        spill = Path(row[0])
    finally:
        db.close()
    assert spill != Path(tempfile.gettempdir()) / f"lectern-duckdb-{os.getpid()}.tmp"
    st = spill.parent.lstat()
    assert stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid()
    assert stat.S_IMODE(st.st_mode) == 0o700


def test_tightening_only_takes_access_away_and_never_follows_a_link(tmp_path: Path) -> None:
    """A folder made read-only stays read-only (0555 becomes 0500, not 0700), and a link
    inside the data folder to a file outside it leaves that file as it was."""
    from core.private import tighten

    outside = tmp_path / "outside.txt"
    outside.write_text("not Lectern's")
    os.chmod(outside, 0o644)
    home = tmp_path / "data"
    (home / "locked").mkdir(parents=True)
    (home / "locked" / "kept.json").write_text("{}")
    os.chmod(home / "locked" / "kept.json", 0o444)
    os.chmod(home / "locked", 0o555)
    (home / "link").symlink_to(outside)
    os.chmod(home, 0o755)
    try:
        assert tighten(home) == 3
        assert stat.S_IMODE(home.stat().st_mode) == 0o700
        assert stat.S_IMODE((home / "locked").stat().st_mode) == 0o500
        assert stat.S_IMODE((home / "locked" / "kept.json").stat().st_mode) == 0o400
        assert stat.S_IMODE(outside.stat().st_mode) == 0o644
        assert tighten(home) == 0
    finally:
        os.chmod(home / "locked", 0o700)
