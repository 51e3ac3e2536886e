"""The source keeps its shape: SQL only in core/store/, no Qt in core/, no import cycles.

These read the source rather than run it, so a query added to the indexer or an import
that closes a loop fails here, naming the file, before it spreads.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("core", "desktop")
# A call that runs a query, or opens a database of its own.
_SQL_CALL = re.compile(r"\.(execute|executemany|sql|fetchone|fetchall|fetchdf|fetchnumpy)\(")
_CONNECT = re.compile(r"\bduckdb\.connect\(")


def _sources(package: str) -> list[Path]:
    return sorted((ROOT / package).rglob("*.py"))


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def test_no_module_outside_the_store_runs_sql() -> None:
    offenders = []
    for path in _sources("core") + _sources("desktop"):
        if path.is_relative_to(ROOT / "core" / "store"):
            continue
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if _SQL_CALL.search(line) or _CONNECT.search(line):
                offenders.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert not offenders, "SQL outside core/store/:\n" + "\n".join(offenders)


def test_core_never_imports_qt() -> None:
    offenders = [
        str(path.relative_to(ROOT))
        for path in _sources("core")
        if re.search(r"^\s*(from|import)\s+(PySide6|PyQt|desktop)\b", path.read_text(), re.M)
    ]
    assert not offenders


def _imports(path: Path, known: set[str]) -> set[str]:
    """Project modules ``path`` imports, at the top or inside functions alike."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = (
        _module_name(path) if path.name == "__init__.py" else _module_name(path).rpartition(".")[0]
    )
    found: set[str] = set()
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parent, base] if base else parent)
            names = [base] + [f"{base}.{alias.name}" for alias in node.names]
        for name in names:
            # The most specific project module named (a module, not a name inside it).
            while name and name not in known:
                name = name.rpartition(".")[0]
            if name:
                found.add(name)
    return found


def test_no_import_cycles() -> None:
    paths = {_module_name(p): p for package in PACKAGES for p in _sources(package)}
    known = set(paths)
    graph = {name: _imports(path, known) - {name} for name, path in paths.items()}
    for name in graph:
        # A package importing its own submodules (re-exports) is not a cycle of modules.
        graph[name] = {
            t
            for t in graph[name]
            if not (paths[name].name == "__init__.py" and t.startswith(name + "."))
        }
        graph[name] = {t for t in graph[name] if not name.startswith(t + ".")}

    cycles: list[list[str]] = []
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for target in sorted(graph[node]):
            if state.get(target) == 1:
                cycles.append([*stack[stack.index(target) :], target])
            elif target not in state:
                visit(target)
        stack.pop()
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node)
    assert not cycles, "import cycles:\n" + "\n".join(" -> ".join(c) for c in cycles)


def test_qt_is_imported_through_one_module() -> None:
    shims = {ROOT / "desktop" / "qt.py", ROOT / "desktop" / "qt_pdf.py"}
    offenders = [
        str(path.relative_to(ROOT))
        for path in _sources("desktop")
        if path not in shims
        and re.search(r"^\s*(from|import)\s+PySide6\b", path.read_text(encoding="utf-8"), re.M)
    ]
    assert not offenders, "import Qt from desktop.qt: " + ", ".join(offenders)
