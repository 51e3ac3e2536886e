"""A large library written through the store layer, for benchmarks (freshness, scale).

Building a 100k-chunk index through the model takes hours on 2 CPU cores (~13 chunks/s),
so the base library is written directly through the store layer: real Markdown files on
disk (sections of real SciFact sentences), one chunk per section with its real offsets,
and embeddings computed once by the real model for ``distinct`` section texts and reused
across the files (a section's vector is that of its text without the heading prefix).

With ``noise`` > 0 each reused vector gets seeded Gaussian noise of that norm and is
renormalised (cosine ~ 1 - noise²/2 to the real one). Without it, every copy of a text has
the same vector, so a dense top-10 is a set of exact ties and recall against exact search
means nothing; with it the copies spread around the real vector the way near-duplicate
passages do, and which ten are nearest depends on the index being exact enough.

Each chunk also gets the packed word pieces of its distinct text (core/embedding/pieces.py),
as the meaning pass keeps them for the second stage, unless the library's ``rerank`` is off.

Distinct embeddings and word pieces are cached under ``/tmp/lectern-bench-cache`` (keyed by the texts and
the model), so later runs skip the model.
"""

from __future__ import annotations

import hashlib
import json
import pickle
import random
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from core.embedding.models import PieceEmbedder
from core.embedding.pieces import CODEC as PIECES_CODEC
from core.library import Library
from core.text import split_sentences

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"
CACHE = Path("/tmp/lectern-bench-cache")
SECTIONS_PER_FILE = 50
# Files inserted per transaction: bounds the builder's memory (a 1M-chunk library held at
# once took 5.3 GB, most of it a Python bytes object per embedding).
FILES_PER_BATCH = 500
WORDS = [
    "river",
    "delta",
    "sediment",
    "nitrogen",
    "cohort",
    "enzyme",
    "protein",
    "lattice",
    "glacier",
    "pollen",
    "signal",
    "receptor",
    "isotope",
    "plasma",
    "membrane",
    "cortex",
    "tundra",
    "aquifer",
    "catalyst",
    "genome",
]


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def percentile(values: list[float], q: float) -> float:
    """The nearest-rank percentile (0.0 for no values)."""
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, int(np.ceil(q * len(ordered))) - 1))]


def real_sentences(rng: random.Random, limit: int = 40_000) -> list[str]:
    path = SHARED / "scifact" / "corpus.jsonl"
    sentences: list[str] = []
    if path.exists():
        with open(path, encoding="utf-8") as handle:
            for line in handle:
                text = json.loads(line)["text"]
                sentences.extend(text[s:e] for s, e in split_sentences(text) if 40 < e - s < 300)
                if len(sentences) >= limit:
                    break
    if not sentences:  # no evaluation data here: plain synthetic sentences
        for i in range(5_000):
            words = " ".join(rng.choice(WORDS) for _ in range(14))
            sentences.append(f"Study {i} reports that {words}.")
    return sentences


def train_queries(limit: int | None = None, folder: Path = SHARED / "scifact") -> list[str]:
    """SciFact queries of the train split only (the test split is for evaluation)."""
    train: list[str] = []
    with open(folder / "qrels" / "train.tsv", encoding="utf-8") as handle:
        next(handle)
        for line in handle:
            qid = line.split("\t", 1)[0]
            if qid not in train:
                train.append(qid)
    texts: dict[str, str] = {}
    with open(folder / "queries.jsonl", encoding="utf-8") as handle:
        for line in handle:
            row = json.loads(line)
            texts[str(row["_id"])] = row["text"]
    queries = [texts[q] for q in train if q in texts]
    return queries[:limit] if limit else queries


def distinct_pool(
    library: Library, distinct: int, rng: random.Random
) -> tuple[list[str], list[int], np.ndarray, float]:
    """``distinct`` section texts, their token counts and real embeddings (cached)."""
    sentences = real_sentences(rng)
    embedder = library.embedder
    pool: list[str] = []
    pool_tokens: list[int] = []
    while len(pool) < distinct:
        text = " ".join(rng.sample(sentences, 3))
        count = embedder.count_tokens(text)
        if count <= 180:  # with its heading prefix, well inside the model's 256
            pool.append(text)
            pool_tokens.append(count)
    key = hashlib.sha256(
        ("\n".join(pool) + "\0" + library.index_config).encode("utf-8")
    ).hexdigest()[:24]
    cached = CACHE / f"embeddings-{key}.npy"
    t0 = time.monotonic()
    if cached.exists():
        vectors = np.load(cached)
    else:
        vectors = np.zeros((distinct, embedder.dim), dtype=np.float32)
        for i in range(0, distinct, 64):
            vectors[i : i + 64] = embedder.embed(pool[i : i + 64])
            if i % 640 == 0:
                log(f"  embedded {i + len(pool[i : i + 64])}/{distinct} distinct texts")
        CACHE.mkdir(parents=True, exist_ok=True)
        np.save(cached.with_suffix(".tmp.npy"), vectors)
        cached.with_suffix(".tmp.npy").replace(cached)
    return pool, pool_tokens, vectors, time.monotonic() - t0


