"""Word-piece states small enough to keep: what the second stage reads instead of encoding.

Late interaction (core/retrieval/second_stage.py) compares every word piece of a question
with every word piece of a passage. Encoding the short list's passages again for each
search was 76-86 % of a search's CPU (issue 47). The states come out of the same forward
pass that makes a passage's pooled vector, so the indexer keeps them at no encoding cost;
what costs is disk, so each state is kept as the sign of its 384 dimensions: 48 bytes a
piece, about 8 KB a passage of 170 pieces, five times the passage's float32 vector.

Sign codes keep late interaction's ranking: the second stage over them scored 0.7526
nDCG@10 on SciFact train against 0.7524 over float16 states (bench/retrieval_tune.py
``pieces``), and 0.748 against 0.749 on test (``lectern eval --beir``). A scale per piece
(the mean of its absolute values, the best one-bit fit) or a second, magnitude bit did not
help on train (0.7523, 0.7515). A state with a dimension exactly 0 reads as negative;
the pooled vector is unaffected.

A question's states stay float32: MaxSim of a float question piece against a sign code is
the cosine up to one factor common to every passage, so rankings compare like for like.
States encoded at search time (a passage stored before this, or from a donor document)
are packed and unpacked the same way, so they score on the stored pieces' scale.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Sequence
from typing import Any

import numpy as np

# Stored in the library's meta beside the model id: a library whose pieces were packed
# another way (or by another model) drops them and packs them again.
CODEC = "sign-1"


def pack(states: np.ndarray) -> bytes:
    """One passage's word-piece states (rows) as bits: 1 where a dimension is positive."""
    return np.packbits(np.asarray(states) > 0, axis=1).tobytes()


def piece_count(blob: bytes, dim: int) -> int:
    return len(blob) // (dim // 8)


def _packed(blobs: Sequence[bytes], dim: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every blob's pieces stacked as packed rows (uint8, writable), the row each blob
    starts at, and its piece count."""
    width = dim // 8
    counts = np.array([len(b) // width for b in blobs], dtype=np.int64)
    starts = np.zeros(len(blobs), dtype=np.int64)
    if len(blobs) > 1:
        np.cumsum(counts[:-1], out=starts[1:])
    # Copied: torch takes only a writable array, and it is a few hundred KB.
    raw = np.frombuffer(b"".join(blobs), dtype=np.uint8).reshape(-1, width).copy()
    return raw, starts, counts


def unpack(blobs: Sequence[bytes], dim: int) -> tuple[np.ndarray, np.ndarray]:
    """Every blob's pieces stacked as rows of +-1/sqrt(dim) (unit length, float32), and
    the row where each blob starts."""
    raw, starts, _ = _packed(blobs, dim)
    return (_bits(raw) * 2.0 - 1.0) / np.float32(np.sqrt(dim)), starts


def _bits(raw: np.ndarray) -> np.ndarray:
    """Packed rows unpacked to 0/1 (float32)."""
    return np.unpackbits(raw, axis=1).astype(np.float32)


def _bit_sums(query: np.ndarray, raw: np.ndarray) -> np.ndarray:
    """``query @ bits.T`` for the 0/1 rows packed in ``raw`` (uint8, a row per piece),
    without unpacking them: each packed byte indexes a table of what its eight bits add
    to each question piece, and a row's product is the sum of its bytes' entries.

    Through torch when it is loaded (it is whenever a model made the question's states),
    on the thread count the question's encoding set; the table is built once a search
    (256 entries a byte position). Unpacking the short list to float32 and multiplying
    took 8.9-10.4 ms of CPU for 30 passages of about 225 pieces, this 2.3-3.0 ms, with
    the same scores to 1e-8. NumPy's BLAS would start threads of its own that spin after the
    product: a search's CPU doubled on a 2-core machine. Without torch: unpacked, by
    NumPy."""
    torch = sys.modules.get("torch")
    if torch is None:
        unpacked: np.ndarray = query @ _bits(raw).T
        return unpacked
    width = raw.shape[1]
    with torch.inference_mode():
        # table[j * 256 + byte, i]: what byte ``byte`` at position j adds to piece i.
        by_position = torch.from_numpy(np.ascontiguousarray(query.T)).reshape(width, 8, -1)
        table = torch.einsum("bk,jki->jbi", _byte_bits(torch), by_position).reshape(width * 256, -1)
        # Made by NumPy: torch's own widening add took ten times as long.
        index = torch.from_numpy((raw + np.arange(0, width * 256, 256)).reshape(-1))
        offsets = torch.arange(0, index.numel(), width)
        sums = torch.nn.functional.embedding_bag(index, table, offsets, mode="sum")
        scores: np.ndarray = sums.T.numpy()
    return scores


@functools.cache
def _byte_bits(torch: Any) -> Any:
    """The eight bits of every byte value, most significant first (packbits' order), as a
    256 x 8 float32 tensor."""
    bits = np.unpackbits(np.arange(256, dtype=np.uint8)[:, None], axis=1)
    return torch.from_numpy(bits.astype(np.float32))


def late_scores(query: np.ndarray, blobs: Sequence[bytes], dim: int) -> list[float]:
    """MaxSim of ``query`` (its word pieces' unit states, float32) against each packed
    passage: the mean over the query's pieces of its best match among the passage's.
    One pass over the whole short list; an empty passage scores 0."""
    if not len(blobs):
        return []
    if not len(query):
        return [0.0] * len(blobs)
    raw, starts, counts = _packed(blobs, dim)
    out = np.zeros(len(blobs), dtype=np.float64)
    filled = counts > 0
    if filled.any():
        query = np.asarray(query, dtype=np.float32)
        # q . (2b - 1) = 2 q.b - sum(q): the product over 0/1 rows, corrected per query
        # piece, where scaling every row first was two more passes over the short list.
        sims = _bit_sums(query, raw)
        best = np.maximum.reduceat(sims, starts[filled], axis=1)
        best = (2.0 * best - query.sum(axis=1, keepdims=True)) / np.sqrt(dim)
        out[filled] = best.mean(axis=0)
    return out.tolist()
