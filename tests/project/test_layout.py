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


# The pipeline's stages, lowest first. A module may import its own stage and any stage
# below it, never one above: the house's arrows all run down. A new top-level module or
# package of core/ must be given a stage here (the test says so).
STAGES: tuple[tuple[str, ...], ...] = (
    # Records, errors, the format table, text and the marks an answer cites with: read by
    # every stage, importing none.
    (
        "core",
        "core.text",
        "core.private",
        "core.offline",
        "core.notices",
        "core.formats",
        "core.errors",
        "core.records",
        "core.citation_marks",
    ),
    # Reading files, cutting passages and talking to a model server need only the above
    # (a server's client reads the settings through a protocol, core.llm.base).
    ("core.ingest", "core.chunking", "core.llm"),
    ("core.config", "core.settings_store", "core.store"),
    ("core.embedding",),
    ("core.retrieval",),
    ("core.indexing",),
    ("core.library",),
    ("core.generation",),
    ("core.evaluation",),
    # The application layer: the typed operations every front end calls, and the services
    # that run a library (watching its folders, its index jobs).
    ("core.app",),
    ("core.ipc",),
    ("core.cli",),
    ("core.__main__", "desktop"),
)


def _stage_of(module: str) -> int | None:
    best: tuple[int, int] | None = None  # (length of the matched name, stage)
    for number, names in enumerate(STAGES):
        for name in names:
            named = module == name or (name != "core" and module.startswith(name + "."))
            if named and (best is None or len(name) > best[0]):
                best = (len(name), number)
    return None if best is None else best[1]


def test_imports_run_down_the_stages() -> None:
    paths = {_module_name(p): p for package in PACKAGES for p in _sources(package)}
    known = set(paths)
    unplaced = sorted(name for name in paths if _stage_of(name) is None)
    assert not unplaced, "give these modules a stage in STAGES: " + ", ".join(unplaced)
    upward = []
    for name, path in sorted(paths.items()):
        own = _stage_of(name)
        assert own is not None
        for target in sorted(_imports(path, known)):
            stage = _stage_of(target)
            if stage is not None and stage > own:
                upward.append(f"{name} (stage {own}) imports {target} (stage {stage})")
    assert not upward, "imports that run up the stages:\n" + "\n".join(upward)


def _pass_through(method: ast.FunctionDef) -> str | None:
    """The ``self.<service>.<method>`` that ``method`` merely hands its own arguments on
    to, or None. A call that adds something of the library's own (another of its parts,
    a value it works out) is wiring, not a pass-through."""
    body = method.body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]  # the docstring
    if len(body) != 1 or not isinstance(body[0], ast.Return | ast.Expr):
        return None
    call = body[0].value
    if not (
        isinstance(call, ast.Call)
        and isinstance(call.func, ast.Attribute)
        and isinstance(call.func.value, ast.Attribute)
        and isinstance(call.func.value.value, ast.Name)
        and call.func.value.value.id == "self"
    ):
        return None
    own = {a.arg for a in (*method.args.posonlyargs, *method.args.args, *method.args.kwonlyargs)}
    handed = [*call.args, *(k.value for k in call.keywords)]
    if all(isinstance(a, ast.Name) and a.id in own - {"self"} for a in handed):
        return f"self.{call.func.value.attr}.{call.func.attr}"
    return None


def test_the_library_has_no_pass_through_methods() -> None:
    """What a service of the library does is asked of the service (``library.files``,
    ``library.collections``, ``library.conversations``): a method of ``Library`` that
    only hands its arguments on to one of them is a second name for the same thing."""
    tree = ast.parse((ROOT / "core" / "library.py").read_text(encoding="utf-8"))
    (library,) = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Library"]
    offenders = [
        f"Library.{node.name} -> {target}"
        for node in library.body
        if isinstance(node, ast.FunctionDef) and (target := _pass_through(node)) is not None
    ]
    assert not offenders, "call the service instead:\n" + "\n".join(offenders)
