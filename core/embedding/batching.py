"""Embedding stage: how the model's work is cut up and shared, whichever path the probe
chose: sub-batches of similar length padded to a few widths (plan_batches, WIDTH_STEP),
the thread count kept to what the cores give now (ThreadChooser), and a person's query
ahead of the indexer's next sub-batch (PriorityLane).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator, Sequence

QUERY_TEXTS = 4  # calls with this few texts are a person waiting: 1 thread, query lane
# On the bfloat16 paths a batch is padded to a multiple of this many word pieces (float32
# pads to its longest text: SentenceTransformerEmbedder.step). oneDNN builds a kernel for
# every input shape and keeps ONEDNN_CACHE_CAPACITY of them; passages come in every length
# from 1 to 256, so with exact widths it kept rebuilding kernels (76-82 distinct widths in
# 300 passages against 12-13). bench/encoding_shapes.py, same process, interleaved, bf16 on
# 2 threads: 1.016-1.11x the passages/s of exact widths over four runs. Padding is masked
# out of attention and pooling, so the vectors do not change (cosine >= 0.99997).
WIDTH_STEP = 16


def padded_width(longest: int, step: int = WIDTH_STEP) -> int:
    """The width a batch whose longest text has ``longest`` word pieces is padded to."""
    return -(-longest // step) * step


def token_fill(lengths: Sequence[int], batches: Sequence[Sequence[int]], step: int = 1) -> float:
    """Share of the padded token slots that hold real tokens, each batch padded to a
    multiple of ``step``."""
    real = sum(lengths[i] for batch in batches for i in batch)
    slots = sum(
        len(batch) * padded_width(max(lengths[i] for i in batch), step)
        for batch in batches
        if batch
    )
    return real / slots if slots else 1.0


def plan_batches(lengths: Sequence[int], max_texts: int, max_tokens: int) -> list[list[int]]:
    """Indices grouped into batches of similar token count: sorted by tokens, each batch
    ending before its padded size (texts x longest) passes ``max_tokens``."""
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    batches: list[list[int]] = []
    current: list[int] = []
    for i in order:
        # Sorted ascending, so the new text is the batch's longest.
        if current and (len(current) >= max_texts or (len(current) + 1) * lengths[i] > max_tokens):
            batches.append(current)
            current = []
        current.append(i)
    if current:
        batches.append(current)
    return batches


class ThreadChooser:
    """The thread count for passages, kept to what the cores give now.

    The probe's count is a measurement of one moment: taken while another program ran, it
    chose one thread, which idle later runs 22 passages/s against 29 on two. So indexing
    keeps measuring: every ``EXPLORE_EVERY`` sub-batches, ``EXPLORE_RUN`` in a row run on
    another candidate count; each count's rate (padded word pieces per second of wall
    time) is a moving average, the first sub-batch after a change left out (its threads
    are waking up), and the fewest threads within 5% of the best rate are used."""

    EXPLORE_EVERY = 32
    EXPLORE_RUN = 4
    KEEP = 0.7  # of the old average at each new sub-batch

    def __init__(self, start: int, cores: int) -> None:
        self.current = start
        self.candidates = sorted({1, 2, cores, start} & set(range(1, max(1, cores) + 1)))
        self._rates: dict[int, float] = {}
        self._turn = 0
        self._last: int | None = None  # the count the previous sub-batch ran on
        self._lock = threading.Lock()

    def pick(self) -> int:
        with self._lock:
            self._turn += 1
            others = [c for c in self.candidates if c != self.current]
            cycle, step = divmod(self._turn, self.EXPLORE_EVERY)
            if others and step >= self.EXPLORE_EVERY - self.EXPLORE_RUN:
                return others[cycle % len(others)]
            return self.current

    def record(self, threads: int, tokens: int, seconds: float) -> None:
        with self._lock:
            changed, self._last = self._last != threads, threads
            if changed or seconds <= 0 or threads not in self.candidates:
                return
            rate = tokens / seconds
            old = self._rates.get(threads)
            self._rates[threads] = rate if old is None else self.KEEP * old + (1 - self.KEEP) * rate
            best = max(self._rates.values())
            self.current = min(c for c, r in self._rates.items() if r >= 0.95 * best)

    @property
    def rates(self) -> dict[int, float]:
        with self._lock:
            return dict(self._rates)


class PriorityLane:
    """One model, two kinds of callers: a person's query runs before the indexer's next
    sub-batch. A plain lock is not enough: the indexing thread releases and re-takes it
    between sub-batches faster than a waiting query thread wakes up, so the query could
    wait for the whole embed() call (6 s median, 12 s max measured while indexing)."""

    def __init__(self) -> None:
        self._cond = threading.Condition(threading.Lock())
        self._busy = False
        self._queries_waiting = 0

    @contextlib.contextmanager
    def query(self) -> Iterator[None]:
        with self._cond:
            self._queries_waiting += 1
            try:
                while self._busy:
                    self._cond.wait()
            finally:
                self._queries_waiting -= 1
            self._busy = True
        try:
            yield
        finally:
            self._release()

    @contextlib.contextmanager
    def bulk(self) -> Iterator[None]:
        with self._cond:
            while self._busy or self._queries_waiting:
                self._cond.wait()
            self._busy = True
        try:
            yield
        finally:
            self._release()

    def _release(self) -> None:
        with self._cond:
            self._busy = False
            self._cond.notify_all()