def distinct_pieces(library: Library, pool: list[str]) -> list[bytes] | None:
    """The pool texts' packed word pieces (core/embedding/pieces.py), as the meaning pass
    keeps them for the second stage (cached beside the embeddings); None for a model
    without them."""
    embedder = library.embedder
    if not isinstance(embedder, PieceEmbedder):
        return None
    key = hashlib.sha256(
        ("\n".join(pool) + "\0" + library.index_config + "\0" + PIECES_CODEC).encode("utf-8")
    ).hexdigest()[:24]
    cached = CACHE / f"pieces-{key}.pkl"
    if cached.exists():
        with open(cached, "rb") as handle:
            return list(pickle.load(handle))
    pieces: list[bytes] = []
    for i in range(0, len(pool), 64):
        pieces.extend(embedder.embed_with_pieces(pool[i : i + 64])[1])
        if i % 640 == 0:
            log(f"  word pieces of {i + len(pool[i : i + 64])}/{len(pool)} distinct texts")
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(cached.with_suffix(".tmp"), "wb") as handle:
        pickle.dump(pieces, handle)
    cached.with_suffix(".tmp").replace(cached)
    return pieces


def perturb(base: np.ndarray, noise: float, rng: np.random.Generator) -> np.ndarray:
    """Unit vectors near ``base``: Gaussian noise of norm ~``noise``, renormalised."""
    if noise <= 0:
        return base.astype(np.float32)
    scale = np.float32(noise / np.sqrt(base.shape[1]))  # a float64 scalar would widen
    out = base.astype(np.float32) + rng.standard_normal(base.shape, dtype=np.float32) * scale
    out /= np.linalg.norm(out, axis=1, keepdims=True)
    return out.astype(np.float32, copy=False)


def _batches(files: int) -> Iterator[range]:
    for start in range(0, files, FILES_PER_BATCH):
        yield range(start, min(files, start + FILES_PER_BATCH))


