"""Embedding stage: the per-machine encoding probe and its cache.

Encoding is nearly all of indexing time, and the fastest way to run the model depends on
the CPU: bf16 ran 2.6x faster than fp32 on one Zen 5 core and 6x slower on a CPU without
AVX512-BF16. So the path (precision, threads, sub-batch size) is measured once per
machine, never guessed from CPU flags, and the decision is kept in a cache file keyed by
the CPU, torch and the model.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from platformdirs import user_cache_dir

from core.config import APP_NAME
from core.embedding.batching import plan_batches
from core.private import make_private_dir, write_private

PRECISIONS = ("fp32", "bf16-autocast", "bf16")
ENCODING_ENV = "LECTERN_ENCODING"  # one of PRECISIONS forces that path; unset or "auto" measures
CACHE_DIR_ENV = "LECTERN_CACHE_DIR"
ENCODING_CACHE_FILE = "encoding.json"
MIN_COSINE = 0.999  # to fp32, on every probe passage and query, or the path is refused
# A reduced-precision path must beat fp32 by this much: timing noise on a busy machine must
# not trade exact vectors for nothing.
FASTER_BY = 1.10
# Sub-batches are sized in padded tokens, so short passages still go in batches large
# enough to keep the model efficient. The smallest budget keeping SUB_BATCH_KEEP of a large
# batch's throughput is picked; a waiting query waits at most one sub-batch.
SUB_BATCH_CANDIDATES = (256, 512, 1024)
SUB_BATCH_KEEP = 0.97
# Used when the path is forced (no probe). Measured here: 256-token passages keep 0.93-1.0
# of batch-32 throughput from 2 passages a batch, 130-token ones from 4 (about 512 tokens).
DEFAULT_SUB_BATCH_TOKENS = 512
PROBE_VERSION = 4  # 2: batches padded to WIDTH_STEP; 3: OpenMP threads spin briefly;
# 4: each less exact path must beat the more exact one chosen (pick_precision)

# Probe passages: rotations of real prose of the kinds people keep (notes, reports, letters,
# manuals), each cut to the model's 256 tokens like a full chunk.
_PROBE_SENTENCES = (
    "The quarterly report shows revenue grew by 12 percent, driven mostly by the new "
    "subscription plans introduced in March.",
    "Before replacing the filter, switch off the pump and wait until the pressure gauge "
    "reads zero.",
    "Dear Ms. Okafor, thank you for your letter of 14 June regarding the renewal of the "
    "lease on the ground-floor unit.",
    "Patients in the treatment group reported fewer headaches after eight weeks, although "
    "the difference was not statistically significant.",
    "The committee agreed to postpone the vote on the library budget until the auditors "
    "have reviewed last year's accounts.",
    "Mix the flour, salt and yeast, then add the warm water slowly and knead for ten "
    "minutes until the dough is smooth.",
    "In 1848 revolutions spread across Europe, from Paris to Vienna, as workers and students "
    "demanded constitutions and the vote.",
    "Our backup policy keeps daily snapshots for two weeks and monthly snapshots for a year, "
    "stored in a second building.",
    "The bridge was closed for inspection after engineers found corrosion on two of the "
    "steel cables supporting the main span.",
    "Remember to bring the signed consent form, your insurance card and a list of the "
    "medicines you currently take.",
    "Sales of electric vehicles doubled in the region, but charging stations remain scarce "
    "outside the larger cities.",
    "The thesis argues that early printing shops shaped spelling more than any grammarian "
    "of the period did.",
    "If the device does not start, hold the power button for fifteen seconds to reset it, "
    "then connect the charger.",
    "Minutes of the meeting: Tomas will draft the grant proposal, and Aiko will collect the "
    "letters of support by Friday.",
    "Soil samples from the northern plots contained more nitrogen, which may explain the "
    "higher wheat yields recorded there.",
    "The contract may be terminated by either party with ninety days' written notice, "
    "except during the first year.",
    "Migrating birds use the Earth's magnetic field, the position of the sun and familiar "
    "landmarks to find their way.",
    "Please review the attached draft and send your comments before the steering group "
    "meets on Tuesday morning.",
    "The museum's new wing displays textiles from West Africa, many of them donated by the "
    "families who made them.",
    "Interest rates rose for the third time this year, and economists expect mortgage costs "
    "to keep climbing.",
)
_PROBE_QUERIES = (
    "when does the lease renewal start",
    "how to reset the device",
    "revenue growth in the quarterly report",
    "nitrogen in soil samples",
)
PROBE_PASSAGES = 8
SUB_BATCH_MIXED = 12


def pick_precision(cpu_by_path: dict[str, float]) -> str:
    """The path to encode with, from each usable path's CPU time on the probe passages
    (those under MIN_COSINE left out). PRECISIONS runs from most to least exact, and each
    step down must be FASTER_BY faster than the path it would replace, not only than
    fp32. On a Zen 4 core the bf16 copy of the model (its residual stream and norms
    rounded too) ran 1.07x autocast's rate at a third of its exactness (cosine to fp32
    0.9999 against 0.99997); it was taken for that, and ranked SciFact no better
    (nDCG@10 test 0.7480 against 0.7491, train 0.7523 against 0.7518)."""
    best = "fp32"
    for precision in PRECISIONS[1:]:
        cpu = cpu_by_path.get(precision)
        if cpu is not None and cpu * FASTER_BY <= cpu_by_path[best]:
            best = precision
    return best


def probe_passages(count: int = PROBE_PASSAGES) -> list[str]:
    sentences = list(_PROBE_SENTENCES)
    return [" ".join(sentences[i:] + sentences[:i]) for i in range(min(count, len(sentences)))]


@dataclass(frozen=True)
class EncodingChoice:
    """How passages are encoded on this machine, and the figures that chose it."""

    precision: str  # one of PRECISIONS
    threads: int  # torch threads for passages; queries use 1
    sub_batch_tokens: int  # padded tokens per sub-batch of an indexing embed()
    source: str  # "measured" (by this process), "cached" or "forced"
    figures: dict[str, Any] = field(default_factory=dict, compare=False)


def probe_tokens_per_s(choice: EncodingChoice | None) -> float | None:
    """Word pieces per second of wall time the probe measured at the chosen precision and
    thread count (None where the path was forced or the figures are missing)."""
    if choice is None:
        return None
    figures = choice.figures
    try:
        per_passage = figures["probe_tokens"] / figures["probe_passages"]
        rate = figures.get("passages_per_s_by_threads", {}).get(str(choice.threads))
        if rate is None and choice.threads == 1:
            rate = figures["passages_per_cpu_s_1_thread"][choice.precision]
    except (KeyError, TypeError, ZeroDivisionError, AttributeError):
        return None
    return float(rate) * per_passage if isinstance(rate, int | float) and rate > 0 else None


def encoding_cache_path() -> Path:
    override = os.environ.get(CACHE_DIR_ENV)
    folder = Path(override).expanduser() if override else Path(user_cache_dir(APP_NAME, False))
    return folder / ENCODING_CACHE_FILE


def cpu_identity() -> tuple[str, str]:
    """CPU model name and feature flags: a new machine, or the same disk moved to another
    CPU, must be measured again."""
    name, flags = "", ""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as handle:
            for line in handle:
                key, _, value = line.partition(":")
                key = key.strip().lower()
                if not name and key in ("model name", "hardware", "cpu part"):
                    name = value.strip()
                elif not flags and key in ("flags", "features"):
                    flags = value.strip()
                if name and flags:
                    break
    except OSError:
        pass
    return name or platform.processor() or platform.machine(), flags


def machine_key(model_id: str) -> dict[str, Any]:
    import torch

    name, flags = cpu_identity()
    return {
        "cpu": name,
        "flags": hashlib.sha256(flags.encode()).hexdigest()[:16],
        "capability": torch.backends.cpu.get_cpu_capability(),
        "torch": torch.__version__,
        "model": model_id,
        "cores": os.cpu_count() or 1,
        "probe": PROBE_VERSION,
    }


def _entry_id(key: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:24]


def read_cached_choice(path: Path, key: dict[str, Any]) -> EncodingChoice | None:
    """The cached decision for ``key``, or None when missing or malformed in any way."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        entry = data["entries"][_entry_id(key)]
        precision, threads, tokens = entry["precision"], entry["threads"], entry["sub_batch_tokens"]
        figures = entry.get("figures", {})
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
    valid = (
        entry.get("key") == key
        and precision in PRECISIONS
        and type(threads) is int
        and 1 <= threads <= (os.cpu_count() or 1)
        and type(tokens) is int
        and tokens >= 1
        and isinstance(figures, dict)
    )
    return EncodingChoice(precision, threads, tokens, "cached", figures) if valid else None


