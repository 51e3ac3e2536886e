"""Changing the embedding model without closing the library: re-embedding in the
background while the old model keeps answering.

When only the model changed (the chunker and its settings are the same), the chunks,
their text and the keyword index stay as they are, and search goes on with the old model
(queries embedded by it, against its vectors). A worker thread embeds every live chunk
with the new model into a side table (core/store/reembed.py), a few passages at a time,
paced by the indexing throttle. Chunks written meanwhile are embedded by the old model as
usual, and picked up by the worker too, before the switch. When every live chunk has its
new vector, one transaction swaps them all in, the vector index is built from them, and
the library's model, vectors and retriever change together (see ``Library``).

Progress is the side table, so a close or a crash resumes where it stopped, and nothing
of the new model reaches ``chunks`` before the swap: a library never mixes two models.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import threading
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import duckdb
import numpy as np

from core.embedding.batching import QUERY_TEXTS
from core.embedding.models import Embedder
from core.errors import LecternError
from core.indexing.indexer import Controls
from core.indexing.threads import lower_thread_priority
from core.indexing.throttle import Throttle
from core.store.reembed import ReembedStore

log = logging.getLogger(__name__)

BATCH_CHUNKS = 32  # chunks read and stored per round
# Passages per call into the model: stopping (at close), the throttle and the old model's
# queries on a busy CPU wait at most one such call (about a second on one core).
SLICE_TEXTS = 8
SWITCH_RETRY_S = 1.0  # indexing holds the library: try the switch again this often
CLOSE_WAIT_S = 1.0  # close waits this long for a call into the model to return
# At exit, a worker still in the model (or loading it) is waited for this long: torch's
# native threads abort the process if the interpreter ends under them.
EXIT_WAIT_S = 60.0
_workers: weakref.WeakSet[Reembedding] = weakref.WeakSet()


@atexit.register
def _stop_workers() -> None:
    for worker in list(_workers):
        worker.controls.stop()
    for worker in list(_workers):
        thread = worker._thread
        if thread is not None:
            thread.join(EXIT_WAIT_S)


class SwitchGate:
    """Searches pass freely, except while the model is switched: the swap and the change
    of vectors and model then wait for the searches in flight and hold new ones, so no
    search embeds its query with one model and compares it with the other's vectors."""

    def __init__(self) -> None:
        self._cond = threading.Condition(threading.Lock())
        self._readers = 0
        self._switching = False

    @contextlib.contextmanager
    def reading(self) -> Iterator[None]:
        with self._cond:
            while self._switching:
                self._cond.wait()
            self._readers += 1
        try:
            yield
        finally:
            with self._cond:
                self._readers -= 1
                self._cond.notify_all()

    @contextlib.contextmanager
    def switching(self) -> Iterator[None]:
        with self._cond:
            while self._switching:
                self._cond.wait()
            self._switching = True
            while self._readers:
                self._cond.wait()
        try:
            yield
        finally:
            with self._cond:
                self._switching = False
                self._cond.notify_all()


@dataclass(frozen=True)
class ReembedStatus:
    """Where a model switch stands, for `lectern status` and the app."""

    model: str  # switching to
    active: str  # the model search uses until then
    done: int  # live passages with a new-model vector
    total: int  # live passages
    state: str  # loading | embedding | waiting | paused | switching | failed | stopped
    error: str = ""
    hint: str = ""

    @property
    def sentence(self) -> str:
        if self.state == "failed":
            why = " ".join(p for p in (self.error, self.hint) if p)
            return (
                f"Cannot switch to {self.model}: {why} Search uses {self.active} meanwhile."
            ).replace("  ", " ")
        line = (
            f"Switching to {self.model}: {self.done:,} of {self.total:,} passages "
            f"re-embedded; search uses {self.active} until then"
        )
        if self.state == "stopped":
            line += " (continues while the app, `lectern watch` or `lectern index` runs)"
        elif self.state == "waiting":
            line += " (waiting: the computer is busy)"
        elif self.state == "paused":
            line += " (paused with indexing)"
        elif self.state == "switching":
            line += " (switching once indexing finishes)"
        return line

    def to_json(self) -> dict[str, object]:
        return {
            "model": self.model,
            "from": self.active,
            "done": self.done,
            "total": self.total,
            "state": self.state,
            "error": self.error,
            "hint": self.hint,
            "message": self.sentence,
        }


