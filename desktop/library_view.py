"""The library as the window shows it: folders with their counts, the files needing
attention, a change of model under way and the model offer, read in one background trip
(``ops.library_overview``) and kept as a ``LibrarySnapshot``.

Reads are coalesced (one in flight, one more queued behind it), so the counts can follow a
run ten times a second without piling up queries. The last snapshot is kept in the data
folder for the next start, whose first frame shows it until the open library answers.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from core.app import ops
from core.private import write_private
from core.records import Document, FolderStatus, record_from_json
from desktop.qt import QObject, QTimer, Signal

if TYPE_CHECKING:
    from core.app.ops import Changes, LibraryOverview
    from desktop.workers import OpRunner

log = logging.getLogger(__name__)

SWITCH_REFRESH_MS = 3000  # while a change of embedding model re-embeds in the background
# The library as the last session showed it (in the data folder), shown at the next
# start until the open library answers.
SAVED_SNAPSHOT = "last-library-view.json"
SAVED_PROBLEMS = 200  # failed and skipped files kept per folder in it


@dataclass(frozen=True)
class LibrarySnapshot:
    folders: tuple[FolderStatus, ...]
    problems: dict[str, tuple[Document, ...]]  # folder -> failed and skipped files
    chunks: int = 0
    documents: int = 0
    embedded: int = 0  # passages searchable by meaning (the rest by keyword only, for now)
    # A change of embedding model in progress, in words (core/indexing/reembed.py); "" when none.
    switching: str = ""
    # The model the library's languages call for, and why (core/embedding/languages.py); "" when
    # there is nothing to offer, or the person said not now.
    advice: str = ""
    advice_model: str = ""
    # Read from the last session's file (LibraryView.show_saved), not from the open library.
    saved: bool = False


def snapshot_of(overview: LibraryOverview) -> LibrarySnapshot:
    advice = overview.advice
    return LibrarySnapshot(
        folders=overview.folders,
        problems=overview.problems,
        chunks=sum(f.chunks for f in overview.folders),
        documents=sum(f.indexed for f in overview.folders),
        embedded=overview.embedded,
        switching=overview.switching,
        advice=advice.message if advice else "",
        advice_model=advice.model if advice else "",
    )


def write_saved_snapshot(path: Path, snapshot: LibrarySnapshot) -> None:
    """Keep ``snapshot`` for the next start (written whole, then renamed over)."""
    data = {
        "folders": [asdict(f) for f in snapshot.folders],
        "problems": {
            folder: [asdict(d) for d in docs[:SAVED_PROBLEMS]]
            for folder, docs in snapshot.problems.items()
        },
        "chunks": snapshot.chunks,
        "documents": snapshot.documents,
        "embedded": snapshot.embedded,
    }
    # Private: it names the person's folders and files.
    write_private(path, json.dumps(data), durable=False)


def read_saved_snapshot(path: Path) -> LibrarySnapshot | None:
    """The snapshot ``write_saved_snapshot`` kept; None when there is none or it is
    unreadable (it is only a preview: the open library's replaces it)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        # Typed field by field: a document's state read back as text, not a DocState,
        # emptied the whole library panel on the first frame.
        return replace(record_from_json(LibrarySnapshot, data), saved=True)
    except (OSError, ValueError):
        return None


class LibraryView(QObject):
    snapshot_changed = Signal(object)  # LibrarySnapshot
    # Paths of documents just removed from the library (a deleted file, not only a
    # removed folder): open answers and the evidence panel drop their text at once.
    documents_removed = Signal(object)  # list[str]

    def __init__(
        self, runner: OpRunner, indexing: Callable[[], bool], parent: QObject | None = None
    ) -> None:
        super().__init__(parent)
        self._runner = runner
        self._indexing = indexing
        self.snapshot: LibrarySnapshot | None = None
        self._refreshing = False
        self._refresh_again = False
        self._closing = False
        self._switch_timer = QTimer(self)
        self._switch_timer.setSingleShot(True)
        self._switch_timer.setInterval(SWITCH_REFRESH_MS)
        self._switch_timer.timeout.connect(self.refresh)
        # A file deleted during a long run leaves the library at once (the watcher applies
        # it beside the run): the counts follow then, not when the run ends.
        self.documents_removed.connect(self._documents_removed)

    def follow(self, changes: Changes) -> None:
        if changes.folders or changes.documents:
            self.refresh()

    def _documents_removed(self, _paths: object) -> None:
        # A method of this object, not a lambda: it runs on the UI thread, not the one
        # that removed the files.
        self.refresh()

    def refresh(self) -> None:
        """Read the folder counts and problem files again (coalesced: one read in flight)."""
        if self._closing:
            return
        if self._refreshing:
            self._refresh_again = True
            return
        # The offer of another model waits for indexing to end (the first files alone
        # would decide) and is never made again once the person said not now.
        advise = not self._runner.settings.model_offer_declined and not self._indexing()
        task = self._runner.run(
            ops.library_overview(advise).then(snapshot_of),
            on_result=self._loaded,
            on_finished=self._finished,
        )
        self._refreshing = task is not None

    def _loaded(self, snapshot: LibrarySnapshot) -> None:
        previous, self.snapshot = self.snapshot, snapshot
        self.snapshot_changed.emit(snapshot)
        if previous is None or [f.path for f in previous.folders] != [
            f.path for f in snapshot.folders
        ]:
            # Kept for the next start at once, not only at a clean close.
            self.save()
        if snapshot.switching and not self._closing and not self._switch_timer.isActive():
            self._switch_timer.start()  # its progress is followed until it switches

    def _finished(self) -> None:
        self._refreshing = False
        if self._refresh_again:
            self._refresh_again = False
            self.refresh()

    def decline_offer(self) -> None:
        self._runner.apply_settings(self._runner.settings.with_changes(model_offer_declined=True))
        self.refresh()

    # --- the library as it was last shown ----------------------------------------------

    def show_saved(self) -> None:
        """Show the library as the last session left it, until the open one answers.

        Called before the window's first paint: a reopen shows its folders at once
        instead of the first-run screen for the second or so that opening takes.
        """
        snapshot = read_saved_snapshot(self._runner.settings.home / SAVED_SNAPSHOT)
        if snapshot is not None and snapshot.folders and self.snapshot is None:
            self.snapshot = snapshot
            self.snapshot_changed.emit(snapshot)

    def save(self) -> None:
        snapshot = self.snapshot
        if snapshot is None or snapshot.saved:
            return
        try:
            write_saved_snapshot(self._runner.settings.home / SAVED_SNAPSHOT, snapshot)
        except OSError as exc:  # a nicety: the next start shows the library a moment later
            log.warning("the library's last view could not be saved: %s", exc)

    def close(self) -> None:
        """Closing: the snapshot kept for the next start; no more reads."""
        self._closing = True
        self.save()
        self._switch_timer.stop()
