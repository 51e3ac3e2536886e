"""An export cannot be redirected by a planted link (issue 45). Before: `conversations
export 1 -o /tmp/exp.md` wrote through the fixed name ``/tmp/.exp.md.lectern-tmp`` with a
plain open, so another account's link there made the export overwrite that account's
chosen file."""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path

from tests.conftest import SAMPLE_DOCS
from tests.helpers import cli
from tests.other_account import other_account, shared_root, sticky_folder, umask

QUESTION = "How long do I have to file an expense report?"


def plausible_temporaries(target: Path) -> list[Path]:
    name = target.name
    return [
        target.with_name(n)
        for n in (
            f".{name}.lectern-tmp",
            f".{name}.tmp",
            f"{name}.tmp",
            f".{name}.part",
            f"{name}.part",
            f"{Path(name).stem}.tmp",
        )
    ]


def test_links_planted_beside_the_export_redirect_nothing(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    shutil.copytree(SAMPLE_DOCS, docs)
    home = tmp_path / "data"
    with shared_root() as root, other_account() as other, umask(0o022):
        done = cli(home, "index", str(docs))
        assert done.returncode == 0, done.stderr
        done = cli(home, "ask", "--no-llm", QUESTION)
        assert done.returncode == 0, done.stderr

        shared = sticky_folder(root / "tmp")
        victim = shared / "their-file.txt"
        assert other.run("sh", "-c", f"echo theirs > {victim}").returncode == 0
        target = shared / "exp.md"
        links = plausible_temporaries(target)
        for link in links:
            made = other.run("ln", "-s", str(victim), str(link))
            assert made.returncode == 0, made.stderr

        done = cli(home, "conversations", "export", "1", "-o", str(target))
        assert done.returncode == 0, done.stderr

        assert victim.read_text() == "theirs\n"
        for link in links:
            assert link.is_symlink() and os.readlink(link) == str(victim)
        st = target.lstat()
        assert stat.S_ISREG(st.st_mode) and st.st_uid == os.getuid()
        assert stat.S_IMODE(st.st_mode) == 0o600
        assert target.read_text(encoding="utf-8").startswith("# ")
        assert QUESTION in target.read_text(encoding="utf-8")
        # Nothing else was left beside it.
        assert sorted(p.name for p in shared.iterdir()) == sorted(
            [target.name, victim.name, *(link.name for link in links)]
        )