class Reembedding:
    """The worker: embeds what is pending with the new model, then asks ``switch`` (the
    library) to swap; ``switch`` returns False while indexing holds the library."""

    def __init__(
        self,
        store: ReembedStore,
        target: str,
        active: str,
        load: Callable[[], Embedder],
        switch: Callable[[Embedder], bool],
        throttle: Throttle,
        *,
        batch_size: int = 32,
    ) -> None:
        self.store = store
        self.target = target
        self.active = active
        self._load = load
        self._switch = switch
        self.throttle = throttle
        self.batch_size = batch_size
        self.controls = Controls()
        self.state = "loading"
        self.error: LecternError | None = None
        self.switched = threading.Event()
        self.finished = threading.Event()  # the worker ended: switched, failed or stopped
        # Held around every database access of the worker: close takes it after setting
        # cancel, so the worker never touches a closed database.
        self._db_lock = threading.Lock()
        self._thread: threading.Thread | None = None

    # --- control ------------------------------------------------------------------------

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, daemon=True, name="lectern-reembed")
        _workers.add(self)
        self._thread.start()

    def stop(self) -> None:
        """Stop promptly: a batch in the model is abandoned (stored again next time), a
        write or the switch in progress is waited for."""
        self.controls.stop()
        with self._db_lock:
            pass
        if self._thread is not None:
            self._thread.join(CLOSE_WAIT_S)
        if not self.switched.is_set() and self.state != "failed":
            self.state = "stopped"

    def pause(self) -> None:
        """Hold the worker before its next call into the model (indexing was paused: a
        person who pauses wants the computer back, whatever is using it)."""
        self.controls.pause()

    def resume(self) -> None:
        self.controls.resume()

    def wait(self, timeout: float | None = None) -> bool:
        """Wait for the worker to end; True when the library switched."""
        self.finished.wait(timeout)
        return self.switched.is_set()

    def status(self) -> ReembedStatus:
        done, total = self.store.progress()
        state = self.state
        if state in ("loading", "embedding") and not self.controls.running.is_set():
            state = "paused"
        elif state == "embedding" and self.throttle.waiting:
            state = "waiting"
        error = self.error
        return ReembedStatus(
            self.target,
            self.active,
            done,
            total,
            state,
            error.message if error else "",
            (error.hint or "") if error else "",
        )

    # --- the worker ---------------------------------------------------------------------

    def _cancelled(self) -> bool:
        return self.controls.cancel.is_set()

    def _run(self) -> None:
        # Background work, like the watcher's: the window and a person's questions first.
        lower_thread_priority()
        try:
            self._work()
        except LecternError as exc:
            # Stopped while loading the model (at exit, say) is not a failure to report.
            if not self._cancelled():
                self._fail(exc)
        except (duckdb.Error, OSError) as exc:
            if not self._cancelled():  # a database closed under a stopping worker is not news
                log.exception("re-embedding stopped")
                self._fail(LecternError(f"Re-embedding stopped: {exc}", "Restart Lectern."))
        finally:
            self.finished.set()

    def _fail(self, exc: LecternError) -> None:
        self.error = exc
        self.state = "failed"
        log.warning("switching to %s failed: %s", self.target, exc.message)

    def _work(self) -> None:
        embedder = self._load()
        if embedder.model_id != self.target:
            raise LecternError(
                f"The model loaded is {embedder.model_id}, not {self.target}.",
                "Check embedding_model in settings.json.",
            )
        self.state = "embedding"
        cursor = 0
        pruned = False  # since the last batch stored
        while not self._cancelled():
            with self._db_lock:
                if self._cancelled():
                    return
                batch = self.store.pending(cursor, BATCH_CHUNKS)
            if batch:
                vectors = self._embed(embedder, [u.embedding_text for u in batch])
                if vectors is None:
                    return
                with self._db_lock:
                    if self._cancelled():
                        return
                    self.store.save([u.chunk_id for u in batch], vectors)
                cursor = batch[-1].chunk_id
                pruned = False
                continue
            with self._db_lock:
                if self._cancelled():
                    return
                if not pruned:  # once per pass: the switch itself ignores such rows
                    self.store.prune()
                    pruned = True
                left = self.store.pending(0, 1)
                if not left:
                    self.state = "switching"
                    if self._switch(embedder):
                        self.state = "done"
                        self.switched.set()
                        return
            # Chunks written behind the cursor (none normally) or indexing in progress:
            # look again from the start.
            cursor = 0
            if not left:
                self.controls.cancel.wait(SWITCH_RETRY_S)
            else:
                self.state = "embedding"

    def _embed(self, embedder: Embedder, texts: list[str]) -> np.ndarray | None:
        """The batch's vectors, a slice at a time; None when stopped meanwhile."""
        starts = list(range(0, len(texts), SLICE_TEXTS))
        if len(starts) > 1 and len(texts) - starts[-1] <= QUERY_TEXTS:
            # A tail this short would go through the model's query lane: it joins the
            # slice before it instead.
            starts.pop()
        parts = []
        for i, start in enumerate(starts):
            end = starts[i + 1] if i + 1 < len(starts) else len(texts)
            self.controls.wait_if_paused()
            self.throttle.pace(self.controls)
            if self._cancelled():
                return None
            parts.append(embedder.embed(texts[start:end], batch_size=self.batch_size))
        return np.concatenate(parts)
