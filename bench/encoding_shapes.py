"""Encoding shapes benchmark: batches padded to WIDTH_STEP word pieces against batches
padded to their longest text only, on the same passages, in interleaved rounds of one
process (the machine is shared, so only the same-run ratio means anything).

oneDNN builds a kernel per input shape and keeps ONEDNN_CACHE_CAPACITY of them (64, so
that searches do not grow the process). Passages come in every length from a few word
pieces to 256, so with exact widths nearly every sub-batch is a shape it no longer holds.
The passages are indexing's own: a heading context and two to five real SciFact
sentences, as bench/indexing.py writes them; they go through ``embed`` in calls of 64, as
the indexer makes them, on the thread count measured for this machine.

    .venv/bin/python bench/encoding_shapes.py                # 300 passages, 6 rounds
    .venv/bin/python bench/encoding_shapes.py --varied       # 30-170 words a passage
    .venv/bin/python bench/encoding_shapes.py --passages 100 --rounds 2

The last line of output is one JSON object with every figure.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.indexing import INDEXER_CALL, chunk_like_texts, raw_encode
from bench.record import emit
from bench.synthetic_library import real_sentences
from core.embedding.batching import WIDTH_STEP, padded_width
from core.embedding.models import SentenceTransformerEmbedder


def encode(
    embedder: SentenceTransformerEmbedder, texts: list[str], step: int
) -> tuple[np.ndarray, float]:
    """The vectors as the indexer would get them (calls of INDEXER_CALL), and the time."""
    embedder.width_step = step
    started = time.perf_counter()
    vectors = raw_encode(embedder, texts)
    return vectors, time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--passages", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=6, help="even: each order as often")
    parser.add_argument(
        "--varied",
        action="store_true",
        help="passages of 30-170 words (up to the model's 256 word pieces), not 2-5 sentences",
    )
    args = parser.parse_args()

    embedder = SentenceTransformerEmbedder()
    rng = random.Random(11)
    texts = chunk_like_texts(args.passages, rng, real_sentences(rng, 20_000))
    if args.varied:  # every width from short notes to full chunks
        texts = [" ".join((t + " " + t).split()[: rng.randint(30, 170)]) for t in texts]
    widths = set()
    for i in range(0, len(texts), INDEXER_CALL):
        lengths, batches = embedder.batch_plan(texts[i : i + INDEXER_CALL])
        widths |= {max(lengths[j] for j in batch) for batch in batches}
    encode(embedder, texts[:INDEXER_CALL], WIDTH_STEP)  # loads the model's kernels once
    encode(embedder, texts[:INDEXER_CALL], 1)
    seconds = {WIDTH_STEP: 0.0, 1: 0.0}
    vectors: dict[int, np.ndarray] = {}
    per_round = []
    for r in range(args.rounds):
        order = (WIDTH_STEP, 1) if r % 2 == 0 else (1, WIDTH_STEP)
        took = {}
        for step in order:
            vectors[step], took[step] = encode(embedder, texts, step)
            seconds[step] += took[step]
        per_round.append(round(took[1] / took[WIDTH_STEP], 3))
        print(
            f"round {r}: step {WIDTH_STEP} {len(texts) / took[WIDTH_STEP]:.1f} passages/s, "
            f"exact widths {len(texts) / took[1]:.1f}",
            file=sys.stderr,
            flush=True,
        )
    stepped_rate = args.rounds * len(texts) / seconds[WIDTH_STEP]
    exact_rate = args.rounds * len(texts) / seconds[1]
    result = {
        "passages": len(texts),
        "rounds": args.rounds,
        "precision": embedder.encoding.precision,
        "threads": embedder.threads,
        "sub_batch_tokens": embedder.encoding.sub_batch_tokens,
        "width_step": WIDTH_STEP,
        "varied": args.varied,
        "distinct_widths_exact": len(widths),
        "distinct_widths_stepped": len({padded_width(w) for w in widths}),
        "stepped_passages_per_s": round(stepped_rate, 2),
        "exact_passages_per_s": round(exact_rate, 2),
        "stepped_vs_exact": round(stepped_rate / exact_rate, 3),
        "stepped_vs_exact_per_round": per_round,
        "cosine_min_stepped_to_exact": round(
            float(np.min(np.sum(vectors[WIDTH_STEP] * vectors[1], axis=1))), 6
        ),
    }
    emit("encoding_shapes", result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
