"""The documentation stays usable: sizes, the module map, links and generated figures."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
README_LIMIT = 20_000
ARCHITECTURE_LIMIT = 30_000
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")


def _report() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_report", ROOT / "bench" / "report.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_benchmarks_md_is_generated_from_the_recorded_results() -> None:
    report = _report()
    expected = report.render()
    actual = (DOCS / "BENCHMARKS.md").read_text(encoding="utf-8")
    assert actual == expected, (
        "docs/BENCHMARKS.md differs from what bench/report.py writes from bench/results/: "
        "run .venv/bin/python bench/report.py"
    )


def test_every_recorded_result_names_its_date_and_command() -> None:
    for entry in _report().load_results():
        assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", entry["date"]), entry["bench"]
        assert entry["command"].strip(), entry["bench"]
        assert isinstance(entry["result"], dict) and entry["result"], entry["bench"]


def test_readme_is_short_enough_to_read() -> None:
    size = len((ROOT / "README.md").read_text(encoding="utf-8"))
    assert size <= README_LIMIT, f"README.md has {size} characters (at most {README_LIMIT})"


def test_architecture_is_short_enough_to_read() -> None:
    size = len((DOCS / "ARCHITECTURE.md").read_text(encoding="utf-8"))
    assert size <= ARCHITECTURE_LIMIT, (
        f"docs/ARCHITECTURE.md has {size} characters (at most {ARCHITECTURE_LIMIT})"
    )


def _modules() -> list[Path]:
    return sorted(
        path.relative_to(ROOT)
        for package in ("core", "desktop")
        for path in (ROOT / package).rglob("*.py")
        if "__pycache__" not in path.parts
    )


def test_every_module_is_in_the_architecture_map() -> None:
    text = (DOCS / "ARCHITECTURE.md").read_text(encoding="utf-8")
    missing = []
    for path in _modules():
        dotted = ".".join(path.with_suffix("").parts)
        if path.as_posix() not in text and f"`{dotted}`" not in text:
            missing.append(path.as_posix())
    assert not missing, "docs/ARCHITECTURE.md's package map lacks these modules:\n" + "\n".join(
        f"| `{m}` | ... |" for m in missing
    )


def test_every_module_the_map_names_exists() -> None:
    """A module moved or removed leaves no line behind that sends a reader nowhere."""
    text = (DOCS / "ARCHITECTURE.md").read_text(encoding="utf-8")
    named = set(re.findall(r"^\| `((?:core|desktop)/[\w/]+\.py)` \|", text, flags=re.M))
    assert named, "the map's table rows were not found"
    gone = sorted(path for path in named if not (ROOT / path).is_file())
    assert not gone, f"docs/ARCHITECTURE.md's map names modules that do not exist: {gone}"


def _markdown_files() -> list[Path]:
    return [ROOT / "README.md", *sorted(DOCS.rglob("*.md"))]


def test_every_relative_link_points_to_a_file() -> None:
    broken = []
    for doc in _markdown_files():
        for target in LINK.findall(doc.read_text(encoding="utf-8")):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
                continue  # a URL (http:, file:, mailto:) or an anchor in the same file
            path = target.split("#", 1)[0]
            if path and not (doc.parent / path).exists():
                broken.append(f"{doc.relative_to(ROOT)}: {target}")
    assert not broken, "links to missing files:\n" + "\n".join(broken)
