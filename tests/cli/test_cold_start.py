"""Cold start: the commands that read by keyword never import the embedding stack.

Importing sentence_transformers (with transformers, torch, scipy and scikit-learn behind
it) is most of a short command's time and memory (issue 33), so keyword search, status,
files, conversations and collections must run without it; a hybrid search still loads
it. Each command runs in a fresh interpreter through the real CLI entry point, which then
reports the modules it imported.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import SAMPLE_DOCS

EMBEDDING_STACK = ("sentence_transformers", "transformers", "torch")

# Runs the CLI as `lectern` would, then prints the top-level packages imported as the
# last line of standard error (standard output is the command's own).
_RUN_AND_REPORT = """
import json, sys
from core.cli.main import main
try:
    code = main(sys.argv[1:])
except SystemExit as exc:
    code = exc.code
sys.stdout.flush()
print(json.dumps(sorted({m.split(".")[0] for m in sys.modules})), file=sys.stderr)
sys.exit(code or 0)
"""


def _imported(home: Path, *args: str) -> tuple[set[str], str]:
    """The packages ``lectern args`` imported, and its standard output."""
    env = dict(os.environ, LECTERN_HOME=str(home), HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    env.pop("OLLAMA_HOST", None)
    done = subprocess.run(
        [sys.executable, "-c", _RUN_AND_REPORT, *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert done.returncode == 0, done.stderr.rsplit("\n[", 1)[0][-3000:]
    return set(json.loads(done.stderr.strip().splitlines()[-1])), done.stdout


@pytest.fixture()
def indexed_home(library, sample_folder: Path, lectern_home: Path) -> Iterator[Path]:
    """The sample documents indexed, the library closed so a command can open it."""
    library.index([sample_folder])
    library.collections.create("policies", [sample_folder])
    library.close()
    yield lectern_home


def test_keyword_commands_never_import_the_embedding_stack(indexed_home: Path) -> None:
    imported, out = _imported(indexed_home, "search", "mileage", "--mode", "bm25", "--json")
    assert not imported & set(EMBEDDING_STACK), sorted(imported & set(EMBEDDING_STACK))
    hits = json.loads(out)["results"]
    assert hits and "expense-limits-note.txt" in {Path(h["document"]).name for h in hits}
    for args in (
        ("search", "mileage", "--mode", "bm25", "--collection", "policies"),
        ("status",),
        ("files",),
        ("conversations", "list"),
        ("collection", "list"),
    ):
        imported, _ = _imported(indexed_home, *args)
        assert not imported & set(EMBEDDING_STACK), (args, sorted(imported & set(EMBEDDING_STACK)))


def test_hybrid_search_still_loads_the_model(indexed_home: Path) -> None:
    imported, out = _imported(indexed_home, "search", "mileage", "--json")
    assert {"transformers", "torch"} <= imported
    # The weights load through transformers alone: sentence-transformers would bring
    # scikit-learn and SciPy, which the encoder never uses.
    assert not imported & {"sentence_transformers", "sklearn"}
    hits = json.loads(out)["results"]
    assert any(h["dense_rank"] is not None for h in hits)  # the meaning list ran


def test_model_loaded_without_sentence_transformers_encodes_as_it_does() -> None:
    """Identical retrieval: the vectors of the model loaded through transformers alone
    (in full precision, as sentence-transformers runs it) are those sentence-transformers'
    own encode() gives for the same folder."""
    from sentence_transformers import SentenceTransformer

    from core.embedding.models import SentenceTransformerEmbedder, bundled_model_path

    texts = [
        p.read_text(encoding="utf-8", errors="replace")[:1500]
        for p in sorted(SAMPLE_DOCS.iterdir())
        if p.suffix in {".txt", ".md", ".html"}
    ] + ["mileage allowance for a private car", "how fast must a SEV1 be acknowledged?"]
    reference = SentenceTransformer(str(bundled_model_path()), device="cpu").encode(
        texts, normalize_embeddings=True
    )
    ours = SentenceTransformerEmbedder(encoding="fp32")
    for vectors in (ours.embed(texts), ours.embed_query(texts[-2:])):
        expected = reference[-len(vectors) :] if len(vectors) == 2 else reference
        assert vectors.shape == expected.shape and vectors.shape[1] == ours.dim == 384
        cosines = np.sum(vectors * expected, axis=1)
        assert cosines.min() >= 0.9999, cosines