def write_cached_choice(path: Path, key: dict[str, Any], choice: EncodingChoice) -> None:
    """Best effort: a cache that cannot be written only costs the probe at the next start."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        entries = data["entries"] if isinstance(data.get("entries"), dict) else {}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        entries = {}
    entries[_entry_id(key)] = {
        "key": key,
        "precision": choice.precision,
        "threads": choice.threads,
        "sub_batch_tokens": choice.sub_batch_tokens,
        "figures": choice.figures,
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    try:
        make_private_dir(path.parent)
        write_private(path, json.dumps({"entries": entries}, indent=1), durable=False)
    except OSError:
        pass


def measure_encoding(
    fp32_model: Any,
    tokenize: Callable[[list[str]], list[list[int]]],
    forward: Callable[[Any, Sequence[Sequence[int]], str | None], np.ndarray],
    *,
    max_tokens: int,
    fixed_threads: int | None,
) -> tuple[EncodingChoice, Any]:
    """The probe: a few seconds at first start, precision (CPU time, 1 thread), then
    threads and sub-batch size (wall time) on fixed passages of ``max_tokens`` tokens.
    ``forward`` runs a model on token ids at a precision; returns the choice and the
    bf16 copy of the model when that path won (None otherwise)."""
    import copy

    import torch

    started = time.perf_counter()
    passages = tokenize(probe_passages())
    queries = tokenize(list(_PROBE_QUERIES))
    tokens = sum(len(ids) for ids in passages)
    figures: dict[str, Any] = {"probe_passages": len(passages), "probe_tokens": tokens}
    torch.set_num_threads(1)

    def timed(model: Any, precision: str, batch: int, clock: Any) -> tuple[np.ndarray, float]:
        t0 = clock()
        parts = [
            forward(model, passages[i : i + batch], precision)
            for i in range(0, len(passages), batch)
        ]
        return np.concatenate(parts), clock() - t0

    half = len(passages) // 2
    forward(fp32_model, passages[:1], "fp32")  # first call sets up kernels
    reference, fp32_cpu = timed(fp32_model, "fp32", half, time.thread_time)
    reference_q = forward(fp32_model, queries, "fp32")
    rates: dict[str, Any] = {"fp32": round(len(passages) / fp32_cpu, 2)}
    cosines: dict[str, float] = {}
    cpu_by_path: dict[str, float] = {"fp32": fp32_cpu}
    bf16_model = None
    for precision in PRECISIONS[1:]:
        if rates.get("bf16-autocast") == "too slow":
            rates[precision] = "skipped: bf16 kernels slow here"
            continue
        model = fp32_model
        try:
            if precision == "bf16":
                model = copy.deepcopy(fp32_model).to(torch.bfloat16)
            forward(model, passages[:1], precision)
            # Half the passages first: a path already slower than fp32 is dropped
            # there (bf16 without hardware support is several times slower).
            t0 = time.thread_time()
            first = forward(model, passages[:half], precision)
            if time.thread_time() - t0 > fp32_cpu:
                rates[precision] = "too slow"
                continue
            rest = forward(model, passages[half:], precision)
            cpu = time.thread_time() - t0
            vectors = np.concatenate([first, rest])
            query_vectors = forward(model, queries, precision)
        except (RuntimeError, TypeError) as exc:  # no bf16 kernels on this CPU or build
            rates[precision] = f"failed: {exc}"[:200]
            continue
        cosine = float(
            min(
                np.min(np.sum(vectors * reference, axis=1)),
                np.min(np.sum(query_vectors * reference_q, axis=1)),
            )
        )
        rates[precision] = round(len(passages) / cpu, 2)
        cosines[precision] = round(cosine, 6)
        if cosine >= MIN_COSINE:
            cpu_by_path[precision] = cpu
            if precision == "bf16":
                bf16_model = model
    figures["passages_per_cpu_s_1_thread"] = rates
    figures["cosine_min_to_fp32"] = cosines
    best = pick_precision(cpu_by_path)
    bf16_model = bf16_model if best == "bf16" else None  # the copy goes with its path
    model = fp32_model if bf16_model is None else bf16_model

    cores = os.cpu_count() or 1
    if fixed_threads:
        threads = fixed_threads
    else:
        by_threads: dict[str, float] = {}
        best_wall = float("inf")
        for count in sorted({1, 2, cores} & set(range(1, cores + 1))):
            torch.set_num_threads(count)
            forward(model, passages[:1], best)  # starts the thread pool
            t0 = time.perf_counter()
            forward(model, passages[:half], best)
            if time.perf_counter() - t0 > best_wall:
                # Already slower on half the passages: on a busy machine the extra
                # threads wait for cores, and the full run would only cost time.
                by_threads[str(count)] = round(half / (time.perf_counter() - t0), 2)
                continue
            forward(model, passages[half:], best)
            wall = time.perf_counter() - t0
            best_wall = min(best_wall, wall)
            by_threads[str(count)] = round(len(passages) / wall, 2)
        figures["passages_per_s_by_threads"] = by_threads
        fastest = max(by_threads.values())
        # The fewest threads within 5% of the fastest: on a shared machine the extra
        # thread mostly waits for a core.
        threads = min(int(n) for n, rate in by_threads.items() if rate >= 0.95 * fastest)

    # Sub-batch size on passages of mixed length (48 to 256 tokens), as chunks come:
    # short passages are where small batches lose most to per-call overhead.
    torch.set_num_threads(threads)
    clock = time.thread_time if threads == 1 else time.perf_counter
    mixed = [
        ids[: 48 + (max_tokens - 48) * i // (SUB_BATCH_MIXED - 1) - 1] + ids[-1:]
        for i, ids in enumerate(tokenize(probe_passages(SUB_BATCH_MIXED)))
    ]
    lengths = [len(ids) for ids in mixed]

    def rate(budget: int) -> float:
        t0 = clock()
        for batch in plan_batches(lengths, len(mixed), budget):
            forward(model, [mixed[i] for i in batch], best)
        return len(mixed) / (clock() - t0)

    large_budget = sum(lengths)
    large_rate = rate(large_budget)
    by_tokens: dict[str, float] = {str(large_budget): round(large_rate, 2)}
    sub_batch = large_budget
    for budget in SUB_BATCH_CANDIDATES:
        by_tokens[str(budget)] = round(rate(budget), 2)
        if by_tokens[str(budget)] >= SUB_BATCH_KEEP * large_rate:
            sub_batch = budget
            break
    figures["passages_per_s_by_sub_batch_tokens"] = by_tokens
    figures["probe_s"] = round(time.perf_counter() - started, 2)
    choice = EncodingChoice(best, threads, sub_batch, "measured", figures)
    return choice, bf16_model
