"""Finding the files of a library folder, and deciding which ones to ignore.

Used by the indexer's full scan and by the folder watcher, so both agree on what a
library contains: hidden files and folders, editors' temporary/swap/lock files and
user-supplied glob patterns are never indexed.
"""

from __future__ import annotations

import errno
import fnmatch
import os
import stat
from collections.abc import Iterator, Sequence
from pathlib import Path

from core.records import FileInfo
from core.store.paths import display_text

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


_SPECIAL_KINDS = (
    (stat.S_ISFIFO, "a named pipe, not a file"),
    (stat.S_ISSOCK, "a socket, not a file"),
    (stat.S_ISCHR, "a device, not a file"),
    (stat.S_ISBLK, "a device, not a file"),
)


OUTSIDE_LINK = "a link to a file outside this folder"


def link_reason(path: str, folder: str) -> str:
    """Why ``path``, found under the library folder ``folder``, is not read as a file of
    its own: it, or a folder on the way to it, is a link whose target is outside
    ``folder`` (a link to /etc/shadow put in a shared folder would be read, and its text
    searchable and quoted) or elsewhere inside it (read there, under its own name: once).
    "" for a file that is where it was found."""
    real = os.path.realpath(path)
    real_folder = os.path.realpath(folder)
    try:
        found = os.path.relpath(path, folder)
    except ValueError:  # another drive (Windows)
        return OUTSIDE_LINK
    if real == real_folder:
        target = os.curdir
    elif real.startswith(real_folder.rstrip(os.sep) + os.sep):
        target = real[len(real_folder.rstrip(os.sep)) + 1 :]
    else:
        return OUTSIDE_LINK
    if os.path.normcase(target) == os.path.normcase(found):
        return ""
    # The name is stored in the reason: as valid text, like a title.
    shown = display_text(target.replace(os.sep, "/"))
    return f"a link to {shown}, another file in this folder (each file is read once)"


def file_info(path: str, folder: str, *, parents_checked: bool = False) -> FileInfo | None:
    """What the scan records for ``path``: a regular file, a special entry with the reason
    it is skipped, or None for a folder (or a link to one) and for what has vanished.

    A file reached through a link, its own or a folder's, is skipped with the reason
    (``link_reason``). ``parents_checked``: the folders between ``folder`` and ``path``
    are known to be no links (the scan walked them without following any), so only a
    link at ``path`` itself needs resolving.

    Only ``stat`` is called, never ``open``: opening a named pipe blocks until someone
    writes to it."""
    try:
        own = os.lstat(path)
    except OSError:
        return None  # gone between listing and looking
    try:
        st = os.stat(path)
    except OSError as exc:
        if not stat.S_ISLNK(own.st_mode):
            return None
        if exc.errno == errno.ELOOP:
            reason = "a link that points to itself in a loop"
        elif exc.errno in (errno.ENOENT, errno.ENOTDIR):
            reason = "a broken link: its target is missing"
        else:
            reason = f"a link whose target cannot be reached: {exc.strerror or exc}"
        return FileInfo(path, folder, own.st_size, own.st_mtime, reason)
    if stat.S_ISDIR(st.st_mode):
        return None
    if path != folder and (stat.S_ISLNK(own.st_mode) or not parents_checked):
        linked = link_reason(path, folder)
        if linked:
            # Never hashed nor opened: what it points to is not this folder's to read.
            return FileInfo(path, folder, own.st_size, own.st_mtime, linked)
    if stat.S_ISREG(st.st_mode):
        return FileInfo(path, folder, st.st_size, st.st_mtime)
    reason = next((why for test, why in _SPECIAL_KINDS if test(st.st_mode)), "not a regular file")
    return FileInfo(path, folder, own.st_size, own.st_mtime, reason)


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


def iter_files(
    folder: str, extra_patterns: Sequence[str] = (), root: str | None = None
) -> Iterator[FileInfo]:
    """Every entry under ``folder`` that is not a folder, depth first: regular files, and
    special ones (``FileInfo.special`` says why they are skipped) so that each has a state.
    Symlinked folders are not followed (a symlink cycle would loop forever).

    ``root``: the library folder ``folder`` is in (itself when None), which the entries
    are recorded under and which links must not lead out of. ``folder`` must be reached
    from it through no link (``link_reason(folder, root)`` is "")."""
    root = folder if root is None else root
    if os.path.isfile(folder):  # a single file added on its own is its own library root
        try:
            st = os.stat(folder)
        except OSError:
            return
        yield FileInfo(folder, root, st.st_size, st.st_mtime)
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
                    continue
            except OSError:
                continue
            info = file_info(entry.path, root, parents_checked=True)
            if info is not None:
                yield info
        stack.extend(reversed(subdirs))


# --- documents carried inside a file (mail attachments) ------------------------------


def attachment_path(container: str, name: str) -> str:
    """Where a document carried inside ``container`` is recorded: under the container's
    path as if it were a folder. No file on disk can have that path (its "folder" is a
    file), so it never collides with a real file and the scan never finds it."""
    parts = [p for p in name.replace("\\", "/").split("/") if p not in ("", ".", "..")]
    return os.path.join(container, *parts) if parts else os.path.join(container, "attachment")


def container_in(path: str, files: set[str] | frozenset[str]) -> str | None:
    """The file of ``files`` that ``path`` is an attachment of, or None: the nearest
    enclosing path that is one of them."""
    parent = os.path.dirname(path)
    while parent and parent != os.path.dirname(parent):
        if parent in files:
            return parent
        parent = os.path.dirname(parent)
    return None
