"""Encoding speed: the path measured fastest keeps fp32's vectors, the decision is cached
per machine, batches are sorted by token count, and a query never waits for the indexer."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import numpy as np
import pytest

from core.embedding.batching import WIDTH_STEP, PriorityLane, padded_width, token_fill
from core.embedding.models import DEFAULT_MODEL_ID, SentenceTransformerEmbedder, embed_queries
from core.embedding.probe import (
    MIN_COSINE,
    PRECISIONS,
    _entry_id,
    machine_key,
    pick_precision,
    read_cached_choice,
)

QUERIES = ["how do proteins fold", "vitamin D and bone density", "risk of stroke in adults"]


def scifact_passages(shared_data: Path, count: int) -> list[str]:
    texts = []
    with open(shared_data / "scifact" / "corpus.jsonl", encoding="utf-8") as handle:
        for line in handle:
            doc = json.loads(line)
            texts.append(f"{doc['title']}. {doc['text']}")
            if len(texts) >= count:
                break
    return texts


@pytest.fixture(scope="module")
def cache_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("encoding-cache") / "encoding.json"


@pytest.fixture(scope="module")
def measured(cache_file: Path) -> SentenceTransformerEmbedder:
    return SentenceTransformerEmbedder(cache_path=cache_file)


@pytest.fixture(scope="module")
def fp32() -> SentenceTransformerEmbedder:
    return SentenceTransformerEmbedder(encoding="fp32")


def test_picked_path_keeps_cosine_to_fp32(
    measured: SentenceTransformerEmbedder, fp32: SentenceTransformerEmbedder, shared_data: Path
) -> None:
    choice = measured.encoding
    assert choice.source == "measured" and measured.probe_runs == 1
    assert choice.precision in PRECISIONS
    assert fp32.encoding.precision == "fp32" and fp32.probe_runs == 0
    rates = choice.figures["passages_per_cpu_s_1_thread"]
    assert isinstance(rates["fp32"], float) and set(rates) == set(PRECISIONS)
    passages = scifact_passages(shared_data, 40)
    fast, exact = measured.embed(passages), fp32.embed(passages)
    assert fast.shape == exact.shape == (40, measured.dim)
    assert float(np.min(np.sum(fast * exact, axis=1))) >= MIN_COSINE
    queries_fast, queries_exact = embed_queries(measured, QUERIES), embed_queries(fp32, QUERIES)
    assert float(np.min(np.sum(queries_fast * queries_exact, axis=1))) >= MIN_COSINE


def test_a_less_exact_path_must_beat_the_more_exact_one_not_only_fp32() -> None:
    # CPU seconds on the probe passages, as a Zen 4 core measured them: the bf16 copy of
    # the model 7 % faster than autocast and a third as exact; autocast is kept.
    zen4 = {"fp32": 0.738, "bf16-autocast": 0.375, "bf16": 0.350}
    assert pick_precision(zen4) == "bf16-autocast"
    assert pick_precision(zen4 | {"bf16": 0.30}) == "bf16"  # 1.25x autocast: worth it
    # A path refused for its cosine is not offered; one slower than fp32's margin is not taken.
    assert pick_precision({"fp32": 0.738, "bf16": 0.35}) == "bf16"
    assert pick_precision({"fp32": 0.738, "bf16-autocast": 0.70, "bf16": 0.68}) == "fp32"
    assert pick_precision({"fp32": 0.738, "bf16-autocast": 0.70, "bf16": 0.60}) == "bf16"
    assert pick_precision({"fp32": 0.738}) == "fp32"


def test_decision_is_cached_and_not_measured_again(
    measured: SentenceTransformerEmbedder, cache_file: Path
) -> None:
    entries = json.loads(cache_file.read_text(encoding="utf-8"))["entries"]
    (entry,) = entries.values()
    assert entry["key"] == machine_key(DEFAULT_MODEL_ID)
    assert entry["precision"] == measured.encoding.precision
    assert entry["figures"]["passages_per_cpu_s_1_thread"]["fp32"] > 0
    before = cache_file.read_bytes()

    again = SentenceTransformerEmbedder(cache_path=cache_file)
    assert again.probe_runs == 0 and again.encoding.source == "cached"
    assert (again.encoding.precision, again.encoding.threads, again.encoding.sub_batch_tokens) == (
        measured.encoding.precision,
        measured.encoding.threads,
        measured.encoding.sub_batch_tokens,
    )
    assert cache_file.read_bytes() == before
    vector = embed_queries(again, QUERIES[:1])
    assert float(np.sum(vector * embed_queries(measured, QUERIES[:1]))) >= 0.9999


def test_corrupt_cache_is_ignored_and_measured_again(tmp_path: Path) -> None:
    cache = tmp_path / "encoding.json"
    key = machine_key(DEFAULT_MODEL_ID)
    # Right key, wrong types: not trusted.
    entry = {"key": key, "precision": "bf16", "threads": "two", "sub_batch_tokens": 512}
    cache.write_text(json.dumps({"entries": {_entry_id(key): entry}}), encoding="utf-8")
    assert read_cached_choice(cache, key) is None

    cache.write_text('{"entries": {"abc": [1, 2', encoding="utf-8")
    assert read_cached_choice(cache, key) is None
    embedder = SentenceTransformerEmbedder(cache_path=cache)
    assert embedder.probe_runs == 1 and embedder.encoding.source == "measured"
    cached = read_cached_choice(cache, key)
    assert cached is not None and cached.source == "cached"
    assert (cached.precision, cached.threads, cached.sub_batch_tokens) == (
        embedder.encoding.precision,
        embedder.encoding.threads,
        embedder.encoding.sub_batch_tokens,
    )


def test_token_sorted_batches_return_vectors_in_input_order(
    measured: SentenceTransformerEmbedder, shared_data: Path
) -> None:
    # Characters and word pieces disagree most on numbers and rare words: a sort by
    # characters pads these batches far more than a sort by tokens.
    passages = scifact_passages(shared_data, 30)
    texts = []
    for i, text in enumerate(passages):
        words = text.split()[: 10 + 7 * i]
        texts.append(" ".join(words))
        texts.append(" ".join(f"{i * 7919 + k * 104729:x}-{k}.{i}" for k in range(3 + i)))
    lengths, batches = measured.batch_plan(texts, batch_size=32)
    assert sorted(i for batch in batches for i in batch) == list(range(len(texts)))
    flat = [lengths[i] for batch in batches for i in batch]
    assert flat == sorted(flat)
    by_chars = sorted(range(len(texts)), key=lambda i: -len(texts[i]))
    sizes = [len(batch) for batch in batches]
    char_batches, start = [], 0
    for size in sizes:
        char_batches.append(by_chars[start : start + size])
        start += size
    assert token_fill(lengths, batches) > token_fill(lengths, char_batches)

    together = measured.embed(texts, batch_size=32)
    alone = np.vstack([measured.embed_query([t]) for t in texts])
    assert float(np.min(np.sum(together * alone, axis=1))) >= 0.9999


def test_query_completes_before_a_long_indexing_embed(
    measured: SentenceTransformerEmbedder, shared_data: Path
) -> None:
    passages = scifact_passages(shared_data, 64)
    events: list[str] = []
    started = threading.Event()
    indexer = threading.Thread(
        target=lambda: (measured.embed(passages, batch_size=32), events.append("index done"))
    )

    def on_forward(*_: object) -> None:
        if threading.current_thread() is indexer:
            started.set()

    handle = measured._bert.register_forward_pre_hook(on_forward)
    try:
        indexer.start()
        assert started.wait(timeout=600)
        embed_queries(measured, QUERIES[:1])
        events.append("query done")
        indexer.join(timeout=600)
    finally:
        handle.remove()
    assert events == ["query done", "index done"]


def test_lane_lets_a_waiting_query_in_before_the_bulk_caller_takes_it_again() -> None:
    lane = PriorityLane()
    order: list[str] = []
    query_waiting = threading.Event()
    bulk_holds = threading.Event()
    release_bulk = threading.Event()

    def bulk_caller() -> None:
        with lane.bulk():
            bulk_holds.set()
            release_bulk.wait()
        # Straight back for the next sub-batch, as the indexer does.
        with lane.bulk():
            order.append("bulk")

    def query_caller() -> None:
        query_waiting.set()
        with lane.query():
            order.append("query")

    bulk = threading.Thread(target=bulk_caller)
    bulk.start()
    assert bulk_holds.wait(timeout=60)
    query = threading.Thread(target=query_caller)
    query.start()
    assert query_waiting.wait(timeout=60)
    while True:  # until the query is counted as waiting inside the lane
        with lane._cond:
            if lane._queries_waiting:
                break
        threading.Event().wait(0.001)
    release_bulk.set()
    bulk.join(timeout=60)
    query.join(timeout=60)
    assert order == ["query", "bulk"]


def test_batches_pad_to_a_few_widths_and_keep_each_passage_vector(
    measured: SentenceTransformerEmbedder, shared_data: Path
) -> None:
    # Every length from 1 to the model's 256 word pieces maps to one of 256 / WIDTH_STEP
    # widths, never shorter than the text: oneDNN keeps a kernel per shape.
    widths = {padded_width(n) for n in range(1, 257)}
    assert len(widths) == 256 // WIDTH_STEP and max(widths) == 256
    assert all(padded_width(n) >= n for n in range(1, 257))
    # The padding is masked out: a passage's vector is the same whatever width its batch
    # is padded to (here exact widths against the shipped steps, on passages of many lengths).
    words = " ".join(scifact_passages(shared_data, 3)).split()
    texts = [" ".join(words[: 3 + 11 * i]) for i in range(20)]
    shipped = SentenceTransformerEmbedder(encoding=measured.encoding.precision)
    shipped.width_step = WIDTH_STEP  # float32 pads to the longest text only (``step``)
    stepped = shipped.embed(texts)
    exact = SentenceTransformerEmbedder(encoding=measured.encoding.precision)
    exact.width_step = 1
    assert float(np.min(np.sum(stepped * exact.embed(texts), axis=1))) >= 0.9999
    # Steps are for oneDNN's bfloat16 kernels; float32's BLAS is padded to the longest.
    shipped.width_step = None
    assert (shipped.step("fp32"), shipped.step("bf16"), shipped.step("bf16-autocast")) == (
        1,
        WIDTH_STEP,
        WIDTH_STEP,
    )
