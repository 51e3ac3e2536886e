"""Finding the files of a library folder, and deciding which ones to ignore.

Used by the indexer's full scan and by the folder watcher, so both agree on what a
library contains: hidden files and folders, editors' temporary/swap/lock files and
user-supplied glob patterns are never indexed.
"""

from __future__ import annotations

import fnmatch
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

# Editors and office suites leave these next to the real file while it is being saved.
DEFAULT_IGNORES = (
    ".*",  # hidden files and folders (.git, .DS_Store, .~lock.x#, .x.swp)
    "~$*",  # MS Office owner files
    "*~",  # backup files
    "#*#",  # emacs autosave
    "*.swp",
    "*.swo",
    "*.swx",
    "*.tmp",
    "*.temp",
    "*.part",
    "*.crdownload",
    "*.download",
    "*.lock",
    "4913",  # vim's write-permission probe
    "Thumbs.db",
    "desktop.ini",
    "__pycache__",
)


@dataclass(frozen=True)
class FileInfo:
    path: str
    folder: str
    size: int
    mtime: float


def is_ignored(path: str | Path, extra_patterns: Sequence[str] = ()) -> bool:
    name = os.path.basename(os.fspath(path))
    return any(fnmatch.fnmatch(name, p) for p in (*DEFAULT_IGNORES, *extra_patterns))


def is_ignored_in(path: str | Path, folder: str | Path, extra_patterns: Sequence[str] = ()) -> bool:
    """True when the file or any folder between it and the library folder is ignored."""
    try:
        rel = Path(path).relative_to(folder)
    except ValueError:
        return True
    return any(is_ignored(part, extra_patterns) for part in rel.parts)


def normalize_folder(path: str | Path) -> str:
    return os.path.normpath(os.path.abspath(os.path.expanduser(os.fspath(path))))


def iter_files(folder: str, extra_patterns: Sequence[str] = ()) -> Iterator[FileInfo]:
    """Regular files under ``folder``, depth first, without following symlinked folders
    (which would loop forever on a symlink cycle)."""
    if os.path.isfile(folder):  # a single file added on its own is its own library root
        try:
            st = os.stat(folder)
        except OSError:
            return
        yield FileInfo(folder, folder, st.st_size, st.st_mtime)
        return
    stack = [folder]
    while stack:
        current = stack.pop()
        try:
            entries = list(os.scandir(current))
        except OSError:
            continue  # unreadable folder: its files are reported missing, not crashed on
        entries.sort(key=lambda e: e.name)
        subdirs = []
        for entry in entries:
            if is_ignored(entry.name, extra_patterns):
                continue
            try:
                if entry.is_dir(follow_symlinks=False):
                    subdirs.append(entry.path)
                elif entry.is_file(follow_symlinks=True):
                    st = entry.stat(follow_symlinks=True)
                    yield FileInfo(entry.path, folder, st.st_size, st.st_mtime)
            except OSError:
                continue
        stack.extend(reversed(subdirs))