def build_base(
    library: Library,
    corpus: Path,
    chunks: int,
    distinct: int,
    rng: random.Random,
    *,
    noise: float = 0.0,
    seed: int = 0,
    build_vectors: bool = True,
) -> dict[str, float]:
    """Write the files and insert their documents, text and chunks in batches, then build
    the keyword index and (unless ``build_vectors`` is false) the vector index."""
    pool, pool_tokens, vectors, embed_s = distinct_pool(library, distinct, rng)
    # Word pieces are reused per distinct text like the vectors (the second stage reads
    # them); a library that keeps none (``rerank`` off) gets none.
    pieces = distinct_pieces(library, pool) if library.settings.rerank else None
    noise_rng = np.random.default_rng(seed)
    files = max(1, -(-chunks // SECTIONS_PER_FILE))
    folder = str(corpus)
    write_files_s = insert_s = 0.0
    for batch in _batches(files):
        t0 = time.monotonic()
        cur = library.db.cursor()
        doc_ids = [
            r[0]
            for r in cur.execute(
                "SELECT nextval('document_ids') FROM range(?)", [len(batch)]
            ).fetchall()
        ]
        chunk_ids = [
            r[0]
            for r in cur.execute(
                "SELECT nextval('chunk_ids') FROM range(?)", [len(batch) * SECTIONS_PER_FILE]
            ).fetchall()
        ]
        docs: dict[str, list] = {k: [] for k in ("id", "path", "size", "mtime", "hash", "title")}
        texts: list[str] = []
        rows: dict[str, list] = {
            k: []
            for k in ("id", "document_id", "ordinal", "text", "context", "start", "end", "heading")
        }
        picks: list[int] = []
        tokens: list[int] = []
        for n, f in enumerate(batch):
            title = f"Research notes {f}"
            parts = [f"# {title}\n"]
            offset = len(parts[0]) + 1
            sections = []
            for s in range(SECTIONS_PER_FILE):
                k = rng.randrange(distinct)
                heading = f"## Finding {f}.{s}\n\n"
                start = offset + len(heading)
                sections.append((s, k, start, start + len(pool[k]), f"Finding {f}.{s}"))
                parts.append(heading + pool[k] + "\n")
                offset += len(heading) + len(pool[k]) + 1 + 1
            text = "\n".join(parts)
            path = corpus / f"notes-{f:05d}.md"
            path.write_text(text, encoding="utf-8")
            st = path.stat()
            doc_id = doc_ids[n]
            docs["id"].append(doc_id)
            docs["path"].append(str(path))
            docs["size"].append(st.st_size)
            docs["mtime"].append(st.st_mtime)
            docs["hash"].append(hashlib.sha256(text.encode("utf-8")).hexdigest())
            docs["title"].append(title)
            texts.append(text)
            for s, k, start, end, heading in sections:
                assert text[start:end] == pool[k]
                rows["id"].append(chunk_ids[n * SECTIONS_PER_FILE + s])
                rows["document_id"].append(doc_id)
                rows["ordinal"].append(s)
                rows["text"].append(pool[k])
                rows["context"].append(library.chunker.context_for(title, (title, heading)))
                rows["start"].append(start)
                rows["end"].append(end)
                rows["heading"].append(json.dumps([title, heading]))
                picks.append(k)
                tokens.append(pool_tokens[k])
        matrix = perturb(vectors[np.array(picks)], noise, noise_rng)
        write_files_s += time.monotonic() - t0

        t0 = time.monotonic()
        # Bulk inserts from numpy columns (DuckDB scans them in place; per-row is ~1000x
        # slower).
        new_docs = {  # read by DuckDB's replacement scan
            "id": np.array(docs["id"], dtype=np.int64),
            "path": np.array(docs["path"], dtype=object),
            "size": np.array(docs["size"], dtype=np.int64),
            "mtime": np.array(docs["mtime"], dtype=np.float64),
            "hash": np.array(docs["hash"], dtype=object),
            "title": np.array(docs["title"], dtype=object),
            "text": np.array(texts, dtype=object),
        }
        new_chunks = {  # read by DuckDB's replacement scan
            "id": np.array(rows["id"], dtype=np.int64),
            "document_id": np.array(rows["document_id"], dtype=np.int64),
            "ordinal": np.array(rows["ordinal"], dtype=np.int32),
            "text": np.array(rows["text"], dtype=object),
            "context": np.array(rows["context"], dtype=object),
            "start_char": np.array(rows["start"], dtype=np.int64),
            "end_char": np.array(rows["end"], dtype=np.int64),
            "heading_path": np.array(rows["heading"], dtype=object),
            "token_count": np.array(tokens, dtype=np.int32),
            "embedding": np.array([v.tobytes() for v in matrix], dtype=object),
        }
        with library.db.transaction() as tx:
            tx.execute(
                """INSERT INTO documents(id, path, folder, size, mtime, content_hash, type,
                       title, pages, state, reason, chunks, index_config, indexed_at)
                   SELECT id, path, ?, size, mtime, hash, 'md', title, 0, 'indexed', '', ?, ?,
                       current_timestamp FROM new_docs""",
                [folder, SECTIONS_PER_FILE, library.index_config],
            )
            tx.execute("INSERT INTO document_text SELECT id, text, '[]' FROM new_docs")
            tx.execute(
                """INSERT INTO chunks(id, document_id, ordinal, text, context, start_char,
                       end_char, page_start, page_end, heading_path, token_count, embedding)
                   SELECT id, document_id, ordinal, text, context, start_char, end_char, NULL,
                       NULL, heading_path, token_count, embedding::BLOB FROM new_chunks"""
            )
            if pieces is not None:
                new_pieces = {  # noqa: F841 - read by DuckDB's replacement scan
                    "chunk_id": np.array(rows["id"], dtype=np.int64),
                    "pieces": np.array([pieces[k] for k in picks], dtype=object),
                }
                tx.execute("INSERT INTO chunk_pieces SELECT chunk_id, pieces FROM new_pieces")
            version = int(library.db.get_meta("content_version", "0") or 0) + 1
            library.db.set_meta("content_version", str(version), tx)
        del new_docs, new_chunks, matrix
        insert_s += time.monotonic() - t0
        if batch.stop % (FILES_PER_BATCH * 10) == 0 or batch.stop == files:
            log(f"  inserted {batch.stop * SECTIONS_PER_FILE}/{files * SECTIONS_PER_FILE} chunks")
    t0 = time.monotonic()
    library.db.checkpoint()
    insert_s += time.monotonic() - t0

    t0 = time.monotonic()
    library.keyword.refresh(force_merge=True)
    fts_s = time.monotonic() - t0
    vectors_s = 0.0
    if build_vectors:
        t0 = time.monotonic()
        library.vectors.reconcile()  # every chunk is missing from the empty file: a full build
        vectors_s = time.monotonic() - t0
    return {
        "files": files,
        "distinct_embeddings": distinct,
        "embedding_noise": noise,
        "embed_distinct_s": round(embed_s, 1),
        "write_files_s": round(write_files_s, 1),
        "insert_s": round(insert_s, 1),
        "fts_base_build_s": round(fts_s, 1),
        "vector_index_build_s": round(vectors_s, 1),
    }
